/*
 * Values of the chat-template interpreter: the arena, constructors, dicts
 * and lists, the string builder, UTF-8 helpers, truth and hashability,
 * == and ordering with Python's type rules, and conversion from jansson.
 * How values print (str(), repr(), json.dumps) is in print.c.
 *
 * All memory comes from an arena (see internal.h); an allocation past the
 * arena's cap longjmps to the owner's recovery point, so callers never see
 * NULL.
 */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/internal.h"
#include "core/err.h"
#include "core/utf8.h"

/* ---- arena ---- */

struct ifl_chat_chunk {
    struct ifl_chat_chunk *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
};

#define CHUNK_MIN ((size_t)32 << 10)

static _Noreturn void arena_die(struct ifl_chat_arena *a, int why)
{
    a->failed = why;
    longjmp(*a->oom, 1);
}

void *ifl_chat_alloc(struct ifl_chat_arena *a, size_t n)
{
    n = (n + 15) & ~(size_t)15;
    if (n == 0)
        n = 16;
    struct ifl_chat_chunk *c = a->head;
    if (c && c->size - c->used >= n) {
        void *p = c->data + c->used;
        c->used += n;
        return p;
    }
    if (n > a->cap)
        arena_die(a, 1);
    size_t sz = n > CHUNK_MIN / 4 ? n : CHUNK_MIN;
    if (a->total + sz > a->cap)
        arena_die(a, 1);
    struct ifl_chat_chunk *nc = malloc(sizeof *nc + sz);
    if (!nc)
        arena_die(a, 2);
    a->total += sz;
    nc->size = sz;
    nc->used = n;
    if (sz == n && c) {
        /* a big block: keep the partly used head chunk for small ones */
        nc->next = c->next;
        c->next = nc;
    } else {
        nc->next = c;
        a->head = nc;
    }
    return nc->data;
}

void ifl_chat_arena_free(struct ifl_chat_arena *a)
{
    struct ifl_chat_chunk *c = a->head;
    while (c) {
        struct ifl_chat_chunk *n = c->next;
        free(c);
        c = n;
    }
    a->head = NULL;
    a->total = 0;
}

/* ---- constructors ---- */

cstr *ifl_chat_mkstr(struct ifl_chat_arena *a, const char *p, size_t n)
{
    cstr *s = ifl_chat_alloc(a, sizeof *s + n + 1);
    s->len = n;
    if (n)
        memcpy(s->p, p, n);
    s->p[n] = 0;
    return s;
}

cstr *ifl_chat_fmtstr(struct ifl_chat_arena *a, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n < 0)
        n = 0;
    if ((size_t)n >= sizeof buf)
        n = sizeof buf - 1;
    return ifl_chat_mkstr(a, buf, (size_t)n);
}

cval ifl_chat_v_str(struct ifl_chat_arena *a, const char *p, size_t n)
{
    cval v = {.t = CV_STR};
    v.u.s = ifl_chat_mkstr(a, p, n);
    return v;
}

cval ifl_chat_v_int(int64_t i)
{
    cval v = {.t = CV_INT};
    v.u.i = i;
    return v;
}

cval ifl_chat_v_float(double d)
{
    cval v = {.t = CV_FLOAT};
    v.u.d = d;
    return v;
}

cval ifl_chat_v_bool(int b)
{
    cval v = {.t = CV_BOOL};
    v.u.b = b != 0;
    return v;
}

cval ifl_chat_v_none(void)
{
    cval v = {.t = CV_NONE};
    return v;
}

cval ifl_chat_v_undef(cstr *hint)
{
    cval v = {.t = CV_UNDEF};
    v.u.s = hint;
    return v;
}

cval ifl_chat_v_list(struct ifl_chat_arena *a, size_t cap)
{
    cval v = {.t = CV_LIST};
    v.u.l = ifl_chat_alloc(a, sizeof *v.u.l);
    v.u.l->n = 0;
    v.u.l->cap = cap;
    v.u.l->v = cap ? ifl_chat_alloc(a, cap * sizeof(cval)) : NULL;
    return v;
}

cval ifl_chat_v_dict(struct ifl_chat_arena *a, size_t cap)
{
    cval v = {.t = CV_DICT};
    v.u.m = ifl_chat_alloc(a, sizeof *v.u.m);
    v.u.m->n = 0;
    v.u.m->cap = cap;
    v.u.m->k = cap ? ifl_chat_alloc(a, cap * sizeof(cval)) : NULL;
    v.u.m->v = cap ? ifl_chat_alloc(a, cap * sizeof(cval)) : NULL;
    return v;
}

void ifl_chat_list_push(struct ifl_chat_arena *a, struct ifl_chat_list *l, cval v)
{
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 4;
        cval *nv = ifl_chat_alloc(a, nc * sizeof(cval));
        if (l->n)
            memcpy(nv, l->v, l->n * sizeof(cval));
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = v;
}

