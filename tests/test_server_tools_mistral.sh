#!/usr/bin/env bash
# Tool calls in Mistral's [TOOL_CALLS] format over HTTP, with the three
# shared templates that write it: Mistral Small 3.2's
# ([TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{...}, ids of nine characters),
# Devstral's and Ministral 3 Reasoning's ([TOOL_CALLS]NAME[ARGS]{...}; the
# latter thinks in [THINK] ... [/THINK]). A tiny llama model over Llama's
# SentencePiece vocabulary with Mistral's tags added as control tokens
# (mkmodel --add-control), as in Mistral's own v3 vocabulary, so the tags
# in a prompt are single tokens and in a reply are shown to the parser. For
# each template the server finds the format by its probe, renders tools,
# calls and results as Jinja2 does (the prompt's token count against
# Jinja2's render), reads the calls the model writes (the random model
# steered by a grammar) back into tool_calls, whole and streamed, leaves
# what is not a call in content, forces a call with tool_choice "required"
# or a named function (arguments valid against the schema, jsonschema),
# hides the tools with "none", and takes its own calls back in the next
# turn (Mistral Small's template refuses ids that are not nine characters).
# The `openai` npm client does the same (tests/server/tools.test.mjs,
# FORMAT=mistral, Ministral's template). Skips without the vocabulary or
# Jinja2.
set -u
BUILD=${BUILD:-build}
BIN=$BUILD/inflight
SHARED=${IFL_SHARED:-../shared}
pass=0
fail=0
VOCAB=$SHARED/models/vocab/ggml-vocab-llama-spm.gguf
TD=$SHARED/chat/templates
TEMPLATES="small:Mistral-Small-3.2-24B-Instruct-2506 devstral:unsloth-mistral-Devstral-Small-2507
ministral:mistralai-Ministral-3-14B-Reasoning-2512"
START_ARGS=(--quiet --parallel 4)
. "$(dirname "$0")/lib.sh"
[ -f "$VOCAB" ] && [ -f "$TD/Mistral-Small-3.2-24B-Instruct-2506.jinja" ] || skip "no Llama SentencePiece vocabulary ($VOCAB) or Mistral templates ($TD)"
python3 -c 'import jinja2, jsonschema' 2>/dev/null || skip "python3's jinja2 and jsonschema are needed"
M=$tmp/mistral.gguf
TAGS='[INST],[/INST],[TOOL_CALLS],[AVAILABLE_TOOLS],[/AVAILABLE_TOOLS],[TOOL_RESULTS],[/TOOL_RESULTS]'
TAGS="$TAGS,[SYSTEM_PROMPT],[/SYSTEM_PROMPT],[CALL_ID],[ARGS],[THINK],[/THINK],[TOOL_CONTENT],[IMG]"
"$BUILD/tools/mkmodel" -o "$M" --vocab "$VOCAB" --add-control "$TAGS" --arch llama \
    --n-embd 64 --n-layer 1 --n-head 2 --n-head-kv 1 --n-ff 128 --type f16 --seed 1 --ctx 4096 >/dev/null 2>&1 ||
    bad "mkmodel llama with Mistral's tags"

