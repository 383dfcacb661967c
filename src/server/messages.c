/*
 * Chat messages to a prompt. Messages are validated here (roles system,
 * developer, user, assistant; content a string, null for an assistant, or a
 * list of {"type": "text", "text": ...} parts, joined with "\n") and
 * normalised to [{role, content}], then rendered with the chat template:
 * --chat-template FILE if given, else the model's tokenizer.chat_template,
 * else ChatML. A model template our renderer cannot compile falls back to
 * ChatML with a warning (the model still serves); a --chat-template file
 * that does not compile stops the server from starting.
 */
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "core/err.h"
#include "server/internal.h"

int ifl_server_chat_init(struct ifl_server *s, ifl_executor *ex, char *err)
{
    struct ifl_chat_template *t = NULL;
    char cerr[IFL_ERR_LEN] = "";
    s->chat_tmpl = NULL;
    s->chat_default = 0;
    if (s->chat_template) {
        if (ifl_chat_template_compile(&t, s->chat_template, strlen(s->chat_template), cerr))
            return ifl_err(err, IFL_EINVAL, "--chat-template: %s", cerr);
        s->chat_tmpl = t;
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
    return 0;
}

void ifl_server_chat_free(struct ifl_server *s)
{
    ifl_chat_template_free(s->chat_tmpl);
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
        struct ifl_buf text = {0};
        if (json_is_string(content)) {
            ifl_buf_add(&text, json_string_value(content), json_string_length(content));
        } else if (json_is_array(content)) {
            size_t k;
            json_t *part;
            json_array_foreach(content, k, part)
            {
                const char *type = json_string_value(json_object_get(part, "type"));
                json_t *t = json_object_get(part, "text");
                if (!type || strcmp(type, "text") || !json_is_string(t)) {
                    ifl_buf_free(&text);
                    json_decref(arr);
                    return ifl_err(
                        err, IFL_EINVAL,
                        "messages[%zu].content[%zu]: only {\"type\": \"text\", \"text\": "
                        "...} parts are supported",
                        i, k);
                }
                if (k)
                    ifl_buf_add(&text, "\n", 1);
                ifl_buf_add(&text, json_string_value(t), json_string_length(t));
            }
        } else if (!(json_is_null(content) || !content) || strcmp(role, "assistant")) {
            json_decref(arr);
            return ifl_err(err, IFL_EINVAL,
                           "messages[%zu].content: must be a string or a list of text parts", i);
        }
        if (text.oom) {
            ifl_buf_free(&text);
            json_decref(arr);
            return ifl_err(err, IFL_ENOMEM, "out of memory");
        }
        json_t *o = json_object();
        json_object_set_new(o, "role", json_string(role));
        json_object_set_new(o, "content", json_stringn(text.p ? text.p : "", text.len));
        ifl_buf_free(&text);
        json_array_append_new(arr, o);
    }
    *out = arr;
    return 0;
}

int ifl_server_chat_render(struct ifl_server *s, json_t *messages, char **out, size_t *n, char *err)
{
    json_t *msgs = NULL;
    int rc = normalize(messages, &msgs, err);
    if (rc)
        return rc;
    json_t *ctx = json_object();
    json_object_set_new(ctx, "messages", msgs);
    json_object_set_new(ctx, "tools", json_null());
    json_object_set_new(ctx, "documents", json_null());
    json_object_set_new(ctx, "add_generation_prompt", json_true());
    json_object_set_new(ctx, "bos_token", json_string(s->bos_text));
    json_object_set_new(ctx, "eos_token", json_string(s->eos_text));
    char rerr[IFL_ERR_LEN] = "";
    rc = ifl_chat_render(s->chat_tmpl, ctx, NULL, out, n, rerr);
    json_decref(ctx);
    if (rc == IFL_ENOMEM)
        return ifl_err(err, rc, "out of memory");
    if (rc) /* the template refused these messages (raise_exception) or failed on them */
        return ifl_err(err, IFL_EINVAL, "messages: the chat template says: %s", rerr);
    return 0;
}
