/*
 * Images in (image.h). PNG is read by libpng and JPEG by libjpeg-turbo's
 * TurboJPEG interface, both from Debian and both fuzzed upstream without
 * end. (stb_image 2.27, Debian 12's libstb-dev, was the first choice; our
 * fuzz target found a heap overflow in its progressive JPEG decoder within
 * 90 seconds, so it is not used for what requests send.) The size a file
 * claims is checked against the limits before any pixel is decoded: from
 * the header for PNG (libpng's own limits are set to ours too) and from
 * TurboJPEG's header read for JPEG. Pixels come out as stb_image would
 * give them, which is what llama.cpp's mtmd sees: 16-bit samples keep
 * their high byte, a palette or a grey image becomes RGB, and alpha is
 * dropped, not composited.
 */
#include "vision/image.h"

#include <math.h>
#include <png.h>
#include <setjmp.h>
#include <stdlib.h>
#include <string.h>
#include <turbojpeg.h>

#include "core/err.h"

enum ifl_image_format ifl_image_sniff(const void *data, size_t len)
{
    static const uint8_t png[8] = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
    const uint8_t *p = data;
    if (p && len >= 8 && !memcmp(p, png, 8))
        return IFL_IMAGE_PNG;
    if (p && len >= 3 && p[0] == 0xff && p[1] == 0xd8 && p[2] == 0xff)
        return IFL_IMAGE_JPEG;
    return IFL_IMAGE_UNKNOWN;
}

/* w x h within the limits, or IFL_EINVAL saying which one it breaks */
static int check_size(int64_t w, int64_t h, char *err)
{
    if (w <= 0 || h <= 0)
        return ifl_err(err, IFL_EINVAL, "image: %lld x %lld pixels (a side of 0)", (long long)w,
                       (long long)h);
    if (w > IFL_IMAGE_MAX_SIDE || h > IFL_IMAGE_MAX_SIDE || w * h > IFL_IMAGE_MAX_PIXELS)
        return ifl_err(
            err, IFL_EINVAL, "image: %lld x %lld pixels is over the limit (%d a side, %lld in all)",
            (long long)w, (long long)h, IFL_IMAGE_MAX_SIDE, (long long)IFL_IMAGE_MAX_PIXELS);
    return 0;
}

/* ---- PNG ---- */

struct png_src {
    const uint8_t *p;
    size_t len, at;
    char msg[160]; /* libpng's last error, for the sentence */
};

static void png_read_mem(png_structp png, png_bytep dst, size_t n)
{
    struct png_src *src = png_get_io_ptr(png);
    if (n > src->len - src->at)
        png_error(png, "the data ends early");
    memcpy(dst, src->p + src->at, n);
    src->at += n;
}

static void png_on_error(png_structp png, png_const_charp msg)
{
    struct png_src *src = png_get_error_ptr(png);
    snprintf(src->msg, sizeof src->msg, "%s", msg ? msg : "unreadable");
    png_longjmp(png, 1);
}

static void png_on_warning(png_structp png, png_const_charp msg)
{
    (void)png;
    (void)msg; /* a bad ancillary chunk: skipped, as every viewer does */
}

