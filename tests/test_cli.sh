#!/usr/bin/env bash
# The command line end to end on the real stories260K model: greedy ids
# equal llama.cpp's, tokenize/info/eval work, and bad arguments or files
# give exit status 2 with one message, never a crash.
set -u
BUILD=${BUILD:-build}
BIN=$BUILD/inflight
SHARED=${IFL_SHARED:-../shared}
M=$SHARED/models/stories260K.gguf
pass=0
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

. "$(dirname "$0")/lib.sh"
# expects exit status 2, a message on stderr, nothing that looks like a crash
check_usage() {
    local name=$1; shift
    "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
    local rc=$?
    if [ $rc -eq 2 ] && [ -s "$tmp/err" ] && [ "$(wc -l <"$tmp/err")" -le 3 ]; then
        ok "$name"
    else
        bad "$name (exit $rc)"; head -5 "$tmp/err"
    fi
}

# the greedy ids llama.cpp recorded for this model and prompt
json_ids() { tr -d '\n' <"$1" | sed -e "s/.*\"$2\": *\[\([^]]*\)\].*/\1/" | tr -d ' ' | tr ',' ' '; }

ref=$SHARED/models/ref/stories260K.json
want=$(json_ids "$ref" greedy_ids)
got=$("$BIN" run -m "$M" -p "Once upon a time" -n 64 --temp 0 --ids --ignore-eos 2>"$tmp/err")
check "run greedy ids equal llama.cpp (Once upon a time)" "$want" "$got"
grep -q "decode:" "$tmp/err" && ok "run reports speed on stderr" || bad "run reports speed on stderr"

ref=$SHARED/models/ref/stories260K-robot.json
want=$(json_ids "$ref" greedy_ids)
got=$("$BIN" run -m "$M" -p "Once upon a time, there was a little robot" -n 64 --temp 0 --ids --ignore-eos -t 1 --kv-type f32 2>/dev/null)
check "run greedy ids equal llama.cpp (robot, 1 thread, f32 cache)" "$want" "$got"

ref=$SHARED/models/ref/stories260K.json
want=$(json_ids "$ref" greedy_ids | cut -d' ' -f1-32)
got=$("$BIN" run -m "$M" -p "Once upon a time" -n 32 --temp 0 --ids --ignore-eos --kv-type q8_0 2>/dev/null)
check "run with a q8_0 KV cache keeps the greedy ids (32 steps)" "$want" "$got"
check_usage "bad kv type names the choices" "$BIN" run -m "$M" -p hi --kv-type q4
grep -q "f16, f32 or q8_0" "$tmp/err" && ok "kv type message lists q8_0" || bad "kv type message lists q8_0"

text=$("$BIN" run -m "$M" -p "Once upon a time" -n 40 --temp 0 2>/dev/null)
case "$text" in *Lily*) ok "run streams text" ;; *) bad "run streams text: $text" ;; esac
a=$("$BIN" run -m "$M" -p "Once upon a time" -n 30 --temp 1 --seed 7 --ids 2>/dev/null)
b=$("$BIN" run -m "$M" -p "Once upon a time" -n 30 --temp 1 --seed 7 --ids 2>/dev/null)
c=$("$BIN" run -m "$M" -p "Once upon a time" -n 30 --temp 1 --seed 8 --ids 2>/dev/null)
check "seeded sampling repeats" "$a" "$b"
[ "$a" != "$c" ] && ok "other seed, other tokens" || bad "other seed, other tokens"
n=$("$BIN" run -m "$M" -p "Once" -n 17 --temp 0.9 --top-k 5 --top-p 0.9 --min-p 0.1 --seed 1 --ids --ignore-eos 2>/dev/null | wc -w)
check "run -n counts generated tokens" 17 "$n"

