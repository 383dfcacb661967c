/*
 * 512-bit gemm over the repacked x16 groups (kernels.h) of F16, Q8_0,
 * Q4_0, Q5_0, Q5_1, IQ4_NL, MXFP4, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K and IQ4_XS weights, for the AVX-512
 * table (F, BW, DQ, VL, VNNI): one lane per weight row, so an output needs no horizontal sum. The
 * kernels over weights in rows are in x86_avx512_gemm.c.
 */
#include <immintrin.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/blocks.h"
#include "kernels/impl.h"
#include "kernels/x86_avx512.h"
#include "kernels/x86_avx512_gemm.h"
#include "kernels/x86_x16.h"

/* x16 tiles prefetch the block group this many groups ahead: 16 in tiles
 * of more than two rows (8 until the shuffled activations and the single
 * pass of x16_gemm made the tiles faster; the three together ran tinyllama
 * at 16 sequences Q4_0 +8 % and its prompts +7 %, and 16 beside them
 * matched 8 within the noise in kbench from memory), and in a tile of one
 * or two (a decode row's stream, prefetched non-temporally, PF_HINT) 16
 * Q4_0 groups (288 bytes each) and 24 Q8_0 groups (544 bytes), 5-13 KiB
 * ahead. On the Zen 4 a
 * tinyllama decode ran 2-8 % faster 8 ahead than 1, 2 or 4. On the Zen 5
 * (2026-11-25, alternating builds, medians of 12-16 pairs) Q4_0 16 ahead
 * beat 8 by 4 % and was level with 24; Q8_0 24 beat 8 by 4 %, 16 by 3 %,
 * and was level with 32; at 16 and 128 rows (small-110m 16-sequence
 * decode and prompt) Q8_0 24 ahead lost 2-3 % to 8. */
#ifndef X16_PF
#define X16_PF 16
#endif
#ifndef X16_PF_Q4
#define X16_PF_Q4 16
#endif
#ifndef X16_PF_Q8
#define X16_PF_Q8 24
#endif
#define X16_PF_OF(q4, R) ((R) > 2 ? X16_PF : (q4) ? X16_PF_Q4 : X16_PF_Q8)
/* The prefetch hint of a tile of R rows. A tile of one or two rows comes
 * first over its column block only when it is the whole call (a lone
 * decode row, or two): each weight line is then read once, so it is asked
 * for non-temporally and does not push the step's small working set
 * (activations, norm weights, KV cache) out of L2 and L3. On the Zen 5,
 * tinyllama decode, builds alternating, 6 pairs: Q4_0 +2 %, Q8_0 +3.5 %,
 * Q4_K_M +2 % (medians); small-110m decode level. Wider tiles keep the
 * column block in L2 for the row tiles after them. */
/* (A branch, not a hint chosen by an expression: clang wants the hint
 * constant before inlining; R is constant in every caller, so either way
 * one prefetch instruction remains.) */
#define PF_X16(p, R)                                                                               \
    do {                                                                                           \
        if ((R) <= 2)                                                                              \
            _mm_prefetch((p), _MM_HINT_NTA);                                                       \
        else                                                                                       \
            _mm_prefetch((p), _MM_HINT_T0);                                                        \
    } while (0)

/* ---- x16 groups of Q8_0 / Q4_0 weights (kernels.h) ------------------ */

/* gemm_q8_0_x16 / gemm_q4_0_x16 of ref.c. A 64-byte run of a block group
 * holds four elements of each of 16 weight rows, unsigned (w + 128, or
 * the nibble, w + 8); vpdpbusd meets it with the four matching activations
 * broadcast, so lane i sums row i, and eight runs make a block's exact
 * integer dot for 16 rows at once. The offset comes back exactly as the
 * start value -off * (sum of the activation block). Per block, lane i:
 * acc += (float)isum * (d_i * d_x), blocks in order as in ref; an output
 * is lane i of its row's accumulator, with no horizontal sum.
 *
 * The tiles issue each run's vpdpbusd for all R rows in turn, so that
 * neighbouring instructions are independent chains and this machine's two
 * 512-bit ports keep busy; row after row, each chain of eight waited on its
 * own latency (Q4_0 prefill +20 %, K-quants +8-27 %). The driver keeps each
 * block's activation scale as a float and its offset term ready-made, so a
 * tile broadcasts both from memory instead of converting and multiplying
 * them per block and row (Q4_0 +40 % more).
 *
 * On the Zen 5 a tile of eight rows was bound by loads: this core takes
 * about two vector loads a cycle, and each of the 64 vpdpbusd of a block
 * read its broadcast activations from memory, with the offsets, scales
 * and weights on top (about 85 loads for 64 vpdpbusd, which run two a
 * cycle). Wider tiles now take half of the runs' activations from one
 * 16-byte load a row, spread with vpshufd on the other ports (about 60
 * loads). Spreading all of them left the shuffle ports the bound instead.
 * One core, in cache, 16 rows: Q4_0 555 -> 619 GFLOP/s, Q8_0 528 -> 602
 * (alternating builds, 15 rounds). */

#define X16 16
#define XMR 8       /* activation rows per tile */
#define SEG X16_SEG /* blocks per segment (x86_x16.h) */

/* acc + the dot of w with the 4 bytes at p in every lane (vpdpbusd /
 * vpdpwssd with an m32bcst operand). GCC does not fold a broadcast into
 * these, and the separate vpbroadcastd makes the fully unrolled tiles too
 * long for the decoded-uop cache: with the folded form the K-quant tiles
 * at 16 rows run 11-35 % faster (bit-identical). */
AI __m512i dpbusd_bc(__m512i acc, __m512i w, const char *p)
{
    __asm__("vpdpbusd %2%{1to16%}, %1, %0"
            : "+v"(acc)
            : "v"(w), "m"(*(const struct { char b[4]; } *)p));
    return acc;
}
AI __m512i dpwssd_bc(__m512i acc, __m512i w, const char *p)
{
    __asm__("vpdpwssd %2%{1to16%}, %1, %0"
            : "+v"(acc)
            : "v"(w), "m"(*(const struct { char b[4]; } *)p));
    return acc;
}

/* The 16 bytes at p in each 128-bit lane; then dword k of each lane in
 * all four of its dwords. Together: the four bytes at p + 4k broadcast
 * (k < 4), from one load for four runs. */
AI __m512i lanes4(const char *p)
{
    return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)p));
}
AI __m512i spread(__m512i a, int k)
{
    switch (k) { /* an immediate each, also at -O0 */
    case 0:
        return _mm512_shuffle_epi32(a, 0x00);
    case 1:
        return _mm512_shuffle_epi32(a, 0x55);
    case 2:
        return _mm512_shuffle_epi32(a, 0xaa);
    default:
        return _mm512_shuffle_epi32(a, 0xff);
    }
}

