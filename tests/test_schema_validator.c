/*
 * The JSON Schema validator (src/guide/validate.c) on its own: for each
 * keyword documents that must pass and documents that must fail, the
 * failure naming the path; malformed and unsupported schemas; and the
 * formats (calendar dates, times, uuids, emails) at their edges.
 */
#include "core/err.h"
#include "guide/guide.h"
#include "t.h"

static int vrc(const char *schema, const char *doc, char *err)
{
    return ifl_guide_validate_json(schema, strlen(schema), doc, strlen(doc), err);
}

#define OK(schema, doc)                                                                            \
    do {                                                                                           \
        char e_[IFL_ERR_LEN] = "";                                                                 \
        int rc_ = vrc(schema, doc, e_);                                                            \
        CHECK_MSG(rc_ == 0, "want valid: %s against %s: %s", doc, schema, e_);                     \
    } while (0)

/* invalid, with a message containing `part` */
#define BAD(schema, doc, part)                                                                     \
    do {                                                                                           \
        char e_[IFL_ERR_LEN] = "";                                                                 \
        int rc_ = vrc(schema, doc, e_);                                                            \
        CHECK_MSG(rc_ == IFL_EINVAL && strstr(e_, part),                                           \
                  "want invalid (%s): %s against %s: "                                             \
                  "rc %d '%s'",                                                                    \
                  part, doc, schema, rc_, e_);                                                     \
    } while (0)

static void test_types(void)
{
    OK("{\"type\":\"string\"}", "\"x\"");
    BAD("{\"type\":\"string\"}", "1", "$: a number where the schema wants string");
    OK("{\"type\":\"integer\"}", "3");
    OK("{\"type\":\"integer\"}", "3.0");
    BAD("{\"type\":\"integer\"}", "3.5", "wants integer");
    OK("{\"type\":\"number\"}", "-2e5");
    OK("{\"type\":[\"string\",\"null\"]}", "null");
    BAD("{\"type\":[\"string\",\"null\"]}", "true", "one of 2 types");
    OK("{\"type\":\"boolean\"}", "false");
    OK("{\"type\":\"string\",\"nullable\":true}", "null");
    BAD("{\"type\":\"string\",\"nullable\":false}", "null", "wants string");
    OK("true", "{\"any\":[1,2]}");
    BAD("false", "1", "schema false");
    BAD("{\"type\":\"object\"}", "{\"a\":", "not JSON");
}

static void test_objects(void)
{
    const char *s = "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},"
                    "\"age\":{\"type\":\"integer\",\"minimum\":0,\"maximum\":120}},"
                    "\"required\":[\"name\"]}";
    OK(s, "{\"name\":\"a\",\"age\":7}");
    OK(s, "{\"name\":\"a\",\"extra\":[1]}");
    BAD(s, "{\"age\":7}", "required property 'name' is missing");
    BAD(s, "{\"name\":\"a\",\"age\":130}", "$.age: 130 is above maximum 120");
    BAD(s, "{\"name\":\"a\",\"age\":-1}", "$.age: -1 is below minimum 0");
    BAD(s, "{\"name\":5}", "$.name: a number");
    const char *closed = "{\"type\":\"object\",\"properties\":{\"a\":{}},"
                         "\"additionalProperties\":false}";
    OK(closed, "{\"a\":1}");
    BAD(closed, "{\"a\":1,\"b\":2}", "property 'b' is not allowed");
    const char *map = "{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"},"
                      "\"minProperties\":1,\"maxProperties\":2}";
    OK(map, "{\"x\":1,\"y\":2}");
    BAD(map, "{\"x\":\"1\"}", "$.x: a string");
    BAD(map, "{}", "fewer than minProperties 1");
    BAD(map, "{\"a\":1,\"b\":2,\"c\":3}", "more than maxProperties 2");
}

