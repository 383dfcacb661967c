/*
 * The verifying acceptor that strategies with drafts share
 * (ifl_decoding_accept_drafts, decoding.h): each row's token is picked as
 * plain decoding would pick it (or, with speculative.accept = rejection,
 * by speculative sampling against the draft), and drafts are kept while
 * they equal the picks; and the bound on a sequence's drafts
 * (ifl_decoding_draft_limit), which a proposer that drafts ahead needs.
 * Apart from decoding.c so that the proposers, which decoding.c's table
 * names, call down to them and never back.
 */
#include <string.h>

#include "runtime/engine_internal.h"

/* A tree's rows (decoding.h, propose_tree): rows[0] the pending token's,
 * rows[1 + i] draft i's. From the pending token down: the row's token
 * picked as plain decoding picks it, and the child that drafted it (if
 * any) is the next node. Always exact, with speculative.accept =
 * rejection too (speculative sampling over a tree's siblings is not done:
 * the outputs are plain decoding's). */
static void accept_tree(struct ifl_executor *ex, struct eseq *s, const int32_t *rows, int32_t n)
{
    struct engine *e = ex->eng;
    int32_t k = n - 1, dt[IFL_SPEC_MAX_DRAFT];
    /* the drafts, read before applying tokens overwrites them */
    memcpy(dt, s->tokens + s->n_tokens, sizeof(int32_t) * (size_t)k);
    s->spec_kept = 0;
    for (int32_t cur = -1, r = rows[0]; s->q && !s->finish;) {
        if (cur >= 0) /* the pending row's outputs were captured with the step's */
            ifl_choose_capture_gen(ex, s, r);
        float lp = 0;
        int32_t tok = ifl_choose_token(ex, s, e->logits + (size_t)r * ex->n_vocab, &lp);
        if (tok < 0)
            return; /* s finished */
        int32_t next = -1;
        for (int32_t i = cur + 1; i < k && next < 0; i++) /* children follow their parent */
            if (s->spec_parent[i] == cur && dt[i] == tok)
                next = i;
        if (next >= 0) {
            s->q->perf.accepted_draft_tokens++;
            e->spec_accepted++;
            s->spec_path[s->spec_kept++] = next;
        }
        ifl_choose_apply(ex, s, tok, lp);
        if (next < 0)
            return; /* the bonus token */
        cur = next;
        r = rows[1 + next];
    }
}

void ifl_decoding_accept_drafts(struct ifl_executor *ex, struct eseq *s, const int32_t *rows,
                                int32_t n)
{
    struct engine *e = ex->eng;
    if (n == 1 && ifl_choose_forks_now(s)) {
        /* the first token of a request of several samples (no drafts are
         * asked for then): the other samples fork from this row first, as
         * in plain decoding, or they would never start */
        float *row = e->logits + (size_t)rows[0] * ex->n_vocab;
        ifl_choose_fork_samples(ex, s, row, e->scratch);
        if (s->q)
            ifl_choose_sample(ex, s, row);
        return;
    }
    if (s->spec_tree && n > 1) {
        accept_tree(ex, s, rows, n);
        return;
    }
    /* speculative sampling for sampled, unguided requests; greedy ones
     * (and guided ones, whose rows the grammar masks) stay exact */
    int rejection = ex->cfg.speculative.accept == IFL_SPEC_ACCEPT_REJECTION &&
                    s->scfg.temperature > 0 && !s->q->xg;
    for (int32_t i = 0; i < n && s->q && !s->finish; i++) {
        /* the draft row i would confirm, read before applying overwrites it */
        int32_t draft = i < n - 1 ? s->tokens[s->n_tokens] : -1;
        float lp = 0;
        int32_t tok = ifl_choose_token_spec(ex, s, e->logits + (size_t)rows[i] * ex->n_vocab,
                                            rejection ? draft : -1, &lp);
        if (tok < 0)
            return;         /* s finished */
        if (tok == draft) { /* counted before apply, which may end the request */
            s->q->perf.accepted_draft_tokens++;
            e->spec_accepted++;
        }
        ifl_choose_apply(ex, s, tok, lp);
        if (tok != draft)
            return; /* the bonus token: the rows after it saw another history */
    }
}

int32_t ifl_decoding_draft_limit(const struct ifl_executor *ex, const struct eseq *s)
{
    const struct xreq *q = s->q;
    const struct ifl_speculative_config *c = &ex->cfg.speculative;
    const struct ifl_request_speculative *rq = &q->r.speculative;
    if (!q->dec || (!q->dec->propose && !q->dec->propose_tree) || q->beam || q->post_index != -1 ||
        (q->ctx_logits && q->ctx_captured < q->r.n_input) || ifl_choose_forks_now(s))
        return 0;
    if (c->adaptive && s->spec_pause > 0) /* (q->dec proposes, so is not plain decoding) */
        return 0;
    /* room in the context and in max_tokens for k drafts and the bonus */
    int32_t max = ex->n_ctx - s->n_tokens;
    if (max > q->r.max_tokens - s->n_gen - 1)
        max = q->r.max_tokens - s->n_gen - 1;
    int32_t n_max = rq->n_max >= 0 ? rq->n_max : c->n_max;
    int32_t n_min = rq->n_min >= 0 ? rq->n_min : c->n_min;
    if (max > n_max)
        max = n_max;
    if (c->adaptive && max > s->spec_cap)
        max = s->spec_cap;
    return max < 1 || max < n_min ? 0 : max;
}
