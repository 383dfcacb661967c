/*
 * LoRA's products (kernels.h lora_a, lora_b, their F16 forms and the int8
 * lora_b_q8) in 512-bit AVX-512. Equal to ref.c's bit for bit: dot16's 16
 * lanes are one vector, a tail goes in under a mask (lanes outside it keep
 * their bits), the fold adds ref's pairs in ref's order; lora_b runs 16
 * columns per vector, each with ref's sequence of fused multiply-adds,
 * eight vectors of sums at a time. F16 values are widened exactly
 * (vcvtph2ps) before the same arithmetic. Each float function is written
 * once, for both element types (f16: 0 F32, 1 F16, a constant after
 * inlining). lora_b_q8's integer sums are exact, so VNNI's grouping of
 * them changes nothing.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/impl.h"

#define AI static inline __attribute__((always_inline))

AI float fold16(__m512 v)
{
    __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
    return _mm_cvtss_f32(s1);
}

/* 16 elements (m: those set; 0 outside) from i of an F32 or F16 array */
AI __m512 ld16(const void *p, size_t i, int f16, __mmask16 m)
{
    if (f16)
        return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, (const uint16_t *)p + i));
    return _mm512_maskz_loadu_ps(m, (const float *)p + i);
}

/* rr rows (1..4) by kk rows of a (1..8) from k0: rr * kk dot products
 * in flight, sharing the loads of a and of x, each still ref's dot16 */
AI void z_lora_a_tile(int f16, int rr, int kk, int64_t n, int k0, const void *a,
                      const int32_t *rows, const float *x, size_t ldx, float *t, size_t ldt)
{
    const int64_t n16 = n & ~(int64_t)15;
    const __mmask16 mt = (__mmask16)((1u << (n - n16)) - 1);
    const float *xr[4];
    __m512 p[4][8];
    _Pragma("GCC unroll 4") for (int i = 0; i < rr; i++)
    {
        xr[i] = x + (size_t)rows[i] * ldx;
        _Pragma("GCC unroll 8") for (int q = 0; q < kk; q++) p[i][q] = _mm512_setzero_ps();
    }
    for (int64_t e = 0; e < n16; e += 16) {
        __m512 av[8], xv[4];
        _Pragma("GCC unroll 8") for (int q = 0; q < kk; q++) av[q] =
            ld16(a, (size_t)(k0 + q) * (size_t)n + (size_t)e, f16, 0xffff);
        _Pragma("GCC unroll 4") for (int i = 0; i < rr; i++) xv[i] = _mm512_loadu_ps(xr[i] + e);
        _Pragma("GCC unroll 4") for (int i = 0; i < rr; i++)
            _Pragma("GCC unroll 8") for (int q = 0; q < kk; q++) p[i][q] =
                _mm512_fmadd_ps(av[q], xv[i], p[i][q]);
    }
    if (mt) {
        _Pragma("GCC unroll 8") for (int q = 0; q < kk; q++)
        {
            __m512 av = ld16(a, (size_t)(k0 + q) * (size_t)n + (size_t)n16, f16, mt);
            _Pragma("GCC unroll 4") for (int i = 0; i < rr; i++) p[i][q] =
                _mm512_mask3_fmadd_ps(av, _mm512_maskz_loadu_ps(mt, xr[i] + n16), p[i][q], mt);
        }
    }
    _Pragma("GCC unroll 4") for (int i = 0; i < rr; i++)
        _Pragma("GCC unroll 8") for (int q = 0; q < kk; q++) t[(size_t)i * ldt + (size_t)(k0 + q)] =
            fold16(p[i][q]);
}

/* rr rows (4, 2 or 1) by every row of a: 8 / rr of them at a time, then
 * one at a time */
AI void z_lora_a_rows(int f16, int rr, int64_t n, int nk, const void *a, const int32_t *rows,
                      const float *x, size_t ldx, float *t, size_t ldt)
{
    const int kk = 8 / rr;
    int k = 0;
    for (; k + kk <= nk; k += kk)
        z_lora_a_tile(f16, rr, kk, n, k, a, rows, x, ldx, t, ldt);
    for (; k < nk; k++)
        z_lora_a_tile(f16, rr, 1, n, k, a, rows, x, ldx, t, ldt);
}

