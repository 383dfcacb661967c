/* GGUF reader and writer: the shared models, writer round trips, hand-made
 * malformed files, and truncated / bit-flipped copies of every shared GGUF
 * (exact-size heap copies, so ASan sees any over-read). */
#include <dirent.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/err.h"
#include "core/rng.h"
#include "kernels/types.h"
#include "model/gguf.h"
#include "t.h"

/* ---- helpers ---- */

struct file {
    uint8_t *p;
    size_t n;
};

static struct file read_file(const char *path)
{
    struct file f = {0};
    FILE *fp = fopen(path, "rb");
    if (!fp)
        return f;
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    f.p = malloc(n > 0 ? (size_t)n : 1);
    if (f.p && fread(f.p, 1, (size_t)n, fp) == (size_t)n)
        f.n = (size_t)n;
    fclose(fp);
    return f;
}

static void path_of(char *dst, size_t cap, const char *rel)
{
    snprintf(dst, cap, "%s/models/%s", t_shared(), rel);
}

/* Every .gguf under dir, recursively, sorted. */
static int list_ggufs(const char *dir, char paths[][512], int max, int n)
{
    struct dirent **ents;
    int k = scandir(dir, &ents, NULL, alphasort);
    if (k < 0)
        return n;
    for (int i = 0; i < k; i++) {
        const char *nm = ents[i]->d_name;
        char p[512];
        snprintf(p, sizeof p, "%s/%s", dir, nm);
        struct stat st;
        if (nm[0] != '.' && stat(p, &st) == 0) {
            size_t l = strlen(nm);
            if (S_ISDIR(st.st_mode))
                n = list_ggufs(p, paths, max, n);
            else if (l > 5 && strcmp(nm + l - 5, ".gguf") == 0 && n < max)
                snprintf(paths[n++], 512, "%s", p);
        }
        free(ents[i]);
    }
    free(ents);
    return n;
}

/* Touches every accessor of a value; returns the number of leaves seen. */
static uint64_t walk_value(const struct ifl_gguf_value *v)
{
    int64_t iv;
    double fv;
    const char *s;
    size_t len;
    uint64_t leaves = 0;
    if (v->type != IFL_GGUF_ARRAY) {
        int rc = ifl_gguf_value_int(v, &iv);
        CHECK(rc == 0 || rc == IFL_EINVAL || rc == IFL_EFORMAT);
        CHECK(ifl_gguf_value_float(v, &fv) == 0 || v->type != IFL_GGUF_FLOAT32);
        if (ifl_gguf_value_str(v, &s, &len) == 0 && len)
            leaves += (uint8_t)s[0] + (uint8_t)s[len - 1] > 1000; /* touch both ends */
        return leaves + 1;
    }
    for (uint64_t i = 0; i < v->n; i++) {
        struct ifl_gguf_value sub;
        int a = ifl_gguf_arr_int(v, i, &iv), b = ifl_gguf_arr_float(v, i, &fv);
        int c = ifl_gguf_arr_str(v, i, &s, &len), d = ifl_gguf_arr_sub(v, i, &sub);
        CHECK((a == 0 || a == IFL_EFORMAT) + (b == 0) + (c == 0) + (d == 0) == 1);
        if (c == 0 && len)
            leaves += (uint8_t)s[0] + (uint8_t)s[len - 1] > 1000;
        if (d == 0)
            leaves += walk_value(&sub);
        else
            leaves++;
    }
    return leaves;
}

static void walk(const struct ifl_gguf *g)
{
    for (int64_t i = 0; i < ifl_gguf_n_kv(g); i++) {
        struct ifl_gguf_value v;
        CHECK_EQ(ifl_gguf_value(g, i, &v), 0);
        walk_value(&v);
        const char *key = ifl_gguf_key(g, i);
        CHECK_EQ(ifl_gguf_find_key(g, key), i);
    }
    for (int64_t i = 0; i < ifl_gguf_n_tensors(g); i++) {
        const struct ifl_gguf_tensor *t = ifl_gguf_tensor(g, i);
        CHECK(ifl_gguf_find_tensor(g, t->name) == t);
        const struct ifl_type_info *ti = ifl_type_info(t->type);
        CHECK(ti != NULL);
        int64_t nel = t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3];
        CHECK_EQ(t->nbytes, (uint64_t)(nel / ti->blck) * ti->size);
        CHECK_EQ(t->offset % ifl_gguf_alignment(g), 0);
        const uint8_t *d = t->data;
        CHECK(d + t->nbytes <= (const uint8_t *)t->data - t->offset - ifl_gguf_data_offset(g) +
                                   ifl_gguf_file_size(g));
    }
}

/* Equal values, element by element (floats bitwise via their doubles). */
static bool same_value(const struct ifl_gguf_value *a, const struct ifl_gguf_value *b)
{
    if (a->type != b->type)
        return false;
    int64_t ia, ib;
    double fa, fb;
    const char *sa, *sb;
    size_t la, lb;
    if (a->type != IFL_GGUF_ARRAY) {
        if (a->type == IFL_GGUF_STRING)
            return ifl_gguf_value_str(a, &sa, &la) == 0 && ifl_gguf_value_str(b, &sb, &lb) == 0 &&
                   la == lb && memcmp(sa, sb, la) == 0;
        if (a->type == IFL_GGUF_FLOAT32 || a->type == IFL_GGUF_FLOAT64)
            return ifl_gguf_value_float(a, &fa) == 0 && ifl_gguf_value_float(b, &fb) == 0 &&
                   memcmp(&fa, &fb, sizeof fa) == 0;
        int ra = ifl_gguf_value_int(a, &ia), rb = ifl_gguf_value_int(b, &ib);
        return ra == rb && (ra || ia == ib);
    }
    if (a->elem_type != b->elem_type || a->n != b->n)
        return false;
    for (uint64_t i = 0; i < a->n; i++) {
        struct ifl_gguf_value xa, xb;
        switch (a->elem_type) {
        case IFL_GGUF_STRING:
            if (ifl_gguf_arr_str(a, i, &sa, &la) || ifl_gguf_arr_str(b, i, &sb, &lb) || la != lb ||
                memcmp(sa, sb, la))
                return false;
            break;
        case IFL_GGUF_ARRAY:
            if (ifl_gguf_arr_sub(a, i, &xa) || ifl_gguf_arr_sub(b, i, &xb) || !same_value(&xa, &xb))
                return false;
            break;
        case IFL_GGUF_FLOAT32:
        case IFL_GGUF_FLOAT64:
            if (ifl_gguf_arr_float(a, i, &fa) || ifl_gguf_arr_float(b, i, &fb) ||
                memcmp(&fa, &fb, sizeof fa))
                return false;
            break;
        default:
            if (ifl_gguf_arr_int(a, i, &ia) || ifl_gguf_arr_int(b, i, &ib) || ia != ib)
                return false;
        }
    }
    return true;
}

static const char *tmp_dir(void)
{
    const char *d = getenv("TMPDIR");
    return d && *d ? d : "/tmp";
}

/* ---- the shared models ---- */

