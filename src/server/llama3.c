/*
 * Tool calls in Llama 3.1's JSON format (Llama 3.1, 3.2, 3.3), read back
 * into what an OpenAI client expects. Such a model answers a call with the
 * call as its whole reply,
 *
 *   {"name": "get_weather", "parameters": {"city": "Paris"}}
 *
 * sometimes after <|python_tag|> (the token its built-in tools use; a
 * control token, which the server does not show, but its text is taken
 * too), and some write several separated by ';'. A reply that is (after
 * whitespace and that tag) such objects and nothing else, each a call (a
 * string "name" among the request's functions; "parameters", or else
 * "arguments", an object, or absent for {}), is those calls, their
 * arguments as the model wrote them. Any other reply is content as it
 * stands, the tag, whitespace and all.
 *
 * Streamed, a reply that begins with '{' (or the tag) is held while it may
 * still be calls: to its end, or to the byte that rules it out (an object
 * that is not a call, text after one), and then given whole as calls or as
 * content; any other reply streams as content at once. What is ruled out
 * is ruled out for every text that begins so, hence the same result
 * however the text is cut.
 */
#include <stdlib.h>
#include <string.h>

#include "server/internal.h"

#define TAG "<|python_tag|>"

enum { L3_START = 0, L3_HOLD, L3_TEXT };

void ifl_llama3_init(struct ifl_llama3 *t, json_t *names)
{
    memset(t, 0, sizeof *t);
    t->names = names ? json_incref(names) : NULL;
    t->calls = json_array();
}

void ifl_llama3_deinit(struct ifl_llama3 *t)
{
    ifl_buf_free(&t->hold);
    json_decref(t->calls);
    json_decref(t->names);
    t->calls = t->names = NULL;
}

/* The reply is not calls: all of it is content, now and from now on. */
static void give_up(struct ifl_llama3 *t, struct ifl_reply_out *o)
{
    ifl_buf_add(&o->content, t->hold.p, t->hold.len);
    t->hold.len = 0;
    t->state = L3_TEXT;
}

/* The object hold[obj, end) as a call kept in t->calls, or 0 when it is
 * not one. */
static int take_call(struct ifl_llama3 *t, size_t end)
{
    const char *s = t->hold.p + t->obj;
    size_t n = end - t->obj;
    json_t *v = json_loadb(s, n, 0, NULL);
    json_t *name = json_object_get(v, "name");
    const char *key = json_object_get(v, "parameters") ? "parameters" : "arguments";
    json_t *args = json_object_get(v, key);
    int ok = json_is_object(v) && json_is_string(name) &&
             (!t->names || json_object_get(t->names, json_string_value(name))) &&
             (!args || json_is_object(args));
    if (ok) {
        const char *raw = NULL;
        size_t rl = args ? ifl_reply_raw_member(s, n, key, &raw) : 0;
        char *dumped = NULL;
        if (!args)
            raw = "{}", rl = 2;
        else if (!rl && (dumped = json_dumps(args, JSON_REAL_PRECISION(17))))
            raw = dumped, rl = strlen(dumped);
        /* ids and indexes are the caller's, given at the end */
        json_t *c = raw ? json_pack("{s:O,s:s%}", "name", name, "raw", raw, rl) : NULL;
        if (!c || json_array_append_new(t->calls, c))
            ok = -1;
        free(dumped);
    }
    json_decref(v);
    return ok;
}

/* Reads hold from t->scan on; 0 when the reply can no longer be calls. */
static int scan(struct ifl_llama3 *t, struct ifl_reply_out *o)
{
    const char *h = t->hold.p;
    for (size_t i = t->scan; i < t->hold.len; i++) {
        char c = h[i];
        if (t->js.depth) {
            if (ifl_reply_json_byte(&t->js, c)) {
                t->scan = i + 1;
                int ok = take_call(t, i + 1);
                if (ok < 0)
                    o->oom = 1;
                if (ok <= 0)
                    return 0;
                t->expect_obj = 0;
            }
            continue;
        }
        if (ifl_reply_ws(c))
            continue;
        if (t->expect_obj && c == '{') {
            t->obj = i;
            t->js = (struct ifl_reply_json){.depth = 1};
        } else if (!t->expect_obj && c == ';') {
            t->expect_obj = 1;
        } else {
            return 0;
        }
    }
    t->scan = t->hold.len;
    return 1;
}

void ifl_llama3_push(struct ifl_llama3 *t, const char *s, size_t n, struct ifl_reply_out *o)
{
    if (t->state == L3_TEXT) {
        ifl_buf_add(&o->content, s, n);
        return;
    }
    ifl_buf_add(&t->hold, s, n);
    if (t->hold.oom) {
        o->oom = 1;
        return;
    }
    if (t->state == L3_START) { /* whitespace, then '{' or the tag? */
        const char *h = t->hold.p;
        size_t i = 0, tl = strlen(TAG);
        while (i < t->hold.len && ifl_reply_ws(h[i]))
            i++;
        if (i == t->hold.len)
            return;
        size_t m = t->hold.len - i < tl ? t->hold.len - i : tl;
        if (!memcmp(h + i, TAG, m)) {
            if (m < tl)
                return; /* the tag may be arriving */
            i += tl;
        } else if (h[i] != '{') {
            give_up(t, o);
            return;
        }
        t->state = L3_HOLD;
        t->scan = i;
        t->expect_obj = 1;
    }
    if (!scan(t, o))
        give_up(t, o);
}

void ifl_llama3_finish(struct ifl_llama3 *t, struct ifl_reply_out *o)
{
    if (t->state == L3_HOLD && !t->js.depth && !t->expect_obj) {
        size_t i;
        json_t *c;
        json_array_foreach(t->calls, i, c)
        {
            json_t *raw = json_object_get(c, "raw");
            ifl_reply_add_call(o, t->id_base, (int)i, json_object_get(c, "name"),
                               json_string_value(raw), json_string_length(raw));
        }
        t->hold.len = 0;
    } else if (t->state != L3_TEXT) {
        give_up(t, o);
    }
    t->state = L3_TEXT;
}
