/*
 * Scalar reference kernels: the ground truth every SIMD table is tested
 * against. Portable C11, no intrinsics.
 *
 * Formats and arithmetic follow ggml (ggml-quants.c): dequantisation gives
 * the same floats as ggml's dequantize_row_*, activation quantisation
 * (Q8_0, Q8_K) the same bytes as quantize_row_q8_0_ref / q8_K_ref, and the
 * dot products use ggml's integer formulation: per block an exact integer
 * sum of q_w * q_x, scaled by the two block scales. Each output is one
 * float sum over blocks in block order, so results never depend on the
 * shape of the call. The weight quantisers (Q4_0, Q5_0, Q5_1, IQ4_NL,
 * IQ4_XS, MXFP4 and the K-quants) are our own fits; they emit valid ggml blocks but
 * not ggml's bytes. Q5_1's dot takes Q8_0 activations with the exact sum of
 * their quants where ggml's Q8_1 keeps that sum times d rounded to f16.
 * Attention, activations, sampler passes and LoRA are in ref_ops.c.
 */
#include "kernels/blocks.h"
#include "kernels/impl.h"

#include <math.h>
#include <string.h>

#include "core/fp16.h"

/* ---- helpers -------------------------------------------------------- */

/* Round to nearest, ties to even, for |v| < 2^22 (ggml's nearest_int). */
static int nearest_int(float v)
{
    float t = v + 12582912.0f;
    uint32_t u = ifl_f32_to_bits(t);
    return (int)(u & 0x007fffffu) - 0x00400000;
}

static int clampi(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* ---- F32 / F16 / BF16 ---------------------------------------------- */

static void quant_f32(const float *x, void *y, int64_t n)
{
    memcpy(y, x, (size_t)n * sizeof(float));
}
static void dequant_f32(const void *x, float *y, int64_t n)
{
    memcpy(y, x, (size_t)n * sizeof(float));
}

static void quant_f16(const float *x, void *vy, int64_t n)
{
    uint16_t *y = vy;
    for (int64_t i = 0; i < n; i++)
        y[i] = ifl_f32_to_f16(x[i]);
}

static void dequant_f16(const void *vx, float *y, int64_t n)
{
    const uint16_t *x = vx;
    for (int64_t i = 0; i < n; i++)
        y[i] = ifl_f16_to_f32(x[i]);
}

static void quant_bf16(const float *x, void *vy, int64_t n)
{
    uint16_t *y = vy;
    for (int64_t i = 0; i < n; i++)
        y[i] = ifl_f32_to_bf16(x[i]);
}

static void dequant_bf16(const void *vx, float *y, int64_t n)
{
    const uint16_t *x = vx;
    for (int64_t i = 0; i < n; i++)
        y[i] = ifl_bf16_to_f32(x[i]);
}

/* ---- Q8_0 ------------------------------------------------------------ */

/* d = amax / 127, q = roundf(x / d) (half away from zero), as ggml's ref. */
static void quant_q8_0(const float *x, void *vy, int64_t n)
{
    struct ifl_block_q8_0 *y = vy;
    for (int64_t b = 0; b < n / IFL_QK; b++, x += IFL_QK) {
        float amax = 0.0f;
        for (int j = 0; j < IFL_QK; j++)
            amax = fmaxf(amax, fabsf(x[j]));
        float d = amax / 127.0f;
        float id = d != 0.0f ? 1.0f / d : 0.0f;
        y[b].d = ifl_f32_to_f16(d);
        for (int j = 0; j < IFL_QK; j++)
            y[b].qs[j] = (int8_t)roundf(x[j] * id);
    }
}

static void dequant_q8_0(const void *vx, float *y, int64_t n)
{
    const struct ifl_block_q8_0 *x = vx;
    for (int64_t b = 0; b < n / IFL_QK; b++, y += IFL_QK) {
        float d = ifl_f16_to_f32(x[b].d);
        for (int j = 0; j < IFL_QK; j++)
            y[j] = (float)x[b].qs[j] * d;
    }
}

/* ---- Q4_0 ------------------------------------------------------------ */

/* The element of largest magnitude maps to q = 0 (value -8 d), as ggml. */
static void quant_q4_0(const float *x, void *vy, int64_t n)
{
    struct ifl_block_q4_0 *y = vy;
    for (int64_t b = 0; b < n / IFL_QK; b++, x += IFL_QK) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < IFL_QK; j++) {
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        float d = max / -8.0f;
        y[b].d = ifl_f32_to_f16(d);
        float df = ifl_f16_to_f32(y[b].d);
        float id = df != 0.0f ? 1.0f / df : 0.0f;
        for (int j = 0; j < IFL_QK / 2; j++) {
            int q0 = clampi(nearest_int(x[j] * id) + 8, 0, 15);
            int q1 = clampi(nearest_int(x[j + 16] * id) + 8, 0, 15);
            y[b].qs[j] = (uint8_t)(q0 | q1 << 4);
        }
    }
}

static void dequant_q4_0(const void *vx, float *y, int64_t n)
{
    const struct ifl_block_q4_0 *x = vx;
    for (int64_t b = 0; b < n / IFL_QK; b++, y += IFL_QK) {
        float d = ifl_f16_to_f32(x[b].d);
        for (int j = 0; j < IFL_QK / 2; j++) {
            y[j] = (float)((x[b].qs[j] & 15) - 8) * d;
            y[j + 16] = (float)((x[b].qs[j] >> 4) - 8) * d;
        }
    }
}

/* ---- Q5_0 ------------------------------------------------------------ */

/* As Q4_0 one bit wider: the element of largest magnitude maps to q = 0
 * (value -16 d), as ggml. */
static void quant_q5_0(const float *x, void *vy, int64_t n)
{
    struct ifl_block_q5_0 *y = vy;
    for (int64_t b = 0; b < n / IFL_QK; b++, x += IFL_QK) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < IFL_QK; j++) {
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        float d = max / -16.0f;
        y[b].d = ifl_f32_to_f16(d);
        float df = ifl_f16_to_f32(y[b].d);
        float id = df != 0.0f ? 1.0f / df : 0.0f;
        uint32_t qh = 0;
        for (int j = 0; j < IFL_QK / 2; j++) {
            int q0 = clampi(nearest_int(x[j] * id) + 16, 0, 31);
            int q1 = clampi(nearest_int(x[j + 16] * id) + 16, 0, 31);
            y[b].qs[j] = (uint8_t)((q0 & 15) | (q1 & 15) << 4);
            qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + 16);
        }
        memcpy(y[b].qh, &qh, 4);
    }
}

/* The 5-bit q of element j (0..31) of a Q5_0 / Q5_1 block. */
static int q5_at(const uint8_t *qs, uint32_t qh, int j)
{
    int lo = j < 16 ? qs[j] & 15 : qs[j - 16] >> 4;
    return lo | (int)((qh >> j) & 1) << 4;
}

