/*
 * Reference forward pass (see reffwd.h). A decoder-only transformer with
 * pre-RMSNorm blocks:
 *
 *   x = token_embd[token]
 *   per layer:
 *     h = rmsnorm(x) * attn_norm
 *     q, k, v = Wq h (+bq), Wk h (+bk), Wv h (+bv)        qwen2: biases
 *     q, k = rmsnorm per head * q_norm / k_norm           qwen3
 *     q, k = RoPE(pos)                                    llama: pairs (2i, 2i+1)
 *                                                         qwen2/3: pairs (i, i + n_rot/2)
 *     per query head h, with kv head h / (n_head / n_head_kv):
 *       o_h = sum_j softmax_j(q_h . k_j / sqrt(head_dim)) v_j,  j <= pos
 *     x += Wo o
 *     h = rmsnorm(x) * ffn_norm
 *     x += Wdown (silu(Wgate h) * Wup h)
 *       with experts (qwen3moe; llama with expert_count, i.e. Mixtral):
 *       p = softmax(Wrouter h) over the n_expert experts; S = the
 *       expert_used_count largest p (the lowest id on a tie);
 *       x += sum over e in S of (p_e / sum_{S} p) Wdown_e (silu(Wgate_e h) * Wup_e h)
 *       where expert e's matrices are slice e of the 3-D ffn_*_exps tensors
 *   logits = Woutput (rmsnorm(x) * output_norm)          Woutput = token_embd when tied
 *
 * RoPE of pair i at position p turns by p * base^(-2i / n_rot) / f[i], where
 * f is rope_freqs.weight when present (Llama 3.1 scaling) and 1 otherwise.
 * rmsnorm(x) = x / sqrt(mean(x^2) + eps).
 *
 * Weight matrices are stored as ggml lays them out: ne[0] is the input
 * width, so row o of a [n_in, n_out] tensor holds the weights of output o.
 *
 * gemma2 / gemma3 (from llama.cpp's graphs, src/models/gemma2.cpp, gemma3.cpp):
 *   x = token_embd[token] * sqrt(n_embd)
 *   per layer: as above, but q scaled by 1/sqrt(head_dim) (27B: n_embd/n_head)
 *     for the score; gemma3 norms each head of q and k; gemma2 caps each
 *     score: s = c tanh(s / c); a sliding layer (il % period < period - 1,
 *     when there is a window) lets position i see j > i - n_swa only, and
 *     rotates with its own base (gemma3: rope.freq_base_swa, else 10000);
 *     x += rmsnorm(Wo o) * post_attention_norm
 *     x += rmsnorm(Wdown (gelu(Wgate h) * Wup h)) * post_ffw_norm,
 *       gelu(g) = g/2 (1 + tanh(sqrt(2/pi) (g + 0.044715 g^3)))
 *   logits capped likewise when final_logit_softcapping says (gemma2: 30).
 * phi3: Wq, Wk, Wv are the rows of attn_qkv, Wgate and Wup those of ffn_up;
 *   RoPE divides by rope_factors_long when the context (ref_forward_ctx's
 *   n_ctx) exceeds rope.scaling.original_context_length, else by
 *   rope_factors_short, and both rotated vectors are scaled by
 *   rope.scaling.attn_factor.
 *
 * gpt-oss (llama.cpp's src/models/openai-moe.cpp): q, k, v and Wo with
 *   biases; head h's softmax has one more term in its denominator, e^(z_h)
 *   for the sink z_h (attn_sinks), a column with no value; sliding layers
 *   il % period < period - 1 (pattern, default 2) over attention.sliding_window;
 *   the pre-FFN norm is post_attention_norm; the experts: logits = Wr h +
 *   br, the top k by logit, weights their softmax, each expert
 *   Wd_e (swiglu_oai(Wg_e h + bg_e, Wu_e h + bu_e)) + bd_e with
 *   swiglu_oai(g, u) = min(g, 7) / (1 + e^(-1.702 min(g, 7))) (clamp(u, -7, 7) + 1).
 * YaRN (rope.scaling.type "yarn", any architecture): pair i's frequency f
 *   becomes f / factor (1 - r_i) + f r_i, r_i = 1 - clamp((i - lo) / (hi - lo),
 *   0, 1), lo = max(0, floor(d(beta_fast))), hi = min(n_rot - 1,
 *   ceil(d(beta_slow))), d(b) = n_rot ln(orig / (2 pi b)) / (2 ln base), and
 *   cos and sin are multiplied by 1 + ln(factor) / 10 (ggml's rope_yarn).
 *
 * LoRA adapters (ref_forward_lora): an adapted matrix W with lora_a
 * [n_in, r] and lora_b [r, n_out] computes W x + s B (A x) in double; the
 * embedding's lora_a is stored transposed, [r, n_vocab], so token t adds
 * s B a[t]. The product B A is never formed: the adapter stays a separate
 * term, as a runtime adapter is, and nothing is rounded to float.
 */
#include "reffwd.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "kernels/kernels.h"
#include "kernels/types.h"
#include "model/gguf.h"

/* One adapter's term on a matrix: a [r][n_in] (token_embd: [n_vocab][r]),
 * b [n_out][r] (token_embd: [n_embd][r]), times s. */
struct rlora {
    float *a, *b;
    int64_t r;
    double s;
    struct rlora *next;
};

/* A weight dequantised to float: rows of n_in values, one per output. */
struct rmat {
    float *w; /* [n_out][n_in] */
    int64_t n_in, n_out;
    struct rlora *lora; /* adapters, applied in this order */
};

struct rlayer {
    struct rmat attn_norm, q, k, v, o, ffn_norm, gate, up, down;
    struct rmat post_attn, post_ffn;     /* gemma */
    struct rmat bq, bk, bv;              /* qwen2 */
    struct rmat q_norm, k_norm;          /* qwen3 */
    struct rmat router;                  /* experts: ffn_gate_inp, [n_expert][n_embd] */
    struct rmat *gate_e, *up_e, *down_e; /* [n_expert] each expert's matrices */
    /* gpt-oss: Wo's bias, the sinks, router and expert biases ([n_expert][n]) */
    struct rmat bo, sinks, router_b, gate_b, up_b, down_b;
};