static int decode_png(struct ifl_image *out, const uint8_t *data, size_t len, char *err)
{
    /* the size IHDR (first after the signature) claims, checked here so
     * that the limits speak plainly: libpng's message is "Invalid IHDR" */
    if (len >= 24 && !memcmp(data + 12, "IHDR", 4)) {
        const uint8_t *q = data + 16;
        int64_t w = (int64_t)q[0] << 24 | q[1] << 16 | q[2] << 8 | q[3];
        int64_t h = (int64_t)q[4] << 24 | q[5] << 16 | q[6] << 8 | q[7];
        int rc = check_size(w, h, err);
        if (rc)
            return rc;
    }
    struct png_src src = {data, len, 0, ""};
    png_structp png =
        png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_on_error, png_on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return ifl_err(err, IFL_ENOMEM, "image: out of memory reading a PNG file");
    }
    uint8_t *volatile rgb = NULL;
    png_bytep *volatile rows = NULL;
    volatile int rc = 0;
    if (setjmp(png_jmpbuf(png))) {
        rc = rc ? rc
                : ifl_err(err, IFL_EINVAL, "image: corrupt or truncated PNG data (%s)", src.msg);
        goto done;
    }
    png_set_read_fn(png, &src, png_read_mem);
    png_set_user_limits(png, IFL_IMAGE_MAX_SIDE, IFL_IMAGE_MAX_SIDE);
    png_set_chunk_malloc_max(png, (png_alloc_size_t)8 << 20); /* text and profiles */
    png_read_info(png, info);
    const png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
    if ((rc = check_size(w, h, err)))
        goto done;
    const int ct = png_get_color_type(png, info);
    png_set_expand(png); /* palette and grey below 8 bits to 8, tRNS to alpha */
    png_set_strip_16(png);
    png_set_strip_alpha(png);
    if (ct == PNG_COLOR_TYPE_GRAY || ct == PNG_COLOR_TYPE_GRAY_ALPHA)
        png_set_gray_to_rgb(png);
    png_set_interlace_handling(png);
    png_read_update_info(png, info);
    if (png_get_rowbytes(png, info) != (size_t)w * 3) {
        rc = ifl_err(err, IFL_EINVAL, "image: a PNG colour layout this reader cannot give as RGB");
        goto done;
    }
    rgb = malloc((size_t)w * h * 3);
    rows = malloc(sizeof(png_bytep) * h);
    if (!rgb || !rows) {
        rc = ifl_err(err, IFL_ENOMEM, "image: out of memory for %u x %u pixels", (unsigned)w,
                     (unsigned)h);
        goto done;
    }
    for (png_uint_32 y = 0; y < h; y++)
        rows[y] = rgb + (size_t)y * w * 3;
    png_read_image(png, rows);
    out->w = (int32_t)w;
    out->h = (int32_t)h;
    out->rgb = rgb;
    rgb = NULL;
done:
    png_destroy_read_struct(&png, &info, NULL);
    free(rows);
    free(rgb);
    return rc;
}

/* ---- JPEG ---- */

static int decode_jpeg(struct ifl_image *out, const uint8_t *data, size_t len, char *err)
{
    tjhandle tj = tjInitDecompress();
    if (!tj)
        return ifl_err(err, IFL_ENOMEM, "image: out of memory reading a JPEG file");
    int w = 0, h = 0, sub = 0, cs = 0, rc = 0;
    uint8_t *rgb = NULL;
    if (len > (size_t)0xffffffffu ||
        tjDecompressHeader3(tj, data, (unsigned long)len, &w, &h, &sub, &cs)) {
        rc = ifl_err(err, IFL_EINVAL, "image: a corrupt JPEG header (%s)", tjGetErrorStr2(tj));
        goto done;
    }
    if ((rc = check_size(w, h, err)))
        goto done;
    if (cs == TJCS_CMYK || cs == TJCS_YCCK) {
        rc = ifl_err(err, IFL_EINVAL, "image: a CMYK JPEG (RGB or grey ones only)");
        goto done;
    }
    rgb = malloc((size_t)w * (size_t)h * 3);
    if (!rgb) {
        rc = ifl_err(err, IFL_ENOMEM, "image: out of memory for %d x %d pixels", w, h);
        goto done;
    }
    /* a warning (data that ends early, say) is an error: never a part
     * image; and no more progressive scans than a real file needs */
    if (tjDecompress2(tj, data, (unsigned long)len, rgb, w, w * 3, h, TJPF_RGB,
                      TJFLAG_STOPONWARNING | TJFLAG_LIMITSCANS)) {
        rc = ifl_err(err, IFL_EINVAL, "image: corrupt or truncated JPEG data (%s)",
                     tjGetErrorStr2(tj));
        goto done;
    }
    out->w = w;
    out->h = h;
    out->rgb = rgb;
    rgb = NULL;
done:
    free(rgb);
    tjDestroy(tj);
    return rc;
}