/* Q5_0 and IQ4_NL groups take the same tile (kernels.h's layouts: Q5_0's
 * group has one run of qh, each row's 32-bit word, between d and the four
 * runs of qs; IQ4_NL's is laid as Q4_0's). Their quants become unsigned
 * bytes too: Q5_0's nibble plus 16 where the row's fifth bit is set
 * (offset 16), IQ4_NL's level + 128 by a byte shuffle of the nibble
 * (offset 128). For Q5_0 the fifth bits of the four elements of qs run k
 * (4k .. 4k + 3 in the low nibbles, 16 + 4k .. in the high ones) are four
 * bits of one byte of the qh word: that byte is copied to the four bytes
 * of its lane, and a byte test against 1 << bit gives the mask of the
 * bytes that get 16. */
/* Q5_1 (kind 10, after the K-quants' numbers) takes the Q5_0 tile with
 * its quants unsigned and no offset: its group has m's 16 values after d,
 * then qh and qs as Q5_0's, and per block, lane i: acc += isum * (d_i d_x)
 * + xsum * (m_i d_x), xsum the activation block's sum of quants (x16_sums
 * with offset -1), as ref's dot_q5_1 sums it.
 * MXFP4 (kind 11) takes IQ4_NL's path with its own codes + 128 and its 16
 * scale bytes (one each row, not two) made floats: 2^(e - 128) as
 * ifl_e8m0_half, whose exponent field is e - 1 (subnormal for e < 2). */
enum { X16_Q8_0, X16_Q4_0, X16_Q5_0, X16_IQ4_NL, X16_Q5_1 = 10, X16_MXFP4 = 11 };

AI size_t x16_block_bytes(int kind)
{
    return kind == X16_Q8_0    ? sizeof(struct ifl_block_q8_0)
           : kind == X16_Q5_0  ? sizeof(struct ifl_block_q5_0)
           : kind == X16_Q5_1  ? sizeof(struct ifl_block_q5_1)
           : kind == X16_MXFP4 ? sizeof(struct ifl_block_mxfp4)
                               : sizeof(struct ifl_block_q4_0);
}

/* MXFP4's codes + 128, as unsigned bytes, in every 128-bit lane. */
AI __m512i mxfp4_u8_table(void)
{
    uint8_t t[16];
    for (int i = 0; i < 16; i++)
        t[i] = (uint8_t)(ifl_mxfp4_levels[i] + 128);
    return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)t));
}

/* The 16 rows' half scales from their E8M0 bytes at g. */
AI __m512 e8m0_half16(const char *g)
{
    const __m512i e = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)g));
    const __m512i norm = _mm512_slli_epi32(_mm512_sub_epi32(e, _mm512_set1_epi32(1)), 23);
    const __m512i sub = _mm512_sllv_epi32(_mm512_set1_epi32(0x00200000), e);
    const __mmask16 small = _mm512_cmplt_epu32_mask(e, _mm512_set1_epi32(2));
    return _mm512_castsi512_ps(_mm512_mask_blend_epi32(small, norm, sub));
}

/* The level + 128 of each nibble, as unsigned bytes, in every 128-bit lane. */
AI __m512i iq4nl_u8_table(void)
{
    uint8_t t[16];
    for (int i = 0; i < 16; i++)
        t[i] = (uint8_t)(ifl_iq4nl_levels[i] + 128);
    return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)t));
}

/* wq + 16 in the bytes of run k (k < 8: low nibbles for k < 4) whose
 * fifth bit is set in qh (the rows' qh words, one a lane). */
AI __m512i q5_high(__m512i wq, __m512i qh, int k)
{
    const int byte = k < 4 ? k >> 1 : 2 + ((k - 4) >> 1), odd = k & 1;
    const __m512i pick =
        _mm512_broadcast_i32x4(_mm_setr_epi32(byte * 0x01010101, (4 + byte) * 0x01010101,
                                              (8 + byte) * 0x01010101, (12 + byte) * 0x01010101));
    const __m512i bits = _mm512_set1_epi32(odd ? (int)0x80402010 : 0x08040201);
    __mmask64 m = _mm512_test_epi8_mask(_mm512_shuffle_epi8(qh, pick), bits);
    return _mm512_mask_add_epi8(wq, m, wq, _mm512_set1_epi8(16));
}

/* Blocks [0, nbs) of one group for R activation rows; the accumulators
 * start from y unless this is the first segment, and end in y. kind:
 * X16_Q8_0 .. X16_IQ4_NL. */
AI void x16_tile(int kind, int R, int64_t nbs, const char *x, size_t xs, const int32_t (*xoff)[SEG],
                 const float (*xd)[SEG], const char *g, float *y, size_t ldy, int first, int pf)
{
    const int q4 = kind != X16_Q8_0; /* nibbles */
    const size_t gbs = X16 * x16_block_bytes(kind);
    const int q5 = kind == X16_Q5_0 || kind == X16_Q5_1;
    const size_t qh_off = (kind == X16_Q5_1 ? 4 : 2) * X16;
    const size_t qs_off = kind == X16_MXFP4 ? X16 : qh_off + (q5 ? 64 : 0);
    const __m512i m4 = _mm512_set1_epi8(15);
    __m512 acc[XMR];
    UNROLL FOR_R acc[r] = first ? _mm512_setzero_ps() : _mm512_loadu_ps(y + (size_t)r * ldy);
    for (int64_t b = 0; b < nbs; b++, g += gbs) {
        for (size_t l = 0; pf && l < gbs; l += 64)
            PF_X16(g + X16_PF_OF(q4, R) * gbs + l, R);
        __m512 d = kind == X16_MXFP4 ? e8m0_half16(g)
                                     : _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)g));
        __m512i wq[8];
        if (q4) {
            UNROLL for (int k = 0; k < 4; k++)
            {
                __m512i z = _mm512_loadu_si512((const void *)(g + qs_off + 64 * k));
                wq[k] = _mm512_and_si512(z, m4);
                wq[k + 4] = _mm512_and_si512(_mm512_srli_epi16(z, 4), m4);
            }
            if (q5) {
                const __m512i qh = _mm512_loadu_si512((const void *)(g + qh_off));
                UNROLL for (int k = 0; k < 8; k++) wq[k] = q5_high(wq[k], qh, k);
            } else if (kind == X16_IQ4_NL || kind == X16_MXFP4) {
                const __m512i lv = kind == X16_MXFP4 ? mxfp4_u8_table() : iq4nl_u8_table();
                UNROLL for (int k = 0; k < 8; k++) wq[k] = _mm512_shuffle_epi8(lv, wq[k]);
            }
        } else {
            UNROLL for (int k = 0; k < 8; k++) wq[k] =
                _mm512_loadu_si512((const void *)(g + 2 * X16 + 64 * k));
        }
        /* run k holds elements 4k .. 4k + 3 (Q4_0: k < 4 low nibbles,
         * k >= 4 the high ones, elements 16 + 4(k - 4) ..). With two rows
         * (Q4_0: one or two), odd runs go to a second chain (is2), added
         * after: a block's eight dependent vpdpbusd per row were the bound
         * there (one core, in cache: Q4_0 +12 % at 1 and 2 rows, Q8_0 +9 %
         * at 2, -3 % at 1). The sums are of integers: the same in any order. */
        const int split = R == 2 || (q4 && R == 1);
        __m512i is[XMR], is2[XMR];
        UNROLL FOR_R is[r] = _mm512_set1_epi32(kind == X16_Q5_1 ? 0 : xoff[r][b]);
        UNROLL FOR_R is2[r] = _mm512_setzero_si512();
        /* Wider tiles take the first four runs' activations from one
         * 16-byte load a row, copied to every 128-bit lane and spread
         * with vpshufd, two rows at a time (see above). */
        UNROLL for (int r = 0; r < R && !split; r += 2)
        {
            const char *xq = x + (size_t)r * xs + (size_t)b * XBS + 2;
            const __m512i a0 = lanes4(xq), a1 = r + 1 < R ? lanes4(xq + xs) : a0;
            UNROLL for (int k = 0; k < 4; k++)
            {
                is[r] = _mm512_dpbusd_epi32(is[r], wq[k], spread(a0, k));
                if (r + 1 < R)
                    is[r + 1] = _mm512_dpbusd_epi32(is[r + 1], wq[k], spread(a1, k));
            }
        }
        UNROLL for (int k = split ? 0 : 4; k < 8; k++)
        {
            UNROLL FOR_R
            {
                const char *xq = x + (size_t)r * xs + (size_t)b * XBS + 2 + 4 * k;
                if (split && (k & 1))
                    is2[r] = dpbusd_bc(is2[r], wq[k], xq);
                else
                    is[r] = dpbusd_bc(is[r], wq[k], xq);
            }
        }
        if (split)
            UNROLL FOR_R is[r] = _mm512_add_epi32(is[r], is2[r]);
        UNROLL FOR_R
        {
            __m512 dd = _mm512_mul_ps(d, _mm512_set1_ps(xd[r][b]));
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[r]), dd, acc[r]);
        }
        if (kind == X16_Q5_1) {
            const __m512 m = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(g + 2 * X16)));
            UNROLL FOR_R acc[r] =
                _mm512_fmadd_ps(_mm512_set1_ps((float)xoff[r][b]),
                                _mm512_mul_ps(m, _mm512_set1_ps(xd[r][b])), acc[r]);
        }
    }
    UNROLL FOR_R _mm512_storeu_ps(y + (size_t)r * ldy, acc[r]);
}

