#!/usr/bin/env bash
# Tool calls in DeepSeek-R1's format over HTTP, with llama.cpp's R1
# template (the shared llama-cpp-deepseek-r1.jinja, the one that renders
# tools: DeepSeek's own R1 templates do not, and their servers refuse
# tools, tests/test_server_tools.sh). A tiny llama model over Llama 3's
# vocabulary with DeepSeek's tags added as control tokens (mkmodel
# --add-control), so the tags in a prompt are single tokens and in a reply
# are shown to the parser. The server finds the format by its probe,
# renders tools, calls and results as Jinja2 does (the prompt's token
# count against Jinja2's render of the reference conversations and of its
# own calls), reads the calls the model writes (the random model steered by
# a grammar) back into tool_calls, whole and streamed, with a <think> block
# before them as reasoning_content; leaves what is not a call in content;
# forces a call with tool_choice "required" or a named function (arguments
# valid against the schema, jsonschema; the thought the template opened is
# closed first); hides the tools with "none". The `openai` npm client does
# the same (tests/server/tools.test.mjs, FORMAT=deepseek). Skips without
# the vocabulary or Jinja2.
set -u
BUILD=${BUILD:-build}
BIN=$BUILD/inflight
SHARED=${IFL_SHARED:-../shared}
pass=0
fail=0
VOCAB=$SHARED/models/vocab/ggml-vocab-llama-bpe.gguf
TMPL=$SHARED/chat/templates/llama-cpp-deepseek-r1.jinja
START_ARGS=(--quiet --parallel 4)
. "$(dirname "$0")/lib.sh"
[ -f "$VOCAB" ] && [ -f "$TMPL" ] || skip "no Llama 3 vocabulary ($VOCAB) or R1 template ($TMPL)"
python3 -c 'import jinja2, jsonschema' 2>/dev/null || skip "python3's jinja2 and jsonschema are needed"
M=$tmp/r1.gguf
T='<｜User｜>,<｜Assistant｜>,<｜end▁of▁sentence｜>,<｜tool▁calls▁begin｜>,<｜tool▁calls▁end｜>'
T="$T,<｜tool▁call▁begin｜>,<｜tool▁call▁end｜>,<｜tool▁sep｜>,<｜tool▁outputs▁begin｜>"
T="$T,<｜tool▁outputs▁end｜>,<｜tool▁output▁begin｜>,<｜tool▁output▁end｜>"
"$BUILD/tools/mkmodel" -o "$M" --vocab "$VOCAB" --add-control "$T" --arch llama \
    --n-embd 64 --n-layer 1 --n-head 2 --n-head-kv 1 --n-ff 128 --type f16 --seed 1 --ctx 4096 >/dev/null 2>&1 ||
    bad "mkmodel llama with DeepSeek's tags"

start_server r1 --chat-template "$TMPL" || { echo "$pass passed, $((fail + 1)) failed"; exit 1; }
U="http://127.0.0.1:$PORT"
python3 - "$U" "$BIN" "$M" "$TMPL" >"$tmp/py.log" 2>&1 <<'PY'
import json, re, sys

sys.path.insert(0, 'tests/data/chat')
import gen
import tools_http
from tools_http import (check, check_named, check_none, check_turn_after, done, fold,
                        jinja_tokens, n_tokens, post, render_cases, same_stream, set_up,
                        valid_call)
from tools_http import ASK, TOOL_SCHEMAS, TOOLS

U, BIN, MODEL, TMPL = sys.argv[1:5]
SCHEMA = {}
set_up(U, BIN, MODEL, TMPL, {'bos_token': '<|begin_of_text|>', 'eos_token': '<｜end▁of▁sentence｜>'},
       SCHEMA)
render_cases(['f_tools', 'h_tool_call_result', 'i_tool_call_then_final', 'j_string_arguments'],
             keep_thinking=False)
SCHEMA.update(TOOL_SCHEMAS)

B, E = '<｜tool▁calls▁begin｜>', '<｜tool▁calls▁end｜>'
CB, CE, SEP = '<｜tool▁call▁begin｜>', '<｜tool▁call▁end｜>', '<｜tool▁sep｜>'


