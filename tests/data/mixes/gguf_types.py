#!/usr/bin/env python3
# Prints "NAME TYPE" for every tensor of a GGUF file, sorted by name (ggml's
# type names). Used by gen.sh on llama-quantize's outputs; standard library only.
import struct
import sys

TYPES = {0: "f32", 1: "f16", 2: "q4_0", 3: "q4_1", 6: "q5_0", 7: "q5_1", 8: "q8_0",
         10: "q2_K", 11: "q3_K", 12: "q4_K", 13: "q5_K", 14: "q6_K", 20: "iq4_nl",
         23: "iq4_xs", 30: "bf16"}
SCALAR = {0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8}


def main(path):
    with open(path, "rb") as f:
        d = f.read()
    off = 0

    def rd(fmt):
        nonlocal off
        v = struct.unpack_from("<" + fmt, d, off)
        off += struct.calcsize("<" + fmt)
        return v

    def rstr():
        nonlocal off
        (n,) = rd("Q")
        s = d[off:off + n].decode()
        off += n
        return s

    def skip(t):
        nonlocal off
        if t == 8:
            rstr()
        elif t == 9:
            (et,) = rd("I")
            (n,) = rd("Q")
            for _ in range(n):
                skip(et)
        else:
            off += SCALAR[t]

    magic, _version, n_tensors, n_kv = rd("4sIQQ")
    if magic != b"GGUF":
        sys.exit("%s: not a GGUF file" % path)
    for _ in range(n_kv):
        rstr()
        (t,) = rd("I")
        skip(t)
    out = []
    for _ in range(n_tensors):
        name = rstr()
        (nd,) = rd("I")
        rd("Q" * nd)
        (ty,) = rd("I")
        rd("Q")
        out.append((name, TYPES.get(ty, "type%d" % ty)))
    for name, ty in sorted(out):
        print(name, ty)


main(sys.argv[1])
