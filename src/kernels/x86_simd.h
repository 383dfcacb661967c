/*
 * The x86 kernels, written once for 256-bit vectors and compiled twice:
 * by x86_avx2.c (AVX2 + FMA + F16C) and by x86_avx512.c (adds AVX-512 VL +
 * VNNI, where the int8 dot products become vpdpbusd / vpdpwssd). Include
 * only from those two files: it is full of intrinsics and needs their ISA
 * flags. X86_VNNI must be defined to 0 or 1 before inclusion.
 *
 * Every kernel here equals a function of ref.c, named in its comment:
 * bit for bit for conversions and activation quantisation; for gemm the
 * integer sums are exact and only the float sum over blocks is reordered
 * (kept in 8 lanes, folded by one fixed horizontal sum).
 *
 * Batch invariance: a gemm walks the output in tiles of R activation rows
 * by C weight rows, but each output has its own accumulators and receives
 * exactly the same instructions, in the same order, whatever R and C are
 * (tile edges included). Tiles only share loads of blocks.
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/fp16.h"
#include "kernels/blocks.h"
#include "kernels/impl.h"
#include "kernels/x86_heads.h"
#include "kernels/x86_prefetch.h"

#define AI static inline __attribute__((always_inline))

/* ---- small helpers -------------------------------------------------- */

AI float ld_f16(const void *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

AI float ld_f32(const void *p)
{
    float f;
    memcpy(&f, p, 4);
    return f;
}

/* One fixed order: (lo128 + hi128), then pairs, then the last two. */
AI float hsum_ps(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Lane k: hsum_ps(v[k]), the very same additions in the same order
 * ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)), for eight vectors at
 * once: 7 additions and 12 shuffles where eight hsum_ps take 24 and 24. */