static uint32_t q5_qh(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static void dequant_q5_0(const void *vx, float *y, int64_t n)
{
    const struct ifl_block_q5_0 *x = vx;
    for (int64_t b = 0; b < n / IFL_QK; b++, y += IFL_QK) {
        float d = ifl_f16_to_f32(x[b].d);
        uint32_t qh = q5_qh(x[b].qh);
        for (int j = 0; j < IFL_QK; j++)
            y[j] = (float)(q5_at(x[b].qs, qh, j) - 16) * d;
    }
}

/* ---- Q5_1 ------------------------------------------------------------ */

/* Affine over the block's range, as ggml: m = min, d = (max - min) / 31. */
static void quant_q5_1(const float *x, void *vy, int64_t n)
{
    struct ifl_block_q5_1 *y = vy;
    for (int64_t b = 0; b < n / IFL_QK; b++, x += IFL_QK) {
        float mn = x[0], mx = x[0];
        for (int j = 1; j < IFL_QK; j++) {
            mn = fminf(mn, x[j]);
            mx = fmaxf(mx, x[j]);
        }
        float d = (mx - mn) / 31.0f;
        y[b].d = ifl_f32_to_f16(d);
        y[b].m = ifl_f32_to_f16(mn);
        float df = ifl_f16_to_f32(y[b].d), mf = ifl_f16_to_f32(y[b].m);
        float id = df != 0.0f ? 1.0f / df : 0.0f;
        uint32_t qh = 0;
        for (int j = 0; j < IFL_QK / 2; j++) {
            int q0 = clampi(nearest_int((x[j] - mf) * id), 0, 31);
            int q1 = clampi(nearest_int((x[j + 16] - mf) * id), 0, 31);
            y[b].qs[j] = (uint8_t)((q0 & 15) | (q1 & 15) << 4);
            qh |= (uint32_t)(q0 >> 4) << j | (uint32_t)(q1 >> 4) << (j + 16);
        }
        memcpy(y[b].qh, &qh, 4);
    }
}

static void dequant_q5_1(const void *vx, float *y, int64_t n)
{
    const struct ifl_block_q5_1 *x = vx;
    for (int64_t b = 0; b < n / IFL_QK; b++, y += IFL_QK) {
        float d = ifl_f16_to_f32(x[b].d), m = ifl_f16_to_f32(x[b].m);
        uint32_t qh = q5_qh(x[b].qh);
        for (int j = 0; j < IFL_QK; j++)
            y[j] = (float)q5_at(x[b].qs, qh, j) * d + m;
    }
}

/* ---- IQ4_NL and IQ4_XS's levels ------------------------------------- */

/* The level nearest v (the lower one on a tie). */
static int iq4_nearest(float v)
{
    int best = 0;
    float be = fabsf(v - (float)ifl_iq4nl_levels[0]);
    for (int i = 1; i < 16; i++) {
        float e = fabsf(v - (float)ifl_iq4nl_levels[i]);
        if (e < be) {
            be = e;
            best = i;
        }
    }
    return best;
}

/* 32 values x as nibbles (Q4_0's packing) of levels times d; then d is
 * refitted by least squares to the chosen levels, and the levels chosen
 * again, keeping whichever d had the smaller error. Returns the d used. */
static float iq4_fit32(const float *x, float d, uint8_t qs[16])
{
    float best_d = d, best_err = INFINITY;
    for (int iter = 0; iter < 3 && d != 0.0f; iter++) {
        float id = 1.0f / d;
        double err = 0, sxl = 0, sll = 0;
        int q[32];
        for (int j = 0; j < 32; j++) {
            q[j] = iq4_nearest(x[j] * id);
            float l = (float)ifl_iq4nl_levels[q[j]];
            double e = (double)x[j] - (double)d * l;
            err += e * e;
            sxl += (double)x[j] * l;
            sll += (double)l * l;
        }
        if (err < best_err) {
            best_err = (float)err;
            best_d = d;
            for (int j = 0; j < 16; j++)
                qs[j] = (uint8_t)(q[j] | q[j + 16] << 4);
        }
        if (sll <= 0)
            break;
        d = (float)(sxl / sll);
    }
    if (best_err == INFINITY)
        memset(qs, 0x88, 16); /* level 8 is 1: zero needs d = 0 */
    return best_d;
}

/* The signed element of largest magnitude maps to the level -127. */
static void quant_iq4_nl(const float *x, void *vy, int64_t n)
{
    struct ifl_block_iq4_nl *y = vy;
    for (int64_t b = 0; b < n / IFL_QK; b++, x += IFL_QK) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < IFL_QK; j++) {
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        float d = iq4_fit32(x, max / -127.0f, y[b].qs);
        y[b].d = ifl_f32_to_f16(d);
    }
}

static void dequant_iq4_nl(const void *vx, float *y, int64_t n)
{
    const struct ifl_block_iq4_nl *x = vx;
    for (int64_t b = 0; b < n / IFL_QK; b++, y += IFL_QK) {
        float d = ifl_f16_to_f32(x[b].d);
        for (int j = 0; j < IFL_QK / 2; j++) {
            y[j] = d * (float)ifl_iq4nl_levels[x[b].qs[j] & 15];
            y[j + 16] = d * (float)ifl_iq4nl_levels[x[b].qs[j] >> 4];
        }
    }
}

/* ---- MXFP4 ---------------------------------------------------------- */

/* The E2M1 code nearest v, a value in units of the half scale (the lower
 * index on a tie, so +0 before -0). */
static int mxfp4_nearest(float v)
{
    int best = 0;
    float be = fabsf(v - (float)ifl_mxfp4_levels[0]);
    for (int i = 1; i < 16; i++) {
        float e = fabsf(v - (float)ifl_mxfp4_levels[i]);
        if (e < be) {
            be = e;
            best = i;
        }
    }
    return best;
}

/* The scale is a power of two: the block's largest magnitude a lands in
 * [8, 16) half-scale units (ggml's choice, which clips a above 12 units,
 * the largest code) or in [4, 8) (which never clips but has coarser
 * steps). Both are tried and the one with the smaller squared error
 * kept, the smaller scale on a tie. An all-zero block gets e = 0 and
 * code 0. */
static void quant_mxfp4(const float *x, void *vy, int64_t n)
{
    struct ifl_block_mxfp4 *y = vy;
    for (int64_t b = 0; b < n / IFL_QK; b++, x += IFL_QK) {
        float amax = 0.0f;
        for (int j = 0; j < IFL_QK; j++)
            amax = fmaxf(amax, fabsf(x[j]));
        y[b].e = 0;
        memset(y[b].qs, 0, sizeof(y[b].qs));
        if (!(amax > 0.0f))
            continue;
        int k;
        frexpf(amax, &k); /* amax in [2^(k-1), 2^k) */
        /* half scale 2^(e - 128) with amax / it in [8, 16): e = k + 124 */
        double best_err = INFINITY;
        for (int c = 0; c < 2; c++) {
            int e = k + 124 + c;
            if (e < 0 || e > 255)
                continue;
            float d = ifl_e8m0_half((uint8_t)e), id = 1.0f / d;
            uint8_t qs[16];
            double err = 0;
            for (int j = 0; j < 16; j++) {
                int lo = mxfp4_nearest(x[j] * id), hi = mxfp4_nearest(x[j + 16] * id);
                double e0 = (double)x[j] - (double)d * ifl_mxfp4_levels[lo];
                double e1 = (double)x[j + 16] - (double)d * ifl_mxfp4_levels[hi];
                err += e0 * e0 + e1 * e1;
                qs[j] = (uint8_t)(lo | hi << 4);
            }
            if (err < best_err) {
                best_err = err;
                y[b].e = (uint8_t)e;
                memcpy(y[b].qs, qs, 16);
            }
        }
    }
}

static void dequant_mxfp4(const void *vx, float *y, int64_t n)
{
    const struct ifl_block_mxfp4 *x = vx;
    for (int64_t b = 0; b < n / IFL_QK; b++, y += IFL_QK) {
        float d = ifl_e8m0_half(x[b].e);
        for (int j = 0; j < IFL_QK / 2; j++) {
            y[j] = d * (float)ifl_mxfp4_levels[x[b].qs[j] & 15];
            y[j + 16] = d * (float)ifl_mxfp4_levels[x[b].qs[j] >> 4];
        }
    }
}

/* ---- Q8_K ------------------------------------------------------------ */

/* ggml's quantize_row_q8_K_ref: the signed element of largest magnitude
 * (first one on ties) maps to -127; q = nearest_int(-127 / max * x) capped
 * at 127; d = 1 / iscale; bsums are sums of 16. */
static void quant_q8_k(const float *x, void *vy, int64_t n)
{
    struct ifl_block_q8_k *y = vy;
    for (int64_t b = 0; b < n / IFL_QK_K; b++, x += IFL_QK_K) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < IFL_QK_K; j++) {
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        if (amax == 0.0f) {
            memset(&y[b], 0, sizeof(y[b]));
            continue;
        }
        float iscale = -127.0f / max;
        for (int j = 0; j < IFL_QK_K; j++) {
            int v = nearest_int(iscale * x[j]);
            y[b].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < IFL_QK_K / 16; j++) {
            int s = 0;
            for (int l = 0; l < 16; l++)
                s += y[b].qs[16 * j + l];
            y[b].bsums[j] = (int16_t)s;
        }
        y[b].d = 1.0f / iscale;
    }
}

static void dequant_q8_k(const void *vx, float *y, int64_t n)
{
    const struct ifl_block_q8_k *x = vx;
    for (int64_t b = 0; b < n / IFL_QK_K; b++, y += IFL_QK_K)
        for (int j = 0; j < IFL_QK_K; j++)
            y[j] = x[b].d * (float)x[b].qs[j];
}

/* ---- K-quant weight quantisers ------------------------------------- */

/* Fits x[0..n) ~ s * q + off with q in 0..nmax and off <= 0 by a few rounds
 * of assign-then-least-squares, starting from the min/max range. */
