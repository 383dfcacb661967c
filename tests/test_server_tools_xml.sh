#!/usr/bin/env bash
# Tool calls with Qwen3-Coder's XML format over HTTP: a tiny qwen2 model
# with Qwen's vocabulary served with each of the four shared templates that
# write it (--chat-template: Qwen3-Coder, Qwen3.5, Nemotron 3 Nano, StepFun
# 3.5). The server finds the format by its probe, renders tools, calls and
# their results as Jinja2 does (the prompt's token count against Jinja2's
# render of the same conversation, tests/data/chat/gen.py's set-up), reads
# the <tool_call><function=...> blocks the model writes (the random model
# steered by a grammar) into tool_calls with values typed by the schema,
# whole and streamed, keeps malformed blocks as content, and forces a call
# with tool_choice "required" or a named function: whatever the random
# model would say, the reply is calls whose arguments validate against the
# function's schema (jsonschema). With Qwen3.5's template a <think> block
# before the calls is reasoning, a call written inside it too. The `openai` npm client does the
# same (tests/server/tools.test.mjs, FORMAT=xml and xml-think). Skips
# without the vocabulary or Jinja2.
set -u
BUILD=${BUILD:-build}
BIN=$BUILD/inflight
SHARED=${IFL_SHARED:-../shared}
pass=0
fail=0
VOCAB=$SHARED/models/vocab/ggml-vocab-qwen2.gguf
TDIR=$SHARED/chat/templates
START_ARGS=(--quiet --parallel 4)
. "$(dirname "$0")/lib.sh"
[ -f "$VOCAB" ] && [ -f "$TDIR/Qwen3-Coder.jinja" ] || skip "no Qwen vocabulary ($VOCAB) or templates ($TDIR)"
python3 -c 'import jinja2, jsonschema' 2>/dev/null || skip "python3's jinja2 and jsonschema are needed"
M=$tmp/qwen.gguf
"$BUILD/tools/mkmodel" -o "$M" --vocab "$VOCAB" --arch qwen2 \
    --n-embd 64 --n-layer 1 --n-head 2 --n-head-kv 1 --n-ff 128 --type f16 --seed 1 --ctx 4096 >/dev/null 2>&1 ||
    bad "mkmodel qwen2 with Qwen's vocabulary"

