#!/usr/bin/env bash
# A bounded soak of `inflight serve` on stories260K (tests/server/soak.test.mjs):
# about a minute of mixed routes, streamed and whole, with a quarter of the
# generation clients walking away mid-request; then no request lost, no 5xx,
# gauges and KV blocks back to their baseline, RSS growth bounded, greedy
# output unchanged. SOAK_SECONDS and SOAK_SEED override the length and the seed.
set -u
BUILD=${BUILD:-build}
BIN=$BUILD/inflight
SHARED=${IFL_SHARED:-../shared}
M=$SHARED/models/stories260K.gguf
tmp=$(mktemp -d)
SPID=
cleanup() {
    [ -n "$SPID" ] && kill -TERM "$SPID" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT

if ! command -v node >/dev/null; then echo "node is needed"; echo "0 passed, 1 failed"; exit 1; fi
if [ ! -d tests/server/node_modules/openai ]; then
    timeout 120 npm install --no-save --no-audit --no-fund --prefix tests/server openai@^4 >"$tmp/npm.log" 2>&1 ||
        { echo "npm install failed:"; tail -5 "$tmp/npm.log"; echo "0 passed, 1 failed"; exit 1; }
fi

# a small pool and batch, so the soak also queues and preempts
( exec "$BIN" serve -m "$M" --host 127.0.0.1 --port 0 --parallel 8 -c 256 --quiet 2>"$tmp/serve.log" ) &
SPID=$!
PORT=
for _ in $(seq 100); do
    PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$tmp/serve.log" 2>/dev/null | grep -o '[0-9]*$')
    [ -n "$PORT" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/health")" = 200 ] && break
    sleep 0.1
done
if [ -z "$PORT" ]; then echo "server did not start:"; cat "$tmp/serve.log"; echo "0 passed, 1 failed"; exit 1; fi

# ASan holds freed memory in its quarantine (256 MiB) and shadows every
# page: in a sanitizer build the RSS bound allows for that, not 32 MiB
case "$BUILD" in *san-*) slack=$((1024 * 1024)) ;; *) slack=$((32 * 1024)) ;; esac
timeout 180 env BASE_URL="http://127.0.0.1:$PORT" SERVER_PID="$SPID" DURATION="${SOAK_SECONDS:-45}" \
    RSS_SLACK_KB="$slack" ${SOAK_SEED:+SEED=$SOAK_SEED} node tests/server/soak.test.mjs
rc=$?
kill -TERM "$SPID" 2>/dev/null
for _ in $(seq 100); do kill -0 "$SPID" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$SPID" 2>/dev/null; then
    echo "FAIL server did not stop within 10 s of SIGTERM"; kill -KILL "$SPID"; exit 1
fi
wait "$SPID"
src=$?
SPID=
if [ "$src" -ne 0 ]; then echo "FAIL server exited $src"; tail -20 "$tmp/serve.log"; exit 1; fi
exit $rc
