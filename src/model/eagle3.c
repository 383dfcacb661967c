/*
 * EAGLE-3 heads (eagle3.h): loading a head in llama.cpp's GGUF layout,
 * checking it against the target it drafts for, and its forward pass one
 * row at a time on the calling thread. A head is one decoder layer, so a
 * row costs about 1 / n_layer of a target row plus the draft vocabulary's
 * output matrix; drafts are verified by the target, so nothing here has to
 * match anything bit for bit: the arithmetic is plain and in order.
 */
#include "model/eagle3.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "kernels/kernels.h"

/* ---- loading ---- */

struct hl {
    struct ifl_eagle3 *h;
    struct ifl_gguf *g;
    char *err;
};

static int key_int(struct hl *L, const char *suffix, int required, int64_t dflt, int64_t lo,
                   int64_t hi, int32_t *out)
{
    char key[96];
    snprintf(key, sizeof key, "eagle3.%s", suffix);
    int64_t v;
    int rc = ifl_gguf_get_int(L->g, key, &v, L->err);
    if (rc == IFL_ENOTFOUND) {
        if (required)
            return ifl_err(L->err, IFL_EFORMAT, "eagle3: required key '%s' is missing", key);
        v = dflt;
    } else if (rc) {
        return rc;
    }
    if (v < lo || v > hi)
        return ifl_err(L->err, IFL_EFORMAT, "eagle3: key '%s' = %lld is out of range [%lld, %lld]",
                       key, (long long)v, (long long)lo, (long long)hi);
    *out = (int32_t)v;
    return 0;
}

static int key_float(struct hl *L, const char *suffix, double dflt, double lo, double hi,
                     float *out)
{
    char key[96];
    snprintf(key, sizeof key, "eagle3.%s", suffix);
    double v;
    int rc = ifl_gguf_get_float(L->g, key, &v, L->err);
    if (rc == IFL_ENOTFOUND)
        v = dflt;
    else if (rc)
        return rc;
    if (!(v >= lo && v <= hi))
        return ifl_err(L->err, IFL_EFORMAT, "eagle3: key '%s' = %g is out of range [%g, %g]", key,
                       v, lo, hi);
    *out = (float)v;
    return 0;
}

static const struct ifl_gguf_tensor *need(struct hl *L, const char *name)
{
    const struct ifl_gguf_tensor *t = ifl_gguf_find_tensor(L->g, name);
    if (!t)
        ifl_err(L->err, IFL_EFORMAT, "eagle3: required tensor '%s' is missing", name);
    return t;
}

/* A 1-D tensor of n floats; why says what fixes n when it does not fit. */
static int bind_vec(struct hl *L, const char *name, int64_t n, const char *why, const float **out)
{
    const struct ifl_gguf_tensor *t = need(L, name);
    if (!t)
        return IFL_EFORMAT;
    if (t->ne[0] != n || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1)
        return ifl_err(L->err, IFL_EFORMAT,
                       "eagle3: tensor '%s' has shape [%lld, %lld], expected [%lld] (%s)", name,
                       (long long)t->ne[0], (long long)t->ne[1], (long long)n, why);
    if (t->type == IFL_TYPE_F32) {
        *out = t->data;
        return 0;
    }
    ifl_dequant_fn dq = ifl_kernels_ref()->dequant[t->type];
    const struct ifl_type_info *ti = ifl_type_info(t->type);
    if (!dq || !ti || n % ti->blck || L->h->n_owned == 8)
        return ifl_err(L->err, IFL_EUNSUPPORTED, "eagle3: tensor '%s' has unsupported type %s",
                       name, ti ? ti->name : "?");
    float *buf = malloc(sizeof(float) * (size_t)n);
    if (!buf)
        return ifl_err(L->err, IFL_ENOMEM, "eagle3: out of memory converting '%s'", name);
    L->h->owned[L->h->n_owned++] = buf;
    dq(t->data, buf, n);
    *out = buf;
    return 0;
}

