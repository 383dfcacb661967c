/*
 * Parser from chat-template tokens to the AST in internal.h, following the
 * grammar and precedence of jinja2/parser.py (3.1):
 *
 *   tuple  := expr (',' expr)*          (in {{ }}, for iterables, set values)
 *   expr   := or ('if' or ('else' expr)?)*
 *   or > and > not > compare (== != < <= > >= in, not in; chained)
 *   > '+' '-' > '~' > '*' '/' '//' '%' > '**' (left-assoc) > unary '-' '+'
 *   > primary postfix (. [] ()) then filters '|' and tests 'is' in any order
 *
 * Statements: if/elif/else, for (tuple targets, inline 'if', else,
 * recursive accepted), set (name, tuple, namespace attribute, block set
 * with filters), macro, call, filter, with, break/continue, generation,
 * raw (lexer). Unknown filters and tests are runtime errors, as in Jinja
 * when they sit inside a conditional branch.
 *
 * Errors longjmp to ifl_chat_parse with the line of the offending token.
 */
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "chat/internal.h"
#include "core/err.h"

#define MAX_NEST 200

struct parser {
    struct ifl_chat_arena *a;
    const struct ifl_chat_token *t;
    size_t n, pos;
    char *msg;
    int line;
    int depth;
    int in_loop;
    jmp_buf jb;
};

typedef struct ifl_chat_node node;

static _Noreturn __attribute__((format(printf, 2, 3))) void perr(struct parser *P, const char *fmt,
                                                                 ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(P->msg, IFL_ERR_LEN, fmt, ap);
    va_end(ap);
    P->line = P->t[P->pos < P->n ? P->pos : P->n - 1].line;
    longjmp(P->jb, 1);
}

static const struct ifl_chat_token *cur(struct parser *P)
{
    return &P->t[P->pos < P->n ? P->pos : P->n - 1];
}

static const struct ifl_chat_token *peek(struct parser *P, size_t k)
{
    size_t i = P->pos + k;
    return &P->t[i < P->n ? i : P->n - 1];
}

static void next(struct parser *P)
{
    if (P->pos < P->n - 1)
        P->pos++;
}

static int is_op(const struct ifl_chat_token *t, const char *op)
{
    return t->type == T_OP && strcmp(t->op, op) == 0;
}

static int is_name(const struct ifl_chat_token *t, const char *name)
{
    return t->type == T_NAME && strcmp(t->s->p, name) == 0;
}

static const char *describe(const struct ifl_chat_token *t)
{
    switch (t->type) {
    case T_EOF:
        return "end of template";
    case T_DATA:
        return "template data";
    case T_VAR_BEGIN:
        return "begin of print statement";
    case T_VAR_END:
        return "end of print statement";
    case T_BLOCK_BEGIN:
        return "begin of statement block";
    case T_BLOCK_END:
        return "end of statement block";
    case T_NAME:
    case T_STRING:
        return t->s->p;
    case T_INT:
        return "integer";
    case T_FLOAT:
        return "float";
    default:
        return t->op;
    }
}

static void expect_op(struct parser *P, const char *op)
{
    if (!is_op(cur(P), op))
        perr(P, "expected '%s', got '%s'", op, describe(cur(P)));
    next(P);
}

static void expect_type(struct parser *P, int type, const char *what)
{
    if (cur(P)->type != type)
        perr(P, "expected %s, got '%s'", what, describe(cur(P)));
    next(P);
}

static node *mk(struct parser *P, int kind)
{
    node *x = ifl_chat_alloc(P->a, sizeof *x);
    memset(x, 0, sizeof *x);
    x->kind = (uint8_t)kind;
    x->line = cur(P)->line;
    return x;
}

/* growable arrays of node pointers / names */
struct vec {
    void **p;
    int n, cap;
};

