/*
 * 256-bit gemm over x16 groups (kernels.h) of the newer 32-element types,
 * Q5_0, Q5_1, IQ4_NL and MXFP4 against Q8_0 activations, for the AVX2
 * table: the Q8_0 / Q4_0 tiles of x86_avx2_gemm.c, with these types'
 * quants. The AVX-512 table has its own (x86_avx512_x16.c). Must equal
 * ref.c's gemm_q5_0_x16, gemm_q5_1_x16, gemm_iq4_nl_x16 and
 * gemm_mxfp4_x16 within the tests' tolerance (the integer dot of a block
 * exactly; the float sums fused).
 *
 * A 64-byte run of a block group holds four elements of each of 16 rows,
 * rows 0..7 in its first 32 bytes and 8..15 in the second, one row per
 * 32-bit lane; runs 0..3 are the low nibbles (elements 4k .. 4k + 3),
 * runs 4..7 the high ones (elements 16 + 4(k - 4) ..).
 *
 * Q5_0 / Q5_1: the nibble gets 16 where the row's fifth bit is set: the
 * four bits of a run's elements are four bits of one byte of the row's qh
 * word, which vpshufb copies to the lane's four bytes, and a compare of
 * each byte against its own bit makes the mask of the bytes that get 16.
 * The quant (0..31) meets the activation (|x| <= 127) in vpmaddubsw, a
 * pair at most 7874, widened to 32 bits at every run by vpmaddwd. Q5_0's
 * -16 comes back exactly as the start value -16 * (sum of the activation
 * block); Q5_1's m as m d_x * (that sum), added after d d_x * isum, as
 * ref's dot_q5_1 adds them.
 * IQ4_NL: vpshufb of a table turns each nibble into its level (signed,
 * -127 .. 113); as for Q8_0, |level| meets the activation with the level's
 * sign moved onto it (a pair at most 32258, exact).
 * MXFP4: IQ4_NL's path with its doubled E2M1 codes (-12 .. 12) for levels;
 * its group starts with the 16 rows' E8M0 bytes (one each, not an F16
 * pair), the nibbles after them; a row's scale is 2^(e - 128) as
 * ifl_e8m0_half gives it: exponent field e - 1, or the subnormal
 * 0x00200000 << e for e < 2.
 *
 * Per block, lane i of row r: y += (float)isum * (d_i * d_x) in an FMA,
 * blocks in order; each output the same instructions in the same order
 * whatever tile and call it falls in (batch invariance).
 */
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/blocks.h"
#include "kernels/impl.h"
#include "kernels/x86_x16.h"

#define UNROLL _Pragma("GCC unroll 8")
#define FOR_R for (int r = 0; r < R; r++)

#define X16 16
#define XBS ((size_t)sizeof(struct ifl_block_q8_0))
#define XR 3 /* activation rows per tile: two 32-bit sums each, and the weights */
#define SEG X16_SEG
#define X16_PF 8         /* block groups prefetched ahead, as x86_avx2_gemm.c */
#define NEAR_ROWS 2      /* a call of at most this many rows waits on memory... */
#define X16_PF_NEAR 1152 /* ...and prefetches this many bytes ahead */
#define COL_BLOCK_BYTES (256 * 1024)

enum { K_Q5_0, K_Q5_1, K_IQ4_NL, K_MXFP4 };

AI size_t block_bytes(int kind)
{
    return kind == K_Q5_0    ? sizeof(struct ifl_block_q5_0)
           : kind == K_Q5_1  ? sizeof(struct ifl_block_q5_1)
           : kind == K_MXFP4 ? sizeof(struct ifl_block_mxfp4)
                             : sizeof(struct ifl_block_iq4_nl);
}

/* Eight rows' half scales from their E8M0 bytes at g (ifl_e8m0_half). */
AI __m256 e8m0_half8(const char *g)
{
    const __m256i e = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)g));
    const __m256i norm = _mm256_slli_epi32(_mm256_sub_epi32(e, _mm256_set1_epi32(1)), 23);
    const __m256i sub = _mm256_sllv_epi32(_mm256_set1_epi32(0x00200000), e);
    const __m256i small = _mm256_cmpgt_epi32(_mm256_set1_epi32(2), e);
    return _mm256_castsi256_ps(_mm256_blendv_epi8(norm, sub, small));
}

