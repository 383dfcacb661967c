/*
 * Helpers shared by filters.c (filters), builtins.c (tests, dict/list
 * methods, globals) and strings.c (Python str methods and string
 * algorithms). Private to those three files.
 */
#ifndef IFL_CHAT_BUILTINS_H
#define IFL_CHAT_BUILTINS_H

#include <string.h>

#include "chat/internal.h"
#include "core/err.h"

typedef struct ifl_chat_rt rt;
typedef struct ifl_chat_args args;

#define A(r) ifl_chat_rt_arena(r)
#define FAILT(r, ...) ifl_chat_fail(r, IFL_EFORMAT, "TypeError", __VA_ARGS__)

static inline int is_missing(cval v)
{
    return v.t == CV_MISSING;
}

static inline int str_is(const cstr *s, const char *lit)
{
    return strlen(lit) == s->len && memcmp(s->p, lit, s->len) == 0;
}

/* Binds positional and keyword arguments to the names in spec; absent ones
 * are CV_MISSING. */
static inline void bind_args(rt *r, const char *fname, args *a, const char *const *spec, int np,
                             cval *out)
{
    if (a->n > np)
        FAILT(r, "%s() takes at most %d arguments (%d given)", fname, np, a->n);
    for (int i = 0; i < np; i++)
        out[i] = i < a->n ? a->v[i] : (cval){.t = CV_MISSING};
    for (int k = 0; k < a->nk; k++) {
        int i;
        for (i = 0; i < np; i++)
            if (str_is(a->kn[k], spec[i]))
                break;
        if (i == np)
            FAILT(r, "%s() got an unexpected keyword argument '%s'", fname, a->kn[k]->p);
        if (!is_missing(out[i]))
            FAILT(r, "%s() got multiple values for argument '%s'", fname, spec[i]);
        out[i] = a->kv[k];
    }
}

static inline _Noreturn void undef_fail(rt *r, cval u)
{
    ifl_chat_fail(r, IFL_EFORMAT, "UndefinedError", "%s",
                  u.u.s ? u.u.s->p : "'undefined' is undefined");
}

/* str() as (pointer, length) */
static inline cstr *S(rt *r, cval v)
{
    return ifl_chat_to_str(r, v).u.s;
}

static inline cval mkstr(rt *r, const char *p, size_t n)
{
    return ifl_chat_v_str(A(r), p, n);
}

static inline int64_t want_int(rt *r, cval v, const char *what)
{
    if (v.t == CV_INT)
        return v.u.i;
    if (v.t == CV_BOOL)
        return v.u.b;
    if (v.t == CV_UNDEF)
        undef_fail(r, v);
    FAILT(r, "'%s' object cannot be interpreted as an integer (%s)", ifl_chat_type_name(v), what);
}

static inline cstr *want_str(rt *r, cval v, const char *what)
{
    if (v.t == CV_STR)
        return v.u.s;
    if (v.t == CV_UNDEF)
        undef_fail(r, v);
    FAILT(r, "%s must be str, not %s", what, ifl_chat_type_name(v));
}

static inline cval arg_or(args *a, int i, cval def)
{
    return i < a->n ? a->v[i] : def;
}

static inline const char *find_name(const char *const *tbl, const char *name, size_t len)
{
    for (int i = 0; tbl[i]; i++)
        if (strlen(tbl[i]) == len && memcmp(tbl[i], name, len) == 0)
            return tbl[i];
    return NULL;
}

static inline int is_digit_c(uint32_t c)
{
    return c >= '0' && c <= '9';
}

/* shared by filters.c and builtins.c */

static inline void items_of(rt *r, cval v, cval **items, size_t *n)
{
    ifl_chat_iterate(r, v, items, n);
}

static inline cval tuple2(rt *r, cval a, cval b)
{
    cval t = ifl_chat_v_list(A(r), 2);
    t.f = CVF_TUPLE;
    t.u.l->v[0] = a;
    t.u.l->v[1] = b;
    t.u.l->n = 2;
    return t;
}

static inline cval dict_items(rt *r, cval d)
{
    cval out = ifl_chat_v_list(A(r), d.u.m->n);
    for (size_t i = 0; i < d.u.m->n; i++)
        out.u.l->v[i] = tuple2(r, d.u.m->k[i], d.u.m->v[i]);
    out.u.l->n = d.u.m->n;
    return out;
}

/* strings.c */
uint32_t ifl_chat_to_upper(uint32_t c);
uint32_t ifl_chat_to_lower(uint32_t c);
int ifl_chat_is_cased(uint32_t c);
int ifl_chat_is_alpha(uint32_t c);
/* mode: 'u' upper, 'l' lower, 'c' capitalize, 't' Python title, 's' swapcase */
cval ifl_chat_case_map(rt *r, const cstr *s, int mode);
cval ifl_chat_strip(rt *r, const cstr *s, const cstr *chars, int left, int right);
const cstr *ifl_chat_opt_chars(rt *r, cval v);
cval ifl_chat_replace(rt *r, const cstr *s, const cstr *old, const cstr *new, int64_t count);
cval ifl_chat_splitlines(rt *r, const cstr *s, int keepends);
cval ifl_chat_center(rt *r, const cstr *s, int64_t width, const cstr *fill);
cval ifl_chat_jinja_title(rt *r, const cstr *s);
int ifl_chat_is_str_method(const char *name, size_t len);
/* a str method; Markup (CVF_SAFE) receivers follow markupsafe */
cval ifl_chat_str_method(rt *r, cval self, const char *name, args *a);

#endif
