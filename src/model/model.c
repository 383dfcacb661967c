/*
 * Model loading: reads the hyper-parameters of a llama / qwen2 / qwen3 (and
 * gemma2 / gemma3 / phi3: model_arch.c) GGUF
 * from its metadata and binds every weight tensor by name, checking each
 * one's shape and type against those hyper-parameters. Anything missing,
 * misshapen or unsupported is an error naming the key or tensor. Weights
 * stay in the mapping; only 1-D tensors stored in a type other than F32
 * (norms, biases) are converted into small owned F32 copies.
 *
 * Key and tensor names follow llama.cpp's GGUF conventions
 * (`{arch}.embedding_length`, `blk.N.attn_q.weight`, ...).
 */
#include "model/model.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "kernels/kernels.h"

struct loader {
    struct ifl_model *m;
    struct ifl_gguf *g;
    char *err;
    int64_t n_used; /* tensors bound, to spot unknown extras */
};

/* Reads an integer hyper-parameter `{arch}.suffix`. Missing and required is an error. */
static int get_hp_int(struct loader *L, const char *suffix, int required, int64_t dflt, int64_t lo,
                      int64_t hi, int32_t *out)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", L->m->hp.arch_name, suffix);
    int64_t v;
    int rc = ifl_gguf_get_int(L->g, key, &v, L->err);
    if (rc == IFL_ENOTFOUND) {
        if (required)
            return ifl_err(L->err, IFL_EFORMAT, "model: required key '%s' is missing", key);
        v = dflt;
    } else if (rc) {
        return rc;
    }
    if (v < lo || v > hi)
        return ifl_err(L->err, IFL_EFORMAT, "model: key '%s' = %lld is out of range [%lld, %lld]",
                       key, (long long)v, (long long)lo, (long long)hi);
    *out = (int32_t)v;
    return 0;
}

static int get_hp_float(struct loader *L, const char *suffix, double dflt, double lo, double hi,
                        float *out)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", L->m->hp.arch_name, suffix);
    double v;
    int rc = ifl_gguf_get_float(L->g, key, &v, L->err);
    if (rc == IFL_ENOTFOUND)
        v = dflt;
    else if (rc)
        return rc;
    if (!(v >= lo && v <= hi))
        return ifl_err(L->err, IFL_EFORMAT, "model: key '%s' = %g is out of range [%g, %g]", key, v,
                       lo, hi);
    *out = (float)v;
    return 0;
}

static const struct ifl_gguf_tensor *find(struct loader *L, const char *name)
{
    const struct ifl_gguf_tensor *t = ifl_gguf_find_tensor(L->g, name);
    if (t)
        L->n_used++;
    return t;
}

static int shape_err(struct loader *L, const struct ifl_gguf_tensor *t, int64_t e0, int64_t e1)
{
    if (e1 > 0)
        return ifl_err(L->err, IFL_EFORMAT,
                       "model: tensor '%s' has shape [%lld, %lld, %lld], expected [%lld, %lld]",
                       t->name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                       (long long)e0, (long long)e1);
    return ifl_err(L->err, IFL_EFORMAT,
                   "model: tensor '%s' has shape [%lld, %lld], expected [%lld]", t->name,
                   (long long)t->ne[0], (long long)t->ne[1], (long long)e0);
}

/* Binds a tensor of n0 x n1 floats (n1 1: a vector); converts other types
 * into an owned copy. */
