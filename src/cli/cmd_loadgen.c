/*
 * `inflight bench --url URL`: a load generator for any OpenAI-compatible
 * server (inflight serve, llama-server, vLLM, TGI's OpenAI route, ...).
 *
 * For each concurrency C it sends N streamed /v1/completions requests,
 * keeping C in flight (libcurl's multi interface on one thread), and times
 * every server-sent event on arrival: time to first token (request start to
 * the first event carrying text), inter-token latency (gaps between text
 * events), requests/s and output tokens/s over the run's wall time. Output
 * tokens come from the final usage chunk (stream_options.include_usage)
 * when the server sends one, else from the count of text events.
 *
 * Requests ask for greedy decoding and "ignore_eos" so every request
 * generates exactly max_tokens on servers that honour it.
 */
#include <curl/curl.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/buf.h"
#include "core/timeutil.h"

#define MAX_CONC 256

struct lg_req {
    CURL *h;
    struct curl_slist *hdr;
    struct ifl_buf buf; /* bytes of the event stream not yet split into events */
    double t_start, t_first, t_last;
    int64_t n_events, n_usage;
    double *gaps; /* inter-token gaps, shared array slice */
    int64_t *n_gaps;
    int64_t gap_cap;
    int failed;
};

struct lg_run {
    int64_t tokens;
    int64_t failed;
    double *ttft;
    int64_t n_ttft;
    double *gaps;
    int64_t n_gaps, gap_cap;
};

/* Handles one complete event (the text after "data: "). */
static void on_event(struct lg_req *r, const char *data, size_t n)
{
    if (n == 6 && !memcmp(data, "[DONE]", 6))
        return;
    json_error_t je;
    json_t *j = json_loadb(data, n, 0, &je);
    if (!j)
        return;
    double now = ifl_now_s();
    json_t *choices = json_object_get(j, "choices");
    int has_text = 0;
    size_t i;
    json_t *c;
    json_array_foreach(choices, i, c)
    {
        const char *t = json_string_value(json_object_get(c, "text"));
        if (!t)
            t = json_string_value(json_object_get(json_object_get(c, "delta"), "content"));
        if (t && *t)
            has_text = 1;
    }
    json_t *usage = json_object_get(j, "usage");
    if (json_is_object(usage))
        r->n_usage = json_integer_value(json_object_get(usage, "completion_tokens"));
    if (json_object_get(j, "error"))
        r->failed = 1;
    if (has_text) {
        if (r->n_events == 0)
            r->t_first = now;
        else if (*r->n_gaps < r->gap_cap)
            r->gaps[(*r->n_gaps)++] = now - r->t_last;
        r->t_last = now;
        r->n_events++;
    }
    json_decref(j);
}

/* Appends n bytes to r's buffer; 0 when out of memory (curl then aborts). */
static int buf_add(struct lg_req *r, const char *p, size_t n)
{
    ifl_buf_add(&r->buf, p, n);
    return !r->buf.oom;
}

static size_t on_data(char *p, size_t sz, size_t nm, void *user)
{
    struct lg_req *r = user;
    size_t n = sz * nm;
    if (!buf_add(r, p, n))
        return 0;
    /* split on blank lines; each event's "data:" lines carry the payload */
    size_t start = 0;
    for (;;) {
        char *end = NULL;
        for (size_t k = start; k + 1 < r->buf.len; k++)
            if (r->buf.p[k] == '\n' && r->buf.p[k + 1] == '\n') {
                end = r->buf.p + k;
                break;
            }
        if (!end)
            break;
        char *line = r->buf.p + start;
        while (line < end) {
            char *nl = memchr(line, '\n', (size_t)(end - line));
            char *le = nl ? nl : end;
            if (le - line >= 5 && !memcmp(line, "data:", 5)) {
                char *d = line + 5;
                while (d < le && *d == ' ')
                    d++;
                size_t dl = (size_t)(le - d);
                if (dl && d[dl - 1] == '\r')
                    dl--;
                on_event(r, d, dl);
            }
            line = le + 1;
        }
        start = (size_t)(end - r->buf.p) + 2;
    }
    memmove(r->buf.p, r->buf.p + start, r->buf.len - start);
    r->buf.len -= start;
    return n;
}

