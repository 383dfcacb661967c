/*
 * Draft-model speculation (speculative.type = IFL_SPEC_DRAFT): a second,
 * smaller GGUF model with the target's vocabulary guesses the next tokens,
 * and the target verifies them all in one step (decoding.h).
 * After llama.cpp's --model-draft and TensorRT-LLM's two-model
 * speculative decoding; the drafts are checked by the exact acceptor, so
 * outputs are plain decoding's whatever the draft model says.
 *
 * The draft model has its own paged KV store and block manager (one block
 * table per executor slot, room for max_batch_size full contexts, memory
 * touched only when written) and its own forward pass, which runs on the
 * target's thread pool: the two forwards take turns on the engine thread,
 * so no second set of workers spins beside the first.
 *
 * Once per step (prepare), for all the sequences of this strategy at once,
 * one batched draft forward per depth:
 *   depth 0: each sequence's draft KV catches up with the tokens it has
 *            not seen (after a prefill, the whole prompt, in chunks that
 *            fit max_num_tokens rows; sequences still in their target
 *            prefill catch up as far as the target has computed, so the
 *            draft's prefill overlaps the target's); the last row of a
 *            decoding sequence (its pending token) gives the first draft;
 *   depth j: the draft of depth j - 1 is run to give the next one.
 * A draft is what the request's own sampler picks from the draft model's
 * logits: the argmax when greedy (llama.cpp drafts so), and when sampling
 * the draw of the seeded generator the target's pick of that token will
 * use, after the same penalties and filters; the exact acceptor keeps a
 * draft where it equals the target's pick, so a draft model close to the
 * target is kept as often when sampling as when greedy (with
 * speculative.accept = rejection, the argmax: see pick()). Drafting stops at
 * a pick whose probability (softmax after the request's processing) is
 * below p_min (that pick is not kept), after an end token, or at the
 * number of drafts the engine will ask for (ifl_decoding_draft_limit).
 * propose() copies them.
 *
 * Cost (with speculative.adaptive): a draft pass is not free, as n-gram
 * lookup is; a draft model of half the target's size drafting 4 tokens
 * costs two target steps. Each sequence keeps a decayed count of drafts
 * kept and of misses (a rejected draft or a pick below p_min), hence a
 * per-draft acceptance a; the engine's timings give r, a draft pass's time
 * over a target step's. k drafts then yield (1 - a^(k+1)) / (1 - a) tokens
 * for 1 + k r steps' time, and the sequence drafts the k that does best,
 * or nothing when none beats plain decoding by 2 %. A pause would not
 * save much: the draft cache must catch up with every token it missed
 * before it drafts again, and catching up costs about half a draft pass a
 * token on this hardware. So a sequence whose drafting does not pay stops
 * drafting for good: its draft KV is freed and the draft model does not
 * run for it again. A new sequence starts from the counts of all
 * sequences so far; when they say drafting does not pay, it does not
 * draft either, except one new sequence in `probe_every` (8, doubling up
 * to 256 while the probes fail), which starts hopeful (a = 0.8).
 *
 * Invariant: a slot's draft KV holds positions [0, kv.n_pos); the first
 * `real` of them are the sequence's tokens, the rest (only between
 * prepare and accept) drafts[] from position `at` on. After accept() the
 * positions of drafts the target did not keep are truncated, so between
 * steps the draft cache holds real tokens only. drop() (finish or
 * preemption) gives back every block of the slot.
 */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/timeutil.h"
#include "runtime/engine_internal.h"
#include "runtime/spec_draft.h"

/* Per executor slot. */
struct dslot {
    struct ifl_kvc_seq kv; /* the draft model's KV for the slot's sequence */
    ifl_id owner;          /* the request (and sample) the KV is of; 0: none */
    int32_t owner_index;
    int32_t real;     /* leading positions of kv known to hold the sequence's tokens */
    int32_t at;       /* drafts[i] sits at position at + i */
    int32_t n_drafts; /* drafts made this step */
    int32_t kmax;     /* this step: most drafts to make (0: catch-up only) */
    int32_t drafts[IFL_SPEC_MAX_DRAFT];
    float probs[IFL_SPEC_MAX_DRAFT]; /* the draft model's probability of each,
                                        after the request's processing, at
                                        temperature 1 (see pick()) */
    /* adaptive: decayed counts of drafts kept and of misses */
    float kept, missed;
    int off;   /* drafting does not pay: the draft model no longer runs for it */
    int probe; /* it started hopeful against the counts of all sequences */
};

