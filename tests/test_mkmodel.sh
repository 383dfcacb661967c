#!/usr/bin/env bash
# tools/mkmodel end to end: every architecture x weight type gives a model
# that `inflight info` loads, with the expected architecture and types;
# generation is deterministic in the seed; presets, --tied, --rope-freqs
# and the block-size fallback work; bad arguments exit 2 with one message.
set -u
BUILD=${BUILD:-build}
MK=$BUILD/tools/mkmodel
BIN=$BUILD/inflight
SHARED=${IFL_SHARED:-../shared}
VOCAB=$SHARED/models/stories260K.gguf
pass=0
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

. "$(dirname "$0")/lib.sh"
# expects exit status 2 and a short message on stderr
check_usage() {
    local name=$1; shift
    "$@" >"$tmp/out" 2>"$tmp/err" </dev/null
    local rc=$?
    if [ $rc -eq 2 ] && [ -s "$tmp/err" ] && [ "$(wc -l <"$tmp/err")" -le 2 ] &&
        grep -q '^mkmodel: ' "$tmp/err"; then
        ok "$name"
    else
        bad "$name (exit $rc)"; head -5 "$tmp/err"
    fi
}
# name, file, then grep -E patterns that `inflight info` must all match
check_info() {
    local name=$1 file=$2; shift 2
    if ! "$BIN" info -m "$file" >"$tmp/info" 2>&1; then
        bad "$name: inflight info failed"; head -5 "$tmp/info"; return
    fi
    local p
    for p in "$@"; do
        if ! grep -Eq "$p" "$tmp/info"; then
            bad "$name: info lacks /$p/"; cat "$tmp/info"; return
        fi
    done
    ok "$name"
}

small="--n-embd 256 --n-layer 2 --n-head 4 --n-head-kv 2 --n-ff 512"
declare -A main_type=([f32]=f32 [f16]=f16 [bf16]=bf16 [q8_0]=q8_0 [q4_0]=q4_0 [q4_k]=q4_K
                      [q5_k]=q5_K [q6_k]=q6_K [q4_k_m]=q4_K [q5_k_m]=q5_K [q5_0]=q5_0
                      [q5_1]=q5_1 [iq4_nl]=iq4_nl [iq4_xs]=iq4_xs [q3_k]=q3_K [q2_k]=q2_K
                      [mxfp4]=mxfp4)
for arch in llama qwen2 qwen3; do
    extra=""
    [ "$arch" = qwen3 ] && extra="--head-dim 128"
    for type in f32 f16 bf16 q8_0 q4_0 q4_k q5_k q6_k q4_k_m q5_k_m \
        q5_0 q5_1 iq4_nl iq4_xs q3_k q2_k mxfp4; do
        f=$tmp/$arch-$type.gguf
        # shellcheck disable=SC2086
        if ! "$MK" -o "$f" --vocab "$VOCAB" --arch "$arch" $small $extra --type "$type" \
            2>"$tmp/mkerr"; then
            bad "mkmodel $arch $type"; head -5 "$tmp/mkerr"; continue
        fi
        pats=("architecture: +$arch" "n_embd: +256" "${main_type[$type]} x")
        [ "$arch" = qwen3 ] && pats+=("head_dim 128")
        case $type in q4_0|q4_k_m|q5_k_m|q5_0|q5_1|iq4_nl|iq4_xs|q3_k|q2_k) pats+=("q6_K x") ;; esac
        check_info "$arch $type loads" "$f" "${pats[@]}"
        rm -f "$f"
    done
done

# llama-quantize's MXFP4_MOE mix: experts MXFP4, every other matrix Q8_0
f=$tmp/qwen3moe-mxfp4_moe.gguf
# shellcheck disable=SC2086
if "$MK" -o "$f" --vocab "$VOCAB" --arch qwen3moe $small --n-expert 4 --n-expert-used 2 \
    --type mxfp4_moe 2>"$tmp/mkerr"; then
    check_info "qwen3moe mxfp4_moe loads" "$f" "architecture: +qwen3moe" "q8_0 x10 mxfp4 x6$"
else
    bad "mkmodel qwen3moe mxfp4_moe"; head -5 "$tmp/mkerr"
fi
rm -f "$f"

