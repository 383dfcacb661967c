/*
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
 *      (pick_rows: each touches only its own sequence's sampler state);
 *      everything else, in row order, on this thread.
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
 * capture_rows copies raw logits and hidden states out before logits
 * processors touch them, into buffers allocated at admission.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/sysmem.h"
#include "core/timeutil.h"
#include "runtime/beam.h"
#include "runtime/exec.h"
#include "runtime/sampler.h"
#include "runtime/stopstr.h"

struct eseq {
    struct xreq *q;            /* NULL: free slot */
    int32_t index;             /* sequence_index within the request */
    int started;               /* 0: slot reserved for a sample not forked yet */
    struct ifl_kvc_seq kv;
    int32_t *tokens;           /* [n_ctx] */
    int32_t n_tokens;
    int32_t n_prompt;
    int32_t n_gen;
    int32_t n_sent;            /* generated tokens already in a response */
    int32_t finish;            /* enum ifl_finish_reason; != 0 when done */
    int paused;                /* preempted; blocks dropped */
    struct ifl_sampling_config scfg; /* the request's, with this sample's seed */
    struct ifl_sampler_state st;
    struct ifl_stopstr *stop;  /* NULL without stop strings */
    float *logprobs;           /* [n_ctx] */
    struct ifl_top_logprob *tops; /* [n_ctx][IFL_MAX_TOP] */
    float cum_logprob;
    struct ifl_detok dt;
    char *text;                /* text not yet in a response */
    size_t n_text, cap_text;
    int64_t held_blocks;       /* guaranteed_no_evict: blocks still reserved for it */
    /* outputs asked for, allocated when the slot is bound to a request */
    float *glog;               /* [max(1, max_tokens)][n_vocab] raw logits of each token */
    float *ghid;               /* [max(1, max_tokens)][n_embd] hidden state of each token */
    int32_t beam_j;            /* beam requests: this slot's live beam index */
    struct ifl_guide_state gst; /* guided requests: the grammar after its generated tokens */
    int g_init;                /* gst is initialised (for some grammar) */
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
    int32_t n_ret;             /* results to return (top n_ret hypotheses) */
    int32_t max_len;
    int32_t slot[IFL_BEAM_MAX_WIDTH]; /* live beam -> engine slot */
    int32_t all[IFL_BEAM_MAX_WIDTH];  /* every slot the request holds */
    uint8_t ready[IFL_BEAM_MAX_WIDTH];
    float *rows;               /* [width][n_vocab] processed rows of this step */
    float *tlog;               /* [max_len][width][n_vocab] raw row of live beam j at step t */
    float *thid;               /* [max_len][width][n_embd] */
    int32_t *tpar;             /* [max_len][width] live beam i after step t came from tpar[t][i] */
    int32_t *ttok;             /* [max_len][width] ... with token ttok[t][i] */
    int32_t *tlive;            /* [max_len + 1] live beams at step t */
};

/* logits rows of a step: what each is for */
#define ROW_SAMPLE 1 /* the next token of its sequence is chosen from it */
#define ROW_CTX 2    /* a prompt position of a request asking for context logits */

static void req_free_outputs(struct xreq *q);
static void publish_stats(struct ifl_executor *ex, double latency_ms, int32_t ctx_reqs,
                          int32_t ctx_rows, int32_t gen_reqs, int32_t gen_rows);

#define IFL_MAX_TOP 20

struct engine {
    struct ifl_kvc *kvc;
    struct ifl_kv_store *store;
    struct ifl_fwd *fwd;
    struct eseq *seqs;         /* [n_slots] */
    int32_t n_slots;
    struct xreq *waiting;      /* sorted: priority desc, arrival asc */
    int32_t n_waiting;
    int32_t n_active_req;
    int64_t reserved;          /* guaranteed_no_evict: blocks promised, not yet taken */
    /* batch */
    int32_t max_rows;
    int32_t *b_tok, *b_pos, *b_seq;
    uint8_t *b_want;
    int32_t *row_slot;         /* logits row -> slot */
    const int32_t **tables;    /* [n_slots] */
    int32_t *n_blocks;         /* [n_slots] */
    float *logits;             /* [logit_cap][n_vocab] */
    float *scratch;            /* [n_vocab] a copy of a row for forked samples */
    float *hidden;             /* [logit_cap][n_embd] final hidden state of each logits row */
    uint8_t *row_flag;         /* logits row -> ROW_SAMPLE | ROW_CTX */
    int32_t *row_pos;          /* logits row -> its position */
    int32_t *pick_rows;        /* [logit_cap] this step's rows picked on every thread */
    int32_t n_pick;
    int32_t *pick_tok;         /* [logit_cap] by logits row: the token picked_rows chose */
    float *pick_lp;            /* [logit_cap] and its log-prob */
    int want_hidden;           /* this step's batch asks for hidden states */
    int32_t n_embd;
    int32_t logit_cap;
    char *piece;               /* detokenizer output */
    char *stopbuf;             /* stop-string matcher output */
    int32_t *eog_ids;          /* the model's end-of-generation tokens */
    int32_t n_eog;
    int64_t iteration;
    int64_t completed;
    /* KV memory: how the pool was sized, and when blocks give memory back */
    int32_t kv_bound;           /* enum ifl_kv_bound */
    int64_t kv_bound_bytes;
    int64_t kv_block_bytes;
    int64_t release_us;         /* free this long before given back; < 0 never */
    int64_t busy_release_at;    /* the next time a step may be followed by a release */
    struct ifl_kvc_stats kst;
    struct ifl_xguide_engine ge; /* guided decoding: vocabulary index, masker */
};

static void kv_copy(void *user, int32_t dst, int32_t src, int32_t n)
{
    ifl_kv_store_copy_block(user, dst, src, n);
}

static int32_t blocks_for_n(int64_t n_pos, int32_t bs) { return (int32_t)((n_pos + bs - 1) / bs); }

static void kv_release(void *user, int32_t first, int32_t n)
{
    ifl_kv_store_release(user, first, n);
}

/* The default pool's size in positions: max_batch_size full contexts (and
 * their copy-on-write blocks) if that fits the memory bound, else as many
 * whole blocks as do, one context at least. Sets e->kv_bound and
 * e->kv_bound_bytes. */
static int64_t default_pool_tokens(struct ifl_executor *ex, struct engine *e, size_t per_pos,
                                   int32_t bs)
{
    const struct ifl_executor_config *c = &ex->cfg;
    int64_t full = (int64_t)c->max_batch_size * ex->n_ctx + (int64_t)(c->max_batch_size - 1) * bs;
    int64_t bound;
    if (c->kv_cache_memory_limit > 0) {
        bound = c->kv_cache_memory_limit;
        e->kv_bound = IFL_KV_BOUND_LIMIT;
    } else {
        struct ifl_sysmem m;
        ifl_sysmem_read(NULL, &m);
        double share = c->kv_cache_memory_share > 0 ? c->kv_cache_memory_share : 0.4;
        int64_t room = m.mem_available;
        e->kv_bound = IFL_KV_BOUND_MEM_AVAILABLE;
        if (m.cg_limit >= 0 && (room < 0 || m.cg_limit - m.cg_usage < room)) {
            room = m.cg_limit > m.cg_usage ? m.cg_limit - m.cg_usage : 0;
            e->kv_bound = IFL_KV_BOUND_CGROUP;
        }
        if (room < 0) { /* nothing known: the full pool, as before */
            e->kv_bound = IFL_KV_BOUND_CONTEXTS;
            return full;
        }
        bound = (int64_t)((double)room * share);
    }
    e->kv_bound_bytes = bound;
    if ((double)full * (double)per_pos <= (double)bound) {
        e->kv_bound = IFL_KV_BOUND_CONTEXTS;
        return full;
    }
    int64_t tokens = bound / (int64_t)per_pos / bs * bs;
    int64_t one = (int64_t)blocks_for_n(ex->n_ctx, bs) * bs;
    return tokens > one ? tokens : one;
}

static int32_t blocks_for(const struct engine *e, int64_t n_pos)
{
    int32_t bs = ifl_kvc_block_size(e->kvc);
    return (int32_t)((n_pos + bs - 1) / bs);
}

