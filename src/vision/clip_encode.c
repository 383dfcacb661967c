/*
 * The CLIP encoder's pass (clip.h): the ViT and the projector over a batch
 * of preprocessed tiles (clip_prep.c) on the kernels of the text model.
 *
 * One call is one pool job. The threads walk the same list of phases and
 * meet at barriers between them: element-wise work takes a slice of rows,
 * a matmul a contiguous share of output columns (units of 16) over all the
 * batch's rows, attention a share of (image, head) pairs. Every output
 * value is computed by one thread in a fixed order that does not depend on
 * how many images share the batch or how many threads run, so an image's
 * embeddings are the same bits alone or in a batch.
 *
 * Rows: image i's n_pos rows are [i * n_pos, (i + 1) * n_pos), its class
 * token (when the file has one) first, then the patches in raster order.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/pool.h"
#include "kernels/kernels.h"
#include "vision/clip.h"

/* ---- the pass ---- */

/* Query rows one attention pass scores at once: bounds the scratch to
 * ATT_ROWS x n_pos floats a thread, whatever the image size. */
#define ATT_ROWS 64

struct ifl_clip_ctx {
    const struct ifl_clip *c;
    const struct ifl_kernels *kn;
    struct ifl_pool *pool;
    int owns_pool;
    int max_images;
    int32_t max_in;       /* widest matmul input */
    size_t act_row_bytes; /* a row of `act` */
    /* scratch, R = max_images * n_pos rows */
    float *x;      /* [R][n_embd] residual stream */
    float *xn;     /* [R][max_in] matmul input */
    void *act;     /* [R][act_row_bytes] xn converted for the kernels */
    float *q;      /* [R][n_embd] */
    float *k;      /* [R][n_embd] */
    float *v;      /* [R][n_embd] */
    float *att;    /* [R][n_embd] */
    float *hid;    /* [R][max(n_ff, n_mm)] FFN and projector hidden rows */
    float *tmp;    /* [R][n_embd] a sub-layer's output */
    size_t att_ld; /* n_pos rounded up to 16 */
    float *scores; /* [n_threads][ATT_ROWS][att_ld] attention weights */
    float *vt;     /* [n_threads][head_dim][att_ld] a head's keys, transposed */
    float *vh;     /* [n_threads][att_ld][head_dim] a head's values, packed */
    /* [max(n_ff, n_mm)] the u operands of the kernels' gates that give
     * the activations (act_rows): all 1, and all 1 / 1.702 */
    float *ones, *quick_u;
};

struct job {
    struct ifl_clip_ctx *x;
    const float *pixels;
    float *out;
    int n_img;
};

static void *alloc_floats(size_t n)
{
    return aligned_alloc(64, ((n * sizeof(float) + 63) / 64) * 64);
}

void ifl_clip_ctx_free(struct ifl_clip_ctx *x)
{
    if (!x)
        return;
    if (x->owns_pool)
        ifl_pool_free(x->pool);
    free(x->x);
    free(x->xn);
    free(x->act);
    free(x->q);
    free(x->k);
    free(x->v);
    free(x->att);
    free(x->hid);
    free(x->tmp);
    free(x->scores);
    free(x->vt);
    free(x->vh);
    free(x->ones);
    free(x->quick_u);
    free(x);
}

static int32_t max_i32(int32_t a, int32_t b)
{
    return a > b ? a : b;
}

