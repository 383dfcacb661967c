/*
 * The mmproj loader (clip.h): keys and tensors of llama.cpp's CLIP files,
 * checked as our text-model loader checks its own. The file is untrusted:
 * every dimension is bounded before it sizes anything, and every tensor's
 * type and shape must be the one the computation reads (the GGUF reader
 * has already checked that its bytes lie inside the file).
 */
#include "vision/clip.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/fp16.h"
#include "kernels/kernels.h"
#include "model/gguf.h"

/* Bounds on what a file may ask for: past CLIP ViT-bigG and SigLIP-so400m
 * with room to spare, small enough that no product overflows. */
#define MAX_IMAGE_SIZE 4096
#define MAX_PATCHES 16384
#define MAX_EMBD 16384
#define MAX_FF 65536
#define MAX_LAYER 256

void ifl_clip_free(struct ifl_clip *c)
{
    if (!c)
        return;
    for (int i = 0; i < c->n_owned; i++)
        free(c->owned[i]);
    free(c->owned);
    free(c->layers);
    ifl_gguf_free(c->gguf);
    free(c);
}

/* Keeps p, to be freed with the model. */
static int own(struct ifl_clip *c, void *p, char *err)
{
    if (c->n_owned == c->cap_owned) {
        int cap = c->cap_owned ? 2 * c->cap_owned : 64;
        float **q = realloc(c->owned, sizeof(float *) * (size_t)cap);
        if (!q) {
            free(p);
            return ifl_err(err, IFL_ENOMEM, "mmproj: out of memory");
        }
        c->owned = q;
        c->cap_owned = cap;
    }
    c->owned[c->n_owned++] = p;
    return 0;
}

static int get_u32(const struct ifl_gguf *g, const char *key, int64_t lo, int64_t hi, int32_t *out,
                   char *err)
{
    int64_t v;
    int rc = ifl_gguf_get_int(g, key, &v, err);
    if (rc == IFL_ENOTFOUND)
        return ifl_err(err, IFL_EFORMAT, "mmproj: key %s is missing", key);
    if (rc)
        return rc;
    if (v < lo || v > hi)
        return ifl_err(err, IFL_EFORMAT, "mmproj: %s = %lld is outside %lld..%lld", key,
                       (long long)v, (long long)lo, (long long)hi);
    *out = (int32_t)v;
    return 0;
}

/* An optional bool key: 0 when absent. */
static int get_flag(const struct ifl_gguf *g, const char *key, int *out, char *err)
{
    int rc = ifl_gguf_get_bool(g, key, out, err);
    if (rc == IFL_ENOTFOUND) {
        *out = 0;
        return 0;
    }
    return rc;
}

static int get_rgb(const struct ifl_gguf *g, const char *key, float out[3], char *err)
{
    struct ifl_gguf_value a;
    int rc = ifl_gguf_get_arr(g, key, &a, err);
    if (rc == IFL_ENOTFOUND)
        return ifl_err(err, IFL_EFORMAT, "mmproj: key %s is missing", key);
    if (rc)
        return rc;
    if (a.n < 3)
        return ifl_err(err, IFL_EFORMAT, "mmproj: %s has %llu values, not 3", key,
                       (unsigned long long)a.n);
    for (int i = 0; i < 3; i++) {
        double v;
        if (ifl_gguf_arr_float(&a, (uint64_t)i, &v) || !isfinite(v))
            return ifl_err(err, IFL_EFORMAT, "mmproj: %s[%d] is not a finite float", key, i);
        out[i] = (float)v;
    }
    return 0;
}

/* Optional u32 key: *out keeps its default when absent. */
static int get_opt_u32(const struct ifl_gguf *g, const char *key, int64_t lo, int64_t hi,
                       int32_t *out, char *err)
{
    if (ifl_gguf_find_key(g, key) < 0)
        return 0;
    return get_u32(g, key, lo, hi, out, err);
}

