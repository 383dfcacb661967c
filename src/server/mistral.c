/*
 * Tool calls in Mistral's [TOOL_CALLS] format (Mistral Small 3.x,
 * Devstral, Ministral 3, Magistral), read back into what an OpenAI client
 * expects. Such a model answers a call as
 *
 *   [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}
 *
 * one such group per call, possibly after some text; Mistral Small 3.2's
 * template writes the call's id between them,
 * [TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{...},
 * and the older v3 tokenizer's models (Mistral 7B v0.3, Nemo) wrote
 * [TOOL_CALLS] [{"name": ..., "arguments": {...}}, ...]. In a real model's
 * vocabulary the bracketed tags are control tokens, which the vocabulary
 * shows as their text (src/tokenizer/vocab.c) so that they reach here.
 *
 * A group whose name is one of the request's functions and whose JSON is
 * an object is a call: its arguments are given as the model wrote them, its
 * id the model's (CALL_ID) or one made as Mistral's templates want them,
 * nine letters and digits. The JSON's end is found by reading it (strings
 * and nesting), not by looking for the next tag. Anything else is text, kept
 * in content as it stands: the tag and what follows it up to the byte that
 * ruled the group out (a name that is not one, a tag that is neither [ARGS]
 * nor [CALL_ID], JSON that is not an object), reading on from that byte; or
 * up to the JSON's end when it closes but does not parse; or to the reply's
 * end when it is cut inside a group. Whitespace alone between a call and
 * the next group or either end of the reply is the format's and is dropped;
 * other text outside groups is content as it stands.
 *
 * Streamed, text outside groups goes out at once but for bytes that may
 * begin [TOOL_CALLS] (and whitespace a call may follow); a group is held
 * until it is a call or ruled out; each call goes out when its JSON closes.
 * What decides is always a byte of the text, never where it was cut, so
 * the result is the same however the text is cut.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/internal.h"

#define TAG "[TOOL_CALLS]"
#define ARGS "[ARGS]"
#define CALL_ID "[CALL_ID]"
#define MAX_NAME 64

enum {
    M_OUT = 0, /* outside groups */
    M_NAME,    /* after [TOOL_CALLS]: the name (or the v3 form's '[') */
    M_ID,      /* after [CALL_ID]: the id */
    M_JSON     /* after [ARGS] (or the v3 form's '['): the JSON to its end */
};

void ifl_mistral_init(struct ifl_mistral *t, json_t *names)
{
    memset(t, 0, sizeof *t);
    t->names = names ? json_incref(names) : NULL;
}

void ifl_mistral_deinit(struct ifl_mistral *t)
{
    ifl_buf_free(&t->hold);
    ifl_buf_free(&t->grp);
    ifl_buf_free(&t->pend);
    json_decref(t->names);
    t->names = NULL;
}

