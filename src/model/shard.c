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
 * quants), unevenly if it must. The heads of attn_output cannot move: when
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

static int col_slice(struct ifl_model *m, struct ifl_shard *s, struct ifl_mat *w, int64_t c0,
                     int64_t n, char *err)
{
    size_t off = ifl_type_row_size(w->type, c0), rb = ifl_type_row_size(w->type, n);
    char *p = aligned_alloc(64, ((size_t)w->n_out * rb + 63) / 64 * 64);
    if (!p)
        return ifl_err(err, IFL_ENOMEM, "shard: out of memory for a slice of %zu bytes",
                       (size_t)w->n_out * rb);
    for (int64_t i = 0; i < w->n_out; i++)
        memcpy(p + (size_t)i * rb, (const char *)w->data + (size_t)i * w->row_bytes + off, rb);
    ifl_gguf_release(m->gguf, w->data, (size_t)w->n_out * w->row_bytes);
    s->copies[s->n_copies] = p;
    s->copy_of[s->n_copies++] = w;
    w->data = p;
    w->n_in = n;
    w->row_bytes = rb;
    return 0;
}

int ifl_model_shard(struct ifl_model *m, int rank, int size, char *err)
{
    struct ifl_hparams *hp = &m->hp;
    if (size < 1 || rank < 0 || rank >= size)
        return ifl_err(err, IFL_EINVAL, "shard: rank %d of %d", rank, size);
    if (m->shard || m->x16)
        return ifl_err(err, IFL_ESTATE, "shard: the model is already split or repacked");
    if (hp->n_head_kv % size)
        return ifl_err(err, IFL_EUNSUPPORTED,
                       "tensor parallelism over %d ranks: the model has %d KV heads, which %d "
                       "ranks cannot share evenly (--tp must divide the KV heads)",
                       size, hp->n_head_kv, size);
    int64_t ff_unit = 1;
    int wo_whole = 0;
    const int group = hp->n_head / hp->n_head_kv, kvl = hp->n_head_kv / size;
    const int64_t o_per = (int64_t)kvl * group * hp->head_dim_v;
    for (int il = 0; il < hp->n_layer; il++) {
        int64_t u = col_unit(&m->layers[il].w_down);
        ff_unit = u > ff_unit ? u : ff_unit;
        wo_whole |= o_per % col_unit(&m->layers[il].wo) != 0;
    }
    int64_t nb = hp->n_ff / ff_unit;
    if (nb < size)
        return ifl_err(err, IFL_EUNSUPPORTED,
                       "tensor parallelism over %d ranks: the FFN's %d rows are %lld blocks of "
                       "%lld for ffn_down's type, fewer than the ranks",
                       size, hp->n_ff, (long long)nb, (long long)ff_unit);
    struct ifl_shard *s = calloc(1, sizeof(*s));
    if (!s)
        return ifl_err(err, IFL_ENOMEM, "shard: out of memory");
    s->copies = calloc((size_t)hp->n_layer * 2, sizeof(void *));
    s->copy_of = calloc((size_t)hp->n_layer * 2, sizeof(*s->copy_of));
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
    int64_t b0 = nb * rank / size, b1 = nb * (rank + 1) / size;
    s->ff0 = (int32_t)(b0 * ff_unit);
    const int32_t nff = (int32_t)((b1 - b0) * ff_unit);
    const int64_t n16 = ((int64_t)hp->n_vocab + 15) / 16;
    for (int i = 0; i <= size; i++) {
        int64_t v = n16 * i / size * 16;
        s->v_off[i] = (int32_t)(v < hp->n_vocab ? v : hp->n_vocab);
    }
    const int hd = hp->head_dim, hdv = hp->head_dim_v;
    const int64_t q0 = (int64_t)s->kv0 * group * hd, nq = (int64_t)kvl * group * hd;
    const int64_t k0 = (int64_t)s->kv0 * hd, nk = (int64_t)kvl * hd;
    const int64_t v0 = (int64_t)s->kv0 * hdv, nv = (int64_t)kvl * hdv;
    int rc = 0;
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
        row_slice(&w->w_gate, s->ff0, nff);
        row_slice(&w->w_up, s->ff0, nff);
        if (!wo_whole)
            rc = col_slice(m, s, &w->wo, (int64_t)s->kv0 * group * hdv, o_per, err);
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
        if (s->copies[i] && s->copy_of[i]->data != s->copies[i]) {
            free(s->copies[i]); /* repacked: the x16 copy is the one read */
            s->copies[i] = NULL;
        }
}
