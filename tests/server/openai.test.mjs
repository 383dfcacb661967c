// The server driven by the official `openai` npm client, unchanged: what a
// user's application would do. Run by tests/test_server.sh with BASE_URL
// (http://127.0.0.1:PORT) and MODEL set; ends with "N passed, N failed".
import { MODEL, client, check, test, expectError, collect, finish } from './harness.mjs';

const LILY = ', there was a little girl named Lily.';

await test('models.list', async () => {
  const list = await client.models.list();
  const ids = list.data.map((m) => m.id);
  check('models.list names the served model', ids.includes(MODEL), ids);
});

await test('completion greedy', async () => {
  const r = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 12, temperature: 0 });
  check('completion greedy text', r.choices[0].text.startsWith(LILY), r.choices[0].text);
  check('completion object and id', r.object === 'text_completion' && r.id.startsWith('cmpl-'), r);
  check('completion finish_reason length', r.choices[0].finish_reason === 'length', r.choices[0]);
  check('completion usage', r.usage.completion_tokens === 12 && r.usage.prompt_tokens === 5 &&
    r.usage.total_tokens === 17, r.usage);
});

await test('completion default max_tokens', async () => {
  const r = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', temperature: 0, ignore_eos: true });
  check('completion default max_tokens is 16', r.usage.completion_tokens === 16, r.usage);
});

await test('completion stop', async () => {
  const r = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 30, temperature: 0, stop: [' named', 'zzz'] });
  check('stop string cuts the text', r.choices[0].text === ', there was a little girl', r.choices[0].text);
  check('stop string finish_reason stop', r.choices[0].finish_reason === 'stop', r.choices[0]);
  const s = await collect(await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 30, temperature: 0, stop: 'girl', stream: true }));
  const text = s.map((c) => c.choices.map((x) => x.text).join('')).join('');
  check('streamed stop string never leaks', text === ', there was a little ', text);
});

await test('completion stream', async () => {
  const whole = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 40, temperature: 0 });
  const chunks = await collect(await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 40, temperature: 0, stream: true, stream_options: { include_usage: true } }));
  const text = chunks.map((c) => c.choices.map((x) => x.text).join('')).join('');
  check('streamed text equals the whole text', text === whole.choices[0].text, { text, whole: whole.choices[0].text });
  check('the stream is incremental', chunks.filter((c) => c.choices.length && c.choices[0].text).length > 3, chunks.length);
  const last = chunks[chunks.length - 1];
  check('stream usage chunk last', last.choices.length === 0 && last.usage && last.usage.completion_tokens === whole.usage.completion_tokens, last);
  const fin = chunks.flatMap((c) => c.choices).filter((x) => x.finish_reason);
  check('stream finish_reason once', fin.length === 1 && fin[0].finish_reason === whole.choices[0].finish_reason, fin);
  check('stream chunk object', chunks.every((c) => c.object === 'text_completion' && c.id === chunks[0].id), chunks[0]);
});

await test('completion n=2 and seeds', async () => {
  const req = { model: MODEL, prompt: 'Once upon a time', max_tokens: 24, temperature: 1.5, n: 2, seed: 1234 };
  const a = await client.completions.create(req);
  const b = await client.completions.create(req);
  const c = await client.completions.create({ ...req, seed: 99 });
  check('n=2 gives two choices', a.choices.length === 2 && a.choices[0].index === 0 && a.choices[1].index === 1, a.choices);
  check('n=2 samples differ', a.choices[0].text !== a.choices[1].text, a.choices);
  check('same seed, same texts', JSON.stringify(a.choices) === JSON.stringify(b.choices), [a.choices, b.choices]);
  check('other seed, other texts', JSON.stringify(a.choices) !== JSON.stringify(c.choices));
  check('n=2 usage counts both', a.usage.completion_tokens === 48 || a.choices.some((x) => x.finish_reason === 'stop'), a.usage);
  const s = await collect(await client.completions.create({ ...req, stream: true }));
  const t0 = s.flatMap((c) => c.choices).filter((x) => x.index === 0).map((x) => x.text).join('');
  const t1 = s.flatMap((c) => c.choices).filter((x) => x.index === 1).map((x) => x.text).join('');
  check('n=2 streamed equals whole', t0 === a.choices[0].text && t1 === a.choices[1].text, { t0, t1 });
});

