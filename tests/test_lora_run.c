/*
 * LoRA adapters at run time: the forward pass's segmented products, and
 * the executor's adapters (ids, scales, the prefix cache, unloading).
 *
 * Adapters here are made in memory (random A and B, B not zero) by
 * make_lora, in the loader's struct ifl_lora (model/lora.h), so these
 * tests need no adapter file: where a file is at hand, ifl_lora_load
 * gives the same struct.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/rng.h"
#include "kernels/kernels.h"
#include "model/forward.h"
#include "model/kv_store.h"
#include "model/lora.h"
#include "model/lora_rt.h"
#include "model/model.h"
#include "runtime/exec.h"
#include "t.h"

/* ---- adapters in memory ---- */

#define ALL_TARGETS 0x7f

static void fill_mat(struct ifl_rng *r, struct ifl_lora_mat *m, int rank, int64_t n_in,
                     int64_t n_out, float alpha, float sa, float sb)
{
    m->rank = rank;
    m->n_in = n_in;
    m->n_out = n_out;
    m->alpha = alpha;
    m->a = malloc(sizeof(float) * (size_t)rank * (size_t)n_in);
    m->b = malloc(sizeof(float) * (size_t)rank * (size_t)n_out);
    for (size_t i = 0; i < (size_t)rank * (size_t)n_in; i++)
        m->a[i] = sa * ifl_rng_normal(r);
    for (size_t i = 0; i < (size_t)rank * (size_t)n_out; i++)
        m->b[i] = sb * ifl_rng_normal(r);
}

/* An adapter of the given rank over the targets in mask (bit t: enum
 * ifl_lora_target t), and the embedding and the output when asked. */
static struct ifl_lora *make_lora(const struct ifl_model *m, uint64_t seed, int rank, float alpha,
                                  unsigned mask, int embd, int output)
{
    struct ifl_rng r;
    ifl_rng_seed(&r, seed);
    const struct ifl_hparams *hp = &m->hp;
    struct ifl_lora *l = calloc(1, sizeof(*l));
    snprintf(l->path, sizeof l->path, "memory:%llu", (unsigned long long)seed);
    snprintf(l->arch, sizeof l->arch, "%s", "llama");
    l->alpha = alpha;
    l->n_layer = hp->n_layer;
    l->layers = calloc((size_t)hp->n_layer * IFL_LORA_N_TARGETS, sizeof(*l->layers));
    for (int il = 0; il < hp->n_layer; il++) {
        const struct ifl_layer_weights *w = &m->layers[il];
        const struct ifl_mat *mats[IFL_LORA_N_TARGETS] = {&w->wq,     &w->wk,   &w->wv,    &w->wo,
                                                          &w->w_gate, &w->w_up, &w->w_down};
        for (int t = 0; t < IFL_LORA_N_TARGETS; t++)
            if (mask >> t & 1)
                fill_mat(&r, &l->layers[(size_t)il * IFL_LORA_N_TARGETS + (size_t)t], rank,
                         mats[t]->n_in, mats[t]->n_out, alpha, 0.05f, 0.05f);
    }
    if (embd)
        fill_mat(&r, &l->tok_embd, rank, hp->n_vocab, hp->n_embd, alpha, 0.2f, 0.2f);
    if (output)
        fill_mat(&r, &l->output, rank, m->output.n_in, m->output.n_out, alpha, 0.05f, 0.05f);
    for (int i = 0; i < hp->n_layer * IFL_LORA_N_TARGETS; i++)
        l->n_adapted += l->layers[i].rank > 0;
    l->n_adapted += (l->tok_embd.rank > 0) + (l->output.rank > 0);
    return l;
}

static void free_mat(struct ifl_lora_mat *m)
{
    free(m->a);
    free(m->b);
}

/* Frees what make_lora made (the loader's own ifl_lora_free for files). */
static void drop_lora(struct ifl_lora *l)
{
    if (!l)
        return;
    for (int i = 0; i < l->n_layer * IFL_LORA_N_TARGETS; i++)
        free_mat(&l->layers[i]);
    free(l->layers);
    free_mat(&l->tok_embd);
    free_mat(&l->output);
    free(l);
}

static struct ifl_lora_rt *make_rt_as(const struct ifl_model *m, uint64_t seed, int rank,
                                      float alpha, unsigned mask, int embd, int output, int hold)
{
    struct ifl_lora *l = make_lora(m, seed, rank, alpha, mask, embd, output);
    struct ifl_lora_rt *rt = NULL;
    char err[IFL_ERR_LEN] = "";
    int rc = ifl_lora_rt_create(&rt, l, m, hold, err);
    CHECK_MSG(rc == 0, "ifl_lora_rt_create: %s", err);
    drop_lora(l);
    return rt;
}

static struct ifl_lora_rt *make_rt(const struct ifl_model *m, uint64_t seed, int rank, float alpha,
                                   unsigned mask, int embd, int output)
{
    return make_rt_as(m, seed, rank, alpha, mask, embd, output, 0);
}

static struct ifl_model *load_model(const char *name)
{
    char p[512], err[IFL_ERR_LEN] = "";
    snprintf(p, sizeof p, "%s/models/%s", t_shared(), name);
    struct ifl_model *m = NULL;
    if (ifl_model_load(&m, p, err)) {
        T_FAIL_("load %s: %s", p, err);
        return NULL;
    }
    return m;
}

/* ---- the forward pass ---- */

#define BS 16
#define NSEQ 16
#define BPS 8 /* blocks per sequence: 128 positions */

struct fwd_rig {
    struct ifl_kv_store *kv;
    struct ifl_fwd *f;
    int32_t tables[NSEQ][BPS];
    int32_t n_blocks[NSEQ];
    const int32_t *tptr[NSEQ];
};

static int rig_open(struct fwd_rig *g, const struct ifl_model *m, int nth)
{
    char err[IFL_ERR_LEN] = "";
    memset(g, 0, sizeof(*g));
    if (ifl_kv_store_create(&g->kv, &m->hp, IFL_TYPE_F16, NSEQ * BPS, BS, err))
        return -1;
    struct ifl_fwd_config fc = {.max_rows = 256, .max_ctx = BS * BPS, .n_threads = nth};
    if (ifl_fwd_create(&g->f, m, g->kv, &fc, err)) {
        fprintf(stderr, "  fwd: %s\n", err);
        return -1;
    }
    for (int s = 0; s < NSEQ; s++) {
        for (int i = 0; i < BPS; i++)
            g->tables[s][i] = i * NSEQ + s;
        g->n_blocks[s] = BPS;
        g->tptr[s] = g->tables[s];
    }
    return 0;
}

