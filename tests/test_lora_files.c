/*
 * LoRA adapters from files (tools/mkmodel --lora-of, read by
 * src/model/lora.c) applied at run time by the forward pass, against the
 * float64 reference pass (tests/reffwd.c), which reads the same files with
 * code of its own, dequantises the base and adds s B (A x) in double.
 *
 * Bases: the reference models llama-f32, llama-q8_0, llama-q4_0 and
 * llama-q4_k_m, each with its weights repacked for the kernels (the
 * default) and not (IFL_REPACK=0): the adapters never touch the base's
 * layout. Tolerances as tests/test_forward_vs_reffwd.c states them (the
 * README's): F32 weights, max |d| <= 1e-5 * max |logit| (the merge
 * criterion; the engine keeps F32 activations); quantised, max |d| <= 0.15
 * std(logits) and mean |d| <= 0.03 std. Each adapter set must move the
 * logits by far more than the tolerance, so an adapter that did nothing
 * would fail. Two adapters at once, and an adapter held in F16, whose
 * rounding of A and B the bounds then allow for: 1e-3 * max |logit| on
 * F32 weights (measured 1.2e-4), 0.2 std on quantised ones (measured
 * 0.16 std on Q4_K_M, whose own rounding takes most of it).
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
#include "model/forward.h"
#include "model/kv_store.h"
#include "model/lora.h"
#include "model/lora_rt.h"
#include "model/model.h"
#include "reffwd.h"
#include "t.h"

#define N_TOK 32
#define BLOCK 16

static char g_dir[256];
static char g_mk[512];
static int32_t g_tok[N_TOK];

/* The engine over g_tok with the adapters at paths (scales), held in F16
 * when f16; logits [N_TOK][n_vocab]. */
static int engine(const char *base, const struct ref_lora *l, int n_l, int f16, float *logits,
                  char *err)
{
    struct ifl_model *m = NULL;
    struct ifl_kv_store *kv = NULL;
    struct ifl_fwd *f = NULL;
    struct ifl_lora_rt *rt[2] = {NULL, NULL};
    int rc = ifl_model_load(&m, base, err);
    if (rc)
        return rc;
    int32_t n_blocks = (N_TOK + BLOCK - 1) / BLOCK;
    rc = ifl_kv_store_create(&kv, &m->hp, IFL_TYPE_F32, n_blocks, BLOCK, err);
    struct ifl_fwd_config cfg = {.max_rows = N_TOK, .max_ctx = N_TOK, .n_threads = 2};
    if (!rc)
        rc = ifl_fwd_create(&f, m, kv, &cfg, err);
    for (int i = 0; i < n_l && !rc; i++) {
        struct ifl_lora *lo = NULL;
        rc = ifl_lora_load(&lo, l[i].path, m, err);
        if (!rc)
            rc = ifl_lora_rt_create(&rt[i], lo, m, f16, err);
        ifl_lora_free(lo);
    }
    int32_t table[(N_TOK + BLOCK - 1) / BLOCK];
    for (int i = 0; i < n_blocks; i++)
        table[i] = i;
    const int32_t *tables[1] = {table};
    int32_t pos[N_TOK], seq[N_TOK] = {0};
    uint8_t want[N_TOK];
    float sc[N_TOK * 2];
    for (int i = 0; i < N_TOK; i++) {
        pos[i] = i;
        want[i] = 1;
        for (int k = 0; k < n_l; k++)
            sc[i * n_l + k] = (float)l[k].scale;
    }
    if (!rc) {
        struct ifl_batch b = {.n_rows = N_TOK,
                              .tokens = g_tok,
                              .pos = pos,
                              .seq = seq,
                              .logits = want,
                              .n_seqs = 1,
                              .block_tables = tables,
                              .n_blocks = &n_blocks,
                              .n_lora = n_l,
                              .lora = (const struct ifl_lora_rt *const *)rt,
                              .lora_scale = sc};
        rc = ifl_forward(f, &b, logits, err);
    }
    ifl_lora_rt_free(rt[0]);
    ifl_lora_rt_free(rt[1]);
    ifl_fwd_free(f);
    ifl_kv_store_free(kv);
    ifl_model_free(m);
    return rc;
}

static int mk_adapter(const char *out, const char *base, const char *flags)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' --lora-of '%s' -o '%s' %s >/dev/null 2>&1", g_mk, base, out,
             flags);
    int rc = system(cmd);
    CHECK_MSG(rc == 0, "mkmodel failed (%d): %s", rc, cmd);
    return rc;
}

