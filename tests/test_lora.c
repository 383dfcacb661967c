/*
 * LoRA adapters: the loader (src/model/lora.c), `tools/mkmodel --lora-of`
 * and `inflight lora merge`, checked against the float64 reference pass
 * (tests/reffwd.c), which reads adapter files with code of its own and
 * applies them at run time as a separate term, s B (A x).
 *
 * - Merge equivalence: an adapter merged into F32 by `inflight lora merge`
 *   and run by the engine's forward pass gives the reference's run-time
 *   logits within 1e-5 of the largest |logit| (the README's sharp
 *   tolerance for an engine with F32 activations), and the engine's greedy
 *   ids are the reference's argmax wherever its margin is clear. Bases:
 *   stories260K, llama-f32 (every target, token_embd and output included,
 *   two adapters at once), llama-tied-f16 (token_embd of a tied base),
 *   qwen3-hd64-f16 (a Q8_0 adapter of rank 32). Each adapter must move the
 *   logits by far more than the tolerance, so a merge that did nothing
 *   would fail.
 * - Scale 0: the merged model's logits are bitwise the base's.
 * - The loader's struct: shapes, ranks, alpha, the F32 values of every
 *   type against the file, token_embd's transposed lora_a.
 * - Bad adapters, each an error naming the tensor or key, *out NULL:
 *   wrong architecture, wrong shapes, a rank that differs between A and B,
 *   Q4_0, a lora_a without its lora_b (and the other way), unknown and
 *   unadaptable tensors, a tied base's output, NaN, an activated LoRA,
 *   wrong general.type / adapter.type, and truncations at every byte of
 *   the header and at points through the data. Norm tensors are ignored.
 *
 * Adapters are made at test time by $BUILD/tools/mkmodel, bad ones by
 * rewriting a good one with the GGUF writer, all in a mkdtemp directory.
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
#include "model/gguf.h"
#include "model/kv_store.h"
#include "model/lora.h"
#include "model/model.h"
#include "reffwd.h"
#include "t.h"

#define N_TOK 32
#define N_GEN 24
#define BLOCK 16
#define MAX_CTX 64

static char g_dir[256];
static char g_mk[512];
static char g_bin[512];
static char g_stories[512];
static int32_t g_tok[N_TOK];
static const int32_t g_prompt[] = {1, 403, 407, 261, 378}; /* "Once upon a time" */
#define N_PROMPT 5

static void ref_path(char *out, size_t cap, const char *name)
{
    snprintf(out, cap, "%s/models/ref/%s.gguf", t_shared(), name);
}

static int run(const char *cmd)
{
    int rc = system(cmd);
    return rc == -1 ? -1 : WEXITSTATUS(rc);
}

/* Runs the engine over tokens[0..n) as one sequence, whole, or one row at
 * a time when `greedy` (then tokens[n_fixed..n) are chosen by argmax and
 * written back). logits: [n][n_vocab], may be NULL. */
static int engine(const char *path, int32_t *tokens, int n, int n_fixed, int greedy, float *logits,
                  char *err)
{
    struct ifl_model *m = NULL;
    struct ifl_kv_store *kv = NULL;
    struct ifl_fwd *f = NULL;
    int rc = ifl_model_load(&m, path, err);
    if (rc)
        return rc;
    const int nv = m->hp.n_vocab;
    int32_t n_blocks = (MAX_CTX + BLOCK - 1) / BLOCK;
    rc = ifl_kv_store_create(&kv, &m->hp, IFL_TYPE_F32, n_blocks, BLOCK, err);
    struct ifl_fwd_config cfg = {.max_rows = MAX_CTX, .max_ctx = MAX_CTX, .n_threads = 2};
    if (!rc)
        rc = ifl_fwd_create(&f, m, kv, &cfg, err);
    int32_t table[(MAX_CTX + BLOCK - 1) / BLOCK];
    for (int i = 0; i < n_blocks; i++)
        table[i] = i;
    const int32_t *tables[1] = {table};
    int32_t pos[MAX_CTX], seq[MAX_CTX] = {0};
    uint8_t want[MAX_CTX];
    for (int i = 0; i < MAX_CTX; i++) {
        pos[i] = i;
        want[i] = 1;
    }
    float *row = malloc(sizeof(float) * (size_t)nv * MAX_CTX);
    if (!rc && !row)
        rc = IFL_ENOMEM;
    for (int done = 0; !rc && done < n;) {
        int rows = greedy ? (done == 0 ? n_fixed : 1) : n;
        struct ifl_batch b = {
            .n_rows = rows,
            .tokens = tokens + done,
            .pos = pos + done,
            .seq = seq + done,
            .logits = want + done,
            .n_seqs = 1,
            .block_tables = tables,
            .n_blocks = &n_blocks,
        };
        rc = ifl_forward(f, &b, row, err);
        if (rc)
            break;
        if (logits)
            memcpy(logits + (size_t)done * nv, row, sizeof(float) * (size_t)nv * (size_t)rows);
        done += rows;
        if (greedy && done < n) {
            const float *last = row + (size_t)(rows - 1) * nv;
            int best = 0;
            for (int v = 1; v < nv; v++)
                best = last[v] > last[best] ? v : best;
            tokens[done] = best;
        }
    }
    free(row);
    ifl_fwd_free(f);
    ifl_kv_store_free(kv);
    ifl_model_free(m);
    return rc;
}

