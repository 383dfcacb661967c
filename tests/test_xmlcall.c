/*
 * Qwen3-Coder's XML tool calls read back (src/server/xmlcall.c on
 * hermes.c's machine): each <tool_call><function=NAME> block naming a
 * request's function becomes a call, its parameters a JSON object typed by
 * the function's schema; text before and between is content; malformed
 * blocks are text with their tags; the same result however the text is
 * cut into streamed pieces (every single split point, every pair of split
 * points, and one byte at a time); and text streams as soon as it cannot
 * be a tag. A forced call's string value (ifl_xml_text_gbnf) is any text
 * without "</parameter>", against a plain search over random texts; the
 * rest of a forced call's grammar (tools.c) is checked by the server
 * script, tests/test_server_tools_xml.sh.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "guide/guide.h"
#include "server/internal.h"
#include "t.h"

#define RP_T struct ifl_hermes
#define RP_INIT ifl_xml_init
#define RP_PUSH ifl_hermes_push
#define RP_FINISH ifl_hermes_finish
#define RP_DEINIT ifl_hermes_deinit
#include "reply_cuts.h"

/* the template's own rendering of a call */
#define WEATHER                                                                                    \
    "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter="      \
    "days>\n3\n</parameter>\n</function>\n</tool_call>"

static void test_calls(void)
{
    check(WEATHER, "", "[[\"get_weather\",\"{\\\"city\\\": \\\"Paris\\\", \\\"days\\\": 3}\"]]");
    /* text before it is content; the whitespace between is the format's */
    check("Let me look.\n\n" WEATHER "\n", "Let me look.\n\n",
          "[[\"get_weather\",\"{\\\"city\\\": \\\"Paris\\\", \\\"days\\\": 3}\"]]");
    /* two blocks; no parameters; the tags' whitespace free */
    check(WEATHER "\n<tool_call><function=get_time></function></tool_call>", "",
          "[[\"get_weather\",\"{\\\"city\\\": \\\"Paris\\\", \\\"days\\\": 3}\"],"
          "[\"get_time\",\"{}\"]]");
    /* one newline stripped at each end of a value, no more; a value that
     * holds the block's closing tag, quotes, a backslash, non-ASCII */
    check("<tool_call>\n<function=get_time>\n<parameter=zone>\n\n a</tool_call>\"\\\xc3\xa9\n\n"
          "</parameter>\n</function>\n</tool_call>",
          "",
          "[[\"get_time\",\"{\\\"zone\\\": \\\"\\\\n a</tool_call>\\\\\\\"\\\\\\\\\xc3\xa9"
          "\\\\n\\\"}\"]]");
    /* a value without the newlines, an empty one, one given twice (the
     * last wins, in the first place) */
    check("<tool_call>\n<function=get_time>\n<parameter=zone>UTC</parameter>\n<parameter=fmt>\n"
          "\n</parameter>\n<parameter=zone>\nCET\n</parameter>\n</function>\n</tool_call>",
          "", "[[\"get_time\",\"{\\\"zone\\\": \\\"CET\\\", \\\"fmt\\\": \\\"\\\"}\"]]");
    /* </tool_call> came without </function>: the model closed its block */
    check("<tool_call>\n<function=get_time>\n<parameter=zone>\nUTC\n</parameter>\n</tool_call>", "",
          "[[\"get_time\",\"{\\\"zone\\\": \\\"UTC\\\"}\"]]");
    /* cut after </function> (a stop string, max_tokens): still a call */
    check("<tool_call>\n<function=get_time>\n</function>\n", "", "[[\"get_time\",\"{}\"]]");
    check("<tool_call>\n<function=get_time>\n</function>\n</tool_", "", "[[\"get_time\",\"{}\"]]");
}