static void check(const char *name, int repack, const struct ref_lora *l, int n_l, int f16)
{
    char base[512], err[IFL_ERR_LEN] = "";
    snprintf(base, sizeof base, "%s/models/ref/%s.gguf", t_shared(), name);
    setenv("IFL_REPACK", repack ? "1" : "0", 1);
    int nv = 0;
    CHECK(ref_forward(base, g_tok, 0, NULL, &nv, err) == 0);
    size_t sz = (size_t)N_TOK * (size_t)(nv > 0 ? nv : 1);
    float *ref = calloc(sz, sizeof(float)), *ref0 = calloc(sz, sizeof(float));
    float *eng = calloc(sz, sizeof(float));
    int rc = ref_forward_lora(base, l, n_l, g_tok, N_TOK, ref, NULL, err);
    CHECK_MSG(rc == 0, "%s: ref_forward_lora: %s", name, err);
    if (!rc)
        rc = ref_forward(base, g_tok, N_TOK, ref0, NULL, err);
    if (!rc) {
        rc = engine(base, l, n_l, f16, eng, err);
        CHECK_MSG(rc == 0, "%s: engine: %s", name, err);
    }
    if (!rc) {
        double mean = 0, var = 0, big = 0, dmax = 0, dsum = 0, moved = 0;
        for (size_t i = 0; i < sz; i++)
            mean += ref[i];
        mean /= (double)sz;
        for (size_t i = 0; i < sz; i++) {
            double d = fabs((double)eng[i] - ref[i]);
            var += (ref[i] - mean) * (ref[i] - mean);
            big = fabs((double)ref[i]) > big ? fabs((double)ref[i]) : big;
            dmax = d > dmax ? d : dmax;
            dsum += d;
            double mv = fabs((double)ref[i] - ref0[i]);
            moved = mv > moved ? mv : moved;
        }
        double sd = sqrt(var / (double)sz), dmean = dsum / (double)sz;
        int quant = strcmp(name, "llama-f32") != 0;
        /* F16 adapters add their rounding (11 significant bits of A and B),
         * Q8_0 ones theirs (8 bits and a scale a block of 32, as a Q8_0
         * base's weights) */
        double tol_max = quant ? (f16 ? 0.2 : 0.15) * sd
                               : (f16 == 2 ? 2e-2
                                  : f16    ? 1e-3
                                           : 1e-5) *
                                     big;
        double tol_mean = quant ? 0.03 * sd : tol_max;
        fprintf(stderr,
                "  %-13s %-9s %s %-4s logit std %.3f  max |d| %.2e (tol %.2e)  mean %.2e  "
                "adapters move %.3f\n",
                name, repack ? "repacked" : "rows", n_l == 2 ? "two" : "one",
                f16 == 2 ? "q8_0"
                : f16    ? "f16"
                         : "f32",
                sd, dmax, tol_max, dmean, moved);
        CHECK_MSG(dmax <= tol_max, "%s: max |d| %.3g > %.3g", name, dmax, tol_max);
        CHECK_MSG(dmean <= tol_mean, "%s: mean |d| %.3g > %.3g", name, dmean, tol_mean);
        CHECK_MSG(moved > 5 * tol_max, "%s: the adapters move the logits by only %.3g", name,
                  moved);
    }
    free(ref);
    free(ref0);
    free(eng);
}

static void test_bases(void)
{
    static const char *const bases[] = {"llama-f32", "llama-q8_0", "llama-q4_0", "llama-q4_k_m"};
    char a[512], b[512], base[512];
    for (size_t i = 0; i < sizeof bases / sizeof bases[0]; i++) {
        snprintf(base, sizeof base, "%s/models/ref/%s.gguf", t_shared(), bases[i]);
        snprintf(a, sizeof a, "%s/%s-a.gguf", g_dir, bases[i]);
        snprintf(b, sizeof b, "%s/%s-b.gguf", g_dir, bases[i]);
        if (mk_adapter(a, base, "--rank 8 --alpha 16 --seed 3") ||
            mk_adapter(b, base, "--rank 16 --alpha 0 --seed 4 --lora-targets q,v,down,embd,output"))
            continue;
        struct ref_lora one[1] = {{a, 0.8}}, two[2] = {{a, 0.8}, {b, -0.3}};
        for (int repack = 1; repack >= 0; repack--) {
            check(bases[i], repack, one, 1, 0);
            check(bases[i], repack, two, 2, 0);
        }
        check(bases[i], 1, one, 1, 1);
        check(bases[i], 1, two, 2, 2);
        unlink(a);
        unlink(b);
    }
    unsetenv("IFL_REPACK");
}

int main(void)
{
    const char *build = getenv("BUILD");
    snprintf(g_mk, sizeof g_mk, "%s/tools/mkmodel", build && *build ? build : "build");
    snprintf(g_dir, sizeof g_dir, "/tmp/ifl_lorafiles_XXXXXX");
    if (access(g_mk, X_OK) != 0 || !mkdtemp(g_dir)) {
        fprintf(stderr, "test_lora_files: needs %s and a temporary directory\n", g_mk);
        return 1;
    }
    struct ifl_rng rng;
    ifl_rng_seed(&rng, 39);
    g_tok[0] = 1; /* BOS */
    for (int i = 1; i < N_TOK; i++)
        g_tok[i] = 3 + (int32_t)(ifl_rng_next(&rng) % 509);
    T_RUN(test_bases);
    rmdir(g_dir);
    return t_done();
}