struct rmodel {
    char arch[32];
    int64_t n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, head_dim_v, n_ff, n_rot;
    int64_t n_expert, n_expert_used; /* 0: a dense FFN */
    double eps, base;
    int neox;
    struct rmat tok, out_norm, output, rope_freqs;
    struct rlayer *layers;
    /* gemma2 / gemma3 / phi3 */
    int gemma, gelu;
    double emb_scale, q_scale, attn_cap, final_cap, base_swa, attn_factor;
    int64_t n_swa, swa_period, n_ctx_orig;
    struct rmat rope_long, rope_short;
    const float *rope_div; /* the factors RoPE divides by, or NULL */
    int oss;               /* gpt-oss */
    double yarn_factor;    /* 0: no YaRN */
    int64_t yarn_orig;
    double yarn_beta_fast, yarn_beta_slow;
};

static void rmat_free(struct rmat *m)
{
    free(m->w);
    m->w = NULL;
    while (m->lora) {
        struct rlora *nx = m->lora->next;
        free(m->lora->a);
        free(m->lora->b);
        free(m->lora);
        m->lora = nx;
    }
}

static void rmodel_free(struct rmodel *m)
{
    if (!m)
        return;
    if (m->output.w == m->tok.w) /* tied models share the table */
        m->output.w = NULL;
    rmat_free(&m->output);
    rmat_free(&m->tok);
    rmat_free(&m->out_norm);
    rmat_free(&m->rope_freqs);
    rmat_free(&m->rope_long);
    rmat_free(&m->rope_short);
    if (m->layers) {
        for (int64_t l = 0; l < m->n_layer; l++) {
            struct rlayer *L = &m->layers[l];
            struct rmat *all[] = {&L->attn_norm, &L->q,     &L->k,      &L->v,        &L->o,
                                  &L->ffn_norm,  &L->gate,  &L->up,     &L->down,     &L->bq,
                                  &L->bk,        &L->bv,    &L->q_norm, &L->k_norm,   &L->post_attn,
                                  &L->post_ffn,  &L->bo,    &L->sinks,  &L->router_b, &L->gate_b,
                                  &L->up_b,      &L->down_b};
            for (size_t i = 0; i < sizeof all / sizeof all[0]; i++)
                rmat_free(all[i]);
            rmat_free(&L->router);
            for (int64_t e = 0; e < m->n_expert; e++) {
                if (L->gate_e)
                    rmat_free(&L->gate_e[e]);
                if (L->up_e)
                    rmat_free(&L->up_e[e]);
                if (L->down_e)
                    rmat_free(&L->down_e[e]);
            }
            free(L->gate_e);
            free(L->up_e);
            free(L->down_e);
        }
    }
    free(m->layers);
}

/* Loads tensor `name` of shape [n_in, n_out] (n_out 1 for vectors) as float.
 * optional: an absent tensor leaves m->w NULL and succeeds. */
static int load_mat(const struct ifl_gguf *g, const char *name, int64_t n_in, int64_t n_out,
                    int optional, struct rmat *m, char *err)
{
    const struct ifl_gguf_tensor *t = ifl_gguf_find_tensor(g, name);
    m->w = NULL;
    m->n_in = n_in;
    m->n_out = n_out;
    if (!t) {
        if (optional)
            return 0;
        return ifl_err(err, IFL_EFORMAT, "reffwd: tensor '%s' missing", name);
    }
    int64_t want_dims = n_out == 1 ? 1 : 2;
    if (t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != 1 || t->ne[3] != 1 ||
        (t->n_dims != want_dims && !(t->n_dims == 2 && n_out == 1)))
        return ifl_err(err, IFL_EFORMAT,
                       "reffwd: tensor '%s' has shape [%lld, %lld], want [%lld, %lld]", name,
                       (long long)t->ne[0], (long long)t->ne[1], (long long)n_in, (long long)n_out);
    const struct ifl_type_info *ti = ifl_type_info(t->type);
    ifl_dequant_fn dq = t->type < IFL_TYPE_COUNT ? ifl_kernels_ref()->dequant[t->type] : NULL;
    if (!ti || !dq || n_in % ti->blck)
        return ifl_err(err, IFL_EFORMAT, "reffwd: tensor '%s': type %u not supported", name,
                       t->type);
    size_t row = ifl_type_row_size((enum ifl_type)t->type, n_in);
    if (row * (size_t)n_out > t->nbytes)
        return ifl_err(err, IFL_EFORMAT, "reffwd: tensor '%s': data too short", name);
    m->w = malloc((size_t)(n_in * n_out) * sizeof(float));
    if (!m->w)
        return ifl_err(err, IFL_ENOMEM, "reffwd: out of memory for '%s'", name);
    for (int64_t r = 0; r < n_out; r++)
        dq((const uint8_t *)t->data + (size_t)r * row, m->w + r * n_in, n_in);
    return 0;
}

/* Loads the n_exp slices of the 3-D tensor `name` [n_in, n_out, n_exp]
 * as n_exp float matrices into out[0..n_exp). */
static int load_experts(const struct ifl_gguf *g, const char *name, int64_t n_in, int64_t n_out,
                        int64_t n_exp, struct rmat **out, char *err)
{
    const struct ifl_gguf_tensor *t = ifl_gguf_find_tensor(g, name);
    if (!t)
        return ifl_err(err, IFL_EFORMAT, "reffwd: tensor '%s' missing", name);
    if (t->n_dims != 3 || t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != n_exp)
        return ifl_err(err, IFL_EFORMAT,
                       "reffwd: tensor '%s' has shape [%lld, %lld, %lld], want [%lld, %lld, %lld]",
                       name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                       (long long)n_in, (long long)n_out, (long long)n_exp);
    ifl_dequant_fn dq = t->type < IFL_TYPE_COUNT ? ifl_kernels_ref()->dequant[t->type] : NULL;
    const struct ifl_type_info *ti = ifl_type_info(t->type);
    if (!ti || !dq || n_in % ti->blck)
        return ifl_err(err, IFL_EFORMAT, "reffwd: tensor '%s': type %u not supported", name,
                       t->type);
    size_t row = ifl_type_row_size((enum ifl_type)t->type, n_in);
    if (row * (size_t)(n_out * n_exp) > t->nbytes)
        return ifl_err(err, IFL_EFORMAT, "reffwd: tensor '%s': data too short", name);
    *out = calloc((size_t)n_exp, sizeof **out);
    if (!*out)
        return ifl_err(err, IFL_ENOMEM, "reffwd: out of memory for '%s'", name);
    for (int64_t e = 0; e < n_exp; e++) {
        struct rmat *m = &(*out)[e];
        m->n_in = n_in;
        m->n_out = n_out;
        m->w = malloc((size_t)(n_in * n_out) * sizeof(float));
        if (!m->w)
            return ifl_err(err, IFL_ENOMEM, "reffwd: out of memory for '%s'", name);
        for (int64_t r = 0; r < n_out; r++)
            dq((const uint8_t *)t->data + (size_t)(e * n_out + r) * row, m->w + r * n_in, n_in);
    }
    return 0;
}

