/*
 * stepbench: the batched decode step alone, on the forward pass without
 * the executor. n_seq sequences get a prompt of p positions each, then
 * decode together, one row each a step, for `steps` steps. Prints the
 * median step's wall time and the process's CPU time for it (all threads),
 * and the operations a second: 2 x (weights multiplied) x n_seq per step,
 * against the wall clock and against the CPU time divided by the threads
 * (what the step would take if no neighbour took a core from it: on a
 * shared machine the wall figure moves with the load, the CPU one much
 * less). Compare with `kbench peak`. Checks nothing (the tests do).
 * The prompts are timed too, the same way: each sequence's prompt, in
 * forward calls of up to 256 rows, its last row's logits asked for.
 *
 *   build/tools/stepbench MODEL.gguf [n_seq 16] [steps 32] [threads 2] [prompt 128]
 *                         [fill: prompt | random] [kv type: f16 | q8_0]
 *
 * fill random skips the prompt's forward passes: the cache's first
 * `prompt` positions get random keys and values (normal, as F16 or Q8_0),
 * so a decode at depth 8192 is measured in seconds, not minutes of
 * prefill. The attention reads as many bytes either way.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/err.h"
#include "core/fp16.h"
#include "core/rng.h"
#include "kernels/kernels.h"
#include "model/forward.h"
#include "model/kv_store.h"
#include "model/model.h"

static double clock_s(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double mat_params(const struct ifl_mat *w)
{
    return w->data ? (double)w->n_in * (double)w->n_out : 0;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: stepbench MODEL.gguf [n_seq 16] [steps 32] [threads 2] [prompt "
                        "128]\n");
        return 2;
    }
    const int n_seq = argc > 2 ? atoi(argv[2]) : 16, steps = argc > 3 ? atoi(argv[3]) : 32;
    const int nth = argc > 4 ? atoi(argv[4]) : 2, prompt = argc > 5 ? atoi(argv[5]) : 128;
    const int fill_random = argc > 6 && !strcmp(argv[6], "random");
    const enum ifl_type kvt = argc > 7 && !strcmp(argv[7], "q8_0") ? IFL_TYPE_Q8_0 : IFL_TYPE_F16;
    if (n_seq < 1 || n_seq > 256 || steps < 2 || nth < 1 || prompt < 1 || prompt > 8192 ||
        (argc > 6 && !fill_random && strcmp(argv[6], "prompt")) ||
        (argc > 7 && kvt == IFL_TYPE_F16 && strcmp(argv[7], "f16"))) {
        fprintf(stderr, "stepbench: n_seq 1..256, steps >= 2, threads >= 1, prompt 1..8192, "
                        "fill prompt or random, kv type f16 or q8_0\n");
        return 2;
    }
    char err[IFL_ERR_LEN] = "";
    struct ifl_model *m = NULL;
    if (ifl_model_load(&m, argv[1], err)) {
        fprintf(stderr, "stepbench: %s\n", err);
        return 1;
    }
    enum { BS = 16, CHUNK = 256 };
    const int ctx = prompt + steps + 1, bps = (ctx + BS - 1) / BS;
    const int R = n_seq > CHUNK ? n_seq : CHUNK;
    struct ifl_kv_store *kv = NULL;
    struct ifl_fwd *f = NULL;
    struct ifl_fwd_config fc = {.max_rows = R, .max_ctx = ctx, .n_threads = nth};
    if (ifl_kv_store_create(&kv, &m->hp, kvt, n_seq * bps, BS, err) ||
        ifl_fwd_create(&f, m, kv, &fc, err)) {
        fprintf(stderr, "stepbench: %s\n", err);
        return 1;
    }
    int32_t *tables = malloc(sizeof(int32_t) * (size_t)(n_seq * bps));
    const int32_t **tp = malloc(sizeof(*tp) * (size_t)n_seq);
    int32_t *nb = malloc(sizeof(int32_t) * (size_t)n_seq);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)R), *pos = malloc(sizeof(int32_t) * (size_t)R);
    int32_t *seq = malloc(sizeof(int32_t) * (size_t)R);
    uint8_t *want = calloc((size_t)R, 1);
    float *logits = malloc(sizeof(float) * (size_t)R * (size_t)m->hp.n_vocab);
    double *wall = malloc(sizeof(double) * (size_t)steps), *cpu = malloc(sizeof(double) * steps);
    if (!tables || !tp || !nb || !tok || !pos || !seq || !want || !logits || !wall || !cpu)
        return 1;
    for (int s = 0; s < n_seq; s++) {
        for (int i = 0; i < bps; i++)
            tables[s * bps + i] = s * bps + i;
        tp[s] = tables + s * bps;
        nb[s] = bps;
    }
    const int32_t nv = m->hp.n_vocab;
    if (fill_random) { /* every sequence's blocks are its own: s * bps .. */
        struct ifl_rng rng;
        ifl_rng_seed(&rng, 7);
        const int dmax = kv->k_dim > kv->v_dim ? kv->k_dim : kv->v_dim;
        float *row = malloc(sizeof(float) * (size_t)dmax);
        if (!row)
            return 1;
        /* a position's keys, then values, drawn in order and stored piece
         * by piece (one KV head each, or hg for a Q8_0 cache) */
        for (int il = 0; il < m->hp.n_layer; il++)
            for (int s = 0; s < n_seq; s++)
                for (int p = 0; p < prompt; p++)
                    for (int h = 0; h < 2; h++) {
                        const int n = (h ? kv->v_dim : kv->k_dim) / kv->n_piece;
                        const size_t pb = h ? kv->v_piece : kv->k_piece;
                        for (int pc = 0; pc < kv->n_piece; pc++) {
                            char *dst = ifl_kv_at(kv, (h ? kv->v : kv->k)[il], pb, s * bps + p / BS,
                                                  p % BS, pc);
                            for (int e = 0; e < n; e++)
                                row[e] = ifl_rng_normal(&rng);
                            if (kvt == IFL_TYPE_Q8_0)
                                ifl_kernels_ref()->quant[IFL_TYPE_Q8_0](row, dst, n);
                            else
                                for (int e = 0; e < n; e++)
                                    ((uint16_t *)(void *)dst)[e] = ifl_f32_to_f16(row[e]);
                        }
                    }
        free(row);
    }
    const int n_pc = n_seq * ((prompt + CHUNK - 1) / CHUNK);
    double *pwall = malloc(sizeof(double) * (size_t)n_pc), *pcpu = malloc(sizeof(double) * n_pc);
    if (!pwall || !pcpu)
        return 1;
    int pc = 0;
    for (int s = 0; s < n_seq && !fill_random; s++)
        for (int p0 = 0; p0 < prompt; p0 += CHUNK) {
            int n = prompt - p0 < CHUNK ? prompt - p0 : CHUNK;
            for (int i = 0; i < n; i++) {
                tok[i] = (s * 7919 + (p0 + i) * 104729) % (nv - 10) + 10;
                pos[i] = p0 + i;
                seq[i] = s;
                want[i] = p0 + i == prompt - 1;
            }
            struct ifl_batch b = {.n_rows = n,
                                  .tokens = tok,
                                  .pos = pos,
                                  .seq = seq,
                                  .logits = want,
                                  .n_seqs = n_seq,
                                  .block_tables = tp,
                                  .n_blocks = nb};
            double w0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
            if (ifl_forward(f, &b, logits, err)) {
                fprintf(stderr, "stepbench: %s\n", err);
                return 1;
            }
            pwall[pc] = clock_s(CLOCK_MONOTONIC) - w0;
            pcpu[pc++] = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
        }
    for (int st = 0; st < steps; st++) {
        for (int s = 0; s < n_seq; s++) {
            tok[s] = (s * 31 + st * 17) % (nv - 10) + 10;
            pos[s] = prompt + st;
            seq[s] = s;
            want[s] = 1;
        }
        struct ifl_batch b = {.n_rows = n_seq,
                              .tokens = tok,
                              .pos = pos,
                              .seq = seq,
                              .logits = want,
                              .n_seqs = n_seq,
                              .block_tables = tp,
                              .n_blocks = nb};
        double w0 = clock_s(CLOCK_MONOTONIC), c0 = clock_s(CLOCK_PROCESS_CPUTIME_ID);
        if (ifl_forward(f, &b, logits, err)) {
            fprintf(stderr, "stepbench: %s\n", err);
            return 1;
        }
        wall[st] = clock_s(CLOCK_MONOTONIC) - w0;
        cpu[st] = clock_s(CLOCK_PROCESS_CPUTIME_ID) - c0;
    }
    /* the weights each row multiplies: every matrix but the embedding table */
    double params = mat_params(&m->output), lparams = 0;
    for (int il = 0; il < m->hp.n_layer; il++) {
        const struct ifl_layer_weights *w = &m->layers[il];
        lparams += mat_params(&w->wq) + mat_params(&w->wk) + mat_params(&w->wv) +
                   mat_params(&w->wo) + mat_params(&w->w_gate) + mat_params(&w->w_up) +
                   mat_params(&w->w_down);
    }
    params += lparams;
    /* a prompt call multiplies every row by the layers, its last by the output */
    if (pc > 0 && prompt <= CHUNK) {
        const double pops = 2.0 * (lparams * prompt + mat_params(&m->output));
        qsort(pwall, (size_t)pc, sizeof(double), cmp_double);
        qsort(pcpu, (size_t)pc, sizeof(double), cmp_double);
        const double pwm = pwall[pc / 2], pcm = pcpu[pc / 2];
        printf("prompt of %d (%d calls): wall median %.2f ms (best %.2f), CPU median %.2f ms "
               "(best %.2f); %.1f tok/s by the wall, %.1f by CPU time / %d threads\n",
               prompt, pc, pwm * 1e3, pwall[0] * 1e3, pcm * 1e3, pcpu[0] * 1e3, prompt / pwm,
               prompt / (pcm / nth), nth);
        printf("prompt GOP/s: %.1f by the wall clock, %.1f by CPU time / %d threads (best %.1f)\n",
               pops / pwm * 1e-9, pops / (pcm / nth) * 1e-9, nth, pops / (pcpu[0] / nth) * 1e-9);
    }
    const double ops = 2.0 * params * n_seq;
    qsort(wall, (size_t)steps, sizeof(double), cmp_double);
    qsort(cpu, (size_t)steps, sizeof(double), cmp_double);
    const double wm = wall[steps / 2], cm = cpu[steps / 2];
    printf("%s: %d sequences at positions %d.., %d threads, %.3f G weights multiplied a row\n",
           argv[1], n_seq, prompt, nth, params * 1e-9);
    printf("step: wall median %.2f ms (best %.2f, tenth %.2f), CPU median %.2f ms (best %.2f, "
           "tenth %.2f); %.1f tok/s\n",
           wm * 1e3, wall[0] * 1e3, wall[steps / 10] * 1e3, cm * 1e3, cpu[0] * 1e3,
           cpu[steps / 10] * 1e3, n_seq / wm);
    printf("GOP/s: %.1f by the wall clock (best step %.1f), %.1f by CPU time / %d threads "
           "(best %.1f)\n",
           ops / wm * 1e-9, ops / wall[0] * 1e-9, ops / (cm / nth) * 1e-9, nth,
           ops / (cpu[0] / nth) * 1e-9);
    free(tables);
    free(tp);
    free(nb);
    free(tok);
    free(pos);
    free(seq);
    free(want);
    free(logits);
    free(wall);
    free(cpu);
    free(pwall);
    free(pcpu);
    ifl_fwd_free(f);
    ifl_kv_store_free(kv);
    ifl_model_free(m);
    return 0;
}
