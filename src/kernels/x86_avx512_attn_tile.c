/*
 * attn_tile_f16 and attn_tile_q8_0 of ref_attn.c for the AVX-512 table,
 * bit for bit (struct ifl_attn_tile in kernels.h names the operations).
 *
 * F16 (attn_tile_d): the tile's cached rows that any query takes are
 * first converted to floats (exact) into a buffer on the stack, so each is converted once for all
 * nq queries and then read from L1 by the fused multiply-adds. Per query and sixteen positions:
 * sixteen accumulators, one per position, each a dot16 with the lanes the reference has (lane l
 * takes the elements e % 16 == l in order); the sixteen folds (l += l + h for h = 8, 4, 2, 1) go
 * together through a transposing network whose every addition is one of the reference's, and leave
 * position t in lane 4 (t % 4) + t / 4. Then the tile's max, the rescale, the exponentials
 * (ifl_kernels_exp's operations in sixteen lanes), their fold, and the weighted values position by
 * position with one fused multiply-add per value, for up to four queries
 * of the same range at once (a row's group): each value row is loaded
 * once for them, and their sixteen chains hide the multiply-add latency.
 * A decode's group of eight on an F16 cache (group8) reads the keys in
 * place, half a dot16 to a 256-bit half, so the fold's first stage is
 * an add of two registers rather than a shuffle network (attnbench, Zen
 * 5: about a fifth less time a tile, warm).
 *
 * Q8_0 (q8_tile): the scores are integer dots (kernels.h), sixteen
 * positions in the lanes of vpdpbusd (q8_scores); the softmax is the F16
 * path's one-query one, and the values are the same fused multiply-adds
 * over d * q (read in place for a decode's eight, else converted once).
 */
#include <immintrin.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/impl.h"
#include "kernels/x86_avx512.h"

#define UNROLL _Pragma("GCC unroll 16")
#define TILE_DMAX 256 /* d and dv at most (model/attention_tiled.c checks) */
#define TILE 64       /* positions a tile at most */

/* ifl_kernels_exp in sixteen lanes, each operation rounded on its own (the
 * same as x86_avx512_rows.c's). */
AI __m512 texp16(__m512 x)
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

/* The soft cap of kernels.h in sixteen lanes: ifl_kernels_tanh's
 * operations (texp16 being ifl_kernels_exp's), the sign ORed in as
 * copysignf does (the quotient is never negative). */
AI __m512 softcap16(__m512 s, float cap)
{
    const __m512 x = _mm512_mul_ps(s, _mm512_set1_ps(1.0f / cap));
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    const __m512 ax = _mm512_castsi512_ps(_mm512_andnot_si512(sign, _mm512_castps_si512(x)));
    const __m512 e = texp16(_mm512_mul_ps(_mm512_set1_ps(-2.0f), ax));
    const __m512 one = _mm512_set1_ps(1.0f);
    const __m512 t = _mm512_div_ps(_mm512_sub_ps(one, e), _mm512_add_ps(one, e));
    const __m512i sx = _mm512_and_si512(sign, _mm512_castps_si512(x));
    return _mm512_mul_ps(_mm512_set1_ps(cap),
                         _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(t), sx)));
}

/* fold16 of ref_attn.c over one vector. */
AI float fold1(__m512 x)
{
    __m256 a = _mm256_add_ps(_mm512_castps512_ps256(x), _mm512_extractf32x8_ps(x, 1));
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_movehdup_ps(b));
    return _mm_cvtss_f32(b);
}

/* The stages h = 4, 2, 1 of fold16x16 over x[0..8), each x[j] the
 * stage h = 8 of c[2j] in its low eight lanes and of c[2j + 1] in its
 * high eight. */
AI __m512 fold8x16(const __m512 *x)
{
    __m512 z[4], u[2];
    UNROLL for (int k = 0; k < 4; k++) z[k] =
        _mm512_add_ps(_mm512_shuffle_f32x4(x[2 * k], x[2 * k + 1], _MM_SHUFFLE(2, 0, 2, 0)),
                      _mm512_shuffle_f32x4(x[2 * k], x[2 * k + 1], _MM_SHUFFLE(3, 1, 3, 1)));
    UNROLL for (int m = 0; m < 2; m++) u[m] =
        _mm512_add_ps(_mm512_shuffle_ps(z[2 * m], z[2 * m + 1], _MM_SHUFFLE(1, 0, 1, 0)),
                      _mm512_shuffle_ps(z[2 * m], z[2 * m + 1], _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm512_add_ps(_mm512_shuffle_ps(u[0], u[1], _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm512_shuffle_ps(u[0], u[1], _MM_SHUFFLE(3, 1, 3, 1)));
}

/* fold16 of each of c[0..16), as one vector: position t in lane
 * 4 (t % 4) + t / 4. Stage h = 8 pairs 256-bit halves, h = 4 128-bit
 * quarters, h = 2 and h = 1 lanes within quarters. */
AI __m512 fold16x16(const __m512 *c)
{
    __m512 x[8];
    UNROLL for (int j = 0; j < 8; j++) x[j] =
        _mm512_add_ps(_mm512_shuffle_f32x4(c[2 * j], c[2 * j + 1], 0x44),
                      _mm512_shuffle_f32x4(c[2 * j], c[2 * j + 1], 0xee));
    return fold8x16(x);
}

/* n values of a cached head as floats into out. */
AI void cvt_head(int q8, const void *row, int n, float *out)
{
    if (!q8) {
        const uint16_t *h = row;
        int e = 0;
        for (; e + 16 <= n; e += 16)
            _mm512_storeu_ps(out + e,
                             _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(h + e))));
        if (e < n) {
            __mmask16 m = (__mmask16)((1u << (n - e)) - 1);
            _mm512_mask_storeu_ps(out + e, m, _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, h + e)));
        }
        return;
    }
    const char *b = row;
    for (int e = 0; e < n; e += 32, b += 34) {
        uint16_t dh;
        memcpy(&dh, b, 2);
        const __m512 d = _mm512_set1_ps(_cvtsh_ss(dh));
        __m128i q0 = _mm_loadu_si128((const __m128i *)(b + 2));
        __m128i q1 = _mm_loadu_si128((const __m128i *)(b + 18));
        _mm512_storeu_ps(out + e, _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0))));
        _mm512_storeu_ps(out + e + 16,
                         _mm512_mul_ps(d, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1))));
    }
}