int ifl_engine_create(struct ifl_executor *ex, char *err)
{
    const struct ifl_executor_config *c = &ex->cfg;
    const struct ifl_hparams *hp = &ex->model->hp;
    struct engine *e = calloc(1, sizeof(*e));
    if (!e)
        return ifl_err(err, IFL_ENOMEM, "engine: out of memory");
    ex->eng = e;
    int32_t bs = c->kv_block_size;
    int64_t tokens = c->kv_cache_tokens;
    enum ifl_type st = c->kv_type == IFL_KV_F32    ? IFL_TYPE_F32
                       : c->kv_type == IFL_KV_Q8_0 ? IFL_TYPE_Q8_0
                                                   : IFL_TYPE_F16;
    size_t per_pos = (size_t)hp->n_layer *
                     (ifl_type_row_size(st, (int64_t)hp->n_head_kv * hp->head_dim) +
                      ifl_type_row_size(st, (int64_t)hp->n_head_kv * hp->head_dim_v));
    /* a byte budget is whole blocks within it (too small a budget is the
     * error below, not the default size) */
    e->kv_bound = IFL_KV_BOUND_TOKENS;
    if (tokens == 0 && c->kv_cache_bytes > 0) {
        tokens = c->kv_cache_bytes / (int64_t)per_pos / bs * bs;
        e->kv_bound = IFL_KV_BOUND_BYTES;
    } else if (tokens == 0) { /* and the copy-on-write blocks that a request of
                                 max_batch_size samples at full context reserves */
        tokens = default_pool_tokens(ex, e, per_pos, bs);
    }
    e->kv_block_bytes = (int64_t)per_pos * bs;
    e->release_us =
        c->kv_release_ms < 0 ? -1 : (c->kv_release_ms ? c->kv_release_ms : 5000) * (int64_t)1000;
    int64_t n_blocks = (tokens + bs - 1) / bs;
    ex->kv_cache_tokens = n_blocks * bs;
    if (n_blocks < blocks_for_n(ex->n_ctx, bs))
        return ifl_err(err, IFL_EINVAL,
                       "config: a KV cache of %lld positions cannot hold one full context of %d",
                       (long long)tokens, ex->n_ctx);
    if (n_blocks > (1 << 30))
        return ifl_err(err, IFL_EINVAL, "config: KV cache of %lld positions is too large",
                       (long long)tokens);
    int rc = ifl_kv_store_create(&e->store, hp, st,
                                 (int32_t)n_blocks, bs, err);
    if (rc)
        return rc;
    if (c->kv_prefault) {
        if ((rc = ifl_kv_store_prefault(e->store, err)))
            return rc;
        e->release_us = -1;
    }
    struct ifl_kvc_config kc = {.n_blocks = (int32_t)n_blocks,
                                .block_size = bs,
                                .enable_prefix_caching = c->enable_prefix_caching,
                                .copy = kv_copy,
                                .copy_user = e->store,
                                .release = kv_release,
                                .release_user = e->store};
    if (ifl_kvc_create(&e->kvc, &kc))
        return ifl_err(err, IFL_ENOMEM, "engine: out of memory for the KV block manager");
    e->max_rows = c->max_num_tokens;
    struct ifl_fwd_config fc = {.max_rows = e->max_rows, .max_ctx = ex->n_ctx,
                                .n_threads = c->n_threads};
    if ((rc = ifl_fwd_create(&e->fwd, ex->model, e->store, &fc, err)))
        return rc;
    e->n_slots = c->max_batch_size;
    ifl_xguide_engine_init(&e->ge, ex->vocab, ex->n_vocab);
    e->logit_cap = e->n_slots > 64 ? e->n_slots : 64;
    if (e->logit_cap > e->max_rows)
        e->logit_cap = e->max_rows > e->n_slots ? e->max_rows : e->n_slots;
    size_t R = (size_t)e->max_rows;
    e->seqs = calloc((size_t)e->n_slots, sizeof(*e->seqs));
    e->b_tok = malloc(sizeof(int32_t) * R);
    e->b_pos = malloc(sizeof(int32_t) * R);
    e->b_seq = malloc(sizeof(int32_t) * R);
    e->b_want = malloc(R);
    e->row_slot = malloc(sizeof(int32_t) * R);
    e->tables = calloc((size_t)e->n_slots, sizeof(*e->tables));
    e->n_blocks = calloc((size_t)e->n_slots, sizeof(int32_t));
    e->logits = malloc(sizeof(float) * (size_t)e->logit_cap * (size_t)ex->n_vocab);
    e->scratch = malloc(sizeof(float) * (size_t)ex->n_vocab);
    e->n_embd = hp->n_embd;
    e->hidden = malloc(sizeof(float) * (size_t)e->logit_cap * (size_t)hp->n_embd);
    e->row_flag = malloc(R);
    e->row_pos = malloc(sizeof(int32_t) * R);
    e->piece = malloc(IFL_DETOK_ROOM(ex->vocab));
    /* a feed of one piece plus the longest hold: 64 stop strings of 256 bytes at most */
    e->stopbuf = malloc(IFL_DETOK_ROOM(ex->vocab) + 64 * 256);
    e->eog_ids = malloc(sizeof(int32_t) * (size_t)ex->n_vocab);
    e->pick_rows = malloc(sizeof(int32_t) * (size_t)e->logit_cap);
    e->pick_tok = malloc(sizeof(int32_t) * (size_t)e->logit_cap);
    e->pick_lp = malloc(sizeof(float) * (size_t)e->logit_cap);
    if (e->eog_ids)
        for (int32_t t = 0; t < ex->n_vocab; t++)
            if (ifl_vocab_is_eog(ex->vocab, t))
                e->eog_ids[e->n_eog++] = t;
    if (!e->seqs || !e->b_tok || !e->b_pos || !e->b_seq || !e->b_want || !e->row_slot ||
        !e->tables || !e->n_blocks || !e->logits || !e->scratch || !e->hidden ||
        !e->row_flag || !e->row_pos || !e->piece ||
        !e->stopbuf || !e->eog_ids || !e->pick_rows || !e->pick_tok || !e->pick_lp)
        return ifl_err(err, IFL_ENOMEM, "engine: out of memory");
    int32_t max_blocks = blocks_for_n(ex->n_ctx, bs) + 1;
    for (int32_t i = 0; i < e->n_slots; i++) {
        struct eseq *s = &e->seqs[i];
        s->tokens = malloc(sizeof(int32_t) * (size_t)ex->n_ctx);
        s->logprobs = malloc(sizeof(float) * (size_t)ex->n_ctx);
        s->tops = malloc(sizeof(*s->tops) * (size_t)ex->n_ctx * IFL_MAX_TOP);
        s->cap_text = 4096;
        s->text = malloc(s->cap_text);
        if (!s->tokens || !s->logprobs || !s->tops || !s->text ||
            ifl_kvc_seq_init(&s->kv, max_blocks) || ifl_sampler_state_init(&s->st, ex->n_vocab))
            return ifl_err(err, IFL_ENOMEM, "engine: out of memory for %d sequences",
                           e->n_slots);
        e->tables[i] = s->kv.blocks;
    }
    publish_stats(ex, 0, 0, 0, 0, 0); /* the pool's size and use from creation on */
    return 0;
}

void ifl_engine_free(struct ifl_executor *ex)
{
    struct engine *e = ex->eng;
    if (!e)
        return;
    for (struct xreq *q = e->waiting, *n; q; q = n) {
        n = q->next;
        ifl_xreq_free(q);
    }
    if (e->seqs) {
        for (int32_t i = 0; i < e->n_slots; i++) {
            struct eseq *s = &e->seqs[i];
            if (e->kvc && s->kv.blocks)
                ifl_kvc_seq_release(e->kvc, &s->kv);
            ifl_sampler_state_deinit(&s->st);
            ifl_stopstr_free(s->stop);
            free(s->tokens);
            free(s->logprobs);
            free(s->tops);
            free(s->text);
            free(s->glog);
            free(s->ghid);
            if (s->g_init)
                ifl_guide_state_deinit(&s->gst);
        }
        /* requests still holding slots (only after a failed start) */
        for (int32_t i = 0; i < e->n_slots; i++) {
            struct xreq *q = e->seqs[i].q;
            if (!q)
                continue;
            for (int32_t j = i; j < e->n_slots; j++)
                if (e->seqs[j].q == q)
                    e->seqs[j].q = NULL;
            req_free_outputs(q);
            ifl_xreq_free(q);
        }
    }
    free(e->seqs);
    ifl_fwd_free(e->fwd);
    ifl_kvc_free(e->kvc);
    ifl_kv_store_free(e->store);
    free(e->b_tok);
    free(e->b_pos);
    free(e->b_seq);
    free(e->b_want);
    free(e->row_slot);
    free(e->tables);
    free(e->n_blocks);
    free(e->logits);
    free(e->scratch);
    free(e->hidden);
    free(e->row_flag);
    free(e->row_pos);
    free(e->pick_rows);
    free(e->pick_tok);
    free(e->pick_lp);
    free(e->piece);
    free(e->stopbuf);
    free(e->eog_ids);
    ifl_xguide_engine_deinit(&e->ge);
    free(e);
    ex->eng = NULL;
}

/* ---- waiting queue ---- */

static int before(const struct xreq *a, const struct xreq *b)
{
    if (a->r.priority != b->r.priority)
        return a->r.priority > b->r.priority;
    return a->seq_no < b->seq_no;
}

static void waiting_insert(struct engine *e, struct xreq *q)
{
    struct xreq **pp = &e->waiting;
    while (*pp && before(*pp, q))
        pp = &(*pp)->next;
    q->next = *pp;
    *pp = q;
    e->n_waiting++;
}

/* ---- responses ---- */

static struct ifl_response *new_response(struct ifl_executor *ex, const struct xreq *q)
{
    struct ifl_response *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->request_id = q->id;
    r->client_id = q->r.client_id;
    r->n_vocab = ex->n_vocab;
    r->n_embd = ex->model->hp.n_embd;
    if (q->status) {
        r->status = q->status;
        r->error_msg = strdup(q->status == IFL_EINVAL
                                  ? "no token was left to pick: bad words, logit bias or "
                                    "min_tokens banned them all, or the logits were NaN"
                              : q->status == IFL_EFULL
                                  ? "the guide's grammar went past its limits (nesting "
                                    "depth or live parses)"
                                  : "out of memory for the outputs this request asks for");
    }
    if (q->r.output.return_perf_metrics)
        r->perf = q->perf;
    return r;
}

/* Moves the context logits (and hidden states) into r: the first response
 * that finds the whole prompt captured carries them. */
static void attach_context(struct xreq *q, struct ifl_response *r)
{
    if (q->ctx_sent || !q->ctx_logits || q->ctx_captured < q->r.n_input)
        return;
    r->context_logits = q->ctx_logits;
    r->context_hidden_states = q->ctx_hidden;
    q->ctx_logits = NULL;
    q->ctx_hidden = NULL;
    q->ctx_sent = 1;
}

/* Queues a response for sequence s: its tokens since the last response (or
 * all, as the request asks) and the text made since. */