/* Cuts a loaded [n_in, na + nb + nc] matrix into its first na rows, the
 * next nb and the last nc (c may be NULL when nc is 0); frees it. */
static int split_rows(struct rmat *all, struct rmat *a, int64_t na, struct rmat *b, int64_t nb,
                      struct rmat *c, int64_t nc, char *err)
{
    struct rmat *parts[3] = {a, b, c};
    int64_t rows[3] = {na, nb, nc}, at = 0;
    int rc = 0;
    for (int i = 0; i < 3 && !rc; i++) {
        if (!parts[i])
            continue;
        parts[i]->n_in = all->n_in;
        parts[i]->n_out = rows[i];
        parts[i]->w = malloc(sizeof(float) * (size_t)(all->n_in * rows[i]));
        if (!parts[i]->w)
            rc = ifl_err(err, IFL_ENOMEM, "reffwd: out of memory");
        else
            memcpy(parts[i]->w, all->w + at * all->n_in,
                   sizeof(float) * (size_t)(all->n_in * rows[i]));
        at += rows[i];
    }
    rmat_free(all);
    return rc;
}

static int get_int(const struct ifl_gguf *g, const char *arch, const char *suffix, int64_t def,
                   int64_t *out, char *err)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int rc = ifl_gguf_get_int(g, key, out, err);
    if (rc == IFL_ENOTFOUND && def >= 0) {
        *out = def;
        return 0;
    }
    if (rc == IFL_ENOTFOUND)
        return ifl_err(err, rc, "reffwd: key '%s' missing", key);
    if (rc == 0 && (*out <= 0 || *out > (1 << 24)))
        return ifl_err(err, IFL_EFORMAT, "reffwd: key '%s' out of range", key);
    return rc;
}

/* The sliding-window period as llama.cpp's gemma loaders take it: a
 * scalar in uint32 (0: every layer slides); an array is passed over. */
static int get_pattern(const struct ifl_gguf *g, const char *arch, int64_t def, int64_t *out,
                       char *err)
{
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", arch);
    int64_t i = ifl_gguf_find_key(g, key);
    struct ifl_gguf_value v;
    *out = def;
    if (i < 0 || (ifl_gguf_value(g, i, &v) == 0 && v.type == IFL_GGUF_ARRAY))
        return 0;
    int rc = ifl_gguf_get_int(g, key, out, err);
    if (rc == 0 && (*out < 0 || *out > UINT32_MAX))
        return ifl_err(err, IFL_EFORMAT, "reffwd: key '%s' out of range", key);
    return rc;
}

static int get_float(const struct ifl_gguf *g, const char *arch, const char *suffix, double def,
                     double *out, char *err)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", arch, suffix);
    int rc = ifl_gguf_get_float(g, key, out, err);
    if (rc == IFL_ENOTFOUND) {
        *out = def;
        return 0;
    }
    return rc;
}

