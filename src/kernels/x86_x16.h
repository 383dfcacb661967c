/*
 * What the two x16 gemm files share (x86_avx2_gemm.c, x86_avx512_x16.c):
 * loads of unaligned scalars (x86_avx512_gemm.c takes those too), and the
 * per-block activation terms of the Q8_0 / Q4_0 tiles. Uses AVX2 only, so
 * all of them may include it.
 */
#ifndef IFL_KERNELS_X86_X16_H
#define IFL_KERNELS_X86_X16_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/blocks.h"
#include "kernels/kernels.h"

#define AI static inline __attribute__((always_inline))

/* Activation blocks a Q8_0 / Q4_0 gemm takes its terms for at once (kept
 * on the stack: 16 KiB for 16 rows). A column block is walked segment by
 * segment, so a group's weights are one stream only when its row fits in
 * a segment: 256 blocks take tinyllama's 5632-wide down rows whole (128
 * took them in two passes, the prefetchers finding a new stream at each
 * group's second half). On the Zen 5, alternating builds, one-row Q4_0
 * 5632 x 16384 from memory (kbench): pair ratios 0.90-1.74, median 1.08;
 * tinyllama Q4_0 decode level to +5 % (medians of 8 pairs, twice);
 * prompts level. */
#define X16_SEG 256

AI uint16_t ld_u16(const char *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return h;
}

AI float ld_f32(const char *p)
{
    float v;
    memcpy(&v, p, 4);
    return v;
}

/* The sum of a Q8_0 activation block's 32 quants (qs at p). */
AI int32_t q8_qsum(const char *p)
{
    __m256i v = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)p), _mm256_set1_epi8(-128));
    __m256i s = _mm256_sad_epu8(v, _mm256_setzero_si256()); /* sums of (q + 128), 8 at a time */
    __m128i t = _mm_add_epi64(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    t = _mm_add_epi64(t, _mm_unpackhi_epi64(t, t));
    return _mm_cvtsi128_si32(t) - 32 * 128;
}

/* For blocks [s0, s0 + nbs) of Q8_0 activation rows [0, nr) (x, xs bytes
 * apart): xoff = -off * (the sum of the block's quants), the exact start
 * value that takes back a weight offset off (0: none), and xd = the
 * block's scale. */
AI void x16_sums(int off, int nr, int64_t s0, int64_t nbs, const char *x, size_t xs,
                 int32_t (*xoff)[X16_SEG], float (*xd)[X16_SEG])
{
    for (int r = 0; r < nr; r++)
        for (int64_t b = 0; b < nbs; b++) {
            const char *xb = x + (size_t)r * xs + (size_t)(s0 + b) * sizeof(struct ifl_block_q8_0);
            xoff[r][b] = off ? -off * q8_qsum(xb + 2) : 0;
            xd[r][b] = _cvtsh_ss(ld_u16(xb));
        }
}

/* Sets a table's x16 gemm of F16, Q8_0, Q4_0, Q4_K, Q5_K and Q6_K (in that
 * order), each one paying: the loader repacks these types. */
static inline void x16_fill(struct ifl_kernels *k, const ifl_gemm_fn fn[6])
{
    static const enum ifl_type t[6] = {IFL_TYPE_F16,  IFL_TYPE_Q8_0, IFL_TYPE_Q4_0,
                                       IFL_TYPE_Q4_K, IFL_TYPE_Q5_K, IFL_TYPE_Q6_K};
    for (int i = 0; i < 6; i++) {
        k->gemm_x16[t[i]] = fn[i];
        k->x16_pays[t[i]] = 1;
    }
}

#endif
