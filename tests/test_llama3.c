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

#define RP_T struct ifl_llama3
#define RP_INIT ifl_llama3_init
#define RP_PUSH ifl_llama3_push
#define RP_FINISH ifl_llama3_finish
#define RP_DEINIT ifl_llama3_deinit
#include "reply_cuts.h"

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
