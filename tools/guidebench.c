/*
 * guidebench: what guided decoding costs. Keeps C requests in flight on
 * one executor (closed loop: a finished request is replaced at once) until
 * R have finished, once unguided and once under a JSON Schema, all at
 * temperature 1, and reports generated tokens per second of each, their
 * ratio, and the per-step mask time (p50 / p99 / max, from the engine's
 * histogram) of the guided run.
 *
 *   build/tools/guidebench -m MODEL [-c 16] [-r 64] [-n 64] [-t THREADS]
 *                          [--schema FILE] [--regex RE] [--cold]
 *
 * A guided request ends where its grammar does (at most 4n tokens); in the
 * unguided run that follows, request i ignores end tokens and makes as
 * many tokens as guided request i did, so both runs attend over the same
 * context lengths. A warm-up
 * round of C requests runs first in each mode (the guided one pays the
 * vocabulary index and the cold masks there) unless --cold.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/err.h"
#include "core/timeutil.h"
#include "inflight.h"
#include "runtime/exec.h"

/* an order of one to three lines: objects, bounded strings, numbers */
static const char DEFAULT_SCHEMA[] =
    "{\"type\":\"object\",\"properties\":{\"items\":{\"type\":\"array\",\"minItems\":1,"
    "\"maxItems\":3,\"items\":{\"type\":\"object\",\"properties\":{\"sku\":{\"type\":\"string\","
    "\"minLength\":3,\"maxLength\":12},\"qty\":{\"type\":\"integer\",\"minimum\":1,\"maximum\":"
    "100},\"price\":{\"type\":\"number\",\"minimum\":0,\"maximum\":1000}},\"required\":[\"sku\","
    "\"qty\",\"price\"]}},\"note\":{\"type\":\"string\",\"maxLength\":40}},\"required\":["
    "\"items\",\"note\"]}";

struct opts {
    const char *model;
    int32_t conc, total, n_tokens, threads;
    const char *guide;
    int guide_type;
    int cold;
};

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s)
        s[n] = 0;
    fclose(f);
    return s;
}

/* One closed-loop run; returns tokens per second (< 0 on error). */
/* lens: per request, guided runs record the tokens each made and unguided
 * runs make exactly that many (NULL: -n each). */
static double run(ifl_executor *ex, const struct opts *o, int guided, int32_t total,
                  const int32_t *prompt, int32_t n_prompt, uint64_t seed0, long *tokens_out,
                  int32_t *n_length, int32_t *lens)
{
    struct ifl_request r;
    ifl_request_init(&r);
    r.input_ids = prompt;
    r.n_input = n_prompt;
    r.sampling.temperature = 1.0f;
    if (guided) {
        r.guide_type = o->guide_type;
        r.guide_text = o->guide;
        r.max_tokens = 4 * o->n_tokens;
    } else {
        r.sampling.ignore_eos = 1;
        r.max_tokens = o->n_tokens;
    }
    int32_t started = 0, done = 0, live = 0;
    ifl_id first_id = 0;
    long tokens = 0;
    *n_length = 0;
    char err[IFL_ERR_LEN];
    double t0 = ifl_now_s();
    while (done < total) {
        while (live < o->conc && started < total) {
            ifl_id id;
            r.sampling.seed = seed0 + (uint64_t)started;
            if (!guided && lens)
                r.max_tokens = lens[started] > 0 ? lens[started] : 1;
            if (ifl_enqueue(ex, &r, &id, err)) {
                fprintf(stderr, "guidebench: enqueue: %s\n", err);
                return -1;
            }
            if (!started)
                first_id = id;
            started++;
            live++;
        }
        struct ifl_response *resp[64];
        int32_t got = 0;
        if (ifl_await(ex, NULL, 0, 600000, resp, 64, &got))
            return -1;
        for (int32_t i = 0; i < got; i++) {
            int64_t at = (int64_t)(resp[i]->request_id - first_id);
            for (int32_t k = 0; k < resp[i]->n_results; k++) {
                tokens += resp[i]->results[k].n_tokens;
                if (guided && lens && at >= 0 && at < total)
                    lens[at] += resp[i]->results[k].n_tokens;
            }
            if (resp[i]->is_final) {
                done++;
                live--;
                *n_length += resp[i]->n_results > 0 &&
                             resp[i]->results[0].finish_reason == IFL_FINISH_LENGTH;
            }
            ifl_response_free(resp[i]);
        }
    }
    double dt = ifl_now_s() - t0;
    *tokens_out = tokens;
    return (double)tokens / dt;
}

