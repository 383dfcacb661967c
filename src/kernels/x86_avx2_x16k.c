/*
 * 256-bit gemm over x16 groups (kernels.h) of IQ4_XS, Q2_K and Q3_K
 * weights against Q8_K activations, for the AVX2 table. Must equal ref.c's
 * gemm_iq4_xs_x16, gemm_q2_k_x16 and gemm_q3_k_x16 within the tests'
 * tolerance: a super-block's integer sums exactly, the float sums fused.
 * The AVX-512 table has its own (x86_avx512_x16.c).
 *
 * A 64-byte run holds four bytes of each of 16 rows, rows 0..7 in its
 * first 32 bytes and 8..15 in the second, one row per 32-bit lane; a tile
 * takes one half (8 rows) at a time, so that a row keeps its sub-block sum
 * and its super-block sum in registers and four rows fit.
 *
 * IQ4_XS (group: d, scales_h, one run of scales_l, 32 runs of qs; run
 * 4j + q holds sub-block j's bytes 4q .. 4q + 3, low nibbles elements
 * 32j + 4q .., high ones 32j + 16 + 4q ..): vpshufb turns nibbles into
 * levels (signed), |level| meets the activation with the level's sign
 * (vpmaddubsw, a pair at most 32258), vpmaddwd widens; a sub-block's sum
 * times its scale ls - 32 goes into the row's isum. Per super-block, lane
 * i: y += isum * (d_i d_x).
 * Q2_K (group: d, dmin, 4 runs of scales, 16 runs of qs) and Q3_K (d, 3
 * runs of packed scales, 16 runs of qs, 8 runs of hmask): qs byte 32h + 16g
 * + l holds element 128h + 32k + 16g + l in bits 2k, 2k + 1, so run t and
 * shift k give four elements of sub-block (of 16) 8h + 2k + g; Q3_K's
 * third bit is bit 4h + k of hmask byte 16g + l. The quants go unsigned
 * (0..3, 0..7) into vpmaddubsw; Q2_K's mins and Q3_K's -4 come back from
 * the activation block's sums of 16, exactly. Q2_K: y += isum (d_i d_x),
 * then y -= msum (dmin_i d_x); Q3_K: isum - 4 osum, times d_i d_x.
 *
 * Batch invariance: an output gets the same instructions in the same
 * order whatever tile it falls in and however nr and nc are split.
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
#define XR 4 /* activation rows per tile */
#define X8KBS ((size_t)sizeof(struct ifl_block_q8_k))
#define Q8K_D 0
#define Q8K_QS 4
#define Q8K_BSUMS (4 + IFL_QK_K)
#define COL_BLOCK_BYTES (256 * 1024)

enum { K_IQ4_XS, K_Q2_K, K_Q3_K };

AI size_t group_bytes(int kind)
{
    return X16 * (kind == K_IQ4_XS ? sizeof(struct ifl_block_iq4_xs)
                  : kind == K_Q2_K ? sizeof(struct ifl_block_q2_k)
                                   : sizeof(struct ifl_block_q3_k));
}

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

AI __m256i ld(const char *p)
{
    return _mm256_loadu_si256((const __m256i *)p);
}

/* y[0..8) += a * b, fused, at yr */
AI void fma_store(float *yr, __m256i a, __m256 b)
{
    _mm256_storeu_ps(yr, _mm256_fmadd_ps(_mm256_cvtepi32_ps(a), b, _mm256_loadu_ps(yr)));
}