AI __m256 hsum8_ps(__m256 v0, __m256 v1, __m256 v2, __m256 v3, __m256 v4, __m256 v5, __m256 v6,
                   __m256 v7)
{
    /* u[j]: lanes i + (i + 4) of vj low, of v(j + 4) high */
    const __m256 u[4] = {
        _mm256_add_ps(_mm256_permute2f128_ps(v0, v4, 0x20), _mm256_permute2f128_ps(v0, v4, 0x31)),
        _mm256_add_ps(_mm256_permute2f128_ps(v1, v5, 0x20), _mm256_permute2f128_ps(v1, v5, 0x31)),
        _mm256_add_ps(_mm256_permute2f128_ps(v2, v6, 0x20), _mm256_permute2f128_ps(v2, v6, 0x31)),
        _mm256_add_ps(_mm256_permute2f128_ps(v3, v7, 0x20), _mm256_permute2f128_ps(v3, v7, 0x31))};
    /* (0 + 2, 1 + 3) of two vectors' halves side by side */
    __m256 a = _mm256_add_ps(_mm256_shuffle_ps(u[0], u[1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm256_shuffle_ps(u[0], u[1], _MM_SHUFFLE(3, 2, 3, 2)));
    __m256 b = _mm256_add_ps(_mm256_shuffle_ps(u[2], u[3], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm256_shuffle_ps(u[2], u[3], _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm256_add_ps(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
}

AI int32_t hsum_epi32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* u8 x s8 -> 8 int32 lanes, lane i = sum of products of bytes 4i..4i+3.
 * The AVX2 form saturates 16-bit pair sums, so callers keep u * s pairs
 * within int16: here u <= 128 and |s| <= 127 always hold. */
AI __m256i idot(__m256i u, __m256i s)
{
#if X86_VNNI
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

/* acc + per-lane sums of (u * s) pairs times the int16 scales sc16. */
AI __m256i sdot_acc(__m256i acc, __m256i u, __m256i s, __m256i sc16)
{
#if X86_VNNI
    return _mm256_dpwssd_epi32(acc, _mm256_maddubs_epi16(u, s), sc16);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), sc16));
#endif
}

/* Two 16-bit scales: a in lanes 0..7 (bytes 0..15), b in lanes 8..15. */
AI __m256i sc_pair(int a, int b)
{
    return _mm256_set_m128i(_mm_set1_epi16((short)b), _mm_set1_epi16((short)a));
}

/* ---- tile driver ---------------------------------------------------- */

/* Rows of activations per tile; columns (weight rows) per tile is 2 for
 * full row tiles, 4 when fewer than 3 rows remain (decode), so a lone
 * activation row still runs several independent chains. */
#define TR 4
#define TCMAX 4
/* Weight rows are taken in blocks of about this many bytes, which stay in
 * L2 while every activation row-tile passes over them. */
#define COL_BLOCK_BYTES (256 * 1024)

#define TILE_PARAMS                                                                                \
    int64_t n, int R, int C, const char *x, size_t xs, const char *w, size_t ws, float *y, size_t ldy

#define TILE_CASE(tile, R, C)                                                                      \
    case (R)*8 + (C):                                                                              \
        tile(n, R, C, xp, xs, wp, ws, yp, ldy);                                                    \
        break;

#define DEFINE_GEMM(name, tile)                                                                    \
    static void name(int64_t n, int nr, int nc, const void *x, size_t xs, const void *w,          \
                     size_t ws, float *y, size_t ldy)                                             \
    {                                                                                              \
        int cb = ws > 0 && ws < (size_t)COL_BLOCK_BYTES / 4 ? (int)(COL_BLOCK_BYTES / ws) & ~3 : 4; \
        for (int cb0 = 0; cb0 < nc; cb0 += cb) {                                                   \
        int cend = nc - cb0 < cb ? nc : cb0 + cb;                                                  \
        for (int r0 = 0; r0 < nr; r0 += TR) {                                                      \
            int mr = nr - r0 < TR ? nr - r0 : TR;                                                  \
            int tc = mr >= 3 ? 2 : 4;                                                              \
            for (int c0 = cb0; c0 < cend; c0 += tc) {                                              \
                int mc = cend - c0 < tc ? cend - c0 : tc;                                          \
                const char *xp = (const char *)x + (size_t)r0 * xs;                               \
                const char *wp = (const char *)w + (size_t)c0 * ws;                               \
                float *yp = y + (size_t)r0 * ldy + c0;                                             \
                switch (mr * 8 + mc) {                                                             \
                    TILE_CASE(tile, 1, 1) TILE_CASE(tile, 1, 2) TILE_CASE(tile, 1, 3)              \
                    TILE_CASE(tile, 1, 4) TILE_CASE(tile, 2, 1) TILE_CASE(tile, 2, 2)              \
                    TILE_CASE(tile, 2, 3) TILE_CASE(tile, 2, 4) TILE_CASE(tile, 3, 1)              \
                    TILE_CASE(tile, 3, 2) TILE_CASE(tile, 4, 1) TILE_CASE(tile, 4, 2)              \
                default:                                                                           \
                    break;                                                                         \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        }                                                                                          \
    }

#define FOR_R for (int r = 0; r < R; r++)
#define FOR_C for (int c = 0; c < C; c++)
#define UNROLL _Pragma("GCC unroll 4")

/* ---- float weights: F32, F16, BF16 ---------------------------------- */

/* Eight weights of row c at element i, as floats. kind: 0 f32, 1 f16, 2 bf16. */
AI __m256 load_w8(int kind, const char *row, int64_t i)
{
    if (kind == 0)
        return _mm256_loadu_ps((const float *)row + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + i));
    if (kind == 1)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* The last n % 8 weights, zero-padded to eight. */
AI __m256 load_w8_tail(int kind, const char *row, int64_t i, int m)
{
    if (kind == 0) {
        float t[8] = {0};
        memcpy(t, (const float *)row + i, (size_t)m * 4);
        return _mm256_loadu_ps(t);
    }
    uint16_t t[8] = {0};
    memcpy(t, (const uint16_t *)row + i, (size_t)m * 2);
    return load_w8(kind, (const char *)t, 0);
}

/* gemm_f32 / gemm_f16 / gemm_bf16 of ref.c: per output one 8-lane sum,
 * elements 8k..8k+7 into lane order, the zero-padded tail last. */
AI void tile_float(int kind, int64_t n, int R, int C, const char *x, size_t xs, const char *w,
                   size_t ws, float *y, size_t ldy)
{
    __m256 acc[TR][TCMAX];
    UNROLL FOR_R UNROLL FOR_C acc[r][c] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 wv[TCMAX];
        /* a step reads 32 (f32) or 16 bytes of each row */
        if (!(i & (kind ? 31 : 15)))
            UNROLL FOR_C pf_lines(w + (size_t)c * ws + (size_t)i * (kind ? 2 : 4), 1);
        UNROLL FOR_C wv[c] = load_w8(kind, w + (size_t)c * ws, i);
        UNROLL FOR_R
        {
            __m256 xv = _mm256_loadu_ps((const float *)(x + (size_t)r * xs) + i);
            UNROLL FOR_C acc[r][c] = _mm256_fmadd_ps(wv[c], xv, acc[r][c]);
        }
    }
    if (i < n) {
        int m = (int)(n - i);
        __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(m), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        __m256 wv[TCMAX];
        UNROLL FOR_C wv[c] = load_w8_tail(kind, w + (size_t)c * ws, i, m);
        UNROLL FOR_R
        {
            __m256 xv = _mm256_maskload_ps((const float *)(x + (size_t)r * xs) + i, mask);
            UNROLL FOR_C acc[r][c] = _mm256_fmadd_ps(wv[c], xv, acc[r][c]);
        }
    }
    UNROLL FOR_R UNROLL FOR_C y[(size_t)r * ldy + c] = hsum_ps(acc[r][c]);
}

AI void tile_f32(TILE_PARAMS) { tile_float(0, n, R, C, x, xs, w, ws, y, ldy); }
AI void tile_f16(TILE_PARAMS) { tile_float(1, n, R, C, x, xs, w, ws, y, ldy); }
AI void tile_bf16(TILE_PARAMS) { tile_float(2, n, R, C, x, xs, w, ws, y, ldy); }
DEFINE_GEMM(x86_gemm_f32, tile_f32)
DEFINE_GEMM(x86_gemm_f16, tile_f16)
DEFINE_GEMM(x86_gemm_bf16, tile_bf16)

/* ---- Q8_0 and Q4_0 weights, Q8_0 activations ------------------------ */

/* gemm_q8_0 / gemm_q4_0 of ref.c. Per block: the signed weights wq, whose
 * magnitudes |wq| (u8) meet the activations with wq's sign moved onto
 * them, so one u8 x s8 dot gives 8 exact lane sums; the lanes are scaled
 * by d_w * d_x and summed into 8 float lanes. */
AI void tile_q80(int q4, int64_t n, int R, int C, const char *x, size_t xs, const char *w,
                 size_t ws, float *y, size_t ldy)
{
    const size_t wbs = q4 ? sizeof(struct ifl_block_q4_0) : sizeof(struct ifl_block_q8_0);
    __m256 acc[TR][TCMAX];
    UNROLL FOR_R UNROLL FOR_C acc[r][c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / IFL_QK; b++) {
        __m256i wq[TCMAX], wu[TCMAX];
        float wd[TCMAX];
        UNROLL FOR_C
        {
            const char *blk = w + (size_t)c * ws + (size_t)b * wbs;
            if (!(b & (q4 ? 3 : 1))) /* a block is 18 or 34 bytes */
                pf_lines(blk, 1);
            wd[c] = ld_f16(blk);
            if (q4) {
                __m128i q = _mm_loadu_si128((const __m128i *)(blk + 2));
                __m128i lo = _mm_and_si128(q, _mm_set1_epi8(15));
                __m128i hi = _mm_and_si128(_mm_srli_epi16(q, 4), _mm_set1_epi8(15));
                wq[c] = _mm256_sub_epi8(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(8));
            } else {
                wq[c] = _mm256_loadu_si256((const __m256i *)(blk + 2));
            }
            wu[c] = _mm256_abs_epi8(wq[c]);
        }
        UNROLL FOR_R
        {
            const char *xb = x + (size_t)r * xs + (size_t)b * sizeof(struct ifl_block_q8_0);
            float xd = ld_f16(xb);
            __m256i xq = _mm256_loadu_si256((const __m256i *)(xb + 2));
            UNROLL FOR_C
            {
                __m256i p = idot(wu[c], _mm256_sign_epi8(xq, wq[c]));
                acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(wd[c] * xd), _mm256_cvtepi32_ps(p),
                                            acc[r][c]);
            }
        }
    }
    UNROLL FOR_R UNROLL FOR_C y[(size_t)r * ldy + c] = hsum_ps(acc[r][c]);
}

AI void tile_q8_0(TILE_PARAMS) { tile_q80(0, n, R, C, x, xs, w, ws, y, ldy); }
AI void tile_q4_0(TILE_PARAMS) { tile_q80(1, n, R, C, x, xs, w, ws, y, ldy); }
DEFINE_GEMM(x86_gemm_q8_0, tile_q8_0)
DEFINE_GEMM(x86_gemm_q4_0, tile_q4_0)

/* ---- K-quant weights, Q8_K activations ------------------------------ */

/* Offsets inside a Q8_K block. */
#define Q8K_D 0
#define Q8K_QS 4
#define Q8K_BSUMS (4 + IFL_QK_K)

/* gemm_q4_k / gemm_q5_k of ref.c. Per super-block and output: isum (8 int
 * lanes) = sum_j sc[j] * dot(q_j, x_j); msum (exact int) = sum_j m[j] *
 * (sum of x_j) from bsums; then acc += (d_x d) * isum lanes and
 * macc += (d_x dmin) * msum; the output is hsum(acc) - macc. */
AI void tile_kx(int q5, int64_t n, int R, int C, const char *x, size_t xs, const char *w,
                size_t ws, float *y, size_t ldy)
{
    const size_t wbs = q5 ? sizeof(struct ifl_block_q5_k) : sizeof(struct ifl_block_q4_k);
    const size_t qs_off = q5 ? offsetof(struct ifl_block_q5_k, qs) : offsetof(struct ifl_block_q4_k, qs);
    const __m256i m4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
    __m256 acc[TR][TCMAX];
    float macc[TR][TCMAX];
    UNROLL FOR_R UNROLL FOR_C
    {
        acc[r][c] = _mm256_setzero_ps();
        macc[r][c] = 0.0f;
    }
    const size_t xbs = sizeof(struct ifl_block_q8_k);
    for (int64_t b = 0; b < n / IFL_QK_K; b++) {
        uint8_t sc[TCMAX][8];
        __m256i mins16[TCMAX], qh[TCMAX];
        float wd[TCMAX], wdm[TCMAX];
        UNROLL FOR_C
        {
            const char *blk = w + (size_t)c * ws + (size_t)b * wbs;
            const uint8_t *s = (const uint8_t *)blk + 4;
            uint8_t m[8];
            for (int j = 0; j < 8; j++)
                ifl_k4_scale_min(s, j, &sc[c][j], &m[j]);
            /* m[j] twice, to meet bsums[2j] and bsums[2j + 1] */
            mins16[c] = _mm256_setr_epi16(m[0], m[0], m[1], m[1], m[2], m[2], m[3], m[3], m[4],
                                          m[4], m[5], m[5], m[6], m[6], m[7], m[7]);
            wd[c] = ld_f16(blk);
            wdm[c] = ld_f16(blk + 2);
            pf_lines(blk, q5 ? 3 : 2); /* a super-block is 176 or 144 bytes */
            qh[c] = q5 ? _mm256_loadu_si256((const __m256i *)(blk + 16)) : _mm256_setzero_si256();
        }
        __m256i isum[TR][TCMAX];
        UNROLL FOR_R UNROLL FOR_C isum[r][c] = _mm256_setzero_si256();
        for (int k = 0; k < 4; k++) {
            UNROLL FOR_C
            {
                const char *blk = w + (size_t)c * ws + (size_t)b * wbs;
                __m256i q = _mm256_loadu_si256((const __m256i *)(blk + qs_off + 32 * k));
                __m256i lo = _mm256_and_si256(q, m4);
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                if (q5) {
                    __m256i h = _mm256_srl_epi16(qh[c], _mm_cvtsi32_si128(2 * k));
                    lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(h, one), 4));
                    hi = _mm256_or_si256(
                        hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 1), one), 4));
                }
                __m256i s0 = _mm256_set1_epi16(sc[c][2 * k]);
                __m256i s1 = _mm256_set1_epi16(sc[c][2 * k + 1]);
                UNROLL FOR_R
                {
                    const char *xq = x + (size_t)r * xs + (size_t)b * xbs + Q8K_QS + 64 * k;
                    __m256i x0 = _mm256_loadu_si256((const __m256i *)xq);
                    __m256i x1 = _mm256_loadu_si256((const __m256i *)(xq + 32));
                    isum[r][c] = sdot_acc(isum[r][c], lo, x0, s0);
                    isum[r][c] = sdot_acc(isum[r][c], hi, x1, s1);
                }
            }
        }
        UNROLL FOR_R
        {
            const char *xb = x + (size_t)r * xs + (size_t)b * xbs;
            float xd = ld_f32(xb + Q8K_D);
            __m256i bs = _mm256_loadu_si256((const __m256i *)(xb + Q8K_BSUMS));
            UNROLL FOR_C
            {
                int32_t msum = hsum_epi32(_mm256_madd_epi16(bs, mins16[c]));
                acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(xd * wd[c]),
                                            _mm256_cvtepi32_ps(isum[r][c]), acc[r][c]);
                macc[r][c] += xd * wdm[c] * (float)msum;
            }
        }
    }
    UNROLL FOR_R UNROLL FOR_C y[(size_t)r * ldy + c] = hsum_ps(acc[r][c]) - macc[r][c];
}

