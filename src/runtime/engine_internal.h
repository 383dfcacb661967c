/*
 * The engine's internals, shared by the files of the engine thread:
 *   engine.c      lifecycle, the main loop, one step, cancel and timeouts, stats
 *   schedule.c    the waiting queue, admission, batch building
 *   sequence.c    a sequence's start and finish, KV reservation, preemption
 *   emit.c        responses: per sequence, unstarted requests, beam results
 *   choose.c      token choice from the logits rows, and the logits outputs
 *   beam_slots.c  beam search glue: rows into the search, slots re-formed
 *   decoding.c    the decoding-strategy seam (decoding.h): what each
 *                 decoding sequence runs in a step and how its tokens are
 *                 taken from the logits; plain decoding is its first entry
 *   spec_*.c      the speculative proposers (n-gram lookup, client drafts,
 *                 ...), and spec_accept.c, the verifying acceptor they share
 * Calls go one way, down this order: engine.c -> schedule.c -> beam_slots.c
 * -> decoding.c -> spec_*.c -> spec_accept.c -> choose.c -> sequence.c ->
 * emit.c -> the response queue
 * (responses.c); tests/test_runtime_calls.sh checks that no two call both ways.
 *
 * Everything here is single-owner: the engine thread's (see exec.h).
 *
 * The engine thread: owns every sequence, the scheduler, the KV block
 * manager and the forward pass. Each iteration:
 *   1. takes new requests and cancels from the incoming queue;
 *   2. ends cancelled and timed-out requests;
 *   3. schedules one ragged batch: first every sequence with one pending
 *      position (decode), then prefill chunks, then newly admitted requests,
 *      under max_batch_size sequences and max_num_tokens rows, reserving KV
 *      blocks (preempting when they run out);
 *   4. runs the forward pass;
 *   5. samples each sequence whose last pending position was computed,
 *      checks its stop conditions and queues responses. The plain rows'
 *      processing and choice run on the forward pass's threads at once
 *      (ifl_choose_pick_rows: each touches only its own sequence's sampler
 *      state); everything else, in row order, on this thread. What a
 *      decoding sequence runs (its pending token, and drafts) and how its
 *      tokens are taken is its decoding strategy's (decoding.h).
 *
 * A sequence is its tokens (prompt then generated) and the number of
 * positions whose K/V are in the cache. Positions [n_pos, n_tokens) are
 * pending; computing the last one yields the logits of the next token. A
 * decode step is a prefill chunk of one, and a preempted sequence simply
 * drops its blocks (n_pos = 0) and is recomputed from its tokens later: the
 * client sees no gap and no duplicate token, and batch invariance makes the
 * recomputed K/V identical.
 *
 * Beam search (struct ebeam): a request of width W holds W slots, one per
 * live beam; beam 0 prefills the prompt, then each live beam is a decode
 * row. When every live beam's row is in (a lagging beam only delays its
 * own request), ifl_beam_step picks the next beams and the slots are
 * re-formed: a parent's first child keeps its slot, other children fork
 * its KV blocks copy-on-write into slots freed by childless beams. The
 * search's state lives in the request, so preemption (all beams at once)
 * just recomputes each beam from its tokens.
 *
 * Outputs: logits rows are flagged ROW_SAMPLE (a token is chosen from it)
 * and/or ROW_CTX (a prompt position of a request asking for context
 * logits; such a prefill is cut to the logits rows free in the step).
 * ifl_choose_capture_rows copies raw logits and hidden states out before logits
 * processors touch them, into buffers allocated at admission.
 */
#ifndef IFL_RUNTIME_ENGINE_INTERNAL_H
#define IFL_RUNTIME_ENGINE_INTERNAL_H

#include "runtime/beam.h"
#include "runtime/decoding.h"
#include "runtime/exec.h"
#include "runtime/sampler.h"
#include "runtime/stopstr.h"

#define IFL_MAX_TOP 20

