/*
 * A CLIP vision encoder with a LLaVA-1.5 or an InternVL projector, read
 * from llama.cpp's mmproj GGUF files (general.architecture "clip",
 * clip.projector_type "mlp" or "internvl"), and run on the project's
 * kernels.
 *
 * What the file holds (ggml shapes, ne[0] first; E = n_embd, F = n_ff,
 * P = patch_size, N = (image_size / P)^2 patches, H = the projector's
 * hidden width, D = projection_dim, the text model's n_embd):
 *   v.patch_embd.weight  [P, P, 3, E]  the patch convolution (F32 or F16)
 *   v.patch_embd.bias    [E]           optional
 *   v.class_embd         [E]           optional: then N + 1 positions
 *   v.position_embd.weight [E, N (+1)]
 *   v.pre_ln.{weight,bias}, v.post_ln.{weight,bias}   optional LayerNorms
 *   v.blk.L.ln1, attn_q, attn_k, attn_v, attn_out, ln2, ffn_up, ffn_down
 *     (.weight and .bias each; ffn_up takes E to F whatever its name: old
 *     converters swapped the two names, so the shapes decide, as llama.cpp
 *     decides)
 *   mm.0.{weight,bias} [E, H], [H]; mm.2.{weight,bias} [H, D], [D]
 * Keys: clip.vision.{image_size, patch_size, embedding_length,
 * feed_forward_length, block_count, projection_dim, attention.head_count,
 * attention.layer_norm_epsilon, image_mean, image_std}, clip.use_gelu /
 * clip.use_silu (the FFN's activation; neither: quick GELU, x * sigmoid(1.702 x)),
 * clip.vision.feature_layer (optional).
 *
 * The computation (llama.cpp's tools/mtmd/models/llava.cpp, with the class
 * token first as in Hugging Face's CLIP):
 *   x = [class; patches W_patch + b] + pos;  x = LN_pre(x)
 *   n_run layers: x += Wo attn(LN1(x)) + bo;  x += W_down act(W_up LN2(x) + b_up) + b_down
 *   x = LN_post(x);  drop the class row;  out = W2 gelu(W0 x + b0) + b2
 * n_run is clip.vision.feature_layer when given (the hidden state after
 * that many layers; 0 is the embeddings), else block_count - 1: the
 * penultimate layer, llama.cpp's default for this projector. GELU is the
 * tanh form (ggml_gelu). llama.cpp's current llava graph puts the class
 * token last instead, which shifts each patch's position embedding by one
 * (llama.cpp issue 25814); tests/refclip.c can compute that order too, to
 * show it is the only difference.
 *
 * InternVL (clip.projector_type "internvl"; llama.cpp's models/internvl.cpp):
 * the same ViT with InternViT's differences: no pre-LN, every layer run,
 * the layer scales v.blk.L.ls1 / ls2 ([E]) multiplying the attention's and
 * the FFN's outputs before each residual add; the class token is first
 * here too (llama.cpp's graph puts it last, as for llava). Then the pixel
 * shuffle (clip.vision.projector.scale_factor m = 1 / downsample_ratio):
 * each m x m block of patches becomes one row of E m^2, the block's
 * patches side by side (top row first, left to right); then
 * mm.model.mlp.0 (a LayerNorm, eps 1e-5), mm.model.mlp.1 [E m^2, H], GELU,
 * mm.model.mlp.3 [H, D]. An image becomes several tiles (clip_prep.c).
 *
 * Ownership: an ifl_clip owns its mapping; matrices are views into it,
 * vectors owned F32 copies. Immutable after loading: share it between
 * threads. An ifl_clip_ctx (scratch for a batch of images and a thread
 * pool) is single-owner.
 */
#ifndef IFL_VISION_CLIP_H
#define IFL_VISION_CLIP_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"
#include "vision/image.h"

struct ifl_pool;

enum ifl_clip_act { IFL_CLIP_GELU_QUICK = 0, IFL_CLIP_GELU, IFL_CLIP_SILU };

/* The projector families: LLaVA-1.5's two linears ("mlp"), and InternVL's
 * pixel shuffle with a LayerNorm and two linears ("internvl"). */
enum ifl_clip_proj { IFL_CLIP_PROJ_MLP = 0, IFL_CLIP_PROJ_INTERNVL };

struct ifl_clip_hparams {
    int32_t image_size, patch_size;
    int32_t n_side;    /* image_size / patch_size */
    int32_t n_patches; /* n_side^2: the ViT's patch rows of one tile */
    int32_t n_tok;     /* output rows of one tile: n_patches / merge^2 */
    int32_t n_pos;     /* n_patches, plus one with a class token */
    int32_t n_embd, n_ff, n_head, head_dim;
    int32_t n_layer; /* block_count: the layers the file holds */
    int32_t n_run;   /* the layers run (see above) */
    int32_t n_mm;    /* the projector's hidden width H */
    int32_t n_out;   /* projection_dim D: floats per output row */
    float eps;
    enum ifl_clip_act act;
    float mean[3], std[3];
    uint8_t pad[3]; /* the colour padding fills with: 122, 116, 104 (llava's mean) */
    enum ifl_clip_proj proj;
    int32_t merge;                /* internvl: the pixel shuffle's side (1 / downsample_ratio) */
    int32_t min_tiles, max_tiles; /* internvl: the tiling grid's bounds (1 and 1: no tiles) */
};

