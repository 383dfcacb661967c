/*
 * LoRA adapters in the forward pass: for each adapted matrix W of a row
 * that uses adapters i (user scale u_i), y = W x + sum_i s_i B_i (A_i x),
 * s_i = ifl_lora_rt_scale(matrix, u_i). The base product W x is the
 * ordinary matmul over the quantised, repacked weights, untouched; the
 * low-rank products are added after it.
 *
 * Segmented, as punica's SGMV: the step's rows are grouped by adapter
 * (ifl_fwd_lora_segments, before the step), and each adapter's A and B
 * are read once for all the rows that use it. Per matrix group (q, k, v;
 * o; gate, up; down; the output):
 *   phase A  t = A x for every (matrix, adapter, row), the units being the
 *            rank rows of every A, shared out between the threads by
 *            count; it reads only x, so it runs before the base matmul,
 *            after the barrier that made x whole;
 *   phase B  after the base matmul's barrier: y += s B t, the units being
 *            32-column slices of every y, a thread's share contiguous;
 *            for a slice, the adapters in the batch's order.
 * Then a barrier, as the next phase reads y. A step without adapters runs
 * none of this.
 *
 * Batch invariance: every t element is one lora_a dot product and every
 * y element gets, per adapter of its row in the batch's order, one
 * lora_b sum (kernels.h fixes both, operation for operation), whatever
 * other rows share the step or which thread computes it. A row's
 * adapters are added in the order the batch lists the step's adapters; the
 * executor lists them by id, so a row's order is its own.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/fp16.h"
#include "kernels/blocks.h"
#include "kernels/kernels.h"
#include "model/forward_internal.h"
#include "model/lora_rt.h"

/* ---- the applied form ---- */

static void rt_mat_free(struct ifl_lora_rt_mat *m)
{
    free(m->a);
    free(m->bt);
    free(m->a16);
    free(m->bt16);
    free(m->aq);
    free(m->bq);
    m->a = m->bt = NULL;
    m->a16 = m->bt16 = NULL;
    m->aq = m->bq = NULL;
}

void ifl_lora_rt_free(struct ifl_lora_rt *r)
{
    if (!r)
        return;
    if (r->layers)
        for (int32_t i = 0; i < r->n_layer * IFL_LORA_N_TARGETS; i++)
            rt_mat_free(&r->layers[i]);
    free(r->layers);
    rt_mat_free(&r->tok_embd);
    rt_mat_free(&r->output);
    free(r);
}

static int all_finite(const float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return 0;
    return 1;
}

/* bt = B transposed: B is [n_out][rank] (ggml's [rank, n_out]), bt
 * [rank][n_out] */
static void transpose_b(float *bt, const float *b, size_t rank, size_t n_out)
{
    for (size_t c = 0; c < n_out; c++)
        for (size_t k = 0; k < rank; k++)
            bt[k * n_out + c] = b[c * rank + k];
}

/* rows rows of n values of x (a multiple of 32) as Q8_0 rows, in x16
 * groups when x16 (rows a multiple of 16), at *out, or IFL_EINVAL when a
 * block's scale is beyond F16 (what names the part for the message). */
static int to_q8_rows(void **out, const float *x, size_t rows, size_t n, int x16, const char *name,
                      const char *what, char *err)
{
    const size_t nb = n / 32, row = nb * sizeof(struct ifl_block_q8_0);
    struct ifl_block_q8_0 *q = malloc(rows * row);
    void *p = x16 ? aligned_alloc(64, (rows * row + 63) / 64 * 64) : NULL;
    if (!q || (x16 && !p)) {
        free(q);
        free(p);
        return ifl_err(err, IFL_ENOMEM, "lora: %s: out of memory", name);
    }
    ifl_kernels_ref()->quant[IFL_TYPE_Q8_0](x, q, (int64_t)(rows * n));
    for (size_t i = 0; i < rows * nb; i++)
        if (!isfinite(ifl_f16_to_f32(q[i].d))) {
            free(q);
            free(p);
            return ifl_err(err, IFL_EINVAL, "lora: %s: a value of %s is beyond Q8_0's range", name,
                           what);
        }
    if (x16) {
        for (size_t g = 0; g < rows / 16; g++)
            ifl_repack_x16(IFL_TYPE_Q8_0, (int64_t)n, (const char *)q + g * 16 * row, row,
                           (char *)p + g * 16 * row);
        free(q);
        *out = p;
    } else {
        *out = q;
    }
    return 0;
}