AI void tile_q4_k(TILE_PARAMS) { tile_kx(0, n, R, C, x, xs, w, ws, y, ldy); }
AI void tile_q5_k(TILE_PARAMS) { tile_kx(1, n, R, C, x, xs, w, ws, y, ldy); }
DEFINE_GEMM(x86_gemm_q4_k, tile_q4_k)
DEFINE_GEMM(x86_gemm_q5_k, tile_q5_k)

/* gemm_q6_k of ref.c. q in 0..63 goes through the u8 x s8 dot unsigned; the
 * -32 offset is taken back exactly as 32 * sum_j sc[j] * bsums[j]. Per
 * super-block: acc += d * isum lanes, macc += d * (32 * osum). */
AI void tile_q6k(int64_t n, int R, int C, const char *x, size_t xs, const char *w, size_t ws,
                 float *y, size_t ldy)
{
    const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3);
    const size_t wbs = sizeof(struct ifl_block_q6_k), xbs = sizeof(struct ifl_block_q8_k);
    __m256 acc[TR][TCMAX];
    float macc[TR][TCMAX];
    UNROLL FOR_R UNROLL FOR_C
    {
        acc[r][c] = _mm256_setzero_ps();
        macc[r][c] = 0.0f;
    }
    for (int64_t b = 0; b < n / IFL_QK_K; b++) {
        __m256i isum[TR][TCMAX];
        UNROLL FOR_R UNROLL FOR_C isum[r][c] = _mm256_setzero_si256();
        UNROLL FOR_C pf_lines(w + (size_t)c * ws + (size_t)b * wbs, 4); /* 210 bytes */
        for (int h = 0; h < 2; h++) {
            for (int v = 0; v < 4; v++) { /* elements 128h + 32v .. +31 */
                UNROLL FOR_C
                {
                    const struct ifl_block_q6_k *blk =
                        (const struct ifl_block_q6_k *)(w + (size_t)c * ws + (size_t)b * wbs);
                    __m256i ql = _mm256_loadu_si256((const __m256i *)(blk->ql + 64 * h + 32 * (v & 1)));
                    __m256i qh = _mm256_loadu_si256((const __m256i *)(blk->qh + 32 * h));
                    __m256i lo = v < 2 ? _mm256_and_si256(ql, m4)
                                       : _mm256_and_si256(_mm256_srli_epi16(ql, 4), m4);
                    __m256i hb = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * v)), m2);
                    __m256i q = _mm256_or_si256(lo, _mm256_slli_epi16(hb, 4));
                    const int8_t *sc = blk->scales + 8 * h + 2 * v;
                    __m256i s16 = sc_pair(sc[0], sc[1]);
                    UNROLL FOR_R
                    {
                        const char *xq = x + (size_t)r * xs + (size_t)b * xbs + Q8K_QS + 128 * h + 32 * v;
                        __m256i xv = _mm256_loadu_si256((const __m256i *)xq);
                        isum[r][c] = sdot_acc(isum[r][c], q, xv, s16);
                    }
                }
            }
        }
        UNROLL FOR_R
        {
            const char *xb = x + (size_t)r * xs + (size_t)b * xbs;
            float xd = ld_f32(xb + Q8K_D);
            __m256i bs = _mm256_loadu_si256((const __m256i *)(xb + Q8K_BSUMS));
            UNROLL FOR_C
            {
                const struct ifl_block_q6_k *blk =
                    (const struct ifl_block_q6_k *)(w + (size_t)c * ws + (size_t)b * wbs);
                __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)blk->scales));
                int32_t osum = hsum_epi32(_mm256_madd_epi16(bs, sc16));
                float d = xd * ld_f16(&blk->d);
                acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(isum[r][c]), acc[r][c]);
                macc[r][c] += d * (float)(32 * osum);
            }
        }
    }
    UNROLL FOR_R UNROLL FOR_C y[(size_t)r * ldy + c] = hsum_ps(acc[r][c]) - macc[r][c];
}

