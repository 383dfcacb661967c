/*
 * The vision encoder (src/vision/clip.c, clip_encode.c) on synthetic mmproj
 * files from `tools/mkmodel --mmproj`, against the float64 reference
 * (tests/refclip.c):
 *   F32 weights: max |d| <= 1e-4 * max(1, std(ref)) (float vs double sums);
 *   F16 weights (the reference reads the same F16 values): likewise;
 *   Q8_0 weights (activations rounded to Q8_0 too): max |d| <= 0.1 * std
 *   and mean |d| <= 0.02 * std;
 *   F16 weights with the BF16 compute precision (on the avx512bf16 table):
 *   max |d| <= 0.05 * std and mean |d| <= 0.01 * std (elsewhere the
 *   default's bits).
 * Also: the hyper-parameters and the ffn_up/ffn_down swap, the variants
 * (no class token, GELU, a post-LN, feature_layer, a 14-pixel patch),
 * batch and thread-count invariance bit for bit, the preprocessing (the
 * padding colour, a constant image through the bicubic resize), and
 * files that must be refused with a sentence naming the problem.
 *
 * mkmodel runs through system(): $BUILD/tools/mkmodel, writing into a
 * mkdtemp directory removed at the end.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <png.h>
#include <pthread.h>

#include "core/err.h"
#include "core/rng.h"
#include "inflight.h"
#include "kernels/kernels.h"
#include "model/forward.h"
#include "model/gguf.h"
#include "model/kv_store.h"
#include "model/model.h"
#include "refclip.h"
#include "t.h"
#include "vision/clip.h"

static char g_dir[256];
static char g_mk[512];

/* Writes dir/name with mkmodel --mmproj and the extra flags; 0 on success. */
static int mk(const char *name, const char *flags, char *path, size_t cap)
{
    char cmd[2048];
    snprintf(path, cap, "%s/%s.gguf", g_dir, name);
    snprintf(cmd, sizeof cmd, "'%s' -o '%s' --mmproj %s 2>/dev/null", g_mk, path, flags);
    int rc = system(cmd);
    CHECK_MSG(rc == 0, "mkmodel failed (%d): %s", rc, cmd);
    return rc;
}

/* n_img images of 3 x S x S values around 0 (normalised pixels), seeded. */
static float *images(int n_img, int S, uint64_t seed)
{
    size_t n = (size_t)n_img * 3 * S * S;
    float *px = malloc(n * sizeof(float));
    struct ifl_rng r;
    ifl_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++)
        px[i] = (float)((double)(ifl_rng_next(&r) >> 11) / 9007199254740992.0 * 4.0 - 2.0);
    return px;
}

static double g_worst[3];

/* Encodes two images with the encoder and the reference; checks the class
 * of tolerance (0 float weights, 1 q8_0). */
