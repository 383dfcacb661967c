/*
 * 512-bit gemm for the AVX-512 table (F, BW, DQ, VL, VNNI): these replace
 * the 256-bit kernels of x86_simd.h for Q8_0 and Q4_0 weights in rows
 * (the kernels over x16 groups are in x86_avx512_x16.c).
 *
 * Q8_0 / Q4_0 (ref.c: gemm_q8_0, gemm_q4_0). One zmm holds two 32-value
 * blocks. vpdpbusd wants one unsigned operand, so the weights are made
 * unsigned (Q8_0: w + 128 by flipping the sign bit; Q4_0: the raw nibble,
 * which is w + 8) and the offset is taken back exactly in the integer
 * accumulator's start value, -128 * sum(x) or -8 * sum(x) per 4-byte
 * lane, computed once per activation row and shared by every weight row.
 * So each lane holds an exact integer dot of four products; the lanes of a
 * block pair are scaled by (d_w * d_x) of their own block and summed into
 * 16 float lanes, folded at the end by one fixed horizontal sum. Only the
 * float sum is reordered against ref (within the tests' tolerance).
 *
 * Batch invariance: an output's accumulator sees the same instructions in
 * the same order whatever tile it falls in, whatever nr and nc are: tiles
 * only share the loads and the per-row / per-column set-up. An odd last
 * block runs as a pair with a zero partner, the same for every output.
 */
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/blocks.h"
#include "kernels/impl.h"
#include "kernels/x86_avx512.h"
#include "kernels/x86_avx512_gemm.h"
#include "kernels/x86_prefetch.h"
#include "kernels/x86_x16.h"

/* Activation rows per tile; weight rows per tile is 4, or 8 for a lone row. */
#define MR 4
#define MCMAX 8

/* Lanes 0..7 = f16 a, lanes 8..15 = f16 b, as floats. */
AI __m512 scale_pair(uint16_t a, uint16_t b)
{
    __m128 f = _mm_cvtph_ps(_mm_cvtsi32_si128((int)((uint32_t)a | (uint32_t)b << 16)));
    return _mm512_permutexvar_ps(_mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1),
                                 _mm512_castps128_ps512(f));
}

/* Two 32-byte runs as one zmm; with two == 0 the high half is zero. */
AI __m512i ld_2x256(const char *a, const char *b, int two)
{
    __m256i lo = _mm256_loadu_si256((const __m256i *)a);
    if (!two)
        return _mm512_zextsi256_si512(lo);
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), _mm256_loadu_si256((const __m256i *)b),
                              1);
}

/* ---- float weights: F32, F16, BF16, F32 activations ------------------ */

/* Sixteen weights of a row from element i as floats (m: lanes to load,
 * the rest zero). kind: 0 f32, 1 f16, 2 bf16. */
AI __m512 ldw16(int kind, const char *row, int64_t i, __mmask16 m)
{
    if (kind == 0)
        return _mm512_maskz_loadu_ps(m, (const float *)row + i);
    __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)row + i);
    if (kind == 1)
        return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* gemm_f32 / gemm_f16 / gemm_bf16 of ref.c: per output one 16-lane sum,
 * elements 16k .. 16k + 15 into lane order, the zero-padded tail last,
 * folded by hsum512. */
