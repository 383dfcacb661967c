/*
 * LoRA adapters in llama.cpp's GGUF format (what convert_lora_to_gguf.py
 * writes), checked against a base model and converted to F32 (lora.h).
 *
 * The file: metadata general.type = "adapter", adapter.type = "lora",
 * general.architecture = the base's, adapter.lora.alpha (float, optional:
 * 0 means "no alpha", the scale is then the user's alone). Every adapted
 * base tensor NAME has two tensors, NAME.lora_a and NAME.lora_b, in ggml
 * order (ne[0] innermost):
 *   base    [n_in, n_out]   y = W x
 *   lora_a  [n_in, r]       r rows of n_in: A x is r dot products
 *   lora_b  [r, n_out]      n_out rows of r
 * except token_embd.weight, whose lora_a is stored transposed,
 * [r, n_vocab] (a row of r per token, what an embedding lookup wants), with
 * lora_b [r, n_embd] as usual. So no matrix needs transposing here: each
 * tensor's rows are the rows lora.h wants.
 *
 * What is checked, each failure a sentence naming the tensor or key:
 * metadata types and values, that every .lora_a has its .lora_b and the
 * other way round, that the base has the adapted tensor and inflight can
 * adapt it (the seven projections of each layer, token_embd, an untied
 * output), every shape and the rank shared by A and B, the types (F32,
 * F16, BF16, Q8_0), and that every value is finite. Tensors named
 * ..._norm.weight without a lora suffix are skipped, as llama.cpp skips
 * them (mergekit puts norms in adapters; llama.cpp does not apply them
 * either). Any other tensor is an error. An activated LoRA
 * (adapter.alora.invocation_tokens) is refused: it applies only after its
 * invocation tokens, which a plain adapter cannot express.
 *
 * A tied base (no output.weight) has no LM head of its own to adapt:
 * output.weight.lora_a is then an error, and token_embd's adapter changes
 * the embedding lookup only (as PEFT's embedding LoRA does).
 *
 * The file is read through the bounded GGUF reader (model/gguf.h), which
 * has already checked every offset, count and tensor size against the
 * file; this file only interprets what it hands out.
 */
#include "model/lora.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "kernels/kernels.h"
#include "kernels/types.h"
#include "model/gguf.h"
#include "model/model.h"

/* Base tensor names of the targets, in enum ifl_lora_target order. */
static const char *const target_names[IFL_LORA_N_TARGETS] = {
    "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down",
};

/* The adaptable slots: n_layer * IFL_LORA_N_TARGETS layer matrices, then
 * token_embd, then output. */
struct slot {
    const struct ifl_gguf_tensor *a, *b;
};

struct ld {
    const struct ifl_model *base;
    struct ifl_gguf *g;
    struct ifl_lora *l;
    struct slot *slots;
    int64_t n_slots;
    char *err;
};

static int64_t slot_embd(const struct ld *L)
{
    return (int64_t)L->base->hp.n_layer * IFL_LORA_N_TARGETS;
}

static int ends_with(const char *s, size_t n, const char *suffix)
{
    size_t k = strlen(suffix);
    return n >= k && !memcmp(s + n - k, suffix, k);
}

/* The slot of base tensor name[0..n) (not NUL-terminated), or -1 when
 * inflight cannot adapt it. Only canonical names match ("blk.3", not
 * "blk.03"): the name is rebuilt from the layer number and compared. */
static int64_t slot_of(const struct ld *L, const char *name, size_t n)
{
    if (n == strlen("token_embd.weight") && !memcmp(name, "token_embd.weight", n))
        return slot_embd(L);
    if (n == strlen("output.weight") && !memcmp(name, "output.weight", n))
        return slot_embd(L) + 1;
    if (n < 5 || memcmp(name, "blk.", 4) || name[4] < '0' || name[4] > '9')
        return -1;
    long il = 0;
    size_t i = 4;
    while (i < n && name[i] >= '0' && name[i] <= '9' && il < 100000)
        il = il * 10 + (name[i++] - '0');
    if (il >= L->base->hp.n_layer)
        return -1;
    for (int t = 0; t < IFL_LORA_N_TARGETS; t++) {
        char want[96];
        int k = snprintf(want, sizeof want, "blk.%ld.%s.weight", il, target_names[t]);
        if ((size_t)k == n && !memcmp(want, name, n))
            return (int64_t)il * IFL_LORA_N_TARGETS + t;
    }
    return -1;
}