static void rig_close(struct fwd_rig *g)
{
    ifl_fwd_free(g->f);
    ifl_kv_store_free(g->kv);
}

/* One step of n rows, all wanting logits; scales [n][n_lora]. */
static int rig_step(struct fwd_rig *g, int n, const int32_t *tok, const int32_t *pos,
                    const int32_t *seq, int n_lora, const struct ifl_lora_rt *const *lora,
                    const float *scales, float *logits)
{
    uint8_t want[256];
    memset(want, 1, sizeof want);
    struct ifl_batch b = {.n_rows = n,
                          .tokens = tok,
                          .pos = pos,
                          .seq = seq,
                          .logits = want,
                          .n_seqs = NSEQ,
                          .block_tables = g->tptr,
                          .n_blocks = g->n_blocks,
                          .n_lora = n_lora,
                          .lora = lora,
                          .lora_scale = scales};
    char err[IFL_ERR_LEN] = "";
    int rc = ifl_forward(g->f, &b, logits, err);
    if (rc)
        fprintf(stderr, "  forward: %s\n", err);
    return rc;
}

static int32_t tok_of(int s, int p)
{
    return (int32_t)((s * 131 + p * 37 + 5) % 500) + 3;
}

/* The adapter that an F32 model merged with the adapter (W + s B A, in
 * double) gives the same logits, within float rounding, as the adapter
 * applied at run time; and that the adapter changes them. */
static void test_forward_vs_merged_f32(void)
{
    struct ifl_model *m = load_model("ref/llama-f32.gguf");
    if (!m)
        return;
    const struct ifl_hparams *hp = &m->hp;
    const float user = 0.75f;
    struct ifl_lora *l = make_lora(m, 7, 8, 16.0f, ALL_TARGETS, 1, 1);
    struct ifl_lora_rt *rt = NULL;
    char err[IFL_ERR_LEN] = "";
    CHECK_EQ(ifl_lora_rt_create(&rt, l, m, 0, err), 0);
    struct ifl_lora_rt *rt16 = NULL, *rt8 = NULL; /* the same in F16, in Q8_0 */
    CHECK_EQ(ifl_lora_rt_create(&rt16, l, m, 1, err), 0);
    CHECK_EQ(ifl_lora_rt_create(&rt8, l, m, 2, err), 0);
    /* the merged model: the same struct, its matrices replaced */
    struct ifl_model mm = *m;
    mm.layers = malloc(sizeof(*mm.layers) * (size_t)hp->n_layer);
    memcpy(mm.layers, m->layers, sizeof(*mm.layers) * (size_t)hp->n_layer);
    float *bufs[64] = {0};
    int nb = 0;
    struct merge {
        struct ifl_mat *dst;
        const struct ifl_lora_mat *lm;
        int embd;
    } mg[64];
    int n_mg = 0;
    for (int il = 0; il < hp->n_layer; il++) {
        struct ifl_layer_weights *w = &mm.layers[il];
        struct ifl_mat *mats[IFL_LORA_N_TARGETS] = {&w->wq,     &w->wk,   &w->wv,    &w->wo,
                                                    &w->w_gate, &w->w_up, &w->w_down};
        for (int t = 0; t < IFL_LORA_N_TARGETS; t++)
            mg[n_mg++] =
                (struct merge){mats[t], ifl_lora_layer_mat(l, il, (enum ifl_lora_target)t), 0};
    }
    mg[n_mg++] = (struct merge){&mm.tok_embd, &l->tok_embd, 1};
    mg[n_mg++] = (struct merge){&mm.output, &l->output, 0};
    for (int i = 0; i < n_mg; i++) {
        struct ifl_mat *d = mg[i].dst;
        CHECK(d->type == IFL_TYPE_F32 && !d->x16);
        const struct ifl_lora_mat *lm = mg[i].lm;
        float s = ifl_lora_scale(lm, user);
        float *nw = malloc(sizeof(float) * (size_t)d->n_in * (size_t)d->n_out);
        bufs[nb++] = nw;
        /* row o of W (n_out rows of n_in); the embedding's rows are tokens */
        for (int64_t o = 0; o < d->n_out; o++)
            for (int64_t c = 0; c < d->n_in; c++) {
                double acc = 0;
                for (int k = 0; k < lm->rank; k++)
                    acc += mg[i].embd ? (double)lm->b[c * lm->rank + k] * lm->a[o * lm->rank + k]
                                      : (double)lm->b[o * lm->rank + k] * lm->a[k * d->n_in + c];
                const float *wr = (const float *)((const char *)d->data + (size_t)o * d->row_bytes);
                nw[o * d->n_in + c] = (float)((double)wr[c] + s * acc);
            }
        d->data = nw;
        d->row_bytes = sizeof(float) * (size_t)d->n_in;
    }
    struct fwd_rig ga, gb;
    CHECK_EQ(rig_open(&ga, m, 2), 0);
    CHECK_EQ(rig_open(&gb, &mm, 2), 0);
    enum { N = 24 };
    int32_t tok[N], pos[N], seq[N];
    for (int i = 0; i < N; i++) {
        tok[i] = tok_of(1, i);
        pos[i] = i;
        seq[i] = 0;
    }
    size_t nv = (size_t)hp->n_vocab;
    float *la = malloc(sizeof(float) * N * nv), *lb = malloc(sizeof(float) * N * nv);
    float *l0 = malloc(sizeof(float) * N * nv), sc[N];
    for (int i = 0; i < N; i++)
        sc[i] = user;
    const struct ifl_lora_rt *lr[1] = {rt};
    CHECK_EQ(rig_step(&ga, N, tok, pos, seq, 1, lr, sc, la), 0);
    CHECK_EQ(rig_step(&gb, N, tok, pos, seq, 0, NULL, NULL, lb), 0);
    for (int i = 0; i < N; i++)
        seq[i] = 1; /* the base, in another sequence */
    CHECK_EQ(rig_step(&ga, N, tok, pos, seq, 0, NULL, NULL, l0), 0);
    float *lh = malloc(sizeof(float) * N * nv);
    const struct ifl_lora_rt *lr16[1] = {rt16};
    for (int i = 0; i < N; i++)
        seq[i] = 2;
    CHECK_EQ(rig_step(&ga, N, tok, pos, seq, 1, lr16, sc, lh), 0);
    float *l8 = malloc(sizeof(float) * N * nv);
    const struct ifl_lora_rt *lr8[1] = {rt8};
    for (int i = 0; i < N; i++)
        seq[i] = 3;
    CHECK_EQ(rig_step(&ga, N, tok, pos, seq, 1, lr8, sc, l8), 0);
    double mx = 0, moved = 0, big = 0, mx16 = 0, mx8 = 0;
    for (size_t i = 0; i < N * nv; i++) {
        mx16 = fabs((double)lh[i] - lb[i]) > mx16 ? fabs((double)lh[i] - lb[i]) : mx16;
        mx8 = fabs((double)l8[i] - lb[i]) > mx8 ? fabs((double)l8[i] - lb[i]) : mx8;
        big = fabs((double)lb[i]) > big ? fabs((double)lb[i]) : big;
        double d = fabs((double)la[i] - lb[i]);
        mx = d > mx ? d : mx;
        double dm = fabs((double)la[i] - l0[i]);
        moved = dm > moved ? dm : moved;
    }
    fprintf(stderr,
            "  f32: runtime vs merged max |diff| %.3g (logits up to %.3g); the adapter moves "
            "logits by %.3g\n",
            mx, big, moved);
    /* float rounding of the merged weights and of the two orders of sums,
     * through 4 layers and 24 positions */
    CHECK(mx < 1e-4 * big);
    /* F16: A and B rounded to 11 significant bits */
    fprintf(stderr, "  f16: runtime vs merged max |diff| %.3g; %zu bytes against %zu\n", mx16,
            rt16->bytes, rt->bytes);
    CHECK(mx16 > mx && mx16 < 1e-2 * big);
    CHECK(rt16->bytes < rt->bytes * 6 / 10);
    /* Q8_0: 8 bits and a scale a block, the rounding of a Q8_0 base; the
     * adapter's effect stays: its error is a small part of what it moves */
    fprintf(stderr, "  q8_0: runtime vs merged max |diff| %.3g; %zu bytes\n", mx8, rt8->bytes);
    CHECK(mx8 > mx && mx8 < 2e-2 * big && mx8 < 0.1 * moved);
    /* rank 8: A in Q8_0 (8.5 bits a value), B in F16 (below rank 16), the
     * embedding's in F32 */
    CHECK(rt8->bytes < rt->bytes * 45 / 100);
    CHECK(moved > 0.05);
    rig_close(&ga);
    rig_close(&gb);
    for (int i = 0; i < nb; i++)
        free(bufs[i]);
    free(mm.layers);
    free(la);
    free(lb);
    free(l0);
    free(lh);
    free(l8);
    ifl_lora_rt_free(rt8);
    ifl_lora_rt_free(rt16);
    ifl_lora_rt_free(rt);
    drop_lora(l);
    ifl_model_free(m);
}