AI void tile_float(int kind, int64_t n, int R, int C, const char *x, size_t xs, const char *w,
                   size_t ws, float *y, size_t ldy)
{
    __m512 acc[MR][MCMAX];
    UNROLL FOR_R UNROLL FOR_C acc[r][c] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m512 wv[MCMAX];
        /* a step reads 64 (f32) or 32 bytes of each row */
        if (kind == 0 || !(i & 31))
            UNROLL FOR_C pf_lines(w + (size_t)c * ws + (size_t)i * (kind ? 2 : 4), 1);
        UNROLL FOR_C wv[c] = ldw16(kind, w + (size_t)c * ws, i, 0xffff);
        UNROLL FOR_R
        {
            __m512 xv = _mm512_loadu_ps((const float *)(x + (size_t)r * xs) + i);
            UNROLL FOR_C acc[r][c] = _mm512_fmadd_ps(wv[c], xv, acc[r][c]);
        }
    }
    if (i < n) {
        __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        __m512 wv[MCMAX];
        UNROLL FOR_C wv[c] = ldw16(kind, w + (size_t)c * ws, i, m);
        UNROLL FOR_R
        {
            __m512 xv = _mm512_maskz_loadu_ps(m, (const float *)(x + (size_t)r * xs) + i);
            UNROLL FOR_C acc[r][c] = _mm512_fmadd_ps(wv[c], xv, acc[r][c]);
        }
    }
    UNROLL FOR_R UNROLL FOR_C y[(size_t)r * ldy + c] = hsum512(acc[r][c]);
}

/* ---- Q8_0 and Q4_0 weights, Q8_0 activations ------------------------ */

/* Blocks b and b + 1 (or b alone when two == 0) of one tile. */
AI void q80_step(int q4, int two, int R, int C, int64_t b, const char *x, size_t xs, const char *w,
                 size_t ws, __m512 acc[MR][MCMAX])
{
    const size_t wbs = q4 ? sizeof(struct ifl_block_q4_0) : sizeof(struct ifl_block_q8_0);
    __m512i wu[MCMAX];
    __m512 wd[MCMAX];
    UNROLL FOR_C
    {
        const char *blk = w + (size_t)c * ws + (size_t)b * wbs;
        pf_lines(blk, 1); /* a step reads 36 or 68 bytes */
        if (q4) {
            __m128i lo = _mm_loadu_si128((const __m128i *)(blk + 2));
            __m128i hi =
                two ? _mm_loadu_si128((const __m128i *)(blk + wbs + 2)) : _mm_setzero_si128();
            /* 128-bit lanes [A, A, B, B], then low nibbles of lanes 0, 2
             * and high nibbles of lanes 1, 3: blocks b, b + 1 in order */
            __m512i z = _mm512_permutexvar_epi64(_mm512_setr_epi64(0, 1, 0, 1, 2, 3, 2, 3),
                                                 _mm512_castsi256_si512(_mm256_set_m128i(hi, lo)));
            z = _mm512_mask_blend_epi64(0xcc, z, _mm512_srli_epi16(z, 4));
            wu[c] = _mm512_and_si512(z, _mm512_set1_epi8(15));
        } else {
            wu[c] = _mm512_xor_si512(ld_2x256(blk + 2, blk + wbs + 2, two), _mm512_set1_epi8(-128));
        }
        wd[c] = scale_pair(ld_u16(blk), two ? ld_u16(blk + wbs) : 0);
    }
    const __m512i off = _mm512_set1_epi8(q4 ? 8 : -128); /* as u8: 8 or 128 */
    UNROLL FOR_R
    {
        const char *xb = x + (size_t)r * xs + (size_t)b * XBS;
        __m512i xv = ld_2x256(xb + 2, xb + XBS + 2, two);
        __m512i ncorr = _mm512_sub_epi32(_mm512_setzero_si512(),
                                         _mm512_dpbusd_epi32(_mm512_setzero_si512(), off, xv));
        __m512 xd = scale_pair(ld_u16(xb), two ? ld_u16(xb + XBS) : 0);
        UNROLL FOR_C
        {
            __m512i p = _mm512_dpbusd_epi32(ncorr, wu[c], xv);
            acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(p), _mm512_mul_ps(wd[c], xd), acc[r][c]);
        }
    }
}

AI void tile_q80(int q4, int64_t n, int R, int C, const char *x, size_t xs, const char *w,
                 size_t ws, float *y, size_t ldy)
{
    __m512 acc[MR][MCMAX];
    UNROLL FOR_R UNROLL FOR_C acc[r][c] = _mm512_setzero_ps();
    const int64_t nb = n / IFL_QK;
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2)
        q80_step(q4, 1, R, C, b, x, xs, w, ws, acc);
    if (b < nb)
        q80_step(q4, 0, R, C, b, x, xs, w, ws, acc);
    UNROLL FOR_R UNROLL FOR_C y[(size_t)r * ldy + c] = hsum512(acc[r][c]);
}

