#!/usr/bin/env bash
# `inflight serve` keeps its KV cache's memory to what it holds: with room
# for 256 contexts of the llama-f16 reference model (128 MiB) it starts
# small, /metrics shows the pool's bytes reserved, resident and used and
# the process's RSS (consistent with /proc), RSS follows a load of 32
# streams up and, after --kv-release-ms, back down; --kv-cache-memory
# bounds the default pool and the start-up line says which bound won.
set -u
BUILD=${BUILD:-build}
BIN=$BUILD/inflight
SHARED=${IFL_SHARED:-../shared}
M=$SHARED/models/ref/llama-f16.gguf
pass=0
fail=0
START_ARGS=(--quiet)
. "$(dirname "$0")/lib.sh"
truth() { # name, condition (arithmetic), detail
    if (( $2 )); then ok "$1"; else bad "$1"; echo "  $3"; fi
}

stop_server() {
    kill -TERM "$SPID" 2>/dev/null
    for _ in $(seq 150); do kill -0 "$SPID" 2>/dev/null || { wait "$SPID"; return; }; sleep 0.1; done
    kill -KILL "$SPID" 2>/dev/null
}
metric() { # NAME_WITH_LABELS -> value (integer part) from $tmp/metrics
    grep -F "$1" "$tmp/metrics" | grep -v '^#' | head -1 | awk '{print $2}' | cut -d. -f1
}
scrape() { curl -s -m 10 "http://127.0.0.1:$PORT/metrics" >"$tmp/metrics"; }
rss() { awk '/^VmRSS:/ {print $2 * 1024}' "/proc/$SPID/status"; }
# a sanitizer build's shadow memory grows RSS with every page touched: the
# RSS-against-KV bounds hold only without one (the KV figures hold always)
case "$BUILD" in *san-*) no_san=0 ;; *) no_san=1 ;; esac
kvb() { metric "inflight_kv_cache_bytes{model_name=\"llama-f16\",state=\"$1\"}"; }

# ---- --kv-cache-memory: bad values are one line and exit 2 ----
for v in 0.4 0 101% 2X -1G; do
    "$BIN" serve -m "$M" --kv-cache-memory "$v" >/dev/null 2>"$tmp/err" </dev/null
    rc=$?
    if [ $rc -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ]; then ok "--kv-cache-memory $v: exit 2"; else bad "--kv-cache-memory $v: exit $rc"; cat "$tmp/err"; fi
done

# ---- 256 contexts reserved, little resident ----
start_server big --parallel 256 --kv-release-ms 300 || { echo "$pass passed, $((fail + 1)) failed"; exit 1; }
has "start-up line names the bound" "full contexts (the bound" "$(cat "$tmp/big.log")"
scrape
reserved=$(kvb reserved)
resident=$(kvb resident)
rss0=$(rss)
truth "128 MiB reserved" "reserved >= 128 * 1048576" "reserved $reserved"
truth "idle: under 1 MiB of it resident" "resident < 1048576" "resident $resident"
# (a sanitizer's shadow and quarantine take tens of MiB more: under one,
# RSS must still stay under the pool it would hold were the pool resident)
truth "idle: RSS well under the pool" "rss0 < (no_san ? reserved / 2 : reserved)" "rss $rss0, reserved $reserved"
prss=$(metric "inflight_process_resident_memory_bytes")
truth "process RSS metric agrees with /proc" "prss > rss0 / 2 && prss < rss0 * 2" "metric $prss, /proc $rss0"
for name in 'state="used"' 'state="peak_used"' 'state="bound"' 'state="cached"' inflight_kv_cache_released_blocks_total; do
    has "/metrics has $name" "$name" "$(cat "$tmp/metrics")"
done

# ---- 32 identical streams of 200 tokens: RSS follows, then goes back (one
# copy of their blocks stays as the cached prefix; the others are free) ----
for _ in $(seq 32); do
    curl -s -m 120 -o /dev/null "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
        -d "{\"prompt\":\"Once upon a time\",\"max_tokens\":200,\"temperature\":0,\"ignore_eos\":true,\"stream\":true}" &
done
peak_rss=$rss0
while [ -n "$(jobs -p | grep -v "^$SPID\$")" ] && [ "$(jobs -rp | wc -l)" -gt 1 ]; do
    r=$(rss); [ "$r" -gt "$peak_rss" ] && peak_rss=$r
    sleep 0.05