static void test_stories(void)
{
    char path[512], err[IFL_ERR_LEN] = "";
    path_of(path, sizeof path, "stories260K.gguf");
    struct ifl_gguf *g;
    int rc = ifl_gguf_open(&g, path, err);
    CHECK_MSG(rc == 0, "open %s: %s", path, err);
    if (rc)
        return;
    CHECK_EQ(ifl_gguf_version(g), 3);
    CHECK_EQ(ifl_gguf_alignment(g), 32);
    CHECK_STR(ifl_gguf_path(g), path);
    CHECK_EQ(ifl_gguf_n_tensors(g), 48);
    CHECK_EQ(ifl_gguf_n_kv(g), 19);
    const char *s;
    size_t len;
    CHECK_EQ(ifl_gguf_get_str(g, "general.architecture", &s, &len, err), 0);
    CHECK(len == 5 && memcmp(s, "llama", 5) == 0);
    int64_t v;
    CHECK_EQ(ifl_gguf_get_int(g, "llama.embedding_length", &v, err), 0);
    CHECK_EQ(v, 64);
    CHECK_EQ(ifl_gguf_get_int(g, "llama.block_count", &v, err), 0);
    CHECK_EQ(v, 5);
    double f;
    CHECK_EQ(ifl_gguf_get_float(g, "llama.attention.layer_norm_rms_epsilon", &f, err), 0);
    CHECK(f > 0 && f < 1e-3);
    struct ifl_gguf_value arr;
    CHECK_EQ(ifl_gguf_get_arr(g, "tokenizer.ggml.tokens", &arr, err), 0);
    CHECK_EQ(arr.type, IFL_GGUF_ARRAY);
    CHECK_EQ(arr.elem_type, IFL_GGUF_STRING);
    CHECK_EQ(arr.n, 512);
    CHECK_EQ(ifl_gguf_arr_str(&arr, 0, &s, &len), 0);
    CHECK(len == 5 && memcmp(s, "<unk>", 5) == 0);
    CHECK_EQ(ifl_gguf_arr_str(&arr, 1, &s, &len), 0);
    CHECK(len == 3 && memcmp(s, "<s>", 3) == 0);
    CHECK_EQ(ifl_gguf_arr_int(&arr, 0, &v), IFL_EINVAL);
    CHECK_EQ(ifl_gguf_get_arr(g, "tokenizer.ggml.scores", &arr, err), 0);
    CHECK_EQ(arr.elem_type, IFL_GGUF_FLOAT32);
    CHECK_EQ(arr.n, 512);
    CHECK_EQ(ifl_gguf_arr_float(&arr, 5, &f), 0);
    CHECK_EQ(ifl_gguf_arr_str(&arr, 5, &s, &len), IFL_EINVAL);

    /* absent keys leave err alone; wrong types name the key */
    strcpy(err, "untouched");
    CHECK_EQ(ifl_gguf_get_int(g, "no.such.key", &v, err), IFL_ENOTFOUND);
    CHECK_EQ(ifl_gguf_get_str(g, "no.such.key", &s, &len, err), IFL_ENOTFOUND);
    CHECK_EQ(ifl_gguf_get_arr(g, "no.such.key", &arr, err), IFL_ENOTFOUND);
    CHECK_STR(err, "untouched");
    CHECK_EQ(ifl_gguf_find_key(g, "no.such.key"), -1);
    CHECK_EQ(ifl_gguf_get_str(g, "llama.block_count", &s, &len, err), IFL_EFORMAT);
    CHECK(strstr(err, "llama.block_count") != NULL);
    CHECK_EQ(ifl_gguf_get_int(g, "general.architecture", &v, err), IFL_EFORMAT);
    CHECK(strstr(err, "general.architecture") != NULL);
    CHECK_EQ(ifl_gguf_get_float(g, "llama.block_count", &f, err), IFL_EFORMAT);
    int b;
    CHECK_EQ(ifl_gguf_get_bool(g, "llama.block_count", &b, err), IFL_EFORMAT);
    CHECK_EQ(ifl_gguf_get_arr(g, "llama.block_count", &arr, err), IFL_EFORMAT);

    const struct ifl_gguf_tensor *t = ifl_gguf_find_tensor(g, "token_embd.weight");
    CHECK(t != NULL);
    if (t) {
        CHECK_EQ(t->type, IFL_TYPE_F32);
        CHECK_EQ(t->n_dims, 2);
        CHECK_EQ(t->ne[0], 64);
        CHECK_EQ(t->ne[1], 512);
        CHECK_EQ(t->ne[2], 1);
        CHECK_EQ(t->nbytes, 64 * 512 * 4);
        CHECK_EQ(((uintptr_t)t->data) % 32, 0);
    }
    CHECK(ifl_gguf_find_tensor(g, "blk.4.attn_q.weight") != NULL);
    CHECK(ifl_gguf_find_tensor(g, "blk.5.attn_q.weight") == NULL);
    CHECK(ifl_gguf_tensor(g, -1) == NULL);
    CHECK(ifl_gguf_tensor(g, 48) == NULL);
    CHECK(ifl_gguf_key(g, 19) == NULL);
    walk(g);
    ifl_gguf_free(g);
    ifl_gguf_free(NULL);
}

static void test_all_models(void)
{
    static char paths[64][512];
    char dir[512], err[IFL_ERR_LEN];
    snprintf(dir, sizeof dir, "%s/models", t_shared());
    int n = list_ggufs(dir, paths, 64, 0);
    CHECK(n >= 10);
    for (int i = 0; i < n; i++) {
        struct ifl_gguf *g;
        int rc = ifl_gguf_open(&g, paths[i], err);
        CHECK_MSG(rc == 0, "%s: %s", paths[i], err);
        if (rc)
            continue;
        CHECK_EQ(ifl_gguf_version(g), 3);
        const char *s;
        size_t len;
        CHECK_EQ(ifl_gguf_get_str(g, "general.architecture", &s, &len, err), 0);
        struct ifl_gguf_value arr;
        CHECK_EQ(ifl_gguf_get_arr(g, "tokenizer.ggml.tokens", &arr, err), 0);
        CHECK(arr.n >= 256);
        walk(g);
        if (strstr(paths[i], "/vocab/"))
            CHECK_EQ(ifl_gguf_n_tensors(g), 0);
        else
            CHECK(ifl_gguf_find_tensor(g, "token_embd.weight") != NULL);
        if (strstr(paths[i], "llama-bpe")) {
            CHECK_EQ(arr.n, 128256);
            CHECK_EQ(ifl_gguf_arr_str(&arr, 128255, &s, &len), 0);
        }
        ifl_gguf_free(g);
    }
    struct ifl_gguf *g = (void *)1;
    CHECK_EQ(ifl_gguf_open(&g, "/nonexistent/x.gguf", err), IFL_EIO);
    CHECK(g == NULL);
    CHECK(strstr(err, "No such file") != NULL);
    CHECK_EQ(ifl_gguf_open(&g, dir, err), IFL_EIO);
    char small[512];
    path_of(small, sizeof small, "vocab/FORMAT.md");
    CHECK_EQ(ifl_gguf_open(&g, small, err), IFL_EFORMAT);
    CHECK(strstr(err, "magic") != NULL);
}

/* ---- writer ---- */

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
    struct ifl_rng r;
    ifl_rng_seed(&r, seed);
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)ifl_rng_next(&r);
}