/* ---- K-quant weights, Q8_K activations ------------------------------ */

/* Dword lanes 0..7 of v spread to lanes [8 * (i / 8) ...]: lanes 0..7 of
 * the result take lane 2k, lanes 8..15 lane 2k + 1. */
AI __m512i pick_pair(__m512i v, int k)
{
    return _mm512_permutexvar_epi32(_mm512_setr_epi32(2 * k, 2 * k, 2 * k, 2 * k, 2 * k, 2 * k,
                                                      2 * k, 2 * k, 2 * k + 1, 2 * k + 1, 2 * k + 1,
                                                      2 * k + 1, 2 * k + 1, 2 * k + 1, 2 * k + 1,
                                                      2 * k + 1),
                                    v);
}

/* Each dword lane of v (an int16 value, sign-extended) as that value in
 * both of its words, for vpdpwssd. */
AI __m512i both_words(__m512i v)
{
    return _mm512_or_si512(_mm512_and_si512(v, _mm512_set1_epi32(0xffff)),
                           _mm512_slli_epi32(v, 16));
}

/* gemm_q4_k / gemm_q5_k of ref.c. The twelve scale bytes unpack, with
 * 32-bit masks, to sc[0..7] in u[0..1] and m[0..7] in u[2..3] (the rules
 * of ifl_k4_scale_min, four sub-blocks at a time). Per super-block and
 * output: isum (16 int lanes) = sum_j sc[j] * dot(q_j, x_j), chunk k of
 * 64 values holding sub-blocks 2k and 2k + 1; msum (8 int lanes) = m[j]
 * times the bsums of sub-block j; acc += (d_x d) * isum - (d_x dmin) *
 * msum, and the output is one fixed horizontal sum of acc. */
