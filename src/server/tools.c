/*
 * Function tools in a chat request: `tools`, `tool_choice` and
 * `parallel_tool_calls` checked against what the chat template can do
 * (messages.c found its format: gpt-oss's harmony, Hermes-style
 * <tool_call> blocks, Llama 3.1's call objects or Mistral's [TOOL_CALLS]
 * groups), and a forced call turned into a grammar.
 *
 * tool_choice "auto" (the default) shows the tools to the template and
 * reads the reply for calls; "none" hides them and reads nothing;
 * "required" and {"type": "function", "function": {"name": X}} force a
 * call: the output is constrained (src/guide) to the format's call blocks,
 *
 *   <tool_call>\n{"name": "X", "arguments": ARGS}\n</tool_call>
 *
 * with ARGS following that function's parameters schema; "required" takes
 * any of the tools, one call or (parallel_tool_calls, the default) several
 * separated by newlines; a named function gets exactly one call.
 * Llama 3.1's format is the object alone, {"name": "X", "parameters":
 * ARGS}, several separated by "; " only where the template takes several
 * calls back in one turn (Llama 3.1's own raises on them: one call).
 * Mistral's is X[ARGS]ARGS after a [TOOL_CALLS] the prompt ends with (in a
 * Mistral vocabulary a control token, which the model writes itself but a
 * grammar never lets it), several separated by [TOOL_CALLS] written as
 * text.
 *
 * With harmony a call is a message of its own, and its header is made of
 * control tokens, which guided decoding never lets a model write. So the
 * header is written into the prompt instead, as gpt-oss's template writes
 * a call, " to=functions.NAME<|channel|>commentary json<|message|>", and
 * the output is the arguments alone (the reply parser is told the header).
 * "required" with several tools leaves the name to the model: the prompt
 * ends at " to=functions." and the grammar writes the name and the rest of
 * the header as text (the same characters, in ordinary tokens). Either way
 * it is one call: the turn ends with <|call|>.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "guide/guide.h"
#include "server/internal.h"

#define MAX_TOOLS 256

static int fail(char *param, const char *name, char *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int fail(char *param, const char *name, char *err, const char *fmt, ...)
{
    snprintf(param, 64, "%s", name);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, IFL_ERR_LEN, fmt, ap);
    va_end(ap);
    return 400;
}

/* OpenAI's function names (letters, digits, '_' and '-', at most 64),
 * and '.': they are written into grammars and prompts as they stand. */
static int good_name(const char *s)
{
    size_t n = strlen(s);
    if (!n || n > 64)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (!ifl_reply_name_char(s[i]))
            return 0;
    return 1;
}

/* The grammar rules of tool i's arguments, appended to g: rule t<i>-s<N>
 * (a function without parameters takes {}). 0, or 400 with param/err. */
static int args_rules(json_t *params, size_t i, struct ifl_buf *g, char *rule, size_t cap,
                      int forced, char *param, char *err)
{
    char pfx[32];
    snprintf(pfx, sizeof pfx, "t%zu-", i);
    if (!params || json_is_null(params)) {
        snprintf(rule, cap, "\"{}\"");
        return 0;
    }
    char *text = json_dumps(params, JSON_COMPACT);
    char *rules = NULL, why[IFL_ERR_LEN] = "";
    int top = -1;
    int rc = text ? ifl_guide_schema_rules(&rules, &top, text, strlen(text), pfx, why) : IFL_ENOMEM;
    free(text);
    if (rc == IFL_ENOMEM)
        return fail(param, "tools", err, "out of memory"), 500;
    if (rc == IFL_EUNSUPPORTED && !forced)
        return 0; /* not needed: nothing is forced */
    if (rc)
        return fail(param, "tools", err, "tools[%zu].function.parameters: %s%s", i,
                    rc == IFL_EUNSUPPORTED ? "a call to it cannot be forced: " : "", why);
    if (g)
        ifl_buf_add(g, rules, strlen(rules));
    free(rules);
    snprintf(rule, cap, "%ss%d", pfx, top);
    return 0;
}

/* ---- the XML format's forced calls ---- */

/* s as a GBNF literal, quotes and all. */
static void gbnf_lit(struct ifl_buf *g, const char *s, size_t n)
{
    ifl_buf_add(g, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            ifl_buf_addf(g, "\\%c", c);
        else if (c < 0x20)
            ifl_buf_addf(g, "\\x%02x", c);
        else
            ifl_buf_add(g, s + i, 1);
    }
    ifl_buf_add(g, "\"", 1);
}

