/*
 * The 256-bit gemm kernels: the tile driver (DEFINE_GEMM), float weights
 * (F32, F16, BF16), Q8_0 and Q4_0 weights against Q8_0 activations, and
 * the K-quants (Q4_K, Q5_K, Q6_K) against Q8_K activations.
 *
 * A part of x86_simd.h, included only from there (in that order, after its
 * helpers): it relies on the includes, the AI macro and the helpers above
 * it, and on the ISA flags of the file that includes x86_simd.h.
 */

/* ---- tile driver ---------------------------------------------------- */

/* Rows of activations per tile; columns (weight rows) per tile is 2 for
 * full row tiles, 4 when fewer than 3 rows remain (decode), so a lone
 * activation row still runs several independent chains. */
#define TR 4
#define TCMAX 4
/* Weight rows are taken in blocks of about this many bytes, which stay in
 * L2 while every activation row-tile passes over them. */
#define COL_BLOCK_BYTES (256 * 1024)

/* A hand-laid macro table: kept out of clang-format. */
/* clang-format off */
#define TILE_PARAMS                                                                                \
    int64_t n, int R, int C, const char *x, size_t xs, const char *w, size_t ws, float *y, size_t ldy

#define TILE_CASE(tile, R, C)                                                                      \
    case (R)*8 + (C):                                                                              \
        tile(n, R, C, xp, xs, wp, ws, yp, ldy);                                                    \
        break;

