/*
 * Tree-walking evaluator for chat templates, with Jinja2's semantics where
 * chat templates depend on them:
 *
 *  - Scopes: a for-loop iteration, a macro call and a with block get a new
 *    scope; if blocks do not. {% set %} writes the innermost scope, so a
 *    set inside a loop is gone after it (hence namespace()). Macros see the
 *    scope they were defined in, looked up at call time.
 *  - Undefined is lenient: it prints as "", is falsy, iterates as empty,
 *    has length 0; attribute access, subscripts, calls, arithmetic and
 *    ordering on it raise UndefinedError with Jinja's hint message (e.g.
 *    "'dict object' has no attribute 'description'").
 *  - x.name tries Python attributes (methods) first and then x['name'];
 *    x['name'] the other way round, as jinja2.sandbox does.
 *  - Operators follow Python: and/or return an operand, / is true division,
 *    // and % floor, + on str/list concatenates, * repeats, ~ joins str().
 *
 * Limits: nesting depth (MAX_DEPTH evaluations deep, MAX_CALLS macro calls
 * deep), IFL_CHAT_MAX_STEPS evaluation steps, IFL_CHAT_MAX_OUTPUT bytes of
 * output and IFL_CHAT_MAX_MEMORY bytes of arena; each ends the render with
 * IFL_EFULL. Errors longjmp to ifl_chat_render, which frees the arena.
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/internal.h"
#include "core/err.h"

#define MAX_DEPTH 1500
#define MAX_CALLS 200

typedef struct ifl_chat_node node;

struct ifl_chat_scope {
    struct ifl_chat_scope *parent;
    int n, cap;
    const cstr **names;
    cval *vals;
};
typedef struct ifl_chat_scope scope;

struct ifl_chat_rt {
    struct ifl_chat_arena ar;
    jmp_buf jb;
    int status;
    char msg[IFL_ERR_LEN];
    struct ifl_chat_sb main;
    struct ifl_chat_sb *out;
    long long steps, max_steps;
    size_t max_output;
    int depth, calls;
    scope *root;
    cstr *loop_name;
    struct tm now;
};

_Noreturn void ifl_chat_fail(struct ifl_chat_rt *r, int status, const char *cls, const char *fmt,
                             ...)
{
    int k = snprintf(r->msg, sizeof r->msg, "%s: ", cls);
    if (k < 0 || (size_t)k >= sizeof r->msg)
        k = 0;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->msg + k, sizeof r->msg - (size_t)k, fmt, ap);
    va_end(ap);
    r->status = status;
    longjmp(r->jb, 1);
}

struct ifl_chat_arena *ifl_chat_rt_arena(struct ifl_chat_rt *r)
{
    return &r->ar;
}

void ifl_chat_rt_steps(struct ifl_chat_rt *r, long long n)
{
    r->steps += n;
    if (r->steps > r->max_steps)
        ifl_chat_fail(r, IFL_EFULL, "LimitError", "template ran for more than %lld steps",
                      r->max_steps);
}

const struct tm *ifl_chat_rt_now(struct ifl_chat_rt *r)
{
    return &r->now;
}

static _Noreturn void undefined_error(struct ifl_chat_rt *r, cval u)
{
    ifl_chat_fail(r, IFL_EFORMAT, "UndefinedError", "%s",
                  u.u.s ? u.u.s->p : "'undefined' is undefined");
}

/* ---- scopes ---- */

static scope *scope_new(struct ifl_chat_rt *r, scope *parent)
{
    scope *s = ifl_chat_alloc(&r->ar, sizeof *s);
    memset(s, 0, sizeof *s);
    s->parent = parent;
    return s;
}

static int name_eq(const cstr *a, const cstr *b)
{
    return a == b || (a->len == b->len && memcmp(a->p, b->p, a->len) == 0);
}

static void scope_set(struct ifl_chat_rt *r, scope *s, const cstr *name, cval v)
{
    for (int i = 0; i < s->n; i++)
        if (name_eq(s->names[i], name)) {
            s->vals[i] = v;
            return;
        }
    if (s->n == s->cap) {
        int nc = s->cap ? s->cap * 2 : 8;
        const cstr **nn = ifl_chat_alloc(&r->ar, (size_t)nc * sizeof *nn);
        cval *nv = ifl_chat_alloc(&r->ar, (size_t)nc * sizeof *nv);
        if (s->n) {
            memcpy(nn, s->names, (size_t)s->n * sizeof *nn);
            memcpy(nv, s->vals, (size_t)s->n * sizeof *nv);
        }
        s->names = nn;
        s->vals = nv;
        s->cap = nc;
    }
    s->names[s->n] = name;
    s->vals[s->n] = v;
    s->n++;
}

static cval *scope_find(scope *s, const cstr *name)
{
    for (; s; s = s->parent)
        for (int i = s->n - 1; i >= 0; i--)
            if (name_eq(s->names[i], name))
                return &s->vals[i];
    return NULL;
}

static cval lookup(struct ifl_chat_rt *r, scope *s, const cstr *name)
{
    cval *v = scope_find(s, name);
    if (v)
        return *v;
    const char *g = ifl_chat_global_name(name->p, name->len);
    if (g) {
        cval f = {.t = CV_FUNC};
        f.u.fn = ifl_chat_alloc(&r->ar, sizeof *f.u.fn);
        memset(f.u.fn, 0, sizeof *f.u.fn);
        f.u.fn->kind = FN_GLOBAL;
        f.u.fn->name = g;
        return f;
    }
    struct ifl_chat_sb b = {0};
    ifl_chat_repr_of(r, &b, (cval){.t = CV_STR, .u.s = (cstr *)name}, 0);
    ifl_chat_sb_put(&r->ar, &b, " is undefined", 13);
    return ifl_chat_v_undef(ifl_chat_mkstr(&r->ar, b.p, b.n));
}

/* ---- output ---- */

static void out_put(struct ifl_chat_rt *r, const char *p, size_t n)
{
    if (r->out->n + n > r->max_output)
        ifl_chat_fail(r, IFL_EFULL, "LimitError", "output is larger than %zu bytes",
                      r->max_output);
    ifl_chat_sb_put(&r->ar, r->out, p, n);
}

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
        undefined_error(r, obj);
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