static void test_writer_roundtrip(void)
{
    char path[512], err[IFL_ERR_LEN] = "";
    snprintf(path, sizeof path, "%s/ifl_test_gguf_%d.gguf", tmp_dir(), (int)getpid());
    struct ifl_gguf_writer *w;
    CHECK_EQ(ifl_gguf_writer_create(&w), 0);
    CHECK_EQ(ifl_gguf_writer_set_u8(w, "t.u8", 250), 0);
    CHECK_EQ(ifl_gguf_writer_set_i8(w, "t.i8", -100), 0);
    CHECK_EQ(ifl_gguf_writer_set_u16(w, "t.u16", 65000), 0);
    CHECK_EQ(ifl_gguf_writer_set_i16(w, "t.i16", -32000), 0);
    CHECK_EQ(ifl_gguf_writer_set_u32(w, "t.u32", 4000000000u), 0);
    CHECK_EQ(ifl_gguf_writer_set_i32(w, "t.i32", -2000000000), 0);
    CHECK_EQ(ifl_gguf_writer_set_u64(w, "t.u64", 1ull << 62), 0);
    CHECK_EQ(ifl_gguf_writer_set_u64(w, "t.u64big", UINT64_MAX), 0);
    CHECK_EQ(ifl_gguf_writer_set_i64(w, "t.i64", INT64_MIN), 0);
    CHECK_EQ(ifl_gguf_writer_set_f32(w, "t.f32", 0.25f), 0);
    CHECK_EQ(ifl_gguf_writer_set_f64(w, "t.f64", 1e300), 0);
    CHECK_EQ(ifl_gguf_writer_set_bool(w, "t.bool", 7), 0);
    CHECK_EQ(ifl_gguf_writer_set_str(w, "t.str", "hello\0world", 11), 0);
    CHECK_EQ(ifl_gguf_writer_set_str(w, "t.empty", "", 0), 0);
    const char *strs[] = {"a", "", "ccc", "\xe2\x96\x81the"};
    CHECK_EQ(ifl_gguf_writer_set_arr_str(w, "t.strs", strs, NULL, 4), 0);
    float fl[3] = {1.5f, -2.0f, 3e-8f};
    CHECK_EQ(ifl_gguf_writer_set_arr(w, "t.f32s", IFL_GGUF_FLOAT32, fl, 3), 0);
    int32_t none[1] = {0};
    CHECK_EQ(ifl_gguf_writer_set_arr(w, "t.empty_arr", IFL_GGUF_INT32, none, 0), 0);
    uint8_t bools[4] = {1, 0, 1, 1};
    CHECK_EQ(ifl_gguf_writer_set_arr(w, "t.bools", IFL_GGUF_BOOL, bools, 4), 0);
    /* [[1,2,3], [], [[-5]], ["x","yz"]] */
    int32_t row[3] = {1, 2, 3};
    int64_t m5 = -5;
    const char *xs[] = {"x", "yz"};
    CHECK_EQ(ifl_gguf_writer_begin_arr(w, "t.nested"), 0);
    CHECK_EQ(ifl_gguf_writer_set_arr(w, NULL, IFL_GGUF_INT32, row, 3), 0);
    CHECK_EQ(ifl_gguf_writer_set_arr(w, NULL, IFL_GGUF_INT32, row, 0), 0);
    CHECK_EQ(ifl_gguf_writer_begin_arr(w, NULL), 0);
    CHECK_EQ(ifl_gguf_writer_set_arr(w, NULL, IFL_GGUF_INT64, &m5, 1), 0);
    CHECK_EQ(ifl_gguf_writer_end_arr(w), 0);
    CHECK_EQ(ifl_gguf_writer_set_arr_str(w, NULL, xs, NULL, 2), 0);
    CHECK_EQ(ifl_gguf_writer_end_arr(w), 0);

    /* tensors: F32, F16, Q8_0, Q4_K (sizes from the type table) */
    static uint8_t d0[4 * 8 * 3], d1[2 * 16], d2[34 * 2 * 2], d3[144 * 3];
    fill(d0, sizeof d0, 1), fill(d1, sizeof d1, 2), fill(d2, sizeof d2, 3), fill(d3, sizeof d3, 4);
    int64_t ne0[2] = {8, 3}, ne1[1] = {16}, ne2[3] = {64, 1, 2}, ne3[4] = {256, 1, 1, 3};
    CHECK_EQ(ifl_gguf_writer_add_tensor(w, "a.f32", IFL_TYPE_F32, 2, ne0, d0, sizeof d0), 0);
    CHECK_EQ(ifl_gguf_writer_add_tensor(w, "b.f16", IFL_TYPE_F16, 1, ne1, d1, sizeof d1), 0);
    CHECK_EQ(ifl_gguf_writer_add_tensor(w, "c.q8_0", IFL_TYPE_Q8_0, 3, ne2, d2, sizeof d2), 0);
    CHECK_EQ(ifl_gguf_writer_add_tensor(w, "d.q4_k", IFL_TYPE_Q4_K, 4, ne3, d3, sizeof d3), 0);
    int rc = ifl_gguf_writer_write(w, path, err);
    CHECK_MSG(rc == 0, "write: %s", err);
    ifl_gguf_writer_free(w);

    struct ifl_gguf *g;
    rc = ifl_gguf_open(&g, path, err);
    CHECK_MSG(rc == 0, "reopen: %s", err);
    /* every proper prefix of this small file is rejected with a message */
    struct file whole = read_file(path);
    CHECK(whole.n > 600);
    for (size_t cut = 0; cut < whole.n; cut++) {
        uint8_t *copy = malloc(cut ? cut : 1);
        memcpy(copy, whole.p, cut);
        struct ifl_gguf *h = NULL;
        err[0] = 0;
        int trc = ifl_gguf_open_mem(&h, copy, cut, err);
        CHECK_MSG(trc == IFL_EFORMAT && strncmp(err, "gguf: ", 6) == 0, "cut %zu: %d '%s'", cut,
                  trc, err);
        ifl_gguf_free(h);
        free(copy);
    }
    free(whole.p);
    unlink(path);
    if (rc)
        return;
    CHECK_EQ(ifl_gguf_version(g), 3);
    CHECK_EQ(ifl_gguf_n_kv(g), 19);
    CHECK_STR(ifl_gguf_key(g, 0), "t.u8");
    CHECK_STR(ifl_gguf_key(g, 18), "t.nested");
    int64_t v;
    struct {
        const char *k;
        int64_t v;
    } ints[] = {{"t.u8", 250},        {"t.i8", -100},        {"t.u16", 65000},
                {"t.i16", -32000},    {"t.u32", 4000000000}, {"t.i32", -2000000000},
                {"t.u64", 1ll << 62}, {"t.i64", INT64_MIN},  {"t.bool", 1}};
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++) {
        CHECK_EQ(ifl_gguf_get_int(g, ints[i].k, &v, err), 0);
        CHECK_MSG(v == ints[i].v, "%s: %lld", ints[i].k, (long long)v);
    }
    CHECK_EQ(ifl_gguf_get_int(g, "t.u64big", &v, err), IFL_EFORMAT);
    CHECK(strstr(err, "t.u64big") != NULL);
    double f;
    CHECK_EQ(ifl_gguf_get_float(g, "t.f32", &f, err), 0);
    CHECK(f == 0.25);
    CHECK_EQ(ifl_gguf_get_float(g, "t.f64", &f, err), 0);
    CHECK(f == 1e300);
    int b = 0;
    CHECK_EQ(ifl_gguf_get_bool(g, "t.bool", &b, err), 0);
    CHECK_EQ(b, 1);
    const char *s;
    size_t len;
    CHECK_EQ(ifl_gguf_get_str(g, "t.str", &s, &len, err), 0);
    CHECK(len == 11 && memcmp(s, "hello\0world", 11) == 0);
    CHECK_EQ(ifl_gguf_get_str(g, "t.empty", &s, &len, err), 0);
    CHECK_EQ(len, 0);
    struct ifl_gguf_value a, sub, sub2;
    CHECK_EQ(ifl_gguf_get_arr(g, "t.strs", &a, err), 0);
    CHECK_EQ(a.n, 4);
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(ifl_gguf_arr_str(&a, (uint64_t)i, &s, &len), 0);
        CHECK(len == strlen(strs[i]) && memcmp(s, strs[i], len) == 0);
    }
    CHECK_EQ(ifl_gguf_get_arr(g, "t.f32s", &a, err), 0);
    CHECK_EQ(a.elem_type, IFL_GGUF_FLOAT32);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(ifl_gguf_arr_float(&a, (uint64_t)i, &f), 0);
        CHECK(f == fl[i]);
    }
    CHECK_EQ(ifl_gguf_get_arr(g, "t.empty_arr", &a, err), 0);
    CHECK_EQ(a.n, 0);
    CHECK_EQ(a.elem_type, IFL_GGUF_INT32);
    CHECK_EQ(ifl_gguf_get_arr(g, "t.bools", &a, err), 0);
    CHECK_EQ(ifl_gguf_arr_int(&a, 2, &v), 0);
    CHECK_EQ(v, 1);
    CHECK_EQ(ifl_gguf_get_arr(g, "t.nested", &a, err), 0);
    CHECK_EQ(a.elem_type, IFL_GGUF_ARRAY);
    CHECK_EQ(a.n, 4);
    CHECK_EQ(ifl_gguf_arr_sub(&a, 0, &sub), 0);
    CHECK_EQ(sub.elem_type, IFL_GGUF_INT32);
    CHECK_EQ(sub.n, 3);
    CHECK_EQ(ifl_gguf_arr_int(&sub, 2, &v), 0);
    CHECK_EQ(v, 3);
    CHECK_EQ(ifl_gguf_arr_sub(&a, 1, &sub), 0);
    CHECK_EQ(sub.n, 0);
    CHECK_EQ(ifl_gguf_arr_sub(&a, 2, &sub), 0);
    CHECK_EQ(sub.elem_type, IFL_GGUF_ARRAY);
    CHECK_EQ(ifl_gguf_arr_sub(&sub, 0, &sub2), 0);
    CHECK_EQ(sub2.elem_type, IFL_GGUF_INT64);
    CHECK_EQ(ifl_gguf_arr_int(&sub2, 0, &v), 0);
    CHECK_EQ(v, -5);
    CHECK_EQ(ifl_gguf_arr_sub(&a, 3, &sub), 0);
    CHECK_EQ(ifl_gguf_arr_str(&sub, 1, &s, &len), 0);
    CHECK(len == 2 && memcmp(s, "yz", 2) == 0);
    CHECK_EQ(ifl_gguf_arr_int(&a, 0, &v), IFL_EINVAL);

    CHECK_EQ(ifl_gguf_n_tensors(g), 4);
    const struct {
        const char *name;
        uint32_t type;
        int n_dims;
        const int64_t *ne;
        const uint8_t *d;
        size_t n;
    } want[] = {{"a.f32", IFL_TYPE_F32, 2, ne0, d0, sizeof d0},
                {"b.f16", IFL_TYPE_F16, 1, ne1, d1, sizeof d1},
                {"c.q8_0", IFL_TYPE_Q8_0, 3, ne2, d2, sizeof d2},
                {"d.q4_k", IFL_TYPE_Q4_K, 4, ne3, d3, sizeof d3}};
    for (int i = 0; i < 4; i++) {
        const struct ifl_gguf_tensor *t = ifl_gguf_tensor(g, i);
        CHECK_STR(t->name, want[i].name);
        CHECK_EQ(t->type, want[i].type);
        CHECK_EQ(t->n_dims, want[i].n_dims);
        for (int d = 0; d < 4; d++)
            CHECK_EQ(t->ne[d], d < want[i].n_dims ? want[i].ne[d] : 1);
        CHECK_EQ(t->nbytes, want[i].n);
        CHECK(memcmp(t->data, want[i].d, want[i].n) == 0);
        CHECK_EQ(t->offset % 32, 0);
    }
    walk(g);
    ifl_gguf_free(g);
}

