/*
 * The AVX-512 table (F, BW, VL, DQ, VNNI): x86_simd.h compiled with VNNI
 * int8 dot products (vpdpbusd, vpdpwssd). The integer lane sums equal the
 * AVX2 ones, so both tables give the same bits. Reached only through
 * ifl_kernels_by_name("avx512") or best, after dispatch.c has checked the
 * CPU and OS; no function here may be called on an AVX2-only machine.
 */
#define X86_VNNI 1
#include "kernels/x86_simd.h"

void ifl_kernels_fill_avx512(struct ifl_kernels *k)
{
    k->name = "avx512";
    x86_fill(k);
    ifl_kernels_fill_avx512_gemm(k);
    ifl_kernels_fill_avx512_x16(k);
    ifl_kernels_fill_avx512_attn(k);
    ifl_kernels_fill_avx512_attn_tile(k);
    ifl_kernels_fill_avx512_rows(k);
    ifl_kernels_fill_avx512_lora(k);
    ifl_kernels_fill_avx512_kn(k);
}