DEFINE_GEMM(x86_gemm_q6_k, tile_q6k)

/* ---- activation quantisation ---------------------------------------- */

/* roundf (half away from zero) of each lane, exactly: truncate, then step
 * away from zero where the dropped fraction is at least one half. */
AI __m256 round_away(__m256 v)
{
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 t = _mm256_round_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m256 frac = _mm256_andnot_ps(sign, _mm256_sub_ps(v, t));
    __m256 step = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(sign, v));
    __m256 ge = _mm256_cmp_ps(frac, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
    return _mm256_add_ps(t, _mm256_and_ps(ge, step));
}

/* Four vectors of 8 int32 (each in -128..127) -> 32 int8 in order. */
AI __m256i pack_32(__m256i a, __m256i b, __m256i c, __m256i d)
{
    __m256i ab = _mm256_packs_epi32(a, b), cd = _mm256_packs_epi32(c, d);
    __m256i p = _mm256_packs_epi16(ab, cd);
    return _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

AI float hmax_ps(__m256 v)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* quant_q8_0 of ref.c, bit for bit. */
static void x86_quant_q8_0(const float *x, void *vy, int64_t n)
{
    struct ifl_block_q8_0 *y = vy;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t b = 0; b < n / IFL_QK; b++, x += IFL_QK) {
        __m256 v[4], amax = _mm256_setzero_ps();
        for (int i = 0; i < 4; i++) {
            v[i] = _mm256_loadu_ps(x + 8 * i);
            amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[i]));
        }
        float d = hmax_ps(amax) / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = ifl_f32_to_f16(d);
        __m256i q[4];
        for (int i = 0; i < 4; i++)
            q[i] = _mm256_cvttps_epi32(round_away(_mm256_mul_ps(v[i], _mm256_set1_ps(id))));
        _mm256_storeu_si256((__m256i *)y[b].qs, pack_32(q[0], q[1], q[2], q[3]));
    }
}

/* quant_q8_k of ref.c, bit for bit: the first element of largest
 * magnitude sets the scale; cvtps rounds to nearest even like nearest_int. */
static void x86_quant_q8_k(const float *x, void *vy, int64_t n)
{
    struct ifl_block_q8_k *y = vy;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int64_t b = 0; b < n / IFL_QK_K; b++, x += IFL_QK_K) {
        __m256 amax = _mm256_setzero_ps();
        for (int i = 0; i < IFL_QK_K; i += 8)
            amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
        float am = hmax_ps(amax);
        if (am == 0.0f) {
            memset(&y[b], 0, sizeof(y[b]));
            continue;
        }
        float max = 0.0f;
        __m256 amv = _mm256_set1_ps(am);
        for (int i = 0; i < IFL_QK_K; i += 8) {
            __m256 eq = _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)), amv, _CMP_EQ_OQ);
            int mask = _mm256_movemask_ps(eq);
            if (mask) {
                max = x[i + __builtin_ctz((unsigned)mask)];
                break;
            }
        }
        float iscale = -127.0f / max;
        __m256 is = _mm256_set1_ps(iscale);
        const __m256i cap = _mm256_set1_epi32(127);
        for (int i = 0; i < IFL_QK_K; i += 32) {
            __m256i q[4];
            for (int k = 0; k < 4; k++)
                q[k] = _mm256_min_epi32(
                    _mm256_cvtps_epi32(_mm256_mul_ps(is, _mm256_loadu_ps(x + i + 8 * k))), cap);
            _mm256_storeu_si256((__m256i *)(y[b].qs + i), pack_32(q[0], q[1], q[2], q[3]));
        }
        for (int j = 0; j < IFL_QK_K / 16; j++) {
            __m128i q = _mm_loadu_si128((const __m128i *)(y[b].qs + 16 * j));
            __m256i q16 = _mm256_cvtepi8_epi16(q);
            int32_t s = hsum_epi32(_mm256_madd_epi16(q16, _mm256_set1_epi16(1)));
            y[b].bsums[j] = (int16_t)s;
        }
        y[b].d = 1.0f / iscale;
    }
}

/* dequant_f16 of ref.c, bit for bit (F16C conversion is exact). */
static void x86_dequant_f16(const void *vx, float *y, int64_t n)
{
    const uint16_t *x = vx;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(x + i))));
    for (; i < n; i++)
        y[i] = ifl_f16_to_f32(x[i]);
}