static void test_writer_errors(void)
{
    char path[512], err[IFL_ERR_LEN] = "";
    snprintf(path, sizeof path, "%s/ifl_test_gguf_err_%d.gguf", tmp_dir(), (int)getpid());
    struct ifl_gguf_writer *w;
    uint8_t d[64] = {0};
    int64_t ne[1] = {16};

    CHECK_EQ(ifl_gguf_writer_create(&w), 0);
    CHECK_EQ(ifl_gguf_writer_set_u32(w, "k", 1), 0);
    CHECK_EQ(ifl_gguf_writer_set_i32(w, "k", 2), IFL_EINVAL);
    CHECK_EQ(ifl_gguf_writer_set_u32(w, "other", 1), IFL_EINVAL); /* sticky */
    CHECK_EQ(ifl_gguf_writer_write(w, path, err), IFL_EINVAL);
    CHECK(strstr(err, "'k'") != NULL);
    CHECK(access(path, F_OK) != 0);
    ifl_gguf_writer_free(w);

    CHECK_EQ(ifl_gguf_writer_create(&w), 0);
    CHECK_EQ(ifl_gguf_writer_add_tensor(w, "t", IFL_TYPE_F32, 1, ne, d, 60), IFL_EINVAL);
    CHECK_EQ(ifl_gguf_writer_write(w, path, err), IFL_EINVAL);
    CHECK(strstr(err, "'t'") != NULL);
    ifl_gguf_writer_free(w);

    CHECK_EQ(ifl_gguf_writer_create(&w), 0);
    CHECK_EQ(ifl_gguf_writer_add_tensor(w, "t", IFL_TYPE_F32, 1, ne, d, 64), 0);
    CHECK_EQ(ifl_gguf_writer_add_tensor(w, "t", IFL_TYPE_F32, 1, ne, d, 64), IFL_EINVAL);
    ifl_gguf_writer_free(w);

    CHECK_EQ(ifl_gguf_writer_create(&w), 0);
    CHECK_EQ(ifl_gguf_writer_add_tensor(w, "q", IFL_TYPE_Q8_0, 1, ne, d, 34), IFL_EINVAL);
    ifl_gguf_writer_free(w);

    CHECK_EQ(ifl_gguf_writer_create(&w), 0);
    CHECK_EQ(ifl_gguf_writer_add_tensor(w, "t", 99, 1, ne, d, 64), IFL_EINVAL);
    ifl_gguf_writer_free(w);

    CHECK_EQ(ifl_gguf_writer_create(&w), 0);
    CHECK_EQ(ifl_gguf_writer_set_u32(w, "general.alignment", 48), IFL_EINVAL);
    ifl_gguf_writer_free(w);

    /* array of arrays left open; depth limit */
    CHECK_EQ(ifl_gguf_writer_create(&w), 0);
    CHECK_EQ(ifl_gguf_writer_begin_arr(w, "n"), 0);
    CHECK_EQ(ifl_gguf_writer_write(w, path, err), IFL_EINVAL);
    ifl_gguf_writer_free(w);
    CHECK_EQ(ifl_gguf_writer_create(&w), 0);
    CHECK_EQ(ifl_gguf_writer_begin_arr(w, "n"), 0);
    for (int i = 1; i < IFL_GGUF_MAX_NEST; i++)
        CHECK_EQ(ifl_gguf_writer_begin_arr(w, NULL), 0);
    CHECK_EQ(ifl_gguf_writer_begin_arr(w, NULL), IFL_EINVAL);
    ifl_gguf_writer_free(w);

    /* a custom alignment is honoured by writer and reader */
    CHECK_EQ(ifl_gguf_writer_create(&w), 0);
    CHECK_EQ(ifl_gguf_writer_set_u32(w, "general.alignment", 256), 0);
    CHECK_EQ(ifl_gguf_writer_add_tensor(w, "a", IFL_TYPE_F32, 1, ne, d, 64), 0);
    CHECK_EQ(ifl_gguf_writer_add_tensor(w, "b", IFL_TYPE_F32, 1, ne, d, 64), 0);
    CHECK_EQ(ifl_gguf_writer_write(w, path, err), 0);
    ifl_gguf_writer_free(w);
    struct ifl_gguf *g;
    CHECK_EQ(ifl_gguf_open(&g, path, err), 0);
    if (g) {
        CHECK_EQ(ifl_gguf_alignment(g), 256);
        CHECK_EQ(ifl_gguf_tensor(g, 1)->offset, 256);
        CHECK_EQ(ifl_gguf_data_offset(g) % 256, 0);
        ifl_gguf_free(g);
    }
    unlink(path);

    CHECK_EQ(ifl_gguf_writer_create(&w), 0);
    CHECK_EQ(ifl_gguf_writer_write(w, "/nonexistent/dir/x.gguf", err), IFL_EIO);
    CHECK(strstr(err, "No such file") != NULL);
    ifl_gguf_writer_free(w);
    ifl_gguf_writer_free(NULL);
}