static void vpush(struct parser *P, struct vec *v, void *x)
{
    if (v->n == v->cap) {
        int nc = v->cap ? v->cap * 2 : 4;
        void **np = ifl_chat_alloc(P->a, (size_t)nc * sizeof *np);
        if (v->n)
            memcpy(np, v->p, (size_t)v->n * sizeof *np);
        v->p = np;
        v->cap = nc;
    }
    v->p[v->n++] = x;
}

static void enter(struct parser *P)
{
    if (++P->depth > MAX_NEST)
        perr(P, "template nests deeper than %d levels", MAX_NEST);
}

static node *parse_expr(struct parser *P, int with_cond);
static node *parse_tuple(struct parser *P, int simplified, int with_cond, const char *extra_end,
                         int explicit_parens);
static node *parse_unary(struct parser *P, int with_filter);
static node *parse_primary(struct parser *P);
static void parse_call_args(struct parser *P, node *x);

static int tuple_end(struct parser *P, const char *extra_end)
{
    const struct ifl_chat_token *t = cur(P);
    if (t->type == T_VAR_END || t->type == T_BLOCK_END || is_op(t, ")") || t->type == T_EOF)
        return 1;
    return extra_end && is_name(t, extra_end);
}

static node *parse_tuple(struct parser *P, int simplified, int with_cond, const char *extra_end,
                         int explicit_parens)
{
    struct vec items = {0};
    int is_tuple = 0;
    int line = cur(P)->line;
    for (;;) {
        if (items.n)
            expect_op(P, ",");
        if (tuple_end(P, extra_end))
            break;
        node *x = simplified ? parse_primary(P) : parse_expr(P, with_cond);
        vpush(P, &items, x);
        if (is_op(cur(P), ","))
            is_tuple = 1;
        else
            break;
    }
    if (!is_tuple) {
        if (items.n)
            return items.p[0];
        if (!explicit_parens)
            perr(P, "Expected an expression, got '%s'", describe(cur(P)));
    }
    node *t = mk(P, N_TUPLE);
    t->line = line;
    t->v = (node **)items.p;
    t->nv = items.n;
    return t;
}

static node *parse_list(struct parser *P)
{
    node *x = mk(P, N_LIST);
    struct vec items = {0};
    expect_op(P, "[");
    while (!is_op(cur(P), "]")) {
        if (items.n)
            expect_op(P, ",");
        if (is_op(cur(P), "]"))
            break;
        vpush(P, &items, parse_expr(P, 1));
    }
    expect_op(P, "]");
    x->v = (node **)items.p;
    x->nv = items.n;
    return x;
}

static node *parse_dict(struct parser *P)
{
    node *x = mk(P, N_DICT);
    struct vec ks = {0}, vs = {0};
    expect_op(P, "{");
    while (!is_op(cur(P), "}")) {
        if (ks.n)
            expect_op(P, ",");
        if (is_op(cur(P), "}"))
            break;
        vpush(P, &ks, parse_expr(P, 1));
        expect_op(P, ":");
        vpush(P, &vs, parse_expr(P, 1));
    }
    expect_op(P, "}");
    x->v = (node **)ks.p;
    x->nv = ks.n;
    x->w = (node **)vs.p;
    x->nw = vs.n;
    return x;
}