/* ---- x16 groups of K-quant weights (kernels.h) ---------------------- */

/* gemm_q4_k_x16 / gemm_q5_k_x16 / gemm_q6_k_x16 of ref.c. As for Q4_0, a 64-byte run
 * holds four elements of each of 16 rows as unsigned bytes, and vpdpbusd
 * with four broadcast activations sums them per row, one lane each. Per
 * sub-block (32 elements for Q4_K, 16 for Q6_K) the exact integer dot is
 * converted to float and multiplied by that row's scale in an FMA onto the
 * super-block's sum, isum (two micro-ops where vpmulld and vpaddd took
 * three: +9 % Q4_K, +23 % Q6_K at 16 rows). Each product is exact; the sum
 * is too while it stays below 2^24, as Q4_K / Q5_K sums do in practice.
 * Q6_K takes its quants unsigned (the -32 comes back with the offset), so
 * its partial sums come near 2^24 and an output can differ from ref's
 * exact isum by a rounding (about 1e-7 relative). The scales stay packed
 * in the group: a run of them gives each lane its row's bytes, unpacked
 * (Q4_K's 6-bit rules, four at a time) and picked per sub-block with
 * vpshufb. Offsets come back exactly
 * from the activation block's sums of 16, by vpdpwssd of word pairs:
 * Q4_K's mins times the sums of its sub-blocks, Q6_K's 32 * sum sc * bsum.
 * Per super-block, lane i: acc += isum * (d_i d_x) - msum * (dmin_i d_x),
 * super-blocks in order. */

#define K4GB (X16 * sizeof(struct ifl_block_q4_k)) /* 2304 bytes per super-block group */
#define K5GB (X16 * sizeof(struct ifl_block_q5_k)) /* 2816 */
#define K6GB (X16 * sizeof(struct ifl_block_q6_k)) /* 3360 */
/* K-quant x16 tiles prefetch this many super-block groups ahead: two at
 * more than two rows (tinyllama Q4_K_M, 2 threads, a 16-row decode ran
 * 8 % slower with one), three at one or two (6.8 KiB of Q4_K, 10 of Q6_K):
 * on the Zen 4 one had beaten two by 4 % in a decode, but on the Zen 5
 * (2026-11-25, alternating builds, 12 pairs each) three beat one by 10 %
 * (all 12 pairs above 1), two by 2 % and six by 3 %. */
#ifndef K_PF
#define K_PF 2
#endif
#ifndef K_PF_FEW
#define K_PF_FEW 3
#endif
#define K_PF_R(R) ((R) <= 2 ? K_PF_FEW : K_PF)

/* vpshufb indexes: in each dword lane, byte j of that lane zero-extended
 * (pick_byte), or as both words of the lane (pick_words), or bytes j and
 * j + 1 each in the high byte of a word (pick_hi_pair: a signed word pair
 * after an arithmetic shift by 8), or byte j in the top byte (pick_top). */
AI __m512i lane_idx(uint32_t pattern)
{
    return _mm512_broadcast_i32x4(_mm_setr_epi32((int)pattern, (int)(pattern + 0x04040404u),
                                                 (int)(pattern + 0x08080808u),
                                                 (int)(pattern + 0x0c0c0c0cu)));
}
/* the 0x80 bytes stay >= 0x80 after the additions: they zero their byte */
AI __m512i pick_byte(int j)
{
    return lane_idx(0x80808000u | (uint32_t)j);
}
AI __m512i pick_words(int j)
{
    return lane_idx(0x80008000u | (uint32_t)j << 16 | (uint32_t)j);
}
AI __m512i pick_hi_pair(int j)
{
    return lane_idx((uint32_t)(j + 1) << 24 | 0x800000u | (uint32_t)j << 8 | 0x80u);
}
AI __m512i pick_top(int j)
{
    return lane_idx((uint32_t)j << 24 | 0x808080u);
}

/* Q4_K group: d, dmin (32 bytes each), scales (3 runs), qs (32 runs);
 * Q5_K has qh (8 runs) before qs: run q holds the fifth bits of elements
 * 4q .. 4q + 3 of every sub-block, bit j for sub-block j. */
