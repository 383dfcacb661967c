/*
 * What the 512-bit kernel files share (x86_avx512_gemm.c, _attn.c): the
 * inline marker and the one horizontal-sum order every 512-bit dot product
 * ends with. Included only by files compiled with AVX-512 enabled.
 */
#ifndef IFL_KERNELS_X86_AVX512_H
#define IFL_KERNELS_X86_AVX512_H

#include <immintrin.h>

#define AI static inline __attribute__((always_inline))

/* One fixed order: (low 256 + high 256), then 128-bit halves, pairs, last two. */
AI float hsum512(__m512 v)
{
    __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

#endif