/* Whether schema o has no keyword but annotations and those named in also
 * (a NULL-ended list). */
static int only_keys(json_t *o, const char *const *also)
{
    static const char *const notes[] = {"description", "title",     "examples", "default",
                                        "$comment",    "$id",       "$schema",  "deprecated",
                                        "readOnly",    "writeOnly", "strict",   NULL};
    const char *key;
    json_t *v;
    json_object_foreach(o, key, v)
    {
        int known = 0;
        for (int i = 0; notes[i] && !known; i++)
            known = !strcmp(key, notes[i]);
        for (int i = 0; also && also[i] && !known; i++)
            known = !strcmp(key, also[i]);
        if (!known)
            return 0;
    }
    return 1;
}

/* A property's schema through its $refs to params' $defs or definitions. */
static json_t *xml_resolve(json_t *ps, json_t *params)
{
    for (int depth = 0; depth < 8 && json_is_object(ps); depth++) {
        const char *ref = json_string_value(json_object_get(ps, "$ref"));
        if (!ref || json_object_size(ps) != 1)
            break;
        if (!strncmp(ref, "#/$defs/", 8))
            ps = json_object_get(json_object_get(params, "$defs"), ref + 8);
        else if (!strncmp(ref, "#/definitions/", 14))
            ps = json_object_get(json_object_get(params, "definitions"), ref + 14);
        else
            break;
    }
    return ps;
}

/* The value of property ps (NULL: a required name the schema does not
 * describe) of function params: its rule's name in rule, any rules it
 * needs appended to g under prefix pfx. 0; IFL_EUNSUPPORTED or
 * IFL_EFORMAT with why; IFL_ENOMEM. */
static int xml_value_rule(json_t *ps, json_t *params, const char *pfx, struct ifl_buf *g,
                          char *rule, size_t cap, char *why)
{
    static const char *const type_only[] = {"type", NULL};
    static const char *const lengths[] = {"type", "minLength", "maxLength", NULL};
    static const char *const listed[] = {"type", "enum", "const", NULL};
    json_t *r = xml_resolve(ps, params);
    int k = ifl_xml_kinds(ps, params);
    if (!ps || (!k && json_is_object(r) && only_keys(r, NULL)) ||
        ((k & IFL_XML_K_STRING) && only_keys(r, type_only))) {
        snprintf(rule, cap, "xml-text"); /* any text: a string, or what it reads as */
        return 0;
    }
    if (k == IFL_XML_K_STRING && only_keys(r, lengths)) {
        json_t *lo = json_object_get(r, "minLength"), *hi = json_object_get(r, "maxLength");
        json_int_t a = json_integer_value(lo), b = json_integer_value(hi);
        if ((lo && !json_is_integer(lo)) || (hi && !json_is_integer(hi)) || a < 0 ||
            (hi && (b < a || b > 10000)) || a > 10000) {
            snprintf(why, IFL_ERR_LEN, "minLength and maxLength: 0 to 10000, in order");
            return IFL_EUNSUPPORTED;
        }
        snprintf(rule, cap, "%sv", pfx);
        if (hi)
            ifl_buf_addf(g, "%s ::= [^<]{%lld,%lld}\n", rule, (long long)a, (long long)b);
        else
            ifl_buf_addf(g, "%s ::= [^<]{%lld,}\n", rule, (long long)a);
        return 0;
    }
    if (k == IFL_XML_K_STRING && only_keys(r, listed) &&
        (json_object_get(r, "enum") || json_object_get(r, "const"))) {
        json_t *list = json_object_get(r, "enum"), *c = json_object_get(r, "const"), *e;
        size_t i, n = 0;
        snprintf(rule, cap, "%sv", pfx);
        ifl_buf_addf(g, "%s ::= ", rule);
        for (i = 0; i < json_array_size(list) + (c != NULL); i++) {
            e = i < json_array_size(list) ? json_array_get(list, i) : c;
            const char *v = json_string_value(e);
            if (!v || memmem(v, json_string_length(e), "</parameter>", 12)) {
                snprintf(why, IFL_ERR_LEN, "enum and const: strings without </parameter>");
                return IFL_EUNSUPPORTED;
            }
            ifl_buf_addf(g, "%s", n++ ? " | " : "");
            gbnf_lit(g, v, json_string_length(e));
        }
        ifl_buf_addf(g, "%s\n", n ? "" : "[^\\x00-\\U0010FFFF]");
        return 0;
    }
    if (k && !(k & IFL_XML_K_STRING)) { /* JSON of the schema's kinds */
        json_t *sub = json_deep_copy(ps);
        static const char *const defs[] = {"$defs", "definitions"};
        for (int d = 0; sub && d < 2; d++)
            if (json_object_get(params, defs[d]) && !json_object_get(sub, defs[d]))
                json_object_set(sub, defs[d], json_object_get(params, defs[d]));
        char *text = sub ? json_dumps(sub, JSON_COMPACT) : NULL;
        json_decref(sub);
        if (!text)
            return IFL_ENOMEM;
        if (strstr(text, "\"$ref\":\"#\"") || strstr(text, "\"$ref\":\"#/properties")) {
            free(text);
            snprintf(why, IFL_ERR_LEN, "a $ref to the whole parameters schema");
            return IFL_EUNSUPPORTED;
        }
        char *rules = NULL;
        int top = -1;
        int rc = ifl_guide_schema_rules(&rules, &top, text, strlen(text), pfx, why);
        free(text);
        if (rc)
            return rc;
        ifl_buf_add(g, rules, strlen(rules));
        free(rules);
        snprintf(rule, cap, "%ss%d", pfx, top);
        return 0;
    }
    snprintf(why, IFL_ERR_LEN,
             "its value is a string with keywords the XML format cannot follow (only "
             "minLength, maxLength, enum and const)");
    return IFL_EUNSUPPORTED;
}