/* Makes an adapter with mkmodel; returns 0 when it was written. */
static int mk_adapter(const char *out, const char *base, const char *flags)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' --lora-of '%s' -o '%s' %s 2>/dev/null", g_mk, base, out, flags);
    int rc = run(cmd);
    CHECK_MSG(rc == 0, "mkmodel failed (%d): %s", rc, cmd);
    return rc;
}

static int merge(const char *base, const char *loras, const char *out)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' lora merge -m '%s' %s -o '%s' 2>/dev/null", g_bin, base, loras,
             out);
    int rc = run(cmd);
    CHECK_MSG(rc == 0, "merge failed (%d): %s", rc, cmd);
    return rc;
}

static double max_abs(const float *x, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++)
        m = fabs(x[i]) > m ? fabs(x[i]) : m;
    return m;
}

static double max_diff(const float *a, const float *b, size_t n)
{
    double m = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        m = d > m ? d : m;
    }
    return m;
}

/* The merge of `loras` (ref_lora list, given to the merge as FILE:SCALE)
 * into base, run by the engine, against reffwd applying them at run time. */
static void check_merge(const char *what, const char *base, const struct ref_lora *loras, int n_l)
{
    char out[512], args[2048] = "", err[IFL_ERR_LEN] = "";
    snprintf(out, sizeof out, "%s/merged.gguf", g_dir);
    for (int i = 0; i < n_l; i++) {
        size_t k = strlen(args);
        snprintf(args + k, sizeof args - k, " --lora '%s:%.9g'", loras[i].path, loras[i].scale);
    }
    if (merge(base, args, out))
        return;
    int nv = 0;
    CHECK(ref_forward(base, g_tok, 0, NULL, &nv, err) == 0);
    size_t sz = (size_t)N_TOK * (size_t)nv;
    float *ref = calloc(sz, sizeof(float)), *ref0 = calloc(sz, sizeof(float));
    float *eng = calloc(sz, sizeof(float));
    int rc = ref_forward_lora(base, loras, n_l, g_tok, N_TOK, ref, NULL, err);
    CHECK_MSG(rc == 0, "%s: ref_forward_lora: %s", what, err);
    int rc0 = rc ? rc : ref_forward(base, g_tok, N_TOK, ref0, NULL, err);
    int32_t tok[N_TOK];
    memcpy(tok, g_tok, sizeof tok);
    int rc1 = rc0 ? rc0 : engine(out, tok, N_TOK, N_TOK, 0, eng, err);
    CHECK_MSG(rc1 == 0, "%s: engine: %s", what, err);
    if (rc || rc0 || rc1)
        goto out;
    double scale = max_abs(ref, sz), tol = 1e-5 * scale;
    double d = max_diff(ref, eng, sz), moved = max_diff(ref, ref0, sz);
    CHECK_MSG(d <= tol, "%s: merged engine vs run-time reference: max |d| %.3g > %.3g", what, d,
              tol);
    CHECK_MSG(moved > 1000 * tol, "%s: the adapter moves the logits by only %.3g", what, moved);

    /* greedy ids: the engine decodes the merged model token by token; the
     * reference's argmax over the same sequence must agree where clear */
    int32_t seq[N_PROMPT + N_GEN];
    memcpy(seq, g_prompt, sizeof g_prompt);
    float *gl = calloc((size_t)(N_PROMPT + N_GEN) * (size_t)nv, sizeof(float));
    rc = engine(out, seq, N_PROMPT + N_GEN, N_PROMPT, 1, NULL, err);
    CHECK_MSG(rc == 0, "%s: engine greedy: %s", what, err);
    if (!rc)
        rc = ref_forward_lora(base, loras, n_l, seq, N_PROMPT + N_GEN, gl, NULL, err);
    int checked = 0, bad = 0;
    for (int k = 0; !rc && k < N_GEN; k++) {
        const float *r = gl + (size_t)(N_PROMPT - 1 + k) * nv;
        int best = 0;
        for (int v = 1; v < nv; v++)
            best = r[v] > r[best] ? v : best;
        float second = -INFINITY;
        for (int v = 0; v < nv; v++)
            if (v != best && r[v] > second)
                second = r[v];
        if (r[best] - second > 2 * tol) {
            checked++;
            bad += best != seq[N_PROMPT + k];
        }
    }
    CHECK_MSG(!rc && bad == 0 && checked >= N_GEN / 2, "%s: greedy ids differ at %d of %d steps",
              what, bad, checked);
    fprintf(stderr,
            "  %-28s max |logit| %.3f  merged vs run-time max |d| %.2e (tol %.2e)  adapter moves "
            "%.3f  greedy %d/%d\n",
            what, scale, d, tol, moved, checked - bad, checked);
    free(gl);
out:
    unlink(out);
    free(ref);
    free(ref0);
    free(eng);
}