static void test_arrays(void)
{
    const char *s = "{\"type\":\"array\",\"items\":{\"type\":\"object\",\"properties\":{\"id\":"
                    "{\"type\":\"integer\"}},\"required\":[\"id\"]},\"minItems\":1,\"maxItems\":3}";
    OK(s, "[{\"id\":1},{\"id\":2}]");
    BAD(s, "[]", "fewer than minItems 1");
    BAD(s, "[{\"id\":1},{\"id\":2},{\"id\":3},{\"id\":4}]", "more than maxItems 3");
    BAD(s, "[{\"id\":1},{\"id\":\"2\"}]", "$[1].id: a string");
    BAD(s, "[{\"id\":1},{}]", "$[1]: required property 'id'");
    const char *tup = "{\"type\":\"array\",\"prefixItems\":[{\"type\":\"string\"},"
                      "{\"type\":\"number\"}],\"items\":false}";
    OK(tup, "[\"a\",1]");
    OK(tup, "[\"a\"]");
    BAD(tup, "[\"a\",1,2]", "items is false");
    BAD(tup, "[1]", "$[0]: a number");
    OK("{\"uniqueItems\":true}", "[1,2,\"1\"]");
    BAD("{\"uniqueItems\":true}", "[1,2,1.0]", "uniqueItems");
    OK("{\"contains\":{\"const\":3}}", "[1,3]");
    BAD("{\"contains\":{\"const\":3}}", "[1,2]", "no item matches 'contains'");
}

static void test_enum_const_combinators(void)
{
    const char *e = "{\"enum\":[\"red\",\"green\",1,null,{\"a\":[1]}]}";
    OK(e, "\"green\"");
    OK(e, "1.0");
    OK(e, "null");
    OK(e, "{\"a\":[1]}");
    BAD(e, "\"blue\"", "not in the enum of 5 values");
    BAD(e, "{\"a\":[2]}", "not in the enum");
    OK("{\"const\":\"x\"}", "\"x\"");
    BAD("{\"const\":\"x\"}", "\"y\"", "differs from the const value");
    const char *any = "{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":2}]}";
    OK(any, "5");
    OK(any, "\"ab\"");
    BAD(any, "\"abc\"", "matches none of the 2 anyOf schemas");
    const char *one = "{\"oneOf\":[{\"type\":\"integer\"},{\"type\":\"number\"}]}";
    OK(one, "1.5");
    BAD(one, "1", "matches 2 of the oneOf schemas");
    const char *all = "{\"allOf\":[{\"type\":\"integer\"},{\"minimum\":3}]}";
    OK(all, "4");
    BAD(all, "2", "below minimum 3");
    BAD("{\"not\":{\"type\":\"null\"}}", "null", "matches the 'not' schema");
}

static void test_refs(void)
{
    const char *s = "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":"
                    "\"integer\"},\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/node\"},{\"type\":"
                    "\"null\"}]}},\"required\":[\"v\",\"next\"]}},\"$ref\":\"#/$defs/node\"}";
    OK(s, "{\"v\":1,\"next\":{\"v\":2,\"next\":null}}");
    BAD(s, "{\"v\":1,\"next\":{\"v\":\"2\",\"next\":null}}", "anyOf");
    const char *d = "{\"definitions\":{\"a~b\":{\"type\":\"string\"}},\"properties\":{\"x\":"
                    "{\"$ref\":\"#/definitions/a~0b\"}}}";
    OK(d, "{\"x\":\"s\"}");
    BAD(d, "{\"x\":1}", "$.x: a number");
    char err[IFL_ERR_LEN] = "";
    CHECK_EQ(vrc("{\"$ref\":\"#/$defs/missing\"}", "1", err), IFL_EFORMAT);
    CHECK(strstr(err, "does not resolve") != NULL);
    /* a loop with no progress is stopped, not followed forever */
    CHECK_EQ(vrc("{\"$defs\":{\"a\":{\"$ref\":\"#/$defs/a\"}},\"$ref\":\"#/$defs/a\"}", "1", err),
             IFL_EINVAL);
    CHECK(strstr(err, "nesting deeper") != NULL);
    /* nullable lets null through beside a $ref too, as the grammar does
     * (found by fuzz_guide_diff: the grammar took null, this rejected it) */
    const char *nr = "{\"$ref\":\"#/$defs/d\",\"nullable\":true,\"$defs\":{\"d\":{\"type\":"
                     "\"object\"}}}";
    OK(nr, "null");
    OK(nr, "{}");
    BAD(nr, "1", "a number where the schema wants object");
}

