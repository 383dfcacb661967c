#!/bin/bash
# Regenerates this folder (see README.md): for each model of models.txt,
# the tensor types llama-quantize's Q3_K_M, Q3_K_L and IQ4_XS presets give
# its F32 form (NAME.types), and for the models of logits.txt what
# llama.cpp's libllama computes on mkmodel's own mixed file
# (../quant/refdump.c, the settings of ../quant).
#
#   LLAMA=/path/to/llama.cpp bash tests/data/mixes/gen.sh
#
# from the worktree root, after `make build/tools/mkmodel`. LLAMA is a
# llama.cpp tree whose build/bin holds llama-quantize and libllama.so.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
shared=${SHARED:-$root/../shared}
LLAMA=${LLAMA:?set LLAMA to a llama.cpp tree with build/bin}
bin=$LLAMA/build/bin
mk=${MKMODEL:-$root/build/tools/mkmodel}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
presets="Q3_K_M Q3_K_L IQ4_XS"
grep -v '^#' "$here/models.txt" | while IFS=: read -r name args; do
    [ -n "$name" ] || continue
    # shellcheck disable=SC2086
    "$mk" -o "$tmp/$name-f32.gguf" --vocab "$shared/models/stories260K.gguf" $args --type f32 \
        2>/dev/null
    for p in $presets; do
        "$bin/llama-quantize" "$tmp/$name-f32.gguf" "$tmp/$name-$p.gguf" "$p" 2 \
            >"$tmp/quantize.log" 2>&1 || { cat "$tmp/quantize.log"; exit 1; }
        python3 "$here/gguf_types.py" "$tmp/$name-$p.gguf" >"$tmp/$name-$p.txt"
        rm -f "$tmp/$name-$p.gguf"
    done
    {
        echo "# tensor $presets (llama-quantize F32 -> preset, $(basename "$LLAMA") build)"
        # shellcheck disable=SC2046
        paste -d' ' "$tmp/$name-Q3_K_M.txt" $(for p in Q3_K_L IQ4_XS; do
            echo "$tmp/$name-$p.txt"; done) | awk '{ print $1, $2, $4, $6 }'
    } >"$here/$name.types"
    rm -f "$tmp/$name-f32.gguf"
    echo "$name: $(($(wc -l <"$here/$name.types") - 1)) tensors"
done
cc -O2 -o "$tmp/refdump" "$here/../quant/refdump.c" -I"$LLAMA/include" -I"$LLAMA/ggml/include" \
    -L"$bin" -Wl,-rpath,"$bin" -lllama -lm
prompt="Once upon a time, there was a little robot"
grep -v '^#' "$here/logits.txt" | while read -r name type; do
    [ -n "$name" ] || continue
    args=$(grep "^$name:" "$here/models.txt" | cut -d: -f2-)
    # shellcheck disable=SC2086
    "$mk" -o "$tmp/$name-$type.gguf" --vocab "$shared/models/stories260K.gguf" $args \
        --type "$type" 2>/dev/null
    "$tmp/refdump" "$tmp/$name-$type.gguf" "$here/$name-$type" 32 "$prompt"
    echo "$name-$type: $(grep -o '"diff_vs_logits_file".*' "$here/$name-$type.json")"
done