static void test_merge_stories(void)
{
    char a[512];
    snprintf(a, sizeof a, "%s/stories.lora.gguf", g_dir);
    if (mk_adapter(a, g_stories, "--rank 4 --alpha 6 --seed 3"))
        return;
    struct ref_lora l[1] = {{a, 0.8}};
    check_merge("stories260K r4", g_stories, l, 1);
}

static void test_merge_llama_all_targets(void)
{
    char base[512], a1[512], a2[512];
    ref_path(base, sizeof base, "llama-f32");
    snprintf(a1, sizeof a1, "%s/l1.gguf", g_dir);
    snprintf(a2, sizeof a2, "%s/l2.gguf", g_dir);
    if (mk_adapter(a1, base,
                   "--rank 8 --alpha 16 --lora-type f16 --seed 5 "
                   "--lora-targets q,k,v,o,gate,up,down,embd,output") ||
        mk_adapter(a2, base, "--rank 4 --alpha 0 --lora-type bf16 --seed 6 --lora-targets q,v"))
        return;
    struct ref_lora one[1] = {{a1, 0.7}};
    check_merge("llama-f32 all targets f16", base, one, 1);
    struct ref_lora two[2] = {{a1, 0.7}, {a2, -0.5}};
    check_merge("llama-f32 two adapters", base, two, 2);
}

static void test_merge_tied_embd(void)
{
    char base[512], a[512];
    ref_path(base, sizeof base, "llama-tied-f16");
    snprintf(a, sizeof a, "%s/tied.gguf", g_dir);
    if (mk_adapter(a, base, "--rank 8 --seed 7 --lora-targets embd,q,down"))
        return;
    struct ref_lora l[1] = {{a, 1.0}};
    check_merge("llama-tied-f16 embd", base, l, 1);
}

static void test_merge_q8_adapter(void)
{
    char base[512], a[512];
    ref_path(base, sizeof base, "qwen3-hd64-f16");
    snprintf(a, sizeof a, "%s/q8.gguf", g_dir);
    if (mk_adapter(a, base, "--rank 32 --alpha 48 --lora-type q8_0 --seed 8"))
        return;
    struct ref_lora l[1] = {{a, 1.0}};
    check_merge("qwen3-hd64-f16 q8_0 r32", base, l, 1);
}

/* Scale 0: bitwise the base's logits, also on a base with every target. */
static void test_merge_scale_zero(void)
{
    char base[512], a[512], out[512], err[IFL_ERR_LEN] = "";
    const char *bases[2] = {g_stories, base};
    ref_path(base, sizeof base, "llama-f32");
    for (int i = 0; i < 2; i++) {
        snprintf(a, sizeof a, "%s/z%d.gguf", g_dir, i);
        snprintf(out, sizeof out, "%s/z%d.merged.gguf", g_dir, i);
        char args[600];
        snprintf(args, sizeof args, "--lora '%s:0'", a);
        if (mk_adapter(a, bases[i], "--rank 8 --lora-targets q,k,v,o,gate,up,down,embd,output") ||
            merge(bases[i], args, out))
            return;
        int nv = 0;
        CHECK(ref_forward(bases[i], g_tok, 0, NULL, &nv, err) == 0);
        size_t sz = (size_t)N_TOK * (size_t)nv;
        float *x = calloc(sz, sizeof(float)), *y = calloc(sz, sizeof(float));
        int32_t t1[N_TOK], t2[N_TOK];
        memcpy(t1, g_tok, sizeof t1);
        memcpy(t2, g_tok, sizeof t2);
        CHECK(engine(bases[i], t1, N_TOK, N_TOK, 0, x, err) == 0);
        CHECK(engine(out, t2, N_TOK, N_TOK, 0, y, err) == 0);
        CHECK_MSG(memcmp(x, y, sz * sizeof(float)) == 0,
                  "%s: scale-0 merge differs from the base (max |d| %.3g)", bases[i],
                  max_diff(x, y, sz));
        unlink(out);
        free(x);
        free(y);
    }
}

