/*
 * Example: a batch of prompts served together by the executor.
 *
 *   build/examples/batch MODEL.gguf "prompt one" "prompt two" ...
 *
 * Every prompt is enqueued at once (ifl_enqueue_many), so the engine runs
 * them in the same forward passes; the responses are awaited together and
 * printed in prompt order. Uses only the public header.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inflight.h"

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s MODEL.gguf PROMPT [PROMPT ...]\n", argv[0]);
        return 2;
    }
    int n = argc - 2;
    char err[512] = "";
    struct ifl_executor_config cfg;
    ifl_executor_config_default(&cfg);
    ifl_executor *ex;
    if (ifl_executor_create(&ex, argv[1], &cfg, err)) {
        fprintf(stderr, "%s\n", err);
        return 2;
    }
    struct ifl_request *reqs = calloc((size_t)n, sizeof(*reqs));
    int32_t **prompts = calloc((size_t)n, sizeof(*prompts));
    ifl_id *ids = calloc((size_t)n, sizeof(*ids));
    char **texts = calloc((size_t)n, sizeof(*texts));
    int status = 0;
    for (int i = 0; i < n; i++) {
        const char *p = argv[i + 2];
        int64_t len = (int64_t)strlen(p), count = 0;
        /* a first call with no room gives the count */
        ifl_executor_tokenize(ex, p, len, 1, 1, NULL, 0, &count);
        prompts[i] = malloc(sizeof(int32_t) * (size_t)(count ? count : 1));
        if (!prompts[i] || ifl_executor_tokenize(ex, p, len, 1, 1, prompts[i], count, &count)) {
            fprintf(stderr, "cannot tokenize prompt %d\n", i);
            status = 1;
            goto done;
        }
        ifl_request_init(&reqs[i]);
        reqs[i].input_ids = prompts[i];
        reqs[i].n_input = (int32_t)count;
        reqs[i].max_tokens = 48;
        reqs[i].sampling.temperature = 0; /* greedy: the same text every run */
    }
    if (ifl_enqueue_many(ex, reqs, n, ids, err)) {
        fprintf(stderr, "enqueue: %s\n", err);
        status = 1;
        goto done;
    }
    for (int left = n; left > 0;) {
        struct ifl_response *r[16];
        int32_t got = 0;
        if (ifl_await(ex, ids, n, 60000, r, 16, &got))
            break;
        for (int32_t k = 0; k < got; k++) {
            for (int i = 0; i < n; i++)
                if (ids[i] == r[k]->request_id && r[k]->n_results > 0)
                    texts[i] = strdup(r[k]->results[0].text);
            left -= r[k]->is_final;
            ifl_response_free(r[k]);
        }
    }
    for (int i = 0; i < n; i++)
        printf("[%d] %s%s\n", i, argv[i + 2], texts[i] ? texts[i] : "(no response)");
done:
    for (int i = 0; i < n; i++) {
        free(prompts[i]);
        free(texts[i]);
    }
    free(prompts);
    free(texts);
    free(reqs);
    free(ids);
    ifl_executor_destroy(ex, 1);
    return status;
}
