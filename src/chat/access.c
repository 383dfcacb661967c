/*
 * Attribute, item and iteration access of the chat-template evaluator, with
 * Jinja2's sandbox rules: x.name tries Python attributes (methods) first
 * and then x['name'], x['name'] the other way round; a miss is an Undefined
 * carrying Jinja's hint ("'dict object' has no attribute 'description'").
 */
#include <string.h>

#include "chat/internal.h"
#include "core/err.h"

/* ---- attribute and item access ---- */

/* Jinja's object_type_repr: "dict object", "None", ... */
static const char *obj_type_repr(cval v)
{
    switch (v.t) {
    case CV_NONE:
        return "None";
    case CV_NS:
        return "jinja2.utils.Namespace object";
    case CV_LOOP:
        return "jinja2.runtime.LoopContext object";
    case CV_FUNC:
        return v.u.fn->kind == FN_MACRO ? "jinja2.runtime.Macro object"
                                        : "builtin_function_or_method object";
    case CV_BOOL:
        return "bool object";
    case CV_INT:
        return "int object";
    case CV_FLOAT:
        return "float object";
    case CV_STR:
        return "str object";
    case CV_LIST:
        if (v.f & CVF_GEN)
            return "generator object";
        if (v.f & CVF_VIEW)
            return (v.f & CVF_VIEW_KEYS)     ? "dict_keys object"
                   : (v.f & CVF_VIEW_VALUES) ? "dict_values object"
                                             : "dict_items object";
        return (v.f & CVF_TUPLE) ? "tuple object" : "list object";
    case CV_DICT:
        return "dict object";
    }
    return "object";
}

static cval missing_attr(struct ifl_chat_rt *r, cval obj, cval name)
{
    struct ifl_chat_sb b = {0};
    const char *tr = obj_type_repr(obj);
    if (name.t == CV_STR) {
        ifl_chat_repr_of(r, &b, ifl_chat_v_str(&r->ar, tr, strlen(tr)), 0);
        ifl_chat_sb_put(&r->ar, &b, " has no attribute ", 18);
    } else {
        ifl_chat_sb_put(&r->ar, &b, tr, strlen(tr));
        ifl_chat_sb_put(&r->ar, &b, " has no element ", 16);
    }
    ifl_chat_repr_of(r, &b, name, 0);
    return ifl_chat_v_undef(ifl_chat_mkstr(&r->ar, b.p, b.n));
}

static cval bound_method(struct ifl_chat_rt *r, cval self, const char *name)
{
    cval f = {.t = CV_FUNC};
    f.u.fn = ifl_chat_alloc(&r->ar, sizeof *f.u.fn);
    memset(f.u.fn, 0, sizeof *f.u.fn);
    f.u.fn->kind = FN_METHOD;
    f.u.fn->self = self;
    f.u.fn->name = name;
    return f;
}

static cval loop_attr(struct ifl_chat_rt *r, struct ifl_chat_loop *lp, const char *k, int *found)
{
    size_t i = lp->i, n = lp->n;
    *found = 1;
    if (!strcmp(k, "index"))
        return ifl_chat_v_int((int64_t)i + 1);
    if (!strcmp(k, "index0"))
        return ifl_chat_v_int((int64_t)i);
    if (!strcmp(k, "revindex"))
        return ifl_chat_v_int((int64_t)(n - i));
    if (!strcmp(k, "revindex0"))
        return ifl_chat_v_int((int64_t)(n - i - 1));
    if (!strcmp(k, "first"))
        return ifl_chat_v_bool(i == 0);
    if (!strcmp(k, "last"))
        return ifl_chat_v_bool(i + 1 == n);
    if (!strcmp(k, "length"))
        return ifl_chat_v_int((int64_t)n);
    if (!strcmp(k, "depth"))
        return ifl_chat_v_int(lp->depth);
    if (!strcmp(k, "depth0"))
        return ifl_chat_v_int(lp->depth - 1);
    if (!strcmp(k, "previtem"))
        return i > 0 ? lp->items[i - 1]
                     : ifl_chat_v_undef(ifl_chat_fmtstr(&r->ar, "there is no previous item"));
    if (!strcmp(k, "nextitem"))
        return i + 1 < n ? lp->items[i + 1]
                         : ifl_chat_v_undef(ifl_chat_fmtstr(&r->ar, "there is no next item"));
    *found = 0;
    return ifl_chat_v_none();
}

