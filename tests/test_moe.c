/*
 * Mixture-of-experts models (qwen3moe, and llama with experts: Mixtral's
 * layout): loading, the forward pass (src/model/forward_moe.c) against the
 * float64 reference pass (tests/reffwd.c) on mkmodel's models of every
 * weight type, and against llama.cpp's logits and greedy ids on the models
 * in tests/data/moe (README there); and the batch promise: a request's
 * tokens and log-probs are bitwise the same alone and among 15 others,
 * chunked or not, which the routing (rows grouped by expert) must keep.
 *
 * Tolerances against the reference are those of
 * tests/test_forward_vs_reffwd.c (which derives them): float weights
 * 1e-4 * max(1, std(logits)), quantised 0.15 (max) and 0.03 (mean) of the
 * logits' std. Against llama.cpp those of ../shared/models/ref/README.md
 * by the experts' type, as tests/test_model.c applies them.
 *
 * mkmodel runs through system(): $BUILD/tools/mkmodel (BUILD defaults to
 * "build"), writing into a mkdtemp directory removed at the end.
 */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/err.h"
#include "core/rng.h"
#include "inflight.h"
#include "kernels/kernels.h"
#include "model/forward.h"
#include "model/forward_internal.h"
#include "model/gguf.h"
#include "model/lora.h"
#include "model/model.h"
#include "reffwd.h"
#include "t.h"

#define N_TOK 40
#define BLOCK 16
/* A near-tie of the routes: the last chosen expert's logit within this of
 * the best one left out (reffwd.h, ref_forward_routes) */
#define ROUTE_TIE 0.1
#define MAX_LAYERS 4
#define MAX_K 8

static char g_dir[256];
static char g_mk[512];
static char g_vocab[512];
static int32_t g_tok[N_TOK];

static const char *moe_data(void)
{
    const char *s = getenv("IFL_MOE_DATA");
    return s && *s ? s : "tests/data/moe";
}

/* The most likely token, the lowest id on a tie (llama.cpp's greedy rule). */
static int32_t argmax(const float *x, int32_t n)
{
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[best])
            best = i;
    return best;
}

/* ---- the engine on one sequence ---- */

/* Evaluates tok[0..n) in steps of chunks[0], chunks[1], ... (the last entry
 * repeats) with logits of every row; nth threads. */
/* The KV cache engine_logits runs over (F32 reads it position by
 * position; F16 and Q8_0 take the blocked kernels, attention.c). */
static enum ifl_type g_kv = IFL_TYPE_F32;
/* whether engine_logits' last forward pass took the tiled attention
 * (attention_tiled.c) */
static int g_tiled;

static int engine_logits(const char *path, const int32_t *tok, int n, const int *chunks,
                         int n_chunks, int nth, float *out, int *n_vocab, int32_t *routes,
                         char *err)
{
    struct ifl_model *m = NULL;
    struct ifl_kv_store *kv = NULL;
    struct ifl_fwd *f = NULL;
    int rc = ifl_model_load(&m, path, err);
    if (rc)
        return rc;
    *n_vocab = m->hp.n_vocab;
    int32_t n_blocks = (n + BLOCK - 1) / BLOCK;
    rc = ifl_kv_store_create(&kv, &m->hp, g_kv, n_blocks, BLOCK, err);
    struct ifl_fwd_config cfg = {.max_rows = n, .max_ctx = n, .n_threads = nth};
    if (!rc)
        rc = ifl_fwd_create(&f, m, kv, &cfg, err);
    g_tiled = !rc && ifl_fwd_attn_tiled(f);
    int32_t *table = malloc(sizeof(int32_t) * (size_t)n_blocks);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)n);
    int32_t *seq = calloc((size_t)n, sizeof(int32_t));
    uint8_t *want = malloc((size_t)n);
    if (!table || !pos || !seq || !want)
        rc = rc ? rc : IFL_ENOMEM;
    for (int i = 0; !rc && i < n_blocks; i++)
        table[i] = i;
    for (int i = 0; !rc && i < n; i++) {
        pos[i] = i;
        want[i] = 1;
    }
    const int32_t *tables[1] = {table};
    if (!rc && routes) /* the layout of one step of n rows: one chunk */
        ifl_fwd_moe_trace(f, routes);
    for (int done = 0, c = 0; !rc && done < n; c++) {
        int rows = chunks[c < n_chunks ? c : n_chunks - 1];
        rows = rows < n - done ? rows : n - done;
        struct ifl_batch b = {
            .n_rows = rows,
            .tokens = tok + done,
            .pos = pos + done,
            .seq = seq + done,
            .logits = want + done,
            .n_seqs = 1,
            .block_tables = tables,
            .n_blocks = &n_blocks,
        };
        rc = ifl_forward(f, &b, out + (size_t)done * (size_t)m->hp.n_vocab, err);
        done += rows;
    }
    free(table);
    free(pos);
    free(seq);
    free(want);
    ifl_fwd_free(f);
    ifl_kv_store_free(kv);
    ifl_model_free(m);
    return rc;
}

/* ---- against the float64 reference ---- */

/* Float weights whose activations stay F32: BF16 is not one when the
 * kernels round its activations to BF16 (kernels.h act_bf16). */
static int is_float_type(const char *type)
{
    return !strcmp(type, "f32") || !strcmp(type, "f16") ||
           (!strcmp(type, "bf16") && !ifl_kernels_best()->act_bf16[IFL_TYPE_BF16]);
}

