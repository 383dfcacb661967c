/*
 * attn_tile_f16 and attn_tile_q8_0 (kernels.h) of a table against ref:
 * included by test_kernels.c, after its helpers (xmalloc, bits_equal).
 *
 * A cache of positions in rows scattered through one buffer (as paged
 * blocks are), tiles of 64 walked in order with each query taking its own
 * range of each tile; the rows no query takes are NaN, so a kernel that
 * reads them shows. Checked: the table's running max, sum and values equal
 * ref's bit for bit after every tile; a query alone in its calls ends with
 * the same bits as among the others; and the result, divided by the sum,
 * is the softmax-weighted sum of the values within float rounding
 * (computed in double).
 */

#define TILE_POS 192 /* positions: three tiles */
#define TILE_NQ 19

/* One query's range of the tile at t0: positions [lo, hi] of the
 * sequence, clipped. */
static void tile_range(int t0, int nt, int lo, int hi, uint8_t *a, uint8_t *e)
{
    int x = lo > t0 ? lo - t0 : 0, y = hi + 1 - t0;
    if (y > nt)
        y = nt;
    if (y <= x)
        x = y = 0;
    *a = (uint8_t)x;
    *e = (uint8_t)y;
}

/* Walks queries [q0, q0 + nq) (ranges rlo, rhi) through every tile. */
static void tile_walk(const struct ifl_kernels *k, int q8, int d, int dv, float cap, int npos,
                      int q0, int nq, const float *q, const void *qq, const void *const *krow,
                      const void *const *vrow, const int *rlo, const int *rhi, float *m, float *l,
                      float *o)
{
    for (int i = 0; i < nq; i++) {
        m[i] = -INFINITY;
        l[i] = 0;
    }
    memset(o, 0, sizeof(float) * (size_t)nq * (size_t)dv);
    for (int t0 = 0; t0 < npos; t0 += 64) {
        const int nt = npos - t0 < 64 ? npos - t0 : 64, ntn = npos - t0 - 64;
        uint8_t lo[TILE_NQ], hi[TILE_NQ];
        for (int i = 0; i < nq; i++)
            tile_range(t0, nt, rlo[q0 + i], rhi[q0 + i], &lo[i], &hi[i]);
        struct ifl_attn_tile a = {.q = q + (size_t)q0 * d,
                                  .q8 = q8 ? (const char *)qq + (size_t)q0 * (size_t)d / 32 * 34
                                           : NULL,
                                  .k = krow + t0,
                                  .v = vrow + t0,
                                  .lo = lo,
                                  .hi = hi,
                                  .m = m,
                                  .l = l,
                                  .o = o,
                                  .scale = 0.125f,
                                  .softcap = cap,
                                  .d = d,
                                  .dv = dv,
                                  .nq = nq,
                                  .nt = nt,
                                  /* the next tile's rows, asked for (no effect) */
                                  .pk = ntn > 0 ? krow + t0 + 64 : NULL,
                                  .pv = vrow + t0 + 64,
                                  .pnt = ntn > 64  ? 64
                                         : ntn > 0 ? ntn
                                                   : 0};
        (q8 ? k->attn_tile_q8_0 : k->attn_tile_f16)(&a);
    }
}

/* npos (152 .. TILE_POS) positions: the last tile has npos % 64 of them
 * when that is not 0. */
