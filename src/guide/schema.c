/*
 * JSON Schema to GBNF. Each subschema becomes a rule "s<N>"; the JSON
 * building blocks (value, string, number, ws, ...) come from JSON mode.
 *
 * The rule of this file: never fail open. A keyword that constrains values
 * and cannot be expressed is an IFL_EUNSUPPORTED error naming it; it is
 * never ignored. Where the grammar is narrower than the schema the output
 * still validates: properties are generated in schema order, required ones
 * first, and an object with listed properties gets no extra ones
 * (additionalProperties is only honoured for objects without properties).
 * Keywords that only annotate (title, description, examples, default,
 * $schema, $id, $comment, strict) are ignored.
 */
#include <ctype.h>
#include <jansson.h>
#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"
#include "core/err.h"
#include "guide/internal.h"

struct sc {
    struct ifl_buf o; /* the rule line being written */
    struct ifl_buf d; /* finished rule lines */
    int n_rules;
    json_t *root;
    json_t *refs;    /* "$ref" string -> rule number */
    const char *pfx; /* every rule's name is pfx "s" N (pfx at most 32 bytes) */
    int depth;
    char *err;
    int rc;
};

static int sc_err(struct sc *c, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int sc_err(struct sc *c, int status, const char *fmt, ...)
{
    if (c->rc)
        return c->rc;
    c->rc = status;
    if (c->err) {
        char msg[400];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        snprintf(c->err, IFL_ERR_LEN, "json schema: %s", msg);
    }
    return status;
}

static int out(struct sc *c, const char *s, size_t n)
{
    if (c->o.len + n + 1 > IFL_GUIDE_MAX_TEXT)
        return sc_err(c, IFL_EFORMAT, "schema's grammar is too large");
    ifl_buf_add(&c->o, s, n);
    return c->o.oom ? sc_err(c, IFL_ENOMEM, "out of memory") : 0;
}

static int outf(struct sc *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int outf(struct sc *c, const char *fmt, ...)
{
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k < 0 || (size_t)k >= sizeof tmp)
        return sc_err(c, IFL_EINVAL, "internal formatting error");
    return out(c, tmp, (size_t)k);
}

/* Emits s as a GBNF literal "..." with every byte outside printable ASCII
 * (and " and \) escaped; UTF-8 is decoded so the literal is code points. */
static int out_literal(struct sc *c, const char *s, size_t n)
{
    if (out(c, "\"", 1))
        return c->rc;
    for (size_t i = 0; i < n;) {
        unsigned char b = (unsigned char)s[i];
        if (b >= 0x20 && b < 0x7F && b != '"' && b != '\\') {
            if (out(c, s + i, 1))
                return c->rc;
            i++;
            continue;
        }
        uint32_t cp = b;
        int need = b >= 0xF0 ? 3 : b >= 0xE0 ? 2 : b >= 0xC0 ? 1 : 0;
        if (b >= 0x80) {
            cp = b & (0x3F >> need);
            for (int k = 0; k < need && i + 1 < n; k++)
                cp = (cp << 6) | ((unsigned char)s[++i] & 0x3F);
        }
        i++;
        if (outf(c, "\\U%08X", cp))
            return c->rc;
    }
    return out(c, "\"", 1);
}

/* A JSON value rendered compactly, as a literal. */
static int out_json_literal(struct sc *c, const json_t *v)
{
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!s)
        return sc_err(c, IFL_ENOMEM, "out of memory");
    /* a constant is generated exactly as jansson writes it compactly */
    int rc = out_literal(c, s, strlen(s));
    free(s);
    return rc;
}

static int gen(struct sc *c, json_t *s);

static int new_rule(struct sc *c)
{
    return c->n_rules++;
}

static int is_annotation(const char *k)
{
    static const char *ann[] = {"title",      "description", "examples",    "default",  "$schema",
                                "$id",        "$comment",    "strict",      "readOnly", "writeOnly",
                                "deprecated", "$defs",       "definitions", "name",     NULL};
    for (int i = 0; ann[i]; i++)
        if (strcmp(k, ann[i]) == 0)
            return 1;
    return 0;
}

/* Keywords that constrain values and that no branch below expresses: one
 * of them anywhere is an error, never ignored. */
static const char *unsupported_keyword(json_t *s)
{
    static const char *kw[] = {"not",
                               "if",
                               "then",
                               "else",
                               "dependentRequired",
                               "dependentSchemas",
                               "dependencies",
                               "unevaluatedProperties",
                               "unevaluatedItems",
                               "minContains",
                               "maxContains",
                               "additionalItems",
                               NULL};
    for (int i = 0; kw[i]; i++)
        if (json_object_get(s, kw[i]))
            return kw[i];
    return NULL;
}

/* const, enum, $ref and the combinators make the whole rule; a sibling that
 * constrains as well would be dropped, so it is an error unless it is an
 * annotation or in `also` (NULL-terminated). */
