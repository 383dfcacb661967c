/*
 * Guided decoding in the executor (see guided.h): the cache of compiled
 * guides behind enqueue, and the engine's per-row mask.
 *
 * Invariants: a cached entry's (type, text) never changes and its grammar
 * is immutable, so the engine reads it without the lock; only refs,
 * last_use and the list itself are guarded. The mask applies after the
 * sampler's processing (bias, bans, penalties) and before the pick, so the
 * pick's log-probabilities are those of the constrained distribution.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/timeutil.h"
#include "inflight.h"
#include "runtime/guided.h"

void ifl_xguide_cache_init(struct ifl_xguide_cache *c)
{
    memset(c, 0, sizeof *c);
    pthread_mutex_init(&c->mu, NULL);
}

static void entry_free(struct ifl_xguide *x)
{
    ifl_guide_free(x->g);
    free(x->text);
    free(x);
}

void ifl_xguide_cache_deinit(struct ifl_xguide_cache *c)
{
    for (struct ifl_xguide *x = c->head, *n; x; x = n) {
        n = x->next;
        entry_free(x);
    }
    c->head = NULL;
    pthread_mutex_destroy(&c->mu);
}

static int compile(int32_t type, const char *text, size_t len, struct ifl_guide **g, char *err)
{
    switch (type) {
    case IFL_GUIDE_JSON:
        /* JSON mode: any value, or an object when the text says "object" */
        return ifl_guide_compile_json(g, text && !strcmp(text, "object"), err);
    case IFL_GUIDE_JSON_SCHEMA:
        return ifl_guide_compile_json_schema(g, text, len, err);
    case IFL_GUIDE_REGEX:
        return ifl_guide_compile_regex(g, text, len, err);
    case IFL_GUIDE_EBNF:
        return ifl_guide_compile_gbnf(g, text, len, err);
    default:
        return ifl_err(err, IFL_EINVAL, "guide_type: %d is not a guide type (0..4)", type);
    }
}

/* Lock held: the entry for (type, text), or NULL. */
static struct ifl_xguide *find(struct ifl_xguide_cache *c, int32_t type, const char *text,
                               size_t len)
{
    for (struct ifl_xguide *x = c->head; x; x = x->next)
        if (x->type == type && x->len == len && (!len || !memcmp(x->text, text, len)))
            return x;
    return NULL;
}

/* Lock held: drops unreferenced entries beyond IFL_XGUIDE_KEEP, oldest first. */
static void trim(struct ifl_xguide_cache *c)
{
    while (c->n > IFL_XGUIDE_KEEP) {
        struct ifl_xguide **victim = NULL;
        for (struct ifl_xguide **pp = &c->head; *pp; pp = &(*pp)->next)
            if ((*pp)->refs == 0 && (!victim || (*pp)->last_use < (*victim)->last_use))
                victim = pp;
        if (!victim)
            return;
        struct ifl_xguide *x = *victim;
        *victim = x->next;
        c->n--;
        entry_free(x);
    }
}

int ifl_xguide_acquire(struct ifl_xguide_cache *c, int32_t type, const char *text,
                       struct ifl_xguide **out, char *err)
{
    *out = NULL;
    if (type != IFL_GUIDE_JSON && (!text || !text[0]))
        return ifl_err(err, IFL_EINVAL, "guide_text: required for guide_type %d", type);
    size_t len = text ? strlen(text) : 0;
    if (len > IFL_GUIDE_MAX_TEXT)
        return ifl_err(err, IFL_EINVAL, "guide_text: %zu bytes (at most %zu)", len,
                       (size_t)IFL_GUIDE_MAX_TEXT);
    pthread_mutex_lock(&c->mu);
    struct ifl_xguide *x = find(c, type, text, len);
    if (x) {
        x->refs++;
        x->last_use = ++c->clock;
    }
    pthread_mutex_unlock(&c->mu);
    if (x) {
        *out = x;
        return 0;
    }
    /* compile outside the lock: other enqueues need not wait for it */
    struct ifl_guide *g = NULL;
    char e2[IFL_ERR_LEN] = "";
    int rc = compile(type, text, len, &g, e2);
    if (rc)
        return ifl_err(err, rc, "guide_text: %s", e2);
    x = calloc(1, sizeof *x);
    if (!x || (len && !(x->text = malloc(len)))) {
        free(x);
        ifl_guide_free(g);
        return ifl_err(err, IFL_ENOMEM, "guide: out of memory");
    }
    if (len)
        memcpy(x->text, text, len);
    x->g = g;
    x->type = type;
    x->len = len;
    x->cache = c;
    x->refs = 1;
    pthread_mutex_lock(&c->mu);
    struct ifl_xguide *other = find(c, type, text, len);
    if (other) {
        /* another thread compiled it meanwhile: use theirs */
        other->refs++;
        other->last_use = ++c->clock;
        pthread_mutex_unlock(&c->mu);
        entry_free(x);
        *out = other;
        return 0;
    }
    x->last_use = ++c->clock;
    x->next = c->head;
    c->head = x;
    c->n++;
    trim(c);
    pthread_mutex_unlock(&c->mu);
    *out = x;
    return 0;
}

