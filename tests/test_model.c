/*
 * The model loader and the batched forward pass against llama.cpp's
 * reference outputs in ../shared/models/ref/ (logits of every position and
 * greedy ids), plus the batch promises: a sequence's logits are bitwise the
 * same alone or among other sequences, whole or chunked, on 1 or 2 threads.
 */
#include <dirent.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "kernels/kernels.h"
#include "model/forward.h"
#include "model/model.h"
#include "t.h"

/* The most likely token, the lowest id on a tie (llama.cpp's greedy rule). */
static int32_t argmax(const float *x, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* ---- reference data ---- */

struct ref {
    char name[128];
    char model[512];
    int32_t *seq; /* prompt + greedy */
    int n_seq, n_prompt, n_gen;
    int n_vocab;
    float *logits;   /* llama.cpp [n_seq][n_vocab] */
    float *exact;    /* float64 reference, stored as f32 */
    double *margins; /* [n_gen] */
    int quant_class; /* 0 f32, 1 f16, 2 bf16, 3 q8_0/q4_0, 4 k-quants */
    /* llama.cpp with an F16 KV cache against its own logits file (only
     * tests/data/quant's files say); 0 when absent */
    double kv_f16_max, kv_f16_mean;
};

static int32_t *json_ids(json_t *a, int *n)
{
    *n = (int)json_array_size(a);
    int32_t *v = malloc(sizeof(int32_t) * (size_t)(*n ? *n : 1));
    for (int i = 0; i < *n; i++)
        v[i] = (int32_t)json_integer_value(json_array_get(a, (size_t)i));
    return v;
}

static float *read_f32(const char *path, size_t n)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    float *v = malloc(n * sizeof(float));
    size_t got = fread(v, sizeof(float), n, f);
    fclose(f);
    if (got != n) {
        free(v);
        return NULL;
    }
    return v;
}

/* Reads dir/json_name. The files of tests/data/quant have no "sequence"
 * (it is prompt_ids + greedy_ids), no exact logits (r->exact stays NULL)
 * and no tensor_types (the caller sets the class). */
static int load_ref_in(struct ref *r, const char *dir, const char *json_name)
{
    memset(r, 0, sizeof(*r));
    char path[600];
    snprintf(path, sizeof path, "%s/%s", dir, json_name);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    if (!j)
        return -1;
    snprintf(r->name, sizeof r->name, "%.*s", (int)(strlen(json_name) - 5), json_name);
    snprintf(r->model, sizeof r->model, "%s/%s", dir,
             json_string_value(json_object_get(j, "model")));
    int np, ng;
    int32_t *prompt = json_ids(json_object_get(j, "prompt_ids"), &np);
    json_t *gi = json_object_get(j, "greedy_ids");
    ng = (int)json_array_size(gi);
    if (json_object_get(j, "sequence")) {
        r->seq = json_ids(json_object_get(j, "sequence"), &r->n_seq);
    } else {
        r->n_seq = np + ng;
        r->seq = malloc(sizeof(int32_t) * (size_t)(r->n_seq ? r->n_seq : 1));
        memcpy(r->seq, prompt, sizeof(int32_t) * (size_t)np);
        for (int i = 0; i < ng; i++)
            r->seq[np + i] = (int32_t)json_integer_value(json_array_get(gi, (size_t)i));
    }
    free(prompt);
    r->n_prompt = np;
    r->n_gen = ng;
    r->n_vocab = (int)json_integer_value(json_object_get(j, "n_vocab"));
    json_t *m = json_object_get(j, "greedy_margins");
    r->margins = malloc(sizeof(double) * (ng > 0 ? (size_t)ng : 1));
    for (int i = 0; i < ng; i++)
        r->margins[i] = json_number_value(json_array_get(m, (size_t)i));
    json_t *types = json_object_get(j, "tensor_types");
    r->quant_class = 0;
    if (json_object_get(types, "F16"))
        r->quant_class = 1;
    if (json_object_get(types, "BF16"))
        r->quant_class = 2;
    if (json_object_get(types, "Q8_0") || json_object_get(types, "Q4_0"))
        r->quant_class = 3;
    if (json_object_get(types, "Q4_K") || json_object_get(types, "Q5_K") ||
        json_object_get(types, "Q6_K"))
        r->quant_class = 4;
    size_t n = (size_t)r->n_seq * (size_t)r->n_vocab;
    snprintf(path, sizeof path, "%s/%s", dir, json_string_value(json_object_get(j, "logits_file")));
    r->logits = read_f32(path, n);
    const char *exact = json_string_value(json_object_get(j, "exact_logits_file"));
    if (exact) {
        snprintf(path, sizeof path, "%s/%s", dir, exact);
        r->exact = read_f32(path, n);
    }
    json_t *dv = json_object_get(j, "diff_vs_logits_file");
    r->kv_f16_max = json_number_value(json_object_get(dv, "kv_f16_max"));
    r->kv_f16_mean = json_number_value(json_object_get(dv, "kv_f16_mean"));
    json_decref(j);
    return r->logits && (r->exact || !exact) && r->n_seq == r->n_prompt + r->n_gen ? 0 : -1;
}

