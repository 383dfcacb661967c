#!/usr/bin/env python3
"""Writes the seed corpus of tests/fuzz/fuzz_image.c into the directory
given (tests/fuzz/corpus/fuzz_image): PNG files of every colour type and
bit depth, interlaced and not, made here with zlib; baseline, progressive
and greyscale JPEG made by Debian's cjpeg (libjpeg-turbo-progs) from PPM
and PGM files written here; and broken ones (truncated, a bad chunk, a
zero size, a huge claimed size)."""
import os
import struct
import subprocess
import sys
import tempfile
import zlib

out = sys.argv[1]
os.makedirs(out, exist_ok=True)


def chunk(t, d):
    return struct.pack(">I", len(d)) + t + d + struct.pack(">I", zlib.crc32(t + d) & 0xFFFFFFFF)


def channels(ct):
    return {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}[ct]


def scanlines(w, h, ct, depth, x0=0, dx=1, y0=0, dy=1):
    """filtered rows (filter type by row) of the pixels at x0 + k dx, y0 + k dy"""
    rows = []
    nch = channels(ct)
    for y in range(y0, h, dy):
        vals = []
        for x in range(x0, w, dx):
            for c in range(nch):
                v = (x * 37 + y * 11 + c * 91) % (1 << depth)
                if ct == 3:
                    v %= 4  # palette of 4
                vals.append(v)
        if not vals:
            continue
        if depth < 8:
            bits = "".join(format(v, "0%db" % depth) for v in vals)
            bits += "0" * (-len(bits) % 8)
            raw = bytes(int(bits[i:i + 8], 2) for i in range(0, len(bits), 8))
        elif depth == 8:
            raw = bytes(vals)
        else:
            raw = b"".join(struct.pack(">H", v) for v in vals)
        rows.append(bytes([len(rows) % 5 if depth >= 8 else 0]) + raw)
    return rows


def unfilter_free(rows, bpp):
    """apply the filters named in each row so that decoding undoes them"""
    out_rows, prev = [], None
    for r in rows:
        f, data = r[0], bytearray(r[1:])
        enc = bytearray(len(data))
        for i in range(len(data)):
            a = data[i - bpp] if i >= bpp else 0
            b = prev[i] if prev is not None else 0
            c = prev[i - bpp] if prev is not None and i >= bpp else 0
            if f == 0:
                p = 0
            elif f == 1:
                p = a
            elif f == 2:
                p = b
            elif f == 3:
                p = (a + b) // 2
            else:
                pa, pb, pc = abs(b - c), abs(a - c), abs(a + b - 2 * c)
                p = a if pa <= pb and pa <= pc else (b if pb <= pc else c)
            enc[i] = (data[i] - p) & 0xFF
        out_rows.append(bytes([f]) + bytes(enc))
        prev = data
    return b"".join(out_rows)


def png(w, h, ct, depth, interlace=False):
    bpp = max(1, channels(ct) * depth // 8)
    if interlace:
        passes = [(0, 8, 0, 8), (4, 8, 0, 8), (0, 4, 4, 8), (2, 4, 0, 4), (0, 2, 2, 4),
                  (1, 2, 0, 2), (0, 1, 1, 2)]
        data = b"".join(unfilter_free(scanlines(w, h, ct, depth, *p), bpp) for p in passes)
    else:
        data = unfilter_free(scanlines(w, h, ct, depth), bpp)
    ihdr = struct.pack(">IIBBBBB", w, h, depth, ct, 0, 0, 1 if interlace else 0)
    body = chunk(b"IHDR", ihdr)
    if ct == 3:
        body += chunk(b"PLTE", bytes([0, 0, 0, 255, 0, 0, 0, 255, 0, 0, 0, 255]))
    return b"\x89PNG\r\n\x1a\n" + body + chunk(b"IDAT", zlib.compress(data)) + chunk(b"IEND", b"")


files = {}
for ct, depths in ((0, (1, 2, 4, 8, 16)), (2, (8, 16)), (3, (1, 2, 4, 8)), (4, (8, 16)),
                   (6, (8, 16))):
    for d in depths:
        files["png_ct%d_d%d" % (ct, d)] = png(13, 7, ct, d)
files["png_adam7_rgb"] = png(17, 11, 2, 8, True)
files["png_adam7_grey4"] = png(9, 9, 0, 4, True)
files["png_1x1"] = png(1, 1, 2, 8)
good = files["png_ct2_d8"]
files["png_truncated"] = good[:len(good) // 2]
files["png_zero_width"] = good[:16] + b"\0\0\0\0" + good[20:]
files["png_huge_claim"] = good[:16] + struct.pack(">II", 8192, 8192) + good[24:]
files["png_bad_idat"] = good[:45] + bytes(b ^ 0x5A for b in good[45:-12]) + good[-12:]

with tempfile.TemporaryDirectory() as t:
    w, h = 24, 16
    ppm = b"P6\n%d %d\n255\n" % (w, h) + bytes((x * 9 + c * 80 + y * 5) % 256
                                              for y in range(h) for x in range(w) for c in range(3))
    pgm = b"P5\n%d %d\n255\n" % (w, h) + bytes((x * 9 + y * 5) % 256 for y in range(h)
                                              for x in range(w))
    open(os.path.join(t, "a.ppm"), "wb").write(ppm)
    open(os.path.join(t, "a.pgm"), "wb").write(pgm)
    for name, src, args in (("jpeg_baseline", "a.ppm", []),
                            ("jpeg_progressive", "a.ppm", ["-progressive"]),
                            ("jpeg_grey", "a.pgm", []),
                            ("jpeg_444", "a.ppm", ["-sample", "1x1"])):
        files[name] = subprocess.run(["cjpeg", "-quality", "90"] + args + [os.path.join(t, src)],
                                     check=True, capture_output=True).stdout
jpg = files["jpeg_baseline"]
files["jpeg_truncated"] = jpg[:len(jpg) * 2 // 3]
files["not_an_image"] = b"GIF89a\x01\x00\x01\x00"
for name, data in files.items():
    open(os.path.join(out, name), "wb").write(data)
print("%d files in %s" % (len(files), out))
