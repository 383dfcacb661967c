#!/usr/bin/env bash
# inflight bench: the offline mode through the executor API and the --url
# load generator against a running inflight serve, on stories260K. Checks
# the figures are there and sane, not how fast the machine is.
set -u
BUILD=${BUILD:-build}
BIN=$BUILD/inflight
M=${IFL_SHARED:-../shared}/models/stories260K.gguf
pass=0; fail=0; spid=
tmp=$(mktemp -d)
trap '[ -n "$spid" ] && kill -KILL "$spid" 2>/dev/null; rm -rf "$tmp"' EXIT
ok() { pass=$((pass + 1)); echo "ok   $1"; }
bad() { fail=$((fail + 1)); echo "FAIL $1"; }

"$BIN" bench -m "$M" -p 16 -n 8 -c 1,3 -r 2 -t 1 --json >"$tmp/off.json" 2>"$tmp/off.err"
[ "$(grep -c '"decode_tps"' "$tmp/off.json")" -eq 2 ] && ok "offline: one JSON line per level" ||
    { bad "offline: one JSON line per level"; cat "$tmp/off.json" "$tmp/off.err"; }
grep -q '"concurrency":3,"n_prompt":16,"n_gen":8' "$tmp/off.json" && ok "offline: levels and shapes" || bad "offline: levels and shapes"
awk -F'"decode_tps":' 'NF > 1 { split($2, a, ","); if (a[1] + 0 <= 0) bad = 1 } END { exit bad }' "$tmp/off.json" &&
    ok "offline: positive throughput" || bad "offline: positive throughput"
"$BIN" bench -m "$M" -p 16 -n 8 -c 1 -r 1 -t 1 | grep -q '^| 1 |' && ok "offline: table" || bad "offline: table"

( exec "$BIN" serve -m "$M" --host 127.0.0.1 --port 0 -c 256 --quiet 2>"$tmp/log" ) &
spid=$!
PORT=
for _ in $(seq 150); do
    PORT=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$tmp/log" 2>/dev/null | grep -o '[0-9]*$')
    [ -n "$PORT" ] && [ "$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/health")" = 200 ] && break
    sleep 0.1
done
"$BIN" bench --url "http://127.0.0.1:$PORT" -n 12 -c 1,4 --max-tokens 16 --json >"$tmp/url.json" 2>&1
rc=$?
[ $rc -eq 0 ] && [ "$(grep -c '"failed":0' "$tmp/url.json")" -eq 2 ] && ok "--url: every request served" ||
    { bad "--url: every request served (exit $rc)"; cat "$tmp/url.json"; }
# 12 requests of 16 tokens each: the usage chunk counts them
awk -F'"output_tps":' 'NF > 1 { split($2, a, ","); if (a[1] + 0 <= 0) bad = 1 } END { exit bad }' "$tmp/url.json" &&
    ok "--url: output tokens counted" || bad "--url: output tokens counted"
kill -TERM "$spid"; wait "$spid" 2>/dev/null; spid=

"$BIN" bench --url "http://127.0.0.1:$PORT" -n 2 >/dev/null 2>&1
[ $? -eq 2 ] && ok "--url: no server is exit 2" || bad "--url: no server is exit 2"
for args in "-m $M -c 0" "-m $M -p x" "--url ftp://x" "-c 1,2"; do
    # shellcheck disable=SC2086
    "$BIN" bench $args >/dev/null 2>"$tmp/e"
    [ $? -eq 2 ] && [ -s "$tmp/e" ] && ok "bad arguments: $args" || bad "bad arguments: $args"
done
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