static node *parse_primary(struct parser *P)
{
    const struct ifl_chat_token *t = cur(P);
    node *x;
    enter(P);
    if (t->type == T_NAME) {
        const char *s = t->s->p;
        x = mk(P, N_LIT);
        if (!strcmp(s, "true") || !strcmp(s, "True"))
            x->lit = ifl_chat_v_bool(1);
        else if (!strcmp(s, "false") || !strcmp(s, "False"))
            x->lit = ifl_chat_v_bool(0);
        else if (!strcmp(s, "none") || !strcmp(s, "None"))
            x->lit = ifl_chat_v_none();
        else {
            x->kind = N_NAME;
            x->s = t->s;
        }
        next(P);
    } else if (t->type == T_STRING) {
        x = mk(P, N_LIT);
        if (peek(P, 1)->type != T_STRING) {
            x->lit.t = CV_STR;
            x->lit.u.s = t->s;
            next(P);
        } else {
            struct ifl_chat_sb b = {0};
            while (cur(P)->type == T_STRING) {
                ifl_chat_sb_put(P->a, &b, cur(P)->s->p, cur(P)->s->len);
                next(P);
            }
            x->lit = ifl_chat_sb_val(P->a, &b);
        }
    } else if (t->type == T_INT) {
        x = mk(P, N_LIT);
        x->lit = ifl_chat_v_int(t->i);
        next(P);
    } else if (t->type == T_FLOAT) {
        x = mk(P, N_LIT);
        x->lit = ifl_chat_v_float(t->d);
        next(P);
    } else if (is_op(t, "(")) {
        next(P);
        x = parse_tuple(P, 0, 1, NULL, 1);
        expect_op(P, ")");
    } else if (is_op(t, "[")) {
        x = parse_list(P);
    } else if (is_op(t, "{")) {
        x = parse_dict(P);
    } else {
        perr(P, "unexpected '%s'", describe(t));
    }
    P->depth--;
    return x;
}

/* one subscript element: expression or slice a:b:c */
static node *parse_subscribed(struct parser *P)
{
    node *parts[3] = {NULL, NULL, NULL};
    if (is_op(cur(P), ":")) {
        next(P);
    } else {
        node *e = parse_expr(P, 1);
        if (!is_op(cur(P), ":"))
            return e;
        next(P);
        parts[0] = e;
    }
    if (!is_op(cur(P), ":") && !is_op(cur(P), "]") && !is_op(cur(P), ","))
        parts[1] = parse_expr(P, 1);
    if (is_op(cur(P), ":")) {
        next(P);
        if (!is_op(cur(P), "]") && !is_op(cur(P), ","))
            parts[2] = parse_expr(P, 1);
    }
    node *s = mk(P, N_SLICE);
    s->b = parts[0];
    s->c = parts[1];
    s->d = parts[2];
    return s;
}

static node *parse_postfix(struct parser *P, node *x)
{
    for (;;) {
        const struct ifl_chat_token *t = cur(P);
        if (is_op(t, ".")) {
            next(P);
            const struct ifl_chat_token *a = cur(P);
            if (a->type == T_NAME) {
                node *g = mk(P, N_ATTR);
                g->a = x;
                g->s = a->s;
                next(P);
                x = g;
            } else if (a->type == T_INT) {
                node *g = mk(P, N_ITEM);
                g->a = x;
                g->b = mk(P, N_LIT);
                g->b->lit = ifl_chat_v_int(a->i);
                next(P);
                x = g;
            } else {
                perr(P, "expected name or number");
            }
        } else if (is_op(t, "[")) {
            next(P);
            struct vec args = {0};
            while (!is_op(cur(P), "]")) {
                if (args.n)
                    expect_op(P, ",");
                vpush(P, &args, parse_subscribed(P));
                if (cur(P)->type == T_EOF)
                    perr(P, "unexpected end of template");
            }
            expect_op(P, "]");
            node *arg; /* x[] subscripts with an empty tuple, as in Jinja */
            if (args.n == 1) {
                arg = args.p[0];
            } else {
                arg = mk(P, N_TUPLE);
                arg->v = (node **)args.p;
                arg->nv = args.n;
            }
            if (arg->kind == N_SLICE) {
                arg->a = x;
                x = arg;
            } else {
                node *g = mk(P, N_ITEM);
                g->a = x;
                g->b = arg;
                x = g;
            }
        } else if (is_op(t, "(")) {
            node *c = mk(P, N_CALL);
            c->a = x;
            parse_call_args(P, c);
            x = c;
        } else {
            return x;
        }
    }
}

