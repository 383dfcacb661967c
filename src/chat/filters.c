/*
 * Jinja2's filters that chat templates use, after jinja2/filters.py:
 * argument names, defaults and corners included (indent's trailing-newline
 * quirk, default() only replacing Undefined unless boolean=true,
 * map/select/reject/unique returning generators; tojson writes those as
 * lists, where Jinja2 raises: print.c),
 * with the sorting (stable, as Python's sorted) and attribute getters
 * (make_attrgetter) they rely on.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/builtins.h"

/* ---- attribute getter used by map/selectattr/sort/... (jinja make_attrgetter) ---- */

static cval attr_get(rt *r, cval item, const cstr *path)
{
    size_t i = 0;
    while (i <= path->len) {
        const char *dot = memchr(path->p + i, '.', path->len - i);
        size_t e = dot ? (size_t)(dot - path->p) : path->len;
        cval key = mkstr(r, path->p + i, e - i);
        int digits = e > i;
        for (size_t k = i; k < e; k++)
            digits &= is_digit_c((unsigned char)path->p[k]);
        if (digits && e - i < 18)
            key = ifl_chat_v_int(strtoll(key.u.s->p, NULL, 10));
        item = ifl_chat_getitem(r, item, key);
        if (!dot)
            break;
        i = e + 1;
    }
    return item;
}

/* ---- sorting (stable merge sort, Python's sorted) ---- */

struct sort_ctx {
    rt *r;
    cval *keys;
    int reverse;
};

static int before(struct sort_ctx *c, size_t a, size_t b)
{
    /* may element b (later) come before a? only if strictly less */
    if (c->reverse)
        return ifl_chat_compare(c->r, c->keys[a], c->keys[b], "<") < 0;
    return ifl_chat_compare(c->r, c->keys[b], c->keys[a], "<") < 0;
}

static void merge_sort(struct sort_ctx *c, size_t *idx, size_t *tmp, size_t n)
{
    if (n < 2)
        return;
    size_t h = n / 2;
    merge_sort(c, idx, tmp, h);
    merge_sort(c, idx + h, tmp, n - h);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        if (before(c, idx[i], idx[j]))
            tmp[k++] = idx[j++];
        else
            tmp[k++] = idx[i++];
    }
    while (i < h)
        tmp[k++] = idx[i++];
    while (j < n)
        tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
    ifl_chat_rt_steps(c->r, (long long)n);
}

static cval sort_key(rt *r, cval item, const cstr *attr, int case_sensitive)
{
    cval k = attr ? attr_get(r, item, attr) : item;
    if (!case_sensitive && k.t == CV_STR)
        k = ifl_chat_case_map(r, k.u.s, 'l');
    return k;
}

static size_t *sorted_order(rt *r, cval *keys, size_t n, int reverse)
{
    size_t *idx = ifl_chat_alloc(A(r), (n ? n : 1) * sizeof *idx);
    size_t *tmp = ifl_chat_alloc(A(r), (n ? n : 1) * sizeof *tmp);
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    struct sort_ctx c = {r, keys, reverse};
    merge_sort(&c, idx, tmp, n);
    return idx;
}

/* ---- helpers for filters ---- */

static cval gen_of(cval list)
{
    list.f = CVF_GEN;
    return list;
}

static cval list_of(rt *r, cval v)
{
    cval *it;
    size_t n;
    items_of(r, v, &it, &n);
    cval out = ifl_chat_v_list(A(r), n);
    if (n)
        memcpy(out.u.l->v, it, n * sizeof(cval));
    out.u.l->n = n;
    return out;
}

static int64_t length_of(rt *r, cval v)
{
    switch (v.t) {
    case CV_STR:
        return (int64_t)ifl_chat_utf8_len(v.u.s->p, v.u.s->len);
    case CV_LIST:
        if (v.f & CVF_GEN)
            break;
        return (int64_t)v.u.l->n;
    case CV_DICT:
        return (int64_t)v.u.m->n;
    case CV_UNDEF:
    case CV_MISSING:
        return 0;
    default:
        break;
    }
    FAILT(r, "object of type '%s' has no len()", ifl_chat_type_name(v));
}

