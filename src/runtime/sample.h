/*
 * Token sampling: greedy, temperature, top-k, top-p, min-p, with a seeded
 * generator per sampler. Single-owner (one per sequence). Scratch is
 * allocated at init, so sampling allocates nothing.
 *
 * Order of the filters: temperature scales the logits, then top-k keeps the
 * k most likely, top-p the smallest prefix whose mass reaches p, min-p drops
 * tokens below min_p times the most likely one's probability; one token is
 * drawn from what remains. Temperature <= 0 is greedy: the most likely
 * token, the lowest id on a tie.
 */
#ifndef IFL_RUNTIME_SAMPLE_H
#define IFL_RUNTIME_SAMPLE_H

#include <stdint.h>

#include "core/rng.h"

struct ifl_sampling {
    float temperature; /* <= 0: greedy */
    int32_t top_k;     /* <= 0: off */
    float top_p;       /* >= 1: off */
    float min_p;       /* <= 0: off */
    uint64_t seed;
};

struct ifl_sample_cand {
    int32_t id;
    float p;
};

struct ifl_sampler {
    struct ifl_sampling cfg;
    struct ifl_rng rng;
    int32_t n_vocab;
    struct ifl_sample_cand *cand; /* [n_vocab] scratch */
};

/* Checks cfg (IFL_EINVAL with a message naming the field). */
int ifl_sampler_init(struct ifl_sampler *s, const struct ifl_sampling *cfg, int32_t n_vocab,
                     char *err);
void ifl_sampler_deinit(struct ifl_sampler *s);
int32_t ifl_sample_greedy(const float *logits, int32_t n_vocab);
int32_t ifl_sampler_sample(struct ifl_sampler *s, const float *logits);

#endif
