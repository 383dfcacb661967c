/*
 * Tool calls in DeepSeek-R1's format (DeepSeek-R1 and the Llama and Qwen
 * models distilled from it, served with a template that renders tools,
 * such as llama.cpp's llama-cpp-deepseek-r1.jinja), read back into what an
 * OpenAI client expects. Such a model answers a call as
 *
 *   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
 *   ```json
 *   {"city": "Paris"}
 *   ```<｜tool▁call▁end｜>
 *   <｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time
 *   ```json
 *   {}
 *   ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>
 *
 * possibly after some text (its reasoning, a <think> block, is split off
 * before this parser sees the reply). In a real vocabulary the tags are
 * single tokens, shown in the text (src/tokenizer/vocab.c).
 *
 * hermes.c's machine finds the blocks between <｜tool▁calls▁begin｜> and
 * <｜tool▁calls▁end｜> (text before and after as for Hermes' blocks:
 * whitespace alone next to calls is the format's, other text is content).
 * This file reads one block: whitespace, then one or more calls, each
 * <｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME, whitespace, a JSON object
 * (in a ```json fence or not: the fence closes when it opens), whitespace,
 * <｜tool▁call▁end｜>; whitespace between the tags free. NAME must be one of
 * the request's functions; the arguments are the object as the model wrote
 * it. A block is calls only when all of it is: one bad call (an unknown
 * function, JSON that is not an object, text between the tags) leaves the
 * whole block text, tags and all, so no call is made up from a block the
 * model did not write whole. A reply that ends inside a block (max_tokens,
 * a stop string, the end of the sequence) is read the same way, but for
 * its end: the last call may lack its <｜tool▁call▁end｜> (or have it cut
 * short), and the block's closing tag may be cut short; a call cut before
 * its JSON closed leaves the block text.
 */
#include <stdlib.h>
#include <string.h>

#include "server/internal.h"

#define MAX_NAME 256

/* s[i, n) is a proper start of lit (the text was cut inside it). */
static int cut_in(const char *s, size_t n, size_t i, const char *lit)
{
    return n - i < strlen(lit) && !memcmp(s + i, lit, n - i);
}

struct ds_call {
    size_t name, name_len, args, args_len;
};

/* One call from s[*at] (at its <｜tool▁call▁begin｜>): 1 with c filled and
 * *at after it, or 0. open: the block did not close, so the call may be
 * the last and end with the text. */
static int one_call(const struct ifl_hermes *t, const char *s, size_t n, size_t *at, int open,
                    struct ds_call *c)
{
    size_t i = *at;
    if (!ifl_reply_starts(s, n, i, IFL_DS_CALL_BEGIN))
        return 0;
    i = ifl_reply_skip_ws(s, n, i + strlen(IFL_DS_CALL_BEGIN));
    if (!ifl_reply_starts(s, n, i, "function"))
        return 0;
    i = ifl_reply_skip_ws(s, n, i + strlen("function"));
    if (!ifl_reply_starts(s, n, i, IFL_DS_TOOL_SEP))
        return 0;
    i = ifl_reply_skip_ws(s, n, i + strlen(IFL_DS_TOOL_SEP));
    size_t j = i;
    while (j < n && ifl_reply_name_char(s[j]))
        j++;
    if (j == i || j - i > MAX_NAME)
        return 0;
    c->name = i;
    c->name_len = j - i;
    if (t->names) {
        char key[MAX_NAME + 1];
        memcpy(key, s + i, j - i);
        key[j - i] = 0;
        if (!json_object_get(t->names, key))
            return 0;
    }
    i = ifl_reply_skip_ws(s, n, j);
    int fence = ifl_reply_starts(s, n, i, "```");
    if (fence) {
        i += 3;
        if (ifl_reply_starts(s, n, i, "json"))
            i += 4;
        i = ifl_reply_skip_ws(s, n, i);
    }
    if (i >= n || s[i] != '{')
        return 0;
    struct ifl_reply_json js = {0};
    size_t end = i;
    while (end < n && !ifl_reply_json_byte(&js, s[end]))
        end++;
    if (end == n)
        return 0; /* the object never closed */
    end++;
    json_t *v = json_loadb(s + i, end - i, 0, NULL);
    int obj = json_is_object(v);
    json_decref(v);
    if (!obj)
        return 0;
    c->args = i;
    c->args_len = end - i;
    i = ifl_reply_skip_ws(s, n, end);
    if (fence) {
        if (ifl_reply_starts(s, n, i, "```"))
            i = ifl_reply_skip_ws(s, n, i + 3);
        else if (open && cut_in(s, n, i, "```"))
            i = n;
        else
            return 0;
    }
    if (ifl_reply_starts(s, n, i, IFL_DS_CALL_END))
        i += strlen(IFL_DS_CALL_END);
    else if (!open || (i < n && !cut_in(s, n, i, IFL_DS_CALL_END)))
        return 0;
    else
        i = n; /* the last call, cut at (or in) its end tag */
    *at = i;
    return 1;
}

/* The calls of the block in blk, c[] (NULL: only counted) filled: how
 * many, or 0 when the block is not all calls. */
static size_t read_block(const struct ifl_hermes *t, int closed, struct ds_call *c)
{
    const char *s = t->blk.p ? t->blk.p : "";
    size_t n = t->blk.len, i = ifl_reply_skip_ws(s, n, 0), k = 0;
    struct ds_call one;
    while (i < n) {
        if (!closed && cut_in(s, n, i, IFL_DS_CALLS_END))
            break; /* the block's closing tag, cut short */
        if (!one_call(t, s, n, &i, !closed, c ? &c[k] : &one))
            return 0;
        k++;
        i = ifl_reply_skip_ws(s, n, i);
    }
    return k;
}

static int block(struct ifl_hermes *t, int closed, struct ifl_reply_out *o)
{
    size_t k = read_block(t, closed, NULL);
    struct ds_call *c = k ? malloc(k * sizeof *c) : NULL;
    if (!c) {
        if (k)
            o->oom = 1;
        return 0;
    }
    read_block(t, closed, c);
    for (size_t i = 0; i < k; i++) {
        json_t *name = json_stringn(t->blk.p + c[i].name, c[i].name_len);
        if (name)
            ifl_reply_add_call(o, t->id_base, t->n_calls, name, t->blk.p + c[i].args,
                               c[i].args_len);
        else
            o->oom = 1;
        json_decref(name);
        t->n_calls++;
    }
    free(c);
    return 1;
}

void ifl_deepseek_init(struct ifl_hermes *t, json_t *names)
{
    ifl_hermes_init(t, names);
    t->open = IFL_DS_CALLS_BEGIN;
    t->close = IFL_DS_CALLS_END;
    t->block_fn = block;
}
