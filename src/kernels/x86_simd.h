/*
 * The x86 kernels, written once for 256-bit vectors and compiled twice:
 * by x86_avx2.c (AVX2 + FMA + F16C) and by x86_avx512.c (adds AVX-512 VL +
 * VNNI, where the int8 dot products become vpdpbusd / vpdpwssd). Include
 * only from those two files: it is full of intrinsics and needs their ISA
 * flags. X86_VNNI must be defined to 0 or 1 before inclusion.
 *
 * Every kernel here equals a function of ref.c, named in its comment:
 * bit for bit for conversions and activation quantisation; for gemm the
 * integer sums are exact and only the float sum over blocks is reordered
 * (kept in 8 lanes, folded by one fixed horizontal sum).
 *
 * Batch invariance: a gemm walks the output in tiles of R activation rows
 * by C weight rows, but each output has its own accumulators and receives
 * exactly the same instructions, in the same order, whatever R and C are
 * (tile edges included). Tiles only share loads of blocks.
 */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "core/fp16.h"
#include "kernels/blocks.h"
#include "kernels/impl.h"
#include "kernels/x86_heads.h"
#include "kernels/x86_prefetch.h"

#define AI static inline __attribute__((always_inline))

/* ---- small helpers -------------------------------------------------- */

AI float ld_f16(const void *p)
{
    uint16_t h;
    memcpy(&h, p, 2);
    return _cvtsh_ss(h);
}

AI float ld_f32(const void *p)
{
    float f;
    memcpy(&f, p, 4);
    return f;
}

/* One fixed order: (lo128 + hi128), then pairs, then the last two. */
AI float hsum_ps(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Lane k: hsum_ps(v[k]), the very same additions in the same order
 * ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)), for eight vectors at
 * once: 7 additions and 12 shuffles where eight hsum_ps take 24 and 24. */
AI __m256 hsum8_ps(__m256 v0, __m256 v1, __m256 v2, __m256 v3, __m256 v4, __m256 v5, __m256 v6,
                   __m256 v7)
{
    /* u[j]: lanes i + (i + 4) of vj low, of v(j + 4) high */
    const __m256 u[4] = {
        _mm256_add_ps(_mm256_permute2f128_ps(v0, v4, 0x20), _mm256_permute2f128_ps(v0, v4, 0x31)),
        _mm256_add_ps(_mm256_permute2f128_ps(v1, v5, 0x20), _mm256_permute2f128_ps(v1, v5, 0x31)),
        _mm256_add_ps(_mm256_permute2f128_ps(v2, v6, 0x20), _mm256_permute2f128_ps(v2, v6, 0x31)),
        _mm256_add_ps(_mm256_permute2f128_ps(v3, v7, 0x20), _mm256_permute2f128_ps(v3, v7, 0x31))};
    /* (0 + 2, 1 + 3) of two vectors' halves side by side */
    __m256 a = _mm256_add_ps(_mm256_shuffle_ps(u[0], u[1], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm256_shuffle_ps(u[0], u[1], _MM_SHUFFLE(3, 2, 3, 2)));
    __m256 b = _mm256_add_ps(_mm256_shuffle_ps(u[2], u[3], _MM_SHUFFLE(1, 0, 1, 0)),
                             _mm256_shuffle_ps(u[2], u[3], _MM_SHUFFLE(3, 2, 3, 2)));
    return _mm256_add_ps(_mm256_shuffle_ps(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                         _mm256_shuffle_ps(a, b, _MM_SHUFFLE(3, 1, 3, 1)));
}

AI int32_t hsum_epi32(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* u8 x s8 -> 8 int32 lanes, lane i = sum of products of bytes 4i..4i+3.
 * The AVX2 form saturates 16-bit pair sums, so callers keep u * s pairs
 * within int16: here u <= 128 and |s| <= 127 always hold. */
AI __m256i idot(__m256i u, __m256i s)
{
#if X86_VNNI
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s);
#else
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
#endif
}

/* acc + per-lane sums of (u * s) pairs times the int16 scales sc16. */
AI __m256i sdot_acc(__m256i acc, __m256i u, __m256i s, __m256i sc16)
{
#if X86_VNNI
    return _mm256_dpwssd_epi32(acc, _mm256_maddubs_epi16(u, s), sc16);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), sc16));
#endif
}

/* Two 16-bit scales: a in lanes 0..7 (bytes 0..15), b in lanes 8..15. */
AI __m256i sc_pair(int a, int b)
{
    return _mm256_set_m128i(_mm_set1_epi16((short)b), _mm_set1_epi16((short)a));
}

/* The kernels, by what they hold; this order is the order they had in one
 * file, and later parts use helpers and macros of earlier ones. */

#include "kernels/x86_simd_gemm.h"

#include "kernels/x86_simd_quant.h"

#include "kernels/x86_simd_attn.h"

#include "kernels/x86_simd_rows.h"

/* Entries common to both x86 tables. */
static void x86_fill(struct ifl_kernels *k)
{
    k->gemm[IFL_TYPE_F32] = x86_gemm_f32;
    k->gemm[IFL_TYPE_F16] = x86_gemm_f16;
    k->gemm[IFL_TYPE_BF16] = x86_gemm_bf16;
    k->gemm[IFL_TYPE_Q8_0] = x86_gemm_q8_0;
    k->gemm[IFL_TYPE_Q4_0] = x86_gemm_q4_0;
    k->gemm[IFL_TYPE_Q5_0] = x86_gemm_q5_0;
    k->gemm[IFL_TYPE_Q5_1] = x86_gemm_q5_1;
    k->gemm[IFL_TYPE_IQ4_NL] = x86_gemm_iq4_nl;
    k->gemm[IFL_TYPE_MXFP4] = x86_gemm_mxfp4;
    k->gemm[IFL_TYPE_Q4_K] = x86_gemm_q4_k;
    k->gemm[IFL_TYPE_Q5_K] = x86_gemm_q5_k;
    k->gemm[IFL_TYPE_Q6_K] = x86_gemm_q6_k;
    k->gemm[IFL_TYPE_IQ4_XS] = x86_gemm_iq4_xs;
    k->gemm[IFL_TYPE_Q2_K] = x86_gemm_q2_k;
    k->gemm[IFL_TYPE_Q3_K] = x86_gemm_q3_k;
    k->quant[IFL_TYPE_Q8_0] = x86_quant_q8_0;
    k->quant[IFL_TYPE_Q8_K] = x86_quant_q8_k;
    k->dequant[IFL_TYPE_F16] = x86_dequant_f16;
    k->dot_f16 = x86_dot_f16;
    k->axpy_f16 = x86_axpy_f16;
    k->attn_qk_f16 = x86_attn_qk_f16;
    k->attn_pv_f16 = x86_attn_pv_f16;
    k->attn_qk_q8_0 = x86_attn_qk_q8_0;
    k->attn_pv_q8_0 = x86_attn_pv_q8_0;
    k->cvt_f32_f16 = x86_cvt_f32_f16;
    k->swiglu = x86_swiglu;
    k->geglu = x86_geglu;
    k->softmax_exp = x86_softmax_exp;
    k->max_f32 = x86_max_f32;
    k->find_f32 = x86_find_f32;
    k->exp_pass = x86_exp_pass;
}
