/*
 * Token choice: each sampling row of a step is processed (bias, bans,
 * penalties, the guide's mask) and a token picked and applied (the end and
 * stop checks, text, streaming responses). Plain rows may be picked on
 * every thread at once; forked samples take their first token from their
 * primary's row. Also the logits outputs: raw rows and hidden states
 * captured before the logits processors run.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/timeutil.h"
#include "runtime/engine_internal.h"

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
        if (len <= s->n_gen && !memcmp(s->tokens + s->n_tokens - len, q->stop_tok + off,
                                       sizeof(int32_t) * (size_t)len))
            return 1;
        off += len;
    }
    return 0;
}

/* Samples the next token of s from row (processed in place), then applies it. */
struct ifl_sampler_extras ifl_choose_extras(const struct engine *e, const struct xreq *q)
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
    *x = ifl_choose_extras(ex->eng, s->q);
    ifl_sampler_process(&s->scfg, &s->st, row, ex->n_vocab, s->tokens, s->n_prompt,
                        s->tokens + s->n_prompt, s->n_gen, x);
}

/* draft >= 0: speculative sampling against that proposal (one-hot: every
 * proposer here chooses its drafts deterministically) */
static int32_t pick_row(struct eseq *s, const float *row, float *lp, int32_t draft)
{
    int32_t n_top = s->q->r.output.top_log_probs;
    struct ifl_top_logprob *top = n_top ? s->tops + (size_t)s->n_gen * IFL_MAX_TOP : NULL;
    int32_t tok = draft >= 0
                      ? ifl_sampler_pick_spec(&s->scfg, &s->st, row, draft, NULL, lp, top, n_top)
                      : ifl_sampler_pick(&s->scfg, &s->st, row, lp, top, n_top);
    /* the sampler falls back to token 0 when no logit is left above -inf
     * (all banned by bias, bad words or min_tokens, or NaN): -1, not a
     * banned token */
    return row[tok] > -INFINITY ? tok : -1;
}

/* A sequence with nothing left to pick ends, its request failed. */
void ifl_choose_end_unpickable(struct ifl_executor *ex, struct eseq *s)
{
    s->q->status = IFL_EINVAL;
    ifl_seq_finish(ex, s, IFL_FINISH_CANCELLED);
}

int32_t ifl_choose_token(struct ifl_executor *ex, struct eseq *s, float *row, float *lp)
{
    return ifl_choose_token_spec(ex, s, row, -1, lp);
}

int32_t ifl_choose_token_spec(struct ifl_executor *ex, struct eseq *s, float *row, int32_t draft,
                              float *lp)
{
    struct engine *e = ex->eng;
    struct xreq *q = s->q;
    struct ifl_sampler_extras x;
    process_row(ex, s, row, &x);
    if (q->xg && ifl_xguide_mask_row(&e->ge, &s->gst, row, x.end_ids, x.n_end_ids) < 0) {
        q->status = IFL_ENOMEM;
        ifl_seq_finish(ex, s, IFL_FINISH_CANCELLED);
        return -1;
    }
    *lp = 0;
    int32_t tok = pick_row(s, row, lp, draft);
    if (tok < 0 && !q->xg) {
        ifl_choose_end_unpickable(ex, s);
        return -1;
    }
    if (q->xg && (tok < 0 || !ifl_xguide_allowed(&e->ge, tok))) {
        /* every token the grammar allows was banned (bad words, bias,
         * min_tokens on a complete grammar): end here rather than break it */
        if (!ifl_guide_is_accepting(&s->gst))
            q->status = IFL_EINVAL;
        ifl_seq_finish(ex, s,
                       ifl_guide_is_accepting(&s->gst) ? IFL_FINISH_END_ID : IFL_FINISH_CANCELLED);
        return -1;
    }
    return tok;
}

void ifl_choose_sample(struct ifl_executor *ex, struct eseq *s, float *row)
{
    float lp = 0;
    int32_t tok = ifl_choose_token(ex, s, row, &lp);
    if (tok >= 0)
        ifl_choose_apply(ex, s, tok, lp);
}

/* Takes the token s picked: the sampler's counts, the end and stop
 * checks, the text, the response. Engine state: the engine thread only. */
void ifl_choose_apply(struct ifl_executor *ex, struct eseq *s, int32_t tok, float lp)
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
        s->end_token = tok;
        ifl_seq_finish(ex, s, IFL_FINISH_END_ID);
        return;
    }
    int done = 0; /* a guided sequence whose grammar is complete and cannot go on */
    if (q->xg) {
        int grc = ifl_guide_accept_token(&s->gst, e->ge.vi, tok);
        if (grc) {
            /* only IFL_ENOMEM or IFL_EFULL can get here: the mask allowed it */
            q->status = grc;
            ifl_seq_finish(ex, s, IFL_FINISH_CANCELLED);
            return;
        }
        done = !ifl_guide_can_continue(&s->gst);
    }
    s->tokens[s->n_tokens++] = tok;
    s->logprobs[s->n_gen] = lp;
    s->n_gen++;
    s->cum_logprob += lp;
    int32_t reason = 0;
    if (ifl_seq_push_text(e, s, ifl_detok_push(&s->dt, tok, e->piece), 0))
        reason = IFL_FINISH_STOP_WORDS;
    else if (q->r.n_stop_words && hits_stop_word(s))
        reason = IFL_FINISH_STOP_WORDS;
    else if (done)
        reason = IFL_FINISH_END_ID; /* min_tokens never forces text past the grammar */
    else if (s->n_gen >= q->r.max_tokens || s->n_tokens >= ex->n_ctx)
        reason = IFL_FINISH_LENGTH;
    if (reason)
        ifl_seq_finish(ex, s, reason);
    else if (q->r.streaming)
        ifl_emit_seq(ex, s, 0);
}

