/*
 * attn_tile_f16 and attn_tile_q8_0 of ref_attn.c for the AVX2 table, bit
 * for bit (struct ifl_attn_tile in kernels.h names the operations).
 *
 * As in x86_avx512_attn_tile.c, the tile's rows are converted to floats
 * once for all queries, but for a call of up to three queries over an F16
 * cache, which reads them in place. A dot16's sixteen lanes are two eight-lane
 * accumulators (elements e % 16 < 8, then the rest), four positions at a
 * time; each is folded on its own in the reference's order (the halves
 * added lane by lane, then 128-bit halves, then pairs, then the last
 * two). The exponentials are ifl_kernels_exp's operations in eight lanes;
 * the 64 lanes of a tile's p are eight vectors, folded as ref folds.
 */
#include <immintrin.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/impl.h"

#define AI static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 16")
#define TILE_DMAX 256 /* d and dv at most (model/attention_tiled.c checks) */
#define TILE 64       /* positions a tile at most */

/* ifl_kernels_exp in eight lanes, each operation rounded on its own. */
AI __m256 texp8(__m256 x)
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

/* fold16 of ref_attn.c over the sixteen lanes lo (0..7) and hi (8..15). */
AI float fold2x8(__m256 lo, __m256 hi)
{
    __m256 a = _mm256_add_ps(lo, hi);
    __m128 b = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    b = _mm_add_ps(b, _mm_movehl_ps(b, b));
    b = _mm_add_ss(b, _mm_movehdup_ps(b));
    return _mm_cvtss_f32(b);
}

/* Lanes 0 .. m-1 set. */
AI __m256i lanes_lt8(int m)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(m), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* n values of a cached head as floats into out. */
AI void cvt_head(int q8, const void *row, int n, float *out)
{
    if (!q8) {
        const uint16_t *h = row;
        int e = 0;
        for (; e + 8 <= n; e += 8)
            _mm256_storeu_ps(out + e, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(h + e))));
        for (; e < n; e++) {
            __m128i one = _mm_cvtsi32_si128(h[e]);
            out[e] = _mm_cvtss_f32(_mm_cvtph_ps(one));
        }
        return;
    }
    const char *b = row;
    for (int e = 0; e < n; e += 32, b += 34) {
        uint16_t dh;
        memcpy(&dh, b, 2);
        const __m256 d = _mm256_cvtph_ps(_mm_cvtsi32_si128(dh));
        const __m256 dd = _mm256_permutevar8x32_ps(d, _mm256_setzero_si256());
        UNROLL for (int k = 0; k < 4; k++)
        {
            __m128i q = _mm_loadl_epi64((const __m128i *)(b + 2 + 8 * k));
            _mm256_storeu_ps(out + e + 8 * k,
                             _mm256_mul_ps(dd, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q))));
        }
    }
}

/* Scores of one query against rows t .. t + 3 of kf (d floats each). */
AI void scores4(int d, const float *q, const float *kf, int t, float scale, float *s)
{
    __m256 lo[4], hi[4];
    UNROLL for (int u = 0; u < 4; u++) lo[u] = hi[u] = _mm256_setzero_ps();
    int e = 0;
    for (; e + 16 <= d; e += 16) {
        const __m256 q0 = _mm256_loadu_ps(q + e), q1 = _mm256_loadu_ps(q + e + 8);
        UNROLL for (int u = 0; u < 4; u++)
        {
            const float *kr = kf + (size_t)(t + u) * d + e;
            lo[u] = _mm256_fmadd_ps(_mm256_loadu_ps(kr), q0, lo[u]);
            hi[u] = _mm256_fmadd_ps(_mm256_loadu_ps(kr + 8), q1, hi[u]);
        }
    }
    if (e < d) {
        const int left = d - e;
        const __m256i m0 = lanes_lt8(left), m1 = lanes_lt8(left - 8);
        const __m256 q0 = _mm256_maskload_ps(q + e, m0), q1 = _mm256_maskload_ps(q + e + 8, m1);
        UNROLL for (int u = 0; u < 4; u++)
        {
            const float *kr = kf + (size_t)(t + u) * d + e;
            __m256 a0 = _mm256_fmadd_ps(_mm256_maskload_ps(kr, m0), q0, lo[u]);
            __m256 a1 = _mm256_fmadd_ps(_mm256_maskload_ps(kr + 8, m1), q1, hi[u]);
            lo[u] = _mm256_blendv_ps(lo[u], a0, _mm256_castsi256_ps(m0));
            hi[u] = _mm256_blendv_ps(hi[u], a1, _mm256_castsi256_ps(m1));
        }
    }
    UNROLL for (int u = 0; u < 4; u++) s[u] = fold2x8(lo[u], hi[u]) * scale;
}