static int64_t index_of(cval k, int *ok)
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
        undefined_error(r, obj);
    case CV_DICT: {
        cval *v = ifl_chat_dict_find(obj.u.m, key);
        if (v)
            return *v;
        break;
    }
    case CV_LIST: {
        if (obj.f & CVF_LAZY)
            break;
        int64_t i = index_of(key, &ok);
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
        int64_t i = index_of(key, &ok);
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

/* Python slice index adjustment (PySlice_AdjustIndices). */
static int64_t slice_count(int64_t len, int64_t *start, int64_t *stop, int64_t step, int has_start,
                           int has_stop)
{
    if (!has_start)
        *start = step < 0 ? len - 1 : 0;
    else {
        if (*start < 0)
            *start += len;
        if (*start < 0)
            *start = step < 0 ? -1 : 0;
        else if (*start >= len)
            *start = step < 0 ? len - 1 : len;
    }
    if (!has_stop)
        *stop = step < 0 ? -1 : len;
    else {
        if (*stop < 0)
            *stop += len;
        if (*stop < 0)
            *stop = step < 0 ? -1 : 0;
        else if (*stop >= len)
            *stop = step < 0 ? len - 1 : len;
    }
    if (step > 0)
        return *stop > *start ? (*stop - *start - 1) / step + 1 : 0;
    return *start > *stop ? (*start - *stop - 1) / (-step) + 1 : 0;
}

static cval eval(struct ifl_chat_rt *r, const node *x, scope *s);

static cval slice_str(struct ifl_chat_rt *r, const cstr *str, const int64_t *iv, const int *has)
{
    {
        size_t n = ifl_chat_utf8_len(str->p, str->len);
        int64_t st = iv[0], sp = iv[1];
        int64_t cnt = slice_count((int64_t)n, &st, &sp, iv[2], has[0], has[1]);
        ifl_chat_rt_steps(r, (long long)(str->len / 16));
        if (n == str->len) {
            if (iv[2] == 1)
                return ifl_chat_v_str(&r->ar, str->p + st, (size_t)cnt);
            char *buf = ifl_chat_alloc(&r->ar, (size_t)cnt + 1);
            for (int64_t i = 0, j = st; i < cnt; i++, j += iv[2])
                buf[i] = str->p[j];
            return ifl_chat_v_str(&r->ar, buf, (size_t)cnt);
        }
        /* code point offsets */
        size_t *off = ifl_chat_alloc(&r->ar, (n + 1) * sizeof *off);
        size_t i = 0, k = 0;
        while (i < str->len) {
            size_t adv;
            off[k++] = i;
            ifl_chat_utf8_dec(str->p + i, str->len - i, &adv);
            i += adv;
        }
        off[n] = str->len;
        struct ifl_chat_sb b = {0};
        for (int64_t c = 0, j = st; c < cnt; c++, j += iv[2])
            ifl_chat_sb_put(&r->ar, &b, str->p + off[j], off[j + 1] - off[j]);
        return ifl_chat_sb_val(&r->ar, &b);
    }
}

static cval do_slice(struct ifl_chat_rt *r, const node *x, scope *s)
{
    cval obj = eval(r, x->a, s);
    cval parts[3];
    int has[3];
    int64_t iv[3] = {0, 0, 1};
    const node *pn[3] = {x->b, x->c, x->d};
    for (int k = 0; k < 3; k++) {
        parts[k] = pn[k] ? eval(r, pn[k], s) : ifl_chat_v_none();
        has[k] = parts[k].t != CV_NONE;
        if (has[k]) {
            int ok;
            iv[k] = index_of(parts[k], &ok);
            if (!ok)
                ifl_chat_fail(r, IFL_EFORMAT, "TypeError",
                              "slice indices must be integers or None or have an __index__ method");
        }
    }
    if (!has[2])
        iv[2] = 1;
    if (iv[2] == 0)
        ifl_chat_fail(r, IFL_EFORMAT, "ValueError", "slice step cannot be zero");
    if (obj.t == CV_UNDEF)
        undefined_error(r, obj);
    if (obj.t == CV_LIST && !(obj.f & CVF_LAZY)) {
        int64_t st = iv[0], sp = iv[1];
        int64_t cnt = slice_count((int64_t)obj.u.l->n, &st, &sp, iv[2], has[0], has[1]);
        cval out = ifl_chat_v_list(&r->ar, (size_t)cnt);
        out.f = obj.f & CVF_TUPLE;
        for (int64_t i = 0, j = st; i < cnt; i++, j += iv[2])
            out.u.l->v[i] = obj.u.l->v[j];
        out.u.l->n = (size_t)cnt;
        ifl_chat_rt_steps(r, cnt);
        return out;
    }
    if (obj.t == CV_STR) {
        cval sub = slice_str(r, obj.u.s, iv, has);
        sub.f = obj.f & CVF_SAFE;
        return sub;
    }
    ifl_chat_fail(r, IFL_EFORMAT, "TypeError", "'%s' object is not subscriptable",
                  ifl_chat_type_name(obj));
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

/* ---- arithmetic ---- */

static int is_num(cval v)
{
    return v.t == CV_BOOL || v.t == CV_INT || v.t == CV_FLOAT;
}

static double as_d(cval v)
{
    return v.t == CV_FLOAT ? v.u.d : v.t == CV_INT ? (double)v.u.i : (double)v.u.b;
}

static int64_t as_i(cval v)
{
    return v.t == CV_INT ? v.u.i : v.u.b;
}

static const char *op_sym(int op)
{
    static const char *const s[] = {"?", "+", "-", "*", "/", "//", "%", "**"};
    return op >= 1 && op <= 7 ? s[op] : "?";
}

static _Noreturn void bad_operands(struct ifl_chat_rt *r, int op, cval a, cval b)
{
    ifl_chat_fail(r, IFL_EFORMAT, "TypeError", "unsupported operand type(s) for %s: '%s' and '%s'",
                  op == OP_POW ? "** or pow()" : op_sym(op), ifl_chat_type_name(a),
                  ifl_chat_type_name(b));
}

static _Noreturn void overflow(struct ifl_chat_rt *r)
{
    ifl_chat_fail(r, IFL_EFORMAT, "OverflowError", "integer result does not fit in 64 bits");
}

static cval repeat(struct ifl_chat_rt *r, cval seq, int64_t k)
{
    if (k < 0)
        k = 0;
    if (seq.t == CV_STR) {
        size_t n = seq.u.s->len;
        if (n && (uint64_t)k > r->ar.cap / n)
            ifl_chat_fail(r, IFL_EFULL, "MemoryError", "string repetition too large");
        char *buf = ifl_chat_alloc(&r->ar, n * (size_t)k + 1);
        for (int64_t i = 0; i < k; i++)
            memcpy(buf + (size_t)i * n, seq.u.s->p, n);
        ifl_chat_rt_steps(r, (long long)(n * (size_t)k / 64));
        return ifl_chat_v_str(&r->ar, buf, n * (size_t)k);
    }
    size_t n = seq.u.l->n;
    if (n && (uint64_t)k > r->ar.cap / (n * sizeof(cval)))
        ifl_chat_fail(r, IFL_EFULL, "MemoryError", "list repetition too large");
    cval out = ifl_chat_v_list(&r->ar, n * (size_t)k);
    out.f = seq.f & CVF_TUPLE;
    for (int64_t i = 0; i < k; i++)
        for (size_t j = 0; j < n; j++)
            out.u.l->v[out.u.l->n++] = seq.u.l->v[j];
    ifl_chat_rt_steps(r, (long long)(n * (size_t)k));
    return out;
}

static cval str_percent(struct ifl_chat_rt *r, cval fmt, cval arg)
{
    cval *args = &arg;
    size_t nargs = 1, used = 0;
    if (arg.t == CV_LIST && (arg.f & CVF_TUPLE)) {
        args = arg.u.l->v;
        nargs = arg.u.l->n;
    }
    struct ifl_chat_sb b = {0};
    const char *p = fmt.u.s->p;
    size_t n = fmt.u.s->len;
    for (size_t i = 0; i < n; i++) {
        if (p[i] != '%') {
            ifl_chat_sb_putc(&r->ar, &b, p[i]);
            continue;
        }
        if (++i >= n)
            ifl_chat_fail(r, IFL_EFORMAT, "ValueError", "incomplete format");
        char c = p[i];
        if (c == '%') {
            ifl_chat_sb_putc(&r->ar, &b, '%');
            continue;
        }
        if (used >= nargs)
            ifl_chat_fail(r, IFL_EFORMAT, "TypeError", "not enough arguments for format string");
        cval a = args[used++];
        if (c == 's')
            ifl_chat_str_of(r, &b, a);
        else if (c == 'r')
            ifl_chat_repr_of(r, &b, a, 0);
        else if ((c == 'd' || c == 'i') && is_num(a)) {
            char tmp[32];
            snprintf(tmp, sizeof tmp, "%" PRId64, a.t == CV_FLOAT ? (int64_t)a.u.d : as_i(a));
            ifl_chat_sb_put(&r->ar, &b, tmp, strlen(tmp));
        } else
            ifl_chat_fail(r, IFL_EFORMAT, "ValueError", "unsupported format character '%c'", c);
    }
    /* a list or dict argument counts as a mapping: leftovers are no error */
    if (used < nargs && !(arg.t == CV_DICT || (arg.t == CV_LIST && !(arg.f & CVF_TUPLE))))
        ifl_chat_fail(r, IFL_EFORMAT, "TypeError",
                      "not all arguments converted during string formatting");
    return ifl_chat_sb_val(&r->ar, &b);
}

static cval binop(struct ifl_chat_rt *r, int op, cval a, cval b)
{
    if (a.t == CV_UNDEF || a.t == CV_MISSING)
        undefined_error(r, a);
    if (op == OP_MOD && a.t == CV_STR && (b.t == CV_UNDEF || b.t == CV_MISSING)) {
        cval v = str_percent(r, a, ifl_chat_v_dict(&r->ar, 0)); /* Undefined acts as a mapping */
        v.f = a.f & CVF_SAFE;
        return v;
    }
    if (b.t == CV_UNDEF || b.t == CV_MISSING)
        undefined_error(r, b);
    if (is_num(a) && is_num(b)) {
        int fl = a.t == CV_FLOAT || b.t == CV_FLOAT;
        int64_t x = as_i(a), y = as_i(b), z;
        double dx = as_d(a), dy = as_d(b);
        switch (op) {
        case OP_ADD:
            if (fl)
                return ifl_chat_v_float(dx + dy);
            if (__builtin_add_overflow(x, y, &z))
                overflow(r);
            return ifl_chat_v_int(z);
        case OP_SUB:
            if (fl)
                return ifl_chat_v_float(dx - dy);
            if (__builtin_sub_overflow(x, y, &z))
                overflow(r);
            return ifl_chat_v_int(z);
        case OP_MUL:
            if (fl)
                return ifl_chat_v_float(dx * dy);
            if (__builtin_mul_overflow(x, y, &z))
                overflow(r);
            return ifl_chat_v_int(z);
        case OP_DIV:
            if (dy == 0)
                ifl_chat_fail(r, IFL_EFORMAT, "ZeroDivisionError", "division by zero");
            return ifl_chat_v_float(dx / dy);
        case OP_FLOORDIV:
        case OP_MOD:
            if (fl) {
                if (dy == 0)
                    ifl_chat_fail(r, IFL_EFORMAT, "ZeroDivisionError",
                                  op == OP_MOD ? "float modulo" : "float floor division by zero");
                double m = fmod(dx, dy);
                if (m != 0 && ((m < 0) != (dy < 0)))
                    m += dy;
                if (op == OP_MOD)
                    return ifl_chat_v_float(m);
                return ifl_chat_v_float(floor((dx - m) / dy + 0.5));
            }
            if (y == 0)
                ifl_chat_fail(r, IFL_EFORMAT, "ZeroDivisionError",
                              "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) {
                if (op == OP_MOD)
                    return ifl_chat_v_int(0);
                overflow(r);
            }
            {
                int64_t q = x / y, m = x % y;
                if (m != 0 && ((m < 0) != (y < 0))) {
                    q -= 1;
                    m += y;
                }
                return ifl_chat_v_int(op == OP_MOD ? m : q);
            }
        case OP_POW:
            if (!fl && y >= 0) {
                int64_t acc = 1, base = x;
                int64_t e = y;
                while (e > 0) {
                    if (e & 1)
                        if (__builtin_mul_overflow(acc, base, &acc))
                            overflow(r);
                    e >>= 1;
                    if (e && __builtin_mul_overflow(base, base, &base))
                        overflow(r);
                }
                return ifl_chat_v_int(acc);
            }
            if (dx == 0 && dy < 0)
                ifl_chat_fail(r, IFL_EFORMAT, "ZeroDivisionError",
                              "0.0 cannot be raised to a negative power");
            return ifl_chat_v_float(pow(dx, dy));
        }
    }
    if (op == OP_ADD) {
        int safe = a.t == CV_STR && b.t == CV_STR && ((a.f | b.f) & CVF_SAFE);
        if (safe) {
            a = ifl_chat_escape(r, a);
            b = ifl_chat_escape(r, b);
        }
        if (a.t == CV_STR && b.t == CV_STR) {
            size_t n = a.u.s->len + b.u.s->len;
            char *buf = ifl_chat_alloc(&r->ar, n + 1);
            memcpy(buf, a.u.s->p, a.u.s->len);
            memcpy(buf + a.u.s->len, b.u.s->p, b.u.s->len);
            ifl_chat_rt_steps(r, (long long)(n / 64));
            cval out = ifl_chat_v_str(&r->ar, buf, n);
            out.f = safe ? CVF_SAFE : 0;
            return out;
        }
        if (a.t == CV_LIST && b.t == CV_LIST && !((a.f | b.f) & CVF_LAZY) &&
            (a.f & CVF_TUPLE) == (b.f & CVF_TUPLE)) {
            size_t n = a.u.l->n + b.u.l->n;
            cval out = ifl_chat_v_list(&r->ar, n);
            out.f = a.f & CVF_TUPLE;
            if (a.u.l->n)
                memcpy(out.u.l->v, a.u.l->v, a.u.l->n * sizeof(cval));
            if (b.u.l->n)
                memcpy(out.u.l->v + a.u.l->n, b.u.l->v, b.u.l->n * sizeof(cval));
            out.u.l->n = n;
            ifl_chat_rt_steps(r, (long long)n);
            return out;
        }
        if (a.t == CV_STR || (a.t == CV_LIST && !(a.f & CVF_LAZY)))
            ifl_chat_fail(r, IFL_EFORMAT, "TypeError",
                          "can only concatenate %s (not \"%s\") to %s", ifl_chat_type_name(a),
                          ifl_chat_type_name(b), ifl_chat_type_name(a));
    }
    if (op == OP_MUL) {
        if ((a.t == CV_STR || (a.t == CV_LIST && !(a.f & CVF_LAZY))) &&
            (b.t == CV_INT || b.t == CV_BOOL))
            return repeat(r, a, as_i(b));
        if ((b.t == CV_STR || (b.t == CV_LIST && !(b.f & CVF_LAZY))) &&
            (a.t == CV_INT || a.t == CV_BOOL))
            return repeat(r, b, as_i(a));
    }
    if (op == OP_MOD && a.t == CV_STR) {
        if (!(a.f & CVF_SAFE))
            return str_percent(r, a, b);
        /* Markup % args escapes the arguments and stays Markup */
        if (b.t == CV_LIST && (b.f & CVF_TUPLE)) {
            cval t = ifl_chat_v_list(&r->ar, b.u.l->n);
            t.f = CVF_TUPLE;
            for (size_t i = 0; i < b.u.l->n; i++)
                t.u.l->v[t.u.l->n++] = ifl_chat_escape(r, b.u.l->v[i]);
            b = t;
        } else if (b.t != CV_LIST && b.t != CV_DICT) {
            b = ifl_chat_escape(r, b);
        }
        cval v = str_percent(r, a, b);
        v.f = CVF_SAFE;
        return v;
    }
    bad_operands(r, op, a, b);
}

static int contains(struct ifl_chat_rt *r, cval container, cval item)
{
    switch (container.t) {
    case CV_STR:
        if (item.t != CV_STR)
            ifl_chat_fail(r, IFL_EFORMAT, "TypeError",
                          "'in <string>' requires string as left operand, not %s",
                          ifl_chat_type_name(item));
        ifl_chat_rt_steps(r, (long long)(container.u.s->len / 32));
        return memmem(container.u.s->p, container.u.s->len, item.u.s->p, item.u.s->len) != NULL;
    case CV_LIST:
        for (size_t i = 0; i < container.u.l->n; i++)
            if (ifl_chat_equal(r, container.u.l->v[i], item, 0))
                return 1;
        return 0;
    case CV_DICT:
        if (!ifl_chat_hashable(item, 0))
            ifl_chat_fail(r, IFL_EFORMAT, "TypeError", "unhashable type: '%s'",
                          ifl_chat_unhashable_name(item));
        return ifl_chat_dict_find(container.u.m, item) != NULL;
    case CV_UNDEF:
    case CV_MISSING:
        return 0;
    default:
        ifl_chat_fail(r, IFL_EFORMAT, "TypeError", "argument of type '%s' is not iterable",
                      ifl_chat_type_name(container));
    }
}

static int compare_op(struct ifl_chat_rt *r, int op, cval a, cval b)
{
    switch (op) {
    case OP_EQ:
        return ifl_chat_equal(r, a, b, 0);
    case OP_NE:
        return !ifl_chat_equal(r, a, b, 0);
    case OP_LT:
        return ifl_chat_compare(r, a, b, "<") < 0;
    case OP_LE:
        return ifl_chat_compare(r, a, b, "<=") <= 0;
    case OP_GT:
        return ifl_chat_compare(r, a, b, ">") > 0;
    case OP_GE:
        return ifl_chat_compare(r, a, b, ">=") >= 0;
    case OP_IN:
        return contains(r, b, a);
    case OP_NOTIN:
        return !contains(r, b, a);
    }
    return 0;
}

/* ---- calls ---- */

static void eval_args(struct ifl_chat_rt *r, const node *x, scope *s, struct ifl_chat_args *a,
                      int extra_kw)
{
    a->n = x->nv;
    a->v = ifl_chat_alloc(&r->ar, (size_t)(x->nv + 1) * sizeof(cval));
    for (int i = 0; i < x->nv; i++)
        a->v[i] = eval(r, x->v[i], s);
    a->nk = x->nw;
    a->kn = ifl_chat_alloc(&r->ar, (size_t)(x->nw + extra_kw + 1) * sizeof(cstr *));
    a->kv = ifl_chat_alloc(&r->ar, (size_t)(x->nw + extra_kw + 1) * sizeof(cval));
    for (int i = 0; i < x->nw; i++) {
        a->kn[i] = x->names[i];
        a->kv[i] = eval(r, x->w[i], s);
    }
}

static int exec(struct ifl_chat_rt *r, const node *x, scope *s);

static cval capture(struct ifl_chat_rt *r, const node *body, scope *s)
{
    struct ifl_chat_sb *saved = r->out;
    struct ifl_chat_sb buf = {0};
    r->out = &buf;
    exec(r, body, s);
    r->out = saved;
    return ifl_chat_sb_val(&r->ar, &buf);
}

static cval call_macro(struct ifl_chat_rt *r, struct ifl_chat_func *fn, struct ifl_chat_args *a)
{
    const node *m = fn->macro;
    if (++r->calls > MAX_CALLS)
        ifl_chat_fail(r, IFL_EFULL, "RecursionError",
                      "macro calls nest deeper than %d levels", MAX_CALLS);
    scope *s = scope_new(r, fn->closure);
    const char *mname = m->kind == S_MACRO ? m->s->p : "caller";
    if (a->n > m->nnames) {
        cval va = ifl_chat_v_list(&r->ar, (size_t)(a->n - m->nnames));
        va.f = CVF_TUPLE;
        for (int i = m->nnames; i < a->n; i++)
            ifl_chat_list_push(&r->ar, va.u.l, a->v[i]);
        scope_set(r, s, ifl_chat_mkstr(&r->ar, "varargs", 7), va);
    } else {
        scope_set(r, s, ifl_chat_mkstr(&r->ar, "varargs", 7), ifl_chat_v_list(&r->ar, 0));
    }
    cval kw = ifl_chat_v_dict(&r->ar, 0);
    for (int k = 0; k < a->nk; k++) {
        int found = 0;
        for (int i = 0; i < m->nnames; i++)
            if (name_eq(m->names[i], a->kn[k])) {
                if (i < a->n)
                    ifl_chat_fail(r, IFL_EFORMAT, "TypeError",
                                  "macro '%s' got multiple values for argument '%s'", mname,
                                  a->kn[k]->p);
                found = 1;
            }
        if (!found) {
            if (a->kn[k]->len == 6 && !memcmp(a->kn[k]->p, "caller", 6))
                scope_set(r, s, a->kn[k], a->kv[k]);
            else
                ifl_chat_dict_set(&r->ar, kw.u.m, (cval){.t = CV_STR, .u.s = a->kn[k]}, a->kv[k]);
        }
    }
    scope_set(r, s, ifl_chat_mkstr(&r->ar, "kwargs", 6), kw);
    for (int i = 0; i < m->nnames; i++) {
        cval v = {.t = CV_MISSING};
        if (i < a->n)
            v = a->v[i];
        else
            for (int k = 0; k < a->nk; k++)
                if (name_eq(m->names[i], a->kn[k]))
                    v = a->kv[k];
        if (v.t == CV_MISSING) {
            if (i < m->nw && m->w[i])
                v = eval(r, m->w[i], s);
            else
                v = ifl_chat_v_undef(
                    ifl_chat_fmtstr(&r->ar, "parameter '%s' was not provided", m->names[i]->p));
        }
        scope_set(r, s, m->names[i], v);
    }
    cval out = capture(r, m->b, s);
    r->calls--;
    return out;
}

static cval loop_method(struct ifl_chat_rt *r, struct ifl_chat_loop *lp, const char *name,
                        struct ifl_chat_args *a)
{
    if (!strcmp(name, "cycle")) {
        if (a->n == 0)
            ifl_chat_fail(r, IFL_EFORMAT, "TypeError", "no items for cycling given");
        return a->v[lp->i % (size_t)a->n];
    }
    /* changed(*values): true on the first call and whenever values differ */
    return ifl_chat_v_bool(1);
}

cval ifl_chat_call(struct ifl_chat_rt *r, cval fn, struct ifl_chat_args *a)
{
    if (fn.t == CV_UNDEF || fn.t == CV_MISSING)
        undefined_error(r, fn);
    if (fn.t != CV_FUNC)
        ifl_chat_fail(r, IFL_EFORMAT, "TypeError", "'%s' object is not callable",
                      ifl_chat_type_name(fn));
    struct ifl_chat_func *f = fn.u.fn;
    switch (f->kind) {
    case FN_MACRO:
        return call_macro(r, f, a);
    case FN_GLOBAL:
        return ifl_chat_call_global(r, f->name, a);
    default:
        if (f->self.t == CV_LOOP)
            return loop_method(r, f->self.u.lp, f->name, a);
        return ifl_chat_method(r, f->self, f->name, a);
    }
}

/* ---- expressions ---- */

static cval eval_inner(struct ifl_chat_rt *r, const node *x, scope *s)
{
    switch (x->kind) {
    case N_LIT:
        return x->lit;
    case N_NAME:
        return lookup(r, s, x->s);
    case N_ATTR:
        return ifl_chat_getattr(r, eval(r, x->a, s), x->s);
    case N_ITEM: {
        cval obj = eval(r, x->a, s);
        return ifl_chat_getitem(r, obj, eval(r, x->b, s));
    }
    case N_SLICE:
        return do_slice(r, x, s);
    case N_CALL: {
        struct ifl_chat_args a;
        if (x->a->kind == N_ATTR) {
            cval obj = eval(r, x->a->a, s);
            if ((obj.t == CV_STR || obj.t == CV_LIST || obj.t == CV_DICT) &&
                ifl_chat_has_method(obj, x->a->s->p, x->a->s->len)) {
                eval_args(r, x, s, &a, 0);
                return ifl_chat_method(r, obj, x->a->s->p, &a);
            }
            cval fn = ifl_chat_getattr(r, obj, x->a->s);
            eval_args(r, x, s, &a, 0);
            return ifl_chat_call(r, fn, &a);
        }
        cval fn = eval(r, x->a, s);
        eval_args(r, x, s, &a, 0);
        return ifl_chat_call(r, fn, &a);
    }
    case N_FILTER: {
        cval v = eval(r, x->a, s);
        struct ifl_chat_args a;
        eval_args(r, x, s, &a, 0);
        return ifl_chat_filter(r, x->s, v, &a);
    }
    case N_TEST: {
        cval v = eval(r, x->a, s);
        struct ifl_chat_args a;
        eval_args(r, x, s, &a, 0);
        int t = ifl_chat_test(r, x->s, v, &a);
        return ifl_chat_v_bool(x->op ? !t : t);
    }
    case N_NEG:
    case N_POS: {
        cval v = eval(r, x->a, s);
        if (v.t == CV_UNDEF)
            undefined_error(r, v);
        if (!is_num(v))
            ifl_chat_fail(r, IFL_EFORMAT, "TypeError", "bad operand type for unary %c: '%s'",
                          x->kind == N_NEG ? '-' : '+', ifl_chat_type_name(v));
        if (x->kind == N_POS)
            return v.t == CV_BOOL ? ifl_chat_v_int(v.u.b) : v;
        if (v.t == CV_FLOAT)
            return ifl_chat_v_float(-v.u.d);
        if (as_i(v) == INT64_MIN)
            overflow(r);
        return ifl_chat_v_int(-as_i(v));
    }
    case N_NOT:
        return ifl_chat_v_bool(!ifl_chat_truthy(eval(r, x->a, s)));
    case N_BIN: {
        cval a = eval(r, x->a, s);
        cval b = eval(r, x->b, s);
        return binop(r, x->op, a, b);
    }
    case N_AND: {
        cval a = eval(r, x->a, s);
        return ifl_chat_truthy(a) ? eval(r, x->b, s) : a;
    }
    case N_OR: {
        cval a = eval(r, x->a, s);
        return ifl_chat_truthy(a) ? a : eval(r, x->b, s);
    }
    case N_CMP: {
        cval left = eval(r, x->a, s);
        for (int i = 0; i < x->nv; i++) {
            cval right = eval(r, x->v[i], s);
            if (!compare_op(r, x->ops[i], left, right))
                return ifl_chat_v_bool(0);
            left = right;
        }
        return ifl_chat_v_bool(1);
    }
    case N_COND:
        if (ifl_chat_truthy(eval(r, x->b, s)))
            return eval(r, x->a, s);
        if (x->c)
            return eval(r, x->c, s);
        return ifl_chat_v_undef(ifl_chat_fmtstr(
            &r->ar,
            "the inline if-expression on line %d evaluated to false and no else section was "
            "defined.",
            x->line));
    case N_LIST:
    case N_TUPLE: {
        cval l = ifl_chat_v_list(&r->ar, (size_t)x->nv);
        if (x->kind == N_TUPLE)
            l.f = CVF_TUPLE;
        for (int i = 0; i < x->nv; i++)
            l.u.l->v[i] = eval(r, x->v[i], s);
        l.u.l->n = (size_t)x->nv;
        return l;
    }
    case N_DICT: {
        cval d = ifl_chat_v_dict(&r->ar, (size_t)x->nv);
        for (int i = 0; i < x->nv; i++) {
            cval k = eval(r, x->v[i], s);
            if (!ifl_chat_hashable(k, 0))
                ifl_chat_fail(r, IFL_EFORMAT, "TypeError", "unhashable type: '%s'",
                              ifl_chat_unhashable_name(k));
            ifl_chat_dict_set(&r->ar, d.u.m, k, eval(r, x->w[i], s));
        }
        return d;
    }
    case N_CONCAT: {
        struct ifl_chat_sb b = {0};
        for (int i = 0; i < x->nv; i++)
            ifl_chat_str_of(r, &b, eval(r, x->v[i], s));
        ifl_chat_rt_steps(r, (long long)(b.n / 64));
        return ifl_chat_sb_val(&r->ar, &b);
    }
    }
    ifl_chat_fail(r, IFL_EFORMAT, "TemplateError", "cannot evaluate node %d", x->kind);
}

static cval eval(struct ifl_chat_rt *r, const node *x, scope *s)
{
    if (++r->depth > MAX_DEPTH)
        ifl_chat_fail(r, IFL_EFULL, "RecursionError", "template nests deeper than %d levels",
                      MAX_DEPTH);
    if (++r->steps > r->max_steps)
        ifl_chat_rt_steps(r, 0);
    cval v = eval_inner(r, x, s);
    r->depth--;
    return v;
}

/* ---- statements ---- */

static void assign(struct ifl_chat_rt *r, const node *x, scope *s, cval v)
{
    if (x->op == 1) {
        cval *ns = scope_find(s, x->names[0]);
        if (!ns || ns->t != CV_NS)
            ifl_chat_fail(r, IFL_EFORMAT, "TemplateRuntimeError",
                          "cannot assign attribute on non-namespace object");
        ifl_chat_dict_set(&r->ar, ns->u.m, (cval){.t = CV_STR, .u.s = x->s}, v);
        return;
    }
    if (!x->tuple) {
        scope_set(r, s, x->names[0], v);
        return;
    }
    cval *items;
    size_t n;
    ifl_chat_iterate(r, v, &items, &n);
    if (n < (size_t)x->nnames)
        ifl_chat_fail(r, IFL_EFORMAT, "ValueError",
                      "not enough values to unpack (expected %d, got %zu)", x->nnames, n);
    if (n > (size_t)x->nnames)
        ifl_chat_fail(r, IFL_EFORMAT, "ValueError", "too many values to unpack (expected %d)",
                      x->nnames);
    for (int i = 0; i < x->nnames; i++)
        scope_set(r, s, x->names[i], items[i]);
}

static cval apply_filters(struct ifl_chat_rt *r, const node *x, scope *s, cval v)
{
    for (int i = 0; i < x->nv; i++) {
        struct ifl_chat_args a;
        eval_args(r, x->v[i], s, &a, 0);
        v = ifl_chat_filter(r, x->v[i]->s, v, &a);
    }
    return v;
}

static int exec_for(struct ifl_chat_rt *r, const node *x, scope *s)
{
    cval seq = eval(r, x->a, s);
    cval *items;
    size_t n;
    ifl_chat_iterate(r, seq, &items, &n);
    if (x->d) {
        cval *kept = ifl_chat_alloc(&r->ar, (n ? n : 1) * sizeof *kept);
        size_t k = 0;
        for (size_t i = 0; i < n; i++) {
            scope *is = scope_new(r, s);
            assign(r, x, is, items[i]);
            if (ifl_chat_truthy(eval(r, x->d, is)))
                kept[k++] = items[i];
        }
        items = kept;
        n = k;
    }
    if (n == 0) {
        return x->c ? exec(r, x->c, s) : 0;
    }
    struct ifl_chat_loop *lp = ifl_chat_alloc(&r->ar, sizeof *lp);
    lp->items = items;
    lp->n = n;
    lp->depth = 1;
    cval lv = {.t = CV_LOOP};
    lv.u.lp = lp;
    for (size_t i = 0; i < n; i++) {
        ifl_chat_rt_steps(r, 1);
        lp->i = i;
        scope *is = scope_new(r, s);
        assign(r, x, is, items[i]);
        scope_set(r, is, r->loop_name, lv);
        int rc = exec(r, x->b, is);
        if (rc == 1)
            break;
    }
    return 0;
}

static int exec_inner(struct ifl_chat_rt *r, const node *x, scope *s)
{
    switch (x->kind) {
    case S_BODY:
        for (int i = 0; i < x->nv; i++) {
            int rc = exec(r, x->v[i], s);
            if (rc)
                return rc;
        }
        return 0;
    case S_TEXT:
        out_put(r, x->lit.u.s->p, x->lit.u.s->len);
        return 0;
    case S_OUT: {
        cval v = eval(r, x->a, s);
        if (v.t == CV_STR)
            out_put(r, v.u.s->p, v.u.s->len);
        else {
            struct ifl_chat_sb b = {0};
            ifl_chat_str_of(r, &b, v);
            out_put(r, b.p ? b.p : "", b.n);
        }
        return 0;
    }
    case S_IF:
        if (ifl_chat_truthy(eval(r, x->a, s)))
            return exec(r, x->b, s);
        return x->c ? exec(r, x->c, s) : 0;
    case S_FOR:
        return exec_for(r, x, s);
    case S_SET:
        assign(r, x, s, eval(r, x->a, s));
        return 0;
    case S_SETBLOCK: {
        cval v = capture(r, x->b, s);
        assign(r, x, s, apply_filters(r, x, s, v));
        return 0;
    }
    case S_MACRO: {
        cval f = {.t = CV_FUNC};
        f.u.fn = ifl_chat_alloc(&r->ar, sizeof *f.u.fn);
        memset(f.u.fn, 0, sizeof *f.u.fn);
        f.u.fn->kind = FN_MACRO;
        f.u.fn->macro = x;
        f.u.fn->closure = s;
        scope_set(r, s, x->s, f);
        return 0;
    }
    case S_CALLBLOCK: {
        cval caller = {.t = CV_FUNC};
        caller.u.fn = ifl_chat_alloc(&r->ar, sizeof *caller.u.fn);
        memset(caller.u.fn, 0, sizeof *caller.u.fn);
        caller.u.fn->kind = FN_MACRO;
        caller.u.fn->macro = x;
        caller.u.fn->closure = s;
        const node *call = x->a;
        struct ifl_chat_args a;
        eval_args(r, call, s, &a, 1);
        a.kn[a.nk] = ifl_chat_mkstr(&r->ar, "caller", 6);
        a.kv[a.nk] = caller;
        a.nk++;
        cval fn;
        if (call->a->kind == N_ATTR)
            fn = ifl_chat_getattr(r, eval(r, call->a->a, s), call->a->s);
        else
            fn = eval(r, call->a, s);
        cval v = ifl_chat_call(r, fn, &a);
        struct ifl_chat_sb b = {0};
        ifl_chat_str_of(r, &b, v);
        out_put(r, b.p ? b.p : "", b.n);
        return 0;
    }
    case S_FILTERBLOCK: {
        cval v = apply_filters(r, x, s, capture(r, x->b, s));
        struct ifl_chat_sb b = {0};
        ifl_chat_str_of(r, &b, v);
        out_put(r, b.p ? b.p : "", b.n);
        return 0;
    }
    case S_WITH: {
        scope *ws = scope_new(r, s);
        for (int i = 0; i < x->nnames; i++)
            scope_set(r, ws, x->names[i], eval(r, x->w[i], s));
        return exec(r, x->b, ws);
    }
    case S_BREAK:
        return 1;
    case S_CONTINUE:
        return 2;
    case S_GENERATION:
        return exec(r, x->b, s);
    }
    ifl_chat_fail(r, IFL_EFORMAT, "TemplateError", "cannot execute node %d", x->kind);
}

static int exec(struct ifl_chat_rt *r, const node *x, scope *s)
{
    if (++r->depth > MAX_DEPTH)
        ifl_chat_fail(r, IFL_EFULL, "RecursionError", "template nests deeper than %d levels",
                      MAX_DEPTH);
    if (++r->steps > r->max_steps)
        ifl_chat_rt_steps(r, 0);
    int rc = exec_inner(r, x, s);
    r->depth--;
    return rc;
}

/* ---- entry points ---- */

/* Normalises \r\n and \r to \n and drops one trailing newline, as Jinja's
 * lexer does with keep_trailing_newline=False. */
static char *normalize(const char *src, size_t len, size_t *out_len)
{
    char *o = malloc(len + 1);
    if (!o)
        return NULL;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            o[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n')
                i++;
        } else {
            o[n++] = src[i];
        }
    }
    if (n && o[n - 1] == '\n')
        n--;
    o[n] = 0;
    *out_len = n;
    return o;
}

static int valid_utf8(const char *s, size_t n)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        size_t k;
        uint32_t cp;
        if (c < 0x80) {
            i++;
            continue;
        } else if (c >= 0xc2 && c <= 0xdf) {
            k = 1;
            cp = c & 0x1f;
        } else if (c >= 0xe0 && c <= 0xef) {
            k = 2;
            cp = c & 0x0f;
        } else if (c >= 0xf0 && c <= 0xf4) {
            k = 3;
            cp = c & 0x07;
        } else {
            return 0;
        }
        if (i + k >= n)
            return 0;
        for (size_t j = 1; j <= k; j++) {
            if ((p[i + j] & 0xc0) != 0x80)
                return 0;
            cp = (cp << 6) | (p[i + j] & 0x3f);
        }
        if ((k == 2 && cp < 0x800) || (k == 3 && (cp < 0x10000 || cp > 0x10ffff)) ||
            (cp >= 0xd800 && cp <= 0xdfff))
            return 0;
        i += k + 1;
    }
    return 1;
}