static int only_with(struct sc *c, json_t *s, const char *what, const char *const *also)
{
    const char *k;
    json_t *x;
    json_object_foreach(s, k, x)
    {
        if (!strcmp(k, what) || is_annotation(k) || !strcmp(k, "nullable"))
            continue;
        int ok = 0;
        for (int i = 0; also && also[i] && !ok; i++)
            ok = !strcmp(k, also[i]);
        if (!ok)
            return sc_err(c, IFL_EUNSUPPORTED, "'%s' together with '%.100s' is not supported", what,
                          k);
    }
    return 0;
}

/* Whether value v has JSON Schema type t (a name or an array of names; an
 * integer is a number without a fraction, as 1.0). -1: t is malformed. */
static int has_type(json_t *t, json_t *v)
{
    if (json_is_array(t)) {
        int any = 0;
        for (size_t i = 0; i < json_array_size(t); i++) {
            int k = has_type(json_array_get(t, i), v);
            if (k < 0)
                return -1;
            any |= k;
        }
        return any;
    }
    const char *n = json_string_value(t);
    if (!n)
        return -1;
    if (!strcmp(n, "integer"))
        return json_is_integer(v) ||
               (json_is_real(v) && json_real_value(v) == floor(json_real_value(v)));
    if (!strcmp(n, "number"))
        return json_is_number(v);
    if (!strcmp(n, "string"))
        return json_is_string(v);
    if (!strcmp(n, "boolean"))
        return json_is_boolean(v);
    if (!strcmp(n, "null"))
        return json_is_null(v);
    if (!strcmp(n, "object"))
        return json_is_object(v);
    if (!strcmp(n, "array"))
        return json_is_array(v);
    return -1;
}

static int64_t get_int(struct sc *c, json_t *s, const char *key, int64_t dflt)
{
    json_t *v = json_object_get(s, key);
    if (!v)
        return dflt;
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return sc_err(c, IFL_EFORMAT, "'%s' must be a non-negative integer", key), -1;
    return json_integer_value(v);
}

/* Body of a string rule (no rule header). */
static int gen_string(struct sc *c, json_t *s)
{
    json_t *fmt = json_object_get(s, "format");
    if (json_object_get(s, "pattern"))
        return sc_err(c, IFL_EUNSUPPORTED, "'pattern' is not supported");
    if (fmt) {
        const char *f = json_string_value(fmt);
        if (json_object_get(s, "minLength") || json_object_get(s, "maxLength"))
            return sc_err(c, IFL_EUNSUPPORTED,
                          "'format' together with minLength/maxLength is not supported");
        /* a calendar date (RFC 3339 full-date): days per month, and
         * February 29 only in leap years (divisible by 4, centuries by 400) */
        static const char *date =
            "( [0-9]{4} \"-\" ( ( \"0\" [13578] | \"1\" [02] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | "
            "\"3\" [01] ) | ( \"0\" [469] | \"11\" ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"30\" ) | "
            "\"02-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] ) ) | ( [0-9]{2} ( \"0\" [48] | "
            "[2468] [048] | [13579] [26] ) | ( [02468] [048] | [13579] [26] ) \"00\" ) \"-02-29\" "
            ")";
        static const char *time =
            "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,6} "
            ")? ( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )";
        if (!f)
            return sc_err(c, IFL_EFORMAT, "'format' must be a string");
        if (strcmp(f, "date") == 0)
            return outf(c, "\"\\\"\" ") || out(c, date, strlen(date)) || outf(c, " \"\\\"\"");
        if (strcmp(f, "time") == 0)
            return outf(c, "\"\\\"\" ") || out(c, time, strlen(time)) || outf(c, " \"\\\"\"");
        if (strcmp(f, "date-time") == 0)
            return outf(c, "\"\\\"\" ") || out(c, date, strlen(date)) || outf(c, " \"T\" ") ||
                   out(c, time, strlen(time)) || outf(c, " \"\\\"\"");
        if (strcmp(f, "uuid") == 0)
            return outf(c, "\"\\\"\" [0-9a-f]{8} \"-\" [0-9a-f]{4} \"-\" [0-9a-f]{4} \"-\" "
                           "[0-9a-f]{4} \"-\" [0-9a-f]{12} \"\\\"\"");
        if (strcmp(f, "email") == 0)
            /* narrower than RFC 5321 so that every output is valid: at
             * most one dot in the local part (64 bytes at most), domain
             * labels without edge hyphens, a top-level domain of letters */
            return outf(c,
                        "\"\\\"\" [a-zA-Z0-9_%%+-]{1,32} ( \".\" [a-zA-Z0-9_%%+-]{1,31} )? \"@\" "
                        "( [a-zA-Z0-9]{1,20} ( \"-\" [a-zA-Z0-9]{1,20} )? \".\" ){1,3} "
                        "[a-zA-Z]{2,12} \"\\\"\"");
        return sc_err(c, IFL_EUNSUPPORTED, "string format '%s' is not supported", f);
    }
    int64_t mn = get_int(c, s, "minLength", 0), mx = get_int(c, s, "maxLength", -2);
    if (c->rc)
        return c->rc;
    if (mn > 10000)
        return sc_err(c, IFL_EUNSUPPORTED, "minLength %lld is above 10000, which is not supported",
                      (long long)mn);
    if (mx == -2)
        return outf(c, "\"\\\"\" char{%lld,} \"\\\"\"", (long long)mn);
    if (mx < mn)
        return sc_err(c, IFL_EFORMAT, "maxLength %lld is below minLength %lld", (long long)mx,
                      (long long)mn);
    if (mx > 10000)
        return sc_err(c, IFL_EUNSUPPORTED, "maxLength %lld is above 10000, which is not supported",
                      (long long)mx);
    return outf(c, "\"\\\"\" char{%lld,%lld} \"\\\"\"", (long long)mn, (long long)mx);
}