/* 16 values as int8 with one scale (returned): the largest magnitude to
 * 127, each rounded to nearest. The blocks of an int8 B and of t
 * (kernels.h lora_b_q8). */
static float quant16(const float *v, int8_t *q)
{
    float amax = 0.0f;
    for (int k = 0; k < 16; k++)
        amax = fabsf(v[k]) > amax ? fabsf(v[k]) : amax;
    const float d = amax / 127.0f, id = d > 0.0f ? 1.0f / d : 0.0f;
    for (int k = 0; k < 16; k++)
        q[k] = (int8_t)lrintf(v[k] * id);
    return d;
}

/* B transposed in F16 into dst->bt16 (B is [n_out][rank]), or IFL_EINVAL
 * when a value does not fit. */
static int bt_to_f16(struct ifl_lora_rt_mat *dst, const float *b, size_t rank, size_t n_out,
                     const char *name, char *err)
{
    dst->bt16 = malloc(sizeof(uint16_t) * rank * n_out);
    if (!dst->bt16)
        return ifl_err(err, IFL_ENOMEM, "lora: %s: out of memory", name);
    for (size_t c = 0; c < n_out; c++)
        for (size_t k = 0; k < rank; k++)
            dst->bt16[k * n_out + c] = ifl_f32_to_f16(b[c * rank + k]);
    for (size_t i = 0; i < rank * n_out; i++)
        if (!isfinite(ifl_f16_to_f32(dst->bt16[i])))
            return ifl_err(err, IFL_EINVAL, "lora: %s: a value of B does not fit F16", name);
    return 0;
}

/* The Q8_0 form of an adapted matrix (lora_rt.h): A in Q8_0 rows, B in
 * kernels.h lora_b_q8's int8 groups, or in F16 when its rank or n_out is
 * not a multiple of 16. */
static int rt_mat_q8(struct ifl_lora_rt *r, struct ifl_lora_rt_mat *dst,
                     const struct ifl_lora_mat *src, const char *name, char *err)
{
    const struct ifl_kernels *kn = ifl_kernels_best();
    const int x16 = kn->x16_pays[IFL_TYPE_Q8_0] && kn->gemm_x16[IFL_TYPE_Q8_0];
    const size_t rank = (size_t)src->rank, n_in = (size_t)dst->n_in, n_out = (size_t)dst->n_out;
    dst->a_x16 = x16 && src->rank % 16 == 0;
    dst->a_row = n_in / 32 * sizeof(struct ifl_block_q8_0);
    int rc = to_q8_rows(&dst->aq, src->a, rank, n_in, dst->a_x16, name, "A", err);
    if (rc)
        return rc;
    r->bytes += rank * dst->a_row;
    if (src->rank % 16 || n_out % 16) {
        if ((rc = bt_to_f16(dst, src->b, rank, n_out, name, err)))
            return rc;
        r->bytes += sizeof(uint16_t) * rank * n_out;
        return 0;
    }
    /* kernels.h lora_b_q8's groups: 16 columns, rank / 16 blocks of 288 bytes */
    const size_t nkb = rank / 16, gb = nkb * 288;
    uint8_t *q = aligned_alloc(64, (n_out / 16 * gb + 63) / 64 * 64);
    if (!q)
        return ifl_err(err, IFL_ENOMEM, "lora: %s: out of memory", name);
    dst->bq = q;
    for (size_t c = 0; c < n_out; c++)
        for (size_t kb = 0; kb < nkb; kb++) {
            uint8_t *blk = q + c / 16 * gb + kb * 288;
            int8_t v[16];
            const uint16_t d16 = ifl_f32_to_f16(quant16(src->b + c * rank + kb * 16, v));
            if (!isfinite(ifl_f16_to_f32(d16)))
                return ifl_err(err, IFL_EINVAL, "lora: %s: a value of B is beyond Q8_0's range",
                               name);
            memcpy(blk + 2 * (c % 16), &d16, sizeof d16);
            for (int k = 0; k < 16; k++)
                blk[32 + (k / 4) * 64 + (c % 16) * 4 + k % 4] = (uint8_t)v[k];
        }
    r->bytes += n_out / 16 * gb;
    return 0;
}

