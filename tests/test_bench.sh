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
. "$(dirname "$0")/lib.sh"

# 32 tokens each: the decode rate is taken from the client's arrival times
# inside the window all decode together, and a client starved of CPU (a
# sanitized build on a loaded machine) reads a short request's tokens in
# one batch, leaving no span to measure
"$BIN" bench -m "$M" -p 16 -n 32 -c 1,3 -r 2 -t 1 --json >"$tmp/off.json" 2>"$tmp/off.err"
[ "$(grep -c '"decode_tps"' "$tmp/off.json")" -eq 2 ] && ok "offline: one JSON line per level" ||
    { bad "offline: one JSON line per level"; cat "$tmp/off.json" "$tmp/off.err"; }
grep -q '"concurrency":3,"n_prompt":16,"n_gen":32' "$tmp/off.json" && ok "offline: levels and shapes" || bad "offline: levels and shapes"
awk -F'"decode_tps":' 'NF > 1 { split($2, a, ","); if (a[1] + 0 <= 0) bad = 1 } END { exit bad }' "$tmp/off.json" &&
    ok "offline: positive throughput" || bad "offline: positive throughput"
"$BIN" bench -m "$M" -p 16 -n 8 -c 1 -r 1 -t 1 | grep -q '^| 1 |' && ok "offline: table" || bad "offline: table"
# four prompts of 300 take two steps of 512 rows: the first request ends
# (2 tokens) before the last has its first, so no step had all four
# decoding; that is said, not measured as a rate
"$BIN" bench -m "$M" -p 300 -n 2 -c 4 -r 1 -t 1 --json >"$tmp/nd.json" 2>"$tmp/nd.err"
grep -q '"decode_tps":0.00,' "$tmp/nd.json" && grep -q 'never decoded together' "$tmp/nd.err" &&
    ok "offline: no decode window, said so" || { bad "offline: no decode window, said so"; cat "$tmp/nd.json" "$tmp/nd.err"; }

# llama-bench's tests: one JSON line per test with llama-bench's field names
"$BIN" bench -m "$M" --pp 16,32 --tg 8 -r 2 -t 1 --json >"$tmp/pt.json" 2>"$tmp/pt.err"
[ $? -eq 0 ] && [ "$(grep -c '^{' "$tmp/pt.json")" -eq 3 ] && ok "pp/tg: one JSON line per test" ||
    { bad "pp/tg: one JSON line per test"; cat "$tmp/pt.json" "$tmp/pt.err"; }
for t in pp16 pp32 tg8; do
    grep -q "\"test\":\"$t\"" "$tmp/pt.json" && ok "pp/tg: test $t present" || bad "pp/tg: test $t present"
done
grep -q '"test":"pp32","n_prompt":32,"n_gen":0,"n_depth":0,"reps":2' "$tmp/pt.json" && grep -q '"test":"tg8","n_prompt":0,"n_gen":8' "$tmp/pt.json" &&
    ok "pp/tg: shapes" || bad "pp/tg: shapes"
# every number that must be positive is, and samples_ts has -r entries
awk '{
    for (k = split("avg_ts avg_ns model_size model_n_params bytes_per_token max_rss_bytes n_threads", f, " "); k > 0; k--) {
        if (!match($0, "\"" f[k] "\":[0-9.]+")) { print "missing " f[k]; bad = 1; continue }
        v = substr($0, RSTART + length(f[k]) + 3, RLENGTH - length(f[k]) - 3)
        if (v + 0 <= 0) { print f[k] " not positive: " v; bad = 1 }
    }
    if (!match($0, /"stddev_ts":[0-9.]+/)) { print "missing stddev_ts"; bad = 1 }
    if (!match($0, /"samples_ts":\[[0-9.]+,[0-9.]+\]/)) { print "samples_ts: not 2 values"; bad = 1 }
} END { exit bad }' "$tmp/pt.json" && ok "pp/tg: fields present and positive" || bad "pp/tg: fields present and positive"
"$BIN" bench -m "$M" --pp 16 --tg 8 -r 2 -t 1 >"$tmp/pt.md" 2>&1
grep -q '^| model | size | params | threads | test | t/s |$' "$tmp/pt.md" &&
    grep -Eq '^\| stories260K.gguf \| [0-9.]+ MiB \| [0-9.]+ M \| 1 \| pp16 \| [0-9.]+ ± [0-9.]+ \|$' "$tmp/pt.md" &&
    grep -Eq '^\| stories260K.gguf .* \| tg8 \| [0-9.]+ ± [0-9.]+ \|$' "$tmp/pt.md" &&
    ! grep -q concurrency "$tmp/pt.md" && ok "pp/tg: llama-bench's table, no batched test" ||
    { bad "pp/tg: llama-bench's table, no batched test"; cat "$tmp/pt.md"; }