/* mkmodel's model of this arch, type and shape options into path. */
static int make_model(char *path, size_t cap, const char *arch, const char *type, const char *shape)
{
    static int serial;
    char cmd[2048];
    snprintf(path, cap, "%s/%s-%s-%d.gguf", g_dir, arch, type, serial++);
    snprintf(cmd, sizeof cmd,
             "'%s' -o '%s' --vocab '%s' --arch %s --type %s --n-embd 256 --n-layer 2 "
             "--n-head 4 --n-head-kv 2 --seed 7 %s 2>/dev/null",
             g_mk, path, g_vocab, arch, type, shape);
    int sys = system(cmd);
    CHECK_MSG(sys == 0, "mkmodel failed (%d): %s", sys, cmd);
    return sys;
}

static void check_vs_ref(const char *arch, const char *type, const char *shape)
{
    char path[512], err[IFL_ERR_LEN] = "";
    if (make_model(path, sizeof path, arch, type, shape))
        return;
    int nv = 0, nv_ref = 0;
    CHECK(ref_forward(path, g_tok, 0, NULL, &nv_ref, err) == 0);
    size_t sz = (size_t)N_TOK * (size_t)(nv_ref > 0 ? nv_ref : 1);
    float *ref = malloc(sz * sizeof(float));
    float *whole = calloc(sz, sizeof(float));
    float *chunked = calloc(sz, sizeof(float));
    /* the engine's routes, forced on the reference; its own choices and margins */
    static int32_t eng_routes[MAX_LAYERS * N_TOK * MAX_K], ref_routes[MAX_LAYERS * N_TOK * MAX_K];
    static double margin[MAX_LAYERS * N_TOK];
    int one[1] = {N_TOK}, steps[3] = {7, 1, 5};
    int rc = engine_logits(path, g_tok, N_TOK, one, 1, 2, whole, &nv, eng_routes, err);
    CHECK_MSG(rc == 0, "%s %s: engine: %s", arch, type, err);
    struct ref_routes rt = {.force = eng_routes, .chosen = ref_routes, .margin = margin};
    int rc1 = rc ? rc : ref_forward_routes(path, g_tok, N_TOK, ref, &rt, err);
    CHECK_MSG(rc1 == 0, "%s %s: ref_forward: %s", arch, type, err);
    /* chunked, on one thread: the rows an expert gets and the thread that
     * computes them both change, the logits must not */
    int rc2 = rc1 ? rc1 : engine_logits(path, g_tok, N_TOK, steps, 3, 1, chunked, &nv, NULL, err);
    CHECK_MSG(rc2 == 0, "%s %s: engine (chunked): %s", arch, type, err);
    if (rc || rc1 || rc2 || nv != nv_ref) {
        CHECK_EQ(nv, nv_ref);
        goto out;
    }
    double mean = 0, var = 0;
    for (size_t i = 0; i < sz; i++)
        mean += ref[i];
    mean /= (double)sz;
    for (size_t i = 0; i < sz; i++)
        var += (ref[i] - mean) * (ref[i] - mean);
    double sd = sqrt(var / (double)sz);
    int fl = is_float_type(type);
    double tol_max = fl ? 1e-5 * (sd > 1 ? sd : 1) : 0.15 * sd;
    double tol_mean = fl ? tol_max : 0.03 * sd;
    /* the routes: the engine's equal the reference's own wherever those
     * were clear (float weights: everywhere); where the engine's rounded
     * activations tip a near-tie the other way, the reference took the
     * engine's route (forced), so the logits below compare the rest */
    int n_layer = 0, k = 0, flips = 0;
    double worst_flip = 0;
    {
        struct ifl_gguf *gg = NULL;
        int64_t v = 0;
        char key[64];
        if (!ifl_gguf_open(&gg, path, NULL)) {
            snprintf(key, sizeof key, "%s.block_count", arch);
            n_layer = ifl_gguf_get_int(gg, key, &v, NULL) ? 0 : (int)v;
            snprintf(key, sizeof key, "%s.expert_used_count", arch);
            k = ifl_gguf_get_int(gg, key, &v, NULL) ? 0 : (int)v;
            ifl_gguf_free(gg);
        }
    }
    CHECK(n_layer > 0 && n_layer <= MAX_LAYERS && k > 0 && k <= MAX_K);
    for (int l = 0; l < n_layer && l < MAX_LAYERS; l++)
        for (int r = 0; r < N_TOK; r++) {
            size_t at = ((size_t)l * N_TOK + (size_t)r) * (size_t)k;
            int same = 1; /* as sets: a near-tie of the first two only swaps them */
            for (int c = 0; c < k; c++) {
                int found = 0;
                for (int d = 0; d < k; d++)
                    found |= eng_routes[at + (size_t)c] == ref_routes[at + (size_t)d];
                same &= found;
            }
            if (same)
                continue;
            flips++;
            double mg = margin[(size_t)l * N_TOK + (size_t)r];
            worst_flip = mg > worst_flip ? mg : worst_flip;
        }
    double dmax = 0, dsum = 0;
    int top_checked = 0, top_bad = 0, chunk_diff = 0;
    for (int r = 0; r < N_TOK; r++) {
        const float *a = ref + (size_t)r * (size_t)nv, *b = whole + (size_t)r * (size_t)nv;
        const float *c = chunked + (size_t)r * (size_t)nv;
        for (int v = 0; v < nv; v++) {
            double d = fabs((double)a[v] - (double)b[v]);
            dmax = d > dmax ? d : dmax;
            dsum += d;
            chunk_diff += memcmp(&b[v], &c[v], sizeof(float)) != 0;
        }
    }
    /* top-1 where the reference's lead is clear of twice the distance */
    const double top_margin = fl ? 1e-5 : 2 * dmax;
    for (int r = 0; r < N_TOK; r++) {
        const float *a = ref + (size_t)r * (size_t)nv, *b = whole + (size_t)r * (size_t)nv;
        int ba = argmax(a, nv), bb = argmax(b, nv);
        float second = -INFINITY;
        for (int v = 0; v < nv; v++)
            if (v != ba && a[v] > second)
                second = a[v];
        if (a[ba] - second > top_margin) {
            top_checked++;
            top_bad += ba != bb;
        }
    }
    double dmean = dsum / (double)sz;
    fprintf(stderr,
            "  %-8s %-7s %-40s std %.3f  routes: %d of %d other (margin <= %.3f)  max |d| %.2e "
            "(tol %.2e)  mean %.2e  top-1 %d/%d  chunked %s\n",
            arch, type, shape, sd, flips, n_layer * N_TOK, worst_flip, dmax, tol_max, dmean,
            top_checked - top_bad, top_checked, chunk_diff ? "DIFFERS" : "bitwise equal");
    CHECK_MSG(dmax <= tol_max, "%s %s %s: max |d| %.3g > %.3g", arch, type, shape, dmax, tol_max);
    CHECK_MSG(dmean <= tol_mean, "%s %s %s: mean |d| %.3g > %.3g", arch, type, shape, dmean,
              tol_mean);
    CHECK_MSG(top_bad == 0, "%s %s %s: top-1 differs at %d of %d positions", arch, type, shape,
              top_bad, top_checked);
    CHECK_MSG(top_checked >= N_TOK / 2, "%s %s %s: only %d clear top-1 positions", arch, type,
              shape, top_checked);
    CHECK_MSG(fl ? flips == 0 : worst_flip <= ROUTE_TIE,
              "%s %s %s: %d routes differ from the reference's, at margins up to %.3f", arch, type,
              shape, flips, worst_flip);
    CHECK_MSG(chunk_diff == 0, "%s %s %s: chunked logits differ from whole in %d values", arch,
              type, shape, chunk_diff);
out:
    unlink(path);
    free(ref);
    free(whole);
    free(chunked);
}

