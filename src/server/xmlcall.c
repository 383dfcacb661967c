/*
 * Tool calls in Qwen3-Coder's XML format (Qwen3-Coder, Qwen3.5, Nemotron 3
 * Nano, StepFun 3.5 Flash), read back into what an OpenAI client expects.
 * Such a model answers a call as
 *
 *   <tool_call>
 *   <function=get_weather>
 *   <parameter=city>
 *   Paris
 *   </parameter>
 *   <parameter=days>
 *   3
 *   </parameter>
 *   </function>
 *   </tool_call>
 *
 * possibly several blocks, possibly after some text. hermes.c's machine
 * finds the blocks (text before and between them as it does for Hermes'
 * JSON blocks: whitespace alone next to a call is the format's, other text
 * is content); a parameter's value is opaque to it, so a value may hold
 * "</tool_call>". This file reads one block.
 *
 * A block is a call when it is, whitespace between the tags free,
 * <function=NAME> naming one of the request's functions, then
 * <parameter=KEY>VALUE</parameter> any number of times, then </function>.
 * The value is the text between the tags less one newline after the
 * opening tag and one before the closing tag (the template writes both).
 * A missing </function> is forgiven when </tool_call> came (the model
 * closed its block); a reply that ends inside the block (max_tokens, a
 * stop string) is a call only when </function> came. Any other block (an
 * unknown function, a parameter cut short, text between the tags) is text,
 * kept in content with its tags: text is never lost, and no call is made
 * up from a block the model did not finish.
 *
 * The arguments are a JSON object of the parameters in the order written
 * (a key given twice: the last value, in the first place). Each value is
 * typed by the function's parameters schema: a parameter whose schema
 * allows other kinds than a string (type integer, number, boolean, null,
 * object, array; or several types; or anyOf/oneOf members or enum values
 * of those kinds) has its text read as JSON, and kept as written when it is
 * one of those kinds; Python's True, False and None (what these templates
 * write for a boolean or null in history) are taken for a boolean or null
 * parameter that does not also take strings. Anything else, and a
 * parameter the schema does not name, is the text as a JSON string.
 */
#include <stdlib.h>
#include <string.h>

#include "server/internal.h"

#define FN_OPEN "<function="
#define FN_CLOSE "</function>"
#define P_OPEN "<parameter="
#define P_CLOSE "</parameter>"
#define BLOCK_CLOSE "</tool_call>"
#define MAX_NAME 256

/* The name of <function=NAME> or <parameter=NAME> from i (after the '='):
 * its length, with *end after the '>', or 0 when it is no name. */
static size_t tag_name(const char *s, size_t n, size_t i, size_t *end)
{
    size_t j = i;
    while (j < n && j - i <= MAX_NAME && s[j] != '>' && s[j] != '<' && s[j] != '\n' && s[j])
        j++;
    if (j >= n || s[j] != '>' || j == i || j - i > MAX_NAME)
        return 0;
    *end = j + 1;
    return j - i;
}

static int kind_bit(const char *t)
{
    static const char *const names[] = {"string", "integer", "number", "boolean",
                                        "null",   "object",  "array"};
    for (int k = 0; t && k < 7; k++)
        if (!strcmp(t, names[k]))
            return 1 << k;
    return 0;
}

static int value_kind(json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_STRING:
        return IFL_XML_K_STRING;
    case JSON_INTEGER:
        return IFL_XML_K_INTEGER | IFL_XML_K_NUMBER;
    case JSON_REAL:
        return IFL_XML_K_NUMBER;
    case JSON_TRUE:
    case JSON_FALSE:
        return IFL_XML_K_BOOLEAN;
    case JSON_NULL:
        return IFL_XML_K_NULL;
    case JSON_OBJECT:
        return IFL_XML_K_OBJECT;
    default:
        return IFL_XML_K_ARRAY;
    }
}