struct ifl_clip_layer {
    const float *ln1_w, *ln1_b, *ln2_w, *ln2_b; /* [n_embd] */
    struct ifl_mat wq, wk, wv, wo;              /* n_embd -> n_embd */
    const float *bq, *bk, *bv, *bo;             /* [n_embd] or NULL */
    struct ifl_mat up;                          /* n_embd -> n_ff */
    struct ifl_mat down;                        /* n_ff -> n_embd */
    const float *b_up, *b_down;                 /* [n_ff], [n_embd] or NULL */
    const float *ls1, *ls2;                     /* [n_embd] layer scales (InternViT) or NULL */
};

struct ifl_clip {
    struct ifl_gguf *gguf;
    struct ifl_clip_hparams hp;
    struct ifl_mat patch;          /* 3 * P * P -> n_embd, input [channel][y][x] */
    const float *patch_b;          /* [n_embd] or NULL */
    const float *cls;              /* [n_embd] or NULL */
    const float *pos;              /* [n_pos][n_embd] */
    const float *pre_w, *pre_b;    /* [n_embd] or NULL */
    const float *post_w, *post_b;  /* [n_embd] or NULL */
    struct ifl_clip_layer *layers; /* [n_layer] */
    struct ifl_mat mm0, mm2;       /* n_embd (internvl: n_embd merge^2) -> n_mm -> n_out */
    const float *mm0_b, *mm2_b;
    const float *mmln_w, *mmln_b; /* internvl: the projector's LayerNorm [n_embd merge^2] */
    float **owned;                /* the F32 copies */
    int n_owned, cap_owned;
    int bf16; /* IFL_CLIP_PREC_BF16 took effect: the F16 matrices are BF16 now */
};

/* Loads an mmproj file; IFL_EFORMAT / IFL_EUNSUPPORTED with a sentence
 * naming the key or tensor (an unknown projector, tiling grids, a missing
 * or misshapen tensor, a weight type the kernels lack). */
int ifl_clip_load(struct ifl_clip **out, const char *path, char *err);

/* The encoder's compute precision: a choice of the caller's, never made
 * by the loader on its own (it moves the embeddings; docs/api.md).
 *  F32: the file's values, every product and sum in F32 (the default);
 *  BF16: where the kernels multiply BF16 by vdpbf16ps (the avx512bf16
 *    table: kernels.h act_bf16), the F16 matrices are rounded to BF16
 *    (nearest even, 8 significant bits of their 11) as they are repacked,
 *    and their products take the activations rounded to BF16 too, at
 *    twice the F32 FMA rate; F32 and Q8_0 matrices are left alone. On
 *    other tables it changes nothing (no faster kernel to pay for it). */
enum ifl_clip_prec { IFL_CLIP_PREC_F32 = 0, IFL_CLIP_PREC_BF16 = 1 };
/* ifl_clip_load with a precision (IFL_EINVAL for another value). */
int ifl_clip_load_prec(struct ifl_clip **out, const char *path, enum ifl_clip_prec prec, char *err);
/* The same from an open reader, which the result then owns (also on failure). */
int ifl_clip_from_gguf(struct ifl_clip **out, struct ifl_gguf *g, char *err);
void ifl_clip_free(struct ifl_clip *c);

/* Most tiles one image becomes (InternVL's grid plus its thumbnail). */
#define IFL_CLIP_MAX_TILES 64

/* The tiles an image of w x h pixels becomes, each image_size square and
 * n_tok output rows: 1 for "mlp"; for "internvl" 1 when neither side is
 * over image_size, else the grid llama.cpp picks (clip_prep.c) plus the
 * thumbnail. */
int ifl_clip_n_tiles(const struct ifl_clip *c, int32_t w, int32_t h);

/* An image as the encoder wants it: ifl_clip_n_tiles(w, h) tiles of
 * 3 * image_size^2 floats each, (px / 255 - mean) / std per channel,
 * planar: out[tile][c][y][x]. As llama.cpp's mtmd prepares them:
 *  - "mlp" (llava's fixed-size preprocessor): scaled to fit image_size x
 *    image_size keeping its aspect (each side ceil(side * scale),
 *    bicubic), centred on a square filled with hp.pad; an image already of
 *    that size is only normalised;
 *  - "internvl": an image that fits is stretched to the square (bilinear);
 *    a larger one is scaled to fit the grid's resolution keeping its
 *    aspect (bicubic), centred on black, and cut into the grid's tiles in
 *    raster order, followed by the whole image stretched to the square
 *    (bilinear) as a thumbnail.
 * IFL_EINVAL (a bad mean/std), IFL_ENOMEM. */
int ifl_clip_preprocess(const struct ifl_clip *c, const struct ifl_image *im, float *out,
                        char *err);

/* Scratch and threads for encoding up to max_images images in one call.
 * pool: a pool to run on (kept by the caller, one job at a time), or NULL
 * to start n_threads threads of its own (0: one per CPU). */
struct ifl_clip_ctx;
int ifl_clip_ctx_create(struct ifl_clip_ctx **out, const struct ifl_clip *c, int max_images,
                        struct ifl_pool *pool, int n_threads, char *err);
void ifl_clip_ctx_free(struct ifl_clip_ctx *x);

/* Encodes n_img preprocessed tiles (pixels: n_img x 3 x image_size^2
 * floats, as ifl_clip_preprocess writes them) into out: n_img x n_tok
 * rows of n_out floats, tile by tile, in raster order (of the merged
 * patches for "internvl"). Images
 * are batched through every matmul; each output row depends only on its
 * own image (not on n_img or the thread count), bit for bit. IFL_EINVAL
 * for n_img outside 1..max_images. Allocates nothing. */
int ifl_clip_encode(struct ifl_clip_ctx *x, const float *pixels, int n_img, float *out, char *err);

#endif