static void fit_affine(const float *x, int n, int nmax, float *s_out, float *off_out)
{
    float mn = x[0], mx = x[0];
    for (int i = 1; i < n; i++) {
        mn = fminf(mn, x[i]);
        mx = fmaxf(mx, x[i]);
    }
    if (mn > 0.0f)
        mn = 0.0f;
    float s = (mx - mn) / (float)nmax, off = mn;
    if (s == 0.0f) {
        *s_out = 0.0f;
        *off_out = off;
        return;
    }
    float best_err = INFINITY, best_s = s, best_off = off;
    for (int iter = 0; iter < 6; iter++) {
        double sq = 0, sqq = 0, sx = 0, sqx = 0, err = 0;
        for (int i = 0; i < n; i++) {
            int q = clampi(nearest_int((x[i] - off) / s), 0, nmax);
            float e = s * (float)q + off - x[i];
            err += (double)e * e;
            sq += q;
            sqq += (double)q * q;
            sx += x[i];
            sqx += (double)q * x[i];
        }
        if (err < best_err) {
            best_err = (float)err;
            best_s = s;
            best_off = off;
        }
        double det = (double)n * sqq - sq * sq;
        if (det <= 0)
            break;
        double ns = ((double)n * sqx - sq * sx) / det;
        double noff = (sx - ns * sq) / n;
        if (noff > 0) {
            noff = 0;
            ns = sqq > 0 ? sqx / sqq : s;
        }
        if (!(ns > 0))
            break;
        s = (float)ns;
        off = (float)noff;
    }
    *s_out = best_s;
    *off_out = best_off;
}

static void pack_k4_scales(uint8_t *s, const uint8_t *sc, const uint8_t *m)
{
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)((sc[j] & 63) | (sc[j + 4] >> 4) << 6);
        s[j + 4] = (uint8_t)((m[j] & 63) | (m[j + 4] >> 4) << 6);
        s[j + 8] = (uint8_t)((sc[j + 4] & 15) | (m[j + 4] & 15) << 4);
    }
}

/* Shared by Q4_K (nmax 15) and Q5_K (nmax 31): 6-bit scales and mins per
 * sub-block of 32, then each element's q against the stored scales. */
static void quant_kx(const float *x, int nmax, uint16_t *d_out, uint16_t *dmin_out, uint8_t *scales,
                     uint8_t q[IFL_QK_K])
{
    float s[8], mn[8], smax = 0.0f, mmax = 0.0f;
    for (int j = 0; j < 8; j++) {
        float off;
        fit_affine(x + 32 * j, 32, nmax, &s[j], &off);
        mn[j] = -off;
        smax = fmaxf(smax, s[j]);
        mmax = fmaxf(mmax, mn[j]);
    }
    *d_out = ifl_f32_to_f16(smax / 63.0f);
    *dmin_out = ifl_f32_to_f16(mmax / 63.0f);
    float d = ifl_f16_to_f32(*d_out), dmin = ifl_f16_to_f32(*dmin_out);
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; j++) {
        sc[j] = (uint8_t)(d > 0.0f ? clampi(nearest_int(s[j] / d), 0, 63) : 0);
        m[j] = (uint8_t)(dmin > 0.0f ? clampi(nearest_int(mn[j] / dmin), 0, 63) : 0);
    }
    pack_k4_scales(scales, sc, m);
    for (int j = 0; j < 8; j++) {
        float ds = d * (float)sc[j], dm = dmin * (float)m[j];
        for (int l = 0; l < 32; l++) {
            int v = ds > 0.0f ? nearest_int((x[32 * j + l] + dm) / ds) : 0;
            q[32 * j + l] = (uint8_t)clampi(v, 0, nmax);
        }
    }
}

static void quant_q4_k(const float *x, void *vy, int64_t n)
{
    struct ifl_block_q4_k *y = vy;
    uint8_t q[IFL_QK_K];
    for (int64_t b = 0; b < n / IFL_QK_K; b++, x += IFL_QK_K) {
        quant_kx(x, 15, &y[b].d, &y[b].dmin, y[b].scales, q);
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < 32; l++)
                y[b].qs[32 * k + l] = (uint8_t)(q[64 * k + l] | q[64 * k + 32 + l] << 4);
    }
}

static void quant_q5_k(const float *x, void *vy, int64_t n)
{
    struct ifl_block_q5_k *y = vy;
    uint8_t q[IFL_QK_K];
    for (int64_t b = 0; b < n / IFL_QK_K; b++, x += IFL_QK_K) {
        quant_kx(x, 31, &y[b].d, &y[b].dmin, y[b].scales, q);
        memset(y[b].qh, 0, sizeof(y[b].qh));
        for (int k = 0; k < 4; k++) {
            for (int l = 0; l < 32; l++) {
                int lo = q[64 * k + l], hi = q[64 * k + 32 + l];
                y[b].qs[32 * k + l] = (uint8_t)((lo & 15) | (hi & 15) << 4);
                y[b].qh[l] |= (uint8_t)((lo >> 4) << (2 * k) | (hi >> 4) << (2 * k + 1));
            }
        }
    }
}

/* Q6_K: per sub-block of 16 the signed element of largest magnitude maps
 * to -32; the 16 scales become int8 against one f16 d. */
static void quant_q6_k(const float *x, void *vy, int64_t n)
{
    struct ifl_block_q6_k *y = vy;
    for (int64_t b = 0; b < n / IFL_QK_K; b++, x += IFL_QK_K) {
        float s[16], amax_s = 0.0f;
        for (int j = 0; j < 16; j++) {
            float amax = 0.0f, max = 0.0f;
            for (int l = 0; l < 16; l++) {
                if (fabsf(x[16 * j + l]) > amax) {
                    amax = fabsf(x[16 * j + l]);
                    max = x[16 * j + l];
                }
            }
            s[j] = max / -32.0f;
            amax_s = fmaxf(amax_s, fabsf(s[j]));
        }
        y[b].d = ifl_f32_to_f16(amax_s / 127.0f);
        float d = ifl_f16_to_f32(y[b].d);
        uint8_t q[IFL_QK_K];
        for (int j = 0; j < 16; j++) {
            int sc = d > 0.0f ? clampi(nearest_int(s[j] / d), -127, 127) : 0;
            y[b].scales[j] = (int8_t)sc;
            float ds = d * (float)sc;
            for (int l = 0; l < 16; l++) {
                int v = ds != 0.0f ? nearest_int(x[16 * j + l] / ds) : 0;
                q[16 * j + l] = (uint8_t)(clampi(v, -32, 31) + 32);
            }
        }
        memset(y[b].qh, 0, sizeof(y[b].qh));
        for (int h = 0; h < 2; h++) {
            uint8_t *ql = y[b].ql + 64 * h, *qh = y[b].qh + 32 * h;
            const uint8_t *qq = q + 128 * h;
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((qq[l] & 15) | (qq[64 + l] & 15) << 4);
                ql[l + 32] = (uint8_t)((qq[32 + l] & 15) | (qq[96 + l] & 15) << 4);
                qh[l] = (uint8_t)(qq[l] >> 4 | (qq[32 + l] >> 4) << 2 | (qq[64 + l] >> 4) << 4 |
                                  (qq[96 + l] >> 4) << 6);
            }
        }
    }
}

/* IQ4_XS: each sub-block of 32 fitted as IQ4_NL's blocks are, then their
 * scales rounded to 6 bits against one f16 d (x = d * (ls - 32) * level)
 * and the levels chosen again against the rounded scales. */
static void quant_iq4_xs(const float *x, void *vy, int64_t n)
{
    struct ifl_block_iq4_xs *y = vy;
    for (int64_t b = 0; b < n / IFL_QK_K; b++, x += IFL_QK_K) {
        float s[8], amax_s = 0.0f;
        uint8_t tmp[16];
        for (int j = 0; j < 8; j++) {
            float amax = 0.0f, max = 0.0f;
            for (int l = 0; l < 32; l++) {
                if (fabsf(x[32 * j + l]) > amax) {
                    amax = fabsf(x[32 * j + l]);
                    max = x[32 * j + l];
                }
            }
            s[j] = iq4_fit32(x + 32 * j, max / -127.0f, tmp);
            amax_s = fmaxf(amax_s, fabsf(s[j]));
        }
        y[b].d = ifl_f32_to_f16(amax_s / 31.0f);
        float d = ifl_f16_to_f32(y[b].d);
        y[b].scales_h = 0;
        memset(y[b].scales_l, 0, sizeof(y[b].scales_l));
        for (int j = 0; j < 8; j++) {
            int ls = (d > 0.0f ? clampi(nearest_int(s[j] / d), -32, 31) : 0) + 32;
            y[b].scales_l[j / 2] |= (uint8_t)((ls & 15) << (4 * (j % 2)));
            y[b].scales_h |= (uint16_t)((ls >> 4) << (2 * j));
            float dl = d * (float)(ls - 32), idl = dl != 0.0f ? 1.0f / dl : 0.0f;
            for (int l = 0; l < 16; l++) {
                int q0 = iq4_nearest(x[32 * j + l] * idl);
                int q1 = iq4_nearest(x[32 * j + 16 + l] * idl);
                y[b].qs[16 * j + l] = (uint8_t)(q0 | q1 << 4);
            }
        }
    }
}

/* Sets the 2-bit quant q (0..3) of element e of a Q2_K / Q3_K block (the
 * placement in blocks.h) in qs, zeroed by the caller. */
static void k2_put(uint8_t *qs, int e, int q)
{
    int h = e / 128, k = e % 128 / 32, r = e % 32;
    qs[32 * h + r] |= (uint8_t)((q & 3) << (2 * k));
}