static int rmodel_load(struct rmodel *m, const char *path, char *err)
{
    struct ifl_gguf *g = NULL;
    memset(m, 0, sizeof *m);
    int rc = ifl_gguf_open(&g, path, err);
    if (rc)
        return rc;
    const char *s;
    size_t len;
    rc = ifl_gguf_get_str(g, "general.architecture", &s, &len, err);
    if (rc || len >= sizeof m->arch) {
        rc = rc ? rc : ifl_err(err, IFL_EFORMAT, "reffwd: bad general.architecture");
        goto done;
    }
    memcpy(m->arch, s, len);
    m->arch[len] = 0;
    int qwen2 = !strcmp(m->arch, "qwen2"), qwen3moe = !strcmp(m->arch, "qwen3moe");
    int qwen3 = !strcmp(m->arch, "qwen3") || qwen3moe;
    int gemma2 = !strcmp(m->arch, "gemma2"), gemma3 = !strcmp(m->arch, "gemma3");
    int phi3 = !strcmp(m->arch, "phi3"), oss = !strcmp(m->arch, "gpt-oss");
    m->oss = oss;
    if (!qwen2 && !qwen3 && !gemma2 && !gemma3 && !phi3 && !oss && strcmp(m->arch, "llama")) {
        rc = ifl_err(err, IFL_EUNSUPPORTED, "reffwd: architecture '%s' not supported", m->arch);
        goto done;
    }
    m->neox = qwen2 || qwen3 || gemma2 || gemma3 || phi3 || oss;
    m->gemma = m->gelu = gemma2 || gemma3;
    const char *a = m->arch;
    if ((rc = get_int(g, a, "embedding_length", -1, &m->n_embd, err)) ||
        (rc = get_int(g, a, "block_count", -1, &m->n_layer, err)) ||
        (rc = get_int(g, a, "attention.head_count", -1, &m->n_head, err)) ||
        (rc = get_int(g, a, "attention.head_count_kv", m->n_head, &m->n_head_kv, err)) ||
        (rc = get_int(g, a, "feed_forward_length", -1, &m->n_ff, err)) ||
        (rc = get_int(g, a, "attention.key_length", m->n_embd / m->n_head, &m->head_dim, err)) ||
        (rc = get_int(g, a, "attention.value_length", m->head_dim, &m->head_dim_v, err)) ||
        (rc = get_int(g, a, "rope.dimension_count", m->head_dim, &m->n_rot, err)) ||
        (rc = get_float(g, a, "attention.layer_norm_rms_epsilon", 1e-5, &m->eps, err)) ||
        (rc = get_float(g, a, "rope.freq_base", 10000.0, &m->base, err)))
        goto done;
    /* experts: qwen3moe always, llama when it has an expert_count (Mixtral) */
    {
        int64_t ne = 0;
        char key[128];
        snprintf(key, sizeof key, "%s.expert_count", a);
        int erc = ifl_gguf_get_int(g, key, &ne, err);
        if (erc && erc != IFL_ENOTFOUND) {
            rc = erc;
            goto done;
        }
        if ((qwen3moe || oss) && ne <= 0) {
            rc = ifl_err(err, IFL_EFORMAT, "reffwd: %s without experts", m->arch);
            goto done;
        }
        m->n_expert = ne > 0 ? ne : 0;
        if (m->n_expert &&
            ((rc = get_int(g, a, "expert_used_count", -1, &m->n_expert_used, err)) ||
             ((qwen3moe || oss) && (rc = get_int(g, a, "expert_feed_forward_length",
                                                 m->n_ff / m->n_expert_used, &m->n_ff, err)))))
            goto done;
        if (m->n_expert && m->n_expert_used > m->n_expert) {
            rc = ifl_err(err, IFL_EFORMAT, "reffwd: more experts used than there are");
            goto done;
        }
    }
    m->emb_scale = m->gemma ? sqrt((double)m->n_embd) : 1.0;
    m->q_scale = 1.0 / sqrt((double)m->head_dim);
    if (m->n_layer == (gemma2 ? 46 : 62) && m->gemma)
        m->q_scale = 1.0 / sqrt((double)(m->n_embd / m->n_head));
    int64_t win = 0;
    double d_attn_cap = gemma2 ? 50.0 : 0.0, d_final_cap = gemma2 ? 30.0 : 0.0;
    if ((rc = get_float(g, a, "attn_logit_softcapping", d_attn_cap, &m->attn_cap, err)) ||
        (rc = get_float(g, a, "final_logit_softcapping", d_final_cap, &m->final_cap, err)) ||
        (rc = get_int(g, a, "attention.sliding_window", 0, &win, err)) ||
        (rc = get_pattern(g, a, gemma2 || oss ? 2 : 6, &m->swa_period, err)) ||
        (rc = get_float(g, a, "rope.freq_base_swa", gemma3 ? 10000.0 : m->base, &m->base_swa,
                        err)) ||
        (rc = get_float(g, a, "rope.scaling.attn_factor", 1.0, &m->attn_factor, err)) ||
        (rc = get_int(g, a, "rope.scaling.original_context_length", 0, &m->n_ctx_orig, err)))
        goto done;
    if (!gemma2)
        m->attn_cap = 0; /* llama.cpp caps scores in gemma2 only */
    m->n_swa = gemma2 ? (win ? win : 4096) : gemma3 || oss ? win : 0;
    {
        char key[128];
        snprintf(key, sizeof key, "%s.rope.scaling.type", a);
        int yrc = ifl_gguf_get_str(g, key, &s, &len, err);
        if (yrc && yrc != IFL_ENOTFOUND) {
            rc = yrc;
            goto done;
        }
        if (!yrc && len == 4 && !memcmp(s, "yarn", 4)) {
            int64_t ctx_train;
            if ((rc = get_float(g, a, "rope.scaling.factor", 1.0, &m->yarn_factor, err)) ||
                (rc = get_int(g, a, "context_length", 2048, &ctx_train, err)) ||
                (rc = get_int(g, a, "rope.scaling.original_context_length", ctx_train,
                              &m->yarn_orig, err)) ||
                (rc = get_float(g, a, "rope.scaling.yarn_beta_fast", 32.0, &m->yarn_beta_fast,
                                err)) ||
                (rc = get_float(g, a, "rope.scaling.yarn_beta_slow", 1.0, &m->yarn_beta_slow, err)))
                goto done;
            if (m->yarn_factor == 1.0)
                m->yarn_factor = 0.0;
        }
    }
    if (!m->n_ctx_orig && (rc = get_int(g, a, "context_length", 2048, &m->n_ctx_orig, err)))
        goto done;
    if (m->n_head % m->n_head_kv || m->n_rot > m->head_dim || m->n_rot % 2) {
        rc = ifl_err(err, IFL_EFORMAT, "reffwd: inconsistent head counts or rope dimensions");
        goto done;
    }
    const struct ifl_gguf_tensor *te = ifl_gguf_find_tensor(g, "token_embd.weight");
    if (!te) {
        rc = ifl_err(err, IFL_EFORMAT, "reffwd: tensor 'token_embd.weight' missing");
        goto done;
    }
    m->n_vocab = te->ne[1];
    const int64_t E = m->n_embd, qd = m->n_head * m->head_dim, kd = m->n_head_kv * m->head_dim;
    const int64_t vd = m->n_head_kv * m->head_dim_v, od = m->n_head * m->head_dim_v;
    if ((rc = load_mat(g, "token_embd.weight", E, m->n_vocab, 0, &m->tok, err)) ||
        (rc = load_mat(g, "output_norm.weight", E, 1, 0, &m->out_norm, err)) ||
        (rc = load_mat(g, "output.weight", E, m->n_vocab, 1, &m->output, err)) ||
        (rc = load_mat(g, "rope_freqs.weight", m->n_rot / 2, 1, 1, &m->rope_freqs, err)) ||
        (rc = load_mat(g, "rope_factors_long.weight", m->n_rot / 2, 1, 1, &m->rope_long, err)) ||
        (rc = load_mat(g, "rope_factors_short.weight", m->n_rot / 2, 1, 1, &m->rope_short, err)))
        goto done;
    m->rope_div = m->rope_freqs.w;
    if (!m->output.w)
        m->output = m->tok; /* tied: the LM head is the embedding table */
    m->layers = calloc((size_t)m->n_layer, sizeof *m->layers);
    if (!m->layers) {
        rc = ifl_err(err, IFL_ENOMEM, "reffwd: out of memory");
        goto done;
    }
    for (int64_t l = 0; l < m->n_layer; l++) {
        struct rlayer *L = &m->layers[l];
        char nm[96];
#define NM(suffix) (snprintf(nm, sizeof nm, "blk.%lld." suffix, (long long)l), nm)
        if (phi3) {
            struct rmat qkv = {0}, gu = {0};
            if ((rc = load_mat(g, NM("attn_qkv.weight"), E, qd + kd + vd, 0, &qkv, err)))
                goto done;
            rc = split_rows(&qkv, &L->q, qd, &L->k, kd, &L->v, vd, err);
            if (!rc && !(rc = load_mat(g, NM("ffn_up.weight"), E, 2 * m->n_ff, 0, &gu, err)))
                rc = split_rows(&gu, &L->gate, m->n_ff, &L->up, m->n_ff, NULL, 0, err);
            if (rc)
                goto done;
        } else if ((rc = load_mat(g, NM("attn_q.weight"), E, qd, 0, &L->q, err)) ||
                   (rc = load_mat(g, NM("attn_k.weight"), E, kd, 0, &L->k, err)) ||
                   (rc = load_mat(g, NM("attn_v.weight"), E, vd, 0, &L->v, err)) ||
                   (!m->n_expert &&
                    ((rc = load_mat(g, NM("ffn_gate.weight"), E, m->n_ff, 0, &L->gate, err)) ||
                     (rc = load_mat(g, NM("ffn_up.weight"), E, m->n_ff, 0, &L->up, err))))) {
            goto done;
        }
        if ((rc = load_mat(g, NM("attn_norm.weight"), E, 1, 0, &L->attn_norm, err)) ||
            (rc = load_mat(g, NM("attn_output.weight"), od, E, 0, &L->o, err)) ||
            (rc = load_mat(g, oss ? NM("post_attention_norm.weight") : NM("ffn_norm.weight"), E, 1,
                           0, &L->ffn_norm, err)))
            goto done;
        if (oss &&
            ((rc = load_mat(g, NM("attn_q.bias"), qd, 1, 0, &L->bq, err)) ||
             (rc = load_mat(g, NM("attn_k.bias"), kd, 1, 0, &L->bk, err)) ||
             (rc = load_mat(g, NM("attn_v.bias"), vd, 1, 0, &L->bv, err)) ||
             (rc = load_mat(g, NM("attn_output.bias"), E, 1, 0, &L->bo, err)) ||
             (rc = load_mat(g, NM("attn_sinks.weight"), m->n_head, 1, 0, &L->sinks, err)) ||
             (rc = load_mat(g, NM("ffn_gate_inp.bias"), m->n_expert, 1, 0, &L->router_b, err)) ||
             (rc = load_mat(g, NM("ffn_gate_exps.bias"), m->n_ff, m->n_expert, 0, &L->gate_b,
                            err)) ||
             (rc = load_mat(g, NM("ffn_up_exps.bias"), m->n_ff, m->n_expert, 0, &L->up_b, err)) ||
             (rc = load_mat(g, NM("ffn_down_exps.bias"), E, m->n_expert, 0, &L->down_b, err))))
            goto done;
        const int64_t X = m->n_expert;
        if (X &&
            ((rc = load_mat(g, NM("ffn_gate_inp.weight"), E, X, 0, &L->router, err)) ||
             (rc = load_experts(g, NM("ffn_gate_exps.weight"), E, m->n_ff, X, &L->gate_e, err)) ||
             (rc = load_experts(g, NM("ffn_up_exps.weight"), E, m->n_ff, X, &L->up_e, err)) ||
             (rc = load_experts(g, NM("ffn_down_exps.weight"), m->n_ff, E, X, &L->down_e, err))))
            goto done;
        if (!X && (rc = load_mat(g, NM("ffn_down.weight"), m->n_ff, E, 0, &L->down, err)))
            goto done;
        if (m->gemma &&
            ((rc = load_mat(g, NM("post_attention_norm.weight"), E, 1, 0, &L->post_attn, err)) ||
             (rc = load_mat(g, NM("post_ffw_norm.weight"), E, 1, 0, &L->post_ffn, err))))
            goto done;
        if (qwen2 && ((rc = load_mat(g, NM("attn_q.bias"), qd, 1, 0, &L->bq, err)) ||
                      (rc = load_mat(g, NM("attn_k.bias"), kd, 1, 0, &L->bk, err)) ||
                      (rc = load_mat(g, NM("attn_v.bias"), vd, 1, 0, &L->bv, err))))
            goto done;
        if ((qwen3 || gemma3) &&
            ((rc = load_mat(g, NM("attn_q_norm.weight"), m->head_dim, 1, 0, &L->q_norm, err)) ||
             (rc = load_mat(g, NM("attn_k_norm.weight"), m->head_dim, 1, 0, &L->k_norm, err))))
            goto done;
#undef NM
    }
done:
    ifl_gguf_free(g);
    if (rc)
        rmodel_free(m);
    return rc;
}

