/*
 * `inflight bench -m FILE`: offline throughput through the executor API, in
 * tests shaped like llama.cpp's two benchmark tools so that the figures can be
 * set side by side with theirs on the same file.
 *
 *   pp N  (--pp N)  llama-bench's pp test: one request of N prompt tokens (BOS,
 *                   then random ids) and max_tokens 1 into an empty KV cache,
 *                   timed from enqueue to its final response. tok/s = N / time.
 *   tg N  (--tg N)  llama-bench's tg test: one request whose prompt is the one
 *                   BOS token, generating N tokens greedily (end tokens
 *                   ignored). That is N forward passes of one row at positions
 *                   0..N-1, as llama-bench's N one-token decodes from an empty
 *                   cache. tok/s = N / (enqueue to final response).
 *   --depth D       llama-bench's -d: both tests run behind a context of D
 *                   tokens (BOS, then random ids), the same for every run,
 *                   prefilled once before the first run and taken from the
 *                   prefix cache after that, so pp N computes N prompt rows
 *                   attending to D + N positions and tg N decodes at
 *                   positions D.. D + N - 1. A run that did not find the
 *                   context in the cache is an error, not a figure.
 *   batched (-c C)  llama-batched-bench: waves of C requests enqueued together,
 *                   each with a prompt of P random tokens (distinct per
 *                   request, so nothing comes from the prefix cache) and
 *                   exactly G generated tokens, streamed. From the client's
 *                   timestamps:
 *     prompt tok/s  C*P / time until the last request of a wave had its first token
 *     decode tok/s  C / the time of a step while all C decode together (from
 *                   then until the first request's end; run_wave): the
 *                   aggregate decode rate of C sequences (llama-batched-bench's S_TG)
 *     total tok/s   C*G / wave time
 *     TTFT and ITL  time to first token and between tokens, p50 and p99
 *
 * pp and tg run once untimed, then -r times, and report the mean and sample
 * standard deviation of the per-run tok/s, as llama-bench does. Sampling
 * (greedy argmax) and the engine's queues are inside the timed span; they are
 * small next to a forward pass of a real model.
 *
 * --bandwidth measures memory read bandwidth instead: T threads each sum
 * their slice of a buffer far larger than the caches. Decode of one stream
 * cannot beat that bandwidth divided by the weight bytes read per token,
 * which the tg test reports.
 */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli/cli.h"
#include "core/rng.h"
#include "core/syscpu.h"
#include "core/timeutil.h"
#include "inflight.h"
#include "model/gguf.h"

#define MAX_CONC 64
#define MAX_TESTS 16

struct bench_opts {
    const char *model;
    int64_t n_prompt, n_gen, reps, threads, bw_mib;
    int conc[MAX_TESTS], n_conc;
    int pp[MAX_TESTS], n_pp;
    int tg[MAX_TESTS], n_tg;
    int batched, bandwidth, json, kv_type;
    int depth;                /* --depth: context tokens ahead of the pp and tg tests */
    int32_t *depth_ctx;       /* those tokens, the same for every run */
    int kv_block;             /* positions per KV block */
    const char *repack_cache; /* NULL: repack in memory */
    int64_t repack_cache_max; /* --repack-cache-max; 0: the default bound */
    struct ifl_speculative_config spec;
    struct cli_lora lora; /* --lora, --lora-scaled */
    struct cli_tp tp;     /* --tp, --tp-timeout */
    int lora_spread;      /* --lora-spread: request c of a wave takes adapter c mod n alone */
    struct ifl_lora_ref spread[CLI_MAX_LORA]; /* those adapters, once loaded */
    int n_spread;
};

/* What llama-bench prints about a model, from the GGUF's tensor table. */
struct model_size {
    uint64_t bytes; /* all tensors (llama-bench's model_size) */
    uint64_t params;
    uint64_t bytes_per_token; /* read by one decode step: all but the embedding
                                 table, of which one row (the whole table when
                                 the output matrix is tied to it), and of the
                                 expert tensors only the used experts' share */
};

/* The share of an expert tensor (a name with "_exps") one token reads:
 * expert_used_count of expert_count; 1 for a model without experts. */
static void expert_share(const struct ifl_gguf *g, uint64_t *used, uint64_t *count)
{
    *used = *count = 1;
    const char *arch;
    size_t alen;
    char key[128], err[256];
    if (ifl_gguf_get_str(g, "general.architecture", &arch, &alen, err) || alen > 64)
        return;
    int64_t n, k;
    snprintf(key, sizeof key, "%.*s.expert_count", (int)alen, arch);
    if (ifl_gguf_get_int(g, key, &n, err) || n <= 0)
        return;
    snprintf(key, sizeof key, "%.*s.expert_used_count", (int)alen, arch);
    if (ifl_gguf_get_int(g, key, &k, err) || k <= 0 || k > n)
        return;
    *used = (uint64_t)k;
    *count = (uint64_t)n;
}

