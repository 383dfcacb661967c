/*
 * attnbench: one kernel table's attn_tile_f16 (or attn_tile_q8_0) alone,
 * on a decode's KV group (8 queries of width 64, tinyllama's shape; or
 * fewer queries a call, 1 for a model without grouped heads),
 * tiles of 64 positions.
 * Prints the best of five rounds' CPU time a tile (this thread's clock, so
 * a loaded machine moves it less than the wall clock):
 *   warm        one head's tile again and again (the kernel's arithmetic);
 *   cache       22 x 8192 positions walked once, each tile's heads in turn
 *               (as a decode takes them), laid out as the paged
 *               cache lays them (kv_store.h): blocks of 16 positions, each
 *               holding its four KV heads one after another, so this
 *               head's 16 positions are one 2 KiB run of keys (and one of
 *               values) every 8 KiB; the blocks in order;
 *   scattered   the same with the blocks in a random order (a sequence's
 *               blocks lie wherever the allocator found them);
 *   interleaved the layout before issue 42 (a position's four heads side
 *               by side: this head's 128 bytes of keys every 512);
 *   contiguous  this head's rows back to back (keys and values each one
 *               stream): what no layout beats.
 * Checks nothing (test_kernels does).
 *
 *   build/tools/attnbench [table avx512] [heads walked 4] [cache f16|q8_0] [queries 8]
 *
 * A Q8_0 cache's rows are 68 bytes (two blocks) where F16's are 128; its
 * queries are quantised once, outside the timing (the forward does it
 * once a layer for all the tiles).
 *
 * With 1 head walked a tile, the walks read only head 0's part of the
 * memory (the measure that showed the interleaved layout's cost); with 4,
 * every byte, as the decode does.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "core/fp16.h"
#include "kernels/kernels.h"
#include "kernels/types.h"

enum { D = 64, NT = 64, NQ = 8, HEADS = 4, BS = 16, DEPTH = 8192 * 22 };
static int nq = NQ; /* queries a call: 8 (a decode's group), or fewer (1: a model without
                       grouped heads) */
enum { CACHE, SCATTERED, INTERLEAVED, CONTIGUOUS };

static uint32_t *perm; /* [DEPTH / BS]: where walk block i lies, for SCATTERED */
static size_t RB;      /* bytes of a head's row: D * 2 (F16) or D / 32 * 34 (Q8_0) */

static double cpu_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

/* Where position p's keys (v 0) or values (v 1) of head h start, of npos
 * positions, keys then values in separate arrays. */
static const void *row_of(const char *kv, size_t npos, int layout, size_t p, int v, int h)
{
    const char *a = kv + (size_t)v * npos * HEADS * RB;
    switch (layout) {
    case CACHE:
        return a + ((p / BS * HEADS + (size_t)h) * BS + p % BS) * RB;
    case SCATTERED:
        return a + (((size_t)perm[p / BS] * HEADS + (size_t)h) * BS + p % BS) * RB;
    case INTERLEAVED:
        return a + (p * HEADS + (size_t)h) * RB;
    default:
        return a + ((size_t)h * npos + p) * RB;
    }
}

/* Best CPU time of one tile over five rounds: `reps` walks over npos
 * positions (a multiple of NT) of layout, each tile's first `heads` heads
 * one after another (as a decode's attention takes them), each head's
 * call asking for the same head of the next tile. */