/* n_ff 256: the down experts' rows take whole K-quant blocks */
#define SHAPE_8X2 "--n-expert 8 --n-expert-used 2 --n-ff 256"

static const char *const types[] = {"f32",  "f16",  "bf16",   "q8_0",   "q4_0",  "q4_k",
                                    "q5_k", "q6_k", "q4_k_m", "q5_0",   "q5_1",  "iq4_nl",
                                    "q2_k", "q3_k", "iq4_xs", "q5_k_m", "mxfp4", "mxfp4_moe"};

static void test_qwen3moe_types(void)
{
    for (size_t t = 0; t < sizeof types / sizeof *types; t++)
        check_vs_ref("qwen3moe", types[t], SHAPE_8X2 " --head-dim 128");
}

static void test_mixtral_types(void)
{
    for (size_t t = 0; t < sizeof types / sizeof *types; t++)
        check_vs_ref("llama", types[t], SHAPE_8X2);
}

/* gpt-oss: a window of 4 on layer 0 (of 2), YaRN by default, the sinks,
 * biases and clamped SwiGLU (mkmodel's expert biases make the clamps bind
 * on some elements) */
static const char *const oss_types[] = {"f32",  "f16",    "bf16",  "q8_0",
                                        "q4_0", "iq4_nl", "mxfp4", "mxfp4_moe"};

static void test_gptoss_types(void)
{
    for (size_t t = 0; t < sizeof oss_types / sizeof *oss_types; t++)
        check_vs_ref("gpt-oss", oss_types[t], SHAPE_8X2 " --n-swa 4");
}

/* gpt-oss's sinks in the blocked attention over F16 and Q8_0 caches: the
 * whole sequence at once against the float64 reference (the cache's
 * rounding: F16 within F16's class figure, Q8_0 within 0.15 sd), and one
 * row a step on two threads (a lone row's heads shared between them)
 * bitwise the whole. */
static void test_gptoss_caches(void)
{
    char path[512], err[IFL_ERR_LEN] = "";
    if (make_model(path, sizeof path, "gpt-oss", "f32", SHAPE_8X2 " --n-swa 4"))
        return;
    int nv = 0;
    static float ref[N_TOK * 512], whole[N_TOK * 512], ones[N_TOK * 512];
    CHECK(ref_forward(path, g_tok, N_TOK, ref, &nv, err) == 0 && nv == 512);
    const enum ifl_type kvs[2] = {IFL_TYPE_F16, IFL_TYPE_Q8_0};
    for (int i = 0; i < 2 && nv == 512; i++) {
        g_kv = kvs[i];
        int all[1] = {N_TOK}, one[1] = {1};
        static int32_t routes[MAX_LAYERS * N_TOK * MAX_K], chosen[MAX_LAYERS * N_TOK * MAX_K];
        static double margin[MAX_LAYERS * N_TOK];
        int rc = engine_logits(path, g_tok, N_TOK, all, 1, 2, whole, &nv, routes, err);
        int rc1 = rc ? rc : engine_logits(path, g_tok, N_TOK, one, 1, 2, ones, &nv, NULL, err);
        /* the engine's routes forced on the reference: the cache's rounding
         * tips near-ties of the router (Q8_0 here, by 0.9 in a logit when
         * not forced), each worth a whole expert; those must be near-ties */
        struct ref_routes rt = {.force = routes, .chosen = chosen, .margin = margin};
        if (!rc && !rc1)
            rc = ref_forward_routes(path, g_tok, N_TOK, ref, &rt, err);
        int flips = 0;
        double worst = 0;
        for (int l = 0; l < 2; l++) /* make_model's two layers, k = 2 */
            for (int r = 0; r < N_TOK; r++) {
                const int32_t *a = routes + (l * N_TOK + r) * 2, *c = chosen + (l * N_TOK + r) * 2;
                if ((a[0] == c[0] && a[1] == c[1]) || (a[0] == c[1] && a[1] == c[0]))
                    continue;
                flips++;
                worst = margin[l * N_TOK + r] > worst ? margin[l * N_TOK + r] : worst;
            }
        CHECK_MSG(rc == 0 && rc1 == 0, "gpt-oss, %s cache: %s", ifl_type_info(kvs[i])->name, err);
        double dmax = 0, mean = 0, var = 0;
        for (int v = 0; v < N_TOK * 512; v++)
            mean += ref[v] / (N_TOK * 512);
        for (int v = 0; v < N_TOK * 512; v++) {
            var += (ref[v] - mean) * (ref[v] - mean) / (N_TOK * 512);
            double d = fabs((double)whole[v] - ref[v]);
            dmax = d > dmax ? d : dmax;
        }
        double tol = i == 0 ? 1e-2 : 0.15 * sqrt(var);
        int same = !memcmp(whole, ones, sizeof whole);
        fprintf(stderr,
                "  gpt-oss, %-4s cache: routes %d of %d other (margin <= %.3f), max |d| %.2e from "
                "the f64 reference (tol %.2e), one row a step on 2 threads %s\n",
                ifl_type_info(kvs[i])->name, flips, 2 * N_TOK, worst, dmax, tol,
                same ? "bitwise equal" : "DIFFERS");
        CHECK_MSG(worst <= ROUTE_TIE, "gpt-oss, %s cache: a route differs at margin %.3f",
                  ifl_type_info(kvs[i])->name, worst);
        CHECK_MSG(dmax <= tol, "gpt-oss, %s cache: %g from the reference",
                  ifl_type_info(kvs[i])->name, dmax);
        CHECK_MSG(same, "gpt-oss, %s cache: one row a step differs from the whole",
                  ifl_type_info(kvs[i])->name);
        /* sinks are a term of the tiled pass, not a reason to leave it */
        CHECK_MSG(g_tiled, "gpt-oss, %s cache: not the tiled attention",
                  ifl_type_info(kvs[i])->name);
    }
    g_kv = IFL_TYPE_F32;
    unlink(path);
}