/* ---- the loader's struct ------------------------------------------- */

static struct ifl_model *g_base; /* stories260K */

/* Every value of l's matrix equals the file's tensor `name`, dequantised. */
static void check_values(const struct ifl_gguf *g, const char *name, const float *v, int64_t n)
{
    const struct ifl_gguf_tensor *t = ifl_gguf_find_tensor(g, name);
    CHECK_MSG(t != NULL, "tensor %s missing", name);
    if (!t)
        return;
    CHECK_EQ(t->ne[0] * t->ne[1], n);
    float *w = malloc(sizeof(float) * (size_t)n);
    ifl_kernels_ref()->dequant[t->type](t->data, w, n);
    CHECK_MSG(memcmp(w, v, sizeof(float) * (size_t)n) == 0, "%s: values differ", name);
    free(w);
}

static void test_load_struct(void)
{
    static const char *const types[] = {"f32", "f16", "bf16", "q8_0"};
    const struct ifl_hparams *hp = &g_base->hp;
    for (int ty = 0; ty < 4; ty++) {
        char a[512], flags[256], err[IFL_ERR_LEN] = "";
        snprintf(a, sizeof a, "%s/s-%s.gguf", g_dir, types[ty]);
        /* rank 32 so that q8_0 covers lora_b too */
        snprintf(flags, sizeof flags,
                 "--rank 32 --alpha 12 --lora-type %s --lora-targets q,o,down,embd,output",
                 types[ty]);
        if (mk_adapter(a, g_stories, flags))
            return;
        struct ifl_lora *l = NULL;
        int rc = ifl_lora_load(&l, a, g_base, err);
        CHECK_MSG(rc == 0, "%s: %s", types[ty], err);
        if (rc)
            continue;
        struct ifl_gguf *g = NULL;
        CHECK(ifl_gguf_open(&g, a, err) == 0);
        CHECK_EQ(l->n_layer, hp->n_layer);
        CHECK_EQ(l->n_adapted, 3 * hp->n_layer + 2);
        CHECK(l->alpha == 12.0f);
        CHECK_STR(l->arch, "llama");
        CHECK_STR(l->path, a);
        size_t bytes = 0;
        for (int il = 0; il < hp->n_layer; il++) {
            for (int t = 0; t < IFL_LORA_N_TARGETS; t++) {
                const struct ifl_lora_mat *m = ifl_lora_layer_mat(l, il, (enum ifl_lora_target)t);
                int on = t == IFL_LORA_WQ || t == IFL_LORA_WO || t == IFL_LORA_DOWN;
                CHECK_EQ(m->rank, on ? 32 : 0);
                CHECK(on ? m->a && m->b : !m->a && !m->b);
                if (!on)
                    continue;
                const struct ifl_mat *w = t == IFL_LORA_WQ   ? &g_base->layers[il].wq
                                          : t == IFL_LORA_WO ? &g_base->layers[il].wo
                                                             : &g_base->layers[il].w_down;
                CHECK_EQ(m->n_in, w->n_in);
                CHECK_EQ(m->n_out, w->n_out);
                CHECK(m->alpha == 12.0f);
                bytes += sizeof(float) * (size_t)(m->rank * (m->n_in + m->n_out));
                char nm[96];
                const char *tn = t == IFL_LORA_WQ   ? "attn_q"
                                 : t == IFL_LORA_WO ? "attn_output"
                                                    : "ffn_down";
                snprintf(nm, sizeof nm, "blk.%d.%s.weight.lora_a", il, tn);
                check_values(g, nm, m->a, m->rank * m->n_in);
                snprintf(nm, sizeof nm, "blk.%d.%s.weight.lora_b", il, tn);
                check_values(g, nm, m->b, m->rank * m->n_out);
            }
        }
        /* token_embd: n_in n_vocab, n_out n_embd, a [n_vocab][r] as stored */
        CHECK_EQ(l->tok_embd.rank, 32);
        CHECK_EQ(l->tok_embd.n_in, hp->n_vocab);
        CHECK_EQ(l->tok_embd.n_out, hp->n_embd);
        check_values(g, "token_embd.weight.lora_a", l->tok_embd.a, 32 * (int64_t)hp->n_vocab);
        check_values(g, "token_embd.weight.lora_b", l->tok_embd.b, 32 * (int64_t)hp->n_embd);
        CHECK_EQ(l->output.rank, 32);
        CHECK_EQ(l->output.n_in, hp->n_embd);
        CHECK_EQ(l->output.n_out, hp->n_vocab);
        bytes += sizeof(float) * 32 * 2 * (size_t)(hp->n_vocab + hp->n_embd);
        CHECK(l->bytes >= bytes && l->bytes < bytes + 65536);
        CHECK_NEAR(ifl_lora_scale(&l->output, 0.5f), 0.5 * 12.0 / 32.0, 1e-7);
        ifl_gguf_free(g);
        ifl_lora_free(l);
    }
    ifl_lora_free(NULL);
}