/* scores4 with the four rows read in place from the cache (F16, d % 16
 * == 0): the same products in the same order, each row converted as it
 * is used. */
AI void scores4_at(int d, const float *q, const uint16_t *const *r, float scale, float *s)
{
    __m256 lo[4], hi[4];
    UNROLL for (int u = 0; u < 4; u++) lo[u] = hi[u] = _mm256_setzero_ps();
    for (int e = 0; e < d; e += 16) {
        const __m256 q0 = _mm256_loadu_ps(q + e), q1 = _mm256_loadu_ps(q + e + 8);
        UNROLL for (int u = 0; u < 4; u++)
        {
            const __m128i *kr = (const __m128i *)(r[u] + e);
            lo[u] = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(kr)), q0, lo[u]);
            hi[u] = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm_loadu_si128(kr + 1)), q1, hi[u]);
        }
    }
    UNROLL for (int u = 0; u < 4; u++) s[u] = fold2x8(lo[u], hi[u]) * scale;
}

/* Values e .. e + 31 of one query's output: o times *al (when not NULL),
 * then plus pt[t] times row t's values for t in [lo, hi), one fused
 * multiply-add each in order; the rows from vf, or (inplace, F16) from
 * the cache, each converted as it is used. Callers pass inplace as a
 * constant. */
AI void pv32(int inplace, const struct ifl_attn_tile *a, const float *vf, int dv, int e,
             const float *pt, int lo, int hi, const __m256 *al, float *o)
{
    __m256 acc[4];
    UNROLL for (int j = 0; j < 4; j++)
    {
        acc[j] = _mm256_loadu_ps(o + e + 8 * j);
        if (al)
            acc[j] = _mm256_mul_ps(acc[j], *al);
    }
    for (int t = lo; t < hi; t++) {
        const __m256 pb = _mm256_set1_ps(pt[t]);
        UNROLL for (int j = 0; j < 4; j++)
        {
            const __m256 v = inplace ? _mm256_cvtph_ps(_mm_loadu_si128((
                                           const __m128i *)((const uint16_t *)a->v[t] + e + 8 * j)))
                                     : _mm256_loadu_ps(vf + (size_t)t * dv + e + 8 * j);
            acc[j] = _mm256_fmadd_ps(pb, v, acc[j]);
        }
    }
    UNROLL for (int j = 0; j < 4; j++) _mm256_storeu_ps(o + e + 8 * j, acc[j]);
}

/* scores4_at's rows past a query's range: scored, then dropped */
static const _Alignas(32) uint16_t zero_row[TILE_DMAX];

/* ---- attn_tile_q8_0's integer scores --------------------------------
 *
 * Eight queries at a time, position by position: a block's 32 key bytes
 * are loaded once for the eight, and each query's dot of it is vpmaddubsw
 * of |k| (unsigned, 0..128) by the query's bytes with k's sign moved onto
 * them (vpsignb), pairs of products summed in 16 bits (at most 2 x 128 x
 * 127: no saturation, the queries' bytes being within -127..127, which
 * quant_q8_0 gives for finite values; a key byte of -128, which the
 * SIMD quantisers write for a NaN, is exact too, |k| read unsigned; a
 * query byte of -128, from a NaN query only, would have its sign lost),
 * then vpmaddwd by ones to 32 bits.
 * The eight queries' sums fold together (integer additions, exact in any
 * order) into one vector, lane j query j's isum, which goes into their
 * eight scores as kernels.h's fused multiply-add. */

#define QB 34 /* bytes of a Q8_0 block: the F16 scale, then 32 int8 */

