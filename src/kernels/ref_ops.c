/*
 * Scalar reference of the operations other than weight formats and gemm
 * (ref.c has those): attention over an F16 or Q8_0 KV cache, SwiGLU and
 * softmax, the sampler's row passes and LoRA's products. Portable C11, the
 * ground truth the x86 tables are tested against.
 */
#include "kernels/blocks.h"
#include "kernels/impl.h"

#include <math.h>
#include <string.h>

#include "core/fp16.h"

/* ---- attention helpers over an F16 cache ---------------------------- */

/* The same sequential sum as ref.c's F16 weight rows. */
static float dot_f16(int64_t n, const uint16_t *k, const float *q)
{
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++)
        s += ifl_f16_to_f32(k[i]) * q[i];
    return s;
}

static void attn_qk_f16(int d, int nq, const float *q, const uint16_t *k, size_t ks, int nt,
                        float scale, float *s, size_t lds)
{
    for (int i = 0; i < nq; i++)
        for (int t = 0; t < nt; t++)
            s[(size_t)i * lds + t] = scale * dot_f16(d, k + (size_t)t * ks, q + (size_t)i * d);
}

static void axpy_f16(int64_t n, float a, const uint16_t *v, float *y)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = fmaf(a, ifl_f16_to_f32(v[i]), y[i]);
}

static void attn_pv_f16(int d, int nq, const float *p, size_t ldp, const uint16_t *v, size_t vs,
                        int nt, float *o)
{
    for (int i = 0; i < nq; i++)
        for (int t = 0; t < nt; t++)
            axpy_f16(d, p[(size_t)i * ldp + t], v + (size_t)t * vs, o + (size_t)i * d);
}

/* Element e of a run of Q8_0 blocks, dequantised as dequant_q8_0 does. */
static float q8_at(const char *row, int e)
{
    const struct ifl_block_q8_0 *b = (const struct ifl_block_q8_0 *)row + e / IFL_QK;
    return ifl_f16_to_f32(b->d) * (float)b->qs[e % IFL_QK];
}

static void attn_qk_q8_0(int d, int nq, const float *q, const void *k, size_t ks, int nt,
                         float scale, float *s, size_t lds)
{
    for (int i = 0; i < nq; i++)
        for (int t = 0; t < nt; t++) {
            const char *row = (const char *)k + (size_t)t * ks;
            float acc = 0.0f;
            for (int e = 0; e < d; e++)
                acc += q8_at(row, e) * q[(size_t)i * d + e];
            s[(size_t)i * lds + t] = scale * acc;
        }
}

static void attn_pv_q8_0(int d, int nq, const float *p, size_t ldp, const void *v, size_t vs,
                         int nt, float *o)
{
    for (int i = 0; i < nq; i++)
        for (int t = 0; t < nt; t++) {
            const char *row = (const char *)v + (size_t)t * vs;
            float a = p[(size_t)i * ldp + t];
            for (int e = 0; e < d; e++)
                o[(size_t)i * d + e] = fmaf(a, q8_at(row, e), o[(size_t)i * d + e]);
        }
}

static void cvt_f32_f16(int64_t n, const float *x, uint16_t *y)
{
    for (int64_t i = 0; i < n; i++)
        y[i] = ifl_f32_to_f16(x[i]);
}

static void swiglu(int64_t n, float *g, const float *u)
{
    for (int64_t i = 0; i < n; i++)
        g[i] = g[i] / (1.0f + expf(-g[i])) * u[i];
}

static void geglu(int64_t n, float *g, const float *u)
{
    for (int64_t i = 0; i < n; i++) {
        float x = g[i], c = 0.79788456f * fmaf(0.044715f * x * x, x, x);
        g[i] = x / (1.0f + expf(-2.0f * c)) * u[i];
    }
}

static double softmax_exp(int64_t n, float *s, float mx)
{
    double sum = 0;
    for (int64_t i = 0; i < n; i++) {
        s[i] = expf(s[i] - mx);
        sum += s[i];
    }
    return sum;
}

/* ---- the sampler's row passes ---- */

