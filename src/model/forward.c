/*
 * The batched forward pass (see forward.h): a pre-norm decoder of the
 * llama family over a ragged batch, with K and V in a paged store.
 *
 * One call runs one pool job. All threads walk the same list of phases and
 * meet at barriers between them; inside a phase each thread takes a fixed
 * slice of rows for element-wise work, or its own contiguous share of the
 * output columns of a matmul (of the rows' attention runs; of a lone row's
 * KV heads), then chunks from the back of the others' shares (mm_chunks,
 * take_run), so that both cores finish together. Every output element is
 * computed by one thread with a fixed reduction order, so results do not
 * depend on the thread count or on the batch's other rows.
 *
 * Per layer:  xn = rmsnorm(x) * attn_norm
 *             q, k, v = xn Wq (+bq), xn Wk (+bk), xn Wv (+bv)
 *             [qwen3: rmsnorm each head of q and k];  rope(q), rope(k)
 *             store k, v at each row's (sequence, position)
 *             att = softmax(q K^T / sqrt(head_dim)) V over positions 0..pos
 *             x += att Wo (+bo)
 *             xn = rmsnorm(x) * ffn_norm;  x += (silu(xn Wg) * (xn Wu)) Wd
 * Then, for rows that want logits: logits = rmsnorm(x) * out_norm Wout
 * (and, when the batch asks, that normed row is copied out as the hidden state).
 */
#include "model/forward.h"

#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/fp16.h"
#include "kernels/kernels.h"
#include "model/forward_internal.h"
#include "model/lora_rt.h"

static void *alloc_floats(size_t n)
{
    return aligned_alloc(64, ((n * sizeof(float) + 63) / 64) * 64);
}

void ifl_fwd_free(struct ifl_fwd *f)
{
    if (!f)
        return;
    if (f->owns_pool)
        ifl_pool_free(f->pool);
    free(f->inv_freq);
    free(f->inv_freq_swa);
    free(f->rope_cs_swa);
    free(f->x);
    free(f->xn);
    free(f->act);
    free(f->q);
    free(f->k);
    free(f->v);
    free(f->att);
    free(f->gate);
    free(f->up);
    free(f->tmp);
    free(f->rope_cs);
    free(f->scores);
    free(f->att_q);
    free(f->att_o);
    free(f->att_q8);
    free(f->kvtmp);
    free(f->out_rows);
    free(f->mm_reg);
    free(f->u_in);
    free(f->u_out);
    free(f->run_start);
    free(f->run_share);
    free(f->att_claim);
    free(f->lora_n);
    free(f->lora_rows);
    free(f->lora_user);
    free(f->lora_t);
    free(f->lora_sc);
    free(f->lora_q);
    free(f->rep_x);
    free(f->rep_xn);
    free(f->rep_act);
    free(f->rep_g);
    free(f->rep_t);
    ifl_fwd_moe_free(f);
    ifl_fwd_tp_free(f);
    free(f);
}

int ifl_fwd_n_threads(const struct ifl_fwd *f)
{
    return ifl_pool_size(f->pool);
}

struct ifl_pool *ifl_fwd_pool(struct ifl_fwd *f)
{
    return f->pool;
}

void ifl_fwd_parallel(struct ifl_fwd *f, void (*fn)(void *arg, int ith, int nth), void *arg)
{
    ifl_pool_run(f->pool, fn, arg);
}

static int32_t max3(int32_t a, int32_t b, int32_t c)
{
    int32_t m = a > b ? a : b;
    return m > c ? m : c;
}

/* A step whose rows times the model's weight bytes is at most this many
 * runs on the calling thread alone (ifl_pool_run_solo): a decode of a tiny
 * model is a few tens of microseconds of work, and on two threads it met
 * the other some 35 times a step (stories260K: 5 layers). On the loaded
 * 2-core Zen 5 VM (load 12-15), stories260K single-stream decode ran at
 * ~220 tokens/s on two threads against 17-58 thousand on one: each barrier
 * waited for a descheduled thread. IFL_SOLO_BYTES overrides it (0: never
 * alone). Which thread computes what changes no result (mm_chunks), so a
 * solo step gives the bits a shared one does. */
#define SOLO_BYTES (4.0 * 1024 * 1024)

/* The chunk step of matrix w: a multiple of 16 (an x16 group) that keeps
 * its kernel's widest tile whole. */
static int mat_step(const struct ifl_fwd *f, const struct ifl_mat *w)
{
    return w->x16 && f->kn->x16_cols[w->type] > 16 ? f->kn->x16_cols[w->type] : 16;
}

