// Images over OpenAI's chat API with the official `openai` npm client:
// image_url parts as PNG/JPEG data URLs on a server started with --mmproj
// (tests/test_server_mm.sh: BASE_URL, MODEL, IMG_A, IMG_B, JPEG: base64
// files). Results are deterministic and batch invariant; bad images and
// remote URLs are 400 and the server keeps serving.
import { readFileSync } from 'node:fs';
import { MODEL, client, check, test, expectError, finish } from './harness.mjs';

const b64 = (f) => readFileSync(f, 'utf8').trim();
const A = `data:image/png;base64,${b64(process.env.IMG_A)}`;
const B = `data:image/png;base64,${b64(process.env.IMG_B)}`;
const J = `data:image/jpeg;base64,${b64(process.env.JPEG)}`;

const ask = (url, text = 'Once upon a time', extra = {}) => client.chat.completions.create({
  model: MODEL, max_tokens: 10, temperature: 0, logprobs: true, ignore_eos: true,
  messages: [{ role: 'user', content: [{ type: 'text', text }, { type: 'image_url', image_url: { url } }] }],
  ...extra,
});
const lps = (r) => r.choices[0].logprobs.content.map((t) => t.logprob);

let alone;
await test('an image, twice: the same tokens and log-probs', async () => {
  alone = await ask(A);
  const again = await ask(A);
  check('image chat answers', alone.choices[0].message.content.length > 0 && alone.usage.completion_tokens === 10, alone.usage);
  check('image chat counts the image rows in the prompt', alone.usage.prompt_tokens > 16, alone.usage);
  check('the same image again: the same log-probs', JSON.stringify(lps(again)) === JSON.stringify(lps(alone)), [lps(alone), lps(again)]);
  const other = await ask(B);
  check('another image: other log-probs', JSON.stringify(lps(other)) !== JSON.stringify(lps(alone)));
  const jpeg = await ask(J);
  check('a JPEG data URL works', jpeg.usage.completion_tokens === 10, jpeg.usage);
  const text = await client.chat.completions.create({ model: MODEL, max_tokens: 10, temperature: 0, logprobs: true, ignore_eos: true,
    messages: [{ role: 'user', content: 'Once upon a time' }] });
  check('the image changes the answer', JSON.stringify(lps(text)) !== JSON.stringify(lps(alone)));
});

await test('batch invariance: the image request among 15 others', async () => {
  const others = [];
  for (let i = 0; i < 15; i++) {
    if (i % 3 === 0) others.push(client.chat.completions.create({ model: MODEL, max_tokens: 12, temperature: 0, ignore_eos: true,
      messages: [{ role: 'user', content: `Tell me story number ${i}` }] }));
    else others.push(ask(i % 2 ? B : J, `story ${i}`, { max_tokens: 12 }));
  }
  const mine = ask(A);
  const all = await Promise.all([mine, ...others]);
  check('the image request among 15: bitwise the same log-probs', JSON.stringify(lps(all[0])) === JSON.stringify(lps(alone)), [lps(alone), lps(all[0])]);
  check('the image request among 15: the same text', all[0].choices[0].message.content === alone.choices[0].message.content);
  check('all 16 answered', all.every((r) => r.choices[0].finish_reason === 'length'));
});

await test('streaming with an image', async () => {
  const s = await ask(A, 'Once upon a time', { stream: true });
  let text = '';
  for await (const c of s) text += c.choices[0]?.delta?.content || '';
  check('streamed image chat equals the whole one', text === alone.choices[0].message.content, text);
});

const bad = (url) => () => ask(url);
await expectError('a remote URL is 400', bad('https://example.com/cat.png'), 400, 'messages', 'does not fetch remote URLs');
await expectError('a GIF data URL is 400', bad('data:image/gif;base64,R0lGODlhAQABAAAAACw='), 400, 'messages', 'PNG and JPEG');
await expectError('bad base64 is 400', bad('data:image/png;base64,@@@@'), 400, 'messages', 'base64');
await expectError('not base64 is 400', bad('data:image/png,abc'), 400, 'messages', 'base64');
await expectError('a corrupt PNG is 400', bad(`data:image/png;base64,${Buffer.from('\x89PNG\r\n\x1a\n not really a png at all').toString('base64')}`), 400, 'messages', 'images[0]');
await expectError('a truncated PNG is 400', bad(A.slice(0, A.length / 2 - (A.length / 2) % 4)), 400, 'messages', 'images[0]');
await expectError('no url is 400', () => client.chat.completions.create({ model: MODEL, max_tokens: 4,
  messages: [{ role: 'user', content: [{ type: 'image_url', image_url: {} }] }] }), 400, 'messages', 'image_url');
await expectError('an unknown part type is 400', () => client.chat.completions.create({ model: MODEL, max_tokens: 4,
  messages: [{ role: 'user', content: [{ type: 'input_audio', input_audio: {} }] }] }), 400, 'messages', 'parts are supported');

await test('bad images among good requests: nothing lost', async () => {
  const corrupt = `data:image/png;base64,${Buffer.from('\x89PNG\r\n\x1a\n garbage').toString('base64')}`;
  const all = await Promise.allSettled([ask(A), ask(corrupt), ask(B), ask('https://x.test/a.png'), ask(A), ask(corrupt)]);
  const ok = all.filter((r, i) => i % 2 === 0);
  const badOnes = all.filter((r, i) => i % 2 === 1);
  check('the good ones answered', ok.every((r) => r.status === 'fulfilled'), all.map((r) => r.status));
  check('the bad ones are 400', badOnes.every((r) => r.status === 'rejected' && r.reason.status === 400), badOnes.map((r) => r.reason && r.reason.status));
  if (ok.every((r) => r.status === 'fulfilled')) {
    check('the good ones as alone', JSON.stringify(lps(ok[0].value)) === JSON.stringify(lps(alone)) &&
      JSON.stringify(lps(ok[2].value)) === JSON.stringify(lps(alone)));
  }
});

await test('still serving after bad images', async () => {
  const r = await ask(A);
  check('the same answer as before the bad ones', JSON.stringify(lps(r)) === JSON.stringify(lps(alone)));
});

finish();