int ifl_image_decode(struct ifl_image *out, const void *data, size_t len, char *err)
{
    if (!out || !data || !len)
        return ifl_err(err, IFL_EINVAL, "image: no data");
    if (len > IFL_IMAGE_MAX_BYTES)
        return ifl_err(err, IFL_EINVAL, "image: %zu bytes is over the limit (%zu)", len,
                       IFL_IMAGE_MAX_BYTES);
    switch (ifl_image_sniff(data, len)) {
    case IFL_IMAGE_PNG:
        return decode_png(out, data, len, err);
    case IFL_IMAGE_JPEG:
        return decode_jpeg(out, data, len, err);
    default:
        return ifl_err(err, IFL_EINVAL, "image: not a PNG or JPEG file (its first bytes say)");
    }
}

/* The size libpng's header read finds (no pixels decoded). */
static int png_dims(const uint8_t *data, size_t len, int32_t *w, int32_t *h, char *err)
{
    struct png_src src = {data, len, 0, ""};
    png_structp png =
        png_create_read_struct(PNG_LIBPNG_VER_STRING, &src, png_on_error, png_on_warning);
    png_infop info = png ? png_create_info_struct(png) : NULL;
    if (!info) {
        png_destroy_read_struct(&png, NULL, NULL);
        return ifl_err(err, IFL_ENOMEM, "image: out of memory reading a PNG file");
    }
    volatile int rc = 0;
    if (setjmp(png_jmpbuf(png))) {
        rc = ifl_err(err, IFL_EINVAL, "image: corrupt or truncated PNG data (%s)", src.msg);
        goto done;
    }
    png_set_read_fn(png, &src, png_read_mem);
    png_set_user_limits(png, IFL_IMAGE_MAX_SIDE, IFL_IMAGE_MAX_SIDE);
    png_set_chunk_malloc_max(png, (png_alloc_size_t)8 << 20);
    png_read_info(png, info);
    const png_uint_32 pw = png_get_image_width(png, info), ph = png_get_image_height(png, info);
    if (!(rc = check_size(pw, ph, err))) {
        *w = (int32_t)pw;
        *h = (int32_t)ph;
    }
done:
    png_destroy_read_struct(&png, &info, NULL);
    return rc;
}

int ifl_image_dims(const void *data, size_t len, int32_t *w, int32_t *h, char *err)
{
    const uint8_t *p = data;
    int64_t W = 0, H = 0;
    if (!data || !len)
        return ifl_err(err, IFL_EINVAL, "image: no data");
    if (len > IFL_IMAGE_MAX_BYTES)
        return ifl_err(err, IFL_EINVAL, "image: %zu bytes is over the limit (%zu)", len,
                       IFL_IMAGE_MAX_BYTES);
    switch (ifl_image_sniff(data, len)) {
    case IFL_IMAGE_PNG:
        if (len >= 24 && !memcmp(p + 12, "IHDR", 4)) {
            W = (int64_t)p[16] << 24 | p[17] << 16 | p[18] << 8 | p[19];
            H = (int64_t)p[20] << 24 | p[21] << 16 | p[22] << 8 | p[23];
            break;
        }
        /* IHDR not first (ancillary chunks may come before it): libpng
         * reads the header as the decoder will */
        return png_dims(data, len, w, h, err);
    case IFL_IMAGE_JPEG: {
        tjhandle tj = tjInitDecompress();
        int jw = 0, jh = 0, sub = 0, cs = 0;
        if (!tj)
            return ifl_err(err, IFL_ENOMEM, "image: out of memory reading a JPEG file");
        int bad = len > (size_t)0xffffffffu ||
                  tjDecompressHeader3(tj, data, (unsigned long)len, &jw, &jh, &sub, &cs);
        if (bad)
            ifl_err(err, IFL_EINVAL, "image: a corrupt JPEG header (%s)", tjGetErrorStr2(tj));
        tjDestroy(tj);
        if (bad)
            return IFL_EINVAL;
        W = jw;
        H = jh;
        break;
    }
    default:
        return ifl_err(err, IFL_EINVAL, "image: not a PNG or JPEG file (its first bytes say)");
    }
    int rc = check_size(W, H, err);
    if (rc)
        return rc;
    *w = (int32_t)W;
    *h = (int32_t)H;
    return 0;
}

