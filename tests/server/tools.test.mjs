// Hermes-style tool calls through the official `openai` npm client
// (tests/test_server_tools.sh: BASE_URL, MODEL; a tiny random qwen2 model
// with Qwen3's template), or with FORMAT=llama3 Llama 3.1's JSON calls
// (tests/test_server_tools_llama.sh: a tiny llama model with that template),
// or with FORMAT=xml Qwen3-Coder's XML calls (tests/test_server_tools_xml.sh:
// the qwen2 model with Qwen3-Coder's template; FORMAT=xml-think with
// Qwen3.5's, a reasoning model's), or with FORMAT=mistral Mistral's
// [TOOL_CALLS] groups and [THINK] block (tests/test_server_tools_mistral.sh:
// Ministral 3's template; call ids of nine letters and digits, as Mistral's
// templates take them back), or with FORMAT=deepseek DeepSeek-R1's
// <｜tool▁calls▁begin｜> blocks (tests/test_server_tools_deepseek.sh:
// llama.cpp's R1 template).
// A forced call (tool_choice "required" or a named function) must come
// back as tool_calls whose arguments parse and keep to the function's
// schema, whole and streamed; a reply the model writes itself (steered by
// a grammar) has its <tool_call> blocks (or call object) read; the call
// goes back in the next turn; a <think> block before a call is
// reasoning_content (Hermes, Mistral); an unknown function is a 400.
import { MODEL, client, check, test, expectError, finish } from './harness.mjs';

const TOOLS = [
  { type: 'function', function: { name: 'get_weather', description: 'Weather in a city.',
    parameters: { type: 'object', properties: {
      city: { type: 'string', enum: ['Paris', 'Rome'] },
      days: { type: 'integer', minimum: 1, maximum: 5 } }, required: ['city', 'days'] } } },
  { type: 'function', function: { name: 'get_time', description: 'Time now.',
    parameters: { type: 'object', properties: { utc: { type: 'boolean' } }, required: ['utc'] } } },
];
const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];
const LLAMA3 = process.env.FORMAT === 'llama3';
const XML = process.env.FORMAT === 'xml' || process.env.FORMAT === 'xml-think';
const MISTRAL = process.env.FORMAT === 'mistral';
const DEEPSEEK = process.env.FORMAT === 'deepseek';
// DeepSeek-R1's tags and one call in its block, as its template writes them
const dsCall = (args) => '"<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather' +
  '\\n```json\\n{\\"city\\": \\"Rome\\", \\"days\\": " ' + args +
  ' "}\\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>"';
// Qwen3, Qwen3.5, Ministral 3 and DeepSeek-R1 think first
const THINKS = process.env.FORMAT !== 'llama3' && process.env.FORMAT !== 'xml';
const goodId = (id) => typeof id === 'string' && (MISTRAL ? /^[A-Za-z0-9]{9}$/.test(id) : id.startsWith('call_'));

// the schemas above, checked by hand
function valid(tc) {
  let a;
  try { a = JSON.parse(tc.function.arguments); } catch { return false; }
  if (tc.type !== 'function' || !goodId(tc.id)) return false;
  if (tc.function.name === 'get_weather')
    return Object.keys(a).every((k) => k === 'city' || k === 'days') &&
      ['Paris', 'Rome'].includes(a.city) && Number.isInteger(a.days) && a.days >= 1 && a.days <= 5;
  if (tc.function.name === 'get_time')
    return Object.keys(a).length === 1 && typeof a.utc === 'boolean';
  return false;
}

async function fold(stream) {
  const r = { content: '', calls: [], finish: null, role: null };
  for await (const ch of stream) {
    const c = ch.choices[0];
    if (!c) continue;
    const d = c.delta || {};
    if (d.role) r.role = d.role;
    if (d.content) r.content += d.content;
    if (d.reasoning_content) r.reasoning = (r.reasoning || '') + d.reasoning_content;
    for (const tc of d.tool_calls || []) {
      const at = r.calls[tc.index] || (r.calls[tc.index] = { id: '', name: '', arguments: '', type: '' });
      if (tc.id) at.id = tc.id;
      if (tc.type) at.type = tc.type;
      if (tc.function && tc.function.name) at.name += tc.function.name;
      if (tc.function && tc.function.arguments) at.arguments += tc.function.arguments;
    }
    if (c.finish_reason) r.finish = c.finish_reason;
  }
  return r;
}

let call;
await test('tool_choice required', async () => {
  for (const seed of [1, 2, 3]) {
    const args = { model: MODEL, messages, tools: TOOLS, tool_choice: 'required', max_tokens: 300,
      temperature: 1, seed };
    const r = await client.chat.completions.create(args);
    const c = r.choices[0];
    const calls = c.message.tool_calls || [];
    check(`seed ${seed}: finish_reason tool_calls, content null`,
      c.finish_reason === 'tool_calls' && c.message.content === null, c);
    check(`seed ${seed}: calls with valid arguments`, calls.length > 0 && calls.every(valid), calls);
    const s = await fold(await client.chat.completions.create({ ...args, stream: true }));
    check(`seed ${seed}, streamed: the same calls`, s.finish === 'tool_calls' && s.role === 'assistant' &&
      s.calls.length === calls.length && s.calls.every((x, i) => x.name === calls[i].function.name &&
        x.arguments === calls[i].function.arguments && x.type === 'function' && goodId(x.id)), [s, calls]);
    if (seed === 1) call = c.message;
  }
});

