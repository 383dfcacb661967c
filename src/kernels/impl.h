/*
 * Internal to src/kernels: how dispatch.c assembles the tables. Each ISA
 * file fills the entries it implements into a table that starts as a copy
 * of the scalar one, so an entry an ISA lacks falls back to its _ref.
 */
#ifndef IFL_KERNELS_IMPL_H
#define IFL_KERNELS_IMPL_H

#include "kernels/kernels.h"

void ifl_kernels_fill_ref(struct ifl_kernels *k);
void ifl_kernels_fill_avx2(struct ifl_kernels *k);
void ifl_kernels_fill_avx512(struct ifl_kernels *k);
/* The 512-bit gemm kernels (x86_avx512_gemm.c), over a filled avx512 table. */
void ifl_kernels_fill_avx512_gemm(struct ifl_kernels *k);
/* F16 attention kernels (x86_avx512_attn.c), likewise. */
void ifl_kernels_fill_avx512_attn(struct ifl_kernels *k);

#endif