#define DEFINE_GEMM(name, tile)                                                                    \
    static void name(int64_t n, int nr, int nc, const void *x, size_t xs, const void *w,          \
                     size_t ws, float *y, size_t ldy)                                             \
    {                                                                                              \
        int cb = ws > 0 && ws < (size_t)COL_BLOCK_BYTES / 4 ? (int)(COL_BLOCK_BYTES / ws) & ~3 : 4; \
        for (int cb0 = 0; cb0 < nc; cb0 += cb) {                                                   \
        int cend = nc - cb0 < cb ? nc : cb0 + cb;                                                  \
        for (int r0 = 0; r0 < nr; r0 += TR) {                                                      \
            int mr = nr - r0 < TR ? nr - r0 : TR;                                                  \
            int tc = mr >= 3 ? 2 : 4;                                                              \
            for (int c0 = cb0; c0 < cend; c0 += tc) {                                              \
                int mc = cend - c0 < tc ? cend - c0 : tc;                                          \
                const char *xp = (const char *)x + (size_t)r0 * xs;                               \
                const char *wp = (const char *)w + (size_t)c0 * ws;                               \
                float *yp = y + (size_t)r0 * ldy + c0;                                             \
                switch (mr * 8 + mc) {                                                             \
                    TILE_CASE(tile, 1, 1) TILE_CASE(tile, 1, 2) TILE_CASE(tile, 1, 3)              \
                    TILE_CASE(tile, 1, 4) TILE_CASE(tile, 2, 1) TILE_CASE(tile, 2, 2)              \
                    TILE_CASE(tile, 2, 3) TILE_CASE(tile, 2, 4) TILE_CASE(tile, 3, 1)              \
                    TILE_CASE(tile, 3, 2) TILE_CASE(tile, 4, 1) TILE_CASE(tile, 4, 2)              \
                default:                                                                           \
                    break;                                                                         \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        }                                                                                          \
    }
/* clang-format on */

#define FOR_R for (int r = 0; r < R; r++)
#define FOR_C for (int c = 0; c < C; c++)
#define UNROLL _Pragma("GCC unroll 4")

/* ---- float weights: F32, F16, BF16 ---------------------------------- */

/* Eight weights of row c at element i, as floats. kind: 0 f32, 1 f16, 2 bf16. */
AI __m256 load_w8(int kind, const char *row, int64_t i)
{
    if (kind == 0)
        return _mm256_loadu_ps((const float *)row + i);
    __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)row + i));
    if (kind == 1)
        return _mm256_cvtph_ps(h);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* The last n % 8 weights, zero-padded to eight. */
AI __m256 load_w8_tail(int kind, const char *row, int64_t i, int m)
{
    if (kind == 0) {
        float t[8] = {0};
        memcpy(t, (const float *)row + i, (size_t)m * 4);
        return _mm256_loadu_ps(t);
    }
    uint16_t t[8] = {0};
    memcpy(t, (const uint16_t *)row + i, (size_t)m * 2);
    return load_w8(kind, (const char *)t, 0);
}

/* gemm_f32 / gemm_f16 / gemm_bf16 of ref.c: per output one 8-lane sum,
 * elements 8k..8k+7 into lane order, the zero-padded tail last. */
AI void tile_float(int kind, int64_t n, int R, int C, const char *x, size_t xs, const char *w,
                   size_t ws, float *y, size_t ldy)
{
    __m256 acc[TR][TCMAX];
    UNROLL FOR_R UNROLL FOR_C acc[r][c] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 wv[TCMAX];
        /* a step reads 32 (f32) or 16 bytes of each row */
        if (!(i & (kind ? 31 : 15)))
            UNROLL FOR_C pf_lines(w + (size_t)c * ws + (size_t)i * (kind ? 2 : 4), 1);
        UNROLL FOR_C wv[c] = load_w8(kind, w + (size_t)c * ws, i);
        UNROLL FOR_R
        {
            __m256 xv = _mm256_loadu_ps((const float *)(x + (size_t)r * xs) + i);
            UNROLL FOR_C acc[r][c] = _mm256_fmadd_ps(wv[c], xv, acc[r][c]);
        }
    }
    if (i < n) {
        int m = (int)(n - i);
        __m256i mask =
            _mm256_cmpgt_epi32(_mm256_set1_epi32(m), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
        __m256 wv[TCMAX];
        UNROLL FOR_C wv[c] = load_w8_tail(kind, w + (size_t)c * ws, i, m);
        UNROLL FOR_R
        {
            __m256 xv = _mm256_maskload_ps((const float *)(x + (size_t)r * xs) + i, mask);
            UNROLL FOR_C acc[r][c] = _mm256_fmadd_ps(wv[c], xv, acc[r][c]);
        }
    }
    UNROLL FOR_R UNROLL FOR_C y[(size_t)r * ldy + c] = hsum_ps(acc[r][c]);
}

AI void tile_f32(TILE_PARAMS)
{
    tile_float(0, n, R, C, x, xs, w, ws, y, ldy);
}
AI void tile_f16(TILE_PARAMS)
{
    tile_float(1, n, R, C, x, xs, w, ws, y, ldy);
}
AI void tile_bf16(TILE_PARAMS)
{
    tile_float(2, n, R, C, x, xs, w, ws, y, ldy);
}
DEFINE_GEMM(x86_gemm_f32, tile_f32)
DEFINE_GEMM(x86_gemm_f16, tile_f16)
DEFINE_GEMM(x86_gemm_bf16, tile_bf16)

/* ---- Q8_0 and Q4_0 weights, Q8_0 activations ------------------------ */

/* gemm_q8_0 / gemm_q4_0 of ref.c. Per block: the signed weights wq, whose
 * magnitudes |wq| (u8) meet the activations with wq's sign moved onto
 * them, so one u8 x s8 dot gives 8 exact lane sums; the lanes are scaled
 * by d_w * d_x and summed into 8 float lanes. */
AI void tile_q80(int q4, int64_t n, int R, int C, const char *x, size_t xs, const char *w,
                 size_t ws, float *y, size_t ldy)
{
    const size_t wbs = q4 ? sizeof(struct ifl_block_q4_0) : sizeof(struct ifl_block_q8_0);
    __m256 acc[TR][TCMAX];
    UNROLL FOR_R UNROLL FOR_C acc[r][c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / IFL_QK; b++) {
        __m256i wq[TCMAX], wu[TCMAX];
        float wd[TCMAX];
        UNROLL FOR_C
        {
            const char *blk = w + (size_t)c * ws + (size_t)b * wbs;
            if (!(b & (q4 ? 3 : 1))) /* a block is 18 or 34 bytes */
                pf_lines(blk, 1);
            wd[c] = ld_f16(blk);
            if (q4) {
                __m128i q = _mm_loadu_si128((const __m128i *)(blk + 2));
                __m128i lo = _mm_and_si128(q, _mm_set1_epi8(15));
                __m128i hi = _mm_and_si128(_mm_srli_epi16(q, 4), _mm_set1_epi8(15));
                wq[c] = _mm256_sub_epi8(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(8));
            } else {
                wq[c] = _mm256_loadu_si256((const __m256i *)(blk + 2));
            }
            wu[c] = _mm256_abs_epi8(wq[c]);
        }
        UNROLL FOR_R
        {
            const char *xb = x + (size_t)r * xs + (size_t)b * sizeof(struct ifl_block_q8_0);
            float xd = ld_f16(xb);
            __m256i xq = _mm256_loadu_si256((const __m256i *)(xb + 2));
            UNROLL FOR_C
            {
                __m256i p = idot(wu[c], _mm256_sign_epi8(xq, wq[c]));
                acc[r][c] =
                    _mm256_fmadd_ps(_mm256_set1_ps(wd[c] * xd), _mm256_cvtepi32_ps(p), acc[r][c]);
            }
        }
    }
    UNROLL FOR_R UNROLL FOR_C y[(size_t)r * ldy + c] = hsum_ps(acc[r][c]);
}

AI void tile_q8_0(TILE_PARAMS)
{
    tile_q80(0, n, R, C, x, xs, w, ws, y, ldy);
}
AI void tile_q4_0(TILE_PARAMS)
{
    tile_q80(1, n, R, C, x, xs, w, ws, y, ldy);
}
DEFINE_GEMM(x86_gemm_q8_0, tile_q8_0)
DEFINE_GEMM(x86_gemm_q4_0, tile_q4_0)

/* ---- Q5_0, Q5_1, IQ4_NL and MXFP4 weights, Q8_0 activations --------- */

/* 32 bytes, byte j all ones where bit j of the little-endian word at p is
 * set, else zero: the word broadcast, byte j / 8 moved to byte j, then
 * compared under the mask 1 << (j % 8). */
AI __m256i bits_to_bytes(const void *p)
{
    uint32_t v;
    memcpy(&v, p, 4);
    const __m256i spread =
        _mm256_setr_epi64x(0, 0x0101010101010101LL, 0x0202020202020202LL, 0x0303030303030303LL);
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201LL);
    __m256i b = _mm256_shuffle_epi8(_mm256_set1_epi32((int)v), spread);
    return _mm256_cmpeq_epi8(_mm256_and_si256(b, bit), bit);
}

