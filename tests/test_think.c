/*
 * Reasoning split from the answer (src/server/think.c): a reply that
 * begins with a <think> block, or whose prompt left one open, gives the
 * block's text as reasoning and the rest as the answer, the format's
 * whitespace dropped; any other reply is all answer, byte for byte; and
 * the same result however the text is cut into streamed pieces (every
 * single split point, every pair, and one byte at a time).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/internal.h"
#include "t.h"

/* the tags the splitter is given (Mistral's, or NULL: <think>'s) */
static const char *tag_open, *tag_close;

struct split {
    struct ifl_buf reasoning, answer;
    int oom;
};

static void split_cut(const char *text, int inside, const size_t *cuts, int n_cuts, struct split *r)
{
    struct ifl_think k;
    struct ifl_reply_out o = {0};
    memset(r, 0, sizeof *r);
    if (tag_open)
        ifl_think_init_tags(&k, inside, tag_open, tag_close);
    else
        ifl_think_init(&k, inside);
    size_t at = 0, n = strlen(text);
    for (int i = 0; i <= n_cuts; i++) {
        size_t to = i < n_cuts ? cuts[i] : n;
        ifl_think_push(&k, text + at, to - at, &o, &r->answer);
        at = to;
    }
    ifl_think_finish(&k, &o, &r->answer);
    ifl_think_deinit(&k);
    r->reasoning = o.reasoning;
    r->oom = o.oom || o.content.len; /* the splitter never writes content itself */
    ifl_buf_free(&o.content);
}

static const char *str(const struct ifl_buf *b)
{
    return b->p ? b->p : "";
}

static int same(const struct split *a, const struct split *b)
{
    return !strcmp(str(&a->reasoning), str(&b->reasoning)) &&
           !strcmp(str(&a->answer), str(&b->answer)) && a->reasoning.len == b->reasoning.len &&
           a->answer.len == b->answer.len;
}

static void split_free(struct split *r)
{
    ifl_buf_free(&r->reasoning);
    ifl_buf_free(&r->answer);
}

/* text splits into reasoning and answer, whole and cut anywhere */
static void check(const char *text, int inside, const char *reasoning, const char *answer)
{
    size_t n = strlen(text);
    struct split w;
    split_cut(text, inside, NULL, 0, &w);
    CHECK_MSG(
        !strcmp(str(&w.reasoning), reasoning) && !strcmp(str(&w.answer), answer) && !w.oom,
        "\"%s\" (inside %d):\n  reasoning \"%s\" (want \"%s\")\n  answer \"%s\" (want \"%s\")",
        text, inside, str(&w.reasoning), reasoning, str(&w.answer), answer);
    int bad = 0;
    for (size_t a = 1; a < n && !bad; a++)
        for (size_t b = a; b < n && !bad; b++) {
            size_t cuts[2] = {a, b};
            struct split p;
            split_cut(text, inside, cuts, a == b ? 1 : 2, &p);
            if (!same(&p, &w)) {
                fprintf(stderr, "  cut at %zu, %zu of \"%s\": \"%s\" / \"%s\"\n", a, b, text,
                        str(&p.reasoning), str(&p.answer));
                bad = 1;
            }
            split_free(&p);
        }
    size_t *all = malloc(sizeof *all * (n ? n : 1));
    for (size_t i = 0; i + 1 < n; i++)
        all[i] = i + 1;
    struct split b;
    split_cut(text, inside, all, n ? (int)n - 1 : 0, &b);
    bad |= !same(&b, &w);
    CHECK_MSG(!bad, "\"%s\": streamed pieces split otherwise (one byte at a time: \"%s\" / \"%s\")",
              text, str(&b.reasoning), str(&b.answer));
    split_free(&b);
    free(all);
    split_free(&w);
}

