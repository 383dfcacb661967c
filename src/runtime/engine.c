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
 *      checks its stop conditions and queues responses.
 *
 * A sequence is its tokens (prompt then generated) and the number of
 * positions whose K/V are in the cache. Positions [n_pos, n_tokens) are
 * pending; computing the last one yields the logits of the next token. A
 * decode step is a prefill chunk of one, and a preempted sequence simply
 * drops its blocks (n_pos = 0) and is recomputed from its tokens later: the
 * client sees no gap and no duplicate token, and batch invariance makes the
 * recomputed K/V identical.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/timeutil.h"
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
};

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
    int32_t logit_cap;
    char *piece;               /* detokenizer output */
    char *stopbuf;             /* stop-string matcher output */
    int32_t *eog_ids;          /* the model's end-of-generation tokens */
    int32_t n_eog;
    int64_t iteration;
    int64_t completed;
    struct ifl_kvc_stats kst;
};

static void kv_copy(void *user, int32_t dst, int32_t src, int32_t n)
{
    ifl_kv_store_copy_block(user, dst, src, n);
}

static int32_t blocks_for_n(int64_t n_pos, int32_t bs) { return (int32_t)((n_pos + bs - 1) / bs); }

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
    size_t per_pos = (size_t)hp->n_layer * (size_t)hp->n_head_kv *
                     (size_t)(hp->head_dim + hp->head_dim_v) *
                     (c->kv_type == IFL_KV_F32 ? 4 : 2);
    if (tokens == 0 && c->kv_cache_bytes > 0)
        tokens = c->kv_cache_bytes / (int64_t)per_pos;
    if (tokens == 0)
        tokens = (int64_t)c->max_batch_size * ex->n_ctx;
    int64_t n_blocks = (tokens + bs - 1) / bs;
    ex->kv_cache_tokens = n_blocks * bs;
    if (n_blocks < blocks_for_n(ex->n_ctx, bs))
        return ifl_err(err, IFL_EINVAL,
                       "config: a KV cache of %lld positions cannot hold one full context of %d",
                       (long long)tokens, ex->n_ctx);
    if (n_blocks > (1 << 30))
        return ifl_err(err, IFL_EINVAL, "config: KV cache of %lld positions is too large",
                       (long long)tokens);
    int rc = ifl_kv_store_create(&e->store, hp, c->kv_type == IFL_KV_F32 ? IFL_TYPE_F32 : IFL_TYPE_F16,
                                 (int32_t)n_blocks, bs, err);
    if (rc)
        return rc;
    struct ifl_kvc_config kc = {.n_blocks = (int32_t)n_blocks,
                                .block_size = bs,
                                .enable_prefix_caching = c->enable_prefix_caching,
                                .copy = kv_copy,
                                .copy_user = e->store};
    if (ifl_kvc_create(&e->kvc, &kc))
        return ifl_err(err, IFL_ENOMEM, "engine: out of memory for the KV block manager");
    e->max_rows = c->max_num_tokens;
    struct ifl_fwd_config fc = {.max_rows = e->max_rows, .max_ctx = ex->n_ctx,
                                .n_threads = c->n_threads};
    if ((rc = ifl_fwd_create(&e->fwd, ex->model, e->store, &fc, err)))
        return rc;
    e->n_slots = c->max_batch_size;
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
    e->piece = malloc(IFL_DETOK_ROOM(ex->vocab));
    /* a feed of one piece plus the longest hold: 64 stop strings of 256 bytes at most */
    e->stopbuf = malloc(IFL_DETOK_ROOM(ex->vocab) + 64 * 256);
    e->eog_ids = malloc(sizeof(int32_t) * (size_t)ex->n_vocab);
    if (e->eog_ids)
        for (int32_t t = 0; t < ex->n_vocab; t++)
            if (ifl_vocab_is_eog(ex->vocab, t))
                e->eog_ids[e->n_eog++] = t;
    if (!e->seqs || !e->b_tok || !e->b_pos || !e->b_seq || !e->b_want || !e->row_slot ||
        !e->tables || !e->n_blocks || !e->logits || !e->scratch || !e->piece ||
        !e->stopbuf || !e->eog_ids)
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
        }
        /* requests still holding slots (only after a failed start) */
        for (int32_t i = 0; i < e->n_slots; i++) {
            struct xreq *q = e->seqs[i].q;
            if (!q)
                continue;
            for (int32_t j = i; j < e->n_slots; j++)
                if (e->seqs[j].q == q)
                    e->seqs[j].q = NULL;
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
    free(e->piece);
    free(e->stopbuf);
    free(e->eog_ids);
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

static void *dup_range(const void *p, size_t n)
{
    if (!n)
        return NULL;
    void *q = malloc(n);
    if (q)
        memcpy(q, p, n);
    return q;
}

static struct ifl_response *new_response(const struct xreq *q)
{
    struct ifl_response *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->request_id = q->id;
    r->client_id = q->r.client_id;
    return r;
}

/* Queues a response for sequence s: its tokens since the last response (or
 * all, as the request asks) and the text made since. */
static void emit(struct ifl_executor *ex, struct eseq *s, int is_final)
{
    struct xreq *q = s->q;
    struct ifl_response *r = new_response(q);
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
    r->n_vocab = ex->n_vocab;
    r->n_embd = ex->model->hp.n_embd;
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
        res->log_probs = dup_range(s->logprobs + from, sizeof(float) * (size_t)n_new);
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
    if (q->r.output.return_perf_metrics)
        r->perf = q->perf;
    s->n_sent = s->n_gen;
    ifl_exec_push_response(ex, r);
}

/* A final response for a request that never got to run (cancelled or timed
 * out while waiting), one per sequence. */
static void emit_unstarted(struct ifl_executor *ex, struct xreq *q, int32_t reason)
{
    for (int32_t i = 0; i < q->r.num_return_sequences; i++) {
        struct ifl_response *r = new_response(q);
        struct ifl_sequence_result *res = r ? calloc(1, sizeof(*res)) : NULL;
        if (!res) {
            free(r);
            continue;
        }
        r->is_final = i == q->r.num_return_sequences - 1;
        r->sequence_index = i;
        r->is_sequence_final = 1;
        r->n_results = 1;
        r->results = res;
        r->n_vocab = ex->n_vocab;
        r->n_embd = ex->model->hp.n_embd;
        res->finish_reason = reason;
        res->text = calloc(1, 1);
        if (q->r.output.return_perf_metrics)
            r->perf = q->perf;
        ifl_exec_push_response(ex, r);
    }
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
    q->n_slots_held--;
    release_request_if_done(ex, q);
}

/* Ends every sequence of request q (cancel, timeout). */
static void finish_request(struct ifl_executor *ex, struct xreq *q, int32_t reason)
{
    struct engine *e = ex->eng;
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

static void admit(struct ifl_executor *ex)
{
    struct engine *e = ex->eng;
    int32_t admitted = 0;
    while (e->waiting) {
        struct xreq *q = e->waiting;
        int32_t n = q->r.num_return_sequences;
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
        int32_t reused = ifl_kvc_match_prefix(e->kvc, &prim->kv, q->input, q->r.n_input - 1);
        int32_t taken = before_avail - ifl_kvc_available(e->kvc);
        int64_t need;
        if (ex->cfg.sched_policy == IFL_SCHED_GUARANTEED_NO_EVICT) {
            /* every sample may need its own blocks for the whole length, plus
             * one copy-on-write block each */
            int64_t full = blocks_for(e, (int64_t)q->r.n_input + q->r.max_tokens);
            need = (full - prim->kv.n_blocks) + (int64_t)(n - 1) * (full + 1) + 1;
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
        for (int32_t k = 1; k < n; k++)
            for (int32_t i = 0; i < e->n_slots; i++)
                if (!e->seqs[i].q) {
                    e->seqs[i].q = q;
                    e->seqs[i].index = k;
                    e->seqs[i].started = 0;
                    e->seqs[i].finish = 0;
                    break;
                }
        q->n_seqs_live = n;
        q->n_seqs_total = n;
        q->n_slots_held = n;
        q->stage = IFL_STAGE_CONTEXT_IN_PROGRESS;
        q->perf.first_scheduled_us = ifl_now_us();
        e->n_active_req++;
        admitted++;
        if (start_rc)
            finish_request(ex, q, IFL_FINISH_CANCELLED);
    }
    if (admitted) {
        pthread_mutex_lock(&ex->in_mu);
        ex->n_queued -= admitted;
        pthread_mutex_unlock(&ex->in_mu);
    }
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
            if (chunk == pending && nlog >= e->logit_cap)
                continue;
            int rc;
            while ((rc = reserve(e, s, s->kv.n_pos + chunk)) == IFL_EFULL) {
                struct xreq *v = pick_victim(e, s->q);
                if (!v)
                    break;
                /* a victim already in this batch keeps its rows: skip it */
                int in_batch = 0;
                for (int32_t r = 0; r < rows && !in_batch; r++)
                    in_batch = e->seqs[e->b_seq[r]].q == v;
                if (in_batch)
                    break;
                preempt(ex, v);
            }
            if (rc) {
                /* cannot run now: wait for blocks (drop what it holds if it
                 * blocks others, i.e. under max_utilization) */
                if (ex->cfg.sched_policy == IFL_SCHED_MAX_UTILIZATION && s->kv.n_pos > 0 &&
                    pass == 0)
                    preempt(ex, s->q);
                continue;
            }
            s->paused = 0;
            int32_t slot = (int32_t)(s - e->seqs);
            for (int32_t k = 0; k < chunk; k++) {
                int32_t p = s->kv.n_pos + k;
                e->b_tok[rows] = s->tokens[p];
                e->b_pos[rows] = p;
                e->b_seq[rows] = slot;
                e->b_want[rows] = 0;
                rows++;
            }
            if (chunk == pending) {
                e->b_want[rows - 1] = 1;
                e->row_slot[nlog++] = slot;
            }
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
static void sample_and_apply(struct ifl_executor *ex, struct eseq *s, float *row)
{
    struct engine *e = ex->eng;
    struct xreq *q = s->q;
    int32_t n_vocab = ex->n_vocab;
    struct ifl_sampler_extras x = {.end_ids = q->r.end_id >= 0 ? &q->r.end_id : e->eog_ids,
                                   .n_end_ids = q->r.end_id >= 0 ? 1 : e->n_eog,
                                   .bias_ids = q->bias_ids,
                                   .bias_values = q->bias_vals,
                                   .n_bias = q->r.n_logit_bias,
                                   .bad_tokens = q->bad_tok,
                                   .bad_lens = q->bad_len,
                                   .n_bad = q->r.n_bad_words};
    ifl_sampler_process(&s->scfg, &s->st, row, n_vocab, s->tokens, s->n_prompt,
                        s->tokens + s->n_prompt, s->n_gen, &x);
    float lp = 0;
    int32_t n_top = q->r.output.top_log_probs;
    int32_t tok = ifl_sampler_pick(&s->scfg, &s->st, row, &lp,
                                   n_top ? s->tops + (size_t)s->n_gen * IFL_MAX_TOP : NULL, n_top);
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
    s->tokens[s->n_tokens++] = tok;
    s->logprobs[s->n_gen] = lp;
    s->n_gen++;
    s->cum_logprob += lp;
    int32_t reason = 0;
    if (push_text(e, s, ifl_detok_push(&s->dt, tok, e->piece), 0))
        reason = IFL_FINISH_STOP_WORDS;
    else if (q->r.n_stop_words && hits_stop_word(s))
        reason = IFL_FINISH_STOP_WORDS;
    else if (s->n_gen >= q->r.max_tokens || s->n_tokens >= ex->n_ctx)
        reason = IFL_FINISH_LENGTH;
    if (reason)
        finish_seq(ex, s, reason);
    else if (q->r.streaming)
        emit(ex, s, 0);
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
        memcpy(c->tokens, prim->tokens, sizeof(int32_t) * (size_t)prim->n_tokens);
        c->n_tokens = prim->n_tokens;
        c->n_prompt = prim->n_prompt;
        memcpy(scratch, row, sizeof(float) * (size_t)ex->n_vocab);
        sample_and_apply(ex, c, scratch);
    }
}

static void run_processors(struct ifl_executor *ex, int32_t nlog)
{
    struct engine *e = ex->eng;
    int32_t nv = ex->n_vocab;
    for (int32_t r = 0; r < nlog; r++) {
        struct eseq *s = &e->seqs[e->row_slot[r]];
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
        if (s->q->post_index != -2)
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
    pthread_mutex_lock(&ex->out_mu);
    ex->last_stats = st;
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
                          .n_blocks = e->n_blocks};
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
    run_processors(ex, nlog);
    int32_t nv = ex->n_vocab;
    int32_t gen_reqs = 0;
    for (int32_t r = 0; r < nlog; r++) {
        struct eseq *s = &e->seqs[e->row_slot[r]];
        if (!s->q || s->finish)
            continue;
        gen_reqs += s->n_gen > 0;
        float *row = e->logits + (size_t)r * nv;
        if (s->n_gen == 0 && s->index == 0 && s->q->n_seqs_total > 1 && s->n_tokens == s->n_prompt)
            fork_samples(ex, s, row, e->scratch);
        if (s->q)
            sample_and_apply(ex, s, row);
    }
    publish_stats(ex, (ifl_now_s() - t0) * 1e3, ctx_reqs, ctx_rows, gen_reqs, gen_rows);
}

void *ifl_engine_main(void *arg)
{
    struct ifl_executor *ex = arg;
    struct engine *e = ex->eng;
    ifl_id cancels[256];
    for (;;) {
        pthread_mutex_lock(&ex->in_mu);
        while (!ex->in_head && !ex->n_cancels && !ex->stop && !e->waiting && !e->n_active_req)
            pthread_cond_wait(&ex->in_cv, &ex->in_mu);
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
        expire(ex, ifl_now_us());
        step(ex);
    }
    return NULL;
}
