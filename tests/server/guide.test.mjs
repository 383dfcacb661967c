// Guided decoding through the server: OpenAI response_format (json_object,
// json_schema with strict), llama.cpp's grammar and json_schema fields, and
// TGI's grammar {json | regex}, driven by the official `openai` client and
// plain fetch. Every output is checked here, independently of the server:
// JSON.parse and a field-by-field check of the schema, RegExp full match.
// Run by tests/test_server.sh with BASE_URL and MODEL; ends with
// "N passed, N failed".
import { BASE, MODEL, client, check, test, expectError, finish } from './harness.mjs';

function parse(text) {
  try { return { ok: true, v: JSON.parse(text) }; } catch (e) { return { ok: false, err: String(e) }; }
}
async function post(path, body) {
  const r = await fetch(`${BASE}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  return { status: r.status, body: await r.json() };
}

const person = {
  type: 'object',
  properties: {
    name: { type: 'string', minLength: 1, maxLength: 10 },
    age: { type: 'integer', minimum: 0, maximum: 120 },
    pet: { enum: ['cat', 'dog', 'fish'] },
  },
  required: ['name', 'age', 'pet'],
  additionalProperties: false,
};
function isPerson(v) {
  return v !== null && typeof v === 'object' && !Array.isArray(v) &&
    Object.keys(v).every((k) => ['name', 'age', 'pet'].includes(k)) &&
    typeof v.name === 'string' && v.name.length >= 1 && [...v.name].length <= 10 &&
    Number.isInteger(v.age) && v.age >= 0 && v.age <= 120 && ['cat', 'dog', 'fish'].includes(v.pet);
}
const msgs = [{ role: 'user', content: 'Tell me about a girl and her pet.' }];

await test('json_object', async () => {
  const r = await client.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 60, temperature: 0.7, seed: 1, n: 4, response_format: { type: 'json_object' } });
  for (const c of r.choices) {
    const p = parse(c.message.content);
    // finished: a whole object; cut short by max_tokens: the start of one
    const done = c.finish_reason === 'stop' && p.ok && p.v !== null && typeof p.v === 'object' && !Array.isArray(p.v);
    const cut = c.finish_reason === 'length' && c.message.content.trimStart().startsWith('{');
    check(`json_object choice ${c.index}: an object`, done || cut, { text: c.message.content, fin: c.finish_reason });
  }
});

await test('json_schema strict', async () => {
  const rf = { type: 'json_schema', json_schema: { name: 'person', strict: true, schema: person } };
  const r = await client.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 60, temperature: 1, seed: 7, n: 8, response_format: rf });
  for (const c of r.choices) {
    const p = parse(c.message.content);
    check(`json_schema choice ${c.index}: finished and valid`, c.finish_reason === 'stop' && p.ok && isPerson(p.v), { text: c.message.content, fin: c.finish_reason });
  }
  const s = [];
  for await (const ch of await client.chat.completions.create({ model: MODEL, messages: msgs, max_tokens: 60, temperature: 1, seed: 7, response_format: rf, stream: true }))
    s.push(...ch.choices.map((x) => x.delta.content || ''));
  check('json_schema streamed: same as the first choice whole', s.join('') === r.choices[0].message.content, { stream: s.join(''), whole: r.choices[0].message.content });
});

await test('completions json_schema and grammar (llama.cpp fields)', async () => {
  const r = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 60, temperature: 1, seed: 3, n: 4, json_schema: person });
  check('json_schema field: every choice valid', r.choices.every((c) => { const p = parse(c.text); return c.finish_reason === 'stop' && p.ok && isPerson(p.v); }), r.choices.map((c) => c.text));
  const g = 'root ::= num (" " op " " num){0,3}\nop ::= "+" | "-" | "*"\nnum ::= [1-9] [0-9]{0,2}\n';
  const e = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 40, temperature: 1, seed: 5, n: 4, grammar: g });
  check('grammar field: arithmetic, finished', e.choices.every((c) => c.finish_reason === 'stop' && /^[1-9][0-9]{0,2}( [+*-] [1-9][0-9]{0,2}){0,3}$/.test(c.text)), e.choices.map((c) => [c.text, c.finish_reason]));
  const cut = await client.completions.create({ model: MODEL, prompt: 'Once upon a time', max_tokens: 3, temperature: 1, seed: 5, json_schema: person });
  check('cut short: finish_reason length', cut.choices[0].finish_reason === 'length' && cut.choices[0].text.trimStart().startsWith('{'), cut.choices[0]);
});

await test('TGI grammar', async () => {
  const re = '(19|20)[0-9]{2}-(0[1-9]|1[0-2])-(0[1-9]|[12][0-9]|3[01])';
  for (let seed = 1; seed <= 4; seed++) {
    const r = await post('/generate', { inputs: 'Once upon a time', parameters: { max_new_tokens: 20, do_sample: true, seed, grammar: { type: 'regex', value: re }, details: true } });
    check(`TGI regex seed ${seed}: a date`, r.status === 200 && new RegExp(`^${re}$`).test(r.body.generated_text) && r.body.details.finish_reason === 'eos_token', r.body);
  }
  const j = await post('/generate', { inputs: 'Once upon a time', parameters: { max_new_tokens: 60, do_sample: true, seed: 9, grammar: { type: 'json', value: person } } });
  const p = parse(j.body.generated_text);
  check('TGI json grammar: valid', j.status === 200 && p.ok && isPerson(p.v), j.body);
  const bad = await post('/generate', { inputs: 'x', parameters: { grammar: { type: 'regex', value: '(ab' } } });
  check('TGI unbalanced regex: 422 naming it', bad.status === 422 && bad.body.error_type === 'validation' && /\(|paren|unbalanced|unclosed/i.test(bad.body.error), bad.body);
});

await expectError('malformed schema: 400', () => client.chat.completions.create({ model: MODEL, messages: msgs, response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'objekt' } } } }), 400, 'response_format', 'objekt');
await expectError('grammar with an undefined rule: 400', () => client.completions.create({ model: MODEL, prompt: 'x', grammar: 'root ::= item+\n' }), 400, 'grammar', 'item');
await expectError('two constraints: 400', () => client.completions.create({ model: MODEL, prompt: 'x', grammar: 'root ::= "a"', json_schema: person }), 400, 'json_schema', 'only one');
await expectError('ignore_eos with a grammar: 400', () => client.completions.create({ model: MODEL, prompt: 'x', grammar: 'root ::= "a"', ignore_eos: true }), 400, 'ignore_eos', 'grammar');
await expectError('json_schema without schema: 400', () => client.chat.completions.create({ model: MODEL, messages: msgs, response_format: { type: 'json_schema', json_schema: { name: 'x' } } }), 400, 'response_format', 'schema');

finish();