static int k2_get(const uint8_t *qs, int e)
{
    int h = e / 128, k = e % 128 / 32, r = e % 32;
    return (qs[32 * h + r] >> (2 * k)) & 3;
}

/* Q3_K's third bit of element e: bit 4h + k of hmask[e % 32]. */
static int k3_hbit(const uint8_t *hmask, int e)
{
    return (hmask[e % 32] >> (e / 128 * 4 + e % 128 / 32)) & 1;
}

/* Q2_K: per sub-block of 16, an affine fit (q in 0..3, a min >= 0 to
 * subtract), its scale and min rounded to 4 bits against d and dmin. */
static void quant_q2_k(const float *x, void *vy, int64_t n)
{
    struct ifl_block_q2_k *y = vy;
    for (int64_t b = 0; b < n / IFL_QK_K; b++, x += IFL_QK_K) {
        float s[16], mn[16], smax = 0.0f, mmax = 0.0f;
        for (int j = 0; j < 16; j++) {
            float off;
            fit_affine(x + 16 * j, 16, 3, &s[j], &off);
            mn[j] = -off;
            smax = fmaxf(smax, s[j]);
            mmax = fmaxf(mmax, mn[j]);
        }
        y[b].d = ifl_f32_to_f16(smax / 15.0f);
        y[b].dmin = ifl_f32_to_f16(mmax / 15.0f);
        float d = ifl_f16_to_f32(y[b].d), dmin = ifl_f16_to_f32(y[b].dmin);
        memset(y[b].qs, 0, sizeof(y[b].qs));
        for (int j = 0; j < 16; j++) {
            int sc = d > 0.0f ? clampi(nearest_int(s[j] / d), 0, 15) : 0;
            int m = dmin > 0.0f ? clampi(nearest_int(mn[j] / dmin), 0, 15) : 0;
            y[b].scales[j] = (uint8_t)(sc | m << 4);
            float ds = d * (float)sc, dm = dmin * (float)m;
            for (int l = 0; l < 16; l++) {
                int v = ds > 0.0f ? nearest_int((x[16 * j + l] + dm) / ds) : 0;
                k2_put(y[b].qs, 16 * j + l, clampi(v, 0, 3));
            }
        }
    }
}

/* Q3_K: per sub-block of 16 the signed element of largest magnitude maps
 * to -4; the 16 scales become 6-bit (sc - 32) against one f16 d. */
static void quant_q3_k(const float *x, void *vy, int64_t n)
{
    struct ifl_block_q3_k *y = vy;
    for (int64_t b = 0; b < n / IFL_QK_K; b++, x += IFL_QK_K) {
        float s[16], amax_s = 0.0f;
        for (int j = 0; j < 16; j++) {
            float amax = 0.0f, max = 0.0f;
            for (int l = 0; l < 16; l++) {
                if (fabsf(x[16 * j + l]) > amax) {
                    amax = fabsf(x[16 * j + l]);
                    max = x[16 * j + l];
                }
            }
            s[j] = max / -4.0f;
            amax_s = fmaxf(amax_s, fabsf(s[j]));
        }
        y[b].d = ifl_f32_to_f16(amax_s / 31.0f);
        float d = ifl_f16_to_f32(y[b].d);
        memset(y[b].qs, 0, sizeof(y[b].qs));
        memset(y[b].hmask, 0, sizeof(y[b].hmask));
        memset(y[b].scales, 0, sizeof(y[b].scales));
        for (int j = 0; j < 16; j++) {
            int sc = d > 0.0f ? clampi(nearest_int(s[j] / d), -32, 31) : 0;
            int v6 = sc + 32;
            if (j < 8)
                y[b].scales[j] |= (uint8_t)(v6 & 15);
            else
                y[b].scales[j - 8] |= (uint8_t)((v6 & 15) << 4);
            y[b].scales[8 + j % 4] |= (uint8_t)((v6 >> 4) << (2 * (j / 4)));
            float ds = d * (float)sc;
            for (int l = 0; l < 16; l++) {
                int e = 16 * j + l;
                int q = (ds != 0.0f ? clampi(nearest_int(x[e] / ds), -4, 3) : 0) + 4;
                k2_put(y[b].qs, e, q);
                y[b].hmask[e % 32] |= (uint8_t)((q >> 2) << (e / 128 * 4 + e % 128 / 32));
            }
        }
    }
}

/* ---- K-quant dequantisers (same float expressions as ggml) ---------- */

static void dequant_q4_k(const void *vx, float *y, int64_t n)
{
    const struct ifl_block_q4_k *x = vx;
    for (int64_t b = 0; b < n / IFL_QK_K; b++) {
        float d = ifl_f16_to_f32(x[b].d), dmin = ifl_f16_to_f32(x[b].dmin);
        const uint8_t *q = x[b].qs;
        for (int k = 0; k < 4; k++, q += 32) {
            uint8_t sc0, m0, sc1, m1;
            ifl_k4_scale_min(x[b].scales, 2 * k, &sc0, &m0);
            ifl_k4_scale_min(x[b].scales, 2 * k + 1, &sc1, &m1);
            float d0 = d * (float)sc0, dm0 = dmin * (float)m0;
            float d1 = d * (float)sc1, dm1 = dmin * (float)m1;
            for (int l = 0; l < 32; l++)
                *y++ = d0 * (float)(q[l] & 15) - dm0;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (float)(q[l] >> 4) - dm1;
        }
    }
}

static void dequant_q5_k(const void *vx, float *y, int64_t n)
{
    const struct ifl_block_q5_k *x = vx;
    for (int64_t b = 0; b < n / IFL_QK_K; b++) {
        float d = ifl_f16_to_f32(x[b].d), dmin = ifl_f16_to_f32(x[b].dmin);
        const uint8_t *q = x[b].qs, *qh = x[b].qh;
        for (int k = 0; k < 4; k++, q += 32) {
            uint8_t sc0, m0, sc1, m1;
            ifl_k4_scale_min(x[b].scales, 2 * k, &sc0, &m0);
            ifl_k4_scale_min(x[b].scales, 2 * k + 1, &sc1, &m1);
            float d0 = d * (float)sc0, dm0 = dmin * (float)m0;
            float d1 = d * (float)sc1, dm1 = dmin * (float)m1;
            for (int l = 0; l < 32; l++)
                *y++ = d0 * (float)((q[l] & 15) + ((qh[l] >> (2 * k)) & 1) * 16) - dm0;
            for (int l = 0; l < 32; l++)
                *y++ = d1 * (float)((q[l] >> 4) + ((qh[l] >> (2 * k + 1)) & 1) * 16) - dm1;
        }
    }
}

static void dequant_q6_k(const void *vx, float *y, int64_t n)
{
    const struct ifl_block_q6_k *x = vx;
    for (int64_t b = 0; b < n / IFL_QK_K; b++) {
        float d = ifl_f16_to_f32(x[b].d);
        for (int h = 0; h < 2; h++, y += 128) {
            const uint8_t *ql = x[b].ql + 64 * h, *qh = x[b].qh + 32 * h;
            const int8_t *sc = x[b].scales + 8 * h;
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 15) | ((qh[l] >> 0) & 3) << 4) - 32;
                int q2 = ((ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4) - 32;
                int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
                int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
                y[l] = d * (float)sc[is] * (float)q1;
                y[l + 32] = d * (float)sc[is + 2] * (float)q2;
                y[l + 64] = d * (float)sc[is + 4] * (float)q3;
                y[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
        }
    }
}

static void dequant_iq4_xs(const void *vx, float *y, int64_t n)
{
    const struct ifl_block_iq4_xs *x = vx;
    for (int64_t b = 0; b < n / IFL_QK_K; b++) {
        float d = ifl_f16_to_f32(x[b].d);
        for (int j = 0; j < 8; j++, y += 32) {
            float dl = d * (float)(ifl_iq4xs_scale(&x[b], j) - 32);
            const uint8_t *q = x[b].qs + 16 * j;
            for (int l = 0; l < 16; l++) {
                y[l] = dl * (float)ifl_iq4nl_levels[q[l] & 15];
                y[l + 16] = dl * (float)ifl_iq4nl_levels[q[l] >> 4];
            }
        }
    }
}

static void dequant_q2_k(const void *vx, float *y, int64_t n)
{
    const struct ifl_block_q2_k *x = vx;
    for (int64_t b = 0; b < n / IFL_QK_K; b++, y += IFL_QK_K) {
        float d = ifl_f16_to_f32(x[b].d), dmin = ifl_f16_to_f32(x[b].dmin);
        for (int j = 0; j < 16; j++) {
            float dl = d * (float)(x[b].scales[j] & 15), ml = dmin * (float)(x[b].scales[j] >> 4);
            for (int l = 0; l < 16; l++)
                y[16 * j + l] = dl * (float)k2_get(x[b].qs, 16 * j + l) - ml;
        }
    }
}

