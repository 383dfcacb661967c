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
/* Rows a step may reach with drafts under the adaptive policy: about where
 * a step stops being bound by reading the weights. On the 2-core Zen 5 of
 * bench/README.md ("Verify cost", tinyllama-1.1b Q8_0 at 256 positions) a
 * step of 8 rows costs 1.28 times one of 1 row, 16 rows 2.0 times, and each
 * row after that its full share (4.3 ms against 39 for the one-row step):
 * past 16 rows a draft pays only if it is nearly sure to be kept, and at 16
 * decoding sequences one draft each costs 1.7 times for at most twice the
 * tokens. */
#define SPEC_STEP_ROWS 16

/* ---- the registry ---- */

/* Strategies registered at run time (tests), latest last; an engine's
 * snapshot puts them first, then client drafts, then the strategy of its
 * config's speculative.type (from this table), then plain decoding. */
static const struct ifl_decoding *const builtin[] = {&ifl_decoding_ngram, &ifl_decoding_draft,
                                                     &ifl_decoding_eagle3};
static const char *const type_names[] = {"none", "draft", "ngram", "eagle3"};
static pthread_mutex_t reg_mu = PTHREAD_MUTEX_INITIALIZER;
static const struct ifl_decoding *registered[MAX_DECODINGS];
static int32_t n_registered;

const char *ifl_decoding_type_name(int32_t type)
{
    return type >= 0 && type < (int32_t)(sizeof type_names / sizeof type_names[0])
               ? type_names[type]
               : NULL;
}

static const struct ifl_decoding *builtin_for(int32_t type)
{
    for (size_t i = 0; i < sizeof builtin / sizeof builtin[0]; i++)
        if (builtin[i]->type == type)
            return builtin[i];
    return NULL;
}

int ifl_decoding_type_built(int32_t type)
{
    return type == IFL_SPEC_NONE || builtin_for(type) != NULL;
}

