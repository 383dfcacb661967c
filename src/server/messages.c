/*
 * Chat messages to a prompt. Messages are validated here (roles system,
 * developer, user, assistant; content a string, null for an assistant, or a
 * list of {"type": "text", "text": ...} parts, joined with "\n", and
 * {"type": "image_url", ...} parts where the server has a vision encoder:
 * see ifl_server_chat_render_images) and
 * normalised to [{role, content}], then rendered with the chat template:
 * --chat-template FILE if given, else the model's tokenizer.chat_template,
 * else ChatML. A model template our renderer cannot compile falls back to
 * ChatML with a warning (the model still serves); a --chat-template file
 * that does not compile stops the server from starting.
 *
 * A template that writes gpt-oss's harmony tokens (<|channel|>, <|start|>)
 * also takes tools, tool results (role "tool") and assistant turns with
 * tool_calls and reasoning_content: the server reads such a model's
 * replies back into those fields (harmony.c), so a conversation can go on.
 * So does a template that renders tools and writes an assistant's calls
 * as Hermes' <tool_call> JSON blocks (Qwen2.5, Qwen3, QwQ, Hermes 2 Pro and
 * 3, Granite, ...): found by rendering a probe conversation at start, as
 * the template itself would write it; its model's replies are read by
 * hermes.c. Likewise Llama 3.1's {"name", "parameters"} objects (llama3.c)
 * Qwen3-Coder's <tool_call><function=NAME><parameter=KEY> blocks
 * (Qwen3-Coder, Qwen3.5, Nemotron 3 Nano, StepFun 3.5: xmlcall.c),
 * Mistral's [TOOL_CALLS] groups (mistral.c) and DeepSeek-R1's
 * <｜tool▁calls▁begin｜> blocks (deepseek.c).
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "core/err.h"
#include "server/internal.h"

/* gpt-oss's template writes each message as <|start|>ROLE...<|message|>
 * and the assistant's channels with <|channel|>. */
static int is_harmony(const char *src)
{
    return strstr(src, "<|channel|>") && strstr(src, "<|start|>") && strstr(src, "<|message|>");
}

static int render(struct ifl_server *s, json_t *msgs, json_t *tools, json_t *vars, char **out,
                  size_t *n, char *err);

/* The probe conversation rendered with a probe tool: a question, an
 * assistant turn with n_calls calls of ifl_probe_fn (ifl_probe_arg 1, 2,
 * ...), a tool result. 0 and *out (malloc'd), or nonzero when the template
 * refuses it (a template that raises on this conversation is not one whose
 * calls the server reads). */
static int probe_render(struct ifl_server *s, int n_calls, char **out, size_t *n)
{
    json_t *tools = json_loads(
        "[{\"type\": \"function\", \"function\": {\"name\": \"ifl_probe_fn\", "
        "\"description\": \"ifl-probe-tool\", \"parameters\": {\"type\": \"object\", "
        "\"properties\": {\"ifl_probe_arg\": {\"type\": \"integer\", \"description\": \"n\"}}, "
        "\"required\": [\"ifl_probe_arg\"]}}}]",
        0, NULL);
    json_t *msgs =
        json_loads("[{\"role\": \"user\", \"content\": \"ifl-probe-question\"}, {\"role\": "
                   "\"assistant\", \"content\": \"\", \"tool_calls\": []}, {\"role\": \"tool\", "
                   "\"tool_call_id\": \"call_ifl0\", \"content\": \"ifl-probe-result\"}]",
                   0, NULL);
    json_t *calls = json_object_get(json_array_get(msgs, 1), "tool_calls");
    for (int i = 0; calls && i < n_calls; i++) {
        char id[32];
        snprintf(id, sizeof id, "call_ifl%d", i);
        json_array_append_new(calls, json_pack("{s:s,s:s,s:{s:s,s:{s:i}}}", "id", id, "type",
                                               "function", "function", "name", "ifl_probe_fn",
                                               "arguments", "ifl_probe_arg", i + 1));
    }
    char e[IFL_ERR_LEN];
    int rc = 1;
    if (tools && msgs && json_array_size(calls) == (size_t)n_calls)
        rc = render(s, json_incref(msgs), tools, NULL, out, n, e); /* render takes msgs */
    json_decref(msgs);
    json_decref(tools);
    return rc;
}

