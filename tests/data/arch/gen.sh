#!/bin/bash
# Regenerates the reference data of this folder (see README.md): each
# model of models.txt written by our tools/mkmodel, and what llama.cpp's
# libllama computes for it (../quant/refdump.c, the same settings).
#
#   LLAMA=/path/to/llama.cpp bash tests/data/arch/gen.sh [NAME...]
#
# from the worktree root, after `make build/tools/mkmodel`. LLAMA is a
# llama.cpp source tree whose build/bin holds libllama.so. The models are
# not kept (the tests rebuild them with mkmodel): only llama.cpp's outputs.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
shared=${SHARED:-$root/../shared}
LLAMA=${LLAMA:?set LLAMA to a llama.cpp tree with build/bin}
bin=$LLAMA/build/bin
mk=${MKMODEL:-$root/build/tools/mkmodel}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -O2 -o "$tmp/refdump" "$here/../quant/refdump.c" -I"$LLAMA/include" -I"$LLAMA/ggml/include" \
    -L"$bin" -Wl,-rpath,"$bin" -lllama -lm
prompt="Once upon a time, there was a little robot"
grep -v '^#' "$here/models.txt" | while IFS=: read -r name args; do
    [ -n "$name" ] || continue
    if [ $# -gt 0 ] && ! printf '%s\n' "$@" | grep -qx "$name"; then continue; fi
    # shellcheck disable=SC2086
    "$mk" -o "$tmp/$name.gguf" --vocab "$shared/models/stories260K.gguf" $args 2>/dev/null
    "$tmp/refdump" "$tmp/$name.gguf" "$here/$name" 32 "$prompt"
    echo "$name: $(grep -o '"diff_vs_logits_file".*' "$here/$name.json")"
done
