/*
 * Guided decoding in the executor: compiled guides shared between
 * requests, and the engine's mask step.
 *
 * struct ifl_xguide_cache (thread-safe, its own mutex): the compiled
 * grammars of an executor, keyed by (guide type, text). Enqueue compiles a
 * request's guide here (an invalid grammar is an error of enqueue, before
 * any token) and the request holds a reference until it is freed. Requests
 * with the same text share one struct ifl_guide, so the engine's mask
 * cache, keyed by (grammar id, state), serves all of them: the cold cost
 * of a state is paid once per executor, not per request. Unreferenced
 * guides stay cached up to IFL_XGUIDE_KEEP entries, least recently used
 * evicted first.
 *
 * struct ifl_xguide_engine (engine-owned): the vocabulary index (built on
 * the first guided request), one masker with a large cache, the mask
 * bitset of the last row, and a histogram of mask times.
 */
#ifndef IFL_RUNTIME_GUIDED_H
#define IFL_RUNTIME_GUIDED_H

#include <pthread.h>
#include <stdint.h>

#include "guide/guide.h"
#include "tokenizer/tokenizer.h"

#define IFL_XGUIDE_KEEP 32
/* masks the engine remembers by state (each n_vocab / 8 bytes) */
#define IFL_XGUIDE_MASKS 1024
/* mask time histogram: bucket k holds times in [2^(k/4), 2^((k+1)/4)) us */
#define IFL_XGUIDE_HIST 96

struct ifl_xguide_cache;

/* One compiled guide. g is immutable; refs is guarded by the cache's lock. */
struct ifl_xguide {
    struct ifl_guide *g;
    int32_t type;
    char *text;
    size_t len;
    int32_t refs;
    uint64_t last_use;
    struct ifl_xguide_cache *cache;
    struct ifl_xguide *next;
};

struct ifl_xguide_cache {
    pthread_mutex_t mu;
    struct ifl_xguide *head;
    int32_t n;
    uint64_t clock;
};

void ifl_xguide_cache_init(struct ifl_xguide_cache *c);
/* Frees every entry; none may still be referenced. */
void ifl_xguide_cache_deinit(struct ifl_xguide_cache *c);
/* The compiled guide of (type, text), compiled now if not cached. text may
 * be NULL for IFL_GUIDE_JSON (any value; "object" asks for an object).
 * Errors name the problem in err: IFL_EFORMAT (malformed), IFL_EUNSUPPORTED
 * (a construct the front end cannot express), IFL_EINVAL, IFL_ENOMEM. The
 * caller owns one reference (ifl_xguide_release). */
int ifl_xguide_acquire(struct ifl_xguide_cache *c, int32_t type, const char *text,
                       struct ifl_xguide **out, char *err);
/* Drops a reference (NULL does nothing). Any thread. */
void ifl_xguide_release(struct ifl_xguide *x);

/* Mask timing, for benchmarks: calls, and a log-scale histogram. */
struct ifl_xguide_stats {
    uint64_t n_masks;
    uint64_t cache_hits, cache_misses;
    double total_ms;
    double max_ms;
    uint64_t hist[IFL_XGUIDE_HIST];
};

struct ifl_xguide_engine {
    const struct ifl_vocab *vocab;
    int32_t n_vocab; /* rows of logits (may exceed the vocabulary's tokens) */
    struct ifl_guide_vocab_index *vi;
    struct ifl_guide_masker *m;
    uint32_t *bits; /* [(n_vocab + 31) / 32] allowed tokens of the last mask */
    int32_t n_words;
    int32_t *eog; /* [n_eog] the vocabulary's end-of-generation tokens */
    int32_t n_eog;
    struct ifl_xguide_stats stats;
};

/* Binds ge to a vocabulary; allocates nothing yet. */
void ifl_xguide_engine_init(struct ifl_xguide_engine *ge, const struct ifl_vocab *vocab,
                            int32_t n_vocab);
void ifl_xguide_engine_deinit(struct ifl_xguide_engine *ge);
/* Builds the vocabulary index and masker on first use. IFL_ENOMEM. */
int ifl_xguide_engine_ready(struct ifl_xguide_engine *ge);
/* The guide's mask for st applied to a row of processed logits: every token
 * the grammar does not allow next gets -inf. The end tokens end_ids are
 * allowed exactly when st is accepting; other end-of-generation tokens
 * never are. Returns the number of allowed tokens, or IFL_ENOMEM. The mask
 * stays in ge->bits for ifl_xguide_allowed. */
int64_t ifl_xguide_mask_row(struct ifl_xguide_engine *ge, const struct ifl_guide_state *st,
                            float *row, const int32_t *end_ids, int32_t n_end);
/* Whether tok was allowed by the last mask. */
static inline int ifl_xguide_allowed(const struct ifl_xguide_engine *ge, int32_t tok)
{
    return tok >= 0 && tok < ge->n_vocab && ((ge->bits[tok >> 5] >> (tok & 31)) & 1);
}
/* The p-quantile (0..1) of the mask times in ms, from the histogram (the
 * upper edge of its bucket). */
double ifl_xguide_stats_quantile(const struct ifl_xguide_stats *s, double p);

#endif