/* Whether out writes the probe's call as Hermes' block, <tool_call> JSON
 * </tool_call> with the JSON an object {"name", "arguments"} (whitespace
 * free around it). */
static int hermes_call(const char *out, size_t n)
{
    const char *p = out, *end = out + n;
    int call = 0;
    while (!call && (p = memmem(p, (size_t)(end - p), "<tool_call>", 11))) {
        p += 11;
        json_error_t je;
        json_t *v = json_loadb(p, (size_t)(end - p), JSON_DISABLE_EOF_CHECK, &je);
        const char *q = p + je.position;
        while (v && q < end && (*q == ' ' || *q == '\n'))
            q++;
        json_t *a = json_object_get(v, "arguments");
        call = json_is_object(v) && json_is_string(json_object_get(v, "name")) &&
               !strcmp(json_string_value(json_object_get(v, "name")), "ifl_probe_fn") &&
               json_integer_value(json_object_get(a, "ifl_probe_arg")) == 1 &&
               (size_t)(end - q) >= 12 && !memcmp(q, "</tool_call>", 12);
        json_decref(v);
    }
    return call;
}

/* 1 when the probe conversation with n_calls calls renders, writes them as
 * call() reads them, and shows the tool and the tool's result. */
static int probe_writes(struct ifl_server *s, int n_calls, int (*call)(const char *, size_t))
{
    char *out = NULL;
    size_t n = 0;
    int yes = !probe_render(s, n_calls, &out, &n) && call(out, n) &&
              memmem(out, n, "ifl-probe-tool", 14) && memmem(out, n, "ifl-probe-result", 16);
    free(out);
    return yes;
}

/* 1 when the compiled template renders tools, writes an assistant's tool
 * calls as Hermes' blocks and renders tool results: a probe conversation
 * rendered with a probe tool says. */
static int is_hermes(struct ifl_server *s)
{
    return probe_writes(s, 1, hermes_call);
}

/* How many of the probe's calls (ifl_probe_arg 1..n) out writes as Llama
 * 3.1's objects {"name": "ifl_probe_fn", "parameters": {"ifl_probe_arg": k}}. */
static int llama3_calls(const char *out, size_t n, int n_calls)
{
    int seen = 0;
    for (const char *p = out, *end = out + n; (p = memchr(p, '{', (size_t)(end - p))); p++) {
        json_t *v = json_loadb(p, (size_t)(end - p), JSON_DISABLE_EOF_CHECK, NULL);
        json_t *name = json_object_get(v, "name");
        json_int_t k =
            json_integer_value(json_object_get(json_object_get(v, "parameters"), "ifl_probe_arg"));
        if (json_is_string(name) && !strcmp(json_string_value(name), "ifl_probe_fn") && k >= 1 &&
            k <= n_calls && json_object_size(v) == 2)
            seen |= 1 << (k - 1);
        json_decref(v);
    }
    int c = 0;
    for (int k = 0; k < n_calls; k++)
        c += (seen >> k) & 1;
    return c;
}

/* 1 when the compiled template renders tools and writes an assistant's
 * tool call as Llama 3.1's JSON object {"name", "parameters"}, and renders
 * tool results; 2 when it also renders a turn with two calls (Llama 3.1's
 * raises). The probe conversation says. */
static int llama3_one(const char *out, size_t n)
{
    return llama3_calls(out, n, 1) == 1;
}

static int llama3_two(const char *out, size_t n)
{
    return llama3_calls(out, n, 2) == 2;
}

static int is_llama3(struct ifl_server *s)
{
    int yes = probe_writes(s, 1, llama3_one);
    return yes && probe_writes(s, 2, llama3_two) ? 2 : yes;
}

/* Whether s (n bytes) holds, whitespace free between the tags, the probe's
 * call in Qwen3-Coder's XML format: <tool_call> <function=ifl_probe_fn>
 * <parameter=ifl_probe_arg>\n1\n</parameter> </function> </tool_call>. */