/* Prompts of 16 sequences over 4 adapters (one sequence with two) and
 * the base, each run alone in chunks, then all in one batch: every row's
 * logits bitwise the same. Scale 0 is bitwise the base. On the repacked
 * Q8_0 model, two threads. */
static void test_forward_mixed_batch(void)
{
    struct ifl_model *m = load_model("ref/llama-q8_0.gguf");
    if (!m)
        return;
    struct ifl_lora_rt *rts[4];
    for (int i = 0; i < 4; i++) /* adapter 2 held in F16, 0 and 3 in Q8_0 */
        rts[i] = make_rt_as(m, 100 + (uint64_t)i, i == 3 ? 4 : 16, i == 1 ? 0.0f : 32.0f,
                            i == 2 ? 0x11 : ALL_TARGETS, i == 0, i == 3,
                            i == 2   ? 1
                            : i == 1 ? 0
                                     : 2);
    const struct ifl_lora_rt *const *lr = (const struct ifl_lora_rt *const *)rts;
    struct fwd_rig g;
    CHECK_EQ(rig_open(&g, m, 2), 0);
    const size_t nv = (size_t)m->hp.n_vocab;
    enum { LEN = 9 };
    /* sequence s's scales: adapter s % 5 (4: none), sequence 5 two of them */
    float scl[NSEQ][4];
    memset(scl, 0, sizeof scl);
    for (int s = 0; s < NSEQ; s++)
        if (s % 5 < 4)
            scl[s][s % 5] = 0.5f + 0.25f * (float)(s % 3);
    scl[5][2] = -1.5f;
    float *alone = malloc(sizeof(float) * NSEQ * LEN * nv);
    float *mixed = malloc(sizeof(float) * NSEQ * LEN * nv);
    int32_t tok[256], pos[256], seq[256];
    float sc[256 * 4];
    for (int s = 0; s < NSEQ; s++) {
        int len = LEN - s % 4;             /* ragged */
        for (int c = 0; c < len; c += 4) { /* chunks of 4 */
            int n = len - c < 4 ? len - c : 4;
            for (int i = 0; i < n; i++) {
                tok[i] = tok_of(s, c + i);
                pos[i] = c + i;
                seq[i] = s;
                memcpy(sc + i * 4, scl[s], sizeof scl[s]);
            }
            CHECK_EQ(rig_step(&g, n, tok, pos, seq, 4, lr, sc, alone + ((size_t)s * LEN + c) * nv),
                     0);
        }
    }
    int n = 0;
    for (int s = NSEQ - 1; s >= 0; s--) /* another order, interleaved with nothing */
        for (int p = 0; p < LEN - s % 4; p++) {
            tok[n] = tok_of(s, p);
            pos[n] = p;
            seq[n] = s;
            memcpy(sc + n * 4, scl[s], sizeof scl[s]);
            n++;
        }
    float *out = malloc(sizeof(float) * (size_t)n * nv);
    CHECK_EQ(rig_step(&g, n, tok, pos, seq, 4, lr, sc, out), 0);
    for (int r = 0; r < n; r++)
        memcpy(mixed + ((size_t)seq[r] * LEN + pos[r]) * nv, out + (size_t)r * nv,
               sizeof(float) * nv);
    int bad = 0;
    for (int s = 0; s < NSEQ; s++)
        for (int p = 0; p < LEN - s % 4; p++)
            if (memcmp(alone + ((size_t)s * LEN + p) * nv, mixed + ((size_t)s * LEN + p) * nv,
                       sizeof(float) * nv) != 0 &&
                bad++ < 4)
                T_FAIL_("sequence %d position %d: logits in the mixed batch differ from alone", s,
                        p);
    CHECK_EQ(bad, 0);
    /* the adapters matter: sequence 0 (adapter 0) against the base */
    for (int p = 0; p < LEN; p++) {
        tok[p] = tok_of(0, p);
        pos[p] = p;
        seq[p] = 15;
    }
    float *base = malloc(sizeof(float) * LEN * nv);
    CHECK_EQ(rig_step(&g, LEN, tok, pos, seq, 0, NULL, NULL, base), 0);
    CHECK(memcmp(base, alone, sizeof(float) * LEN * nv) != 0);
    /* scale 0 for every adapter is the base, bit for bit */
    memset(sc, 0, sizeof(float) * LEN * 4);
    for (int p = 0; p < LEN; p++)
        seq[p] = 14;
    CHECK_EQ(rig_step(&g, LEN, tok, pos, seq, 4, lr, sc, out), 0);
    CHECK(memcmp(base, out, sizeof(float) * LEN * nv) == 0);
    /* an adapter made for another model is refused */
    struct ifl_model *other = load_model("ref/llama-f32.gguf");
    struct ifl_lora_rt *foreign = other ? make_rt(other, 5, 4, 0, 1, 0, 0) : NULL;
    if (foreign) {
        const struct ifl_lora_rt *fl[1] = {foreign};
        sc[0] = 1.0f;
        CHECK_EQ(rig_step(&g, 1, tok, pos, seq, 1, fl, sc, out), IFL_EINVAL);
        sc[0] = NAN;
        CHECK_EQ(rig_step(&g, 1, tok, pos, seq, 1, lr, sc, out), IFL_EINVAL);
    }
    ifl_lora_rt_free(foreign);
    ifl_model_free(other);
    rig_close(&g);
    free(alone);
    free(mixed);
    free(out);
    free(base);
    for (int i = 0; i < 4; i++)
        ifl_lora_rt_free(rts[i]);
    ifl_model_free(m);
}