static int bind_vec2(struct loader *L, const char *name, int64_t n0, int64_t n1, int required,
                     const float **out)
{
    *out = NULL;
    const struct ifl_gguf_tensor *t = find(L, name);
    if (!t) {
        if (required)
            return ifl_err(L->err, IFL_EFORMAT, "model: required tensor '%s' is missing", name);
        return 0;
    }
    if (t->ne[0] != n0 || t->ne[1] != n1 || t->ne[2] != 1 || t->ne[3] != 1)
        return shape_err(L, t, n0, n1 > 1 ? n1 : 0);
    const int64_t n = n0 * n1;
    if (t->type == IFL_TYPE_F32) {
        *out = t->data;
        return 0;
    }
    const struct ifl_type_info *ti = ifl_type_info(t->type);
    ifl_dequant_fn dq = ti ? ifl_kernels_ref()->dequant[t->type] : NULL;
    if (!dq || n % ti->blck)
        return ifl_err(L->err, IFL_EUNSUPPORTED, "model: tensor '%s' has unsupported type %s", name,
                       ti ? ti->name : "?");
    float *buf = malloc((size_t)n * sizeof(float));
    void **owned = realloc(L->m->owned, sizeof(void *) * (size_t)(L->m->n_owned + 1));
    if (!buf || !owned) {
        free(buf);
        if (owned)
            L->m->owned = owned;
        return ifl_err(L->err, IFL_ENOMEM, "model: out of memory converting '%s'", name);
    }
    L->m->owned = owned;
    owned[L->m->n_owned++] = buf;
    dq(t->data, buf, n);
    *out = buf;
    return 0;
}

static int bind_vec(struct loader *L, const char *name, int64_t n, int required, const float **out)
{
    return bind_vec2(L, name, n, 1, required, out);
}

/* Binds a matrix of n_out rows of n_in elements, in a type the kernels
 * compute with; n_exp > 1: a 3-D tensor [n_in, n_out, n_exp] of n_exp such
 * matrices, bound as one of n_exp * n_out rows (an expert's slice is
 * contiguous). */
static int bind_mat_n(struct loader *L, const char *name, int64_t n_in, int64_t n_out,
                      int64_t n_exp, int required, struct ifl_mat *out)
{
    memset(out, 0, sizeof(*out));
    const struct ifl_gguf_tensor *t = find(L, name);
    if (!t) {
        if (required)
            return ifl_err(L->err, IFL_EFORMAT, "model: required tensor '%s' is missing", name);
        return 0;
    }
    if (n_exp > 1 && (t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != n_exp || t->ne[3] != 1))
        return ifl_err(L->err, IFL_EFORMAT,
                       "model: tensor '%s' has shape [%lld, %lld, %lld], expected [%lld, %lld, "
                       "%lld] (%lld experts)",
                       t->name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                       (long long)n_in, (long long)n_out, (long long)n_exp, (long long)n_exp);
    if (n_exp <= 1 && (t->ne[0] != n_in || t->ne[1] != n_out || t->ne[2] != 1 || t->ne[3] != 1))
        return shape_err(L, t, n_in, n_out);
    const struct ifl_type_info *ti = ifl_type_info(t->type);
    if (!ti || !ti->is_weight)
        return ifl_err(L->err, IFL_EUNSUPPORTED,
                       "model: tensor '%s' has weight type %s, which inflight does not support "
                       "(supported: f32, f16, bf16, q8_0, q4_0, q5_0, q5_1, iq4_nl, iq4_xs, q2_K, "
                       "q3_K, q4_K, q5_K, q6_K, mxfp4)",
                       name, ti ? ti->name : "unknown");
    const struct ifl_type_info *ai = ifl_type_info(ti->act);
    if (n_in % ti->blck || n_in % ai->blck)
        return ifl_err(L->err, IFL_EUNSUPPORTED,
                       "model: tensor '%s': rows of %lld elements are not a multiple of the "
                       "%lld-element blocks its type %s needs",
                       name, (long long)n_in,
                       (long long)(ai->blck > ti->blck ? ai->blck : ti->blck), ti->name);
    out->data = t->data;
    out->type = (enum ifl_type)t->type;
    out->n_in = n_in;
    out->n_out = n_out * (n_exp > 1 ? n_exp : 1);
    out->row_bytes = ifl_type_row_size(out->type, n_in);
    return 0;
}

static int bind_mat(struct loader *L, const char *name, int64_t n_in, int64_t n_out, int required,
                    struct ifl_mat *out)
{
    return bind_mat_n(L, name, n_in, n_out, 1, required, out);
}

