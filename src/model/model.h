/*
 * A loaded model: hyper-parameters from GGUF metadata and views of the
 * weight tensors in the read-only mapping. Immutable after loading: share it
 * between threads freely.
 *
 * Architectures: llama (Llama 2, Llama 3.x with rope_freqs, and Mistral,
 * which llama.cpp's converter writes as llama), qwen2 (Q/K/V biases, NEOX
 * RoPE) and qwen3 (per-head Q/K RMS norm, NEOX RoPE, explicit head_dim);
 * gemma2, gemma3, phi3 and gpt-oss (model_arch.c says what each adds).
 */
#ifndef IFL_MODEL_MODEL_H
#define IFL_MODEL_MODEL_H

#include <stdint.h>

#include "inflight.h"
#include "kernels/types.h"
#include "model/gguf.h"

enum ifl_arch {
    IFL_ARCH_LLAMA = 1,
    IFL_ARCH_QWEN2 = 2,
    IFL_ARCH_QWEN3 = 3,
    IFL_ARCH_QWEN3MOE = 10, /* qwen3 with experts */
    IFL_ARCH_GEMMA2 = 20,   /* model_arch.c */
    IFL_ARCH_GEMMA3 = 21,
    IFL_ARCH_PHI3 = 22,
    IFL_ARCH_GPT_OSS = 30, /* experts with biases, attention sinks (model_arch.c) */
};

struct ifl_hparams {
    enum ifl_arch arch;
    char arch_name[32];
    int32_t n_vocab;
    int32_t n_embd;
    int32_t n_layer;
    int32_t n_head;
    int32_t n_head_kv;
    int32_t head_dim;   /* of queries and keys */
    int32_t head_dim_v; /* of values */
    int32_t n_ff;       /* with experts: each expert's width (n_ff_exp) */
    int32_t n_ctx_train;
    int32_t n_rot; /* dimensions RoPE rotates in each head (<= head_dim) */
    int rope_neox; /* 1: pairs (i, i + n_rot/2); 0: adjacent pairs (2i, 2i+1) */
    float rope_base;
    float rope_pos_scale; /* positions are multiplied by this (linear scaling) */
    float rms_eps;
    /* mixture of experts; n_expert 0: a dense FFN */
    int32_t n_expert;      /* {arch}.expert_count */
    int32_t n_expert_used; /* {arch}.expert_used_count: k of the top-k */
    /* gemma2 / gemma3 / phi3 (model_arch.c); their defaults leave the
     * llama family's pass as it was */
    float emb_scale;     /* token embeddings are multiplied by this (1: none) */
    float attn_scale;    /* query scale before q.k (default 1/sqrt(head_dim)) */
    float attn_softcap;  /* scores -> c tanh(s / c) before the softmax; 0: none */
    float final_softcap; /* likewise for the logits */
    int ffn_gelu;        /* 1: gelu(gate) * up (tanh form), 0: silu(gate) * up */
    int32_t n_swa;       /* sliding window in positions (0: every layer global) */
    int32_t swa_period;  /* layer il slides iff il % period < period - 1; 0: every layer */
    float rope_base_swa; /* the sliding layers' RoPE base and position scale */
    float rope_pos_scale_swa;
    float rope_attn_factor; /* cos and sin multiplied by this (LongRoPE); 1: none */
    int32_t n_ctx_orig;     /* LongRoPE: contexts beyond this take the long factors */
    /* YaRN RoPE scaling (rope.scaling.type "yarn"); yarn_factor 0: none */
    float yarn_factor;     /* rope.scaling.factor: 1 / the frequency scale */
    int32_t yarn_orig_ctx; /* rope.scaling.original_context_length */
    float yarn_beta_fast;  /* the ramp's ends, in rotations over yarn_orig_ctx */
    float yarn_beta_slow;
    int ffn_swiglu_oai; /* gpt-oss: min(g, 7) sigmoid(1.702 g') (clamp(u, +-7) + 1) */
};

