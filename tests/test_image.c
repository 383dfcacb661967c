/* Images in (src/vision/image.h): PNG and JPEG files of every colour type
 * decoded to the pixels they were made from, the limits checked from the
 * header before decoding, corrupt, truncated and foreign data refused with
 * a sentence, raw pixels of 1, 3 and 4 channels, padding to a square and
 * normalising. The files are written here by libpng and TurboJPEG. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "t.h"
#include "vision/image.h"

#include <png.h>
#include <turbojpeg.h>

struct blob {
    unsigned char *p;
    size_t n, cap;
};

/* w x h pixels of comp channels, a pattern every pixel of which differs */
static unsigned char *pattern(int w, int h, int comp)
{
    unsigned char *px = malloc((size_t)w * (size_t)h * (size_t)comp);
    for (int i = 0; i < w * h; i++)
        for (int c = 0; c < comp; c++)
            px[i * comp + c] = (unsigned char)(i * 7 + c * 91 + (i / w) * 13);
    return px;
}

static struct blob png_of(const unsigned char *px, int w, int h, int comp)
{
    static const png_uint_32 fmt[5] = {0, PNG_FORMAT_GRAY, PNG_FORMAT_GA, PNG_FORMAT_RGB,
                                       PNG_FORMAT_RGBA};
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    im.width = (png_uint_32)w;
    im.height = (png_uint_32)h;
    im.format = fmt[comp];
    struct blob b = {0};
    png_alloc_size_t n = 0;
    CHECK(png_image_write_to_memory(&im, NULL, &n, 0, px, 0, NULL) && n > 0);
    b.p = malloc(n);
    b.n = n;
    CHECK(png_image_write_to_memory(&im, b.p, &n, 0, px, 0, NULL));
    return b;
}

/* the RGB pixel i of comp-channel pixels, as the decoder gives it */
static void rgb_of(const unsigned char *px, int comp, int i, unsigned char o[3])
{
    for (int c = 0; c < 3; c++)
        o[c] = px[i * comp + (comp < 3 ? 0 : c)];
}

static void test_png_colour_types(void)
{
    const int w = 37, h = 23;
    for (int comp = 1; comp <= 4; comp++) {
        unsigned char *px = pattern(w, h, comp);
        struct blob b = png_of(px, w, h, comp);
        struct ifl_image im = {0};
        char err[IFL_ERR_LEN] = "";
        CHECK_EQ(ifl_image_sniff(b.p, b.n), IFL_IMAGE_PNG);
        CHECK_MSG(ifl_image_decode(&im, b.p, b.n, err) == 0, "%d channels: %s", comp, err);
        CHECK(im.w == w && im.h == h && im.rgb);
        int same = 1;
        for (int i = 0; im.rgb && i < w * h; i++) {
            unsigned char want[3];
            rgb_of(px, comp, i, want);
            same &= !memcmp(im.rgb + i * 3, want, 3);
        }
        CHECK_MSG(same, "%d channels: the pixels differ from what was written", comp);
        ifl_image_free(&im);
        free(b.p);
        free(px);
    }
}

