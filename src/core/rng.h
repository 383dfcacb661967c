/*
 * A small seeded random generator (xoshiro256** seeded through splitmix64).
 * Single-owner state: one per request or per test, never shared between
 * threads without a lock.
 */
#ifndef IFL_CORE_RNG_H
#define IFL_CORE_RNG_H

#include <stdint.h>

struct ifl_rng {
    uint64_t s[4];
};

static inline uint64_t ifl_splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline void ifl_rng_seed(struct ifl_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = ifl_splitmix64(&seed);
}

static inline uint64_t ifl_rng_next(struct ifl_rng *r)
{
    uint64_t *s = r->s;
    uint64_t x = s[1] * 5;
    uint64_t result = ((x << 7) | (x >> 57)) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = (s[3] << 45) | (s[3] >> 19);
    return result;
}

/* Uniform in [0, 1) with 24 bits of precision. */
static inline float ifl_rng_uniform(struct ifl_rng *r)
{
    return (float)(ifl_rng_next(r) >> 40) * (1.0f / 16777216.0f);
}

/* Standard normal by Box-Muller (for tests and synthetic weights). */
float ifl_rng_normal(struct ifl_rng *r);

#endif
