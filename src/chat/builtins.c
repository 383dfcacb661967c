/*
 * Built-ins of the chat-template interpreter besides the filters
 * (filters.c): Jinja2's tests, the Python dict/list methods a sandboxed
 * template can call (str methods live in strings.c), and the globals
 * transformers provides (range, namespace, dict, raise_exception,
 * strftime_now).
 *
 * Each follows its Python original (jinja2/tests.py, CPython's methods)
 * including argument names and defaults.
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

/* ---- tests ---- */

int ifl_chat_test(rt *r, const cstr *name, cval x, args *a)
{
    const char *t = name->p;
    cval arg = a->n > 0 ? a->v[0] : (a->nk > 0 ? a->kv[0] : (cval){.t = CV_MISSING});
    ifl_chat_rt_steps(r, 1);
    static const char *const unary[] = {"defined",  "undefined", "none",    "string",   "mapping",
                                        "iterable", "sequence",  "boolean", "true",     "false",
                                        "number",   "integer",   "float",   "callable", "odd",
                                        "even",     "lower",     "upper",   "escaped",  NULL};
    for (int i = 0; unary[i]; i++)
        if (!strcmp(t, unary[i]) && a->n + a->nk > 0)
            FAILT(r, "test_%s() takes 1 positional argument but %d were given", t,
                  1 + a->n + a->nk);
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
            ifl_chat_fail(r, IFL_EFORMAT, "ZeroDivisionError",
                          "integer division or modulo by zero");
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

static const char *const dict_methods[] = {"get", "items",  "keys",       "values", "copy",
                                           "pop", "update", "setdefault", NULL};
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
            FAILT(r, "%s() takes %s arguments (%d given)", m, ins ? "exactly 2" : "at most 1",
                  a->n);
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

static const char *const globals[] = {"range",           "namespace",    "dict",
                                      "raise_exception", "strftime_now", NULL};

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
