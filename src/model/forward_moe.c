/*
 * The mixture-of-experts feed-forward block of a step (forward.c calls it
 * in place of the dense FFN for a model with experts): llama.cpp's
 * build_moe_ffn as the llama (Mixtral) and qwen3moe graphs use it.
 *
 *   logits = xn Wr                       the router, n_expert per row
 *   sel    = the k largest logits        (k = expert_used_count; the lowest
 *                                         id first on a tie)
 *   w_i    = softmax(logits)[sel_i] / sum over the k of softmax(logits)
 *            (= e^(l_i - m) / sum_j e^(l_j - m) over the chosen: both
 *            architectures renormalise the top-k, never scale them)
 *   out    = sum_i w_i * Wd_e (silu(Wg_e xn) * (Wu_e xn)),  e = sel_i, in
 *            order of i (llama.cpp adds the weighted experts in that order)
 *
 * gpt-oss (LLAMA_EXPERT_GATING_FUNC_TYPE_SOFTMAX_WEIGHT there): the router
 * and every expert matrix have a bias (added where each product is made);
 * its weights are the softmax of the k chosen logits, which is the
 * renormalised top-k above; and the activation is the clamped SwiGLU
 * (swiglu_oai below) in place of silu(g) * u.
 *
 * A batch's rows are grouped by expert: every (row, choice) pair becomes
 * a gathered row, those of expert e consecutive (rows in batch order), so
 * the matmuls run once per expert over all its rows and read its weights
 * once per step; an expert no row chose is not read at all, so a lone
 * decode row reads k of the n_expert experts. Each expert is the 2-D
 * slice of the stacked tensor (model.h), computed by the same gemm
 * kernels (and x16 repacked groups) as a dense matrix.
 *
 * Numerics: a gathered row's outputs come from the gemm kernels, whose
 * result per (row, column) depends only on the two rows (kernels.h), and
 * the router, top-k and weighted sum are per-row with a fixed order, so a
 * row's result does not depend on which other rows chose the same expert,
 * on the batch, or on the thread count (batch invariance, forward.h).
 *
 * Tensor parallelism (shard.c): a rank holds a slice of every expert's
 * n_ff and computes its weighted partial sum; forward.c adds the ranks'
 * sums. Summing as the ranks do in one process (--tp-emulate, model.h
 * ifl_units): gate and up whole (each column is what a rank computes of
 * its slice), then per unit its columns of down over its slice of the
 * activation, weighted as a rank weights them (down's bias in unit 0
 * alone), the units' sums added in rank order.
 *
 * Threads: every thread runs ifl_fwd_moe with the same arguments; phases
 * meet at barriers. A matmul phase's units (an expert's slice of columns)
 * are cut into one contiguous share a thread, walked from its front in
 * chunks of half of what is left, then taken from the back of the others'
 * shares (as forward.c's mm_chunks does for a dense matmul), and each
 * thread asks for the start of its share while it waits at the barrier
 * before the phase. Nothing is allocated per step.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "model/forward_internal.h"

/* Columns of one matmul unit: long enough that a unit's call amortises
 * its activations, short enough to balance two threads on a decode. */
#define UNIT_COLS 64

/* What is taken of one thread's share of a phase's units: the count from
 * its front (low 32 bits, its owner's) and from its back (high 32 bits,
 * the other threads'). */
struct share {
    _Alignas(64) _Atomic uint64_t taken;
};

/* Weight bytes a thread asks for at most while it waits before a phase:
 * forward.c's figure for a dense matmul group. */
#define FETCH_BYTES (256 * 1024)

/* The step's choices grouped by expert. Every thread builds its own copy
 * from the routes (the same bytes in each), so no thread waits for one
 * that builds it for all. */
struct lists {
    int32_t *slot;   /* [R][k] the gathered row of each choice */
    int32_t *src;    /* [ng] the batch row of each gathered row */
    int32_t *off;    /* [n_exp + 1] expert e's gathered rows: [off[e], off[e + 1]) */
    int32_t *active; /* [n_exp] the experts with rows, ascending */
    int32_t n_active;
};

