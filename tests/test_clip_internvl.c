/*
 * The InternVL vision encoder (clip.projector_type "internvl": an InternViT
 * with layer scales, pixel shuffle, a LayerNorm + two-linear projector;
 * src/vision/clip.c, clip_encode.c, clip_prep.c) on synthetic mmproj files
 * from `tools/mkmodel --mmproj --projector internvl`, against the float64
 * reference (tests/refclip.c): F32 and F16 weights within 1e-4 of the
 * reference's scale, Q8_0 within 0.1 / 0.02 of its std (max / mean), as
 * test_clip.c holds the LLaVA encoder. Also: the hyper-parameters and
 * their defaults, shuffles of 1, 2 and 4, a batch of tiles bit for bit
 * the same as each alone, llama.cpp's tiling grid and tile order, and
 * files that must be refused with a sentence.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/err.h"
#include "core/rng.h"
#include "model/gguf.h"
#include "refclip.h"
#include "t.h"
#include "vision/clip.h"

static char g_dir[256];
static char g_mk[512];
static double g_worst[3];

static int mk(const char *name, const char *flags, char *path, size_t cap)
{
    char cmd[2048];
    snprintf(path, cap, "%s/%s.gguf", g_dir, name);
    snprintf(cmd, sizeof cmd, "'%s' -o '%s' --mmproj --projector internvl %s 2>/dev/null", g_mk,
             path, flags);
    int rc = system(cmd);
    CHECK_MSG(rc == 0, "mkmodel failed (%d): %s", rc, cmd);
    return rc;
}

static float *tiles(int n, int S, uint64_t seed)
{
    size_t m = (size_t)n * 3 * S * S;
    float *px = malloc(m * sizeof(float));
    struct ifl_rng r;
    ifl_rng_seed(&r, seed);
    for (size_t i = 0; i < m; i++)
        px[i] = (float)((double)(ifl_rng_next(&r) >> 11) / 9007199254740992.0 * 4.0 - 2.0);
    return px;
}

/* Three tiles through the encoder in one batch and through the reference
 * one by one; tol_class 0: float weights, 1: q8_0. */
static void check_vs_ref(const char *path, int tol_class)
{
    char err[IFL_ERR_LEN] = "";
    struct ifl_clip *c = NULL;
    struct ifl_clip_ctx *x = NULL;
    int rc = ifl_clip_load(&c, path, err);
    CHECK_MSG(rc == 0, "load %s: %s", path, err);
    if (rc)
        return;
    CHECK(ifl_clip_ctx_create(&x, c, 3, NULL, 2, err) == 0);
    const int S = c->hp.image_size, NT = c->hp.n_tok, D = c->hp.n_out;
    const size_t n = (size_t)NT * D;
    float *px = tiles(3, S, 17), *got = calloc(3 * n, 4), *ref = calloc(n, 4);
    CHECK(ifl_clip_encode(x, px, 3, got, err) == 0);
    for (int im = 0; im < 3; im++) {
        struct refclip_shape sh;
        rc = ref_clip_encode(path, px + (size_t)im * 3 * S * S, 0, ref, &sh, err);
        CHECK_MSG(rc == 0, "ref: %s", err);
        if (rc)
            break;
        CHECK_EQ(sh.n_patches, NT);
        double s = 0, ss = 0, mx = 0, mean = 0;
        for (size_t i = 0; i < n; i++) {
            s += ref[i];
            ss += (double)ref[i] * ref[i];
            double d = fabs((double)got[im * n + i] - ref[i]);
            mx = d > mx ? d : mx;
            mean += d;
        }
        double sd = sqrt(ss / n - (s / n) * (s / n));
        mean /= n;
        CHECK_MSG(sd > 0.1, "%s: the reference's output is degenerate (std %g)", path, sd);
        if (tol_class == 0) {
            CHECK_MSG(mx <= 1e-4 * fmax(1, sd), "%s tile %d: max |d| %.3g (std %.3g)", path, im, mx,
                      sd);
            g_worst[0] = fmax(g_worst[0], mx / fmax(1, sd));
        } else {
            CHECK_MSG(mx <= 0.1 * sd && mean <= 0.02 * sd,
                      "%s tile %d: max |d| %.3g, mean %.3g (std %.3g)", path, im, mx, mean, sd);
            g_worst[1] = fmax(g_worst[1], mx / sd);
            g_worst[2] = fmax(g_worst[2], mean / sd);
        }
    }
    free(px);
    free(got);
    free(ref);
    ifl_clip_ctx_free(x);
    ifl_clip_free(c);
}

