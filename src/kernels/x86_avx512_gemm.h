/*
 * What the two 512-bit gemm files share (x86_avx512_gemm.c, weights in
 * rows; x86_avx512_x16.c, weights in x16 groups): the column block size,
 * the tile loops and the layout of the Q8_0 / Q8_K activation blocks.
 * Included only by files compiled with AVX-512 enabled.
 */
#ifndef IFL_KERNELS_X86_AVX512_GEMM_H
#define IFL_KERNELS_X86_AVX512_GEMM_H

#include <stddef.h>

#include "kernels/blocks.h"

/* Weight rows are taken in column blocks of about this many bytes, which
 * stay in L2 while every row tile passes over them. */
#define COL_BLOCK_BYTES (384 * 1024)

#define FOR_R for (int r = 0; r < R; r++)
#define FOR_C for (int c = 0; c < C; c++)
#define UNROLL _Pragma("GCC unroll 8")

/* A Q8_0 activation block's bytes. */
#define XBS ((size_t)sizeof(struct ifl_block_q8_0))

/* A Q8_K activation block: d, qs, bsums at these offsets; its bytes. */
#define Q8K_D 0
#define Q8K_QS 4
#define Q8K_BSUMS (4 + IFL_QK_K)
#define X8KBS ((size_t)sizeof(struct ifl_block_q8_k))

#endif