static int xml_call(const char *s, size_t n)
{
    static const char *const parts[] = {"<function=ifl_probe_fn>",
                                        "<parameter=ifl_probe_arg>\n1\n</parameter>", "</function>",
                                        "</tool_call>"};
    for (const char *p = s, *end = s + n; (p = memmem(p, (size_t)(end - p), "<tool_call>", 11));) {
        p += 11;
        const char *q = p;
        int k = 0;
        for (; k < 4; k++) {
            while (q < end && (*q == ' ' || *q == '\n'))
                q++;
            size_t l = strlen(parts[k]);
            if ((size_t)(end - q) < l || memcmp(q, parts[k], l))
                break;
            q += l;
        }
        if (k == 4)
            return 1;
    }
    return 0;
}

/* 1 when the compiled template renders tools and writes an assistant's
 * tool call as Qwen3-Coder's XML block, and renders tool results. The
 * probe conversation says. */
static int is_xml(struct ifl_server *s)
{
    return probe_writes(s, 1, xml_call);
}

/* Whether out writes the probe's call in Mistral's format: after
 * [TOOL_CALLS], "ifl_probe_fn", its id as [CALL_ID]call_ifl0 or not, and
 * [ARGS]{"ifl_probe_arg": 1}; or the v3 tokenizer's list, [TOOL_CALLS]
 * [{"name": "ifl_probe_fn", "arguments": {"ifl_probe_arg": 1}, ...}]. */
static int mistral_call(const char *out, size_t n)
{
    static const char tag[] = "[TOOL_CALLS]", name[] = "ifl_probe_fn", id[] = "[CALL_ID]call_ifl0",
                      args[] = "[ARGS]";
    const char *end = out + n;
    for (const char *p = out; (p = memmem(p, (size_t)(end - p), tag, sizeof tag - 1));) {
        p += sizeof tag - 1;
        const char *q = p;
        json_t *v = NULL, *a = NULL;
        while (q < end && *q == ' ')
            q++;
        if (q < end && *q == '[') {
            v = json_loadb(q, (size_t)(end - q), JSON_DISABLE_EOF_CHECK, NULL);
            json_t *e = json_array_get(v, 0);
            const char *nm = json_string_value(json_object_get(e, "name"));
            if (nm && !strcmp(nm, name))
                a = json_object_get(e, "arguments");
        } else if ((size_t)(end - q) > sizeof name && !memcmp(q, name, sizeof name - 1)) {
            q += sizeof name - 1;
            if ((size_t)(end - q) >= sizeof id - 1 && !memcmp(q, id, sizeof id - 1))
                q += sizeof id - 1;
            if ((size_t)(end - q) >= sizeof args - 1 && !memcmp(q, args, sizeof args - 1)) {
                q += sizeof args - 1;
                a = v = json_loadb(q, (size_t)(end - q), JSON_DISABLE_EOF_CHECK, NULL);
            }
        }
        int yes = json_integer_value(json_object_get(a, "ifl_probe_arg")) == 1;
        json_decref(v);
        if (yes)
            return 1;
    }
    return 0;
}

/* 1 when the compiled template renders tools and writes an assistant's
 * tool call in Mistral's format (mistral_call), and renders tool results
 * (Mistral Small 3.2's wants the ids nine characters long: the probe's
 * are). */
static int is_mistral(struct ifl_server *s)
{
    return probe_writes(s, 1, mistral_call);
}

/* Whether out writes the probe's call as DeepSeek-R1's block, as its
 * reader (deepseek.c) reads it: one call, to ifl_probe_fn, with
 * ifl_probe_arg 1. */
