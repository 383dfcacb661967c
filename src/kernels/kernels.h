/*
 * Compute kernels: a table of function pointers per instruction set.
 *
 * ifl_kernels_ref() is the scalar ground truth (ref.c). ifl_kernels_best()
 * picks, once, from cpuid, the fastest table this CPU can run (AVX-512 with
 * VNNI and BF16, else AVX-512 with VNNI, else AVX2+FMA+F16C, else scalar). Every entry of a
 * SIMD table must equal its ref counterpart: bit for bit where the
 * arithmetic is exact (conversions, quantisation, integer dot products),
 * within a stated tolerance where float sums are reassociated.
 *
 * Kernels are pure functions of their arguments: no globals, no allocation,
 * no threads. The caller splits work between threads (by output columns).
 *
 * Batch invariance: gemm computes each output y[r][c] by one fixed sequence
 * of operations that depends only on n and the two rows involved, never on
 * nr, nc, or where the output falls in a register tile. So a sequence's
 * logits are bitwise the same whatever else shares its batch.
 */
#ifndef IFL_KERNELS_KERNELS_H
#define IFL_KERNELS_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "kernels/types.h"

/* y[r * ldy + c] = dot(weight row c, activation row r), r < nr, c < nc.
 * x: nr activation rows already in info(t)->act format, x_stride bytes apart.
 * w: nc weight rows of type t, w_stride bytes apart.
 * n: elements per row, a multiple of the block size of t and of its act type. */
typedef void (*ifl_gemm_fn)(int64_t n, int nr, int nc, const void *x, size_t x_stride,
                            const void *w, size_t w_stride, float *y, size_t ldy);
/* Converts n floats to type t (a multiple of its block size). */
typedef void (*ifl_quant_fn)(const float *x, void *y, int64_t n);
/* Converts n elements of type t to floats. */
typedef void (*ifl_dequant_fn)(const void *x, float *y, int64_t n);

/* Weights repacked in groups of 16 rows (the "x16" layout), for the
 * block types Q8_0, Q4_0, Q5_0, Q5_1, IQ4_NL, MXFP4, IQ4_XS, Q2_K, Q3_K,
 * Q4_K, Q5_K and Q6_K, and for F16 and BF16.
 *
 * A group of 16 rows of n elements takes the bytes of those 16 rows, so a
 * repacked matrix keeps its size and group g starts at byte 16 * g * row
 * bytes. A group is its block groups in order; block group b holds block
 * b of rows 0..15, field by field, in this order:
 *   Q8_0  d, qs (+ 128: each byte's sign bit flipped)
 *   Q4_0  d, qs (IQ4_NL likewise)
 *   MXFP4 e, qs
 *   Q5_0  d, qh, qs
 *   Q5_1  d, m, qh, qs
 *   Q4_K  d, dmin, scales, qs
 *   Q5_K  d, dmin, scales, qh, qs
 *   Q6_K  d, scales, ql, qh
 *   IQ4_XS d, scales_h, scales_l, qs
 *   Q2_K  d, dmin, scales, qs
 *   Q3_K  d, scales, qs, hmask
 *   F16   the value (a block of one element): block group k is element
 *         k of the 16 rows, 32 bytes that one conversion makes 16 floats
 *   BF16  the whole row as one field of 4-byte runs: run p holds elements
 *         2p, 2p + 1 of row i at 4i, so vdpbf16ps meets 16 rows' pairs
 *         with one activation pair broadcast (an odd n's last element is a
 *         2-byte field after them)
 * A 2-byte field (d, dmin) is stored as its 16 values, row i at 2i, a
 * 1-byte one (MXFP4's e) likewise, row i at i. A
 * field of 4k bytes is stored as k runs of 64 bytes: run t holds bytes
 * 4t .. 4t + 3 of the field of row i at 4i. So one 64-byte run of quants
 * holds four consecutive bytes of each of the 16 rows: a dot-product
 * instruction meets it (after a mask or shift for packed bits) with the
 * four matching activations broadcast, and sums 16 rows at once, one row
 * per 32-bit lane. Packed scales stay packed; a run of them gives each
 * lane its own row's bytes. One exception: Q6_K's ql and qh runs are
 * interleaved, so that a kernel reading one row meets them in address
 * order: per half of the block, for m = 0..7, ql run 16h + m, ql run
 * 16h + 8 + m, qh run 8h + m (x16_run_off in ref.c). */
