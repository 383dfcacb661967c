#!/usr/bin/env bash
# Makes the llama.cpp reference embeddings in this directory (llama.cpp's
# libmtmd on our synthetic mmproj files; tests/test_clip_llamacpp.c reads
# them). Run from the repository root after `make build/tools/mkmodel`:
#   LLAMA=/work/peers/llama.cpp bash tests/data/clip/make.sh
# LLAMA is a llama.cpp source tree built in $LLAMA/build with the mtmd
# target (cmake --build build --target mtmd). The mmproj files are not kept:
# mkmodel remakes them, byte for byte, from the flags below (the test
# checks their SHA-256 against mmproj.sha256).
set -eu
LLAMA=${LLAMA:-/work/peers/llama.cpp}
BUILD=${BUILD:-build}
D=tests/data/clip
TEXT=../shared/models/stories260K.gguf
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -O1 -o "$tmp/mtmd_dump" $D/mtmd_dump.c -I"$LLAMA/include" -I"$LLAMA/tools/mtmd" \
    -I"$LLAMA/ggml/include" -L"$LLAMA/build/bin" -lmtmd -lllama -lggml -lggml-base \
    -Wl,-rpath,"$LLAMA/build/bin"
: > $D/mmproj.sha256
while read -r name flags; do
    "$BUILD/tools/mkmodel" -o "$tmp/$name.gguf" --mmproj $flags 2>/dev/null
    (cd "$tmp" && sha256sum "$name.gguf") >> $D/mmproj.sha256
done <<'LIST'
cls --type f32 --seed 61
nocls --type f32 --no-class --seed 62
f16 --type f16 --no-class --seed 63
q8 --type q8_0 --no-class --seed 64
ivl-flat --projector internvl --type f32 --flat-pos --seed 71
ivl --projector internvl --type f32 --seed 72
ivl-f16 --projector internvl --type f16 --flat-pos --seed 73
ivl-q8 --projector internvl --type q8_0 --flat-pos --seed 74
LIST
while read -r name w h; do
    "$tmp/mtmd_dump" "$TEXT" "$tmp/$name.gguf" "$w" "$h" "$D/$name-${w}x$h.bin" 2>"$tmp/log" ||
        { tail -20 "$tmp/log"; exit 1; }
    grep '^mtmd_dump' "$tmp/log"
done <<'LIST'
cls 32 32
nocls 32 32
nocls 48 20
nocls 13 40
f16 32 32
q8 32 32
ivl-flat 32 32
ivl-flat 20 48
ivl-flat 70 40
ivl-flat 24 17
ivl 32 32
ivl-f16 70 40
ivl-q8 32 32
LIST
