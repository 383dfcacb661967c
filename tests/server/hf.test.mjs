// Hugging Face's JavaScript client (@huggingface/inference) against a plain
// `inflight serve -m MODEL`, as a new user would point it at a local
// endpoint. With an endpointUrl the client posts to /v1/completions and
// /v1/chat/completions, sends the URL itself as `model`, and forwards TGI's
// parameters (do_sample, seed, stop, max_new_tokens renamed max_tokens).
// Its textGenerationStream yields the server's events as they are: for an
// endpoint URL these are OpenAI completion chunks, so the text is
// choices[0].text. GREEDY is `inflight run --temp 0` on the same prompt and
// length (from tests/test_server.sh).
import { InferenceClient, InferenceClientProviderApiError } from '@huggingface/inference';
import { BASE, MODEL, check, test, finish } from './harness.mjs';

const hf = new InferenceClient(undefined, { endpointUrl: BASE });
const PROMPT = 'Once upon a time';
const N = Number(process.env.GREEDY_N || 20);
const GREEDY = process.env.GREEDY;

async function joinStream(it, pick) {
  let text = '', events = 0;
  for await (const ev of it) { events++; text += pick(ev) ?? ''; }
  return { text, events };
}

await test('textGeneration: greedy equals inflight run --temp 0', async () => {
  const out = await hf.textGeneration({ inputs: PROMPT, parameters: { max_new_tokens: N, do_sample: false } });
  check('textGeneration greedy text', typeof GREEDY === 'string' && GREEDY.length > 0 && out.generated_text === GREEDY,
    { got: out.generated_text, want: GREEDY });
  // return_full_text is the prompt followed by the same text
  const full = await hf.textGeneration({
    inputs: PROMPT, parameters: { max_new_tokens: N, do_sample: false, return_full_text: true } });
  check('textGeneration return_full_text', full.generated_text === PROMPT + GREEDY, full.generated_text);
});

await test('textGenerationStream joins to the greedy text', async () => {
  const it = hf.textGenerationStream({ inputs: PROMPT, parameters: { max_new_tokens: N, do_sample: false } });
  const { text, events } = await joinStream(it, (ev) => ev.choices && ev.choices[0] && ev.choices[0].text);
  check('textGenerationStream text', text === GREEDY, { text, want: GREEDY });
  check('textGenerationStream came in several events', events > 1, events);
});

await test('a seeded sample is reproducible', async () => {
  const run = (seed) => hf.textGeneration({
    inputs: PROMPT, parameters: { max_new_tokens: N, do_sample: true, seed, temperature: 1.0 } });
  const [a, b, c] = [await run(42), await run(42), await run(7)];
  check('same seed, same text', a.generated_text === b.generated_text, [a, b]);
  check('another seed, another text', a.generated_text !== c.generated_text, [a, c]);
  check('a sample is not the greedy text', a.generated_text !== GREEDY || c.generated_text !== GREEDY, [a, c]);
});

await test('chatCompletion and chatCompletionStream', async () => {
  const args = { messages: [{ role: 'user', content: 'Tell me a story' }], max_tokens: 12, temperature: 0 };
  const out = await hf.chatCompletion(args);
  const msg = out.choices && out.choices[0] && out.choices[0].message;
  check('chatCompletion content', msg && typeof msg.content === 'string' && msg.content.length > 0, out);
  check('chatCompletion finish_reason', ['length', 'stop'].includes(out.choices[0].finish_reason), out.choices[0]);
  // the client sent the endpoint URL as model; the reply names what answered
  check('chatCompletion model is the served name', out.model === MODEL, out.model);
  const { text } = await joinStream(hf.chatCompletionStream(args),
    (ev) => ev.choices && ev.choices[0] && ev.choices[0].delta && ev.choices[0].delta.content);
  check('chatCompletionStream joins to the same text', text === msg.content, { text, want: msg && msg.content });
});

await test('a bad parameter is an error the client surfaces', async () => {
  try {
    await hf.textGeneration({ inputs: PROMPT, parameters: { max_new_tokens: 4, temperature: 5 } });
    check('textGeneration temperature 5 fails', false, 'no error');
  } catch (e) {
    const body = e.httpResponse && e.httpResponse.body;
    check('textGeneration temperature 5: a 400 naming temperature',
      e instanceof InferenceClientProviderApiError && e.httpResponse.status === 400 &&
      body && body.error && body.error.param === 'temperature', { msg: String(e), body });
  }
  try {
    const it = hf.textGenerationStream({ inputs: PROMPT, parameters: { max_new_tokens: 4, do_sample: 'no' } });
    for await (const ev of it) void ev;
    check('textGenerationStream do_sample "no" fails', false, 'no error');
  } catch (e) {
    check('textGenerationStream do_sample "no": the message names do_sample',
      e instanceof InferenceClientProviderApiError && /do_sample/.test(e.message), String(e));
  }
  try {
    await hf.chatCompletion({ messages: [{ role: 'user', content: 'x' }], max_tokens: 100000 });
    check('chatCompletion max_tokens over the context fails', false, 'no error');
  } catch (e) {
    check('chatCompletion max_tokens over the context: a 400 the client reports',
      e instanceof InferenceClientProviderApiError && e.httpResponse.status === 400 &&
      e.httpResponse.body && e.httpResponse.body.error && e.httpResponse.body.error.param === 'max_tokens',
      { msg: String(e), body: e.httpResponse && e.httpResponse.body });
  }
});

finish();
