/*
 * Kernel tests: known-answer block layouts, quantiser round trips, the
 * reference gemm against a float dot of dequantised rows, every SIMD table
 * against the reference (bit-exact where the arithmetic is exact), and
 * batch invariance (bitwise) of every table.
 */
#include "kernels/blocks.h"
#include "kernels/kernels.h"
#include "t.h"

#include "core/err.h"
#include "core/fp16.h"
#include "core/rng.h"
#include "model/gguf.h"

static const enum ifl_type weight_types[] = {
    IFL_TYPE_F32,    IFL_TYPE_F16,    IFL_TYPE_BF16, IFL_TYPE_Q8_0, IFL_TYPE_Q4_0,
    IFL_TYPE_Q4_K,   IFL_TYPE_Q5_K,   IFL_TYPE_Q6_K, IFL_TYPE_Q5_0, IFL_TYPE_Q5_1,
    IFL_TYPE_IQ4_NL, IFL_TYPE_IQ4_XS, IFL_TYPE_Q3_K, IFL_TYPE_Q2_K, IFL_TYPE_MXFP4};
#define N_WT (int)(sizeof(weight_types) / sizeof(weight_types[0]))

static const char *table_names[] = {"scalar", "avx2", "avx512", "avx512bf16"};
#define N_TAB (int)(sizeof(table_names) / sizeof(table_names[0]))

static void fill_normal(struct ifl_rng *r, float *x, int64_t n, float scale)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = ifl_rng_normal(r) * scale;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        abort();
    return p;
}

/* Random f16 with a moderate magnitude (never nan or inf). */
static uint16_t rand_f16(struct ifl_rng *r, float scale)
{
    return ifl_f32_to_f16((ifl_rng_uniform(r) * 0.9f + 0.1f) * scale);
}

/* nrows rows of weight type t with n elements: either quantised from
 * gaussian floats, or (raw = 1) random bytes with sane f16 scales, which
 * reach every bit pattern of the quants and the 6-bit scales. */
static void make_weights(struct ifl_rng *r, enum ifl_type t, int64_t n, int nrows, int raw, void *w)
{
    const struct ifl_kernels *ref = ifl_kernels_ref();
    size_t rs = ifl_type_row_size(t, n);
    float *tmp = xmalloc((size_t)n * sizeof(float));
    for (int i = 0; i < nrows; i++) {
        uint8_t *row = (uint8_t *)w + (size_t)i * rs;
        if (!raw || t == IFL_TYPE_F32 || t == IFL_TYPE_F16 || t == IFL_TYPE_BF16) {
            fill_normal(r, tmp, n, 0.5f);
            ref->quant[t](tmp, row, n);
            continue;
        }
        for (size_t j = 0; j < rs; j++)
            row[j] = (uint8_t)ifl_rng_next(r);
        const struct ifl_type_info *ti = ifl_type_info(t);
        for (int64_t b = 0; b < n / ti->blck; b++) {
            uint8_t *blk = row + (size_t)b * ti->size;
            uint16_t d = rand_f16(r, 0.01f), dm = rand_f16(r, 0.01f);
            switch (t) {
            case IFL_TYPE_Q8_0:
            case IFL_TYPE_Q4_0:
            case IFL_TYPE_Q5_0:
            case IFL_TYPE_IQ4_NL:
                memcpy(blk, &d, 2);
                break;
            case IFL_TYPE_Q5_1: /* m: a plausible min, of either sign */
                memcpy(blk, &d, 2);
                dm = ifl_f32_to_f16(ifl_f16_to_f32(dm) * (ifl_rng_next(r) & 1 ? 8.0f : -8.0f));
                memcpy(blk + 2, &dm, 2);
                break;
            case IFL_TYPE_Q4_K:
            case IFL_TYPE_Q5_K:
                memcpy(blk, &d, 2);
                memcpy(blk + 2, &dm, 2);
                break;
            case IFL_TYPE_Q6_K:
                memcpy(blk + 208, &d, 2);
                break;
            case IFL_TYPE_IQ4_XS:
                memcpy(blk, &d, 2);
                break;
            case IFL_TYPE_Q2_K:
                memcpy(blk + 80, &d, 2);
                memcpy(blk + 82, &dm, 2);
                break;
            case IFL_TYPE_Q3_K:
                memcpy(blk + 108, &d, 2);
                break;
            case IFL_TYPE_MXFP4: /* scales 2^-12 .. 2^-5, like the f16 ones */
                blk[0] = (uint8_t)(116 + ifl_rng_next(r) % 8);
                break;
            default:
                break;
            }
        }
    }
    free(tmp);
}

/* ---- known answers: the layouts, not just self-consistency ---------- */

static void test_known_q4_0_q8_0(void)
{
    const struct ifl_kernels *k = ifl_kernels_ref();
    struct ifl_block_q4_0 b;
    b.d = ifl_f32_to_f16(0.5f);
    for (int j = 0; j < 16; j++)
        b.qs[j] = (uint8_t)(j | (15 - j) << 4);
    float y[32];
    k->dequant[IFL_TYPE_Q4_0](&b, y, 32);
    for (int j = 0; j < 16; j++) {
        CHECK(y[j] == 0.5f * (float)(j - 8));
        CHECK(y[j + 16] == 0.5f * (float)(7 - j));
    }
    struct ifl_block_q8_0 q;
    q.d = ifl_f32_to_f16(0.25f);
    for (int j = 0; j < 32; j++)
        q.qs[j] = (int8_t)(j * 8 - 128);
    k->dequant[IFL_TYPE_Q8_0](&q, y, 32);
    for (int j = 0; j < 32; j++)
        CHECK(y[j] == 0.25f * (float)(j * 8 - 128));

    /* Q8_0 quantisation: d = amax / 127, q = round half away from zero. */
    float x[32] = {0};
    x[0] = 127.0f;
    x[1] = -2.5f;
    x[2] = 2.5f;
    x[3] = 0.49f;
    x[4] = -127.0f;
    k->quant[IFL_TYPE_Q8_0](x, &q, 32);
    CHECK(ifl_f16_to_f32(q.d) == 1.0f);
    CHECK_EQ(q.qs[0], 127);
    CHECK_EQ(q.qs[1], -3);
    CHECK_EQ(q.qs[2], 3);
    CHECK_EQ(q.qs[3], 0);
    CHECK_EQ(q.qs[4], -127);
}