static void check_vs_ref(const char *path, int tol_class)
{
    char err[IFL_ERR_LEN] = "";
    struct ifl_clip *c = NULL;
    struct ifl_clip_ctx *x = NULL;
    int rc = ifl_clip_load(&c, path, err);
    CHECK_MSG(rc == 0, "load %s: %s", path, err);
    if (rc)
        return;
    rc = ifl_clip_ctx_create(&x, c, 2, NULL, 2, err);
    CHECK_MSG(rc == 0, "ctx: %s", err);
    const int S = c->hp.image_size, NP = c->hp.n_tok, D = c->hp.n_out;
    float *px = images(2, S, 7);
    float *got = calloc((size_t)2 * NP * D, sizeof(float));
    float *ref = calloc((size_t)NP * D, sizeof(float));
    CHECK(ifl_clip_encode(x, px, 2, got, err) == 0);
    struct refclip_shape sh;
    for (int im = 0; im < 2 && !rc; im++) {
        rc = ref_clip_encode(path, px + (size_t)im * 3 * S * S, 0, ref, &sh, err);
        CHECK_MSG(rc == 0, "ref: %s", err);
        CHECK_EQ(sh.n_patches, NP);
        CHECK_EQ(sh.n_out, D);
        double s = 0, ss = 0, mx = 0, mean = 0;
        size_t n = (size_t)NP * D;
        for (size_t i = 0; i < n; i++) {
            s += ref[i];
            ss += (double)ref[i] * ref[i];
            double d = fabs((double)got[(size_t)im * n + i] - ref[i]);
            mx = d > mx ? d : mx;
            mean += d;
        }
        double sd = sqrt(ss / n - (s / n) * (s / n));
        mean /= n;
        CHECK_MSG(sd > 0.1, "%s: the reference's output is degenerate (std %g)", path, sd);
        if (tol_class == 0) {
            CHECK_MSG(mx <= 1e-4 * fmax(1, sd), "%s image %d: max |d| %.3g (std %.3g)", path, im,
                      mx, sd);
            g_worst[0] = fmax(g_worst[0], mx / fmax(1, sd));
        } else {
            CHECK_MSG(mx <= 0.1 * sd && mean <= 0.02 * sd,
                      "%s image %d: max |d| %.3g, mean %.3g (std %.3g)", path, im, mx, mean, sd);
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
    if (mk("base",
           "--image-size 32 --patch-size 8 --n-embd 64 --n-ff 96 --n-head 4 --n-layer 3 "
           "--proj-dim 48 --n-mm 80",
           path, sizeof path))
        return;
    struct ifl_clip *c = NULL;
    CHECK(ifl_clip_load(&c, path, err) == 0);
    if (!c)
        return;
    const struct ifl_clip_hparams *hp = &c->hp;
    CHECK_EQ(hp->image_size, 32);
    CHECK_EQ(hp->n_side, 4);
    CHECK_EQ(hp->n_patches, 16);
    CHECK_EQ(hp->n_pos, 17);
    CHECK_EQ(hp->head_dim, 16);
    CHECK_EQ(hp->n_layer, 3);
    CHECK_EQ(hp->n_run, 2); /* the penultimate layer */
    CHECK_EQ(hp->n_mm, 80);
    CHECK_EQ(hp->n_out, 48);
    CHECK_EQ(hp->act, IFL_CLIP_GELU_QUICK);
    CHECK(c->cls != NULL && c->pre_w != NULL && c->post_w == NULL);
    CHECK_EQ(hp->pad[0], 122);
    /* mkmodel writes llava's swapped names; the loader puts them right */
    CHECK_EQ(c->layers[0].up.n_in, 64);
    CHECK_EQ(c->layers[0].up.n_out, 96);
    CHECK(c->layers[0].up.data == ifl_gguf_find_tensor(c->gguf, "v.blk.0.ffn_down.weight")->data);
    CHECK_EQ(c->patch.n_in, 3 * 8 * 8);
    ifl_clip_free(c);
    ifl_clip_free(NULL);
}

static void test_f32(void)
{
    char path[512];
    if (!mk("f32", "--type f32 --n-ff 96 --proj-dim 48 --n-mm 80", path, sizeof path))
        check_vs_ref(path, 0);
}

static void test_f16(void)
{
    char path[512];
    if (!mk("f16", "--type f16 --seed 5", path, sizeof path))
        check_vs_ref(path, 0);
}

static void test_q8_0(void)
{
    char path[512];
    if (!mk("q8", "--type q8_0 --seed 6", path, sizeof path))
        check_vs_ref(path, 1);
}

static void test_variants(void)
{
    char path[512];
    if (!mk("nocls", "--no-class --gelu --seed 9", path, sizeof path))
        check_vs_ref(path, 0);
    if (!mk("post", "--post-ln --feature-layer 3 --seed 10", path, sizeof path))
        check_vs_ref(path, 0);
    if (!mk("fl0", "--feature-layer 0 --seed 12", path, sizeof path))
        check_vs_ref(path, 0);
    /* a 14-pixel patch: 588 values a row (not whole Q8_0 blocks: the patch
     * convolution stays F16), 2 x 2 patches */
    if (!mk("p14", "--type q8_0 --image-size 28 --patch-size 14 --seed 13", path, sizeof path))
        check_vs_ref(path, 1);
}

/* The BF16 compute precision (clip.h's IFL_CLIP_PREC_BF16), an option:
 * on a kernel table that multiplies BF16 by vdpbf16ps (avx512bf16) the
 * F16 matrices become BF16 and the output moves from the float64
 * reference, within max |d| <= 0.05 std and mean |d| <= 0.01 std
 * (measured: see the printed figures); on any other table the option
 * changes nothing, bit for bit. The default is untouched either way, and
 * a precision that does not exist is refused. */
static void test_bf16_precision(void)
{
    char path[512], err[IFL_ERR_LEN] = "";
    if (mk("bf16p", "--type f16 --seed 15", path, sizeof path))
        return;
    struct ifl_clip *c0 = NULL, *c1 = NULL;
    CHECK_EQ(ifl_clip_load_prec(&c1, path, (enum ifl_clip_prec)7, err), IFL_EINVAL);
    CHECK(c1 == NULL && strstr(err, "precision") != NULL);
    CHECK(ifl_clip_load(&c0, path, err) == 0);
    CHECK(ifl_clip_load_prec(&c1, path, IFL_CLIP_PREC_BF16, err) == 0);
    if (!c0 || !c1) {
        ifl_clip_free(c0);
        ifl_clip_free(c1);
        return;
    }
    const int bf = ifl_kernels_best()->act_bf16[IFL_TYPE_BF16];
    CHECK_EQ(c0->bf16, 0);
    CHECK_EQ(c1->bf16, bf);
    CHECK_EQ(c0->layers[0].wq.type, IFL_TYPE_F16);
    CHECK_EQ(c1->layers[0].wq.type, bf ? IFL_TYPE_BF16 : IFL_TYPE_F16);
    struct ifl_clip_ctx *x0 = NULL, *x1 = NULL;
    CHECK(ifl_clip_ctx_create(&x0, c0, 2, NULL, 2, err) == 0);
    CHECK(ifl_clip_ctx_create(&x1, c1, 2, NULL, 2, err) == 0);
    const int S = c0->hp.image_size;
    const size_t n = (size_t)c0->hp.n_tok * c0->hp.n_out, img = (size_t)3 * S * S;
    float *px = images(2, S, 17), *a = malloc(2 * n * 4), *b = malloc(2 * n * 4);
    float *ref = malloc(n * 4), *one = malloc(n * 4);
    CHECK(ifl_clip_encode(x0, px, 2, a, err) == 0);
    CHECK(ifl_clip_encode(x1, px, 2, b, err) == 0);
    /* batch invariance holds in BF16 too */
    CHECK(ifl_clip_encode(x1, px + img, 1, one, err) == 0);
    CHECK(memcmp(one, b + n, n * 4) == 0);
    if (!bf)
        CHECK_MSG(memcmp(a, b, 2 * n * 4) == 0, "bf16 precision changed the output on table %s",
                  ifl_kernels_best()->name);
    for (int im = 0; im < 2 && bf; im++) {
        CHECK(ref_clip_encode(path, px + im * img, 0, ref, NULL, err) == 0);
        double s = 0, ss = 0, mx = 0, mean = 0, mx0 = 0;
        for (size_t i = 0; i < n; i++) {
            s += ref[i];
            ss += (double)ref[i] * ref[i];
            double d = fabs((double)b[im * n + i] - ref[i]);
            mx = fmax(mx, d);
            mean += d;
            mx0 = fmax(mx0, fabs((double)a[im * n + i] - ref[i]));
        }
        double sd = sqrt(ss / n - (s / n) * (s / n));
        mean /= n;
        fprintf(stderr,
                "  bf16 products, image %d: max |d| %.2e, mean %.2e (std %.3f; f32 max %.2e)\n", im,
                mx, mean, sd, mx0);
        CHECK_MSG(mx <= 0.05 * sd && mean <= 0.01 * sd, "bf16: max |d| %g, mean %g, std %g", mx,
                  mean, sd);
        CHECK_MSG(mx > mx0, "bf16 products are no farther from float64 than f32 (%g, %g)", mx, mx0);
    }
    free(px);
    free(a);
    free(b);
    free(ref);
    free(one);
    ifl_clip_ctx_free(x0);
    ifl_clip_ctx_free(x1);
    ifl_clip_free(c0);
    ifl_clip_free(c1);
}

/* The class token's place changes every output (so the reference's
 * llama.cpp order really is another computation) and only the class
 * token's: without one, both orders agree. */
static void test_cls_order(void)
{
    char path[512], err[IFL_ERR_LEN] = "";
    if (mk("order", "--seed 21", path, sizeof path))
        return;
    struct refclip_shape sh;
    CHECK(ref_clip_encode(path, NULL, 0, NULL, &sh, err) == 0);
    size_t n = (size_t)sh.n_patches * sh.n_out;
    float *px = images(1, sh.image_size, 3), *a = calloc(n, 4), *b = calloc(n, 4);
    CHECK(ref_clip_encode(path, px, 0, a, NULL, err) == 0);
    CHECK(ref_clip_encode(path, px, 1, b, NULL, err) == 0);
    double mx = 0;
    for (size_t i = 0; i < n; i++)
        mx = fmax(mx, fabs((double)a[i] - b[i]));
    CHECK_MSG(mx > 0.1, "class first and last give the same output (max |d| %g)", mx);
    if (!mk("order_nocls", "--seed 21 --no-class", path, sizeof path)) {
        CHECK(ref_clip_encode(path, px, 0, a, NULL, err) == 0);
        CHECK(ref_clip_encode(path, px, 1, b, NULL, err) == 0);
        CHECK(memcmp(a, b, n * 4) == 0);
    }
    free(px);
    free(a);
    free(b);
}

/* An image's rows are the same bits alone, at any place in a batch, and
 * with one thread or two. */
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
    const size_t n = (size_t)c->hp.n_patches * c->hp.n_out, img = (size_t)3 * S * S;
    float *px = images(4, S, 77), *batch = malloc(4 * n * 4), *one = malloc(n * 4);
    CHECK(ifl_clip_encode(x4, px, 4, batch, err) == 0);
    for (int i = 0; i < 4; i++) {
        CHECK(ifl_clip_encode(x1, px + i * img, 1, one, err) == 0);
        CHECK_MSG(memcmp(one, batch + i * n, n * 4) == 0, "image %d differs in the batch", i);
    }
    CHECK(memcmp(batch, batch + n, n * 4) != 0);
    /* the batch the other way round */
    float *rev = malloc(4 * img * 4), *brev = malloc(4 * n * 4);
    for (int i = 0; i < 4; i++)
        memcpy(rev + i * img, px + (3 - i) * img, img * 4);
    CHECK(ifl_clip_encode(x4, rev, 3, brev, err) == 0);
    CHECK(memcmp(brev, batch + 3 * n, n * 4) == 0);
    CHECK(memcmp(brev + 2 * n, batch + 1 * n, n * 4) == 0);
    /* a count outside 1..max_images is refused */
    CHECK_EQ(ifl_clip_encode(x1, px, 2, one, err), IFL_EINVAL);
    CHECK(strstr(err, "images") != NULL);
    CHECK_EQ(ifl_clip_encode(x4, px, 0, one, err), IFL_EINVAL);
    free(px);
    free(batch);
    free(one);
    free(rev);
    free(brev);
    ifl_clip_ctx_free(x1);
    ifl_clip_ctx_free(x4);
    ifl_clip_free(c);
}

static void test_preprocess(void)
{
    char path[512], err[IFL_ERR_LEN] = "";
    if (mk("pre", "--seed 41", path, sizeof path))
        return;
    struct ifl_clip *c = NULL;
    CHECK(ifl_clip_load(&c, path, err) == 0);
    if (!c)
        return;
    const int S = c->hp.image_size;
    float *out = malloc(sizeof(float) * 3 * S * S);
    float *want = malloc(sizeof(float) * 3 * S * S);
    /* already S x S: normalised only */
    uint8_t *px = malloc((size_t)2 * S * S * 3);
    for (int i = 0; i < 2 * S * S * 3; i++)
        px[i] = (uint8_t)(i * 37 + 11);
    struct ifl_image im = {S, S, px};
    CHECK(ifl_clip_preprocess(c, &im, out, err) == 0);
    CHECK(ifl_image_normalize(want, &im, c->hp.mean, c->hp.std, err) == 0);
    CHECK(memcmp(out, want, sizeof(float) * 3 * S * S) == 0);
    /* 2S wide, S/2 high, one colour: scaled to S x S/4, centred on
     * rows [3S/8, 5S/8), the rest llava's padding colour */
    for (int i = 0; i < 2 * S * S / 2; i++)
        memcpy(px + 3 * i, (const uint8_t[3]){200, 30, 90}, 3);
    struct ifl_image wide = {2 * S, S / 2, px};
    CHECK(ifl_clip_preprocess(c, &wide, out, err) == 0);
    int bad = 0;
    for (int ch = 0; ch < 3; ch++)
        for (int y = 0; y < S; y++)
            for (int xx = 0; xx < S; xx++) {
                int inside = y >= 3 * S / 8 && y < 5 * S / 8;
                uint8_t v = inside ? (uint8_t[3]){200, 30, 90}[ch] : c->hp.pad[ch];
                float w = (v / 255.0f - c->hp.mean[ch]) / c->hp.std[ch];
                bad += fabsf(out[(ch * S + y) * S + xx] - w) > 1e-6f;
            }
    CHECK_EQ(bad, 0);
    free(out);
    free(want);
    free(px);
    ifl_clip_free(c);
}

/* Rewrites src into dst with key `drop` left out, key `str_key` set to
 * `str_val`, and tensor `bad_tensor` left out (shape NULL) or given the
 * shape ne[0..1] (zeros). */
static int rewrite(const char *src, const char *dst, const char *drop, const char *str_key,
                   const char *str_val, const char *bad_tensor, const int64_t *ne)
{
    struct ifl_gguf *g = NULL;
    struct ifl_gguf_writer *w = NULL;
    char err[IFL_ERR_LEN];
    int rc = ifl_gguf_open(&g, src, err);
    if (!rc)
        rc = ifl_gguf_writer_create(&w);
    for (int64_t i = 0; !rc && i < ifl_gguf_n_kv(g); i++) {
        const char *k = ifl_gguf_key(g, i);
        if ((drop && !strcmp(k, drop)) || (str_key && !strcmp(k, str_key)))
            continue;
        rc = ifl_gguf_writer_copy_kv(w, g, i);
    }
    if (!rc && str_key)
        rc = ifl_gguf_writer_set_str(w, str_key, str_val, strlen(str_val));
    for (int64_t i = 0; !rc && i < ifl_gguf_n_tensors(g); i++) {
        const struct ifl_gguf_tensor *t = ifl_gguf_tensor(g, i);
        if (bad_tensor && !strcmp(t->name, bad_tensor)) {
            if (!ne)
                continue;
            size_t nb = (size_t)(ne[0] * ne[1]) * 4;
            float *z = calloc(nb / 4, 4);
            rc = ifl_gguf_writer_add_tensor(w, t->name, IFL_TYPE_F32, 2, ne, z, nb);
            free(z);
            continue;
        }
        rc = ifl_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes);
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
    char good[512], bad[600];
    if (mk("good", "--seed 51", good, sizeof good))
        return;
    char text[512];
    snprintf(text, sizeof text, "%s/models/stories260K.gguf", t_shared());
    expect_refused(text, IFL_EFORMAT, "general.architecture");
    snprintf(bad, sizeof bad, "%s/bad1.gguf", g_dir);
    CHECK(rewrite(good, bad, NULL, "clip.projector_type", "resampler", NULL, NULL) == 0);
    expect_refused(bad, IFL_EUNSUPPORTED, "\"resampler\"");
    CHECK(rewrite(good, bad, NULL, "clip.projector_type", "ml\x80\n", NULL, NULL) == 0);
    expect_refused(bad, IFL_EUNSUPPORTED, "\"ml??\" is not supported");
    CHECK(rewrite(good, bad, "clip.vision.image_mean", NULL, NULL, NULL, NULL) == 0);
    expect_refused(bad, IFL_EFORMAT, "clip.vision.image_mean");
    CHECK(rewrite(good, bad, "clip.vision.attention.layer_norm_epsilon", NULL, NULL, NULL, NULL) ==
          0);
    expect_refused(bad, IFL_EFORMAT, "layer_norm_epsilon");
    CHECK(rewrite(good, bad, NULL, NULL, NULL, "v.blk.2.attn_v.weight", NULL) == 0);
    expect_refused(bad, IFL_EFORMAT, "'v.blk.2.attn_v.weight' is missing");
    CHECK(rewrite(good, bad, NULL, NULL, NULL, "mm.2.weight", NULL) == 0);
    expect_refused(bad, IFL_EFORMAT, "mm.2.weight");
    int64_t ne[2] = {64, 16}; /* one position short */
    CHECK(rewrite(good, bad, NULL, NULL, NULL, "v.position_embd.weight", ne) == 0);
    expect_refused(bad, IFL_EFORMAT, "v.position_embd.weight' has shape");
    int64_t ne2[2] = {64, 63};
    CHECK(rewrite(good, bad, NULL, NULL, NULL, "v.blk.0.attn_q.weight", ne2) == 0);
    expect_refused(bad, IFL_EFORMAT, "v.blk.0.attn_q.weight");
    /* a truncated file: the reader's own sentence */
    FILE *f = fopen(good, "rb");
    fseek(f, 0, SEEK_END);
    long sz = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)sz);
    CHECK(fread(buf, 1, (size_t)sz, f) == (size_t)sz);
    fclose(f);
    f = fopen(bad, "wb");
    fwrite(buf, 1, (size_t)sz - 1000, f);
    fclose(f);
    free(buf);
    expect_refused(bad, IFL_EFORMAT, "gguf");
    /* hyper-parameters out of range */
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "%s/big.gguf", g_dir);
    struct ifl_gguf *g = NULL;
    char err[IFL_ERR_LEN];
    CHECK(ifl_gguf_open(&g, good, err) == 0);
    struct ifl_gguf_writer *w = NULL;
    CHECK(ifl_gguf_writer_create(&w) == 0);
    for (int64_t i = 0; i < ifl_gguf_n_kv(g); i++)
        if (strcmp(ifl_gguf_key(g, i), "clip.vision.image_size"))
            ifl_gguf_writer_copy_kv(w, g, i);
    ifl_gguf_writer_set_u32(w, "clip.vision.image_size", 100000);
    CHECK(ifl_gguf_writer_write(w, cmd, err) == 0);
    ifl_gguf_writer_free(w);
    ifl_gguf_free(g);
    expect_refused(cmd, IFL_EFORMAT, "image_size = 100000");
}

