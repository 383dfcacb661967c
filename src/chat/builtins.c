/*
 * Built-ins of the chat-template interpreter: Jinja2's filters and tests
 * that chat templates use, the Python dict/list methods a sandboxed
 * template can call (str methods live in strings.c), and the globals
 * transformers provides (range, namespace, dict, raise_exception,
 * strftime_now).
 *
 * Each follows its Python original (jinja2/filters.py, jinja2/tests.py,
 * CPython's str methods) including argument names, defaults and the odd
 * corner (indent's trailing-newline quirk, default() only replacing
 * Undefined unless boolean=true, map/select/reject/unique returning
 * generators that tojson refuses).
 *
 * Deliberate difference from ImmutableSandboxedEnvironment: list.append /
 * pop / insert / extend and dict.pop / update / setdefault work instead of
 * raising SecurityError (some templates, e.g. Kimi K2's, rely on them, and
 * llama.cpp allows them).
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

static void items_of(rt *r, cval v, cval **items, size_t *n)
{
    ifl_chat_iterate(r, v, items, n);
}

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

static cval tuple2(rt *r, cval a, cval b)
{
    cval t = ifl_chat_v_list(A(r), 2);
    t.f = CVF_TUPLE;
    t.u.l->v[0] = a;
    t.u.l->v[1] = b;
    t.u.l->n = 2;
    return t;
}

static cval dict_items(rt *r, cval d)
{
    cval out = ifl_chat_v_list(A(r), d.u.m->n);
    for (size_t i = 0; i < d.u.m->n; i++)
        out.u.l->v[i] = tuple2(r, d.u.m->k[i], d.u.m->v[i]);
    out.u.l->n = d.u.m->n;
    return out;
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
        ifl_chat_fail(r, IFL_EFORMAT, "AttributeError", "'list' object has no attribute 'splitlines'");
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
        int d = (*p >= '0' && *p <= '9') ? *p - '0' : ((*p | 32) >= 'a' && (*p | 32) <= 'z') ? (*p | 32) - 'a' + 10 : 99;
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
        return ifl_chat_v_undef(ifl_chat_fmtstr(A(r), "No %s item, sequence was empty.",
                                                last ? "last" : "first"));
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
        return ifl_chat_v_undef(
            ifl_chat_fmtstr(A(r), "No aggregated item, sequence was empty."));
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
                acc = ifl_chat_v_float((acc.t == CV_FLOAT ? acc.u.d : (double)(acc.t == CV_INT ? acc.u.i : acc.u.b)) +
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

/* ---- tests ---- */