# gemma2, gemma3 and phi3 (their forward pass: tests/test_arch_dense.c)
for arch in gemma2 gemma3 phi3; do
    for type in f16 q8_0 q4_k_m; do
        f=$tmp/$arch-$type.gguf
        # shellcheck disable=SC2086
        if ! "$MK" -o "$f" --vocab "$VOCAB" --arch "$arch" ${small/--n-layer 2/--n-layer 6} --type "$type" \
            2>"$tmp/mkerr"; then
            bad "mkmodel $arch $type"; head -5 "$tmp/mkerr"; continue
        fi
        pats=("architecture: +$arch" "${main_type[$type]} x")
        case $arch in
        gemma2) pats+=("window 4096 on 3 of 6 layers, their rope base 10000$"
                       "attention 50, final 30" "output: +tied") ;;
        gemma3) pats+=("window 1024 on 5 of 6 layers, their rope base 10000$" "base 1e\+06") ;;
        phi3) pats+=("original context 16, attn_factor 1.5$" "tensors: +41,") ;;
        esac
        check_info "$arch $type loads" "$f" "${pats[@]}"
        rm -f "$f"
    done
done
"$MK" -o "$tmp/g.gguf" --vocab "$VOCAB" $small --arch gemma2 --n-swa 8 --softcap 0,2 2>/dev/null
check_info "gemma2 --n-swa --softcap" "$tmp/g.gguf" "window 8 on 1 of 2" "attention 50, final 2"
"$MK" -o "$tmp/g.gguf" --vocab "$VOCAB" $small --arch gemma2 --n-swa 8 --swa-pattern 0 2>/dev/null
check_info "gemma2 --swa-pattern 0" "$tmp/g.gguf" "window 8 on 2 of 2"
"$MK" -o "$tmp/g.gguf" --vocab "$VOCAB" $small --arch gemma3 --n-swa 8 --swa-pattern 1,0 2>/dev/null
check_info "gemma3 --swa-pattern array (passed over)" "$tmp/g.gguf" "window 8 on 2 of 2"
rm -f "$tmp/g.gguf"

# gpt-oss (its forward pass: tests/test_moe.c): window 128 on the even
# layers, YaRN 32 over ctx / 32 by default, sinks; --yarn, --n-swa
oss="--arch gpt-oss --n-expert 4 --n-expert-used 2"
for type in f16 mxfp4_moe; do
    # shellcheck disable=SC2086
    if "$MK" -o "$tmp/o.gguf" --vocab "$VOCAB" $small $oss --type $type 2>"$tmp/mkerr"; then
        pats=("architecture: +gpt-oss" "yarn: +factor 32, original context 16," "sinks: "
              "window 128 on 1 of 2 layers" "experts: +4, 2 used")
        [ $type = f16 ] && pats+=("f32 x[0-9]+ f16 x[0-9]+$") || pats+=("q8_0 x[0-9]+ mxfp4 x6$")
        check_info "gpt-oss $type loads" "$tmp/o.gguf" "${pats[@]}"
    else
        bad "mkmodel gpt-oss $type"; head -5 "$tmp/mkerr"
    fi
done
# shellcheck disable=SC2086
"$MK" -o "$tmp/o.gguf" --vocab "$VOCAB" $small $oss --n-swa 8 --yarn 4,64 --head-dim 32 2>/dev/null
check_info "gpt-oss --yarn --n-swa --head-dim" "$tmp/o.gguf" "factor 4, original context 64," \
    "window 8 on 1 of 2" "head_dim 32"
# shellcheck disable=SC2086
"$MK" -o "$tmp/o.gguf" --vocab "$VOCAB" $small $oss --yarn 0 2>/dev/null
"$BIN" info -m "$tmp/o.gguf" 2>&1 | grep -q '^yarn:' && bad "gpt-oss --yarn 0 writes no YaRN" ||
    ok "gpt-oss --yarn 0 writes no YaRN"
rm -f "$tmp/o.gguf"