/* InternVL's keys: the pixel shuffle's side (clip.vision.projector.scale_factor,
 * 1 / downsample_ratio; 2 when absent, InternVL's downsample_ratio of 0.5)
 * and the tiling grid's bounds (preproc_min_tiles / preproc_max_tiles; 1
 * and 12 when absent, as llama.cpp takes them). */
static int read_internvl(const struct ifl_gguf *g, struct ifl_clip_hparams *hp, char *err)
{
    int rc;
    hp->merge = 2;
    hp->min_tiles = 1;
    hp->max_tiles = 12;
    if ((rc = get_opt_u32(g, "clip.vision.projector.scale_factor", 1, 64, &hp->merge, err)) ||
        (rc = get_opt_u32(g, "clip.vision.preproc_min_tiles", 1, IFL_CLIP_MAX_TILES - 1,
                          &hp->min_tiles, err)) ||
        (rc = get_opt_u32(g, "clip.vision.preproc_max_tiles", 1, IFL_CLIP_MAX_TILES - 1,
                          &hp->max_tiles, err)))
        return rc;
    if (hp->min_tiles > hp->max_tiles)
        return ifl_err(err, IFL_EFORMAT,
                       "mmproj: preproc_min_tiles %d is over preproc_max_tiles %d", hp->min_tiles,
                       hp->max_tiles);
    if (hp->n_side % hp->merge)
        return ifl_err(err, IFL_EFORMAT,
                       "mmproj: projector.scale_factor %d does not divide the %d patches a side",
                       hp->merge, hp->n_side);
    hp->n_tok = hp->n_patches / (hp->merge * hp->merge);
    if (!ifl_gguf_find_tensor(g, "v.class_embd"))
        return ifl_err(err, IFL_EFORMAT,
                       "mmproj: tensor 'v.class_embd' is missing (InternViT has "
                       "a class token)");
    return 0;
}

