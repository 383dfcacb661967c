/*
 * Attention over a block of cached positions: scores (q . k) and the
 * weighted sum of values, for F16 and Q8_0 caches, in tiles of heads.
 *
 * A part of x86_simd.h, included only from there (in that order, after its
 * helpers): it relies on the includes, the AI macro and the helpers above
 * it, and on the ISA flags of the file that includes x86_simd.h.
 */

/* ---- attention over a block of cached positions ------------------- */

/* attn_qk_f16 / attn_qk_q8_0 and attn_pv_f16 / attn_pv_q8_0 of ref.c. A
 * call covers nt cached positions for the nq query heads of one KV group;
 * the kernels walk it in tiles of Q heads by T positions (scores) or Q
 * heads by J vectors of output (values), so each cached row is loaded and
 * converted once per tile and shared by its Q heads.
 *
 * Scores: each one is a single 8-lane FMA chain over the head, elements
 * 8k .. 8k + 7 into lane order and a zero-padded tail last, folded by
 * hsum_ps and then scaled; it equals ref within float reassociation.
 * Values: per position in ascending order, one fused multiply-add on each
 * output value (one rounding), which is ref's fmaf bit for bit. For Q8_0
 * the cached value is first formed as d * q (exact: 11 by 8 significant
 * bits), as q8_at does in ref.
 * In both directions the sequence of operations behind one output does
 * not depend on the tile it falls in, so nq and nt of a call never change
 * a result's bits. */

#define UNROLL8 _Pragma("GCC unroll 8")

/* Lanes 0 .. m-1 set, for maskload / maskstore. */
AI __m256i lanes_lt(int m)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32(m), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

/* The first m < 8 values of an F16 row, zero-padded; a copy, since the
 * eight-wide load could run past the cache's last row. */
AI __m256 ld_f16_part(const uint16_t *p, int m)
{
    uint16_t t[8] = {0};
    memcpy(t, p, (size_t)m * 2);
    return ld_f16x8(t);
}

/* Eight cached values from element e of a row (e % 8 == 0, e < d). kind 0:
 * the row is F16; kind 1: it is Q8_0 blocks and dq holds the scale of the
 * block that e falls in, so the values are d * q as dequant_q8_0 gives. */
AI __m256 ld_kv8(int kind, const char *row, int e, __m256 dq)
{
    if (kind == 0)
        return ld_f16x8((const uint16_t *)row + e);
    const char *blk = row + (size_t)(e / IFL_QK) * sizeof(struct ifl_block_q8_0);
    __m128i q = _mm_loadl_epi64((const __m128i *)(blk + 2 + e % IFL_QK));
    return _mm256_mul_ps(dq, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)));
}

/* Scale of the Q8_0 block holding element e, in every lane. */
AI __m256 ld_q8_scale(const char *row, int e)
{
    return _mm256_set1_ps(ld_f16(row + (size_t)(e / IFL_QK) * sizeof(struct ifl_block_q8_0)));
}

/* Scores of Q heads (q, d floats apart) against T cached rows (k, ks bytes
 * apart): Q * T independent FMA chains, which keeps both FMA ports busy.
 * Steps of 32 elements (one Q8_0 block), then single vectors, then the
 * partial vector (F16 only: Q8_0 heads are whole blocks). */
