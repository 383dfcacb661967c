/*
 * 256-bit gemm over x16 groups (kernels.h) for the AVX2 table: Q8_0 and
 * Q4_0 weights against Q8_0 activations, Q4_K, Q5_K and Q6_K against Q8_K,
 * F16 against F32. The AVX-512 table replaces all of them with its own
 * (x86_avx512_x16.c); on an AVX2-only CPU they are what a model's
 * matrices run through once the loader has repacked them.
 *
 * Measured on the Zen 3 (AMD EPYC, family 25 model 1), one core, in
 * cache (kbench 2048 2048, best of three runs), against the plain 256-bit
 * kernels of x86_simd.h, GFLOP/s at 1 / 16 / 128 rows: Q4_0 27 / 48 / 49
 * -> 115 / 180 / 178, Q8_0 41 / 57 / 57 -> 71 / 114 / 106, Q4_K 19 / 45 /
 * 44 -> 96 / 159 / 172, Q5_K 17 / 41 / 42 -> 64 / 123 / 129, Q6_K 27 / 57
 * / 58 -> 59 / 103 / 101, F16 36 / 41 / 40 -> 46 / 65 / 92 (this VM's
 * neighbours move single runs by up to half).
 * What bounds them: the four vector pipes. Two take vpmaddubsw and
 * vpmaddwd; a broadcast from memory takes a pipe too (so the K-quant
 * tiles of a column block read expanded activations instead); Q8_0 needs
 * four operations a run and row (sign, vpmaddubsw, vpmaddwd, add) where
 * Q4_0 needs two.
 *
 * A 64-byte run of a block group holds four elements of each of 16 weight
 * rows; its two 32-byte halves are rows 0..7 and 8..15, one row per 32-bit
 * lane. AVX2 has no vpdpbusd: vpmaddubsw multiplies unsigned by signed
 * bytes and adds neighbouring products into 16-bit lanes (saturating), and
 * vpmaddwd with ones adds those pairs into the row's 32-bit lane.
 *
 * Q4_0 (ref.c: gemm_q4_0_x16): the nibbles are w + 8, unsigned, and meet
 * the four activations broadcast; a pair is at most 2 * 15 * 128 = 3840,
 * so a block's eight pairs of a lane (its 32 products per row) add up in
 * 16 bits without overflow and widen once a block. The offset returns
 * exactly as the start value -8 * (sum of the activation block).
 * Q8_0 (ref.c: gemm_q8_0_x16): the runs are stored w + 128; as bytes that
 * is w with its sign bit flipped. |w| (at most 128) meets the activation
 * with w's sign moved onto it (|x| <= 127 from quant_q8_0), so a pair is
 * at most 32512 and exact, and widens at every run.
 *
 * Per block, lane i of row r: acc += (float)isum * (d_i * d_x), blocks in
 * order as in ref (fused, so within the tests' tolerance of ref); an
 * output is a lane of its row's accumulator, with no horizontal sum.
 *
 * Batch invariance: an output gets the same instructions in the same
 * order whatever tile it falls in and however nr and nc are split; tiles
 * share only loads and the per-row and per-column set-up.
 */
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/blocks.h"
#include "kernels/impl.h"
#include "kernels/x86_x16.h"

#define UNROLL _Pragma("GCC unroll 8")
#define FOR_R for (int r = 0; r < R; r++)

#define X16 16
#define XBS ((size_t)sizeof(struct ifl_block_q8_0))
/* Activation rows per tile at most: a row keeps two integer sums (rows
 * 0..7 and 8..15 of the group) in registers, and AVX2 has 16. */
#define XR 4
/* Rows a tile takes at most, by weight type: Q4_0 4, Q8_0 3, or 4 when a
 * call of at most 4 XR rows walks the groups once (one core in cache,
 * alternating builds, 5 rounds: 16 rows +5 %, 128 rows -5 %). */
#define XR_Q4 4
#define XR_Q8 3
#define XR_OF(kind, once) ((kind) ? XR_Q4 : (once) ? XR : XR_Q8)
#define SEG X16_SEG
/* Block groups prefetched ahead of the one a tile reads... */
#define X16_PF 8
/* ...except by the tile of a call of at most NEAR_ROWS rows (a decode of
 * one or two sequences), which waits on memory: bytes ahead. See x16_gemm. */
#define NEAR_ROWS 2
#define X16_PF_NEAR 1152
/* Weight bytes of a column block, which stays in L2 (512 KiB on the Zen 3)
 * while every row tile passes over it. */
#define COL_BLOCK_BYTES (256 * 1024)

/* The four bytes at p in every 32-bit lane. */
AI __m256i bc4(const char *p)
{
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* Keeps the compiler from reassociating a chain of integer adds: it
 * turned a block's running sums into trees of partial sums, which took
 * more registers than AVX2 has and went to the stack. */
AI __m256i pin(__m256i v)
{
    __asm__("" : "+x"(v));
    return v;
}

/* Blocks [0, nbs) of one group for R activation rows, added onto y
 * (zeroed first in the first segment). xoff: the Q4_0 offset terms; xd:
 * the activation blocks' scales. Each broadcast of four activations meets
 * both halves of its run, so a row keeps two integer sums in registers;
 * its float sums live in y, loaded and stored once a block (16 registers
 * hold no more: with them in registers too, the compiler spilled the
 * broadcasts, which cost more). pf: how far ahead (bytes) to prefetch the
 * weights, or 0 not to. */
AI void x16_tile(int q4, int R, int64_t nbs, const char *x, size_t xs, const int32_t (*xoff)[SEG],
                 const float (*xd)[SEG], const char *g, float *y, size_t ldy, int first, size_t pf)
{
    const size_t gbs = X16 * (q4 ? sizeof(struct ifl_block_q4_0) : sizeof(struct ifl_block_q8_0));
    const __m256i m4 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    if (first)
        UNROLL FOR_R UNROLL for (int h = 0; h < 2; h++)
            _mm256_storeu_ps(y + (size_t)r * ldy + 8 * h, _mm256_setzero_ps());
    for (int64_t b = 0; b < nbs; b++, g += gbs) {
        for (size_t l = 0; pf && l < gbs; l += 64)
            _mm_prefetch(g + pf + l, _MM_HINT_T0);
        const char *xq[XR];
        UNROLL FOR_R xq[r] = x + (size_t)r * xs + (size_t)b * XBS + 2;
        __m256i is[XR][2];
        if (q4) {
            /* run k: low nibbles elements 4k .., high ones 16 + 4k .. */
            UNROLL for (int k = 0; k < 8; k++)
            {
                const char *run = g + 2 * X16 + 64 * (k & 3);
                __m256i z0 = _mm256_loadu_si256((const __m256i *)run);
                __m256i z1 = _mm256_loadu_si256((const __m256i *)(run + 32));
                if (k >= 4) {
                    z0 = _mm256_srli_epi16(z0, 4);
                    z1 = _mm256_srli_epi16(z1, 4);
                }
                z0 = _mm256_and_si256(z0, m4);
                z1 = _mm256_and_si256(z1, m4);
                UNROLL FOR_R
                {
                    __m256i a = bc4(xq[r] + (k >= 4 ? 16 : 0) + 4 * (k & 3));
                    __m256i p0 = _mm256_maddubs_epi16(z0, a), p1 = _mm256_maddubs_epi16(z1, a);
                    is[r][0] = pin(k ? _mm256_add_epi16(is[r][0], p0) : p0);
                    is[r][1] = pin(k ? _mm256_add_epi16(is[r][1], p1) : p1);
                }
            }
            UNROLL FOR_R UNROLL for (int h = 0; h < 2; h++) is[r][h] =
                _mm256_add_epi32(_mm256_madd_epi16(is[r][h], ones), _mm256_set1_epi32(xoff[r][b]));
        } else {
            UNROLL for (int k = 0; k < 8; k++)
            {
                const char *run = g + 2 * X16 + 64 * k;
                __m256i w0 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)run),
                                              _mm256_set1_epi8(-128));
                __m256i w1 = _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(run + 32)),
                                              _mm256_set1_epi8(-128));
                __m256i a0 = _mm256_abs_epi8(w0), a1 = _mm256_abs_epi8(w1);
                UNROLL FOR_R
                {
                    __m256i a = bc4(xq[r] + 4 * k);
                    __m256i p0 =
                        _mm256_madd_epi16(_mm256_maddubs_epi16(a0, _mm256_sign_epi8(a, w0)), ones);
                    __m256i p1 =
                        _mm256_madd_epi16(_mm256_maddubs_epi16(a1, _mm256_sign_epi8(a, w1)), ones);
                    is[r][0] = pin(k ? _mm256_add_epi32(is[r][0], p0) : p0);
                    is[r][1] = pin(k ? _mm256_add_epi32(is[r][1], p1) : p1);
                }
            }
        }
        UNROLL for (int h = 0; h < 2; h++)
        {
            const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 16 * h)));
            UNROLL FOR_R
            {
                float *yr = y + (size_t)r * ldy + 8 * h;
                _mm256_storeu_ps(yr, _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[r][h]),
                                                     _mm256_mul_ps(d, _mm256_set1_ps(xd[r][b])),
                                                     _mm256_loadu_ps(yr)));
            }
        }
    }
}

