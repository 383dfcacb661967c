#!/usr/bin/env python3
"""Writes VOCAB.gguf.out, the ids llama.cpp gives each case of
VOCAB.gguf.inp, by running llama.cpp's test-tokenizer-0 on the vocabulary.

test-tokenizer-0 checks a vocabulary against its .out; given one of empty
lines it fails every case but prints, for each, "src: '<text>'",
"res: '<detokenized>'" and "tok: <ids>" on stdout (in the order of a map
keyed by the text, not the file's), which this script reads back into the
file's order.

Usage: llama_vectors.py PATH/TO/test-tokenizer-0 VOCAB.gguf
"""
import os
import subprocess
import sys

SEP = b'\n__ggml_vocab_test__\n'


def main():
    exe, gguf = sys.argv[1], sys.argv[2]
    cases = open(gguf + '.inp', 'rb').read().split(SEP)
    assert cases[-1] == b'', 'the .inp must end with the separator'
    cases = cases[:-1]
    with open(gguf + '.out', 'w') as f:
        f.write('\n' * len(cases))
    r = subprocess.run([exe, gguf], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = r.stdout
    if b'\nsrc: ' not in out:
        sys.stderr.write(r.stderr.decode('utf-8', 'replace')[-2000:])
        sys.exit('test-tokenizer-0 printed no cases')
    lines = []
    for c in cases:
        at = out.find(b"\nsrc: '" + c + b"'\nres: '")
        if at < 0:
            sys.exit('case %r not found in the output' % c[:40])
        t = out.find(b'\ntok: ', at + len(c) + 8)
        e = out.find(b'\n', t + 6)
        ids = out[t + 6:e].split()
        lines.append(' ' + ' '.join(x.decode() for x in ids) if ids else '')
    with open(gguf + '.out', 'w') as f:
        f.write('\n'.join(lines) + '\n')
    print('%s.out: %d cases' % (os.path.basename(gguf), len(lines)))


if __name__ == '__main__':
    main()