static void emit(struct ifl_executor *ex, struct eseq *s, int is_final)
{
    struct xreq *q = s->q;
    struct ifl_response *r = new_response(ex, q);
    struct ifl_sequence_result *res = r ? calloc(1, sizeof(*res)) : NULL;
    if (!res) {
        free(r);
        return; /* out of memory: this update is lost; the final one retries */
    }
    r->is_final = is_final;
    r->sequence_index = s->index;
    r->is_sequence_final = s->finish != 0;
    r->n_results = 1;
    r->results = res;
    int all = !q->r.streaming || q->r.return_all_generated_tokens;
    int32_t from = all ? 0 : s->n_sent;
    int with_prompt = !q->r.streaming && !q->r.output.exclude_input_from_output;
    int32_t n_new = s->n_gen - from;
    int32_t n_out = n_new + (with_prompt ? s->n_prompt : 0);
    res->tokens = malloc(sizeof(int32_t) * (size_t)(n_out > 0 ? n_out : 1));
    if (res->tokens) {
        if (with_prompt)
            memcpy(res->tokens, s->tokens, sizeof(int32_t) * (size_t)s->n_prompt);
        memcpy(res->tokens + (with_prompt ? s->n_prompt : 0), s->tokens + s->n_prompt + from,
               sizeof(int32_t) * (size_t)n_new);
        res->n_tokens = n_out;
    }
    if (q->r.output.return_log_probs) {
        res->log_probs = ifl_exec_dup(s->logprobs + from, sizeof(float) * (size_t)n_new);
        int32_t k = q->r.output.top_log_probs;
        if (k > 0 && n_new > 0) {
            res->top_log_probs = malloc(sizeof(*res->top_log_probs) * (size_t)n_new * (size_t)k);
            if (res->top_log_probs) {
                res->n_top = k;
                for (int32_t i = 0; i < n_new; i++)
                    memcpy(res->top_log_probs + (size_t)i * k,
                           s->tops + (size_t)(from + i) * IFL_MAX_TOP, sizeof(*s->tops) * (size_t)k);
            }
        }
    }
    if (s->glog)
        res->generation_logits = ifl_exec_dup(s->glog + (size_t)from * (size_t)ex->n_vocab,
                                           sizeof(float) * (size_t)n_new * (size_t)ex->n_vocab);
    if (s->ghid)
        res->hidden_states = ifl_exec_dup(s->ghid + (size_t)from * (size_t)r->n_embd,
                                       sizeof(float) * (size_t)n_new * (size_t)r->n_embd);
    res->cum_log_prob = s->cum_logprob;
    res->score = s->cum_logprob;
    res->finish_reason = s->finish;
    res->text = malloc(s->n_text + 1);
    if (res->text) {
        memcpy(res->text, s->text, s->n_text);
        res->text[s->n_text] = 0;
        res->n_text = (int32_t)s->n_text;
        s->n_text = 0;
    }
    attach_context(q, r);
    s->n_sent = s->n_gen;
    ifl_exec_push_response(ex, r);
}

/* A final response for a request that never got to run (cancelled or timed
 * out while waiting), one per sequence (one for a beam search). */
static void emit_unstarted(struct ifl_executor *ex, struct xreq *q, int32_t reason)
{
    int32_t n = q->r.sampling.beam_width > 1 ? 1 : q->r.num_return_sequences;
    for (int32_t i = 0; i < n; i++) {
        struct ifl_response *r = new_response(ex, q);
        struct ifl_sequence_result *res = r ? calloc(1, sizeof(*res)) : NULL;
        if (!res) {
            free(r);
            continue;
        }
        r->is_final = i == n - 1;
        r->sequence_index = i;
        r->is_sequence_final = 1;
        r->n_results = 1;
        r->results = res;
        res->finish_reason = reason;
        res->text = calloc(1, 1);
        ifl_exec_push_response(ex, r);
    }
}

/* ---- beam search ---- */

static void beam_free(struct ebeam *eb)
{
    if (!eb)
        return;
    ifl_beam_deinit(&eb->b);
    free(eb->rows);
    free(eb->tlog);
    free(eb->thid);
    free(eb->tpar);
    free(eb->ttok);
    free(eb->tlive);
    free(eb);
}

/* Frees what the engine attached to q at admission. */
static void req_free_outputs(struct xreq *q)
{
    free(q->ctx_logits);
    free(q->ctx_hidden);
    q->ctx_logits = q->ctx_hidden = NULL;
    beam_free(q->beam);
    q->beam = NULL;
}

static int beam_create(struct ifl_executor *ex, struct xreq *q, struct ebeam **out)
{
    struct ebeam *eb = calloc(1, sizeof(*eb));
    *out = eb;
    if (!eb)
        return IFL_ENOMEM;
    int32_t w = q->r.sampling.beam_width, nv = ex->n_vocab, ne = ex->model->hp.n_embd;
    eb->width = w;
    eb->n_ret = q->r.num_return_sequences > 1 ? q->r.num_return_sequences : w;
    eb->max_len = q->r.max_tokens > 0 ? q->r.max_tokens : 1;
    size_t steps = (size_t)eb->max_len * (size_t)w;
    if (ifl_beam_init(&eb->b, w, eb->max_len) ||
        ifl_beam_reset(&eb->b, &q->r.sampling, eb->max_len))
        return IFL_ENOMEM;
    eb->rows = malloc(sizeof(float) * (size_t)w * (size_t)nv);
    if (!eb->rows)
        return IFL_ENOMEM;
    int glog = q->r.output.return_generation_logits, ghid = q->r.output.return_hidden_states;
    if (glog || ghid) {
        eb->tpar = malloc(sizeof(int32_t) * steps);
        eb->ttok = malloc(sizeof(int32_t) * steps);
        eb->tlive = calloc((size_t)eb->max_len + 1, sizeof(int32_t));
        if (!eb->tpar || !eb->ttok || !eb->tlive)
            return IFL_ENOMEM;
    }
    if (glog && !(eb->tlog = calloc(steps * (size_t)nv, sizeof(float))))
        return IFL_ENOMEM;
    if (ghid && !(eb->thid = calloc(steps * (size_t)ne, sizeof(float))))
        return IFL_ENOMEM;
    return 0;
}

/* The live beam of step t (history of t tokens) whose history is h[0..t),
 * found through the trace; -1 if none (cannot happen: histories of live
 * beams are distinct, and every hypothesis extends one). */
static int32_t beam_find(const struct ebeam *eb, int32_t t, const int32_t *h)
{
    int32_t w = eb->width;
    for (int32_t j = 0; j < eb->tlive[t]; j++) {
        int32_t cur = j, k = t - 1;
        for (; k >= 0 && eb->ttok[(size_t)k * w + cur] == h[k]; k--)
            cur = eb->tpar[(size_t)k * w + cur];
        if (k < 0)
            return j;
    }
    return -1;
}

/* Copies, for each token of hypothesis h, the trace row it was chosen
 * from: the last token from its parent's row at step n - 1, the others
 * walking the parents back. dst is [n][dim] (zeros where not found). */
static void beam_trace_rows(const struct ebeam *eb, const struct ifl_beam_hyp *h,
                            const float *trace, int32_t dim, float *dst)
{
    int32_t n = h->n_tokens, w = eb->width;
    if (n < 1)
        return;
    int32_t j = beam_find(eb, n - 1, h->tokens);
    if (j < 0)
        return;
    size_t d = (size_t)dim;
    memcpy(dst + (size_t)(n - 1) * d, trace + ((size_t)(n - 1) * w + j) * d, sizeof(float) * d);
    for (int32_t k = n - 2; k >= 0; k--) {
        j = eb->tpar[(size_t)k * w + j];
        memcpy(dst + (size_t)k * d, trace + ((size_t)k * w + j) * d, sizeof(float) * d);
    }
}

/* Queues the one (final) response of a beam search: its best n_ret
 * hypotheses, each with its tokens (the end token that finished it
 * included), log-probs, scores, text and traced rows. */
static void emit_beams(struct ifl_executor *ex, struct xreq *q)
{
    struct engine *e = ex->eng;
    struct ebeam *eb = q->beam;
    struct ifl_response *r = new_response(ex, q);
    if (!r)
        return;
    r->is_final = 1;
    r->is_sequence_final = 1;
    struct ifl_beam_hyp h[IFL_BEAM_MAX_WIDTH];
    int32_t n = eb ? ifl_beam_results(&eb->b, h, eb->n_ret) : 0;
    r->results = calloc((size_t)(n > 0 ? n : 1), sizeof(*r->results));
    if (!r->results) {
        free(r->error_msg);
        free(r);
        return;
    }
    r->n_results = n > 0 ? n : 1;
    if (n == 0) /* failed before the search began */
        r->results[0].finish_reason = IFL_FINISH_CANCELLED;
    int with_prompt = !q->r.output.exclude_input_from_output;
    int32_t n_in = with_prompt ? q->r.n_input : 0, nv = ex->n_vocab, ne = r->n_embd;
    for (int32_t i = 0; i < n; i++) {
        struct ifl_sequence_result *res = &r->results[i];
        int32_t nt = h[i].n_tokens;
        res->tokens = malloc(sizeof(int32_t) * (size_t)(n_in + nt > 0 ? n_in + nt : 1));
        if (res->tokens) {
            memcpy(res->tokens, q->input, sizeof(int32_t) * (size_t)n_in);
            memcpy(res->tokens + n_in, h[i].tokens, sizeof(int32_t) * (size_t)nt);
            res->n_tokens = n_in + nt;
        }
        if (q->r.output.return_log_probs)
            res->log_probs = ifl_exec_dup(h[i].logprobs, sizeof(float) * (size_t)nt);
        res->cum_log_prob = h[i].cum_log_prob;
        res->score = h[i].score;
        res->finish_reason = h[i].finish_reason;
        if (eb->tlog && nt > 0 && (res->generation_logits =
                                       calloc((size_t)nt * (size_t)nv, sizeof(float))))
            beam_trace_rows(eb, &h[i], eb->tlog, nv, res->generation_logits);
        if (eb->thid && nt > 0 &&
            (res->hidden_states = calloc((size_t)nt * (size_t)ne, sizeof(float))))
            beam_trace_rows(eb, &h[i], eb->thid, ne, res->hidden_states);
        /* text: the hypothesis detokenized afresh */
        struct ifl_detok dt;
        ifl_detok_init(&dt, ex->vocab, 0);
        size_t len = 0, cap = 64;
        char *text = malloc(cap);
        for (int32_t k = 0; k <= nt && text; k++) {
            size_t m = k < nt ? ifl_detok_push(&dt, h[i].tokens[k], e->piece)
                              : ifl_detok_flush(&dt, e->piece);
            if (len + m + 1 > cap) {
                char *t = realloc(text, (len + m + 1) * 2);
                if (!t) {
                    free(text);
                    text = NULL;
                    break;
                }
                text = t;
                cap = (len + m + 1) * 2;
            }
            memcpy(text + len, e->piece, m);
            len += m;
        }
        if (text) {
            text[len] = 0;
            res->text = text;
            res->n_text = (int32_t)len;
        }
    }
    attach_context(q, r);
    ifl_exec_push_response(ex, r);
}

/* ---- sequences ---- */

static void append_text(struct eseq *s, const char *p, size_t n);

/* Passes n bytes of e->piece through the stop-string matcher into the
 * sequence's pending text; `last` flushes what the matcher holds. Returns 1
 * when a stop string matched. */
