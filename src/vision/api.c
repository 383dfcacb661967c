/*
 * The public vision calls (include/inflight.h, "Vision encoders"): an
 * mmproj's encoder (clip.h) with its threads and scratch, behind a lock so
 * that any thread may call; images decoded and preprocessed here, then
 * encoded in batches of max_images tiles (an image is one tile but for
 * InternVL's tiling).
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "inflight.h"
#include "vision/clip.h"
#include "vision/image.h"

struct ifl_vision {
    struct ifl_clip *clip;
    struct ifl_clip_ctx *ctx;
    float *pixels; /* [max_images][3][image_size^2] */
    int32_t max_images;
    pthread_mutex_t lock; /* one call at a time: ctx and pixels are shared */
};

void ifl_vision_free(ifl_vision *v)
{
    if (!v)
        return;
    ifl_clip_ctx_free(v->ctx);
    ifl_clip_free(v->clip);
    free(v->pixels);
    pthread_mutex_destroy(&v->lock);
    free(v);
}

int ifl_vision_load(ifl_vision **out, const char *mmproj_path, int32_t max_images,
                    int32_t n_threads, char *err)
{
    return ifl_vision_load_prec(out, mmproj_path, max_images, n_threads, IFL_VISION_PREC_F32, err);
}

int ifl_vision_load_prec(ifl_vision **out, const char *mmproj_path, int32_t max_images,
                         int32_t n_threads, int32_t precision, char *err)
{
    if (!out || !mmproj_path)
        return ifl_err(err, IFL_EINVAL, "vision: no output or no path");
    *out = NULL;
    if (max_images < 1 || max_images > 1024 || n_threads < 0 || n_threads > 1024)
        return ifl_err(err, IFL_EINVAL, "vision: max_images %d / n_threads %d out of range",
                       (int)max_images, (int)n_threads);
    if (precision != IFL_VISION_PREC_F32 && precision != IFL_VISION_PREC_BF16)
        return ifl_err(err, IFL_EINVAL, "vision: precision %d (0: f32, 1: bf16)", (int)precision);
    ifl_vision *v = calloc(1, sizeof *v);
    if (!v)
        return ifl_err(err, IFL_ENOMEM, "vision: out of memory");
    pthread_mutex_init(&v->lock, NULL);
    v->max_images = max_images;
    int rc = ifl_clip_load_prec(
        &v->clip, mmproj_path,
        precision == IFL_VISION_PREC_BF16 ? IFL_CLIP_PREC_BF16 : IFL_CLIP_PREC_F32, err);
    if (!rc)
        rc = ifl_clip_ctx_create(&v->ctx, v->clip, max_images, NULL, n_threads, err);
    if (!rc) {
        size_t n = (size_t)max_images * 3 * (size_t)v->clip->hp.image_size *
                   (size_t)v->clip->hp.image_size;
        v->pixels = malloc(n * sizeof(float));
        if (!v->pixels)
            rc = ifl_err(err, IFL_ENOMEM, "vision: out of memory for %d images", (int)max_images);
    }
    if (rc) {
        ifl_vision_free(v);
        return rc;
    }
    *out = v;
    return 0;
}

int ifl_vision_info(const ifl_vision *v, struct ifl_vision_info *out)
{
    if (!v || !out)
        return IFL_EINVAL;
    const struct ifl_clip_hparams *hp = &v->clip->hp;
    memset(out, 0, sizeof *out);
    out->image_size = hp->image_size;
    out->patch_size = hp->patch_size;
    out->n_tokens = hp->n_tok;
    out->n_embd = hp->n_out;
    out->n_layer = hp->n_layer;
    out->n_run = hp->n_run;
    out->max_images = v->max_images;
    return 0;
}

int ifl_vision_image_rows(const ifl_vision *v, int32_t w, int32_t h, int32_t *rows)
{
    if (!v || !rows || w < 1 || h < 1)
        return IFL_EINVAL;
    *rows = ifl_clip_n_tiles(v->clip, w, h) * v->clip->hp.n_tok;
    return 0;
}

/* Encodes n tiles (3 x S x S floats each, contiguous) into out, at most
 * max_images at a time through the pixel buffer. */
