/* libFuzzer target for the Llama 3.1 tool-call parser (src/server/llama3.c),
 * alone or behind the <think> splitter (src/server/think.c): the input's
 * first byte seeds where the rest is cut into streamed pieces, and its top
 * two bits choose the chain (the parser alone, the splitter first, the
 * splitter first with the block opened by the prompt). The text parsed
 * whole and in those pieces must give the same reasoning, content and
 * calls; every call's arguments must be a JSON object naming one of the
 * target's functions; and a reply is calls or content, never both, the
 * content then being the whole answer as written (parser alone). Seeds:
 * any reply text, e.g. "{\"name\": \"get_weather\", \"parameters\": {}}". */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "server/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* chain: 0 the parser alone, 1 the splitter first, 2 the splitter first
 * with the block open */
static void parse(json_t *names, const char *s, size_t n, uint32_t seed, int chain,
                  struct ifl_reply_out *o)
{
    struct ifl_llama3 t;
    struct ifl_think k;
    struct ifl_buf rest = {0};
    ifl_llama3_init(&t, names);
    ifl_think_init(&k, chain == 2);
    memset(o, 0, sizeof *o);
    o->calls = json_array();
    size_t at = 0;
    while (at < n) {
        size_t m = n - at;
        if (seed) { /* pieces of 1 to 16 bytes */
            seed = seed * 1103515245u + 12345u;
            size_t c = 1 + (seed >> 16) % 16;
            m = c < m ? c : m;
        }
        if (chain) {
            rest.len = 0;
            ifl_think_push(&k, s + at, m, o, &rest);
            ifl_llama3_push(&t, rest.p ? rest.p : "", rest.len, o);
        } else {
            ifl_llama3_push(&t, s + at, m, o);
        }
        at += m;
    }
    if (chain) {
        rest.len = 0;
        ifl_think_finish(&k, o, &rest);
        ifl_llama3_push(&t, rest.p ? rest.p : "", rest.len, o);
    }
    ifl_llama3_finish(&t, o);
    ifl_llama3_deinit(&t);
    ifl_think_deinit(&k);
    ifl_buf_free(&rest);
}

static int same_buf(const struct ifl_buf *a, const struct ifl_buf *b)
{
    return a->len == b->len && (!a->len || !memcmp(a->p, b->p, a->len));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static json_t *names;
    if (!names && !(names = json_pack("{s:i,s:i}", "get_weather", 0, "f", 1)))
        abort();
    if (size < 1 || size > 1 << 16)
        return 0;
    const char *s = (const char *)data + 1;
    size_t n = size - 1;
    struct ifl_reply_out a, b;
    int chain = (data[0] >> 6) % 3;
    parse(names, s, n, 0, chain, &a);
    parse(names, s, n, data[0] | 1u, chain, &b);
    char *ca = json_dumps(a.calls, JSON_COMPACT), *cb = json_dumps(b.calls, JSON_COMPACT);
    if (!ca || !cb || strcmp(ca, cb) || !same_buf(&a.content, &b.content) ||
        !same_buf(&a.reasoning, &b.reasoning) || (!chain && a.reasoning.len))
        abort(); /* streamed pieces read otherwise than the whole */
    if (json_array_size(a.calls) && a.content.len)
        abort(); /* calls and content: the reply is one or the other */
    if (!chain && !json_array_size(a.calls) &&
        (a.content.len != n || (n && memcmp(a.content.p, s, n))))
        abort(); /* content that is not the reply as written */
    size_t i;
    json_t *c;
    json_array_foreach(a.calls, i, c)
    {
        json_t *f = json_object_get(c, "function");
        json_t *args = json_object_get(f, "arguments");
        json_t *v = json_is_string(args)
                        ? json_loadb(json_string_value(args), json_string_length(args), 0, NULL)
                        : NULL;
        if (!json_is_object(v) ||
            !json_object_get(names, json_string_value(json_object_get(f, "name"))))
            abort(); /* a call a client could not run */
        json_decref(v);
    }
    free(ca);
    free(cb);
    ifl_buf_free(&a.content);
    ifl_buf_free(&b.content);
    ifl_buf_free(&a.reasoning);
    ifl_buf_free(&b.reasoning);
    json_decref(a.calls);
    json_decref(b.calls);
    return 0;
}