/* ---- the pass --------------------------------------------------------- */

/* y[o] = sum_i W[o][i] x[i] (+ b[o]) for o < n_out, plus every adapter's
 * s B (A x). */
static void matvec(const struct rmat *W, const struct rmat *b, const double *x, double *y)
{
    for (int64_t o = 0; o < W->n_out; o++) {
        const float *w = W->w + o * W->n_in;
        double s = 0.0;
        for (int64_t i = 0; i < W->n_in; i++)
            s += (double)w[i] * x[i];
        y[o] = s + (b && b->w ? (double)b->w[o] : 0.0);
    }
    for (const struct rlora *l = W->lora; l; l = l->next) {
        for (int64_t o = 0; o < W->n_out; o++) {
            double s = 0.0;
            for (int64_t k = 0; k < l->r; k++) {
                const float *a = l->a + k * W->n_in;
                double ax = 0.0;
                for (int64_t i = 0; i < W->n_in; i++)
                    ax += (double)a[i] * x[i];
                s += (double)l->b[o * l->r + k] * ax;
            }
            y[o] += l->s * s;
        }
    }
}

/* t = the experts' FFN of h (see the top): softmax over the router's
 * logits, the top n_expert_used, renormalised; g, u, pr and sel scratch
 * of n_ff, n_ff, n_expert values, y of n_embd. */
