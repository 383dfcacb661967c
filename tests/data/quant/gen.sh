#!/bin/bash
# Regenerates the reference data of this folder (see README.md): each new
# weight type quantised by llama.cpp's llama-quantize from the shared F32
# reference model, and what llama.cpp's libllama computes for it (refdump.c).
#
#   LLAMA=/path/to/llama.cpp bash tests/data/quant/gen.sh [TYPE...]
#
# LLAMA is a llama.cpp source tree whose build/ holds bin/llama-quantize and
# bin/libllama.so (cmake --build build --target llama-quantize llama).
# Nothing of llama.cpp is kept here: only the models and its outputs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
shared=${SHARED:-$here/../../../../shared}
LLAMA=${LLAMA:?set LLAMA to a llama.cpp tree with build/bin}
bin=$LLAMA/build/bin
types=("$@")
[ ${#types[@]} -gt 0 ] || types=(q5_0 q5_1 iq4_nl iq4_xs q3_k q2_k mxfp4)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -O2 -o "$tmp/refdump" "$here/refdump.c" -I"$LLAMA/include" -I"$LLAMA/ggml/include" \
    -L"$bin" -Wl,-rpath,"$bin" -lllama -lm
prompt="Once upon a time, there was a little robot"
for t in "${types[@]}"; do
    T=$(echo "$t" | tr a-z A-Z)
    # llama-quantize names MXFP4 by its preset; --pure makes every tensor MXFP4
    [ "$t" != mxfp4 ] || T=MXFP4_MOE
    out=$here/llama-$t
    # --pure: every 2-D tensor in the one type (token_embd and output too)
    "$bin/llama-quantize" --pure "$shared/models/ref/llama-f32.gguf" "$out.gguf" "$T" 2 \
        >"$tmp/q.log" 2>&1 || { cat "$tmp/q.log"; exit 1; }
    "$tmp/refdump" "$out.gguf" "$out" 32 "$prompt"
    echo "$t: $(grep -o '"diff_vs_logits_file".*' "$out.json")"
done