/* ---- x16 groups of K-quant weights (kernels.h) ---------------------- */

/* gemm_q4_k_x16 / gemm_q5_k_x16 / gemm_q6_k_x16 of ref.c. As for Q4_0, a
 * run holds four elements of each of 16 rows as unsigned bytes and
 * vpmaddubsw meets them with four broadcast activations. A sub-block's
 * products are summed in 16 bits while they cannot overflow (Q4_K: all 32,
 * at most 8 * 2 * 15 * 128 = 30720 a lane; Q5_K: 16 at a time; Q6_K: 8 at
 * a time, 2 * 2 * 63 * 128 = 32256), then vpmaddwd against the row's scale
 * (in both words of its lane) adds them, scaled, into the row's 32-bit
 * isum: exact, as ref's. The mins (Q4_K, Q5_K) and Q6_K's -32 come back
 * exactly from the activation block's sums of 16 by vpmaddwd of word
 * pairs. Per super-block, lane i: acc += isum * (d_i d_x), then (Q4_K,
 * Q5_K) acc -= msum * (dmin_i d_x); Q6_K folds -32 * osum into isum.
 *
 * A tile takes one half of the group (8 rows) at a time, so that a row
 * keeps only isum and the current 16-bit sum in registers and four rows
 * fit; the half loop stays rolled, so the activations are loaded again for
 * the second half rather than kept (the compiler would keep them, on the
 * stack). */

#define X8KBS ((size_t)sizeof(struct ifl_block_q8_k))
#define Q8K_D 0
#define Q8K_QS 4
#define Q8K_BSUMS (4 + IFL_QK_K)
/* super-block groups prefetched ahead... */
#define K_PF 2
/* ...except in a call of at most NEAR_ROWS rows, which waits on memory:
 * half a group ahead (Q4_K 1152 bytes, Q6_K 1664), as X16_PF_NEAR. Two
 * threads over a tinyllama decode's matrices, builds alternating: one row
 * Q4_K +4 to +7 %, Q5_K +2 %, Q6_K +2 % (for Q6_K, 896 or 1152 bytes
 * ahead lost 4-11 %), two rows Q4_K and Q6_K +6 %; tg64 tinyllama Q4_K_M
 * +5 % and +13 % (order reversed). */
#define K_PF_NEAR(gbs) (((gbs) / 2) & ~(size_t)63)
/* The 16-row path (xk_gemm) takes the groups in blocks whose super-blocks
 * b, PAIR_BYTES in all, stay in L2 from its first pair of row tiles to
 * its second. */
#define PAIR_BYTES (160 * 1024)

/* vpshufb indexes: in each dword lane, byte j of the lane zero-extended
 * into both words (pick_words), bytes j and j + 1 zero-extended into the
 * two words (pick_pair), or bytes j and k each in the high byte of a word
 * (pick_hi: a signed word pair after an arithmetic shift by 8). A 0x80
 * byte stays >= 0x80 after the additions and zeroes its byte. */
AI __m256i lane_idx(uint32_t pattern)
{
    return _mm256_broadcastsi128_si256(_mm_setr_epi32((int)pattern, (int)(pattern + 0x04040404u),
                                                      (int)(pattern + 0x08080808u),
                                                      (int)(pattern + 0x0c0c0c0cu)));
}
AI __m256i pick_words(int j)
{
    return lane_idx(0x80008000u | (uint32_t)j << 16 | (uint32_t)j);
}
AI __m256i pick_pair(int j)
{
    return lane_idx(0x80008000u | (uint32_t)(j + 1) << 16 | (uint32_t)j);
}
AI __m256i pick_hi(int j, int k)
{
    return lane_idx((uint32_t)k << 24 | 0x800000u | (uint32_t)j << 8 | 0x80u);
}

/* One Q8_K block of a tile's rows, made ready for the tiles: each run of
 * four quants (elements 4e .. 4e + 3) in all eight lanes, so that
 * vpmaddubsw reads it as its memory operand (a broadcast from memory takes
 * a vector pipe, as much as the vpmaddubsw it feeds); the sums of
 * sub-blocks of 32 (Q4_K, Q5_K: bsums[2j] + bsums[2j + 1]); the scale. A
 * tile reads the 8 KiB of four rows from L1 for every group of a column
 * block, so the broadcasts are paid once for all of them. */
struct kx_rows {
    __m256i qe[XR][IFL_QK_K / 4];
    int16_t bsp[XR][8];
    const char *xb[XR]; /* the block itself: bsums for Q6_K */
    const char *pf;     /* weights to prefetch while the tile runs, or NULL */
    float xd[XR];
};