static void test_jpeg(void)
{
    const int w = 64, h = 48;
    unsigned char *px = malloc((size_t)w * h * 3);
    for (int i = 0; i < w * h; i++) { /* smooth: a JPEG keeps it closely */
        px[i * 3] = (unsigned char)(i % w * 4);
        px[i * 3 + 1] = (unsigned char)(i / w * 5);
        px[i * 3 + 2] = 128;
    }
    struct blob b = {0};
    tjhandle tj = tjInitCompress();
    unsigned char *jp = NULL;
    unsigned long jn = 0;
    CHECK(tj && tjCompress2(tj, px, w, w * 3, h, TJPF_RGB, &jp, &jn, TJSAMP_444, 100, 0) == 0);
    b.p = malloc(jn);
    b.n = jn;
    memcpy(b.p, jp, jn);
    tjFree(jp);
    tjDestroy(tj);
    struct ifl_image im = {0};
    char err[IFL_ERR_LEN] = "";
    CHECK_EQ(ifl_image_sniff(b.p, b.n), IFL_IMAGE_JPEG);
    CHECK_MSG(ifl_image_decode(&im, b.p, b.n, err) == 0, "%s", err);
    int worst = 0;
    for (int i = 0; im.rgb && i < w * h * 3; i++) {
        int d = abs((int)im.rgb[i] - (int)px[i]);
        worst = d > worst ? d : worst;
    }
    CHECK(im.w == w && im.h == h);
    CHECK_MSG(worst <= 8, "JPEG at quality 100 is off by %d", worst);
    ifl_image_free(&im);
    /* a frame header that claims 9000 pixels a side: refused from it */
    unsigned char *sof = NULL;
    for (size_t i = 2; i + 9 < b.n && !sof; i++)
        if (b.p[i] == 0xff && b.p[i + 1] == 0xc0)
            sof = b.p + i;
    CHECK(sof != NULL);
    if (sof) {
        unsigned char keep[2] = {sof[7], sof[8]};
        sof[7] = 9000 >> 8;
        sof[8] = 9000 & 0xff;
        CHECK_EQ(ifl_image_decode(&im, b.p, b.n, err), IFL_EINVAL);
        CHECK_MSG(strstr(err, "9000 x 48 pixels is over the limit") != NULL, "%s", err);
        sof[7] = keep[0];
        sof[8] = keep[1];
    }
    /* cut short: an error, not a part-image */
    CHECK_EQ(ifl_image_decode(&im, b.p, b.n / 2, err), IFL_EINVAL);
    CHECK(strstr(err, "JPEG") != NULL);
    CHECK(im.rgb == NULL);
    free(b.p);
    free(px);
}

static uint32_t crc32_of(const unsigned char *p, size_t n)
{
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++)
            c = c >> 1 ^ (0xedb88320u & (0u - (c & 1)));
    }
    return ~c;
}

static void put_be32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (24 - 8 * i));
}

/* a PNG's IHDR width and height (big-endian, after the 8-byte signature
 * and the chunk's length and type), and the chunk's CRC to match */
static void set_png_size(struct blob *b, uint32_t w, uint32_t h)
{
    put_be32(b->p + 16, w);
    put_be32(b->p + 20, h);
    put_be32(b->p + 29, crc32_of(b->p + 12, 17));
}

static void test_bad_files(void)
{
    unsigned char *px = pattern(16, 16, 3);
    struct blob b = png_of(px, 16, 16, 3);
    struct ifl_image im = {0};
    char err[IFL_ERR_LEN] = "";
    /* foreign and empty */
    CHECK_EQ(ifl_image_decode(&im, "GIF89a......", 12, err), IFL_EINVAL);
    CHECK(strstr(err, "not a PNG or JPEG") != NULL);
    CHECK_EQ(ifl_image_decode(&im, b.p, 0, err), IFL_EINVAL);
    CHECK_EQ(ifl_image_decode(&im, NULL, 10, err), IFL_EINVAL);
    /* truncated at every length up to the header's end and in the data
     * (a file that lacks only its end chunk and the data's checksum has
     * every pixel, and decodes, as in every viewer) */
    int all = 1;
    for (size_t n = 1; n < b.n - 16; n += n < 64 ? 1 : 17) {
        int rc = ifl_image_decode(&im, b.p, n, err);
        all &= rc == IFL_EINVAL && err[0] && im.rgb == NULL;
    }
    CHECK_MSG(all, "a truncated PNG decoded, or failed without a sentence");
    /* corrupt compressed data */
    struct blob c = {malloc(b.n), b.n, b.n};
    memcpy(c.p, b.p, b.n);
    for (size_t i = 41; i < c.n - 12; i++)
        c.p[i] ^= 0x5a;
    CHECK_EQ(ifl_image_decode(&im, c.p, c.n, err), IFL_EINVAL);
    CHECK(strstr(err, "corrupt") != NULL);
    /* sizes the header claims: 0 wide, over a side, over the pixel count */
    memcpy(c.p, b.p, b.n);
    set_png_size(&c, 0, 16);
    CHECK_EQ(ifl_image_decode(&im, c.p, c.n, err), IFL_EINVAL);
    CHECK_MSG(strstr(err, "0 x 16 pixels (a side of 0)") != NULL, "%s", err);
    set_png_size(&c, IFL_IMAGE_MAX_SIDE + 1, 16);
    CHECK_EQ(ifl_image_decode(&im, c.p, c.n, err), IFL_EINVAL);
    CHECK_MSG(strstr(err, "8193 x 16 pixels is over the limit") != NULL, "%s", err);
    set_png_size(&c, 8192, 8192); /* 64 Mi pixels: each side fine, the count not */
    CHECK_EQ(ifl_image_decode(&im, c.p, c.n, err), IFL_EINVAL);
    CHECK_MSG(strstr(err, "over the limit") != NULL, "%s", err);
    CHECK(im.rgb == NULL);
    free(c.p);
    free(b.p);
    free(px);
}