static int read_hparams(struct ifl_clip *c, char *err)
{
    const struct ifl_gguf *g = c->gguf;
    struct ifl_clip_hparams *hp = &c->hp;
    const char *s;
    size_t len;
    int rc = ifl_gguf_get_str(g, "general.architecture", &s, &len, err);
    if (rc == IFL_ENOTFOUND || (!rc && (len != 4 || memcmp(s, "clip", 4))))
        return ifl_err(err, IFL_EFORMAT,
                       "mmproj: general.architecture is not \"clip\" (not a projector file)");
    if (rc)
        return rc;
    int has_vision = 1;
    rc = ifl_gguf_get_bool(g, "clip.has_vision_encoder", &has_vision, err);
    if (rc && rc != IFL_ENOTFOUND)
        return rc;
    if (!has_vision)
        return ifl_err(err, IFL_EUNSUPPORTED, "mmproj: the file has no vision encoder");
    rc = ifl_gguf_get_str(g, "clip.projector_type", &s, &len, err);
    if (rc == IFL_ENOTFOUND)
        rc = ifl_gguf_get_str(g, "clip.vision.projector_type", &s, &len, err);
    if (rc == IFL_ENOTFOUND)
        return ifl_err(err, IFL_EFORMAT, "mmproj: key clip.projector_type is missing");
    if (rc)
        return rc;
    if (len == 3 && !memcmp(s, "mlp", 3)) {
        hp->proj = IFL_CLIP_PROJ_MLP;
    } else if (len == 8 && !memcmp(s, "internvl", 8)) {
        hp->proj = IFL_CLIP_PROJ_INTERNVL;
    } else {
        char shown[65]; /* the file's bytes, printable ASCII only */
        size_t n = len < 64 ? len : 64;
        for (size_t i = 0; i < n; i++)
            shown[i] = s[i] >= 0x20 && s[i] < 0x7f ? s[i] : '?';
        shown[n] = 0;
        return ifl_err(err, IFL_EUNSUPPORTED,
                       "mmproj: projector type \"%s\" is not supported (only \"mlp\", LLaVA-1.5, "
                       "and \"internvl\")",
                       shown);
    }
    if (hp->proj == IFL_CLIP_PROJ_MLP &&
        ifl_gguf_find_key(g, "clip.vision.image_grid_pinpoints") >= 0)
        return ifl_err(err, IFL_EUNSUPPORTED,
                       "mmproj: clip.vision.image_grid_pinpoints (LLaVA-1.6 tiling) is not "
                       "supported");
    if ((rc = get_u32(g, "clip.vision.image_size", 1, MAX_IMAGE_SIZE, &hp->image_size, err)) ||
        (rc = get_u32(g, "clip.vision.patch_size", 1, MAX_IMAGE_SIZE, &hp->patch_size, err)) ||
        (rc = get_u32(g, "clip.vision.embedding_length", 1, MAX_EMBD, &hp->n_embd, err)) ||
        (rc = get_u32(g, "clip.vision.feed_forward_length", 1, MAX_FF, &hp->n_ff, err)) ||
        (rc = get_u32(g, "clip.vision.block_count", 1, MAX_LAYER, &hp->n_layer, err)) ||
        (rc = get_u32(g, "clip.vision.projection_dim", 1, MAX_FF, &hp->n_out, err)) ||
        (rc = get_u32(g, "clip.vision.attention.head_count", 1, MAX_EMBD, &hp->n_head, err)))
        return rc;
    if (hp->patch_size > hp->image_size)
        return ifl_err(err, IFL_EFORMAT, "mmproj: patch_size %d is larger than image_size %d",
                       hp->patch_size, hp->image_size);
    hp->n_side = hp->image_size / hp->patch_size;
    if ((int64_t)hp->n_side * hp->n_side > MAX_PATCHES)
        return ifl_err(err, IFL_EFORMAT, "mmproj: %d x %d patches is over the limit of %d",
                       hp->n_side, hp->n_side, MAX_PATCHES);
    hp->n_patches = hp->n_side * hp->n_side;
    hp->n_tok = hp->n_patches;
    hp->merge = 1;
    hp->min_tiles = hp->max_tiles = 1;
    if (hp->proj == IFL_CLIP_PROJ_INTERNVL && (rc = read_internvl(g, hp, err)))
        return rc;
    if (hp->n_embd % hp->n_head)
        return ifl_err(err, IFL_EFORMAT, "mmproj: %d heads do not divide embedding_length %d",
                       hp->n_head, hp->n_embd);
    hp->head_dim = hp->n_embd / hp->n_head;
    int32_t kv = hp->n_head;
    int64_t v;
    rc = ifl_gguf_get_int(g, "clip.vision.attention.head_count_kv", &v, err);
    if (!rc && v != hp->n_head)
        return ifl_err(err, IFL_EUNSUPPORTED,
                       "mmproj: head_count_kv %lld != head_count %d (grouped attention) is not "
                       "supported",
                       (long long)v, kv);
    if (rc && rc != IFL_ENOTFOUND)
        return rc;
    double eps;
    rc = ifl_gguf_get_float(g, "clip.vision.attention.layer_norm_epsilon", &eps, err);
    if (rc == IFL_ENOTFOUND)
        return ifl_err(err, IFL_EFORMAT,
                       "mmproj: key clip.vision.attention.layer_norm_epsilon is missing");
    if (rc)
        return rc;
    if (!(eps >= 0 && eps < 1))
        return ifl_err(err, IFL_EFORMAT, "mmproj: layer_norm_epsilon %g is outside [0, 1)", eps);
    hp->eps = (float)eps;
    int gelu, silu;
    if ((rc = get_flag(g, "clip.use_gelu", &gelu, err)) ||
        (rc = get_flag(g, "clip.use_silu", &silu, err)))
        return rc;
    if (gelu && silu)
        return ifl_err(err, IFL_EFORMAT, "mmproj: both clip.use_gelu and clip.use_silu are set");
    hp->act = gelu ? IFL_CLIP_GELU : silu ? IFL_CLIP_SILU : IFL_CLIP_GELU_QUICK;
    if ((rc = get_rgb(g, "clip.vision.image_mean", hp->mean, err)) ||
        (rc = get_rgb(g, "clip.vision.image_std", hp->std, err)))
        return rc;
    for (int i = 0; i < 3; i++)
        if (!(hp->std[i] != 0))
            return ifl_err(err, IFL_EFORMAT, "mmproj: clip.vision.image_std[%d] is 0", i);
    hp->pad[0] = 122;
    hp->pad[1] = 116;
    hp->pad[2] = 104;
    /* the layer whose output the projector reads: InternVL's is the last
     * (llama.cpp's graph runs every layer and reads no feature_layer key) */
    hp->n_run = hp->n_layer - 1;
    if (hp->proj == IFL_CLIP_PROJ_INTERNVL) {
        hp->n_run = hp->n_layer;
        if (hp->n_embd == 3200 && hp->n_layer == 45)
            return ifl_err(err, IFL_EUNSUPPORTED,
                           "mmproj: InternViT-6B (RMSNorm, 3200 wide, 45 layers) is not "
                           "supported; the 300M ViT of the smaller InternVL models is");
        return 0;
    }
    struct ifl_gguf_value fl;
    rc = ifl_gguf_get_arr(g, "clip.vision.feature_layer", &fl, err);
    if (!rc) {
        int64_t l;
        if (fl.n != 1)
            return ifl_err(err, IFL_EUNSUPPORTED,
                           "mmproj: clip.vision.feature_layer lists %llu layers (stacked "
                           "features are not supported; one layer is)",
                           (unsigned long long)fl.n);
        if (ifl_gguf_arr_int(&fl, 0, &l) || l < 0 || l > hp->n_layer)
            return ifl_err(err, IFL_EFORMAT,
                           "mmproj: clip.vision.feature_layer is not a layer in 0..%d",
                           hp->n_layer);
        hp->n_run = (int32_t)l;
    } else if (rc != IFL_ENOTFOUND) {
        return rc;
    }
    return 0;
}