/* ---- F16 KV-cache helpers ------------------------------------------- */

/* dot_f16 of ref.c (reassociated). Fixed order for a given n: four 8-lane
 * sums over 32-element steps, a remaining 8-step into the first, the
 * zero-padded tail into the second, then (s0 + s1) + (s2 + s3). */
AI __m256 ld_f16x8(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

static float x86_dot_f16(int64_t n, const uint16_t *k, const float *q)
{
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm256_fmadd_ps(ld_f16x8(k + i), _mm256_loadu_ps(q + i), s0);
        s1 = _mm256_fmadd_ps(ld_f16x8(k + i + 8), _mm256_loadu_ps(q + i + 8), s1);
        s2 = _mm256_fmadd_ps(ld_f16x8(k + i + 16), _mm256_loadu_ps(q + i + 16), s2);
        s3 = _mm256_fmadd_ps(ld_f16x8(k + i + 24), _mm256_loadu_ps(q + i + 24), s3);
    }
    for (; i + 8 <= n; i += 8)
        s0 = _mm256_fmadd_ps(ld_f16x8(k + i), _mm256_loadu_ps(q + i), s0);
    if (i < n) {
        uint16_t kt[8] = {0};
        float qt[8] = {0};
        memcpy(kt, k + i, (size_t)(n - i) * 2);
        memcpy(qt, q + i, (size_t)(n - i) * 4);
        s1 = _mm256_fmadd_ps(ld_f16x8(kt), _mm256_loadu_ps(qt), s1);
    }
    return hsum_ps(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
}

/* axpy_f16 of ref.c, bit for bit: one fused multiply-add a value. */
static void x86_axpy_f16(int64_t n, float a, const uint16_t *v, float *y)
{
    __m256 av = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(v + i)));
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, x, _mm256_loadu_ps(y + i)));
    }
    for (; i < n; i++)
        y[i] = fmaf(a, ifl_f16_to_f32(v[i]), y[i]);
}

/* ---- attention over a block of cached positions ------------------- */

/* attn_qk_f16 / attn_qk_q8_0 and attn_pv_f16 / attn_pv_q8_0 of ref.c. A
 * call covers nt cached positions for the nq query heads of one KV group;
 * the kernels walk it in tiles of Q heads by T positions (scores) or Q
 * heads by J vectors of output (values), so each cached row is loaded and
 * converted once per tile and shared by its Q heads.
 *
 * Scores: each one is a single 8-lane FMA chain over the head, elements
 * 8k .. 8k + 7 into lane order and a zero-padded tail last, folded by
 * hsum_ps and then scaled; it equals ref within float reassociation.
 * Values: per position in ascending order, one fused multiply-add on each
 * output value (one rounding), which is ref's fmaf bit for bit. For Q8_0
 * the cached value is first formed as d * q (exact: 11 by 8 significant
 * bits), as q8_at does in ref.
 * In both directions the sequence of operations behind one output does
 * not depend on the tile it falls in, so nq and nt of a call never change
 * a result's bits. */

#define UNROLL8 _Pragma("GCC unroll 8")

/* Lanes 0 .. m-1 set, for maskload / maskstore. */
AI __m256i lanes_lt(int m)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(m), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* The first m < 8 values of an F16 row, zero-padded; a copy, since the
 * eight-wide load could run past the cache's last row. */
AI __m256 ld_f16_part(const uint16_t *p, int m)
{
    uint16_t t[8] = {0};
    memcpy(t, p, (size_t)m * 2);
    return ld_f16x8(t);
}

/* Eight cached values from element e of a row (e % 8 == 0, e < d). kind 0:
 * the row is F16; kind 1: it is Q8_0 blocks and dq holds the scale of the
 * block that e falls in, so the values are d * q as dequant_q8_0 gives. */