/* The offset x16_sums folds into the start value: Q5_0's 16; -1 makes it
 * + (sum of the quants), Q5_1's xsum; IQ4_NL has none. */
AI int kind_off(int kind)
{
    return kind == K_Q5_0 ? 16 : kind == K_Q5_1 ? -1 : 0;
}

/* The four bytes at p in every 32-bit lane. */
AI __m256i bc4(const char *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* Keeps the compiler from reassociating a chain of adds (x86_avx2_gemm.c). */
AI __m256i pin(__m256i v)
{
    __asm__("" : "+x"(v));
    return v;
}

/* z (quants 0..15 of run k) + 16 where the fifth bit is set in qh, the
 * rows' qh words one a lane. Run k's elements e0 .. e0 + 3 (e0 = 4k, or
 * 16 + 4(k - 4)) are bits e0 % 8 .. of byte e0 / 8. */
AI __m256i q5_high(__m256i z, __m256i qh, int k)
{
    const int e0 = k < 4 ? 4 * k : 16 + 4 * (k - 4), byte = e0 / 8, sh = e0 % 8;
    const __m256i pick =
        _mm256_setr_epi32(byte * 0x01010101, (4 + byte) * 0x01010101, (8 + byte) * 0x01010101,
                          (12 + byte) * 0x01010101, byte * 0x01010101, (4 + byte) * 0x01010101,
                          (8 + byte) * 0x01010101, (12 + byte) * 0x01010101);
    const __m256i bits = _mm256_set1_epi32((int)(0x08040201u << sh));
    __m256i t = _mm256_and_si256(_mm256_shuffle_epi8(qh, pick), bits);
    t = _mm256_cmpeq_epi8(t, bits);
    return _mm256_or_si256(z, _mm256_and_si256(t, _mm256_set1_epi8(16)));
}

/* Blocks [0, nbs) of one group for R activation rows, added onto y
 * (zeroed first in the first segment); xoff, xd: x16_sums' terms for the
 * kind's offset; pf: bytes ahead to prefetch, or 0. */
AI void q_tile(int kind, int R, int64_t nbs, const char *x, size_t xs, const int32_t (*xoff)[SEG],
               const float (*xd)[SEG], const char *g, float *y, size_t ldy, int first, size_t pf)
{
    const size_t gbs = X16 * block_bytes(kind);
    const size_t qh_off = kind == K_Q5_1 ? 4 * X16 : 2 * X16;
    const size_t qs_off = kind == K_MXFP4 ? X16 : kind == K_IQ4_NL ? 2 * X16 : qh_off + 64;
    const int lut = kind == K_IQ4_NL || kind == K_MXFP4; /* levels by table */
    const __m256i m4 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    const __m256i lv = _mm256_broadcastsi128_si256(
        _mm_loadu_si128((const __m128i *)(kind == K_MXFP4 ? ifl_mxfp4_levels : ifl_iq4nl_levels)));
    if (first)
        UNROLL FOR_R UNROLL for (int h = 0; h < 2; h++)
            _mm256_storeu_ps(y + (size_t)r * ldy + 8 * h, _mm256_setzero_ps());
    for (int64_t b = 0; b < nbs; b++, g += gbs) {
        for (size_t l = 0; pf && l < gbs; l += 64)
            _mm_prefetch(g + pf + l, _MM_HINT_T0);
        const char *xq[XR];
        UNROLL FOR_R xq[r] = x + (size_t)r * xs + (size_t)b * XBS + 2;
        __m256i is[XR][2];
        UNROLL FOR_R UNROLL for (int h = 0; h < 2; h++) is[r][h] =
            _mm256_set1_epi32(kind == K_Q5_0 ? xoff[r][b] : 0);
        __m256i qh0 = _mm256_setzero_si256(), qh1 = qh0;
        if (!lut) {
            qh0 = _mm256_loadu_si256((const __m256i *)(g + qh_off));
            qh1 = _mm256_loadu_si256((const __m256i *)(g + qh_off + 32));
        }
        UNROLL for (int k = 0; k < 8; k++)
        {
            const char *run = g + qs_off + 64 * (k & 3);
            __m256i z0 = _mm256_loadu_si256((const __m256i *)run);
            __m256i z1 = _mm256_loadu_si256((const __m256i *)(run + 32));
            if (k >= 4) {
                z0 = _mm256_srli_epi16(z0, 4);
                z1 = _mm256_srli_epi16(z1, 4);
            }
            z0 = _mm256_and_si256(z0, m4);
            z1 = _mm256_and_si256(z1, m4);
            if (lut) {
                const __m256i w0 = _mm256_shuffle_epi8(lv, z0), w1 = _mm256_shuffle_epi8(lv, z1);
                const __m256i a0 = _mm256_abs_epi8(w0), a1 = _mm256_abs_epi8(w1);
                UNROLL FOR_R
                {
                    __m256i a = bc4(xq[r] + (k >= 4 ? 16 : 0) + 4 * (k & 3));
                    __m256i p0 =
                        _mm256_madd_epi16(_mm256_maddubs_epi16(a0, _mm256_sign_epi8(a, w0)), ones);
                    __m256i p1 =
                        _mm256_madd_epi16(_mm256_maddubs_epi16(a1, _mm256_sign_epi8(a, w1)), ones);
                    is[r][0] = pin(_mm256_add_epi32(is[r][0], p0));
                    is[r][1] = pin(_mm256_add_epi32(is[r][1], p1));
                }
            } else {
                z0 = q5_high(z0, qh0, k);
                z1 = q5_high(z1, qh1, k);
                UNROLL FOR_R
                {
                    __m256i a = bc4(xq[r] + (k >= 4 ? 16 : 0) + 4 * (k & 3));
                    __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(z0, a), ones);
                    __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(z1, a), ones);
                    is[r][0] = pin(_mm256_add_epi32(is[r][0], p0));
                    is[r][1] = pin(_mm256_add_epi32(is[r][1], p1));
                }
            }
        }
        UNROLL for (int h = 0; h < 2; h++)
        {
            const __m256 d = kind == K_MXFP4
                                 ? e8m0_half8(g + 8 * h)
                                 : _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 16 * h)));
            UNROLL FOR_R
            {
                float *yr = y + (size_t)r * ldy + 8 * h;
                const __m256 xdv = _mm256_set1_ps(xd[r][b]);
                __m256 acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[r][h]), _mm256_mul_ps(d, xdv),
                                             _mm256_loadu_ps(yr));
                if (kind == K_Q5_1) {
                    const __m256 m =
                        _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 2 * X16 + 16 * h)));
                    acc = _mm256_fmadd_ps(_mm256_set1_ps((float)xoff[r][b]), _mm256_mul_ps(m, xdv),
                                          acc);
                }
                _mm256_storeu_ps(yr, acc);
            }
        }
    }
}

