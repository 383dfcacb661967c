#!/usr/bin/env bash
# `inflight serve` as an operator and a load balancer meet it, on 127.0.0.1:
# HTTP conformance (HEAD, WWW-Authenticate, the key before routing, control
# characters in paths, the /tokenize answer bounded, health probes and
# libmicrohttpd's messages at debug), Retry-After on 429 and 503, one
# server per port unless --reuse-port, restarts on the same port, and a
# second SIGTERM / SIGINT that cuts the drain short.
# Every wait is bounded; every server started here is stopped here.
set -u
BUILD=${BUILD:-build}
BIN=$BUILD/inflight
SHARED=${IFL_SHARED:-../shared}
M=$SHARED/models/stories260K.gguf
SLOW=$SHARED/models/ref/llama-f32.gguf
pass=0
fail=0
tmp=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
    rm -rf "$tmp"
}
trap cleanup EXIT

. "$(dirname "$0")/lib.sh"
hasnt() { # name, needle, haystack
    case "$3" in *"$2"*) bad "$1"; echo "  unexpected: $2" ;; *) ok "$1" ;; esac
}
ms() { echo $(($(date +%s%N) / 1000000)); }

# wait_exit PID TENTHS: exit status into STOP_RC ("timeout" if still running)
wait_exit() {
    STOP_RC=timeout
    for _ in $(seq "$2"); do
        if ! kill -0 "$1" 2>/dev/null; then wait "$1"; STOP_RC=$?; return; fi
        sleep 0.1
    done
}
stop_server() {
    kill -TERM "$SPID" 2>/dev/null
    wait_exit "$SPID" 150
    [ "$STOP_RC" = timeout ] && kill -KILL "$SPID" 2>/dev/null
}
# req METHOD PATH [curl args...] -> "CODE" (body in $tmp/body, headers in $tmp/hdr)
req() {
    local method=$1 path=$2; shift 2
    local m=(-X "$method")
    [ "$method" = HEAD ] && m=(-I)
    curl -s -m 30 -o "$tmp/body" -D "$tmp/hdr" -w '%{http_code}' "${m[@]}" "http://127.0.0.1:$PORT$path" "$@"
}
hdr() { tr -d '\r' <"$tmp/hdr" | grep -i "^$1:" | head -1 | cut -d' ' -f2-; }
# raw BYTES: sends the bytes (printf %b escapes) on a new connection, prints
# the status line of the answer
raw() {
    exec 3<>"/dev/tcp/127.0.0.1/$PORT"
    printf '%b' "$1" >&3
    timeout 5 head -1 <&3 | tr -d '\r'
    exec 3<&-
}
K=(-H 'Authorization: Bearer s3cret')

# ---- conformance, with an API key; log in JSON at the default level ----
start_server auth --api-key s3cret --log-format json --cors-origin https://example.org || exit 1
check "HEAD /health 200" 200 "$(req HEAD /health)"
check "HEAD /health: the GET's length" 15 "$(hdr Content-Length)"
check "HEAD /v1/models 200" 200 "$(req HEAD /v1/models "${K[@]}")"
# the whole answer to a raw HEAD ends with the headers' blank line
exec 3<>"/dev/tcp/127.0.0.1/$PORT"
printf 'HEAD /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n' >&3
timeout 5 cat <&3 >"$tmp/head_raw"
exec 3<&-
check "HEAD /health: the answer ends with the headers" "$(printf '\r\n\r\n' | od -An -c)" \
    "$(tail -c 4 "$tmp/head_raw" | od -An -c)"
hasnt "HEAD /health: no body" '"status"' "$(cat "$tmp/head_raw")"
check "HEAD /metrics 200" 200 "$(req HEAD /metrics "${K[@]}")"
check "HEAD on a POST route 405" 405 "$(req HEAD /v1/completions "${K[@]}")"
check "405 on a POST route allows POST" "POST" "$(hdr Allow)"
check "405 on a GET route allows GET and HEAD" 405 "$(req PUT /v1/models "${K[@]}")"
check "Allow: GET, HEAD" "GET, HEAD" "$(hdr Allow)"