struct dstate {
    struct ifl_model *m;
    struct ifl_kv_store *store;
    struct ifl_kvc *kvc;
    struct ifl_fwd *fwd;
    struct dslot *slots;    /* [n_slots] */
    const int32_t **tables; /* [n_slots] each slot's kv.blocks */
    int32_t *n_blocks;      /* [n_slots] */
    int32_t n_slots;
    int32_t max_rows;                 /* rows of one draft pass (max_num_tokens) */
    int32_t *b_tok, *b_pos, *b_seq;   /* [max_rows] */
    uint8_t *b_want;                  /* [max_rows] */
    int32_t *row_slot;                /* [logit_cap] logits row -> slot */
    int32_t logit_cap;                /* min(n_slots, max_rows) */
    float *logits;                    /* [logit_cap][n_vocab] */
    struct ifl_sampler_state st;      /* a sequence's sampler, rebuilt for its drafts */
    int64_t release_us, next_release; /* giving idle blocks' memory back */
    /* adaptive: running means (us) of a draft pass of one row per
     * sequence and of a target step (from one prepare's end to the next
     * one's start), and when the last prepare ended */
    double t_draft, t_step;
    int64_t prep_end;
    /* adaptive: the same counts over every sequence, which a new one
     * starts from (what was learnt of the pair carries over to the next
     * requests), and the probes among new sequences */
    float kept, missed;
    int32_t probe_every, since_probe;
    /* the idle release and ifl_spec_draft_stats: an idle engine still
     * gives the pool's memory back while a caller reads the figures */
    pthread_mutex_t idle_mu;
};

/* Weight of the past in the running acceptance and timings. */
#define DECAY 0.8f
/* Drafting must beat plain decoding's tokens per second by this much. */
#define GAIN_MIN 1.02
#define PROBE_MIN 8
#define PROBE_MAX 256

static int32_t blocks_for(int64_t n_pos, int32_t bs)
{
    return (int32_t)((n_pos + bs - 1) / bs);
}

static void kv_copy(void *user, int32_t dst, int32_t src, int32_t n)
{
    ifl_kv_store_copy_block(user, dst, src, n);
}

static void kv_release(void *user, int32_t first, int32_t n)
{
    ifl_kv_store_release(user, first, n);
}

/* ---- the vocabulary check ---- */

/* A token's text for an error sentence: at most 24 bytes, control bytes
 * and quotes as '?'. */
static void show_token(char *out, size_t cap, const char *s, size_t len)
{
    size_t n = 0;
    for (size_t i = 0; i < len && i < 24 && n + 1 < cap; i++)
        out[n++] = (unsigned char)s[i] < 0x20 || s[i] == '\'' || s[i] == 0x7f ? '?' : s[i];
    out[n] = 0;
}

/* The draft must give its logits over the target's tokens: the same
 * number of them, each with the same text. */
static int check_vocab(const struct ifl_model *target, const struct ifl_model *draft,
                       const char *path, char *err)
{
    struct ifl_gguf_value tt, dt;
    char e1[IFL_ERR_LEN] = "";
    if (ifl_gguf_get_arr(draft->gguf, "tokenizer.ggml.tokens", &dt, e1) ||
        dt.elem_type != IFL_GGUF_STRING)
        return ifl_err(err, IFL_EFORMAT,
                       "speculative.draft_model '%s': no tokenizer.ggml.tokens array, so its "
                       "vocabulary cannot be checked against the target's",
                       path);
    if (ifl_gguf_get_arr(target->gguf, "tokenizer.ggml.tokens", &tt, e1) ||
        tt.elem_type != IFL_GGUF_STRING)
        return ifl_err(err, IFL_EFORMAT,
                       "speculative.draft_model: the target has no tokenizer.ggml.tokens array");
    uint64_t n = tt.n < dt.n ? tt.n : dt.n;
    for (uint64_t i = 0; i < n; i++) {
        const char *a, *b;
        size_t la, lb;
        if (ifl_gguf_arr_str(&tt, i, &a, &la) || ifl_gguf_arr_str(&dt, i, &b, &lb))
            return ifl_err(err, IFL_EFORMAT, "speculative.draft_model: token %llu is no string",
                           (unsigned long long)i);
        if (la != lb || memcmp(a, b, la)) {
            char sa[32], sb[32];
            show_token(sa, sizeof sa, a, la);
            show_token(sb, sizeof sb, b, lb);
            return ifl_err(err, IFL_EINVAL,
                           "speculative.draft_model '%s': its vocabulary differs from the "
                           "target's at token id %llu ('%s' in the draft, '%s' in the target)",
                           path, (unsigned long long)i, sb, sa);
        }
    }
    if (tt.n != dt.n || target->hp.n_vocab != draft->hp.n_vocab)
        return ifl_err(err, IFL_EINVAL,
                       "speculative.draft_model '%s': its vocabulary differs from the target's "
                       "at token id %llu (the draft has %llu tokens and %d logits, the target "
                       "%llu and %d)",
                       path, (unsigned long long)n, (unsigned long long)dt.n, draft->hp.n_vocab,
                       (unsigned long long)tt.n, target->hp.n_vocab);
    return 0;
}

