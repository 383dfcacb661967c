/*
 * GGUF lookups: metadata entries by index or key, typed reads of their
 * values and array elements, and tensors by index or name, over what
 * gguf.c parsed and checked (so nothing here checks bounds again).
 */
#include "model/gguf_internal.h"

#include "core/err.h"

/* ---- metadata ---- */

int64_t ifl_gguf_n_kv(const struct ifl_gguf *g)
{
    return g->n_kv;
}

const char *ifl_gguf_key(const struct ifl_gguf *g, int64_t i)
{
    return i >= 0 && i < g->n_kv ? g->kvs[i].key : NULL;
}

int64_t ifl_gguf_find_key(const struct ifl_gguf *g, const char *key)
{
    return ifl_gguf_lookup(g, g->kv_slots, g->kv_mask, ifl_gguf_kv_name, key);
}

static void fill_value(const struct gnode *v, struct ifl_gguf_value *out)
{
    memset(out, 0, sizeof *out);
    out->type = (enum ifl_gguf_type)v->type;
    if (v->type == IFL_GGUF_ARRAY) {
        out->elem_type = (enum ifl_gguf_type)v->elem_type;
        out->n = v->n;
    }
    out->impl = v;
}

int ifl_gguf_value(const struct ifl_gguf *g, int64_t i, struct ifl_gguf_value *out)
{
    if (i < 0 || i >= g->n_kv)
        return IFL_EINVAL;
    fill_value(&g->kvs[i].val, out);
    return 0;
}

int ifl_gguf_kv_span(const struct ifl_gguf *g, int64_t i, const void **p, size_t *len)
{
    if (i < 0 || i >= g->n_kv)
        return IFL_EINVAL;
    *p = g->base + g->kvs[i].val_off;
    *len = g->kvs[i].val_end - g->kvs[i].val_off;
    return 0;
}

/* The entry for key, or NULL (ENOTFOUND, err untouched). */
static const struct gkv *find_kv(const struct ifl_gguf *g, const char *key)
{
    int64_t i = ifl_gguf_find_key(g, key);
    return i < 0 ? NULL : &g->kvs[i];
}

static int type_err(const struct gkv *kv, const char *want, char *err)
{
    char nm[80];
    ifl_gguf_show_name(nm, sizeof nm, (const uint8_t *)kv->key, strlen(kv->key));
    return ifl_err(err, IFL_EFORMAT, "gguf: key '%s' has type %s at offset %zu; expected %s", nm,
                   ifl_gguf_type_name(kv->val.type), kv->val_off, want);
}

int ifl_gguf_get_int(const struct ifl_gguf *g, const char *key, int64_t *out, char *err)
{
    const struct gkv *kv = find_kv(g, key);
    if (!kv)
        return IFL_ENOTFOUND;
    int rc = ifl_gguf_read_int(kv->val.type, kv->val.p, out);
    if (rc == IFL_EINVAL)
        return type_err(kv, "an integer", err);
    if (rc) {
        char nm[80];
        ifl_gguf_show_name(nm, sizeof nm, (const uint8_t *)kv->key, strlen(kv->key));
        return ifl_err(err, IFL_EFORMAT,
                       "gguf: key '%s': value %llu at offset %zu does not fit in "
                       "int64",
                       nm, (unsigned long long)rd_u64(kv->val.p), kv->val_off);
    }
    return 0;
}

int ifl_gguf_get_float(const struct ifl_gguf *g, const char *key, double *out, char *err)
{
    const struct gkv *kv = find_kv(g, key);
    if (!kv)
        return IFL_ENOTFOUND;
    if (ifl_gguf_read_float(kv->val.type, kv->val.p, out))
        return type_err(kv, "float32 or float64", err);
    return 0;
}

int ifl_gguf_get_bool(const struct ifl_gguf *g, const char *key, int *out, char *err)
{
    const struct gkv *kv = find_kv(g, key);
    if (!kv)
        return IFL_ENOTFOUND;
    if (kv->val.type != IFL_GGUF_BOOL)
        return type_err(kv, "bool", err);
    *out = kv->val.p[0] != 0;
    return 0;
}

