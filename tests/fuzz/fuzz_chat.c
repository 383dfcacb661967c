/* libFuzzer target for the chat-template renderer: the input is a template
 * source; when it compiles it is rendered against a small fixed
 * conversation (system, user, assistant with a tool call, tool result,
 * user; one tool definition) with tight limits, so ASan/UBSan see every
 * path the lexer, parser and evaluator let through. A seed corpus: the
 * templates in ../shared/chat/templates. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "chat/chat.h"
#include "core/err.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static const char ctx_json[] =
    "{\"messages\": ["
    "{\"role\": \"system\", \"content\": \"You are helpful.\"},"
    "{\"role\": \"user\", \"content\": \"Hi \\u00e9\\u65e5 \\\"q\\\" <b>\\n\"},"
    "{\"role\": \"assistant\", \"content\": \"\", \"reasoning_content\": \"think\","
    " \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", \"function\":"
    " {\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"n\": 1.5}}}]},"
    "{\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"{\\\"t\\\": 20}\"},"
    "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"and now?\"},"
    " {\"type\": \"image\"}]}],"
    "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\","
    " \"description\": \"Weather \\u00b0C\", \"parameters\": {\"type\": \"object\","
    " \"properties\": {\"city\": {\"type\": \"string\"}, \"unit\": {\"type\": \"string\","
    " \"enum\": [\"c\", \"f\"]}}, \"required\": [\"city\"]}}}],"
    "\"documents\": null, \"add_generation_prompt\": true, \"enable_thinking\": false,"
    "\"bos_token\": \"<s>\", \"eos_token\": \"</s>\", \"n\": 3, \"x\": -2.5e-3}";

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static json_t *ctx;
    if (!ctx) {
        ctx = json_loads(ctx_json, 0, NULL);
        if (!ctx)
            abort();
    }
    struct ifl_chat_template *t = NULL;
    char err[IFL_ERR_LEN];
    if (ifl_chat_template_compile(&t, (const char *)data, size, err) != 0)
        return 0;
    struct ifl_chat_limits lim = {
        .max_output = 1 << 20, .max_memory = 32 << 20, .max_steps = 200000};
    char *out = NULL;
    size_t n = 0;
    if (ifl_chat_render_limited(t, ctx, NULL, &lim, &out, &n, err) == 0) {
        if (strlen(out) > n)
            abort(); /* the length must cover the text */
        free(out);
    } else if (out) {
        abort(); /* failure leaves no output */
    }
    ifl_chat_template_free(t);
    return 0;
}