/* ---- creation ---- */

static void draft_fini(struct ifl_executor *ex)
{
    struct engine *e = ex->eng;
    struct dstate *d = e->spec_state;
    if (!d)
        return;
    if (d->slots)
        for (int32_t i = 0; i < d->n_slots; i++)
            if (d->kvc && d->slots[i].kv.blocks)
                ifl_kvc_seq_release(d->kvc, &d->slots[i].kv);
    free(d->slots);
    ifl_fwd_free(d->fwd); /* before the pool it borrows, which the target's forward owns */
    ifl_kvc_free(d->kvc);
    ifl_kv_store_free(d->store);
    ifl_model_free(d->m);
    free(d->tables);
    free(d->n_blocks);
    free(d->b_tok);
    free(d->b_pos);
    free(d->b_seq);
    free(d->b_want);
    free(d->row_slot);
    free(d->logits);
    ifl_sampler_state_deinit(&d->st);
    pthread_mutex_destroy(&d->idle_mu);
    free(d);
    e->spec_state = NULL;
}

static int draft_init(struct ifl_executor *ex, char *err)
{
    struct engine *e = ex->eng;
    const struct ifl_executor_config *c = &ex->cfg;
    const char *path = c->speculative.draft_model;
    struct dstate *d = calloc(1, sizeof(*d));
    if (!d)
        return ifl_err(err, IFL_ENOMEM, "speculative: out of memory");
    pthread_mutex_init(&d->idle_mu, NULL);
    e->spec_state = d; /* draft_fini frees what follows, also after a failure */
    char e1[IFL_ERR_LEN] = "";
    struct ifl_model_load_opts lo = {.n_threads = c->n_threads,
                                     .repack_cache_dir = c->repack_cache_dir,
                                     .repack_cache_max = c->repack_cache_max_bytes};
    int rc = ifl_model_load_with(&d->m, path, &lo, e1);
    if (rc)
        return ifl_err(err, rc, "speculative.draft_model '%s': %s", path, e1);
    if ((rc = check_vocab(ex->model, d->m, path, err)))
        return rc;
    int32_t bs = c->kv_block_size;
    int32_t per_seq = blocks_for(ex->n_ctx, bs);
    int64_t n_blocks = (int64_t)per_seq * e->n_slots;
    if (n_blocks > (1 << 30))
        return ifl_err(err, IFL_EINVAL, "speculative: a draft KV pool of %lld blocks is too large",
                       (long long)n_blocks);
    if ((rc = ifl_kv_store_create(&d->store, &d->m->hp, e->store->type, (int32_t)n_blocks, bs, e1)))
        return ifl_err(err, rc, "speculative.draft_model '%s': %s", path, e1);
    d->release_us = e->release_us;
    if (c->kv_prefault) {
        if ((rc = ifl_kv_store_prefault(d->store, err)))
            return rc;
        d->release_us = -1;
    }
    /* no prefix caching: its table would take draft tokens for real ones */
    struct ifl_kvc_config kc = {.n_blocks = (int32_t)n_blocks,
                                .block_size = bs,
                                .copy = kv_copy,
                                .copy_user = d->store,
                                .release = kv_release,
                                .release_user = d->store};
    if (ifl_kvc_create(&d->kvc, &kc))
        return ifl_err(err, IFL_ENOMEM, "speculative: out of memory for the draft's KV blocks");
    d->max_rows = c->max_num_tokens;
    struct ifl_fwd_config fc = {.max_rows = d->max_rows,
                                .max_ctx = ex->n_ctx,
                                .n_threads = c->n_threads,
                                .pool = ifl_fwd_pool(e->fwd)};
    if ((rc = ifl_fwd_create(&d->fwd, d->m, d->store, &fc, e1)))
        return ifl_err(err, rc, "speculative.draft_model '%s': %s", path, e1);
    d->kept = 3; /* hopeful at first (hope()) */
    d->probe_every = PROBE_MIN;
    d->n_slots = e->n_slots;
    d->logit_cap = d->n_slots < d->max_rows ? d->n_slots : d->max_rows;
    size_t R = (size_t)d->max_rows;
    d->slots = calloc((size_t)d->n_slots, sizeof(*d->slots));
    d->tables = calloc((size_t)d->n_slots, sizeof(*d->tables));
    d->n_blocks = calloc((size_t)d->n_slots, sizeof(int32_t));
    d->b_tok = malloc(sizeof(int32_t) * R);
    d->b_pos = malloc(sizeof(int32_t) * R);
    d->b_seq = malloc(sizeof(int32_t) * R);
    d->b_want = malloc(R);
    d->row_slot = malloc(sizeof(int32_t) * (size_t)d->logit_cap);
    d->logits = malloc(sizeof(float) * (size_t)d->logit_cap * (size_t)ex->n_vocab);
    if (!d->slots || !d->tables || !d->n_blocks || !d->b_tok || !d->b_pos || !d->b_seq ||
        !d->b_want || !d->row_slot || !d->logits || ifl_sampler_state_init(&d->st, ex->n_vocab))
        return ifl_err(err, IFL_ENOMEM, "speculative: out of memory");
    for (int32_t i = 0; i < d->n_slots; i++) {
        if (ifl_kvc_seq_init(&d->slots[i].kv, per_seq))
            return ifl_err(err, IFL_ENOMEM, "speculative: out of memory");
        d->tables[i] = d->slots[i].kv.blocks;
    }
    return 0;
}

