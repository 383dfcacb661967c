/*
 * The worker loop of tensor parallelism: rank 0 (the leader: executor,
 * scheduler, KV block manager, sampling) sends each step's batch to the
 * other ranks (workers), which run the same forward pass on their shards
 * of the model (model/forward.h with a communicator). Also sent: the KV
 * store's copies and releases (the block manager's copy-on-write and
 * memory give-back), which every rank repeats on its share of the cache,
 * and, when the leader is idle, a keep-alive each second, so that a rank
 * that died is noticed within the deadline even when no request comes.
 *
 * A job's life: every rank loads its shard and they agree that all did
 * (ifl_tp_agree); the leader builds its engine and sends the setup (KV
 * pool size, rows per step, context), from which the workers build their
 * KV stores and forward passes, and they agree again; then steps until the
 * leader sends stop. Every collective has a deadline (comm.h): a rank
 * that dies or stops answering makes the others' calls fail within it.
 *
 * Threads: the leader's calls come from the engine thread, one at a time.
 */
#ifndef IFL_DIST_TP_H
#define IFL_DIST_TP_H

#include <stdint.h>

#include "dist/comm.h"
#include "model/forward.h"

struct ifl_tp;

/* What the workers need to mirror the leader's engine. */
struct ifl_tp_setup {
    int32_t n_blocks, block_size, kv_type; /* the KV pool (kv_type: enum ifl_type) */
    int32_t max_rows, max_ctx, n_seqs;     /* the forward pass's, and block tables a step */
    int32_t n_vocab, n_layer;              /* the model's, to check every rank loaded the same */
    int64_t weight_bytes;
};

/* Every rank calls it with its own failed flag (nonzero: it cannot go on);
 * returns 0 when no rank failed, IFL_EUNSUPPORTED when one did (a sentence
 * counts them), or the collective's status. */
int ifl_tp_agree(struct ifl_comm *comm, int failed, double timeout_s, char *err);

/* The leader's side. timeout_s bounds each collective (and the workers'
 * wait for the next message). */
int ifl_tp_leader_create(struct ifl_tp **out, struct ifl_comm *comm, double timeout_s, char *err);
void ifl_tp_free(struct ifl_tp *tp);
int ifl_tp_send_setup(struct ifl_tp *tp, const struct ifl_tp_setup *s, char *err);
/* The batch (tokens, positions, sequences, logits flags, block tables of
 * the sequences it names, tree rows) and the KV operations queued since
 * the last message. Extraction, adapters and hidden states stay here. */
int ifl_tp_send_step(struct ifl_tp *tp, const struct ifl_batch *b, char *err);
/* When the leader has sent nothing for a second: a keep-alive (a barrier
 * with every rank, so a dead one is noticed). Returns 0 when none was due. */
int ifl_tp_idle(struct ifl_tp *tp, char *err);
/* Ends the workers' loops (they return 0). */
int ifl_tp_send_stop(struct ifl_tp *tp, char *err);
/* The KV store's mirror callback (kv_store.h), user the leader: queues the
 * operation for the next message. */
void ifl_tp_kv_mirror(void *user, int op, int32_t a, int32_t b, int32_t c, int32_t d);
/* Nonzero once a collective failed (the job is over), with its sentence. */
int ifl_tp_failed(const struct ifl_tp *tp, const char **why);
int ifl_tp_size(const struct ifl_tp *tp);
/* Seconds the leader's thread has spent in collectives of the steps, and
 * how many, since creation (the all-reduce share of a step). */
void ifl_tp_stats(const struct ifl_tp *tp, struct ifl_comm_stats *out);

/* A worker rank's whole life, after ifl_comm_init: loads its shard of
 * model_path, takes part in the agreements, then runs the leader's steps
 * until it sends stop (returns 0) or a collective fails or the leader is
 * silent for longer than timeout_s (returns that status, err says why). */
struct ifl_tp_worker_opts {
    const char *model_path;
    int n_threads;          /* 0: the CPUs this process may use */
    double timeout_s;       /* each collective's deadline; 0: 30 s */
    double start_timeout_s; /* until the leader's setup; 0: 600 s */
};
int ifl_tp_worker_run(struct ifl_comm *comm, const struct ifl_tp_worker_opts *o, char *err);

#endif
