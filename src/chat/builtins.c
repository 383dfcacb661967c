/*
 * Built-ins of the chat-template interpreter: Jinja2's filters and tests
 * that chat templates use, the Python str/dict/list methods a sandboxed
 * template can call, and the globals transformers provides (range,
 * namespace, dict, raise_exception, strftime_now).
 *
 * Each follows its Python original (jinja2/filters.py, jinja2/tests.py,
 * CPython's str methods) including argument names, defaults and the odd
 * corner (indent's trailing-newline quirk, default() only replacing
 * Undefined unless boolean=true, map/select/reject/unique returning
 * generators that tojson refuses). Case mapping covers ASCII, Latin-1,
 * Latin Extended-A, Greek and Cyrillic.
 *
 * Deliberate difference from ImmutableSandboxedEnvironment: list.append /
 * pop / insert / extend and dict.pop / update / setdefault work instead of
 * raising SecurityError (some templates, e.g. Kimi K2's, rely on them, and
 * llama.cpp allows them).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/internal.h"
#include "core/err.h"

typedef struct ifl_chat_rt rt;
typedef struct ifl_chat_args args;

#define A(r) ifl_chat_rt_arena(r)
#define FAILT(r, ...) ifl_chat_fail(r, IFL_EFORMAT, "TypeError", __VA_ARGS__)

static int is_missing(cval v)
{
    return v.t == CV_MISSING;
}

static int str_is(const cstr *s, const char *lit)
{
    return strlen(lit) == s->len && memcmp(s->p, lit, s->len) == 0;
}

/* Binds positional and keyword arguments to the names in spec; absent ones
 * are CV_MISSING. */
static void bind(rt *r, const char *fname, args *a, const char *const *spec, int np, cval *out)
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

static _Noreturn void undef_fail(rt *r, cval u)
{
    ifl_chat_fail(r, IFL_EFORMAT, "UndefinedError", "%s",
                  u.u.s ? u.u.s->p : "'undefined' is undefined");
}

/* str() as (pointer, length) */
static cstr *S(rt *r, cval v)
{
    return ifl_chat_to_str(r, v).u.s;
}

static cval mkstr(rt *r, const char *p, size_t n)
{
    return ifl_chat_v_str(A(r), p, n);
}

static int64_t want_int(rt *r, cval v, const char *what)
{
    if (v.t == CV_INT)
        return v.u.i;
    if (v.t == CV_BOOL)
        return v.u.b;
    if (v.t == CV_UNDEF)
        undef_fail(r, v);
    FAILT(r, "'%s' object cannot be interpreted as an integer (%s)", ifl_chat_type_name(v), what);
}

static cstr *want_str(rt *r, cval v, const char *what)
{
    if (v.t == CV_STR)
        return v.u.s;
    if (v.t == CV_UNDEF)
        undef_fail(r, v);
    FAILT(r, "%s must be str, not %s", what, ifl_chat_type_name(v));
}

/* ---- case mapping ---- */

static uint32_t to_upper(uint32_t c)
{
    if (c < 0x80)
        return (c >= 'a' && c <= 'z') ? c - 32 : c;
    if ((c >= 0xe0 && c <= 0xfe && c != 0xf7))
        return c - 32;
    if (c == 0xff)
        return 0x178;
    if (c == 0xb5)
        return 0x39c;
    if (c >= 0x100 && c <= 0x17f) {
        if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e))
            return (c & 1) ? c : c - 1;
        if (c == 0x131)
            return 'I';
        if (c == 0x17f)
            return 'S';
        if (c != 0x138 && c != 0x149 && c != 0x130)
            return (c & 1) ? c - 1 : c;
        return c;
    }
    if (c >= 0x3b1 && c <= 0x3c9 && c != 0x3c2)
        return c - 32;
    if (c == 0x3c2)
        return 0x3a3;
    if (c >= 0x430 && c <= 0x44f)
        return c - 32;
    if (c >= 0x450 && c <= 0x45f)
        return c - 80;
    return c;
}

static uint32_t to_lower(uint32_t c)
{
    if (c < 0x80)
        return (c >= 'A' && c <= 'Z') ? c + 32 : c;
    if (c >= 0xc0 && c <= 0xde && c != 0xd7)
        return c + 32;
    if (c == 0x178)
        return 0xff;
    if (c >= 0x100 && c <= 0x17f) {
        if ((c >= 0x139 && c <= 0x148) || (c >= 0x179 && c <= 0x17e))
            return (c & 1) ? c + 1 : c;
        if (c == 0x130)
            return 'i';
        if (c != 0x138 && c != 0x149 && c != 0x131 && c != 0x17f)
            return (c & 1) ? c : c + 1;
        return c;
    }
    if (c >= 0x391 && c <= 0x3a9 && c != 0x3a2)
        return c + 32;
    if (c >= 0x410 && c <= 0x42f)
        return c + 32;
    if (c >= 0x400 && c <= 0x40f)
        return c + 80;
    return c;
}

static int is_cased(uint32_t c)
{
    return to_upper(c) != c || to_lower(c) != c;
}

static int is_alpha(uint32_t c)
{
    return (c < 0x80) ? ((c | 32) >= 'a' && (c | 32) <= 'z') : (is_cased(c) || c >= 0x3040);
}

static int is_digit_cp(uint32_t c)
{
    return c >= '0' && c <= '9';
}

/* mode: 'u' upper, 'l' lower, 'c' capitalize, 't' Python title, 's' swapcase */
static cval case_map(rt *r, const cstr *s, int mode)
{
    struct ifl_chat_sb b = {0};
    size_t i = 0;
    int prev_cased = 0, first = 1;
    while (i < s->len) {
        size_t adv;
        uint32_t c = ifl_chat_utf8_dec(s->p + i, s->len - i, &adv);
        uint32_t o = c;
        switch (mode) {
        case 'u':
            o = to_upper(c);
            break;
        case 'l':
            o = to_lower(c);
            break;
        case 'c':
            o = first ? to_upper(c) : to_lower(c);
            break;
        case 't':
            o = prev_cased ? to_lower(c) : to_upper(c);
            prev_cased = is_cased(c);
            break;
        case 's':
            o = to_upper(c) != c ? to_upper(c) : to_lower(c);
            break;
        }
        first = 0;
        if (o == c) {
            ifl_chat_sb_put(A(r), &b, s->p + i, adv);
        } else {
            char tmp[4];
            ifl_chat_sb_put(A(r), &b, tmp, ifl_chat_utf8_enc(o, tmp));
        }
        i += adv;
    }
    ifl_chat_rt_steps(r, (long long)(s->len / 16));
    return ifl_chat_sb_val(A(r), &b);
}

/* ---- strip / split / replace ---- */

static int in_chars(uint32_t c, const cstr *chars)
{
    if (!chars)
        return ifl_chat_is_space(c);
    size_t i = 0;
    while (i < chars->len) {
        size_t adv;
        if (ifl_chat_utf8_dec(chars->p + i, chars->len - i, &adv) == c)
            return 1;
        i += adv;
    }
    return 0;
}

static cval strip(rt *r, const cstr *s, const cstr *chars, int left, int right)
{
    size_t st = 0, en = s->len;
    if (left)
        while (st < en) {
            size_t adv;
            uint32_t c = ifl_chat_utf8_dec(s->p + st, en - st, &adv);
            if (!in_chars(c, chars))
                break;
            st += adv;
        }
    if (right)
        while (en > st) {
            size_t b = en - 1, adv;
            while (b > st && ((unsigned char)s->p[b] & 0xc0) == 0x80)
                b--;
            uint32_t c = ifl_chat_utf8_dec(s->p + b, en - b, &adv);
            if (!in_chars(c, chars))
                break;
            en = b;
        }
    ifl_chat_rt_steps(r, (long long)(s->len / 64));
    return mkstr(r, s->p + st, en - st);
}

static const cstr *opt_chars(rt *r, cval v)
{
    if (is_missing(v) || v.t == CV_NONE)
        return NULL;
    return want_str(r, v, "strip arg");
}

static size_t space_at(const char *p, size_t n)
{
    size_t adv;
    if (n == 0)
        return 0;
    uint32_t c = ifl_chat_utf8_dec(p, n, &adv);
    return ifl_chat_is_space(c) ? adv : 0;
}