static void test_known_q4_k_q5_k(void)
{
    const struct ifl_kernels *k = ifl_kernels_ref();
    /* Sub-block j gets scale sc[j] and min m[j], chosen to use all 6 bits. */
    static const uint8_t sc[8] = {1, 2, 3, 63, 17, 33, 48, 62};
    static const uint8_t m[8] = {5, 0, 63, 7, 49, 20, 36, 15};
    struct ifl_block_q4_k b;
    memset(&b, 0, sizeof(b));
    b.d = ifl_f32_to_f16(0.5f);
    b.dmin = ifl_f32_to_f16(0.25f);
    for (int j = 0; j < 4; j++) {
        b.scales[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
        b.scales[j + 4] = (uint8_t)(m[j] | (m[j + 4] >> 4) << 6);
        b.scales[j + 8] = (uint8_t)((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
    }
    for (int l = 0; l < 128; l++)
        b.qs[l] = (uint8_t)((l % 16) | ((l * 7) % 16) << 4);
    float y[256];
    k->dequant[IFL_TYPE_Q4_K](&b, y, 256);
    for (int e = 0; e < 256; e++) {
        int j = e / 32, l = e % 32, byte = 32 * (j / 2) + l;
        int q = j % 2 == 0 ? byte % 16 : (byte * 7) % 16;
        CHECK(y[e] == 0.5f * (float)sc[j] * (float)q - 0.25f * (float)m[j]);
    }

    struct ifl_block_q5_k b5;
    memset(&b5, 0, sizeof(b5));
    b5.d = b.d;
    b5.dmin = b.dmin;
    memcpy(b5.scales, b.scales, 12);
    memcpy(b5.qs, b.qs, 128);
    for (int l = 0; l < 32; l++)
        b5.qh[l] = (uint8_t)(l * 37 + 11);
    k->dequant[IFL_TYPE_Q5_K](&b5, y, 256);
    for (int e = 0; e < 256; e++) {
        int j = e / 32, l = e % 32, byte = 32 * (j / 2) + l;
        int q = j % 2 == 0 ? byte % 16 : (byte * 7) % 16;
        q += (((l * 37 + 11) & 255) >> j & 1) * 16;
        CHECK(y[e] == 0.5f * (float)sc[j] * (float)q - 0.25f * (float)m[j]);
    }
}

static void test_known_q6_k_q8_k(void)
{
    const struct ifl_kernels *k = ifl_kernels_ref();
    struct ifl_block_q6_k b;
    b.d = ifl_f32_to_f16(0.125f);
    for (int j = 0; j < 16; j++)
        b.scales[j] = (int8_t)(j * 17 - 128);
    uint8_t q[256];
    for (int e = 0; e < 256; e++)
        q[e] = (uint8_t)((e * 29 + 3) % 64);
    /* pack by the layout written in blocks.h */
    for (int h = 0; h < 2; h++) {
        for (int l = 0; l < 32; l++) {
            const uint8_t *qq = q + 128 * h;
            b.ql[64 * h + l] = (uint8_t)((qq[l] & 15) | (qq[l + 64] & 15) << 4);
            b.ql[64 * h + l + 32] = (uint8_t)((qq[l + 32] & 15) | (qq[l + 96] & 15) << 4);
            b.qh[32 * h + l] = (uint8_t)(qq[l] >> 4 | (qq[l + 32] >> 4) << 2 |
                                         (qq[l + 64] >> 4) << 4 | (qq[l + 96] >> 4) << 6);
        }
    }
    float y[256];
    k->dequant[IFL_TYPE_Q6_K](&b, y, 256);
    for (int e = 0; e < 256; e++)
        CHECK(y[e] == 0.125f * (float)b.scales[e / 16] * (float)(q[e] - 32));

    /* Q8_K: the signed largest element maps to -127, d = 1 / iscale. */
    float x[256];
    for (int e = 0; e < 256; e++)
        x[e] = (float)(e % 50) * 0.01f;
    x[77] = 3.0f;
    x[78] = -3.0f; /* ties on magnitude: the first one wins */
    struct ifl_block_q8_k a;
    k->quant[IFL_TYPE_Q8_K](x, &a, 256);
    CHECK_EQ(a.qs[77], -127);
    CHECK_EQ(a.qs[78], 127);
    CHECK(a.d == 1.0f / (-127.0f / 3.0f));
    for (int j = 0; j < 16; j++) {
        int s = 0;
        for (int l = 0; l < 16; l++)
            s += a.qs[16 * j + l];
        CHECK_EQ(a.bsums[j], s);
    }
    k->dequant[IFL_TYPE_Q8_K](&a, y, 256);
    for (int e = 0; e < 256; e++)
        CHECK(y[e] == a.d * (float)a.qs[e]);
    memset(x, 0, sizeof(x));
    k->quant[IFL_TYPE_Q8_K](x, &a, 256);
    CHECK(a.d == 0.0f);
    CHECK_EQ(a.qs[5], 0);
}

/* MXFP4: the E2M1 codes and nibble order, the E8M0 half scale at its
 * ends (subnormal 0 and 1, 2^127 at 255), and the quantiser's choice of
 * the power of two. */
static void test_known_mxfp4(void)
{
    const struct ifl_kernels *k = ifl_kernels_ref();
    static const float e2m1[8] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6};
    struct ifl_block_mxfp4 b;
    b.e = 127; /* scale 1: the values are the E2M1 codes themselves */
    for (int j = 0; j < 16; j++)
        b.qs[j] = (uint8_t)(j | (15 - j) << 4);
    float y[32];
    k->dequant[IFL_TYPE_MXFP4](&b, y, 32);
    for (int j = 0; j < 16; j++) {
        CHECK(y[j] == (j < 8 ? e2m1[j] : -e2m1[j - 8]));
        int h = 15 - j;
        CHECK(y[j + 16] == (h < 8 ? e2m1[h] : -e2m1[h - 8]));
    }
    CHECK(ifl_e8m0_half(0) == ldexpf(1.0f, -128));
    CHECK(ifl_e8m0_half(1) == ldexpf(1.0f, -127));
    CHECK(ifl_e8m0_half(2) == ldexpf(1.0f, -126));
    CHECK(ifl_e8m0_half(128) == 1.0f);
    CHECK(ifl_e8m0_half(255) == ldexpf(1.0f, 127));
    /* 6 and -3 in a block of amax 6: scale 1 (e 127) represents both exactly */
    float x[32] = {0};
    x[0] = 6.0f;
    x[17] = -3.0f;
    x[5] = 0.5f;
    k->quant[IFL_TYPE_MXFP4](x, &b, 32);
    CHECK_EQ(b.e, 127);
    k->dequant[IFL_TYPE_MXFP4](&b, y, 32);
    for (int j = 0; j < 32; j++)
        CHECK(y[j] == x[j]);
    /* zero block: e 0, every code 0 */
    memset(x, 0, sizeof x);
    k->quant[IFL_TYPE_MXFP4](x, &b, 32);
    CHECK_EQ(b.e, 0);
    for (int j = 0; j < 16; j++)
        CHECK_EQ(b.qs[j], 0);
    /* 7.5 alone: ggml's scale (e 127) clips it to 6, the next (e 128)
     * rounds it to 8, the smaller error */
    x[3] = 7.5f;
    k->quant[IFL_TYPE_MXFP4](x, &b, 32);
    CHECK_EQ(b.e, 128);
    k->dequant[IFL_TYPE_MXFP4](&b, y, 32);
    CHECK(y[3] == 8.0f);
}

/* ---- quantise -> dequantise round trips ----------------------------- */

static void test_roundtrip(void)
{
    static const struct {
        enum ifl_type t;
        double max_rel;
    } cases[] = {
        {IFL_TYPE_F32, 0.0},     {IFL_TYPE_F16, 1e-3},  {IFL_TYPE_BF16, 5e-3},
        {IFL_TYPE_Q8_0, 0.01},   {IFL_TYPE_Q8_K, 0.01}, {IFL_TYPE_Q4_0, 0.15},
        {IFL_TYPE_Q4_K, 0.10},   {IFL_TYPE_Q5_K, 0.05}, {IFL_TYPE_Q6_K, 0.025},
        {IFL_TYPE_Q5_0, 0.08},   {IFL_TYPE_Q5_1, 0.06}, {IFL_TYPE_IQ4_NL, 0.12},
        {IFL_TYPE_IQ4_XS, 0.12}, {IFL_TYPE_Q3_K, 0.20}, {IFL_TYPE_Q2_K, 0.40},
        {IFL_TYPE_MXFP4, 0.20},
    };
    const struct ifl_kernels *k = ifl_kernels_ref();
    struct ifl_rng r;
    ifl_rng_seed(&r, 42);
    int64_t n = 4096;
    float *x = xmalloc((size_t)n * 4), *y = xmalloc((size_t)n * 4);
    void *q = xmalloc((size_t)n * 4);
    fill_normal(&r, x, n, 1.0f);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        enum ifl_type t = cases[i].t;
        k->quant[t](x, q, n);
        k->dequant[t](q, y, n);
        double se = 0, sx = 0;
        for (int64_t j = 0; j < n; j++) {
            se += ((double)y[j] - x[j]) * ((double)y[j] - x[j]);
            sx += (double)x[j] * x[j];
        }
        double rel = sqrt(se / sx);
        CHECK_MSG(rel <= cases[i].max_rel, "%s: relative rms error %.4f > %.4f",
                  ifl_type_info(t)->name, rel, cases[i].max_rel);
        if (getenv("IFL_TEST_VERBOSE"))
            fprintf(stderr, "  %-5s rel rms err %.5f\n", ifl_type_info(t)->name, rel);
    }
    free(x);
    free(y);
    free(q);
}

/* ---- a test problem: nr activation rows, nc weight rows -------------- */

struct problem {
    enum ifl_type t, act;
    int64_t n;
    int nr, nc;
    size_t xs, ws;
    float *xf;    /* (nr, n) float activations */
    void *x;      /* (nr) rows in act format, xs bytes apart */
    void *w;      /* (nc) weight rows, ws bytes apart */
    double *mag;  /* (nr, nc) sum |w_i| |x_i| over dequantised values */
    float *y_ref; /* (nr, nc) reference gemm */
};

static void problem_init(struct problem *p, struct ifl_rng *r, enum ifl_type t, int64_t n, int nr,
                         int nc, int raw)
{
    const struct ifl_kernels *ref = ifl_kernels_ref();
    p->t = t;
    p->act = ifl_type_info(t)->act;
    p->n = n;
    p->nr = nr;
    p->nc = nc;
    p->xs = ifl_type_row_size(p->act, n) + 16; /* a gap, to catch stride bugs */
    p->ws = ifl_type_row_size(t, n) + 2;
    if (t == IFL_TYPE_F32)
        p->ws += 2;
    p->xf = xmalloc((size_t)(nr * n) * 4);
    p->x = xmalloc(p->xs * (size_t)nr);
    p->w = xmalloc(p->ws * (size_t)nc);
    p->mag = xmalloc(sizeof(double) * (size_t)(nr * nc));
    p->y_ref = xmalloc(sizeof(float) * (size_t)(nr * nc));
    fill_normal(r, p->xf, nr * n, 1.0f);
    for (int i = 0; i < nr; i++)
        ref->quant[p->act](p->xf + i * n, (char *)p->x + (size_t)i * p->xs, n);
    size_t rs = ifl_type_row_size(t, n);
    uint8_t *tmp = xmalloc(rs * (size_t)nc);
    make_weights(r, t, n, nc, raw, tmp);
    for (int c = 0; c < nc; c++)
        memcpy((char *)p->w + (size_t)c * p->ws, tmp + (size_t)c * rs, rs);
    free(tmp);
    float *wd = xmalloc((size_t)n * 4), *xd = xmalloc((size_t)n * 4);
    for (int i = 0; i < nr; i++) {
        ref->dequant[p->act]((char *)p->x + (size_t)i * p->xs, xd, n);
        for (int c = 0; c < nc; c++) {
            ref->dequant[t]((char *)p->w + (size_t)c * p->ws, wd, n);
            double m = 0;
            for (int64_t j = 0; j < n; j++)
                m += fabs((double)wd[j] * xd[j]);
            p->mag[i * nc + c] = m;
        }
    }
    free(wd);
    free(xd);
    ref->gemm[t](n, nr, nc, p->x, p->xs, p->w, p->ws, p->y_ref, (size_t)nc);
}

static void problem_free(struct problem *p)
{
    free(p->xf);
    free(p->x);
    free(p->w);
    free(p->mag);
    free(p->y_ref);
}

static double tol_of(double mag)
{
    return 1e-5 * mag + 1e-6;
}

/* The tolerance of table k's gemm of type t against ref: tol_of, or for a
 * table that rounds activations to BF16 (kernels.h act_bf16) 2^-8 of the
 * magnitude on top: BF16 keeps 8 significant bits, so rounding moves each
 * activation by at most 2^-8 of itself and the sum by at most 2^-8 mag. */
static double tol_tab(const struct ifl_kernels *k, enum ifl_type t, double mag)
{
    return k->act_bf16[t] ? mag / 256 + tol_of(mag) : tol_of(mag);
}

/* For a table that rounds activations to BF16: a float64 dot of weight row
 * c with activation row i rounded so, which its output must meet within
 * tol_of (so the kernel computes that, and only the rounding moves it). */
static double bf16_act_dot(const struct problem *p, int i, int c)
{
    const struct ifl_kernels *ref = ifl_kernels_ref();
    float *wd = xmalloc((size_t)p->n * 4);
    ref->dequant[p->t]((const char *)p->w + (size_t)c * p->ws, wd, p->n);
    const float *x = p->xf + (size_t)i * (size_t)p->n;
    double s = 0;
    for (int64_t j = 0; j < p->n; j++)
        s += (double)wd[j] * ifl_bf16_to_f32(ifl_f32_to_bf16(x[j]));
    free(wd);
    return s;
}

/* Checks output i (row i / nc, column i % nc) of table k's gemm (x16 or
 * plain) against ref and, for a table rounding activations to BF16,
 * against bf16_act_dot; returns 1 when it fails. */
static double worst_bf16_act; /* the largest error / mag seen under act_bf16 */

static int gemm_out_bad(const struct ifl_kernels *k, const struct problem *p, const float *y, int i,
                        int x16)
{
    double err = fabs((double)y[i] - p->y_ref[i]);
    if (k->act_bf16[p->t] && p->mag[i] > 0 && err / p->mag[i] > worst_bf16_act)
        worst_bf16_act = err / p->mag[i];
    if (!(err <= tol_tab(k, p->t, p->mag[i]))) {
        T_FAIL_("%s%s gemm %s n=%lld nr=%d nc=%d out %d: %.9g vs ref %.9g (mag %g)", k->name,
                x16 ? " x16" : "", ifl_type_info(p->t)->name, (long long)p->n, p->nr, p->nc, i,
                y[i], p->y_ref[i], p->mag[i]);
        return 1;
    }
    if (k->act_bf16[p->t]) {
        double s = bf16_act_dot(p, i / p->nc, i % p->nc);
        if (!(fabs((double)y[i] - s) <= tol_of(p->mag[i]))) {
            T_FAIL_("%s%s gemm %s n=%lld out %d: %.9g vs %.9g with activations in bf16", k->name,
                    x16 ? " x16" : "", ifl_type_info(p->t)->name, (long long)p->n, i, y[i], s);
            return 1;
        }
    }
    return 0;
}

/* The reference gemm equals a double dot of the dequantised rows: proves
 * the integer formulation (scales, mins, the -32 / -8 offsets) is right. */
static void test_ref_gemm_vs_dequant(void)
{
    const struct ifl_kernels *ref = ifl_kernels_ref();
    struct ifl_rng r;
    ifl_rng_seed(&r, 7);
    for (int ti = 0; ti < N_WT; ti++) {
        for (int raw = 0; raw < 2; raw++) {
            enum ifl_type t = weight_types[ti];
            int64_t n = ifl_type_info(t)->blck == 1 ? 777 : 1024;
            struct problem p;
            problem_init(&p, &r, t, n, 3, 5, raw);
            float *wd = xmalloc((size_t)n * 4), *xd = xmalloc((size_t)n * 4);
            for (int i = 0; i < p.nr; i++) {
                ref->dequant[p.act]((char *)p.x + (size_t)i * p.xs, xd, n);
                for (int c = 0; c < p.nc; c++) {
                    ref->dequant[t]((char *)p.w + (size_t)c * p.ws, wd, n);
                    double s = 0;
                    for (int64_t j = 0; j < n; j++)
                        s += (double)wd[j] * xd[j];
                    CHECK_MSG(fabs(s - p.y_ref[i * p.nc + c]) <= tol_of(p.mag[i * p.nc + c]) * 4,
                              "%s raw=%d [%d][%d]: ref gemm %.9g vs dequant dot %.9g",
                              ifl_type_info(t)->name, raw, i, c, p.y_ref[i * p.nc + c], s);
                }
            }
            free(wd);
            free(xd);
            problem_free(&p);
        }
    }
}

/* ---- every table against the reference ------------------------------ */

static int bits_equal(const void *a, const void *b, size_t n)
{
    return memcmp(a, b, n) == 0;
}

static void check_table_quant(const struct ifl_kernels *k)
{
    const struct ifl_kernels *ref = ifl_kernels_ref();
    struct ifl_rng r;
    ifl_rng_seed(&r, 11);
    int64_t n = 2048;
    float *x = xmalloc((size_t)n * 4);
    uint8_t *a = xmalloc((size_t)n * 4), *b = xmalloc((size_t)n * 4);
    float *fa = xmalloc((size_t)n * 4), *fb = xmalloc((size_t)n * 4);
    for (int trial = 0; trial < 40; trial++) {
        /* rows of whole groups of 16 blocks and rows that end in a part of one */
        n = trial % 3 == 0 ? 2048 : trial % 3 == 1 ? 768 : 256 + 32 * (trial % 7);
        float scale = trial % 4 == 0 ? 1e-3f : trial % 4 == 1 ? 300.0f : 1.0f;
        fill_normal(&r, x, n, scale);
        if (trial % 5 == 0) /* exact ties and zero blocks */
            for (int64_t i = 0; i < n; i++)
                x[i] = (i / 256) % 3 == 0 ? 0.0f : (float)((int)(x[i] * 4.0f)) * 0.5f;
        for (int t = 0; t < IFL_TYPE_COUNT; t++) {
            if (!ref->quant[t] || n % ifl_type_info((uint32_t)t)->blck)
                continue;
            CHECK(k->quant[t] != NULL);
            size_t rs = ifl_type_row_size((enum ifl_type)t, n);
            memset(a, 0xaa, rs);
            memset(b, 0x55, rs);
            ref->quant[t](x, a, n);
            k->quant[t](x, b, n);
            CHECK_MSG(bits_equal(a, b, rs), "%s: quant %s differs from ref (trial %d)", k->name,
                      ifl_type_info((uint32_t)t)->name, trial);
            ref->dequant[t](a, fa, n);
            k->dequant[t](a, fb, n);
            CHECK_MSG(bits_equal(fa, fb, (size_t)n * 4), "%s: dequant %s differs from ref", k->name,
                      ifl_type_info((uint32_t)t)->name);
        }
    }
    /* dequant of raw random blocks too */
    n = 2048;
    for (int ti = 0; ti < N_WT; ti++) {
        enum ifl_type t = weight_types[ti];
        make_weights(&r, t, n, 1, 1, a);
        ref->dequant[t](a, fa, n);
        k->dequant[t](a, fb, n);
        CHECK_MSG(bits_equal(fa, fb, (size_t)n * 4), "%s: raw dequant %s differs", k->name,
                  ifl_type_info(t)->name);
    }
    free(x);
    free(a);
    free(b);
    free(fa);
    free(fb);
}

static void check_table_gemm(const struct ifl_kernels *k)
{
    static const int dims[] = {1, 2, 3, 5, 7, 16, 33};
    const int nd = (int)(sizeof(dims) / sizeof(dims[0]));
    struct ifl_rng r;
    ifl_rng_seed(&r, 99);
    for (int ti = 0; ti < N_WT; ti++) {
        enum ifl_type t = weight_types[ti];
        int64_t bl = ifl_type_info(t)->blck;
        int64_t ns[4] = {bl, 3 * bl, 2048, 0};
        if (bl == 1) {
            ns[0] = 1;
            ns[1] = 13;
            ns[3] = 1001;
        } else {
            ns[3] = bl * (bl == 32 ? 37 : 7);
        }
        for (int ni = 0; ni < 4; ni++) {
            for (int di = 0; di < nd; di++) {
                int nr = dims[di], nc = dims[(di * 3 + ni) % nd];
                struct problem p;
                problem_init(&p, &r, t, ns[ni], nr, nc, (di + ni) % 2);
                float *y = xmalloc(sizeof(float) * (size_t)(nr * nc));
                k->gemm[t](p.n, nr, nc, p.x, p.xs, p.w, p.ws, y, (size_t)nc);
                int bad = 0;
                for (int i = 0; i < nr * nc && bad < 3; i++)
                    bad += gemm_out_bad(k, &p, y, i, 0);
                free(y);
                problem_free(&p);
            }
        }
    }
}

/* gemm of the whole nr x nc block equals, bit for bit, each output on its
 * own and the outputs of other tilings. */
static void check_table_invariance(const struct ifl_kernels *k)
{
    struct ifl_rng r;
    ifl_rng_seed(&r, 1234);
    for (int ti = 0; ti < N_WT; ti++) {
        enum ifl_type t = weight_types[ti];
        int64_t n = ifl_type_info(t)->blck == 1 ? 517 : ifl_type_info(t)->blck * 9;
        int nr = 13, nc = 11;
        struct problem p;
        problem_init(&p, &r, t, n, nr, nc, 0);
        float *full = xmalloc(sizeof(float) * (size_t)(nr * nc));
        float *part = xmalloc(sizeof(float) * (size_t)(nr * nc));
        k->gemm[t](n, nr, nc, p.x, p.xs, p.w, p.ws, full, (size_t)nc);
        for (int i = 0; i < nr; i++) {
            for (int c = 0; c < nc; c++) {
                float one;
                k->gemm[t](n, 1, 1, (char *)p.x + (size_t)i * p.xs, p.xs,
                           (char *)p.w + (size_t)c * p.ws, p.ws, &one, 1);
                CHECK_MSG(bits_equal(&one, &full[i * nc + c], 4),
                          "%s %s: y[%d][%d] alone %.9g, in batch %.9g", k->name,
                          ifl_type_info(t)->name, i, c, one, full[i * nc + c]);
            }
        }
        /* tilings: chunks of rows and columns of every size 1..6 */
        for (int cr = 1; cr <= 6; cr++) {
            int cc = 7 - cr;
            memset(part, 0, sizeof(float) * (size_t)(nr * nc));
            for (int r0 = 0; r0 < nr; r0 += cr)
                for (int c0 = 0; c0 < nc; c0 += cc) {
                    int mr = nr - r0 < cr ? nr - r0 : cr, mc = nc - c0 < cc ? nc - c0 : cc;
                    k->gemm[t](n, mr, mc, (char *)p.x + (size_t)r0 * p.xs, p.xs,
                               (char *)p.w + (size_t)c0 * p.ws, p.ws, part + r0 * nc + c0,
                               (size_t)nc);
                }
            CHECK_MSG(bits_equal(part, full, sizeof(float) * (size_t)(nr * nc)),
                      "%s %s: tiling %dx%d changes results", k->name, ifl_type_info(t)->name, cr,
                      cc);
        }
        free(full);
        free(part);
        problem_free(&p);
    }
}

/* attn_qk_* and attn_pv_* of table k against ref, over a cache of F16
 * (q8 = 0) or Q8_0 (q8 = 1) rows of three heads, the middle one used: rows
 * are wider than a head, as the other KV heads sit between them, and do
 * not start on vector boundaries (ref reads Q8_0 blocks through their
 * struct, so those rows keep its 2-byte alignment). Every head count and
 * position count from one to past a full tile; the random data is drawn
 * once and each case takes a prefix.
 * Scores must agree within float reassociation and not depend on what
 * shares the call; weighted values must equal ref bit for bit. */
#define ATTN_NQ 9
#define ATTN_NT 40
static void check_attn(const struct ifl_kernels *k, int q8, int d, struct ifl_rng *r)
{
    const struct ifl_kernels *ref = ifl_kernels_ref();
    const size_t lds = ATTN_NT;
    /* F16 rows: 3d + 5 elements, the key head at element 2, the value head
     * at 1. Q8_0 rows: 3d / 32 blocks + 6 bytes, both heads at block d / 32.
     * ks is the ks as the kernels take it: elements (F16) or bytes. */
    const size_t ks = q8 ? (size_t)d * 3 / 32 * 34 + 6 : (size_t)d * 3 + 5;
    const size_t row_bytes = q8 ? ks : 2 * ks;
    const size_t k_off = q8 ? (size_t)d / 32 * 34 : 4, v_off = q8 ? k_off : 2;
    char *kv = xmalloc(row_bytes * ATTN_NT);
    float *q = xmalloc(sizeof(float) * ATTN_NQ * (size_t)d);
    float *o0 = xmalloc(sizeof(float) * ATTN_NQ * (size_t)d);
    float *o1 = xmalloc(sizeof(float) * ATTN_NQ * (size_t)d);
    float *o2 = xmalloc(sizeof(float) * ATTN_NQ * (size_t)d);
    float *s1 = xmalloc(sizeof(float) * lds * ATTN_NQ);
    float *s2 = xmalloc(sizeof(float) * lds * ATTN_NQ);
    float *deq = xmalloc(sizeof(float) * (size_t)d * 3);
    double *mag = xmalloc(sizeof(double) * ATTN_NQ * ATTN_NT); /* sum |q k| per (head, position) */
    memset(kv, 0, row_bytes * ATTN_NT);
    for (int i = 0; i < ATTN_NQ * d; i++) {
        q[i] = ifl_rng_normal(r);
        o0[i] = ifl_rng_normal(r);
    }
    for (int t = 0; t < ATTN_NT; t++) {
        char *row = kv + (size_t)t * row_bytes;
        if (q8) {
            for (int e = 0; e < d * 3; e++)
                deq[e] = ifl_rng_normal(r);
            ref->quant[IFL_TYPE_Q8_0](deq, row, (int64_t)d * 3);
            ref->dequant[IFL_TYPE_Q8_0](row, deq, (int64_t)d * 3);
        } else {
            for (size_t e = 0; e < ks; e++)
                ((uint16_t *)row)[e] = ifl_f32_to_f16(ifl_rng_normal(r));
            for (int e = 0; e < d; e++)
                deq[d + e] = ifl_f16_to_f32(((uint16_t *)row)[2 + e]);
        }
        for (int i = 0; i < ATTN_NQ; i++) {
            double m = 0;
            for (int e = 0; e < d; e++)
                m += fabs(q[(size_t)i * d + e] * deq[d + e]);
            mag[i * ATTN_NT + t] = m;
        }
    }
    const char *kh = kv + k_off, *vh = kv + v_off;
    const char *name = q8 ? "q8_0" : "f16";
    for (int nq = 1; nq <= ATTN_NQ; nq++) {
        for (int nt = 1; nt <= ATTN_NT; nt++) {
            memset(s2, 0, sizeof(float) * lds * ATTN_NQ);
            if (q8) {
                k->attn_qk_q8_0(d, nq, q, kh, ks, nt, 0.125f, s1, lds);
                ref->attn_qk_q8_0(d, nq, q, kh, ks, nt, 0.125f, s2, lds);
            } else {
                k->attn_qk_f16(d, nq, q, (const uint16_t *)kh, ks, nt, 0.125f, s1, lds);
                ref->attn_qk_f16(d, nq, q, (const uint16_t *)kh, ks, nt, 0.125f, s2, lds);
            }
            for (int i = 0; i < nq; i++)
                for (int t = 0; t < nt; t++) {
                    float got = s1[(size_t)i * lds + t], one;
                    CHECK_MSG(fabs(got - s2[(size_t)i * lds + t]) <=
                                  0.125 * tol_of(mag[i * ATTN_NT + t]),
                              "%s attn_qk_%s d=%d nq=%d nt=%d: score (%d, %d) %.9g, ref %.9g",
                              k->name, name, d, nq, nt, i, t, got, s2[(size_t)i * lds + t]);
                    /* the same score alone in its call: the same bits */
                    const float *qi = q + (size_t)i * d;
                    if (q8)
                        k->attn_qk_q8_0(d, 1, qi, kh + (size_t)t * row_bytes, ks, 1, 0.125f, &one,
                                        1);
                    else
                        k->attn_qk_f16(d, 1, qi, (const uint16_t *)(kh + (size_t)t * row_bytes), ks,
                                       1, 0.125f, &one, 1);
                    CHECK_MSG(bits_equal(&one, &got, sizeof(float)),
                              "%s attn_qk_%s d=%d nq=%d nt=%d: score (%d, %d) depends on the "
                              "call's shape",
                              k->name, name, d, nq, nt, i, t);
                }
            /* probabilities: the scores squashed into 0..1 */
            for (size_t i = 0; i < lds * ATTN_NQ; i++)
                s1[i] = s2[i] = 1.0f / (1.0f + expf(-s2[i]));
            memcpy(o1, o0, sizeof(float) * (size_t)nq * (size_t)d);
            memcpy(o2, o0, sizeof(float) * (size_t)nq * (size_t)d);
            if (q8) {
                k->attn_pv_q8_0(d, nq, s1, lds, vh, ks, nt, o1);
                ref->attn_pv_q8_0(d, nq, s2, lds, vh, ks, nt, o2);
            } else {
                k->attn_pv_f16(d, nq, s1, lds, (const uint16_t *)vh, ks, nt, o1);
                ref->attn_pv_f16(d, nq, s2, lds, (const uint16_t *)vh, ks, nt, o2);
            }
            CHECK_MSG(bits_equal(o1, o2, sizeof(float) * (size_t)nq * (size_t)d),
                      "%s attn_pv_%s d=%d nq=%d nt=%d differs from ref", k->name, name, d, nq, nt);
        }
    }
    free(kv);
    free(q);
    free(o0);
    free(o1);
    free(o2);
    free(s1);
    free(s2);
    free(deq);
    free(mag);
}

#include "test_kernels_attn_tile.h"

static void check_table_f16(const struct ifl_kernels *k)
{
    struct ifl_rng r;
    ifl_rng_seed(&r, 5);
    /* conversions, special values included */
    static const float special[] = {0.0f,          -0.0f,          1.0f,
                                    -1.0f,         65504.0f,       65519.0f,
                                    65520.0f,      -70000.0f,      1e-8f,
                                    -1e-8f,        5.96e-8f,       2.98e-8f,
                                    2.99e-8f,      6.1e-5f,        6.103515625e-05f,
                                    1.0009765625f, 1.00048828125f, 1.00146484375f,
                                    3.0e-41f,      0.1f,           0.2f,
                                    0.3f};
    const int ns = (int)(sizeof(special) / sizeof(special[0]));
    float x[301];
    uint16_t h[301];
    for (int len = 1; len <= 301; len += 37) {
        for (int i = 0; i < len; i++) {
            if (i < ns)
                x[i] = special[(i * 7) % ns];
            else if (i % 11 == 0)
                x[i] = ifl_bits_to_f32((uint32_t)ifl_rng_next(&r)); /* any bits: nan, inf, tiny */
            else
                x[i] = ifl_rng_normal(&r) * 100.0f;
        }
        x[len - 1] = len % 2 ? INFINITY : NAN;
        memset(h, 0, sizeof(h));
        k->cvt_f32_f16(len, x, h);
        for (int i = 0; i < len; i++)
            CHECK_MSG(h[i] == ifl_f32_to_f16(x[i]), "%s cvt_f32_f16(%a [%08x]) = %04x, want %04x",
                      k->name, x[i], ifl_f32_to_bits(x[i]), h[i], ifl_f32_to_f16(x[i]));
    }
    /* dot and axpy against the reference */
    const struct ifl_kernels *ref = ifl_kernels_ref();
    for (int len = 1; len <= 300; len += 23) {
        float q[300], y1[300], y2[300];
        uint16_t kv[300];
        double mag = 0;
        for (int i = 0; i < len; i++) {
            q[i] = ifl_rng_normal(&r);
            kv[i] = ifl_f32_to_f16(ifl_rng_normal(&r));
            y1[i] = y2[i] = ifl_rng_normal(&r);
            mag += fabs(q[i] * ifl_f16_to_f32(kv[i]));
        }
        CHECK_NEAR(k->dot_f16(len, kv, q), ref->dot_f16(len, kv, q), tol_of(mag));
        k->axpy_f16(len, 0.37f, kv, y1);
        ref->axpy_f16(len, 0.37f, kv, y2);
        for (int i = 0; i < len; i++)
            CHECK_NEAR(y1[i], y2[i], 1e-6 * (fabs(y2[i]) + 1));
    }
    /* a block of positions for a group of heads; head sizes 64 and 128, a
     * lone partial vector (5), and 125 = 64 + 32 + 16 + 8 + 5, which takes
     * every leftover tile of the SIMD tables and a partial vector */
    static const int f16_d[] = {5, 64, 125, 128};
    for (size_t di = 0; di < sizeof(f16_d) / sizeof(f16_d[0]); di++)
        check_attn(k, 0, f16_d[di], &r);
    /* Q8_0 heads are whole blocks; 96 and 160 are odd numbers of them */
    for (int d = 32; d <= 160; d += 32)
        check_attn(k, 1, d, &r);
}

/* swiglu against ref: ordinary gates, both tails of the sigmoid (where
 * e^-g overflows or vanishes), zero, and a length with a scalar tail. */
static void check_table_swiglu(const struct ifl_kernels *k)
{
    const struct ifl_kernels *ref = ifl_kernels_ref();
    enum { N = 203 };
    float g[N], u[N], a[N], b[N];
    struct ifl_rng r;
    ifl_rng_seed(&r, 99);
    for (int i = 0; i < N; i++) {
        g[i] = 6.0f * ifl_rng_normal(&r);
        u[i] = ifl_rng_normal(&r);
    }
    g[0] = 0.0f;
    g[1] = -200.0f;
    g[2] = 200.0f;
    g[3] = -88.5f;
    g[4] = 87.5f;
    g[5] = -1e-30f;
    memcpy(a, g, sizeof(g));
    memcpy(b, g, sizeof(g));
    k->swiglu(N, a, u);
    ref->swiglu(N, b, u);
    for (int i = 0; i < N; i++)
        CHECK_MSG(fabs((double)a[i] - b[i]) <= 1e-6 * fabs((double)b[i]) + 1e-30,
                  "%s swiglu g=%.9g u=%.9g: %.9g vs ref %.9g", k->name, g[i], u[i], a[i], b[i]);
}

/* geglu against ref, and ref against gelu's tanh form in double: ordinary
 * gates, both tails (where e^-2c overflows or vanishes), zero, and a
 * length with a scalar tail. */
static void check_table_geglu(const struct ifl_kernels *k)
{
    const struct ifl_kernels *ref = ifl_kernels_ref();
    enum { N = 203 };
    float g[N], u[N], a[N], b[N];
    struct ifl_rng r;
    ifl_rng_seed(&r, 98);
    for (int i = 0; i < N; i++) {
        g[i] = 4.0f * ifl_rng_normal(&r);
        u[i] = ifl_rng_normal(&r);
    }
    g[0] = 0.0f;
    g[1] = -200.0f;
    g[2] = 200.0f;
    g[3] = -12.0f;
    g[4] = 30.0f;
    g[5] = -1e-30f;
    memcpy(a, g, sizeof(g));
    memcpy(b, g, sizeof(g));
    k->geglu(N, a, u);
    ref->geglu(N, b, u);
    for (int i = 0; i < N; i++) {
        /* 0.5 x (1 + tanh c) as x / (1 + e^-2c): the tanh form cancels in
         * the far negative tail, even in double. There ref's float c is off
         * by a few 1e-7 of |c| (about 18 at x = -7), which e^-2c turns into
         * some 1e-5 relative, of results below 1e-9 of |x u|. */
        double x = g[i], c = sqrt(2 / M_PI) * (x + 0.044715 * x * x * x);
        double t = x / (1 + exp(-2 * c)) * u[i];
        CHECK_MSG(fabs((double)a[i] - b[i]) <= 1e-6 * fabs((double)b[i]) + 1e-30,
                  "%s geglu g=%.9g u=%.9g: %.9g vs ref %.9g", k->name, g[i], u[i], a[i], b[i]);
        CHECK_MSG(fabs(b[i] - t) <= 1e-6 * fabs(t) + 1e-9 * fabs(x * u[i]),
                  "ref geglu g=%.9g: %.9g vs %.9g", g[i], b[i], t);
    }
}

/* softmax_exp against ref: scores from 0 down to far below the max
 * (where e^x vanishes), lengths with and without a scalar tail. */
static void check_table_softmax(const struct ifl_kernels *k)
{
    const struct ifl_kernels *ref = ifl_kernels_ref();
    enum { N = 203 };
    float a[N], b[N];
    struct ifl_rng r;
    ifl_rng_seed(&r, 98);
    for (int n = 1; n <= N; n += 101) {
        float mx = -INFINITY;
        for (int i = 0; i < n; i++) {
            a[i] = 4.0f * ifl_rng_normal(&r);
            mx = a[i] > mx ? a[i] : mx;
        }
        a[0] = mx - 120.0f;
        memcpy(b, a, sizeof(float) * (size_t)n);
        double sa = k->softmax_exp(n, a, mx), sb = ref->softmax_exp(n, b, mx);
        CHECK_MSG(fabs(sa - sb) <= 1e-6 * sb, "%s softmax_exp n=%d: sum %.12g vs ref %.12g",
                  k->name, n, sa, sb);
        for (int i = 0; i < n; i++)
            CHECK_MSG(fabs((double)a[i] - b[i]) <= 1e-6 * b[i] + 1e-30,
                      "%s softmax_exp n=%d i=%d: %.9g vs ref %.9g", k->name, n, i, a[i], b[i]);
    }
}

/* The sampler's row passes: every table equals ref bit for bit (sums,
 * outputs and counts), on rows of logits with -inf and NaN among them,
 * lengths around the blocks of 16 and the SIMD strides, temperatures 1
 * and not, with and without min_e, with and without the outputs. */
static void check_table_rows(const struct ifl_kernels *k)
{
    const struct ifl_kernels *ref = ifl_kernels_ref();
    static const int lens[] = {1,  7,   15,  16,  17,  31,  32,  33,  48,   63,   64,
                               65, 100, 127, 128, 129, 255, 256, 257, 1000, 32000};
    enum { NMAX = 32000 };
    float *x = xmalloc(sizeof(float) * NMAX);
    float *e[2], *v[2];
    for (int j = 0; j < 2; j++) {
        e[j] = xmalloc(sizeof(float) * NMAX);
        v[j] = xmalloc(sizeof(float) * NMAX);
    }
    struct ifl_rng r;
    ifl_rng_seed(&r, 1234);
    for (size_t li = 0; li < sizeof(lens) / sizeof(lens[0]); li++) {
        const int n = lens[li];
        for (int i = 0; i < n; i++) {
            uint32_t u = (uint32_t)(ifl_rng_next(&r) >> 40) % 64;
            x[i] = u == 0 ? -INFINITY : u == 1 ? NAN : 6.0f * ifl_rng_normal(&r);
        }
        float m = ref->max_f32(n, x);
        CHECK_MSG(k->max_f32(n, x) == m || (isinf(m) && k->max_f32(n, x) == m),
                  "%s max_f32 n=%d: %g vs ref %g", k->name, n, (double)k->max_f32(n, x), (double)m);
        if (!(m > -INFINITY))
            continue;
        /* the boundary of the cutoff at temperature 1, and a tie for the best */
        x[(n - 1) / 2] = m - 20.0f;
        x[n - 1] = m;
        CHECK_EQ(k->find_f32(n, x, m), ref->find_f32(n, x, m));
        CHECK_EQ(k->find_f32(n, x, m + 1.0f), n);
        CHECK_EQ(ref->find_f32(n, x, m + 1.0f), n);
        static const float temps[] = {1.0f, 0.7f, 1.3f};
        for (int ti = 0; ti < 3; ti++)
            for (int mi = 0; mi < 2; mi++)
                for (int outs = 0; outs < 2; outs++) {
                    double sum[2], sev[2] = {0, 0};
                    int32_t cnt[2] = {-1, -1};
                    for (int j = 0; j < 2; j++) {
                        struct ifl_exp_pass a = {
                            .m = m, .t = temps[ti], .cutoff = 20.0f, .min_e = mi ? 0.01f : 0.0f};
                        if (outs) {
                            a.e = e[j];
                            a.v = v[j];
                            a.sum_ev = &sev[j];
                            a.count = &cnt[j];
                        }
                        sum[j] = (j ? ref : k)->exp_pass(n, x, &a);
                    }
                    CHECK_MSG(memcmp(&sum[0], &sum[1], sizeof(double)) == 0 &&
                                  memcmp(&sev[0], &sev[1], sizeof(double)) == 0,
                              "%s exp_pass n=%d t=%g min_e %d: sums %.17g %.17g vs ref %.17g %.17g",
                              k->name, n, (double)temps[ti], mi, sum[0], sev[0], sum[1], sev[1]);
                    if (outs) {
                        CHECK_EQ(cnt[0], cnt[1]);
                        CHECK_MSG(memcmp(e[0], e[1], sizeof(float) * (size_t)n) == 0 &&
                                      memcmp(v[0], v[1], sizeof(float) * (size_t)n) == 0,
                                  "%s exp_pass n=%d t=%g min_e %d: e or v differ from ref", k->name,
                                  n, (double)temps[ti], mi);
                    }
                }
    }
    for (int j = 0; j < 2; j++) {
        free(e[j]);
        free(v[j]);
    }
    free(x);
}

/* ifl_kernels_exp is within its stated 1e-7 of e^x over [-87, 0], and
 * clamps below. */
static void test_exp(void)
{
    double worst = 0;
    for (int i = 0; i <= 870000; i++) {
        float x = -(float)i * 1e-4f;
        double want = exp((double)x), got = ifl_kernels_exp(x);
        double rel = fabs(got - want) / want;
        worst = rel > worst ? rel : worst;
    }
    CHECK_MSG(worst < 1e-7, "ifl_kernels_exp: relative error %.3g", worst);
    CHECK(ifl_kernels_exp(-200.0f) == ifl_kernels_exp(-87.0f));
    CHECK(ifl_kernels_exp(0.0f) == 1.0f);
}

/* lora_a and lora_b (and their F16 forms) against ref, bit for bit:
 * widths with and without a tail of the 16 lanes, ranks and column counts
 * with ragged ends (up to 301: whole tiles of 128 columns and tails),
 * rows picked out of order (groups of 4, 2 and 1); each row alone gives its
 * bits in the batch; F16 equals F32 on the widened values. */
static void check_table_lora(const struct ifl_kernels *k)
{
    const struct ifl_kernels *ref = ifl_kernels_ref();
    if (k != ref)
        CHECK(k->lora_a != ref->lora_a && k->lora_b != ref->lora_b &&
              k->lora_a_f16 != ref->lora_a_f16 && k->lora_b_f16 != ref->lora_b_f16);
    struct ifl_rng r;
    ifl_rng_seed(&r, 39);
    static const int64_t ns[] = {1, 7, 15, 16, 17, 40, 768, 771};
    static const int nks[] = {1, 3, 16, 17};
    enum {
        NR = 7,
        LDX = 800,
        LDT = 24,
        NC = 301,
        LDY = 310,
        LDB = 320,
        NA = 17 * 771,
        NB = 17 * LDB
    };
    static const int32_t rows[NR] = {5, 0, 3, 6, 1, 2, 4};
    float *x = xmalloc(sizeof(float) * NR * LDX), *a = xmalloc(sizeof(float) * NA);
    float ta[NR * LDT], tb[NR * LDT], tc[NR * LDT], one[LDT];
    float *bt = xmalloc(sizeof(float) * NB), scale[NR];
    uint16_t *a16 = xmalloc(sizeof(uint16_t) * NA), *b16 = xmalloc(sizeof(uint16_t) * NB);
    float *aw = xmalloc(sizeof(float) * NA), *bw = xmalloc(sizeof(float) * NB);
    float *ya = xmalloc(sizeof(float) * NR * LDY), *yb = xmalloc(sizeof(float) * NR * LDY);
    float *y0 = xmalloc(sizeof(float) * NR * LDY);
    fill_normal(&r, x, NR * LDX, 1.0f);
    fill_normal(&r, a, NA, 0.1f);
    fill_normal(&r, bt, NB, 0.5f);
    fill_normal(&r, y0, NR * LDY, 1.0f);
    for (int i = 0; i < NA; i++)
        aw[i] = ifl_f16_to_f32(a16[i] = ifl_f32_to_f16(a[i]));
    for (int i = 0; i < NB; i++)
        bw[i] = ifl_f16_to_f32(b16[i] = ifl_f32_to_f16(bt[i]));
    for (int i = 0; i < NR; i++)
        scale[i] = 0.25f + 0.5f * (float)i;
    x[3] = 0.0f; /* zeros and signed zeros reach the lanes too */
    x[LDX + 2] = -0.0f;
    for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
        for (size_t ki = 0; ki < sizeof nks / sizeof nks[0]; ki++) {
            int64_t n = ns[ni];
            int nk = nks[ki];
            memset(ta, 0, sizeof ta);
            memset(tb, 0, sizeof tb);
            memset(tc, 0, sizeof tc);
            k->lora_a(n, nk, a, NR, rows, x, LDX, ta, LDT);
            ref->lora_a(n, nk, a, NR, rows, x, LDX, tb, LDT);
            CHECK_MSG(bits_equal(ta, tb, sizeof ta), "%s lora_a n=%lld nk=%d differs from ref",
                      k->name, (long long)n, nk);
            k->lora_a_f16(n, nk, a16, NR, rows, x, LDX, tc, LDT);
            ref->lora_a(n, nk, aw, NR, rows, x, LDX, tb, LDT);
            CHECK_MSG(bits_equal(tc, tb, sizeof tc),
                      "%s lora_a_f16 n=%lld nk=%d differs from lora_a on the widened values",
                      k->name, (long long)n, nk);
            for (int i = 0; i < NR; i++) {
                k->lora_a(n, nk, a, 1, rows + i, x, LDX, one, LDT);
                CHECK_MSG(bits_equal(one, ta + i * LDT, sizeof(float) * (size_t)nk),
                          "%s lora_a n=%lld nk=%d: row %d alone differs", k->name, (long long)n, nk,
                          i);
            }
            for (int nc = 1; nc <= NC; nc += nc < 45 ? 11 : 50) {
                memcpy(ya, y0, sizeof(float) * NR * LDY);
                memcpy(yb, y0, sizeof(float) * NR * LDY);
                k->lora_b(nk, nc, bt, LDB, NR, rows, scale, ta, LDT, ya, LDY);
                ref->lora_b(nk, nc, bt, LDB, NR, rows, scale, ta, LDT, yb, LDY);
                CHECK_MSG(bits_equal(ya, yb, sizeof(float) * NR * LDY),
                          "%s lora_b nk=%d nc=%d differs from ref (or wrote outside)", k->name, nk,
                          nc);
                memcpy(ya, y0, sizeof(float) * NR * LDY);
                memcpy(yb, y0, sizeof(float) * NR * LDY);
                k->lora_b_f16(nk, nc, b16, LDB, NR, rows, scale, ta, LDT, ya, LDY);
                ref->lora_b(nk, nc, bw, LDB, NR, rows, scale, ta, LDT, yb, LDY);
                CHECK_MSG(bits_equal(ya, yb, sizeof(float) * NR * LDY),
                          "%s lora_b_f16 nk=%d nc=%d differs from lora_b on the widened values",
                          k->name, nk, nc);
            }
        }
    free(x);
    free(a);
    free(bt);
    free(a16);
    free(b16);
    free(aw);
    free(bw);
    free(ya);
    free(yb);
    free(y0);
}

/* lora_b_q8 against ref, bit for bit, and ref against a double sum over
 * the layout kernels.h states, packed here on its own: ranks of 1, 2 and
 * 4 blocks, 1 to 5 groups, 1 to 7 rows in a scrambled order, a block of B
 * and a block of t that are all zeros, and the extremes -127 and 127. */
static void check_table_lora_q8(const struct ifl_kernels *k)
{
    const struct ifl_kernels *ref = ifl_kernels_ref();
    if (k != ref)
        CHECK(k->lora_b_q8 != ref->lora_b_q8);
    struct ifl_rng r;
    ifl_rng_seed(&r, 40);
    enum { NR = 7, MAXKB = 4, MAXG = 5, NOUT = MAXG * 16, LDY = 90, LDQ = MAXKB * 16 + 3 };
    static const int32_t rows[NR] = {5, 0, 3, 6, 1, 2, 4};
    int8_t bv[NOUT][MAXKB * 16], tq[NR * LDQ];
    float bd[NOUT][MAXKB], td[NR * MAXKB], scale[NR];
    uint8_t *pk = xmalloc((size_t)MAXG * MAXKB * 288);
    float *y0 = xmalloc(sizeof(float) * NR * LDY), *ya = xmalloc(sizeof(float) * NR * LDY),
          *yb = xmalloc(sizeof(float) * NR * LDY);
    fill_normal(&r, y0, NR * LDY, 1.0f);
    for (int i = 0; i < NR; i++)
        scale[i] = 0.25f + 0.5f * (float)i;
    static const int nkbs[] = {1, 2, 4};
    for (size_t ki = 0; ki < sizeof nkbs / sizeof nkbs[0]; ki++) {
        const int nkb = nkbs[ki];
        for (int c = 0; c < NOUT; c++)
            for (int kb = 0; kb < nkb; kb++) {
                bd[c][kb] =
                    ifl_f16_to_f32(ifl_f32_to_f16(0.001f + 0.01f * (float)(ifl_rng_next(&r) % 97)));
                for (int e = 0; e < 16; e++)
                    bv[c][kb * 16 + e] = (int8_t)((int)(ifl_rng_next(&r) % 255) - 127);
            }
        for (int e = 0; e < 16; e++) {
            bv[3][e] = 0; /* a zero block of B */
            bv[4][e] = e & 1 ? 127 : -127;
        }
        for (int i = 0; i < NR; i++)
            for (int kb = 0; kb < nkb; kb++) {
                td[i * nkb + kb] = 0.002f * (float)(1 + ifl_rng_next(&r) % 500);
                for (int e = 0; e < 16; e++)
                    tq[i * LDQ + kb * 16 + e] = (int8_t)((int)(ifl_rng_next(&r) % 255) - 127);
            }
        for (int e = 0; e < 16; e++)
            tq[2 * LDQ + e] = 0; /* a zero block of t */
        for (int e = 0; e < 16; e++)
            tq[4 * LDQ + e] = e & 2 ? 127 : -127;
        /* the layout: per group, per block, 16 F16 scales then run m's
         * bytes 4c .. 4c + 3 = ranks 4m .. 4m + 3 of column c */
        for (int c = 0; c < NOUT; c++)
            for (int kb = 0; kb < nkb; kb++) {
                uint8_t *blk = pk + ((size_t)(c / 16) * (size_t)nkb + (size_t)kb) * 288;
                uint16_t h = ifl_f32_to_f16(bd[c][kb]);
                memcpy(blk + 2 * (c % 16), &h, 2);
                for (int e = 0; e < 16; e++)
                    blk[32 + (e / 4) * 64 + (c % 16) * 4 + e % 4] = (uint8_t)bv[c][kb * 16 + e];
            }
        for (int ng = 1; ng <= MAXG; ng += 2)
            for (int nr = 1; nr <= NR; nr += 3) {
                memcpy(ya, y0, sizeof(float) * NR * LDY);
                memcpy(yb, y0, sizeof(float) * NR * LDY);
                const int g0 = MAXG - ng; /* the last groups: bq and y offset */
                k->lora_b_q8(nkb, ng, pk + (size_t)g0 * (size_t)nkb * 288, nr, rows, scale, tq, LDQ,
                             td, ya + g0 * 16, LDY);
                ref->lora_b_q8(nkb, ng, pk + (size_t)g0 * (size_t)nkb * 288, nr, rows, scale, tq,
                               LDQ, td, yb + g0 * 16, LDY);
                CHECK_MSG(bits_equal(ya, yb, sizeof(float) * NR * LDY),
                          "%s lora_b_q8 nkb=%d ng=%d nr=%d differs from ref (or wrote outside)",
                          k->name, nkb, ng, nr);
                if (k != ref)
                    continue;
                double worst = 0;
                for (int i = 0; i < NR; i++)
                    for (int c = 0; c < LDY; c++) {
                        double want = y0[rows[i] * LDY + c], mag = fabs(want);
                        if (i < nr && c >= g0 * 16 && c < (g0 + ng) * 16)
                            for (int kb = 0; kb < nkb; kb++) {
                                double blk = 0;
                                for (int e = 0; e < 16; e++)
                                    blk += (double)bv[c][kb * 16 + e] * tq[i * LDQ + kb * 16 + e];
                                blk *= (double)scale[i] * td[i * nkb + kb] * bd[c][kb];
                                want += blk;
                                mag += fabs(blk);
                            }
                        /* float rounding: a few ulps of the largest partial sum */
                        double d = fabs(yb[rows[i] * LDY + c] - want) / (1e-30 + mag);
                        worst = d > worst ? d : worst;
                    }
                CHECK_MSG(worst < 1e-6, "ref lora_b_q8 nkb=%d ng=%d nr=%d off the double sum by %g",
                          nkb, ng, nr, worst);
            }
    }
    free(pk);
    free(y0);
    free(ya);
    free(yb);
}

static void test_tables(void)
{
    CHECK(ifl_kernels_ref() != NULL);
    CHECK(ifl_kernels_best() != NULL);
    CHECK(ifl_kernels_by_name("scalar") == ifl_kernels_ref());
    CHECK(ifl_kernels_by_name("nonsense") == NULL);
    CHECK(ifl_kernels_by_name(NULL) == NULL);
    const struct ifl_kernels *ref = ifl_kernels_ref();
    for (int ti = 0; ti < N_WT; ti++) {
        enum ifl_type t = weight_types[ti];
        CHECK(ref->gemm[t] && ref->quant[t] && ref->dequant[t]);
        CHECK(ref->quant[ifl_type_info(t)->act] && ref->dequant[ifl_type_info(t)->act]);
    }
    fprintf(stderr, "  best table: %s\n", ifl_kernels_best()->name);
}

static void test_each_table(void)
{
    for (int i = 0; i < N_TAB; i++) {
        const struct ifl_kernels *k = ifl_kernels_by_name(table_names[i]);
        if (!k) {
            fprintf(stderr, "  table %s: not supported here, skipped\n", table_names[i]);
            continue;
        }
        CHECK_STR(k->name, table_names[i]);
        if (i > 0) {
            /* the x86 tables have their own attention kernels: without
             * them a quantised KV cache would run at scalar speed */
            const struct ifl_kernels *ref = ifl_kernels_ref();
            CHECK(k->attn_qk_f16 != ref->attn_qk_f16 && k->attn_pv_f16 != ref->attn_pv_f16);
            CHECK(k->attn_qk_q8_0 != ref->attn_qk_q8_0 && k->attn_pv_q8_0 != ref->attn_pv_q8_0);
            CHECK(k->attn_tile_f16 != ref->attn_tile_f16 &&
                  k->attn_tile_q8_0 != ref->attn_tile_q8_0);
        }
        int before = t_cur_failed_;
        check_table_quant(k);
        check_table_gemm(k);
        check_table_invariance(k);
        check_table_f16(k);
        check_table_swiglu(k);
        check_table_geglu(k);
        check_table_softmax(k);
        check_table_rows(k);
        check_table_lora(k);
        check_table_lora_q8(k);
        check_table_attn_tile(k);
        fprintf(stderr, "  table %s: %s\n", k->name, t_cur_failed_ && !before ? "FAILED" : "ok");
    }
}

/* ---- x16 groups: weights repacked 16 rows at a time ----------------- */

/* A table's activations converted once (kernels.h act_pre): the rows
 * converted by act_pre, with a gap and a filled tail after each (a
 * kernel must read neither), give gemm_x16's bits through gemm_x16_pre,
 * all rows and each alone; the conversion matches ref's quant of type t
 * on these values (normal floats, so the two roundings agree). */
static void check_x16_pre(const struct ifl_kernels *kt, const struct problem *p, const char *pk,
                          const float *y)
{
    const enum ifl_type t = p->t;
    const size_t es = ifl_type_info(t)->size, rs = ifl_type_row_size(t, p->n);
    const size_t xs = rs + 70;
    char *xc = xmalloc(xs * (size_t)p->nr), *xr = xmalloc(rs);
    float *yp = xmalloc(sizeof(float) * (size_t)(p->nr * p->nc));
    memset(xc, 0xff, xs * (size_t)p->nr); /* NaNs past each row */
    int bad = 0;
    for (int i = 0; i < p->nr; i++) {
        kt->act_pre[t](p->xf + (size_t)i * p->n, xc + (size_t)i * xs, p->n);
        ifl_kernels_ref()->quant[t](p->xf + (size_t)i * p->n, xr, p->n);
        if (!bits_equal(xr, xc + (size_t)i * xs, (size_t)p->n * es) && bad++ < 3)
            T_FAIL_("%s act_pre %s n=%lld row %d: differs from ref's quant", kt->name,
                    ifl_type_info(t)->name, (long long)p->n, i);
    }
    kt->gemm_x16_pre[t](p->n, p->nr, p->nc, xc, xs, pk, rs, yp, (size_t)p->nc);
    CHECK_MSG(bits_equal(yp, y, sizeof(float) * (size_t)(p->nr * p->nc)),
              "%s x16 pre %s n=%lld nr=%d nc=%d: differs from gemm_x16", kt->name,
              ifl_type_info(t)->name, (long long)p->n, p->nr, p->nc);
    for (int i = 0; i < p->nr; i++) {
        kt->gemm_x16_pre[t](p->n, 1, p->nc, xc + (size_t)i * xs, xs, pk, rs, yp, (size_t)p->nc);
        CHECK_MSG(bits_equal(yp, y + (size_t)i * p->nc, sizeof(float) * (size_t)p->nc),
                  "%s x16 pre %s n=%lld: row %d alone differs", kt->name, ifl_type_info(t)->name,
                  (long long)p->n, i);
    }
    free(yp);
    free(xr);
    free(xc);
}

/* One x16 gemm problem for every table: within tolerance of the
 * reference (its own bits for the scalar table) and batch invariant. */
static void check_x16(struct ifl_rng *r, enum ifl_type t, int64_t n, int nr, int nc, int raw)
{
    struct problem p;
    problem_init(&p, r, t, n, nr, nc, raw);
    size_t rs = ifl_type_row_size(t, p.n);
    char *pk = xmalloc(rs * (size_t)nc);
    for (int g = 0; g < nc / 16; g++)
        ifl_repack_x16(t, p.n, (char *)p.w + (size_t)g * 16 * p.ws, p.ws, pk + (size_t)g * 16 * rs);
    float *y = xmalloc(sizeof(float) * (size_t)(nr * nc));
    float *one = xmalloc(sizeof(float) * 16);
    for (int k = 0; k < N_TAB; k++) {
        const struct ifl_kernels *kt = ifl_kernels_by_name(table_names[k]);
        if (!kt || !kt->gemm_x16[t])
            continue;
        kt->gemm_x16[t](p.n, nr, nc, p.x, p.xs, pk, rs, y, (size_t)nc);
        int bad = 0;
        for (int i = 0; i < nr * nc && bad < 3; i++) {
            if (k == 0 && !bits_equal(&y[i], &p.y_ref[i], 4)) {
                bad++;
                T_FAIL_("%s x16 gemm %s n=%lld nr=%d nc=%d out %d: %.9g vs ref %.9g", kt->name,
                        ifl_type_info(t)->name, (long long)p.n, nr, nc, i, y[i], p.y_ref[i]);
            } else if (k > 0) {
                bad += gemm_out_bad(kt, &p, y, i, 1);
            }
        }
        /* each row alone, each group alone */
        for (int i = 0; i < nr; i++)
            for (int g = 0; g < nc / 16; g++) {
                kt->gemm_x16[t](p.n, 1, 16, (char *)p.x + (size_t)i * p.xs, p.xs,
                                pk + (size_t)g * 16 * rs, rs, one, 16);
                CHECK_MSG(bits_equal(one, y + (size_t)i * nc + 16 * g, 16 * 4),
                          "%s x16 %s n=%lld: row %d group %d alone differs", kt->name,
                          ifl_type_info(t)->name, (long long)p.n, i, g);
            }
        if (kt->act_pre[t])
            check_x16_pre(kt, &p, pk, y);
    }
    free(one);
    free(y);
    free(pk);
    problem_free(&p);
}

/* The reference x16 gemm equals the plain reference gemm bit for bit; each
 * table's x16 gemm is within tolerance of it and batch invariant (a row
 * alone, a group alone and every row tiling give the same bits). For
 * Q8_0 / Q4_0, n up to 300 blocks crosses the 512-bit kernel's 256-block
 * segments; K-quant rows run from one super-block to ffn_down's 22. */
static void test_x16(void)
{
    static const enum ifl_type types[] = {
        IFL_TYPE_Q8_0, IFL_TYPE_Q4_0, IFL_TYPE_Q4_K, IFL_TYPE_Q5_K,   IFL_TYPE_Q6_K,
        IFL_TYPE_F16,  IFL_TYPE_Q5_0, IFL_TYPE_Q5_1, IFL_TYPE_IQ4_NL, IFL_TYPE_IQ4_XS,
        IFL_TYPE_Q3_K, IFL_TYPE_Q2_K, IFL_TYPE_BF16, IFL_TYPE_MXFP4};
    const int n_types = (int)(sizeof(types) / sizeof(types[0]));
    /* n by block size: 32, 256, and 1 (F16: any n) */
    static const int64_t ns[] = {32, 96, 2048, 32 * 300}, ks[] = {256, 768, 2048, 5632},
                         fs[] = {5, 37, 777, 5632};
    /* one and two rows (split chains), row tiles ending on an odd row, one
     * or two whole tiles (a decode's single pass over the groups), three */
    static const int nrs[] = {1, 2, 3, 8, 9, 13, 16, 17};
    const int n_nr = (int)(sizeof(nrs) / sizeof(nrs[0]));
    struct ifl_rng r;
    ifl_rng_seed(&r, 4242);
    for (int ti = 0; ti < n_types; ti++)
        for (int ni = 0; ni < 4; ni++)
            for (int ri = 0; ri < n_nr; ri++) {
                enum ifl_type t = types[ti];
                int nr = nrs[ri], nc = ri % 2 ? 48 : 16;
                int blck = ifl_type_info(t)->blck;
                check_x16(&r, t, blck == 32 ? ns[ni] : blck == 1 ? fs[ni] : ks[ni], nr, nc, ri % 2);
            }
    /* K-quant decodes of 16 and 9 rows over 150 groups: more than one
     * block of the 16-row path (PAIR_BYTES in x86_avx2_gemm.c: 71, 58 and
     * 48 groups of Q4_K, Q5_K, Q6_K), so both pairs of row tiles pass over
     * three or four blocks */
    for (int ti = 2; ti < 5; ti++)
        for (int k = 0; k < 2; k++)
            check_x16(&r, types[ti], k ? 512 : 256, k ? 9 : 16, 16 * 150, k);
    /* BF16 prompts (x86_avx512_bf16.c rounds the activations a block of
     * up to 128 rows and a chunk at a time: 2048 elements for up to 16
     * rows, 256 above): 130 rows are two blocks, the second of two rows;
     * 777 elements are three chunks of 256 and an odd 9 in the first;
     * seven groups are tiles of 3, 2 and 2, five of 3 and 2, each tile's
     * later row blocks fetching the next tile's weights; 50 groups are
     * two column blocks at 128 rows (32 and 18), one at 2 */
    check_x16(&r, IFL_TYPE_BF16, 777, 130, 16 * 7, 1);
    check_x16(&r, IFL_TYPE_BF16, 5632, 24, 16 * 5, 0);
    check_x16(&r, IFL_TYPE_BF16, 37, 130, 16 * 50, 0);
    if (worst_bf16_act > 0)
        fprintf(stderr, "  bf16 activations: largest |y - ref| / sum |w x| %.3g (bound 2^-8)\n",
                worst_bf16_act);
}

/* gemm_f32_kn (the vision encoder's attention products) of every table
 * gives ref's bits: shapes of one row or column, column counts around the
 * 16- and 48-wide vectors and tiles (masked ends), row tiles ending short,
 * attention's own (64 queries against 577 keys and back), strides wider
 * than the rows; and its ref equals a fmaf chain written out here. */
static void test_f32_kn(void)
{
    static const int shapes[][3] = {/* n, nr, nc */
                                    {1, 1, 1},     {7, 3, 15},    {16, 9, 16},  {5, 8, 17},
                                    {33, 13, 47},  {64, 8, 48},   {64, 17, 49}, {64, 64, 577},
                                    {577, 64, 64}, {100, 5, 100}, {577, 9, 64}, {40, 13, 50},
                                    {577, 7, 60}};
    struct ifl_rng r;
    ifl_rng_seed(&r, 99);
    const struct ifl_kernels *ref = ifl_kernels_ref();
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const int64_t n = shapes[si][0];
        const int nr = shapes[si][1], nc = shapes[si][2];
        const size_t ldx = (size_t)n + 3, ldb = (size_t)nc + 5, ldy = (size_t)nc + 2;
        float *x = xmalloc(sizeof(float) * ldx * (size_t)nr);
        float *b = xmalloc(sizeof(float) * ldb * (size_t)n);
        float *y0 = xmalloc(sizeof(float) * ldy * (size_t)nr);
        float *y = xmalloc(sizeof(float) * ldy * (size_t)nr);
        fill_normal(&r, x, (int64_t)(ldx * (size_t)nr), 1.0f);
        fill_normal(&r, b, (int64_t)(ldb * (size_t)n), 1.0f);
        for (size_t i = 0; i < ldy * (size_t)nr; i++)
            y0[i] = -7.0f; /* the gaps between rows must stay untouched */
        memcpy(y, y0, sizeof(float) * ldy * (size_t)nr);
        ref->gemm_f32_kn(n, nr, nc, x, ldx, b, ldb, y0, ldy);
        for (int i = 0; i < nr; i++)
            for (int c = 0; c < nc; c++) {
                float acc = 0.0f;
                for (int64_t k = 0; k < n; k++)
                    acc = fmaf(x[(size_t)i * ldx + (size_t)k], b[(size_t)k * ldb + (size_t)c], acc);
                CHECK_MSG(bits_equal(&acc, &y0[(size_t)i * ldy + (size_t)c], 4),
                          "ref gemm_f32_kn n=%lld [%d][%d]: %.9g vs %.9g", (long long)n, i, c,
                          y0[(size_t)i * ldy + (size_t)c], acc);
            }
        for (int k = 1; k < N_TAB; k++) {
            const struct ifl_kernels *kt = ifl_kernels_by_name(table_names[k]);
            if (!kt)
                continue;
            for (size_t i = 0; i < ldy * (size_t)nr; i++)
                y[i] = -7.0f;
            /* the x86 tables have their own (the scalar one is slow) */
            CHECK(kt->gemm_f32_kn != ref->gemm_f32_kn);
            kt->gemm_f32_kn(n, nr, nc, x, ldx, b, ldb, y, ldy);
            CHECK_MSG(bits_equal(y, y0, sizeof(float) * ldy * (size_t)nr),
                      "%s gemm_f32_kn n=%lld nr=%d nc=%d differs from ref", kt->name, (long long)n,
                      nr, nc);
        }
        free(x);
        free(b);
        free(y0);
        free(y);
    }
}