static int push_text(struct engine *e, struct eseq *s, size_t n, int last)
{
    if (!s->stop) {
        append_text(s, e->piece, n);
        return 0;
    }
    size_t k = 0;
    int hit = ifl_stopstr_feed(s->stop, e->piece, n, e->stopbuf, &k);
    append_text(s, e->stopbuf, k);
    if (last && !hit)
        append_text(s, e->stopbuf, ifl_stopstr_flush(s->stop, e->stopbuf));
    return hit;
}

static void append_text(struct eseq *s, const char *p, size_t n)
{
    if (s->n_text + n > s->cap_text) {
        size_t cap = (s->n_text + n) * 2;
        char *t = realloc(s->text, cap);
        if (!t)
            return; /* keep what fits: text is best effort under memory pressure */
        s->text = t;
        s->cap_text = cap;
    }
    memcpy(s->text + s->n_text, p, n);
    s->n_text += n;
}

/* Binds slot s to sample `index` of q. Its tokens must be set by the
 * caller before sampling; the sampler is reset on the prompt here. Returns
 * nonzero when the stop-string matcher cannot be made (out of memory). */
static int start_seq(struct ifl_executor *ex, struct eseq *s, struct xreq *q, int32_t index)
{
    s->q = q;
    s->index = index;
    s->started = 1;
    s->n_gen = 0;
    s->n_sent = 0;
    s->finish = 0;
    s->paused = 0;
    s->cum_logprob = 0;
    s->n_text = 0;
    s->scfg = q->r.sampling;
    s->scfg.seed = q->r.sampling.seed + (uint64_t)index;
    ifl_sampler_reset(&s->st, &s->scfg, q->input, q->r.n_input);
    ifl_detok_init(&s->dt, ex->vocab, 0);
    ifl_stopstr_free(s->stop);
    s->stop = NULL;
    if (q->r.n_stop_strings &&
        ifl_stopstr_create(&s->stop, q->r.stop_strings, q->r.n_stop_strings, NULL))
        return IFL_ENOMEM;
    if (q->xg) {
        /* the grammar's start; samples and beams then copy their parent's */
        if (ifl_xguide_engine_ready(&ex->eng->ge))
            return IFL_ENOMEM;
        if (s->g_init && s->gst.g == q->xg->g)
            return ifl_guide_state_reset(&s->gst);
        if (s->g_init)
            ifl_guide_state_deinit(&s->gst);
        s->g_init = 1;
        return ifl_guide_state_init(&s->gst, q->xg->g);
    }
    return 0;
}

static int release_request_if_done(struct ifl_executor *ex, struct xreq *q)
{
    struct engine *e = ex->eng;
    if (q->n_seqs_live > 0)
        return 0;
    e->reserved -= q->kv_reserved;
    q->kv_reserved = 0;
    e->n_active_req--;
    e->completed++;
    req_free_outputs(q);
    ifl_xreq_free(q);
    return 1;
}

/* Ends sequence s with a reason; queues its final response. */
static void finish_seq(struct ifl_executor *ex, struct eseq *s, int32_t reason)
{
    struct engine *e = ex->eng;
    struct xreq *q = s->q;
    s->finish = reason;
    if (s->started)
        push_text(e, s, ifl_detok_flush(&s->dt, e->piece), 1);
    q->n_seqs_live--;
    emit(ex, s, q->n_seqs_live == 0);
    ifl_kvc_seq_reset(e->kvc, &s->kv);
    s->q = NULL;
    s->started = 0;
    free(s->glog);
    free(s->ghid);
    s->glog = s->ghid = NULL;
    q->n_slots_held--;
    release_request_if_done(ex, q);
}

/* Ends a beam search (done, or cut short with reason): one final response
 * with its hypotheses, then every slot it holds is let go. */
static void finish_beams(struct ifl_executor *ex, struct xreq *q, int32_t reason)
{
    struct engine *e = ex->eng;
    if (q->beam)
        ifl_beam_finalize(&q->beam->b, reason); /* nothing if already done */
    emit_beams(ex, q);
    for (int32_t i = 0; i < e->n_slots; i++) {
        struct eseq *s = &e->seqs[i];
        if (s->q != q)
            continue;
        ifl_kvc_seq_reset(e->kvc, &s->kv);
        s->q = NULL;
        s->started = 0;
        s->finish = reason;
    }
    q->n_slots_held = 0;
    q->n_seqs_live = 0;
    release_request_if_done(ex, q);
}

/* Ends every sequence of request q (cancel, timeout). */
static void finish_request(struct ifl_executor *ex, struct xreq *q, int32_t reason)
{
    struct engine *e = ex->eng;
    if (q->r.sampling.beam_width > 1) {
        finish_beams(ex, q, reason);
        return;
    }
    /* unstarted samples first, so the final response comes from the last one */
    for (int pass = 0; pass < 2; pass++)
        for (int32_t i = 0; i < e->n_slots; i++) {
            struct eseq *s = &e->seqs[i];
            if (s->q == q && s->started == (pass == 1))
                finish_seq(ex, s, reason);
        }
}

/* ---- KV reservation ---- */

/* Reserves KV so s can hold n_pos_total positions, keeping the
 * guaranteed_no_evict books. */
static int reserve(struct engine *e, struct eseq *s, int32_t n_pos_total)
{
    int32_t before_avail = ifl_kvc_available(e->kvc);
    int rc = ifl_kvc_reserve(e->kvc, &s->kv, n_pos_total);
    int32_t taken = before_avail - ifl_kvc_available(e->kvc);
    if (taken > 0 && s->q->kv_reserved > 0) {
        int64_t t = taken < s->q->kv_reserved ? taken : s->q->kv_reserved;
        s->q->kv_reserved -= t;
        e->reserved -= t;
    }
    return rc;
}

/* Drops the KV of every sequence of q; they are recomputed later. */
static void preempt(struct ifl_executor *ex, struct xreq *q)
{
    struct engine *e = ex->eng;
    for (int32_t i = 0; i < e->n_slots; i++) {
        struct eseq *s = &e->seqs[i];
        if (s->q == q && s->started && !s->finish) {
            ifl_kvc_seq_reset(e->kvc, &s->kv);
            s->paused = 1;
        }
    }
    q->perf.preemptions++;
}

/* The running request to preempt for `for_q`: lowest priority, latest
 * arrival, holding KV; NULL if none ranks below for_q. */
static struct xreq *pick_victim(struct engine *e, const struct xreq *for_q)
{
    struct xreq *v = NULL;
    for (int32_t i = 0; i < e->n_slots; i++) {
        struct eseq *s = &e->seqs[i];
        if (!s->q || !s->started || s->finish || s->kv.n_blocks == 0 || s->q == for_q)
            continue;
        if (!before(s->q, for_q) && (!v || before(v, s->q)))
            v = s->q;
    }
    return v;
}

/* ---- one step ---- */

/* Allocates the outputs q asks for (context logits, and per sequence
 * generation logits and hidden states, or the beam search state) when it
 * is admitted: nothing is allocated per step. slots: the n slots it holds,
 * the first being its primary. */
static int alloc_outputs(struct ifl_executor *ex, struct xreq *q, const int32_t *slots, int32_t n)
{
    struct engine *e = ex->eng;
    const struct ifl_output_config *o = &q->r.output;
    size_t nv = (size_t)ex->n_vocab, ne = (size_t)e->n_embd, n_in = (size_t)q->r.n_input;
    if (o->return_context_logits) {
        q->ctx_logits = malloc(sizeof(float) * n_in * nv);
        if (!q->ctx_logits)
            return IFL_ENOMEM;
        if (o->return_hidden_states && !(q->ctx_hidden = malloc(sizeof(float) * n_in * ne)))
            return IFL_ENOMEM;
    }
    if (q->r.sampling.beam_width > 1) {
        int rc = beam_create(ex, q, &q->beam);
        if (rc)
            return rc;
        for (int32_t k = 0; k < n; k++)
            q->beam->all[k] = slots[k];
        q->beam->slot[0] = slots[0];
        e->seqs[slots[0]].beam_j = 0;
        return 0;
    }
    size_t len = (size_t)(q->r.max_tokens > 0 ? q->r.max_tokens : 1);
    for (int32_t k = 0; k < n; k++) {
        struct eseq *s = &e->seqs[slots[k]];
        if (o->return_generation_logits && !(s->glog = malloc(sizeof(float) * len * nv)))
            return IFL_ENOMEM;
        if (o->return_hidden_states && !(s->ghid = malloc(sizeof(float) * len * ne)))
            return IFL_ENOMEM;
    }
    return 0;
}

