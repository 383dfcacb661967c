/* libFuzzer target for the Hermes tool-call parser (src/server/hermes.c),
 * alone or behind the <think> splitter (src/server/think.c), as a
 * reasoning model's replies go through both; the checks are reply_fuzz.h's.
 * Seeds: any reply text, e.g.
 * "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>". */
#include "reply_fuzz.h"

static void *make(json_t *names)
{
    struct ifl_hermes *t = malloc(sizeof *t);
    if (t)
        ifl_hermes_init(t, names);
    return t;
}

static void push(void *t, const char *s, size_t n, struct ifl_reply_out *o)
{
    ifl_hermes_push(t, s, n, o);
}

static void finish(void *t, struct ifl_reply_out *o)
{
    ifl_hermes_finish(t, o);
}

static void drop(void *t)
{
    ifl_hermes_deinit(t);
    free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const struct reply_fuzz_parser P = {make, push, finish, drop};
    return reply_fuzz_one(&P, 0, data, size);
}