/* Shapes that do not fit the base are refused, naming the matrix. */
static void test_rt_checks(void)
{
    struct ifl_model *m = load_model("ref/llama-f32.gguf");
    if (!m)
        return;
    struct ifl_lora *l = make_lora(m, 3, 4, 0, 1u << IFL_LORA_WK, 0, 0);
    l->layers[2 * IFL_LORA_N_TARGETS + IFL_LORA_WK].n_out += 1;
    struct ifl_lora_rt *rt = NULL;
    char err[IFL_ERR_LEN] = "";
    CHECK_EQ(ifl_lora_rt_create(&rt, l, m, 0, err), IFL_EINVAL);
    CHECK(strstr(err, "blk.2.attn_k.weight") != NULL);
    CHECK(rt == NULL);
    l->layers[2 * IFL_LORA_N_TARGETS + IFL_LORA_WK].n_out -= 1;
    l->layers[0 * IFL_LORA_N_TARGETS + IFL_LORA_WK].a[5] = INFINITY;
    CHECK_EQ(ifl_lora_rt_create(&rt, l, m, 0, err), IFL_EINVAL);
    CHECK(strstr(err, "blk.0.attn_k.weight") != NULL);
    l->layers[0 * IFL_LORA_N_TARGETS + IFL_LORA_WK].a[5] = 1e5f; /* beyond F16 */
    CHECK_EQ(ifl_lora_rt_create(&rt, l, m, 1, err), IFL_EINVAL);
    CHECK(strstr(err, "blk.0.attn_k.weight") && strstr(err, "F16"));
    CHECK_EQ(ifl_lora_rt_create(&rt, l, m, 2, err), 0); /* fine in Q8_0: d = 1e5 / 127 */
    ifl_lora_rt_free(rt);
    CHECK_EQ(ifl_lora_rt_create(&rt, l, m, 0, err), 0); /* fine in F32 */
    ifl_lora_rt_free(rt);
    l->layers[0 * IFL_LORA_N_TARGETS + IFL_LORA_WK].a[5] = 1e7f; /* d beyond F16 */
    CHECK_EQ(ifl_lora_rt_create(&rt, l, m, 2, err), IFL_EINVAL);
    CHECK(strstr(err, "blk.0.attn_k.weight") && strstr(err, "Q8_0"));
    CHECK(rt == NULL);
    CHECK_EQ(ifl_lora_rt_create(&rt, l, m, 3, err), IFL_EINVAL); /* no such form */
    l->layers[0 * IFL_LORA_N_TARGETS + IFL_LORA_WK].a[5] = 0;
    CHECK_EQ(ifl_lora_rt_create(&rt, l, m, 0, err), 0);
    CHECK(rt && rt->n_adapted == m->hp.n_layer && rt->max_rank == 4 && rt->bytes > 0);
    ifl_lora_rt_free(rt);
    drop_lora(l);
    ifl_model_free(m);
}

/* Q8_0 holds a matrix whose input is whole blocks of 32 (A's rows); the
 * others (stories260K's ffn_down: n_in 172) are held in F16. B is in
 * int8 when its rank and n_out are multiples of 16, else in F16. */
static void test_rt_q8_fallback(void)
{
    struct ifl_model *m = load_model("stories260K.gguf");
    if (!m)
        return;
    for (int rank = 4; rank <= 16; rank += 12) {
        struct ifl_lora *l = make_lora(m, 11, rank, 8.0f, ALL_TARGETS, 0, 1);
        struct ifl_lora_rt *rt = NULL;
        char err[IFL_ERR_LEN] = "";
        CHECK_EQ(ifl_lora_rt_create(&rt, l, m, 2, err), 0);
        for (int il = 0; rt && il < m->hp.n_layer; il++)
            for (int t = 0; t < IFL_LORA_N_TARGETS; t++) {
                const struct ifl_lora_rt_mat *lm = &rt->layers[il * IFL_LORA_N_TARGETS + t];
                int whole = lm->n_in % 32 == 0;
                int ok = whole ? lm->aq && !lm->a16 && !lm->a &&
                                     lm->a_x16 == (rank == 16 &&
                                                   ifl_kernels_best()->x16_pays[IFL_TYPE_Q8_0]) &&
                                     (rank < 16 || lm->n_out % 16 ? lm->bt16 && !lm->bq
                                                                  : lm->bq && !lm->bt16)
                               : lm->a16 && lm->bt16 && !lm->aq && !lm->bq;
                CHECK_MSG(ok, "rank %d layer %d matrix %d (n_in %lld): held wrongly", rank, il, t,
                          (long long)lm->n_in);
            }
        CHECK(rt && rt->output.aq && (rank < 16 ? rt->output.bt16 != NULL : rt->output.bq != NULL));
        /* every matrix but ffn_down, and the output */
        CHECK(rt && rt->n_q8 == 6 * m->hp.n_layer + 1);
        ifl_lora_rt_free(rt);
        drop_lora(l);
    }
    ifl_model_free(m);
}

