/*
 * Attention over an F16 KV cache for the AVX-512 table: one call covers a
 * run of cached positions (a KV block) and every query head that shares
 * its KV head, so each cached row is converted from F16 once for all of
 * them and there is one call per block, not per position.
 *
 * attn_qk_f16 equals ref.c's attn_qk_f16 within float reassociation: each
 * score is one 16-lane FMA chain over the head (elements 16k .. 16k + 15
 * into lane order, a zero-padded tail last), folded by one fixed
 * horizontal sum, then scaled. attn_pv_f16 equals ref.c bit for bit: per
 * position in order, one fused multiply-add on each output value.
 * Neither depends on how many heads or positions share a call, so a row's
 * attention does not depend on the batch. The Q8_0 pair reads the cache in
 * place with the same structure, dequantising sixteen values at a time.
 */
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/impl.h"
#include "kernels/x86_avx512.h"
#include "kernels/x86_heads.h"

#define UNROLL _Pragma("GCC unroll 8")

AI __mmask16 lanes(int d, int j)
{
    return d - j >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (d - j)) - 1);
}

/* Sixteen F16 values at p, as floats: lanes past m are 0. A whole vector
 * is read with a plain load: a masked load that misses the cache stalled
 * the attention's stream on the Zen 5 (not issued ahead, it seems), and
 * the cache is read almost entirely in whole vectors. */
AI __m512 ld_f16x16(__mmask16 m, const uint16_t *p)
{
    if (m == (__mmask16)0xffff)
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(const void *)p));
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

/* Sixteen values of a Q8_0 run from element e (e % 16 == 0), dequantised
 * as dequant_q8_0 does: d * q. */
AI __m512 ld_q8x16(const char *row, int e)
{
    const char *blk = row + (size_t)(e / 32) * 34;
    uint16_t h;
    memcpy(&h, blk, 2);
    __m512 d = _mm512_set1_ps(_cvtsh_ss(h));
    __m128i q = _mm_loadu_si128((const __m128i *)(blk + 2 + (e % 32)));
    return _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)));
}

/* Q heads by T positions (T = 4, or 1 for the last few); T * Q independent
 * chains keep both FMA ports busy, and four positions' sums are folded
 * together (hsum512x4, the same order as hsum512). kind 0: k is an F16
 * cache, ks elements apart; kind 1: Q8_0 rows, ks bytes apart (d % 32 ==
 * 0, so whole vectors). */
AI void qk_tile(int kind, int Q, int T, int d, const float *q, const void *k, size_t ks,
                float scale, float *s, size_t lds)
{
    __m512 acc[4][4];
    UNROLL for (int i = 0; i < Q; i++) UNROLL for (int t = 0; t < T; t++) acc[i][t] =
        _mm512_setzero_ps();
    for (int j = 0; j < d; j += 16) {
        __mmask16 m = lanes(d, j);
        __m512 kv[4];
        UNROLL for (int t = 0; t < T; t++) kv[t] =
            kind ? ld_q8x16((const char *)k + (size_t)t * ks, j)
                 : ld_f16x16(m, (const uint16_t *)k + (size_t)t * ks + j);
        UNROLL for (int i = 0; i < Q; i++)
        {
            __m512 qv = _mm512_maskz_loadu_ps(m, q + (size_t)i * d + j);
            UNROLL for (int t = 0; t < T; t++) acc[i][t] = _mm512_fmadd_ps(kv[t], qv, acc[i][t]);
        }
    }
    if (T == 4) {
        UNROLL for (int i = 0; i < Q; i++) _mm_storeu_ps(
            s + (size_t)i * lds,
            _mm_mul_ps(_mm_set1_ps(scale), hsum512x4(acc[i][0], acc[i][1], acc[i][2], acc[i][3])));
    } else {
        UNROLL for (int i = 0; i < Q; i++) UNROLL for (int t = 0; t < T; t++)
            s[(size_t)i * lds + t] = scale * hsum512(acc[i][t]);
    }
}

/* Row t of the cache, by kind. */
AI const void *kv_row(int kind, const void *k, size_t ks, int t)
{
    return kind ? (const void *)((const char *)k + (size_t)t * ks)
                : (const void *)((const uint16_t *)k + (size_t)t * ks);
}

AI void qk_heads(int kind, int Q, int d, const float *q, const void *k, size_t ks, int nt,
                 float scale, float *s, size_t lds)
{
    int t = 0;
    for (; t + 4 <= nt; t += 4)
        qk_tile(kind, Q, 4, d, q, kv_row(kind, k, ks, t), ks, scale, s + t, lds);
    for (; t < nt; t++)
        qk_tile(kind, Q, 1, d, q, kv_row(kind, k, ks, t), ks, scale, s + t, lds);
}

/* Every query head, in tiles (x86_heads.h). */
AI void qk_all(int kind, int d, int nq, const float *q, const void *k, size_t ks, int nt,
               float scale, float *s, size_t lds)
{
#define QK(Q, i) qk_heads(kind, Q, d, q + (size_t)(i)*d, k, ks, nt, scale, s + (size_t)(i)*lds, lds)
    FOR_HEAD_TILES(nq, QK);
#undef QK
}

static void z_attn_qk_f16(int d, int nq, const float *q, const uint16_t *k, size_t ks, int nt,
                          float scale, float *s, size_t lds)
{
    qk_all(0, d, nq, q, k, ks, nt, scale, s, lds);
}

/* Q heads by up to 64 output values (J vectors) held in registers across
 * all nt positions. */