AI void tile_kx(int q5, int64_t n, int R, int C, const char *x, size_t xs, const char *w, size_t ws,
                float *y, size_t ldy)
{
    const size_t wbs = q5 ? sizeof(struct ifl_block_q5_k) : sizeof(struct ifl_block_q4_k);
    const size_t qs_off =
        q5 ? offsetof(struct ifl_block_q5_k, qs) : offsetof(struct ifl_block_q4_k, qs);
    const __m512i m4 = _mm512_set1_epi8(15), one = _mm512_set1_epi8(1);
    __m512 acc[MR][MCMAX];
    UNROLL FOR_R UNROLL FOR_C acc[r][c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < n / IFL_QK_K; b++) {
        __m512i scd[MCMAX];
        __m256i mins16[MCMAX];
        float wd[MCMAX], wdm[MCMAX];
        UNROLL FOR_C
        {
            const char *blk = w + (size_t)c * ws + (size_t)b * wbs;
            uint32_t u[4];
            memcpy(u, blk + 4, 12);
            const uint32_t k1 = 0x3f3f3f3f, k2 = 0x0f0f0f0f, k3 = 0x03030303;
            u[3] = ((u[2] >> 4) & k2) | (((u[1] >> 6) & k3) << 4);
            uint32_t m_lo = u[1] & k1;
            u[1] = (u[2] & k2) | (((u[0] >> 6) & k3) << 4);
            u[2] = m_lo;
            u[0] &= k1;
            __m128i sm = _mm_loadu_si128((const __m128i *)u); /* sc[0..7], m[0..7] */
            scd[c] = both_words(_mm512_cvtepu8_epi32(sm));
            __m256i md = _mm256_cvtepu8_epi32(_mm_srli_si128(sm, 8));
            mins16[c] = _mm256_or_si256(md, _mm256_slli_epi32(md, 16));
            wd[c] = _cvtsh_ss(ld_u16(blk));
            wdm[c] = _cvtsh_ss(ld_u16(blk + 2));
            pf_lines(blk, q5 ? 3 : 2); /* a super-block is 176 or 144 bytes */
        }
        __m512i isum[MR][MCMAX];
        UNROLL FOR_R UNROLL FOR_C isum[r][c] = _mm512_setzero_si512();
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++)
        {
            UNROLL FOR_C
            {
                const char *blk = w + (size_t)c * ws + (size_t)b * wbs;
                /* 32 bytes in both halves: low nibbles below, high above */
                __m512i z = _mm512_broadcast_i64x4(
                    _mm256_loadu_si256((const __m256i *)(blk + qs_off + 32 * k)));
                __m512i q =
                    _mm512_and_si512(_mm512_mask_blend_epi64(0xf0, z, _mm512_srli_epi16(z, 4)), m4);
                if (q5) {
                    __m512i h =
                        _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk + 16)));
                    h = _mm512_mask_blend_epi64(0xf0, _mm512_srli_epi16(h, 2 * k),
                                                _mm512_srli_epi16(h, 2 * k + 1));
                    q = _mm512_or_si512(q, _mm512_slli_epi16(_mm512_and_si512(h, one), 4));
                }
                __m512i s = pick_pair(scd[c], k);
                UNROLL FOR_R
                {
                    const char *xq = x + (size_t)r * xs + (size_t)b * X8KBS + Q8K_QS + 64 * k;
                    __m512i xv = _mm512_loadu_si512((const void *)xq);
                    isum[r][c] = _mm512_dpwssd_epi32(isum[r][c], _mm512_maddubs_epi16(q, xv), s);
                }
            }
        }
        UNROLL FOR_R
        {
            const char *xb = x + (size_t)r * xs + (size_t)b * X8KBS;
            float xd;
            memcpy(&xd, xb + Q8K_D, 4);
            __m256i bs = _mm256_loadu_si256((const __m256i *)(xb + Q8K_BSUMS));
            UNROLL FOR_C
            {
                __m256 ms = _mm256_cvtepi32_ps(_mm256_madd_epi16(bs, mins16[c]));
                acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r][c]),
                                            _mm512_set1_ps(xd * wd[c]), acc[r][c]);
                acc[r][c] = _mm512_fnmadd_ps(_mm512_zextps256_ps512(ms),
                                             _mm512_set1_ps(xd * wdm[c]), acc[r][c]);
            }
        }
    }
    UNROLL FOR_R UNROLL FOR_C y[(size_t)r * ldy + c] = hsum512(acc[r][c]);
}

/* gemm_q6_k of ref.c. q in 0..63 goes through vpmaddubsw unsigned; the -32
 * offset is taken back exactly as 32 * sum_j sc[j] * bsums[j] from the
 * integer sum. Chunk (h, p) holds values 128h + 64p .. + 63: the low (p =
 * 0) or high (p = 1) nibbles of ql[64h .. 64h + 63], with two bits of
 * qh[32h .. 32h + 31] on top, and spans sub-blocks 8h + 4p .. + 3, one per
 * 128-bit lane. Per super-block: acc += (d_x d) * isum lanes. */
