/*
 * BF16 weights with AVX-512 BF16 (vdpbf16ps): the entries that make the
 * "avx512bf16" table out of a filled avx512 one. dispatch.c reaches them
 * only after cpuid showed avx512_bf16.
 *
 * vdpbf16ps multiplies 16 pairs of bf16 values and adds each pair's two
 * products to one float lane, 32 multiply-adds an instruction where an
 * F32 FMA does 16, and it reads the weights as they are stored. Its other
 * operand must be bf16 too, so the activations (F32 rows, as for every
 * float weight type) are rounded to bf16, nearest even, as they are
 * loaded: 2^-8 relative error per value at most (8 significant bits), which moves an
 * output away from ref (kernels.h act_bf16 states the bound; the tests
 * hold every output to it and, tighter, to a float64 dot of the weights
 * with the rounded activations).
 *
 * Each output's lane sums and their order depend only on n and the two
 * rows, never on the tile or the call's nr and nc: batch invariant.
 */
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/impl.h"
#include "kernels/x86_avx512.h"
#include "kernels/x86_avx512_gemm.h"
#include "kernels/x86_prefetch.h"

#define X16 16

/* 32 floats of x from element i (m: which to take, the rest zero) as 16
 * bf16 pairs: dword j holds elements 2j (low half) and 2j + 1. */
AI __m512bh x_pairs(const float *x, int64_t i, uint32_t m)
{
    __m512 lo, hi;
    if (m == 0xffffffffu) {
        lo = _mm512_loadu_ps(x + i);
        hi = _mm512_loadu_ps(x + i + 16);
    } else {
        lo = _mm512_maskz_loadu_ps((__mmask16)m, x + i);
        hi = _mm512_maskz_loadu_ps((__mmask16)(m >> 16), x + i + 16);
    }
    return _mm512_cvtne2ps_pbh(hi, lo);
}

AI __m512bh as_bh(__m512i v)
{
    return (__m512bh)v;
}

/* ---- weights in rows ------------------------------------------------ */

#define MR 4
#define MCMAX 8

/* Per output one 16-lane sum: lane j takes elements 32k + 2j and 32k +
 * 2j + 1 of each 32 in turn, the zero-padded tail last; folded by
 * hsum512. */
AI void tile_rows(int64_t n, int R, int C, const char *x, size_t xs, const char *w, size_t ws,
                  float *y, size_t ldy)
{
    __m512 acc[MR][MCMAX];
    UNROLL FOR_R UNROLL FOR_C acc[r][c] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512bh wv[MCMAX];
        UNROLL FOR_C pf_lines(w + (size_t)c * ws + 2 * (size_t)i, 1); /* 64 bytes a row */
        UNROLL FOR_C wv[c] = as_bh(_mm512_loadu_si512((const void *)(w + (size_t)c * ws + 2 * i)));
        UNROLL FOR_R
        {
            __m512bh xv = x_pairs((const float *)(x + (size_t)r * xs), i, 0xffffffffu);
            UNROLL FOR_C acc[r][c] = _mm512_dpbf16_ps(acc[r][c], xv, wv[c]);
        }
    }
    if (i < n) {
        const uint32_t m = (uint32_t)((1ull << (n - i)) - 1);
        __m512bh wv[MCMAX];
        UNROLL FOR_C wv[c] =
            as_bh(_mm512_maskz_loadu_epi16(m, (const void *)(w + (size_t)c * ws + 2 * i)));
        UNROLL FOR_R
        {
            __m512bh xv = x_pairs((const float *)(x + (size_t)r * xs), i, m);
            UNROLL FOR_C acc[r][c] = _mm512_dpbf16_ps(acc[r][c], xv, wv[c]);
        }
    }
    UNROLL FOR_R UNROLL FOR_C y[(size_t)r * ldy + c] = hsum512(acc[r][c]);
}

