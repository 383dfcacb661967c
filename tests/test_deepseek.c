/*
 * DeepSeek-R1's tool calls read back (src/server/deepseek.c on hermes.c's
 * machine): a <｜tool▁calls▁begin｜> block of calls naming the request's
 * functions becomes calls, their arguments the objects as written; text
 * before and after is content; a block that is not all calls is text with
 * its tags; a reply cut inside a block keeps only whole calls; the same
 * result however the text is cut into streamed pieces (every single split
 * point, every pair, and one byte at a time); text streams as soon as it
 * cannot be a tag. The forced call's grammar (tools.c) is checked by the
 * server script, tests/test_server_tools_deepseek.sh.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/internal.h"
#include "t.h"

#define RP_T struct ifl_hermes
#define RP_INIT ifl_deepseek_init
#define RP_PUSH ifl_hermes_push
#define RP_FINISH ifl_hermes_finish
#define RP_DEINIT ifl_hermes_deinit
#include "reply_cuts.h"

#define B IFL_DS_CALLS_BEGIN
#define E IFL_DS_CALLS_END
#define CB IFL_DS_CALL_BEGIN
#define CE IFL_DS_CALL_END
#define SEP IFL_DS_TOOL_SEP

/* as llama.cpp's R1 template writes a call */
#define WEATHER CB "function" SEP "get_weather\n```json\n{\"city\": \"Paris\", \"days\": 3}\n```" CE
#define TIME CB "function" SEP "get_time\n```json\n{}\n```" CE
#define W_ARGS "[\"get_weather\",\"{\\\"city\\\": \\\"Paris\\\", \\\"days\\\": 3}\"]"
#define T_ARGS "[\"get_time\",\"{}\"]"

static void test_calls(void)
{
    check(B WEATHER E, "", "[" W_ARGS "]");
    /* text before is content; whitespace next to the block is the format's */
    check("Let me look.\n\n" B WEATHER E "\n", "Let me look.\n\n", "[" W_ARGS "]");
    /* two calls, a newline between (the template's), whitespace between the
     * tags free, the fence without "json", no fence at all */
    check(B WEATHER "\n" TIME E, "", "[" W_ARGS "," T_ARGS "]");
    check(B " " CB " function " SEP " get_time \n```\n{}\n```\n" CE " " E, "", "[" T_ARGS "]");
    check(B CB "function" SEP "get_time {\"zone\":\"UTC\"}" CE E, "",
          "[[\"get_time\",\"{\\\"zone\\\":\\\"UTC\\\"}\"]]");
    /* the arguments as written: nesting, strings holding braces, fences and tags */
    check(B CB "function" SEP "get_time\n```json\n{\"a\": {\"b\": [1, \"}```\"]}, \"c\": \"" CE
               "\"}\n```" CE E,
          "",
          "[[\"get_time\",\"{\\\"a\\\": {\\\"b\\\": [1, \\\"}```\\\"]}, \\\"c\\\": \\\"" CE
          "\\\"}\"]]");
    /* two blocks, text between */
    check(B WEATHER E "\nand " B TIME E, "\nand ", "[" W_ARGS "," T_ARGS "]");
}

/* a reply that ends inside the block: its whole calls */
static void test_cut(void)
{
    check(B WEATHER, "", "[" W_ARGS "]"); /* the end of the sequence after a call */
    check(B WEATHER "\n", "", "[" W_ARGS "]");
    check(B WEATHER "<\xef\xbd\x9ctool", "", "[" W_ARGS "]"); /* the block's end tag cut */
    check(B CB "function" SEP "get_time\n```json\n{}\n```", "", "[" T_ARGS "]");
    check(B CB "function" SEP "get_time\n```json\n{}\n``", "", "[" T_ARGS "]");
    check(B CB "function" SEP "get_time\n```json\n{}\n```<\xef\xbd\x9ctool\xe2\x96\x81", "",
          "[" T_ARGS "]");
    check(B CB "function" SEP "get_time {}", "", "[" T_ARGS "]");
    /* cut before the JSON closed: no call, the text as it stands */
    check("Hm. " B CB "function" SEP "get_time\n```json\n{\"zone\": \"U",
          "Hm. " B CB "function" SEP "get_time\n```json\n{\"zone\": \"U", "[]");
    /* a second call cut short: the block is not all calls */
    check(B WEATHER "\n" CB "function" SEP "get_ti", B WEATHER "\n" CB "function" SEP "get_ti",
          "[]");
}

