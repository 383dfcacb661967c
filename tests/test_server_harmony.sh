#!/usr/bin/env bash
# gpt-oss's harmony chat over HTTP: a small gpt-oss model (tools/mkmodel)
# on o200k_harmony cut to 20000 tokens with gpt-oss's chat template
# (tests/data/vocab/ggml-vocab-gptoss-20k). The server renders tools, tool
# calls and tool results as Jinja2 renders the template (prompt tokens of
# tests/data/chat's reference renders), refuses bad tools with 400s, and
# reads the reply's channels back: analysis as reasoning_content, final as
# content, a message to functions.NAME as tool_calls (the `openai` npm
# client, tests/server/harmony.test.mjs; the random model is steered into
# the format by a grammar, so the parser meets the text a model writes), and
# forces a call with tool_choice "required" or a named function (the header
# written into the prompt, the arguments constrained by their schema).
# A server with another template still refuses tools.
set -u
BUILD=${BUILD:-build}
BIN=$BUILD/inflight
MK=${MKMODEL:-$BUILD/tools/mkmodel}
SHARED=${IFL_SHARED:-../shared}
V=$BUILD/vocab/ggml-vocab-gptoss-20k.gguf
pass=0
fail=0
START_ARGS=(--quiet --parallel 8)
. "$(dirname "$0")/lib.sh"
[ -f "$V" ] || xz -dc tests/data/vocab/ggml-vocab-gptoss-20k.gguf.xz >"$V" 2>/dev/null ||
    { mkdir -p "$(dirname "$V")" && xz -dc tests/data/vocab/ggml-vocab-gptoss-20k.gguf.xz >"$V"; }
M=$tmp/oss.gguf
"$MK" -o "$M" --vocab "$V" --arch gpt-oss --type f16 --n-embd 64 --n-layer 2 --n-head 4 --n-head-kv 2 \
    --n-expert 4 --n-expert-used 2 --n-ff 64 --n-swa 4 --ctx 2048 --seed 3 >/dev/null 2>&1 || bad "mkmodel gpt-oss"
code() { curl -s -m 60 -o "$tmp/body" -w '%{http_code}' -H 'Content-Type: application/json' -d "$2" "$U$1"; }
field() { python3 -c "import json,sys; d=json.load(open('$tmp/body')); print($1)"; }

start_server oss || { echo "$pass passed, $((fail + 1)) failed"; exit 1; }
U="http://127.0.0.1:$PORT"

# the prompt of each reference conversation has as many tokens as Jinja2's
# render (the date made today's, as strftime_now gives it); messages sent as
# OpenAI clients send them: arguments a JSON string, thinking as
# reasoning_content
for c in a_single_user b_system_user c_multi_turn d_non_ascii e_developer_effort f_tools \
    g_tool_types h_tool_call_result i_tool_call_then_final j_string_arguments; do
    python3 - "$c" >"$tmp/req.json" <<'PY'
import json, sys
cases = {c['name']: c for c in json.load(open('tests/data/chat/cases.json'))['cases']}
c = cases[sys.argv[1]]
msgs = []
for m in c['messages']:
    m = dict(m)
    if 'thinking' in m:
        m['reasoning_content'] = m.pop('thinking')
    for tc in m.get('tool_calls', []):
        if not isinstance(tc['function']['arguments'], str):
            tc['function']['arguments'] = json.dumps(tc['function']['arguments'])
    msgs.append(m)
req = {'messages': msgs, 'max_tokens': 1, 'temperature': 0}
if c['tools']:
    req['tools'] = c['tools']
v = dict(c.get('vars', {}))
if 'reasoning_effort' in v:  # OpenAI's field; the rest as chat_template_kwargs
    req['reasoning_effort'] = v.pop('reasoning_effort')
if v:
    req['chat_template_kwargs'] = v