/* ---- per sequence ---- */

static struct dslot *slot_of(struct ifl_executor *ex, const struct eseq *s)
{
    struct engine *e = ex->eng;
    return &((struct dstate *)e->spec_state)->slots[s - e->seqs];
}

/* A fresh start of the acceptance estimate: hopeful (a = 0.8). */
static void hope(struct dslot *ds)
{
    ds->kept = 3;
    ds->missed = 0;
}

static void forget(struct dstate *d, struct dslot *ds)
{
    ifl_kvc_seq_reset(d->kvc, &ds->kv);
    ds->owner = 0;
    ds->real = ds->at = ds->n_drafts = ds->kmax = 0;
    ds->off = ds->probe = 0;
}

static double ratio(const struct dstate *d)
{
    return d->t_step > 0 ? d->t_draft / d->t_step : 0;
}

/* A step's outcome for the acceptance estimates: `kept` drafts kept, and
 * whether the drafting then missed. */
static void learn(struct dstate *d, struct dslot *ds, int32_t kept, int missed)
{
    ds->kept = ds->kept * DECAY + (float)kept;
    ds->missed = ds->missed * DECAY + (float)(missed != 0);
    d->kept = d->kept * DECAY + (float)kept;
    d->missed = d->missed * DECAY + (float)(missed != 0);
}

/* The number of drafts, up to kmax, that gives the most tokens per unit
 * of time when each is kept with probability a (while the ones before it
 * were) and a draft pass takes r target steps: k drafts yield
 * 1 + a + ... + a^k tokens in 1 + k r steps' time. 0 when no k beats
 * plain decoding's one token a step by GAIN_MIN. */
static int32_t best_drafts(double a, double r, int32_t kmax)
{
    double tokens = 1, ak = 1, best = GAIN_MIN;
    int32_t best_k = 0;
    for (int32_t k = 1; k <= kmax; k++) {
        ak *= a;
        tokens += ak;
        double v = tokens / (1 + k * r);
        if (v > best) {
            best = v;
            best_k = k;
        }
    }
    return best_k;
}

/* A new sequence's start: the counts of all sequences so far, or, when
 * by them drafting does not pay, no drafting (but for one probe in
 * probe_every). */