AI void x16k4_tile(int q5, int R, int64_t nsb, const char *x, size_t xs, const char *g, float *y,
                   size_t ldy)
{
    const size_t gbs = q5 ? K5GB : K4GB, qs_off = q5 ? 256 + 512 : 256;
    const __m512i m4 = _mm512_set1_epi8(15), k1 = _mm512_set1_epi8(63), k2 = _mm512_set1_epi8(15),
                  k3 = _mm512_set1_epi8(3);
    __m512 acc[XMR];
    UNROLL FOR_R acc[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nsb; b++, g += gbs) {
        for (size_t l = 0; l < gbs; l += 64)
            PF_X16(g + K_PF_R(R) * gbs + l, R);
        const char *xb[XMR];
        UNROLL FOR_R xb[r] = x + (size_t)r * xs + (size_t)b * X8KBS;
        /* runs 0..2 of the scale bytes: bytes 0..3, 4..7, 8..11 of each row */
        __m512i u0 = _mm512_loadu_si512((const void *)(g + 64)),
                u1 = _mm512_loadu_si512((const void *)(g + 128)),
                u2 = _mm512_loadu_si512((const void *)(g + 192));
        __m512i sc[2], mn[2]; /* sc[0] = sc 0..3 of each row, sc[1] = sc 4..7; mn likewise */
        sc[0] = _mm512_and_si512(u0, k1);
        mn[0] = _mm512_and_si512(u1, k1);
        sc[1] =
            _mm512_or_si512(_mm512_and_si512(u2, k2),
                            _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u0, 6), k3), 4));
        mn[1] =
            _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32(u2, 4), k2),
                            _mm512_slli_epi32(_mm512_and_si512(_mm512_srli_epi32(u1, 6), k3), 4));
        /* msum: m[j] * (bsums[2j] + bsums[2j + 1]) */
        __m512i is[XMR];
        UNROLL FOR_R is[r] = _mm512_setzero_si512();
        UNROLL for (int j = 0; j < 8; j++)
        {
            __m512i mw = _mm512_shuffle_epi8(mn[j >> 2], pick_words(j & 3));
            UNROLL FOR_R is[r] = dpwssd_bc(is[r], mw, xb[r] + Q8K_BSUMS + 4 * j);
        }
        const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(g + 32)));
        UNROLL FOR_R acc[r] =
            _mm512_fnmadd_ps(_mm512_cvtepi32_ps(is[r]),
                             _mm512_mul_ps(dmin, _mm512_set1_ps(ld_f32(xb[r] + Q8K_D))), acc[r]);
        /* isum: chunk k's eight runs hold sub-block 2k in their low
         * nibbles and 2k + 1 in their high ones */
        __m512 fs[XMR]; /* sum of sc[j] * t[j], in float */
        UNROLL FOR_R fs[r] = _mm512_setzero_ps();
        _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++)
        {
            const int k = j >> 1, h = j & 1;
            __m512i t[XMR];
            UNROLL FOR_R t[r] = _mm512_setzero_si512();
            UNROLL for (int q = 0; q < 8; q++)
            {
                __m512i z = _mm512_loadu_si512((const void *)(g + qs_off + 64 * (8 * k + q)));
                __m512i wq = _mm512_and_si512(h ? _mm512_srli_epi16(z, 4) : z, m4);
                if (q5) { /* bit j of the qh run to bit 4 */
                    __m512i u = _mm512_loadu_si512((const void *)(g + 256 + 64 * q));
                    u = j < 4   ? _mm512_slli_epi16(u, 4 - j)
                        : j > 4 ? _mm512_srli_epi16(u, j - 4)
                                : u;
                    wq = _mm512_ternarylogic_epi32(wq, u, _mm512_set1_epi8(16), 0xf8);
                }
                UNROLL FOR_R t[r] = dpbusd_bc(t[r], wq, xb[r] + Q8K_QS + 32 * j + 4 * q);
            }
            __m512i s = _mm512_shuffle_epi8(sc[j >> 2], pick_byte(j & 3));
            __m512 sf = _mm512_cvtepi32_ps(s);
            UNROLL FOR_R fs[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t[r]), sf, fs[r]);
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)g));
        UNROLL FOR_R acc[r] =
            _mm512_fmadd_ps(fs[r], _mm512_mul_ps(d, _mm512_set1_ps(ld_f32(xb[r] + Q8K_D))), acc[r]);
    }
    UNROLL FOR_R _mm512_storeu_ps(y + (size_t)r * ldy, acc[r]);
}

/* x16k6_isum for one or two rows, where the weights come from memory: each
 * of a half-group's 24 runs is read once, in address order, a ql run
 * giving two sub-blocks (its low and high nibbles) and a qh run four. The
 * eight sub-blocks' integer dots are kept apart until all are whole and
 * then go into fs in the order of sub-blocks, so the outputs are bit for bit
 * those of x16k6_isum. One-row Q6_K 2048 x 32000 from memory, one core:
 * 25 GFLOP/s with the old order, 73 with this layout and order. */
AI void x16k6_isum_few(int R, const char *g, const char *const *xb, __m512 *fs)
{
    const __m512i m4 = _mm512_set1_epi8(15), m30 = _mm512_set1_epi8(0x30);
    UNROLL for (int h = 0; h < 2; h++)
    {
        __m512i t[2][8]; /* [row][2p + sb]: sub-block 8h + 2p + sb */
        UNROLL FOR_R UNROLL for (int i = 0; i < 8; i++) t[r][i] = _mm512_setzero_si512();
        UNROLL for (int m = 0; m < 8; m++)
        {
            const int sb = m >> 2, q = m & 3;
            __m512i l0 = _mm512_loadu_si512((const void *)(g + IFL_X16_Q6K_QL(h, 0, m)));
            __m512i l1 = _mm512_loadu_si512((const void *)(g + IFL_X16_Q6K_QL(h, 1, m)));
            __m512i u = _mm512_loadu_si512((const void *)(g + IFL_X16_Q6K_QH(h, m)));
            /* element run 32h + 8p + m: l | (u & 0x30), as in x16k6_isum */
            __m512i lo[4] = {_mm512_and_si512(l0, m4), _mm512_and_si512(l1, m4),
                             _mm512_and_si512(_mm512_srli_epi16(l0, 4), m4),
                             _mm512_and_si512(_mm512_srli_epi16(l1, 4), m4)};
            __m512i hi[4] = {_mm512_slli_epi16(u, 4), _mm512_slli_epi16(u, 2), u,
                             _mm512_srli_epi16(u, 2)};
            UNROLL for (int p = 0; p < 4; p++)
            {
                const int j = 8 * h + 2 * p + sb;
                __m512i wq = _mm512_ternarylogic_epi32(lo[p], hi[p], m30, 0xf8);
                UNROLL FOR_R t[r][2 * p + sb] =
                    dpbusd_bc(t[r][2 * p + sb], wq, xb[r] + Q8K_QS + 16 * j + 4 * q);
            }
        }
        UNROLL for (int i = 0; i < 8; i++)
        {
            const int j = 8 * h + i;
            __m512i sv = _mm512_loadu_si512((const void *)(g + 32 + 64 * (j >> 2)));
            __m512i sc = _mm512_srai_epi32(_mm512_shuffle_epi8(sv, pick_top(j & 3)), 24);
            __m512 sf = _mm512_cvtepi32_ps(sc);
            UNROLL FOR_R fs[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t[r][i]), sf, fs[r]);
        }
    }
}

