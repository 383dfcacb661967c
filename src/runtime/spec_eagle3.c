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
 * token after x (the head's draft vocabulary, mapped through d2t). The
 * drafts grow as a tree (e3_propose): the head's tree_top_n likeliest
 * tokens there are candidates, the likeliest path becomes a node, and
 * each node's own head row (fed its parent's output state and its token)
 * adds its top tokens as candidates, until tree_budget nodes (EAGLE-2's
 * dynamic tree; tree_top_n 1 gives the chain of greedy picks). Those
 * rows' K and V sit past the committed ones, one index per node, and are
 * overwritten when positions are committed for real. The target verifies
 * the tree in one pass (decoding.h, propose_tree) and the verifying
 * acceptor keeps the path it would have decoded itself, so outputs are
 * plain decoding's whatever the head says.
 *
 * Positions the head never saw (a prompt prefix taken from the prefix
 * cache, a sample forked after its prompt, the steps of an adaptive
 * pause in drafting but its last two: a head row costs about an eighth
 * of a small-110m step on the engine thread alone, which at no acceptance
 * made decoding some 15 % slower) leave a gap: the head's cache
 * then restarts at the first position it sees, and it attends from there
 * (fewer positions to look at, so weaker drafts; never a wrong output).
 * A preempted or finished sequence's head cache is forgotten (drop).
 *
 * Not yet: batching the head's rows over sequences and threads (the head
 * runs on the engine thread, one row at a time).
 */
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/sysmem.h"
#include "model/eagle3.h"
#include "runtime/engine_internal.h"

struct e3_slot {
    const struct xreq *q; /* whose head cache this is (with index), NULL: none */
    int32_t index;
    int32_t lo, n; /* positions [lo, n) are in the head's cache */
};

/* Candidates of a draft tree: at most tree_top_n children of each node
 * and of the pending token. */
#define MAX_CAND (8 * (IFL_SPEC_MAX_DRAFT + 1))

struct e3 {
    struct ifl_eagle3 *h;
    struct ifl_eagle3_work *w;
    int32_t n_ctx, kv_dim;
    float *kc, *vc; /* [n_slots][n_ctx][kv_dim] the head's K and V */
    float *last;    /* [n_slots][n_embd] output state of each slot's row n - 1 */
    float *ny;      /* [IFL_SPEC_MAX_DRAFT][n_embd] each draft node's output state */
    int32_t c_tok[MAX_CAND], c_par[MAX_CAND]; /* candidates: token, parent node */
    float c_lp[MAX_CAND];                     /* and the head's log-prob of their path */
    uint8_t c_used[MAX_CAND];
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
    free(st->ny);
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
    st->ny = calloc((size_t)IFL_SPEC_MAX_DRAFT * (size_t)h->n_embd, sizeof(float));
    st->slots = calloc((size_t)e->n_slots, sizeof(*st->slots));
    st->rows = calloc((size_t)e->max_rows, 1);
    st->out = calloc((size_t)e->max_rows * feat, sizeof(float));
    if (!st->kc || !st->vc || !st->last || !st->ny || !st->slots || !st->rows || !st->out ||
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
        if (s->spec_tree && e->b_kvpos[r] > s->spec_base) {
            /* a tree draft's row: kept only on the path the target took */
            int32_t node = e->b_kvpos[r] - s->spec_base - 1, d = pos - s->spec_base;
            if (d > s->spec_kept || s->spec_path[d - 1] != node)
                continue;
        }
        /* a sequence pausing its drafts (the adaptive policy, after steps
         * that kept none) needs no head until the pause ends: its last
         * steps before it ends are run, the earlier ones left as a gap */
        if (ex->cfg.speculative.adaptive && s->spec_pause > 2)
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
                       hs->lo, pos, NULL, 0, pos, y);
        hs->n = pos + 1;
    }
}

/* The best candidate not taken yet (the highest path log-prob, the
 * earliest of equals), or -1. */
static int32_t best_cand(const struct e3 *st, int32_t n)
{
    int32_t b = -1;
    for (int32_t c = 0; c < n; c++)
        if (!st->c_used[c] && (b < 0 || st->c_lp[c] > st->c_lp[b]))
            b = c;
    return b;
}