AI void tile_q6k(int64_t n, int R, int C, const char *x, size_t xs, const char *w, size_t ws,
                 float *y, size_t ldy)
{
    const __m512i m4 = _mm512_set1_epi8(15), m2 = _mm512_set1_epi8(3);
    const size_t wbs = sizeof(struct ifl_block_q6_k);
    __m512 acc[MR][MCMAX];
    UNROLL FOR_R UNROLL FOR_C acc[r][c] = _mm512_setzero_ps();
    for (int64_t b = 0; b < n / IFL_QK_K; b++) {
        __m512i isum[MR][MCMAX];
        UNROLL FOR_R UNROLL FOR_C isum[r][c] = _mm512_setzero_si512();
        UNROLL FOR_C pf_lines(w + (size_t)c * ws + (size_t)b * wbs, 4); /* 210 bytes */
        _Pragma("GCC unroll 4") for (int j = 0; j < 4; j++)
        {
            const int h = j >> 1, p = j & 1;
            UNROLL FOR_C
            {
                const struct ifl_block_q6_k *blk =
                    (const struct ifl_block_q6_k *)(w + (size_t)c * ws + (size_t)b * wbs);
                __m512i ql = _mm512_loadu_si512((const void *)(blk->ql + 64 * h));
                __m512i lo =
                    p ? _mm512_and_si512(_mm512_srli_epi16(ql, 4), m4) : _mm512_and_si512(ql, m4);
                __m512i z =
                    _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(blk->qh + 32 * h)));
                __m512i hb = _mm512_mask_blend_epi64(0xf0, _mm512_srli_epi16(z, 4 * p),
                                                     _mm512_srli_epi16(z, 4 * p + 2));
                __m512i q = _mm512_or_si512(lo, _mm512_slli_epi16(_mm512_and_si512(hb, m2), 4));
                __m512i sd =
                    both_words(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)blk->scales)));
                const int s0 = 4 * j;
                __m512i s = _mm512_permutexvar_epi32(
                    _mm512_setr_epi32(s0, s0, s0, s0, s0 + 1, s0 + 1, s0 + 1, s0 + 1, s0 + 2,
                                      s0 + 2, s0 + 2, s0 + 2, s0 + 3, s0 + 3, s0 + 3, s0 + 3),
                    sd);
                UNROLL FOR_R
                {
                    const char *xq = x + (size_t)r * xs + (size_t)b * X8KBS + Q8K_QS + 64 * j;
                    __m512i xv = _mm512_loadu_si512((const void *)xq);
                    isum[r][c] = _mm512_dpwssd_epi32(isum[r][c], _mm512_maddubs_epi16(q, xv), s);
                }
            }
        }
        UNROLL FOR_R
        {
            const char *xb = x + (size_t)r * xs + (size_t)b * X8KBS;
            float xd;
            memcpy(&xd, xb + Q8K_D, 4);
            __m256i bs = _mm256_loadu_si256((const __m256i *)(xb + Q8K_BSUMS));
            UNROLL FOR_C
            {
                const struct ifl_block_q6_k *blk =
                    (const struct ifl_block_q6_k *)(w + (size_t)c * ws + (size_t)b * wbs);
                __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)blk->scales));
                __m256i off = _mm256_slli_epi32(_mm256_madd_epi16(bs, sc16), 5);
                __m512i t = _mm512_sub_epi32(isum[r][c], _mm512_zextsi256_si512(off));
                acc[r][c] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t),
                                            _mm512_set1_ps(xd * _cvtsh_ss(blk->d)), acc[r][c]);
            }
        }
    }
    UNROLL FOR_R UNROLL FOR_C y[(size_t)r * ldy + c] = hsum512(acc[r][c]);
}

/* ---- the tile driver ------------------------------------------------ */

#define TILE_PARAMS                                                                                \
    int64_t n, int R, int C, const char *x, size_t xs, const char *w, size_t ws, float *y,         \
        size_t ldy

#define CASE(tile, R, C)                                                                           \
    case (R)*16 + (C):                                                                             \
        tile(n, R, C, xp, xs, wp, ws, yp, ldy);                                                    \
        break;

/* Column blocks sized for L2; inside, row tiles of MR; inside, column
 * tiles of 4 (8 when one row is left: decode keeps eight chains going). */