/* Tensor `name` with the shape ne (n_dims entries; the rest 1), or NULL
 * and IFL_ENOTFOUND (err untouched) when absent; IFL_EFORMAT when present
 * with another shape. */
static int find(const struct ifl_clip *c, const char *name, int n_dims, const int64_t *ne,
                const struct ifl_gguf_tensor **out, char *err)
{
    *out = NULL;
    const struct ifl_gguf_tensor *t = ifl_gguf_find_tensor(c->gguf, name);
    if (!t)
        return IFL_ENOTFOUND;
    for (int d = 0; d < IFL_GGUF_MAX_DIMS; d++) {
        int64_t want = d < n_dims ? ne[d] : 1;
        if (t->ne[d] != want)
            return ifl_err(err, IFL_EFORMAT,
                           "mmproj: tensor '%s' has shape [%lld, %lld, %lld, %lld], not the "
                           "[%lld, %lld, %lld, %lld] the hyper-parameters give",
                           name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                           (long long)t->ne[3], (long long)ne[0],
                           (long long)(n_dims > 1 ? ne[1] : 1), (long long)(n_dims > 2 ? ne[2] : 1),
                           (long long)(n_dims > 3 ? ne[3] : 1));
    }
    *out = t;
    return 0;
}

/* An F32 copy of n floats from an F32, F16 or BF16 tensor of n elements
 * (shape already checked); NULL through *out when absent and optional. */