/* The base matrix of slot s; NULL for output on a tied base. */
static const struct ifl_mat *base_mat(const struct ld *L, int64_t s)
{
    const struct ifl_model *m = L->base;
    if (s == slot_embd(L))
        return &m->tok_embd;
    if (s == slot_embd(L) + 1)
        return m->tied_output ? NULL : &m->output;
    const struct ifl_layer_weights *w = &m->layers[s / IFL_LORA_N_TARGETS];
    const struct ifl_mat *by_target[IFL_LORA_N_TARGETS] = {
        &w->wq, &w->wk, &w->wv, &w->wo, &w->w_gate, &w->w_up, &w->w_down,
    };
    return by_target[s % IFL_LORA_N_TARGETS];
}

/* A printable copy of text[0..n) for messages (cut, other bytes as '?'). */
static void show_text(char *dst, size_t cap, const char *text, size_t n)
{
    size_t k = 0;
    for (; k < n && k + 1 < cap; k++)
        dst[k] = text[k] >= 32 && text[k] <= 126 ? text[k] : '?';
    dst[k] = 0;
}

static int check_meta_str(struct ld *L, const char *key, const char *want, int status)
{
    const char *s;
    size_t n;
    int rc = ifl_gguf_get_str(L->g, key, &s, &n, L->err);
    if (rc == IFL_ENOTFOUND)
        return ifl_err(L->err, IFL_EFORMAT, "lora: key '%s' is missing (want '%s')", key, want);
    if (rc)
        return rc;
    if (n != strlen(want) || memcmp(s, want, n)) {
        char shown[64];
        show_text(shown, sizeof shown, s, n);
        return ifl_err(L->err, status, "lora: key '%s' is '%s', want '%s'", key, shown, want);
    }
    return 0;
}

static int read_meta(struct ld *L)
{
    int rc;
    if ((rc = check_meta_str(L, "general.type", "adapter", IFL_EFORMAT)) ||
        (rc = check_meta_str(L, "adapter.type", "lora", IFL_EUNSUPPORTED)))
        return rc;
    const char *arch = L->base->hp.arch_name;
    const char *s;
    size_t n;
    rc = ifl_gguf_get_str(L->g, "general.architecture", &s, &n, L->err);
    if (rc == IFL_ENOTFOUND)
        return ifl_err(L->err, IFL_EFORMAT, "lora: key 'general.architecture' is missing");
    if (rc)
        return rc;
    if (n != strlen(arch) || memcmp(s, arch, n)) {
        char shown[64];
        show_text(shown, sizeof shown, s, n);
        return ifl_err(L->err, IFL_EFORMAT,
                       "lora: the adapter's architecture '%s' is not the base model's '%s'", shown,
                       arch);
    }
    snprintf(L->l->arch, sizeof L->l->arch, "%s", arch);
    double alpha = 0.0;
    rc = ifl_gguf_get_float(L->g, "adapter.lora.alpha", &alpha, L->err);
    if (rc && rc != IFL_ENOTFOUND)
        return rc;
    if (!isfinite(alpha) || fabs(alpha) > 1e30)
        return ifl_err(L->err, IFL_EFORMAT, "lora: key 'adapter.lora.alpha' = %g is not finite",
                       alpha);
    L->l->alpha = (float)alpha;
    if (ifl_gguf_find_key(L->g, "adapter.alora.invocation_tokens") >= 0)
        return ifl_err(L->err, IFL_EUNSUPPORTED,
                       "lora: the adapter is an activated LoRA (key "
                       "'adapter.alora.invocation_tokens'), which inflight does not support");
    return 0;
}

