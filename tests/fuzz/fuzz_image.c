/* libFuzzer target for image decoding (src/vision/image.c, stb_image's PNG
 * and JPEG readers compiled in with the same instrumentation): the input is
 * a file's bytes. A failure must leave the image empty and say why in a
 * sentence starting "image: "; a success must hand out an image within the
 * documented limits, whose every pixel can be read (ASan watches), and
 * which pads and normalises. The header-only size read (ifl_image_dims,
 * what a tiling encoder counts rows by) must fail with a sentence or give
 * a size within the limits, and the size the decoder found when both
 * succeed. */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "vision/image.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ifl_image im = {0};
    char err[IFL_ERR_LEN] = "";
    int32_t dw = -1, dh = -1;
    int drc = ifl_image_dims(data, size, &dw, &dh, err);
    if (drc ? strncmp(err, "image: ", 7) != 0
            : dw < 1 || dh < 1 || dw > IFL_IMAGE_MAX_SIDE || dh > IFL_IMAGE_MAX_SIDE)
        abort();
    int rc = ifl_image_decode(&im, data, size, err);
    if (!rc && (drc || dw != im.w || dh != im.h))
        abort();
    if (rc) {
        if (im.rgb || im.w || im.h || strncmp(err, "image: ", 7))
            abort();
        return 0;
    }
    if (!im.rgb || im.w < 1 || im.h < 1 || im.w > IFL_IMAGE_MAX_SIDE || im.h > IFL_IMAGE_MAX_SIDE ||
        (int64_t)im.w * im.h > IFL_IMAGE_MAX_PIXELS)
        abort();
    unsigned sum = 0;
    for (size_t i = 0; i < (size_t)im.w * (size_t)im.h * 3; i++)
        sum += im.rgb[i];
    if (im.w <= 256 && im.h <= 256) { /* the encoder's steps, on small ones */
        struct ifl_image sq = {0};
        const uint8_t fill[3] = {127, 127, 127};
        const float mean[3] = {0.5f, 0.5f, 0.5f}, sd[3] = {0.25f, 0.25f, 0.25f};
        if (ifl_image_pad_square(&sq, &im, fill, err))
            abort();
        float *f = malloc(sizeof(float) * 3 * (size_t)sq.w * (size_t)sq.h);
        if (!f || ifl_image_normalize(f, &sq, mean, sd, err))
            abort();
        for (size_t i = 0; i < 3 * (size_t)sq.w * (size_t)sq.h; i++)
            if (!isfinite(f[i]) || fabsf(f[i]) > 2.01f)
                abort();
        free(f);
        ifl_image_free(&sq);
    }
    ifl_image_free(&im);
    return (int)(sum & 0); /* the pixels were read */
}