/* Other shapes: one expert a token (k 1), all of them (k = n), an odd
 * count, experts whose rows are not whole x16 groups (not repacked), a
 * tied output. */
static void test_shapes(void)
{
    check_vs_ref("qwen3moe", "q8_0", "--n-expert 4 --n-expert-used 1 --n-ff 128");
    check_vs_ref("qwen3moe", "f16", "--n-expert 3 --n-expert-used 3 --n-ff 64");
    check_vs_ref("llama", "q4_0", "--n-expert 6 --n-expert-used 3 --n-ff 96 --tied");
    check_vs_ref("llama", "f16", "--n-expert 5 --n-expert-used 2 --n-ff 40");
    check_vs_ref("qwen3moe", "q4_k", "--n-expert 16 --n-expert-used 4 --n-ff 256");
}

/* ---- loading ---- */

/* Copies the GGUF at src to dst with key `key` set to the u32 v (or to
 * the string sv when that is not NULL, or removed when v < 0) and tensor
 * `drop` left out (NULL: none). */
static int rewrite_s(const char *src, const char *dst, const char *key, long v, const char *sv,
                     const char *drop)
{
    struct ifl_gguf *g = NULL;
    struct ifl_gguf_writer *w = NULL;
    int rc = ifl_gguf_open(&g, src, NULL);
    if (!rc)
        rc = ifl_gguf_writer_create(&w);
    for (int64_t i = 0; !rc && i < ifl_gguf_n_kv(g); i++)
        if (strcmp(ifl_gguf_key(g, i), key))
            rc = ifl_gguf_writer_copy_kv(w, g, i);
    if (!rc && sv)
        rc = ifl_gguf_writer_set_str(w, key, sv, strlen(sv));
    else if (!rc && v >= 0)
        rc = ifl_gguf_writer_set_u32(w, key, (uint32_t)v);
    for (int64_t i = 0; !rc && i < ifl_gguf_n_tensors(g); i++) {
        const struct ifl_gguf_tensor *t = ifl_gguf_tensor(g, i);
        if (drop && !strcmp(t->name, drop))
            continue;
        rc = ifl_gguf_writer_add_tensor(w, t->name, t->type, (int)t->n_dims, t->ne, t->data,
                                        t->nbytes);
    }
    if (!rc)
        rc = ifl_gguf_writer_write(w, dst, NULL);
    ifl_gguf_writer_free(w);
    ifl_gguf_free(g);
    return rc;
}

static int rewrite(const char *src, const char *dst, const char *key, long v, const char *drop)
{
    return rewrite_s(src, dst, key, v, NULL, drop);
}

static void expect_load_error(const char *path, const char *needle)
{
    struct ifl_model *m = NULL;
    char err[IFL_ERR_LEN] = "";
    int rc = ifl_model_load(&m, path, err);
    CHECK_MSG(rc == IFL_EFORMAT && m == NULL && strstr(err, needle),
              "loading %s: rc %d, message '%s', wanted one naming '%s'", path, rc, err, needle);
    ifl_model_free(m);
}

