/*
 * Llama 3.1's JSON tool calls read back (src/server/llama3.c): a reply that
 * is one {"name", "parameters"} object naming a request's function, or
 * several separated by ';', becomes tool calls with the arguments as
 * written; any other reply is content as it stands; the same result
 * however the text is cut into streamed pieces (every single split point,
 * every pair of split points, and one byte at a time); and a reply that
 * cannot be calls streams as content at once.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "server/internal.h"
#include "t.h"

static json_t *names; /* the request's functions */

static void parse_cut(const char *text, const size_t *cuts, int n_cuts, struct ifl_reply_out *o)
{
    struct ifl_llama3 t;
    ifl_llama3_init(&t, names);
    snprintf(t.id_base, sizeof t.id_base, "t");
    memset(o, 0, sizeof *o);
    o->calls = json_array();
    size_t at = 0, n = strlen(text);
    for (int i = 0; i <= n_cuts; i++) {
        size_t to = i < n_cuts ? cuts[i] : n;
        ifl_llama3_push(&t, text + at, to - at, o);
        at = to;
    }
    ifl_llama3_finish(&t, o);
    ifl_llama3_deinit(&t);
}

static void out_free(struct ifl_reply_out *o)
{
    ifl_buf_free(&o->reasoning);
    ifl_buf_free(&o->content);
    json_decref(o->calls);
}

static const char *str(const struct ifl_buf *b)
{
    return b->p ? b->p : "";
}

/* the calls' name and arguments, compact: [["name", "arguments"], ...],
 * and every id and index as they must be */
static char *calls_text(const struct ifl_reply_out *o)
{
    json_t *a = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(o->calls, i, c)
    {
        char id[32];
        snprintf(id, sizeof id, "call_t_%zu", i);
        json_t *f = json_object_get(c, "function");
        const char *cid = json_string_value(json_object_get(c, "id"));
        const char *ty = json_string_value(json_object_get(c, "type"));
        if (json_integer_value(json_object_get(c, "index")) != (json_int_t)i || !cid ||
            strcmp(cid, id) || !ty || strcmp(ty, "function"))
            json_array_append_new(a, json_string("bad id, index or type"));
        json_array_append_new(
            a, json_pack("[OO]", json_object_get(f, "name"), json_object_get(f, "arguments")));
    }
    char *s = json_dumps(a, JSON_COMPACT);
    json_decref(a);
    return s;
}

/* text parses to content and calls, whole and cut anywhere */
static void check(const char *text, const char *content, const char *calls)
{
    size_t n = strlen(text);
    struct ifl_reply_out o;
    parse_cut(text, NULL, 0, &o);
    char *ct = calls_text(&o);
    CHECK_MSG(!strcmp(str(&o.content), content) && !strcmp(ct, calls) && !o.oom,
              "%s:\n  content \"%s\" (want \"%s\")\n  calls %s (want %s)", text, str(&o.content),
              content, ct, calls);
    int bad = 0;
    for (size_t a = 1; a < n && !bad; a++)
        for (size_t b = a; b < n && !bad; b++) {
            size_t cuts[2] = {a, b};
            struct ifl_reply_out p;
            parse_cut(text, cuts, a == b ? 1 : 2, &p);
            char *pt = calls_text(&p);
            if (strcmp(str(&p.content), str(&o.content)) || strcmp(pt, ct)) {
                fprintf(stderr, "  cut at %zu, %zu of \"%s\": \"%s\" / %s\n", a, b, text,
                        str(&p.content), pt);
                bad = 1;
            }
            free(pt);
            out_free(&p);
        }
    size_t *all = malloc(sizeof *all * (n ? n : 1));
    for (size_t i = 0; i + 1 < n; i++)
        all[i] = i + 1;
    struct ifl_reply_out b;
    parse_cut(text, all, n ? (int)n - 1 : 0, &b);
    char *bt = calls_text(&b);
    bad |= strcmp(str(&b.content), str(&o.content)) || strcmp(bt, ct);
    CHECK_MSG(!bad, "\"%s\": streamed pieces parse otherwise (one byte at a time: \"%s\" / %s)",
              text, str(&b.content), bt);
    free(bt);
    out_free(&b);
    free(all);
    free(ct);
    out_free(&o);
}

static void test_calls(void)
{
    /* the template's own shape */
    check("{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "",
          "[[\"get_weather\",\"{\\\"city\\\": \\\"Paris\\\"}\"]]");
    /* whitespace around it, the python tag before it, arguments for
     * parameters, keys in another order, a number kept as written */
    check(" \n<|python_tag|>{\"parameters\": {\"t\": 1.10, \"s\": \"}{;\\\"\"}, \"name\": "
          "\"get_time\"}\n",
          "", "[[\"get_time\",\"{\\\"t\\\": 1.10, \\\"s\\\": \\\"}{;\\\\\\\"\\\"}\"]]");
    check("{\"name\":\"get_time\",\"arguments\":{\"tz\":[1,{\"a\":[]}]}}", "",
          "[[\"get_time\",\"{\\\"tz\\\":[1,{\\\"a\\\":[]}]}\"]]");
    /* no parameters: {} */
    check("{\"name\": \"get_time\"}", "", "[[\"get_time\",\"{}\"]]");
    /* several separated by ';' */
    check("{\"name\": \"get_time\", \"parameters\": {}}; {\"name\": \"get_weather\", "
          "\"parameters\": {\"city\": \"Oslo\"}};\n{\"name\": \"get_time\"}",
          "",
          "[[\"get_time\",\"{}\"],[\"get_weather\",\"{\\\"city\\\": \\\"Oslo\\\"}\"],"
          "[\"get_time\",\"{}\"]]");
    /* non-ASCII */
    check("{\"name\": \"get_weather\", \"parameters\": {\"city\": \"S\xc3\xa3o Paulo\"}}", "",
          "[[\"get_weather\",\"{\\\"city\\\": \\\"S\xc3\xa3o Paulo\\\"}\"]]");
}