static void check_attn_tile(const struct ifl_kernels *k, int q8, int d, int dv, float cap, int npos,
                            struct ifl_rng *r)
{
    const struct ifl_kernels *ref = ifl_kernels_ref();
    const size_t kb = q8 ? (size_t)d / 32 * 34 : (size_t)d * 2;
    const size_t vb = q8 ? (size_t)dv / 32 * 34 : (size_t)dv * 2;
    const size_t slot = kb > vb ? kb : vb;
    /* 2 * TILE_POS slots: each position's K and V at a shuffled slot */
    char *buf = xmalloc(slot * 2 * TILE_POS);
    float *kf = xmalloc(sizeof(float) * TILE_POS * (size_t)d);
    float *vf = xmalloc(sizeof(float) * TILE_POS * (size_t)dv);
    float *q = xmalloc(sizeof(float) * TILE_NQ * (size_t)d);
    float *o1 = xmalloc(sizeof(float) * TILE_NQ * (size_t)dv);
    float *o2 = xmalloc(sizeof(float) * TILE_NQ * (size_t)dv);
    float *o3 = xmalloc(sizeof(float) * (size_t)dv);
    float *tmp = xmalloc(sizeof(float) * (size_t)(d > dv ? d : dv));
    const void *krow[TILE_POS], *vrow[TILE_POS];
    int perm[2 * TILE_POS], rlo[TILE_NQ], rhi[TILE_NQ];
    float m1[TILE_NQ], l1[TILE_NQ], m2[TILE_NQ], l2[TILE_NQ], m3, l3;
    for (int i = 0; i < 2 * TILE_POS; i++)
        perm[i] = i;
    for (int i = 2 * TILE_POS - 1; i > 0; i--) {
        int j = (int)(ifl_rng_next(r) % (uint64_t)(i + 1)), x = perm[i];
        perm[i] = perm[j];
        perm[j] = x;
    }
    for (int i = 0; i < TILE_NQ * d; i++)
        q[i] = ifl_rng_normal(r) * 2.0f;
    /* a Q8_0 cache scores the queries in Q8_0 (kernels.h): the softmax
     * below takes them as such, dequantised */
    char *qq = xmalloc((size_t)TILE_NQ * (size_t)d / 32 * 34 + 1);
    float *qd = xmalloc(sizeof(float) * TILE_NQ * (size_t)d);
    if (q8) {
        ref->quant[IFL_TYPE_Q8_0](q, qq, (int64_t)TILE_NQ * d);
        ref->dequant[IFL_TYPE_Q8_0](qq, qd, (int64_t)TILE_NQ * d);
    } else {
        memcpy(qd, q, sizeof(float) * TILE_NQ * (size_t)d);
    }
    /* ranges: a prompt's rows (sliding windows for some), and the last
     * position untaken by every query, so its rows are NaN */
    for (int i = 0; i < TILE_NQ; i++) {
        rhi[i] = 20 + (int)(ifl_rng_next(r) % (uint64_t)(npos - 22));
        rlo[i] = i % 3 == 0 ? (int)(ifl_rng_next(r) % (uint64_t)(rhi[i] + 1)) : 0;
        if (i % 6 && i < 6) { /* runs of queries that share a range, as a row's group does */
            rlo[i] = rlo[i - 1];
            rhi[i] = rhi[i - 1];
        }
    }
    /* queries 6 .. 13: a group of eight (a decode's), from an odd position
     * within the first tile to an odd one within the last */
    for (int i = 6; i < 14; i++) {
        rlo[i] = 37;
        rhi[i] = 2 * 64 + 22;
    }
    rhi[TILE_NQ - 1] = npos - 2; /* one query reaches the last tile */
    for (int t = 0; t < TILE_POS; t++) {
        char *kr = buf + (size_t)perm[2 * t] * slot, *vr = buf + (size_t)perm[2 * t + 1] * slot;
        krow[t] = kr;
        vrow[t] = vr;
        for (int h = 0; h < 2; h++) {
            const int n = h ? dv : d;
            char *row = h ? vr : kr;
            float *deq = (h ? vf : kf) + (size_t)t * n;
            for (int e = 0; e < n; e++)
                tmp[e] = ifl_rng_normal(r);
            if (t == npos - 1)
                for (int e = 0; e < n; e++)
                    tmp[e] = NAN;
            if (q8) {
                ref->quant[IFL_TYPE_Q8_0](tmp, row, n);
                if (t == npos - 1)
                    memset(row, 0xff, (size_t)n / 32 * 34); /* NaN scales */
                else
                    ref->dequant[IFL_TYPE_Q8_0](row, deq, n);
            } else {
                for (int e = 0; e < n; e++) {
                    ((uint16_t *)(void *)row)[e] = ifl_f32_to_f16(tmp[e]);
                    deq[e] = ifl_f16_to_f32(((uint16_t *)(void *)row)[e]);
                }
            }
        }
    }
    const char *name = q8 ? "q8_0" : "f16";
    /* calls of the last nq queries (up to three: the rows read in place),
     * and the group of eight alone */
    static const int calls[][2] = {{TILE_NQ - 1, 1},
                                   {TILE_NQ - 2, 2},
                                   {TILE_NQ - 3, 3},
                                   {TILE_NQ - 7, 7},
                                   {TILE_NQ - 13, 13},
                                   {0, 19},
                                   {6, 8}};
    for (size_t ci = 0; ci < sizeof calls / sizeof calls[0]; ci++) {
        const int q0 = calls[ci][0], nq = calls[ci][1];
        tile_walk(k, q8, d, dv, cap, npos, q0, nq, q, qq, krow, vrow, rlo, rhi, m1, l1, o1);
        tile_walk(ref, q8, d, dv, cap, npos, q0, nq, q, qq, krow, vrow, rlo, rhi, m2, l2, o2);
        CHECK_MSG(bits_equal(m1, m2, sizeof(float) * (size_t)nq) &&
                      bits_equal(l1, l2, sizeof(float) * (size_t)nq) &&
                      bits_equal(o1, o2, sizeof(float) * (size_t)nq * (size_t)dv),
                  "%s attn_tile_%s d=%d dv=%d cap=%g nq=%d npos=%d differs from ref", k->name, name,
                  d, dv, (double)cap, nq, npos);
        for (int i = 0; i < nq; i++) {
            const int qi = q0 + i;
            tile_walk(k, q8, d, dv, cap, npos, qi, 1, q, qq, krow, vrow, rlo, rhi, &m3, &l3, o3);
            CHECK_MSG(bits_equal(&l3, &l1[i], sizeof(float)) &&
                          bits_equal(o3, o1 + (size_t)i * dv, sizeof(float) * (size_t)dv),
                      "%s attn_tile_%s d=%d dv=%d: query %d depends on the call's queries", k->name,
                      name, d, dv, qi);
            /* the softmax in double */
            double s[TILE_POS], mx = -INFINITY, sum = 0;
            for (int t = rlo[qi]; t <= rhi[qi]; t++) {
                double c = 0;
                for (int e = 0; e < d; e++)
                    c += (double)qd[(size_t)qi * d + e] * kf[(size_t)t * d + e];
                s[t] = cap > 0 ? cap * tanh(0.125 * c / cap) : 0.125 * c;
                mx = s[t] > mx ? s[t] : mx;
            }
            for (int t = rlo[qi]; t <= rhi[qi]; t++)
                sum += exp(s[t] - mx);
            for (int e = 0; e < dv; e++) {
                double want = 0, mag = 0;
                for (int t = rlo[qi]; t <= rhi[qi]; t++) {
                    want += exp(s[t] - mx) / sum * vf[(size_t)t * dv + e];
                    mag += exp(s[t] - mx) / sum * fabs(vf[(size_t)t * dv + e]);
                }
                const double got = o1[(size_t)i * dv + e] / l1[i];
                CHECK_MSG(fabs(got - want) <= 1e-5 * mag + 1e-6 && isfinite(got),
                          "%s attn_tile_%s d=%d dv=%d: query %d value %d is %.9g, softmax %.9g",
                          k->name, name, d, dv, qi, e, got, want);
            }
        }
    }
    free(qq);
    free(qd);
    free(buf);
    free(kf);
    free(vf);
    free(q);
    free(o1);
    free(o2);
    free(o3);
    free(tmp);
}