static cval split(rt *r, const cstr *s, const cstr *sep, int64_t maxsplit, int from_right)
{
    cval out = ifl_chat_v_list(A(r), 4);
    const char *p = s->p;
    size_t n = s->len;
    ifl_chat_rt_steps(r, (long long)(n / 16));
    if (sep && sep->len == 0)
        ifl_chat_fail(r, IFL_EFORMAT, "ValueError", "empty separator");
    if (!from_right) {
        if (!sep) {
            size_t i = 0;
            for (;;) {
                size_t w;
                while (i < n && (w = space_at(p + i, n - i)))
                    i += w;
                if (i >= n)
                    break;
                if (maxsplit >= 0 && (int64_t)out.u.l->n >= maxsplit) {
                    /* the rest, with trailing whitespace removed */
                    cstr rest_s = {0};
                    (void)rest_s;
                    cval rest = strip(r, ifl_chat_mkstr(A(r), p + i, n - i), NULL, 0, 1);
                    ifl_chat_list_push(A(r), out.u.l, rest);
                    break;
                }
                size_t j = i;
                while (j < n && !space_at(p + j, n - j)) {
                    size_t adv;
                    ifl_chat_utf8_dec(p + j, n - j, &adv);
                    j += adv;
                }
                ifl_chat_list_push(A(r), out.u.l, mkstr(r, p + i, j - i));
                i = j;
            }
            return out;
        }
        size_t i = 0;
        for (;;) {
            const char *hit = NULL;
            if (maxsplit < 0 || (int64_t)out.u.l->n < maxsplit)
                hit = memmem(p + i, n - i, sep->p, sep->len);
            if (!hit) {
                ifl_chat_list_push(A(r), out.u.l, mkstr(r, p + i, n - i));
                return out;
            }
            size_t k = (size_t)(hit - p);
            ifl_chat_list_push(A(r), out.u.l, mkstr(r, p + i, k - i));
            i = k + sep->len;
        }
    }
    /* rsplit: collect from the right, then reverse */
    cval rev = ifl_chat_v_list(A(r), 4);
    size_t end = n;
    if (!sep) {
        for (;;) {
            while (end > 0) {
                size_t b = end - 1;
                while (b > 0 && ((unsigned char)p[b] & 0xc0) == 0x80)
                    b--;
                if (!space_at(p + b, end - b))
                    break;
                end = b;
            }
            if (end == 0)
                break;
            if (maxsplit >= 0 && (int64_t)rev.u.l->n >= maxsplit) {
                cval rest = strip(r, ifl_chat_mkstr(A(r), p, end), NULL, 1, 0);
                ifl_chat_list_push(A(r), rev.u.l, rest);
                break;
            }
            size_t st = end;
            while (st > 0) {
                size_t b = st - 1;
                while (b > 0 && ((unsigned char)p[b] & 0xc0) == 0x80)
                    b--;
                if (space_at(p + b, st - b))
                    break;
                st = b;
            }
            ifl_chat_list_push(A(r), rev.u.l, mkstr(r, p + st, end - st));
            end = st;
        }
    } else {
        for (;;) {
            size_t k = (size_t)-1;
            if (maxsplit < 0 || (int64_t)rev.u.l->n < maxsplit)
                for (size_t j = end; j >= sep->len && j > 0; j--)
                    if (memcmp(p + j - sep->len, sep->p, sep->len) == 0) {
                        k = j - sep->len;
                        break;
                    }
            if (k == (size_t)-1) {
                ifl_chat_list_push(A(r), rev.u.l, mkstr(r, p, end));
                break;
            }
            ifl_chat_list_push(A(r), rev.u.l, mkstr(r, p + k + sep->len, end - k - sep->len));
            end = k;
        }
    }
    for (size_t i = rev.u.l->n; i > 0; i--)
        ifl_chat_list_push(A(r), out.u.l, rev.u.l->v[i - 1]);
    return out;
}

static cval replace(rt *r, const cstr *s, const cstr *old, const cstr *new, int64_t count)
{
    struct ifl_chat_sb b = {0};
    ifl_chat_rt_steps(r, (long long)(s->len / 16));
    if (old->len == 0) {
        /* Python inserts new between every character and at both ends */
        size_t i = 0;
        int64_t done = 0;
        for (;;) {
            if (count < 0 || done < count) {
                ifl_chat_sb_put(A(r), &b, new->p, new->len);
                done++;
            }
            if (i >= s->len)
                break;
            size_t adv;
            ifl_chat_utf8_dec(s->p + i, s->len - i, &adv);
            ifl_chat_sb_put(A(r), &b, s->p + i, adv);
            i += adv;
        }
        return ifl_chat_sb_val(A(r), &b);
    }
    size_t i = 0;
    int64_t done = 0;
    while (i <= s->len) {
        const char *hit = (count < 0 || done < count)
                              ? memmem(s->p + i, s->len - i, old->p, old->len)
                              : NULL;
        if (!hit) {
            ifl_chat_sb_put(A(r), &b, s->p + i, s->len - i);
            break;
        }
        size_t k = (size_t)(hit - s->p);
        ifl_chat_sb_put(A(r), &b, s->p + i, k - i);
        ifl_chat_sb_put(A(r), &b, new->p, new->len);
        i = k + old->len;
        done++;
    }
    return ifl_chat_sb_val(A(r), &b);
}

/* Python str.splitlines() line boundaries */
static size_t line_break_at(const char *p, size_t n)
{
    unsigned char c = (unsigned char)p[0];
    if (c == '\r')
        return (n > 1 && p[1] == '\n') ? 2 : 1;
    if (c == '\n' || c == '\v' || c == '\f' || (c >= 0x1c && c <= 0x1e))
        return 1;
    if (c >= 0x80) {
        size_t adv;
        uint32_t cp = ifl_chat_utf8_dec(p, n, &adv);
        if (cp == 0x85 || cp == 0x2028 || cp == 0x2029)
            return adv;
    }
    return 0;
}

static cval splitlines(rt *r, const cstr *s, int keepends)
{
    cval out = ifl_chat_v_list(A(r), 4);
    size_t i = 0, st = 0;
    while (i < s->len) {
        size_t k = line_break_at(s->p + i, s->len - i);
        if (k) {
            ifl_chat_list_push(A(r), out.u.l, mkstr(r, s->p + st, (keepends ? i + k : i) - st));
            i += k;
            st = i;
        } else {
            i++;
        }
    }
    if (st < s->len)
        ifl_chat_list_push(A(r), out.u.l, mkstr(r, s->p + st, s->len - st));
    return out;
}

/* ---- attribute getter used by map/selectattr/sort/... (jinja make_attrgetter) ---- */

static cval attr_get(rt *r, cval item, const cstr *path)
{
    size_t i = 0;
    while (i <= path->len) {
        const char *dot = memchr(path->p + i, '.', path->len - i);
        size_t e = dot ? (size_t)(dot - path->p) : path->len;
        cval key = mkstr(r, path->p + i, e - i);
        int digits = e > i;
        for (size_t k = i; k < e; k++)
            digits &= is_digit_cp((unsigned char)path->p[k]);
        if (digits && e - i < 18)
            key = ifl_chat_v_int(strtoll(key.u.s->p, NULL, 10));
        item = ifl_chat_getitem(r, item, key);
        if (!dot)
            break;
        i = e + 1;
    }
    return item;
}

/* ---- sorting (stable merge sort, Python's sorted) ---- */

struct sort_ctx {
    rt *r;
    cval *keys;
    int reverse;
};

static int before(struct sort_ctx *c, size_t a, size_t b)
{
    /* may element b (later) come before a? only if strictly less */
    if (c->reverse)
        return ifl_chat_compare(c->r, c->keys[a], c->keys[b], "<") < 0;
    return ifl_chat_compare(c->r, c->keys[b], c->keys[a], "<") < 0;
}

static void merge_sort(struct sort_ctx *c, size_t *idx, size_t *tmp, size_t n)
{
    if (n < 2)
        return;
    size_t h = n / 2;
    merge_sort(c, idx, tmp, h);
    merge_sort(c, idx + h, tmp, n - h);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        if (before(c, idx[i], idx[j]))
            tmp[k++] = idx[j++];
        else
            tmp[k++] = idx[i++];
    }
    while (i < h)
        tmp[k++] = idx[i++];
    while (j < n)
        tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
    ifl_chat_rt_steps(c->r, (long long)n);
}

static cval sort_key(rt *r, cval item, const cstr *attr, int case_sensitive)
{
    cval k = attr ? attr_get(r, item, attr) : item;
    if (!case_sensitive && k.t == CV_STR)
        k = case_map(r, k.u.s, 'l');
    return k;
}

static size_t *sorted_order(rt *r, cval *keys, size_t n, int reverse)
{
    size_t *idx = ifl_chat_alloc(A(r), (n ? n : 1) * sizeof *idx);
    size_t *tmp = ifl_chat_alloc(A(r), (n ? n : 1) * sizeof *tmp);
    for (size_t i = 0; i < n; i++)
        idx[i] = i;
    struct sort_ctx c = {r, keys, reverse};
    merge_sort(&c, idx, tmp, n);
    return idx;
}

/* ---- helpers for filters ---- */

static void items_of(rt *r, cval v, cval **items, size_t *n)
{
    ifl_chat_iterate(r, v, items, n);
}

static cval gen_of(cval list)
{
    list.f = CVF_GEN;
    return list;
}

static cval list_of(rt *r, cval v)
{
    cval *it;
    size_t n;
    items_of(r, v, &it, &n);
    cval out = ifl_chat_v_list(A(r), n);
    if (n)
        memcpy(out.u.l->v, it, n * sizeof(cval));
    out.u.l->n = n;
    return out;
}

static int64_t length_of(rt *r, cval v)
{
    switch (v.t) {
    case CV_STR:
        return (int64_t)ifl_chat_utf8_len(v.u.s->p, v.u.s->len);
    case CV_LIST:
        if (v.f & CVF_GEN)
            break;
        return (int64_t)v.u.l->n;
    case CV_DICT:
        return (int64_t)v.u.m->n;
    case CV_UNDEF:
    case CV_MISSING:
        return 0;
    default:
        break;
    }
    FAILT(r, "object of type '%s' has no len()", ifl_chat_type_name(v));
}

static cval tuple2(rt *r, cval a, cval b)
{
    cval t = ifl_chat_v_list(A(r), 2);
    t.f = CVF_TUPLE;
    t.u.l->v[0] = a;
    t.u.l->v[1] = b;
    t.u.l->n = 2;
    return t;
}

static cval dict_items(rt *r, cval d)
{
    cval out = ifl_chat_v_list(A(r), d.u.m->n);
    for (size_t i = 0; i < d.u.m->n; i++)
        out.u.l->v[i] = tuple2(r, d.u.m->k[i], d.u.m->v[i]);
    out.u.l->n = d.u.m->n;
    return out;
}

static cval tojson(rt *r, cval x, args *a)
{
    static const char *const spec[] = {"ensure_ascii", "indent", "separators", "sort_keys"};
    cval p[4];
    bind(r, "tojson", a, spec, 4, p);
    struct ifl_chat_json_opts o = {0};
    o.ensure_ascii = !is_missing(p[0]) && ifl_chat_truthy(p[0]);
    o.sort_keys = !is_missing(p[3]) && ifl_chat_truthy(p[3]);
    char *ind = NULL;
    if (!is_missing(p[1]) && p[1].t != CV_NONE) {
        if (p[1].t == CV_STR) {
            o.indent = p[1].u.s->p;
            o.indent_len = p[1].u.s->len;
        } else {
            int64_t k = want_int(r, p[1], "indent");
            if (k < 0)
                k = 0;
            if (k > 1024)
                k = 1024;
            ind = ifl_chat_alloc(A(r), (size_t)k + 1);
            memset(ind, ' ', (size_t)k);
            o.indent = ind;
            o.indent_len = (size_t)k;
        }
    }
    o.item_sep = o.indent ? "," : ", ";
    o.key_sep = ": ";
    if (!is_missing(p[2]) && p[2].t != CV_NONE) {
        if (p[2].t != CV_LIST || p[2].u.l->n != 2 || p[2].u.l->v[0].t != CV_STR ||
            p[2].u.l->v[1].t != CV_STR)
            ifl_chat_fail(r, IFL_EFORMAT, "ValueError", "separators must be two strings");
        o.item_sep = p[2].u.l->v[0].u.s->p;
        o.key_sep = p[2].u.l->v[1].u.s->p;
        o.item_sep_len = p[2].u.l->v[0].u.s->len;
        o.key_sep_len = p[2].u.l->v[1].u.s->len;
    } else {
        o.item_sep_len = strlen(o.item_sep);
        o.key_sep_len = 2;
    }
    struct ifl_chat_sb b = {0};
    ifl_chat_json_dump(r, &b, x, &o, 0);
    return ifl_chat_sb_val(A(r), &b);
}