static int deepseek_call(const char *out, size_t n)
{
    const char *p = memmem(out, n, IFL_DS_CALLS_BEGIN, strlen(IFL_DS_CALLS_BEGIN));
    json_t *names = json_pack("{s:{}}", "ifl_probe_fn");
    struct ifl_reply_out o = {.calls = json_array()};
    struct ifl_hermes t;
    ifl_deepseek_init(&t, names);
    if (p && names && o.calls) {
        ifl_hermes_push(&t, p, (size_t)(out + n - p), &o);
        ifl_hermes_finish(&t, &o);
    }
    ifl_hermes_deinit(&t);
    json_t *a = json_object_get(json_array_get(o.calls, 0), "function");
    const char *args = json_string_value(json_object_get(a, "arguments"));
    json_t *v = args ? json_loads(args, 0, NULL) : NULL;
    int yes = json_array_size(o.calls) == 1 && !o.oom &&
              !strcmp(json_string_value(json_object_get(a, "name")), "ifl_probe_fn") &&
              json_integer_value(json_object_get(v, "ifl_probe_arg")) == 1;
    json_decref(v);
    json_decref(o.calls);
    json_decref(names);
    ifl_buf_free(&o.content);
    ifl_buf_free(&o.reasoning);
    return yes;
}

/* 1 when the compiled template renders tools and writes an assistant's
 * tool call as DeepSeek-R1's block (llama.cpp's llama-cpp-deepseek-r1
 * template does; DeepSeek's own R1 templates do not render tools). */
static int is_deepseek(struct ifl_server *s)
{
    return probe_writes(s, 1, deepseek_call);
}

/* A reasoning model's template: it writes (or strips from history) the
 * <think> block its model answers in (1), or Mistral's [THINK] block (2). */
static int is_think(const char *src)
{
    if (strstr(src, "<think>") && strstr(src, "</think>"))
        return 1;
    return strstr(src, "[THINK]") && strstr(src, "[/THINK]") ? 2 : 0;
}

int ifl_server_chat_init(struct ifl_server *s, ifl_executor *ex, char *err)
{
    struct ifl_chat_template *t = NULL;
    char cerr[IFL_ERR_LEN] = "";
    s->chat_tmpl = NULL;
    s->chat_default = 0;
    s->chat_harmony = 0;
    s->chat_hermes = 0;
    s->chat_llama3 = 0;
    s->chat_xml = 0;
    s->chat_mistral = 0;
    s->chat_deepseek = 0;
    s->chat_think = 0;
    if (s->chat_template) {
        if (ifl_chat_template_compile(&t, s->chat_template, strlen(s->chat_template), cerr))
            return ifl_err(err, IFL_EINVAL, "--chat-template: %s", cerr);
        s->chat_tmpl = t;
        s->chat_sees_images = strstr(s->chat_template, "image") != NULL;
        s->chat_harmony = is_harmony(s->chat_template);
        s->chat_hermes = !s->chat_harmony && is_hermes(s);
        s->chat_llama3 = !s->chat_harmony && !s->chat_hermes ? is_llama3(s) : 0;
        s->chat_xml = !s->chat_harmony && !s->chat_hermes && !s->chat_llama3 && is_xml(s);
        s->chat_mistral = !ifl_server_tool_format(s) && is_mistral(s);
        s->chat_deepseek = !ifl_server_tool_format(s) && is_deepseek(s);
        s->chat_think = s->chat_harmony ? 0 : is_think(s->chat_template);
        return 0;
    }
    char probe[1];
    int64_t len = 0;
    int rc = ifl_executor_model_meta(ex, "tokenizer.chat_template", probe, sizeof probe, &len);
    if (rc == IFL_EFULL) { /* a non-empty template (an empty one counts as none) */
        char *src = malloc((size_t)len + 1);
        if (!src)
            return ifl_err(err, IFL_ENOMEM, "out of memory");
        ifl_executor_model_meta(ex, "tokenizer.chat_template", src, len + 1, &len);
        rc = ifl_chat_template_compile(&t, src, (size_t)len, cerr);
        s->chat_sees_images = !rc && strstr(src, "image") != NULL;
        s->chat_harmony = !rc && is_harmony(src);
        s->chat_think = rc || s->chat_harmony ? 0 : is_think(src);
        free(src);
        if (rc == IFL_ENOMEM)
            return ifl_err(err, rc, "out of memory");
        if (rc)
            fprintf(stderr,
                    "inflight serve: the model's chat template does not compile (%s); using "
                    "ChatML (give --chat-template FILE to choose)\n",
                    cerr);
    }
    if (!t) {
        if (ifl_chat_template_compile(&t, ifl_chat_default_template,
                                      strlen(ifl_chat_default_template), cerr))
            return ifl_err(err, IFL_ENOMEM, "chat template: %s", cerr);
        s->chat_default = 1;
    }
    s->chat_tmpl = t;
    s->chat_hermes = !s->chat_default && !s->chat_harmony && is_hermes(s);
    s->chat_llama3 = !s->chat_default && !s->chat_harmony && !s->chat_hermes ? is_llama3(s) : 0;
    s->chat_xml =
        !s->chat_default && !s->chat_harmony && !s->chat_hermes && !s->chat_llama3 && is_xml(s);
    s->chat_mistral = !s->chat_default && !ifl_server_tool_format(s) && is_mistral(s);
    s->chat_deepseek = !s->chat_default && !ifl_server_tool_format(s) && is_deepseek(s);
    return 0;
}

