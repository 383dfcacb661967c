/*
 * A plain reference forward pass for tests: the ground truth the engine's
 * forward pass is compared with. Written from the architecture descriptions
 * (llama, qwen2, qwen3, gemma2, gemma3, phi3), independently of src/model/forward.c.
 *
 * Weights are dequantised to float with ifl_kernels_ref()->dequant, and
 * every activation is kept in double, so the result is what the weights
 * compute exactly (up to double rounding), with none of the engine's
 * activation quantisation. One sequence, a contiguous KV cache, slow on
 * purpose: clarity over speed.
 */
#ifndef IFL_TESTS_REFFWD_H
#define IFL_TESTS_REFFWD_H

#include <stdint.h>

/* Evaluates tokens[0..n) as one sequence at positions 0..n-1 and writes
 * logits [n][n_vocab] (row i predicts the token after tokens[i]). Returns 0,
 * or a negative status with a sentence in err (may be NULL, IFL_ERR_LEN
 * bytes). *n_vocab_out (may be NULL) receives n_vocab; pass logits NULL to
 * learn it without evaluating anything. */
int ref_forward(const char *gguf_path, const int32_t *tokens, int n, float *logits,
                int *n_vocab_out, char *err);

/* ref_forward for a context of n_ctx positions, which decides phi3's
 * LongRoPE factors (long beyond rope.scaling.original_context_length);
 * ref_forward and ref_forward_lora take 512, llama.cpp's n_ctx in the
 * reference data. */
int ref_forward_ctx(const char *gguf_path, int n_ctx, const int32_t *tokens, int n, float *logits,
                    int *n_vocab_out, char *err);

/* A LoRA adapter (llama.cpp's GGUF adapter file) and its user scale. */
struct ref_lora {
    const char *path;
    double scale;
};

/* ref_forward with adapters applied at run time, in double: each adapted
 * matrix computes y = W x + sum over adapters of s (B (A x)), where
 * s = scale * alpha / r, or scale alone when the adapter's alpha is 0; the
 * embedding adds s B a[token]. A tied base's LM head is not adapted by a
 * token_embd adapter (only the lookup is). The adapter files are read by
 * code of this file's own, not src/model/lora.c, so the two check each
 * other; errors name the tensor. */
int ref_forward_lora(const char *gguf_path, const struct ref_lora *loras, int n_loras,
                     const int32_t *tokens, int n, float *logits, int *n_vocab_out, char *err);

/* The experts of a mixture-of-experts model, per layer l, position i and
 * choice c at [(l * n + i) * k + c] (k = expert_used_count), margins at
 * [l * n + i]. Every pointer may be NULL. */
struct ref_routes {
    /* the experts to use (their weights: the softmax renormalised over
     * them), in place of the pass's own choice */
    const int32_t *force;
    int32_t *chosen; /* out: the pass's own choice, largest first (forced or not) */
    double *margin;  /* out: log(p_k / p_k+1) of that choice, how far the last
                        chosen stood above the best left out (inf when k = n_expert) */
};

/* ref_forward with the routes of rt (a dense model ignores them). A
 * forward pass with rounded activations may route otherwise where a
 * margin is small: tests force its routes on the reference to compare the
 * rest, and compare the routes where the margins are clear. */
int ref_forward_routes(const char *gguf_path, const int32_t *tokens, int n, float *logits,
                       const struct ref_routes *rt, char *err);

#endif