/* Values [e, e + 16) of a cached head as floats (cvt_head's, in place). */
AI __m512 ld16(int q8, const void *row, int e)
{
    if (!q8)
        return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + e)));
    const char *b = (const char *)row + (size_t)(e / 32) * 34;
    uint16_t dh;
    memcpy(&dh, b, 2);
    const __m128i q = _mm_loadu_si128((const __m128i *)(b + 2 + e % 32));
    return _mm512_mul_ps(_mm512_set1_ps(_cvtsh_ss(dh)),
                         _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q)));
}

/* A zero row for the positions of a scored pair that its queries do not
 * take (their scores are masked; the row may not exist). */
static const _Alignas(64) char zero_row[TILE_DMAX * 2];

/* The scores of one query against the tile's sixteen rows of kf (d
 * floats each; rows no query takes are zeros), in fold16x16's lane order,
 * times scale. Every position is scored: the caller masks its own. */
AI __m512 scores(int d, const float *q, const float *kf, float scale)
{
    __m512 acc[16];
    UNROLL for (int t = 0; t < 16; t++) acc[t] = _mm512_setzero_ps();
    int e = 0;
    for (; e + 16 <= d; e += 16) {
        const __m512 qv = _mm512_loadu_ps(q + e);
        UNROLL for (int t = 0; t < 16; t++) acc[t] =
            _mm512_fmadd_ps(_mm512_loadu_ps(kf + (size_t)t * d + e), qv, acc[t]);
    }
    if (e < d) {
        const __mmask16 m = (__mmask16)((1u << (d - e)) - 1);
        const __m512 qv = _mm512_maskz_loadu_ps(m, q + e);
        UNROLL for (int t = 0; t < 16; t++) acc[t] =
            _mm512_mask3_fmadd_ps(_mm512_maskz_loadu_ps(m, kf + (size_t)t * d + e), qv, acc[t], m);
    }
    return _mm512_mul_ps(fold16x16(acc), _mm512_set1_ps(scale));
}

/* Lane of position t after fold16x16, and its inverse as a permutation. */
#define LANE_OF(t) (4 * ((t) % 4) + (t) / 4)

/* Q queries' values [e, e + 64) (o, dv apart) over positions [lo, hi) of
 * vf: o = o * al (al 1: left) then one fused multiply-add per position in
 * order; the Q queries' 4Q chains side by side, each value's V loaded
 * once for all of them. */
AI void pv_block(int Q, int dv, int e, float (*pt)[TILE], const float *al, const float *vf, int lo,
                 int hi, float *o)
{
    __m512 acc[4][4];
    UNROLL for (int b = 0; b < Q; b++) UNROLL for (int j = 0; j < 4; j++)
    {
        acc[b][j] = _mm512_loadu_ps(o + (size_t)b * dv + e + 16 * j);
        if (al[b] != 1.0f)
            acc[b][j] = _mm512_mul_ps(acc[b][j], _mm512_set1_ps(al[b]));
    }
    for (int t = lo; t < hi; t++) {
        const float *vr = vf + (size_t)t * dv + e;
        __m512 vv[4];
        UNROLL for (int j = 0; j < 4; j++) vv[j] = _mm512_loadu_ps(vr + 16 * j);
        UNROLL for (int b = 0; b < Q; b++)
        {
            const __m512 pb = _mm512_set1_ps(pt[b][t]);
            UNROLL for (int j = 0; j < 4; j++) acc[b][j] = _mm512_fmadd_ps(pb, vv[j], acc[b][j]);
        }
    }
    UNROLL for (int b = 0; b < Q; b++) UNROLL for (int j = 0; j < 4; j++)
        _mm512_storeu_ps(o + (size_t)b * dv + e + 16 * j, acc[b][j]);
}

/* One query's values [e, min(e + 64, dv)), as pv_block does them. */
AI void pv_part(int dv, int e, const float *pt, float al, const float *vf, int lo, int hi, float *o)
{
    __mmask16 mk[4];
    __m512 acc[4];
    UNROLL for (int j = 0; j < 4; j++)
    {
        int left = dv - e - 16 * j;
        mk[j] = left >= 16 ? (__mmask16)0xffff : left <= 0 ? 0 : (__mmask16)((1u << left) - 1);
        acc[j] = _mm512_maskz_loadu_ps(mk[j], o + e + 16 * j);
        if (al != 1.0f)
            acc[j] = _mm512_mul_ps(acc[j], _mm512_set1_ps(al));
    }
    for (int t = lo; t < hi; t++) {
        const __m512 pb = _mm512_set1_ps(pt[t]);
        const float *vr = vf + (size_t)t * dv + e;
        UNROLL for (int j = 0; j < 4; j++) acc[j] =
            _mm512_fmadd_ps(pb, _mm512_maskz_loadu_ps(mk[j], vr + 16 * j), acc[j]);
    }
    UNROLL for (int j = 0; j < 4; j++) _mm512_mask_storeu_ps(o + e + 16 * j, mk[j], acc[j]);
}

/* scores() with the sixteen rows read in place from the cache (F16; a
 * zero row where the query takes no position): the same products and
 * folds, each row converted as it is used. */
AI __m512 scores_at(int d, const float *q, const uint16_t *const *r, float scale)
{
    __m512 acc[16];
    UNROLL for (int t = 0; t < 16; t++) acc[t] = _mm512_setzero_ps();
    for (int e = 0; e < d; e += 16) {
        const __m512 qv = _mm512_loadu_ps(q + e);
        UNROLL for (int t = 0; t < 16; t++) acc[t] = _mm512_fmadd_ps(
            _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(r[t] + e))), qv, acc[t]);
    }
    return _mm512_mul_ps(fold16x16(acc), _mm512_set1_ps(scale));
}