static void test_load(void)
{
    char path[512], bad[600], err[IFL_ERR_LEN] = "";
    if (make_model(path, sizeof path, "qwen3moe", "q8_0", SHAPE_8X2))
        return;
    struct ifl_model *m = NULL;
    CHECK_EQ(ifl_model_load(&m, path, err), 0);
    if (m) {
        CHECK_EQ(m->hp.arch, IFL_ARCH_QWEN3MOE);
        CHECK_EQ(m->hp.n_expert, 8);
        CHECK_EQ(m->hp.n_expert_used, 2);
        CHECK_EQ(m->hp.n_ff, 256);
        CHECK(m->layers[1].gate_inp.data != NULL && m->layers[1].w_gate.data == NULL);
        CHECK_EQ(m->layers[1].gate_inp.type, IFL_TYPE_F32);
        CHECK_EQ(m->layers[1].down_exps.n_out, 8 * 256);
        CHECK(m->layers[0].q_norm != NULL);
        /* each expert's slice is whole x16 groups: the experts are repacked
         * where the kernel table repacks Q8_0 (repack.c) */
        const char *rp = getenv("IFL_REPACK");
        int want = ifl_kernels_best()->x16_pays[IFL_TYPE_Q8_0] && !(rp && !strcmp(rp, "0"));
        CHECK_EQ(m->layers[1].gate_exps.x16, want);
        CHECK_EQ(m->layers[1].down_exps.x16, want);
        CHECK_EQ(m->layers[1].gate_inp.x16, 0);
    }
    ifl_model_free(m);
    /* tensor parallelism: rank 1 of 2 holds half of every expert's n_ff
     * (tests/test_tp.sh runs the split against one process) */
    struct ifl_model_load_opts o = {.tp_rank = 1, .tp_size = 2};
    m = NULL;
    CHECK_EQ(ifl_model_load_with(&m, path, &o, err), 0);
    if (m) {
        CHECK_EQ(m->hp.n_ff, 128);
        CHECK_EQ(m->layers[1].gate_exps.n_out, 8 * 128);
        CHECK_EQ(m->layers[1].up_exps.n_out, 8 * 128);
        CHECK_EQ(m->layers[1].down_exps.n_in, 128);
        CHECK_EQ(m->layers[1].down_exps.n_out, 8 * 256);
        CHECK_EQ(m->layers[1].gate_inp.n_out, 8); /* the router whole */
    }
    ifl_model_free(m);

    snprintf(bad, sizeof bad, "%s.bad.gguf", path);
    CHECK_EQ(rewrite(path, bad, "qwen3moe.expert_used_count", 9, NULL), 0);
    expect_load_error(bad, "qwen3moe.expert_used_count");
    CHECK_EQ(rewrite(path, bad, "qwen3moe.expert_used_count", -1, NULL), 0);
    expect_load_error(bad, "qwen3moe.expert_used_count");
    CHECK_EQ(rewrite(path, bad, "qwen3moe.expert_count", -1, NULL), 0);
    expect_load_error(bad, "qwen3moe.expert_count");
    CHECK_EQ(rewrite(path, bad, "qwen3moe.expert_count", 7, NULL), 0);
    expect_load_error(bad, "blk.0.ffn_gate_inp.weight");
    CHECK_EQ(rewrite(path, bad, "qwen3moe.expert_feed_forward_length", 128, NULL), 0);
    expect_load_error(bad, "ffn_gate_exps.weight");
    CHECK_EQ(rewrite(path, bad, "x", -1, "blk.1.ffn_down_exps.weight"), 0);
    expect_load_error(bad, "blk.1.ffn_down_exps.weight");
    unlink(bad);
    unlink(path);
}

/* LoRA on a mixture of experts: an adapter of the attention applies; one
 * that names ffn_gate, which the model has as experts, is refused with a
 * reason (it used to bind the unset dense matrix). */
static void test_lora(void)
{
    char path[512], dense[512], ad[600], bad[700], cmd[2048], err[IFL_ERR_LEN] = "";
    if (make_model(path, sizeof path, "qwen3moe", "f16", SHAPE_8X2) ||
        make_model(dense, sizeof dense, "qwen3", "f16", "--n-ff 256"))
        return;
    snprintf(ad, sizeof ad, "%s.lora.gguf", path);
    snprintf(cmd, sizeof cmd, "'%s' -o '%s' --lora-of '%s' 2>/dev/null", g_mk, ad, path);
    CHECK_EQ(system(cmd), 0);
    struct ifl_model *m = NULL;
    struct ifl_lora *l = NULL;
    CHECK_EQ(ifl_model_load(&m, path, err), 0);
    if (!m)
        return;
    CHECK_MSG(ifl_lora_load(&l, ad, m, err) == 0, "%s", err);
    ifl_lora_free(l);
    l = NULL;
    snprintf(cmd, sizeof cmd, "'%s' -o '%s' --lora-of '%s' --lora-targets q,gate 2>/dev/null", g_mk,
             ad, dense);
    snprintf(bad, sizeof bad, "%s.bad.gguf", ad);
    CHECK_EQ(system(cmd), 0);
    CHECK_EQ(rewrite_s(ad, bad, "general.architecture", 0, "qwen3moe", NULL), 0);
    err[0] = 0;
    CHECK_EQ(ifl_lora_load(&l, bad, m, err), IFL_EUNSUPPORTED);
    CHECK_MSG(strstr(err, "blk.0.ffn_gate.weight") && strstr(err, "experts"), "message: %s", err);
    ifl_lora_free(l);
    ifl_model_free(m);
    unlink(bad);
    unlink(ad);
    unlink(dense);
    unlink(path);
}

/* ---- against llama.cpp (tests/data/moe) ---- */

struct lref {
    char model[512];
    char mk_args[512], sha256[72]; /* an F32 model made at test time (gen.sh) */
    int32_t seq[256];
    int n_seq, n_prompt, n_gen, n_vocab;
    double margins[128];
    double kv_f16_max, kv_f16_mean; /* llama.cpp with an F16 cache against its own file */
    float *logits;                  /* [n_seq][n_vocab] */
};