static cval tojson(rt *r, cval x, args *a)
{
    static const char *const spec[] = {"ensure_ascii", "indent", "separators", "sort_keys"};
    cval p[4];
    bind_args(r, "tojson", a, spec, 4, p);
    struct ifl_chat_json_opts o = {0};
    o.ensure_ascii = !is_missing(p[0]) && ifl_chat_truthy(p[0]);
    o.sort_keys = !is_missing(p[3]) && ifl_chat_truthy(p[3]);
    char *ind = NULL;
    if (!is_missing(p[1]) && p[1].t != CV_NONE) {
        if (p[1].t == CV_STR) {
            o.indent = p[1].u.s->p;
            o.indent_len = p[1].u.s->len;
        } else {
            int64_t k = want_int(r, p[1], "indent");
            if (k < 0)
                k = 0;
            if (k > 1024)
                k = 1024;
            ind = ifl_chat_alloc(A(r), (size_t)k + 1);
            memset(ind, ' ', (size_t)k);
            o.indent = ind;
            o.indent_len = (size_t)k;
        }
    }
    o.item_sep = o.indent ? "," : ", ";
    o.key_sep = ": ";
    if (!is_missing(p[2]) && p[2].t != CV_NONE) {
        if (p[2].t != CV_LIST || p[2].u.l->n != 2 || p[2].u.l->v[0].t != CV_STR ||
            p[2].u.l->v[1].t != CV_STR)
            ifl_chat_fail(r, IFL_EFORMAT, "ValueError", "separators must be two strings");
        o.item_sep = p[2].u.l->v[0].u.s->p;
        o.key_sep = p[2].u.l->v[1].u.s->p;
        o.item_sep_len = p[2].u.l->v[0].u.s->len;
        o.key_sep_len = p[2].u.l->v[1].u.s->len;
    } else {
        o.item_sep_len = strlen(o.item_sep);
        o.key_sep_len = 2;
    }
    struct ifl_chat_sb b = {0};
    ifl_chat_json_dump(r, &b, x, &o, 0);
    return ifl_chat_sb_val(A(r), &b);
}

static cval indent(rt *r, cval x, args *a)
{
    static const char *const spec[] = {"width", "first", "blank"};
    cval p[3];
    bind_args(r, "indent", a, spec, 3, p);
    /* jinja does `s += "\n"` on the value itself, then s.splitlines() */
    if (x.t == CV_UNDEF)
        undef_fail(r, x);
    if (x.t == CV_LIST && !(x.f & (CVF_LAZY | CVF_TUPLE)))
        ifl_chat_fail(r, IFL_EFORMAT, "AttributeError",
                      "'list' object has no attribute 'splitlines'");
    if (x.t != CV_STR)
        FAILT(r, "unsupported operand type(s) for +=: '%s' and 'str'", ifl_chat_type_name(x));
    const cstr *s = x.u.s;
    cstr *ind;
    if (!is_missing(p[0]) && p[0].t == CV_STR) {
        ind = p[0].u.s;
    } else {
        int64_t w = is_missing(p[0]) ? 4 : want_int(r, p[0], "width");
        if (w < 0)
            w = 0;
        if (w > 4096)
            w = 4096;
        char buf[4097];
        memset(buf, ' ', (size_t)w);
        ind = ifl_chat_mkstr(A(r), buf, (size_t)w);
    }
    int first = !is_missing(p[1]) && ifl_chat_truthy(p[1]);
    int blank = !is_missing(p[2]) && ifl_chat_truthy(p[2]);
    struct ifl_chat_sb t = {0};
    ifl_chat_sb_put(A(r), &t, s->p, s->len);
    ifl_chat_sb_putc(A(r), &t, '\n');
    cval lines = ifl_chat_splitlines(r, ifl_chat_mkstr(A(r), t.p, t.n), 0);
    struct ifl_chat_sb b = {0};
    if (first)
        ifl_chat_sb_put(A(r), &b, ind->p, ind->len);
    for (size_t i = 0; i < lines.u.l->n; i++) {
        const cstr *ln = lines.u.l->v[i].u.s;
        if (i) {
            ifl_chat_sb_putc(A(r), &b, '\n');
            if (blank || ln->len)
                ifl_chat_sb_put(A(r), &b, ind->p, ind->len);
        }
        ifl_chat_sb_put(A(r), &b, ln->p, ln->len);
    }
    return ifl_chat_sb_val(A(r), &b);
}