#define CASE(R, C)                                                                                 \
    case (R)*16 + (C):                                                                             \
        tile_rows(n, R, C, xp, xs, wp, ws, yp, ldy);                                               \
        break;

/* Column blocks sized for L2; inside, row tiles of MR; inside, column
 * tiles of 4 (8 for a lone row), as x86_avx512_gemm.c. */
static void zb_gemm_bf16(int64_t n, int nr, int nc, const void *x, size_t xs, const void *w,
                         size_t ws, float *y, size_t ldy)
{
    int cb = ws > 0 && ws < (size_t)COL_BLOCK_BYTES / 8 ? (int)(COL_BLOCK_BYTES / ws) & ~7 : 8;
    for (int cb0 = 0; cb0 < nc; cb0 += cb) {
        int cend = nc - cb0 < cb ? nc : cb0 + cb;
        for (int r0 = 0; r0 < nr; r0 += MR) {
            int mr = nr - r0 < MR ? nr - r0 : MR;
            int tc = mr == 1 ? 8 : 4;
            for (int c0 = cb0; c0 < cend; c0 += tc) {
                int mc = cend - c0 < tc ? cend - c0 : tc;
                const char *xp = (const char *)x + (size_t)r0 * xs;
                const char *wp = (const char *)w + (size_t)c0 * ws;
                float *yp = y + (size_t)r0 * ldy + c0;
                switch (mr * 16 + mc) {
                    /* clang-format off */
                    CASE(1, 1) CASE(1, 2) CASE(1, 3) CASE(1, 4)
                    CASE(1, 5) CASE(1, 6) CASE(1, 7) CASE(1, 8)
                    CASE(2, 1) CASE(2, 2) CASE(2, 3) CASE(2, 4)
                    CASE(3, 1) CASE(3, 2) CASE(3, 3) CASE(3, 4)
                    CASE(4, 1) CASE(4, 2) CASE(4, 3) CASE(4, 4)
                default:
                    break;
                    /* clang-format on */
                }
            }
        }
    }
}

/* ---- x16 groups (kernels.h) ----------------------------------------- */

/* Run p of a group is pair p of its 16 rows, one row per lane: vdpbf16ps
 * with activation pair p broadcast adds it to 16 outputs of an activation
 * row, so an output needs no horizontal sum. Each output is one chain
 * over the pairs in order, then an odd n's last element with a zero
 * partner. A tile takes R activation rows against C groups (R C chains;
 * a weight run serves R rows).
 *
 * The activations are rounded to pairs once per column block (all of a
 * prompt's call up to 512 columns: XB_YBYTES of sums, which stay in L2
 * from one chunk to the next), a block of rows (up to XB_SR) and a chunk
 * of elements at a time, into XB_BYTES on the stack; the chunk is as
 * long as that allows (2048 elements for up to 16 rows, the whole row
 * for one, 256 for 128). Over a chunk, each column tile of C groups
 * passes over the block's rows, XB_R at a time: its weight runs (24 KiB
 * for C = 3 and 256 elements) stay in L1 while the rows go by, and the
 * next tile's are fetched into L2 meanwhile. A chunk's sums continue from
 * y (a float stored and loaded back is the same float, so the chain is
 * the same however the elements are chunked or the rows blocked).
 * Rounding per 384 KiB of weights instead (6 groups of 2048 elements, 2
 * of 5632) read and rounded the activations again for every 32 or 96
 * columns: figures in bench/README.md. */
#define XB_R 8
#define XB_SR 128              /* rows rounded at once at most */
#define XB_BYTES (64 * 1024)   /* the rounded block */
#define XB_PF 1024             /* bytes ahead, a first pass over a weight run */
#define XB_YBYTES (256 * 1024) /* the sums of a column block */
#define XB_XPF 4               /* rows ahead, rounding */
/* groups per tile: eight chains at least, at most 24 accumulators */
#define XB_C(R) ((R) >= 4 ? 3 : (R) >= 2 ? 4 : 8)