/* Repacks rows [16g, 16g + 16) of a matrix of n-element rows of type t
 * (one of the above), row_bytes apart, into one x16 group at dst. */
void ifl_repack_x16(enum ifl_type t, int64_t n, const void *rows, size_t row_bytes, void *dst);

/* The arguments of exp_pass, over x[0..n) whose values are NaN, -inf or at
 * most m (the sampler's m is the row's largest). For each i, v = x[i] - m,
 * divided by t unless t is 1; i is a candidate when v >= -cutoff (so never
 * for NaN or -inf) and e = ifl_kernels_exp(v) >= min_e. A non-candidate
 * has e = 0, and v = 0 when it failed the cutoff (v stays when it failed
 * min_e). Writes e[i] and v[i] when those are not NULL; returns the sum of
 * e, and the sum of e * v and the number of candidates through sum_ev and
 * count when those are not NULL. Sums go in blocks of 16 from i = 0:
 * within a block four float lanes j = 0..3 add up elements 4k + j in order
 * of k from 0.0f, then (lane 0 + lane 1) + (lane 2 + lane 3) is added in
 * double; past the last whole block each element is added in double on
 * its own. */
struct ifl_exp_pass {
    float m, t, cutoff, min_e;
    float *e, *v;
    double *sum_ev;
    int32_t *count;
};

/* One tile of attn_tile_*: cached positions t0 .. t0 + nt - 1 (nt <= 64;
 * the caller aligns t0 to a multiple of 64, so a row meets the same tiles
 * whatever else is computed with it). Query i takes positions
 * [lo[i], hi[i]) of the tile and nothing when lo[i] >= hi[i]; the others
 * are never read for it. For each such query, with q its d values:
 *   s_t = c * scale, where for an F16 cache c is the dot16 of q and the
 *     cached key of position t: 16 lanes from 0.0f, lane e % 16 =
 *     fmaf(k[e], q[e], lane) for e ascending (k[e] the F16 as float), then
 *     lane l += lane l + h for h = 8, 4, 2, 1; c = lane 0. For a Q8_0
 *     cache the query is taken quantised to Q8_0 (q8: quant[IFL_TYPE_Q8_0]
 *     of q, which every table gives with ref's bits for finite values,
 *     int8 within -127..127) and c is an integer dot per block: from c =
 *     0.0f, for the head's blocks b ascending,
 *       c = fmaf((float)isum_b, dk_b * dq_b, c),
 *     isum_b the exact int32 sum of the 32 products of the key's and the
 *     query's int8 values (|isum_b| < 2^24, so exact as a float), dk_b and
 *     dq_b the key's and the query's F16 scales as floats (their product
 *     is exact in float); so one rounding a block, as llama.cpp's CPU
 *     flash attention scores a Q8_0 K cache (Q quantised to Q8_0, the
 *     q8_0 x q8_0 dot). Then with softcap > 0 (gemma2) s_t = softcap *
 *     ifl_kernels_tanh(s_t * (1.0f / softcap));
 *   mt = the largest s_t; when mt > m[i]: a = ifl_kernels_exp(m[i] - mt),
 *     l[i] *= a, every o value *= a, m[i] = mt;
 *   p_t = ifl_kernels_exp(s_t - m[i]); the tile's p in 64 lanes by t (0
 *     for positions not taken), folded (lane l += lane l + h for h = 32,
 *     16, 8, 4, 2, 1), is added to l[i];
 *   for t ascending: o[e] = fmaf(p_t, v_t[e], o[e]) for e < dv (v_t[e]
 *     the F16 as float, or a Q8_0 block's d * q, exact in float).
 * The caller starts m at -inf (or an attention sink's logit, with l = 1),
 * l and o at 0, and divides o by l at the end. */