int ifl_fwd_create(struct ifl_fwd **out, const struct ifl_model *m, struct ifl_kv_store *kv,
                   const struct ifl_fwd_config *cfg, char *err)
{
    *out = NULL;
    const struct ifl_hparams *hp = &m->hp;
    if (cfg->max_rows < 1 || cfg->max_rows > (1 << 20) || cfg->max_ctx < 1 ||
        cfg->max_ctx > (1 << 24))
        return ifl_err(err, IFL_EINVAL, "forward: max_rows %d / max_ctx %d out of range",
                       cfg->max_rows, cfg->max_ctx);
    if (kv->n_layer != hp->n_layer || kv->k_dim != hp->n_head_kv * hp->head_dim ||
        kv->v_dim != hp->n_head_kv * hp->head_dim_v)
        return ifl_err(err, IFL_EINVAL, "forward: the KV store does not fit this model");
    struct ifl_fwd *f = calloc(1, sizeof(*f));
    if (!f)
        return ifl_err(err, IFL_ENOMEM, "forward: out of memory");
    f->m = m;
    f->kv = kv;
    f->kn = ifl_kernels_best();
    f->max_rows = cfg->max_rows;
    const char *pre = getenv("IFL_ACT_PRE");
    f->act_pre = !(pre && !strcmp(pre, "0"));
    const char *solo = getenv("IFL_SOLO_BYTES");
    f->solo_bytes = solo && *solo ? atof(solo) : SOLO_BYTES;
    f->max_ctx = cfg->max_ctx;
    f->score_floats = cfg->attn_score_floats > 0 ? cfg->attn_score_floats : ATT_SCORE_FLOATS;
    if (cfg->pool) {
        f->pool = cfg->pool;
    } else {
        int rc = ifl_pool_create(&f->pool, cfg->n_threads);
        if (rc) {
            free(f);
            return ifl_err(err, rc, "forward: cannot start %d threads", cfg->n_threads);
        }
        f->owns_pool = 1;
    }
    size_t R = (size_t)cfg->max_rows;
    int32_t q_dim = hp->n_head * hp->head_dim;
    int32_t k_dim = hp->n_head_kv * hp->head_dim;
    int32_t v_dim = hp->n_head_kv * hp->head_dim_v;
    int32_t o_dim = hp->n_head * hp->head_dim_v;
    f->max_in = max3(hp->n_embd, hp->n_ff, o_dim);
    if (m->layers[0].wo.n_in > f->max_in) /* a shard's whole wo (forward_tp.c) */
        f->max_in = (int32_t)m->layers[0].wo.n_in;
    /* the largest act format is Q8_K: 292 bytes per 256 values; 2 bytes each is ample */
    f->act_row_bytes = ((size_t)f->max_in * 2 + 63) / 64 * 64;
    int nth = ifl_pool_size(f->pool);
    int half = hp->n_rot / 2;
    f->inv_freq = malloc(sizeof(double) * (size_t)(half > 0 ? half : 1));
    f->x = alloc_floats(R * (size_t)hp->n_embd);
    f->xn = alloc_floats(R * (size_t)f->max_in);
    f->act = aligned_alloc(64, R * f->act_row_bytes);
    f->q = alloc_floats(R * (size_t)q_dim);
    f->k = alloc_floats(R * (size_t)k_dim);
    f->v = alloc_floats(R * (size_t)v_dim);
    f->att = alloc_floats(R * (size_t)o_dim);
    f->gate = alloc_floats(R * (size_t)hp->n_ff);
    f->up = alloc_floats(R * (size_t)hp->n_ff);
    f->tmp = alloc_floats(R * (size_t)hp->n_embd);
    f->rope_cs = alloc_floats(R * (size_t)(half > 0 ? half : 1) * 2);
    /* ifl_fwd_attention_blocks holds whole KV groups, at most ATT_QHEADS query heads
     * (a group wider than that goes through ifl_fwd_attention(), one row a thread) */
    const int group = hp->n_head / hp->n_head_kv;
    f->score_heads = group > ATT_QHEADS         ? 1
                     : hp->n_head <= ATT_QHEADS ? hp->n_head
                                                : ATT_QHEADS / group * group;
    f->score_ld = ((size_t)cfg->max_ctx + 15) / 16 * 16 + 16;
    f->scores = alloc_floats((size_t)nth * (size_t)f->score_heads * f->score_ld);
    f->run_rows = (ATT_TILE_QUERIES < f->score_heads ? ATT_TILE_QUERIES : f->score_heads) / group;
    if (f->run_rows < 1)
        f->run_rows = 1;
    if (ifl_fwd_attn_tiled(f)) /* one tiled pass holds a run's queries of one KV head */
        f->run_rows = f->score_heads / group;
    f->att_q = alloc_floats((size_t)nth * (size_t)f->score_heads * (size_t)hp->head_dim);
    f->att_o = alloc_floats((size_t)nth * (size_t)f->score_heads * (size_t)hp->head_dim_v);
    f->att_q8 = malloc((size_t)nth * (size_t)f->score_heads *
                       ifl_type_row_size(IFL_TYPE_Q8_0, (hp->head_dim + 31) / 32 * 32));
    /* a head spans at most its width plus one partial block on each side */
    f->kvtmp_len = (size_t)(hp->head_dim > hp->head_dim_v ? hp->head_dim : hp->head_dim_v) + 64;
    f->kvtmp = alloc_floats((size_t)nth * f->kvtmp_len);
    f->out_rows = malloc(R * sizeof(int32_t));
    /* per layer at most 3 (q, k, v) + 1 (o) + 2 (gate, up) + 1 (down), when
     * no two share an input format; then the output */
    f->n_mm_groups = 7 * hp->n_layer + 1;
    if (m->units) { /* wo and down: a group per unit */
        const struct ifl_units *U = m->units;
        int64_t wide = 0;
        for (int u = 0; u < U->n; u++) {
            int64_t a = U->wo_split ? U->o_off[u + 1] - U->o_off[u] : 0;
            int64_t c = U->ff_off[u + 1] - U->ff_off[u];
            wide = a > wide ? a : wide;
            wide = c > wide ? c : wide;
        }
        f->n_mm_groups = (5 + 2 * U->n) * hp->n_layer + 1;
        f->u_in = alloc_floats(R * (size_t)wide);
        f->u_out = alloc_floats((size_t)(U->n - 1) * R * (size_t)hp->n_embd);
    }
    f->mm_reg = aligned_alloc(64, sizeof(struct mm_region) * (size_t)f->n_mm_groups * (size_t)nth);
    f->run_start = malloc((R + 1) * sizeof(int32_t));
    f->run_share = malloc(((size_t)nth + 1) * sizeof(int32_t));
    f->att_claim = aligned_alloc(64, sizeof(struct mm_region) * (size_t)hp->n_layer * (size_t)nth);
    f->lora_sc = malloc(sizeof(float) * R * (size_t)nth);
    /* rows on every thread (step): fewer rows than threads; IFL_REP_ROWS=0
     * turns it off, to measure what it brings */
    const char *rep_env = getenv("IFL_REP_ROWS");
    f->rep_rows = nth - 1 < cfg->max_rows ? nth - 1 : cfg->max_rows;
    if (rep_env && !strcmp(rep_env, "0"))
        f->rep_rows = 0;
    if (f->rep_rows > 0) {
        const size_t rr = (size_t)f->rep_rows, others = (size_t)(nth - 1);
        f->rep_x = alloc_floats(others * rr * (size_t)hp->n_embd);
        f->rep_xn = alloc_floats(others * rr * (size_t)f->max_in);
        f->rep_act = aligned_alloc(64, others * rr * f->act_row_bytes);
        f->rep_g = alloc_floats((size_t)nth * rr * (size_t)hp->n_ff);
        f->rep_t = alloc_floats((size_t)nth * rr * (size_t)hp->n_embd);
        if (!f->rep_x || !f->rep_xn || !f->rep_act || !f->rep_g || !f->rep_t) {
            ifl_fwd_free(f);
            return ifl_err(err, IFL_ENOMEM, "forward: out of memory for %d rows", cfg->max_rows);
        }
    }
    if (!f->inv_freq || !f->x || !f->xn || !f->act || !f->q || !f->k || !f->v || !f->att ||
        !f->gate || !f->up || !f->tmp || !f->rope_cs || !f->scores || !f->att_q || !f->att_o ||
        !f->att_q8 || !f->kvtmp || !f->out_rows || !f->mm_reg || !f->run_start || !f->run_share ||
        !f->att_claim || !f->lora_sc || (m->units && (!f->u_in || !f->u_out))) {
        ifl_fwd_free(f);
        return ifl_err(err, IFL_ENOMEM, "forward: out of memory for %d rows", cfg->max_rows);
    }
    int rc = ifl_fwd_tp_create(f, cfg, err);
    if (!rc)
        rc = ifl_fwd_moe_create(f, err);
    if (rc) {
        ifl_fwd_free(f);
        return rc;
    }
    if (ifl_fwd_rope_setup(f, cfg)) {
        ifl_fwd_free(f);
        return ifl_err(err, IFL_ENOMEM, "forward: out of memory for %d rows", cfg->max_rows);
    }
    *out = f;
    return 0;
}

/* ---- element-wise pieces (per row) ---- */