struct eseq {
    struct xreq *q; /* NULL: free slot */
    int32_t index;  /* sequence_index within the request */
    int started;    /* 0: slot reserved for a sample not forked yet */
    struct ifl_kvc_seq kv;
    int32_t *tokens; /* [n_ctx] */
    int32_t n_tokens;
    int32_t n_prompt;
    int32_t n_gen;
    int32_t n_sent;                  /* generated tokens already in a response */
    int32_t finish;                  /* enum ifl_finish_reason; != 0 when done */
    int32_t end_token;               /* the end token that finished it, else -1 */
    int paused;                      /* preempted; blocks dropped */
    struct ifl_sampling_config scfg; /* the request's, with this sample's seed */
    struct ifl_sampler_state st;
    struct ifl_stopstr *stop;     /* NULL without stop strings */
    float *logprobs;              /* [n_ctx] */
    struct ifl_top_logprob *tops; /* [n_ctx][IFL_MAX_TOP] */
    float cum_logprob;
    struct ifl_detok dt;
    char *text; /* text not yet in a response */
    size_t n_text, cap_text;
    int64_t held_blocks; /* guaranteed_no_evict: blocks still reserved for it */
    /* outputs asked for, allocated when the slot is bound to a request */
    float *glog;                /* [max(1, max_tokens)][n_vocab] raw logits of each token */
    float *ghid;                /* [max(1, max_tokens)][n_embd] hidden state of each token */
    int32_t beam_j;             /* beam requests: this slot's live beam index */
    struct ifl_guide_state gst; /* guided requests: the grammar after its generated tokens */
    int g_init;                 /* gst is initialised (for some grammar) */
    int32_t n_draft; /* draft tokens run this step, in tokens[n_tokens, n_tokens + n_draft) */
    /* speculative decoding, per sequence (decoding.c) */
    int32_t spec_cap;     /* most drafts it may run next (adaptive) */
    int32_t spec_miss;    /* steps in a row whose drafts were all rejected */
    int32_t spec_pause;   /* steps left to decode plain */
    int32_t spec_backoff; /* the next pause's length */
    int32_t spec_align;   /* client drafts: draft_tokens[i + spec_align] is generated token i */
    /* tree drafts (decoding.h propose_tree), this step's: draft i's parent
     * (-1: the pending token) and depth, spec_tree when they are not a
     * chain; spec_base the pending token's position; after accept(), the
     * nodes kept, spec_path[0 .. spec_kept) by depth */
    int32_t spec_parent[IFL_SPEC_MAX_DRAFT];
    int32_t spec_depth[IFL_SPEC_MAX_DRAFT];
    int32_t spec_path[IFL_SPEC_MAX_DRAFT];
    int32_t spec_tree, spec_base, spec_kept, spec_depth_max;
};

/* Beam search state of one request (beam_width > 1). Its W slots: live
 * beam j runs in slot[j]; the others are held unstarted for later forks.
 * A step of the search happens once every live beam's row is ready, so a
 * beam that lags (preempted and recomputing, or left out of a full step)
 * only delays its request. The trace (only with generation logits or
 * hidden states) keeps every live beam's raw row per step and the tree of
 * parents, from which each finished hypothesis's rows are read back. */
struct ebeam {
    struct ifl_beam b;
    int32_t width;
    int32_t n_ret; /* results to return (top n_ret hypotheses) */
    int32_t max_len;
    int32_t slot[IFL_BEAM_MAX_WIDTH]; /* live beam -> engine slot */
    int32_t all[IFL_BEAM_MAX_WIDTH];  /* every slot the request holds */
    uint8_t ready[IFL_BEAM_MAX_WIDTH];
    float *rows;    /* [width][n_vocab] processed rows of this step */
    float *tlog;    /* [max_len][width][n_vocab] raw row of live beam j at step t */
    float *thid;    /* [max_len][width][n_embd] */
    int32_t *tpar;  /* [max_len][width] live beam i after step t came from tpar[t][i] */
    int32_t *ttok;  /* [max_len][width] ... with token ttok[t][i] */
    int32_t *tlive; /* [max_len + 1] live beams at step t */
};

/* logits rows of a step: what each is for */
#define ROW_SAMPLE 1 /* the next token of its sequence is chosen from it */
#define ROW_CTX 2    /* a prompt position of a request asking for context logits */
#define ROW_PICKED 4 /* ROW_SAMPLE, its token already picked (pick_tok, pick_lp) */

