/*
 * Scalar reference of the tiled attention kernels (attn_tile_f16 and
 * attn_tile_q8_0, struct ifl_attn_tile in kernels.h): one tile of at most
 * 64 cached positions folded into each query's online softmax. Every
 * operation is the one kernels.h names, in its order, so the SIMD tables
 * give these bits exactly.
 */
#include "kernels/blocks.h"
#include "kernels/impl.h"

#include <math.h>
#include <string.h>

#include "core/fp16.h"

/* Value e of a cached head: F16, or Q8_0 blocks dequantised as d * q. */
static float kv_val(int q8, const void *row, int e)
{
    if (!q8)
        return ifl_f16_to_f32(((const uint16_t *)row)[e]);
    const struct ifl_block_q8_0 *b = (const struct ifl_block_q8_0 *)row + e / IFL_QK;
    return ifl_f16_to_f32(b->d) * (float)b->qs[e % IFL_QK];
}

/* The score's c of a Q8_0 key (kernels.h): per block, the exact integer
 * dot of the key's and the query's int8 values, added as one fused
 * multiply-add by the product of the two scales, blocks in order. */
static float q8_dot(const void *krow, const void *qrow, int d)
{
    const struct ifl_block_q8_0 *kb = krow, *qb = qrow;
    float c = 0.0f;
    for (int b = 0; b < d / IFL_QK; b++) {
        int32_t isum = 0;
        for (int j = 0; j < IFL_QK; j++)
            isum += (int32_t)kb[b].qs[j] * (int32_t)qb[b].qs[j];
        c = fmaf((float)isum, ifl_f16_to_f32(kb[b].d) * ifl_f16_to_f32(qb[b].d), c);
    }
    return c;
}

/* n (16 or 64) lanes folded: lane l += lane l + h for h = n / 2, ..., 1. */
static float fold(float *c, int n)
{
    for (int h = n / 2; h >= 1; h /= 2)
        for (int l = 0; l < h; l++)
            c[l] = c[l] + c[l + h];
    return c[0];
}

static void attn_tile(const struct ifl_attn_tile *a, int q8)
{
    for (int i = 0; i < a->nq; i++) {
        const int lo = a->lo[i], hi = a->hi[i];
        if (lo >= hi)
            continue;
        const float *q = q8 ? NULL : a->q + (size_t)i * (size_t)a->d;
        float *o = a->o + (size_t)i * (size_t)a->dv;
        float s[64], p[64] = {0}, mt = -INFINITY;
        const void *qq = q8 ? (const char *)a->q8 + (size_t)i * (size_t)(a->d / IFL_QK) *
                                                        sizeof(struct ifl_block_q8_0)
                            : NULL;
        for (int t = lo; t < hi; t++) {
            if (q8) {
                s[t] = q8_dot(a->k[t], qq, a->d) * a->scale;
            } else {
                float c[16] = {0};
                for (int e = 0; e < a->d; e++)
                    c[e % 16] = fmaf(kv_val(0, a->k[t], e), q[e], c[e % 16]);
                s[t] = fold(c, 16) * a->scale;
            }
            if (a->softcap > 0)
                s[t] = a->softcap * ifl_kernels_tanh(s[t] * (1.0f / a->softcap));
            if (s[t] > mt)
                mt = s[t];
        }
        if (mt > a->m[i]) {
            const float al = ifl_kernels_exp(a->m[i] - mt);
            a->l[i] *= al;
            for (int e = 0; e < a->dv; e++)
                o[e] *= al;
            a->m[i] = mt;
        }
        float pf[64];
        for (int t = lo; t < hi; t++)
            p[t] = ifl_kernels_exp(s[t] - a->m[i]);
        memcpy(pf, p, sizeof pf); /* fold works in place */
        a->l[i] += fold(pf, 64);
        for (int t = lo; t < hi; t++)
            for (int e = 0; e < a->dv; e++)
                o[e] = fmaf(p[t], kv_val(q8, a->v[t], e), o[e]);
    }
}

static void attn_tile_f16(const struct ifl_attn_tile *a)
{
    attn_tile(a, 0);
}

static void attn_tile_q8_0(const struct ifl_attn_tile *a)
{
    attn_tile(a, 1);
}

void ifl_kernels_fill_ref_attn(struct ifl_kernels *k)
{
    k->attn_tile_f16 = attn_tile_f16;
    k->attn_tile_q8_0 = attn_tile_q8_0;
}
