/*
 * An adapter in the form the forward pass applies it (forward_lora.c):
 * made from a loaded struct ifl_lora (model/lora.h). In F32, or on request
 * in F16 (half the memory, values rounded to 11 significant bits), A is
 * copied as it is and B transposed, [rank][n_out], so that one vector of
 * the lora_b kernel takes consecutive output columns for one rank index.
 *
 * In Q8_0 both products run on int8 dot products: A x on the base's own
 * Q8_0 matmul over x quantised to Q8_0 (which the base's Q8_0-input
 * matrices have already made), as llama.cpp runs a Q8_0 adapter, A's
 * rows in Q8_0 blocks (in x16 groups where the base's kernels take them
 * so and the rank is a multiple of 16); and B t by kernels.h lora_b_q8,
 * over t quantised in blocks of 16 along the rank and B's columns in
 * int8 blocks of 16 with an F16 scale each (18 bytes for 16 values: a
 * rank-16 B is one block a column). Against float arithmetic on the same
 * values that is several times fewer instructions and half F16's bytes:
 * a step with four rank-16 adapters on every projection of a 16-sequence
 * decode spent 11 % of its time in the F16 kernels. A B whose rank or
 * n_out is not a multiple of 16 is held in F16 (transposed, as above),
 * and a matrix whose input is not whole blocks of 32 in F16 altogether.
 * The embedding's, read one row a token, stays F32. The base model's
 * weights are not touched: they stay quantised and repacked.
 *
 * Immutable once made: any number of forward passes may read it at once.
 * Its owner (the executor's adapter registry) frees it only when no
 * request uses it.
 */
#ifndef IFL_MODEL_LORA_RT_H
#define IFL_MODEL_LORA_RT_H

#include <stddef.h>
#include <stdint.h>

#include "model/lora.h"
#include "model/model.h"

/* One adapted matrix (rank 0: not adapted; a and bt NULL). */
struct ifl_lora_rt_mat {
    int32_t rank;
    int64_t n_in;
    int64_t n_out;
    float alpha;
    float *a;  /* [rank][n_in]; the embedding's: [n_vocab][rank] */
    float *bt; /* [rank][n_out]: B transposed */
    /* held in F16 instead (a and bt NULL): the same layouts */
    uint16_t *a16;
    uint16_t *bt16;
    /* or, in Q8_0, A as rank rows of n_in in Q8_0 blocks, a_row bytes
     * each, in x16 groups when a_x16 (the rank a multiple of 16); bt16
     * holds B then when the rank is below 16 */
    void *aq;
    int a_x16;
    size_t a_row;
    /* and B in int8, in kernels.h lora_b_q8's groups of 16 columns (the
     * rank and n_out multiples of 16) */
    void *bq;
};

/* How an adapter's matrices are held (the executor's lora_type). */
enum ifl_lora_hold { IFL_LORA_HOLD_F32 = 0, IFL_LORA_HOLD_F16 = 1, IFL_LORA_HOLD_Q8_0 = 2 };

struct ifl_lora_rt {
    const struct ifl_model *base; /* the model it was checked against */
    int32_t n_layer;
    struct ifl_lora_rt_mat *layers; /* [n_layer * IFL_LORA_N_TARGETS], layer-major */
    struct ifl_lora_rt_mat tok_embd;
    struct ifl_lora_rt_mat output;
    int32_t max_rank;  /* the largest rank of any matrix */
    int32_t n_adapted; /* matrices with rank > 0 */
    int32_t n_q8;      /* of them, those held in Q8_0 (lora_rt.h) */
    size_t bytes;      /* heap bytes held */
};

/* Makes the applied form of l for base (hold: enum ifl_lora_hold),
 * checking every adapted matrix's shape against the base's matrix (an
 * error names it). l is only read; its owner frees it. IFL_EINVAL (a
 * mismatch, a rank outside 1..4096, a non-finite value or, in F16 and
 * Q8_0, one beyond F16's range), IFL_ENOMEM. */
int ifl_lora_rt_create(struct ifl_lora_rt **out, const struct ifl_lora *l,
                       const struct ifl_model *base, int hold, char *err);
void ifl_lora_rt_free(struct ifl_lora_rt *r);

/* The user scale a matrix's product is multiplied by (ifl_lora_scale). */
static inline float ifl_lora_rt_scale(const struct ifl_lora_rt_mat *m, float user_scale)
{
    return m->alpha != 0.0f ? user_scale * m->alpha / (float)m->rank : user_scale;
}

#endif
