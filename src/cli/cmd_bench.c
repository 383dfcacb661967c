/*
 * `inflight bench -m FILE`: offline throughput and latency through the
 * executor API, the way a server would drive it.
 *
 * For each concurrency C it runs waves of C requests enqueued together,
 * each with a prompt of P random tokens (distinct per request, so nothing is
 * served from the prefix cache) and exactly G generated tokens (end tokens
 * ignored), streamed. From the client's timestamps it reports:
 *   prompt tok/s   C*P / time until the last request of a wave had its first token
 *   decode tok/s   C*(G-1) / time from then until the wave finished: the
 *                  aggregate decode rate of C sequences (llama-batched-bench's S_TG)
 *   total tok/s    C*G / wave time
 *   TTFT and ITL   time to first token and between tokens, p50 and p99
 * With C = 1 the first two are llama-bench's pp and tg figures.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/rng.h"
#include "core/timeutil.h"
#include "inflight.h"

#define MAX_CONC 64

struct wave_result {
    double t_prompt, t_decode, t_total;
    double *ttft;   /* [C] seconds */
    double *itl;    /* [C * (G-1)] seconds */
    int64_t n_itl;
};

static int run_wave(ifl_executor *ex, int conc, int n_prompt, int n_gen, struct ifl_rng *g,
                    int32_t n_vocab, int32_t bos, struct wave_result *w, char *err)
{
    struct ifl_request reqs[MAX_CONC];
    ifl_id ids[MAX_CONC];
    int32_t *prompts = malloc(sizeof(int32_t) * (size_t)conc * (size_t)n_prompt);
    double last_tok[MAX_CONC], first[MAX_CONC];
    int got_tokens[MAX_CONC], done = 0;
    if (!prompts)
        return ifl_err(err, IFL_ENOMEM, "out of memory");
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
        reqs[c].sampling.temperature = 0;
        reqs[c].sampling.ignore_eos = 1;
        got_tokens[c] = 0;
        first[c] = 0;
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
            for (int t = 0; t < nt && c < conc; t++) {
                if (got_tokens[c] == 0) {
                    first[c] = now;
                    w->ttft[c] = now - t0;
                } else {
                    w->itl[w->n_itl++] = (now - last_tok[c]) / nt;
                }
                last_tok[c] = now;
                got_tokens[c]++;
            }
            done += r[k]->is_final;
            ifl_response_free(r[k]);
        }
    }
    double t_end = ifl_now_s();
    double t_first_all = 0;
    for (int c = 0; c < conc; c++)
        if (first[c] - t0 > t_first_all)
            t_first_all = first[c] - t0;
    w->t_prompt = t_first_all;
    w->t_total = t_end - t0;
    w->t_decode = w->t_total - t_first_all;
    free(prompts);
    return rc;
}

static const char BENCH_HELP[] =
    "usage: inflight bench -m FILE [options]\n"
    "  -p, --n-prompt N        prompt tokens per request (default 128)\n"
    "  -n, --n-gen N           generated tokens per request (default 64)\n"
    "  -c, --concurrency LIST  requests in flight, e.g. 1,4,8,16 (default 1)\n"
    "  -r, --repetitions N     waves per concurrency (default 3)\n"
    "  -t, --threads N         forward-pass threads (default: one per core)\n"
    "  --kv-type f16|f32|q8_0  KV cache precision (default f16)\n"
    "  --json                  one JSON object per concurrency instead of the table\n"
    "With --url URL instead of -m, it loads an OpenAI-compatible server over HTTP\n"
    "(see 'inflight bench --url x --help').\n";