static int load_floats(struct ifl_clip *c, const char *name, int n_dims, const int64_t *ne,
                       int required, const float **out, char *err)
{
    const struct ifl_gguf_tensor *t;
    *out = NULL;
    int rc = find(c, name, n_dims, ne, &t, err);
    if (rc == IFL_ENOTFOUND)
        return required ? ifl_err(err, IFL_EFORMAT, "mmproj: tensor '%s' is missing", name) : 0;
    if (rc)
        return rc;
    if (t->type != IFL_TYPE_F32 && t->type != IFL_TYPE_F16 && t->type != IFL_TYPE_BF16)
        return ifl_err(err, IFL_EFORMAT,
                       "mmproj: tensor '%s' is of type %u (want f32, f16 or bf16)", name, t->type);
    size_t n = 1;
    for (int d = 0; d < n_dims; d++)
        n *= (size_t)ne[d];
    float *f = malloc(n * sizeof(float));
    if (!f)
        return ifl_err(err, IFL_ENOMEM, "mmproj: out of memory for '%s'", name);
    int rc2 = own(c, f, err);
    if (rc2)
        return rc2;
    const uint8_t *p = t->data;
    for (size_t i = 0; i < n; i++) {
        if (t->type == IFL_TYPE_F32) {
            memcpy(&f[i], p + 4 * i, 4);
        } else {
            uint16_t h;
            memcpy(&h, p + 2 * i, 2);
            f[i] = t->type == IFL_TYPE_F16 ? ifl_f16_to_f32(h) : ifl_bf16_to_f32(h);
        }
    }
    *out = f;
    return 0;
}

/* A weight matrix n_in -> n_out of a type the kernels multiply with, as a
 * view into the mapping. dims/ne give the stored shape (a convolution's is
 * 4-D; its rows are still n_in contiguous elements). */
static int load_mat(struct ifl_clip *c, const char *name, int n_dims, const int64_t *ne,
                    int64_t n_in, int64_t n_out, struct ifl_mat *m, char *err)
{
    const struct ifl_gguf_tensor *t;
    int rc = find(c, name, n_dims, ne, &t, err);
    if (rc == IFL_ENOTFOUND)
        return ifl_err(err, IFL_EFORMAT, "mmproj: tensor '%s' is missing", name);
    if (rc)
        return rc;
    const struct ifl_type_info *ti = ifl_type_info(t->type);
    if (!ti || !ti->is_weight || !ifl_kernels_best()->gemm[t->type])
        return ifl_err(err, IFL_EUNSUPPORTED,
                       "mmproj: tensor '%s': weight type %s is not supported", name,
                       ti && ti->name ? ti->name : "(unknown)");
    if (n_in % ti->blck || n_in % ifl_type_info(ti->act)->blck)
        return ifl_err(err, IFL_EFORMAT,
                       "mmproj: tensor '%s': rows of %lld are not whole %s blocks of %lld", name,
                       (long long)n_in, ti->name, (long long)ti->blck);
    memset(m, 0, sizeof *m);
    m->data = t->data;
    m->type = (enum ifl_type)t->type;
    m->n_in = n_in;
    m->n_out = n_out;
    m->row_bytes = ifl_type_row_size(m->type, n_in);
    return 0;
}

static int load_linear(struct ifl_clip *c, const char *base, int64_t n_in, int64_t n_out,
                       struct ifl_mat *m, const float **bias, char *err)
{
    char name[96];
    int64_t ne[2] = {n_in, n_out};
    snprintf(name, sizeof name, "%s.weight", base);
    int rc = load_mat(c, name, 2, ne, n_in, n_out, m, err);
    if (rc)
        return rc;
    snprintf(name, sizeof name, "%s.bias", base);
    return load_floats(c, name, 1, &n_out, 0, bias, err);
}

static int load_norm(struct ifl_clip *c, const char *base, int required, const float **w,
                     const float **b, char *err)
{
    char name[96];
    int64_t n = c->hp.n_embd;
    snprintf(name, sizeof name, "%s.weight", base);
    int rc = load_floats(c, name, 1, &n, required, w, err);
    if (rc)
        return rc;
    snprintf(name, sizeof name, "%s.bias", base);
    return load_floats(c, name, 1, &n, 0, b, err);
}

