/*
 * ifl_executor_apply_chat_template: a conversation rendered with the
 * model's chat template (chat/), for clients of the C API (the Python
 * package's Tokenizer.apply_chat_template and LLM.chat). The template is
 * tokenizer.chat_template from the model's metadata, compiled once at the
 * first call; ChatML when the model has none or ours cannot compile it,
 * as the server does. A template given with the call is compiled for that
 * call only.
 */
#include <jansson.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "chat/chat.h"
#include "core/err.h"
#include "runtime/exec.h"
#include "tokenizer/tokenizer.h"

/* The model's template, compiled once (under chat_mu). */
static const struct ifl_chat_template *model_template(struct ifl_executor *ex, char *err)
{
    pthread_mutex_lock(&ex->chat_mu);
    if (!ex->chat) {
        char probe[1];
        int64_t len = 0;
        int rc = ifl_executor_model_meta(ex, "tokenizer.chat_template", probe, sizeof probe, &len);
        if (rc == IFL_EFULL) { /* non-empty */
            char *src = malloc((size_t)len + 1);
            if (src && !ifl_executor_model_meta(ex, "tokenizer.chat_template", src, len + 1, &len))
                ifl_chat_template_compile(&ex->chat, src, (size_t)len, NULL);
            free(src);
        }
        if (!ex->chat) {
            ifl_chat_template_compile(&ex->chat, ifl_chat_default_template,
                                      strlen(ifl_chat_default_template), NULL);
            ex->chat_is_default = 1;
        }
    }
    const struct ifl_chat_template *t = ex->chat;
    pthread_mutex_unlock(&ex->chat_mu);
    if (!t)
        ifl_err(err, IFL_ENOMEM, "chat template: out of memory");
    return t;
}

/* The text of a special token (bos_token / eos_token), "" when it has none. */
static json_t *token_text(struct ifl_executor *ex, int32_t id)
{
    char buf[256] = "";
    int64_t n = 0;
    if (id >= 0 && ifl_executor_detokenize(ex, &id, 1, 1, buf, sizeof buf, &n) != 0)
        buf[0] = 0;
    return json_string(buf);
}

int ifl_executor_apply_chat_template(ifl_executor *ex, const char *template_src,
                                     const char *context_json, char **out, int64_t *out_len,
                                     char *err)
{
    if (out)
        *out = NULL;
    if (out_len)
        *out_len = 0;
    if (!ex || !context_json || !out)
        return ifl_err(err, IFL_EINVAL, "chat template: executor, context and out are required");
    json_error_t je;
    json_t *ctx = json_loads(context_json, JSON_REJECT_DUPLICATES, &je);
    if (!ctx)
        return ifl_err(err, IFL_EINVAL, "context: line %d: %s", je.line, je.text);
    if (!json_is_object(ctx)) {
        json_decref(ctx);
        return ifl_err(err, IFL_EINVAL, "context: must be a JSON object ({\"messages\": [...]})");
    }
    if (!json_is_array(json_object_get(ctx, "messages"))) {
        json_decref(ctx);
        return ifl_err(err, IFL_EINVAL, "context.messages: a list of messages is required");
    }
    /* what transformers passes when the caller does not */
    if (!json_object_get(ctx, "bos_token"))
        json_object_set_new(ctx, "bos_token", token_text(ex, ifl_vocab_bos(ex->vocab)));
    if (!json_object_get(ctx, "eos_token"))
        json_object_set_new(ctx, "eos_token", token_text(ex, ifl_vocab_eos(ex->vocab)));
    if (!json_object_get(ctx, "add_generation_prompt"))
        json_object_set_new(ctx, "add_generation_prompt", json_false());
    struct ifl_chat_template *own = NULL;
    const struct ifl_chat_template *t;
    char cerr[IFL_ERR_LEN] = "";
    int rc = 0;
    if (template_src) {
        rc = ifl_chat_template_compile(&own, template_src, strlen(template_src), cerr);
        if (rc) {
            json_decref(ctx);
            return ifl_err(err, rc, "template: %s", cerr);
        }
        t = own;
    } else if (!(t = model_template(ex, err))) {
        json_decref(ctx);
        return IFL_ENOMEM;
    }
    char *text = NULL;
    size_t n = 0;
    rc = ifl_chat_render(t, ctx, NULL, &text, &n, cerr);
    json_decref(ctx);
    ifl_chat_template_free(own);
    if (rc == IFL_ENOMEM)
        return ifl_err(err, rc, "chat template: out of memory");
    if (rc) /* the template refused the conversation, or failed on it */
        return ifl_err(err, rc == IFL_EFULL ? IFL_EFULL : IFL_EINVAL, "the chat template says: %s",
                       cerr);
    *out = text;
    if (out_len)
        *out_len = (int64_t)n;
    return 0;
}

void ifl_free(void *p)
{
    free(p);
}
