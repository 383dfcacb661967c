/*
 * 256-bit gemm over x16 groups (kernels.h) for the AVX2 table: Q8_0 and
 * Q4_0 weights against Q8_0 activations. The AVX-512 table replaces these
 * with its own (x86_avx512_gemm.c); on an AVX2-only CPU they are what a
 * model's matrices run through once the loader has repacked them.
 *
 * A 64-byte run of a block group holds four elements of each of 16 weight
 * rows; its two 32-byte halves are rows 0..7 and 8..15, one row per 32-bit
 * lane. AVX2 has no vpdpbusd: vpmaddubsw multiplies unsigned by signed
 * bytes and adds neighbouring products into 16-bit lanes (saturating), and
 * vpmaddwd with ones adds those pairs into the row's 32-bit lane.
 *
 * Q4_0 (ref.c: gemm_q4_0_x16): the nibbles are w + 8, unsigned, and meet
 * the four activations broadcast; a pair is at most 2 * 15 * 128 = 3840,
 * so a block's eight pairs of a lane (its 32 products per row) add up in
 * 16 bits without overflow and widen once a block. The offset returns
 * exactly as the start value -8 * (sum of the activation block).
 * Q8_0 (ref.c: gemm_q8_0_x16): the runs are stored w + 128; as bytes that
 * is w with its sign bit flipped. |w| (at most 128) meets the activation
 * with w's sign moved onto it (|x| <= 127 from quant_q8_0), so a pair is
 * at most 32512 and exact, and widens at every run.
 *
 * Per block, lane i of row r: acc += (float)isum * (d_i * d_x), blocks in
 * order as in ref (fused, so within the tests' tolerance of ref); an
 * output is a lane of its row's accumulator, with no horizontal sum.
 *
 * Batch invariance: an output gets the same instructions in the same
 * order whatever tile it falls in and however nr and nc are split; tiles
 * share only loads and the per-row and per-column set-up.
 */
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/blocks.h"
#include "kernels/impl.h"

#define AI static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 8")
#define FOR_R for (int r = 0; r < R; r++)

#define X16 16
#define XBS ((size_t)sizeof(struct ifl_block_q8_0))
/* Activation rows per tile: each keeps two float accumulators (rows 0..7
 * and 8..15 of the group) and one integer sum, and AVX2 has 16 registers. */
#define XR 4
#ifndef XR_Q4
#define XR_Q4 4
#endif
#ifndef XR_Q8
#define XR_Q8 3
#endif
#define XR_OF(q4) ((q4) ? XR_Q4 : XR_Q8)
/* Blocks per segment: the activation offsets and scales kept on the stack. */
#define SEG 256
/* Block groups prefetched ahead of the one a tile reads. */
#define X16_PF 8
/* Weight bytes of a column block, which stays in L2 (512 KiB on the Zen 3)
 * while every row tile passes over it. */
#define COL_BLOCK_BYTES (256 * 1024)

AI uint16_t ld_u16(const char *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return h;
}