/* A fill callback: writes byte i as seed + i; seed 0 fails. */
struct fill_ctx {
    int seed, calls;
};
static int fill_cb(void *ctx, void *dst, size_t nbytes, char *err)
{
    struct fill_ctx *c = ctx;
    c->calls++;
    if (!c->seed)
        return ifl_err(err, IFL_EIO, "test fill: refused");
    for (size_t i = 0; i < nbytes; i++)
        ((uint8_t *)dst)[i] = (uint8_t)(c->seed + i);
    return 0;
}

/* Tensors borrowed (_ref) and made at write time (_fill) give the file
 * that copies of the same bytes give; a fill that fails leaves no file. */
static void test_writer_ref_fill(void)
{
    char a_path[512], b_path[512], err[IFL_ERR_LEN] = "";
    snprintf(a_path, sizeof a_path, "%s/ifl_test_gguf_rf_a_%d.gguf", tmp_dir(), (int)getpid());
    snprintf(b_path, sizeof b_path, "%s/ifl_test_gguf_rf_b_%d.gguf", tmp_dir(), (int)getpid());
    static uint8_t d0[4 * 24], d1[34 * 4], d2[2 * 40];
    fill(d0, sizeof d0, 7), fill(d1, sizeof d1, 8);
    for (size_t i = 0; i < sizeof d2; i++)
        d2[i] = (uint8_t)(5 + i);
    int64_t ne0[1] = {24}, ne1[2] = {64, 2}, ne2[1] = {40};
    struct ifl_gguf_writer *w;
    /* all copied */
    CHECK_EQ(ifl_gguf_writer_create(&w), 0);
    CHECK_EQ(ifl_gguf_writer_set_u32(w, "general.alignment", 64), 0);
    CHECK_EQ(ifl_gguf_writer_add_tensor(w, "x", IFL_TYPE_F32, 1, ne0, d0, sizeof d0), 0);
    CHECK_EQ(ifl_gguf_writer_add_tensor(w, "y", IFL_TYPE_Q8_0, 2, ne1, d1, sizeof d1), 0);
    CHECK_EQ(ifl_gguf_writer_add_tensor(w, "z", IFL_TYPE_F16, 1, ne2, d2, sizeof d2), 0);
    CHECK_EQ(ifl_gguf_writer_write(w, a_path, err), 0);
    ifl_gguf_writer_free(w);
    /* borrowed, copied, made */
    struct fill_ctx fc = {5, 0};
    CHECK_EQ(ifl_gguf_writer_create(&w), 0);
    CHECK_EQ(ifl_gguf_writer_set_u32(w, "general.alignment", 64), 0);
    CHECK_EQ(ifl_gguf_writer_add_tensor_ref(w, "x", IFL_TYPE_F32, 1, ne0, d0, sizeof d0), 0);
    CHECK_EQ(ifl_gguf_writer_add_tensor(w, "y", IFL_TYPE_Q8_0, 2, ne1, d1, sizeof d1), 0);
    CHECK_EQ(ifl_gguf_writer_add_tensor_fill(w, "z", IFL_TYPE_F16, 1, ne2, sizeof d2, fill_cb, &fc),
             0);
    CHECK_EQ(fc.calls, 0); /* made only when written */
    CHECK_EQ(ifl_gguf_writer_write(w, b_path, err), 0);
    CHECK_EQ(fc.calls, 1);
    ifl_gguf_writer_free(w);
    struct file fa = read_file(a_path), fb = read_file(b_path);
    CHECK(fa.n > 0 && fa.n == fb.n && memcmp(fa.p, fb.p, fa.n) == 0);
    free(fa.p);
    free(fb.p);
    unlink(a_path);
    unlink(b_path);

    /* a failing fill: its code and sentence, and no file (nor a temporary) */
    struct fill_ctx bad = {0, 0};
    CHECK_EQ(ifl_gguf_writer_create(&w), 0);
    CHECK_EQ(ifl_gguf_writer_add_tensor_ref(w, "x", IFL_TYPE_F32, 1, ne0, d0, sizeof d0), 0);
    CHECK_EQ(
        ifl_gguf_writer_add_tensor_fill(w, "z", IFL_TYPE_F16, 1, ne2, sizeof d2, fill_cb, &bad), 0);
    err[0] = 0;
    CHECK_EQ(ifl_gguf_writer_write(w, b_path, err), IFL_EIO);
    CHECK(strstr(err, "refused") != NULL);
    CHECK(access(b_path, F_OK) != 0);
    ifl_gguf_writer_free(w);
    char tmpl[600];
    snprintf(tmpl, sizeof tmpl, "%s.tmp.", strrchr(b_path, '/') + 1);
    DIR *dir = opendir(tmp_dir());
    int left = 0;
    for (struct dirent *e; dir && (e = readdir(dir));)
        left += !strncmp(e->d_name, tmpl, strlen(tmpl));
    if (dir)
        closedir(dir);
    CHECK_EQ(left, 0);

    /* the checks of add_tensor apply: a shape that does not fit, no data */
    CHECK_EQ(ifl_gguf_writer_create(&w), 0);
    CHECK_EQ(ifl_gguf_writer_add_tensor_fill(w, "z", IFL_TYPE_F16, 1, ne2, 3, fill_cb, &fc),
             IFL_EINVAL);
    ifl_gguf_writer_free(w);
    CHECK_EQ(ifl_gguf_writer_create(&w), 0);
    CHECK_EQ(ifl_gguf_writer_add_tensor_ref(w, "x", IFL_TYPE_F32, 1, ne0, NULL, sizeof d0),
             IFL_EINVAL);
    ifl_gguf_writer_free(w);
}

/* Copies every kv and tensor of a shared model; the copy reads back equal. */
static void copy_check(const char *rel)
{
    char src_path[512], path[512], err[IFL_ERR_LEN] = "";
    path_of(src_path, sizeof src_path, rel);
    snprintf(path, sizeof path, "%s/ifl_test_gguf_copy_%d.gguf", tmp_dir(), (int)getpid());
    struct ifl_gguf *src, *g;
    int rc = ifl_gguf_open(&src, src_path, err);
    CHECK_MSG(rc == 0, "%s: %s", rel, err);
    if (rc)
        return;
    struct ifl_gguf_writer *w;
    CHECK_EQ(ifl_gguf_writer_create(&w), 0);
    for (int64_t i = 0; i < ifl_gguf_n_kv(src); i++)
        CHECK_EQ(ifl_gguf_writer_copy_kv(w, src, i), 0);
    for (int64_t i = 0; i < ifl_gguf_n_tensors(src); i++) {
        const struct ifl_gguf_tensor *t = ifl_gguf_tensor(src, i);
        CHECK_EQ(
            ifl_gguf_writer_add_tensor(w, t->name, t->type, t->n_dims, t->ne, t->data, t->nbytes),
            0);
    }
    rc = ifl_gguf_writer_write(w, path, err);
    CHECK_MSG(rc == 0, "write: %s", err);
    ifl_gguf_writer_free(w);
    rc = ifl_gguf_open(&g, path, err);
    CHECK_MSG(rc == 0, "reopen: %s", err);
    unlink(path);
    if (rc) {
        ifl_gguf_free(src);
        return;
    }
    CHECK_EQ(ifl_gguf_n_kv(g), ifl_gguf_n_kv(src));
    for (int64_t i = 0; i < ifl_gguf_n_kv(src) && i < ifl_gguf_n_kv(g); i++) {
        CHECK_STR(ifl_gguf_key(g, i), ifl_gguf_key(src, i));
        struct ifl_gguf_value a, b;
        CHECK_EQ(ifl_gguf_value(src, i, &a), 0);
        CHECK_EQ(ifl_gguf_value(g, i, &b), 0);
        CHECK_MSG(same_value(&a, &b), "%s: key %s differs", rel, ifl_gguf_key(src, i));
    }
    CHECK_EQ(ifl_gguf_n_tensors(g), ifl_gguf_n_tensors(src));
    for (int64_t i = 0; i < ifl_gguf_n_tensors(src) && i < ifl_gguf_n_tensors(g); i++) {
        const struct ifl_gguf_tensor *a = ifl_gguf_tensor(src, i), *b = ifl_gguf_tensor(g, i);
        CHECK_STR(a->name, b->name);
        CHECK(a->type == b->type && a->n_dims == b->n_dims && a->nbytes == b->nbytes);
        CHECK(memcmp(a->ne, b->ne, sizeof a->ne) == 0);
        CHECK(memcmp(a->data, b->data, a->nbytes) == 0);
    }
    ifl_gguf_free(g);
    ifl_gguf_free(src);
}