int ifl_chat_test(rt *r, const cstr *name, cval x, args *a)
{
    const char *t = name->p;
    cval arg = a->n > 0 ? a->v[0] : (a->nk > 0 ? a->kv[0] : (cval){.t = CV_MISSING});
    ifl_chat_rt_steps(r, 1);
    static const char *const unary[] = {"defined", "undefined", "none", "string", "mapping",
                                        "iterable", "sequence", "boolean", "true", "false",
                                        "number", "integer", "float", "callable", "odd", "even",
                                        "lower", "upper", "escaped", NULL};
    for (int i = 0; unary[i]; i++)
        if (!strcmp(t, unary[i]) && a->n + a->nk > 0)
            FAILT(r, "test_%s() takes 1 positional argument but %d were given", t, 1 + a->n + a->nk);
    if (!strcmp(t, "defined"))
        return x.t != CV_UNDEF && x.t != CV_MISSING;
    if (!strcmp(t, "undefined"))
        return x.t == CV_UNDEF || x.t == CV_MISSING;
    if (!strcmp(t, "none"))
        return x.t == CV_NONE;
    if (!strcmp(t, "string"))
        return x.t == CV_STR;
    if (!strcmp(t, "mapping"))
        return x.t == CV_DICT;
    if (!strcmp(t, "iterable"))
        return x.t == CV_STR || x.t == CV_LIST || x.t == CV_DICT || x.t == CV_UNDEF ||
               x.t == CV_LOOP;
    if (!strcmp(t, "sequence"))
        return x.t == CV_STR || (x.t == CV_LIST && !(x.f & CVF_LAZY)) || x.t == CV_DICT ||
               x.t == CV_UNDEF;
    if (!strcmp(t, "boolean"))
        return x.t == CV_BOOL;
    if (!strcmp(t, "true"))
        return x.t == CV_BOOL && x.u.b;
    if (!strcmp(t, "false"))
        return x.t == CV_BOOL && !x.u.b;
    if (!strcmp(t, "number"))
        return x.t == CV_INT || x.t == CV_FLOAT || x.t == CV_BOOL;
    if (!strcmp(t, "integer"))
        return x.t == CV_INT;
    if (!strcmp(t, "float"))
        return x.t == CV_FLOAT;
    if (!strcmp(t, "callable"))
        return x.t == CV_FUNC;
    if (!strcmp(t, "odd") || !strcmp(t, "even")) {
        /* value % 2 == 1 (odd) or == 0 (even), with Python's float modulo */
        if (x.t == CV_FLOAT) {
            double m = fmod(x.u.d, 2.0);
            if (m < 0)
                m += 2.0;
            return t[0] == 'o' ? m == 1.0 : m == 0.0;
        }
        if (x.t == CV_UNDEF)
            undef_fail(r, x);
        if (x.t == CV_STR)
            FAILT(r, "not all arguments converted during string formatting");
        int64_t v = want_int(r, x, t);
        return (v & 1) == (t[0] == 'o');
    }
    if (!strcmp(t, "divisibleby")) {
        if (x.t == CV_FLOAT || arg.t == CV_FLOAT) {
            double xv = x.t == CV_FLOAT ? x.u.d : (double)want_int(r, x, t);
            double dv = arg.t == CV_FLOAT ? arg.u.d : (double)want_int(r, arg, t);
            if (dv == 0)
                ifl_chat_fail(r, IFL_EFORMAT, "ZeroDivisionError", "float modulo");
            return fmod(xv, dv) == 0;
        }
        int64_t v = want_int(r, x, t), d = want_int(r, arg, t);
        if (d == 0)
            ifl_chat_fail(r, IFL_EFORMAT, "ZeroDivisionError", "integer division or modulo by zero");
        if (d == -1)
            return 1;
        return v % d == 0;
    }
    if (!strcmp(t, "lower") || !strcmp(t, "upper")) {
        const cstr *s = S(r, x);
        cval m = ifl_chat_case_map(r, s, t[0] == 'l' ? 'l' : 'u');
        int cased = 0;
        size_t i = 0;
        while (i < s->len) {
            size_t adv;
            cased |= ifl_chat_is_cased(ifl_chat_utf8_dec(s->p + i, s->len - i, &adv));
            i += adv;
        }
        return cased && m.u.s->len == s->len && memcmp(m.u.s->p, s->p, s->len) == 0;
    }
    if (!strcmp(t, "sameas")) {
        if (x.t != arg.t)
            return 0;
        if (x.t == CV_NONE || x.t == CV_UNDEF)
            return 1;
        if (x.t == CV_BOOL)
            return x.u.b == arg.u.b;
        if (x.t == CV_INT)
            return x.u.i == arg.u.i && x.u.i >= -5 && x.u.i <= 256;
        return memcmp(&x.u, &arg.u, sizeof x.u) == 0;
    }
    if (!strcmp(t, "escaped"))
        return x.t == CV_STR && (x.f & CVF_SAFE);
    if (!strcmp(t, "in"))
        return ifl_chat_test(r, ifl_chat_mkstr(A(r), "__in", 4), x, a);
    if (!strcmp(t, "__in")) {
        if (arg.t == CV_STR) {
            if (x.t != CV_STR)
                FAILT(r, "'in <string>' requires string as left operand, not %s",
                      ifl_chat_type_name(x));
            return memmem(arg.u.s->p, arg.u.s->len, x.u.s->p, x.u.s->len) != NULL;
        }
        if (arg.t == CV_DICT)
            return ifl_chat_dict_find(arg.u.m, x) != NULL;
        cval *it;
        size_t n;
        items_of(r, arg, &it, &n);
        for (size_t i = 0; i < n; i++)
            if (ifl_chat_equal(r, it[i], x, 0))
                return 1;
        return 0;
    }
    if (!strcmp(t, "eq") || !strcmp(t, "equalto") || !strcmp(t, "=="))
        return ifl_chat_equal(r, x, arg, 0);
    if (!strcmp(t, "ne") || !strcmp(t, "!="))
        return !ifl_chat_equal(r, x, arg, 0);
    if (!strcmp(t, "lt") || !strcmp(t, "lessthan") || !strcmp(t, "<"))
        return ifl_chat_compare(r, x, arg, "<") < 0;
    if (!strcmp(t, "le") || !strcmp(t, "<="))
        return ifl_chat_compare(r, x, arg, "<=") <= 0;
    if (!strcmp(t, "gt") || !strcmp(t, "greaterthan") || !strcmp(t, ">"))
        return ifl_chat_compare(r, x, arg, ">") > 0;
    if (!strcmp(t, "ge") || !strcmp(t, ">="))
        return ifl_chat_compare(r, x, arg, ">=") >= 0;
    ifl_chat_fail(r, IFL_EFORMAT, "TemplateRuntimeError", "No test named '%s'.", t);
}

