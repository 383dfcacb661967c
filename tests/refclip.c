/*
 * The float64 reference of the CLIP encoder and LLaVA projector (refclip.h),
 * written from the description of Hugging Face's CLIPVisionModel and
 * LlavaMultiModalProjector, independently of src/vision/:
 *
 *   e_p   = W_patch . patch_p + b_patch        (patch_p = its pixels, [c][y][x])
 *   h     = [cls; e_0 .. e_{N-1}] + pos        (cls first: position 0)
 *   h     = LN_pre(h)
 *   repeat n_run times (the layers 0 .. n_run-1):
 *       a = LN1(h);  q, k, v = a Wq + bq, a Wk + bk, a Wv + bv
 *       per head: o = softmax(q k^T / sqrt(d)) v;  h += o Wo + bo
 *       a = LN2(h);  h += act(a Wfc1 + b1) Wfc2 + b2
 *   h     = LN_post(h) when the file has it; drop the class row
 *   out   = gelu(h W0 + b0) W2 + b2
 * LN(x) = (x - mean) / sqrt(var + eps) * w + b; gelu is the tanh form, act
 * quick GELU (x sigmoid(1.702 x)) unless clip.use_gelu / clip.use_silu;
 * n_run = clip.vision.feature_layer, else block_count - 1.
 *
 * InternVL (clip.projector_type "internvl"), after OpenGVLab's
 * InternVisionModel and InternVLChatModel.mlp1:
 *   every layer runs; h += ls1 * (o Wo + bo), h += ls2 * FFN(...) when the
 *   file has the layer scales;
 *   drop the class row; pixel shuffle by m = scale_factor: the merged
 *   token (X, Y) is the patches (m X + dx, m Y + dy) side by side, dy
 *   outer, dx inner; then LN (eps 1e-5, mm.model.mlp.0), mlp.1, gelu,
 *   mlp.3.
 */
#include "refclip.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "kernels/kernels.h"
#include "kernels/types.h"
#include "model/gguf.h"

/* The whole tensor as doubles (NULL through *out when absent), its element
 * count checked against want (0: any). */
static int tensor(const struct ifl_gguf *g, const char *name, int64_t want, double **out,
                  int64_t *ne0, char *err)
{
    *out = NULL;
    const struct ifl_gguf_tensor *t = ifl_gguf_find_tensor(g, name);
    if (!t)
        return 0;
    int64_t n = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
    if (want && n != want)
        return ifl_err(err, IFL_EFORMAT, "refclip: '%s' has %lld values, want %lld", name,
                       (long long)n, (long long)want);
    ifl_dequant_fn dq = t->type < IFL_TYPE_COUNT ? ifl_kernels_ref()->dequant[t->type] : NULL;
    if (!dq)
        return ifl_err(err, IFL_EFORMAT, "refclip: '%s': type %u", name, t->type);
    float *f = malloc((size_t)n * sizeof(float));
    double *d = malloc((size_t)n * sizeof(double));
    if (!f || !d) {
        free(f);
        free(d);
        return ifl_err(err, IFL_ENOMEM, "refclip: out of memory");
    }
    dq(t->data, f, n);
    for (int64_t i = 0; i < n; i++)
        d[i] = f[i];
    free(f);
    if (ne0)
        *ne0 = t->ne[0];
    *out = d;
    return 0;
}

static int need(const struct ifl_gguf *g, const char *name, int64_t want, double **out, char *err)
{
    int rc = tensor(g, name, want, out, NULL, err);
    if (!rc && !*out)
        rc = ifl_err(err, IFL_EFORMAT, "refclip: '%s' is missing", name);
    return rc;
}

/* y[r][o] = sum_i x[r][i] w[o][i] + b[o], r < nr */
static void linear(double *y, const double *x, int nr, const double *w, const double *b, int n_in,
                   int n_out)
{
    for (int r = 0; r < nr; r++)
        for (int o = 0; o < n_out; o++) {
            double s = b ? b[o] : 0;
            for (int i = 0; i < n_in; i++)
                s += x[(size_t)r * n_in + i] * w[(size_t)o * n_in + i];
            y[(size_t)r * n_out + o] = s;
        }
}

static void lnorm(double *y, const double *x, int nr, int n, const double *w, const double *b,
                  double eps)
{
    for (int r = 0; r < nr; r++) {
        const double *xr = x + (size_t)r * n;
        double m = 0, v = 0;
        for (int i = 0; i < n; i++)
            m += xr[i];
        m /= n;
        for (int i = 0; i < n; i++)
            v += (xr[i] - m) * (xr[i] - m);
        v /= n;
        for (int i = 0; i < n; i++)
            y[(size_t)r * n + i] = (xr[i] - m) / sqrt(v + eps) * (w ? w[i] : 1) + (b ? b[i] : 0);
    }
}