AI void kx_expand(int ex, int R, const char *x, size_t xs, int64_t b, struct kx_rows *e)
{
    UNROLL FOR_R
    {
        const char *xb = x + (size_t)r * xs + (size_t)b * X8KBS;
        e->xb[r] = xb;
        e->xd[r] = ld_f32(xb + Q8K_D);
        _Pragma("GCC unroll 64") for (int k = 0; ex && k < IFL_QK_K / 4; k++)
            _mm256_store_si256(&e->qe[r][k], bc4(xb + Q8K_QS + 4 * k));
        _mm_storeu_si128((__m128i *)e->bsp[r],
                         _mm_hadd_epi16(_mm_loadu_si128((const __m128i *)(xb + Q8K_BSUMS)),
                                        _mm_loadu_si128((const __m128i *)(xb + Q8K_BSUMS + 16))));
    }
}

/* vpmaddubsw of unsigned w against run k of row r: its expanded copy
 * (the memory operand), or with ex == 0 a broadcast of the block's bytes. */
AI __m256i run_dot(int ex, __m256i w, const struct kx_rows *e, int r, int k)
{
    if (ex)
        return _mm256_maddubs_epi16(w, _mm256_load_si256(&e->qe[r][k]));
    return _mm256_maddubs_epi16(w, bc4(e->xb[r] + Q8K_QS + 4 * k));
}

/* Adds lane i of isum * (d_i d_x) (and, with dm, subtracts msum * (dmin_i
 * d_x)) onto 8 outputs of a row at yr. */
AI void k_store(float *yr, __m256i isum, __m256 d, float xd, int dm, __m256i msum, __m256 dmin)
{
    const __m256 xv = _mm256_set1_ps(xd);
    __m256 a = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(d, xv), _mm256_loadu_ps(yr));
    if (dm)
        a = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_mul_ps(dmin, xv), a);
    _mm256_storeu_ps(yr, a);
}

/* The 6-bit scales and mins of half h of a Q4_K / Q5_K group (gh = g + 32
 * h), from its three scale runs (bytes 0..3, 4..7 and 8..11 of each row's
 * twelve): sc[0] = those of sub-blocks 0..3 of each row, sc[1] = 4..7; mn
 * likewise. */
AI void k4_scales(const char *gh, __m256i sc[2], __m256i mn[2])
{
    const __m256i m4 = _mm256_set1_epi8(15), k1 = _mm256_set1_epi8(63), k3 = _mm256_set1_epi8(3);
    __m256i u0 = _mm256_loadu_si256((const __m256i *)(gh + 64)),
            u1 = _mm256_loadu_si256((const __m256i *)(gh + 128)),
            u2 = _mm256_loadu_si256((const __m256i *)(gh + 192));
    sc[0] = _mm256_and_si256(u0, k1);
    mn[0] = _mm256_and_si256(u1, k1);
    sc[1] = _mm256_or_si256(_mm256_and_si256(u2, m4),
                            _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(u0, 6), k3), 4));
    mn[1] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(u2, 4), m4),
                            _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(u1, 6), k3), 4));
}

/* One super-block group g of Q4_K (Q5_K) weights against R expanded rows,
 * added onto y. Q4_K group: d, dmin (32 bytes each), scales (3 runs), qs
 * (32 runs); Q5_K has qh (8 runs) before qs: run q holds the fifth bits of
 * elements 4q .. 4q + 3 of every sub-block, bit j for sub-block j. */
AI void x16k4_sb(int q5, int ex, int R, const char *g, const struct kx_rows *e, float *y,
                 size_t ldy)
{
    const size_t qs_off = q5 ? 256 + 512 : 256;
    const __m256i m4 = _mm256_set1_epi8(15);
    for (int h = 0; h < 2; h++) {
        __asm__("" : "+r"(h)); /* opaque: the halves stay one loop (see above) */
        const char *gh = g + 32 * h;
        __m256i sc[2], mn[2];
        k4_scales(gh, sc, mn);
        /* msum: m[j] * bsp[j], two sub-blocks a step */
        __m256i ms[XR], is[XR];
        UNROLL for (int p = 0; p < 4; p++)
        {
            __m256i mw = _mm256_shuffle_epi8(mn[p >> 1], pick_pair(2 * (p & 1)));
            UNROLL FOR_R
            {
                __m256i t = _mm256_madd_epi16(mw, bc4((const char *)e->bsp[r] + 4 * p));
                ms[r] = pin(p ? _mm256_add_epi32(ms[r], t) : t);
            }
        }
        /* isum: chunk k's eight runs hold sub-block 2k in their low
         * nibbles and 2k + 1 in their high ones */
        UNROLL for (int j = 0; j < 8; j++)
        {
            const int k = j >> 1, hi = j & 1;
            const __m256i sw = _mm256_shuffle_epi8(sc[j >> 2], pick_words(j & 3));
            if (e->pf && !h) /* 36 or 44 lines a group, spread over the tile */
                for (int l = 0; l < 6; l++)
                    _mm_prefetch(e->pf + 64 * (6 * j + l), _MM_HINT_T0);
            __m256i t[XR];
            /* gj is gh, made opaque so that each pass loads its runs
             * afresh from the weights: the low and high nibble passes (and
             * Q5_K's eight passes over the same qh runs) load the same
             * bytes, and the compiler kept the first pass's loads for the
             * later ones, on the stack (84 stack accesses in k4_sb_4, 241
             * in k5_sb_4; now 28 and 30). One core, 16 rows, in cache,
             * alternating: Q4_K +6 to +8 %, Q5_K +21 %. */
            const char *gj = gh;
            __asm__("" : "+r"(gj));
            UNROLL for (int q = 0; q < 8; q++)
            {
                __m256i z = _mm256_loadu_si256((const __m256i *)(gj + qs_off + 64 * (8 * k + q)));
                __m256i wq = _mm256_and_si256(hi ? _mm256_srli_epi16(z, 4) : z, m4);
                if (q5) { /* bit j of the qh run to bit 4 */
                    __m256i u = _mm256_loadu_si256((const __m256i *)(gj + 256 + 64 * q));
                    u = j < 4   ? _mm256_slli_epi16(u, 4 - j)
                        : j > 4 ? _mm256_srli_epi16(u, j - 4)
                                : u;
                    wq = _mm256_or_si256(wq, _mm256_and_si256(u, _mm256_set1_epi8(16)));
                }
                UNROLL FOR_R
                {
                    __m256i p = run_dot(ex, wq, e, r, 8 * j + q);
                    t[r] = pin(q & (q5 ? 3 : 7) ? _mm256_add_epi16(t[r], p) : p);
                }
                if (q == 7 || (q5 && q == 3))
                    UNROLL FOR_R
                    {
                        __m256i v = _mm256_madd_epi16(t[r], sw);
                        is[r] = pin(j || (q5 && q == 7) ? _mm256_add_epi32(is[r], v) : v);
                    }
            }
        }
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 16 * h)));
        const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 32 + 16 * h)));
        UNROLL FOR_R k_store(y + (size_t)r * ldy + 8 * h, is[r], d, e->xd[r], 1, ms[r], dmin);
    }
}