static int kinds(json_t *schema, json_t *root, int depth)
{
    if (!json_is_object(schema) || depth > 8)
        return 0;
    const char *ref = json_string_value(json_object_get(schema, "$ref"));
    if (ref) {
        static const char *const bases[] = {"$defs", "definitions"};
        for (int b = 0; b < 2; b++) {
            size_t l = strlen(bases[b]);
            if (!strncmp(ref, "#/", 2) && !strncmp(ref + 2, bases[b], l) && ref[2 + l] == '/')
                return kinds(json_object_get(json_object_get(root, bases[b]), ref + 3 + l), root,
                             depth + 1);
        }
        return 0;
    }
    int m = 0;
    json_t *ty = json_object_get(schema, "type"), *e;
    size_t i;
    if (json_is_string(ty))
        m = kind_bit(json_string_value(ty));
    json_array_foreach(ty, i, e) m |= kind_bit(json_string_value(e));
    if (m)
        return m;
    static const char *const alts[] = {"anyOf", "oneOf"};
    for (int a = 0; a < 2; a++)
        json_array_foreach(json_object_get(schema, alts[a]), i, e) m |= kinds(e, root, depth + 1);
    if (m)
        return m;
    json_array_foreach(json_object_get(schema, "enum"), i, e) m |= value_kind(e);
    if (json_object_get(schema, "const"))
        m |= value_kind(json_object_get(schema, "const"));
    return m;
}

int ifl_xml_kinds(json_t *schema, json_t *root)
{
    return kinds(schema, root, 0);
}

/* A parameter's value v (vl bytes) as JSON text appended to args, typed by
 * its kinds (see the file's comment). 0, or -1 when the text is not UTF-8
 * or holds a NUL (the block is then no call). */
static int add_value(struct ifl_buf *args, const char *v, size_t vl, int k)
{
    if (k & ~IFL_XML_K_STRING) {
        size_t a = ifl_reply_skip_ws(v, vl, 0), b = vl;
        while (b > a && ifl_reply_ws(v[b - 1]))
            b--;
        json_t *j = json_loadb(v + a, b - a, JSON_DECODE_ANY, NULL);
        int ok = j && !json_is_string(j) && (value_kind(j) & k);
        json_decref(j);
        if (ok) {
            ifl_buf_add(args, v + a, b - a);
            return 0;
        }
        static const char *const py[][2] = {{"True", "true"}, {"False", "false"}, {"None", "null"}};
        for (int i = 0; i < 3 && !(k & IFL_XML_K_STRING); i++)
            if (b - a == strlen(py[i][0]) && !memcmp(v + a, py[i][0], b - a) &&
                (k & (i < 2 ? IFL_XML_K_BOOLEAN : IFL_XML_K_NULL))) {
                ifl_buf_add(args, py[i][1], strlen(py[i][1]));
                return 0;
            }
    }
    if (memchr(v, 0, vl))
        return -1; /* a client's JSON parser may refuse \u0000 */
    json_t *str = json_stringn(v, vl);
    char *d = str ? json_dumps(str, JSON_ENCODE_ANY) : NULL;
    json_decref(str);
    if (!d)
        return -1;
    ifl_buf_add(args, d, strlen(d));
    free(d);
    return 0;
}

