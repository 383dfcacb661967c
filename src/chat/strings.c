/*
 * Python str semantics for chat templates: case mapping (ASCII, Latin-1,
 * Latin Extended-A, Greek, Cyrillic), strip/split/rsplit/replace/
 * splitlines with CPython's whitespace and line-break sets, str.format
 * ({} {0} {name}, !r, a fill/align/width spec), the other str methods a
 * sandboxed template may call, and markupsafe.Markup's versions of them
 * (string results stay Markup; inserted arguments are escaped).
 */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/builtins.h"

/* ---- case mapping ---- */

uint32_t ifl_chat_to_upper(uint32_t c)
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

uint32_t ifl_chat_to_lower(uint32_t c)
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

int ifl_chat_is_cased(uint32_t c)
{
    return ifl_chat_to_upper(c) != c || ifl_chat_to_lower(c) != c;
}

int ifl_chat_is_alpha(uint32_t c)
{
    return (c < 0x80) ? ((c | 32) >= 'a' && (c | 32) <= 'z')
                      : (ifl_chat_is_cased(c) || c >= 0x3040);
}

static int is_digit_cp(uint32_t c)
{
    return c >= '0' && c <= '9';
}

/* mode: 'u' upper, 'l' lower, 'c' capitalize, 't' Python title, 's' swapcase */
cval ifl_chat_case_map(rt *r, const cstr *s, int mode)
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
            o = ifl_chat_to_upper(c);
            break;
        case 'l':
            o = ifl_chat_to_lower(c);
            break;
        case 'c':
            o = first ? ifl_chat_to_upper(c) : ifl_chat_to_lower(c);
            break;
        case 't':
            o = prev_cased ? ifl_chat_to_lower(c) : ifl_chat_to_upper(c);
            prev_cased = ifl_chat_is_cased(c);
            break;
        case 's':
            o = ifl_chat_to_upper(c) != c ? ifl_chat_to_upper(c) : ifl_chat_to_lower(c);
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

cval ifl_chat_strip(rt *r, const cstr *s, const cstr *chars, int left, int right)
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

const cstr *ifl_chat_opt_chars(rt *r, cval v)
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
                    cval rest = ifl_chat_strip(r, ifl_chat_mkstr(A(r), p + i, n - i), NULL, 0, 1);
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
                cval rest = ifl_chat_strip(r, ifl_chat_mkstr(A(r), p, end), NULL, 1, 0);
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

cval ifl_chat_replace(rt *r, const cstr *s, const cstr *old, const cstr *new, int64_t count)
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
        const char *hit =
            (count < 0 || done < count) ? memmem(s->p + i, s->len - i, old->p, old->len) : NULL;
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

cval ifl_chat_splitlines(rt *r, const cstr *s, int keepends)
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

cval ifl_chat_jinja_title(rt *r, const cstr *s)
{
    /* words begin after runs of [-\s({\[<]; each word: first upper, rest lower */
    struct ifl_chat_sb b = {0};
    size_t i = 0;
    int at_start = 1;
    while (i < s->len) {
        size_t adv;
        uint32_t c = ifl_chat_utf8_dec(s->p + i, s->len - i, &adv);
        int sep = ifl_chat_is_space(c) || c == '-' || c == '(' || c == '{' || c == '[' || c == '<';
        uint32_t o = sep ? c : at_start ? ifl_chat_to_upper(c) : ifl_chat_to_lower(c);
        char tmp[4];
        ifl_chat_sb_put(A(r), &b, tmp, ifl_chat_utf8_enc(o, tmp));
        at_start = sep;
        i += adv;
    }
    return ifl_chat_sb_val(A(r), &b);
}

cval ifl_chat_center(rt *r, const cstr *s, int64_t width, const cstr *fill)
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

static const char *const str_methods[] = {
    "strip",     "lstrip",     "rstrip",  "split",      "rsplit",       "startswith",
    "endswith",  "replace",    "upper",   "lower",      "title",        "capitalize",
    "swapcase",  "casefold",   "format",  "find",       "rfind",        "index",
    "rindex",    "count",      "join",    "splitlines", "isdigit",      "isalpha",
    "isalnum",   "isspace",    "isupper", "islower",    "isnumeric",    "isdecimal",
    "center",    "ljust",      "rjust",   "zfill",      "removeprefix", "removesuffix",
    "partition", "rpartition", NULL};

