/*
 * gpt-oss's replies in the harmony format, read back into what an OpenAI
 * client expects: the analysis channel as reasoning_content, the final
 * channel as content, and a message addressed to "functions.NAME" as a
 * tool call whose arguments are the message's text.
 *
 * The chat prompt ends with "<|start|>assistant", so a reply reads
 *
 *   <|channel|>analysis<|message|>THOUGHTS<|end|>
 *   <|start|>assistant<|channel|>final<|message|>ANSWER<|return|>
 *
 * or, for a tool call, a header such as " to=functions.get_weather
 * <|channel|>commentary json<|message|>{"city": "Paris"}<|call|>" (the
 * recipient may also follow the channel name, and "<|constrain|>json" may
 * name the arguments' type). Each message is a header up to <|message|>,
 * then its body up to <|end|>, <|call|>, <|return|>, <|start|> or the end
 * of the text. The vocabulary shows these tokens as text (tokenizer
 * vocab.c), so the parser works on the generated text, which arrives in
 * pieces when streamed: a body's bytes that could begin a closing tag are
 * held back until the next piece says. A reply that does not open with a
 * header (a grammar's plain answer, or a model that ignores the format) is
 * content as it stands.
 */
#include <stdio.h>
#include <string.h>

#include "server/internal.h"

enum { H_HEADER = 0, H_BODY, H_PLAIN };
enum { CH_CONTENT = 0, CH_REASONING, CH_TOOL, CH_DROP };

#define HEADER_MAX 512 /* a longer header is not one: the text is plain */

static const char *const openers[] = {"<|channel|>", "<|start|>", " to=", "<|constrain|>", "to="};
static const char *const closers[] = {"<|end|>", "<|call|>", "<|return|>", "<|start|>"};

void ifl_harmony_init(struct ifl_harmony *h)
{
    memset(h, 0, sizeof *h);
}

void ifl_harmony_deinit(struct ifl_harmony *h)
{
    ifl_buf_free(&h->hdr);
    ifl_buf_free(&h->hold);
    ifl_buf_free(&h->args);
}

/* 1 when s (n bytes) could still grow into one of the strings, or has one as its start. */
static int could_open(const char *s, size_t n)
{
    for (size_t i = 0; i < sizeof openers / sizeof openers[0]; i++) {
        size_t l = strlen(openers[i]);
        if (!memcmp(s, openers[i], n < l ? n : l))
            return 1;
    }
    return 0;
}

/* The value after key in a header ("<|channel|>" or "to="), up to a space
 * or a tag: *v and its length, or 0 when the key is absent. */
static size_t header_value(const char *hdr, size_t n, const char *key, const char **v)
{
    const char *k = memmem(hdr, n, key, strlen(key));
    if (!k)
        return 0;
    const char *p = k + strlen(key), *end = hdr + n;
    const char *q = p;
    while (q < end && *q != ' ' && *q != '<')
        q++;
    *v = p;
    return (size_t)(q - p);
}

/* A header is complete: choose where the body goes. */
static void open_message(struct ifl_harmony *h)
{
    const char *hdr = h->hdr.p ? h->hdr.p : "", *ch = NULL, *to = NULL;
    size_t n = h->hdr.len;
    size_t chl = header_value(hdr, n, "<|channel|>", &ch);
    size_t tol = header_value(hdr, n, "to=", &to);
    h->name_len = 0;
    if (tol > 10 && !memcmp(to, "functions.", 10)) {
        h->channel = CH_TOOL;
        h->name_len = tol - 10 < sizeof h->name - 1 ? tol - 10 : sizeof h->name - 1;
        memcpy(h->name, to + 10, h->name_len);
        h->name[h->name_len] = 0;
        h->args.len = 0;
    } else if (tol) {
        h->channel = CH_DROP; /* a built-in tool (browser, python): not ours to run */
    } else if (chl == 8 && !memcmp(ch, "analysis", 8)) {
        h->channel = CH_REASONING;
    } else {
        h->channel = CH_CONTENT; /* final, a commentary preamble, or no channel */
    }
    h->hdr.len = 0;
    h->state = H_BODY;
}

static void emit(struct ifl_harmony *h, const char *s, size_t n, struct ifl_reply_out *o)
{
    if (!n)
        return;
    switch (h->channel) {
    case CH_REASONING:
        ifl_buf_add(&o->reasoning, s, n);
        break;
    case CH_TOOL:
        ifl_buf_add(&h->args, s, n);
        break;
    case CH_DROP:
        break;
    default:
        ifl_buf_add(&o->content, s, n);
    }
}