int ifl_server_tool_format(const struct ifl_server *s)
{
    return s->chat_harmony    ? IFL_REPLY_HARMONY
           : s->chat_hermes   ? IFL_REPLY_HERMES
           : s->chat_llama3   ? IFL_REPLY_LLAMA3
           : s->chat_xml      ? IFL_REPLY_XML
           : s->chat_mistral  ? IFL_REPLY_MISTRAL
           : s->chat_deepseek ? IFL_REPLY_DEEPSEEK
                              : IFL_REPLY_PLAIN;
}

void ifl_server_chat_free(struct ifl_server *s)
{
    ifl_chat_template_free(s->chat_tmpl);
    s->chat_tmpl = NULL;
}

/* What rendering a conversation with images needs: where the images go
 * (the job) and the marker that stands for each in the rendered text. */
struct chat_imgs {
    struct ifl_server *s;
    struct ifl_gen_job *j; /* NULL: image parts are refused */
    int has_vision;        /* the executor has a vision encoder */
    const char *marker;
};

/* How content with image parts is given to the template: a string with
 * the marker where each image was (text parts and markers joined with
 * "\n"); or a list of parts, images as {"type": "image"} (PARTS_IMAGE) or
 * as text parts holding the marker (PARTS_MARKER). */
enum { AS_STRING = 0, PARTS_IMAGE, PARTS_MARKER };

/* An image_url part: its data URL decoded into the job (first pass). */
static int take_image(json_t *part, size_t i, size_t k, struct chat_imgs *im, char *err)
{
    if (!im || !im->j)
        return ifl_err(err, IFL_EINVAL,
                       "messages[%zu].content[%zu]: image parts are not accepted here", i, k);
    if (!im->has_vision)
        return ifl_err(err, IFL_EINVAL,
                       "messages[%zu].content[%zu]: this server has no vision encoder for images "
                       "(start it with --mmproj FILE)",
                       i, k);
    json_t *u = json_object_get(part, "image_url");
    if (json_is_object(u))
        u = json_object_get(u, "url");
    if (!json_is_string(u))
        return ifl_err(err, IFL_EINVAL,
                       "messages[%zu].content[%zu].image_url: {\"url\": \"data:image/png;base64,"
                       "...\"} is required",
                       i, k);
    struct ifl_gen_job *j = im->j;
    if (j->n_images == IFL_MAX_IMAGES_PER_REQUEST)
        return ifl_err(err, IFL_EINVAL, "messages: at most %d images a request",
                       IFL_MAX_IMAGES_PER_REQUEST);
    char why[IFL_ERR_LEN] = "";
    unsigned char *data = NULL;
    size_t n = 0;
    int rc =
        ifl_server_image_url(im->s, json_string_value(u), json_string_length(u), 0, &data, &n, why);
    if (rc)
        return ifl_err(err, rc, "messages[%zu].content[%zu].image_url: %s", i, k, why);
    j->image_data[j->n_images] = data;
    j->images[j->n_images] = (struct ifl_image_input){.data = data, .size = (int64_t)n};
    j->n_images++;
    return 0;
}

/* An assistant turn's tool_calls for the template: each {id, type,
 * function: {name, arguments}} with the arguments' JSON text given as the
 * value it holds (gpt-oss's template writes them with tojson, as
 * llama.cpp's server gives them). NULL with err on a bad entry. */