/* pv_part with the values read in place (F16, dv % 16 == 0): the same
 * fused multiply-adds in the same order. */
AI void pv_part_at(int dv, int e, const float *pt, float al, const void *const *v, int lo, int hi,
                   float *o)
{
    const int nj = dv - e >= 64 ? 4 : (dv - e) / 16;
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(),
                     _mm512_setzero_ps()};
    UNROLL for (int j = 0; j < 4; j++) if (j < nj)
    {
        acc[j] = _mm512_loadu_ps(o + e + 16 * j);
        if (al != 1.0f)
            acc[j] = _mm512_mul_ps(acc[j], _mm512_set1_ps(al));
    }
    for (int t = lo; t < hi; t++) {
        const __m512 pb = _mm512_set1_ps(pt[t]);
        const uint16_t *vr = (const uint16_t *)v[t] + e;
        UNROLL for (int j = 0; j < 4; j++) if (j < nj) acc[j] = _mm512_fmadd_ps(
            pb, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(vr + 16 * j))), acc[j]);
    }
    UNROLL for (int j = 0; j < 4; j++) if (j < nj) _mm512_storeu_ps(o + e + 16 * j, acc[j]);
}

/* Eight queries i .. i + 7 that take the same positions [lo, hi) (a
 * decode's KV group, or a prompt row's): each cached key is loaded once
 * for all eight, two positions at a time, so the sixteen dot16
 * accumulators of fold16x16 are (query j, position 2p + u), each placed
 * where the fold leaves it in lane 2j + u (LANE_OF is its own inverse);
 * the exponentials go sixteen of those at a time, the 64 lanes of a
 * query's p fold as pairs of positions and then within a pair, and the
 * values go 32 at a time for all eight (sixteen chains). The arithmetic
 * per query is the reference's, as in the one-query path. With conv the
 * rows come from kf and vf (converted once for a call's many queries),
 * else from the cache itself (a decode: each row is used by these eight
 * alone, so converting it into a buffer first only added stores). ask:
 * this call's asks for the next tile are made here. */