/* The experts' keys: {arch}.expert_count (none or 0: a dense model, but
 * qwen3moe needs experts) and expert_used_count (llama.cpp reads no
 * expert_weights_scale or _norm for these two architectures: their top-k
 * weights are always renormalised and never scaled); and
 * each expert's width, which replaces n_ff: qwen3moe's
 * expert_feed_forward_length (llama.cpp's fallback when it is missing:
 * n_ff / expert_used_count), llama's (Mixtral's) feed_forward_length. */
static int load_expert_hparams(struct loader *L)
{
    struct ifl_hparams *hp = &L->m->hp;
    int rc;
    const int moe = hp->arch == IFL_ARCH_QWEN3MOE || hp->arch == IFL_ARCH_GPT_OSS;
    if ((rc = get_hp_int(L, "expert_count", moe, 0, 0, 1024, &hp->n_expert)))
        return rc;
    if (hp->n_expert == 0) {
        if (moe)
            return ifl_err(L->err, IFL_EFORMAT, "model: key '%s.expert_count' is 0", hp->arch_name);
        return 0;
    }
    if ((rc = get_hp_int(L, "expert_used_count", 1, 0, 1, hp->n_expert, &hp->n_expert_used)))
        return rc;
    if (moe && (rc = get_hp_int(L, "expert_feed_forward_length", 0, hp->n_ff / hp->n_expert_used, 1,
                                1 << 22, &hp->n_ff)))
        return rc;
    return 0;
}

