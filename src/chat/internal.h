/*
 * Internals of the chat-template interpreter shared by its files:
 *   value.c      arena, values (Python-like), dicts and lists, UTF-8, compare,
 *                conversion from jansson
 *   print.c      str()/repr(), float repr, markupsafe escape, json.dumps
 *   lex.c        Jinja2 lexer (whitespace control, trim/lstrip_blocks)
 *   parse_expr.c parser to the AST below: expressions (parse.h)
 *   parse_stmt.c parser: statements and the entry point (parse.h)
 *   compile.c    source checks, newline normalisation, compile/free
 *   eval.c       tree-walking evaluator: scopes, calls and macros,
 *                expressions, statements, limits, rendering
 *   access.c     attribute, item and iteration access (evaluator)
 *   ops.c        arithmetic, comparison and `in` operators (evaluator)
 *   filters.c    filters (builtins.h)
 *   builtins.c   tests, dict/list methods, globals (builtins.h)
 *   strings.c    Python str methods and string algorithms (builtins.h)
 *
 * Memory: every value and AST node lives in an arena (one per compiled
 * template, one per render) and is released with it, so values need no
 * reference counts and cycles (list.append(list)) cannot leak. Strings are
 * immutable and may be shared between the two arenas; lists, dicts and
 * namespaces are mutable and shared by reference like Python objects.
 *
 * Errors inside a render longjmp back to ifl_chat_render (ifl_chat_fail);
 * nothing in between owns memory outside the arena, so nothing leaks.
 */
#ifndef IFL_CHAT_INTERNAL_H
#define IFL_CHAT_INTERNAL_H

#include <setjmp.h>
#include <stddef.h>
#include <stdint.h>

#include "chat/chat.h"
#include "core/err.h"

/* ---- arena ---- */

struct ifl_chat_chunk;
struct ifl_chat_arena {
    struct ifl_chat_chunk *head;
    size_t total; /* bytes obtained from malloc so far */
    size_t cap;   /* refuse to grow past this */
    jmp_buf *oom; /* where to jump when out of memory / over cap */
    int failed;   /* why it jumped: 1 over cap, 2 malloc failed */
};

void *ifl_chat_alloc(struct ifl_chat_arena *a, size_t n);
void ifl_chat_arena_free(struct ifl_chat_arena *a);

/* ---- values ---- */

enum {
    CV_UNDEF,
    CV_NONE,
    CV_BOOL,
    CV_INT,
    CV_FLOAT,
    CV_STR,
    CV_LIST,
    CV_DICT,
    CV_NS,
    CV_FUNC,
    CV_LOOP,
    CV_MISSING /* internal: an argument that was not passed */
};

#define CVF_TUPLE 1 /* a list that Python would hold as a tuple */
#define CVF_GEN 2   /* a lazily produced sequence (Python generator) */
#define CVF_SAFE 4  /* a str that is markupsafe.Markup (from |safe): + escapes the other side */
#define CVF_VIEW 8  /* a list that is a dict view: dict.items()/keys()/values() (see u.l) */
#define CVF_VIEW_KEYS 16
#define CVF_LAZY (CVF_GEN | CVF_VIEW) /* not subscriptable, not a list for + and * */
#define CVF_VIEW_VALUES 32

struct ifl_chat_str {
    size_t len;
    char p[]; /* len bytes + NUL */
};

struct ifl_chat_val;
struct ifl_chat_list {
    size_t n, cap;
    struct ifl_chat_val *v;
};
struct ifl_chat_dict {
    size_t n, cap;
    struct ifl_chat_val *k, *v;
};

struct ifl_chat_func;
struct ifl_chat_loop;

struct ifl_chat_val {
    uint8_t t; /* CV_* */
    uint8_t f; /* CVF_* */
    union {
        int b;
        int64_t i;
        double d;
        struct ifl_chat_str *s; /* CV_STR; CV_UNDEF: hint or NULL */
        struct ifl_chat_list *l;
        struct ifl_chat_dict *m; /* CV_DICT and CV_NS */
        struct ifl_chat_func *fn;
        struct ifl_chat_loop *lp;
    } u;
};

typedef struct ifl_chat_val cval;
typedef struct ifl_chat_str cstr;

/* ---- AST ---- */

enum {
    /* expressions */
    N_LIT,
    N_NAME,
    N_ATTR,
    N_ITEM,
    N_SLICE,
    N_CALL,
    N_FILTER,
    N_TEST,
    N_NEG,
    N_POS,
    N_NOT,
    N_BIN,
    N_AND,
    N_OR,
    N_CMP,
    N_COND,
    N_LIST,
    N_TUPLE,
    N_DICT,
    N_CONCAT,
    /* statements */
    S_BODY,
    S_TEXT,
    S_OUT,
    S_IF,
    S_FOR,
    S_SET,
    S_SETBLOCK,
    S_MACRO,
    S_CALLBLOCK,
    S_FILTERBLOCK,
    S_WITH,
    S_BREAK,
    S_CONTINUE,
    S_GENERATION
};