static json_t *tool_calls(json_t *calls, size_t i, char *err)
{
    if (!json_is_array(calls)) {
        ifl_err(err, IFL_EINVAL, "messages[%zu].tool_calls: must be a list", i);
        return NULL;
    }
    json_t *out = json_array();
    size_t k;
    json_t *c;
    json_array_foreach(calls, k, c)
    {
        json_t *f = json_object_get(c, "function");
        json_t *name = json_object_get(f, "name"), *args = json_object_get(f, "arguments");
        if (!json_is_string(name) || !(json_is_string(args) || json_is_object(args))) {
            json_decref(out);
            ifl_err(err, IFL_EINVAL,
                    "messages[%zu].tool_calls[%zu]: {\"type\": \"function\", \"function\": "
                    "{\"name\": ..., \"arguments\": ...}} is required",
                    i, k);
            return NULL;
        }
        json_t *val = NULL;
        if (json_is_string(args))
            val = json_loadb(json_string_value(args), json_string_length(args),
                             JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);
        if (!val) /* not JSON: given as the string it is */
            val = json_incref(args);
        json_t *id = json_object_get(c, "id");
        json_array_append_new(
            out, json_pack("{s:O,s:s,s:{s:O,s:o}}", "id", json_is_string(id) ? id : json_null(),
                           "type", "function", "function", "name", name, "arguments", val));
    }
    return out;
}

/* harmony: the template's tool format (IFL_REPLY_*; 0: tools are not
 * rendered, nor tool roles and calls taken) */