struct ifl_fwd_moe {
    int32_t n_exp, k, n_ff, n_embd;
    size_t ng;        /* gathered rows at most: max_rows * k */
    float *logits;    /* [R][n_exp] router logits */
    int32_t *sel;     /* [R][k] chosen experts, largest logit first */
    float *wsel;      /* [R][k] their weights */
    struct lists *ls; /* [nth] */
    int nth;
    char *xg, *xu; /* [ng][x_ld] gathered inputs in gate's (up's) input format */
    size_t x_ld;
    float *hg, *hu; /* [ng][n_ff] gate and up outputs; hg then silu(g) * u */
    char *hd;       /* [ng][h_ld] silu(g) * u in down's input format */
    size_t h_ld;
    float *yd;        /* [ng][n_embd] down outputs */
    int32_t *trace;   /* ifl_fwd_moe_trace's array, or NULL */
    struct share *tk; /* [n_layer][n_tk][nth] shares taken: gate/up, down (per sum unit) */
    int n_tk;
    float *urow; /* [nth][n_embd] a sum unit's weighted row (--tp-emulate) */
};

static size_t round64(size_t n)
{
    return (n + 63) / 64 * 64;
}

/* Bytes of a row of n values in the input format of weight type t. */
static size_t act_bytes(enum ifl_type t, int64_t n)
{
    enum ifl_type at = ifl_type_info(t)->act;
    return at == IFL_TYPE_F32 ? (size_t)n * sizeof(float) : ifl_type_row_size(at, n);
}

void ifl_fwd_moe_free(struct ifl_fwd *f)
{
    struct ifl_fwd_moe *e = f->moe;
    if (!e)
        return;
    free(e->logits);
    free(e->sel);
    free(e->wsel);
    for (int t = 0; e->ls && t < e->nth; t++) {
        free(e->ls[t].slot);
        free(e->ls[t].src);
        free(e->ls[t].off);
        free(e->ls[t].active);
    }
    free(e->ls);
    free(e->tk);
    free(e->urow);
    if (e->xu != e->xg)
        free(e->xu);
    free(e->xg);
    free(e->hg);
    free(e->hu);
    free(e->hd);
    free(e->yd);
    free(e);
    f->moe = NULL;
}

int ifl_fwd_moe_create(struct ifl_fwd *f, char *err)
{
    const struct ifl_model *m = f->m;
    const struct ifl_hparams *hp = &m->hp;
    if (!hp->n_expert)
        return 0;
    struct ifl_fwd_moe *e = aligned_alloc(64, round64(sizeof *e));
    if (!e)
        return ifl_err(err, IFL_ENOMEM, "forward: out of memory for the experts");
    memset(e, 0, sizeof *e);
    f->moe = e;
    e->n_exp = hp->n_expert;
    e->k = hp->n_expert_used;
    e->n_ff = hp->n_ff;
    e->n_embd = hp->n_embd;
    const size_t R = (size_t)f->max_rows;
    e->ng = R * (size_t)e->k;
    /* the widest input rows any layer's types need (a mix may differ by layer) */
    int split_up = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        const struct ifl_layer_weights *w = &m->layers[il];
        size_t xb = act_bytes(w->gate_exps.type, hp->n_embd);
        size_t ub = act_bytes(w->up_exps.type, hp->n_embd);
        size_t hb = act_bytes(w->down_exps.type, hp->n_ff);
        e->x_ld = round64(xb > e->x_ld ? xb : e->x_ld);
        e->x_ld = round64(ub > e->x_ld ? ub : e->x_ld);
        e->h_ld = round64(hb > e->h_ld ? hb : e->h_ld);
        split_up |= ifl_type_info(w->gate_exps.type)->act != ifl_type_info(w->up_exps.type)->act;
    }
    e->logits = malloc(sizeof(float) * R * (size_t)e->n_exp);
    e->sel = malloc(sizeof(int32_t) * e->ng);
    e->wsel = malloc(sizeof(float) * e->ng);
    e->nth = ifl_pool_size(f->pool);
    e->ls = calloc((size_t)e->nth, sizeof *e->ls);
    int lists_ok = e->ls != NULL;
    for (int t = 0; lists_ok && t < e->nth; t++) {
        struct lists *l = &e->ls[t];
        l->slot = malloc(sizeof(int32_t) * e->ng);
        l->src = malloc(sizeof(int32_t) * e->ng);
        l->off = malloc(sizeof(int32_t) * ((size_t)e->n_exp + 1));
        l->active = malloc(sizeof(int32_t) * (size_t)e->n_exp);
        lists_ok = l->slot && l->src && l->off && l->active;
    }
    e->n_tk = 2 + (m->units ? m->units->n : 0);
    e->tk = aligned_alloc(64, sizeof(struct share) * (size_t)e->n_tk * (size_t)e->nth *
                                  (size_t)hp->n_layer);
    e->urow = m->units ? malloc(sizeof(float) * (size_t)e->nth * (size_t)hp->n_embd) : NULL;
    e->xg = aligned_alloc(64, e->ng * e->x_ld);
    e->xu = split_up ? aligned_alloc(64, e->ng * e->x_ld) : e->xg;
    e->hg = aligned_alloc(64, round64(sizeof(float) * e->ng * (size_t)e->n_ff));
    e->hu = aligned_alloc(64, round64(sizeof(float) * e->ng * (size_t)e->n_ff));
    e->hd = aligned_alloc(64, e->ng * e->h_ld);
    e->yd = aligned_alloc(64, round64(sizeof(float) * e->ng * (size_t)e->n_embd));
    if (!e->logits || !e->sel || !e->wsel || !lists_ok || !e->tk || !e->xg || !e->xu || !e->hg ||
        !e->hu || !e->hd || !e->yd || (m->units && !e->urow)) {
        ifl_fwd_moe_free(f);
        return ifl_err(err, IFL_ENOMEM,
                       "forward: out of memory for %zu expert rows (%d rows, %d experts each)",
                       (size_t)R * (size_t)e->k, f->max_rows, e->k);
    }
    return 0;
}