/* A matrix of n_out rows of n_in; why_in / why_out say what fixes each. */
static int bind_mat(struct hl *L, const char *name, int64_t n_in, const char *why_in, int64_t n_out,
                    const char *why_out, struct ifl_mat *out)
{
    const struct ifl_gguf_tensor *t = need(L, name);
    if (!t)
        return IFL_EFORMAT;
    if (t->ne[2] != 1 || t->ne[3] != 1 || t->n_dims > 2)
        return ifl_err(L->err, IFL_EFORMAT, "eagle3: tensor '%s' has %d dimensions, expected 2",
                       name, t->n_dims);
    if (t->ne[0] != n_in)
        return ifl_err(L->err, IFL_EFORMAT,
                       "eagle3: tensor '%s' takes %lld inputs, expected %lld (%s)", name,
                       (long long)t->ne[0], (long long)n_in, why_in);
    if (n_out > 0 && t->ne[1] != n_out)
        return ifl_err(L->err, IFL_EFORMAT,
                       "eagle3: tensor '%s' gives %lld outputs, expected %lld (%s)", name,
                       (long long)t->ne[1], (long long)n_out, why_out);
    const struct ifl_type_info *ti = ifl_type_info(t->type);
    if (!ti || !ti->is_weight || !ifl_kernels_best()->gemm[t->type])
        return ifl_err(L->err, IFL_EUNSUPPORTED,
                       "eagle3: tensor '%s' has weight type %s, which "
                       "inflight does not compute with",
                       name, ti ? ti->name : "unknown");
    const struct ifl_type_info *ai = ifl_type_info(ti->act);
    if (n_in % ti->blck || n_in % ai->blck)
        return ifl_err(L->err, IFL_EUNSUPPORTED,
                       "eagle3: tensor '%s': rows of %lld are not whole blocks of its type %s",
                       name, (long long)n_in, ti->name);
    memset(out, 0, sizeof(*out));
    out->data = t->data;
    out->type = (enum ifl_type)t->type;
    out->n_in = n_in;
    out->n_out = t->ne[1];
    out->row_bytes = ifl_type_row_size(out->type, n_in);
    return 0;
}

static int load_keys(struct hl *L)
{
    struct ifl_eagle3 *h = L->h;
    const struct ifl_hparams *tp = &h->target->hp;
    const char *s;
    size_t len;
    int rc = ifl_gguf_get_str(L->g, "general.architecture", &s, &len, L->err);
    if (rc == IFL_ENOTFOUND)
        return ifl_err(L->err, IFL_EFORMAT,
                       "eagle3: required key 'general.architecture' is missing");
    if (rc)
        return rc;
    if (len != 6 || memcmp(s, "eagle3", 6))
        return ifl_err(L->err, IFL_EFORMAT,
                       "eagle3: key 'general.architecture' is '%.*s', expected 'eagle3'",
                       (int)(len > 40 ? 40 : len), s);
    int32_t blocks;
    if ((rc = key_int(L, "embedding_length", 1, 0, 1, 1 << 20, &h->n_embd)) ||
        (rc = key_int(L, "block_count", 0, 1, 1, 1, &blocks)) ||
        (rc = key_int(L, "feed_forward_length", 1, 0, 1, 1 << 22, &h->n_ff)) ||
        (rc = key_int(L, "attention.head_count", 1, 0, 1, 1 << 14, &h->n_head)) ||
        (rc = key_int(L, "attention.head_count_kv", 0, h->n_head, 1, h->n_head, &h->n_head_kv)))
        return rc;
    if (h->n_head % h->n_head_kv)
        return ifl_err(L->err, IFL_EFORMAT,
                       "eagle3: %d query heads cannot be grouped over %d key/value heads",
                       h->n_head, h->n_head_kv);
    if ((rc = key_int(L, "attention.key_length", 0, h->n_embd / h->n_head, 2, 1 << 14,
                      &h->head_dim)))
        return rc;
    if (h->head_dim % 2)
        return ifl_err(L->err, IFL_EFORMAT, "eagle3: head_dim %d is odd", h->head_dim);
    float base;
    if ((rc = key_float(L, "attention.layer_norm_rms_epsilon", 1e-5, 0, 1, &h->rms_eps)) ||
        (rc = key_float(L, "rope.freq_base", 10000.0, 1e-3, 1e12, &base)))
        return rc;
    int32_t half = h->head_dim / 2;
    h->inv_freq = malloc(sizeof(double) * (size_t)half);
    if (!h->inv_freq)
        return ifl_err(L->err, IFL_ENOMEM, "eagle3: out of memory");
    for (int32_t i = 0; i < half; i++)
        h->inv_freq[i] = pow((double)base, -2.0 * i / h->head_dim);

    struct ifl_gguf_value arr;
    rc = ifl_gguf_get_arr(L->g, "eagle3.extract_layers", &arr, L->err);
    if (rc == IFL_ENOTFOUND)
        return ifl_err(L->err, IFL_EFORMAT,
                       "eagle3: required key 'eagle3.extract_layers' is "
                       "missing");
    if (rc)
        return rc;
    if (arr.n != IFL_EAGLE3_N_EXTRACT)
        return ifl_err(L->err, IFL_EFORMAT,
                       "eagle3: key 'eagle3.extract_layers' holds %llu layers, expected %d",
                       (unsigned long long)arr.n, IFL_EAGLE3_N_EXTRACT);
    h->n_embd_t = tp->n_embd;
    for (int i = 0; i < IFL_EAGLE3_N_EXTRACT; i++) {
        int64_t v;
        if (ifl_gguf_arr_int(&arr, (uint64_t)i, &v))
            return ifl_err(L->err, IFL_EFORMAT,
                           "eagle3: key 'eagle3.extract_layers' is not an array of integers");
        if (v < 0 || v >= tp->n_layer)
            return ifl_err(L->err, IFL_EINVAL,
                           "eagle3: key 'eagle3.extract_layers': layer %lld is not one of the "
                           "target's layers 0..%d",
                           (long long)v, tp->n_layer - 1);
        h->extract[i] = (int32_t)v;
    }
    return 0;
}