check "no key 401" 401 "$(req POST /v1/completions -d '{"prompt":"x"}')"
check "401 carries WWW-Authenticate: Bearer" "Bearer" "$(hdr WWW-Authenticate)"
check "wrong key on a TGI route 401" 401 "$(req POST /generate -d '{"inputs":"x"}' -H 'Authorization: Bearer no')"
check "TGI 401 carries WWW-Authenticate" "Bearer" "$(hdr WWW-Authenticate)"
check "no key, unknown path: 401, not 404" 401 "$(req GET /v2/secret)"
check "no key, wrong method: 401, not 405" 401 "$(req DELETE /v1/models)"
cp "$tmp/body" "$tmp/body401"
check "every 401 is the same body" "" "$(req GET /nothing >/dev/null; cmp -s "$tmp/body" "$tmp/body401" || echo differs)"
check "no key, /metrics 401" 401 "$(req GET /metrics)"
check "no key, /health 200" 200 "$(req GET /health)"
check "no key, POST /health 405 (its path is open)" 405 "$(req POST /health)"
check "no key, CORS preflight on any path 204" 204 "$(req OPTIONS /v2/secret -H 'Origin: https://example.org')"
check "key, unknown path 404" 404 "$(req GET /v2/secret "${K[@]}")"
check "key, wrong method 405" 405 "$(req DELETE /v1/models "${K[@]}")"

# half_request: a request line cut short, then a close, which libmicrohttpd
# reports ("closed by remote side with incomplete request"); the pause lets
# it read the half before the close comes
half_request() {
    exec 3<>"/dev/tcp/127.0.0.1/$PORT"
    printf 'GET /v1/mod' >&3
    sleep 0.5
    exec 3<&-
}

A='\r\nHost: x\r\nAuthorization: Bearer s3cret\r\nConnection: close\r\n\r\n'
check "GET /v1/models (raw) 200" "HTTP/1.1 200 OK" "$(raw "GET /v1/models HTTP/1.1$A")"
check "GET /v1/mo%64els (escaped letter) 200" "HTTP/1.1 200 OK" "$(raw "GET /v1/mo%64els HTTP/1.1$A")"
check "GET /v1/models%00 400" "HTTP/1.1 400 Bad Request" "$(raw "GET /v1/models%00 HTTP/1.1$A")"
check "GET /v1/models%0a 400" "HTTP/1.1 400 Bad Request" "$(raw "GET /v1/models%0a HTTP/1.1$A")"
check "GET /v1/models%7f 400" "HTTP/1.1 400 Bad Request" "$(raw "GET /v1/models%7f HTTP/1.1$A")"
check "GET /v1/models<NUL> 400" "HTTP/1.1 400 Bad Request" "$(raw "GET /v1/models\\x00 HTTP/1.1$A")"
check "GET /v1/models<NUL>x 400" "HTTP/1.1 400 Bad Request" "$(raw "GET /v1/models\\x00x HTTP/1.1$A")"
check "GET /v1/mod<SOH>els 400" "HTTP/1.1 400 Bad Request" "$(raw "GET /v1/mod\\x01els HTTP/1.1$A")"
check "/health%00 400 (even the open route)" "HTTP/1.1 400 Bad Request" "$(raw "GET /health%00 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")"

# /tokenize: the answer is held to --max-body-bytes (default 4 MiB) like a
# body: 600 KB of text would answer with megabytes
python3 -c 'import json; print(json.dumps({"inputs": "Once upon a time there was a cat. " * 18000}))' >"$tmp/tok600k"
t0=$(ms)
code=$(req POST /tokenize "${K[@]}" --data-binary @"$tmp/tok600k")
t1=$(ms)
check "/tokenize 600 KB: 413" 413 "$code"
has "413 says why" 'exceed 4194304 bytes (--max-body-bytes)' "$(cat "$tmp/body")"
check "413 answer is small" 1 "$([ "$(wc -c <"$tmp/body")" -lt 1000 ] && echo 1 || echo 0)"
echo "     (600 KB /tokenize refused in $((t1 - t0)) ms)"
python3 -c 'import json; print(json.dumps({"inputs": "Once upon a time there was a cat. " * 1000}))' >"$tmp/tok35k"
check "/tokenize 35 KB: 200" 200 "$(req POST /tokenize "${K[@]}" --data-binary @"$tmp/tok35k")"
check "/tokenize 35 KB: every token" 1 "$(node -e '
const a = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
console.log(a.length > 5000 && a.every((t) => typeof t.id === "number" && typeof t.text === "string") ? 1 : 0)' "$tmp/body" 2>&1)"