/* ---- bad adapters --------------------------------------------------- */

/* A rewrite of a good adapter. Fields left 0/NULL change nothing. */
struct edit {
    const char *key, *val;    /* set string key (replacing it) */
    const char *drop_key;     /* remove a key */
    const char *drop;         /* remove a tensor */
    const char *reshape;      /* give a tensor another shape of as many values */
    int64_t ne0, ne1;         /* ... this one */
    const char *retype;       /* re-encode a tensor as ... */
    enum ifl_type type;       /* ... this type */
    const char *nan;          /* a NaN at a tensor's element 3 (F32 tensors) */
    const char *add;          /* an extra F32 tensor [add_ne0, add_ne1] */
    int64_t add_ne0, add_ne1; /* (add_ne1 0: 1-D) */
    const char *add_u32_arr;  /* an extra u32 array key */
};

static int rewrite(const char *src, const char *dst, const struct edit *e)
{
    char err[IFL_ERR_LEN] = "";
    struct ifl_gguf *g = NULL;
    struct ifl_gguf_writer *w = NULL;
    int rc = ifl_gguf_open(&g, src, err);
    if (!rc)
        rc = ifl_gguf_writer_create(&w);
    for (int64_t i = 0; !rc && i < ifl_gguf_n_kv(g); i++) {
        const char *k = ifl_gguf_key(g, i);
        if ((e->key && !strcmp(k, e->key)) || (e->drop_key && !strcmp(k, e->drop_key)))
            continue;
        rc = ifl_gguf_writer_copy_kv(w, g, i);
    }
    if (!rc && e->key)
        rc = ifl_gguf_writer_set_str(w, e->key, e->val, strlen(e->val));
    if (!rc && e->add_u32_arr) {
        uint32_t v[2] = {5, 6};
        rc = ifl_gguf_writer_set_arr(w, e->add_u32_arr, IFL_GGUF_UINT32, v, 2);
    }
    for (int64_t i = 0; !rc && i < ifl_gguf_n_tensors(g); i++) {
        const struct ifl_gguf_tensor *t = ifl_gguf_tensor(g, i);
        int64_t ne[4] = {t->ne[0], t->ne[1], 1, 1};
        if (e->drop && !strcmp(t->name, e->drop))
            continue;
        if (e->reshape && !strcmp(t->name, e->reshape)) {
            ne[0] = e->ne0;
            ne[1] = e->ne1;
        }
        if (e->retype && !strcmp(t->name, e->retype)) {
            int64_t n = t->ne[0] * t->ne[1];
            float *f = malloc(sizeof(float) * (size_t)n);
            size_t nb = ifl_type_row_size(e->type, t->ne[0]) * (size_t)t->ne[1];
            void *q = malloc(nb);
            ifl_kernels_ref()->dequant[t->type](t->data, f, n);
            ifl_kernels_ref()->quant[e->type](f, q, n);
            rc = ifl_gguf_writer_add_tensor(w, t->name, e->type, 2, ne, q, nb);
            free(f);
            free(q);
            continue;
        }
        if (e->nan && !strcmp(t->name, e->nan)) {
            float *f = malloc(t->nbytes);
            memcpy(f, t->data, t->nbytes);
            f[3] = NAN;
            rc = ifl_gguf_writer_add_tensor(w, t->name, t->type, 2, ne, f, t->nbytes);
            free(f);
            continue;
        }
        rc = ifl_gguf_writer_add_tensor(w, t->name, t->type, 2, ne, t->data, t->nbytes);
    }
    if (!rc && e->add) {
        int64_t ne[2] = {e->add_ne0, e->add_ne1 ? e->add_ne1 : 1};
        size_t n = (size_t)(ne[0] * ne[1]);
        float *f = calloc(n, sizeof(float));
        rc = ifl_gguf_writer_add_tensor(w, e->add, IFL_TYPE_F32, e->add_ne1 ? 2 : 1, ne, f,
                                        n * sizeof(float));
        free(f);
    }
    if (!rc)
        rc = ifl_gguf_writer_write(w, dst, err);
    CHECK_MSG(rc == 0, "rewrite %s: %s (%d)", src, err, rc);
    ifl_gguf_writer_free(w);
    ifl_gguf_free(g);
    return rc;
}