static int load_hparams(struct loader *L)
{
    struct ifl_hparams *hp = &L->m->hp;
    const char *s;
    size_t len;
    int rc = ifl_gguf_get_str(L->g, "general.architecture", &s, &len, L->err);
    if (rc == IFL_ENOTFOUND)
        return ifl_err(L->err, IFL_EFORMAT,
                       "model: required key 'general.architecture' is missing");
    if (rc)
        return rc;
    if (len >= sizeof hp->arch_name)
        len = sizeof hp->arch_name - 1;
    memcpy(hp->arch_name, s, len);
    hp->arch_name[len] = 0;
    for (size_t i = 0; i < len; i++)
        if ((unsigned char)hp->arch_name[i] < 32 || (unsigned char)hp->arch_name[i] > 126)
            hp->arch_name[i] = '?';
    if (!strcmp(hp->arch_name, "llama") || !strcmp(hp->arch_name, "mistral"))
        hp->arch = IFL_ARCH_LLAMA;
    else if (!strcmp(hp->arch_name, "qwen2"))
        hp->arch = IFL_ARCH_QWEN2;
    else if (!strcmp(hp->arch_name, "qwen3"))
        hp->arch = IFL_ARCH_QWEN3;
    else if (!strcmp(hp->arch_name, "qwen3moe"))
        hp->arch = IFL_ARCH_QWEN3MOE;
    else if (!strcmp(hp->arch_name, "gemma2"))
        hp->arch = IFL_ARCH_GEMMA2;
    else if (!strcmp(hp->arch_name, "gemma3"))
        hp->arch = IFL_ARCH_GEMMA3;
    else if (!strcmp(hp->arch_name, "phi3"))
        hp->arch = IFL_ARCH_PHI3;
    else if (!strcmp(hp->arch_name, "gpt-oss"))
        hp->arch = IFL_ARCH_GPT_OSS;
    else
        return ifl_err(L->err, IFL_EUNSUPPORTED,
                       "model: architecture '%s' is not supported (supported: llama, mistral, "
                       "qwen2, qwen3, qwen3moe, gemma2, gemma3, phi3, gpt-oss)",
                       hp->arch_name);

    if ((rc = get_hp_int(L, "embedding_length", 1, 0, 1, 1 << 20, &hp->n_embd)) ||
        (rc = get_hp_int(L, "block_count", 1, 0, 1, 4096, &hp->n_layer)) ||
        (rc = get_hp_int(L, "feed_forward_length", 1, 0, 1, 1 << 22, &hp->n_ff)) ||
        (rc = get_hp_int(L, "attention.head_count", 1, 0, 1, 1 << 14, &hp->n_head)) ||
        (rc = get_hp_int(L, "context_length", 0, 2048, 1, 1 << 24, &hp->n_ctx_train)) ||
        (rc = load_expert_hparams(L)))
        return rc;
    if ((rc = get_hp_int(L, "attention.head_count_kv", 0, hp->n_head, 1, hp->n_head,
                         &hp->n_head_kv)))
        return rc;
    if (hp->n_head % hp->n_head_kv)
        return ifl_err(L->err, IFL_EFORMAT,
                       "model: %d query heads cannot be grouped over %d key/value heads",
                       hp->n_head, hp->n_head_kv);
    int32_t dflt_hd = hp->n_embd / hp->n_head;
    if ((rc = get_hp_int(L, "attention.key_length", 0, dflt_hd, 1, 1 << 14, &hp->head_dim)) ||
        (rc = get_hp_int(L, "attention.value_length", 0, hp->head_dim, 1, 1 << 14,
                         &hp->head_dim_v)) ||
        (rc = get_hp_int(L, "rope.dimension_count", 0, hp->head_dim, 2, hp->head_dim, &hp->n_rot)))
        return rc;
    if (hp->n_rot % 2)
        return ifl_err(L->err, IFL_EFORMAT, "model: key '%s.rope.dimension_count' = %d is odd",
                       hp->arch_name, hp->n_rot);
    if ((rc = get_hp_float(L, "attention.layer_norm_rms_epsilon", 1e-5, 0, 1, &hp->rms_eps)) ||
        (rc = get_hp_float(L, "rope.freq_base", 10000.0, 1e-3, 1e12, &hp->rope_base)))
        return rc;
    hp->rope_neox = hp->arch != IFL_ARCH_LLAMA;
    hp->rope_pos_scale = 1.0f;
    ifl_model_arch_defaults(hp);

    char key[128];
    snprintf(key, sizeof key, "%s.rope.scaling.type", hp->arch_name);
    rc = ifl_gguf_get_str(L->g, key, &s, &len, L->err);
    if (rc && rc != IFL_ENOTFOUND)
        return rc;
    if (rc == 0 && !(len == 4 && !memcmp(s, "none", 4))) {
        if (len == 6 && !memcmp(s, "linear", 6)) {
            float factor;
            if ((rc = get_hp_float(L, "rope.scaling.factor", 1.0, 1e-6, 1e6, &factor)))
                return rc;
            hp->rope_pos_scale = 1.0f / factor;
            hp->rope_pos_scale_swa = hp->rope_pos_scale;
        } else if (len == 4 && !memcmp(s, "yarn", 4)) {
            float log_mul;
            if ((rc = get_hp_float(L, "rope.scaling.factor", 1.0, 1.0, 1e6, &hp->yarn_factor)) ||
                (rc = get_hp_int(L, "rope.scaling.original_context_length", 0, hp->n_ctx_train, 1,
                                 1 << 24, &hp->yarn_orig_ctx)) ||
                (rc = get_hp_float(L, "rope.scaling.yarn_beta_fast", 32.0, 1e-3, 1e6,
                                   &hp->yarn_beta_fast)) ||
                (rc = get_hp_float(L, "rope.scaling.yarn_beta_slow", 1.0, 1e-3, 1e6,
                                   &hp->yarn_beta_slow)) ||
                (rc = get_hp_float(L, "rope.scaling.yarn_log_multiplier", 0.0, -1e6, 1e6,
                                   &log_mul)) ||
                (rc = get_hp_float(L, "rope.scaling.attn_factor", 1.0, 1e-3, 1e3,
                                   &hp->rope_attn_factor)))
                return rc;
            if (log_mul != 0.0f)
                return ifl_err(L->err, IFL_EUNSUPPORTED,
                               "model: YaRN with '%s.rope.scaling.yarn_log_multiplier' %g "
                               "(DeepSeek's mscale) is not supported",
                               hp->arch_name, log_mul);
            if (hp->yarn_factor == 1.0f)
                hp->yarn_factor = 0.0f; /* no scaling: llama.cpp's ramp then changes nothing */
        } else {
            return ifl_err(L->err, IFL_EUNSUPPORTED,
                           "model: key '%s' = '%.*s': only linear and YaRN RoPE scaling are "
                           "supported",
                           key, (int)(len > 32 ? 32 : len), s);
        }
    }
    return ifl_model_arch_hparams(hp, L->g, L->err);
}

