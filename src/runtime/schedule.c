/*
 * Scheduling: the waiting queue (priority, then arrival), admission of
 * waiting requests into free slots under the KV policy, and the building
 * of each step's ragged batch: decode rows first, then prefill chunks,
 * reserving KV blocks and preempting the lowest-ranked request when they
 * run out.
 */
#include <stdlib.h>
#include <string.h>

#include "core/timeutil.h"
#include "runtime/engine_internal.h"

/* ---- waiting queue ---- */

int ifl_sched_before(const struct xreq *a, const struct xreq *b)
{
    if (a->r.priority != b->r.priority)
        return a->r.priority > b->r.priority;
    return a->seq_no < b->seq_no;
}

void ifl_sched_wait(struct engine *e, struct xreq *q)
{
    struct xreq **pp = &e->waiting;
    while (*pp && ifl_sched_before(*pp, q))
        pp = &(*pp)->next;
    q->next = *pp;
    *pp = q;
    e->n_waiting++;
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
        if (!ifl_sched_before(s->q, for_q) && (!v || ifl_sched_before(v, s->q)))
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
        int rc = ifl_beamslot_create(ex, q, &q->beam);
        if (rc)
            return rc;
        for (int32_t k = 0; k < n; k++)
            q->beam->all[k] = slots[k];
        q->beam->slot[0] = slots[0];
        e->seqs[slots[0]].beam_j = 0;
        return 0;
    }
    size_t len = (size_t)q->r.max_tokens;
    for (int32_t k = 0; k < n; k++) {
        struct eseq *s = &e->seqs[slots[k]];
        if (o->return_generation_logits && !(s->glog = malloc(sizeof(float) * len * nv)))
            return IFL_ENOMEM;
        if (o->return_hidden_states && !(s->ghid = malloc(sizeof(float) * len * ne)))
            return IFL_ENOMEM;
    }
    return 0;
}