# the smallest tests: a 1-token prompt, one generated token (a context of two)
"$BIN" bench -m "$M" --pp 1 --tg 1 -r 1 -t 1 >"$tmp/one.md" 2>&1 &&
    grep -Eq '^\| stories260K.gguf .* \| pp1 \| [0-9.]+ ± [0-9.]+ \|$' "$tmp/one.md" &&
    grep -Eq '^\| stories260K.gguf .* \| tg1 \| [0-9.]+ ± [0-9.]+ \|$' "$tmp/one.md" &&
    ok "pp1 / tg1 run" || { bad "pp1 / tg1 run"; cat "$tmp/one.md"; }
# --depth: both tests behind one context, which every timed run must find
# in the prefix cache (the bench fails otherwise)
"$BIN" bench -m "$M" --pp 8 --tg 4 --depth 40 -r 2 -t 1 --json >"$tmp/d.json" 2>"$tmp/d.err"
[ $? -eq 0 ] && grep -q '"test":"pp8","n_prompt":8,"n_gen":0,"n_depth":40,' "$tmp/d.json" &&
    grep -q '"test":"tg4","n_prompt":0,"n_gen":4,"n_depth":40,' "$tmp/d.json" &&
    ok "--depth: pp and tg behind a context, reused" || { bad "--depth: pp and tg behind a context, reused"; cat "$tmp/d.json" "$tmp/d.err"; }
"$BIN" bench -m "$M" --tg 4 --depth 40 -r 1 -t 1 2>&1 | grep -Eq '^\| stories260K.gguf .* \| tg4 @ d40 \| [0-9.]+ ± [0-9.]+ \|$' &&
    ok "--depth: the table names it" || bad "--depth: the table names it"
# --batched (or -c) adds the batched test to pp/tg in the same run
"$BIN" bench -m "$M" --tg 8 --batched -c 2 -p 16 -n 8 -r 1 -t 1 --json >"$tmp/both.json" 2>&1
grep -q '"test":"tg8"' "$tmp/both.json" && grep -q '"test":"batched","n_threads":1,"concurrency":2' "$tmp/both.json" &&
    ok "--batched with --tg: both tests" || { bad "--batched with --tg: both tests"; cat "$tmp/both.json"; }
