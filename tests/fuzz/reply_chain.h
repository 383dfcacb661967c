/*
 * What the tool-call parsers' fuzz targets share (fuzz_hermes, fuzz_llama3,
 * fuzz_xmlcall): the parser alone or behind the <think> splitter
 * (src/server/think.c), as a reasoning model's replies go through both.
 * The input's first byte seeds where the rest is cut into streamed pieces,
 * and its top two bits choose the chain (the parser alone, the splitter
 * first, the splitter first with the block opened by the prompt); the
 * text parsed whole and in those pieces must give the same reasoning,
 * content and calls, and every call's arguments must be a JSON object
 * naming one of the target's functions. The including file names its
 * parser first: RP_T (the state's type) and RP_INIT, RP_PUSH, RP_FINISH,
 * RP_DEINIT (its functions, as ifl_hermes_*), and may name the splitter's
 * tags (RP_THINK_OPEN, RP_THINK_CLOSE; <think>'s otherwise).
 */
#ifndef IFL_FUZZ_REPLY_CHAIN_H
#define IFL_FUZZ_REPLY_CHAIN_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "server/internal.h"

#ifndef RP_THINK_OPEN
#define RP_THINK_OPEN "<think>"
#define RP_THINK_CLOSE "</think>"
#endif

/* chain: 0 the parser alone, 1 the splitter first, 2 the splitter first
 * with the block open */
static void parse(json_t *names, const char *s, size_t n, uint32_t seed, int chain,
                  struct ifl_reply_out *o)
{
    RP_T t;
    struct ifl_think k;
    struct ifl_buf rest = {0};
    RP_INIT(&t, names);
    snprintf(t.id_base, sizeof t.id_base, "fz");
    ifl_think_init_tags(&k, chain == 2, RP_THINK_OPEN, RP_THINK_CLOSE);
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
            RP_PUSH(&t, rest.p ? rest.p : "", rest.len, o);
        } else {
            RP_PUSH(&t, s + at, m, o);
        }
        at += m;
    }
    if (chain) {
        rest.len = 0;
        ifl_think_finish(&k, o, &rest);
        RP_PUSH(&t, rest.p ? rest.p : "", rest.len, o);
    }
    RP_FINISH(&t, o);
    RP_DEINIT(&t);
    ifl_think_deinit(&k);
    ifl_buf_free(&rest);
}

static int same_buf(const struct ifl_buf *a, const struct ifl_buf *b)
{
    return a->len == b->len && (!a->len || !memcmp(a->p, b->p, a->len));
}

static void out_free(struct ifl_reply_out *o)
{
    ifl_buf_free(&o->content);
    ifl_buf_free(&o->reasoning);
    json_decref(o->calls);
}

/* How many times w occurs in s (n bytes): a bound on the calls a reply can hold. */
static inline size_t count_of(const char *s, size_t n, const char *w)
{
    size_t c = 0, l = strlen(w);
    for (const char *p = s; (p = memmem(p, (size_t)(s + n - p), w, l)); p += l)
        c++;
    return c;
}

/* The input (its first byte the cuts and the chain) read whole into a and
 * in pieces, checked as the file's comment says; the chain, or -1 for an
 * input too short or too long (nothing read). */
static int read_both(json_t *names, const uint8_t *data, size_t size, struct ifl_reply_out *a)
{
    if (size < 1 || size > 1 << 16)
        return -1;
    const char *s = (const char *)data + 1;
    size_t n = size - 1;
    struct ifl_reply_out b;
    int chain = (data[0] >> 6) % 3;
    parse(names, s, n, 0, chain, a);
    parse(names, s, n, data[0] | 1u, chain, &b);
    char *ca = json_dumps(a->calls, JSON_COMPACT), *cb = json_dumps(b.calls, JSON_COMPACT);
    if (!ca || !cb || strcmp(ca, cb) || !same_buf(&a->content, &b.content) ||
        !same_buf(&a->reasoning, &b.reasoning) || (!chain && a->reasoning.len))
        abort(); /* streamed pieces read otherwise than the whole */
    size_t i;
    json_t *c;
    json_array_foreach(a->calls, i, c)
    {
        json_t *f = json_object_get(c, "function");
        json_t *args = json_object_get(f, "arguments");
        json_t *v = json_is_string(args)
                        ? json_loadb(json_string_value(args), json_string_length(args), 0, NULL)
                        : NULL;
        if (!json_is_object(v) ||
            !json_object_get(names, json_string_value(json_object_get(f, "name"))) ||
            json_integer_value(json_object_get(c, "index")) != (json_int_t)i)
            abort(); /* a call a client could not run */
        json_decref(v);
    }
    free(ca);
    free(cb);
    out_free(&b);
    return chain;
}

#endif