/* ---- the executor ---- */

static ifl_executor *open_ex(const char *model, int32_t max_batch, int64_t cache_bytes,
                             int spec_ngram)
{
    char p[512], err[512] = "";
    snprintf(p, sizeof p, "%s/models/%s", t_shared(), model);
    struct ifl_executor_config c;
    ifl_executor_config_default(&c);
    c.max_batch_size = max_batch;
    c.n_threads = 2;
    c.n_ctx = 256;
    c.lora_cache_bytes = cache_bytes;
    if (spec_ngram) {
        c.speculative.type = IFL_SPEC_NGRAM;
        c.speculative.ngram_size = 2;
    }
    ifl_executor *ex = NULL;
    int rc = ifl_executor_create(&ex, p, &c, err);
    CHECK_MSG(rc == 0, "create: %s", err);
    return ex;
}

/* Registers an in-memory adapter (make_rt's) as name; its id. */
static int32_t add_rt(ifl_executor *ex, uint64_t seed, int rank, float alpha, const char *name,
                      float global)
{
    struct ifl_lora_rt *rt = make_rt(ex->model, seed, rank, alpha, ALL_TARGETS, 1, 0);
    int32_t id = -1;
    char err[512] = "";
    int rc = ifl_lora_reg_add(&ex->lora, rt, NULL, "", name, global, &id, err);
    CHECK_MSG(rc == 0, "add: %s", err);
    return id;
}

struct run {
    int32_t tok[64];
    float lp[64];
    int32_t n;
    int32_t reused;
};

static void req_init(struct ifl_request *r, const int32_t *ids, int32_t n, int32_t max_tokens,
                     uint64_t seed)
{
    ifl_request_init(r);
    r->input_ids = ids;
    r->n_input = n;
    r->max_tokens = max_tokens;
    r->sampling.temperature = 0.9f;
    r->sampling.seed = seed;
    r->sampling.ignore_eos = 1;
    r->output.return_log_probs = 1;
    r->output.return_perf_metrics = 1;
}

/* Awaits id's responses into run. */
static void collect(ifl_executor *ex, ifl_id id, struct run *out)
{
    memset(out, 0, sizeof(*out));
    for (int final = 0; !final;) {
        struct ifl_response *r = NULL;
        int32_t got = 0;
        int rc = ifl_await(ex, &id, 1, 60000, &r, 1, &got);
        if (rc || !got) {
            T_FAIL_("await %llu: %s", (unsigned long long)id, ifl_strerror(rc));
            return;
        }
        CHECK_MSG(r->status == 0, "response: %s", r->error_msg ? r->error_msg : "");
        for (int32_t i = 0; i < r->n_results; i++) {
            struct ifl_sequence_result *sr = &r->results[i];
            for (int32_t k = 0; k < sr->n_tokens && out->n < 64; k++) {
                out->lp[out->n] = sr->log_probs ? sr->log_probs[k] : 0;
                out->tok[out->n++] = sr->tokens[k];
            }
        }
        if (r->is_final)
            out->reused = r->perf.kv_blocks_reused;
        final = r->is_final;
        ifl_response_free(r);
    }
}

static int run_req(ifl_executor *ex, const struct ifl_request *r, struct run *out)
{
    ifl_id id;
    char err[512] = "";
    int rc = ifl_enqueue(ex, r, &id, err);
    CHECK_MSG(rc == 0, "enqueue: %s", err);
    if (!rc)
        collect(ex, id, out);
    return rc;
}

static int same_run(const struct run *a, const struct run *b)
{
    return a->n == b->n && memcmp(a->tok, b->tok, sizeof(int32_t) * (size_t)a->n) == 0 &&
           memcmp(a->lp, b->lp, sizeof(float) * (size_t)a->n) == 0;
}

enum { NREQ = 16, PLEN = 21, GEN = 12 };

static void prompt_of(int i, int32_t *ids)
{
    for (int p = 0; p < PLEN; p++)
        ids[p] = tok_of(i + 20, p);
}

/* 16 requests over 4 adapters and the base, sampled with log-probs: each
 * alone, then all enqueued at once (so they share steps), then again in
 * reverse order: every request's tokens and log-probs bitwise the same. */
static void test_exec_mixed_batch(void)
{
    ifl_executor *ex = open_ex("ref/llama-q8_0.gguf", 16, 0, 0);
    if (!ex)
        return;
    int32_t ids[4];
    for (int i = 0; i < 4; i++) {
        char name[16];
        snprintf(name, sizeof name, "ad%d", i);
        ids[i] = add_rt(ex, 200 + (uint64_t)i, 16, 16.0f, name, 0.0f);
    }
    int32_t prompts[NREQ][PLEN];
    struct ifl_lora_ref refs[NREQ][2];
    struct ifl_request rq[NREQ];
    for (int i = 0; i < NREQ; i++) {
        prompt_of(i, prompts[i]);
        req_init(&rq[i], prompts[i], PLEN, GEN, 1000 + (uint64_t)i);
        int a = i % 5;
        if (a < 4) {
            refs[i][0] = (struct ifl_lora_ref){ids[a], 0.5f + 0.25f * (float)(i % 3)};
            rq[i].lora = refs[i];
            rq[i].n_lora = 1;
        }
        if (i == 7) { /* two adapters, listed against id order */
            refs[i][1] = refs[i][0];
            refs[i][0] = (struct ifl_lora_ref){ids[3], -0.5f};
            rq[i].n_lora = 2;
        }
    }
    struct run alone[NREQ], mixed[NREQ], rev[NREQ];
    for (int i = 0; i < NREQ; i++)
        run_req(ex, &rq[i], &alone[i]);
    ifl_id qid[NREQ];
    char err[512] = "";
    CHECK_EQ(ifl_enqueue_many(ex, rq, NREQ, qid, err), 0);
    for (int i = 0; i < NREQ; i++)
        collect(ex, qid[i], &mixed[i]);
    struct ifl_request rr[NREQ];
    for (int i = 0; i < NREQ; i++)
        rr[i] = rq[NREQ - 1 - i];
    CHECK_EQ(ifl_enqueue_many(ex, rr, NREQ, qid, err), 0);
    for (int i = 0; i < NREQ; i++)
        collect(ex, qid[i], &rev[NREQ - 1 - i]);
    for (int i = 0; i < NREQ; i++) {
        CHECK_EQ(alone[i].n, GEN);
        CHECK_MSG(same_run(&alone[i], &mixed[i]), "request %d: mixed batch differs from alone", i);
        CHECK_MSG(same_run(&alone[i], &rev[i]), "request %d: reversed batch differs from alone", i);
    }
    /* the adapters matter: request 0 (adapter 0) without it */
    struct run base;
    rq[0].lora = NULL;
    rq[0].n_lora = 0;
    run_req(ex, &rq[0], &base);
    CHECK(!same_run(&base, &alone[0]));
    /* scale 0 is the base, bit for bit */
    struct ifl_lora_ref zero[2] = {{ids[1], 0.0f}, {ids[2], 0.0f}};
    struct run z;
    rq[0].lora = zero;
    rq[0].n_lora = 2;
    run_req(ex, &rq[0], &z);
    CHECK(same_run(&base, &z));
    ifl_executor_destroy(ex, 0);
}

