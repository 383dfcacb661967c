/*
 * A rank's share of a model for tensor parallelism (model.h, ifl_model_shard),
 * split the Megatron way so that each layer needs two sums over the ranks:
 *
 *   wq, wk, wv   rows of this rank's KV heads (and their query heads): the
 *                rank computes attention for those heads alone;
 *   wo           the matching input columns: x Wo^T is the sum over ranks
 *                of each rank's heads times its columns (one all-reduce);
 *   gate, up     rows [ff0, ff0 + n_ff_local) of n_ff;
 *   down         the matching input columns (the second all-reduce);
 *   output       rows of the vocabulary, the logits gathered to rank 0.
 *
 * Row slices are views into the mapping: only their pages are ever read,
 * so only they become resident. Column slices are copied row by row into
 * memory of the rank's own, and the mapping's pages of the whole matrix are
 * released. A column slice must start and end on whole blocks of the
 * weight type and of its activation format (the kernels quantise the
 * input in those blocks), so that each block's product is the one the
 * whole matrix computes and only the order of the final sum changes.
 *
 * The n_ff split is cut on ffn_down's blocks (256 elements for the K
 * quants, and 16 rows at least, whole x16 groups of gate and up), unevenly
 * if it must.
 *
 * Experts split the same way, each expert's n_ff alike: a rank holds rows
 * [ff0, ff0 + n_ff_local) of every expert's gate and up (gathered into a
 * copy of its own: the stacked tensor's rows of one expert are
 * consecutive, the rank's of all experts are not), the matching columns of
 * every expert's down, the same slices of gate's and up's biases, and
 * down's biases on rank 0 alone (added once, before the sum). The router
 * is whole on every rank, so every rank picks the same experts; each sums
 * its partial outputs of them, weighted, and one all-reduce adds the
 * ranks' sums, as for a dense FFN. The heads of attn_output cannot move: when
 * a KV-head group's columns are not whole blocks (a 32-wide head group of
 * a Q4_K model), the rank keeps all of wo and the attention outputs are
 * gathered instead (forward_tp.c).
 */
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "model/model.h"

/* The elements a column slice of w must be a multiple of. */
static int64_t col_unit(const struct ifl_mat *w)
{
    const struct ifl_type_info *ti = ifl_type_info(w->type);
    const struct ifl_type_info *ai = ifl_type_info(ti->act);
    return ti->blck > ai->blck ? ti->blck : ai->blck; /* 1, 32 or 256: the larger is a multiple */
}

void ifl_model_shard_free(struct ifl_shard *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->n_copies; i++)
        free(s->copies[i]);
    free(s->copies);
    free(s->copy_of);
    free(s->v_off);
    free(s);
}

static void row_slice(struct ifl_mat *w, int64_t r0, int64_t n)
{
    w->data = (const char *)w->data + (size_t)r0 * w->row_bytes;
    w->n_out = n;
}

/* Columns [c0, c0 + n) of every row of w, copied into memory of their
 * own; NULL (and err) when out of memory. */
static char *copy_cols(const struct ifl_mat *w, int64_t c0, int64_t n, size_t *rb, char *err)
{
    size_t off = ifl_type_row_size(w->type, c0);
    *rb = ifl_type_row_size(w->type, n);
    char *p = aligned_alloc(64, ((size_t)w->n_out * *rb + 63) / 64 * 64);
    if (!p) {
        ifl_err(err, IFL_ENOMEM, "shard: out of memory for a slice of %zu bytes",
                (size_t)w->n_out * *rb);
        return NULL;
    }
    for (int64_t i = 0; i < w->n_out; i++)
        memcpy(p + (size_t)i * *rb, (const char *)w->data + (size_t)i * w->row_bytes + off, *rb);
    return p;
}

static int col_slice(struct ifl_model *m, struct ifl_shard *s, struct ifl_mat *w, int64_t c0,
                     int64_t n, char *err)
{
    size_t rb;
    char *p = copy_cols(w, c0, n, &rb, err);
    if (!p)
        return IFL_ENOMEM;
    ifl_gguf_release(m->gguf, w->data, (size_t)w->n_out * w->row_bytes);
    s->copies[s->n_copies] = p;
    s->copy_of[s->n_copies++] = w;
    w->data = p;
    w->n_in = n;
    w->row_bytes = rb;
    return 0;
}

/* How size ranks split a model: what ifl_model_shard and
 * ifl_model_sum_units both check and cut by. */
struct plan {
    int64_t ff_unit; /* n_ff is cut on multiples of this */
    int64_t nb;      /* n_ff in those blocks */
    int64_t o_per;   /* attn_output columns of a rank's heads */
    int group, kvl;  /* query heads per KV head; KV heads per rank */
    int wo_whole;    /* those columns are not whole blocks of wo's type */
};