cval ifl_chat_getattr(struct ifl_chat_rt *r, cval obj, const cstr *name)
{
    cval key = {.t = CV_STR, .u.s = (cstr *)name};
    switch (obj.t) {
    case CV_UNDEF:
    case CV_MISSING:
        ifl_chat_undefined_error(r, obj);
    case CV_STR:
    case CV_LIST:
    case CV_DICT:
        if (ifl_chat_has_method(obj, name->p, name->len))
            return bound_method(r, obj, name->p);
        if (obj.t == CV_DICT) {
            cval *v = ifl_chat_dict_find(obj.u.m, key);
            if (v)
                return *v;
        }
        break;
    case CV_NS: {
        cval *v = ifl_chat_dict_find(obj.u.m, key);
        if (v)
            return *v;
        break;
    }
    case CV_LOOP: {
        int found;
        cval v = loop_attr(r, obj.u.lp, name->p, &found);
        if (found)
            return v;
        if (!strcmp(name->p, "cycle") || !strcmp(name->p, "changed"))
            return bound_method(r, obj, !strcmp(name->p, "cycle") ? "cycle" : "changed");
        break;
    }
    default:
        break;
    }
    return missing_attr(r, obj, key);
}

int64_t ifl_chat_index_of(cval k, int *ok)
{
    *ok = 1;
    if (k.t == CV_INT)
        return k.u.i;
    if (k.t == CV_BOOL)
        return k.u.b;
    *ok = 0;
    return 0;
}

cval ifl_chat_getitem(struct ifl_chat_rt *r, cval obj, cval key)
{
    int ok;
    switch (obj.t) {
    case CV_UNDEF:
    case CV_MISSING:
        ifl_chat_undefined_error(r, obj);
    case CV_DICT: {
        cval *v = ifl_chat_dict_find(obj.u.m, key);
        if (v)
            return *v;
        break;
    }
    case CV_LIST: {
        if (obj.f & CVF_LAZY)
            break;
        int64_t i = ifl_chat_index_of(key, &ok);
        if (ok) {
            int64_t n = (int64_t)obj.u.l->n;
            if (i < 0)
                i += n;
            if (i >= 0 && i < n)
                return obj.u.l->v[i];
        }
        break;
    }
    case CV_STR: {
        int64_t i = ifl_chat_index_of(key, &ok);
        if (ok) {
            const cstr *s = obj.u.s;
            int64_t n = (int64_t)ifl_chat_utf8_len(s->p, s->len);
            if (i < 0)
                i += n;
            if (i >= 0 && i < n) {
                size_t off = ifl_chat_utf8_offset(s->p, s->len, (size_t)i), adv;
                ifl_chat_utf8_dec(s->p + off, s->len - off, &adv);
                cval c = ifl_chat_v_str(&r->ar, s->p + off, adv);
                c.f = obj.f & CVF_SAFE;
                return c;
            }
        }
        break;
    }
    default:
        break;
    }
    if (key.t == CV_STR) {
        /* fall back to the attribute, e.g. d['items'] or ns['x'] */
        if (obj.t == CV_NS || obj.t == CV_LOOP ||
            ((obj.t == CV_STR || obj.t == CV_LIST || obj.t == CV_DICT) &&
             ifl_chat_has_method(obj, key.u.s->p, key.u.s->len)))
            return ifl_chat_getattr(r, obj, key.u.s);
    }
    return missing_attr(r, obj, key);
}

/* ---- iteration ---- */

void ifl_chat_iterate(struct ifl_chat_rt *r, cval v, cval **items, size_t *n)
{
    switch (v.t) {
    case CV_LIST:
        *items = v.u.l->v;
        *n = v.u.l->n;
        return;
    case CV_DICT: {
        size_t k = v.u.m->n;
        cval *c = ifl_chat_alloc(&r->ar, (k ? k : 1) * sizeof *c);
        if (k)
            memcpy(c, v.u.m->k, k * sizeof *c);
        *items = c;
        *n = k;
        return;
    }
    case CV_STR: {
        const cstr *s = v.u.s;
        size_t k = ifl_chat_utf8_len(s->p, s->len);
        cval *c = ifl_chat_alloc(&r->ar, (k ? k : 1) * sizeof *c);
        size_t i = 0, j = 0;
        while (i < s->len) {
            size_t adv;
            ifl_chat_utf8_dec(s->p + i, s->len - i, &adv);
            c[j++] = ifl_chat_v_str(&r->ar, s->p + i, adv);
            i += adv;
        }
        ifl_chat_rt_steps(r, (long long)k);
        *items = c;
        *n = k;
        return;
    }
    case CV_UNDEF:
    case CV_MISSING:
        *items = NULL;
        *n = 0;
        return;
    default:
        ifl_chat_fail(r, IFL_EFORMAT, "TypeError", "'%s' object is not iterable",
                      ifl_chat_type_name(v));
    }
}