#define Q_CASE(R)                                                                                  \
    case R:                                                                                        \
        q_tile(kind, R, nbs, xp, xs, xo, xds, wp, yp, ldy, s0 == 0, pf);                           \
        break;
#define Q_SWITCH                                                                                   \
    switch (R) {                                                                                   \
        Q_CASE(1) Q_CASE(2) Q_CASE(3) default : break;                                             \
    }

/* As x86_avx2_gemm.c's x16_gemm: column blocks sized for L2, row tiles of
 * XR, segments of SEG blocks whose activation terms are taken once; a call
 * of at most 4 XR rows walks the groups once, every tile taking a group's
 * segment in turn. Every output sums its blocks in the same order. */
AI void q_gemm(int kind, int64_t n, int nr, int nc, const void *x, size_t xs, const void *w,
               size_t ws, float *y, size_t ldy)
{
    const int64_t nb = n / IFL_QK, ng = nc / X16;
    const size_t gb = X16 * ws;
    const size_t gbs = gb / (size_t)nb;
    const int64_t cbg = gb < COL_BLOCK_BYTES ? (int64_t)(COL_BLOCK_BYTES / gb) : 1;
    int32_t xoff[4 * XR][SEG];
    float xd[4 * XR][SEG];
    if (nr <= 4 * XR) {
        const int nt = (nr + XR - 1) / XR;
        for (int64_t s0 = 0; s0 < nb; s0 += SEG) {
            int64_t nbs = nb - s0 < SEG ? nb - s0 : SEG;
            x16_sums(kind_off(kind), nr, s0, nbs, (const char *)x, xs, xoff, xd);
            for (int64_t gi = 0; gi < ng; gi++)
                for (int t = 0; t < nt; t++) {
                    const int r0 = nr * t / nt, R = nr * (t + 1) / nt - r0;
                    const size_t pf = t > 0 ? 0 : nr <= NEAR_ROWS ? X16_PF_NEAR : X16_PF * gbs;
                    const char *xp = (const char *)x + (size_t)r0 * xs + (size_t)s0 * XBS;
                    const char *wp = (const char *)w + (size_t)gi * gb + (size_t)s0 * gbs;
                    float *yp = y + (size_t)r0 * ldy + (size_t)gi * X16;
                    const int32_t(*xo)[SEG] = xoff + r0;
                    const float(*xds)[SEG] = xd + r0;
                    Q_SWITCH
                }
        }
        return;
    }
    for (int64_t g0 = 0; g0 < ng; g0 += cbg) {
        int64_t g1 = ng - g0 < cbg ? ng : g0 + cbg;
        for (int r0 = 0; r0 < nr; r0 += XR) {
            const int R = nr - r0 < XR ? nr - r0 : XR;
            const size_t pf = X16_PF * gbs;
            for (int64_t s0 = 0; s0 < nb; s0 += SEG) {
                int64_t nbs = nb - s0 < SEG ? nb - s0 : SEG;
                const char *xp = (const char *)x + (size_t)r0 * xs + (size_t)s0 * XBS;
                x16_sums(kind_off(kind), R, 0, nbs, xp, xs, xoff, xd);
                for (int64_t gi = g0; gi < g1; gi++) {
                    const char *wp = (const char *)w + (size_t)gi * gb + (size_t)s0 * gbs;
                    float *yp = y + (size_t)r0 * ldy + (size_t)gi * X16;
                    const int32_t(*xo)[SEG] = xoff;
                    const float(*xds)[SEG] = xd;
                    Q_SWITCH
                }
            }
        }
    }
}