static void test_load(void)
{
    char path[512], err[IFL_ERR_LEN] = "";
    if (mk("base", "--n-ff 96 --proj-dim 48 --n-mm 80", path, sizeof path))
        return;
    struct ifl_clip *c = NULL;
    CHECK(ifl_clip_load(&c, path, err) == 0);
    if (!c)
        return;
    const struct ifl_clip_hparams *hp = &c->hp;
    CHECK_EQ(hp->proj, IFL_CLIP_PROJ_INTERNVL);
    CHECK_EQ(hp->merge, 2);
    CHECK_EQ(hp->n_patches, 16);
    CHECK_EQ(hp->n_tok, 4);
    CHECK_EQ(hp->n_run, 3); /* every layer */
    CHECK_EQ(hp->min_tiles, 1);
    CHECK_EQ(hp->max_tiles, 12); /* llama.cpp's default without the key */
    CHECK_EQ(hp->act, IFL_CLIP_GELU);
    CHECK_EQ(hp->n_mm, 80);
    CHECK_EQ(hp->n_out, 48);
    CHECK(c->cls != NULL && c->pre_w == NULL);
    CHECK(c->layers[0].ls1 != NULL && c->layers[2].ls2 != NULL);
    CHECK(c->mmln_w != NULL && c->mmln_b != NULL);
    CHECK_EQ(c->mm0.n_in, 64 * 4);
    CHECK_NEAR(hp->mean[0], 0.485f, 1e-6);
    ifl_clip_free(c);
}

static void test_vs_ref(void)
{
    char path[512];
    if (!mk("f32", "--type f32 --n-ff 96 --proj-dim 48 --n-mm 80 --seed 3", path, sizeof path))
        check_vs_ref(path, 0);
    if (!mk("f16", "--type f16 --seed 4", path, sizeof path))
        check_vs_ref(path, 0);
    if (!mk("q8", "--type q8_0 --seed 5", path, sizeof path))
        check_vs_ref(path, 1);
    /* no shuffle, and a 4 x 4 one over 8 x 8 patches (rows of 1024) */
    if (!mk("m1", "--merge 1 --post-ln --seed 6", path, sizeof path))
        check_vs_ref(path, 0);
    if (!mk("m4", "--merge 4 --image-size 64 --n-embd 32 --n-head 2 --seed 7", path, sizeof path))
        check_vs_ref(path, 0);
}

/* With every position the same row, the class token's place cannot
 * matter: the reference gives the same either way (what lets
 * test_clip_llamacpp.c compare with llama.cpp's class-last graph
 * directly); with the usual rows it does matter. */
static void test_flat_pos(void)
{
    char flat[512], usual[512], err[IFL_ERR_LEN] = "";
    if (mk("flat", "--flat-pos --seed 8", flat, sizeof flat) ||
        mk("usual", "--seed 8", usual, sizeof usual))
        return;
    struct refclip_shape sh;
    CHECK(ref_clip_encode(flat, NULL, 0, NULL, &sh, err) == 0);
    size_t n = (size_t)sh.n_patches * sh.n_out;
    float *px = tiles(1, sh.image_size, 9), *a = malloc(n * 4), *b = malloc(n * 4);
    double dflat = 0, dusual = 0;
    CHECK(ref_clip_encode(flat, px, 0, a, NULL, err) == 0);
    CHECK(ref_clip_encode(flat, px, 1, b, NULL, err) == 0);
    for (size_t i = 0; i < n; i++)
        dflat = fmax(dflat, fabs((double)a[i] - b[i]));
    CHECK(ref_clip_encode(usual, px, 0, a, NULL, err) == 0);
    CHECK(ref_clip_encode(usual, px, 1, b, NULL, err) == 0);
    for (size_t i = 0; i < n; i++)
        dusual = fmax(dusual, fabs((double)a[i] - b[i]));
    CHECK_MSG(dflat < 1e-5, "flat positions: the class token's place changed %g", dflat);
    CHECK_MSG(dusual > 1e-2, "usual positions: the class token's place changed only %g", dusual);
    free(px);
    free(a);
    free(b);
}

static void test_invariance(void)
{
    char path[512], err[IFL_ERR_LEN] = "";
    if (mk("inv", "--type q8_0 --seed 31", path, sizeof path))
        return;
    struct ifl_clip *c = NULL;
    struct ifl_clip_ctx *x1 = NULL, *x4 = NULL;
    CHECK(ifl_clip_load(&c, path, err) == 0);
    if (!c)
        return;
    CHECK(ifl_clip_ctx_create(&x1, c, 1, NULL, 1, err) == 0);
    CHECK(ifl_clip_ctx_create(&x4, c, 4, NULL, 2, err) == 0);
    const int S = c->hp.image_size;
    const size_t n = (size_t)c->hp.n_tok * c->hp.n_out, img = (size_t)3 * S * S;
    float *px = tiles(4, S, 77), *batch = malloc(4 * n * 4), *one = malloc(n * 4);
    CHECK(ifl_clip_encode(x4, px, 4, batch, err) == 0);
    for (int i = 0; i < 4; i++) {
        CHECK(ifl_clip_encode(x1, px + i * img, 1, one, err) == 0);
        CHECK_MSG(memcmp(one, batch + i * n, n * 4) == 0, "tile %d differs in the batch", i);
    }
    CHECK(memcmp(batch, batch + n, n * 4) != 0);
    free(px);
    free(batch);
    free(one);
    ifl_clip_ctx_free(x1);
    ifl_clip_ctx_free(x4);
    ifl_clip_free(c);
}