/* attn_tile_q8_0's scores against kernels.h's formula, written out here:
 * a query taking one position alone ends with m = its score. The keys
 * are raw blocks (bytes -128 .. 127, scales over a wide range, so the
 * blocks' order matters); the formula with the blocks in reverse order,
 * or a float dot of the dequantised values (the arithmetic before issue
 * 42), must give other bits for some of them, so this check tells those
 * apart. */
static void check_attn_q8_scores(const struct ifl_kernels *k, int d, float cap, struct ifl_rng *r)
{
    enum { NP = 64, NQ = 8 };
    const int nb = d / 32;
    char *keys = xmalloc((size_t)NP * (size_t)nb * 34), *qq = xmalloc((size_t)NQ * nb * 34);
    float *q = xmalloc(sizeof(float) * NQ * (size_t)d),
          *o = xmalloc(sizeof(float) * NQ * (size_t)d);
    const void *krow[NP];
    for (int t = 0; t < NP; t++) {
        struct ifl_block_q8_0 *b = (struct ifl_block_q8_0 *)(void *)(keys + (size_t)t * nb * 34);
        krow[t] = b;
        for (int j = 0; j < nb; j++) {
            b[j].d = ifl_f32_to_f16(ldexpf(1.0f + (float)(ifl_rng_next(r) % 1000) / 1000.0f,
                                           (int)(ifl_rng_next(r) % 16) - 12));
            for (int e = 0; e < 32; e++)
                b[j].qs[e] = (int8_t)(ifl_rng_next(r) % 256 - 128);
        }
    }
    for (int i = 0; i < NQ * d; i++)
        q[i] = ifl_rng_normal(r) * ldexpf(1.0f, i / 32 % 5 - 2);
    ifl_kernels_ref()->quant[IFL_TYPE_Q8_0](q, qq, (int64_t)NQ * d);
    int differ_rev = 0, differ_float = 0, bad = 0;
    for (int t = 0; t < NP; t++)
        for (int nq = NQ; nq >= 3; nq -= 5) { /* a decode's eight, and three */
            float m[NQ], l[NQ];
            uint8_t lo[NQ], hi[NQ];
            for (int i = 0; i < nq; i++) {
                m[i] = -INFINITY;
                l[i] = 0;
                lo[i] = (uint8_t)t;
                hi[i] = (uint8_t)(t + 1);
            }
            memset(o, 0, sizeof(float) * NQ * (size_t)d);
            struct ifl_attn_tile a = {.q = q,
                                      .q8 = qq,
                                      .k = krow,
                                      .v = krow,
                                      .lo = lo,
                                      .hi = hi,
                                      .m = m,
                                      .l = l,
                                      .o = o,
                                      .scale = 0.125f,
                                      .softcap = cap,
                                      .d = d,
                                      .dv = d,
                                      .nq = nq,
                                      .nt = NP};
            k->attn_tile_q8_0(&a);
            for (int i = 0; i < nq; i++) {
                const struct ifl_block_q8_0 *kb = krow[t],
                                            *qb = (const void *)(qq + (size_t)i * nb * 34);
                float c = 0, crev = 0, cf = 0;
                for (int j = 0; j < nb; j++) {
                    const int jr = nb - 1 - j;
                    int32_t is = 0, isr = 0;
                    for (int e = 0; e < 32; e++) {
                        is += kb[j].qs[e] * qb[j].qs[e];
                        isr += kb[jr].qs[e] * qb[jr].qs[e];
                        cf += (ifl_f16_to_f32(kb[j].d) * (float)kb[j].qs[e]) *
                              (ifl_f16_to_f32(qb[j].d) * (float)qb[j].qs[e]);
                    }
                    c = fmaf((float)is, ifl_f16_to_f32(kb[j].d) * ifl_f16_to_f32(qb[j].d), c);
                    crev =
                        fmaf((float)isr, ifl_f16_to_f32(kb[jr].d) * ifl_f16_to_f32(qb[jr].d), crev);
                }
                float want = c * 0.125f;
                if (cap > 0)
                    want = cap * ifl_kernels_tanh(want * (1.0f / cap));
                differ_rev += crev != c;
                differ_float += cf != c;
                if (!bits_equal(&m[i], &want, sizeof want) && bad++ < 3)
                    CHECK_MSG(0,
                              "%s attn_tile_q8_0 d=%d nq=%d: score of query %d at %d is %.9g, "
                              "kernels.h's formula %.9g",
                              k->name, d, nq, i, t, (double)m[i], (double)want);
            }
        }
    CHECK_MSG((differ_rev > 0 || nb == 1) && differ_float > 0,
              "q8 scores check d=%d: no key tells the block order (%d) or float dots (%d) apart", d,
              differ_rev, differ_float);
    free(keys);
    free(qq);
    free(q);
    free(o);
}