static cval indent(rt *r, cval x, args *a)
{
    static const char *const spec[] = {"width", "first", "blank"};
    cval p[3];
    bind(r, "indent", a, spec, 3, p);
    const cstr *s = S(r, x);
    cstr *ind;
    if (!is_missing(p[0]) && p[0].t == CV_STR) {
        ind = p[0].u.s;
    } else {
        int64_t w = is_missing(p[0]) ? 4 : want_int(r, p[0], "width");
        if (w < 0)
            w = 0;
        if (w > 4096)
            w = 4096;
        char buf[4097];
        memset(buf, ' ', (size_t)w);
        ind = ifl_chat_mkstr(A(r), buf, (size_t)w);
    }
    int first = !is_missing(p[1]) && ifl_chat_truthy(p[1]);
    int blank = !is_missing(p[2]) && ifl_chat_truthy(p[2]);
    struct ifl_chat_sb t = {0};
    ifl_chat_sb_put(A(r), &t, s->p, s->len);
    ifl_chat_sb_putc(A(r), &t, '\n');
    cval lines = splitlines(r, ifl_chat_mkstr(A(r), t.p, t.n), 0);
    struct ifl_chat_sb b = {0};
    if (first)
        ifl_chat_sb_put(A(r), &b, ind->p, ind->len);
    for (size_t i = 0; i < lines.u.l->n; i++) {
        const cstr *ln = lines.u.l->v[i].u.s;
        if (i) {
            ifl_chat_sb_putc(A(r), &b, '\n');
            if (blank || ln->len)
                ifl_chat_sb_put(A(r), &b, ind->p, ind->len);
        }
        ifl_chat_sb_put(A(r), &b, ln->p, ln->len);
    }
    return ifl_chat_sb_val(A(r), &b);
}

static int parse_py_int(const cstr *s, int64_t base, int64_t *out)
{
    const char *p = s->p, *e = s->p + s->len;
    while (p < e && (*p == ' ' || (*p >= 9 && *p <= 13)))
        p++;
    while (e > p && (e[-1] == ' ' || (e[-1] >= 9 && e[-1] <= 13)))
        e--;
    int neg = 0;
    if (p < e && (*p == '+' || *p == '-'))
        neg = *p++ == '-';
    if (base == 16 && e - p > 2 && p[0] == '0' && (p[1] | 32) == 'x')
        p += 2;
    if (p >= e)
        return -1;
    uint64_t v = 0;
    int prev_us = 1;
    for (; p < e; p++) {
        if (*p == '_') {
            if (prev_us)
                return -1;
            prev_us = 1;
            continue;
        }
        int d = (*p >= '0' && *p <= '9') ? *p - '0' : ((*p | 32) >= 'a' && (*p | 32) <= 'z') ? (*p | 32) - 'a' + 10 : 99;
        if (d >= base)
            return -1;
        if (v > ((uint64_t)INT64_MAX - (uint64_t)d) / (uint64_t)base)
            return -1;
        v = v * (uint64_t)base + (uint64_t)d;
        prev_us = 0;
    }
    if (prev_us)
        return -1;
    *out = neg ? -(int64_t)v : (int64_t)v;
    return 0;
}

static int parse_py_float(const cstr *s, double *out)
{
    char *end;
    const char *p = s->p;
    if (s->len == 0 || memchr(p, '_', s->len))
        return -1;
    double d = strtod(p, &end);
    while (*end == ' ' || (*end >= 9 && *end <= 13))
        end++;
    if (end == p || (size_t)(end - p) != s->len)
        return -1;
    *out = d;
    return 0;
}

static cval do_int(rt *r, cval x, args *a)
{
    static const char *const spec[] = {"default", "base"};
    cval p[2];
    bind(r, "int", a, spec, 2, p);
    cval def = is_missing(p[0]) ? ifl_chat_v_int(0) : p[0];
    int64_t base = is_missing(p[1]) ? 10 : want_int(r, p[1], "base");
    switch (x.t) {
    case CV_INT:
        return x;
    case CV_BOOL:
        return ifl_chat_v_int(x.u.b);
    case CV_FLOAT:
        if (isnan(x.u.d) || isinf(x.u.d) || fabs(x.u.d) >= 9.2e18)
            return def;
        return ifl_chat_v_int((int64_t)x.u.d);
    case CV_STR: {
        int64_t v;
        double d;
        if (base >= 2 && base <= 36 && parse_py_int(x.u.s, base, &v) == 0)
            return ifl_chat_v_int(v);
        if (parse_py_float(x.u.s, &d) == 0 && !isnan(d) && !isinf(d) && fabs(d) < 9.2e18)
            return ifl_chat_v_int((int64_t)d);
        return def;
    }
    case CV_UNDEF:
        undef_fail(r, x);
    default:
        return def;
    }
}

static cval do_float(rt *r, cval x, args *a)
{
    static const char *const spec[] = {"default"};
    cval p[1];
    bind(r, "float", a, spec, 1, p);
    cval def = is_missing(p[0]) ? ifl_chat_v_float(0.0) : p[0];
    double d;
    switch (x.t) {
    case CV_INT:
        return ifl_chat_v_float((double)x.u.i);
    case CV_BOOL:
        return ifl_chat_v_float(x.u.b);
    case CV_FLOAT:
        return x;
    case CV_STR:
        if (parse_py_float(x.u.s, &d) == 0)
            return ifl_chat_v_float(d);
        return def;
    case CV_UNDEF:
        undef_fail(r, x);
    default:
        return def;
    }
}

/* select/reject/selectattr/rejectattr */
static cval select_filter(rt *r, cval x, args *a, int attr, int want)
{
    if (!ifl_chat_truthy(x)) /* jinja: `if value:` before iterating */
        return gen_of(ifl_chat_v_list(A(r), 0));
    cval *it;
    size_t n;
    items_of(r, x, &it, &n);
    int off = 0;
    const cstr *path = NULL;
    if (attr) {
        if (a->n < 1)
            FAILT(r, "selectattr() missing attribute");
        path = want_str(r, a->v[0], "attribute");
        off = 1;
    }
    const cstr *test = NULL;
    if (a->n > off)
        test = want_str(r, a->v[off], "test name");
    args ta = {a->v + off + 1, a->n > off + 1 ? a->n - off - 1 : 0, a->kn, a->kv, a->nk};
    cval out = ifl_chat_v_list(A(r), n);
    for (size_t i = 0; i < n; i++) {
        cval v = path ? attr_get(r, it[i], path) : it[i];
        int ok = test ? ifl_chat_test(r, test, v, &ta) : ifl_chat_truthy(v);
        if (ok == want)
            out.u.l->v[out.u.l->n++] = it[i];
    }
    return gen_of(out);
}

static cval map_filter(rt *r, cval x, args *a)
{
    if (!ifl_chat_truthy(x))
        return gen_of(ifl_chat_v_list(A(r), 0));
    cval *it;
    size_t n;
    items_of(r, x, &it, &n);
    cval out = ifl_chat_v_list(A(r), n);
    const cstr *attr = NULL;
    cval def = {.t = CV_MISSING};
    for (int k = 0; k < a->nk; k++) {
        if (str_is(a->kn[k], "attribute"))
            attr = want_str(r, a->kv[k], "attribute");
        else if (str_is(a->kn[k], "default"))
            def = a->kv[k];
    }
    if (attr) {
        for (size_t i = 0; i < n; i++) {
            cval v = attr_get(r, it[i], attr);
            if (v.t == CV_UNDEF && !is_missing(def))
                v = def;
            out.u.l->v[out.u.l->n++] = v;
        }
        return gen_of(out);
    }
    if (a->n < 1)
        FAILT(r, "map requires a filter argument");
    const cstr *fname = want_str(r, a->v[0], "filter name");
    args fa = {a->v + 1, a->n - 1, a->kn, a->kv, a->nk};
    for (size_t i = 0; i < n; i++)
        out.u.l->v[out.u.l->n++] = ifl_chat_filter(r, fname, it[i], &fa);
    return gen_of(out);
}

static cval first_last(rt *r, cval x, int last)
{
    if (last && x.t == CV_LIST && (x.f & CVF_GEN))
        FAILT(r, "'generator' object is not reversible");
    cval *it;
    size_t n;
    items_of(r, x, &it, &n);
    if (n == 0)
        return ifl_chat_v_undef(ifl_chat_fmtstr(A(r), "No %s item, sequence was empty.",
                                                last ? "last" : "first"));
    return it[last ? n - 1 : 0];
}

static cval min_max(rt *r, cval x, args *a, int want_max)
{
    static const char *const spec[] = {"case_sensitive", "attribute"};
    cval p[2];
    bind(r, want_max ? "max" : "min", a, spec, 2, p);
    int cs = !is_missing(p[0]) && ifl_chat_truthy(p[0]);
    const cstr *attr = (!is_missing(p[1]) && p[1].t != CV_NONE) ? S(r, p[1]) : NULL;
    cval *it;
    size_t n;
    items_of(r, x, &it, &n);
    if (n == 0)
        return ifl_chat_v_undef(
            ifl_chat_fmtstr(A(r), "No aggregated item, sequence was empty."));
    size_t best = 0;
    cval bk = sort_key(r, it[0], attr, cs);
    for (size_t i = 1; i < n; i++) {
        cval k = sort_key(r, it[i], attr, cs);
        int c = ifl_chat_compare(r, k, bk, want_max ? ">" : "<");
        if (want_max ? c > 0 : c < 0) {
            best = i;
            bk = k;
        }
    }
    return it[best];
}