static int key_eq(cval a, cval b)
{
    if (a.t == CV_STR && b.t == CV_STR)
        return a.u.s->len == b.u.s->len && memcmp(a.u.s->p, b.u.s->p, a.u.s->len) == 0;
    if (a.t == CV_STR || b.t == CV_STR)
        return 0;
    return ifl_chat_equal(NULL, a, b, 0);
}

cval *ifl_chat_dict_findn(const struct ifl_chat_dict *m, const char *k, size_t n)
{
    for (size_t i = 0; i < m->n; i++) {
        const cval *key = &m->k[i];
        if (key->t == CV_STR && key->u.s->len == n && memcmp(key->u.s->p, k, n) == 0)
            return &m->v[i];
    }
    return NULL;
}

cval *ifl_chat_dict_find(const struct ifl_chat_dict *m, cval k)
{
    if (k.t == CV_STR)
        return ifl_chat_dict_findn(m, k.u.s->p, k.u.s->len);
    for (size_t i = 0; i < m->n; i++)
        if (key_eq(m->k[i], k))
            return &m->v[i];
    return NULL;
}

void ifl_chat_dict_set(struct ifl_chat_arena *a, struct ifl_chat_dict *m, cval k, cval v)
{
    cval *old = ifl_chat_dict_find(m, k);
    if (old) {
        *old = v;
        return;
    }
    if (m->n == m->cap) {
        size_t nc = m->cap ? m->cap * 2 : 4;
        cval *nk = ifl_chat_alloc(a, nc * sizeof(cval));
        cval *nv = ifl_chat_alloc(a, nc * sizeof(cval));
        if (m->n) {
            memcpy(nk, m->k, m->n * sizeof(cval));
            memcpy(nv, m->v, m->n * sizeof(cval));
        }
        m->k = nk;
        m->v = nv;
        m->cap = nc;
    }
    m->k[m->n] = k;
    m->v[m->n] = v;
    m->n++;
}

int ifl_chat_dict_del(struct ifl_chat_dict *m, cval k, cval *old)
{
    cval *p = ifl_chat_dict_find(m, k);
    if (!p)
        return 0;
    size_t i = (size_t)(p - m->v);
    if (old)
        *old = m->v[i];
    memmove(m->k + i, m->k + i + 1, (m->n - i - 1) * sizeof(cval));
    memmove(m->v + i, m->v + i + 1, (m->n - i - 1) * sizeof(cval));
    m->n--;
    return 1;
}

/* ---- string builder ---- */

void ifl_chat_sb_put(struct ifl_chat_arena *a, struct ifl_chat_sb *b, const char *p, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t nc = b->cap ? b->cap * 2 : 64;
        while (nc < b->n + n + 1)
            nc *= 2;
        char *np = ifl_chat_alloc(a, nc);
        if (b->n)
            memcpy(np, b->p, b->n);
        b->p = np;
        b->cap = nc;
    }
    if (n)
        memcpy(b->p + b->n, p, n);
    b->n += n;
    b->p[b->n] = 0;
}

void ifl_chat_sb_putc(struct ifl_chat_arena *a, struct ifl_chat_sb *b, char c)
{
    ifl_chat_sb_put(a, b, &c, 1);
}

cval ifl_chat_sb_val(struct ifl_chat_arena *a, struct ifl_chat_sb *b)
{
    return ifl_chat_v_str(a, b->p ? b->p : "", b->n);
}

/* ---- UTF-8 ---- */

uint32_t ifl_chat_utf8_dec(const char *s, size_t n, size_t *adv)
{
    const unsigned char *p = (const unsigned char *)s;
    size_t len;
    if (n == 0) {
        *adv = 0;
        return 0;
    }
    if (ifl_utf8_check(p, n, &len) != IFL_UTF8_OK) {
        *adv = 1; /* one bad byte, one U+FFFD */
        return 0xfffd;
    }
    *adv = len;
    return ifl_utf8_decode(p, len);
}

size_t ifl_chat_utf8_enc(uint32_t c, char *o)
{
    return ifl_utf8_encode(c > 0x10ffff ? 0xfffd : c, o);
}

size_t ifl_chat_utf8_len(const char *p, size_t n)
{
    size_t k = 0, i = 0;
    while (i < n) {
        size_t adv;
        if ((unsigned char)p[i] < 0x80) {
            i++;
        } else {
            ifl_chat_utf8_dec(p + i, n - i, &adv);
            i += adv;
        }
        k++;
    }
    return k;
}

size_t ifl_chat_utf8_offset(const char *p, size_t n, size_t cp)
{
    size_t i = 0;
    while (cp > 0 && i < n) {
        size_t adv;
        ifl_chat_utf8_dec(p + i, n - i, &adv);
        i += adv;
        cp--;
    }
    return i;
}