struct engine {
    struct ifl_kvc *kvc;
    struct ifl_kv_store *store;
    struct ifl_fwd *fwd;
    struct eseq *seqs; /* [n_slots] */
    int32_t n_slots;
    struct xreq *waiting; /* sorted: priority desc, arrival asc */
    int32_t n_waiting;
    int32_t n_active_req;
    int64_t reserved; /* guaranteed_no_evict: blocks promised, not yet taken */
    int kv_window;    /* every layer slides: blocks behind the windows go back early */
    /* batch */
    int32_t max_rows;
    int32_t *b_tok, *b_pos, *b_seq;
    uint8_t *b_want;
    /* tree rows (forward.h): each row's cache place, attended prefix and
     * path; used in a step only when tree_rows is set */
    int32_t *b_kvpos, *b_pre, *b_off; /* [max_rows] */
    int32_t *b_path;                  /* [n_slots * TREE_PATH_MAX] */
    int32_t n_path;
    int tree_rows;
    int32_t *row_slot;      /* logits row -> slot */
    const int32_t **tables; /* [n_slots] */
    int32_t *n_blocks;      /* [n_slots] */
    float *logits;          /* [logit_cap][n_vocab] */
    float *scratch;         /* [n_vocab] a copy of a row for forked samples */
    float *hidden;          /* [logit_cap][n_embd] final hidden state of each logits row */
    uint8_t *row_flag;      /* logits row -> ROW_SAMPLE | ROW_CTX | ROW_PICKED */
    int32_t *row_pos;       /* logits row -> its position */
    int32_t *pick_rows;     /* [logit_cap] this step's rows picked on every thread */
    int32_t n_pick;
    int32_t *pick_tok; /* [logit_cap] by logits row: the token picked_rows chose */
    float *pick_lp;    /* [logit_cap] and its log-prob */
    int want_hidden;   /* this step's batch asks for hidden states */
    int32_t n_embd;
    int32_t logit_cap;
    char *piece;      /* detokenizer output */
    char *stopbuf;    /* stop-string matcher output */
    int32_t *eog_ids; /* the model's end-of-generation tokens */
    int32_t n_eog;
    int64_t iteration;
    int64_t completed;
    /* KV memory: how the pool was sized, and when blocks give memory back */
    int32_t kv_bound; /* enum ifl_kv_bound */
    int64_t kv_bound_bytes;
    int64_t kv_block_bytes;
    int64_t release_us;      /* free this long before given back; < 0 never */
    int64_t busy_release_at; /* the next time a step may be followed by a release */
    struct ifl_kvc_stats kst;
    struct ifl_xguide_engine ge;         /* guided decoding: vocabulary index, masker */
    const struct ifl_decoding *decs[8];  /* the strategies requests choose from, */
    int32_t n_decs;                      /* latest registered first (decoding.c) */
    int32_t *dec_rows;                   /* [logit_cap] one sequence's rows, for accept() */
    const struct ifl_decoding *spec;     /* the strategy of the config's speculative.type */
    void *spec_state;                    /* that strategy's, from its engine_init */
    int32_t spec_rows;                   /* draft rows the step being built may still take */
    int32_t spec_seqs;                   /* decoding sequences the step has not asked yet */
    int64_t spec_drafted, spec_accepted; /* since creation */
    /* states the configured strategy has the forward pass capture (an
     * EAGLE-3 head's input, forward.h), set up by its engine_init and
     * owned by it; n_extract 0: none. Rows of its sequences ask. */
    int32_t n_extract;
    const int32_t *extract_layers; /* [n_extract] */
    uint8_t *extract_rows;         /* [max_rows] */
    float *extract_out;            /* [max_rows][n_extract][n_embd] */
    /* LoRA: a step's adapters by id, and each row's scales for them (the
     * batch's lora and lora_scale), grown when a step has more adapters
     * than any before */
    struct xlora **l_ad;             /* [l_cap] */
    const struct ifl_lora_rt **l_rt; /* [l_cap] their applied forms */
    float *l_scale;                  /* [max_rows][l_cap] */
    int32_t l_cap;
    /* images (images.h): the encoder's state and cache, and each row's
     * given input of this step (the batch's embd) */
    struct ifl_img_engine *img;
    const float **b_embd; /* [max_rows] */
};

/* Path entries one sequence's tree rows take at most (depths 1 .. 32). */
#define TREE_PATH_MAX (IFL_SPEC_MAX_DRAFT * (IFL_SPEC_MAX_DRAFT + 1) / 2)