struct ifl_attn_tile {
    const float *q;       /* [nq][d] queries (F16 cache) */
    const void *q8;       /* [nq][d / 32] the queries in Q8_0 blocks (Q8_0 cache; else NULL) */
    const void *const *k; /* [nt] where the KV head starts in each cached row */
    const void *const *v; /* [nt] likewise for the values */
    const uint8_t *lo;    /* [nq] first position taken, within the tile */
    const uint8_t *hi;    /* [nq] one past the last */
    float *m, *l;         /* [nq] running max and sum */
    float *o;             /* [nq][dv] running weighted values */
    float scale;
    float softcap; /* > 0: the scores' soft cap; 0: none */
    int d, dv, nq, nt;
    /* The next tile's rows of the same KV head (pnt of them; pk NULL for
     * none): the kernel asks for them, spread over its own work, while it
     * works on this tile. They change nothing in the results. */
    const void *const *pk, *const *pv;
    int pnt;
};

struct ifl_kernels {
    const char *name;                 /* "scalar", "avx2", "avx512", "avx512bf16" */
    ifl_gemm_fn gemm[IFL_TYPE_COUNT]; /* by weight type; NULL if unsupported */
    /* gemm over x16 weights (nc a multiple of 16, w at a group's start, ws
     * the unpacked row bytes); equal to gemm on the rows before repacking,
     * bit for bit in ref. x16_pays[t]: this table's x16 kernel beats its
     * plain one, so a loader should repack type t. */
    ifl_gemm_fn gemm_x16[IFL_TYPE_COUNT];
    int x16_pays[IFL_TYPE_COUNT];
    /* x16_cols[t]: gemm_x16 runs fastest on calls whose nc is a multiple of
     * this (its widest tile); 0 means 16 */
    int x16_cols[IFL_TYPE_COUNT];
    /* act_bf16[t]: this table's gemm and gemm_x16 of type t round each
     * activation to BF16 (nearest even, 8 significant bits) before
     * multiplying, so an output may differ from ref's by up to 2^-8 of
     * sum |w_i x_i| beyond the float sums' usual error; batch invariance
     * still holds bit for bit. Set only for BF16 weights in the
     * avx512bf16 table. */
    int act_bf16[IFL_TYPE_COUNT];
    /* act_pre[t] (NULL: none): gemm_x16[t] of this table converts its
     * float activation rows into type t itself (one element to one, no
     * blocks) in every call; act_pre[t] makes that conversion alone, n
     * floats into n values of type t, and gemm_x16_pre[t] is gemm_x16[t]
     * over rows so converted (x_stride bytes apart, n values each), with
     * gemm_x16[t]'s results bit for bit. A caller that multiplies one
     * input by several matrices, or one matrix in several calls (the
     * forward's matmul groups, shared out between threads), converts it
     * once. Set only for BF16 in the avx512bf16 table, whose conversion is
     * vcvtne2ps2bf16's (nearest even; a subnormal input becomes a zero of
     * its sign), which can differ from quant[IFL_TYPE_BF16] (ref's). */
    ifl_quant_fn act_pre[IFL_TYPE_COUNT];
    ifl_gemm_fn gemm_x16_pre[IFL_TYPE_COUNT];
    ifl_quant_fn quant[IFL_TYPE_COUNT];     /* every act type, and every weight type (for tools) */
    ifl_dequant_fn dequant[IFL_TYPE_COUNT]; /* every weight type and act type */

    /* The SwiGLU gate: g[i] = g[i] / (1 + e^-g[i]) * u[i]. SIMD tables use
     * their own e^x (relative error ~2e-7, so within a few ulp of ref's
     * expf); each element's result depends only on n and its own i. */
    void (*swiglu)(int64_t n, float *g, const float *u);
    /* The GeGLU gate (gemma), gelu in its tanh form written as a sigmoid:
     * 0.5 g (1 + tanh(c)) = g / (1 + e^(-2c)), c = sqrt(2/pi) (g + 0.044715
     * g^3); g[i] = that * u[i]. The same e^x as swiglu. */
    void (*geglu)(int64_t n, float *g, const float *u);
    /* Softmax numerators: s[i] = e^(s[i] - mx) for s[i] <= mx, and their
     * sum, added in double. The same e^x as swiglu; the sum's order is the
     * table's own, fixed for each n. */
    double (*softmax_exp)(int64_t n, float *s, float mx);