static int load_tensors(struct hl *L)
{
    struct ifl_eagle3 *h = L->h;
    const struct ifl_model *tm = h->target;
    const int64_t E = h->n_embd, Et = h->n_embd_t, cin = Et + E;
    const int64_t q_dim = (int64_t)h->n_head * h->head_dim;
    const int64_t kv_dim = (int64_t)h->n_head_kv * h->head_dim;
    char three[96], cat[128];
    snprintf(three, sizeof three, "the target's three states, 3 x n_embd %lld", (long long)Et);
    snprintf(cat, sizeof cat, "the target's token embedding %lld + the head's hidden %lld",
             (long long)Et, (long long)E);
    const char *emb = "eagle3.embedding_length", *ff = "eagle3.feed_forward_length";
    const char *heads = "heads x head_dim", *kvh = "head_count_kv x head_dim";
    int rc;
    if ((rc = bind_mat(L, "fc.weight", 3 * Et, three, E, emb, &h->fc)) ||
        (rc = bind_vec(L, "blk.0.attn_norm.weight", Et, "the target's n_embd", &h->emb_norm)) ||
        (rc = bind_vec(L, "blk.0.hidden_norm.weight", E, emb, &h->hidden_norm)) ||
        (rc = bind_mat(L, "blk.0.attn_q.weight", cin, cat, q_dim, heads, &h->wq)) ||
        (rc = bind_mat(L, "blk.0.attn_k.weight", cin, cat, kv_dim, kvh, &h->wk)) ||
        (rc = bind_mat(L, "blk.0.attn_v.weight", cin, cat, kv_dim, kvh, &h->wv)) ||
        (rc = bind_mat(L, "blk.0.attn_output.weight", q_dim, heads, E, emb, &h->wo)) ||
        (rc = bind_vec(L, "blk.0.ffn_norm.weight", E, emb, &h->ffn_norm)) ||
        (rc = bind_mat(L, "blk.0.ffn_gate.weight", E, emb, h->n_ff, ff, &h->w_gate)) ||
        (rc = bind_mat(L, "blk.0.ffn_up.weight", E, emb, h->n_ff, ff, &h->w_up)) ||
        (rc = bind_mat(L, "blk.0.ffn_down.weight", h->n_ff, ff, E, emb, &h->w_down)) ||
        (rc = bind_vec(L, "output_norm.weight", E, emb, &h->out_norm)) ||
        (rc = bind_mat(L, "output.weight", E, emb, 0, NULL, &h->output)))
        return rc;
    if (h->output.n_out < 1 || h->output.n_out > tm->hp.n_vocab)
        return ifl_err(L->err, IFL_EINVAL,
                       "eagle3: tensor 'output.weight' gives %lld draft tokens, expected 1..%d "
                       "(the target's vocabulary)",
                       (long long)h->output.n_out, tm->hp.n_vocab);
    h->n_vocab = (int32_t)h->output.n_out;
    const struct ifl_gguf_tensor *t = need(L, "d2t");
    if (!t)
        return IFL_EFORMAT;
    if (t->ne[0] != h->n_vocab || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1)
        return ifl_err(L->err, IFL_EINVAL,
                       "eagle3: tensor 'd2t' has %lld x %lld entries, expected %d (one per "
                       "draft token of output.weight)",
                       (long long)t->ne[0], (long long)t->ne[1], h->n_vocab);
    if (t->type != IFL_TYPE_I64 && t->type != IFL_TYPE_I32)
        return ifl_err(L->err, IFL_EFORMAT, "eagle3: tensor 'd2t' has type %u, expected i64 or i32",
                       t->type);
    h->d2t = malloc(sizeof(int32_t) * (size_t)h->n_vocab);
    if (!h->d2t)
        return ifl_err(L->err, IFL_ENOMEM, "eagle3: out of memory");
    for (int32_t d = 0; d < h->n_vocab; d++) {
        int64_t off;
        if (t->type == IFL_TYPE_I64) {
            memcpy(&off, (const char *)t->data + 8 * (size_t)d, 8);
        } else {
            int32_t o32;
            memcpy(&o32, (const char *)t->data + 4 * (size_t)d, 4);
            off = o32;
        }
        int64_t id = d + off;
        if (off < -(int64_t)tm->hp.n_vocab || id < 0 || id >= tm->hp.n_vocab)
            return ifl_err(L->err, IFL_EINVAL,
                           "eagle3: tensor 'd2t': draft token %d maps to %lld, outside the "
                           "target's vocabulary of %d",
                           d, (long long)id, tm->hp.n_vocab);
        h->d2t[d] = (int32_t)id;
    }
    return 0;
}