static int parse_py_int(const cstr *s, int64_t base, int64_t *out)
{
    const char *p = s->p, *e = s->p + s->len;
    while (p < e && (*p == ' ' || (*p >= 9 && *p <= 13)))
        p++;
    while (e > p && (e[-1] == ' ' || (e[-1] >= 9 && e[-1] <= 13)))
        e--;
    int neg = 0;
    if (p < e && (*p == '+' || *p == '-'))
        neg = *p++ == '-';
    if (base == 16 && e - p > 2 && p[0] == '0' && (p[1] | 32) == 'x')
        p += 2;
    if (p >= e)
        return -1;
    uint64_t v = 0;
    int prev_us = 1;
    for (; p < e; p++) {
        if (*p == '_') {
            if (prev_us)
                return -1;
            prev_us = 1;
            continue;
        }
        int d = (*p >= '0' && *p <= '9')                 ? *p - '0'
                : ((*p | 32) >= 'a' && (*p | 32) <= 'z') ? (*p | 32) - 'a' + 10
                                                         : 99;
        if (d >= base)
            return -1;
        if (v > ((uint64_t)INT64_MAX - (uint64_t)d) / (uint64_t)base)
            return -1;
        v = v * (uint64_t)base + (uint64_t)d;
        prev_us = 0;
    }
    if (prev_us)
        return -1;
    *out = neg ? -(int64_t)v : (int64_t)v;
    return 0;
}

static int parse_py_float(const cstr *s, double *out)
{
    char *end;
    const char *p = s->p;
    if (s->len == 0 || memchr(p, '_', s->len))
        return -1;
    double d = strtod(p, &end);
    while (*end == ' ' || (*end >= 9 && *end <= 13))
        end++;
    if (end == p || (size_t)(end - p) != s->len)
        return -1;
    *out = d;
    return 0;
}

static cval do_int(rt *r, cval x, args *a)
{
    static const char *const spec[] = {"default", "base"};
    cval p[2];
    bind_args(r, "int", a, spec, 2, p);
    cval def = is_missing(p[0]) ? ifl_chat_v_int(0) : p[0];
    int64_t base = is_missing(p[1]) ? 10 : want_int(r, p[1], "base");
    switch (x.t) {
    case CV_INT:
        return x;
    case CV_BOOL:
        return ifl_chat_v_int(x.u.b);
    case CV_FLOAT:
        if (isnan(x.u.d) || isinf(x.u.d) || fabs(x.u.d) >= 9.2e18)
            return def;
        return ifl_chat_v_int((int64_t)x.u.d);
    case CV_STR: {
        int64_t v;
        double d;
        if (base >= 2 && base <= 36 && parse_py_int(x.u.s, base, &v) == 0)
            return ifl_chat_v_int(v);
        if (parse_py_float(x.u.s, &d) == 0 && !isnan(d) && !isinf(d) && fabs(d) < 9.2e18)
            return ifl_chat_v_int((int64_t)d);
        return def;
    }
    case CV_UNDEF:
        undef_fail(r, x);
    default:
        return def;
    }
}

static cval do_float(rt *r, cval x, args *a)
{
    static const char *const spec[] = {"default"};
    cval p[1];
    bind_args(r, "float", a, spec, 1, p);
    cval def = is_missing(p[0]) ? ifl_chat_v_float(0.0) : p[0];
    double d;
    switch (x.t) {
    case CV_INT:
        return ifl_chat_v_float((double)x.u.i);
    case CV_BOOL:
        return ifl_chat_v_float(x.u.b);
    case CV_FLOAT:
        return x;
    case CV_STR:
        if (parse_py_float(x.u.s, &d) == 0)
            return ifl_chat_v_float(d);
        return def;
    case CV_UNDEF:
        undef_fail(r, x);
    default:
        return def;
    }
}

