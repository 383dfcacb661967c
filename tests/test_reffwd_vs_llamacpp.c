/*
 * Proves the reference forward pass (tests/reffwd.c) against llama.cpp.
 *
 * For every models/ref/NAME.json: evaluate prompt_ids + greedy_ids with
 * ref_forward and compare with
 *   - NAME.exact-logits.f32, an independent float64 NumPy pass over the same
 *     dequantised weights: max |d| <= 1e-4 for every model;
 *   - NAME.logits.f32, llama.cpp's own logits, within the README's suggested
 *     tolerances for the weight type (llama.cpp rounds activations to the
 *     weights' dot-product type, so quantised models differ by up to ~0.15).
 * and check that where the exact pass has a clear winner the argmax agrees.
 */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "kernels/types.h"
#include "model/gguf.h"
#include "reffwd.h"
#include "t.h"

#define MAX_SEQ 4096

/* ---- a tiny JSON field reader (enough for the reference .json files) ---- */

/* Returns a pointer just past `"key":` (whitespace skipped), or NULL. */
static const char *json_field(const char *js, const char *key)
{
    size_t kl = strlen(key);
    for (const char *p = js; (p = strchr(p, '"')) != NULL; p++) {
        if (strncmp(p + 1, key, kl) || p[1 + kl] != '"')
            continue;
        const char *q = p + 2 + kl;
        while (*q == ' ' || *q == '\t' || *q == '\r' || *q == '\n')
            q++;
        if (*q != ':')
            continue;
        q++;
        while (*q == ' ' || *q == '\t' || *q == '\r' || *q == '\n')
            q++;
        return q;
    }
    return NULL;
}

/* A JSON string without escapes into out (size cap). 0 on success. */
static int json_str(const char *js, const char *key, char *out, size_t cap)
{
    const char *p = json_field(js, key);
    if (!p || *p != '"')
        return -1;
    p++;
    size_t n = 0;
    while (*p && *p != '"' && *p != '\\' && n + 1 < cap)
        out[n++] = *p++;
    if (*p != '"')
        return -1;
    out[n] = 0;
    return 0;
}

static int json_int(const char *js, const char *key, long *out)
{
    const char *p = json_field(js, key);
    if (!p)
        return -1;
    char *end;
    *out = strtol(p, &end, 10);
    return end == p ? -1 : 0;
}

/* An array of integers appended to out[*n..cap). 0 on success. */
static int json_ints(const char *js, const char *key, int32_t *out, int *n, int cap)
{
    const char *p = json_field(js, key);
    if (!p || *p != '[')
        return -1;
    p++;
    for (;;) {
        while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t' || *p == ',')
            p++;
        if (*p == ']')
            return 0;
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || *n >= cap)
            return -1;
        out[(*n)++] = (int32_t)v;
        p = end;
    }
}

static char *read_file(const char *path, size_t *size)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1)) != NULL) {
            if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
                free(buf);
                buf = NULL;
            } else {
                buf[n] = 0;
                if (size)
                    *size = (size_t)n;
            }
        }
    }
    fclose(f);
    return buf;
}

/* ---- tolerances ------------------------------------------------------ */

struct tol {
    const char *cls;
    double max, mean;
};

/* The README's "engine vs NAME.logits.f32" table, by the type of the
 * layers' feed-forward weights (the bulk of the model). */
static struct tol tol_for(const char *gguf_path, int stories)
{
    struct tol t = {"?", 0, 0};
    struct ifl_gguf *g = NULL;
    if (ifl_gguf_open(&g, gguf_path, NULL))
        return t;
    const struct ifl_gguf_tensor *w = ifl_gguf_find_tensor(g, "blk.0.ffn_gate.weight");
    uint32_t type = w ? w->type : 0;
    ifl_gguf_free(g);
    switch (type) {
    case IFL_TYPE_F32:
        return (struct tol){"F32", 1e-4, stories ? 1e-4 : 1e-5};
    case IFL_TYPE_F16:
        return (struct tol){"F16", 1e-2, 1.5e-3};
    case IFL_TYPE_BF16:
        return (struct tol){"BF16", 5e-2, 1e-2};
    case IFL_TYPE_Q8_0:
    case IFL_TYPE_Q4_0:
        return (struct tol){"Q8_0/Q4_0", 0.2, 0.03};
    case IFL_TYPE_Q4_K:
    case IFL_TYPE_Q5_K:
    case IFL_TYPE_Q6_K:
        return (struct tol){"K-quant", 0.3, 0.05};
    default:
        return t;
    }
}

/* ---- one model ------------------------------------------------------- */

static const char *g_ref_dir;
static double g_worst_exact;