AI void z_lora_a_t(int f16, int64_t n, int nk, const void *a, int nr, const int32_t *rows,
                   const float *x, size_t ldx, float *t, size_t ldt)
{
    int i = 0;
    for (; i + 4 <= nr; i += 4)
        z_lora_a_rows(f16, 4, n, nk, a, rows + i, x, ldx, t + (size_t)i * ldt, ldt);
    for (; i + 2 <= nr; i += 2)
        z_lora_a_rows(f16, 2, n, nk, a, rows + i, x, ldx, t + (size_t)i * ldt, ldt);
    for (; i < nr; i++)
        z_lora_a_rows(f16, 1, n, nk, a, rows + i, x, ldx, t + (size_t)i * ldt, ldt);
}

/* rr rows (1..4) by cb vectors of 16 columns (1..8), the last vector
 * under mask m1: rr * cb accumulators in flight, so the fused sums over
 * the rank overlap instead of waiting on each other (eight hide the
 * latency of an FMA on two ports); each output still gets ref's sequence
 * of operations. bt points at the tile's first column. */
AI void z_lora_b_tile(int f16, int rr, int cb, int nk, const void *bt, size_t c0, size_t ldb,
                      const int32_t *rows, const float *scale, const float *t, size_t ldt, float *y,
                      size_t ldy, __mmask16 m1)
{
    __m512 acc[4][8];
    _Pragma("GCC unroll 8") for (int i = 0; i < rr; i++)
        _Pragma("GCC unroll 8") for (int q = 0; q < cb; q++) acc[i][q] = _mm512_setzero_ps();
    for (int k = 0; k < nk; k++) {
        __m512 bv[8];
        _Pragma("GCC unroll 8") for (int q = 0; q < cb; q++) bv[q] =
            ld16(bt, (size_t)k * ldb + c0 + 16 * (size_t)q, f16, q == cb - 1 ? m1 : 0xffff);
        _Pragma("GCC unroll 8") for (int i = 0; i < rr; i++)
        {
            __m512 tv = _mm512_set1_ps(t[(size_t)i * ldt + (size_t)k]);
            _Pragma("GCC unroll 8") for (int q = 0; q < cb; q++) acc[i][q] =
                _mm512_fmadd_ps(bv[q], tv, acc[i][q]);
        }
    }
    _Pragma("GCC unroll 8") for (int i = 0; i < rr; i++)
    {
        float *yr = y + (size_t)rows[i] * ldy + c0;
        __m512 sv = _mm512_set1_ps(scale[i]);
        _Pragma("GCC unroll 8") for (int q = 0; q < cb; q++)
        {
            __mmask16 m = q == cb - 1 ? m1 : 0xffff;
            __m512 yv = _mm512_maskz_loadu_ps(m, yr + 16 * q);
            _mm512_mask_storeu_ps(yr + 16 * q, m, _mm512_fmadd_ps(sv, acc[i][q], yv));
        }
    }
}

/* rr rows (4, 2 or 1) over all nc columns: whole tiles of 32 / rr vectors,
 * then the rest a vector at a time, the last under a mask */
AI void z_lora_b_rows(int f16, int rr, int nk, int64_t nc, const void *bt, size_t ldb,
                      const int32_t *rows, const float *scale, const float *t, size_t ldt, float *y,
                      size_t ldy)
{
    const int cb = 8 / rr;
    int64_t c = 0;
    for (; c + 16 * cb <= nc; c += 16 * cb)
        z_lora_b_tile(f16, rr, cb, nk, bt, (size_t)c, ldb, rows, scale, t, ldt, y, ldy, 0xffff);
    for (; c < nc; c += 16) {
        const int64_t w = nc - c < 16 ? nc - c : 16;
        const __mmask16 m1 = (__mmask16)(w == 16 ? 0xffffu : (1u << w) - 1);
        z_lora_b_tile(f16, rr, 1, nk, bt, (size_t)c, ldb, rows, scale, t, ldt, y, ldy, m1);
    }
}

AI void z_lora_b_t(int f16, int nk, int64_t nc, const void *bt, size_t ldb, int nr,
                   const int32_t *rows, const float *scale, const float *t, size_t ldt, float *y,
                   size_t ldy)
{
    int i = 0;
    for (; i + 4 <= nr; i += 4)
        z_lora_b_rows(f16, 4, nk, nc, bt, ldb, rows + i, scale + i, t + (size_t)i * ldt, ldt, y,
                      ldy);
    for (; i + 2 <= nr; i += 2)
        z_lora_b_rows(f16, 2, nk, nc, bt, ldb, rows + i, scale + i, t + (size_t)i * ldt, ldt, y,
                      ldy);
    for (; i < nr; i++)
        z_lora_b_rows(f16, 1, nk, nc, bt, ldb, rows + i, scale + i, t + (size_t)i * ldt, ldt, y,
                      ldy);
}