await test('completion logprobs', async () => {
  const r = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 6, temperature: 0, logprobs: 3 });
  const lp = r.choices[0].logprobs;
  check('logprobs arrays', lp.tokens.length === 6 && lp.token_logprobs.length === 6 && lp.text_offset.length === 6 && lp.top_logprobs.length === 6, lp);
  check('logprobs tokens spell the text', lp.tokens.join('') === r.choices[0].text, lp.tokens);
  check('logprobs values', lp.token_logprobs.every((x) => x <= 0 && x > -50), lp.token_logprobs);
  check('top_logprobs has 3 and the greedy token', lp.top_logprobs.every((d, i) => Object.keys(d).length === 3 && d[lp.tokens[i]] !== undefined), lp.top_logprobs);
  check('text_offset increases', lp.text_offset[0] === 0 && lp.text_offset.every((o, i) => i === 0 || o === lp.text_offset[i - 1] + lp.tokens[i - 1].length), lp.text_offset);
});

await test('completion prompts', async () => {
  const r = await client.completions.create({ model: MODEL, prompt: ['Once upon a time', 'Tom had a'], max_tokens: 8, temperature: 0 });
  check('list of prompts gives one choice each', r.choices.length === 2 && r.choices[0].text.startsWith(', there'), r.choices);
  const ids = await client.completions.create({ model: MODEL, prompt: [1, 403, 407, 261, 378], max_tokens: 8, temperature: 0 });
  check('token-id prompt equals the text prompt', ids.choices[0].text === r.choices[0].text, ids.choices[0]);
  const e = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 4, temperature: 0, echo: true });
  check('echo prepends the prompt', e.choices[0].text.startsWith('Once upon a time, there'), e.choices[0].text);
});

await test('completion echo with logprobs (prompt scoring)', async () => {
  const PROMPT = 'Once upon a time';
  const g = await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 3, temperature: 0, logprobs: 2 });
  const gl = g.choices[0].logprobs;
  // score the prompt plus what greedy decoding produced: the prompt part of
  // an echo must give the generated tokens the log-probs they were sampled with
  const e = await client.completions.create({ model: MODEL, prompt: PROMPT + g.choices[0].text, max_tokens: 0, echo: true, logprobs: 2 });
  const el = e.choices[0].logprobs;
  check('echo max_tokens 0: the prompt only', e.choices[0].text === PROMPT + g.choices[0].text && e.usage.completion_tokens === 0 && e.choices[0].finish_reason === 'length', e);
  check('echo: every prompt token listed', el.tokens.length === e.usage.prompt_tokens && el.token_logprobs.length === el.tokens.length, el);
  check('echo: the first prompt token has no log-prob', el.token_logprobs[0] === null && el.top_logprobs[0] === null, el);
  const tail = el.token_logprobs.slice(-3);
  check('echo scores equal the sampled log-probs', tail.every((v, i) => Math.abs(v - gl.token_logprobs[i]) < 2e-3), { tail, gen: gl.token_logprobs });
  check('echo top alternatives', el.top_logprobs.slice(1).every((d) => Object.keys(d).length === 2 && Object.values(d).every((v) => v <= 0)), el.top_logprobs);
  check('echo text_offset indexes the prompt', el.text_offset.every((o, i) => i === 0 || o >= el.text_offset[i - 1]) && el.text_offset[el.text_offset.length - 1] < e.choices[0].text.length &&
    e.choices[0].text.slice(el.text_offset[2]).startsWith(' upon'), el.text_offset);
  const both = await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 3, temperature: 0, logprobs: 1, echo: true });
  const bl = both.choices[0].logprobs;
  check('echo + generation: prompt then generated tokens', bl.tokens.length === both.usage.prompt_tokens + 3 && bl.text_offset[bl.text_offset.length - 3] === PROMPT.length, bl);
  const st = await collect(await client.completions.create({ model: MODEL, prompt: PROMPT, max_tokens: 3, temperature: 0, logprobs: 1, echo: true, stream: true }));
  const toks = st.flatMap((c) => c.choices).flatMap((x) => (x.logprobs ? x.logprobs.tokens : []));
  const text = st.flatMap((c) => c.choices).map((x) => x.text).join('');
  check('echo + logprobs streamed: same tokens and text', JSON.stringify(toks) === JSON.stringify(bl.tokens) && text === both.choices[0].text, { toks, text });
});

