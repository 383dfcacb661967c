/*
 * JSON helpers over jansson for the request parsers: typed field readers
 * with ranges (ifl_json_get_*), the field-spec tables both protocols read
 * their scalar parameters with (ifl_json_read_fields), a schema field's
 * text, and any bytes as a JSON string (ifl_json_text). Readers never keep pointers past the
 * request: a string read is a view into the parsed body, which the route owns.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/utf8.h"
#include "server/internal.h"

int ifl_json_get_num(json_t *o, const char *key, double lo, double hi, double *out, char *err)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    double d = json_is_number(v) ? json_number_value(v) : NAN;
    if (!json_is_number(v) || !(d >= lo && d <= hi)) {
        ifl_err(err, IFL_EINVAL, "%s: must be a number from %g to %g", key, lo, hi);
        return -1;
    }
    *out = d;
    return 1;
}

int ifl_json_get_int(json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *out, char *err)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    /* 5.0 is accepted as 5 (JavaScript clients cannot tell them apart) */
    int64_t x = 0;
    int ok = 0;
    if (json_is_integer(v)) {
        x = json_integer_value(v);
        ok = 1;
    } else if (json_is_real(v)) {
        double d = json_real_value(v);
        ok = d == floor(d) && fabs(d) < 9e15;
        x = (int64_t)d;
    }
    if (!ok || x < lo || x > hi) {
        ifl_err(err, IFL_EINVAL, "%s: must be an integer from %lld to %lld", key, (long long)lo,
                (long long)hi);
        return -1;
    }
    *out = x;
    return 1;
}

int ifl_json_get_bool(json_t *o, const char *key, int *out, char *err)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_boolean(v)) {
        ifl_err(err, IFL_EINVAL, "%s: must be true or false", key);
        return -1;
    }
    *out = json_is_true(v);
    return 1;
}

int ifl_json_get_str(json_t *o, const char *key, const char **out, char *err)
{
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v))
        return 0;
    if (!json_is_string(v)) {
        ifl_err(err, IFL_EINVAL, "%s: must be a string", key);
        return -1;
    }
    *out = json_string_value(v);
    return 1;
}

char *ifl_json_schema_text(json_t *v, const char *param, char *err)
{
    if (json_is_string(v)) {
        /* a schema sent as a string: it must hold a JSON object */
        json_error_t je;
        json_t *o = json_loadb(json_string_value(v), json_string_length(v), 0, &je);
        int obj = json_is_object(o);
        json_decref(o);
        if (!obj) {
            ifl_err(err, IFL_EINVAL, "%s: the schema is not a JSON object%s%s", param,
                    o ? "" : ": ", o ? "" : je.text);
            return NULL;
        }
        return strndup(json_string_value(v), json_string_length(v));
    }
    if (!json_is_object(v) && !json_is_boolean(v)) {
        ifl_err(err, IFL_EINVAL, "%s: must be a JSON Schema (an object)", param);
        return NULL;
    }
    char *t = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
    if (!t)
        ifl_err(err, IFL_ENOMEM, "out of memory");
    return t;
}

/* ---- field-spec tables ---- */

static int read_field(json_t *o, const struct ifl_json_field *f, char *base, char *err)
{
    void *to = base + f->at;
    int r;
    switch (f->type) {
    case IFL_JSON_NUM: {
        double d = 0;
        r = ifl_json_get_num(o, f->name, f->lo, f->hi, &d, err);
        if (r > 0 && (((f->open & IFL_JSON_ABOVE_LO) && d <= f->lo) ||
                      ((f->open & IFL_JSON_BELOW_HI) && d >= f->hi)))
            r = ifl_err(err, -1, "%s: must be a number above %g and below %g", f->name, f->lo,
                        f->hi);
        if (r > 0)
            memcpy(to, &d, sizeof d);
        return r;
    }
    case IFL_JSON_I64:
    case IFL_JSON_INT: {
        int64_t v = 0;
        r = ifl_json_get_int(o, f->name, f->ilo, f->ihi, &v, err);
        if (r > 0 && f->type == IFL_JSON_I64)
            memcpy(to, &v, sizeof v);
        if (r > 0 && f->type == IFL_JSON_INT) {
            int x = (int)v; /* within the range, which an INT field keeps within int */
            memcpy(to, &x, sizeof x);
        }
        return r;
    }
    case IFL_JSON_BOOL: {
        int b = 0;
        r = ifl_json_get_bool(o, f->name, &b, err);
        if (r > 0)
            memcpy(to, &b, sizeof b);
        return r;
    }
    default: {
        const char *s = NULL;
        r = ifl_json_get_str(o, f->name, &s, err);
        if (r > 0)
            memcpy(to, &s, sizeof s);
        return r;
    }
    }
}

static void set_default(const struct ifl_json_field *f, char *base)
{
    void *to = base + f->at;
    switch (f->type) {
    case IFL_JSON_NUM:
        memcpy(to, &f->def, sizeof f->def);
        break;
    case IFL_JSON_I64: {
        int64_t v = (int64_t)f->def;
        memcpy(to, &v, sizeof v);
        break;
    }
    case IFL_JSON_INT:
    case IFL_JSON_BOOL: {
        int v = (int)f->def;
        memcpy(to, &v, sizeof v);
        break;
    }
    default: {
        const char *s = NULL;
        memcpy(to, &s, sizeof s);
        break;
    }
    }
}

int ifl_json_read_fields(json_t *o, const struct ifl_json_field *f, int n, void *base,
                         uint64_t *seen, int *bad, char *err)
{
    IFL_ASSERT(n <= 64);
    *seen = 0;
    for (int i = 0; i < n; i++)
        set_default(&f[i], base);
    for (int i = 0; i < n; i++) {
        int r = read_field(o, &f[i], base, err);
        if (r < 0) {
            if (f[i].msg)
                ifl_err(err, IFL_EINVAL, "%s", f[i].msg);
            *bad = i;
            return IFL_EINVAL;
        }
        if (r > 0)
            *seen |= (uint64_t)1 << i;
    }
    return 0;
}

/* A JSON string of n bytes of text, each invalid UTF-8 byte replaced by
 * U+FFFD (token pieces may be parts of characters); NULL without memory. */
json_t *ifl_json_text(const char *s, size_t n)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        size_t l = ifl_utf8_char_len(u + i, n - i);
        if (!l)
            break;
        i += l;
    }
    if (i == n)
        return json_stringn(s, n);
    struct ifl_buf b = {0};
    for (i = 0; i < n;) {
        size_t l = ifl_utf8_char_len(u + i, n - i);
        if (l) {
            ifl_buf_add(&b, s + i, l);
            i += l;
        } else {
            ifl_buf_add(&b, "\xEF\xBF\xBD", 3); /* U+FFFD */
            i++;
        }
    }
    json_t *j = b.oom ? NULL : json_stringn(b.p ? b.p : "", b.len);
    ifl_buf_free(&b);
    return j;
}
