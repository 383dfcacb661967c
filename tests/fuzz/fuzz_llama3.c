/* libFuzzer target for the Llama 3.1 tool-call parser (src/server/llama3.c),
 * alone or behind the <think> splitter (src/server/think.c); the checks are
 * reply_fuzz.h's, and a reply is calls or content, never both, the content
 * then being the whole answer as written (parser alone). Seeds: any reply
 * text, e.g. "{\"name\": \"get_weather\", \"parameters\": {}}". */
#include "reply_fuzz.h"

static void *make(json_t *names)
{
    struct ifl_llama3 *t = malloc(sizeof *t);
    if (t)
        ifl_llama3_init(t, names);
    return t;
}

static void push(void *t, const char *s, size_t n, struct ifl_reply_out *o)
{
    ifl_llama3_push(t, s, n, o);
}

static void finish(void *t, struct ifl_reply_out *o)
{
    ifl_llama3_finish(t, o);
}

static void drop(void *t)
{
    ifl_llama3_deinit(t);
    free(t);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static const struct reply_fuzz_parser P = {make, push, finish, drop};
    return reply_fuzz_one(&P, REPLY_FUZZ_ONE_OF, data, size);
}