static int normalize(json_t *messages, json_t **out, struct chat_imgs *im, int mode, int harmony,
                     char *err)
{
    if (!json_is_array(messages) || json_array_size(messages) == 0)
        return ifl_err(err, IFL_EINVAL, "messages: must be a non-empty list of messages");
    if (json_array_size(messages) > 4096)
        return ifl_err(err, IFL_EINVAL, "messages: at most 4096 messages");
    json_t *arr = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m)
    {
        if (!json_is_object(m)) {
            json_decref(arr);
            return ifl_err(err, IFL_EINVAL, "messages[%zu]: must be an object", i);
        }
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!role) {
            json_decref(arr);
            return ifl_err(err, IFL_EINVAL, "messages[%zu].role: a string is required", i);
        }
        if (!strcmp(role, "developer"))
            role = "system";
        if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant") &&
            (!harmony || strcmp(role, "tool"))) {
            json_decref(arr);
            return ifl_err(err, IFL_EINVAL,
                           "messages[%zu].role: '%.40s' is not supported (system, developer, user, "
                           "assistant%s)",
                           i, role, harmony ? ", tool" : "");
        }
        json_t *content = json_object_get(m, "content");
        struct ifl_buf text = {0};
        json_t *parts = NULL; /* PARTS_*: the content as a list, when it has an image */
        if (json_is_string(content)) {
            ifl_buf_add(&text, json_string_value(content), json_string_length(content));
        } else if (json_is_array(content)) {
            size_t k;
            json_t *part;
            int has_image = 0;
            json_array_foreach(content, k, part)
            {
                const char *type = json_string_value(json_object_get(part, "type"));
                has_image |= type && !strcmp(type, "image_url");
            }
            if (has_image && mode != AS_STRING)
                parts = json_array();
            json_array_foreach(content, k, part)
            {
                const char *type = json_string_value(json_object_get(part, "type"));
                json_t *t = json_object_get(part, "text");
                int is_image = type && !strcmp(type, "image_url");
                if (!is_image && (!type || strcmp(type, "text") || !json_is_string(t))) {
                    ifl_buf_free(&text);
                    json_decref(parts);
                    json_decref(arr);
                    return ifl_err(err, IFL_EINVAL,
                                   "messages[%zu].content[%zu]: only {\"type\": \"text\", "
                                   "\"text\": ...} and {\"type\": \"image_url\", \"image_url\": "
                                   "{\"url\": ...}} parts are supported",
                                   i, k);
                }
                int rc = is_image && mode == AS_STRING ? take_image(part, i, k, im, err) : 0;
                if (rc) {
                    ifl_buf_free(&text);
                    json_decref(arr);
                    return rc;
                }
                if (parts) {
                    json_array_append_new(
                        parts, !is_image ? json_pack("{s:s,s:O}", "type", "text", "text", t)
                               : mode == PARTS_IMAGE
                                   ? json_pack("{s:s}", "type", "image")
                                   : json_pack("{s:s,s:s}", "type", "text", "text", im->marker));
                    continue;
                }
                if (k)
                    ifl_buf_add(&text, "\n", 1);
                if (is_image)
                    ifl_buf_add(&text, im->marker, strlen(im->marker));
                else
                    ifl_buf_add(&text, json_string_value(t), json_string_length(t));
            }
        } else if (!(json_is_null(content) || !content) || strcmp(role, "assistant")) {
            json_decref(arr);
            return ifl_err(err, IFL_EINVAL,
                           "messages[%zu].content: must be a string or a list of parts", i);
        }
        if (text.oom) {
            ifl_buf_free(&text);
            json_decref(parts);
            json_decref(arr);
            return ifl_err(err, IFL_ENOMEM, "out of memory");
        }
        json_t *o = json_object();
        json_object_set_new(o, "role", json_string(role));
        json_object_set_new(o, "content",
                            parts ? parts : json_stringn(text.p ? text.p : "", text.len));
        ifl_buf_free(&text);
        json_array_append_new(arr, o);
        if (harmony && !strcmp(role, "tool")) { /* which call it answers, for templates that say */
            static const char *const keys[] = {"tool_call_id", "name"};
            for (int k = 0; k < 2; k++)
                if (json_is_string(json_object_get(m, keys[k])))
                    json_object_set(o, keys[k], json_object_get(m, keys[k]));
        }
        if (!harmony || strcmp(role, "assistant"))
            continue;
        json_t *calls = json_object_get(m, "tool_calls");
        if (calls && !json_is_null(calls)) {
            json_t *tc = tool_calls(calls, i, err);
            if (!tc) {
                json_decref(arr);
                return IFL_EINVAL;
            }
            if (json_array_size(tc))
                json_object_set_new(o, "tool_calls", tc);
            else
                json_decref(tc);
        }
        json_t *rc = json_object_get(m, "reasoning_content");
        if (json_is_string(rc) && json_string_length(rc)) /* gpt-oss's name, or Qwen3's */
            json_object_set(o, harmony == IFL_REPLY_HARMONY ? "thinking" : "reasoning_content", rc);
    }
    *out = arr;
    return 0;
}

static int render(struct ifl_server *s, json_t *msgs, json_t *tools, json_t *vars, char **out,
                  size_t *n, char *err)
{
    json_t *ctx = json_object();
    if (vars)
        json_object_update(ctx, vars);
    json_object_set_new(ctx, "messages", msgs);
    json_object_set(ctx, "tools", tools ? tools : json_null());
    json_object_set_new(ctx, "documents", json_null());
    json_object_set_new(ctx, "add_generation_prompt", json_true());
    json_object_set_new(ctx, "bos_token", json_string(s->bos_text));
    json_object_set_new(ctx, "eos_token", json_string(s->eos_text));
    char rerr[IFL_ERR_LEN] = "";
    int rc = ifl_chat_render(s->chat_tmpl, ctx, NULL, out, n, rerr);
    json_decref(ctx);
    if (rc == IFL_ENOMEM)
        return ifl_err(err, rc, "out of memory");
    if (rc) /* the template refused these messages (raise_exception) or failed on them */
        return ifl_err(err, IFL_EINVAL, "messages: the chat template says: %s", rerr);
    return 0;
}

/* A template that iterates content parts writes its own text for an image
 * part. Rendered once with {"type": "image"} parts (a) and once with the
 * marker as a text part in their place (b), the two differ only there: b
 * cut at its markers gives the pieces a is made of, and between them, the
 * text the template wrote for each image. The prompt is a with the marker
 * after each such text (the image's rows follow what the template wrote
 * for it). 0 and *out on success; 1 when the two renderings do not line
 * up so (the caller then renders the marker as text). */
