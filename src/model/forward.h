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
#include "model/model.h"

/* K/V storage: per layer, n_blocks blocks of block_size positions of
 * n_head_kv * head_dim values, each position's row in `type` (Q8_0 rows are
 * blocks of 32 values: the widths must be multiples of 32). The memory is
 * reserved, not touched: it becomes resident as blocks are written. */
struct ifl_kv_store {
    enum ifl_type type;   /* IFL_TYPE_F16 (default), IFL_TYPE_F32 or IFL_TYPE_Q8_0 */
    int32_t n_layer;
    int32_t n_blocks;
    int32_t block_size;
    int32_t k_dim;        /* n_head_kv * head_dim */
    int32_t v_dim;        /* n_head_kv * head_dim_v */
    size_t k_row;         /* bytes of one position's keys (k_dim values in `type`) */
    size_t v_row;         /* bytes of one position's values */
    void **k;             /* [n_layer] -> [n_blocks][block_size][k_dim] */
    void **v;             /* [n_layer] -> [n_blocks][block_size][v_dim] */
    void *arena;          /* one anonymous map holding every k[il] and v[il] */
    size_t arena_bytes;
    char *base;           /* the arrays' part of it, base[0 .. bytes) */
    size_t bytes;
    size_t page;          /* the system's page: memory is given back in these */
    size_t k_bytes;       /* each k[il] array's length, padding included */
    size_t v_bytes;
    int huge;             /* the arrays asked for transparent huge pages */
    int prefaulted;       /* ifl_kv_store_prefault made all of it resident */
};

int ifl_kv_store_create(struct ifl_kv_store **out, const struct ifl_hparams *hp,
                        enum ifl_type type, int32_t n_blocks, int32_t block_size, char *err);
void ifl_kv_store_free(struct ifl_kv_store *kv);
/* Makes every page of the store resident now (MADV_POPULATE_WRITE, or
 * writing zeros where the kernel lacks it), before any block is used.
 * IFL_ENOMEM when the memory is not there. */
int ifl_kv_store_prefault(struct ifl_kv_store *kv, char *err);
/* Copies positions [0, n) of one block into another (copy-on-write forks). */
void ifl_kv_store_copy_block(struct ifl_kv_store *kv, int32_t dst, int32_t src, int32_t n);
/* Gives the memory of blocks [first, first + n) back to the system
 * (madvise MADV_DONTNEED on the whole pages that lie inside them in each
 * layer's keys and values; a huge page only partly inside is split); they
 * then read as zeros until written. Only for blocks no sequence holds and no cached prefix
 * needs. Returns the bytes given back (as asked: pages never touched
 * count too). A system call per array: not for the hot path. */
size_t ifl_kv_store_release(struct ifl_kv_store *kv, int32_t first, int32_t n);
/* Bytes of the store in memory now, -1 if unknown: mincore over blocks
 * [0, n_blocks) of every array, each range widened to the huge page that
 * holds its end (no page beyond a block never taken since its last
 * release is resident, so n_blocks is the allocator's touched end and the
 * cost follows the memory held: 48 system calls and a few microseconds for
 * small-110m's 300 MiB, where the whole 4.7 GiB map took 2-4 ms; a
 * prefaulted store is measured whole). Reads
 * only what creation fixed, so any thread may call it while the engine
 * runs. */
int64_t ifl_kv_store_resident(const struct ifl_kv_store *kv, int32_t n_blocks);

struct ifl_batch {
    int32_t n_rows;
    const int32_t *tokens;  /* [n_rows] */
    const int32_t *pos;     /* [n_rows] position of each row in its sequence */
    const int32_t *seq;     /* [n_rows] index into block_tables */
    const uint8_t *logits;  /* [n_rows] 1: compute this row's logits */
    /* optional output, NULL for none: [n_logit_rows][n_embd], the final
     * hidden state (the output of the last RMSNorm, times out_norm: what the
     * LM head multiplies) of each row with logits[r] set, in row order like
     * the logits */
    float *hidden;
    int32_t n_seqs;
    const int32_t *const *block_tables; /* [n_seqs] -> block ids */
    const int32_t *n_blocks;            /* [n_seqs] length of each table */
};

struct ifl_fwd_config {
    int32_t max_rows;     /* most rows one step may carry */
    int32_t max_ctx;      /* most positions one sequence may reach */
    int n_threads;        /* 0: the CPUs this process may use (ifl_syscpu_count) */
    int32_t attn_score_floats; /* attention scores one pass over the KV cache keeps
                                  (0: 65536, 256 KiB); results do not depend on it */
};

struct ifl_fwd;

int ifl_fwd_create(struct ifl_fwd **out, const struct ifl_model *m, struct ifl_kv_store *kv,
                   const struct ifl_fwd_config *cfg, char *err);
void ifl_fwd_free(struct ifl_fwd *f);
int ifl_fwd_n_threads(const struct ifl_fwd *f);
/* Runs fn(arg, ith, nth) on each of the forward's nth threads, the caller
 * being ith 0, and returns when all have returned: other per-row work of
 * a step (the executor's sampling) shares the threads the forward pass
 * keeps. Not while ifl_forward runs. */
void ifl_fwd_parallel(struct ifl_fwd *f, void (*fn)(void *arg, int ith, int nth), void *arg);

/* Runs one step. logits receives, in row order, n_vocab floats for each row
 * with logits[r] set. Returns IFL_EINVAL (and a message) for an invalid
 * batch: a token, position, sequence or block out of range, or a row whose
 * block is missing from its table. The cache is untouched on error. */
int ifl_forward(struct ifl_fwd *f, const struct ifl_batch *b, float *logits, char *err);

#endif