/* Whether layer il attends over a sliding window of hp->n_swa positions. */
static inline int ifl_hp_swa(const struct ifl_hparams *hp, int il)
{
    return hp->n_swa > 0 && (hp->swa_period == 0 || il % hp->swa_period < hp->swa_period - 1);
}

/* Whether every layer attends over a sliding window (no global layer). */
static inline int ifl_hp_all_swa(const struct ifl_hparams *hp)
{
    for (int il = 0; il < hp->n_layer; il++)
        if (!ifl_hp_swa(hp, il))
            return 0;
    return hp->n_swa > 0;
}

/* The first cached position a row at pos may read in any layer, all_swa
 * being ifl_hp_all_swa(hp): 0 when a layer attends globally; otherwise
 * the window's start rounded down to the block size bs and to 256
 * positions (an attention pass starts reading at the block or the tile
 * that the window starts in; attention_tiled.c's tiles of 64 divide 256).
 * It never decreases with pos, so a sequence's blocks wholly before it are
 * read by no later row either: the engine gives them back early. */
static inline int32_t ifl_hp_kv_read_from(const struct ifl_hparams *hp, int all_swa, int32_t pos,
                                          int32_t bs)
{
    if (!all_swa || pos < hp->n_swa)
        return 0;
    int32_t w0 = pos - hp->n_swa + 1, a = w0 / 256 * 256, b = w0 / bs * bs;
    return a < b ? a : b;
}

/* A weight matrix: n_out rows of n_in elements of `type`, row_bytes apart.
 * y = W x computes n_out outputs from n_in inputs. */
struct ifl_mat {
    const void *data;
    enum ifl_type type;
    int64_t n_in;
    int64_t n_out;
    size_t row_bytes;
    int x16; /* data holds groups of 16 rows repacked (kernels.h), not rows */
};

struct ifl_layer_weights {
    const float *attn_norm;       /* [n_embd] */
    struct ifl_mat wq;            /* n_embd -> n_head * head_dim */
    struct ifl_mat wk;            /* n_embd -> n_head_kv * head_dim */
    struct ifl_mat wv;            /* n_embd -> n_head_kv * head_dim_v */
    struct ifl_mat wo;            /* n_head * head_dim_v -> n_embd */
    const float *bq, *bk, *bv;    /* qwen2 biases, else NULL */
    const float *q_norm, *k_norm; /* qwen3 per-head norms [head_dim], else NULL */
    const float *attn_post_norm;  /* gemma: on attention's output before the residual, else NULL */
    const float *ffn_norm;        /* [n_embd] */
    const float *ffn_post_norm;   /* gemma: likewise on the feed-forward's output */
    struct ifl_mat w_gate;        /* n_embd -> n_ff */
    struct ifl_mat w_up;          /* n_embd -> n_ff */
    struct ifl_mat w_down;        /* n_ff -> n_embd */
    /* mixture of experts (hp.n_expert > 0; w_gate, w_up, w_down unset):
     * the router, and the experts as one matrix each of n_expert * n_ff
     * (down: n_expert * n_embd) rows, expert e's rows after e - 1's, so
     * its 2-D slice is contiguous (and x16 groups never straddle two) */
    struct ifl_mat gate_inp;  /* n_embd -> n_expert */
    struct ifl_mat gate_exps; /* per expert n_embd -> n_ff */
    struct ifl_mat up_exps;   /* per expert n_embd -> n_ff */
    struct ifl_mat down_exps; /* per expert n_ff -> n_embd */
    /* gpt-oss (else NULL): attention's output bias, each query head's sink
     * logit (a term e^sink in its softmax's denominator), and the router's
     * and experts' biases, expert e's n_ff (down: n_embd) after e - 1's */
    const float *bo;          /* [n_embd] */
    const float *attn_sinks;  /* [n_head] */
    const float *gate_inp_b;  /* [n_expert] */
    const float *gate_exps_b; /* [n_expert][n_ff] */
    const float *up_exps_b;   /* [n_expert][n_ff] */
    const float *down_exps_b; /* [n_expert][n_embd] */
};