/* hermes.c's block reader for this format: the block in t->blk. */
static int block(struct ifl_hermes *t, int closed, struct ifl_reply_out *o)
{
    const char *s = t->blk.p ? t->blk.p : "";
    size_t n = t->blk.len, i = ifl_reply_skip_ws(s, n, 0), end;
    if (!ifl_reply_starts(s, n, i, FN_OPEN))
        return 0;
    size_t nl = tag_name(s, n, i + strlen(FN_OPEN), &end);
    json_t *name = nl ? json_stringn(s + i + strlen(FN_OPEN), nl) : NULL;
    json_t *params = name && t->names ? json_object_get(t->names, json_string_value(name)) : NULL;
    if (!name || (t->names && !params)) {
        json_decref(name);
        return 0;
    }
    json_t *props = json_object_get(params, "properties");
    json_t *vals = json_object(); /* key -> its value's JSON text */
    struct ifl_buf v = {0};
    int ok = 0;
    for (i = end;;) {
        i = ifl_reply_skip_ws(s, n, i);
        if (ifl_reply_starts(s, n, i, P_OPEN)) {
            size_t kl = tag_name(s, n, i + strlen(P_OPEN), &end);
            const char *close = kl ? memmem(s + end, n - end, P_CLOSE, strlen(P_CLOSE)) : NULL;
            if (!close)
                break; /* no name, or cut short */
            size_t v0 = end, v1 = (size_t)(close - s);
            if (v0 < v1 && s[v0] == '\n')
                v0++;
            if (v1 > v0 && s[v1 - 1] == '\n')
                v1--;
            char key[MAX_NAME + 1];
            memcpy(key, s + i + strlen(P_OPEN), kl);
            key[kl] = 0;
            json_t *kj = json_stringn(key, kl);
            int key_ok = kj != NULL; /* else not UTF-8: no call */
            json_decref(kj);
            v.len = 0;
            if (!key_ok ||
                add_value(&v, s + v0, v1 - v0, ifl_xml_kinds(json_object_get(props, key), params)))
                break;
            json_t *text = json_stringn_nocheck(v.p ? v.p : "", v.len);
            if (!text || json_object_set_new(vals, key, text)) {
                o->oom = 1;
                break;
            }
            i = (size_t)(close - s) + strlen(P_CLOSE);
        } else if (ifl_reply_starts(s, n, i, FN_CLOSE)) {
            /* the rest: whitespace, and (the reply cut there) the closing tag's start */
            i = ifl_reply_skip_ws(s, n, i + strlen(FN_CLOSE));
            ok = i == n ||
                 (!closed && n - i < strlen(BLOCK_CLOSE) && !memcmp(s + i, BLOCK_CLOSE, n - i));
            break;
        } else {
            ok = i == n && closed; /* </tool_call> came: </function> forgiven */
            break;
        }
    }
    if (ok) {
        struct ifl_buf args = {0};
        const char *key;
        json_t *text;
        ifl_buf_add(&args, "{", 1);
        json_object_foreach(vals, key, text)
        {
            json_t *k = json_string(key);
            char *kd = k ? json_dumps(k, JSON_ENCODE_ANY) : NULL;
            json_decref(k);
            if (!kd) {
                ok = 0;
                break;
            }
            ifl_buf_addf(&args, "%s%s: ", args.len > 1 ? ", " : "", kd);
            ifl_buf_add(&args, json_string_value(text), json_string_length(text));
            free(kd);
        }
        ifl_buf_add(&args, "}", 1);
        if (ok && !args.oom) {
            ifl_reply_add_call(o, t->id_base, t->n_calls, name, args.p, args.len);
            t->n_calls++;
        } else if (args.oom) {
            o->oom = 1;
        }
        ifl_buf_free(&args);
    }
    ifl_buf_free(&v);
    json_decref(vals);
    json_decref(name);
    return ok;
}

/* Split at each '<', such a text is a run without '<', then pieces "<"
 * xml-lt, each any text without '<' that does not begin "/parameter>":
 * nested choices of how far it follows that word. */
const char *ifl_xml_text_gbnf(void)
{
    return "xml-text ::= [^<]* ( \"<\" xml-lt )*\n"
           "xml-lt ::= ( [^/<] [^<]* | \"/\" ( [^p<] [^<]* | \"p\" ( [^a<] [^<]* | \"a\" ( [^r<] "
           "[^<]* | \"r\" ( [^a<] [^<]* | \"a\" ( [^m<] [^<]* | \"m\" ( [^e<] [^<]* | \"e\" ( "
           "[^t<] [^<]* | \"t\" ( [^e<] [^<]* | \"e\" ( [^r<] [^<]* | \"r\" ( [^><] [^<]* )? )? "
           ")? )? )? )? )? )? )? )? )?\n";
}

void ifl_xml_init(struct ifl_hermes *t, json_t *names)
{
    ifl_hermes_init(t, names);
    t->span_open = P_OPEN;
    t->span_close = P_CLOSE;
    t->block_fn = block;
}
