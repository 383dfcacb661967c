/*
 * clipbench: images per second through a vision encoder (an mmproj file,
 * src/vision/clip.h), preprocessing left out: images already at the
 * encoder's size, encoded `batch` at a time, after one warm-up call.
 *
 *   clipbench MMPROJ.gguf [--images N] [--batch B] [--threads T] [--precision f32|bf16]
 *
 * --precision: the encoder's compute precision (clip.h's enum
 * ifl_clip_prec; bf16 takes effect only on the avx512bf16 kernel table).
 *
 * Prints one line: the file's shape, threads, batch, images, seconds,
 * ms per image, images per second, and the CPU time per image (all
 * threads: on a machine shared with other work, the steadier figure).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/err.h"
#include "core/rng.h"
#include "vision/clip.h"

static double clock_s(clockid_t id)
{
    struct timespec t;
    clock_gettime(id, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

int main(int argc, char **argv)
{
    const char *path = NULL;
    int n_images = 4, batch = 1, threads = 0;
    enum ifl_clip_prec prec = IFL_CLIP_PREC_F32;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && !strcmp(argv[i], "--images"))
            n_images = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--batch"))
            batch = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--threads"))
            threads = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "--precision"))
            prec = !strcmp(argv[++i], "bf16") ? IFL_CLIP_PREC_BF16 : IFL_CLIP_PREC_F32;
        else if (argv[i][0] != '-' && !path)
            path = argv[i];
        else {
            fprintf(stderr, "usage: clipbench MMPROJ.gguf [--images N] [--batch B] [--threads T] "
                            "[--precision f32|bf16]\n");
            return 2;
        }
    }
    if (!path || n_images < 1 || batch < 1 || threads < 0) {
        fprintf(stderr, "usage: clipbench MMPROJ.gguf [--images N] [--batch B] [--threads T] "
                        "[--precision f32|bf16]\n");
        return 2;
    }
    char err[IFL_ERR_LEN] = "";
    struct ifl_clip *c = NULL;
    struct ifl_clip_ctx *x = NULL;
    if (ifl_clip_load_prec(&c, path, prec, err) ||
        ifl_clip_ctx_create(&x, c, batch, NULL, threads, err)) {
        fprintf(stderr, "clipbench: %s\n", err);
        ifl_clip_free(c);
        return 1;
    }
    const struct ifl_clip_hparams *hp = &c->hp;
    size_t img = (size_t)3 * hp->image_size * hp->image_size;
    float *px = malloc(img * (size_t)batch * sizeof(float));
    float *out = malloc((size_t)batch * hp->n_tok * hp->n_out * sizeof(float));
    struct ifl_rng r;
    ifl_rng_seed(&r, 1);
    for (size_t i = 0; i < img * (size_t)batch; i++)
        px[i] = (float)(ifl_rng_next(&r) >> 40) / 16777216.0f * 4.0f - 2.0f;
    if (ifl_clip_encode(x, px, batch, out, err)) { /* warm-up: pages and caches */
        fprintf(stderr, "clipbench: %s\n", err);
        return 1;
    }
    int done = 0;
    double t0 = clock_s(CLOCK_MONOTONIC), u0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
    while (done < n_images) {
        int b = n_images - done < batch ? n_images - done : batch;
        ifl_clip_encode(x, px, b, out, err);
        done += b;
    }
    double s = clock_s(CLOCK_MONOTONIC) - t0, u = clock_s(CLOCK_PROCESS_CPUTIME_ID) - u0;
    printf("clipbench: %s: image %d patch %d n_embd %d layers %d/%d, threads %d, batch %d: "
           "%d images in %.2f s, %.1f ms/image, %.3f images/s (CPU time %.1f ms/image)%s\n",
           path, hp->image_size, hp->patch_size, hp->n_embd, hp->n_run, hp->n_layer, threads, batch,
           done, s, 1e3 * s / done, done / s, 1e3 * u / done, c->bf16 ? ", bf16 products" : "");
    free(px);
    free(out);
    ifl_clip_ctx_free(x);
    ifl_clip_free(c);
    return 0;
}