static void check_model(const char *json_name)
{
    char path[1024], base[256], model[256];
    snprintf(base, sizeof base, "%.*s", (int)(strlen(json_name) - 5), json_name);
    snprintf(path, sizeof path, "%s/%s", g_ref_dir, json_name);
    char *js = read_file(path, NULL);
    CHECK_MSG(js != NULL, "cannot read %s", path);
    if (!js)
        return;
    static int32_t seq[MAX_SEQ];
    int n = 0;
    long n_vocab = 0;
    int ok = json_str(js, "model", model, sizeof model) == 0 &&
             json_ints(js, "prompt_ids", seq, &n, MAX_SEQ) == 0 &&
             json_ints(js, "greedy_ids", seq, &n, MAX_SEQ) == 0 &&
             json_int(js, "n_vocab", &n_vocab) == 0 && n_vocab > 0;
    free(js);
    CHECK_MSG(ok, "%s: missing model, prompt_ids, greedy_ids or n_vocab", json_name);
    if (!ok)
        return;

    char gguf[1300], exact_path[1300], lcpp_path[1300];
    snprintf(gguf, sizeof gguf, "%s/%s", g_ref_dir, model);
    snprintf(exact_path, sizeof exact_path, "%s/%s.exact-logits.f32", g_ref_dir, base);
    snprintf(lcpp_path, sizeof lcpp_path, "%s/%s.logits.f32", g_ref_dir, base);
    size_t want = (size_t)n * (size_t)n_vocab * sizeof(float), sz_e = 0, sz_l = 0;
    float *exact = (float *)read_file(exact_path, &sz_e);
    float *lcpp = (float *)read_file(lcpp_path, &sz_l);
    float *ours = malloc(want);
    char err[IFL_ERR_LEN] = "";
    int nv = 0;
    CHECK_MSG(exact && sz_e == want, "%s: %s missing or %zu bytes, want %zu", base, exact_path,
              sz_e, want);
    CHECK_MSG(lcpp && sz_l == want, "%s: %s missing or %zu bytes, want %zu", base, lcpp_path, sz_l,
              want);
    int rc = ours ? ref_forward(gguf, seq, n, ours, &nv, err) : IFL_ENOMEM;
    CHECK_MSG(rc == 0, "%s: ref_forward: %s", base, err);
    CHECK_EQ(nv, n_vocab);
    if (rc || !exact || !lcpp || sz_e != want || sz_l != want || nv != n_vocab)
        goto out;

    double max_e = 0, max_l = 0, sum_l = 0;
    int argmax_checked = 0, argmax_bad = 0;
    for (int i = 0; i < n; i++) {
        const float *o = ours + (size_t)i * (size_t)n_vocab;
        const float *e = exact + (size_t)i * (size_t)n_vocab;
        const float *l = lcpp + (size_t)i * (size_t)n_vocab;
        int best_o = 0, best_e = 0;
        for (long v = 0; v < n_vocab; v++) {
            double de = fabs((double)o[v] - (double)e[v]);
            double dl = fabs((double)o[v] - (double)l[v]);
            max_e = de > max_e ? de : max_e;
            max_l = dl > max_l ? dl : max_l;
            sum_l += dl;
            if (o[v] > o[best_o])
                best_o = (int)v;
            if (e[v] > e[best_e])
                best_e = (int)v;
        }
        float second = -INFINITY;
        for (long v = 0; v < n_vocab; v++)
            if (v != best_e && e[v] > second)
                second = e[v];
        if (e[best_e] - second > 2e-4) {
            argmax_checked++;
            argmax_bad += best_o != best_e;
        }
    }
    double mean_l = sum_l / ((double)n * (double)n_vocab);
    struct tol t = tol_for(gguf, strstr(base, "stories") != NULL);
    fprintf(stderr,
            "  %-28s n=%3d  vs exact max %.2e   vs llama.cpp (%s) max %.2e mean %.2e   "
            "argmax %d/%d\n",
            base, n, max_e, t.cls, max_l, mean_l, argmax_checked - argmax_bad, argmax_checked);
    g_worst_exact = max_e > g_worst_exact ? max_e : g_worst_exact;
    CHECK_MSG(max_e <= 1e-4, "%s: max |d| vs exact-logits %.3g > 1e-4", base, max_e);
    CHECK_MSG(t.max > 0, "%s: unknown weight type", base);
    CHECK_MSG(max_l <= t.max, "%s: max |d| vs llama.cpp %.3g > %g", base, max_l, t.max);
    CHECK_MSG(mean_l <= t.mean, "%s: mean |d| vs llama.cpp %.3g > %g", base, mean_l, t.mean);
    CHECK_EQ(argmax_bad, 0);
out:
    free(exact);
    free(lcpp);
    free(ours);
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static void test_all_models(void)
{
    DIR *d = opendir(g_ref_dir);
    CHECK_MSG(d != NULL, "cannot open %s (set IFL_SHARED)", g_ref_dir);
    if (!d)
        return;
    char *names[128];
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL && n < 128) {
        size_t l = strlen(de->d_name);
        if (l > 5 && !strcmp(de->d_name + l - 5, ".json"))
            names[n++] = strdup(de->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], cmp_str);
    CHECK_MSG(n >= 17, "only %d reference models found in %s", n, g_ref_dir);
    for (int i = 0; i < n; i++) {
        /* One pass/fail line per model, like T_RUN. */
        t_cur_failed_ = 0;
        check_model(names[i]);
        if (t_cur_failed_) {
            t_fail_++;
            fprintf(stderr, "FAIL %s\n", names[i]);
        } else {
            t_pass_++;
        }
        free(names[i]);
    }
    t_cur_failed_ = 0;
    fprintf(stderr, "  worst max |d| vs exact-logits over all models: %.2e\n", g_worst_exact);
}

static void test_errors(void)
{
    char err[IFL_ERR_LEN] = "";
    int32_t tok[2] = {1, 99999};
    float lg[2 * 512];
    CHECK(ref_forward("/nonexistent.gguf", tok, 1, lg, NULL, err) != 0);
    CHECK(err[0] != 0);
    char path[1024];
    snprintf(path, sizeof path, "%s/models/stories260K.gguf", t_shared());
    err[0] = 0;
    CHECK(ref_forward(path, tok, 2, lg, NULL, err) == IFL_EINVAL);
    CHECK(strstr(err, "out of range") != NULL);
    int nv = 0;
    CHECK(ref_forward(path, tok, 0, NULL, &nv, err) == 0);
    CHECK_EQ(nv, 512);
}

int main(void)
{
    static char dir[1024];
    snprintf(dir, sizeof dir, "%s/models/ref", t_shared());
    g_ref_dir = dir;
    T_RUN(test_errors);
    T_RUN(test_all_models);
    return t_done();
}
