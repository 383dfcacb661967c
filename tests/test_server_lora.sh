#!/usr/bin/env bash
# LoRA adapters through `inflight serve`: --lora, --lora-scaled and
# --lora-modules at start (a bad one: one line, exit 2); GET and POST
# /lora-adapters as llama-server has them; per-request llama.cpp `lora`,
# TGI's adapter_id and OpenAI's model naming an adapter, each giving what
# the same adapters by id give; the global scales apply to requests that
# name none and a POST changes them; the prefix cache never shares KV
# across adapter sets; adapters in /v1/models and /metrics; bad ids, names
# and scales are 400 (TGI 422) naming the field, and the server keeps
# serving. Adapters come from tools/mkmodel --lora-of.
set -u
BUILD=${BUILD:-build}
BIN=$BUILD/inflight
MK=${MKMODEL:-$BUILD/tools/mkmodel}
SHARED=${IFL_SHARED:-../shared}
M=$SHARED/models/ref/llama-q8_0.gguf
pass=0
fail=0
START_ARGS=(--quiet --parallel 8)
. "$(dirname "$0")/lib.sh"

for i in 1 2 3; do
    "$MK" -o "$tmp/ad$i.gguf" --lora-of "$M" --rank 8 --alpha 16 --seed "$i" >/dev/null 2>&1 ||
        { bad "mkmodel --lora-of (adapter $i)"; echo "$pass passed, $fail failed"; exit 1; }
done
# an adapter of another model: a wrong shape
"$MK" -o "$tmp/other.gguf" --vocab "$SHARED/models/stories260K.gguf" --n-embd 64 --n-layer 4 \
    --n-head 8 --n-head-kv 2 --n-ff 128 --type f32 >/dev/null 2>&1 &&
    "$MK" -o "$tmp/wrong.gguf" --lora-of "$tmp/other.gguf" --rank 4 >/dev/null 2>&1 ||
    bad "mkmodel: the other model's adapter"

# ---- bad adapters at start: exit 2; a bad flag is one line, a bad file
# the last line, naming the file and what is wrong ----
serve_fails() { # ARGS...: runs serve, leaves stderr in $tmp/err, returns its status
    "$BIN" serve -m "$M" --port 0 "$@" >/dev/null 2>"$tmp/err" </dev/null &
    local p=$!
    for _ in $(seq 300); do kill -0 $p 2>/dev/null || break; sleep 0.1; done
    kill -TERM $p 2>/dev/null
    wait $p
}
for args in "--lora-scaled $tmp/ad1.gguf" "--lora-scaled $tmp/ad1.gguf:x" \
    "--lora-modules =$tmp/ad1.gguf" "--lora-modules a" "--lora-cache-bytes -1"; do
    # shellcheck disable=SC2086
    serve_fails $args
    rc=$?
    if [ $rc -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ]; then ok "serve $args: exit 2, one line"
    else bad "serve $args: exit $rc"; cat "$tmp/err"; fi
