/*
 * Block structs of the quantised formats, laid out byte for byte as ggml's
 * (see types.h for the summary). Internal to src/kernels and its tests.
 * Every struct's size is checked against ggml's at compile time; f16
 * fields are raw IEEE half bits.
 */
#ifndef IFL_KERNELS_BLOCKS_H
#define IFL_KERNELS_BLOCKS_H

#include <stdint.h>

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