static int load_ref(struct ref *r, const char *json_name)
{
    char dir[400];
    snprintf(dir, sizeof dir, "%s/models/ref", t_shared());
    int rc = load_ref_in(r, dir, json_name);
    return rc || r->exact ? rc : -1;
}

static void free_ref(struct ref *r)
{
    free(r->seq);
    free(r->logits);
    free(r->exact);
    free(r->margins);
}

/* ---- a small multi-sequence runner over the forward pass ---- */

#define BS 16
#define MAX_SEQ 4
#define BLOCKS_PER_SEQ 40 /* 640 positions */

struct runner {
    struct ifl_model *m;
    struct ifl_kv_store *kv;
    struct ifl_fwd *f;
    int32_t tables[MAX_SEQ][BLOCKS_PER_SEQ];
    int32_t n_blocks[MAX_SEQ];
    const int32_t *tptr[MAX_SEQ];
};

/* ifl_fwd_create with every step shared between the threads: the test
 * models are small enough that a forward of two threads would run their
 * steps on one alone (forward.c, SOLO_BYTES), and the shared path (a lone
 * row's element-wise phases on every thread, its KV heads split) is what
 * a check on two threads is for. */
static int fwd_create_shared(struct ifl_fwd **f, const struct ifl_model *m, struct ifl_kv_store *kv,
                             const struct ifl_fwd_config *fc, char *err)
{
    setenv("IFL_SOLO_BYTES", "0", 1);
    int rc = ifl_fwd_create(f, m, kv, fc, err);
    unsetenv("IFL_SOLO_BYTES");
    return rc;
}

static int runner_open(struct runner *r, const char *path, enum ifl_type kv_type, int nth,
                       int max_rows, int reverse_blocks)
{
    char err[IFL_ERR_LEN] = "";
    memset(r, 0, sizeof(*r));
    if (ifl_model_load(&r->m, path, err)) {
        fprintf(stderr, "  load %s: %s\n", path, err);
        return -1;
    }
    if (ifl_kv_store_create(&r->kv, &r->m->hp, kv_type, MAX_SEQ * BLOCKS_PER_SEQ, BS, err))
        return -1;
    /* the other layout also takes one KV head per attention pass */
    struct ifl_fwd_config fc = {.max_rows = max_rows,
                                .max_ctx = BS * BLOCKS_PER_SEQ,
                                .n_threads = nth,
                                .attn_score_floats = reverse_blocks ? 1 : 0};
    if (fwd_create_shared(&r->f, r->m, r->kv, &fc, err)) {
        fprintf(stderr, "  fwd: %s\n", err);
        return -1;
    }
    /* sequences get disjoint blocks, scattered so tables are not identity maps */
    for (int s = 0; s < MAX_SEQ; s++) {
        for (int i = 0; i < BLOCKS_PER_SEQ; i++) {
            int32_t b = i * MAX_SEQ + s;
            r->tables[s][i] = reverse_blocks ? MAX_SEQ * BLOCKS_PER_SEQ - 1 - b : b;
        }
        r->n_blocks[s] = BLOCKS_PER_SEQ;
        r->tptr[s] = r->tables[s];
    }
    return 0;
}