static void rmsnorm(float *out, const float *x, const float *w, int n, float eps)
{
    /* four running sums, so the adds overlap (the compiler pairs them) */
    double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += (double)x[i] * x[i];
        s1 += (double)x[i + 1] * x[i + 1];
        s2 += (double)x[i + 2] * x[i + 2];
        s3 += (double)x[i + 3] * x[i + 3];
    }
    for (; i < n; i++)
        s0 += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(((s0 + s1) + (s2 + s3)) / n + eps));
    /* eight at a time through a local, so the compiler may use vectors
     * even when out is x (the per-head q / k norms) */
    for (i = 0; i + 8 <= n; i += 8) {
        float t[8];
        for (int k = 0; k < 8; k++)
            t[k] = x[i + k] * scale * w[i + k];
        memcpy(out + i, t, sizeof t);
    }
    for (; i < n; i++)
        out[i] = x[i] * scale * w[i];
}

/* x += t over n values: the residual stream takes a sub-layer's output. */
static void add_residual(float *x, const float *t, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        float v[8];
        for (int k = 0; k < 8; k++)
            v[k] = x[i + k] + t[i + k];
        memcpy(x + i, v, sizeof v);
    }
    for (; i < n; i++)
        x[i] += t[i];
}

static void rope(float *v, const float *cs, int n_rot, int head_dim, int n_heads, int neox)
{
    int half = n_rot / 2;
    for (int h = 0; h < n_heads; h++) {
        float *hv = v + (size_t)h * head_dim;
        int i = 0;
        /* four pairs at a time through locals, so the compiler may use
         * vectors; the arithmetic per value is the loop's below */
        for (; i + 4 <= half; i += 4) {
            float a[4], b[4], c[4], sn[4], x[4], y[4], t[8];
            if (neox) {
                memcpy(a, hv + i, sizeof a);
                memcpy(b, hv + i + half, sizeof b);
            } else {
                memcpy(t, hv + 2 * i, sizeof t);
                for (int k = 0; k < 4; k++) {
                    a[k] = t[2 * k];
                    b[k] = t[2 * k + 1];
                }
            }
            for (int k = 0; k < 4; k++) {
                c[k] = cs[2 * (i + k)];
                sn[k] = cs[2 * (i + k) + 1];
            }
            for (int k = 0; k < 4; k++) {
                x[k] = a[k] * c[k] - b[k] * sn[k];
                y[k] = a[k] * sn[k] + b[k] * c[k];
            }
            if (neox) {
                memcpy(hv + i, x, sizeof x);
                memcpy(hv + i + half, y, sizeof y);
            } else {
                for (int k = 0; k < 4; k++) {
                    t[2 * k] = x[k];
                    t[2 * k + 1] = y[k];
                }
                memcpy(hv + 2 * i, t, sizeof t);
            }
        }
        for (; i < half; i++) {
            float c = cs[2 * i], s = cs[2 * i + 1];
            int i0 = neox ? i : 2 * i;
            int i1 = neox ? i + half : 2 * i + 1;
            float a = hv[i0], b = hv[i1];
            hv[i0] = a * c - b * s;
            hv[i1] = a * s + b * c;
        }
    }
}

/* ---- matmul: y[r][c] = x[r] . W[c] for r < nr ---- */

/* BF16 weights on the avx512bf16 table: the kernel rounded all the rows
 * of its input to bf16 in every call, and a prompt's matmul group is many
 * calls on each thread (its chunks); converted once by the forward (act
 * rows of bf16, kernels.h act_pre), every call copies the rounded rows
 * instead. The results are the same bits. */
static int mat_pre(const struct ifl_fwd *f, const struct ifl_mat *w)
{
    return w->x16 && f->act_pre && f->kn->act_pre[w->type];
}

enum ifl_type ifl_fwd_act(const struct ifl_fwd *f, const struct ifl_mat *w, ifl_quant_fn *q)
{
    if (mat_pre(f, w)) {
        *q = f->kn->act_pre[w->type];
        return w->type;
    }
    enum ifl_type at = ifl_type_info(w->type)->act;
    *q = at == IFL_TYPE_F32 ? NULL : f->kn->quant[at];
    return at;
}

/* Converts x (nr rows of w->n_in floats) into the kernels' input format for
 * w, unless `act` already holds it. Ends at a barrier when it converted. */
static void mm_prepare(struct job *j, int ith, int nth, struct act_memo *memo,
                       const struct ifl_mat *w, const float *x, int32_t nr)
{
    struct ifl_fwd *f = j->f;
    ifl_quant_fn q;
    enum ifl_type at = ifl_fwd_act(f, w, &q);
    if (at == IFL_TYPE_F32)
        return;
    if (memo->src == x && memo->type == at && memo->nr == nr)
        return;
    long lo, hi;
    ifl_pool_split(nr, ith, nth, &lo, &hi);
    for (long r = lo; r < hi; r++)
        q(x + r * w->n_in, (char *)f->act + r * f->act_row_bytes, w->n_in);
    memo->src = x;
    memo->type = at;
    memo->nr = nr;
    memo->buf = NULL;
    ifl_pool_barrier(f->pool);
}

/* Converts rows [lo, hi) of x into the kernels' input format for w and
 * notes in memo that `act` will hold all nr rows once every thread has
 * done its share: the caller meets the others at a barrier before the
 * matmul (mm_prepare then finds the memo and converts nothing). Lets a
 * thread convert rows it has just written, with no barrier in between. */
static void quant_rows_to(struct job *j, struct act_memo *memo, const struct ifl_mat *w,
                          const float *x, int32_t nr, long lo, long hi, char *buf)
{
    struct ifl_fwd *f = j->f;
    ifl_quant_fn q;
    enum ifl_type at = ifl_fwd_act(f, w, &q);
    if (at == IFL_TYPE_F32)
        return;
    char *dst = buf ? buf : (char *)f->act;
    for (long r = lo; r < hi; r++)
        q(x + r * w->n_in, dst + r * f->act_row_bytes, w->n_in);
    memo->src = x;
    memo->type = at;
    memo->nr = nr;
    memo->buf = buf;
}

void ifl_fwd_quant_rows(struct job *j, struct act_memo *memo, const struct ifl_mat *w,
                        const float *x, int32_t nr, long lo, long hi)
{
    quant_rows_to(j, memo, w, x, nr, lo, hi, NULL);
}

/* One matmul of a group: y = x W^T, y rows ldy apart. */
struct mm_task {
    const struct ifl_mat *w;
    float *y;
    size_t ldy;
};

/* Units of a group's output columns: task i's columns in steps of
 * mat_step, its last unit maybe short, the tasks' units one after another. */
struct mm_units {
    int64_t end[4]; /* task i's units end at end[i] (from the group's first) */
    int step[4];
};

static void mm_units_of(const struct ifl_fwd *f, const struct mm_task *t, int nt,
                        struct mm_units *u)
{
    for (int i = 0; i < nt; i++) {
        u->step[i] = mat_step(f, t[i].w);
        u->end[i] = (i ? u->end[i - 1] : 0) + (t[i].w->n_out + u->step[i] - 1) / u->step[i];
    }
}