/* ---- dict and list methods ---- */

static const char *const dict_methods[] = {"get",  "items",  "keys",       "values", "copy",
                                           "pop",  "update", "setdefault", NULL};
static const char *const list_methods[] = {"append", "pop",  "insert", "extend", "index",
                                           "count",  "copy", "remove", NULL};

int ifl_chat_has_method(cval obj, const char *name, size_t len)
{
    switch (obj.t) {
    case CV_STR:
        return ifl_chat_is_str_method(name, len);
    case CV_DICT:
        return find_name(dict_methods, name, len) != NULL;
    case CV_LIST:
        return !(obj.f & CVF_LAZY) && find_name(list_methods, name, len) != NULL;
    default:
        return 0;
    }
}

static cval dict_method(rt *r, cval d, const char *m, args *a)
{
    struct ifl_chat_dict *dm = d.u.m;
    if (!strcmp(m, "get")) {
        if (a->n < 1 || a->n > 2)
            FAILT(r, "get expected 1 or 2 arguments, got %d", a->n);
        cval *v = ifl_chat_dict_find(dm, a->v[0]);
        return v ? *v : arg_or(a, 1, ifl_chat_v_none());
    }
    if (!strcmp(m, "items")) {
        cval out = dict_items(r, d);
        out.f = CVF_VIEW;
        return out;
    }
    if (!strcmp(m, "keys") || !strcmp(m, "values")) {
        cval out = ifl_chat_v_list(A(r), dm->n);
        for (size_t i = 0; i < dm->n; i++)
            out.u.l->v[i] = m[0] == 'k' ? dm->k[i] : dm->v[i];
        out.u.l->n = dm->n;
        out.f = CVF_VIEW | (m[0] == 'k' ? CVF_VIEW_KEYS : CVF_VIEW_VALUES);
        return out;
    }
    if (!strcmp(m, "copy")) {
        cval out = ifl_chat_v_dict(A(r), dm->n);
        for (size_t i = 0; i < dm->n; i++)
            ifl_chat_dict_set(A(r), out.u.m, dm->k[i], dm->v[i]);
        return out;
    }
    if (!strcmp(m, "pop")) {
        if (a->n < 1)
            FAILT(r, "pop expected at least 1 argument, got 0");
        cval old;
        if (ifl_chat_dict_del(dm, a->v[0], &old))
            return old;
        if (a->n > 1)
            return a->v[1];
        struct ifl_chat_sb b = {0};
        ifl_chat_repr_of(r, &b, a->v[0], 0);
        ifl_chat_fail(r, IFL_EFORMAT, "KeyError", "%s", b.p ? b.p : "");
    }
    if (!strcmp(m, "setdefault")) {
        if (a->n < 1)
            FAILT(r, "setdefault expected at least 1 argument, got 0");
        cval *v = ifl_chat_dict_find(dm, a->v[0]);
        if (v)
            return *v;
        cval def = arg_or(a, 1, ifl_chat_v_none());
        ifl_chat_dict_set(A(r), dm, a->v[0], def);
        return def;
    }
    if (!strcmp(m, "update")) {
        if (a->n > 0) {
            if (a->v[0].t != CV_DICT)
                FAILT(r, "update() argument must be a mapping");
            struct ifl_chat_dict *o = a->v[0].u.m;
            for (size_t i = 0; i < o->n; i++)
                ifl_chat_dict_set(A(r), dm, o->k[i], o->v[i]);
        }
        for (int k = 0; k < a->nk; k++)
            ifl_chat_dict_set(A(r), dm, (cval){.t = CV_STR, .u.s = a->kn[k]}, a->kv[k]);
        return ifl_chat_v_none();
    }
    FAILT(r, "'dict' object has no attribute '%s'", m);
}