static void test_strings_and_formats(void)
{
    const char *len = "{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}";
    OK(len, "\"ab\"");
    OK(len, "\"\xc3\xa9t\xc3\xa9\""); /* 3 code points, 5 bytes */
    BAD(len, "\"a\"", "shorter than minLength 2");
    BAD(len, "\"abcd\"", "longer than maxLength 3");
    const char *date = "{\"type\":\"string\",\"format\":\"date\"}";
    OK(date, "\"2024-02-29\"");
    OK(date, "\"2000-02-29\"");
    OK(date, "\"1999-12-31\"");
    BAD(date, "\"1900-02-29\"", "not a valid date");
    BAD(date, "\"2023-02-29\"", "not a valid date");
    BAD(date, "\"2023-04-31\"", "not a valid date");
    BAD(date, "\"2023-13-01\"", "not a valid date");
    BAD(date, "\"2023-1-01\"", "not a valid date");
    const char *tm = "{\"format\":\"time\"}";
    OK(tm, "\"23:59:59Z\"");
    OK(tm, "\"08:30:00.123+05:30\"");
    BAD(tm, "\"24:00:00Z\"", "not a valid time");
    BAD(tm, "\"12:00:00\"", "not a valid time");
    OK("{\"format\":\"date-time\"}", "\"2021-06-01T12:00:00Z\"");
    BAD("{\"format\":\"date-time\"}", "\"2021-06-01 12:00:00Z\"", "date-time");
    const char *uuid = "{\"format\":\"uuid\"}";
    OK(uuid, "\"123e4567-e89b-12d3-a456-426614174000\"");
    BAD(uuid, "\"123e4567-e89b-12d3-a456-42661417400\"", "not a valid uuid");
    BAD(uuid, "\"123e4567xe89b-12d3-a456-426614174000\"", "not a valid uuid");
    const char *em = "{\"format\":\"email\"}";
    OK(em, "\"a.b+c@example.co.uk\"");
    BAD(em, "\"a..b@example.com\"", "not a valid email");
    BAD(em, "\".a@example.com\"", "not a valid email");
    BAD(em, "\"a@localhost\"", "not a valid email");
    BAD(em, "\"a@-x.com\"", "not a valid email");
    BAD(em, "\"a@b@c.com\"", "not a valid email");
    BAD(em, "\"a@x.123\"", "not a valid email");
    OK("{\"pattern\":\"^[a-z]+[0-9]$\"}", "\"abc1\"");
    OK("{\"pattern\":\"[0-9]\"}", "\"a1b\""); /* unanchored */
    BAD("{\"pattern\":\"^[a-z]+$\"}", "\"ab1\"", "does not match pattern");
    /* keywords that only apply to other types are ignored for strings */
    OK("{\"minimum\":5}", "\"x\"");
}

static void test_numbers(void)
{
    OK("{\"exclusiveMinimum\":0,\"exclusiveMaximum\":1}", "0.5");
    BAD("{\"exclusiveMinimum\":0}", "0", "not above exclusiveMinimum 0");
    BAD("{\"exclusiveMaximum\":1}", "1", "not below exclusiveMaximum 1");
    OK("{\"multipleOf\":0.5}", "2.5");
    BAD("{\"multipleOf\":0.5}", "2.25", "not a multiple of 0.5");
}

