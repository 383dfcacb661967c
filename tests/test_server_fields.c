/*
 * The field-spec reader both request parsers use (src/server/json.c,
 * ifl_json_read_fields): every target takes its default before anything is
 * read, a field that is absent or null keeps it and is not marked seen,
 * ranges hold at both ends (open ends refuse the bound itself), integers
 * written as 5.0 count, the first wrong field is named with the reader's
 * sentence or the table's own, and targets of different types land where
 * the table says without touching their neighbours.
 */
#include <stdint.h>
#include <string.h>

#include "core/err.h"
#include "server/internal.h"
#include "t.h"

struct target {
    double num;
    int64_t big;
    int small;
    int flag;
    const char *text;
    int after; /* no field writes here */
};

#define T struct target
enum { F_NUM, F_BIG, F_SMALL, F_FLAG, F_TEXT, F_OPEN, F_COUNT };
static const struct ifl_json_field FIELDS[F_COUNT] = {
    [F_NUM] = IFL_FIELD_NUM(T, "num", -2, 2, num, 1.5),
    [F_BIG] = IFL_FIELD_I64(T, "big", INT64_MIN, INT64_MAX, big, -1),
    [F_SMALL] = IFL_FIELD_INT(T, "small", 1, 128, small, 7),
    [F_FLAG] = IFL_FIELD_BOOL(T, "flag", flag, 1),
    [F_TEXT] = IFL_FIELD_STR(T, "text", text),
    [F_OPEN] = {.name = "open",
                .type = IFL_JSON_NUM,
                .lo = 0,
                .hi = 1,
                .open = IFL_JSON_ABOVE_LO | IFL_JSON_BELOW_HI,
                .at = offsetof(T, num),
                .def = 1.5,
                .msg = "`open` must be > 0.0 and < 1.0"},
};
#undef T

/* Reads body with FIELDS into *t (filled with 0x55 first). */
static int read_body(const char *body, struct target *t, uint64_t *seen, int *bad, char *err)
{
    json_error_t je;
    json_t *o = json_loads(body, 0, &je);
    IFL_ASSERT(o);
    memset(t, 0x55, sizeof *t);
    *bad = -1;
    err[0] = 0;
    int rc = ifl_json_read_fields(o, FIELDS, F_COUNT, t, seen, bad, err);
    /* a string target is a view into the body: compare before it goes */
    static char text[64];
    text[0] = 0;
    if (!rc && t->text)
        snprintf(text, sizeof text, "%s", t->text);
    json_decref(o);
    if (!rc && t->text)
        t->text = text;
    return rc;
}

static void test_defaults(void)
{
    struct target t;
    uint64_t seen = 99;
    int bad;
    char err[IFL_ERR_LEN];
    CHECK_EQ(read_body("{\"num\": null, \"other\": 3}", &t, &seen, &bad, err), 0);
    CHECK_EQ(seen, 0u);
    CHECK(t.num == 1.5);
    CHECK_EQ(t.big, -1);
    CHECK_EQ(t.small, 7);
    CHECK_EQ(t.flag, 1);
    CHECK(t.text == NULL);
    CHECK_EQ(t.after, 0x55555555);
}

static void test_values(void)
{
    struct target t;
    uint64_t seen;
    int bad;
    char err[IFL_ERR_LEN];
    CHECK_EQ(read_body("{\"num\": -2, \"big\": -9223372036854775808, \"small\": 128.0, "
                       "\"flag\": false, \"text\": \"hi\"}",
                       &t, &seen, &bad, err),
             0);
    CHECK_EQ(seen,
             (1u << F_NUM) | (1u << F_BIG) | (1u << F_SMALL) | (1u << F_FLAG) | (1u << F_TEXT));
    CHECK(t.num == -2);
    CHECK_EQ(t.big, INT64_MIN);
    CHECK_EQ(t.small, 128);
    CHECK_EQ(t.flag, 0);
    CHECK_STR(t.text, "hi");
    CHECK_EQ(t.after, 0x55555555);
    /* a later field with the same target wins */
    CHECK_EQ(read_body("{\"num\": 2, \"open\": 0.25}", &t, &seen, &bad, err), 0);
    CHECK(t.num == 0.25);
    CHECK_EQ(seen, (1u << F_NUM) | (1u << F_OPEN));
}

static void test_errors(void)
{
    struct target t;
    uint64_t seen;
    int bad;
    char err[IFL_ERR_LEN];
    CHECK_EQ(read_body("{\"num\": 2.01}", &t, &seen, &bad, err), IFL_EINVAL);
    CHECK_EQ(bad, F_NUM);
    CHECK_STR(err, "num: must be a number from -2 to 2");
    CHECK_EQ(read_body("{\"num\": 1, \"small\": 0}", &t, &seen, &bad, err), IFL_EINVAL);
    CHECK_EQ(bad, F_SMALL);
    CHECK_STR(err, "small: must be an integer from 1 to 128");
    CHECK_EQ(read_body("{\"small\": 1.5}", &t, &seen, &bad, err), IFL_EINVAL);
    CHECK_EQ(bad, F_SMALL);
    CHECK_EQ(read_body("{\"flag\": 1}", &t, &seen, &bad, err), IFL_EINVAL);
    CHECK_STR(err, "flag: must be true or false");
    CHECK_EQ(read_body("{\"text\": 1}", &t, &seen, &bad, err), IFL_EINVAL);
    CHECK_STR(err, "text: must be a string");
    /* open ends: the bounds themselves are refused, with the table's sentence */
    CHECK_EQ(read_body("{\"open\": 0}", &t, &seen, &bad, err), IFL_EINVAL);
    CHECK_EQ(bad, F_OPEN);
    CHECK_STR(err, "`open` must be > 0.0 and < 1.0");
    CHECK_EQ(read_body("{\"open\": 1}", &t, &seen, &bad, err), IFL_EINVAL);
    CHECK_EQ(read_body("{\"open\": \"x\"}", &t, &seen, &bad, err), IFL_EINVAL);
    CHECK_STR(err, "`open` must be > 0.0 and < 1.0");
    CHECK_EQ(read_body("{\"open\": 1e-9}", &t, &seen, &bad, err), 0);
    /* the first wrong field in table order is the one named */
    CHECK_EQ(read_body("{\"open\": 5, \"big\": \"x\"}", &t, &seen, &bad, err), IFL_EINVAL);
    CHECK_EQ(bad, F_BIG);
}

int main(void)
{
    T_RUN(test_defaults);
    T_RUN(test_values);
    T_RUN(test_errors);
    return t_done();
}