/* binary and comparison operators */
enum {
    OP_ADD = 1,
    OP_SUB,
    OP_MUL,
    OP_DIV,
    OP_FLOORDIV,
    OP_MOD,
    OP_POW,
    OP_EQ,
    OP_NE,
    OP_LT,
    OP_LE,
    OP_GT,
    OP_GE,
    OP_IN,
    OP_NOTIN
};

struct ifl_chat_node {
    uint8_t kind;
    uint8_t op;    /* N_BIN operator; N_TEST: negated; S_SET: 1 = namespace target */
    uint8_t tuple; /* S_FOR / S_SET: the target is a tuple */
    int line;
    struct ifl_chat_node *a, *b, *c, *d;
    struct ifl_chat_node **v, **w; /* child lists: args/items/stmts, kw values/dict values */
    int nv, nw;
    cstr **names; /* kw names, params, targets */
    int nnames;
    uint8_t *ops; /* N_CMP: one operator per v[] operand */
    cstr *s;      /* identifier, attribute, filter/test name */
    cval lit;
    int has_varargs, has_kwargs; /* S_MACRO */
};

struct ifl_chat_template {
    struct ifl_chat_arena ar;
    struct ifl_chat_node *root;
};

/* ---- lexer ---- */

enum {
    T_EOF,
    T_DATA,
    T_VAR_BEGIN,
    T_VAR_END,
    T_BLOCK_BEGIN,
    T_BLOCK_END,
    T_NAME,
    T_STRING,
    T_INT,
    T_FLOAT,
    T_OP
};

struct ifl_chat_token {
    uint8_t type;
    char op[3]; /* T_OP: operator text */
    int line;
    cstr *s; /* T_DATA, T_NAME, T_STRING */
    int64_t i;
    double d;
};

/* Tokenizes src (newlines already normalized) into an arena array. Returns 0,
 * or -1 with msg (IFL_ERR_LEN) and *line set. */
int ifl_chat_lex(struct ifl_chat_arena *a, const char *src, size_t len,
                 struct ifl_chat_token **toks, size_t *ntoks, char *msg, int *line);

int ifl_chat_parse(struct ifl_chat_arena *a, const struct ifl_chat_token *toks, size_t ntoks,
                   struct ifl_chat_node **root, char *msg, int *line);

/* ---- runtime ---- */

struct ifl_chat_sb {
    char *p;
    size_t n, cap;
};

enum { FN_MACRO, FN_GLOBAL, FN_METHOD };

struct ifl_chat_func {
    int kind;
    const struct ifl_chat_node *macro;       /* FN_MACRO */
    struct ifl_chat_scope *closure;          /* FN_MACRO */
    const struct ifl_chat_node *caller_body; /* FN_MACRO used as `caller` */
    const char *name;                        /* FN_GLOBAL / FN_METHOD */
    cval self;                               /* FN_METHOD */
};

struct ifl_chat_loop {
    cval *items;
    size_t n, i;
    int depth;
};

/* Arguments of a call: positional v[0..n), keywords kn[i] = kv[i]. */
struct ifl_chat_args {
    cval *v;
    int n;
    cstr **kn;
    cval *kv;
    int nk;
};

/* A variable scope of a render (a loop iteration, a macro call, a with
 * block); names are looked up through parent. */
struct ifl_chat_scope {
    struct ifl_chat_scope *parent;
    int n, cap;
    const cstr **names;
    cval *vals;
};

/* State of one render. Its fields are the evaluator's (eval.c, access.c,
 * ops.c); the built-ins reach it through the ifl_chat_rt_* accessors. */
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
    struct ifl_chat_scope *root;
    cstr *loop_name;
    struct tm now;
};

/* Fails the current render: formats "<cls>: <message>" into the error
 * buffer and longjmps out. status is an enum ifl_status. */
_Noreturn void ifl_chat_fail(struct ifl_chat_rt *r, int status, const char *cls, const char *fmt,
                             ...) __attribute__((format(printf, 4, 5)));
struct ifl_chat_arena *ifl_chat_rt_arena(struct ifl_chat_rt *r);
void ifl_chat_rt_steps(struct ifl_chat_rt *r, long long n);
const struct tm *ifl_chat_rt_now(struct ifl_chat_rt *r);