/* llama.cpp's grids: an image that fits is one tile; a larger one takes
 * the candidate keeping most pixels, then wasting least, plus the
 * thumbnail; preproc_max_tiles bounds the grid. A 2S x S image is two
 * tiles, its halves exactly (the grid's resolution is its own: no
 * resize), then the thumbnail. */
static void test_tiles(void)
{
    char path[512], p2[512], err[IFL_ERR_LEN] = "";
    if (mk("tiles", "--seed 41", path, sizeof path) ||
        mk("tiles2", "--max-tiles 2 --seed 41", p2, sizeof p2))
        return;
    struct ifl_clip *c = NULL, *c2 = NULL;
    CHECK(ifl_clip_load(&c, path, err) == 0);
    CHECK(ifl_clip_load(&c2, p2, err) == 0);
    if (!c || !c2)
        return;
    CHECK_EQ(ifl_clip_n_tiles(c, 32, 32), 1);
    CHECK_EQ(ifl_clip_n_tiles(c, 13, 31), 1);
    CHECK_EQ(ifl_clip_n_tiles(c, 20, 48), 3);      /* 1 x 2 */
    CHECK_EQ(ifl_clip_n_tiles(c, 70, 40), 7);      /* 3 x 2 */
    CHECK_EQ(ifl_clip_n_tiles(c, 64, 32), 3);      /* 2 x 1 */
    CHECK_EQ(ifl_clip_n_tiles(c, 1000, 1000), 10); /* 3 x 3 */
    CHECK_EQ(ifl_clip_n_tiles(c, 4000, 40), 13);   /* 12 x 1 */
    CHECK_EQ(c2->hp.max_tiles, 2);
    CHECK_EQ(ifl_clip_n_tiles(c2, 70, 40), 3);
    CHECK_EQ(ifl_clip_n_tiles(c2, 1000, 1000), 2); /* 1 x 1 wastes least */
    const int S = c->hp.image_size;
    const size_t T = (size_t)3 * S * S;
    uint8_t *px = malloc((size_t)2 * S * S * 3), *half = malloc((size_t)S * S * 3);
    for (int i = 0; i < 2 * S * S * 3; i++)
        px[i] = (uint8_t)(i * 37 + i / 7);
    struct ifl_image im = {2 * S, S, px};
    float *out = malloc(sizeof(float) * 3 * T), *want = malloc(sizeof(float) * T);
    CHECK(ifl_clip_preprocess(c, &im, out, err) == 0);
    for (int t = 0; t < 2; t++) {
        for (int y = 0; y < S; y++)
            memcpy(half + (size_t)y * S * 3, px + ((size_t)y * 2 * S + (size_t)t * S) * 3,
                   (size_t)S * 3);
        struct ifl_image h = {S, S, half};
        CHECK(ifl_image_normalize(want, &h, c->hp.mean, c->hp.std, err) == 0);
        CHECK_MSG(memcmp(out + t * T, want, sizeof(float) * T) == 0, "tile %d is not the half", t);
    }
    /* the thumbnail: corners map to corners (bilinear), so its first
     * column is the image's first column sampled every other row */
    int bad = 0;
    for (int y = 0; y < S; y++) {
        int sy = (int)((float)y * (float)(S - 1) / (float)(S - 1));
        float w = ((float)px[(size_t)sy * 2 * S * 3] / 255.0f - c->hp.mean[0]) / c->hp.std[0];
        bad += out[2 * T + (size_t)y * S] != w;
    }
    CHECK_EQ(bad, 0);
    free(px);
    free(half);
    free(out);
    free(want);
    ifl_clip_free(c);
    ifl_clip_free(c2);
}

/* Rewrites src into dst: key `key` set to u32 v (or dropped, v < 0),
 * tensor `drop` left out. */
