/*
 * Printing values of the chat-template interpreter, byte for byte as
 * Python does: str() and repr() (float repr is the shortest string that
 * reads back to the same double, as CPython prints it), markupsafe's
 * escape, and json.dumps(ensure_ascii=..., indent=..., separators=...,
 * sort_keys=...).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/internal.h"
#include "core/err.h"

/* ---- str() and repr() ---- */

void ifl_chat_float_repr(char *buf, size_t cap, double d)
{
    if (isnan(d)) {
        snprintf(buf, cap, "nan");
        return;
    }
    if (isinf(d)) {
        snprintf(buf, cap, d < 0 ? "-inf" : "inf");
        return;
    }
    if (d == 0) {
        snprintf(buf, cap, signbit(d) ? "-0.0" : "0.0");
        return;
    }
    char tmp[48];
    for (int p = 1; p <= 17; p++) {
        snprintf(tmp, sizeof tmp, "%.*e", p - 1, d);
        if (strtod(tmp, NULL) == d)
            break;
    }
    /* tmp: [-]D[.DDD]e(+|-)XX */
    char digits[24];
    int nd = 0, neg = 0;
    const char *q = tmp;
    if (*q == '-') {
        neg = 1;
        q++;
    }
    while (*q && *q != 'e') {
        if (*q != '.' && nd < 20)
            digits[nd++] = *q;
        q++;
    }
    int e = *q == 'e' ? atoi(q + 1) : 0;
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = 0;
    char out[64];
    size_t o = 0;
    if (neg)
        out[o++] = '-';
    if (e >= -4 && e < 16) {
        if (e >= 0) {
            for (int i = 0; i <= e; i++)
                out[o++] = i < nd ? digits[i] : '0';
            out[o++] = '.';
            if (nd > e + 1)
                for (int i = e + 1; i < nd; i++)
                    out[o++] = digits[i];
            else
                out[o++] = '0';
        } else {
            out[o++] = '0';
            out[o++] = '.';
            for (int i = 0; i < -e - 1; i++)
                out[o++] = '0';
            for (int i = 0; i < nd; i++)
                out[o++] = digits[i];
        }
        out[o] = 0;
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            for (int i = 1; i < nd; i++)
                out[o++] = digits[i];
        }
        snprintf(out + o, sizeof out - o, "e%c%02d", e < 0 ? '-' : '+', e < 0 ? -e : e);
    }
    snprintf(buf, cap, "%s", out);
}

/* Python's str.isprintable, approximately: controls, separators other than
 * the ASCII space, format characters and private use are not printable. */
static int py_printable(uint32_t c)
{
    if (c < 0x20 || (c >= 0x7f && c <= 0xa0) || c == 0xad)
        return 0;
    if (c == 0x1680 || (c >= 0x2000 && c <= 0x200f) || (c >= 0x2028 && c <= 0x202f) ||
        (c >= 0x205f && c <= 0x206f) || c == 0x3000 || c == 0xfeff || (c >= 0xfff9 && c <= 0xfffb))
        return 0;
    if ((c >= 0xd800 && c <= 0xf8ff) || c >= 0xf0000 || (c >= 0xe0000 && c <= 0xe007f))
        return 0;
    if ((c >= 0x600 && c <= 0x605) || c == 0x61c || c == 0x6dd || c == 0x70f || c == 0x180e)
        return 0;
    return 1;
}

static void repr_str(struct ifl_chat_arena *a, struct ifl_chat_sb *b, const char *p, size_t n)
{
    int has_sq = memchr(p, '\'', n) != NULL, has_dq = memchr(p, '"', n) != NULL;
    char q = (has_sq && !has_dq) ? '"' : '\'';
    ifl_chat_sb_putc(a, b, q);
    size_t i = 0;
    while (i < n) {
        size_t adv;
        uint32_t c = ifl_chat_utf8_dec(p + i, n - i, &adv);
        char tmp[16];
        if (c == (uint32_t)q || c == '\\') {
            tmp[0] = '\\';
            tmp[1] = (char)c;
            ifl_chat_sb_put(a, b, tmp, 2);
        } else if (c == '\n') {
            ifl_chat_sb_put(a, b, "\\n", 2);
        } else if (c == '\r') {
            ifl_chat_sb_put(a, b, "\\r", 2);
        } else if (c == '\t') {
            ifl_chat_sb_put(a, b, "\\t", 2);
        } else if (!py_printable(c)) {
            int k;
            if (c < 0x100)
                k = snprintf(tmp, sizeof tmp, "\\x%02x", c);
            else if (c < 0x10000)
                k = snprintf(tmp, sizeof tmp, "\\u%04x", c);
            else
                k = snprintf(tmp, sizeof tmp, "\\U%08x", c);
            ifl_chat_sb_put(a, b, tmp, (size_t)k);
        } else {
            ifl_chat_sb_put(a, b, p + i, adv);
        }
        i += adv;
    }
    ifl_chat_sb_putc(a, b, q);
}