void ifl_fwd_moe_trace(struct ifl_fwd *f, int32_t *sel)
{
    if (f->moe)
        f->moe->trace = sel;
}

/* The k largest of l[0..n) (the lowest index first among equals), largest
 * first, and their renormalised softmax weights. */
static void route(const float *l, int n, int k, int32_t *sel, float *w)
{
    for (int i = 0; i < k; i++) {
        int best = -1;
        for (int c = 0; c < n; c++) {
            int taken = 0;
            for (int t = 0; t < i && !taken; t++)
                taken = sel[t] == c;
            if (!taken && (best < 0 || l[c] > l[best]))
                best = c;
        }
        sel[i] = best;
    }
    /* sel[0] holds the largest logit: e^(l - max) of each chosen, summed in
     * double; the all-expert softmax's denominator cancels */
    double p[64], s = 0.0;
    double *pp = k <= 64 ? p : NULL;
    for (int i = 0; i < k; i++) {
        double v = exp((double)l[sel[i]] - (double)l[sel[0]]);
        if (pp)
            pp[i] = v;
        s += v;
    }
    for (int i = 0; i < k; i++) {
        double v = pp ? pp[i] : exp((double)l[sel[i]] - (double)l[sel[0]]);
        w[i] = (float)(v / s);
    }
}

/* llama.cpp's swiglu_oai with its fixed alpha 1.702 and limit 7 (gpt-oss):
 * g = min(g, 7), u = clamp(u, -7, 7), out = g / (1 + e^(-1.702 g)) (u + 1),
 * in float with expf, as ggml computes it. */
static void swiglu_oai(int64_t n, float *g, const float *u)
{
    for (int64_t i = 0; i < n; i++) {
        const float x = g[i] < 7.0f ? g[i] : 7.0f;
        const float y = u[i] < -7.0f ? -7.0f : u[i] > 7.0f ? 7.0f : u[i];
        g[i] = x / (1.0f + expf(1.702f * -x)) * (y + 1.0f);
    }
}

/* The expert whose gathered rows hold row g: the last x with off[x] <= g
 * (an expert with no rows has off[x] == off[x + 1]). */