/* The prefix cache is keyed by the adapter set: one prompt under two
 * adapters, two scales and the base never reuses the other's blocks; each
 * reuses its own. */
static void test_exec_cache_keys(void)
{
    ifl_executor *ex = open_ex("ref/llama-q8_0.gguf", 4, 0, 0);
    if (!ex)
        return;
    int32_t a = add_rt(ex, 300, 8, 0.0f, "a", 0.0f), b = add_rt(ex, 301, 8, 0.0f, "b", 0.0f);
    int32_t prompt[49]; /* 48 computed before the last: 3 blocks of 16 */
    for (int p = 0; p < 49; p++)
        prompt[p] = tok_of(3, p);
    struct ifl_lora_ref la = {a, 1.0f}, lb = {b, 1.0f}, la2 = {a, 0.5f}, ab[2] = {{a, 1}, {b, 1}};
    struct {
        const struct ifl_lora_ref *l;
        int32_t n;
        int32_t reused;
    } steps[] = {{&la, 1, 0}, {&lb, 1, 0}, {&la2, 1, 0}, {NULL, 0, 0}, {ab, 2, 0},
                 {&la, 1, 3}, {&lb, 1, 3}, {&la2, 1, 3}, {NULL, 0, 3}, {ab, 2, 3}};
    struct run first[5], again;
    for (size_t i = 0; i < sizeof steps / sizeof steps[0]; i++) {
        struct ifl_request r;
        req_init(&r, prompt, 49, 4, 9);
        r.lora = steps[i].l;
        r.n_lora = steps[i].n;
        struct run *o = i < 5 ? &first[i] : &again;
        run_req(ex, &r, o);
        CHECK_MSG(o->reused == steps[i].reused, "step %zu: %d blocks reused, expected %d", i,
                  o->reused, steps[i].reused);
        if (i >= 5) /* what reused KV gives is what computing it gave */
            CHECK_MSG(same_run(o, &first[i - 5]), "step %zu: differs with its reused prefix", i);
    }
    ifl_executor_destroy(ex, 0);
}

/* An adapter unloaded while a request runs with it: the request finishes
 * as it would have; new requests can no longer name it; its memory goes
 * with the request (the sanitizer builds check that). */
static void test_exec_unload_while_running(void)
{
    ifl_executor *ex = open_ex("ref/llama-q8_0.gguf", 4, 0, 0);
    if (!ex)
        return;
    int32_t a = add_rt(ex, 400, 16, 32.0f, "gone", 0.0f);
    int32_t prompt[PLEN];
    prompt_of(1, prompt);
    struct ifl_lora_ref l = {a, 1.0f};
    struct ifl_request r;
    req_init(&r, prompt, PLEN, 40, 5);
    r.lora = &l;
    r.n_lora = 1;
    r.streaming = 1;
    struct run ref, got;
    run_req(ex, &r, &ref);
    ifl_id id;
    char err[512] = "";
    CHECK_EQ(ifl_enqueue(ex, &r, &id, err), 0);
    /* its first token is out: it is running */
    struct ifl_response *first = NULL;
    int32_t n = 0;
    CHECK_EQ(ifl_await(ex, &id, 1, 60000, &first, 1, &n), 0);
    CHECK_EQ(ifl_executor_unload_lora(ex, a, err), 0);
    CHECK_EQ(ifl_executor_unload_lora(ex, a, err), IFL_ENOTFOUND);
    int32_t found = 0;
    CHECK_EQ(ifl_executor_find_lora(ex, "gone", &found), IFL_ENOTFOUND);
    ifl_id id2;
    CHECK_EQ(ifl_enqueue(ex, &r, &id2, err), IFL_EINVAL);
    CHECK(strstr(err, "lora[0].id") != NULL);
    collect(ex, id, &got);
    /* the first response's tokens come before the rest */
    struct run all = {0};
    if (first && first->n_results == 1) {
        struct ifl_sequence_result *sr = &first->results[0];
        for (int32_t k = 0; k < sr->n_tokens; k++) {
            all.tok[all.n] = sr->tokens[k];
            all.lp[all.n++] = sr->log_probs[k];
        }
    }
    ifl_response_free(first);
    for (int32_t k = 0; k < got.n && all.n < 64; k++) {
        all.tok[all.n] = got.tok[k];
        all.lp[all.n++] = got.lp[k];
    }
    CHECK_EQ(all.n, 40);
    CHECK(same_run(&all, &ref));
    int32_t n_ad = -1;
    CHECK_EQ(ifl_executor_list_lora(ex, NULL, 0, &n_ad), 0);
    CHECK_EQ(n_ad, 0);
    ifl_executor_destroy(ex, 0);
}

/* Global scales: a request that names no adapter takes them at enqueue;
 * changing them later does not change it. */