int ifl_clip_ctx_create(struct ifl_clip_ctx **out, const struct ifl_clip *c, int max_images,
                        struct ifl_pool *pool, int n_threads, char *err)
{
    *out = NULL;
    const struct ifl_clip_hparams *hp = &c->hp;
    if (max_images < 1 || (int64_t)max_images * hp->n_pos > (1 << 22))
        return ifl_err(err, IFL_EINVAL, "clip: max_images %d out of range", max_images);
    struct ifl_clip_ctx *x = calloc(1, sizeof *x);
    if (!x)
        return ifl_err(err, IFL_ENOMEM, "clip: out of memory");
    x->c = c;
    x->kn = ifl_kernels_best();
    x->max_images = max_images;
    if (pool) {
        x->pool = pool;
    } else {
        int rc = ifl_pool_create(&x->pool, n_threads);
        if (rc) {
            free(x);
            return ifl_err(err, rc, "clip: cannot start %d threads", n_threads);
        }
        x->owns_pool = 1;
    }
    size_t R = (size_t)max_images * (size_t)hp->n_pos;
    int32_t n_hid = max_i32(hp->n_ff, hp->n_mm);
    x->max_in = max_i32(max_i32(hp->n_embd, n_hid), 3 * hp->patch_size * hp->patch_size);
    x->max_in = max_i32(x->max_in, (int32_t)c->mm0.n_in); /* internvl's shuffled rows */
    /* the widest act format (Q8_K) takes under 2 bytes a value */
    x->act_row_bytes = ((size_t)x->max_in * 2 + 63) / 64 * 64;
    size_t E = (size_t)hp->n_embd;
    x->x = alloc_floats(R * E);
    x->xn = alloc_floats(R * (size_t)x->max_in);
    x->act = aligned_alloc(64, R * x->act_row_bytes);
    x->q = alloc_floats(R * E);
    x->k = alloc_floats(R * E);
    x->v = alloc_floats(R * E);
    x->att = alloc_floats(R * E);
    x->hid = alloc_floats(R * (size_t)n_hid);
    x->tmp = alloc_floats(R * E);
    size_t nth = (size_t)ifl_pool_size(x->pool);
    x->att_ld = ((size_t)hp->n_pos + 15) / 16 * 16;
    x->scores = alloc_floats(nth * ATT_ROWS * x->att_ld);
    x->vt = alloc_floats(nth * (size_t)hp->head_dim * x->att_ld);
    x->vh = alloc_floats(nth * (size_t)hp->head_dim * x->att_ld);
    x->ones = alloc_floats((size_t)n_hid);
    x->quick_u = alloc_floats((size_t)n_hid);
    if (!x->x || !x->xn || !x->act || !x->q || !x->k || !x->v || !x->att || !x->hid || !x->tmp ||
        !x->scores || !x->vt || !x->vh || !x->ones || !x->quick_u) {
        ifl_clip_ctx_free(x);
        return ifl_err(err, IFL_ENOMEM, "clip: out of memory for %d images", max_images);
    }
    for (int32_t i = 0; i < n_hid; i++) {
        x->ones[i] = 1.0f;
        x->quick_u[i] = 1.0f / 1.702f;
    }
    *out = x;
    return 0;
}

/* Four floats at a time (SSE, which every x86-64 has) for the row passes
 * between the matmuls: each element takes the scalar code's very
 * operations (no fused multiply-add), so the bits are the same. */
typedef float v4 __attribute__((vector_size(16)));
typedef double v2d __attribute__((vector_size(16)));