static void dequant_q3_k(const void *vx, float *y, int64_t n)
{
    const struct ifl_block_q3_k *x = vx;
    for (int64_t b = 0; b < n / IFL_QK_K; b++, y += IFL_QK_K) {
        float d = ifl_f16_to_f32(x[b].d);
        for (int j = 0; j < 16; j++) {
            float dl = d * (float)(ifl_q3k_scale(x[b].scales, j) - 32);
            for (int l = 0; l < 16; l++) {
                int e = 16 * j + l;
                y[e] = dl * (float)(k2_get(x[b].qs, e) - (k3_hbit(x[b].hmask, e) ? 0 : 4));
            }
        }
    }
}

/* ---- dot products: one weight row against one activation row -------- */

static float dot_f32(int64_t n, const float *w, const float *x)
{
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++)
        s += w[i] * x[i];
    return s;
}

/* F16 weights step elements apart: 1 in a plain row, 16 in an x16 group */
static float dot_f16w_step(int64_t n, const uint16_t *w, size_t step, const float *x)
{
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++)
        s += ifl_f16_to_f32(w[(size_t)i * step]) * x[i];
    return s;
}

static float dot_f16w(int64_t n, const uint16_t *w, const float *x)
{
    return dot_f16w_step(n, w, 1, x);
}

static float dot_bf16w(int64_t n, const uint16_t *w, const float *x)
{
    float s = 0.0f;
    for (int64_t i = 0; i < n; i++)
        s += ifl_bf16_to_f32(w[i]) * x[i];
    return s;
}

/* A weight row of a quantised type: plain (blocks bs bytes apart from p)
 * or row i of an x16 matrix (p at its group, whose block groups are 16 bs
 * apart). wblock gives block b as the plain struct, unpacked into tmp for
 * x16, so the same dot products serve both and x16 equals plain bit for bit. */
struct wrow {
    const uint8_t *p;
    enum ifl_type t;
    size_t bs;
    int x16_row; /* -1: plain */
};

union wblk {
    struct ifl_block_q8_0 q8_0;
    struct ifl_block_q4_0 q4_0;
    struct ifl_block_q5_0 q5_0;
    struct ifl_block_q5_1 q5_1;
    struct ifl_block_iq4_nl iq4_nl;
    struct ifl_block_mxfp4 mxfp4;
    struct ifl_block_iq4_xs iq4_xs;
    struct ifl_block_q2_k q2_k;
    struct ifl_block_q3_k q3_k;
    struct ifl_block_q4_k q4_k;
    struct ifl_block_q5_k q5_k;
    struct ifl_block_q6_k q6_k;
};

static void x16_unpack(enum ifl_type t, const uint8_t *grp, int i, void *blk);

static const void *wblock(const struct wrow *w, int64_t b, union wblk *tmp)
{
    if (w->x16_row < 0)
        return w->p + (size_t)b * w->bs;
    x16_unpack(w->t, w->p + (size_t)b * 16 * w->bs, w->x16_row, tmp);
    return tmp;
}

static float dot_q8_0(int64_t n, const struct wrow *w, const struct ifl_block_q8_0 *x)
{
    float s = 0.0f;
    union wblk tmp;
    for (int64_t b = 0; b < n / IFL_QK; b++) {
        const struct ifl_block_q8_0 *wb = wblock(w, b, &tmp);
        int32_t isum = 0;
        for (int j = 0; j < IFL_QK; j++)
            isum += wb->qs[j] * x[b].qs[j];
        s += ifl_f16_to_f32(wb->d) * ifl_f16_to_f32(x[b].d) * (float)isum;
    }
    return s;
}

static float dot_q4_0(int64_t n, const struct wrow *w, const struct ifl_block_q8_0 *x)
{
    float s = 0.0f;
    union wblk tmp;
    for (int64_t b = 0; b < n / IFL_QK; b++) {
        const struct ifl_block_q4_0 *wb = wblock(w, b, &tmp);
        int32_t isum = 0;
        for (int j = 0; j < IFL_QK / 2; j++) {
            isum += ((wb->qs[j] & 15) - 8) * x[b].qs[j];
            isum += ((wb->qs[j] >> 4) - 8) * x[b].qs[j + 16];
        }
        s += ifl_f16_to_f32(wb->d) * ifl_f16_to_f32(x[b].d) * (float)isum;
    }
    return s;
}

static float dot_q5_0(int64_t n, const struct wrow *w, const struct ifl_block_q8_0 *x)
{
    float s = 0.0f;
    union wblk tmp;
    for (int64_t b = 0; b < n / IFL_QK; b++) {
        const struct ifl_block_q5_0 *wb = wblock(w, b, &tmp);
        uint32_t qh = q5_qh(wb->qh);
        int32_t isum = 0;
        for (int j = 0; j < IFL_QK; j++)
            isum += (q5_at(wb->qs, qh, j) - 16) * x[b].qs[j];
        s += ifl_f16_to_f32(wb->d) * ifl_f16_to_f32(x[b].d) * (float)isum;
    }
    return s;
}

/* Q5_1: x = d q + m, so the block is d d_x sum(q q_x) + m d_x sum(q_x): the
 * second sum stands in for ggml's Q8_1 activation sum (the same integers,
 * without its rounding to f16). */
static float dot_q5_1(int64_t n, const struct wrow *w, const struct ifl_block_q8_0 *x)
{
    float s = 0.0f;
    union wblk tmp;
    for (int64_t b = 0; b < n / IFL_QK; b++) {
        const struct ifl_block_q5_1 *wb = wblock(w, b, &tmp);
        uint32_t qh = q5_qh(wb->qh);
        int32_t isum = 0, xsum = 0;
        for (int j = 0; j < IFL_QK; j++) {
            isum += q5_at(wb->qs, qh, j) * x[b].qs[j];
            xsum += x[b].qs[j];
        }
        float xd = ifl_f16_to_f32(x[b].d);
        s += ifl_f16_to_f32(wb->d) * xd * (float)isum + ifl_f16_to_f32(wb->m) * xd * (float)xsum;
    }
    return s;
}

static float dot_iq4_nl(int64_t n, const struct wrow *w, const struct ifl_block_q8_0 *x)
{
    float s = 0.0f;
    union wblk tmp;
    for (int64_t b = 0; b < n / IFL_QK; b++) {
        const struct ifl_block_iq4_nl *wb = wblock(w, b, &tmp);
        int32_t isum = 0;
        for (int j = 0; j < IFL_QK / 2; j++) {
            isum += ifl_iq4nl_levels[wb->qs[j] & 15] * x[b].qs[j];
            isum += ifl_iq4nl_levels[wb->qs[j] >> 4] * x[b].qs[j + 16];
        }
        s += ifl_f16_to_f32(wb->d) * ifl_f16_to_f32(x[b].d) * (float)isum;
    }
    return s;
}

/* MXFP4: as IQ4_NL with the doubled E2M1 codes and the half E8M0 scale
 * (ggml's ggml_vec_dot_mxfp4_q8_0). */
static float dot_mxfp4(int64_t n, const struct wrow *w, const struct ifl_block_q8_0 *x)
{
    float s = 0.0f;
    union wblk tmp;
    for (int64_t b = 0; b < n / IFL_QK; b++) {
        const struct ifl_block_mxfp4 *wb = wblock(w, b, &tmp);
        int32_t isum = 0;
        for (int j = 0; j < IFL_QK / 2; j++) {
            isum += ifl_mxfp4_levels[wb->qs[j] & 15] * x[b].qs[j];
            isum += ifl_mxfp4_levels[wb->qs[j] >> 4] * x[b].qs[j + 16];
        }
        s += ifl_e8m0_half(wb->e) * ifl_f16_to_f32(x[b].d) * (float)isum;
    }
    return s;
}

/* Mins term of Q4_K/Q5_K: sum_j m[j] * (sum of the 32 activations of
 * sub-block j), from the activation block's sums of 16. */
static int32_t k4_min_sum(const uint8_t *scales, const int16_t *bsums)
{
    int32_t ms = 0;
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        ifl_k4_scale_min(scales, j, &sc, &m);
        ms += m * (bsums[2 * j] + bsums[2 * j + 1]);
    }
    return ms;
}

/* Q4_K: per super-block, isum = sum_j sc[j] * dot(q_j, x_j) and the mins
 * term; s_d and s_m are summed apart and subtracted at the end. */