static int load_tensors(struct loader *L)
{
    struct ifl_model *m = L->m;
    struct ifl_hparams *hp = &m->hp;
    int rc;
    const struct ifl_gguf_tensor *te = ifl_gguf_find_tensor(L->g, "token_embd.weight");
    if (!te)
        return ifl_err(L->err, IFL_EFORMAT,
                       "model: required tensor 'token_embd.weight' is missing");
    if (te->ne[1] < 1 || te->ne[1] > (1 << 24))
        return ifl_err(L->err, IFL_EFORMAT, "model: tensor 'token_embd.weight' has %lld rows",
                       (long long)te->ne[1]);
    hp->n_vocab = (int32_t)te->ne[1];
    if ((rc = bind_mat(L, "token_embd.weight", hp->n_embd, hp->n_vocab, 1, &m->tok_embd)))
        return rc;
    if (!ifl_kernels_ref()->dequant[m->tok_embd.type])
        return ifl_err(L->err, IFL_EUNSUPPORTED, "model: token_embd.weight type cannot be read");
    if ((rc = bind_vec(L, "output_norm.weight", hp->n_embd, 1, &m->out_norm)) ||
        (rc = bind_mat(L, "output.weight", hp->n_embd, hp->n_vocab, 0, &m->output)))
        return rc;
    if (!m->output.data) {
        m->output = m->tok_embd;
        m->tied_output = 1;
    }
    if ((rc = bind_vec(L, "rope_freqs.weight", hp->n_rot / 2, 0, &m->rope_freqs)) ||
        (rc = bind_vec(L, "rope_factors_long.weight", hp->n_rot / 2, 0, &m->rope_long)) ||
        (rc = bind_vec(L, "rope_factors_short.weight", hp->n_rot / 2, 0, &m->rope_short)))
        return rc;
    if (!m->rope_long != !m->rope_short)
        return ifl_err(L->err, IFL_EFORMAT,
                       "model: rope_factors_long and rope_factors_short come in a pair");

    m->layers = calloc((size_t)hp->n_layer, sizeof(*m->layers));
    if (!m->layers)
        return ifl_err(L->err, IFL_ENOMEM, "model: out of memory");
    int64_t q_dim = (int64_t)hp->n_head * hp->head_dim;
    int64_t k_dim = (int64_t)hp->n_head_kv * hp->head_dim;
    int64_t v_dim = (int64_t)hp->n_head_kv * hp->head_dim_v;
    int64_t o_dim = (int64_t)hp->n_head * hp->head_dim_v;
    for (int il = 0; il < hp->n_layer; il++) {
        struct ifl_layer_weights *w = &m->layers[il];
        char n[96];
#define NAME(s) (snprintf(n, sizeof n, "blk.%d." s, il), n)
        /* phi3: Wq, Wk, Wv as rows of attn_qkv, the gate and up as rows of ffn_up */
        struct ifl_mat fused;
        const int phi3 = hp->arch == IFL_ARCH_PHI3, oss = hp->arch == IFL_ARCH_GPT_OSS;
        if ((rc = bind_mat(L, NAME("attn_qkv.weight"), hp->n_embd, q_dim + 2 * k_dim, 0, &fused)))
            return rc;
        if (fused.data && k_dim != v_dim)
            return ifl_err(L->err, IFL_EFORMAT, "model: %s with keys and values of other widths",
                           n);
        if (ifl_gguf_find_tensor(L->g, NAME("attn_qkv.bias")))
            return ifl_err(L->err, IFL_EUNSUPPORTED, "model: tensor '%s' is not supported", n);
        if (fused.data) {
            ifl_mat_rows(&w->wq, &fused, 0, q_dim);
            ifl_mat_rows(&w->wk, &fused, q_dim, k_dim);
            ifl_mat_rows(&w->wv, &fused, q_dim + k_dim, v_dim);
        }
        if ((rc = bind_vec(L, NAME("attn_norm.weight"), hp->n_embd, 1, &w->attn_norm)) ||
            (!fused.data &&
             ((rc = bind_mat(L, NAME("attn_q.weight"), hp->n_embd, q_dim, 1, &w->wq)) ||
              (rc = bind_mat(L, NAME("attn_k.weight"), hp->n_embd, k_dim, 1, &w->wk)) ||
              (rc = bind_mat(L, NAME("attn_v.weight"), hp->n_embd, v_dim, 1, &w->wv)))) ||
            (rc = bind_mat(L, NAME("attn_output.weight"), o_dim, hp->n_embd, 1, &w->wo)) ||
            (rc = bind_vec(L, oss ? NAME("post_attention_norm.weight") : NAME("ffn_norm.weight"),
                           hp->n_embd, 1, &w->ffn_norm)))
            return rc;
        /* gpt-oss's biases and sinks (optional elsewhere: a bias is added
         * where a file has one) */
        if ((rc = bind_vec(L, NAME("attn_output.bias"), hp->n_embd, oss, &w->bo)) ||
            (rc = bind_vec(L, NAME("attn_sinks.weight"), hp->n_head, oss, &w->attn_sinks)) ||
            (hp->n_expert &&
             ((rc = bind_vec(L, NAME("ffn_gate_inp.bias"), hp->n_expert, oss, &w->gate_inp_b)) ||
              (rc = bind_vec2(L, NAME("ffn_gate_exps.bias"), hp->n_ff, hp->n_expert, oss,
                              &w->gate_exps_b)) ||
              (rc = bind_vec2(L, NAME("ffn_up_exps.bias"), hp->n_ff, hp->n_expert, oss,
                              &w->up_exps_b)) ||
              (rc = bind_vec2(L, NAME("ffn_down_exps.bias"), hp->n_embd, hp->n_expert, oss,
                              &w->down_exps_b)))))
            return rc;
        const int64_t ne = hp->n_expert;
        if (ne &&
            ((rc = bind_mat(L, NAME("ffn_gate_inp.weight"), hp->n_embd, ne, 1, &w->gate_inp)) ||
             (rc = bind_mat_n(L, NAME("ffn_gate_exps.weight"), hp->n_embd, hp->n_ff, ne, 1,
                              &w->gate_exps)) ||
             (rc = bind_mat_n(L, NAME("ffn_up_exps.weight"), hp->n_embd, hp->n_ff, ne, 1,
                              &w->up_exps)) ||
             (rc = bind_mat_n(L, NAME("ffn_down_exps.weight"), hp->n_ff, hp->n_embd, ne, 1,
                              &w->down_exps))))
            return rc;
        if (!ne && (rc = bind_mat(L, NAME("ffn_down.weight"), hp->n_ff, hp->n_embd, 1, &w->w_down)))
            return rc;
        if (ne) {
            /* the experts stand in for the dense FFN */
        } else if (phi3) {
            if ((rc = bind_mat(L, NAME("ffn_up.weight"), hp->n_embd, 2 * (int64_t)hp->n_ff, 1,
                               &fused)))
                return rc;
            ifl_mat_rows(&w->w_gate, &fused, 0, hp->n_ff);
            ifl_mat_rows(&w->w_up, &fused, hp->n_ff, hp->n_ff);
        } else if ((rc = bind_mat(L, NAME("ffn_gate.weight"), hp->n_embd, hp->n_ff, 1,
                                  &w->w_gate)) ||
                   (rc = bind_mat(L, NAME("ffn_up.weight"), hp->n_embd, hp->n_ff, 1, &w->w_up))) {
            return rc;
        }
        const int gemma = hp->arch == IFL_ARCH_GEMMA2 || hp->arch == IFL_ARCH_GEMMA3;
        if ((!oss && (rc = bind_vec(L, NAME("post_attention_norm.weight"), hp->n_embd, gemma,
                                    &w->attn_post_norm))) ||
            (rc = bind_vec(L, NAME("post_ffw_norm.weight"), hp->n_embd, gemma, &w->ffn_post_norm)))
            return rc;
        int biases = hp->arch == IFL_ARCH_QWEN2 || oss;
        if ((rc = bind_vec(L, NAME("attn_q.bias"), q_dim, biases, &w->bq)) ||
            (rc = bind_vec(L, NAME("attn_k.bias"), k_dim, biases, &w->bk)) ||
            (rc = bind_vec(L, NAME("attn_v.bias"), v_dim, biases, &w->bv)))
            return rc;
        int qk_norm = hp->arch == IFL_ARCH_QWEN3 || hp->arch == IFL_ARCH_QWEN3MOE ||
                      hp->arch == IFL_ARCH_GEMMA3;
        if ((rc = bind_vec(L, NAME("attn_q_norm.weight"), hp->head_dim, qk_norm, &w->q_norm)) ||
            (rc = bind_vec(L, NAME("attn_k_norm.weight"), hp->head_dim, qk_norm, &w->k_norm)))
            return rc;
#undef NAME
    }
    int64_t n_t = ifl_gguf_n_tensors(L->g);
    m->weight_bytes = 0;
    for (int64_t i = 0; i < n_t; i++)
        m->weight_bytes += ifl_gguf_tensor(L->g, i)->nbytes;
    if (L->n_used != n_t) {
        /* a tensor we did not bind: a feature we would silently ignore */
        for (int64_t i = 0; i < n_t; i++) {
            const char *name = ifl_gguf_tensor(L->g, i)->name;
            if (strstr(name, ".weight") == NULL && strstr(name, ".bias") == NULL)
                continue;
            /* rebinding is cheap: look for names we know */
            const char *known[] = {"attn_norm.",
                                   "attn_q.",
                                   "attn_k.",
                                   "attn_v.",
                                   "attn_output.",
                                   "ffn_norm.",
                                   "ffn_gate.",
                                   "ffn_up.",
                                   "ffn_down.",
                                   "attn_q_norm.",
                                   "attn_k_norm.",
                                   "token_embd.",
                                   "output_norm.",
                                   "output.",
                                   "rope_freqs.",
                                   "ffn_gate_inp.",
                                   "ffn_gate_exps.",
                                   "ffn_up_exps.",
                                   "ffn_down_exps.",
                                   "attn_qkv.",
                                   "post_attention_norm.",
                                   "post_ffw_norm.",
                                   "rope_factors_long.",
                                   "rope_factors_short.",
                                   "attn_sinks."};
            int ok = 0;
            for (size_t k = 0; k < sizeof known / sizeof *known && !ok; k++) {
                const char *p = strstr(name, known[k]);
                ok = p && (p == name || p[-1] == '.');
            }
            if (!ok)
                return ifl_err(L->err, IFL_EUNSUPPORTED,
                               "model: tensor '%s' is not used by the %s architecture as "
                               "inflight implements it",
                               name, hp->arch_name);
        }
    }
    return 0;
}

