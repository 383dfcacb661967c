#!/usr/bin/env bash
# Slow and greedy clients against `inflight serve` (tests/server/slow.test.mjs):
# 300 connections from 10 loopback addresses trickling header bytes while
# /health and short completions must still answer fast, every one of them
# closed at its receive deadline; the per-address connection limit; a whole
# completion whose client leaves is cancelled; SIGTERM with slow connections
# open. Every server started here is stopped here.
set -u
BUILD=${BUILD:-build}
BIN=$BUILD/inflight
SHARED=${IFL_SHARED:-../shared}
M=$SHARED/models/stories260K.gguf
pass=0
fail=0
START_ARGS=(--quiet)
. "$(dirname "$0")/lib.sh"

if ! command -v node >/dev/null; then
    echo "node is needed"; echo "0 passed, 1 failed"; exit 1
fi

stop_server() { # SIGTERM, bounded wait; exit status in STOP_RC, seconds in STOP_S
    local t0=$SECONDS
    kill -TERM "$SPID" 2>/dev/null
    STOP_RC=timeout
    for _ in $(seq 150); do
        if ! kill -0 "$SPID" 2>/dev/null; then wait "$SPID"; STOP_RC=$?; break; fi
        sleep 0.1
    done
    [ "$STOP_RC" = timeout ] && kill -KILL "$SPID" 2>/dev/null
    STOP_S=$((SECONDS - t0))
}
run_node() { # name, env...
    local name=$1; shift
    env "$@" timeout 100 node tests/server/slow.test.mjs >"$tmp/node.log" 2>&1
    local rc=$?
    cat "$tmp/node.log"
    add_counts "$tmp/node.log" "$rc"
    echo "$name: $cnt_p passed, $cnt_f failed"
}

for args in "--request-timeout 0" "--max-conns-per-ip 0" "--http-threads 0" "--http-threads x"; do
    # shellcheck disable=SC2086
    "$BIN" serve -m "$M" $args >/dev/null 2>"$tmp/err" </dev/null
    rc=$?
    if [ $rc -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ]; then ok "serve $args: exit 2"; else bad "serve $args: exit $rc"; cat "$tmp/err"; fi
done

# 300 slow connections, 30 from each of 10 addresses (under the limit of 40).
# /health must answer within 2 s; a completion, which also waits for the
# engine (one thread: two spinning threads crawl on a loaded machine),
# within 5 s. Locked out (the old thread per connection), they fail.
start_server slow -m "$M" -t 1 --request-timeout 3 --max-conns-per-ip 40 || { echo "$pass passed, $((fail + 1)) failed"; exit 1; }
run_node "slow clients" BASE_URL="http://127.0.0.1:$PORT" MODE=slow N=300 ADDRS=10 TIMEOUT_S=3 BOUND_MS=2000 GEN_BOUND_MS=5000
run_node "per-address limit" BASE_URL="http://127.0.0.1:$PORT" MODE=perip PER_IP=40
# SIGTERM while slow connections are open: they do not hold the exit up
node -e '
const net = require("net");
for (let i = 0; i < 100; i++) {
  const s = net.connect({ host: "127.0.0.1", port: Number(process.argv[1]), localAddress: "127.0.0." + (50 + i % 5) });
  s.on("connect", () => s.write("GET /health HTTP/1.1\r\n")); s.on("error", () => {});
}
setTimeout(() => process.exit(0), 5000);' "$PORT" &
npid=$!
sleep 1
stop_server
check "SIGTERM with 100 slow connections open: exit 0" 0 "$STOP_RC"
check "... within 3 s" 1 "$([ "$STOP_S" -le 3 ] && echo 1 || echo 0)"
wait $npid

# a whole completion whose client leaves mid-run is cancelled: a model of
# about 100 MB on one thread keeps 4 x 2000 tokens busy for seconds even on
# a quiet machine (the 13 MB reference model finished them in 0.1 s, before
# the client had left)
BIG=$tmp/leave-q8_0.gguf
if ! "$BUILD/tools/mkmodel" -o "$BIG" --vocab "$SHARED/models/stories260K.gguf" --arch llama \
    --n-embd 1024 --n-layer 8 --n-head 16 --n-ff 2816 --ctx 4096 --type q8_0 >/dev/null 2>&1; then
    echo "mkmodel failed"; echo "$pass passed, $((fail + 1)) failed"; exit 1
fi
start_server leave -m "$BIG" -t 1 -c 4096 || { echo "$pass passed, $((fail + 1)) failed"; exit 1; }
run_node "client leaves a whole completion" BASE_URL="http://127.0.0.1:$PORT" MODE=leave MODEL=leave-q8_0 MAXTOK=2000
stop_server
check "leave server stops cleanly" 0 "$STOP_RC"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