/* blocks that are not all calls: text, tags and all */
static void test_malformed(void)
{
    /* an unknown function; arguments not an object, not JSON; no "function" */
    check(B CB "function" SEP "rm_rf\n```json\n{}\n```" CE E,
          B CB "function" SEP "rm_rf\n```json\n{}\n```" CE E, "[]");
    check(B CB "function" SEP "get_time\n```json\n[1]\n```" CE E,
          B CB "function" SEP "get_time\n```json\n[1]\n```" CE E, "[]");
    check(B CB "function" SEP "get_time\n```json\n{zone: 1}\n```" CE E,
          B CB "function" SEP "get_time\n```json\n{zone: 1}\n```" CE E, "[]");
    check(B CB "get_time" SEP "{}" CE E, B CB "get_time" SEP "{}" CE E, "[]");
    /* a fence opened and not closed; text after the JSON; text between calls */
    check(B CB "function" SEP "get_time\n```json\n{}\n" CE E,
          B CB "function" SEP "get_time\n```json\n{}\n" CE E, "[]");
    check(B CB "function" SEP "get_time {} ok" CE E, B CB "function" SEP "get_time {} ok" CE E,
          "[]");
    check(B WEATHER " and " TIME E, B WEATHER " and " TIME E, "[]");
    /* an empty block; one good call and one bad: all text, the whitespace kept */
    check("\n" B "\n" E "\n", "\n" B "\n" E "\n", "[]");
    check(B WEATHER E "\n" B TIME "\n" CB "function" SEP "nope {}" CE E,
          "\n" B TIME "\n" CB "function" SEP "nope {}" CE E, "[" W_ARGS "]");
    /* a lone call tag without the block's */
    check(WEATHER, WEATHER, "[]");
}

static void test_any_name(void)
{
    json_t *keep = names;
    names = NULL;
    check(B CB "function" SEP "rm_rf\n```json\n{\"n\": 1}\n```" CE E, "",
          "[[\"rm_rf\",\"{\\\"n\\\": 1}\"]]");
    names = keep;
}

/* what streams before the reply ends: text at once, bytes that may begin
 * the tag held, a block's calls given when it closes */
static void test_timing(void)
{
    struct ifl_hermes t;
    struct ifl_reply_out o = {.calls = json_array()};
    ifl_deepseek_init(&t, names);
    snprintf(t.id_base, sizeof t.id_base, "t");
    const char *hi = "Hi <\xef\xbd\x9ctool"; /* the start of the block's tag: held */
    ifl_hermes_push(&t, hi, strlen(hi), &o);
    CHECK(o.content.len == 3 && !memcmp(o.content.p, "Hi ", 3));
    ifl_hermes_push(&t, "s>", 2, &o); /* not the tag after all */
    CHECK(o.content.len == strlen(hi) + 2);
    ifl_hermes_push(&t, B WEATHER, strlen(B WEATHER), &o);
    CHECK(o.content.len == strlen(hi) + 2 && json_array_size(o.calls) == 0);
    ifl_hermes_push(&t, E, strlen(E), &o);
    CHECK(json_array_size(o.calls) == 1);
    ifl_hermes_push(&t, " more", 5, &o);
    CHECK(o.content.len == strlen(hi) + 7);
    ifl_hermes_finish(&t, &o);
    ifl_hermes_deinit(&t);
    out_free(&o);
}

int main(void)
{
    names = json_loads("{\"get_weather\": {}, \"get_time\": {}}", 0, NULL);
    CHECK(names != NULL);
    T_RUN(test_calls);
    T_RUN(test_cut);
    T_RUN(test_malformed);
    T_RUN(test_any_name);
    T_RUN(test_timing);
    json_decref(names);
    return t_done();
}
