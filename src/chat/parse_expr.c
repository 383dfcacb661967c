/*
 * Parser from chat-template tokens to the AST in internal.h: expressions,
 * following the grammar and precedence of jinja2/parser.py (3.1):
 *
 *   tuple  := expr (',' expr)*          (in {{ }}, for iterables, set values)
 *   expr   := or ('if' or ('else' expr)?)*
 *   or > and > not > compare (== != < <= > >= in, not in; chained)
 *   > '+' '-' > '~' > '*' '/' '//' '%' > '**' (left-assoc) > unary '-' '+'
 *   > primary postfix (. [] ()) then filters '|' and tests 'is' in any order
 *
 * Statements are in parse_stmt.c; the shared state in parse.h.
 */
#include "chat/parse.h"

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

node *ifl_chat_parse_tuple(struct parser *P, int simplified, int with_cond, const char *extra_end,
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
        node *x = simplified ? parse_primary(P) : ifl_chat_parse_expr(P, with_cond);
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
        vpush(P, &items, ifl_chat_parse_expr(P, 1));
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
        vpush(P, &ks, ifl_chat_parse_expr(P, 1));
        expect_op(P, ":");
        vpush(P, &vs, ifl_chat_parse_expr(P, 1));
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
        x = ifl_chat_parse_tuple(P, 0, 1, NULL, 1);
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
        node *e = ifl_chat_parse_expr(P, 1);
        if (!is_op(cur(P), ":"))
            return e;
        next(P);
        parts[0] = e;
    }
    if (!is_op(cur(P), ":") && !is_op(cur(P), "]") && !is_op(cur(P), ","))
        parts[1] = ifl_chat_parse_expr(P, 1);
    if (is_op(cur(P), ":")) {
        next(P);
        if (!is_op(cur(P), "]") && !is_op(cur(P), ","))
            parts[2] = ifl_chat_parse_expr(P, 1);
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
            vpush(P, &kv, ifl_chat_parse_expr(P, 1));
        } else {
            if (kn.n)
                perr(P, "positional argument follows keyword argument");
            vpush(P, &args, ifl_chat_parse_expr(P, 1));
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
node *ifl_chat_parse_filter_one(struct parser *P, node *x)
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
            x = ifl_chat_parse_filter_one(P, x);
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

node *ifl_chat_parse_expr(struct parser *P, int with_cond)
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
                c->c = ifl_chat_parse_expr(P, 1);
            }
            x = c;
        }
    }
    P->depth--;
    return x;
}