/* One IQ4_XS super-block group, half h, for R rows (xb: their Q8_K blocks). */
AI void iq4xs_half(int R, int h, const char *g, const char *const *xb, float *y, size_t ldy)
{
    const __m256i m4 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    const __m256i lv =
        _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)ifl_iq4nl_levels));
    const __m256i sh = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(g + 32 + 16 * h)));
    const __m256i sl = ld(g + 64 + 32 * h);
    __m256i isum[XR];
    UNROLL FOR_R isum[r] = _mm256_setzero_si256();
    UNROLL for (int j = 0; j < 8; j++)
    {
        __m256i t[XR];
        UNROLL FOR_R t[r] = _mm256_setzero_si256();
        UNROLL for (int q = 0; q < 4; q++)
        {
            const __m256i z = ld(g + 128 + 64 * (4 * j + q) + 32 * h);
            const __m256i w0 = _mm256_shuffle_epi8(lv, _mm256_and_si256(z, m4));
            const __m256i w1 =
                _mm256_shuffle_epi8(lv, _mm256_and_si256(_mm256_srli_epi16(z, 4), m4));
            const __m256i a0 = _mm256_abs_epi8(w0), a1 = _mm256_abs_epi8(w1);
            UNROLL FOR_R
            {
                const char *xq = xb[r] + Q8K_QS + 32 * j + 4 * q;
                __m256i p0 = _mm256_maddubs_epi16(a0, _mm256_sign_epi8(bc4(xq), w0));
                __m256i p1 = _mm256_maddubs_epi16(a1, _mm256_sign_epi8(bc4(xq + 16), w1));
                t[r] = pin(_mm256_add_epi32(t[r], _mm256_madd_epi16(p0, ones)));
                t[r] = pin(_mm256_add_epi32(t[r], _mm256_madd_epi16(p1, ones)));
            }
        }
        /* ls = 4 bits of scales_l byte j / 2 | 2 bits of scales_h << 4 */
        __m256i ls = _mm256_and_si256(_mm256_srli_epi32(sl, 8 * (j >> 1) + 4 * (j & 1)),
                                      _mm256_set1_epi32(15));
        ls = _mm256_or_si256(
            ls, _mm256_slli_epi32(
                    _mm256_and_si256(_mm256_srli_epi32(sh, 2 * j), _mm256_set1_epi32(3)), 4));
        const __m256i sc = _mm256_sub_epi32(ls, _mm256_set1_epi32(32));
        UNROLL FOR_R isum[r] = _mm256_add_epi32(isum[r], _mm256_mullo_epi32(t[r], sc));
    }
    const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 16 * h)));
    UNROLL FOR_R fma_store(y + (size_t)r * ldy + 8 * h, isum[r],
                           _mm256_mul_ps(_mm256_set1_ps(ld_f32(xb[r] + Q8K_D)), d));
}

/* Q3_K's scale of sub-block j (0..15), minus 32, in each row's lane, from
 * the three words of its 12 packed bytes (w0, w1, w2). */
AI __m256i q3_scale(__m256i w0, __m256i w1, __m256i w2, int j)
{
    const __m256i k2 = _mm256_set1_epi32(0x0f0f0f0f), k1 = _mm256_set1_epi32(0x03030303);
    const int q = j >> 2;
    __m256i a;
    if (q == 0)
        a = _mm256_or_si256(_mm256_and_si256(w0, k2),
                            _mm256_slli_epi32(_mm256_and_si256(w2, k1), 4));
    else if (q == 1)
        a = _mm256_or_si256(_mm256_and_si256(w1, k2),
                            _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(w2, 2), k1), 4));
    else if (q == 2)
        a = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(w0, 4), k2),
                            _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(w2, 4), k1), 4));
    else
        a = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(w1, 4), k2),
                            _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(w2, 6), k1), 4));
    a = _mm256_and_si256(_mm256_srli_epi32(a, 8 * (j & 3)), _mm256_set1_epi32(0xff));
    return _mm256_sub_epi32(a, _mm256_set1_epi32(32));
}