static int usage(void)
{
    fprintf(stderr, "usage: guidebench -m MODEL [-c CONCURRENCY] [-r REQUESTS] [-n TOKENS] "
                    "[-t THREADS] [--schema FILE | --regex RE] [--cold]\n");
    return 2;
}

int main(int argc, char **argv)
{
    struct opts o = {.conc = 16,
                     .total = 64,
                     .n_tokens = 64,
                     .threads = 0,
                     .guide = DEFAULT_SCHEMA,
                     .guide_type = IFL_GUIDE_JSON_SCHEMA};
    char *owned = NULL;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "--cold")) {
            o.cold = 1;
            continue;
        }
        if (!v)
            return usage();
        i++;
        if (!strcmp(a, "-m"))
            o.model = v;
        else if (!strcmp(a, "-c"))
            o.conc = atoi(v);
        else if (!strcmp(a, "-r"))
            o.total = atoi(v);
        else if (!strcmp(a, "-n"))
            o.n_tokens = atoi(v);
        else if (!strcmp(a, "-t"))
            o.threads = atoi(v);
        else if (!strcmp(a, "--schema")) {
            if (!(owned = read_file(v))) {
                fprintf(stderr, "guidebench: cannot read %s\n", v);
                return 1;
            }
            o.guide = owned;
        } else if (!strcmp(a, "--regex")) {
            o.guide = v;
            o.guide_type = IFL_GUIDE_REGEX;
        } else {
            return usage();
        }
    }
    if (!o.model || o.conc < 1 || o.conc > 1024 || o.total < 1 || o.n_tokens < 1)
        return usage();
    struct ifl_executor_config c;
    ifl_executor_config_default(&c);
    c.max_batch_size = o.conc;
    c.n_threads = o.threads;
    c.n_ctx = 1024;
    ifl_executor *ex[2] = {NULL, NULL};
    char err[IFL_ERR_LEN];
    /* one executor per mode, so the guided one starts cold */
    for (int k = 0; k < 2; k++)
        if (ifl_executor_create(&ex[k], o.model, &c, err)) {
            fprintf(stderr, "guidebench: %s\n", err);
            return 1;
        }
    int32_t prompt[8];
    int64_t n_prompt = 0;
    if (ifl_executor_tokenize(ex[0], "Once upon a time", 16, 1, 0, prompt, 8, &n_prompt) ||
        n_prompt < 1) {
        prompt[0] = 1;
        n_prompt = 1;
    }
    double tps[2];
    long toks[2];
    int32_t n_len[2];
    int32_t *lens = calloc((size_t)o.total, sizeof *lens);
    if (!lens)
        return 1;
    /* guided first: then each unguided request makes exactly as many
     * tokens as the guided one of the same index, so both runs attend over
     * the same context lengths and differ only by the guide */
    for (int g = 1; g >= 0; g--) {
        if (!o.cold) {
            long t;
            int32_t l;
            if (run(ex[g], &o, g, o.conc, prompt, (int32_t)n_prompt, 999, &t, &l, NULL) < 0)
                return 1;
        }
        tps[g] =
            run(ex[g], &o, g, o.total, prompt, (int32_t)n_prompt, 1, &toks[g], &n_len[g], lens);
        if (tps[g] < 0)
            return 1;
    }
    free(lens);
    for (int g = 0; g < 2; g++)
        printf("%-9s %d requests, %d in flight: %ld tokens, %.1f tokens/s%s\n",
               g ? "guided" : "unguided", o.total, o.conc, toks[g], tps[g],
               g && n_len[g] ? " (some cut by max_tokens)" : "");
    struct ifl_xguide_stats st;
    ifl_exec_guide_stats(ex[1], &st);
    printf("ratio guided/unguided: %.2fx\n", tps[1] / tps[0]);
    printf("mask per step: p50 %.3f ms, p99 %.3f ms, max %.2f ms, mean %.3f ms over %llu masks "
           "(cache %llu hits, %llu misses)%s\n",
           ifl_xguide_stats_quantile(&st, 0.5), ifl_xguide_stats_quantile(&st, 0.99), st.max_ms,
           st.n_masks ? st.total_ms / (double)st.n_masks : 0.0, (unsigned long long)st.n_masks,
           (unsigned long long)st.cache_hits, (unsigned long long)st.cache_misses,
           o.cold ? "" : " (warm-up round included)");
    ifl_executor_destroy(ex[0], 0);
    ifl_executor_destroy(ex[1], 0);
    free(owned);
    return 0;
}
