/*
 * The worker loop of tensor parallelism (tp.h): the leader's messages and
 * the workers' loop over them.
 *
 * A message is a fixed header, broadcast from rank 0, then (when the
 * header says so) a payload of payload bytes, broadcast too:
 *
 *   SETUP      payload: struct ifl_tp_setup
 *   STEP       payload, int32 unless said: the KV operations queued
 *              [n_ops][5] (op, a, b, c, d), then tokens, pos, seq [n_rows],
 *              kv_pos, att_prefix, tree_off [n_rows] and tree_path
 *              [n_tree_path] when the batch has tree rows, n_blocks
 *              [n_seqs] (0 for a sequence no row names), each named
 *              sequence's table, then the logits flags [n_rows] as bytes.
 *              n_rows 0: only the KV operations (the queue filled up).
 *   KEEPALIVE  no payload; both sides then meet at a barrier
 *   STOP       no payload: the workers return
 *
 * The workers' forward pass checks the batch as the leader's does (they
 * get the same one), so both skip the step's collectives alike when it is
 * refused.
 */
#include "dist/tp.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/timeutil.h"
#include "model/kv_store.h"
#include "model/model.h"

#define TP_MAGIC 0x31505449u /* "ITP1" */
#define KEEPALIVE_S 1.0
#define MAX_OPS 1024

enum { MSG_SETUP = 1, MSG_STEP = 2, MSG_KEEPALIVE = 3, MSG_STOP = 4 };

struct msg {
    uint32_t magic, kind;
    int32_t n_rows, n_seqs, n_ops, n_tree_path, tree, pad;
    uint64_t payload;
};

struct ifl_tp {
    struct ifl_comm *comm;
    double timeout_s;
    double last_s; /* when the last message went */
    int failed;
    char why[IFL_ERR_LEN];
    int32_t ops[MAX_OPS][5];
    int n_ops;
    char *buf; /* a step's payload */
    size_t cap;
};

int ifl_tp_agree(struct ifl_comm *comm, int failed, double timeout_s, char *err)
{
    float f = failed ? 1.0f : 0.0f;
    int rc = ifl_comm_allreduce_sum(comm, &f, 1, timeout_s, err);
    if (rc)
        return rc;
    if (f > 0)
        return ifl_err(err, IFL_EUNSUPPORTED,
                       "tensor parallelism: %d of the %d ranks could not start (each says why on "
                       "its standard error)",
                       (int)f, ifl_comm_size(comm));
    return 0;
}

int ifl_tp_leader_create(struct ifl_tp **out, struct ifl_comm *comm, double timeout_s, char *err)
{
    *out = NULL;
    struct ifl_tp *tp = calloc(1, sizeof(*tp));
    if (!tp)
        return ifl_err(err, IFL_ENOMEM, "tensor parallelism: out of memory");
    tp->comm = comm;
    tp->timeout_s = timeout_s > 0 ? timeout_s : 30.0;
    tp->last_s = ifl_now_s();
    *out = tp;
    return 0;
}

void ifl_tp_free(struct ifl_tp *tp)
{
    if (!tp)
        return;
    free(tp->buf);
    free(tp);
}

int ifl_tp_size(const struct ifl_tp *tp)
{
    return ifl_comm_size(tp->comm);
}

int ifl_tp_failed(const struct ifl_tp *tp, const char **why)
{
    if (why)
        *why = tp->why;
    return tp->failed;
}

void ifl_tp_stats(const struct ifl_tp *tp, struct ifl_comm_stats *out)
{
    ifl_comm_stats(tp->comm, out);
}

/* A collective's status: a failure ends the job. */
static int note(struct ifl_tp *tp, int rc, char *err)
{
    if (rc && !tp->failed) {
        tp->failed = 1;
        snprintf(tp->why, sizeof tp->why, "%s", err && *err ? err : ifl_strerror(rc));
    }
    tp->last_s = ifl_now_s();
    return rc;
}

static int send(struct ifl_tp *tp, struct msg *m, const void *payload, char *err)
{
    if (tp->failed)
        return ifl_err(err, IFL_ESTATE, "tensor parallelism: the job failed earlier (%s)", tp->why);
    m->magic = TP_MAGIC;
    int rc = ifl_comm_broadcast(tp->comm, m, sizeof(*m), 0, tp->timeout_s, err);
    if (!rc && m->payload)
        rc = ifl_comm_broadcast(tp->comm, (void *)payload, m->payload, 0, tp->timeout_s, err);
    if (!rc && m->kind == MSG_KEEPALIVE)
        rc = ifl_comm_barrier(tp->comm, tp->timeout_s, err);
    return note(tp, rc, err);
}