/* One Q2_K (q3 0) or Q3_K (q3 1) super-block group, half hh, for R rows. */
AI void k23_half(int q3, int R, int hh, const char *g, const char *const *xb, float *y, size_t ldy)
{
    const size_t qs_off = q3 ? 32 + 192 : 64 + 256, hm_off = 32 + 192 + 1024;
    const __m256i m2 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1), ones = _mm256_set1_epi16(1);
    __m256i w0 = _mm256_setzero_si256(), w1 = w0, w2 = w0, sc4[4] = {w0, w0, w0, w0};
    if (q3) {
        w0 = ld(g + 32 + 32 * hh);
        w1 = ld(g + 96 + 32 * hh);
        w2 = ld(g + 160 + 32 * hh);
    } else {
        UNROLL for (int i = 0; i < 4; i++) sc4[i] = ld(g + 64 + 64 * i + 32 * hh);
    }
    __m256i isum[XR], os[XR];
    UNROLL FOR_R isum[r] = os[r] = _mm256_setzero_si256();
    _Pragma("GCC unroll 16") for (int j = 0; j < 16; j++)
    {
        /* sub-block j = 8h + 2k + g: runs 8h + 4g + (0..3), shift k */
        const int h = j >> 3, k = (j >> 1) & 3, gg = j & 1;
        __m256i t[XR];
        UNROLL FOR_R t[r] = _mm256_setzero_si256();
        UNROLL for (int m = 0; m < 4; m++)
        {
            const int run = 8 * h + 4 * gg + m;
            __m256i q =
                _mm256_and_si256(_mm256_srli_epi16(ld(g + qs_off + 64 * run + 32 * hh), 2 * k), m2);
            if (q3) {
                __m256i hb = ld(g + hm_off + 64 * (4 * gg + m) + 32 * hh);
                hb = _mm256_and_si256(_mm256_srli_epi16(hb, 4 * h + k), one);
                q = _mm256_or_si256(q, _mm256_slli_epi16(hb, 2));
            }
            UNROLL FOR_R
            {
                const char *xq = xb[r] + Q8K_QS + 128 * h + 32 * k + 16 * gg + 4 * m;
                t[r] = pin(_mm256_add_epi32(
                    t[r], _mm256_madd_epi16(_mm256_maddubs_epi16(q, bc4(xq)), ones)));
            }
        }
        __m256i sc, mn = _mm256_setzero_si256();
        if (q3) {
            sc = q3_scale(w0, w1, w2, j);
        } else {
            __m256i b = _mm256_and_si256(_mm256_srli_epi32(sc4[j >> 2], 8 * (j & 3)),
                                         _mm256_set1_epi32(0xff));
            sc = _mm256_and_si256(b, _mm256_set1_epi32(15));
            mn = _mm256_srli_epi32(b, 4);
        }
        UNROLL FOR_R
        {
            int16_t bs;
            memcpy(&bs, xb[r] + Q8K_BSUMS + 2 * j, 2);
            isum[r] = _mm256_add_epi32(isum[r], _mm256_mullo_epi32(t[r], sc));
            os[r] =
                _mm256_add_epi32(os[r], _mm256_mullo_epi32(q3 ? sc : mn, _mm256_set1_epi32(bs)));
        }
    }
    const __m256 d =
        _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + (q3 ? 0 : 0) + 16 * hh)));
    UNROLL FOR_R
    {
        float *yr = y + (size_t)r * ldy + 8 * hh;
        const __m256 xd = _mm256_set1_ps(ld_f32(xb[r] + Q8K_D));
        if (q3) {
            fma_store(yr, _mm256_sub_epi32(isum[r], _mm256_slli_epi32(os[r], 2)),
                      _mm256_mul_ps(xd, d));
        } else {
            const __m256 dmin =
                _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 32 + 16 * hh)));
            fma_store(yr, isum[r], _mm256_mul_ps(xd, d));
            _mm256_storeu_ps(yr, _mm256_fnmadd_ps(_mm256_cvtepi32_ps(os[r]),
                                                  _mm256_mul_ps(xd, dmin), _mm256_loadu_ps(yr)));
        }
    }
}