/* The 32 nibbles of 16 bytes in element order: low nibbles, then high. */
AI __m256i nibbles_32(const void *p)
{
    __m128i q = _mm_loadu_si128((const __m128i *)p);
    __m128i lo = _mm_and_si128(q, _mm_set1_epi8(15));
    __m128i hi = _mm_and_si128(_mm_srli_epi16(q, 4), _mm_set1_epi8(15));
    return _mm256_set_m128i(hi, lo);
}

/* IQ4_NL's levels in both 128-bit lanes, for a byte shuffle by nibble. */
AI __m256i iq4nl_table(void)
{
    __m128i t = _mm_loadu_si128((const __m128i *)ifl_iq4nl_levels);
    return _mm256_set_m128i(t, t);
}

/* MXFP4's doubled E2M1 codes, likewise. */
AI __m256i mxfp4_table(void)
{
    __m128i t = _mm_loadu_si128((const __m128i *)ifl_mxfp4_levels);
    return _mm256_set_m128i(t, t);
}

/* gemm_q5_0 / gemm_iq4_nl / gemm_mxfp4 of ref.c: the signed weights of a
 * block (q - 16, or the level of each nibble) meet the activations as in
 * tile_q80; MXFP4's scale is the byte e made a power of two.
 * gemm_q5_1: q in 0..31 is unsigned already; the min term m * d_x * (sum
 * of the activation quants) is one more multiply-add into the lanes, the
 * activation sums taken per block by a dot with ones (exact). */
enum { K5_Q5_0, K5_Q5_1, K5_IQ4_NL, K5_MXFP4 };

