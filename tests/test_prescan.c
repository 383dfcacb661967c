/*
 * The raw-body scan that refuses a prompt far beyond the context before
 * the body is parsed (src/server/prescan.c): it refuses exactly what the
 * routes would refuse after parsing (by the same bound), steps aside for
 * whatever it does not follow (escaped keys, cut-off bodies, other routes,
 * TGI's truncate), counts escaped text as jansson decodes it, and takes the
 * last of repeated keys as jansson does. Every body is also fed cut at
 * every byte: no read past the end, never a refusal of a body that ends
 * before its prompt does.
 */
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "server/internal.h"
#include "t.h"

/* A context of 8 tokens, no token over 2 bytes: a text of 15 or more
 * bytes has at least 8 tokens. */
static struct ifl_server srv;

static int scan(const char *path, const char *body, char *msg)
{
    char param[64] = "";
    msg[0] = 0;
    return ifl_prescan_prompt(&srv, path, body, strlen(body), param, msg);
}

static void test_bound(void)
{
    char msg[IFL_ERR_LEN];
    CHECK_EQ(scan("/v1/completions", "{\"prompt\":\"0123456789abcd\"}", msg), 0); /* 14: 7+ */
    CHECK_EQ(scan("/v1/completions", "{\"prompt\":\"0123456789abcde\"}", msg), 400);
    CHECK_MSG(strstr(msg, "at least 8 tokens (15 bytes") != NULL, "msg: %s", msg);
    CHECK_EQ(
        scan("/v1/completions", " {\"max_tokens\": 1, \"prompt\" : \"0123456789abcdef\" } ", msg),
        400);
    /* escapes count as the bytes they stand for */
    CHECK_EQ(
        scan("/v1/completions", "{\"prompt\":\"\\n\\n\\n\\n\\n\\n\\n\\n\\n\\n\\n\\n\\n\\n\"}", msg),
        0); /* 14 bytes */
    CHECK_EQ(scan("/v1/completions",
                  "{\"prompt\":\"\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\\u00e9\"}", msg),
             400); /* 16 bytes */
    CHECK_EQ(
        scan("/v1/completions", "{\"prompt\":\"\\ud83d\\ude00\\ud83d\\ude00\\ud83d\\ude00\"}", msg),
        0); /* 12 bytes */
    /* lists: of token ids (8 is the context), of prompts */
    CHECK_EQ(scan("/v1/completions", "{\"prompt\":[1,2,3,4,5,6,7]}", msg), 0);
    CHECK_EQ(scan("/v1/completions", "{\"prompt\":[1, 2, 3, 4, 5, 6, 7, 8]}", msg), 400);
    CHECK_MSG(strstr(msg, "has 8 tokens") != NULL, "msg: %s", msg);
    CHECK_EQ(scan("/v1/completions", "{\"prompt\":[\"a\", [1,2,3,4,5,6,7,8]]}", msg), 400);
    CHECK_EQ(scan("/v1/completions", "{\"prompt\":[\"a\", \"0123456789abcdef\"]}", msg), 400);
    CHECK_EQ(scan("/v1/completions", "{\"prompt\":[\"a\", \"b\", []]}", msg), 0);
    /* TGI: 422, unless truncate keeps the last tokens of any input */
    CHECK_EQ(scan("/generate", "{\"inputs\":\"0123456789abcdef\"}", msg), 422);
    CHECK_MSG(strstr(msg, "`inputs` must have less than 8 tokens") != NULL, "msg: %s", msg);
    CHECK_EQ(scan("/generate_stream", "{\"inputs\":\"0123456789abcdef\",\"parameters\":{}}", msg),
             422);
    CHECK_EQ(scan("/", "{\"inputs\":\"0123456789abcdef\",\"stream\":true}", msg), 422);
    CHECK_EQ(
        scan("/generate", "{\"inputs\":\"0123456789abcdef\",\"parameters\":{\"truncate\":4}}", msg),
        0);
    CHECK_EQ(scan("/generate",
                  "{\"parameters\":{\"truncate\":null,\"a\":[{}]},\"inputs\":\"0123456789abcdef\"}",
                  msg),
             422);
    CHECK_EQ(scan("/generate", "{\"inputs\":[\"0123456789abcdef\"]}", msg), 0);
}