/* Super-blocks [0, nsb) of one group for R rows, into y (zeroed first). */
AI void k_tile(int kind, int R, int64_t nsb, const char *x, size_t xs, const char *g, float *y,
               size_t ldy, int pf)
{
    const size_t gbs = group_bytes(kind);
    UNROLL FOR_R UNROLL for (int h = 0; h < 2; h++)
        _mm256_storeu_ps(y + (size_t)r * ldy + 8 * h, _mm256_setzero_ps());
    for (int64_t b = 0; b < nsb; b++, g += gbs) {
        for (size_t l = 0; pf && l < gbs; l += 64)
            _mm_prefetch(g + 2 * gbs + l, _MM_HINT_T0);
        const char *xb[XR];
        UNROLL FOR_R xb[r] = x + (size_t)r * xs + (size_t)b * X8KBS;
        for (int h = 0; h < 2; h++) { /* rolled: the registers hold one half */
            if (kind == K_IQ4_XS)
                iq4xs_half(R, h, g, xb, y, ldy);
            else
                k23_half(kind == K_Q3_K, R, h, g, xb, y, ldy);
        }
    }
}

#define K_CASE(R)                                                                                  \
    case R:                                                                                        \
        k_tile(kind, R, nsb, xp, xs, wp, yp, ldy, pf);                                             \
        break;
#define K_SWITCH                                                                                   \
    switch (R) {                                                                                   \
        K_CASE(1) K_CASE(2) K_CASE(3) K_CASE(4) default : break;                                   \
    }

/* Column blocks sized for L2; inside, row tiles of XR over each group's
 * whole row. Every output sums its super-blocks in order. */
AI void k_gemm(int kind, int64_t n, int nr, int nc, const void *x, size_t xs, const void *w,
               size_t ws, float *y, size_t ldy)
{
    const int64_t nsb = n / IFL_QK_K, ng = nc / X16;
    const size_t gb = X16 * ws;
    const int64_t cbg = gb < COL_BLOCK_BYTES ? (int64_t)(COL_BLOCK_BYTES / gb) : 1;
    for (int64_t g0 = 0; g0 < ng; g0 += cbg) {
        int64_t g1 = ng - g0 < cbg ? ng : g0 + cbg;
        for (int r0 = 0; r0 < nr; r0 += XR) {
            const int R = nr - r0 < XR ? nr - r0 : XR, pf = r0 == 0;
            const char *xp = (const char *)x + (size_t)r0 * xs;
            for (int64_t gi = g0; gi < g1; gi++) {
                const char *wp = (const char *)w + (size_t)gi * gb;
                float *yp = y + (size_t)r0 * ldy + (size_t)gi * X16;
                K_SWITCH
            }
        }
    }
}

#define K_GEMM(name, kind)                                                                         \
    static void name(int64_t n, int nr, int nc, const void *x, size_t xs, const void *w,           \
                     size_t ws, float *y, size_t ldy)                                              \
    {                                                                                              \
        k_gemm(kind, n, nr, nc, x, xs, w, ws, y, ldy);                                             \
    }
K_GEMM(y_gemm_iq4_xs_x16, K_IQ4_XS)
K_GEMM(y_gemm_q2_k_x16, K_Q2_K)
K_GEMM(y_gemm_q3_k_x16, K_Q3_K)

void ifl_kernels_fill_avx2_x16k(struct ifl_kernels *k)
{
    static const struct {
        enum ifl_type t;
        ifl_gemm_fn fn;
    } e[] = {{IFL_TYPE_IQ4_XS, y_gemm_iq4_xs_x16},
             {IFL_TYPE_Q2_K, y_gemm_q2_k_x16},
             {IFL_TYPE_Q3_K, y_gemm_q3_k_x16}};
    for (size_t i = 0; i < sizeof e / sizeof e[0]; i++) {
        k->gemm_x16[e[i].t] = e[i].fn;
        k->x16_pays[e[i].t] = 1;
    }
}