static int load_lref(struct lref *r, const char *name)
{
    char path[600];
    memset(r, 0, sizeof *r);
    snprintf(path, sizeof path, "%s/%s.json", moe_data(), name);
    json_error_t je;
    json_t *js = json_load_file(path, 0, &je);
    if (!js)
        return -1;
    json_t *p = json_object_get(js, "prompt_ids"), *g = json_object_get(js, "greedy_ids");
    json_t *mg = json_object_get(js, "greedy_margins");
    int ok = json_is_array(p) && json_is_array(g) && json_is_array(mg) &&
             json_array_size(p) + json_array_size(g) <= 256 && json_array_size(g) <= 128;
    if (ok) {
        snprintf(r->model, sizeof r->model, "%s/%s", moe_data(),
                 json_string_value(json_object_get(js, "model")));
        const char *a = json_string_value(json_object_get(js, "mkmodel_args"));
        const char *h = json_string_value(json_object_get(js, "sha256"));
        if (a && h) {
            snprintf(r->mk_args, sizeof r->mk_args, "%s", a);
            snprintf(r->sha256, sizeof r->sha256, "%s", h);
            snprintf(r->model, sizeof r->model, "%s/%s", g_dir,
                     json_string_value(json_object_get(js, "model")));
        }
        r->n_vocab = (int)json_integer_value(json_object_get(js, "n_vocab"));
        json_t *d = json_object_get(js, "diff_vs_logits_file");
        r->kv_f16_max = json_number_value(json_object_get(d, "kv_f16_max"));
        r->kv_f16_mean = json_number_value(json_object_get(d, "kv_f16_mean"));
        r->n_prompt = (int)json_array_size(p);
        r->n_gen = (int)json_array_size(g);
        for (int i = 0; i < r->n_prompt; i++)
            r->seq[r->n_seq++] = (int32_t)json_integer_value(json_array_get(p, (size_t)i));
        for (int i = 0; i < r->n_gen; i++) {
            r->seq[r->n_seq++] = (int32_t)json_integer_value(json_array_get(g, (size_t)i));
            r->margins[i] = json_real_value(json_array_get(mg, (size_t)i));
        }
    }
    json_decref(js);
    if (!ok || r->n_vocab <= 0)
        return -1;
    snprintf(path, sizeof path, "%s/%s.logits.f32", moe_data(), name);
    size_t n = (size_t)r->n_seq * (size_t)r->n_vocab;
    r->logits = malloc(n * sizeof(float));
    FILE *f = fopen(path, "rb");
    size_t got = f && r->logits ? fread(r->logits, sizeof(float), n + 1, f) : 0;
    if (f)
        fclose(f);
    return got == n ? 0 : -1;
}

/* Makes an F32 model of the data again (gen.sh keeps its mkmodel command
 * and sha256, not its 10 MB); 0 when the bytes are the ones llama.cpp ran. */
static int remake(const struct lref *r)
{
    char cmd[4096], sum[72] = "";
    snprintf(cmd, sizeof cmd, "'%s' -o '%s' --vocab '%s' %s 2>/dev/null", g_mk, r->model, g_vocab,
             r->mk_args);
    if (system(cmd) != 0)
        return -1;
    snprintf(cmd, sizeof cmd, "sha256sum '%s'", r->model);
    FILE *p = popen(cmd, "r");
    if (!p)
        return -1;
    int ok = fscanf(p, "%64s", sum) == 1;
    pclose(p);
    CHECK_MSG(ok && !strcmp(sum, r->sha256),
              "%s: mkmodel %s made other bytes (sha256 %s, the data's %s)", r->model, r->mk_args,
              sum, r->sha256);
    return ok && !strcmp(sum, r->sha256) ? 0 : -1;
}

static void diff_stats(const float *a, const float *b, size_t n, double *mx, double *mean)
{
    double m = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        m = d > m ? d : m;
        s += d;
    }
    *mx = m;
    *mean = s / (double)n;
}

/* Greedy decoding through the executor (2 threads, F32 cache) must give
 * llama.cpp's ids up to the first step whose margin is below twice the
 * logits' distance (dist), and every teacher-forced row whose margin is
 * clear of that must pick llama.cpp's token. */
static void check_greedy(const struct lref *r, const float *tf, double dist)
{
    int first_tie = r->n_gen;
    for (int g = 0; g < r->n_gen; g++)
        if (r->margins[g] < 2 * dist) {
            first_tie = g;
            break;
        }
    ifl_executor *ex = NULL;
    struct ifl_executor_config c;
    ifl_executor_config_default(&c);
    c.n_threads = 2;
    c.kv_type = IFL_KV_F32;
    char err[512] = "";
    CHECK_EQ(ifl_executor_create(&ex, r->model, &c, err), 0);
    if (!ex)
        return;
    struct ifl_request q;
    ifl_request_init(&q);
    q.input_ids = r->seq;
    q.n_input = r->n_prompt;
    q.max_tokens = r->n_gen;
    q.sampling.temperature = 0;
    q.sampling.ignore_eos = 1;
    ifl_id id;
    int32_t out[128], n = 0;
    CHECK_EQ(ifl_enqueue(ex, &q, &id, err), 0);
    for (int final = 0; !final;) {
        struct ifl_response *resp;
        int32_t got = 0;
        if (ifl_await(ex, &id, 1, 20000, &resp, 1, &got) || !got) {
            CHECK_MSG(0, "%s: no response", r->model);
            break;
        }
        if (resp->n_results == 1)
            for (int32_t i = 0; i < resp->results[0].n_tokens && n < 128; i++)
                out[n++] = resp->results[0].tokens[i];
        final = resp->is_final;
        ifl_response_free(resp);
    }
    ifl_executor_destroy(ex, 0);
    int same = 0;
    while (same < n && same < r->n_gen && out[same] == r->seq[r->n_prompt + same])
        same++;
    int clear = 0, agree = 0;
    for (int g = 0; g < r->n_gen; g++) {
        if (r->margins[g] < 2 * dist)
            continue;
        clear++;
        agree += argmax(tf + (size_t)(r->n_prompt - 1 + g) * r->n_vocab, r->n_vocab) ==
                 r->seq[r->n_prompt + g];
    }
    fprintf(stderr,
            "  %-40s greedy ids equal for %d of %d (first near-tie at %d); teacher-forced "
            "argmax %d/%d clear steps\n",
            r->model, same, r->n_gen, first_tie, agree, clear);
    CHECK_MSG(same >= first_tie, "%s: greedy ids differ at step %d (first near-tie at %d)",
              r->model, same, first_tie);
    CHECK_MSG(agree == clear && clear >= r->n_gen / 2,
              "%s: teacher-forced argmax equal at %d of %d clear steps", r->model, agree, clear);
}

