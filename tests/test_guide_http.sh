#!/usr/bin/env bash
# Guided decoding over HTTP: a constraint that does not compile is an error
# naming the problem, never other output (issue 35: TGI's regex a{100000}
# answered 200 with the text "a{1000"). Runs `inflight serve` on
# 127.0.0.1 --port 0 with stories260K and talks to it with curl.
set -u
BUILD=${BUILD:-build}
BIN=$BUILD/inflight
SHARED=${IFL_SHARED:-../shared}
M=$SHARED/models/stories260K.gguf
pass=0
fail=0
tmp=$(mktemp -d)
SPID=
cleanup() {
    [ -n "$SPID" ] && kill -TERM "$SPID" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

. "$(dirname "$0")/lib.sh"

( exec "$BIN" serve -m "$M" --host 127.0.0.1 --port 0 2>"$tmp/server.log" ) &
SPID=$!
PORT=
for _ in $(seq 100); do
    PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$tmp/server.log" 2>/dev/null | grep -o '[0-9]*$')
    [ -n "$PORT" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/health")" = 200 ] && break
    sleep 0.1
done
if [ -z "$PORT" ]; then
    echo "server did not start:"; cat "$tmp/server.log"
    echo "$pass passed, 1 failed"; exit 1
fi
B="http://127.0.0.1:$PORT"
# req PATH BODY -> status code (body in $tmp/body)
req() { curl -s -m 30 -o "$tmp/body" -w '%{http_code}' -X POST "$B$1" -H 'Content-Type: application/json' -d "$2"; }
tgi() { # regex -> request body
    printf '{"inputs":"Once upon a time","parameters":{"max_new_tokens":8,"grammar":{"type":"regex","value":"%s"}}}' "$1"
}

# the issue's two cases, and other counts that cannot compile
for re in 'a{100000}' '[a-z]{1,100000}' 'a{4294967297}' 'a{10001,}'; do
    check "TGI regex $re: 422" 422 "$(req /generate "$(tgi "$re")")"
    body=$(cat "$tmp/body")
    has "TGI regex $re: validation" '"error_type":"validation"' "$body"
    has "TGI regex $re: names the count" "is too large (max 10000)" "$body"
done
check "TGI stream regex a{100000}: 422" 422 "$(req /generate_stream "$(tgi 'a{100000}')")"
has "TGI stream regex: message" "is too large" "$(cat "$tmp/body")"
for re in 'a{1a}' 'a{,5}'; do
    check "TGI regex $re: 422" 422 "$(req /generate "$(tgi "$re")")"
    has "TGI regex $re: malformed" "malformed repeat" "$(cat "$tmp/body")"
done
check "TGI regex a*+a: 422" 422 "$(req /generate "$(tgi 'a*+a')")"
has "TGI regex a*+a: possessive" "possessive" "$(cat "$tmp/body")"

# a count at the limit still constrains: the output is all a's
check "TGI regex a{3}: 200" 200 "$(req /generate "$(tgi 'a{3}')")"
check "TGI regex a{3}: text" '{"generated_text":"aaa"}' "$(cat "$tmp/body")"
check "TGI regex [a-z]{1,10000}: 200" 200 "$(req /generate "$(tgi '[a-z]{1,10000}')")"
text=$(sed -n 's/^{"generated_text":"\(.*\)"}$/\1/p' "$tmp/body")
if [[ "$text" =~ ^[a-z]{1,10000}$ ]]; then ok "TGI regex [a-z]{1,10000}: matches"; else bad "TGI regex [a-z]{1,10000}: matches"; cat "$tmp/body"; fi

# the other front ends: GBNF counts and schema lengths (OpenAI routes: 400 with param)
check "GBNF {100001}: 400" 400 "$(req /v1/completions '{"prompt":"x","max_tokens":4,"grammar":"root ::= \"a\"{100001}"}')"
body=$(cat "$tmp/body")
has "GBNF {100001}: param" '"param":"grammar"' "$body"
has "GBNF {100001}: names the count" "repetition count too large (max 10000)" "$body"
check "schema minLength 20000: 400" 400 "$(req /v1/completions '{"prompt":"x","max_tokens":4,"json_schema":{"type":"string","minLength":20000}}')"
has "schema minLength 20000: names it" "minLength" "$(cat "$tmp/body")"
check "schema maxItems 1e6: 400" 400 "$(req /v1/completions '{"prompt":"x","max_tokens":4,"json_schema":{"type":"array","maxItems":1000000}}')"
has "schema maxItems: names it" "maxItems" "$(cat "$tmp/body")"

# nothing of the above left the server unwell
check "health after" 200 "$(curl -s -o /dev/null -w '%{http_code}' "$B/health")"
kill -TERM "$SPID" 2>/dev/null
for _ in $(seq 150); do kill -0 "$SPID" 2>/dev/null || break; sleep 0.1; done
wait "$SPID" 2>/dev/null
rc=$?
SPID=
check "server exits 0" 0 "$rc"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