int ifl_tp_send_setup(struct ifl_tp *tp, const struct ifl_tp_setup *s, char *err)
{
    struct msg m = {.kind = MSG_SETUP, .payload = sizeof(*s)};
    return send(tp, &m, s, err);
}

int ifl_tp_send_stop(struct ifl_tp *tp, char *err)
{
    struct msg m = {.kind = MSG_STOP};
    return send(tp, &m, NULL, err);
}

int ifl_tp_idle(struct ifl_tp *tp, char *err)
{
    if (tp->failed || ifl_now_s() - tp->last_s < KEEPALIVE_S)
        return 0;
    struct msg m = {.kind = MSG_KEEPALIVE};
    return send(tp, &m, NULL, err);
}

static int grow(char **buf, size_t *cap, size_t need)
{
    if (need <= *cap)
        return 0;
    size_t c = *cap ? *cap : 4096;
    while (c < need)
        c *= 2;
    char *p = realloc(*buf, c);
    if (!p)
        return IFL_ENOMEM;
    *buf = p;
    *cap = c;
    return 0;
}

static char *put(char *p, const void *src, size_t n)
{
    if (n)
        memcpy(p, src, n);
    return p + n;
}

int ifl_tp_send_step(struct ifl_tp *tp, const struct ifl_batch *b, char *err)
{
    const int32_t n = b ? b->n_rows : 0;
    struct msg m = {.kind = MSG_STEP, .n_rows = n, .n_ops = tp->n_ops};
    size_t bytes = sizeof(int32_t) * 5 * (size_t)tp->n_ops;
    if (n) {
        m.n_seqs = b->n_seqs;
        m.tree = b->kv_pos != NULL;
        m.n_tree_path = m.tree ? b->n_tree_path : 0;
        bytes += sizeof(int32_t) *
                 ((size_t)n * (m.tree ? 6 : 3) + (size_t)m.n_tree_path + (size_t)b->n_seqs);
        for (int32_t r = 0; r < n; r++) /* each sequence's table once: rows of one are adjacent */
            if (r == 0 || b->seq[r] != b->seq[r - 1])
                bytes += sizeof(int32_t) * (size_t)b->n_blocks[b->seq[r]];
        bytes += (size_t)n;
    }
    if (grow(&tp->buf, &tp->cap, bytes + sizeof(int32_t)))
        return note(tp, ifl_err(err, IFL_ENOMEM, "tensor parallelism: out of memory for a step"),
                    err);
    char *p = put(tp->buf, tp->ops, sizeof(int32_t) * 5 * (size_t)tp->n_ops);
    if (n) {
        p = put(p, b->tokens, sizeof(int32_t) * (size_t)n);
        p = put(p, b->pos, sizeof(int32_t) * (size_t)n);
        p = put(p, b->seq, sizeof(int32_t) * (size_t)n);
        if (m.tree) {
            p = put(p, b->kv_pos, sizeof(int32_t) * (size_t)n);
            p = put(p, b->att_prefix, sizeof(int32_t) * (size_t)n);
            p = put(p, b->tree_off, sizeof(int32_t) * (size_t)n);
            p = put(p, b->tree_path, sizeof(int32_t) * (size_t)m.n_tree_path);
        }
        /* a sequence's table once, even if its rows are not adjacent */
        int32_t *nb = (int32_t *)p;
        memset(nb, 0, sizeof(int32_t) * (size_t)b->n_seqs);
        for (int32_t r = 0; r < n; r++)
            nb[b->seq[r]] = b->n_blocks[b->seq[r]];
        p += sizeof(int32_t) * (size_t)b->n_seqs;
        for (int32_t s = 0; s < b->n_seqs; s++)
            p = put(p, b->block_tables[s], sizeof(int32_t) * (size_t)nb[s]);
        for (int32_t r = 0; r < n; r++)
            *p++ = (char)(b->logits && b->logits[r]);
    }
    m.payload = (uint64_t)(p - tp->buf);
    tp->n_ops = 0;
    return send(tp, &m, tp->buf, err);
}

