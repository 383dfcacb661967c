/*
 * The batched forward pass over a paged KV cache.
 *
 * A step's input is a ragged batch: n_rows rows of (token, position,
 * sequence) from any number of sequences, e.g. one decode row for each of 15
 * sequences plus a 100-token prefill chunk of a 16th. Each sequence owns a
 * block table: the ids of the KV blocks holding its positions, position p in
 * block table[p / block_size] at slot p % block_size. The caller (the
 * executor's KV allocator) owns the tables; the forward pass only reads them.
 *
 * Every row writes its K and V at its position, then attends causally to
 * positions 0..pos of its sequence, which must already be in the cache or in
 * this batch. Every matmul reads each weight block once for all rows. Logits
 * are computed only for the rows that ask.
 *
 * Numerics: each row's result depends only on its sequence's tokens, never
 * on what else shares the batch, how the prompt was chunked, or the thread
 * count (fixed-order reductions per row; see kernels.h).
 *
 * Ownership and threads: struct ifl_kv_store and struct ifl_fwd are
 * single-owner (the engine thread). ifl_forward runs the pool's workers and
 * allocates nothing.
 */
#ifndef IFL_MODEL_FORWARD_H
#define IFL_MODEL_FORWARD_H

#include <stdint.h>

#include "core/pool.h"
#include "model/kv_store.h"
#include "model/model.h"

struct ifl_lora_rt;

struct ifl_batch {
    int32_t n_rows;
    const int32_t *tokens; /* [n_rows] */
    const int32_t *pos;    /* [n_rows] position of each row in its sequence */
    const int32_t *seq;    /* [n_rows] index into block_tables */
    const uint8_t *logits; /* [n_rows] 1: compute this row's logits */
    /* optional output, NULL for none: [n_logit_rows][n_embd], the final
     * hidden state (the output of the last RMSNorm, times out_norm: what the
     * LM head multiplies) of each row with logits[r] set, in row order like
     * the logits */
    float *hidden;
    /* optional capture of intermediate states (an EAGLE-3 head's input),
     * n_extract 0 for none: for each row with extract_rows[r] set, the
     * residual stream entering layer extract_layers[i] (layer 0: the token
     * embedding; 0 <= layer < n_layer) is written to
     * extract_out + ((size_t)r * n_extract + i) * n_embd, for i < n_extract;
     * other rows' places are left alone. Off, it costs a test per layer. */
    int32_t n_extract;
    const int32_t *extract_layers; /* [n_extract] */
    const uint8_t *extract_rows;   /* [n_rows] */
    float *extract_out;            /* [n_rows][n_extract][n_embd] */
    /* optional tree rows (a speculative draft tree verified in one pass),
     * NULL for none, else all four set: row r stores its K and V at cache
     * position kv_pos[r] of its sequence (its RoPE position stays pos[r])
     * and attends to pos[r] + 1 positions, the first att_prefix[r] of them
     * at their own places 0 .. att_prefix[r] - 1, the others at the places
     * tree_path[tree_off[r] + i] (its ancestors, nearest last, then itself:
     * kv_pos[r]). A row with att_prefix[r] = pos[r] + 1 and kv_pos[r] =
     * pos[r] is an ordinary one. A tree row's attention goes over those
     * positions in that order with the blocking of an ordinary row, so its
     * result equals, bit for bit, that of an ordinary row at pos[r] whose
     * cache holds the same keys and values at places 0 .. pos[r]. */
    const int32_t *kv_pos;     /* [n_rows] */
    const int32_t *att_prefix; /* [n_rows] */
    const int32_t *tree_off;   /* [n_rows] */
    const int32_t *tree_path;  /* [n_tree_path] */
    int32_t n_tree_path;
    /* optional LoRA adapters (model/lora_rt.h), n_lora 0 for none: row r
     * applies adapter i with user scale lora_scale[r * n_lora + i], 0 for
     * not at all (so a scale of 0 is bitwise the base). A row's adapters are
     * added in order of i: list a step's adapters in an order that does not
     * depend on the step (the executor: by id) and every row's result is
     * the same whatever shares its step. Each must be made for this
     * forward's model. */
    int32_t n_lora;
    const struct ifl_lora_rt *const *lora; /* [n_lora] */
    const float *lora_scale;               /* [n_rows][n_lora] */
    int32_t n_seqs;
    const int32_t *const *block_tables; /* [n_seqs] -> block ids */
    const int32_t *n_blocks;            /* [n_seqs] length of each table */
    /* optional input embeddings (an image's rows from a vision encoder),
     * NULL for none: when embd[r] is not NULL, row r's input is those
     * n_embd floats instead of tokens[r]'s embedding (tokens[r], a
     * placeholder, must still be a valid id; a token_embd adapter does not
     * apply to the row). Everything after the input is the same, so a row
     * given its token's own embedding row is bitwise the token's row. */
    const float *const *embd; /* [n_rows] */
};

struct ifl_fwd_config {
    int32_t max_rows;          /* most rows one step may carry */
    int32_t max_ctx;           /* most positions one sequence may reach */
    int n_threads;             /* 0: the CPUs this process may use (ifl_syscpu_count) */
    int32_t attn_score_floats; /* attention scores one pass over the KV cache keeps
                                  (0: 65536, 256 KiB); results do not depend on it */
    /* optional: run on this pool (not owned; it must outlive the forward)
     * instead of starting n_threads threads. Two forwards of one engine (a
     * target and its draft model) then take turns on the same threads, and
     * no second set of workers competes for the cores. */
    struct ifl_pool *pool;
    /* tensor parallelism (forward_tp.c): the job's communicator, required
     * when the model is a shard (model.h) and then of the shard's size and
     * rank; NULL or one rank otherwise. Every rank runs ifl_forward with
     * the same batch; the partial sums meet in two all-reduces a layer, the
     * logits are gathered to rank 0 (the others' logits may be NULL). Each
     * collective waits at most comm_timeout_s (0: 30 s); a failed one makes
     * ifl_forward return its status (IFL_ETIMEDOUT, IFL_EIO, IFL_ESTATE),
     * after which the communicator is broken. */
    struct ifl_comm *comm;
    double comm_timeout_s;
};

struct ifl_fwd;

int ifl_fwd_create(struct ifl_fwd **out, const struct ifl_model *m, struct ifl_kv_store *kv,
                   const struct ifl_fwd_config *cfg, char *err);
void ifl_fwd_free(struct ifl_fwd *f);
int ifl_fwd_n_threads(const struct ifl_fwd *f);
/* The pool the forward runs on, to share with another forward (above). */
struct ifl_pool *ifl_fwd_pool(struct ifl_fwd *f);
/* Runs fn(arg, ith, nth) on each of the forward's nth threads, the caller
 * being ith 0, and returns when all have returned: other per-row work of
 * a step (the executor's sampling) shares the threads the forward pass
 * keeps. Not while ifl_forward runs. */
void ifl_fwd_parallel(struct ifl_fwd *f, void (*fn)(void *arg, int ith, int nth), void *arg);

/* Runs one step. logits receives, in row order, n_vocab floats for each row
 * with logits[r] set. Returns IFL_EINVAL (and a message) for an invalid
 * batch: a token, position, sequence or block out of range, a row whose
 * block is missing from its table, or an adapter made for another model
 * or with a non-finite scale. The cache is untouched on error. A step with
 * more adapters, or adapter rows times ranks, than any before grows the
 * forward's adapter scratch first (IFL_ENOMEM if it cannot). */
int ifl_forward(struct ifl_fwd *f, const struct ifl_batch *b, float *logits, char *err);

#endif