/* A w x h RGB PNG of a pattern, in memory (free *out). */
static size_t png_bytes(int w, int h, int salt, unsigned char **out, unsigned char **rgb)
{
    *rgb = malloc((size_t)w * h * 3);
    for (int i = 0; i < w * h * 3; i++)
        (*rgb)[i] = (unsigned char)(i * 13 + salt * 71 + (i / (3 * w)) * 5);
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    im.width = (png_uint_32)w;
    im.height = (png_uint_32)h;
    im.format = PNG_FORMAT_RGB;
    png_alloc_size_t n = 0;
    png_image_write_to_memory(&im, NULL, &n, 0, *rgb, 0, NULL);
    *out = malloc(n);
    png_image_write_to_memory(&im, *out, &n, 0, *rgb, 0, NULL);
    return n;
}

struct api_thread {
    ifl_vision *v;
    const void *const *imgs;
    const int64_t *sizes;
    const float *want;
    size_t n;
    int same;
};

static void *api_worker(void *arg)
{
    struct api_thread *t = arg;
    float *got = malloc(2 * t->n * sizeof(float));
    t->same = 1;
    for (int k = 0; k < 8; k++) {
        t->same &= ifl_vision_encode(t->v, t->imgs, t->sizes, 2, got, NULL) == 0;
        t->same &= !memcmp(got, t->want, 2 * t->n * sizeof(float));
    }
    free(got);
    return NULL;
}