/* Grows a draft tree best first (EAGLE-2's dynamic tree): the candidates
 * are the head's top tree_top_n tokens after the pending token and after
 * each node taken; the candidate whose path the head finds likeliest
 * becomes the next node, until tree_budget (or max) nodes. A node's head
 * row (needed for its children) sits at cache index P + node, at the
 * RoPE position before its depth's, and attends to the head's cache of
 * the sequence and its ancestors' rows. tree_top_n 1 gives the chain of
 * the head's greedy picks. */
static int32_t e3_propose(struct ifl_executor *ex, struct eseq *s, int32_t *draft, int32_t *parent,
                          int32_t max)
{
    struct engine *e = ex->eng;
    struct e3 *st = e->spec_state;
    int32_t slot = (int32_t)(s - e->seqs);
    const struct e3_slot *hs = &st->slots[slot];
    const struct ifl_eagle3 *h = st->h;
    const struct ifl_speculative_config *c = &ex->cfg.speculative;
    int32_t P = s->n_tokens - 1; /* the pending token's position */
    /* the head must have run the row before the pending token, with it */
    if (hs->q != s->q || hs->index != s->index || hs->n != P || hs->n <= hs->lo)
        return 0;
    int32_t budget = max < c->tree_budget ? max : c->tree_budget;
    if (budget > IFL_SPEC_MAX_DRAFT)
        budget = IFL_SPEC_MAX_DRAFT;
    int32_t top = c->tree_top_n, n_cand = 0, k = 0;
    const size_t E = (size_t)h->n_embd;
    float lp[8];
    int32_t tok[8], anc[IFL_SPEC_MAX_DRAFT];
    int32_t m = ifl_eagle3_top(h, st->w, st->last + (size_t)slot * E, top, tok, lp);
    for (int32_t i = 0; i < m; i++, n_cand++) {
        st->c_tok[n_cand] = tok[i], st->c_par[n_cand] = -1, st->c_lp[n_cand] = lp[i];
        st->c_used[n_cand] = 0;
    }
    while (k < budget) {
        int32_t b = best_cand(st, n_cand);
        if (b < 0)
            break;
        st->c_used[b] = 1;
        draft[k] = st->c_tok[b];
        parent[k] = st->c_par[b];
        if (k + 1 < budget && n_cand + top <= MAX_CAND) {
            /* its head row, and its children */
            int32_t d = 0;
            for (int32_t a = parent[k]; a >= 0; a = parent[a])
                d++;
            for (int32_t a = parent[k], i = d - 1; a >= 0; a = parent[a], i--)
                anc[i] = P + a;
            const float *g =
                parent[k] < 0 ? st->last + (size_t)slot * E : st->ny + (size_t)parent[k] * E;
            float *y = st->ny + (size_t)k * E;
            ifl_eagle3_row(h, st->w, draft[k], g, P + d, slot_k(st, slot), slot_v(st, slot), hs->lo,
                           P, anc, d, P + k, y);
            m = ifl_eagle3_top(h, st->w, y, top, tok, lp);
            for (int32_t i = 0; i < m; i++, n_cand++) {
                st->c_tok[n_cand] = tok[i], st->c_par[n_cand] = k;
                st->c_lp[n_cand] = st->c_lp[b] + lp[i];
                st->c_used[n_cand] = 0;
            }
        }
        k++;
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

/* The head's K and V caches: calloc'ed, so only the pages sequences
 * wrote are in memory. */
static void e3_kv_memory(struct ifl_executor *ex, int64_t *reserved, int64_t *resident)
{
    const struct e3 *st = ex->eng->spec_state;
    const size_t bytes =
        (size_t)ex->eng->n_slots * (size_t)st->n_ctx * (size_t)st->kv_dim * sizeof(float);
    if (!st->kc || !st->vc)
        return;
    *reserved = 2 * (int64_t)bytes;
    int64_t k = ifl_sysmem_resident(st->kc, bytes), v = ifl_sysmem_resident(st->vc, bytes);
    *resident = k < 0 || v < 0 ? -1 : k + v;
}

const struct ifl_decoding ifl_decoding_eagle3 = {
    .name = "eagle3",
    .propose_tree = e3_propose,
    .accept = ifl_decoding_accept_drafts,
    .drop = e3_drop,
    .type = IFL_SPEC_EAGLE3,
    .engine_init = e3_init,
    .engine_fini = e3_fini,
    .observe = e3_observe,
    .kv_memory = e3_kv_memory,
};