/* The decimal strings a..b of n digits each (a <= b as strings; inner
 * positions, so leading zeros are allowed), digit by digit: a range costs
 * O(digits) grammar, and the automaton a few stacks, whatever its width. */
static int same_len(struct sc *c, const char *a, const char *b, size_t n)
{
    if (n == 0 || !memcmp(a, b, n))
        return n ? outf(c, "\"%.*s\"", (int)n, a) : 0;
    int zeros = 1, nines = 1;
    for (size_t i = 1; i < n; i++) {
        zeros &= a[i] == '0';
        nines &= b[i] == '9';
    }
    if (a[0] == b[0])
        return outf(c, "\"%c\" ( ", a[0]) || same_len(c, a + 1, b + 1, n - 1) || outf(c, " )");
    if (zeros && nines)
        return outf(c, "[%c-%c]", a[0], b[0]) || (n > 1 && outf(c, " [0-9]{%zu}", n - 1));
    char lo[24], hi[24];
    memset(lo, '0', sizeof lo);
    memset(hi, '9', sizeof hi);
    if (outf(c, "( \"%c\" ( ", a[0]) || same_len(c, a + 1, hi, n - 1) || outf(c, " )"))
        return c->rc;
    if (b[0] - a[0] > 1 &&
        (outf(c, " | [%c-%c]", a[0] + 1, b[0] - 1) || (n > 1 && outf(c, " [0-9]{%zu}", n - 1))))
        return c->rc;
    return outf(c, " | \"%c\" ( ", b[0]) || same_len(c, lo, b + 1, n - 1) || outf(c, " ) )");
}

/* Every integer in [a, b] (0 <= a <= b) without leading zeros, as one
 * parenthesised alternation. */
static int digit_range(struct sc *c, long long a, long long b)
{
    if (out(c, "( ", 2))
        return c->rc;
    long long p = 1; /* 10^(d-1) */
    int first = 1;
    for (int d = 1; d <= 18 && (p <= b || d == 1); d++, p *= 10) { /* d 1 holds 0 */
        long long x = a > (d == 1 ? 0 : p) ? a : (d == 1 ? 0 : p),
                  y = b < p * 10 - 1 ? b : p * 10 - 1;
        if (x > y)
            continue;
        char xs[24], ys[24];
        snprintf(xs, sizeof xs, "%lld", x);
        snprintf(ys, sizeof ys, "%lld", y);
        if ((!first && out(c, " | ", 3)) || same_len(c, xs, ys, (size_t)d))
            return c->rc;
        first = 0;
    }
    return out(c, " )", 2);
}

#define RANGE_LIMIT 1e15 /* integer bounds beyond this are not supported */

static int gen_integer(struct sc *c, json_t *s)
{
    json_t *jmin = json_object_get(s, "minimum"), *jmax = json_object_get(s, "maximum");
    json_t *emin = json_object_get(s, "exclusiveMinimum"),
           *emax = json_object_get(s, "exclusiveMaximum");
    if ((jmin && !json_is_number(jmin)) || (jmax && !json_is_number(jmax)) ||
        (emin && !json_is_number(emin)) || (emax && !json_is_number(emax)))
        return sc_err(c, IFL_EFORMAT, "minimum/maximum must be numbers");
    if (json_object_get(s, "multipleOf"))
        return sc_err(c, IFL_EUNSUPPORTED, "'multipleOf' is not supported");
    int has_min = jmin || emin, has_max = jmax || emax;
    double lo = jmin ? ceil(json_number_value(jmin)) : -1e300;
    double hi = jmax ? floor(json_number_value(jmax)) : 1e300;
    if (emin && floor(json_number_value(emin)) + 1 > lo)
        lo = floor(json_number_value(emin)) + 1;
    if (emax && ceil(json_number_value(emax)) - 1 < hi)
        hi = ceil(json_number_value(emax)) - 1;
    if (!has_min && !has_max)
        return outf(c, "integer");
    if (has_min && has_max) {
        if (lo > hi)
            return sc_err(c, IFL_EFORMAT, "integer range [%g, %g] is empty", lo, hi);
        if (fabs(lo) > RANGE_LIMIT || fabs(hi) > RANGE_LIMIT)
            return sc_err(c, IFL_EUNSUPPORTED, "integer bounds beyond 1e15 are not supported");
        long long a = (long long)lo, b = (long long)hi;
        if (b < 0)
            return out(c, "\"-\" ", 4) || digit_range(c, -b, -a);
        if (a >= 0)
            return digit_range(c, a, b);
        return out(c, "( \"-\" ", 6) || digit_range(c, 1, -a) || out(c, " | ", 3) ||
               digit_range(c, 0, b) || out(c, " )", 2);
    }
    if (has_min && !has_max && lo == 0)
        return outf(c, "( \"0\" | [1-9] [0-9]{0,14} )");
    if (has_min && !has_max && lo == 1)
        return outf(c, "[1-9] [0-9]{0,14}");
    return sc_err(c, IFL_EUNSUPPORTED, "this integer minimum/maximum is not supported");
}

