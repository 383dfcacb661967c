/* Token sampling (see sample.h). */
#include "runtime/sample.h"

#include <math.h>
#include <stdlib.h>

#include "core/err.h"

int ifl_sampler_init(struct ifl_sampler *s, const struct ifl_sampling *cfg, int32_t n_vocab,
                     char *err)
{
    s->cand = NULL;
    if (!(cfg->temperature >= 0 && cfg->temperature <= 100))
        return ifl_err(err, IFL_EINVAL, "temperature must be between 0 and 100");
    if (!(cfg->top_p > 0 && cfg->top_p <= 1))
        return ifl_err(err, IFL_EINVAL, "top_p must be in (0, 1]");
    if (!(cfg->min_p >= 0 && cfg->min_p <= 1))
        return ifl_err(err, IFL_EINVAL, "min_p must be in [0, 1]");
    if (cfg->top_k < 0)
        return ifl_err(err, IFL_EINVAL, "top_k must be >= 0");
    if (n_vocab < 1)
        return ifl_err(err, IFL_EINVAL, "empty vocabulary");
    s->cfg = *cfg;
    s->n_vocab = n_vocab;
    ifl_rng_seed(&s->rng, cfg->seed);
    s->cand = malloc(sizeof(*s->cand) * (size_t)n_vocab);
    if (!s->cand)
        return ifl_err(err, IFL_ENOMEM, "out of memory");
    return 0;
}

void ifl_sampler_deinit(struct ifl_sampler *s)
{
    free(s->cand);
    s->cand = NULL;
}

int32_t ifl_sample_greedy(const float *logits, int32_t n_vocab)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n_vocab; i++)
        if (logits[i] > logits[best])
            best = i;
    return best;
}

/* Descending probability, then ascending id: a total order, so results do
 * not depend on the sort's stability. */
static int cand_cmp(const void *a, const void *b)
{
    const struct ifl_sample_cand *x = a, *y = b;
    if (x->p != y->p)
        return x->p > y->p ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Moves the k largest candidates to the front (in any order). */
static void select_top(struct ifl_sample_cand *c, int32_t n, int32_t k)
{
    int32_t lo = 0, hi = n - 1;
    while (lo < hi) {
        struct ifl_sample_cand pivot = c[(lo + hi) / 2];
        int32_t i = lo, j = hi;
        while (i <= j) {
            while (cand_cmp(&c[i], &pivot) < 0)
                i++;
            while (cand_cmp(&c[j], &pivot) > 0)
                j--;
            if (i <= j) {
                struct ifl_sample_cand t = c[i];
                c[i++] = c[j];
                c[j--] = t;
            }
        }
        if (k - 1 <= j)
            hi = j;
        else if (k - 1 >= i)
            lo = i;
        else
            break;
    }
}

int32_t ifl_sampler_sample(struct ifl_sampler *s, const float *logits)
{
    const struct ifl_sampling *c = &s->cfg;
    int32_t n = s->n_vocab;
    if (c->temperature <= 0)
        return ifl_sample_greedy(logits, n);
    float mx = logits[ifl_sample_greedy(logits, n)];
    double sum = 0;
    for (int32_t i = 0; i < n; i++) {
        float p = expf((logits[i] - mx) / c->temperature);
        s->cand[i].id = i;
        s->cand[i].p = p;
        sum += p;
    }
    int32_t k = n;
    if (c->top_k > 0 && c->top_k < n) {
        select_top(s->cand, n, c->top_k);
        k = c->top_k;
    }
    qsort(s->cand, (size_t)k, sizeof(*s->cand), cand_cmp);
    /* probabilities relative to the full softmax */
    if (c->top_p < 1) {
        double acc = 0;
        int32_t keep = k;
        for (int32_t i = 0; i < k; i++) {
            acc += s->cand[i].p / sum;
            if (acc >= c->top_p) {
                keep = i + 1;
                break;
            }
        }
        k = keep;
    }
    if (c->min_p > 0) {
        float floor = s->cand[0].p * c->min_p;
        int32_t keep = 1;
        while (keep < k && s->cand[keep].p >= floor)
            keep++;
        k = keep;
    }
    double total = 0;
    for (int32_t i = 0; i < k; i++)
        total += s->cand[i].p;
    double u = (double)ifl_rng_uniform(&s->rng) * total;
    double acc = 0;
    for (int32_t i = 0; i < k; i++) {
        acc += s->cand[i].p;
        if (u < acc)
            return s->cand[i].id;
    }
    return s->cand[k - 1].id;
}
