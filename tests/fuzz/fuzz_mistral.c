/* libFuzzer target for Mistral's [TOOL_CALLS] parser (src/server/mistral.c),
 * alone or behind the splitter with Mistral's [THINK] tags
 * (src/server/think.c): the input's first byte seeds where the rest is cut
 * into streamed pieces, and its top bit chooses the chain. The text parsed
 * whole and in those pieces must give the same reasoning, content and calls;
 * every call's arguments must be a JSON object naming one of the target's
 * functions, its id nine letters and digits or the model's (at most 64 of
 * them, '_' and '-'); and a reply without calls is content as written, byte
 * for byte (parser alone). Seeds: any reply text, e.g.
 * "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}". */
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "server/internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Feeds s (n bytes) to the chain in pieces of 1 to 16 bytes drawn from
 * seed, or whole (seed 0). */
static void parse(json_t *names, const char *s, size_t n, uint32_t seed, int think,
                  struct ifl_reply_out *o)
{
    struct ifl_mistral t;
    struct ifl_think k;
    struct ifl_buf rest = {0};
    ifl_mistral_init(&t, names);
    snprintf(t.id_base, sizeof t.id_base, "fz");
    ifl_think_init_tags(&k, 0, "[THINK]", "[/THINK]");
    memset(o, 0, sizeof *o);
    o->calls = json_array();
    for (size_t at = 0, m; at < n; at += m) {
        m = n - at;
        if (seed) {
            seed = seed * 1103515245u + 12345u;
            size_t p = 1 + (seed >> 16) % 16;
            m = p < m ? p : m;
        }
        rest.len = 0;
        if (think)
            ifl_think_push(&k, s + at, m, o, &rest);
        else
            ifl_buf_add(&rest, s + at, m);
        ifl_mistral_push(&t, rest.p ? rest.p : "", rest.len, o);
    }
    rest.len = 0;
    if (think)
        ifl_think_finish(&k, o, &rest);
    ifl_mistral_push(&t, rest.p ? rest.p : "", rest.len, o);
    ifl_mistral_finish(&t, o);
    ifl_mistral_deinit(&t);
    ifl_think_deinit(&k);
    ifl_buf_free(&rest);
}

static int same(const struct ifl_buf *a, const struct ifl_buf *b)
{
    return a->len == b->len && (!a->len || !memcmp(a->p, b->p, a->len));
}

/* a call a client can run and send back */
static int good_call(json_t *names, json_t *c)
{
    json_t *f = json_object_get(c, "function");
    json_t *args = json_object_get(f, "arguments");
    const char *id = json_string_value(json_object_get(c, "id"));
    size_t il = id ? strlen(id) : 0;
    json_t *v = json_is_string(args)
                    ? json_loadb(json_string_value(args), json_string_length(args), 0, NULL)
                    : NULL;
    int ok = json_is_object(v) &&
             json_object_get(names, json_string_value(json_object_get(f, "name"))) && il &&
             il <= 64 &&
             strspn(id, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-") == il;
    json_decref(v);
    return ok;
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
    int think = data[0] >> 7;
    struct ifl_reply_out a, b;
    parse(names, s, n, 0, think, &a);
    parse(names, s, n, data[0] | 1u, think, &b);
    char *ca = json_dumps(a.calls, JSON_COMPACT), *cb = json_dumps(b.calls, JSON_COMPACT);
    if (!ca || !cb || strcmp(ca, cb) || !same(&a.content, &b.content) ||
        !same(&a.reasoning, &b.reasoning) || (!think && a.reasoning.len))
        abort(); /* streamed pieces read otherwise than the whole */
    if (!think && !json_array_size(a.calls) &&
        (a.content.len != n || (n && memcmp(a.content.p, s, n))))
        abort(); /* text lost or changed */
    size_t i;
    json_t *c;
    json_array_foreach(a.calls, i, c)
    {
        if (!good_call(names, c) || json_integer_value(json_object_get(c, "index")) != (int)i)
            abort();
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
