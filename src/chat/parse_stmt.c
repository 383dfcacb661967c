/*
 * Parser from chat-template tokens to the AST in internal.h: statements,
 * after jinja2/parser.py (3.1), and the entry point ifl_chat_parse.
 *
 * Statements: if/elif/else, for (tuple targets, inline 'if', else,
 * recursive accepted), set (name, tuple, namespace attribute, block set
 * with filters), macro, call, filter, with, break/continue, generation,
 * raw (lexer). Unknown filters and tests are runtime errors, as in Jinja
 * when they sit inside a conditional branch. Expressions are in
 * parse_expr.c; the shared state in parse.h.
 */
#include "chat/parse.h"

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
    node *t = ifl_chat_parse_tuple(P, 1, 1, extra_end, 0);
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
    x->a = ifl_chat_parse_tuple(P, 0, 0, "recursive", 0);
    if (is_name(cur(P), "if")) {
        next(P);
        x->d = ifl_chat_parse_expr(P, 1);
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
        x->a = ifl_chat_parse_tuple(P, 0, 0, NULL, 0);
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
        vpush(P, &fs, ifl_chat_parse_filter_one(P, NULL));
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
        x->a = ifl_chat_parse_tuple(P, 0, 1, NULL, 0);
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
            vpush(P, &defs, ifl_chat_parse_expr(P, 1));
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
    node *call = ifl_chat_parse_expr(P, 1);
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
        vpush(P, &vals, ifl_chat_parse_expr(P, 1));
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
                perr(P,
                     "Unexpected end of template. Jinja was looking for the following tags: "
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
            x->a = ifl_chat_parse_tuple(P, 0, 1, NULL, 0);
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
