/*
 * Front ends that compile to the GBNF engine: JSON mode (a fixed grammar)
 * and regular expressions (translated to GBNF text, then compiled, so a
 * regex gets exactly the engine's semantics: the whole output must match).
 *
 * The regex dialect is the common subset of PCRE/ECMAScript that has no
 * memory: literals, escapes, classes, groups, alternation and quantifiers.
 * Anything needing backtracking state (backreferences, lookaround, word
 * boundaries) is refused, never approximated.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/err.h"
#include "guide/internal.h"

/* Whitespace between JSON tokens is capped at 20 characters: a model that
 * starts emitting blank lines must get back to content. */
static const char json_common[] =
    "value ::= object | array | string | number | \"true\" | \"false\" | \"null\"\n"
    "object ::= \"{\" ws ( member ws ( \",\" ws member ws )* )? \"}\"\n"
    "member ::= string ws \":\" ws value\n"
    "array ::= \"[\" ws ( value ws ( \",\" ws value ws )* )? \"]\"\n"
    "string ::= \"\\\"\" char* \"\\\"\"\n"
    "char ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" hex4 )\n"
    /* no UTF-16 surrogates: a lone one is not valid JSON text, and a pair
     * would count as two characters for minLength/maxLength */
    "hex4 ::= ( [0-9a-cA-CefEF] [0-9a-fA-F] | [dD] [0-7] ) [0-9a-fA-F]{2}\n"
    "number ::= \"-\"? ( \"0\" | [1-9] [0-9]* ) ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )?\n"
    "ws ::= [ \\t\\n\\r]{0,20}\n";

static char json_value_gbnf[sizeof json_common + 64];
static char json_object_gbnf[sizeof json_common + 64];
static pthread_once_t json_gbnf_once = PTHREAD_ONCE_INIT;

static void build_json_gbnf(void)
{
    snprintf(json_value_gbnf, sizeof json_value_gbnf, "root ::= ws value ws\n%s", json_common);
    snprintf(json_object_gbnf, sizeof json_object_gbnf, "root ::= ws object ws\n%s", json_common);
}

const char *ifl_guide_json_gbnf(int object_only)
{
    /* built once, on first use, whichever thread gets there (enqueues
     * compile schemas on client threads) */
    pthread_once(&json_gbnf_once, build_json_gbnf);
    return object_only ? json_object_gbnf : json_value_gbnf;
}

int ifl_guide_compile_json(struct ifl_guide **out, int object_only, char *err)
{
    const char *t = ifl_guide_json_gbnf(object_only);
    return ifl_guide_compile_gbnf(out, t, strlen(t), err);
}

/* ---------------------------------------------------------------- regex */

struct rx {
    const char *s;
    size_t n, p;
    struct ifl_buf o; /* the grammar written */
    int depth;
    char *err;
    int rc;
};

