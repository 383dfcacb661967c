/*
 * Sequences: binding a slot to a sample of a request, its text through
 * the stop-string matcher, finishing a sequence, a beam search or a whole
 * request, and a sequence's KV: reservation (with the guaranteed_no_evict
 * books) and preemption (blocks dropped, recomputed later from its tokens).
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/engine_internal.h"

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
void ifl_seq_free_outputs(struct xreq *q)
{
    free(q->ctx_logits);
    free(q->ctx_hidden);
    q->ctx_logits = q->ctx_hidden = NULL;
    beam_free(q->beam);
    q->beam = NULL;
}

/* ---- sequences ---- */

static void append_text(struct eseq *s, const char *p, size_t n);

/* Passes n bytes of e->piece through the stop-string matcher into the
 * sequence's pending text; `last` flushes what the matcher holds. Returns 1
 * when a stop string matched. */
int ifl_seq_push_text(struct engine *e, struct eseq *s, size_t n, int last)
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
int ifl_seq_start(struct ifl_executor *ex, struct eseq *s, struct xreq *q, int32_t index)
{
    s->q = q;
    s->index = index;
    s->started = 1;
    s->n_gen = 0;
    s->n_sent = 0;
    s->finish = 0;
    s->end_token = -1;
    s->paused = 0;
    s->cum_logprob = 0;
    s->n_text = 0;
    s->spec_cap = IFL_SPEC_FREE_DRAFTS;
    s->spec_miss = s->spec_pause = 0;
    s->spec_backoff = 8;
    s->spec_align = 0;
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
    ifl_seq_free_outputs(q);
    ifl_img_release(ex, q);
    ifl_xreq_free(q);
    return 1;
}

/* Ends sequence s with a reason; queues its final response. */
void ifl_seq_finish(struct ifl_executor *ex, struct eseq *s, int32_t reason)
{
    struct engine *e = ex->eng;
    struct xreq *q = s->q;
    s->finish = reason;
    if (s->started)
        ifl_seq_push_text(e, s, ifl_detok_flush(&s->dt, e->piece), 1);
    q->n_seqs_live--;
    ifl_emit_seq(ex, s, q->n_seqs_live == 0);
    if (q->dec && q->dec->drop)
        q->dec->drop(ex, s);
    ifl_kvc_seq_reset(e->kvc, &s->kv);
    s->n_draft = 0;
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
void ifl_seq_finish_beams(struct ifl_executor *ex, struct xreq *q, int32_t reason)
{
    struct engine *e = ex->eng;
    if (q->beam)
        ifl_beam_finalize(&q->beam->b, reason); /* nothing if already done */
    ifl_emit_beams(ex, q);
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
void ifl_seq_finish_request(struct ifl_executor *ex, struct xreq *q, int32_t reason)
{
    struct engine *e = ex->eng;
    if (q->r.sampling.beam_width > 1) {
        ifl_seq_finish_beams(ex, q, reason);
        return;
    }
    /* unstarted samples first, so the final response comes from the last one */
    for (int pass = 0; pass < 2; pass++)
        for (int32_t i = 0; i < e->n_slots; i++) {
            struct eseq *s = &e->seqs[i];
            if (s->q == q && s->started == (pass == 1))
                ifl_seq_finish(ex, s, reason);
        }
}

/* ---- KV reservation ---- */

/* Reserves KV so s can hold n_pos_total positions, keeping the
 * guaranteed_no_evict books. */
int ifl_seq_reserve(struct engine *e, struct eseq *s, int32_t n_pos_total)
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

void ifl_seq_drop_behind_window(struct ifl_executor *ex)
{
    struct engine *e = ex->eng;
    if (!e->kv_window)
        return;
    const struct ifl_hparams *hp = &ex->model->hp;
    int32_t bs = ifl_kvc_block_size(e->kvc);
    for (int32_t i = 0; i < e->n_slots; i++) {
        struct eseq *s = &e->seqs[i];
        /* the next row reads from its window on, and rows only move on */
        if (!(s->q && s->started && s->kv.n_pos > 0))
            continue;
        int32_t before = ifl_kvc_available(e->kvc);
        ifl_kvc_drop_before(e->kvc, &s->kv, ifl_hp_kv_read_from(hp, 1, s->kv.n_pos, bs));
        /* guaranteed_no_evict booked the window, not the whole length
         * (ifl_exec_kv_span): what goes back to the pool is booked again
         * for the blocks ahead */
        int32_t freed = ifl_kvc_available(e->kvc) - before;
        if (freed > 0 && ex->cfg.sched_policy == IFL_SCHED_GUARANTEED_NO_EVICT) {
            s->q->kv_reserved += freed;
            e->reserved += freed;
        }
    }
}

/* Drops the KV of every sequence of q; they are recomputed later. */
void ifl_seq_preempt(struct ifl_executor *ex, struct xreq *q)
{
    struct engine *e = ex->eng;
    for (int32_t i = 0; i < e->n_slots; i++) {
        struct eseq *s = &e->seqs[i];
        if (s->q == q && s->started && !s->finish) {
            if (q->dec && q->dec->drop)
                q->dec->drop(ex, s);
            ifl_kvc_seq_reset(e->kvc, &s->kv);
            s->n_draft = s->spec_tree = 0;
            s->paused = 1;
        }
    }
    q->perf.preemptions++;
}