static int gen_number(struct sc *c, json_t *s)
{
    json_t *jmin = json_object_get(s, "minimum"), *jmax = json_object_get(s, "maximum");
    if (json_object_get(s, "exclusiveMaximum") || json_object_get(s, "exclusiveMinimum") ||
        json_object_get(s, "multipleOf"))
        return sc_err(c, IFL_EUNSUPPORTED,
                      "number exclusive bounds and 'multipleOf' are not "
                      "supported");
    if ((jmin && !json_is_number(jmin)) || (jmax && !json_is_number(jmax)))
        return sc_err(c, IFL_EFORMAT, "minimum/maximum must be numbers");
    if (jmin && !jmax) {
        if (json_number_value(jmin) != 0)
            return sc_err(c, IFL_EUNSUPPORTED,
                          "a number minimum other than 0 needs a maximum as well");
        return outf(
            c, "( \"0\" | [1-9] [0-9]{0,14} ) ( \".\" [0-9]{1,15} )? ( [eE] [-+]? [0-9]{1,2} )?");
    }
    if (!jmin && jmax)
        return sc_err(c, IFL_EUNSUPPORTED, "a number maximum needs a minimum as well");
    if (!jmin)
        return outf(c, "number");
    /* [lo, hi] with integer bounds: an integer part in range and up to six
     * fraction digits (no exponent), so every output is inside */
    double dlo = json_number_value(jmin), dhi = json_number_value(jmax);
    if (dlo != floor(dlo) || dhi != floor(dhi) || fabs(dlo) > RANGE_LIMIT ||
        fabs(dhi) > RANGE_LIMIT)
        return sc_err(c, IFL_EUNSUPPORTED, "number bounds must be integers (|bound| <= 1e15)");
    long long lo = (long long)dlo, hi = (long long)dhi;
    if (lo > hi)
        return sc_err(c, IFL_EFORMAT, "number range [%lld, %lld] is empty", lo, hi);
    const char *frac = " ( \".\" [0-9]{1,6} )?";
    if (out(c, "( ", 2))
        return c->rc;
    /* the bounds themselves */
    if (outf(c, "\"%lld\"", hi) || (lo < hi && outf(c, " | \"%lld\"", lo)))
        return c->rc;
    /* k.f for k in [max(lo, 0), hi - 1]: in [k, k + 1) */
    long long k0 = lo > 0 ? lo : 0;
    if (k0 <= hi - 1 &&
        (out(c, " | ", 3) || digit_range(c, k0, hi - 1) || out(c, frac, strlen(frac))))
        return c->rc;
    /* -m.f for m in [max(0, -hi), -lo - 1]: in (-(m + 1), -m] */
    long long m0 = hi < 0 ? -hi : 0;
    if (m0 <= -lo - 1 &&
        (out(c, " | \"-\" ", 7) || digit_range(c, m0, -lo - 1) || out(c, frac, strlen(frac))))
        return c->rc;
    return out(c, " )", 2);
}