print(json.dumps(req))
PY
    want_text=$tmp/want.txt
    sed "s/^Current date: 2025-06-15$/Current date: $(date +%Y-%m-%d)/" "tests/data/chat/expected/gpt-oss__$c.txt" >"$want_text"
    want=$("$BIN" tokenize -m "$M" --parse-special <"$want_text" | wc -w)
    [ "$(code /v1/chat/completions "$(cat "$tmp/req.json")")" = 200 ] || cat "$tmp/body"
    case $c in
    # string arguments reach the template as the object they hold (as
    # llama.cpp's server gives them), so the render is the object form's
    j_string_arguments) want=$("$BIN" tokenize -m "$M" --parse-special < <(sed 's/"{\\"city\\": \\"Paris\\"}"<|call|>/{"city": "Paris"}<|call|>/' "$want_text") | wc -w) ;;
    esac
    check "$c: the prompt is Jinja2's render ($want tokens)" "$want" "$(field "d['usage']['prompt_tokens']")"
done

# errors: 400 naming the field, and the server goes on
bad_req() { # name, param, needle, body
    check "$1: 400" 400 "$(code /v1/chat/completions "$4")"
    has "$1: names $2" "\"param\": \"$2\"" "$(python3 -m json.tool "$tmp/body")"
    has "$1: says why" "$3" "$(cat "$tmp/body")"
}
MSG='"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2'
bad_req "tools not a list" tools "must be a list" "{$MSG, \"tools\": {}}"
bad_req "a tool without a name" tools "tools[1]" "{$MSG, \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}, {\"type\": \"function\", \"function\": {}}]}"
bad_req "tool_choice required without tools" tool_choice "needs tools" "{$MSG, \"tool_choice\": \"required\"}"
bad_req "tool_choice: an unknown function" tool_choice "no function named 'g'" "{$MSG, \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}], \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"g\"}}}"
bad_req "a tool call without arguments" messages "tool_calls[0]" '{"messages": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f"}}]}], "max_tokens": 2}'
bad_req "a tool result with no call before it" messages "no previous assistant message with a tool call" '{"messages": [{"role": "user", "content": "Hi"}, {"role": "tool", "content": "x"}], "max_tokens": 2}'
bad_req "reasoning_effort: another value" reasoning_effort "low" "{$MSG, \"reasoning_effort\": \"max\"}"
bad_req "chat_template_kwargs: not an object" chat_template_kwargs "an object" "{$MSG, \"chat_template_kwargs\": 1}"
bad_req "chat_template_kwargs: the server's variable" chat_template_kwargs "'tools' is set by the server" "{$MSG, \"chat_template_kwargs\": {\"tools\": []}}"
bad_req "an unknown role" messages "system, developer, user, assistant, tool" '{"messages": [{"role": "robot", "content": "Hi"}], "max_tokens": 2}'
check "the server still answers" 200 "$(code /v1/chat/completions "{$MSG}")"

if npm_ready; then
    run_node "openai client (harmony)" 200 tests/server/harmony.test.mjs BASE_URL="$U" MODEL=oss
fi
kill -TERM "$SPID" 2>/dev/null; wait "$SPID" 2>/dev/null

# another template: tools stay unsupported, a tool role is refused
M=$SHARED/models/stories260K.gguf
start_server plain || { echo "$pass passed, $((fail + 1)) failed"; exit 1; }
U="http://127.0.0.1:$PORT"
bad_req "ChatML: tools" tools "writes tool calls in no format the server reads back" "{$MSG, \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]}"
has "ChatML: tools: says what to do" "--chat-template can give one that does" "$(cat "$tmp/body")"
check "completions: tools 400" 400 "$(code /v1/completions '{"prompt": "Hi", "max_tokens": 2, "tools": [{"type": "function", "function": {"name": "f"}}]}')"
has "completions: tools: says where they go" "only /v1/chat/completions takes tools" "$(cat "$tmp/body")"
bad_req "ChatML: a tool role" messages "(system, developer, user, assistant)" '{"messages": [{"role": "tool", "content": "Hi"}], "max_tokens": 2}'
kill -TERM "$SPID" 2>/dev/null; wait "$SPID" 2>/dev/null
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