static float dot_q4_k(int64_t n, const struct wrow *w, const struct ifl_block_q8_k *x)
{
    float sd = 0.0f, sm = 0.0f;
    union wblk tmp;
    for (int64_t b = 0; b < n / IFL_QK_K; b++) {
        const struct ifl_block_q4_k *wb = wblock(w, b, &tmp);
        int32_t isum = 0;
        for (int k = 0; k < 4; k++) {
            uint8_t sc0, m0, sc1, m1;
            ifl_k4_scale_min(wb->scales, 2 * k, &sc0, &m0);
            ifl_k4_scale_min(wb->scales, 2 * k + 1, &sc1, &m1);
            const uint8_t *q = wb->qs + 32 * k;
            const int8_t *a = x[b].qs + 64 * k;
            int32_t s0 = 0, s1 = 0;
            for (int l = 0; l < 32; l++) {
                s0 += (q[l] & 15) * a[l];
                s1 += (q[l] >> 4) * a[l + 32];
            }
            isum += sc0 * s0 + sc1 * s1;
        }
        int32_t msum = k4_min_sum(wb->scales, x[b].bsums);
        sd += x[b].d * ifl_f16_to_f32(wb->d) * (float)isum;
        sm += x[b].d * ifl_f16_to_f32(wb->dmin) * (float)msum;
    }
    return sd - sm;
}

static float dot_q5_k(int64_t n, const struct wrow *w, const struct ifl_block_q8_k *x)
{
    float sd = 0.0f, sm = 0.0f;
    union wblk tmp;
    for (int64_t b = 0; b < n / IFL_QK_K; b++) {
        const struct ifl_block_q5_k *wb = wblock(w, b, &tmp);
        int32_t isum = 0;
        const uint8_t *qh = wb->qh;
        for (int k = 0; k < 4; k++) {
            uint8_t sc0, m0, sc1, m1;
            ifl_k4_scale_min(wb->scales, 2 * k, &sc0, &m0);
            ifl_k4_scale_min(wb->scales, 2 * k + 1, &sc1, &m1);
            const uint8_t *q = wb->qs + 32 * k;
            const int8_t *a = x[b].qs + 64 * k;
            int32_t s0 = 0, s1 = 0;
            for (int l = 0; l < 32; l++) {
                s0 += ((q[l] & 15) | ((qh[l] >> (2 * k)) & 1) << 4) * a[l];
                s1 += ((q[l] >> 4) | ((qh[l] >> (2 * k + 1)) & 1) << 4) * a[l + 32];
            }
            isum += sc0 * s0 + sc1 * s1;
        }
        int32_t msum = k4_min_sum(wb->scales, x[b].bsums);
        sd += x[b].d * ifl_f16_to_f32(wb->d) * (float)isum;
        sm += x[b].d * ifl_f16_to_f32(wb->dmin) * (float)msum;
    }
    return sd - sm;
}

/* Q6_K: q - 32 is split as sum sc*q*x - 32 * sum sc*bsum, both exact. */
static float dot_q6_k(int64_t n, const struct wrow *w, const struct ifl_block_q8_k *x)
{
    float sd = 0.0f, sm = 0.0f;
    union wblk tmp;
    for (int64_t b = 0; b < n / IFL_QK_K; b++) {
        const struct ifl_block_q6_k *wb = wblock(w, b, &tmp);
        int32_t isum = 0, osum = 0;
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = wb->ql + 64 * h, *qh = wb->qh + 32 * h;
            const int8_t *sc = wb->scales + 8 * h;
            const int8_t *a = x[b].qs + 128 * h;
            for (int g = 0; g < 2; g++) { /* the two sub-blocks of 16 in each 32 */
                int32_t s1 = 0, s2 = 0, s3 = 0, s4 = 0;
                for (int l = 16 * g; l < 16 * g + 16; l++) {
                    s1 += ((ql[l] & 15) | ((qh[l] >> 0) & 3) << 4) * a[l];
                    s2 += ((ql[l + 32] & 15) | ((qh[l] >> 2) & 3) << 4) * a[l + 32];
                    s3 += ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) * a[l + 64];
                    s4 += ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) * a[l + 96];
                }
                isum += sc[g] * s1 + sc[g + 2] * s2 + sc[g + 4] * s3 + sc[g + 6] * s4;
            }
        }
        for (int j = 0; j < 16; j++)
            osum += wb->scales[j] * x[b].bsums[j];
        float d = x[b].d * ifl_f16_to_f32(wb->d);
        sd += d * (float)isum;
        sm += d * (float)(32 * osum);
    }
    return sd - sm;
}

/* IQ4_XS: isum = sum_j (ls_j - 32) * dot(levels_j, x_j), one scale d_x d. */
static float dot_iq4_xs(int64_t n, const struct wrow *w, const struct ifl_block_q8_k *x)
{
    float s = 0.0f;
    union wblk tmp;
    for (int64_t b = 0; b < n / IFL_QK_K; b++) {
        const struct ifl_block_iq4_xs *wb = wblock(w, b, &tmp);
        int32_t isum = 0;
        for (int j = 0; j < 8; j++) {
            const uint8_t *q = wb->qs + 16 * j;
            const int8_t *a = x[b].qs + 32 * j;
            int32_t sj = 0;
            for (int l = 0; l < 16; l++)
                sj += ifl_iq4nl_levels[q[l] & 15] * a[l] + ifl_iq4nl_levels[q[l] >> 4] * a[l + 16];
            isum += (ifl_iq4xs_scale(wb, j) - 32) * sj;
        }
        s += x[b].d * ifl_f16_to_f32(wb->d) * (float)isum;
    }
    return s;
}

/* Q2_K: as Q4_K over 16 sub-blocks of 16: isum = sum_j sc_j dot(q_j, x_j),
 * msum = sum_j m_j bsums[j]; s_d and s_m summed apart. */
static float dot_q2_k(int64_t n, const struct wrow *w, const struct ifl_block_q8_k *x)
{
    float sd = 0.0f, sm = 0.0f;
    union wblk tmp;
    for (int64_t b = 0; b < n / IFL_QK_K; b++) {
        const struct ifl_block_q2_k *wb = wblock(w, b, &tmp);
        int32_t isum = 0, msum = 0;
        for (int j = 0; j < 16; j++) {
            int32_t sj = 0;
            for (int l = 0; l < 16; l++)
                sj += k2_get(wb->qs, 16 * j + l) * x[b].qs[16 * j + l];
            isum += (wb->scales[j] & 15) * sj;
            msum += (wb->scales[j] >> 4) * x[b].bsums[j];
        }
        sd += x[b].d * ifl_f16_to_f32(wb->d) * (float)isum;
        sm += x[b].d * ifl_f16_to_f32(wb->dmin) * (float)msum;
    }
    return sd - sm;
}

/* Q3_K: as Q6_K, the stored q + 4 (0..7) goes into the integer dot and the
 * offset comes back as 4 * sum_j sc_j bsums[j], both exact. */
static float dot_q3_k(int64_t n, const struct wrow *w, const struct ifl_block_q8_k *x)
{
    float sd = 0.0f, sm = 0.0f;
    union wblk tmp;
    for (int64_t b = 0; b < n / IFL_QK_K; b++) {
        const struct ifl_block_q3_k *wb = wblock(w, b, &tmp);
        int32_t isum = 0, osum = 0;
        for (int j = 0; j < 16; j++) {
            int sc = ifl_q3k_scale(wb->scales, j) - 32;
            int32_t sj = 0;
            for (int l = 0; l < 16; l++) {
                int e = 16 * j + l;
                sj += (k2_get(wb->qs, e) | k3_hbit(wb->hmask, e) << 2) * x[b].qs[e];
            }
            isum += sc * sj;
            osum += sc * x[b].bsums[j];
        }
        float d = x[b].d * ifl_f16_to_f32(wb->d);
        sd += d * (float)isum;
        sm += d * (float)(4 * osum);
    }
    return sd - sm;
}

/* ---- gemm: y[r][c] = dot(w row c, x row r) -------------------------- */

#define REF_GEMM(name, dot, wtype, xtype)                                                          \
    static void name(int64_t n, int nr, int nc, const void *x, size_t xs, const void *w,           \
                     size_t ws, float *y, size_t ldy)                                              \
    {                                                                                              \
        for (int r = 0; r < nr; r++)                                                               \
            for (int c = 0; c < nc; c++)                                                           \
                y[(size_t)r * ldy + c] = dot(n, (const wtype *)((const char *)w + (size_t)c * ws), \
                                             (const xtype *)((const char *)x + (size_t)r * xs));   \
    }

REF_GEMM(gemm_f32, dot_f32, float, float)
REF_GEMM(gemm_f16, dot_f16w, uint16_t, float)
REF_GEMM(gemm_bf16, dot_bf16w, uint16_t, float)

/* F16 as x16 groups: row c is every 16th value from its group's start + c % 16 */
static void gemm_f16_x16(int64_t n, int nr, int nc, const void *x, size_t xs, const void *w,
                         size_t ws, float *y, size_t ldy)
{
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) {
            const uint16_t *g = (const uint16_t *)((const char *)w + (size_t)(c / 16) * 16 * ws);
            y[(size_t)r * ldy + c] =
                dot_f16w_step(n, g + c % 16, 16, (const float *)((const char *)x + (size_t)r * xs));
        }
}