AI void tile_q5(int kind, int64_t n, int R, int C, const char *x, size_t xs, const char *w,
                size_t ws, float *y, size_t ldy)
{
    const size_t wbs = kind == K5_Q5_0    ? sizeof(struct ifl_block_q5_0)
                       : kind == K5_Q5_1  ? sizeof(struct ifl_block_q5_1)
                       : kind == K5_MXFP4 ? sizeof(struct ifl_block_mxfp4)
                                          : sizeof(struct ifl_block_iq4_nl);
    const size_t qs_off = kind == K5_Q5_0    ? offsetof(struct ifl_block_q5_0, qs)
                          : kind == K5_Q5_1  ? offsetof(struct ifl_block_q5_1, qs)
                          : kind == K5_MXFP4 ? offsetof(struct ifl_block_mxfp4, qs)
                                             : offsetof(struct ifl_block_iq4_nl, qs);
    const __m256i lv = kind == K5_MXFP4 ? mxfp4_table() : iq4nl_table(), ones = _mm256_set1_epi8(1);
    __m256 acc[TR][TCMAX];
    UNROLL FOR_R UNROLL FOR_C acc[r][c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / IFL_QK; b++) {
        __m256i wq[TCMAX], wu[TCMAX];
        float wd[TCMAX], wm[TCMAX];
        UNROLL FOR_C
        {
            const char *blk = w + (size_t)c * ws + (size_t)b * wbs;
            if (!(b & 1)) /* two blocks are 36 to 48 bytes */
                pf_lines(blk, 1);
            wd[c] = kind == K5_MXFP4 ? ifl_e8m0_half((uint8_t)blk[0]) : ld_f16(blk);
            wm[c] = kind == K5_Q5_1 ? ld_f16(blk + 2) : 0.0f;
            __m256i q = nibbles_32(blk + qs_off);
            if (kind == K5_IQ4_NL || kind == K5_MXFP4) {
                wq[c] = _mm256_shuffle_epi8(lv, q);
            } else {
                __m256i hb =
                    _mm256_and_si256(bits_to_bytes(blk + qs_off - 4), _mm256_set1_epi8(16));
                q = _mm256_or_si256(q, hb);
                wq[c] = kind == K5_Q5_0 ? _mm256_sub_epi8(q, _mm256_set1_epi8(16)) : q;
            }
            wu[c] = kind == K5_Q5_1 ? wq[c] : _mm256_abs_epi8(wq[c]);
        }
        UNROLL FOR_R
        {
            const char *xb = x + (size_t)r * xs + (size_t)b * sizeof(struct ifl_block_q8_0);
            float xd = ld_f16(xb);
            __m256i xq = _mm256_loadu_si256((const __m256i *)(xb + 2));
            __m256 xsum = _mm256_setzero_ps();
            if (kind == K5_Q5_1)
                xsum = _mm256_cvtepi32_ps(idot(ones, xq));
            UNROLL FOR_C
            {
                __m256i p =
                    kind == K5_Q5_1 ? idot(wu[c], xq) : idot(wu[c], _mm256_sign_epi8(xq, wq[c]));
                acc[r][c] =
                    _mm256_fmadd_ps(_mm256_set1_ps(wd[c] * xd), _mm256_cvtepi32_ps(p), acc[r][c]);
                if (kind == K5_Q5_1)
                    acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(wm[c] * xd), xsum, acc[r][c]);
            }
        }
    }
    UNROLL FOR_R UNROLL FOR_C y[(size_t)r * ldy + c] = hsum_ps(acc[r][c]);
}

AI void tile_q5_0(TILE_PARAMS)
{
    tile_q5(K5_Q5_0, n, R, C, x, xs, w, ws, y, ldy);
}
AI void tile_q5_1(TILE_PARAMS)
{
    tile_q5(K5_Q5_1, n, R, C, x, xs, w, ws, y, ldy);
}
DEFINE_GEMM(x86_gemm_q5_0, tile_q5_0)
AI void tile_iq4_nl(TILE_PARAMS)
{
    tile_q5(K5_IQ4_NL, n, R, C, x, xs, w, ws, y, ldy);
}
DEFINE_GEMM(x86_gemm_q5_1, tile_q5_1)
DEFINE_GEMM(x86_gemm_iq4_nl, tile_iq4_nl)
AI void tile_mxfp4(TILE_PARAMS)
{
    tile_q5(K5_MXFP4, n, R, C, x, xs, w, ws, y, ldy);
}
DEFINE_GEMM(x86_gemm_mxfp4, tile_mxfp4)

/* ---- K-quant weights, Q8_K activations ------------------------------ */

/* Offsets inside a Q8_K block. */
#define Q8K_D 0
#define Q8K_QS 4
#define Q8K_BSUMS (4 + IFL_QK_K)

