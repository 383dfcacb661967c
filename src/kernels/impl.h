/*
 * Internal to src/kernels: how dispatch.c assembles the tables. Each ISA
 * file fills the entries it implements into a table that starts as a copy
 * of the scalar one, so an entry an ISA lacks falls back to its _ref.
 */
#ifndef IFL_KERNELS_IMPL_H
#define IFL_KERNELS_IMPL_H

#include "kernels/kernels.h"

void ifl_kernels_fill_ref(struct ifl_kernels *k);
/* The scalar attention, activation, sampler and LoRA entries (ref_ops.c),
 * called by ifl_kernels_fill_ref. */
void ifl_kernels_fill_ref_ops(struct ifl_kernels *k);
/* The tiled attention's reference (ref_attn.c), called by
 * ifl_kernels_fill_ref_ops, and its 512- and 256-bit versions
 * (x86_avx512_attn_tile.c, x86_avx2_attn_tile.c) over a filled table. */
void ifl_kernels_fill_ref_attn(struct ifl_kernels *k);
void ifl_kernels_fill_avx512_attn_tile(struct ifl_kernels *k);
void ifl_kernels_fill_avx2_attn_tile(struct ifl_kernels *k);
/* Asks for rows [t0, t1) of an attn_tile call's next tile (struct
 * ifl_attn_tile's pk, pv: kb and vb bytes of the head each) into L1. The
 * SIMD kernels ask a few rows at a time, spread over their work on the
 * tile, so the rows arrive while it is worked on: the caller asking for
 * the whole next tile at once before each call, a lone decode at depth
 * 2048 read its cache at a third of the speed of a plain read (the
 * requests queued behind each other). */
static inline void ifl_attn_tile_ask(const struct ifl_attn_tile *a, int t0, int t1, size_t kb,
                                     size_t vb)
{
    if (!a->pk)
        return;
    if (t1 > a->pnt)
        t1 = a->pnt;
    for (int t = t0; t < t1; t++) {
        const char *k = (const char *)a->pk[t], *v = (const char *)a->pv[t];
        for (const char *x = (const char *)((uintptr_t)k & ~(uintptr_t)63); x < k + kb; x += 64)
            __builtin_prefetch(x, 0, 3);
        for (const char *x = (const char *)((uintptr_t)v & ~(uintptr_t)63); x < v + vb; x += 64)
            __builtin_prefetch(x, 0, 3);
    }
}
void ifl_kernels_fill_avx2(struct ifl_kernels *k);
void ifl_kernels_fill_avx512(struct ifl_kernels *k);
/* BF16 weights by vdpbf16ps (x86_avx512_bf16.c), over a filled avx512
 * table: makes it the avx512bf16 table. */
void ifl_kernels_fill_avx512bf16(struct ifl_kernels *k);
/* The 256-bit gemm kernels over x16 groups (x86_avx2_gemm.c), over a
 * filled avx2 table. */
void ifl_kernels_fill_avx2_gemm(struct ifl_kernels *k);
/* Likewise for Q5_0, Q5_1 and IQ4_NL (x86_avx2_x16q.c), and for IQ4_XS,
 * Q2_K and Q3_K (x86_avx2_x16k.c). */
void ifl_kernels_fill_avx2_x16q(struct ifl_kernels *k);
void ifl_kernels_fill_avx2_x16k(struct ifl_kernels *k);
/* The 512-bit gemm kernels over weights in rows (x86_avx512_gemm.c), over
 * a filled avx512 table. */
void ifl_kernels_fill_avx512_gemm(struct ifl_kernels *k);
/* The 512-bit gemm kernels over x16 groups (x86_avx512_x16.c), likewise. */
void ifl_kernels_fill_avx512_x16(struct ifl_kernels *k);
/* gemm_f32_kn in 256 and 512 bits (x86_avx2_kn.c, x86_avx512_kn.c),
 * over a filled avx2 / avx512 table. */
void ifl_kernels_fill_avx2_kn(struct ifl_kernels *k);
void ifl_kernels_fill_avx512_kn(struct ifl_kernels *k);
/* F16 attention kernels (x86_avx512_attn.c), likewise. */
void ifl_kernels_fill_avx512_attn(struct ifl_kernels *k);
/* The sampler's row passes (x86_avx512_rows.c), likewise. */
void ifl_kernels_fill_avx512_rows(struct ifl_kernels *k);
/* LoRA's products (x86_avx2_lora.c, x86_avx512_lora.c), over a filled
 * avx2 or avx512 table. */
void ifl_kernels_fill_avx2_lora(struct ifl_kernels *k);
void ifl_kernels_fill_avx512_lora(struct ifl_kernels *k);

/* Where a Q6_K x16 block group (kernels.h) keeps ql run 16h + 8hi + m and
 * qh run 8h + m (h: the block's half, m < 8): after d (32 bytes) and the
 * scales (4 runs of 64), each half's triples (ql m, ql 8 + m, qh m) in
 * turn, so one row's kernel reads the group in address order. The
 * repacker (ref.c) and the AVX-512 tiles both place runs by these. */
#define IFL_X16_Q6K_QL(h, hi, m) (32 + 4 * 64 + 64 * (24 * (h) + 3 * (m) + (hi)))
#define IFL_X16_Q6K_QH(h, m) (32 + 4 * 64 + 64 * (24 * (h) + 3 * (m) + 2))

/* ifl_kernels_exp's constants (Cephes' expf), shared by every table. */
#define IFL_EXP_LOG2E 1.44269504088896341f
#define IFL_EXP_ROUND 12582912.0f   /* 1.5 * 2^23: adding it rounds to an integer */
#define IFL_EXP_LN2_HI 0.693359375f /* ln 2 split so that n * LN2_HI is exact */
#define IFL_EXP_LN2_LO (-2.12194440e-4f)
#define IFL_EXP_P0 1.9875691500e-4f
#define IFL_EXP_P1 1.3981999507e-3f
#define IFL_EXP_P2 8.3334519073e-3f
#define IFL_EXP_P3 4.1665795894e-2f
#define IFL_EXP_P4 1.6666665459e-1f
#define IFL_EXP_P5 5.0000001201e-1f

/* One element of exp_pass (kernels.h): returns its e, 0 unless the element
 * is a candidate, and stores its v in *v (0 then too). Ref takes every
 * element through it, the vector tables their tails. */
static inline float ifl_exp_one(const struct ifl_exp_pass *a, float x, float *v)
{
    float vv = a->t != 1.0f ? (x - a->m) / a->t : x - a->m;
    float e = 0;
    if (vv >= -a->cutoff) {
        e = ifl_kernels_exp(vv);
        if (!(e >= a->min_e))
            e = 0;
    } else {
        vv = 0;
    }
    *v = vv;
    return e;
}

/* The end of every table's exp_pass: elements [i, n) one at a time onto
 * the sums so far, then the sums the caller asked for stored; returns the
 * sum of e. */
static inline double ifl_exp_finish(int64_t i, int64_t n, const float *x,
                                    const struct ifl_exp_pass *a, int want_e, int want_v,
                                    int want_sev, int want_count, double sum, double sev,
                                    int32_t cnt)
{
    for (; i < n; i++) {
        float vv, ee = ifl_exp_one(a, x[i], &vv);
        if (want_e)
            a->e[i] = ee;
        if (want_v)
            a->v[i] = vv;
        sum += ee;
        sev += (double)(ee * vv);
        cnt += ee > 0;
    }
    if (want_sev)
        *a->sum_ev = sev;
    if (want_count)
        *a->count = cnt;
    return sum;
}

#endif
