/*
 * LoRA's products (kernels.h lora_a, lora_b, and their F16 forms) in
 * 256-bit AVX2 + FMA + F16C. Equal to ref.c's bit for bit: dot16's 16
 * lanes are two vectors of 8 (lanes 0-7, 8-15), a tail element goes to its
 * own lane by a blend (so untouched lanes keep their exact bits), the fold
 * adds the same pairs in the same order; lora_b runs 8 columns per vector,
 * each with ref's sequence of fused multiply-adds, eight vectors of sums
 * at a time. F16 values are widened exactly (vcvtph2ps). Each float
 * function is written once for both element types (f16: 0 F32, 1 F16, a
 * constant after inlining). lora_b_q8's integer sums are exact, so how
 * vpmaddubsw and vpmaddwd group them changes nothing.
 */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "kernels/impl.h"

#define AI static inline __attribute__((always_inline))

/* Lanes [0, n) set, n <= 8. */
AI __m256i mask8(int n)
{
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(n), idx);
}

/* lanes 0-7 in lo, 8-15 in hi, folded as ref folds its 16 */
AI float fold16(__m256 lo, __m256 hi)
{
    __m256 s8 = _mm256_add_ps(lo, hi); /* l + l+8 */
    __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
    __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
    return _mm_cvtss_f32(s1);
}

/* acc lanes of a partial vector: fma where m is set, else kept */
AI __m256 fma_part(__m256 a, __m256 x, __m256 acc, __m256 m)
{
    return _mm256_blendv_ps(acc, _mm256_fmadd_ps(a, x, acc), m);
}

/* 8 elements from i of an F32 or F16 array */
AI __m256 ld8(const void *p, size_t i, int f16)
{
    if (f16)
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)p + i)));
    return _mm256_loadu_ps((const float *)p + i);
}

/* the first w (0..8) of them, zeros after: nothing past them is read */
AI __m256 ld8_part(const void *p, size_t i, int f16, int w, __m256i m)
{
    if (f16) {
        uint16_t b[8] = {0};
        memcpy(b, (const uint16_t *)p + i, sizeof(uint16_t) * (size_t)w);
        return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)b));
    }
    return _mm256_maskload_ps((const float *)p + i, m);
}

/* rr rows (1..2) by kk rows of a (1..4) from k0: rr * kk dot products
 * (two vectors each) in flight, sharing the loads of a and of x, each
 * still ref's dot16 */
AI void lora_a_tile(int f16, int rr, int kk, int64_t n, int k0, const void *a, const int32_t *rows,
                    const float *x, size_t ldx, float *t, size_t ldt)
{
    const int64_t n16 = n & ~(int64_t)15;
    const int rem = (int)(n - n16), r0 = rem < 8 ? rem : 8, r1 = rem > 8 ? rem - 8 : 0;
    const float *xr[2];
    __m256 lo[2][4], hi[2][4];
    _Pragma("GCC unroll 2") for (int i = 0; i < rr; i++)
    {
        xr[i] = x + (size_t)rows[i] * ldx;
        _Pragma("GCC unroll 4") for (int q = 0; q < kk; q++) lo[i][q] = hi[i][q] =
            _mm256_setzero_ps();
    }
    for (int64_t e = 0; e < n16; e += 16) {
        _Pragma("GCC unroll 4") for (int q = 0; q < kk; q++)
        {
            const size_t ak = (size_t)(k0 + q) * (size_t)n + (size_t)e;
            __m256 al = ld8(a, ak, f16), ah = ld8(a, ak + 8, f16);
            _Pragma("GCC unroll 2") for (int i = 0; i < rr; i++)
            {
                lo[i][q] = _mm256_fmadd_ps(al, _mm256_loadu_ps(xr[i] + e), lo[i][q]);
                hi[i][q] = _mm256_fmadd_ps(ah, _mm256_loadu_ps(xr[i] + e + 8), hi[i][q]);
            }
        }
    }
    if (rem) {
        const __m256i mi0 = mask8(r0), mi1 = mask8(r1);
        const __m256 m0 = _mm256_castsi256_ps(mi0), m1 = _mm256_castsi256_ps(mi1);
        _Pragma("GCC unroll 4") for (int q = 0; q < kk; q++)
        {
            const size_t ak = (size_t)(k0 + q) * (size_t)n + (size_t)n16;
            __m256 al = ld8_part(a, ak, f16, r0, mi0), ah = ld8_part(a, ak + 8, f16, r1, mi1);
            _Pragma("GCC unroll 2") for (int i = 0; i < rr; i++)
            {
                lo[i][q] = fma_part(al, _mm256_maskload_ps(xr[i] + n16, mi0), lo[i][q], m0);
                hi[i][q] = fma_part(ah, _mm256_maskload_ps(xr[i] + n16 + 8, mi1), hi[i][q], m1);
            }
        }
    }
    _Pragma("GCC unroll 2") for (int i = 0; i < rr; i++)
        _Pragma("GCC unroll 4") for (int q = 0; q < kk; q++) t[(size_t)i * ldt + (size_t)(k0 + q)] =
            fold16(lo[i][q], hi[i][q]);
}