static int read_model_size(const char *path, struct model_size *s, char *err)
{
    struct ifl_gguf *g;
    int rc = ifl_gguf_open(&g, path, err);
    if (rc)
        return rc;
    memset(s, 0, sizeof(*s));
    uint64_t used, count;
    expert_share(g, &used, &count);
    for (int64_t i = 0; i < ifl_gguf_n_tensors(g); i++) {
        const struct ifl_gguf_tensor *t = ifl_gguf_tensor(g, i);
        s->bytes += t->nbytes;
        s->params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
        /* A token reads K of the N experts of each layer (a batch may read
         * more; this is the one-stream figure the tg limit is counted on). */
        s->bytes_per_token += strstr(t->name, "_exps") ? t->nbytes / count * used : t->nbytes;
    }
    const struct ifl_gguf_tensor *e = ifl_gguf_find_tensor(g, "token_embd.weight");
    if (e && ifl_gguf_find_tensor(g, "output.weight") && e->ne[1] > 0)
        s->bytes_per_token -= e->nbytes - e->nbytes / (uint64_t)e->ne[1];
    ifl_gguf_free(g);
    return 0;
}

static uint64_t peak_rss_bytes(void)
{
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru))
        return 0;
    return (uint64_t)ru.ru_maxrss * 1024; /* Linux reports KiB */
}

static void json_str(const char *s)
{
    putchar('"');
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            printf("\\%c", c);
        else if (c < 0x20)
            printf("\\u%04x", c);
        else
            putchar(c);
    }
    putchar('"');
}

static const char *base_name(const char *path)
{
    const char *s = strrchr(path, '/');
    return s ? s + 1 : path;
}

static void mean_sd(const double *v, int n, double *mean, double *sd)
{
    double m = 0, ss = 0;
    for (int i = 0; i < n; i++)
        m += v[i];
    m /= n;
    for (int i = 0; i < n; i++)
        ss += (v[i] - m) * (v[i] - m);
    *mean = m;
    *sd = n > 1 ? sqrt(ss / (n - 1)) : 0;
}

/* ---- pp and tg: one request at a time ---- */

/* One request of n_prompt tokens generating n_gen tokens greedily, not
 * streamed. Its prompt is the depth context ctx[0..n_ctx) (BOS first when
 * the model has one), then random ids; with no context the first token is
 * BOS. *secs is the time from enqueue to its final response, and *reused
 * the prompt blocks it found in the prefix cache. */
static int run_one(ifl_executor *ex, const int32_t *ctx, int n_ctx, int n_prompt, int n_gen,
                   struct ifl_rng *g, const struct ifl_model_info *mi, double *secs, int *reused,
                   char *err)
{
    int n_all = n_ctx + n_prompt;
    int32_t *p = malloc(sizeof(int32_t) * (size_t)n_all);
    if (!p)
        return ifl_err(err, IFL_ENOMEM, "out of memory");
    if (n_ctx)
        memcpy(p, ctx, sizeof(int32_t) * (size_t)n_ctx);
    for (int i = n_ctx; i < n_all; i++)
        p[i] = (int32_t)(ifl_rng_next(g) % (uint64_t)mi->n_vocab);
    if (mi->bos_id >= 0 && !n_ctx)
        p[0] = mi->bos_id;
    struct ifl_request req;
    ifl_request_init(&req);
    req.input_ids = p;
    req.n_input = n_all;
    req.max_tokens = n_gen;
    req.sampling.temperature = 0;
    req.sampling.ignore_eos = 1;
    req.output.return_perf_metrics = 1;
    ifl_id id;
    *reused = 0;
    double t0 = ifl_now_s();
    int rc = ifl_enqueue(ex, &req, &id, err);
    int final = 0, n_tok = 0;
    while (!rc && !final) {
        struct ifl_response *r;
        int32_t n = 0;
        rc = ifl_await(ex, &id, 1, 600000, &r, 1, &n);
        if (rc) {
            ifl_err(err, rc, "await: %s", ifl_strerror(rc));
            break;
        }
        if (n == 0)
            continue;
        if (r->status)
            rc = ifl_err(err, r->status, "request failed: %s", r->error_msg ? r->error_msg : "?");
        n_tok += r->n_results ? r->results[0].n_tokens : 0;
        final = r->is_final;
        if (final)
            *reused = r->perf.kv_blocks_reused;
        ifl_response_free(r);
    }
    *secs = ifl_now_s() - t0;
    free(p);
    if (!rc && n_tok != n_gen)
        rc = ifl_err(err, IFL_EINVAL, "asked for %d tokens, got %d", n_gen, n_tok);
    return rc;
}

/* The blocks of the --depth context that a run must find in the prefix
 * cache: its whole ones. */
static int ctx_blocks(const struct bench_opts *o)
{
    return o->kv_block > 0 ? o->depth / o->kv_block : 0;
}