static void start(struct dstate *d, struct dslot *ds, int32_t kmax)
{
    ds->kept = d->kept;
    ds->missed = d->missed;
    double a = (d->kept + 1.0) / (d->kept + d->missed + 2.0);
    if (best_drafts(a, ratio(d), kmax) > 0) {
        d->probe_every = PROBE_MIN; /* drafting pays again (or still) */
        d->since_probe = 0;
        return;
    }
    if (++d->since_probe >= d->probe_every) {
        d->since_probe = 0;
        ds->probe = 1;
        hope(ds);
    } else {
        ds->off = 1;
    }
}

/* How many drafts sequence ds should make this step, up to kmax, by its
 * acceptance and the measured costs; 0, and no drafting from then on,
 * when drafting does not pay. */
static int32_t worth(struct dstate *d, struct dslot *ds, int32_t kmax)
{
    if (ds->off)
        return 0;
    double a = (ds->kept + 1.0) / (ds->kept + ds->missed + 2.0);
    int32_t best_k = best_drafts(a, ratio(d), kmax);
    if (best_k == 0) {
        ds->off = 1;
        ifl_kvc_seq_reset(d->kvc, &ds->kv);
        ds->real = 0;
        if (ds->probe) /* a probe that failed: the next one comes later */
            d->probe_every = d->probe_every * 2 > PROBE_MAX ? PROBE_MAX : d->probe_every * 2;
    }
    return best_k;
}

/* Adds a timing sample to a running mean (the first sets it). */
static void average(double *mean, double sample)
{
    *mean = *mean > 0 ? *mean * DECAY + sample * (1 - DECAY) : sample;
}

/* Truncates the slot's draft KV to the positions that hold s's tokens:
 * the real ones, then the drafts s has taken. A slot last used by
 * another sequence starts empty. */
static void trim(struct ifl_executor *ex, struct dstate *d, struct dslot *ds, const struct eseq *s)
{
    if (ds->owner != s->q->id || ds->owner_index != s->index) {
        forget(d, ds);
        ds->owner = s->q->id;
        ds->owner_index = s->index;
        const struct ifl_request_speculative *rq = &s->q->r.speculative;
        if (ex->cfg.speculative.adaptive)
            start(d, ds, rq->n_max >= 0 ? rq->n_max : ex->cfg.speculative.n_max);
    }
    int32_t p = ds->real < s->n_tokens ? ds->real : s->n_tokens;
    while (p < ds->kv.n_pos && p < s->n_tokens && p - ds->at >= 0 && p - ds->at < ds->n_drafts &&
           s->tokens[p] == ds->drafts[p - ds->at])
        p++;
    if (p < ds->kv.n_pos)
        ifl_kvc_truncate(d->kvc, &ds->kv, p);
    ds->real = ds->kv.n_pos;
}

/* Appends positions [from, to) of s (or of its drafts, from `at` on) to
 * the pass, the last with logits when `logits`; reserves their blocks.
 * Returns the rows added (0 when the blocks cannot be had). */
static int32_t add_rows(struct dstate *d, int32_t slot, const int32_t *toks, int32_t from,
                        int32_t to, int logits, int32_t *rows, int32_t *nlog)
{
    struct dslot *ds = &d->slots[slot];
    if (ifl_kvc_reserve(d->kvc, &ds->kv, to))
        return 0;
    for (int32_t p = from; p < to; p++) {
        int32_t r = (*rows)++;
        d->b_tok[r] = toks[p - from];
        d->b_pos[r] = p;
        d->b_seq[r] = slot;
        d->b_want[r] = logits && p == to - 1;
    }
    if (logits)
        d->row_slot[(*nlog)++] = slot;
    return to - from;
}

/* Runs the pass and records what the draft KV now holds; 0 on success. */
static int run_pass(struct ifl_executor *ex, struct dstate *d, int32_t rows)
{
    for (int32_t i = 0; i < d->n_slots; i++)
        d->n_blocks[i] = d->slots[i].kv.n_blocks;
    struct ifl_batch b = {.n_rows = rows,
                          .tokens = d->b_tok,
                          .pos = d->b_pos,
                          .seq = d->b_seq,
                          .logits = d->b_want,
                          .n_seqs = d->n_slots,
                          .block_tables = d->tables,
                          .n_blocks = d->n_blocks};
    char err[IFL_ERR_LEN] = "";
    if (ifl_forward(d->fwd, &b, d->logits, err))
        return -1; /* a bug in building the pass: no drafts this step */
    for (int32_t r = 0; r < rows; r++) {
        struct dslot *ds = &d->slots[d->b_seq[r]];
        if (d->b_pos[r] + 1 > ds->kv.n_pos)
            ifl_kvc_commit(d->kvc, &ds->kv, NULL, d->b_pos[r] + 1);
    }
    (void)ex;
    return 0;
}