static void test_copy_kv(void)
{
    copy_check("stories260K.gguf");
    copy_check("vocab/ggml-vocab-gpt-2.gguf");
}

/* ---- hand-made malformed files ---- */

struct mk {
    uint8_t p[4096];
    size_t n;
};

static void mk_raw(struct mk *m, const void *p, size_t n)
{
    if (m->n + n <= sizeof m->p)
        memcpy(m->p + m->n, p, n);
    m->n += n;
}
static void mk_u32(struct mk *m, uint32_t v)
{
    mk_raw(m, &v, 4);
}
static void mk_u64(struct mk *m, uint64_t v)
{
    mk_raw(m, &v, 8);
}
static void mk_str(struct mk *m, const char *s)
{
    mk_u64(m, strlen(s));
    mk_raw(m, s, strlen(s));
}
static void mk_header(struct mk *m, uint32_t version, uint64_t n_tensors, uint64_t n_kv)
{
    m->n = 0;
    mk_raw(m, "GGUF", 4);
    mk_u32(m, version);
    mk_u64(m, n_tensors);
    mk_u64(m, n_kv);
}
static void mk_tensor(struct mk *m, const char *name, uint32_t n_dims, const uint64_t *ne,
                      uint32_t type, uint64_t offset)
{
    mk_str(m, name);
    mk_u32(m, n_dims);
    for (uint32_t i = 0; i < n_dims; i++)
        mk_u64(m, ne[i]);
    mk_u32(m, type);
    mk_u64(m, offset);
}
static void mk_pad(struct mk *m, size_t a)
{
    while (m->n % a)
        mk_raw(m, "", 1);
}

/* Opens an exact-size heap copy; expects `want` and, for errors, `needle`
 * in the message. */
static void expect(const struct mk *m, int want, const char *needle, int line)
{
    uint8_t *copy = malloc(m->n ? m->n : 1);
    memcpy(copy, m->p, m->n);
    char err[IFL_ERR_LEN] = "";
    struct ifl_gguf *g = NULL;
    int rc = ifl_gguf_open_mem(&g, copy, m->n, err);
    CHECK_MSG(rc == want, "line %d: rc %d, want %d (%s)", line, rc, want, err);
    if (rc == 0)
        walk(g);
    else {
        CHECK_MSG(g == NULL, "line %d: out set on failure", line);
        CHECK_MSG(strncmp(err, "gguf: ", 6) == 0, "line %d: message '%s'", line, err);
        if (needle)
            CHECK_MSG(strstr(err, needle) != NULL, "line %d: '%s' not in '%s'", line, needle, err);
    }
    ifl_gguf_free(g);
    free(copy);
}
#define EXPECT(m, rc, needle) expect(&(m), rc, needle, __LINE__)

