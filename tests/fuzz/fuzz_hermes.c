/* libFuzzer target for the Hermes tool-call parser (src/server/hermes.c):
 * the input's first byte seeds where the rest is cut into streamed pieces.
 * The text parsed whole and in those pieces must give the same content and
 * calls, and every call's arguments must be a JSON object naming one of
 * the target's functions: whatever a model writes, the reply is either a
 * call a client can run or text. Seeds: any reply text, e.g.
 * "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>". */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "server/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void parse(json_t *names, const char *s, size_t n, uint32_t seed, struct ifl_reply_out *o)
{
    struct ifl_hermes t;
    ifl_hermes_init(&t, names);
    memset(o, 0, sizeof *o);
    o->calls = json_array();
    size_t at = 0;
    while (at < n) {
        size_t k = n - at;
        if (seed) { /* pieces of 1 to 16 bytes */
            seed = seed * 1103515245u + 12345u;
            size_t m = 1 + (seed >> 16) % 16;
            k = m < k ? m : k;
        }
        ifl_hermes_push(&t, s + at, k, o);
        at += k;
    }
    ifl_hermes_finish(&t, o);
    ifl_hermes_deinit(&t);
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
    parse(names, s, n, 0, &a);
    parse(names, s, n, data[0] | 1u, &b);
    char *ca = json_dumps(a.calls, JSON_COMPACT), *cb = json_dumps(b.calls, JSON_COMPACT);
    if (!ca || !cb || strcmp(ca, cb) || a.content.len != b.content.len ||
        (a.content.len && memcmp(a.content.p, b.content.p, a.content.len)))
        abort(); /* streamed pieces read otherwise than the whole */
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
    json_decref(a.calls);
    json_decref(b.calls);
    return 0;
}
