/*
 * What gemma2, gemma3 and phi3 add to the llama family's hyper-parameters
 * (model.c reads the common ones, then calls ifl_model_arch_hparams), with
 * keys and defaults as llama.cpp's loader reads them:
 *
 * gemma2 and gemma3: token embeddings scaled by sqrt(n_embd); RMS norms
 * after attention and after the feed-forward too (post_attention_norm,
 * post_ffw_norm), their weights used as stored (llama.cpp's converter
 * already adds Gemma's 1 to every norm weight); GeGLU (gelu in its tanh
 * form); queries scaled by 1/sqrt(head_dim), except in the 27B models
 * (46 layers for gemma2, 62 for gemma3) where Gemma's
 * query_pre_attn_scalar is n_embd / n_head; NEOX RoPE. Sliding-window
 * layers: a query at position p sees positions p - n_swa + 1 .. p, and
 * layer il slides when il % period < period - 1
 * (`attention.sliding_window_pattern`, default 2 for gemma2: every other
 * layer from the first; 6 for gemma3: five local layers, then a global;
 * 0: every layer slides).
 * gemma2: attention logits and the final logits soft-capped, c tanh(x / c)
 * (`attn_logit_softcapping`, default 50; `final_logit_softcapping`,
 * default 30), n_swa defaults to 4096, and sliding layers take the global
 * RoPE base and scale unless `rope.freq_base_swa` says. gemma3: per-head
 * Q/K norms; sliding only when `attention.sliding_window` is given; the
 * final soft-cap only when its key is; sliding layers' RoPE base
 * `rope.freq_base_swa` or 10000, unscaled (the linear factor of the 4B+
 * models is for the global layers).
 *
 * gpt-oss: Q/K/V and output biases; a learned logit per query head (its
 * "sink", attn_sinks) joins that head's softmax denominator as e^sink,
 * and takes no value; sliding windows (attention.sliding_window, required)
 * on layers il % period < period - 1 (attention.sliding_window_pattern,
 * default 2: the even layers); NEOX RoPE, usually YaRN-scaled (model.c
 * reads the YaRN keys for every architecture); the pre-FFN norm is
 * post_attention_norm; the experts' FFN (forward_moe.c): router and expert
 * biases, top-k of the router logits, their softmax as weights, and the
 * clamped SwiGLU out = min(g, 7) sigmoid(1.702 min(g, 7)) (clamp(u, -7, 7)
 * + 1) (llama.cpp's swiglu_oai, alpha 1.702 and limit 7 fixed there).
 *
 * phi3: attn_qkv holds Wq, Wk and Wv one after another by rows, ffn_up
 * the gate's rows then the up projection's (model.c binds both as views
 * of those rows); LongRoPE: rope_factors_short and rope_factors_long
 * divide each pair's frequency, the long ones when the context is larger
 * than `rope.scaling.original_context_length`, and cos and sin are both
 * multiplied by `rope.scaling.attn_factor`. Its `attention.sliding_window`
 * is ignored, as llama.cpp ignores it.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "core/err.h"
#include "model/model.h"

static int get_f(const struct ifl_gguf *g, const struct ifl_hparams *hp, const char *suffix,
                 double lo, double hi, float *out, char *err)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", hp->arch_name, suffix);
    double v;
    int rc = ifl_gguf_get_float(g, key, &v, err);
    if (rc == IFL_ENOTFOUND)
        return 0; /* *out keeps its default */
    if (rc)
        return rc;
    if (!(v >= lo && v <= hi))
        return ifl_err(err, IFL_EFORMAT, "model: key '%s' = %g is out of range [%g, %g]", key, v,
                       lo, hi);
    *out = (float)v;
    return 0;
}

static int get_i(const struct ifl_gguf *g, const struct ifl_hparams *hp, const char *suffix,
                 int64_t lo, int64_t hi, int32_t *out, int *found, char *err)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", hp->arch_name, suffix);
    int64_t v;
    int rc = ifl_gguf_get_int(g, key, &v, err);
    if (found)
        *found = rc == 0;
    if (rc == IFL_ENOTFOUND)
        return 0;
    if (rc)
        return rc;
    if (v < lo || v > hi)
        return ifl_err(err, IFL_EFORMAT, "model: key '%s' = %lld is out of range [%lld, %lld]", key,
                       (long long)v, (long long)lo, (long long)hi);
    *out = (int32_t)v;
    return 0;
}

/* `attention.sliding_window_pattern` as llama.cpp's gemma2/gemma3 loaders
 * read it (get_key_or_arr into a uint32, then set_swa_pattern): a scalar
 * period P, where 0 makes every layer slide; an array (the per-layer bools
 * newer converters write for other families) is passed over, leaving the
 * default period, as llama.cpp passes over it for these two. A period past
 * the layer count slides every layer below P - 1, which n_layer + 1 says
 * as well and keeps in an int32. */