static void parse_call_args(struct parser *P, node *x)
{
    struct vec args = {0}, kv = {0}, kn = {0};
    expect_op(P, "(");
    int need_comma = 0;
    while (!is_op(cur(P), ")")) {
        if (need_comma) {
            expect_op(P, ",");
            if (is_op(cur(P), ")"))
                break;
        }
        if (is_op(cur(P), "*") || is_op(cur(P), "**"))
            perr(P, "*args and **kwargs are not supported");
        if (cur(P)->type == T_NAME && is_op(peek(P, 1), "=")) {
            vpush(P, &kn, cur(P)->s);
            next(P);
            next(P);
            vpush(P, &kv, parse_expr(P, 1));
        } else {
            if (kn.n)
                perr(P, "positional argument follows keyword argument");
            vpush(P, &args, parse_expr(P, 1));
        }
        need_comma = 1;
        if (cur(P)->type == T_EOF)
            perr(P, "unexpected end of template");
    }
    expect_op(P, ")");
    x->v = (node **)args.p;
    x->nv = args.n;
    x->w = (node **)kv.p;
    x->nw = kv.n;
    x->names = (cstr **)kn.p;
    x->nnames = kn.n;
}

static cstr *dotted_name(struct parser *P)
{
    if (cur(P)->type != T_NAME)
        perr(P, "expected name, got '%s'", describe(cur(P)));
    cstr *s = cur(P)->s;
    next(P);
    while (is_op(cur(P), ".") && peek(P, 1)->type == T_NAME) {
        struct ifl_chat_sb b = {0};
        ifl_chat_sb_put(P->a, &b, s->p, s->len);
        ifl_chat_sb_putc(P->a, &b, '.');
        next(P);
        ifl_chat_sb_put(P->a, &b, cur(P)->s->p, cur(P)->s->len);
        next(P);
        s = ifl_chat_mkstr(P->a, b.p, b.n);
    }
    return s;
}

/* '|' already consumed: name[(args)] applied to x (NULL for filter blocks) */
static node *parse_filter_one(struct parser *P, node *x)
{
    node *f = mk(P, N_FILTER);
    f->a = x;
    f->s = dotted_name(P);
    if (is_op(cur(P), "("))
        parse_call_args(P, f);
    return f;
}

static node *parse_test(struct parser *P, node *x)
{
    node *t = mk(P, N_TEST);
    next(P); /* 'is' */
    if (is_name(cur(P), "not")) {
        next(P);
        t->op = 1;
    }
    t->a = x;
    t->s = dotted_name(P);
    const struct ifl_chat_token *c = cur(P);
    if (is_op(c, "(")) {
        parse_call_args(P, t);
    } else if ((c->type == T_NAME || c->type == T_STRING || c->type == T_INT ||
                c->type == T_FLOAT || is_op(c, "[") || is_op(c, "{")) &&
               !is_name(c, "else") && !is_name(c, "or") && !is_name(c, "and")) {
        if (is_name(c, "is"))
            perr(P, "You cannot chain multiple tests with is");
        node *arg = parse_postfix(P, parse_primary(P));
        t->v = ifl_chat_alloc(P->a, sizeof(node *));
        t->v[0] = arg;
        t->nv = 1;
    }
    return t;
}

static node *parse_filter_expr(struct parser *P, node *x)
{
    for (;;) {
        if (is_op(cur(P), "|")) {
            next(P);
            x = parse_filter_one(P, x);
        } else if (is_name(cur(P), "is")) {
            x = parse_test(P, x);
        } else if (is_op(cur(P), "(")) {
            node *c = mk(P, N_CALL);
            c->a = x;
            parse_call_args(P, c);
            x = c;
        } else {
            return x;
        }
    }
}

static node *parse_unary(struct parser *P, int with_filter)
{
    node *x;
    enter(P);
    if (is_op(cur(P), "-") || is_op(cur(P), "+")) {
        x = mk(P, is_op(cur(P), "-") ? N_NEG : N_POS);
        next(P);
        x->a = parse_unary(P, 0);
    } else {
        x = parse_primary(P);
    }
    x = parse_postfix(P, x);
    if (with_filter)
        x = parse_filter_expr(P, x);
    P->depth--;
    return x;
}