/* values typed by the schema */
static void test_types(void)
{
    check("<tool_call>\n<function=typed>\n"
          "<parameter=s>\n42\n</parameter>\n"
          "<parameter=i>\n 42 \n</parameter>\n"
          "<parameter=n>\n1.50\n</parameter>\n"
          "<parameter=b>\ntrue\n</parameter>\n"
          "<parameter=z>\nnull\n</parameter>\n"
          "<parameter=o>\n{\"a\": [1, 2]}\n</parameter>\n"
          "<parameter=a>\n[\"x\", {\"y\": null}]\n</parameter>\n"
          "<parameter=u>\n7\n</parameter>\n"
          "<parameter=r>\n3\n</parameter>\n"
          "<parameter=sn>\nnull\n</parameter>\n"
          "</function>\n</tool_call>",
          "",
          "[[\"typed\",\"{\\\"s\\\": \\\"42\\\", \\\"i\\\": 42, \\\"n\\\": 1.50, \\\"b\\\": true, "
          "\\\"z\\\": null, \\\"o\\\": {\\\"a\\\": [1, 2]}, \\\"a\\\": [\\\"x\\\", {\\\"y\\\": "
          "null}], \\\"u\\\": \\\"7\\\", \\\"r\\\": 3, \\\"sn\\\": null}\"]]");
    /* text that is not of the kind stays a string: a real for an integer,
     * a string's JSON for a number, bad JSON for an object, an array for
     * an object */
    check("<tool_call>\n<function=typed>\n"
          "<parameter=i>\n4.5\n</parameter>\n"
          "<parameter=n>\n\"1\"\n</parameter>\n"
          "<parameter=o>\n{a: 1}\n</parameter>\n"
          "<parameter=b>\nyes\n</parameter>\n"
          "<parameter=a>\n{}\n</parameter>\n"
          "</function>\n</tool_call>",
          "",
          "[[\"typed\",\"{\\\"i\\\": \\\"4.5\\\", \\\"n\\\": \\\"\\\\\\\"1\\\\\\\"\\\", \\\"o\\\": "
          "\\\"{a: 1}\\\", \\\"b\\\": \\\"yes\\\", \\\"a\\\": \\\"{}\\\"}\"]]");
    /* Python's True and None, as these templates write them in history;
     * an integer for a number; a mixed type list takes null, else text */
    check("<tool_call>\n<function=typed>\n<parameter=b>\nTrue\n</parameter>\n<parameter=z>\nNone\n"
          "</parameter>\n<parameter=n>\n2\n</parameter>\n<parameter=sn>\nNone\n</parameter>\n"
          "</function>\n</tool_call>",
          "",
          "[[\"typed\",\"{\\\"b\\\": true, \\\"z\\\": null, \\\"n\\\": 2, \\\"sn\\\": "
          "\\\"None\\\"}\"]]");
    /* $ref to $defs, anyOf members, enum values */
    check("<tool_call>\n<function=typed>\n<parameter=d>\n9\n</parameter>\n<parameter=any>\nfalse\n"
          "</parameter>\n<parameter=e>\n2\n</parameter>\n</function>\n</tool_call>",
          "", "[[\"typed\",\"{\\\"d\\\": 9, \\\"any\\\": false, \\\"e\\\": 2}\"]]");
    /* a function without a parameters schema: every value a string */
    check("<tool_call>\n<function=get_time>\n<parameter=x>\n1\n</parameter>\n</function>\n"
          "</tool_call>",
          "", "[[\"get_time\",\"{\\\"x\\\": \\\"1\\\"}\"]]");
}

/* blocks that are not calls: text, tags and all */
static void test_malformed(void)
{
    check("", "", "[]");
    check("Plain answer.\n", "Plain answer.\n", "[]");
    check("  \n", "  \n", "[]");
    check("a < b </tool_call> <tool_ca", "a < b </tool_call> <tool_ca", "[]");
    /* an unknown function */
    check("<tool_call>\n<function=rm_rf>\n</function>\n</tool_call>",
          "<tool_call>\n<function=rm_rf>\n</function>\n</tool_call>", "[]");
    /* cut inside the block: in a value, before </function>, in a tag */
    check("Sure.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nPar",
          "Sure.\n<tool_call>\n<function=get_weather>\n<parameter=city>\nPar", "[]");
    check("<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n",
          "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n", "[]");
    check("<tool_call>\n<function=get_wea", "<tool_call>\n<function=get_wea", "[]");
    /* a value never closed: the block's closing tag is in it */
    check("<tool_call>\n<function=get_time>\n<parameter=zone>\nUTC\n</tool_call>",
          "<tool_call>\n<function=get_time>\n<parameter=zone>\nUTC\n</tool_call>", "[]");
    /* Hermes' JSON in the block, text between the tags, a nameless
     * parameter, two functions in one block, text after </function> */
    check("<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>",
          "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n</tool_call>", "[]");
    check("<tool_call>\n<function=get_time>\nzone: UTC\n</function>\n</tool_call>",
          "<tool_call>\n<function=get_time>\nzone: UTC\n</function>\n</tool_call>", "[]");
    check("<tool_call><function=get_time><parameter=>\n1\n</parameter></function></tool_call>",
          "<tool_call><function=get_time><parameter=>\n1\n</parameter></function></tool_call>",
          "[]");
    check("<tool_call><function=get_time></function><function=get_time></function></tool_call>",
          "<tool_call><function=get_time></function><function=get_time></function></tool_call>",
          "[]");
    check("<tool_call><function=get_time></function>\nok",
          "<tool_call><function=get_time>"
          "</function>\nok",
          "[]");
    /* a bad block between calls keeps its whitespace; a good one still counts */
    check(WEATHER "\n<tool_call>\n<function=nope>\n</function>\n</tool_call>\nDone.",
          "\n<tool_call>\n<function=nope>\n</function>\n</tool_call>\nDone.",
          "[[\"get_weather\",\"{\\\"city\\\": \\\"Paris\\\", \\\"days\\\": 3}\"]]");
    /* a name not UTF-8 */
    check("<tool_call><function=get_time><parameter=\xff>\n1\n</parameter></function></tool_call>",
          "<tool_call><function=get_time><parameter=\xff>\n1\n</parameter></function></tool_call>",
          "[]");
}

static void test_any_name(void)
{
    json_t *keep = names;
    names = NULL;
    check("<tool_call>\n<function=rm_rf>\n<parameter=n>\n1\n</parameter>\n</function>\n"
          "</tool_call>",
          "", "[[\"rm_rf\",\"{\\\"n\\\": \\\"1\\\"}\"]]");
    names = keep;
}