void ifl_xguide_release(struct ifl_xguide *x)
{
    if (!x)
        return;
    struct ifl_xguide_cache *c = x->cache;
    pthread_mutex_lock(&c->mu);
    x->refs--;
    trim(c);
    pthread_mutex_unlock(&c->mu);
}

/* ---------------------------------------------------------------- engine */

void ifl_xguide_engine_init(struct ifl_xguide_engine *ge, const struct ifl_vocab *vocab,
                            int32_t n_vocab)
{
    memset(ge, 0, sizeof *ge);
    ge->vocab = vocab;
    ge->n_vocab = n_vocab;
}

void ifl_xguide_engine_deinit(struct ifl_xguide_engine *ge)
{
    ifl_guide_masker_free(ge->m);
    ifl_guide_vocab_index_free(ge->vi);
    free(ge->bits);
    free(ge->eog);
    memset(ge, 0, sizeof *ge);
}

int ifl_xguide_engine_ready(struct ifl_xguide_engine *ge)
{
    if (ge->m)
        return 0;
    int32_t nt = ifl_vocab_n_tokens(ge->vocab);
    int32_t n = nt > ge->n_vocab ? nt : ge->n_vocab;
    ge->n_words = (n + 31) / 32;
    if (!ge->bits && !(ge->bits = calloc((size_t)ge->n_words, sizeof *ge->bits)))
        return IFL_ENOMEM;
    if (!ge->eog) {
        if (!(ge->eog = malloc(sizeof *ge->eog * (size_t)(nt > 0 ? nt : 1))))
            return IFL_ENOMEM;
        for (int32_t t = 0; t < nt; t++)
            if (ifl_vocab_is_eog(ge->vocab, t))
                ge->eog[ge->n_eog++] = t;
    }
    if (!ge->vi && ifl_guide_vocab_index_create(&ge->vi, ge->vocab, NULL))
        return IFL_ENOMEM;
    return ifl_guide_masker_create_sized(&ge->m, ge->vi, IFL_XGUIDE_MASKS);
}

static void record(struct ifl_xguide_stats *s, double ms)
{
    s->n_masks++;
    s->total_ms += ms;
    if (ms > s->max_ms)
        s->max_ms = ms;
    double us = ms * 1e3;
    int k = us < 1 ? 0 : (int)(4.0 * log2(us));
    if (k >= IFL_XGUIDE_HIST)
        k = IFL_XGUIDE_HIST - 1;
    s->hist[k]++;
}

double ifl_xguide_stats_quantile(const struct ifl_xguide_stats *s, double p)
{
    if (!s->n_masks)
        return 0;
    uint64_t want = (uint64_t)ceil(p * (double)s->n_masks), seen = 0;
    if (want < 1)
        want = 1;
    for (int k = 0; k < IFL_XGUIDE_HIST; k++) {
        seen += s->hist[k];
        if (seen >= want)
            return exp2((k + 1) / 4.0) * 1e-3;
    }
    return s->max_ms;
}

int64_t ifl_xguide_mask_row(struct ifl_xguide_engine *ge, const struct ifl_guide_state *st,
                            float *row, const int32_t *end_ids, int32_t n_end)
{
    double t0 = ifl_now_s();
    int64_t n = ifl_guide_mask(ge->m, st, ge->bits);
    if (n < 0)
        return n;
    int32_t nt = ifl_guide_vocab_index_n_tokens(ge->vi);
    /* rows past the vocabulary's tokens are never allowed */
    for (int32_t t = nt; t < ge->n_vocab; t++)
        ge->bits[t >> 5] &= ~(1u << (t & 31));
    /* the mask allows the vocabulary's end-of-generation tokens when the
     * state accepts; the request may name another end token instead */
    int acc = ifl_guide_is_accepting(st);
    for (int32_t k = 0; acc && k < ge->n_eog; k++) {
        int32_t t = ge->eog[k];
        if ((ge->bits[t >> 5] >> (t & 31)) & 1) {
            ge->bits[t >> 5] &= ~(1u << (t & 31));
            n--;
        }
    }
    for (int32_t k = 0; k < n_end; k++) {
        int32_t t = end_ids[k];
        if (t < 0 || t >= ge->n_vocab)
            continue;
        int had = (ge->bits[t >> 5] >> (t & 31)) & 1;
        if (acc && !had) {
            ge->bits[t >> 5] |= 1u << (t & 31);
            n++;
        } else if (!acc && had) {
            ge->bits[t >> 5] &= ~(1u << (t & 31));
            n--;
        }
    }
    int32_t full = ge->n_vocab / 32;
    for (int32_t w = 0; w < full; w++) {
        uint32_t off = ~ge->bits[w];
        float *r = row + (size_t)w * 32;
        if (off == 0xFFFFFFFFu) {
            for (int k = 0; k < 32; k++)
                r[k] = -INFINITY;
            continue;
        }
        for (; off; off &= off - 1)
            r[__builtin_ctz(off)] = -INFINITY;
    }
    for (int32_t t = full * 32; t < ge->n_vocab; t++)
        if (!((ge->bits[t >> 5] >> (t & 31)) & 1))
            row[t] = -INFINITY;
    record(&ge->stats, (ifl_now_s() - t0) * 1e3);
    ifl_guide_masker_stats(ge->m, &ge->stats.cache_hits, &ge->stats.cache_misses);
    return n;
}