/* The draft model's pick for s's next draft from its logits row: the
 * token s's own sampler would pick from that row after s's tokens and the
 * drafts so far (the argmax when greedy; when sampling, the draw of the
 * same seeded generator the target's pick will use, after the same
 * penalties and filters), so a draft model that agrees with the target
 * agrees with its samples too. *prob: the draft's probability of the
 * pick (after the request's processing, at temperature 1). -1 when
 * nothing can be picked. The drafts are written after s's tokens, where
 * propose() will put them; d->st is rebuilt from s's own sampler. */
static int32_t pick(struct ifl_executor *ex, struct dstate *d, struct eseq *s,
                    const struct dslot *ds, float *row, float *prob)
{
    struct ifl_sampler_state *st = &d->st;
    int32_t j = ds->n_drafts;
    const int32_t *gen = s->tokens + s->n_prompt;
    memcpy(s->tokens + s->n_tokens, ds->drafts, sizeof(int32_t) * (size_t)j);
    ifl_sampler_reset(st, &s->scfg, s->tokens, s->n_prompt);
    ifl_sampler_recount(st, gen, s->n_gen);
    st->n_accepted = s->st.n_accepted;
    st->top_p = s->st.top_p;
    for (int32_t i = 0; i < j; i++)
        ifl_sampler_accept(&s->scfg, st, ds->drafts[i]);
    struct ifl_sampler_extras x = ifl_choose_extras(ex->eng, s->q);
    ifl_sampler_process(&s->scfg, st, row, ex->n_vocab, s->tokens, s->n_prompt, gen, s->n_gen + j,
                        &x);
    /* speculative sampling draws its uniforms from the generator a sampled
     * draft would come from: a draft drawn from it would not be independent
     * of its own test, so under rejection the draft is the argmax (a
     * one-hot proposal, which is how the acceptor counts every draft) */
    struct ifl_sampling_config c = s->scfg;
    if (ex->cfg.speculative.accept == IFL_SPEC_ACCEPT_REJECTION)
        c.temperature = 0;
    float lp = -INFINITY;
    int32_t tok = ifl_sampler_pick(&c, st, row, &lp, NULL, 0);
    if (!(row[tok] > -INFINITY))
        return -1;
    *prob = expf(lp);
    return tok;
}

/* Takes each logits row of the pass just run as the next draft of its
 * sequence, unless less likely than p_min. Returns how many sequences
 * go on drafting. */
static int32_t take_picks(struct ifl_executor *ex, struct dstate *d, int32_t nlog)
{
    struct engine *e = ex->eng;
    int32_t going = 0;
    for (int32_t k = 0; k < nlog; k++) {
        struct dslot *ds = &d->slots[d->row_slot[k]];
        struct eseq *s = &e->seqs[d->row_slot[k]];
        const struct xreq *q = s->q;
        float p_min =
            q->r.speculative.p_min >= 0 ? q->r.speculative.p_min : ex->cfg.speculative.p_min;
        float prob = 0;
        int32_t tok = pick(ex, d, s, ds, d->logits + (size_t)k * ex->n_vocab, &prob);
        if (tok < 0 || prob < p_min || !(prob == prob)) {
            if (ds->n_drafts == 0) /* a pass for nothing */
                learn(d, ds, 0, 1);
            ds->kmax = ds->n_drafts; /* this sequence is done */
            continue;
        }
        ds->probs[ds->n_drafts] = prob;
        ds->drafts[ds->n_drafts++] = tok;
        /* nothing follows an end token */
        if (!q->r.sampling.ignore_eos &&
            (q->r.end_id >= 0 ? tok == q->r.end_id : ifl_vocab_is_eog(ex->vocab, tok)))
            ds->kmax = ds->n_drafts;
        going += ds->n_drafts < ds->kmax;
    }
    return going;
}