int ifl_eagle3_from_gguf(struct ifl_eagle3 **out, struct ifl_gguf *g,
                         const struct ifl_model *target, char *err)
{
    *out = NULL;
    struct ifl_eagle3 *h = calloc(1, sizeof(*h));
    if (!h) {
        ifl_gguf_free(g);
        return ifl_err(err, IFL_ENOMEM, "eagle3: out of memory");
    }
    h->gguf = g;
    h->target = target;
    struct hl L = {.h = h, .g = g, .err = err};
    int rc = load_keys(&L);
    if (!rc)
        rc = load_tensors(&L);
    if (rc) {
        ifl_eagle3_free(h);
        return rc;
    }
    *out = h;
    return 0;
}

int ifl_eagle3_load(struct ifl_eagle3 **out, const char *path, const struct ifl_model *target,
                    char *err)
{
    *out = NULL;
    struct ifl_gguf *g;
    int rc = ifl_gguf_open(&g, path, err);
    if (rc)
        return rc;
    return ifl_eagle3_from_gguf(out, g, target, err);
}

void ifl_eagle3_free(struct ifl_eagle3 *h)
{
    if (!h)
        return;
    for (int i = 0; i < h->n_owned; i++)
        free(h->owned[i]);
    free(h->inv_freq);
    free(h->d2t);
    ifl_gguf_free(h->gguf);
    free(h);
}

/* ---- scratch ---- */

static size_t max_sz(size_t a, size_t b)
{
    return a > b ? a : b;
}