static void z_lora_a(int64_t n, int nk, const float *a, int nr, const int32_t *rows, const float *x,
                     size_t ldx, float *t, size_t ldt)
{
    z_lora_a_t(0, n, nk, a, nr, rows, x, ldx, t, ldt);
}

static void z_lora_a_f16(int64_t n, int nk, const uint16_t *a, int nr, const int32_t *rows,
                         const float *x, size_t ldx, float *t, size_t ldt)
{
    z_lora_a_t(1, n, nk, a, nr, rows, x, ldx, t, ldt);
}

static void z_lora_b(int nk, int64_t nc, const float *bt, size_t ldb, int nr, const int32_t *rows,
                     const float *scale, const float *t, size_t ldt, float *y, size_t ldy)
{
    z_lora_b_t(0, nk, nc, bt, ldb, nr, rows, scale, t, ldt, y, ldy);
}

static void z_lora_b_f16(int nk, int64_t nc, const uint16_t *bt, size_t ldb, int nr,
                         const int32_t *rows, const float *scale, const float *t, size_t ldt,
                         float *y, size_t ldy)
{
    z_lora_b_t(1, nk, nc, bt, ldb, nr, rows, scale, t, ldt, y, ldy);
}

/* lora_b_q8: per group, rows four at a time (their sums in registers),
 * each block's four runs and the columns' sums of B loaded once for them.
 * vpdpbusd wants one side unsigned: t + 128 (its sign bit flipped), whose
 * extra 128 * sum(B) is taken off again, exactly. */
static void z_lora_b_q8(int nkb, int64_t ng, const void *bq, int nr, const int32_t *rows,
                        const float *scale, const int8_t *tq, size_t ldq, const float *td, float *y,
                        size_t ldy)
{
    const __m512i ones = _mm512_set1_epi8(1), zero = _mm512_setzero_si512();
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t *grp = (const uint8_t *)bq + (size_t)g * (size_t)nkb * 288;
        for (int i0 = 0; i0 < nr; i0 += 4) {
            const int rr = nr - i0 < 4 ? nr - i0 : 4;
            __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                             _mm512_setzero_ps()};
            for (int kb = 0; kb < nkb; kb++) {
                const uint8_t *blk = grp + (size_t)kb * 288;
                const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)blk));
                __m512i b[4], cs = zero;
                for (int m = 0; m < 4; m++) {
                    b[m] = _mm512_loadu_si512(blk + 32 + 64 * m);
                    cs = _mm512_dpbusd_epi32(cs, ones, b[m]);
                }
                cs = _mm512_slli_epi32(cs, 7);
                for (int r = 0; r < rr; r++) {
                    const int8_t *t = tq + (size_t)(i0 + r) * ldq + (size_t)kb * 16;
                    __m512i is = zero;
                    for (int m = 0; m < 4; m++) {
                        int32_t q4;
                        memcpy(&q4, t + 4 * m, sizeof q4);
                        is = _mm512_dpbusd_epi32(is, _mm512_set1_epi32(q4 ^ (int32_t)0x80808080u),
                                                 b[m]);
                    }
                    is = _mm512_sub_epi32(is, cs);
                    const __m512 f = _mm512_mul_ps(
                        _mm512_set1_ps(td[(size_t)(i0 + r) * (size_t)nkb + (size_t)kb]), d);
                    acc[r] = _mm512_fmadd_ps(f, _mm512_cvtepi32_ps(is), acc[r]);
                }
            }
            for (int r = 0; r < rr; r++) {
                float *yr = y + (size_t)rows[i0 + r] * ldy + (size_t)g * 16;
                _mm512_storeu_ps(yr, _mm512_fmadd_ps(_mm512_set1_ps(scale[i0 + r]), acc[r],
                                                     _mm512_loadu_ps(yr)));
            }
        }
    }
}

void ifl_kernels_fill_avx512_lora(struct ifl_kernels *k)
{
    k->lora_a = z_lora_a;
    k->lora_b = z_lora_b;
    k->lora_a_f16 = z_lora_a_f16;
    k->lora_b_f16 = z_lora_b_f16;
    k->lora_b_q8 = z_lora_b_q8;
}