AI __m256 ld_kv8(int kind, const char *row, int e, __m256 dq)
{
    if (kind == 0)
        return ld_f16x8((const uint16_t *)row + e);
    const char *blk = row + (size_t)(e / IFL_QK) * sizeof(struct ifl_block_q8_0);
    __m128i q = _mm_loadl_epi64((const __m128i *)(blk + 2 + e % IFL_QK));
    return _mm256_mul_ps(dq, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
}

/* Scale of the Q8_0 block holding element e, in every lane. */
AI __m256 ld_q8_scale(const char *row, int e)
{
    return _mm256_set1_ps(ld_f16(row + (size_t)(e / IFL_QK) * sizeof(struct ifl_block_q8_0)));
}

/* Scores of Q heads (q, d floats apart) against T cached rows (k, ks bytes
 * apart): Q * T independent FMA chains, which keeps both FMA ports busy.
 * Steps of 32 elements (one Q8_0 block), then single vectors, then the
 * partial vector (F16 only: Q8_0 heads are whole blocks). */
AI void qk_tile(int kind, int Q, int T, int d, const float *q, const char *k, size_t ks,
                float scale, float *s, size_t lds)
{
    __m256 acc[4][8];
    UNROLL8 for (int i = 0; i < Q; i++) UNROLL8 for (int t = 0; t < T; t++) acc[i][t] =
        _mm256_setzero_ps();
    int j = 0;
    for (; j + 32 <= d; j += 32) {
        __m256 dq[8];
        UNROLL8 for (int t = 0; t < T; t++) dq[t] =
            kind ? ld_q8_scale(k + (size_t)t * ks, j) : _mm256_setzero_ps();
        UNROLL8 for (int v = 0; v < 4; v++)
        {
            __m256 kv[8];
            UNROLL8 for (int t = 0; t < T; t++) kv[t] =
                ld_kv8(kind, k + (size_t)t * ks, j + 8 * v, dq[t]);
            UNROLL8 for (int i = 0; i < Q; i++)
            {
                __m256 qv = _mm256_loadu_ps(q + (size_t)i * d + j + 8 * v);
                UNROLL8 for (int t = 0; t < T; t++) acc[i][t] =
                    _mm256_fmadd_ps(kv[t], qv, acc[i][t]);
            }
        }
    }
    if (kind == 0) {
        for (; j + 8 <= d; j += 8) {
            __m256 kv[8];
            UNROLL8 for (int t = 0; t < T; t++) kv[t] =
                ld_kv8(0, k + (size_t)t * ks, j, _mm256_setzero_ps());
            UNROLL8 for (int i = 0; i < Q; i++)
            {
                __m256 qv = _mm256_loadu_ps(q + (size_t)i * d + j);
                UNROLL8 for (int t = 0; t < T; t++) acc[i][t] =
                    _mm256_fmadd_ps(kv[t], qv, acc[i][t]);
            }
        }
        if (j < d) {
            const int m = d - j;
            const __m256i mask = lanes_lt(m);
            __m256 kv[8];
            UNROLL8 for (int t = 0; t < T; t++) kv[t] =
                ld_f16_part((const uint16_t *)(k + (size_t)t * ks) + j, m);
            UNROLL8 for (int i = 0; i < Q; i++)
            {
                __m256 qv = _mm256_maskload_ps(q + (size_t)i * d + j, mask);
                UNROLL8 for (int t = 0; t < T; t++) acc[i][t] =
                    _mm256_fmadd_ps(kv[t], qv, acc[i][t]);
            }
        }
    }
    if (Q * T == 8) {
        /* the eight scores folded together, each in hsum_ps's order; the
         * accumulators go in by name (copied into an array first, they
         * went through the stack in a loop: one call of a tinyllama
         * decode, 8 heads by 16 positions in L1, took 1200 cycles, now
         * 880) */
        float r[8];
#define ACC(m) acc[((m) / T) & 3][(m) % T] /* (& 3: Q * T is 8) */
        const __m256 h = hsum8_ps(ACC(0), ACC(1), ACC(2), ACC(3), ACC(4), ACC(5), ACC(6), ACC(7));
#undef ACC
        _mm256_storeu_ps(r, _mm256_mul_ps(_mm256_set1_ps(scale), h));
        UNROLL8 for (int i = 0; i < Q; i++) UNROLL8 for (int t = 0; t < T; t++) s[(size_t)i * lds + t] =
            r[i * T + t];
        return;
    }
    UNROLL8 for (int i = 0; i < Q; i++) UNROLL8 for (int t = 0; t < T; t++) s[(size_t)i * lds + t] =
        scale * hsum_ps(acc[i][t]);
}

/* All nt positions for Q heads: eight chains per tile where there are
 * enough positions, the leftover positions in halving tiles. */
AI void qk_heads(int kind, int Q, int d, const float *q, const char *k, size_t ks, int nt,
                 float scale, float *s, size_t lds)
{
    const int T = Q >= 3 ? 2 : Q == 2 ? 4 : 8;
    int t = 0;
    for (; t + T <= nt; t += T)
        qk_tile(kind, Q, T, d, q, k + (size_t)t * ks, ks, scale, s + t, lds);
    if (T > 4 && nt - t >= 4) {
        qk_tile(kind, Q, 4, d, q, k + (size_t)t * ks, ks, scale, s + t, lds);
        t += 4;
    }
    if (T > 2 && nt - t >= 2) {
        qk_tile(kind, Q, 2, d, q, k + (size_t)t * ks, ks, scale, s + t, lds);
        t += 2;
    }
    if (t < nt)
        qk_tile(kind, Q, 1, d, q, k + (size_t)t * ks, ks, scale, s + t, lds);
}

/* Every query head, in tiles (x86_heads.h). */
AI void qk_group(int kind, int d, int nq, const float *q, const char *k, size_t ks, int nt,
                 float scale, float *s, size_t lds)
{
#define QK(Q, i) qk_heads(kind, Q, d, q + (size_t)(i) * d, k, ks, nt, scale, s + (size_t)(i) * lds, lds)
    FOR_HEAD_TILES(nq, QK);
#undef QK
}

static void x86_attn_qk_f16(int d, int nq, const float *q, const uint16_t *k, size_t ks, int nt,
                            float scale, float *s, size_t lds)
{
    qk_group(0, d, nq, q, (const char *)k, ks * 2, nt, scale, s, lds);
}

static void x86_attn_qk_q8_0(int d, int nq, const float *q, const void *k, size_t ks, int nt,
                             float scale, float *s, size_t lds)
{
    qk_group(1, d, nq, q, k, ks, nt, scale, s, lds);
}

/* Output values j0 .. j0 + 8J - 1 of Q heads (o, d floats apart), held in
 * registers across all nt positions (v, vs bytes apart; weights p, ldp
 * apart). part: the last vector holds only d - j0 - 8(J - 1) < 8 values
 * (F16 only). For Q8_0, j0 is a multiple of min(8J, 32), so the tile's
 * vectors jj lie in block j0 / 32 + jj / 4. */
AI void pv_tile(int kind, int Q, int J, int part, int d, int j0, const float *p, size_t ldp,
                const char *v, size_t vs, int nt, float *o)
{
    const int m = part ? d - j0 - 8 * (J - 1) : 8;
    const __m256i mask = lanes_lt(m);
    __m256 acc[4][8];
    UNROLL8 for (int i = 0; i < Q; i++) UNROLL8 for (int jj = 0; jj < J; jj++)
    {
        float *op = o + (size_t)i * d + j0 + 8 * jj;
        acc[i][jj] = part && jj == J - 1 ? _mm256_maskload_ps(op, mask) : _mm256_loadu_ps(op);
    }
    for (int t = 0; t < nt; t++) {
        const char *row = v + (size_t)t * vs;
        __m256 a[4], dq[2];
        UNROLL8 for (int i = 0; i < Q; i++) a[i] = _mm256_set1_ps(p[(size_t)i * ldp + t]);
        UNROLL8 for (int b = 0; b < (J + 3) / 4; b++) dq[b] =
            kind ? ld_q8_scale(row, j0 + 32 * b) : _mm256_setzero_ps();
        UNROLL8 for (int jj = 0; jj < J; jj++)
        {
            __m256 vv = part && jj == J - 1 ? ld_f16_part((const uint16_t *)row + j0 + 8 * jj, m)
                                            : ld_kv8(kind, row, j0 + 8 * jj, dq[jj / 4]);
            UNROLL8 for (int i = 0; i < Q; i++) acc[i][jj] =
                _mm256_fmadd_ps(a[i], vv, acc[i][jj]);
        }
    }
    UNROLL8 for (int i = 0; i < Q; i++) UNROLL8 for (int jj = 0; jj < J; jj++)
    {
        float *op = o + (size_t)i * d + j0 + 8 * jj;
        if (part && jj == J - 1)
            _mm256_maskstore_ps(op, mask, acc[i][jj]);
        else
            _mm256_storeu_ps(op, acc[i][jj]);
    }
}

/* The head's d values for Q heads: tiles of about eight accumulators (J
 * vectors by Q heads), the leftover whole vectors in halving tiles, then
 * the partial vector. Every j0 stays a multiple of min(8J, 32). */
AI void pv_heads(int kind, int Q, int d, const float *p, size_t ldp, const char *v, size_t vs,
                 int nt, float *o)
{
    const int J = Q >= 3 ? 2 : Q == 2 ? 4 : 8;
    int j0 = 0;
    for (; j0 + 8 * J <= d; j0 += 8 * J)
        pv_tile(kind, Q, J, 0, d, j0, p, ldp, v, vs, nt, o);
    if (J > 4 && d - j0 >= 32) {
        pv_tile(kind, Q, 4, 0, d, j0, p, ldp, v, vs, nt, o);
        j0 += 32;
    }
    if (J > 2 && d - j0 >= 16) {
        pv_tile(kind, Q, 2, 0, d, j0, p, ldp, v, vs, nt, o);
        j0 += 16;
    }
    if (d - j0 >= 8) {
        pv_tile(kind, Q, 1, 0, d, j0, p, ldp, v, vs, nt, o);
        j0 += 8;
    }
    if (kind == 0 && j0 < d)
        pv_tile(0, Q, 1, 1, d, j0, p, ldp, v, vs, nt, o);
}

/* Every query head, in tiles (x86_heads.h). */
AI void pv_group(int kind, int d, int nq, const float *p, size_t ldp, const char *v, size_t vs,
                 int nt, float *o)
{
#define PV(Q, i) pv_heads(kind, Q, d, p + (size_t)(i) * ldp, ldp, v, vs, nt, o + (size_t)(i) * d)
    FOR_HEAD_TILES(nq, PV);
#undef PV
}

static void x86_attn_pv_f16(int d, int nq, const float *p, size_t ldp, const uint16_t *v, size_t vs,
                            int nt, float *o)
{
    pv_group(0, d, nq, p, ldp, (const char *)v, vs * 2, nt, o);
}

static void x86_attn_pv_q8_0(int d, int nq, const float *p, size_t ldp, const void *v, size_t vs,
                             int nt, float *o)
{
    pv_group(1, d, nq, p, ldp, v, vs, nt, o);
}

/* cvt_f32_f16 of ref.c, bit for bit (F16C rounds to nearest even). */
static void x86_cvt_f32_f16(int64_t n, const float *x, uint16_t *y)
{
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(y + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; i++)
        y[i] = ifl_f32_to_f16(x[i]);
}

/* e^x: x = k ln2 + r with |r| <= ln2 / 2, e^r by its Taylor polynomial
 * to r^6 (truncation below 1.3e-7 relative), times 2^k built in the
 * exponent bits. x is first clamped to [-87, 88], so 2^k stays a normal
 * float: e^x of a larger x comes out near 1.7e38 instead of inf, and of a
 * smaller one near 1.6e-38 instead of 0 (no difference after 1 + e^x). */
AI __m256 exp8(__m256 x)
{
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.0f)), _mm256_set1_ps(88.0f));
    __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(0.693359375f), x); /* ln2 in two parts */
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.0f / 720);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