static int encode_tiles(ifl_vision *v, const float *tiles, int32_t n, float *out, char *err)
{
    const size_t T = (size_t)3 * v->clip->hp.image_size * v->clip->hp.image_size;
    const size_t R = (size_t)v->clip->hp.n_tok * (size_t)v->clip->hp.n_out;
    int rc = 0;
    for (int32_t t = 0; t < n && !rc; t += v->max_images) {
        int32_t k = n - t < v->max_images ? n - t : v->max_images;
        memcpy(v->pixels, tiles + (size_t)t * T, sizeof(float) * T * (size_t)k);
        rc = ifl_clip_encode(v->ctx, v->pixels, k, out + (size_t)t * R, err);
    }
    return rc;
}

/* The tiles of im, preprocessed into a new buffer (*n of them). */
static int prepare(ifl_vision *v, const struct ifl_image *im, float **tiles, int32_t *n, char *err)
{
    const size_t T = (size_t)3 * v->clip->hp.image_size * v->clip->hp.image_size;
    *n = ifl_clip_n_tiles(v->clip, im->w, im->h);
    *tiles = malloc(sizeof(float) * T * (size_t)*n);
    if (!*tiles)
        return ifl_err(err, IFL_ENOMEM, "out of memory for %d tiles", (int)*n);
    int rc = ifl_clip_preprocess(v->clip, im, *tiles, err);
    if (rc) {
        free(*tiles);
        *tiles = NULL;
    }
    return rc;
}

int ifl_vision_encode(ifl_vision *v, const void *const *images, const int64_t *sizes,
                      int32_t n_images, float *out, char *err)
{
    if (!v || !images || !sizes || !out)
        return ifl_err(err, IFL_EINVAL, "vision: a NULL argument");
    if (n_images < 1 || n_images > v->max_images)
        return ifl_err(err, IFL_EINVAL, "vision: %d images (this encoder takes 1..%d a call)",
                       (int)n_images, (int)v->max_images);
    float *tiles[1024] = {0};
    int32_t nt[1024] = {0}, total = 0;
    int rc = 0;
    /* every image decoded first, so that a bad one leaves out untouched */
    for (int32_t i = 0; i < n_images && !rc; i++) {
        struct ifl_image im = {0};
        char why[IFL_ERR_LEN] = "";
        if (sizes[i] < 0 || !images[i])
            rc = ifl_err(why, IFL_EINVAL, "no data");
        else
            rc = ifl_image_decode(&im, images[i], (size_t)sizes[i], why);
        if (!rc)
            rc = prepare(v, &im, &tiles[i], &nt[i], why);
        ifl_image_free(&im);
        total += nt[i];
        if (rc) /* the image module's sentences start "image: " */
            ifl_err(err, rc, "vision: image %d: %s", (int)i,
                    strncmp(why, "image: ", 7) ? why : why + 7);
    }
    pthread_mutex_lock(&v->lock);
    const size_t T = (size_t)3 * v->clip->hp.image_size * v->clip->hp.image_size;
    const size_t R = (size_t)v->clip->hp.n_tok * (size_t)v->clip->hp.n_out;
    if (!rc && total == n_images) { /* one tile each: the images batched together */
        for (int32_t i = 0; i < n_images; i++)
            memcpy(v->pixels + (size_t)i * T, tiles[i], sizeof(float) * T);
        rc = ifl_clip_encode(v->ctx, v->pixels, n_images, out, err);
    } else if (!rc) {
        size_t at = 0;
        for (int32_t i = 0; i < n_images && !rc; i++) {
            rc = encode_tiles(v, tiles[i], nt[i], out + at, err);
            at += (size_t)nt[i] * R;
        }
    }
    pthread_mutex_unlock(&v->lock);
    for (int32_t i = 0; i < n_images; i++)
        free(tiles[i]);
    return rc;
}

int ifl_vision_encode_pixels(ifl_vision *v, const uint8_t *pixels, int32_t w, int32_t h,
                             int32_t channels, float *out, char *err)
{
    if (!v || !pixels || !out)
        return ifl_err(err, IFL_EINVAL, "vision: a NULL argument");
    struct ifl_image im = {0};
    int rc = ifl_image_from_pixels(&im, pixels, w, h, channels, err);
    if (rc)
        return rc;
    float *tiles = NULL;
    int32_t n = 0;
    rc = prepare(v, &im, &tiles, &n, err);
    ifl_image_free(&im);
    if (rc)
        return rc;
    pthread_mutex_lock(&v->lock);
    rc = encode_tiles(v, tiles, n, out, err);
    pthread_mutex_unlock(&v->lock);
    free(tiles);
    return rc;
}