int ifl_decoding_register(const struct ifl_decoding *d)
{
    pthread_mutex_lock(&reg_mu);
    /* room for client drafts, the configured strategy and plain decoding */
    int rc = n_registered + 3 >= MAX_DECODINGS ? IFL_EFULL : 0;
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

int ifl_decoding_engine_init(struct ifl_executor *ex, char *err)
{
    struct engine *e = ex->eng;
    pthread_mutex_lock(&reg_mu);
    e->n_decs = 0;
    for (int32_t i = n_registered - 1; i >= 0; i--)
        e->decs[e->n_decs++] = registered[i];
    pthread_mutex_unlock(&reg_mu);
    e->decs[e->n_decs++] = &ifl_decoding_external;
    e->spec = builtin_for(ex->cfg.speculative.type);
    if (ex->cfg.speculative.type == IFL_SPEC_NONE)
        e->spec = NULL;
    if (e->spec)
        e->decs[e->n_decs++] = e->spec;
    e->decs[e->n_decs++] = &ifl_decoding_plain;
    if (e->spec && e->spec->engine_init)
        return e->spec->engine_init(ex, err);
    return 0;
}

void ifl_decoding_engine_fini(struct ifl_executor *ex)
{
    struct engine *e = ex->eng;
    if (e && e->spec && e->spec->engine_fini)
        e->spec->engine_fini(ex);
}

int64_t ifl_decoding_idle(struct ifl_executor *ex)
{
    const struct engine *e = ex->eng;
    if (e && e->spec && e->spec->idle && e->spec_state)
        return e->spec->idle(ex);
    return INT64_MAX;
}

void ifl_decoding_kv_memory(struct ifl_executor *ex, int64_t *reserved, int64_t *resident)
{
    const struct engine *e = ex->eng;
    *reserved = 0;
    *resident = 0;
    if (e && e->spec && e->spec->kv_memory && e->spec_state)
        e->spec->kv_memory(ex, reserved, resident);
}

const struct ifl_decoding *ifl_decoding_for(const struct ifl_executor *ex, const struct xreq *q)
{
    const struct engine *e = ex->eng;
    /* opted out: plain, unless a test's strategy wants it anyway */
    int off = q->r.speculative.disable || q->r.speculative.n_max == 0;
    for (int32_t i = 0; i < e->n_decs; i++) {
        const struct ifl_decoding *d = e->decs[i];
        if (off && (d == &ifl_decoding_external || d == e->spec))
            continue;
        if (!d->wants || d->wants(ex, q))
            return d;
    }
    return &ifl_decoding_plain;
}

void ifl_decoding_prepare(struct ifl_executor *ex)
{
    struct engine *e = ex->eng;
    /* Draft rows are nearly free while a step is bound by reading the
     * weights, and cost their full share once the step's rows make it
     * compute-bound: adaptively, the drafts of a step are held to what
     * leaves the step at SPEC_STEP_ROWS rows (bench/README.md,
     * "Verify cost"). */
    e->spec_rows = 1 << 30;
    e->spec_seqs = 0;
    if (ex->cfg.speculative.adaptive) {
        /* the rows the step will carry without drafts: a decode row per
         * decoding sequence and the prompt rows still to run (a prefill
         * chunk makes the step compute-bound: no drafts beside it; a
         * preempted sequence waiting for blocks does not count, so that
         * it does not hold everyone's drafts while it waits) */
        int32_t decoding = 0, prefill = 0;
        for (int32_t i = 0; i < e->n_slots; i++) {
            const struct eseq *s = &e->seqs[i];
            if (!s->q || !s->started || s->finish || s->paused)
                continue;
            int32_t pending = s->n_tokens - s->kv.n_pos;
            if (pending == 1)
                decoding++;
            else if (pending > 1 && prefill < e->max_rows)
                prefill += pending;
        }
        e->spec_rows = SPEC_STEP_ROWS - decoding - prefill;
        e->spec_seqs = decoding;
    }
    for (int32_t i = 0; i < e->n_decs; i++)
        if (e->decs[i]->prepare)
            e->decs[i]->prepare(ex);
}

void ifl_decoding_observe(struct ifl_executor *ex, int32_t rows)
{
    struct engine *e = ex->eng;
    for (int32_t i = 0; i < e->n_decs; i++)
        if (e->decs[i]->observe)
            e->decs[i]->observe(ex, rows);
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

int32_t ifl_decoding_propose(struct ifl_executor *ex, struct eseq *s, int32_t max)
{
    struct engine *e = ex->eng;
    const struct xreq *q = s->q;
    const struct ifl_speculative_config *c = &ex->cfg.speculative;
    s->n_draft = 0;
    /* this sequence's turn: the ones after it share what it leaves */
    int32_t left = e->spec_seqs > 1 ? e->spec_seqs : 1;
    e->spec_seqs = left - 1;
    if (c->adaptive && s->spec_pause > 0 && q->dec != &ifl_decoding_plain) {
        s->spec_pause--;
        return 0;
    }
    int32_t lim = ifl_decoding_draft_limit(ex, s);
    if (max > lim)
        max = lim;
    if (c->adaptive) {
        /* an even share of the rows left among the decoding sequences not
         * asked yet: more drafts for one sequence are worth less than the
         * first ones of another (the chance that draft i is kept falls
         * with i); what a sequence leaves goes to those after it */
        int32_t share = e->spec_rows > 0 ? (e->spec_rows + left - 1) / left : 0;
        if (max > share)
            max = share;
    }
    int32_t n_min = q->r.speculative.n_min >= 0 ? q->r.speculative.n_min : c->n_min;
    s->spec_tree = 0;
    if (max < 1 || max < n_min)
        return 0;
    if (max > IFL_SPEC_MAX_DRAFT)
        max = IFL_SPEC_MAX_DRAFT;
    int32_t k, tree = 0;
    if (q->dec->propose_tree) {
        k = q->dec->propose_tree(ex, s, s->tokens + s->n_tokens, s->spec_parent, max);
        k = k < 0 ? 0 : k > max ? max : k;
        /* a tree ends at its first node whose parent is not before it */
        for (int32_t i = 0; i < k; i++) {
            int32_t p = s->spec_parent[i];
            if (p < -1 || p >= i) {
                k = i;
                break;
            }
            s->spec_depth[i] = p < 0 ? 1 : s->spec_depth[p] + 1;
            tree |= p != i - 1;
        }
    } else {
        k = q->dec->propose(ex, s, s->tokens + s->n_tokens, max);
        k = k < 0 ? 0 : k > max ? max : k;
    }
    if (k < n_min || k < 1)
        return 0;
    s->spec_tree = tree;
    s->spec_base = s->n_tokens - 1;
    s->spec_kept = 0;
    s->spec_depth_max = k;
    if (tree)
        for (int32_t i = 0, d = 0; i < k; i++)
            s->spec_depth_max = d = s->spec_depth[i] > d ? s->spec_depth[i] : d;
    s->n_draft = k;
    e->spec_rows -= k;
    return k;
}

/* The adaptive draft length after a step that ran k drafts and kept
 * `kept`:
 *  - all kept: doubled (up to the bound);
 *  - some kept: unchanged up to IFL_SPEC_FREE_DRAFTS, above that cut to
 *    IFL_SPEC_FREE_DRAFTS, or to what was kept plus one if more. Drafts up to that
 *    many cost little, so while some are kept they pay for themselves
 *    (at a quarter of the tokens wrong, 7 drafts make 2.8 times the
 *    tokens of one-token steps against 2.4 for 3), where past it each row
 *    costs its full share;
 *  - none kept: unchanged if the step before kept some and k was at most
 *    IFL_SPEC_FREE_DRAFTS, else cut to half of the k that ran (not of the
 *    cap, which n_max or the step's rows may have held far above k).
 * Three steps in a row that keep none pause drafting for spec_backoff
 * steps, which doubles at each pause (up to 256) and resets once a draft
 * is kept again. */
static void adapt(struct eseq *s, int32_t k, int32_t kept)
{
    if (kept == k) {
        s->spec_cap = s->spec_cap * 2 > IFL_SPEC_MAX_DRAFT ? IFL_SPEC_MAX_DRAFT : s->spec_cap * 2;
    } else if (kept > 0) {
        int32_t c = s->spec_cap < IFL_SPEC_FREE_DRAFTS ? s->spec_cap : IFL_SPEC_FREE_DRAFTS;
        s->spec_cap = kept + 1 > c ? kept + 1 : c;
    } else if (s->spec_miss > 0 || k > IFL_SPEC_FREE_DRAFTS) {
        /* (a single miss among hits keeps cheap drafts: with a quarter of
         * the tokens wrong, the first draft fails one step in four) */
        s->spec_cap = k / 2 > 1 ? k / 2 : 1;
    }
    if (kept > 0) {
        s->spec_miss = 0;
        s->spec_backoff = 8;
    } else if (++s->spec_miss >= 3) {
        s->spec_pause = s->spec_backoff;
        s->spec_backoff = s->spec_backoff * 2 > 256 ? 256 : s->spec_backoff * 2;
        s->spec_miss = 0;
    }
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
    if (s->spec_tree) {
        /* the kept path's K/V, from its nodes' places to its positions (a
         * node's place is at or after its position, and the path's places
         * grow, so no move overwrites one still to come) */
        int32_t bs = ifl_kvc_block_size(e->kvc);
        for (int32_t d = 1; d <= s->spec_kept; d++) {
            int32_t from = s->spec_base + 1 + s->spec_path[d - 1], to = s->spec_base + d;
            if (from != to)
                ifl_kv_store_copy_pos(e->store, s->kv.blocks[to / bs], to % bs,
                                      s->kv.blocks[from / bs], from % bs);
        }
    }
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
    int32_t k = s->n_draft;
    int64_t acc0 = e->spec_accepted;
    if (k) {
        s->q->perf.draft_tokens += k;
        e->spec_drafted += k;
    }
    d->accept(ex, s, e->dec_rows, n);
    if (k) {
        /* a tree's reach is its depth: that is what a step could keep */
        adapt(s, s->spec_depth_max, (int32_t)(e->spec_accepted - acc0));
        settle(ex, s);
    }
}
