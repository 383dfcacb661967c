/*
 * Tool calls in the Hermes format (Qwen2.5, Qwen3, QwQ, Hermes 2 Pro and
 * 3, Granite 4, ...), read back into what an OpenAI client expects. Such a
 * model answers a call as
 *
 *   <tool_call>
 *   {"name": "get_weather", "arguments": {"city": "Paris"}}
 *   </tool_call>
 *
 * possibly several blocks, possibly after some text. A block whose JSON is
 * an object naming one of the request's functions (a string "name"; an
 * object "arguments", or a string holding one, or none for {}) is a call:
 * its arguments are given as the model wrote them. Any other block (bad
 * JSON, an unknown name) is text, kept in content with its tags. Whitespace
 * alone between a call and the next block or either end of the reply (the
 * newlines between blocks) is the format's, not the reply's: it is dropped;
 * any other text outside calls is content as it stands.
 *
 * Text arrives in pieces when streamed; the parser gives the same result
 * however it is cut: bytes that could begin a tag, and whitespace that a
 * call may follow, are held back until the next piece says. A block is
 * given whole once it closes (or when the text ends: a block whose JSON is
 * complete but whose closing tag never came, say cut by a stop string, is
 * still a call).
 */
#include <stdio.h>
#include <string.h>

#include "server/internal.h"

#define OPEN "<tool_call>"
#define CLOSE "</tool_call>"

enum { T_OUT = 0, T_IN };

void ifl_hermes_init(struct ifl_hermes *t, json_t *names)
{
    memset(t, 0, sizeof *t);
    t->open = OPEN;
    t->close = CLOSE;
    t->names = names ? json_incref(names) : NULL;
}

void ifl_hermes_deinit(struct ifl_hermes *t)
{
    ifl_buf_free(&t->hold);
    ifl_buf_free(&t->pend);
    ifl_buf_free(&t->pre);
    ifl_buf_free(&t->blk);
    json_decref(t->names);
    t->names = NULL;
}

/* Text outside blocks. A run of whitespace alone between two blocks, or
 * between one and either end, waits in pend: dropped when a call is next
 * to it, text otherwise; a run with anything else in it is text as it
 * stands. */
void ifl_reply_text(int *seg_text, struct ifl_buf *pend, const char *s, size_t n,
                    struct ifl_reply_out *o)
{
    if (!*seg_text) {
        size_t i = 0;
        while (i < n && ifl_reply_ws(s[i]))
            i++;
        if (i == n) {
            ifl_buf_add(pend, s, n);
            return;
        }
        *seg_text = 1;
        ifl_buf_add(&o->content, pend->p, pend->len);
        pend->len = 0;
    }
    ifl_buf_add(&o->content, s, n);
}

static void text(struct ifl_hermes *t, const char *s, size_t n, struct ifl_reply_out *o)
{
    ifl_reply_text(&t->seg_text, &t->pend, s, n, o);
}

/* JSON is valid where these scan, so strings and nesting are all they
 * have to follow. */
static size_t skip_string(const char *s, size_t n, size_t i)
{
    for (i++; i < n && s[i] != '"'; i++)
        if (s[i] == '\\')
            i++;
    return i + 1;
}

size_t ifl_reply_raw_member(const char *s, size_t n, const char *key, const char **v)
{
    size_t kl = strlen(key);
    size_t i = 0, len = 0;
    while (i < n && s[i] != '{')
        i++;
    i++;
    while (i < n) {
        while (i < n && (ifl_reply_ws(s[i]) || s[i] == ','))
            i++;
        if (i >= n || s[i] != '"')
            break;
        size_t k0 = i + 1, k1 = skip_string(s, n, i) - 1;
        i = k1 + 1;
        while (i < n && (ifl_reply_ws(s[i]) || s[i] == ':'))
            i++;
        size_t v0 = i;
        int depth = 0;
        while (i < n) {
            char c = s[i];
            if (c == '"') {
                i = skip_string(s, n, i);
                if (!depth)
                    break;
                continue;
            }
            if (c == '{' || c == '[')
                depth++;
            else if (c == '}' || c == ']') {
                if (!depth)
                    break; /* the object's own brace: a scalar value ended */
                if (!--depth) {
                    i++;
                    break;
                }
            } else if (!depth && (c == ',' || ifl_reply_ws(c)))
                break;
            i++;
        }
        if (k1 - k0 == kl && !memcmp(s + k0, key, kl)) {
            *v = s + v0; /* the last one, as the parser takes it */
            len = i - v0;
        }
    }
    return len;
}

int ifl_reply_json_byte(struct ifl_reply_json *j, char c)
{
    if (j->in_str) {
        if (j->esc)
            j->esc = 0;
        else if (c == '\\')
            j->esc = 1;
        else if (c == '"')
            j->in_str = 0;
    } else if (c == '"') {
        j->in_str = 1;
    } else if (c == '{' || c == '[') {
        j->depth++;
    } else if ((c == '}' || c == ']') && j->depth && !--j->depth) {
        return 1;
    }
    return 0;
}

void ifl_reply_add_call(struct ifl_reply_out *o, const char *id_base, int index, json_t *name,
                        const char *raw, size_t rl)
{
    char id[128];
    snprintf(id, sizeof id, "call_%s_%d", id_base, index);
    ifl_reply_add_call_id(o, id, index, name, raw, rl);
}

void ifl_reply_add_call_id(struct ifl_reply_out *o, const char *id, int index, json_t *name,
                           const char *raw, size_t rl)
{
    json_t *c = raw ? json_pack("{s:i,s:s,s:s,s:{s:O,s:s%}}", "index", index, "id", id, "type",
                                "function", "function", "name", name, "arguments", raw, rl)
                    : NULL;
    if (!c || !o->calls || json_array_append_new(o->calls, c))
        o->oom = 1;
}