static cval list_method(rt *r, cval l, const char *m, args *a)
{
    struct ifl_chat_list *lv = l.u.l;
    if (!strcmp(m, "append")) {
        if (a->n != 1)
            FAILT(r, "list.append() takes exactly one argument (%d given)", a->n);
        ifl_chat_list_push(A(r), lv, a->v[0]);
        return ifl_chat_v_none();
    }
    if (!strcmp(m, "extend")) {
        if (a->n != 1)
            FAILT(r, "list.extend() takes exactly one argument (%d given)", a->n);
        cval *it;
        size_t n;
        items_of(r, a->v[0], &it, &n);
        cval *copy = ifl_chat_alloc(A(r), (n ? n : 1) * sizeof *copy);
        if (n)
            memcpy(copy, it, n * sizeof *copy);
        for (size_t i = 0; i < n; i++)
            ifl_chat_list_push(A(r), lv, copy[i]);
        ifl_chat_rt_steps(r, (long long)n);
        return ifl_chat_v_none();
    }
    if (!strcmp(m, "pop") || !strcmp(m, "insert")) {
        int ins = m[0] == 'i';
        if ((ins && a->n != 2) || (!ins && a->n > 1))
            FAILT(r, "%s() takes %s arguments (%d given)", m, ins ? "exactly 2" : "at most 1", a->n);
        int64_t n = (int64_t)lv->n;
        int64_t i = a->n > 0 ? want_int(r, a->v[0], "index") : n - 1;
        if (ins) {
            if (i < 0)
                i += n;
            if (i < 0)
                i = 0;
            if (i > n)
                i = n;
            ifl_chat_list_push(A(r), lv, a->v[1]);
            memmove(lv->v + i + 1, lv->v + i, (size_t)(n - i) * sizeof(cval));
            lv->v[i] = a->v[1];
            return ifl_chat_v_none();
        }
        if (n == 0)
            ifl_chat_fail(r, IFL_EFORMAT, "IndexError", "pop from empty list");
        if (i < 0)
            i += n;
        if (i < 0 || i >= n)
            ifl_chat_fail(r, IFL_EFORMAT, "IndexError", "pop index out of range");
        cval v = lv->v[i];
        memmove(lv->v + i, lv->v + i + 1, (size_t)(n - i - 1) * sizeof(cval));
        lv->n--;
        return v;
    }
    if (!strcmp(m, "index") || !strcmp(m, "count") || !strcmp(m, "remove")) {
        if (a->n < 1)
            FAILT(r, "%s() takes at least 1 argument (0 given)", m);
        int64_t c = 0;
        for (size_t i = 0; i < lv->n; i++)
            if (ifl_chat_equal(r, lv->v[i], a->v[0], 0)) {
                if (m[0] == 'i')
                    return ifl_chat_v_int((int64_t)i);
                if (m[0] == 'r') {
                    memmove(lv->v + i, lv->v + i + 1, (lv->n - i - 1) * sizeof(cval));
                    lv->n--;
                    return ifl_chat_v_none();
                }
                c++;
            }
        if (m[0] != 'c')
            ifl_chat_fail(r, IFL_EFORMAT, "ValueError", "list.%s(x): x not in list", m);
        return ifl_chat_v_int(c);
    }
    if (!strcmp(m, "copy")) {
        cval out = ifl_chat_v_list(A(r), lv->n);
        if (lv->n)
            memcpy(out.u.l->v, lv->v, lv->n * sizeof(cval));
        out.u.l->n = lv->n;
        return out;
    }
    FAILT(r, "'list' object has no attribute '%s'", m);
}