static int gen_array(struct sc *c, json_t *s)
{
    json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    int64_t mn = get_int(c, s, "minItems", 0), mx = get_int(c, s, "maxItems", -2);
    if (c->rc)
        return c->rc;
    if (json_object_get(s, "uniqueItems") == json_true() || json_object_get(s, "contains"))
        return sc_err(c, IFL_EUNSUPPORTED, "'uniqueItems' and 'contains' are not supported");
    size_t np = prefix ? json_array_size(prefix) : 0;
    if (prefix && !json_is_array(prefix))
        return sc_err(c, IFL_EFORMAT, "'prefixItems' must be an array");
    int irule = -1;
    if (items == json_false()) {
        if (mx == -2 || (size_t)mx > np)
            mx = (int64_t)np;
    } else if (items) {
        irule = gen(c, items);
    }
    if (c->rc)
        return c->rc;
    int *pr = np ? malloc(np * sizeof *pr) : NULL;
    if (np && !pr)
        return sc_err(c, IFL_ENOMEM, "out of memory");
    for (size_t i = 0; i < np && !c->rc; i++)
        pr[i] = gen(c, json_array_get(prefix, i));
    if (c->rc) {
        free(pr);
        return c->rc;
    }
    if (mx != -2 && mx < mn) {
        free(pr);
        return sc_err(c, IFL_EFORMAT, "maxItems %lld is below minItems %lld", (long long)mx,
                      (long long)mn);
    }
    if (mx > 10000 || mn > 10000) {
        free(pr);
        return sc_err(c, IFL_EUNSUPPORTED, "minItems/maxItems above 10000 are not supported");
    }
    /* item k (0-based) is the k-th prefix schema, then `items` (or any) */
    char iname[48];
    if (irule >= 0)
        snprintf(iname, sizeof iname, "%ss%d", c->pfx, irule);
    else
        snprintf(iname, sizeof iname, "value");
    /* build: "[" ws ( I0 (ws "," ws I1 (ws "," ws I2 ...)?)? )? ws "]" with counts */
    int64_t total = mx == -2 ? -1 : mx;
    if (outf(c, "\"[\" ws "))
        return free(pr), c->rc;
    int64_t fixed = (int64_t)np;
    if (total >= 0 && total < fixed)
        fixed = total;
    /* nested optional chain over the prefix items */
    int64_t k;
    int opened = 0;
    for (k = 0; k < fixed; k++) {
        int opt = k >= mn;
        if (outf(c, "%s%s", opt ? "( " : "", k ? "ws \",\" ws " : "") ||
            outf(c, "%ss%d ", c->pfx, pr[k]))
            return free(pr), c->rc;
        opened += opt;
    }
    if (total < 0 || total > fixed) {
        int64_t need = mn > fixed ? mn - fixed : 0;
        int64_t more = total < 0 ? -1 : total - fixed - need;
        for (int64_t i = 0; i < need; i++)
            if (outf(c, "%s%s ", k + i ? "ws \",\" ws " : "", iname))
                return free(pr), c->rc;
        if (fixed + need == 0) {
            /* first item has no comma */
            if (more != 0) {
                if (outf(c, "( %s ( ws \",\" ws %s )", iname, iname))
                    return free(pr), c->rc;
                if (more < 0 ? outf(c, "* )? ") : outf(c, "{0,%lld} )? ", (long long)(more - 1)))
                    return free(pr), c->rc;
            }
        } else if (more != 0) {
            if (more < 0 ? outf(c, "( ws \",\" ws %s )* ", iname)
                         : outf(c, "( ws \",\" ws %s ){0,%lld} ", iname, (long long)more))
                return free(pr), c->rc;
        }
    }
    for (int i = 0; i < opened; i++)
        if (outf(c, ")? "))
            return free(pr), c->rc;
    free(pr);
    return outf(c, "ws \"]\"");
}