/* The public calls: PNG bytes and raw pixels give what the internal path
 * gives, bit for bit; a batch equals its images alone; bad input is
 * refused naming the image, leaving out untouched; two threads may call. */
static void test_public_api(void)
{
    char path[512], err[IFL_ERR_LEN] = "";
    if (mk("api", "--type q8_0 --seed 61", path, sizeof path))
        return;
    ifl_vision *v = NULL;
    CHECK_EQ(ifl_vision_load(&v, "/nonexistent/mmproj.gguf", 2, 1, err), IFL_EIO);
    CHECK(v == NULL && strstr(err, "nonexistent") != NULL);
    CHECK_EQ(ifl_vision_load(&v, path, 0, 1, err), IFL_EINVAL);
    CHECK(ifl_vision_load(&v, path, 2, 2, err) == 0);
    if (!v)
        return;
    struct ifl_vision_info info;
    CHECK(ifl_vision_info(v, &info) == 0);
    CHECK_EQ(info.image_size, 32);
    CHECK_EQ(info.n_tokens, 16);
    CHECK_EQ(info.n_embd, 64);
    CHECK_EQ(info.n_run, 2);
    CHECK_EQ(info.max_images, 2);
    const size_t n = (size_t)info.n_tokens * info.n_embd;
    unsigned char *png[2], *rgb[2];
    int64_t sizes[2];
    sizes[0] = (int64_t)png_bytes(32, 32, 1, &png[0], &rgb[0]);
    sizes[1] = (int64_t)png_bytes(45, 20, 2, &png[1], &rgb[1]);
    const void *imgs[2] = {png[0], png[1]};
    float *got = malloc(2 * n * sizeof(float)), *want = malloc(2 * n * sizeof(float));
    CHECK_MSG(ifl_vision_encode(v, imgs, sizes, 2, got, err) == 0, "%s", err);
    /* the internal path */
    struct ifl_clip *c = NULL;
    struct ifl_clip_ctx *x = NULL;
    CHECK(ifl_clip_load(&c, path, err) == 0);
    CHECK(ifl_clip_ctx_create(&x, c, 1, NULL, 1, err) == 0);
    float *px = malloc(sizeof(float) * 3 * 32 * 32);
    const int w[2] = {32, 45}, h[2] = {32, 20};
    for (int i = 0; i < 2; i++) {
        struct ifl_image im = {w[i], h[i], rgb[i]};
        CHECK(ifl_clip_preprocess(c, &im, px, err) == 0);
        CHECK(ifl_clip_encode(x, px, 1, want + i * n, err) == 0);
    }
    CHECK(memcmp(got, want, 2 * n * sizeof(float)) == 0);
    CHECK(ifl_vision_encode_pixels(v, rgb[1], 45, 20, 3, got, err) == 0);
    CHECK(memcmp(got, want + n, n * sizeof(float)) == 0);
    /* bad input */
    memset(got, 0x7f, 2 * n * sizeof(float));
    int64_t bad_sizes[2] = {sizes[0], sizes[1] / 2};
    CHECK_EQ(ifl_vision_encode(v, imgs, bad_sizes, 2, got, err), IFL_EINVAL);
    CHECK_MSG(strstr(err, "image 1") != NULL, "%s", err);
    CHECK(((unsigned char *)got)[0] == 0x7f);
    const char junk[] = "GIF89a not an image";
    const void *jimgs[1] = {junk};
    int64_t jsize = sizeof junk;
    CHECK_EQ(ifl_vision_encode(v, jimgs, &jsize, 1, got, err), IFL_EINVAL);
    CHECK(strstr(err, "image 0") != NULL);
    CHECK_EQ(ifl_vision_encode(v, imgs, sizes, 3, got, err), IFL_EINVAL);
    CHECK_EQ(ifl_vision_encode_pixels(v, rgb[0], 32, 32, 2, got, err), IFL_EINVAL);
    CHECK_EQ(ifl_vision_encode_pixels(v, rgb[0], 0, 32, 3, got, err), IFL_EINVAL);
    /* still serving, and from two threads at once */
    struct api_thread t[2];
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        t[i] = (struct api_thread){v, imgs, sizes, want, n, 0};
        pthread_create(&th[i], NULL, api_worker, &t[i]);
    }
    for (int i = 0; i < 2; i++) {
        pthread_join(th[i], NULL);
        CHECK_MSG(t[i].same, "thread %d got other embeddings", i);
    }
    free(px);
    free(got);
    free(want);
    for (int i = 0; i < 2; i++) {
        free(png[i]);
        free(rgb[i]);
    }
    ifl_clip_ctx_free(x);
    ifl_clip_free(c);
    ifl_vision_free(v);
    ifl_vision_free(NULL);
}