/* select/reject/selectattr/rejectattr */
static cval select_filter(rt *r, cval x, args *a, int attr, int want)
{
    if (!ifl_chat_truthy(x)) /* jinja: `if value:` before iterating */
        return gen_of(ifl_chat_v_list(A(r), 0));
    cval *it;
    size_t n;
    items_of(r, x, &it, &n);
    int off = 0;
    const cstr *path = NULL;
    if (attr) {
        if (a->n < 1)
            FAILT(r, "selectattr() missing attribute");
        path = want_str(r, a->v[0], "attribute");
        off = 1;
    }
    const cstr *test = NULL;
    if (a->n > off)
        test = want_str(r, a->v[off], "test name");
    args ta = {a->v + off + 1, a->n > off + 1 ? a->n - off - 1 : 0, a->kn, a->kv, a->nk};
    cval out = ifl_chat_v_list(A(r), n);
    for (size_t i = 0; i < n; i++) {
        cval v = path ? attr_get(r, it[i], path) : it[i];
        int ok = test ? ifl_chat_test(r, test, v, &ta) : ifl_chat_truthy(v);
        if (ok == want)
            out.u.l->v[out.u.l->n++] = it[i];
    }
    return gen_of(out);
}

static cval map_filter(rt *r, cval x, args *a)
{
    if (!ifl_chat_truthy(x))
        return gen_of(ifl_chat_v_list(A(r), 0));
    cval *it;
    size_t n;
    items_of(r, x, &it, &n);
    cval out = ifl_chat_v_list(A(r), n);
    const cstr *attr = NULL;
    cval def = {.t = CV_MISSING};
    for (int k = 0; k < a->nk; k++) {
        if (str_is(a->kn[k], "attribute"))
            attr = want_str(r, a->kv[k], "attribute");
        else if (str_is(a->kn[k], "default"))
            def = a->kv[k];
    }
    if (attr) {
        for (size_t i = 0; i < n; i++) {
            cval v = attr_get(r, it[i], attr);
            if (v.t == CV_UNDEF && !is_missing(def))
                v = def;
            out.u.l->v[out.u.l->n++] = v;
        }
        return gen_of(out);
    }
    if (a->n < 1)
        FAILT(r, "map requires a filter argument");
    const cstr *fname = want_str(r, a->v[0], "filter name");
    args fa = {a->v + 1, a->n - 1, a->kn, a->kv, a->nk};
    for (size_t i = 0; i < n; i++)
        out.u.l->v[out.u.l->n++] = ifl_chat_filter(r, fname, it[i], &fa);
    return gen_of(out);
}

static cval first_last(rt *r, cval x, int last)
{
    if (last && x.t == CV_LIST && (x.f & CVF_GEN))
        FAILT(r, "'generator' object is not reversible");
    cval *it;
    size_t n;
    items_of(r, x, &it, &n);
    if (n == 0)
        return ifl_chat_v_undef(
            ifl_chat_fmtstr(A(r), "No %s item, sequence was empty.", last ? "last" : "first"));
    return it[last ? n - 1 : 0];
}

static cval min_max(rt *r, cval x, args *a, int want_max)
{
    static const char *const spec[] = {"case_sensitive", "attribute"};
    cval p[2];
    bind_args(r, want_max ? "max" : "min", a, spec, 2, p);
    int cs = !is_missing(p[0]) && ifl_chat_truthy(p[0]);
    const cstr *attr = (!is_missing(p[1]) && p[1].t != CV_NONE) ? S(r, p[1]) : NULL;
    cval *it;
    size_t n;
    items_of(r, x, &it, &n);
    if (n == 0)
        return ifl_chat_v_undef(ifl_chat_fmtstr(A(r), "No aggregated item, sequence was empty."));
    size_t best = 0;
    cval bk = sort_key(r, it[0], attr, cs);
    for (size_t i = 1; i < n; i++) {
        cval k = sort_key(r, it[i], attr, cs);
        int c = ifl_chat_compare(r, k, bk, want_max ? ">" : "<");
        if (want_max ? c > 0 : c < 0) {
            best = i;
            bk = k;
        }
    }
    return it[best];
}