/* The four bytes at p in every 32-bit lane. */
AI __m256i bc4(const char *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* Keeps the compiler from reassociating a chain of integer adds: it
 * turned a block's running sums into trees of partial sums, which took
 * more registers than AVX2 has and went to the stack. */
AI __m256i pin(__m256i v)
{
    __asm__("" : "+x"(v));
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

/* Blocks [0, nbs) of one group for R activation rows, added onto y
 * (zeroed first in the first segment). xoff: the Q4_0 offset terms; xd:
 * the activation blocks' scales. Each broadcast of four activations meets
 * both halves of its run, so a row keeps two integer sums in registers;
 * its float sums live in y, loaded and stored once a block (16 registers
 * hold no more: with them in registers too, the compiler spilled the
 * broadcasts, which cost more). */
AI void x16_tile(int q4, int R, int64_t nbs, const char *x, size_t xs, const int32_t (*xoff)[SEG],
                 const float (*xd)[SEG], const char *g, float *y, size_t ldy, int first, int pf)
{
    const size_t gbs = X16 * (q4 ? sizeof(struct ifl_block_q4_0) : sizeof(struct ifl_block_q8_0));
    const __m256i m4 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    if (first)
        UNROLL FOR_R UNROLL for (int h = 0; h < 2; h++)
            _mm256_storeu_ps(y + (size_t)r * ldy + 8 * h, _mm256_setzero_ps());
    for (int64_t b = 0; b < nbs; b++, g += gbs) {
        for (size_t l = 0; pf && l < gbs; l += 64)
            _mm_prefetch(g + X16_PF * gbs + l, _MM_HINT_T0);
        const char *xq[XR];
        UNROLL FOR_R xq[r] = x + (size_t)r * xs + (size_t)b * XBS + 2;
        __m256i is[XR][2];
        if (q4) {
            /* run k: low nibbles elements 4k .., high ones 16 + 4k .. */
            UNROLL for (int k = 0; k < 8; k++)
            {
                const char *run = g + 2 * X16 + 64 * (k & 3);
                __m256i z0 = _mm256_loadu_si256((const __m256i *)run);
                __m256i z1 = _mm256_loadu_si256((const __m256i *)(run + 32));
                if (k >= 4) {
                    z0 = _mm256_srli_epi16(z0, 4);
                    z1 = _mm256_srli_epi16(z1, 4);
                }
                z0 = _mm256_and_si256(z0, m4);
                z1 = _mm256_and_si256(z1, m4);
                UNROLL FOR_R
                {
                    __m256i a = bc4(xq[r] + (k >= 4 ? 16 : 0) + 4 * (k & 3));
                    __m256i p0 = _mm256_maddubs_epi16(z0, a), p1 = _mm256_maddubs_epi16(z1, a);
                    is[r][0] = pin(k ? _mm256_add_epi16(is[r][0], p0) : p0);
                    is[r][1] = pin(k ? _mm256_add_epi16(is[r][1], p1) : p1);
                }
            }
            UNROLL FOR_R UNROLL for (int h = 0; h < 2; h++) is[r][h] =
                _mm256_add_epi32(_mm256_madd_epi16(is[r][h], ones), _mm256_set1_epi32(xoff[r][b]));
        } else {
            UNROLL for (int k = 0; k < 8; k++)
            {
                const char *run = g + 2 * X16 + 64 * k;
                __m256i w0 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)run), _mm256_set1_epi8(-128));
                __m256i w1 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(run + 32)),
                                              _mm256_set1_epi8(-128));
                __m256i a0 = _mm256_abs_epi8(w0), a1 = _mm256_abs_epi8(w1);
                UNROLL FOR_R
                {
                    __m256i a = bc4(xq[r] + 4 * k);
                    __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(a0, _mm256_sign_epi8(a, w0)), ones);
                    __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(a1, _mm256_sign_epi8(a, w1)), ones);
                    is[r][0] = pin(k ? _mm256_add_epi32(is[r][0], p0) : p0);
                    is[r][1] = pin(k ? _mm256_add_epi32(is[r][1], p1) : p1);
                }
            }
        }
        UNROLL for (int h = 0; h < 2; h++)
        {
            const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 16 * h)));
            UNROLL FOR_R
            {
                float *yr = y + (size_t)r * ldy + 8 * h;
                _mm256_storeu_ps(yr, _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[r][h]),
                                                     _mm256_mul_ps(d, _mm256_set1_ps(xd[r][b])),
                                                     _mm256_loadu_ps(yr)));
            }
        }
    }
}

#define X16_CASE(R)                                                                                \
    case R:                                                                                        \
        if (R <= XR_OF(kind))                                                                      \
            x16_tile(kind, R, nbs, xp, xs, xo, xds, wp, yp, ldy, s0 == 0, pf);                         \
        break;
#define X16_SWITCH                                                                                 \
    switch (R) {                                                                                   \
        X16_CASE(1) X16_CASE(2) X16_CASE(3) X16_CASE(4)                                           \
    default:                                                                                       \
        break;                                                                                     \
    }

/* The activation offset terms and scales of blocks [s0, s0 + nbs) of rows
 * [0, nr) (kind 0 Q8_0, 1 Q4_0), for the x16 tiles. */
AI void x16_sums(int kind, int nr, int64_t s0, int64_t nbs, const char *x, size_t xs,
                 int32_t (*xoff)[SEG], float (*xd)[SEG])
{
    for (int r = 0; r < nr; r++)
        for (int64_t b = 0; b < nbs; b++) {
            const char *xb = x + (size_t)r * xs + (size_t)(s0 + b) * XBS;
            xoff[r][b] = kind == 1 ? -8 * q8_qsum(xb + 2) : 0;
            xd[r][b] = _cvtsh_ss(ld_u16(xb));
        }
}

