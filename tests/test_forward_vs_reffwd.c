/*
 * The engine's forward pass (src/model/forward.c, attention.c) against the float64
 * reference pass (tests/reffwd.c) on synthetic models from tools/mkmodel:
 * every architecture (llama, qwen2, qwen3 with head_dim != n_embd/n_head)
 * times every weight type, plus --tied and --rope-freqs variants.
 *
 * Each model evaluates one 40-token sequence, whole (one step, all rows)
 * and chunked (a 7-row prefill, then rows of 1, 5, ...); the chunked logits
 * must equal the whole ones bit for bit (forward.h's batch promise), and both
 * must agree with the reference:
 *   F32 / F16 / BF16 weights: the engine keeps activations in F32 (BF16:
 *     unless the kernels round them to BF16; then as Q8_0 below), so
 *     max |d| <= 1e-4 * max(1, std(logits)) (float vs double sums only);
 *   Q8_0 / Q4_0 / Q5_0 / Q5_1 / IQ4_NL / MXFP4 (activations rounded to Q8_0) and
 *   K-quants and IQ4_XS (Q8_K):
 *     max |d| <= 0.15 * std(logits) and mean |d| <= 0.03 * std(logits).
 *     Measured: max 0.05-0.07 std, mean about 0.012 std (logit std 0.32),
 *     in line with llama.cpp against exact logits in the README (0.05-0.15
 *     max at a logit std of 0.8); the bounds leave about 2x.
 * Top-1 must agree at every position where the reference's top-1 leads its
 * runner-up by more than 1e-5 (float weights) or 0.05 * std(logits)
 * (quantised: closer calls may flip legitimately under activation rounding;
 * that still checks 30-40 of the 40 positions), and at least half the
 * positions must qualify.
 *
 * mkmodel runs through system(): $BUILD/tools/mkmodel (BUILD defaults to
 * "build"), writing into a mkdtemp directory removed at the end.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/err.h"
#include "core/rng.h"
#include "kernels/kernels.h"
#include "model/forward.h"
#include "model/model.h"
#include "reffwd.h"
#include "t.h"

#define N_TOK 40
#define BLOCK 16

static char g_dir[256];
static char g_mk[512];
static char g_vocab[512];
static int32_t g_tok[N_TOK];
static double g_worst[3]; /* worst max |d| / std for float, q8_0/q4_0, k-quant classes */

/* Evaluates g_tok in steps of chunks[0], chunks[1], ... (the last entry
 * repeats); chunks {N_TOK} is one step. */