await test('completion best_of', async () => {
  const r = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 8, temperature: 1.2, n: 2, best_of: 5, logprobs: 0, seed: 11 });
  check('best_of returns n choices', r.choices.length === 2 && r.choices.map((c) => c.index).join() === '0,1', r.choices);
  const mean = (c) => c.logprobs.token_logprobs.reduce((a, v) => a + v, 0) / Math.max(1, c.logprobs.token_logprobs.length);
  check('best_of: best first by mean log-prob', mean(r.choices[0]) >= mean(r.choices[1]) - 1e-6, r.choices.map(mean));
  const kept = r.choices.reduce((a, c) => a + c.logprobs.tokens.length, 0);
  check('best_of: usage counts every sample', r.usage.completion_tokens >= kept && r.usage.completion_tokens > kept - 1 + 8, { usage: r.usage, kept });
  const again = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 8, temperature: 1.2, n: 2, best_of: 5, logprobs: 0, seed: 11 });
  check('best_of with a seed is reproducible', JSON.stringify(again.choices.map((c) => c.text)) === JSON.stringify(r.choices.map((c) => c.text)), again.choices);
});

await test('chat', async () => {
  const msgs = [{ role: 'system', content: 'You tell stories.' }, { role: 'user', content: [{ type: 'text', text: 'Tell me a story.' }] }];
  const r = await client.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 20, temperature: 0 });
  const ch = r.choices[0];
  check('chat object and id', r.object === 'chat.completion' && r.id.startsWith('chatcmpl-'), r);
  check('chat message', ch.message.role === 'assistant' && typeof ch.message.content === 'string' && ch.message.content.length > 0, ch);
  check('chat finish_reason', ['stop', 'length'].includes(ch.finish_reason), ch);
  check('chat usage', r.usage.prompt_tokens > 10 && r.usage.completion_tokens > 0 && r.usage.total_tokens === r.usage.prompt_tokens + r.usage.completion_tokens, r.usage);
  const chunks = await collect(await client.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 20, temperature: 0, stream: true, stream_options: { include_usage: true } }));
  const text = chunks.flatMap((c) => c.choices).map((x) => x.delta.content || '').join('');
  check('chat stream equals whole', text === ch.message.content, { text, whole: ch.message.content });
  check('chat stream starts with the role', chunks[0].choices[0].delta.role === 'assistant', chunks[0]);
  check('chat stream chunk object', chunks.every((c) => c.object === 'chat.completion.chunk'), chunks[0]);
  const fin = chunks.flatMap((c) => c.choices).filter((x) => x.finish_reason);
  check('chat stream finish once', fin.length === 1 && fin[0].finish_reason === ch.finish_reason, fin);
  check('chat stream usage', chunks[chunks.length - 1].usage && chunks[chunks.length - 1].usage.completion_tokens === r.usage.completion_tokens, chunks[chunks.length - 1]);
  const def = await client.chat.completions.create({ model: MODEL, messages: msgs, temperature: 0, ignore_eos: true });
  const ctx = (await client.models.list()).data[0].max_model_len;
  check('chat default max_tokens fills the context', def.usage.total_tokens === ctx, { usage: def.usage, ctx });
  const mc = await client.chat.completions.create({ model: MODEL, messages: msgs, max_completion_tokens: 3, temperature: 0, ignore_eos: true });
  check('max_completion_tokens', mc.usage.completion_tokens === 3, mc.usage);
});