AI void x16b_tile(int R, int C, int64_t p0, int64_t p1, int odd, int first, int pf,
                  const uint32_t *xb, size_t xbs, const char *g, size_t gb, float *y, size_t ldy)
{
    __m512 acc[XB_R][8];
    UNROLL FOR_R UNROLL FOR_C acc[r][c] =
        first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + (size_t)r * ldy + 16 * c);
    for (int64_t p = p0; p < p1; p++) {
        const char *gp = g + 64 * (size_t)p;
        if (pf)
            UNROLL FOR_C _mm_prefetch(gp + (size_t)c * gb + XB_PF, _MM_HINT_T0);
        __m512bh wv[8];
        UNROLL FOR_C wv[c] = as_bh(_mm512_loadu_si512((const void *)(gp + (size_t)c * gb)));
        UNROLL FOR_R
        {
            __m512bh xv = as_bh(_mm512_set1_epi32((int)xb[(size_t)r * xbs + (size_t)(p - p0)]));
            UNROLL FOR_C acc[r][c] = _mm512_dpbf16_ps(acc[r][c], xv, wv[c]);
        }
    }
    if (odd) { /* the last element: each row's value in its lane's low half */
        const char *gp = g + 64 * (size_t)p1;
        __m512bh wv[8];
        UNROLL FOR_C wv[c] = as_bh(
            _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(gp + (size_t)c * gb))));
        UNROLL FOR_R
        {
            __m512bh xv = as_bh(_mm512_set1_epi32((int)xb[(size_t)r * xbs + (size_t)(p1 - p0)]));
            UNROLL FOR_C acc[r][c] = _mm512_dpbf16_ps(acc[r][c], xv, wv[c]);
        }
    }
    UNROLL FOR_R UNROLL FOR_C _mm512_storeu_ps(y + (size_t)r * ldy + 16 * c, acc[r][c]);
}

/* The rounded rows' stride, in pairs: a constant in the tiles (a stride
 * in a register left too few for the eight row addresses, which went to
 * the stack and were loaded back every pair). XB_KP_FEW for at most
 * XB_FEW rows, XB_KP_MANY above; a lone row has no stride, so it takes
 * the whole buffer (a decode's rows in one chunk). */
#define XB_FEW 16
#define XB_KP_FEW (XB_BYTES / 4 / XB_FEW) /* 1024: 2048 elements */
#define XB_KP_MANY (XB_BYTES / 4 / XB_SR) /* 128: 256 elements */
#define XB_KP_ONE (XB_BYTES / 4)

#define XB_CASE(R, C, M)                                                                           \
    case (M)*256 + (R)*16 + (C):                                                                   \
        x16b_tile(R, C, p0, p1, odd, k0 == 0, r0 == 0, xb + (size_t)r0 * (size_t)kp,               \
                  (M) ? XB_KP_MANY : XB_KP_FEW, (const char *)w + (size_t)gi * gb, gb, yp, ldy);   \
        break;
/* clang-format off */
#define XB_CASES(M)                                                                                \
    XB_CASE(1, 1, M) XB_CASE(1, 2, M) XB_CASE(1, 3, M) XB_CASE(1, 4, M)                            \
    XB_CASE(1, 5, M) XB_CASE(1, 6, M) XB_CASE(1, 7, M) XB_CASE(1, 8, M)                            \
    XB_CASE(2, 1, M) XB_CASE(2, 2, M) XB_CASE(2, 3, M) XB_CASE(2, 4, M)                            \
    XB_CASE(3, 1, M) XB_CASE(3, 2, M) XB_CASE(3, 3, M) XB_CASE(3, 4, M)                            \
    XB_CASE(4, 1, M) XB_CASE(4, 2, M) XB_CASE(4, 3, M) XB_CASE(5, 1, M)                            \
    XB_CASE(5, 2, M) XB_CASE(5, 3, M) XB_CASE(6, 1, M) XB_CASE(6, 2, M)                            \
    XB_CASE(6, 3, M) XB_CASE(7, 1, M) XB_CASE(7, 2, M) XB_CASE(7, 3, M)                            \
    XB_CASE(8, 1, M) XB_CASE(8, 2, M) XB_CASE(8, 3, M)