int ifl_eagle3_work_create(struct ifl_eagle3_work **out, const struct ifl_eagle3 *h,
                           int32_t max_ctx)
{
    *out = NULL;
    struct ifl_eagle3_work *w = calloc(1, sizeof(*w));
    if (!w)
        return IFL_ENOMEM;
    size_t E = (size_t)h->n_embd, Et = (size_t)h->n_embd_t;
    size_t q_dim = (size_t)h->n_head * (size_t)h->head_dim;
    size_t kv_dim = (size_t)ifl_eagle3_kv_dim(h);
    size_t widest = max_sz(max_sz(3 * Et, Et + E), max_sz((size_t)h->n_ff, q_dim));
    w->max_ctx = max_ctx;
    w->c = malloc(sizeof(float) * (Et + E));
    w->x = malloc(sizeof(float) * E);
    w->xn = malloc(sizeof(float) * widest);
    w->act = malloc(widest * 2 + 64); /* no act format takes 2 bytes a value */
    w->q = malloc(sizeof(float) * q_dim);
    w->att = malloc(sizeof(float) * q_dim);
    w->k = malloc(sizeof(float) * kv_dim);
    w->v = malloc(sizeof(float) * kv_dim);
    w->gate = malloc(sizeof(float) * (size_t)h->n_ff);
    w->up = malloc(sizeof(float) * (size_t)h->n_ff);
    w->tmp = malloc(sizeof(float) * E);
    w->cs = malloc(sizeof(float) * (size_t)h->head_dim);
    w->scores = malloc(sizeof(float) * (size_t)max_ctx);
    w->logits = malloc(sizeof(float) * (size_t)h->n_vocab);
    if (!w->c || !w->x || !w->xn || !w->act || !w->q || !w->att || !w->k || !w->v || !w->gate ||
        !w->up || !w->tmp || !w->cs || !w->scores || !w->logits) {
        ifl_eagle3_work_free(w);
        return IFL_ENOMEM;
    }
    *out = w;
    return 0;
}

void ifl_eagle3_work_free(struct ifl_eagle3_work *w)
{
    if (!w)
        return;
    free(w->c);
    free(w->x);
    free(w->xn);
    free(w->act);
    free(w->q);
    free(w->att);
    free(w->k);
    free(w->v);
    free(w->gate);
    free(w->up);
    free(w->tmp);
    free(w->cs);
    free(w->scores);
    free(w->logits);
    free(w);
}

/* ---- the row ---- */

static void rmsnorm(float *out, const float *x, const float *wt, int64_t n, float eps)
{
    double ss = 0;
    for (int64_t i = 0; i < n; i++)
        ss += (double)x[i] * x[i];
    float scale = (float)(1.0 / sqrt(ss / (double)n + eps));
    for (int64_t i = 0; i < n; i++)
        out[i] = x[i] * scale * wt[i];
}

/* y = m x for one row x of m->n_in floats. */
static void matvec(struct ifl_eagle3_work *w, const struct ifl_mat *m, const float *x, float *y)
{
    const struct ifl_kernels *kn = ifl_kernels_best();
    enum ifl_type at = ifl_type_info(m->type)->act;
    const void *xa = x;
    size_t xs = sizeof(float) * (size_t)m->n_in;
    if (at != IFL_TYPE_F32) {
        kn->quant[at](x, w->act, m->n_in);
        xa = w->act;
        xs = ifl_type_row_size(at, m->n_in);
    }
    kn->gemm[m->type](m->n_in, 1, (int)m->n_out, xa, xs, m->data, m->row_bytes, y,
                      (size_t)m->n_out);
}

/* Adjacent pairs (2i, 2i + 1), as llama.cpp rotates an eagle3 head. */
static void rope(float *v, const float *cs, int hd, int n_heads)
{
    for (int h = 0; h < n_heads; h++)
        for (int i = 0; i < hd / 2; i++) {
            float *p = v + (size_t)h * hd + 2 * i;
            float a = p[0], b = p[1], c = cs[2 * i], s = cs[2 * i + 1];
            p[0] = a * c - b * s;
            p[1] = a * s + b * c;
        }
}

void ifl_eagle3_fuse(const struct ifl_eagle3 *h, struct ifl_eagle3_work *w, const float *feat,
                     float *g)
{
    matvec(w, &h->fc, feat, g);
}