# run_py NAME TEMPLATE MODE: the Python checks against the server at $U
# (MODE full: every check; render: the prompts and one call of each kind)
run_py() {
python3 - "$U" "$BIN" "$M" "$2" "$3" >"$tmp/py-$1.log" 2>&1 <<'PY'
import json, sys

sys.path.insert(0, 'tests/data/chat')
from tools_http import (check, check_named, check_none, check_turn_after, done, jinja_tokens,
                        post, render_cases, same_stream, set_up, valid_call)

U, BIN, MODEL, TMPL, MODE = sys.argv[1:6]
THINK = '<think>' in open(TMPL, encoding='utf-8').read()  # a reasoning template
SCHEMA = {}
set_up(U, BIN, MODEL, TMPL, {'bos_token': '<|endoftext|>', 'eos_token': '<|im_end|>'}, SCHEMA)
render_cases(['f_tools', 'g_tool_types', 'h_tool_call_result', 'i_tool_call_then_final',
              'j_string_arguments'])

WEATHER = {'type': 'object', 'properties': {
    'city': {'type': 'string', 'enum': ['Paris', 'Rome', 'São Paulo']},
    'days': {'type': 'integer', 'minimum': 1, 'maximum': 7},
    'hourly': {'type': 'boolean'}}, 'required': ['city', 'days']}
TIME = {'type': 'object', 'properties': {
    'zone': {'type': 'string', 'maxLength': 6},
    'fmt': {'type': 'array', 'items': {'type': 'string', 'enum': ['h', 'm', 's']}, 'maxItems': 3},
    'offset': {'type': ['number', 'null'], 'minimum': 0, 'maximum': 14}},
    'required': ['zone']}
NOTE = {'type': 'object', 'properties': {'text': {'type': 'string'},
                                         'tags': {'type': 'array', 'items': {'type': 'string'}}},
        'required': ['text']}
TOOLS = [{'type': 'function', 'function': {'name': 'get_weather', 'description': 'Weather.',
                                           'parameters': WEATHER}},
         {'type': 'function', 'function': {'name': 'get_time', 'description': 'Time.',
                                           'parameters': TIME}},
         {'type': 'function', 'function': {'name': 'note', 'description': 'Notes text.',
                                           'parameters': NOTE}},
         {'type': 'function', 'function': {'name': 'ping', 'description': 'No arguments.'}}]
SCHEMA.update({'get_weather': WEATHER, 'get_time': TIME, 'note': NOTE,
               'ping': {'type': 'object', 'maxProperties': 0}})
ASK = [{'role': 'system', 'content': 'Be brief.'},
       {'role': 'user', 'content': 'What is the weather in Paris?'}]


def block(name, *params):
    return ('"<tool_call>\\n<function=%s>\\n" ' % name +
            ' '.join('"<parameter=%s>\\n" %s "\\n</parameter>\\n"' % p for p in params) +
            ' "</function>\\n</tool_call>"')


# auto: the model's own calls (steered by a grammar), typed by the schema
GRAMMARS = [
    ('one call', 'root ::= ' + block('get_weather', ('city', '("Paris" | "Rome")'),
                                     ('days', '[1-7]')),
     None, ['get_weather']),
    ('text, then two calls', 'root ::= "Checking." [a-z]{2} "\\n" %s "\\n" %s' % (
        block('ping'), block('get_time', ('zone', '[A-Z]{3}'), ('fmt', '"[\\"h\\", \\"m\\"]"'),
                             ('offset', '"null"'))),
     'Checking.', ['ping', 'get_time']),
    ('a multi-line value holding tags', 'root ::= ' + block(
        'note', ('text', '"line one\\n  <b>two</b> </tool_call>\\n"'), ('tags', '"[]"')),
     None, ['note']),
]
for what, g, before, names in GRAMMARS:
    for seed in range(2 if MODE == 'full' else 1):
        body = {'messages': ASK, 'tools': TOOLS, 'max_tokens': 200, 'temperature': 1,
                'seed': seed, 'grammar': g}
        c = post(body)['choices'][0]
        m = c['message']
        calls = m.get('tool_calls') or []
        check('auto, %s, seed %d: calls read, valid, finish tool_calls' % (what, seed),
              [t['function']['name'] for t in calls] == names and
              all(valid_call(t, names) for t in calls) and
              (m['content'] is None if before is None else m['content'].startswith(before)) and
              c['finish_reason'] == 'tool_calls' and
              [t['index'] for t in calls] == list(range(len(calls))), c)
        same_stream(body, m, 'tool_calls', 'auto, %s, seed %d' % (what, seed))
c = post({'messages': ASK, 'tools': TOOLS, 'max_tokens': 200, 'temperature': 0,
          'grammar': 'root ::= ' + block('get_weather', ('city', '"Rome"'), ('days', '"3"'),
                                         ('hourly', '"True"'))})
check('auto: the values typed by the schema (Python\'s True a boolean)',
      c['choices'][0]['message']['tool_calls'][0]['function']['arguments'] ==
      '{"city": "Rome", "days": 3, "hourly": true}', c)
c = post({'messages': ASK, 'tools': TOOLS, 'max_tokens': 200, 'temperature': 0,
          'grammar': 'root ::= ' + block('note', ('text', '"42"'))})
check('auto: a string parameter keeps its text ("42" stays a string)',
      c['choices'][0]['message']['tool_calls'][0]['function']['arguments'] == '{"text": "42"}', c)

# replies that are not calls: content as they stand
NOT = [('an unknown function', block('launch'),
        '<tool_call>\n<function=launch>\n</function>\n</tool_call>'),
       ('Hermes\' JSON in the block', '"<tool_call>\\n{\\"name\\": \\"ping\\"}\\n</tool_call>"',
        '<tool_call>\n{"name": "ping"}\n</tool_call>'),
       ('a value never closed', '"<tool_call>\\n<function=ping>\\n<parameter=a>\\nx"',
        '<tool_call>\n<function=ping>\n<parameter=a>\nx'),
       ('plain text', '"It is sunny in Paris today, " [a-z]{3}', None)]
for what, g, want in NOT:
    body = {'messages': ASK, 'tools': TOOLS, 'max_tokens': 200, 'temperature': 1, 'seed': 1,
            'grammar': 'root ::= ' + g}
    c = post(body)['choices'][0]
    m = c['message']
    check('auto, %s: content as it stands, finish stop' % what,
          'tool_calls' not in m and c['finish_reason'] == 'stop' and
          (m['content'] == want if want else m['content'].startswith('It is sunny')), c)
    if MODE != 'full':
        break
    s = same_stream(body, m, 'stop', 'auto, ' + what)
    if not want:
        check('auto, plain text, streamed: content as it comes (several deltas)',
              s['n_content'] > 3, s)
if THINK:  # a call inside the reasoning is reasoning (a constrained reply opens its own block)
    g = ('root ::= "<think>\\nMaybe " %s " then.\\n</think>\\n\\n" %s' %
         (block('ping'), block('get_time', ('zone', '"UTC"'))))
    body = {'messages': ASK, 'tools': TOOLS, 'max_tokens': 200, 'temperature': 0, 'grammar': g}
    c = post(body)['choices'][0]
    m = c['message']
    check('a call inside <think> is reasoning; the one after it a call',
          m.get('reasoning_content') ==
          'Maybe <tool_call>\n<function=ping>\n</function>\n</tool_call> then.' and
          [t['function']['name'] for t in m.get('tool_calls') or []] == ['get_time'] and
          m['content'] is None, m)
    same_stream(body, m, 'tool_calls', 'a call inside <think>')

# tool_choice "required": calls, whatever the random model would say, valid
# against their schemas (the reasoning closed by the prompt: a forced call
# is the whole reply)
for seed in range(5 if MODE == 'full' else 2):
    body = {'messages': ASK, 'tools': TOOLS[:2] + TOOLS[3:], 'tool_choice': 'required',
            'max_tokens': 400, 'temperature': 1, 'seed': seed}
    c = post(body)['choices'][0]
    m = c['message']
    calls = m.get('tool_calls') or []
    check('required, seed %d: calls, valid, content null, finish tool_calls' % seed,
          len(calls) >= 1 and all(valid_call(t, SCHEMA) for t in calls) and m['content'] is None and
          c['finish_reason'] == 'tool_calls', c)
    if seed < 2:
        same_stream(body, m, 'tool_calls', 'required, seed %d' % seed)
check_named(ASK, TOOLS, ['get_weather', 'get_time', 'ping'], 2 if MODE == 'full' else 1)
code, b = post({'messages': ASK, 'tools': [{'type': 'function', 'function': {
    'name': 'f', 'parameters': {'type': 'object', 'properties': {
        'p': {'type': 'string', 'pattern': '^a+$'}}}}}], 'tool_choice': 'required',
    'max_tokens': 1}, status=True)
check('required, a string pattern the XML format cannot follow: 400 naming it',
      code == 400 and b['error']['param'] == 'tools' and 'properties.p' in b['error']['message'],
      [code, b])

# tool_choice none: no tools in the prompt, the reply not read for calls
withtools = check_none(ASK, TOOLS, GRAMMARS[0][1], lambda t: '<function=get_weather>' in t)

# the next turn: the calls as the server gave them and their results render
# as Jinja2 renders them (the values as the template writes each kind)
r = post({'messages': ASK, 'tools': TOOLS, 'max_tokens': 200, 'temperature': 0,
          'grammar': 'root ::= %s "\\n" %s' % (
              block('get_weather', ('city', '"Rome"'), ('days', '"3"'), ('hourly', '"false"')),
              block('get_time', ('zone', '"UTC"'), ('fmt', '"[\\"h\\"]"')))})
m = r['choices'][0]['message']
conv = ASK + [m] + [{'role': 'tool', 'tool_call_id': t['id'], 'content': '{"temp": 21}'}
                    for t in m['tool_calls']]
nxt = post({'messages': conv, 'tools': TOOLS, 'max_tokens': 1})
want = jinja_tokens([{k: v for k, v in x.items() if k != 'refusal'} for x in conv], TOOLS)
check('next turn: the calls and their results rendered as Jinja2 renders them (%d tokens)' % want,
      len(m['tool_calls']) == 2 and nxt['usage']['prompt_tokens'] == want and
      want > withtools + 40, [want, nxt['usage'], m])
check_turn_after(conv, TOOLS)

done()
PY
sed "s/^/$1: /" "$tmp/py-$1.log" | grep -E '^[^ ]+ (ok|FAIL) '
add_counts "$tmp/py-$1.log" || { echo "FAIL $1: the Python checks ran"; tail -20 "$tmp/py-$1.log"; }
}

for t in qwen3-coder:Qwen3-Coder:full qwen3.5:Qwen3.5-4B:full nemotron3:NVIDIA-Nemotron-3-Nano-30B-A3B-BF16:render \
    stepfun3.5:StepFun3.5-Flash:render; do
    name=${t%%:*}; rest=${t#*:}; file=${rest%%:*}; mode=${rest#*:}
    start_server "$name" --chat-template "$TDIR/$file.jinja" || { bad "$name: the server starts"; continue; }
    U="http://127.0.0.1:$PORT"
    run_py "$name" "$TDIR/$file.jinja" "$mode"
    if [ "$name" = qwen3-coder ] && npm_ready; then
        run_node "openai client (tools, xml)" 200 tests/server/tools.test.mjs BASE_URL="$U" MODEL=qwen FORMAT=xml
    fi
    if [ "$name" = qwen3.5 ] && npm_ready; then
        run_node "openai client (tools, xml, thinking)" 200 tests/server/tools.test.mjs BASE_URL="$U" MODEL=qwen FORMAT=xml-think
    fi
    kill -TERM "$SPID" 2>/dev/null; wait "$SPID" 2>/dev/null
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