/* Copies src into dst, checked against the base matrix n_in -> n_out,
 * held as hold says (enum ifl_lora_hold). embd: the token embedding,
 * whose a is [n_in][rank] and is kept so (and in F32). */
static int rt_mat_make(struct ifl_lora_rt *r, struct ifl_lora_rt_mat *dst,
                       const struct ifl_lora_mat *src, int64_t n_in, int64_t n_out, int embd,
                       int hold, const char *name, char *err)
{
    memset(dst, 0, sizeof(*dst));
    if (src->rank == 0)
        return 0;
    if (src->rank < 0 || src->rank > 4096 || !src->a || !src->b)
        return ifl_err(err, IFL_EINVAL, "lora: %s: rank %d (1..4096, with A and B)", name,
                       src->rank);
    if (src->n_in != n_in || src->n_out != n_out)
        return ifl_err(
            err, IFL_EINVAL, "lora: %s: adapts %lld -> %lld, the base matrix is %lld -> %lld", name,
            (long long)src->n_in, (long long)src->n_out, (long long)n_in, (long long)n_out);
    if (!isfinite(src->alpha))
        return ifl_err(err, IFL_EINVAL, "lora: %s: alpha is not finite", name);
    size_t rank = (size_t)src->rank, na = rank * (size_t)n_in, nb = rank * (size_t)n_out;
    if (!all_finite(src->a, na) || !all_finite(src->b, nb))
        return ifl_err(err, IFL_EINVAL, "lora: %s: a value is not finite", name);
    dst->rank = src->rank;
    dst->n_in = n_in;
    dst->n_out = n_out;
    dst->alpha = src->alpha;
    if (hold == IFL_LORA_HOLD_Q8_0 && !embd && n_in % 32 == 0) {
        int rc = rt_mat_q8(r, dst, src, name, err);
        if (rc)
            return rc;
    } else if (hold != IFL_LORA_HOLD_F32 && !embd) {
        dst->a16 = malloc(sizeof(uint16_t) * na);
        if (!dst->a16)
            return ifl_err(err, IFL_ENOMEM, "lora: %s: out of memory", name);
        for (size_t i = 0; i < na; i++)
            dst->a16[i] = ifl_f32_to_f16(src->a[i]);
        for (size_t i = 0; i < na; i++)
            if (!isfinite(ifl_f16_to_f32(dst->a16[i])))
                return ifl_err(err, IFL_EINVAL, "lora: %s: a value of A does not fit F16", name);
        int rc = bt_to_f16(dst, src->b, rank, (size_t)n_out, name, err);
        if (rc)
            return rc;
        r->bytes += sizeof(uint16_t) * (na + nb);
    } else {
        dst->a = malloc(sizeof(float) * na);
        dst->bt = malloc(sizeof(float) * nb);
        if (!dst->a || !dst->bt)
            return ifl_err(err, IFL_ENOMEM, "lora: %s: out of memory", name);
        /* the embedding's a is [n_vocab][rank] in both forms */
        memcpy(dst->a, src->a, sizeof(float) * na);
        transpose_b(dst->bt, src->b, rank, (size_t)n_out);
        r->bytes += sizeof(float) * (na + nb);
    }
    r->max_rank = dst->rank > r->max_rank ? dst->rank : r->max_rank;
    r->n_adapted++;
    r->n_q8 += dst->aq != NULL;
    return 0;
}