/* Sorts every tensor into its slot's a or b. */
static int pair_tensors(struct ld *L)
{
    int64_t nt = ifl_gguf_n_tensors(L->g);
    for (int64_t i = 0; i < nt; i++) {
        const struct ifl_gguf_tensor *t = ifl_gguf_tensor(L->g, i);
        size_t n = strlen(t->name);
        int is_a = ends_with(t->name, n, ".lora_a");
        int is_b = !is_a && ends_with(t->name, n, ".lora_b");
        if (!is_a && !is_b) {
            if (ends_with(t->name, n, "_norm.weight"))
                continue; /* llama.cpp ignores them too */
            return ifl_err(L->err, IFL_EFORMAT,
                           "lora: tensor '%s' is neither a .lora_a nor a .lora_b tensor", t->name);
        }
        size_t bn = n - strlen(".lora_a");
        int64_t s = slot_of(L, t->name, bn);
        if (s < 0) {
            char base_name[256];
            snprintf(base_name, sizeof base_name, "%.*s", (int)bn, t->name);
            if (ifl_gguf_find_tensor(L->base->gguf, base_name))
                return ifl_err(L->err, IFL_EUNSUPPORTED,
                               "lora: tensor '%s' adapts '%s', which inflight cannot adapt "
                               "(only attn_q/k/v/output, ffn_gate/up/down, token_embd, output)",
                               t->name, base_name);
            return ifl_err(L->err, IFL_EFORMAT,
                           "lora: tensor '%s': the base model has no tensor '%s' (an adapter "
                           "for another model?)",
                           t->name, base_name);
        }
        if (!base_mat(L, s))
            return ifl_err(L->err, IFL_EFORMAT,
                           "lora: tensor '%s': the base model has no tensor 'output.weight' "
                           "(its output is tied to token_embd.weight)",
                           t->name);
        if (!base_mat(L, s)->data) /* a mixture of experts has no dense FFN */
            return ifl_err(L->err, IFL_EUNSUPPORTED,
                           "lora: tensor '%s': the base model has experts in place of '%.*s', "
                           "which inflight cannot adapt",
                           t->name, (int)bn, t->name);
        if (is_a)
            L->slots[s].a = t;
        else
            L->slots[s].b = t;
    }
    return 0;
}

static int is_lora_type(uint32_t t)
{
    return t == IFL_TYPE_F32 || t == IFL_TYPE_F16 || t == IFL_TYPE_BF16 || t == IFL_TYPE_Q8_0;
}

/* Dequantises t (ne[0] * ne[1] values) into a new array; checks finiteness. */
static int to_f32(struct ld *L, const struct ifl_gguf_tensor *t, float **out)
{
    size_t n = (size_t)t->ne[0] * (size_t)t->ne[1];
    float *p = malloc(n * sizeof(float));
    if (!p)
        return ifl_err(L->err, IFL_ENOMEM, "lora: out of memory for tensor '%s' (%zu values)",
                       t->name, n);
    ifl_kernels_ref()->dequant[t->type](t->data, p, (int64_t)n);
    for (size_t i = 0; i < n; i++)
        if (!isfinite(p[i])) {
            free(p);
            return ifl_err(L->err, IFL_EFORMAT,
                           "lora: tensor '%s' holds a value that is not finite (element %zu)",
                           t->name, i);
        }
    L->l->bytes += n * sizeof(float);
    *out = p;
    return 0;
}

static int shape_err(struct ld *L, const struct ifl_gguf_tensor *t, const char *want,
                     const struct ifl_mat *w, const char *base_name)
{
    return ifl_err(L->err, IFL_EFORMAT,
                   "lora: tensor '%s' has shape [%lld, %lld, %lld, %lld], expected %s (the base "
                   "'%s' is [%lld, %lld])",
                   t->name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                   (long long)t->ne[3], want, base_name, (long long)w->n_in, (long long)w->n_out);
}

