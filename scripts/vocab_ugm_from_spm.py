#!/usr/bin/env python3
"""Writes a Unigram vocabulary (tokenizer.ggml.model "t5") from the tokens,
scores and token types of a SentencePiece GGUF, with a small precompiled
charsmap of our own: a few normalization rules (full-width letters,
ligatures, the ideographic space, an ellipsis) compiled into the
XOR-compressed double array that SentencePiece's charsmaps use. It is not
any model's tokenizer, but a consistent Unigram model on which llama.cpp
and inflight must agree; the rules make the charsmap code run.

Usage: vocab_ugm_from_spm.py SPM.gguf -o OUT.gguf [--remove-extra-ws]
"""
import argparse
import struct

RULES = {
    '\uff21': 'A', '\uff22': 'B', '\uff41': 'a', '\uff42': 'b', '\uff43': 'c',
    '\ufb01': 'fi', '\ufb02': 'fl', '\u3000': ' ', '\u2026': '...',
    '\u2460': '1', '\u00bd': '1/2', 'e\u0301': '\u00e9',
}


def read_gguf(path):
    b = open(path, 'rb').read()
    o = 4
    _, _, nkv = struct.unpack_from('<IQQ', b, o)
    o += 20
    fmts = {0: '<B', 1: '<b', 2: '<H', 3: '<h', 4: '<I', 5: '<i', 6: '<f', 7: '<?',
            10: '<Q', 11: '<q', 12: '<d'}

    def rs(o):
        n = struct.unpack_from('<Q', b, o)[0]
        return b[o + 8:o + 8 + n].decode('utf-8'), o + 8 + n

    def rv(t, o):
        if t == 8:
            return rs(o)
        if t == 9:
            et, n = struct.unpack_from('<IQ', b, o)
            o += 12
            out = []
            for _ in range(n):
                x, o = rv(et, o)
                out.append(x)
            return out, o
        x = struct.unpack_from(fmts[t], b, o)[0]
        return x, o + struct.calcsize(fmts[t])

    kv = {}
    for _ in range(nkv):
        k, o = rs(o)
        t = struct.unpack_from('<I', b, o)[0]
        o += 4
        kv[k], o = rv(t, o)
    return kv


def build_charsmap(rules):
    """Each trie node gets a 256-entry block of its own: node N at position
    P(N) = 256 * k; its child by byte c sits at P(N) ^ c, holding c, the
    leaf flag and BASE = P(child) ^ (P(N) ^ c); a leaf's replacement offset
    sits at P(child) itself with bit 31 set (byte 0 never leads anywhere).
    The array holds whole blocks, so no step leaves it (llama.cpp throws
    when one does)."""
    repl = bytearray()
    trie = {}
    for key, val in rules.items():
        node = trie
        for c in key.encode('utf-8'):
            node = node.setdefault(c, {})
        node[None] = len(repl)
        repl += val.encode('utf-8') + b'\0'
    arr = {}
    blocks = [0]

    def place(node):
        pos = 256 * (len(blocks))
        blocks.append(pos)
        if None in node:
            arr[pos] = (1 << 31) | node[None]
        for c, child in node.items():
            if c is None:
                continue
            slot = pos ^ c
            cpos = place(child)
            base = cpos ^ slot
            assert base < (1 << 21)
            arr[slot] = (base << 10) | ((1 << 8) if None in child else 0) | c
        return pos

    root = place(trie)
    arr[0] = root << 10
    n = 256 * len(blocks)  # whole blocks: every XOR step stays inside
    words = [arr.get(i, 0) for i in range(n)]
    blob = struct.pack('<%dI' % n, *words)
    return struct.pack('<I', len(blob)) + blob + bytes(repl)


def s(x):
    d = x.encode('utf-8')
    return struct.pack('<Q', len(d)) + d


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('spm')
    ap.add_argument('-o', required=True)
    ap.add_argument('--remove-extra-ws', action='store_true')
    a = ap.parse_args()
    kv = read_gguf(a.spm)
    toks = kv['tokenizer.ggml.tokens']
    scores = kv['tokenizer.ggml.scores']
    types = kv['tokenizer.ggml.token_type']
    cm = build_charsmap(RULES)
    out = [
        s('general.architecture') + struct.pack('<I', 8) + s('t5'),
        s('general.name') + struct.pack('<I', 8) + s('unigram test vocabulary'),
        s('t5.block_count') + struct.pack('<II', 4, 1),
        s('t5.context_length') + struct.pack('<II', 4, 512),
        s('t5.embedding_length') + struct.pack('<II', 4, 64),
        s('t5.feed_forward_length') + struct.pack('<II', 4, 128),
        s('t5.attention.head_count') + struct.pack('<II', 4, 1),
        s('t5.attention.key_length') + struct.pack('<II', 4, 64),
        s('t5.attention.value_length') + struct.pack('<II', 4, 64),
        s('t5.attention.layer_norm_epsilon') + struct.pack('<If', 6, 1e-6),
        s('t5.attention.relative_buckets_count') + struct.pack('<II', 4, 32),
        s('t5.decoder_start_token_id') + struct.pack('<II', 4, 0),
        s('tokenizer.ggml.model') + struct.pack('<I', 8) + s('t5'),
        s('tokenizer.ggml.tokens') + struct.pack('<IIQ', 9, 8, len(toks)) +
        b''.join(s(t) for t in toks),
        s('tokenizer.ggml.scores') + struct.pack('<IIQ', 9, 6, len(scores)) +
        struct.pack('<%df' % len(scores), *scores),
        s('tokenizer.ggml.token_type') + struct.pack('<IIQ', 9, 5, len(types)) +
        struct.pack('<%di' % len(types), *types),
        s('tokenizer.ggml.add_space_prefix') + struct.pack('<I?', 7, True),
        s('tokenizer.ggml.remove_extra_whitespaces') + struct.pack('<I?', 7, a.remove_extra_ws),
        s('tokenizer.ggml.precompiled_charsmap') + struct.pack('<IIQ', 9, 0, len(cm)) + cm,
    ]
    with open(a.o, 'wb') as f:
        f.write(b'GGUF' + struct.pack('<IQQ', 3, 0, len(out)))
        for x in out:
            f.write(x)
    print('%s: %d tokens, charsmap %d bytes' % (a.o, len(toks), len(cm)))


if __name__ == '__main__':
    main()