cval ifl_chat_filter(rt *r, const cstr *name, cval x, args *a)
{
    const char *f = name->p;
    cval p[4];
    ifl_chat_rt_steps(r, 1);
    int safe = x.t == CV_STR && (x.f & CVF_SAFE);
    if (safe && (!strcmp(f, "trim") || !strcmp(f, "upper") || !strcmp(f, "lower") ||
                 !strcmp(f, "capitalize") || !strcmp(f, "indent"))) {
        /* markupsafe.Markup keeps its class through these str methods */
        x.f = 0;
        cval v = ifl_chat_filter(r, name, x, a);
        v.f = CVF_SAFE;
        return v;
    }
    if (!strcmp(f, "tojson"))
        return tojson(r, x, a);
    if (!strcmp(f, "length") || !strcmp(f, "count"))
        return ifl_chat_v_int(length_of(r, x));
    if (!strcmp(f, "trim")) {
        static const char *const spec[] = {"chars"};
        bind_args(r, f, a, spec, 1, p);
        return ifl_chat_strip(r, S(r, x), ifl_chat_opt_chars(r, p[0]), 1, 1);
    }
    if (!strcmp(f, "default") || !strcmp(f, "d")) {
        static const char *const spec[] = {"default_value", "boolean"};
        bind_args(r, f, a, spec, 2, p);
        cval def = is_missing(p[0]) ? mkstr(r, "", 0) : p[0];
        int boolean = !is_missing(p[1]) && ifl_chat_truthy(p[1]);
        if (x.t == CV_UNDEF || x.t == CV_MISSING || (boolean && !ifl_chat_truthy(x)))
            return def;
        return x;
    }
    if (!strcmp(f, "string"))
        return ifl_chat_to_str(r, x);
    if (!strcmp(f, "safe")) {
        cval v = ifl_chat_to_str(r, x);
        v.f = CVF_SAFE;
        return v;
    }
    if (!strcmp(f, "items")) {
        if (x.t == CV_UNDEF)
            return gen_of(ifl_chat_v_list(A(r), 0));
        if (x.t != CV_DICT)
            FAILT(r, "Can only get item pairs from a mapping.");
        return gen_of(dict_items(r, x));
    }
    if (!strcmp(f, "upper"))
        return ifl_chat_case_map(r, S(r, x), 'u');
    if (!strcmp(f, "lower"))
        return ifl_chat_case_map(r, S(r, x), 'l');
    if (!strcmp(f, "capitalize"))
        return ifl_chat_case_map(r, S(r, x), 'c');
    if (!strcmp(f, "title"))
        return ifl_chat_jinja_title(r, S(r, x));
    if (!strcmp(f, "join")) {
        static const char *const spec[] = {"d", "attribute"};
        bind_args(r, f, a, spec, 2, p);
        const cstr *sep = is_missing(p[0]) ? NULL : S(r, p[0]);
        const cstr *attr = (!is_missing(p[1]) && p[1].t != CV_NONE) ? S(r, p[1]) : NULL;
        cval *it;
        size_t n;
        items_of(r, x, &it, &n);
        struct ifl_chat_sb b = {0};
        for (size_t i = 0; i < n; i++) {
            if (i && sep)
                ifl_chat_sb_put(A(r), &b, sep->p, sep->len);
            ifl_chat_str_of(r, &b, attr ? attr_get(r, it[i], attr) : it[i]);
        }
        return ifl_chat_sb_val(A(r), &b);
    }
    if (!strcmp(f, "list"))
        return list_of(r, x);
    if (!strcmp(f, "replace")) {
        static const char *const spec[] = {"old", "new", "count"};
        bind_args(r, f, a, spec, 3, p);
        if (is_missing(p[0]) || is_missing(p[1]))
            FAILT(r, "replace() missing required argument");
        int64_t cnt = (is_missing(p[2]) || p[2].t == CV_NONE) ? -1 : want_int(r, p[2], "count");
        return ifl_chat_replace(r, S(r, x), S(r, p[0]), S(r, p[1]), cnt);
    }
    if (!strcmp(f, "select") || !strcmp(f, "reject"))
        return select_filter(r, x, a, 0, f[0] == 's');
    if (!strcmp(f, "selectattr") || !strcmp(f, "rejectattr"))
        return select_filter(r, x, a, 1, f[0] == 's');
    if (!strcmp(f, "map"))
        return map_filter(r, x, a);
    if (!strcmp(f, "indent"))
        return indent(r, x, a);
    if (!strcmp(f, "int"))
        return do_int(r, x, a);
    if (!strcmp(f, "float"))
        return do_float(r, x, a);
    if (!strcmp(f, "first") || !strcmp(f, "last"))
        return first_last(r, x, f[0] == 'l');
    if (!strcmp(f, "min") || !strcmp(f, "max"))
        return min_max(r, x, a, f[1] == 'a');
    if (!strcmp(f, "unique")) {
        static const char *const spec[] = {"case_sensitive", "attribute"};
        bind_args(r, f, a, spec, 2, p);
        int cs = !is_missing(p[0]) && ifl_chat_truthy(p[0]);
        const cstr *attr = (!is_missing(p[1]) && p[1].t != CV_NONE) ? S(r, p[1]) : NULL;
        cval *it;
        size_t n;
        items_of(r, x, &it, &n);
        cval out = ifl_chat_v_list(A(r), n);
        cval *seen = ifl_chat_alloc(A(r), (n ? n : 1) * sizeof *seen);
        size_t ns = 0;
        for (size_t i = 0; i < n; i++) {
            cval k = sort_key(r, it[i], attr, cs);
            if (!ifl_chat_hashable(k, 0))
                FAILT(r, "unhashable type: '%s'", ifl_chat_unhashable_name(k));
            size_t j;
            for (j = 0; j < ns; j++)
                if (ifl_chat_equal(r, seen[j], k, 0))
                    break;
            if (j == ns) {
                seen[ns++] = k;
                out.u.l->v[out.u.l->n++] = it[i];
            }
        }
        return gen_of(out);
    }
    if (!strcmp(f, "sort")) {
        static const char *const spec[] = {"reverse", "case_sensitive", "attribute"};
        bind_args(r, f, a, spec, 3, p);
        int rev = !is_missing(p[0]) && ifl_chat_truthy(p[0]);
        int cs = !is_missing(p[1]) && ifl_chat_truthy(p[1]);
        const cstr *attr = (!is_missing(p[2]) && p[2].t != CV_NONE) ? S(r, p[2]) : NULL;
        cval *it;
        size_t n;
        items_of(r, x, &it, &n);
        cval *keys = ifl_chat_alloc(A(r), (n ? n : 1) * sizeof *keys);
        for (size_t i = 0; i < n; i++)
            keys[i] = sort_key(r, it[i], attr, cs);
        size_t *ord = sorted_order(r, keys, n, rev);
        cval out = ifl_chat_v_list(A(r), n);
        for (size_t i = 0; i < n; i++)
            out.u.l->v[i] = it[ord[i]];
        out.u.l->n = n;
        return out;
    }
    if (!strcmp(f, "dictsort")) {
        static const char *const spec[] = {"case_sensitive", "by", "reverse"};
        bind_args(r, f, a, spec, 3, p);
        int cs = !is_missing(p[0]) && ifl_chat_truthy(p[0]);
        int by_value = !is_missing(p[1]) && p[1].t == CV_STR && str_is(p[1].u.s, "value");
        int rev = !is_missing(p[2]) && ifl_chat_truthy(p[2]);
        if (x.t == CV_UNDEF)
            undef_fail(r, x);
        if (x.t != CV_DICT)
            ifl_chat_fail(r, IFL_EFORMAT, "AttributeError", "'%s' object has no attribute 'items'",
                          ifl_chat_type_name(x));
        size_t n = x.u.m->n;
        cval *keys = ifl_chat_alloc(A(r), (n ? n : 1) * sizeof *keys);
        for (size_t i = 0; i < n; i++)
            keys[i] = sort_key(r, by_value ? x.u.m->v[i] : x.u.m->k[i], NULL, cs);
        size_t *ord = sorted_order(r, keys, n, rev);
        cval out = ifl_chat_v_list(A(r), n);
        for (size_t i = 0; i < n; i++)
            out.u.l->v[i] = tuple2(r, x.u.m->k[ord[i]], x.u.m->v[ord[i]]);
        out.u.l->n = n;
        return out;
    }
    if (!strcmp(f, "reverse")) {
        if (x.t == CV_STR) {
            cval *it;
            size_t n;
            items_of(r, x, &it, &n);
            struct ifl_chat_sb b = {0};
            for (size_t i = n; i > 0; i--)
                ifl_chat_sb_put(A(r), &b, it[i - 1].u.s->p, it[i - 1].u.s->len);
            return ifl_chat_sb_val(A(r), &b);
        }
        if (x.t != CV_LIST && x.t != CV_DICT && x.t != CV_UNDEF)
            ifl_chat_fail(r, IFL_EFORMAT, "FilterArgumentError", "argument must be iterable");
        cval l = list_of(r, x);
        for (size_t i = 0; i < l.u.l->n / 2; i++) {
            cval t = l.u.l->v[i];
            l.u.l->v[i] = l.u.l->v[l.u.l->n - 1 - i];
            l.u.l->v[l.u.l->n - 1 - i] = t;
        }
        return gen_of(l);
    }
    if (!strcmp(f, "abs")) {
        if (x.t == CV_INT) {
            if (x.u.i == INT64_MIN)
                ifl_chat_fail(r, IFL_EFORMAT, "OverflowError", "integer overflow");
            return ifl_chat_v_int(x.u.i < 0 ? -x.u.i : x.u.i);
        }
        if (x.t == CV_BOOL)
            return ifl_chat_v_int(x.u.b);
        if (x.t == CV_FLOAT)
            return ifl_chat_v_float(fabs(x.u.d));
        FAILT(r, "bad operand type for abs(): '%s'", ifl_chat_type_name(x));
    }
    if (!strcmp(f, "round")) {
        static const char *const spec[] = {"precision", "method"};
        bind_args(r, f, a, spec, 2, p);
        int64_t prec = is_missing(p[0]) ? 0 : want_int(r, p[0], "precision");
        const char *method = (!is_missing(p[1]) && p[1].t == CV_STR) ? p[1].u.s->p : "common";
        if (x.t != CV_INT && x.t != CV_FLOAT && x.t != CV_BOOL)
            FAILT(r, "type %s doesn't define __round__ method", ifl_chat_type_name(x));
        if (x.t != CV_FLOAT && !strcmp(method, "common") && prec >= 0)
            return ifl_chat_v_int(x.t == CV_INT ? x.u.i : x.u.b); /* Python round(int) is an int */
        double d = x.t == CV_FLOAT ? x.u.d : x.t == CV_INT ? (double)x.u.i : x.u.b;
        if (prec > 300)
            prec = 300;
        if (prec < -300)
            prec = -300;
        double m = pow(10.0, (double)prec);
        double v = d * m;
        if (!strcmp(method, "ceil"))
            v = ceil(v);
        else if (!strcmp(method, "floor"))
            v = floor(v);
        else
            v = nearbyint(v);
        return ifl_chat_v_float(v / m);
    }
    if (!strcmp(f, "sum")) {
        static const char *const spec[] = {"attribute", "start"};
        bind_args(r, f, a, spec, 2, p);
        const cstr *attr = (!is_missing(p[0]) && p[0].t != CV_NONE) ? S(r, p[0]) : NULL;
        cval acc = is_missing(p[1]) ? ifl_chat_v_int(0) : p[1];
        cval *it;
        size_t n;
        items_of(r, x, &it, &n);
        for (size_t i = 0; i < n; i++) {
            cval v = attr ? attr_get(r, it[i], attr) : it[i];
            int fl = acc.t == CV_FLOAT || v.t == CV_FLOAT;
            if ((acc.t != CV_INT && acc.t != CV_FLOAT && acc.t != CV_BOOL) ||
                (v.t != CV_INT && v.t != CV_FLOAT && v.t != CV_BOOL))
                FAILT(r, "unsupported operand type(s) for +: '%s' and '%s'",
                      ifl_chat_type_name(acc), ifl_chat_type_name(v));
            if (fl)
                acc = ifl_chat_v_float(
                    (acc.t == CV_FLOAT ? acc.u.d : (double)(acc.t == CV_INT ? acc.u.i : acc.u.b)) +
                    (v.t == CV_FLOAT ? v.u.d : (double)(v.t == CV_INT ? v.u.i : v.u.b)));
            else {
                int64_t z;
                if (__builtin_add_overflow(acc.t == CV_INT ? acc.u.i : acc.u.b,
                                           v.t == CV_INT ? v.u.i : v.u.b, &z))
                    ifl_chat_fail(r, IFL_EFORMAT, "OverflowError", "integer overflow");
                acc = ifl_chat_v_int(z);
            }
        }
        return acc;
    }
    if (!strcmp(f, "wordcount")) {
        const cstr *s = S(r, x);
        int64_t words = 0;
        int in = 0;
        size_t i = 0;
        while (i < s->len) {
            size_t adv;
            uint32_t c = ifl_chat_utf8_dec(s->p + i, s->len - i, &adv);
            int w = ifl_chat_is_alpha(c) || is_digit_c(c) || c == '_';
            if (w && !in)
                words++;
            in = w;
            i += adv;
        }
        return ifl_chat_v_int(words);
    }
    if (!strcmp(f, "center")) {
        static const char *const spec[] = {"width"};
        bind_args(r, f, a, spec, 1, p);
        int64_t w = is_missing(p[0]) ? 80 : want_int(r, p[0], "width");
        return ifl_chat_center(r, S(r, x), w, ifl_chat_mkstr(A(r), " ", 1));
    }
    if (!strcmp(f, "escape") || !strcmp(f, "e"))
        return ifl_chat_escape(r, x);
    if (!strcmp(f, "forceescape")) {
        cval v = ifl_chat_to_str(r, x);
        v.f = 0;
        return ifl_chat_escape(r, v);
    }
    if (!strcmp(f, "attr")) {
        if (a->n < 1)
            FAILT(r, "attr() missing name");
        return ifl_chat_getattr(r, x, S(r, a->v[0]));
    }
    if (!strcmp(f, "batch")) {
        static const char *const spec[] = {"linecount", "fill_with"};
        bind_args(r, f, a, spec, 2, p);
        int64_t k = is_missing(p[0]) ? 1 : want_int(r, p[0], "linecount");
        if (k <= 0)
            ifl_chat_fail(r, IFL_EFORMAT, "ValueError", "batch size must be positive");
        cval *it;
        size_t n;
        items_of(r, x, &it, &n);
        cval out = ifl_chat_v_list(A(r), 4), cur = {.t = CV_NONE};
        for (size_t i = 0; i < n; i++) {
            if (cur.t == CV_NONE || (int64_t)cur.u.l->n == k) {
                cur = ifl_chat_v_list(A(r), (size_t)(k < 64 ? k : 64));
                ifl_chat_list_push(A(r), out.u.l, cur);
            }
            ifl_chat_list_push(A(r), cur.u.l, it[i]);
        }
        if (cur.t != CV_NONE && !is_missing(p[1]))
            while ((int64_t)cur.u.l->n < k)
                ifl_chat_list_push(A(r), cur.u.l, p[1]);
        return gen_of(out);
    }
    ifl_chat_fail(r, IFL_EFORMAT, "TemplateRuntimeError", "No filter named '%s'.", f);
}