# the same seed gives the same bytes, another seed other bytes
"$MK" -o "$tmp/s1.gguf" --vocab "$VOCAB" $small --type q4_k_m --seed 7 2>/dev/null
"$MK" -o "$tmp/s2.gguf" --vocab "$VOCAB" $small --type q4_k_m --seed 7 2>/dev/null
"$MK" -o "$tmp/s3.gguf" --vocab "$VOCAB" $small --type q4_k_m --seed 8 2>/dev/null
cmp -s "$tmp/s1.gguf" "$tmp/s2.gguf" && ok "same seed, same file" || bad "same seed, same file"
cmp -s "$tmp/s1.gguf" "$tmp/s3.gguf" && bad "other seed, other file" || ok "other seed, other file"
rm -f "$tmp"/s?.gguf

# --tied drops output.weight, --rope-freqs adds rope_freqs.weight: 1 + 2 x 9 + 2 tensors
"$MK" -o "$tmp/t.gguf" --vocab "$VOCAB" $small --tied --rope-freqs --type f16 2>/dev/null
check_info "--tied --rope-freqs" "$tmp/t.gguf" "output: +tied" "base 500000" "tensors: +21,"

# presets set the shape; later options override it
"$MK" -o "$tmp/p.gguf" --vocab "$VOCAB" --preset tinyllama-1.1b --n-layer 1 --type q4_0 2>/dev/null
check_info "preset tinyllama-1.1b" "$tmp/p.gguf" "n_embd: +2048" "n_head: +32 \(kv 4, head_dim 64" \
    "n_ff: +5632" "n_layer: +1$"
rm -f "$tmp/p.gguf"

# a row that does not fit the type's block falls back, and says so
if "$MK" -o "$tmp/fb.gguf" --vocab "$VOCAB" --n-embd 64 --n-head 4 --n-head-kv 2 --n-ff 96 \
    --n-layer 1 --type q4_k 2>"$tmp/err" && grep -q "using q8_0" "$tmp/err"; then
    check_info "block-size fallback to q8_0" "$tmp/fb.gguf" "q8_0 x"
else
    bad "block-size fallback to q8_0"; head -3 "$tmp/err"
fi

# LoRA adapters: deterministic in the seed, loadable (a merge reads them
# with the runtime's loader), the block-size fallback said once
F32=$SHARED/models/ref/llama-f32.gguf
"$MK" --lora-of "$F32" -o "$tmp/l1.gguf" --rank 4 --seed 3 2>/dev/null
"$MK" --lora-of "$F32" -o "$tmp/l2.gguf" --rank 4 --seed 3 2>/dev/null
"$MK" --lora-of "$F32" -o "$tmp/l3.gguf" --rank 4 --seed 4 2>/dev/null
cmp -s "$tmp/l1.gguf" "$tmp/l2.gguf" && ok "lora: same seed, same file" ||
    bad "lora: same seed, same file"
cmp -s "$tmp/l1.gguf" "$tmp/l3.gguf" && bad "lora: other seed, other file" ||
    ok "lora: other seed, other file"
if "$MK" --lora-of "$F32" -o "$tmp/lq.gguf" --rank 8 --lora-type q8_0 \
    --lora-targets q,embd,output 2>"$tmp/err" &&
    [ "$(grep -c 'those tensors are f16' "$tmp/err")" = 1 ] &&
    "$BIN" lora merge -m "$F32" --lora "$tmp/lq.gguf" --lora "$tmp/l1.gguf:0.5" \
        -o "$tmp/lm.gguf" 2>"$tmp/merr" && grep -q "30 matrices merged" "$tmp/merr"; then
    check_info "lora: q8_0 adapter with f16 fallback, merged" "$tmp/lm.gguf" "f32 x"
else
    bad "lora: q8_0 adapter with f16 fallback, merged"; head -3 "$tmp/err" "$tmp/merr"
fi
rm -f "$tmp"/l?.gguf
L="--lora-of $F32 -o $tmp/bad.gguf"
check_usage "lora: bad target" "$MK" $L --lora-targets q,x
check_usage "lora: empty targets" "$MK" $L --lora-targets ,
check_usage "lora: unsupported type" "$MK" $L --lora-type q4_0
check_usage "lora: rank 0" "$MK" $L --rank 0
check_usage "lora: negative alpha" "$MK" $L --alpha -1
check_usage "lora: with --vocab" "$MK" $L --vocab "$VOCAB"
check_usage "lora: base missing" "$MK" --lora-of "$tmp/nonexistent.gguf" -o "$tmp/bad.gguf"
check_usage "lora: output of a tied base" "$MK" \
    --lora-of "$SHARED/models/ref/llama-tied-f16.gguf" -o "$tmp/bad.gguf" --lora-targets output

