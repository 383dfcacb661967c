/*
 * tpsumbench: what exact tensor parallel sums would cost one process if
 * they were built above the kernels (docs/distributed.md, Numerics).
 *
 *   build/tools/tpsumbench [n nc nr type [segments [table]]]
 *
 * A row-parallel matmul (attn_output, ffn_down) split over ranks adds the
 * ranks' partial products, a grouping of the K sum that one process does
 * not use, so the two differ by roundings (and a quantised input rounds
 * on). One process computing the same partials would have to cut K the
 * same way: here, the whole-K gemm of a table against `segments` gemms,
 * one per K segment (each its own matrix, repacked alone, as a rank's
 * slice is), whose outputs are then added in a pairwise tree. Single
 * thread, the minimum of 40 trials of each (the machine may be shared:
 * the minimum is the figure least disturbed by neighbours).
 *
 * Defaults: n 5632, nc 2048 (tinyllama's ffn_down), nr 1, Q8_0, 8
 * segments, the avx512 table (else the best this CPU has).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/rng.h"
#include "kernels/kernels.h"

#define MAX_SEG 64

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void *alloc64(size_t bytes)
{
    return aligned_alloc(64, (bytes + 63) / 64 * 64);
}

int main(int argc, char **argv)
{
    const int64_t n = argc > 1 ? atoll(argv[1]) : 5632;
    const int nc = argc > 2 ? atoi(argv[2]) : 2048;
    const int nr = argc > 3 ? atoi(argv[3]) : 1;
    const enum ifl_type t = argc > 4 ? (enum ifl_type)atoi(argv[4]) : IFL_TYPE_Q8_0;
    const int ns = argc > 5 ? atoi(argv[5]) : 8;
    const struct ifl_kernels *kt = ifl_kernels_by_name(argc > 6 ? argv[6] : "avx512");
    const struct ifl_kernels *ref = ifl_kernels_ref();
    if (!kt)
        kt = ifl_kernels_best();
    if (n < 1 || nc < 16 || nc % 16 || nr < 1 || ns < 1 || ns > MAX_SEG || (int)t < 0 ||
        t >= IFL_TYPE_COUNT || !kt->gemm[t]) {
        fprintf(stderr, "usage: tpsumbench [n nc nr type [segments [table]]]: nc a multiple of "
                        "16, 1 to 64 segments, a weight type the table computes\n");
        return 2;
    }
    const enum ifl_type act = ifl_type_info(t)->act;
    const int64_t bw = ifl_type_info(t)->blck, ba = ifl_type_info(act)->blck;
    const int64_t unit = bw > ba ? bw : ba, nb = n / unit;
    if (n % unit || nb < ns) {
        fprintf(stderr, "tpsumbench: n %lld is not %d or more whole blocks of %lld\n", (long long)n,
                ns, (long long)unit);
        return 2;
    }
    int64_t k[MAX_SEG + 1];
    for (int s = 0; s <= ns; s++)
        k[s] = nb * s / ns * unit; /* the cut shard.c makes between ranks */
    struct ifl_rng rng;
    ifl_rng_seed(&rng, 1);
    const size_t ws = ifl_type_row_size(t, n), xs = ifl_type_row_size(act, n);
    float *tmp = malloc(sizeof(float) * (size_t)n);
    char *w = malloc(ws * (size_t)nc), *x = malloc(xs * (size_t)nr);
    char *wx = alloc64(ws * (size_t)nc);
    float *y = malloc(sizeof(float) * (size_t)nr * (size_t)nc);
    float *part = malloc(sizeof(float) * (size_t)ns * (size_t)nr * (size_t)nc);
    if (!tmp || !w || !x || !wx || !y || !part)
        return 1;
    for (int c = 0; c < nc; c++) {
        for (int64_t i = 0; i < n; i++)
            tmp[i] = ifl_rng_normal(&rng) * 0.1f;
        ref->quant[t](tmp, w + (size_t)c * ws, n);
    }
    for (int r = 0; r < nr; r++) {
        for (int64_t i = 0; i < n; i++)
            tmp[i] = ifl_rng_normal(&rng);
        ref->quant[act](tmp, x + (size_t)r * xs, n);
    }
    /* the layout the loader would give each: x16 where the table says it pays */
    const int x16 = kt->x16_pays[t] && kt->gemm_x16[t];
    char *seg[MAX_SEG];
    size_t sws[MAX_SEG];
    for (int s = 0; s < ns; s++) {
        const int64_t len = k[s + 1] - k[s];
        const size_t off = ifl_type_row_size(t, k[s]);
        sws[s] = ifl_type_row_size(t, len);
        char *p = alloc64(sws[s] * (size_t)nc), *q = x16 ? alloc64(sws[s] * (size_t)nc) : p;
        if (!p || !q)
            return 1;
        for (int c = 0; c < nc; c++)
            memcpy(p + (size_t)c * sws[s], w + (size_t)c * ws + off, sws[s]);
        for (int g = 0; x16 && g < nc / 16; g++)
            ifl_repack_x16(t, len, p + (size_t)g * 16 * sws[s], sws[s],
                           q + (size_t)g * 16 * sws[s]);
        if (q != p)
            free(p);
        seg[s] = q;
    }
    for (int g = 0; x16 && g < nc / 16; g++)
        ifl_repack_x16(t, n, w + (size_t)g * 16 * ws, ws, wx + (size_t)g * 16 * ws);
    if (!x16)
        memcpy(wx, w, ws * (size_t)nc);
    const ifl_gemm_fn gemm = x16 ? kt->gemm_x16[t] : kt->gemm[t];
    const size_t m = (size_t)nr * (size_t)nc;
    double best_whole = 1e30, best_split = 1e30;
    for (int trial = 0; trial < 40; trial++) {
        double t0 = now();
        gemm(n, nr, nc, x, xs, wx, ws, y, (size_t)nc);
        double t1 = now();
        for (int s = 0; s < ns; s++)
            gemm(k[s + 1] - k[s], nr, nc, x + ifl_type_row_size(act, k[s]), xs, seg[s], sws[s],
                 part + (size_t)s * m, (size_t)nc);
        for (int step = 1; step < ns; step *= 2)
            for (int s = 0; s + step < ns; s += 2 * step) {
                float *a = part + (size_t)s * m;
                const float *b = part + (size_t)(s + step) * m;
                for (size_t i = 0; i < m; i++)
                    a[i] += b[i];
            }
        double t2 = now();
        best_whole = t1 - t0 < best_whole ? t1 - t0 : best_whole;
        best_split = t2 - t1 < best_split ? t2 - t1 : best_split;
    }
    printf("%s %-6s%s n=%lld nc=%d nr=%d: whole %.1f us, %d segments + tree %.1f us (%+.1f%%)\n",
           kt->name, ifl_type_info(t)->name, x16 ? " x16" : "", (long long)n, nc, nr,
           best_whole * 1e6, ns, best_split * 1e6, (best_split / best_whole - 1) * 100);
    for (int s = 0; s < ns; s++)
        free(seg[s]);
    free(tmp);
    free(w);
    free(x);
    free(wx);
    free(y);
    free(part);
    return 0;
}