static int gen_object(struct sc *c, json_t *s)
{
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *addl = json_object_get(s, "additionalProperties");
    if (json_object_get(s, "patternProperties") || json_object_get(s, "propertyNames") ||
        json_object_get(s, "minProperties") || json_object_get(s, "maxProperties"))
        return sc_err(c, IFL_EUNSUPPORTED,
                      "patternProperties, propertyNames and min/maxProperties are not supported");
    if (props && !json_is_object(props))
        return sc_err(c, IFL_EFORMAT, "'properties' must be an object");
    if (req && !json_is_array(req))
        return sc_err(c, IFL_EFORMAT, "'required' must be an array");
    size_t n = props ? json_object_size(props) : 0;
    if (n == 0) {
        if (req && json_array_size(req))
            return sc_err(c, IFL_EUNSUPPORTED, "'required' without 'properties' is not supported");
        if (addl == json_false())
            return outf(c, "\"{\" ws \"}\"");
        if (!addl || addl == json_true())
            return outf(c, "object");
        int v = gen(c, addl);
        if (c->rc)
            return c->rc;
        return outf(
            c,
            "\"{\" ws ( string ws \":\" ws %ss%d ws ( \",\" ws string ws \":\" ws %ss%d ws )* )? "
            "\"}\"",
            c->pfx, v, c->pfx, v);
    }
    for (size_t i = 0; i < json_array_size(req); i++) {
        const char *k = json_string_value(json_array_get(req, i));
        if (!k)
            return sc_err(c, IFL_EFORMAT, "'required' must list strings");
        if (!json_object_get(props, k))
            return sc_err(c, IFL_EUNSUPPORTED, "required property '%s' is not in 'properties'", k);
    }
    /* one rule per property: "\"name\"" ws ":" ws value */
    const char **keys = malloc(n * sizeof *keys);
    int *kv = malloc(n * sizeof *kv), *isreq = calloc(n, sizeof *isreq);
    if (!keys || !kv || !isreq) {
        free(keys), free(kv), free(isreq);
        return sc_err(c, IFL_ENOMEM, "out of memory");
    }
    size_t i = 0;
    const char *key;
    json_t *val;
    json_object_foreach(props, key, val)
    {
        keys[i] = key;
        for (size_t r = 0; r < json_array_size(req); r++)
            if (strcmp(json_string_value(json_array_get(req, r)), key) == 0)
                isreq[i] = 1;
        kv[i] = gen(c, val);
        if (c->rc)
            break;
        i++;
    }
    if (c->rc || outf(c, "\"{\" ws "))
        goto done;
    /* required first, in schema order; then optional ones, each optional */
    int first = 1;
    for (int pass = 0; pass < 2 && !c->rc; pass++) {
        for (i = 0; i < n && !c->rc; i++) {
            if (isreq[i] != (pass == 0))
                continue;
            json_t *ks = json_string(keys[i]);
            char *q = ks ? json_dumps(ks, JSON_ENCODE_ANY) : NULL;
            json_decref(ks);
            if (!q) {
                sc_err(c, IFL_ENOMEM, "out of memory");
                break;
            }
            if (pass == 0) {
                (void)(outf(c, "%s", first ? "" : "\",\" ws ") || out_literal(c, q, strlen(q)) ||
                       outf(c, " ws \":\" ws %ss%d ws ", c->pfx, kv[i]));
                first = 0;
            } else if (!first) {
                (void)(outf(c, "( \",\" ws ") || out_literal(c, q, strlen(q)) ||
                       outf(c, " ws \":\" ws %ss%d ws )? ", c->pfx, kv[i]));
            } else {
                /* no required property: the optional ones form a chain where the
                 * first present one has no comma; done below */
            }
            free(q);
        }
    }
    if (!c->rc && first) {
        /* all optional: ( P1 C2 | P2 C3 | ... | Pn )? where Ck = ( "," Pk )? C(k+1) */
        if (outf(c, "( "))
            goto done;
        for (size_t a = 0; a < n && !c->rc; a++) {
            json_t *ks = json_string(keys[a]);
            char *q = ks ? json_dumps(ks, JSON_ENCODE_ANY) : NULL;
            json_decref(ks);
            if (!q) {
                sc_err(c, IFL_ENOMEM, "out of memory");
                break;
            }
            (void)(outf(c, "%s", a ? "| " : "") || out_literal(c, q, strlen(q)) ||
                   outf(c, " ws \":\" ws %ss%d ws ", c->pfx, kv[a]));
            free(q);
            for (size_t b = a + 1; b < n && !c->rc; b++) {
                ks = json_string(keys[b]);
                q = ks ? json_dumps(ks, JSON_ENCODE_ANY) : NULL;
                json_decref(ks);
                if (!q) {
                    sc_err(c, IFL_ENOMEM, "out of memory");
                    break;
                }
                (void)(outf(c, "( \",\" ws ") || out_literal(c, q, strlen(q)) ||
                       outf(c, " ws \":\" ws %ss%d ws )? ", c->pfx, kv[b]));
                free(q);
            }
        }
        if (!c->rc)
            outf(c, ")? ");
    }
    if (!c->rc)
        outf(c, "\"}\"");
done:
    free(keys);
    free(kv);
    free(isreq);
    return c->rc;
}

/* Resolves "#/$defs/x", "#/definitions/x" and "#" against the root. */
static json_t *resolve(struct sc *c, const char *ref)
{
    if (strcmp(ref, "#") == 0)
        return c->root;
    const char *p;
    json_t *defs = NULL;
    if (strncmp(ref, "#/$defs/", 8) == 0) {
        defs = json_object_get(c->root, "$defs");
        p = ref + 8;
    } else if (strncmp(ref, "#/definitions/", 14) == 0) {
        defs = json_object_get(c->root, "definitions");
        p = ref + 14;
    } else {
        sc_err(c, IFL_EUNSUPPORTED,
               "$ref '%.200s': only #, #/$defs/... and #/definitions/... are supported", ref);
        return NULL;
    }
    json_t *t = json_object_get(defs, p);
    if (!t)
        sc_err(c, IFL_EFORMAT, "$ref '%.200s' does not resolve", ref);
    return t;
}