/* A rank's share of a model split for tensor parallelism (shard.c); the
 * model's hp then holds this rank's n_head, n_head_kv and n_ff, its
 * output this rank's rows of the vocabulary. */
struct ifl_shard {
    int rank, size;
    int32_t n_head, n_head_kv, n_ff; /* the whole model's */
    int32_t kv0;                     /* this rank's first KV head */
    int32_t ff0;                     /* and first row of n_ff */
    int32_t *v_off;                  /* [size + 1] rank i's output rows [v_off[i], v_off[i + 1]) */
    /* 1: attn_output's columns of a KV-head group do not fall on whole
     * blocks of its type: every rank holds all of wo, the ranks' attention
     * outputs are gathered (a sum of zero-padded rows) and wo is applied
     * whole, with no sum after it */
    int wo_whole;
    void **copies; /* [n_copies] the column-split matrices' rows, the experts' gathered
                      rows and biases, owned */
    const struct ifl_mat **copy_of; /* the matrix each copy is (NULL: biases) */
    int n_copies;
};

struct ifl_model {
    struct ifl_gguf *gguf; /* owned: the mapping all views point into */
    struct ifl_hparams hp;
    struct ifl_mat tok_embd; /* n_vocab rows of n_embd */
    const float *out_norm;   /* [n_embd] */
    struct ifl_mat output;   /* n_embd -> n_vocab; tok_embd when tied */
    int tied_output;
    const float *rope_freqs;          /* [n_rot / 2] divisors of each pair's frequency, or NULL */
    struct ifl_layer_weights *layers; /* [n_layer] */
    /* phi3 LongRoPE's divisors [n_rot / 2] (model_arch.c), or NULL */
    const float *rope_long, *rope_short;
    void *x16; /* the matrices repacked at load (anonymous map or cache file) */
    size_t x16_bytes;
    void *embd_huge; /* tok_embd's copy in huge pages (model.c embd_to_huge), or NULL */
    size_t embd_huge_bytes;
    void **owned; /* small tensors converted to F32 at load */
    int n_owned;
    uint64_t weight_bytes;   /* bytes of all tensors */
    struct ifl_shard *shard; /* NULL: the whole model (tensor parallelism off) */
    struct ifl_units *units; /* NULL: plain sums (ifl_model_sum_units) */
};

/* One process summing as a tensor parallel job of n ranks does
 * (ifl_model_sum_units): unit u of a layer's attn_output and ffn_down is
 * the column slice rank u of n holds, its own matrix (repacked as a
 * rank's is), and the forward pass adds the units' products in rank
 * order, as the job's all-reduce does. */
struct ifl_units {
    int n;
    int wo_split;         /* 0: attn_output whole, as every rank keeps it (ifl_shard.wo_whole) */
    int64_t *o_off;       /* [n + 1] unit u's columns of attn_output: [o_off[u], o_off[u + 1]) */
    int64_t *ff_off;      /* [n + 1] and of ffn_down (experts: of each one's n_ff) */
    struct ifl_mat *wo;   /* [n_layer * n] layer il's unit u at il * n + u (wo_split) */
    struct ifl_mat *down; /* ffn_down, or with experts ffn_down_exps: every expert's columns */
    void **copies;        /* [n_copies] their rows, owned */
    const struct ifl_mat **copy_of;
    int n_copies;
};

#define IFL_REPACK_CACHE_MAX_DEFAULT ((int64_t)32 << 30)