/* The isum part of x16k6_tile (fs += sc[j] * t[j], sub-blocks j in order)
 * for three rows or more: one sub-block's integer dots at a time, R chains
 * of four vpdpbusd. */
AI void x16k6_isum(int R, const char *g, const char *const *xb, __m512 *fs)
{
    const __m512i m4 = _mm512_set1_epi8(15), m30 = _mm512_set1_epi8(0x30);
    _Pragma("GCC unroll 8") for (int hp = 0; hp < 8; hp++)
    {
        const int h = hp >> 2, p = hp & 3;
        UNROLL for (int sb = 0; sb < 2; sb++)
        {
            const int j = 8 * h + 2 * p + sb;
            __m512i t[XMR];
            UNROLL FOR_R t[r] = _mm512_setzero_si512();
            UNROLL for (int q = 0; q < 4; q++)
            {
                const int m = 4 * sb + q;
                __m512i l = _mm512_loadu_si512((const void *)(g + IFL_X16_Q6K_QL(h, p & 1, m)));
                __m512i u = _mm512_loadu_si512((const void *)(g + IFL_X16_Q6K_QH(h, m)));
                l = _mm512_and_si512(p >> 1 ? _mm512_srli_epi16(l, 4) : l, m4);
                u = p == 0   ? _mm512_slli_epi16(u, 4)
                    : p == 1 ? _mm512_slli_epi16(u, 2)
                    : p == 2 ? u
                             : _mm512_srli_epi16(u, 2);
                __m512i wq = _mm512_ternarylogic_epi32(l, u, m30, 0xf8); /* l | (u & 0x30) */
                UNROLL FOR_R t[r] = dpbusd_bc(t[r], wq, xb[r] + Q8K_QS + 16 * j + 4 * q);
            }
            __m512i sv = _mm512_loadu_si512((const void *)(g + 32 + 64 * (j >> 2)));
            __m512i s = _mm512_srai_epi32(_mm512_shuffle_epi8(sv, pick_top(j & 3)), 24);
            __m512 sf = _mm512_cvtepi32_ps(s);
            UNROLL FOR_R fs[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t[r]), sf, fs[r]);
        }
    }
}

/* Q6_K group: d (32 bytes), scales (4 runs), then ql (32 runs) and qh (16
 * runs) interleaved (IFL_X16_Q6K_QL / _QH in impl.h). Element run v
 * (elements 4v .. 4v + 3) with v = 32h + 8p + m, m < 8, is nibble p >> 1
 * of ql run 16h + 8 (p & 1) + m with bits 2p, 2p + 1 of qh run 8h + m on
 * top; sub-block j is runs 4j .. 4j + 3. */
AI void x16k6_tile(int R, int64_t nsb, const char *x, size_t xs, const char *g, float *y,
                   size_t ldy)
{
    __m512 acc[XMR];
    UNROLL FOR_R acc[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nsb; b++, g += K6GB) {
        for (size_t l = 0; l < K6GB; l += 64)
            PF_X16(g + K_PF_R(R) * K6GB + l, R);
        const char *xb[XMR];
        UNROLL FOR_R xb[r] = x + (size_t)r * xs + (size_t)b * X8KBS;
        /* os: sum sc[j] * bsums[j], by word pairs (sc[2u], sc[2u + 1]) */
        __m512i os[XMR];
        UNROLL FOR_R os[r] = _mm512_setzero_si512();
        UNROLL for (int u = 0; u < 8; u++)
        {
            __m512i sv = _mm512_loadu_si512((const void *)(g + 32 + 64 * (u >> 1)));
            __m512i sw = _mm512_srai_epi16(_mm512_shuffle_epi8(sv, pick_hi_pair(2 * (u & 1))), 8);
            UNROLL FOR_R os[r] = dpwssd_bc(os[r], sw, xb[r] + Q8K_BSUMS + 4 * u);
        }
        __m512 fs[XMR]; /* -32 * os, then plus sc[j] * t[j] in float */
        UNROLL FOR_R fs[r] = _mm512_cvtepi32_ps(
            _mm512_slli_epi32(_mm512_sub_epi32(_mm512_setzero_si512(), os[r]), 5));
        if (R <= 2)
            x16k6_isum_few(R, g, xb, fs);
        else
            x16k6_isum(R, g, xb, fs);
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)g));
        UNROLL FOR_R acc[r] =
            _mm512_fmadd_ps(fs[r], _mm512_mul_ps(d, _mm512_set1_ps(ld_f32(xb[r] + Q8K_D))), acc[r]);
    }
    UNROLL FOR_R _mm512_storeu_ps(y + (size_t)r * ldy, acc[r]);
}

/* IQ4_XS group: d, scales_h (32 bytes each: 16 values), scales_l (one
 * run: each row's four bytes), qs (32 runs; sub-block j is runs 4j ..
 * 4j + 3, low nibbles elements 32j + 4(q % 4) .., high ones 16 further).
 * Levels + 128 by a byte shuffle meet the activations in vpdpbusd; per
 * sub-block the exact integer t_j is scaled by ls_j - 32 with an integer
 * multiply, and the offset comes back as 128 * sum_j (ls_j - 32) * (the
 * sub-block's activation sum, bsums[2j] + bsums[2j + 1], by vpdpwssd):
 * isum is ref's exact integer; lane i: acc += isum * (d_i d_x). */
#define XSGB (X16 * sizeof(struct ifl_block_iq4_xs)) /* 2176 bytes per super-block group */

AI void x16xs_tile(int R, int64_t nsb, const char *x, size_t xs, const char *g, float *y,
                   size_t ldy)
{
    const __m512i m4 = _mm512_set1_epi8(15), lv = iq4nl_u8_table();
    __m512 acc[XMR];
    UNROLL FOR_R acc[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nsb; b++, g += XSGB) {
        for (size_t l = 0; l < XSGB; l += 64)
            PF_X16(g + K_PF_R(R) * XSGB + l, R);
        const char *xb[XMR];
        UNROLL FOR_R xb[r] = x + (size_t)r * xs + (size_t)b * X8KBS;
        const __m512i sl = _mm512_loadu_si512((const void *)(g + 64));
        const __m512i sh = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(g + 32)));
        __m512i isum[XMR], os[XMR];
        UNROLL FOR_R isum[r] = _mm512_setzero_si512();
        UNROLL FOR_R os[r] = _mm512_setzero_si512();
        _Pragma("GCC unroll 8") for (int j = 0; j < 8; j++)
        {
            __m512i ls = _mm512_or_si512(
                _mm512_and_si512(_mm512_srli_epi32(sl, 4 * j), _mm512_set1_epi32(15)),
                _mm512_slli_epi32(
                    _mm512_and_si512(_mm512_srli_epi32(sh, 2 * j), _mm512_set1_epi32(3)), 4));
            __m512i sc = _mm512_sub_epi32(ls, _mm512_set1_epi32(32));
            /* (sc, sc) as a word pair, against bsums 2j, 2j + 1 */
            __m512i sw = _mm512_or_si512(_mm512_and_si512(sc, _mm512_set1_epi32(0xffff)),
                                         _mm512_slli_epi32(sc, 16));
            UNROLL FOR_R os[r] = dpwssd_bc(os[r], sw, xb[r] + Q8K_BSUMS + 4 * j);
            __m512i t[XMR];
            UNROLL FOR_R t[r] = _mm512_setzero_si512();
            UNROLL for (int q = 0; q < 4; q++)
            {
                __m512i z = _mm512_loadu_si512((const void *)(g + 128 + 64 * (4 * j + q)));
                __m512i lo = _mm512_shuffle_epi8(lv, _mm512_and_si512(z, m4));
                __m512i hi = _mm512_shuffle_epi8(lv, _mm512_and_si512(_mm512_srli_epi16(z, 4), m4));
                UNROLL FOR_R
                {
                    const char *xq = xb[r] + Q8K_QS + 32 * j + 4 * q;
                    t[r] = dpbusd_bc(t[r], lo, xq);
                    t[r] = dpbusd_bc(t[r], hi, xq + 16);
                }
            }
            UNROLL FOR_R isum[r] = _mm512_add_epi32(isum[r], _mm512_mullo_epi32(t[r], sc));
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)g));
        UNROLL FOR_R
        {
            __m512i is = _mm512_sub_epi32(isum[r], _mm512_slli_epi32(os[r], 7));
            acc[r] =
                _mm512_fmadd_ps(_mm512_cvtepi32_ps(is),
                                _mm512_mul_ps(d, _mm512_set1_ps(ld_f32(xb[r] + Q8K_D))), acc[r]);
        }
    }
    UNROLL FOR_R _mm512_storeu_ps(y + (size_t)r * ldy, acc[r]);
}

