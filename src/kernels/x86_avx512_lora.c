/*
 * LoRA's products (kernels.h lora_a, lora_b, and their F16 forms) in
 * 512-bit AVX-512. Equal to ref.c's bit for bit: dot16's 16 lanes are one
 * vector, a tail goes in under a mask (lanes outside it keep their bits),
 * the fold adds ref's pairs in ref's order; lora_b runs 16 columns per
 * vector, each with ref's sequence of fused multiply-adds. F16 values are
 * widened exactly (vcvtph2ps) before the same arithmetic. Each function is
 * written once, for both element types (f16 a constant after inlining).
 */
#include <immintrin.h>
#include <stdint.h>

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

AI void z_lora_a_t(int f16, int64_t n, int nk, const void *a, int nr, const int32_t *rows,
                   const float *x, size_t ldx, float *t, size_t ldt)
{
    const int64_t n16 = n & ~(int64_t)15;
    const __mmask16 mt = (__mmask16)((1u << (n - n16)) - 1);
    for (int k = 0; k < nk; k++) {
        const size_t ak = (size_t)k * (size_t)n;
        int i = 0;
        /* four rows at a time share the loads of a */
        for (; i + 4 <= nr; i += 4) {
            const float *x0 = x + (size_t)rows[i] * ldx, *x1 = x + (size_t)rows[i + 1] * ldx;
            const float *x2 = x + (size_t)rows[i + 2] * ldx, *x3 = x + (size_t)rows[i + 3] * ldx;
            __m512 p0 = _mm512_setzero_ps(), p1 = _mm512_setzero_ps();
            __m512 p2 = _mm512_setzero_ps(), p3 = _mm512_setzero_ps();
            for (int64_t e = 0; e < n16; e += 16) {
                __m512 av = ld16(a, ak + (size_t)e, f16, 0xffff);
                p0 = _mm512_fmadd_ps(av, _mm512_loadu_ps(x0 + e), p0);
                p1 = _mm512_fmadd_ps(av, _mm512_loadu_ps(x1 + e), p1);
                p2 = _mm512_fmadd_ps(av, _mm512_loadu_ps(x2 + e), p2);
                p3 = _mm512_fmadd_ps(av, _mm512_loadu_ps(x3 + e), p3);
            }
            if (mt) {
                __m512 av = ld16(a, ak + (size_t)n16, f16, mt);
                p0 = _mm512_mask3_fmadd_ps(av, _mm512_maskz_loadu_ps(mt, x0 + n16), p0, mt);
                p1 = _mm512_mask3_fmadd_ps(av, _mm512_maskz_loadu_ps(mt, x1 + n16), p1, mt);
                p2 = _mm512_mask3_fmadd_ps(av, _mm512_maskz_loadu_ps(mt, x2 + n16), p2, mt);
                p3 = _mm512_mask3_fmadd_ps(av, _mm512_maskz_loadu_ps(mt, x3 + n16), p3, mt);
            }
            t[(size_t)i * ldt + (size_t)k] = fold16(p0);
            t[(size_t)(i + 1) * ldt + (size_t)k] = fold16(p1);
            t[(size_t)(i + 2) * ldt + (size_t)k] = fold16(p2);
            t[(size_t)(i + 3) * ldt + (size_t)k] = fold16(p3);
        }
        for (; i < nr; i++) {
            const float *x0 = x + (size_t)rows[i] * ldx;
            __m512 p0 = _mm512_setzero_ps();
            for (int64_t e = 0; e < n16; e += 16)
                p0 = _mm512_fmadd_ps(ld16(a, ak + (size_t)e, f16, 0xffff), _mm512_loadu_ps(x0 + e),
                                     p0);
            if (mt)
                p0 = _mm512_mask3_fmadd_ps(ld16(a, ak + (size_t)n16, f16, mt),
                                           _mm512_maskz_loadu_ps(mt, x0 + n16), p0, mt);
            t[(size_t)i * ldt + (size_t)k] = fold16(p0);
        }
    }
}

/* rr rows (1..4) by cb blocks of 16 columns (1..2), the last block under
 * mask m1: rr * cb accumulators in flight, so the fused sums over the rank
 * overlap instead of waiting on each other; each output still gets ref's
 * sequence of operations. bt points at the tile's first column. */
AI void z_lora_b_tile(int f16, int rr, int cb, int nk, const void *bt, size_t c0, size_t ldb,
                      const int32_t *rows, const float *scale, const float *t, size_t ldt, float *y,
                      size_t ldy, __mmask16 m1)
{
    __m512 acc[4][2];
    for (int i = 0; i < 4; i++)
        for (int q = 0; q < 2; q++)
            acc[i][q] = _mm512_setzero_ps();
    for (int k = 0; k < nk; k++) {
        __m512 bv[2];
        for (int q = 0; q < cb; q++)
            bv[q] = ld16(bt, (size_t)k * ldb + c0 + 16 * (size_t)q, f16, q == cb - 1 ? m1 : 0xffff);
        for (int i = 0; i < rr; i++) {
            __m512 tv = _mm512_set1_ps(t[(size_t)i * ldt + (size_t)k]);
            for (int q = 0; q < cb; q++)
                acc[i][q] = _mm512_fmadd_ps(bv[q], tv, acc[i][q]);
        }
    }
    for (int i = 0; i < rr; i++) {
        float *yr = y + (size_t)rows[i] * ldy + c0;
        __m512 sv = _mm512_set1_ps(scale[i]);
        for (int q = 0; q < cb; q++) {
            __mmask16 m = q == cb - 1 ? m1 : 0xffff;
            __m512 yv = _mm512_maskz_loadu_ps(m, yr + 16 * q);
            _mm512_mask_storeu_ps(yr + 16 * q, m, _mm512_fmadd_ps(sv, acc[i][q], yv));
        }
    }
}

AI void z_lora_b_t(int f16, int nk, int64_t nc, const void *bt, size_t ldb, int nr,
                   const int32_t *rows, const float *scale, const float *t, size_t ldt, float *y,
                   size_t ldy)
{
    for (int64_t c = 0; c < nc; c += 32) {
        const int64_t w = nc - c < 32 ? nc - c : 32;
        const int cb = w > 16 ? 2 : 1;
        const int last = (int)(w - 16 * (cb - 1));
        const __mmask16 m1 = (__mmask16)(last == 16 ? 0xffffu : (1u << last) - 1);
        int i = 0;
        for (; i + 4 <= nr; i += 4)
            if (cb == 2)
                z_lora_b_tile(f16, 4, 2, nk, bt, (size_t)c, ldb, rows + i, scale + i,
                              t + (size_t)i * ldt, ldt, y, ldy, m1);
            else
                z_lora_b_tile(f16, 4, 1, nk, bt, (size_t)c, ldb, rows + i, scale + i,
                              t + (size_t)i * ldt, ldt, y, ldy, m1);
        for (; i < nr; i++)
            if (cb == 2)
                z_lora_b_tile(f16, 1, 2, nk, bt, (size_t)c, ldb, rows + i, scale + i,
                              t + (size_t)i * ldt, ldt, y, ldy, m1);
            else
                z_lora_b_tile(f16, 1, 1, nk, bt, (size_t)c, ldb, rows + i, scale + i,
                              t + (size_t)i * ldt, ldt, y, ldy, m1);
    }
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

void ifl_kernels_fill_avx512_lora(struct ifl_kernels *k)
{
    k->lora_a = z_lora_a;
    k->lora_b = z_lora_b;
    k->lora_a_f16 = z_lora_a_f16;
    k->lora_b_f16 = z_lora_b_f16;
}