static node *binop(struct parser *P, int op, node *l, node *r)
{
    node *x = mk(P, N_BIN);
    x->op = (uint8_t)op;
    x->a = l;
    x->b = r;
    return x;
}

static node *parse_pow(struct parser *P)
{
    node *l = parse_unary(P, 1);
    while (is_op(cur(P), "**")) {
        next(P);
        node *rhs = parse_unary(P, 1);
        if (l->kind == N_NEG && l->a->kind == N_LIT &&
            (l->a->lit.t == CV_INT || l->a->lit.t == CV_FLOAT)) {
            /* Jinja folds -3 to a constant and emits it unparenthesised, so
             * Python reads -3 ** x as -(3 ** x); do the same */
            l->a = binop(P, OP_POW, l->a, rhs);
            continue;
        }
        l = binop(P, OP_POW, l, rhs);
    }
    return l;
}

static node *parse_math2(struct parser *P)
{
    node *l = parse_pow(P);
    for (;;) {
        int op = is_op(cur(P), "*")    ? OP_MUL
                 : is_op(cur(P), "/")  ? OP_DIV
                 : is_op(cur(P), "//") ? OP_FLOORDIV
                 : is_op(cur(P), "%")  ? OP_MOD
                                       : 0;
        if (!op)
            return l;
        next(P);
        l = binop(P, op, l, parse_pow(P));
    }
}

static node *parse_concat(struct parser *P)
{
    node *first = parse_math2(P);
    if (!is_op(cur(P), "~"))
        return first;
    struct vec v = {0};
    vpush(P, &v, first);
    while (is_op(cur(P), "~")) {
        next(P);
        vpush(P, &v, parse_math2(P));
    }
    node *x = mk(P, N_CONCAT);
    x->v = (node **)v.p;
    x->nv = v.n;
    return x;
}

static node *parse_math1(struct parser *P)
{
    node *l = parse_concat(P);
    for (;;) {
        int op = is_op(cur(P), "+") ? OP_ADD : is_op(cur(P), "-") ? OP_SUB : 0;
        if (!op)
            return l;
        next(P);
        l = binop(P, op, l, parse_concat(P));
    }
}

static node *parse_compare(struct parser *P)
{
    node *first = parse_math1(P);
    struct vec v = {0};
    uint8_t ops[64];
    for (;;) {
        const struct ifl_chat_token *t = cur(P);
        int op = is_op(t, "==")   ? OP_EQ
                 : is_op(t, "!=") ? OP_NE
                 : is_op(t, "<")  ? OP_LT
                 : is_op(t, "<=") ? OP_LE
                 : is_op(t, ">")  ? OP_GT
                 : is_op(t, ">=") ? OP_GE
                                  : 0;
        if (op) {
            next(P);
        } else if (is_name(t, "in")) {
            op = OP_IN;
            next(P);
        } else if (is_name(t, "not") && is_name(peek(P, 1), "in")) {
            op = OP_NOTIN;
            next(P);
            next(P);
        } else {
            break;
        }
        if (v.n >= (int)sizeof ops)
            perr(P, "too many chained comparisons");
        ops[v.n] = (uint8_t)op;
        vpush(P, &v, parse_math1(P));
    }
    if (!v.n)
        return first;
    node *x = mk(P, N_CMP);
    x->a = first;
    x->v = (node **)v.p;
    x->nv = v.n;
    x->ops = ifl_chat_alloc(P->a, (size_t)v.n);
    memcpy(x->ops, ops, (size_t)v.n);
    return x;
}

static node *parse_not(struct parser *P)
{
    if (is_name(cur(P), "not")) {
        enter(P);
        node *x = mk(P, N_NOT);
        next(P);
        x->a = parse_not(P);
        P->depth--;
        return x;
    }
    return parse_compare(P);
}

static node *parse_and(struct parser *P)
{
    node *l = parse_not(P);
    while (is_name(cur(P), "and")) {
        node *x = mk(P, N_AND);
        next(P);
        x->a = l;
        x->b = parse_not(P);
        l = x;
    }
    return l;
}