/* Q2_K group: d, dmin (32 bytes each), scales (4 runs), qs (16 runs).
 * Q3_K group: d (32 bytes), scales (3 runs), qs (16 runs), hmask (8 runs).
 * qs run 8h + m holds, in bits 2k, 2k + 1, elements 128h + 32k + 4m ..
 * + 3 of every row, which belong to sub-block 8h + 2k + m / 4 (Q3_K's third
 * bit: bit 4h + k of hmask run m). Per sub-block of 16 the exact integer
 * t_s times its scale (an integer multiply: Q3_K's can pass 2^24); the
 * offsets come back from the activation block's sums of 16 by vpdpwssd of
 * word pairs: Q2_K's mins m_s (acc -= msum * dmin d_x), Q3_K's
 * 4 * sum sc_s bsums_s for its stored q + 4. Lane i: acc += isum * (d_i d_x). */
#define K2GB (X16 * sizeof(struct ifl_block_q2_k)) /* 1344 bytes per super-block group */
#define K3GB (X16 * sizeof(struct ifl_block_q3_k)) /* 1760 */

/* The 32-bit lanes' scale of sub-block s (0..15), as ref reads it: Q2_K's
 * low nibble (min: high) of scales byte s; Q3_K's 6-bit value - 32. */
AI __m512i k23_scale(int q3, const char *g, int s, int min)
{
    const __m512i n4 = _mm512_set1_epi32(15);
    if (!q3) {
        __m512i v = _mm512_loadu_si512((const void *)(g + 64 + 64 * (s >> 2)));
        return _mm512_and_si512(_mm512_srli_epi32(v, 8 * (s & 3) + (min ? 4 : 0)), n4);
    }
    __m512i v = _mm512_loadu_si512((const void *)(g + 32 + 64 * ((s & 7) >> 2)));
    __m512i v2 = _mm512_loadu_si512((const void *)(g + 32 + 128));
    __m512i lo = _mm512_and_si512(_mm512_srli_epi32(v, 8 * (s & 3) + (s >= 8 ? 4 : 0)), n4);
    __m512i hi =
        _mm512_and_si512(_mm512_srli_epi32(v2, 8 * (s & 3) + 2 * (s >> 2)), _mm512_set1_epi32(3));
    return _mm512_sub_epi32(_mm512_or_si512(lo, _mm512_slli_epi32(hi, 4)), _mm512_set1_epi32(32));
}

/* Two lanes' values a (low word) and b (high word) as one word pair. */
AI __m512i word_pair(__m512i a, __m512i b)
{
    return _mm512_or_si512(_mm512_and_si512(a, _mm512_set1_epi32(0xffff)),
                           _mm512_slli_epi32(b, 16));
}

AI void x16k23_tile(int q3, int R, int64_t nsb, const char *x, size_t xs, const char *g, float *y,
                    size_t ldy)
{
    const size_t gbs = q3 ? K3GB : K2GB, qs_off = q3 ? 32 + 192 : 64 + 256;
    const __m512i m2 = _mm512_set1_epi8(3), one = _mm512_set1_epi8(1);
    __m512 acc[XMR];
    UNROLL FOR_R acc[r] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nsb; b++, g += gbs) {
        for (size_t l = 0; l < gbs; l += 64)
            PF_X16(g + K_PF_R(R) * gbs + l, R);
        const char *xb[XMR];
        UNROLL FOR_R xb[r] = x + (size_t)r * xs + (size_t)b * X8KBS;
        __m512i isum[XMR], os[XMR];
        UNROLL FOR_R isum[r] = _mm512_setzero_si512();
        UNROLL FOR_R os[r] = _mm512_setzero_si512();
        /* offsets: pairs of sub-blocks (2p, 2p + 1) against bsums 2p, 2p + 1 */
        UNROLL for (int p = 0; p < 8; p++)
        {
            __m512i w = word_pair(k23_scale(q3, g, 2 * p, 1), k23_scale(q3, g, 2 * p + 1, 1));
            UNROLL FOR_R os[r] = dpwssd_bc(os[r], w, xb[r] + Q8K_BSUMS + 4 * p);
        }
        _Pragma("GCC unroll 16") for (int s = 0; s < 16; s++)
        {
            const int h = s >> 3, k = (s & 7) >> 1, m0 = 4 * (s & 1);
            __m512i t[XMR];
            UNROLL FOR_R t[r] = _mm512_setzero_si512();
            UNROLL for (int m = m0; m < m0 + 4; m++)
            {
                __m512i z = _mm512_loadu_si512((const void *)(g + qs_off + 64 * (8 * h + m)));
                __m512i q = _mm512_and_si512(_mm512_srli_epi16(z, 2 * k), m2);
                if (q3) {
                    __m512i hm = _mm512_loadu_si512((const void *)(g + 32 + 192 + 1024 + 64 * m));
                    __m512i hb = _mm512_and_si512(_mm512_srli_epi16(hm, 4 * h + k), one);
                    q = _mm512_or_si512(q, _mm512_slli_epi16(hb, 2));
                }
                UNROLL FOR_R t[r] = dpbusd_bc(t[r], q, xb[r] + Q8K_QS + 128 * h + 32 * k + 4 * m);
            }
            __m512i sc = k23_scale(q3, g, s, 0);
            UNROLL FOR_R isum[r] = _mm512_add_epi32(isum[r], _mm512_mullo_epi32(t[r], sc));
        }
        const __m512 d = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)g));
        UNROLL FOR_R
        {
            const __m512 dx = _mm512_mul_ps(d, _mm512_set1_ps(ld_f32(xb[r] + Q8K_D)));
            if (q3) {
                __m512i is = _mm512_sub_epi32(isum[r], _mm512_slli_epi32(os[r], 2));
                acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), dx, acc[r]);
            } else {
                const __m512 dmin = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(g + 32)));
                acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[r]), dx, acc[r]);
                acc[r] = _mm512_fnmadd_ps(
                    _mm512_cvtepi32_ps(os[r]),
                    _mm512_mul_ps(dmin, _mm512_set1_ps(ld_f32(xb[r] + Q8K_D))), acc[r]);
            }
        }
    }
    UNROLL FOR_R _mm512_storeu_ps(y + (size_t)r * ldy, acc[r]);
}