int ifl_chat_is_space(uint32_t c)
{
    return (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x20) || c == 0x85 || c == 0xa0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200a) || c == 0x2028 || c == 0x2029 ||
           c == 0x202f || c == 0x205f || c == 0x3000;
}

/* ---- truth, hashing, type names ---- */

int ifl_chat_truthy(cval v)
{
    switch (v.t) {
    case CV_UNDEF:
    case CV_NONE:
    case CV_MISSING:
        return 0;
    case CV_BOOL:
        return v.u.b;
    case CV_INT:
        return v.u.i != 0;
    case CV_FLOAT:
        return v.u.d != 0.0;
    case CV_STR:
        return v.u.s->len != 0;
    case CV_LIST:
        return (v.f & CVF_GEN) || v.u.l->n != 0;
    case CV_DICT:
        return v.u.m->n != 0;
    default:
        return 1;
    }
}

int ifl_chat_hashable(cval v, int depth)
{
    if (v.t == CV_DICT || v.t == CV_NS || (v.t == CV_LIST && !(v.f & CVF_TUPLE)))
        return 0;
    if (v.t == CV_LIST && depth < 100)
        for (size_t i = 0; i < v.u.l->n; i++)
            if (!ifl_chat_hashable(v.u.l->v[i], depth + 1))
                return 0;
    return 1;
}

/* the first unhashable value inside v (v itself when it is one) */
static cval unhashable_part(cval v)
{
    if (v.t == CV_LIST && (v.f & CVF_TUPLE))
        for (size_t i = 0; i < v.u.l->n; i++)
            if (!ifl_chat_hashable(v.u.l->v[i], 0))
                return unhashable_part(v.u.l->v[i]);
    return v;
}

const char *ifl_chat_unhashable_name(cval v)
{
    return ifl_chat_type_name(unhashable_part(v));
}

const char *ifl_chat_type_name(cval v)
{
    switch (v.t) {
    case CV_UNDEF:
    case CV_MISSING:
        return "Undefined";
    case CV_NONE:
        return "NoneType";
    case CV_BOOL:
        return "bool";
    case CV_INT:
        return "int";
    case CV_FLOAT:
        return "float";
    case CV_STR:
        return (v.f & CVF_SAFE) ? "Markup" : "str";
    case CV_LIST:
        if (v.f & CVF_VIEW)
            return (v.f & CVF_VIEW_KEYS)     ? "dict_keys"
                   : (v.f & CVF_VIEW_VALUES) ? "dict_values"
                                             : "dict_items";
        return (v.f & CVF_GEN) ? "generator" : (v.f & CVF_TUPLE) ? "tuple" : "list";
    case CV_DICT:
        return "dict";
    case CV_NS:
        return "Namespace";
    case CV_FUNC:
        return v.u.fn->kind == FN_MACRO ? "Macro" : "builtin_function_or_method";
    case CV_LOOP:
        return "LoopContext";
    }
    return "object";
}

/* ---- comparison ---- */

static int is_num(cval v)
{
    return v.t == CV_BOOL || v.t == CV_INT || v.t == CV_FLOAT;
}

static double num_d(cval v)
{
    return v.t == CV_FLOAT ? v.u.d : v.t == CV_INT ? (double)v.u.i : (double)v.u.b;
}

static int64_t num_i(cval v)
{
    return v.t == CV_INT ? v.u.i : v.u.b;
}

int ifl_chat_equal(struct ifl_chat_rt *r, cval a, cval b, int depth)
{
    if (depth > 200)
        return 0;
    if (r)
        ifl_chat_rt_steps(r, 1);
    if (is_num(a) && is_num(b)) {
        if (a.t == CV_FLOAT || b.t == CV_FLOAT)
            return num_d(a) == num_d(b);
        return num_i(a) == num_i(b);
    }
    if (a.t != b.t) {
        if ((a.t == CV_UNDEF && b.t == CV_MISSING) || (a.t == CV_MISSING && b.t == CV_UNDEF))
            return 1;
        return 0;
    }
    switch (a.t) {
    case CV_UNDEF:
    case CV_NONE:
    case CV_MISSING:
        return 1;
    case CV_STR:
        return a.u.s->len == b.u.s->len && memcmp(a.u.s->p, b.u.s->p, a.u.s->len) == 0;
    case CV_LIST:
        if ((a.f | b.f) & CVF_LAZY)
            return a.u.l == b.u.l;
        if ((a.f & CVF_TUPLE) != (b.f & CVF_TUPLE) || a.u.l->n != b.u.l->n)
            return 0;
        if (a.u.l == b.u.l)
            return 1;
        for (size_t i = 0; i < a.u.l->n; i++)
            if (!ifl_chat_equal(r, a.u.l->v[i], b.u.l->v[i], depth + 1))
                return 0;
        return 1;
    case CV_DICT:
        if (a.u.m->n != b.u.m->n)
            return 0;
        if (a.u.m == b.u.m)
            return 1;
        for (size_t i = 0; i < a.u.m->n; i++) {
            cval *o = ifl_chat_dict_find(b.u.m, a.u.m->k[i]);
            if (!o || !ifl_chat_equal(r, a.u.m->v[i], *o, depth + 1))
                return 0;
        }
        return 1;
    case CV_NS:
        return a.u.m == b.u.m;
    case CV_FUNC:
        return a.u.fn == b.u.fn;
    case CV_LOOP:
        return a.u.lp == b.u.lp;
    }
    return 0;
}

