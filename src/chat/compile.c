/*
 * Compiling a chat template: the source must be valid UTF-8; newlines are
 * normalised as Jinja's lexer does; then lex.c and parse_*.c build the AST in
 * the template's own arena, which a syntax error or the memory cap frees.
 * Also the default template (ChatML) used when a model brings none.
 */
#include <stdlib.h>
#include <string.h>

#include "chat/internal.h"
#include "core/err.h"
#include "core/utf8.h"

/* Normalises \r\n and \r to \n and drops one trailing newline, as Jinja's
 * lexer does with keep_trailing_newline=False. */
static char *normalize(const char *src, size_t len, size_t *out_len)
{
    char *o = malloc(len + 1);
    if (!o)
        return NULL;
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            o[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n')
                i++;
        } else {
            o[n++] = src[i];
        }
    }
    if (n && o[n - 1] == '\n')
        n--;
    o[n] = 0;
    *out_len = n;
    return o;
}

/* Lexes and parses into t's arena. Returns 0, -1 (syntax error: msg, line)
 * or -2 (the arena ran out). */
static int compile_into(struct ifl_chat_template *t, const char *src, size_t n, char *msg,
                        int *line)
{
    jmp_buf jb;
    t->ar.oom = &jb;
    if (setjmp(jb))
        return -2;
    struct ifl_chat_token *toks;
    size_t ntoks;
    if (ifl_chat_lex(&t->ar, src, n, &toks, &ntoks, msg, line) ||
        ifl_chat_parse(&t->ar, toks, ntoks, &t->root, msg, line))
        return -1;
    return 0;
}

int ifl_chat_template_compile(struct ifl_chat_template **out, const char *src, size_t len,
                              char *err)
{
    *out = NULL;
    if (!src && len)
        return ifl_err(err, IFL_EINVAL, "chat template: no source");
    if (!ifl_utf8_valid(src, len))
        return ifl_err(err, IFL_EFORMAT, "TemplateSyntaxError: template is not valid UTF-8");
    size_t n;
    char *norm = normalize(src ? src : "", len, &n);
    struct ifl_chat_template *t = calloc(1, sizeof *t);
    if (!norm || !t) {
        free(norm);
        free(t);
        return ifl_err(err, IFL_ENOMEM, "chat template: out of memory");
    }
    t->ar.cap = IFL_CHAT_MAX_MEMORY;
    char msg[IFL_ERR_LEN];
    int line = 0;
    int rc = compile_into(t, norm, n, msg, &line);
    free(norm);
    t->ar.oom = NULL;
    if (rc == 0) {
        *out = t;
        return 0;
    }
    if (rc == -1)
        rc = ifl_err(err, IFL_EFORMAT, "TemplateSyntaxError: line %d: %s", line, msg);
    else
        rc = ifl_err(err, t->ar.failed == 2 ? IFL_ENOMEM : IFL_EFULL,
                     "chat template: out of memory while compiling");
    ifl_chat_arena_free(&t->ar);
    free(t);
    return rc;
}

void ifl_chat_template_free(struct ifl_chat_template *t)
{
    if (!t)
        return;
    ifl_chat_arena_free(&t->ar);
    free(t);
}

const char ifl_chat_default_template[] =
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string %}{{- message['content'] }}"
    "{%- elif message['content'] is iterable %}"
    "{%- for part in message['content'] %}{%- if part['type'] == 'text' %}{{- part['text'] }}"
    "{%- endif %}{%- endfor %}"
    "{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}";