static void test_steps_aside(void)
{
    char msg[IFL_ERR_LEN];
    /* the last of repeated keys counts */
    CHECK_EQ(scan("/v1/completions", "{\"prompt\":\"0123456789abcdef\",\"prompt\":\"x\"}", msg), 0);
    CHECK_EQ(scan("/v1/completions", "{\"prompt\":\"x\",\"prompt\":\"0123456789abcdef\"}", msg),
             400);
    /* a key with escapes could be "prompt": no judgement */
    CHECK_EQ(
        scan("/v1/completions", "{\"pr\\u006fmpt\":\"x\",\"prompt\":\"0123456789abcdef\"}", msg),
        0);
    /* nested keys are not the prompt */
    CHECK_EQ(
        scan("/v1/completions", "{\"a\":{\"prompt\":\"0123456789abcdef\"},\"prompt\":\"x\"}", msg),
        0);
    /* other routes, chat (checked once rendered), not an object, malformed */
    CHECK_EQ(scan("/v1/chat/completions", "{\"prompt\":\"0123456789abcdef\"}", msg), 0);
    CHECK_EQ(scan("/tokenize", "{\"inputs\":\"0123456789abcdef\"}", msg), 0);
    CHECK_EQ(scan("/v1/completions", "[\"0123456789abcdef\"]", msg), 0);
    CHECK_EQ(scan("/v1/completions", "{\"prompt\" \"0123456789abcdef\"}", msg), 0);
    CHECK_EQ(scan("/v1/completions", "{\"prompt\":\"0123456789abcdef\" \"x\":1}", msg), 0);
    CHECK_EQ(scan("/v1/completions", "{\"prompt\":\"0123456789abcdef\\q\"}", msg), 400);
    CHECK_EQ(scan("/v1/completions", "", msg), 0);
    CHECK_EQ(ifl_prescan_prompt(&srv, "/v1/completions", NULL, 0, msg, msg), 0);
    /* a vocabulary without a bound: only token-id lists are judged */
    srv.info.max_token_bytes = 0;
    CHECK_EQ(scan("/v1/completions", "{\"prompt\":\"0123456789abcdef0123456789abcdef\"}", msg), 0);
    CHECK_EQ(scan("/v1/completions", "{\"prompt\":[1,2,3,4,5,6,7,8]}", msg), 400);
    srv.info.max_token_bytes = 2;
}

/* Every body cut at every byte: a body that ends early is never refused
 * (its end would be an error of its own, reported by the parser), and the
 * scan stays inside the bytes it is given (ASan checks the copies). */
static void test_cuts(void)
{
    static const char *const bodies[] = {
        "{\"prompt\":\"0123456789abcdef\",\"max_tokens\":2}",
        "{\"prompt\":[\"a\", [1,2,3,4,5,6,7,8]], \"n\": 1}",
        "{\"parameters\":{\"truncate\":null},\"inputs\":\"0123456789\\u00e9\\u00e9\\u00e9\"}",
        "{\"prompt\":\"\\ud83d\\ude00\\ud83d\\ude00\\ud83d\\ude00\\ud83d\\ude00\"}",
    };
    for (size_t b = 0; b < sizeof bodies / sizeof bodies[0]; b++) {
        size_t n = strlen(bodies[b]);
        const char *path = strstr(bodies[b], "inputs") ? "/generate" : "/v1/completions";
        for (size_t cut = 0; cut < n; cut++) {
            char *copy = malloc(cut ? cut : 1);
            memcpy(copy, bodies[b], cut);
            char param[64], msg[IFL_ERR_LEN];
            int st = ifl_prescan_prompt(&srv, path, copy, cut, param, msg);
            CHECK_MSG(st == 0, "body %zu cut at %zu: %d", b, cut, st);
            free(copy);
        }
        char param[64], msg[IFL_ERR_LEN];
        CHECK_MSG(ifl_prescan_prompt(&srv, path, bodies[b], n, param, msg) != 0, "body %zu", b);
    }
}

int main(void)
{
    srv.info.n_ctx = 8;
    srv.info.max_token_bytes = 2;
    T_RUN(test_bound);
    T_RUN(test_steps_aside);
    T_RUN(test_cuts);
    return t_done();
}