/* pp N (is_pp) or tg N: one untimed run, then reps timed ones. */
static int run_llama_test(ifl_executor *ex, const struct bench_opts *o, int is_pp, int n,
                          const struct ifl_model_info *mi, const struct model_size *ms, int threads,
                          struct ifl_rng *g, char *err)
{
    int n_prompt = is_pp ? n : 1, n_gen = is_pp ? 1 : n;
    double secs, *ts = malloc(sizeof(double) * (size_t)o->reps);
    double *ns = malloc(sizeof(double) * (size_t)o->reps);
    if (!ts || !ns) {
        free(ts);
        free(ns);
        return ifl_err(err, IFL_ENOMEM, "out of memory");
    }
    /* the untimed run: tg's generates two tokens (one decode step), or one
     * for tg 1, whose context holds only two positions. Behind a --depth
     * context it also puts the context in the prefix cache. */
    int reused, want = ctx_blocks(o);
    int rc = run_one(ex, o->depth_ctx, o->depth, n_prompt, is_pp || n < 2 ? 1 : 2, g, mi, &secs,
                     &reused, err);
    for (int r = 0; r < o->reps && !rc; r++) {
        rc = run_one(ex, o->depth_ctx, o->depth, n_prompt, n_gen, g, mi, &secs, &reused, err);
        if (!rc && reused < want)
            rc = ifl_err(err, IFL_EINVAL,
                         "the --depth context was not taken from the prefix cache (%d of its %d "
                         "blocks were): the figure would include its prefill",
                         reused, want);
        ts[r] = n / secs;
        ns[r] = secs * 1e9;
    }
    if (!rc) {
        double avg, sd, avg_ns, sd_ns;
        int reps = (int)o->reps;
        mean_sd(ts, reps, &avg, &sd);
        mean_sd(ns, reps, &avg_ns, &sd_ns);
        if (o->json) {
            printf("{\"model\":");
            json_str(o->model);
            printf(",\"model_size\":%llu,\"model_n_params\":%llu,\"n_threads\":%d,"
                   "\"test\":\"%s%d\",\"n_prompt\":%d,\"n_gen\":%d,\"n_depth\":%d,\"reps\":%d,"
                   "\"avg_ns\":%.0f,\"stddev_ns\":%.0f,\"avg_ts\":%.3f,\"stddev_ts\":%.3f,"
                   "\"samples_ts\":[",
                   (unsigned long long)ms->bytes, (unsigned long long)ms->params, threads,
                   is_pp ? "pp" : "tg", n, is_pp ? n : 0, is_pp ? 0 : n, o->depth, reps, avg_ns,
                   sd_ns, avg, sd);
            for (int r = 0; r < reps; r++)
                printf("%s%.3f", r ? "," : "", ts[r]);
            /* the KV cache bytes one generated token's step reads, on
             * average over the test: its first token attends D + 1
             * positions and its last D + N, every layer's keys and values */
            struct ifl_iteration_stats st;
            double kv = 0;
            if (!ifl_get_iteration_stats(ex, &st) && o->kv_block > 0)
                kv = (o->depth + (n + 1) / 2.0) * (double)st.kv_block_bytes / o->kv_block;
            printf(
                "],\"bytes_per_token\":%llu,\"kv_bytes_per_token\":%.0f,\"max_rss_bytes\":%llu}\n",
                (unsigned long long)ms->bytes_per_token, is_pp ? 0.0 : kv,
                (unsigned long long)peak_rss_bytes());
        } else {
            char depth[32] = "";
            if (o->depth)
                snprintf(depth, sizeof(depth), " @ d%d", o->depth);
            printf("| %s | %.2f MiB | %.2f M | %d | %s%d%s | %.2f ± %.2f |\n", base_name(o->model),
                   ms->bytes / 1048576.0, ms->params / 1e6, threads, is_pp ? "pp" : "tg", n, depth,
                   avg, sd);
        }
        fflush(stdout);
    }
    free(ts);
    free(ns);
    return rc;
}

/* ---- batched: waves of C concurrent requests ---- */

struct wave_result {
    double t_prompt, t_total;
    /* the decode window (run_wave): token steps and their time, summed
     * over the requests */
    int64_t dec_steps;
    double dec_time;
    double *ttft; /* [C] seconds */
    double *itl;  /* [C * (G-1)] seconds */
    int64_t n_itl;
    const struct ifl_lora_ref *spread; /* request c names spread[c % n_spread] (n_spread > 0) */
    int n_spread;
};

