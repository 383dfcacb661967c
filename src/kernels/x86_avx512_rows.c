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
#include <math.h>
#include <stdint.h>

#include "kernels/blocks.h"

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

/* ---- quant_q8_0 of ref.c, bit for bit, sixteen blocks at a time ---- */

/* roundf (half away from zero) of each lane: truncate, then step away from
 * zero where the dropped fraction is at least one half. */
AI __m512 round_away16(__m512 v)
{
    const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __m512 frac = _mm512_abs_ps(_mm512_sub_ps(v, t));
    const __m512 step = _mm512_or_ps(_mm512_set1_ps(1.0f), _mm512_and_ps(_mm512_set1_ps(-0.0f), v));
    return _mm512_mask_add_ps(t, _mm512_cmp_ps_mask(frac, _mm512_set1_ps(0.5f), _CMP_GE_OQ), t,
                              step);
}

/* x86_simd.h's quant spent most of its time per block on the horizontal
 * maximum and the scalar conversions of d and 1 / d (about 1.3 cycles a
 * value: 3.5 % of a small-110m prompt's CPU time). Here each block's
 * sixteen lane maxima are folded together with fifteen other blocks' (a
 * transposing tree of shuffles), and d, 1 / d and d's F16 (vcvtps2ph,
 * nearest even, as ifl_f32_to_f16) are computed sixteen at a time. Every
 * value is ref's: the maximum is exact in any order, the division and the
 * product are one rounding each, the rounding of q is ref's roundf. */
static void z_quant_q8_0(const float *x, void *vy, int64_t n)
{
    struct ifl_block_q8_0 *y = vy;
    const int64_t nb = n / IFL_QK;
    for (int64_t b0 = 0; b0 < nb; b0 += 16) {
        const int k = nb - b0 < 16 ? (int)(nb - b0) : 16;
        const float *xb = x + b0 * IFL_QK;
        __m512 m[16];
        for (int b = 0; b < 16; b++)
            m[b] = b < k ? _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(xb + 32 * b)),
                                         _mm512_abs_ps(_mm512_loadu_ps(xb + 32 * b + 16)))
                         : _mm512_setzero_ps();
        /* blocks 2i, 2i + 1 in halves; then 4 blocks in quarters */
        __m512 p[8], q[4];
        for (int i = 0; i < 8; i++)
            p[i] = _mm512_max_ps(_mm512_shuffle_f32x4(m[2 * i], m[2 * i + 1], 0x44),
                                 _mm512_shuffle_f32x4(m[2 * i], m[2 * i + 1], 0xee));
        for (int i = 0; i < 4; i++)
            q[i] = _mm512_max_ps(_mm512_shuffle_f32x4(p[2 * i], p[2 * i + 1], 0x88),
                                 _mm512_shuffle_f32x4(p[2 * i], p[2 * i + 1], 0xdd));
        /* quarter L of q[i] is block 4i + L: fold each to one value */
        const __m512 w01 =
            _mm512_max_ps(_mm512_shuffle_ps(q[0], q[1], 0x44), _mm512_shuffle_ps(q[0], q[1], 0xee));
        const __m512 w23 =
            _mm512_max_ps(_mm512_shuffle_ps(q[2], q[3], 0x44), _mm512_shuffle_ps(q[2], q[3], 0xee));
        __m512 amax =
            _mm512_max_ps(_mm512_shuffle_ps(w01, w23, 0x88), _mm512_shuffle_ps(w01, w23, 0xdd));
        /* element 4L + j is block L + 4j: back in block order */
        amax = _mm512_permutexvar_ps(
            _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15), amax);
        const __m512 d = _mm512_div_ps(amax, _mm512_set1_ps(127.0f));
        const __m512 id = _mm512_maskz_div_ps(
            _mm512_cmp_ps_mask(d, _mm512_setzero_ps(), _CMP_NEQ_UQ), _mm512_set1_ps(1.0f), d);
        uint16_t dh[16];
        float ids[16];
        _mm256_storeu_si256((__m256i *)dh, _mm512_cvtps_ph(d, _MM_FROUND_TO_NEAREST_INT));
        _mm512_storeu_ps(ids, id);
        for (int b = 0; b < k; b++) {
            const __m512 s = _mm512_set1_ps(ids[b]);
            const __m512i lo =
                _mm512_cvttps_epi32(round_away16(_mm512_mul_ps(_mm512_loadu_ps(xb + 32 * b), s)));
            const __m512i hi = _mm512_cvttps_epi32(
                round_away16(_mm512_mul_ps(_mm512_loadu_ps(xb + 32 * b + 16), s)));
            struct ifl_block_q8_0 *o = &y[b0 + b];
            o->d = dh[b];
            _mm_storeu_si128((__m128i *)o->qs, _mm512_cvtsepi32_epi8(lo));
            _mm_storeu_si128((__m128i *)(o->qs + 16), _mm512_cvtsepi32_epi8(hi));
        }
    }
}