/* The gates and the softmax numerators of the x86 tables: the AVX-512
 * ones (sixteen lanes, a masked block of 8, the scalar tail) give the
 * AVX2 table's bits, elements and sums, at every length from 1 to 80 and
 * at 577 (an attention row of the vision encoder). */
static void test_rows_x86_bits(void)
{
    const struct ifl_kernels *a2 = ifl_kernels_by_name("avx2");
    if (!a2)
        return;
    enum { N = 577 };
    float g[N], u[N], a[N], b[N];
    struct ifl_rng r;
    ifl_rng_seed(&r, 77);
    for (int i = 0; i < N; i++) {
        g[i] = 5.0f * ifl_rng_normal(&r);
        u[i] = ifl_rng_normal(&r);
    }
    g[3] = -200.0f;
    g[17] = 200.0f;
    for (int k = 2; k < N_TAB; k++) {
        const struct ifl_kernels *kt = ifl_kernels_by_name(table_names[k]);
        if (!kt)
            continue;
        for (int n = 1; n <= N; n = n < 80 ? n + 1 : n < N ? N : N + 1) {
            for (int f = 0; f < 3; f++) {
                memcpy(a, g, sizeof(float) * (size_t)n);
                memcpy(b, g, sizeof(float) * (size_t)n);
                double sa = 0, sb = 0;
                if (f == 0) {
                    kt->swiglu(n, a, u);
                    a2->swiglu(n, b, u);
                } else if (f == 1) {
                    kt->geglu(n, a, u);
                    a2->geglu(n, b, u);
                } else {
                    float mx = a2->max_f32(n, g);
                    sa = kt->softmax_exp(n, a, mx);
                    sb = a2->softmax_exp(n, b, mx);
                }
                CHECK_MSG(bits_equal(a, b, sizeof(float) * (size_t)n) && bits_equal(&sa, &sb, 8),
                          "%s %s n=%d differs from avx2", kt->name,
                          f == 0   ? "swiglu"
                          : f == 1 ? "geglu"
                                   : "softmax_exp",
                          n);
            }
        }
    }
}

