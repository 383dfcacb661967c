/*
 * Preprocessing for the encoder (clip.h ifl_clip_preprocess): the resizes,
 * padding, tiling and normalising llama.cpp's mtmd applies before its CLIP
 * graphs (tools/mtmd/mtmd-image.cpp), repeated step for step so that the
 * encoder sees the same floats: its bicubic and bilinear resizes round the
 * same way, its tiling grid is chosen by the same rule.
 *
 * LLaVA-1.5 ("mlp"): one square, the image fitted inside and padded.
 * InternVL ("internvl"): llama.cpp's llava-uhd preprocessor with a fixed
 * list of grids (every cols x rows of image_size squares with min_tiles
 * <= cols, rows and cols * rows <= max_tiles, in that order); an image
 * larger than one square takes the grid that keeps most of its pixels,
 * then wastes the least (llava-next's select_best_resolution, not
 * InternVL's own closest-aspect rule: llama.cpp's choice, kept so the
 * embeddings agree), tiles first and the thumbnail last.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "vision/clip.h"

static int clampi(int v, int lo, int hi)
{
    return v < lo ? lo : v > hi ? hi : v;
}

/* llama.cpp's bicubic resize (mtmd-image.cpp, "adapted from ViT.cpp"): a
 * cubic through four samples along x for each of four rows, then one
 * through those four along y; the source point of output (j, i) is
 * (nx / tw * j, ny / th * i), samples past an edge repeat it, and the
 * value is rounded and clamped to a byte. The coefficients are formed in
 * double and kept in float, as there. */
static void resize_bicubic(const struct ifl_image *src, uint8_t *dst, int tw, int th)
{
    const int nx = src->w, ny = src->h;
    const float tx = (float)nx / (float)tw, ty = (float)ny / (float)th;
    for (int i = 0; i < th; i++) {
        for (int j = 0; j < tw; j++) {
            int x = (int)(tx * (float)j), y = (int)(ty * (float)i);
            float dx = tx * (float)j - (float)x, dy = ty * (float)i - (float)y;
            for (int k = 0; k < 3; k++) {
                float C[4];
                for (int jj = 0; jj < 4; jj++) {
                    const uint8_t *row = src->rgb + (size_t)clampi(y - 1 + jj, 0, ny - 1) * nx * 3;
                    float p0 = row[clampi(x, 0, nx - 1) * 3 + k];
                    float d0 = row[clampi(x - 1, 0, nx - 1) * 3 + k] - p0;
                    float d2 = row[clampi(x + 1, 0, nx - 1) * 3 + k] - p0;
                    float d3 = row[clampi(x + 2, 0, nx - 1) * 3 + k] - p0;
                    float a1 = (float)(-1.0 / 3 * d0 + d2 - 1.0 / 6 * d3);
                    float a2 = (float)(1.0 / 2 * d0 + 1.0 / 2 * d2);
                    float a3 = (float)(-1.0 / 6 * d0 - 1.0 / 2 * d2 + 1.0 / 6 * d3);
                    C[jj] = p0 + a1 * dx + a2 * dx * dx + a3 * dx * dx * dx;
                }
                float d0 = C[0] - C[1], d2 = C[2] - C[1], d3 = C[3] - C[1];
                float a1 = (float)(-1.0 / 3 * d0 + d2 - 1.0 / 6 * d3);
                float a2 = (float)(1.0 / 2 * d0 + 1.0 / 2 * d2);
                float a3 = (float)(-1.0 / 6 * d0 - 1.0 / 2 * d2 + 1.0 / 6 * d3);
                float cc = C[1] + a1 * dy + a2 * dy * dy + a3 * dy * dy * dy;
                float r = roundf(cc);
                dst[((size_t)i * tw + j) * 3 + k] = (uint8_t)(r < 0 ? 0 : r > 255 ? 255 : r);
            }
        }
    }
}

/* llama.cpp's bilinear resize: corners map to corners (the source point of
 * output x is x (nx - 1) / (tw - 1)), each channel lerped along x then y
 * in float and truncated to a byte. */