/* The data's models: name, and the class tolerances (max, mean) of their
 * experts' type: F32 1e-4 / 1e-5, F16 1e-2 / 1.5e-3, Q8_0 activations
 * 0.2 / 0.03, Q8_K 0.3 / 0.05 (../shared/models/ref/README.md). */
static const struct {
    const char *name;
    double max, mean;
    int float_weights; /* the f64 reference is then within 1e-4 too */
} lrefs[] = {
    {"qwen3moe-f32", 1e-4, 1e-5, 1},   {"mixtral-f32", 1e-4, 1e-5, 1},
    {"qwen3moe-f16", 1e-2, 1.5e-3, 1}, {"qwen3moe-q8_0", 0.2, 0.03, 0},
    {"mixtral-q4_k_m", 0.3, 0.05, 0},  {"qwen3moe-mxfp4_moe", 0.2, 0.03, 0},
    {"gptoss-f32", 1e-4, 1e-5, 1},     {"gptoss-mxfp4_moe", 0.2, 0.03, 0},
};

static void test_llamacpp(void)
{
    for (size_t i = 0; i < sizeof lrefs / sizeof *lrefs; i++) {
        struct lref r;
        if (load_lref(&r, lrefs[i].name)) {
            CHECK_MSG(0, "cannot read the reference %s/%s.json and its logits", moe_data(),
                      lrefs[i].name);
            free(r.logits);
            continue;
        }
        if (r.mk_args[0] && remake(&r)) {
            free(r.logits);
            continue;
        }
        /* the class figures, without widening: llama.cpp with an F16 cache
         * lands at most 0.017 from its file here, except gptoss-mxfp4_moe
         * (0.49, printed), which the engine still meets at the class's */
        const double tmax = lrefs[i].max, tmean = lrefs[i].mean;
        if (r.kv_f16_max > tmax)
            fprintf(stderr, "  %-16s llama.cpp with an F16 cache: max %.2e from its file\n",
                    lrefs[i].name, r.kv_f16_max);
        size_t nl = (size_t)r.n_seq * (size_t)r.n_vocab;
        float *out = malloc(nl * sizeof(float)), *ref = malloc(nl * sizeof(float));
        char err[IFL_ERR_LEN] = "";
        int nv = 0, whole[1] = {r.n_seq};
        int rc = engine_logits(r.model, r.seq, r.n_seq, whole, 1, 2, out, &nv, NULL, err);
        CHECK_MSG(rc == 0, "%s: %s", r.model, err);
        int rrc = ref_forward(r.model, r.seq, r.n_seq, ref, NULL, err);
        CHECK_MSG(rrc == 0, "%s: ref_forward: %s", r.model, err);
        if (!rc && !rrc) {
            double mx, mean, rmx, rmean, emx, emean;
            diff_stats(out, r.logits, nl, &mx, &mean);
            diff_stats(ref, r.logits, nl, &rmx, &rmean);
            diff_stats(out, ref, nl, &emx, &emean);
            fprintf(stderr,
                    "  %-16s engine vs llama.cpp max %.2e mean %.2e | f64 reference vs "
                    "llama.cpp max %.2e mean %.2e | engine vs f64 max %.2e (tol %.2g / %.2g)\n",
                    lrefs[i].name, mx, mean, rmx, rmean, emx, tmax, tmean);
            CHECK_MSG(mx <= tmax && mean <= tmean, "%s: engine off llama.cpp by max %g mean %g",
                      lrefs[i].name, mx, mean);
            CHECK_MSG(rmx <= tmax && rmean <= tmean,
                      "%s: reference off llama.cpp by max %g mean %g", lrefs[i].name, rmx, rmean);
            if (lrefs[i].float_weights) /* issue 41's bound for float weights */
                CHECK_MSG(emx <= 1e-5, "%s: engine off the f64 reference by %g", lrefs[i].name,
                          emx);
            check_greedy(&r, out, mx);
        }
        if (r.mk_args[0])
            unlink(r.model);
        free(out);
        free(ref);
        free(r.logits);
    }
}

/* ---- batch invariance through the executor ---- */

static void collect(ifl_executor *ex, ifl_id id, int32_t *out, int32_t *n, float *lps)
{
    *n = 0;
    for (int final = 0; !final;) {
        struct ifl_response *r;
        int32_t got = 0;
        if (ifl_await(ex, &id, 1, 30000, &r, 1, &got) || !got) {
            CHECK_MSG(0, "await %llu: no response", (unsigned long long)id);
            return;
        }
        CHECK_EQ(r->status, 0);
        if (r->n_results == 1) {
            const struct ifl_sequence_result *s = &r->results[0];
            memcpy(out + *n, s->tokens, sizeof(int32_t) * (size_t)s->n_tokens);
            if (s->log_probs)
                memcpy(lps + *n, s->log_probs, sizeof(float) * (size_t)s->n_tokens);
            *n += s->n_tokens;
        }
        final = r->is_final;
        ifl_response_free(r);
    }
}

