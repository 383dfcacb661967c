/*
 * The chat-template parser's state and token helpers, shared by its two
 * files: parse_expr.c (expressions) and parse_stmt.c (statements and the
 * entry point, ifl_chat_parse). Private to those two files.
 *
 * Errors longjmp to ifl_chat_parse with the line of the offending token.
 */
#ifndef IFL_CHAT_PARSE_H
#define IFL_CHAT_PARSE_H

#include <setjmp.h>
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

static inline _Noreturn __attribute__((format(printf, 2, 3))) void perr(struct parser *P,
                                                                        const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(P->msg, IFL_ERR_LEN, fmt, ap);
    va_end(ap);
    P->line = P->t[P->pos < P->n ? P->pos : P->n - 1].line;
    longjmp(P->jb, 1);
}

static inline const struct ifl_chat_token *cur(struct parser *P)
{
    return &P->t[P->pos < P->n ? P->pos : P->n - 1];
}

static inline const struct ifl_chat_token *peek(struct parser *P, size_t k)
{
    size_t i = P->pos + k;
    return &P->t[i < P->n ? i : P->n - 1];
}

static inline void next(struct parser *P)
{
    if (P->pos < P->n - 1)
        P->pos++;
}

static inline int is_op(const struct ifl_chat_token *t, const char *op)
{
    return t->type == T_OP && strcmp(t->op, op) == 0;
}

static inline int is_name(const struct ifl_chat_token *t, const char *name)
{
    return t->type == T_NAME && strcmp(t->s->p, name) == 0;
}

static inline const char *describe(const struct ifl_chat_token *t)
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

static inline void expect_op(struct parser *P, const char *op)
{
    if (!is_op(cur(P), op))
        perr(P, "expected '%s', got '%s'", op, describe(cur(P)));
    next(P);
}

static inline void expect_type(struct parser *P, int type, const char *what)
{
    if (cur(P)->type != type)
        perr(P, "expected %s, got '%s'", what, describe(cur(P)));
    next(P);
}

static inline node *mk(struct parser *P, int kind)
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

static inline void vpush(struct parser *P, struct vec *v, void *x)
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

static inline void enter(struct parser *P)
{
    if (++P->depth > MAX_NEST)
        perr(P, "template nests deeper than %d levels", MAX_NEST);
}

/* parse_expr.c */
/* expr := or ('if' or ('else' expr)?)*; with_cond 0 stops before 'if'. */
node *ifl_chat_parse_expr(struct parser *P, int with_cond);
/* tuple := expr (',' expr)*; a single expression without a comma is
 * itself. simplified: primaries only (assignment targets); extra_end: a
 * name that also ends the tuple ("in", "recursive"); explicit_parens: inside
 * "( )", where an empty tuple is allowed. */
node *ifl_chat_parse_tuple(struct parser *P, int simplified, int with_cond, const char *extra_end,
                           int explicit_parens);
/* One filter application to x: '|' already consumed, the name current. */
node *ifl_chat_parse_filter_one(struct parser *P, node *x);

#endif
