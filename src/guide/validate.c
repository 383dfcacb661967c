/*
 * A JSON Schema validator, written independently of the schema-to-grammar
 * front end (schema.c) so that each can check the other: tests generate
 * text under a schema's grammar and validate it here; the server may
 * validate what clients send.
 *
 * Covered (draft 2020-12 meanings): type (a name or an array of names;
 * "integer" accepts 1.0), nullable (OpenAPI), enum, const (numbers compare
 * by value), properties, required, additionalProperties (boolean or
 * schema), minProperties, maxProperties, items (schema or false),
 * prefixItems, minItems, maxItems, uniqueItems, contains, minLength and
 * maxLength (in code points), pattern (PCRE2, unanchored as the spec says),
 * format date, time, date-time, uuid, email, minimum, maximum,
 * exclusiveMinimum, exclusiveMaximum, multipleOf, anyOf, oneOf, allOf, not,
 * $ref to "#" or a JSON pointer into the same document ($defs,
 * definitions), and boolean schemas. Annotations are ignored. Any other
 * keyword is IFL_EUNSUPPORTED: the validator never passes a document by
 * ignoring a constraint.
 *
 * Error messages name the place in the document as a JSON path
 * ("$.items[2].age: 130 is above maximum 120").
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <math.h>
#include <pcre2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "guide/guide.h"

#define MAX_DEPTH 200

struct vctx {
    json_t *root;
    char *err;
    char path[512];
    int depth;
};

static int verr(struct vctx *v, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int verr(struct vctx *v, int status, const char *fmt, ...)
{
    if (v->err) {
        /* path first, then as much of the message as fits */
        size_t n = (size_t)snprintf(v->err, IFL_ERR_LEN, "%.200s: ", v->path[0] ? v->path : "$");
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(v->err + n, IFL_ERR_LEN - n, fmt, ap);
        va_end(ap);
    }
    return status;
}

static const char *const annotations[] = {"title",       "description", "examples",   "default",
                                          "$schema",     "$id",         "$comment",   "$defs",
                                          "definitions", "strict",      "deprecated", "readOnly",
                                          "writeOnly",   "name",        NULL};

static const char *const keywords[] = {"type",
                                       "nullable",
                                       "enum",
                                       "const",
                                       "properties",
                                       "required",
                                       "additionalProperties",
                                       "minProperties",
                                       "maxProperties",
                                       "items",
                                       "prefixItems",
                                       "minItems",
                                       "maxItems",
                                       "uniqueItems",
                                       "contains",
                                       "minLength",
                                       "maxLength",
                                       "pattern",
                                       "format",
                                       "minimum",
                                       "maximum",
                                       "exclusiveMinimum",
                                       "exclusiveMaximum",
                                       "multipleOf",
                                       "anyOf",
                                       "oneOf",
                                       "allOf",
                                       "not",
                                       "$ref",
                                       NULL};

static int in_list(const char *const *list, const char *k)
{
    for (int i = 0; list[i]; i++)
        if (!strcmp(list[i], k))
            return 1;
    return 0;
}

/* JSON equality where numbers compare by value (1 == 1.0). */
static int jequal(json_t *a, json_t *b)
{
    if (json_is_number(a) && json_is_number(b))
        return json_number_value(a) == json_number_value(b) &&
               (!json_is_integer(a) || !json_is_integer(b) ||
                json_integer_value(a) == json_integer_value(b));
    if (json_typeof(a) != json_typeof(b))
        return 0;
    if (json_is_array(a)) {
        if (json_array_size(a) != json_array_size(b))
            return 0;
        for (size_t i = 0; i < json_array_size(a); i++)
            if (!jequal(json_array_get(a, i), json_array_get(b, i)))
                return 0;
        return 1;
    }
    if (json_is_object(a)) {
        if (json_object_size(a) != json_object_size(b))
            return 0;
        const char *k;
        json_t *x;
        json_object_foreach(a, k, x)
        {
            json_t *y = json_object_get(b, k);
            if (!y || !jequal(x, y))
                return 0;
        }
        return 1;
    }
    return json_equal(a, b);
}

static int is_integral(json_t *x)
{
    if (json_is_integer(x))
        return 1;
    if (!json_is_real(x))
        return 0;
    double d = json_real_value(x);
    return isfinite(d) && d == floor(d);
}