static void test_blocks(void)
{
    /* Qwen3's shape */
    check("<think>\nThe user greets me.\n</think>\n\nHello!", 0, "The user greets me.", "Hello!");
    /* QwQ's and R1's: the prompt opened the block */
    check("The user greets me.\n</think>\n\nHello!", 1, "The user greets me.", "Hello!");
    /* whitespace before the block; whitespace inside the reasoning stays */
    check(" \n<think>a \n\n b</think>x", 0, "a \n\n b", "x");
    /* the answer's own whitespace after its first character stays */
    check("<think>r</think>\n\n x \n y\n", 0, "r", "x \n y\n");
    /* an empty block (Qwen3 with thinking off writes it itself) */
    check("<think>\n\n</think>\n\nHi", 0, "", "Hi");
    check("<think></think>", 0, "", "");
    /* a tag-like text inside the reasoning is the reasoning's */
    check("<think>a</thinker> <think> b</think>c", 0, "a</thinker> <think> b", "c");
    /* a later block is the answer's text, not reasoning */
    check("<think>a</think>b<think>c</think>d", 0, "a", "b<think>c</think>d");
    /* the answer may be a tool call, passed on as it stands */
    check("<think>\nI should call it.\n</think>\n\n<tool_call>\n{}\n</tool_call>", 0,
          "I should call it.", "<tool_call>\n{}\n</tool_call>");
}

static void test_cut_short(void)
{
    /* max_tokens or a stop string inside the block: all reasoning */
    check("<think>\nstill thinking  \n", 0, "still thinking", "");
    check("still thinking", 1, "still thinking", "");
    check("still </thi", 1, "still </thi", "");
    check("<think>", 0, "", "");
    check("", 1, "", "");
    /* the block closed, the answer not begun */
    check("<think>r</think>\n\n", 0, "r", "");
}

static void test_plain(void)
{
    /* no block at the start: all answer, byte for byte */
    check("Hello <think>x</think>", 0, "", "Hello <think>x</think>");
    check("  \nHello", 0, "", "  \nHello");
    check("<thinking>x</thinking>", 0, "", "<thinking>x</thinking>");
    check("<thin", 0, "", "<thin");
    check(" \n ", 0, "", " \n ");
    check("", 0, "", "");
}

static void test_prompt_open(void)
{
    const char *open[] = {"<|im_start|>assistant\n<think>\n", "<think>", "x<think> \n\t"};
    const char *shut[] = {"<|im_start|>assistant\n<think>\n\n</think>\n\n",
                          "<|im_start|>assistant\n",
                          "</think>",
                          "",
                          "think>",
                          "<think>x"};
    for (size_t i = 0; i < sizeof open / sizeof open[0]; i++)
        CHECK_MSG(ifl_think_prompt_open(open[i], strlen(open[i])), "open: \"%s\"", open[i]);
    for (size_t i = 0; i < sizeof shut / sizeof shut[0]; i++)
        CHECK_MSG(!ifl_think_prompt_open(shut[i], strlen(shut[i])), "not open: \"%s\"", shut[i]);
}

/* Mistral's [THINK] block (Ministral 3, Magistral): the same rules, and
 * <think> is then text */
static void test_mistral_tags(void)
{
    tag_open = "[THINK]", tag_close = "[/THINK]";
    check("[THINK]The user greets me.\n[/THINK]\n\nHello!", 0, "The user greets me.", "Hello!");
    check("still [/THI", 1, "still [/THI", "");
    check("[THINK]a[/THINK]b[THINK]c[/THINK]d", 0, "a", "b[THINK]c[/THINK]d");
    check("<think>a</think>b", 0, "", "<think>a</think>b");
    check("[THIN", 0, "", "[THIN");
    check("[THINK]x[/THINK][TOOL_CALLS]f[ARGS]{}", 0, "x", "[TOOL_CALLS]f[ARGS]{}");
    tag_open = tag_close = NULL;
}

int main(void)
{
    T_RUN(test_blocks);
    T_RUN(test_cut_short);
    T_RUN(test_plain);
    T_RUN(test_prompt_open);
    T_RUN(test_mistral_tags);
    return t_done();
}