/* ---- x16 groups of F16 weights (kernels.h) --------------------------- */

/* gemm_f16_x16 of ref.c. Element k of a group is 32 bytes, one vcvtph2ps
 * away from 16 floats, one row per lane; an FMA with activation k
 * broadcast adds it to 16 outputs of an activation row. Each output is one
 * running sum over k in order, as in ref, but fused (within tolerance of
 * ref, and the same in every tile). A tile takes R activation rows against
 * C groups: R * C independent chains, and each converted weight serves R
 * rows (the plain 16-lane tile converts every weight for four rows and
 * reloads 64 bytes of activations for four products). */
#ifndef XF_R
#define XF_R 8
#endif
#ifndef XF_PF
#define XF_PF 1024 /* bytes ahead in each group's stream */
#endif

AI void x16f_tile(int R, int C, int64_t n, const char *x, size_t xs, const char *g, size_t gb,
                  float *y, size_t ldy)
{
    __m512 acc[XF_R][8];
    UNROLL FOR_R UNROLL FOR_C acc[r][c] = _mm512_setzero_ps();
    for (int64_t k = 0; k < n; k++) {
        const char *gk = g + 32 * (size_t)k;
        if (!(k & 1))
            UNROLL FOR_C _mm_prefetch(gk + (size_t)c * gb + XF_PF, _MM_HINT_T0);
        __m512 w[8];
        UNROLL FOR_C w[c] =
            _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(gk + (size_t)c * gb)));
        UNROLL FOR_R
        {
            __m512 xv = _mm512_set1_ps(((const float *)(x + (size_t)r * xs))[k]);
            UNROLL FOR_C acc[r][c] = _mm512_fmadd_ps(w[c], xv, acc[r][c]);
        }
    }
    UNROLL FOR_R UNROLL FOR_C _mm512_storeu_ps(y + (size_t)r * ldy + 16 * c, acc[r][c]);
}

/* groups per tile: eight chains at least, at most 24 accumulators */
#define XF_C(R) ((R) >= 4 ? 3 : (R) >= 2 ? 4 : 8)
#define XF_CASE(R, C)                                                                              \
    case (R)*16 + (C):                                                                             \
        x16f_tile(R, C, n, xp, xs, (const char *)w + (size_t)gi * gb, gb, yp, ldy);                \
        break;

/* Column blocks sized for L2; inside, row tiles of XF_R; inside, tiles of
 * XF_C groups. */
static void z_gemm_f16_x16(int64_t n, int nr, int nc, const void *x, size_t xs, const void *w,
                           size_t ws, float *y, size_t ldy)
{
    const size_t gb = X16 * ws;
    const int64_t ng = nc / X16;
    const int64_t cbg = gb < COL_BLOCK_BYTES ? (int64_t)(COL_BLOCK_BYTES / gb) : 1;
    for (int64_t g0 = 0; g0 < ng; g0 += cbg) {
        int64_t g1 = ng - g0 < cbg ? ng : g0 + cbg;
        for (int r0 = 0; r0 < nr; r0 += XF_R) {
            int R = nr - r0 < XF_R ? nr - r0 : XF_R;
            const char *xp = (const char *)x + (size_t)r0 * xs;
            for (int64_t gi = g0, C; gi < g1; gi += C) {
                /* XF_C(R) groups, but two and two rather than a lone one last */
                int64_t left = g1 - gi;
                C = left <= XF_C(R) ? left : left == XF_C(R) + 1 ? left / 2 : XF_C(R);
                float *yp = y + (size_t)r0 * ldy + (size_t)gi * X16;
                switch (R * 16 + (int)C) {
                    /* clang-format off */
                    XF_CASE(1, 1) XF_CASE(1, 2) XF_CASE(1, 3) XF_CASE(1, 4)
                    XF_CASE(1, 5) XF_CASE(1, 6) XF_CASE(1, 7) XF_CASE(1, 8)
                    XF_CASE(2, 1) XF_CASE(2, 2) XF_CASE(2, 3) XF_CASE(2, 4)
                    XF_CASE(3, 1) XF_CASE(3, 2) XF_CASE(3, 3) XF_CASE(3, 4)
                    XF_CASE(4, 1) XF_CASE(4, 2) XF_CASE(4, 3) XF_CASE(5, 1)
                    XF_CASE(5, 2) XF_CASE(5, 3) XF_CASE(6, 1) XF_CASE(6, 2)
                    XF_CASE(6, 3) XF_CASE(7, 1) XF_CASE(7, 2) XF_CASE(7, 3)
                    XF_CASE(8, 1) XF_CASE(8, 2) XF_CASE(8, 3)
                default:
                    break;
                    /* clang-format on */
                }
            }
        }
    }
}

/* ---- the x16 driver -------------------------------------------------- */

/* kind: 0 Q8_0, 1 Q4_0, 2 Q5_0, 3 IQ4_NL, 4 Q4_K, 5 Q5_K, 6 Q6_K, 7 IQ4_XS, 8 Q2_K,
 * 9 Q3_K, 10 Q5_1, 11 MXFP4 */
#define X16_CASE(R)                                                                                \
    case R:                                                                                        \
        if (kind == 6)                                                                             \
            x16k6_tile(R, nbs, xp, xs, wp, yp, ldy);                                               \
        else if (kind == 7)                                                                        \
            x16xs_tile(R, nbs, xp, xs, wp, yp, ldy);                                               \
        else if (kind == 8 || kind == 9)                                                           \
            x16k23_tile(kind == 9, R, nbs, xp, xs, wp, yp, ldy);                                   \
        else if (kind == 4 || kind == 5)                                                           \
            x16k4_tile(kind == 5, R, nbs, xp, xs, wp, yp, ldy);                                    \
        else                                                                                       \
            x16_tile(kind, R, nbs, xp, xs, xo, xds, wp, yp, ldy, s0 == 0, pf);                     \
        break;
/* clang-format off */
#define X16_SWITCH                                                                                 \
    switch (R) {                                                                                   \
        X16_CASE(1) X16_CASE(2) X16_CASE(3) X16_CASE(4)                                            \
        X16_CASE(5) X16_CASE(6) X16_CASE(7) X16_CASE(8)                                            \
    default:                                                                                       \
        break;                                                                                     \
    }