struct lg_opts {
    const char *url, *model, *prompt, *api_key;
    int64_t n_req, max_tokens, timeout_s;
    int json;
};

static int start_req(CURLM *m, struct lg_req *r, const struct lg_opts *o, const char *url,
                     const char *body)
{
    /* keep the shared gap array, reset the rest */
    double *gaps = r->gaps;
    int64_t *n_gaps = r->n_gaps, gap_cap = r->gap_cap;
    memset(r, 0, sizeof(*r));
    r->gaps = gaps;
    r->n_gaps = n_gaps;
    r->gap_cap = gap_cap;
    r->h = curl_easy_init();
    if (!r->h)
        return -1;
    r->hdr = curl_slist_append(NULL, "Content-Type: application/json");
    if (o->api_key) {
        char auth[512];
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", o->api_key);
        r->hdr = curl_slist_append(r->hdr, auth);
    }
    curl_easy_setopt(r->h, CURLOPT_URL, url);
    curl_easy_setopt(r->h, CURLOPT_HTTPHEADER, r->hdr);
    curl_easy_setopt(r->h, CURLOPT_COPYPOSTFIELDS, body);
    curl_easy_setopt(r->h, CURLOPT_WRITEFUNCTION, on_data);
    curl_easy_setopt(r->h, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(r->h, CURLOPT_TIMEOUT, (long)o->timeout_s);
    curl_easy_setopt(r->h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(r->h, CURLOPT_PRIVATE, r);
    r->t_start = ifl_now_s();
    return curl_multi_add_handle(m, r->h) == CURLM_OK ? 0 : -1;
}

static void run_level(const struct lg_opts *o, int conc, const char *url, const char *body,
                      struct lg_run *res, double *wall)
{
    CURLM *m = curl_multi_init();
    struct lg_req *reqs = calloc((size_t)conc, sizeof(*reqs));
    int64_t started = 0, finished = 0;
    res->tokens = res->failed = res->n_ttft = res->n_gaps = 0;
    double t0 = ifl_now_s();
    for (int i = 0; i < conc && started < o->n_req; i++, started++) {
        reqs[i].gaps = res->gaps;
        reqs[i].n_gaps = &res->n_gaps;
        reqs[i].gap_cap = res->gap_cap;
        if (start_req(m, &reqs[i], o, url, body))
            res->failed++, finished++;
    }
    while (finished < o->n_req && m) {
        int running = 0;
        curl_multi_perform(m, &running);
        int left;
        CURLMsg *msg;
        while ((msg = curl_multi_info_read(m, &left))) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            struct lg_req *r;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **)&r);
            long code = 0;
            curl_easy_getinfo(msg->easy_handle, CURLINFO_RESPONSE_CODE, &code);
            if (msg->data.result != CURLE_OK || code != 200 || r->failed || r->n_events == 0) {
                res->failed++;
            } else {
                res->ttft[res->n_ttft++] = r->t_first - r->t_start;
                res->tokens += r->n_usage > 0 ? r->n_usage : r->n_events;
            }
            curl_multi_remove_handle(m, r->h);
            curl_easy_cleanup(r->h);
            curl_slist_free_all(r->hdr);
            ifl_buf_free(&r->buf);
            finished++;
            if (started < o->n_req) {
                started++;
                if (start_req(m, r, o, url, body))
                    res->failed++, finished++;
            }
        }
        if (finished < o->n_req)
            curl_multi_poll(m, NULL, 0, 100, NULL);
    }
    *wall = ifl_now_s() - t0;
    free(reqs);
    curl_multi_cleanup(m);
}