/* One super-block group g of Q6_K weights against R expanded rows, added
 * onto y. Q6_K group: d (32 bytes), scales (4 runs), then ql (32 runs) and
 * qh (16 runs) interleaved (IFL_X16_Q6K_QL / _QH in impl.h). Element run v
 * (elements 4v .. 4v + 3) with v = 32h + 8p + m, m < 8, is nibble p >> 1
 * of ql run 16h + 8 (p & 1) + m with bits 2p, 2p + 1 of qh run 8h + m on
 * top; sub-block j is runs 4j .. 4j + 3. */
AI void x16k6_sb(int ex, int R, const char *g, const struct kx_rows *e, float *y, size_t ldy)
{
    const __m256i m4 = _mm256_set1_epi8(15), m30 = _mm256_set1_epi8(0x30);
    for (int rh = 0; rh < 2; rh++) {
        __asm__("" : "+r"(rh)); /* opaque: the halves stay one loop (see above) */
        const char *gh = g + 32 * rh;
        /* -32 * sum sc[j] * bsums[j], by word pairs (sc[2u], sc[2u + 1]) */
        __m256i is[XR];
        UNROLL for (int u = 0; u < 8; u++)
        {
            __m256i sv = _mm256_loadu_si256((const __m256i *)(gh + 32 + 64 * (u >> 1)));
            const int j = 2 * (u & 1);
            __m256i sw = _mm256_srai_epi16(_mm256_shuffle_epi8(sv, pick_hi(j, j + 1)), 8);
            UNROLL FOR_R
            {
                __m256i t = _mm256_madd_epi16(sw, bc4(e->xb[r] + Q8K_BSUMS + 4 * u));
                is[r] = pin(u ? _mm256_add_epi32(is[r], t) : t);
            }
        }
        UNROLL FOR_R is[r] = _mm256_slli_epi32(_mm256_sub_epi32(_mm256_setzero_si256(), is[r]), 5);
        _Pragma("GCC unroll 16") for (int j = 0; j < 16; j++)
        {
            const int h = j >> 3, p = (j >> 1) & 3;
            __m256i sv = _mm256_loadu_si256((const __m256i *)(gh + 32 + 64 * (j >> 2)));
            const __m256i sw = _mm256_srai_epi16(_mm256_shuffle_epi8(sv, pick_hi(j & 3, j & 3)), 8);
            if (e->pf && !rh) /* 53 lines a group, spread over the tile */
                for (int l = 0; l < 4; l++)
                    _mm_prefetch(e->pf + 64 * (4 * j + l), _MM_HINT_T0);
            __m256i t[XR];
            /* fresh loads, as in x16k4_sb: the ql run of p and p + 2 and
             * the qh run of all four p were kept on the stack (257 stack
             * accesses in k6_sb_4, now 42; Q6_K +27 % at 16 and 128 rows) */
            const char *gj = gh;
            __asm__("" : "+r"(gj));
            UNROLL for (int q = 0; q < 4; q++)
            {
                const int m = 4 * (j & 1) + q;
                __m256i l = _mm256_loadu_si256((const __m256i *)(gj + IFL_X16_Q6K_QL(h, p & 1, m)));
                __m256i u = _mm256_loadu_si256((const __m256i *)(gj + IFL_X16_Q6K_QH(h, m)));
                l = _mm256_and_si256(p >> 1 ? _mm256_srli_epi16(l, 4) : l, m4);
                u = p == 0   ? _mm256_slli_epi16(u, 4)
                    : p == 1 ? _mm256_slli_epi16(u, 2)
                    : p == 2 ? u
                             : _mm256_srli_epi16(u, 2);
                __m256i wq = _mm256_or_si256(l, _mm256_and_si256(u, m30));
                UNROLL FOR_R
                {
                    __m256i pr = run_dot(ex, wq, e, r, 4 * j + q);
                    t[r] = pin(q & 1 ? _mm256_add_epi16(t[r], pr) : pr);
                }
                if (q & 1)
                    UNROLL FOR_R is[r] = pin(_mm256_add_epi32(is[r], _mm256_madd_epi16(t[r], sw)));
            }
        }
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 16 * rh)));
        UNROLL FOR_R k_store(y + (size_t)r * ldy + 8 * rh, is[r], d, e->xd[r], 0, is[r], d);
    }
}

/* One super-block group against one activation row, both halves of the
 * group at once: each broadcast of four activations meets rows 0..7 and
 * 8..15 of its run, as in the Q4_0 tile. x16k4_sb and x16k6_sb take a half
 * at a time so that four rows fit in registers, which for a lone row (a
 * decode of one sequence: bound by memory, its arithmetic not far behind)
 * paid a broadcast, a vector pipe, for every vpmaddubsw. Same sums, in the same
 * order, as x16k4_sb / x16k6_sb with R = 1. One core, one row, alternating
 * builds: from memory (2048 x 32000) Q4_K +18 %, Q5_K +18 %, Q6_K +21 %;
 * in cache (2048 x 2048) Q4_K +18 %, Q5_K level, Q6_K -5 %; tg64 of
 * tinyllama Q4_K_M +10 %, small-110m Q4_K_M +9 %. */
AI void x16k4_row(int q5, const char *g, const struct kx_rows *e, float *y)
{
    const size_t qs_off = q5 ? 256 + 512 : 256;
    const __m256i m4 = _mm256_set1_epi8(15);
    const char *xq = e->xb[0] + Q8K_QS;
    __m256i sc[2][2], mn[2][2], ms[2], is[2];
    UNROLL for (int h = 0; h < 2; h++) k4_scales(g + 32 * h, sc[h], mn[h]);
    UNROLL for (int p = 0; p < 4; p++)
    {
        const __m256i b = bc4((const char *)e->bsp[0] + 4 * p);
        UNROLL for (int h = 0; h < 2; h++)
        {
            __m256i t =
                _mm256_madd_epi16(_mm256_shuffle_epi8(mn[h][p >> 1], pick_pair(2 * (p & 1))), b);
            ms[h] = pin(p ? _mm256_add_epi32(ms[h], t) : t);
        }
    }
    UNROLL for (int j = 0; j < 8; j++)
    {
        const int k = j >> 1, hi = j & 1;
        __m256i sw[2], t[2];
        UNROLL for (int h = 0; h < 2; h++) sw[h] =
            _mm256_shuffle_epi8(sc[h][j >> 2], pick_words(j & 3));
        if (e->pf)
            for (int l = 0; l < 6; l++)
                _mm_prefetch(e->pf + 64 * (6 * j + l), _MM_HINT_T0);
        const char *gj = g; /* opaque, as in x16k4_sb */
        __asm__("" : "+r"(gj));
        UNROLL for (int q = 0; q < 8; q++)
        {
            const __m256i a = bc4(xq + 4 * (8 * j + q));
            UNROLL for (int h = 0; h < 2; h++)
            {
                __m256i z =
                    _mm256_loadu_si256((const __m256i *)(gj + 32 * h + qs_off + 64 * (8 * k + q)));
                __m256i wq = _mm256_and_si256(hi ? _mm256_srli_epi16(z, 4) : z, m4);
                if (q5) {
                    __m256i u = _mm256_loadu_si256((const __m256i *)(gj + 32 * h + 256 + 64 * q));
                    u = j < 4   ? _mm256_slli_epi16(u, 4 - j)
                        : j > 4 ? _mm256_srli_epi16(u, j - 4)
                                : u;
                    wq = _mm256_or_si256(wq, _mm256_and_si256(u, _mm256_set1_epi8(16)));
                }
                __m256i p = _mm256_maddubs_epi16(wq, a);
                t[h] = pin(q & (q5 ? 3 : 7) ? _mm256_add_epi16(t[h], p) : p);
                if (q == 7 || (q5 && q == 3)) {
                    __m256i v = _mm256_madd_epi16(t[h], sw[h]);
                    is[h] = pin(j || (q5 && q == 7) ? _mm256_add_epi32(is[h], v) : v);
                }
            }
        }
    }
    UNROLL for (int h = 0; h < 2; h++)
    {
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 16 * h)));
        const __m256 dmin = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 32 + 16 * h)));
        k_store(y + 8 * h, is[h], d, e->xd[0], 1, ms[h], dmin);
    }
}