static void runner_close(struct runner *r)
{
    ifl_fwd_free(r->f);
    ifl_kv_store_free(r->kv);
    ifl_model_free(r->m);
}

/* Runs rows (tokens[i], pos[i], seq[i]), all wanting logits. */
static int runner_step(struct runner *r, int n, const int32_t *tok, const int32_t *pos,
                       const int32_t *seq, float *logits)
{
    uint8_t want[1024];
    for (int i = 0; i < n; i++)
        want[i] = 1;
    struct ifl_batch b = {.n_rows = n,
                          .tokens = tok,
                          .pos = pos,
                          .seq = seq,
                          .logits = want,
                          .n_seqs = MAX_SEQ,
                          .block_tables = r->tptr,
                          .n_blocks = r->n_blocks};
    char err[IFL_ERR_LEN] = "";
    int rc = ifl_forward(r->f, &b, logits, err);
    if (rc)
        fprintf(stderr, "  forward: %s\n", err);
    return rc;
}

/* Teacher-forced logits of one sequence, in chunks of `chunk` rows. */
static int runner_eval(struct runner *r, const int32_t *tok, int n, int chunk, float *logits)
{
    int32_t pos[1024], seq[1024];
    int nv = r->m->hp.n_vocab;
    for (int done = 0; done < n; done += chunk) {
        int k = n - done < chunk ? n - done : chunk;
        for (int i = 0; i < k; i++) {
            pos[i] = done + i;
            seq[i] = 0;
        }
        if (runner_step(r, k, tok + done, pos, seq, logits + (size_t)done * nv))
            return -1;
    }
    return 0;
}

static void diff_stats(const float *a, const float *b, size_t n, double *mx, double *mean)
{
    double m = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m))
            m = isnan(d) ? INFINITY : d;
        s += d;
    }
    *mx = m;
    *mean = s / (double)n;
}

static int list_refs(char names[][128], int cap)
{
    char dir[400];
    snprintf(dir, sizeof dir, "%s/models/ref", t_shared());
    DIR *d = opendir(dir);
    int n = 0;
    struct dirent *e;
    while (d && (e = readdir(d)) && n < cap) {
        size_t l = strlen(e->d_name);
        if (l > 5 && !strcmp(e->d_name + l - 5, ".json"))
            snprintf(names[n++], 128, "%s", e->d_name);
    }
    if (d)
        closedir(d);
    qsort(names, (size_t)n, 128, (int (*)(const void *, const void *))strcmp);
    return n;
}

/* ---- tests ---- */

/* Greedy decoding (prompt in one step, then one token per step) must give
 * llama.cpp's ids up to the first step whose top-2 margin is within twice
 * our measured distance from llama.cpp's logits, and every step's logits
 * must equal the teacher-forced row bit for bit (chunking invariance). */