/* The task that unit x (below the group's last end) belongs to. */
static int unit_task(const struct mm_units *u, int64_t x)
{
    int i = 0;
    while (u->end[i] <= x)
        i++;
    return i;
}

/* Columns [*c0, *c1) of w that units [x0, x1) of its task i cover. */
static void unit_cols(const struct mm_units *u, int i, const struct ifl_mat *w, int64_t x0,
                      int64_t x1, int64_t *c0, int64_t *c1)
{
    int64_t first = i ? u->end[i - 1] : 0;
    *c0 = (x0 - first) * u->step[i];
    *c1 = (x1 - first) * u->step[i];
    if (*c1 > w->n_out)
        *c1 = w->n_out;
}

/* Thread t's share of the n units: [*lo, *hi). */
static void unit_share(int64_t n, int t, int nth, int64_t *lo, int64_t *hi)
{
    *lo = n * t / nth;
    *hi = n * (t + 1) / nth;
}

/* Takes 1/div of the units left (at least one) from the front of share
 * [lo, hi) (thief 0) or its back (thief 1), within one task; returns how
 * many, 0 when none are left. */
static int64_t take_units(const struct mm_units *u, struct mm_region *r, int64_t lo, int64_t hi,
                          int thief, int div, int64_t *u0)
{
    uint64_t old = atomic_load_explicit(&r->taken, memory_order_relaxed);
    for (;;) {
        int64_t a = (int64_t)(old & 0xffffffffu), b = (int64_t)(old >> 32);
        int64_t left = hi - lo - a - b;
        if (left <= 0)
            return 0;
        int64_t n = left / div < 1 ? 1 : left / div, s = thief ? hi - b - n : lo + a;
        int i = unit_task(u, thief ? hi - b - 1 : s);
        int64_t t0 = i ? u->end[i - 1] : 0;
        if (thief && s < t0)
            s = t0, n = hi - b - t0; /* not into the task before */
        if (!thief && s + n > u->end[i])
            n = u->end[i] - s; /* not into the task after */
        uint64_t nw = thief ? old + ((uint64_t)n << 32) : old + (uint64_t)n;
        if (atomic_compare_exchange_weak_explicit(&r->taken, &old, nw, memory_order_relaxed,
                                                  memory_order_relaxed)) {
            *u0 = s;
            return n;
        }
    }
}

/* Runs the tasks (matmuls over the same converted input) over the threads.
 * Their output columns, in units of a step, are cut into one contiguous
 * share a thread; a thread walks its share from the front in chunks of
 * half of what is left of it (so each call reads on where the last one
 * stopped: the prefetchers keep one stream), and when its share is done,
 * takes chunks from the back of the others' shares, so the threads finish
 * within a short chunk of each other however late one started or slow it
 * ran. Against one counter handing out chunks of the columns left over
 * nth, largest first (the thread that took the first held half of the
 * matrix, and a tinyllama decode's threads waited up to 37 us for each
 * other at a matmul's end), builds alternating on the Zen 5: tinyllama
 * decode Q4_0 +4 %, Q4_K_M +1.6 %, Q8_0 +3 % (its runs swung 26-51
 * tok/s with the VM's bandwidth); prompts and 16-sequence decodes level.
 * Chunks of a quarter of the share left lost 8 % on a small-110m Q4_0
 * prompt (16-row calls of one or two units read their activations again
 * for little work); at one or two rows, chunks of at most 4, 8 or 16
 * units were level. Which thread computes an output changes nothing about
 * how it is computed, so results stay the same. No barrier at the end. */
static void mm_chunks(struct job *j, int g, int ith, int nth, const struct mm_task *t, int nt,
                      const float *x, int32_t nr, const char *act)
{
    struct ifl_fwd *f = j->f;
    ifl_quant_fn q;
    enum ifl_type at = ifl_fwd_act(f, t[0].w, &q);
    const void *xa = x;
    size_t xs = (size_t)t[0].w->n_in * sizeof(float);
    if (at != IFL_TYPE_F32) {
        xa = act ? act : (const char *)f->act;
        xs = f->act_row_bytes;
    }
    struct mm_units u;
    mm_units_of(f, t, nt, &u);
    const int64_t n = u.end[nt - 1];
    for (int v = 0; v < nth; v++) {
        const int victim = (ith + v) % nth, thief = v > 0;
        struct mm_region *r = &f->mm_reg[(size_t)g * (size_t)nth + (size_t)victim];
        int64_t lo, hi, u0, k, c0, c1;
        unit_share(n, victim, nth, &lo, &hi);
        while ((k = take_units(&u, r, lo, hi, thief, thief ? 2 * nth : 2, &u0)) > 0) {
            const int i = unit_task(&u, u0);
            const struct ifl_mat *w = t[i].w;
            unit_cols(&u, i, w, u0, u0 + k, &c0, &c1);
            ifl_gemm_fn gemm = !w->x16         ? f->kn->gemm[w->type]
                               : mat_pre(f, w) ? f->kn->gemm_x16_pre[w->type]
                                               : f->kn->gemm_x16[w->type];
            gemm(w->n_in, nr, (int)(c1 - c0), xa, xs,
                 (const char *)w->data + (size_t)c0 * w->row_bytes, w->row_bytes, t[i].y + c0,
                 t[i].ldy);
        }
    }
}

/* Weight bytes a thread asks for at most while it waits before a matmul
 * group: well within L2, about what one core streams in 10 us. */
#define FETCH_BYTES (256 * 1024)

/* The barrier before matmul group t (nt tasks): while this thread waits
 * there (for the threads still normalising or converting the input, or
 * doing a single row's attention), it asks for the start of its share of
 * the weights, which it reads first (mm_chunks): in a one-row decode the
 * other thread's serial phases took 5-17 us before each group, time in
 * which the memory bus idled. Builds alternating on the Zen 5: tinyllama
 * decode Q4_0 +5 %, Q4_K_M +3 %, Q8_0 level; small-110m decode F16 +3 %,
 * Q4_0 +2 %; prompts and 16-sequence decodes level. */
static void mm_barrier(struct job *j, int ith, int nth, const struct mm_task *t, int nt)
{
    struct ifl_fwd *f = j->f;
    struct mm_units u;
    mm_units_of(f, t, nt, &u);
    int64_t lo, hi, c0, c1;
    unit_share(u.end[nt - 1], ith, nth, &lo, &hi);
    if (lo == hi) {
        ifl_pool_barrier(f->pool);
        return;
    }
    const int i = unit_task(&u, lo);
    const struct ifl_mat *w = t[i].w;
    unit_cols(&u, i, w, lo, hi < u.end[i] ? hi : u.end[i], &c0, &c1);
    size_t bytes = c1 > c0 ? (size_t)(c1 - c0) * w->row_bytes : 0;
    ifl_pool_barrier_fetch(f->pool, (const char *)w->data + (size_t)c0 * w->row_bytes,
                           bytes < FETCH_BYTES ? bytes : FETCH_BYTES);
}

/* y_i = x W_i^T for up to four matmuls on the same input x: converts x
 * once per input format and shares the columns of all of them out between
 * the threads. Tasks whose weights want another input format wait at a
 * barrier until the previous ones are done with the converted input. No
 * barrier at the end. */