static int rx_err(struct rx *r, int status, size_t at, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int rx_err(struct rx *r, int status, size_t at, const char *fmt, ...)
{
    if (r->rc)
        return r->rc;
    r->rc = status;
    if (r->err) {
        char msg[400];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        snprintf(r->err, IFL_ERR_LEN, "regex: %zu: %s", at + 1, msg);
    }
    return r->rc;
}

static int put(struct rx *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int put(struct rx *r, const char *fmt, ...)
{
    char tmp[64];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= sizeof tmp)
        return rx_err(r, IFL_EINVAL, r->p, "internal formatting error");
    ifl_buf_add(&r->o, tmp, (size_t)k);
    return r->o.oom ? rx_err(r, IFL_ENOMEM, r->p, "out of memory") : 0;
}

/* One source character (UTF-8 decoded). */
static int64_t rx_utf8(struct rx *r)
{
    size_t at = r->p;
    int64_t cp = ifl_guide_utf8_next(r->s, r->n, &r->p);
    if (cp == -1)
        return rx_err(r, IFL_EFORMAT, at, "invalid UTF-8 byte 0x%02X", (unsigned char)r->s[at]);
    if (cp == -2)
        return rx_err(r, IFL_EFORMAT, at, "truncated UTF-8 character");
    return cp;
}

/* Class shorthands as GBNF class bodies. */
static const char *shorthand(int c)
{
    switch (c) {
    case 'd':
        return "0-9";
    case 'w':
        return "a-zA-Z0-9_";
    case 's':
        return " \\t\\n\\r\\x0B\\x0C";
    default:
        return NULL;
    }
}

/* After a backslash (r->p at the escaped char): a code point, or -2 with
 * *cls set for a shorthand class (negated when upper case). */
static int64_t rx_escape(struct rx *r, const char **cls, int *neg)
{
    size_t at = r->p - 1;
    if (r->p >= r->n)
        return rx_err(r, IFL_EFORMAT, at, "pattern ends with a lone backslash");
    int c = (unsigned char)r->s[r->p++];
    *cls = NULL;
    if (shorthand(c) || shorthand(c + 32)) {
        *neg = c >= 'A' && c <= 'Z';
        *cls = shorthand(*neg ? c + 32 : c);
        if (*cls)
            return -2;
    }
    switch (c) {
    case 'n':
        return '\n';
    case 't':
        return '\t';
    case 'r':
        return '\r';
    case 'f':
        return '\f';
    case 'v':
        return '\v';
    case '0':
        /* PCRE reads \012 as octal (a newline); not \0 then "12" */
        if (r->p < r->n && r->s[r->p] >= '0' && r->s[r->p] <= '7')
            return rx_err(r, IFL_EUNSUPPORTED, at, "octal escapes ('\\0%c...') are not supported",
                          r->s[r->p]);
        return 0;
    case 'x':
    case 'u': {
        int digits = c == 'x' ? 2 : 4;
        uint32_t v = 0;
        for (int i = 0; i < digits; i++) {
            int h = r->p < r->n ? ifl_guide_hexval((unsigned char)r->s[r->p]) : -1;
            if (h < 0)
                return rx_err(r, IFL_EFORMAT, at, "bad escape: '\\%c' needs %d hex digits", c,
                              digits);
            v = v * 16 + (uint32_t)h;
            r->p++;
        }
        if (v >= 0xD800 && v <= 0xDFFF)
            return rx_err(r, IFL_EFORMAT, at,
                          "escape '\\u%04X' is a UTF-16 surrogate, which no UTF-8 text holds", v);
        return v;
    }
    case 'b':
    case 'B':
    case 'A':
    case 'z':
    case 'Z':
    case 'G':
        return rx_err(r, IFL_EUNSUPPORTED, at, "anchor '\\%c' is not supported", c);
    default:
        if (c >= '1' && c <= '9')
            return rx_err(r, IFL_EUNSUPPORTED, at, "backreferences are not supported");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
            return rx_err(r, IFL_EFORMAT, at, "unknown escape '\\%c'", c);
        if (c >= 0x80) {
            /* an escaped non-ASCII character stands for itself: decode it
             * whole, not as its first byte */
            r->p--;
            return rx_utf8(r);
        }
        return c; /* escaped punctuation */
    }
}

static int put_cp(struct rx *r, uint32_t cp, int in_class)
{
    if (cp >= 0x20 && cp < 0x7F && cp != '"' && cp != '\\' &&
        !(in_class && (cp == ']' || cp == '-' || cp == '^' || cp == '[')))
        return put(r, "%c", (char)cp);
    return put(r, "\\U%08X", cp);
}

static int rx_class(struct rx *r)
{
    size_t at = r->p++;
    if (put(r, "["))
        return r->rc;
    if (r->p < r->n && r->s[r->p] == '^') {
        r->p++;
        if (put(r, "^"))
            return r->rc;
    }
    int first = 1;
    while (1) {
        if (r->p >= r->n)
            return rx_err(r, IFL_EFORMAT, at, "unbalanced '[': character class is not closed");
        if (r->s[r->p] == ']' && !first)
            break;
        first = 0;
        if (r->s[r->p] == '[' && r->p + 1 < r->n && r->s[r->p + 1] == ':')
            return rx_err(r, IFL_EUNSUPPORTED, r->p, "POSIX classes [:name:] are not supported");
        int64_t lo;
        const char *cls = NULL;
        int neg = 0;
        if (r->s[r->p] == '\\') {
            r->p++;
            lo = rx_escape(r, &cls, &neg);
        } else {
            lo = rx_utf8(r);
        }
        if (r->rc)
            return r->rc;
        if (cls) {
            if (neg)
                return rx_err(r, IFL_EUNSUPPORTED, r->p - 2,
                              "negated shorthand inside a class is not supported");
            if (put(r, "%s", cls))
                return r->rc;
            continue;
        }
        if (r->p + 1 < r->n && r->s[r->p] == '-' && r->s[r->p + 1] != ']') {
            r->p++;
            int64_t hi;
            if (r->s[r->p] == '\\') {
                r->p++;
                hi = rx_escape(r, &cls, &neg);
                if (cls)
                    return rx_err(r, IFL_EFORMAT, r->p - 2, "a class cannot end a range");
            } else {
                hi = rx_utf8(r);
            }
            if (r->rc)
                return r->rc;
            if (hi < lo)
                return rx_err(r, IFL_EFORMAT, at, "character range is out of order");
            if (put_cp(r, (uint32_t)lo, 1) || put(r, "-") || put_cp(r, (uint32_t)hi, 1))
                return r->rc;
            continue;
        }
        if (put_cp(r, (uint32_t)lo, 1))
            return r->rc;
    }
    r->p++;
    return put(r, "]");
}

static int rx_alt(struct rx *r);

/* The largest repeat count a regex may give; the GBNF engine's own limit. */
#define RX_MAX_COUNT 10000

/* Reads a decimal count at r->p into *v, saturating (a count of any length
 * is read whole, so it is never split into a count and literal digits). */
static void rx_number(struct rx *r, uint64_t *v)
{
    *v = 0;
    while (r->p < r->n && r->s[r->p] >= '0' && r->s[r->p] <= '9') {
        if (*v <= UINT32_MAX)
            *v = *v * 10 + (uint64_t)(r->s[r->p] - '0');
        r->p++;
    }
}

/* Whether the '{' at `at` starts like a count: a digit, or ',' and a digit,
 * after optional blanks. *q_out is where the blanks end. */
static int rx_count_starts(const struct rx *r, size_t at, size_t *q_out, int *comma)
{
    size_t q = at + 1;
    while (q < r->n && (r->s[q] == ' ' || r->s[q] == '\t'))
        q++;
    int digit = q < r->n && r->s[q] >= '0' && r->s[q] <= '9';
    *comma = q + 1 < r->n && r->s[q] == ',' && r->s[q + 1] >= '0' && r->s[q + 1] <= '9';
    *q_out = q;
    return digit || *comma;
}

/* At a '{' (r->p): reads {m}, {m,} or {m,n} into *m and *n (UINT32_MAX: no
 * upper bound). Returns 1 for a count, 0 when the brace is a literal (what
 * follows it is neither a digit nor a comma and a digit), or the error.
 * A brace that starts like a count must be a whole, valid one: "{100000}"
 * or "{1a}" is an error naming it, never literal text (PCRE would take the
 * latter as text; write \{ for a literal brace before digits). */
static int rx_count(struct rx *r, uint32_t *m, uint32_t *n)
{
    size_t at = r->p, q;
    int comma;
    if (!rx_count_starts(r, at, &q, &comma))
        return 0;
    /* the whole brace, for messages: up to its '}' or a short run */
    size_t e = at + 1;
    while (e < r->n && e - at < 24 && r->s[e] != '}')
        e++;
    int shown = (int)(e - at + (e < r->n && r->s[e] == '}'));
    if (q != at + 1 || comma)
        return rx_err(r, IFL_EFORMAT, at,
                      "malformed repeat '%.*s': write {m}, {m,} or {m,n} without spaces "
                      "(a literal '{' is \\{)",
                      shown, r->s + at);
    r->p = q;
    uint64_t lo, hi;
    int open = 0; /* {m,}: no upper bound */
    rx_number(r, &lo);
    hi = lo;
    if (r->p < r->n && r->s[r->p] == ',') {
        r->p++;
        if (r->p < r->n && r->s[r->p] >= '0' && r->s[r->p] <= '9')
            rx_number(r, &hi);
        else
            open = 1;
    }
    if (r->p >= r->n || r->s[r->p] != '}')
        return rx_err(r, IFL_EFORMAT, at,
                      "malformed repeat '%.*s': write {m}, {m,} or {m,n} without spaces "
                      "(a literal '{' is \\{)",
                      shown, r->s + at);
    r->p++;
    if (lo > RX_MAX_COUNT || (!open && hi > RX_MAX_COUNT))
        return rx_err(r, IFL_EFORMAT, at, "repeat count in '%.*s' is too large (max %d)", shown,
                      r->s + at, RX_MAX_COUNT);
    if (!open && hi < lo)
        return rx_err(r, IFL_EFORMAT, at, "repeat '%.*s' has its maximum below its minimum", shown,
                      r->s + at);
    *m = (uint32_t)lo;
    *n = open ? UINT32_MAX : (uint32_t)hi;
    return 1;
}

static int rx_seq(struct rx *r)
{
    int any = 0;
    if (put(r, "("))
        return r->rc;
    while (r->p < r->n) {
        char c = r->s[r->p];
        size_t at = r->p;
        if (c == '|' || c == ')')
            break;
        if (c == '^') {
            if (at != 0)
                return rx_err(r, IFL_EUNSUPPORTED, at, "'^' is supported only at the start");
            r->p++;
            continue;
        }
        if (c == '$') {
            if (at + 1 != r->n)
                return rx_err(r, IFL_EUNSUPPORTED, at, "'$' is supported only at the end");
            r->p++;
            continue;
        }
        if (c == '*' || c == '+' || c == '?')
            return rx_err(r, IFL_EFORMAT, at, "'%c' has nothing to repeat", c);
        if (c == '{') {
            uint32_t m, n;
            int k = rx_count(r, &m, &n);
            if (k < 0)
                return r->rc;
            if (k > 0)
                return rx_err(r, IFL_EFORMAT, at, "'%.*s' has nothing to repeat", (int)(r->p - at),
                              r->s + at);
        }
        if (put(r, " "))
            return r->rc;
        if (c == '(') {
            r->p++;
            if (r->p < r->n && r->s[r->p] == '?') {
                if (r->p + 1 < r->n && r->s[r->p + 1] == ':')
                    r->p += 2;
                else
                    return rx_err(r, IFL_EUNSUPPORTED, at,
                                  "group options and lookaround '(?' are not supported");
            }
            if (++r->depth > 200)
                return rx_err(r, IFL_EFORMAT, at, "groups nested too deeply");
            if (rx_alt(r))
                return r->rc;
            if (r->p >= r->n || r->s[r->p] != ')')
                return rx_err(r, IFL_EFORMAT, at, "unbalanced '(': no matching ')'");
            r->p++;
            r->depth--;
        } else if (c == '[') {
            if (rx_class(r))
                return r->rc;
        } else if (c == '.') {
            r->p++;
            if (put(r, "[^\\n]"))
                return r->rc;
        } else if (c == '\\') {
            r->p++;
            const char *cls;
            int neg = 0;
            int64_t cp = rx_escape(r, &cls, &neg);
            if (r->rc)
                return r->rc;
            if (cls ? put(r, "[%s%s]", neg ? "^" : "", cls)
                    : (put(r, "\"") || put_cp(r, (uint32_t)cp, 0) || put(r, "\"")))
                return r->rc;
        } else {
            int64_t cp = rx_utf8(r);
            if (r->rc)
                return r->rc;
            if (put(r, "\"") || put_cp(r, (uint32_t)cp, 0) || put(r, "\""))
                return r->rc;
        }
        any = 1;
        /* quantifiers; a lazy suffix ? changes nothing for a whole match */
        while (r->p < r->n) {
            char q = r->s[r->p];
            size_t qat = r->p;
            if (q == '*' || q == '+' || q == '?') {
                if (put(r, "%c", q))
                    return r->rc;
                r->p++;
            } else if (q == '{') {
                uint32_t m, n;
                int k = rx_count(r, &m, &n);
                if (k < 0)
                    return r->rc;
                if (k == 0)
                    break; /* a literal '{' */
                if (n == UINT32_MAX ? put(r, "{%u,}", m) : put(r, "{%u,%u}", m, n))
                    return r->rc;
            } else {
                break;
            }
            if (r->p < r->n && r->s[r->p] == '?')
                r->p++;
            else if (r->p < r->n && r->s[r->p] == '+')
                /* possessive: no backtracking into the repeat, so x*+x
                 * matches nothing; ignoring it would accept more */
                return rx_err(r, IFL_EUNSUPPORTED, r->p,
                              "possessive quantifier '%.*s+' is not supported", (int)(r->p - qat),
                              r->s + qat);
            size_t q2;
            int c2;
            if (r->p < r->n && (r->s[r->p] == '*' || r->s[r->p] == '+' || r->s[r->p] == '?' ||
                                (r->s[r->p] == '{' && rx_count_starts(r, r->p, &q2, &c2)))) {
                /* x** and the like: wrap and repeat again */
                return rx_err(r, IFL_EUNSUPPORTED, r->p, "stacked quantifiers are not supported");
            }
        }
    }
    (void)any;
    return put(r, " )");
}

static int rx_alt(struct rx *r)
{
    if (put(r, "("))
        return r->rc;
    while (1) {
        if (rx_seq(r))
            return r->rc;
        if (r->p < r->n && r->s[r->p] == '|') {
            r->p++;
            if (put(r, " |"))
                return r->rc;
            continue;
        }
        return put(r, ")");
    }
}

int ifl_guide_regex_to_gbnf(char **out, const char *re, size_t len, char *err)
{
    *out = NULL;
    if (!re && len)
        return ifl_err(err, IFL_EINVAL, "regex: no pattern given");
    if (len > IFL_GUIDE_MAX_TEXT / 16)
        return ifl_err(err, IFL_EFORMAT, "regex: pattern of %zu bytes is too long", len);
    struct rx r = {.s = re, .n = len, .err = err};
    if (!put(&r, "root ::= ") && !rx_alt(&r)) {
        if (r.p < r.n)
            rx_err(&r, IFL_EFORMAT, r.p, "unbalanced ')'");
        else
            put(&r, "\n");
    }
    if (r.rc) {
        ifl_buf_free(&r.o);
        return r.rc;
    }
    *out = r.o.p; /* the caller frees it */
    return 0;
}

int ifl_guide_compile_regex(struct ifl_guide **out, const char *re, size_t len, char *err)
{
    char *text;
    *out = NULL;
    int rc = ifl_guide_regex_to_gbnf(&text, re, len, err);
    if (rc)
        return rc;
    char e2[IFL_ERR_LEN];
    rc = ifl_guide_compile_gbnf(out, text, strlen(text), e2);
    if (rc)
        ifl_err(err, rc, "regex: %.400s", e2);
    free(text);
    return rc;
}