static int type_matches(const char *t, json_t *x)
{
    if (!strcmp(t, "null"))
        return json_is_null(x);
    if (!strcmp(t, "boolean"))
        return json_is_boolean(x);
    if (!strcmp(t, "object"))
        return json_is_object(x);
    if (!strcmp(t, "array"))
        return json_is_array(x);
    if (!strcmp(t, "string"))
        return json_is_string(x);
    if (!strcmp(t, "number"))
        return json_is_number(x);
    if (!strcmp(t, "integer"))
        return is_integral(x);
    return -1;
}

static const char *type_name(json_t *x)
{
    switch (json_typeof(x)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    default:
        return "null";
    }
}

/* ---------------------------------------------------------------- formats */

static int digits(const char *s, int n)
{
    for (int i = 0; i < n; i++)
        if (s[i] < '0' || s[i] > '9')
            return -1;
    int v = 0;
    for (int i = 0; i < n; i++)
        v = v * 10 + (s[i] - '0');
    return v;
}

/* YYYY-MM-DD, a real calendar day. */
static int is_date(const char *s, size_t n)
{
    if (n != 10 || s[4] != '-' || s[7] != '-')
        return 0;
    int y = digits(s, 4), m = digits(s + 5, 2), d = digits(s + 8, 2);
    if (y < 0 || m < 1 || m > 12 || d < 1)
        return 0;
    static const int mdays[12] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    int leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    return d <= mdays[m - 1] + (m == 2 && leap);
}

/* HH:MM:SS[.frac](Z|+HH:MM|-HH:MM) (RFC 3339 full-time; second 60 allowed). */
static int is_time(const char *s, size_t n)
{
    if (n < 9 || s[2] != ':' || s[5] != ':')
        return 0;
    int h = digits(s, 2), mi = digits(s + 3, 2), se = digits(s + 6, 2);
    if (h < 0 || h > 23 || mi < 0 || mi > 59 || se < 0 || se > 60)
        return 0;
    size_t p = 8;
    if (p < n && s[p] == '.') {
        size_t q = ++p;
        while (p < n && s[p] >= '0' && s[p] <= '9')
            p++;
        if (p == q)
            return 0;
    }
    if (p < n && (s[p] == 'Z' || s[p] == 'z'))
        return p + 1 == n;
    if (p + 6 != n || (s[p] != '+' && s[p] != '-') || s[p + 3] != ':')
        return 0;
    int oh = digits(s + p + 1, 2), om = digits(s + p + 4, 2);
    return oh >= 0 && oh <= 23 && om >= 0 && om <= 59;
}