/* One sampled request alone (one thread, whole prompt), then the same among
 * 15 others of other lengths with a row budget of 7 (chunked prefill, rows
 * of several sequences in every step, other experts' rows beside its own)
 * on two threads: the same tokens and bitwise the same log-probs. */
static void check_invariance(const char *model)
{
    int32_t alone[64], alone_n = 0;
    float alone_lp[64];
    for (int round = 0; round < 2; round++) {
        ifl_executor *ex = NULL;
        struct ifl_executor_config c;
        ifl_executor_config_default(&c);
        c.max_num_tokens = round ? 7 : 512;
        c.n_threads = round ? 2 : 1;
        c.kv_type = IFL_KV_F16;
        char err[512] = "";
        int rc = ifl_executor_create(&ex, model, &c, err);
        CHECK_MSG(rc == 0, "%s: %s", model, err);
        if (rc)
            return;
        int32_t prompts[16][40];
        struct ifl_request reqs[16];
        ifl_id ids[16];
        struct ifl_rng g;
        ifl_rng_seed(&g, 5);
        int n_req = round ? 16 : 1;
        for (int k = 0; k < n_req; k++) {
            int len = k == 0 ? 14 : 3 + (int)(ifl_rng_next(&g) % 30);
            for (int i = 0; i < len; i++)
                prompts[k][i] = i == 0 ? 1 : 3 + (int)(ifl_rng_next(&g) % 500);
            if (k == 0) {
                static const int32_t robot[14] = {1,   403, 407, 261, 378, 432, 383,
                                                  286, 261, 376, 352, 414, 430, 309};
                memcpy(prompts[0], robot, sizeof robot);
            }
            ifl_request_init(&reqs[k]);
            reqs[k].input_ids = prompts[k];
            reqs[k].n_input = len;
            reqs[k].max_tokens = k == 0 ? 48 : 10 + k;
            reqs[k].sampling.temperature = 0.8f;
            reqs[k].sampling.seed = 77 + (uint64_t)k;
            reqs[k].sampling.ignore_eos = 1;
            reqs[k].output.return_log_probs = 1;
        }
        if (round) { /* the request under test in the middle of the pack */
            struct ifl_request t = reqs[0];
            reqs[0] = reqs[7];
            reqs[7] = t;
        }
        CHECK_EQ(ifl_enqueue_many(ex, reqs, n_req, ids, err), 0);
        int32_t out[64], n = 0;
        float lp[64];
        collect(ex, ids[round ? 7 : 0], out, &n, lp);
        for (int k = 0; round && k < n_req; k++) {
            int32_t o2[64], n2;
            float l2[64];
            if (k != 7)
                collect(ex, ids[k], o2, &n2, l2);
        }
        if (!round) {
            memcpy(alone, out, sizeof out);
            memcpy(alone_lp, lp, sizeof lp);
            alone_n = n;
        } else {
            CHECK_EQ(n, alone_n);
            CHECK_MSG(!memcmp(out, alone, sizeof(int32_t) * (size_t)n),
                      "%s: other tokens among 15 others", model);
            CHECK_MSG(!memcmp(lp, alone_lp, sizeof(float) * (size_t)n),
                      "%s: other log-probs among 15 others", model);
        }
        ifl_executor_destroy(ex, 0);
    }
    fprintf(stderr, "  %-40s %d tokens alone = among 15 others, chunked by 7\n", model, alone_n);
}

static void test_batch_invariance(void)
{
    char p[600];
    snprintf(p, sizeof p, "%s/qwen3moe-q8_0.gguf", moe_data());
    check_invariance(p);
    snprintf(p, sizeof p, "%s/mixtral-q4_k_m.gguf", moe_data());
    check_invariance(p);
    snprintf(p, sizeof p, "%s/qwen3moe-f16.gguf", moe_data());
    check_invariance(p);
    snprintf(p, sizeof p, "%s/qwen3moe-mxfp4_moe.gguf", moe_data());
    check_invariance(p);
    snprintf(p, sizeof p, "%s/gptoss-mxfp4_moe.gguf", moe_data());
    check_invariance(p);
    /* experts that are not repacked (rows not in whole x16 groups) */
    char path[512];
    if (!make_model(path, sizeof path, "llama", "f16",
                    "--n-expert 5 --n-expert-used 2 --n-ff 40")) {
        check_invariance(path);
        unlink(path);
    }
    /* gpt-oss in F16 over windows of 4: sinks, sliding and global layers */
    if (!make_model(path, sizeof path, "gpt-oss", "f16", SHAPE_8X2 " --n-swa 4")) {
        check_invariance(path);
        unlink(path);
    }
}

int main(void)
{
    const char *build = getenv("BUILD");
    snprintf(g_mk, sizeof g_mk, "%s/tools/mkmodel", build && *build ? build : "build");
    snprintf(g_vocab, sizeof g_vocab, "%s/models/stories260K.gguf", t_shared());
    snprintf(g_dir, sizeof g_dir, "/tmp/ifl_moe_XXXXXX");
    if (access(g_mk, X_OK) != 0 || !mkdtemp(g_dir)) {
        fprintf(stderr, "cannot run %s or make a temporary directory\n", g_mk);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    struct ifl_rng rng;
    ifl_rng_seed(&rng, 42);
    g_tok[0] = 1; /* BOS */
    for (int i = 1; i < N_TOK; i++)
        g_tok[i] = 3 + (int32_t)(ifl_rng_next(&rng) % 509);
    T_RUN(test_load);
    T_RUN(test_lora);
    T_RUN(test_qwen3moe_types);
    T_RUN(test_mixtral_types);
    T_RUN(test_gptoss_types);
    T_RUN(test_gptoss_caches);
    T_RUN(test_shapes);
    T_RUN(test_llamacpp);
    T_RUN(test_batch_invariance);
    rmdir(g_dir);
    return t_done();
}