/* The body of subschema s, after "sN ::= ". */
static int gen_body(struct sc *c, json_t *s)
{
    if (s == json_true())
        return outf(c, "value");
    if (s == json_false())
        return sc_err(c, IFL_EFORMAT, "schema 'false' admits no value");
    if (!json_is_object(s))
        return sc_err(c, IFL_EFORMAT, "a schema must be an object or a boolean");
    json_t *v;
    int nullable = json_object_get(s, "nullable") == json_true();
    if (nullable && outf(c, "\"null\" | "))
        return c->rc;
    static const char *const with_type[] = {"type", NULL};
    static const char *const with_enum[] = {"type", "enum", NULL};
    json_t *type = json_object_get(s, "type");
    if ((v = json_object_get(s, "const"))) {
        if (only_with(c, s, "const", with_enum))
            return c->rc;
        /* const and enum both: the const value, if the enum has it */
        json_t *en = json_object_get(s, "enum");
        int in_enum = !en;
        for (size_t i = 0; i < json_array_size(en) && !in_enum; i++)
            in_enum = json_equal(json_array_get(en, i), v);
        int k = type ? has_type(type, v) : 1;
        if (k < 0)
            return sc_err(c, IFL_EFORMAT, "'type' must name JSON types");
        if (!k || !in_enum) {
            if (nullable)
                return outf(c, "\"null\"");
            return sc_err(c, IFL_EFORMAT,
                          "'const' value is not of the schema's type or not in "
                          "its 'enum': the schema admits no value");
        }
        return out_json_literal(c, v);
    }
    if ((v = json_object_get(s, "enum"))) {
        if (!json_is_array(v) || json_array_size(v) == 0)
            return sc_err(c, IFL_EFORMAT, "'enum' must be a non-empty array");
        if (only_with(c, s, "enum", with_type))
            return c->rc;
        /* values of another type than `type` are not valid: leave them out */
        int n = 0;
        for (size_t i = 0; i < json_array_size(v); i++) {
            int k = type ? has_type(type, json_array_get(v, i)) : 1;
            if (k < 0)
                return sc_err(c, IFL_EFORMAT, "'type' must name JSON types");
            if (k && ((n && outf(c, " | ")) || out_json_literal(c, json_array_get(v, i))))
                return c->rc;
            n += k;
        }
        if (n == 0 && !nullable)
            return sc_err(c, IFL_EFORMAT,
                          "no 'enum' value is of the schema's type: the schema "
                          "admits no value");
        if (n == 0 && outf(c, "\"null\""))
            return c->rc;
        return 0;
    }
    if ((v = json_object_get(s, "$ref"))) {
        if (only_with(c, s, "$ref", NULL))
            return c->rc;
        const char *ref = json_string_value(v);
        if (!ref)
            return sc_err(c, IFL_EFORMAT, "'$ref' must be a string");
        json_t *known = json_object_get(c->refs, ref);
        if (known)
            return outf(c, "%ss%lld", c->pfx, (long long)json_integer_value(known));
        json_t *t = resolve(c, ref);
        if (!t)
            return c->rc;
        /* gen numbers t's rule c->n_rules: register it first, so a
         * recursive reference inside t refers back to it */
        if (json_object_set_new(c->refs, ref, json_integer(c->n_rules)))
            return sc_err(c, IFL_ENOMEM, "out of memory");
        int r = gen(c, t);
        return c->rc ? c->rc : outf(c, "%ss%d", c->pfx, r);
    }
    const char *alts[] = {"anyOf", "oneOf", "allOf"};
    for (int a = 0; a < 3; a++) {
        if (!(v = json_object_get(s, alts[a])))
            continue;
        if (!json_is_array(v) || json_array_size(v) == 0)
            return sc_err(c, IFL_EFORMAT, "'%s' must be a non-empty array", alts[a]);
        if (only_with(c, s, alts[a], NULL))
            return c->rc;
        if (a == 2 && json_array_size(v) > 1)
            return sc_err(c, IFL_EUNSUPPORTED,
                          "'allOf' with more than one schema is not supported");
        for (size_t i = 0; i < json_array_size(v); i++) {
            int r = gen(c, json_array_get(v, i));
            if (c->rc || outf(c, "%s%ss%d", i ? " | " : "", c->pfx, r))
                return c->rc;
        }
        return 0;
    }
    const char *bad = unsupported_keyword(s);
    if (bad)
        return sc_err(c, IFL_EUNSUPPORTED, "keyword '%s' is not supported", bad);
    if (json_is_array(type)) {
        for (size_t i = 0; i < json_array_size(type); i++) {
            json_t *sub = json_deep_copy(s);
            if (!sub)
                return sc_err(c, IFL_ENOMEM, "out of memory");
            json_object_set(sub, "type", json_array_get(type, i));
            json_object_del(sub, "nullable");
            int r = gen(c, sub);
            json_decref(sub);
            if (c->rc || outf(c, "%s%ss%d", i ? " | " : "", c->pfx, r))
                return c->rc;
        }
        return 0;
    }
    const char *t = json_string_value(type);
    if (type && !t)
        return sc_err(c, IFL_EFORMAT, "'type' must be a string or an array of strings");
    if (!t) {
        if (json_object_get(s, "properties") || json_object_get(s, "additionalProperties"))
            t = "object";
        else if (json_object_get(s, "items") || json_object_get(s, "prefixItems"))
            t = "array";
        else {
            const char *k;
            json_t *x;
            json_object_foreach(s, k, x)
            {
                if (!is_annotation(k) && strcmp(k, "nullable") != 0)
                    return sc_err(c, IFL_EUNSUPPORTED, "keyword '%s' is not supported", k);
            }
            return outf(c, "value");
        }
    }
    if (strcmp(t, "string") == 0)
        return gen_string(c, s);
    if (strcmp(t, "integer") == 0)
        return gen_integer(c, s);
    if (strcmp(t, "number") == 0)
        return gen_number(c, s);
    if (strcmp(t, "boolean") == 0)
        return outf(c, "\"true\" | \"false\"");
    if (strcmp(t, "null") == 0)
        return outf(c, "\"null\"");
    if (strcmp(t, "object") == 0)
        return gen_object(c, s);
    if (strcmp(t, "array") == 0)
        return gen_array(c, s);
    return sc_err(c, IFL_EFORMAT, "unknown type '%.100s'", t);
}

/* Generates the rule for s and returns its number. Rules are written as
 * whole lines; a rule's own body is built in a separate buffer because
 * generating it writes the rules of its subschemas. */