/* Whether s, of this strategy, is decoding (one pending token) or
 * prefilling (more) with its slot's tokens in place. */
static int of_ours(const struct eseq *s)
{
    return s->q && s->started && !s->finish && !s->paused && s->q->dec == &ifl_decoding_draft;
}

static void draft_prepare(struct ifl_executor *ex)
{
    struct engine *e = ex->eng;
    struct dstate *d = e->spec_state;
    if (!d)
        return;
    int64_t now = ifl_now_us();
    ifl_kvc_set_clock(d->kvc, now);
    /* the target's step since the last prepare; a gap far longer than the
     * usual is the engine having been idle */
    double gap = (double)(now - d->prep_end);
    if (d->prep_end > 0 && gap * 4 < d->t_step)
        d->t_step = gap; /* the mean began with an idle gap: start again */
    else if (d->prep_end > 0 && (d->t_step == 0 || gap < 4 * d->t_step))
        average(&d->t_step, gap);
    int adaptive = ex->cfg.speculative.adaptive;
    /* draft rows the step can take (adaptive: what leaves it memory-bound) */
    int32_t budget = adaptive ? e->spec_rows : 1 << 30;
    int32_t rows = 0, nlog = 0;
    /* depth 0, decoding sequences first: their catch-up ends in the row
     * that gives their first draft */
    for (int pass = 0; pass < 2; pass++)
        for (int32_t i = 0; i < e->n_slots; i++) {
            struct eseq *s = &e->seqs[i];
            struct dslot *ds = &d->slots[i];
            if (pass == 0)
                ds->kmax = ds->n_drafts = 0;
            if (!of_ours(s))
                continue;
            int32_t pending = s->n_tokens - s->kv.n_pos;
            if ((pass == 0) != (pending == 1))
                continue;
            trim(ex, d, ds, s);
            ds->n_drafts = 0;
            if (ds->off)
                continue; /* the draft model no longer runs for it */
            int32_t end = s->n_tokens, k = 0;
            if (pass == 0) {
                k = ifl_decoding_draft_limit(ex, s);
                if (k > budget)
                    k = budget;
                if (k > IFL_SPEC_MAX_DRAFT)
                    k = IFL_SPEC_MAX_DRAFT;
                if (k >= 1 && adaptive)
                    k = worth(d, ds, k);
                if (k < 1)
                    continue; /* no drafts asked for: catch up when they are */
                /* the pending token's logits give the first draft: if the
                 * cache already holds it (a draft the target then took
                 * alone), run it again */
                if (ds->kv.n_pos >= end) {
                    ifl_kvc_truncate(d->kvc, &ds->kv, end - 1);
                    ds->real = ds->kv.n_pos;
                }
            } else {
                end = s->kv.n_pos; /* as far as the target's prefill has come */
            }
            int32_t from = ds->kv.n_pos, to = end;
            if (to - from > d->max_rows - rows)
                to = from + (d->max_rows - rows);
            if (to <= from || (k && to == end && nlog >= d->logit_cap))
                continue;
            int want = k > 0 && to == end;
            if (!add_rows(d, i, s->tokens + from, from, to, want, &rows, &nlog))
                continue;
            if (want) {
                ds->kmax = k;
                ds->at = end;
                budget -= k;
            }
        }
    int64_t t0 = ifl_now_us();
    if (rows == 0 || run_pass(ex, d, rows))
        goto out;
    /* a catch-up of a token or two a sequence costs what a draft pass does */
    if (nlog > 0 && rows <= 2 * nlog)
        average(&d->t_draft, (double)(ifl_now_us() - t0));
    for (int32_t i = 0; i < d->n_slots; i++)
        if (of_ours(&e->seqs[i]))
            d->slots[i].real = d->slots[i].kv.n_pos;
    /* depth j: each sequence still drafting runs its last draft */
    for (int32_t going = take_picks(ex, d, nlog); going > 0;) {
        rows = nlog = 0;
        for (int32_t i = 0; i < d->n_slots && rows < d->logit_cap; i++) {
            struct dslot *ds = &d->slots[i];
            if (ds->n_drafts == 0 || ds->n_drafts >= ds->kmax)
                continue;
            int32_t p = ds->at + ds->n_drafts - 1;
            if (!add_rows(d, i, &ds->drafts[ds->n_drafts - 1], p, p + 1, 1, &rows, &nlog))
                ds->kmax = ds->n_drafts;
        }
        t0 = ifl_now_us();
        if (rows == 0 || run_pass(ex, d, rows))
            break;
        average(&d->t_draft, (double)(ifl_now_us() - t0));
        going = take_picks(ex, d, nlog);
    }
out:
    if (d->release_us >= 0 && now >= d->next_release) {
        /* at most once a second: blocks free for release_us give their
         * memory back (while the engine is idle, draft_idle does it) */
        d->next_release = now + 1000000;
        ifl_kvc_release_idle(d->kvc, d->release_us);
    }
    d->prep_end = ifl_now_us();
}