static char g_good[512]; /* stories260K adapter: every projection, f32, rank 4 */

/* The rewrite of g_good by e must fail to load with status `want` and a
 * message containing each of the needles (NULL-terminated). */
static void expect_bad(const char *what, const struct edit *e, int want, const char *const *needles)
{
    char bad[512], err[IFL_ERR_LEN] = "";
    snprintf(bad, sizeof bad, "%s/bad.gguf", g_dir);
    if (rewrite(g_good, bad, e))
        return;
    struct ifl_lora *l = (struct ifl_lora *)1;
    int rc = ifl_lora_load(&l, bad, g_base, err);
    CHECK_MSG(rc == want, "%s: status %d (%s), want %d", what, rc, err, want);
    CHECK_MSG(l == NULL, "%s: *out not NULL on failure", what);
    CHECK_MSG(!strncmp(err, "lora: ", 6), "%s: message '%s'", what, err);
    for (int i = 0; needles[i]; i++)
        CHECK_MSG(strstr(err, needles[i]) != NULL, "%s: '%s' lacks '%s'", what, err, needles[i]);
    fprintf(stderr, "  %-22s %s\n", what, err);
    if (!rc)
        ifl_lora_free(l);
    unlink(bad);
}

#define NEEDLES(...) ((const char *const[]){__VA_ARGS__, NULL})