static void moe_ffn(const struct rmodel *m, const struct rlayer *L, const double *h, double *g,
                    double *u, double *pr, int64_t *sel, double *y, double *t,
                    const struct ref_routes *rt, int64_t il, int64_t pos, int64_t n)
{
    const int64_t X = m->n_expert, K = m->n_expert_used;
    matvec(&L->router, &L->router_b, h, pr);
    double mx = -INFINITY, sum = 0.0;
    for (int64_t e = 0; e < X; e++)
        mx = pr[e] > mx ? pr[e] : mx;
    for (int64_t e = 0; e < X; e++) {
        pr[e] = exp(pr[e] - mx);
        sum += pr[e];
    }
    for (int64_t e = 0; e < X; e++)
        pr[e] /= sum;
    /* how far the last chosen expert's logit is above the best one left
     * out: log(p_k / p_k+1) */
    double kth = INFINITY, next = 0.0;
    for (int64_t e = 0; e < X; e++) {
        int64_t above = 0;
        for (int64_t c = 0; c < X; c++)
            above += pr[c] > pr[e] || (pr[c] == pr[e] && c < e);
        if (above == K - 1)
            kth = pr[e];
        if (above == K)
            next = pr[e];
    }
    double gap = K < X ? log(kth / next) : INFINITY;
    if (rt && rt->margin)
        rt->margin[il * n + pos] = gap;
    double wsum = 0.0;
    for (int64_t i = 0; i < K; i++) {
        int64_t best = -1;
        for (int64_t e = 0; e < X; e++) {
            int used = 0;
            for (int64_t j = 0; j < i; j++)
                used |= sel[j] == e;
            if (!used && (best < 0 || pr[e] > pr[best]))
                best = e;
        }
        sel[i] = best;
        if (rt && rt->chosen)
            rt->chosen[(il * n + pos) * K + i] = (int32_t)best;
    }
    for (int64_t i = 0; i < K; i++) {
        if (rt && rt->force)
            sel[i] = rt->force[(il * n + pos) * K + i];
        wsum += pr[sel[i]];
    }
    for (int64_t d = 0; d < m->n_embd; d++)
        t[d] = 0.0;
    for (int64_t i = 0; i < K; i++) {
        const int64_t e = sel[i];
        matvec(&L->gate_e[e], NULL, h, g);
        matvec(&L->up_e[e], NULL, h, u);
        if (m->oss) {
            for (int64_t f = 0; f < m->n_ff; f++) {
                double x0 = g[f] + L->gate_b.w[e * m->n_ff + f];
                double u0 = u[f] + L->up_b.w[e * m->n_ff + f];
                x0 = x0 < 7.0 ? x0 : 7.0;
                u0 = u0 < -7.0 ? -7.0 : u0 > 7.0 ? 7.0 : u0;
                g[f] = x0 / (1.0 + exp(-1.702 * x0)) * (u0 + 1.0);
            }
        } else {
            for (int64_t f = 0; f < m->n_ff; f++)
                g[f] = g[f] / (1.0 + exp(-g[f])) * u[f];
        }
        matvec(&L->down_e[e], NULL, g, y);
        if (m->oss)
            for (int64_t d = 0; d < m->n_embd; d++)
                y[d] += L->down_b.w[e * m->n_embd + d];
        for (int64_t d = 0; d < m->n_embd; d++)
            t[d] += pr[e] / wsum * y[d];
    }
}

/* y = x / sqrt(mean(x^2) + eps) * w, n values (y may alias x). */
static void rmsnorm(const double *x, const float *w, int64_t n, double eps, double *y)
{
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++)
        ss += x[i] * x[i];
    double r = 1.0 / sqrt(ss / (double)n + eps);
    for (int64_t i = 0; i < n; i++)
        y[i] = x[i] * r * (double)w[i];
}

/* Rotates the first n_rot values of one head vector for position pos. */
static void rope(const struct rmodel *m, double *v, int64_t pos, double base)
{
    int64_t half = m->n_rot / 2;
    double mscale = m->attn_factor * (m->yarn_factor > 0 ? 1.0 + 0.1 * log(m->yarn_factor) : 1.0);
    for (int64_t i = 0; i < half; i++) {
        double freq = pow(base, -2.0 * (double)i / (double)m->n_rot);
        if (m->rope_div)
            freq /= (double)m->rope_div[i];
        if (m->yarn_factor > 0) {
            double d_fast = (double)m->n_rot *
                            log((double)m->yarn_orig / (m->yarn_beta_fast * 2 * M_PI)) /
                            (2 * log(base));
            double d_slow = (double)m->n_rot *
                            log((double)m->yarn_orig / (m->yarn_beta_slow * 2 * M_PI)) /
                            (2 * log(base));
            double lo = fmax(0.0, floor(d_fast)), hi = fmin((double)(m->n_rot - 1), ceil(d_slow));
            double y = ((double)i - lo) / fmax(0.001, hi - lo);
            double r = 1.0 - fmin(1.0, fmax(0.0, y));
            freq = freq / m->yarn_factor * (1.0 - r) + freq * r;
        }
        double ang = (double)pos * freq, c = cos(ang) * mscale, s = sin(ang) * mscale;
        int64_t a = m->neox ? i : 2 * i, b = m->neox ? i + half : 2 * i + 1;
        double x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * s;
        v[b] = x0 * s + x1 * c;
    }
}

/* ---- adapters ----------------------------------------------------- */

/* Tensor `name` of shape [ne0, ne1], any dequantisable type, as floats. */
static int load_lora_tensor(const struct ifl_gguf *g, const char *name, int64_t ne0, int64_t ne1,
                            float **out, char *err)
{
    *out = NULL;
    const struct ifl_gguf_tensor *t = ifl_gguf_find_tensor(g, name);
    if (!t)
        return ifl_err(err, IFL_EFORMAT, "reffwd: adapter tensor '%s' missing", name);
    if (t->ne[0] != ne0 || t->ne[1] != ne1 || t->ne[2] != 1 || t->ne[3] != 1)
        return ifl_err(err, IFL_EFORMAT,
                       "reffwd: adapter tensor '%s' has shape [%lld, %lld], want [%lld, %lld]",
                       name, (long long)t->ne[0], (long long)t->ne[1], (long long)ne0,
                       (long long)ne1);
    ifl_dequant_fn dq = t->type < IFL_TYPE_COUNT ? ifl_kernels_ref()->dequant[t->type] : NULL;
    if (!dq)
        return ifl_err(err, IFL_EFORMAT, "reffwd: adapter tensor '%s': type %u not supported", name,
                       t->type);
    *out = malloc((size_t)(ne0 * ne1) * sizeof(float));
    if (!*out)
        return ifl_err(err, IFL_ENOMEM, "reffwd: out of memory for '%s'", name);
    dq(t->data, *out, ne0 * ne1);
    return 0;
}

/* The matrix of m that base tensor `name` is, or NULL. */
static struct rmat *find_rmat(struct rmodel *m, const char *name)
{
    if (!strcmp(name, "token_embd.weight"))
        return &m->tok;
    if (!strcmp(name, "output.weight"))
        return &m->output;
    long long l;
    char what[64];
    int used = 0;
    if (sscanf(name, "blk.%lld.%63[a-z_].weight%n", &l, what, &used) != 2 ||
        used != (int)strlen(name) || l < 0 || l >= m->n_layer)
        return NULL;
    struct rlayer *L = &m->layers[l];
    const char *names[] = {"attn_q",   "attn_k", "attn_v",  "attn_output",
                           "ffn_gate", "ffn_up", "ffn_down"};
    struct rmat *mats[] = {&L->q, &L->k, &L->v, &L->o, &L->gate, &L->up, &L->down};
    for (int i = 0; i < 7; i++)
        if (!strcmp(what, names[i]))
            return mats[i];
    return NULL;
}