/* gemm_q4_k / gemm_q5_k of ref.c. Per super-block and output: isum (8 int
 * lanes) = sum_j sc[j] * dot(q_j, x_j); msum (exact int) = sum_j m[j] *
 * (sum of x_j) from bsums; then acc += (d_x d) * isum lanes and
 * macc += (d_x dmin) * msum; the output is hsum(acc) - macc. */
AI void tile_kx(int q5, int64_t n, int R, int C, const char *x, size_t xs, const char *w, size_t ws,
                float *y, size_t ldy)
{
    const size_t wbs = q5 ? sizeof(struct ifl_block_q5_k) : sizeof(struct ifl_block_q4_k);
    const size_t qs_off =
        q5 ? offsetof(struct ifl_block_q5_k, qs) : offsetof(struct ifl_block_q4_k, qs);
    const __m256i m4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
    __m256 acc[TR][TCMAX];
    float macc[TR][TCMAX];
    UNROLL FOR_R UNROLL FOR_C
    {
        acc[r][c] = _mm256_setzero_ps();
        macc[r][c] = 0.0f;
    }
    const size_t xbs = sizeof(struct ifl_block_q8_k);
    for (int64_t b = 0; b < n / IFL_QK_K; b++) {
        uint8_t sc[TCMAX][8];
        __m256i mins16[TCMAX], qh[TCMAX];
        float wd[TCMAX], wdm[TCMAX];
        UNROLL FOR_C
        {
            const char *blk = w + (size_t)c * ws + (size_t)b * wbs;
            const uint8_t *s = (const uint8_t *)blk + 4;
            uint8_t m[8];
            for (int j = 0; j < 8; j++)
                ifl_k4_scale_min(s, j, &sc[c][j], &m[j]);
            /* m[j] twice, to meet bsums[2j] and bsums[2j + 1] */
            mins16[c] = _mm256_setr_epi16(m[0], m[0], m[1], m[1], m[2], m[2], m[3], m[3], m[4],
                                          m[4], m[5], m[5], m[6], m[6], m[7], m[7]);
            wd[c] = ld_f16(blk);
            wdm[c] = ld_f16(blk + 2);
            pf_lines(blk, q5 ? 3 : 2); /* a super-block is 176 or 144 bytes */
            qh[c] = q5 ? _mm256_loadu_si256((const __m256i *)(blk + 16)) : _mm256_setzero_si256();
        }
        __m256i isum[TR][TCMAX];
        UNROLL FOR_R UNROLL FOR_C isum[r][c] = _mm256_setzero_si256();
        for (int k = 0; k < 4; k++) {
            UNROLL FOR_C
            {
                const char *blk = w + (size_t)c * ws + (size_t)b * wbs;
                __m256i q = _mm256_loadu_si256((const __m256i *)(blk + qs_off + 32 * k));
                __m256i lo = _mm256_and_si256(q, m4);
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                if (q5) {
                    __m256i h = _mm256_srl_epi16(qh[c], _mm_cvtsi32_si128(2 * k));
                    lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(h, one), 4));
                    hi = _mm256_or_si256(
                        hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, 1), one), 4));
                }
                __m256i s0 = _mm256_set1_epi16(sc[c][2 * k]);
                __m256i s1 = _mm256_set1_epi16(sc[c][2 * k + 1]);
                UNROLL FOR_R
                {
                    const char *xq = x + (size_t)r * xs + (size_t)b * xbs + Q8K_QS + 64 * k;
                    __m256i x0 = _mm256_loadu_si256((const __m256i *)xq);
                    __m256i x1 = _mm256_loadu_si256((const __m256i *)(xq + 32));
                    isum[r][c] = sdot_acc(isum[r][c], lo, x0, s0);
                    isum[r][c] = sdot_acc(isum[r][c], hi, x1, s1);
                }
            }
        }
        UNROLL FOR_R
        {
            const char *xb = x + (size_t)r * xs + (size_t)b * xbs;
            float xd = ld_f32(xb + Q8K_D);
            __m256i bs = _mm256_loadu_si256((const __m256i *)(xb + Q8K_BSUMS));
            UNROLL FOR_C
            {
                int32_t msum = hsum_epi32(_mm256_madd_epi16(bs, mins16[c]));
                acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(xd * wd[c]),
                                            _mm256_cvtepi32_ps(isum[r][c]), acc[r][c]);
                macc[r][c] += xd * wdm[c] * (float)msum;
            }
        }
    }
    UNROLL FOR_R UNROLL FOR_C y[(size_t)r * ldy + c] = hsum_ps(acc[r][c]) - macc[r][c];
}

