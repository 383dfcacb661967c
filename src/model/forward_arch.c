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

/* Pair i's angle per position: base^(-2i / n_rot) times the position
 * scale, divided by its factor when the model has some. */
static void fill(double *out, int half, int n_rot, double base, double scale, const float *div)
{
    for (int i = 0; i < half; i++) {
        double fr = pow(base, -2.0 * i / n_rot) * scale;
        out[i] = div ? fr / div[i] : fr;
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
    fill(f->inv_freq, half, hp->n_rot, hp->rope_base, hp->rope_pos_scale, div);
    f->rope_mscale = hp->rope_attn_factor;
    if (hp->n_swa > 0 &&
        (hp->rope_base_swa != hp->rope_base || hp->rope_pos_scale_swa != hp->rope_pos_scale)) {
        size_t R = (size_t)cfg->max_rows;
        f->inv_freq_swa = malloc(sizeof(double) * (size_t)(half > 0 ? half : 1));
        f->rope_cs_swa = aligned_alloc(
            64, (R * (size_t)(half > 0 ? half : 1) * 2 * sizeof(float) + 63) / 64 * 64);
        if (!f->inv_freq_swa || !f->rope_cs_swa)
            return IFL_ENOMEM;
        fill(f->inv_freq_swa, half, hp->n_rot, hp->rope_base_swa, hp->rope_pos_scale_swa, div);
    }
    return 0;
}