void ifl_eagle3_row(const struct ifl_eagle3 *h, struct ifl_eagle3_work *w, int32_t token,
                    const float *g, int32_t pos, float *kc, float *vc, int32_t lo, int32_t end,
                    const int32_t *anc, int32_t n_anc, int32_t at, float *y)
{
    const struct ifl_kernels *kn = ifl_kernels_best();
    const struct ifl_mat *te = &h->target->tok_embd;
    const int E = h->n_embd, Et = h->n_embd_t, hd = h->head_dim;
    const int kv_dim = ifl_eagle3_kv_dim(h), group = h->n_head / h->n_head_kv;
    /* the attention input: [the token's embedding ; the hidden input], each normed */
    kn->dequant[te->type]((const char *)te->data + (size_t)token * te->row_bytes, w->xn, Et);
    rmsnorm(w->c, w->xn, h->emb_norm, Et, h->rms_eps);
    rmsnorm(w->c + Et, g, h->hidden_norm, E, h->rms_eps);
    matvec(w, &h->wq, w->c, w->q);
    matvec(w, &h->wk, w->c, w->k);
    matvec(w, &h->wv, w->c, w->v);
    for (int i = 0; i < hd / 2; i++) {
        double th = (double)pos * h->inv_freq[i];
        w->cs[2 * i] = (float)cos(th);
        w->cs[2 * i + 1] = (float)sin(th);
    }
    rope(w->q, w->cs, hd, h->n_head);
    rope(w->k, w->cs, hd, h->n_head_kv);
    memcpy(kc + (size_t)at * kv_dim, w->k, sizeof(float) * (size_t)kv_dim);
    memcpy(vc + (size_t)at * kv_dim, w->v, sizeof(float) * (size_t)kv_dim);
    /* the cache indices attended, in order: [lo, end), the ancestors, itself */
    const int32_t n = end - lo + n_anc + 1;
#define IDX(u) ((u) < end - lo ? lo + (u) : (u) < n - 1 ? anc[(u) - (end - lo)] : at)
    const float scale = 1.0f / sqrtf((float)hd);
    for (int hq = 0; hq < h->n_head; hq++) {
        const int hk = hq / group;
        const float *q = w->q + (size_t)hq * hd;
        float mx = -INFINITY;
        for (int32_t u = 0; u < n; u++) {
            const float *k = kc + (size_t)IDX(u) * kv_dim + (size_t)hk * hd;
            float s = 0;
            for (int i = 0; i < hd; i++)
                s += q[i] * k[i];
            s *= scale;
            w->scores[u] = s;
            mx = s > mx ? s : mx;
        }
        double sum = 0;
        for (int32_t u = 0; u < n; u++) {
            w->scores[u] = expf(w->scores[u] - mx);
            sum += w->scores[u];
        }
        float *o = w->att + (size_t)hq * hd;
        memset(o, 0, sizeof(float) * (size_t)hd);
        for (int32_t u = 0; u < n; u++) {
            const float *v = vc + (size_t)IDX(u) * kv_dim + (size_t)hk * hd;
            float p = (float)(w->scores[u] / sum);
            for (int i = 0; i < hd; i++)
                o[i] += p * v[i];
        }
    }
#undef IDX
    matvec(w, &h->wo, w->att, w->tmp);
    for (int i = 0; i < E; i++)
        w->x[i] = g[i] + w->tmp[i];
    rmsnorm(w->xn, w->x, h->ffn_norm, E, h->rms_eps);
    matvec(w, &h->w_gate, w->xn, w->gate);
    matvec(w, &h->w_up, w->xn, w->up);
    kn->swiglu(h->n_ff, w->gate, w->up);
    matvec(w, &h->w_down, w->gate, w->tmp);
    for (int i = 0; i < E; i++)
        y[i] = w->x[i] + w->tmp[i];
}

int32_t ifl_eagle3_top(const struct ifl_eagle3 *h, struct ifl_eagle3_work *w, const float *y,
                       int32_t n, int32_t *tok, float *logp)
{
    rmsnorm(w->xn, y, h->out_norm, h->n_embd, h->rms_eps);
    matvec(w, &h->output, w->xn, w->logits);
    if (n > h->n_vocab)
        n = h->n_vocab;
    if (n > 8)
        n = 8;
    int32_t best[8];
    int32_t m = 0;
    float mx = -INFINITY;
    for (int32_t d = 0; d < h->n_vocab; d++) {
        float l = w->logits[d];
        mx = l > mx ? l : mx;
        if (m == n && !(l > w->logits[best[m - 1]]))
            continue;
        int32_t j = m < n ? m++ : m - 1;
        while (j > 0 && l > w->logits[best[j - 1]]) {
            best[j] = best[j - 1];
            j--;
        }
        best[j] = d;
    }
    double sum = 0;
    for (int32_t d = 0; d < h->n_vocab; d++)
        sum += exp((double)w->logits[d] - mx);
    for (int32_t i = 0; i < m; i++) {
        tok[i] = h->d2t[best[i]];
        if (logp)
            logp[i] = (float)((double)w->logits[best[i]] - mx - log(sum));
    }
    return m;
}