/* The token embedding table moved from the file's map into an anonymous
 * map of huge pages (the file's pages given back, so the resident set
 * does not grow). Each forward reads its rows at random places: in 4 KiB
 * pages every row was a TLB miss, and on the 2-vCPU Zen 5 guest, where a
 * miss walks two levels of page tables that the matmuls have pushed out
 * of the caches, a prompt's 64 rows a thread took 0.6-0.9 ms of CPU time
 * (about 10 us a row) against 0.11-0.13 ms in huge pages (load average
 * 8; small-110m's table of 26 MB). The bytes are the same, so nothing
 * computed changes. Tables of under 2 MiB, or not in a file's map (a
 * shard's copy, a model in a caller's buffer), stay where they are, as
 * does every table when the map cannot be had; IFL_EMBD_HUGE=0 keeps it
 * in the file's map (to measure). A tied output reads the same copy. */
static void embd_to_huge(struct ifl_model *m)
{
    const char *env = getenv("IFL_EMBD_HUGE");
    struct ifl_mat *te = &m->tok_embd;
    const size_t bytes = (size_t)te->n_out * te->row_bytes, huge = (size_t)2 << 20;
    const char *base = ifl_gguf_base(m->gguf), *p = te->data;
    if ((env && !strcmp(env, "0")) || bytes < huge || te->x16 || !*ifl_gguf_path(m->gguf) ||
        p < base || p + bytes > base + ifl_gguf_file_size(m->gguf))
        return;
    const size_t len = (bytes + huge - 1) / huge * huge;
    void *map = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (map == MAP_FAILED)
        return;
    madvise(map, len, MADV_HUGEPAGE);
    memcpy(map, p, bytes);
    mprotect(map, len, PROT_READ);
    ifl_gguf_release(m->gguf, p, bytes);
    te->data = map;
    if (m->tied_output)
        m->output.data = map;
    m->embd_huge = map;
    m->embd_huge_bytes = len;
}