/* Lexes and parses into t's arena. Returns 0, -1 (syntax error: msg, line)
 * or -2 (the arena ran out). */
static int compile_into(struct ifl_chat_template *t, const char *src, size_t n, char *msg,
                        int *line)
{
    jmp_buf jb;
    t->ar.oom = &jb;
    if (setjmp(jb))
        return -2;
    struct ifl_chat_token *toks;
    size_t ntoks;
    if (ifl_chat_lex(&t->ar, src, n, &toks, &ntoks, msg, line) ||
        ifl_chat_parse(&t->ar, toks, ntoks, &t->root, msg, line))
        return -1;
    return 0;
}

int ifl_chat_template_compile(struct ifl_chat_template **out, const char *src, size_t len,
                              char *err)
{
    *out = NULL;
    if (!src && len)
        return ifl_err(err, IFL_EINVAL, "chat template: no source");
    if (!valid_utf8(src, len))
        return ifl_err(err, IFL_EFORMAT, "TemplateSyntaxError: template is not valid UTF-8");
    size_t n;
    char *norm = normalize(src ? src : "", len, &n);
    struct ifl_chat_template *t = calloc(1, sizeof *t);
    if (!norm || !t) {
        free(norm);
        free(t);
        return ifl_err(err, IFL_ENOMEM, "chat template: out of memory");
    }
    t->ar.cap = IFL_CHAT_MAX_MEMORY;
    char msg[IFL_ERR_LEN];
    int line = 0;
    int rc = compile_into(t, norm, n, msg, &line);
    free(norm);
    t->ar.oom = NULL;
    if (rc == 0) {
        *out = t;
        return 0;
    }
    if (rc == -1)
        rc = ifl_err(err, IFL_EFORMAT, "TemplateSyntaxError: line %d: %s", line, msg);
    else
        rc = ifl_err(err, t->ar.failed == 2 ? IFL_ENOMEM : IFL_EFULL,
                     "chat template: out of memory while compiling");
    ifl_chat_arena_free(&t->ar);
    free(t);
    return rc;
}