void ifl_tp_kv_mirror(void *user, int op, int32_t a, int32_t b, int32_t c, int32_t d)
{
    struct ifl_tp *tp = user;
    if (tp->failed)
        return;
    if (tp->n_ops == MAX_OPS) { /* a flood of copies: send them ahead of the step */
        char err[IFL_ERR_LEN];
        if (ifl_tp_send_step(tp, NULL, err))
            return;
    }
    int32_t *o = tp->ops[tp->n_ops++];
    o[0] = op;
    o[1] = a;
    o[2] = b;
    o[3] = c;
    o[4] = d;
}

/* ---- a worker ---- */

struct worker {
    struct ifl_comm *comm;
    struct ifl_model *m;
    struct ifl_kv_store *kv;
    struct ifl_fwd *f;
    struct ifl_tp_setup su;
    const int32_t **tables; /* [n_seqs] */
    int32_t *nb_copy;
    char *buf;
    size_t cap;
};

static int worker_setup(struct worker *w, const struct ifl_tp_worker_opts *o, char *err)
{
    const struct ifl_tp_setup *s = &w->su;
    if (s->n_vocab != w->m->hp.n_vocab || s->n_layer != w->m->hp.n_layer ||
        (uint64_t)s->weight_bytes != w->m->weight_bytes)
        return ifl_err(err, IFL_EINVAL,
                       "tensor parallelism: rank %d loaded another model than rank 0 (%d layers, "
                       "%d tokens, %lld bytes of weights against %d, %d, %lld)",
                       ifl_comm_rank(w->comm), w->m->hp.n_layer, w->m->hp.n_vocab,
                       (long long)w->m->weight_bytes, s->n_layer, s->n_vocab,
                       (long long)s->weight_bytes);
    if (s->n_seqs < 1 || s->n_seqs > (1 << 20))
        return ifl_err(err, IFL_EINVAL, "tensor parallelism: %d sequences a step", s->n_seqs);
    int rc = ifl_kv_store_create(&w->kv, &w->m->hp, (enum ifl_type)s->kv_type, s->n_blocks,
                                 s->block_size, err);
    if (rc)
        return rc;
    struct ifl_fwd_config fc = {.max_rows = s->max_rows,
                                .max_ctx = s->max_ctx,
                                .n_threads = o->n_threads,
                                .comm = w->comm,
                                .comm_timeout_s = o->timeout_s};
    if ((rc = ifl_fwd_create(&w->f, w->m, w->kv, &fc, err)))
        return rc;
    w->tables = calloc((size_t)s->n_seqs, sizeof(*w->tables));
    if (!w->tables)
        return ifl_err(err, IFL_ENOMEM, "tensor parallelism: out of memory");
    return 0;
}

/* Applies a step's KV operations and runs its batch. The payload came
 * from rank 0 of this job, which is trusted; the ranges are still checked
 * so that a bug there is an error, not a write out of bounds. */
static int worker_step(struct worker *w, const struct msg *m, char *err)
{
    const int32_t n = m->n_rows;
    const struct ifl_kv_store *kv = w->kv;
    const int32_t *p = (const int32_t *)w->buf;
    for (int32_t i = 0; i < m->n_ops; i++, p += 5) {
        int32_t a = p[1], b = p[2], c = p[3], d = p[4];
        int ok = a >= 0 && a < kv->n_blocks;
        if (p[0] == IFL_KV_OP_COPY_BLOCK && ok && b >= 0 && b < kv->n_blocks && c >= 0 &&
            c <= kv->block_size)
            ifl_kv_store_copy_block(w->kv, a, b, c);
        else if (p[0] == IFL_KV_OP_COPY_POS && ok && c >= 0 && c < kv->n_blocks && b >= 0 &&
                 b < kv->block_size && d >= 0 && d < kv->block_size)
            ifl_kv_store_copy_pos(w->kv, a, b, c, d);
        else if (p[0] == IFL_KV_OP_RELEASE && ok && b >= 0 && a + b <= kv->n_blocks)
            ifl_kv_store_release(w->kv, a, b);
        else
            return ifl_err(err, IFL_EFORMAT, "tensor parallelism: KV operation %d (%d, %d, %d, %d)",
                           p[0], a, b, c, d);
    }
    if (n == 0)
        return 0;
    if (m->n_seqs != w->su.n_seqs || n > w->su.max_rows)
        return ifl_err(err, IFL_EFORMAT, "tensor parallelism: a step of %d rows of %d sequences", n,
                       m->n_seqs);
    struct ifl_batch b = {.n_rows = n, .n_seqs = m->n_seqs};
    b.tokens = p;
    b.pos = p + n;
    b.seq = p + 2 * n;
    p += 3 * n;
    if (m->tree) {
        b.kv_pos = p;
        b.att_prefix = p + n;
        b.tree_off = p + 2 * n;
        b.tree_path = p + 3 * n;
        b.n_tree_path = m->n_tree_path;
        p += 3 * n + m->n_tree_path;
    }
    b.n_blocks = p;
    p += m->n_seqs;
    for (int32_t s = 0; s < m->n_seqs; s++) {
        w->tables[s] = p;
        p += b.n_blocks[s];
    }
    b.block_tables = w->tables;
    b.logits = (const uint8_t *)p;
    return ifl_forward(w->f, &b, NULL, err);
}