static int run_wave(ifl_executor *ex, int conc, int n_prompt, int n_gen, struct ifl_rng *g,
                    int32_t n_vocab, int32_t bos, struct wave_result *w, char *err)
{
    struct ifl_request reqs[MAX_CONC];
    ifl_id ids[MAX_CONC];
    int32_t *prompts = malloc(sizeof(int32_t) * (size_t)conc * (size_t)n_prompt);
    double last_tok[MAX_CONC], final[MAX_CONC];
    int got_tokens[MAX_CONC], done = 0;
    /* the time the engine took every token. The decode rate is taken over the
     * window in which all of them decode together, from the last first
     * token to the first last one: before it, with the prompts taking
     * several steps, the first requests decode beside the later ones'
     * prefill; after it, fewer than conc are left. A request's tokens
     * inside it are one a step, so their count less one over the time
     * from the first to the last is its rate; tokens of a step at either
     * edge may fall either side, which changes the span but not that. */
    double *arrive = malloc(sizeof(double) * (size_t)conc * (size_t)n_gen);
    if (!prompts || !arrive) {
        free(prompts);
        free(arrive);
        return ifl_err(err, IFL_ENOMEM, "out of memory");
    }
    for (int c = 0; c < conc; c++) {
        int32_t *p = prompts + (size_t)c * n_prompt;
        for (int i = 0; i < n_prompt; i++)
            p[i] = (int32_t)(ifl_rng_next(g) % (uint64_t)n_vocab);
        if (bos >= 0)
            p[0] = bos;
        ifl_request_init(&reqs[c]);
        reqs[c].input_ids = p;
        reqs[c].n_input = n_prompt;
        reqs[c].max_tokens = n_gen;
        reqs[c].streaming = 1;
        reqs[c].output.return_perf_metrics = 1; /* the engine's time of each token */
        reqs[c].sampling.temperature = 0;
        reqs[c].sampling.ignore_eos = 1;
        if (w->n_spread) {
            reqs[c].lora = &w->spread[c % w->n_spread];
            reqs[c].n_lora = 1;
        }
        got_tokens[c] = 0;
        final[c] = 0;
    }
    double t0 = ifl_now_s();
    int rc = ifl_enqueue_many(ex, reqs, conc, ids, err);
    w->n_itl = 0;
    while (!rc && done < conc) {
        struct ifl_response *r[MAX_CONC];
        int32_t n = 0;
        rc = ifl_await(ex, ids, conc, 600000, r, MAX_CONC, &n);
        if (rc) {
            ifl_err(err, rc, "await: %s", ifl_strerror(rc));
            break;
        }
        double now = ifl_now_s();
        for (int32_t k = 0; k < n; k++) {
            int c = 0;
            while (c < conc && ids[c] != r[k]->request_id)
                c++;
            int nt = r[k]->n_results ? r[k]->results[0].n_tokens : 0;
            if (r[k]->status)
                rc = ifl_err(err, r[k]->status, "request failed: %s",
                             r[k]->error_msg ? r[k]->error_msg : "?");
            /* the decode window is timed by when the engine took each
             * token (same clock), not by when this thread saw it: on a
             * loaded machine a waiting client wakes late and sees several
             * steps at once, which would squeeze the window to nothing */
            double took = r[k]->perf.last_token_us ? (double)r[k]->perf.last_token_us * 1e-6 : now;
            for (int t = 0; t < nt && c < conc; t++) {
                if (got_tokens[c] == 0) {
                    w->ttft[c] = now - t0;
                } else {
                    w->itl[w->n_itl++] = (now - last_tok[c]) / nt;
                }
                last_tok[c] = now;
                if (got_tokens[c] < n_gen)
                    arrive[(size_t)c * n_gen + got_tokens[c]] = took;
                got_tokens[c]++;
            }
            if (r[k]->is_final && c < conc)
                final[c] = took;
            done += r[k]->is_final;
            ifl_response_free(r[k]);
        }
    }
    double t_end = ifl_now_s();
    double t_last_first = t0; /* when the last request had its first token */
    for (int c = 0; c < conc; c++)
        if (got_tokens[c] && arrive[(size_t)c * n_gen] > t_last_first)
            t_last_first = arrive[(size_t)c * n_gen];
    double t_first_final = t_end; /* when the first request had its last token */
    for (int c = 0; c < conc; c++)
        if (final[c] > 0 && final[c] < t_first_final)
            t_first_final = final[c];
    w->t_prompt = t_last_first - t0;
    w->t_total = t_end - t0;
    w->dec_steps = 0;
    w->dec_time = 0;
    for (int c = 0; c < conc; c++) {
        int lo = -1, hi = -1;
        for (int t = 0; t < got_tokens[c] && t < n_gen; t++) {
            double a = arrive[(size_t)c * n_gen + t];
            if (a >= t_last_first && a <= t_first_final) {
                lo = lo < 0 ? t : lo;
                hi = t;
            }
        }
        if (hi > lo) {
            w->dec_steps += hi - lo;
            w->dec_time += arrive[(size_t)c * n_gen + hi] - arrive[(size_t)c * n_gen + lo];
        }
    }
    free(prompts);
    free(arrive);
    return rc;
}

