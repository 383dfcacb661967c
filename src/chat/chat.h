/*
 * Chat templates: a Jinja subset that renders a model's
 * `tokenizer.chat_template` the way Hugging Face transformers does
 * (jinja2 ImmutableSandboxedEnvironment, trim_blocks and lstrip_blocks on,
 * keep_trailing_newline off, loopcontrols, the {% generation %} tag, a
 * json.dumps-compatible tojson, raise_exception and strftime_now).
 *
 * A compiled template is immutable: render it from any number of threads at
 * once. Templates are untrusted text (they come from GGUF files or users):
 * compile and render never crash or assert on any input; rendering is capped
 * in nesting depth, loop iterations, memory and output size.
 */
#ifndef IFL_CHAT_CHAT_H
#define IFL_CHAT_CHAT_H

#include <stddef.h>
#include <time.h>

#include <jansson.h>

struct ifl_chat_template;

/* ChatML, for models that ship no template:
 * <|im_start|>{role}\n{content}<|im_end|>\n per message, then
 * <|im_start|>assistant\n when add_generation_prompt is true. */
extern const char ifl_chat_default_template[];

/* Limits applied to every render (hostile templates stop with an error). */
#define IFL_CHAT_MAX_OUTPUT ((size_t)64 << 20)  /* bytes of rendered text */
#define IFL_CHAT_MAX_MEMORY ((size_t)256 << 20) /* bytes of working memory per render */
#define IFL_CHAT_MAX_STEPS 50000000LL           /* evaluation steps (~ a second or two) */

/* Parses src[0..len) (UTF-8). On success *out owns the template (free with
 * ifl_chat_template_free). On failure returns IFL_EFORMAT with err (optional,
 * IFL_ERR_LEN bytes) holding "TemplateSyntaxError: line L: <problem>", or
 * IFL_ENOMEM. */
int ifl_chat_template_compile(struct ifl_chat_template **out, const char *src, size_t len,
                              char *err);

void ifl_chat_template_free(struct ifl_chat_template *t);

/* Renders t with the variables of the JSON object context (messages, tools,
 * documents, add_generation_prompt, bos_token, eos_token, ...; a JSON null
 * becomes Python None, a missing key is Undefined). now is the instant
 * strftime_now() reports, as broken-down local time; NULL means the
 * current local time.
 *
 * On success *out is a malloc'd NUL-terminated string of *out_len bytes
 * (the caller frees it). On failure *out is NULL and err (optional)
 * holds "<ExceptionClass>: <message>" as Jinja2 would name it, e.g.
 * "TemplateError: Conversation roles must alternate user/assistant/...".
 * Returns IFL_EINVAL for an error the template raised itself
 * (raise_exception), IFL_EFULL when a limit was hit, IFL_ENOMEM, or
 * IFL_EFORMAT for any other evaluation error (TypeError, UndefinedError,
 * ...). */
int ifl_chat_render(const struct ifl_chat_template *t, const json_t *context, const struct tm *now,
                    char **out, size_t *out_len, char *err);

/* Per-render caps; 0 in a field means the IFL_CHAT_MAX_* default. */
struct ifl_chat_limits {
    size_t max_output;   /* bytes of rendered text */
    size_t max_memory;   /* bytes of working memory */
    long long max_steps; /* evaluation steps */
};

/* ifl_chat_render with explicit limits (lim may be NULL). */
int ifl_chat_render_limited(const struct ifl_chat_template *t, const json_t *context,
                            const struct tm *now, const struct ifl_chat_limits *lim, char **out,
                            size_t *out_len, char *err);

#endif