static void test_exec_global_scales(void)
{
    ifl_executor *ex = open_ex("ref/llama-q8_0.gguf", 4, 0, 0);
    if (!ex)
        return;
    int32_t a = add_rt(ex, 500, 8, 8.0f, "g", 0.75f);
    int32_t prompt[PLEN];
    prompt_of(2, prompt);
    struct ifl_request r;
    req_init(&r, prompt, PLEN, 16, 3);
    struct ifl_lora_ref l = {a, 0.75f};
    struct run explicit_, global, after, base;
    r.lora = &l;
    r.n_lora = 1;
    run_req(ex, &r, &explicit_);
    r.lora = NULL;
    r.n_lora = 0;
    ifl_id id;
    char err[512] = "";
    CHECK_EQ(ifl_enqueue(ex, &r, &id, err), 0);
    CHECK_EQ(ifl_executor_set_lora_scale(ex, a, 0.0f, err), 0);
    collect(ex, id, &global);
    CHECK(same_run(&global, &explicit_));
    run_req(ex, &r, &after); /* now at scale 0: the base */
    l.scale = 0;
    r.lora = &l;
    r.n_lora = 1;
    run_req(ex, &r, &base);
    CHECK(same_run(&after, &base));
    CHECK(!same_run(&after, &global));
    /* id 0 names no adapter: {0, 0} is the base whatever the global scales */
    CHECK_EQ(ifl_executor_set_lora_scale(ex, a, 0.75f, err), 0);
    struct ifl_lora_ref none = {0, 0.0f};
    struct run nothing, glob2;
    r.lora = &none;
    run_req(ex, &r, &nothing);
    CHECK(same_run(&nothing, &base));
    r.lora = NULL;
    r.n_lora = 0;
    run_req(ex, &r, &glob2);
    CHECK(same_run(&glob2, &explicit_));
    CHECK_EQ(ifl_executor_set_lora_scale(ex, a, NAN, err), IFL_EINVAL);
    CHECK_EQ(ifl_executor_set_lora_scale(ex, a + 7, 1.0f, err), IFL_ENOTFOUND);
    struct ifl_lora_info info[2];
    int32_t n = 0;
    CHECK_EQ(ifl_executor_wait_idle(ex, 10000), 0); /* the last request let go of it */
    CHECK_EQ(ifl_executor_list_lora(ex, info, 2, &n), 0);
    CHECK_EQ(n, 1);
    CHECK(info[0].id == a && !strcmp(info[0].name, "g") && info[0].scale == 0.75f &&
          info[0].rank == 8 && info[0].loaded == 1 && info[0].in_use == 0 && info[0].bytes > 0);
    ifl_executor_destroy(ex, 0);
}

/* Bad lists: each error names the field, and nothing is queued. */
static void test_exec_validation(void)
{
    ifl_executor *ex = open_ex("ref/llama-q8_0.gguf", 4, 0, 0);
    if (!ex)
        return;
    int32_t a = add_rt(ex, 600, 4, 0.0f, "v", 0.0f);
    int32_t prompt[4] = {5, 6, 7, 8};
    struct ifl_request r;
    req_init(&r, prompt, 4, 2, 1);
    struct ifl_lora_ref l[IFL_LORA_MAX_PER_REQUEST + 1];
    for (int i = 0; i <= IFL_LORA_MAX_PER_REQUEST; i++)
        l[i] = (struct ifl_lora_ref){a, 1.0f};
    r.lora = l;
    struct {
        int32_t n, id1;
        float s1;
        const char *field;
    } cases[] = {{2, a + 5, 1.0f, "lora[1].id"},
                 {2, a, 1.0f, "lora[1].id"}, /* twice */
                 {2, a + 1, NAN, "lora[1].scale"},
                 {2, a + 1, INFINITY, "lora[1].scale"},
                 {IFL_LORA_MAX_PER_REQUEST + 1, a, 1.0f, "lora:"},
                 {-1, a, 1.0f, "lora:"}};
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        l[1].id = cases[i].id1;
        l[1].scale = cases[i].s1;
        r.n_lora = cases[i].n;
        ifl_id id;
        char err[512] = "";
        CHECK_EQ(ifl_enqueue(ex, &r, &id, err), IFL_EINVAL);
        CHECK_MSG(strstr(err, cases[i].field) != NULL, "case %zu: '%s' does not name %s", i, err,
                  cases[i].field);
    }
    struct ifl_lora_info info;
    int32_t n = 0;
    CHECK_EQ(ifl_executor_list_lora(ex, &info, 1, &n), 0);
    CHECK_EQ(info.in_use, 0);
    /* registering: a name in use, a foreign adapter */
    char err[512] = "";
    int32_t id2 = 0;
    struct ifl_lora_rt *rt = make_rt(ex->model, 601, 4, 0, ALL_TARGETS, 0, 0);
    CHECK_EQ(ifl_lora_reg_add(&ex->lora, rt, NULL, "", "v", 0.0f, &id2, err), IFL_EINVAL);
    CHECK(strstr(err, "name") != NULL);
    ifl_executor_destroy(ex, 0);
}

/* The host cache: over its byte limit, idle adapters that can be read
 * again are dropped least recently used first, and come back (the same)
 * when a request names them; an adapter in use is never dropped. */
static int reload_seed(void *user, const struct ifl_model *m, struct ifl_lora_rt **out, char *err)
{
    (void)err;
    *out = make_rt(m, (uint64_t)(uintptr_t)user, 16, 16.0f, ALL_TARGETS, 1, 0);
    return *out ? 0 : IFL_ENOMEM;
}