static cval jinja_title(rt *r, const cstr *s)
{
    /* words begin after runs of [-\s({\[<]; each word: first upper, rest lower */
    struct ifl_chat_sb b = {0};
    size_t i = 0;
    int at_start = 1;
    while (i < s->len) {
        size_t adv;
        uint32_t c = ifl_chat_utf8_dec(s->p + i, s->len - i, &adv);
        int sep = ifl_chat_is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
        uint32_t o = sep ? c : at_start ? to_upper(c) : to_lower(c);
        char tmp[4];
        ifl_chat_sb_put(A(r), &b, tmp, ifl_chat_utf8_enc(o, tmp));
        at_start = sep;
        i += adv;
    }
    return ifl_chat_sb_val(A(r), &b);
}

static cval center(rt *r, const cstr *s, int64_t width, const cstr *fill)
{
    int64_t n = (int64_t)ifl_chat_utf8_len(s->p, s->len);
    if (width > 1 << 20)
        width = 1 << 20;
    if (width <= n)
        return (cval){.t = CV_STR, .u.s = (cstr *)s};
    int64_t marg = width - n;
    int64_t left = marg / 2 + (marg & width & 1);
    struct ifl_chat_sb b = {0};
    for (int64_t i = 0; i < left; i++)
        ifl_chat_sb_put(A(r), &b, fill->p, fill->len);
    ifl_chat_sb_put(A(r), &b, s->p, s->len);
    for (int64_t i = 0; i < marg - left; i++)
        ifl_chat_sb_put(A(r), &b, fill->p, fill->len);
    return ifl_chat_sb_val(A(r), &b);
}

cval ifl_chat_filter(rt *r, const cstr *name, cval x, args *a)
{
    const char *f = name->p;
    cval p[4];
    ifl_chat_rt_steps(r, 1);
    int safe = x.t == CV_STR && (x.f & CVF_SAFE);
    if (safe && (!strcmp(f, "trim") || !strcmp(f, "upper") || !strcmp(f, "lower") ||
                 !strcmp(f, "capitalize") || !strcmp(f, "indent"))) {
        /* markupsafe.Markup keeps its class through these str methods */
        x.f = 0;
        cval v = ifl_chat_filter(r, name, x, a);
        v.f = CVF_SAFE;
        return v;
    }
    if (!strcmp(f, "tojson"))
        return tojson(r, x, a);
    if (!strcmp(f, "length") || !strcmp(f, "count"))
        return ifl_chat_v_int(length_of(r, x));
    if (!strcmp(f, "trim")) {
        static const char *const spec[] = {"chars"};
        bind(r, f, a, spec, 1, p);
        return strip(r, S(r, x), opt_chars(r, p[0]), 1, 1);
    }
    if (!strcmp(f, "default") || !strcmp(f, "d")) {
        static const char *const spec[] = {"default_value", "boolean"};
        bind(r, f, a, spec, 2, p);
        cval def = is_missing(p[0]) ? mkstr(r, "", 0) : p[0];
        int boolean = !is_missing(p[1]) && ifl_chat_truthy(p[1]);
        if (x.t == CV_UNDEF || x.t == CV_MISSING || (boolean && !ifl_chat_truthy(x)))
            return def;
        return x;
    }
    if (!strcmp(f, "string"))
        return ifl_chat_to_str(r, x);
    if (!strcmp(f, "safe")) {
        cval v = ifl_chat_to_str(r, x);
        v.f = CVF_SAFE;
        return v;
    }
    if (!strcmp(f, "items")) {
        if (x.t == CV_UNDEF)
            return gen_of(ifl_chat_v_list(A(r), 0));
        if (x.t != CV_DICT)
            FAILT(r, "Can only get item pairs from a mapping.");
        return gen_of(dict_items(r, x));
    }
    if (!strcmp(f, "upper"))
        return case_map(r, S(r, x), 'u');
    if (!strcmp(f, "lower"))
        return case_map(r, S(r, x), 'l');
    if (!strcmp(f, "capitalize"))
        return case_map(r, S(r, x), 'c');
    if (!strcmp(f, "title"))
        return jinja_title(r, S(r, x));
    if (!strcmp(f, "join")) {
        static const char *const spec[] = {"d", "attribute"};
        bind(r, f, a, spec, 2, p);
        const cstr *sep = is_missing(p[0]) ? NULL : S(r, p[0]);
        const cstr *attr = (!is_missing(p[1]) && p[1].t != CV_NONE) ? S(r, p[1]) : NULL;
        cval *it;
        size_t n;
        items_of(r, x, &it, &n);
        struct ifl_chat_sb b = {0};
        for (size_t i = 0; i < n; i++) {
            if (i && sep)
                ifl_chat_sb_put(A(r), &b, sep->p, sep->len);
            ifl_chat_str_of(r, &b, attr ? attr_get(r, it[i], attr) : it[i]);
        }
        return ifl_chat_sb_val(A(r), &b);
    }
    if (!strcmp(f, "list"))
        return list_of(r, x);
    if (!strcmp(f, "replace")) {
        static const char *const spec[] = {"old", "new", "count"};
        bind(r, f, a, spec, 3, p);
        if (is_missing(p[0]) || is_missing(p[1]))
            FAILT(r, "replace() missing required argument");
        int64_t cnt = (is_missing(p[2]) || p[2].t == CV_NONE) ? -1 : want_int(r, p[2], "count");
        return replace(r, S(r, x), S(r, p[0]), S(r, p[1]), cnt);
    }
    if (!strcmp(f, "select") || !strcmp(f, "reject"))
        return select_filter(r, x, a, 0, f[0] == 's');
    if (!strcmp(f, "selectattr") || !strcmp(f, "rejectattr"))
        return select_filter(r, x, a, 1, f[0] == 's');
    if (!strcmp(f, "map"))
        return map_filter(r, x, a);
    if (!strcmp(f, "indent"))
        return indent(r, x, a);
    if (!strcmp(f, "int"))
        return do_int(r, x, a);
    if (!strcmp(f, "float"))
        return do_float(r, x, a);
    if (!strcmp(f, "first") || !strcmp(f, "last"))
        return first_last(r, x, f[0] == 'l');
    if (!strcmp(f, "min") || !strcmp(f, "max"))
        return min_max(r, x, a, f[1] == 'a');
    if (!strcmp(f, "unique")) {
        static const char *const spec[] = {"case_sensitive", "attribute"};
        bind(r, f, a, spec, 2, p);
        int cs = !is_missing(p[0]) && ifl_chat_truthy(p[0]);
        const cstr *attr = (!is_missing(p[1]) && p[1].t != CV_NONE) ? S(r, p[1]) : NULL;
        cval *it;
        size_t n;
        items_of(r, x, &it, &n);
        cval out = ifl_chat_v_list(A(r), n);
        cval *seen = ifl_chat_alloc(A(r), (n ? n : 1) * sizeof *seen);
        size_t ns = 0;
        for (size_t i = 0; i < n; i++) {
            cval k = sort_key(r, it[i], attr, cs);
            size_t j;
            for (j = 0; j < ns; j++)
                if (ifl_chat_equal(r, seen[j], k, 0))
                    break;
            if (j == ns) {
                seen[ns++] = k;
                out.u.l->v[out.u.l->n++] = it[i];
            }
        }
        return gen_of(out);
    }
    if (!strcmp(f, "sort")) {
        static const char *const spec[] = {"reverse", "case_sensitive", "attribute"};
        bind(r, f, a, spec, 3, p);
        int rev = !is_missing(p[0]) && ifl_chat_truthy(p[0]);
        int cs = !is_missing(p[1]) && ifl_chat_truthy(p[1]);
        const cstr *attr = (!is_missing(p[2]) && p[2].t != CV_NONE) ? S(r, p[2]) : NULL;
        cval *it;
        size_t n;
        items_of(r, x, &it, &n);
        cval *keys = ifl_chat_alloc(A(r), (n ? n : 1) * sizeof *keys);
        for (size_t i = 0; i < n; i++)
            keys[i] = sort_key(r, it[i], attr, cs);
        size_t *ord = sorted_order(r, keys, n, rev);
        cval out = ifl_chat_v_list(A(r), n);
        for (size_t i = 0; i < n; i++)
            out.u.l->v[i] = it[ord[i]];
        out.u.l->n = n;
        return out;
    }
    if (!strcmp(f, "dictsort")) {
        static const char *const spec[] = {"case_sensitive", "by", "reverse"};
        bind(r, f, a, spec, 3, p);
        int cs = !is_missing(p[0]) && ifl_chat_truthy(p[0]);
        int by_value = !is_missing(p[1]) && p[1].t == CV_STR && str_is(p[1].u.s, "value");
        int rev = !is_missing(p[2]) && ifl_chat_truthy(p[2]);
        if (x.t != CV_DICT)
            FAILT(r, "You can only sort by either \"key\" or \"value\"");
        size_t n = x.u.m->n;
        cval *keys = ifl_chat_alloc(A(r), (n ? n : 1) * sizeof *keys);
        for (size_t i = 0; i < n; i++)
            keys[i] = sort_key(r, by_value ? x.u.m->v[i] : x.u.m->k[i], NULL, cs);
        size_t *ord = sorted_order(r, keys, n, rev);
        cval out = ifl_chat_v_list(A(r), n);
        for (size_t i = 0; i < n; i++)
            out.u.l->v[i] = tuple2(r, x.u.m->k[ord[i]], x.u.m->v[ord[i]]);
        out.u.l->n = n;
        return out;
    }
    if (!strcmp(f, "reverse")) {
        if (x.t == CV_STR) {
            cval *it;
            size_t n;
            items_of(r, x, &it, &n);
            struct ifl_chat_sb b = {0};
            for (size_t i = n; i > 0; i--)
                ifl_chat_sb_put(A(r), &b, it[i - 1].u.s->p, it[i - 1].u.s->len);
            return ifl_chat_sb_val(A(r), &b);
        }
        cval l = list_of(r, x);
        for (size_t i = 0; i < l.u.l->n / 2; i++) {
            cval t = l.u.l->v[i];
            l.u.l->v[i] = l.u.l->v[l.u.l->n - 1 - i];
            l.u.l->v[l.u.l->n - 1 - i] = t;
        }
        return gen_of(l);
    }
    if (!strcmp(f, "abs")) {
        if (x.t == CV_INT) {
            if (x.u.i == INT64_MIN)
                ifl_chat_fail(r, IFL_EFORMAT, "OverflowError", "integer overflow");
            return ifl_chat_v_int(x.u.i < 0 ? -x.u.i : x.u.i);
        }
        if (x.t == CV_BOOL)
            return ifl_chat_v_int(x.u.b);
        if (x.t == CV_FLOAT)
            return ifl_chat_v_float(fabs(x.u.d));
        if (x.t == CV_UNDEF)
            undef_fail(r, x);
        FAILT(r, "bad operand type for abs(): '%s'", ifl_chat_type_name(x));
    }
    if (!strcmp(f, "round")) {
        static const char *const spec[] = {"precision", "method"};
        bind(r, f, a, spec, 2, p);
        int64_t prec = is_missing(p[0]) ? 0 : want_int(r, p[0], "precision");
        const char *method = (!is_missing(p[1]) && p[1].t == CV_STR) ? p[1].u.s->p : "common";
        if (x.t == CV_UNDEF)
            undef_fail(r, x);
        if (x.t != CV_INT && x.t != CV_FLOAT && x.t != CV_BOOL)
            FAILT(r, "type %s doesn't define __round__ method", ifl_chat_type_name(x));
        double d = x.t == CV_FLOAT ? x.u.d : x.t == CV_INT ? (double)x.u.i : x.u.b;
        if (prec > 300)
            prec = 300;
        if (prec < -300)
            prec = -300;
        double m = pow(10.0, (double)prec);
        double v = d * m;
        if (!strcmp(method, "ceil"))
            v = ceil(v);
        else if (!strcmp(method, "floor"))
            v = floor(v);
        else
            v = nearbyint(v);
        return ifl_chat_v_float(v / m);
    }
    if (!strcmp(f, "sum")) {
        static const char *const spec[] = {"attribute", "start"};
        bind(r, f, a, spec, 2, p);
        const cstr *attr = (!is_missing(p[0]) && p[0].t != CV_NONE) ? S(r, p[0]) : NULL;
        cval acc = is_missing(p[1]) ? ifl_chat_v_int(0) : p[1];
        cval *it;
        size_t n;
        items_of(r, x, &it, &n);
        for (size_t i = 0; i < n; i++) {
            cval v = attr ? attr_get(r, it[i], attr) : it[i];
            int fl = acc.t == CV_FLOAT || v.t == CV_FLOAT;
            if ((acc.t != CV_INT && acc.t != CV_FLOAT && acc.t != CV_BOOL) ||
                (v.t != CV_INT && v.t != CV_FLOAT && v.t != CV_BOOL))
                FAILT(r, "unsupported operand type(s) for +: '%s' and '%s'",
                      ifl_chat_type_name(acc), ifl_chat_type_name(v));
            if (fl)
                acc = ifl_chat_v_float((acc.t == CV_FLOAT ? acc.u.d : (double)(acc.t == CV_INT ? acc.u.i : acc.u.b)) +
                                       (v.t == CV_FLOAT ? v.u.d : (double)(v.t == CV_INT ? v.u.i : v.u.b)));
            else {
                int64_t z;
                if (__builtin_add_overflow(acc.t == CV_INT ? acc.u.i : acc.u.b,
                                           v.t == CV_INT ? v.u.i : v.u.b, &z))
                    ifl_chat_fail(r, IFL_EFORMAT, "OverflowError", "integer overflow");
                acc = ifl_chat_v_int(z);
            }
        }
        return acc;
    }
    if (!strcmp(f, "wordcount")) {
        const cstr *s = S(r, x);
        int64_t words = 0;
        int in = 0;
        size_t i = 0;
        while (i < s->len) {
            size_t adv;
            uint32_t c = ifl_chat_utf8_dec(s->p + i, s->len - i, &adv);
            int w = is_alpha(c) || is_digit_cp(c) || c == '_';
            if (w && !in)
                words++;
            in = w;
            i += adv;
        }
        return ifl_chat_v_int(words);
    }
    if (!strcmp(f, "center")) {
        static const char *const spec[] = {"width"};
        bind(r, f, a, spec, 1, p);
        int64_t w = is_missing(p[0]) ? 80 : want_int(r, p[0], "width");
        return center(r, S(r, x), w, ifl_chat_mkstr(A(r), " ", 1));
    }
    if (!strcmp(f, "escape") || !strcmp(f, "e"))
        return ifl_chat_escape(r, x);
    if (!strcmp(f, "forceescape")) {
        cval v = ifl_chat_to_str(r, x);
        v.f = 0;
        return ifl_chat_escape(r, v);
    }
    if (!strcmp(f, "attr")) {
        if (a->n < 1)
            FAILT(r, "attr() missing name");
        return ifl_chat_getattr(r, x, S(r, a->v[0]));
    }
    if (!strcmp(f, "batch")) {
        static const char *const spec[] = {"linecount", "fill_with"};
        bind(r, f, a, spec, 2, p);
        int64_t k = is_missing(p[0]) ? 1 : want_int(r, p[0], "linecount");
        if (k <= 0)
            ifl_chat_fail(r, IFL_EFORMAT, "ValueError", "batch size must be positive");
        cval *it;
        size_t n;
        items_of(r, x, &it, &n);
        cval out = ifl_chat_v_list(A(r), 4), cur = {.t = CV_NONE};
        for (size_t i = 0; i < n; i++) {
            if (cur.t == CV_NONE || (int64_t)cur.u.l->n == k) {
                cur = ifl_chat_v_list(A(r), (size_t)(k < 64 ? k : 64));
                ifl_chat_list_push(A(r), out.u.l, cur);
            }
            ifl_chat_list_push(A(r), cur.u.l, it[i]);
        }
        if (cur.t != CV_NONE && !is_missing(p[1]))
            while ((int64_t)cur.u.l->n < k)
                ifl_chat_list_push(A(r), cur.u.l, p[1]);
        return gen_of(out);
    }
    ifl_chat_fail(r, IFL_EFORMAT, "TemplateRuntimeError", "No filter named '%s'.", f);
}

