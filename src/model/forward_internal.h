/*
 * Shared by the forward pass's files: forward.c (creation, the matmuls and
 * the step) and attention.c (storing K and V, and attending over the
 * cache). The forward's state, one step's job, and what each file calls
 * of the other. Not part of the model module's interface.
 */
#ifndef IFL_MODEL_FORWARD_INTERNAL_H
#define IFL_MODEL_FORWARD_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/kernels.h"
#include "model/forward.h"

/* What one thread's share of a matmul group has given out (see mm_chunks):
 * units taken from its front (low 32 bits) and from its back (high 32),
 * alone on its cache line. Zero before the step. */
struct mm_region {
    _Alignas(64) _Atomic uint64_t taken;
};

struct ifl_fwd {
    const struct ifl_model *m;
    struct ifl_kv_store *kv;
    const struct ifl_kernels *kn;
    struct ifl_pool *pool;
    int owns_pool; /* 0: the pool is another forward's (ifl_fwd_config.pool) */
    /* a step whose rows times the model's weight bytes is at most this runs
     * on the calling thread alone (ifl_forward) */
    double solo_bytes;
    int act_pre; /* 0: the kernels' act_pre is not used (IFL_ACT_PRE=0, to measure) */
    int32_t max_rows;
    int32_t max_ctx;
    int32_t max_in;   /* widest matmul input */
    double *inv_freq; /* [n_rot/2] angle per position of each rotated pair */
    /* the same for sliding-window layers, when their RoPE differs (gemma3:
     * another base), else NULL; and their cos and sin, [R][n_rot/2][2] */
    double *inv_freq_swa;
    float *rope_cs_swa;
    float rope_mscale; /* cos and sin multiplied by this (phi3 LongRoPE's attn_factor) */

    /* scratch, sized at creation (R = max_rows) */
    float *x;  /* [R][n_embd] residual stream */
    float *xn; /* [R][max_in] matmul input */
    void *act; /* [R][act_row_bytes] matmul input converted for the kernels */
    size_t act_row_bytes;
    float *q;          /* [R][n_head * head_dim] */
    float *k;          /* [R][n_head_kv * head_dim] */
    float *v;          /* [R][n_head_kv * head_dim_v] */
    float *att;        /* [R][n_head * head_dim_v] */
    float *gate;       /* [R][n_ff] */
    float *up;         /* [R][n_ff] */
    float *tmp;        /* [R][n_embd] */
    float *rope_cs;    /* [R][n_rot/2][2] cos, sin */
    float *scores;     /* [n_threads][score_heads][score_ld] */
    size_t score_ld;   /* max_ctx rounded up to a cache line, plus one: rows of
                          neighbouring heads do not share L1 sets */
    int score_heads;   /* query heads one ifl_fwd_attention_blocks pass holds scores for */
    long score_floats; /* and the scores it keeps, when more than one KV head fits */
    int run_rows;      /* rows of one sequence that share an ifl_fwd_attention_blocks pass */
    float *att_q;      /* [n_threads][score_heads][head_dim] such a pass's queries */
    float *att_o;      /* [n_threads][score_heads][head_dim_v] and its outputs */
    void *att_q8;      /* [n_threads][score_heads][head_dim / 32] Q8_0 blocks: the tiled
                          attention's queries quantised, for a Q8_0 cache */
    float *kvtmp;      /* [n_threads][kvtmp_len] a Q8_0 cache's head, dequantised */
    size_t kvtmp_len;
    int32_t *out_rows;        /* [R] rows whose logits are wanted */
    struct mm_region *mm_reg; /* [n_mm_groups][n_threads] each thread's share of a group */
    int n_mm_groups;
    int32_t *run_start; /* [R + 1] the step's attention runs (ifl_fwd_attn_run): run i is rows
                           [run_start[i], run_start[i + 1]) */
    int32_t n_runs;
    /* [n_threads + 1] thread t's share: runs [run_share[t], run_share[t + 1]) */
    int32_t *run_share;
    struct mm_region *att_claim; /* [n_layer][n_threads] runs taken from each share */
    /* LoRA (forward_lora.c): the step's rows grouped by adapter, grown
     * when a step needs more. List s (0: the batch's rows, 1: the logits
     * rows) of adapter i < lora_cap: lora_n[s * lora_cap + i] rows, at
     * lora_rows + (s * lora_cap + i) * R, with their user scales at the
     * same place of lora_user. */
    int32_t lora_cap;
    int32_t *lora_n;
    int32_t *lora_rows;
    float *lora_user;
    float *lora_t; /* [lora_t_cap] a matmul group's A x, per matrix, adapter, row */
    size_t lora_t_cap;
    float *lora_sc; /* [n_threads][R] the scales of one lora_b call */
    /* Q8_0 adapters' scratch, lora_q_stride bytes a thread: gathered Q8_0
     * inputs, quantised t rows and products (forward_lora.c) */
    char *lora_q;
    size_t lora_q_stride;
    /* tensor parallelism (forward_tp.c), when the model is a shard */
    struct ifl_comm *comm;
    double comm_timeout_s;
    const struct ifl_shard *shard; /* NULL: the whole model, no collectives */
    float *tp_logits;              /* [R][this rank's vocabulary rows] */
    float *tp_recv;                /* [R][n_vocab] rank 0's gathered logits, by rank */
    size_t *tp_counts;             /* [size] bytes each rank sends in a gather */
    float *att_full;               /* [R][whole n_head * head_dim_v] (shard->wo_whole) */
    /* summing as tensor parallel ranks do (model->units): a unit's input
     * columns, and the products of units 1.. (unit 0's is the output) */
    float *u_in;              /* [R][the widest unit] */
    float *u_out;             /* [units - 1][R][n_embd] */
    struct ifl_mat att_shape; /* F32 of this rank's heads: what attention converts for */
    struct ifl_fwd_moe *moe;  /* the experts' scratch (forward_moe.c); NULL: dense */
    /* A step of fewer rows than threads (a decode) runs each row's
     * element-wise phases on every thread, into buffers of its own
     * (forward.c, "rows on every thread"): thread t > 0's residual stream,
     * matmul input and its conversion at rep_x, rep_xn, rep_act + (t - 1)
     * * rep_rows rows; every thread's FFN product and sub-layer output at
     * rep_g, rep_t + t * rep_rows rows. rep_rows = threads - 1 (0: none). */
    int32_t rep_rows;
    float *rep_x;  /* [threads - 1][rep_rows][n_embd] */
    float *rep_xn; /* [threads - 1][rep_rows][max_in] */
    char *rep_act; /* [threads - 1][rep_rows][act_row_bytes] */
    float *rep_g;  /* [threads][rep_rows][n_ff] */
    float *rep_t;  /* [threads][rep_rows][n_embd] */
};