static void worker_free(struct worker *w)
{
    ifl_fwd_free(w->f);
    ifl_kv_store_free(w->kv);
    ifl_model_free(w->m);
    free(w->tables);
    free(w->buf);
}

int ifl_tp_worker_run(struct ifl_comm *comm, const struct ifl_tp_worker_opts *o, char *err)
{
    struct worker w = {.comm = comm};
    const int rank = ifl_comm_rank(comm), size = ifl_comm_size(comm);
    const double timeout = o->timeout_s > 0 ? o->timeout_s : 30.0;
    const double start = o->start_timeout_s > 0 ? o->start_timeout_s : 600.0;
    struct ifl_model_load_opts lo = {.n_threads = o->n_threads, .tp_rank = rank, .tp_size = size};
    char e1[IFL_ERR_LEN] = "";
    int rc = ifl_model_load_with(&w.m, o->model_path, &lo, e1);
    if (rc)
        fprintf(stderr, "inflight: rank %d: %s\n", rank, e1);
    int arc = ifl_tp_agree(comm, rc != 0, start, err);
    if (rc || arc) {
        if (rc)
            snprintf(err, IFL_ERR_LEN, "%s", e1);
        worker_free(&w);
        return rc ? rc : arc;
    }
    int set = 0;
    for (;;) {
        struct msg m;
        rc = ifl_comm_broadcast(comm, &m, sizeof m, 0, set ? timeout : start, err);
        if (rc)
            break;
        if (m.magic != TP_MAGIC) {
            rc = ifl_err(err, IFL_EINVAL, "tensor parallelism: a message without its mark");
            break;
        }
        if (m.payload) {
            if (grow(&w.buf, &w.cap, m.payload + sizeof(int32_t))) {
                /* the leader sends the payload regardless: this rank is lost */
                rc = ifl_err(err, IFL_ENOMEM, "tensor parallelism: out of memory for a step");
                break;
            }
            if ((rc = ifl_comm_broadcast(comm, w.buf, m.payload, 0, timeout, err)))
                break;
        }
        if (m.kind == MSG_STOP)
            break;
        if (m.kind == MSG_KEEPALIVE) {
            if ((rc = ifl_comm_barrier(comm, timeout, err)))
                break;
        } else if (m.kind == MSG_SETUP && !set && m.payload == sizeof(w.su)) {
            memcpy(&w.su, w.buf, sizeof(w.su));
            char e2[IFL_ERR_LEN] = "";
            int src = worker_setup(&w, o, e2);
            if (src)
                fprintf(stderr, "inflight: rank %d: %s\n", rank, e2);
            if ((rc = ifl_tp_agree(comm, src != 0, timeout, err)) || (rc = src)) {
                if (src)
                    snprintf(err, IFL_ERR_LEN, "%s", e2);
                break;
            }
            set = 1;
        } else if (m.kind == MSG_STEP && set) {
            char e2[IFL_ERR_LEN] = "";
            int src = worker_step(&w, &m, e2);
            /* a batch the forward refused was refused on rank 0 too */
            if (src && src != IFL_EINVAL) {
                rc = ifl_err(err, src, "%s", e2);
                break;
            }
        } else {
            rc = ifl_err(err, IFL_EINVAL, "tensor parallelism: message %u out of order", m.kind);
            break;
        }
    }
    worker_free(&w);
    return rc;
}