static int expert_of(const struct lists *L, int n_exp, int32_t g)
{
    int lo = 0, hi = n_exp; /* off[lo] <= g < off[hi] */
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (L->off[mid] <= g)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* The slice of the stacked experts matrix w that is expert x's. */
static const char *expert_rows(const struct ifl_mat *w, int n_exp, int x)
{
    return (const char *)w->data + (size_t)x * (size_t)(w->n_out / n_exp) * w->row_bytes;
}

/* Columns per unit of w: UNIT_COLS, or the x16 kernel's widest tile. */
static int unit_cols(const struct ifl_fwd *f, const struct ifl_mat *w)
{
    int c = w->x16 ? f->kn->x16_cols[w->type] : 0;
    return c > UNIT_COLS ? c : UNIT_COLS;
}

/* y rows of the gathered rows [g0, g0 + n) = x rows times the columns
 * [c0, c1) of expert x's slice of w. */
static void expert_gemm(const struct ifl_fwd *f, const struct ifl_mat *w, int x, const void *xa,
                        size_t xs, int32_t g0, int32_t n, int64_t c0, int64_t c1, float *y,
                        size_t ldy)
{
    const struct ifl_fwd_moe *e = f->moe;
    ifl_gemm_fn gemm = w->x16 ? f->kn->gemm_x16[w->type] : f->kn->gemm[w->type];
    gemm(w->n_in, n, (int)(c1 - c0), (const char *)xa + (size_t)g0 * xs, xs,
         expert_rows(w, e->n_exp, x) + (size_t)c0 * w->row_bytes, w->row_bytes,
         y + (size_t)g0 * ldy + c0, ldy);
}

/* Converts n values at x into the input format of weight type t at dst
 * (a copy when that is F32). */
static void to_act(const struct ifl_fwd *f, enum ifl_type t, const float *x, void *dst, int64_t n)
{
    enum ifl_type at = ifl_type_info(t)->act;
    if (at == IFL_TYPE_F32)
        memcpy(dst, x, sizeof(float) * (size_t)n);
    else
        f->kn->quant[at](x, dst, n);
}

/* A matmul phase over the active experts: nm matrices per expert (gate
 * and up, or down), each over the rows x[m] (xs apart) into y[m] (ldy
 * apart), n_out columns in units of cw; unit u is expert
 * active[u / (nm * nch)]'s matrix (u / nch) % nm, columns from
 * (u % nch) * cw. */
struct phase {
    const struct ifl_mat *w[2];
    const char *x[2];
    float *y[2];
    int nm, cw;
    int64_t n_out, nch;
    size_t xs, ldy;
};

static int64_t phase_units(const struct phase *p, const struct lists *L)
{
    return (int64_t)L->n_active * p->nm * p->nch;
}

/* Runs the units [u0, u1): one gemm call for each run of them within one
 * expert's matrix. */
static void phase_run(const struct ifl_fwd *f, const struct lists *L, const struct phase *p,
                      int64_t u0, int64_t u1)
{
    while (u0 < u1) {
        const int64_t seg = u0 / p->nch, end = (seg + 1) * p->nch < u1 ? (seg + 1) * p->nch : u1;
        const int x = L->active[seg / p->nm], m = (int)(seg % p->nm);
        const int64_t c0 = (u0 % p->nch) * p->cw, c1x = ((end - 1) % p->nch + 1) * p->cw;
        const int64_t c1 = c1x < p->n_out ? c1x : p->n_out;
        const int32_t g0 = L->off[x], n = L->off[x + 1] - g0;
        expert_gemm(f, p->w[m], x, p->x[m], p->xs, g0, n, c0, c1, p->y[m], p->ldy);
        u0 = end;
    }
}

/* Takes 1/div of what is left of share [lo, hi) (at least one unit), from
 * its front (thief 0) or its back (thief 1); returns how many, 0 when
 * nothing is left. */
static int64_t share_take(struct share *s, int64_t lo, int64_t hi, int thief, int div, int64_t *u0)
{
    uint64_t old = atomic_load_explicit(&s->taken, memory_order_relaxed);
    for (;;) {
        const int64_t a = (int64_t)(old & 0xffffffffu), b = (int64_t)(old >> 32);
        const int64_t left = hi - lo - a - b;
        if (left <= 0)
            return 0;
        const int64_t n = left / div < 1 ? 1 : left / div;
        const uint64_t nw = thief ? old + ((uint64_t)n << 32) : old + (uint64_t)n;
        if (atomic_compare_exchange_weak_explicit(&s->taken, &old, nw, memory_order_relaxed,
                                                  memory_order_relaxed)) {
            *u0 = thief ? hi - b - n : lo + a;
            return n;
        }
    }
}

/* The barrier before phase p: while waiting, asks for the weights at the
 * start of this thread's share, which it reads first (phase_go). A lone
 * decode row's experts are known only now, so nothing of theirs could be
 * fetched earlier. */
static void phase_barrier(struct ifl_fwd *f, const struct lists *L, const struct phase *p, int ith,
                          int nth)
{
    const struct ifl_fwd_moe *e = f->moe;
    long lo, hi;
    ifl_pool_split((long)phase_units(p, L), ith, nth, &lo, &hi);
    if (lo == hi) {
        ifl_pool_barrier(f->pool);
        return;
    }
    const int64_t seg = lo / p->nch;
    const int x = L->active[seg / p->nm];
    const struct ifl_mat *w = p->w[seg % p->nm];
    const int64_t c0 = (lo % p->nch) * p->cw;
    const size_t bytes = (size_t)(p->n_out - c0) * w->row_bytes;
    ifl_pool_barrier_fetch(f->pool, expert_rows(w, e->n_exp, x) + (size_t)c0 * w->row_bytes,
                           bytes < FETCH_BYTES ? bytes : FETCH_BYTES);
}

/* Runs phase p's units over the threads: this thread's contiguous share
 * from its front, in chunks of half of what is left (each call reads on
 * where the last stopped, one stream for the prefetchers), then chunks
 * from the back of the others' shares, so the threads end together. With
 * one counter handing out 64-column units in turn, the two threads' reads
 * of an expert interleaved and a lone decode row's experts came in at
 * 41-46 GB/s against the dense path's 66-73; with shares and the fetch at
 * the barriers, builds alternating on the quiet Zen 5, qwen3moe 2B-A0.4B
 * decode Q8_0 103-138 -> 152-162 tok/s, Q4_K_M 211-222 -> 261-273. sh:
 * the phase's [nth] shares, zero at the start. No barrier at the end. */
static void phase_go(const struct ifl_fwd *f, const struct lists *L, const struct phase *p,
                     struct share *sh, int ith, int nth)
{
    const int64_t n = phase_units(p, L);
    for (int v = 0; v < nth; v++) {
        const int victim = (ith + v) % nth, thief = v > 0;
        long lo, hi;
        int64_t u0, k;
        ifl_pool_split((long)n, victim, nth, &lo, &hi);
        while ((k = share_take(&sh[victim], lo, hi, thief, thief ? 2 * nth : 2, &u0)) > 0)
            phase_run(f, L, p, u0, u0 + k);
    }
}

/* The down phase over down's matrix w (a whole one, or a sum unit's),
 * from the rows at xa. */
static void down_phase(const struct ifl_fwd *f, const struct ifl_mat *w, const char *xa,
                       struct phase *p)
{
    const struct ifl_fwd_moe *e = f->moe;
    memset(p, 0, sizeof *p);
    p->w[0] = w;
    p->x[0] = xa;
    p->y[0] = e->yd;
    p->nm = 1;
    p->cw = unit_cols(f, w);
    p->n_out = e->n_embd;
    p->nch = (e->n_embd + p->cw - 1) / p->cw;
    p->xs = e->h_ld;
    p->ldy = (size_t)e->n_embd;
}

/* Row r's weighted sum of its experts' outputs in e->yd into t, plus their
 * down biases bd (or NULL), added in order of choice. */
static void weigh(const struct ifl_fwd_moe *e, const struct lists *L, const float *bd, long r,
                  float *t)
{
    const int k = e->k, n_embd = e->n_embd;
    if (bd) {
        for (int c = 0; c < k; c++) {
            const float *y = e->yd + (size_t)L->slot[r * k + c] * n_embd;
            const float *b = bd + (size_t)e->sel[r * k + c] * n_embd;
            const float wc = e->wsel[r * k + c];
            for (int i = 0; i < n_embd; i++)
                t[i] = c ? t[i] + (y[i] + b[i]) * wc : (y[i] + b[i]) * wc;
        }
        return;
    }
    const float *y0 = e->yd + (size_t)L->slot[r * k] * n_embd;
    const float w0 = e->wsel[r * k];
    for (int i = 0; i < n_embd; i++)
        t[i] = y0[i] * w0;
    for (int c = 1; c < k; c++) {
        const float *y = e->yd + (size_t)L->slot[r * k + c] * n_embd;
        const float wc = e->wsel[r * k + c];
        for (int i = 0; i < n_embd; i++)
            t[i] += y[i] * wc;
    }
}

/* down summed as the ranks of a tensor parallel job sum it (--tp-emulate):
 * unit u's columns of every expert's down over its slice of the
 * activation, weighted as rank u weights them (down's biases in unit 0),
 * the units' rows added in rank order. */
static void moe_down_units(struct job *j, int ith, int nth, int il, long lo, long hi,
                           struct share *tk)
{
    struct ifl_fwd *f = j->f;
    struct ifl_fwd_moe *e = f->moe;
    const struct ifl_units *U = f->m->units;
    const struct ifl_layer_weights *w = &f->m->layers[il];
    const struct lists *L = &e->ls[ith];
    float *urow = e->urow + (size_t)ith * (size_t)e->n_embd;
    for (int u = 0; u < U->n; u++) {
        const struct ifl_mat *um = &U->down[(size_t)il * U->n + u];
        struct phase p;
        down_phase(f, um, e->hd + act_bytes(um->type, U->ff_off[u]), &p);
        phase_go(f, L, &p, tk + (size_t)u * (size_t)e->nth, ith, nth);
        ifl_pool_barrier(f->pool);
        for (long r = lo; r < hi; r++) {
            float *t = f->tmp + r * e->n_embd;
            if (u == 0) {
                weigh(e, L, w->down_exps_b, r, t);
                continue;
            }
            weigh(e, L, NULL, r, urow);
            for (int i = 0; i < e->n_embd; i++)
                t[i] += urow[i];
        }
        ifl_pool_barrier(f->pool); /* yd is the next unit's */
    }
}

void ifl_fwd_moe(struct job *j, int ith, int nth, int il, long lo, long hi)
{
    struct ifl_fwd *f = j->f;
    struct ifl_fwd_moe *e = f->moe;
    const struct ifl_layer_weights *w = &f->m->layers[il];
    const int32_t nr = j->b->n_rows;
    const int n_exp = e->n_exp, k = e->k, n_ff = e->n_ff, n_embd = e->n_embd;
    struct lists *L = &e->ls[ith];
    const size_t n_sh = (size_t)e->n_tk * (size_t)e->nth;
    struct share *tk = e->tk + n_sh * (size_t)il; /* [n_tk][nth] */
    if (ith == 0) /* published by the barrier after the routes; no thread
                     takes this layer's units before it */
        for (size_t t = 0; t < n_sh; t++)
            atomic_store_explicit(&tk[t].taken, 0, memory_order_relaxed);

    /* this thread's rows: router logits, then the top k and their weights */
    if (hi > lo) {
        const struct ifl_mat *r = &w->gate_inp;
        enum ifl_type at = ifl_type_info(r->type)->act;
        const void *xa = f->xn + lo * n_embd;
        size_t xs = sizeof(float) * (size_t)n_embd;
        if (at != IFL_TYPE_F32) {
            for (long i = lo; i < hi; i++)
                f->kn->quant[at](f->xn + i * n_embd, (char *)f->act + i * f->act_row_bytes, n_embd);
            xa = (const char *)f->act + lo * f->act_row_bytes;
            xs = f->act_row_bytes;
        }
        ifl_gemm_fn gemm = f->kn->gemm[r->type];
        gemm(n_embd, (int)(hi - lo), n_exp, xa, xs, r->data, r->row_bytes, e->logits + lo * n_exp,
             (size_t)n_exp);
        if (w->gate_inp_b)
            for (long i = lo; i < hi; i++)
                for (int x = 0; x < n_exp; x++)
                    e->logits[i * n_exp + x] += w->gate_inp_b[x];
        for (long i = lo; i < hi; i++)
            route(e->logits + i * n_exp, n_exp, k, e->sel + i * k, e->wsel + i * k);
        if (e->trace)
            memcpy(e->trace + ((size_t)il * (size_t)nr + (size_t)lo) * (size_t)k, e->sel + lo * k,
                   sizeof(int32_t) * (size_t)(hi - lo) * (size_t)k);
    }
    ifl_pool_barrier(f->pool);

    /* the choices grouped by expert (a counting sort, rows in batch order
     * within an expert), in this thread's own lists */
    memset(L->off, 0, sizeof(int32_t) * ((size_t)n_exp + 1));
    for (long i = 0; i < (long)nr * k; i++)
        L->off[e->sel[i] + 1]++;
    L->n_active = 0;
    for (int x = 0; x < n_exp; x++) {
        if (L->off[x + 1])
            L->active[L->n_active++] = x;
        L->off[x + 1] += L->off[x];
    }
    for (long i = 0; i < (long)nr * k; i++) {
        int32_t g = L->off[e->sel[i]]++;
        L->slot[i] = g;
        L->src[g] = (int32_t)(i / k);
    }
    for (int x = n_exp; x > 0; x--) /* back to each expert's first row */
        L->off[x] = L->off[x - 1];
    L->off[0] = 0;

    /* gathered rows: each one's input in the experts' input formats */
    const long n_g = (long)nr * k;
    long glo, ghi;
    ifl_pool_split(n_g, ith, nth, &glo, &ghi);
    for (long g = glo; g < ghi; g++) {
        const float *x = f->xn + (size_t)L->src[g] * n_embd;
        to_act(f, w->gate_exps.type, x, e->xg + g * e->x_ld, n_embd);
        if (e->xu != e->xg)
            to_act(f, w->up_exps.type, x, e->xu + g * e->x_ld, n_embd);
    }

    /* gate and up: units of (active expert, matrix, columns) */
    struct phase gu = {
        .w = {&w->gate_exps, &w->up_exps},
        .x = {e->xg, e->xu},
        .y = {e->hg, e->hu},
        .nm = 2,
        .n_out = n_ff,
        .xs = e->x_ld,
        .ldy = (size_t)n_ff,
    };
    const int cwg = unit_cols(f, &w->gate_exps), cwu = unit_cols(f, &w->up_exps);
    gu.cw = cwg > cwu ? cwg : cwu;
    gu.nch = (n_ff + gu.cw - 1) / gu.cw;
    phase_barrier(f, L, &gu, ith, nth);
    phase_go(f, L, &gu, tk, ith, nth);
    ifl_pool_barrier(f->pool);

    for (long g = glo; g < ghi; g++) {
        float *gr = e->hg + (size_t)g * n_ff, *ur = e->hu + (size_t)g * n_ff;
        if (w->gate_exps_b) { /* gpt-oss: biases, then its SwiGLU */
            const int x = expert_of(L, n_exp, (int32_t)g);
            const float *bg = w->gate_exps_b + (size_t)x * n_ff,
                        *bu = w->up_exps_b + (size_t)x * n_ff;
            for (int i = 0; i < n_ff; i++) {
                gr[i] += bg[i];
                ur[i] += bu[i];
            }
        }
        if (f->m->hp.ffn_swiglu_oai)
            swiglu_oai(n_ff, gr, ur);
        else
            f->kn->swiglu(n_ff, gr, ur);
        to_act(f, w->down_exps.type, gr, e->hd + g * e->h_ld, n_ff);
    }
    if (f->m->units) {
        ifl_pool_barrier(f->pool);
        moe_down_units(j, ith, nth, il, lo, hi, tk + 2 * (size_t)e->nth);
        return;
    }

    /* down: units of (active expert, columns) */
    struct phase dn;
    down_phase(f, &w->down_exps, e->hd, &dn);
    phase_barrier(f, L, &dn, ith, nth);
    phase_go(f, L, &dn, tk + e->nth, ith, nth);
    ifl_pool_barrier(f->pool);

    /* this thread's rows: the weighted experts (plus their down biases),
     * added in order of choice */
    for (long r = lo; r < hi; r++)
        weigh(e, L, w->down_exps_b, r, f->tmp + r * n_embd);
}
