#!/usr/bin/env bash
# Replicas behind haproxy (the recipe of docs/distributed.md) on 127.0.0.1:
# two `inflight serve` processes, haproxy from Debian health-checking
# /health, and a load of six clients sending completions of 300 tokens
# (every other one streamed) all along. The model is the reference
# llama-f32 (13 MB, random weights) on one thread each: a request takes
# ~0.3-1 s there, so some are always in flight on a replica when it is
# killed or drained; on stories260K one takes a few ms, and whether any
# was in flight would be luck.
#   1. SIGKILL one replica under load: every request that had not started
#      on it succeeds (connection failures are retried on the other, with
#      redispatch); the requests in flight on it may fail and are counted
#      apart (haproxy's log must name the killed one for each); the other
#      keeps serving; haproxy marks the dead one DOWN.
#   2. Restart it on its port: it comes back into rotation.
#   3. SIGTERM the other under load: it drains (everything in flight on it
#      completes, no request fails), new requests go to the live one, it
#      exits 0 and is marked DOWN.
# Every wait is bounded; every process started here is stopped here.
set -u
BUILD=${BUILD:-build}
BIN=$BUILD/inflight
SHARED=${IFL_SHARED:-../shared}
M=$SHARED/models/ref/llama-f32.gguf
pass=0
fail=0
tmp=$(mktemp -d)
pids=()
cleanup() {
    touch "$tmp/stop"
    for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null; done
    wait 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
START_ARGS=(--parallel 8 --threads 1 --shutdown-timeout 20 --quiet)
. "$(dirname "$0")/lib.sh"

if ! command -v haproxy >/dev/null; then
    bad "haproxy is not installed (scripts/deps.sh installs it)"
    echo "$pass passed, $fail failed"
    exit 1
fi
ms() { echo $(($(date +%s%N) / 1000000)); }
free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

start_server r1 || exit 1
P1=$PORT R1=$SPID
start_server r2 || exit 1
P2=$PORT R2=$SPID

# The recipe's configuration, with faster checks (inter 300ms) for a short
# test, and a log line per request naming the client's X-Test-Id.
LB=$(free_port)
ST=$(free_port)
cat >"$tmp/haproxy.cfg" <<EOF
global
    maxconn 512
    nbthread 1
    log stdout format raw local0

defaults
    mode http
    log global
    log-format "id=%[capture.req.hdr(0)] srv=%s status=%ST retries=%rc term=%tsc Ta=%Ta"
    timeout connect 2s
    timeout client 60s
    timeout server 60s
    retries 3
    option redispatch 1
    retry-on conn-failure empty-response 503
    option abortonclose

listen llm
    bind 127.0.0.1:$LB
    balance leastconn
    http-request capture req.hdr(X-Test-Id) len 40
    http-response set-header X-Served-By %[srv_name]
    option httpchk
    http-check send meth GET uri /health
    http-check expect status 200
    default-server check inter 300ms fall 2 rise 2 observe layer4 error-limit 1 on-error mark-down
    server r1 127.0.0.1:$P1
    server r2 127.0.0.1:$P2

listen stats
    bind 127.0.0.1:$ST
    stats enable
    stats uri /stats
EOF
haproxy -c -f "$tmp/haproxy.cfg" >"$tmp/haproxy-check.log" 2>&1
check "haproxy accepts the configuration" 0 "$?"
haproxy -db -f "$tmp/haproxy.cfg" >"$tmp/haproxy.log" 2>&1 &
HP=$!
pids+=("$HP")

# srv_state NAME: haproxy's status of a server (UP, DOWN, ...)
srv_state() {
    curl -s -m 5 "http://127.0.0.1:$ST/stats;csv" | awk -F, -v s="$1" '$1 == "llm" && $2 == s { print $18 }'
}
# wait_state NAME STATE TENTHS: 0 once haproxy says so; sets WAITED_MS
wait_state() {
    local t0
    t0=$(ms)
    for _ in $(seq "$3"); do
        [ "$(srv_state "$1")" = "$2" ] && { WAITED_MS=$(($(ms) - t0)); return 0; }
        sleep 0.1
    done
    WAITED_MS=$(($(ms) - t0))
    return 1
}
wait_state r1 UP 50 && wait_state r2 UP 50
check "haproxy sees both replicas UP" "UP UP" "$(srv_state r1) $(srv_state r2)"

BODY='"prompt":"Once upon a time","max_tokens":300,"ignore_eos":true'
# one_request ID STREAM(0|1): a line "ID START END CODE OK SERVER" in $tmp/load.*
one_request() {
    local id=$1 stream=$2 t0 t1 code ok=0 srv
    local s=false
    [ "$stream" = 1 ] && s=true
    t0=$(ms)
    code=$(curl -s -N -m 30 -o "$tmp/b.$id" -D "$tmp/h.$id" -w '%{http_code}' \
        -H 'Content-Type: application/json' -H "X-Test-Id: $id" \
        "http://127.0.0.1:$LB/v1/completions" -d "{$BODY,\"stream\":$s}")
    t1=$(ms)
    if [ "$code" = 200 ]; then
        if [ "$stream" = 1 ]; then
            tail -c 40 "$tmp/b.$id" | grep -q 'data: \[DONE\]' && ok=1
        else
            grep -q '"completion_tokens":300' "$tmp/b.$id" && ok=1
        fi
    fi
    srv=$(tr -d '\r' <"$tmp/h.$id" | awk -F': ' 'tolower($1) == "x-served-by" { print $2 }' | tail -1)
    echo "$id $t0 $t1 $code $ok ${srv:--}"
    rm -f "$tmp/b.$id" "$tmp/h.$id"
}
load_loop() { # PHASE N: requests until $tmp/stop exists
    local n=0
    while [ ! -e "$tmp/stop" ]; do
        n=$((n + 1))
        one_request "$1-$2-$n" $((n % 2)) >>"$tmp/load.$1"
    done
}
# busy PORT: the replica on PORT has finished a request and has one under
# way (its /metrics), so an event fired now meets it serving
busy() {
    curl -s -m 2 "http://127.0.0.1:$1/metrics" | awk '
        /^inflight_num_requests_running\{/ && $NF >= 1 { run = 1 }
        /^inflight_request_success_total\{/ { done += $NF }
        END { exit !(run && done >= 1) }'
}
# run_load PHASE SECS-BEFORE EVENT SECS-AFTER PORT: six clients; EVENT (a
# command) runs after the first wait, once the replica on PORT is busy (at
# most 5 s more: a slow machine's first requests take longer), its time in
# EVENT_MS
run_load() {
    rm -f "$tmp/stop" "$tmp/load.$1"
    local lp=() i
    for i in 1 2 3 4 5 6; do
        load_loop "$1" "$i" &
        lp+=($!)
    done
    sleep "$2"
    for _ in $(seq 250); do busy "$5" && break; sleep 0.02; done
    EVENT_MS=$(ms)
    $3
    echo "$EVENT_MS" >"$tmp/event.$1"
    sleep "$4"
    touch "$tmp/stop"
    for i in "${lp[@]}"; do wait "$i"; done
}

# 1. SIGKILL r1 under load
kill_r1() { kill -KILL "$R1"; }
run_load kill 2.5 kill_r1 4 "$P1"
K=$EVENT_MS
total=$(wc -l <"$tmp/load.kill")
failed=$(awk '$5 != 1' "$tmp/load.kill")
n_failed=$(printf '%s' "$failed" | grep -c .)
# failed: only requests that were under way when r1 died...
late_fail=$(printf '%s\n' "$failed" | awk -v k="$K" 'NF && !($2 <= k && $3 >= k)' | head -3)
check "kill: no request that started after the kill or ended before it failed" "" "$late_fail"
# ...and were on r1, by haproxy's log (the id is in the log line)
not_r1=""
for id in $(printf '%s\n' "$failed" | awk 'NF { print $1 }'); do
    grep -q "id=$id srv=r1 " "$tmp/haproxy.log" || not_r1+=" $id"
done
check "kill: each failed request was on the killed replica" "" "$not_r1"
retried=$(awk -v k="$K" '$0 ~ /srv=r2 / && $0 ~ /retries=\+/' "$tmp/haproxy.log" | wc -l)
after=$(awk -v k="$K" '$2 > k + 500' "$tmp/load.kill")
n_after=$(printf '%s\n' "$after" | grep -c .)
check "kill: requests after the kill (>= 3 of them)" yes "$([ "$n_after" -ge 3 ] && echo yes)"
check "kill: every one after the kill served by r2" "" "$(printf '%s\n' "$after" | awk 'NF && ($5 != 1 || $6 != "r2")' | head -3)"
before=$(awk -v k="$K" '$3 < k && $5 == 1 { print $6 }' "$tmp/load.kill" | sort | uniq -c | tr -s ' ' | tr '\n' ';')
has "kill: r1 served before it died" "r1" "$before"
wait_state r1 DOWN 50
check "kill: haproxy marked r1 DOWN" DOWN "$(srv_state r1)"
echo "  kill: $total requests, $n_failed failed (in flight on r1), $retried redispatched to r2 by haproxy; served before the kill:$before"

# 2. a replica restarted on r1's port comes back
start_server r1b --port "$P1" || exit 1
R1=$SPID
wait_state r1 UP 50
check "restart: r1 back in rotation (UP after ${WAITED_MS} ms)" UP "$(srv_state r1)"

# 3. SIGTERM r2 under load: it drains
term_r2() { kill -TERM "$R2"; }
run_load term 2.5 term_r2 4 "$P2"
T=$EVENT_MS
total=$(wc -l <"$tmp/load.term")
check "term: no request failed" "" "$(awk '$5 != 1' "$tmp/load.term" | head -3)"
inflight=$(awk -v t="$T" '$2 < t && $3 > t && $6 == "r2"' "$tmp/load.term" | wc -l)
check "term: requests in flight on r2 when it got SIGTERM completed (>= 1: $inflight)" yes \
    "$([ "$inflight" -ge 1 ] && echo yes)"
after=$(awk -v t="$T" '$2 > t + 1000' "$tmp/load.term")
n_after=$(printf '%s\n' "$after" | grep -c .)
check "term: requests started 1 s after SIGTERM (>= 3)" yes "$([ "$n_after" -ge 3 ] && echo yes)"
check "term: every one of them served by r1" "" "$(printf '%s\n' "$after" | awk 'NF && $6 != "r1"' | head -3)"
STOP_RC=timeout
for _ in $(seq 150); do
    if ! kill -0 "$R2" 2>/dev/null; then wait "$R2"; STOP_RC=$?; break; fi
    sleep 0.1
done
check "term: r2 drained and exited 0" 0 "$STOP_RC"
wait_state r2 DOWN 50
check "term: haproxy marked r2 DOWN" DOWN "$(srv_state r2)"
echo "  term: $total requests, $inflight in flight on r2 at SIGTERM, $n_after started 1 s after it"

[ "$fail" -eq 0 ] || {
    echo "---- haproxy's messages"; grep -v '^id=' "$tmp/haproxy.log" | tail -n 20
    echo "---- its last requests"; grep '^id=' "$tmp/haproxy.log" | tail -n 10
}
[ -n "${KEEP_TMP:-}" ] && cp -r "$tmp" "$KEEP_TMP"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