await test('chat logprobs', async () => {
  const r = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 5, temperature: 0, logprobs: true, top_logprobs: 2, ignore_eos: true });
  const c = r.choices[0].logprobs.content;
  check('chat logprobs entries', c.length === 5 && c.every((e) => typeof e.token === 'string' && e.logprob <= 0 && Array.isArray(e.bytes) && e.top_logprobs.length === 2), c);
  check('chat logprob bytes spell the token', c.every((e) => Buffer.from(e.bytes).toString('utf8') === e.token || e.token.includes('\uFFFD')), c);
  const s = await collect(await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'Hi' }], max_tokens: 5, temperature: 0, logprobs: true, top_logprobs: 2, ignore_eos: true, stream: true }));
  const n = s.flatMap((x) => x.choices).reduce((a, x) => a + (x.logprobs && x.logprobs.content ? x.logprobs.content.length : 0), 0);
  check('chat streamed logprobs cover every token', n === 5, n);
});

await test('sampling extensions', async () => {
  const r = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 10, temperature: 0.8, top_p: 0.9, top_k: 20, min_p: 0.05, repetition_penalty: 1.1, presence_penalty: 0.5, frequency_penalty: 0.5, seed: 3, min_tokens: 2, priority: 0.7, user: 'u1', logit_bias: { '432': -100 } });
  check('extensions accepted', r.choices[0].text.length > 0 && !r.choices[0].text.startsWith(','), r.choices[0].text);
});

await expectError('temperature out of range: 400 naming it', () => client.completions.create({ model: MODEL, prompt: 'x', temperature: 7 }), 400, 'temperature');
await test('any model name selects the served model', async () => {
  // placeholders clients are configured with; the reply names what answered
  const r = await client.completions.create({ model: 'gpt-3.5-turbo', prompt: 'Once upon a time', max_tokens: 12, temperature: 0 });
  check('gpt-3.5-turbo is served', r.choices[0].text.startsWith(', there was a little girl named Lily.'), r.choices[0].text);
  check('the reply names the served model', r.model === MODEL, r.model);
  const c = await client.chat.completions.create({ model: 'tgi', messages: [{ role: 'user', content: 'x' }], max_tokens: 2 });
  check('chat with model tgi is served', c.model === MODEL && c.choices.length === 1, c.model);
});
await expectError('prompt + max_tokens over the context: 400', () => client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 1000 }), 400, 'max_tokens');
await expectError('unknown response_format type: 400', () => client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }], response_format: { type: 'yaml' } }), 400, 'response_format');
await expectError('bad role: 400', () => client.chat.completions.create({ model: MODEL, messages: [{ role: 'wizard', content: 'x' }] }), 400, 'messages');
await expectError('empty messages: 400', () => client.chat.completions.create({ model: MODEL, messages: [] }), 400, 'messages');
await expectError('n out of range: 400', () => client.completions.create({ model: MODEL, prompt: 'x', n: 0 }), 400, 'n');
await expectError('top_logprobs without logprobs: 400', () => client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }], top_logprobs: 2 }), 400, 'top_logprobs');
await expectError('best_of below n: 400', () => client.completions.create({ model: MODEL, prompt: 'x', n: 3, best_of: 2 }), 400, 'best_of');
await expectError('best_of with stream: 400', () => client.completions.create({ model: MODEL, prompt: 'x', best_of: 2, stream: true }), 400, 'best_of');
await expectError('logit_bias bad id: 400', () => client.completions.create({ model: MODEL, prompt: 'x', logit_bias: { '99999': 1 } }), 400, 'logit_bias');

finish();