    /* Attention over an F16 KV cache. */
    float (*dot_f16)(int64_t n, const uint16_t *k, const float *q);    /* sum k[i] * q[i] */
    void (*axpy_f16)(int64_t n, float a, const uint16_t *v, float *y); /* y = fmaf(a, v, y) */
    void (*cvt_f32_f16)(int64_t n, const float *x, uint16_t *y);       /* round to nearest even */
    /* The same, nt cached positions at a time (one KV block) for nq query
     * heads that share a KV head. Cached rows are ks (vs) elements apart;
     * queries and outputs are d elements apart.
     * attn_qk: s[i * lds + t] = scale * dot_f16(d, k + t * ks, q + i * d).
     * attn_pv: for t ascending, axpy_f16(d, p[i * ldp + t], v + t * vs, o + i * d),
     * so o equals the axpy_f16 loop bit for bit. */
    void (*attn_qk_f16)(int d, int nq, const float *q, const uint16_t *k, size_t ks, int nt,
                        float scale, float *s, size_t lds);
    void (*attn_pv_f16)(int d, int nq, const float *p, size_t ldp, const uint16_t *v, size_t vs,
                        int nt, float *o);
    /* The same over a Q8_0 cache, read in place (no dequantised copy): d is
     * a multiple of 32, k and v point at the head's first block, and ks, vs
     * are row strides in bytes. Equal to dequantising each block (d * q)
     * and then: attn_qk a sequential float dot (reassociated in SIMD
     * tables), attn_pv one fused multiply-add per value (bit for bit).
     * Their scores are float dots, not attn_tile_q8_0's integer ones:
     * model/attention.c calls them only for a model the tiled attention
     * does not take (head widths over 256), so a row never meets both. */
    void (*attn_qk_q8_0)(int d, int nq, const float *q, const void *k, size_t ks, int nt,
                         float scale, float *s, size_t lds);
    void (*attn_pv_q8_0)(int d, int nq, const float *p, size_t ldp, const void *v, size_t vs,
                         int nt, float *o);

    /* Tiled attention with an online softmax (model/attention_tiled.c):
     * one tile of nt <= 64 cached positions for nq query heads of one KV
     * group, each query folding the tile into its running max, sum and
     * weighted values. See struct ifl_attn_tile for the arithmetic, which
     * every table does bit for bit alike (ref's exact operations). */
    void (*attn_tile_f16)(const struct ifl_attn_tile *a);
    void (*attn_tile_q8_0)(const struct ifl_attn_tile *a); /* d, dv multiples of 32 */

