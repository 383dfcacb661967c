/*
 * EAGLE-3 drafting (model/eagle3.h): a one-layer head that reads three of
 * the target's intermediate states and drafts the next tokens.
 *
 * The head keeps a cache of its own K and V per slot, by position (F32,
 * n_ctx positions a slot, allocated zeroed so that the pages a sequence
 * never reaches are never touched). After each step (observe), every
 * committed position p that the target computed in that step gets its
 * head row: the target's states at p (captured by the forward pass for
 * this strategy's rows), fused by fc, with the token at p + 1. So when a
 * sequence with pending token x at position P is asked for drafts, the
 * head has run up to position P - 1, whose output state predicts the
 * token after x: the first draft (the head's greedy pick, mapped through
 * d2t). Each further draft is one more head row at the next position, fed
 * the previous row's output state and the token it drafted; those rows'
 * K and V sit past the committed ones and are overwritten when the
 * positions are committed for real. Drafts are a chain of the head's
 * greedy picks; the verifying acceptor keeps them while the target picks
 * them too, so outputs are plain decoding's whatever the head says.
 *
 * Positions the head never saw (a prompt prefix taken from the prefix
 * cache, a sample forked after its prompt) leave a gap: the head's cache
 * then restarts at the first position it sees, and it attends from there
 * (fewer positions to look at, so weaker drafts; never a wrong output).
 * A preempted or finished sequence's head cache is forgotten (drop).
 *
 * Not yet: trees (tree_budget, tree_top_n; the chain is their top-1
 * path), batching the head's rows over sequences and threads.
 */
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "model/eagle3.h"
#include "runtime/engine_internal.h"

struct e3_slot {
    const struct xreq *q; /* whose head cache this is (with index), NULL: none */
    int32_t index;
    int32_t lo, n; /* positions [lo, n) are in the head's cache */
};

struct e3 {
    struct ifl_eagle3 *h;
    struct ifl_eagle3_work *w;
    int32_t n_ctx, kv_dim;
    float *kc, *vc;        /* [n_slots][n_ctx][kv_dim] the head's K and V */
    float *last;           /* [n_slots][n_embd] output state of each slot's row n - 1 */
    float *g;              /* [n_embd] a drafting row's input state */
    struct e3_slot *slots; /* [n_slots] */
    uint8_t *rows;         /* [max_rows] the engine's extract_rows */
    float *out;            /* [max_rows][3][n_embd_t] its extract_out */
};

static void e3_fini(struct ifl_executor *ex)
{
    struct engine *e = ex->eng;
    struct e3 *st = e->spec_state;
    e->n_extract = 0;
    e->extract_layers = NULL;
    e->extract_rows = NULL;
    e->extract_out = NULL;
    if (!st)
        return;
    ifl_eagle3_work_free(st->w);
    ifl_eagle3_free(st->h);
    free(st->kc);
    free(st->vc);
    free(st->last);
    free(st->g);
    free(st->slots);
    free(st->rows);
    free(st->out);
    free(st);
    e->spec_state = NULL;
}

static int e3_init(struct ifl_executor *ex, char *err)
{
    struct engine *e = ex->eng;
    struct e3 *st = calloc(1, sizeof(*st));
    if (!st)
        return ifl_err(err, IFL_ENOMEM, "eagle3: out of memory");
    e->spec_state = st;
    char msg[IFL_ERR_LEN] = "";
    int rc = ifl_eagle3_load(&st->h, ex->cfg.speculative.draft_model, ex->model, msg);
    if (rc)
        return ifl_err(err, rc, "speculative.draft_model %s: %s", ex->cfg.speculative.draft_model,
                       msg);
    const struct ifl_eagle3 *h = st->h;
    st->n_ctx = ex->n_ctx;
    st->kv_dim = ifl_eagle3_kv_dim(h);
    size_t cache = (size_t)e->n_slots * (size_t)st->n_ctx * (size_t)st->kv_dim;
    size_t feat = (size_t)IFL_EAGLE3_N_EXTRACT * (size_t)h->n_embd_t;
    st->kc = calloc(cache, sizeof(float));
    st->vc = calloc(cache, sizeof(float));
    st->last = calloc((size_t)e->n_slots * (size_t)h->n_embd, sizeof(float));
    st->g = calloc((size_t)h->n_embd, sizeof(float));
    st->slots = calloc((size_t)e->n_slots, sizeof(*st->slots));
    st->rows = calloc((size_t)e->max_rows, 1);
    st->out = calloc((size_t)e->max_rows * feat, sizeof(float));
    if (!st->kc || !st->vc || !st->last || !st->g || !st->slots || !st->rows || !st->out ||
        ifl_eagle3_work_create(&st->w, h, st->n_ctx))
        return ifl_err(err, IFL_ENOMEM,
                       "eagle3: out of memory for the head's caches of %d "
                       "sequences of %d positions",
                       e->n_slots, st->n_ctx);
    e->n_extract = IFL_EAGLE3_N_EXTRACT;
    e->extract_layers = h->extract;
    e->extract_rows = st->rows;
    e->extract_out = st->out;
    return 0;
}

