/*
 * InternVL requests through the executor (src/runtime/images.c): a
 * synthetic qwen2 text model (Qwen's vocabulary, n_embd 64) and a
 * synthetic InternVL mmproj (32-pixel tiles, 4 rows a tile after the pixel
 * shuffle), both from tools/mkmodel:
 *   - an image's rows follow its size: a 70 x 40 image is a 3 x 2 grid and
 *     the thumbnail, 28 rows (ifl_executor_image_rows,
 *     ifl_vision_image_rows); a small one 4;
 *   - the prompt helper wraps each image's placeholders in <img> ...
 *     </img> as llama.cpp's mtmd does, and wants the rows given;
 *   - a tiled image request's logits equal, bit for bit, those of the same
 *     request given ifl_vision_encode's rows, with the tiles encoded over
 *     several steps (2 tiles a step);
 *   - its tokens and log-probs are bitwise the same alone and among other
 *     requests, with and without images;
 *   - a wrong n_rows fails the enqueue naming the right count.
 */
#include <png.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "inflight.h"
#include "t.h"

static char g_dir[256], g_mk[512], g_model[600], g_mmproj[600];

static int sh(const char *cmd)
{
    int rc = system(cmd);
    CHECK_MSG(rc == 0, "failed (%d): %s", rc, cmd);
    return rc;
}

static size_t png_bytes(int w, int h, int salt, unsigned char **out)
{
    unsigned char *rgb = malloc((size_t)w * h * 3);
    for (int i = 0; i < w * h * 3; i++)
        rgb[i] = (unsigned char)(i * 13 + salt * 71 + (i / (3 * w)) * 5);
    png_image im;
    memset(&im, 0, sizeof im);
    im.version = PNG_IMAGE_VERSION;
    im.width = (png_uint_32)w;
    im.height = (png_uint_32)h;
    im.format = PNG_FORMAT_RGB;
    png_alloc_size_t n = 0;
    png_image_write_to_memory(&im, NULL, &n, 0, rgb, 0, NULL);
    *out = malloc(n);
    png_image_write_to_memory(&im, *out, &n, 0, rgb, 0, NULL);
    free(rgb);
    return n;
}

static ifl_executor *open_ex(int32_t max_batch, int32_t per_step, char *err)
{
    struct ifl_executor_config c;
    ifl_executor_config_default(&c);
    c.max_batch_size = max_batch;
    c.n_threads = 2;
    c.n_ctx = 256;
    c.kv_cache_tokens = 256 * (int64_t)max_batch;
    c.kv_type = IFL_KV_F32;
    c.mmproj_path = g_mmproj;
    c.vision_images_per_step = per_step;
    ifl_executor *ex = NULL;
    int rc = ifl_executor_create(&ex, g_model, &c, err);
    CHECK_MSG(rc == 0, "create: %s", err);
    return ex;
}

static void greedy(struct ifl_request *r, const int32_t *ids, int32_t n, int32_t max_tokens)
{
    ifl_request_init(r);
    r->input_ids = ids;
    r->n_input = n;
    r->max_tokens = max_tokens;
    r->sampling.temperature = 0;
    r->sampling.ignore_eos = 1;
    r->output.return_log_probs = 1;
}

static struct ifl_response *await_final(ifl_executor *ex, ifl_id id)
{
    for (;;) {
        struct ifl_response *r = NULL;
        int32_t got = 0;
        if (ifl_await(ex, &id, 1, 60000, &r, 1, &got) != 0 || got != 1) {
            CHECK_MSG(0, "await %llu timed out", (unsigned long long)id);
            return NULL;
        }
        if (r->is_final)
            return r;
        ifl_response_free(r);
    }
}

/* The prompt "Look: <__media__> What is it?" with one image of `rows`. */
static int64_t image_prompt(ifl_executor *ex, int32_t rows, int32_t *ids, int64_t cap, int32_t *pos)
{
    const char *text = "Look: <__media__> What is it?";
    int64_t n = 0;
    char err[512] = "";
    int rc = ifl_executor_tokenize_images(ex, text, (int64_t)strlen(text), NULL, 1, 1, 1, &rows,
                                          ids, cap, &n, pos, err);
    CHECK_MSG(rc == 0, "tokenize: %s", err);
    return rc ? 0 : n;
}

