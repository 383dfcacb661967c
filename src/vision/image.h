/*
 * Images in: PNG and JPEG files decoded to 8-bit RGB, and the steps a
 * vision encoder's preprocessing is made of (padding to a square, resizing,
 * normalising into planar floats). Decoding is libpng's and
 * libjpeg-turbo's (Debian's); what it is given is untrusted (a request's
 * bytes), so the header is read and checked against the limits below
 * before any pixel is decoded, and every failure is a sentence in err.
 *
 * Ownership: an ifl_image owns its pixels (ifl_image_free). Every call is
 * thread-safe and allocates only its result.
 */
#ifndef IFL_VISION_IMAGE_H
#define IFL_VISION_IMAGE_H

#include <stddef.h>
#include <stdint.h>

/* The largest file, side and pixel count accepted: a 64 MiB file, 8192
 * pixels a side, 32 Mi pixels in all (96 MiB of RGB). A vision encoder
 * shrinks every image to a few hundred pixels a side anyway. */
#define IFL_IMAGE_MAX_BYTES ((size_t)64 << 20)
#define IFL_IMAGE_MAX_SIDE 8192
#define IFL_IMAGE_MAX_PIXELS ((int64_t)32 << 20)

struct ifl_image {
    int32_t w, h;
    uint8_t *rgb; /* [h][w][3], rows top to bottom */
};

enum ifl_image_format { IFL_IMAGE_UNKNOWN = 0, IFL_IMAGE_PNG, IFL_IMAGE_JPEG };

/* The format its first bytes name (PNG's signature, JPEG's SOI marker),
 * or IFL_IMAGE_UNKNOWN. */
enum ifl_image_format ifl_image_sniff(const void *data, size_t len);

/* Decodes a PNG or JPEG file to RGB (grey, grey + alpha and RGBA are
 * converted: alpha is dropped; 16-bit PNG is rounded to 8 bits).
 * IFL_EINVAL, naming the cause: not PNG or JPEG, corrupt or truncated
 * data, a side of 0, or a size over the limits above (checked from the
 * header, before decoding). IFL_ENOMEM. *out is untouched on error. */
int ifl_image_decode(struct ifl_image *out, const void *data, size_t len, char *err);

/* The size a PNG or JPEG file's header claims, without decoding it (a
 * tiling encoder's row count depends on it). IFL_EINVAL as
 * ifl_image_decode for what the header shows; a file whose header is fine
 * may still fail to decode. */
int ifl_image_dims(const void *data, size_t len, int32_t *w, int32_t *h, char *err);

/* An image from raw pixels: w x h of `channels` bytes each (3 RGB, 4
 * RGBA whose alpha is dropped, 1 grey), rows packed. IFL_EINVAL for
 * another channel count, a side of 0 or over the limits, IFL_ENOMEM. */
int ifl_image_from_pixels(struct ifl_image *out, const uint8_t *px, int32_t w, int32_t h,
                          int channels, char *err);

void ifl_image_free(struct ifl_image *im);

/* The image centred on a square of side max(w, h) filled with fill (an
 * RGB colour), as LLaVA-1.5 pads before resizing. IFL_ENOMEM. */
int ifl_image_pad_square(struct ifl_image *out, const struct ifl_image *in, const uint8_t fill[3],
                         char *err);

/* Planar floats for an encoder: out[c][y][x] = (px / 255 - mean[c]) /
 * std[c], for an image already at the encoder's size. out holds
 * 3 * w * h floats. IFL_EINVAL for a std of 0 or a non-finite value. */
int ifl_image_normalize(float *out, const struct ifl_image *im, const float mean[3],
                        const float std[3], char *err);

#endif