/* How a model loads. All fields may be 0/NULL. */
struct ifl_model_load_opts {
    int n_threads;                /* repacking threads; 0: one per core */
    const char *repack_cache_dir; /* keep repacked matrices in a file there (repack.c) */
    /* the bytes repack_cache_dir's cache files may take in all: after a
     * file is written, the others go least recently used first; 0: the
     * default (IFL_REPACK_CACHE_MAX_DEFAULT), -1: no bound */
    int64_t repack_cache_max;
    ifl_load_progress_fn progress; /* called on the loading thread (inflight.h) */
    void *progress_user;
    /* tensor parallelism: load rank tp_rank's share of tp_size (shard.c);
     * tp_size 0 or 1: the whole model. A shard is repacked in memory
     * (repack_cache_dir is ignored). */
    int tp_rank, tp_size;
    /* one process (tp_size 0 or 1) summing as sum_units ranks do
     * (ifl_model_sum_units); 0 or 1: plain sums */
    int sum_units;
};

/* Opens and validates a GGUF model. Errors name the key or tensor. */
int ifl_model_load(struct ifl_model **out, const char *path, char *err);
int ifl_model_load_with(struct ifl_model **out, const char *path,
                        const struct ifl_model_load_opts *o, char *err);
/* The same from an already opened GGUF, whose ownership moves to the model
 * (also on failure, where it is freed). */
int ifl_model_from_gguf(struct ifl_model **out, struct ifl_gguf *g, char *err);
int ifl_model_from_gguf_with(struct ifl_model **out, struct ifl_gguf *g,
                             const struct ifl_model_load_opts *o, char *err);
/* Repacks the matrices the best kernel table computes faster as x16
 * groups (repack.c), through a repack cache when o names a directory;
 * called by the loaders above. IFL_REPACK=0 in the environment turns it
 * off, to measure what it brings. Failing to map memory or the cache is
 * not an error (the rows stay as they are, or the repack stays in memory,
 * with a notice); only IFL_ENOMEM for the bookkeeping is. */
int ifl_model_repack(struct ifl_model *m, const struct ifl_model_load_opts *o, char *err);
void ifl_model_free(struct ifl_model *m);

/* model_arch.c: the hyper-parameters gemma2, gemma3 and phi3 add, after
 * the common ones are read (defaults for the other architectures); rows
 * [r0, r0 + n) of a matrix as a matrix of their own (phi3's fused ones). */
void ifl_model_arch_defaults(struct ifl_hparams *hp);
int ifl_model_arch_hparams(struct ifl_hparams *hp, const struct ifl_gguf *g, char *err);
void ifl_mat_rows(struct ifl_mat *dst, const struct ifl_mat *src, int64_t r0, int64_t n);

/* shard.c: keeps rank's share of size of a loaded model that is not yet
 * repacked: KV heads [kv0, kv0 + n_head_kv/size) with their query heads
 * (wq, wk, wv and their biases: rows of the mapping; wo: its columns,
 * copied), rows of n_ff on whole blocks of ffn_down's type (gate, up: rows;
 * down: columns, copied), rows of the output (vocabulary in multiples of
 * 16). The token embeddings and norms stay whole. IFL_EUNSUPPORTED with a
 * sentence when size does not divide n_head_kv or n_ff has fewer blocks
 * than ranks. ifl_model_shard_trim frees the copies that repacking made
 * unused. */
int ifl_model_shard(struct ifl_model *m, int rank, int size, char *err);
void ifl_model_shard_trim(struct ifl_model *m);
void ifl_model_shard_free(struct ifl_shard *s);
/* shard.c: splits attn_output and ffn_down of a whole model, not yet
 * repacked, into the column slices n ranks would hold (the same
 * refusals as ifl_model_shard), each its own copied matrix; the whole
 * matrices are no longer read. The units' products added in rank order
 * are then the bits a job of n ranks sums (forward.c). */
int ifl_model_sum_units(struct ifl_model *m, int n, char *err);
void ifl_model_units_trim(struct ifl_model *m);
void ifl_model_units_free(struct ifl_units *u);

#endif