static node *parse_or(struct parser *P)
{
    node *l = parse_and(P);
    while (is_name(cur(P), "or")) {
        node *x = mk(P, N_OR);
        next(P);
        x->a = l;
        x->b = parse_and(P);
        l = x;
    }
    return l;
}

static node *parse_expr(struct parser *P, int with_cond)
{
    enter(P);
    node *x = parse_or(P);
    if (with_cond) {
        while (is_name(cur(P), "if")) {
            node *c = mk(P, N_COND);
            next(P);
            c->a = x;
            c->b = parse_or(P);
            if (is_name(cur(P), "else")) {
                next(P);
                c->c = parse_expr(P, 1);
            }
            x = c;
        }
    }
    P->depth--;
    return x;
}

/* ---- statements ---- */

static node *subparse(struct parser *P, const char *const *end_tags);

/* Parses the body up to one of end_tags; leaves the end tag name current. */
static node *parse_body(struct parser *P, const char *const *end_tags)
{
    if (is_op(cur(P), ":"))
        next(P);
    expect_type(P, T_BLOCK_END, "end of statement block");
    return subparse(P, end_tags);
}

static void end_tag(struct parser *P)
{
    next(P); /* the end tag's name */
}

static int can_assign(node *x)
{
    if (x->kind == N_NAME)
        return 1;
    if (x->kind == N_TUPLE) {
        for (int i = 0; i < x->nv; i++)
            if (x->v[i]->kind != N_NAME)
                return 0;
        return x->nv > 0;
    }
    return 0;
}

/* Fills names/tuple of st from an assignment target. */
static void assign_target(struct parser *P, node *st, const char *extra_end, int with_ns)
{
    if (with_ns && cur(P)->type == T_NAME && is_op(peek(P, 1), ".")) {
        st->names = ifl_chat_alloc(P->a, sizeof(cstr *));
        st->names[0] = cur(P)->s;
        st->nnames = 1;
        next(P);
        next(P);
        if (cur(P)->type != T_NAME)
            perr(P, "expected name, got '%s'", describe(cur(P)));
        st->s = cur(P)->s;
        st->op = 1;
        next(P);
        return;
    }
    node *t = parse_tuple(P, 1, 1, extra_end, 0);
    if (!can_assign(t))
        perr(P, "can't assign to %s", t->kind == N_LIT ? "a constant" : "this expression");
    if (t->kind == N_NAME) {
        st->names = ifl_chat_alloc(P->a, sizeof(cstr *));
        st->names[0] = t->s;
        st->nnames = 1;
    } else {
        st->names = ifl_chat_alloc(P->a, (size_t)t->nv * sizeof(cstr *));
        for (int i = 0; i < t->nv; i++)
            st->names[i] = t->v[i]->s;
        st->nnames = t->nv;
        st->tuple = 1;
    }
}

static node *parse_for(struct parser *P)
{
    static const char *const ends[] = {"endfor", "else", NULL};
    static const char *const ends2[] = {"endfor", NULL};
    node *x = mk(P, S_FOR);
    next(P);
    assign_target(P, x, "in", 0);
    if (!is_name(cur(P), "in"))
        perr(P, "expected 'in', got '%s'", describe(cur(P)));
    next(P);
    x->a = parse_tuple(P, 0, 0, "recursive", 0);
    if (is_name(cur(P), "if")) {
        next(P);
        x->d = parse_expr(P, 1);
    }
    if (is_name(cur(P), "recursive"))
        next(P);
    P->in_loop++;
    x->b = parse_body(P, ends);
    P->in_loop--;
    if (is_name(cur(P), "else")) {
        end_tag(P);
        x->c = parse_body(P, ends2);
    }
    end_tag(P);
    return x;
}