AI void qk_tile(int kind, int Q, int T, int d, const float *q, const char *k, size_t ks,
                float scale, float *s, size_t lds)
{
    __m256 acc[4][8];
    UNROLL8 for (int i = 0; i < Q; i++) UNROLL8 for (int t = 0; t < T; t++) acc[i][t] =
        _mm256_setzero_ps();
    int j = 0;
    for (; j + 32 <= d; j += 32) {
        __m256 dq[8];
        UNROLL8 for (int t = 0; t < T; t++) dq[t] =
            kind ? ld_q8_scale(k + (size_t)t * ks, j) : _mm256_setzero_ps();
        UNROLL8 for (int v = 0; v < 4; v++)
        {
            __m256 kv[8];
            UNROLL8 for (int t = 0; t < T; t++) kv[t] =
                ld_kv8(kind, k + (size_t)t * ks, j + 8 * v, dq[t]);
            UNROLL8 for (int i = 0; i < Q; i++)
            {
                __m256 qv = _mm256_loadu_ps(q + (size_t)i * d + j + 8 * v);
                UNROLL8 for (int t = 0; t < T; t++) acc[i][t] =
                    _mm256_fmadd_ps(kv[t], qv, acc[i][t]);
            }
        }
    }
    if (kind == 0) {
        for (; j + 8 <= d; j += 8) {
            __m256 kv[8];
            UNROLL8 for (int t = 0; t < T; t++) kv[t] =
                ld_kv8(0, k + (size_t)t * ks, j, _mm256_setzero_ps());
            UNROLL8 for (int i = 0; i < Q; i++)
            {
                __m256 qv = _mm256_loadu_ps(q + (size_t)i * d + j);
                UNROLL8 for (int t = 0; t < T; t++) acc[i][t] =
                    _mm256_fmadd_ps(kv[t], qv, acc[i][t]);
            }
        }
        if (j < d) {
            const int m = d - j;
            const __m256i mask = lanes_lt(m);
            __m256 kv[8];
            UNROLL8 for (int t = 0; t < T; t++) kv[t] =
                ld_f16_part((const uint16_t *)(k + (size_t)t * ks) + j, m);
            UNROLL8 for (int i = 0; i < Q; i++)
            {
                __m256 qv = _mm256_maskload_ps(q + (size_t)i * d + j, mask);
                UNROLL8 for (int t = 0; t < T; t++) acc[i][t] =
                    _mm256_fmadd_ps(kv[t], qv, acc[i][t]);
            }
        }
    }
    if (Q * T == 8) {
        /* the eight scores folded together, each in hsum_ps's order; the
         * accumulators go in by name (copied into an array first, they
         * went through the stack in a loop: one call of a tinyllama
         * decode, 8 heads by 16 positions in L1, took 1200 cycles, now
         * 880) */
        float r[8];
#define ACC(m) acc[((m) / T) & 3][(m) % T] /* (& 3: Q * T is 8) */
        const __m256 h = hsum8_ps(ACC(0), ACC(1), ACC(2), ACC(3), ACC(4), ACC(5), ACC(6), ACC(7));
#undef ACC
        _mm256_storeu_ps(r, _mm256_mul_ps(_mm256_set1_ps(scale), h));
        UNROLL8 for (int i = 0; i < Q; i++) UNROLL8 for (int t = 0; t < T; t++)
            s[(size_t)i * lds + t] = r[i * T + t];
        return;
    }
    UNROLL8 for (int i = 0; i < Q; i++) UNROLL8 for (int t = 0; t < T; t++) s[(size_t)i * lds + t] =
        scale * hsum_ps(acc[i][t]);
}

/* All nt positions for Q heads: eight chains per tile where there are
 * enough positions, the leftover positions in halving tiles. */
AI void qk_heads(int kind, int Q, int d, const float *q, const char *k, size_t ks, int nt,
                 float scale, float *s, size_t lds)
{
    const int T = Q >= 3 ? 2 : Q == 2 ? 4 : 8;
    int t = 0;
    for (; t + T <= nt; t += T)
        qk_tile(kind, Q, T, d, q, k + (size_t)t * ks, ks, scale, s + t, lds);
    if (T > 4 && nt - t >= 4) {
        qk_tile(kind, Q, 4, d, q, k + (size_t)t * ks, ks, scale, s + t, lds);
        t += 4;
    }
    if (T > 2 && nt - t >= 2) {
        qk_tile(kind, Q, 2, d, q, k + (size_t)t * ks, ks, scale, s + t, lds);
        t += 2;
    }
    if (t < nt)
        qk_tile(kind, Q, 1, d, q, k + (size_t)t * ks, ks, scale, s + t, lds);
}

/* Every query head, in tiles (x86_heads.h). */
AI void qk_group(int kind, int d, int nq, const float *q, const char *k, size_t ks, int nt,
                 float scale, float *s, size_t lds)
{
/* clang-format off */
#define QK(Q, i) qk_heads(kind, Q, d, q + (size_t)(i) * d, k, ks, nt, scale, s + (size_t)(i) * lds, lds)
    /* clang-format on */
    FOR_HEAD_TILES(nq, QK);
#undef QK
}

static void x86_attn_qk_f16(int d, int nq, const float *q, const uint16_t *k, size_t ks, int nt,
                            float scale, float *s, size_t lds)
{
    qk_group(0, d, nq, q, (const char *)k, ks * 2, nt, scale, s, lds);
}

static void x86_attn_qk_q8_0(int d, int nq, const float *q, const void *k, size_t ks, int nt,
                             float scale, float *s, size_t lds)
{
    qk_group(1, d, nq, q, k, ks, nt, scale, s, lds);
}

