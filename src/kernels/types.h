/*
 * Weight and activation types: ggml's type ids (as stored in GGUF tensor
 * infos) and their block layouts.
 *
 * A row of n elements of type t is n / blck(t) blocks of size(t) bytes.
 * Block layouts (all little-endian, packed, f16 = IEEE half):
 *   Q8_0 (32):  f16 d; int8 qs[32]                      x = d * q
 *   Q4_0 (32):  f16 d; u8 qs[16]   low nibbles are x[0..15], high x[16..31]; x = d * (q - 8)
 *   Q5_0 (32):  f16 d; u8 qh[4]; u8 qs[16]   Q4_0's nibbles + a fifth bit each; x = d * (q - 16)
 *   Q5_1 (32):  f16 d, m; u8 qh[4]; u8 qs[16]   likewise; x = d * q + m
 *   IQ4_NL (32): f16 d; u8 qs[16]   Q4_0's nibbles, each an index into 16 fixed
 *               non-uniform levels L; x = d * L[q]
 *   MXFP4 (32): u8 e; u8 qs[16]   Q4_0's nibbles, each an E2M1 code; x = 2^(e - 128) * L[q],
 *               L the codes doubled (0, 1, 2, 3, 4, 6, 8, 12, then negated)
 *   Q8_K (256): f32 d; int8 qs[256]; int16 bsums[16]   (activations only; bsums = sums of 16)
 *   Q4_K (256): f16 d, dmin; u8 scales[12] (8 x 6-bit scale + 6-bit min); u8 qs[128]
 *   Q5_K (256): f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]
 *   Q6_K (256): u8 ql[128]; u8 qh[64]; int8 scales[16]; f16 d
 *   IQ4_XS (256): f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]   8 x IQ4_NL
 *               nibbles of 32 with 6-bit scales; x = d * (ls - 32) * L[q]
 *   Q3_K (256): u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d   16 x 16, q in -4..3,
 *               6-bit scales; x = d * (sc - 32) * q
 *   Q2_K (256): u8 scales[16] (4-bit scale | 4-bit min); u8 qs[64]; f16 d, dmin
 *               x = d * sc * q - dmin * m, q in 0..3
 * See ref.c for the exact bit placement; it is the ground truth.
 */
#ifndef IFL_KERNELS_TYPES_H
#define IFL_KERNELS_TYPES_H

#include <stddef.h>
#include <stdint.h>

enum ifl_type {
    IFL_TYPE_F32 = 0,
    IFL_TYPE_F16 = 1,
    IFL_TYPE_Q4_0 = 2,
    IFL_TYPE_Q4_1 = 3,
    IFL_TYPE_Q5_0 = 6,
    IFL_TYPE_Q5_1 = 7,
    IFL_TYPE_Q8_0 = 8,
    IFL_TYPE_Q8_1 = 9,
    IFL_TYPE_Q2_K = 10,
    IFL_TYPE_Q3_K = 11,
    IFL_TYPE_Q4_K = 12,
    IFL_TYPE_Q5_K = 13,
    IFL_TYPE_Q6_K = 14,
    IFL_TYPE_Q8_K = 15,
    IFL_TYPE_IQ2_XXS = 16,
    IFL_TYPE_IQ2_XS = 17,
    IFL_TYPE_IQ3_XXS = 18,
    IFL_TYPE_IQ1_S = 19,
    IFL_TYPE_IQ4_NL = 20,
    IFL_TYPE_IQ3_S = 21,
    IFL_TYPE_IQ2_S = 22,
    IFL_TYPE_IQ4_XS = 23,
    IFL_TYPE_I8 = 24,
    IFL_TYPE_I16 = 25,
    IFL_TYPE_I32 = 26,
    IFL_TYPE_I64 = 27,
    IFL_TYPE_F64 = 28,
    IFL_TYPE_IQ1_M = 29,
    IFL_TYPE_BF16 = 30,
    IFL_TYPE_TQ1_0 = 34,
    IFL_TYPE_TQ2_0 = 35,
    IFL_TYPE_MXFP4 = 39,
    IFL_TYPE_COUNT = 40
};

struct ifl_type_info {
    const char *name;  /* "q4_K", ... ; NULL for ids ggml never assigned */
    int64_t blck;      /* elements per block */
    size_t size;       /* bytes per block */
    int is_weight;     /* 1 if the kernels compute with it as a weight matrix */
    enum ifl_type act; /* for weight types: the format activation rows are converted to */
};

/* NULL when t is not a known ggml type id. */
const struct ifl_type_info *ifl_type_info(uint32_t t);
/* Bytes of a row of n elements; n must be a multiple of the block size. */
size_t ifl_type_row_size(enum ifl_type t, int64_t n);

#endif
