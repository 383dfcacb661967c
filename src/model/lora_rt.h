/*
 * An adapter in the form the forward pass applies it (forward_lora.c):
 * made from a loaded struct ifl_lora (model/lora.h) by copying A as it is
 * and B transposed, [rank][n_out], so that one vector of the lora_b kernel
 * takes consecutive output columns for one rank index. In F32, or on
 * request in F16 (half the memory, and half the bytes a step reads, which
 * bound its cost: values rounded to 11 significant bits) or in Q8_0 (about
 * a quarter: blocks of 32 along each row of A and of B transposed, one F16
 * scale each, the error of the base's own Q8_0; a matrix whose rows are
 * not whole blocks is held in F16). The embedding's, read one row a token,
 * stays F32. The base model's weights are not touched: they stay quantised
 * and repacked.
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
    /* or in Q8_0 (struct ifl_block_q8_0, rows of whole blocks end to end) */
    void *aq;
    void *btq;
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