AI void group8(const struct ifl_attn_tile *a, int i, const int d, const int dv, int lo, int hi,
               const int conv, const float *kf, const float *vf, int ask)
{
    const size_t kb = (size_t)d * 2;
    const size_t vb = (size_t)dv * 2;
    const int p0 = lo / 2, p1 = (hi + 1) / 2; /* the pairs scored: 2 p0 .. 2 p1 - 1 */
    _Alignas(64) float sc[TILE / 2][16];
    const float *q = a->q + (size_t)i * d;
    const __m512 scale = _mm512_set1_ps(a->scale);
    __m512 mv = _mm512_set1_ps(-INFINITY);
    if (ask)
        ifl_attn_tile_ask(a, 0, 2 * p0, kb, vb);
    if (!conv) {
        /* F16 read in place: element e of a key is in lane e % 16 of its
         * dot16, so chunk c of eight elements (8c .. 8c + 7) feeds lanes
         * 8 (c % 2) + 0 .. 7 of it. Accumulator s holds lanes 0..7 (lo,
         * even chunks) or 8..15 (hi, odd chunks) of two scores side by
         * side: then stage h = 8 of the fold is lo + hi. Its two scores
         * are those fold8x16 leaves in lanes L0 = LANE_OF(2s) and L1 =
         * LANE_OF(2s + 1), which are (query L / 2, position t + L % 2):
         * the same position for both (L0 % 2 == L1 % 2), so a chunk of
         * the key is that position's eight values twice, and the query
         * pair qp[s % 2 + 2 (s / 4)][c] is chunk c of queries L0 / 2 and
         * L1 / 2. */
        _Alignas(64) float qp[4][TILE_DMAX / 8][16];
        UNROLL for (int g = 0; g < 4; g++)
        {
            const int s0 = g % 2 + 4 * (g / 2), j0 = LANE_OF(2 * s0) / 2,
                      j1 = LANE_OF(2 * s0 + 1) / 2;
            for (int c = 0; c < d / 8; c++) {
                const __m256 a0 = _mm256_loadu_ps(q + (size_t)j0 * d + 8 * c);
                const __m256 a1 = _mm256_loadu_ps(q + (size_t)j1 * d + 8 * c);
                _mm512_store_ps(qp[g][c], _mm512_insertf32x8(_mm512_castps256_ps512(a0), a1, 1));
            }
        }
        for (int p = p0; p < p1; p++) {
            const int t = 2 * p, ok0 = t >= lo, ok1 = t + 1 < hi; /* t < hi always */
            if (ask)
                ifl_attn_tile_ask(a, t, t + 2, kb, vb);
            const uint16_t *r[2] = {ok0 ? a->k[t] : zero_row, ok1 ? a->k[t + 1] : zero_row};
            __m512 lo8[8], hi8[8];
            UNROLL for (int x = 0; x < 8; x++) lo8[x] = hi8[x] = _mm512_setzero_ps();
            for (int c = 0; c < d / 8; c += 2) {
                __m512 kl[2], kh[2];
                UNROLL for (int u = 0; u < 2; u++)
                {
                    kl[u] = _mm512_cvtph_ps(_mm256_broadcastsi128_si256(
                        _mm_loadu_si128((const __m128i *)(r[u] + 8 * c))));
                    kh[u] = _mm512_cvtph_ps(_mm256_broadcastsi128_si256(
                        _mm_loadu_si128((const __m128i *)(r[u] + 8 * c + 8))));
                }
                UNROLL for (int x = 0; x < 8; x++)
                {
                    const int u = LANE_OF(2 * x) % 2, g = x % 2 + 2 * (x / 4);
                    lo8[x] = _mm512_fmadd_ps(kl[u], _mm512_load_ps(qp[g][c]), lo8[x]);
                    hi8[x] = _mm512_fmadd_ps(kh[u], _mm512_load_ps(qp[g][c + 1]), hi8[x]);
                }
            }
            UNROLL for (int x = 0; x < 8; x++) lo8[x] = _mm512_add_ps(lo8[x], hi8[x]);
            __m512 sv = _mm512_mul_ps(fold8x16(lo8), scale);
            if (a->softcap > 0)
                sv = softcap16(sv, a->softcap);
            const __mmask16 take = (__mmask16)((ok0 ? 0x5555 : 0) | (ok1 ? 0xaaaa : 0));
            mv = _mm512_mask_max_ps(mv, take, mv, sv);
            _mm512_store_ps(sc[p], sv);
        }
    } else {
        for (int p = p0; p < p1; p++) {
            const int t = 2 * p, ok0 = t >= lo, ok1 = t + 1 < hi; /* t < hi always */
            if (ask)
                ifl_attn_tile_ask(a, t, t + 2, kb, vb);
            const void *r0 = ok0 ? a->k[t] : zero_row, *r1 = ok1 ? a->k[t + 1] : zero_row;
            const float *f0 = kf + (size_t)t * d, *f1 = kf + (size_t)(t + 1) * d;
            __m512 c[16];
            UNROLL for (int x = 0; x < 16; x++) c[x] = _mm512_setzero_ps();
            for (int e = 0; e < d; e += 16) {
                const __m512 k0 =
                    conv ? (ok0 ? _mm512_loadu_ps(f0 + e) : _mm512_setzero_ps()) : ld16(0, r0, e);
                const __m512 k1 =
                    conv ? (ok1 ? _mm512_loadu_ps(f1 + e) : _mm512_setzero_ps()) : ld16(0, r1, e);
                UNROLL for (int j = 0; j < 8; j++)
                {
                    const __m512 qv = _mm512_loadu_ps(q + (size_t)j * d + e);
                    c[LANE_OF(2 * j)] = _mm512_fmadd_ps(k0, qv, c[LANE_OF(2 * j)]);
                    c[LANE_OF(2 * j + 1)] = _mm512_fmadd_ps(k1, qv, c[LANE_OF(2 * j + 1)]);
                }
            }
            __m512 sv = _mm512_mul_ps(fold16x16(c), scale);
            if (a->softcap > 0)
                sv = softcap16(sv, a->softcap);
            const __mmask16 take = (__mmask16)((ok0 ? 0x5555 : 0) | (ok1 ? 0xaaaa : 0));
            mv = _mm512_mask_max_ps(mv, take, mv, sv);
            _mm512_store_ps(sc[p], sv);
        }
    }
    if (ask)
        ifl_attn_tile_ask(a, 2 * p1, TILE, kb, vb);
    /* each query's largest: its two lanes */
    mv = _mm512_max_ps(mv, _mm512_permute_ps(mv, _MM_SHUFFLE(2, 3, 0, 1)));
    _Alignas(64) float mt[16], mq[16];
    _mm512_store_ps(mt, mv);
    float al[8];
    for (int j = 0; j < 8; j++) {
        al[j] = 1.0f; /* o unchanged: a multiply by 1 is exact */
        if (mt[2 * j] > a->m[i + j]) {
            al[j] = ifl_kernels_exp(a->m[i + j] - mt[2 * j]);
            a->l[i + j] *= al[j];
            a->m[i + j] = mt[2 * j];
        }
        mq[2 * j] = mq[2 * j + 1] = a->m[i + j];
    }
    const __m512 m = _mm512_load_ps(mq);
    for (int p = 0; p < TILE / 2; p++) {
        __m512 pv = _mm512_setzero_ps();
        if (p >= p0 && p < p1) {
            const int t = 2 * p;
            const __mmask16 take = (__mmask16)((t >= lo ? 0x5555 : 0) | (t + 1 < hi ? 0xaaaa : 0));
            pv = _mm512_maskz_mov_ps(take, texp16(_mm512_sub_ps(_mm512_load_ps(sc[p]), m)));
        }
        _mm512_store_ps(sc[p], pv);
    }
    /* the fold by t: h = 32 .. 2 add pairs of positions, h = 1 within one */
    __m512 f[16];
    UNROLL for (int p = 0; p < 16; p++) f[p] =
        _mm512_add_ps(_mm512_load_ps(sc[p]), _mm512_load_ps(sc[p + 16]));
    UNROLL for (int p = 0; p < 8; p++) f[p] = _mm512_add_ps(f[p], f[p + 8]);
    UNROLL for (int p = 0; p < 4; p++) f[p] = _mm512_add_ps(f[p], f[p + 4]);
    UNROLL for (int p = 0; p < 2; p++) f[p] = _mm512_add_ps(f[p], f[p + 2]);
    f[0] = _mm512_add_ps(f[0], f[1]);
    f[0] = _mm512_add_ps(f[0], _mm512_permute_ps(f[0], _MM_SHUFFLE(2, 3, 0, 1)));
    _mm512_store_ps(mt, f[0]);
    for (int j = 0; j < 8; j++)
        a->l[i + j] += mt[2 * j];
    float *o = a->o + (size_t)i * dv;
    for (int e = 0; e < dv; e += 32) {
        __m512 acc[8][2];
        UNROLL for (int j = 0; j < 8; j++) UNROLL for (int h = 0; h < 2; h++)
        {
            acc[j][h] = _mm512_loadu_ps(o + (size_t)j * dv + e + 16 * h);
            if (al[j] != 1.0f)
                acc[j][h] = _mm512_mul_ps(acc[j][h], _mm512_set1_ps(al[j]));
        }
        for (int t = lo; t < hi; t++) {
            const __m512 v0 = conv ? _mm512_loadu_ps(vf + (size_t)t * dv + e) : ld16(0, a->v[t], e);
            const __m512 v1 =
                conv ? _mm512_loadu_ps(vf + (size_t)t * dv + e + 16) : ld16(0, a->v[t], e + 16);
            const float *pp = &sc[t / 2][t % 2];
            UNROLL for (int j = 0; j < 8; j++)
            {
                const __m512 pb = _mm512_set1_ps(pp[2 * j]);
                acc[j][0] = _mm512_fmadd_ps(pb, v0, acc[j][0]);
                acc[j][1] = _mm512_fmadd_ps(pb, v1, acc[j][1]);
            }
        }
        UNROLL for (int j = 0; j < 8; j++) UNROLL for (int h = 0; h < 2; h++)
            _mm512_storeu_ps(o + (size_t)j * dv + e + 16 * h, acc[j][h]);
    }
}

