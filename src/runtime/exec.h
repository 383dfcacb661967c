/*
 * Executor internals shared by executor.c (the public API: requests,
 * cancels, shutdown), responses.c (the response queue and waiting) and the
 * engine thread's files (engine_internal.h: scheduler, forward pass,
 * sampling, responses).
 *
 * Ownership:
 *  - struct ifl_executor: created and destroyed by the API side.
 *  - Everything under "engine-owned" is touched only by the engine thread.
 *  - in_mu guards the incoming list, cancel list and the accepting flag.
 *  - out_mu guards ready responses, the live-request table (stats, cancel
 *    lookup), the waiter list and n_callers. Each awaiting client has its
 *    own condition variable and is woken only by responses for ids it
 *    waits for (or by shutdown); out_cv only tells destroy that the last
 *    caller has left.
 */
#ifndef IFL_RUNTIME_EXEC_H
#define IFL_RUNTIME_EXEC_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/rng.h"
#include "dist/tp.h"
#include "inflight.h"
#include "model/forward.h"
#include "model/model.h"
#include "runtime/guided.h"
#include "runtime/images.h"
#include "runtime/kvcache.h"
#include "runtime/lora_reg.h"
#include "tokenizer/tokenizer.h"

/* A request as the executor keeps it: a deep copy of the client's. */
struct xreq {
    ifl_id id;
    struct ifl_request r; /* pointers below are owned copies */
    int32_t *input;       /* [n_input] */
    int32_t *stop_tok, *stop_len, *bad_tok, *bad_len;
    char **stop_strings;
    int32_t *bias_ids;
    float *bias_vals;
    int32_t *drafts; /* speculative.draft_tokens */
    char *post_name;
    int32_t post_index; /* -1 none, -2 batched, else logits_processors index */
    int64_t arrival_us;
    int64_t deadline_us;   /* 0: none */
    uint64_t seq_no;       /* arrival order */
    struct ifl_xguide *xg; /* compiled guide (a reference), NULL: unguided */
    /* LoRA adapters, resolved and held at enqueue (lora_reg.h); released
     * with the request */
    struct ifl_lora_set lora;
    /* images (images.h), taken at enqueue: n_img encoder units (an image
     * each, or each tile of an InternVL image), and each prompt position's
     * ext key for the prefix cache (NULL without images) */
    struct ximg *img;
    int32_t n_img;
    uint64_t *img_ext; /* [n_input] */
    struct xreq *next; /* incoming / waiting list link */

    /* engine-owned */
    int cancelled;
    int n_seqs_live; /* sequences not yet finished */
    int n_seqs_total;
    int stage; /* enum ifl_request_stage */
    struct ifl_perf_metrics perf;
    int64_t kv_reserved;  /* guaranteed_no_evict: blocks promised, not yet taken */
    int32_t n_slots_held; /* engine slots this request occupies */
    int32_t status;       /* != 0: failed (out of memory); its final response says so */
    /* return_context_logits, allocated at admission (engine-owned) */
    float *ctx_logits;              /* [n_input][n_vocab]; row i predicts token i + 1 */
    float *ctx_hidden;              /* [n_input][n_embd] with return_hidden_states too */
    int32_t ctx_captured;           /* leading prompt rows captured so far */
    int ctx_sent;                   /* a response has carried them */
    struct ebeam *beam;             /* beam_width > 1: search state (beam_slots.c) */
    const struct ifl_decoding *dec; /* decoding strategy, chosen at admission (decoding.h) */
};

/* A client blocked in ifl_await (on its own stack), woken only for its ids. */
struct xwaiter {
    const ifl_id *ids; /* n_ids 0: any request */
    int32_t n_ids;
    pthread_cond_t cv;
    struct xwaiter *next;
};

/* Response list node, in arrival order. */
struct xresp {
    struct ifl_response *resp;
    struct xresp *next;
};

/* What clients may read about a live request (under out_mu). */
struct xlive {
    ifl_id id; /* 0: empty slot */
    struct ifl_request_stats stats;
    int final_sent; /* the final response is queued */
    int cancel_requested;
};

struct engine;
struct ifl_chat_template;

#define IFL_STATS_HISTORY 1024

struct ifl_executor {
    struct ifl_executor_config cfg;
    struct ifl_logits_processor *procs; /* copied, names owned */
    struct ifl_model *model;
    struct ifl_vocab *vocab;
    int32_t n_ctx;
    int32_t n_vocab;
    int64_t kv_cache_tokens;
    /* when every layer slides and blocks behind the windows go back early
     * (engine's kv_window), the most positions a sequence holds at once:
     * its window, the 256-position alignment of ifl_hp_kv_read_from, one
     * step's rows and two blocks of rounding; 0 otherwise */
    int64_t kv_span;

    pthread_t thread;
    int thread_started;

    /* incoming (in_mu) */
    pthread_mutex_t in_mu;
    pthread_cond_t in_cv;
    struct xreq *in_head, *in_tail;
    int32_t n_queued; /* waiting for admission, incl. incoming */
    ifl_id *cancels;
    int32_t n_cancels, cap_cancels;
    int accepting;
    int stop; /* engine should exit when drained */
    int cancel_all;
    ifl_id next_id;
    uint64_t next_seq_no;

