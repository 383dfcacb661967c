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
static void tile_walk(const struct ifl_kernels *k, int q8, int d, int dv, float cap, int q0, int nq,
                      const float *q, const void *const *krow, const void *const *vrow,
                      const int *rlo, const int *rhi, float *m, float *l, float *o)
{
    for (int i = 0; i < nq; i++) {
        m[i] = -INFINITY;
        l[i] = 0;
    }
    memset(o, 0, sizeof(float) * (size_t)nq * (size_t)dv);
    for (int t0 = 0; t0 < TILE_POS; t0 += 64) {
        uint8_t lo[TILE_NQ], hi[TILE_NQ];
        for (int i = 0; i < nq; i++)
            tile_range(t0, 64, rlo[q0 + i], rhi[q0 + i], &lo[i], &hi[i]);
        struct ifl_attn_tile a = {.q = q + (size_t)q0 * d,
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
                                  .nt = 64,
                                  /* the next tile's rows, asked for (no effect) */
                                  .pk = t0 + 64 < TILE_POS ? krow + t0 + 64 : NULL,
                                  .pv = vrow + t0 + 64,
                                  .pnt = t0 + 64 < TILE_POS ? 64 : 0};
        (q8 ? k->attn_tile_q8_0 : k->attn_tile_f16)(&a);
    }
}

static void check_attn_tile(const struct ifl_kernels *k, int q8, int d, int dv, float cap,
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
    /* ranges: a prompt's rows (sliding windows for some), and the last
     * position untaken by every query, so its rows are NaN */
    for (int i = 0; i < TILE_NQ; i++) {
        rhi[i] = 20 + (int)(ifl_rng_next(r) % (TILE_POS - 22));
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
    rhi[TILE_NQ - 1] = TILE_POS - 2; /* one query reaches the last tile */
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
            if (t == TILE_POS - 1)
                for (int e = 0; e < n; e++)
                    tmp[e] = NAN;
            if (q8) {
                ref->quant[IFL_TYPE_Q8_0](tmp, row, n);
                if (t == TILE_POS - 1)
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
    /* calls of the last nq queries, and the group of eight alone */
    static const int calls[][2] = {
        {TILE_NQ - 1, 1}, {TILE_NQ - 7, 7}, {TILE_NQ - 13, 13}, {0, 19}, {6, 8}};
    for (size_t ci = 0; ci < sizeof calls / sizeof calls[0]; ci++) {
        const int q0 = calls[ci][0], nq = calls[ci][1];
        tile_walk(k, q8, d, dv, cap, q0, nq, q, krow, vrow, rlo, rhi, m1, l1, o1);
        tile_walk(ref, q8, d, dv, cap, q0, nq, q, krow, vrow, rlo, rhi, m2, l2, o2);
        CHECK_MSG(bits_equal(m1, m2, sizeof(float) * (size_t)nq) &&
                      bits_equal(l1, l2, sizeof(float) * (size_t)nq) &&
                      bits_equal(o1, o2, sizeof(float) * (size_t)nq * (size_t)dv),
                  "%s attn_tile_%s d=%d dv=%d cap=%g nq=%d differs from ref", k->name, name, d, dv,
                  (double)cap, nq);
        for (int i = 0; i < nq; i++) {
            const int qi = q0 + i;
            tile_walk(k, q8, d, dv, cap, qi, 1, q, krow, vrow, rlo, rhi, &m3, &l3, o3);
            CHECK_MSG(bits_equal(&l3, &l1[i], sizeof(float)) &&
                          bits_equal(o3, o1 + (size_t)i * dv, sizeof(float) * (size_t)dv),
                      "%s attn_tile_%s d=%d dv=%d: query %d depends on the call's queries", k->name,
                      name, d, dv, qi);
            /* the softmax in double */
            double s[TILE_POS], mx = -INFINITY, sum = 0;
            for (int t = rlo[qi]; t <= rhi[qi]; t++) {
                double c = 0;
                for (int e = 0; e < d; e++)
                    c += (double)q[(size_t)qi * d + e] * kf[(size_t)t * d + e];
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
    free(buf);
    free(kf);
    free(vf);
    free(q);
    free(o1);
    free(o2);
    free(o3);
    free(tmp);
}

static void check_table_attn_tile(const struct ifl_kernels *k)
{
    struct ifl_rng r;
    ifl_rng_seed(&r, 42);
    static const int f16_d[][2] = {{64, 64}, {128, 128}, {80, 80}, {40, 72}, {256, 256}, {8, 8}};
    for (size_t i = 0; i < sizeof f16_d / sizeof f16_d[0]; i++)
        check_attn_tile(k, 0, f16_d[i][0], f16_d[i][1], 0, &r);
    /* soft caps (gemma2's): one that bends most scores, one nearly linear */
    check_attn_tile(k, 0, 64, 64, 1.5f, &r);
    check_attn_tile(k, 0, 40, 72, 30.0f, &r);
    check_attn_tile(k, 1, 64, 64, 1.5f, &r);
    static const int q8_d[][2] = {{64, 64}, {128, 128}, {32, 96}, {256, 256}};
    for (size_t i = 0; i < sizeof q8_d / sizeof q8_d[0]; i++)
        check_attn_tile(k, 1, q8_d[i][0], q8_d[i][1], 0, &r);
}