int ifl_image_from_pixels(struct ifl_image *out, const uint8_t *px, int32_t w, int32_t h,
                          int channels, char *err)
{
    if (!out || !px)
        return ifl_err(err, IFL_EINVAL, "image: no pixels");
    if (channels != 1 && channels != 3 && channels != 4)
        return ifl_err(err, IFL_EINVAL, "image: %d channels (1 grey, 3 RGB or 4 RGBA, a byte each)",
                       channels);
    int rc = check_size(w, h, err);
    if (rc)
        return rc;
    size_t n = (size_t)w * (size_t)h;
    uint8_t *rgb = malloc(n * 3);
    if (!rgb)
        return ifl_err(err, IFL_ENOMEM, "image: out of memory for %d x %d pixels", w, h);
    for (size_t i = 0; i < n; i++)
        for (int c = 0; c < 3; c++)
            rgb[i * 3 + (size_t)c] = px[i * (size_t)channels + (channels == 1 ? 0 : (size_t)c)];
    out->w = w;
    out->h = h;
    out->rgb = rgb;
    return 0;
}

void ifl_image_free(struct ifl_image *im)
{
    if (!im)
        return;
    free(im->rgb);
    im->rgb = NULL;
    im->w = im->h = 0;
}

int ifl_image_pad_square(struct ifl_image *out, const struct ifl_image *in, const uint8_t fill[3],
                         char *err)
{
    const int32_t s = in->w > in->h ? in->w : in->h;
    uint8_t *rgb = malloc((size_t)s * (size_t)s * 3);
    if (!rgb)
        return ifl_err(err, IFL_ENOMEM, "image: out of memory padding to %d x %d", s, s);
    for (size_t i = 0; i < (size_t)s * (size_t)s; i++)
        memcpy(rgb + i * 3, fill, 3);
    /* the odd pixel of a split goes after the image, as PIL's paste at
     * ((s - w) / 2, (s - h) / 2) puts it */
    const int32_t x0 = (s - in->w) / 2, y0 = (s - in->h) / 2;
    for (int32_t y = 0; y < in->h; y++)
        memcpy(rgb + ((size_t)(y0 + y) * (size_t)s + (size_t)x0) * 3,
               in->rgb + (size_t)y * (size_t)in->w * 3, (size_t)in->w * 3);
    out->w = out->h = s;
    out->rgb = rgb;
    return 0;
}

int ifl_image_normalize(float *out, const struct ifl_image *im, const float mean[3],
                        const float std[3], char *err)
{
    for (int c = 0; c < 3; c++)
        if (!isfinite(mean[c]) || !isfinite(std[c]) || std[c] == 0.0f)
            return ifl_err(err, IFL_EINVAL, "image: channel %d's mean %g and std %g", c,
                           (double)mean[c], (double)std[c]);
    const size_t n = (size_t)im->w * (size_t)im->h;
    for (int c = 0; c < 3; c++)
        for (size_t i = 0; i < n; i++)
            out[(size_t)c * n + i] =
                ((float)im->rgb[i * 3 + (size_t)c] / 255.0f - mean[c]) / std[c];
    return 0;
}