static int gen(struct sc *c, json_t *s)
{
    if (++c->depth > 64) {
        sc_err(c, IFL_EUNSUPPORTED, "schema nested deeper than 64 levels");
        return 0;
    }
    int r = new_rule(c);
    struct ifl_buf saved = c->o;
    c->o = (struct ifl_buf){0};
    outf(c, "%ss%d ::= ", c->pfx, r);
    gen_body(c, s);
    out(c, "\n", 1);
    struct ifl_buf mine = c->o;
    /* append the finished line to d, then go back to the caller's line */
    c->o = c->d;
    if (!c->rc)
        out(c, mine.p ? mine.p : "", mine.len);
    c->d = c->o;
    c->o = saved;
    ifl_buf_free(&mine);
    c->depth--;
    return r;
}

/* JSON mode's rules minus its root line, its number and its ws, which
 * schema output replaces: numbers keep to 15 integer digits and two
 * exponent digits (exact in a double, and within what JSON parsers take: a
 * 40-digit integer is "too big" for most), and output is compact, at most
 * one space between tokens (JSON mode allows runs of whitespace, which a
 * model can repeat until max_tokens). Built once. */
static char schema_common[1024];
static pthread_once_t schema_common_once = PTHREAD_ONCE_INIT;

static void build_schema_common(void)
{
    static const char tail[] =
        "number ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,14} ) ( \".\" [0-9]{1,15} )? "
        "( [eE] [-+]? [0-9]{1,2} )?\n"
        "integer ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,14} )\n"
        "ws ::= \" \"?\n";
    const char *rest = strchr(ifl_guide_json_gbnf(0), '\n') + 1;
    size_t n = 0;
    for (const char *l = rest; *l;) {
        const char *eol = strchr(l, '\n');
        size_t ln = eol ? (size_t)(eol - l) + 1 : strlen(l);
        if (strncmp(l, "number ::=", 10) && strncmp(l, "ws ::=", 6)) {
            IFL_ASSERT(n + ln < sizeof schema_common);
            memcpy(schema_common + n, l, ln);
            n += ln;
        }
        l += ln;
    }
    IFL_ASSERT(n + sizeof tail <= sizeof schema_common);
    memcpy(schema_common + n, tail, sizeof tail);
}

const char *ifl_guide_schema_gbnf_common(void)
{
    pthread_once(&schema_common_once, build_schema_common);
    return schema_common;
}

int ifl_guide_schema_rules(char **out_text, int *top, const char *schema, size_t len,
                           const char *prefix, char *err)
{
    *out_text = NULL;
    *top = -1;
    size_t pl = strlen(prefix);
    for (size_t i = 0; i < pl; i++)
        if (!isalnum((unsigned char)prefix[i]) && prefix[i] != '-' && prefix[i] != '_')
            pl = 99;
    if (pl > 32)
        return ifl_err(err, IFL_EINVAL, "json schema: rule prefix '%.40s' is not a short name",
                       prefix);
    json_error_t je;
    json_t *root = json_loadb(schema, len, JSON_DECODE_ANY, &je);
    if (!root)
        return ifl_err(err, IFL_EFORMAT, "json schema: %d:%d: %s", je.line, je.column, je.text);
    struct sc c = {.root = root, .err = err, .pfx = prefix};
    c.refs = json_object();
    int r = gen(&c, root);
    if (!c.rc && !(*out_text = strdup(c.d.p ? c.d.p : "")))
        sc_err(&c, IFL_ENOMEM, "out of memory");
    if (!c.rc)
        *top = r;
    ifl_buf_free(&c.o);
    ifl_buf_free(&c.d);
    json_decref(c.refs);
    json_decref(root);
    return c.rc;
}

int ifl_guide_schema_to_gbnf(char **out_text, const char *schema, size_t len, char *err)
{
    char *rules;
    int top;
    *out_text = NULL;
    int rc = ifl_guide_schema_rules(&rules, &top, schema, len, "", err);
    if (rc)
        return rc;
    const char *common = ifl_guide_schema_gbnf_common();
    char head[64];
    snprintf(head, sizeof head, "root ::= ws s%d ws\n", top);
    size_t n = strlen(head) + strlen(rules) + strlen(common) + 1;
    char *text = malloc(n);
    if (!text) {
        free(rules);
        return ifl_err(err, IFL_ENOMEM, "out of memory");
    }
    snprintf(text, n, "%s%s%s", head, rules, common);
    free(rules);
    *out_text = text;
    return 0;
}

int ifl_guide_compile_json_schema(struct ifl_guide **out, const char *schema, size_t len, char *err)
{
    char *text;
    *out = NULL;
    int rc = ifl_guide_schema_to_gbnf(&text, schema, len, err);
    if (rc)
        return rc;
    char e2[IFL_ERR_LEN];
    rc = ifl_guide_compile_gbnf(out, text, strlen(text), e2);
    if (rc)
        ifl_err(err, rc, "json schema: %.400s", e2);
    free(text);
    return rc;
}
