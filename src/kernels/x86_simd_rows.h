/*
 * Row passes: F32 to F16 conversion, SwiGLU, the softmax exponentials, and
 * the sampler's passes (max, find, exp_pass), with the eight-lane e^x they
 * share.
 *
 * A part of x86_simd.h, included only from there (in that order, after its
 * helpers): it relies on the includes, the AI macro and the helpers above
 * it, and on the ISA flags of the file that includes x86_simd.h.
 */

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
    __m256i e =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
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
        _mm256_storeu_ps(
            g + i, _mm256_mul_ps(_mm256_div_ps(gv, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++)
        g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

/* geglu of ref.c, eight at a time; a tail of n % 8 uses expf. */
static void x86_geglu(int64_t n, float *g, const float *u)
{
    int64_t i = 0;
    const __m256 one = _mm256_set1_ps(1.0f), k = _mm256_set1_ps(0.79788456f);
    const __m256 a = _mm256_set1_ps(0.044715f), m2 = _mm256_set1_ps(-2.0f);
    for (; i + 8 <= n; i += 8) {
        __m256 x = _mm256_loadu_ps(g + i);
        __m256 c = _mm256_mul_ps(k, _mm256_fmadd_ps(_mm256_mul_ps(_mm256_mul_ps(a, x), x), x, x));
        __m256 e = exp8(_mm256_mul_ps(m2, c));
        _mm256_storeu_ps(
            g + i, _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(one, e)), _mm256_loadu_ps(u + i)));
    }
    for (; i < n; i++) {
        float x = g[i], c = 0.79788456f * fmaf(0.044715f * x * x, x, x);
        g[i] = x / (1.0f + expf(-2.0f * c)) * u[i];
    }
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
    __m256 n =
        _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(IFL_EXP_LOG2E)), magic), magic);
    __m256 r = _mm256_sub_ps(_mm256_sub_ps(x, _mm256_mul_ps(n, _mm256_set1_ps(IFL_EXP_LN2_HI))),
                             _mm256_mul_ps(n, _mm256_set1_ps(IFL_EXP_LN2_LO)));
    __m256 p =
        _mm256_add_ps(_mm256_mul_ps(r, _mm256_set1_ps(IFL_EXP_P0)), _mm256_set1_ps(IFL_EXP_P1));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(IFL_EXP_P2));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(IFL_EXP_P3));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(IFL_EXP_P4));
    p = _mm256_add_ps(_mm256_mul_ps(p, r), _mm256_set1_ps(IFL_EXP_P5));
    p = _mm256_add_ps(_mm256_add_ps(_mm256_mul_ps(_mm256_mul_ps(p, r), r), r),
                      _mm256_set1_ps(1.0f));
    __m256i s =
        _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
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
            *sev +=
                (double)block16_sum(_mm256_mul_ps(e[h], v[h]), _mm256_mul_ps(e[h + 1], v[h + 1]));
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