static node *parse_if(struct parser *P)
{
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    static const char *const ends2[] = {"endif", NULL};
    node *x = mk(P, S_IF);
    node *top = x;
    next(P);
    for (;;) {
        x->a = parse_tuple(P, 0, 0, NULL, 0);
        x->b = parse_body(P, ends);
        if (is_name(cur(P), "elif")) {
            end_tag(P);
            node *e = mk(P, S_IF);
            x->c = e;
            x = e;
            continue;
        }
        if (is_name(cur(P), "else")) {
            end_tag(P);
            x->c = parse_body(P, ends2);
        }
        break;
    }
    end_tag(P);
    return top;
}

static void parse_filter_chain(struct parser *P, node *st)
{
    struct vec fs = {0};
    for (;;) {
        vpush(P, &fs, parse_filter_one(P, NULL));
        if (!is_op(cur(P), "|"))
            break;
        next(P);
    }
    st->v = (node **)fs.p;
    st->nv = fs.n;
}

static node *parse_set(struct parser *P)
{
    static const char *const ends[] = {"endset", NULL};
    node *x = mk(P, S_SET);
    next(P);
    assign_target(P, x, NULL, 1);
    if (is_op(cur(P), "=")) {
        next(P);
        x->a = parse_tuple(P, 0, 1, NULL, 0);
        return x;
    }
    x->kind = S_SETBLOCK;
    if (x->tuple)
        perr(P, "a block set needs a single target");
    if (is_op(cur(P), "|")) {
        next(P);
        parse_filter_chain(P, x);
    }
    x->b = parse_body(P, ends);
    end_tag(P);
    return x;
}

static void parse_signature(struct parser *P, node *x)
{
    struct vec names = {0}, defs = {0};
    expect_op(P, "(");
    while (!is_op(cur(P), ")")) {
        if (names.n)
            expect_op(P, ",");
        if (cur(P)->type != T_NAME)
            perr(P, "expected name, got '%s'", describe(cur(P)));
        vpush(P, &names, cur(P)->s);
        next(P);
        if (is_op(cur(P), "=")) {
            next(P);
            vpush(P, &defs, parse_expr(P, 1));
        } else {
            int any = 0;
            for (int i = 0; i < defs.n; i++)
                any |= defs.p[i] != NULL;
            if (any)
                perr(P, "non-default argument follows default argument");
            vpush(P, &defs, NULL);
        }
    }
    expect_op(P, ")");
    x->names = (cstr **)names.p;
    x->nnames = names.n;
    x->w = (node **)defs.p;
    x->nw = defs.n;
}

static node *parse_macro(struct parser *P)
{
    static const char *const ends[] = {"endmacro", NULL};
    node *x = mk(P, S_MACRO);
    next(P);
    if (cur(P)->type != T_NAME)
        perr(P, "expected macro name, got '%s'", describe(cur(P)));
    x->s = cur(P)->s;
    next(P);
    parse_signature(P, x);
    int saved = P->in_loop;
    P->in_loop = 0;
    x->b = parse_body(P, ends);
    P->in_loop = saved;
    end_tag(P);
    return x;
}

static node *parse_call_block(struct parser *P)
{
    static const char *const ends[] = {"endcall", NULL};
    node *x = mk(P, S_CALLBLOCK);
    next(P);
    if (is_op(cur(P), "("))
        parse_signature(P, x);
    node *call = parse_expr(P, 1);
    if (call->kind != N_CALL)
        perr(P, "expected call");
    x->a = call;
    int saved = P->in_loop;
    P->in_loop = 0;
    x->b = parse_body(P, ends);
    P->in_loop = saved;
    end_tag(P);
    return x;
}

static node *parse_filter_block(struct parser *P)
{
    static const char *const ends[] = {"endfilter", NULL};
    node *x = mk(P, S_FILTERBLOCK);
    next(P);
    parse_filter_chain(P, x);
    x->b = parse_body(P, ends);
    end_tag(P);
    return x;
}