float ifl_kernels_exp(float x)
{
    if (x < -87.0f)
        x = -87.0f;
    float n = (x * IFL_EXP_LOG2E + IFL_EXP_ROUND) - IFL_EXP_ROUND;
    float r = x - n * IFL_EXP_LN2_HI - n * IFL_EXP_LN2_LO;
    float p = r * IFL_EXP_P0 + IFL_EXP_P1;
    p = p * r + IFL_EXP_P2;
    p = p * r + IFL_EXP_P3;
    p = p * r + IFL_EXP_P4;
    p = p * r + IFL_EXP_P5;
    p = p * r * r + r + 1.0f;
    int32_t bits = ((int32_t)n + 127) * (1 << 23);
    float s;
    memcpy(&s, &bits, sizeof(s));
    return p * s;
}

float ifl_kernels_tanh(float x)
{
    const float e = ifl_kernels_exp(-2.0f * fabsf(x));
    return copysignf((1.0f - e) / (1.0f + e), x);
}

static float max_f32(int64_t n, const float *x)
{
    float m = -INFINITY;
    for (int64_t i = 0; i < n; i++)
        if (x[i] > m)
            m = x[i];
    return m;
}

static int64_t find_f32(int64_t n, const float *x, float v)
{
    int64_t i = 0;
    while (i < n && x[i] != v)
        i++;
    return i;
}

static double exp_pass(int64_t n, const float *x, const struct ifl_exp_pass *a)
{
    double sum = 0, sev = 0;
    int32_t cnt = 0;
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        float s[4] = {0, 0, 0, 0}, sv[4] = {0, 0, 0, 0};
        for (int k = 0; k < 4; k++)
            for (int j = 0; j < 4; j++) {
                float v, e = ifl_exp_one(a, x[i + 4 * k + j], &v);
                if (a->e)
                    a->e[i + 4 * k + j] = e;
                if (a->v)
                    a->v[i + 4 * k + j] = v;
                s[j] += e;
                sv[j] += e * v;
                cnt += e > 0;
            }
        sum += (double)((s[0] + s[1]) + (s[2] + s[3]));
        sev += (double)((sv[0] + sv[1]) + (sv[2] + sv[3]));
    }
    return ifl_exp_finish(i, n, x, a, a->e != NULL, a->v != NULL, a->sum_ev != NULL,
                          a->count != NULL, sum, sev, cnt);
}

/* LoRA's products (kernels.h lora_a, lora_b, and their F16 forms): the
 * 16-lane dot product and a sequential fused sum over the rank, which the
 * x86 tables repeat operation for operation. ld(p, i) reads element i of
 * A or B as float; ty: 0 F32, 1 F16. */
static inline float lora_ld(const void *p, size_t i, int ty)
{
    return ty ? ifl_f16_to_f32(((const uint16_t *)p)[i]) : ((const float *)p)[i];
}

static float lora_dot16(int64_t n, const void *a, int ty, const float *x)
{
    float s[16] = {0};
    for (int64_t e = 0; e < n; e++)
        s[e & 15] = fmaf(lora_ld(a, (size_t)e, ty), x[e], s[e & 15]);
    for (int h = 8; h >= 1; h /= 2)
        for (int l = 0; l < h; l++)
            s[l] = s[l] + s[l + h];
    return s[0];
}

static void lora_a_any(int64_t n, int nk, const void *a, int ty, int nr, const int32_t *rows,
                       const float *x, size_t ldx, float *t, size_t ldt)
{
    for (int i = 0; i < nr; i++)
        for (int k = 0; k < nk; k++) {
            /* row k: n elements from k * n */
            const char *ak = ty ? (const char *)((const uint16_t *)a + (size_t)k * (size_t)n)
                                : (const char *)((const float *)a + (size_t)k * (size_t)n);
            t[(size_t)i * ldt + (size_t)k] = lora_dot16(n, ak, ty, x + (size_t)rows[i] * ldx);
        }
}

static void lora_b_any(int nk, int64_t nc, const void *bt, int ty, size_t ldb, int nr,
                       const int32_t *rows, const float *scale, const float *t, size_t ldt,
                       float *y, size_t ldy)
{
    for (int i = 0; i < nr; i++) {
        float *yr = y + (size_t)rows[i] * ldy;
        const float *ti = t + (size_t)i * ldt;
        for (int64_t c = 0; c < nc; c++) {
            float acc = 0.0f;
            for (int k = 0; k < nk; k++)
                acc = fmaf(lora_ld(bt, (size_t)k * ldb + (size_t)c, ty), ti[k], acc);
            yr[c] = fmaf(scale[i], acc, yr[c]);
        }
    }
}