/* Requests whose rows never take drafts (a logits processor runs on them)
 * decode plain, so the draft model does not prefill them for nothing. */
static int draft_wants(const struct ifl_executor *ex, const struct xreq *q)
{
    (void)ex;
    return q->post_index == -1 && q->r.sampling.beam_width <= 1;
}

static int32_t draft_propose(struct ifl_executor *ex, struct eseq *s, int32_t *draft, int32_t max)
{
    struct dslot *ds = slot_of(ex, s);
    if (ds->owner != s->q->id || ds->owner_index != s->index || ds->at != s->n_tokens)
        return 0;
    int32_t k = ds->n_drafts < max ? ds->n_drafts : max;
    memcpy(draft, ds->drafts, sizeof(int32_t) * (size_t)k);
    return k;
}

/* The verifying acceptor, then the draft cache forgets the drafts the
 * target did not keep. */
static void draft_accept(struct ifl_executor *ex, struct eseq *s, const int32_t *rows, int32_t n)
{
    int32_t k = s->n_draft, n0 = s->n_tokens;
    ifl_decoding_accept_drafts(ex, s, rows, n);
    if (s->q && !s->finish) {
        struct dstate *d = ex->eng->spec_state;
        struct dslot *ds = slot_of(ex, s);
        /* all tokens taken but the last were drafts kept */
        if (k)
            learn(d, ds, s->n_tokens - n0 - 1, s->n_tokens - n0 - 1 < k);
        trim(ex, d, ds, s);
        ds->n_drafts = 0;
    }
}

static void draft_drop(struct ifl_executor *ex, struct eseq *s)
{
    struct dstate *d = ex->eng->spec_state;
    if (d)
        forget(d, slot_of(ex, s));
}

/* Idle: what the draft's pool holds free for release_us goes back, as the
 * engine's own pool does (between steps prepare() does it). */
static int64_t draft_idle(struct ifl_executor *ex)
{
    struct dstate *d = ex->eng->spec_state;
    if (d->release_us < 0 || !d->kvc)
        return INT64_MAX;
    pthread_mutex_lock(&d->idle_mu);
    ifl_kvc_set_clock(d->kvc, ifl_now_us());
    ifl_kvc_release_idle(d->kvc, d->release_us);
    int64_t next = ifl_kvc_next_release(d->kvc, d->release_us);
    pthread_mutex_unlock(&d->idle_mu);
    return next;
}

static void draft_kv_memory(struct ifl_executor *ex, int64_t *reserved, int64_t *resident)
{
    const struct dstate *d = ex->eng->spec_state;
    if (!d->store || !d->kvc)
        return;
    *reserved = (int64_t)d->store->bytes;
    *resident = ifl_kv_store_resident(d->store, ifl_kvc_touched_end(d->kvc));
}

const struct ifl_decoding ifl_decoding_draft = {
    .name = "draft",
    .wants = draft_wants,
    .propose = draft_propose,
    .accept = draft_accept,
    .drop = draft_drop,
    .type = IFL_SPEC_DRAFT,
    .engine_init = draft_init,
    .engine_fini = draft_fini,
    .prepare = draft_prepare,
    .kv_memory = draft_kv_memory,
    .idle = draft_idle,
};

int ifl_spec_draft_stats(struct ifl_executor *ex, struct ifl_kvc_stats *out)
{
    struct engine *e = ex->eng;
    if (!e || e->spec != &ifl_decoding_draft || !e->spec_state)
        return IFL_EINVAL;
    struct dstate *d = e->spec_state;
    pthread_mutex_lock(&d->idle_mu);
    ifl_kvc_get_stats(d->kvc, out);
    pthread_mutex_unlock(&d->idle_mu);
    return 0;
}
