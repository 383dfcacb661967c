#!/bin/bash
# Regenerates the reference data of this folder (see README.md): three
# synthetic mixture-of-experts models from our tools/mkmodel (qwen3moe,
# llama with experts, Mixtral's layout, and gpt-oss), llama.cpp's quantisations of
# them, and what llama.cpp's libllama computes for each (the refdump.c of
# tests/data/quant).
#
#   LLAMA=/path/to/llama.cpp BUILD=build bash tests/data/moe/gen.sh
#
# LLAMA is a llama.cpp tree whose build/ holds bin/llama-quantize and
# bin/libllama.so. The F32 models are not kept (10 MB each): the test makes
# them again with the same mkmodel command (recorded in their .json with
# the file's sha256) and checks the bytes before comparing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
shared=${SHARED:-$root/../shared}
BUILD=${BUILD:-build}
LLAMA=${LLAMA:?set LLAMA to a llama.cpp tree with build/bin}
bin=$LLAMA/build/bin
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cc -O2 -o "$tmp/refdump" "$root/tests/data/quant/refdump.c" -I"$LLAMA/include" \
    -I"$LLAMA/ggml/include" -L"$bin" -Wl,-rpath,"$bin" -lllama -lm
prompt="Once upon a time, there was a little robot"
shape="--n-embd 256 --n-layer 4 --n-head 8 --n-head-kv 2 --n-ff 64 --n-expert 8 --n-expert-used 2 --seed 41"
# name  mkmodel arch  llama-quantize type of the kept model
for spec in "qwen3moe qwen3moe F16 Q8_0 MXFP4_MOE" "mixtral llama Q4_K_M" "gptoss gpt-oss MXFP4_MOE"; do
    set -- $spec
    name=$1 arch=$2
    shift 2
    f32=$tmp/$name-f32.gguf
    # gpt-oss: windows of 8 on the even layers, so the 46 positions cross
    # them, and the YaRN of the real models (factor 32 over 4096)
    extra=""
    [ "$arch" != gpt-oss ] || extra=" --n-swa 8 --yarn 32,4096"
    # the recorded arguments leave --vocab out: the test gives its own path
    # to stories260K.gguf (the file's bytes do not depend on it)
    args="--arch $arch --type f32 $shape$extra"
    (cd "$root" && "$BUILD/tools/mkmodel" -o "$f32" --vocab "$shared/models/stories260K.gguf" $args) 2>/dev/null
    "$tmp/refdump" "$f32" "$here/$name-f32" 32 "$prompt"
    sum=$(sha256sum "$f32" | cut -d' ' -f1)
    # the model is made at test time: its command and bytes go in the json
    python3 - "$here/$name-f32.json" "$args" "$sum" <<'PY'
import json, sys
p, args, s = sys.argv[1:]
d = json.load(open(p))
d["mkmodel_args"] = args
d["sha256"] = s
json.dump(d, open(p, "w"), indent=1)
PY
    for T in "$@"; do
        t=$(echo "$T" | tr A-Z a-z)
        out=$here/$name-$t
        "$bin/llama-quantize" "$f32" "$out.gguf" "$T" 2 >"$tmp/q.log" 2>&1 || {
            cat "$tmp/q.log"
            exit 1
        }
        "$tmp/refdump" "$out.gguf" "$out" 32 "$prompt"
    done
done
for j in "$here"/*.json; do
    echo "$(basename "$j"): $(grep -o '"diff_vs_logits_file".*' "$j" | head -c 300)"
done