static void lora_a(int64_t n, int nk, const float *a, int nr, const int32_t *rows, const float *x,
                   size_t ldx, float *t, size_t ldt)
{
    lora_a_any(n, nk, a, 0, nr, rows, x, ldx, t, ldt);
}

static void lora_b(int nk, int64_t nc, const float *bt, size_t ldb, int nr, const int32_t *rows,
                   const float *scale, const float *t, size_t ldt, float *y, size_t ldy)
{
    lora_b_any(nk, nc, bt, 0, ldb, nr, rows, scale, t, ldt, y, ldy);
}

static void lora_a_f16(int64_t n, int nk, const uint16_t *a, int nr, const int32_t *rows,
                       const float *x, size_t ldx, float *t, size_t ldt)
{
    lora_a_any(n, nk, a, 1, nr, rows, x, ldx, t, ldt);
}

static void lora_b_f16(int nk, int64_t nc, const uint16_t *bt, size_t ldb, int nr,
                       const int32_t *rows, const float *scale, const float *t, size_t ldt,
                       float *y, size_t ldy)
{
    lora_b_any(nk, nc, bt, 1, ldb, nr, rows, scale, t, ldt, y, ldy);
}

static void lora_b_q8(int nkb, int64_t ng, const void *bq, int nr, const int32_t *rows,
                      const float *scale, const int8_t *tq, size_t ldq, const float *td, float *y,
                      size_t ldy)
{
    for (int64_t g = 0; g < ng; g++)
        for (int i = 0; i < nr; i++) {
            const int8_t *ti = tq + (size_t)i * ldq;
            float *yr = y + (size_t)rows[i] * ldy + (size_t)g * 16;
            for (int c = 0; c < 16; c++) {
                float acc = 0.0f;
                for (int kb = 0; kb < nkb; kb++) {
                    const uint8_t *blk =
                        (const uint8_t *)bq + ((size_t)g * (size_t)nkb + (size_t)kb) * 288;
                    uint16_t d;
                    memcpy(&d, blk + 2 * c, sizeof d);
                    int32_t isum = 0;
                    for (int k = 0; k < 16; k++)
                        isum += (int32_t)(int8_t)blk[32 + (k / 4) * 64 + c * 4 + k % 4] *
                                ti[kb * 16 + k];
                    acc = fmaf(td[(size_t)i * (size_t)nkb + (size_t)kb] * ifl_f16_to_f32(d),
                               (float)isum, acc);
                }
                yr[c] = fmaf(scale[i], acc, yr[c]);
            }
        }
}

static void gemm_f32_kn(int64_t n, int nr, int nc, const float *x, size_t ldx, const float *b,
                        size_t ldb, float *y, size_t ldy)
{
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) {
            float acc = 0.0f;
            for (int64_t k = 0; k < n; k++)
                acc = fmaf(x[(size_t)r * ldx + (size_t)k], b[(size_t)k * ldb + (size_t)c], acc);
            y[(size_t)r * ldy + (size_t)c] = acc;
        }
}

void ifl_kernels_fill_ref_ops(struct ifl_kernels *k)
{
    k->gemm_f32_kn = gemm_f32_kn;
    k->dot_f16 = dot_f16;
    k->axpy_f16 = axpy_f16;
    k->attn_qk_f16 = attn_qk_f16;
    k->attn_pv_f16 = attn_pv_f16;
    k->attn_qk_q8_0 = attn_qk_q8_0;
    k->attn_pv_q8_0 = attn_pv_q8_0;
    k->cvt_f32_f16 = cvt_f32_f16;
    k->swiglu = swiglu;
    k->geglu = geglu;
    k->softmax_exp = softmax_exp;
    k->max_f32 = max_f32;
    k->find_f32 = find_f32;
    k->exp_pass = exp_pass;
    k->lora_a = lora_a;
    k->lora_b = lora_b;
    k->lora_a_f16 = lora_a_f16;
    k->lora_b_f16 = lora_b_f16;
    ifl_kernels_fill_ref_attn(k);
    k->lora_b_q8 = lora_b_q8;
}