/* What one step's threads share. */
struct job {
    struct ifl_fwd *f;
    const struct ifl_batch *b;
    float *logits;
    int32_t n_out; /* rows that want logits */
    int tp_rc;     /* a collective failed (thread 0 sets, before a barrier) */
    char *tp_err;  /* [IFL_ERR_LEN] and said why */
};

/* Per-thread memo of what `act` holds, so q, k and v convert xn once.
 * Every thread runs the same phases, so all copies agree. */
struct act_memo {
    const float *src;
    enum ifl_type type;
    int32_t nr;
    char *buf; /* where the converted rows are: NULL for act (the shared one) */
};

/* ifl_fwd_attention_blocks: query heads per pass at most (a wider KV group goes
 * through ifl_fwd_attention()), and by default the scores one pass keeps (256 KiB,
 * within L2) when the context allows more than one KV head */
#define ATT_QHEADS 64
/* query vectors one attention kernel tile takes (x86_heads.h): a pass over
 * a sequence's consecutive rows (a prompt) takes that many, rows times the
 * KV group, so each cached key and value is converted once for all of them */
#define ATT_TILE_QUERIES 4
#define ATT_SCORE_FLOATS 65536L

/* Whether row r of b is a tree row (forward.h), and the cache place of
 * the position t (<= pos[r]) it attends to. */
static inline int ifl_fwd_tree_row(const struct ifl_batch *b, long r)
{
    return b->kv_pos && b->att_prefix[r] <= b->pos[r];
}

static inline int32_t ifl_fwd_place(const struct ifl_batch *b, long r, int32_t t)
{
    return b->kv_pos && t >= b->att_prefix[r]
               ? b->tree_path[b->tree_off[r] + (t - b->att_prefix[r])]
               : t;
}

/* forward.c */

void ifl_fwd_quant_rows(struct job *j, struct act_memo *memo, const struct ifl_mat *w,
                        const float *x, int32_t nr, long lo, long hi);
/* The format w's kernel reads its input rows in (IFL_TYPE_F32: the float
 * rows themselves, *q NULL) and the function that converts floats into
 * it: the act type of w's type, or for x16 weights whose table converts
 * once (kernels.h act_pre) w's own type, *q the table's act_pre. */
enum ifl_type ifl_fwd_act(const struct ifl_fwd *f, const struct ifl_mat *w, ifl_quant_fn *q);

/* forward_arch.c (gemma2, gemma3, phi3; GeGLU is the kernels' geglu):
 * x[i] = cap tanh(x[i] / cap); the first position
 * a query at pos attends to in layer il (its sliding window's start, 0
 * for a global layer); the frequencies of forward.c's RoPE tables. */
