#!/usr/bin/env python3
"""Writes a vocabulary-only GGUF from a Hugging Face byte-level BPE
tokenizer.json, as llama.cpp's converter lays one out (tokenizer.ggml.model
"gpt2", tokens, token types, merges, the pre-tokenizer's name), with nominal
llama hyperparameters so that llama.cpp loads it with vocab_only.

--keep N keeps a smaller, self-consistent tokenizer: the tokens whose id is
below N, the 256 characters of the byte alphabet and the added tokens,
renumbered in their original order, and the merges whose two parts and
result are all kept. Its output is a different tokenizer from the original,
but llama.cpp and inflight must agree on it, which is what the test data
made from it checks.

--model gemma4 writes a BPE on raw UTF-8 with <0xNN> byte tokens (Gemma's
tokenizer.json: spaces as U+2581, byte fallback) instead of byte-level BPE;
--keep then keeps every one-character token and byte token instead of the
byte alphabet.

--special KEY=TEXT (repeatable; KEY bos, eos, unknown or padding) names the
token of that id where the default texts (<bos>, <eos>, <unk>, <pad>) are not
in the vocabulary; --chat-template FILE stores the file as
tokenizer.chat_template.

Usage: vocab_from_hf.py tokenizer.json --pre NAME [--keep N] [--model gemma4]
                        [--special KEY=TEXT]... [--chat-template FILE] -o OUT.gguf
"""
import re
import argparse
import json
import struct

GGUF_UINT32, GGUF_INT32, GGUF_FLOAT32, GGUF_STRING, GGUF_ARRAY = 4, 5, 6, 8, 9


def byte_alphabet():
    """GPT-2's printable stand-in for each byte."""
    keep = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    cps, n = {}, 0
    for b in range(256):
        if b in keep:
            cps[b] = b
        else:
            cps[b] = 256 + n
            n += 1
    return [chr(cps[b]) for b in range(256)]


def s(x):
    d = x.encode('utf-8')
    return struct.pack('<Q', len(d)) + d


def kv(key, typ, payload):
    return s(key) + struct.pack('<I', typ) + payload


def arr(elem, items):
    out = struct.pack('<IQ', elem, len(items))
    if elem == GGUF_STRING:
        return out + b''.join(s(i) for i in items)
    fmt = {GGUF_INT32: '<i', GGUF_UINT32: '<I'}[elem]
    return out + b''.join(struct.pack(fmt, i) for i in items)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('tokenizer_json')
    ap.add_argument('--pre', required=True)
    ap.add_argument('--keep', type=int, default=0)
    ap.add_argument('--model', default='gpt2', choices=['gpt2', 'gemma4'])
    ap.add_argument('--special', action='append', default=[])
    ap.add_argument('--chat-template')
    ap.add_argument('-o', required=True)
    a = ap.parse_args()

    t = json.load(open(a.tokenizer_json, encoding='utf-8'))
    model = t['model']
    assert model['type'] == 'BPE', 'only BPE tokenizers'
    vocab = model['vocab']
    added = {x['id']: x for x in t.get('added_tokens', [])}
    by_id = sorted(vocab.items(), key=lambda kv_: kv_[1])
    if a.model == 'gpt2':
        alphabet = set(byte_alphabet())
    else:  # every one-character token (U+2581 among them) and the byte tokens
        alphabet = {tok for tok in vocab if len(tok) == 1 or re.fullmatch('<0x[0-9A-F]{2}>', tok)}
    kept = [(tok, i) for tok, i in by_id
            if not a.keep or i < a.keep or tok in alphabet or i in added]
    for i, x in sorted(added.items()):
        if x['content'] not in vocab:
            kept.append((x['content'], i))
    kept.sort(key=lambda kv_: kv_[1])
    texts = [tok for tok, _ in kept]
    present = set(texts)
    types = []
    for tok, i in kept:
        if i in added:
            types.append(3 if added[i].get('special') else 4)
        elif a.model == 'gemma4' and re.fullmatch('<0x[0-9A-F]{2}>', tok):
            types.append(6)
        else:
            types.append(1)
    merges = []
    for m in model['merges']:
        left, right = m.split(' ', 1) if isinstance(m, str) else m
        if left in present and right in present and left + right in present:
            merges.append(left + ' ' + right)

    kvs = [
        kv('general.architecture', GGUF_STRING, s('llama')),
        kv('general.name', GGUF_STRING, s('vocab ' + a.pre)),
        kv('llama.block_count', GGUF_UINT32, struct.pack('<I', 1)),
        kv('llama.context_length', GGUF_UINT32, struct.pack('<I', 2048)),
        kv('llama.embedding_length', GGUF_UINT32, struct.pack('<I', 64)),
        kv('llama.feed_forward_length', GGUF_UINT32, struct.pack('<I', 128)),
        kv('llama.attention.head_count', GGUF_UINT32, struct.pack('<I', 1)),
        kv('llama.attention.head_count_kv', GGUF_UINT32, struct.pack('<I', 1)),
        kv('llama.attention.layer_norm_rms_epsilon', GGUF_FLOAT32, struct.pack('<f', 1e-5)),
        kv('tokenizer.ggml.model', GGUF_STRING, s(a.model)),
        kv('tokenizer.ggml.pre', GGUF_STRING, s(a.pre)),
        kv('tokenizer.ggml.tokens', GGUF_ARRAY, arr(GGUF_STRING, texts)),
        kv('tokenizer.ggml.token_type', GGUF_ARRAY, arr(GGUF_INT32, types)),
        kv('tokenizer.ggml.merges', GGUF_ARRAY, arr(GGUF_STRING, merges)),
    ]
    named = dict(x.split('=', 1) for x in a.special)
    for key, text in (('bos', '<bos>'), ('eos', '<eos>'), ('unknown', '<unk>'), ('padding', '<pad>')):
        text = named.get(key, text)
        if text in present:
            kvs.append(kv('tokenizer.ggml.%s_token_id' % key, GGUF_UINT32,
                          struct.pack('<I', texts.index(text))))
    if a.chat_template:
        with open(a.chat_template, encoding='utf-8') as f:
            kvs.append(kv('tokenizer.chat_template', GGUF_STRING, s(f.read())))
    with open(a.o, 'wb') as f:
        f.write(b'GGUF' + struct.pack('<IQQ', 3, 0, len(kvs)))
        for x in kvs:
            f.write(x)
    print('%s: %d tokens, %d merges, pre %s' % (a.o, len(texts), len(merges), a.pre))


if __name__ == '__main__':
    main()