static double gelu_tanh(double v)
{
    return 0.5 * v * (1 + tanh(sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
}

static int get(const struct ifl_gguf *g, const char *key, int64_t *v, char *err)
{
    int rc = ifl_gguf_get_int(g, key, v, err);
    if (rc == IFL_ENOTFOUND)
        return ifl_err(err, rc, "refclip: key '%s' missing", key);
    return rc;
}

int ref_clip_encode(const char *path, const float *pixels, int cls_last, float *out,
                    struct refclip_shape *shape, char *err)
{
    struct ifl_gguf *g = NULL;
    int rc = ifl_gguf_open(&g, path, err);
    if (rc)
        return rc;
    int64_t S, P, E, F, L, H, D, fl = -1;
    double eps;
    int gelu = 0, silu = 0, vl = 0;
    int64_t M = 1;
    if ((rc = get(g, "clip.vision.image_size", &S, err)) ||
        (rc = get(g, "clip.vision.patch_size", &P, err)) ||
        (rc = get(g, "clip.vision.embedding_length", &E, err)) ||
        (rc = get(g, "clip.vision.feed_forward_length", &F, err)) ||
        (rc = get(g, "clip.vision.block_count", &L, err)) ||
        (rc = get(g, "clip.vision.attention.head_count", &H, err)) ||
        (rc = get(g, "clip.vision.projection_dim", &D, err)) ||
        (rc = ifl_gguf_get_float(g, "clip.vision.attention.layer_norm_epsilon", &eps, err))) {
        ifl_gguf_free(g);
        return rc;
    }
    const char *pt;
    size_t ptl;
    if (!ifl_gguf_get_str(g, "clip.projector_type", &pt, &ptl, NULL))
        vl = ptl == 8 && !memcmp(pt, "internvl", 8);
    if (vl && ifl_gguf_get_int(g, "clip.vision.projector.scale_factor", &M, NULL))
        M = 2;
    ifl_gguf_get_bool(g, "clip.use_gelu", &gelu, NULL);
    ifl_gguf_get_bool(g, "clip.use_silu", &silu, NULL);
    struct ifl_gguf_value fla;
    if (!ifl_gguf_get_arr(g, "clip.vision.feature_layer", &fla, NULL))
        ifl_gguf_arr_int(&fla, 0, &fl);
    const int64_t side = S / P, N = side * side, hd = E / H;
    const int64_t n_run = vl ? L : fl >= 0 ? fl : L - 1, NT = N / (M * M), EM = E * M * M;
    if (shape) {
        shape->image_size = (int)S;
        shape->n_patches = (int)NT;
        shape->n_out = (int)D;
    }
    if (!out) {
        ifl_gguf_free(g);
        return 0;
    }
    double *pw = NULL, *pb = NULL, *cls = NULL, *pos = NULL, *prew = NULL, *preb = NULL,
           *postw = NULL, *postb = NULL, *m0 = NULL, *m0b = NULL, *m2 = NULL, *m2b = NULL,
           *mlnw = NULL, *mlnb = NULL, *ls1 = NULL, *ls2 = NULL;
    double *h = NULL, *a = NULL, *q = NULL, *k = NULL, *v = NULL, *o = NULL, *t = NULL, *f = NULL,
           *s = NULL;
    int64_t H0 = 0;
    if ((rc = need(g, "v.patch_embd.weight", 3 * P * P * E, &pw, err)) ||
        (rc = tensor(g, "v.patch_embd.bias", E, &pb, NULL, err)) ||
        (rc = tensor(g, "v.class_embd", E, &cls, NULL, err)))
        goto out;
    const int64_t T = N + (cls ? 1 : 0);
    if ((rc = need(g, "v.position_embd.weight", T * E, &pos, err)) ||
        (rc = tensor(g, "v.pre_ln.weight", E, &prew, NULL, err)) ||
        (rc = tensor(g, "v.pre_ln.bias", E, &preb, NULL, err)) ||
        (rc = tensor(g, "v.post_ln.weight", E, &postw, NULL, err)) ||
        (rc = tensor(g, "v.post_ln.bias", E, &postb, NULL, err)) ||
        (rc = tensor(g, vl ? "mm.model.mlp.1.weight" : "mm.0.weight", 0, &m0, &H0, err)) ||
        (rc = tensor(g, vl ? "mm.model.mlp.1.bias" : "mm.0.bias", 0, &m0b, NULL, err)) ||
        (rc = tensor(g, vl ? "mm.model.mlp.3.weight" : "mm.2.weight", 0, &m2, NULL, err)) ||
        (rc = tensor(g, vl ? "mm.model.mlp.3.bias" : "mm.2.bias", 0, &m2b, NULL, err)) ||
        (vl && (rc = need(g, "mm.model.mlp.0.weight", EM, &mlnw, err))) ||
        (vl && (rc = need(g, "mm.model.mlp.0.bias", EM, &mlnb, err))))
        goto out;
    if (!m0 || !m2 || H0 != EM) {
        rc = ifl_err(err, IFL_EFORMAT, "refclip: the projector's tensors are missing or misshapen");
        goto out;
    }
    const struct ifl_gguf_tensor *tm0 =
        ifl_gguf_find_tensor(g, vl ? "mm.model.mlp.1.weight" : "mm.0.weight");
    const int64_t HM = tm0->ne[1];
    const struct ifl_gguf_tensor *tm2 =
        ifl_gguf_find_tensor(g, vl ? "mm.model.mlp.3.weight" : "mm.2.weight");
    if (tm2->ne[0] != HM || tm2->ne[1] != D) {
        rc = ifl_err(err, IFL_EFORMAT, "refclip: mm.2.weight is not [%lld, %lld]", (long long)HM,
                     (long long)D);
        goto out;
    }
    int64_t W = EM > F ? EM : F;
    W = W > HM ? W : HM;
    W = W > D ? W : D;
    h = calloc((size_t)(T * E), sizeof(double));
    a = calloc((size_t)(T * W), sizeof(double));
    q = calloc((size_t)(T * E), sizeof(double));
    k = calloc((size_t)(T * E), sizeof(double));
    v = calloc((size_t)(T * E), sizeof(double));
    o = calloc((size_t)(T * E), sizeof(double));
    t = calloc((size_t)(T * W), sizeof(double));
    f = calloc((size_t)(T * W), sizeof(double));
    s = calloc((size_t)T, sizeof(double));
    if (!h || !a || !q || !k || !v || !o || !t || !f || !s) {
        rc = ifl_err(err, IFL_ENOMEM, "refclip: out of memory");
        goto out;
    }

    /* embeddings: row order is [cls, patches] (or [patches, cls]) and row
     * r takes position embedding r either way */
    const int64_t pr0 = cls && !cls_last ? 1 : 0; /* first patch row */
    double *patch = malloc((size_t)(3 * P * P) * sizeof(double));
    if (!patch) {
        rc = ifl_err(err, IFL_ENOMEM, "refclip: out of memory");
        goto out;
    }
    for (int64_t p = 0; p < N; p++) {
        int64_t py = p / side, px = p % side;
        for (int64_t c = 0; c < 3; c++)
            for (int64_t y = 0; y < P; y++)
                for (int64_t x = 0; x < P; x++)
                    patch[(c * P + y) * P + x] = pixels[(c * S + py * P + y) * S + px * P + x];
        linear(h + (pr0 + p) * E, patch, 1, pw, pb, (int)(3 * P * P), (int)E);
    }
    free(patch);
    if (cls)
        memcpy(h + (cls_last ? N : 0) * E, cls, sizeof(double) * (size_t)E);
    for (int64_t i = 0; i < T * E; i++)
        h[i] += pos[i];
    if (prew)
        lnorm(h, h, (int)T, (int)E, prew, preb, eps);

    for (int64_t il = 0; il < n_run; il++) {
        double *w[16] = {0};
        static const char *const names[8] = {"ln1",      "attn_q", "attn_k", "attn_v",
                                             "attn_out", "ln2",    "ffn_up", "ffn_down"};
        int64_t up_in = 0;
        for (int i = 0; i < 8 && !rc; i++) {
            char wn[80], bn[80];
            snprintf(wn, sizeof wn, "v.blk.%lld.%s.weight", (long long)il, names[i]);
            snprintf(bn, sizeof bn, "v.blk.%lld.%s.bias", (long long)il, names[i]);
            int64_t ne0 = 0;
            rc = tensor(g, wn, 0, &w[2 * i], &ne0, err);
            if (!rc && !w[2 * i])
                rc = ifl_err(err, IFL_EFORMAT, "refclip: '%s' is missing", wn);
            if (!rc)
                rc = tensor(g, bn, 0, &w[2 * i + 1], NULL, err);
            if (i == 6)
                up_in = ne0;
        }
        if (!rc) {
            /* fc1 takes E inputs: ffn_up unless the file swapped the names */
            int sw = up_in != E;
            double *fc1 = w[sw ? 14 : 12], *fc1b = w[sw ? 15 : 13];
            double *fc2 = w[sw ? 12 : 14], *fc2b = w[sw ? 13 : 15];
            lnorm(a, h, (int)T, (int)E, w[0], w[1], eps);
            linear(q, a, (int)T, w[2], w[3], (int)E, (int)E);
            linear(k, a, (int)T, w[4], w[5], (int)E, (int)E);
            linear(v, a, (int)T, w[6], w[7], (int)E, (int)E);
            for (int64_t hh = 0; hh < H; hh++)
                for (int64_t i = 0; i < T; i++) {
                    double mx = -INFINITY, sum = 0;
                    for (int64_t j = 0; j < T; j++) {
                        double d = 0;
                        for (int64_t e = 0; e < hd; e++)
                            d += q[i * E + hh * hd + e] * k[j * E + hh * hd + e];
                        s[j] = d / sqrt((double)hd);
                        mx = s[j] > mx ? s[j] : mx;
                    }
                    for (int64_t j = 0; j < T; j++)
                        sum += (s[j] = exp(s[j] - mx));
                    for (int64_t e = 0; e < hd; e++) {
                        double acc = 0;
                        for (int64_t j = 0; j < T; j++)
                            acc += s[j] / sum * v[j * E + hh * hd + e];
                        o[i * E + hh * hd + e] = acc;
                    }
                }
            char ln[80];
            snprintf(ln, sizeof ln, "v.blk.%lld.ls1.weight", (long long)il);
            rc = tensor(g, ln, E, &ls1, NULL, err);
            snprintf(ln, sizeof ln, "v.blk.%lld.ls2.weight", (long long)il);
            if (!rc)
                rc = tensor(g, ln, E, &ls2, NULL, err);
            linear(t, o, (int)T, w[8], w[9], (int)E, (int)E);
            for (int64_t i = 0; i < T * E; i++)
                h[i] += t[i] * (ls1 ? ls1[i % E] : 1);
            lnorm(a, h, (int)T, (int)E, w[10], w[11], eps);
            linear(f, a, (int)T, fc1, fc1b, (int)E, (int)F);
            for (int64_t i = 0; i < T * F; i++) {
                double x = f[i];
                f[i] = gelu ? gelu_tanh(x) : silu ? x / (1 + exp(-x)) : x / (1 + exp(-1.702 * x));
            }
            linear(t, f, (int)T, fc2, fc2b, (int)F, (int)E);
            for (int64_t i = 0; i < T * E; i++)
                h[i] += t[i] * (ls2 ? ls2[i % E] : 1);
        }
        free(ls1);
        free(ls2);
        ls1 = ls2 = NULL;
        for (int i = 0; i < 16; i++)
            free(w[i]);
        if (rc)
            goto out;
    }
    if (postw)
        lnorm(h, h, (int)T, (int)E, postw, postb, eps);
    /* the rows kept: every row but the first when there is a class token
     * (with cls_last that keeps the class row and drops patch 0, as
     * llama.cpp's "patches" input does) */
    const double *kept = h + (cls ? E : 0);
    if (vl) {
        /* llama.cpp's InternVL graph puts the class token last and keeps
         * the first N rows: the patches either way */
        kept = h + (cls && !cls_last ? E : 0);
        for (int64_t tk = 0; tk < NT; tk++) {
            int64_t bx = tk % (side / M), by = tk / (side / M);
            for (int64_t dy = 0; dy < M; dy++)
                for (int64_t dx = 0; dx < M; dx++)
                    memcpy(a + tk * EM + (dy * M + dx) * E,
                           kept + ((by * M + dy) * side + bx * M + dx) * E, sizeof(double) * E);
        }
        lnorm(a, a, (int)NT, (int)EM, mlnw, mlnb, 1e-5);
        kept = a;
    }
    linear(f, kept, (int)NT, m0, m0b, (int)EM, (int)HM);
    for (int64_t i = 0; i < NT * HM; i++)
        f[i] = gelu_tanh(f[i]);
    linear(t, f, (int)NT, m2, m2b, (int)HM, (int)D);
    for (int64_t i = 0; i < NT * D; i++)
        out[i] = (float)t[i];
out:
    free(pw);
    free(pb);
    free(cls);
    free(pos);
    free(prew);
    free(preb);
    free(postw);
    free(postb);
    free(m0);
    free(m0b);
    free(m2);
    free(m2b);
    free(mlnw);
    free(mlnb);
    free(ls1);
    free(ls2);
    free(h);
    free(a);
    free(q);
    free(k);
    free(v);
    free(o);
    free(t);
    free(f);
    free(s);
    ifl_gguf_free(g);
    return rc;
}