def call(name, args):
    """A GBNF string of the call as the template writes it (args: GBNF)."""
    return '"' + CB + 'function' + SEP + name + '\\n```json\\n" ' + args + ' "\\n```' + CE + '"'


W = call('get_weather', '"{\\"city\\": \\"" ("Paris" | "Rome") "\\", \\"days\\": " [1-7] "}"')
P = call('ping', '"{}"')

# the server's refusals, as 400s naming the field
code, b = post({'messages': ASK, 'tools': TOOLS, 'tool_choice': 'maybe', 'max_tokens': 1},
               status=True)
check('tool_choice unknown: 400', code == 400 and b['error']['param'] == 'tool_choice', b)
code, b = post({'messages': ASK, 'tools': TOOLS, 'max_tokens': 1,
                'tool_choice': {'type': 'function', 'function': {'name': 'nope'}}}, status=True)
check('tool_choice naming no tool: 400', code == 400 and 'nope' in b['error']['message'], b)

# the template opens the model's thought: a reply of its own is reasoning
c = post({'messages': ASK, 'max_tokens': 6, 'ignore_eos': True, 'temperature': 0})['choices'][0]
check('a reply of its own: reasoning_content (the prompt opened <think>)',
      c['message'].get('reasoning_content') and not c['message']['content'], c)

# auto: the model's own calls (steered by a grammar), as it wrote them
GRAMMARS = [
    ('one call', 'root ::= "' + B + '" ' + W + ' "' + E + '"', ['get_weather'], None, None),
    ('text, then two calls', 'root ::= "Let me check.\\n\\n' + B + '" ' + W + ' "\\n" ' + P +
     ' "' + E + '"', ['get_weather', 'ping'], 'Let me check.\n\n', None),
    ('a thought, then a call', 'root ::= "<think>\\nThe user wants " [a-z]{4} ".\\n</think>\\n\\n' +
     B + '" ' + P + ' "' + E + '"', ['ping'], None, '^The user wants [a-z]{4}\\.$'),
    ('the block left open', 'root ::= "' + B + '" ' + P, ['ping'], None, None),
]
for what, g, names, before, thought in GRAMMARS:
    for seed in range(2):
        body = {'messages': ASK, 'tools': TOOLS, 'max_tokens': 300, 'temperature': 1,
                'seed': seed, 'grammar': g}
        c = post(body)['choices'][0]
        m = c['message']
        calls = m.get('tool_calls') or []
        check('auto, %s, seed %d: calls read, content %r, finish tool_calls' % (what, seed, before),
              [t['function']['name'] for t in calls] == names and
              all(valid_call(t, names) for t in calls) and m['content'] == before and
              c['finish_reason'] == 'tool_calls' and
              [t['index'] for t in calls] == list(range(len(calls))) and
              len({t['id'] for t in calls}) == len(calls) and
              (not thought or re.match(thought, m.get('reasoning_content') or '')), c)
        same_stream(body, m, 'tool_calls', 'auto, %s, seed %d' % (what, seed))
c = post({'messages': ASK, 'tools': TOOLS, 'max_tokens': 300, 'temperature': 0,
          'grammar': 'root ::= "' + B + '" ' + call('get_weather', '"{\\"city\\":\\"Rome\\", '
                                                   '\\"days\\": 3}"') + ' "' + E + '"'})
check('auto: the arguments as the model wrote them',
      c['choices'][0]['message']['tool_calls'][0]['function']['arguments'] ==
      '{"city":"Rome", "days": 3}', c)

# replies that are not all calls: content as they stand
launch = B + CB + 'function' + SEP + 'launch\n```json\n{}\n```' + CE + E
NOT = [('an unknown function', 'root ::= "' + B + '" ' + call('launch', '"{}"') + ' "' + E + '"',
        launch),
       ('a good call beside an unknown one', 'root ::= "' + B + '" ' + P + ' "\\n" ' +
        call('launch', '"{}"') + ' "' + E + '"', None),
       ('plain text', 'root ::= "It is sunny in Paris today, " [a-z]{3}', None)]