/* Groups in column blocks sized for L2; inside, row tiles of XR; inside,
 * segments of SEG blocks, whose activation offsets and scales are taken
 * once for all the block's groups. A call of at most 16 rows (a decode)
 * walks the groups once instead: every row tile takes a group's segment
 * in turn, the later ones from cache and without prefetching. Every output
 * sums its blocks in the same order either way. */
AI void x16_gemm(int kind, int64_t n, int nr, int nc, const void *x, size_t xs, const void *w,
                 size_t ws, float *y, size_t ldy)
{
    const int64_t nb = n / IFL_QK, ng = nc / X16;
    const int xr = XR_OF(kind);
    const size_t gb = X16 * ws;         /* bytes of a group */
    const size_t gbs = gb / (size_t)nb; /* bytes of a block group */
    const int64_t cbg = gb < COL_BLOCK_BYTES ? (int64_t)(COL_BLOCK_BYTES / gb) : 1;
    int32_t xoff[4 * XR][SEG];
    float xd[4 * XR][SEG];
    if (nr <= 4 * XR) {
        for (int64_t s0 = 0; s0 < nb; s0 += SEG) {
            int64_t nbs = nb - s0 < SEG ? nb - s0 : SEG;
            x16_sums(kind, nr, s0, nbs, (const char *)x, xs, xoff, xd);
            for (int64_t gi = 0; gi < ng; gi++)
                for (int r0 = 0; r0 < nr; r0 += xr) {
                    const int R = nr - r0 < xr ? nr - r0 : xr, pf = r0 == 0;
                    const char *xp = (const char *)x + (size_t)r0 * xs + (size_t)s0 * XBS;
                    const char *wp = (const char *)w + (size_t)gi * gb + (size_t)s0 * gbs;
                    float *yp = y + (size_t)r0 * ldy + (size_t)gi * X16;
                    const int32_t(*xo)[SEG] = xoff + r0;
                    const float(*xds)[SEG] = xd + r0;
                    X16_SWITCH
                }
        }
        return;
    }
    for (int64_t g0 = 0; g0 < ng; g0 += cbg) {
        int64_t g1 = ng - g0 < cbg ? ng : g0 + cbg;
        for (int r0 = 0; r0 < nr; r0 += xr) {
            const int R = nr - r0 < xr ? nr - r0 : xr, pf = 1;
            for (int64_t s0 = 0; s0 < nb; s0 += SEG) {
                int64_t nbs = nb - s0 < SEG ? nb - s0 : SEG;
                const char *xp = (const char *)x + (size_t)r0 * xs + (size_t)s0 * XBS;
                x16_sums(kind, R, 0, nbs, xp, xs, xoff, xd);
                for (int64_t gi = g0; gi < g1; gi++) {
                    const char *wp = (const char *)w + (size_t)gi * gb + (size_t)s0 * gbs;
                    float *yp = y + (size_t)r0 * ldy + (size_t)gi * X16;
                    const int32_t(*xo)[SEG] = xoff;
                    const float(*xds)[SEG] = xd;
                    X16_SWITCH
                }
            }
        }
    }
}

static void y_gemm_q8_0_x16(int64_t n, int nr, int nc, const void *x, size_t xs, const void *w,
                            size_t ws, float *y, size_t ldy)
{
    x16_gemm(0, n, nr, nc, x, xs, w, ws, y, ldy);
}

static void y_gemm_q4_0_x16(int64_t n, int nr, int nc, const void *x, size_t xs, const void *w,
                            size_t ws, float *y, size_t ldy)
{
    x16_gemm(1, n, nr, nc, x, xs, w, ws, y, ldy);
}

void ifl_kernels_fill_avx2_gemm(struct ifl_kernels *k)
{
    k->gemm_x16[IFL_TYPE_Q8_0] = y_gemm_q8_0_x16;
    k->gemm_x16[IFL_TYPE_Q4_0] = y_gemm_q4_0_x16;
    k->x16_pays[IFL_TYPE_Q8_0] = 1;
    k->x16_pays[IFL_TYPE_Q4_0] = 1;
}