static int load_layer(struct ifl_clip *c, int il, char *err)
{
    const struct ifl_clip_hparams *hp = &c->hp;
    struct ifl_clip_layer *L = &c->layers[il];
    char base[64];
    int rc;
    static const char *const qkvo[4] = {"attn_q", "attn_k", "attn_v", "attn_out"};
    struct ifl_mat *mats[4] = {&L->wq, &L->wk, &L->wv, &L->wo};
    const float **bias[4] = {&L->bq, &L->bk, &L->bv, &L->bo};
    snprintf(base, sizeof base, "v.blk.%d.ln1", il);
    if ((rc = load_norm(c, base, 1, &L->ln1_w, &L->ln1_b, err)))
        return rc;
    snprintf(base, sizeof base, "v.blk.%d.ln2", il);
    if ((rc = load_norm(c, base, 1, &L->ln2_w, &L->ln2_b, err)))
        return rc;
    for (int i = 0; i < 4; i++) {
        snprintf(base, sizeof base, "v.blk.%d.%s", il, qkvo[i]);
        if ((rc = load_linear(c, base, hp->n_embd, hp->n_embd, mats[i], bias[i], err)))
            return rc;
    }
    /* ffn_up is the matrix whose input is n_embd; llava's old converter
     * wrote fc1 as ffn_down and fc2 as ffn_up, and llama.cpp swaps them
     * back when the shapes say so */
    char up[64], down[64];
    snprintf(up, sizeof up, "v.blk.%d.ffn_up.weight", il);
    snprintf(down, sizeof down, "v.blk.%d.ffn_down.weight", il);
    const struct ifl_gguf_tensor *td = ifl_gguf_find_tensor(c->gguf, down);
    int swapped = td && td->ne[0] == hp->n_embd && hp->n_embd != hp->n_ff;
    snprintf(base, sizeof base, "v.blk.%d.%s", il, swapped ? "ffn_down" : "ffn_up");
    if ((rc = load_linear(c, base, hp->n_embd, hp->n_ff, &L->up, &L->b_up, err)))
        return rc;
    snprintf(base, sizeof base, "v.blk.%d.%s", il, swapped ? "ffn_up" : "ffn_down");
    if ((rc = load_linear(c, base, hp->n_ff, hp->n_embd, &L->down, &L->b_down, err)))
        return rc;
    /* InternViT's layer scales: the attention's and the FFN's outputs are
     * multiplied by them before the residual adds */
    int64_t E = hp->n_embd;
    snprintf(base, sizeof base, "v.blk.%d.ls1.weight", il);
    if ((rc = load_floats(c, base, 1, &E, 0, &L->ls1, err)))
        return rc;
    snprintf(base, sizeof base, "v.blk.%d.ls2.weight", il);
    return load_floats(c, base, 1, &E, 0, &L->ls2, err);
}

/* Every matrix whose type has an x16 kernel goes into that layout (a copy;
 * the file's pages are let go): an encoder's matmuls have hundreds of rows
 * a call, where the x16 kernels' outer-product tiles (16 columns per
 * vector, several rows per tile) beat the dot-product ones that decoding
 * one token favours, so this ignores x16_pays, which is tuned for decoding. */
/* With c->bf16 an F16 matrix is rounded to BF16 on the way (clip.h's
 * IFL_CLIP_PREC_BF16), 16 rows at a time through a small buffer: both
 * types take 2 bytes an element, so the rows keep their size. */
