/*
 * LoRA adapters (llama.cpp's GGUF adapter files) checked against a base
 * model and held in memory as F32, ready for the forward pass.
 *
 * The forward pass adds, for each adapted matrix W of a row that uses the
 * adapter with user scale u: y += s * B (A x), s = ifl_lora_scale(m, u).
 */
#ifndef IFL_MODEL_LORA_H
#define IFL_MODEL_LORA_H

#include <stddef.h>
#include <stdint.h>

struct ifl_model;

/* The per-layer matrices an adapter may adapt (struct ifl_layer_weights). */
enum ifl_lora_target {
    IFL_LORA_WQ = 0,
    IFL_LORA_WK,
    IFL_LORA_WV,
    IFL_LORA_WO,
    IFL_LORA_GATE,
    IFL_LORA_UP,
    IFL_LORA_DOWN,
    IFL_LORA_N_TARGETS,
};

/* One adapted matrix: base n_in -> n_out, rank r. a is [rank][n_in] (row i
 * is the i-th row of A, so A x is rank dot products), b is [n_out][rank].
 * rank 0 (a, b NULL): this matrix is not adapted. */
struct ifl_lora_mat {
    int32_t rank;
    int64_t n_in;
    int64_t n_out;
    float alpha; /* the adapter's adapter.lora.alpha (0: none) */
    float *a;
    float *b;
};

struct ifl_lora {
    char path[1024];
    char arch[32];
    float alpha;                 /* adapter.lora.alpha; 0 when absent */
    int32_t n_layer;             /* the base's */
    struct ifl_lora_mat *layers; /* [n_layer * IFL_LORA_N_TARGETS], layer-major */
    /* the embedding: n_in is n_vocab, n_out n_embd; a is [n_vocab][rank]
     * (the file's lora_a is stored transposed), so token t adds
     * s * B a[t]; b is [n_embd][rank] */
    struct ifl_lora_mat tok_embd;
    struct ifl_lora_mat output; /* the LM head, n_embd -> n_vocab */
    int32_t n_adapted;          /* matrices with rank > 0 */
    size_t bytes;               /* heap bytes this adapter holds */
};

/* Reads path, checks it against base (architecture, every name and shape,
 * the types F32/F16/BF16/Q8_0), converts to F32. Errors name the tensor
 * or key: IFL_EFORMAT (malformed or mismatched), IFL_EUNSUPPORTED (a type),
 * IFL_EIO, IFL_ENOMEM. The file is read with the bounded GGUF reader. */
int ifl_lora_load(struct ifl_lora **out, const char *path, const struct ifl_model *base, char *err);
void ifl_lora_free(struct ifl_lora *l);

/* The factor one adapted matrix's B (A x) is multiplied by for a user
 * scale: user * alpha / rank, or user when alpha is 0 (llama.cpp's rule). */
static inline float ifl_lora_scale(const struct ifl_lora_mat *m, float user_scale)
{
    return m->alpha != 0.0f ? user_scale * m->alpha / (float)m->rank : user_scale;
}

/* The adapted matrix for layer il and target t (rank 0 when not adapted). */
static inline const struct ifl_lora_mat *ifl_lora_layer_mat(const struct ifl_lora *l, int il,
                                                            enum ifl_lora_target t)
{
    return &l->layers[(size_t)il * IFL_LORA_N_TARGETS + (size_t)t];
}

#endif