static double run(const struct ifl_kernels *k, int q8, const char *kv, size_t npos, int layout,
                  int heads, int reps, float *sink)
{
    float q[NQ * D], o[NQ * D], m[NQ], l[NQ];
    char qq[NQ * D / 32 * 34];
    uint8_t lo[NQ], hi[NQ];
    const void *kr[NT], *vr[NT], *kn[NT], *vn[NT];
    for (int i = 0; i < NQ * D; i++)
        q[i] = (float)((i * 7) % 13) / 13.0f - 0.5f;
    k->quant[IFL_TYPE_Q8_0](q, qq, NQ * D);
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
            for (size_t tl = 0; tl < nt; tl++)
                for (int h = 0; h < heads; h++) {
                    const size_t tn = tl + 1 < nt ? tl + 1 : tl;
                    for (int t = 0; t < NT; t++) {
                        kr[t] = row_of(kv, npos, layout, tl * NT + (size_t)t, 0, h);
                        vr[t] = row_of(kv, npos, layout, tl * NT + (size_t)t, 1, h);
                        kn[t] = row_of(kv, npos, layout, tn * NT + (size_t)t, 0, h);
                        vn[t] = row_of(kv, npos, layout, tn * NT + (size_t)t, 1, h);
                    }
                    const struct ifl_attn_tile a = {.q = q,
                                                    .q8 = q8 ? qq : NULL,
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
                                                    .nq = nq,
                                                    .nt = NT,
                                                    .pk = kn,
                                                    .pv = vn,
                                                    .pnt = NT};
                    (q8 ? k->attn_tile_q8_0 : k->attn_tile_f16)(&a);
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
    const int heads = argc > 2 ? atoi(argv[2]) : HEADS;
    const int q8 = argc > 3 && !strcmp(argv[3], "q8_0");
    nq = argc > 4 ? atoi(argv[4]) : NQ;
    if (nq < 1 || nq > NQ) {
        fprintf(stderr, "attnbench: queries a call must be 1 to %d\n", NQ);
        return 2;
    }
    if (argc > 3 && !q8 && strcmp(argv[3], "f16")) {
        fprintf(stderr, "attnbench: the cache is f16 or q8_0\n");
        return 2;
    }
    RB = q8 ? (size_t)D / 32 * 34 : (size_t)D * 2;
    if (heads < 1 || heads > HEADS) {
        fprintf(stderr, "attnbench: heads walked must be 1 to %d\n", HEADS);
        return 2;
    }
    const struct ifl_kernels *k = ifl_kernels_by_name(name);
    if (!k) {
        fprintf(stderr, "attnbench: no kernel table '%s' on this CPU or build\n", name);
        return 2;
    }
    const size_t n = (size_t)DEPTH * HEADS * 2; /* rows: keys and values of every head */
    /* on huge pages where the system gives them, as the KV store asks */
    const size_t huge = (size_t)2 << 20, bytes = (RB * n + huge - 1) / huge * huge;
    char *kv = aligned_alloc(huge, bytes);
    if (!kv)
        return 1;
    madvise(kv, bytes, MADV_HUGEPAGE);
    for (size_t r = 0; r < n; r++) {
        float x[D];
        for (size_t e = 0; e < D; e++)
            x[e] = (float)(((r * D + e) * 2654435761u) % 1000) / 1000.0f - 0.5f;
        if (q8) {
            k->quant[IFL_TYPE_Q8_0](x, kv + r * RB, D);
        } else {
            for (size_t e = 0; e < D; e++) {
                const uint16_t h = ifl_f32_to_f16(x[e]);
                memcpy(kv + r * RB + 2 * e, &h, 2);
            }
        }
    }
    perm = malloc(sizeof(uint32_t) * (DEPTH / BS));
    if (!perm)
        return 1;
    uint64_t x = 88172645463325252ull;
    for (uint32_t i = 0; i < DEPTH / BS; i++)
        perm[i] = i;
    for (uint32_t i = DEPTH / BS - 1; i > 0; i--) { /* Fisher-Yates, xorshift64 */
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        const uint32_t j = (uint32_t)(x % (i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    float sink = 0;
    const double warm = run(k, q8, kv, NT, CACHE, 1, 20000, &sink);
    const double cache = run(k, q8, kv, DEPTH, CACHE, heads, 1, &sink);
    const double scat = run(k, q8, kv, DEPTH, SCATTERED, heads, 1, &sink);
    const double inter = run(k, q8, kv, DEPTH, INTERLEAVED, heads, 1, &sink);
    const double contig = run(k, q8, kv, DEPTH, CONTIGUOUS, heads, 1, &sink);
    printf("%s attn_tile_%s, %d queries x %d positions, d %d, %d of %d heads a tile: warm %.0f ns "
           "a tile; from memory: cache %.0f, scattered %.0f, interleaved %.0f, contiguous %.0f "
           "(%.3g)\n",
           k->name, q8 ? "q8_0" : "f16", nq, NT, D, heads, HEADS, warm * 1e9, cache * 1e9,
           scat * 1e9, inter * 1e9, contig * 1e9, (double)sink);
    free(perm);
    free(kv);
    return 0;
}