static int repack(struct ifl_clip *c, struct ifl_mat *m, char *err)
{
    const struct ifl_kernels *kn = ifl_kernels_best();
    const enum ifl_type t = c->bf16 && m->type == IFL_TYPE_F16 ? IFL_TYPE_BF16 : m->type;
    if (!kn->gemm_x16[t] || m->n_out % 16)
        return 0;
    size_t bytes = m->row_bytes * (size_t)m->n_out;
    void *dst = aligned_alloc(64, (bytes + 63) / 64 * 64);
    uint16_t *rows = t != m->type ? malloc(16 * m->row_bytes) : NULL;
    if (!dst || (t != m->type && !rows)) {
        free(dst);
        free(rows);
        return ifl_err(err, IFL_ENOMEM, "mmproj: out of memory repacking a matrix");
    }
    for (int64_t g = 0; g < m->n_out / 16; g++) {
        const char *src = (const char *)m->data + (size_t)g * 16 * m->row_bytes;
        if (rows) {
            const uint16_t *h = (const uint16_t *)src;
            for (size_t i = 0; i < 16 * (size_t)m->n_in; i++)
                rows[i] = ifl_f32_to_bf16(ifl_f16_to_f32(h[i]));
            src = (const char *)rows;
        }
        ifl_repack_x16(t, m->n_in, src, m->row_bytes, (char *)dst + (size_t)g * 16 * m->row_bytes);
    }
    free(rows);
    ifl_gguf_release(c->gguf, m->data, bytes);
    m->data = dst;
    m->type = t;
    m->x16 = 1;
    return own(c, dst, err);
}

static int repack_all(struct ifl_clip *c, char *err)
{
    int rc = repack(c, &c->patch, err);
    for (int il = 0; il < c->hp.n_layer && !rc; il++) {
        struct ifl_clip_layer *L = &c->layers[il];
        struct ifl_mat *ms[6] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->up, &L->down};
        for (int i = 0; i < 6 && !rc; i++)
            rc = repack(c, ms[i], err);
    }
    if (!rc)
        rc = repack(c, &c->mm0, err);
    if (!rc)
        rc = repack(c, &c->mm2, err);
    return rc;
}

/* The projector's hidden width: mm_name's outputs, bounded. */
static int proj_width(struct ifl_clip *c, const char *w0, const char *w1, char *err)
{
    const struct ifl_gguf_tensor *t0 = ifl_gguf_find_tensor(c->gguf, w0);
    if (!t0 || !ifl_gguf_find_tensor(c->gguf, w1))
        return ifl_err(err, IFL_EFORMAT, "mmproj: tensor '%s' is missing", t0 ? w1 : w0);
    if (t0->ne[1] < 1 || t0->ne[1] > MAX_FF)
        return ifl_err(err, IFL_EFORMAT, "mmproj: %s's %lld outputs are out of range", w0,
                       (long long)t0->ne[1]);
    c->hp.n_mm = (int32_t)t0->ne[1];
    return 0;
}

/* LLaVA-1.5: mm.0 (n_embd -> H), GELU, mm.2 (H -> D). */
static int load_mlp_proj(struct ifl_clip *c, char *err)
{
    struct ifl_clip_hparams *hp = &c->hp;
    int rc = proj_width(c, "mm.0.weight", "mm.2.weight", err);
    if (!rc)
        rc = load_linear(c, "mm.0", hp->n_embd, hp->n_mm, &c->mm0, &c->mm0_b, err);
    if (!rc)
        rc = load_linear(c, "mm.2", hp->n_mm, hp->n_out, &c->mm2, &c->mm2_b, err);
    return rc;
}

/* InternVL (llama.cpp's names, its converter's mlp1.0 / .1 / .3): the
 * LayerNorm mm.model.mlp.0 over the shuffled rows of n_embd merge^2, then
 * mm.model.mlp.1 (-> H), GELU, mm.model.mlp.3 (H -> D). */
static int load_internvl_proj(struct ifl_clip *c, char *err)
{
    struct ifl_clip_hparams *hp = &c->hp;
    int64_t W = (int64_t)hp->n_embd * hp->merge * hp->merge;
    if (W > MAX_FF)
        return ifl_err(err, IFL_EFORMAT, "mmproj: shuffled rows of %lld are over the limit",
                       (long long)W);
    int rc = proj_width(c, "mm.model.mlp.1.weight", "mm.model.mlp.3.weight", err);
    if (!rc)
        rc = load_floats(c, "mm.model.mlp.0.weight", 1, &W, 1, &c->mmln_w, err);
    if (!rc)
        rc = load_floats(c, "mm.model.mlp.0.bias", 1, &W, 1, &c->mmln_b, err);
    if (!rc)
        rc = load_linear(c, "mm.model.mlp.1", W, hp->n_mm, &c->mm0, &c->mm0_b, err);
    if (!rc)
        rc = load_linear(c, "mm.model.mlp.3", hp->n_mm, hp->n_out, &c->mm2, &c->mm2_b, err);
    return rc;
}

