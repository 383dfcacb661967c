/*
 * Mistral's [TOOL_CALLS] tool calls read back (src/server/mistral.c): each
 * [TOOL_CALLS]NAME[ARGS]{...} group (with [CALL_ID]ID between, or the v3
 * form's list) naming a request's function becomes a call with its
 * arguments as written and its id the model's or nine letters and digits;
 * text outside groups is content, and a group that is not a call is text;
 * the same result however the text is cut into streamed pieces (every
 * single split point, every pair, one byte at a time); text streams at
 * once but for what may still be a tag or a call; and a [THINK] block in
 * front is reasoning (think.c with Mistral's tags).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "server/internal.h"
#include "t.h"

/* a made id shows as "gen" when it is the one for its index */
static const char *shown_id(const char *id, size_t i)
{
    char want[10];
    ifl_mistral_call_id("t", (int)i, want);
    return strcmp(id, want) ? id : "gen";
}

#define RP_T struct ifl_mistral
#define RP_INIT ifl_mistral_init
#define RP_PUSH ifl_mistral_push
#define RP_FINISH ifl_mistral_finish
#define RP_DEINIT ifl_mistral_deinit
#define RP_ID_SHOWN shown_id
#include "reply_cuts.h"

static void test_calls(void)
{
    /* Devstral's and Ministral 3's shape */
    check("[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}", "",
          "[[\"get_weather\",\"{\\\"city\\\": \\\"Paris\\\"}\",\"gen\"]]");
    /* Mistral Small 3.2's: the model's id */
    check("[TOOL_CALLS]get_weather[CALL_ID]abc123def[ARGS]{\"city\": \"Paris\"}", "",
          "[[\"get_weather\",\"{\\\"city\\\": \\\"Paris\\\"}\",\"abc123def\"]]");
    /* several, one with an id; brackets, tags and escapes inside strings;
     * a number kept as written; nesting */
    check("[TOOL_CALLS]get_time[ARGS]{}[TOOL_CALLS]get_weather[CALL_ID]Zz9Zz9Zz9[ARGS]{\"s\": "
          "\"]}[TOOL_CALLS]x[ARGS]{\\\"\", \"t\": 1.10, \"n\": [{\"a\": []}]}",
          "",
          "[[\"get_time\",\"{}\",\"gen\"],[\"get_weather\",\"{\\\"s\\\": "
          "\\\"]}[TOOL_CALLS]x[ARGS]{\\\\\\\"\\\", \\\"t\\\": 1.10, \\\"n\\\": [{\\\"a\\\": "
          "[]}]}\",\"Zz9Zz9Zz9\"]]");
    /* text before the first call is content; whitespace between calls and
     * at either end is dropped; whitespace before the JSON is the group's */
    check("Let me look.\n[TOOL_CALLS]get_time[ARGS] {\"tz\": 1}\n\n[TOOL_CALLS]get_time[ARGS]{}\n",
          "Let me look.\n",
          "[[\"get_time\",\"{\\\"tz\\\": 1}\",\"gen\"],[\"get_time\",\"{}\",\"gen\"]]");
    check("  \n[TOOL_CALLS]get_time[ARGS]{}", "", "[[\"get_time\",\"{}\",\"gen\"]]");
    /* text after a call is content as it stands */
    check("[TOOL_CALLS]get_time[ARGS]{} and more", " and more", "[[\"get_time\",\"{}\",\"gen\"]]");
    /* non-ASCII */
    check("[TOOL_CALLS]get_weather[ARGS]{\"city\": \"S\xc3\xa3o Paulo\"}", "",
          "[[\"get_weather\",\"{\\\"city\\\": \\\"S\xc3\xa3o Paulo\\\"}\",\"gen\"]]");
    /* the v3 tokenizer's list: each element a call, arguments as written */
    check("[TOOL_CALLS] [{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}, "
          "{\"arguments\": {\"s\": \"}{\"}, \"name\": \"get_time\"}, {\"name\": \"get_time\"}]",
          "",
          "[[\"get_weather\",\"{\\\"city\\\": \\\"Oslo\\\"}\",\"gen\"],[\"get_time\",\"{\\\"s\\\": "
          "\\\"}{\\\"}\",\"gen\"],[\"get_time\",\"{}\",\"gen\"]]");
    check("[TOOL_CALLS][{\"name\":\"get_time\",\"arguments\":{}}][TOOL_CALLS]get_time[ARGS]{}", "",
          "[[\"get_time\",\"{}\",\"gen\"],[\"get_time\",\"{}\",\"gen\"]]");
}