static void test_pixels_pad_normalize(void)
{
    struct ifl_image im = {0}, sq = {0};
    char err[IFL_ERR_LEN] = "";
    const uint8_t rgba[2 * 4] = {10, 20, 30, 255, 40, 50, 60, 0};
    CHECK_EQ(ifl_image_from_pixels(&im, rgba, 2, 1, 4, err), 0);
    CHECK(im.w == 2 && im.h == 1 && !memcmp(im.rgb, "\x0a\x14\x1e\x28\x32\x3c", 6));
    CHECK_EQ(ifl_image_from_pixels(&sq, rgba, 2, 1, 2, err), IFL_EINVAL);
    CHECK(strstr(err, "2 channels") != NULL);
    CHECK_EQ(ifl_image_from_pixels(&sq, rgba, 0, 0, 3, err), IFL_EINVAL);
    CHECK(strstr(err, "0 x 0") != NULL);
    /* 2 x 1 on a 2 x 2 square: the odd row goes after the image */
    const uint8_t fill[3] = {1, 2, 3};
    CHECK_EQ(ifl_image_pad_square(&sq, &im, fill, err), 0);
    CHECK(sq.w == 2 && sq.h == 2);
    CHECK(!memcmp(sq.rgb, im.rgb, 6) && !memcmp(sq.rgb + 6, "\x01\x02\x03\x01\x02\x03", 6));
    ifl_image_free(&sq);
    /* 1 x 3 on 3 x 3: one column of fill each side */
    const uint8_t grey[3] = {7, 8, 9};
    struct ifl_image tall = {0};
    CHECK_EQ(ifl_image_from_pixels(&tall, grey, 1, 3, 1, err), 0);
    CHECK_EQ(ifl_image_pad_square(&sq, &tall, fill, err), 0);
    CHECK(sq.w == 3 && sq.rgb[3 * 3 + 3] == 8 && sq.rgb[3 * 3] == 1 && sq.rgb[3 * 3 + 6] == 1);
    ifl_image_free(&sq);
    ifl_image_free(&tall);
    /* planar, (v / 255 - mean) / std */
    const float mean[3] = {0.5f, 0.25f, 0.0f}, sd[3] = {0.5f, 0.25f, 1.0f};
    float out[6];
    CHECK_EQ(ifl_image_normalize(out, &im, mean, sd, err), 0);
    CHECK(fabsf(out[0] - (10.0f / 255 - 0.5f) / 0.5f) < 1e-6f);
    CHECK(fabsf(out[1] - (40.0f / 255 - 0.5f) / 0.5f) < 1e-6f);
    CHECK(fabsf(out[2] - (20.0f / 255 - 0.25f) / 0.25f) < 1e-6f);
    CHECK(fabsf(out[5] - 60.0f / 255) < 1e-6f);
    const float zero[3] = {1, 0, 1};
    CHECK_EQ(ifl_image_normalize(out, &im, mean, zero, err), IFL_EINVAL);
    ifl_image_free(&im);
    ifl_image_free(&im); /* twice is harmless */
}

int main(void)
{
    T_RUN(test_png_colour_types);
    T_RUN(test_jpeg);
    T_RUN(test_bad_files);
    T_RUN(test_pixels_pad_normalize);
    return t_done();
}
