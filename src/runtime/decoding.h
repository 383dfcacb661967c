/*
 * Decoding strategies: how a sequence's next tokens are proposed and taken,
 * the seam between the engine's step and the ways of decoding. After
 * TensorRT Edge-LLM's DecoderRegistry / DecodingStrategy: each step, for
 * every sequence that is decoding (one pending token), its request's
 * strategy
 *   (a) proposes the tokens to run: plain decoding runs the one token it
 *       sampled last; a speculative strategy adds k draft tokens after it,
 *       so the forward pass computes k + 1 logits rows for the sequence in
 *       one step (the weights are read once for all of them);
 *   (b) accepts from the logits of those rows: plain decoding samples one
 *       token; a speculative one picks, row by row, the token plain
 *       decoding would pick and keeps the drafts while they equal it, then
 *       takes the first differing pick (or the pick after the last draft)
 *       as a bonus token.
 * The scheduler (schedule.c) and the step (engine.c) only call the
 * engine's side at the bottom of this header, so a new strategy is a file
 * of its own plus one line in decoding.c's table of built-in strategies.
 *
 * The contract:
 *  - Choice. Each request gets one strategy at admission: the latest
 *    registered whose wants() takes it; plain decoding takes every request
 *    and is the last resort. Beam searches never reach a strategy (their
 *    rows go to beam_slots.c), and the engine asks for no drafts for a
 *    sequence whose request has a logits processor, asks for context
 *    logits still to capture, or is about to fork its samples (the first
 *    token of a request with num_return_sequences > 1): these decode plain.
 *  - Rows. propose() may write at most max tokens, where max leaves room in
 *    the step (max_num_tokens rows, the logits rows) for the pending token
 *    and keeps the sequence within n_ctx and within max_tokens (k drafts
 *    and the bonus are k + 1 tokens). Returning 0 decodes plain this step.
 *    Drafts are best effort: when the KV blocks for them cannot be had
 *    without preempting anyone, the engine drops them and runs the pending
 *    token alone (accept() then gets one row).
 *  - Tokens. Drafts are written into s->tokens[s->n_tokens ..), the unused
 *    tail of the sequence's token array, which holds them for this step
 *    only: n_tokens does not move until accept() applies a token.
 *  - KV positions are the engine's. It reserves blocks for the pending
 *    token and the drafts, runs them, and records (commits) only positions
 *    below n_tokens, so a draft never enters the prefix cache. After
 *    accept() it commits the positions of the drafts that were kept and
 *    gives back what the others held (ifl_kvc_truncate), and returns
 *    blocks so freed to a guaranteed_no_evict reservation. A strategy never
 *    touches s->kv.
 *  - Trees. A strategy with propose_tree proposes drafts with parents
 *    instead; rows[1 + i] is then draft i's, and the verifying acceptor
 *    walks from the pending token down the children that equal each pick
 *    (s->spec_path); settling moves the kept path's K/V to its positions
 *    before truncating (see propose_tree below).
 *  - Acceptance. accept() gets the sequence's logits rows of this step in
 *    position order: rows[0] predicts the token after the pending one,
 *    rows[i] the one after draft i - 1. It must apply tokens through
 *    ifl_choose_apply (or finish the sequence), in order, one per row from
 *    the first, stopping after the first token that is not the next draft
 *    or when the sequence finishes. Output equal to plain decoding's,
 *    token for token and log-prob for log-prob, follows when each row's
 *    token is picked as plain decoding would (ifl_choose_token: the
 *    sampler draws token i from (seed, i) alone) and the logits of a row
 *    do not depend on the rows beside it (batch invariance).
 *  - Preemption. A preempted sequence loses all its KV (it is recomputed
 *    from its tokens later) and, finished or preempted, the strategy's
 *    drop() (when set) is called: anything it keeps per sequence that
 *    mirrors the KV (a draft model's cache) must be forgotten. Drafts were
 *    never part of the tokens, so nothing else is lost.
 *  - Draft length. The engine's side bounds max further: by the
 *    request's and the executor's n_max, and, when the executor's
 *    speculative.adaptive is set, by the sequence's running acceptance
 *    (spec_cap), a plain-decoding pause after repeated misses, and an
 *    even share, among the step's decoding sequences, of the rows left
 *    under the step's budget (decoding.c's SPEC_STEP_ROWS, past which a
 *    step is compute-bound; none beside a prompt chunk). Proposals
 *    shorter than n_min are dropped. A strategy only proposes what it believes in.
 *  - Threads. Everything here runs on the engine thread, between forward
 *    passes; nothing may allocate per step (STYLE.md): state a strategy
 *    needs is allocated in engine_init (sized by the executor's slots and
 *    context) or before it is registered.
 *  - The executor's own strategies. Each request is offered, in order:
 *    those registered (tests), client drafts (a request that brings
 *    speculative.draft_tokens), the strategy of the executor's
 *    speculative.type, plain decoding. A request with speculative.disable
 *    set, or n_max 0, decodes plain whatever wants() says.
 */