AI void x16k6_row(const char *g, const struct kx_rows *e, float *y)
{
    const __m256i m4 = _mm256_set1_epi8(15), m30 = _mm256_set1_epi8(0x30);
    const char *xb = e->xb[0];
    __m256i is[2];
    UNROLL for (int u = 0; u < 8; u++)
    {
        const __m256i b = bc4(xb + Q8K_BSUMS + 4 * u);
        const int j = 2 * (u & 1);
        UNROLL for (int h = 0; h < 2; h++)
        {
            __m256i sv = _mm256_loadu_si256((const __m256i *)(g + 32 * h + 32 + 64 * (u >> 1)));
            __m256i t = _mm256_madd_epi16(
                _mm256_srai_epi16(_mm256_shuffle_epi8(sv, pick_hi(j, j + 1)), 8), b);
            is[h] = pin(u ? _mm256_add_epi32(is[h], t) : t);
        }
    }
    UNROLL for (int h = 0; h < 2; h++) is[h] =
        _mm256_slli_epi32(_mm256_sub_epi32(_mm256_setzero_si256(), is[h]), 5);
    /* the two halves of the elements (eh) are one loop, not unrolled: 870
     * instructions instead of 1500, and one core, alternating builds, +7 %
     * from memory, +4 % in cache */
    for (int eh = 0; eh < 2; eh++) {
        __asm__("" : "+r"(eh));
        UNROLL for (int jj = 0; jj < 8; jj++)
        {
            const int j = 8 * eh + jj, p = (jj >> 1) & 3;
            __m256i sw[2], t[2];
            UNROLL for (int h = 0; h < 2; h++)
            {
                __m256i sv = _mm256_loadu_si256((const __m256i *)(g + 32 * h + 32 + 64 * (j >> 2)));
                sw[h] = _mm256_srai_epi16(_mm256_shuffle_epi8(sv, pick_hi(jj & 3, jj & 3)), 8);
            }
            if (e->pf)
                for (int l = 0; l < 4; l++)
                    _mm_prefetch(e->pf + 64 * (4 * j + l), _MM_HINT_T0);
            /* where element half eh's ql and qh runs start (both 24 runs
             * on for eh = 1); opaque, as in x16k6_sb */
            const char *gj = g + IFL_X16_Q6K_QL(eh, 0, 0) - IFL_X16_Q6K_QL(0, 0, 0);
            __asm__("" : "+r"(gj));
            UNROLL for (int q = 0; q < 4; q++)
            {
                const int m = 4 * (jj & 1) + q;
                const __m256i a = bc4(xb + Q8K_QS + 4 * (4 * j + q));
                UNROLL for (int h = 0; h < 2; h++)
                {
                    const char *gh = gj + 32 * h;
                    __m256i l =
                        _mm256_loadu_si256((const __m256i *)(gh + IFL_X16_Q6K_QL(0, p & 1, m)));
                    __m256i u = _mm256_loadu_si256((const __m256i *)(gh + IFL_X16_Q6K_QH(0, m)));
                    l = _mm256_and_si256(p >> 1 ? _mm256_srli_epi16(l, 4) : l, m4);
                    u = p == 0   ? _mm256_slli_epi16(u, 4)
                        : p == 1 ? _mm256_slli_epi16(u, 2)
                        : p == 2 ? u
                                 : _mm256_srli_epi16(u, 2);
                    __m256i pr =
                        _mm256_maddubs_epi16(_mm256_or_si256(l, _mm256_and_si256(u, m30)), a);
                    t[h] = pin(q & 1 ? _mm256_add_epi16(t[h], pr) : pr);
                    if (q & 1)
                        is[h] = pin(_mm256_add_epi32(is[h], _mm256_madd_epi16(t[h], sw[h])));
                }
            }
        }
    }
    UNROLL for (int h = 0; h < 2; h++)
    {
        const __m256 d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(g + 16 * h)));
        k_store(y + 8 * h, is[h], d, e->xd[0], 0, is[h], d);
    }
}

/* One super-block group for R rows, one function per kind and R: inlined
 * into the gemm's loops, the tiles' registers were spilled all over. */
#define KSB_FN1(name, call)                                                                        \
    static __attribute__((noinline)) void name(const char *g, const struct kx_rows *e, float *y,   \
                                               size_t ldy)                                         \
    {                                                                                              \
        (void)ldy; /* the one-row tiles write one row */                                           \
        call;                                                                                      \
    }