/* ---- tests ---- */

int ifl_chat_test(rt *r, const cstr *name, cval x, args *a)
{
    const char *t = name->p;
    cval arg = a->n > 0 ? a->v[0] : (a->nk > 0 ? a->kv[0] : (cval){.t = CV_MISSING});
    ifl_chat_rt_steps(r, 1);
    if (!strcmp(t, "defined"))
        return x.t != CV_UNDEF && x.t != CV_MISSING;
    if (!strcmp(t, "undefined"))
        return x.t == CV_UNDEF || x.t == CV_MISSING;
    if (!strcmp(t, "none"))
        return x.t == CV_NONE;
    if (!strcmp(t, "string"))
        return x.t == CV_STR;
    if (!strcmp(t, "mapping"))
        return x.t == CV_DICT;
    if (!strcmp(t, "iterable"))
        return x.t == CV_STR || x.t == CV_LIST || x.t == CV_DICT || x.t == CV_UNDEF ||
               x.t == CV_LOOP;
    if (!strcmp(t, "sequence"))
        return x.t == CV_STR || (x.t == CV_LIST && !(x.f & CVF_GEN)) || x.t == CV_DICT ||
               x.t == CV_UNDEF;
    if (!strcmp(t, "boolean"))
        return x.t == CV_BOOL;
    if (!strcmp(t, "true"))
        return x.t == CV_BOOL && x.u.b;
    if (!strcmp(t, "false"))
        return x.t == CV_BOOL && !x.u.b;
    if (!strcmp(t, "number"))
        return x.t == CV_INT || x.t == CV_FLOAT || x.t == CV_BOOL;
    if (!strcmp(t, "integer"))
        return x.t == CV_INT;
    if (!strcmp(t, "float"))
        return x.t == CV_FLOAT;
    if (!strcmp(t, "callable"))
        return x.t == CV_FUNC;
    if (!strcmp(t, "odd") || !strcmp(t, "even")) {
        int64_t v = want_int(r, x, t);
        return (v & 1) == (t[0] == 'o');
    }
    if (!strcmp(t, "divisibleby")) {
        int64_t v = want_int(r, x, t), d = want_int(r, arg, t);
        if (d == 0)
            ifl_chat_fail(r, IFL_EFORMAT, "ZeroDivisionError", "integer division or modulo by zero");
        if (d == -1)
            return 1;
        return v % d == 0;
    }
    if (!strcmp(t, "lower") || !strcmp(t, "upper")) {
        const cstr *s = S(r, x);
        cval m = case_map(r, s, t[0] == 'l' ? 'l' : 'u');
        int cased = 0;
        size_t i = 0;
        while (i < s->len) {
            size_t adv;
            cased |= is_cased(ifl_chat_utf8_dec(s->p + i, s->len - i, &adv));
            i += adv;
        }
        return cased && m.u.s->len == s->len && memcmp(m.u.s->p, s->p, s->len) == 0;
    }
    if (!strcmp(t, "sameas")) {
        if (x.t != arg.t)
            return 0;
        if (x.t == CV_NONE || x.t == CV_UNDEF)
            return 1;
        if (x.t == CV_BOOL)
            return x.u.b == arg.u.b;
        if (x.t == CV_INT)
            return x.u.i == arg.u.i && x.u.i >= -5 && x.u.i <= 256;
        return memcmp(&x.u, &arg.u, sizeof x.u) == 0;
    }
    if (!strcmp(t, "escaped"))
        return x.t == CV_STR && (x.f & CVF_SAFE);
    if (!strcmp(t, "in"))
        return ifl_chat_test(r, ifl_chat_mkstr(A(r), "__in", 4), x, a);
    if (!strcmp(t, "__in")) {
        if (arg.t == CV_STR) {
            if (x.t != CV_STR)
                FAILT(r, "'in <string>' requires string as left operand, not %s",
                      ifl_chat_type_name(x));
            return memmem(arg.u.s->p, arg.u.s->len, x.u.s->p, x.u.s->len) != NULL;
        }
        if (arg.t == CV_DICT)
            return ifl_chat_dict_find(arg.u.m, x) != NULL;
        cval *it;
        size_t n;
        items_of(r, arg, &it, &n);
        for (size_t i = 0; i < n; i++)
            if (ifl_chat_equal(r, it[i], x, 0))
                return 1;
        return 0;
    }
    if (!strcmp(t, "eq") || !strcmp(t, "equalto") || !strcmp(t, "=="))
        return ifl_chat_equal(r, x, arg, 0);
    if (!strcmp(t, "ne") || !strcmp(t, "!="))
        return !ifl_chat_equal(r, x, arg, 0);
    if (!strcmp(t, "lt") || !strcmp(t, "lessthan") || !strcmp(t, "<"))
        return ifl_chat_compare(r, x, arg, "<") < 0;
    if (!strcmp(t, "le") || !strcmp(t, "<="))
        return ifl_chat_compare(r, x, arg, "<=") <= 0;
    if (!strcmp(t, "gt") || !strcmp(t, "greaterthan") || !strcmp(t, ">"))
        return ifl_chat_compare(r, x, arg, ">") > 0;
    if (!strcmp(t, "ge") || !strcmp(t, ">="))
        return ifl_chat_compare(r, x, arg, ">=") >= 0;
    ifl_chat_fail(r, IFL_EFORMAT, "TemplateRuntimeError", "No test named '%s'.", t);
}