# an expert model: a token reads expert_used_count of expert_count experts,
# so bytes_per_token counts that share of each *_exps tensor; the figure is
# recomputed here from the file's tensor table by a reader of its own
MOE=tests/data/moe/qwen3moe-q8_0.gguf
want=$(/usr/bin/python3 - "$MOE" <<'PY'
import struct, sys
f = open(sys.argv[1], "rb")
def rd(fmt): return struct.unpack("<" + fmt, f.read(struct.calcsize("<" + fmt)))[0]
def rstr(): return f.read(rd("Q")).decode()
size = {0: 1, 1: 1, 2: 1, 3: 1, 4: 2, 5: 2, 6: 4, 7: 4, 8: 1, 10: 8, 11: 8, 12: 8}
def val(t):
    if t == 8: return rstr()
    if t == 9:
        et, n = rd("I"), rd("Q")
        return [val(et) for _ in range(n)]
    fmt = {0: "B", 1: "b", 2: "H", 3: "h", 4: "I", 5: "i", 6: "f", 7: "?", 10: "Q", 11: "q", 12: "d"}[t]
    return rd(fmt)
assert f.read(4) == b"GGUF" and rd("I") == 3
nt, nkv = rd("Q"), rd("Q")
kv = {}
for _ in range(nkv):
    k = rstr(); kv[k] = val(rd("I"))
arch = kv["general.architecture"]
n, k = kv[arch + ".expert_count"], kv[arch + ".expert_used_count"]
block = {0: (1, 4), 1: (1, 2), 8: (32, 34)}   # f32, f16, q8_0: (values, bytes)
total, emb, emb_rows = 0, 0, 1
for _ in range(nt):
    name = rstr(); dims = [rd("Q") for _ in range(rd("I"))]; typ = rd("I"); rd("Q")
    vals = 1
    for d in dims: vals *= d
    nb = vals // block[typ][0] * block[typ][1]
    total += nb // n * k if "_exps" in name else nb
    if name == "token_embd.weight": emb, emb_rows = nb, dims[1]
print(total - emb + emb // emb_rows)
PY
)
got=$("$BIN" bench -m "$MOE" --tg 2 -r 1 -t 1 --json 2>&1 | grep -o '"bytes_per_token":[0-9]*' | cut -d: -f2)
[ -n "$want" ] && [ "$got" = "$want" ] && ok "experts: bytes_per_token counts the used experts ($got)" ||
    bad "experts: bytes_per_token counts the used experts (got '$got', want '$want')"
"$BIN" bench --bandwidth --bw-mib 8 -t 2 -r 2 --json >"$tmp/bw.json" 2>&1
grep -Eq '^\{"test":"bandwidth","n_threads":2,"buffer_bytes":8388608,"reps":2,"gbps":[0-9.]+' "$tmp/bw.json" &&
    awk -F'"gbps":' '{ split($2, a, ","); exit !(a[1] + 0 > 0) }' "$tmp/bw.json" &&
    ok "--bandwidth: positive GB/s" || { bad "--bandwidth: positive GB/s"; cat "$tmp/bw.json"; }
"$BIN" bench --bandwidth --bw-mib 8 -t 1 -r 1 | grep -q '^memory read bandwidth: [0-9.]* GB/s (1 threads, 8 MiB buffer' &&
    ok "--bandwidth: text" || bad "--bandwidth: text"

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
for args in "-m $M -c 0" "-m $M -p x" "--url ftp://x" "-c 1,2" "-m $M --pp 0" "-m $M --tg x" \
    "-m $M --pp" "--tg 8" "--bandwidth -m $M" "-m $M --depth 40" "-m $M --tg 8 --depth -1" "--bandwidth --bw-mib 0" "-m $M --frobnicate 1"; do
    # shellcheck disable=SC2086
    "$BIN" bench $args >"$tmp/o" 2>"$tmp/e"
    [ $? -eq 2 ] && grep -q '^inflight bench: ' "$tmp/e" && [ ! -s "$tmp/o" ] && ok "bad arguments: $args" ||
        { bad "bad arguments: $args"; cat "$tmp/e"; }
done
grep -q "a model is required" <("$BIN" bench --tg 8 2>&1) && ok "bad arguments: the message names the problem" ||
    bad "bad arguments: the message names the problem"

# bench/compare without llama.cpp: a stand-in llama.cpp directory whose tools
# print fixed figures; inflight runs for real on stories260K.
C=bench/compare
fake=$tmp/fakellama
mkdir -p "$fake"
printf '#!/bin/sh\necho "{\\"n_prompt\\": 1, \\"avg_ts\\": 100.000000, \\"stddev_ts\\": 1.0}"\n' >"$fake/llama-bench"
printf '#!/bin/sh\necho "{\\"pl\\": 2, \\"speed_pp\\": 50.000000, \\"speed_tg\\": 25.000000}"\n' >"$fake/llama-batched-bench"
chmod +x "$fake/llama-bench" "$fake/llama-batched-bench"
"$C" --llama "$fake" --inflight "$BIN" -t 1 --rounds 2 -r 1 --pp 16 --tg 8 -B 2 --bandwidth --bw-mib 8 \
    --log "$tmp/cmplog" "$M" >"$tmp/cmp.md" 2>"$tmp/cmp.err"
rc=$?
[ $rc -eq 0 ] && ok "compare: runs with a stand-in llama.cpp" || { bad "compare: runs with a stand-in llama.cpp (exit $rc)"; cat "$tmp/cmp.err"; }
grep -Eq '^CPU idle before each run: median [0-9]+ %, lowest [0-9]+ %' "$tmp/cmp.md" && ok "compare: reports how idle the machine was" ||
    { bad "compare: reports how idle the machine was"; cat "$tmp/cmp.md"; }
grep -q '^| model | test | inflight tok/s | llama.cpp tok/s | ratio | tg limit tok/s | tg / limit read around it |' "$tmp/cmp.md" &&
    ok "compare: table header" || { bad "compare: table header"; cat "$tmp/cmp.md"; }
# each row: inflight figure positive, llama.cpp's the stand-in's, ratio their quotient
awk -F' *\\| *' '/^\| stories260K \|/ {
    rows++; want = ($3 ~ /^pp|^tg/) ? 100 : ($3 ~ /decode/) ? 25 : 50
    if (!($4 > 0) || $5 != sprintf("%.1f", want) || ($6 - $4 / want) ^ 2 > 0.01 ^ 2 * 4 + 0.0001) { print "bad row: " $0; bad = 1 }
    if ($3 ~ /^tg/ && !($7 > 0)) { print "no tg limit: " $0; bad = 1 }
    if ($3 ~ /^tg/ && !($8 > 0)) { print "no tg over the limit read around it: " $0; bad = 1 }
    if ($3 !~ /^tg/ && $8 != "-") { print "a limit on a row that is not tg: " $0; bad = 1 }
} END { if (rows != 4) { print rows " rows"; bad = 1 } exit bad }' "$tmp/cmp.md" &&
    ok "compare: rows pp, tg, B=2 decode and prompt with ratios" || { bad "compare: rows"; cat "$tmp/cmp.md"; }