    /* outgoing (out_mu) */
    pthread_mutex_t out_mu;
    pthread_cond_t out_cv;
    struct xresp *out_head, *out_tail;
    int32_t n_ready;
    struct xlive *live; /* open-addressing table by id */
    int32_t live_cap;
    int32_t n_live;
    int engine_done;   /* the engine thread has exited */
    int32_t n_callers; /* threads inside await */
    struct xwaiter *waiters;
    struct ifl_iteration_stats last_stats;
    /* the last IFL_STATS_HISTORY publications, a ring: entry k % size
     * holds publication k; n_hist counts them all (under out_mu) */
    struct ifl_iteration_stats *hist;
    int64_t n_hist;
    /* ifl_executor_wait_idle: requests enqueued whose final response is not
     * yet queued; stats_seq counts publications of last_stats, idle_seq is
     * its value when n_unfinished last fell to 0 (idle once stats_seq has
     * passed it); idle_cv wakes the n_idle_waiters (all under out_mu) */
    int64_t n_unfinished;
    uint64_t stats_seq, idle_seq;
    pthread_cond_t idle_cv;
    int32_t n_idle_waiters;

    struct engine *eng; /* engine-owned */
    /* tensor parallelism (dist/tp.h): rank 0's side, NULL when off; the
     * workers wait for messages once tp_live (every rank loaded its shard) */
    struct ifl_tp *tp;
    int tp_live;
    atomic_int tp_failed;           /* the job failed; set by the engine, read by any thread */
    char tp_why[IFL_ERR_LEN];       /* why, written before tp_failed is set (release) */
    struct ifl_xguide_cache guides; /* compiled guides by text (own lock) */
    /* the model's chat template (or ChatML), compiled at its first use by
     * ifl_executor_apply_chat_template (chat_apply.c), under chat_mu */
    struct ifl_chat_template *chat;
    int chat_is_default;
    pthread_mutex_t chat_mu;
    struct ifl_lora_reg lora; /* LoRA adapters (own lock) */
    int lora_ready;           /* lora is initialised */
    /* images (images.h): the vision encoder (NULL: none), immutable after
     * creation; the per-executor seed of image hashes */
    struct ifl_clip *clip;
    uint64_t img_seed;
    /* guided-decoding mask statistics, published by the engine (out_mu) */
    struct ifl_xguide_stats guide_stats;
};

/* A copy of the mask statistics of guided requests so far (for benchmarks
 * and tests). Thread-safe. */
void ifl_exec_guide_stats(struct ifl_executor *ex, struct ifl_xguide_stats *out);

/* KV blocks guaranteed_no_evict promises a request of n sequences (samples
 * or beams) of n_pos positions each: every sequence its whole length, and
 * one copy-on-write block for each sequence forked from the first (the last
 * to write into a shared block writes in place). Shared by validation (a
 * request that could never get it is refused) and admission. */
static inline int64_t ifl_exec_blocks_to_reserve(int64_t block_size, int64_t n_pos, int64_t n)
{
    int64_t full = (n_pos + block_size - 1) / block_size;
    return n * full + (n - 1);
}

/* Positions a sequence of n_pos positions holds at once, which is what
 * guaranteed_no_evict books for it: all of them, or at most the
 * executor's kv_span (0: no bound). The blocks a sequence gives back as
 * it slides return to its request's booking (ifl_seq_drop_behind_window). */
static inline int64_t ifl_exec_kv_span(int64_t n_pos, int64_t kv_span)
{
    return kv_span > 0 && kv_span < n_pos ? kv_span : n_pos;
}

/* A malloc'd copy of n bytes; NULL for n = 0 or out of memory. */
/* The tokens a request may generate: max_tokens, where 0 means 1 (a
 * request always yields its first token). The one place that rule lives:
 * validation uses it, and enqueue stores it in the copied request, so the
 * engine never sees 0. */
static inline int32_t ifl_exec_max_tokens(const struct ifl_request *r)
{
    return r->max_tokens > 0 ? r->max_tokens : 1;
}

static inline void *ifl_exec_dup(const void *p, size_t n)
{
    if (!n)
        return NULL;
    void *q = malloc(n);
    if (q)
        memcpy(q, p, n);
    return q;
}

/* engine.c */
int ifl_engine_create(struct ifl_executor *ex, char *err);
void ifl_engine_free(struct ifl_executor *ex);
void *ifl_engine_main(void *arg);
/* Tensor parallelism: sends the workers the setup of the engine just made
 * (dist/tp.h) and waits until every one has built its side. */
int ifl_engine_tp_setup(struct ifl_executor *ex, char *err);
/* Bytes of the KV store in memory now; any thread (it reads only what
 * creation fixed). */
int64_t ifl_engine_kv_resident(struct ifl_executor *ex);

/* responses.c: the response queue, called by the engine and executor.c */
void ifl_exec_push_response(struct ifl_executor *ex, struct ifl_response *r);
void ifl_exec_update_stats(struct ifl_executor *ex, ifl_id id, const struct ifl_request_stats *s);
void ifl_xreq_free(struct xreq *q);
/* The live-request table (out_mu held): the entry of id, or NULL; a new
 * entry (IFL_ENOMEM when the table cannot grow); an entry removed. */
struct xlive *ifl_exec_live_find(struct ifl_executor *ex, ifl_id id);
int ifl_exec_live_insert(struct ifl_executor *ex, ifl_id id);
void ifl_exec_live_remove(struct ifl_executor *ex, struct xlive *e);

#endif