static void check_greedy(struct runner *run, const struct ref *r, const float *tf, double dist)
{
    int nv = r->n_vocab;
    double noise = 2 * dist > 1e-5 ? 2 * dist : 1e-5;
    int comparable = 0;
    while (comparable < r->n_gen && r->margins[comparable] >= noise)
        comparable++;
    float *last = malloc(sizeof(float) * (size_t)r->n_prompt * nv);
    int32_t pos[512], seq[512] = {0};
    for (int k = 0; k < r->n_prompt; k++)
        pos[k] = k;
    CHECK(runner_step(run, r->n_prompt, r->seq, pos, seq, last) == 0);
    memmove(last, last + (size_t)(r->n_prompt - 1) * nv, sizeof(float) * nv);
    int checked = 0;
    for (int g = 0; g < r->n_gen; g++) {
        int32_t want = r->seq[r->n_prompt + g];
        int same = !memcmp(last, tf + (size_t)(r->n_prompt - 1 + g) * nv, sizeof(float) * nv);
        CHECK_MSG(same, "%s: step %d logits differ from the teacher-forced row", r->name, g);
        int32_t tok = argmax(last, nv);
        if (g < comparable) {
            CHECK_MSG(tok == want, "%s: greedy step %d: got %d, llama.cpp %d", r->name, g, tok,
                      want);
            checked += tok == want;
        }
        if (tok != want || !same)
            break;
        int32_t p = r->n_prompt + g, s0 = 0;
        if (runner_step(run, 1, &tok, &p, &s0, last))
            break;
    }
    fprintf(stderr, "  %-28s greedy ids equal for %d of %d steps above the noise (%d in all)\n",
            r->name, checked, comparable, r->n_gen);
    if (!strncmp(r->name, "stories260K", 11))
        CHECK_MSG(comparable == r->n_gen, "%s: every greedy id should be comparable", r->name);
    free(last);
}

static void test_ref_models(void)
{
    char names[64][128];
    int n = list_refs(names, 64);
    CHECK_MSG(n >= 15, "expected the reference models in %s/models/ref, found %d", t_shared(), n);
    /* max / mean tolerances against llama.cpp by weight class (README's table) */
    static const double tol_max[] = {1e-4, 1e-2, 5e-2, 0.2, 0.3};
    static const double tol_mean[] = {1e-4, 1.5e-3, 1e-2, 0.03, 0.05};
    for (int i = 0; i < n; i++) {
        struct ref r;
        if (load_ref(&r, names[i])) {
            CHECK_MSG(0, "cannot read reference %s", names[i]);
            free_ref(&r);
            continue;
        }
        struct runner run;
        if (runner_open(&run, r.model, IFL_TYPE_F32, 2, 512, 0)) {
            CHECK_MSG(0, "cannot open %s", r.model);
            free_ref(&r);
            continue;
        }
        size_t nl = (size_t)r.n_seq * (size_t)r.n_vocab;
        float *out = malloc(nl * sizeof(float));
        CHECK(runner_eval(&run, r.seq, r.n_seq, 512, out) == 0);
        double mx, mean, emx, emean;
        diff_stats(out, r.logits, nl, &mx, &mean);
        diff_stats(out, r.exact, nl, &emx, &emean);
        fprintf(stderr, "  %-28s vs llama.cpp max %.2e mean %.2e | vs f64 max %.2e mean %.2e\n",
                r.name, mx, mean, emx, emean);
        CHECK_MSG(mx <= tol_max[r.quant_class] && mean <= tol_mean[r.quant_class],
                  "%s: logits differ from llama.cpp by max %g mean %g", r.name, mx, mean);
        /* activations stay f32 (BF16 unless the kernels round them to
         * BF16, kernels.h act_bf16): the sharp test */
        if (r.quant_class < 2 ||
            (r.quant_class == 2 && !ifl_kernels_best()->act_bf16[IFL_TYPE_BF16]))
            CHECK_MSG(emx <= 1e-4, "%s: logits differ from the f64 reference by %g", r.name, emx);
        check_greedy(&run, &r, out, mx);
        free(out);
        runner_close(&run);
        free_ref(&r);
    }
}

/* The newer weight types, each a --pure llama-quantize of llama-f32 kept in
 * tests/data/quant with llama.cpp's logits (README there). Tolerances as
 * ../shared/models/ref/README.md derives them: the class's figure (Q8_0
 * activations for Q5_0, Q5_1, IQ4_NL and MXFP4; Q8_K for the rest), or twice
 * llama.cpp's own distance with an F16 KV cache when that is larger. */