static void test_exec_host_cache(void)
{
    /* about two of the three adapters fit */
    struct ifl_model *m = load_model("ref/llama-q8_0.gguf");
    if (!m)
        return;
    struct ifl_lora_rt *probe = make_rt(m, 700, 16, 16.0f, ALL_TARGETS, 1, 0);
    int64_t one = probe ? (int64_t)probe->bytes : 0;
    ifl_lora_rt_free(probe);
    ifl_model_free(m);
    ifl_executor *ex = open_ex("ref/llama-q8_0.gguf", 4, one * 2 + one / 2, 0);
    if (!ex)
        return;
    int32_t id[3];
    char err[512] = "";
    for (int i = 0; i < 3; i++) {
        struct ifl_lora_source src = {reload_seed, NULL, (void *)(uintptr_t)(700 + i)};
        struct ifl_lora_rt *rt = NULL;
        reload_seed(src.user, ex->model, &rt, err);
        char name[8];
        snprintf(name, sizeof name, "c%d", i);
        CHECK_EQ(ifl_lora_reg_add(&ex->lora, rt, &src, "", name, 0.0f, &id[i], err), 0);
    }
    struct ifl_lora_info info[3];
    int32_t n = 0;
    ifl_executor_list_lora(ex, info, 3, &n);
    CHECK(n == 3 && info[0].loaded == 0 && info[1].loaded == 1 && info[2].loaded == 1);
    /* c0 comes back and gives what it gave before it was dropped */
    int32_t prompt[PLEN];
    prompt_of(4, prompt);
    struct ifl_request r;
    req_init(&r, prompt, PLEN, 8, 2);
    struct ifl_lora_ref l = {id[0], 1.0f};
    r.lora = &l;
    r.n_lora = 1;
    struct run x1, x2;
    run_req(ex, &r, &x1);
    ifl_executor_list_lora(ex, info, 3, &n);
    CHECK(info[0].loaded == 1 && info[1].loaded == 0 &&
          info[2].loaded == 1); /* c1 was least recent */
    CHECK(ex->lora.n_reloaded == 1 && ex->lora.n_dropped == 2);
    l.id = id[1];
    run_req(ex, &r, &x2); /* c1 back, c2 out */
    l.id = id[0];
    struct run x3;
    run_req(ex, &r, &x3);
    CHECK(same_run(&x1, &x3));
    CHECK(!same_run(&x1, &x2));
    /* held adapters stay: three requests holding all three go over the limit */
    struct ifl_request rs[3];
    struct ifl_lora_ref ls[3];
    for (int i = 0; i < 3; i++) {
        rs[i] = r;
        ls[i] = (struct ifl_lora_ref){id[i], 1.0f};
        rs[i].lora = &ls[i];
        /* long enough to be running still when the list is read: a step
         * of this model on one thread is tens of microseconds, and the
         * enqueue reloads two adapters first */
        rs[i].max_tokens = 256 - PLEN - 8;
        rs[i].sampling.ignore_eos = 1;
    }
    ifl_id q[3];
    CHECK_EQ(ifl_enqueue_many(ex, rs, 3, q, err), 0);
    ifl_executor_list_lora(ex, info, 3, &n);
    CHECK(info[0].loaded && info[1].loaded && info[2].loaded);
    for (int i = 0; i < 3; i++) {
        struct run o;
        collect(ex, q[i], &o);
    }
    ifl_executor_wait_idle(ex, 10000);
    int32_t nl, nres;
    int64_t bytes;
    ifl_lora_reg_counts(&ex->lora, &nl, &nres, &bytes);
    CHECK(nl == 3 && nres == 2 && bytes <= one * 2 + one / 2);
    ifl_executor_destroy(ex, 0);
}

/* Speculative decoding (n-gram drafts, exact acceptance) and adapters: the
 * verify rows carry the sequence's adapters, so the output is plain
 * decoding's with the adapter. */
static void test_exec_speculative(void)
{
    ifl_executor *plain = open_ex("ref/llama-q8_0.gguf", 4, 0, 0);
    ifl_executor *spec = open_ex("ref/llama-q8_0.gguf", 4, 0, 1);
    if (!plain || !spec)
        return;
    int32_t a1 = add_rt(plain, 800, 8, 0.0f, "s", 0.0f), a2 = add_rt(spec, 800, 8, 0.0f, "s", 0.0f);
    int32_t prompt[40];
    for (int p = 0; p < 40; p++)
        prompt[p] = 10 + p % 5; /* repetitive: the n-gram proposer drafts */
    struct ifl_request r;
    req_init(&r, prompt, 40, 32, 1);
    r.sampling.temperature = 0;
    struct ifl_lora_ref l = {a1, 0.4f};
    r.lora = &l;
    r.n_lora = 1;
    struct run x, y;
    run_req(plain, &r, &x);
    l.id = a2;
    run_req(spec, &r, &y);
    CHECK(same_run(&x, &y));
    struct ifl_iteration_stats st;
    ifl_get_iteration_stats(spec, &st);
    fprintf(stderr, "  n-gram drafts with the adapter: %lld run, %lld kept\n",
            (long long)st.draft_tokens, (long long)st.accepted_draft_tokens);
    CHECK(st.draft_tokens > 0);
    ifl_executor_destroy(plain, 0);
    ifl_executor_destroy(spec, 0);
}

/* Beam search with an adapter: every beam's row carries it; the result is
 * the same alone and beside other requests, and differs from the base's. */
static void test_exec_beams(void)
{
    ifl_executor *ex = open_ex("ref/llama-q8_0.gguf", 8, 0, 0);
    if (!ex)
        return;
    int32_t a = add_rt(ex, 900, 8, 16.0f, "beam", 0.0f);
    int32_t prompt[PLEN];
    prompt_of(6, prompt);
    struct ifl_request r;
    req_init(&r, prompt, PLEN, 10, 1);
    r.sampling.temperature = 0;
    r.sampling.beam_width = 3;
    r.num_return_sequences = 3;
    struct ifl_lora_ref l = {a, 1.0f};
    r.lora = &l;
    r.n_lora = 1;
    struct run alone, shared, base;
    run_req(ex, &r, &alone);
    /* again, beside two sampled requests on other adapters' sets */
    struct ifl_request rs[3] = {r, r, r};
    int32_t p1[PLEN], p2[PLEN];
    prompt_of(7, p1);
    prompt_of(8, p2);
    req_init(&rs[1], p1, PLEN, 10, 5);
    req_init(&rs[2], p2, PLEN, 10, 6);
    rs[2].lora = &l;
    rs[2].n_lora = 1;
    ifl_id q[3];
    char err[512] = "";
    CHECK_EQ(ifl_enqueue_many(ex, rs, 3, q, err), 0);
    collect(ex, q[0], &shared);
    for (int i = 1; i < 3; i++) {
        struct run o;
        collect(ex, q[i], &o);
    }
    CHECK_EQ(alone.n, 30); /* three hypotheses of 10 */
    CHECK(same_run(&alone, &shared));
    r.lora = NULL;
    r.n_lora = 0;
    run_req(ex, &r, &base);
    CHECK(!same_run(&alone, &base));
    ifl_executor_destroy(ex, 0);
}

int main(void)
{
    T_RUN(test_rt_checks);
    T_RUN(test_rt_q8_fallback);
    T_RUN(test_forward_vs_merged_f32);
    T_RUN(test_forward_mixed_batch);
    T_RUN(test_exec_mixed_batch);
    T_RUN(test_exec_cache_keys);
    T_RUN(test_exec_unload_while_running);
    T_RUN(test_exec_global_scales);
    T_RUN(test_exec_validation);
    T_RUN(test_exec_host_cache);
    T_RUN(test_exec_speculative);
    T_RUN(test_exec_beams);
    return t_done();
}