static void test_schema_errors(void)
{
    char err[IFL_ERR_LEN] = "";
    CHECK_EQ(vrc("{\"type\":", "1", err), IFL_EFORMAT);
    CHECK(strstr(err, "schema: not JSON") != NULL);
    CHECK_EQ(vrc("{\"type\":\"strin\"}", "1", err), IFL_EFORMAT);
    CHECK(strstr(err, "unknown type") != NULL);
    CHECK_EQ(vrc("{\"patternProperties\":{}}", "{}", err), IFL_EUNSUPPORTED);
    CHECK(strstr(err, "'patternProperties' is not supported") != NULL);
    CHECK_EQ(vrc("{\"format\":\"hostname\"}", "\"x\"", err), IFL_EUNSUPPORTED);
    CHECK_EQ(vrc("{\"minLength\":-1}", "\"x\"", err), IFL_EFORMAT);
    CHECK_EQ(vrc("{\"anyOf\":[]}", "1", err), IFL_EFORMAT);
    /* annotations are fine */
    OK("{\"title\":\"t\",\"description\":\"d\",\"examples\":[1],\"default\":2,"
       "\"$schema\":\"x\",\"type\":\"integer\"}",
       "1");
}

/* The schema front end's numeric ranges against the validator: for every
 * value near the bounds the grammar accepts its text exactly when the
 * validator does. */
static int grammar_accepts(struct ifl_guide *g, const char *text)
{
    struct ifl_guide_state st;
    int ok = ifl_guide_state_init(&st, g) == 0 &&
             ifl_guide_accept_bytes(&st, text, strlen(text)) == 0 && ifl_guide_is_accepting(&st);
    ifl_guide_state_deinit(&st);
    return ok;
}

static void test_ranges_agree(void)
{
    static const char *const schemas[] = {
        "{\"type\":\"integer\",\"minimum\":-37,\"maximum\":2000}",
        "{\"type\":\"integer\",\"minimum\":0,\"maximum\":9}",
        "{\"type\":\"integer\",\"minimum\":105,\"maximum\":1290}",
        "{\"type\":\"integer\",\"minimum\":-1999,\"maximum\":-1001}",
        "{\"type\":\"integer\",\"exclusiveMinimum\":-2.5,\"exclusiveMaximum\":30}",
        "{\"type\":\"number\",\"minimum\":-90,\"maximum\":90}",
        "{\"type\":\"number\",\"minimum\":5,\"maximum\":17}",
        "{\"type\":\"number\",\"minimum\":-12,\"maximum\":-3}",
    };
    int checked = 0;
    for (size_t k = 0; k < sizeof schemas / sizeof *schemas; k++) {
        struct ifl_guide *g = NULL;
        char err[IFL_ERR_LEN] = "";
        int rc = ifl_guide_compile_json_schema(&g, schemas[k], strlen(schemas[k]), err);
        CHECK_MSG(rc == 0, "%s: %s", schemas[k], err);
        if (rc)
            continue;
        for (int v = -2100; v <= 2100; v++) {
            for (int f = 0; f < 3; f++) {
                char t[32];
                if (f == 0)
                    snprintf(t, sizeof t, "%d", v);
                else
                    snprintf(t, sizeof t, "%s%d.%s", v < 0 || (f == 2 && v == 0) ? "-" : "",
                             v < 0 ? -v : v, f == 1 ? "5" : "25");
                if (f == 2 && v > 0)
                    continue;
                int want = vrc(schemas[k], t, NULL) == 0, got = grammar_accepts(g, t);
                CHECK_MSG(want == got, "%s: '%s' grammar %d validator %d", schemas[k], t, got,
                          want);
                checked++;
                if (want != got)
                    break;
            }
        }
        ifl_guide_free(g);
    }
    fprintf(stderr, "  %d range texts agree\n", checked);
}

int main(void)
{
    T_RUN(test_types);
    T_RUN(test_objects);
    T_RUN(test_arrays);
    T_RUN(test_enum_const_combinators);
    T_RUN(test_refs);
    T_RUN(test_strings_and_formats);
    T_RUN(test_numbers);
    T_RUN(test_schema_errors);
    T_RUN(test_ranges_agree);
    return t_done();
}
