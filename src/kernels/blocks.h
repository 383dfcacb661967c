/*
 * Block structs of the quantised formats, laid out byte for byte as ggml's
 * (see types.h for the summary). Internal to src/kernels and its tests.
 * Every struct's size is checked against ggml's at compile time; f16
 * fields are raw IEEE half bits.
 */
#ifndef IFL_KERNELS_BLOCKS_H
#define IFL_KERNELS_BLOCKS_H

#include <stdint.h>
#include <string.h>

#define IFL_QK 32    /* elements per Q8_0 / Q4_0 block */
#define IFL_QK_K 256 /* elements per K-quant super-block */

struct ifl_block_q8_0 {
    uint16_t d;        /* f16 scale */
    int8_t qs[IFL_QK]; /* x = d * q */
};

struct ifl_block_q4_0 {
    uint16_t d;             /* f16 scale */
    uint8_t qs[IFL_QK / 2]; /* low nibble of byte j: element j; high: element j + 16 */
};

/* Q8_K: activations for K-quant weights. bsums[j] = sum of qs[16j .. 16j+15]. */
struct ifl_block_q8_k {
    float d;
    int8_t qs[IFL_QK_K];
    int16_t bsums[IFL_QK_K / 16];
};

/* Q4_K: 8 sub-blocks of 32; x = d * sc[j] * q - dmin * m[j], q in 0..15.
 * scales[12] packs eight 6-bit sc and eight 6-bit m:
 *   j < 4:  sc[j] = scales[j] & 63, m[j] = scales[j + 4] & 63
 *   j >= 4: sc[j] = (scales[j + 4] & 15) | (scales[j - 4] >> 6) << 4
 *           m[j]  = (scales[j + 4] >> 4) | (scales[j] >> 6) << 4
 * qs: 4 chunks of 32 bytes; chunk k holds sub-block 2k in its low nibbles and
 * sub-block 2k + 1 in its high nibbles. */
struct ifl_block_q4_k {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qs[IFL_QK_K / 2];
};

/* Q5_K: as Q4_K plus a fifth bit: element l of sub-block j has high bit
 * (qh[l] >> j) & 1, so q = nibble | bit << 4 in 0..31. */
struct ifl_block_q5_k {
    uint16_t d, dmin;
    uint8_t scales[12];
    uint8_t qh[IFL_QK_K / 8];
    uint8_t qs[IFL_QK_K / 2];
};

/* Q6_K: 16 sub-blocks of 16, x = d * scales[j] * (q - 32), q in 0..63.
 * Per half h (128 elements; ql + 64h, qh + 32h), for l < 32:
 *   element      l: ql[l]      & 15 | (qh[l] >> 0 & 3) << 4
 *   element 32 + l: ql[l + 32] & 15 | (qh[l] >> 2 & 3) << 4
 *   element 64 + l: ql[l]      >> 4 | (qh[l] >> 4 & 3) << 4
 *   element 96 + l: ql[l + 32] >> 4 | (qh[l] >> 6 & 3) << 4
 * and element e of the block uses scales[e / 16]. */
struct ifl_block_q6_k {
    uint8_t ql[IFL_QK_K / 2];
    uint8_t qh[IFL_QK_K / 4];
    int8_t scales[IFL_QK_K / 16];
    uint16_t d;
};

_Static_assert(sizeof(struct ifl_block_q8_0) == 34, "q8_0 layout");
_Static_assert(sizeof(struct ifl_block_q4_0) == 18, "q4_0 layout");
_Static_assert(sizeof(struct ifl_block_q8_k) == 292, "q8_K layout");
_Static_assert(sizeof(struct ifl_block_q4_k) == 144, "q4_K layout");
_Static_assert(sizeof(struct ifl_block_q5_k) == 176, "q5_K layout");
_Static_assert(sizeof(struct ifl_block_q6_k) == 210, "q6_K layout");

/* Q5_0: 32 elements, x = d * (q - 16), q in 0..31. The low four bits are
 * packed as Q4_0's (byte j: element j low, element j + 16 high); bit k of
 * the little-endian word qh is the fifth bit of element k. */
struct ifl_block_q5_0 {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[IFL_QK / 2];
};

/* Q5_1: as Q5_0 but affine: x = d * q + m, q in 0..31. */
struct ifl_block_q5_1 {
    uint16_t d, m;
    uint8_t qh[4];
    uint8_t qs[IFL_QK / 2];
};

/* IQ4_NL: 32 elements, nibbles packed as Q4_0's, each an index into a
 * fixed table of 16 non-uniform levels (ifl_iq4nl_levels): x = d * level. */
struct ifl_block_iq4_nl {
    uint16_t d;
    uint8_t qs[IFL_QK / 2];
};

/* IQ4_XS: 256 elements, 8 sub-blocks of 32 with IQ4_NL's levels. Sub-block
 * j has a 6-bit scale ls (low four bits: nibble j % 2 of scales_l[j / 2];
 * high two: bits 2j, 2j + 1 of scales_h) and x = d * (ls - 32) * level; its
 * nibbles are the 16 bytes qs + 16j, packed as Q4_0's. */
