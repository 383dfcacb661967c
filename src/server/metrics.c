/*
 * /metrics: counters kept by the server (relaxed atomics: each is only ever
 * added to, and exposition tolerates a torn view across counters) plus the
 * executor's latest iteration stats, in the Prometheus text format 0.0.4
 * (https://prometheus.io/docs/instrumenting/exposition_formats/).
 *
 * Histograms are cumulative at exposition: observe() bumps one bucket; the
 * renderer sums them into the `le` series.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/sysmem.h"
#include "core/timeutil.h"
#include "server/internal.h"

static const double BUCKETS[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.075, 0.1,  0.25,
                                 0.5,   0.75,   1.0,   2.5,  5.0,   10.0, 20.0,  40.0, 80.0};
#define N_BUCKETS ((int)(sizeof BUCKETS / sizeof BUCKETS[0]))

static const struct {
    const char *name, *help;
} HISTS[IFL_HIST_COUNT] = {
    {"inflight_time_to_first_token_seconds", "Time from arrival to the first generated token."},
    {"inflight_inter_token_latency_seconds", "Time between generated tokens of a request."},
    {"inflight_e2e_request_latency_seconds", "Time from arrival to the last response."},
    {"inflight_request_queue_time_seconds", "Time from arrival to first being scheduled."},
};

void ifl_server_metrics_observe(struct ifl_server *s, int hist, double seconds)
{
    if (hist < 0 || hist >= IFL_HIST_COUNT || !(seconds >= 0))
        return;
    int b = 0;
    while (b < N_BUCKETS && seconds > BUCKETS[b])
        b++; /* b == N_BUCKETS: only +Inf */
    atomic_fetch_add_explicit(&s->m.hist_bucket[hist][b], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->m.hist_count[hist], 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&s->m.hist_sum_us[hist], (long long)(seconds * 1e6),
                              memory_order_relaxed);
}

/* ---- Retry-After: the recent completion rate against the queue ---- */

#define RATE_SPACING_US 250000  /* samples at least this far apart */
#define RATE_WINDOW_US 60000000 /* the rate looks back this far */
#define RETRY_MAX_S 600

/* Whether a sample taken now would be kept: the newest is old enough. */
static int rate_due(const struct ifl_server_rate *r, int64_t now)
{
    int newest = (r->head + IFL_RATE_SAMPLES - 1) % IFL_RATE_SAMPLES;
    return !r->n || now - r->t_us[newest] >= RATE_SPACING_US;
}

/* Adds (now, completed) to the ring unless the newest sample is recent.
 * Called with s->rate.mu held. */
static void rate_sample(struct ifl_server_rate *r, int64_t now, int64_t done)
{
    if (!rate_due(r, now))
        return;
    r->t_us[r->head] = now;
    r->done[r->head] = done;
    r->head = (r->head + 1) % IFL_RATE_SAMPLES;
    if (r->n < IFL_RATE_SAMPLES)
        r->n++;
}

static void rate_note(struct ifl_server *s)
{
    ifl_executor *ex = atomic_load_explicit(&s->ex, memory_order_acquire);
    struct ifl_iteration_stats st;
    /* a finishing handler never waits for another one's sample, and asks
     * for the stats (which measure memory) only when one is due */
    if (!ex || pthread_mutex_trylock(&s->rate.mu))
        return;
    int64_t now = ifl_now_us();
    if (rate_due(&s->rate, now) && !ifl_get_iteration_stats(ex, &st))
        rate_sample(&s->rate, now, st.completed_requests);
    pthread_mutex_unlock(&s->rate.mu);
}