static void mm_group(struct job *j, int ith, int nth, struct act_memo *memo, int *grp,
                     const float *x, int32_t nr, const struct mm_task *t, int nt)
{
    for (int i = 0; i < nt;) {
        ifl_quant_fn q;
        enum ifl_type at = ifl_fwd_act(j->f, t[i].w, &q);
        int k = i + 1;
        while (k < nt && ifl_fwd_act(j->f, t[k].w, &q) == at)
            k++;
        if (i > 0)
            ifl_pool_barrier(j->f->pool);
        mm_prepare(j, ith, nth, memo, t[i].w, x, nr);
        mm_chunks(j, (*grp)++, ith, nth, t + i, k - i, x, nr, memo->buf);
        i = k;
    }
}

/* y = x W^T for attn_output or ffn_down summed as the ranks of a tensor
 * parallel job sum it (model.h, ifl_units): unit u's product of its
 * columns [off[u], off[u + 1]) of x (nr rows, ldx apart), each with the
 * kernel a rank runs on the same slice, then the products added in rank
 * order, as the job's all-reduce adds them (two ranks: one addition,
 * which commutes). Ends with y complete in this thread's rows; no
 * barrier at the end. */
static void mm_units(struct job *j, int ith, int nth, int *grp, const struct ifl_mat *um,
                     const int64_t *off, const float *x, size_t ldx, int32_t nr, float *y,
                     size_t ldy)
{
    struct ifl_fwd *f = j->f;
    const int n = f->m->units->n;
    long lo, hi;
    ifl_pool_split(nr, ith, nth, &lo, &hi);
    /* x is complete: attention split by heads writes every row's columns
     * from every thread */
    ifl_pool_barrier(f->pool);
    for (int u = 0; u < n; u++) {
        const size_t w = (size_t)(off[u + 1] - off[u]);
        for (long r = lo; r < hi; r++)
            memcpy(f->u_in + (size_t)r * w, x + (size_t)r * ldx + off[u], sizeof(float) * w);
        struct act_memo memo = {0};
        const struct mm_task t = {&um[u], u ? f->u_out + (size_t)(u - 1) * (size_t)nr * ldy : y,
                                  ldy};
        mm_barrier(j, ith, nth, &t, 1); /* every row's columns are in u_in */
        mm_group(j, ith, nth, &memo, grp, f->u_in, nr, &t, 1);
        ifl_pool_barrier(f->pool); /* u_in is the next unit's */
    }
    const int64_t n_out = um[0].n_out;
    for (long r = lo; r < hi; r++)
        for (int u = 1; u < n; u++) {
            const float *p = f->u_out + ((size_t)(u - 1) * (size_t)nr + (size_t)r) * ldy;
            float *q = y + (size_t)r * ldy;
            for (int64_t c = 0; c < n_out; c++)
                q[c] += p[c];
        }
}

/* ---- the step ---- */

/* Row r's q, k and v of KV heads [h0, h1) (with their query heads) made
 * ready for attention: biases, the per-head norms, rotary positions. */
static void qkv_ready(struct job *j, int il, long r, int h0, int h1)
{
    const struct ifl_layer_weights *w = &j->f->m->layers[il];
    struct ifl_fwd *f = j->f;
    const struct ifl_hparams *hp = &f->m->hp;
    const int hd = hp->head_dim, hdv = hp->head_dim_v, group = hp->n_head / hp->n_head_kv;
    const int q_dim = hp->n_head * hd, k_dim = hp->n_head_kv * hd, v_dim = hp->n_head_kv * hdv;
    const int qa = h0 * group * hd, qb = h1 * group * hd;
    float *q = f->q + r * q_dim, *k = f->k + r * k_dim, *v = f->v + r * v_dim;
    if (w->bq) {
        for (int i = qa; i < qb; i++)
            q[i] += w->bq[i];
        for (int i = h0 * hd; i < h1 * hd; i++)
            k[i] += w->bk[i];
        for (int i = h0 * hdv; i < h1 * hdv; i++)
            v[i] += w->bv[i];
    }
    if (w->q_norm) {
        for (int h = h0 * group; h < h1 * group; h++)
            rmsnorm(q + h * hd, q + h * hd, w->q_norm, hd, hp->rms_eps);
        for (int h = h0; h < h1; h++)
            rmsnorm(k + h * hd, k + h * hd, w->k_norm, hd, hp->rms_eps);
    }
    const float *cs = (f->rope_cs_swa && ifl_hp_swa(hp, il) ? f->rope_cs_swa : f->rope_cs) +
                      r * (hp->n_rot / 2) * 2;
    rope(q + qa, cs, hp->n_rot, hd, (h1 - h0) * group, hp->rope_neox);
    rope(k + h0 * hd, cs, hp->n_rot, hd, h1 - h0, hp->rope_neox);
}

/* The adapted matrices of each matmul group (enum ifl_lora_target); the
 * output's group passes one entry, which lmat ignores for il -1. */
static const int T_QKV[3] = {IFL_LORA_WQ, IFL_LORA_WK, IFL_LORA_WV};
static const int T_O[1] = {IFL_LORA_WO};
static const int T_GU[2] = {IFL_LORA_GATE, IFL_LORA_UP};
static const int T_D[1] = {IFL_LORA_DOWN};