static int splice(const char *a, size_t na, const char *b, size_t nb, const char *marker, int n_img,
                  char **out, size_t *n_out)
{
    size_t ml = strlen(marker);
    const char *seg[IFL_MAX_IMAGES_PER_REQUEST + 1];
    size_t sl[IFL_MAX_IMAGES_PER_REQUEST + 1];
    int ns = 0;
    const char *p = b, *end = b + nb;
    for (;;) {
        const char *m = memmem(p, (size_t)(end - p), marker, ml);
        if (ns > n_img)
            return 1;
        seg[ns] = p;
        sl[ns++] = m ? (size_t)(m - p) : (size_t)(end - p);
        if (!m)
            break;
        p = m + ml;
    }
    if (ns != n_img + 1 || na < sl[0] || memcmp(a, seg[0], sl[0]))
        return 1;
    struct ifl_buf o = {0};
    ifl_buf_add(&o, seg[0], sl[0]);
    size_t c = sl[0];
    for (int k = 0; k < n_img; k++) {
        size_t stop;
        if (k == n_img - 1) {
            if (na - c < sl[k + 1] || memcmp(a + na - sl[k + 1], seg[k + 1], sl[k + 1]))
                break;
            stop = na - sl[k + 1];
        } else {
            const char *f = sl[k + 1] ? memmem(a + c, na - c, seg[k + 1], sl[k + 1]) : NULL;
            if (!f)
                break;
            stop = (size_t)(f - a);
        }
        ifl_buf_add(&o, a + c, stop - c);
        ifl_buf_add(&o, marker, ml);
        ifl_buf_add(&o, seg[k + 1], sl[k + 1]);
        c = stop + sl[k + 1];
        if (k == n_img - 1) {
            if (o.oom)
                break;
            *out = o.p;
            *n_out = o.len;
            return 0;
        }
    }
    ifl_buf_free(&o);
    return 1;
}

int ifl_server_chat_render_images(struct ifl_server *s, json_t *messages, struct ifl_gen_job *j,
                                  const char *marker, char **out, size_t *n, char *err)
{
    return ifl_server_chat_render_tools(s, messages, NULL, NULL, j, marker, out, n, err);
}

int ifl_server_chat_render_tools(struct ifl_server *s, json_t *messages, json_t *tools,
                                 json_t *vars, struct ifl_gen_job *j, const char *marker,
                                 char **out, size_t *n, char *err)
{
    struct ifl_vision_info vi;
    struct chat_imgs im = {.s = s,
                           .j = j,
                           .has_vision = j && ifl_executor_vision_info(j->ex, &vi) == 0,
                           .marker = marker};
    json_t *msgs = NULL;
    int h = ifl_server_tool_format(s);
    int rc = normalize(messages, &msgs, j ? &im : NULL, AS_STRING, h, err);
    if (rc)
        return rc;
    if (!j || !j->n_images || !s->chat_sees_images)
        return render(s, msgs, tools, vars, out, n, err);
    /* the template may iterate content parts: let it see the image parts */
    json_t *ma = NULL, *mb = NULL;
    char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    int ok = !normalize(messages, &ma, &im, PARTS_IMAGE, h, err) &&
             !normalize(messages, &mb, &im, PARTS_MARKER, h, err);
    if (ok) { /* render takes the messages, on failure too */
        ok = !render(s, ma, tools, vars, &a, &na, err);
        ma = NULL;
    }
    if (ok) {
        ok = !render(s, mb, tools, vars, &b, &nb, err);
        mb = NULL;
    }
    json_decref(ma);
    json_decref(mb);
    ok = ok && !splice(a, na, b, nb, marker, j->n_images, out, n);
    free(a);
    free(b);
    if (ok) {
        json_decref(msgs);
        return 0;
    }
    return render(s, msgs, tools, vars, out, n, err); /* as a string with the markers */
}

int ifl_server_chat_render(struct ifl_server *s, json_t *messages, char **out, size_t *n, char *err)
{
    return ifl_server_chat_render_images(s, messages, NULL, NULL, out, n, err);
}