/* rr rows (2 or 1) by every row of a: 4 / rr of them at a time, then one
 * at a time */
AI void lora_a_rows(int f16, int rr, int64_t n, int nk, const void *a, const int32_t *rows,
                    const float *x, size_t ldx, float *t, size_t ldt)
{
    const int kk = 4 / rr;
    int k = 0;
    for (; k + kk <= nk; k += kk)
        lora_a_tile(f16, rr, kk, n, k, a, rows, x, ldx, t, ldt);
    for (; k < nk; k++)
        lora_a_tile(f16, rr, 1, n, k, a, rows, x, ldx, t, ldt);
}

AI void lora_a_t(int f16, int64_t n, int nk, const void *a, int nr, const int32_t *rows,
                 const float *x, size_t ldx, float *t, size_t ldt)
{
    int i = 0;
    for (; i + 2 <= nr; i += 2)
        lora_a_rows(f16, 2, n, nk, a, rows + i, x, ldx, t + (size_t)i * ldt, ldt);
    for (; i < nr; i++)
        lora_a_rows(f16, 1, n, nk, a, rows + i, x, ldx, t + (size_t)i * ldt, ldt);
}

/* rr rows (1..4) by cb vectors of 8 columns (1..8), the last vector w
 * (1..8) wide: rr * cb accumulators in flight, so the fused sums over the
 * rank overlap instead of waiting on each other; each output still gets
 * ref's sequence of operations. Columns from c0. */
AI void lora_b_tile(int f16, int rr, int cb, int nk, const void *bt, size_t c0, size_t ldb,
                    const int32_t *rows, const float *scale, const float *t, size_t ldt, float *y,
                    size_t ldy, int w)
{
    const __m256i m = mask8(w);
    __m256 acc[4][8];
    _Pragma("GCC unroll 8") for (int i = 0; i < rr; i++)
        _Pragma("GCC unroll 8") for (int q = 0; q < cb; q++) acc[i][q] = _mm256_setzero_ps();
    for (int k = 0; k < nk; k++) {
        const size_t bk = (size_t)k * ldb + c0;
        _Pragma("GCC unroll 8") for (int q = 0; q < cb; q++)
        {
            __m256 bv = q == cb - 1 && w < 8 ? ld8_part(bt, bk + 8 * (size_t)q, f16, w, m)
                                             : ld8(bt, bk + 8 * (size_t)q, f16);
            _Pragma("GCC unroll 8") for (int i = 0; i < rr; i++) acc[i][q] =
                _mm256_fmadd_ps(bv, _mm256_set1_ps(t[(size_t)i * ldt + (size_t)k]), acc[i][q]);
        }
    }
    _Pragma("GCC unroll 8") for (int i = 0; i < rr; i++)
    {
        float *yr = y + (size_t)rows[i] * ldy + c0;
        const __m256 sv = _mm256_set1_ps(scale[i]);
        _Pragma("GCC unroll 8") for (int q = 0; q < cb; q++)
        {
            if (q == cb - 1 && w < 8) {
                __m256 yv = _mm256_maskload_ps(yr + 8 * q, m);
                _mm256_maskstore_ps(yr + 8 * q, m, _mm256_fmadd_ps(sv, acc[i][q], yv));
            } else {
                __m256 yv = _mm256_loadu_ps(yr + 8 * q);
                _mm256_storeu_ps(yr + 8 * q, _mm256_fmadd_ps(sv, acc[i][q], yv));
            }
        }
    }
}

/* rr rows (4, 2 or 1) over all nc columns: whole tiles of 8 / rr vectors,
 * then the rest a vector at a time */
AI void lora_b_rows(int f16, int rr, int nk, int64_t nc, const void *bt, size_t ldb,
                    const int32_t *rows, const float *scale, const float *t, size_t ldt, float *y,
                    size_t ldy)
{
    const int cb = 8 / rr;
    int64_t c = 0;
    for (; c + 8 * cb <= nc; c += 8 * cb)
        lora_b_tile(f16, rr, cb, nk, bt, (size_t)c, ldb, rows, scale, t, ldt, y, ldy, 8);
    for (; c < nc; c += 8)
        lora_b_tile(f16, rr, 1, nk, bt, (size_t)c, ldb, rows, scale, t, ldt, y, ldy,
                    nc - c < 8 ? (int)(nc - c) : 8);
}