/* BF16 as x16 groups: element pairs, row c's pair p (elements 2p, 2p + 1)
 * the 4 bytes at 64 p + 4 (c % 16) of its group; an odd n's last element
 * the 2 bytes at 64 (n / 2) + 2 (c % 16) (kernels.h) */
static void gemm_bf16_x16(int64_t n, int nr, int nc, const void *x, size_t xs, const void *w,
                          size_t ws, float *y, size_t ldy)
{
    for (int r = 0; r < nr; r++)
        for (int c = 0; c < nc; c++) {
            const uint16_t *g = (const uint16_t *)((const char *)w + (size_t)(c / 16) * 16 * ws);
            const float *xr = (const float *)((const char *)x + (size_t)r * xs);
            const int i = c % 16;
            float s = 0.0f;
            for (int64_t k = 0; k < n; k++) {
                size_t at = k < n / 2 * 2 ? 32 * (size_t)(k / 2) + 2 * (size_t)i + (size_t)(k & 1)
                                          : 32 * (size_t)(n / 2) + (size_t)i;
                s += ifl_bf16_to_f32(g[at]) * xr[k];
            }
            y[(size_t)r * ldy + c] = s;
        }
}

/* Quantised weights, plain (x16 == 0) or as x16 groups (then nc is a
 * multiple of 16 and ws the unpacked row bytes). */
#define REF_QGEMM(name, name_x16, t, dot, xtype)                                                   \
    static void name##_any(int x16, int64_t n, int nr, int nc, const void *x, size_t xs,           \
                           const void *w, size_t ws, float *y, size_t ldy)                         \
    {                                                                                              \
        const size_t bs = ifl_type_info(t)->size;                                                  \
        for (int r = 0; r < nr; r++)                                                               \
            for (int c = 0; c < nc; c++) {                                                         \
                struct wrow wr = {(const uint8_t *)w + (size_t)c * ws, t, bs, -1};                 \
                if (x16) {                                                                         \
                    wr.p = (const uint8_t *)w + (size_t)(c / 16) * 16 * ws;                        \
                    wr.x16_row = c % 16;                                                           \
                }                                                                                  \
                y[(size_t)r * ldy + c] =                                                           \
                    dot(n, &wr, (const xtype *)((const char *)x + (size_t)r * xs));                \
            }                                                                                      \
    }                                                                                              \
    static void name(int64_t n, int nr, int nc, const void *x, size_t xs, const void *w,           \
                     size_t ws, float *y, size_t ldy)                                              \
    {                                                                                              \
        name##_any(0, n, nr, nc, x, xs, w, ws, y, ldy);                                            \
    }                                                                                              \
    static void name_x16(int64_t n, int nr, int nc, const void *x, size_t xs, const void *w,       \
                         size_t ws, float *y, size_t ldy)                                          \
    {                                                                                              \
        name##_any(1, n, nr, nc, x, xs, w, ws, y, ldy);                                            \
    }

REF_QGEMM(gemm_q8_0, gemm_q8_0_x16, IFL_TYPE_Q8_0, dot_q8_0, struct ifl_block_q8_0)
REF_QGEMM(gemm_q4_0, gemm_q4_0_x16, IFL_TYPE_Q4_0, dot_q4_0, struct ifl_block_q8_0)
REF_QGEMM(gemm_q5_0, gemm_q5_0_x16, IFL_TYPE_Q5_0, dot_q5_0, struct ifl_block_q8_0)
REF_QGEMM(gemm_q5_1, gemm_q5_1_x16, IFL_TYPE_Q5_1, dot_q5_1, struct ifl_block_q8_0)
REF_QGEMM(gemm_iq4_nl, gemm_iq4_nl_x16, IFL_TYPE_IQ4_NL, dot_iq4_nl, struct ifl_block_q8_0)
REF_QGEMM(gemm_mxfp4, gemm_mxfp4_x16, IFL_TYPE_MXFP4, dot_mxfp4, struct ifl_block_q8_0)
REF_QGEMM(gemm_q4_k, gemm_q4_k_x16, IFL_TYPE_Q4_K, dot_q4_k, struct ifl_block_q8_k)
REF_QGEMM(gemm_q5_k, gemm_q5_k_x16, IFL_TYPE_Q5_K, dot_q5_k, struct ifl_block_q8_k)
REF_QGEMM(gemm_q6_k, gemm_q6_k_x16, IFL_TYPE_Q6_K, dot_q6_k, struct ifl_block_q8_k)
REF_QGEMM(gemm_iq4_xs, gemm_iq4_xs_x16, IFL_TYPE_IQ4_XS, dot_iq4_xs, struct ifl_block_q8_k)
REF_QGEMM(gemm_q2_k, gemm_q2_k_x16, IFL_TYPE_Q2_K, dot_q2_k, struct ifl_block_q8_k)
REF_QGEMM(gemm_q3_k, gemm_q3_k_x16, IFL_TYPE_Q3_K, dot_q3_k, struct ifl_block_q8_k)

/* ---- x16 groups (kernels.h) ------------------------------------------ */

#define X16 16

/* The fields of a block in the order a block group stores them: each is
 * 1 or 2 bytes (stored as 16 values) or a multiple of 4 (stored as runs of
 * 64 bytes, four bytes of each row). Q8_0's quants get + 128 (xor 0x80). */
struct x16_field {
    uint8_t off, size;
};

static int x16_fields(enum ifl_type t, const struct x16_field **f)
{
    static const struct x16_field q8_0[] = {{0, 2}, {2, 32}}, q4_0[] = {{0, 2}, {2, 16}},
                                  q5_0[] = {{0, 2}, {2, 4}, {6, 16}},
                                  q5_1[] = {{0, 2}, {2, 2}, {4, 4}, {8, 16}},
                                  q4_k[] = {{0, 2}, {2, 2}, {4, 12}, {16, 128}},
                                  q5_k[] = {{0, 2}, {2, 2}, {4, 12}, {16, 32}, {48, 128}},
                                  q6_k[] = {{208, 2}, {192, 16}, {0, 128}, {128, 64}},
                                  iq4_xs[] = {{0, 2}, {2, 2}, {4, 4}, {8, 128}},
                                  q2_k[] = {{80, 2}, {82, 2}, {0, 16}, {16, 64}},
                                  q3_k[] = {{108, 2}, {96, 12}, {32, 64}, {0, 32}},
                                  mxfp4[] = {{0, 1}, {1, 16}}, f16[] = {{0, 2}};
    switch (t) {
    case IFL_TYPE_F16:
        *f = f16;
        return 1;
    case IFL_TYPE_Q8_0:
        *f = q8_0;
        return 2;
    case IFL_TYPE_Q4_0:
    case IFL_TYPE_IQ4_NL:
        *f = q4_0;
        return 2;
    case IFL_TYPE_MXFP4:
        *f = mxfp4;
        return 2;
    case IFL_TYPE_Q5_0:
        *f = q5_0;
        return 3;
    case IFL_TYPE_Q5_1:
        *f = q5_1;
        return 4;
    case IFL_TYPE_Q4_K:
        *f = q4_k;
        return 4;
    case IFL_TYPE_Q5_K:
        *f = q5_k;
        return 5;
    case IFL_TYPE_Q6_K:
        *f = q6_k;
        return 4;
    case IFL_TYPE_IQ4_XS:
        *f = iq4_xs;
        return 4;
    case IFL_TYPE_Q2_K:
        *f = q2_k;
        return 4;
    case IFL_TYPE_Q3_K:
        *f = q3_k;
        return 4;
    default:
        *f = NULL;
        return 0;
    }
}

/* Where run r of field k starts in a block group, off being where the
 * field's runs would start laid end to end. Q6_K interleaves its ql and qh
 * runs (IFL_X16_Q6K_QL / _QH in impl.h): each half of a block is 8 triples
 * (ql run m, ql run 8 + m, qh run m of that half), which together hold 16
 * elements of each of four sub-blocks. A kernel that takes the triples in
 * turn reads the group in address order, a stream the hardware prefetcher
 * follows; with ql and qh 2 KiB apart it did not (a one-row Q6_K matmul
 * from memory ran at a third of Q4_K's bandwidth on the Zen 4). */
static size_t x16_run_off(enum ifl_type t, int k, int r, size_t off)
{
    if (t == IFL_TYPE_Q6_K && k == 2)
        return IFL_X16_Q6K_QL(r / 16, r % 16 / 8, r % 8);
    if (t == IFL_TYPE_Q6_K && k == 3)
        return IFL_X16_Q6K_QH(r / 8, r % 8);
    return off + 64 * (size_t)r;
}