/* The public call's precision reaches the encoder: ifl_vision_load_prec
 * with BF16 encodes as the internal BF16 load does, bit for bit, and F32
 * as ifl_vision_load; the two differ only on a table with BF16 products.
 * A precision that does not exist is refused. */
static void test_public_precision(void)
{
    char path[512], err[IFL_ERR_LEN] = "";
    if (mk("apiprec", "--type f16 --seed 63", path, sizeof path))
        return;
    ifl_vision *v0 = NULL, *v1 = NULL;
    CHECK_EQ(ifl_vision_load_prec(&v1, path, 1, 1, 7, err), IFL_EINVAL);
    CHECK(v1 == NULL && strstr(err, "precision") != NULL);
    CHECK(ifl_vision_load_prec(&v0, path, 1, 2, IFL_VISION_PREC_F32, err) == 0);
    CHECK(ifl_vision_load_prec(&v1, path, 1, 2, IFL_VISION_PREC_BF16, err) == 0);
    struct ifl_clip *c = NULL;
    struct ifl_clip_ctx *x = NULL;
    CHECK(ifl_clip_load_prec(&c, path, IFL_CLIP_PREC_BF16, err) == 0);
    CHECK(c && ifl_clip_ctx_create(&x, c, 1, NULL, 1, err) == 0);
    if (v0 && v1 && x) {
        struct ifl_vision_info info;
        CHECK(ifl_vision_info(v1, &info) == 0);
        const size_t n = (size_t)info.n_tokens * info.n_embd;
        unsigned char *png, *rgb;
        const int64_t size = (int64_t)png_bytes(32, 32, 3, &png, &rgb);
        const void *imgs[1] = {png};
        float *a = malloc(n * 4), *b = malloc(n * 4), *want = malloc(n * 4);
        float *px = malloc(sizeof(float) * 3 * (size_t)info.image_size * info.image_size);
        CHECK(ifl_vision_encode(v0, imgs, &size, 1, a, err) == 0);
        CHECK(ifl_vision_encode(v1, imgs, &size, 1, b, err) == 0);
        struct ifl_image im = {32, 32, rgb};
        CHECK(ifl_clip_preprocess(c, &im, px, err) == 0);
        CHECK(ifl_clip_encode(x, px, 1, want, err) == 0);
        CHECK_MSG(memcmp(b, want, n * 4) == 0, "public BF16 load: not the internal BF16 encoder");
        const int bf = ifl_kernels_best()->act_bf16[IFL_TYPE_BF16];
        CHECK_MSG((memcmp(a, b, n * 4) != 0) == bf, "f32 and bf16 %s on table %s (bf16: %d)",
                  memcmp(a, b, n * 4) ? "differ" : "agree", ifl_kernels_best()->name, bf);
        free(a);
        free(b);
        free(want);
        free(px);
        free(png);
        free(rgb);
    }
    ifl_clip_ctx_free(x);
    ifl_clip_free(c);
    ifl_vision_free(v0);
    ifl_vision_free(v1);
}