int ifl_gguf_get_str(const struct ifl_gguf *g, const char *key, const char **s, size_t *len,
                     char *err)
{
    const struct gkv *kv = find_kv(g, key);
    if (!kv)
        return IFL_ENOTFOUND;
    if (kv->val.type != IFL_GGUF_STRING)
        return type_err(kv, "string", err);
    *s = (const char *)kv->val.p;
    *len = (size_t)kv->val.n;
    return 0;
}

int ifl_gguf_get_arr(const struct ifl_gguf *g, const char *key, struct ifl_gguf_value *out,
                     char *err)
{
    const struct gkv *kv = find_kv(g, key);
    if (!kv)
        return IFL_ENOTFOUND;
    if (kv->val.type != IFL_GGUF_ARRAY)
        return type_err(kv, "array", err);
    fill_value(&kv->val, out);
    return 0;
}

/* ---- scalar values and array elements ---- */

int ifl_gguf_value_int(const struct ifl_gguf_value *v, int64_t *out)
{
    const struct gnode *nd = v->impl;
    if (nd->type == IFL_GGUF_STRING || nd->type == IFL_GGUF_ARRAY)
        return IFL_EINVAL;
    return ifl_gguf_read_int(nd->type, nd->p, out);
}

int ifl_gguf_value_float(const struct ifl_gguf_value *v, double *out)
{
    const struct gnode *nd = v->impl;
    return ifl_gguf_read_float(nd->type, nd->p, out);
}

int ifl_gguf_value_str(const struct ifl_gguf_value *v, const char **s, size_t *len)
{
    const struct gnode *nd = v->impl;
    if (nd->type != IFL_GGUF_STRING)
        return IFL_EINVAL;
    *s = (const char *)nd->p;
    *len = (size_t)nd->n;
    return 0;
}

static const struct gnode *arr_node(const struct ifl_gguf_value *arr, uint64_t i)
{
    const struct gnode *nd = arr->impl;
    IFL_ASSERT(nd && nd->type == IFL_GGUF_ARRAY && i < nd->n);
    return nd;
}

int ifl_gguf_arr_int(const struct ifl_gguf_value *arr, uint64_t i, int64_t *out)
{
    const struct gnode *nd = arr_node(arr, i);
    size_t es = ifl_gguf_scalar_size(nd->elem_type);
    if (!es)
        return IFL_EINVAL;
    return ifl_gguf_read_int(nd->elem_type, nd->p + i * es, out);
}

int ifl_gguf_arr_float(const struct ifl_gguf_value *arr, uint64_t i, double *out)
{
    const struct gnode *nd = arr_node(arr, i);
    size_t es = ifl_gguf_scalar_size(nd->elem_type);
    if (!es)
        return IFL_EINVAL;
    return ifl_gguf_read_float(nd->elem_type, nd->p + i * es, out);
}

int ifl_gguf_arr_str(const struct ifl_gguf_value *arr, uint64_t i, const char **s, size_t *len)
{
    const struct gnode *nd = arr_node(arr, i);
    if (nd->elem_type != IFL_GGUF_STRING)
        return IFL_EINVAL;
    const uint8_t *at = ((const uint8_t *const *)nd->index)[i];
    *len = (size_t)rd_u64(at);
    *s = (const char *)at + 8;
    return 0;
}

int ifl_gguf_arr_sub(const struct ifl_gguf_value *arr, uint64_t i, struct ifl_gguf_value *out)
{
    const struct gnode *nd = arr_node(arr, i);
    if (nd->elem_type != IFL_GGUF_ARRAY)
        return IFL_EINVAL;
    fill_value(&((const struct gnode *)nd->index)[i], out);
    return 0;
}

/* ---- tensors ---- */

int64_t ifl_gguf_n_tensors(const struct ifl_gguf *g)
{
    return g->n_tensors;
}

const struct ifl_gguf_tensor *ifl_gguf_tensor(const struct ifl_gguf *g, int64_t i)
{
    return i >= 0 && i < g->n_tensors ? &g->tensors[i].t : NULL;
}

const struct ifl_gguf_tensor *ifl_gguf_find_tensor(const struct ifl_gguf *g, const char *name)
{
    int64_t i = ifl_gguf_lookup(g, g->t_slots, g->t_mask, ifl_gguf_t_name, name);
    return i < 0 ? NULL : &g->tensors[i].t;
}