AI void lora_b_t(int f16, int nk, int64_t nc, const void *bt, size_t ldb, int nr,
                 const int32_t *rows, const float *scale, const float *t, size_t ldt, float *y,
                 size_t ldy)
{
    int i = 0;
    for (; i + 4 <= nr; i += 4)
        lora_b_rows(f16, 4, nk, nc, bt, ldb, rows + i, scale + i, t + (size_t)i * ldt, ldt, y, ldy);
    for (; i + 2 <= nr; i += 2)
        lora_b_rows(f16, 2, nk, nc, bt, ldb, rows + i, scale + i, t + (size_t)i * ldt, ldt, y, ldy);
    for (; i < nr; i++)
        lora_b_rows(f16, 1, nk, nc, bt, ldb, rows + i, scale + i, t + (size_t)i * ldt, ldt, y, ldy);
}

static void avx2_lora_a(int64_t n, int nk, const float *a, int nr, const int32_t *rows,
                        const float *x, size_t ldx, float *t, size_t ldt)
{
    lora_a_t(0, n, nk, a, nr, rows, x, ldx, t, ldt);
}

static void avx2_lora_a_f16(int64_t n, int nk, const uint16_t *a, int nr, const int32_t *rows,
                            const float *x, size_t ldx, float *t, size_t ldt)
{
    lora_a_t(1, n, nk, a, nr, rows, x, ldx, t, ldt);
}

static void avx2_lora_b(int nk, int64_t nc, const float *bt, size_t ldb, int nr,
                        const int32_t *rows, const float *scale, const float *t, size_t ldt,
                        float *y, size_t ldy)
{
    lora_b_t(0, nk, nc, bt, ldb, nr, rows, scale, t, ldt, y, ldy);
}

static void avx2_lora_b_f16(int nk, int64_t nc, const uint16_t *bt, size_t ldb, int nr,
                            const int32_t *rows, const float *scale, const float *t, size_t ldt,
                            float *y, size_t ldy)
{
    lora_b_t(1, nk, nc, bt, ldb, nr, rows, scale, t, ldt, y, ldy);
}

/* lora_b_q8: per group, each half of 8 columns, rows two at a time,
 * each block's four half-runs loaded once for them. vpmaddubsw wants one
 * side unsigned and saturates: |B| times t with B's sign, whose pairs stay
 * within 2 * 127 * 127. */
static void avx2_lora_b_q8(int nkb, int64_t ng, const void *bq, int nr, const int32_t *rows,
                           const float *scale, const int8_t *tq, size_t ldq, const float *td,
                           float *y, size_t ldy)
{
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t g = 0; g < ng; g++) {
        const uint8_t *grp = (const uint8_t *)bq + (size_t)g * (size_t)nkb * 288;
        for (int h = 0; h < 2; h++)
            for (int i0 = 0; i0 < nr; i0 += 2) {
                const int rr = nr - i0 < 2 ? nr - i0 : 2;
                __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
                for (int kb = 0; kb < nkb; kb++) {
                    const uint8_t *blk = grp + (size_t)kb * 288;
                    const __m256 d =
                        _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 16 * h)));
                    __m256i b[4], ab[4];
                    for (int m = 0; m < 4; m++) {
                        b[m] = _mm256_loadu_si256((const __m256i *)(blk + 32 + 64 * m + 32 * h));
                        ab[m] = _mm256_abs_epi8(b[m]);
                    }
                    for (int r = 0; r < rr; r++) {
                        const int8_t *t = tq + (size_t)(i0 + r) * ldq + (size_t)kb * 16;
                        __m256i is = _mm256_setzero_si256();
                        for (int m = 0; m < 4; m++) {
                            int32_t q4;
                            memcpy(&q4, t + 4 * m, sizeof q4);
                            const __m256i st = _mm256_sign_epi8(_mm256_set1_epi32(q4), b[m]);
                            is = _mm256_add_epi32(
                                is, _mm256_madd_epi16(_mm256_maddubs_epi16(ab[m], st), ones));
                        }
                        const __m256 f = _mm256_mul_ps(
                            _mm256_set1_ps(td[(size_t)(i0 + r) * (size_t)nkb + (size_t)kb]), d);
                        acc[r] = _mm256_fmadd_ps(f, _mm256_cvtepi32_ps(is), acc[r]);
                    }
                }
                for (int r = 0; r < rr; r++) {
                    float *yr = y + (size_t)rows[i0 + r] * ldy + (size_t)g * 16 + 8 * h;
                    _mm256_storeu_ps(yr, _mm256_fmadd_ps(_mm256_set1_ps(scale[i0 + r]), acc[r],
                                                         _mm256_loadu_ps(yr)));
                }
            }
    }
}

void ifl_kernels_fill_avx2_lora(struct ifl_kernels *k)
{
    k->lora_a = avx2_lora_a;
    k->lora_b = avx2_lora_b;
    k->lora_a_f16 = avx2_lora_a_f16;
    k->lora_b_f16 = avx2_lora_b_f16;
    k->lora_b_q8 = avx2_lora_b_q8;
}
