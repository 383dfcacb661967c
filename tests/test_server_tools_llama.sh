#!/usr/bin/env bash
# Tool calls with Meta's Llama 3.1 template (= 3.3's) over HTTP: a tiny
# llama model with Llama 3's vocabulary served with --chat-template. The
# server finds the format by its probe, renders tools, a call and its
# result as Jinja2 does (the prompt's token count against Jinja2's render
# of the same conversation, tests/data/chat/gen.py's set-up), refuses what
# the template refuses with 400s, reads the call objects the model writes
# (the random model steered by a grammar) back into tool_calls, whole and
# streamed, and forces a call with tool_choice "required" or a named
# function: whatever the random model would say, the reply is one call
# (the template takes one back per turn) whose arguments validate against
# the function's schema. The `openai` npm client does the same
# (tests/server/tools.test.mjs). Skips without the vocabulary or Jinja2.
set -u
BUILD=${BUILD:-build}
BIN=$BUILD/inflight
SHARED=${IFL_SHARED:-../shared}
pass=0
fail=0
VOCAB=$SHARED/models/vocab/ggml-vocab-llama-bpe.gguf
TMPL=$SHARED/chat/templates/meta-llama-Llama-3.1-8B-Instruct.jinja
START_ARGS=(--quiet --parallel 4)
. "$(dirname "$0")/lib.sh"
[ -f "$VOCAB" ] && [ -f "$TMPL" ] || skip "no Llama 3 vocabulary ($VOCAB) or template ($TMPL)"
python3 -c 'import jinja2, jsonschema' 2>/dev/null || skip "python3's jinja2 and jsonschema are needed"
M=$tmp/llama.gguf
"$BUILD/tools/mkmodel" -o "$M" --vocab "$VOCAB" --arch llama \
    --n-embd 64 --n-layer 1 --n-head 2 --n-head-kv 1 --n-ff 128 --type f16 --seed 1 --ctx 4096 >/dev/null 2>&1 ||
    bad "mkmodel llama with Llama 3's vocabulary"

start_server llama31 --chat-template "$TMPL" || { echo "$pass passed, $((fail + 1)) failed"; exit 1; }
U="http://127.0.0.1:$PORT"

python3 - "$U" "$BIN" "$M" "$TMPL" >"$tmp/py.log" 2>&1 <<'PY'
import json, sys

sys.path.insert(0, 'tests/data/chat')
from tools_http import (check, check_named, check_none, check_turn_after, done, jinja_tokens,
                        post, render_cases, same_stream, set_up, valid_call)
from tools_http import ASK, TOOL_SCHEMAS, TOOLS

U, BIN, MODEL, TMPL = sys.argv[1:5]
SCHEMA = {}
set_up(U, BIN, MODEL, TMPL, {'bos_token': '<|begin_of_text|>', 'eos_token': '<|eot_id|>'}, SCHEMA)
render_cases(['f_tools', 'h_tool_call_result', 'i_tool_call_then_final', 'j_string_arguments'],
             keep_thinking=False)

SCHEMA.update(TOOL_SCHEMAS)


# the template's own refusals and the server's, as 400s naming the field
code, b = post({'messages': ASK + [
    {'role': 'assistant', 'content': None, 'tool_calls': [
        {'id': 'a', 'type': 'function', 'function': {'name': 'ping', 'arguments': '{}'}},
        {'id': 'b', 'type': 'function', 'function': {'name': 'ping', 'arguments': '{}'}}]},
    {'role': 'tool', 'tool_call_id': 'a', 'content': '1'}], 'tools': TOOLS, 'max_tokens': 1},
    status=True)
check('two calls in one turn: 400, the template says why',
      code == 400 and b['error']['param'] == 'messages' and
      'single tool-calls' in b['error']['message'], [code, b])
code, b = post({'messages': [{'role': 'system', 'content': 'x'}], 'tools': TOOLS,
                'max_tokens': 1}, status=True)
check('tools without a message after the system one: 400 (the template raises)',
      code == 400 and b['error']['param'] == 'messages' and
      'first user message' in b['error']['message'], [code, b])
code, b = post({'messages': ASK, 'tools': TOOLS, 'tool_choice': 'maybe', 'max_tokens': 1},
               status=True)
check('tool_choice unknown: 400', code == 400 and b['error']['param'] == 'tool_choice', b)
code, b = post({'messages': ASK, 'tools': TOOLS, 'max_tokens': 1,
                'tool_choice': {'type': 'function', 'function': {'name': 'nope'}}}, status=True)
check('tool_choice naming no tool: 400', code == 400 and 'nope' in b['error']['message'], b)
code, b = post({'messages': ASK, 'tools': [{'type': 'function', 'function': {'name': 'a b'}}],
                'max_tokens': 1}, status=True)
check('a bad tool name: 400', code == 400 and b['error']['param'] == 'tools', b)