done
wait_jobs() { for j in $(jobs -rp); do [ "$j" = "$SPID" ] || wait "$j"; done; }
wait_jobs
scrape
peak=$(kvb peak_used)
used=$(kvb used)
check "no KV in use after the load" 0 "$used"
# (the 32 clients start one by one: on a loaded machine the first may end
# before the last reaches its 12th block, so half of them at once is asked)
truth "peak use: 16 or more sequences of about 13 blocks at once" "peak >= 16 * 12 * 16384" "peak $peak"
truth "RSS grew with the load, not to the pool" "!no_san || peak_rss - rss0 < peak * 2 + 16 * 1048576" "rss $rss0 -> $peak_rss, peak KV $peak"
# what stays: the cached prefixes (each request's full blocks; prefix caching is on)
kept() { echo $(( $(metric 'inflight_kv_cache_blocks{model_name="llama-f16",state="cached"}') * 16384 + 1048576 )); }
for _ in $(seq 100); do
    scrape
    [ "$(kvb resident)" -lt "$(kept)" ] && break
    sleep 0.1
done
truth "resident KV given back after --kv-release-ms, cached prefixes kept" \
    "$(kvb resident) < $(kept) && $(kvb resident) < peak / 4" "resident $(kvb resident), cached + 1 MiB $(kept), peak $peak"
released=$(metric "inflight_kv_cache_released_blocks_total")
truth "blocks counted as released" "released > 0" "released $released"
rss1=$(rss)
truth "RSS back down" "!no_san || rss1 < rss0 + peak / 2 + 8 * 1048576" "rss $rss0 -> $rss1 (peak KV $peak)"
truth "resident <= reserved, used <= reserved" "$(kvb resident) <= reserved && $(kvb used) <= reserved" "$(grep kv_cache_bytes "$tmp/metrics")"
stop_server

# ---- a draft model's pool: in /metrics, and given back when idle ----
start_server draft --parallel 8 --draft-model "$M" --spec-adaptive off --draft-p-min 0 --kv-release-ms 300 || { echo "$pass passed, $((fail + 1)) failed"; exit 1; }
dkv() { metric "inflight_draft_kv_cache_bytes{model_name=\"llama-f16\",state=\"$1\"}"; }
scrape
dres=$(dkv reserved)
truth "draft pool reserved in /metrics" "dres > 0" "$(grep draft_kv "$tmp/metrics")"
code=$(curl -s -m 60 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt":"Once upon a time","max_tokens":300,"temperature":0,"ignore_eos":true}')
check "draft: a completion" 200 "$code"
scrape
d1=$(dkv resident)
truth "draft pool: the request's blocks resident" "d1 > 0 && d1 <= dres" "$(grep draft_kv "$tmp/metrics")"
for _ in $(seq 50); do sleep 0.1; scrape; [ "$(dkv resident)" -lt "$d1" ] && break; done
truth "draft pool: given back when idle" "$(dkv resident) < d1" "$(grep draft_kv "$tmp/metrics") (was $d1)"
stop_server

# ---- a bound below the full pool ----
start_server small --parallel 64 --kv-cache-memory 2M || { echo "$pass passed, $((fail + 1)) failed"; exit 1; }
has "start-up line: cut to --kv-cache-memory" "cut to --kv-cache-memory" "$(cat "$tmp/small.log")"
scrape
check "2 MiB bound: 128 blocks" 128 "$(metric 'inflight_kv_cache_blocks{model_name="llama-f16",state="max"}')"
check "bound in /metrics" 2097152 "$(kvb bound)"
code=$(curl -s -m 60 -o /dev/null -w '%{http_code}' "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt":"Once upon a time","max_tokens":400,"temperature":0}')
check "a full context still fits" 200 "$code"
stop_server

# ---- --kv-prefault: the whole pool resident from the start, and kept ----
start_server pre --parallel 64 --kv-prefault --kv-release-ms 0 || { echo "$pass passed, $((fail + 1)) failed"; exit 1; }
has "start-up line: resident" "resident (--kv-prefault)" "$(cat "$tmp/pre.log")"
scrape
truth "prefaulted pool resident" "$(kvb resident) >= $(kvb reserved) * 99 / 100" "$(grep kv_cache_bytes "$tmp/metrics")"
code=$(curl -s -m 60 -o "$tmp/pre.json" -w '%{http_code}' "http://127.0.0.1:$PORT/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt":"Once upon a time","max_tokens":40,"temperature":0}')
check "prefaulted pool serves" 200 "$code"
sleep 0.5 # idle well past --kv-release-ms 0: nothing is given back
scrape
check "prefaulted pool never released" 0 "$(metric inflight_kv_cache_released_blocks_total)"
truth "prefaulted pool still resident" "$(kvb resident) >= $(kvb reserved) * 99 / 100" "$(grep kv_cache_bytes "$tmp/metrics")"
stop_server

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