static int engine_logits(const char *path, const int *chunks, int n_chunks, float *out,
                         int *n_vocab, char *err)
{
    struct ifl_model *m = NULL;
    struct ifl_kv_store *kv = NULL;
    struct ifl_fwd *f = NULL;
    int rc = ifl_model_load(&m, path, err);
    if (rc)
        return rc;
    *n_vocab = m->hp.n_vocab;
    int32_t n_blocks = (N_TOK + BLOCK - 1) / BLOCK;
    rc = ifl_kv_store_create(&kv, &m->hp, IFL_TYPE_F32, n_blocks, BLOCK, err);
    struct ifl_fwd_config cfg = {.max_rows = N_TOK, .max_ctx = N_TOK, .n_threads = 2};
    if (!rc)
        rc = ifl_fwd_create(&f, m, kv, &cfg, err);
    int32_t table[(N_TOK + BLOCK - 1) / BLOCK];
    for (int i = 0; i < n_blocks; i++)
        table[i] = i;
    const int32_t *tables[1] = {table};
    int32_t pos[N_TOK], seq[N_TOK] = {0};
    uint8_t want[N_TOK];
    for (int i = 0; i < N_TOK; i++) {
        pos[i] = i;
        want[i] = 1;
    }
    for (int done = 0, c = 0; !rc && done < N_TOK; c++) {
        int rows = chunks[c < n_chunks ? c : n_chunks - 1];
        rows = rows < N_TOK - done ? rows : N_TOK - done;
        struct ifl_batch b = {
            .n_rows = rows,
            .tokens = g_tok + done,
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
    ifl_fwd_free(f);
    ifl_kv_store_free(kv);
    ifl_model_free(m);
    return rc;
}

/* 0: float weights, 1: Q8_0/Q4_0, 2: K-quants (from the type name). */
static int type_class(const char *type)
{
    /* BF16 weights on a table that rounds their activations to BF16
     * (kernels.h act_bf16; test_kernels bounds that per output): the class
     * of rounded activations. Measured 0.012-0.017 std max, 0.0025 mean. */
    if (!strcmp(type, "bf16") && ifl_kernels_best()->act_bf16[IFL_TYPE_BF16])
        return 1;
    if (!strcmp(type, "q8_0") || !strcmp(type, "q4_0") || !strcmp(type, "q5_0") ||
        !strcmp(type, "q5_1") || !strcmp(type, "iq4_nl") || !strcmp(type, "mxfp4"))
        return 1;
    if (type[0] == 'q' || type[0] == 'i')
        return 2;
    return 0;
}

static void check_model(const char *arch, const char *type, const char *extra)
{
    char path[512], cmd[2048], err[IFL_ERR_LEN] = "";
    snprintf(path, sizeof path, "%s/%s-%s%s.gguf", g_dir, arch, type, *extra ? "-x" : "");
    snprintf(cmd, sizeof cmd,
             "'%s' -o '%s' --vocab '%s' --arch %s --type %s --n-embd 256 --n-layer 2 "
             "--n-head 4 --n-head-kv 2 --n-ff 512 --seed 11 %s %s 2>/dev/null",
             g_mk, path, g_vocab, arch, type, !strcmp(arch, "qwen3") ? "--head-dim 128" : "",
             extra);
    int sys = system(cmd);
    CHECK_MSG(sys == 0, "mkmodel failed (%d): %s", sys, cmd);
    if (sys)
        return;

    int nv = 0, nv_ref = 0;
    CHECK(ref_forward(path, g_tok, 0, NULL, &nv_ref, err) == 0);
    size_t sz = (size_t)N_TOK * (size_t)(nv_ref > 0 ? nv_ref : 1);
    float *ref = malloc(sz * sizeof(float));
    float *whole = calloc(sz, sizeof(float));
    float *chunked = calloc(sz, sizeof(float));
    int rc = ref_forward(path, g_tok, N_TOK, ref, NULL, err);
    CHECK_MSG(rc == 0, "%s %s: ref_forward: %s", arch, type, err);
    int one[1] = {N_TOK}, steps[3] = {7, 1, 5};
    int rc1 = rc ? rc : engine_logits(path, one, 1, whole, &nv, err);
    CHECK_MSG(rc1 == 0, "%s %s: engine: %s", arch, type, err);
    int rc2 = rc1 ? rc1 : engine_logits(path, steps, 3, chunked, &nv, err);
    CHECK_MSG(rc2 == 0, "%s %s: engine (chunked): %s", arch, type, err);
    unlink(path);
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
    int cls = type_class(type);
    double tol_max = cls == 0 ? 1e-4 * (sd > 1 ? sd : 1) : 0.15 * sd;
    double tol_mean = cls == 0 ? tol_max : 0.03 * sd;
    double top_margin = cls == 0 ? 1e-5 : 0.05 * sd;

    double dmax = 0, dsum = 0;
    int top_checked = 0, top_bad = 0, chunk_diff = 0;
    for (int r = 0; r < N_TOK; r++) {
        const float *a = ref + (size_t)r * (size_t)nv, *b = whole + (size_t)r * (size_t)nv;
        const float *c = chunked + (size_t)r * (size_t)nv;
        int ba = 0, bb = 0;
        for (int v = 0; v < nv; v++) {
            double d = fabs((double)a[v] - (double)b[v]);
            dmax = d > dmax ? d : dmax;
            dsum += d;
            chunk_diff += memcmp(&b[v], &c[v], sizeof(float)) != 0;
            ba = a[v] > a[ba] ? v : ba;
            bb = b[v] > b[bb] ? v : bb;
        }
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
    g_worst[cls] = dmax / sd > g_worst[cls] ? dmax / sd : g_worst[cls];
    fprintf(stderr,
            "  %-6s %-7s %-12s logit std %.3f  max |d| %.2e (tol %.2e)  mean %.2e  "
            "top-1 %d/%d  chunked %s\n",
            arch, type, extra, sd, dmax, tol_max, dmean, top_checked - top_bad, top_checked,
            chunk_diff ? "DIFFERS" : "bitwise equal");
    CHECK_MSG(dmax <= tol_max, "%s %s %s: max |d| %.3g > %.3g", arch, type, extra, dmax, tol_max);
    CHECK_MSG(dmean <= tol_mean, "%s %s %s: mean |d| %.3g > %.3g", arch, type, extra, dmean,
              tol_mean);
    CHECK_MSG(top_bad == 0, "%s %s %s: top-1 differs at %d of %d positions", arch, type, extra,
              top_bad, top_checked);
    CHECK_MSG(top_checked >= N_TOK / 2, "%s %s %s: only %d clear top-1 positions", arch, type,
              extra, top_checked);
    CHECK_MSG(chunk_diff == 0, "%s %s %s: chunked logits differ from whole in %d values", arch,
              type, extra, chunk_diff);
out:
    free(ref);
    free(whole);
    free(chunked);
}

static const char *const types[] = {"f32",  "f16",  "bf16", "q8_0",   "q4_0",
                                    "q4_k", "q5_k", "q6_k", "q4_k_m", "q5_k_m"};
#define N_TYPES (sizeof types / sizeof types[0])

static void run_arch(const char *arch)
{
    for (size_t t = 0; t < N_TYPES; t++)
        check_model(arch, types[t], "");
}

static void test_llama(void)
{
    run_arch("llama");
}
static void test_qwen2(void)
{
    run_arch("qwen2");
}
static void test_qwen3(void)
{
    run_arch("qwen3");
}

/* The newer weight types (Q8_0 activations for the 32-element ones, Q8_K
 * for the rest), on llama and on qwen3 (whose head_dim 128 makes attn_q
 * 256 -> 512): the types are the weights' matter, not the architecture's. */
static const char *const new_types[] = {"q5_0", "q5_1", "iq4_nl", "iq4_xs",
                                        "q3_k", "q2_k", "mxfp4"};

static void test_new_types(void)
{
    for (size_t t = 0; t < sizeof new_types / sizeof *new_types; t++) {
        check_model("llama", new_types[t], "");
        check_model("qwen3", new_types[t], "");
    }
}

static void test_variants(void)
{
    check_model("llama", "f16", "--tied");
    check_model("llama", "q4_k_m", "--tied");
    check_model("llama", "f32", "--rope-freqs");
    check_model("qwen2", "q8_0", "--tied");
}

int main(void)
{
    const char *build = getenv("BUILD");
    snprintf(g_mk, sizeof g_mk, "%s/tools/mkmodel", build && *build ? build : "build");
    snprintf(g_vocab, sizeof g_vocab, "%s/models/stories260K.gguf", t_shared());
    snprintf(g_dir, sizeof g_dir, "/tmp/ifl_fwdref_XXXXXX");
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

    T_RUN(test_llama);
    T_RUN(test_qwen2);
    T_RUN(test_qwen3);
    T_RUN(test_new_types);
    T_RUN(test_variants);
    fprintf(stderr, "  worst max |d| / logit std: float %.2e, q8_0/q4_0 %.3f, k-quants %.3f\n",
            g_worst[0], g_worst[1], g_worst[2]);
    rmdir(g_dir);
    return t_done();
}
