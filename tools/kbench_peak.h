/*
 * kbench's `peak` mode: the int8, BF16 and float multiply-add peaks of
 * this CPU, the figures a batched decode's (int8), a BF16 prompt's and a
 * decode's attention (float) GFLOP/s are judged against. Part of tools/kbench.c, included by it.
 *
 * Each loop issues one instruction mix over K independent accumulators
 * and nothing else (inline assembly, so the compiler can neither merge
 * the chains, hoist their loop-invariant products, nor add moves). K is
 * swept: too few chains measure the instruction's latency (a chain waits
 * for its last result), enough of them its throughput, and the sweep
 * shows where it levels off. One multiply-add counts 2 operations, as a
 * gemm's 2 n nr nc counts them, so the peaks compare with kbench's and
 * the engine's GFLOP/s directly.
 *
 * The mixes:
 * - zmm vpdpbusd (AVX-512 VNNI): 64 u8 x s8 multiply-adds into 16 int32
 *   lanes, what the avx512 table's int8 kernels issue;
 * - ymm vpdpbusd, VEX-encoded (AVX-VNNI), where cpuid has it: 32; the
 *   avx2 table does not use it today;
 * - ymm vpmaddubsw + vpmaddwd (by ones) + vpaddd (AVX2): 32 multiply-adds
 *   in three instructions, the avx2 table's int8 dot product;
 * - zmm vdpbf16ps (AVX-512 BF16), where cpuid has it: 32 bf16 pair
 *   products into 16 float lanes, what the avx512bf16 table's BF16
 *   kernels issue (its operands are normal numbers: 1 and 2^-7);
 * - zmm and ymm vfmadd231ps (AVX-512F, FMA): 16 or 8 float multiply-adds
 *   (ymm up to 12 chains: AVX2 has 16 registers, and more would spill),
 *   what every float kernel (attention over an F16 cache, F32 weights)
 *   issues; the float peak a decode's attention at depth is judged
 *   against (operands 1 and 2^-7 again).
 * A dependent chain of scalar adds (one cycle's latency on every x86
 * core) gives the core clock, so each peak is also said in instructions a
 * cycle.
 *
 * Times: one thread is timed by its CPU time (time spent descheduled does
 * not count, as kbench's gemm figures); two threads run the same loop at
 * once and are timed by the wall clock from a common start to the last
 * one's end, so a neighbour's load on this VM lowers that figure: it is
 * the best of several trials. Beside it, the two threads' rates by their
 * own CPU times, added: about twice one thread's when the two CPUs are
 * cores of their own, about one thread's when they are two hardware
 * threads of one core (a VM's CPUs can be either).
 */
#include <cpuid.h>
#include <pthread.h>

#define PK_Z __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni"), noinline))
#define PK_Y __attribute__((target("avx2"), noinline))
#define PK_YV __attribute__((target("avx2,avxvnni"), noinline))
#define PK_ZB __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16"), noinline))
#define PK_ZF __attribute__((target("avx512f"), noinline))
#define PK_YF __attribute__((target("avx2,fma"), noinline))

/* PK_REPn(S): S(0) ... S(n - 1); PK_LSTn(C, g, R): C(0, g, R), ...,
 * C(n - 1, g, R). An asm statement takes at most 30 operands (an in-out
 * one counts twice), so a loop's chains go in groups of at most 8, one
 * asm statement each, issued back to back. */
#define PK_REP1(S) S(0)
#define PK_REP2(S) PK_REP1(S) S(1)
#define PK_REP4(S) PK_REP2(S) S(2) S(3)
#define PK_REP8(S) PK_REP4(S) S(4) S(5) S(6) S(7)
#define PK_LST1(C, g, R) C(0, g, R)
#define PK_LST2(C, g, R) PK_LST1(C, g, R), C(1, g, R)
#define PK_LST4(C, g, R) PK_LST2(C, g, R), C(2, g, R), C(3, g, R)
#define PK_LST8(C, g, R) PK_LST4(C, g, R), C(4, g, R), C(5, g, R), C(6, g, R), C(7, g, R)

