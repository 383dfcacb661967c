/*
 * Hermes-style tool calls read back (src/server/hermes.c): <tool_call>
 * blocks naming a request's function become tool calls with the arguments
 * as written, text around them stays content, malformed blocks stay text;
 * and the same result however the text is cut into streamed pieces (every
 * single split point, every pair of split points, and one byte at a time).
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
    struct ifl_hermes t;
    ifl_hermes_init(&t, names);
    snprintf(t.id_base, sizeof t.id_base, "t");
    memset(o, 0, sizeof *o);
    o->calls = json_array();
    size_t at = 0, n = strlen(text);
    for (int i = 0; i <= n_cuts; i++) {
        size_t to = i < n_cuts ? cuts[i] : n;
        ifl_hermes_push(&t, text + at, to - at, o);
        at = to;
    }
    ifl_hermes_finish(&t, o);
    ifl_hermes_deinit(&t);
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
    /* Qwen's shape: one call, the arguments as the model wrote them */
    check("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
          "</tool_call>",
          "", "[[\"get_weather\",\"{\\\"city\\\": \\\"Paris\\\"}\"]]");
    /* several, with the newlines between them; text before them */
    check("Let me look.\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
          "\"Paris\", \"days\": [1, {\"a\": \"}\"}]}}\n</tool_call>\n<tool_call>\n{\"arguments\": "
          "{}, \"name\": \"get_time\"}\n</tool_call>\n",
          "Let me look.\n\n",
          "[[\"get_weather\",\"{\\\"city\\\": \\\"Paris\\\", \\\"days\\\": [1, {\\\"a\\\": "
          "\\\"}\\\"}]}\"],[\"get_time\",\"{}\"]]");
    /* text between and after calls stays, the format's newlines do not */
    check("A <tool_call>{\"name\":\"get_time\",\"arguments\":{\"tz\":\"UTC\"}}</tool_call>\n"
          "then  B\n\n<tool_call>{\"name\": \"get_time\", \"arguments\": {}}</tool_call> C. ",
          "A \nthen  B\n\n C. ",
          "[[\"get_time\",\"{\\\"tz\\\":\\\"UTC\\\"}\"],[\"get_time\",\"{}\"]]");
    /* arguments as a string holding JSON; no arguments at all; a number
     * kept as written */
    check("<tool_call>{\"name\": \"get_time\", \"arguments\": \"{\\\"tz\\\": 1.10}\"}</tool_call>"
          "<tool_call>{\"name\": \"get_time\"}</tool_call>"
          "<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"t\": 1.10}}</tool_call>",
          "",
          "[[\"get_time\",\"{\\\"tz\\\": 1.10}\"],[\"get_time\",\"{}\"],[\"get_weather\","
          "\"{\\\"t\\\": 1.10}\"]]");
    /* a key given twice: the last, as the JSON parser takes it */
    check("<tool_call>{\"name\": \"get_time\", \"arguments\": 1, \"arguments\": {\"a\": [2]}}"
          "</tool_call>",
          "", "[[\"get_time\",\"{\\\"a\\\": [2]}\"]]");
    /* the closing tag cut off (a stop string, say): the JSON is whole */
    check("<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n", "",
          "[[\"get_time\",\"{}\"]]");
    /* non-ASCII and tags inside strings */
    check("<tool_call>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"São </tool\"}}"
          "</tool_call>",
          "", "[[\"get_weather\",\"{\\\"city\\\": \\\"São </tool\\\"}\"]]");
}

static void test_malformed(void)
{
    /* bad JSON, an unknown function, a name that is not a string, arguments
     * that are not an object: text, tags and all */
    check("x <tool_call>{\"name\": \"get_weather\", \"arguments\": {</tool_call> y",
          "x <tool_call>{\"name\": \"get_weather\", \"arguments\": {</tool_call> y", "[]");
    check("<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>",
          "<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>", "[]");
    check("<tool_call>{\"name\": 3, \"arguments\": {}}</tool_call>",
          "<tool_call>{\"name\": 3, \"arguments\": {}}</tool_call>", "[]");
    check("<tool_call>{\"name\": \"get_time\", \"arguments\": [1]}</tool_call>",
          "<tool_call>{\"name\": \"get_time\", \"arguments\": [1]}</tool_call>", "[]");
    check("<tool_call>[\"get_time\"]</tool_call>", "<tool_call>[\"get_time\"]</tool_call>", "[]");
    /* a malformed block beside a good one: the good one is a call, and the
     * whitespace around the bad one is kept as text */
    check("<tool_call>{oops}</tool_call>\n<tool_call>{\"name\": \"get_time\", \"arguments\": "
          "{}}</tool_call>",
          "<tool_call>{oops}</tool_call>\n", "[[\"get_time\",\"{}\"]]");
    check("a\n<tool_call>nope</tool_call>\nb", "a\n<tool_call>nope</tool_call>\nb", "[]");
    /* cut by max_tokens inside the JSON: text */
    check("Sure. <tool_call>\n{\"name\": \"get_weather\", \"argu",
          "Sure. <tool_call>\n{\"name\": \"get_weather\", \"argu", "[]");
}

static void test_plain(void)
{
    check("", "", "[]");
    check("Plain answer.\n", "Plain answer.\n", "[]");
    check("  lead and trail  ", "  lead and trail  ", "[]");
    check("<tool_ca", "<tool_ca", "[]");
    check("a < b and <tool> and </tool_call> <", "a < b and <tool> and </tool_call> <", "[]");
    check("<tool_call><tool_call>{}</tool_call>", "<tool_call><tool_call>{}</tool_call>", "[]");
}

static void test_any_name(void)
{
    /* without a list of functions, any name is a call */
    json_t *keep = names;
    names = NULL;
    check("<tool_call>{\"name\": \"rm_rf\", \"arguments\": {}}</tool_call>", "",
          "[[\"rm_rf\",\"{}\"]]");
    names = keep;
}

int main(void)
{
    names = json_pack("{s:i,s:i}", "get_weather", 0, "get_time", 1);
    T_RUN(test_calls);
    T_RUN(test_malformed);
    T_RUN(test_plain);
    T_RUN(test_any_name);
    json_decref(names);
    return t_done();
}