    /* LoRA's two low-rank products (model/forward_lora.c), over F32.
     * lora_a: t[i * ldt + k] = dot16(n, a + k * n, x + rows[i] * ldx) for
     * i < nr, k < nk, where dot16 keeps 16 lanes, lane l adding
     * fmaf(a[e], x[e], .) for the elements e = l (mod 16) in order from
     * 0.0f, then folds them: lane l += lane l + h for h = 8, 4, 2, 1; the
     * result is lane 0.
     * lora_b: for i < nr, c < nc, with acc = 0.0f and then
     * acc = fmaf(bt[k * ldb + c], t[i * ldt + k], acc) for k = 0 .. nk-1:
     * y[rows[i] * ldy + c] = fmaf(scale[i], acc, y[rows[i] * ldy + c]).
     * Both fix every operation of each output whatever nr and nc are, and
     * every table gives exactly ref's bits. */
    void (*lora_a)(int64_t n, int nk, const float *a, int nr, const int32_t *rows, const float *x,
                   size_t ldx, float *t, size_t ldt);
    void (*lora_b)(int nk, int64_t nc, const float *bt, size_t ldb, int nr, const int32_t *rows,
                   const float *scale, const float *t, size_t ldt, float *y, size_t ldy);
    /* The same over A and B held in F16: each value converted to float
     * (exact), then lora_a's and lora_b's very operations. */
    void (*lora_a_f16)(int64_t n, int nk, const uint16_t *a, int nr, const int32_t *rows,
                       const float *x, size_t ldx, float *t, size_t ldt);
    void (*lora_b_f16)(int nk, int64_t nc, const uint16_t *bt, size_t ldb, int nr,
                       const int32_t *rows, const float *scale, const float *t, size_t ldt,
                       float *y, size_t ldy);
    /* B held in int8 for an adapter in Q8_0 (model/lora_rt.h), t
     * quantised: y += s B t over ng groups of 16 columns from bq, for the
     * nr rows rows[i] of y (y points at the groups' first column). The
     * rank is nkb blocks of 16. A group is its nkb blocks in order, 288
     * bytes each: the 16 columns' F16 scales d[c], then 4 runs of 64
     * bytes, run m holding column c's int8 values for ranks 16 kb + 4m ..
     * 16 kb + 4m + 3 at 4c (the x16 layout's runs). Row i's t is nkb * 16
     * int8 values at tq + i * ldq with scales td[i * nkb + kb]. For each
     * column c and row i, with acc = 0.0f, for kb ascending
     *   acc = fmaf(td[i * nkb + kb] * d[c], (float)isum, acc),
     * isum the exact int32 sum of the block's 16 products; then
     *   y[rows[i] * ldy + c] = fmaf(scale[i], acc, y[rows[i] * ldy + c]).
     * Every table gives ref's bits. */
    void (*lora_b_q8)(int nkb, int64_t ng, const void *bq, int nr, const int32_t *rows,
                      const float *scale, const int8_t *tq, size_t ldq, const float *td, float *y,
                      size_t ldy);

    /* A float product whose second operand is in rows of k (not one row
     * per output, as gemm takes weights): y[r * ldy + c] = sum over k < n
     * of x[r * ldx + k] * b[k * ldb + c], r < nr, c < nc; strides in
     * floats. The vision encoder's attention takes q K^T (K transposed per
     * head) and p V (V as it is) so. Each output is one chain, acc =
     * fmaf(x[r][k], b[k][c], acc) for k ascending from 0.0f, so every
     * table gives ref's bits, whatever nr and nc. */
    void (*gemm_f32_kn)(int64_t n, int nr, int nc, const float *x, size_t ldx, const float *b,
                        size_t ldb, float *y, size_t ldy);

    /* The sampler's passes over a row of logits (runtime/sampler.c), which
     * run once per generated token over the whole vocabulary. Every table
     * gives exactly ref's results, bits of the sums included, so what a
     * request samples does not depend on the CPU.
     * max_f32: the largest of x[0..n), NaN skipped; -inf when there is none.
     * find_f32: the first i with x[i] == v, or n.
     * exp_pass: see struct ifl_exp_pass. */
    float (*max_f32)(int64_t n, const float *x);
    int64_t (*find_f32)(int64_t n, const float *x, float v);
    double (*exp_pass)(int64_t n, const float *x, const struct ifl_exp_pass *a);
};

/* e^x for x in [-87, 0] (smaller x gives e^-87), relative error under
 * 1e-7: 2^n * e^r with n = round(x / ln 2) and e^r by a degree-7
 * polynomial (Cephes' expf coefficients), each operation rounded on its
 * own (no fused multiply-add). The SIMD exp_pass lanes do the very same
 * operations. */
float ifl_kernels_exp(float x);
/* tanh(x) as copysignf((1 - e) / (1 + e), x) with e = ifl_kernels_exp(-2
 * |x|), each operation rounded on its own (absolute error a few times
 * 1e-8; the SIMD attn_tile kernels do the same operations). */
float ifl_kernels_tanh(float x);

const struct ifl_kernels *ifl_kernels_ref(void);
const struct ifl_kernels *ifl_kernels_best(void);
/* A table by name ("scalar", "avx2", "avx512", "avx512bf16"), or NULL when this CPU or
 * build cannot run it. Tests use it to check each table against ref. */
const struct ifl_kernels *ifl_kernels_by_name(const char *name);

#endif
