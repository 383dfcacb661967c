/*
 * gemm_f32_kn (kernels.h) in 512 bits: 16 output columns a vector, so
 * that a row of b is a few vectors and x's values are broadcast (an outer
 * product, no horizontal sums). A tile takes KN_R rows of x against up to
 * KN_C vectors of columns, the last one masked where nc ends. Each lane
 * adds its products by one fused multiply-add for each k in order, as
 * ref's fmaf chain: the same bits. Where nc is 49 to 64 (attention's p V,
 * 64 columns a head) a tile takes KN4_R rows against four vectors instead:
 * an 8 x 3 tile and an 8 x 1 one there load a vector and eight broadcasts
 * for every eight products in the narrow one.
 */
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/impl.h"
#include "kernels/x86_avx512.h"
#include "kernels/x86_avx512_gemm.h"

#define KN_R 8
#define KN_C 3
#define KN4_R 6

/* R rows of x against C vectors of b's columns from b; m: the lanes of the
 * last vector taken. */
AI void kn_tile(int R, int C, __mmask16 m, int64_t n, const float *x, size_t ldx, const float *b,
                size_t ldb, float *y, size_t ldy)
{
    __m512 acc[KN_R][4];
    UNROLL FOR_R UNROLL FOR_C acc[r][c] = _mm512_setzero_ps();
    for (int64_t k = 0; k < n; k++) {
        const float *bk = b + (size_t)k * ldb;
        __m512 w[4];
        UNROLL FOR_C w[c] =
            c == C - 1 ? _mm512_maskz_loadu_ps(m, bk + 16 * c) : _mm512_loadu_ps(bk + 16 * c);
        UNROLL FOR_R
        {
            __m512 xv = _mm512_set1_ps(x[(size_t)r * ldx + (size_t)k]);
            UNROLL FOR_C acc[r][c] = _mm512_fmadd_ps(w[c], xv, acc[r][c]);
        }
    }
    UNROLL FOR_R UNROLL FOR_C
    {
        if (c == C - 1)
            _mm512_mask_storeu_ps(y + (size_t)r * ldy + 16 * c, m, acc[r][c]);
        else
            _mm512_storeu_ps(y + (size_t)r * ldy + 16 * c, acc[r][c]);
    }
}

#define KN_CASE(R, C)                                                                              \
    case (R)*8 + (C):                                                                              \
        kn_tile(R, C, m, n, xp, ldx, b + c0, ldb, yp, ldy);                                        \
        break;

static void z_gemm_f32_kn(int64_t n, int nr, int nc, const float *x, size_t ldx, const float *b,
                          size_t ldb, float *y, size_t ldy)
{
    if (nc > 16 * KN_C && nc <= 64) {
        const int tail = nc - 48;
        const __mmask16 m = tail >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << tail) - 1);
        const int c0 = 0;
        for (int r0 = 0; r0 < nr; r0 += KN4_R) {
            const int R = nr - r0 < KN4_R ? nr - r0 : KN4_R;
            const float *xp = x + (size_t)r0 * ldx;
            float *yp = y + (size_t)r0 * ldy;
            switch (R * 8 + 4) {
                /* clang-format off */
                KN_CASE(1, 4) KN_CASE(2, 4) KN_CASE(3, 4) KN_CASE(4, 4) KN_CASE(5, 4)
                KN_CASE(6, 4)
            default:
                break;
                /* clang-format on */
            }
        }
        return;
    }
    for (int r0 = 0; r0 < nr; r0 += KN_R) {
        const int R = nr - r0 < KN_R ? nr - r0 : KN_R;
        const float *xp = x + (size_t)r0 * ldx;
        for (int c0 = 0; c0 < nc; c0 += 16 * KN_C) {
            const int left = nc - c0, C = left >= 16 * KN_C ? KN_C : (left + 15) / 16;
            const int tail = left - 16 * (C - 1); /* columns in the last vector */
            const __mmask16 m = tail >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << tail) - 1);
            float *yp = y + (size_t)r0 * ldy + c0;
            switch (R * 8 + C) {
                /* clang-format off */
                KN_CASE(1, 1) KN_CASE(1, 2) KN_CASE(1, 3) KN_CASE(2, 1) KN_CASE(2, 2)
                KN_CASE(2, 3) KN_CASE(3, 1) KN_CASE(3, 2) KN_CASE(3, 3) KN_CASE(4, 1)
                KN_CASE(4, 2) KN_CASE(4, 3) KN_CASE(5, 1) KN_CASE(5, 2) KN_CASE(5, 3)
                KN_CASE(6, 1) KN_CASE(6, 2) KN_CASE(6, 3) KN_CASE(7, 1) KN_CASE(7, 2)
                KN_CASE(7, 3) KN_CASE(8, 1) KN_CASE(8, 2) KN_CASE(8, 3)
            default:
                break;
                /* clang-format on */
            }
        }
    }
}

void ifl_kernels_fill_avx512_kn(struct ifl_kernels *k)
{
    k->gemm_f32_kn = z_gemm_f32_kn;
}