static void put_s(struct ifl_chat_rt *r, struct ifl_chat_sb *b, const char *s)
{
    ifl_chat_sb_put(ifl_chat_rt_arena(r), b, s, strlen(s));
}

static void scalar_str(struct ifl_chat_rt *r, struct ifl_chat_sb *b, cval v)
{
    char tmp[64];
    switch (v.t) {
    case CV_NONE:
        put_s(r, b, "None");
        break;
    case CV_BOOL:
        put_s(r, b, v.u.b ? "True" : "False");
        break;
    case CV_INT:
        snprintf(tmp, sizeof tmp, "%" PRId64, v.u.i);
        put_s(r, b, tmp);
        break;
    case CV_FLOAT:
        ifl_chat_float_repr(tmp, sizeof tmp, v.u.d);
        put_s(r, b, tmp);
        break;
    case CV_NS:
        put_s(r, b, "<Namespace>");
        break;
    case CV_FUNC:
        if (v.u.fn->kind == FN_MACRO) {
            put_s(r, b, "<Macro '");
            put_s(r, b, v.u.fn->macro && v.u.fn->macro->s ? v.u.fn->macro->s->p : "caller");
            put_s(r, b, "'>");
        } else {
            put_s(r, b, "<built-in function ");
            put_s(r, b, v.u.fn->name);
            put_s(r, b, ">");
        }
        break;
    case CV_LOOP:
        snprintf(tmp, sizeof tmp, "<LoopContext %zu/%zu>", v.u.lp->i + 1, v.u.lp->n);
        put_s(r, b, tmp);
        break;
    default:
        break;
    }
}

void ifl_chat_repr_of(struct ifl_chat_rt *r, struct ifl_chat_sb *b, cval v, int depth)
{
    struct ifl_chat_arena *a = ifl_chat_rt_arena(r);
    if (depth > 200)
        ifl_chat_fail(r, IFL_EFORMAT, "RecursionError", "maximum recursion depth exceeded");
    ifl_chat_rt_steps(r, 1);
    switch (v.t) {
    case CV_UNDEF:
    case CV_MISSING:
        put_s(r, b, "Undefined");
        break;
    case CV_STR:
        if (v.f & CVF_SAFE)
            put_s(r, b, "Markup(");
        repr_str(a, b, v.u.s->p, v.u.s->len);
        if (v.f & CVF_SAFE)
            put_s(r, b, ")");
        break;
    case CV_LIST:
        if (v.f & CVF_GEN) {
            put_s(r, b, "<generator object>");
            break;
        }
        if (v.f & CVF_VIEW) {
            put_s(r, b, ifl_chat_type_name(v));
            put_s(r, b, "(");
        }
        put_s(r, b, (v.f & CVF_TUPLE) ? "(" : "[");
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i)
                put_s(r, b, ", ");
            ifl_chat_repr_of(r, b, v.u.l->v[i], depth + 1);
        }
        if ((v.f & CVF_TUPLE) && v.u.l->n == 1)
            put_s(r, b, ",");
        put_s(r, b, (v.f & CVF_TUPLE) ? ")" : "]");
        if (v.f & CVF_VIEW)
            put_s(r, b, ")");
        break;
    case CV_DICT:
        put_s(r, b, "{");
        for (size_t i = 0; i < v.u.m->n; i++) {
            if (i)
                put_s(r, b, ", ");
            ifl_chat_repr_of(r, b, v.u.m->k[i], depth + 1);
            put_s(r, b, ": ");
            ifl_chat_repr_of(r, b, v.u.m->v[i], depth + 1);
        }
        put_s(r, b, "}");
        break;
    default:
        scalar_str(r, b, v);
    }
}

void ifl_chat_str_of(struct ifl_chat_rt *r, struct ifl_chat_sb *b, cval v)
{
    switch (v.t) {
    case CV_UNDEF:
    case CV_MISSING:
        break;
    case CV_STR:
        ifl_chat_sb_put(ifl_chat_rt_arena(r), b, v.u.s->p, v.u.s->len);
        break;
    case CV_LIST:
    case CV_DICT:
        ifl_chat_repr_of(r, b, v, 0);
        break;
    default:
        scalar_str(r, b, v);
    }
}