/* The block in blk as a call (appended to o->calls), or 0 when it is not one. */
static int call(struct ifl_hermes *t, int closed, struct ifl_reply_out *o)
{
    if (t->block_fn)
        return t->block_fn(t, closed, o);
    const char *s = t->blk.p ? t->blk.p : "";
    size_t n = t->blk.len;
    while (n && ifl_reply_ws(s[n - 1]))
        n--;
    while (n && ifl_reply_ws(*s))
        s++, n--;
    json_t *v = json_loadb(s, n, 0, NULL);
    json_t *name = json_object_get(v, "name"), *args = json_object_get(v, "arguments");
    json_t *parsed = NULL;
    if (json_is_string(args)) /* the arguments' JSON given as a string */
        parsed = json_loadb(json_string_value(args), json_string_length(args), 0, NULL);
    int ok = json_is_object(v) && json_is_string(name) &&
             (!t->names || json_object_get(t->names, json_string_value(name))) &&
             (!args || json_is_object(args) || json_is_object(parsed));
    if (ok) {
        const char *raw = NULL;
        size_t rl = json_is_object(args) ? ifl_reply_raw_member(s, n, "arguments", &raw) : 0;
        char *dumped = NULL;
        if (!args)
            raw = "{}", rl = 2;
        else if (parsed)
            raw = json_string_value(args), rl = json_string_length(args);
        else if (!rl && (dumped = json_dumps(args, JSON_REAL_PRECISION(17))))
            raw = dumped, rl = strlen(dumped);
        ifl_reply_add_call(o, t->id_base, t->n_calls, name, raw, rl);
        free(dumped);
        t->n_calls++;
    }
    json_decref(parsed);
    json_decref(v);
    return ok;
}

/* A block ended (closed: its closing tag seen). */
static void end_block(struct ifl_hermes *t, int closed, struct ifl_reply_out *o)
{
    t->in_span = 0;
    if (call(t, closed, o)) {
        t->seg_text = 0; /* a new run begins */
    } else {             /* text, tags and all, with the whitespace before it */
        ifl_buf_add(&t->pend, t->pre.p, t->pre.len);
        struct ifl_buf b = {0};
        ifl_buf_add(&b, t->open, strlen(t->open));
        ifl_buf_add(&b, t->blk.p, t->blk.len);
        if (closed)
            ifl_buf_add(&b, t->close, strlen(t->close));
        text(t, b.p ? b.p : "", b.len, o);
        if (b.oom)
            o->oom = 1;
        ifl_buf_free(&b);
    }
    t->pre.len = t->blk.len = 0;
    t->state = T_OUT;
}

size_t ifl_reply_find_tag(const char *s, size_t n, const char *tag, int *whole)
{
    size_t tl = strlen(tag);
    const char *m = memmem(s, n, tag, tl);
    *whole = m != NULL;
    if (m)
        return (size_t)(m - s);
    for (size_t i = n > tl ? n - tl + 1 : 0; i < n; i++)
        if (s[i] == tag[0] && !memcmp(s + i, tag, n - i))
            return i;
    return n;
}

void ifl_hermes_push(struct ifl_hermes *t, const char *s, size_t n, struct ifl_reply_out *o)
{
    ifl_buf_add(&t->hold, s, n);
    if (t->hold.oom || t->blk.oom || t->pend.oom || t->pre.oom)
        o->oom = 1;
    size_t i = 0;
    const char *h = t->hold.p;
    size_t hn = t->hold.len;
    while (i < hn) {
        int whole;
        if (t->state == T_OUT) {
            size_t at = i + ifl_reply_find_tag(h + i, hn - i, t->open, &whole);
            text(t, h + i, at - i, o);
            i = at;
            if (!whole)
                break;
            /* whitespace alone before the block waits for its verdict */
            ifl_buf_add(&t->pre, t->pend.p, t->pend.len);
            t->pend.len = 0;
            t->state = T_IN;
            i += strlen(t->open);
        } else { /* the closing tag, or a span's edge: whichever comes first */
            int closing = !t->in_span;
            const char *tag = closing ? t->close : t->span_close;
            size_t at = i + ifl_reply_find_tag(h + i, hn - i, tag, &whole);
            if (closing && t->span_open) {
                int w;
                size_t a = i + ifl_reply_find_tag(h + i, hn - i, t->span_open, &w);
                if (a < at)
                    at = a, whole = w, tag = t->span_open, closing = 0;
            }
            size_t end = whole && !closing ? at + strlen(tag) : at; /* span tags are the block's */
            ifl_buf_add(&t->blk, h + i, end - i);
            i = end;
            if (!whole)
                break;
            if (closing) {
                i += strlen(t->close);
                end_block(t, 1, o);
            } else {
                t->in_span = !t->in_span;
            }
        }
    }
    if (h)
        memmove(t->hold.p, h + i, hn - i);
    t->hold.len = hn - i;
}

void ifl_hermes_finish(struct ifl_hermes *t, struct ifl_reply_out *o)
{
    const char *h = t->hold.p ? t->hold.p : "";
    if (t->state == T_IN) {
        ifl_buf_add(&t->blk, h, t->hold.len); /* a closing tag's start that never came */
        end_block(t, 0, o);
    } else {
        text(t, h, t->hold.len, o);
    }
    t->hold.len = 0;
    if (!t->n_calls) /* all the reply was whitespace */
        ifl_buf_add(&o->content, t->pend.p, t->pend.len);
    t->pend.len = 0;
}
