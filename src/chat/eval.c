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
 *
 * Attribute, item and iteration access live in access.c, the operators in
 * ops.c, compiling a template in compile.c.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/internal.h"
#include "core/err.h"

#define MAX_DEPTH 1500
#define MAX_CALLS 200

typedef struct ifl_chat_node node;
typedef struct ifl_chat_scope scope;

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

_Noreturn void ifl_chat_undefined_error(struct ifl_chat_rt *r, cval u)
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
        ifl_chat_fail(r, IFL_EFULL, "LimitError", "output is larger than %zu bytes", r->max_output);
    ifl_chat_sb_put(&r->ar, r->out, p, n);
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
            iv[k] = ifl_chat_index_of(parts[k], &ok);
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
        ifl_chat_undefined_error(r, obj);
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
        ifl_chat_fail(r, IFL_EFULL, "RecursionError", "macro calls nest deeper than %d levels",
                      MAX_CALLS);
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
        ifl_chat_undefined_error(r, fn);
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
    case N_POS:
        return ifl_chat_unary(r, x->kind == N_NEG, eval(r, x->a, s));
    case N_NOT:
        return ifl_chat_v_bool(!ifl_chat_truthy(eval(r, x->a, s)));
    case N_BIN: {
        cval a = eval(r, x->a, s);
        cval b = eval(r, x->b, s);
        return ifl_chat_binop(r, x->op, a, b);
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
            if (!ifl_chat_compare_op(r, x->ops[i], left, right))
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

int ifl_chat_render(const struct ifl_chat_template *t, const json_t *context, const struct tm *now,
                    char **out, size_t *out_len, char *err)
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