static void admit(struct ifl_executor *ex)
{
    struct engine *e = ex->eng;
    int32_t admitted = 0;
    while (e->waiting) {
        struct xreq *q = e->waiting;
        int beams = q->r.sampling.beam_width > 1;
        /* beams hold a slot per beam, like samples */
        int32_t n = beams ? q->r.sampling.beam_width : q->r.num_return_sequences;
        int32_t free_slots = 0;
        for (int32_t i = 0; i < e->n_slots; i++)
            free_slots += e->seqs[i].q == NULL;
        if (free_slots < n)
            break;
        struct eseq *prim = NULL;
        for (int32_t i = 0; i < e->n_slots && !prim; i++)
            if (!e->seqs[i].q)
                prim = &e->seqs[i];
        int32_t before_avail = ifl_kvc_available(e->kvc);
        struct ifl_kvc_stats k0;
        ifl_kvc_get_stats(e->kvc, &k0);
        /* context logits need every prompt row computed: no prefix reuse */
        int32_t reused = q->r.output.return_context_logits
                             ? 0
                             : ifl_kvc_match_prefix(e->kvc, &prim->kv, q->input, q->r.n_input - 1);
        int32_t taken = before_avail - ifl_kvc_available(e->kvc);
        int64_t need;
        if (ex->cfg.sched_policy == IFL_SCHED_GUARANTEED_NO_EVICT) {
            /* blocks the prefix match already holds count as taken; a beam
             * search gives back to this reservation what its dropped beams free */
            need = ifl_exec_blocks_to_reserve(ifl_kvc_block_size(e->kvc),
                                              (int64_t)q->r.n_input + q->r.max_tokens, n) -
                   prim->kv.n_blocks;
            if (ifl_kvc_available(e->kvc) - e->reserved < need) {
                ifl_kvc_seq_reset(e->kvc, &prim->kv);
                break;
            }
        } else {
            need = 0;
            if (ifl_kvc_available(e->kvc) < blocks_for(e, q->r.n_input) - prim->kv.n_blocks) {
                ifl_kvc_seq_reset(e->kvc, &prim->kv);
                break;
            }
        }
        (void)taken;
        struct ifl_kvc_stats k1;
        ifl_kvc_get_stats(e->kvc, &k1);
        q->perf.kv_blocks_reused = (int32_t)(k1.reused - k0.reused);
        q->perf.kv_blocks_missed = (int32_t)(k1.missed - k0.missed);
        e->waiting = q->next;
        e->n_waiting--;
        q->next = NULL;
        q->kv_reserved = need;
        e->reserved += need;
        memcpy(prim->tokens, q->input, sizeof(int32_t) * (size_t)q->r.n_input);
        prim->n_tokens = prim->n_prompt = q->r.n_input;
        int start_rc = start_seq(ex, prim, q, 0);
        (void)reused;
        int32_t held[1024]; /* n <= max_batch_size <= 1024 */
        held[0] = (int32_t)(prim - e->seqs);
        for (int32_t k = 1; k < n; k++)
            for (int32_t i = 0; i < e->n_slots; i++)
                if (!e->seqs[i].q) {
                    struct eseq *c = &e->seqs[i];
                    c->q = q;
                    c->index = beams ? -1 : k;
                    c->started = 0;
                    c->finish = 0;
                    c->n_gen = c->n_sent = c->n_tokens = c->n_prompt = 0;
                    c->n_text = 0;
                    c->cum_logprob = 0;
                    held[k] = i;
                    break;
                }
        int out_rc = alloc_outputs(ex, q, held, n);
        /* a beam search is one sequence to its client, with n slots */
        q->n_seqs_live = beams ? 1 : n;
        q->n_seqs_total = beams ? 1 : n;
        q->n_slots_held = n;
        q->stage = IFL_STAGE_CONTEXT_IN_PROGRESS;
        q->perf.first_scheduled_us = ifl_now_us();
        e->n_active_req++;
        admitted++;
        if (start_rc || out_rc) {
            q->status = IFL_ENOMEM;
            finish_request(ex, q, IFL_FINISH_CANCELLED);
        }
    }
    if (admitted) {
        pthread_mutex_lock(&ex->in_mu);
        ex->n_queued -= admitted;
        pthread_mutex_unlock(&ex->in_mu);
    }
}

/* Whether a sequence of q has rows among the first `rows` of the batch. */
static int in_batch(const struct engine *e, const struct xreq *q, int32_t rows)
{
    for (int32_t r = 0; r < rows; r++)
        if (e->seqs[e->b_seq[r]].q == q)
            return 1;
    return 0;
}

static int cmp_slot_order(const struct engine *e, int32_t a, int32_t b)
{
    const struct eseq *x = &e->seqs[a], *y = &e->seqs[b];
    if (x->q != y->q)
        return before(x->q, y->q) ? -1 : 1;
    return x->index - y->index;
}

/* Fills the batch; returns its rows. Sets *n_logit rows and row_slot. */
static int32_t build_batch(struct ifl_executor *ex, int32_t *n_logit, int32_t *ctx_rows,
                           int32_t *ctx_reqs, int32_t *gen_rows)
{
    struct engine *e = ex->eng;
    int32_t order[1024];
    int32_t n_order = 0;
    for (int32_t i = 0; i < e->n_slots && n_order < 1024; i++)
        if (e->seqs[i].q && e->seqs[i].started && !e->seqs[i].finish)
            order[n_order++] = i;
    /* insertion sort by request priority and arrival: n is small */
    for (int32_t i = 1; i < n_order; i++) {
        int32_t v = order[i], j = i;
        while (j > 0 && cmp_slot_order(e, order[j - 1], v) > 0) {
            order[j] = order[j - 1];
            j--;
        }
        order[j] = v;
    }
    int32_t rows = 0, nlog = 0;
    *ctx_rows = *ctx_reqs = *gen_rows = 0;
    e->want_hidden = 0;
    for (int pass = 0; pass < 2; pass++) {
        for (int32_t oi = 0; oi < n_order; oi++) {
            struct eseq *s = &e->seqs[order[oi]];
            if (!s->q || s->finish)
                continue;
            int32_t pending = s->n_tokens - s->kv.n_pos;
            if ((pass == 0) != (pending == 1) || pending < 1)
                continue;
            int32_t chunk = pending < e->max_rows - rows ? pending : e->max_rows - rows;
            if (chunk <= 0)
                break;
            /* context logits: every prompt row not captured yet needs a
             * logits row, so the chunk stops where the free ones run out */
            int32_t ctx_from = s->kv.n_pos > s->q->ctx_captured ? s->kv.n_pos : s->q->ctx_captured;
            int32_t n_ctx_rows = 0;
            if (s->q->ctx_logits && ctx_from < s->q->r.n_input) {
                int32_t lim = ctx_from - s->kv.n_pos + (e->logit_cap - nlog);
                if (chunk > lim)
                    chunk = lim;
                if (chunk <= 0)
                    continue;
                int32_t end = s->kv.n_pos + chunk < s->q->r.n_input ? s->kv.n_pos + chunk
                                                                     : s->q->r.n_input;
                n_ctx_rows = end > ctx_from ? end - ctx_from : 0;
            }
            /* (with context rows, the last prompt row is one of them) */
            if (chunk == pending && n_ctx_rows == 0 && nlog >= e->logit_cap)
                continue;
            int rc;
            while ((rc = reserve(e, s, s->kv.n_pos + chunk)) == IFL_EFULL) {
                struct xreq *v = pick_victim(e, s->q);
                /* a victim already in this batch keeps its rows: skip it */
                if (!v || in_batch(e, v, rows))
                    break;
                preempt(ex, v);
            }
            if (rc) {
                /* cannot run now: wait for blocks (drop what it holds if it
                 * blocks others, i.e. under max_utilization, unless another
                 * of its sequences, a sample or beam, already has rows here) */
                if (ex->cfg.sched_policy == IFL_SCHED_MAX_UTILIZATION && s->kv.n_pos > 0 &&
                    pass == 0 && !in_batch(e, s->q, rows))
                    preempt(ex, s->q);
                continue;
            }
            s->paused = 0;
            int32_t slot = (int32_t)(s - e->seqs);
            for (int32_t k = 0; k < chunk; k++) {
                int32_t p = s->kv.n_pos + k;
                uint8_t flag = (uint8_t)((n_ctx_rows && p >= ctx_from && p < s->q->r.n_input
                                              ? ROW_CTX
                                              : 0) |
                                         (k == chunk - 1 && chunk == pending ? ROW_SAMPLE : 0));
                e->b_tok[rows] = s->tokens[p];
                e->b_pos[rows] = p;
                e->b_seq[rows] = slot;
                e->b_want[rows] = flag != 0;
                if (flag) {
                    e->row_slot[nlog] = slot;
                    e->row_flag[nlog] = flag;
                    e->row_pos[nlog] = p;
                    nlog++;
                }
                rows++;
            }
            if (s->q->r.output.return_hidden_states)
                e->want_hidden = 1;
            if (s->n_gen == 0 && s->n_tokens == s->n_prompt) {
                *ctx_rows += chunk;
                (*ctx_reqs)++;
            } else {
                *gen_rows += chunk;
            }
        }
    }
    for (int32_t i = 0; i < e->n_slots; i++)
        e->n_blocks[i] = e->seqs[i].kv.n_blocks;
    *n_logit = nlog;
    return rows;
}

static int is_end_token(const struct ifl_executor *ex, const struct xreq *q, int32_t t)
{
    if (q->r.end_id >= 0)
        return t == q->r.end_id;
    return ifl_vocab_is_eog(ex->vocab, t);
}

/* Whether the generated tokens now end with one of the stop words. */
static int hits_stop_word(const struct eseq *s)
{
    const struct xreq *q = s->q;
    int64_t off = 0;
    for (int32_t i = 0; i < q->r.n_stop_words; i++) {
        int32_t len = q->stop_len[i];
        if (len <= s->n_gen &&
            !memcmp(s->tokens + s->n_tokens - len, q->stop_tok + off, sizeof(int32_t) * (size_t)len))
            return 1;
        off += len;
    }
    return 0;
}

/* Samples the next token of s from row (processed in place), then applies it. */
static struct ifl_sampler_extras extras_of(const struct engine *e, const struct xreq *q)
{
    return (struct ifl_sampler_extras){.end_ids = q->r.end_id >= 0 ? &q->r.end_id : e->eog_ids,
                                       .n_end_ids = q->r.end_id >= 0 ? 1 : e->n_eog,
                                       .bias_ids = q->bias_ids,
                                       .bias_values = q->bias_vals,
                                       .n_bias = q->r.n_logit_bias,
                                       .bad_tokens = q->bad_tok,
                                       .bad_lens = q->bad_len,
                                       .n_bad = q->r.n_bad_words};
}

/* The sampler's processing of s's row (bias, bans, penalties). Like
 * pick_row it touches only s's own state and reads the engine's end ids,
 * so rows of different sequences may go on different threads (pick_rows). */
static void process_row(struct ifl_executor *ex, struct eseq *s, float *row,
                        struct ifl_sampler_extras *x)
{
    *x = extras_of(ex->eng, s->q);
    ifl_sampler_process(&s->scfg, &s->st, row, ex->n_vocab, s->tokens, s->n_prompt,
                        s->tokens + s->n_prompt, s->n_gen, x);
}

static int32_t pick_row(struct eseq *s, const float *row, float *lp)
{
    int32_t n_top = s->q->r.output.top_log_probs;
    int32_t tok = ifl_sampler_pick(&s->scfg, &s->st, row, lp,
                                   n_top ? s->tops + (size_t)s->n_gen * IFL_MAX_TOP : NULL, n_top);
    /* the sampler falls back to token 0 when no logit is left above -inf
     * (all banned by bias, bad words or min_tokens, or NaN): -1, not a
     * banned token */
    return row[tok] > -INFINITY ? tok : -1;
}