static int run_batched(ifl_executor *ex, const struct bench_opts *o,
                       const struct ifl_model_info *mi, int threads, struct ifl_rng *g, char *err)
{
    int64_t reps = o->reps, n_prompt = o->n_prompt, n_gen = o->n_gen;
    struct wave_result w = {.spread = o->spread, .n_spread = o->n_spread};
    double *ttft_all = malloc(sizeof(double) * MAX_CONC * (size_t)reps);
    double *itl_all = malloc(sizeof(double) * MAX_CONC * (size_t)n_gen * (size_t)reps);
    int rc = ttft_all && itl_all ? 0 : ifl_err(err, IFL_ENOMEM, "out of memory");
    if (!rc && !o->json)
        printf(
            "model %s (%s), prompt %lld, gen %lld, %lld waves each\n"
            "| concurrency | prompt tok/s | decode tok/s | total tok/s | TTFT p50 ms | TTFT p99 ms "
            "| ITL p50 ms | ITL p99 ms |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n",
            o->model, mi->architecture, (long long)n_prompt, (long long)n_gen, (long long)reps);
    /* One untimed wave, as wide as the widest level, warms caches and the
     * thread pool and writes the KV blocks the timed waves will take
     * (blocks are handed out lowest id first, so every later wave finds
     * its blocks among these). llama-batched-bench's cache is written
     * whole when its context is made; ours is memory only once a block is
     * written, and a first write costs: on the Firecracker guest of
     * bench/README.md about 12 us a 4 KiB page (the guest's fault and the
     * host's), which put a fifth of a fresh 16-sequence small-110m wave's
     * decode and a third of its prompt into page faults. A server under
     * load reuses blocks already written; this times that. */
    int widest = 1;
    for (int ci = 0; ci < o->n_conc; ci++)
        widest = o->conc[ci] > widest ? o->conc[ci] : widest;
    w.ttft = ttft_all;
    w.itl = itl_all;
    if (!rc)
        rc = run_wave(ex, widest, (int)n_prompt, (int)n_gen, g, mi->n_vocab, mi->bos_id, &w, err);
    for (int ci = 0; ci < o->n_conc && !rc; ci++) {
        int c = o->conc[ci];
        double tp = 0, td = 0, tt = 0;
        int64_t n_ttft = 0, n_itl = 0, n_dec = 0;
        for (int rep = 0; rep < reps && !rc; rep++) {
            w.ttft = ttft_all + n_ttft;
            w.itl = itl_all + n_itl;
            rc = run_wave(ex, c, (int)n_prompt, (int)n_gen, g, mi->n_vocab, mi->bos_id, &w, err);
            tp += w.t_prompt;
            td += w.dec_time;
            n_dec += w.dec_steps;
            tt += w.t_total;
            n_ttft += c;
            n_itl += w.n_itl;
        }
        if (rc)
            break;
        double s_pp = (double)c * n_prompt * reps / tp;
        double s_tg = td > 0 ? (double)c * (double)n_dec / td : 0;
        if (n_dec == 0 && c > 1)
            fprintf(stderr,
                    "inflight bench: the %d requests never decoded together (the first finished "
                    "before the last one's prompt was in): decode tok/s is 0; raise -n\n",
                    c);
        double s_all = (double)c * n_gen * reps / tt;
        double t50 = cli_percentile(ttft_all, n_ttft, 0.5) * 1e3;
        double t99 = cli_percentile(ttft_all, n_ttft, 0.99) * 1e3;
        double i50 = cli_percentile(itl_all, n_itl, 0.5) * 1e3;
        double i99 = cli_percentile(itl_all, n_itl, 0.99) * 1e3;
        if (o->json) {
            printf("{\"model\":");
            json_str(o->model);
            printf(",\"test\":\"batched\",\"n_threads\":%d,\"concurrency\":%d,\"n_prompt\":%lld,"
                   "\"n_gen\":%lld,\"reps\":%lld,\"prompt_tps\":%.2f,\"decode_tps\":%.2f,"
                   "\"total_tps\":%.2f,\"ttft_p50_ms\":%.3f,\"ttft_p99_ms\":%.3f,"
                   "\"itl_p50_ms\":%.3f,\"itl_p99_ms\":%.3f,\"max_rss_bytes\":%llu}\n",
                   threads, c, (long long)n_prompt, (long long)n_gen, (long long)reps, s_pp, s_tg,
                   s_all, t50, t99, i50, i99, (unsigned long long)peak_rss_bytes());
        } else {
            printf("| %d | %.1f | %.1f | %.1f | %.2f | %.2f | %.3f | %.3f |\n", c, s_pp, s_tg,
                   s_all, t50, t99, i50, i99);
        }
        fflush(stdout);
    }
    free(ttft_all);
    free(itl_all);
    return rc;
}

/* ---- memory read bandwidth ---- */

struct bw_slice {
    const uint64_t *p;
    size_t n;
    int passes;
    uint64_t sum;
};

static void *bw_read(void *arg)
{
    struct bw_slice *s = arg;
    /* eight independent sums keep several loads in flight per cycle */
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
    for (int k = 0; k < s->passes; k++)
        for (size_t i = 0; i + 8 <= s->n; i += 8) {
            a0 += s->p[i];
            a1 += s->p[i + 1];
            a2 += s->p[i + 2];
            a3 += s->p[i + 3];
            a4 += s->p[i + 4];
            a5 += s->p[i + 5];
            a6 += s->p[i + 6];
            a7 += s->p[i + 7];
        }
    s->sum = a0 ^ a1 ^ a2 ^ a3 ^ a4 ^ a5 ^ a6 ^ a7;
    return NULL;
}

static int run_bandwidth(const struct bench_opts *o, int threads, char *err)
{
    enum { PASSES = 4 };
    size_t bytes = (size_t)o->bw_mib << 20, n = bytes / sizeof(uint64_t);
    uint64_t *buf = malloc(bytes);
    double *gbps = malloc(sizeof(double) * (size_t)o->reps);
    struct bw_slice sl[256];
    pthread_t tid[256];
    int rc = buf && gbps
                 ? 0
                 : ifl_err(err, IFL_ENOMEM, "out of memory for %lld MiB", (long long)o->bw_mib);
    if (!rc)
        for (size_t i = 0; i < n; i++)
            buf[i] = i; /* every page touched before the clock starts */
    uint64_t sink = 0;
    double best = 0;
    for (int r = 0; r < o->reps && !rc; r++) {
        size_t per = n / (size_t)threads / 8 * 8;
        int started = 0;
        double t0 = ifl_now_s();
        for (int t = 0; t < threads; t++) {
            sl[t] = (struct bw_slice){.p = buf + per * (size_t)t, .n = per, .passes = PASSES};
            if (pthread_create(&tid[t], NULL, bw_read, &sl[t])) {
                rc = ifl_err(err, IFL_ENOMEM, "cannot start thread %d", t);
                break;
            }
            started++;
        }
        for (int t = 0; t < started; t++) {
            pthread_join(tid[t], NULL);
            sink ^= sl[t].sum;
        }
        double secs = ifl_now_s() - t0;
        gbps[r] = (double)per * sizeof(uint64_t) * threads * PASSES / secs / 1e9;
        if (gbps[r] > best)
            best = gbps[r];
    }
    if (!rc) {
        if (o->json) {
            printf("{\"test\":\"bandwidth\",\"n_threads\":%d,\"buffer_bytes\":%zu,\"reps\":%lld,"
                   "\"gbps\":%.3f,\"samples_gbps\":[",
                   threads, bytes, (long long)o->reps, best);
            for (int r = 0; r < o->reps; r++)
                printf("%s%.3f", r ? "," : "", gbps[r]);
            printf("],\"checksum\":%llu}\n", (unsigned long long)(sink & 0xffff));
        } else {
            printf("memory read bandwidth: %.2f GB/s (%d threads, %lld MiB buffer, best of %lld)\n",
                   best, threads, (long long)o->bw_mib, (long long)o->reps);
        }
    }
    free(buf);
    free(gbps);
    return rc;
}