static void step(void *arg, int ith, int nth)
{
    struct job *j = arg;
    struct ifl_fwd *f = j->f;
    const struct ifl_batch *b = j->b;
    const struct ifl_model *m = f->m;
    const struct ifl_hparams *hp = &m->hp;
    const int32_t nr = b->n_rows;
    const int n_embd = hp->n_embd, n_ff = hp->n_ff, half = hp->n_rot / 2;
    const int q_dim = hp->n_head * hp->head_dim, k_dim = hp->n_head_kv * hp->head_dim;
    const int v_dim = hp->n_head_kv * hp->head_dim_v;
    struct act_memo memo = {0};
    int grp = 0; /* matmul groups this thread has been through */
    /* fewer rows than threads: the threads share each row's attention out
     * by KV heads, where otherwise one would take it alone */
    const int heads_split = nr < nth && ifl_fwd_attn_blocked(f);
    /* a shard that keeps wo whole: attention converts nothing for it (an
     * F32 shape of this rank's heads), wo reads the gathered outputs */
    const int wo_whole = f->shard && f->shard->wo_whole;
    long lo, hi;
    ifl_pool_split(nr, ith, nth, &lo, &hi);
    /* Rows on every thread: with fewer rows than threads (a decode), each
     * thread runs every row's element-wise phases (residual adds, norms,
     * the conversion of a matmul's input, SwiGLU) itself, into buffers of
     * its own (thread 0's are the shared ones, which the output phase and
     * the heads' attention read), so a matmul that takes such an input
     * needs no barrier before it: per layer the barriers before q/k/v,
     * gate/up and down go, five are left of eight. The threads compute
     * the same values in the same order, so nothing changes in the
     * results. Paths that read the shared rows elsewhere (adapters,
     * experts, tensor parallelism, extraction) keep the plain phases. */
    const int rep = heads_split && nr <= f->rep_rows && !b->n_lora && !f->moe && !f->shard &&
                    !m->units && !b->n_extract;
    /* this thread's rows of the element-wise phases, and their buffers */
    long elo = lo, ehi = hi;
    float *x = f->x, *xn = f->xn;
    char *act = NULL; /* NULL: f->act */
    float *rg = NULL, *rt = NULL;
    if (rep) {
        elo = 0;
        ehi = nr;
        rg = f->rep_g + (size_t)ith * (size_t)f->rep_rows * (size_t)n_ff;
        rt = f->rep_t + (size_t)ith * (size_t)f->rep_rows * (size_t)n_embd;
        if (ith > 0) {
            const size_t t = (size_t)(ith - 1) * (size_t)f->rep_rows;
            x = f->rep_x + t * (size_t)n_embd;
            xn = f->rep_xn + t * (size_t)f->max_in;
            act = f->rep_act + t * f->act_row_bytes;
        }
    }

    /* embeddings and rotary angles; each thread's rows stay its own for
     * every per-row phase below, so those need no barrier between them */
    for (long r = elo; r < ehi; r++) {
        const struct ifl_mat *te = &m->tok_embd;
        if (b->embd && b->embd[r]) { /* an image's row: given, not looked up (nor scaled) */
            memcpy(x + r * n_embd, b->embd[r], sizeof(float) * (size_t)n_embd);
        } else {
            f->kn->dequant[te->type]((const char *)te->data + (size_t)b->tokens[r] * te->row_bytes,
                                     x + r * n_embd, n_embd);
            if (b->n_lora)
                ifl_fwd_lora_embed(j, r);
            if (hp->emb_scale != 1.0f)
                for (int i = 0; i < n_embd; i++)
                    x[r * n_embd + i] *= hp->emb_scale;
        }
    }
    for (long r = lo; r < hi; r++) { /* the row's owner alone: read after barriers */
        float *cs = f->rope_cs + r * half * 2;
        for (int i = 0; i < half; i++) {
            double th = (double)b->pos[r] * f->inv_freq[i];
            cs[2 * i] = (float)cos(th) * f->rope_mscale;
            cs[2 * i + 1] = (float)sin(th) * f->rope_mscale;
        }
        if (f->rope_cs_swa) {
            cs = f->rope_cs_swa + r * half * 2;
            for (int i = 0; i < half; i++) {
                double th = (double)b->pos[r] * f->inv_freq_swa[i];
                cs[2 * i] = (float)cos(th) * f->rope_mscale;
                cs[2 * i + 1] = (float)sin(th) * f->rope_mscale;
            }
        }
    }

    for (int il = 0; il < hp->n_layer; il++) {
        const struct ifl_layer_weights *w = &m->layers[il];
        if (b->n_extract) /* this thread's rows' residual stream, as it enters layer il */
            for (int i = 0; i < b->n_extract; i++)
                if (b->extract_layers[i] == il)
                    for (long r = lo; r < hi; r++)
                        if (b->extract_rows[r])
                            memcpy(b->extract_out + ((size_t)r * b->n_extract + i) * n_embd,
                                   f->x + r * n_embd, sizeof(float) * (size_t)n_embd);
        for (long r = elo; r < ehi; r++)
            rmsnorm(xn + r * n_embd, x + r * n_embd, w->attn_norm, n_embd, hp->rms_eps);
        memo.src = NULL;
        quant_rows_to(j, &memo, &w->wq, xn, nr, elo, ehi, act);
        const struct mm_task qkv[3] = {{&w->wq, f->q, (size_t)q_dim},
                                       {&w->wk, f->k, (size_t)k_dim},
                                       {&w->wv, f->v, (size_t)v_dim}};
        if (!rep)
            mm_barrier(j, ith, nth, qkv, 3);
        const int lqkv = b->n_lora && ifl_fwd_lora_any(f, b, il, T_QKV, 3);
        if (lqkv)
            ifl_fwd_lora_a(j, ith, nth, il, T_QKV, 3, f->xn, (size_t)n_embd, &memo);
        mm_group(j, ith, nth, &memo, &grp, xn, nr, qkv, 3);
        ifl_pool_barrier(f->pool);
        if (lqkv) {
            float *const y[3] = {f->q, f->k, f->v};
            const size_t ld[3] = {(size_t)q_dim, (size_t)k_dim, (size_t)v_dim};
            ifl_fwd_lora_b_rows(j, ith, il, T_QKV, 3, y, ld, lo, hi);
            if (heads_split) /* the heads of every row are next */
                ifl_pool_barrier(f->pool);
        }
        if (heads_split) {
            /* this thread's KV heads of every row, from q, k and v to att:
             * it reads only the heads it stored, so no barrier between */
            int h0 = hp->n_head_kv * ith / nth, h1 = hp->n_head_kv * (ith + 1) / nth;
            for (long r = 0; r < nr; r++)
                qkv_ready(j, il, r, h0, h1);
            ifl_fwd_store_kv(j, il, 0, nr, h0, h1);
            ifl_fwd_attention_blocks(j, ith, nth, il, &memo, wo_whole ? &f->att_shape : &w->wo, 1,
                                     h0, h1);
        } else {
            for (long r = lo; r < hi; r++)
                qkv_ready(j, il, r, 0, hp->n_head_kv);
            ifl_fwd_store_kv(j, il, lo, hi, 0, hp->n_head_kv);
            ifl_pool_barrier(f->pool);
            ifl_fwd_attention(j, ith, nth, il, &memo, wo_whole ? &f->att_shape : &w->wo);
        }
        const float *att = f->att;
        if (wo_whole) {
            ifl_fwd_tp_att(j, ith, nr);
            att = f->att_full;
            memo.src = NULL;
        }
        const struct mm_task o = {&w->wo, f->tmp, (size_t)n_embd};
        const struct ifl_units *U = m->units;
        const int lo_ = b->n_lora && ifl_fwd_lora_any(f, b, il, T_O, 1);
        if (U && U->wo_split) { /* summed as the ranks of a job do */
            mm_units(j, ith, nth, &grp, &U->wo[(size_t)il * U->n], U->o_off, att,
                     (size_t)w->wo.n_in, nr, f->tmp, (size_t)n_embd);
            memo.src = NULL;
        } else {
            mm_barrier(j, ith, nth, &o, 1);
            if (lo_)
                ifl_fwd_lora_a(j, ith, nth, il, T_O, 1, f->att, (size_t)w->wo.n_in, &memo);
            mm_group(j, ith, nth, &memo, &grp, att, nr, &o, 1);
        }
        ifl_pool_barrier(f->pool);
        if (lo_) {
            float *const y[1] = {f->tmp};
            const size_t ld[1] = {(size_t)n_embd};
            ifl_fwd_lora_b_rows(j, ith, il, T_O, 1, y, ld, lo, hi);
        }
        if (f->shard && !wo_whole) /* the heads' partial products summed */
            ifl_fwd_tp_reduce(j, ith, f->tmp, (size_t)nr * (size_t)n_embd);
        for (long r = elo; r < ehi; r++) {
            /* with rows on every thread, tmp is read by all: changed in a copy */
            float *t = f->tmp + r * n_embd;
            if (rep && (w->bo || w->attn_post_norm)) {
                memcpy(rt + r * n_embd, t, sizeof(float) * (size_t)n_embd);
                t = rt + r * n_embd;
            }
            if (w->bo) /* after the shards' sum: added once */
                add_residual(t, w->bo, n_embd);
            if (w->attn_post_norm)
                rmsnorm(t, t, w->attn_post_norm, n_embd, hp->rms_eps);
            add_residual(x + r * n_embd, t, n_embd);
            rmsnorm(xn + r * n_embd, x + r * n_embd, w->ffn_norm, n_embd, hp->rms_eps);
        }
        memo.src = NULL; /* xn now holds the ffn input */
        if (f->moe) {    /* experts (forward_moe.c) instead of one FFN */
            ifl_fwd_moe(j, ith, nth, il, lo, hi);
            if (f->shard) { /* the ranks' weighted partial sums added */
                ifl_pool_barrier(f->pool);
                ifl_fwd_tp_reduce(j, ith, f->tmp, (size_t)nr * (size_t)n_embd);
            }
            for (long r = lo; r < hi; r++)
                add_residual(f->x + r * n_embd, f->tmp + r * n_embd, n_embd);
            continue;
        }
        quant_rows_to(j, &memo, &w->w_gate, xn, nr, elo, ehi, act);
        const struct mm_task gu[2] = {{&w->w_gate, f->gate, (size_t)n_ff},
                                      {&w->w_up, f->up, (size_t)n_ff}};
        if (!rep)
            mm_barrier(j, ith, nth, gu, 2);
        const int lgu = b->n_lora && ifl_fwd_lora_any(f, b, il, T_GU, 2);
        if (lgu)
            ifl_fwd_lora_a(j, ith, nth, il, T_GU, 2, f->xn, (size_t)n_embd, &memo);
        mm_group(j, ith, nth, &memo, &grp, xn, nr, gu, 2);
        ifl_pool_barrier(f->pool);
        if (lgu) {
            float *const y[2] = {f->gate, f->up};
            const size_t ld[2] = {(size_t)n_ff, (size_t)n_ff};
            ifl_fwd_lora_b_rows(j, ith, il, T_GU, 2, y, ld, lo, hi);
        }
        /* the FFN product, in gate (in a copy with rows on every thread) */
        float *g = f->gate;
        if (rep) {
            g = rg;
            memcpy(g, f->gate, sizeof(float) * (size_t)nr * (size_t)n_ff);
        }
        for (long r = elo; r < ehi; r++)
            if (hp->ffn_gelu)
                f->kn->geglu(n_ff, g + r * n_ff, f->up + r * n_ff);
            else
                f->kn->swiglu(n_ff, g + r * n_ff, f->up + r * n_ff);
        const int ld_ = b->n_lora && ifl_fwd_lora_any(f, b, il, T_D, 1);
        if (U) { /* summed as the ranks of a job do */
            mm_units(j, ith, nth, &grp, &U->down[(size_t)il * U->n], U->ff_off, f->gate,
                     (size_t)n_ff, nr, f->tmp, (size_t)n_embd);
            memo.src = NULL;
        } else {
            quant_rows_to(j, &memo, &w->w_down, g, nr, elo, ehi, act);
            const struct mm_task d = {&w->w_down, f->tmp, (size_t)n_embd};
            if (!rep)
                mm_barrier(j, ith, nth, &d, 1);
            if (ld_)
                ifl_fwd_lora_a(j, ith, nth, il, T_D, 1, f->gate, (size_t)n_ff, &memo);
            mm_group(j, ith, nth, &memo, &grp, g, nr, &d, 1);
        }
        ifl_pool_barrier(f->pool);
        if (ld_) {
            float *const y[1] = {f->tmp};
            const size_t ld[1] = {(size_t)n_embd};
            ifl_fwd_lora_b_rows(j, ith, il, T_D, 1, y, ld, lo, hi);
        }
        if (f->shard) /* the n_ff slices' partial products summed */
            ifl_fwd_tp_reduce(j, ith, f->tmp, (size_t)nr * (size_t)n_embd);
        for (long r = elo; r < ehi; r++) {
            float *t = f->tmp + r * n_embd;
            if (rep && w->ffn_post_norm) {
                memcpy(rt + r * n_embd, t, sizeof(float) * (size_t)n_embd);
                t = rt + r * n_embd;
            }
            if (w->ffn_post_norm)
                rmsnorm(t, t, w->ffn_post_norm, n_embd, hp->rms_eps);
            add_residual(x + r * n_embd, t, n_embd);
        }
    }
    ifl_pool_barrier(f->pool); /* the output rows below are any thread's */

    if (j->n_out == 0)
        return;
    long olo, ohi;
    ifl_pool_split(j->n_out, ith, nth, &olo, &ohi);
    for (long i = olo; i < ohi; i++) {
        rmsnorm(f->xn + i * n_embd, f->x + (size_t)f->out_rows[i] * n_embd, m->out_norm, n_embd,
                hp->rms_eps);
        if (b->hidden)
            memcpy(b->hidden + i * n_embd, f->xn + i * n_embd, sizeof(float) * (size_t)n_embd);
    }
    memo.src = NULL;
    ifl_fwd_quant_rows(j, &memo, &m->output, f->xn, j->n_out, olo, ohi);
    /* a shard's rows of the vocabulary go to its own buffer, then to rank 0 */
    const struct mm_task out = {&m->output, f->shard ? f->tp_logits : j->logits,
                                (size_t)m->output.n_out};
    mm_barrier(j, ith, nth, &out, 1);
    const int lout = b->n_lora && ifl_fwd_lora_any(f, b, -1, T_D, 1);
    if (lout)
        ifl_fwd_lora_a(j, ith, nth, -1, T_D, 1, f->xn, (size_t)n_embd, &memo);
    mm_group(j, ith, nth, &memo, &grp, f->xn, j->n_out, &out, 1);
    if (lout) {
        ifl_pool_barrier(f->pool);
        float *const y[1] = {j->logits};
        const size_t ld[1] = {(size_t)m->output.n_out};
        ifl_fwd_lora_b(j, ith, nth, -1, T_D, 1, y, ld);
    }
    if (f->shard)
        ifl_fwd_tp_logits(j, ith, nth);
    if (hp->final_softcap > 0 && j->logits) { /* gemma2: on whole rows, after every sum */
        ifl_pool_barrier(f->pool);
        for (long i = olo; i < ohi; i++)
            ifl_fwd_softcap(j->logits + i * hp->n_vocab, hp->n_vocab, hp->final_softcap);
    }
}