static const char *const target_names[IFL_LORA_N_TARGETS] = {
    "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};

static const struct ifl_mat *base_mat(const struct ifl_model *m, int il, int t)
{
    const struct ifl_layer_weights *w = &m->layers[il];
    const struct ifl_mat *mats[IFL_LORA_N_TARGETS] = {&w->wq,     &w->wk,   &w->wv,    &w->wo,
                                                      &w->w_gate, &w->w_up, &w->w_down};
    return mats[t];
}

int ifl_lora_rt_create(struct ifl_lora_rt **out, const struct ifl_lora *l,
                       const struct ifl_model *base, int hold, char *err)
{
    *out = NULL;
    if (hold < IFL_LORA_HOLD_F32 || hold > IFL_LORA_HOLD_Q8_0)
        return ifl_err(err, IFL_EINVAL, "lora: hold %d (0 F32, 1 F16, 2 Q8_0)", hold);
    const struct ifl_hparams *hp = &base->hp;
    if (l->n_layer != hp->n_layer || (l->n_layer > 0 && !l->layers))
        return ifl_err(err, IFL_EINVAL, "lora: the adapter has %d layers, the model %d", l->n_layer,
                       hp->n_layer);
    struct ifl_lora_rt *r = calloc(1, sizeof(*r));
    if (!r)
        return ifl_err(err, IFL_ENOMEM, "lora: out of memory");
    r->base = base;
    r->n_layer = l->n_layer;
    r->layers = calloc((size_t)l->n_layer * IFL_LORA_N_TARGETS + 1, sizeof(*r->layers));
    int rc = r->layers ? 0 : ifl_err(err, IFL_ENOMEM, "lora: out of memory");
    for (int il = 0; il < l->n_layer && !rc; il++)
        for (int t = 0; t < IFL_LORA_N_TARGETS && !rc; t++) {
            char name[64];
            snprintf(name, sizeof name, "blk.%d.%s.weight", il, target_names[t]);
            const struct ifl_mat *bm = base_mat(base, il, t);
            rc = rt_mat_make(r, &r->layers[(size_t)il * IFL_LORA_N_TARGETS + (size_t)t],
                             ifl_lora_layer_mat(l, il, (enum ifl_lora_target)t), bm->n_in,
                             bm->n_out, 0, hold, name, err);
        }
    if (!rc)
        rc = rt_mat_make(r, &r->tok_embd, &l->tok_embd, hp->n_vocab, hp->n_embd, 1, 0,
                         "token_embd.weight", err);
    if (!rc)
        rc = rt_mat_make(r, &r->output, &l->output, base->output.n_in, base->output.n_out, 0, hold,
                         "output.weight", err);
    if (rc) {
        ifl_lora_rt_free(r);
        return rc;
    }
    r->bytes += sizeof(*r) + sizeof(*r->layers) * (size_t)l->n_layer * IFL_LORA_N_TARGETS;
    *out = r;
    return 0;
}

/* ---- the step ---- */

static const struct ifl_lora_rt_mat *lmat(const struct ifl_lora_rt *l, int il, int t)
{
    return il < 0 ? &l->output : &l->layers[(size_t)il * IFL_LORA_N_TARGETS + (size_t)t];
}

/* Q8_0 adapters: the rows of x one A x call takes */
#define Q8_ROWS 32

/* t's row stride for matrix lm */
static size_t t_ld(const struct ifl_lora_rt_mat *lm)
{
    return (size_t)lm->rank;
}

/* Bytes of one Q8_0 row of n values. */
static size_t q8_row(int64_t n)
{
    return (size_t)n / 32 * sizeof(struct ifl_block_q8_0);
}

/* A thread's Q8_0 scratch: Q8_ROWS gathered inputs (act_row_bytes each),
 * then, for every row, t quantised (k int8 values) and its k / 16 scales. */
static size_t q8_stride(const struct ifl_fwd *f, int32_t k)
{
    const size_t R = (size_t)f->max_rows;
    size_t b = Q8_ROWS * f->act_row_bytes + (R * (size_t)k + 63) / 64 * 64 +
               sizeof(float) * R * (size_t)(k / 16);
    return (b + 63) / 64 * 64;
}

int ifl_fwd_lora_segments(struct ifl_fwd *f, const struct ifl_batch *b, int32_t n_out, char *err)
{
    const int32_t nl = b->n_lora, R = f->max_rows;
    if (nl > f->lora_cap) {
        /* the only allocations of a step: the first with more adapters
         * (or, below, larger ones) than any before */
        int32_t cap = nl < 8 ? 8 : nl;
        int32_t *n = calloc((size_t)cap * 2, sizeof(int32_t));
        int32_t *rows = malloc(sizeof(int32_t) * (size_t)cap * 2 * (size_t)R);
        float *user = malloc(sizeof(float) * (size_t)cap * 2 * (size_t)R);
        if (!n || !rows || !user) {
            free(n);
            free(rows);
            free(user);
            return ifl_err(err, IFL_ENOMEM, "forward: out of memory for %d adapters", nl);
        }
        free(f->lora_n);
        free(f->lora_rows);
        free(f->lora_user);
        f->lora_n = n;
        f->lora_rows = rows;
        f->lora_user = user;
        f->lora_cap = cap;
    }
    /* list s (0: the batch's rows, 1: the logits rows) of adapter i */
    const size_t cap = (size_t)f->lora_cap;
    size_t need = 0;
    int32_t k_max = 0; /* the largest Q8_0 rank (to 16), 0 when no adapter is in Q8_0 */
    for (int32_t i = 0; i < nl; i++) {
        int32_t *rows = f->lora_rows + (size_t)i * (size_t)R, n = 0;
        float *user = f->lora_user + (size_t)i * (size_t)R;
        for (int32_t r = 0; r < b->n_rows; r++) {
            float u = b->lora_scale[(size_t)r * (size_t)nl + (size_t)i];
            if (u != 0.0f) {
                rows[n] = r;
                user[n++] = u;
            }
        }
        f->lora_n[i] = n;
        int32_t *orows = f->lora_rows + (cap + (size_t)i) * (size_t)R, on = 0;
        float *ouser = f->lora_user + (cap + (size_t)i) * (size_t)R;
        for (int32_t o = 0; o < n_out; o++) {
            float u = b->lora_scale[(size_t)f->out_rows[o] * (size_t)nl + (size_t)i];
            if (u != 0.0f) {
                orows[on] = o;
                ouser[on++] = u;
            }
        }
        f->lora_n[cap + (size_t)i] = on;
        need += (size_t)n * (size_t)b->lora[i]->max_rank;
        if (b->lora[i]->n_q8) {
            const int32_t k = (b->lora[i]->max_rank + 15) / 16 * 16;
            k_max = k > k_max ? k : k_max;
        }
    }
    need *= 3; /* q, k and v share a phase */
    if (need > f->lora_t_cap) {
        float *t = malloc(sizeof(float) * need);
        if (!t)
            return ifl_err(err, IFL_ENOMEM, "forward: out of memory for adapters' products");
        free(f->lora_t);
        f->lora_t = t;
        f->lora_t_cap = need;
    }
    if (k_max && q8_stride(f, k_max) > f->lora_q_stride) {
        const size_t st = q8_stride(f, k_max);
        char *q = aligned_alloc(64, st * (size_t)ifl_pool_size(f->pool));
        if (!q)
            return ifl_err(err, IFL_ENOMEM, "forward: out of memory for adapters' products");
        free(f->lora_q);
        f->lora_q = q;
        f->lora_q_stride = st;
    }
    return 0;
}

/* Adapter i's rows in list s (0: batch rows, 1: logits rows). */
static int32_t seg_n(const struct ifl_fwd *f, int s, int32_t i)
{
    return f->lora_n[(size_t)s * (size_t)f->lora_cap + (size_t)i];
}

static const int32_t *seg_rows(const struct ifl_fwd *f, int s, int32_t i)
{
    return f->lora_rows + ((size_t)s * (size_t)f->lora_cap + (size_t)i) * (size_t)f->max_rows;
}

static const float *seg_user(const struct ifl_fwd *f, int s, int32_t i)
{
    return f->lora_user + ((size_t)s * (size_t)f->lora_cap + (size_t)i) * (size_t)f->max_rows;
}

/* Where matrix m's products for adapter i start in lora_t: the group's
 * (matrix, adapter) pairs in that order, matrix-major, each n rows of
 * t_ld floats. */
static size_t t_off(const struct ifl_fwd *f, const struct ifl_batch *b, int s, int il,
                    const int *tg, int m, int32_t i)
{
    size_t off = 0;
    for (int mm = 0; mm <= m; mm++)
        for (int32_t ii = 0; ii < b->n_lora && (mm < m || ii < i); ii++) {
            const struct ifl_lora_rt_mat *lm = lmat(b->lora[ii], il, tg[mm]);
            if (seg_n(f, s, ii) && lm->rank)
                off += (size_t)seg_n(f, s, ii) * t_ld(lm);
        }
    return off;
}

/* A unit of lora_a's work on lm: a rank row of a float A, 16 of a Q8_0 one. */
static int64_t a_units(const struct ifl_lora_rt_mat *lm)
{
    return lm->aq ? (lm->rank + 15) / 16 : lm->rank;
}

/* t = A x for units [k0, k1) of a Q8_0 A, on the base's Q8_0 matmul, the
 * n rows (list `rows` of x) Q8_ROWS at a time. Their input in Q8_0 comes
 * from `act` when it holds x (xq, xq_stride), else is quantised here. */
static void a_q8(struct ifl_fwd *f, int ith, const struct ifl_lora_rt_mat *lm, int64_t k0,
                 int64_t k1, int32_t n, const int32_t *rows, const float *x, size_t ldx,
                 const char *xq, size_t xq_stride, float *t)
{
    char *xg = f->lora_q + (size_t)ith * f->lora_q_stride;
    const size_t xr = q8_row(lm->n_in), ldt = t_ld(lm);
    const int64_t c0 = k0 * 16, c1 = k1 * 16 < lm->rank ? k1 * 16 : lm->rank;
    ifl_gemm_fn gemm = lm->a_x16 ? f->kn->gemm_x16[IFL_TYPE_Q8_0] : f->kn->gemm[IFL_TYPE_Q8_0];
    for (int32_t p = 0; p < n; p += Q8_ROWS) {
        const int32_t np = n - p < Q8_ROWS ? n - p : Q8_ROWS;
        for (int32_t q = 0; q < np; q++) {
            const size_t r = (size_t)rows[p + q];
            if (xq)
                memcpy(xg + (size_t)q * xr, xq + r * xq_stride, xr);
            else
                f->kn->quant[IFL_TYPE_Q8_0](x + r * ldx, xg + (size_t)q * xr, lm->n_in);
        }
        gemm(lm->n_in, np, (int)(c1 - c0), xg, xr, (const char *)lm->aq + (size_t)c0 * lm->a_row,
             lm->a_row, t + (size_t)p * ldt + (size_t)c0, ldt);
    }
}

/* y += s B t over columns [c0, c1) (multiples of 16) of an int8 B for
 * the n rows (list `rows` of y; their t rows ldt apart, scales sc): each
 * t row quantised in blocks of 16 (the largest magnitude to 127, rounded
 * to nearest), then kernels.h lora_b_q8. */
static void b_q8(struct ifl_fwd *f, int ith, const struct ifl_lora_rt_mat *lm, int32_t n,
                 const int32_t *rows, const float *sc, const float *t, size_t ldt, float *y,
                 size_t ldy, int64_t c0, int64_t c1)
{
    const int nkb = lm->rank / 16;
    int8_t *tq =
        (int8_t *)(f->lora_q + (size_t)ith * f->lora_q_stride + Q8_ROWS * f->act_row_bytes);
    float *td = (float *)((char *)tq + ((size_t)f->max_rows * (size_t)lm->rank + 63) / 64 * 64);
    for (int32_t p = 0; p < n; p++)
        for (int kb = 0; kb < nkb; kb++)
            td[(size_t)p * (size_t)nkb + (size_t)kb] =
                quant16(t + (size_t)p * ldt + 16 * kb,
                        tq + (size_t)p * (size_t)lm->rank + (size_t)(16 * kb));
    f->kn->lora_b_q8(nkb, (c1 - c0) / 16,
                     (const uint8_t *)lm->bq + (size_t)(c0 / 16) * (size_t)nkb * 288, n, rows, sc,
                     tq, (size_t)lm->rank, td, y + c0, ldy);
}

void ifl_fwd_lora_a(struct job *j, int ith, int nth, int il, const int *tg, int nt, const float *x,
                    size_t ldx, const struct act_memo *memo)
{
    struct ifl_fwd *f = j->f;
    const struct ifl_batch *b = j->b;
    const int s = il < 0;
    /* x already in Q8_0 (every row of it) for a Q8_0 A */
    const char *xq = memo->src == x && memo->type == IFL_TYPE_Q8_0 ? f->act : NULL;
    int64_t total = 0;
    for (int m = 0; m < nt; m++)
        for (int32_t i = 0; i < b->n_lora; i++)
            if (seg_n(f, s, i))
                total += a_units(lmat(b->lora[i], il, tg[m]));
    const int64_t u0 = total * ith / nth, u1 = total * (ith + 1) / nth;
    int64_t base = 0;
    /* adapter-major, so that a thread's Q8_0 products meet one adapter's
     * rows in a run */
    for (int32_t i = 0; i < b->n_lora; i++)
        for (int m = 0; m < nt; m++) {
            const int32_t n = seg_n(f, s, i);
            const struct ifl_lora_rt_mat *lm = lmat(b->lora[i], il, tg[m]);
            if (!n || !lm->rank)
                continue;
            const int64_t units = a_units(lm);
            int64_t k0 = u0 - base, k1 = u1 - base;
            base += units;
            k0 = k0 < 0 ? 0 : k0;
            k1 = k1 > units ? units : k1;
            if (k0 >= k1)
                continue;
            float *t = f->lora_t + t_off(f, b, s, il, tg, m, i);
            const size_t a0 = (size_t)k0 * (size_t)lm->n_in;
            if (lm->aq)
                a_q8(f, ith, lm, k0, k1, n, seg_rows(f, s, i), x, ldx, xq, f->act_row_bytes, t);
            else if (lm->a16)
                f->kn->lora_a_f16(lm->n_in, (int)(k1 - k0), lm->a16 + a0, n, seg_rows(f, s, i), x,
                                  ldx, t + (size_t)k0, (size_t)lm->rank);
            else
                f->kn->lora_a(lm->n_in, (int)(k1 - k0), lm->a + a0, n, seg_rows(f, s, i), x, ldx,
                              t + (size_t)k0, (size_t)lm->rank);
        }
}

/* y += s B t for adapter lm over columns [c0, c1) of n rows, in whichever
 * form B is held. */
static void b_any(struct ifl_fwd *f, int ith, const struct ifl_lora_rt_mat *lm, int32_t n,
                  const int32_t *rows, const float *sc, const float *t, float *y, size_t ldy,
                  int64_t c0, int64_t c1)
{
    const size_t ldt = t_ld(lm);
    if (lm->bq)
        b_q8(f, ith, lm, n, rows, sc, t, ldt, y, ldy, c0, c1);
    else if (lm->bt16)
        f->kn->lora_b_f16(lm->rank, c1 - c0, lm->bt16 + c0, (size_t)lm->n_out, n, rows, sc, t, ldt,
                          y + c0, ldy);
    else
        f->kn->lora_b(lm->rank, c1 - c0, lm->bt + c0, (size_t)lm->n_out, n, rows, sc, t, ldt,
                      y + c0, ldy);
}

void ifl_fwd_lora_b(struct job *j, int ith, int nth, int il, const int *tg, int nt, float *const *y,
                    const size_t *ldy)
{
    struct ifl_fwd *f = j->f;
    const struct ifl_batch *b = j->b;
    const int s = il < 0;
    float *sc = f->lora_sc + (size_t)ith * (size_t)f->max_rows;
    /* the group's columns in 32-column units (whole Q8_0 blocks and x16
     * groups), matrix after matrix */
    int64_t total = 0;
    for (int m = 0; m < nt; m++) {
        int64_t n_out = 0;
        for (int32_t i = 0; i < b->n_lora && !n_out; i++)
            if (seg_n(f, s, i) && lmat(b->lora[i], il, tg[m])->rank)
                n_out = lmat(b->lora[i], il, tg[m])->n_out;
        total += (n_out + 31) / 32;
    }
    const int64_t u0 = total * ith / nth, u1 = total * (ith + 1) / nth;
    int64_t base = 0;
    for (int m = 0; m < nt; m++) {
        int64_t n_out = 0, units;
        for (int32_t i = 0; i < b->n_lora && !n_out; i++)
            if (seg_n(f, s, i) && lmat(b->lora[i], il, tg[m])->rank)
                n_out = lmat(b->lora[i], il, tg[m])->n_out;
        units = (n_out + 31) / 32;
        int64_t c0 = (u0 - base) * 32, c1 = (u1 - base) * 32;
        c0 = c0 < 0 ? 0 : c0;
        c1 = c1 > n_out ? n_out : c1;
        base += units;
        if (c0 >= c1)
            continue;
        for (int32_t i = 0; i < b->n_lora; i++) {
            const int32_t n = seg_n(f, s, i);
            const struct ifl_lora_rt_mat *lm = lmat(b->lora[i], il, tg[m]);
            if (!n || !lm->rank)
                continue;
            const float *user = seg_user(f, s, i);
            for (int32_t r = 0; r < n; r++)
                sc[r] = ifl_lora_rt_scale(lm, user[r]);
            b_any(f, ith, lm, n, seg_rows(f, s, i), sc, f->lora_t + t_off(f, b, s, il, tg, m, i),
                  y[m], ldy[m], c0, c1);
        }
    }
}

void ifl_fwd_lora_b_rows(struct job *j, int ith, int il, const int *tg, int nt, float *const *y,
                         const size_t *ldy, long lo, long hi)
{
    struct ifl_fwd *f = j->f;
    const struct ifl_batch *b = j->b;
    float *sc = f->lora_sc + (size_t)ith * (size_t)f->max_rows;
    size_t off = 0;
    for (int m = 0; m < nt; m++)
        for (int32_t i = 0; i < b->n_lora; i++) {
            const int32_t n = seg_n(f, 0, i);
            const struct ifl_lora_rt_mat *lm = lmat(b->lora[i], il, tg[m]);
            if (!n || !lm->rank)
                continue;
            /* the list is in row order: this thread's rows are a run of it */
            const int32_t *rows = seg_rows(f, 0, i);
            int32_t p0 = 0, p1;
            while (p0 < n && rows[p0] < lo)
                p0++;
            for (p1 = p0; p1 < n && rows[p1] < hi; p1++)
                sc[p1 - p0] = ifl_lora_rt_scale(lm, seg_user(f, 0, i)[p1]);
            if (p1 > p0)
                b_any(f, ith, lm, p1 - p0, rows + p0, sc, f->lora_t + off + (size_t)p0 * t_ld(lm),
                      y[m], ldy[m], 0, lm->n_out);
            off += (size_t)n * t_ld(lm);
        }
}

int ifl_fwd_lora_any(const struct ifl_fwd *f, const struct ifl_batch *b, int il, const int *tg,
                     int nt)
{
    const int s = il < 0;
    for (int m = 0; m < nt; m++)
        for (int32_t i = 0; i < b->n_lora; i++)
            if (seg_n(f, s, i) && lmat(b->lora[i], il, tg[m])->rank)
                return 1;
    return 0;
}

void ifl_fwd_lora_embed(struct job *j, long r)
{
    const struct ifl_fwd *f = j->f;
    const struct ifl_batch *b = j->b;
    const int32_t zero = 0, n_embd = f->m->hp.n_embd;
    for (int32_t i = 0; i < b->n_lora; i++) {
        float u = b->lora_scale[(size_t)r * (size_t)b->n_lora + (size_t)i];
        const struct ifl_lora_rt_mat *lm = &b->lora[i]->tok_embd;
        if (u == 0.0f || !lm->rank)
            continue;
        float s = ifl_lora_rt_scale(lm, u);
        f->kn->lora_b(lm->rank, n_embd, lm->bt, (size_t)n_embd, 1, &zero, &s,
                      lm->a + (size_t)b->tokens[r] * (size_t)lm->rank, (size_t)lm->rank,
                      f->x + r * n_embd, (size_t)n_embd);
    }
}
