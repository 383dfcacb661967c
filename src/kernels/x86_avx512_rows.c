/*
 * The sampler's exponential pass over a row of logits (exp_pass of ref.c)
 * for the AVX-512 table, sixteen lanes wide. It equals ref bit for bit:
 * every lane does ifl_kernels_exp's operations in its order, each rounded
 * on its own, and each block of 16 is summed exactly as ref sums it.
 *
 * Eight blocks go at a time. The exponential is a chain of some thirty
 * dependent operations, so the cores are kept busy by many independent
 * chains. Over a 32000-token row (the sum alone, as a log-prob needs it),
 * on the Zen 5: 14.4 us, against 18.3 us four blocks at a time, 25 us for
 * the 256-bit pass of x86_simd.h and 60 us for the four-lane pass the
 * sampler had before (197 us for ref).
 */
#include <immintrin.h>
#include <stdint.h>

#include "kernels/impl.h"
#include "kernels/x86_avx512.h"

/* ifl_kernels_exp in sixteen lanes. */
AI __m512 sexp16(__m512 x)
{
    const __m512 lo = _mm512_set1_ps(-87.0f), magic = _mm512_set1_ps(IFL_EXP_ROUND);
    x = _mm512_mask_mov_ps(x, _mm512_cmp_ps_mask(x, lo, _CMP_LT_OQ), lo);
    __m512 n =
        _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(x, _mm512_set1_ps(IFL_EXP_LOG2E)), magic), magic);
    __m512 r = _mm512_sub_ps(_mm512_sub_ps(x, _mm512_mul_ps(n, _mm512_set1_ps(IFL_EXP_LN2_HI))),
                             _mm512_mul_ps(n, _mm512_set1_ps(IFL_EXP_LN2_LO)));
    __m512 p =
        _mm512_add_ps(_mm512_mul_ps(r, _mm512_set1_ps(IFL_EXP_P0)), _mm512_set1_ps(IFL_EXP_P1));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(IFL_EXP_P2));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(IFL_EXP_P3));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(IFL_EXP_P4));
    p = _mm512_add_ps(_mm512_mul_ps(p, r), _mm512_set1_ps(IFL_EXP_P5));
    p = _mm512_add_ps(_mm512_add_ps(_mm512_mul_ps(_mm512_mul_ps(p, r), r), r),
                      _mm512_set1_ps(1.0f));
    __m512i s =
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(s));
}

/* The sums of four blocks of 16 as ref adds a block: lanes j = 0..3 over
 * the four quarters in order from 0.0f, then (0 + 1) + (2 + 3). Quarter k
 * of t[k] below is quarter k' of block k', transposed so that the four
 * blocks are summed side by side. */
AI __m128 block16_sums(__m512 b0, __m512 b1, __m512 b2, __m512 b3)
{
    __m512 ab_lo = _mm512_shuffle_f32x4(b0, b1, 0x44), ab_hi = _mm512_shuffle_f32x4(b0, b1, 0xee);
    __m512 cd_lo = _mm512_shuffle_f32x4(b2, b3, 0x44), cd_hi = _mm512_shuffle_f32x4(b2, b3, 0xee);
    __m512 s = _mm512_add_ps(_mm512_setzero_ps(), _mm512_shuffle_f32x4(ab_lo, cd_lo, 0x88));
    s = _mm512_add_ps(s, _mm512_shuffle_f32x4(ab_lo, cd_lo, 0xdd));
    s = _mm512_add_ps(s, _mm512_shuffle_f32x4(ab_hi, cd_hi, 0x88));
    s = _mm512_add_ps(s, _mm512_shuffle_f32x4(ab_hi, cd_hi, 0xdd));
    s = _mm512_add_ps(s, _mm512_movehdup_ps(s));      /* lane 4k: s0 + s1, 4k + 2: s2 + s3 */
    s = _mm512_add_ps(s, _mm512_permute_ps(s, 0xee)); /* lane 4k: block k's sum */
    return _mm512_castps512_ps128(_mm512_maskz_compress_ps(0x1111, s));
}

