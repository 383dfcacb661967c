/*
 * Activation quantisation (Q8_0, Q8_K), F16 dequantisation, and the F16
 * KV-cache dot and axpy.
 *
 * A part of x86_simd.h, included only from there (in that order, after its
 * helpers): it relies on the includes, the AI macro and the helpers above
 * it, and on the ISA flags of the file that includes x86_simd.h.
 */

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
            __m256 eq =
                _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)), amv, _CMP_EQ_OQ);
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
AI __m256 ld_f16x8(const uint16_t *p)
{
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

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