static void test_content(void)
{
    check("", "", "[]");
    check("Plain answer.\n", "Plain answer.\n", "[]");
    check("  \n", "  \n", "[]");
    check("  lead { and trail  ", "  lead { and trail  ", "[]");
    check("<|python_ta", "<|python_ta", "[]");
    check("<|python_tag|>", "<|python_tag|>", "[]");
    check("<|python_tag|>print(1)", "<|python_tag|>print(1)", "[]");
    check("<|pyth0n", "<|pyth0n", "[]");
    /* JSON that is not a call: an unknown function, no name, parameters
     * not an object, not an object at all, bad JSON */
    check("{\"name\": \"rm_rf\", \"parameters\": {}}", "{\"name\": \"rm_rf\", \"parameters\": {}}",
          "[]");
    check("{\"city\": \"Paris\"}", "{\"city\": \"Paris\"}", "[]");
    check("{\"name\": \"get_time\", \"parameters\": [1]}",
          "{\"name\": \"get_time\", \"parameters\": [1]}", "[]");
    check("{\"name\": \"get_time\", \"parameters\": \"{}\"}",
          "{\"name\": \"get_time\", \"parameters\": \"{}\"}", "[]");
    check("{oops} more", "{oops} more", "[]");
    check("{\"a\": 1]", "{\"a\": 1]", "[]");
    /* a call, then anything but another call */
    check("{\"name\": \"get_time\"} and then", "{\"name\": \"get_time\"} and then", "[]");
    check("{\"name\": \"get_time\"};", "{\"name\": \"get_time\"};", "[]");
    check("{\"name\": \"get_time\"}; x", "{\"name\": \"get_time\"}; x", "[]");
    check("{\"name\": \"get_time\"}{\"name\": \"get_time\"}",
          "{\"name\": \"get_time\"}{\"name\": \"get_time\"}", "[]");
    check("{\"name\": \"get_time\"}; {\"name\": \"nope\"}",
          "{\"name\": \"get_time\"}; {\"name\": \"nope\"}", "[]");
    /* cut by max_tokens inside the JSON */
    check("{\"name\": \"get_weather\", \"param", "{\"name\": \"get_weather\", \"param", "[]");
    check("{\"name\": \"get_time\"}; {\"na", "{\"name\": \"get_time\"}; {\"na", "[]");
}

static void test_any_name(void)
{
    json_t *keep = names;
    names = NULL;
    check("{\"name\": \"rm_rf\", \"parameters\": {}}", "", "[[\"rm_rf\",\"{}\"]]");
    names = keep;
}

/* what streams before the reply ends: content at once when the reply
 * cannot be calls, nothing while it may be */
static void test_timing(void)
{
    struct ifl_llama3 t;
    struct ifl_reply_out o = {.calls = json_array()};
    ifl_llama3_init(&t, names);
    ifl_llama3_push(&t, "  ", 2, &o);
    CHECK(o.content.len == 0);
    ifl_llama3_push(&t, "Hi", 2, &o);
    CHECK(o.content.len == 4 && !memcmp(o.content.p, "  Hi", 4));
    ifl_llama3_push(&t, " {", 2, &o);
    CHECK(o.content.len == 6);
    ifl_llama3_deinit(&t);
    out_free(&o);

    o = (struct ifl_reply_out){.calls = json_array()};
    ifl_llama3_init(&t, names);
    const char *c = "{\"name\": \"get_time\", \"parameters\": {}}";
    ifl_llama3_push(&t, c, strlen(c), &o);
    CHECK(o.content.len == 0 && json_array_size(o.calls) == 0);
    ifl_llama3_push(&t, " x", 2, &o); /* text after a call: not calls, given now */
    CHECK(o.content.len == strlen(c) + 2 && json_array_size(o.calls) == 0);
    ifl_llama3_deinit(&t);
    out_free(&o);

    o = (struct ifl_reply_out){.calls = json_array()};
    ifl_llama3_init(&t, names);
    ifl_llama3_push(&t, c, strlen(c), &o);
    ifl_llama3_finish(&t, &o);
    CHECK(o.content.len == 0 && json_array_size(o.calls) == 1);
    ifl_llama3_deinit(&t);
    out_free(&o);
}

int main(void)
{
    names = json_pack("{s:i,s:i}", "get_weather", 0, "get_time", 1);
    T_RUN(test_calls);
    T_RUN(test_content);
    T_RUN(test_any_name);
    T_RUN(test_timing);
    json_decref(names);
    return t_done();
}
