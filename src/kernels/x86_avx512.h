/*
 * What the 512-bit kernel files share (x86_avx512_gemm.c, _x16.c and
 * _attn.c): the inline marker and the one horizontal-sum order every
 * 512-bit dot product ends with. Included only by files compiled with
 * AVX-512 enabled.
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

/* hsum512 of a, b, c and d at once, in lanes 0..3: each sum takes the
 * steps of hsum512 in its order, so each equals hsum512 bit for bit. */
AI __m128 hsum512x4(__m512 a, __m512 b, __m512 c, __m512 d)
{
    /* low 256 + high 256: quarters a0+a2, a1+a3, b0+b2, b1+b3 */
    __m512 ab = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, 0x44), _mm512_shuffle_f32x4(a, b, 0xee));
    __m512 cd = _mm512_add_ps(_mm512_shuffle_f32x4(c, d, 0x44), _mm512_shuffle_f32x4(c, d, 0xee));
    /* then the two 128-bit halves: quarter k holds input k's four sums */
    __m512 s =
        _mm512_add_ps(_mm512_shuffle_f32x4(ab, cd, 0x88), _mm512_shuffle_f32x4(ab, cd, 0xdd));
    s = _mm512_add_ps(s, _mm512_permute_ps(s, 0xee)); /* pairs */
    s = _mm512_add_ps(s, _mm512_movehdup_ps(s));      /* last two, in lane 0 of each quarter */
    return _mm512_castps512_ps128(_mm512_maskz_compress_ps(0x1111, s));
}

#endif