#define KSB_FN(R)                                                                                  \
    KSB_FN1(k4_sb_##R, x16k4_sb(0, 1, R, g, e, y, ldy))                                            \
    KSB_FN1(k5_sb_##R, x16k4_sb(1, 1, R, g, e, y, ldy))                                            \
    KSB_FN1(k6_sb_##R, x16k6_sb(1, R, g, e, y, ldy))                                               \
    KSB_FN1(k4_sbb_##R, x16k4_sb(0, 0, R, g, e, y, ldy))                                           \
    KSB_FN1(k5_sbb_##R, x16k4_sb(1, 0, R, g, e, y, ldy))                                           \
    KSB_FN1(k6_sbb_##R, x16k6_sb(0, R, g, e, y, ldy))
KSB_FN(1)
KSB_FN(2)
KSB_FN1(k4_row, x16k4_row(0, g, e, y))
KSB_FN1(k5_row, x16k4_row(1, g, e, y))
KSB_FN1(k6_row, x16k6_row(g, e, y))
KSB_FN(3)
KSB_FN(4)

typedef void (*k_sb_fn)(const char *g, const struct kx_rows *e, float *y, size_t ldy);

/* kind 4 Q4_K, 5 Q5_K, 6 Q6_K; R rows (1 .. XR); expanded or broadcast
 * (one row broadcast: the one-row tiles) */
static k_sb_fn k_sb(int kind, int R, int ex)
{
    static const k_sb_fn row[3] = {k4_row, k5_row, k6_row};
    if (R == 1 && !ex)
        return row[kind - 4];
    static const k_sb_fn fn[2][3][XR] = {{{k4_sbb_1, k4_sbb_2, k4_sbb_3, k4_sbb_4},
                                          {k5_sbb_1, k5_sbb_2, k5_sbb_3, k5_sbb_4},
                                          {k6_sbb_1, k6_sbb_2, k6_sbb_3, k6_sbb_4}},
                                         {{k4_sb_1, k4_sb_2, k4_sb_3, k4_sb_4},
                                          {k5_sb_1, k5_sb_2, k5_sb_3, k5_sb_4},
                                          {k6_sb_1, k6_sb_2, k6_sb_3, k6_sb_4}}};
    return fn[ex][kind - 4][R - 1];
}

/* The K-quant gemm. Groups in column blocks sized for L2; inside, row
 * tiles of XR, whose activations are expanded a super-block at a time
 * (kx_rows) for all the block's groups. A call of at most 4 XR rows (a
 * decode) walks the weights once instead: up to XR rows are one tile that
 * takes the groups in turn with its activations broadcast; more are row
 * tiles two at a time, expanded a super-block at a time for a block of
 * groups. Every output sums its super-blocks in order either way. */
AI void xk_gemm(int kind, int64_t n, int nr, int nc, const void *x, size_t xs, const void *w,
                size_t ws, float *y, size_t ldy)
{
    const int64_t nb = n / IFL_QK_K, ng = nc / X16;
    const size_t gb = X16 * ws, gbs = gb / (size_t)nb;
    const int64_t cbg = gb < COL_BLOCK_BYTES ? (int64_t)(COL_BLOCK_BYTES / gb) : 1;
    struct kx_rows e __attribute__((aligned(32)));
    const char *xc = x;
    if (nr > XR && nr <= 4 * XR) {
        /* Row tiles two at a time, their rows' activations expanded a
         * super-block at a time (16 KiB), over blocks of groups whose
         * super-block b fits well within L2 (PAIR_BYTES): for each b, the
         * first pair reads the block's super-blocks b from memory (the
         * groups after the next prefetched during its first tile), the
         * second pair finds them in L2. Walked a pair at a time over all
         * the groups, the weights came from memory twice: one core, 16
         * rows, alternating builds, Q6_K 2048 x 16000 (the output of a
         * decode) +22 %, Q6_K 2048 x 8192 +11 %, Q4_K 2048 x 2048 and
         * 5632 x 2048 +3 %, in L2 level. */
        struct kx_rows e2[2] __attribute__((aligned(32)));
        const int nt = (nr + XR - 1) / XR;
        const int64_t kb = gbs < PAIR_BYTES ? (int64_t)(PAIR_BYTES / gbs) : 1;
        for (int r = 0; r < nr; r++)
            memset(y + (size_t)r * ldy, 0, (size_t)nc * sizeof(float));
        for (int64_t g0 = 0; g0 < ng; g0 += kb) {
            const int64_t g1 = ng - g0 < kb ? ng : g0 + kb;
            for (int64_t b = 0; b < nb; b++)
                for (int t0 = 0; t0 < nt; t0 += 2) {
                    const int t1 = t0 + 2 < nt ? t0 + 2 : nt;
                    for (int t = t0; t < t1; t++) {
                        const int r0 = nr * t / nt, R = nr * (t + 1) / nt - r0;
                        kx_expand(1, R, xc + (size_t)r0 * xs, xs, b, &e2[t - t0]);
                        e2[t - t0].pf = NULL;
                    }
                    for (int64_t gi = g0; gi < g1; gi++) {
                        const char *g = (const char *)w + (size_t)gi * gb + (size_t)b * gbs;
                        e2[0].pf = gi + 2 < g1 ? g + 2 * gb : NULL;
                        for (int t = t0; t < t1; t++) {
                            const int r0 = nr * t / nt, R = nr * (t + 1) / nt - r0;
                            k_sb(kind, R, 1)(g, &e2[t - t0],
                                             y + (size_t)r0 * ldy + (size_t)gi * X16, ldy);
                        }
                    }
                }
        }
        return;
    }
    if (nr <= XR) {
        const k_sb_fn sb = k_sb(kind, nr, 0);
        for (int r = 0; r < nr; r++)
            memset(y + (size_t)r * ldy, 0, (size_t)nc * sizeof(float));
        for (int64_t gi = 0; gi < ng; gi++) {
            const char *g = (const char *)w + (size_t)gi * gb;
            for (int64_t b = 0; b < nb; b++, g += gbs) {
                kx_expand(0, nr, xc, xs, b, &e);
                e.pf = g + (nr <= NEAR_ROWS ? K_PF_NEAR(gbs) : K_PF * gbs);
                sb(g, &e, y + (size_t)gi * X16, ldy);
            }
        }
        return;
    }
    for (int64_t g0 = 0; g0 < ng; g0 += cbg) {
        int64_t g1 = ng - g0 < cbg ? ng : g0 + cbg;
        for (int r0 = 0; r0 < nr; r0 += XR) {
            const int R = nr - r0 < XR ? nr - r0 : XR;
            for (int r = 0; r < R; r++)
                memset(y + (size_t)(r0 + r) * ldy + (size_t)g0 * X16, 0,
                       (size_t)(g1 - g0) * X16 * sizeof(float));
            const k_sb_fn sb = k_sb(kind, R, 1);
            for (int64_t b = 0; b < nb; b++) {
                kx_expand(1, R, xc + (size_t)r0 * xs, xs, b, &e);
                e.pf = NULL;
                for (int64_t gi = g0; gi < g1; gi++)
                    sb((const char *)w + (size_t)gi * gb + (size_t)b * gbs, &e,
                       y + (size_t)r0 * ldy + (size_t)gi * X16, ldy);
            }
        }
    }
}

/* ---- x16 groups of F16 weights (kernels.h) --------------------------- */

/* gemm_f16_x16 of ref.c. Element k of a group is 32 bytes, two vcvtph2ps
 * away from 16 floats (rows 0..7 and 8..15); an FMA with activation k
 * broadcast adds each half to 8 outputs of an activation row. Each output
 * is one running sum over k in order, as in ref, but fused (within
 * tolerance of ref, and the same in every tile). A tile takes R activation
 * rows against C groups, 2 R C accumulators: a converted weight serves R
 * rows, and a lone row still runs eight independent chains. */
#define XF_R 6    /* rows per tile: the switch below has a case for each R up to it */
#define XF_PF 512 /* bytes ahead in each group's stream */
/* groups per tile: at most 12 accumulators, at least eight chains */
#define XF_C(R) ((R) >= 3 ? 1 : (R) == 2 ? 2 : 4)

/* Elements [k0, k1) of C groups for R rows; the sums start from y unless
 * k0 is 0 (a float stored and loaded back is the same float, so an output
 * taken in pieces gets the very same chain). Every pfe elements, from k0
 * on, the tile asks for the line pfo bytes beyond the element it reads in
 * each group. */
/* bf: BF16 groups (kernels.h: element pairs, pair k / 2 at 32 k like F16's
 * element k; k0 even): each 32-byte half of a pair is 8 rows' two values,
 * made floats by a shift (the even element) and a mask (the odd one), two
 * FMAs per accumulator in element order, as ref's sum. */
AI void x16f_tile(int bf, int R, int C, int64_t k0, int64_t n, const char *x, size_t xs,
                  const char *g, size_t gb, float *y, size_t ldy, int64_t pfe, size_t pfo)
{
    __m256 acc[XF_R][4][2];
    UNROLL FOR_R UNROLL for (int c = 0; c < C; c++) UNROLL for (int h = 0; h < 2; h++)
        acc[r][c][h] =
            k0 ? _mm256_loadu_ps(y + (size_t)r * ldy + 16 * c + 8 * h) : _mm256_setzero_ps();
    for (int64_t k = k0, pk = k0; k < n; k++) {
        const char *gk = g + 32 * (size_t)k;
        if (k == pk) {
            UNROLL for (int c = 0; c < C; c++) _mm_prefetch(gk + (size_t)c * gb + pfo, _MM_HINT_T0);
            pk += pfe;
        }
        if (bf && k + 1 < n) {
            /* the even elements, then the odd ones (loaded again: with 16
             * registers, a tile of 12 sums has room for two weights and a
             * broadcast, not for the pair kept whole or a mask) */
            UNROLL for (int j = 0; j < 2; j++)
            {
                __m256 wj[4][2];
                UNROLL for (int c = 0; c < C; c++) UNROLL for (int h = 0; h < 2; h++)
                {
                    __m256i v = _mm256_loadu_si256((const __m256i *)(gk + (size_t)c * gb + 32 * h));
                    if (j)
                        v = _mm256_srli_epi32(v, 16);
                    wj[c][h] = _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
                }
                UNROLL FOR_R
                {
                    __m256 xv = _mm256_broadcast_ss((const float *)(x + (size_t)r * xs) + k + j);
                    UNROLL for (int c = 0; c < C; c++) UNROLL for (int h = 0; h < 2; h++)
                        acc[r][c][h] = _mm256_fmadd_ps(wj[c][h], xv, acc[r][c][h]);
                }
            }
            k++; /* pk, a multiple of pfe from k0, stays on pairs' first elements */
            continue;
        }
        __m256 w[4][2];
        if (bf) /* an odd n's last element: 16 values of 2 bytes */
            UNROLL for (int c = 0; c < C; c++) UNROLL for (int h = 0; h < 2; h++) w[c][h] =
                _mm256_castsi256_ps(
                    _mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm_loadu_si128(
                                          (const __m128i *)(gk + (size_t)c * gb + 16 * h))),
                                      16));
        else
            UNROLL for (int c = 0; c < C; c++) UNROLL for (int h = 0; h < 2; h++) w[c][h] =
                _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(gk + (size_t)c * gb + 16 * h)));
        UNROLL FOR_R
        {
            __m256 xv = _mm256_broadcast_ss((const float *)(x + (size_t)r * xs) + k);
            UNROLL for (int c = 0; c < C; c++) UNROLL for (int h = 0; h < 2; h++) acc[r][c][h] =
                _mm256_fmadd_ps(w[c][h], xv, acc[r][c][h]);
        }
    }
    UNROLL FOR_R UNROLL for (int c = 0; c < C; c++) UNROLL for (int h = 0; h < 2; h++)
        _mm256_storeu_ps(y + (size_t)r * ldy + 16 * c + 8 * h, acc[r][c][h]);
}

#define XF_CASE(R, C)                                                                              \
    case (R)*16 + (C):                                                                             \
        x16f_tile(bf, R, C, k0, k1, xp, xs, (const char *)w + (size_t)gi * gb, gb, yp, ldy, pfe,   \
                  pfo);                                                                            \
        break;

/* clang-format off */
#define XF_SWITCH                                                                                  \
    switch (R * 16 + (int)C) {                                                                     \
        XF_CASE(1, 1) XF_CASE(1, 2) XF_CASE(1, 3) XF_CASE(1, 4) XF_CASE(2, 1) XF_CASE(2, 2)        \
        XF_CASE(3, 1) XF_CASE(4, 1) XF_CASE(5, 1) XF_CASE(6, 1)                                    \
    default:                                                                                       \
        break;                                                                                     \
    }
/* clang-format on */
/* Elements a tile of a single pass takes at a time: 8 KiB of a group. */
#define XF_KC 256

/* Column blocks sized for L2; inside, row tiles of XF_R; inside, tiles of
 * XF_C groups. A call of 7 to 3 XF_R rows (a decode of many sequences)
 * walks the groups once instead, a group's elements XF_KC at a time, every
 * row tile in turn: the first tile, reading the weights from memory, was
 * bound by them while the others waited to read the block from L2. Every
 * tile of the walk asks for a share of the next 8 KiB of the stream (tile
 * t of nt: lines t, t + nt, ...), so the weights come in while all of
 * them compute; when only the first tile asked, 512 bytes ahead, memory
 * idled through the others. One core, 16 rows, dlopen A/B: 768 x 32000
 * +8 to +14 %, 768 x 2048 +11 %, 2048 x 768 +7 %; small-110m F16 at 16
 * sequences, builds run alternately, +16 % over 6 pairs and +9 % over 4
 * with the order reversed. */
AI void xf_gemm(int bf, int64_t n, int nr, int nc, const void *x, size_t xs, const void *w,
                size_t ws, float *y, size_t ldy)
{
    const size_t gb = X16 * ws;
    const int64_t ng = nc / X16;
    const int64_t cbg = gb < COL_BLOCK_BYTES ? (int64_t)(COL_BLOCK_BYTES / gb) : 1;
    if (nr > XF_R && nr <= 3 * XF_R) {
        const int nt = (nr + XF_R - 1) / XF_R;
        for (int64_t gi = 0; gi < ng; gi++)
            for (int64_t k0 = 0, k1; k0 < n; k0 = k1) {
                k1 = n - k0 < XF_KC ? n : k0 + XF_KC;
                for (int t = 0; t < nt; t++) {
                    const int r0 = nr * t / nt, R = nr * (t + 1) / nt - r0;
                    const int64_t C = 1, pfe = 2 * nt;
                    const size_t pfo = 32 * XF_KC + 64 * (size_t)t;
                    const char *xp = (const char *)x + (size_t)r0 * xs;
                    float *yp = y + (size_t)r0 * ldy + (size_t)gi * X16;
                    XF_SWITCH
                }
            }
        return;
    }
    const int64_t k0 = 0, k1 = n, pfe = 2;
    const size_t pfo = XF_PF;
    for (int64_t g0 = 0; g0 < ng; g0 += cbg) {
        int64_t g1 = ng - g0 < cbg ? ng : g0 + cbg;
        for (int r0 = 0; r0 < nr; r0 += XF_R) {
            int R = nr - r0 < XF_R ? nr - r0 : XF_R;
            const char *xp = (const char *)x + (size_t)r0 * xs;
            for (int64_t gi = g0, C; gi < g1; gi += C) {
                int64_t left = g1 - gi;
                /* BF16 holds a lone row's tile in 16 registers at 3 groups */
                const int64_t cm = bf && R == 1 ? 3 : XF_C(R);
                C = left < cm ? left : cm;
                float *yp = y + (size_t)r0 * ldy + (size_t)gi * X16;
                XF_SWITCH
            }
        }
    }
}

static void y_gemm_f16_x16(int64_t n, int nr, int nc, const void *x, size_t xs, const void *w,
                           size_t ws, float *y, size_t ldy)
{
    xf_gemm(0, n, nr, nc, x, xs, w, ws, y, ldy);
}

/* The same over BF16 groups (x16f_tile's bf). One core of the Zen 5,
 * kbench 2048 x 2048 (thread CPU time): 111-114 / 95 GFLOP/s at 16 / 128
 * rows against 67-69 / 71-74 for the plain 8-lane BF16 tiles; a lone row
 * level (56-58 against 53-58). */
static void y_gemm_bf16_x16(int64_t n, int nr, int nc, const void *x, size_t xs, const void *w,
                            size_t ws, float *y, size_t ldy)
{
    xf_gemm(1, n, nr, nc, x, xs, w, ws, y, ldy);
}

/* ---- the x16 driver -------------------------------------------------- */

/* kind: 0 Q8_0, 1 Q4_0, 4 Q4_K, 5 Q5_K, 6 Q6_K */
#define X16_CASE(R)                                                                                \
    case R:                                                                                        \
        if (R > XR)                                                                                \
            break;                                                                                 \
        x16_tile(kind, R, nbs, xp, xs, xo, xds, wp, yp, ldy, s0 == 0, pf);                         \
        break;
#define X16_SWITCH                                                                                 \
    switch (R) {                                                                                   \
        X16_CASE(1) X16_CASE(2) X16_CASE(3) X16_CASE(4) default : break;                           \
    }

/* Groups in column blocks sized for L2; inside, row tiles of XR; inside,
 * segments of SEG blocks, whose activation offsets and scales are taken
 * once for all the block's groups. A call of at most 16 rows (a decode)
 * walks the groups once instead: every row tile takes a group's segment
 * in turn, the later ones from cache and without prefetching. Every output
 * sums its blocks in the same order either way.
 *
 * A call of one or two rows waits on memory, and there 8 block groups
 * ahead (2.3 KiB of Q4_0, 4.3 of Q8_0) was too far: on the Zen 3, two
 * threads over a tinyllama decode's matrices (one row, each thread half of
 * each matrix, builds alternating pass by pass) read 4-8 % more at 1152
 * bytes, 896 as well, 1408-1664 less well, 576 or no prefetch worse than
 * 8 groups; tg64 tinyllama, builds alternating, Q4_0 +9 % and +3 % (order
 * reversed), Q8_0 +8 % and +11 %. At four rows it lost 3 %: with four
 * rows' arithmetic a group takes longer, so the prefetch is earlier. */
AI void x16_gemm(int kind, int64_t n, int nr, int nc, const void *x, size_t xs, const void *w,
                 size_t ws, float *y, size_t ldy)
{
    const int64_t nb = n / IFL_QK, ng = nc / X16;
    const size_t gb = X16 * ws;         /* bytes of a group */
    const size_t gbs = gb / (size_t)nb; /* bytes of a block group */
    const int64_t cbg = gb < COL_BLOCK_BYTES ? (int64_t)(COL_BLOCK_BYTES / gb) : 1;
    int32_t xoff[4 * XR][SEG];
    float xd[4 * XR][SEG];
    if (nr <= 4 * XR) {
        /* as few tiles as the widest allows, their rows as even as can be
         * (16 rows of Q8_0 were tiles of 3, 3, 3, 3, 3 and a lone row) */
        const int xr = XR_OF(kind, 1), nt = (nr + xr - 1) / xr;
        for (int64_t s0 = 0; s0 < nb; s0 += SEG) {
            int64_t nbs = nb - s0 < SEG ? nb - s0 : SEG;
            x16_sums(kind == 1 ? 8 : 0, nr, s0, nbs, (const char *)x, xs, xoff, xd);
            for (int64_t gi = 0; gi < ng; gi++)
                for (int t = 0; t < nt; t++) {
                    const int r0 = nr * t / nt, R = nr * (t + 1) / nt - r0;
                    const size_t pf = t > 0 ? 0 : nr <= NEAR_ROWS ? X16_PF_NEAR : X16_PF * gbs;
                    const char *xp = (const char *)x + (size_t)r0 * xs + (size_t)s0 * XBS;
                    const char *wp = (const char *)w + (size_t)gi * gb + (size_t)s0 * gbs;
                    float *yp = y + (size_t)r0 * ldy + (size_t)gi * X16;
                    const int32_t(*xo)[SEG] = xoff + r0;
                    const float(*xds)[SEG] = xd + r0;
                    X16_SWITCH
                }
        }
        return;
    }
    const int xr = XR_OF(kind, 0);
    for (int64_t g0 = 0; g0 < ng; g0 += cbg) {
        int64_t g1 = ng - g0 < cbg ? ng : g0 + cbg;
        for (int r0 = 0; r0 < nr; r0 += xr) {
            const int R = nr - r0 < xr ? nr - r0 : xr;
            const size_t pf = X16_PF * gbs;
            for (int64_t s0 = 0; s0 < nb; s0 += SEG) {
                int64_t nbs = nb - s0 < SEG ? nb - s0 : SEG;
                const char *xp = (const char *)x + (size_t)r0 * xs + (size_t)s0 * XBS;
                x16_sums(kind == 1 ? 8 : 0, R, 0, nbs, xp, xs, xoff, xd);
                for (int64_t gi = g0; gi < g1; gi++) {
                    const char *wp = (const char *)w + (size_t)gi * gb + (size_t)s0 * gbs;
                    float *yp = y + (size_t)r0 * ldy + (size_t)gi * X16;
                    const int32_t(*xo)[SEG] = xoff;
                    const float(*xds)[SEG] = xd;
                    X16_SWITCH
                }
            }
        }
    }
}

#define X16_GEMM(name, drv, kind)                                                                  \
    static void name(int64_t n, int nr, int nc, const void *x, size_t xs, const void *w,           \
                     size_t ws, float *y, size_t ldy)                                              \
    {                                                                                              \
        drv(kind, n, nr, nc, x, xs, w, ws, y, ldy);                                                \
    }
X16_GEMM(y_gemm_q8_0_x16, x16_gemm, 0)
X16_GEMM(y_gemm_q4_0_x16, x16_gemm, 1)
X16_GEMM(y_gemm_q4_k_x16, xk_gemm, 4)
X16_GEMM(y_gemm_q5_k_x16, xk_gemm, 5)
X16_GEMM(y_gemm_q6_k_x16, xk_gemm, 6)

void ifl_kernels_fill_avx2_gemm(struct ifl_kernels *k)
{
    static const ifl_gemm_fn fn[6] = {y_gemm_f16_x16,  y_gemm_q8_0_x16, y_gemm_q4_0_x16,
                                      y_gemm_q4_k_x16, y_gemm_q5_k_x16, y_gemm_q6_k_x16};
    x16_fill(k, fn);
    k->gemm_x16[IFL_TYPE_BF16] = y_gemm_bf16_x16;
    k->x16_pays[IFL_TYPE_BF16] = 1;
}