int cmd_bench(int argc, char **argv)
{
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--url"))
            return cmd_loadgen(argc, argv);
    const char *model = NULL;
    int64_t n_prompt = 128, n_gen = 64, reps = 3, threads = 0;
    int conc[16] = {1}, n_conc = 1, json = 0, kv_type = IFL_KV_F16;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(BENCH_HELP, stdout);
            return 0;
        }
        if (!strcmp(a, "--json")) {
            json = 1;
            continue;
        }
        if (i + 1 >= argc)
            return cli_usage_error("bench", "option '%s' needs a value (or is unknown)", a);
        const char *v = argv[++i];
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            model = v;
        } else if (!strcmp(a, "-p") || !strcmp(a, "--n-prompt")) {
            if (cli_parse_i64(v, 1, 1 << 16, &n_prompt))
                return cli_usage_error("bench", "-p wants 1..65536 tokens, not '%s'", v);
        } else if (!strcmp(a, "-n") || !strcmp(a, "--n-gen")) {
            if (cli_parse_i64(v, 2, 1 << 16, &n_gen))
                return cli_usage_error("bench", "-n wants 2..65536 tokens, not '%s'", v);
        } else if (!strcmp(a, "-r") || !strcmp(a, "--repetitions")) {
            if (cli_parse_i64(v, 1, 1000, &reps))
                return cli_usage_error("bench", "-r wants 1..1000, not '%s'", v);
        } else if (!strcmp(a, "-t") || !strcmp(a, "--threads")) {
            if (cli_parse_i64(v, 1, 256, &threads))
                return cli_usage_error("bench", "-t wants 1..256 threads, not '%s'", v);
        } else if (!strcmp(a, "--kv-type")) {
            if ((kv_type = cli_parse_kv_type(v)) < 0)
                return cli_usage_error("bench", "--kv-type wants f16, f32 or q8_0, not '%s'", v);
        } else if (!strcmp(a, "-c") || !strcmp(a, "--concurrency")) {
            if ((n_conc = cli_parse_int_list(v, 1, MAX_CONC, conc, 16)) < 0)
                return cli_usage_error("bench",
                                       "-c wants up to 16 counts of 1..%d, like 1,4,16, not '%s'",
                                       MAX_CONC, v);
        } else {
            return cli_usage_error("bench", "unknown option '%s' (see --help)", a);
        }
    }
    if (!model)
        return cli_usage_error("bench", "a model is required (-m FILE)");
    int max_conc = 1;
    for (int i = 0; i < n_conc; i++)
        if (conc[i] > max_conc)
            max_conc = conc[i];
    struct ifl_executor_config cfg;
    ifl_executor_config_default(&cfg);
    cfg.n_threads = (int32_t)threads;
    cfg.max_batch_size = max_conc;
    cfg.n_ctx = (int32_t)(n_prompt + n_gen);
    cfg.kv_cache_tokens = (int64_t)max_conc * (n_prompt + n_gen + 32);
    cfg.kv_type = kv_type;
    cfg.enable_prefix_caching = 0;
    char err[512] = "";
    ifl_executor *ex;
    if (ifl_executor_create(&ex, model, &cfg, err)) {
        fprintf(stderr, "inflight bench: %s\n", err);
        return CLI_EXIT_USAGE;
    }
    struct ifl_model_info mi;
    ifl_executor_model_info(ex, &mi);
    struct ifl_rng g;
    ifl_rng_seed(&g, 1);
    struct wave_result w = {0};
    w.ttft = malloc(sizeof(double) * MAX_CONC * (size_t)reps);
    w.itl = malloc(sizeof(double) * MAX_CONC * (size_t)n_gen * (size_t)reps);
    double *ttft_all = w.ttft, *itl_all = w.itl;
    int status = 0;
    if (!json)
        printf("model %s (%s), prompt %lld, gen %lld, %lld waves each\n"
               "| concurrency | prompt tok/s | decode tok/s | total tok/s | TTFT p50 ms | TTFT p99 ms "
               "| ITL p50 ms | ITL p99 ms |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n",
               model, mi.architecture, (long long)n_prompt, (long long)n_gen, (long long)reps);
    /* one untimed wave warms caches and the thread pool */
    w.ttft = ttft_all;
    w.itl = itl_all;
    if (run_wave(ex, 1, (int)n_prompt, (int)n_gen, &g, mi.n_vocab, mi.bos_id, &w, err)) {
        fprintf(stderr, "inflight bench: %s\n", err);
        status = 1;
    }
    for (int ci = 0; ci < n_conc && !status; ci++) {
        int c = conc[ci];
        double tp = 0, td = 0, tt = 0;
        int64_t n_ttft = 0, n_itl = 0;
        for (int rep = 0; rep < reps && !status; rep++) {
            w.ttft = ttft_all + n_ttft;
            w.itl = itl_all + n_itl;
            if (run_wave(ex, c, (int)n_prompt, (int)n_gen, &g, mi.n_vocab, mi.bos_id, &w, err)) {
                fprintf(stderr, "inflight bench: %s\n", err);
                status = 1;
            }
            tp += w.t_prompt;
            td += w.t_decode;
            tt += w.t_total;
            n_ttft += c;
            n_itl += w.n_itl;
        }
        if (status)
            break;
        double s_pp = (double)c * n_prompt * reps / tp;
        double s_tg = (double)c * (n_gen - 1) * reps / td;
        double s_all = (double)c * n_gen * reps / tt;
        double t50 = cli_percentile(ttft_all, n_ttft, 0.5) * 1e3, t99 = cli_percentile(ttft_all, n_ttft, 0.99) * 1e3;
        double i50 = cli_percentile(itl_all, n_itl, 0.5) * 1e3, i99 = cli_percentile(itl_all, n_itl, 0.99) * 1e3;
        if (json)
            printf("{\"model\":\"%s\",\"concurrency\":%d,\"n_prompt\":%lld,\"n_gen\":%lld,"
                   "\"prompt_tps\":%.2f,\"decode_tps\":%.2f,\"total_tps\":%.2f,"
                   "\"ttft_p50_ms\":%.3f,\"ttft_p99_ms\":%.3f,\"itl_p50_ms\":%.3f,"
                   "\"itl_p99_ms\":%.3f}\n",
                   model, c, (long long)n_prompt, (long long)n_gen, s_pp, s_tg, s_all, t50, t99,
                   i50, i99);
        else
            printf("| %d | %.1f | %.1f | %.1f | %.2f | %.2f | %.3f | %.3f |\n", c, s_pp, s_tg,
                   s_all, t50, t99, i50, i99);
        fflush(stdout);
    }
    free(ttft_all);
    free(itl_all);
    ifl_executor_destroy(ex, 1);
    return status;
}
