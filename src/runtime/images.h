/*
 * Images in requests (include/inflight.h struct ifl_image_input): their
 * intake at enqueue, the engine's encoder passes, the cache of encoder
 * outputs, and the rows each step hands the forward pass.
 *
 *   enqueue (client thread)  checks every image's place, decodes PNG/JPEG
 *                            data and preprocesses it for the encoder (a
 *                            bad image fails the enqueue, naming it),
 *                            hashes the pixels (or the rows given), and
 *                            gives every prompt position an ext key
 *                            (kvcache.h): 0 for a token, a hash of the
 *                            image and the row's index for an image row;
 *   engine, each step        before the batch is built: for the running
 *                            requests in scheduling order, the images
 *                            their prefill will reach are looked up in the
 *                            output cache by hash, and up to
 *                            vision_images_per_step misses are encoded in
 *                            one batched pass on the forward's threads;
 *                            the batch builder stops a prefill chunk at
 *                            the first row whose image is not ready, so
 *                            prefill of the text before it, and every
 *                            other request's rows, go on meanwhile;
 *   the forward pass         an image row takes its encoder row (or the
 *                            given row) instead of its token's embedding.
 *
 * The cache: each encoded image's rows, keyed by its 128-bit pixel hash,
 * referenced by the requests using it (never dropped while referenced);
 * unreferenced ones are kept, least recently used dropped first, while
 * they fit image_cache_bytes. The hash is seeded per executor from the
 * system's random source, so no client can aim a collision at another's
 * image.
 *
 * Single-owner: the engine's parts run on the engine thread only; intake
 * runs on the enqueuing thread before the request is queued, reading only
 * what creation fixed (the encoder's weights and parameters).
 */
#ifndef IFL_RUNTIME_IMAGES_H
#define IFL_RUNTIME_IMAGES_H

#include <stdint.h>

#include "inflight.h"

struct ifl_executor;
struct xreq;
struct ifl_clip;
struct ifl_img_entry;

/* One unit of a request's images as the executor keeps it: an image, or
 * one tile of an image that the encoder tiles (InternVL: the grid's tiles
 * then the thumbnail, each n_tok rows, in order). */
struct ximg {
    int32_t pos, n;            /* it stands for prompt positions [pos, pos + n) */
    uint64_t h[2];             /* its identity: the pixels' (or given rows') hash, and
                                  the tile's index for a tiled image */
    float *px;                 /* encoder input [3][S][S], until encoded; NULL for rows */
    float *own;                /* given rows [n][n_embd] (owned), or NULL */
    struct ifl_img_entry *ent; /* its cache entry once encoded (engine-owned) */
    const float *rows;         /* [n][n_embd] its rows once known, else NULL */
};

/* Creation: loads the mmproj (NULL: none) and checks it against the model;
 * seeds the hash. IFL_EINVAL for a projection width other than the model's
 * n_embd, the loader's codes otherwise. */
int ifl_img_exec_init(struct ifl_executor *ex, const char *mmproj_path, char *err);
void ifl_img_exec_fini(struct ifl_executor *ex);

/* Enqueue: validates req's images and takes them into q (q->img,
 * q->img_ext). IFL_EINVAL (or IFL_EUNSUPPORTED, IFL_ENOMEM) with a sentence
 * naming the image. Nothing is kept on error. */
int ifl_img_intake(struct ifl_executor *ex, const struct ifl_request *req, struct xreq *q,
                   char *err);
/* Frees what intake took (not the cache entries: the engine's). */
void ifl_img_free_request(struct xreq *q);

/* Engine: creation (after the forward pass, whose pool it shares) and end. */
int ifl_img_engine_init(struct ifl_executor *ex, char *err);
void ifl_img_engine_fini(struct ifl_executor *ex);
/* Before the batch is built: encodes what the running requests' prefill
 * reaches next (bounded per step), from the cache when it can. Returns 1
 * when some request's image could not be encoded (out of memory): its
 * status is set, and the caller ends it. */
int ifl_img_step(struct ifl_executor *ex);
/* The first position in [from, to) of q's prompt whose image rows are not
 * ready yet; to when there is none. */
int32_t ifl_img_ready_until(const struct xreq *q, int32_t from, int32_t to);
/* Fills embd[r] for the first `rows` rows of the step's batch: the row of
 * each image position, NULL for the others. Returns 1 if some row has one. */
int ifl_img_batch_rows(struct ifl_executor *ex, int32_t rows, const float **embd);
/* A request is done: its cache entries lose a reference. */
void ifl_img_release(struct ifl_executor *ex, struct xreq *q);
/* Figures since creation, for the iteration stats. */
void ifl_img_stats(const struct ifl_executor *ex, int64_t *encoded, int64_t *hits, double *seconds);

#endif
