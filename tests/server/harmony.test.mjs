// gpt-oss's harmony replies through the official `openai` npm client
// (tests/test_server_harmony.sh: BASE_URL, MODEL). The model is random, so
// a grammar (llama.cpp's `grammar` field) makes it write harmony text: an
// analysis message then a final one, or an analysis then a call to
// functions.get_weather. The server must give the analysis as
// reasoning_content, the final text as content and the call as tool_calls
// (finish_reason "tool_calls"), the same whole and streamed, and take the
// call back in the next turn.
import { MODEL, client, check, test, finish } from './harness.mjs';

const TOOLS = [{ type: 'function', function: { name: 'get_weather', description: 'Weather in a city.',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
const ANSWER = 'root ::= "<|channel|>analysis<|message|>" [a-z ]{3,12} ' +
  '"<|end|><|start|>assistant<|channel|>final<|message|>" [a-z]{2,6}';
const CALL = 'root ::= "<|channel|>analysis<|message|>" [a-z ]{3,8} "<|end|><|start|>assistant ' +
  'to=functions.get_weather<|channel|>commentary json<|message|>{\\"city\\": \\"" [a-z]{2,6} "\\"}"';
const ask = (grammar, extra = {}) => client.chat.completions.create({
  model: MODEL, max_tokens: 200, temperature: 0, grammar,
  messages: [{ role: 'user', content: 'What is the weather in Paris?' }], ...extra });

// a stream folded into {reasoning, content, calls, finish}
async function fold(stream) {
  const r = { reasoning: '', content: '', calls: [], finish: null, role: null };
  for await (const ch of stream) {
    const c = ch.choices[0];
    if (!c) continue;
    const d = c.delta || {};
    if (d.role) r.role = d.role;
    if (d.reasoning_content) r.reasoning += d.reasoning_content;
    if (d.content) r.content += d.content;
    for (const tc of d.tool_calls || []) {
      const at = r.calls[tc.index] || (r.calls[tc.index] = { id: '', name: '', arguments: '' });
      if (tc.id) at.id = tc.id;
      if (tc.function && tc.function.name) at.name += tc.function.name;
      if (tc.function && tc.function.arguments) at.arguments += tc.function.arguments;
    }
    if (c.finish_reason) r.finish = c.finish_reason;
  }
  return r;
}

await test('analysis and final channels', async () => {
  const r = await ask(ANSWER);
  const m = r.choices[0].message;
  check('reasoning_content is the analysis text', /^[a-z ]{3,12}$/.test(m.reasoning_content), m);
  check('content is the final text alone', /^[a-z]{2,6}$/.test(m.content), m);
  check('finish_reason stop', r.choices[0].finish_reason === 'stop', r.choices[0]);
  check('no tool_calls', m.tool_calls === undefined, m);
  const s = await fold(await ask(ANSWER, { stream: true }));
  check('streamed: the same reasoning', s.reasoning === m.reasoning_content, [s, m]);
  check('streamed: the same content', s.content === m.content, [s, m]);
  check('streamed: role and finish', s.role === 'assistant' && s.finish === 'stop', s);
});

let call;
await test('a tool call', async () => {
  const r = await ask(CALL, { tools: TOOLS });
  const m = r.choices[0].message;
  call = m;
  check('finish_reason tool_calls', r.choices[0].finish_reason === 'tool_calls', r.choices[0]);
  check('one call', Array.isArray(m.tool_calls) && m.tool_calls.length === 1, m);
  const tc = m.tool_calls[0];
  check('the call names get_weather', tc.type === 'function' && tc.function.name === 'get_weather', tc);
  check('its arguments are the JSON the model wrote', /^[a-z]{2,6}$/.test(JSON.parse(tc.function.arguments).city), tc);
  check('it has an id', typeof tc.id === 'string' && tc.id.startsWith('call_'), tc);
  check('content is null beside the call', m.content === null, m);
  check('the analysis is reasoning_content', /^[a-z ]{3,8}$/.test(m.reasoning_content), m);
  const s = await fold(await ask(CALL, { tools: TOOLS, stream: true }));
  check('streamed: the same call', s.calls.length === 1 && s.calls[0].name === 'get_weather' &&
    s.calls[0].arguments === tc.function.arguments && s.calls[0].id.startsWith('call_'), s);
  check('streamed: finish tool_calls, no content', s.finish === 'tool_calls' && s.content === '', s);
  check('streamed: the same reasoning', s.reasoning === m.reasoning_content, s);
});

await test('the next turn takes the call and its result', async () => {
  const base = [{ role: 'user', content: 'What is the weather in Paris?' }];
  const next = await client.chat.completions.create({ model: MODEL, max_tokens: 200, temperature: 0,
    grammar: ANSWER, tools: TOOLS,
    messages: [...base, call, { role: 'tool', tool_call_id: call.tool_calls[0].id, content: '{"temp": 21}' }] });
  check('answered', next.choices[0].finish_reason === 'stop' && /^[a-z]{2,6}$/.test(next.choices[0].message.content), next.choices[0]);
  const first = await ask(ANSWER, { tools: TOOLS, max_tokens: 1 });
  check('the prompt grew by the call and the result', next.usage.prompt_tokens > first.usage.prompt_tokens + 20,
    [first.usage, next.usage]);
});

await test('tool_choice none hides the tools', async () => {
  const withTools = await ask(ANSWER, { tools: TOOLS, max_tokens: 1 });
  const none = await ask(ANSWER, { tools: TOOLS, tool_choice: 'none', max_tokens: 1 });
  const plain = await ask(ANSWER, { max_tokens: 1 });
  check('none: the prompt of no tools', none.usage.prompt_tokens === plain.usage.prompt_tokens &&
    withTools.usage.prompt_tokens > plain.usage.prompt_tokens, [withTools.usage, none.usage, plain.usage]);
});

// a forced call: the header goes into the prompt, the arguments follow the
// schema whatever the random model would say
const TOOLS2 = [{ type: 'function', function: { name: 'get_weather', description: 'Weather in a city.',
  parameters: { type: 'object', properties: { city: { type: 'string', maxLength: 8 } }, required: ['city'] } } },
{ type: 'function', function: { name: 'get_time', description: 'Time now.',
  parameters: { type: 'object', properties: { utc: { type: 'boolean' }, days: { type: 'integer', minimum: 1, maximum: 9 } },
    required: ['utc', 'days'] } } }];
const validArgs = (tc) => {
  let a;
  try { a = JSON.parse(tc.function.arguments); } catch { return false; }
  if (tc.function.name === 'get_weather') return typeof a.city === 'string' && [...a.city].length <= 8 &&
    Object.keys(a).length === 1;
  return tc.function.name === 'get_time' && typeof a.utc === 'boolean' && Number.isInteger(a.days) &&
    a.days >= 1 && a.days <= 9 && Object.keys(a).length === 2;
};
for (const [label, choice, name] of [['required', 'required', null],
  ['named get_time', { type: 'function', function: { name: 'get_time' } }, 'get_time']]) {
  await test(`tool_choice ${label}`, async () => {
    for (const seed of [1, 2, 3]) {
      const args = { model: MODEL, messages: [{ role: 'user', content: 'What is the weather in Paris?' }],
        tools: TOOLS2, tool_choice: choice, max_tokens: 120, temperature: 1, seed };
      const r = await client.chat.completions.create(args);
      const c = r.choices[0];
      const calls = c.message.tool_calls || [];
      check(`${label}, seed ${seed}: one call with valid arguments`, calls.length === 1 && validArgs(calls[0]) &&
        (!name || calls[0].function.name === name) && c.finish_reason === 'tool_calls' && c.message.content === null, c);
      const s = await fold(await client.chat.completions.create({ ...args, stream: true }));
      check(`${label}, seed ${seed}, streamed: the same call`, s.calls.length === 1 && calls.length === 1 &&
        s.calls[0].name === calls[0].function.name && s.calls[0].arguments === calls[0].function.arguments &&
        s.finish === 'tool_calls', [s, calls]);
    }
  });
}

await test('a reply that is not harmony is content as it stands', async () => {
  const r = await ask('root ::= "plain " [a-z]{2,4}');
  const m = r.choices[0].message;
  check('content is the text', /^plain [a-z]{2,4}$/.test(m.content) && m.reasoning_content === undefined, m);
});

finish();
