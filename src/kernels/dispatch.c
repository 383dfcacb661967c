/*
 * Picks the kernel table. Each table starts as a copy of the scalar one and
 * an ISA file overwrites the entries it implements. The CPU check asks
 * cpuid for the instruction sets and xgetbv for the OS saving their
 * registers; only then may a table's functions run. Tables are built once
 * (pthread_once) and never change after, so readers need no lock.
 * IFL_KERNELS=scalar|avx2|avx512|avx512bf16 overrides the automatic choice
 * (avx512bf16 is avx512 with vdpbf16ps kernels for BF16 weights).
 */
#include "kernels/impl.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define IFL_X86 1
#else
#define IFL_X86 0
#endif

static struct ifl_kernels tab_ref, tab_avx2, tab_avx512, tab_avx512bf16;
static int have_avx2, have_avx512, have_avx512bf16;
static const struct ifl_kernels *best;
static pthread_once_t once = PTHREAD_ONCE_INIT;

#if IFL_X86
static uint64_t xgetbv0(void)
{
    uint32_t lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    return (uint64_t)hi << 32 | lo;
}

static void detect(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid_count(1, 0, &a, &b, &c, &d))
        return;
    int osxsave = (c >> 27) & 1, fma = (c >> 12) & 1, f16c = (c >> 29) & 1, avx = (c >> 28) & 1;
    if (!osxsave || !avx)
        return;
    uint64_t xcr0 = xgetbv0();
    int os_avx = (xcr0 & 0x6) == 0x6;                /* XMM and YMM state */
    int os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0; /* opmask, ZMM_Hi256, Hi16_ZMM */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return;
    int avx2 = (b >> 5) & 1;
    int f = (b >> 16) & 1, dq = (b >> 17) & 1, bw = (b >> 30) & 1, vl = (b >> 31) & 1;
    int vnni = (c >> 11) & 1;
    have_avx2 = os_avx && avx2 && fma && f16c;
    have_avx512 = have_avx2 && os_avx512 && f && dq && bw && vl && vnni;
    /* leaf 7 sub-leaf 1, EAX bit 5: AVX512_BF16 */
    if (have_avx512 && __get_cpuid_count(7, 1, &a, &b, &c, &d))
        have_avx512bf16 = (a >> 5) & 1;
}
#else
static void detect(void) {}
#endif

/* Also used inside init() (for IFL_KERNELS), where pthread_once must not be
 * re-entered; the tables are filled by then. */
static const struct ifl_kernels *by_name(const char *name)
{
    if (strcmp(name, "scalar") == 0 || strcmp(name, "ref") == 0)
        return &tab_ref;
    if (strcmp(name, "avx2") == 0)
        return have_avx2 ? &tab_avx2 : NULL;
    if (strcmp(name, "avx512") == 0)
        return have_avx512 ? &tab_avx512 : NULL;
    if (strcmp(name, "avx512bf16") == 0)
        return have_avx512bf16 ? &tab_avx512bf16 : NULL;
    return NULL;
}

static void init(void)
{
    ifl_kernels_fill_ref(&tab_ref);
    detect();
    tab_avx2 = tab_ref;
    tab_avx512 = tab_ref;
#if IFL_X86
    if (have_avx2)
        ifl_kernels_fill_avx2(&tab_avx2);
    if (have_avx512) {
        ifl_kernels_fill_avx2(&tab_avx512);
        ifl_kernels_fill_avx512(&tab_avx512);
    }
    if (have_avx512bf16) {
        tab_avx512bf16 = tab_avx512;
        ifl_kernels_fill_avx512bf16(&tab_avx512bf16);
    }
#endif
    best = have_avx512bf16 ? &tab_avx512bf16
           : have_avx512   ? &tab_avx512
           : have_avx2     ? &tab_avx2
                           : &tab_ref;
    const char *env = getenv("IFL_KERNELS");
    if (env && *env) {
        const struct ifl_kernels *k = by_name(env);
        if (k)
            best = k;
        else
            fprintf(stderr, "inflight: IFL_KERNELS=%s is not available on this CPU; using %s\n",
                    env, best->name);
    }
}

const struct ifl_kernels *ifl_kernels_ref(void)
{
    pthread_once(&once, init);
    return &tab_ref;
}

const struct ifl_kernels *ifl_kernels_best(void)
{
    pthread_once(&once, init);
    return best;
}

const struct ifl_kernels *ifl_kernels_by_name(const char *name)
{
    pthread_once(&once, init);
    return name ? by_name(name) : NULL;
}