/* clang-format on */

/* The x16 driver over float rows (pre 0: each chunk rounded as it is
 * taken) or over rows rounded already by zb_act_bf16 (pre 1: each chunk
 * copied, the odd last element's partner zeroed as x_pairs zeroes it), so
 * the tiles meet the same pairs either way. */
AI void x16b_gemm(int pre, int64_t n, int nr, int nc, const void *x, size_t xs, const void *w,
                  size_t ws, float *y, size_t ldy)
{
    const size_t gb = X16 * ws;
    const int64_t ng = nc / X16;
    uint32_t xb[XB_BYTES / 4] __attribute__((aligned(64)));
    for (int s0 = 0; s0 < nr; s0 += XB_SR) {
        const int S = nr - s0 < XB_SR ? nr - s0 : XB_SR;
        /* the chunk: pairs a row, a multiple of 16 (x_pairs writes 16) */
        const int many = S > XB_FEW;
        const int64_t kp = S == 1 ? XB_KP_ONE : many ? XB_KP_MANY : XB_KP_FEW, kc = 2 * kp;
        const int CM = XB_C(S < XB_R ? S : XB_R);
        /* columns in blocks whose sums stay in L2 between chunks */
        const int64_t cbg = XB_YBYTES / (64 * S) > CM ? XB_YBYTES / (64 * S) : CM;
        for (int64_t g0 = 0, g1; g0 < ng; g0 = g1) {
            g1 = ng - g0 <= cbg + cbg / 2 ? ng : g0 + cbg;
            for (int64_t k0 = 0, k1; k0 < n; k0 = k1) {
                k1 = n - k0 < kc ? n : k0 + kc;
                /* pairs [p0, p1) whole; odd: element k1 - 1 alone after them */
                const int64_t p0 = k0 / 2, p1 = k1 / 2;
                const int odd = (int)(k1 & 1);
                for (int r = 0; r < S; r++) {
                    const char *xr = (const char *)x + (size_t)(s0 + r) * xs;
                    /* the row XB_XPF on: its chunk is 1 KiB at 128 rows, too
                     * short for the hardware to see a stream in */
                    const char *xn = r + XB_XPF < S ? xr + XB_XPF * xs : NULL;
                    for (int64_t i = k0; i < k1; i += 32) {
                        uint32_t m =
                            k1 - i >= 32 ? 0xffffffffu : (uint32_t)((1ull << (k1 - i)) - 1);
                        __m512i v;
                        if (pre) { /* 32 rounded values: 64 bytes */
                            if (xn)
                                _mm_prefetch(xn + 2 * (size_t)i, _MM_HINT_T0);
                            v = _mm512_maskz_loadu_epi16(m, (const void *)(xr + 2 * (size_t)i));
                        } else {
                            if (xn) {
                                _mm_prefetch(xn + 4 * (size_t)i, _MM_HINT_T0);
                                _mm_prefetch(xn + 4 * (size_t)i + 64, _MM_HINT_T0);
                            }
                            v = (__m512i)x_pairs((const float *)(const void *)xr, i, m);
                        }
                        _mm512_store_si512(
                            (void *)&xb[(size_t)r * (size_t)kp + (size_t)(i - k0) / 2], v);
                    }
                }
                for (int64_t gi = g0, C; gi < g1; gi += C) {
                    /* CM groups, but two and two rather than a lone one last */
                    int64_t left = g1 - gi;
                    C = left <= CM ? left : left == CM + 1 ? left / 2 : CM;
                    /* The next tile (the next groups, the first of the next
                     * chunk or of the next column block): the passes after
                     * the first ask for its runs into L2, an equal share
                     * before each (a few dozen lines). */
                    const char *nx = (const char *)w;
                    int nxc = 0;
                    if (gi + C < g1) {
                        nx += (size_t)(gi + C) * gb + 64 * (size_t)p0;
                        nxc = (int)(g1 - gi - C < CM ? g1 - gi - C : CM);
                    } else if (k1 < n) {
                        nx += (size_t)g0 * gb + 64 * (size_t)p1;
                        nxc = (int)(g1 - g0 < CM ? g1 - g0 : CM);
                    } else if (g1 < ng) {
                        nx += (size_t)g1 * gb;
                        nxc = (int)(ng - g1 < CM ? ng - g1 : CM);
                    }
                    const int64_t nrb = (S + XB_R - 1) / XB_R, np = p1 - p0 + 1;
                    const int64_t share = nrb > 1 ? (np + nrb - 2) / (nrb - 1) : 0;
                    for (int r0 = 0; r0 < S; r0 += XB_R) {
                        const int R = S - r0 < XB_R ? S - r0 : XB_R;
                        /* runs [nxo, nxo + nxn) of the next tile in this pass */
                        const int64_t nxo = r0 ? (r0 / XB_R - 1) * share : 0;
                        const int64_t nxn = !r0 || !nxc || nxo >= np ? 0
                                            : np - nxo < share       ? np - nxo
                                                                     : share;
                        float *yp = y + (size_t)(s0 + r0) * ldy + (size_t)gi * X16;
                        for (int c = 0; c < nxc; c++)
                            for (int64_t q = nxo; q < nxo + nxn; q++)
                                _mm_prefetch(nx + (size_t)c * gb + 64 * (size_t)q, _MM_HINT_T1);
                        switch (many * 256 + R * 16 + (int)C) {
                            XB_CASES(0)
                            XB_CASES(1)
                        default:
                            break;
                        }
                    }
                }
            }
        }
    }
}