cval ifl_chat_escape(struct ifl_chat_rt *r, cval v)
{
    if (v.t == CV_STR && (v.f & CVF_SAFE))
        return v;
    cval s = ifl_chat_to_str(r, v);
    struct ifl_chat_arena *a = ifl_chat_rt_arena(r);
    struct ifl_chat_sb b = {0};
    const char *p = s.u.s->p;
    size_t n = s.u.s->len, run = 0;
    for (size_t i = 0; i < n; i++) {
        const char *rep = NULL;
        switch (p[i]) {
        case '&':
            rep = "&amp;";
            break;
        case '<':
            rep = "&lt;";
            break;
        case '>':
            rep = "&gt;";
            break;
        case '"':
            rep = "&#34;";
            break;
        case '\'':
            rep = "&#39;";
            break;
        }
        if (!rep) {
            run++;
            continue;
        }
        ifl_chat_sb_put(a, &b, p + i - run, run);
        run = 0;
        ifl_chat_sb_put(a, &b, rep, strlen(rep));
    }
    ifl_chat_sb_put(a, &b, p + n - run, run);
    cval out = ifl_chat_sb_val(a, &b);
    out.f = CVF_SAFE;
    return out;
}

cval ifl_chat_to_str(struct ifl_chat_rt *r, cval v)
{
    if (v.t == CV_STR)
        return v;
    struct ifl_chat_sb b = {0};
    ifl_chat_str_of(r, &b, v);
    return ifl_chat_sb_val(ifl_chat_rt_arena(r), &b);
}

/* ---- json.dumps ---- */

static void json_str(struct ifl_chat_arena *a, struct ifl_chat_sb *b, const char *p, size_t n,
                     int ascii)
{
    ifl_chat_sb_putc(a, b, '"');
    size_t i = 0, run = 0;
    while (i < n) {
        unsigned char c = (unsigned char)p[i];
        const char *esc = NULL;
        char tmp[16];
        size_t adv = 1;
        if (c == '"')
            esc = "\\\"";
        else if (c == '\\')
            esc = "\\\\";
        else if (c == '\n')
            esc = "\\n";
        else if (c == '\r')
            esc = "\\r";
        else if (c == '\t')
            esc = "\\t";
        else if (c == '\b')
            esc = "\\b";
        else if (c == '\f')
            esc = "\\f";
        else if (c < 0x20 || (ascii && c == 0x7f)) {
            snprintf(tmp, sizeof tmp, "\\u%04x", c);
            esc = tmp;
        } else if (ascii && c >= 0x80) {
            uint32_t cp = ifl_chat_utf8_dec(p + i, n - i, &adv);
            if (cp >= 0x10000) {
                cp -= 0x10000;
                snprintf(tmp, sizeof tmp, "\\u%04x\\u%04x", 0xd800 + (cp >> 10),
                         0xdc00 + (cp & 0x3ff));
            } else {
                snprintf(tmp, sizeof tmp, "\\u%04x", cp);
            }
            esc = tmp;
        }
        if (esc) {
            if (run)
                ifl_chat_sb_put(a, b, p + i - run, run);
            run = 0;
            ifl_chat_sb_put(a, b, esc, strlen(esc));
            i += adv;
        } else {
            run++;
            i++;
        }
    }
    if (run)
        ifl_chat_sb_put(a, b, p + n - run, run);
    ifl_chat_sb_putc(a, b, '"');
}

static void json_newline(struct ifl_chat_arena *a, struct ifl_chat_sb *b,
                         const struct ifl_chat_json_opts *o, int level)
{
    ifl_chat_sb_putc(a, b, '\n');
    for (int i = 0; i < level; i++)
        ifl_chat_sb_put(a, b, o->indent, o->indent_len);
}

static void json_key(struct ifl_chat_rt *r, struct ifl_chat_sb *b, cval k, int ascii)
{
    struct ifl_chat_arena *a = ifl_chat_rt_arena(r);
    char tmp[64];
    switch (k.t) {
    case CV_STR:
        json_str(a, b, k.u.s->p, k.u.s->len, ascii);
        return;
    case CV_BOOL:
        put_s(r, b, k.u.b ? "\"true\"" : "\"false\"");
        return;
    case CV_NONE:
        put_s(r, b, "\"null\"");
        return;
    case CV_INT:
        snprintf(tmp, sizeof tmp, "\"%" PRId64 "\"", k.u.i);
        put_s(r, b, tmp);
        return;
    case CV_FLOAT:
        ifl_chat_float_repr(tmp + 1, sizeof tmp - 2, k.u.d);
        tmp[0] = '"';
        strcat(tmp, "\"");
        put_s(r, b, tmp);
        return;
    default:
        ifl_chat_fail(r, IFL_EFORMAT, "TypeError",
                      "keys must be str, int, float, bool or None, not %s", ifl_chat_type_name(k));
    }
}