check "tokenize" "403 407 261 378" "$(printf 'Once upon a time' | "$BIN" tokenize -m "$M")"
check "tokenize --add-special" "1 403 407 261 378" "$(printf 'Once upon a time' | "$BIN" tokenize -m "$M" --add-special)"
check "tokenize empty stdin" "" "$("$BIN" tokenize -m "$M" </dev/null)"
# byte fallback can give more ids than the text has bytes: "\xc3 " is 2
# bytes and 4 ids ("\xc3" alone, then the space's bytes)
n=$(printf '\xc3 %.0s' $(seq 1 10) | "$BIN" tokenize -m "$M" | wc -w)
check "tokenize: more ids than bytes" 41 "$n"
"$BIN" run -m "$M" -p "$(printf '\xc3 %.0s' $(seq 1 10))" -n 2 --seed 1 >/dev/null 2>&1
check "run: a prompt of more ids than bytes" 0 "$?"
# output that cannot be written is a failure (exit 1), not a success
if [ -w /dev/full ]; then
    "$BIN" run -m "$M" -p "Once" -n 4 --seed 1 >/dev/full 2>"$tmp/err"
    check "run > /dev/full exits 1" 1 "$?"
    "$BIN" info -m "$M" >/dev/full 2>/dev/null
    check "info > /dev/full exits 1" 1 "$?"
fi

"$BIN" info -m "$M" >"$tmp/info" 2>&1
grep -q "architecture:  llama" "$tmp/info" && grep -q "n_layer:       5" "$tmp/info" &&
    ok "info" || { bad "info"; cat "$tmp/info"; }
# a mixture of experts says how many experts and how many a token uses
"$BIN" info -m tests/data/moe/qwen3moe-q8_0.gguf >"$tmp/info" 2>&1
grep -q "architecture:  qwen3moe" "$tmp/info" && grep -q "experts:       8, 2 used a token" "$tmp/info" &&
    ok "info of a mixture of experts" || { bad "info of a mixture of experts"; cat "$tmp/info"; }

"$BIN" eval -m "$M" --ids "1 403 407 261 378" --logits "$tmp/l.f32" 2>/dev/null
check "eval writes [5][512] float32" $((5 * 512 * 4)) "$(stat -c %s "$tmp/l.f32" 2>/dev/null)"
"$BIN" eval -m "$M" -p "Once upon a time" --logits "$tmp/p.f32" 2>/dev/null
cmp -s "$tmp/l.f32" "$tmp/p.f32" && ok "eval -p equals eval --ids" || bad "eval -p equals eval --ids"

# run goes through the executor: constraints hold, defaults are the server's
cat >"$tmp/s.json" <<'JSON'
{"type":"object","properties":{"age":{"type":"integer","minimum":0,"maximum":120},"pet":{"enum":["cat","dog","fish"]},"tags":{"type":"array","items":{"type":"string","maxLength":6},"maxItems":2}},"required":["age","pet"],"additionalProperties":false}
JSON
for seed in 1 2 3; do
    "$BIN" run -m "$M" -p "Once upon a time" --json-schema "$tmp/s.json" -n 60 --seed $seed >"$tmp/j.out" 2>"$tmp/j.err"
    rc=$?
    if [ $rc -eq 0 ] && /usr/bin/python3 -c '
import json, sys, jsonschema
jsonschema.validate(json.loads(open(sys.argv[1]).read()), json.load(open(sys.argv[2])))' "$tmp/j.out" "$tmp/s.json" 2>"$tmp/v.err"; then
        ok "run --json-schema: valid JSON (seed $seed)"
    else
        bad "run --json-schema (seed $seed, exit $rc)"; cat "$tmp/j.out" "$tmp/j.err" "$tmp/v.err" | head -8
    fi