/* ---- arguments ---- */

static const char BENCH_HELP[] =
    "usage: inflight bench -m FILE [--pp LIST] [--tg LIST] [--batched] [options]\n"
    "       inflight bench --bandwidth [-t N] [--bw-mib N] [-r N] [--json]\n"
    "       inflight bench --url URL ...   (an HTTP load generator; --url x --help)\n"
    "llama-bench's tests (one sequence, mean ± stddev of -r runs):\n"
    "  --pp LIST               prompt processing of N tokens, e.g. 128 or 128,512\n"
    "  --tg LIST               generation of N tokens from a 1-token context, e.g. 64\n"
    "  --depth D               run --pp and --tg behind a context of D tokens (llama-bench -d),\n"
    "                          prefilled once and then taken from the prefix cache\n"
    "llama-batched-bench's test (the default when neither --pp nor --tg is given):\n"
    "  --batched               run it alongside --pp/--tg (implied by -c, -p, -n)\n"
    "  -c, --concurrency LIST  sequences in parallel, e.g. 1,4,8,16 (default 1)\n"
    "  -p, --n-prompt N        prompt tokens per sequence (default 128)\n"
    "  -n, --n-gen N           generated tokens per sequence (default 64)\n"
    "common:\n"
    "  -r, --repetitions N     timed runs of each test, waves of each level (default 3)\n"
    "  -t, --threads N         threads (default: the CPUs this process may use)\n"
    "  --kv-type f16|f32|q8_0  KV cache precision (default f16)\n"
    "  --repack-cache DIR      map the repacked weights from a cache file there (as serve)\n"
    "  --repack-cache-max SIZE the cache files there may take SIZE in all (as serve)\n"
    "  --json                  one JSON object per test instead of tables\n"
    "  --bandwidth             measure memory read bandwidth (no model)\n"
    "  --bw-mib N              its buffer in MiB (default 512)\n"
    "speculative decoding (the generation tests; acceptance is printed at the "
    "end):\n" CLI_SPEC_HELP CLI_LORA_HELP CLI_TP_HELP
    "  --lora-spread             request c of a wave takes adapter c mod n alone (scale 1 for\n"
    "                            --lora-modules adapters)\n";