/* what streams before the reply ends: text at once, bytes that may begin
 * a tag held, a block given when it closes */
static void test_timing(void)
{
    struct ifl_hermes t;
    struct ifl_reply_out o = {.calls = json_array()};
    ifl_xml_init(&t, names);
    ifl_hermes_push(&t, "Hi <tool", 8, &o);
    CHECK(o.content.len == 3 && !memcmp(o.content.p, "Hi ", 3));
    ifl_hermes_push(&t, "s>", 2, &o);
    CHECK(o.content.len == 10);
    const char *b = "<tool_call>\n<function=get_time>\n<parameter=zone>\n</tool_call>";
    ifl_hermes_push(&t, b, strlen(b), &o); /* in a value: not the end */
    CHECK(o.content.len == 10 && json_array_size(o.calls) == 0);
    b = "\n</parameter>\n</function>\n</tool_call>";
    ifl_hermes_push(&t, b, strlen(b), &o);
    CHECK(json_array_size(o.calls) == 1);
    ifl_hermes_push(&t, " more", 5, &o);
    CHECK(o.content.len == 15);
    ifl_hermes_finish(&t, &o);
    ifl_hermes_deinit(&t);
    out_free(&o);
}

/* xml-text then the closing tag: accepted exactly when the text does not
 * hold the tag (random texts of the tag's letters, '<', 'x' and '\n') */
static void test_text_grammar(void)
{
    const char *rules = ifl_xml_text_gbnf();
    struct ifl_buf g = {0};
    ifl_buf_addf(&g, "root ::= xml-text \"\\n</parameter>\"\n%s", rules);
    struct ifl_guide *gd = NULL;
    char err[IFL_ERR_LEN] = "";
    int rc = ifl_guide_compile_gbnf(&gd, g.p, g.len, err);
    CHECK_MSG(rc == 0, "%s", err);
    ifl_buf_free(&g);
    if (rc)
        return;
    static const char alpha[] = "</parameter>x\n<</p";
    uint32_t seed = 7;
    int bad = 0, held = 0;
    for (int round = 0; round < 4000 && !bad; round++) {
        char text[64];
        size_t n = 0;
        seed = seed * 1103515245u + 12345u;
        size_t len = (seed >> 16) % 40;
        if (round % 3 == 0) { /* the tag, or a piece of it, in the middle */
            const char *w = "</parameter>";
            size_t at = (seed >> 8) % 8, k = 1 + (seed >> 4) % 12;
            for (size_t i = 0; i < at; i++)
                text[n++] = 'x';
            memcpy(text + n, w, k);
            n += k;
        }
        while (n < len) {
            seed = seed * 1103515245u + 12345u;
            text[n++] = alpha[(seed >> 16) % (sizeof alpha - 1)];
        }
        text[n] = 0;
        char full[96];
        snprintf(full, sizeof full, "%s\n</parameter>", text);
        struct ifl_guide_state st;
        ifl_guide_state_init(&st, gd);
        int ok =
            ifl_guide_accept_bytes(&st, full, strlen(full)) == 0 && ifl_guide_is_accepting(&st);
        ifl_guide_state_deinit(&st);
        int want = strstr(text, "</parameter>") == NULL;
        held += !want;
        if (ok != want) {
            fprintf(stderr, "  \"%s\": the grammar says %d, the search %d\n", text, ok, want);
            bad = 1;
        }
    }
    CHECK(!bad && held > 100);
    ifl_guide_free(gd);
}

int main(void)
{
    names = json_loads(
        "{\"get_weather\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": "
        "\"string\"}, \"days\": {\"type\": \"integer\"}}}, \"get_time\": {}, \"typed\": "
        "{\"type\": \"object\", \"$defs\": {\"D\": {\"type\": \"integer\"}}, \"properties\": {"
        "\"s\": {\"type\": \"string\"}, \"i\": {\"type\": \"integer\"}, \"n\": {\"type\": "
        "\"number\"}, \"b\": {\"type\": \"boolean\"}, \"z\": {\"type\": \"null\"}, \"o\": "
        "{\"type\": \"object\"}, \"a\": {\"type\": \"array\"}, \"u\": {\"description\": \"?\"}, "
        "\"r\": {\"$ref\": \"#/$defs/D\"}, \"d\": {\"$ref\": \"#/definitions/D\"}, \"sn\": "
        "{\"type\": [\"string\", \"null\"]}, \"any\": {\"anyOf\": [{\"type\": \"integer\"}, "
        "{\"type\": \"boolean\"}]}, \"e\": {\"enum\": [1, 2]}}, \"definitions\": {\"D\": "
        "{\"type\": \"integer\"}}}}",
        0, NULL);
    CHECK(names != NULL);
    T_RUN(test_calls);
    T_RUN(test_types);
    T_RUN(test_malformed);
    T_RUN(test_any_name);
    T_RUN(test_timing);
    T_RUN(test_text_grammar);
    json_decref(names);
    return t_done();
}
