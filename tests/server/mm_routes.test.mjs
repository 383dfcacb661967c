// llama.cpp's multimodal prompt object on /v1/completions with the official
// `openai` npm client (tests/test_server_mm_routes.sh: BASE_URL, MODEL,
// IMG_A a base64 file, WANT_A what `inflight run --image` gives): the
// client sends the object as it is; streamed and whole answers agree.
import { readFileSync } from 'node:fs';
import { MODEL, client, check, test, expectError, finish } from './harness.mjs';

const A = readFileSync(process.env.IMG_A, 'utf8').trim();
const prompt = { prompt_string: 'Once upon a time <__media__> and', multimodal_data: [A] };

await test('completions with a prompt object', async () => {
  const r = await client.completions.create({ model: MODEL, prompt, max_tokens: 8, temperature: 0 });
  check('the text inflight run gives', r.choices[0].text === process.env.WANT_A, r.choices[0].text);
  check('the prompt counts the image rows', r.usage.prompt_tokens > 16, r.usage);
  const s = await client.completions.create({ model: MODEL, prompt, max_tokens: 8, temperature: 0, stream: true });
  let text = '';
  for await (const ev of s) text += ev.choices[0].text;
  check('streamed: the same text', text === process.env.WANT_A, text);
});

await test('bad prompt objects are 400 naming the field', async () => {
  await expectError('a bad image', () => client.completions.create({ model: MODEL, max_tokens: 4,
    prompt: { prompt_string: 'x <__media__>', multimodal_data: ['iVBORw0KGgo='] } }), 400, 'prompt', 'images[0]');
  await expectError('no prompt_string', () => client.completions.create({ model: MODEL, max_tokens: 4,
    prompt: { multimodal_data: [A] } }), 400, 'prompt', 'prompt_string');
});

finish();
