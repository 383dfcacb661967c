#!/usr/bin/env bash
# `inflight tokenize -m VOCAB.gguf` on every vocabulary of tests/data/vocab/
# (unpacked by make into $BUILD/vocab/): each vector case's ids, as
# llama.cpp's test-tokenizer-0 expects them, come out of the command line;
# WordPiece adds [CLS]/[SEP] with --add-special; a vocabulary with an
# unknown pre-tokenizer is refused with exit status 2 and one message.
set -u
BUILD=${BUILD:-build}
BIN=$BUILD/inflight
pass=0
fail=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
. "$(dirname "$0")/lib.sh"

SEP=$'\n__ggml_vocab_test__\n'
n_vocab=0
for xz in tests/data/vocab/*.gguf.xz; do
    name=$(basename "$xz" .xz)
    v=$BUILD/vocab/$name
    if [ ! -f "$v" ]; then bad "$name: $v missing (make unpacks it)"; continue; fi
    n_vocab=$((n_vocab + 1))
    # split the .inp into case files (bytes kept exact, trailing newlines too)
    python3 - "tests/data/vocab/$name.inp" "$tmp/$name" <<'PY'
import sys
data = open(sys.argv[1], 'rb').read().split(b'\n__ggml_vocab_test__\n')
for i, c in enumerate(data[:-1]):
    open('%s.%d' % (sys.argv[2], i), 'wb').write(c)
PY
    mismatches=0
    cases=0
    i=0
    while IFS= read -r want; do
        f=$tmp/$name.$i
        [ -f "$f" ] || break
        got=$("$BIN" tokenize -m "$v" <"$f" 2>"$tmp/err")
        rc=$?
        want=$(echo $want)
        got=$(echo $got)
        if [ $rc -ne 0 ] || [ "$got" != "$want" ]; then
            mismatches=$((mismatches + 1))
            [ $mismatches -le 3 ] && { echo "  $name case $i: want '$want' got '$got'"; head -2 "$tmp/err"; }
        fi
        cases=$((cases + 1))
        i=$((i + 1))
    done <"tests/data/vocab/$name.out"
    check "$name: $cases cases through inflight tokenize" "0 mismatches of $cases" "$mismatches mismatches of $cases"
done
check "vocabularies found" 1 $((n_vocab >= 5))

v=$BUILD/vocab/ggml-vocab-bert-bge.gguf
check "bert: --add-special gives [CLS] ... [SEP]" "101 7592 2088 102" \
    "$(printf 'Hello world' | "$BIN" tokenize -m "$v" --add-special)"

# a vocabulary with an unknown pre-tokenizer: exit 2, the name in one message
python3 - "$BUILD/vocab/ggml-vocab-starcoder.gguf" "$tmp/badpre.gguf" <<'PY'
import sys
b = bytearray(open(sys.argv[1], 'rb').read())
key = b'tokenizer.ggml.pre'
i = b.index(key) + len(key) + 4  # past the key and its value type
n = int.from_bytes(b[i:i + 8], 'little')
val = b'xyzzy'.ljust(n, b'9')[:n]      # same length: offsets stay valid
b[i + 8:i + 8 + n] = val
open(sys.argv[2], 'wb').write(b)
PY
printf 'hi' | "$BIN" tokenize -m "$tmp/badpre.gguf" >"$tmp/out" 2>"$tmp/err"
rc=$?
check "unknown pre-tokenizer: exit status 2" 2 $rc
has "unknown pre-tokenizer: named in the message" "xyzzy" "$(cat "$tmp/err")"
check "unknown pre-tokenizer: one message line" 1 "$(wc -l <"$tmp/err")"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