static size_t collect_body(char *p, size_t sz, size_t nm, void *user)
{
    /* only the buffer of the struct is used */
    return buf_add(user, p, sz * nm) ? sz * nm : 0;
}

/* The first model id GET /v1/models lists, copied into out; 0 on success. */
static int served_model(const char *base, size_t base_len, const char *api_key, char *out,
                        size_t cap)
{
    char url[1024];
    snprintf(url, sizeof url, "%.*s/v1/models", (int)base_len, base);
    CURL *h = curl_easy_init();
    if (!h)
        return -1;
    struct lg_req r = {0};
    struct curl_slist *hdr = NULL;
    if (api_key) {
        char auth[512];
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", api_key);
        hdr = curl_slist_append(NULL, auth);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
    }
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, collect_body);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &r);
    curl_easy_setopt(h, CURLOPT_TIMEOUT, 30L);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    int rc = curl_easy_perform(h) == CURLE_OK ? 0 : -1;
    curl_easy_cleanup(h);
    curl_slist_free_all(hdr);
    json_t *j = rc ? NULL : json_loadb(r.buf.p ? r.buf.p : "", r.buf.len, 0, NULL);
    const char *id =
        json_string_value(json_object_get(json_array_get(json_object_get(j, "data"), 0), "id"));
    if (id)
        snprintf(out, cap, "%s", id);
    else
        rc = -1;
    json_decref(j);
    ifl_buf_free(&r.buf);
    return rc;
}

static const char LG_HELP[] =
    "usage: inflight bench --url URL [options]   (any OpenAI-compatible server)\n"
    "  --url URL               the server, e.g. http://127.0.0.1:8080\n"
    "  --model NAME            the model field of each request (default: the first id\n"
    "                          GET /v1/models lists)\n"
    "  -n, --requests N        requests per concurrency level (default 64)\n"
    "  -c, --concurrency LIST  requests in flight, e.g. 1,4,16 (default 1)\n"
    "  --max-tokens N          tokens each request generates (default 64)\n"
    "  --prompt TEXT           the prompt (default: a short story opening)\n"
    "  --api-key KEY           sent as a bearer token\n"
    "  --timeout S             per-request limit in seconds (default 600)\n"
    "  --json                  one JSON object per level instead of the table\n";