static int get_swa_pattern(const struct ifl_gguf *g, struct ifl_hparams *hp, char *err)
{
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", hp->arch_name);
    int64_t i = ifl_gguf_find_key(g, key);
    struct ifl_gguf_value v;
    if (i < 0 || (ifl_gguf_value(g, i, &v) == 0 && v.type == IFL_GGUF_ARRAY))
        return 0;
    int64_t p = 0;
    int rc = ifl_gguf_get_int(g, key, &p, err);
    if (rc)
        return rc;
    if (p < 0 || p > UINT32_MAX)
        return ifl_err(err, IFL_EFORMAT, "model: key '%s' = %lld is out of range [0, %lu]", key,
                       (long long)p, (unsigned long)UINT32_MAX);
    hp->swa_period = p > hp->n_layer ? hp->n_layer + 1 : (int32_t)p;
    return 0;
}

void ifl_model_arch_defaults(struct ifl_hparams *hp)
{
    hp->emb_scale = 1.0f;
    hp->attn_scale = 1.0f / sqrtf((float)hp->head_dim);
    hp->attn_softcap = 0.0f;
    hp->final_softcap = 0.0f;
    hp->ffn_gelu = 0;
    hp->n_swa = 0;
    hp->swa_period = 1;
    hp->rope_base_swa = hp->rope_base;
    hp->rope_pos_scale_swa = hp->rope_pos_scale;
    hp->rope_attn_factor = 1.0f;
    hp->n_ctx_orig = hp->n_ctx_train;
    hp->yarn_factor = 0.0f;
    hp->yarn_orig_ctx = hp->n_ctx_train;
    hp->yarn_beta_fast = 32.0f;
    hp->yarn_beta_slow = 1.0f;
    hp->ffn_swiglu_oai = 0;
}

int ifl_model_arch_hparams(struct ifl_hparams *hp, const struct ifl_gguf *g, char *err)
{
    int rc, found = 0;
    if (hp->arch == IFL_ARCH_GPT_OSS) {
        /* sliding windows on every other layer from the first, unless the
         * pattern key says otherwise; the same RoPE there unless
         * rope.freq_base_swa says */
        hp->swa_period = 2;
        hp->ffn_swiglu_oai = 1;
        if ((rc = get_i(g, hp, "attention.sliding_window", 0, 1 << 24, &hp->n_swa, &found, err)) ||
            (rc = get_i(g, hp, "attention.sliding_window_pattern", 1, 1 << 16, &hp->swa_period,
                        NULL, err)) ||
            (rc = get_f(g, hp, "rope.freq_base_swa", 1e-3, 1e12, &hp->rope_base_swa, err)))
            return rc;
        if (!found)
            return ifl_err(err, IFL_EFORMAT,
                           "model: required key 'gpt-oss.attention.sliding_window' is missing");
        return 0;
    }
    if (hp->arch == IFL_ARCH_PHI3) {
        if ((rc = get_i(g, hp, "rope.scaling.original_context_length", 1, 1 << 24, &hp->n_ctx_orig,
                        NULL, err)) ||
            (rc = get_f(g, hp, "rope.scaling.attn_factor", 1e-3, 1e3, &hp->rope_attn_factor, err)))
            return rc;
        return 0;
    }
    if (hp->arch != IFL_ARCH_GEMMA2 && hp->arch != IFL_ARCH_GEMMA3)
        return 0;
    const int g2 = hp->arch == IFL_ARCH_GEMMA2;
    hp->emb_scale = sqrtf((float)hp->n_embd);
    hp->ffn_gelu = 1;
    if (hp->n_layer == (g2 ? 46 : 62)) /* the 27B models */
        hp->attn_scale = 1.0f / sqrtf((float)(hp->n_embd / hp->n_head));
    hp->swa_period = g2 ? 2 : 6;
    if (g2) {
        hp->n_swa = 4096;
        hp->attn_softcap = 50.0f;
        hp->final_softcap = 30.0f;
    } else {
        hp->rope_base_swa = 10000.0f;
        hp->rope_pos_scale_swa = 1.0f;
    }
    if ((rc = get_i(g, hp, "attention.sliding_window", 0, 1 << 24, &hp->n_swa, &found, err)) ||
        (rc = get_swa_pattern(g, hp, err)) ||
        (rc = get_f(g, hp, "rope.freq_base_swa", 1e-3, 1e12, &hp->rope_base_swa, err)) ||
        (rc = get_f(g, hp, "final_logit_softcapping", 0, 1e6, &hp->final_softcap, err)))
        return rc;
    if (g2 && (rc = get_f(g, hp, "attn_logit_softcapping", 0, 1e6, &hp->attn_softcap, err)))
        return rc;
    if (!g2 && !found)
        hp->n_swa = 0; /* gemma3 slides only when told */
    return 0;
}

void ifl_mat_rows(struct ifl_mat *dst, const struct ifl_mat *src, int64_t r0, int64_t n)
{
    *dst = *src;
    dst->data = (const char *)src->data + (size_t)r0 * src->row_bytes;
    dst->n_out = n;
}
