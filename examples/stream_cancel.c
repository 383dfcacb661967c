/*
 * Example: a streamed request cancelled halfway.
 *
 *   build/examples/stream_cancel MODEL.gguf "prompt" [CANCEL_AFTER_TOKENS [MAX_TOKENS]]
 *
 * Text is printed as each response arrives. After CANCEL_AFTER_TOKENS
 * tokens (default 20) of at most MAX_TOKENS (default 100) the client
 * cancels; the engine ends the request at its next step and sends a final
 * response whose finish reason is "cancelled". The engine does not wait
 * for the client, so on a small model the request may well be finished by
 * then (finish reason "length"). Uses only the public header.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inflight.h"

static const char *reason_name(int32_t r)
{
    switch (r) {
    case IFL_FINISH_END_ID:
        return "end";
    case IFL_FINISH_STOP_WORDS:
        return "stop";
    case IFL_FINISH_LENGTH:
        return "length";
    case IFL_FINISH_TIMED_OUT:
        return "timed_out";
    case IFL_FINISH_CANCELLED:
        return "cancelled";
    default:
        return "not finished";
    }
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL.gguf PROMPT [CANCEL_AFTER_TOKENS [MAX_TOKENS]]\n",
                argv[0]);
        return 2;
    }
    int cancel_after = argc > 3 ? atoi(argv[3]) : 20;
    int max_tokens = argc > 4 ? atoi(argv[4]) : 100;
    char err[512] = "";
    ifl_executor *ex;
    if (ifl_executor_create(&ex, argv[1], NULL, err)) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    int64_t len = (int64_t)strlen(argv[2]), n = 0;
    ifl_executor_tokenize(ex, argv[2], len, 1, 1, NULL, 0, &n); /* the count first */
    int32_t *prompt = malloc(sizeof(int32_t) * (size_t)(n ? n : 1));
    if (!prompt || ifl_executor_tokenize(ex, argv[2], len, 1, 1, prompt, n, &n)) {
        fprintf(stderr, "cannot tokenize the prompt\n");
        ifl_executor_destroy(ex, 0);
        return 2;
    }
    struct ifl_request req;
    ifl_request_init(&req);
    req.input_ids = prompt;
    req.n_input = (int32_t)n;
    req.max_tokens = max_tokens;
    req.streaming = 1;
    req.sampling.temperature = 0;
    req.sampling.ignore_eos = 1;
    ifl_id id;
    if (ifl_enqueue(ex, &req, &id, err)) {
        fprintf(stderr, "enqueue: %s\n", err);
        return 1;
    }
    int tokens = 0, cancelled = 0, final = 0;
    int32_t reason = 0;
    while (!final) {
        struct ifl_response *r;
        int32_t got;
        if (ifl_await(ex, &id, 1, 60000, &r, 1, &got))
            break;
        fwrite(r->results[0].text, 1, (size_t)r->results[0].n_text, stdout);
        fflush(stdout);
        tokens += r->results[0].n_tokens;
        final = r->is_final;
        reason = r->results[0].finish_reason;
        ifl_response_free(r);
        if (!cancelled && tokens >= cancel_after) {
            ifl_cancel(ex, id);
            cancelled = 1;
        }
    }
    printf("\n[%d tokens, finish reason: %s]\n", tokens, reason_name(reason));
    free(prompt);
    ifl_executor_destroy(ex, 1);
    return 0;
}
