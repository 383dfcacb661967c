/*
 * Chat messages to a prompt. Messages are validated here (roles system,
 * developer, user, assistant; content a string, null for an assistant, or a
 * list of {"type": "text", "text": ...} parts, joined with "\n") and
 * normalised to [{role, content}], then rendered.
 *
 * Rendering: ChatML (<|im_start|>role\ncontent<|im_end|>\n ... then
 * <|im_start|>assistant\n) until the Jinja renderer of src/chat/ is wired
 * in; ifl_server_chat_render is the one place that changes then.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "server/internal.h"

int ifl_server_chat_init(struct ifl_server *s, char *err)
{
    (void)err;
    s->chat_tmpl = NULL;
    return 0;
}

void ifl_server_chat_free(struct ifl_server *s)
{
    s->chat_tmpl = NULL;
}

static int normalize(json_t *messages, json_t **out, char *err)
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
        if (strcmp(role, "system") && strcmp(role, "user") && strcmp(role, "assistant")) {
            json_decref(arr);
            return ifl_err(err, IFL_EINVAL,
                           "messages[%zu].role: '%.40s' is not supported (system, developer, user, "
                           "assistant)",
                           i, role);
        }
        json_t *content = json_object_get(m, "content");
        struct ifl_sbuf text = {0};
        if (json_is_string(content)) {
            ifl_sbuf_add(&text, json_string_value(content), json_string_length(content));
        } else if (json_is_array(content)) {
            size_t k;
            json_t *part;
            json_array_foreach(content, k, part)
            {
                const char *type = json_string_value(json_object_get(part, "type"));
                json_t *t = json_object_get(part, "text");
                if (!type || strcmp(type, "text") || !json_is_string(t)) {
                    ifl_sbuf_free(&text);
                    json_decref(arr);
                    return ifl_err(err, IFL_EINVAL,
                                   "messages[%zu].content[%zu]: only {\"type\": \"text\", \"text\": "
                                   "...} parts are supported",
                                   i, k);
                }
                if (k)
                    ifl_sbuf_add(&text, "\n", 1);
                ifl_sbuf_add(&text, json_string_value(t), json_string_length(t));
            }
        } else if (!(json_is_null(content) || !content) || strcmp(role, "assistant")) {
            json_decref(arr);
            return ifl_err(err, IFL_EINVAL,
                           "messages[%zu].content: must be a string or a list of text parts", i);
        }
        if (text.oom) {
            ifl_sbuf_free(&text);
            json_decref(arr);
            return ifl_err(err, IFL_ENOMEM, "out of memory");
        }
        json_t *o = json_object();
        json_object_set_new(o, "role", json_string(role));
        json_object_set_new(o, "content", json_stringn(text.p ? text.p : "", text.len));
        ifl_sbuf_free(&text);
        json_array_append_new(arr, o);
    }
    *out = arr;
    return 0;
}

static int render_chatml(json_t *msgs, char **out, size_t *n)
{
    struct ifl_sbuf b = {0};
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m)
    {
        json_t *content = json_object_get(m, "content");
        ifl_sbuf_addf(&b, "<|im_start|>%s\n", json_string_value(json_object_get(m, "role")));
        ifl_sbuf_add(&b, json_string_value(content), json_string_length(content));
        ifl_sbuf_add(&b, "<|im_end|>\n", 11);
    }
    ifl_sbuf_add(&b, "<|im_start|>assistant\n", 22);
    if (b.oom) {
        ifl_sbuf_free(&b);
        return IFL_ENOMEM;
    }
    *out = b.p;
    *n = b.len;
    return 0;
}

int ifl_server_chat_render(struct ifl_server *s, json_t *messages, char **out, size_t *n,
                           char *err)
{
    (void)s;
    json_t *msgs = NULL;
    int rc = normalize(messages, &msgs, err);
    if (rc)
        return rc;
    rc = render_chatml(msgs, out, n);
    json_decref(msgs);
    if (rc)
        return ifl_err(err, rc, "out of memory");
    return 0;
}
