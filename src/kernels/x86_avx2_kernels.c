/*
 * The AVX2 + FMA + F16C table: x86_simd.h compiled with maddubs/madd int8
 * dot products. Reached only through ifl_kernels_by_name("avx2") or best,
 * after dispatch.c has checked the CPU and OS support these instructions.
 */
#define X86_VNNI 0
#include "kernels/x86_simd.h"

void ifl_kernels_fill_avx2(struct ifl_kernels *k)
{
    k->name = "avx2";
    x86_fill(k);
    ifl_kernels_fill_avx2_gemm(k);
    ifl_kernels_fill_avx2_x16q(k);
    ifl_kernels_fill_avx2_x16k(k);
    ifl_kernels_fill_avx2_lora(k);
    ifl_kernels_fill_avx2_attn_tile(k);
    ifl_kernels_fill_avx2_kn(k);
}
