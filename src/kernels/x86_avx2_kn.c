/*
 * gemm_f32_kn (kernels.h) in 256 bits: 8 output columns a vector, x's
 * values broadcast (an outer product). A tile takes KN_R rows of x
 * against up to KN_C vectors of columns, the last one masked where nc
 * ends. Each lane adds its products by one fused multiply-add for each k
 * in order, as ref's fmaf chain: the same bits.
 */
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/impl.h"

#define AI static inline __attribute__((always_inline))
#define FOR_R for (int r = 0; r < R; r++)
#define FOR_C for (int c = 0; c < C; c++)
#define UNROLL _Pragma("GCC unroll 8")

#define KN_R 4
#define KN_C 3

/* R rows of x against C vectors of b's columns from b; m: the lanes of the
 * last vector taken (all ones in the lanes taken). */
AI void kn_tile(int R, int C, __m256i m, int64_t n, const float *x, size_t ldx, const float *b,
                size_t ldb, float *y, size_t ldy)
{
    __m256 acc[KN_R][KN_C];
    UNROLL FOR_R UNROLL FOR_C acc[r][c] = _mm256_setzero_ps();
    for (int64_t k = 0; k < n; k++) {
        const float *bk = b + (size_t)k * ldb;
        __m256 w[KN_C];
        UNROLL FOR_C w[c] =
            c == C - 1 ? _mm256_maskload_ps(bk + 8 * c, m) : _mm256_loadu_ps(bk + 8 * c);
        UNROLL FOR_R
        {
            __m256 xv = _mm256_broadcast_ss(x + (size_t)r * ldx + (size_t)k);
            UNROLL FOR_C acc[r][c] = _mm256_fmadd_ps(w[c], xv, acc[r][c]);
        }
    }
    UNROLL FOR_R UNROLL FOR_C
    {
        if (c == C - 1)
            _mm256_maskstore_ps(y + (size_t)r * ldy + 8 * c, m, acc[r][c]);
        else
            _mm256_storeu_ps(y + (size_t)r * ldy + 8 * c, acc[r][c]);
    }
}

#define KN_CASE(R, C)                                                                              \
    case (R)*4 + (C):                                                                              \
        kn_tile(R, C, m, n, xp, ldx, b + c0, ldb, yp, ldy);                                        \
        break;

static void y_gemm_f32_kn(int64_t n, int nr, int nc, const float *x, size_t ldx, const float *b,
                          size_t ldb, float *y, size_t ldy)
{
    for (int r0 = 0; r0 < nr; r0 += KN_R) {
        const int R = nr - r0 < KN_R ? nr - r0 : KN_R;
        const float *xp = x + (size_t)r0 * ldx;
        for (int c0 = 0; c0 < nc; c0 += 8 * KN_C) {
            const int left = nc - c0, C = left >= 8 * KN_C ? KN_C : (left + 7) / 8;
            const int tail = left - 8 * (C - 1); /* columns in the last vector */
            const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32(tail < 8 ? tail : 8),
                                                 _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
            float *yp = y + (size_t)r0 * ldy + c0;
            switch (R * 4 + C) {
                /* clang-format off */
                KN_CASE(1, 1) KN_CASE(1, 2) KN_CASE(1, 3) KN_CASE(2, 1) KN_CASE(2, 2)
                KN_CASE(2, 3) KN_CASE(3, 1) KN_CASE(3, 2) KN_CASE(3, 3) KN_CASE(4, 1)
                KN_CASE(4, 2) KN_CASE(4, 3)
            default:
                break;
                /* clang-format on */
            }
        }
    }
}

void ifl_kernels_fill_avx2_kn(struct ifl_kernels *k)
{
    k->gemm_f32_kn = y_gemm_f32_kn;
}