/* swiglu of ref.c, eight at a time; a tail of n % 8 uses expf. */
static void x86_swiglu(int64_t n, float *g, const float *u)
{
    int64_t i = 0;
    const __m256 one = _mm256_set1_ps(1.0f);
    for (; i + 8 <= n; i += 8) {
        __m256 gv = _mm256_loadu_ps(g + i);
        __m256 e = exp8(_mm256_sub_ps(_mm256_setzero_ps(), gv));
        _mm256_storeu_ps(g + i, _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++)
        g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

/* softmax_exp of ref.c, eight at a time, summed in four double lanes
 * (two per half) and then those in order; a tail of n % 8 uses expf. */
static double x86_softmax_exp(int64_t n, float *s, float mx)
{
    int64_t i = 0;
    const __m256 m = _mm256_set1_ps(mx);
    __m256d acc = _mm256_setzero_pd();
    for (; i + 8 <= n; i += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(s + i), m));
        _mm256_storeu_ps(s + i, e);
        acc = _mm256_add_pd(acc, _mm256_add_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(e)),
                                               _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1))));
    }
    double lane[4], sum;
    _mm256_storeu_pd(lane, acc);
    sum = (lane[0] + lane[1]) + (lane[2] + lane[3]);
    for (; i < n; i++) {
        s[i] = expf(s[i] - mx);
        sum += s[i];
    }
    return sum;
}

/* ---- the sampler's row passes (ref.c: max_f32, find_f32, exp_pass) ---- */

/* max_f32 of ref.c. vmaxps keeps its second operand when the first is
 * NaN, so NaN is skipped as in ref; the maximum does not depend on the
 * order (a +0 / -0 tie aside, which compares equal). */
static float x86_max_f32(int64_t n, const float *x)
{
    __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        m0 = _mm256_max_ps(_mm256_loadu_ps(x + i), m0);
        m1 = _mm256_max_ps(_mm256_loadu_ps(x + i + 8), m1);
    }
    m0 = _mm256_max_ps(m1, m0);
    __m128 h = _mm_max_ps(_mm256_extractf128_ps(m0, 1), _mm256_castps256_ps128(m0));
    h = _mm_max_ps(_mm_movehl_ps(h, h), h);
    h = _mm_max_ss(_mm_movehdup_ps(h), h);
    float m = _mm_cvtss_f32(h);
    for (; i < n; i++)
        if (x[i] > m)
            m = x[i];
    return m;
}

/* find_f32 of ref.c, 16 at a time. */
static int64_t x86_find_f32(int64_t n, const float *x, float v)
{
    const __m256 vv = _mm256_set1_ps(v);
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        int lo = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), vv, _CMP_EQ_OQ));
        int hi = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i + 8), vv, _CMP_EQ_OQ));
        if (lo | hi)
            return i + __builtin_ctz((unsigned)(lo | hi << 8));
    }
    while (i < n && x[i] != v)
        i++;
    return i;
}

/* ifl_kernels_exp in eight lanes: the same operations in the same order,
 * each rounded on its own. */
AI __m256 sexp8(__m256 x)
{
    const __m256 lo = _mm256_set1_ps(-87.0f), magic = _mm256_set1_ps(IFL_EXP_ROUND);
    x = _mm256_blendv_ps(x, lo, _mm256_cmp_ps(x, lo, _CMP_LT_OQ));
    __m256 n = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(IFL_EXP_LOG2E)), magic),
                             magic);
    __m256 r = _mm256_sub_ps(_mm256_sub_ps(x, _mm256_mul_ps(n, _mm256_set1_ps(IFL_EXP_LN2_HI))),
                             _mm256_mul_ps(n, _mm256_set1_ps(IFL_EXP_LN2_LO)));
    __m256 p = _mm256_add_ps(_mm256_mul_ps(r, _mm256_set1_ps(IFL_EXP_P0)), _mm256_set1_ps(IFL_EXP_P1));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(IFL_EXP_P2));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(IFL_EXP_P3));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(IFL_EXP_P4));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(IFL_EXP_P5));
    p = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(p, r), r), r), _mm256_set1_ps(1.0f));
    __m256i s = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(s));
}