int ifl_server_retry_after(struct ifl_server *s)
{
    ifl_executor *ex = atomic_load_explicit(&s->ex, memory_order_acquire);
    struct ifl_iteration_stats st;
    if (!ex || ifl_get_iteration_stats(ex, &st))
        return 1; /* loading (or stopped): nothing to go by */
    /* the work ahead of a retry: what waits, and what was preempted */
    const double queued = (double)st.queued_requests + st.paused_requests;
    const int64_t now = ifl_now_us();
    double rate = 0; /* requests completed per second, recently */
    pthread_mutex_lock(&s->rate.mu);
    rate_sample(&s->rate, now, st.completed_requests);
    for (int k = s->rate.n; k > 0; k--) { /* the oldest sample inside the window */
        int i = (s->rate.head + IFL_RATE_SAMPLES - k) % IFL_RATE_SAMPLES;
        if (now - s->rate.t_us[i] > RATE_WINDOW_US)
            continue;
        int64_t dt = now - s->rate.t_us[i], dn = st.completed_requests - s->rate.done[i];
        if (dt >= 1000000 && dn > 0)
            rate = (double)dn * 1e6 / (double)dt;
        break;
    }
    pthread_mutex_unlock(&s->rate.mu);
    double est;
    if (rate > 0) {
        est = queued / rate;
    } else {
        /* no completions lately: the mean time a request spends being
         * generated, times the batches the queue makes */
        const struct ifl_server_metrics *m = &s->m;
        long long n = atomic_load_explicit(&m->hist_count[IFL_HIST_E2E], memory_order_relaxed);
        long long e2e = atomic_load_explicit(&m->hist_sum_us[IFL_HIST_E2E], memory_order_relaxed);
        long long q = atomic_load_explicit(&m->hist_sum_us[IFL_HIST_QUEUE], memory_order_relaxed);
        double service_s = n > 0 && e2e > q ? (double)(e2e - q) * 1e-6 / (double)n : 0;
        int batch = s->cfg.exec.max_batch_size > 0 ? s->cfg.exec.max_batch_size : 1;
        est = service_s * (double)(int64_t)((queued + batch - 1) / batch);
    }
    if (!(est >= 1))
        return 1;
    return est >= RETRY_MAX_S ? RETRY_MAX_S : (int)(est + 0.999);
}

void ifl_server_metrics_finish(struct ifl_server *s, int reason)
{
    int i = reason < 0 || reason > 6 ? 7 : reason;
    atomic_fetch_add_explicit(&s->m.finish[i], 1, memory_order_relaxed);
    rate_note(s);
}

void ifl_server_metrics_tokens(struct ifl_server *s, int64_t prompt, int64_t generated)
{
    if (prompt)
        atomic_fetch_add_explicit(&s->m.prompt_tokens, prompt, memory_order_relaxed);
    if (generated)
        atomic_fetch_add_explicit(&s->m.generated_tokens, generated, memory_order_relaxed);
}

void ifl_server_metrics_http(struct ifl_server *s, int status)
{
    int i = status >= 100 && status < 600 ? status / 100 : 0;
    atomic_fetch_add_explicit(&s->m.http_status[i], 1, memory_order_relaxed);
}

void ifl_server_metrics_disconnect(struct ifl_server *s)
{
    atomic_fetch_add_explicit(&s->m.disconnects, 1, memory_order_relaxed);
}

static long long rd(atomic_llong *a)
{
    return atomic_load_explicit(a, memory_order_relaxed);
}