static void test_bad_adapters(void)
{
    const int E = IFL_EFORMAT, U = IFL_EUNSUPPORTED;
    expect_bad("architecture", &(struct edit){.key = "general.architecture", .val = "qwen2"}, E,
               NEEDLES("architecture 'qwen2'", "'llama'"));
    expect_bad("general.type", &(struct edit){.key = "general.type", .val = "model"}, E,
               NEEDLES("general.type", "'model'"));
    expect_bad("no general.type", &(struct edit){.drop_key = "general.type"}, E,
               NEEDLES("general.type", "missing"));
    expect_bad("adapter.type", &(struct edit){.key = "adapter.type", .val = "ia3"}, U,
               NEEDLES("adapter.type", "'ia3'"));
    expect_bad("alpha type", &(struct edit){.key = "adapter.lora.alpha", .val = "8"}, E,
               NEEDLES("adapter.lora.alpha"));
    expect_bad("activated LoRA", &(struct edit){.add_u32_arr = "adapter.alora.invocation_tokens"},
               U, NEEDLES("adapter.alora.invocation_tokens"));
    const int64_t n_embd = g_base->hp.n_embd;
    expect_bad("shape of lora_a",
               &(struct edit){.reshape = "blk.1.attn_k.weight.lora_a", .ne0 = n_embd / 2, .ne1 = 8},
               E, NEEDLES("'blk.1.attn_k.weight.lora_a'", "expected [64, r]"));
    expect_bad("rank of lora_b",
               &(struct edit){.reshape = "blk.2.ffn_up.weight.lora_b",
                              .ne0 = 2,
                              .ne1 = 2 * g_base->layers[2].w_up.n_out},
               E, NEEDLES("'blk.2.ffn_up.weight.lora_b'", "r = 4"));
    expect_bad("q4_0",
               &(struct edit){.retype = "blk.0.attn_v.weight.lora_a", .type = IFL_TYPE_Q4_0}, U,
               NEEDLES("'blk.0.attn_v.weight.lora_a'", "q4_0"));
    expect_bad(
        "lora_a alone", &(struct edit){.drop = "blk.4.ffn_gate.weight.lora_b"}, E,
        NEEDLES("'blk.4.ffn_gate.weight.lora_a'", "no matching", "blk.4.ffn_gate.weight.lora_b"));
    expect_bad("lora_b alone", &(struct edit){.drop = "blk.0.attn_q.weight.lora_a"}, E,
               NEEDLES("'blk.0.attn_q.weight.lora_b'", "blk.0.attn_q.weight.lora_a"));
    expect_bad("unknown tensor", &(struct edit){.add = "rope_scale.weight", .add_ne0 = 4}, E,
               NEEDLES("'rope_scale.weight'", "neither"));
    expect_bad("layer past the base",
               &(struct edit){.add = "blk.9.attn_q.weight.lora_a", .add_ne0 = n_embd, .add_ne1 = 4},
               E, NEEDLES("'blk.9.attn_q.weight.lora_a'", "no tensor 'blk.9.attn_q.weight'"));
    expect_bad(
        "non-canonical name",
        &(struct edit){.add = "blk.01.attn_q.weight.lora_a", .add_ne0 = n_embd, .add_ne1 = 4}, E,
        NEEDLES("'blk.01.attn_q.weight.lora_a'"));
    expect_bad(
        "norm adapted",
        &(struct edit){.add = "blk.0.attn_norm.weight.lora_a", .add_ne0 = n_embd, .add_ne1 = 4}, U,
        NEEDLES("'blk.0.attn_norm.weight.lora_a'", "cannot adapt"));
    expect_bad("NaN", &(struct edit){.nan = "blk.3.attn_output.weight.lora_b"}, E,
               NEEDLES("'blk.3.attn_output.weight.lora_b'", "not finite"));

    /* norm tensors are skipped, as llama.cpp skips them */
    char ok[512], err[IFL_ERR_LEN] = "";
    snprintf(ok, sizeof ok, "%s/norm.gguf", g_dir);
    if (!rewrite(g_good, ok, &(struct edit){.add = "blk.0.ffn_norm.weight", .add_ne0 = n_embd})) {
        struct ifl_lora *l = NULL;
        CHECK_MSG(ifl_lora_load(&l, ok, g_base, err) == 0, "norm: %s", err);
        CHECK(l && l->n_adapted == 7 * g_base->hp.n_layer);
        ifl_lora_free(l);
    }
    /* alpha absent: 0, the user's scale alone */
    if (!rewrite(g_good, ok, &(struct edit){.drop_key = "adapter.lora.alpha"})) {
        struct ifl_lora *l = NULL;
        CHECK_MSG(ifl_lora_load(&l, ok, g_base, err) == 0, "no alpha: %s", err);
        if (l) {
            CHECK(l->alpha == 0.0f);
            CHECK(ifl_lora_scale(ifl_lora_layer_mat(l, 0, IFL_LORA_WQ), 0.25f) == 0.25f);
        }
        ifl_lora_free(l);
    }
    unlink(ok);

    /* an adapter of another model of the same architecture: shapes differ */
    char other[512], base[512];
    ref_path(base, sizeof base, "llama-f32");
    snprintf(other, sizeof other, "%s/other.gguf", g_dir);
    if (!mk_adapter(other, base, "--rank 4 --lora-targets v")) {
        struct ifl_lora *l = NULL;
        CHECK_EQ(ifl_lora_load(&l, other, g_base, err), IFL_EFORMAT);
        CHECK_MSG(strstr(err, "'blk.0.attn_v.weight.lora_a'") && strstr(err, "[256, 4"), "%s", err);
        fprintf(stderr, "  %-22s %s\n", "another model", err);
    }
    /* output.weight of a tied base */
    char tied[512];
    ref_path(tied, sizeof tied, "llama-tied-f16");
    if (!mk_adapter(other, base, "--rank 4 --lora-targets output")) {
        struct ifl_model *tb = NULL;
        struct ifl_lora *l = NULL;
        CHECK(ifl_model_load(&tb, tied, err) == 0);
        CHECK_EQ(ifl_lora_load(&l, other, tb, err), IFL_EFORMAT);
        CHECK_MSG(strstr(err, "'output.weight.lora_a'") && strstr(err, "tied"), "%s", err);
        fprintf(stderr, "  %-22s %s\n", "tied output", err);
        ifl_model_free(tb);
    }
    unlink(other);
    /* a missing file */
    struct ifl_lora *l = NULL;
    CHECK_EQ(ifl_lora_load(&l, "/nonexistent/x.gguf", g_base, err), IFL_EIO);
    CHECK(strstr(err, "lora: ") == err && strstr(err, "/nonexistent/x.gguf"));
}

/* Every prefix of the header, and prefixes through the data. */
static void test_truncated(void)
{
    FILE *f = fopen(g_good, "rb");
    CHECK(f != NULL);
    if (!f)
        return;
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = malloc((size_t)size);
    CHECK(fread(buf, 1, (size_t)size, f) == (size_t)size);
    fclose(f);
    struct ifl_gguf *g = NULL;
    char err[IFL_ERR_LEN] = "", cut[512];
    CHECK(ifl_gguf_open(&g, g_good, err) == 0);
    long data_off = (long)ifl_gguf_data_offset(g);
    ifl_gguf_free(g);
    snprintf(cut, sizeof cut, "%s/cut.gguf", g_dir);
    int tried = 0, failed = 0;
    for (long n = 0; n < size; n += n < data_off + 64 ? 1 : (size - data_off) / 97 + 1) {
        FILE *o = fopen(cut, "wb");
        fwrite(buf, 1, (size_t)n, o);
        fclose(o);
        struct ifl_lora *l = (struct ifl_lora *)1;
        err[0] = 0;
        int rc = ifl_lora_load(&l, cut, g_base, err);
        tried++;
        if (rc != 0 && l == NULL && !strncmp(err, "lora: gguf: ", 12))
            failed++;
        else if (failed + 1 == tried)
            fprintf(stderr, "  truncated at %ld: rc %d, '%s'\n", n, rc, err);
        if (rc == 0)
            ifl_lora_free(l);
    }
    CHECK_MSG(failed == tried, "%d of %d truncations failed as they should", failed, tried);
    fprintf(stderr, "  %d truncations (header of %ld bytes, file of %ld), each an error\n", tried,
            data_off, size);
    unlink(cut);
    free(buf);
}