#ifndef IFL_RUNTIME_DECODING_H
#define IFL_RUNTIME_DECODING_H

#include <stdint.h>

/* Most drafts one sequence runs in a step (speculative.n_max's bound). */
#define IFL_SPEC_MAX_DRAFT 32
/* Drafts that cost little beside the pending token: on the 2-core Zen 5 of
 * bench/README.md a step of 8 rows costs 1.28 times a step of one and 16
 * rows 2.0 times (tinyllama-1.1b Q8_0, "Verify cost"). The adaptive draft
 * length starts here (a first step whose drafts all fail then costs 1.28
 * steps, not 2) and stays here while only some drafts are kept
 * (decoding.c). */
#define IFL_SPEC_FREE_DRAFTS 7

struct ifl_executor;
struct eseq;
struct xreq;

struct ifl_decoding {
    const char *name;
    /* Whether this strategy decodes request q (asked once, at admission,
     * on the engine thread). NULL: every request. */
    int (*wants)(const struct ifl_executor *ex, const struct xreq *q);
    /* Writes up to max draft tokens to follow s's pending token into
     * draft (= s->tokens + s->n_tokens) and returns how many; 0 or a
     * NULL propose: plain decoding this step. max >= 1. */
    int32_t (*propose)(struct ifl_executor *ex, struct eseq *s, int32_t *draft, int32_t max);
    /* Optional, used instead of propose: a tree of up to max drafts, in an
     * order where each comes after its parent: parent[i] is -1 (the
     * pending token) or an earlier draft. The engine runs every draft in
     * one pass, each at a cache place of its own after the pending token
     * (its RoPE position its depth), attending to the sequence and its
     * ancestors only (forward.h's tree rows). The verifying acceptor walks
     * it: at each node it picks the target's token as plain decoding does
     * and goes down to the child that drafted it; the kept path's K/V is
     * then moved to its positions and the rest given back. A chain
     * (parent[i] = i - 1) runs as plain drafts. */
    int32_t (*propose_tree)(struct ifl_executor *ex, struct eseq *s, int32_t *draft,
                            int32_t *parent, int32_t max);
    /* Takes s's tokens from its n logits rows (indices into the step's
     * logits, in position order), as the contract above says. */
    void (*accept)(struct ifl_executor *ex, struct eseq *s, const int32_t *rows, int32_t n);
    /* Optional: s's KV is gone (finished, or preempted to be recomputed). */
    void (*drop)(struct ifl_executor *ex, struct eseq *s);
    /* A sequence with one row may have it processed and picked on every
     * thread before accept() (ROW_PICKED; only plain decoding may say so:
     * the pick sees the sequence as it was when the step began). */
    int parallel_pick;
    /* The enum ifl_spec_type this strategy serves when an executor's
     * config names it (0: none; registered strategies leave it 0). */
    int32_t type;
    /* Optional: at executor creation (engine_init; it keeps its state in
     * ex->eng->spec_state and returns a status, err a sentence) and destruction
     * (engine_fini, also after a failed engine_init), for the strategy of
     * the executor's speculative.type only. */
    int (*engine_init)(struct ifl_executor *ex, char *err);
    void (*engine_fini)(struct ifl_executor *ex);
    /* Optional: once per step, before the batch is built and any
     * propose() of the step (a draft model drafts for all its sequences
     * in one batched pass here). */
    void (*prepare)(struct ifl_executor *ex);
    /* Optional: once per step that ran a forward pass, after every
     * sequence's tokens were taken and its KV settled, with the step's
     * batch still in the engine's arrays (rows of b_tok, b_pos, b_seq and,
     * when the strategy asked for them, extract_out): a strategy that
     * mirrors what the target computed (an EAGLE-3 head's own cache)
     * catches up here. Positions below a sequence's kv.n_pos are its
     * tokens'; rows at or past it were rejected drafts. */
    void (*observe)(struct ifl_executor *ex, int32_t rows);
    /* Optional: the strategy's own KV memory (a draft model's paged pool,
     * an EAGLE-3 head's cache): the bytes reserved, and those in memory
     * now (-1: unknown), measured at the call. Any thread may call it
     * between a successful engine_init and engine_fini. */
    void (*kv_memory)(struct ifl_executor *ex, int64_t *reserved, int64_t *resident);
    /* Optional: the engine is idle (nothing queued or running): give back
     * the memory of the strategy's own KV blocks that have been free for
     * kv_release_ms, as the engine does for its pool. Returns the clock
     * time (ifl_now_us) when more will be due, INT64_MAX if none. On the
     * engine thread. */
    int64_t (*idle)(struct ifl_executor *ex);
};