# auto: the model's own call (steered by a grammar): one object, after the
# python tag, two separated by ';', each as it wrote it
GRAMMARS = [
    ('one call', 'root ::= "{\\"name\\": \\"get_weather\\", \\"parameters\\": {\\"city\\": \\"" '
     '("Paris" | "Rome") "\\", \\"days\\": " [1-7] "}}"', ['get_weather']),
    ('the python tag, arguments, no space', 'root ::= "<|python_tag|>{\\"name\\":\\"get_time\\",'
     '\\"arguments\\":{\\"zone\\":\\"" [A-Z]{3} "\\"}}"', ['get_time']),
    ('two calls', 'root ::= "{\\"name\\": \\"ping\\", \\"parameters\\": {}}; {\\"name\\": '
     '\\"get_weather\\", \\"parameters\\": {\\"city\\": \\"Rome\\", \\"days\\": " [1-7] "}}"',
     ['ping', 'get_weather']),
    ('no parameters', 'root ::= " {\\"name\\": \\"ping\\"}\\n"', ['ping']),
]
for what, g, names in GRAMMARS:
    for seed in range(2):
        body = {'messages': ASK, 'tools': TOOLS, 'max_tokens': 200, 'temperature': 1,
                'seed': seed, 'grammar': g}
        c = post(body)['choices'][0]
        m = c['message']
        calls = m.get('tool_calls') or []
        check('auto, %s, seed %d: calls read, content null, finish tool_calls' % (what, seed),
              [t['function']['name'] for t in calls] == names and
              all(valid_call(t, names) for t in calls) and m['content'] is None and
              c['finish_reason'] == 'tool_calls' and
              [t['index'] for t in calls] == list(range(len(calls))), c)
        same_stream(body, m, 'tool_calls', 'auto, %s, seed %d' % (what, seed))
c = post({'messages': ASK, 'tools': TOOLS, 'max_tokens': 200, 'temperature': 0,
          'grammar': 'root ::= "{\\"name\\": \\"get_weather\\", \\"parameters\\": '
                     '{\\"city\\": \\"Rome\\", \\"days\\": 3}}"'})['choices'][0]
check('auto: the arguments as the model wrote them',
      c['message']['tool_calls'][0]['function']['arguments'] == '{"city": "Rome", "days": 3}', c)

# replies that are not calls: content as they stand
NOT = [('an unknown function', 'root ::= "{\\"name\\": \\"launch\\", \\"parameters\\": {}}"',
        '{"name": "launch", "parameters": {}}'),
       ('text after a call', 'root ::= "{\\"name\\": \\"ping\\"} done"', '{"name": "ping"} done'),
       ('plain text', 'root ::= "It is sunny in Paris today, " [a-z]{3}', None),
       ('JSON that is no call', 'root ::= "{\\"city\\": \\"Paris\\"}"', '{"city": "Paris"}')]
for what, g, want in NOT:
    body = {'messages': ASK, 'tools': TOOLS, 'max_tokens': 200, 'temperature': 1, 'seed': 1,
            'grammar': g}
    c = post(body)['choices'][0]
    m = c['message']
    check('auto, %s: content as it stands, finish stop' % what,
          'tool_calls' not in m and c['finish_reason'] == 'stop' and
          (m['content'] == want if want else m['content'].startswith('It is sunny')), c)
    s = same_stream(body, m, 'stop', 'auto, ' + what)
    if not want:
        check('auto, plain text, streamed: content as it comes (several deltas)',
              s['n_content'] > 3, s)

# tool_choice "required": one call (the template takes one back per turn),
# whatever the random model would say, valid against its schema
for seed in range(5):
    body = {'messages': ASK, 'tools': TOOLS, 'tool_choice': 'required', 'max_tokens': 300,
            'temperature': 1, 'seed': seed}
    c = post(body)['choices'][0]
    m = c['message']
    calls = m.get('tool_calls') or []
    check('required, seed %d: one call, valid, content null, finish tool_calls' % seed,
          len(calls) == 1 and valid_call(calls[0], SCHEMA) and m['content'] is None and
          c['finish_reason'] == 'tool_calls', c)
    if seed < 2:
        same_stream(body, m, 'tool_calls', 'required, seed %d' % seed)
check_named(ASK, TOOLS, ['get_weather', 'get_time', 'ping'], 2)

# tool_choice none: no tools in the prompt, the reply not read for calls
withtools = check_none(ASK, TOOLS, GRAMMARS[0][1], lambda t: t.startswith('{"name": "get_weather"'))

# the next turn: the call as the server gave it and its result render as Jinja2 renders them
r = post({'messages': ASK, 'tools': TOOLS, 'max_tokens': 300, 'temperature': 1, 'seed': 3,
          'tool_choice': {'type': 'function', 'function': {'name': 'get_weather'}}})
m = r['choices'][0]['message']
conv = ASK + [m, {'role': 'tool', 'tool_call_id': m['tool_calls'][0]['id'],
                  'content': '{"temp": 21}'}]
nxt = post({'messages': conv, 'tools': TOOLS, 'max_tokens': 1})
want = jinja_tokens([{k: v for k, v in x.items() if k != 'refusal'} for x in conv], TOOLS)
check('next turn: the call and its result rendered as Jinja2 renders them (%d tokens)' % want,
      nxt['usage']['prompt_tokens'] == want and want > withtools + 20, [want, nxt['usage']])
check_turn_after(conv, TOOLS)

done()
PY
grep -E '^(ok|FAIL) ' "$tmp/py.log"
add_counts "$tmp/py.log" || { echo "FAIL the Python checks ran"; tail -20 "$tmp/py.log"; }
if npm_ready; then
    run_node "openai client (tools, llama3)" 200 tests/server/tools.test.mjs BASE_URL="$U" MODEL=llama FORMAT=llama3
fi
kill -TERM "$SPID" 2>/dev/null; wait "$SPID" 2>/dev/null
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