/* A sequence with nothing left to pick ends, its request failed. */
static void end_unpickable(struct ifl_executor *ex, struct eseq *s)
{
    s->q->status = IFL_EINVAL;
    finish_seq(ex, s, IFL_FINISH_CANCELLED);
}

static void apply_token(struct ifl_executor *ex, struct eseq *s, int32_t tok, float lp);

static void sample_and_apply(struct ifl_executor *ex, struct eseq *s, float *row)
{
    struct engine *e = ex->eng;
    struct xreq *q = s->q;
    struct ifl_sampler_extras x;
    process_row(ex, s, row, &x);
    if (q->xg && ifl_xguide_mask_row(&e->ge, &s->gst, row, x.end_ids, x.n_end_ids) < 0) {
        q->status = IFL_ENOMEM;
        finish_seq(ex, s, IFL_FINISH_CANCELLED);
        return;
    }
    float lp = 0;
    int32_t tok = pick_row(s, row, &lp);
    if (tok < 0 && !q->xg) {
        end_unpickable(ex, s);
        return;
    }
    if (q->xg && (tok < 0 || !ifl_xguide_allowed(&e->ge, tok))) {
        /* every token the grammar allows was banned (bad words, bias,
         * min_tokens on a complete grammar): end here rather than break it */
        if (!ifl_guide_is_accepting(&s->gst))
            q->status = IFL_EINVAL;
        finish_seq(ex, s, ifl_guide_is_accepting(&s->gst) ? IFL_FINISH_END_ID
                                                          : IFL_FINISH_CANCELLED);
        return;
    }
    apply_token(ex, s, tok, lp);
}

/* Takes the token s picked: the sampler's counts, the end and stop
 * checks, the text, the response. Engine state: the engine thread only. */
static void apply_token(struct ifl_executor *ex, struct eseq *s, int32_t tok, float lp)
{
    struct engine *e = ex->eng;
    struct xreq *q = s->q;
    ifl_sampler_accept(&s->scfg, &s->st, tok);
    int64_t now = ifl_now_us();
    if (!q->perf.first_token_us)
        q->perf.first_token_us = now;
    q->perf.last_token_us = now;
    q->stage = IFL_STAGE_GENERATION_IN_PROGRESS;
    if (is_end_token(ex, q, tok) && !q->r.sampling.ignore_eos) {
        finish_seq(ex, s, IFL_FINISH_END_ID);
        return;
    }
    int done = 0; /* a guided sequence whose grammar is complete and cannot go on */
    if (q->xg) {
        int grc = ifl_guide_accept_token(&s->gst, e->ge.vi, tok);
        if (grc) {
            /* only IFL_ENOMEM or IFL_EFULL can get here: the mask allowed it */
            q->status = grc;
            finish_seq(ex, s, IFL_FINISH_CANCELLED);
            return;
        }
        done = !ifl_guide_can_continue(&s->gst);
    }
    s->tokens[s->n_tokens++] = tok;
    s->logprobs[s->n_gen] = lp;
    s->n_gen++;
    s->cum_logprob += lp;
    int32_t reason = 0;
    if (push_text(e, s, ifl_detok_push(&s->dt, tok, e->piece), 0))
        reason = IFL_FINISH_STOP_WORDS;
    else if (q->r.n_stop_words && hits_stop_word(s))
        reason = IFL_FINISH_STOP_WORDS;
    else if (done)
        reason = IFL_FINISH_END_ID; /* min_tokens never forces text past the grammar */
    else if (s->n_gen >= q->r.max_tokens || s->n_tokens >= ex->n_ctx)
        reason = IFL_FINISH_LENGTH;
    if (reason)
        finish_seq(ex, s, reason);
    else if (q->r.streaming)
        emit(ex, s, 0);
}

/* Whether s, the primary of a request of several samples, has just
 * finished its prompt: its row is the one the other samples fork from. */
static int forks_now(const struct eseq *s)
{
    return s->n_gen == 0 && s->index == 0 && s->q->n_seqs_total > 1 && s->n_tokens == s->n_prompt;
}

/* Whether logits row r is sampled the plain way, its choice depending on
 * nothing but its own sequence: not a beam, not guided (the grammar's
 * caches are shared), not the row the other samples fork from. */
static int plain_pick(const struct engine *e, int32_t r)
{
    const struct eseq *s = &e->seqs[e->row_slot[r]];
    return (e->row_flag[r] & ROW_SAMPLE) && s->q && !s->finish && !s->q->beam && !s->q->xg &&
           !forks_now(s);
}

/* A pool job (ifl_fwd_parallel): each thread processes and picks its
 * share of e->pick_rows. The results are what sample_and_apply would have
 * picked row by row, since each row reads and writes only its sequence. */
static void pick_rows(void *arg, int ith, int nth)
{
    struct ifl_executor *ex = arg;
    struct engine *e = ex->eng;
    long lo, hi;
    ifl_pool_split(e->n_pick, ith, nth, &lo, &hi);
    for (long i = lo; i < hi; i++) {
        int32_t r = e->pick_rows[i];
        struct eseq *s = &e->seqs[e->row_slot[r]];
        float *row = e->logits + (size_t)r * ex->n_vocab;
        struct ifl_sampler_extras x;
        process_row(ex, s, row, &x);
        e->pick_lp[r] = 0;
        e->pick_tok[r] = pick_row(s, row, &e->pick_lp[r]);
    }
}

/* Forks the unstarted samples of q from its primary s (which just finished
 * its prompt) and samples each from the same logits. */
static void fork_samples(struct ifl_executor *ex, struct eseq *prim, const float *row,
                         float *scratch)
{
    struct engine *e = ex->eng;
    for (int32_t i = 0; i < e->n_slots; i++) {
        struct eseq *c = &e->seqs[i];
        if (c->q != prim->q || c->started)
            continue;
        if (start_seq(ex, c, prim->q, c->index) || ifl_kvc_fork(e->kvc, &prim->kv, &c->kv)) {
            finish_seq(ex, c, IFL_FINISH_CANCELLED);
            continue;
        }
        if (c->q->xg && ifl_guide_state_copy(&c->gst, &prim->gst)) {
            finish_seq(ex, c, IFL_FINISH_CANCELLED);
            continue;
        }
        memcpy(c->tokens, prim->tokens, sizeof(int32_t) * (size_t)prim->n_tokens);
        c->n_tokens = prim->n_tokens;
        c->n_prompt = prim->n_prompt;
        /* the raw row and hidden state of the first token are the primary's */
        if (c->glog && prim->glog)
            memcpy(c->glog, prim->glog, sizeof(float) * (size_t)ex->n_vocab);
        if (c->ghid && prim->ghid)
            memcpy(c->ghid, prim->ghid, sizeof(float) * (size_t)e->n_embd);
        memcpy(scratch, row, sizeof(float) * (size_t)ex->n_vocab);
        sample_and_apply(ex, c, scratch);
    }
}

/* Takes live beam s's row of this step: processed (penalties and bans
 * see this beam's own tokens) into the request's row set. */
static void beam_take_row(struct ifl_executor *ex, struct eseq *s, const float *row)
{
    struct engine *e = ex->eng;
    struct xreq *q = s->q;
    struct ebeam *eb = q->beam;
    int32_t nv = ex->n_vocab;
    float *dst = eb->rows + (size_t)s->beam_j * (size_t)nv;
    memcpy(dst, row, sizeof(float) * (size_t)nv);
    struct ifl_sampler_extras x = extras_of(e, q);
    ifl_sampler_recount(&s->st, s->tokens + s->n_prompt, s->n_gen);
    ifl_sampler_process(&s->scfg, &s->st, dst, nv, s->tokens, s->n_prompt,
                        s->tokens + s->n_prompt, s->n_gen, &x);
    /* each beam is masked by its own grammar state (a failed mask leaves
     * nothing allowed, so the beam drops out) */
    if (q->xg && ifl_xguide_mask_row(&e->ge, &s->gst, dst, x.end_ids, x.n_end_ids) < 0)
        for (int32_t t = 0; t < nv; t++)
            dst[t] = -INFINITY;
    eb->ready[s->beam_j] = 1;
}

/* Once every live beam of q has its row: one step of the search, then the
 * beams are re-formed. New beam i continues parent p with token t: the
 * first child of p keeps p's slot (its KV and tokens, plus t); another
 * child gets a free slot of q, forked from p's KV (copy-on-write) with p's
 * tokens plus t. Parents without children are dropped first (nobody forks
 * from them), so their slots can take the extra children. */