static inline v4 ld4(const float *p)
{
    v4 v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void st4(float *p, v4 v)
{
    memcpy(p, &v, sizeof v);
}

/* LayerNorm of one row: (x - mean) / sqrt(var + eps) * w + b, the moments
 * summed in double (w, b NULL: 1 and 0), in eight running sums (element i
 * into sum i % 8, then added in order), so that eight additions are in
 * flight rather than one chain waiting on each add's latency. */
static void layernorm(float *out, const float *in, const float *w, const float *b, int n, float eps)
{
    /* the eight sums as four pairs in registers (the array's element l is
     * lane l % 2 of pair l / 2): each lane adds what element l added */
    v2d p0 = {0, 0}, p1 = p0, p2 = p0, p3 = p0;
    double p[8], s = 0, ss = 0;
    int i8 = n & ~7;
    for (int i = 0; i < i8; i += 8) {
        p0 += (v2d){in[i], in[i + 1]};
        p1 += (v2d){in[i + 2], in[i + 3]};
        p2 += (v2d){in[i + 4], in[i + 5]};
        p3 += (v2d){in[i + 6], in[i + 7]};
    }
    memcpy(p, &p0, 16);
    memcpy(p + 2, &p1, 16);
    memcpy(p + 4, &p2, 16);
    memcpy(p + 6, &p3, 16);
    for (int i = i8; i < n; i++)
        p[i - i8] += in[i];
    for (int l = 0; l < 8; l++)
        s += p[l];
    double mean = s / n;
    const v2d mv2 = {mean, mean};
    p0 = p1 = p2 = p3 = (v2d){0, 0};
    for (int i = 0; i < i8; i += 8) {
        v2d d0 = (v2d){in[i], in[i + 1]} - mv2, d1 = (v2d){in[i + 2], in[i + 3]} - mv2;
        v2d d2 = (v2d){in[i + 4], in[i + 5]} - mv2, d3 = (v2d){in[i + 6], in[i + 7]} - mv2;
        p0 += d0 * d0;
        p1 += d1 * d1;
        p2 += d2 * d2;
        p3 += d3 * d3;
    }
    memcpy(p, &p0, 16);
    memcpy(p + 2, &p1, 16);
    memcpy(p + 4, &p2, 16);
    memcpy(p + 6, &p3, 16);
    for (int i = i8; i < n; i++) {
        double d = in[i] - mean;
        p[i - i8] += d * d;
    }
    for (int l = 0; l < 8; l++)
        ss += p[l];
    float m = (float)mean, r = (float)(1.0 / sqrt(ss / n + eps));
    int i = 0;
    if (w && b) {
        const v4 mv = {m, m, m, m}, rv = {r, r, r, r};
        for (; i + 4 <= n; i += 4)
            st4(out + i, (ld4(in + i) - mv) * rv * ld4(w + i) + ld4(b + i));
    }
    for (; i < n; i++) {
        float v = (in[i] - m) * r;
        out[i] = (w ? v * w[i] : v) + (b ? b[i] : 0.0f);
    }
}

enum epi { EPI_NONE = -1 };

/* y[i] = (y[i] + b[i]) * m, or y[i] * m for b NULL */
static void bias_mul(float *y, const float *b, float m, int64_t n)
{
    int64_t i = 0;
    const v4 mv = {m, m, m, m};
    if (b) {
        for (; i + 4 <= n; i += 4)
            st4(y + i, (ld4(y + i) + ld4(b + i)) * mv);
        for (; i < n; i++)
            y[i] = (y[i] + b[i]) * m;
    } else {
        for (; i + 4 <= n; i += 4)
            st4(y + i, ld4(y + i) * mv);
        for (; i < n; i++)
            y[i] = y[i] * m;
    }
}

/* y[i] += b[i]: bias_mul's values for m = 1 */
static void bias_add(float *y, const float *b, int64_t n)
{
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        st4(y + i, ld4(y + i) + ld4(b + i));
    for (; i < n; i++)
        y[i] += b[i];
}

/* x[i] += t[i] * s[i], or x[i] += t[i] for s NULL (a residual add) */
static void residual(float *x, const float *t, const float *s, int n)
{
    int i = 0;
    if (s) {
        for (; i + 4 <= n; i += 4)
            st4(x + i, ld4(x + i) + ld4(t + i) * ld4(s + i));
        for (; i < n; i++)
            x[i] += t[i] * s[i];
    } else {
        for (; i + 4 <= n; i += 4)
            st4(x + i, ld4(x + i) + ld4(t + i));
        for (; i < n; i++)
            x[i] += t[i];
    }
}

/* The bias and the activation (clip.h: the FFN's, and GELU's tanh form
 * for the projector) over y[0..n) of a row, on the kernels' gates with a
 * constant u: GELU is geglu with u = 1 (0.5 v (1 + tanh(c)) = v / (1 +
 * e^(-2c))), SiLU swiglu with u = 1, and quick GELU v sigmoid(1.702 v)
 * swiglu of 1.702 v with u = 1 / 1.702 (a few float roundings more than
 * the formula, about 1e-7 of the value). A gate's element depends only on
 * n and its place, and every call's row starts at a multiple of 16
 * columns, so an element's bits do not depend on the thread split. */
static void act_row(const struct ifl_clip_ctx *c, int a, float *y, const float *bias, int64_t n)
{
    if (a == IFL_CLIP_GELU_QUICK) {
        bias_mul(y, bias, 1.702f, n);
        c->kn->swiglu(n, y, c->quick_u);
        return;
    }
    if (bias)
        bias_add(y, bias, n);
    if (a == IFL_CLIP_SILU)
        c->kn->swiglu(n, y, c->ones);
    else if (a != EPI_NONE)
        c->kn->geglu(n, y, c->ones);
}

/* What a matmul does to its output values after the products, in this
 * order: the bias and the activation (act_row; EPI_NONE: none), times mul,
 * then (res not NULL) added into the residual stream res (ldres floats a
 * row) as residual() adds it, scaled by ls (NULL: 1). */
struct epilogue {
    const float *bias;
    int act;
    float mul;
    float *res;
    size_t ldres;
    const float *ls;
};

/* Rows and columns of one gemm call: a block of columns whose weights (a
 * share of COL_BYTES) stay in L2 while every row passes, ROW_CHUNK rows a
 * call, so that the epilogue reads the values just written from L1. */
#define COL_BYTES (384 * 1024)
#define ROW_CHUNK 64
#define RES_AHEAD 8

static inline void prefetch_row(const float *p, int64_t n)
{
    for (int64_t i = 0; i < n; i += 16)
        __builtin_prefetch(p + i, 1, 3);
}

/* y = x W^T then the epilogue e on every value: nr rows of x (ldx floats
 * apart) into y (ldy apart). convert: x must be converted into `act` first
 * (0 when the previous matmul had the same input and weight type). Every
 * thread calls it; a barrier must follow before y (or e->res) is read.
 * The gemm's values do not depend on how its calls cut the rows and the
 * columns (kernels.h), nor the epilogue's on where a call's columns start
 * (multiples of 16), so an output's bits are the same whatever the split. */
static void matmul_epi(struct job *j, int ith, int nth, const struct ifl_mat *w,
                       const struct epilogue *e, const float *x, size_t ldx, int nr, float *y,
                       size_t ldy, int convert)
{
    struct ifl_clip_ctx *c = j->x;
    enum ifl_type at = ifl_type_info(w->type)->act;
    const void *in = x;
    size_t in_stride = ldx * sizeof(float);
    if (at != IFL_TYPE_F32) {
        if (convert) {
            long lo, hi;
            ifl_pool_split(nr, ith, nth, &lo, &hi);
            for (long r = lo; r < hi; r++)
                c->kn->quant[at](x + r * ldx, (char *)c->act + r * c->act_row_bytes, w->n_in);
            ifl_pool_barrier(c->pool);
        }
        in = c->act;
        in_stride = c->act_row_bytes;
    }
    /* columns in units of an x16 group, or of the x16 kernel's widest tile
     * when those split evenly between the threads (1024 columns in units
     * of 48 gave one thread 528 and the other 496, and every thread waits
     * for the slowest at the barrier) */
    int step = w->x16 && c->kn->x16_cols[w->type] > 16 ? c->kn->x16_cols[w->type] : 16;
    if (step > 16 && w->n_out % ((int64_t)step * nth))
        step = 16;
    long units = (long)((w->n_out + step - 1) / step), lo, hi;
    ifl_pool_split(units, ith, nth, &lo, &hi);
    int64_t c0 = lo * step, c1 = hi * step < w->n_out ? hi * step : w->n_out;
    if (c1 <= c0)
        return;
    ifl_gemm_fn gemm = w->x16 ? c->kn->gemm_x16[w->type] : c->kn->gemm[w->type];
    const int epi = e && (e->bias || e->act != EPI_NONE || e->mul != 1.0f || e->res);
    int64_t bw = (int64_t)(COL_BYTES / ((size_t)step * w->row_bytes)) * step;
    if (bw < step)
        bw = step;
    for (int64_t b0 = c0; b0 < c1; b0 += bw) {
        const int64_t b1 = c1 - b0 < bw ? c1 : b0 + bw, n = b1 - b0;
        for (int r0 = 0; r0 < nr; r0 += ROW_CHUNK) {
            const int r1 = nr - r0 < ROW_CHUNK ? nr : r0 + ROW_CHUNK;
            gemm(w->n_in, r1 - r0, (int)n, (const char *)in + (size_t)r0 * in_stride, in_stride,
                 (const char *)w->data + (size_t)b0 * w->row_bytes, w->row_bytes,
                 y + (size_t)r0 * ldy + b0, ldy);
            if (!epi)
                continue;
            /* the residual rows the epilogue adds into are short pieces
             * 4 KB apart, which the hardware does not fetch ahead: each
             * one asked for RES_AHEAD rows before it is reached */
            if (e->res)
                for (int r = r0; r < r1 && r < r0 + RES_AHEAD; r++)
                    prefetch_row(e->res + (size_t)r * e->ldres + b0, n);
            for (int r = r0; r < r1; r++) {
                if (e->res && r + RES_AHEAD < r1)
                    prefetch_row(e->res + (size_t)(r + RES_AHEAD) * e->ldres + b0, n);
                float *yr = y + (size_t)r * ldy + b0;
                act_row(c, e->act, yr, e->bias ? e->bias + b0 : NULL, n);
                if (e->mul != 1.0f)
                    bias_mul(yr, NULL, e->mul, n);
                if (e->res)
                    residual(e->res + (size_t)r * e->ldres + b0, yr, e->ls ? e->ls + b0 : NULL,
                             (int)n);
            }
        }
    }
}

/* matmul_epi with the bias and act alone */
static void matmul(struct job *j, int ith, int nth, const struct ifl_mat *w, const float *bias,
                   int act, const float *x, size_t ldx, int nr, float *y, size_t ldy, int convert)
{
    const struct epilogue e = {bias, act, 1.0f, NULL, 0, NULL};
    matmul_epi(j, ith, nth, w, &e, x, ldx, nr, y, ldy, convert);
}

/* Self-attention over each image's rows, all heads: att = softmax(q k^T /
 * sqrt(head_dim)) v, (image, head) pairs shared out between the threads.
 * q comes scaled by 1 / sqrt(head_dim) (its matmul's epilogue). Both
 * products are gemm_f32_kn (an outer product, 16 columns a vector):
 * scores = q kt with the head's keys transposed into kt (rows of n_pos),
 * then att = e v with the head's values packed into rows of head_dim (in
 * place they lie 4 KB apart, n_embd floats, and thrash L1 and L2 over the
 * 577 keys of a ViT-L image), ATT_ROWS queries at a time,
 * each output row divided by its sum of e afterwards (hd values, not
 * n_pos). Each output's sum runs in the kernel's fixed order, so the
 * result is the same whatever the thread or image count. */
static void attention(struct job *j, int ith, int nth)
{
    struct ifl_clip_ctx *c = j->x;
    const struct ifl_clip_hparams *hp = &c->c->hp;
    const int n_pos = hp->n_pos, hd = hp->head_dim, E = hp->n_embd;
    const size_t ld = c->att_ld;
    float *sc = c->scores + (size_t)ith * ATT_ROWS * ld;
    float *kt = c->vt + (size_t)ith * hd * ld;
    float *vh = c->vh + (size_t)ith * hd * ld;
    long lo, hi;
    ifl_pool_split((long)j->n_img * hp->n_head, ith, nth, &lo, &hi);
    for (long u = lo; u < hi; u++) {
        size_t base = (size_t)(u / hp->n_head) * n_pos, off = (size_t)(u % hp->n_head) * hd;
        for (int t0 = 0; t0 < n_pos; t0 += 16) {
            const int t1 = t0 + 16 < n_pos ? t0 + 16 : n_pos;
            for (int t = t0; t < t1; t++)
                memcpy(vh + (size_t)t * hd, c->v + (base + t) * E + off, sizeof(float) * hd);
            for (int d = 0; d < hd; d++)
                for (int t = t0; t < t1; t++)
                    kt[(size_t)d * ld + t] = c->k[(base + t) * E + off + d];
        }
        for (int q0 = 0; q0 < n_pos; q0 += ATT_ROWS) {
            int nq = n_pos - q0 < ATT_ROWS ? n_pos - q0 : ATT_ROWS;
            c->kn->gemm_f32_kn(hd, nq, n_pos, c->q + (base + q0) * E + off, (size_t)E, kt, ld, sc,
                               ld);
            float inv[ATT_ROWS];
            for (int i = 0; i < nq; i++) {
                float *p = sc + (size_t)i * ld;
                inv[i] = (float)(1.0 / c->kn->softmax_exp(n_pos, p, c->kn->max_f32(n_pos, p)));
            }
            float *o = c->att + (base + q0) * E + off;
            c->kn->gemm_f32_kn(n_pos, nq, hd, sc, ld, vh, (size_t)hd, o, (size_t)E);
            for (int i = 0; i < nq; i++)
                for (int d = 0; d < hd; d++)
                    o[(size_t)i * E + d] *= inv[i];
        }
    }
}

static void encode_job(void *arg, int ith, int nth)
{
    struct job *j = arg;
    struct ifl_clip_ctx *c = j->x;
    const struct ifl_clip *m = c->c;
    const struct ifl_clip_hparams *hp = &m->hp;
    const int E = hp->n_embd, P = hp->patch_size, S = hp->image_size, NP = hp->n_patches;
    const int n_pos = hp->n_pos, cls = m->cls ? 1 : 0;
    const int R = j->n_img * n_pos, RP = j->n_img * NP;
    const size_t ld_in = (size_t)c->max_in;
    const size_t ld_hid = (size_t)max_i32(hp->n_ff, hp->n_mm);
    long lo, hi;

    /* patches as rows of [channel][y][x], image by image */
    ifl_pool_split(RP, ith, nth, &lo, &hi);
    for (long r = lo; r < hi; r++) {
        long img = r / NP;
        int pi = (int)(r % NP), py = pi / hp->n_side, px = pi % hp->n_side;
        const float *im = j->pixels + (size_t)img * 3 * S * S;
        float *dst = c->xn + (size_t)r * ld_in;
        for (int ch = 0; ch < 3; ch++)
            for (int y = 0; y < P; y++)
                memcpy(dst + (ch * P + y) * P,
                       im + ((size_t)ch * S + (size_t)(py * P + y)) * S + (size_t)px * P,
                       sizeof(float) * (size_t)P);
    }
    ifl_pool_barrier(c->pool);
    matmul(j, ith, nth, &m->patch, m->patch_b, EPI_NONE, c->xn, ld_in, RP, c->tmp, (size_t)E, 1);
    ifl_pool_barrier(c->pool);
    /* [class; patches] + positions, then the pre-LN */
    ifl_pool_split(R, ith, nth, &lo, &hi);
    for (long r = lo; r < hi; r++) {
        long img = r / n_pos;
        int t = (int)(r % n_pos);
        const float *src = t < cls ? m->cls : c->tmp + ((size_t)img * NP + (size_t)(t - cls)) * E;
        const float *pos = m->pos + (size_t)t * E;
        float *xr = c->x + (size_t)r * E;
        for (int i = 0; i < E; i++)
            xr[i] = src[i] + pos[i];
        if (m->pre_w)
            layernorm(xr, xr, m->pre_w, m->pre_b, E, hp->eps);
    }
    ifl_pool_barrier(c->pool);

    for (int il = 0; il < hp->n_run; il++) {
        const struct ifl_clip_layer *L = &m->layers[il];
        for (long r = lo; r < hi; r++)
            layernorm(c->xn + r * ld_in, c->x + r * E, L->ln1_w, L->ln1_b, E, hp->eps);
        ifl_pool_barrier(c->pool);
        /* q scaled for the attention's scores (attention()) */
        const struct epilogue eq = {L->bq, EPI_NONE, 1.0f / sqrtf((float)hp->head_dim),
                                    NULL,  0,        NULL};
        matmul_epi(j, ith, nth, &L->wq, &eq, c->xn, ld_in, R, c->q, (size_t)E, 1);
        /* k and v reuse q's converted input when their type is q's; else
         * they convert again, once every thread is done reading it */
        int same = L->wk.type == L->wq.type;
        if (!same)
            ifl_pool_barrier(c->pool);
        matmul(j, ith, nth, &L->wk, L->bk, EPI_NONE, c->xn, ld_in, R, c->k, (size_t)E, !same);
        same = L->wv.type == L->wk.type;
        if (!same)
            ifl_pool_barrier(c->pool);
        matmul(j, ith, nth, &L->wv, L->bv, EPI_NONE, c->xn, ld_in, R, c->v, (size_t)E, !same);
        ifl_pool_barrier(c->pool);
        attention(j, ith, nth);
        ifl_pool_barrier(c->pool);
        /* the residual adds in the matmuls' epilogues: each thread adds
         * its own columns of x */
        const struct epilogue eo = {L->bo, EPI_NONE, 1.0f, c->x, (size_t)E, L->ls1};
        matmul_epi(j, ith, nth, &L->wo, &eo, c->att, (size_t)E, R, c->tmp, (size_t)E, 1);
        ifl_pool_barrier(c->pool);
        for (long r = lo; r < hi; r++)
            layernorm(c->xn + r * ld_in, c->x + (size_t)r * E, L->ln2_w, L->ln2_b, E, hp->eps);
        ifl_pool_barrier(c->pool);
        matmul(j, ith, nth, &L->up, L->b_up, hp->act, c->xn, ld_in, R, c->hid, ld_hid, 1);
        ifl_pool_barrier(c->pool);
        const struct epilogue ed = {L->b_down, EPI_NONE, 1.0f, c->x, (size_t)E, L->ls2};
        matmul_epi(j, ith, nth, &L->down, &ed, c->hid, ld_hid, R, c->tmp, (size_t)E, 1);
        ifl_pool_barrier(c->pool);
    }

    /* the patch rows (not the class token), post-LN'd, into the projector
     * (internvl: into tmp, to be shuffled) */
    const int shuffle = hp->proj == IFL_CLIP_PROJ_INTERNVL;
    float *dst0 = shuffle ? c->tmp : c->xn;
    const size_t ld0 = shuffle ? (size_t)E : ld_in;
    ifl_pool_split(RP, ith, nth, &lo, &hi);
    for (long r = lo; r < hi; r++) {
        long img = r / NP;
        const float *xr = c->x + ((size_t)img * n_pos + (size_t)cls + (size_t)(r % NP)) * E;
        float *dst = dst0 + (size_t)r * ld0;
        if (m->post_w)
            layernorm(dst, xr, m->post_w, m->post_b, E, hp->eps);
        else
            memcpy(dst, xr, sizeof(float) * (size_t)E);
    }
    ifl_pool_barrier(c->pool);
    const int RT = j->n_img * hp->n_tok;
    if (shuffle) {
        /* InternVL's pixel shuffle (llama.cpp's reshape/permute of the
         * patch grid): each merge x merge block of patches becomes one row,
         * the patches' rows side by side, the block's top row first and
         * left to right within a row; the blocks in raster order. Then the
         * projector's LayerNorm, eps 1e-5 (PyTorch's default) whatever the
         * ViT's. */
        const int s = hp->merge, nb = hp->n_side / s, W = E * s * s;
        ifl_pool_split(RT, ith, nth, &lo, &hi);
        for (long r = lo; r < hi; r++) {
            long img = r / hp->n_tok;
            int t = (int)(r % hp->n_tok), bx = t % nb, by = t / nb;
            float *dst = c->xn + (size_t)r * ld_in;
            for (int dy = 0; dy < s; dy++)
                for (int dx = 0; dx < s; dx++) {
                    size_t p = (size_t)(by * s + dy) * hp->n_side + (size_t)(bx * s + dx);
                    memcpy(dst + (size_t)(dy * s + dx) * E, c->tmp + ((size_t)img * NP + p) * E,
                           sizeof(float) * (size_t)E);
                }
            layernorm(dst, dst, m->mmln_w, m->mmln_b, W, 1e-5f);
        }
        ifl_pool_barrier(c->pool);
    }
    matmul(j, ith, nth, &m->mm0, m->mm0_b, IFL_CLIP_GELU, c->xn, ld_in, RT, c->hid, ld_hid, 1);
    ifl_pool_barrier(c->pool);
    matmul(j, ith, nth, &m->mm2, m->mm2_b, EPI_NONE, c->hid, ld_hid, RT, j->out, (size_t)hp->n_out,
           1);
}

int ifl_clip_encode(struct ifl_clip_ctx *x, const float *pixels, int n_img, float *out, char *err)
{
    if (n_img < 1 || n_img > x->max_images)
        return ifl_err(err, IFL_EINVAL, "clip: %d images (this context takes 1..%d)", n_img,
                       x->max_images);
    struct job j = {x, pixels, out, n_img};
    ifl_pool_run(x->pool, encode_job, &j);
    return 0;
}
