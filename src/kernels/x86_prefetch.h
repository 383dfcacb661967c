/*
 * Software prefetch of the weight stream, shared by the 256-bit
 * (x86_simd.h) and 512-bit (x86_avx512_gemm.c) gemm tiles.
 *
 * A decode step reads every weight once, straight from memory, in as many
 * streams as a tile has weight rows. The hardware prefetchers alone keep
 * too few lines in flight for that: one core drew about half of its share
 * of the measured bandwidth. So a tile asks, per weight row, for the lines
 * PF_AHEAD bytes beyond the block it is about to read. Measured on
 * tinyllama Q8_0 decode with 2 threads: 256 B ahead +30 %, 384 B best,
 * 2 KiB worse than none. A prefetch changes no arithmetic.
 */
#ifndef IFL_KERNELS_X86_PREFETCH_H
#define IFL_KERNELS_X86_PREFETCH_H

#include <xmmintrin.h>

#define PF_AHEAD 384

/* Asks for `lines` cache lines from p + PF_AHEAD on. */
static inline __attribute__((always_inline)) void pf_lines(const char *p, int lines)
{
    for (int l = 0; l < lines; l++)
        _mm_prefetch(p + PF_AHEAD + 64 * l, _MM_HINT_T0);
}

#endif