static void beam_advance(struct ifl_executor *ex, struct xreq *q)
{
    struct engine *e = ex->eng;
    struct ebeam *eb = q->beam;
    struct ifl_beam *b = &eb->b;
    int32_t nl = ifl_beam_n_live(b), w = eb->width;
    for (int32_t j = 0; j < nl; j++)
        if (!eb->ready[j])
            return;
    int32_t t = ifl_beam_len(b);
    const int32_t *ends = NULL;
    int32_t n_end = 0;
    if (!q->r.sampling.ignore_eos) {
        ends = q->r.end_id >= 0 ? &q->r.end_id : e->eog_ids;
        n_end = q->r.end_id >= 0 ? 1 : e->n_eog;
    }
    if (eb->tlive)
        eb->tlive[t] = nl;
    struct ifl_beam_choice ch[IFL_BEAM_MAX_WIDTH];
    int32_t nc = 0;
    int done = ifl_beam_step(b, eb->rows, ex->n_vocab, ends, n_end, ch, &nc);
    memset(eb->ready, 0, sizeof eb->ready);
    int64_t now = ifl_now_us();
    if (!q->perf.first_token_us)
        q->perf.first_token_us = now;
    q->perf.last_token_us = now;
    q->stage = IFL_STAGE_GENERATION_IN_PROGRESS;
    if (done) {
        if (b->n_fin == 0) /* no beam had a token left to take: all banned, or NaN */
            q->status = IFL_EINVAL;
        finish_beams(ex, q, IFL_FINISH_LENGTH);
        return;
    }
    if (eb->tpar)
        for (int32_t i = 0; i < nc; i++) {
            eb->tpar[(size_t)t * w + i] = ch[i].parent;
            eb->ttok[(size_t)t * w + i] = ch[i].token;
        }
    int32_t old[IFL_BEAM_MAX_WIDTH], first[IFL_BEAM_MAX_WIDTH], dst[IFL_BEAM_MAX_WIDTH];
    for (int32_t j = 0; j < nl; j++) {
        old[j] = eb->slot[j];
        first[j] = -1;
    }
    for (int32_t i = 0; i < nc; i++) {
        int32_t p = ch[i].parent;
        dst[i] = first[p] < 0 ? old[p] : -1;
        if (first[p] < 0)
            first[p] = i;
    }
    int32_t avail0 = ifl_kvc_available(e->kvc);
    for (int32_t j = 0; j < nl; j++)
        if (first[j] < 0) {
            struct eseq *s = &e->seqs[old[j]];
            ifl_kvc_seq_reset(e->kvc, &s->kv);
            s->started = 0;
            s->index = -1;
        }
    int32_t freed = ifl_kvc_available(e->kvc) - avail0;
    if (freed > 0 && ex->cfg.sched_policy == IFL_SCHED_GUARANTEED_NO_EVICT) {
        q->kv_reserved += freed;
        e->reserved += freed;
    }
    for (int32_t i = 0; i < nc; i++) {
        if (dst[i] >= 0)
            continue;
        struct eseq *par = &e->seqs[old[ch[i].parent]], *c = NULL;
        for (int32_t k = 0; k < w && !c; k++) {
            struct eseq *f = &e->seqs[eb->all[k]];
            int taken = f->started;
            for (int32_t m = 0; m < i && !taken; m++)
                taken = dst[m] == eb->all[k];
            if (!taken)
                c = f;
        }
        IFL_ASSERT(c != NULL); /* w slots for at most w beams */
        if (start_seq(ex, c, q, i) || ifl_kvc_fork(e->kvc, &par->kv, &c->kv) ||
            (q->xg && ifl_guide_state_copy(&c->gst, &par->gst))) {
            finish_beams(ex, q, IFL_FINISH_CANCELLED);
            return;
        }
        memcpy(c->tokens, par->tokens, sizeof(int32_t) * (size_t)par->n_tokens);
        c->n_tokens = par->n_tokens;
        c->n_prompt = par->n_prompt;
        c->n_gen = par->n_gen;
        c->paused = par->paused;
        dst[i] = (int32_t)(c - e->seqs);
    }
    for (int32_t i = 0; i < nc; i++) {
        struct eseq *c = &e->seqs[dst[i]];
        /* the mask allowed the token, so only running out of memory or the
         * stack limits fail here: the search ends with what it has */
        if (q->xg && ifl_guide_accept_token(&c->gst, e->ge.vi, ch[i].token)) {
            finish_beams(ex, q, IFL_FINISH_CANCELLED);
            return;
        }
        c->tokens[c->n_tokens++] = ch[i].token;
        c->n_gen++;
        c->beam_j = i;
        c->index = i;
        eb->slot[i] = dst[i];
    }
}

/* Copies what the outputs need from this step's logits rows before
 * anything modifies them: context rows, and each sampling row's raw
 * logits and hidden state (per sequence, or into a beam search's trace). */
static void capture_rows(struct ifl_executor *ex, int32_t nlog)
{
    struct engine *e = ex->eng;
    size_t nv = (size_t)ex->n_vocab, ne = (size_t)e->n_embd;
    for (int32_t r = 0; r < nlog; r++) {
        struct eseq *s = &e->seqs[e->row_slot[r]];
        struct xreq *q = s->q;
        if (!q)
            continue;
        const float *lg = e->logits + (size_t)r * nv;
        const float *hd = e->want_hidden ? e->hidden + (size_t)r * ne : NULL;
        int32_t p = e->row_pos[r];
        if ((e->row_flag[r] & ROW_CTX) && q->ctx_logits && p < q->r.n_input) {
            memcpy(q->ctx_logits + (size_t)p * nv, lg, sizeof(float) * nv);
            if (q->ctx_hidden && hd)
                memcpy(q->ctx_hidden + (size_t)p * ne, hd, sizeof(float) * ne);
            q->ctx_captured = p + 1;
        }
        if (!(e->row_flag[r] & ROW_SAMPLE))
            continue;
        if (q->beam) {
            struct ebeam *eb = q->beam;
            size_t at = (size_t)ifl_beam_len(&eb->b) * (size_t)eb->width + (size_t)s->beam_j;
            if (eb->tlog)
                memcpy(eb->tlog + at * nv, lg, sizeof(float) * nv);
            if (eb->thid && hd)
                memcpy(eb->thid + at * ne, hd, sizeof(float) * ne);
        } else if (s->n_gen < (q->r.max_tokens > 0 ? q->r.max_tokens : 1)) {
            if (s->glog)
                memcpy(s->glog + (size_t)s->n_gen * nv, lg, sizeof(float) * nv);
            if (s->ghid && hd)
                memcpy(s->ghid + (size_t)s->n_gen * ne, hd, sizeof(float) * ne);
        }
    }
}

static void run_processors(struct ifl_executor *ex, int32_t nlog)
{
    struct engine *e = ex->eng;
    int32_t nv = ex->n_vocab;
    for (int32_t r = 0; r < nlog; r++) {
        struct eseq *s = &e->seqs[e->row_slot[r]];
        if (!(e->row_flag[r] & ROW_SAMPLE))
            continue; /* context rows are returned raw */
        int32_t pi = s->q->post_index;
        if (pi >= 0)
            ex->procs[pi].fn(ex->procs[pi].user, s->q->id, e->logits + (size_t)r * nv, nv,
                             s->tokens, s->n_tokens, s->q->r.client_id);
    }
    if (!ex->cfg.batched_logits_processor)
        return;
    /* the batched processor sees its rows in one call: gather them to the front */
    ifl_id ids[1024];
    const int32_t *toks[1024];
    int32_t ntok[1024];
    uint64_t cids[1024];
    int32_t idx[1024], n = 0;
    for (int32_t r = 0; r < nlog && n < 1024; r++) {
        struct eseq *s = &e->seqs[e->row_slot[r]];
        if (s->q->post_index != -2 || !(e->row_flag[r] & ROW_SAMPLE))
            continue;
        idx[n] = r;
        ids[n] = s->q->id;
        toks[n] = s->tokens;
        ntok[n] = s->n_tokens;
        cids[n] = s->q->r.client_id;
        n++;
    }
    if (!n)
        return;
    /* gather the batched rows to the front (swapping), so they are contiguous */
    for (int32_t k = 0; k < n; k++) {
        if (idx[k] == k)
            continue;
        for (int32_t i = 0; i < nv; i++) {
            float t = e->logits[(size_t)k * nv + i];
            e->logits[(size_t)k * nv + i] = e->logits[(size_t)idx[k] * nv + i];
            e->logits[(size_t)idx[k] * nv + i] = t;
        }
        int32_t ts = e->row_slot[k];
        e->row_slot[k] = e->row_slot[idx[k]];
        e->row_slot[idx[k]] = ts;
        uint8_t tf = e->row_flag[k];
        e->row_flag[k] = e->row_flag[idx[k]];
        e->row_flag[idx[k]] = tf;
        int32_t tp = e->row_pos[k];
        e->row_pos[k] = e->row_pos[idx[k]];
        e->row_pos[idx[k]] = tp;
        for (int32_t m = k + 1; m < n; m++)
            if (idx[m] == k)
                idx[m] = idx[k];
    }
    ex->cfg.batched_logits_processor(ex->cfg.batched_logits_user, n, ids, e->logits, nv, toks,
                                     ntok, cids);
}

static void publish_stats(struct ifl_executor *ex, double latency_ms, int32_t ctx_reqs,
                          int32_t ctx_rows, int32_t gen_reqs, int32_t gen_rows)
{
    struct engine *e = ex->eng;
    struct ifl_iteration_stats st = {0};
    struct ifl_kvc_stats k;
    ifl_kvc_get_stats(e->kvc, &k);
    st.iteration = e->iteration;
    st.latency_ms = latency_ms;
    st.timestamp_us = ifl_now_us();
    int32_t paused = 0;
    for (int32_t i = 0; i < e->n_slots; i++)
        paused += e->seqs[i].q && e->seqs[i].paused;
    st.active_requests = e->n_active_req;
    st.queued_requests = e->n_waiting;
    st.completed_requests = e->completed;
    st.paused_requests = paused;
    st.context_requests = ctx_reqs;
    st.context_tokens = ctx_rows;
    st.generation_requests = gen_reqs;
    st.generation_tokens = gen_rows;
    st.kv_blocks_max = k.n_blocks;
    st.kv_blocks_free = k.n_free + k.n_cached;
    st.kv_blocks_used = k.n_used;
    st.kv_blocks_reused = k.reused;
    st.kv_blocks_missed = k.missed;
    st.kv_cache_hit_rate = k.reused + k.missed ? (double)k.reused / (double)(k.reused + k.missed) : 0;
    st.kv_bytes_reserved = (int64_t)e->store->bytes;
    st.kv_bytes_used = (int64_t)k.n_used * e->kv_block_bytes;
    st.kv_block_bytes = (int32_t)e->kv_block_bytes;
    st.kv_blocks_peak = k.peak_used;
    st.kv_blocks_cached = k.n_cached;
    st.kv_pool_bound = e->kv_bound;
    st.kv_bytes_bound = e->kv_bound_bytes;
    st.kv_blocks_released = k.released;
    pthread_mutex_lock(&ex->out_mu);
    ex->last_stats = st;
    ex->guide_stats = e->ge.stats;
    ex->stats_seq++;
    if (ex->n_idle_waiters && ex->n_unfinished == 0)
        pthread_cond_broadcast(&ex->idle_cv);
    pthread_mutex_unlock(&ex->out_mu);
    /* per-request stats */
    for (int32_t i = 0; i < e->n_slots; i++) {
        struct eseq *s = &e->seqs[i];
        if (!s->q || s->index != 0)
            continue;
        struct ifl_request_stats rs = {.request_id = s->q->id,
                                       .stage = s->q->stage,
                                       .context_prefill_position =
                                           s->kv.n_pos < s->n_prompt ? s->kv.n_pos : s->n_prompt,
                                       .n_generated = s->n_gen,
                                       .paused = s->paused};
        ifl_exec_update_stats(ex, s->q->id, &rs);
    }
}