static void test_malformed(void)
{
    static struct mk m;
    uint64_t ne2[2] = {32, 2};

    /* a good baseline: one key, two tensors */
    mk_header(&m, 3, 2, 1);
    mk_str(&m, "general.architecture");
    mk_u32(&m, IFL_GGUF_STRING);
    mk_str(&m, "llama");
    mk_tensor(&m, "a", 2, ne2, IFL_TYPE_F32, 0);
    mk_tensor(&m, "b", 2, ne2, IFL_TYPE_F32, 256);
    mk_pad(&m, 32);
    for (int i = 0; i < 512; i++)
        mk_raw(&m, "\x01", 1);
    EXPECT(m, 0, NULL);
    mk_header(&m, 2, 0, 0);
    EXPECT(m, 0, NULL); /* v2, empty */

    mk_header(&m, 3, 0, 0);
    memcpy(m.p, "GGUG", 4);
    EXPECT(m, IFL_EFORMAT, "magic");
    m.n = 10;
    EXPECT(m, IFL_EFORMAT, "too small");
    mk_header(&m, 1, 0, 0);
    EXPECT(m, IFL_EFORMAT, "unsupported GGUF version 1");
    mk_header(&m, 99, 0, 0);
    EXPECT(m, IFL_EFORMAT, "unsupported GGUF version 99");
    mk_header(&m, 0x03000000, 0, 0);
    EXPECT(m, IFL_EFORMAT, "big-endian");

    mk_header(&m, 3, 0, UINT64_MAX);
    EXPECT(m, IFL_EFORMAT, "n_kv");
    mk_header(&m, 3, 1ull << 60, 0);
    EXPECT(m, IFL_EFORMAT, "n_tensors");
    mk_header(&m, 3, 0, 2); /* claims two keys, holds one */
    mk_str(&m, "k.one");
    mk_u32(&m, IFL_GGUF_UINT64);
    mk_u64(&m, 5);
    mk_raw(&m, "\0\0\0\0\0", 5);
    EXPECT(m, IFL_EFORMAT, "key #1");

    /* key and string lengths */
    mk_header(&m, 3, 0, 1);
    mk_u64(&m, UINT64_MAX - 3);
    mk_raw(&m, "abcdefgh", 8);
    EXPECT(m, IFL_EFORMAT, "runs past end of file");
    mk_header(&m, 3, 0, 1);
    mk_str(&m, "my.key");
    mk_u32(&m, IFL_GGUF_STRING);
    mk_u64(&m, 1ull << 40);
    mk_raw(&m, "abc", 3);
    EXPECT(m, IFL_EFORMAT, "'my.key'");
    mk_header(&m, 3, 0, 1);
    mk_u64(&m, 3);
    mk_raw(&m, "a\0b", 3);
    mk_u32(&m, IFL_GGUF_UINT8);
    mk_raw(&m, "\0", 1);
    EXPECT(m, IFL_EFORMAT, "NUL");
    mk_header(&m, 3, 0, 1);
    mk_str(&m, "my.key");
    mk_u32(&m, 13);
    mk_u64(&m, 0);
    EXPECT(m, IFL_EFORMAT, "unknown value type 13");
    mk_header(&m, 3, 0, 1);
    mk_str(&m, "my.key");
    mk_u32(&m, IFL_GGUF_UINT32);
    mk_raw(&m, "\0\0", 2);
    EXPECT(m, IFL_EFORMAT, "'my.key'");

    /* arrays */
    mk_header(&m, 3, 0, 1);
    mk_str(&m, "tokenizer.ggml.tokens");
    mk_u32(&m, IFL_GGUF_ARRAY);
    mk_u32(&m, IFL_GGUF_STRING);
    mk_u64(&m, 32000);
    mk_str(&m, "a");
    EXPECT(m, IFL_EFORMAT, "'tokenizer.ggml.tokens': array of 32000 string");
    mk_header(&m, 3, 0, 1);
    mk_str(&m, "arr");
    mk_u32(&m, IFL_GGUF_ARRAY);
    mk_u32(&m, IFL_GGUF_UINT64);
    mk_u64(&m, UINT64_MAX / 2);
    mk_u64(&m, 1);
    EXPECT(m, IFL_EFORMAT, "'arr'");
    mk_header(&m, 3, 0, 1);
    mk_str(&m, "arr");
    mk_u32(&m, IFL_GGUF_ARRAY);
    mk_u32(&m, IFL_GGUF_STRING);
    mk_u64(&m, 2);
    mk_str(&m, "a");
    mk_u64(&m, 100);
    mk_raw(&m, "0123456789", 10);
    EXPECT(m, IFL_EFORMAT, "'arr'");
    mk_header(&m, 3, 0, 1);
    mk_str(&m, "arr");
    mk_u32(&m, IFL_GGUF_ARRAY);
    mk_u32(&m, 42);
    mk_u64(&m, 0);
    EXPECT(m, IFL_EFORMAT, "unknown array element type 42");
    /* nesting: the deepest allowed level parses, one more fails */
    for (int depth = IFL_GGUF_MAX_NEST; depth <= IFL_GGUF_MAX_NEST + 1; depth++) {
        mk_header(&m, 3, 0, 1);
        mk_str(&m, "deep");
        mk_u32(&m, IFL_GGUF_ARRAY);
        for (int i = 0; i < depth - 1; i++) {
            mk_u32(&m, IFL_GGUF_ARRAY);
            mk_u64(&m, 1);
        }
        mk_u32(&m, IFL_GGUF_INT8);
        mk_u64(&m, 1);
        mk_raw(&m, "\x7f", 1);
        if (depth == IFL_GGUF_MAX_NEST)
            EXPECT(m, 0, NULL);
        else
            EXPECT(m, IFL_EFORMAT, "'deep': arrays nested deeper");
    }
    /* nesting that claims a lot: every level says 2^40 elements */
    mk_header(&m, 3, 0, 1);
    mk_str(&m, "deep");
    mk_u32(&m, IFL_GGUF_ARRAY);
    for (int i = 0; i < 200; i++) {
        mk_u32(&m, IFL_GGUF_ARRAY);
        mk_u64(&m, 1ull << 40);
    }
    EXPECT(m, IFL_EFORMAT, "'deep'");
    mk_header(&m, 3, 0, 1);
    mk_str(&m, "deep");
    mk_u32(&m, IFL_GGUF_ARRAY);
    for (int i = 0; i < 200; i++) {
        mk_u32(&m, IFL_GGUF_ARRAY);
        mk_u64(&m, 1);
    }
    EXPECT(m, IFL_EFORMAT, "nested deeper");

    /* duplicate key */
    mk_header(&m, 3, 0, 2);
    for (int i = 0; i < 2; i++) {
        mk_str(&m, "dup.key");
        mk_u32(&m, IFL_GGUF_BOOL);
        mk_raw(&m, "\1", 1);
    }
    EXPECT(m, IFL_EFORMAT, "'dup.key' appears twice");

    /* alignment */
    uint32_t aligns[] = {0, 3, 48, 1u << 31};
    for (int i = 0; i < 4; i++) {
        mk_header(&m, 3, 0, 1);
        mk_str(&m, "general.alignment");
        mk_u32(&m, IFL_GGUF_UINT32);
        mk_u32(&m, aligns[i]);
        EXPECT(m, IFL_EFORMAT, "general.alignment");
    }
    mk_header(&m, 3, 0, 1);
    mk_str(&m, "general.alignment");
    mk_u32(&m, IFL_GGUF_STRING);
    mk_str(&m, "32");
    EXPECT(m, IFL_EFORMAT, "general.alignment");

    /* tensors: the baseline with one field changed */
    struct {
        uint32_t n_dims;
        uint64_t ne[5];
        uint32_t type;
        uint64_t off;
        int rc;
        const char *msg;
    } cases[] = {
        {2, {32, 2}, IFL_TYPE_F32, 0, 0, NULL},
        {0, {0}, IFL_TYPE_F32, 0, IFL_EFORMAT, "n_dims 0"},
        {5, {32, 1, 1, 1, 1}, IFL_TYPE_F32, 0, IFL_EFORMAT, "n_dims 5"},
        {2, {32, 0}, IFL_TYPE_F32, 0, IFL_EFORMAT, "dimension 1"},
        {2, {32, UINT64_MAX}, IFL_TYPE_F32, 0, IFL_EFORMAT, "dimension 1"},
        {4, {1ull << 32, 1ull << 32, 1ull << 32, 2}, IFL_TYPE_F32, 0, IFL_EFORMAT, "overflow"},
        {2, {1ull << 31, 1ull << 31}, IFL_TYPE_F32, 0, IFL_EFORMAT, "overflow"},
        {2, {1ull << 20, 1ull << 20}, IFL_TYPE_F32, 0, IFL_EFORMAT, "past end of file"},
        {2, {32, 2}, 4, 0, IFL_EFORMAT, "unknown ggml type 4"},
        {2, {32, 2}, 1000, 0, IFL_EFORMAT, "unknown ggml type 1000"},
        {2, {33, 2}, IFL_TYPE_Q8_0, 0, IFL_EFORMAT, "block size"},
        {2, {32, 2}, IFL_TYPE_F32, 16, IFL_EFORMAT, "not a multiple of the alignment"},
        {2, {32, 2}, IFL_TYPE_F32, 1ull << 62, IFL_EFORMAT, "past end of file"},
        {2, {32, 2}, IFL_TYPE_F32, 288, IFL_EFORMAT, "past end of file"},
        {2, {32, 2}, IFL_TYPE_F32, 224, IFL_EFORMAT, "overlaps"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        mk_header(&m, 3, 2, 0);
        mk_tensor(&m, "blk.0.first", 2, ne2, IFL_TYPE_F32, 256);
        mk_tensor(&m, "blk.3.attn_q.weight", cases[c].n_dims, cases[c].ne, cases[c].type,
                  cases[c].off);
        mk_pad(&m, 32);
        for (int i = 0; i < 512; i++)
            mk_raw(&m, "\0", 1);
        if (cases[c].rc)
            CHECK_MSG(cases[c].msg != NULL, "case %zu", c);
        expect(&m, cases[c].rc, cases[c].rc ? cases[c].msg : NULL, (int)(1000 + c));
        if (cases[c].rc && cases[c].off != 224)
            expect(&m, cases[c].rc, "'blk.3.attn_q.weight'", (int)(2000 + c));
    }
    /* duplicate tensor; empty name; data section start past the end */
    mk_header(&m, 3, 2, 0);
    mk_tensor(&m, "w", 2, ne2, IFL_TYPE_F32, 0);
    mk_tensor(&m, "w", 2, ne2, IFL_TYPE_F32, 256);
    mk_pad(&m, 32);
    for (int i = 0; i < 512; i++)
        mk_raw(&m, "\0", 1);
    EXPECT(m, IFL_EFORMAT, "'w' appears twice");
    mk_header(&m, 3, 1, 0);
    mk_tensor(&m, "", 2, ne2, IFL_TYPE_F32, 0);
    mk_pad(&m, 32);
    for (int i = 0; i < 256; i++)
        mk_raw(&m, "\0", 1);
    EXPECT(m, IFL_EFORMAT, "empty tensor name");
    mk_header(&m, 3, 1, 0);
    mk_tensor(&m, "x", 1, ne2, IFL_TYPE_F32, 0);
    EXPECT(m, IFL_EFORMAT, "'x'");
    /* the example from the style guide: data past end of file */
    mk_header(&m, 3, 1, 0);
    uint64_t ne1[1] = {1024};
    mk_tensor(&m, "blk.3.attn_q.weight", 1, ne1, IFL_TYPE_F32, 0);
    mk_pad(&m, 32);
    size_t data_off = m.n;
    for (int i = 0; i < 4000; i++)
        mk_raw(&m, "\0", 1);
    char want[128];
    snprintf(want, sizeof want,
             "tensor 'blk.3.attn_q.weight': data offset %zu + 4096 past end "
             "of file (%zu bytes)",
             data_off, m.n);
    EXPECT(m, IFL_EFORMAT, want);
    struct ifl_gguf *g = (void *)1;
    CHECK_EQ(ifl_gguf_open_mem(&g, NULL, 0, NULL), IFL_EFORMAT);
    CHECK(g == NULL);
}

/* ---- truncations and bit flips of the shared files ---- */

/* Where the file's needed bytes end: the last tensor byte, or the end of
 * the last kv for files without tensors. */
static size_t needed_end(const struct ifl_gguf *g, const uint8_t *base)
{
    size_t end = 24;
    for (int64_t i = 0; i < ifl_gguf_n_kv(g); i++) {
        const void *p;
        size_t len;
        ifl_gguf_kv_span(g, i, &p, &len);
        size_t e = (size_t)((const uint8_t *)p - base) + len;
        end = e > end ? e : end;
    }
    for (int64_t i = 0; i < ifl_gguf_n_tensors(g); i++) {
        const struct ifl_gguf_tensor *t = ifl_gguf_tensor(g, i);
        size_t e = ifl_gguf_data_offset(g) + t->offset + t->nbytes;
        end = e > end ? e : end;
    }
    return end;
}

static int open_copy(const uint8_t *p, size_t n, char *err)
{
    uint8_t *copy = malloc(n ? n : 1);
    memcpy(copy, p, n);
    struct ifl_gguf *g = NULL;
    err[0] = 0;
    int rc = ifl_gguf_open_mem(&g, copy, n, err);
    if (rc == 0)
        walk(g);
    ifl_gguf_free(g);
    free(copy);
    return rc;
}

static void test_truncations(void)
{
    static char paths[64][512];
    char dir[512], err[IFL_ERR_LEN];
    snprintf(dir, sizeof dir, "%s/models", t_shared());
    int n = list_ggufs(dir, paths, 64, 0);
    long total = 0;
    for (int fi = 0; fi < n; fi++) {
        struct file f = read_file(paths[fi]);
        struct ifl_gguf *g;
        if (ifl_gguf_open_mem(&g, f.p, f.n, err) != 0) {
            CHECK_MSG(0, "%s: %s", paths[fi], err);
            free(f.p);
            continue;
        }
        size_t need = needed_end(g, f.p);
        size_t meta = ifl_gguf_n_tensors(g) ? ifl_gguf_data_offset(g) : need;
        size_t infos = 24; /* tensor infos start where the last kv ends */
        if (ifl_gguf_n_kv(g)) {
            const void *p;
            size_t len;
            ifl_gguf_kv_span(g, ifl_gguf_n_kv(g) - 1, &p, &len);
            infos = (size_t)((const uint8_t *)p - f.p) + len;
        }
        ifl_gguf_free(g);
        /* every byte of the first 600, ~150 points over the metadata, the
         * tensor-info tail byte by byte, a few in the data */
        size_t cuts[1024];
        int nc = 0;
        for (size_t c = 0; c < 600 && c < need; c++)
            cuts[nc++] = c;
        size_t stride = meta / 150 + 1;
        for (size_t c = 600; c < meta && nc < 900; c += stride)
            cuts[nc++] = c;
        size_t istride = (meta - infos) / 100 + 1;
        for (size_t c = infos; c < meta && nc < 900; c += istride)
            cuts[nc++] = c;
        for (size_t c = meta > 64 ? meta - 64 : 0; c < meta && nc < 1000; c++)
            cuts[nc++] = c;
        for (int k = 1; k <= 8 && nc < 1024; k++)
            cuts[nc++] = meta + (need - meta) / 8 * (size_t)k - (k == 8);
        for (int i = 0; i < nc; i++) {
            if (cuts[i] >= need)
                continue;
            int rc = open_copy(f.p, cuts[i], err);
            CHECK_MSG(rc == IFL_EFORMAT && strncmp(err, "gguf: ", 6) == 0 && strlen(err) > 12,
                      "%s cut at %zu: rc %d '%s'", paths[fi], cuts[i], rc, err);
            total++;
        }
        /* trailing padding after the last needed byte is not needed */
        if (need < f.n)
            CHECK_EQ(open_copy(f.p, need, err), 0);
        free(f.p);
    }
    CHECK(total > 5000);
}

static void test_bitflips(void)
{
    static char paths[64][512];
    char dir[512], err[IFL_ERR_LEN];
    snprintf(dir, sizeof dir, "%s/models", t_shared());
    int n = list_ggufs(dir, paths, 64, 0);
    struct ifl_rng r;
    ifl_rng_seed(&r, 20240601);
    long ok = 0, bad = 0;
    for (int fi = 0; fi < n; fi++) {
        struct file f = read_file(paths[fi]);
        struct ifl_gguf *g;
        if (ifl_gguf_open_mem(&g, f.p, f.n, err) != 0) {
            free(f.p);
            continue;
        }
        size_t meta = ifl_gguf_n_tensors(g) ? ifl_gguf_data_offset(g) : needed_end(g, f.p);
        ifl_gguf_free(g);
        /* parsing a big vocabulary costs more: fewer trials there */
        int trials = meta > (1u << 20) ? 300 : 1500;
        for (int t = 0; t < trials; t++) {
            size_t pos[3];
            uint8_t mask[3];
            int nf = 1 + (int)(ifl_rng_next(&r) % 3);
            for (int k = 0; k < nf; k++) {
                uint64_t x = ifl_rng_next(&r);
                size_t span = (x & 3) == 0 ? (meta < 1024 ? meta : 1024) : meta;
                pos[k] = (x >> 8) % span;
                if ((x & 3) == 1 && meta > 2048) /* the tensor infos sit at the end */
                    pos[k] = meta - 1 - (x >> 8) % 2048;
                mask[k] = (uint8_t)(1u << ((x >> 4) & 7));
                f.p[pos[k]] ^= mask[k];
            }
            struct ifl_gguf *h = NULL;
            err[0] = 0;
            int rc = ifl_gguf_open_mem(&h, f.p, f.n, err);
            if (rc == 0) {
                walk(h);
                ok++;
            } else {
                CHECK_MSG((rc == IFL_EFORMAT || rc == IFL_ENOMEM) && strncmp(err, "gguf: ", 6) == 0,
                          "%s: rc %d '%s'", paths[fi], rc, err);
                bad++;
            }
            ifl_gguf_free(h);
            for (int k = nf - 1; k >= 0; k--)
                f.p[pos[k]] ^= mask[k];
        }
        free(f.p);
    }
    fprintf(stderr, "  bit flips: %ld opened, %ld rejected\n", ok, bad);
    CHECK(ok + bad > 10000);
    CHECK(bad > 1000);
}

int main(void)
{
    T_RUN(test_stories);
    T_RUN(test_all_models);
    T_RUN(test_writer_roundtrip);
    T_RUN(test_writer_errors);
    T_RUN(test_writer_ref_fill);
    T_RUN(test_copy_kv);
    T_RUN(test_malformed);
    T_RUN(test_truncations);
    T_RUN(test_bitflips);
    return t_done();
}