static void test_rows_and_markers(void)
{
    char err[512] = "";
    ifl_executor *ex = open_ex(2, 2, err);
    ifl_vision *v = NULL;
    CHECK_MSG(ifl_vision_load(&v, g_mmproj, 2, 1, err) == 0, "%s", err);
    if (!ex || !v)
        goto out;
    struct ifl_vision_info vi;
    CHECK_EQ(ifl_executor_vision_info(ex, &vi), 0);
    CHECK_EQ(vi.n_tokens, 4);
    unsigned char *big, *small;
    int64_t nb = (int64_t)png_bytes(70, 40, 1, &big), ns = (int64_t)png_bytes(30, 20, 2, &small);
    int32_t rows = 0;
    CHECK_EQ(ifl_executor_image_rows(ex, big, nb, &rows, err), 0);
    CHECK_EQ(rows, 28);
    CHECK_EQ(ifl_executor_image_rows(ex, small, ns, &rows, err), 0);
    CHECK_EQ(rows, 4);
    CHECK_EQ(ifl_vision_image_rows(v, 70, 40, &rows), 0);
    CHECK_EQ(rows, 28);
    CHECK_EQ(ifl_executor_image_rows(ex, "GIF89a", 6, &rows, err), IFL_EINVAL);
    CHECK(strstr(err, "not a PNG or JPEG") != NULL);
    /* the markers: the text's tokens, <img>, the rows, </img>, the rest */
    int32_t ids[128], pos = -1, a[32], b[32];
    int64_t n = image_prompt(ex, 28, ids, 128, &pos), na = 0, nb2 = 0;
    CHECK_EQ(ifl_executor_tokenize(ex, "<img>", 5, 0, 1, a, 32, &na), 0);
    CHECK_EQ(ifl_executor_tokenize(ex, "</img>", 6, 0, 1, b, 32, &nb2), 0);
    CHECK(na >= 1 && nb2 >= 1 && pos > na);
    if (pos > na && n > pos + 28 + nb2) {
        CHECK(!memcmp(ids + pos - na, a, sizeof(int32_t) * (size_t)na));
        CHECK(!memcmp(ids + pos + 28, b, sizeof(int32_t) * (size_t)nb2));
    }
    /* without rows: refused, the rows depend on each image */
    int64_t got = 0;
    CHECK_EQ(ifl_executor_tokenize_images(ex, "x <__media__>", 13, NULL, 1, 1, 1, NULL, ids, 128,
                                          &got, &pos, err),
             IFL_EINVAL);
    CHECK(strstr(err, "give n_rows") != NULL);
    /* a whole image through the public encoder: 7 tiles, 2 a call */
    float *r1 = malloc(sizeof(float) * 28 * 64), *r2 = malloc(sizeof(float) * 28 * 64);
    const void *im[1] = {big};
    CHECK_EQ(ifl_vision_encode(v, im, &nb, 1, r1, err), 0);
    /* as pixels: the same rows (the PNG is lossless) */
    unsigned char *rgb = malloc(70 * 40 * 3);
    for (int i = 0; i < 70 * 40 * 3; i++)
        rgb[i] = (unsigned char)(i * 13 + 71 + (i / (3 * 70)) * 5);
    CHECK_EQ(ifl_vision_encode_pixels(v, rgb, 70, 40, 3, r2, err), 0);
    CHECK(!memcmp(r1, r2, sizeof(float) * 28 * 64));
    free(rgb);
    free(r1);
    free(r2);
    free(big);
    free(small);
out:
    ifl_vision_free(v);
    ifl_executor_destroy(ex, 1);
}