void ifl_sched_admit(struct ifl_executor *ex)
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
        /* KV is shared only between requests of the same adapter set */
        ifl_kvc_seq_set_salt(&prim->kv, q->lora.salt);
        /* and an image's rows are keyed by the image (images.h) */
        ifl_kvc_seq_set_ext(&prim->kv, q->img_ext, q->img_ext ? q->r.n_input : 0);
        /* context logits need every prompt row computed: no prefix reuse */
        int32_t reused = q->r.output.return_context_logits
                             ? 0
                             : ifl_kvc_match_prefix(e->kvc, &prim->kv, q->input, q->r.n_input - 1);
        int32_t taken = before_avail - ifl_kvc_available(e->kvc);
        int64_t need;
        if (ex->cfg.sched_policy == IFL_SCHED_GUARANTEED_NO_EVICT) {
            /* blocks the prefix match already holds count as taken; a beam
             * search gives back to this reservation what its dropped beams free */
            int64_t bs = ifl_kvc_block_size(e->kvc);
            need =
                ifl_exec_blocks_to_reserve(
                    bs, ifl_exec_kv_span((int64_t)q->r.n_input + q->r.max_tokens, ex->kv_span), n) -
                prim->kv.n_blocks;
            if (ifl_kvc_available(e->kvc) - e->reserved < need) {
                ifl_kvc_seq_reset(e->kvc, &prim->kv);
                break;
            }
        } else {
            need = 0;
            if (ifl_kvc_available(e->kvc) <
                ifl_eng_blocks_for(e, q->r.n_input) - prim->kv.n_blocks) {
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
        q->dec = ifl_decoding_for(ex, q);
        q->kv_reserved = need;
        e->reserved += need;
        memcpy(prim->tokens, q->input, sizeof(int32_t) * (size_t)q->r.n_input);
        prim->n_tokens = prim->n_prompt = q->r.n_input;
        int start_rc = ifl_seq_start(ex, prim, q, 0);
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
            ifl_seq_finish_request(ex, q, IFL_FINISH_CANCELLED);
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
        return ifl_sched_before(x->q, y->q) ? -1 : 1;
    return x->index - y->index;
}

/* Fills the batch; returns its rows. Sets *n_logit rows and row_slot. */
int32_t ifl_sched_build_batch(struct ifl_executor *ex, int32_t *n_logit, int32_t *ctx_rows,
                              int32_t *ctx_reqs, int32_t *gen_rows)
{
    struct engine *e = ex->eng;
    int32_t order[1024];
    int32_t n_order = 0;
    ifl_decoding_prepare(ex);
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
    e->tree_rows = 0;
    e->n_path = 0;
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
            /* a prefill stops before an image not encoded yet (images.h) */
            if (s->q->n_img &&
                (chunk = ifl_img_ready_until(s->q, s->kv.n_pos, s->kv.n_pos + chunk) -
                         s->kv.n_pos) <= 0)
                continue;
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
                int32_t end =
                    s->kv.n_pos + chunk < s->q->r.n_input ? s->kv.n_pos + chunk : s->q->r.n_input;
                n_ctx_rows = end > ctx_from ? end - ctx_from : 0;
            }
            /* (with context rows, the last prompt row is one of them) */
            if (chunk == pending && n_ctx_rows == 0 && nlog >= e->logit_cap)
                continue;
            int rc;
            while ((rc = ifl_seq_reserve(e, s, s->kv.n_pos + chunk)) == IFL_EFULL) {
                struct xreq *v = pick_victim(e, s->q);
                /* a victim already in this batch keeps its rows: skip it */
                if (!v || in_batch(e, v, rows))
                    break;
                ifl_seq_preempt(ex, v);
            }
            if (rc) {
                /* cannot run now: wait for blocks (drop what it holds if it
                 * blocks others, i.e. under max_utilization, unless another
                 * of its sequences, a sample or beam, already has rows here) */
                if (ex->cfg.sched_policy == IFL_SCHED_MAX_UTILIZATION && s->kv.n_pos > 0 &&
                    pass == 0 && !in_batch(e, s->q, rows))
                    ifl_seq_preempt(ex, s->q);
                continue;
            }
            s->paused = 0;
            /* a decoding sequence's strategy may add drafts after its
             * pending token, each a logits row, if their blocks are free */
            s->n_draft = s->spec_tree = 0;
            if (pass == 0 && n_ctx_rows == 0) {
                int32_t room = e->max_rows - rows - 1;
                if (room > e->logit_cap - nlog - 1)
                    room = e->logit_cap - nlog - 1;
                if (room > 0 && ifl_decoding_propose(ex, s, room) > 0 &&
                    ifl_seq_reserve(e, s, s->kv.n_pos + 1 + s->n_draft))
                    s->n_draft = s->spec_tree = 0;
                chunk += s->n_draft;
            }
            int32_t slot = (int32_t)(s - e->seqs);
            for (int32_t k = 0; k < chunk; k++) {
                int32_t p = s->kv.n_pos + k, rp = p; /* its cache place, its RoPE position */
                e->b_kvpos[rows] = p;
                e->b_pre[rows] = p + 1;
                e->b_off[rows] = 0;
                if (s->spec_tree && k >= pending) {
                    /* tree draft i: its place after the pending token's,
                     * its position that token's plus its depth, and it
                     * reads the sequence, then its ancestors and itself */
                    int32_t i = k - pending, d = s->spec_depth[i], base = s->spec_base;
                    rp = base + d;
                    e->b_pre[rows] = base + 1;
                    e->b_off[rows] = e->n_path;
                    for (int32_t a = i, at = d - 1; a >= 0; a = s->spec_parent[a], at--)
                        e->b_path[e->n_path + at] = base + 1 + a;
                    e->n_path += d;
                    e->tree_rows = 1;
                }
                /* the last pending row and every draft row are sampled */
                uint8_t flag =
                    (uint8_t)((n_ctx_rows && p >= ctx_from && p < s->q->r.n_input ? ROW_CTX : 0) |
                              (k >= pending - 1 && chunk >= pending ? ROW_SAMPLE : 0));
                e->b_tok[rows] = s->tokens[p];
                e->b_pos[rows] = rp;
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