static void resize_bilinear(const struct ifl_image *src, uint8_t *dst, int tw, int th)
{
    const int nx = src->w, ny = src->h;
    float xr = tw > 1 ? (float)(nx - 1) / (float)(tw - 1) : 0.0f;
    float yr = th > 1 ? (float)(ny - 1) / (float)(th - 1) : 0.0f;
    for (int y = 0; y < th; y++) {
        for (int x = 0; x < tw; x++) {
            float px = (float)x * xr, py = (float)y * yr;
            int x0 = (int)px < nx - 1 ? (int)px : nx - 1, y0 = (int)py < ny - 1 ? (int)py : ny - 1;
            int x1 = x0 + 1 < nx - 1 ? x0 + 1 : nx - 1, y1 = y0 + 1 < ny - 1 ? y0 + 1 : ny - 1;
            float xf = px - (float)x0, yf = py - (float)y0;
            const uint8_t *p00 = src->rgb + ((size_t)y0 * nx + x0) * 3;
            const uint8_t *p10 = src->rgb + ((size_t)y0 * nx + x1) * 3;
            const uint8_t *p01 = src->rgb + ((size_t)y1 * nx + x0) * 3;
            const uint8_t *p11 = src->rgb + ((size_t)y1 * nx + x1) * 3;
            for (int c = 0; c < 3; c++) {
                float top = (float)p00[c] + ((float)p10[c] - (float)p00[c]) * xf;
                float bot = (float)p01[c] + ((float)p11[c] - (float)p01[c]) * xf;
                dst[((size_t)y * tw + x) * 3 + c] = (uint8_t)(top + (bot - top) * yf);
            }
        }
    }
}

/* im scaled to fit tw x th keeping its aspect (each side ceil(side *
 * scale), at most the target's; bicubic), centred on a canvas filled with
 * fill; the odd pixel of a split goes after the image. An image already
 * of that size is copied. dst: tw * th * 3 bytes. IFL_ENOMEM. */
static int fit_pad(const struct ifl_image *im, uint8_t *dst, int tw, int th, const uint8_t fill[3],
                   char *err)
{
    if (im->w == tw && im->h == th) {
        memcpy(dst, im->rgb, (size_t)tw * th * 3);
        return 0;
    }
    float scale = fminf((float)tw / (float)im->w, (float)th / (float)im->h);
    int nw = clampi((int)ceilf((float)im->w * scale), 1, tw);
    int nh = clampi((int)ceilf((float)im->h * scale), 1, th);
    uint8_t *fit = malloc((size_t)nw * nh * 3);
    if (!fit)
        return ifl_err(err, IFL_ENOMEM, "image: out of memory resizing to %d x %d", tw, th);
    resize_bicubic(im, fit, nw, nh);
    for (size_t p = 0; p < (size_t)tw * th; p++)
        memcpy(dst + 3 * p, fill, 3);
    int ox = (tw - nw) / 2, oy = (th - nh) / 2;
    for (int y = 0; y < nh; y++)
        memcpy(dst + ((size_t)(y + oy) * tw + ox) * 3, fit + (size_t)y * nw * 3, (size_t)nw * 3);
    free(fit);
    return 0;
}

/* The grid (cols x rows of image_size squares) llama.cpp picks for a w x h
 * image larger than one square: of the candidates in order, the one whose
 * aspect-kept fit has the most pixels (capped at the image's own), then
 * the least area left over; ties keep the earlier. */