static const struct {
    const char *name;
    int quant_class;
} quant_refs[] = {
    {"llama-q5_0", 3}, {"llama-q5_1", 3}, {"llama-iq4_nl", 3}, {"llama-iq4_xs", 4},
    {"llama-q3_k", 4}, {"llama-q2_k", 4}, {"llama-mxfp4", 3},
};

static void test_quant_refs(void)
{
    static const double tol_max[] = {1e-4, 1e-2, 5e-2, 0.2, 0.3};
    static const double tol_mean[] = {1e-4, 1.5e-3, 1e-2, 0.03, 0.05};
    for (size_t i = 0; i < sizeof quant_refs / sizeof *quant_refs; i++) {
        char json[160];
        snprintf(json, sizeof json, "%s.json", quant_refs[i].name);
        struct ref r;
        if (load_ref_in(&r, t_quant_data(), json)) {
            CHECK_MSG(0, "cannot read reference %s/%s", t_quant_data(), json);
            free_ref(&r);
            continue;
        }
        r.quant_class = quant_refs[i].quant_class;
        double tmax = tol_max[r.quant_class], tmean = tol_mean[r.quant_class];
        tmax = 2 * r.kv_f16_max > tmax ? 2 * r.kv_f16_max : tmax;
        tmean = 2 * r.kv_f16_mean > tmean ? 2 * r.kv_f16_mean : tmean;
        struct runner run;
        if (runner_open(&run, r.model, IFL_TYPE_F32, 2, 512, 0)) {
            CHECK_MSG(0, "cannot open %s", r.model);
            free_ref(&r);
            continue;
        }
        size_t nl = (size_t)r.n_seq * (size_t)r.n_vocab;
        float *out = malloc(nl * sizeof(float));
        CHECK(runner_eval(&run, r.seq, r.n_seq, 512, out) == 0);
        double mx, mean;
        diff_stats(out, r.logits, nl, &mx, &mean);
        fprintf(stderr, "  %-28s vs llama.cpp max %.2e mean %.2e (tolerance %.2g / %.2g)\n", r.name,
                mx, mean, tmax, tmean);
        CHECK_MSG(mx <= tmax && mean <= tmean, "%s: logits differ from llama.cpp by max %g mean %g",
                  r.name, mx, mean);
        check_greedy(&run, &r, out, mx);
        /* past the first near-tie too: every teacher-forced row whose
         * llama.cpp margin is clear of twice our distance picks its token */
        int clear = 0, agree = 0;
        for (int g = 0; g < r.n_gen; g++) {
            if (r.margins[g] < 2 * mx)
                continue;
            clear++;
            int32_t tok = argmax(out + (size_t)(r.n_prompt - 1 + g) * r.n_vocab, r.n_vocab);
            agree += tok == r.seq[r.n_prompt + g];
        }
        fprintf(stderr, "  %-28s teacher-forced argmax equal at %d of %d clear steps\n", r.name,
                agree, clear);
        CHECK_MSG(agree == clear && clear >= r.n_gen / 2,
                  "%s: teacher-forced argmax equal at %d of %d clear steps", r.name, agree, clear);
        free(out);
        runner_close(&run);
        free_ref(&r);
    }
}

/* Logits of three sequences computed alone (whole prompt, then decode steps)
 * must equal, bit for bit, the same sequences computed together with the
 * prompts chunked and interleaved with the others' decode rows; and a lone
 * decode row on two threads, the same row on one. */