/* markupsafe.Markup's overrides: string results stay Markup, and the
 * arguments that get inserted (replace's new, format's args, join's items)
 * are escaped first. */
cval ifl_chat_method(rt *r, cval self, const char *name, args *a)
{
    ifl_chat_rt_steps(r, 1);
    switch (self.t) {
    case CV_STR:
        return ifl_chat_str_method(r, self, name, a);
    case CV_DICT:
        return dict_method(r, self, name, a);
    case CV_LIST:
        return list_method(r, self, name, a);
    default:
        FAILT(r, "'%s' object has no attribute '%s'", ifl_chat_type_name(self), name);
    }
}

/* ---- globals ---- */

static const char *const globals[] = {"range",        "namespace", "dict", "raise_exception",
                                      "strftime_now", NULL};

const char *ifl_chat_global_name(const char *name, size_t len)
{
    return find_name(globals, name, len);
}

cval ifl_chat_call_global(rt *r, const char *g, args *a)
{
    if (!strcmp(g, "range")) {
        if (a->n < 1 || a->n > 3 || a->nk)
            FAILT(r, "range expected at least 1 argument, got %d", a->n);
        int64_t start = 0, stop, step = 1;
        if (a->n == 1) {
            stop = want_int(r, a->v[0], "range");
        } else {
            start = want_int(r, a->v[0], "range");
            stop = want_int(r, a->v[1], "range");
            if (a->n == 3)
                step = want_int(r, a->v[2], "range");
        }
        if (step == 0)
            ifl_chat_fail(r, IFL_EFORMAT, "ValueError", "range() arg 3 must not be zero");
        double cnt_d = step > 0 ? ((double)stop - (double)start) / (double)step
                                : ((double)start - (double)stop) / (double)-step;
        if (cnt_d > 1e6)
            ifl_chat_fail(r, IFL_EFULL, "OverflowError",
                          "range of more than 1000000 items is not allowed in a template");
        size_t cnt = cnt_d > 0 ? (size_t)ceil(cnt_d) : 0;
        ifl_chat_rt_steps(r, (long long)cnt);
        cval out = ifl_chat_v_list(A(r), cnt);
        for (int64_t i = start; out.u.l->n < cnt && (step > 0 ? i < stop : i > stop); i += step) {
            out.u.l->v[out.u.l->n++] = ifl_chat_v_int(i);
            if (__builtin_add_overflow(i, step, &(int64_t){0}))
                break;
        }
        return out;
    }
    if (!strcmp(g, "namespace") || !strcmp(g, "dict")) {
        cval d = ifl_chat_v_dict(A(r), 4);
        for (int i = 0; i < a->n; i++) {
            if (a->v[i].t != CV_DICT)
                FAILT(r, "%s() positional argument must be a mapping", g);
            struct ifl_chat_dict *o = a->v[i].u.m;
            for (size_t k = 0; k < o->n; k++)
                ifl_chat_dict_set(A(r), d.u.m, o->k[k], o->v[k]);
        }
        for (int k = 0; k < a->nk; k++)
            ifl_chat_dict_set(A(r), d.u.m, (cval){.t = CV_STR, .u.s = a->kn[k]}, a->kv[k]);
        if (g[0] == 'n')
            d.t = CV_NS;
        return d;
    }
    if (!strcmp(g, "raise_exception")) {
        cval m = a->n > 0 ? a->v[0] : (a->nk > 0 ? a->kv[0] : mkstr(r, "", 0));
        const cstr *s = S(r, m);
        ifl_chat_fail(r, IFL_EINVAL, "TemplateError", "%s", s->p);
    }
    if (!strcmp(g, "strftime_now")) {
        if (a->n < 1)
            FAILT(r, "strftime_now() missing 1 required positional argument: 'format'");
        const cstr *fmt = want_str(r, a->v[0], "format");
        if (fmt->len > 256)
            ifl_chat_fail(r, IFL_EINVAL, "ValueError", "strftime format longer than 256 bytes");
        char buf[4096];
        size_t n = fmt->len ? strftime(buf, sizeof buf, fmt->p, ifl_chat_rt_now(r)) : 0;
        return mkstr(r, buf, n);
    }
    FAILT(r, "'%s' is not callable", g);
}