/* Tool i's parameters (schema params) in the XML format appended to g
 * (NULL: checked only): rule t<i>-x, or "" in rule when there are none to
 * write. Required parameters come first, each once; the others may follow,
 * each once, in the schema's order. 0, or 400/500 with param/err. */
static int xml_args_rules(json_t *params, size_t i, struct ifl_buf *g, char *rule, size_t cap,
                          char *param, char *err)
{
    static const char *const top_keys[] = {
        "type", "properties", "required", "additionalProperties", "$defs", "definitions", NULL};
    struct ifl_buf own = {0}, seq = {0};
    if (!g)
        g = &own;
    rule[0] = 0;
    char why[IFL_ERR_LEN] = "", where[160] = "";
    int rc = 0;
    json_t *props = json_object_get(params, "properties");
    json_t *req = json_object_get(params, "required");
    if (params && !json_is_null(params) && !only_keys(params, top_keys)) {
        snprintf(why, IFL_ERR_LEN,
                 "the XML format writes named parameters only (type, properties, required, "
                 "additionalProperties, $defs)");
        rc = IFL_EUNSUPPORTED;
    }
    size_t n_req = json_array_size(req), n_par = 0;
    /* the required ones, then the others: pass 0 and pass 1 */
    for (int pass = 0; pass < 2 && !rc; pass++) {
        size_t n_items = pass ? json_object_size(props) : n_req;
        void *it = pass ? json_object_iter(props) : NULL;
        for (size_t r = 0; r < n_items && !rc; r++) {
            const char *key;
            if (pass) {
                key = json_object_iter_key(it);
                it = json_object_iter_next(props, it);
                int is_req = 0;
                for (size_t q = 0; q < n_req && !is_req; q++) {
                    const char *rq = json_string_value(json_array_get(req, q));
                    is_req = rq && !strcmp(rq, key);
                }
                if (is_req)
                    continue;
            } else {
                key = json_string_value(json_array_get(req, r));
                int twice = 0;
                for (size_t q = 0; key && q < r && !twice; q++)
                    twice = json_equal(json_array_get(req, q), json_array_get(req, r));
                if (!key || twice)
                    continue;
            }
            size_t kl = strlen(key);
            snprintf(where, sizeof where, ".properties.%.64s", key);
            if (!kl || kl > 256 || strpbrk(key, "<>\n")) {
                snprintf(why, IFL_ERR_LEN, "the XML format cannot write this parameter's name");
                rc = IFL_EUNSUPPORTED;
                break;
            }
            char pfx[32], vrule[64];
            snprintf(pfx, sizeof pfx, "t%zu-p%zu-", i, n_par);
            rc = xml_value_rule(json_object_get(props, key), params, pfx, g, vrule, sizeof vrule,
                                why);
            if (rc)
                break;
            ifl_buf_addf(g, "t%zu-p%zu ::= \"<parameter=\" ", i, n_par);
            gbnf_lit(g, key, kl);
            ifl_buf_addf(g, " \">\\n\" %s \"\\n</parameter>\\n\"\n", vrule);
            ifl_buf_addf(&seq, " t%zu-p%zu%s", i, n_par, pass ? "?" : "");
            n_par++;
        }
    }
    if (!rc && n_par) {
        ifl_buf_addf(g, "t%zu-x ::=%s\n", i, seq.p);
        snprintf(rule, cap, "t%zu-x", i);
    }
    int oom = rc == IFL_ENOMEM || g->oom || seq.oom;
    ifl_buf_free(&own);
    ifl_buf_free(&seq);
    if (oom)
        return fail(param, "tools", err, "out of memory"), 500;
    if (rc)
        return fail(param, "tools", err, "tools[%zu].function.parameters%s: %s%s", i,
                    rc == IFL_EUNSUPPORTED ? where : "",
                    rc == IFL_EUNSUPPORTED ? "a call to it cannot be forced: " : "", why);
    return 0;
}

