/*
 * Beam search step helper (contract in beam.h).
 *
 * Live histories are copied into a second buffer at every step (parent's
 * tokens + the new one) and the buffers swapped: O(width * length) per
 * step, which keeps each live beam's history contiguous for the sampler's
 * bad-word and n-gram checks. Scores are accumulated in double; only the
 * reported values are rounded to float.
 *
 * Reference: the finished-hypotheses set and its early-stopping rules
 * follow the description of HF transformers' BeamHypotheses (see beam.h for
 * where this differs).
 */
#include "runtime/beam.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "runtime/sampler.h"

int ifl_beam_init(struct ifl_beam *b, int32_t max_width, int32_t max_len)
{
    memset(b, 0, sizeof(*b));
    if (max_width < 1 || max_width > IFL_BEAM_MAX_WIDTH || max_len < 1)
        return IFL_EINVAL;
    size_t n = (size_t)max_width * (size_t)max_len;
    b->cap_width = max_width;
    b->cap_len = max_len;
    b->tok = malloc(n * sizeof(*b->tok));
    b->tok_next = malloc(n * sizeof(*b->tok_next));
    b->lp = malloc(n * sizeof(*b->lp));
    b->lp_next = malloc(n * sizeof(*b->lp_next));
    b->fin_tok = malloc(n * sizeof(*b->fin_tok));
    b->fin_lp = malloc(n * sizeof(*b->fin_lp));
    if (!b->tok || !b->tok_next || !b->lp || !b->lp_next || !b->fin_tok || !b->fin_lp) {
        ifl_beam_deinit(b);
        return IFL_ENOMEM;
    }
    b->done = 1;
    return 0;
}

void ifl_beam_deinit(struct ifl_beam *b)
{
    free(b->tok);
    free(b->tok_next);
    free(b->lp);
    free(b->lp_next);
    free(b->fin_tok);
    free(b->fin_lp);
    memset(b, 0, sizeof(*b));
}

int ifl_beam_reset(struct ifl_beam *b, const struct ifl_sampling_config *c, int32_t max_len)
{
    if (c->beam_width < 1 || c->beam_width > b->cap_width || max_len < 1 || max_len > b->cap_len)
        return IFL_EINVAL;
    b->width = c->beam_width;
    b->max_len = max_len;
    b->length_penalty = c->length_penalty;
    b->early_stopping = c->early_stopping;
    b->done = 0;
    b->n_live = 1;
    b->len = 0;
    b->cum[0] = 0;
    b->n_fin = 0;
    b->n_added = 0;
    return 0;
}

static double score_of(const struct ifl_beam *b, double cum, int32_t len)
{
    if (len < 1)
        return cum;
    return cum / pow((double)len, (double)b->length_penalty);
}

/* Index of the worst finished hypothesis (lowest score, the later on ties). */
static int32_t worst_fin(const struct ifl_beam *b)
{
    int32_t w = 0;
    for (int32_t i = 1; i < b->n_fin; i++)
        if (b->fin[i].score < b->fin[w].score ||
            (b->fin[i].score == b->fin[w].score && b->fin[i].order > b->fin[w].order))
            w = i;
    return w;
}

/* Offers a hypothesis: hist/hlp (len - 1 tokens, or len when last < 0)
 * followed by token last with log-prob last_lp. */
static void add_hyp(struct ifl_beam *b, const int32_t *hist, const float *hlp, int32_t n_hist,
                    int32_t last, float last_lp, double cum, int32_t reason)
{
    int32_t len = n_hist + (last >= 0);
    double score = score_of(b, cum, len);
    int32_t slot;
    if (b->n_fin < b->width) {
        slot = b->n_fin++;
    } else {
        slot = worst_fin(b);
        if (!(score > b->fin[slot].score))
            return;
    }
    size_t off = (size_t)slot * (size_t)b->cap_len;
    memcpy(b->fin_tok + off, hist, (size_t)n_hist * sizeof(*hist));
    memcpy(b->fin_lp + off, hlp, (size_t)n_hist * sizeof(*hlp));
    if (last >= 0) {
        b->fin_tok[off + (size_t)n_hist] = last;
        b->fin_lp[off + (size_t)n_hist] = last_lp;
    }
    b->fin[slot] = (struct ifl_beam_fin){cum, score, len, reason, b->n_added++};
}

/* Best score first; ties: lower parent, higher logit, lower token. Within
 * one parent the logit decides ties, so width 1 matches greedy exactly
 * even where subtracting the log-sum-exp rounds two logits together. */
static int cand_better(const struct ifl_beam_cand *x, const struct ifl_beam_cand *y)
{
    if (x->score != y->score)
        return x->score > y->score;
    if (x->parent != y->parent)
        return x->parent < y->parent;
    if (x->logit != y->logit)
        return x->logit > y->logit;
    return x->token < y->token;
}

static int is_end(const int32_t *end_ids, int32_t n_end, int32_t t)
{
    for (int32_t i = 0; i < n_end; i++)
        if (end_ids[i] == t)
            return 1;
    return 0;
}

void ifl_beam_finalize(struct ifl_beam *b, int32_t finish_reason)
{
    if (b->done)
        return;
    for (int32_t i = 0; i < b->n_live; i++) {
        size_t off = (size_t)i * (size_t)b->cap_len;
        add_hyp(b, b->tok + off, b->lp + off, b->len, -1, 0, b->cum[i], finish_reason);
    }
    b->done = 1;
}

