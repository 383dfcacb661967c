/*
 * gpt-oss's harmony replies read back (src/server/harmony.c): channels to
 * reasoning_content and content, messages to functions.NAME to tool calls,
 * text that is not harmony kept as content; and the same result however
 * the text is cut into streamed pieces (every single split point, and one
 * byte at a time).
 */
#include <stdio.h>
#include <string.h>

#include "core/err.h"
#include "server/internal.h"
#include "t.h"

/* Parses text pushed in pieces cut at the given offsets (n_cuts of them). */
static void parse_cut(const char *text, const size_t *cuts, int n_cuts, struct ifl_reply_out *o)
{
    struct ifl_harmony h;
    ifl_harmony_init(&h);
    snprintf(h.id_base, sizeof h.id_base, "t");
    memset(o, 0, sizeof *o);
    o->calls = json_array();
    size_t at = 0, n = strlen(text);
    for (int i = 0; i <= n_cuts; i++) {
        size_t to = i < n_cuts ? cuts[i] : n;
        ifl_harmony_push(&h, text + at, to - at, o);
        at = to;
    }
    ifl_harmony_finish(&h, o);
    ifl_harmony_deinit(&h);
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

/* calls as compact JSON text, for comparing */
static char *calls_text(const struct ifl_reply_out *o)
{
    return json_dumps(o->calls, JSON_COMPACT | JSON_PRESERVE_ORDER);
}

/* text parses to reasoning, content and calls (JSON), whole and in every
 * split, and one byte at a time. */
static void check(const char *text, const char *reasoning, const char *content, const char *calls)
{
    size_t n = strlen(text);
    struct ifl_reply_out o;
    parse_cut(text, NULL, 0, &o);
    char *ct = calls_text(&o);
    CHECK_MSG(!strcmp(str(&o.reasoning), reasoning) && !strcmp(str(&o.content), content) &&
                  !strcmp(ct, calls),
              "%s:\n  reasoning \"%s\" (want \"%s\")\n  content \"%s\" (want \"%s\")\n  calls %s "
              "(want %s)",
              text, str(&o.reasoning), reasoning, str(&o.content), content, ct, calls);
    int bad = 0;
    for (size_t cut = 1; cut < n && !bad; cut++) {
        struct ifl_reply_out p;
        parse_cut(text, &cut, 1, &p);
        char *pt = calls_text(&p);
        if (strcmp(str(&p.reasoning), str(&o.reasoning)) ||
            strcmp(str(&p.content), str(&o.content)) || strcmp(pt, ct)) {
            fprintf(stderr, "  cut at %zu of \"%s\": \"%s\" / \"%s\" / %s\n", cut, text,
                    str(&p.reasoning), str(&p.content), pt);
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
    bad |= strcmp(str(&b.reasoning), str(&o.reasoning)) ||
           strcmp(str(&b.content), str(&o.content)) || strcmp(bt, ct);
    CHECK_MSG(!bad, "\"%s\": streamed pieces parse otherwise (one byte at a time: \"%s\" / \"%s\")",
              text, str(&b.reasoning), str(&b.content));
    free(bt);
    out_free(&b);
    free(all);
    free(ct);
    out_free(&o);
}

static void test_channels(void)
{
    check("<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final"
          "<|message|>Hi!<|return|>",
          "Think.", "Hi!", "[]");
    /* <|end|> hidden (as llama.cpp shows the text), and the end of text ends a message */
    check("<|channel|>analysis<|message|>a < b<|start|>assistant<|channel|>final<|message|>yes",
          "a < b", "yes", "[]");
    /* a final answer only; text with tag-like bytes kept */
    check("<|channel|>final<|message|>use <b>x</b> and <|tag|> or <|en", "",
          "use <b>x</b> and <|tag|> or <|en", "[]");
    /* a commentary preamble without a recipient is shown */
    check("<|channel|>commentary<|message|>Checking.<|end|>", "", "Checking.", "[]");
}

static void test_tool_calls(void)
{
    /* the recipient before the channel, as the template writes it */
    check("<|channel|>analysis<|message|>Need weather.<|end|><|start|>assistant to=functions."
          "get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}<|call|>",
          "Need weather.", "",
          "[{\"index\":0,\"id\":\"call_t_0\",\"type\":\"function\",\"function\":{\"name\":"
          "\"get_weather\",\"arguments\":\"{\\\"city\\\": \\\"Paris\\\"}\"}}]");
    /* after it, with <|constrain|>; two calls; the first message of the reply */
    check(" to=functions.a<|channel|>commentary <|constrain|>json<|message|>{}<|call|>"
          "<|start|>assistant<|channel|>commentary to=functions.b <|constrain|>json<|message|>"
          "{\"x\": \"<|\"}<|call|>",
          "", "",
          "[{\"index\":0,\"id\":\"call_t_0\",\"type\":\"function\",\"function\":{\"name\":\"a\","
          "\"arguments\":\"{}\"}},{\"index\":1,\"id\":\"call_t_1\",\"type\":\"function\","
          "\"function\":{\"name\":\"b\",\"arguments\":\"{\\\"x\\\": \\\"<|\\\"}\"}}]");
    /* cut short by max_tokens: what the call had */
    check("<|channel|>commentary to=functions.f<|message|>{\"a\": 1", "", "",
          "[{\"index\":0,\"id\":\"call_t_0\",\"type\":\"function\",\"function\":{\"name\":\"f\","
          "\"arguments\":\"{\\\"a\\\": 1\"}}]");
    /* a built-in tool's call (browser, python) is not a function call: dropped */
    check("<|channel|>analysis<|message|>Search.<|end|><|start|>assistant to=browser.search"
          "<|channel|>commentary json<|message|>{\"query\": \"x\"}<|call|>",
          "Search.", "", "[]");
}

static void test_not_harmony(void)
{
    check("Plain answer, no header.", "", "Plain answer, no header.", "[]");
    check("", "", "", "[]");
    check("<b>bold</b> <|message|> x", "", "<b>bold</b> <|message|> x", "[]");
    check("<", "", "<", "[]");
    check("<|chan", "", "<|chan", "[]");
    /* a header that never ends is text */
    char big[700];
    memset(big, 'x', sizeof big - 1);
    memcpy(big, "<|channel|>", 11);
    big[sizeof big - 1] = 0;
    struct ifl_reply_out o;
    parse_cut(big, NULL, 0, &o);
    CHECK_MSG(!strcmp(str(&o.content), big), "a 700-byte header: content %zu bytes", o.content.len);
    out_free(&o);
}

int main(void)
{
    T_RUN(test_channels);
    T_RUN(test_tool_calls);
    T_RUN(test_not_harmony);
    return t_done();
}