# logging: health probes are debug (start_server polled /health, and so did
# the tests above); libmicrohttpd's messages too, never plain text
half_request
sleep 0.3
stop_server
check "auth server stops with 0" 0 "$STOP_RC"
hasnt "info level: no /health lines" '"path":"/health"' "$(cat "$tmp/auth.log")"
has "info level: other requests logged" '"level":"info","method":"GET","path":"/v1/models","status":200' "$(cat "$tmp/auth.log")"
hasnt "info level: no libmicrohttpd lines" 'libmicrohttpd' "$(cat "$tmp/auth.log")"
check "every log line is JSON or the CLI's own" "" "$(grep -v '^{' "$tmp/auth.log" | grep -v '^inflight serve: ')"

start_server debug --log-level debug --log-format json || exit 1
check "debug server /health" 200 "$(req GET /health)"
half_request
for _ in $(seq 50); do # until libmicrohttpd has noticed the half request
    grep -q libmicrohttpd "$tmp/debug.log" && break
    sleep 0.1
done
stop_server
has "debug level: /health lines at debug" '"level":"debug","method":"GET","path":"/health","status":200' "$(cat "$tmp/debug.log")"
has "debug level: libmicrohttpd's message as JSON at debug" '"level":"debug","msg":"libmicrohttpd: ' "$(cat "$tmp/debug.log")"
check "debug level: every line JSON or the CLI's own" "" "$(grep -v '^{' "$tmp/debug.log" | grep -v '^inflight serve: ')"
"$BIN" serve -m "$M" --log-level loud >/dev/null 2>"$tmp/err" </dev/null
check "--log-level loud: exit 2" "2 1" "$? $(wc -l <"$tmp/err")"

# ---- Retry-After ----
# one sequence at a time and a queue of 24. The running request must outlast
# the filling of the queue and both probes on any CPU: a request of 500
# tokens takes 0.07 s on a fast core, less than 24 curls take to arrive, so
# the one that holds the slot asks for 30000 tokens of a 32768-token model
# (tens of seconds), and is cancelled by its client leaving once the probes
# are done. The first request's 2000 tokens give the service time that the
# 429 multiplies by the 24 waiting.
"$BUILD/tools/mkmodel" -o "$tmp/long.gguf" --vocab "$M" --n-embd 256 --n-layer 4 \
    --n-head 8 --n-head-kv 2 --n-ff 768 --ctx 32768 --type f32 >/dev/null 2>&1 ||
    bad "mkmodel a 32768-token model"
start_server queue -m "$tmp/long.gguf" -c 32768 -t 1 --parallel 1 --max-queue 24 --quiet || exit 1
check "a first request (the service time)" 200 \
    "$(req POST /v1/completions -d '{"prompt":"Once","max_tokens":2000,"ignore_eos":true}')"
metric() { curl -s -m 5 "http://127.0.0.1:$PORT/metrics" | grep "^inflight_num_requests_$1{" | cut -d' ' -f2; }
wait_metric() { # NAME VALUE: until the gauge reads VALUE (bounded: 20 s)
    for _ in $(seq 200); do
        [ "$(metric "$1")" = "$2" ] && return 0
        sleep 0.1
    done
    return 1
}
curl -s -m 300 -o /dev/null "http://127.0.0.1:$PORT/v1/completions" \
    -d '{"prompt":"Once","max_tokens":30000,"ignore_eos":true}' &