/* ---- attn_tile_q8_0: integer scores ----------------------------------
 *
 * Sixteen positions in the lanes: a block's 32 key bytes of sixteen rows
 * are transposed in registers (kt[g] lane u: bytes 4g .. 4g + 3 of row
 * u's block), so one vpdpbusd with a query's four bytes broadcast adds
 * four products to sixteen positions' sums, and a score needs no
 * horizontal fold. vpdpbusd takes one operand unsigned: the keys' bytes
 * get 128 added (their sign bit flipped), and each query block's sum
 * starts at -128 times the sum of its bytes, so the lane ends at the
 * exact isum whatever the bytes (-128 too). */

/* A Q8_0 block's fields from a row: the F16 scale, then 32 int8. */
#define QB 34

/* Block b (at byte off) of sixteen rows r[u], transposed as above, the
 * key bytes + 128. */
AI void q8_keys16(const char *const *r, size_t off, __m512i *kt)
{
    __m512i x[8], w[2][4];
    UNROLL for (int k = 0; k < 4; k++)
    {
        x[k] = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(r[k] + off))),
            _mm256_loadu_si256((const __m256i *)(r[4 + k] + off)), 1);
        x[4 + k] = _mm512_inserti64x4(
            _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(r[8 + k] + off))),
            _mm256_loadu_si256((const __m256i *)(r[12 + k] + off)), 1);
    }
    /* in each 128-bit quarter, four rows' dwords transposed: w[h][g]
     * quarter c lane k is dword g (quarters 0, 2) or 4 + g (1, 3) of row
     * 8h + k (quarters 0, 1) or 8h + 4 + k (2, 3) */
    UNROLL for (int h = 0; h < 2; h++)
    {
        const __m512i *y = x + 4 * h;
        const __m512i a0 = _mm512_unpacklo_epi32(y[0], y[1]),
                      a1 = _mm512_unpackhi_epi32(y[0], y[1]);
        const __m512i a2 = _mm512_unpacklo_epi32(y[2], y[3]),
                      a3 = _mm512_unpackhi_epi32(y[2], y[3]);
        w[h][0] = _mm512_unpacklo_epi64(a0, a2);
        w[h][1] = _mm512_unpackhi_epi64(a0, a2);
        w[h][2] = _mm512_unpacklo_epi64(a1, a3);
        w[h][3] = _mm512_unpackhi_epi64(a1, a3);
    }
    const __m512i flip = _mm512_set1_epi8((char)0x80);
    UNROLL for (int g = 0; g < 4; g++)
    {
        kt[g] = _mm512_xor_si512(_mm512_shuffle_i32x4(w[0][g], w[1][g], 0x88), flip);
        kt[4 + g] = _mm512_xor_si512(_mm512_shuffle_i32x4(w[0][g], w[1][g], 0xdd), flip);
    }
}

AI int32_t ld32(const char *p)
{
    int32_t x;
    memcpy(&x, p, 4);
    return x;
}

/* Scores, times scale and capped, of queries [i0, i0 + n) (n <= 16)
 * over the sixteens of the tile that any of them takes, into sc[query -
 * i0][t]. ask: this call's asks for the next tile are made here. */
AI void q8_scores(const struct ifl_attn_tile *a, const int d, int i0, int n, float (*sc)[TILE],
                  int ask)
{
    const int nb = d / 32;
    const size_t kb = (size_t)nb * QB, vb = (size_t)a->dv / 32 * QB;
    int32_t corr[16][TILE_DMAX / 32];
    float dq[16][TILE_DMAX / 32];
    const char *qr[16];
    int t0 = TILE, t1 = 0;
    for (int j = 0; j < n; j++) {
        const int lo = a->lo[i0 + j], hi = a->hi[i0 + j];
        qr[j] = (const char *)a->q8 + (size_t)(i0 + j) * kb;
        if (lo >= hi)
            continue;
        t0 = lo < t0 ? lo : t0;
        t1 = hi > t1 ? hi : t1;
        for (int b = 0; b < nb; b++) {
            const char *blk = qr[j] + (size_t)b * QB;
            uint16_t dh;
            memcpy(&dh, blk, 2);
            dq[j][b] = _cvtsh_ss(dh);
            /* the sum of the 32 bytes, by those bytes + 128 */
            const __m256i u = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(blk + 2)),
                                               _mm256_set1_epi8((char)0x80));
            const __m256i s4 = _mm256_sad_epu8(u, _mm256_setzero_si256());
            __m128i s2 = _mm_add_epi64(_mm256_castsi256_si128(s4), _mm256_extracti128_si256(s4, 1));
            s2 = _mm_add_epi64(s2, _mm_unpackhi_epi64(s2, s2));
            corr[j][b] = -128 * (_mm_cvtsi128_si32(s2) - 32 * 128);
        }
    }
    if (t0 >= t1) {
        if (ask)
            ifl_attn_tile_ask(a, 0, TILE, kb, vb);
        return;
    }
    const int k0 = t0 / 16, k1 = (t1 + 15) / 16;
    if (ask)
        ifl_attn_tile_ask(a, 0, 16 * k0, kb, vb);
    const __m512 scale = _mm512_set1_ps(a->scale);
    for (int k = k0; k < k1; k++) {
        if (ask)
            ifl_attn_tile_ask(a, 16 * k, 16 * k + 16, kb, vb);
        const char *r[16];
        _Alignas(32) uint16_t dh[TILE_DMAX / 32][16];
        for (int u = 0; u < 16; u++) {
            const int t = 16 * k + u;
            r[u] = t >= t0 && t < t1 ? (const char *)a->k[t] : zero_row;
            for (int b = 0; b < nb; b++)
                memcpy(&dh[b][u], r[u] + (size_t)b * QB, 2);
        }
        __m512i kt[TILE_DMAX / 32][8];
        for (int b = 0; b < nb; b++)
            q8_keys16(r, (size_t)b * QB + 2, kt[b]);
        __m512 dk[TILE_DMAX / 32];
        for (int b = 0; b < nb; b++)
            dk[b] = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)dh[b]));
        for (int j = 0; j < n; j++) {
            const int lo = a->lo[i0 + j], hi = a->hi[i0 + j];
            if (lo >= hi || lo >= 16 * k + 16 || hi <= 16 * k)
                continue;
            __m512 c = _mm512_setzero_ps();
            for (int b = 0; b < nb; b++) {
                const char *q = qr[j] + (size_t)b * QB + 2;
                /* two chains (integer sums: exact in any order) */
                __m512i acc0 = _mm512_set1_epi32(corr[j][b]), acc1 = _mm512_setzero_si512();
                UNROLL for (int g = 0; g < 8; g += 2)
                {
                    acc0 = _mm512_dpbusd_epi32(acc0, kt[b][g], _mm512_set1_epi32(ld32(q + 4 * g)));
                    acc1 = _mm512_dpbusd_epi32(acc1, kt[b][g + 1],
                                               _mm512_set1_epi32(ld32(q + 4 * g + 4)));
                }
                const __m512i acc = _mm512_add_epi32(acc0, acc1);
                c = _mm512_fmadd_ps(_mm512_cvtepi32_ps(acc),
                                    _mm512_mul_ps(dk[b], _mm512_set1_ps(dq[j][b])), c);
            }
            __m512 sv = _mm512_mul_ps(c, scale);
            if (a->softcap > 0)
                sv = softcap16(sv, a->softcap);
            _mm512_store_ps(sc[j] + 16 * k, sv);
        }
    }
    if (ask)
        ifl_attn_tile_ask(a, 16 * k1, TILE, kb, vb);
}