int ifl_chat_compare(struct ifl_chat_rt *r, cval a, cval b, const char *opname)
{
    ifl_chat_rt_steps(r, 1);
    if (a.t == CV_UNDEF || a.t == CV_MISSING || b.t == CV_UNDEF || b.t == CV_MISSING) {
        cval u = (a.t == CV_UNDEF || a.t == CV_MISSING) ? a : b;
        ifl_chat_fail(r, IFL_EFORMAT, "UndefinedError", "%s",
                      u.u.s ? u.u.s->p : "value is undefined");
    }
    if (is_num(a) && is_num(b)) {
        if (a.t == CV_FLOAT || b.t == CV_FLOAT) {
            double x = num_d(a), y = num_d(b);
            return x < y ? -1 : x > y ? 1 : 0;
        }
        int64_t x = num_i(a), y = num_i(b);
        return x < y ? -1 : x > y ? 1 : 0;
    }
    if (a.t == CV_STR && b.t == CV_STR) {
        size_t n = a.u.s->len < b.u.s->len ? a.u.s->len : b.u.s->len;
        ifl_chat_rt_steps(r, (long long)(n / 64));
        int c = memcmp(a.u.s->p, b.u.s->p, n);
        if (c)
            return c < 0 ? -1 : 1;
        return a.u.s->len < b.u.s->len ? -1 : a.u.s->len > b.u.s->len ? 1 : 0;
    }
    if (a.t == CV_LIST && b.t == CV_LIST && !((a.f | b.f) & CVF_LAZY) &&
        (a.f & CVF_TUPLE) == (b.f & CVF_TUPLE)) {
        size_t n = a.u.l->n < b.u.l->n ? a.u.l->n : b.u.l->n;
        for (size_t i = 0; i < n; i++) {
            if (ifl_chat_equal(r, a.u.l->v[i], b.u.l->v[i], 0))
                continue;
            return ifl_chat_compare(r, a.u.l->v[i], b.u.l->v[i], opname);
        }
        return a.u.l->n < b.u.l->n ? -1 : a.u.l->n > b.u.l->n ? 1 : 0;
    }
    ifl_chat_fail(r, IFL_EFORMAT, "TypeError",
                  "'%s' not supported between instances of '%s' and '%s'", opname,
                  ifl_chat_type_name(a), ifl_chat_type_name(b));
}

/* ---- jansson ---- */

cval ifl_chat_from_json(struct ifl_chat_rt *r, const json_t *j, int depth)
{
    struct ifl_chat_arena *a = ifl_chat_rt_arena(r);
    if (depth > 200)
        ifl_chat_fail(r, IFL_EINVAL, "ValueError", "context nests deeper than 200 levels");
    ifl_chat_rt_steps(r, 1);
    switch (json_typeof(j)) {
    case JSON_OBJECT: {
        cval v = ifl_chat_v_dict(a, json_object_size(j));
        const char *k;
        json_t *x;
        json_object_foreach((json_t *)j, k, x)
        {
            cval key = ifl_chat_v_str(a, k, strlen(k));
            ifl_chat_dict_set(a, v.u.m, key, ifl_chat_from_json(r, x, depth + 1));
        }
        return v;
    }
    case JSON_ARRAY: {
        size_t n = json_array_size(j);
        cval v = ifl_chat_v_list(a, n);
        for (size_t i = 0; i < n; i++)
            ifl_chat_list_push(a, v.u.l, ifl_chat_from_json(r, json_array_get(j, i), depth + 1));
        return v;
    }
    case JSON_STRING:
        return ifl_chat_v_str(a, json_string_value(j), json_string_length(j));
    case JSON_INTEGER:
        return ifl_chat_v_int((int64_t)json_integer_value(j));
    case JSON_REAL:
        return ifl_chat_v_float(json_real_value(j));
    case JSON_TRUE:
        return ifl_chat_v_bool(1);
    case JSON_FALSE:
        return ifl_chat_v_bool(0);
    default:
        return ifl_chat_v_none();
    }
}