/* The command line's errors: exit status 2 and the loader's sentence. */
static void test_merge_cli_errors(void)
{
    char cmd[4096], log[512], bad[512], out[512];
    snprintf(log, sizeof log, "%s/merge.log", g_dir);
    snprintf(bad, sizeof bad, "%s/bad.gguf", g_dir);
    snprintf(out, sizeof out, "%s/never.gguf", g_dir);
    if (rewrite(g_good, bad, &(struct edit){.key = "general.architecture", .val = "qwen3"}))
        return;
    snprintf(cmd, sizeof cmd, "'%s' lora merge -m '%s' --lora '%s:1.5' -o '%s' 2>'%s'", g_bin,
             g_stories, bad, out, log);
    CHECK_EQ(run(cmd), 2);
    char *text = NULL;
    FILE *f = fopen(log, "r");
    if (f) {
        text = calloc(1, 4096);
        CHECK(fread(text, 1, 4095, f) > 0);
        fclose(f);
    }
    CHECK_MSG(text && strstr(text, "architecture 'qwen3'"), "merge said: %s", text ? text : "");
    CHECK(access(out, F_OK) != 0);
    free(text);
    snprintf(cmd, sizeof cmd, "'%s' lora merge -m '%s' --lora '%s:x1' -o '%s' 2>/dev/null", g_bin,
             g_stories, g_good, out);
    CHECK_EQ(run(cmd), 2); /* not a number, and no file named "...:x1" */
    snprintf(cmd, sizeof cmd, "'%s' lora merge -m '%s' -o '%s' 2>/dev/null", g_bin, g_stories, out);
    CHECK_EQ(run(cmd), 2);
    snprintf(cmd, sizeof cmd, "'%s' lora 2>/dev/null", g_bin);
    CHECK_EQ(run(cmd), 2);
    CHECK(access(out, F_OK) != 0);
    unlink(bad);
    unlink(log);
}

int main(void)
{
    const char *build = getenv("BUILD");
    build = build && *build ? build : "build";
    snprintf(g_mk, sizeof g_mk, "%s/tools/mkmodel", build);
    snprintf(g_bin, sizeof g_bin, "%s/inflight", build);
    snprintf(g_stories, sizeof g_stories, "%s/models/stories260K.gguf", t_shared());
    snprintf(g_dir, sizeof g_dir, "/tmp/ifl_lora_XXXXXX");
    char err[IFL_ERR_LEN] = "";
    if (access(g_mk, X_OK) != 0 || access(g_bin, X_OK) != 0 || !mkdtemp(g_dir) ||
        ifl_model_load(&g_base, g_stories, err)) {
        fprintf(stderr, "cannot run %s and %s, make a temporary directory or load %s: %s\n", g_mk,
                g_bin, g_stories, err);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    struct ifl_rng rng;
    ifl_rng_seed(&rng, 39);
    g_tok[0] = 1;
    for (int i = 1; i < N_TOK; i++)
        g_tok[i] = 3 + (int32_t)(ifl_rng_next(&rng) % 509);
    snprintf(g_good, sizeof g_good, "%s/good.gguf", g_dir);
    if (mk_adapter(g_good, g_stories, "--rank 4 --alpha 8")) {
        printf("0 passed, 1 failed\n");
        return 1;
    }

    T_RUN(test_load_struct);
    T_RUN(test_bad_adapters);
    T_RUN(test_truncated);
    T_RUN(test_merge_cli_errors);
    T_RUN(test_merge_stories);
    T_RUN(test_merge_llama_all_targets);
    T_RUN(test_merge_tied_embd);
    T_RUN(test_merge_q8_adapter);
    T_RUN(test_merge_scale_zero);

    char cmd[600];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (run(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", g_dir);
    ifl_model_free(g_base);
    return t_done();
}