/* Eight queries' values (o, dv apart) over positions [lo, hi): o = o *
 * al[j] (al 1: left), then per position one fused multiply-add a value,
 * each value's sixteen loaded once for the eight; from vf (conv) or the
 * cache in place. */
AI void pv8(const struct ifl_attn_tile *a, const int dv, float (*pt)[TILE], const float *al, int lo,
            int hi, int conv, const float *vf, float *o)
{
    for (int e = 0; e < dv; e += 32) {
        __m512 acc[8][2];
        UNROLL for (int j = 0; j < 8; j++) UNROLL for (int h = 0; h < 2; h++)
        {
            acc[j][h] = _mm512_loadu_ps(o + (size_t)j * dv + e + 16 * h);
            if (al[j] != 1.0f)
                acc[j][h] = _mm512_mul_ps(acc[j][h], _mm512_set1_ps(al[j]));
        }
        for (int t = lo; t < hi; t++) {
            __m512 v0, v1;
            if (conv) {
                v0 = _mm512_loadu_ps(vf + (size_t)t * dv + e);
                v1 = _mm512_loadu_ps(vf + (size_t)t * dv + e + 16);
            } else { /* the block's 32 values: its scale read once */
                const char *b = (const char *)a->v[t] + (size_t)(e / 32) * QB;
                uint16_t dh;
                memcpy(&dh, b, 2);
                const __m512 dv16 = _mm512_set1_ps(_cvtsh_ss(dh));
                const __m128i q0 = _mm_loadu_si128((const __m128i *)(b + 2));
                const __m128i q1 = _mm_loadu_si128((const __m128i *)(b + 18));
                v0 = _mm512_mul_ps(dv16, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q0)));
                v1 = _mm512_mul_ps(dv16, _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(q1)));
            }
            UNROLL for (int j = 0; j < 8; j++)
            {
                const __m512 pb = _mm512_set1_ps(pt[j][t]);
                acc[j][0] = _mm512_fmadd_ps(pb, v0, acc[j][0]);
                acc[j][1] = _mm512_fmadd_ps(pb, v1, acc[j][1]);
            }
        }
        UNROLL for (int j = 0; j < 8; j++) UNROLL for (int h = 0; h < 2; h++)
            _mm512_storeu_ps(o + (size_t)j * dv + e + 16 * h, acc[j][h]);
    }
}

/* The lanes of the sixteen positions 16k .. 16k + 15 that a query taking
 * [lo, hi) of the tile takes. */
AI __mmask16 take16(int lo, int hi, int k)
{
    int a0 = lo - 16 * k, a1 = hi - 16 * k;
    a0 = a0 < 0 ? 0 : a0 > 16 ? 16 : a0;
    a1 = a1 < 0 ? 0 : a1 > 16 ? 16 : a1;
    return (__mmask16)(((1u << a1) - 1) & ~((1u << a0) - 1));
}

/* The positions [*t0, *t1) of the tile that any query takes: the rows a
 * call's many queries convert once. 0 when no query takes any. */
AI int tile_span(const struct ifl_attn_tile *a, int *t0, int *t1)
{
    *t0 = TILE;
    *t1 = 0;
    for (int i = 0; i < a->nq; i++)
        if (a->lo[i] < a->hi[i]) {
            *t0 = a->lo[i] < *t0 ? a->lo[i] : *t0;
            *t1 = a->hi[i] > *t1 ? a->hi[i] : *t1;
        }
    return *t0 < *t1;
}

/* The Q8_0 tile: queries sixteen at a time, scored (q8_scores), their
 * softmax as the F16 path's one-query one, then the values: a decode's
 * eight of one range read the cache's values in place, other calls
 * convert the rows any query takes once (cvt_head) for all. */
