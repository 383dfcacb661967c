/*
 * kbench: single-thread GFLOP/s of gemm per weight type and kernel table,
 * for decode-like (nr = 1, 16) and prefill-like (nr = 128) shapes at
 * n = nc = 2048 by default, and the x16 kernels (kernels.h) on the same
 * rows repacked. Prints figures; checks nothing (the tests do).
 * `kbench peak` measures the CPU's int8, BF16 and float multiply-add peaks
 * instead, one thread and two (tools/kbench_peak.h); `kbench ports` which
 * of the tiles' other instructions share vpdpbusd's pipes
 * (tools/kbench_ports.h).
 *
 *   build/tools/kbench [n] [nc] [table[:type]...]
 *   build/tools/kbench peak
 *   build/tools/kbench ports
 *
 * A table named as table:type (avx512bf16:bf16) runs that type alone.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <immintrin.h>

#include "core/rng.h"
#include "kernels/kernels.h"

/* This thread's CPU time, not the wall clock: on a VM shared with other
 * work, time the thread spent descheduled does not count against the
 * kernel (cache and memory contention still do). */
static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

#include "kbench_peak.h"
#include "kbench_ports.h"

/* Whether any of the tables named runs type t (table:type runs one). */
static int wanted(const char **names, int ntab, enum ifl_type t)
{
    for (int k = 0; k < ntab; k++) {
        const char *only = strchr(names[k], ':');
        if (!only || strcmp(only + 1, ifl_type_info(t)->name) == 0)
            return 1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && strcmp(argv[1], "peak") == 0)
        return peak_main();
    if (argc > 1 && strcmp(argv[1], "ports") == 0)
        return ports_main();
    int64_t n = argc > 1 ? atoll(argv[1]) : 2048;
    int nc = argc > 2 ? atoi(argv[2]) : 2048;
    static const char *all[] = {"scalar", "avx2", "avx512"};
    const char **names = argc > 3 ? (const char **)argv + 3 : all;
    int ntab = argc > 3 ? argc - 3 : 3;
    static const enum ifl_type types[] = {
        IFL_TYPE_F32,    IFL_TYPE_F16,    IFL_TYPE_BF16, IFL_TYPE_Q8_0, IFL_TYPE_Q4_0,
        IFL_TYPE_Q4_K,   IFL_TYPE_Q5_K,   IFL_TYPE_Q6_K, IFL_TYPE_Q5_0, IFL_TYPE_Q5_1,
        IFL_TYPE_IQ4_NL, IFL_TYPE_IQ4_XS, IFL_TYPE_Q3_K, IFL_TYPE_Q2_K, IFL_TYPE_MXFP4};
    static const int nrs[] = {1, 16, 128};
    const int maxr = 128;
    const struct ifl_kernels *ref = ifl_kernels_ref();
    struct ifl_rng rng;
    ifl_rng_seed(&rng, 1);
    float *xf = malloc(sizeof(float) * (size_t)(n * maxr));
    float *tmp = malloc(sizeof(float) * (size_t)n);
    float *y = malloc(sizeof(float) * (size_t)maxr * (size_t)nc);
    if (!xf || !tmp || !y)
        return 1;
    for (int64_t i = 0; i < n * maxr; i++)
        xf[i] = ifl_rng_normal(&rng);
    printf("n=%lld nc=%d, GFLOP/s (2*n*nr*nc per call), single thread\n", (long long)n, nc);
    printf("%-10s %-10s %9s %9s %9s\n", "table", "type", "nr=1", "nr=16", "nr=128");
    for (int ti = 0; ti < (int)(sizeof(types) / sizeof(types[0])); ti++) {
        enum ifl_type t = types[ti], act = ifl_type_info(t)->act;
        if (!wanted(names, ntab, t))
            continue;
        size_t ws = ifl_type_row_size(t, n), xs = ifl_type_row_size(act, n);
        char *w = malloc(ws * (size_t)nc), *x = malloc(xs * maxr);
        if (!w || !x)
            return 1;
        for (int c = 0; c < nc; c++) {
            for (int64_t i = 0; i < n; i++)
                tmp[i] = ifl_rng_normal(&rng) * 0.1f;
            ref->quant[t](tmp, w + (size_t)c * ws, n);
        }
        /* the repacked copy on huge pages, as the model loader puts it */
        size_t wxn = ws * (size_t)nc;
        char *wx = mmap(NULL, wxn, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (wx == MAP_FAILED)
            return 1;
        madvise(wx, wxn, MADV_HUGEPAGE);
        for (int g = 0; ref->gemm_x16[t] && g < nc / 16; g++)
            ifl_repack_x16(t, n, w + (size_t)g * 16 * ws, ws, wx + (size_t)g * 16 * ws);
        for (int r = 0; r < maxr; r++)
            ref->quant[act](xf + r * n, x + (size_t)r * xs, n);
        for (int k = 0; k < ntab; k++) {
            char tab[64];
            snprintf(tab, sizeof tab, "%s", names[k]);
            char *only = strchr(tab, ':');
            if (only)
                *only++ = '\0';
            const struct ifl_kernels *kt = ifl_kernels_by_name(tab);
            if (!kt || (only && strcmp(only, ifl_type_info(t)->name) != 0))
                continue;
            for (int x16 = 0; x16 < 2; x16++) {
                ifl_gemm_fn gemm = x16 ? kt->gemm_x16[t] : kt->gemm[t];
                if (!gemm || (x16 && (nc % 16 || kt == ref || gemm == ref->gemm_x16[t])))
                    continue;
                const char *wk = x16 ? wx : w;
                printf("%-10s %-6s%s", kt->name, ifl_type_info(t)->name, x16 ? " x16" : "    ");
                for (int ri = 0; ri < 3; ri++) {
                    int nr = nrs[ri];
                    /* the best of five short trials: this VM's neighbours
                     * take 10-30 % at random moments */
                    double flop = 2.0 * (double)n * nr * nc, best = 0;
                    for (int trial = 0; trial < (kt == ref ? 1 : 5); trial++) {
                        double t0 = now(), el;
                        int reps = 0;
                        do {
                            gemm(n, nr, nc, x, xs, wk, ws, y, (size_t)nc);
                            reps++;
                            el = now() - t0;
                        } while (el < 0.06 && kt != ref);
                        if (flop * reps / el > best)
                            best = flop * reps / el;
                    }
                    printf(" %9.1f", best * 1e-9);
                }
                printf("\n");
                fflush(stdout);
            }
        }
        munmap(wx, wxn);
        free(w);
        free(x);
    }
    free(xf);
    free(tmp);
    free(y);
    return 0;
}