static int check_batch(const struct ifl_fwd *f, const struct ifl_batch *b, char *err)
{
    const struct ifl_hparams *hp = &f->m->hp;
    if (b->n_rows < 1 || b->n_rows > f->max_rows)
        return ifl_err(err, IFL_EINVAL, "forward: %d rows, expected 1..%d", b->n_rows, f->max_rows);
    if (b->n_extract < 0 || b->n_extract > 8 ||
        (b->n_extract && (!b->extract_layers || !b->extract_rows || !b->extract_out)))
        return ifl_err(err, IFL_EINVAL, "forward: %d extract layers (0..8, with their arrays)",
                       b->n_extract);
    for (int32_t i = 0; i < b->n_extract; i++)
        if (b->extract_layers[i] < 0 || b->extract_layers[i] >= hp->n_layer)
            return ifl_err(err, IFL_EINVAL, "forward: extract layer %d outside 0..%d",
                           b->extract_layers[i], hp->n_layer - 1);
    if (b->n_lora < 0 || (b->n_lora && (!b->lora || !b->lora_scale)))
        return ifl_err(err, IFL_EINVAL, "forward: %d adapters (with their arrays)", b->n_lora);
    for (int32_t i = 0; i < b->n_lora; i++)
        if (!b->lora[i] || b->lora[i]->base != f->m)
            return ifl_err(err, IFL_EINVAL, "forward: adapter %d was not made for this model", i);
    for (size_t i = 0; i < (size_t)b->n_lora * (size_t)b->n_rows; i++)
        if (!isfinite(b->lora_scale[i]))
            return ifl_err(err, IFL_EINVAL, "forward: row %zu: adapter %zu's scale is not finite",
                           i / (size_t)b->n_lora, i % (size_t)b->n_lora);
    if (b->embd && f->shard) /* src/dist/tp.c sends the other ranks tokens, not rows */
        return ifl_err(err, IFL_EUNSUPPORTED,
                       "forward: input embedding rows are not supported with tensor parallelism");
    const int all_swa = ifl_hp_all_swa(hp);
    for (int32_t r = 0; r < b->n_rows; r++) {
        int32_t t = b->tokens[r], p = b->pos[r], s = b->seq[r];
        if (t < 0 || t >= hp->n_vocab)
            return ifl_err(err, IFL_EINVAL, "forward: row %d: token %d outside vocabulary of %d", r,
                           t, hp->n_vocab);
        if (p < 0 || p >= f->max_ctx)
            return ifl_err(err, IFL_EINVAL, "forward: row %d: position %d outside 0..%d", r, p,
                           f->max_ctx - 1);
        if (s < 0 || s >= b->n_seqs)
            return ifl_err(err, IFL_EINVAL, "forward: row %d: sequence %d of %d", r, s, b->n_seqs);
        int32_t last = p; /* the last cache place the row reads or writes */
        if (b->kv_pos) {
            int32_t kp = b->kv_pos[r], c = b->att_prefix[r], o = b->tree_off[r];
            if (kp < 0 || kp >= f->max_ctx || c < 1 || c > p + 1 || (c == p + 1 && kp != p) ||
                (c <= p && (o < 0 || o > b->n_tree_path - (p + 1 - c))))
                return ifl_err(err, IFL_EINVAL,
                               "forward: row %d: cache place %d, prefix %d, path at %d of %d do "
                               "not fit position %d",
                               r, kp, c, o, b->n_tree_path, p);
            for (int32_t u = c; u <= p; u++) {
                int32_t pl = b->tree_path[o + u - c];
                if (pl < c || pl >= f->max_ctx || (u == p && pl != kp))
                    return ifl_err(err, IFL_EINVAL,
                                   "forward: row %d: tree path place %d for position %d", r, pl, u);
                last = pl > last ? pl : last;
            }
            last = kp > last ? kp : last;
        }
        int32_t need = last / f->kv->block_size + 1;
        if (need > b->n_blocks[s])
            return ifl_err(err, IFL_EINVAL,
                           "forward: row %d: position %d needs %d blocks, sequence %d has %d", r,
                           last, need, s, b->n_blocks[s]);
        /* blocks wholly before every layer's window may be given back
         * (-1): no row reads them (ifl_hp_kv_read_from) */
        for (int32_t i = ifl_hp_kv_read_from(hp, all_swa, p, f->kv->block_size) / f->kv->block_size;
             i < need; i++) {
            int32_t blk = b->block_tables[s][i];
            if (blk < 0 || blk >= f->kv->n_blocks)
                return ifl_err(err, IFL_EINVAL, "forward: sequence %d: block %d outside 0..%d", s,
                               blk, f->kv->n_blocks - 1);
        }
    }
    return 0;
}

