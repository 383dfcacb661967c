/*
 * An EAGLE-3 draft head (Li et al., "EAGLE-3: Scaling up Inference
 * Acceleration of Large Language Models via Training-Time Test", 2025) in
 * llama.cpp's GGUF layout, and its forward pass, one row at a time.
 *
 * The file: general.architecture = "eagle3"; eagle3.extract_layers, three
 * layers of the target; the usual llama keys under "eagle3." (embedding_length,
 * feed_forward_length, attention.head_count, head_count_kv, key_length,
 * layer_norm_rms_epsilon, rope.freq_base); the tensors
 *   fc.weight            3 * n_embd_t -> n_embd   the target's three states, fused
 *   blk.0.attn_norm      [n_embd_t]  RMSNorm of the token's (target) embedding
 *   blk.0.hidden_norm    [n_embd]    RMSNorm of the hidden input
 *   blk.0.attn_q/k/v     n_embd_t + n_embd -> heads   (input: [embedding ; hidden])
 *   blk.0.attn_output, blk.0.ffn_norm, ffn_gate, ffn_up, ffn_down   as in llama
 *   output_norm [n_embd], output n_embd -> n_draft   the draft vocabulary
 *   d2t [n_draft] (I64 or I32): draft id d is target id d + d2t[d]
 * The token embedding is the target's (n_embd_t wide).
 *
 * What a head row computes, at position p, from a token t and a hidden
 * input g (n_embd):
 *   c = [rmsnorm(embed_t(t)) * attn_norm ; rmsnorm(g) * hidden_norm]
 *   x = g + Wo attention(RoPE(Wq c), RoPE(Wk c), Wv c)   over the head's cache
 *   y = x + ffn(rmsnorm(x) * ffn_norm)                   (SwiGLU)
 * y is the row's output hidden state; rmsnorm(y) * output_norm times output
 * gives the logits of the draft vocabulary. Positions line up with the
 * target's shifted by one: the head row at position p takes the target's
 * features at p (g = fc of the target's three states there) and the token
 * at p + 1, and predicts the token at p + 2; a drafting row takes the
 * previous row's y as g and the token that row drafted.
 *
 * The target's state "at layer L" is its residual stream entering layer L
 * (layer 0: the token embedding), as the EAGLE-3 reference code collects
 * it, so L is in 0 .. n_layer - 1.
 *
 * Ownership: struct ifl_eagle3 is immutable after loading (share it); its
 * weights are views into its own mapping, d2t a converted copy, and it
 * borrows the target's token embedding (the target must outlive it).
 * struct ifl_eagle3_work is single-owner scratch; nothing here allocates
 * after creation.
 */
#ifndef IFL_MODEL_EAGLE3_H
#define IFL_MODEL_EAGLE3_H

#include <stdint.h>

#include "model/model.h"

#define IFL_EAGLE3_N_EXTRACT 3

struct ifl_eagle3 {
    struct ifl_gguf *gguf; /* owned: the mapping the weights point into */
    const struct ifl_model *target;
    int32_t n_embd;   /* the head's hidden width */
    int32_t n_embd_t; /* the target's */
    int32_t n_head, n_head_kv, head_dim, n_ff;
    int32_t n_vocab; /* draft vocabulary */
    int32_t extract[IFL_EAGLE3_N_EXTRACT];
    float rms_eps;
    double *inv_freq;          /* [head_dim / 2] RoPE angle per position of each pair */
    struct ifl_mat fc;         /* 3 * n_embd_t -> n_embd */
    const float *emb_norm;     /* [n_embd_t] blk.0.attn_norm */
    const float *hidden_norm;  /* [n_embd] */
    struct ifl_mat wq, wk, wv; /* n_embd_t + n_embd -> n_head (n_head_kv) * head_dim */
    struct ifl_mat wo;         /* n_head * head_dim -> n_embd */
    const float *ffn_norm;     /* [n_embd] */
    struct ifl_mat w_gate, w_up, w_down;
    const float *out_norm; /* [n_embd] */
    struct ifl_mat output; /* n_embd -> n_vocab */
    int32_t *d2t;          /* [n_vocab] owned: the target id of each draft id */
    float *owned[8];       /* 1-D tensors converted to F32 */
    int n_owned;
};

/* Scratch for one row at a time, and the head's draft-vocabulary logits. */
struct ifl_eagle3_work {
    int32_t max_ctx;
    float *c;               /* [n_embd_t + n_embd] the attention input */
    float *x;               /* [n_embd] */
    float *xn;              /* [max(3 * n_embd_t, n_embd_t + n_embd, n_ff, q_dim)] */
    void *act;              /* that, converted for a matmul */
    float *q, *k, *v, *att; /* [q_dim], [kv_dim], [kv_dim], [q_dim] */
    float *gate, *up;       /* [n_ff] */
    float *tmp;             /* [n_embd] */
    float *cs;              /* [head_dim] cos, sin of each pair */
    float *scores;          /* [max_ctx] */
    float *logits;          /* [n_vocab] */
};

/* Opens and validates the head at path against target: a key or a tensor
 * that does not fit (a layer outside the target's, a width that is not the
 * target's, a draft id mapped outside its vocabulary) is an error naming it. */
int ifl_eagle3_load(struct ifl_eagle3 **out, const char *path, const struct ifl_model *target,
                    char *err);
/* The same from an opened GGUF, whose ownership moves to the head (also on failure). */
int ifl_eagle3_from_gguf(struct ifl_eagle3 **out, struct ifl_gguf *g,
                         const struct ifl_model *target, char *err);
void ifl_eagle3_free(struct ifl_eagle3 *h);

/* K and V values the head caches per position. */
static inline int32_t ifl_eagle3_kv_dim(const struct ifl_eagle3 *h)
{
    return h->n_head_kv * h->head_dim;
}

int ifl_eagle3_work_create(struct ifl_eagle3_work **out, const struct ifl_eagle3 *h,
                           int32_t max_ctx);
void ifl_eagle3_work_free(struct ifl_eagle3_work *w);

/* g = fc(feat): feat is the target's three states side by side [3 * n_embd_t]. */
void ifl_eagle3_fuse(const struct ifl_eagle3 *h, struct ifl_eagle3_work *w, const float *feat,
                     float *g);
/* One head row (see above) at RoPE position pos: writes its K and V at
 * cache index `at` (kc/vc + at * kv_dim), attends over the cached indices
 * [lo, end), then anc[0 .. n_anc) (a draft tree node's ancestors), then
 * `at`, in that order (end - lo + n_anc < max_ctx), and writes the output
 * hidden state y [n_embd] (y may be g). A row of the sequence itself:
 * end = at = pos, no ancestors. */
void ifl_eagle3_row(const struct ifl_eagle3 *h, struct ifl_eagle3_work *w, int32_t token,
                    const float *g, int32_t pos, float *kc, float *vc, int32_t lo, int32_t end,
                    const int32_t *anc, int32_t n_anc, int32_t at, float *y);
/* The n (<= 8) most likely next tokens from hidden state y, as target ids,
 * best first (ties: lower draft id first), with their draft log-probs;
 * returns how many (n, or the draft vocabulary if smaller). */
int32_t ifl_eagle3_top(const struct ifl_eagle3 *h, struct ifl_eagle3_work *w, const float *y,
                       int32_t n, int32_t *tok, float *logp);

#endif