static int plan_split(const struct ifl_model *m, int size, struct plan *p, char *err)
{
    const struct ifl_hparams *hp = &m->hp;
    if (hp->n_head_kv % size)
        return ifl_err(err, IFL_EUNSUPPORTED,
                       "tensor parallelism over %d ranks: the model has %d KV heads, which %d "
                       "ranks cannot share evenly (--tp must divide the KV heads)",
                       size, hp->n_head_kv, size);
    /* 16 at least: gate's and up's rows of a rank then start on a group of
     * 16 of the whole matrix's, so that a row's product comes from the
     * same kernel (x16 groups and the rows after them are computed by
     * different code, which for float weights adds in another order) */
    p->ff_unit = 16;
    p->wo_whole = 0;
    p->group = hp->n_head / hp->n_head_kv;
    p->kvl = hp->n_head_kv / size;
    p->o_per = (int64_t)p->kvl * p->group * hp->head_dim_v;
    for (int il = 0; il < hp->n_layer; il++) {
        const struct ifl_layer_weights *w = &m->layers[il];
        int64_t u = col_unit(w->down_exps.data ? &w->down_exps : &w->w_down);
        p->ff_unit = u > p->ff_unit ? u : p->ff_unit;
        p->wo_whole |= p->o_per % col_unit(&m->layers[il].wo) != 0;
    }
    /* an expert's rows of gate and up must be whole x16 groups of the
     * stacked tensor in the whole model and in the shard alike */
    if (hp->n_expert && hp->n_ff % p->ff_unit)
        return ifl_err(err, IFL_EUNSUPPORTED,
                       "tensor parallelism over %d ranks: each expert's %d FFN rows are not "
                       "whole blocks of %lld for ffn_down_exps' type",
                       size, hp->n_ff, (long long)p->ff_unit);
    p->nb = hp->n_ff / p->ff_unit;
    if (p->nb < size)
        return ifl_err(err, IFL_EUNSUPPORTED,
                       "tensor parallelism over %d ranks: the FFN's %d rows are %lld blocks of "
                       "%lld for ffn_down's type, fewer than the ranks",
                       size, hp->n_ff, (long long)p->nb, (long long)p->ff_unit);
    return 0;
}

/* Rank r's first row of n_ff (r = size: n_ff; the last rank takes the
 * rows after the last whole unit, which only float weights have). */
static int64_t plan_ff0(const struct plan *p, const struct ifl_hparams *hp, int r, int size)
{
    return r == size ? hp->n_ff : p->nb * r / size * p->ff_unit;
}

/* Rows [ff0, ff0 + n) of each of the n_exp experts of the stacked w (each
 * n_ff rows), gathered into memory of their own. */
static int expert_rows(struct ifl_model *m, struct ifl_shard *s, struct ifl_mat *w, int n_exp,
                       int64_t n_ff, int64_t ff0, int64_t n, char *err)
{
    char *p = aligned_alloc(64, ((size_t)n_exp * (size_t)n * w->row_bytes + 63) / 64 * 64);
    if (!p)
        return ifl_err(err, IFL_ENOMEM, "shard: out of memory for a slice of the experts");
    for (int x = 0; x < n_exp; x++)
        memcpy(p + (size_t)x * (size_t)n * w->row_bytes,
               (const char *)w->data + ((size_t)x * (size_t)n_ff + (size_t)ff0) * w->row_bytes,
               (size_t)n * w->row_bytes);
    ifl_gguf_release(m->gguf, w->data, (size_t)w->n_out * w->row_bytes);
    s->copies[s->n_copies] = p;
    s->copy_of[s->n_copies++] = w;
    w->data = p;
    w->n_out = (int64_t)n_exp * n;
    return 0;
}

/* The same slice of each expert's n_ff biases; NULL (and err) when out of memory. */
static const float *expert_bias(struct ifl_shard *s, const float *b, int n_exp, int64_t n_ff,
                                int64_t ff0, int64_t n, char *err)
{
    float *p = malloc(sizeof(float) * (size_t)n_exp * (size_t)n);
    if (!p) {
        ifl_err(err, IFL_ENOMEM, "shard: out of memory for the experts' biases");
        return NULL;
    }
    for (int x = 0; x < n_exp; x++)
        memcpy(p + (size_t)x * (size_t)n, b + (size_t)x * (size_t)n_ff + ff0,
               sizeof(float) * (size_t)n);
    s->copies[s->n_copies] = p;
    s->copy_of[s->n_copies++] = NULL; /* (not a matrix: never repacked) */
    return p;
}