/* clang-format on */

/* Groups in column blocks sized for L2; inside, row tiles of XMR; inside,
 * for Q8_0 / Q4_0, segments of SEG blocks, whose activation offset terms
 * and scales are taken once for all the block's groups (K-quant tiles
 * read theirs from Q8_K blocks and take a whole row at once). A Q8_0 /
 * Q4_0 call of at most two row tiles (a decode of up to 16 rows) walks
 * the groups once instead: both tiles take a group's segment in turn, the
 * second from cache and without prefetching, so the weights stream at the
 * pace of both tiles rather than of the first alone (with column blocks,
 * the first tile read each block from memory while the second waited).
 * Every output sums its blocks in the same order either way, however nr
 * and nc are split. */
/* What the unsigned quants of a Q8_0-activation kind stand above zero. */
AI int x16_off(int kind)
{
    return kind == X16_Q4_0 ? 8 : kind == X16_Q5_0 ? 16 : kind == X16_Q5_1 ? -1 : 128;
}

AI void x16_gemm(int kind, int64_t n, int nr, int nc, const void *x, size_t xs, const void *w,
                 size_t ws, float *y, size_t ldy)
{
    const int kq = kind >= 4 && kind != X16_Q5_1 && kind != X16_MXFP4;
    const size_t xbs = kq ? X8KBS : XBS; /* bytes of an activation block */
    const int64_t nb = n / (kq ? IFL_QK_K : IFL_QK), ng = nc / X16, seg = kq ? nb : SEG;
    const size_t gb = X16 * ws;         /* bytes of a group */
    const size_t gbs = gb / (size_t)nb; /* bytes of a block group */
    const int64_t cbg = gb < COL_BLOCK_BYTES ? (int64_t)(COL_BLOCK_BYTES / gb) : 1;
    int32_t xoff[2 * XMR][SEG]; /* -off * (sum of the block's quants) */
    float xd[2 * XMR][SEG];     /* the block's scale */
    if (!kq && nr <= 2 * XMR) {
        for (int64_t s0 = 0; s0 < nb; s0 += seg) {
            int64_t nbs = nb - s0 < seg ? nb - s0 : seg;
            x16_sums(x16_off(kind), nr, s0, nbs, (const char *)x, xs, xoff, xd);
            for (int64_t gi = 0; gi < ng; gi++)
                for (int r0 = 0; r0 < nr; r0 += XMR) {
                    const int R = nr - r0 < XMR ? nr - r0 : XMR, pf = r0 == 0;
                    const char *xp = (const char *)x + (size_t)r0 * xs + (size_t)s0 * xbs;
                    const char *wp = (const char *)w + (size_t)gi * gb + (size_t)s0 * gbs;
                    float *yp = y + (size_t)r0 * ldy + (size_t)gi * X16;
                    const int32_t(*xo)[SEG] = xoff + r0;
                    const float(*xds)[SEG] = xd + r0;
                    X16_SWITCH
                }
        }
        return;
    }
    for (int64_t g0 = 0; g0 < ng; g0 += cbg) {
        int64_t g1 = ng - g0 < cbg ? ng : g0 + cbg;
        for (int r0 = 0; r0 < nr; r0 += XMR) {
            const int R = nr - r0 < XMR ? nr - r0 : XMR, pf = 1;
            for (int64_t s0 = 0; s0 < nb; s0 += seg) {
                int64_t nbs = nb - s0 < seg ? nb - s0 : seg;
                const char *xp = (const char *)x + (size_t)r0 * xs + (size_t)s0 * xbs;
                if (!kq)
                    x16_sums(x16_off(kind), R, 0, nbs, xp, xs, xoff, xd);
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

#define X16_GEMM(name, kind)                                                                       \
    static void name(int64_t n, int nr, int nc, const void *x, size_t xs, const void *w,           \
                     size_t ws, float *y, size_t ldy)                                              \
    {                                                                                              \
        x16_gemm(kind, n, nr, nc, x, xs, w, ws, y, ldy);                                           \
    }
X16_GEMM(z_gemm_q8_0_x16, 0)
X16_GEMM(z_gemm_q4_0_x16, 1)
X16_GEMM(z_gemm_q5_0_x16, 2)
X16_GEMM(z_gemm_iq4_nl_x16, 3)
X16_GEMM(z_gemm_q5_1_x16, X16_Q5_1)
X16_GEMM(z_gemm_mxfp4_x16, X16_MXFP4)
X16_GEMM(z_gemm_iq4_xs_x16, 7)
X16_GEMM(z_gemm_q2_k_x16, 8)
X16_GEMM(z_gemm_q3_k_x16, 9)
X16_GEMM(z_gemm_q4_k_x16, 4)
X16_GEMM(z_gemm_q5_k_x16, 5)
X16_GEMM(z_gemm_q6_k_x16, 6)

void ifl_kernels_fill_avx512_x16(struct ifl_kernels *k)
{
    static const ifl_gemm_fn fn[6] = {z_gemm_f16_x16,  z_gemm_q8_0_x16, z_gemm_q4_0_x16,
                                      z_gemm_q4_k_x16, z_gemm_q5_k_x16, z_gemm_q6_k_x16};
    x16_fill(k, fn);
    k->x16_cols[IFL_TYPE_F16] = X16 * XF_C(XF_R);
    /* BF16 keeps the AVX2 table's x16 kernel but stays in rows: the
     * 16-lane F32 FMA tiles of x86_avx512_gemm.c beat it (kbench, one Zen
     * 5 core, 2048 x 2048: 252 against 131 GFLOP/s at 128 rows) */
    k->x16_pays[IFL_TYPE_BF16] = 0;
    k->gemm_x16[IFL_TYPE_Q5_0] = z_gemm_q5_0_x16;
    k->gemm_x16[IFL_TYPE_IQ4_NL] = z_gemm_iq4_nl_x16;
    k->x16_pays[IFL_TYPE_Q5_0] = 1;
    k->x16_pays[IFL_TYPE_IQ4_NL] = 1;
    k->gemm_x16[IFL_TYPE_MXFP4] = z_gemm_mxfp4_x16;
    k->x16_pays[IFL_TYPE_MXFP4] = 1;
    k->gemm_x16[IFL_TYPE_IQ4_XS] = z_gemm_iq4_xs_x16;
    k->x16_pays[IFL_TYPE_IQ4_XS] = 1;
    k->gemm_x16[IFL_TYPE_Q2_K] = z_gemm_q2_k_x16;
    k->x16_pays[IFL_TYPE_Q2_K] = 1;
    k->gemm_x16[IFL_TYPE_Q3_K] = z_gemm_q3_k_x16;
    k->x16_pays[IFL_TYPE_Q3_K] = 1;
    k->gemm_x16[IFL_TYPE_Q5_1] = z_gemm_q5_1_x16;
    k->x16_pays[IFL_TYPE_Q5_1] = 1;
}