static void check_table_attn_tile(const struct ifl_kernels *k)
{
    struct ifl_rng r;
    ifl_rng_seed(&r, 42);
    static const int f16_d[][2] = {{64, 64}, {128, 128}, {80, 80}, {40, 72}, {256, 256}, {8, 8}};
    for (size_t i = 0; i < sizeof f16_d / sizeof f16_d[0]; i++)
        check_attn_tile(k, 0, f16_d[i][0], f16_d[i][1], 0, TILE_POS, &r);
    /* soft caps (gemma2's): one that bends most scores, one nearly linear */
    check_attn_tile(k, 0, 64, 64, 1.5f, TILE_POS, &r);
    check_attn_tile(k, 0, 40, 72, 30.0f, TILE_POS, &r);
    check_attn_tile(k, 1, 64, 64, 1.5f, TILE_POS, &r);
    check_attn_tile(k, 1, 128, 128, 30.0f, TILE_POS, &r);
    /* a last tile of 33 and of 45 positions (odd tile sizes) */
    check_attn_tile(k, 0, 64, 64, 0, 161, &r);
    check_attn_tile(k, 1, 64, 64, 0, 161, &r);
    check_attn_tile(k, 1, 128, 128, 1.5f, 173, &r);
    static const int q8_d[][2] = {{64, 64}, {128, 128}, {32, 96}, {256, 256}, {96, 32}};
    for (size_t i = 0; i < sizeof q8_d / sizeof q8_d[0]; i++)
        check_attn_tile(k, 1, q8_d[i][0], q8_d[i][1], 0, TILE_POS, &r);
    static const int q8_sd[] = {32, 64, 128, 256};
    for (size_t i = 0; i < sizeof q8_sd / sizeof q8_sd[0]; i++)
        check_attn_q8_scores(k, q8_sd[i], 0, &r);
    check_attn_q8_scores(k, 64, 1.5f, &r);
}