#define FW_ROWS 28
#define FW_BLOCK 16

/* Runs rows [0, FW_ROWS) of one sequence through stories260K in steps of
 * chunk rows, row r's input embd[r] when that is not NULL; all logits. */
static int fw_logits(const struct ifl_model *m, const int32_t *tok, const float *const *embd,
                     int chunk, float *out, char *err)
{
    struct ifl_kv_store *kv = NULL;
    struct ifl_fwd *f = NULL;
    int32_t n_blocks = (FW_ROWS + FW_BLOCK - 1) / FW_BLOCK;
    int rc = ifl_kv_store_create(&kv, &m->hp, IFL_TYPE_F16, n_blocks, FW_BLOCK, err);
    struct ifl_fwd_config cfg = {.max_rows = FW_ROWS, .max_ctx = FW_ROWS, .n_threads = 2};
    if (!rc)
        rc = ifl_fwd_create(&f, m, kv, &cfg, err);
    int32_t table[(FW_ROWS + FW_BLOCK - 1) / FW_BLOCK];
    for (int i = 0; i < n_blocks; i++)
        table[i] = i;
    const int32_t *tables[1] = {table};
    int32_t pos[FW_ROWS], seq[FW_ROWS] = {0};
    uint8_t want[FW_ROWS];
    for (int i = 0; i < FW_ROWS; i++) {
        pos[i] = i;
        want[i] = 1;
    }
    for (int done = 0; !rc && done < FW_ROWS;) {
        int rows = chunk < FW_ROWS - done ? chunk : FW_ROWS - done;
        struct ifl_batch b = {
            .n_rows = rows,
            .tokens = tok + done,
            .pos = pos + done,
            .seq = seq + done,
            .logits = want + done,
            .n_seqs = 1,
            .block_tables = tables,
            .n_blocks = &n_blocks,
            .embd = embd ? embd + done : NULL,
        };
        rc = ifl_forward(f, &b, out + (size_t)done * (size_t)m->hp.n_vocab, err);
        done += rows;
    }
    ifl_fwd_free(f);
    ifl_kv_store_free(kv);
    return rc;
}