hold=$!
wait_metric running 1
loaders=()
for _ in $(seq 24); do
    curl -s -m 300 -o /dev/null "http://127.0.0.1:$PORT/v1/completions" \
        -d '{"prompt":"Once","max_tokens":500,"ignore_eos":true}' &
    loaders+=($!)
done
wait_metric waiting 24
check "the queue is full (1 running, 24 waiting)" "1 24" "$(metric running) $(metric waiting)"
check "full queue 429" 429 "$(req POST /v1/completions -d '{"prompt":"Once","max_tokens":5}')"
ra=$(hdr Retry-After)
echo "     (Retry-After: $ra)"
check "429 Retry-After: whole seconds, 2 to 600 (24 requests of a few tenths)" 1 \
    "$([[ "$ra" =~ ^[0-9]+$ ]] && [ "$ra" -ge 2 ] && [ "$ra" -le 600 ] && echo 1 || echo 0)"
check "TGI overloaded 429" 429 "$(req POST /generate -d '{"inputs":"Once","parameters":{"max_new_tokens":5}}')"
has "TGI 429 is overloaded" '"error_type":"overloaded"' "$(cat "$tmp/body")"
ra=$(hdr Retry-After)
check "TGI 429 Retry-After" 1 "$([[ "$ra" =~ ^[0-9]+$ ]] && [ "$ra" -ge 1 ] && echo 1 || echo 0)"
check "the probes changed nothing (1 running, 24 waiting)" "1 24" "$(metric running) $(metric waiting)"
kill "$hold" "${loaders[@]}" 2>/dev/null
wait "$hold" "${loaders[@]}" 2>/dev/null
wait_metric running 0
check "clients gone: nothing running or waiting" "0 0" "$(metric running) $(metric waiting)"
stop_server

# ---- one server per port ----
start_server first || exit 1
P1=$PORT
"$BIN" serve -m "$M" --host 127.0.0.1 --port "$P1" >/dev/null 2>"$tmp/second.log" </dev/null &
spid=$!
pids+=("$spid")
wait_exit "$spid" 100
check "a second server on the port exits 2" 2 "$STOP_RC"
has "it names the address" "127.0.0.1:$P1: address already in use" "$(cat "$tmp/second.log")"
check "the first keeps serving" 200 "$(req GET /v1/models)"
check "one listener on the port" 1 "$(ss -Htln "sport = :$P1" | wc -l)"
# a keep-alive client still connected when the server stops: the server
# closes first, which leaves its side in TIME_WAIT on the port, and only
# SO_REUSEADDR lets the next server bind then
exec 3<>"/dev/tcp/127.0.0.1/$P1"
printf 'GET /health HTTP/1.1\r\nHost: x\r\n\r\n' >&3
sleep 0.2
stop_server
timeout 5 cat <&3 >/dev/null # read to the server's close, so ours is a FIN, not a reset
exec 3<&-
check "first stops with 0" 0 "$STOP_RC"
sleep 0.1
check "TIME_WAIT on the port" 1 "$([ "$(ss -Htan state time-wait "sport = :$P1" | wc -l)" -ge 1 ] && echo 1 || echo 0)"
start_server again --port "$P1" || { bad "a restart on the same port at once"; }
check "the restart serves on the same port" "$P1 200" "$PORT $(req GET /v1/models)"
stop_server
# replicas share a port only when both ask
start_server rep1 --reuse-port || exit 1
P1=$PORT
R1=$SPID
start_server rep2 --reuse-port --port "$P1" || bad "a --reuse-port replica starts"
check "--reuse-port: the replica serves" 200 "$(req GET /health)"
check "--reuse-port: two listeners" 2 "$(ss -Htln "sport = :$P1" | wc -l)"
stop_server
SPID=$R1
stop_server