AI void tile_q4_k(TILE_PARAMS)
{
    tile_kx(0, n, R, C, x, xs, w, ws, y, ldy);
}
AI void tile_q5_k(TILE_PARAMS)
{
    tile_kx(1, n, R, C, x, xs, w, ws, y, ldy);
}
DEFINE_GEMM(x86_gemm_q4_k, tile_q4_k)
DEFINE_GEMM(x86_gemm_q5_k, tile_q5_k)

/* gemm_q6_k of ref.c. q in 0..63 goes through the u8 x s8 dot unsigned; the
 * -32 offset is taken back exactly as 32 * sum_j sc[j] * bsums[j]. Per
 * super-block: acc += d * isum lanes, macc += d * (32 * osum). */
AI void tile_q6k(int64_t n, int R, int C, const char *x, size_t xs, const char *w, size_t ws,
                 float *y, size_t ldy)
{
    const __m256i m4 = _mm256_set1_epi8(15), m2 = _mm256_set1_epi8(3);
    const size_t wbs = sizeof(struct ifl_block_q6_k), xbs = sizeof(struct ifl_block_q8_k);
    __m256 acc[TR][TCMAX];
    float macc[TR][TCMAX];
    UNROLL FOR_R UNROLL FOR_C
    {
        acc[r][c] = _mm256_setzero_ps();
        macc[r][c] = 0.0f;
    }
    for (int64_t b = 0; b < n / IFL_QK_K; b++) {
        __m256i isum[TR][TCMAX];
        UNROLL FOR_R UNROLL FOR_C isum[r][c] = _mm256_setzero_si256();
        UNROLL FOR_C pf_lines(w + (size_t)c * ws + (size_t)b * wbs, 4); /* 210 bytes */
        for (int h = 0; h < 2; h++) {
            for (int v = 0; v < 4; v++) { /* elements 128h + 32v .. +31 */
                UNROLL FOR_C
                {
                    const struct ifl_block_q6_k *blk =
                        (const struct ifl_block_q6_k *)(w + (size_t)c * ws + (size_t)b * wbs);
                    __m256i ql =
                        _mm256_loadu_si256((const __m256i *)(blk->ql + 64 * h + 32 * (v & 1)));
                    __m256i qh = _mm256_loadu_si256((const __m256i *)(blk->qh + 32 * h));
                    __m256i lo = v < 2 ? _mm256_and_si256(ql, m4)
                                       : _mm256_and_si256(_mm256_srli_epi16(ql, 4), m4);
                    __m256i hb =
                        _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * v)), m2);
                    __m256i q = _mm256_or_si256(lo, _mm256_slli_epi16(hb, 4));
                    const int8_t *sc = blk->scales + 8 * h + 2 * v;
                    __m256i s16 = sc_pair(sc[0], sc[1]);
                    UNROLL FOR_R
                    {
                        const char *xq =
                            x + (size_t)r * xs + (size_t)b * xbs + Q8K_QS + 128 * h + 32 * v;
                        __m256i xv = _mm256_loadu_si256((const __m256i *)xq);
                        isum[r][c] = sdot_acc(isum[r][c], q, xv, s16);
                    }
                }
            }
        }
        UNROLL FOR_R
        {
            const char *xb = x + (size_t)r * xs + (size_t)b * xbs;
            float xd = ld_f32(xb + Q8K_D);
            __m256i bs = _mm256_loadu_si256((const __m256i *)(xb + Q8K_BSUMS));
            UNROLL FOR_C
            {
                const struct ifl_block_q6_k *blk =
                    (const struct ifl_block_q6_k *)(w + (size_t)c * ws + (size_t)b * wbs);
                __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)blk->scales));
                int32_t osum = hsum_epi32(_mm256_madd_epi16(bs, sc16));
                float d = xd * ld_f16(&blk->d);
                acc[r][c] =
                    _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(isum[r][c]), acc[r][c]);
                macc[r][c] += d * (float)(32 * osum);
            }
        }
    }
    UNROLL FOR_R UNROLL FOR_C y[(size_t)r * ldy + c] = hsum_ps(acc[r][c]) - macc[r][c];
}