static int parse_args(int argc, char **argv, struct bench_opts *o)
{
    int pp_or_tg = 0, batch_flag = 0;
    memset(o, 0, sizeof(*o));
    o->n_prompt = 128;
    o->n_gen = 64;
    o->reps = 3;
    o->bw_mib = 512;
    o->conc[0] = 1;
    o->n_conc = 1;
    o->kv_type = IFL_KV_F16;
    struct ifl_executor_config dc;
    ifl_executor_config_default(&dc);
    o->spec = dc.speculative;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(BENCH_HELP, stdout);
            return -1;
        }
        if (!strcmp(a, "--json")) {
            o->json = 1;
            continue;
        }
        if (!strcmp(a, "--batched")) {
            batch_flag = 1;
            continue;
        }
        if (!strcmp(a, "--bandwidth")) {
            o->bandwidth = 1;
            continue;
        }
        if (!strcmp(a, "--lora-spread")) {
            o->lora_spread = 1;
            continue;
        }
        if (i + 1 >= argc)
            return cli_usage_error("bench", "option '%s' needs a value (or is unknown)", a);
        const char *v = argv[++i];
        int sp = cli_spec_option("bench", a, v, &o->spec);
        if (sp < 0)
            sp = cli_lora_option("bench", a, v, &o->lora);
        if (sp < 0)
            sp = cli_tp_option("bench", a, v, &o->tp);
        if (sp >= 0) {
            if (sp)
                return sp;
        } else if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            o->model = v;
        } else if (!strcmp(a, "--pp")) {
            if ((o->n_pp = cli_parse_int_list(v, 1, 1 << 16, o->pp, MAX_TESTS)) < 0)
                return cli_usage_error("bench",
                                       "--pp wants prompt lengths of 1..65536, like "
                                       "128 or 128,512, not '%s'",
                                       v);
            pp_or_tg = 1;
        } else if (!strcmp(a, "--tg")) {
            if ((o->n_tg = cli_parse_int_list(v, 1, 1 << 16, o->tg, MAX_TESTS)) < 0)
                return cli_usage_error("bench",
                                       "--tg wants generation lengths of 1..65536, "
                                       "like 64 or 32,128, not '%s'",
                                       v);
            pp_or_tg = 1;
        } else if (!strcmp(a, "--depth")) {
            int64_t d;
            if (cli_parse_i64(v, 0, 1 << 20, &d))
                return cli_usage_error("bench", "--depth wants 0..1048576 tokens, not '%s'", v);
            o->depth = (int)d;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--n-prompt")) {
            if (cli_parse_i64(v, 1, 1 << 16, &o->n_prompt))
                return cli_usage_error("bench", "-p wants 1..65536 tokens, not '%s'", v);
            batch_flag = 1;
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-gen")) {
            if (cli_parse_i64(v, 2, 1 << 16, &o->n_gen))
                return cli_usage_error("bench", "-n wants 2..65536 tokens, not '%s'", v);
            batch_flag = 1;
        } else if (!strcmp(a, "-r") || !strcmp(a, "--repetitions")) {
            if (cli_parse_i64(v, 1, 1000, &o->reps))
                return cli_usage_error("bench", "-r wants 1..1000, not '%s'", v);
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (cli_parse_i64(v, 1, 256, &o->threads))
                return cli_usage_error("bench", "-t wants 1..256 threads, not '%s'", v);
        } else if (!strcmp(a, "--bw-mib")) {
            if (cli_parse_i64(v, 1, 1 << 16, &o->bw_mib))
                return cli_usage_error("bench", "--bw-mib wants 1..65536 MiB, not '%s'", v);
        } else if (!strcmp(a, "--repack-cache")) {
            int rc = cli_check_cache_dir("bench", v);
            if (rc)
                return rc;
            o->repack_cache = v;
        } else if (!strcmp(a, "--repack-cache-max")) {
            if (cli_parse_cache_max(v, &o->repack_cache_max))
                return cli_usage_error(
                    "bench", "--repack-cache-max wants a size (20G, 512M) or off, not '%s'", v);
        } else if (!strcmp(a, "--kv-type")) {
            if ((o->kv_type = cli_parse_kv_type(v)) < 0)
                return cli_usage_error("bench", "--kv-type wants f16, f32 or q8_0, not '%s'", v);
        } else if (!strcmp(a, "-c") || !strcmp(a, "--concurrency")) {
            if ((o->n_conc = cli_parse_int_list(v, 1, MAX_CONC, o->conc, MAX_TESTS)) < 0)
                return cli_usage_error("bench",
                                       "-c wants up to 16 counts of 1..%d, like 1,4,16, not '%s'",
                                       MAX_CONC, v);
            batch_flag = 1;
        } else {
            return cli_usage_error("bench", "unknown option '%s' (see --help)", a);
        }
    }
    if (o->bandwidth) {
        if (o->model || pp_or_tg || batch_flag)
            return cli_usage_error("bench", "--bandwidth takes only -t, -r, --bw-mib and --json");
        return 0;
    }
    if (!o->model)
        return cli_usage_error("bench", "a model is required (-m FILE)");
    o->batched = batch_flag || !pp_or_tg;
    if (o->depth && !pp_or_tg)
        return cli_usage_error("bench", "--depth applies to --pp and --tg; give one of them");
    return cli_spec_finish("bench", &o->spec);
}

static int bench_leader(struct bench_opts *op, int threads);

int cmd_bench(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--url"))
            return cmd_loadgen(argc, argv);
    struct bench_opts o;
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc < 0 ? 0 : rc;
    int threads = (int)o.threads;
    if (threads == 0)
        threads = ifl_syscpu_count(256); /* what the executor's pool picks for 0 */
    char err[512] = "";
    if (o.bandwidth) {
        if (run_bandwidth(&o, threads, err)) {
            fprintf(stderr, "inflight bench: %s\n", err);
            return 1;
        }
        return 0;
    }

    /* a worker rank of --tp runs its loop here and returns */
    if ((rc = cli_tp_start("bench", &o.tp, o.model, (int)o.threads)) >= 0)
        return rc;
    return cli_tp_end(&o.tp, bench_leader(&o, threads));
}