static int key_cmp(struct ifl_chat_rt *r, const cval *x, const cval *y)
{
    return ifl_chat_compare(r, *x, *y, "<");
}

void ifl_chat_json_dump(struct ifl_chat_rt *r, struct ifl_chat_sb *b, cval v,
                        const struct ifl_chat_json_opts *o, int level)
{
    struct ifl_chat_arena *a = ifl_chat_rt_arena(r);
    char tmp[64];
    if (level > 200)
        ifl_chat_fail(r, IFL_EFORMAT, "RecursionError",
                      "maximum recursion depth exceeded while encoding a JSON object");
    ifl_chat_rt_steps(r, 1);
    switch (v.t) {
    case CV_NONE:
        put_s(r, b, "null");
        return;
    case CV_BOOL:
        put_s(r, b, v.u.b ? "true" : "false");
        return;
    case CV_INT:
        snprintf(tmp, sizeof tmp, "%" PRId64, v.u.i);
        put_s(r, b, tmp);
        return;
    case CV_FLOAT:
        if (isnan(v.u.d))
            put_s(r, b, "NaN");
        else if (isinf(v.u.d))
            put_s(r, b, v.u.d < 0 ? "-Infinity" : "Infinity");
        else {
            ifl_chat_float_repr(tmp, sizeof tmp, v.u.d);
            put_s(r, b, tmp);
        }
        return;
    case CV_STR:
        json_str(a, b, v.u.s->p, v.u.s->len, o->ensure_ascii);
        return;
    case CV_LIST:
        /* a generator (map, select, ...) is written as the list it yields,
         * as llama.cpp's template engine writes it, where Jinja2 raises:
         * llama.cpp's templates (its DeepSeek-R1 one: tools|map(...)|tojson)
         * rely on it, and nothing that renders in Jinja2 changes */
        if (v.f & CVF_VIEW)
            break;
        if (v.u.l->n == 0) {
            put_s(r, b, "[]");
            return;
        }
        ifl_chat_sb_putc(a, b, '[');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i)
                ifl_chat_sb_put(a, b, o->item_sep, o->item_sep_len);
            if (o->indent)
                json_newline(a, b, o, level + 1);
            ifl_chat_json_dump(r, b, v.u.l->v[i], o, level + 1);
        }
        if (o->indent)
            json_newline(a, b, o, level);
        ifl_chat_sb_putc(a, b, ']');
        return;
    case CV_DICT: {
        size_t n = v.u.m->n;
        if (n == 0) {
            put_s(r, b, "{}");
            return;
        }
        size_t *ord = ifl_chat_alloc(a, n * sizeof *ord);
        for (size_t i = 0; i < n; i++)
            ord[i] = i;
        if (o->sort_keys) {
            /* insertion sort keeps it stable and needs no comparator context */
            for (size_t i = 1; i < n; i++) {
                size_t x = ord[i], j = i;
                while (j > 0 && key_cmp(r, &v.u.m->k[x], &v.u.m->k[ord[j - 1]]) < 0) {
                    ord[j] = ord[j - 1];
                    j--;
                }
                ord[j] = x;
                ifl_chat_rt_steps(r, (long long)i);
            }
        }
        ifl_chat_sb_putc(a, b, '{');
        for (size_t i = 0; i < n; i++) {
            if (i)
                ifl_chat_sb_put(a, b, o->item_sep, o->item_sep_len);
            if (o->indent)
                json_newline(a, b, o, level + 1);
            json_key(r, b, v.u.m->k[ord[i]], o->ensure_ascii);
            ifl_chat_sb_put(a, b, o->key_sep, o->key_sep_len);
            ifl_chat_json_dump(r, b, v.u.m->v[ord[i]], o, level + 1);
        }
        if (o->indent)
            json_newline(a, b, o, level);
        ifl_chat_sb_putc(a, b, '}');
        return;
    }
    default:
        break;
    }
    ifl_chat_fail(r, IFL_EFORMAT, "TypeError", "Object of type %s is not JSON serializable",
                  ifl_chat_type_name(v));
}