static int from_gguf(struct ifl_clip **out, struct ifl_gguf *g, enum ifl_clip_prec prec, char *err)
{
    *out = NULL;
    struct ifl_clip *c = calloc(1, sizeof *c);
    if (!c) {
        ifl_gguf_free(g);
        return ifl_err(err, IFL_ENOMEM, "mmproj: out of memory");
    }
    c->gguf = g;
    /* BF16 products only where a kernel makes them faster (clip.h) */
    c->bf16 = prec == IFL_CLIP_PREC_BF16 && ifl_kernels_best()->act_bf16[IFL_TYPE_BF16];
    struct ifl_clip_hparams *hp = &c->hp;
    int rc = read_hparams(c, err);
    if (rc)
        goto fail;
    int64_t E = hp->n_embd, P = hp->patch_size;
    int64_t pe[4] = {P, P, 3, E};
    if ((rc = load_mat(c, "v.patch_embd.weight", 4, pe, 3 * P * P, E, &c->patch, err)) ||
        (rc = load_floats(c, "v.patch_embd.bias", 1, &E, 0, &c->patch_b, err)) ||
        (rc = load_floats(c, "v.class_embd", 1, &E, 0, &c->cls, err)))
        goto fail;
    hp->n_pos = hp->n_patches + (c->cls ? 1 : 0);
    int64_t pos[2] = {E, hp->n_pos};
    if ((rc = load_floats(c, "v.position_embd.weight", 2, pos, 1, &c->pos, err)) ||
        (rc = load_norm(c, "v.pre_ln", 0, &c->pre_w, &c->pre_b, err)) ||
        (rc = load_norm(c, "v.post_ln", 0, &c->post_w, &c->post_b, err)))
        goto fail;
    if ((c->pre_b && !c->pre_w) || (c->post_b && !c->post_w)) {
        rc = ifl_err(err, IFL_EFORMAT, "mmproj: a LayerNorm bias without its weight");
        goto fail;
    }
    c->layers = calloc((size_t)hp->n_layer, sizeof *c->layers);
    if (!c->layers) {
        rc = ifl_err(err, IFL_ENOMEM, "mmproj: out of memory");
        goto fail;
    }
    for (int il = 0; il < hp->n_layer; il++)
        if ((rc = load_layer(c, il, err)))
            goto fail;
    if ((rc = hp->proj == IFL_CLIP_PROJ_INTERNVL ? load_internvl_proj(c, err)
                                                 : load_mlp_proj(c, err)) ||
        (rc = repack_all(c, err)))
        goto fail;
    *out = c;
    return 0;
fail:
    ifl_clip_free(c);
    return rc;
}

int ifl_clip_from_gguf(struct ifl_clip **out, struct ifl_gguf *g, char *err)
{
    return from_gguf(out, g, IFL_CLIP_PREC_F32, err);
}

int ifl_clip_load_prec(struct ifl_clip **out, const char *path, enum ifl_clip_prec prec, char *err)
{
    struct ifl_gguf *g = NULL;
    *out = NULL;
    if (prec != IFL_CLIP_PREC_F32 && prec != IFL_CLIP_PREC_BF16)
        return ifl_err(err, IFL_EINVAL, "mmproj: compute precision %d (0: f32, 1: bf16)",
                       (int)prec);
    int rc = ifl_gguf_open(&g, path, err);
    if (rc)
        return rc;
    return from_gguf(out, g, prec, err);
}

int ifl_clip_load(struct ifl_clip **out, const char *path, char *err)
{
    return ifl_clip_load_prec(out, path, IFL_CLIP_PREC_F32, err);
}