void ifl_chat_template_free(struct ifl_chat_template *t)
{
    if (!t)
        return;
    ifl_chat_arena_free(&t->ar);
    free(t);
}

int ifl_chat_render(const struct ifl_chat_template *t, const json_t *context,
                    const struct tm *now, char **out, size_t *out_len, char *err)
{
    return ifl_chat_render_limited(t, context, now, NULL, out, out_len, err);
}

int ifl_chat_render_limited(const struct ifl_chat_template *t, const json_t *context,
                            const struct tm *now, const struct ifl_chat_limits *lim, char **out,
                            size_t *out_len, char *err)
{
    *out = NULL;
    if (out_len)
        *out_len = 0;
    if (!t || (context && !json_is_object(context)))
        return ifl_err(err, IFL_EINVAL, "chat template: context must be a JSON object");
    struct ifl_chat_rt *r = calloc(1, sizeof *r);
    if (!r)
        return ifl_err(err, IFL_ENOMEM, "chat template: out of memory");
    r->ar.cap = lim && lim->max_memory ? lim->max_memory : IFL_CHAT_MAX_MEMORY;
    r->max_output = lim && lim->max_output ? lim->max_output : IFL_CHAT_MAX_OUTPUT;
    r->max_steps = lim && lim->max_steps ? lim->max_steps : IFL_CHAT_MAX_STEPS;
    r->ar.oom = &r->jb;
    if (now) {
        r->now = *now;
    } else {
        time_t tt = time(NULL);
        localtime_r(&tt, &r->now);
    }
    if (setjmp(r->jb)) {
        int rc;
        if (r->ar.failed)
            rc = ifl_err(err, r->ar.failed == 2 ? IFL_ENOMEM : IFL_EFULL,
                         "MemoryError: template used more than %zu bytes of memory", r->ar.cap);
        else
            rc = ifl_err(err, r->status, "%s", r->msg);
        ifl_chat_arena_free(&r->ar);
        free(r);
        return rc;
    }
    r->root = scope_new(r, NULL);
    r->loop_name = ifl_chat_mkstr(&r->ar, "loop", 4);
    if (context) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)context, k, v)
        {
            scope_set(r, r->root, ifl_chat_mkstr(&r->ar, k, strlen(k)),
                      ifl_chat_from_json(r, v, 0));
        }
    }
    r->out = &r->main;
    exec(r, t->root, r->root);
    char *res = malloc(r->main.n + 1);
    if (!res) {
        ifl_chat_arena_free(&r->ar);
        free(r);
        return ifl_err(err, IFL_ENOMEM, "chat template: out of memory");
    }
    if (r->main.n)
        memcpy(res, r->main.p, r->main.n);
    res[r->main.n] = 0;
    *out = res;
    if (out_len)
        *out_len = r->main.n;
    ifl_chat_arena_free(&r->ar);
    free(r);
    return 0;
}

const char ifl_chat_default_template[] =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- elif message['content'] is iterable %}"
    "{%- for part in message['content'] %}{%- if part['type'] == 'text' %}{{- part['text'] }}"
    "{%- endif %}{%- endfor %}"
    "{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";