void ifl_fwd_softcap(float *x, int n, float cap);
static inline int32_t ifl_fwd_win0(const struct ifl_hparams *hp, int il, int32_t pos)
{
    return ifl_hp_swa(hp, il) && pos >= hp->n_swa ? pos - hp->n_swa + 1 : 0;
}
int ifl_fwd_rope_setup(struct ifl_fwd *f, const struct ifl_fwd_config *cfg);

/* forward_lora.c: the groups' targets tg[0..nt) (enum ifl_lora_target)
 * of layer il, or il -1 for the output (nt 1). segments runs before the
 * step; lora_a after the barrier that completes x (rows ldx apart; memo
 * says what `act` holds, Q8_0 adapters' input when it is x in Q8_0); lora_b
 * after the base matmul's barrier (y[m] rows ldy[m] apart), and a barrier
 * must follow it; lora_embed on a row after its embedding lookup. */
int ifl_fwd_lora_segments(struct ifl_fwd *f, const struct ifl_batch *b, int32_t n_out, char *err);
int ifl_fwd_lora_any(const struct ifl_fwd *f, const struct ifl_batch *b, int il, const int *tg,
                     int nt);
void ifl_fwd_lora_a(struct job *j, int ith, int nth, int il, const int *tg, int nt, const float *x,
                    size_t ldx, const struct act_memo *memo);
void ifl_fwd_lora_b(struct job *j, int ith, int nth, int il, const int *tg, int nt, float *const *y,
                    const size_t *ldy);
/* lora_b over this thread's rows [lo, hi) only, every column: a thread
 * that goes on with its own rows needs no barrier after it. */
void ifl_fwd_lora_b_rows(struct job *j, int ith, int il, const int *tg, int nt, float *const *y,
                         const size_t *ldy, long lo, long hi);
void ifl_fwd_lora_embed(struct job *j, long r);

/* forward_tp.c: the collectives of a shard's step, each between barriers
 * (thread 0 calls MPI while the others wait). reduce sums buf[0..n) over
 * the ranks; att gathers the ranks' attention outputs into att_full
 * (wo_whole); logits gathers the output rows into j->logits on rank 0. */
int ifl_fwd_tp_create(struct ifl_fwd *f, const struct ifl_fwd_config *cfg, char *err);
void ifl_fwd_tp_free(struct ifl_fwd *f);
void ifl_fwd_tp_reduce(struct job *j, int ith, float *buf, size_t n);
void ifl_fwd_tp_att(struct job *j, int ith, int32_t nr);
void ifl_fwd_tp_logits(struct job *j, int ith, int nth);

/* forward_moe.c: the experts' scratch, made when the model has experts
 * (nothing otherwise); and a layer's mixture-of-experts FFN over the
 * step's rows, from the normed input in xn to the experts' weighted sum
 * in tmp for this thread's rows [lo, hi) (the caller adds it to the
 * residual). Every thread calls it; it ends without a barrier. */
int ifl_fwd_moe_create(struct ifl_fwd *f, char *err);
void ifl_fwd_moe_free(struct ifl_fwd *f);
void ifl_fwd_moe(struct job *j, int ith, int nth, int il, long lo, long hi);
/* Tests: from the next step on, each step writes the experts every row
 * chose, largest logit first, to sel[(il * n_rows + r) * k + i] (k =
 * n_expert_used); NULL stops it. */
void ifl_fwd_moe_trace(struct ifl_fwd *f, int32_t *sel);

/* attention.c */

void ifl_fwd_store_kv(struct job *j, int il, long r0, long r1, int h0, int h1);
long ifl_fwd_attn_run(const struct ifl_fwd *f, const struct ifl_batch *b, long r);
int ifl_fwd_attn_blocked(const struct ifl_fwd *f);
void ifl_fwd_attention_blocks(struct job *j, int ith, int nth, int il, struct act_memo *memo,
                              const struct ifl_mat *wo, int split, int kh0, int kh1);
void ifl_fwd_attention(struct job *j, int ith, int nth, int il, struct act_memo *memo,
                       const struct ifl_mat *wo);

/* attention_tiled.c: whether the tiled attention takes this model and
 * cache (then every row of ifl_fwd_attention_blocks goes through it, and
 * runs hold score_heads / group rows); and one run [r, r + nr) of the
 * step on KV heads [kh0, kh1), into f->att. */
int ifl_fwd_attn_tiled(const struct ifl_fwd *f);
void ifl_fwd_attend_run(struct job *j, int ith, int il, long r, long nr, int kh0, int kh1);

#endif