int ifl_model_shard(struct ifl_model *m, int rank, int size, char *err)
{
    struct ifl_hparams *hp = &m->hp;
    if (size < 1 || rank < 0 || rank >= size)
        return ifl_err(err, IFL_EINVAL, "shard: rank %d of %d", rank, size);
    if (m->shard || m->units || m->x16)
        return ifl_err(err, IFL_ESTATE, "shard: the model is already split or repacked");
    struct plan pl;
    int rc = plan_split(m, size, &pl, err);
    if (rc)
        return rc;
    const int group = pl.group, kvl = pl.kvl, wo_whole = pl.wo_whole;
    const int64_t o_per = pl.o_per;
    struct ifl_shard *s = calloc(1, sizeof(*s));
    if (!s)
        return ifl_err(err, IFL_ENOMEM, "shard: out of memory");
    s->copies = calloc((size_t)hp->n_layer * 6,
                       sizeof(void *)); /* wo, down; or wo, gate, up, down and two biases */
    s->copy_of = calloc((size_t)hp->n_layer * 6, sizeof(*s->copy_of));
    s->v_off = malloc(sizeof(int32_t) * (size_t)(size + 1));
    if (!s->copies || !s->copy_of || !s->v_off) {
        ifl_model_shard_free(s);
        return ifl_err(err, IFL_ENOMEM, "shard: out of memory");
    }
    s->rank = rank;
    s->size = size;
    s->n_head = hp->n_head;
    s->n_head_kv = hp->n_head_kv;
    s->n_ff = hp->n_ff;
    s->kv0 = rank * kvl;
    s->wo_whole = wo_whole;
    s->ff0 = (int32_t)plan_ff0(&pl, hp, rank, size);
    const int32_t nff = (int32_t)(plan_ff0(&pl, hp, rank + 1, size) - s->ff0);
    const int64_t n16 = ((int64_t)hp->n_vocab + 15) / 16;
    for (int i = 0; i <= size; i++) {
        int64_t v = n16 * i / size * 16;
        s->v_off[i] = (int32_t)(v < hp->n_vocab ? v : hp->n_vocab);
    }
    const int hd = hp->head_dim, hdv = hp->head_dim_v;
    const int64_t q0 = (int64_t)s->kv0 * group * hd, nq = (int64_t)kvl * group * hd;
    const int64_t k0 = (int64_t)s->kv0 * hd, nk = (int64_t)kvl * hd;
    const int64_t v0 = (int64_t)s->kv0 * hdv, nv = (int64_t)kvl * hdv;
    for (int il = 0; il < hp->n_layer && !rc; il++) {
        struct ifl_layer_weights *w = &m->layers[il];
        row_slice(&w->wq, q0, nq);
        row_slice(&w->wk, k0, nk);
        row_slice(&w->wv, v0, nv);
        if (w->bq) {
            w->bq += q0;
            w->bk += k0;
            w->bv += v0;
        }
        if (w->attn_sinks) /* gpt-oss: one a query head, the rank's heads' */
            w->attn_sinks += (size_t)s->kv0 * (size_t)group;
        if (!wo_whole)
            rc = col_slice(m, s, &w->wo, (int64_t)s->kv0 * group * hdv, o_per, err);
        if (w->gate_exps.data) {
            const int nx = hp->n_expert;
            if (!rc)
                rc = expert_rows(m, s, &w->gate_exps, nx, hp->n_ff, s->ff0, nff, err);
            if (!rc)
                rc = expert_rows(m, s, &w->up_exps, nx, hp->n_ff, s->ff0, nff, err);
            if (!rc)
                rc = col_slice(m, s, &w->down_exps, s->ff0, nff, err);
            if (!rc && w->gate_exps_b &&
                (!(w->gate_exps_b =
                       expert_bias(s, w->gate_exps_b, nx, hp->n_ff, s->ff0, nff, err)) ||
                 !(w->up_exps_b = expert_bias(s, w->up_exps_b, nx, hp->n_ff, s->ff0, nff, err))))
                rc = IFL_ENOMEM;
            if (rank) /* added once, on rank 0 */
                w->down_exps_b = NULL;
            continue;
        }
        row_slice(&w->w_gate, s->ff0, nff);
        row_slice(&w->w_up, s->ff0, nff);
        if (!rc)
            rc = col_slice(m, s, &w->w_down, s->ff0, nff, err);
    }
    if (rc) {
        /* the matrices point into copies about to go: the model is unusable,
         * and its caller frees it */
        m->shard = s;
        return rc;
    }
    row_slice(&m->output, s->v_off[rank], s->v_off[rank + 1] - s->v_off[rank]);
    hp->n_head = group * kvl;
    hp->n_head_kv = kvl;
    hp->n_ff = nff;
    m->shard = s;
    return 0;
}