/* ---- methods ---- */

static const char *const str_methods[] = {
    "strip",   "lstrip",    "rstrip",    "split",     "rsplit",   "startswith", "endswith",
    "replace", "upper",     "lower",     "title",     "capitalize", "swapcase", "casefold",
    "format",  "find",      "rfind",     "index",     "rindex",   "count",      "join",
    "splitlines", "isdigit", "isalpha",  "isalnum",   "isspace",  "isupper",    "islower",
    "isnumeric", "isdecimal", "center",  "ljust",     "rjust",    "zfill",      "removeprefix",
    "removesuffix", "partition", "rpartition", NULL};
static const char *const dict_methods[] = {"get",  "items",  "keys",       "values", "copy",
                                           "pop",  "update", "setdefault", NULL};
static const char *const list_methods[] = {"append", "pop",  "insert", "extend", "index",
                                           "count",  "copy", "remove", NULL};

static const char *find_name(const char *const *tbl, const char *name, size_t len)
{
    for (int i = 0; tbl[i]; i++)
        if (strlen(tbl[i]) == len && memcmp(tbl[i], name, len) == 0)
            return tbl[i];
    return NULL;
}

int ifl_chat_has_method(cval obj, const char *name, size_t len)
{
    switch (obj.t) {
    case CV_STR:
        return find_name(str_methods, name, len) != NULL;
    case CV_DICT:
        return find_name(dict_methods, name, len) != NULL;
    case CV_LIST:
        return !(obj.f & CVF_GEN) && find_name(list_methods, name, len) != NULL;
    default:
        return 0;
    }
}

static cval arg_or(args *a, int i, cval def)
{
    return i < a->n ? a->v[i] : def;
}

static int64_t find_sub(rt *r, const cstr *s, const cstr *sub, int rev)
{
    ifl_chat_rt_steps(r, (long long)(s->len / 32));
    if (!rev) {
        const char *h = memmem(s->p, s->len, sub->p, sub->len);
        return h ? (int64_t)ifl_chat_utf8_len(s->p, (size_t)(h - s->p)) : -1;
    }
    for (size_t j = s->len + 1; j-- > 0;)
        if (j + sub->len <= s->len && memcmp(s->p + j, sub->p, sub->len) == 0)
            return (int64_t)ifl_chat_utf8_len(s->p, j);
    return -1;
}

static int affix(rt *r, const cstr *s, cval pre, int end)
{
    if (pre.t == CV_LIST && (pre.f & CVF_TUPLE)) {
        for (size_t i = 0; i < pre.u.l->n; i++)
            if (affix(r, s, pre.u.l->v[i], end))
                return 1;
        return 0;
    }
    if (pre.t != CV_STR)
        FAILT(r, "%s first arg must be str or a tuple of str, not %s",
              end ? "endswith" : "startswith", ifl_chat_type_name(pre));
    const cstr *p = pre.u.s;
    if (p->len > s->len)
        return 0;
    return memcmp(end ? s->p + s->len - p->len : s->p, p->p, p->len) == 0;
}

/* str.format: {} {0} {name}, !r / !s, and a [[fill]align][width] spec */
static cval str_format(rt *r, const cstr *fmt, args *a)
{
    struct ifl_chat_sb b = {0};
    int autoi = 0;
    const char *p = fmt->p;
    size_t n = fmt->len;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (c == '}') {
            if (i + 1 < n && p[i + 1] == '}') {
                ifl_chat_sb_putc(A(r), &b, '}');
                i++;
                continue;
            }
            ifl_chat_fail(r, IFL_EFORMAT, "ValueError", "Single '}' encountered in format string");
        }
        if (c != '{') {
            ifl_chat_sb_putc(A(r), &b, c);
            continue;
        }
        if (i + 1 < n && p[i + 1] == '{') {
            ifl_chat_sb_putc(A(r), &b, '{');
            i++;
            continue;
        }
        const char *close = memchr(p + i, '}', n - i);
        if (!close)
            ifl_chat_fail(r, IFL_EFORMAT, "ValueError", "Single '{' encountered in format string");
        const char *fs = p + i + 1, *fe = close;
        const char *conv = memchr(fs, '!', (size_t)(fe - fs));
        const char *spec = memchr(fs, ':', (size_t)(fe - fs));
        const char *ne = conv ? conv : spec ? spec : fe;
        cval v;
        if (ne == fs) {
            if (autoi >= a->n)
                ifl_chat_fail(r, IFL_EFORMAT, "IndexError",
                              "Replacement index %d out of range for positional args tuple", autoi);
            v = a->v[autoi++];
        } else if (*fs >= '0' && *fs <= '9') {
            int k = atoi(fs);
            if (k >= a->n)
                ifl_chat_fail(r, IFL_EFORMAT, "IndexError",
                              "Replacement index %d out of range for positional args tuple", k);
            v = a->v[k];
        } else {
            int k;
            for (k = 0; k < a->nk; k++)
                if (a->kn[k]->len == (size_t)(ne - fs) && !memcmp(a->kn[k]->p, fs, a->kn[k]->len))
                    break;
            if (k == a->nk)
                ifl_chat_fail(r, IFL_EFORMAT, "KeyError", "'%.*s'", (int)(ne - fs), fs);
            v = a->kv[k];
        }
        struct ifl_chat_sb fb = {0};
        if (conv && conv + 1 < fe && conv[1] == 'r')
            ifl_chat_repr_of(r, &fb, v, 0);
        else
            ifl_chat_str_of(r, &fb, v);
        if (spec && spec + 1 < fe) {
            const char *q = spec + 1;
            char fill = ' ', align = v.t == CV_STR ? '<' : '>';
            if (fe - q >= 2 && strchr("<>^", q[1])) {
                fill = q[0];
                align = q[1];
                q += 2;
            } else if (strchr("<>^", *q)) {
                align = *q++;
            }
            long w = strtol(q, NULL, 10);
            if (w > 4096)
                w = 4096;
            long len = (long)ifl_chat_utf8_len(fb.p ? fb.p : "", fb.n);
            long pad = w > len ? w - len : 0;
            long left = align == '>' ? pad : align == '^' ? pad / 2 : 0;
            for (long k = 0; k < left; k++)
                ifl_chat_sb_putc(A(r), &b, fill);
            ifl_chat_sb_put(A(r), &b, fb.p ? fb.p : "", fb.n);
            for (long k = 0; k < pad - left; k++)
                ifl_chat_sb_putc(A(r), &b, fill);
        } else {
            ifl_chat_sb_put(A(r), &b, fb.p ? fb.p : "", fb.n);
        }
        i = (size_t)(close - p);
    }
    return ifl_chat_sb_val(A(r), &b);
}

static int all_chars(const cstr *s, int kind)
{
    if (s->len == 0)
        return 0;
    int cased = 0;
    size_t i = 0;
    while (i < s->len) {
        size_t adv;
        uint32_t c = ifl_chat_utf8_dec(s->p + i, s->len - i, &adv);
        i += adv;
        switch (kind) {
        case 'd':
            if (!is_digit_cp(c))
                return 0;
            break;
        case 'a':
            if (!is_alpha(c))
                return 0;
            break;
        case 'n':
            if (!is_alpha(c) && !is_digit_cp(c))
                return 0;
            break;
        case 's':
            if (!ifl_chat_is_space(c))
                return 0;
            break;
        case 'u':
            if (to_upper(c) != c)
                return 0;
            cased |= is_cased(c);
            break;
        case 'l':
            if (to_lower(c) != c)
                return 0;
            cased |= is_cased(c);
            break;
        }
    }
    return (kind == 'u' || kind == 'l') ? cased : 1;
}