for t in $TEMPLATES; do
    name=${t%%:*}
    TMPL=$TD/${t#*:}.jinja
    start_server "$name" --chat-template "$TMPL" || { bad "$name: the server starts"; continue; }
    U="http://127.0.0.1:$PORT"
    python3 - "$U" "$BIN" "$M" "$TMPL" "$name" >"$tmp/py.log" 2>&1 <<'PY'
import copy, json, re, sys
import jsonschema

sys.path.insert(0, 'tests/data/chat')
from tools_http import check, check_none, done, fold, jinja_tokens, post, set_up
from tools_http import ASK, TOOL_SCHEMAS, TOOLS
import tools_http

U, BIN, MODEL, TMPL, NAME = sys.argv[1:6]
SCHEMA = dict(TOOL_SCHEMAS)
set_up(U, BIN, MODEL, TMPL, {'bos_token': '<s>', 'eos_token': '</s>'}, SCHEMA, NAME + ': ',
       now=True)
SMALL = NAME == 'small'


ID = re.compile('^[A-Za-z0-9]{9}$')


def valid_call(tc, names):
    try:
        f = tc['function']
        jsonschema.validate(json.loads(f['arguments']), SCHEMA[f['name']])
        return f['name'] in names and tc['type'] == 'function' and ID.match(tc['id'])
    except Exception:
        return False


# the prompt is Jinja2's render: tools, a turn with two calls (arguments as
# OpenAI clients send them, a JSON string) and their results, an answer
CONV = ASK + [
    {'role': 'assistant', 'content': None, 'tool_calls': [
        {'id': 'abcDEF123', 'type': 'function',
         'function': {'name': 'get_weather', 'arguments': '{"city": "Paris", "days": 2}'}},
        {'id': 'Zz9Zz9Zz9', 'type': 'function', 'function': {'name': 'ping', 'arguments': '{}'}}]},
    {'role': 'tool', 'tool_call_id': 'abcDEF123', 'content': '{"temp": 21}'},
    {'role': 'tool', 'tool_call_id': 'Zz9Zz9Zz9', 'content': 'pong'},
    {'role': 'assistant', 'content': 'It is 21 degrees.'},
    {'role': 'user', 'content': 'And in Rome, with São Paulo’s too?'}]
for what, msgs in [('tools and a question', ASK), ('two calls, results, an answer', CONV)]:
    want = jinja_tokens(msgs, TOOLS)
    got = post({'messages': msgs, 'tools': TOOLS, 'max_tokens': 1})
    check('%s: the prompt is Jinja2\'s render (%d tokens)' % (what, want),
          got.get('usage', {}).get('prompt_tokens') == want, [want, got])

# the server's refusals and the template's, as 400s naming the field
code, b = post({'messages': ASK, 'tools': TOOLS, 'tool_choice': 'maybe', 'max_tokens': 1},
               status=True)
check('tool_choice unknown: 400', code == 400 and b['error']['param'] == 'tool_choice', b)
code, b = post({'messages': ASK, 'tools': TOOLS, 'max_tokens': 1,
                'tool_choice': {'type': 'function', 'function': {'name': 'nope'}}}, status=True)
check('tool_choice naming no tool: 400', code == 400 and 'nope' in b['error']['message'], b)
if SMALL:
    bad = copy.deepcopy(CONV[:5])
    bad[2]['tool_calls'] = bad[2]['tool_calls'][:1]
    bad[2]['tool_calls'][0]['id'] = 'call_1'
    bad[3]['tool_call_id'] = 'call_1'
    code, b = post({'messages': bad, 'tools': TOOLS, 'max_tokens': 1}, status=True)
    check('an id not nine characters long: 400, the template says why',
          code == 400 and b['error']['param'] == 'messages' and 'length 9' in b['error']['message'],
          [code, b])


def same_stream(body, m, fin, what):
    return tools_http.same_stream(body, m, fin, what, ID.match)


# auto: the model's own calls (steered by a grammar), each as it wrote it;
# text before them is content
W = '"[TOOL_CALLS]get_weather[ARGS]{\\"city\\": \\"" ("Paris" | "Rome") "\\", \\"days\\": " [1-7] "}"'
GRAMMARS = [
    ('one call', 'root ::= ' + W, ['get_weather'], None),
    ('text, then two calls', 'root ::= "Let me check. " ' + W +
     ' "[TOOL_CALLS]get_time[ARGS]{\\"zone\\":\\"" [A-Z]{3} "\\"}"',
     ['get_weather', 'get_time'], 'Let me check. '),
    ('no arguments, whitespace after', 'root ::= "[TOOL_CALLS]ping[ARGS]{}\\n"', ['ping'], None),
]
if SMALL:
    GRAMMARS.append(('the call\'s id', 'root ::= "[TOOL_CALLS]ping[CALL_ID]" [a-z0-9]{9} '
                     '"[ARGS]{}"', ['ping'], None))
else:
    GRAMMARS.append(('the v3 list', 'root ::= "[TOOL_CALLS] [{\\"name\\": \\"ping\\", '
                     '\\"arguments\\": {}}, {\\"name\\": \\"get_time\\", \\"arguments\\": '
                     '{\\"zone\\": \\"UTC\\"}}]"', ['ping', 'get_time'], None))
if NAME == 'ministral':
    GRAMMARS.append(('reasoning, then a call', 'root ::= "[THINK]The user wants " [a-z]{4} '
                     '".[/THINK]" ' + W, ['get_weather'], None))
for what, g, names, before in GRAMMARS:
    for seed in range(2):
        body = {'messages': ASK, 'tools': TOOLS, 'max_tokens': 200, 'temperature': 1,
                'seed': seed, 'grammar': g}
        c = post(body)['choices'][0]
        m = c['message']
        calls = m.get('tool_calls') or []
        check('auto, %s, seed %d: calls read, content %s, finish tool_calls' % (what, seed, before),
              [t['function']['name'] for t in calls] == names and
              all(valid_call(t, names) for t in calls) and m['content'] == before and
              c['finish_reason'] == 'tool_calls' and
              [t['index'] for t in calls] == list(range(len(calls))) and
              len({t['id'] for t in calls}) == len(calls) and
              (not what.startswith('reasoning') or
               re.match('^The user wants [a-z]{4}\\.$', m.get('reasoning_content', ''))), c)
        same_stream(body, m, 'tool_calls', 'auto, %s, seed %d' % (what, seed))
        if 'id' in what:
            check('auto, the call\'s id is the model\'s',
                  calls and re.match('^[a-z0-9]{9}$', calls[0]['id']), calls)
c = post({'messages': ASK, 'tools': TOOLS, 'max_tokens': 200, 'temperature': 0,
          'grammar': 'root ::= "[TOOL_CALLS]get_weather[ARGS]{\\"city\\":\\"Rome\\", \\"days\\": 3}"'})
check('auto: the arguments as the model wrote them',
      c['choices'][0]['message']['tool_calls'][0]['function']['arguments'] ==
      '{"city":"Rome", "days": 3}', c)

# replies that are not calls: content as they stand
NOT = [('an unknown function', 'root ::= "[TOOL_CALLS]launch[ARGS]{}"', '[TOOL_CALLS]launch[ARGS]{}'),
       ('arguments that are not an object', 'root ::= "[TOOL_CALLS]ping[ARGS][1]"',
        '[TOOL_CALLS]ping[ARGS][1]'),
       ('cut inside the arguments', 'root ::= "[TOOL_CALLS]ping[ARGS]{\\"a\\": \\"" [a-z]{300}',
        None),
       ('plain text', 'root ::= "It is sunny in Paris today, " [a-z]{3}', None)]
for what, g, want in NOT:
    body = {'messages': ASK, 'tools': TOOLS, 'max_tokens': 40, 'temperature': 1, 'seed': 1,
            'grammar': g}
    c = post(body)['choices'][0]
    m = c['message']
    cut = what.startswith('cut')
    check('auto, %s: content as it stands, no calls' % what,
          'tool_calls' not in m and c['finish_reason'] == ('length' if cut else 'stop') and
          (m['content'] == want if want else
           m['content'].startswith('[TOOL_CALLS]ping[ARGS]{"a": "' if cut else 'It is sunny')), c)
    s = same_stream(body, m, c['finish_reason'], 'auto, ' + what)
    if what == 'plain text':
        check('auto, plain text, streamed: content as it comes (several deltas)',
              s['n_content'] > 3, s)

# tool_choice "required": calls whatever the random model would say, valid
# against their schemas; a named function: one call to it
for seed in range(4):
    body = {'messages': ASK, 'tools': TOOLS, 'tool_choice': 'required', 'max_tokens': 300,
            'temperature': 1, 'seed': seed}
    c = post(body)['choices'][0]
    m = c['message']
    calls = m.get('tool_calls') or []
    check('required, seed %d: calls, valid, content null, finish tool_calls' % seed,
          len(calls) >= 1 and all(valid_call(t, SCHEMA) for t in calls) and
          m['content'] is None and c['finish_reason'] == 'tool_calls', c)
    if seed < 2:
        same_stream(body, m, 'tool_calls', 'required, seed %d' % seed)
for name in ['get_weather', 'get_time', 'ping']:
    for seed in range(2):
        body = {'messages': ASK, 'tools': TOOLS, 'max_tokens': 300, 'temperature': 1, 'seed': seed,
                'tool_choice': {'type': 'function', 'function': {'name': name}},
                'parallel_tool_calls': seed == 0}
        c = post(body)['choices'][0]
        calls = c['message'].get('tool_calls') or []
        check('named %s, seed %d: one call to it, valid' % (name, seed),
              len(calls) == 1 and calls[0]['function']['name'] == name and
              valid_call(calls[0], {name}) and c['finish_reason'] == 'tool_calls', c)
        same_stream(body, c['message'], 'tool_calls', 'named %s, seed %d' % (name, seed))
body = {'messages': ASK, 'tools': TOOLS, 'tool_choice': 'required', 'parallel_tool_calls': False,
        'max_tokens': 300, 'temperature': 1, 'seed': 5}
calls = post(body)['choices'][0]['message'].get('tool_calls') or []
check('required, parallel_tool_calls false: one call', len(calls) == 1, calls)

# tool_choice none: no tools in the prompt, the reply not read for calls
withtools = check_none(ASK, TOOLS, GRAMMARS[0][1],
                       lambda t: t.startswith('[TOOL_CALLS]get_weather[ARGS]{'))

# the next turn: the calls as the server gave them (its ids) and their
# results render as Jinja2 renders them, whole and after a streamed reply
for stream in (False, True):
    body = {'messages': ASK, 'tools': TOOLS, 'max_tokens': 300, 'temperature': 1, 'seed': 3,
            'tool_choice': 'required'}
    if stream:
        s = fold(post(dict(body, stream=True), stream=True)[0])
        m = {'role': 'assistant', 'content': None, 'tool_calls': [
            {'id': v['id'], 'type': 'function',
             'function': {'name': v['name'], 'arguments': v['arguments']}}
            for _, v in sorted(s['calls'].items())]}
    else:
        m = post(body)['choices'][0]['message']
    conv = ASK + [m] + [{'role': 'tool', 'tool_call_id': t['id'], 'content': '{"temp": 21}'}
                        for t in m['tool_calls']]
    nxt = post({'messages': conv, 'tools': TOOLS, 'max_tokens': 1})
    want = jinja_tokens(conv, TOOLS)
    check('next turn%s: the calls and results rendered as Jinja2 renders them (%d tokens)' %
          (' (streamed)' if stream else '', want),
          nxt.get('usage', {}).get('prompt_tokens') == want and want > withtools + 10,
          [want, nxt])

done()
PY
    grep -E '^(ok|FAIL) ' "$tmp/py.log"
    add_counts "$tmp/py.log" || { echo "FAIL $name: the Python checks ran"; tail -20 "$tmp/py.log"; }
    if [ "$name" = ministral ] && npm_ready; then
        run_node "openai client (tools, mistral)" 200 tests/server/tools.test.mjs BASE_URL="$U" MODEL=mistral FORMAT=mistral
    fi
    kill -TERM "$SPID" 2>/dev/null; wait "$SPID" 2>/dev/null
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
