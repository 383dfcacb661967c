/*
 * Requests with images through the executor (src/runtime/images.c), on the
 * real stories260K text model (n_embd 64) and a synthetic mmproj from
 * `tools/mkmodel --mmproj --proj-dim 64` (16 rows an image):
 *   - an mmproj of another width is refused at creation;
 *   - an image request's logits equal, bit for bit, those of the same
 *     request given the encoder's rows (ifl_vision_encode) as embedding rows;
 *   - its tokens and log-probs are bitwise the same alone and among 15
 *     other requests with and without images;
 *   - the prefix cache: another image behind the same text reuses only the
 *     blocks before the image, the same image reuses all; the encoder's
 *     cache: the same image twice is encoded once;
 *   - a text request is not held up behind a queue of images;
 *   - bad images and bad placements fail the enqueue with a sentence naming
 *     the image, and the executor goes on serving.
 */
#include <math.h>
#include <png.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "inflight.h"
#include "t.h"

static char g_dir[256], g_mk[512], g_model[600], g_mmproj[600];

#define NT 16  /* rows an image gives with mkmodel's default mmproj */
#define PH 300 /* the placeholder token of the tests' prompts */

static int mkproj(const char *name, const char *flags, char *path, size_t cap)
{
    char cmd[2048];
    snprintf(path, cap, "%s/%s.gguf", g_dir, name);
    snprintf(cmd, sizeof cmd, "'%s' -o '%s' --mmproj %s 2>/dev/null", g_mk, path, flags);
    int rc = system(cmd);
    CHECK_MSG(rc == 0, "mkmodel failed (%d): %s", rc, cmd);
    return rc;
}

/* A w x h PNG of a pattern set by salt, in memory (malloc'd). */
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

static ifl_executor *open_ex(const char *mmproj, int32_t max_batch, int32_t per_step,
                             int prefix_caching, char *err)
{
    struct ifl_executor_config c;
    ifl_executor_config_default(&c);
    c.max_batch_size = max_batch;
    c.n_threads = 2;
    c.n_ctx = 256;
    c.kv_cache_tokens = 256 * (int64_t)max_batch;
    c.kv_type = IFL_KV_F32;
    c.mmproj_path = mmproj;
    c.vision_images_per_step = per_step;
    c.enable_prefix_caching = prefix_caching;
    ifl_executor *ex = NULL;
    int rc = ifl_executor_create(&ex, g_model, &c, err);
    CHECK_MSG(rc == 0, "create: %s", err);
    return ex;
}