static void check_invariance(const char *model, enum ifl_type kv_type)
{
    static const int32_t prompts[3][20] = {
        {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 352, 414},
        {1, 260, 300, 310, 320, 330, 340},
        {1,   403, 407, 261, 378, 100, 101, 102, 103, 104,
         105, 106, 107, 108, 109, 110, 111, 112, 113, 114}};
    static const int plen[3] = {12, 7, 20};
    static const int32_t gen[3][4] = {{5, 6, 7, 8}, {9, 10, 11, 12}, {13, 14, 15, 16}};
    struct runner a, b;
    if (runner_open(&a, model, kv_type, 1, 64, 0) || runner_open(&b, model, kv_type, 2, 64, 1)) {
        CHECK_MSG(0, "cannot open %s", model);
        return;
    }
    int nv = a.m->hp.n_vocab;
    /* alone: logits of the last prompt row and of each decode row */
    float *alone = malloc(sizeof(float) * (size_t)nv * 3 * 5);
    float *tmp = malloc(sizeof(float) * (size_t)nv * 64);
    for (int s = 0; s < 3; s++) {
        int32_t pos[32], seq[32];
        for (int k = 0; k < plen[s]; k++) {
            pos[k] = k;
            seq[k] = s;
        }
        runner_step(&a, plen[s], prompts[s], pos, seq, tmp);
        memcpy(alone + (size_t)(s * 5) * nv, tmp + (size_t)(plen[s] - 1) * nv, sizeof(float) * nv);
        for (int g = 0; g < 4; g++) {
            int32_t p = plen[s] + g;
            runner_step(&a, 1, &gen[s][g], &p, &s, alone + (size_t)(s * 5 + 1 + g) * nv);
        }
    }
    /* together, 2 threads, other block tables: step 1: seq 0 whole + seq 2 rows 0..8;
     * step 2: seq 0 decode 0, seq 1 whole, seq 2 rows 9..19; then decode all */
    int ok = 1;
    int32_t tok[64], pos[64], seq[64];
    int n = 0;
    for (int k = 0; k < 12; k++, n++)
        tok[n] = prompts[0][k], pos[n] = k, seq[n] = 0;
    for (int k = 0; k < 9; k++, n++)
        tok[n] = prompts[2][k], pos[n] = k, seq[n] = 2;
    runner_step(&b, n, tok, pos, seq, tmp);
    ok &= !memcmp(tmp + (size_t)11 * nv, alone, sizeof(float) * nv);
    n = 0;
    tok[n] = gen[0][0], pos[n] = 12, seq[n++] = 0;
    for (int k = 0; k < 7; k++, n++)
        tok[n] = prompts[1][k], pos[n] = k, seq[n] = 1;
    for (int k = 9; k < 20; k++, n++)
        tok[n] = prompts[2][k], pos[n] = k, seq[n] = 2;
    runner_step(&b, n, tok, pos, seq, tmp);
    ok &= !memcmp(tmp, alone + (size_t)1 * nv, sizeof(float) * nv);
    ok &= !memcmp(tmp + (size_t)7 * nv, alone + (size_t)5 * nv, sizeof(float) * nv);
    ok &= !memcmp(tmp + (size_t)18 * nv, alone + (size_t)10 * nv, sizeof(float) * nv);
    CHECK_MSG(ok, "%s: prefill logits differ between alone and batched", model);
    int done[3] = {1, 0, 0};
    for (int step = 0; step < 4; step++) {
        n = 0;
        for (int s = 0; s < 3; s++) {
            if (done[s] >= 4)
                continue;
            tok[n] = gen[s][done[s]];
            pos[n] = plen[s] + done[s];
            seq[n] = s;
            n++;
        }
        if (!n)
            break;
        runner_step(&b, n, tok, pos, seq, tmp);
        int row = 0;
        for (int s = 0; s < 3; s++) {
            if (done[s] >= 4)
                continue;
            int same = !memcmp(tmp + (size_t)row * nv, alone + (size_t)(s * 5 + 1 + done[s]) * nv,
                               sizeof(float) * nv);
            CHECK_MSG(same, "%s: decode logits of seq %d step %d differ in a batch", model, s,
                      done[s]);
            done[s]++;
            row++;
        }
    }
    /* one row on two threads: each row's columns are shared out between
     * them (forward.c's unit_share), which must change nothing either */
    int32_t t1 = gen[1][0], p1 = plen[1] + 4, s1 = 1;
    runner_step(&a, 1, &t1, &p1, &s1, alone);
    runner_step(&b, 1, &t1, &p1, &s1, tmp);
    CHECK_MSG(!memcmp(tmp, alone, sizeof(float) * nv),
              "%s: a lone decode row on two threads differs from one thread", model);
    free(alone);
    free(tmp);
    runner_close(&a);
    runner_close(&b);
}