static int is_hex(int c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

static int is_uuid(const char *s, size_t n)
{
    if (n != 36)
        return 0;
    for (size_t i = 0; i < n; i++) {
        int dash = i == 8 || i == 13 || i == 18 || i == 23;
        if (dash ? s[i] != '-' : !is_hex((unsigned char)s[i]))
            return 0;
    }
    return 1;
}

static int is_alnum(int c)
{
    return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/* local@domain: a dot-atom local part of at most 64 bytes over letters,
 * digits and _%+- (dots not at the ends, never two in a row); a domain of
 * at least two labels of letters, digits and inner hyphens (1..63 bytes
 * each), whose last is not all digits. */
static int is_email(const char *s, size_t n)
{
    const char *at = memchr(s, '@', n);
    if (!at || memchr(at + 1, '@', n - (size_t)(at - s) - 1))
        return 0;
    size_t nl = (size_t)(at - s), nd = n - nl - 1;
    if (nl < 1 || nl > 64 || s[0] == '.' || s[nl - 1] == '.')
        return 0;
    for (size_t i = 0; i < nl; i++) {
        int c = (unsigned char)s[i];
        if (c == '.' ? s[i + 1] == '.' : !(is_alnum(c) || strchr("_%+-", c)))
            return 0;
    }
    const char *d = at + 1;
    if (nd < 3 || nd > 253)
        return 0;
    int labels = 0, tld_alpha = 0;
    for (size_t i = 0; i < nd;) {
        size_t j = i;
        int alpha = 0;
        while (j < nd && d[j] != '.') {
            if (!is_alnum((unsigned char)d[j]) && d[j] != '-')
                return 0;
            alpha |= !(d[j] >= '0' && d[j] <= '9');
            j++;
        }
        if (j == i || j - i > 63 || d[i] == '-' || d[j - 1] == '-')
            return 0;
        labels++;
        tld_alpha = alpha;
        if (j == nd)
            break;
        i = j + 1;
        if (i == nd)
            return 0; /* trailing dot */
    }
    return labels >= 2 && tld_alpha;
}

/* Code points of a UTF-8 string (jansson's strings are valid UTF-8). */
static size_t n_chars(const char *s, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += ((unsigned char)s[i] & 0xC0) != 0x80;
    return k;
}

/* ---------------------------------------------------------------- schema */

static int check(struct vctx *v, json_t *schema, json_t *x);

/* Appends a step to the path for the duration of a call. */
static int check_at(struct vctx *v, json_t *schema, json_t *x, const char *key, size_t index)
{
    size_t len = strlen(v->path);
    if (!len)
        len = (size_t)snprintf(v->path, sizeof v->path, "$");
    if (len < sizeof v->path - 1) {
        if (key)
            snprintf(v->path + len, sizeof v->path - len, ".%s", key);
        else
            snprintf(v->path + len, sizeof v->path - len, "[%zu]", index);
    }
    int rc = check(v, schema, x);
    v->path[len] = 0;
    return rc;
}

/* Validation without an error message (for anyOf/oneOf/not/contains). */
static int quiet(struct vctx *v, json_t *schema, json_t *x)
{
    char *e = v->err;
    char saved[sizeof v->path];
    memcpy(saved, v->path, sizeof saved);
    v->err = NULL;
    int rc = check(v, schema, x);
    v->err = e;
    memcpy(v->path, saved, sizeof saved);
    return rc;
}

static json_t *resolve(struct vctx *v, const char *ref)
{
    if (ref[0] != '#')
        return NULL;
    json_t *cur = v->root;
    const char *p = ref + 1;
    if (!*p)
        return cur;
    if (*p != '/')
        return NULL;
    while (*p == '/' && cur) {
        p++;
        char tok[256];
        size_t k = 0;
        while (*p && *p != '/' && k < sizeof tok - 1) {
            if (p[0] == '~' && (p[1] == '0' || p[1] == '1')) {
                tok[k++] = p[1] == '0' ? '~' : '/';
                p += 2;
            } else {
                tok[k++] = *p++;
            }
        }
        tok[k] = 0;
        if (json_is_object(cur)) {
            cur = json_object_get(cur, tok);
        } else if (json_is_array(cur)) {
            char *end;
            unsigned long i = strtoul(tok, &end, 10);
            cur = *end || !k ? NULL : json_array_get(cur, i);
        } else {
            cur = NULL;
        }
    }
    return *p ? NULL : cur;
}

static int get_count(struct vctx *v, json_t *s, const char *key, int64_t *out)
{
    json_t *j = json_object_get(s, key);
    if (!j)
        return 0;
    if (!is_integral(j) || json_number_value(j) < 0)
        return verr(v, IFL_EFORMAT, "schema: '%s' must be a non-negative integer", key);
    *out = (int64_t)json_number_value(j);
    return 1;
}

static int get_num(struct vctx *v, json_t *s, const char *key, double *out)
{
    json_t *j = json_object_get(s, key);
    if (!j)
        return 0;
    if (!json_is_number(j))
        return verr(v, IFL_EFORMAT, "schema: '%s' must be a number", key);
    *out = json_number_value(j);
    return 1;
}

static int check_string(struct vctx *v, json_t *s, json_t *x)
{
    const char *str = json_string_value(x);
    size_t n = json_string_length(x), nc = n_chars(str, n);
    int64_t lim;
    int g;
    if ((g = get_count(v, s, "minLength", &lim)) < 0)
        return g;
    if (g && (int64_t)nc < lim)
        return verr(v, IFL_EINVAL, "string of %zu characters is shorter than minLength %lld", nc,
                    (long long)lim);
    if ((g = get_count(v, s, "maxLength", &lim)) < 0)
        return g;
    if (g && (int64_t)nc > lim)
        return verr(v, IFL_EINVAL, "string of %zu characters is longer than maxLength %lld", nc,
                    (long long)lim);
    json_t *fmt = json_object_get(s, "format");
    if (fmt) {
        const char *f = json_string_value(fmt);
        int ok;
        if (!f)
            return verr(v, IFL_EFORMAT, "schema: 'format' must be a string");
        if (!strcmp(f, "date"))
            ok = is_date(str, n);
        else if (!strcmp(f, "time"))
            ok = is_time(str, n);
        else if (!strcmp(f, "date-time"))
            ok = n > 11 && (str[10] == 'T' || str[10] == 't') && is_date(str, 10) &&
                 is_time(str + 11, n - 11);
        else if (!strcmp(f, "uuid"))
            ok = is_uuid(str, n);
        else if (!strcmp(f, "email"))
            ok = is_email(str, n);
        else
            return verr(v, IFL_EUNSUPPORTED, "schema: format '%s' is not supported", f);
        if (!ok)
            return verr(v, IFL_EINVAL, "\"%.60s\" is not a valid %s", str, f);
    }
    json_t *pat = json_object_get(s, "pattern");
    if (pat) {
        if (!json_is_string(pat))
            return verr(v, IFL_EFORMAT, "schema: 'pattern' must be a string");
        int ec;
        PCRE2_SIZE eo;
        pcre2_code *re = pcre2_compile((PCRE2_SPTR)json_string_value(pat), PCRE2_ZERO_TERMINATED,
                                       PCRE2_UTF, &ec, &eo, NULL);
        if (!re)
            return verr(v, IFL_EFORMAT, "schema: 'pattern' does not compile (at %zu)", (size_t)eo);
        pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
        int rc = md ? pcre2_match(re, (PCRE2_SPTR)str, n, 0, 0, md, NULL) : -1;
        pcre2_match_data_free(md);
        pcre2_code_free(re);
        if (rc < 0)
            return verr(v, IFL_EINVAL, "\"%.60s\" does not match pattern '%.60s'", str,
                        json_string_value(pat));
    }
    return 0;
}

static int check_number(struct vctx *v, json_t *s, json_t *x)
{
    double d = json_number_value(x), b = 0;
    int g;
    if ((g = get_num(v, s, "minimum", &b)) < 0)
        return g;
    if (g && d < b)
        return verr(v, IFL_EINVAL, "%.17g is below minimum %.17g", d, b);
    if ((g = get_num(v, s, "maximum", &b)) < 0)
        return g;
    if (g && d > b)
        return verr(v, IFL_EINVAL, "%.17g is above maximum %.17g", d, b);
    if ((g = get_num(v, s, "exclusiveMinimum", &b)) < 0)
        return g;
    if (g && d <= b)
        return verr(v, IFL_EINVAL, "%.17g is not above exclusiveMinimum %.17g", d, b);
    if ((g = get_num(v, s, "exclusiveMaximum", &b)) < 0)
        return g;
    if (g && d >= b)
        return verr(v, IFL_EINVAL, "%.17g is not below exclusiveMaximum %.17g", d, b);
    if ((g = get_num(v, s, "multipleOf", &b)) < 0)
        return g;
    if (g) {
        if (!(b > 0))
            return verr(v, IFL_EFORMAT, "schema: 'multipleOf' must be above 0");
        double q = d / b;
        if (fabs(q - nearbyint(q)) > 1e-9 * fmax(1, fabs(q)))
            return verr(v, IFL_EINVAL, "%.17g is not a multiple of %.17g", d, b);
    }
    return 0;
}

static int check_object(struct vctx *v, json_t *s, json_t *x)
{
    json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required");
    json_t *addl = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props))
        return verr(v, IFL_EFORMAT, "schema: 'properties' must be an object");
    if (req) {
        if (!json_is_array(req))
            return verr(v, IFL_EFORMAT, "schema: 'required' must be an array");
        for (size_t i = 0; i < json_array_size(req); i++) {
            const char *k = json_string_value(json_array_get(req, i));
            if (!k)
                return verr(v, IFL_EFORMAT, "schema: 'required' must list strings");
            if (!json_object_get(x, k))
                return verr(v, IFL_EINVAL, "required property '%s' is missing", k);
        }
    }
    int64_t lim;
    int g;
    if ((g = get_count(v, s, "minProperties", &lim)) < 0)
        return g;
    if (g && (int64_t)json_object_size(x) < lim)
        return verr(v, IFL_EINVAL, "%zu properties, fewer than minProperties %lld",
                    json_object_size(x), (long long)lim);
    if ((g = get_count(v, s, "maxProperties", &lim)) < 0)
        return g;
    if (g && (int64_t)json_object_size(x) > lim)
        return verr(v, IFL_EINVAL, "%zu properties, more than maxProperties %lld",
                    json_object_size(x), (long long)lim);
    const char *k;
    json_t *val;
    json_object_foreach(x, k, val)
    {
        json_t *ps = props ? json_object_get(props, k) : NULL;
        if (!ps) {
            if (addl == json_false())
                return verr(v, IFL_EINVAL, "property '%s' is not allowed", k);
            ps = addl;
        }
        if (ps) {
            int rc = check_at(v, ps, val, k, 0);
            if (rc)
                return rc;
        }
    }
    return 0;
}