/* values (value.c) */
cval ifl_chat_v_str(struct ifl_chat_arena *a, const char *p, size_t n);
cval ifl_chat_v_int(int64_t i);
cval ifl_chat_v_float(double d);
cval ifl_chat_v_bool(int b);
cval ifl_chat_v_none(void);
cval ifl_chat_v_undef(cstr *hint);
cval ifl_chat_v_list(struct ifl_chat_arena *a, size_t cap);
cval ifl_chat_v_dict(struct ifl_chat_arena *a, size_t cap);
void ifl_chat_list_push(struct ifl_chat_arena *a, struct ifl_chat_list *l, cval v);
void ifl_chat_dict_set(struct ifl_chat_arena *a, struct ifl_chat_dict *m, cval k, cval v);
cval *ifl_chat_dict_find(const struct ifl_chat_dict *m, cval k);
cval *ifl_chat_dict_findn(const struct ifl_chat_dict *m, const char *k, size_t n);
int ifl_chat_dict_del(struct ifl_chat_dict *m, cval k, cval *old);
cstr *ifl_chat_mkstr(struct ifl_chat_arena *a, const char *p, size_t n);
cstr *ifl_chat_fmtstr(struct ifl_chat_arena *a, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void ifl_chat_sb_put(struct ifl_chat_arena *a, struct ifl_chat_sb *b, const char *p, size_t n);
void ifl_chat_sb_putc(struct ifl_chat_arena *a, struct ifl_chat_sb *b, char c);
cval ifl_chat_sb_val(struct ifl_chat_arena *a, struct ifl_chat_sb *b);

int ifl_chat_truthy(cval v);
/* Python hash() would succeed: no list, dict or namespace inside. */
int ifl_chat_hashable(cval v, int depth);
const char *ifl_chat_unhashable_name(cval v); /* type name for "unhashable type: '%s'" */
const char *ifl_chat_type_name(cval v);
/* Python str(v) / repr(v) appended to b. */
void ifl_chat_str_of(struct ifl_chat_rt *r, struct ifl_chat_sb *b, cval v);
void ifl_chat_repr_of(struct ifl_chat_rt *r, struct ifl_chat_sb *b, cval v, int depth);
cval ifl_chat_to_str(struct ifl_chat_rt *r, cval v); /* str(v) as a CV_STR (v itself if one) */
/* markupsafe.escape(v): a CVF_SAFE str (v itself when already safe). */
cval ifl_chat_escape(struct ifl_chat_rt *r, cval v);
void ifl_chat_float_repr(char *buf, size_t cap, double d);
/* json.dumps */
struct ifl_chat_json_opts {
    int ensure_ascii, sort_keys;
    const char *indent; /* NULL: none */
    size_t indent_len;
    const char *item_sep, *key_sep;
    size_t item_sep_len, key_sep_len;
};
void ifl_chat_json_dump(struct ifl_chat_rt *r, struct ifl_chat_sb *b, cval v,
                        const struct ifl_chat_json_opts *o, int level);
int ifl_chat_equal(struct ifl_chat_rt *r, cval a, cval b, int depth);
/* <0, 0, >0; fails with TypeError when Python cannot order them. */
int ifl_chat_compare(struct ifl_chat_rt *r, cval a, cval b, const char *opname);
cval ifl_chat_from_json(struct ifl_chat_rt *r, const json_t *j, int depth);

/* UTF-8 helpers */
size_t ifl_chat_utf8_len(const char *p, size_t n);               /* code points */
size_t ifl_chat_utf8_offset(const char *p, size_t n, size_t cp); /* byte offset of cp-th */
uint32_t ifl_chat_utf8_dec(const char *p, size_t n, size_t *adv);
size_t ifl_chat_utf8_enc(uint32_t c, char *out);
int ifl_chat_is_space(uint32_t c); /* Python str.isspace */

/* evaluation helpers used by builtins (eval.c, access.c) */
cval ifl_chat_getattr(struct ifl_chat_rt *r, cval obj, const cstr *name);
cval ifl_chat_getitem(struct ifl_chat_rt *r, cval obj, cval key);
cval ifl_chat_call(struct ifl_chat_rt *r, cval fn, struct ifl_chat_args *a);
/* Materialises any iterable into items; fails like Python for None/int. */
void ifl_chat_iterate(struct ifl_chat_rt *r, cval v, cval **items, size_t *n);

/* between the evaluator's files (eval.c, access.c, ops.c) */
/* Fails with UndefinedError and u's hint (Jinja's message). */
_Noreturn void ifl_chat_undefined_error(struct ifl_chat_rt *r, cval u);
/* An int or bool as a subscript: its value, *ok = 0 for anything else. */
int64_t ifl_chat_index_of(cval k, int *ok);
/* a <op> b for OP_ADD .. OP_POW, with Python's types and overflow checks. */
cval ifl_chat_binop(struct ifl_chat_rt *r, int op, cval a, cval b);
/* -v (neg) or +v. */
cval ifl_chat_unary(struct ifl_chat_rt *r, int neg, cval v);
/* a <op> b for OP_EQ .. OP_NOTIN: true or false. */
int ifl_chat_compare_op(struct ifl_chat_rt *r, int op, cval a, cval b);

/* builtins (builtins.c) */
cval ifl_chat_filter(struct ifl_chat_rt *r, const cstr *name, cval x, struct ifl_chat_args *a);
int ifl_chat_test(struct ifl_chat_rt *r, const cstr *name, cval x, struct ifl_chat_args *a);
/* A method of str/list/dict named name, or 0 if that type has none. */
int ifl_chat_has_method(cval obj, const char *name, size_t len);
cval ifl_chat_method(struct ifl_chat_rt *r, cval self, const char *name, struct ifl_chat_args *a);
/* A global function (range, namespace, dict, raise_exception, strftime_now...), or 0. */
const char *ifl_chat_global_name(const char *name, size_t len);
cval ifl_chat_call_global(struct ifl_chat_rt *r, const char *name, struct ifl_chat_args *a);

#endif