static node *parse_with(struct parser *P)
{
    static const char *const ends[] = {"endwith", NULL};
    node *x = mk(P, S_WITH);
    struct vec names = {0}, vals = {0};
    next(P);
    while (cur(P)->type != T_BLOCK_END) {
        if (names.n)
            expect_op(P, ",");
        if (cur(P)->type != T_NAME)
            perr(P, "expected name, got '%s'", describe(cur(P)));
        vpush(P, &names, cur(P)->s);
        next(P);
        expect_op(P, "=");
        vpush(P, &vals, parse_expr(P, 1));
    }
    x->names = (cstr **)names.p;
    x->nnames = names.n;
    x->w = (node **)vals.p;
    x->nw = vals.n;
    x->b = parse_body(P, ends);
    end_tag(P);
    return x;
}

static node *parse_statement(struct parser *P)
{
    const struct ifl_chat_token *t = cur(P);
    if (t->type != T_NAME)
        perr(P, "tag name expected");
    const char *s = t->s->p;
    enter(P);
    node *x;
    if (!strcmp(s, "for"))
        x = parse_for(P);
    else if (!strcmp(s, "if"))
        x = parse_if(P);
    else if (!strcmp(s, "set"))
        x = parse_set(P);
    else if (!strcmp(s, "macro"))
        x = parse_macro(P);
    else if (!strcmp(s, "call"))
        x = parse_call_block(P);
    else if (!strcmp(s, "filter"))
        x = parse_filter_block(P);
    else if (!strcmp(s, "with"))
        x = parse_with(P);
    else if (!strcmp(s, "generation")) {
        static const char *const ends[] = {"endgeneration", NULL};
        x = mk(P, S_GENERATION);
        next(P);
        x->b = parse_body(P, ends);
        end_tag(P);
    } else if (!strcmp(s, "break") || !strcmp(s, "continue")) {
        if (!P->in_loop)
            perr(P, "'%s' is only valid inside a loop", s);
        x = mk(P, s[0] == 'b' ? S_BREAK : S_CONTINUE);
        next(P);
    } else {
        perr(P, "Encountered unknown tag '%s'.", s);
    }
    P->depth--;
    return x;
}

static node *subparse(struct parser *P, const char *const *end_tags)
{
    node *body = mk(P, S_BODY);
    struct vec stmts = {0};
    for (;;) {
        const struct ifl_chat_token *t = cur(P);
        if (t->type == T_EOF) {
            if (end_tags)
                perr(P, "Unexpected end of template. Jinja was looking for the following tags: "
                        "'%s'.",
                     end_tags[0]);
            break;
        }
        if (t->type == T_DATA) {
            node *x = mk(P, S_TEXT);
            x->lit.t = CV_STR;
            x->lit.u.s = t->s;
            vpush(P, &stmts, x);
            next(P);
        } else if (t->type == T_VAR_BEGIN) {
            next(P);
            node *x = mk(P, S_OUT);
            x->a = parse_tuple(P, 0, 1, NULL, 0);
            expect_type(P, T_VAR_END, "end of print statement");
            vpush(P, &stmts, x);
        } else if (t->type == T_BLOCK_BEGIN) {
            next(P);
            const struct ifl_chat_token *n = cur(P);
            if (end_tags && n->type == T_NAME)
                for (int i = 0; end_tags[i]; i++)
                    if (!strcmp(n->s->p, end_tags[i]))
                        goto done;
            vpush(P, &stmts, parse_statement(P));
            expect_type(P, T_BLOCK_END, "end of statement block");
        } else {
            perr(P, "unexpected '%s'", describe(t));
        }
    }
done:
    body->v = (node **)stmts.p;
    body->nv = stmts.n;
    return body;
}

int ifl_chat_parse(struct ifl_chat_arena *a, const struct ifl_chat_token *toks, size_t ntoks,
                   struct ifl_chat_node **root, char *msg, int *line)
{
    struct parser P = {.a = a, .t = toks, .n = ntoks, .msg = msg};
    if (setjmp(P.jb)) {
        *line = P.line;
        return -1;
    }
    node *r = subparse(&P, NULL);
    *root = r;
    return 0;
}