static void test_content(void)
{
    check("", "", "[]");
    check("Plain answer [with brackets].\n", "Plain answer [with brackets].\n", "[]");
    check("  \n", "  \n", "[]");
    check("[TOOL_CALL", "[TOOL_CALL", "[]");
    check("[TOOL_CALLS]", "[TOOL_CALLS]", "[]");
    check("[TOOL_CALLS]get_weather", "[TOOL_CALLS]get_weather", "[]");
    check("[TOOL_CALLS]get_weather[AR", "[TOOL_CALLS]get_weather[AR", "[]");
    check("[TOOL_CALLS]get_weather[ARGS]", "[TOOL_CALLS]get_weather[ARGS]", "[]");
    /* an unknown function, a bad name, a tag that is neither [ARGS] nor
     * [CALL_ID], an empty name or id, JSON that is not an object */
    check("[TOOL_CALLS]rm_rf[ARGS]{}", "[TOOL_CALLS]rm_rf[ARGS]{}", "[]");
    check("[TOOL_CALLS]get weather[ARGS]{}", "[TOOL_CALLS]get weather[ARGS]{}", "[]");
    check("[TOOL_CALLS]get_time[ARG]{}", "[TOOL_CALLS]get_time[ARG]{}", "[]");
    check("[TOOL_CALLS][ARGS]{}", "[TOOL_CALLS][ARGS]{}", "[]");
    check("[TOOL_CALLS]get_time[CALL_ID][ARGS]{}", "[TOOL_CALLS]get_time[CALL_ID][ARGS]{}", "[]");
    check("[TOOL_CALLS]get_time[CALL_ID]a.b[ARGS]{}", "[TOOL_CALLS]get_time[CALL_ID]a.b[ARGS]{}",
          "[]");
    check("[TOOL_CALLS]get_time[ARGS][1]", "[TOOL_CALLS]get_time[ARGS][1]", "[]");
    check("[TOOL_CALLS]get_time[ARGS]\"{}\"", "[TOOL_CALLS]get_time[ARGS]\"{}\"", "[]");
    /* JSON that closes but does not parse: text to its end, then on */
    check("[TOOL_CALLS]get_time[ARGS]{\"a\" 1} x", "[TOOL_CALLS]get_time[ARGS]{\"a\" 1} x", "[]");
    check("[TOOL_CALLS]get_time[ARGS]{\"a\": 1]", "[TOOL_CALLS]get_time[ARGS]{\"a\": 1]", "[]");
    /* a name too long */
    check("[TOOL_CALLS]aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa[ARGS]{}",
          "[TOOL_CALLS]aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa[ARGS]{}",
          "[]");
    /* cut by max_tokens inside the JSON: text, never a call, even where
     * the cut JSON holds a group of its own */
    check("[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Par",
          "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Par", "[]");
    check("[TOOL_CALLS]get_weather[ARGS]{\"s\": \"[TOOL_CALLS]get_time[ARGS]{}",
          "[TOOL_CALLS]get_weather[ARGS]{\"s\": \"[TOOL_CALLS]get_time[ARGS]{}", "[]");
    /* the v3 list: all of it calls or all of it text */
    check("[TOOL_CALLS] [{\"name\": \"get_time\"}, {\"name\": \"nope\"}]",
          "[TOOL_CALLS] [{\"name\": \"get_time\"}, {\"name\": \"nope\"}]", "[]");
    check("[TOOL_CALLS] [{\"name\": \"get_time\", \"arguments\": [1]}]",
          "[TOOL_CALLS] [{\"name\": \"get_time\", \"arguments\": [1]}]", "[]");
    check("[TOOL_CALLS] []", "[TOOL_CALLS] []", "[]");
    check("[TOOL_CALLS] [{\"name\": \"get_ti", "[TOOL_CALLS] [{\"name\": \"get_ti", "[]");
}

/* a group ruled out is text up to the byte that ruled it out, and what
 * follows is read again: a call after it is still a call */
static void test_mixed(void)
{
    check("[TOOL_CALLS]get_time[TOOL_CALLS]get_time[ARGS]{}", "[TOOL_CALLS]get_time",
          "[[\"get_time\",\"{}\",\"gen\"]]");
    check("[TOOL_CALLS][TOOL_CALLS]get_time[ARGS]{}", "[TOOL_CALLS]",
          "[[\"get_time\",\"{}\",\"gen\"]]");
    check("[TOOL_CALLS]nope[ARGS]{}\n[TOOL_CALLS]get_time[ARGS]{}\n", "[TOOL_CALLS]nope[ARGS]{}\n",
          "[[\"get_time\",\"{}\",\"gen\"]]");
    check("[TOOL_CALLS]get_time[ARGS]{}\n[TOOL_CALLS]get_time[ARGS]{\"a\": ",
          "\n[TOOL_CALLS]get_time[ARGS]{\"a\": ", "[[\"get_time\",\"{}\",\"gen\"]]");
    check("[TOOL_CALLS]get_time[ARGS]{}\n[TOOL_CALLS]bad name", "\n[TOOL_CALLS]bad name",
          "[[\"get_time\",\"{}\",\"gen\"]]");
}

static void test_any_name(void)
{
    json_t *keep = names;
    names = NULL;
    check("[TOOL_CALLS]rm_rf[ARGS]{}", "", "[[\"rm_rf\",\"{}\",\"gen\"]]");
    names = keep;
}