done
got=$("$BIN" run -m "$M" -p "Once upon a time" --regex '[0-9]{3}-[a-z]{2,4}' -n 20 --seed 5 2>/dev/null)
[[ "$got" =~ ^[0-9]{3}-[a-z]{2,4}$ ]] && ok "run --regex: the text matches" || bad "run --regex: '$got'"
printf 'root ::= "yes" | "no" | "maybe " [a-z]+\n' >"$tmp/g.gbnf"
got=$("$BIN" run -m "$M" -p "Once upon a time" --grammar "$tmp/g.gbnf" -n 12 --seed 9 2>/dev/null)
[[ "$got" =~ ^(yes|no|maybe\ [a-z]+)$ ]] && ok "run --grammar: the text is in the language" || bad "run --grammar: '$got'"
"$BIN" run -m "$M" -p "Once upon a time" --json-schema "$tmp/s.json" -n 3 --seed 1 >/dev/null 2>"$tmp/err"
has "run: a constrained output cut by -n says so" "the output is cut" "$(cat "$tmp/err")"
check_usage "run --regex that does not compile" "$BIN" run -m "$M" -p hi --regex 'a{100000}'
has "run --regex error names the count" "100000" "$(cat "$tmp/err")"
check_usage "run --grammar unreadable file" "$BIN" run -m "$M" -p hi --grammar "$tmp/none.gbnf"
check_usage "run two constraints" "$BIN" run -m "$M" -p hi --regex a --grammar "$tmp/g.gbnf"
printf 'root ::= "a" missing\n' >"$tmp/bad.gbnf"
check_usage "run --grammar naming an undefined rule" "$BIN" run -m "$M" -p hi --grammar "$tmp/bad.gbnf"
# the server's defaults: temperature 1 with no top-k/top-p/min-p cut, the
# same ids as those values given
a=$("$BIN" run -m "$M" -p "Once" -n 24 --seed 11 --ids 2>/dev/null)
b=$("$BIN" run -m "$M" -p "Once" -n 24 --seed 11 --ids --temp 1 --top-k 0 --top-p 1 --min-p 0 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && ok "run defaults are the server's sampling" || bad "run defaults: '$a' vs '$b'"
# an output an end token ends: --ids prints that token last, as it always did
got=$("$BIN" run -m "$SHARED/models/ref/llama-q4_0.gguf" -p "Once upon a time" -n 100 --temp 0 --ids 2>/dev/null)
check "run --ids ends with the end token" "238 239 239 289 379 238 0 102 0 40 415 194 52 363 363 2" "$got"
got=$("$BIN" run -m "$SHARED/models/ref/llama-q4_0.gguf" -p "Once upon a time" -n 100 --temp 0 2>/dev/null)
[ -n "$got" ] && ok "run text leaves the end token out" || bad "run text: '$got'"
got=$("$BIN" run -m "$M" -p "Once upon a time" -n 0 --ids 2>"$tmp/err")
[ -z "$got" ] && grep -q "^prompt: " "$tmp/err" && ok "run -n 0: the prompt only" || bad "run -n 0: '$got'"

# bad arguments and files
check_usage "no command" "$BIN"
check_usage "unknown command" "$BIN" frobnicate
check_usage "run without -m" "$BIN" run -p hi
check_usage "run without -p" "$BIN" run -m "$M"
check_usage "missing model file" "$BIN" run -m "$tmp/nope.gguf" -p hi
check_usage "bad -n" "$BIN" run -m "$M" -p hi -n lots
check_usage "negative temp" "$BIN" run -m "$M" -p hi --temp -1
check_usage "top-p 0" "$BIN" run -m "$M" -p hi --top-p 0
check_usage "bad threads" "$BIN" run -m "$M" -p hi -t 0
check_usage "bad kv type" "$BIN" run -m "$M" -p hi --kv-type q9
check_usage "unknown option" "$BIN" run -m "$M" -p hi --frob
check_usage "option missing value" "$BIN" run -m "$M" -p
check_usage "eval bad ids" "$BIN" eval -m "$M" --ids "1 x 3" --logits "$tmp/x.f32"
check_usage "eval id out of vocab" "$BIN" eval -m "$M" --ids "1 99999" --logits "$tmp/x.f32"
check_usage "eval unwritable output" "$BIN" eval -m "$M" --ids "1 2" --logits "$tmp/no/dir/x.f32"
check_usage "prompt longer than context" "$BIN" run -m "$M" -p "Once upon a time there was" -c 3
check_usage "tokenize without -m" "$BIN" tokenize
check_usage "info on a text file" "$BIN" info -m "$0"
head -c 100000 "$M" >"$tmp/trunc.gguf"
check_usage "truncated model" "$BIN" run -m "$tmp/trunc.gguf" -p hi
check_usage "vocab-only file as a model" "$BIN" run -m "$SHARED/models/vocab/ggml-vocab-gpt-2.gguf" -p hi

# the default thread count is the CPUs this process may use: one under
# speculative decoding: outputs unchanged, acceptance reported, bad flags refused
want=$("$BIN" run -m "$M" -p "Once upon a time" -n 120 --temp 0 --ids 2>/dev/null)
got=$("$BIN" run -m "$M" -p "Once upon a time" -n 120 --temp 0 --ids --spec-type ngram --draft-max 8 2>"$tmp/err")
check "run --spec-type ngram: the same greedy ids" "$want" "$got"
has "run --spec-type ngram reports the drafts kept" "speculation: " "$(cat "$tmp/err")"
want=$("$BIN" run -m "$M" -p "Once upon a time" -n 80 --temp 0.8 --top-p 0.9 --seed 3 --ids 2>/dev/null)
got=$("$BIN" run -m "$M" -p "Once upon a time" -n 80 --temp 0.8 --top-p 0.9 --seed 3 --ids --spec-type ngram --spec-ngram 2 2>/dev/null)
check "run --spec-type ngram: the same seeded ids" "$want" "$got"
"$BIN" run -m "$M" -p "Once upon a time" -n 100 --temp 0 >"$tmp/pred.txt" 2>/dev/null
want=$("$BIN" run -m "$M" -p "Once upon a time" -n 100 --temp 0 --ids 2>/dev/null)
got=$("$BIN" run -m "$M" -p "Once upon a time" -n 100 --temp 0 --ids --prediction "$tmp/pred.txt" 2>"$tmp/err")
check "run --prediction: the same ids" "$want" "$got"
has "run --prediction: every draft kept" "(100 %)" "$(cat "$tmp/err")"
"$BIN" run -m "$M" -p x --spec-type bogus 2>"$tmp/err"
check "run --spec-type bogus: exit 2" 2 "$?"
has "it names the types" "none, draft, ngram or eagle3" "$(cat "$tmp/err")"
"$BIN" run -m "$M" -p x --spec-type draft 2>"$tmp/err"
check "run --spec-type draft without a model: exit 2" 2 "$?"
has "it asks for --draft-model" "needs --draft-model" "$(cat "$tmp/err")"
"$BIN" serve -m "$M" --draft-max 40 2>"$tmp/err"
check "serve --draft-max 40: exit 2" 2 "$?"
has "it gives the range" "--draft-max wants 1 to 32" "$(cat "$tmp/err")"
"$BIN" bench -m "$M" --draft-min 9 --draft-max 4 2>"$tmp/err"
check "bench --draft-min above --draft-max: exit 2" 2 "$?"
"$BIN" run -m "$M" -p x --prediction "$tmp/missing" 2>"$tmp/err"
check "run --prediction of a missing file: exit 2" 2 "$?"

# the kernel table: cpuid's choice, or IFL_KERNELS's when it names one
check "version names IFL_KERNELS's table" "scalar (IFL_KERNELS)" \
    "$(IFL_KERNELS=scalar "$BIN" version | sed -n 's/^kernels: //p')"
"$BIN" version | grep -Eq '^kernels: (scalar|avx2|avx512|avx512bf16) \(chosen by cpuid\)$' &&
    ok "version names cpuid's table" || bad "version names cpuid's table"

# taskset -c 0, whatever the machine has (taskset is util-linux, in Debian's
# base system; the test says so when it is missing rather than passing)
if command -v taskset >/dev/null; then
    got=$(taskset -c 0 "$BIN" version | sed -n 's/^cpus: \([0-9]*\) usable.*/\1/p')
    check "version under taskset -c 0 counts 1 usable CPU" "1" "$got"
    taskset -c 0 "$BIN" run -m "$M" -p "Once upon a time" -n 4 --temp 0 --ids >/dev/null 2>"$tmp/err"
    grep -q ", 1 threads," "$tmp/err" && ok "run under taskset -c 0 uses 1 thread" ||
        { bad "run under taskset -c 0 uses 1 thread"; cat "$tmp/err"; }
    if [ "$(nproc --all)" -ge 2 ]; then
        got=$(taskset -c 0,1 "$BIN" version | sed -n 's/.*online, \([0-9]*\) in the affinity mask.*/\1/p')
        check "version under taskset -c 0,1 counts 2 CPUs in the mask" "2" "$got"
    fi
else
    bad "taskset is missing (util-linux)"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