AI void q8_tile(const struct ifl_attn_tile *a, const int d, const int dv)
{
    const size_t kb = (size_t)d / 32 * QB, vb = (size_t)dv / 32 * QB;
    int dec8 = a->nq == 8;
    for (int i = 1; i < 8 && dec8; i++)
        dec8 = a->lo[i] == a->lo[0] && a->hi[i] == a->hi[0];
    _Alignas(64) float vf[TILE * TILE_DMAX];
    if (!dec8) {
        int t0, t1;
        if (!tile_span(a, &t0, &t1)) {
            ifl_attn_tile_ask(a, 0, TILE, kb, vb);
            return;
        }
        ifl_attn_tile_ask(a, 0, t0, kb, vb);
        for (int t = t0; t < t1; t++) {
            ifl_attn_tile_ask(a, t, t + 1, kb, vb);
            cvt_head(1, a->v[t], dv, vf + (size_t)t * dv);
        }
        ifl_attn_tile_ask(a, t1, TILE, kb, vb);
    }
    for (int i0 = 0; i0 < a->nq; i0 += 16) {
        const int n = a->nq - i0 < 16 ? a->nq - i0 : 16;
        _Alignas(64) float sc[16][TILE], pt[16][TILE];
        float al[16];
        q8_scores(a, d, i0, n, sc, dec8);
        for (int j = 0; j < n; j++) {
            const int i = i0 + j, lo = a->lo[i], hi = a->hi[i];
            al[j] = 1.0f; /* o unchanged: a multiply by 1 is exact */
            if (lo >= hi)
                continue;
            const int k0 = lo / 16, k1 = (hi + 15) / 16;
            __mmask16 take[4];
            __m512 mv = _mm512_set1_ps(-INFINITY);
            for (int k = 0; k < 4; k++) {
                take[k] = take16(lo, hi, k);
                if (k >= k0 && k < k1)
                    mv = _mm512_mask_max_ps(mv, take[k], mv, _mm512_load_ps(sc[j] + 16 * k));
            }
            const float mt = _mm512_reduce_max_ps(mv);
            if (mt > a->m[i]) {
                al[j] = ifl_kernels_exp(a->m[i] - mt);
                a->l[i] *= al[j];
                a->m[i] = mt;
            }
            const __m512 m = _mm512_set1_ps(a->m[i]);
            __m512 p[4];
            UNROLL for (int k = 0; k < 4; k++)
            {
                p[k] = _mm512_setzero_ps();
                if (k >= k0 && k < k1)
                    p[k] = _mm512_maskz_mov_ps(
                        take[k], texp16(_mm512_sub_ps(_mm512_load_ps(sc[j] + 16 * k), m)));
                _mm512_store_ps(pt[j] + 16 * k, p[k]);
            }
            /* the 64 lanes' fold: h = 32, then 16, then within sixteen */
            a->l[i] += fold1(_mm512_add_ps(_mm512_add_ps(p[0], p[2]), _mm512_add_ps(p[1], p[3])));
        }
        for (int j = 0; j < n;) {
            const int i = i0 + j, lo = a->lo[i], hi = a->hi[i];
            int nr = 1; /* queries from j with this range */
            while (nr < 8 && j + nr < n && a->lo[i + nr] == lo && a->hi[i + nr] == hi)
                nr++;
            float *o = a->o + (size_t)i * dv;
            if (lo >= hi) {
            } else if (nr == 8) {
                if (dec8) /* (conv a literal in each: no test in the loop) */
                    pv8(a, dv, pt + j, al + j, lo, hi, 0, vf, o);
                else
                    pv8(a, dv, pt + j, al + j, lo, hi, 1, vf, o);
            } else {
                int e = 0, b = 0;
                if (nr >= 4)
                    for (; e + 64 <= dv; e += 64)
                        pv_block(4, dv, e, pt + j, al + j, vf, lo, hi, o);
                for (; b < 4 && nr >= 4; b++)
                    for (int x = e; x < dv; x += 64)
                        pv_part(dv, x, pt[j + b], al[j + b], vf, lo, hi, o + (size_t)b * dv);
                for (; b < nr; b++)
                    for (int x = 0; x < dv; x += 64)
                        pv_part(dv, x, pt[j + b], al[j + b], vf, lo, hi, o + (size_t)b * dv);
            }
            j += nr;
        }
    }
}

/* The tile with head widths d and dv (literals for the common ones, so
 * that the sixteen rows' addresses are offsets of one register). */