/* accumulator i of the group from g on: a variable of its own, not an
 * array element (an array stays in memory, stored every iteration) */
#define PK_VAR(g, i) c_##g##_##i
#define PK_ACC(i, g, R) [c##i] "+" R(PK_VAR(g, i))
#define PK_DECL(i, g, ZERO) PK_VAR(g, i) = ZERO()
#define PK_SUMV(i, g, ADD) s = ADD(s, PK_VAR(g, i))
#define PK_DPZ(i) "vpdpbusd %[b], %[a], %[c" #i "]\n\t"
#define PK_DPY(i) "%{vex%} vpdpbusd %[b], %[a], %[c" #i "]\n\t"
#define PK_DPB(i) "vdpbf16ps %[b], %[a], %[c" #i "]\n\t"
#define PK_FMA(i) "vfmadd231ps %[b], %[a], %[c" #i "]\n\t"
#define PK_MIX(i)                                                                                  \
    "vpmaddubsw %[b], %[a], %[t]\n\t"                                                              \
    "vpmaddwd %[one], %[t], %[t]\n\t"                                                              \
    "vpaddd %[t], %[c" #i "], %[c" #i "]\n\t"

/* n chains from accumulator g on: one vpdpbusd each (S: PK_DPZ, PK_DPY) */
#define PK_DP(S, n, g, R)                                                                          \
    __asm__ volatile(PK_REP##n(S) : PK_LST##n(PK_ACC, g, R) : [a] R(a), [b] R(b))
/* n chains of the AVX2 mix; t is renamed, so the chains stay independent */
#define PK_MX(n, g)                                                                                \
    __asm__ volatile(PK_REP##n(PK_MIX)                                                             \
                     : [t] "=&x"(t), PK_LST##n(PK_ACC, g, "x")                                     \
                     : [a] "x"(a), [b] "x"(b), [one] "x"(one))

/* The operands: int8 bytes 3 and -2 (and words of 1 for the AVX2 mix),
 * or bf16 pairs of 1 and 2^-7, so the float sums stay normal numbers. */
#define PK_OPS_I8(V, SET1) V t, a = SET1##_epi8(3), b = SET1##_epi8(-2), one = SET1##_epi16(1)
#define PK_OPS_BF(V, SET1)                                                                         \
    V t, a = SET1##_epi16(0x3f80), b = SET1##_epi16(0x3c00), one = SET1##_epi16(1)

#define PK_OPS_F32(V, SET1)                                                                        \
    V t, a = SET1##_epi32(0x3f800000), b = SET1##_epi32(0x3c000000), one = SET1##_epi16(1)

/* One loop of K chains (BODY: the asm statements; 24 accumulators are
 * declared, the first K used; OPS: PK_OPS_I8 or PK_OPS_BF), iters times;
 * returns a sum of the accumulators so the caller has something to print
 * (the asm is volatile anyway). */
#define PK_DEF_OPS(NAME, ATTR, V, SET1, ZERO, ADD, OPS, K, BODY)                                   \
    static ATTR long NAME(long iters)                                                              \
    {                                                                                              \
        V PK_LST8(PK_DECL, 0, ZERO), PK_LST8(PK_DECL, 8, ZERO), PK_LST8(PK_DECL, 16, ZERO);        \
        OPS(V, SET1);                                                                              \
        (void)t;                                                                                   \
        (void)one;                                                                                 \
        for (long it = 0; it < iters; it++) {                                                      \
            BODY;                                                                                  \
        }                                                                                          \
        V s = ZERO();                                                                              \
        PK_LST8(PK_SUMV, 0, ADD), PK_LST8(PK_SUMV, 8, ADD), PK_LST8(PK_SUMV, 16, ADD);             \
        long r = 0;                                                                                \
        memcpy(&r, &s, sizeof(r));                                                                 \
        return r;                                                                                  \
    }
#define PK_DEF(NAME, ATTR, V, SET1, ZERO, ADD, K, BODY)                                            \
    PK_DEF_OPS(NAME, ATTR, V, SET1, ZERO, ADD, PK_OPS_I8, K, BODY)
#define PK_DEF_ZB(K, BODY)                                                                         \
    PK_DEF_OPS(pk_zb##K, PK_ZB, __m512i, _mm512_set1, _mm512_setzero_si512, _mm512_add_epi32,      \
               PK_OPS_BF, K, BODY)
#define PK_DEF_ZF(K, BODY)                                                                         \
    PK_DEF_OPS(pk_zf##K, PK_ZF, __m512i, _mm512_set1, _mm512_setzero_si512, _mm512_add_epi32,      \
               PK_OPS_F32, K, BODY)
#define PK_DEF_YF(K, BODY)                                                                         \
    PK_DEF_OPS(pk_yf##K, PK_YF, __m256i, _mm256_set1, _mm256_setzero_si256, _mm256_add_epi32,      \
               PK_OPS_F32, K, BODY)
#define PK_DEF_Z(K, BODY)                                                                          \
    PK_DEF(pk_z##K, PK_Z, __m512i, _mm512_set1, _mm512_setzero_si512, _mm512_add_epi32, K, BODY)
#define PK_DEF_YV(K, BODY)                                                                         \
    PK_DEF(pk_yv##K, PK_YV, __m256i, _mm256_set1, _mm256_setzero_si256, _mm256_add_epi32, K, BODY)
#define PK_DEF_Y(K, BODY)                                                                          \
    PK_DEF(pk_y##K, PK_Y, __m256i, _mm256_set1, _mm256_setzero_si256, _mm256_add_epi32, K, BODY)

/* clang-format off */
PK_DEF_Z(1, PK_DP(PK_DPZ, 1, 0, "v"))
PK_DEF_Z(2, PK_DP(PK_DPZ, 2, 0, "v"))
PK_DEF_Z(4, PK_DP(PK_DPZ, 4, 0, "v"))
PK_DEF_Z(8, PK_DP(PK_DPZ, 8, 0, "v"))
PK_DEF_Z(12, PK_DP(PK_DPZ, 8, 0, "v"); PK_DP(PK_DPZ, 4, 8, "v"))
PK_DEF_Z(16, PK_DP(PK_DPZ, 8, 0, "v"); PK_DP(PK_DPZ, 8, 8, "v"))
PK_DEF_Z(24, PK_DP(PK_DPZ, 8, 0, "v"); PK_DP(PK_DPZ, 8, 8, "v"); PK_DP(PK_DPZ, 8, 16, "v"))
PK_DEF_YV(1, PK_DP(PK_DPY, 1, 0, "x"))
PK_DEF_YV(2, PK_DP(PK_DPY, 2, 0, "x"))
PK_DEF_YV(4, PK_DP(PK_DPY, 4, 0, "x"))
PK_DEF_YV(8, PK_DP(PK_DPY, 8, 0, "x"))
PK_DEF_YV(12, PK_DP(PK_DPY, 8, 0, "x"); PK_DP(PK_DPY, 4, 8, "x"))
PK_DEF_Y(1, PK_MX(1, 0))
PK_DEF_Y(2, PK_MX(2, 0))
PK_DEF_Y(4, PK_MX(4, 0))
PK_DEF_Y(8, PK_MX(8, 0))
PK_DEF_Y(12, PK_MX(8, 0); PK_MX(4, 8))
PK_DEF_ZB(1, PK_DP(PK_DPB, 1, 0, "v"))
PK_DEF_ZB(2, PK_DP(PK_DPB, 2, 0, "v"))
PK_DEF_ZB(4, PK_DP(PK_DPB, 4, 0, "v"))
PK_DEF_ZB(8, PK_DP(PK_DPB, 8, 0, "v"))
PK_DEF_ZB(12, PK_DP(PK_DPB, 8, 0, "v"); PK_DP(PK_DPB, 4, 8, "v"))
PK_DEF_ZB(16, PK_DP(PK_DPB, 8, 0, "v"); PK_DP(PK_DPB, 8, 8, "v"))
PK_DEF_ZB(24, PK_DP(PK_DPB, 8, 0, "v"); PK_DP(PK_DPB, 8, 8, "v"); PK_DP(PK_DPB, 8, 16, "v"))
PK_DEF_ZF(1, PK_DP(PK_FMA, 1, 0, "v"))
PK_DEF_ZF(4, PK_DP(PK_FMA, 4, 0, "v"))
PK_DEF_ZF(8, PK_DP(PK_FMA, 8, 0, "v"))
PK_DEF_ZF(12, PK_DP(PK_FMA, 8, 0, "v"); PK_DP(PK_FMA, 4, 8, "v"))
PK_DEF_ZF(16, PK_DP(PK_FMA, 8, 0, "v"); PK_DP(PK_FMA, 8, 8, "v"))
PK_DEF_YF(1, PK_DP(PK_FMA, 1, 0, "x"))
PK_DEF_YF(4, PK_DP(PK_FMA, 4, 0, "x"))
PK_DEF_YF(8, PK_DP(PK_FMA, 8, 0, "x"))
PK_DEF_YF(12, PK_DP(PK_FMA, 8, 0, "x"); PK_DP(PK_FMA, 4, 8, "x"))
/* clang-format on */

/* The clock: a chain of dependent scalar adds, one a cycle on every x86
 * core (a vector add's latency is 2 cycles on some, Zen 5 among them). */
static long pk_clock(long iters)
{
    long c = 0;
    for (long it = 0; it < iters; it++)
        __asm__ volatile("add $1, %[c]\n\tadd $1, %[c]\n\tadd $1, %[c]\n\tadd $1, %[c]\n\t"
                         : [c] "+r"(c));
    return c;
}

typedef long (*pk_loop_fn)(long iters);

struct pk_mix {
    const char *name;
    int cls;       /* the peak it counts towards (peak_main's cls_name) */
    int k;         /* accumulators */
    int instr;     /* instructions an accumulator takes an iteration */
    double ops;    /* operations an accumulator adds an iteration (2 a multiply-add) */
    pk_loop_fn fn; /* NULL: the CPU lacks it */
};

struct pk_job {
    pk_loop_fn fn;
    long iters;
    pthread_barrier_t *bar;
    double cpu; /* this thread's CPU seconds */
};

static double wall(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static volatile long pk_sink;

static void *pk_thread(void *arg)
{
    struct pk_job *j = arg;
    if (j->bar)
        pthread_barrier_wait(j->bar);
    double t0 = now();
    pk_sink += j->fn(j->iters);
    j->cpu = now() - t0;
    return NULL;
}

/* Iterations of fn that take about 50 ms of CPU time. */
static long pk_calibrate(pk_loop_fn fn)
{
    long iters = 1000;
    for (;;) {
        double t0 = now();
        pk_sink += fn(iters);
        double el = now() - t0;
        if (el > 0.02)
            return (long)((double)iters * 0.05 / el) + 1;
        iters *= 4;
    }
}

/* Operations a second: nthreads threads running fn at once (1: timed by
 * CPU time, 2: by the wall clock); the best of `trials`. *by_cpu (may be
 * NULL): the best of the threads' rates by their CPU times, added. */
static double pk_rate(pk_loop_fn fn, double ops_per_iter, int nthreads, int trials, double *by_cpu)
{
    long iters = pk_calibrate(fn);
    double best = 0, best_cpu = 0;
    for (int tr = 0; tr < trials; tr++) {
        struct pk_job job[2];
        double el, rc = 0;
        if (nthreads == 1) {
            job[0] = (struct pk_job){fn, iters, NULL, 0};
            pk_thread(&job[0]);
            el = job[0].cpu;
        } else {
            pthread_barrier_t bar;
            pthread_t th[2];
            pthread_barrier_init(&bar, NULL, 3);
            for (int i = 0; i < 2; i++) {
                job[i] = (struct pk_job){fn, iters, &bar, 0};
                pthread_create(&th[i], NULL, pk_thread, &job[i]);
            }
            pthread_barrier_wait(&bar);
            double t0 = wall();
            for (int i = 0; i < 2; i++)
                pthread_join(th[i], NULL);
            el = wall() - t0;
            pthread_barrier_destroy(&bar);
        }
        for (int i = 0; i < nthreads; i++)
            rc += ops_per_iter * (double)iters / job[i].cpu;
        double r = ops_per_iter * (double)iters * nthreads / el;
        if (r > best)
            best = r;
        if (rc > best_cpu)
            best_cpu = rc;
    }
    if (by_cpu)
        *by_cpu = best_cpu;
    return best;
}

static int pk_have_avxvnni(void)
{
    unsigned a, b, c, d;
    /* leaf 7 sub-leaf 1, EAX bit 4: AVX-VNNI (the OS side is AVX2's) */
    return __get_cpuid_count(7, 1, &a, &b, &c, &d) && ((a >> 4) & 1);
}

static int peak_main(void)
{
    /* dispatch.c's checks (cpuid and xgetbv): avx512 implies VNNI,
     * avx512bf16 is avx512 with AVX-512 BF16 */
    int z = ifl_kernels_by_name("avx512") != NULL;
    int zb = ifl_kernels_by_name("avx512bf16") != NULL;
    int y = ifl_kernels_by_name("avx2") != NULL;
    int yv = y && pk_have_avxvnni();
    if (!y) {
        printf("peak: this CPU has no AVX2; nothing to measure\n");
        return 0;
    }
    const struct pk_mix mixes[] = {
        {"zmm vpdpbusd", 0, 1, 1, 128, z ? pk_z1 : NULL},
        {"zmm vpdpbusd", 0, 2, 1, 128, z ? pk_z2 : NULL},
        {"zmm vpdpbusd", 0, 4, 1, 128, z ? pk_z4 : NULL},
        {"zmm vpdpbusd", 0, 8, 1, 128, z ? pk_z8 : NULL},
        {"zmm vpdpbusd", 0, 12, 1, 128, z ? pk_z12 : NULL},
        {"zmm vpdpbusd", 0, 16, 1, 128, z ? pk_z16 : NULL},
        {"zmm vpdpbusd", 0, 24, 1, 128, z ? pk_z24 : NULL},
        {"ymm vpdpbusd (avx-vnni)", 1, 1, 1, 64, yv ? pk_yv1 : NULL},
        {"ymm vpdpbusd (avx-vnni)", 1, 2, 1, 64, yv ? pk_yv2 : NULL},
        {"ymm vpdpbusd (avx-vnni)", 1, 4, 1, 64, yv ? pk_yv4 : NULL},
        {"ymm vpdpbusd (avx-vnni)", 1, 8, 1, 64, yv ? pk_yv8 : NULL},
        {"ymm vpdpbusd (avx-vnni)", 1, 12, 1, 64, yv ? pk_yv12 : NULL},
        {"ymm maddubs+madd+add", 2, 1, 3, 64, pk_y1},
        {"ymm maddubs+madd+add", 2, 2, 3, 64, pk_y2},
        {"ymm maddubs+madd+add", 2, 4, 3, 64, pk_y4},
        {"ymm maddubs+madd+add", 2, 8, 3, 64, pk_y8},
        {"ymm maddubs+madd+add", 2, 12, 3, 64, pk_y12},
        {"zmm vdpbf16ps", 3, 1, 1, 64, zb ? pk_zb1 : NULL},
        {"zmm vdpbf16ps", 3, 2, 1, 64, zb ? pk_zb2 : NULL},
        {"zmm vdpbf16ps", 3, 4, 1, 64, zb ? pk_zb4 : NULL},
        {"zmm vdpbf16ps", 3, 8, 1, 64, zb ? pk_zb8 : NULL},
        {"zmm vdpbf16ps", 3, 12, 1, 64, zb ? pk_zb12 : NULL},
        {"zmm vdpbf16ps", 3, 16, 1, 64, zb ? pk_zb16 : NULL},
        {"zmm vdpbf16ps", 3, 24, 1, 64, zb ? pk_zb24 : NULL},
        {"zmm vfmadd231ps", 4, 1, 1, 32, z ? pk_zf1 : NULL},
        {"zmm vfmadd231ps", 4, 4, 1, 32, z ? pk_zf4 : NULL},
        {"zmm vfmadd231ps", 4, 8, 1, 32, z ? pk_zf8 : NULL},
        {"zmm vfmadd231ps", 4, 12, 1, 32, z ? pk_zf12 : NULL},
        {"zmm vfmadd231ps", 4, 16, 1, 32, z ? pk_zf16 : NULL},
        {"ymm vfmadd231ps", 5, 1, 1, 16, pk_yf1},
        {"ymm vfmadd231ps", 5, 4, 1, 16, pk_yf4},
        {"ymm vfmadd231ps", 5, 8, 1, 16, pk_yf8},
        {"ymm vfmadd231ps", 5, 12, 1, 16, pk_yf12},
    };
    const int nm = (int)(sizeof(mixes) / sizeof(mixes[0]));
    double ghz = pk_rate(pk_clock, 4, 1, 5, NULL) * 1e-9;
    printf("multiply-add peaks, GOP/s (2 per multiply-add); 1 thread by CPU time,\n"
           "2 threads by the wall clock; best of 5 trials\n");
    printf("clock (a dependent chain of scalar adds): %.2f GHz on 1 thread\n", ghz);
    printf("%-24s %3s %10s %9s %10s %10s\n", "mix", "K", "1 thread", "instr/cyc", "2 threads",
           "2 by CPU");
    double best1[6] = {0}, best2[6] = {0};
    for (int m = 0; m < nm; m++) {
        const struct pk_mix *x = &mixes[m];
        if (!x->fn) {
            if (x->k == 1)
                printf("%-24s   - (not on this CPU)\n", x->name);
            continue;
        }
        double per_iter = x->ops * x->k;
        double r2c, r1 = pk_rate(x->fn, per_iter, 1, 5, NULL);
        double r2 = pk_rate(x->fn, per_iter, 2, 5, &r2c);
        double ipc = r1 / (x->ops / x->instr) * 1e-9 / ghz;
        printf("%-24s %3d %10.1f %9.2f %10.1f %10.1f\n", x->name, x->k, r1 * 1e-9, ipc, r2 * 1e-9,
               r2c * 1e-9);
        fflush(stdout);
        if (r1 > best1[x->cls])
            best1[x->cls] = r1;
        if (r2 > best2[x->cls])
            best2[x->cls] = r2;
    }
    static const char *cls_name[] = {"avx512 (zmm vpdpbusd)",        "avx-vnni (ymm vpdpbusd)",
                                     "avx2 (maddubs+madd)",          "avx512bf16 (zmm vdpbf16ps)",
                                     "avx512 f32 (zmm vfmadd231ps)", "avx2 f32 (ymm vfmadd231ps)"};
    printf("peaks (best K): GOP/s 1 thread, 2 threads\n");
    for (int c = 0; c < 6; c++)
        if (best1[c] > 0)
            printf("peak %-30s %8.1f %8.1f\n", cls_name[c], best1[c] * 1e-9, best2[c] * 1e-9);
    return 0;
}