void ifl_mistral_call_id(const char *id_base, int index, char out[10])
{
    static const char abc[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    uint64_t z = 0xcbf29ce484222325ull; /* FNV-1a of the base, then splitmix64 with the index */
    for (const char *p = id_base; *p; p++)
        z = (z ^ (unsigned char)*p) * 0x100000001b3ull;
    z += (uint64_t)(index + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    for (int i = 0; i < 9; i++, z /= 62)
        out[i] = abc[z % 62];
    out[9] = 0;
}

/* Text outside groups, as Hermes' (ifl_reply_text): whitespace alone
 * since the reply's start or the last call waits in pend. */
static void text(struct ifl_mistral *t, const char *s, size_t n, struct ifl_reply_out *o)
{
    ifl_reply_text(&t->seg_text, &t->pend, s, n, o);
}

/* The open group is text: the tag and what it has read. */
static void not_call(struct ifl_mistral *t, struct ifl_reply_out *o)
{
    text(t, TAG, strlen(TAG), o);
    text(t, t->grp.p ? t->grp.p : "", t->grp.len, o);
    t->grp.len = 0;
    t->state = M_OUT;
}

/* A call read: appended to o, the whitespace before its group dropped. */
static void add_call(struct ifl_mistral *t, const char *name, size_t nl, const char *raw, size_t rl,
                     struct ifl_reply_out *o)
{
    char id[MAX_NAME + 1];
    if (t->id_len) { /* the model's: at most MAX_NAME letters, digits, '_' and '-' */
        memcpy(id, t->grp.p + t->id, t->id_len);
        id[t->id_len] = 0;
    } else {
        ifl_mistral_call_id(t->id_base, t->n_calls, id);
    }
    json_t *nm = json_stringn(name, nl);
    if (nm)
        ifl_reply_add_call_id(o, id, t->n_calls, nm, raw, rl);
    else
        o->oom = 1;
    json_decref(nm);
    t->n_calls++;
    t->pend.len = 0;
    t->seg_text = 0;
}

static int known(const struct ifl_mistral *t, const char *name, size_t nl)
{
    char key[MAX_NAME + 1];
    if (!nl || nl > MAX_NAME)
        return 0;
    memcpy(key, name, nl);
    key[nl] = 0;
    return !t->names || json_object_get(t->names, key) != NULL;
}

/* The length of the JSON value s begins with (valid JSON). */
static size_t json_end(const char *s, size_t n)
{
    struct ifl_reply_json j = {0};
    for (size_t i = 0; i < n; i++)
        if (ifl_reply_json_byte(&j, s[i]))
            return i + 1;
    return n;
}

/* The v3 form's list, grp[json, end): all of it calls (each a known
 * "name" with an "arguments" object, or none for {}), appended to o, or 0
 * and nothing appended. */
static int take_list(struct ifl_mistral *t, size_t end, struct ifl_reply_out *o)
{
    const char *s = t->grp.p + t->json;
    json_t *v = json_loadb(s, end - t->json, 0, NULL);
    size_t i;
    json_t *e;
    int ok = json_array_size(v) > 0;
    json_array_foreach(v, i, e)
    {
        json_t *name = json_object_get(e, "name"), *args = json_object_get(e, "arguments");
        ok = ok && json_is_string(name) &&
             known(t, json_string_value(name), json_string_length(name)) &&
             (!args || json_is_object(args));
    }
    /* each element's text, for its arguments as written */
    size_t at = 1, n = end - t->json;
    json_array_foreach(ok ? v : NULL, i, e)
    {
        while (at < n && s[at] != '{')
            at++;
        size_t el = at + json_end(s + at, n - at);
        json_t *name = json_object_get(e, "name"), *args = json_object_get(e, "arguments");
        const char *raw = "{}";
        size_t rl = args ? ifl_reply_raw_member(s + at, el - at, "arguments", &raw) : 2;
        char *dumped = NULL;
        if (!rl && (dumped = json_dumps(args, JSON_REAL_PRECISION(17))))
            raw = dumped, rl = strlen(dumped);
        add_call(t, json_string_value(name), json_string_length(name), rl ? raw : NULL, rl, o);
        free(dumped);
        at = el;
    }
    json_decref(v);
    return ok;
}

/* The group's JSON closed at grp[end): a call (or the v3 form's calls), or
 * text. */
static void end_json(struct ifl_mistral *t, size_t end, struct ifl_reply_out *o)
{
    const char *g = t->grp.p;
    int ok;
    if (t->list) {
        ok = take_list(t, end, o);
    } else {
        json_t *v = json_loadb(g + t->json, end - t->json, 0, NULL);
        ok = json_is_object(v);
        json_decref(v);
        if (ok)
            add_call(t, g + t->name, t->name_len, g + t->json, end - t->json, o);
    }
    if (ok) {
        t->grp.len = 0;
        t->state = M_OUT;
    } else {
        not_call(t, o);
    }
}

/* Reads the JSON from h[i] on (into grp); the bytes it took. */
static size_t scan_json(struct ifl_mistral *t, const char *h, size_t i, size_t n,
                        struct ifl_reply_out *o)
{
    size_t from = i;
    for (; i < n; i++) {
        if (ifl_reply_json_byte(&t->js, h[i])) {
            ifl_buf_add(&t->grp, h + from, i + 1 - from);
            end_json(t, t->grp.len, o);
            return i + 1 - from;
        }
    }
    ifl_buf_add(&t->grp, h + from, n - from);
    return n - from;
}

/* Whether h[i..n) begins with tag: 1, 0 when it cannot, -1 when it may
 * (n - i bytes of it so far). */
static int starts(const char *h, size_t i, size_t n, const char *tag)
{
    size_t tl = strlen(tag), m = n - i < tl ? n - i : tl;
    if (memcmp(h + i, tag, m))
        return 0;
    return m == tl ? 1 : -1;
}

/* One step of a group at h[i] (i < n): the bytes it took, or 0 when it
 * waits for more. A group ruled out takes no byte: its text is given and
 * the byte is read again outside groups. */
static size_t group_step(struct ifl_mistral *t, const char *h, size_t i, size_t n,
                         struct ifl_reply_out *o)
{
    char c = h[i];
    if (t->state == M_JSON) {
        if (!t->js.depth) { /* whitespace, then the JSON's first byte */
            if (ifl_reply_ws(c)) {
                ifl_buf_add(&t->grp, &c, 1);
                return 1;
            }
            if (c != (t->list ? '[' : '{')) {
                not_call(t, o);
                return 0;
            }
            t->json = t->grp.len;
            t->js = (struct ifl_reply_json){0};
        }
        return scan_json(t, h, i, n, o);
    }
    int id = t->state == M_ID;
    size_t len = id ? t->id_len : t->name_len;
    if (!id && !len && ifl_reply_ws(c)) { /* before the name */
        ifl_buf_add(&t->grp, &c, 1);
        t->name = t->grp.len;
        return 1;
    }
    if (!id && !len && c == '[') { /* the v3 form: a list of objects */
        size_t j = i + 1;
        while (j < n && ifl_reply_ws(h[j]))
            j++;
        if (j == n)
            return 0;
        if (h[j] != '{') {
            not_call(t, o);
            return 0;
        }
        t->list = 1;
        t->state = M_JSON;
        return group_step(t, h, i, n, o);
    }
    if (ifl_reply_name_char(c) && (!id || c != '.') && len < MAX_NAME) {
        ifl_buf_add(&t->grp, &c, 1);
        if (id)
            t->id_len++;
        else
            t->name_len++;
        return 1;
    }
    int a = len ? starts(h, i, n, ARGS) : 0, d = len && !id ? starts(h, i, n, CALL_ID) : 0;
    if (a < 0 || d < 0)
        return 0;
    if (a && known(t, t->grp.p + t->name, t->name_len)) {
        ifl_buf_add(&t->grp, ARGS, strlen(ARGS));
        t->state = M_JSON;
        t->js = (struct ifl_reply_json){0};
        return strlen(ARGS);
    }
    if (d) {
        ifl_buf_add(&t->grp, CALL_ID, strlen(CALL_ID));
        t->state = M_ID;
        t->id = t->grp.len;
        return strlen(CALL_ID);
    }
    not_call(t, o);
    return 0;
}

void ifl_mistral_push(struct ifl_mistral *t, const char *s, size_t n, struct ifl_reply_out *o)
{
    ifl_buf_add(&t->hold, s, n);
    if (t->hold.oom || t->grp.oom || t->pend.oom)
        o->oom = 1;
    const char *h = t->hold.p;
    size_t hn = t->hold.len, i = 0;
    while (i < hn) {
        if (t->state == M_OUT) {
            int whole;
            size_t at = i + ifl_reply_find_tag(h + i, hn - i, TAG, &whole);
            text(t, h + i, at - i, o);
            i = at;
            if (!whole)
                break;
            i += strlen(TAG);
            t->state = M_NAME;
            t->grp.len = t->name = t->name_len = t->id = t->id_len = t->json = 0;
            t->list = 0;
            t->js = (struct ifl_reply_json){0};
            continue;
        }
        size_t took = group_step(t, h, i, hn, o);
        if (!took && t->state != M_OUT)
            break; /* waits for more */
        i += took;
    }
    if (h)
        memmove(t->hold.p, h + i, hn - i);
    t->hold.len = hn - i;
}

void ifl_mistral_finish(struct ifl_mistral *t, struct ifl_reply_out *o)
{
    if (t->state != M_OUT) /* a group cut short: text, all of it */
        not_call(t, o);
    text(t, t->hold.p ? t->hold.p : "", t->hold.len, o);
    t->hold.len = 0;
    if (!t->n_calls) /* all the reply was whitespace */
        ifl_buf_add(&o->content, t->pend.p, t->pend.len);
    t->pend.len = 0;
}
