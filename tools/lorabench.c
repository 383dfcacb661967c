/*
 * lorabench: the cost of LoRA adapters in the forward pass. Decodes n_seq
 * sequences (after a prompt of 64 positions each) one row each per step,
 * base only, then with n_adapters random adapters of a rank over every
 * attention and FFN projection, the sequences spread evenly over them,
 * alternating the two so that the machine's drift hits both. Prints
 * aggregate tokens/s of each and their ratio. Checks nothing (the tests
 * do); adapters are made in memory, so no adapter file is needed.
 *
 *   build/tools/lorabench MODEL.gguf [n_seq 16] [n_adapters 4] [rank 16] [steps 64] [threads 0]
 *                         [f32|f16|q8_0]   (how the adapters are held)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/err.h"
#include "core/rng.h"
#include "model/forward.h"
#include "model/kv_store.h"
#include "model/lora.h"
#include "model/lora_rt.h"
#include "model/model.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static struct ifl_lora_rt *random_adapter(const struct ifl_model *m, uint64_t seed, int rank,
                                          int hold)
{
    struct ifl_rng r;
    ifl_rng_seed(&r, seed);
    struct ifl_lora l;
    memset(&l, 0, sizeof l);
    l.n_layer = m->hp.n_layer;
    l.layers = calloc((size_t)l.n_layer * IFL_LORA_N_TARGETS, sizeof(*l.layers));
    for (int il = 0; il < l.n_layer; il++) {
        const struct ifl_layer_weights *w = &m->layers[il];
        const struct ifl_mat *mats[IFL_LORA_N_TARGETS] = {&w->wq,     &w->wk,   &w->wv,    &w->wo,
                                                          &w->w_gate, &w->w_up, &w->w_down};
        for (int t = 0; t < IFL_LORA_N_TARGETS; t++) {
            struct ifl_lora_mat *lm = &l.layers[(size_t)il * IFL_LORA_N_TARGETS + (size_t)t];
            lm->rank = rank;
            lm->n_in = mats[t]->n_in;
            lm->n_out = mats[t]->n_out;
            lm->alpha = (float)rank;
            lm->a = malloc(sizeof(float) * (size_t)rank * (size_t)lm->n_in);
            lm->b = malloc(sizeof(float) * (size_t)rank * (size_t)lm->n_out);
            for (int64_t i = 0; i < rank * lm->n_in; i++)
                lm->a[i] = 0.02f * ifl_rng_normal(&r);
            for (int64_t i = 0; i < rank * lm->n_out; i++)
                lm->b[i] = 0.02f * ifl_rng_normal(&r);
        }
    }
    struct ifl_lora_rt *rt = NULL;
    char err[IFL_ERR_LEN] = "";
    if (ifl_lora_rt_create(&rt, &l, m, hold, err))
        fprintf(stderr, "lorabench: %s\n", err);
    for (int i = 0; i < l.n_layer * IFL_LORA_N_TARGETS; i++) {
        free(l.layers[i].a);
        free(l.layers[i].b);
    }
    free(l.layers);
    return rt;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: lorabench MODEL.gguf [n_seq] [n_adapters] [rank] [steps] [threads] "
                        "[f32|f16|q8_0]\n");
        return 2;
    }
    int n_seq = argc > 2 ? atoi(argv[2]) : 16, n_ad = argc > 3 ? atoi(argv[3]) : 4;
    int rank = argc > 4 ? atoi(argv[4]) : 16, steps = argc > 5 ? atoi(argv[5]) : 64;
    int nth = argc > 6 ? atoi(argv[6]) : 0;
    int hold = argc <= 7 || !strcmp(argv[7], "f32") ? IFL_LORA_HOLD_F32
               : !strcmp(argv[7], "f16")            ? IFL_LORA_HOLD_F16
               : !strcmp(argv[7], "q8_0")           ? IFL_LORA_HOLD_Q8_0
                                                    : -1;
    if (hold < 0) {
        fprintf(stderr, "lorabench: hold adapters in f32, f16 or q8_0, not '%s'\n", argv[7]);
        return 2;
    }
    if (n_seq < 1 || n_seq > 64 || n_ad < 1 || n_ad > 64 || rank < 1 || steps < 1)
        return 2;
    char err[IFL_ERR_LEN] = "";
    struct ifl_model *m = NULL;
    if (ifl_model_load(&m, argv[1], err)) {
        fprintf(stderr, "lorabench: %s\n", err);
        return 1;
    }
    enum { PROMPT = 64, BS = 16 };
    const int ctx = PROMPT + steps * 2 + 1, bps = (ctx + BS - 1) / BS;
    struct ifl_kv_store *kv = NULL;
    struct ifl_fwd *f = NULL;
    struct ifl_fwd_config fc = {
        .max_rows = PROMPT * 2 > n_seq ? PROMPT * 2 : n_seq, .max_ctx = ctx, .n_threads = nth};
    if (ifl_kv_store_create(&kv, &m->hp, IFL_TYPE_F16, n_seq * bps, BS, err) ||
        ifl_fwd_create(&f, m, kv, &fc, err)) {
        fprintf(stderr, "lorabench: %s\n", err);
        return 1;
    }
    int32_t *tables = malloc(sizeof(int32_t) * (size_t)(n_seq * bps));
    const int32_t **tp = malloc(sizeof(*tp) * (size_t)n_seq);
    int32_t *nb = malloc(sizeof(int32_t) * (size_t)n_seq);
    for (int s = 0; s < n_seq; s++) {
        for (int i = 0; i < bps; i++)
            tables[s * bps + i] = s * bps + i;
        tp[s] = tables + s * bps;
        nb[s] = bps;
    }
    struct ifl_lora_rt **ad = malloc(sizeof(*ad) * (size_t)n_ad);
    size_t bytes = 0;
    for (int i = 0; i < n_ad; i++) {
        ad[i] = random_adapter(m, 1000 + (uint64_t)i, rank, hold);
        if (!ad[i])
            return 1;
        bytes += ad[i]->bytes;
    }
    const int R = fc.max_rows;
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)R), *pos = malloc(sizeof(int32_t) * (size_t)R);
    int32_t *seq = malloc(sizeof(int32_t) * (size_t)R);
    uint8_t *want = calloc((size_t)R, 1);
    float *sc = calloc((size_t)R * (size_t)n_ad, sizeof(float));
    float *logits = malloc(sizeof(float) * (size_t)R * (size_t)m->hp.n_vocab);
    /* the prompts, base only (their KV is the same for both runs' purposes) */
    for (int s = 0; s < n_seq; s++) {
        for (int p = 0; p < PROMPT; p++) {
            tok[p] = (s * 7 + p * 13) % 1000 + 10;
            pos[p] = p;
            seq[p] = s;
            want[p] = p == PROMPT - 1;
        }
        struct ifl_batch b = {.n_rows = PROMPT,
                              .tokens = tok,
                              .pos = pos,
                              .seq = seq,
                              .logits = want,
                              .n_seqs = n_seq,
                              .block_tables = tp,
                              .n_blocks = nb};
        if (ifl_forward(f, &b, logits, err)) {
            fprintf(stderr, "lorabench: %s\n", err);
            return 1;
        }
    }
    double t_base = 0, t_lora = 0;
    double *dts = malloc(sizeof(double) * (size_t)steps * 2); /* [kind][steps] */
    int n_dt[2] = {0, 0};
    for (int st = 0; st < steps * 2; st++) {
        int with = st & 1;
        for (int s = 0; s < n_seq; s++) {
            tok[s] = (s * 11 + st * 5) % 1000 + 10;
            pos[s] = PROMPT + st;
            seq[s] = s;
            want[s] = 1;
            for (int i = 0; i < n_ad; i++)
                sc[s * n_ad + i] = with && s % n_ad == i ? 1.0f : 0.0f;
        }
        struct ifl_batch b = {.n_rows = n_seq,
                              .tokens = tok,
                              .pos = pos,
                              .seq = seq,
                              .logits = want,
                              .n_seqs = n_seq,
                              .block_tables = tp,
                              .n_blocks = nb,
                              .n_lora = with ? n_ad : 0,
                              .lora = (const struct ifl_lora_rt *const *)ad,
                              .lora_scale = sc};
        double t0 = now();
        if (ifl_forward(f, &b, logits, err)) {
            fprintf(stderr, "lorabench: %s\n", err);
            return 1;
        }
        double dt = now() - t0;
        if (st >= 4) { /* warm-up */
            *(with ? &t_lora : &t_base) += dt;
            dts[with * steps + n_dt[with]++] = dt;
        }
    }
    int counted = steps - 2;
    double rb = n_seq * counted / t_base, rl = n_seq * counted / t_lora;
    printf("%s: %d sequences, %d adapters of rank %d on every projection (%s, %.1f MiB each), "
           "%d threads\n",
           argv[1], n_seq, n_ad, rank,
           hold == IFL_LORA_HOLD_F16    ? "F16"
           : hold == IFL_LORA_HOLD_Q8_0 ? "Q8_0"
                                        : "F32",
           (double)bytes / n_ad / (1 << 20), ifl_fwd_n_threads(f));
    printf("base only %.1f tok/s, with adapters %.1f tok/s: %.3fx\n", rb, rl, rl / rb);
    /* the median step of each: what a step costs when nothing else took
     * the cores, on a machine other work shares */
    qsort(dts, (size_t)n_dt[0], sizeof(double), cmp_double);
    qsort(dts + steps, (size_t)n_dt[1], sizeof(double), cmp_double);
    double mb = dts[n_dt[0] / 2], ml = dts[steps + n_dt[1] / 2];
    printf("median steps: base only %.1f tok/s, with adapters %.1f tok/s: %.3fx\n", n_seq / mb,
           n_seq / ml, mb / ml);
    free(dts);
    for (int i = 0; i < n_ad; i++)
        ifl_lora_rt_free(ad[i]);
    ifl_fwd_free(f);
    ifl_kv_store_free(kv);
    ifl_model_free(m);
    free(ad);
    free(tables);
    free(tp);
    free(nb);
    free(tok);
    free(pos);
    free(seq);
    free(want);
    free(sc);
    free(logits);
    return 0;
}