int ifl_model_from_gguf_with(struct ifl_model **out, struct ifl_gguf *g,
                             const struct ifl_model_load_opts *o, char *err)
{
    *out = NULL;
    struct ifl_model *m = calloc(1, sizeof(*m));
    if (!m) {
        ifl_gguf_free(g);
        return ifl_err(err, IFL_ENOMEM, "model: out of memory");
    }
    m->gguf = g;
    struct loader L = {.m = m, .g = g, .err = err};
    int rc = load_hparams(&L);
    if (!rc)
        rc = load_tensors(&L);
    if (!rc && o && o->tp_size > 1)
        rc = ifl_model_shard(m, o->tp_rank, o->tp_size, err);
    else if (!rc && o && o->sum_units > 1)
        rc = ifl_model_sum_units(m, o->sum_units, err);
    if (rc) {
        ifl_model_free(m);
        return rc;
    }
    if ((rc = ifl_model_repack(m, o, err))) {
        ifl_model_free(m);
        return rc;
    }
    embd_to_huge(m);
    ifl_model_shard_trim(m);
    ifl_model_units_trim(m);
    *out = m;
    return 0;
}

int ifl_model_from_gguf(struct ifl_model **out, struct ifl_gguf *g, char *err)
{
    return ifl_model_from_gguf_with(out, g, NULL, err);
}

int ifl_model_load_with(struct ifl_model **out, const char *path,
                        const struct ifl_model_load_opts *o, char *err)
{
    *out = NULL;
    struct ifl_gguf *g;
    int rc = ifl_gguf_open(&g, path, err);
    if (rc)
        return rc;
    return ifl_model_from_gguf_with(out, g, o, err);
}

int ifl_model_load(struct ifl_model **out, const char *path, char *err)
{
    return ifl_model_load_with(out, path, NULL, err);
}

void ifl_model_free(struct ifl_model *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->n_owned; i++)
        free(m->owned[i]);
    free(m->owned);
    free(m->layers);
    ifl_model_shard_free(m->shard);
    ifl_model_units_free(m->units);
    if (m->x16)
        munmap(m->x16, m->x16_bytes);
    if (m->embd_huge)
        munmap(m->embd_huge, m->embd_huge_bytes);
    ifl_gguf_free(m->gguf);
    free(m);
}