void ifl_model_shard_trim(struct ifl_model *m)
{
    struct ifl_shard *s = m->shard;
    if (!s)
        return;
    for (int i = 0; i < s->n_copies; i++)
        if (s->copies[i] && s->copy_of[i] && s->copy_of[i]->data != s->copies[i]) {
            free(s->copies[i]); /* repacked: the x16 copy is the one read */
            s->copies[i] = NULL;
        }
}

void ifl_model_units_free(struct ifl_units *u)
{
    if (!u)
        return;
    for (int i = 0; i < u->n_copies; i++)
        free(u->copies[i]);
    free(u->copies);
    free(u->copy_of);
    free(u->o_off);
    free(u->ff_off);
    free(u->wo);
    free(u->down);
    free(u);
}

/* Unit u of w: columns [c0, c1), a copy of its own. */
static int unit_of(struct ifl_units *U, struct ifl_mat *dst, const struct ifl_mat *w, int64_t c0,
                   int64_t c1, char *err)
{
    size_t rb;
    char *p = copy_cols(w, c0, c1 - c0, &rb, err);
    if (!p)
        return IFL_ENOMEM;
    *dst = *w;
    dst->data = p;
    dst->n_in = c1 - c0;
    dst->row_bytes = rb;
    U->copies[U->n_copies] = p;
    U->copy_of[U->n_copies++] = dst;
    return 0;
}

int ifl_model_sum_units(struct ifl_model *m, int n, char *err)
{
    const struct ifl_hparams *hp = &m->hp;
    if (n < 2 || n > 4096)
        return ifl_err(err, IFL_EINVAL, "sum units: %d ranks (2 to 4096)", n);
    if (m->shard || m->units || m->x16)
        return ifl_err(err, IFL_ESTATE, "sum units: the model is already split or repacked");
    struct plan pl;
    int rc = plan_split(m, n, &pl, err);
    if (rc)
        return rc;
    struct ifl_units *U = calloc(1, sizeof(*U));
    const size_t nm = (size_t)hp->n_layer * (size_t)n;
    if (U) {
        U->n = n;
        U->wo_split = !pl.wo_whole;
        U->o_off = malloc(sizeof(int64_t) * (size_t)(n + 1));
        U->ff_off = malloc(sizeof(int64_t) * (size_t)(n + 1));
        U->wo = calloc(nm, sizeof(struct ifl_mat));
        U->down = calloc(nm, sizeof(struct ifl_mat));
        U->copies = calloc(2 * nm, sizeof(void *));
        U->copy_of = calloc(2 * nm, sizeof(*U->copy_of));
    }
    if (!U || !U->o_off || !U->ff_off || !U->wo || !U->down || !U->copies || !U->copy_of) {
        ifl_model_units_free(U);
        return ifl_err(err, IFL_ENOMEM, "sum units: out of memory");
    }
    for (int r = 0; r <= n; r++) {
        U->o_off[r] = pl.o_per * r;
        U->ff_off[r] = plan_ff0(&pl, hp, r, n);
    }
    for (int il = 0; il < hp->n_layer && !rc; il++) {
        struct ifl_layer_weights *w = &m->layers[il];
        /* experts: every expert's columns of the unit's n_ff slice */
        struct ifl_mat *down = w->down_exps.data ? &w->down_exps : &w->w_down;
        for (int r = 0; r < n && !rc; r++) {
            if (U->wo_split)
                rc = unit_of(U, &U->wo[(size_t)il * n + r], &w->wo, U->o_off[r], U->o_off[r + 1],
                             err);
            if (!rc)
                rc = unit_of(U, &U->down[(size_t)il * n + r], down, U->ff_off[r], U->ff_off[r + 1],
                             err);
        }
        /* the whole matrices are not read again: their pages may go */
        if (!rc && U->wo_split)
            ifl_gguf_release(m->gguf, w->wo.data, (size_t)w->wo.n_out * w->wo.row_bytes);
        if (!rc)
            ifl_gguf_release(m->gguf, down->data, (size_t)down->n_out * down->row_bytes);
    }
    if (rc) {
        ifl_model_units_free(U);
        return rc;
    }
    m->units = U;
    return 0;
}

void ifl_model_units_trim(struct ifl_model *m)
{
    struct ifl_units *U = m->units;
    if (!U)
        return;
    for (int i = 0; i < U->n_copies; i++)
        if (U->copies[i] && U->copy_of[i]->data != U->copies[i]) {
            free(U->copies[i]); /* repacked: the x16 copy is the one read */
            U->copies[i] = NULL;
        }
}