for what, g, want in NOT:
    body = {'messages': ASK, 'tools': TOOLS, 'max_tokens': 300, 'temperature': 1, 'seed': 1,
            'grammar': g}
    c = post(body)['choices'][0]
    m = c['message']
    check('auto, %s: content as it stands, no calls' % what,
          'tool_calls' not in m and c['finish_reason'] == 'stop' and
          (m['content'] == want if want else
           m['content'].startswith(B + CB) and 'launch' in m['content'] if 'beside' in what else
           m['content'].startswith('It is sunny')), c)
    same_stream(body, m, 'stop', 'auto, ' + what)

# tool_choice "required": calls whatever the random model would say, valid
# against their schemas, after the thought the prompt opened, closed empty
for seed in range(4):
    body = {'messages': ASK, 'tools': TOOLS, 'tool_choice': 'required', 'max_tokens': 400,
            'temperature': 1, 'seed': seed}
    r = post(body)
    c = r['choices'][0]
    m = c['message']
    calls = m.get('tool_calls') or []
    check('required, seed %d: calls, valid, content null, finish tool_calls' % seed,
          len(calls) >= 1 and all(valid_call(t, SCHEMA) for t in calls) and
          m['content'] is None and c['finish_reason'] == 'tool_calls' and
          'reasoning_content' not in m, c)
    if seed < 2:
        same_stream(body, m, 'tool_calls', 'required, seed %d' % seed)
text = gen.render(tools_http.SRC, {'messages': ASK, 'tools': TOOLS, 'add_generation_prompt': True},
                  None, tools_http.CTX)
want = n_tokens(text + '</think>\n\n')
check('required: the prompt is Jinja2\'s render with the opened thought closed (%d tokens)' % want,
      text.endswith('<think>\n') and r['usage']['prompt_tokens'] == want, [want, r['usage']])
check_named(ASK, TOOLS, ['get_weather', 'get_time', 'ping'], 2)
body = {'messages': ASK, 'tools': TOOLS, 'tool_choice': 'required', 'parallel_tool_calls': False,
        'max_tokens': 300, 'temperature': 1, 'seed': 5}
calls = post(body)['choices'][0]['message'].get('tool_calls') or []
check('required, parallel_tool_calls false: one call', len(calls) == 1, calls)

# tool_choice none: no tools in the prompt, the reply not read for calls
withtools = check_none(ASK, TOOLS, GRAMMARS[0][1], lambda t: t.startswith(B + CB), 300)

# the next turn: the calls as the server gave them and their results render
# as Jinja2 renders them, whole and after a streamed reply
for stream in (False, True):
    body = {'messages': ASK, 'tools': TOOLS, 'max_tokens': 400, 'temperature': 1, 'seed': 3,
            'tool_choice': 'required'}
    if stream:
        s = fold(post(dict(body, stream=True), stream=True)[0])
        m = {'role': 'assistant', 'content': None, 'tool_calls': [
            {'id': v['id'], 'type': 'function',
             'function': {'name': v['name'], 'arguments': v['arguments']}}
            for _, v in sorted(s['calls'].items())]}
    else:
        m = post(body)['choices'][0]['message']
    conv = ASK + [{k: v for k, v in m.items() if k != 'refusal'}] + [
        {'role': 'tool', 'tool_call_id': t['id'], 'content': '{"temp": 21}'}
        for t in m['tool_calls']]
    nxt = post({'messages': conv, 'tools': TOOLS, 'max_tokens': 1})
    want = jinja_tokens(conv, TOOLS)
    check('next turn%s: the calls and results rendered as Jinja2 renders them (%d tokens)' %
          (' (streamed)' if stream else '', want),
          nxt.get('usage', {}).get('prompt_tokens') == want and want > withtools + 10,
          [want, nxt])
check_turn_after(conv, TOOLS)

done()
PY
grep -E '^(ok|FAIL) ' "$tmp/py.log"
add_counts "$tmp/py.log" || { echo "FAIL the Python checks ran"; tail -20 "$tmp/py.log"; }
if npm_ready; then
    run_node "openai client (tools, deepseek)" 200 tests/server/tools.test.mjs BASE_URL="$U" MODEL=r1 FORMAT=deepseek
fi
kill -TERM "$SPID" 2>/dev/null; wait "$SPID" 2>/dev/null
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