/* nb (1..8) blocks of 16 at x + i, as exp_pass of ref.c does them; their
 * sums go into *sum and *sev in order. Missing blocks are zeros, not added. */
AI void exp_blocks16(int nb, int64_t i, const float *x, const struct ifl_exp_pass *a, int divide,
                     int want_e, int want_v, int want_sev, int want_count, double *sum, double *sev,
                     int32_t *cnt)
{
    const __m512 m = _mm512_set1_ps(a->m), t = _mm512_set1_ps(a->t);
    const __m512 lo = _mm512_set1_ps(-a->cutoff), me = _mm512_set1_ps(a->min_e);
    __m512 e[8], ev[8];
    _Pragma("GCC unroll 8") for (int h = 0; h < 8; h++)
    {
        e[h] = ev[h] = _mm512_setzero_ps();
        if (h >= nb)
            continue;
        __m512 vv = _mm512_sub_ps(_mm512_loadu_ps(x + i + 16 * h), m);
        if (divide)
            vv = _mm512_div_ps(vv, t);
        __mmask16 ok = _mm512_cmp_ps_mask(vv, lo, _CMP_GE_OQ);
        vv = _mm512_maskz_mov_ps(ok, vv);
        __m512 ee = sexp16(vv);
        ok &= _mm512_cmp_ps_mask(ee, me, _CMP_GE_OQ);
        ee = _mm512_maskz_mov_ps(ok, ee);
        if (want_e)
            _mm512_storeu_ps(a->e + i + 16 * h, ee);
        if (want_v)
            _mm512_storeu_ps(a->v + i + 16 * h, vv);
        if (want_count)
            *cnt += __builtin_popcount((unsigned)ok);
        e[h] = ee;
        if (want_sev)
            ev[h] = _mm512_mul_ps(ee, vv);
    }
    float s[8], sv[8];
    _mm_storeu_ps(s, block16_sums(e[0], e[1], e[2], e[3]));
    _mm_storeu_ps(s + 4, block16_sums(e[4], e[5], e[6], e[7]));
    if (want_sev) {
        _mm_storeu_ps(sv, block16_sums(ev[0], ev[1], ev[2], ev[3]));
        _mm_storeu_ps(sv + 4, block16_sums(ev[4], ev[5], ev[6], ev[7]));
    }
    for (int h = 0; h < nb; h++) {
        *sum += (double)s[h];
        if (want_sev)
            *sev += (double)sv[h];
    }
}

AI double exp_pass_body(int64_t n, const float *x, const struct ifl_exp_pass *a, int want_e,
                        int want_v, int want_sev, int want_count)
{
    const int divide = a->t != 1.0f;
    double sum = 0, sev = 0;
    int32_t cnt = 0;
    int64_t i = 0;
    for (; i + 128 <= n; i += 128)
        exp_blocks16(8, i, x, a, divide, want_e, want_v, want_sev, want_count, &sum, &sev, &cnt);
    if (i + 16 <= n) {
        int nb = (int)((n - i) / 16);
        exp_blocks16(nb, i, x, a, divide, want_e, want_v, want_sev, want_count, &sum, &sev, &cnt);
        i += 16 * nb;
    }
    return ifl_exp_finish(i, n, x, a, want_e, want_v, want_sev, want_count, sum, sev, cnt);
}

static double z_exp_pass(int64_t n, const float *x, const struct ifl_exp_pass *a)
{
    if (!a->e && !a->v && !a->sum_ev && !a->count)
        return exp_pass_body(n, x, a, 0, 0, 0, 0);
    return exp_pass_body(n, x, a, a->e != NULL, a->v != NULL, a->sum_ev != NULL, a->count != NULL);
}

void ifl_kernels_fill_avx512_rows(struct ifl_kernels *k)
{
    k->exp_pass = z_exp_pass;
}