/* Copies the fields of rows [i0, i1) of one block group to or from their
 * blocks: row i's block at blk + (i - i0) * stride. to_group 1 packs the
 * blocks into grp, 0 unpacks grp into them. */
static void x16_move(enum ifl_type t, uint8_t *grp, uint8_t *blk, size_t stride, int i0, int i1,
                     int to_group)
{
    const struct x16_field *f;
    int nf = x16_fields(t, &f);
    uint8_t *o = grp;
    for (int k = 0; k < nf; k++) {
        const uint32_t flip = t == IFL_TYPE_Q8_0 && k == 1 ? 0x80808080u : 0;
        uint8_t *b0 = blk + f[k].off;
        if (f[k].size <= 2) {
            const size_t sz = f[k].size;
            for (int i = i0; i < i1; i++) {
                uint8_t *b = b0 + (size_t)(i - i0) * stride, *g = o + sz * (size_t)i;
                uint8_t v[2];
                memcpy(v, to_group ? b : g, sz);
                memcpy(to_group ? g : b, v, sz);
            }
        } else {
            for (int r = 0; r < f[k].size / 4; r++)
                for (int i = i0; i < i1; i++) {
                    uint8_t *b = b0 + (size_t)(i - i0) * stride + 4 * r,
                            *g = grp + x16_run_off(t, k, r, (size_t)(o - grp)) + 4 * i;
                    uint32_t v;
                    memcpy(&v, to_group ? b : g, 4);
                    v ^= flip;
                    memcpy(to_group ? g : b, &v, 4);
                }
        }
        o += (size_t)X16 * f[k].size;
    }
}

static void x16_unpack(enum ifl_type t, const uint8_t *grp, int i, void *blk)
{
    x16_move(t, (uint8_t *)grp, blk, 0, i, i + 1, 0); /* reads grp only */
}

void ifl_repack_x16(enum ifl_type t, int64_t n, const void *rows, size_t row_bytes, void *dst)
{
    const struct ifl_type_info *ti = ifl_type_info(t);
    uint8_t *o = dst;
    if (t == IFL_TYPE_F16) { /* the same moves as below, 64 elements of a row at a time */
        uint16_t *g = dst;
        for (int64_t k0 = 0; k0 < n; k0 += 64) {
            int64_t k1 = n - k0 < 64 ? n : k0 + 64;
            for (int i = 0; i < X16; i++) {
                const uint16_t *row =
                    (const uint16_t *)((const uint8_t *)rows + (size_t)i * row_bytes);
                for (int64_t k = k0; k < k1; k++)
                    g[(size_t)k * X16 + i] = row[k];
            }
        }
        return;
    }
    if (t == IFL_TYPE_BF16) { /* the row as one field: runs of 4 bytes, an odd n's last 2 */
        uint8_t *g = dst;
        for (int64_t p = 0; p < n / 2; p++)
            for (int i = 0; i < X16; i++)
                memcpy(g + 64 * (size_t)p + 4 * (size_t)i,
                       (const uint8_t *)rows + (size_t)i * row_bytes + 4 * (size_t)p, 4);
        if (n & 1)
            for (int i = 0; i < X16; i++)
                memcpy(g + 64 * (size_t)(n / 2) + 2 * (size_t)i,
                       (const uint8_t *)rows + (size_t)i * row_bytes + 2 * (size_t)(n - 1), 2);
        return;
    }
    for (int64_t b = 0; b < n / ti->blck; b++) {
        /* reads rows only */
        x16_move(t, o, (uint8_t *)rows + (size_t)b * ti->size, row_bytes, 0, X16, 1);
        o += X16 * ti->size;
    }
}

void ifl_kernels_fill_ref(struct ifl_kernels *k)
{
    memset(k, 0, sizeof(*k));
    k->name = "scalar";
    k->gemm[IFL_TYPE_F32] = gemm_f32;
    k->gemm[IFL_TYPE_F16] = gemm_f16;
    k->gemm[IFL_TYPE_BF16] = gemm_bf16;
    k->gemm[IFL_TYPE_Q8_0] = gemm_q8_0;
    k->gemm[IFL_TYPE_Q4_0] = gemm_q4_0;
    k->gemm[IFL_TYPE_Q5_0] = gemm_q5_0;
    k->gemm[IFL_TYPE_Q5_1] = gemm_q5_1;
    k->gemm[IFL_TYPE_IQ4_NL] = gemm_iq4_nl;
    k->gemm[IFL_TYPE_MXFP4] = gemm_mxfp4;
    k->gemm[IFL_TYPE_Q4_K] = gemm_q4_k;
    k->gemm[IFL_TYPE_Q5_K] = gemm_q5_k;
    k->gemm[IFL_TYPE_Q6_K] = gemm_q6_k;
    k->gemm[IFL_TYPE_IQ4_XS] = gemm_iq4_xs;
    k->gemm[IFL_TYPE_Q2_K] = gemm_q2_k;
    k->gemm[IFL_TYPE_Q3_K] = gemm_q3_k;
    k->gemm_x16[IFL_TYPE_F16] = gemm_f16_x16;
    k->gemm_x16[IFL_TYPE_BF16] = gemm_bf16_x16;
    k->gemm_x16[IFL_TYPE_Q8_0] = gemm_q8_0_x16;
    k->gemm_x16[IFL_TYPE_Q4_0] = gemm_q4_0_x16;
    k->gemm_x16[IFL_TYPE_Q5_0] = gemm_q5_0_x16;
    k->gemm_x16[IFL_TYPE_Q5_1] = gemm_q5_1_x16;
    k->gemm_x16[IFL_TYPE_IQ4_NL] = gemm_iq4_nl_x16;
    k->gemm_x16[IFL_TYPE_MXFP4] = gemm_mxfp4_x16;
    k->gemm_x16[IFL_TYPE_Q4_K] = gemm_q4_k_x16;
    k->gemm_x16[IFL_TYPE_Q5_K] = gemm_q5_k_x16;
    k->gemm_x16[IFL_TYPE_Q6_K] = gemm_q6_k_x16;
    k->gemm_x16[IFL_TYPE_IQ4_XS] = gemm_iq4_xs_x16;
    k->gemm_x16[IFL_TYPE_Q2_K] = gemm_q2_k_x16;
    k->gemm_x16[IFL_TYPE_Q3_K] = gemm_q3_k_x16;

    k->quant[IFL_TYPE_F32] = quant_f32;
    k->quant[IFL_TYPE_F16] = quant_f16;
    k->quant[IFL_TYPE_BF16] = quant_bf16;
    k->quant[IFL_TYPE_Q8_0] = quant_q8_0;
    k->quant[IFL_TYPE_Q4_0] = quant_q4_0;
    k->quant[IFL_TYPE_Q5_0] = quant_q5_0;
    k->quant[IFL_TYPE_Q5_1] = quant_q5_1;
    k->quant[IFL_TYPE_IQ4_NL] = quant_iq4_nl;
    k->quant[IFL_TYPE_MXFP4] = quant_mxfp4;
    k->quant[IFL_TYPE_Q8_K] = quant_q8_k;
    k->quant[IFL_TYPE_Q4_K] = quant_q4_k;
    k->quant[IFL_TYPE_Q5_K] = quant_q5_k;
    k->quant[IFL_TYPE_Q6_K] = quant_q6_k;
    k->quant[IFL_TYPE_IQ4_XS] = quant_iq4_xs;
    k->quant[IFL_TYPE_Q2_K] = quant_q2_k;
    k->quant[IFL_TYPE_Q3_K] = quant_q3_k;

    k->dequant[IFL_TYPE_F32] = dequant_f32;
    k->dequant[IFL_TYPE_F16] = dequant_f16;
    k->dequant[IFL_TYPE_BF16] = dequant_bf16;
    k->dequant[IFL_TYPE_Q8_0] = dequant_q8_0;
    k->dequant[IFL_TYPE_Q4_0] = dequant_q4_0;
    k->dequant[IFL_TYPE_Q5_0] = dequant_q5_0;
    k->dequant[IFL_TYPE_Q5_1] = dequant_q5_1;
    k->dequant[IFL_TYPE_IQ4_NL] = dequant_iq4_nl;
    k->dequant[IFL_TYPE_MXFP4] = dequant_mxfp4;
    k->dequant[IFL_TYPE_Q8_K] = dequant_q8_k;
    k->dequant[IFL_TYPE_Q4_K] = dequant_q4_k;
    k->dequant[IFL_TYPE_Q5_K] = dequant_q5_k;
    k->dequant[IFL_TYPE_Q6_K] = dequant_q6_k;
    k->dequant[IFL_TYPE_IQ4_XS] = dequant_iq4_xs;
    k->dequant[IFL_TYPE_Q2_K] = dequant_q2_k;
    k->dequant[IFL_TYPE_Q3_K] = dequant_q3_k;

    ifl_kernels_fill_ref_ops(k);
}