/* Whether s, the primary of a request of several samples, has just
 * finished its prompt: its row is the one the other samples fork from. */
int ifl_choose_forks_now(const struct eseq *s)
{
    return s->n_gen == 0 && s->index == 0 && s->q->n_seqs_total > 1 && s->n_tokens == s->n_prompt;
}

/* Whether logits row r is sampled the plain way, its choice depending on
 * nothing but its own sequence: not a beam, not guided (the grammar's
 * caches are shared), not the row the other samples fork from, its
 * sequence's only row (no drafts: each draft row's choice depends on the
 * tokens taken from the rows before it), of a strategy that allows it. */
int ifl_choose_plain_pick(const struct engine *e, int32_t r)
{
    const struct eseq *s = &e->seqs[e->row_slot[r]];
    return (e->row_flag[r] & ROW_SAMPLE) && s->q && !s->finish && !s->q->beam && !s->q->xg &&
           !ifl_choose_forks_now(s) && !s->n_draft && s->q->dec && s->q->dec->parallel_pick;
}

/* A pool job (ifl_fwd_parallel): each thread processes and picks its
 * share of e->pick_rows. The results are what sample_and_apply would have
 * picked row by row, since each row reads and writes only its sequence. */
void ifl_choose_pick_rows(void *arg, int ith, int nth)
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
        e->pick_tok[r] = pick_row(s, row, &e->pick_lp[r], -1);
    }
}

/* Forks the unstarted samples of q from its primary s (which just finished
 * its prompt) and samples each from the same logits. */
void ifl_choose_fork_samples(struct ifl_executor *ex, struct eseq *prim, const float *row,
                             float *scratch)
{
    struct engine *e = ex->eng;
    for (int32_t i = 0; i < e->n_slots; i++) {
        struct eseq *c = &e->seqs[i];
        if (c->q != prim->q || c->started)
            continue;
        if (ifl_seq_start(ex, c, prim->q, c->index) || ifl_kvc_fork(e->kvc, &prim->kv, &c->kv)) {
            ifl_seq_finish(ex, c, IFL_FINISH_CANCELLED);
            continue;
        }
        if (c->q->xg && ifl_guide_state_copy(&c->gst, &prim->gst)) {
            ifl_seq_finish(ex, c, IFL_FINISH_CANCELLED);
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
        ifl_choose_sample(ex, c, scratch);
    }
}

/* Copies what the outputs need from this step's logits rows before
 * anything modifies them: context rows, and each sampling row's raw
 * logits and hidden state (per sequence, or into a beam search's trace). */
void ifl_choose_capture_rows(struct ifl_executor *ex, int32_t nlog)
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
        } else {
            /* the row at the pending position gives generated token n_gen;
             * a draft row i positions on, token n_gen + i if the drafts
             * before it are kept (else a later step writes it again) */
            int32_t g = s->n_gen + (p - (s->n_tokens - 1));
            if (g >= q->r.max_tokens || (s->spec_tree && p >= s->n_tokens))
                continue; /* a tree draft's row: its acceptor captures it if reached */
            if (s->glog)
                memcpy(s->glog + (size_t)g * nv, lg, sizeof(float) * nv);
            if (s->ghid && hd)
                memcpy(s->ghid + (size_t)g * ne, hd, sizeof(float) * ne);
        }
    }
}

void ifl_choose_capture_gen(struct ifl_executor *ex, struct eseq *s, int32_t r)
{
    struct engine *e = ex->eng;
    size_t nv = (size_t)ex->n_vocab, ne = (size_t)e->n_embd;
    if (s->n_gen >= s->q->r.max_tokens)
        return;
    if (s->glog)
        memcpy(s->glog + (size_t)s->n_gen * nv, e->logits + (size_t)r * nv, sizeof(float) * nv);
    if (s->ghid && e->want_hidden)
        memcpy(s->ghid + (size_t)s->n_gen * ne, e->hidden + (size_t)r * ne, sizeof(float) * ne);
}

void ifl_choose_run_processors(struct ifl_executor *ex, int32_t nlog)
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
    ex->cfg.batched_logits_processor(ex->cfg.batched_logits_user, n, ids, e->logits, nv, toks, ntok,
                                     cids);
}