#define Q_GEMM(name, kind)                                                                         \
    static void name(int64_t n, int nr, int nc, const void *x, size_t xs, const void *w,           \
                     size_t ws, float *y, size_t ldy)                                              \
    {                                                                                              \
        q_gemm(kind, n, nr, nc, x, xs, w, ws, y, ldy);                                             \
    }
Q_GEMM(y_gemm_q5_0_x16, K_Q5_0)
Q_GEMM(y_gemm_q5_1_x16, K_Q5_1)
Q_GEMM(y_gemm_iq4_nl_x16, K_IQ4_NL)
Q_GEMM(y_gemm_mxfp4_x16, K_MXFP4)

void ifl_kernels_fill_avx2_x16q(struct ifl_kernels *k)
{
    static const struct {
        enum ifl_type t;
        ifl_gemm_fn fn;
    } e[] = {{IFL_TYPE_Q5_0, y_gemm_q5_0_x16},
             {IFL_TYPE_Q5_1, y_gemm_q5_1_x16},
             {IFL_TYPE_IQ4_NL, y_gemm_iq4_nl_x16},
             {IFL_TYPE_MXFP4, y_gemm_mxfp4_x16}};
    for (size_t i = 0; i < sizeof e / sizeof e[0]; i++) {
        k->gemm_x16[e[i].t] = e[i].fn;
        k->x16_pays[e[i].t] = 1;
    }
}