static void pick_grid(const struct ifl_clip_hparams *hp, int32_t w, int32_t h, int *gc, int *gr)
{
    const int S = hp->image_size, lo = hp->min_tiles, hi = hp->max_tiles;
    int64_t best_eff = 0, best_waste = INT64_MAX;
    *gc = *gr = 1;
    for (int a = lo; a <= hi; a++) {
        int b_lo = (lo + a - 1) / a, b_hi = hi / a;
        b_lo = b_lo > lo ? b_lo : lo;
        b_hi = b_hi < hi ? b_hi : hi;
        for (int b = b_lo; b <= b_hi; b++) {
            int cw = a * S, ch = b * S;
            float sw = (float)cw / (float)w, sh = (float)ch / (float)h, s = fminf(sw, sh);
            int64_t tw = (int64_t)((float)w * s), th = (int64_t)((float)h * s);
            int64_t eff = tw * th < (int64_t)w * h ? tw * th : (int64_t)w * h;
            int64_t waste = (int64_t)cw * ch - eff;
            if (eff > best_eff || (eff == best_eff && waste < best_waste)) {
                best_eff = eff;
                best_waste = waste;
                *gc = a;
                *gr = b;
            }
        }
    }
}

int ifl_clip_n_tiles(const struct ifl_clip *c, int32_t w, int32_t h)
{
    const struct ifl_clip_hparams *hp = &c->hp;
    if (hp->proj != IFL_CLIP_PROJ_INTERNVL || (w <= hp->image_size && h <= hp->image_size))
        return 1;
    int gc, gr;
    pick_grid(hp, w, h, &gc, &gr);
    return gc * gr + 1;
}

static int prep_internvl(const struct ifl_clip *c, const struct ifl_image *im, float *out,
                         char *err)
{
    const struct ifl_clip_hparams *hp = &c->hp;
    const int S = hp->image_size;
    const size_t tile = (size_t)S * S * 3;
    struct ifl_image sq = {S, S, malloc(tile)};
    if (!sq.rgb)
        return ifl_err(err, IFL_ENOMEM, "image: out of memory resizing to %d x %d", S, S);
    int rc = 0, n = ifl_clip_n_tiles(c, im->w, im->h);
    if (n > 1) {
        int gc, gr;
        pick_grid(hp, im->w, im->h, &gc, &gr);
        static const uint8_t black[3] = {0, 0, 0};
        uint8_t *big = malloc(tile * (size_t)gc * gr);
        rc = big ? fit_pad(im, big, gc * S, gr * S, black, err)
                 : ifl_err(err, IFL_ENOMEM, "image: out of memory for %d x %d tiles", gc, gr);
        for (int t = 0; t < gc * gr && !rc; t++) {
            int tx = t % gc, ty = t / gc;
            for (int y = 0; y < S; y++)
                memcpy(sq.rgb + (size_t)y * S * 3,
                       big + (((size_t)ty * S + y) * (size_t)gc * S + (size_t)tx * S) * 3,
                       (size_t)S * 3);
            rc = ifl_image_normalize(out + (size_t)t * tile, &sq, hp->mean, hp->std, err);
        }
        free(big);
    }
    if (!rc) { /* the thumbnail (the only tile of a small image) */
        if (im->w == S && im->h == S)
            memcpy(sq.rgb, im->rgb, tile);
        else
            resize_bilinear(im, sq.rgb, S, S);
        rc = ifl_image_normalize(out + (size_t)(n - 1) * tile, &sq, hp->mean, hp->std, err);
    }
    free(sq.rgb);
    return rc;
}

int ifl_clip_preprocess(const struct ifl_clip *c, const struct ifl_image *im, float *out, char *err)
{
    const int S = c->hp.image_size;
    if (c->hp.proj == IFL_CLIP_PROJ_INTERNVL)
        return prep_internvl(c, im, out, err);
    if (im->w == S && im->h == S)
        return ifl_image_normalize(out, im, c->hp.mean, c->hp.std, err);
    struct ifl_image sq = {S, S, malloc((size_t)S * S * 3)};
    if (!sq.rgb)
        return ifl_err(err, IFL_ENOMEM, "image: out of memory resizing to %d x %d", S, S);
    int rc = fit_pad(im, sq.rgb, S, S, c->hp.pad, err);
    if (!rc)
        rc = ifl_image_normalize(out, &sq, c->hp.mean, c->hp.std, err);
    free(sq.rgb);
    return rc;
}
