/*
 * Beam search in the engine: the search's state made at admission, each
 * live beam's row taken into the search, and the slots re-formed after
 * each step of the search (beam.c holds the search itself).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/timeutil.h"
#include "runtime/engine_internal.h"

int ifl_beamslot_create(struct ifl_executor *ex, struct xreq *q, struct ebeam **out)
{
    struct ebeam *eb = calloc(1, sizeof(*eb));
    *out = eb;
    if (!eb)
        return IFL_ENOMEM;
    int32_t w = q->r.sampling.beam_width, nv = ex->n_vocab, ne = ex->model->hp.n_embd;
    eb->width = w;
    eb->n_ret = q->r.num_return_sequences > 1 ? q->r.num_return_sequences : w;
    eb->max_len = q->r.max_tokens;
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

/* Takes live beam s's row of this step: processed (penalties and bans
 * see this beam's own tokens) into the request's row set. */
void ifl_beamslot_take_row(struct ifl_executor *ex, struct eseq *s, const float *row)
{
    struct engine *e = ex->eng;
    struct xreq *q = s->q;
    struct ebeam *eb = q->beam;
    int32_t nv = ex->n_vocab;
    float *dst = eb->rows + (size_t)s->beam_j * (size_t)nv;
    memcpy(dst, row, sizeof(float) * (size_t)nv);
    struct ifl_sampler_extras x = ifl_choose_extras(e, q);
    ifl_sampler_recount(&s->st, s->tokens + s->n_prompt, s->n_gen);
    ifl_sampler_process(&s->scfg, &s->st, dst, nv, s->tokens, s->n_prompt, s->tokens + s->n_prompt,
                        s->n_gen, &x);
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
void ifl_beamslot_advance(struct ifl_executor *ex, struct xreq *q)
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
        ifl_seq_finish_beams(ex, q, IFL_FINISH_LENGTH);
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
        if (ifl_seq_start(ex, c, q, i) || ifl_kvc_fork(e->kvc, &par->kv, &c->kv) ||
            (q->xg && ifl_guide_state_copy(&c->gst, &par->gst))) {
            ifl_seq_finish_beams(ex, q, IFL_FINISH_CANCELLED);
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
            ifl_seq_finish_beams(ex, q, IFL_FINISH_CANCELLED);
            return;
        }
        c->tokens[c->n_tokens++] = ch[i].token;
        c->n_gen++;
        c->beam_j = i;
        c->index = i;
        eb->slot[i] = dst[i];
    }
}
