/*
 * The forward pass's pieces for gemma2, gemma3 and phi3 (model_arch.c says
 * what each architecture computes): soft-capping and the RoPE frequency
 * tables (LongRoPE's factors, the sliding layers' own base); GeGLU is the
 * kernels' geglu (kernels.h). llama.cpp's CPU GeGLU looks gelu up in a
 * table of F16 inputs and outputs; ours computes the formula in float,
 * so it agrees with the float64 reference to float rounding and with
 * llama.cpp to the table's (about 1e-3 relative).
 * Element-wise, per row, scalar: results do not depend on the batch.
 */
#include <math.h>
#include <stdlib.h>

#include "model/forward_internal.h"

void ifl_fwd_softcap(float *x, int n, float cap)
{
    const float inv = 1.0f / cap;
    for (int i = 0; i < n; i++)
        x[i] = cap * tanhf(x[i] * inv);
}

/* YaRN (llama.cpp's rope_yarn, as ggml_rope_ext runs it with ext_factor
 * 1): pair i's frequency f is f / factor for the slow pairs, f itself for
 * the fast ones, and a linear mix between: with d(beta) = n_rot ln(orig /
 * (2 pi beta)) / (2 ln base), the pairs below lo = floor(d(beta_fast))
 * keep f, those from hi = ceil(d(beta_slow)) on take f / factor, and in
 * between the weight of f falls as (i - lo) / (hi - lo). */
static double yarn_freq(const struct ifl_hparams *hp, double fr, int i, double base)
{
    const double two_pi = 6.283185307179586;
    double lo =
        floor(hp->n_rot * log(hp->yarn_orig_ctx / (hp->yarn_beta_fast * two_pi)) / (2 * log(base)));
    double hi =
        ceil(hp->n_rot * log(hp->yarn_orig_ctx / (hp->yarn_beta_slow * two_pi)) / (2 * log(base)));
    lo = lo > 0 ? lo : 0;
    hi = hi < hp->n_rot - 1 ? hi : hp->n_rot - 1;
    double y = (i - lo) / (hi - lo > 0.001 ? hi - lo : 0.001);
    double keep = 1 - (y < 0 ? 0 : y > 1 ? 1 : y);
    return fr / hp->yarn_factor * (1 - keep) + fr * keep;
}

/* Pair i's angle per position: base^(-2i / n_rot) divided by its factor
 * when the model has some, then times the position scale, or YaRN's. */
static void fill(double *out, int half, const struct ifl_hparams *hp, double base, double scale,
                 const float *div)
{
    for (int i = 0; i < half; i++) {
        if (hp->yarn_factor > 0) {
            double fr = pow(base, -2.0 * i / hp->n_rot);
            out[i] = yarn_freq(hp, div ? fr / div[i] : fr, i, base);
        } else {
            double fr = pow(base, -2.0 * i / hp->n_rot) * scale;
            out[i] = div ? fr / div[i] : fr;
        }
    }
}

int ifl_fwd_rope_setup(struct ifl_fwd *f, const struct ifl_fwd_config *cfg)
{
    const struct ifl_model *m = f->m;
    const struct ifl_hparams *hp = &m->hp;
    const int half = hp->n_rot / 2;
    /* LongRoPE: the long factors for contexts beyond the original one
     * (llama.cpp decides by its context per sequence, as max_ctx is here) */
    const float *div = m->rope_freqs;
    if (m->rope_long)
        div = cfg->max_ctx > hp->n_ctx_orig ? m->rope_long : m->rope_short;
    fill(f->inv_freq, half, hp, hp->rope_base, hp->rope_pos_scale, div);
    /* YaRN also scales cos and sin by 1 + ln(factor) / 10 */
    f->rope_mscale = hp->rope_attn_factor;
    if (hp->yarn_factor > 0)
        f->rope_mscale = (float)(hp->rope_attn_factor * (1 + 0.1 * log(hp->yarn_factor)));
    if (hp->n_swa > 0 &&
        (hp->rope_base_swa != hp->rope_base || hp->rope_pos_scale_swa != hp->rope_pos_scale)) {
        size_t R = (size_t)cfg->max_rows;
        f->inv_freq_swa = malloc(sizeof(double) * (size_t)(half > 0 ? half : 1));
        f->rope_cs_swa = aligned_alloc(
            64, (R * (size_t)(half > 0 ? half : 1) * 2 * sizeof(float) + 63) / 64 * 64);
        if (!f->inv_freq_swa || !f->rope_cs_swa)
            return IFL_ENOMEM;
        fill(f->inv_freq_swa, half, hp, hp->rope_base_swa, hp->rope_pos_scale_swa, div);
    }
    return 0;
}