static int check_array(struct vctx *v, json_t *s, json_t *x)
{
    size_t n = json_array_size(x);
    int64_t lim;
    int g;
    if ((g = get_count(v, s, "minItems", &lim)) < 0)
        return g;
    if (g && (int64_t)n < lim)
        return verr(v, IFL_EINVAL, "%zu items, fewer than minItems %lld", n, (long long)lim);
    if ((g = get_count(v, s, "maxItems", &lim)) < 0)
        return g;
    if (g && (int64_t)n > lim)
        return verr(v, IFL_EINVAL, "%zu items, more than maxItems %lld", n, (long long)lim);
    json_t *prefix = json_object_get(s, "prefixItems"), *items = json_object_get(s, "items");
    if (prefix && !json_is_array(prefix))
        return verr(v, IFL_EFORMAT, "schema: 'prefixItems' must be an array");
    size_t np = prefix ? json_array_size(prefix) : 0;
    for (size_t i = 0; i < n; i++) {
        json_t *is = i < np ? json_array_get(prefix, i) : items;
        if (i >= np && items == json_false())
            return verr(v, IFL_EINVAL, "%zu items, but items is false after %zu prefixItems", n,
                        np);
        if (is) {
            int rc = check_at(v, is, json_array_get(x, i), NULL, i);
            if (rc)
                return rc;
        }
    }
    if (json_object_get(s, "uniqueItems") == json_true())
        for (size_t i = 0; i < n; i++)
            for (size_t j = i + 1; j < n; j++)
                if (jequal(json_array_get(x, i), json_array_get(x, j)))
                    return verr(v, IFL_EINVAL, "items %zu and %zu are equal (uniqueItems)", i, j);
    json_t *contains = json_object_get(s, "contains");
    if (contains) {
        size_t i = 0;
        for (; i < n; i++) {
            int rc = quiet(v, contains, json_array_get(x, i));
            if (rc == 0)
                break;
            if (rc != IFL_EINVAL)
                return verr(v, rc, "schema: 'contains' is not a usable schema");
        }
        if (i == n)
            return verr(v, IFL_EINVAL, "no item matches 'contains'");
    }
    return 0;
}