static int add_lora(struct rmodel *m, const struct ref_lora *rl, int tied, char *err)
{
    struct ifl_gguf *g = NULL;
    int rc = ifl_gguf_open(&g, rl->path, err);
    if (rc)
        return rc;
    const char *s;
    size_t len;
    rc = ifl_gguf_get_str(g, "general.architecture", &s, &len, err);
    if (!rc && (len != strlen(m->arch) || memcmp(s, m->arch, len)))
        rc = ifl_err(err, IFL_EFORMAT, "reffwd: adapter %s is for another architecture", rl->path);
    double alpha = 0.0;
    int arc = rc ? 0 : ifl_gguf_get_float(g, "adapter.lora.alpha", &alpha, err);
    if (arc && arc != IFL_ENOTFOUND)
        rc = arc;
    for (int64_t i = 0; !rc && i < ifl_gguf_n_tensors(g); i++) {
        const char *tn = ifl_gguf_tensor(g, i)->name;
        size_t n = strlen(tn);
        if (n < 8 || strcmp(tn + n - 7, ".lora_a"))
            continue;
        char base[128], nb[140];
        snprintf(base, sizeof base, "%.*s", (int)(n - 7), tn);
        snprintf(nb, sizeof nb, "%s.lora_b", base);
        int embd = !strcmp(base, "token_embd.weight");
        if (!strcmp(base, "output.weight") && tied) {
            rc = ifl_err(err, IFL_EFORMAT, "reffwd: adapter adapts output.weight of a tied base");
            break;
        }
        struct rmat *W = find_rmat(m, base);
        if (!W) {
            rc = ifl_err(err, IFL_EFORMAT, "reffwd: adapter tensor '%s' adapts nothing", tn);
            break;
        }
        struct rlora *l = calloc(1, sizeof *l);
        if (!l) {
            rc = ifl_err(err, IFL_ENOMEM, "reffwd: out of memory");
            break;
        }
        const struct ifl_gguf_tensor *ta = ifl_gguf_tensor(g, i);
        l->r = embd ? ta->ne[0] : ta->ne[1];
        l->s = alpha != 0.0 ? rl->scale * alpha / (double)l->r : rl->scale;
        /* W is [n_out][n_in]: the embedding's n_in is n_embd, n_out n_vocab */
        if (embd)
            rc = load_lora_tensor(g, tn, l->r, W->n_out, &l->a, err);
        else
            rc = load_lora_tensor(g, tn, W->n_in, l->r, &l->a, err);
        if (!rc)
            rc = load_lora_tensor(g, nb, l->r, embd ? W->n_in : W->n_out, &l->b, err);
        /* appended, so adapters apply in the order given */
        struct rlora **tail = &W->lora;
        while (*tail)
            tail = &(*tail)->next;
        *tail = l;
    }
    ifl_gguf_free(g);
    return rc;
}