[ "$(ls "$tmp/cmplog"/*.cmd | wc -l)" -eq 12 ] && ok "compare: 2 rounds x 3 tests x 2 engines" || bad "compare: 2 rounds x 3 tests x 2 engines"
# bandwidth: once a round, and before and after each of the two inflight tg runs
[ "$(grep -c '^round [12]: [0-9.]* GB/s' "$tmp/cmplog/bandwidth.log")" -eq 2 ] &&
    [ "$(grep -Ec '^(before|after) [0-9]+-ifl-tg8-stories260K: [0-9.]+ GB/s' "$tmp/cmplog/bandwidth.log")" -eq 4 ] &&
    ok "compare: bandwidth read each round and around each inflight tg run" ||
    { bad "compare: bandwidth read each round and around each inflight tg run"; cat "$tmp/cmplog/bandwidth.log"; }
# odd rounds start with inflight, even rounds with llama.cpp
ls "$tmp/cmplog"/*.cmd | sed -n '1p;7p' | tr '\n' ' ' | grep -q '/001-ifl-pp16-[^ ]* [^ ]*/007-llama-pp16-' &&
    ok "compare: rounds alternate the first engine" || bad "compare: rounds alternate the first engine"
"$C" --llama "$fake" --inflight "$BIN" --dry-run -B 1,16 "$M" >"$tmp/dry" 2>&1
[ $? -eq 0 ] && [ "$(grep -c 'llama-batched-bench .* -npl 16 ' "$tmp/dry")" -eq 2 ] &&
    [ "$(grep -c 'inflight bench .* --pp 128 ' "$tmp/dry")" -eq 2 ] && ok "compare: --dry-run lists the commands" ||
    { bad "compare: --dry-run lists the commands"; cat "$tmp/dry"; }
for args in "$M" "--llama $tmp/nowhere $M" "--llama $tmp $M" "--llama $fake" "--llama $fake -B 1,,2 $M" \
    "--llama $fake --inflight $tmp/none $M" "--llama $fake --bogus $M" "--llama $fake --wait-idle 101 $M" \
    "--llama $fake --ik $tmp/nowhere $M" "--llama $fake --ik $fake/llama-bench $M" "--llama $fake --long --tg 0 $M" \
    "--llama $fake --depths 1,,2 $M" "--llama $fake --long-pp x $M" "--llama $fake --bw-mib 0 $M"; do
    # shellcheck disable=SC2086
    "$C" $args >"$tmp/o" 2>"$tmp/e"
    [ $? -eq 2 ] && grep -q '^bench/compare: ' "$tmp/e" && ok "compare: bad arguments: ${args//$tmp/TMP}" ||
        { bad "compare: bad arguments: $args"; cat "$tmp/e"; }
done
grep -q "no executable llama-bench" <("$C" --llama "$tmp" "$M" 2>&1) && ok "compare: names the missing tool" ||
    bad "compare: names the missing tool"