static void test_batch_invariance(void)
{
    char p[600];
    const char *models[] = {"ref/llama-q4_k_m.gguf",   "ref/llama-q8_0.gguf", "ref/qwen2-f16.gguf",
                            "ref/qwen3-hd64-f16.gguf", "ref/llama-bf16.gguf", "stories260K.gguf"};
    for (size_t i = 0; i < sizeof models / sizeof *models; i++) {
        snprintf(p, sizeof p, "%s/models/%s", t_shared(), models[i]);
        check_invariance(p, IFL_TYPE_F16);
    }
    snprintf(p, sizeof p, "%s/models/ref/llama-q5_k_m.gguf", t_shared());
    check_invariance(p, IFL_TYPE_F32);
    /* every newer weight type (tests/data/quant) */
    for (size_t i = 0; i < sizeof quant_refs / sizeof *quant_refs; i++) {
        snprintf(p, sizeof p, "%s/%s.gguf", t_quant_data(), quant_refs[i].name);
        check_invariance(p, IFL_TYPE_F16);
    }
    snprintf(p, sizeof p, "%s/models/ref/qwen2-q8_0.gguf", t_shared());
    check_invariance(p, IFL_TYPE_Q8_0);
    snprintf(p, sizeof p, "%s/models/stories260K.gguf", t_shared());
    check_invariance(p, IFL_TYPE_Q8_0);
}

static void test_bad_batch(void)
{
    char p[600];
    snprintf(p, sizeof p, "%s/models/stories260K.gguf", t_shared());
    struct runner r;
    if (runner_open(&r, p, IFL_TYPE_F16, 1, 8, 0)) {
        CHECK(0);
        return;
    }
    float lg[512 * 8];
    int32_t tok = 600, pos = 0, seq = 0;
    CHECK_EQ(runner_step(&r, 1, &tok, &pos, &seq, lg), IFL_EINVAL);
    tok = 5, pos = BS * BLOCKS_PER_SEQ;
    CHECK_EQ(runner_step(&r, 1, &tok, &pos, &seq, lg), IFL_EINVAL);
    pos = -1;
    CHECK_EQ(runner_step(&r, 1, &tok, &pos, &seq, lg), IFL_EINVAL);
    pos = 0, seq = MAX_SEQ;
    CHECK_EQ(runner_step(&r, 1, &tok, &pos, &seq, lg), IFL_EINVAL);
    seq = 0;
    r.tables[0][0] = -5;
    CHECK_EQ(runner_step(&r, 1, &tok, &pos, &seq, lg), IFL_EINVAL);
    r.tables[0][0] = 0;
    r.n_blocks[0] = 0;
    CHECK_EQ(runner_step(&r, 1, &tok, &pos, &seq, lg), IFL_EINVAL);
    r.n_blocks[0] = BLOCKS_PER_SEQ;
    int32_t toks[9] = {0}, poss[9] = {0}, seqs[9] = {0};
    CHECK_EQ(runner_step(&r, 9, toks, poss, seqs, lg), IFL_EINVAL); /* > max_rows */
    CHECK_EQ(runner_step(&r, 1, &tok, &pos, &seq, lg), 0);
    runner_close(&r);
}