static int forward(const char *gguf_path, const struct ref_lora *loras, int n_loras, int n_ctx,
                   const int32_t *tokens, int n, float *logits, int *n_vocab_out,
                   const struct ref_routes *rt, char *err)
{
    struct rmodel m;
    int rc = rmodel_load(&m, gguf_path, err);
    if (rc)
        return rc;
    if (m.rope_long.w && m.rope_short.w)
        m.rope_div = n_ctx > m.n_ctx_orig ? m.rope_long.w : m.rope_short.w;
    int tied = m.output.w == m.tok.w;
    for (int i = 0; !rc && i < n_loras; i++)
        rc = add_lora(&m, &loras[i], tied, err);
    if (rc) {
        rmodel_free(&m);
        return rc;
    }
    if (n_vocab_out)
        *n_vocab_out = (int)m.n_vocab;
    if (!logits) {
        rmodel_free(&m);
        return 0;
    }
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= m.n_vocab) {
            rmodel_free(&m);
            return ifl_err(err, IFL_EINVAL, "reffwd: token %d at %d out of range (n_vocab %lld)",
                           tokens[i], i, (long long)m.n_vocab);
        }

    const int64_t E = m.n_embd, hd = m.head_dim, hdv = m.head_dim_v;
    const int64_t qd = m.n_head * hd, kd = m.n_head_kv * hd, vd = m.n_head_kv * hdv;
    const int64_t od = m.n_head * hdv, group = m.n_head / m.n_head_kv;
    const int64_t wmax = E > m.n_ff ? E : m.n_ff;
    /* Every position's residual, and one layer's K and V for all positions. */
    double *x = malloc(sizeof(double) * (size_t)(n * E));  /* [n][n_embd] */
    double *K = malloc(sizeof(double) * (size_t)(n * kd)); /* [n][n_head_kv * head_dim] */
    double *V = malloc(sizeof(double) * (size_t)(n * vd)); /* [n][n_head_kv * head_dim_v] */
    double *Q = malloc(sizeof(double) * (size_t)(n * qd)); /* [n][n_head * head_dim] */
    double *h = malloc(sizeof(double) * (size_t)wmax);
    double *g = malloc(sizeof(double) * (size_t)m.n_ff);
    double *u = malloc(sizeof(double) * (size_t)m.n_ff);
    double *att = malloc(sizeof(double) * (size_t)od);
    double *t = malloc(sizeof(double) * (size_t)(E > m.n_vocab ? E : m.n_vocab));
    double *p = malloc(sizeof(double) * (size_t)(n > 0 ? n : 1));
    double *pr = malloc(sizeof(double) * (size_t)(m.n_expert + 1));
    int64_t *sel = malloc(sizeof(int64_t) * (size_t)(m.n_expert_used + 1));
    double *y = malloc(sizeof(double) * (size_t)E);
    if (!x || !K || !V || !Q || !h || !g || !u || !att || !t || !p || !pr || !sel || !y) {
        rc = ifl_err(err, IFL_ENOMEM, "reffwd: out of memory");
        goto out;
    }

    for (int i = 0; i < n; i++) {
        for (int64_t e = 0; e < E; e++)
            x[i * E + e] = (double)m.tok.w[(int64_t)tokens[i] * E + e];
        for (const struct rlora *l = m.tok.lora; l; l = l->next) {
            const float *a = l->a + (int64_t)tokens[i] * l->r; /* a[token], r values */
            for (int64_t e = 0; e < E; e++) {
                double d = 0.0;
                for (int64_t k = 0; k < l->r; k++)
                    d += (double)l->b[e * l->r + k] * (double)a[k];
                x[i * E + e] += l->s * d;
            }
        }
        for (int64_t e = 0; e < E; e++)
            x[i * E + e] *= m.emb_scale;
    }

    for (int64_t l = 0; l < m.n_layer; l++) {
        const struct rlayer *L = &m.layers[l];
        const int slide = m.n_swa > 0 && (m.swa_period == 0 || l % m.swa_period < m.swa_period - 1);
        const double base = slide ? m.base_swa : m.base;
        /* Projections, norms and RoPE for every position. */
        for (int i = 0; i < n; i++) {
            double *q = Q + i * qd, *k = K + i * kd, *v = V + i * vd;
            rmsnorm(x + i * E, L->attn_norm.w, E, m.eps, h);
            matvec(&L->q, &L->bq, h, q);
            matvec(&L->k, &L->bk, h, k);
            matvec(&L->v, &L->bv, h, v);
            for (int64_t hh = 0; hh < m.n_head; hh++) {
                if (L->q_norm.w)
                    rmsnorm(q + hh * hd, L->q_norm.w, hd, m.eps, q + hh * hd);
                rope(&m, q + hh * hd, i, base);
            }
            for (int64_t hh = 0; hh < m.n_head_kv; hh++) {
                if (L->k_norm.w)
                    rmsnorm(k + hh * hd, L->k_norm.w, hd, m.eps, k + hh * hd);
                rope(&m, k + hh * hd, i, base);
            }
        }
        /* Causal attention, output projection, feed-forward. */
        for (int i = 0; i < n; i++) {
            for (int64_t hh = 0; hh < m.n_head; hh++) {
                const double *q = Q + i * qd + hh * hd;
                int64_t kvh = hh / group;
                double mx = -INFINITY;
                /* a sliding layer: position i sees j > i - n_swa */
                const int j0 = slide && i >= m.n_swa ? i - (int)m.n_swa + 1 : 0;
                for (int j = j0; j <= i; j++) {
                    const double *k = K + j * kd + kvh * hd;
                    double s = 0.0;
                    for (int64_t d = 0; d < hd; d++)
                        s += q[d] * k[d];
                    p[j] = s * m.q_scale;
                    if (m.attn_cap > 0)
                        p[j] = m.attn_cap * tanh(p[j] / m.attn_cap);
                    mx = p[j] > mx ? p[j] : mx;
                }
                /* gpt-oss: the head's sink joins the denominator */
                const double z = L->sinks.w ? (double)L->sinks.w[hh] : -INFINITY;
                mx = z > mx ? z : mx;
                double sum = L->sinks.w ? exp(z - mx) : 0.0;
                for (int j = j0; j <= i; j++) {
                    p[j] = exp(p[j] - mx);
                    sum += p[j];
                }
                double *o = att + hh * hdv;
                for (int64_t d = 0; d < hdv; d++)
                    o[d] = 0.0;
                for (int j = j0; j <= i; j++) {
                    const double *v = V + j * vd + kvh * hdv;
                    double w = p[j] / sum;
                    for (int64_t d = 0; d < hdv; d++)
                        o[d] += w * v[d];
                }
            }
            double *xi = x + i * E;
            matvec(&L->o, &L->bo, att, t);
            if (L->post_attn.w)
                rmsnorm(t, L->post_attn.w, E, m.eps, t);
            for (int64_t e = 0; e < E; e++)
                xi[e] += t[e];
            rmsnorm(xi, L->ffn_norm.w, E, m.eps, h);
            if (m.n_expert) {
                moe_ffn(&m, L, h, g, u, pr, sel, y, t, rt, l, i, n);
                for (int64_t e = 0; e < E; e++)
                    xi[e] += t[e];
                continue;
            }
            matvec(&L->gate, NULL, h, g);
            matvec(&L->up, NULL, h, u);
            for (int64_t f = 0; f < m.n_ff; f++) {
                double x0 = g[f];
                if (m.gelu)
                    g[f] =
                        0.5 * x0 * (1.0 + tanh(sqrt(2.0 / M_PI) * (x0 + 0.044715 * x0 * x0 * x0)));
                else
                    g[f] = x0 / (1.0 + exp(-x0));
                g[f] *= u[f];
            }
            matvec(&L->down, NULL, g, t);
            if (L->post_ffn.w)
                rmsnorm(t, L->post_ffn.w, E, m.eps, t);
            for (int64_t e = 0; e < E; e++)
                xi[e] += t[e];
        }
    }
    for (int i = 0; i < n; i++) {
        rmsnorm(x + i * E, m.out_norm.w, E, m.eps, h);
        matvec(&m.output, NULL, h, t);
        for (int64_t o = 0; o < m.n_vocab; o++)
            logits[(int64_t)i * m.n_vocab + o] =
                (float)(m.final_cap > 0 ? m.final_cap * tanh(t[o] / m.final_cap) : t[o]);
    }
out:
    free(x);
    free(K);
    free(V);
    free(Q);
    free(h);
    free(g);
    free(u);
    free(att);
    free(t);
    free(p);
    free(pr);
    free(sel);
    free(y);
    rmodel_free(&m);
    return rc;
}

int ref_forward_lora(const char *gguf_path, const struct ref_lora *loras, int n_loras,
                     const int32_t *tokens, int n, float *logits, int *n_vocab_out, char *err)
{
    return forward(gguf_path, loras, n_loras, 512, tokens, n, logits, n_vocab_out, NULL, err);
}

int ref_forward_ctx(const char *gguf_path, int n_ctx, const int32_t *tokens, int n, float *logits,
                    int *n_vocab_out, char *err)
{
    return forward(gguf_path, NULL, 0, n_ctx, tokens, n, logits, n_vocab_out, NULL, err);
}

int ref_forward(const char *gguf_path, const int32_t *tokens, int n, float *logits,
                int *n_vocab_out, char *err)
{
    return forward(gguf_path, NULL, 0, 512, tokens, n, logits, n_vocab_out, NULL, err);
}

int ref_forward_routes(const char *gguf_path, const int32_t *tokens, int n, float *logits,
                       const struct ref_routes *rt, char *err)
{
    return forward(gguf_path, NULL, 0, 512, tokens, n, logits, NULL, rt, err);
}