static float *slot_k(struct e3 *st, int32_t slot)
{
    return st->kc + (size_t)slot * (size_t)st->n_ctx * (size_t)st->kv_dim;
}

static float *slot_v(struct e3 *st, int32_t slot)
{
    return st->vc + (size_t)slot * (size_t)st->n_ctx * (size_t)st->kv_dim;
}

/* The step's committed rows of this strategy's sequences, in row order
 * (a sequence's rows are in position order), through the head. */
static void e3_observe(struct ifl_executor *ex, int32_t rows)
{
    struct engine *e = ex->eng;
    struct e3 *st = e->spec_state;
    if (!st || e->n_extract != IFL_EAGLE3_N_EXTRACT)
        return;
    const struct ifl_eagle3 *h = st->h;
    const size_t feat = (size_t)IFL_EAGLE3_N_EXTRACT * (size_t)h->n_embd_t;
    for (int32_t r = 0; r < rows; r++) {
        if (!st->rows[r])
            continue;
        int32_t slot = e->b_seq[r], pos = e->b_pos[r];
        struct eseq *s = &e->seqs[slot];
        struct e3_slot *hs = &st->slots[slot];
        /* only a position the sequence keeps, whose next token is known */
        if (!s->q || s->finish || pos >= s->kv.n_pos || pos + 1 >= s->n_tokens)
            continue;
        if (hs->q != s->q || hs->index != s->index) {
            hs->q = s->q;
            hs->index = s->index;
            hs->lo = hs->n = 0;
        }
        if (pos < hs->n)
            continue;
        if (pos > hs->n) /* positions the head never saw: start again here */
            hs->lo = hs->n = pos;
        float *y = st->last + (size_t)slot * (size_t)h->n_embd;
        ifl_eagle3_fuse(h, st->w, st->out + (size_t)r * feat, y);
        ifl_eagle3_row(h, st->w, s->tokens[pos + 1], y, pos, slot_k(st, slot), slot_v(st, slot),
                       hs->lo, y);
        hs->n = pos + 1;
    }
}

static int32_t e3_propose(struct ifl_executor *ex, struct eseq *s, int32_t *draft, int32_t max)
{
    struct engine *e = ex->eng;
    struct e3 *st = e->spec_state;
    int32_t slot = (int32_t)(s - e->seqs);
    const struct e3_slot *hs = &st->slots[slot];
    const struct ifl_eagle3 *h = st->h;
    int32_t P = s->n_tokens - 1; /* the pending token's position */
    /* the head must have run the row before the pending token, with it */
    if (hs->q != s->q || hs->index != s->index || hs->n != P || hs->n <= hs->lo)
        return 0;
    memcpy(st->g, st->last + (size_t)slot * (size_t)h->n_embd, sizeof(float) * (size_t)h->n_embd);
    int32_t k = 0;
    for (;;) {
        ifl_eagle3_top(h, st->w, st->g, 1, &draft[k], NULL);
        if (++k == max || P + k >= st->n_ctx)
            break;
        /* the row that drafts the next: at the position after the last,
         * with the token just drafted and the state that drafted it */
        ifl_eagle3_row(h, st->w, draft[k - 1], st->g, P + k - 1, slot_k(st, slot), slot_v(st, slot),
                       hs->lo, st->g);
    }
    return k;
}

static void e3_drop(struct ifl_executor *ex, struct eseq *s)
{
    struct engine *e = ex->eng;
    struct e3 *st = e->spec_state;
    if (st)
        memset(&st->slots[s - e->seqs], 0, sizeof(struct e3_slot));
}

const struct ifl_decoding ifl_decoding_eagle3 = {
    .name = "eagle3",
    .propose = e3_propose,
    .accept = ifl_decoding_accept_drafts,
    .drop = e3_drop,
    .type = IFL_SPEC_EAGLE3,
    .engine_init = e3_init,
    .engine_fini = e3_fini,
    .observe = e3_observe,
};