# bench/proof: the commands of issue 42's proof for this CPU's class, and
# its bad arguments (a full run: bench/README.md)
P=bench/proof
mkdir -p "$tmp/pm"
"$P" --llama "$fake" --inflight "$BIN" --models "$tmp/pm" --dry-run >"$tmp/pdry" 2>&1
[ $? -eq 0 ] && [ "$(grep -c '^bench/proof: .*bench/compare --llama ' "$tmp/pdry")" -ge 3 ] &&
    grep -q 'tinyllama-1.1b-q8_0-ctx8192.gguf' "$tmp/pdry" && grep -q 'kbench peak$' "$tmp/pdry" &&
    grep -q 'stepbench .*tinyllama-1.1b-q8_0.gguf 16 24 2$' "$tmp/pdry" && ok "proof: --dry-run lists the runs" ||
    { bad "proof: --dry-run lists the runs"; cat "$tmp/pdry"; }
for args in "--llama $fake" "--models $tmp/pm" "--llama $fake --models $tmp/pm --rounds 0" \
    "--llama $fake --models $tmp/pm --inflight $tmp/none" "--llama $fake --models $tmp/pm"; do
    # shellcheck disable=SC2086
    "$P" $args >"$tmp/o" 2>"$tmp/e"
    [ $? -eq 2 ] && [ -s "$tmp/e" ] && ok "proof: bad arguments: ${args//$tmp/TMP}" ||
        { bad "proof: bad arguments: $args"; cat "$tmp/e"; }
done
grep -q "missing (pass --make-models)" <("$P" --llama "$fake" --inflight "$BIN" --models "$tmp/pm" 2>&1) &&
    ok "proof: names the missing model" || bad "proof: names the missing model"
# --ik (a stand-in ik_llama.cpp: pretty JSON from llama-bench, 80 tok/s, or
# 120 with -rtr 1; only a table from llama-batched-bench) and --long
ik=$tmp/fakeik
mkdir -p "$ik"
cat >"$ik/llama-bench" <<'SH'
#!/bin/sh
case " $* " in *" -rtr 1 "*) v=120 ;; *) v=80 ;; esac
printf '[\n  {\n    "n_prompt": 1,\n    "avg_ts": %s.000000,\n    "stddev_ts": 1.0\n  }\n]\n' $v
SH
cat >"$ik/llama-batched-bench" <<'SH'
#!/bin/sh
case " $* " in *" -rtr "*) s=30 ;; *) s=20 ;; esac
echo "|    PP |     TG |    B |   N_KV |   T_PP s | S_PP t/s |   T_TG s | S_TG t/s |      T s |    S t/s |"
echo "|-------|--------|------|--------|----------|----------|----------|----------|----------|----------|"
echo "|    16 |      8 |    2 |     48 |    0.100 |    40.00 |    0.500 |    $s.00 |    0.600 |    80.00 |"
SH
chmod +x "$ik/llama-bench" "$ik/llama-batched-bench"
"$C" --llama "$fake" --ik "$ik" --long --long-pp 32 --depths 16,40 --inflight "$BIN" -t 1 --rounds 1 -r 1 \
    --pp 16 --tg 8 -B 2 --bandwidth --bw-mib 8 --log "$tmp/iklog" "$M" >"$tmp/ik.md" 2>"$tmp/ik.err"
rc=$?
[ $rc -eq 0 ] && grep -q '^| model | test | inflight tok/s | llama.cpp tok/s | ratio | ik tok/s (-rtr 0) | ik tok/s (-rtr 1) | ratio to ik.s better |' "$tmp/ik.md" &&
    grep -Eq '^CPU flags: .*; inflight.s (scalar|avx2|avx512|avx512bf16) \(chosen by cpuid|IFL_KERNELS\)' "$tmp/ik.md" &&
    ok "compare --ik: header, CPU flags and inflight's kernels" || { bad "compare --ik: header, CPU flags and inflight's kernels"; cat "$tmp/ik.md" "$tmp/ik.err"; }