/* clang-format off */
#define DEFINE_GEMM(name, tile)                                                                    \
    static void name(int64_t n, int nr, int nc, const void *x, size_t xs, const void *w,          \
                     size_t ws, float *y, size_t ldy)                                             \
    {                                                                                              \
        int cb = ws > 0 && ws < (size_t)COL_BLOCK_BYTES / 8 ? (int)(COL_BLOCK_BYTES / ws) & ~7 : 8; \
        for (int cb0 = 0; cb0 < nc; cb0 += cb) {                                                   \
            int cend = nc - cb0 < cb ? nc : cb0 + cb;                                              \
            for (int r0 = 0; r0 < nr; r0 += MR) {                                                  \
                int mr = nr - r0 < MR ? nr - r0 : MR;                                              \
                int tc = mr == 1 ? 8 : 4;                                                          \
                for (int c0 = cb0; c0 < cend; c0 += tc) {                                          \
                    int mc = cend - c0 < tc ? cend - c0 : tc;                                      \
                    const char *xp = (const char *)x + (size_t)r0 * xs;                           \
                    const char *wp = (const char *)w + (size_t)c0 * ws;                           \
                    float *yp = y + (size_t)r0 * ldy + c0;                                         \
                    switch (mr * 16 + mc) {                                                        \
                        CASE(tile, 1, 1) CASE(tile, 1, 2) CASE(tile, 1, 3) CASE(tile, 1, 4)        \
                        CASE(tile, 1, 5) CASE(tile, 1, 6) CASE(tile, 1, 7) CASE(tile, 1, 8)        \
                        CASE(tile, 2, 1) CASE(tile, 2, 2) CASE(tile, 2, 3) CASE(tile, 2, 4)        \
                        CASE(tile, 3, 1) CASE(tile, 3, 2) CASE(tile, 3, 3) CASE(tile, 3, 4)        \
                        CASE(tile, 4, 1) CASE(tile, 4, 2) CASE(tile, 4, 3) CASE(tile, 4, 4)        \
                    default:                                                                       \
                        break;                                                                     \
                    }                                                                              \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
    }
/* clang-format on */

AI void tile_f32(TILE_PARAMS)
{
    tile_float(0, n, R, C, x, xs, w, ws, y, ldy);
}
AI void tile_f16(TILE_PARAMS)
{
    tile_float(1, n, R, C, x, xs, w, ws, y, ldy);
}
AI void tile_bf16(TILE_PARAMS)
{
    tile_float(2, n, R, C, x, xs, w, ws, y, ldy);
}
DEFINE_GEMM(z_gemm_f32, tile_f32)
DEFINE_GEMM(z_gemm_f16, tile_f16)
DEFINE_GEMM(z_gemm_bf16, tile_bf16)
AI void tile_q8_0(TILE_PARAMS)
{
    tile_q80(0, n, R, C, x, xs, w, ws, y, ldy);
}
AI void tile_q4_0(TILE_PARAMS)
{
    tile_q80(1, n, R, C, x, xs, w, ws, y, ldy);
}
DEFINE_GEMM(z_gemm_q8_0, tile_q8_0)
DEFINE_GEMM(z_gemm_q4_0, tile_q4_0)
AI void tile_q4_k(TILE_PARAMS)
{
    tile_kx(0, n, R, C, x, xs, w, ws, y, ldy);
}
AI void tile_q5_k(TILE_PARAMS)
{
    tile_kx(1, n, R, C, x, xs, w, ws, y, ldy);
}
DEFINE_GEMM(z_gemm_q4_k, tile_q4_k)
DEFINE_GEMM(z_gemm_q5_k, tile_q5_k)
DEFINE_GEMM(z_gemm_q6_k, tile_q6k)

void ifl_kernels_fill_avx512_gemm(struct ifl_kernels *k)
{
    k->gemm[IFL_TYPE_F32] = z_gemm_f32;
    k->gemm[IFL_TYPE_F16] = z_gemm_f16;
    k->gemm[IFL_TYPE_BF16] = z_gemm_bf16;
    k->gemm[IFL_TYPE_Q8_0] = z_gemm_q8_0;
    k->gemm[IFL_TYPE_Q4_0] = z_gemm_q4_0;
    k->gemm[IFL_TYPE_Q4_K] = z_gemm_q4_k;
    k->gemm[IFL_TYPE_Q5_K] = z_gemm_q5_k;
    k->gemm[IFL_TYPE_Q6_K] = z_gemm_q6_k;
}