int ifl_beam_step(struct ifl_beam *b, const float *logits, int32_t n_vocab, const int32_t *end_ids,
                  int32_t n_end, struct ifl_beam_choice *choices, int32_t *n_choices)
{
    IFL_ASSERT(!b->done && b->n_live >= 1 && b->len < b->max_len);
    *n_choices = 0;
    int32_t w = b->width, per_row = 2 * w, nc = 0;
    struct ifl_beam_cand *cd = b->cand;
    for (int32_t r = 0; r < b->n_live; r++) {
        const float *row = logits + (size_t)r * (size_t)n_vocab;
        double lse = ifl_sampler_logsumexp(row, n_vocab);
        if (!(lse > -INFINITY) || !isfinite(lse))
            continue;
        /* this row's best per_row tokens, kept sorted in cd[nc..nc+cnt) */
        struct ifl_beam_cand *rc = cd + nc;
        int32_t cnt = 0;
        for (int32_t t = 0; t < n_vocab; t++) {
            float l = row[t];
            if (!(l > -INFINITY))
                continue;
            if (cnt == per_row && !(l > rc[cnt - 1].logit))
                continue;
            int32_t j = cnt < per_row ? cnt++ : per_row - 1;
            while (j > 0 && l > rc[j - 1].logit) {
                rc[j] = rc[j - 1];
                j--;
            }
            rc[j].logit = l;
            rc[j].token = t;
        }
        for (int32_t j = 0; j < cnt; j++) {
            rc[j].parent = r;
            rc[j].logprob = (float)((double)rc[j].logit - lse);
            rc[j].score = b->cum[r] + ((double)rc[j].logit - lse);
        }
        nc += cnt;
    }
    /* insertion sort: at most 16 * 32 candidates */
    for (int32_t i = 1; i < nc; i++) {
        struct ifl_beam_cand x = cd[i];
        int32_t j = i;
        while (j > 0 && cand_better(&x, &cd[j - 1])) {
            cd[j] = cd[j - 1];
            j--;
        }
        cd[j] = x;
    }
    int32_t n_next = 0;
    double cum_next[IFL_BEAM_MAX_WIDTH];
    size_t cl = (size_t)b->cap_len, len = (size_t)b->len;
    for (int32_t rank = 0; rank < nc && n_next < w; rank++) {
        const struct ifl_beam_cand *x = &cd[rank];
        size_t po = (size_t)x->parent * cl;
        if (is_end(end_ids, n_end, x->token)) {
            if (rank < w)
                add_hyp(b, b->tok + po, b->lp + po, b->len, x->token, x->logprob, x->score,
                        IFL_FINISH_END_ID);
            continue;
        }
        size_t no = (size_t)n_next * cl;
        memcpy(b->tok_next + no, b->tok + po, len * sizeof(*b->tok));
        memcpy(b->lp_next + no, b->lp + po, len * sizeof(*b->lp));
        b->tok_next[no + len] = x->token;
        b->lp_next[no + len] = x->logprob;
        cum_next[n_next] = x->score;
        choices[n_next] = (struct ifl_beam_choice){x->parent, x->token, x->logprob};
        n_next++;
    }
    int32_t *ti = b->tok;
    b->tok = b->tok_next;
    b->tok_next = ti;
    float *tf = b->lp;
    b->lp = b->lp_next;
    b->lp_next = tf;
    memcpy(b->cum, cum_next, (size_t)n_next * sizeof(*cum_next));
    b->n_live = n_next;
    b->len++;

    int done = 0;
    if (n_next == 0) {
        done = 1;
    } else if (b->len >= b->max_len) {
        ifl_beam_finalize(b, IFL_FINISH_LENGTH);
        done = 1;
    } else if (b->n_fin >= w) {
        if (w == 1 || b->early_stopping == 1) {
            done = 1;
        } else {
            double lp = b->length_penalty, bound;
            if (b->early_stopping == 2 && lp > 0)
                bound = b->cum[0] / pow((double)b->max_len, lp);
            else
                bound = b->cum[0] / pow((double)b->len, lp);
            done = b->fin[worst_fin(b)].score >= bound;
        }
    }
    if (done) {
        b->done = 1;
        return 1;
    }
    *n_choices = n_next;
    return 0;
}

int32_t ifl_beam_results(const struct ifl_beam *b, struct ifl_beam_hyp *out, int32_t max)
{
    int32_t idx[IFL_BEAM_MAX_WIDTH];
    int32_t n = b->n_fin;
    for (int32_t i = 0; i < n; i++) {
        int32_t j = i;
        while (j > 0 && (b->fin[i].score > b->fin[idx[j - 1]].score ||
                         (b->fin[i].score == b->fin[idx[j - 1]].score &&
                          b->fin[i].order < b->fin[idx[j - 1]].order))) {
            idx[j] = idx[j - 1];
            j--;
        }
        idx[j] = i;
    }
    if (n > max)
        n = max;
    for (int32_t i = 0; i < n; i++) {
        const struct ifl_beam_fin *f = &b->fin[idx[i]];
        size_t off = (size_t)idx[i] * (size_t)b->cap_len;
        out[i] = (struct ifl_beam_hyp){b->fin_tok + off, b->fin_lp + off, f->len,
                                       (float)f->cum,    (float)f->score, f->reason};
    }
    return n;
}