done
for c in "missing.gguf|cannot open" "wrong.gguf|blk.0.attn_q.weight" "ad2.gguf|is already adapter 1"; do
    f=${c%%|*}
    why=${c#*|}
    if [ "$f" = ad2.gguf ]; then serve_fails --lora "$tmp/ad1.gguf" --lora-modules "ad1=$tmp/ad2.gguf"
    else serve_fails --lora "$tmp/$f"; fi
    rc=$?
    check "serve with adapter $f: exit 2" 2 "$rc"
    has "serve with adapter $f: says why" "LoRA adapter '$tmp/$f': " "$(tail -1 "$tmp/err")"
    has "serve with adapter $f: $why" "$why" "$(tail -1 "$tmp/err")"
done

start_server lora --lora "$tmp/ad1.gguf" --lora-scaled "$tmp/ad2.gguf:0.5" \
    --lora-modules "third=$tmp/ad3.gguf" || { echo "$pass passed, $((fail + 1)) failed"; exit 1; }
U="http://127.0.0.1:$PORT"
js() { python3 -c "import json,sys; d=json.load(sys.stdin); print($1)"; }
post() { curl -s -m 60 -H 'Content-Type: application/json' -d "$2" "$U$1"; }
code() { curl -s -m 60 -o "$tmp/body" -w '%{http_code}' -H 'Content-Type: application/json' -d "$2" "$U$1"; }

# ---- GET /lora-adapters ----
list=$(curl -s "$U/lora-adapters")
check "three adapters, ids 1 2 3" "[1, 2, 3]" "$(echo "$list" | js '[a["id"] for a in d]')"
check "global scales 1, 0.5, 0" "[1.0, 0.5, 0.0]" "$(echo "$list" | js '[a["scale"] for a in d]')"
check "names" "['ad1', 'ad2', 'third']" "$(echo "$list" | js '[a["name"] for a in d]')"
check "paths" "$tmp/ad3.gguf" "$(echo "$list" | js 'd[2]["path"]')"

# ---- the same adapters by four routes ----
P='"prompt": "Once upon a time", "max_tokens": 12, "temperature": 0, "logprobs": 1'
toks() { js '[round(x, 5) for x in d["choices"][0]["logprobs"]["token_logprobs"]] + [d["choices"][0]["text"]]'; }
globals=$(post /v1/completions "{$P}" | toks)
explicit=$(post /v1/completions "{$P, \"lora\": [{\"id\": 2, \"scale\": 0.5}, {\"id\": 1, \"scale\": 1}]}" | toks)
base=$(post /v1/completions "{$P, \"lora\": []}" | toks)
zero=$(post /v1/completions "{$P, \"lora\": [{\"id\": 1, \"scale\": 0}]}" | toks)
third=$(post /v1/completions "{$P, \"lora\": [{\"id\": 3}]}" | toks)
check "no lora field: the global scales (ad1 at 1, ad2 at 0.5)" "$explicit" "$globals"
check "lora [] is the base, as scale 0 is" "$base" "$zero"
truth() { if (( $2 )); then ok "$1"; else bad "$1"; echo "  $3"; fi; }
truth "the adapters change the output" "$([ "$base" != "$explicit" ] && echo 1 || echo 0)" "$base"
byname=$(post /v1/completions "{$P, \"model\": \"third\"}")
check "model naming an adapter: that adapter at scale 1" "$third" "$(echo "$byname" | toks)"
check "model naming an adapter: echoed" "third" "$(echo "$byname" | js 'd["model"]')"
chat=$(post /v1/chat/completions '{"model": "third", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4, "temperature": 0}')
check "chat with model naming an adapter" "third" "$(echo "$chat" | js 'd["model"]')"
tgi_third=$(post /generate '{"inputs": "Once upon a time", "parameters": {"max_new_tokens": 12, "adapter_id": "third", "decoder_input_details": false}}' | js 'd["generated_text"]')
check "TGI adapter_id: the adapter at scale 1" "$(echo "$third" | python3 -c 'import sys,ast; print(ast.literal_eval(sys.stdin.read())[-1])')" "$tgi_third"
tgi_path=$(post /generate "{\"inputs\": \"Once upon a time\", \"parameters\": {\"max_new_tokens\": 12, \"adapter_id\": \"$tmp/ad3.gguf\"}}" | js 'd["generated_text"]')
check "TGI adapter_id by path" "$tgi_third" "$tgi_path"

# ---- POST /lora-adapters: new global scales; unlisted ones go to 0 ----
check "POST /lora-adapters" '{"success": true}' "$(post /lora-adapters '[{"id": 3, "scale": 1}]' | js 'json.dumps(d)')"
check "scales after the POST" "[0.0, 0.0, 1.0]" "$(curl -s "$U/lora-adapters" | js '[a["scale"] for a in d]')"
check "no lora field now: adapter 3 alone" "$third" "$(post /v1/completions "{$P}" | toks)"

# ---- the prefix cache: same prompt, another adapter set, no reuse ----
LONG=$(python3 -c 'print("the cat sat on the mat and " * 12)')
hits() { curl -s "$U/metrics" | grep '^inflight_prefix_cache_hits_total' | awk '{print $2}'; }
post /v1/completions "{\"prompt\": \"$LONG\", \"max_tokens\": 1, \"lora\": [{\"id\": 1}]}" >/dev/null
h0=$(hits)
post /v1/completions "{\"prompt\": \"$LONG\", \"max_tokens\": 1, \"lora\": [{\"id\": 2}]}" >/dev/null
h1=$(hits)
post /v1/completions "{\"prompt\": \"$LONG\", \"max_tokens\": 1, \"lora\": [{\"id\": 1, \"scale\": 0.5}]}" >/dev/null
h2=$(hits)
post /v1/completions "{\"prompt\": \"$LONG\", \"max_tokens\": 1, \"lora\": [{\"id\": 1}]}" >/dev/null
h3=$(hits)
check "another adapter reuses nothing" "$h0" "$h1"
check "another scale reuses nothing" "$h1" "$h2"
truth "the same adapter reuses its prefix" "h3 > h2" "hits $h2 -> $h3"

# ---- /v1/models and /metrics ----
models=$(curl -s "$U/v1/models")
check "/v1/models lists the adapters after the model" "['llama-q8_0', 'ad1', 'ad2', 'third']" "$(echo "$models" | js '[m["id"] for m in d["data"]]')"
check "an adapter's parent is the model" "llama-q8_0" "$(echo "$models" | js 'd["data"][3]["parent"]')"
met=$(curl -s "$U/metrics")
has "/metrics: adapters registered" 'inflight_lora_adapters{model_name="llama-q8_0",state="registered"} 3' "$met"
has "/metrics: adapters loaded" 'inflight_lora_adapters{model_name="llama-q8_0",state="loaded"} 3' "$met"
truth "/metrics: adapter bytes" "$(echo "$met" | grep '^inflight_lora_bytes' | awk '{print $2}') > 100000" "$met"

# ---- bad ids, names and scales: 400 (TGI 422) naming the field ----
badreq() { # name, route, body, status, field
    local st
    st=$(code "$2" "$3")
    check "$1: $4" "$4" "$st"
    has "$1: names $5" "$5" "$(cat "$tmp/body")"
}
badreq "unknown id" /v1/completions "{$P, \"lora\": [{\"id\": 9}]}" 400 'lora[0].id'
badreq "scale not a number" /v1/completions "{$P, \"lora\": [{\"id\": 1, \"scale\": \"x\"}]}" 400 'lora[0].scale'
badreq "id missing" /v1/completions "{$P, \"lora\": [{\"scale\": 1}]}" 400 'lora[0].id'
badreq "lora not a list" /v1/completions "{$P, \"lora\": 3}" 400 '"lora"'
badreq "an id twice" /v1/completions "{$P, \"lora\": [{\"id\": 1}, {\"id\": 1}]}" 400 'lora[1].id'
badreq "TGI unknown adapter_id" /generate '{"inputs": "a", "parameters": {"adapter_id": "nope"}}' 422 'adapter_id'
badreq "TGI adapter_id not a string" /generate '{"inputs": "a", "parameters": {"adapter_id": 3}}' 422 'adapter_id'
badreq "POST unknown id" /lora-adapters '[{"id": 7, "scale": 1}]' 400 '[0].id'
badreq "POST bad scale" /lora-adapters '[{"id": 1, "scale": "big"}]' 400 '[0].scale'
badreq "POST not a list" /lora-adapters '{"id": 1}' 400 'list'
check "a bad POST changed nothing" "[0.0, 0.0, 1.0]" "$(curl -s "$U/lora-adapters" | js '[a["scale"] for a in d]')"
check "PUT /lora-adapters: 405" "405" "$(curl -s -o /dev/null -w '%{http_code}' -X PUT "$U/lora-adapters")"
check "still serving" "$third" "$(post /v1/completions "{$P}" | toks)"

# ---- run and bench take the same flags ----
R=(run -m "$M" -p "Once upon a time" -n 10 --temp 0 --ids)
run_base=$("$BIN" "${R[@]}" 2>/dev/null)
run_lora=$("$BIN" "${R[@]}" --lora "$tmp/ad1.gguf" 2>/dev/null)
run_scaled=$("$BIN" "${R[@]}" --lora-scaled "$tmp/ad1.gguf:1" 2>/dev/null)
run_zero=$("$BIN" "${R[@]}" --lora-scaled "$tmp/ad1.gguf:0" 2>/dev/null)
check "run --lora F is --lora-scaled F:1" "$run_lora" "$run_scaled"
check "run --lora-scaled F:0 is the base" "$run_base" "$run_zero"
truth "run --lora changes the output" "$([ "$run_base" != "$run_lora" ] && echo 1 || echo 0)" "$run_base"
run_f16=$("$BIN" "${R[@]}" --lora "$tmp/ad1.gguf" --lora-type f16 2>/dev/null)
check "run --lora-type f16: as many tokens" "$(echo "$run_lora" | wc -w)" "$(echo "$run_f16" | wc -w)"
"$BIN" "${R[@]}" --lora "$tmp/ad1.gguf" --lora-type f8 >/dev/null 2>"$tmp/err"
check "run --lora-type f8: exit 2" 2 $?
has "run --lora-type f8: names the choices" "f32, f16 or q8_0" "$(cat "$tmp/err")"
run_q8=$("$BIN" "${R[@]}" --lora "$tmp/ad1.gguf" --lora-type q8_0 2>/dev/null)
check "run --lora-type q8_0: as many tokens" "$(echo "$run_lora" | wc -w)" "$(echo "$run_q8" | wc -w)"
truth "run --lora-type q8_0: the adapter still applies" "$([ "$run_base" != "$run_q8" ] && echo 1 || echo 0)" "$run_q8"
"$BIN" "${R[@]}" --lora "$tmp/wrong.gguf" >/dev/null 2>"$tmp/err"
check "run with a wrong adapter: exit 2" 2 $?
has "run with a wrong adapter: says which tensor" "blk.0.attn_q.weight" "$(cat "$tmp/err")"
"$BIN" bench -m "$M" -c 4 -p 8 -n 8 -r 1 --lora-spread --lora "$tmp/ad1.gguf" \
    --lora-scaled "$tmp/ad2.gguf:0.5" >"$tmp/bench" 2>&1
check "bench --lora-spread runs" 0 $?
has "bench prints its row" "| 4 |" "$(cat "$tmp/bench")"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