int ifl_forward(struct ifl_fwd *f, const struct ifl_batch *b, float *logits, char *err)
{
    int rc = check_batch(f, b, err);
    if (rc)
        return rc;
    char tp_err[IFL_ERR_LEN] = "";
    struct job j = {.f = f, .b = b, .logits = logits, .tp_err = tp_err};
    for (int32_t r = 0; r < b->n_rows; r++)
        if (b->logits && b->logits[r])
            f->out_rows[j.n_out++] = r;
    if (b->n_lora && (rc = ifl_fwd_lora_segments(f, b, j.n_out, err)))
        return rc;
    /* the attention runs, and each thread's share of them: contiguous,
     * cut where the cost (positions attended, plus a fixed part per row)
     * crosses a thread's fraction */
    const int nall = ifl_pool_size(f->pool);
    const int solo =
        nall > 1 && !f->shard && (double)b->n_rows * (double)f->m->weight_bytes <= f->solo_bytes;
    const int nth = solo ? 1 : nall;
    long total = 0, cum = 0;
    for (int32_t r = 0; r < b->n_rows; r++)
        total += b->pos[r] + 1 + 16;
    f->n_runs = 0;
    int t = 0;
    f->run_share[0] = 0;
    for (long r = 0, nr; r < b->n_rows; r += nr) {
        nr = ifl_fwd_attn_run(f, b, r);
        long cost = 0;
        for (long i = r; i < r + nr; i++)
            cost += b->pos[i] + 1 + 16;
        /* this run goes to the thread whose fraction holds its middle */
        while (t + 1 < nth && (cum + cost / 2) * nth / total > t)
            f->run_share[++t] = f->n_runs;
        cum += cost;
        f->run_start[f->n_runs++] = (int32_t)r;
    }
    f->run_start[f->n_runs] = b->n_rows;
    while (t < nth)
        f->run_share[++t] = f->n_runs;
    /* published by the job's start */
    for (int g = 0; g < f->n_mm_groups * nall; g++)
        atomic_store_explicit(&f->mm_reg[g].taken, 0, memory_order_relaxed);
    for (int i = 0; i < f->m->hp.n_layer * nall; i++)
        atomic_store_explicit(&f->att_claim[i].taken, 0, memory_order_relaxed);
    if (solo)
        ifl_pool_run_solo(f->pool, step, &j);
    else
        ifl_pool_run(f->pool, step, &j);
    if (j.tp_rc)
        return ifl_err(err, j.tp_rc, "%s", tp_err);
    return 0;
}