/* A prompt: BOS, `pre` text tokens, NT placeholders, `post` text tokens. */
static int32_t prompt(int32_t *ids, int pre, int post, int salt)
{
    int32_t n = 0;
    ids[n++] = 1;
    for (int i = 0; i < pre; i++)
        ids[n++] = 3 + (i * 37 + salt) % 400;
    for (int i = 0; i < NT; i++)
        ids[n++] = PH;
    for (int i = 0; i < post; i++)
        ids[n++] = 3 + (i * 53 + 11 + salt) % 400;
    return n;
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
    r->output.return_perf_metrics = 1;
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

static struct ifl_response *run(ifl_executor *ex, const struct ifl_request *q)
{
    ifl_id id = 0;
    char err[512] = "";
    int rc = ifl_enqueue(ex, q, &id, err);
    CHECK_MSG(rc == 0, "enqueue: %s", err);
    return rc ? NULL : await_final(ex, id);
}

static void test_mismatch(void)
{
    char p[600], err[512] = "";
    if (mkproj("w32", "--proj-dim 32 --seed 3", p, sizeof p))
        return;
    struct ifl_executor_config c;
    ifl_executor_config_default(&c);
    c.n_threads = 1;
    c.n_ctx = 128;
    c.mmproj_path = p;
    ifl_executor *ex = NULL;
    CHECK_EQ(ifl_executor_create(&ex, g_model, &c, err), IFL_EINVAL);
    CHECK_MSG(strstr(err, "32") && strstr(err, "n_embd is 64"), "%s", err);
    CHECK(ex == NULL);
    c.mmproj_path = "/nonexistent/mmproj.gguf";
    CHECK_EQ(ifl_executor_create(&ex, g_model, &c, err), IFL_EIO);
    /* a compute precision that does not exist */
    c.vision_precision = 2;
    CHECK_EQ(ifl_executor_create(&ex, g_model, &c, err), IFL_EINVAL);
    CHECK_MSG(strstr(err, "vision_precision") != NULL, "%s", err);
    c.vision_precision = IFL_VISION_PREC_F32;
    /* without one: no vision info */
    c.mmproj_path = NULL;
    CHECK_EQ(ifl_executor_create(&ex, g_model, &c, err), 0);
    struct ifl_vision_info vi;
    CHECK_EQ(ifl_executor_vision_info(ex, &vi), IFL_ENOTFOUND);
    ifl_executor_destroy(ex, 1);
}

/* The image's logits equal those of the encoder's rows given as rows. */
static void test_end_to_end(void)
{
    char err[512] = "";
    ifl_executor *ex = open_ex(g_mmproj, 4, 2, 1, err);
    ifl_vision *v = NULL;
    CHECK_MSG(ifl_vision_load(&v, g_mmproj, 1, 1, err) == 0, "%s", err);
    if (!ex || !v) {
        ifl_executor_destroy(ex, 1);
        ifl_vision_free(v);
        return;
    }
    struct ifl_vision_info vi;
    CHECK_EQ(ifl_executor_vision_info(ex, &vi), 0);
    CHECK_EQ(vi.n_tokens, NT);
    CHECK_EQ(vi.n_embd, 64);
    unsigned char *png;
    int64_t size = (int64_t)png_bytes(45, 30, 1, &png);
    float *rows = malloc(sizeof(float) * NT * 64);
    const void *imgs[1] = {png};
    CHECK(ifl_vision_encode(v, imgs, &size, 1, rows, err) == 0);
    int32_t ids[64];
    int32_t n = prompt(ids, 5, 12, 0);
    struct ifl_request q[2];
    struct ifl_image_input in[2] = {{.data = png, .size = size, .pos = 6},
                                    {.embd = rows, .n_rows = NT, .pos = 6}};
    struct ifl_response *r[2];
    for (int k = 0; k < 2; k++) {
        greedy(&q[k], ids, n, 8);
        q[k].output.return_context_logits = 1;
        q[k].images = &in[k];
        q[k].n_images = 1;
        r[k] = run(ex, &q[k]);
    }
    if (r[0] && r[1]) {
        CHECK_EQ(r[0]->status, 0);
        CHECK_EQ(r[1]->status, 0);
        CHECK(r[0]->context_logits && r[1]->context_logits);
        if (r[0]->context_logits && r[1]->context_logits)
            CHECK(!memcmp(r[0]->context_logits, r[1]->context_logits,
                          sizeof(float) * (size_t)n * (size_t)r[0]->n_vocab));
        CHECK_EQ(r[0]->results[0].n_tokens, 8);
        CHECK(!memcmp(r[0]->results[0].tokens, r[1]->results[0].tokens, 8 * sizeof(int32_t)));
        CHECK(!memcmp(r[0]->results[0].log_probs, r[1]->results[0].log_probs, 8 * sizeof(float)));
    }
    /* the image matters: the placeholders' own embeddings give other logits */
    struct ifl_request t;
    greedy(&t, ids, n, 8);
    t.output.return_context_logits = 1;
    struct ifl_response *rt = run(ex, &t);
    if (rt && r[0] && rt->context_logits && r[0]->context_logits) {
        size_t nv = (size_t)rt->n_vocab;
        CHECK(!memcmp(rt->context_logits, r[0]->context_logits, 6 * nv * sizeof(float)));
        CHECK(memcmp(rt->context_logits + 6 * nv, r[0]->context_logits + 6 * nv, nv * 4) != 0);
    }
    struct ifl_iteration_stats st;
    CHECK_EQ(ifl_executor_wait_idle(ex, 30000), 0);
    CHECK_EQ(ifl_get_iteration_stats(ex, &st), 0);
    CHECK_EQ(st.images_encoded, 1);
    CHECK(st.image_encode_seconds > 0);
    ifl_response_free(rt);
    ifl_response_free(r[0]);
    ifl_response_free(r[1]);
    free(rows);
    free(png);
    ifl_vision_free(v);
    ifl_executor_destroy(ex, 1);
}

/* An image request alone, then among 15 others (text, other images, the
 * same image at another place): the same tokens and log-probs, bitwise. */
static void test_batch_invariance(void)
{
    char err[512] = "";
    ifl_executor *ex = open_ex(g_mmproj, 16, 3, 0, err);
    if (!ex)
        return;
    enum { N = 16, GEN = 12 };
    unsigned char *png[N];
    int64_t size[N];
    int32_t ids[N][96], n[N];
    struct ifl_image_input in[N];
    struct ifl_request q[N];
    for (int i = 0; i < N; i++) {
        size[i] = (int64_t)png_bytes(20 + i * 3, 40 - i, i, &png[i]);
        n[i] = prompt(ids[i], 2 + i % 5, 10 + i, i);
        greedy(&q[i], ids[i], n[i], GEN);
        in[i] = (struct ifl_image_input){.data = png[i], .size = size[i], .pos = 3 + i % 5};
        if (i % 3 != 1) { /* a third are text only */
            q[i].images = &in[i];
            q[i].n_images = 1;
        }
    }
    struct ifl_response *alone = run(ex, &q[0]);
    ifl_id id[N];
    CHECK_EQ(ifl_enqueue_many(ex, q, N, id, err), 0);
    struct ifl_response *r[N];
    for (int i = 0; i < N; i++)
        r[i] = await_final(ex, id[i]);
    if (alone && r[0]) {
        CHECK_EQ(r[0]->results[0].n_tokens, GEN);
        CHECK(!memcmp(alone->results[0].tokens, r[0]->results[0].tokens, GEN * 4));
        CHECK(!memcmp(alone->results[0].log_probs, r[0]->results[0].log_probs, GEN * 4));
    }
    for (int i = 0; i < N; i++) {
        CHECK(r[i] && r[i]->status == 0 && r[i]->results[0].n_tokens == GEN);
        ifl_response_free(r[i]);
        free(png[i]);
    }
    ifl_response_free(alone);
    struct ifl_iteration_stats st;
    CHECK_EQ(ifl_executor_wait_idle(ex, 30000), 0);
    CHECK_EQ(ifl_get_iteration_stats(ex, &st), 0);
    /* image 0 twice (no prefix caching here): once encoded, once found */
    CHECK_EQ(st.images_encoded, 11);
    CHECK_EQ(st.image_cache_hits, 1);
    /* the images of several requests went through the encoder together,
     * at most vision_images_per_step (3) a step */
    static struct ifl_iteration_stats hist[1024];
    int32_t nh = 0, most = 0;
    CHECK_EQ(ifl_get_iteration_stats_since(ex, 0, hist, 1024, &nh), 0);
    for (int32_t k = 1; k < nh; k++) {
        int32_t d = (int32_t)(hist[k].images_encoded - hist[k - 1].images_encoded);
        most = d > most ? d : most;
    }
    CHECK_EQ(most, 3);
    ifl_executor_destroy(ex, 1);
}

/* Prefix cache keys: 20 text tokens (one full block of 16), an image at
 * 20..35, text after. Another image behind the same text reuses the text's
 * block only; the same image reuses every full block. */
static void test_cache_keys(void)
{
    char err[512] = "";
    ifl_executor *ex = open_ex(g_mmproj, 4, 2, 1, err);
    if (!ex)
        return;
    unsigned char *pa, *pb;
    int64_t sa = (int64_t)png_bytes(33, 33, 7, &pa), sb = (int64_t)png_bytes(33, 33, 8, &pb);
    int32_t ids[96];
    int32_t n = prompt(ids, 19, 30, 5); /* BOS + 19: the image at 20 */
    struct ifl_image_input a = {.data = pa, .size = sa, .pos = 20};
    struct ifl_image_input b = {.data = pb, .size = sb, .pos = 20};
    struct ifl_request q;
    int32_t full = (n - 1) / 16; /* blocks a lookup covers */
    CHECK_EQ(full, 4);
    const struct ifl_image_input *order[4] = {&a, &b, &a, &b};
    const int32_t want_reused[4] = {0, 1, full, full};
    struct ifl_response *first[2] = {NULL, NULL};
    for (int k = 0; k < 4; k++) {
        greedy(&q, ids, n, 6);
        q.images = order[k];
        q.n_images = 1;
        struct ifl_response *r = run(ex, &q);
        if (!r)
            continue;
        CHECK_EQ(r->status, 0);
        CHECK_MSG(r->perf.kv_blocks_reused == want_reused[k], "request %d reused %d blocks", k,
                  r->perf.kv_blocks_reused);
        if (k < 2) {
            first[k] = r;
        } else { /* what the reused blocks give is what computing them gave */
            if (first[k - 2])
                CHECK(!memcmp(r->results[0].tokens, first[k - 2]->results[0].tokens, 6 * 4) &&
                      !memcmp(r->results[0].log_probs, first[k - 2]->results[0].log_probs, 6 * 4));
            ifl_response_free(r);
        }
    }
    /* the two images gave different continuations: no shared KV */
    if (first[0] && first[1])
        CHECK(memcmp(first[0]->results[0].log_probs, first[1]->results[0].log_probs, 6 * 4) != 0);
    struct ifl_iteration_stats st;
    CHECK_EQ(ifl_executor_wait_idle(ex, 30000), 0);
    CHECK_EQ(ifl_get_iteration_stats(ex, &st), 0);
    /* the repeats found every image row in the prefix cache: no encoder */
    CHECK_EQ(st.images_encoded, 2);
    CHECK_EQ(st.image_cache_hits, 0);
    /* given rows are keyed by their values: rows equal to image a's
     * encoder output are the same input, other rows are not */
    ifl_response_free(first[0]);
    ifl_response_free(first[1]);
    free(pa);
    free(pb);
    ifl_executor_destroy(ex, 1);
}

/* Given rows: the same rows reuse blocks, different ones do not. */
static void test_rows_keys(void)
{
    char err[512] = "";
    ifl_executor *ex = open_ex(NULL, 4, 0, 1, err);
    if (!ex)
        return;
    float *ra = malloc(sizeof(float) * NT * 64), *rb = malloc(sizeof(float) * NT * 64);
    for (int i = 0; i < NT * 64; i++) {
        ra[i] = sinf((float)i * 0.37f);
        rb[i] = ra[i];
    }
    rb[NT * 64 - 1] += 1e-3f; /* one value of the last row differs */
    int32_t ids[96];
    int32_t n = prompt(ids, 19, 30, 9);
    struct ifl_image_input a = {.embd = ra, .n_rows = NT, .pos = 20};
    struct ifl_image_input b = {.embd = rb, .n_rows = NT, .pos = 20};
    const struct ifl_image_input *order[3] = {&a, &b, &a};
    const int32_t want_reused[3] = {0, 1, 4};
    for (int k = 0; k < 3; k++) {
        struct ifl_request q;
        greedy(&q, ids, n, 4);
        q.images = order[k];
        q.n_images = 1;
        struct ifl_response *r = run(ex, &q);
        if (r)
            CHECK_MSG(r->status == 0 && r->perf.kv_blocks_reused == want_reused[k],
                      "request %d: status %d, reused %d", k, r->status, r->perf.kv_blocks_reused);
        ifl_response_free(r);
    }
    free(ra);
    free(rb);
    ifl_executor_destroy(ex, 1);
}

/* One image a step: a text request that comes after six image requests
 * is done before the last of them has its first token. */
static void test_text_not_held_up(void)
{
    char err[512] = "";
    ifl_executor *ex = open_ex(g_mmproj, 8, 1, 0, err);
    if (!ex)
        return;
    enum { NI = 6 };
    unsigned char *png[NI];
    int32_t ids[NI + 1][96], n[NI + 1];
    struct ifl_image_input in[NI];
    struct ifl_request q[NI + 1];
    for (int i = 0; i <= NI; i++) {
        n[i] = prompt(ids[i], 3, 5, i);
        greedy(&q[i], ids[i], n[i], 4);
        if (i < NI) {
            in[i] = (struct ifl_image_input){
                .data = png[i], .size = (int64_t)png_bytes(30, 30, 40 + i, &png[i]), .pos = 4};
            in[i].data = png[i];
            q[i].images = &in[i];
            q[i].n_images = 1;
        }
    }
    ifl_id id[NI + 1];
    CHECK_EQ(ifl_enqueue_many(ex, q, NI + 1, id, err), 0);
    struct ifl_response *r[NI + 1];
    for (int i = 0; i <= NI; i++)
        r[i] = await_final(ex, id[i]);
    if (r[NI] && r[NI - 1]) {
        CHECK_MSG(r[NI]->perf.last_token_us < r[NI - 1]->perf.first_token_us,
                  "text done at %lld us, last image's first token at %lld us",
                  (long long)r[NI]->perf.last_token_us, (long long)r[NI - 1]->perf.first_token_us);
    }
    for (int i = 0; i <= NI; i++) {
        CHECK(r[i] && r[i]->status == 0);
        ifl_response_free(r[i]);
        if (i < NI)
            free(png[i]);
    }
    ifl_executor_destroy(ex, 1);
}

/* Bad images and placements: IFL_EINVAL naming the image; then a good
 * request is served as before. */
static void test_bad_input(void)
{
    char err[512] = "";
    ifl_executor *ex = open_ex(g_mmproj, 4, 2, 1, err);
    ifl_executor *plain = open_ex(NULL, 2, 0, 1, err);
    if (!ex || !plain) {
        ifl_executor_destroy(ex, 1);
        ifl_executor_destroy(plain, 1);
        return;
    }
    unsigned char *png;
    int64_t size = (int64_t)png_bytes(16, 16, 3, &png);
    unsigned char *cut = malloc((size_t)size);
    memcpy(cut, png, (size_t)size);
    int32_t ids[64];
    int32_t n = prompt(ids, 3, 6, 0);
    float rows[NT * 64];
    for (int i = 0; i < NT * 64; i++)
        rows[i] = 0.01f * (float)(i % 17);
    float bad_rows[NT * 64];
    memcpy(bad_rows, rows, sizeof rows);
    bad_rows[70] = NAN;
    const unsigned char junk[64] = "this is not an image at all, but text that a client sent";
    struct {
        struct ifl_image_input in[2];
        int n;
        const char *want;
    } cases[] = {
        {{{.data = junk, .size = sizeof junk, .pos = 4}}, 1, "images[0]"},
        {{{.data = cut, .size = size / 2, .pos = 4}}, 1, "images[0]"},
        {{{.data = png, .size = size, .pos = 4, .n_rows = 3}}, 1, "n_rows"},
        {{{.data = png, .size = size, .pos = n - 3}}, 1, "past the prompt"},
        {{{.data = png, .size = size, .pos = -1}}, 1, "images[0]"},
        {{{.data = png, .size = size, .pos = 4}, {.embd = rows, .n_rows = 2, .pos = 10}},
         2,
         "overlaps"},
        {{{.data = png, .size = size, .embd = rows, .n_rows = NT, .pos = 4}}, 1, "not both"},
        {{{.size = size, .pos = 4}}, 1, "neither"},
        {{{.embd = bad_rows, .n_rows = NT, .pos = 4}}, 1, "not finite"},
        {{{.data = png, .size = 0, .pos = 4}}, 1, "empty"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof cases[0]; k++) {
        struct ifl_request q;
        greedy(&q, ids, n, 4);
        q.images = cases[k].in;
        q.n_images = cases[k].n;
        ifl_id id = 0;
        err[0] = 0;
        CHECK_MSG(ifl_enqueue(ex, &q, &id, err) == IFL_EINVAL && strstr(err, cases[k].want),
                  "case %zu: '%s'", k, err);
    }
    /* a PNG of 0 x 0 is refused by its header */
    static const unsigned char zero[] = {0x89, 'P', 'N', 'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0, 0, 13,
                                         'I',  'H', 'D', 'R', 0,    0,    0,    0,    0, 0, 0, 0,
                                         8,    2,   0,   0,   0,    0,    0,    0,    0, 0};
    struct ifl_image_input z = {.data = zero, .size = sizeof zero, .pos = 4};
    struct ifl_request q;
    greedy(&q, ids, n, 4);
    q.images = &z;
    q.n_images = 1;
    ifl_id id = 0;
    CHECK_EQ(ifl_enqueue(ex, &q, &id, err), IFL_EINVAL);
    /* an image to an executor without an encoder; rows are fine there */
    struct ifl_image_input good = {.data = png, .size = size, .pos = 4};
    q.images = &good;
    CHECK_EQ(ifl_enqueue(plain, &q, &id, err), IFL_EINVAL);
    CHECK_MSG(strstr(err, "no vision encoder") != NULL, "%s", err);
    struct ifl_image_input given = {.embd = rows, .n_rows = NT, .pos = 4};
    q.images = &given;
    struct ifl_response *r = run(plain, &q);
    CHECK(r && r->status == 0 && r->results[0].n_tokens == 4);
    ifl_response_free(r);
    /* too many images */
    q.n_images = IFL_MAX_IMAGES_PER_REQUEST + 1;
    CHECK_EQ(ifl_enqueue(plain, &q, &id, err), IFL_EINVAL);
    /* the executor goes on: a good image request */
    q.images = &good;
    q.n_images = 1;
    r = run(ex, &q);
    CHECK(r && r->status == 0 && r->results[0].n_tokens == 4);
    ifl_response_free(r);
    struct ifl_iteration_stats st;
    CHECK_EQ(ifl_executor_wait_idle(ex, 30000), 0);
    CHECK_EQ(ifl_get_iteration_stats(ex, &st), 0);
    CHECK_EQ(st.completed_requests, 1);
    free(png);
    free(cut);
    ifl_executor_destroy(ex, 1);
    ifl_executor_destroy(plain, 1);
}

/* Preempted under max_utilization with a tiny pool, an image request is
 * recomputed from its image and gives what it gives alone. */
static void test_preempt(void)
{
    char err[512] = "";
    struct ifl_executor_config c;
    ifl_executor_config_default(&c);
    c.max_batch_size = 4;
    c.n_threads = 2;
    c.n_ctx = 128;
    c.kv_cache_tokens = 160;
    c.kv_type = IFL_KV_F32;
    c.mmproj_path = g_mmproj;
    c.sched_policy = IFL_SCHED_MAX_UTILIZATION;
    c.enable_prefix_caching = 0;
    ifl_executor *ex = NULL;
    CHECK_MSG(ifl_executor_create(&ex, g_model, &c, err) == 0, "%s", err);
    if (!ex)
        return;
    enum { N = 4, GEN = 40 };
    unsigned char *png[N];
    int32_t ids[N][96], n[N];
    struct ifl_image_input in[N];
    struct ifl_request q[N];
    struct ifl_response *alone[N], *r[N];
    for (int i = 0; i < N; i++) {
        in[i] =
            (struct ifl_image_input){.size = (int64_t)png_bytes(25, 25, 60 + i, &png[i]), .pos = 2};
        in[i].data = png[i];
        n[i] = prompt(ids[i], 1, 8, i);
        greedy(&q[i], ids[i], n[i], GEN);
        q[i].images = &in[i];
        q[i].n_images = 1;
        alone[i] = run(ex, &q[i]);
    }
    ifl_id id[N];
    CHECK_EQ(ifl_enqueue_many(ex, q, N, id, err), 0);
    int32_t pre = 0;
    for (int i = 0; i < N; i++) {
        r[i] = await_final(ex, id[i]);
        if (r[i] && alone[i]) {
            pre += r[i]->perf.preemptions;
            CHECK(r[i]->status == 0 && r[i]->results[0].n_tokens == GEN);
            CHECK(!memcmp(alone[i]->results[0].tokens, r[i]->results[0].tokens, GEN * 4));
            CHECK(!memcmp(alone[i]->results[0].log_probs, r[i]->results[0].log_probs, GEN * 4));
        }
        ifl_response_free(r[i]);
        ifl_response_free(alone[i]);
        free(png[i]);
    }
    CHECK_MSG(pre > 0, "no preemption happened (%d)", pre);
    ifl_executor_destroy(ex, 1);
}

int main(void)
{
    const char *build = getenv("BUILD");
    snprintf(g_mk, sizeof g_mk, "%s/tools/mkmodel", build && *build ? build : "build");
    snprintf(g_model, sizeof g_model, "%s/models/stories260K.gguf", t_shared());
    snprintf(g_dir, sizeof g_dir, "/tmp/ifl_mm_XXXXXX");
    if (access(g_mk, X_OK) != 0 || !mkdtemp(g_dir)) {
        fprintf(stderr, "cannot run %s or make a temporary directory\n", g_mk);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    if (mkproj("p64", "--proj-dim 64 --seed 11", g_mmproj, sizeof g_mmproj) == 0) {
        T_RUN(test_mismatch);
        T_RUN(test_end_to_end);
        T_RUN(test_batch_invariance);
        T_RUN(test_cache_keys);
        T_RUN(test_rows_keys);
        T_RUN(test_text_not_held_up);
        T_RUN(test_bad_input);
        T_RUN(test_preempt);
    }
    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", g_dir);
    return t_done();
}
