/*
 * The public vision calls (include/inflight.h, "Vision encoders"): an
 * mmproj's encoder (clip.h) with its threads and scratch, behind a lock so
 * that any thread may call; images decoded and preprocessed here, then
 * encoded in one batch.
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
    if (!out || !mmproj_path)
        return ifl_err(err, IFL_EINVAL, "vision: no output or no path");
    *out = NULL;
    if (max_images < 1 || max_images > 1024 || n_threads < 0 || n_threads > 1024)
        return ifl_err(err, IFL_EINVAL, "vision: max_images %d / n_threads %d out of range",
                       (int)max_images, (int)n_threads);
    ifl_vision *v = calloc(1, sizeof *v);
    if (!v)
        return ifl_err(err, IFL_ENOMEM, "vision: out of memory");
    pthread_mutex_init(&v->lock, NULL);
    v->max_images = max_images;
    int rc = ifl_clip_load(&v->clip, mmproj_path, err);
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
    out->n_tokens = hp->n_patches;
    out->n_embd = hp->n_out;
    out->n_layer = hp->n_layer;
    out->n_run = hp->n_run;
    out->max_images = v->max_images;
    return 0;
}

/* Preprocesses im into slot i of the pixel buffer. */
static int prepare(ifl_vision *v, int i, const struct ifl_image *im, char *err)
{
    size_t S = (size_t)v->clip->hp.image_size;
    return ifl_clip_preprocess(v->clip, im, v->pixels + (size_t)i * 3 * S * S, err);
}

int ifl_vision_encode(ifl_vision *v, const void *const *images, const int64_t *sizes,
                      int32_t n_images, float *out, char *err)
{
    if (!v || !images || !sizes || !out)
        return ifl_err(err, IFL_EINVAL, "vision: a NULL argument");
    if (n_images < 1 || n_images > v->max_images)
        return ifl_err(err, IFL_EINVAL, "vision: %d images (this encoder takes 1..%d a call)",
                       (int)n_images, (int)v->max_images);
    pthread_mutex_lock(&v->lock);
    int rc = 0;
    for (int32_t i = 0; i < n_images && !rc; i++) {
        struct ifl_image im = {0};
        char why[IFL_ERR_LEN] = "";
        if (sizes[i] < 0 || !images[i])
            rc = ifl_err(why, IFL_EINVAL, "no data");
        else
            rc = ifl_image_decode(&im, images[i], (size_t)sizes[i], why);
        if (!rc)
            rc = prepare(v, i, &im, why);
        ifl_image_free(&im);
        if (rc) /* the image module's sentences start "image: " */
            ifl_err(err, rc, "vision: image %d: %s", (int)i,
                    strncmp(why, "image: ", 7) ? why : why + 7);
    }
    if (!rc)
        rc = ifl_clip_encode(v->ctx, v->pixels, n_images, out, err);
    pthread_mutex_unlock(&v->lock);
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
    pthread_mutex_lock(&v->lock);
    rc = prepare(v, 0, &im, err);
    if (!rc)
        rc = ifl_clip_encode(v->ctx, v->pixels, 1, out, err);
    pthread_mutex_unlock(&v->lock);
    ifl_image_free(&im);
    return rc;
}