static int bench_leader(struct bench_opts *op, int threads)
{
    struct bench_opts o = *op;
    char err[512] = "";
    int rc = 0;
    struct model_size ms;
    if (read_model_size(o.model, &ms, err)) {
        fprintf(stderr, "inflight bench: %s\n", err);
        return CLI_EXIT_USAGE;
    }
    int max_conc = 1;
    int64_t n_ctx = 1;
    if (o.batched) {
        for (int i = 0; i < o.n_conc; i++)
            if (o.conc[i] > max_conc)
                max_conc = o.conc[i];
        n_ctx = o.n_prompt + o.n_gen;
    }
    for (int i = 0; i < o.n_pp; i++)
        if (o.depth + o.pp[i] + 1 > n_ctx)
            n_ctx = o.depth + o.pp[i] + 1;
    for (int i = 0; i < o.n_tg; i++)
        if (o.depth + o.tg[i] + 1 > n_ctx)
            n_ctx = o.depth + o.tg[i] + 1;
    int64_t kv_tokens = o.batched ? (int64_t)max_conc * (o.n_prompt + o.n_gen + 32) : 0;
    if (kv_tokens < n_ctx + 32)
        kv_tokens = n_ctx + 32;
    /* behind a --depth context the blocks of the last run's own tokens
     * stay cached too: room for both, so that the context is not evicted */
    if (o.depth && kv_tokens < 2 * n_ctx + 64)
        kv_tokens = 2 * n_ctx + 64;

    struct ifl_executor_config cfg;
    ifl_executor_config_default(&cfg);
    cfg.n_threads = (int32_t)o.threads;
    cfg.tp_comm = o.tp.comm;
    cfg.tp_emulate = o.tp.emulate;
    cfg.tp_timeout_s = o.tp.timeout_s;
    cfg.max_batch_size = max_conc;
    cfg.n_ctx = (int32_t)n_ctx;
    cfg.kv_cache_tokens = kv_tokens;
    cfg.kv_type = o.kv_type;
    /* off, so that nothing is reused between runs; on for --depth, whose
     * context is prefilled once and reused by every run */
    cfg.enable_prefix_caching = o.depth > 0;
    o.kv_block = cfg.kv_block_size;
    cfg.speculative = o.spec;
    cfg.lora_cache_bytes = o.lora.cache_bytes;
    cfg.lora_type = o.lora.type;
    /* no default cache here: a benchmark of many files should not fill the disk */
    cfg.repack_cache_dir = o.repack_cache && strcmp(o.repack_cache, "off") ? o.repack_cache : NULL;
    cfg.repack_cache_max_bytes = o.repack_cache_max;
    struct cli_progress progress;
    cli_progress_init(&progress, "bench", 1.0);
    cfg.load_progress = cli_progress_fn;
    cfg.load_progress_user = &progress;
    ifl_executor *ex;
    if (ifl_executor_create(&ex, o.model, &cfg, err)) {
        fprintf(stderr, "inflight bench: %s\n", err);
        return CLI_EXIT_USAGE;
    }
    if ((rc = cli_lora_load("bench", ex, &o.lora))) {
        ifl_executor_destroy(ex, 1);
        return rc;
    }
    struct ifl_model_info mi;
    ifl_executor_model_info(ex, &mi);
    struct ifl_rng g;
    ifl_rng_seed(&g, 1);
    if (o.depth) {
        if (!(o.depth_ctx = malloc(sizeof(int32_t) * (size_t)o.depth))) {
            fprintf(stderr, "inflight bench: out of memory\n");
            ifl_executor_destroy(ex, 1);
            return 1;
        }
        struct ifl_rng gc;
        ifl_rng_seed(&gc, 2);
        for (int i = 0; i < o.depth; i++)
            o.depth_ctx[i] = (int32_t)(ifl_rng_next(&gc) % (uint64_t)mi.n_vocab);
        if (mi.bos_id >= 0)
            o.depth_ctx[0] = mi.bos_id;
    }
    /* --lora-spread: each request names one adapter, at its scale (1 for
     * an adapter of --lora-modules, whose scale 0 would apply nothing);
     * else every request takes the adapters' global scales */
    for (int i = 0; o.lora_spread && i < o.lora.n; i++)
        o.spread[o.n_spread++] =
            (struct ifl_lora_ref){o.lora.id[i], o.lora.scale[i] != 0.0f ? o.lora.scale[i] : 1.0f};

    /* --tp: what the collectives took of the run (rank 0's view) */
    struct ifl_iteration_stats st0;
    ifl_get_iteration_stats(ex, &st0);
    const double t0 = ifl_now_s();
    if ((o.n_pp || o.n_tg) && !o.json)
        printf("| model | size | params | threads | test | t/s |\n"
               "| --- | ---: | ---: | ---: | ---: | ---: |\n");
    for (int i = 0; i < o.n_pp && !rc; i++)
        rc = run_llama_test(ex, &o, 1, o.pp[i], &mi, &ms, threads, &g, err);
    for (int i = 0; i < o.n_tg && !rc; i++)
        rc = run_llama_test(ex, &o, 0, o.tg[i], &mi, &ms, threads, &g, err);
    if (!rc && (o.n_pp || o.n_tg) && !o.json)
        printf("\nweights read per generated token: %.2f MiB; peak RSS %.1f MiB\n%s",
               ms.bytes_per_token / 1048576.0, peak_rss_bytes() / 1048576.0, o.batched ? "\n" : "");
    if (!rc && o.batched)
        rc = run_batched(ex, &o, &mi, threads, &g, err);
    if (rc)
        fprintf(stderr, "inflight bench: %s\n", err);
    struct ifl_iteration_stats st;
    if (!rc && !ifl_get_iteration_stats(ex, &st) && st.tp_ranks > 1) {
        double el = ifl_now_s() - t0, cs = st.tp_comm_seconds - st0.tp_comm_seconds;
        int64_t steps = st.iteration - st0.iteration;
        fprintf(stderr,
                "tensor parallelism: %d ranks; %lld steps in %.3f s, %lld collectives taking "
                "%.3f s of it (%.1f %%): %.3f ms a step, %.3f ms of it in collectives; peak "
                "RSS of rank 0 %.1f MiB\n",
                st.tp_ranks, (long long)steps, el,
                (long long)(st.tp_collectives - st0.tp_collectives), cs,
                el > 0 ? 100.0 * cs / el : 0.0, steps ? 1e3 * el / (double)steps : 0.0,
                steps ? 1e3 * cs / (double)steps : 0.0, peak_rss_bytes() / 1048576.0);
    }
    if (!rc && !ifl_get_iteration_stats(ex, &st) && st.draft_tokens)
        fprintf(stderr, "speculation: %lld of %lld drafts kept (%.0f %%)\n",
                (long long)st.accepted_draft_tokens, (long long)st.draft_tokens,
                100.0 * (double)st.accepted_draft_tokens / (double)st.draft_tokens);
    ifl_executor_destroy(ex, 1);
    free(o.depth_ctx);
    return rc ? 1 : 0;
}