DEFINE_GEMM(x86_gemm_q6_k, tile_q6k)

/* ---- IQ4_XS, Q2_K and Q3_K weights, Q8_K activations ---------------- */

/* gemm_iq4_xs of ref.c: per sub-block of 32 the levels (a byte shuffle of
 * the nibbles) meet the activations as signed weights do in tile_q80, the
 * pair sums scaled by ls - 32 into 8 int lanes; acc += (d_x d) * lanes. */
AI void tile_iq4xs(int64_t n, int R, int C, const char *x, size_t xs, const char *w, size_t ws,
                   float *y, size_t ldy)
{
    const size_t wbs = sizeof(struct ifl_block_iq4_xs), xbs = sizeof(struct ifl_block_q8_k);
    const __m256i lv = iq4nl_table();
    __m256 acc[TR][TCMAX];
    UNROLL FOR_R UNROLL FOR_C acc[r][c] = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / IFL_QK_K; b++) {
        __m256i isum[TR][TCMAX];
        UNROLL FOR_R UNROLL FOR_C isum[r][c] = _mm256_setzero_si256();
        UNROLL FOR_C pf_lines(w + (size_t)c * ws + (size_t)b * wbs, 3); /* 136 bytes */
        for (int j = 0; j < 8; j++) {
            UNROLL FOR_C
            {
                const struct ifl_block_iq4_xs *blk =
                    (const struct ifl_block_iq4_xs *)(w + (size_t)c * ws + (size_t)b * wbs);
                __m256i q = _mm256_shuffle_epi8(lv, nibbles_32(blk->qs + 16 * j));
                __m256i u = _mm256_abs_epi8(q);
                __m256i s16 = _mm256_set1_epi16((short)(ifl_iq4xs_scale(blk, j) - 32));
                UNROLL FOR_R
                {
                    const char *xq = x + (size_t)r * xs + (size_t)b * xbs + Q8K_QS + 32 * j;
                    __m256i xv = _mm256_loadu_si256((const __m256i *)xq);
                    isum[r][c] = sdot_acc(isum[r][c], u, _mm256_sign_epi8(xv, q), s16);
                }
            }
        }
        UNROLL FOR_R
        {
            float xd = ld_f32(x + (size_t)r * xs + (size_t)b * xbs + Q8K_D);
            UNROLL FOR_C
            {
                float d = xd * ld_f16(w + (size_t)c * ws + (size_t)b * wbs);
                acc[r][c] =
                    _mm256_fmadd_ps(_mm256_set1_ps(d), _mm256_cvtepi32_ps(isum[r][c]), acc[r][c]);
            }
        }
    }
    UNROLL FOR_R UNROLL FOR_C y[(size_t)r * ldy + c] = hsum_ps(acc[r][c]);
}

DEFINE_GEMM(x86_gemm_iq4_xs, tile_iq4xs)

/* gemm_q2_k / gemm_q3_k of ref.c. A 32-byte run of qs holds, in bits 2k,
 * 2k + 1, the 32 elements 128h + 32k .. + 31 (two sub-blocks of 16, one
 * per 128-bit lane, so a pair of 16-bit scales meets them); Q3_K adds bit
 * 4h + k of the 32 hmask bytes as bit 2 (the stored q + 4, unsigned).
 * Q2_K: acc += (d_x d) * isum lanes, macc += (d_x dmin) * sum m_j bsums_j.
 * Q3_K: acc += (d_x d) * isum lanes, macc += (d_x d) * 4 * sum sc_j bsums_j. */