static void head(struct ifl_buf *b, const char *name, const char *type, const char *help)
{
    ifl_buf_addf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* name as a Prometheus label value: backslash, quote and newline escaped
 * (a malloc'd copy; NULL when out of memory) */
static char *label_value(const char *name)
{
    size_t n = strlen(name), k = 0;
    char *v = malloc(2 * n + 1);
    if (!v)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (name[i] == '\\' || name[i] == '"' || name[i] == '\n')
            v[k++] = '\\';
        v[k++] = name[i] == '\n' ? 'n' : name[i];
    }
    v[k] = 0;
    return v;
}

void ifl_server_metrics_render(struct ifl_server *s, struct ifl_buf *b)
{
    struct ifl_server_metrics *m = &s->m;
    char *model = label_value(s->model_name);
    if (!model) {
        b->oom = 1;
        return;
    }

    static const char *const reasons[8] = {"none",      "stop",      "stop_string", "length",
                                           "timed_out", "cancelled", "unknown",     "error"};
    head(b, "inflight_request_success_total", "counter",
         "Finished sequences by finish reason (stop: end token; stop_string: a stop string or "
         "word; length; timed_out; cancelled; error).");
    for (int i = 1; i < 8; i++) {
        if (i == 6)
            continue;
        ifl_buf_addf(
            b, "inflight_request_success_total{model_name=\"%s\",finish_reason=\"%s\"} %lld\n",
            model, reasons[i], rd(&m->finish[i]));
    }
    head(b, "inflight_requests_total", "counter", "Generation requests accepted.");
    ifl_buf_addf(b, "inflight_requests_total{model_name=\"%s\"} %lld\n", model, rd(&m->requests));
    head(b, "inflight_requests_rejected_total", "counter",
         "Generation requests refused because the queue was full (429).");
    ifl_buf_addf(b, "inflight_requests_rejected_total{model_name=\"%s\"} %lld\n", model,
                 rd(&m->rejected_full));
    head(b, "inflight_client_disconnects_total", "counter",
         "Requests cancelled because their client left before the end.");
    ifl_buf_addf(b, "inflight_client_disconnects_total{model_name=\"%s\"} %lld\n", model,
                 rd(&m->disconnects));
    head(b, "inflight_prompt_tokens_total", "counter", "Prompt tokens of accepted requests.");
    ifl_buf_addf(b, "inflight_prompt_tokens_total{model_name=\"%s\"} %lld\n", model,
                 rd(&m->prompt_tokens));
    head(b, "inflight_generation_tokens_total", "counter", "Generated tokens.");
    ifl_buf_addf(b, "inflight_generation_tokens_total{model_name=\"%s\"} %lld\n", model,
                 rd(&m->generated_tokens));
    head(b, "inflight_http_responses_total", "counter", "HTTP responses by status class.");
    for (int i = 1; i < 6; i++)
        ifl_buf_addf(b, "inflight_http_responses_total{code=\"%dxx\"} %lld\n", i,
                     rd(&m->http_status[i]));
    head(b, "inflight_http_requests_in_flight", "gauge", "HTTP requests being handled.");
    ifl_buf_addf(b, "inflight_http_requests_in_flight %d\n",
                 atomic_load_explicit(&s->in_flight, memory_order_relaxed));

    for (int h = 0; h < IFL_HIST_COUNT; h++) {
        head(b, HISTS[h].name, "histogram", HISTS[h].help);
        long long cum = 0;
        for (int i = 0; i < N_BUCKETS; i++) {
            cum += rd(&m->hist_bucket[h][i]);
            ifl_buf_addf(b, "%s_bucket{model_name=\"%s\",le=\"%g\"} %lld\n", HISTS[h].name, model,
                         BUCKETS[i], cum);
        }
        cum += rd(&m->hist_bucket[h][N_BUCKETS]);
        ifl_buf_addf(b, "%s_bucket{model_name=\"%s\",le=\"+Inf\"} %lld\n", HISTS[h].name, model,
                     cum);
        ifl_buf_addf(b, "%s_sum{model_name=\"%s\"} %.6f\n", HISTS[h].name, model,
                     (double)rd(&m->hist_sum_us[h]) * 1e-6);
        ifl_buf_addf(b, "%s_count{model_name=\"%s\"} %lld\n", HISTS[h].name, model,
                     rd(&m->hist_count[h]));
    }

    ifl_executor *ex = atomic_load_explicit(&s->ex, memory_order_acquire);
    struct ifl_iteration_stats st;
    memset(&st, 0, sizeof st);
    if (ex)
        ifl_get_iteration_stats(ex, &st);
    head(b, "inflight_model_loaded", "gauge", "1 once the model is loaded.");
    ifl_buf_addf(b, "inflight_model_loaded %d\n", ex != NULL);
    head(b, "inflight_num_requests_running", "gauge", "Requests being generated.");
    ifl_buf_addf(b, "inflight_num_requests_running{model_name=\"%s\"} %d\n", model,
                 st.active_requests);
    head(b, "inflight_num_requests_waiting", "gauge", "Requests queued, not yet scheduled.");
    ifl_buf_addf(b, "inflight_num_requests_waiting{model_name=\"%s\"} %d\n", model,
                 st.queued_requests);
    head(b, "inflight_num_requests_paused", "gauge", "Requests preempted, waiting to resume.");
    ifl_buf_addf(b, "inflight_num_requests_paused{model_name=\"%s\"} %d\n", model,
                 st.paused_requests);
    head(b, "inflight_kv_cache_usage_ratio", "gauge", "Fraction of KV blocks in use.");
    ifl_buf_addf(b, "inflight_kv_cache_usage_ratio{model_name=\"%s\"} %.6f\n", model,
                 st.kv_blocks_max > 0 ? (double)st.kv_blocks_used / st.kv_blocks_max : 0.0);
    head(b, "inflight_kv_cache_blocks", "gauge", "KV blocks by state.");
    ifl_buf_addf(b, "inflight_kv_cache_blocks{model_name=\"%s\",state=\"used\"} %d\n", model,
                 st.kv_blocks_used);
    ifl_buf_addf(b, "inflight_kv_cache_blocks{model_name=\"%s\",state=\"free\"} %d\n", model,
                 st.kv_blocks_free);
    ifl_buf_addf(b, "inflight_kv_cache_blocks{model_name=\"%s\",state=\"max\"} %d\n", model,
                 st.kv_blocks_max);
    ifl_buf_addf(b, "inflight_kv_cache_blocks{model_name=\"%s\",state=\"cached\"} %d\n", model,
                 st.kv_blocks_cached);
    ifl_buf_addf(b, "inflight_kv_cache_blocks{model_name=\"%s\",state=\"peak_used\"} %d\n", model,
                 st.kv_blocks_peak);
    head(b, "inflight_kv_cache_bytes", "gauge",
         "KV cache memory: the pool's address space (reserved), what of it is in memory "
         "(resident), what the blocks in use hold (used, peak_used), the bound that sized it.");
    ifl_buf_addf(b, "inflight_kv_cache_bytes{model_name=\"%s\",state=\"reserved\"} %lld\n", model,
                 (long long)st.kv_bytes_reserved);
    ifl_buf_addf(b, "inflight_kv_cache_bytes{model_name=\"%s\",state=\"resident\"} %lld\n", model,
                 (long long)st.kv_bytes_resident);
    ifl_buf_addf(b, "inflight_kv_cache_bytes{model_name=\"%s\",state=\"used\"} %lld\n", model,
                 (long long)st.kv_bytes_used);
    ifl_buf_addf(b, "inflight_kv_cache_bytes{model_name=\"%s\",state=\"peak_used\"} %lld\n", model,
                 (long long)st.kv_blocks_peak * st.kv_block_bytes);
    ifl_buf_addf(b, "inflight_kv_cache_bytes{model_name=\"%s\",state=\"bound\"} %lld\n", model,
                 (long long)st.kv_bytes_bound);
    head(b, "inflight_draft_kv_cache_bytes", "gauge",
         "Speculative decoding's own KV memory (a draft model's pool, an EAGLE-3 head's "
         "cache): its address space (reserved) and what of it is in memory (resident).");
    ifl_buf_addf(b, "inflight_draft_kv_cache_bytes{model_name=\"%s\",state=\"reserved\"} %lld\n",
                 model, (long long)st.draft_kv_bytes_reserved);
    ifl_buf_addf(b, "inflight_draft_kv_cache_bytes{model_name=\"%s\",state=\"resident\"} %lld\n",
                 model, (long long)st.draft_kv_bytes_resident);
    head(b, "inflight_kv_cache_released_blocks_total", "counter",
         "KV blocks whose memory was given back after staying free.");
    ifl_buf_addf(b, "inflight_kv_cache_released_blocks_total{model_name=\"%s\"} %lld\n", model,
                 (long long)st.kv_blocks_released);
    head(b, "inflight_tp_ranks", "gauge",
         "Tensor parallelism: processes the model is split over (1: not split).");
    ifl_buf_addf(b, "inflight_tp_ranks{model_name=\"%s\"} %d\n", model,
                 st.tp_ranks > 0 ? st.tp_ranks : 1);
    head(b, "inflight_tp_failed", "gauge", "1 once a rank of the job died or stopped answering.");
    ifl_buf_addf(b, "inflight_tp_failed{model_name=\"%s\"} %d\n", model, st.tp_failed);
    head(b, "inflight_tp_collectives_total", "counter",
         "Tensor parallelism: collectives rank 0 has taken part in.");
    ifl_buf_addf(b, "inflight_tp_collectives_total{model_name=\"%s\"} %lld\n", model,
                 (long long)st.tp_collectives);
    head(b, "inflight_tp_comm_seconds_total", "counter",
         "Tensor parallelism: seconds rank 0 spent in collectives, waiting included.");
    ifl_buf_addf(b, "inflight_tp_comm_seconds_total{model_name=\"%s\"} %.6f\n", model,
                 st.tp_comm_seconds);
    head(b, "inflight_process_resident_memory_bytes", "gauge", "The server's resident set.");
    ifl_buf_addf(b, "inflight_process_resident_memory_bytes %lld\n",
                 (long long)(ex ? st.process_rss_bytes : ifl_sysmem_rss()));
    head(b, "inflight_prefix_cache_hits_total", "counter",
         "Prompt KV blocks found in the prefix cache.");
    ifl_buf_addf(b, "inflight_prefix_cache_hits_total{model_name=\"%s\"} %lld\n", model,
                 (long long)st.kv_blocks_reused);
    head(b, "inflight_prefix_cache_queries_total", "counter",
         "Prompt KV blocks looked up in the prefix cache.");
    ifl_buf_addf(b, "inflight_prefix_cache_queries_total{model_name=\"%s\"} %lld\n", model,
                 (long long)(st.kv_blocks_reused + st.kv_blocks_missed));
    head(b, "inflight_spec_draft_tokens_total", "counter",
         "Speculative decoding: draft tokens run (proposed and checked by the model).");
    ifl_buf_addf(b, "inflight_spec_draft_tokens_total{model_name=\"%s\"} %lld\n", model,
                 (long long)st.draft_tokens);
    head(b, "inflight_spec_accepted_tokens_total", "counter",
         "Speculative decoding: draft tokens kept (equal to the model's own pick).");
    ifl_buf_addf(b, "inflight_spec_accepted_tokens_total{model_name=\"%s\"} %lld\n", model,
                 (long long)st.accepted_draft_tokens);
    head(b, "inflight_iterations_total", "counter", "Engine steps run.");
    ifl_buf_addf(b, "inflight_iterations_total{model_name=\"%s\"} %lld\n", model,
                 (long long)st.iteration);
    /* LoRA adapters: registered, in memory (the host cache may drop idle
     * ones), held by queued or running requests; their host bytes */
    int32_t la[3] = {0, 0, 0};
    int64_t lbytes = 0;
    struct ifl_lora_info *li = NULL;
    int32_t n = 0;
    if (ex && ifl_executor_list_lora(ex, NULL, 0, &n) == IFL_EFULL &&
        (li = calloc((size_t)n, sizeof(*li)))) {
        int32_t cap = n;
        ifl_executor_list_lora(ex, li, cap, &n);
        for (int32_t i = 0; i < n && i < cap; i++) {
            la[0]++;
            la[1] += li[i].loaded;
            la[2] += li[i].in_use > 0;
            lbytes += li[i].loaded ? li[i].bytes : 0;
        }
        free(li);
    }
    head(b, "inflight_lora_adapters", "gauge",
         "LoRA adapters: registered, in memory, in use by queued or running requests.");
    static const char *const lstate[3] = {"registered", "loaded", "in_use"};
    for (int i = 0; i < 3; i++)
        ifl_buf_addf(b, "inflight_lora_adapters{model_name=\"%s\",state=\"%s\"} %d\n", model,
                     lstate[i], la[i]);
    head(b, "inflight_lora_bytes", "gauge", "Host memory the LoRA adapters in memory take.");
    ifl_buf_addf(b, "inflight_lora_bytes{model_name=\"%s\"} %lld\n", model, (long long)lbytes);
    free(model);
}

int ifl_server_iteration_stats(struct ifl_server *s, struct ifl_iteration_stats *out)
{
    ifl_executor *ex = atomic_load_explicit(&s->ex, memory_order_acquire);
    return ex ? ifl_get_iteration_stats(ex, out) : IFL_ESTATE;
}