/* A message ends: a tool call is complete now. */
static void close_message(struct ifl_harmony *h, struct ifl_reply_out *o)
{
    if (h->channel == CH_TOOL) {
        char id[128];
        snprintf(id, sizeof id, "call_%s_%d", h->id_base, h->n_calls);
        json_t *call = json_pack("{s:i,s:s,s:s,s:{s:s,s:s%}}", "index", h->n_calls, "id", id,
                                 "type", "function", "function", "name", h->name, "arguments",
                                 h->args.p ? h->args.p : "", h->args.len);
        if (!call || !o->calls || json_array_append_new(o->calls, call))
            o->oom = 1;
        h->n_calls++;
        h->args.len = 0;
    }
    h->state = H_HEADER;
    h->channel = CH_CONTENT;
}

/* Body bytes: emit up to a closing tag or a possible start of one (held). */
static void body(struct ifl_harmony *h, struct ifl_reply_out *o)
{
    const char *s = h->hold.p;
    size_t n = h->hold.len, i = 0;
    while (i < n) {
        const char *lt = memchr(s + i, '<', n - i);
        if (!lt) {
            emit(h, s + i, n - i, o);
            i = n;
            break;
        }
        size_t at = (size_t)(lt - s);
        emit(h, s + i, at - i, o);
        i = at;
        int partial = 0;
        size_t k;
        for (k = 0; k < sizeof closers / sizeof closers[0]; k++) {
            size_t l = strlen(closers[k]);
            if (n - at >= l && !memcmp(lt, closers[k], l))
                break;
            if (n - at < l && !memcmp(lt, closers[k], n - at))
                partial = 1;
        }
        if (k < sizeof closers / sizeof closers[0]) {
            close_message(h, o);
            /* <|start|> opens the next header; the others are consumed */
            i = !strcmp(closers[k], "<|start|>") ? at : at + strlen(closers[k]);
            break;
        }
        if (partial)
            break; /* wait for the next piece */
        emit(h, lt, 1, o);
        i = at + 1;
    }
    /* keep the bytes not yet decided on (or, after a close, the rest) */
    memmove(h->hold.p, h->hold.p + i, n - i);
    h->hold.len = n - i;
}

/* Header bytes from hold into hdr up to <|message|> (which may have come
 * in pieces). 1 when it changed state. */
static int header(struct ifl_harmony *h, struct ifl_reply_out *o)
{
    size_t from = h->hdr.len >= 10 ? h->hdr.len - 10 : 0; /* where the tag may start */
    ifl_buf_add(&h->hdr, h->hold.p, h->hold.len);
    h->hold.len = 0;
    if (h->hdr.oom) {
        o->oom = 1;
        return 0;
    }
    char *s = h->hdr.p;
    size_t n = h->hdr.len;
    char *m = memmem(s + from, n - from, "<|message|>", 11);
    if (m) { /* the body's bytes go back to hold */
        size_t at = (size_t)(m - s);
        ifl_buf_add(&h->hold, m + 11, n - at - 11);
        h->hdr.len = at;
    }
    int plain = !h->seen_header && !could_open(s, h->hdr.len);
    if (plain || h->hdr.len > HEADER_MAX) {
        /* not harmony: the text so far and all after it are content */
        ifl_buf_add(&o->content, s, h->hdr.len);
        if (m)
            ifl_buf_add(&o->content, "<|message|>", 11);
        h->hdr.len = 0;
        h->state = H_PLAIN;
        return 1;
    }
    if (!m)
        return 0;
    h->seen_header = 1;
    open_message(h);
    return 1;
}

void ifl_harmony_push(struct ifl_harmony *h, const char *text, size_t n, struct ifl_reply_out *o)
{
    if (h->state == H_PLAIN) {
        ifl_buf_add(&o->content, text, n);
        return;
    }
    ifl_buf_add(&h->hold, text, n);
    if (h->hold.oom || h->hdr.oom || h->args.oom)
        o->oom = 1;
    for (;;) {
        size_t before = h->hold.len;
        int st = h->state;
        if (st == H_PLAIN) {
            ifl_buf_add(&o->content, h->hold.p, h->hold.len);
            h->hold.len = 0;
            return;
        }
        if (st == H_HEADER) {
            if (!header(h, o) && h->hold.len == 0)
                return;
        } else {
            body(h, o);
        }
        if (h->hold.len == 0 || (h->state == st && h->hold.len == before))
            return;
    }
}

void ifl_harmony_finish(struct ifl_harmony *h, struct ifl_reply_out *o)
{
    /* held bytes were a tag's start that never came: they are text */
    if (h->state == H_BODY) {
        emit(h, h->hold.p, h->hold.len, o);
        close_message(h, o); /* a call cut by max_tokens still shows what it had */
    } else if (h->state == H_PLAIN || (!h->seen_header && h->hdr.len)) {
        ifl_buf_add(&o->content, h->hdr.p ? h->hdr.p : "", h->hdr.len);
        ifl_buf_add(&o->content, h->hold.p ? h->hold.p : "", h->hold.len);
    }
    h->hold.len = h->hdr.len = 0;
    h->state = H_PLAIN;
}