/* The F16 at p as a float (exact). */
AI float ld_f16(const char *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

/* The eight int32 lanes of each v[j] summed, lane j. */
AI __m256i hsum8x8(const __m256i *v)
{
    const __m256i h01 = _mm256_hadd_epi32(v[0], v[1]), h23 = _mm256_hadd_epi32(v[2], v[3]);
    const __m256i h45 = _mm256_hadd_epi32(v[4], v[5]), h67 = _mm256_hadd_epi32(v[6], v[7]);
    const __m256i a = _mm256_hadd_epi32(h01, h23), b = _mm256_hadd_epi32(h45, h67);
    return _mm256_add_epi32(_mm256_permute2x128_si256(a, b, 0x20),
                            _mm256_permute2x128_si256(a, b, 0x31));
}

/* Scores (times scale, not capped) of queries [i0, i0 + n), n <= 8, at
 * positions [t0, t1): sc[t][j] for query i0 + j (the others' lanes 0). */
AI void q8_scores8(const struct ifl_attn_tile *a, int i0, int n, int t0, int t1, float (*sc)[8])
{
    const int nb = a->d / 32;
    const size_t qrow = (size_t)nb * QB;
    const char *qr[8];
    float dq[TILE_DMAX / 32][8] = {{0}};
    for (int j = 0; j < 8; j++) {
        qr[j] = j < n ? (const char *)a->q8 + (size_t)(i0 + j) * qrow : NULL;
        for (int b = 0; b < nb && j < n; b++)
            dq[b][j] = ld_f16(qr[j] + (size_t)b * QB);
    }
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256 scale = _mm256_set1_ps(a->scale);
    for (int t = t0; t < t1; t++) {
        const char *kr = a->k[t];
        __m256 c = _mm256_setzero_ps();
        for (int b = 0; b < nb; b++) {
            const __m256i k = _mm256_loadu_si256((const __m256i *)(kr + (size_t)b * QB + 2));
            const __m256i ak = _mm256_abs_epi8(k);
            __m256i v[8];
            UNROLL for (int j = 0; j < 8; j++)
            {
                const __m256i q =
                    j < n ? _mm256_loadu_si256((const __m256i *)(qr[j] + (size_t)b * QB + 2))
                          : _mm256_setzero_si256();
                v[j] = _mm256_madd_epi16(_mm256_maddubs_epi16(ak, _mm256_sign_epi8(q, k)), ones);
            }
            const __m256 dkq =
                _mm256_mul_ps(_mm256_set1_ps(ld_f16(kr + (size_t)b * QB)), _mm256_loadu_ps(dq[b]));
            c = _mm256_fmadd_ps(_mm256_cvtepi32_ps(hsum8x8(v)), dkq, c);
        }
        _mm256_storeu_ps(sc[t], _mm256_mul_ps(c, scale));
    }
}

AI void attn_tile(const struct ifl_attn_tile *a, int q8)
{
    float kf[(TILE + 3) * TILE_DMAX], vf[TILE * TILE_DMAX];
    const int d = a->d, dv = a->dv;
    int t0 = TILE, t1 = 0;
    for (int i = 0; i < a->nq; i++)
        if (a->lo[i] < a->hi[i]) {
            t0 = a->lo[i] < t0 ? a->lo[i] : t0;
            t1 = a->hi[i] > t1 ? a->hi[i] : t1;
        }
    const size_t kb = q8 ? (size_t)d / 32 * 34 : (size_t)d * 2;
    const size_t vb = q8 ? (size_t)dv / 32 * 34 : (size_t)dv * 2;
    if (t0 >= t1) {
        ifl_attn_tile_ask(a, 0, TILE, kb, vb);
        return;
    }
    /* A few queries over an F16 cache (a decode's lone query of a model
     * without grouped heads, or a small group) read the rows in place:
     * converting a row as it is used costs less than storing it into kf
     * or vf and loading it back, up to a few uses (as in
     * x86_avx512_attn_tile.c). Many queries (a KV group's, a prompt's)
     * convert each row once. */
    const int inplace = !q8 && a->nq < 4 && d % 16 == 0 && dv % 32 == 0;
    int asked = t0; /* in place: the next tile's rows asked for up to here */
    ifl_attn_tile_ask(a, 0, t0, kb, vb);
    if (!inplace) {
        for (int t = t0; t < t1; t++) {
            ifl_attn_tile_ask(a, t, t + 1, kb, vb);
            if (!q8)
                cvt_head(0, a->k[t], d, kf + (size_t)t * d);
            cvt_head(q8, a->v[t], dv, vf + (size_t)t * dv);
        }
        ifl_attn_tile_ask(a, t1, TILE, kb, vb);
        /* scores4 reads up to three rows past t1 (their scores are dropped) */
        if (!q8)
            memset(kf + (size_t)t1 * d, 0, sizeof(float) * 3 * (size_t)d);
    }
    float sq[TILE][8]; /* a Q8_0 cache's scores of eight queries */
    for (int i = 0; i < a->nq; i++) {
        const int lo = a->lo[i], hi = a->hi[i];
        if (q8 && i % 8 == 0) { /* the next eight queries' scores, over their range */
            const int n = a->nq - i < 8 ? a->nq - i : 8;
            int u0 = TILE, u1 = 0;
            for (int j = i; j < i + n; j++)
                if (a->lo[j] < a->hi[j]) {
                    u0 = a->lo[j] < u0 ? a->lo[j] : u0;
                    u1 = a->hi[j] > u1 ? a->hi[j] : u1;
                }
            q8_scores8(a, i, n, u0, u1, sq);
        }
        if (lo >= hi)
            continue;
        float s[TILE + 4] = {0}, pt[TILE] = {0};
        if (q8)
            for (int t = lo; t < hi; t++)
                s[t] = sq[t][i % 8];
        else if (inplace)
            for (int t = lo; t < hi; t += 4) {
                if (asked < t + 4 && asked < t1) { /* the next tile's, spread */
                    const int to = t + 4 < t1 ? t + 4 : t1;
                    ifl_attn_tile_ask(a, asked, to, kb, vb);
                    asked = to;
                }
                const uint16_t *r[4];
                for (int u = 0; u < 4; u++)
                    r[u] = t + u < hi ? (const uint16_t *)a->k[t + u] : zero_row;
                scores4_at(d, a->q + (size_t)i * d, r, a->scale, s + t);
            }
        else
            for (int t = lo; t < hi; t += 4)
                scores4(d, a->q + (size_t)i * d, kf, t, a->scale, s + t);
        if (a->softcap > 0) /* gemma2's: ref's scalar operations */
            for (int t = lo; t < hi; t++)
                s[t] = a->softcap * ifl_kernels_tanh(s[t] * (1.0f / a->softcap));
        float mt = -INFINITY;
        for (int t = lo; t < hi; t++)
            mt = s[t] > mt ? s[t] : mt;
        float *o = a->o + (size_t)i * dv;
        const int rescale = mt > a->m[i];
        float al = 1.0f;
        if (rescale) {
            al = ifl_kernels_exp(a->m[i] - mt);
            a->l[i] *= al;
            a->m[i] = mt;
        }
        const __m256 mv = _mm256_set1_ps(a->m[i]);
        __m256 p[8];
        UNROLL for (int j = 0; j < 8; j++)
        {
            const __m256i take = _mm256_andnot_si256(lanes_lt8(lo - 8 * j), lanes_lt8(hi - 8 * j));
            p[j] = _mm256_setzero_ps();
            if (8 * j + 8 > lo && 8 * j < hi)
                p[j] = _mm256_and_ps(texp8(_mm256_sub_ps(_mm256_loadu_ps(s + 8 * j), mv)),
                                     _mm256_castsi256_ps(take));
            _mm256_storeu_ps(pt + 8 * j, p[j]);
        }
        /* the 64 lanes' fold: h = 32, then 16, then fold2x8's sixteen */
        a->l[i] += fold2x8(_mm256_add_ps(_mm256_add_ps(p[0], p[4]), _mm256_add_ps(p[2], p[6])),
                           _mm256_add_ps(_mm256_add_ps(p[1], p[5]), _mm256_add_ps(p[3], p[7])));
        const __m256 alv = _mm256_set1_ps(al);
        int e = 0;
        if (inplace) {
            if (i == a->nq - 1) { /* the last query: what no scoring asked for */
                ifl_attn_tile_ask(a, asked, TILE, kb, vb);
                asked = TILE;
            }
            for (; e < dv; e += 32)
                pv32(1, a, vf, dv, e, pt, lo, hi, rescale ? &alv : NULL, o);
            continue;
        }
        for (; e + 32 <= dv; e += 32)
            pv32(0, a, vf, dv, e, pt, lo, hi, rescale ? &alv : NULL, o);
        for (; e < dv; e++) {
            float acc = rescale ? o[e] * al : o[e];
            for (int t = lo; t < hi; t++)
                acc = fmaf(pt[t], vf[(size_t)t * dv + e], acc);
            o[e] = acc;
        }
    }
    if (inplace) /* the last query took no position */
        ifl_attn_tile_ask(a, asked, TILE, kb, vb);
}

static void x_attn_tile_f16(const struct ifl_attn_tile *a)
{
    attn_tile(a, 0);
}

static void x_attn_tile_q8_0(const struct ifl_attn_tile *a)
{
    attn_tile(a, 1);
}

void ifl_kernels_fill_avx2_attn_tile(struct ifl_kernels *k)
{
    k->attn_tile_f16 = x_attn_tile_f16;
    k->attn_tile_q8_0 = x_attn_tile_q8_0;
}