/* ---- swiglu, geglu and softmax_exp of x86_simd.h in sixteen lanes ----
 *
 * Each lane does exp8's operations (x86_simd_rows.h) in its order, so every
 * element has the 256-bit table's bits (which are the AVX2 table's); a
 * block of 8 left after the blocks of 16 goes through the same code with
 * half the lanes masked off, the last n % 8 through expf as there. */

AI __m512 exp8x2(__m512 x)
{
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.0f)), _mm512_set1_ps(88.0f));
    __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.0f / 720);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 120));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 24));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f / 6));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
    __m512i e =
        _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(k), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

/* g / (1 + e^(-s g)) * u with s = 1 (swiglu) or the tanh form's argument
 * (geglu) on the lanes of m */
AI void gate16(int geglu, __mmask16 m, float *g, const float *u)
{
    const __m512 one = _mm512_set1_ps(1.0f);
    __m512 x = _mm512_maskz_loadu_ps(m, g), e;
    if (geglu) {
        __m512 c = _mm512_mul_ps(
            _mm512_set1_ps(0.79788456f),
            _mm512_fmadd_ps(_mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(0.044715f), x), x), x, x));
        e = exp8x2(_mm512_mul_ps(_mm512_set1_ps(-2.0f), c));
    } else {
        e = exp8x2(_mm512_sub_ps(_mm512_setzero_ps(), x));
    }
    _mm512_mask_storeu_ps(
        g, m, _mm512_mul_ps(_mm512_div_ps(x, _mm512_add_ps(one, e)), _mm512_maskz_loadu_ps(m, u)));
}

/* the gate over a row: blocks of 16, one of 8, the rest through expf */
AI void gate_row(int geglu, int64_t n, float *g, const float *u)
{
    int64_t i = 0;
    for (; i + 16 <= n; i += 16)
        gate16(geglu, 0xffff, g + i, u + i);
    if (i + 8 <= n) {
        gate16(geglu, 0xff, g + i, u + i);
        i += 8;
    }
    for (; i < n; i++) {
        float x = g[i];
        float e = geglu ? expf(-2.0f * (0.79788456f * fmaf(0.044715f * x * x, x, x))) : expf(-x);
        g[i] = x / (1.0f + e) * u[i];
    }
}

static void z_swiglu(int64_t n, float *g, const float *u)
{
    gate_row(0, n, g, u);
}

static void z_geglu(int64_t n, float *g, const float *u)
{
    gate_row(1, n, g, u);
}

/* x86_softmax_exp's sums: four double lanes, lane j of a block of 8 adding
 * its elements j and j + 4 (in double) and then that to the lane; two
 * blocks a vector, the first block's add first. */
static double z_softmax_exp(int64_t n, float *s, float mx)
{
    int64_t i = 0;
    const __m512 m = _mm512_set1_ps(mx);
    __m256d acc = _mm256_setzero_pd();
    for (; i + 16 <= n; i += 16) {
        __m512 e = exp8x2(_mm512_sub_ps(_mm512_loadu_ps(s + i), m));
        _mm512_storeu_ps(s + i, e);
        __m512d a = _mm512_cvtps_pd(_mm512_castps512_ps256(e));
        __m512d b =
            _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(e), 1)));
        acc = _mm256_add_pd(acc,
                            _mm256_add_pd(_mm512_castpd512_pd256(a), _mm512_extractf64x4_pd(a, 1)));
        acc = _mm256_add_pd(acc,
                            _mm256_add_pd(_mm512_castpd512_pd256(b), _mm512_extractf64x4_pd(b, 1)));
    }
    if (i + 8 <= n) {
        __m512 e = exp8x2(_mm512_sub_ps(_mm512_maskz_loadu_ps(0xff, s + i), m));
        _mm512_mask_storeu_ps(s + i, 0xff, e);
        __m512d a = _mm512_cvtps_pd(_mm512_castps512_ps256(e));
        acc = _mm256_add_pd(acc,
                            _mm256_add_pd(_mm512_castpd512_pd256(a), _mm512_extractf64x4_pd(a, 1)));
        i += 8;
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

void ifl_kernels_fill_avx512_rows(struct ifl_kernels *k)
{
    k->exp_pass = z_exp_pass;
    k->quant[IFL_TYPE_Q8_0] = z_quant_q8_0;
    k->swiglu = z_swiglu;
    k->geglu = z_geglu;
    k->softmax_exp = z_softmax_exp;
}