static int rewrite(const char *src, const char *dst, const char *key, int64_t v, const char *drop)
{
    struct ifl_gguf *g = NULL;
    struct ifl_gguf_writer *w = NULL;
    char err[IFL_ERR_LEN];
    int rc = ifl_gguf_open(&g, src, err);
    if (!rc)
        rc = ifl_gguf_writer_create(&w);
    for (int64_t i = 0; !rc && i < ifl_gguf_n_kv(g); i++)
        if (!key || strcmp(ifl_gguf_key(g, i), key))
            rc = ifl_gguf_writer_copy_kv(w, g, i);
    if (!rc && key && v >= 0)
        rc = ifl_gguf_writer_set_u32(w, key, (uint32_t)v);
    for (int64_t i = 0; !rc && i < ifl_gguf_n_tensors(g); i++) {
        const struct ifl_gguf_tensor *t = ifl_gguf_tensor(g, i);
        if (!drop || strcmp(t->name, drop))
            rc = ifl_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data,
                                            t->nbytes);
    }
    if (!rc)
        rc = ifl_gguf_writer_write(w, dst, err);
    ifl_gguf_writer_free(w);
    ifl_gguf_free(g);
    return rc;
}

static void expect_refused(const char *path, int code, const char *words)
{
    char err[IFL_ERR_LEN] = "";
    struct ifl_clip *c = (struct ifl_clip *)1;
    int rc = ifl_clip_load(&c, path, err);
    CHECK_MSG(rc == code, "%s: rc %d (want %d): %s", path, rc, code, err);
    CHECK(c == NULL);
    CHECK_MSG(strstr(err, words) != NULL, "%s: '%s' lacks '%s'", path, err, words);
}

static void test_bad_files(void)
{
    char good[512], bad[600], err[IFL_ERR_LEN] = "";
    if (mk("good", "--seed 51", good, sizeof good))
        return;
    snprintf(bad, sizeof bad, "%s/bad.gguf", g_dir);
    const char *sf = "clip.vision.projector.scale_factor";
    CHECK(rewrite(good, bad, sf, 3, NULL) == 0);
    expect_refused(bad, IFL_EFORMAT, "scale_factor 3 does not divide");
    CHECK(rewrite(good, bad, sf, 0, NULL) == 0);
    expect_refused(bad, IFL_EFORMAT, "scale_factor = 0 is outside");
    CHECK(rewrite(good, bad, "clip.vision.preproc_max_tiles", 1000, NULL) == 0);
    expect_refused(bad, IFL_EFORMAT, "preproc_max_tiles = 1000");
    CHECK(rewrite(good, bad, "clip.vision.preproc_min_tiles", 5, NULL) == 0);
    char flags[64];
    snprintf(flags, sizeof flags, "--max-tiles 3 --seed 51");
    char p3[512];
    if (!mk("max3", flags, p3, sizeof p3)) {
        CHECK(rewrite(p3, bad, "clip.vision.preproc_min_tiles", 5, NULL) == 0);
        expect_refused(bad, IFL_EFORMAT, "preproc_min_tiles 5 is over preproc_max_tiles 3");
    }
    CHECK(rewrite(good, bad, NULL, 0, "v.class_embd") == 0);
    expect_refused(bad, IFL_EFORMAT, "v.class_embd");
    CHECK(rewrite(good, bad, NULL, 0, "mm.model.mlp.0.weight") == 0);
    expect_refused(bad, IFL_EFORMAT, "mm.model.mlp.0.weight' is missing");
    CHECK(rewrite(good, bad, NULL, 0, "mm.model.mlp.3.weight") == 0);
    expect_refused(bad, IFL_EFORMAT, "mm.model.mlp.3.weight' is missing");
    /* without the key, the shuffle is InternVL's 0.5 (2 a side) */
    CHECK(rewrite(good, bad, sf, -1, NULL) == 0);
    struct ifl_clip *c = NULL;
    CHECK(ifl_clip_load(&c, bad, err) == 0);
    CHECK(c && c->hp.merge == 2 && c->hp.n_tok == 4);
    ifl_clip_free(c);
}

int main(void)
{
    const char *build = getenv("BUILD");
    snprintf(g_mk, sizeof g_mk, "%s/tools/mkmodel", build && *build ? build : "build");
    snprintf(g_dir, sizeof g_dir, "/tmp/ifl_clipvl_XXXXXX");
    if (access(g_mk, X_OK) != 0 || !mkdtemp(g_dir)) {
        fprintf(stderr, "cannot run %s or make a temporary directory\n", g_mk);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    T_RUN(test_load);
    T_RUN(test_vs_ref);
    T_RUN(test_flat_pos);
    T_RUN(test_invariance);
    T_RUN(test_tiles);
    T_RUN(test_bad_files);
    fprintf(stderr, "  worst: float max |d| / max(1, std) %.2e; q8_0 max %.3f, mean %.4f of std\n",
            g_worst[0], g_worst[1], g_worst[2]);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", g_dir);
    return t_done();
}