static void apply_cancel(struct ifl_executor *ex, ifl_id id)
{
    struct engine *e = ex->eng;
    for (struct xreq **pp = &e->waiting; *pp; pp = &(*pp)->next)
        if ((*pp)->id == id) {
            struct xreq *q = *pp;
            *pp = q->next;
            e->n_waiting--;
            pthread_mutex_lock(&ex->in_mu);
            ex->n_queued--;
            pthread_mutex_unlock(&ex->in_mu);
            emit_unstarted(ex, q, IFL_FINISH_CANCELLED);
            e->completed++;
            ifl_xreq_free(q);
            return;
        }
    for (int32_t i = 0; i < e->n_slots; i++)
        if (e->seqs[i].q && e->seqs[i].q->id == id) {
            finish_request(ex, e->seqs[i].q, IFL_FINISH_CANCELLED);
            return;
        }
}

static void expire(struct ifl_executor *ex, int64_t now)
{
    struct engine *e = ex->eng;
    for (struct xreq **pp = &e->waiting; *pp;) {
        struct xreq *q = *pp;
        if (q->deadline_us && now >= q->deadline_us) {
            *pp = q->next;
            e->n_waiting--;
            pthread_mutex_lock(&ex->in_mu);
            ex->n_queued--;
            pthread_mutex_unlock(&ex->in_mu);
            emit_unstarted(ex, q, IFL_FINISH_TIMED_OUT);
            e->completed++;
            ifl_xreq_free(q);
        } else {
            pp = &q->next;
        }
    }
    for (int32_t i = 0; i < e->n_slots; i++) {
        struct xreq *q = e->seqs[i].q;
        if (q && q->deadline_us && now >= q->deadline_us)
            finish_request(ex, q, IFL_FINISH_TIMED_OUT);
    }
}

static void step(struct ifl_executor *ex)
{
    struct engine *e = ex->eng;
    double t0 = ifl_now_s();
    admit(ex);
    int32_t nlog, ctx_rows, ctx_reqs, gen_rows;
    int32_t rows = build_batch(ex, &nlog, &ctx_rows, &ctx_reqs, &gen_rows);
    if (rows == 0) {
        publish_stats(ex, 0, 0, 0, 0, 0);
        return;
    }
    e->iteration++;
    struct ifl_batch b = {.n_rows = rows,
                          .tokens = e->b_tok,
                          .pos = e->b_pos,
                          .seq = e->b_seq,
                          .logits = e->b_want,
                          .n_seqs = e->n_slots,
                          .block_tables = e->tables,
                          .n_blocks = e->n_blocks,
                          .hidden = e->want_hidden ? e->hidden : NULL};
    char err[IFL_ERR_LEN] = "";
    int rc = ifl_forward(e->fwd, &b, e->logits, err);
    if (rc) {
        /* the batch is built by the engine: this is a bug, not bad input;
         * fail the requests involved rather than spin on them */
        for (int32_t r = 0; r < rows; r++) {
            struct eseq *s = &e->seqs[e->b_seq[r]];
            if (s->q)
                finish_request(ex, s->q, IFL_FINISH_CANCELLED);
        }
        return;
    }
    /* record what the cache now holds */
    for (int32_t r = 0; r < rows;) {
        int32_t slot = e->b_seq[r], k = r;
        while (k < rows && e->b_seq[k] == slot)
            k++;
        struct eseq *s = &e->seqs[slot];
        ifl_kvc_commit(e->kvc, &s->kv, s->tokens, e->b_pos[k - 1] + 1);
        r = k;
    }
    capture_rows(ex, nlog);
    run_processors(ex, nlog);
    int32_t nv = ex->n_vocab;
    int32_t gen_reqs = 0;
    /* the plain rows' processing and choice, on every thread at once (a
     * 32000-token row takes some 20 us, a 16-row step's rows 0.35 ms on
     * the engine thread alone); their tokens are taken in row order below */
    e->n_pick = 0;
    for (int32_t r = 0; r < nlog; r++)
        if (plain_pick(e, r))
            e->pick_rows[e->n_pick++] = r;
    if (e->n_pick > 1)
        ifl_fwd_parallel(e->fwd, pick_rows, ex);
    else
        e->n_pick = 0;
    for (int32_t r = 0, k = 0; r < nlog; r++) {
        struct eseq *s = &e->seqs[e->row_slot[r]];
        const int picked = k < e->n_pick && e->pick_rows[k] == r;
        k += picked;
        if (!(e->row_flag[r] & ROW_SAMPLE) || !s->q || s->finish)
            continue;
        gen_reqs += s->n_gen > 0;
        float *row = e->logits + (size_t)r * nv;
        if (picked) {
            if (e->pick_tok[r] < 0)
                end_unpickable(ex, s);
            else
                apply_token(ex, s, e->pick_tok[r], e->pick_lp[r]);
            continue;
        }
        if (s->q->beam) {
            beam_take_row(ex, s, row);
            continue;
        }
        if (forks_now(s))
            fork_samples(ex, s, row, e->scratch);
        if (s->q)
            sample_and_apply(ex, s, row);
    }
    /* beam searches whose live beams all have their rows take a step */
    for (int32_t r = 0; r < nlog; r++) {
        struct eseq *s = &e->seqs[e->row_slot[r]];
        if ((e->row_flag[r] & ROW_SAMPLE) && s->q && s->q->beam)
            beam_advance(ex, s->q);
    }
    publish_stats(ex, (ifl_now_s() - t0) * 1e3, ctx_reqs, ctx_rows, gen_reqs, gen_rows);
}

int64_t ifl_engine_kv_resident(struct ifl_executor *ex)
{
    struct engine *e = ex->eng;
    return e && e->store ? ifl_kv_store_resident(e->store, ifl_kvc_touched_end(e->kvc)) : -1;
}

/* Gives back the memory of blocks that have been free for release_us (the
 * engine is idle: nothing waits on it) and publishes the figures if any
 * went. Returns the clock time when more will be due, INT64_MAX if none. */
static int64_t release_idle_blocks(struct ifl_executor *ex)
{
    struct engine *e = ex->eng;
    if (e->release_us < 0)
        return INT64_MAX;
    ifl_kvc_set_clock(e->kvc, ifl_now_us());
    if (ifl_kvc_release_idle(e->kvc, e->release_us) > 0)
        publish_stats(ex, 0, 0, 0, 0, 0);
    return ifl_kvc_next_release(e->kvc, e->release_us);
}

/* Between steps under load the engine is never idle, so blocks freed
 * after a burst would stay resident: at most once a second, and only when
 * at least a quarter of the pool (and 8 MiB) is free but resident, the
 * idle release runs here too (a scan of the block states and a system
 * call per free run and array: well under a step). */
static void busy_release(struct ifl_executor *ex)
{
    struct engine *e = ex->eng;
    int64_t now = ifl_now_us();
    if (e->release_us < 0 || now < e->busy_release_at)
        return;
    e->busy_release_at = now + 1000000;
    struct ifl_kvc_stats k;
    ifl_kvc_get_stats(e->kvc, &k);
    int64_t touched_free = (int64_t)(k.n_touched - k.n_used - k.n_cached);
    if (touched_free * 4 < k.n_blocks || touched_free * e->kv_block_bytes < ((int64_t)8 << 20))
        return;
    ifl_kvc_release_idle(e->kvc, e->release_us); /* the step's stats follow */
}

void *ifl_engine_main(void *arg)
{
    struct ifl_executor *ex = arg;
    struct engine *e = ex->eng;
    ifl_id cancels[256];
    for (;;) {
        pthread_mutex_lock(&ex->in_mu);
        while (!ex->in_head && !ex->n_cancels && !ex->stop && !e->waiting && !e->n_active_req) {
            /* idle: blocks free long enough give their memory back; wake
             * up when the next ones will have been */
            pthread_mutex_unlock(&ex->in_mu);
            int64_t wake = release_idle_blocks(ex);
            pthread_mutex_lock(&ex->in_mu);
            if (ex->in_head || ex->n_cancels || ex->stop)
                break;
            if (wake == INT64_MAX) {
                pthread_cond_wait(&ex->in_cv, &ex->in_mu);
            } else {
                struct timespec ts;
                clock_gettime(CLOCK_REALTIME, &ts);
                int64_t ahead = wake - ifl_now_us();
                int64_t ns = (int64_t)ts.tv_nsec + (ahead > 0 ? ahead : 0) * 1000 + 1000000;
                ts.tv_sec += (time_t)(ns / 1000000000);
                ts.tv_nsec = (long)(ns % 1000000000);
                pthread_cond_timedwait(&ex->in_cv, &ex->in_mu, &ts);
            }
        }
        struct xreq *in = ex->in_head;
        ex->in_head = ex->in_tail = NULL;
        int32_t nc = ex->n_cancels < 256 ? ex->n_cancels : 256;
        if (nc) {
            memcpy(cancels, ex->cancels, sizeof(ifl_id) * (size_t)nc);
            memmove(ex->cancels, ex->cancels + nc, sizeof(ifl_id) * (size_t)(ex->n_cancels - nc));
            ex->n_cancels -= nc;
        }
        int stop = ex->stop, cancel_all = ex->cancel_all;
        pthread_mutex_unlock(&ex->in_mu);
        while (in) {
            struct xreq *n = in->next;
            waiting_insert(e, in);
            in = n;
        }
        for (int32_t i = 0; i < nc; i++)
            apply_cancel(ex, cancels[i]);
        if (stop && cancel_all) {
            while (e->waiting)
                apply_cancel(ex, e->waiting->id);
            for (int32_t i = 0; i < e->n_slots; i++)
                if (e->seqs[i].q)
                    finish_request(ex, e->seqs[i].q, IFL_FINISH_CANCELLED);
        }
        if (stop && !e->waiting && !e->n_active_req)
            break;
        int64_t now = ifl_now_us();
        ifl_kvc_set_clock(e->kvc, now);
        expire(ex, now);
        step(ex);
        busy_release(ex);
    }
    return NULL;
}