static void zb_gemm_bf16_x16(int64_t n, int nr, int nc, const void *x, size_t xs, const void *w,
                             size_t ws, float *y, size_t ldy)
{
    x16b_gemm(0, n, nr, nc, x, xs, w, ws, y, ldy);
}

static void zb_gemm_bf16_x16_pre(int64_t n, int nr, int nc, const void *x, size_t xs, const void *w,
                                 size_t ws, float *y, size_t ldy)
{
    x16b_gemm(1, n, nr, nc, x, xs, w, ws, y, ldy);
}

/* act_pre[BF16] (kernels.h): n floats rounded to bf16 as x_pairs rounds
 * them, 32 at a time. */
static void zb_act_bf16(const float *x, void *y, int64_t n)
{
    for (int64_t i = 0; i < n; i += 32) {
        const uint32_t m = n - i >= 32 ? 0xffffffffu : (uint32_t)((1ull << (n - i)) - 1);
        _mm512_mask_storeu_epi16((char *)y + 2 * i, m, (__m512i)x_pairs(x, i, m));
    }
}

void ifl_kernels_fill_avx512bf16(struct ifl_kernels *k)
{
    k->name = "avx512bf16";
    k->gemm[IFL_TYPE_BF16] = zb_gemm_bf16;
    k->gemm_x16[IFL_TYPE_BF16] = zb_gemm_bf16_x16;
    k->act_pre[IFL_TYPE_BF16] = zb_act_bf16;
    k->gemm_x16_pre[IFL_TYPE_BF16] = zb_gemm_bf16_x16_pre;
    k->x16_pays[IFL_TYPE_BF16] = 1;
    k->x16_cols[IFL_TYPE_BF16] = X16 * XB_C(XB_R);
    k->act_bf16[IFL_TYPE_BF16] = 1;
}
