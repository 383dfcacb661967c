/*
 * attnbench: one kernel table's attn_tile_f16 alone, on a decode's KV
 * group (8 queries of width 64, tinyllama's shape), tiles of 64 positions.
 * Prints the best of five rounds' CPU time a tile (this thread's clock, so
 * a loaded machine moves it less than the wall clock):
 *   warm        the same tile again and again (the kernel's arithmetic);
 *   memory      22 x 8192 positions walked once, rows laid out as the
 *               paged cache lays them (a position's four KV heads side by
 *               side: this head's 128 bytes of keys every 512);
 *   contiguous  the same walk with this head's rows back to back (keys and
 *               values each one stream), to show what the layout costs.
 * Checks nothing (test_kernels does).
 *
 *   build/tools/attnbench [table avx512]
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/fp16.h"
#include "kernels/kernels.h"

enum { D = 64, NT = 64, NQ = 8, HEADS = 4, DEPTH = 8192 * 22 };

static double cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Where position p's keys (v 0) or values (v 1) of head 0 start, of npos
 * positions: layout 0 as the cache (rows of HEADS heads, keys then values
 * in separate arrays), 1 contiguous. */
static const void *row_of(const uint16_t *kv, size_t npos, int layout, size_t p, int v)
{
    if (layout == 0)
        return kv + (size_t)v * npos * HEADS * D + p * HEADS * D;
    return kv + (size_t)v * npos * D + p * D;
}

/* Best CPU time of one tile over five rounds: `reps` walks over npos
 * positions (a multiple of NT) of layout. */
static double run(const struct ifl_kernels *k, const uint16_t *kv, size_t npos, int layout,
                  int reps, float *sink)
{
    float q[NQ * D], o[NQ * D], m[NQ], l[NQ];
    uint8_t lo[NQ], hi[NQ];
    const void *kr[NT], *vr[NT], *kn[NT], *vn[NT];
    for (int i = 0; i < NQ * D; i++)
        q[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
    memset(lo, 0, sizeof lo);
    memset(hi, NT, sizeof hi);
    double best = 1e30;
    for (int round = 0; round < 5; round++) {
        for (int i = 0; i < NQ; i++) {
            m[i] = -INFINITY;
            l[i] = 0;
        }
        memset(o, 0, sizeof o);
        const size_t nt = npos / NT;
        long calls = 0;
        const double t0 = cpu_s();
        for (int r = 0; r < reps; r++)
            for (size_t tl = 0; tl < nt; tl++) {
                const size_t tn = tl + 1 < nt ? tl + 1 : tl;
                for (int t = 0; t < NT; t++) {
                    kr[t] = row_of(kv, npos, layout, tl * NT + (size_t)t, 0);
                    vr[t] = row_of(kv, npos, layout, tl * NT + (size_t)t, 1);
                    kn[t] = row_of(kv, npos, layout, tn * NT + (size_t)t, 0);
                    vn[t] = row_of(kv, npos, layout, tn * NT + (size_t)t, 1);
                }
                const struct ifl_attn_tile a = {.q = q,
                                                .k = kr,
                                                .v = vr,
                                                .lo = lo,
                                                .hi = hi,
                                                .m = m,
                                                .l = l,
                                                .o = o,
                                                .scale = 0.125f,
                                                .d = D,
                                                .dv = D,
                                                .nq = NQ,
                                                .nt = NT,
                                                .pk = kn,
                                                .pv = vn,
                                                .pnt = NT};
                k->attn_tile_f16(&a);
                calls++;
            }
        const double dt = (cpu_s() - t0) / (double)calls;
        best = dt < best ? dt : best;
    }
    *sink += o[0] / l[0];
    return best;
}

int main(int argc, char **argv)
{
    const char *name = argc > 1 ? argv[1] : "avx512";
    const struct ifl_kernels *k = ifl_kernels_by_name(name);
    if (!k) {
        fprintf(stderr, "attnbench: no kernel table '%s' on this CPU or build\n", name);
        return 2;
    }
    const size_t n = (size_t)DEPTH * HEADS * D * 2; /* keys and values of every head */
    uint16_t *kv = malloc(sizeof(uint16_t) * n);
    if (!kv)
        return 1;
    for (size_t i = 0; i < n; i++)
        kv[i] = ifl_f32_to_f16((float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f);
    float sink = 0;
    const double warm = run(k, kv, NT, 0, 20000, &sink);
    const double mem = run(k, kv, DEPTH, 0, 1, &sink);
    const double contig = run(k, kv, DEPTH, 1, 1, &sink);
    printf("%s attn_tile_f16, %d queries x %d positions, d %d: warm %.0f ns a tile, memory %.0f, "
           "contiguous %.0f (%.3g)\n",
           k->name, NQ, NT, D, warm * 1e9, mem * 1e9, contig * 1e9, (double)sink);
    free(kv);
    return 0;
}