/* Plain decoding: no drafts; one token sampled from the one row. */
extern const struct ifl_decoding ifl_decoding_plain;
/* Client drafts: the request's speculative.draft_tokens (spec_external.c). */
extern const struct ifl_decoding ifl_decoding_external;
/* N-gram lookup in the sequence's own tokens (spec_ngram.c). */
extern const struct ifl_decoding ifl_decoding_ngram;
/* A draft model with the target's vocabulary (spec_draft.c). */
extern const struct ifl_decoding ifl_decoding_draft;
/* An EAGLE-3 head over the target's states (spec_eagle3.c). */
extern const struct ifl_decoding ifl_decoding_eagle3;

/* Adds d (static storage, not copied) to the strategies that executors
 * created from now on choose from, ahead of those already there. For
 * strategies that are not built in (tests). Thread-safe. IFL_EFULL when 8
 * are registered. */
int ifl_decoding_register(const struct ifl_decoding *d);
/* Removes d; executors created before keep it. Thread-safe. */
void ifl_decoding_unregister(const struct ifl_decoding *d);

/* The verifying acceptor for strategies that propose drafts: picks each
 * row's token as plain decoding would and keeps the drafts while they
 * equal the pick, as the contract above says. */
void ifl_decoding_accept_drafts(struct ifl_executor *ex, struct eseq *s, const int32_t *rows,
                                int32_t n);

/* ---- the engine's side ---- */

/* Snapshot of the registry for a new engine, and the engine_init of the
 * strategy its config names (engine.c); a status and err on failure. */
int ifl_decoding_engine_init(struct ifl_executor *ex, char *err);
void ifl_decoding_engine_fini(struct ifl_executor *ex);
/* The name of a speculative type ("none", "draft", "ngram", "eagle3"),
 * or NULL; and whether this build has a strategy for it. */
const char *ifl_decoding_type_name(int32_t type);
int ifl_decoding_type_built(int32_t type);
/* The executor's speculative strategy's idle() (INT64_MAX without one). */
int64_t ifl_decoding_idle(struct ifl_executor *ex);
/* The executor's speculative strategy's kv_memory (0 and 0 without one). */
void ifl_decoding_kv_memory(struct ifl_executor *ex, int64_t *reserved, int64_t *resident);
/* Every strategy's prepare(), once per step (schedule.c). */
void ifl_decoding_prepare(struct ifl_executor *ex);
/* Every strategy's observe(), after a step's forward pass of `rows` rows
 * and its tokens (engine.c). */
void ifl_decoding_observe(struct ifl_executor *ex, int32_t rows);
/* The strategy for q, at admission (schedule.c). */
const struct ifl_decoding *ifl_decoding_for(const struct ifl_executor *ex, const struct xreq *q);
/* The most drafts the engine would ask decoding sequence s for this
 * step (0: none), before the rows left in the step bound them: the
 * context, max_tokens, n_max and n_min, the adaptive cap and pause, and
 * the requests that decode plain. ifl_decoding_propose applies it; a
 * prepare() that drafts ahead (a draft model) uses it to draft no more
 * than will be asked for. */
int32_t ifl_decoding_draft_limit(const struct ifl_executor *ex, const struct eseq *s);
/* Asks decoding sequence s for drafts to follow its pending token, with
 * room for max of them; sets and returns s->n_draft (schedule.c). */
int32_t ifl_decoding_propose(struct ifl_executor *ex, struct eseq *s, int32_t max);
/* Hands s its rows of this step, starting at logits row r (the first of
 * its rows in row order) of nlog, then settles its KV (engine.c). Its
 * other rows lose ROW_SAMPLE, so the step takes each sequence once. */
void ifl_decoding_accept(struct ifl_executor *ex, struct eseq *s, int32_t r, int32_t nlog);

#endif