/* MXFP4's E8M0 scales at their ends in every table's x16 gemm: 16 rows
 * of code 1 (level 1) with the row's e from 0 (2^-128, subnormal) to 250,
 * against an activation of 32 ones at d = 1: each output is exactly
 * 32 * 2^(e - 128), in the reference and in every table. */
static void test_x16_mxfp4_scales(void)
{
    static const uint8_t es[16] = {0,   1,   2,   3,   4,   64,  100, 126,
                                   127, 128, 129, 130, 180, 200, 249, 250};
    struct ifl_block_mxfp4 w[16];
    for (int r = 0; r < 16; r++) {
        w[r].e = es[r];
        memset(w[r].qs, 0x11, sizeof w[r].qs);
    }
    char pk[16 * sizeof(struct ifl_block_mxfp4)];
    ifl_repack_x16(IFL_TYPE_MXFP4, 32, w, sizeof w[0], pk);
    struct ifl_block_q8_0 x;
    x.d = ifl_f32_to_f16(1.0f);
    memset(x.qs, 1, sizeof x.qs);
    for (int k = 0; k < N_TAB; k++) {
        const struct ifl_kernels *kt = ifl_kernels_by_name(table_names[k]);
        if (!kt || !kt->gemm_x16[IFL_TYPE_MXFP4])
            continue;
        float y[16];
        kt->gemm_x16[IFL_TYPE_MXFP4](32, 1, 16, &x, sizeof x, pk, sizeof w[0], y, 16);
        for (int r = 0; r < 16; r++) {
            float want = 32.0f * ifl_e8m0_half(es[r]);
            CHECK_MSG(bits_equal(&y[r], &want, 4), "%s: e %d gives %g, want %g", kt->name, es[r],
                      (double)y[r], (double)want);
        }
    }
}