AI void tile_k23(int q3, int64_t n, int R, int C, const char *x, size_t xs, const char *w,
                 size_t ws, float *y, size_t ldy)
{
    const size_t wbs = q3 ? sizeof(struct ifl_block_q3_k) : sizeof(struct ifl_block_q2_k);
    const size_t xbs = sizeof(struct ifl_block_q8_k);
    const __m256i m2 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    __m256 acc[TR][TCMAX];
    float macc[TR][TCMAX];
    UNROLL FOR_R UNROLL FOR_C
    {
        acc[r][c] = _mm256_setzero_ps();
        macc[r][c] = 0.0f;
    }
    for (int64_t b = 0; b < n / IFL_QK_K; b++) {
        int16_t sc[TCMAX][16];
        __m256i m16[TCMAX];
        float wd[TCMAX], wdm[TCMAX];
        UNROLL FOR_C
        {
            const char *blk = w + (size_t)c * ws + (size_t)b * wbs;
            pf_lines(blk, 2); /* 84 or 110 bytes */
            if (q3) {
                const struct ifl_block_q3_k *q = (const struct ifl_block_q3_k *)blk;
                for (int j = 0; j < 16; j++)
                    sc[c][j] = (int16_t)(ifl_q3k_scale(q->scales, j) - 32);
                m16[c] = _mm256_loadu_si256((const __m256i *)sc[c]);
                wd[c] = ld_f16(&q->d);
                wdm[c] = wd[c];
            } else {
                const struct ifl_block_q2_k *q = (const struct ifl_block_q2_k *)blk;
                __m256i s8 = _mm256_cvtepu8_epi16(_mm_loadu_si128((const __m128i *)q->scales));
                _mm256_storeu_si256((__m256i *)sc[c], _mm256_and_si256(s8, _mm256_set1_epi16(15)));
                m16[c] = _mm256_srli_epi16(s8, 4);
                wd[c] = ld_f16(&q->d);
                wdm[c] = ld_f16(&q->dmin);
            }
        }
        __m256i isum[TR][TCMAX];
        UNROLL FOR_R UNROLL FOR_C isum[r][c] = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            for (int k = 0; k < 4; k++) {
                UNROLL FOR_C
                {
                    const char *blk = w + (size_t)c * ws + (size_t)b * wbs;
                    const char *qs = blk + (q3 ? offsetof(struct ifl_block_q3_k, qs)
                                               : offsetof(struct ifl_block_q2_k, qs));
                    __m256i raw = _mm256_loadu_si256((const __m256i *)(qs + 32 * h));
                    __m256i q =
                        _mm256_and_si256(_mm256_srl_epi16(raw, _mm_cvtsi32_si128(2 * k)), m2);
                    if (q3) {
                        __m256i hm = _mm256_loadu_si256((const __m256i *)blk);
                        __m256i hb = _mm256_and_si256(
                            _mm256_srl_epi16(hm, _mm_cvtsi32_si128(4 * h + k)), one);
                        q = _mm256_or_si256(q, _mm256_slli_epi16(hb, 2));
                    }
                    __m256i s16 = sc_pair(sc[c][8 * h + 2 * k], sc[c][8 * h + 2 * k + 1]);
                    UNROLL FOR_R
                    {
                        const char *xq =
                            x + (size_t)r * xs + (size_t)b * xbs + Q8K_QS + 128 * h + 32 * k;
                        __m256i xv = _mm256_loadu_si256((const __m256i *)xq);
                        isum[r][c] = sdot_acc(isum[r][c], q, xv, s16);
                    }
                }
            }
        }
        UNROLL FOR_R
        {
            const char *xb = x + (size_t)r * xs + (size_t)b * xbs;
            float xd = ld_f32(xb + Q8K_D);
            __m256i bs = _mm256_loadu_si256((const __m256i *)(xb + Q8K_BSUMS));
            UNROLL FOR_C
            {
                int32_t msum = hsum_epi32(_mm256_madd_epi16(bs, m16[c]));
                acc[r][c] = _mm256_fmadd_ps(_mm256_set1_ps(xd * wd[c]),
                                            _mm256_cvtepi32_ps(isum[r][c]), acc[r][c]);
                macc[r][c] += xd * wdm[c] * (float)(q3 ? 4 * msum : msum);
            }
        }
    }
    UNROLL FOR_R UNROLL FOR_C y[(size_t)r * ldy + c] = hsum_ps(acc[r][c]) - macc[r][c];
}

AI void tile_q2_k(TILE_PARAMS)
{
    tile_k23(0, n, R, C, x, xs, w, ws, y, ldy);
}
AI void tile_q3_k(TILE_PARAMS)
{
    tile_k23(1, n, R, C, x, xs, w, ws, y, ldy);
}
DEFINE_GEMM(x86_gemm_q2_k, tile_q2_k)
DEFINE_GEMM(x86_gemm_q3_k, tile_q3_k)