/* anyOf / oneOf / allOf / not */
static int check_combinators(struct vctx *v, json_t *s, json_t *x)
{
    static const char *const names[] = {"allOf", "anyOf", "oneOf"};
    for (int w = 0; w < 3; w++) {
        json_t *list = json_object_get(s, names[w]);
        if (!list)
            continue;
        if (!json_is_array(list) || json_array_size(list) == 0)
            return verr(v, IFL_EFORMAT, "schema: '%s' must be a non-empty array", names[w]);
        size_t matched = 0;
        for (size_t i = 0; i < json_array_size(list); i++) {
            json_t *sub = json_array_get(list, i);
            int rc = w == 0 ? check(v, sub, x) : quiet(v, sub, x);
            if (w == 0 && rc)
                return rc;
            if (rc && rc != IFL_EINVAL)
                return w ? check(v, sub, x) : rc; /* a schema error: report it */
            matched += rc == 0;
        }
        if (w == 1 && matched == 0)
            return verr(v, IFL_EINVAL, "%s matches none of the %zu anyOf schemas", type_name(x),
                        json_array_size(list));
        if (w == 2 && matched != 1)
            return verr(v, IFL_EINVAL, "%s matches %zu of the oneOf schemas (exactly 1 wanted)",
                        type_name(x), matched);
    }
    json_t *nt = json_object_get(s, "not");
    if (nt) {
        int rc = quiet(v, nt, x);
        if (rc == 0)
            return verr(v, IFL_EINVAL, "%s matches the 'not' schema", type_name(x));
        if (rc != IFL_EINVAL)
            return check(v, nt, x);
    }
    return 0;
}