/* ---- real llama.cpp files: layouts against the reference quantiser --- */

/* Each quantised copy of the shared llama model dequantises close to the
 * same tensor in the F32 file (so our bit layouts are llama.cpp's), every
 * table's dequant gives the reference's bits, and every table's gemm on
 * the real weights agrees with the reference. Skipped when files are absent. */
static void test_real_files(void)
{
    static const struct {
        const char *file;
        double max_rel; /* relative rms error against f32, for this format */
    } files[] = {
        {"llama-f16.gguf", 1e-3},
        {"llama-bf16.gguf", 5e-3},
        {"llama-q8_0.gguf", 0.01},
        {"llama-q6_k.gguf", 0.03},
        {"llama-q5_k_m.gguf", 0.06},
        {"llama-q4_k_m.gguf", 0.12},
        {"llama-q4_0.gguf", 0.15},
        /* the newer types, quantised by llama.cpp into tests/data/quant */
        {"+llama-q5_0.gguf", 0.08},
        {"+llama-q5_1.gguf", 0.06},
        {"+llama-iq4_nl.gguf", 0.12},
        {"+llama-iq4_xs.gguf", 0.12},
        {"+llama-q3_k.gguf", 0.25},
        {"+llama-q2_k.gguf", 0.45},
        {"+llama-mxfp4.gguf", 0.20},
    };
    char path[1024], err[IFL_ERR_LEN];
    snprintf(path, sizeof(path), "%s/models/ref/llama-f32.gguf", t_shared());
    struct ifl_gguf *gf = NULL;
    if (ifl_gguf_open(&gf, path, err) != 0) {
        fprintf(stderr, "  skipped: %s\n", err);
        return;
    }
    const struct ifl_kernels *ref = ifl_kernels_ref();
    struct ifl_rng r;
    ifl_rng_seed(&r, 3);
    for (size_t fi = 0; fi < sizeof(files) / sizeof(files[0]); fi++) {
        if (files[fi].file[0] == '+')
            snprintf(path, sizeof(path), "%s/%s", t_quant_data(), files[fi].file + 1);
        else
            snprintf(path, sizeof(path), "%s/models/ref/%s", t_shared(), files[fi].file);
        struct ifl_gguf *g = NULL;
        if (ifl_gguf_open(&g, path, err) != 0) {
            fprintf(stderr, "  skipped %s: %s\n", files[fi].file, err);
            continue;
        }
        int checked[IFL_TYPE_COUNT] = {0};
        double worst[IFL_TYPE_COUNT] = {0};
        for (int64_t i = 0; i < ifl_gguf_n_tensors(g); i++) {
            const struct ifl_gguf_tensor *t = ifl_gguf_tensor(g, i);
            const struct ifl_gguf_tensor *tf = ifl_gguf_find_tensor(gf, t->name);
            const struct ifl_type_info *ti = ifl_type_info(t->type);
            if (!ti || !ti->is_weight || t->type == IFL_TYPE_F32 || !tf ||
                tf->type != IFL_TYPE_F32 || t->n_dims != 2 || tf->ne[0] != t->ne[0] ||
                tf->ne[1] != t->ne[1])
                continue;
            enum ifl_type ty = (enum ifl_type)t->type;
            int64_t n = t->ne[0], rows = t->ne[1];
            size_t rs = ifl_type_row_size(ty, n);
            float *y = xmalloc((size_t)n * 4), *y2 = xmalloc((size_t)n * 4);
            double se = 0, sx = 0;
            for (int64_t row = 0; row < rows; row++) {
                const char *q = (const char *)t->data + (size_t)row * rs;
                const float *f = (const float *)tf->data + row * n;
                ref->dequant[ty](q, y, n);
                for (int64_t j = 0; j < n; j++) {
                    se += ((double)y[j] - f[j]) * ((double)y[j] - f[j]);
                    sx += (double)f[j] * f[j];
                }
                for (int k = 1; k < N_TAB && row < 8; k++) {
                    const struct ifl_kernels *kt = ifl_kernels_by_name(table_names[k]);
                    if (!kt)
                        continue;
                    kt->dequant[ty](q, y2, n);
                    CHECK_MSG(bits_equal(y, y2, (size_t)n * 4), "%s: %s dequant of %s differs",
                              kt->name, files[fi].file, t->name);
                }
            }
            double rel = sx > 0 ? sqrt(se / sx) : 0;
            CHECK_MSG(rel <= files[fi].max_rel, "%s %s (%s): rel rms err %.4f vs f32 > %.4f",
                      files[fi].file, t->name, ti->name, rel, files[fi].max_rel);
            checked[ty]++;
            if (rel > worst[ty])
                worst[ty] = rel;

            /* gemm on the real rows: 3 activation rows against up to 9 weight rows */
            int nc = rows < 9 ? (int)rows : 9, nr = 3;
            size_t xs = ifl_type_row_size(ti->act, n);
            float *xf = xmalloc((size_t)(n * nr) * 4), *yr = xmalloc(sizeof(float) * 27);
            float *yk = xmalloc(sizeof(float) * 27);
            char *xa = xmalloc(xs * (size_t)nr);
            fill_normal(&r, xf, n * nr, 1.0f);
            for (int a = 0; a < nr; a++)
                ref->quant[ti->act](xf + a * n, xa + (size_t)a * xs, n);
            ref->gemm[ty](n, nr, nc, xa, xs, t->data, rs, yr, (size_t)nc);
            /* scale for the tolerance: sum |w||x| of each output */
            double mag[27];
            float *xd = xmalloc((size_t)n * 4);
            for (int a = 0; a < nr; a++) {
                ref->dequant[ti->act](xa + (size_t)a * xs, xd, n);
                for (int c = 0; c < nc; c++) {
                    ref->dequant[ty]((const char *)t->data + (size_t)c * rs, y, n);
                    double m = 0, s = 0;
                    for (int64_t j = 0; j < n; j++) {
                        m += fabs((double)y[j] * xd[j]);
                        s += (double)y[j] * xd[j];
                    }
                    mag[a * nc + c] = m;
                    CHECK_NEAR(yr[a * nc + c], s, 4 * tol_of(m));
                }
            }
            for (int k = 1; k < N_TAB; k++) {
                const struct ifl_kernels *kt = ifl_kernels_by_name(table_names[k]);
                if (!kt)
                    continue;
                kt->gemm[ty](n, nr, nc, xa, xs, t->data, rs, yk, (size_t)nc);
                for (int o = 0; o < nr * nc; o++)
                    CHECK_MSG(fabs((double)yk[o] - yr[o]) <= tol_tab(kt, ty, mag[o]),
                              "%s gemm %s %s out %d: %.9g vs ref %.9g", kt->name, files[fi].file,
                              t->name, o, yk[o], yr[o]);
            }
            free(xd);
            free(xf);
            free(yr);
            free(yk);
            free(xa);
            free(y);
            free(y2);
        }
        int any = 0;
        for (int ty = 0; ty < IFL_TYPE_COUNT; ty++) {
            if (!checked[ty])
                continue;
            any = 1;
            if (getenv("IFL_TEST_VERBOSE"))
                fprintf(stderr, "  %-18s %-5s %3d tensors, worst rel rms err %.4f\n",
                        files[fi].file, ifl_type_info((uint32_t)ty)->name, checked[ty], worst[ty]);
        }
        CHECK_MSG(any, "%s: no tensor compared", files[fi].file);
        ifl_gguf_free(g);
    }
    ifl_gguf_free(gf);
}

int main(void)
{
    T_RUN(test_tables);
    T_RUN(test_exp);
    T_RUN(test_known_q4_0_q8_0);
    T_RUN(test_known_q4_k_q5_k);
    T_RUN(test_known_q6_k_q8_k);
    T_RUN(test_known_mxfp4);
    T_RUN(test_x16_mxfp4_scales);
    T_RUN(test_roundtrip);
    T_RUN(test_ref_gemm_vs_dequant);
    T_RUN(test_each_table);
    T_RUN(test_x16);
    T_RUN(test_f32_kn);
    T_RUN(test_rows_x86_bits);
    T_RUN(test_real_files);
    return t_done();
}