AI void pv_tile(int Q, int J, int d, int j0, const float *p, size_t ldp, const uint16_t *v,
                size_t vs, int nt, float *o)
{
    __m512 acc[4][4];
    __mmask16 m[4];
    UNROLL for (int jj = 0; jj < J; jj++) m[jj] = lanes(d, j0 + 16 * jj);
    UNROLL for (int i = 0; i < Q; i++) UNROLL for (int jj = 0; jj < J; jj++) acc[i][jj] =
        _mm512_maskz_loadu_ps(m[jj], o + (size_t)i * d + j0 + 16 * jj);
    for (int t = 0; t < nt; t++) {
        __m512 vv[4];
        UNROLL for (int jj = 0; jj < J; jj++) vv[jj] =
            ld_f16x16(m[jj], v + (size_t)t * vs + j0 + 16 * jj);
        UNROLL for (int i = 0; i < Q; i++)
        {
            __m512 a = _mm512_set1_ps(p[(size_t)i * ldp + t]);
            UNROLL for (int jj = 0; jj < J; jj++) acc[i][jj] =
                _mm512_fmadd_ps(a, vv[jj], acc[i][jj]);
        }
    }
    UNROLL for (int i = 0; i < Q; i++) UNROLL for (int jj = 0; jj < J; jj++)
        _mm512_mask_storeu_ps(o + (size_t)i * d + j0 + 16 * jj, m[jj], acc[i][jj]);
}

AI void pv_heads(int Q, int d, const float *p, size_t ldp, const uint16_t *v, size_t vs, int nt,
                 float *o)
{
    for (int j0 = 0; j0 < d; j0 += 64) {
        int rest = (d - j0 + 15) / 16;
        if (rest >= 4)
            pv_tile(Q, 4, d, j0, p, ldp, v, vs, nt, o);
        else if (rest == 3)
            pv_tile(Q, 3, d, j0, p, ldp, v, vs, nt, o);
        else if (rest == 2)
            pv_tile(Q, 2, d, j0, p, ldp, v, vs, nt, o);
        else
            pv_tile(Q, 1, d, j0, p, ldp, v, vs, nt, o);
    }
}

static void z_attn_pv_f16(int d, int nq, const float *p, size_t ldp, const uint16_t *v, size_t vs,
                          int nt, float *o)
{
#define PV(Q, i) pv_heads(Q, d, p + (size_t)(i)*ldp, ldp, v, vs, nt, o + (size_t)(i)*d)
    FOR_HEAD_TILES(nq, PV);
#undef PV
}

/* ---- Q8_0 cache ------------------------------------------------------ */

static void z_attn_qk_q8_0(int d, int nq, const float *q, const void *k, size_t ks, int nt,
                           float scale, float *s, size_t lds)
{
    qk_all(1, d, nq, q, k, ks, nt, scale, s, lds);
}

/* Q heads by J vectors of 16 values (d % 32 == 0, so whole vectors). */
AI void pv8_tile(int Q, int J, int d, int j0, const float *p, size_t ldp, const char *v, size_t vs,
                 int nt, float *o)
{
    __m512 acc[4][4];
    UNROLL for (int i = 0; i < Q; i++) UNROLL for (int jj = 0; jj < J; jj++) acc[i][jj] =
        _mm512_loadu_ps(o + (size_t)i * d + j0 + 16 * jj);
    for (int t = 0; t < nt; t++) {
        __m512 vv[4];
        UNROLL for (int jj = 0; jj < J; jj++) vv[jj] = ld_q8x16(v + (size_t)t * vs, j0 + 16 * jj);
        UNROLL for (int i = 0; i < Q; i++)
        {
            __m512 a = _mm512_set1_ps(p[(size_t)i * ldp + t]);
            UNROLL for (int jj = 0; jj < J; jj++) acc[i][jj] =
                _mm512_fmadd_ps(a, vv[jj], acc[i][jj]);
        }
    }
    UNROLL for (int i = 0; i < Q; i++) UNROLL for (int jj = 0; jj < J; jj++)
        _mm512_storeu_ps(o + (size_t)i * d + j0 + 16 * jj, acc[i][jj]);
}

static void z_attn_pv_q8_0(int d, int nq, const float *p, size_t ldp, const void *v, size_t vs,
                           int nt, float *o)
{
    int i = 0;
    for (; i + 4 <= nq; i += 4)
        for (int j0 = 0; j0 < d; j0 += 64) {
            if (d - j0 >= 64)
                pv8_tile(4, 4, d, j0, p + (size_t)i * ldp, ldp, v, vs, nt, o + (size_t)i * d);
            else
                pv8_tile(4, 2, d, j0, p + (size_t)i * ldp, ldp, v, vs, nt, o + (size_t)i * d);
        }
    for (; i < nq; i++)
        for (int j0 = 0; j0 < d; j0 += 64) {
            if (d - j0 >= 64)
                pv8_tile(1, 4, d, j0, p + (size_t)i * ldp, ldp, v, vs, nt, o + (size_t)i * d);
            else
                pv8_tile(1, 2, d, j0, p + (size_t)i * ldp, ldp, v, vs, nt, o + (size_t)i * d);
        }
}

void ifl_kernels_fill_avx512_attn(struct ifl_kernels *k)
{
    k->attn_qk_q8_0 = z_attn_qk_q8_0;
    k->attn_pv_q8_0 = z_attn_pv_q8_0;
    k->attn_qk_f16 = z_attn_qk_f16;
    k->attn_pv_f16 = z_attn_pv_f16;
}
