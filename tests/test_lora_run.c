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
#include "model/forward.h"
#include "model/kv_store.h"
#include "model/lora.h"
#include "model/lora_rt.h"
#include "model/model.h"
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

static struct ifl_lora_rt *make_rt(const struct ifl_model *m, uint64_t seed, int rank, float alpha,
                                   unsigned mask, int embd, int output)
{
    struct ifl_lora *l = make_lora(m, seed, rank, alpha, mask, embd, output);
    struct ifl_lora_rt *rt = NULL;
    char err[IFL_ERR_LEN] = "";
    int rc = ifl_lora_rt_create(&rt, l, m, err);
    CHECK_MSG(rc == 0, "ifl_lora_rt_create: %s", err);
    drop_lora(l);
    return rt;
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
    CHECK_EQ(ifl_lora_rt_create(&rt, l, m, err), 0);
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
    double mx = 0, moved = 0, big = 0;
    for (size_t i = 0; i < N * nv; i++) {
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
    CHECK(moved > 0.05);
    rig_close(&ga);
    rig_close(&gb);
    for (int i = 0; i < nb; i++)
        free(bufs[i]);
    free(mm.layers);
    free(la);
    free(lb);
    free(l0);
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
    for (int i = 0; i < 4; i++)
        rts[i] = make_rt(m, 100 + (uint64_t)i, i == 3 ? 4 : 16, i == 1 ? 0.0f : 32.0f,
                         i == 2 ? 0x11 : ALL_TARGETS, i == 0, i == 3);
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
        int len = LEN - s % 4; /* ragged */
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
    CHECK_EQ(ifl_lora_rt_create(&rt, l, m, err), IFL_EINVAL);
    CHECK(strstr(err, "blk.2.attn_k.weight") != NULL);
    CHECK(rt == NULL);
    l->layers[2 * IFL_LORA_N_TARGETS + IFL_LORA_WK].n_out -= 1;
    l->layers[0 * IFL_LORA_N_TARGETS + IFL_LORA_WK].a[5] = INFINITY;
    CHECK_EQ(ifl_lora_rt_create(&rt, l, m, err), IFL_EINVAL);
    CHECK(strstr(err, "blk.0.attn_k.weight") != NULL);
    l->layers[0 * IFL_LORA_N_TARGETS + IFL_LORA_WK].a[5] = 0;
    CHECK_EQ(ifl_lora_rt_create(&rt, l, m, err), 0);
    CHECK(rt && rt->n_adapted == m->hp.n_layer && rt->max_rank == 4 && rt->bytes > 0);
    ifl_lora_rt_free(rt);
    drop_lora(l);
    ifl_model_free(m);
}

int main(void)
{
    T_RUN(test_rt_checks);
    T_RUN(test_forward_vs_merged_f32);
    T_RUN(test_forward_mixed_batch);
    return t_done();
}