# bad arguments
o="-o $tmp/bad.gguf"
check_usage "no arguments" "$MK"
check_usage "missing --vocab" "$MK" $o
check_usage "missing -o" "$MK" --vocab "$VOCAB"
check_usage "unknown option" "$MK" $o --vocab "$VOCAB" --frobnicate
check_usage "stray argument" "$MK" $o --vocab "$VOCAB" extra
check_usage "missing value" "$MK" $o --vocab "$VOCAB" --n-layer
check_usage "unknown type" "$MK" $o --vocab "$VOCAB" --type iq2_xs
check_usage "unknown arch" "$MK" $o --vocab "$VOCAB" --arch gpt2
check_usage "unknown preset" "$MK" $o --vocab "$VOCAB" --preset huge
check_usage "non-numeric n_embd" "$MK" $o --vocab "$VOCAB" --n-embd 12x
check_usage "zero layers" "$MK" $o --vocab "$VOCAB" --n-layer 0
check_usage "negative ctx" "$MK" $o --vocab "$VOCAB" --ctx -4
check_usage "heads not a multiple of kv heads" "$MK" $o --vocab "$VOCAB" --n-head 4 --n-head-kv 3
check_usage "n_embd not a multiple of heads" "$MK" $o --vocab "$VOCAB" --n-embd 250 --n-head 4
check_usage "--n-swa on llama" "$MK" $o --vocab "$VOCAB" --n-swa 16
check_usage "--swa-pattern on llama" "$MK" $o --vocab "$VOCAB" --swa-pattern 2
check_usage "--swa-pattern not 0/1" "$MK" $o --vocab "$VOCAB" --arch gemma2 --swa-pattern 1,2
check_usage "--swa-pattern trailing comma" "$MK" $o --vocab "$VOCAB" --arch gemma2 --swa-pattern 1,
check_usage "--swa-pattern negative" "$MK" $o --vocab "$VOCAB" --arch gemma2 --swa-pattern -1
check_usage "--softcap on phi3" "$MK" $o --vocab "$VOCAB" --arch phi3 --softcap 1,2
check_usage "--yarn on llama" "$MK" $o --vocab "$VOCAB" --yarn 4
check_usage "--yarn below 1" "$MK" $o --vocab "$VOCAB" --arch gpt-oss --n-expert 4 --n-expert-used 2 --yarn 0.5
check_usage "--yarn bad context" "$MK" $o --vocab "$VOCAB" --arch gpt-oss --n-expert 4 --n-expert-used 2 --yarn 4,x
check_usage "gpt-oss without experts" "$MK" $o --vocab "$VOCAB" --arch gpt-oss
check_usage "--tied on gpt-oss" "$MK" $o --vocab "$VOCAB" --arch gpt-oss --n-expert 4 --n-expert-used 2 --tied
check_usage "--softcap one number" "$MK" $o --vocab "$VOCAB" --arch gemma2 --softcap 5
check_usage "--softcap negative" "$MK" $o --vocab "$VOCAB" --arch gemma2 --softcap -1,2
check_usage "--ctx-orig on gemma3" "$MK" $o --vocab "$VOCAB" --arch gemma3 --ctx-orig 64
check_usage "--tied on phi3" "$MK" $o --vocab "$VOCAB" --arch phi3 --tied
check_usage "head-dim on llama" "$MK" $o --vocab "$VOCAB" --head-dim 32
check_usage "odd head_dim" "$MK" $o --vocab "$VOCAB" --arch qwen3 --head-dim 33
check_usage "bad rope base" "$MK" $o --vocab "$VOCAB" --rope-base abc
check_usage "bad seed" "$MK" $o --vocab "$VOCAB" --seed -1
check_usage "vocab file missing" "$MK" $o --vocab "$tmp/nonexistent.gguf"
check_usage "vocab without tokens" "$MK" $o --vocab "$SHARED/models/ref/README.md"
[ -e "$tmp/bad.gguf" ] && bad "no file left behind by bad arguments" ||
    ok "no file left behind by bad arguments"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