int ifl_chat_is_str_method(const char *name, size_t len)
{
    return find_name(str_methods, name, len) != NULL;
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
            if (!ifl_chat_is_alpha(c))
                return 0;
            break;
        case 'n':
            if (!ifl_chat_is_alpha(c) && !is_digit_cp(c))
                return 0;
            break;
        case 's':
            if (!ifl_chat_is_space(c))
                return 0;
            break;
        case 'u':
            if (ifl_chat_to_upper(c) != c)
                return 0;
            cased |= ifl_chat_is_cased(c);
            break;
        case 'l':
            if (ifl_chat_to_lower(c) != c)
                return 0;
            cased |= ifl_chat_is_cased(c);
            break;
        }
    }
    return (kind == 'u' || kind == 'l') ? cased : 1;
}

static cval str_method(rt *r, const cstr *s, const char *m, args *a)
{
    cval none = ifl_chat_v_none();
    if (!strcmp(m, "strip") || !strcmp(m, "lstrip") || !strcmp(m, "rstrip")) {
        const cstr *chars = ifl_chat_opt_chars(r, arg_or(a, 0, none));
        return ifl_chat_strip(r, s, chars, m[0] != 'r', m[0] != 'l');
    }
    if (!strcmp(m, "split") || !strcmp(m, "rsplit")) {
        static const char *const spec[] = {"sep", "maxsplit"};
        cval p[2];
        bind_args(r, m, a, spec, 2, p);
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
        return ifl_chat_replace(r, s, want_str(r, a->v[0], "replace() argument 1"),
                                want_str(r, a->v[1], "replace() argument 2"), cnt);
    }
    if (!strcmp(m, "upper"))
        return ifl_chat_case_map(r, s, 'u');
    if (!strcmp(m, "lower") || !strcmp(m, "casefold"))
        return ifl_chat_case_map(r, s, 'l');
    if (!strcmp(m, "title"))
        return ifl_chat_case_map(r, s, 't');
    if (!strcmp(m, "capitalize"))
        return ifl_chat_case_map(r, s, 'c');
    if (!strcmp(m, "swapcase"))
        return ifl_chat_case_map(r, s, 's');
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
        ifl_chat_iterate(r, a->v[0], &it, &n);
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
        return ifl_chat_splitlines(r, s, a->n > 0 && ifl_chat_truthy(a->v[0]));
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
    if (!strcmp(m, "center") || !strcmp(m, "ljust") || !strcmp(m, "rjust") || !strcmp(m, "zfill")) {
        if (a->n < 1)
            FAILT(r, "%s() takes at least 1 argument (0 given)", m);
        int64_t w = want_int(r, a->v[0], "width");
        if (w > 1 << 20)
            w = 1 << 20;
        const cstr *fill = ifl_chat_mkstr(A(r), m[0] == 'z' ? "0" : " ", 1);
        if (a->n > 1)
            fill = want_str(r, a->v[1], "fill character");
        if (m[0] == 'c')
            return ifl_chat_center(r, s, w, fill);
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
        if (x->len <= s->len && memcmp(suf ? s->p + s->len - x->len : s->p, x->p, x->len) == 0)
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

static cval safe_str_method(rt *r, cval self, const char *m, args *a)
{
    static const char *const keep[] = {
        "strip",      "lstrip",   "rstrip",       "upper",        "lower",      "title",
        "capitalize", "swapcase", "casefold",     "replace",      "center",     "ljust",
        "rjust",      "zfill",    "removeprefix", "removesuffix", "format",     "join",
        "split",      "rsplit",   "splitlines",   "partition",    "rpartition", NULL};
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
        ifl_chat_iterate(r, a->v[0], &it, &n);
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

cval ifl_chat_str_method(rt *r, cval self, const char *name, args *a)
{
    if (self.f & CVF_SAFE)
        return safe_str_method(r, self, name, a);
    return str_method(r, self.u.s, name, a);
}