/* Checks slot s's pair and converts it into m. */
static int load_slot(struct ld *L, int64_t s, struct ifl_lora_mat *m)
{
    const struct slot *p = &L->slots[s];
    const struct ifl_gguf_tensor *one = p->a ? p->a : p->b;
    char base_name[256];
    snprintf(base_name, sizeof base_name, "%.*s", (int)(strlen(one->name) - strlen(".lora_a")),
             one->name);
    if (!p->a || !p->b)
        return ifl_err(L->err, IFL_EFORMAT, "lora: tensor '%s' has no matching '%s.%s'", one->name,
                       base_name, p->a ? "lora_b" : "lora_a");
    const struct ifl_gguf_tensor *ta = p->a, *tb = p->b;
    const struct ifl_gguf_tensor *pair[2] = {ta, tb};
    for (int k = 0; k < 2; k++)
        if (!is_lora_type(pair[k]->type)) {
            const struct ifl_type_info *ti = ifl_type_info(pair[k]->type);
            return ifl_err(L->err, IFL_EUNSUPPORTED,
                           "lora: tensor '%s' has type %s; adapters must be f32, f16, bf16 or "
                           "q8_0",
                           pair[k]->name, ti && ti->name ? ti->name : "unknown");
        }
    const struct ifl_mat *w = base_mat(L, s);
    int embd = s == slot_embd(L);
    /* ggml order: the base is [n_in, n_out]; token_embd's n_in (ne[0]) is
     * n_embd, its n_out (ne[1]) n_vocab */
    int64_t r = embd ? ta->ne[0] : ta->ne[1];
    char want[96];
    if (embd)
        snprintf(want, sizeof want, "[r, %lld] (token_embd's lora_a is stored transposed)",
                 (long long)w->n_out);
    else
        snprintf(want, sizeof want, "[%lld, r]", (long long)w->n_in);
    if (ta->n_dims > 2 || ta->ne[2] != 1 || ta->ne[3] != 1 || r < 1 || r > 1 << 16 ||
        (embd ? ta->ne[1] != w->n_out : ta->ne[0] != w->n_in))
        return shape_err(L, ta, want, w, base_name);
    snprintf(want, sizeof want, "[%lld, %lld] (r = %lld from its lora_a)", (long long)r,
             (long long)(embd ? w->n_in : w->n_out), (long long)r);
    if (tb->n_dims > 2 || tb->ne[2] != 1 || tb->ne[3] != 1 || tb->ne[0] != r ||
        tb->ne[1] != (embd ? w->n_in : w->n_out))
        return shape_err(L, tb, want, w, base_name);

    m->rank = (int32_t)r;
    /* lora.h: token_embd reads n_in = n_vocab, n_out = n_embd */
    m->n_in = embd ? w->n_out : w->n_in;
    m->n_out = embd ? w->n_in : w->n_out;
    m->alpha = L->l->alpha;
    int rc = to_f32(L, ta, &m->a);
    if (!rc)
        rc = to_f32(L, tb, &m->b);
    if (rc)
        return rc;
    L->l->n_adapted++;
    return 0;
}

static int load_all(struct ld *L)
{
    const struct ifl_hparams *hp = &L->base->hp;
    struct ifl_lora *l = L->l;
    int rc = read_meta(L);
    if (rc)
        return rc;
    L->n_slots = slot_embd(L) + 2;
    L->slots = calloc((size_t)L->n_slots, sizeof *L->slots);
    l->layers = calloc((size_t)hp->n_layer * IFL_LORA_N_TARGETS, sizeof *l->layers);
    l->n_layer = hp->n_layer;
    if (!L->slots || !l->layers)
        return ifl_err(L->err, IFL_ENOMEM, "lora: out of memory");
    l->bytes += sizeof *l + (size_t)hp->n_layer * IFL_LORA_N_TARGETS * sizeof *l->layers;
    if ((rc = pair_tensors(L)))
        return rc;
    for (int64_t s = 0; s < L->n_slots; s++) {
        if (!L->slots[s].a && !L->slots[s].b)
            continue;
        struct ifl_lora_mat *m = s < slot_embd(L)    ? &l->layers[s]
                                 : s == slot_embd(L) ? &l->tok_embd
                                                     : &l->output;
        if ((rc = load_slot(L, s, m)))
            return rc;
    }
    return 0;
}

int ifl_lora_load(struct ifl_lora **out, const char *path, const struct ifl_model *base, char *err)
{
    *out = NULL;
    char gerr[IFL_ERR_LEN] = "";
    struct ifl_gguf *g = NULL;
    int rc = ifl_gguf_open(&g, path, gerr);
    if (rc)
        return ifl_err(err, rc, "lora: %s", gerr);
    struct ifl_lora *l = calloc(1, sizeof *l);
    if (!l) {
        ifl_gguf_free(g);
        return ifl_err(err, IFL_ENOMEM, "lora: out of memory");
    }
    snprintf(l->path, sizeof l->path, "%s", path);
    struct ld L = {.base = base, .g = g, .l = l, .err = err};
    rc = load_all(&L);
    if (rc && err && strncmp(err, "lora: ", 6)) { /* a reader's sentence: say whose */
        char inner[IFL_ERR_LEN];
        snprintf(inner, sizeof inner, "%s", err);
        ifl_err(err, rc, "lora: %s", inner);
    }
    free(L.slots);
    ifl_gguf_free(g);
    if (rc) {
        ifl_lora_free(l);
        return rc;
    }
    *out = l;
    return 0;
}

static void mat_free(struct ifl_lora_mat *m)
{
    free(m->a);
    free(m->b);
}

void ifl_lora_free(struct ifl_lora *l)
{
    if (!l)
        return;
    if (l->layers)
        for (int64_t i = 0; i < (int64_t)l->n_layer * IFL_LORA_N_TARGETS; i++)
            mat_free(&l->layers[i]);
    free(l->layers);
    mat_free(&l->tok_embd);
    mat_free(&l->output);
    free(l);
}
