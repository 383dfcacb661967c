/*
 * Operators of the chat-template evaluator, with Python's rules: + on
 * str/list concatenates, * repeats, / is true division, // and % floor,
 * ** on ints stays exact, str % args formats; integer results that leave
 * 64 bits raise OverflowError. Also unary -/+, `in` and the comparisons.
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "chat/internal.h"
#include "core/err.h"

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

cval ifl_chat_binop(struct ifl_chat_rt *r, int op, cval a, cval b)
{
    if (a.t == CV_UNDEF || a.t == CV_MISSING)
        ifl_chat_undefined_error(r, a);
    if (op == OP_MOD && a.t == CV_STR && (b.t == CV_UNDEF || b.t == CV_MISSING)) {
        cval v = str_percent(r, a, ifl_chat_v_dict(&r->ar, 0)); /* Undefined acts as a mapping */
        v.f = a.f & CVF_SAFE;
        return v;
    }
    if (b.t == CV_UNDEF || b.t == CV_MISSING)
        ifl_chat_undefined_error(r, b);
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
            ifl_chat_fail(r, IFL_EFORMAT, "TypeError", "can only concatenate %s (not \"%s\") to %s",
                          ifl_chat_type_name(a), ifl_chat_type_name(b), ifl_chat_type_name(a));
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

cval ifl_chat_unary(struct ifl_chat_rt *r, int neg, cval v)
{
    if (v.t == CV_UNDEF)
        ifl_chat_undefined_error(r, v);
    if (!is_num(v))
        ifl_chat_fail(r, IFL_EFORMAT, "TypeError", "bad operand type for unary %c: '%s'",
                      neg ? '-' : '+', ifl_chat_type_name(v));
    if (!neg)
        return v.t == CV_BOOL ? ifl_chat_v_int(v.u.b) : v;
    if (v.t == CV_FLOAT)
        return ifl_chat_v_float(-v.u.d);
    if (as_i(v) == INT64_MIN)
        overflow(r);
    return ifl_chat_v_int(-as_i(v));
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

int ifl_chat_compare_op(struct ifl_chat_rt *r, int op, cval a, cval b)
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