static void test_load_errors(void)
{
    char err[IFL_ERR_LEN] = "", p[600];
    struct ifl_model *m = (void *)1;
    CHECK_EQ(ifl_model_load(&m, "/nonexistent/model.gguf", err), IFL_EIO);
    CHECK(m == NULL);
    CHECK(strstr(err, "/nonexistent/model.gguf") != NULL);
    snprintf(p, sizeof p, "%s/models/vocab/ggml-vocab-llama-spm.gguf", t_shared());
    err[0] = 0;
    int rc = ifl_model_load(&m, p, err);
    CHECK(rc == IFL_EFORMAT || rc == IFL_EUNSUPPORTED);
    CHECK_MSG(strstr(err, "token_embd.weight") || strstr(err, "model:"), "message: %s", err);
    snprintf(p, sizeof p, "%s/models/stories260K.gguf", t_shared());
    CHECK_EQ(ifl_model_load(&m, p, err), 0);
    if (!m)
        return;
    CHECK_EQ(m->hp.n_embd, 64);
    CHECK_EQ(m->hp.n_layer, 5);
    CHECK_EQ(m->hp.n_head, 8);
    CHECK_EQ(m->hp.n_head_kv, 4);
    CHECK_EQ(m->hp.n_vocab, 512);
    CHECK_EQ(m->hp.arch, IFL_ARCH_LLAMA);
    CHECK(m->tied_output == 0 || m->tied_output == 1);
    ifl_model_free(m);
    snprintf(p, sizeof p, "%s/models/ref/llama-tied-f16.gguf", t_shared());
    CHECK_EQ(ifl_model_load(&m, p, err), 0);
    CHECK_EQ(m->tied_output, 1);
    ifl_model_free(m);
    snprintf(p, sizeof p, "%s/models/ref/qwen3-hd64-f16.gguf", t_shared());
    CHECK_EQ(ifl_model_load(&m, p, err), 0);
    CHECK_EQ(m->hp.head_dim, 64);
    CHECK_EQ(m->hp.arch, IFL_ARCH_QWEN3);
    CHECK(m->layers[0].q_norm != NULL);
    ifl_model_free(m);
}

/* A Q8_0 KV cache: logits stay close to llama.cpp's (F32 cache) on every
 * reference model whose key/value widths allow it; the quantised cache is
 * the only difference, so the bound is a few times the F16 cache's. */
static void test_q8_cache(void)
{
    char names[64][128];
    int n = list_refs(names, 64), tested = 0;
    for (int i = 0; i < n; i++) {
        struct ref r;
        if (load_ref(&r, names[i])) {
            free_ref(&r);
            continue;
        }
        struct runner run;
        if (runner_open(&run, r.model, IFL_TYPE_Q8_0, 2, 512, 0)) {
            free_ref(&r);
            continue;
        }
        size_t nl = (size_t)r.n_seq * (size_t)r.n_vocab;
        float *out = malloc(nl * sizeof(float));
        CHECK(runner_eval(&run, r.seq, r.n_seq, 512, out) == 0);
        double mx, mean;
        diff_stats(out, r.logits, nl, &mx, &mean);
        /* logits' spread: ~0.8 on the synthetic models, ~7 on stories260K */
        double scale = !strncmp(r.name, "stories", 7) ? 7.4 : 0.8;
        fprintf(stderr, "  %-28s q8_0 cache vs llama.cpp max %.2e mean %.2e\n", r.name, mx, mean);
        CHECK_MSG(mx <= 0.5 * scale && mean <= 0.05 * scale, "%s: q8_0 cache off by max %g mean %g",
                  r.name, mx, mean);
        tested++;
        free(out);
        runner_close(&run);
        free_ref(&r);
    }
    CHECK(tested >= 15);
    /* widths that are not a multiple of 32 are refused with a reason */
    struct ifl_hparams hp = {.n_layer = 1, .n_head_kv = 1, .head_dim = 8, .head_dim_v = 8};
    struct ifl_kv_store *kv = NULL;
    char err[IFL_ERR_LEN] = "";
    CHECK_EQ(ifl_kv_store_create(&kv, &hp, IFL_TYPE_Q8_0, 4, 16, err), IFL_EUNSUPPORTED);
    CHECK(strstr(err, "multiples of 32") != NULL);
}

int main(void)
{
    T_RUN(test_load_errors);
    T_RUN(test_ref_models);
    T_RUN(test_quant_refs);
    T_RUN(test_batch_invariance);
    T_RUN(test_bad_batch);
    T_RUN(test_q8_cache);
    return t_done();
}