static cval str_method(rt *r, const cstr *s, const char *m, args *a)
{
    cval none = ifl_chat_v_none();
    if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip")) {
        const cstr *chars = opt_chars(r, arg_or(a, 0, none));
        return strip(r, s, chars, m[0] != 'r', m[0] != 'l');
    }
    if (!strcmp(m, "split") || !strcmp(m, "rsplit")) {
        static const char *const spec[] = {"sep", "maxsplit"};
        cval p[2];
        bind(r, m, a, spec, 2, p);
        const cstr *sep = (is_missing(p[0]) || p[0].t == CV_NONE) ? NULL : want_str(r, p[0], "sep");
        int64_t maxs = is_missing(p[1]) ? -1 : want_int(r, p[1], "maxsplit");
        return split(r, s, sep, maxs, m[0] == 'r');
    }
    if (!strcmp(m, "startswith") || !strcmp(m, "endswith")) {
        if (a->n < 1)
            FAILT(r, "%s() takes at least 1 argument (0 given)", m);
        return ifl_chat_v_bool(affix(r, s, a->v[0], m[0] == 'e'));
    }
    if (!strcmp(m, "replace")) {
        if (a->n < 2)
            FAILT(r, "replace expected at least 2 arguments, got %d", a->n);
        int64_t cnt = a->n > 2 ? want_int(r, a->v[2], "count") : -1;
        return replace(r, s, want_str(r, a->v[0], "replace() argument 1"),
                       want_str(r, a->v[1], "replace() argument 2"), cnt);
    }
    if (!strcmp(m, "upper"))
        return case_map(r, s, 'u');
    if (!strcmp(m, "lower") || !strcmp(m, "casefold"))
        return case_map(r, s, 'l');
    if (!strcmp(m, "title"))
        return case_map(r, s, 't');
    if (!strcmp(m, "capitalize"))
        return case_map(r, s, 'c');
    if (!strcmp(m, "swapcase"))
        return case_map(r, s, 's');
    if (!strcmp(m, "format"))
        return str_format(r, s, a);
    if (!strcmp(m, "find") || !strcmp(m, "rfind") || !strcmp(m, "index") || !strcmp(m, "rindex")) {
        if (a->n < 1)
            FAILT(r, "%s() takes at least 1 argument (0 given)", m);
        int64_t k = find_sub(r, s, want_str(r, a->v[0], "substring"), m[0] == 'r');
        if (k < 0 && strstr(m, "index"))
            ifl_chat_fail(r, IFL_EFORMAT, "ValueError", "substring not found");
        return ifl_chat_v_int(k);
    }
    if (!strcmp(m, "count")) {
        if (a->n < 1)
            FAILT(r, "count() takes at least 1 argument (0 given)");
        const cstr *sub = want_str(r, a->v[0], "substring");
        if (sub->len == 0)
            return ifl_chat_v_int((int64_t)ifl_chat_utf8_len(s->p, s->len) + 1);
        int64_t c = 0;
        size_t i = 0;
        const char *h;
        while (i <= s->len && (h = memmem(s->p + i, s->len - i, sub->p, sub->len))) {
            c++;
            i = (size_t)(h - s->p) + sub->len;
        }
        return ifl_chat_v_int(c);
    }
    if (!strcmp(m, "join")) {
        if (a->n != 1)
            FAILT(r, "str.join() takes exactly one argument (%d given)", a->n);
        cval *it;
        size_t n;
        items_of(r, a->v[0], &it, &n);
        struct ifl_chat_sb b = {0};
        for (size_t i = 0; i < n; i++) {
            if (it[i].t != CV_STR)
                FAILT(r, "sequence item %zu: expected str instance, %s found", i,
                      ifl_chat_type_name(it[i]));
            if (i)
                ifl_chat_sb_put(A(r), &b, s->p, s->len);
            ifl_chat_sb_put(A(r), &b, it[i].u.s->p, it[i].u.s->len);
        }
        return ifl_chat_sb_val(A(r), &b);
    }
    if (!strcmp(m, "splitlines"))
        return splitlines(r, s, a->n > 0 && ifl_chat_truthy(a->v[0]));
    if (!strcmp(m, "isdigit") || !strcmp(m, "isnumeric") || !strcmp(m, "isdecimal"))
        return ifl_chat_v_bool(all_chars(s, 'd'));
    if (!strcmp(m, "isalpha"))
        return ifl_chat_v_bool(all_chars(s, 'a'));
    if (!strcmp(m, "isalnum"))
        return ifl_chat_v_bool(all_chars(s, 'n'));
    if (!strcmp(m, "isspace"))
        return ifl_chat_v_bool(all_chars(s, 's'));
    if (!strcmp(m, "isupper"))
        return ifl_chat_v_bool(all_chars(s, 'u'));
    if (!strcmp(m, "islower"))
        return ifl_chat_v_bool(all_chars(s, 'l'));
    if (!strcmp(m, "center") || !strcmp(m, "ljust") || !strcmp(m, "rjust") ||
        !strcmp(m, "zfill")) {
        if (a->n < 1)
            FAILT(r, "%s() takes at least 1 argument (0 given)", m);
        int64_t w = want_int(r, a->v[0], "width");
        if (w > 1 << 20)
            w = 1 << 20;
        const cstr *fill = ifl_chat_mkstr(A(r), m[0] == 'z' ? "0" : " ", 1);
        if (a->n > 1)
            fill = want_str(r, a->v[1], "fill character");
        if (m[0] == 'c')
            return center(r, s, w, fill);
        int64_t len = (int64_t)ifl_chat_utf8_len(s->p, s->len);
        struct ifl_chat_sb b = {0};
        if (m[0] == 'l')
            ifl_chat_sb_put(A(r), &b, s->p, s->len);
        for (int64_t i = len; i < w; i++)
            ifl_chat_sb_put(A(r), &b, fill->p, fill->len);
        if (m[0] != 'l')
            ifl_chat_sb_put(A(r), &b, s->p, s->len);
        return ifl_chat_sb_val(A(r), &b);
    }
    if (!strcmp(m, "removeprefix") || !strcmp(m, "removesuffix")) {
        if (a->n != 1)
            FAILT(r, "%s() takes exactly one argument (%d given)", m, a->n);
        const cstr *x = want_str(r, a->v[0], m);
        int suf = m[6] == 's';
        if (x->len <= s->len &&
            memcmp(suf ? s->p + s->len - x->len : s->p, x->p, x->len) == 0)
            return mkstr(r, suf ? s->p : s->p + x->len, s->len - x->len);
        return (cval){.t = CV_STR, .u.s = (cstr *)s};
    }
    if (!strcmp(m, "partition") || !strcmp(m, "rpartition")) {
        if (a->n != 1)
            FAILT(r, "%s() takes exactly one argument (%d given)", m, a->n);
        const cstr *sep = want_str(r, a->v[0], "separator");
        if (sep->len == 0)
            ifl_chat_fail(r, IFL_EFORMAT, "ValueError", "empty separator");
        cval t = ifl_chat_v_list(A(r), 3);
        t.f = CVF_TUPLE;
        const char *h = NULL;
        if (m[0] == 'p')
            h = memmem(s->p, s->len, sep->p, sep->len);
        else
            for (size_t j = s->len + 1; j-- > 0;)
                if (j + sep->len <= s->len && !memcmp(s->p + j, sep->p, sep->len)) {
                    h = s->p + j;
                    break;
                }
        cval e = mkstr(r, "", 0), whole = {.t = CV_STR, .u.s = (cstr *)s};
        if (!h) {
            t.u.l->v[0] = m[0] == 'p' ? whole : e;
            t.u.l->v[1] = e;
            t.u.l->v[2] = m[0] == 'p' ? e : whole;
        } else {
            size_t k = (size_t)(h - s->p);
            t.u.l->v[0] = mkstr(r, s->p, k);
            t.u.l->v[1] = (cval){.t = CV_STR, .u.s = (cstr *)sep};
            t.u.l->v[2] = mkstr(r, s->p + k + sep->len, s->len - k - sep->len);
        }
        t.u.l->n = 3;
        return t;
    }
    FAILT(r, "'str' object has no attribute '%s'", m);
}

static cval dict_method(rt *r, cval d, const char *m, args *a)
{
    struct ifl_chat_dict *dm = d.u.m;
    if (!strcmp(m, "get")) {
        if (a->n < 1 || a->n > 2)
            FAILT(r, "get expected 1 or 2 arguments, got %d", a->n);
        cval *v = ifl_chat_dict_find(dm, a->v[0]);
        return v ? *v : arg_or(a, 1, ifl_chat_v_none());
    }
    if (!strcmp(m, "items"))
        return dict_items(r, d);
    if (!strcmp(m, "keys") || !strcmp(m, "values")) {
        cval out = ifl_chat_v_list(A(r), dm->n);
        for (size_t i = 0; i < dm->n; i++)
            out.u.l->v[i] = m[0] == 'k' ? dm->k[i] : dm->v[i];
        out.u.l->n = dm->n;
        return out;
    }
    if (!strcmp(m, "copy")) {
        cval out = ifl_chat_v_dict(A(r), dm->n);
        for (size_t i = 0; i < dm->n; i++)
            ifl_chat_dict_set(A(r), out.u.m, dm->k[i], dm->v[i]);
        return out;
    }
    if (!strcmp(m, "pop")) {
        if (a->n < 1)
            FAILT(r, "pop expected at least 1 argument, got 0");
        cval old;
        if (ifl_chat_dict_del(dm, a->v[0], &old))
            return old;
        if (a->n > 1)
            return a->v[1];
        struct ifl_chat_sb b = {0};
        ifl_chat_repr_of(r, &b, a->v[0], 0);
        ifl_chat_fail(r, IFL_EFORMAT, "KeyError", "%s", b.p ? b.p : "");
    }
    if (!strcmp(m, "setdefault")) {
        if (a->n < 1)
            FAILT(r, "setdefault expected at least 1 argument, got 0");
        cval *v = ifl_chat_dict_find(dm, a->v[0]);
        if (v)
            return *v;
        cval def = arg_or(a, 1, ifl_chat_v_none());
        ifl_chat_dict_set(A(r), dm, a->v[0], def);
        return def;
    }
    if (!strcmp(m, "update")) {
        if (a->n > 0) {
            if (a->v[0].t != CV_DICT)
                FAILT(r, "update() argument must be a mapping");
            struct ifl_chat_dict *o = a->v[0].u.m;
            for (size_t i = 0; i < o->n; i++)
                ifl_chat_dict_set(A(r), dm, o->k[i], o->v[i]);
        }
        for (int k = 0; k < a->nk; k++)
            ifl_chat_dict_set(A(r), dm, (cval){.t = CV_STR, .u.s = a->kn[k]}, a->kv[k]);
        return ifl_chat_v_none();
    }
    FAILT(r, "'dict' object has no attribute '%s'", m);
}