int ifl_chat_tools_read(struct ifl_server *s, json_t *b, struct ifl_chat_tools *t, char *param,
                        char *err)
{
    memset(t, 0, sizeof *t);
    t->parallel = 1;
    t->multi = !s->chat_llama3 || s->chat_llama3 == 2;
    int fmt = ifl_server_tool_format(s);
    if (!fmt)
        return 0; /* tools are refused as unsupported (openai.c) */
    json_t *tl = json_object_get(b, "tools"), *tc = json_object_get(b, "tool_choice");
    json_t *ptc = json_object_get(b, "parallel_tool_calls");
    static const char choice_msg[] =
        "tool_choice: \"auto\", \"none\", \"required\" or {\"type\": \"function\", "
        "\"function\": {\"name\": ...}}";
    int none = 0;
    if (json_is_string(tc)) {
        const char *v = json_string_value(tc);
        if (!strcmp(v, "required"))
            t->forced = 1;
        else if (!strcmp(v, "none"))
            none = 1;
        else if (strcmp(v, "auto"))
            return fail(param, "tool_choice", err, "%s", choice_msg);
    } else if (json_is_object(tc)) {
        const char *ty = json_string_value(json_object_get(tc, "type"));
        json_t *f = json_object_get(tc, "function");
        const char *name = json_string_value(json_object_get(f, "name"));
        if (!ty || strcmp(ty, "function") || !name)
            return fail(param, "tool_choice", err, "%s", choice_msg);
        t->forced = 2;
        t->forced_name = name;
    } else if (tc && !json_is_null(tc)) {
        return fail(param, "tool_choice", err, "%s", choice_msg);
    }
    if (ptc && !json_is_null(ptc)) {
        if (!json_is_boolean(ptc))
            return fail(param, "parallel_tool_calls", err,
                        "parallel_tool_calls: must be true or false");
        t->parallel = json_is_true(ptc);
    }
    if (!tl || json_is_null(tl)) {
        if (t->forced)
            return fail(param, "tool_choice", err,
                        "tool_choice: %s needs tools, and the request gives none",
                        t->forced == 1 ? "\"required\"" : "a named function");
        return 0;
    }
    if (!json_is_array(tl) || json_array_size(tl) > MAX_TOOLS)
        return fail(param, "tools", err, "tools: must be a list of at most %d functions",
                    MAX_TOOLS);
    if (!json_array_size(tl) && t->forced)
        return fail(param, "tool_choice", err, "tool_choice: %s needs tools, and the list is empty",
                    t->forced == 1 ? "\"required\"" : "a named function");
    json_t *names = json_object();
    if (!names)
        return fail(param, "tools", err, "out of memory"), 500;
    size_t i;
    json_t *e;
    json_array_foreach(tl, i, e)
    {
        const char *type = json_string_value(json_object_get(e, "type"));
        json_t *f = json_object_get(e, "function");
        json_t *params = json_object_get(f, "parameters");
        const char *name = json_string_value(json_object_get(f, "name"));
        if (!type || strcmp(type, "function") || !json_is_object(f) || !name ||
            (params && !json_is_null(params) && !json_is_object(params))) {
            json_decref(names);
            return fail(param, "tools", err,
                        "tools[%zu]: {\"type\": \"function\", \"function\": {\"name\": ..., "
                        "\"description\": ..., \"parameters\": {...}}} is required",
                        i);
        }
        const char *pt = json_string_value(json_object_get(params, "type"));
        if (json_object_get(params, "type") && (!pt || strcmp(pt, "object"))) {
            json_decref(names);
            return fail(param, "tools", err,
                        "tools[%zu].function.parameters: must be a JSON Schema of an object "
                        "({\"type\": \"object\", \"properties\": ...})",
                        i);
        }
        if (!good_name(name)) {
            json_decref(names);
            return fail(param, "tools", err,
                        "tools[%zu].function.name: '%.80s' is not 1 to 64 letters, digits, '_', "
                        "'-' or '.'",
                        i, name);
        }
        if (json_object_get(names, name)) {
            json_decref(names);
            return fail(param, "tools", err, "tools[%zu].function.name: '%s' is given twice", i,
                        name);
        }
        json_object_set_new(names, name,
                            params && json_is_object(params) ? json_incref(params) : json_object());
        /* the schema must be one: malformed is a 400 whatever tool_choice
         * says; what a grammar cannot express only when the call is forced */
        char rule[64];
        int forced = t->forced == 1 || (t->forced == 2 && !strcmp(name, t->forced_name));
        int xml = fmt == IFL_REPLY_XML;
        int st = args_rules(params, i, NULL, rule, sizeof rule, forced && !xml, param, err);
        if (!st && forced && xml)
            st = xml_args_rules(params, i, NULL, rule, sizeof rule, param, err);
        if (st) {
            json_decref(names);
            return st;
        }
    }
    if (t->forced == 2 && !json_object_get(names, t->forced_name)) {
        json_decref(names);
        return fail(param, "tool_choice", err, "tool_choice: no function named '%.80s' in tools",
                    t->forced_name);
    }
    if (none || !json_array_size(tl)) {
        json_decref(names);
        return 0;
    }
    t->list = tl;
    t->names = names;
    t->parse = fmt;
    return 0;
}