/* Output values j0 .. j0 + 8J - 1 of Q heads (o, d floats apart), held in
 * registers across all nt positions (v, vs bytes apart; weights p, ldp
 * apart). part: the last vector holds only d - j0 - 8(J - 1) < 8 values
 * (F16 only). For Q8_0, j0 is a multiple of min(8J, 32), so the tile's
 * vectors jj lie in block j0 / 32 + jj / 4. */
AI void pv_tile(int kind, int Q, int J, int part, int d, int j0, const float *p, size_t ldp,
                const char *v, size_t vs, int nt, float *o)
{
    const int m = part ? d - j0 - 8 * (J - 1) : 8;
    const __m256i mask = lanes_lt(m);
    __m256 acc[4][8];
    UNROLL8 for (int i = 0; i < Q; i++) UNROLL8 for (int jj = 0; jj < J; jj++)
    {
        float *op = o + (size_t)i * d + j0 + 8 * jj;
        acc[i][jj] = part && jj == J - 1 ? _mm256_maskload_ps(op, mask) : _mm256_loadu_ps(op);
    }
    for (int t = 0; t < nt; t++) {
        const char *row = v + (size_t)t * vs;
        __m256 a[4], dq[2];
        UNROLL8 for (int i = 0; i < Q; i++) a[i] = _mm256_set1_ps(p[(size_t)i * ldp + t]);
        UNROLL8 for (int b = 0; b < (J + 3) / 4; b++) dq[b] =
            kind ? ld_q8_scale(row, j0 + 32 * b) : _mm256_setzero_ps();
        UNROLL8 for (int jj = 0; jj < J; jj++)
        {
            __m256 vv = part && jj == J - 1 ? ld_f16_part((const uint16_t *)row + j0 + 8 * jj, m)
                                            : ld_kv8(kind, row, j0 + 8 * jj, dq[jj / 4]);
            UNROLL8 for (int i = 0; i < Q; i++) acc[i][jj] = _mm256_fmadd_ps(a[i], vv, acc[i][jj]);
        }
    }
    UNROLL8 for (int i = 0; i < Q; i++) UNROLL8 for (int jj = 0; jj < J; jj++)
    {
        float *op = o + (size_t)i * d + j0 + 8 * jj;
        if (part && jj == J - 1)
            _mm256_maskstore_ps(op, mask, acc[i][jj]);
        else
            _mm256_storeu_ps(op, acc[i][jj]);
    }
}

/* The head's d values for Q heads: tiles of about eight accumulators (J
 * vectors by Q heads), the leftover whole vectors in halving tiles, then
 * the partial vector. Every j0 stays a multiple of min(8J, 32). */
AI void pv_heads(int kind, int Q, int d, const float *p, size_t ldp, const char *v, size_t vs,
                 int nt, float *o)
{
    const int J = Q >= 3 ? 2 : Q == 2 ? 4 : 8;
    int j0 = 0;
    for (; j0 + 8 * J <= d; j0 += 8 * J)
        pv_tile(kind, Q, J, 0, d, j0, p, ldp, v, vs, nt, o);
    if (J > 4 && d - j0 >= 32) {
        pv_tile(kind, Q, 4, 0, d, j0, p, ldp, v, vs, nt, o);
        j0 += 32;
    }
    if (J > 2 && d - j0 >= 16) {
        pv_tile(kind, Q, 2, 0, d, j0, p, ldp, v, vs, nt, o);
        j0 += 16;
    }
    if (d - j0 >= 8) {
        pv_tile(kind, Q, 1, 0, d, j0, p, ldp, v, vs, nt, o);
        j0 += 8;
    }
    if (kind == 0 && j0 < d)
        pv_tile(0, Q, 1, 1, d, j0, p, ldp, v, vs, nt, o);
}

/* Every query head, in tiles (x86_heads.h). */
AI void pv_group(int kind, int d, int nq, const float *p, size_t ldp, const char *v, size_t vs,
                 int nt, float *o)
{
/* clang-format off */
#define PV(Q, i) pv_heads(kind, Q, d, p + (size_t)(i) * ldp, ldp, v, vs, nt, o + (size_t)(i) * d)
    /* clang-format on */
    FOR_HEAD_TILES(nq, PV);
#undef PV
}

static void x86_attn_pv_f16(int d, int nq, const float *p, size_t ldp, const uint16_t *v, size_t vs,
                            int nt, float *o)
{
    pv_group(0, d, nq, p, ldp, (const char *)v, vs * 2, nt, o);
}

static void x86_attn_pv_q8_0(int d, int nq, const float *p, size_t ldp, const void *v, size_t vs,
                             int nt, float *o)
{
    pv_group(1, d, nq, p, ldp, v, vs, nt, o);
}