/* A block of 16 as exp_pass of ref.c adds it: lanes j = 0..3 summed over
 * the four quarters in order from 0.0f, then (0 + 1) + (2 + 3). */
AI float block16_sum(__m256 a, __m256 b)
{
    __m128 s = _mm_add_ps(_mm_setzero_ps(), _mm256_castps256_ps128(a));
    s = _mm_add_ps(s, _mm256_extractf128_ps(a, 1));
    s = _mm_add_ps(s, _mm256_castps256_ps128(b));
    s = _mm_add_ps(s, _mm256_extractf128_ps(b, 1));
    s = _mm_add_ps(s, _mm_movehdup_ps(s)); /* lane 0: s0 + s1, lane 2: s2 + s3 */
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehl_ps(s, s)));
}

/* One vector of exp_pass: e (0 for non-candidates) and v of x[0..8). */
AI __m256 exp_pass8(const float *x, const struct ifl_exp_pass *a, int divide, __m256 *v,
                    int want_count, int32_t *cnt)
{
    __m256 vv = _mm256_sub_ps(_mm256_loadu_ps(x), _mm256_set1_ps(a->m));
    if (divide)
        vv = _mm256_div_ps(vv, _mm256_set1_ps(a->t));
    __m256 ok = _mm256_cmp_ps(vv, _mm256_set1_ps(-a->cutoff), _CMP_GE_OQ);
    vv = _mm256_and_ps(vv, ok);
    __m256 ee = sexp8(vv);
    ok = _mm256_and_ps(ok, _mm256_cmp_ps(ee, _mm256_set1_ps(a->min_e), _CMP_GE_OQ));
    if (want_count)
        *cnt += __builtin_popcount((unsigned)_mm256_movemask_ps(ok));
    *v = vv;
    return _mm256_and_ps(ee, ok);
}

/* NV / 2 blocks of 16 at x + i (NV = 2 or 4), as exp_pass of ref.c does
 * them; adds their sums into *sum and *sev in order. */
AI void exp_blocks(int NV, int64_t i, const float *x, const struct ifl_exp_pass *a, int divide,
                   int want_e, int want_v, int want_sev, int want_count, double *sum, double *sev,
                   int32_t *cnt)
{
    __m256 e[4], v[4];
    _Pragma("GCC unroll 4") for (int h = 0; h < NV; h++)
    {
        e[h] = exp_pass8(x + i + 8 * h, a, divide, &v[h], want_count, cnt);
        if (want_e)
            _mm256_storeu_ps(a->e + i + 8 * h, e[h]);
        if (want_v)
            _mm256_storeu_ps(a->v + i + 8 * h, v[h]);
    }
    _Pragma("GCC unroll 2") for (int h = 0; h < NV; h += 2)
    {
        *sum += (double)block16_sum(e[h], e[h + 1]);
        if (want_sev)
            *sev += (double)block16_sum(_mm256_mul_ps(e[h], v[h]), _mm256_mul_ps(e[h + 1], v[h + 1]));
    }
}

/* exp_pass of ref.c, bit for bit: two blocks of 16 at a time (four
 * independent exponentials in flight: one block's two left the cores
 * waiting on each one's long chain of dependent operations; four blocks
 * were no faster), each block
 * summed as ref sums it, then the tail element by element as in ref.
 * Inlined into one copy per combination of outputs, so that the sum alone
 * (the log-sum-exp of a log-prob) does none of the stores and products. */
AI double exp_pass_body(int64_t n, const float *x, const struct ifl_exp_pass *a, int want_e,
                        int want_v, int want_sev, int want_count)
{
    const int divide = a->t != 1.0f;
    double sum = 0, sev = 0;
    int32_t cnt = 0;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
        exp_blocks(4, i, x, a, divide, want_e, want_v, want_sev, want_count, &sum, &sev, &cnt);
    if (i + 16 <= n) {
        exp_blocks(2, i, x, a, divide, want_e, want_v, want_sev, want_count, &sum, &sev, &cnt);
        i += 16;
    }
    return ifl_exp_finish(i, n, x, a, want_e, want_v, want_sev, want_count, sum, sev, cnt);
}

static double x86_exp_pass(int64_t n, const float *x, const struct ifl_exp_pass *a)
{
    if (!a->e && !a->v && !a->sum_ev && !a->count)
        return exp_pass_body(n, x, a, 0, 0, 0, 0);
    return exp_pass_body(n, x, a, a->e != NULL, a->v != NULL, a->sum_ev != NULL, a->count != NULL);
}

/* Entries common to both x86 tables. */
static void x86_fill(struct ifl_kernels *k)
{
    k->gemm[IFL_TYPE_F32] = x86_gemm_f32;
    k->gemm[IFL_TYPE_F16] = x86_gemm_f16;
    k->gemm[IFL_TYPE_BF16] = x86_gemm_bf16;
    k->gemm[IFL_TYPE_Q8_0] = x86_gemm_q8_0;
    k->gemm[IFL_TYPE_Q4_0] = x86_gemm_q4_0;
    k->gemm[IFL_TYPE_Q4_K] = x86_gemm_q4_k;
    k->gemm[IFL_TYPE_Q5_K] = x86_gemm_q5_k;
    k->gemm[IFL_TYPE_Q6_K] = x86_gemm_q6_k;
    k->quant[IFL_TYPE_Q8_0] = x86_quant_q8_0;
    k->quant[IFL_TYPE_Q8_K] = x86_quant_q8_k;
    k->dequant[IFL_TYPE_F16] = x86_dequant_f16;
    k->dot_f16 = x86_dot_f16;
    k->axpy_f16 = x86_axpy_f16;
    k->attn_qk_f16 = x86_attn_qk_f16;
    k->attn_pv_f16 = x86_attn_pv_f16;
    k->attn_qk_q8_0 = x86_attn_qk_q8_0;
    k->attn_pv_q8_0 = x86_attn_pv_q8_0;
    k->cvt_f32_f16 = x86_cvt_f32_f16;
    k->swiglu = x86_swiglu;
    k->softmax_exp = x86_softmax_exp;
    k->max_f32 = x86_max_f32;
    k->find_f32 = x86_find_f32;
    k->exp_pass = x86_exp_pass;
}