int ifl_chat_tools_guide(struct ifl_gen_job *j, struct ifl_chat_tools *t, int ignore_eos,
                         char *param, char *err)
{
    if (!t->forced || !t->list)
        return 0;
    if (j->guide_param)
        return fail(param, "tool_choice", err,
                    "tool_choice: a forced call constrains the output, and %s already does",
                    j->guide_param);
    if (ignore_eos)
        return fail(param, "ignore_eos", err,
                    "ignore_eos: not with a forced call (tool_choice): the output ends where "
                    "the call does");
    int harmony = t->parse == IFL_REPLY_HARMONY, llama3 = t->parse == IFL_REPLY_LLAMA3;
    int xml = t->parse == IFL_REPLY_XML;
    int mistral = t->parse == IFL_REPLY_MISTRAL, deepseek = t->parse == IFL_REPLY_DEEPSEEK;
    size_t n_callable = t->forced == 2 ? 1 : json_array_size(t->list);
    struct ifl_buf g = {0}, alts = {0};
    size_t i;
    json_t *e;
    json_array_foreach(t->list, i, e)
    {
        json_t *f = json_object_get(e, "function");
        const char *name = json_string_value(json_object_get(f, "name"));
        if (t->forced == 2 && strcmp(name, t->forced_name))
            continue;
        char rule[64];
        json_t *params = json_object_get(f, "parameters");
        int st = xml ? xml_args_rules(params, i, &g, rule, sizeof rule, param, err)
                     : args_rules(params, i, &g, rule, sizeof rule, 1, param, err);
        if (st) {
            ifl_buf_free(&g);
            ifl_buf_free(&alts);
            return st;
        }
        /* names are [A-Za-z0-9_.-]: a GBNF literal as they stand */
        if (harmony && n_callable == 1)
            ifl_buf_addf(&alts, "%s", rule);
        else if (harmony)
            ifl_buf_addf(&alts, "%s\"%s<|channel|>commentary json<|message|>\" %s",
                         alts.len ? " | " : "", name, rule);
        else if (xml)
            ifl_buf_addf(&alts, "%s\"%s>\\n\" %s", alts.len ? " | " : "", name, rule);
        else if (llama3)
            ifl_buf_addf(&alts, "%s\"%s\\\", \\\"parameters\\\": \" %s", alts.len ? " | " : "",
                         name, rule);
        else if (mistral)
            ifl_buf_addf(&alts, "%s\"%s[ARGS]\" %s", alts.len ? " | " : "", name, rule);
        else if (deepseek)
            ifl_buf_addf(&alts, "%s\"%s\\n```json\\n\" %s", alts.len ? " | " : "", name, rule);
        else
            ifl_buf_addf(&alts, "%s\"%s\\\", \\\"arguments\\\": \" %s", alts.len ? " | " : "", name,
                         rule);
        if (harmony && n_callable == 1)
            snprintf(t->prefill, sizeof t->prefill,
                     " to=functions.%s<|channel|>commentary json<|message|>", name);
        else if (harmony)
            snprintf(t->prefill, sizeof t->prefill, " to=functions.");
    }
    struct ifl_buf all = {0};
    if (harmony) { /* one call: the turn ends with <|call|> */
        ifl_buf_addf(&all, "root ::= %s\n", alts.p ? alts.p : "");
    } else if (xml) { /* blocks separated by newlines, as the templates write them */
        ifl_buf_addf(&all, "root ::= call%s\n",
                     t->forced == 1 && t->parallel ? " ( \"\\n\" call )*" : "");
        ifl_buf_addf(&all,
                     "call ::= \"<tool_call>\\n<function=\" ( %s ) "
                     "\"</function>\\n</tool_call>\"\n",
                     alts.p ? alts.p : "");
        ifl_buf_add(&all, ifl_xml_text_gbnf(), strlen(ifl_xml_text_gbnf()));
    } else if (mistral) { /* the prompt ends with the first [TOOL_CALLS] */
        snprintf(t->prefill, sizeof t->prefill, "[TOOL_CALLS]");
        ifl_buf_addf(&all, "root ::= call%s\n",
                     t->forced == 1 && t->parallel ? " ( \"[TOOL_CALLS]\" call )*" : "");
        ifl_buf_addf(&all, "call ::= %s\n", alts.p ? alts.p : "");
    } else if (deepseek) { /* one block of calls, separated by newlines, as the template writes */
        ifl_buf_addf(&all, "root ::= \"" IFL_DS_CALLS_BEGIN "\" call%s \"" IFL_DS_CALLS_END "\"\n",
                     t->forced == 1 && t->parallel ? " ( \"\\n\" call )*" : "");
        ifl_buf_addf(&all,
                     "call ::= \"" IFL_DS_CALL_BEGIN "function" IFL_DS_TOOL_SEP "\" ( %s ) "
                     "\"\\n```" IFL_DS_CALL_END "\"\n",
                     alts.p ? alts.p : "");
    } else if (llama3) { /* the reply is the call objects, separated by "; " */
        ifl_buf_addf(&all, "root ::= call%s\n",
                     t->forced == 1 && t->parallel && t->multi ? " ( \"; \" call )*" : "");
        ifl_buf_addf(&all, "call ::= \"{\\\"name\\\": \\\"\" ( %s ) \"}\"\n", alts.p ? alts.p : "");
    } else {
        ifl_buf_addf(&all, "root ::= call%s\n",
                     t->forced == 1 && t->parallel ? " ( \"\\n\" call )*" : "");
        ifl_buf_addf(&all,
                     "call ::= \"<tool_call>\\n{\\\"name\\\": \\\"\" ( %s ) \"}\\n</tool_call>\"\n",
                     alts.p ? alts.p : "");
    }
    ifl_buf_add(&all, g.p, g.len);
    const char *common = ifl_guide_schema_gbnf_common();
    ifl_buf_add(&all, common, strlen(common));
    int oom = all.oom || g.oom || alts.oom;
    int rc =
        oom ? IFL_ENOMEM : ifl_gen_set_guide(j, IFL_GUIDE_EBNF, all.p, all.len, "tool_choice", err);
    ifl_buf_free(&g);
    ifl_buf_free(&alts);
    ifl_buf_free(&all);
    if (rc == IFL_ENOMEM)
        return fail(param, "tool_choice", err, "out of memory"), 500;
    if (rc) {
        snprintf(param, 64, "tool_choice");
        return 400;
    }
    return 0;
}