/* Blocks that n_pos positions fill. */
static inline int32_t ifl_eng_blocks_for(const struct engine *e, int64_t n_pos)
{
    int32_t bs = ifl_kvc_block_size(e->kvc);
    return (int32_t)((n_pos + bs - 1) / bs);
}

/* schedule.c */
int ifl_sched_before(const struct xreq *a, const struct xreq *b);
void ifl_sched_wait(struct engine *e, struct xreq *q);
void ifl_sched_admit(struct ifl_executor *ex);
int32_t ifl_sched_build_batch(struct ifl_executor *ex, int32_t *n_logit, int32_t *ctx_rows,
                              int32_t *ctx_reqs, int32_t *gen_rows);

/* beam_slots.c */
int ifl_beamslot_create(struct ifl_executor *ex, struct xreq *q, struct ebeam **out);
void ifl_beamslot_take_row(struct ifl_executor *ex, struct eseq *s, const float *row);
void ifl_beamslot_advance(struct ifl_executor *ex, struct xreq *q);

/* choose.c */
struct ifl_sampler_extras ifl_choose_extras(const struct engine *e, const struct xreq *q);
void ifl_choose_end_unpickable(struct ifl_executor *ex, struct eseq *s);
/* Processes s's row and picks its next token as plain decoding does,
 * without taking it; -1 when there is none to take (s is then finished,
 * its request failed or, guided, complete). */
int32_t ifl_choose_token(struct ifl_executor *ex, struct eseq *s, float *row, float *lp);
/* The same, speculative sampling against draft (a one-hot proposal) when
 * draft >= 0 (the executor's speculative.accept = rejection;
 * ifl_sampler_pick_spec). */
int32_t ifl_choose_token_spec(struct ifl_executor *ex, struct eseq *s, float *row, int32_t draft,
                              float *lp);
/* ifl_choose_token, then ifl_choose_apply. */
void ifl_choose_sample(struct ifl_executor *ex, struct eseq *s, float *row);
void ifl_choose_apply(struct ifl_executor *ex, struct eseq *s, int32_t tok, float lp);
int ifl_choose_forks_now(const struct eseq *s);
int ifl_choose_plain_pick(const struct engine *e, int32_t r);
void ifl_choose_pick_rows(void *arg, int ith, int nth);
void ifl_choose_fork_samples(struct ifl_executor *ex, struct eseq *prim, const float *row,
                             float *scratch);
void ifl_choose_capture_rows(struct ifl_executor *ex, int32_t nlog);
/* Row r's raw logits (and hidden state) as those of s's next generated
 * token, when s asked for them (tree drafts: the row is known only when
 * its node is reached). */
void ifl_choose_capture_gen(struct ifl_executor *ex, struct eseq *s, int32_t r);
void ifl_choose_run_processors(struct ifl_executor *ex, int32_t nlog);

/* sequence.c */
void ifl_seq_free_outputs(struct xreq *q);
int ifl_seq_push_text(struct engine *e, struct eseq *s, size_t n, int last);
int ifl_seq_start(struct ifl_executor *ex, struct eseq *s, struct xreq *q, int32_t index);
void ifl_seq_finish(struct ifl_executor *ex, struct eseq *s, int32_t reason);
void ifl_seq_finish_beams(struct ifl_executor *ex, struct xreq *q, int32_t reason);
void ifl_seq_finish_request(struct ifl_executor *ex, struct xreq *q, int32_t reason);
int ifl_seq_reserve(struct engine *e, struct eseq *s, int32_t n_pos_total);
/* A model whose every layer slides (e->kv_window): gives each running
 * sequence's blocks that its windows have passed back to the pool
 * (ifl_kvc_drop_before). Called at a step's start, when drafts are
 * settled, so no later row of the sequence reads them. */
void ifl_seq_drop_behind_window(struct ifl_executor *ex);
void ifl_seq_preempt(struct ifl_executor *ex, struct xreq *q);

/* emit.c */
void ifl_emit_seq(struct ifl_executor *ex, struct eseq *s, int is_final);
void ifl_emit_unstarted(struct ifl_executor *ex, struct xreq *q, int32_t reason);
void ifl_emit_beams(struct ifl_executor *ex, struct xreq *q);

#endif