static void test_end_to_end(void)
{
    char err[512] = "";
    ifl_executor *ex = open_ex(4, 2, err);
    ifl_vision *v = NULL;
    CHECK_MSG(ifl_vision_load(&v, g_mmproj, 3, 1, err) == 0, "%s", err);
    if (!ex || !v) {
        ifl_executor_destroy(ex, 1);
        ifl_vision_free(v);
        return;
    }
    unsigned char *png;
    int64_t size = (int64_t)png_bytes(70, 40, 1, &png);
    float *rows = malloc(sizeof(float) * 28 * 64);
    const void *imgs[1] = {png};
    CHECK(ifl_vision_encode(v, imgs, &size, 1, rows, err) == 0);
    int32_t ids[128], pos = 0;
    int32_t n = (int32_t)image_prompt(ex, 28, ids, 128, &pos);
    struct ifl_image_input in[2] = {{.data = png, .size = size, .pos = pos},
                                    {.embd = rows, .n_rows = 28, .pos = pos}};
    struct ifl_request q[2];
    struct ifl_response *r[2] = {0};
    for (int k = 0; k < 2; k++) {
        ifl_id id = 0;
        greedy(&q[k], ids, n, 8);
        q[k].output.return_context_logits = 1;
        q[k].images = &in[k];
        q[k].n_images = 1;
        int rc = ifl_enqueue(ex, &q[k], &id, err);
        CHECK_MSG(rc == 0, "enqueue: %s", err);
        r[k] = rc ? NULL : await_final(ex, id);
    }
    if (r[0] && r[1]) {
        CHECK_EQ(r[0]->status, 0);
        CHECK_EQ(r[1]->status, 0);
        if (r[0]->context_logits && r[1]->context_logits)
            CHECK(!memcmp(r[0]->context_logits, r[1]->context_logits,
                          sizeof(float) * (size_t)n * (size_t)r[0]->n_vocab));
        CHECK(!memcmp(r[0]->results[0].tokens, r[1]->results[0].tokens, 8 * sizeof(int32_t)));
    }
    struct ifl_iteration_stats st;
    CHECK_EQ(ifl_executor_wait_idle(ex, 30000), 0);
    CHECK_EQ(ifl_get_iteration_stats(ex, &st), 0);
    CHECK_EQ(st.images_encoded, 7); /* tiles */
    /* among others: 3 text requests and 2 more tiled images */
    struct ifl_response *alone = r[0];
    unsigned char *other[2];
    int64_t osz[2];
    struct ifl_image_input oin[2];
    struct ifl_request oq[6];
    ifl_id oid[6];
    int32_t tids[3][16];
    for (int k = 0; k < 2; k++) {
        osz[k] = (int64_t)png_bytes(40 + 30 * k, 70, 5 + k, &other[k]);
        int32_t rr = 0;
        CHECK_EQ(ifl_executor_image_rows(ex, other[k], osz[k], &rr, err), 0);
        CHECK(rr > 4 && rr <= 100); /* tiled */
        oin[k] = (struct ifl_image_input){.data = other[k], .size = osz[k], .pos = pos};
    }
    int32_t oids[2][128];
    int32_t on[2];
    for (int k = 0; k < 2; k++) {
        int32_t rr = 0;
        ifl_executor_image_rows(ex, other[k], osz[k], &rr, err);
        on[k] = (int32_t)image_prompt(ex, rr, oids[k], 128, &pos);
    }
    for (int k = 0; k < 6; k++) {
        if (k < 3) {
            for (int i = 0; i < 16; i++)
                tids[k][i] = 100 + (i * 31 + k * 7) % 5000;
            greedy(&oq[k], tids[k], 16, 12);
        } else if (k < 5) {
            greedy(&oq[k], oids[k - 3], on[k - 3], 10);
            oq[k].images = &oin[k - 3];
            oq[k].n_images = 1;
        } else {
            greedy(&oq[k], ids, n, 8);
            oq[k].images = &in[0];
            oq[k].n_images = 1;
        }
        CHECK_EQ(ifl_enqueue(ex, &oq[k], &oid[k], err), 0);
    }
    for (int k = 0; k < 6; k++) {
        struct ifl_response *x = await_final(ex, oid[k]);
        if (x && k == 5 && alone) {
            CHECK_EQ(x->status, 0);
            CHECK(!memcmp(x->results[0].tokens, alone->results[0].tokens, 8 * sizeof(int32_t)));
            CHECK(!memcmp(x->results[0].log_probs, alone->results[0].log_probs, 8 * sizeof(float)));
        }
        ifl_response_free(x);
    }
    /* a wrong row count: refused, naming the right one */
    struct ifl_image_input bad = {.data = png, .size = size, .n_rows = 4, .pos = pos};
    struct ifl_request bq;
    greedy(&bq, ids, n, 4);
    bq.images = &bad;
    bq.n_images = 1;
    ifl_id bid = 0;
    CHECK_EQ(ifl_enqueue(ex, &bq, &bid, err), IFL_EINVAL);
    CHECK_MSG(strstr(err, "gives this image 28 rows") != NULL, "%s", err);
    for (int k = 0; k < 2; k++)
        free(other[k]);
    ifl_response_free(r[0]);
    ifl_response_free(r[1]);
    free(rows);
    free(png);
    ifl_vision_free(v);
    ifl_executor_destroy(ex, 1);
}

int main(void)
{
    const char *build = getenv("BUILD");
    const char *b = build && *build ? build : "build";
    snprintf(g_mk, sizeof g_mk, "%s/tools/mkmodel", b);
    snprintf(g_dir, sizeof g_dir, "/tmp/ifl_mmvl_XXXXXX");
    if (access(g_mk, X_OK) != 0 || !mkdtemp(g_dir)) {
        fprintf(stderr, "cannot run %s or make a temporary directory\n", g_mk);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    snprintf(g_model, sizeof g_model, "%s/qwen2.gguf", g_dir);
    snprintf(g_mmproj, sizeof g_mmproj, "%s/ivl.gguf", g_dir);
    char cmd[2048];
    snprintf(
        cmd, sizeof cmd,
        "'%s' -o '%s' --vocab '%s/models/vocab/ggml-vocab-qwen2.gguf' --arch qwen2 --n-embd 64 "
        "--n-layer 2 --n-head 2 --n-head-kv 1 --n-ff 128 --type f32 --seed 1 2>/dev/null",
        g_mk, g_model, t_shared());
    int ok = sh(cmd) == 0;
    snprintf(cmd, sizeof cmd,
             "'%s' -o '%s' --mmproj --projector internvl --proj-dim 64 --seed 5 2>/dev/null", g_mk,
             g_mmproj);
    ok = ok && sh(cmd) == 0;
    if (ok) {
        T_RUN(test_rows_and_markers);
        T_RUN(test_end_to_end);
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", g_dir);
    return t_done();
}