# rows: pp16, tg8, the long pp32 and tg8 at depths 16 and 40, B=2 decode and prompt;
# ik's columns the stand-in's, the last ratio inflight's over the better
awk -F' *\\| *' '/^\| stories260K \|/ {
    rows++; lbl = lbl $3 ";"
    i0 = ($3 ~ /decode/) ? 20 : ($3 ~ /prompt/) ? 40 : 80
    i1 = ($3 ~ /decode/) ? 30 : ($3 ~ /prompt/) ? 40 : 120
    if ($7 != sprintf("%.1f", i0) || $8 != sprintf("%.1f", i1)) { print "ik columns: " $0; bad = 1 }
    if (($9 - $4 / i1) ^ 2 > 0.01 ^ 2 * 4 + 0.0001) { print "ratio to ik: " $0; bad = 1 }
    if ($3 ~ /^tg/) lim[$3] = $10
} END {
    if (lbl != "pp16;tg8;pp32 (peers -fa 1);tg8 @ d16 (peers -fa 1);tg8 @ d40 (peers -fa 1);B=2 decode (S_TG);B=2 prompt (S_PP);") { print "rows: " lbl; bad = 1 }
    # the depth rows count the KV cache: a lower limit the deeper
    if (!(lim["tg8"] > lim["tg8 @ d16 (peers -fa 1)"] && lim["tg8 @ d16 (peers -fa 1)"] > lim["tg8 @ d40 (peers -fa 1)"])) { print "limits"; bad = 1 }
    exit bad }' "$tmp/ik.md" && ok "compare --ik --long: rows, ik's figures, ratios, KV in the depth limits" ||
    { bad "compare --ik --long: rows, ik's figures, ratios, KV in the depth limits"; cat "$tmp/ik.md"; }
# the depth rows: inflight --depth, llama.cpp -d with -fa 1, ik -gp D,N; 4 engines x 6 tests
grep -q -- '--tg 8 --depth 40 ' "$tmp"/iklog/*-ifl-Ltg8@40-*.cmd && grep -q -- '-n 8 -d 40 -fa 1 ' "$tmp"/iklog/*-llama-Ltg8@40-*.cmd &&
    grep -q -- '-gp 40,8 -fa 1 -r 1 -rtr 1 ' "$tmp"/iklog/*-ik1-Ltg8@40-*.cmd && grep -q -- '-npl 2 -rtr$' "$tmp"/iklog/*-ik1-B2-*.cmd &&
    [ "$(ls "$tmp/iklog"/*.cmd | wc -l)" -eq 24 ] && ok "compare --ik --long: the commands of each engine" ||
    { bad "compare --ik --long: the commands of each engine"; ls "$tmp/iklog"; }
"$C" --make-models "$tmp/models" --dry-run --only "small-110m:q8_0 tinyllama-1.1b:q4_k_m" \
    --vocab "$M" --mkmodel "$BUILD/tools/mkmodel" >"$tmp/mk" 2>&1
[ $? -eq 0 ] && grep -q -- "-o $tmp/models/small-110m-q8_0.gguf .* --preset small-110m --type q8_0" "$tmp/mk" &&
    grep -q -- "--preset tinyllama-1.1b --type q4_k_m" "$tmp/mk" && ok "compare: --make-models commands" ||
    { bad "compare: --make-models commands"; cat "$tmp/mk"; }
"$C" --make-models "$tmp/models" --dry-run --only "qwen3moe-2b-a0.4b:q4_k_m gemma3-1.1b:q8_0" \
    --vocab "$M" --mkmodel "$BUILD/tools/mkmodel" >"$tmp/mk2" 2>&1
[ $? -eq 0 ] && grep -q -- "qwen3moe-2b-a0.4b-q4_k_m.gguf .* --arch qwen3moe .* --n-expert 32 --n-expert-used 4 .* --type q4_k_m" "$tmp/mk2" &&
    grep -q -- "gemma3-1.1b-q8_0.gguf .* --preset tinyllama-1.1b --arch gemma3 .* --type q8_0" "$tmp/mk2" &&
    ok "compare: --make-models MoE and gemma3 commands" || { bad "compare: --make-models MoE and gemma3 commands"; cat "$tmp/mk2"; }
"$C" --make-models "$tmp/models" --only "huge-70b:q8_0" --vocab "$M" --mkmodel "$BUILD/tools/mkmodel" >/dev/null 2>&1
[ $? -eq 2 ] && ok "compare: --make-models rejects an unknown preset" || bad "compare: --make-models rejects an unknown preset"
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