/* The forward pass's input rows (ifl_batch.embd): a row given its token's
 * own embedding is bitwise that token's row; an image's rows (a BOS, 16
 * rows of an encoded image, then text) give the same logits whole and
 * chunked; another image changes the text's logits. */
static void test_embedding_rows(void)
{
    char path[512], model[512], err[IFL_ERR_LEN] = "";
    if (mk("fw", "--type q8_0 --seed 71 --proj-dim 64", path, sizeof path))
        return;
    snprintf(model, sizeof model, "%s/models/stories260K.gguf", t_shared());
    struct ifl_model *m = NULL;
    ifl_vision *v = NULL;
    CHECK(ifl_model_load(&m, model, err) == 0);
    CHECK(ifl_vision_load(&v, path, 2, 2, err) == 0);
    if (!m || !v) {
        ifl_model_free(m);
        ifl_vision_free(v);
        return;
    }
    const int nv = m->hp.n_vocab, E = m->hp.n_embd;
    CHECK_EQ(E, 64);
    int32_t tok[FW_ROWS];
    for (int i = 0; i < FW_ROWS; i++)
        tok[i] = i == 0 ? 1 : 3 + (i * 37) % 500;
    size_t nl = (size_t)FW_ROWS * nv;
    float *a = malloc(nl * 4), *b = malloc(nl * 4), *c = malloc(nl * 4);
    /* token rows as embedding rows */
    float *rows = malloc(sizeof(float) * FW_ROWS * E);
    const float *ptr[FW_ROWS] = {0};
    for (int i = 0; i < FW_ROWS; i++) {
        const struct ifl_mat *te = &m->tok_embd;
        ifl_kernels_ref()->dequant[te->type](
            (const char *)te->data + (size_t)tok[i] * te->row_bytes, rows + (size_t)i * E, E);
        ptr[i] = i % 3 ? rows + (size_t)i * E : NULL;
    }
    CHECK(fw_logits(m, tok, NULL, FW_ROWS, a, err) == 0);
    CHECK(fw_logits(m, tok, ptr, FW_ROWS, b, err) == 0);
    CHECK(memcmp(a, b, nl * 4) == 0);
    /* an image's rows at positions 1..16 */
    unsigned char *png[2], *rgb[2];
    int64_t sizes[2];
    sizes[0] = (int64_t)png_bytes(40, 30, 5, &png[0], &rgb[0]);
    sizes[1] = (int64_t)png_bytes(40, 30, 6, &png[1], &rgb[1]);
    const void *imgs[2] = {png[0], png[1]};
    float *img = malloc(sizeof(float) * 2 * 16 * E);
    CHECK(ifl_vision_encode(v, imgs, sizes, 2, img, err) == 0);
    for (int i = 0; i < FW_ROWS; i++)
        ptr[i] = i >= 1 && i <= 16 ? img + (size_t)(i - 1) * E : NULL;
    CHECK(fw_logits(m, tok, ptr, FW_ROWS, a, err) == 0);
    CHECK(fw_logits(m, tok, ptr, 5, b, err) == 0);
    CHECK(memcmp(a, b, nl * 4) == 0);
    for (int i = 1; i <= 16; i++)
        ptr[i] = img + (size_t)(16 + i - 1) * E;
    CHECK(fw_logits(m, tok, ptr, FW_ROWS, c, err) == 0);
    CHECK(memcmp(a, c, (size_t)nv * 4) == 0); /* the BOS row sees no image */
    CHECK(memcmp(a + (size_t)20 * nv, c + (size_t)20 * nv, (size_t)nv * 4) != 0);
    free(a);
    free(b);
    free(c);
    free(rows);
    free(img);
    for (int i = 0; i < 2; i++) {
        free(png[i]);
        free(rgb[i]);
    }
    ifl_vision_free(v);
    ifl_model_free(m);
}

int main(void)
{
    const char *build = getenv("BUILD");
    snprintf(g_mk, sizeof g_mk, "%s/tools/mkmodel", build && *build ? build : "build");
    snprintf(g_dir, sizeof g_dir, "/tmp/ifl_clip_XXXXXX");
    if (access(g_mk, X_OK) != 0 || !mkdtemp(g_dir)) {
        fprintf(stderr, "cannot run %s or make a temporary directory\n", g_mk);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    T_RUN(test_load);
    T_RUN(test_f32);
    T_RUN(test_f16);
    T_RUN(test_q8_0);
    T_RUN(test_bf16_precision);
    T_RUN(test_variants);
    T_RUN(test_cls_order);
    T_RUN(test_invariance);
    T_RUN(test_preprocess);
    T_RUN(test_bad_files);
    T_RUN(test_public_api);
    T_RUN(test_public_precision);
    T_RUN(test_embedding_rows);
    fprintf(stderr, "  worst: float max |d| / max(1, std) %.2e; q8_0 max %.3f, mean %.4f of std\n",
            g_worst[0], g_worst[1], g_worst[2]);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", g_dir);
    return t_done();
}
