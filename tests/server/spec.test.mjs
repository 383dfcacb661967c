// Speculative decoding over HTTP, run by tests/test_server.sh against a
// server started with --spec-type ngram: with the official openai client,
// OpenAI's `prediction` (client drafts) and llama-server's speculative.*
// fields leave every output exactly as without them (greedy and seeded),
// the usage reports the prediction's kept and rejected tokens, /metrics
// counts drafted and kept tokens, and bad values get a 400 naming the field.
import { BASE, MODEL, KEY, client, check, test, expectError, finish } from './harness.mjs';

async function metric(name) {
  const text = await (await fetch(`${BASE}/metrics`, { headers: { Authorization: `Bearer ${KEY}` } })).text();
  let sum = 0;
  for (const line of text.split('\n'))
    if (line.startsWith(name + '{') || line.startsWith(name + ' ')) sum += Number(line.split(' ').pop());
  return sum;
}

const base = { model: MODEL, max_tokens: 120, temperature: 0, ignore_eos: true };
const prompt = 'Once upon a time';

await test('prediction: same text, and the usage says what was kept', async () => {
  const plain = await client.completions.create({ ...base, prompt, 'speculative.n_max': 0 });
  const text = plain.choices[0].text;
  check('plain run has no prediction details', plain.usage.completion_tokens_details === undefined, plain.usage);
  const d0 = await metric('inflight_spec_draft_tokens_total');
  const a0 = await metric('inflight_spec_accepted_tokens_total');
  const chat = await client.chat.completions.create({
    ...base, messages: [{ role: 'user', content: prompt }], 'speculative.n_max': 0,
  });
  const withPred = await client.completions.create({ ...base, prompt, prediction: { type: 'content', content: text } });
  check('completions with its own output as prediction: same text', withPred.choices[0].text === text,
    { a: text.slice(0, 60), b: withPred.choices[0].text.slice(0, 60) });
  const det = withPred.usage.completion_tokens_details;
  check('usage.completion_tokens_details.accepted_prediction_tokens > 0', det && det.accepted_prediction_tokens > 50, det);
  check('usage.completion_tokens_details.rejected_prediction_tokens >= 0', det && det.rejected_prediction_tokens >= 0, det);
  // the engine publishes its counters after the step that sent the last
  // response: give it a moment
  let d1 = 0, a1 = 0;
  for (let t = 0; t < 50; t++) {
    d1 = await metric('inflight_spec_draft_tokens_total');
    a1 = await metric('inflight_spec_accepted_tokens_total');
    if (det && d1 - d0 >= det.accepted_prediction_tokens + det.rejected_prediction_tokens &&
        a1 - a0 >= det.accepted_prediction_tokens) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  check('/metrics counts the drafts', d1 - d0 >= det.accepted_prediction_tokens + det.rejected_prediction_tokens, { d0, d1, det });
  check('/metrics counts the kept drafts', a1 - a0 >= det.accepted_prediction_tokens && a1 - a0 <= d1 - d0, { a0, a1 });
  // a prediction as text parts, half wrong: the same output
  const words = text.split(' ');
  const wrong = words.map((w, i) => (i % 3 === 1 ? 'zebra' : w)).join(' ');
  const parts = await client.completions.create({
    ...base, prompt, prediction: { type: 'content', content: [{ type: 'text', text: wrong.slice(0, 40) }, { type: 'text', text: wrong.slice(40) }] },
  });
  check('a partly wrong prediction in text parts: same text', parts.choices[0].text === text);
  // chat, streamed, with a prediction
  const chatText = chat.choices[0].message.content;
  const stream = await client.chat.completions.create({
    ...base, messages: [{ role: 'user', content: prompt }], stream: true, stream_options: { include_usage: true },
    prediction: { type: 'content', content: chatText },
  });
  let got = '', usage = null;
  for await (const c of stream) {
    for (const ch of c.choices) got += ch.delta.content || '';
    if (c.usage) usage = c.usage;
  }
  check('chat stream with a prediction: same text', got === chatText, { a: chatText.slice(0, 50), b: got.slice(0, 50) });
  check('chat stream usage has the prediction details', usage && usage.completion_tokens_details &&
    usage.completion_tokens_details.accepted_prediction_tokens > 0, usage);
});

await test('server n-gram speculation: same output, greedy and seeded', async () => {
  for (const sampling of [{ temperature: 0 }, { temperature: 0.8, top_p: 0.9, seed: 7 }]) {
    const off = await client.completions.create({ ...base, ...sampling, prompt, 'speculative.n_max': 0, logprobs: 1 });
    const d0 = await metric('inflight_spec_draft_tokens_total');
    const on = await client.completions.create({ ...base, ...sampling, prompt, 'speculative.n_max': 8, 'speculative.n_min': 1, logprobs: 1 });
    const d1 = await metric('inflight_spec_draft_tokens_total');
    check(`ngram ${sampling.temperature ? 'seeded' : 'greedy'}: same text`, on.choices[0].text === off.choices[0].text);
    check(`ngram ${sampling.temperature ? 'seeded' : 'greedy'}: same log-probs`,
      JSON.stringify(on.choices[0].logprobs.token_logprobs) === JSON.stringify(off.choices[0].logprobs.token_logprobs));
    if (!sampling.temperature) check('ngram drafts were run', d1 > d0, { d0, d1 });
  }
  // once the counter has settled (the last request's step published)
  let d0 = await metric('inflight_spec_draft_tokens_total');
  for (let t = 0; t < 20; t++) {
    await new Promise((r) => setTimeout(r, 100));
    const d = await metric('inflight_spec_draft_tokens_total');
    if (d === d0) break;
    d0 = d;
  }
  await client.completions.create({ ...base, prompt, 'speculative.n_max': 0 });
  await new Promise((r) => setTimeout(r, 300));
  check('speculative.n_max 0 runs no drafts', (await metric('inflight_spec_draft_tokens_total')) === d0);
});

await expectError('speculative.n_max 99: 400', () => client.completions.create({ ...base, prompt, 'speculative.n_max': 99 }), 400, 'speculative.n_max');
await expectError('speculative.p_min 2: 400', () => client.completions.create({ ...base, prompt, 'speculative.p_min': 2 }), 400, 'speculative.p_min');
await expectError('prediction of another type: 400', () => client.completions.create({ ...base, prompt, prediction: { type: 'text', content: 'x' } }), 400, 'prediction');
await expectError('prediction content a number: 400', () => client.completions.create({ ...base, prompt, prediction: { type: 'content', content: 5 } }), 400, 'prediction');
await expectError('prediction part without text: 400', () => client.completions.create({ ...base, prompt, prediction: { type: 'content', content: [{ type: 'text' }] } }), 400, 'prediction');
// the refusals changed nothing: a request is served
const after = await client.completions.create({ ...base, prompt, max_tokens: 5 });
check('served after the refusals', after.usage.completion_tokens === 5);
finish();
