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
/* The sampler's row passes (x86_avx512_rows.c), likewise. */
void ifl_kernels_fill_avx512_rows(struct ifl_kernels *k);

/* Where a Q6_K x16 block group (kernels.h) keeps ql run 16h + 8hi + m and
 * qh run 8h + m (h: the block's half, m < 8): after d (32 bytes) and the
 * scales (4 runs of 64), each half's triples (ql m, ql 8 + m, qh m) in
 * turn, so one row's kernel reads the group in address order. The
 * repacker (ref.c) and the AVX-512 tiles both place runs by these. */
#define IFL_X16_Q6K_QL(h, hi, m) (32 + 4 * 64 + 64 * (24 * (h) + 3 * (m) + (hi)))
#define IFL_X16_Q6K_QH(h, m) (32 + 4 * 64 + 64 * (24 * (h) + 3 * (m) + 2))

/* ifl_kernels_exp's constants (Cephes' expf), shared by every table. */
#define IFL_EXP_LOG2E 1.44269504088896341f
#define IFL_EXP_ROUND 12582912.0f /* 1.5 * 2^23: adding it rounds to an integer */
#define IFL_EXP_LN2_HI 0.693359375f /* ln 2 split so that n * LN2_HI is exact */
#define IFL_EXP_LN2_LO (-2.12194440e-4f)
#define IFL_EXP_P0 1.9875691500e-4f
#define IFL_EXP_P1 1.3981999507e-3f
#define IFL_EXP_P2 8.3334519073e-3f
#define IFL_EXP_P3 4.1665795894e-2f
#define IFL_EXP_P4 1.6666665459e-1f
#define IFL_EXP_P5 5.0000001201e-1f

#endif