static cval list_method(rt *r, cval l, const char *m, args *a)
{
    struct ifl_chat_list *lv = l.u.l;
    if (!strcmp(m, "append")) {
        if (a->n != 1)
            FAILT(r, "list.append() takes exactly one argument (%d given)", a->n);
        ifl_chat_list_push(A(r), lv, a->v[0]);
        return ifl_chat_v_none();
    }
    if (!strcmp(m, "extend")) {
        if (a->n != 1)
            FAILT(r, "list.extend() takes exactly one argument (%d given)", a->n);
        cval *it;
        size_t n;
        items_of(r, a->v[0], &it, &n);
        cval *copy = ifl_chat_alloc(A(r), (n ? n : 1) * sizeof *copy);
        if (n)
            memcpy(copy, it, n * sizeof *copy);
        for (size_t i = 0; i < n; i++)
            ifl_chat_list_push(A(r), lv, copy[i]);
        ifl_chat_rt_steps(r, (long long)n);
        return ifl_chat_v_none();
    }
    if (!strcmp(m, "pop") || !strcmp(m, "insert")) {
        int ins = m[0] == 'i';
        if ((ins && a->n != 2) || (!ins && a->n > 1))
            FAILT(r, "%s() takes %s arguments (%d given)", m, ins ? "exactly 2" : "at most 1", a->n);
        int64_t n = (int64_t)lv->n;
        int64_t i = a->n > 0 ? want_int(r, a->v[0], "index") : n - 1;
        if (ins) {
            if (i < 0)
                i += n;
            if (i < 0)
                i = 0;
            if (i > n)
                i = n;
            ifl_chat_list_push(A(r), lv, a->v[1]);
            memmove(lv->v + i + 1, lv->v + i, (size_t)(n - i) * sizeof(cval));
            lv->v[i] = a->v[1];
            return ifl_chat_v_none();
        }
        if (n == 0)
            ifl_chat_fail(r, IFL_EFORMAT, "IndexError", "pop from empty list");
        if (i < 0)
            i += n;
        if (i < 0 || i >= n)
            ifl_chat_fail(r, IFL_EFORMAT, "IndexError", "pop index out of range");
        cval v = lv->v[i];
        memmove(lv->v + i, lv->v + i + 1, (size_t)(n - i - 1) * sizeof(cval));
        lv->n--;
        return v;
    }
    if (!strcmp(m, "index") || !strcmp(m, "count") || !strcmp(m, "remove")) {
        if (a->n < 1)
            FAILT(r, "%s() takes at least 1 argument (0 given)", m);
        int64_t c = 0;
        for (size_t i = 0; i < lv->n; i++)
            if (ifl_chat_equal(r, lv->v[i], a->v[0], 0)) {
                if (m[0] == 'i')
                    return ifl_chat_v_int((int64_t)i);
                if (m[0] == 'r') {
                    memmove(lv->v + i, lv->v + i + 1, (lv->n - i - 1) * sizeof(cval));
                    lv->n--;
                    return ifl_chat_v_none();
                }
                c++;
            }
        if (m[0] != 'c')
            ifl_chat_fail(r, IFL_EFORMAT, "ValueError", "list.%s(x): x not in list", m);
        return ifl_chat_v_int(c);
    }
    if (!strcmp(m, "copy")) {
        cval out = ifl_chat_v_list(A(r), lv->n);
        if (lv->n)
            memcpy(out.u.l->v, lv->v, lv->n * sizeof(cval));
        out.u.l->n = lv->n;
        return out;
    }
    FAILT(r, "'list' object has no attribute '%s'", m);
}

/* markupsafe.Markup's overrides: string results stay Markup, and the
 * arguments that get inserted (replace's new, format's args, join's items)
 * are escaped first. */
static cval safe_str_method(rt *r, cval self, const char *m, args *a)
{
    static const char *const keep[] = {"strip", "lstrip", "rstrip", "upper", "lower", "title",
                                       "capitalize", "swapcase", "casefold", "replace", "center",
                                       "ljust", "rjust", "zfill", "removeprefix", "removesuffix",
                                       "format", "join", "split", "rsplit", "splitlines",
                                       "partition", "rpartition", NULL};
    if (!find_name(keep, m, strlen(m)))
        return str_method(r, self.u.s, m, a);
    args ea = *a;
    if (!strcmp(m, "replace") && a->n >= 2) {
        ea.v = ifl_chat_alloc(A(r), (size_t)a->n * sizeof(cval));
        memcpy(ea.v, a->v, (size_t)a->n * sizeof(cval));
        ea.v[1] = ifl_chat_escape(r, a->v[1]);
    } else if (!strcmp(m, "format")) {
        ea.v = ifl_chat_alloc(A(r), (size_t)(a->n + 1) * sizeof(cval));
        ea.kv = ifl_chat_alloc(A(r), (size_t)(a->nk + 1) * sizeof(cval));
        for (int i = 0; i < a->n; i++)
            ea.v[i] = ifl_chat_escape(r, a->v[i]);
        for (int i = 0; i < a->nk; i++)
            ea.kv[i] = ifl_chat_escape(r, a->kv[i]);
    } else if (!strcmp(m, "join") && a->n == 1) {
        cval *it;
        size_t n;
        items_of(r, a->v[0], &it, &n);
        cval l = ifl_chat_v_list(A(r), n);
        for (size_t i = 0; i < n; i++)
            l.u.l->v[i] = ifl_chat_escape(r, it[i]);
        l.u.l->n = n;
        ea.v = &l;
    }
    cval v = str_method(r, self.u.s, m, &ea);
    if (v.t == CV_STR)
        v.f = CVF_SAFE;
    else if (v.t == CV_LIST)
        for (size_t i = 0; i < v.u.l->n; i++)
            v.u.l->v[i].f = CVF_SAFE;
    return v;
}

cval ifl_chat_method(rt *r, cval self, const char *name, args *a)
{
    ifl_chat_rt_steps(r, 1);
    switch (self.t) {
    case CV_STR:
        if (self.f & CVF_SAFE)
            return safe_str_method(r, self, name, a);
        return str_method(r, self.u.s, name, a);
    case CV_DICT:
        return dict_method(r, self, name, a);
    case CV_LIST:
        return list_method(r, self, name, a);
    default:
        FAILT(r, "'%s' object has no attribute '%s'", ifl_chat_type_name(self), name);
    }
}

/* ---- globals ---- */

static const char *const globals[] = {"range",        "namespace", "dict", "raise_exception",
                                      "strftime_now", NULL};

const char *ifl_chat_global_name(const char *name, size_t len)
{
    return find_name(globals, name, len);
}

cval ifl_chat_call_global(rt *r, const char *g, args *a)
{
    if (!strcmp(g, "range")) {
        if (a->n < 1 || a->n > 3 || a->nk)
            FAILT(r, "range expected at least 1 argument, got %d", a->n);
        int64_t start = 0, stop, step = 1;
        if (a->n == 1) {
            stop = want_int(r, a->v[0], "range");
        } else {
            start = want_int(r, a->v[0], "range");
            stop = want_int(r, a->v[1], "range");
            if (a->n == 3)
                step = want_int(r, a->v[2], "range");
        }
        if (step == 0)
            ifl_chat_fail(r, IFL_EFORMAT, "ValueError", "range() arg 3 must not be zero");
        double cnt_d = step > 0 ? ((double)stop - (double)start) / (double)step
                                : ((double)start - (double)stop) / (double)-step;
        if (cnt_d > 1e6)
            ifl_chat_fail(r, IFL_EFULL, "OverflowError",
                          "range of more than 1000000 items is not allowed in a template");
        size_t cnt = cnt_d > 0 ? (size_t)ceil(cnt_d) : 0;
        ifl_chat_rt_steps(r, (long long)cnt);
        cval out = ifl_chat_v_list(A(r), cnt);
        for (int64_t i = start; out.u.l->n < cnt && (step > 0 ? i < stop : i > stop); i += step) {
            out.u.l->v[out.u.l->n++] = ifl_chat_v_int(i);
            if (__builtin_add_overflow(i, step, &(int64_t){0}))
                break;
        }
        return out;
    }
    if (!strcmp(g, "namespace") || !strcmp(g, "dict")) {
        cval d = ifl_chat_v_dict(A(r), 4);
        for (int i = 0; i < a->n; i++) {
            if (a->v[i].t != CV_DICT)
                FAILT(r, "%s() positional argument must be a mapping", g);
            struct ifl_chat_dict *o = a->v[i].u.m;
            for (size_t k = 0; k < o->n; k++)
                ifl_chat_dict_set(A(r), d.u.m, o->k[k], o->v[k]);
        }
        for (int k = 0; k < a->nk; k++)
            ifl_chat_dict_set(A(r), d.u.m, (cval){.t = CV_STR, .u.s = a->kn[k]}, a->kv[k]);
        if (g[0] == 'n')
            d.t = CV_NS;
        return d;
    }
    if (!strcmp(g, "raise_exception")) {
        cval m = a->n > 0 ? a->v[0] : (a->nk > 0 ? a->kv[0] : mkstr(r, "", 0));
        const cstr *s = S(r, m);
        ifl_chat_fail(r, IFL_EINVAL, "TemplateError", "%s", s->p);
    }
    if (!strcmp(g, "strftime_now")) {
        if (a->n < 1)
            FAILT(r, "strftime_now() missing 1 required positional argument: 'format'");
        const cstr *fmt = want_str(r, a->v[0], "format");
        if (fmt->len > 256)
            ifl_chat_fail(r, IFL_EINVAL, "ValueError", "strftime format longer than 256 bytes");
        char buf[4096];
        size_t n = fmt->len ? strftime(buf, sizeof buf, fmt->p, ifl_chat_rt_now(r)) : 0;
        return mkstr(r, buf, n);
    }
    FAILT(r, "'%s' is not callable", g);
}