/* made ids: nine letters and digits, one per index and reply */
static void test_ids(void)
{
    char a[10], b[10], c[10];
    ifl_mistral_call_id("abc_0", 0, a);
    ifl_mistral_call_id("abc_0", 1, b);
    ifl_mistral_call_id("abc_1", 0, c);
    CHECK(strlen(a) == 9 && strspn(a, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                      "0123456789") == 9);
    CHECK(strcmp(a, b) && strcmp(a, c) && strcmp(b, c));
}

/* what streams before the reply ends: text at once but for what may be a
 * tag; a call as soon as its JSON closes */
static void test_timing(void)
{
    struct ifl_mistral t;
    struct ifl_reply_out o = {.calls = json_array()};
    ifl_mistral_init(&t, names);
    ifl_mistral_push(&t, "Hi [x] [TOOL_", 13, &o);
    CHECK(o.content.len == 7 && !memcmp(o.content.p, "Hi [x] ", 7));
    ifl_mistral_push(&t, "CALLS]get_time[ARGS]{\"a\": {", 27, &o);
    CHECK(o.content.len == 7 && json_array_size(o.calls) == 0);
    ifl_mistral_push(&t, "}}", 2, &o);
    CHECK(o.content.len == 7 && json_array_size(o.calls) == 1);
    ifl_mistral_push(&t, "\n", 1, &o); /* whitespace a call may follow: held */
    CHECK(o.content.len == 7);
    ifl_mistral_push(&t, "ok", 2, &o);
    CHECK(o.content.len == 10 && !memcmp(o.content.p + 7, "\nok", 3));
    ifl_mistral_push(&t, "[TOOL_CALLS]nope[", 17, &o); /* ruled out at the name */
    CHECK(o.content.len == 10 && json_array_size(o.calls) == 1);
    ifl_mistral_push(&t, "A", 1, &o);
    CHECK(o.content.len == 10);
    ifl_mistral_push(&t, "RGS]", 4, &o);
    CHECK(o.content.len == 10 + strlen("[TOOL_CALLS]nope[ARGS]"));
    ifl_mistral_finish(&t, &o);
    ifl_mistral_deinit(&t);
    out_free(&o);
}

/* Ministral 3's reasoning in front: [THINK] ... [/THINK] as reasoning,
 * then the calls, whole and at every single cut */
static void think_cut(const char *text, size_t cut, struct ifl_reply_out *o)
{
    struct ifl_think k;
    struct ifl_mistral t;
    struct ifl_buf rest = {0};
    ifl_think_init_tags(&k, 0, "[THINK]", "[/THINK]");
    ifl_mistral_init(&t, names);
    snprintf(t.id_base, sizeof t.id_base, "t");
    memset(o, 0, sizeof *o);
    o->calls = json_array();
    size_t n = strlen(text), at = 0;
    for (int i = 0; i < 2; i++) {
        size_t to = i ? n : cut;
        rest.len = 0;
        ifl_think_push(&k, text + at, to - at, o, &rest);
        ifl_mistral_push(&t, rest.p ? rest.p : "", rest.len, o);
        at = to;
    }
    rest.len = 0;
    ifl_think_finish(&k, o, &rest);
    ifl_mistral_push(&t, rest.p ? rest.p : "", rest.len, o);
    ifl_mistral_finish(&t, o);
    ifl_mistral_deinit(&t);
    ifl_think_deinit(&k);
    ifl_buf_free(&rest);
}

static void test_think(void)
{
    static const struct {
        const char *text, *reasoning, *content, *calls;
    } cases[] = {
        {"[THINK]The user wants Paris.\n[/THINK][TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}",
         "The user wants Paris.", "",
         "[[\"get_weather\",\"{\\\"city\\\": \\\"Paris\\\"}\",\"gen\"]]"},
        {"[THINK]Easy.[/THINK]\n\nParis.", "Easy.", "Paris.", "[]"},
        {"Paris. [THINK]x[/THINK]", "", "Paris. [THINK]x[/THINK]", "[]"},
        {"[THINK]cut short", "cut short", "", "[]"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        size_t n = strlen(cases[c].text);
        for (size_t cut = 0; cut <= n; cut++) {
            struct ifl_reply_out o;
            think_cut(cases[c].text, cut, &o);
            char *ct = calls_text(&o);
            CHECK_MSG(!strcmp(str(&o.reasoning), cases[c].reasoning) &&
                          !strcmp(str(&o.content), cases[c].content) && !strcmp(ct, cases[c].calls),
                      "\"%s\" cut at %zu: reasoning \"%s\", content \"%s\", calls %s",
                      cases[c].text, cut, str(&o.reasoning), str(&o.content), ct);
            free(ct);
            out_free(&o);
        }
    }
}

int main(void)
{
    names = json_pack("{s:i,s:i}", "get_weather", 0, "get_time", 1);
    T_RUN(test_calls);
    T_RUN(test_content);
    T_RUN(test_mixed);
    T_RUN(test_any_name);
    T_RUN(test_ids);
    T_RUN(test_timing);
    T_RUN(test_think);
    json_decref(names);
    return t_done();
}