# ---- a second signal during the drain ----
# long work on one thread: eight loaders of 8 x 400 tokens in one batch of
# 64 (every step has 64 rows or more, so no reply can end in the few
# seconds the test takes, whatever order the requests come in), three
# checked replies (an OpenAI stream, a TGI stream, a whole OpenAI reply), and
# a keep-alive client whose second request meets the shutdown: 503 with
# Retry-After
start_server drain -m "$SLOW" -t 1 --parallel 64 --quiet --shutdown-timeout 60 || exit 1
B="http://127.0.0.1:$PORT"
loaders=()
for _ in 1 2 3 4 5 6 7 8; do
    curl -s -m 120 -o /dev/null "$B/v1/completions" -d '{"prompt":"Once","max_tokens":400,"ignore_eos":true,"n":8}' &
    loaders+=($!)
done
curl -sN -m 120 "$B/v1/completions" -d '{"prompt":"Once","max_tokens":400,"ignore_eos":true,"stream":true,"n":2}' >"$tmp/oai_stream" &
c1=$!
curl -sN -m 120 "$B/generate_stream" -d '{"inputs":"Once","parameters":{"max_new_tokens":400}}' >"$tmp/tgi_stream" &
c2=$!
curl -s -m 120 "$B/v1/completions" -d '{"prompt":"Once","max_tokens":400,"ignore_eos":true,"n":2}' >"$tmp/whole" &
c3=$!
# a keep-alive connection, idle at SIGTERM after one answer
exec 4<>"/dev/tcp/127.0.0.1/$PORT"
printf 'GET /health HTTP/1.1\r\nHost: x\r\n\r\n' >&4
IFS= read -r -t 10 ka1 <&4
while IFS= read -r -t 10 line <&4 && [ "$line" != $'\r' ]; do :; done
read -r -N 15 -t 10 _ <&4
for _ in $(seq 100); do # all eleven in flight (and this /metrics request)
    n=$(curl -s -m 5 "$B/metrics" | grep '^inflight_http_requests_in_flight' | grep -o '[0-9]*$')
    [ "${n:-0}" -ge 12 ] && break
    sleep 0.05
done
sleep 0.3
kill -TERM "$SPID"
sleep 0.5
check "keep-alive: the first answer" "HTTP/1.1 200 OK" "${ka1%$'\r'}"
printf 'GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n' >&4
ka2=
while IFS= read -r -t 10 line <&4 && [ "$line" != $'\r' ]; do ka2+="${line%$'\r'}"$'\n'; done
exec 4<&-
check "keep-alive: a request during the drain, on the open connection: 503" \
    "HTTP/1.1 503 Service Unavailable" "$(echo "$ka2" | head -1)"
ra=$(echo "$ka2" | grep -i '^Retry-After:' | cut -d' ' -f2)
check "503 Retry-After" 1 "$([[ "$ra" =~ ^[0-9]+$ ]] && [ "$ra" -ge 1 ] && echo 1 || echo 0)"
check "still draining (the loaders run)" 1 "$(kill -0 "$SPID" 2>/dev/null && echo 1 || echo 0)"
t0=$(ms)
kill -INT "$SPID"
wait_exit "$SPID" 100
t1=$(ms)
echo "     (exited $((t1 - t0)) ms after the second signal)"
check "second signal: exits within 3 s" 1 "$([ $((t1 - t0)) -lt 3000 ] && echo 1 || echo 0)"
check "second signal: exit status 1" 1 "$STOP_RC"
has "second signal logged" "second SIGINT: cancelling requests in flight" "$(cat "$tmp/drain.log")"
wait $c1 $c2 $c3 "${loaders[@]}"
check "OpenAI stream: an abort chunk per choice" 2 "$(grep -c '"finish_reason":"abort"' "$tmp/oai_stream")"
check "OpenAI stream: ends with [DONE]" "data: [DONE]" "$(grep -v '^$' "$tmp/oai_stream" | tail -1)"
# TGI has no abort finish reason: its stream ends with the
# incomplete_generation error event
has "TGI stream: its final event" '"error_type":"incomplete_generation"' "$(grep '^data:' "$tmp/tgi_stream" | tail -1)"
check "whole reply: every choice abort" 2 "$(grep -o '"finish_reason":"abort"' "$tmp/whole" | wc -l)"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