int cmd_loadgen(int argc, char **argv)
{
    struct lg_opts o = {.model = NULL,
                        .prompt = "Once upon a time, there was a little robot who lived in a "
                                  "quiet town by the sea. Every morning",
                        .n_req = 64,
                        .max_tokens = 64,
                        .timeout_s = 600};
    int conc[16] = {1}, n_conc = 1;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(LG_HELP, stdout);
            return 0;
        }
        if (!strcmp(a, "--json")) {
            o.json = 1;
            continue;
        }
        if (i + 1 >= argc)
            return cli_usage_error("bench", "option '%s' needs a value (or is unknown)", a);
        const char *v = argv[++i];
        if (!strcmp(a, "--url"))
            o.url = v;
        else if (!strcmp(a, "--model"))
            o.model = v;
        else if (!strcmp(a, "--prompt"))
            o.prompt = v;
        else if (!strcmp(a, "--api-key"))
            o.api_key = v;
        else if (!strcmp(a, "-n") || !strcmp(a, "--requests")) {
            if (cli_parse_i64(v, 1, 1000000, &o.n_req))
                return cli_usage_error("bench", "-n wants 1..1000000 requests, not '%s'", v);
        } else if (!strcmp(a, "--max-tokens")) {
            if (cli_parse_i64(v, 1, 1 << 20, &o.max_tokens))
                return cli_usage_error("bench", "--max-tokens wants a count >= 1, not '%s'", v);
        } else if (!strcmp(a, "--timeout")) {
            if (cli_parse_i64(v, 1, 86400, &o.timeout_s))
                return cli_usage_error("bench", "--timeout wants 1..86400 seconds, not '%s'", v);
        } else if (!strcmp(a, "-c") || !strcmp(a, "--concurrency")) {
            if ((n_conc = cli_parse_int_list(v, 1, MAX_CONC, conc, 16)) < 0)
                return cli_usage_error("bench",
                                       "-c wants up to 16 counts of 1..%d, like 1,4,16, not '%s'",
                                       MAX_CONC, v);
        } else
            return cli_usage_error("bench", "unknown option '%s' with --url (see --help)", a);
    }
    if (!o.url || strncmp(o.url, "http", 4))
        return cli_usage_error("bench",
                               "--url wants the server's address, like http://127.0.0.1:8080");
    char url[1024];
    size_t ul = strlen(o.url);
    while (ul > 0 && o.url[ul - 1] == '/')
        ul--;
    snprintf(url, sizeof url, "%.*s/v1/completions", (int)ul, o.url);
    if (curl_global_init(CURL_GLOBAL_DEFAULT)) {
        fprintf(stderr, "inflight bench: cannot initialise libcurl\n");
        return 1;
    }
    char model[256];
    if (!o.model) {
        if (served_model(o.url, ul, o.api_key, model, sizeof model)) {
            fprintf(stderr, "inflight bench: GET %.*s/v1/models failed; give --model NAME\n",
                    (int)ul, o.url);
            curl_global_cleanup();
            return CLI_EXIT_USAGE;
        }
        o.model = model;
    }
    json_t *b = json_pack("{s:s, s:s, s:I, s:f, s:b, s:{s:b}, s:b}", "model", o.model, "prompt",
                          o.prompt, "max_tokens", (json_int_t)o.max_tokens, "temperature", 0.0,
                          "stream", 1, "stream_options", "include_usage", 1, "ignore_eos", 1);
    char *body = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    if (!body) {
        curl_global_cleanup();
        fprintf(stderr, "inflight bench: out of memory\n");
        return 1;
    }
    struct lg_run res = {0};
    res.ttft = malloc(sizeof(double) * (size_t)o.n_req);
    res.gap_cap = o.n_req * (o.max_tokens + 1);
    res.gaps = malloc(sizeof(double) * (size_t)res.gap_cap);
    int status = 0;
    if (!o.json)
        printf("server %s, %lld requests per level, %lld tokens each\n"
               "| concurrency | requests/s | output tok/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms "
               "| ITL p99 ms | failed |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n",
               o.url, (long long)o.n_req, (long long)o.max_tokens);
    for (int ci = 0; ci < n_conc && res.ttft && res.gaps; ci++) {
        double wall;
        run_level(&o, conc[ci], url, body, &res, &wall);
        double rps = (double)(o.n_req - res.failed) / wall, tps = (double)res.tokens / wall;
        double t50 = cli_percentile(res.ttft, res.n_ttft, 0.5) * 1e3,
               t99 = cli_percentile(res.ttft, res.n_ttft, 0.99) * 1e3;
        double i50 = cli_percentile(res.gaps, res.n_gaps, 0.5) * 1e3,
               i99 = cli_percentile(res.gaps, res.n_gaps, 0.99) * 1e3;
        if (o.json)
            printf("{\"url\":\"%s\",\"concurrency\":%d,\"requests\":%lld,\"failed\":%lld,"
                   "\"requests_per_s\":%.3f,\"output_tps\":%.2f,\"ttft_p50_ms\":%.3f,"
                   "\"ttft_p99_ms\":%.3f,\"itl_p50_ms\":%.3f,\"itl_p99_ms\":%.3f}\n",
                   o.url, conc[ci], (long long)o.n_req, (long long)res.failed, rps, tps, t50, t99,
                   i50, i99);
        else
            printf("| %d | %.2f | %.1f | %.1f | %.1f | %.2f | %.2f | %lld |\n", conc[ci], rps, tps,
                   t50, t99, i50, i99, (long long)res.failed);
        fflush(stdout);
        if (res.failed)
            status = 1;
    }
    free(res.ttft);
    free(res.gaps);
    free(body);
    curl_global_cleanup();
    return status;
}