await test('a named function', async () => {
  const args = { model: MODEL, messages, tools: TOOLS, max_tokens: 300, temperature: 1, seed: 7,
    tool_choice: { type: 'function', function: { name: 'get_time' } } };
  const r = await client.chat.completions.create(args);
  const calls = r.choices[0].message.tool_calls || [];
  check('one call to get_time, valid', calls.length === 1 && calls[0].function.name === 'get_time' && valid(calls[0]), calls);
  const s = await fold(await client.chat.completions.create({ ...args, stream: true }));
  check('streamed: the same call', s.calls.length === 1 && s.calls[0].name === 'get_time' &&
    s.calls[0].arguments === calls[0].function.arguments && s.finish === 'tool_calls', s);
});

await test('the model writes a call itself', async () => {
  // Llama 3.1's reply is the call object alone: no text before it
  // the XML format writes each parameter's text, typed by the schema
  const grammar = XML
    ? 'root ::= "Checking.\\n<tool_call>\\n' +
      '<function=get_weather>\\n<parameter=city>\\nRome\\n</parameter>\\n<parameter=days>\\n" [1-5] ' +
      '"\\n</parameter>\\n</function>\\n</tool_call>"'
    : LLAMA3
    ? 'root ::= "{\\"name\\": \\"get_weather\\", \\"parameters\\": {\\"city\\": \\"Rome\\", \\"days\\": " [1-5] "}}"'
    : MISTRAL ? 'root ::= "Checking.\\n[TOOL_CALLS]get_weather[ARGS]{\\"city\\": \\"Rome\\", \\"days\\": " [1-5] "}"'
    : DEEPSEEK ? 'root ::= "Checking.\\n" ' + dsCall('[1-5]')
    : 'root ::= "Checking.\\n<tool_call>\\n{\\"name\\": \\"get_weather\\", \\"arguments\\": ' +
      '{\\"city\\": \\"Rome\\", \\"days\\": " [1-5] "}}\\n</tool_call>"';
  const before = LLAMA3 ? null : 'Checking.\n';
  const r = await client.chat.completions.create({ model: MODEL, messages, tools: TOOLS, max_tokens: 200,
    temperature: 0, grammar });
  const m = r.choices[0].message;
  check('content is the text before the call (none: null)', m.content === before, m);
  check('one call, valid', m.tool_calls && m.tool_calls.length === 1 && valid(m.tool_calls[0]) &&
    JSON.parse(m.tool_calls[0].function.arguments).city === 'Rome', m);
  check('finish_reason tool_calls', r.choices[0].finish_reason === 'tool_calls', r.choices[0]);
  const s = await fold(await client.chat.completions.create({ model: MODEL, messages, tools: TOOLS,
    max_tokens: 200, temperature: 0, grammar, stream: true }));
  check('streamed: the same', s.content === (m.content || '') && s.calls.length === 1 &&
    s.calls[0].arguments === m.tool_calls[0].function.arguments, s);
});

if (THINKS) await test('a reasoning block, then a call (Qwen3, Qwen3.5, Ministral 3 and DeepSeek-R1 think first)', async () => {
  // a call written inside the block is reasoning
  const grammar = XML
    ? 'root ::= "<think>\\nThe user wants <tool_call>\\n<function=get_time>\\n</function>\\n</tool_call> Rome.' +
      '\\n</think>\\n\\n<tool_call>\\n<function=get_weather>\\n' +
      '<parameter=city>\\nRome\\n</parameter>\\n<parameter=days>\\n3\\n</parameter>\\n</function>\\n</tool_call>"'
    : MISTRAL
    ? 'root ::= "[THINK]\\nThe user wants Rome.\\n[/THINK][TOOL_CALLS]get_weather[ARGS]' +
      '{\\"city\\": \\"Rome\\", \\"days\\": 3}"'
    : DEEPSEEK ? 'root ::= "<think>\\nThe user wants Rome.\\n</think>\\n\\n" ' + dsCall('"3"')
    : 'root ::= "<think>\\nThe user wants Rome.\\n</think>\\n\\n<tool_call>\\n' +
    '{\\"name\\": \\"get_weather\\", \\"arguments\\": {\\"city\\": \\"Rome\\", \\"days\\": 3}}\\n</tool_call>"';
  const args = { model: MODEL, messages, tools: TOOLS, max_tokens: 200, temperature: 0, grammar };
  const m = (await client.chat.completions.create(args)).choices[0].message;
  const thought = XML ? 'The user wants <tool_call>\n<function=get_time>\n</function>\n</tool_call> Rome.'
    : 'The user wants Rome.';
  check('message.reasoning_content holds the block (a call in it too), without its newlines',
    m.reasoning_content === thought, m);
  check('no content, one call', m.content === null && m.tool_calls && m.tool_calls.length === 1 && valid(m.tool_calls[0]), m);
  const s = await fold(await client.chat.completions.create({ ...args, stream: true }));
  check('streamed: delta.reasoning_content, then the same call', s.reasoning === m.reasoning_content &&
    s.content === '' && s.calls.length === 1 && s.calls[0].arguments === m.tool_calls[0].function.arguments &&
    s.finish === 'tool_calls', s);
});

await test('the next turn takes the call and its result', async () => {
  const next = await client.chat.completions.create({ model: MODEL, max_tokens: 1, tools: TOOLS,
    messages: [...messages, call, ...call.tool_calls.map((tc) => ({ role: 'tool', tool_call_id: tc.id, content: '21 C' }))] });
  const first = await client.chat.completions.create({ model: MODEL, max_tokens: 1, tools: TOOLS, messages });
  check('the prompt grew by the calls and the results', next.usage.prompt_tokens > first.usage.prompt_tokens + 20,
    [first.usage, next.usage]);
});

await expectError('an unknown function is a 400', () => client.chat.completions.create({ model: MODEL,
  messages, tools: TOOLS, tool_choice: { type: 'function', function: { name: 'launch' } } }), 400, 'tool_choice', 'launch');

finish();
