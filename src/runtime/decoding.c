/*
 * The decoding-strategy seam (decoding.h): the registry requests choose
 * their strategy from, plain decoding (the first entry), the verifying
 * acceptor that strategies with drafts share, and the engine's side: the
 * drafts asked for while the batch is built, the rows handed to accept()
 * and the KV settled after it.
 */
#include <pthread.h>
#include <string.h>

#include "core/err.h"
#include "runtime/engine_internal.h"

#define MAX_DECODINGS 8

/* ---- the registry ---- */

/* Strategies registered at run time (tests), latest last; the built-in
 * ones follow them in an engine's snapshot. A strategy of issue 37 is
 * one line here. */
static const struct ifl_decoding *const builtin[] = {&ifl_decoding_plain};
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static const struct ifl_decoding *registered[MAX_DECODINGS];
static int32_t n_registered;

int ifl_decoding_register(const struct ifl_decoding *d)
{
    int32_t n_builtin = (int32_t)(sizeof builtin / sizeof builtin[0]);
    pthread_mutex_lock(&reg_mu);
    int rc = n_registered + n_builtin >= MAX_DECODINGS ? IFL_EFULL : 0;
    if (!rc)
        registered[n_registered++] = d;
    pthread_mutex_unlock(&reg_mu);
    return rc;
}

void ifl_decoding_unregister(const struct ifl_decoding *d)
{
    pthread_mutex_lock(&reg_mu);
    for (int32_t i = 0; i < n_registered; i++)
        if (registered[i] == d) {
            memmove(&registered[i], &registered[i + 1],
                    sizeof(registered[0]) * (size_t)(n_registered - i - 1));
            n_registered--;
            break;
        }
    pthread_mutex_unlock(&reg_mu);
}

void ifl_decoding_engine_init(struct ifl_executor *ex)
{
    struct engine *e = ex->eng;
    int32_t n_builtin = (int32_t)(sizeof builtin / sizeof builtin[0]);
    pthread_mutex_lock(&reg_mu);
    e->n_decs = 0;
    for (int32_t i = n_registered - 1; i >= 0; i--)
        e->decs[e->n_decs++] = registered[i];
    for (int32_t i = n_builtin - 1; i >= 0; i--)
        e->decs[e->n_decs++] = builtin[i];
    pthread_mutex_unlock(&reg_mu);
}

const struct ifl_decoding *ifl_decoding_for(const struct ifl_executor *ex, const struct xreq *q)
{
    const struct engine *e = ex->eng;
    for (int32_t i = 0; i < e->n_decs; i++)
        if (!e->decs[i]->wants || e->decs[i]->wants(ex, q))
            return e->decs[i];
    return &ifl_decoding_plain;
}

/* ---- plain decoding ---- */

/* One row: its token, picked ahead on every thread (ROW_PICKED) or here;
 * the primary of several samples first forks them from its row. */
static void plain_accept(struct ifl_executor *ex, struct eseq *s, const int32_t *rows, int32_t n)
{
    struct engine *e = ex->eng;
    int32_t r = rows[0];
    (void)n; /* plain decoding proposes nothing: one row */
    if (e->row_flag[r] & ROW_PICKED) {
        if (e->pick_tok[r] < 0)
            ifl_choose_end_unpickable(ex, s);
        else
            ifl_choose_apply(ex, s, e->pick_tok[r], e->pick_lp[r]);
        return;
    }
    float *row = e->logits + (size_t)r * ex->n_vocab;
    if (ifl_choose_forks_now(s))
        ifl_choose_fork_samples(ex, s, row, e->scratch);
    if (s->q)
        ifl_choose_sample(ex, s, row);
}

const struct ifl_decoding ifl_decoding_plain = {
    .name = "plain",
    .accept = plain_accept,
    .parallel_pick = 1,
};

/* ---- drafts ---- */

void ifl_decoding_accept_drafts(struct ifl_executor *ex, struct eseq *s, const int32_t *rows,
                                int32_t n)
{
    struct engine *e = ex->eng;
    for (int32_t i = 0; i < n && s->q && !s->finish; i++) {
        /* the draft row i would confirm, read before applying overwrites it */
        int32_t draft = i < n - 1 ? s->tokens[s->n_tokens] : -1;
        float lp = 0;
        int32_t tok = ifl_choose_token(ex, s, e->logits + (size_t)rows[i] * ex->n_vocab, &lp);
        if (tok < 0)
            return; /* s finished */
        ifl_choose_apply(ex, s, tok, lp);
        if (tok != draft)
            return; /* the bonus token: the rows after it saw another history */
    }
}

int32_t ifl_decoding_propose(struct ifl_executor *ex, struct eseq *s, int32_t max)
{
    const struct xreq *q = s->q;
    s->n_draft = 0;
    /* room in the context and in max_tokens for k drafts and the bonus */
    int32_t room = ex->n_ctx - s->n_tokens;
    if (room > q->r.max_tokens - s->n_gen - 1)
        room = q->r.max_tokens - s->n_gen - 1;
    if (max > room)
        max = room;
    if (max < 1 || !q->dec || !q->dec->propose || q->beam || q->post_index != -1 ||
        (q->ctx_logits && q->ctx_captured < q->r.n_input) || ifl_choose_forks_now(s))
        return 0;
    int32_t k = q->dec->propose(ex, s, s->tokens + s->n_tokens, max);
    s->n_draft = k < 0 ? 0 : k > max ? max : k;
    return s->n_draft;
}

/* The KV after accept(): the kept drafts' positions recorded (the
 * pending token was recorded with the step, and the bonus token is the
 * new pending one), the rest given back. */
static void settle(struct ifl_executor *ex, struct eseq *s)
{
    struct engine *e = ex->eng;
    s->n_draft = 0;
    if (!s->q || s->finish)
        return; /* finished: its KV is already gone */
    int32_t end = s->n_tokens - 1;
    if (end > s->kv.n_pos)
        ifl_kvc_commit(e->kvc, &s->kv, s->tokens, end);
    int32_t avail0 = ifl_kvc_available(e->kvc);
    ifl_kvc_truncate(e->kvc, &s->kv, end);
    int32_t freed = ifl_kvc_available(e->kvc) - avail0;
    if (freed > 0 && ex->cfg.sched_policy == IFL_SCHED_GUARANTEED_NO_EVICT) {
        s->q->kv_reserved += freed;
        e->reserved += freed;
    }
}

void ifl_decoding_accept(struct ifl_executor *ex, struct eseq *s, int32_t r, int32_t nlog)
{
    struct engine *e = ex->eng;
    int32_t n = 1;
    e->dec_rows[0] = r;
    if (s->n_draft) {
        /* its other rows, in position order (the batched logits
         * processor's gathering may have moved rows) */
        int32_t slot = e->row_slot[r];
        for (int32_t k = r + 1; k < nlog; k++) {
            if (e->row_slot[k] != slot || !(e->row_flag[k] & ROW_SAMPLE))
                continue;
            e->row_flag[k] &= (uint8_t)~ROW_SAMPLE;
            int32_t j = n++;
            while (j > 0 && e->row_pos[e->dec_rows[j - 1]] > e->row_pos[k]) {
                e->dec_rows[j] = e->dec_rows[j - 1];
                j--;
            }
            e->dec_rows[j] = k;
        }
    }
    const struct ifl_decoding *d = s->q->dec ? s->q->dec : &ifl_decoding_plain;
    d->accept(ex, s, e->dec_rows, n);
    if (s->n_draft)
        settle(ex, s);
}