static int check(struct vctx *v, json_t *s, json_t *x)
{
    if (s == json_true())
        return 0;
    if (s == json_false())
        return verr(v, IFL_EINVAL, "no value is allowed here (schema false)");
    if (!json_is_object(s))
        return verr(v, IFL_EFORMAT, "schema: a schema must be an object or a boolean");
    if (++v->depth > MAX_DEPTH) {
        v->depth--;
        return verr(v, IFL_EINVAL, "schema nesting deeper than %d (a $ref loop?)", MAX_DEPTH);
    }
    int rc = 0;
    const char *k;
    json_t *val;
    json_object_foreach(s, k, val)
    {
        if (!in_list(keywords, k) && !in_list(annotations, k)) {
            rc = verr(v, IFL_EUNSUPPORTED, "schema: keyword '%s' is not supported", k);
            goto out;
        }
    }
    /* OpenAPI: null is allowed whatever else the schema says, a $ref
     * beside it included (the grammar compiles nullable so too) */
    if (json_is_null(x) && json_object_get(s, "nullable") == json_true())
        goto out;
    json_t *ref = json_object_get(s, "$ref");
    if (ref) {
        json_t *target = json_is_string(ref) ? resolve(v, json_string_value(ref)) : NULL;
        if (!target) {
            rc = verr(v, IFL_EFORMAT, "schema: $ref '%s' does not resolve",
                      json_is_string(ref) ? json_string_value(ref) : "?");
            goto out;
        }
        if ((rc = check(v, target, x)))
            goto out;
    }
    json_t *type = json_object_get(s, "type");
    if (type) {
        int ok = 0;
        if (json_is_string(type)) {
            ok = type_matches(json_string_value(type), x);
        } else if (json_is_array(type)) {
            for (size_t i = 0; i < json_array_size(type) && ok == 0; i++) {
                const char *t = json_string_value(json_array_get(type, i));
                ok = t ? type_matches(t, x) : -1;
            }
        } else {
            ok = -1;
        }
        if (ok < 0) {
            rc = verr(v, IFL_EFORMAT, "schema: 'type' names an unknown type");
            goto out;
        }
        if (!ok) {
            char want[128];
            if (json_is_string(type))
                snprintf(want, sizeof want, "%s", json_string_value(type));
            else
                snprintf(want, sizeof want, "one of %zu types", json_array_size(type));
            rc = verr(v, IFL_EINVAL, "%s where the schema wants %s", type_name(x), want);
            goto out;
        }
    }
    json_t *en = json_object_get(s, "enum");
    if (en) {
        if (!json_is_array(en)) {
            rc = verr(v, IFL_EFORMAT, "schema: 'enum' must be an array");
            goto out;
        }
        size_t i = 0;
        while (i < json_array_size(en) && !jequal(json_array_get(en, i), x))
            i++;
        if (i == json_array_size(en)) {
            rc = verr(v, IFL_EINVAL, "%s not in the enum of %zu values", type_name(x),
                      json_array_size(en));
            goto out;
        }
    }
    json_t *cn = json_object_get(s, "const");
    if (cn && !jequal(cn, x)) {
        rc = verr(v, IFL_EINVAL, "%s differs from the const value", type_name(x));
        goto out;
    }
    if (json_is_string(x))
        rc = check_string(v, s, x);
    else if (json_is_number(x))
        rc = check_number(v, s, x);
    else if (json_is_object(x))
        rc = check_object(v, s, x);
    else if (json_is_array(x))
        rc = check_array(v, s, x);
    if (!rc)
        rc = check_combinators(v, s, x);
out:
    v->depth--;
    return rc;
}

int ifl_guide_validate_json(const char *schema, size_t schema_len, const char *doc, size_t doc_len,
                            char *err)
{
    json_error_t je;
    json_t *s = json_loadb(schema, schema_len, JSON_DECODE_ANY, &je);
    if (!s)
        return ifl_err(err, IFL_EFORMAT, "schema: not JSON: %d:%d: %s", je.line, je.column,
                       je.text);
    json_t *x = json_loadb(doc, doc_len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (!x) {
        json_decref(s);
        return ifl_err(err, IFL_EINVAL, "$: not JSON: %d:%d: %s", je.line, je.column, je.text);
    }
    struct vctx v = {.root = s, .err = err};
    int rc = check(&v, s, x);
    json_decref(x);
    json_decref(s);
    return rc;
}