struct ifl_block_iq4_xs {
    uint16_t d;
    uint16_t scales_h;
    uint8_t scales_l[IFL_QK_K / 64];
    uint8_t qs[IFL_QK_K / 2];
};

/* Q2_K and Q3_K share one placement of 2-bit quants: element
 * e = 128h + 32k + 16g + l (h, g < 2, k < 4, l < 16) is bits 2k, 2k + 1 of
 * qs[32h + 16g + l], and belongs to sub-block s = 8h + 2k + g (16 of 16).
 *
 * Q2_K: x = d * (scales[s] & 15) * q - dmin * (scales[s] >> 4), q in 0..3. */
struct ifl_block_q2_k {
    uint8_t scales[IFL_QK_K / 16];
    uint8_t qs[IFL_QK_K / 4];
    uint16_t d, dmin;
};

/* Q3_K: a third bit per element, bit 4h + k of hmask[16g + l]; with it
 * clear the value is q - 4, else q (so -4..3). x = d * (sc[s] - 32) * value,
 * sc 6-bit from scales[12] (ifl_q3k_scale). */
struct ifl_block_q3_k {
    uint8_t hmask[IFL_QK_K / 8];
    uint8_t qs[IFL_QK_K / 4];
    uint8_t scales[12];
    uint16_t d;
};

/* MXFP4 (OCP microscaling FP4): 32 elements, nibbles packed as Q4_0's,
 * each an E2M1 code (sign, two exponent bits, one mantissa bit: 0, 0.5, 1,
 * 1.5, 2, 3, 4, 6 and their negatives), and one E8M0 scale byte e, 2^(e -
 * 127). ggml keeps the codes doubled as integers (ifl_mxfp4_levels) and
 * halves the scale: x = ifl_e8m0_half(e) * level. */
struct ifl_block_mxfp4 {
    uint8_t e;
    uint8_t qs[IFL_QK / 2];
};

_Static_assert(sizeof(struct ifl_block_q5_0) == 22, "q5_0 layout");
_Static_assert(sizeof(struct ifl_block_mxfp4) == 17, "mxfp4 layout");
_Static_assert(sizeof(struct ifl_block_q5_1) == 24, "q5_1 layout");
_Static_assert(sizeof(struct ifl_block_iq4_nl) == 18, "iq4_nl layout");
_Static_assert(sizeof(struct ifl_block_iq4_xs) == 136, "iq4_xs layout");
_Static_assert(sizeof(struct ifl_block_q2_k) == 84, "q2_K layout");
_Static_assert(sizeof(struct ifl_block_q3_k) == 110, "q3_K layout");

/* IQ4_NL's and IQ4_XS's 16 levels (ggml's kvalues_iq4nl): denser near 0. */
static const int8_t ifl_iq4nl_levels[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

/* MXFP4's E2M1 codes times two (ggml's kvalues_mxfp4): code 8 is -0. */
static const int8_t ifl_mxfp4_levels[16] = {0, 1,  2,  3,  4,  6,  8,  12,
                                            0, -1, -2, -3, -4, -6, -8, -12};

/* Half of the E8M0 scale e, 2^(e - 128), exactly, as ggml's
 * GGML_E8M0_TO_FP32_HALF: subnormal for e < 2; e = 255 gives 2^127 (no
 * NaN). */
static inline float ifl_e8m0_half(uint8_t e)
{
    uint32_t b = e < 2 ? 0x00200000u << e : (uint32_t)(e - 1) << 23;
    float f;
    memcpy(&f, &b, 4);
    return f;
}

/* Q3_K's 6-bit scale of sub-block j (0..15): the low four bits are the
 * low (j < 8) or high (j >= 8) nibble of scales[j % 8], the high two are
 * bits 2 (j / 4), +1 of scales[8 + j % 4]. */
static inline int ifl_q3k_scale(const uint8_t *s, int j)
{
    int lo = j < 8 ? s[j] & 15 : s[j - 8] >> 4;
    return lo | ((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4;
}

/* IQ4_XS's 6-bit scale of sub-block j (0..7). */
static inline int ifl_iq4xs_scale(const struct ifl_block_iq4_xs *b, int j)
{
    return ((b->scales_l[j / 2] >> (4 * (j % 2))) & 15) | ((b->scales_h >> (2 * j)) & 3) << 4;
}

/* The 6-bit scale and min of sub-block j (0..7) of a Q4_K / Q5_K block. */
static inline void ifl_k4_scale_min(const uint8_t *s, int j, uint8_t *sc, uint8_t *m)
{
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (uint8_t)((s[j + 4] & 15) | (s[j - 4] >> 6) << 4);
        *m = (uint8_t)((s[j + 4] >> 4) | (s[j] >> 6) << 4);
    }
}

#endif
