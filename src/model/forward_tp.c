/*
 * The forward pass over a shard (model.h, shard.c): what a rank adds to a
 * whole model's step. The step runs unchanged on the rank's heads, rows
 * of n_ff and rows of the vocabulary; the pieces here join the ranks:
 *
 *   after attn_output and after ffn_down, tmp holds this rank's partial
 *   product: one all-reduce makes it the sum, bit for bit the same on
 *   every rank, so the residual stream stays identical everywhere;
 *   a shard that keeps wo whole (its head groups are not whole blocks of
 *   wo's type) sums zero-padded attention outputs instead (x + 0 = x:
 *   every rank then holds all heads' outputs exactly) and applies wo whole;
 *   the logits of a rank's vocabulary rows are gathered to rank 0, which
 *   lays them out row by row as a whole model's step does.
 *
 * Each collective is called by thread 0 between two pool barriers (MPI
 * allows one call at a time per process). A failure is kept in the job:
 * the step runs to its end without further collectives (its numbers are
 * then meaningless) and ifl_forward returns the status.
 */
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "dist/comm.h"
#include "model/forward_internal.h"

int ifl_fwd_tp_create(struct ifl_fwd *f, const struct ifl_fwd_config *cfg, char *err)
{
    const struct ifl_shard *s = f->m->shard;
    if (!s)
        return 0;
    if (!cfg->comm || ifl_comm_size(cfg->comm) != s->size || ifl_comm_rank(cfg->comm) != s->rank)
        return ifl_err(err, IFL_EINVAL,
                       "forward: the model is rank %d's share of %d, but the communicator is %s",
                       s->rank, s->size, cfg->comm ? "another job's" : "missing");
    const struct ifl_hparams *hp = &f->m->hp;
    size_t R = (size_t)f->max_rows;
    f->shard = s;
    f->comm = cfg->comm;
    f->comm_timeout_s = cfg->comm_timeout_s > 0 ? cfg->comm_timeout_s : 30.0;
    f->tp_logits = malloc(sizeof(float) * R * (size_t)f->m->output.n_out + 64);
    f->tp_counts = malloc(sizeof(size_t) * (size_t)s->size);
    if (s->rank == 0)
        f->tp_recv = malloc(sizeof(float) * R * (size_t)hp->n_vocab + 64);
    if (s->wo_whole)
        f->att_full = malloc(sizeof(float) * R * (size_t)f->m->layers[0].wo.n_in + 64);
    if (!f->tp_logits || !f->tp_counts || (s->rank == 0 && !f->tp_recv) ||
        (s->wo_whole && !f->att_full))
        return ifl_err(err, IFL_ENOMEM, "forward: out of memory for %d rows", f->max_rows);
    f->att_shape = (struct ifl_mat){
        .type = IFL_TYPE_F32, .n_in = (int64_t)hp->n_head * hp->head_dim_v, .n_out = hp->n_embd};
    return 0;
}

void ifl_fwd_tp_free(struct ifl_fwd *f)
{
    free(f->tp_logits);
    free(f->tp_recv);
    free(f->tp_counts);
    free(f->att_full);
}

void ifl_fwd_tp_reduce(struct job *j, int ith, float *buf, size_t n)
{
    struct ifl_fwd *f = j->f;
    if (ith == 0 && !j->tp_rc)
        j->tp_rc = ifl_comm_allreduce_sum(f->comm, buf, n, f->comm_timeout_s, j->tp_err);
    ifl_pool_barrier(f->pool);
}

void ifl_fwd_tp_att(struct job *j, int ith, int32_t nr)
{
    struct ifl_fwd *f = j->f;
    const struct ifl_hparams *hp = &f->m->hp;
    ifl_pool_barrier(f->pool); /* every thread's heads are in att */
    if (ith == 0 && !j->tp_rc) {
        const size_t loc = (size_t)hp->n_head * hp->head_dim_v;
        const size_t whole = (size_t)f->m->layers[0].wo.n_in;
        const size_t at =
            (size_t)f->shard->kv0 * (size_t)(hp->n_head / hp->n_head_kv) * (size_t)hp->head_dim_v;
        memset(f->att_full, 0, sizeof(float) * whole * (size_t)nr);
        for (int32_t r = 0; r < nr; r++)
            memcpy(f->att_full + (size_t)r * whole + at, f->att + (size_t)r * loc,
                   sizeof(float) * loc);
        j->tp_rc = ifl_comm_allreduce_sum(f->comm, f->att_full, whole * (size_t)nr,
                                          f->comm_timeout_s, j->tp_err);
    }
    ifl_pool_barrier(f->pool);
}

void ifl_fwd_tp_logits(struct job *j, int ith, int nth)
{
    struct ifl_fwd *f = j->f;
    const struct ifl_shard *s = f->shard;
    const int32_t V = f->m->hp.n_vocab;
    ifl_pool_barrier(f->pool); /* every thread's columns are in tp_logits */
    if (ith == 0 && !j->tp_rc) {
        for (int i = 0; i < s->size; i++)
            f->tp_counts[i] =
                sizeof(float) * (size_t)j->n_out * (size_t)(s->v_off[i + 1] - s->v_off[i]);
        j->tp_rc = ifl_comm_gather(f->comm, f->tp_logits, f->tp_counts[s->rank], f->tp_recv,
                                   f->tp_counts, 0, f->comm_timeout_s, j->tp_err);
    }
    ifl_pool_barrier(f->pool);
    if (s->rank != 0 || j->tp_rc || !j->logits)
        return;
    /* rank i's block is [n_out][its rows]; a row of logits takes a piece of each */
    long lo, hi;
    ifl_pool_split(j->n_out, ith, nth, &lo, &hi);
    const float *blk = f->tp_recv;
    for (int i = 0; i < s->size; i++) {
        const size_t w = (size_t)(s->v_off[i + 1] - s->v_off[i]);
        for (long r = lo; r < hi; r++)
            memcpy(j->logits + (size_t)r * (size_t)V + (size_t)s->v_off[i], blk + (size_t)r * w,
                   sizeof(float) * w);
        blk += w * (size_t)j->n_out;
    }
}
