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

#define RP_T struct ifl_hermes
#define RP_INIT ifl_hermes_init
#define RP_PUSH ifl_hermes_push
#define RP_FINISH ifl_hermes_finish
#define RP_DEINIT ifl_hermes_deinit
#include "reply_cuts.h"

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