AI void attn_tile_d(const struct ifl_attn_tile *a, const int d, const int dv)
{
    _Alignas(64) float kf[TILE * TILE_DMAX];
    _Alignas(64) float vf[TILE * TILE_DMAX];
    const size_t kb = (size_t)d * 2;
    const size_t vb = (size_t)dv * 2;
    /* lane L of the folded scores holds position LANE_OF^-1(L); back to order */
    const __m512i order =
        _mm512_setr_epi32(LANE_OF(0), LANE_OF(1), LANE_OF(2), LANE_OF(3), LANE_OF(4), LANE_OF(5),
                          LANE_OF(6), LANE_OF(7), LANE_OF(8), LANE_OF(9), LANE_OF(10), LANE_OF(11),
                          LANE_OF(12), LANE_OF(13), LANE_OF(14), LANE_OF(15));
    const int g8ok = d % 16 == 0 && dv % 32 == 0;
    if (g8ok && a->nq == 8) { /* a decode's group, its rows read in place */
        int same = 1;
        for (int i = 1; i < 8; i++)
            same &= a->lo[i] == a->lo[0] && a->hi[i] == a->hi[0];
        if (same) {
            if (a->lo[0] < a->hi[0])
                group8(a, 0, d, dv, a->lo[0], a->hi[0], 0, kf, vf, 1);
            else
                ifl_attn_tile_ask(a, 0, TILE, kb, vb);
            return;
        }
    }
    int t0, t1;
    if (!tile_span(a, &t0, &t1)) {
        ifl_attn_tile_ask(a, 0, TILE, kb, vb);
        return;
    }
    /* A few queries (a decode's lone query of a model without grouped
     * heads, or a small group) read the rows in place: converting a row
     * costs less than storing it into a buffer and loading it back
     * (kbench ports), up to a few uses. Many queries (a prompt's) convert
     * each row once into kf and vf. */
    const int inplace = a->nq < 4 && d % 16 == 0 && dv % 16 == 0;
    ifl_attn_tile_ask(a, 0, t0, kb, vb);
    int asked = t0; /* in place: the next tile's rows asked for up to here */
    if (!inplace) {
        for (int t = t0; t < t1; t++) {
            ifl_attn_tile_ask(a, t, t + 1, kb, vb);
            cvt_head(0, a->k[t], d, kf + (size_t)t * d);
            cvt_head(0, a->v[t], dv, vf + (size_t)t * dv);
        }
        /* the rows of a scored sixteen that no query takes are scored too
         * (and masked): zeros, not whatever the stack held */
        const int z0 = t0 / 16 * 16, z1 = (t1 + 15) / 16 * 16;
        memset(kf + (size_t)z0 * d, 0, sizeof(float) * (size_t)(t0 - z0) * (size_t)d);
        memset(kf + (size_t)t1 * d, 0, sizeof(float) * (size_t)(z1 - t1) * (size_t)d);
    }
    if (!inplace)
        ifl_attn_tile_ask(a, t1, TILE, kb, vb);
    for (int i = 0; i < a->nq;) {
        const int lo = a->lo[i], hi = a->hi[i];
        /* up to four queries with this range (a row's group shares it) */
        int nb = 1;
        while (nb < 4 && i + nb < a->nq && a->lo[i + nb] == lo && a->hi[i + nb] == hi)
            nb++;
        if (lo >= hi) {
            i += nb;
            continue;
        }
        if (nb == 4 && g8ok && i + 8 <= a->nq) { /* eight with this range? */
            int same = 1;
            for (int b = 4; b < 8; b++)
                same &= a->lo[i + b] == lo && a->hi[i + b] == hi;
            if (same) {
                group8(a, i, d, dv, lo, hi, 1, kf, vf, 0);
                i += 8;
                continue;
            }
        }
        const int k0 = lo / 16, k1 = (hi + 15) / 16; /* the sixteens scored */
        __mmask16 take[4];
        for (int k = 0; k < 4; k++)
            take[k] = take16(lo, hi, k);
        _Alignas(64) float pt[4][TILE];
        float al[4];
        for (int b = 0; b < nb; b++) {
            const float *q = a->q + (size_t)(i + b) * d;
            __m512 s[4], mv = _mm512_set1_ps(-INFINITY);
            for (int k = k0; k < k1; k++) {
                __m512 sk;
                if (inplace) {
                    /* the next tile's rows asked for a sixteen at a time,
                     * spread over the scoring */
                    if (asked < 16 * k + 16 && asked < t1) {
                        const int to = 16 * k + 16 < t1 ? 16 * k + 16 : t1;
                        ifl_attn_tile_ask(a, asked, to, kb, vb);
                        asked = to;
                    }
                    const uint16_t *r[16];
                    for (int t = 0; t < 16; t++) {
                        const int p = 16 * k + t;
                        r[t] = p >= lo && p < hi ? a->k[p] : (const uint16_t *)zero_row;
                    }
                    sk = scores_at(d, q, r, a->scale);
                } else {
                    sk = scores(d, q, kf + (size_t)16 * k * d, a->scale);
                }
                s[k] = _mm512_permutexvar_ps(order, sk);
                if (a->softcap > 0)
                    s[k] = softcap16(s[k], a->softcap);
                mv = _mm512_mask_max_ps(mv, take[k], mv, s[k]);
            }
            const float mt = _mm512_reduce_max_ps(mv);
            al[b] = 1.0f; /* o unchanged: a multiply by 1 is exact */
            if (mt > a->m[i + b]) {
                al[b] = ifl_kernels_exp(a->m[i + b] - mt);
                a->l[i + b] *= al[b];
                a->m[i + b] = mt;
            }
            const __m512 m = _mm512_set1_ps(a->m[i + b]);
            __m512 p[4];
            UNROLL for (int k = 0; k < 4; k++)
            {
                p[k] = _mm512_setzero_ps();
                if (k >= k0 && k < k1)
                    p[k] = _mm512_maskz_mov_ps(take[k], texp16(_mm512_sub_ps(s[k], m)));
                _mm512_store_ps(pt[b] + 16 * k, p[k]);
            }
            /* the 64 lanes' fold: h = 32, then 16, then within sixteen */
            a->l[i + b] +=
                fold1(_mm512_add_ps(_mm512_add_ps(p[0], p[2]), _mm512_add_ps(p[1], p[3])));
        }
        float *o = a->o + (size_t)i * dv;
        int e = 0;
        if (inplace) {
            if (i + nb >= a->nq) /* the last: what no query's scoring asked for */
                ifl_attn_tile_ask(a, asked, TILE, kb, vb);
            for (; e < dv; e += 64)
                for (int b = 0; b < nb; b++)
                    pv_part_at(dv, e, pt[b], al[b], a->v, lo, hi, o + (size_t)b * dv);
            i += nb;
            continue;
        }
        if (nb == 4)
            for (; e + 64 <= dv; e += 64)
                pv_block(4, dv, e, pt, al, vf, lo, hi, o);
        for (; e < dv; e += 64)
            for (int b = 0; b < nb; b++)
                pv_part(dv, e, pt[b], al[b], vf, lo, hi, o + (size_t)b * dv);
        i += nb;
    }
}

AI void attn_tile(const struct ifl_attn_tile *a, int q8)
{
    if (q8) {
        if (a->d == 64 && a->dv == 64)
            q8_tile(a, 64, 64);
        else if (a->d == 128 && a->dv == 128)
            q8_tile(a, 128, 128);
        else
            q8_tile(a, a->d, a->dv);
        return;
    }
    if (a->d == 64 && a->dv == 64)
        attn_tile_d(a, 64, 64);
    else if (a->d == 128 && a->dv == 128)
        attn_tile_d(a, 128, 128);
    else
        attn_tile_d(a, a->d, a->dv);
}

static void z_attn_tile_f16(const struct ifl_attn_tile *a)
{
    attn_tile(a, 0);
}

static void z_attn_tile_q8_0(const struct ifl_attn_tile *a)
{
    attn_tile(a, 1);
}

void ifl_kernels_fill_avx512_attn_tile(struct ifl_kernels *k)
{
    k->attn_tile_f16 = z_attn_tile_f16;
    k->attn_tile_q8_0 = z_attn_tile_q8_0;
}
