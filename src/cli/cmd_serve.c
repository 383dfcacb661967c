/*
 * `inflight serve`: the executor behind HTTP (OpenAI and TGI routes).
 *
 * Every argument is checked before anything starts (files readable,
 * numbers in range, options that exclude each other): a bad one prints one
 * line and exits 2. Then the listener starts (/health answers 503), the
 * model loads (/health: 200), and the main thread waits for SIGINT or
 * SIGTERM: stop accepting, let requests in flight finish within
 * --shutdown-timeout, cancel the rest, exit 0. The drain runs on its own
 * thread while the main thread keeps taking signals: a second SIGINT or
 * SIGTERM cancels what is left at once (each still gets its abort ending)
 * and the exit status is 1.
 */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>

#include "cli/cli.h"
#include "core/sysmem.h"
#include "dist/comm.h"
#include "inflight.h"
#include "server/server.h"

static const char SERVE_HELP[] =
    "usage: inflight serve -m FILE [options]\n"
    "  -m, --model FILE          GGUF model (required)\n"
    "  --host ADDR               address to listen on (default 127.0.0.1)\n"
    "  --port N                  port (default 8080; 0: any free port, printed at start)\n"
    "  --parallel N              sequences batched per step (max_batch_size, default 16)\n"
    "  --max-num-tokens N        rows per step: decode rows + prefill chunk (default 512)\n"
    "  --kv-cache-tokens N       KV cache size in positions (default: --parallel full\n"
    "                            contexts, cut to --kv-cache-memory if they do not fit)\n"
    "  --kv-cache-memory M       the default KV cache's bound: a share of the memory the\n"
    "                            process may use (MemAvailable, cgroup limit), e.g. 40%\n"
    "                            (the default), or a size, e.g. 2G\n"
    "  --kv-release-ms N         KV blocks free this long give their memory back\n"
    "                            (default 5000; 0: as soon as idle; -1: never)\n"
    "  --kv-prefault             make the whole KV cache resident at start and keep it\n"
    "                            (memory for speed where faulting pages in is slow)\n"
    "  --max-queue N             waiting requests before 429 (default 256; 0: unlimited)\n"
    "  --api-key KEY             require 'Authorization: Bearer KEY' (not on /health)\n"
    "  --api-key-file F          the same, the key read from the first line of F\n"
    "  --cors-origin O           send Access-Control-Allow-Origin: O and answer preflights\n"
    "  -t, --threads N           forward-pass threads (default: the CPUs this process may use)\n"
    "  -c, --ctx-size N          positions per sequence (default: the model's, at most 4096)\n"
    "  --kv-type f16|f32|q8_0    KV cache precision (default f16)\n"
    "  --repack-cache DIR        keep the weights repacked for this CPU's kernels in a file\n"
    "                            in DIR, which later starts map instead of repacking\n"
    "                            (default, for models of 64 MiB or more: ~/.cache/inflight;\n"
    "                            off: repack in memory at every start)\n"
    "  --repack-cache-max SIZE   the cache files there may take SIZE in all (20G, 512M;\n"
    "                            default 32G; off: no bound): a new file makes the least\n"
    "                            recently used others go\n"
    "  --chat-template FILE      Jinja chat template (default: the model's, else ChatML)\n"
    "  --mmproj FILE             a vision encoder (llama.cpp's mmproj GGUF) for the model:\n"
    "                            chat messages may then carry image_url parts (data URLs),\n"
    "                            TGI inputs ![](URL), completions prompt objects\n"
    "  --vision-precision f32|bf16  the encoder's products: f32 (default), or bf16 (F16\n"
    "                            matrices and activations rounded to BF16: faster on CPUs\n"
    "                            with AVX-512 BF16, embeddings ~1e-2 off)\n"
    "  --image-url-allow PREFIX  fetch remote images (http, https) whose URL starts with\n"
    "                            PREFIX (repeatable; others get 400); no redirects\n"
    "  --served-model-name NAME  the model's name in the API (default: the file's base name);\n"
    "                            NAME,ALIAS,... or the flag repeated adds aliases\n"
    "  --strict-model-name       a request naming another model gets 404 (default: any name\n"
    "                            selects the served model)\n"
    "  --log-format text|json    access log on stderr (default text)\n"
    "  --log-level info|debug    debug adds health probes and libmicrohttpd's messages\n"
    "  --max-body-bytes N        larger request bodies get 413 (default 4194304)\n"
    "  --shutdown-timeout S      on SIGTERM, seconds to let requests finish (default 30;\n"
    "                            a second SIGTERM or SIGINT cancels them at once)\n"
    "  --request-timeout S       seconds a connection has to send a whole request, counted\n"
    "                            from its opening or its last reply (default 10)\n"
    "  --max-conns-per-ip N      open connections per client address (default 256)\n"
    "  --http-threads N          threads serving HTTP connections (default 4)\n"
    "  --reuse-port              share the port with other servers (SO_REUSEPORT, replicas)\n"
    "  --no-playground           no web page: / and /dashboard answer 404\n"
    "  --quiet                   no access log\n" CLI_SPEC_HELP CLI_LORA_HELP CLI_TP_HELP;

/* Says how big the KV pool is and what decided it. */
static void log_kv_pool(struct ifl_server *srv, int32_t parallel, double share, int prefault)
{
    struct ifl_iteration_stats st;
    if (ifl_server_iteration_stats(srv, &st))
        return;
    const double gib = 1024.0 * 1024 * 1024;
    char why[160];
    switch (st.kv_pool_bound) {
    case IFL_KV_BOUND_TOKENS:
        snprintf(why, sizeof(why), "--kv-cache-tokens");
        break;
    case IFL_KV_BOUND_CONTEXTS:
        snprintf(why, sizeof(why), "--parallel %d full contexts (the bound, %.2f GiB, holds them)",
                 parallel, (double)st.kv_bytes_bound / gib);
        break;
    case IFL_KV_BOUND_LIMIT:
        snprintf(why, sizeof(why), "cut to --kv-cache-memory %.2f GiB",
                 (double)st.kv_bytes_bound / gib);
        break;
    case IFL_KV_BOUND_MEM_AVAILABLE:
    case IFL_KV_BOUND_CGROUP:
        snprintf(why, sizeof(why), "cut to %g%% of %s: %.2f GiB", share * 100,
                 st.kv_pool_bound == IFL_KV_BOUND_CGROUP ? "the memory cgroup's room"
                                                         : "MemAvailable",
                 (double)st.kv_bytes_bound / gib);
        break;
    default:
        snprintf(why, sizeof(why), "its configuration");
        break;
    }
    fprintf(stderr, "inflight serve: KV cache %d blocks, %.2f GiB %s: %s\n", st.kv_blocks_max,
            (double)st.kv_bytes_reserved / gib,
            prefault ? "resident (--kv-prefault)" : "reserved (memory taken as blocks are used)",
            why);
}

/* The drain at shutdown, on its own thread so the main one can take a
 * second signal. */
struct drain {
    struct ifl_server *srv;
    int64_t grace_ms;
    pthread_t thread;
    atomic_int done; /* release by the drain, acquire by main */
};

static void *drain_main(void *arg)
{
    struct drain *d = arg;
    ifl_server_shutdown(d->srv, d->grace_ms);
    atomic_store_explicit(&d->done, 1, memory_order_release);
    return NULL;
}

/* The server's on_load: the command line's LoRA adapters, loaded before
 * the server answers with its executor. */
static int load_adapters(void *user, ifl_executor *ex, char *err)
{
    struct cli_lora *l = user;
    for (int i = 0; i < l->n; i++) {
        char e2[IFL_ERR_LEN] = "";
        int rc = ifl_executor_load_lora(ex, l->path[i], l->name[i][0] ? l->name[i] : NULL,
                                        l->scale[i], &l->id[i], e2);
        if (rc)
            return ifl_err(err, rc, "LoRA adapter '%s': %s", l->path[i], e2);
        fprintf(stderr, "inflight serve: LoRA adapter %d '%s' (global scale %g)\n", l->id[i],
                l->path[i], (double)l->scale[i]);
    }
    return 0;
}

/* --tp: this process's part of the MPI job (left by cmd_serve) */
static struct cli_tp g_tp;

/* Whether the tensor parallel job has failed (a rank died or went silent):
 * the executor then fails every request with 503, and the server exits. */
static int tp_failed(struct ifl_server *srv)
{
    struct ifl_iteration_stats st;
    return g_tp.comm && ifl_server_iteration_stats(srv, &st) == 0 && st.tp_failed;
}

static int serve_main(int argc, char **argv);

int cmd_serve(int argc, char **argv)
{
    return cli_tp_end(&g_tp, serve_main(argc, argv));
}

static int serve_main(int argc, char **argv)
{
    struct cli_lora lora_opts = {0};
    struct cli_lora *lora = &lora_opts;
    const char *model = NULL, *host = "127.0.0.1", *api_key = NULL, *api_key_file = NULL;
    const char *cors = NULL, *tmpl_path = NULL, *name = NULL, *log_format = "text";
    const char *repack_cache = NULL, *mmproj = NULL;
    int64_t repack_cache_max = 0;
    int vision_prec = IFL_VISION_PREC_F32;
    const char *url_allow[64];
    int n_url_allow = 0;
    int rc0;
    int64_t port = 8080, parallel = 16, max_num_tokens = 512, kv_tokens = 0, max_queue = 256;
    int64_t threads = 0, ctx = 0, max_body = 4 << 20, shutdown_s = 30;
    int64_t request_timeout = 10, per_ip = 256, http_threads = 4;
    const char *log_level = "info";
    int kv_type = IFL_KV_F16, quiet = 0, strict_name = 0, reuse_port = 0, kv_prefault = 0;
    int no_playground = 0;
    /* --served-model-name may be repeated: the values are joined with commas */
    char names[4096] = "";
    size_t names_len = 0;
    int64_t kv_mem_bytes = 0, kv_release_ms = 5000;
    double kv_mem_share = 0.4;
    struct ifl_executor_config defaults;
    ifl_executor_config_default(&defaults);
    struct ifl_speculative_config spec = defaults.speculative;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(SERVE_HELP, stdout);
            return 0;
        }
        if (!strcmp(a, "--quiet")) {
            quiet = 1;
            continue;
        }
        if (!strcmp(a, "--strict-model-name")) {
            strict_name = 1;
            continue;
        }
        if (!strcmp(a, "--reuse-port")) {
            reuse_port = 1;
            continue;
        }
        if (!strcmp(a, "--kv-prefault")) {
            kv_prefault = 1;
            continue;
        }
        if (!strcmp(a, "--no-playground")) {
            no_playground = 1;
            continue;
        }
        if (i + 1 >= argc)
            return cli_usage_error("serve", "option '%s' needs a value (or is unknown; see --help)",
                                   a);
        const char *v = argv[++i];
#define NUM(var, lo, hi, what)                                                                     \
    do {                                                                                           \
        if (cli_parse_i64(v, lo, hi, &var))                                                        \
            return cli_usage_error("serve", "%s wants %s (%lld to %lld), not '%s'", a, what,       \
                                   (long long)(lo), (long long)(hi), v);                           \
    } while (0)
        int sp = cli_spec_option("serve", a, v, &spec);
        if (sp < 0)
            sp = cli_lora_option("serve", a, v, lora);
        if (sp < 0)
            sp = cli_tp_option("serve", a, v, &g_tp);
        if (sp > 0)
            return sp;
        if (sp == 0)
            continue;
        if (!strcmp(a, "-m") || !strcmp(a, "--model"))
            model = v;
        else if (!strcmp(a, "--host"))
            host = v;
        else if (!strcmp(a, "--port"))
            NUM(port, 0, 65535, "a port");
        else if (!strcmp(a, "--parallel"))
            NUM(parallel, 1, 1024, "a sequence count");
        else if (!strcmp(a, "--max-num-tokens"))
            NUM(max_num_tokens, 1, 65536, "a token count");
        else if (!strcmp(a, "--kv-cache-tokens"))
            NUM(kv_tokens, 1, (int64_t)1 << 32, "a position count");
        else if (!strcmp(a, "--kv-cache-memory")) {
            if (ifl_sysmem_parse_amount(v, &kv_mem_bytes, &kv_mem_share))
                return cli_usage_error("serve",
                                       "--kv-cache-memory wants a share like 40%% or a size "
                                       "like 2G, not '%s'",
                                       v);
        } else if (!strcmp(a, "--kv-release-ms"))
            NUM(kv_release_ms, -1, 86400000, "milliseconds");
        else if (!strcmp(a, "--max-queue"))
            NUM(max_queue, 0, 1 << 20, "a request count");
        else if (!strcmp(a, "--api-key"))
            api_key = v;
        else if (!strcmp(a, "--api-key-file"))
            api_key_file = v;
        else if (!strcmp(a, "--cors-origin"))
            cors = v;
        else if (!strcmp(a, "-t") || !strcmp(a, "--threads"))
            NUM(threads, 1, 1024, "a thread count");
        else if (!strcmp(a, "-c") || !strcmp(a, "--ctx-size"))
            NUM(ctx, 2, 1 << 20, "a context size");
        else if (!strcmp(a, "--kv-type")) {
            if ((kv_type = cli_parse_kv_type(v)) < 0)
                return cli_usage_error("serve", "--kv-type wants f16, f32 or q8_0, not '%s'", v);
        } else if (!strcmp(a, "--repack-cache"))
            repack_cache = v;
        else if (!strcmp(a, "--repack-cache-max")) {
            if (cli_parse_cache_max(v, &repack_cache_max))
                return cli_usage_error(
                    "serve", "--repack-cache-max wants a size (20G, 512M) or off, not '%s'", v);
        } else if (!strcmp(a, "--chat-template"))
            tmpl_path = v;
        else if (!strcmp(a, "--mmproj"))
            mmproj = v;
        else if (!strcmp(a, "--vision-precision")) {
            if ((vision_prec = cli_parse_vision_precision(v)) < 0)
                return cli_usage_error("serve", "--vision-precision wants f32 or bf16, not '%s'",
                                       v);
        } else if (!strcmp(a, "--image-url-allow")) {
            if (strncasecmp(v, "http://", 7) && strncasecmp(v, "https://", 8))
                return cli_usage_error("serve",
                                       "--image-url-allow: '%s' is not an http:// or "
                                       "https:// prefix",
                                       v);
            if (strlen(v) <= (size_t)(v[4] == 's' || v[4] == 'S' ? 8 : 7))
                return cli_usage_error("serve", "--image-url-allow: '%s' names no host", v);
            if (n_url_allow == 64)
                return cli_usage_error("serve", "--image-url-allow: at most 64 prefixes");
            url_allow[n_url_allow++] = v;
        } else if (!strcmp(a, "--served-model-name")) {
            size_t vl = strlen(v);
            if (!vl || v[0] == ',' || v[vl - 1] == ',' || strstr(v, ",,"))
                return cli_usage_error("serve", "--served-model-name: an empty name in '%s'", v);
            if (names_len + vl + 2 > sizeof names)
                return cli_usage_error("serve",
                                       "--served-model-name: the names add up to more "
                                       "than %zu bytes",
                                       sizeof names - 2);
            if (names_len)
                names[names_len++] = ',';
            memcpy(names + names_len, v, vl + 1);
            names_len += vl;
            name = names;
        } else if (!strcmp(a, "--log-format"))
            log_format = v;
        else if (!strcmp(a, "--log-level"))
            log_level = v;
        else if (!strcmp(a, "--max-body-bytes"))
            NUM(max_body, 1024, (int64_t)1 << 30, "a byte count");
        else if (!strcmp(a, "--shutdown-timeout"))
            NUM(shutdown_s, 0, 3600, "seconds");
        else if (!strcmp(a, "--request-timeout"))
            NUM(request_timeout, 1, 3600, "seconds");
        else if (!strcmp(a, "--max-conns-per-ip"))
            NUM(per_ip, 1, 1 << 20, "a connection count");
        else if (!strcmp(a, "--http-threads"))
            NUM(http_threads, 1, 256, "a thread count");
        else
            return cli_usage_error("serve", "unknown option '%s' (see --help)", a);
#undef NUM
    }
    if (!model)
        return cli_usage_error("serve", "a model is required (-m FILE)");
    if ((rc0 = cli_spec_finish("serve", &spec)))
        return rc0;
    FILE *mf = fopen(model, "rb");
    if (!mf)
        return cli_usage_error("serve", "cannot open model '%s': %s", model, strerror(errno));
    fclose(mf);
    if (!*host)
        return cli_usage_error("serve", "--host must not be empty");
    if (strcmp(log_format, "text") && strcmp(log_format, "json"))
        return cli_usage_error("serve", "--log-format wants text or json, not '%s'", log_format);
    if (strcmp(log_level, "info") && strcmp(log_level, "debug"))
        return cli_usage_error("serve", "--log-level wants info or debug, not '%s'", log_level);
    if (api_key && api_key_file)
        return cli_usage_error("serve", "give --api-key or --api-key-file, not both");
    if (api_key && !*api_key)
        return cli_usage_error("serve", "--api-key must not be empty");
    if (repack_cache && (rc0 = cli_check_cache_dir("serve", repack_cache)))
        return rc0;
    if (cors && !*cors)
        return cli_usage_error("serve", "--cors-origin must not be empty");
    const char *why = NULL;
    char *key_buf = NULL, *tmpl = NULL;
    if (api_key_file) {
        key_buf = cli_read_file(api_key_file, 4096, &why);
        if (!key_buf)
            return cli_usage_error("serve", "--api-key-file '%s': %s", api_key_file, why);
        key_buf[strcspn(key_buf, "\r\n")] = 0;
        if (!*key_buf) {
            free(key_buf);
            return cli_usage_error("serve", "--api-key-file '%s': the first line is empty",
                                   api_key_file);
        }
        api_key = key_buf;
    }
    if (tmpl_path) {
        tmpl = cli_read_file(tmpl_path, 1 << 20, &why);
        if (!tmpl) {
            free(key_buf);
            return cli_usage_error("serve", "--chat-template '%s': %s", tmpl_path, why);
        }
    }
    if (ctx && kv_tokens && kv_tokens < ctx) {
        free(key_buf);
        free(tmpl);
        return cli_usage_error("serve", "--kv-cache-tokens %lld cannot hold one context of %lld",
                               (long long)kv_tokens, (long long)ctx);
    }
    /* a worker rank of --tp runs its loop here and returns; rank 0 serves */
    if ((rc0 = cli_tp_start("serve", &g_tp, model, (int)threads)) >= 0) {
        free(key_buf);
        free(tmpl);
        return rc0;
    }

    struct ifl_server_config cfg = {0};
    cfg.host = host;
    cfg.port = (int)port;
    cfg.model_path = model;
    ifl_executor_config_default(&cfg.exec);
    cfg.exec.n_threads = (int32_t)threads;
    cfg.exec.tp_comm = g_tp.comm;
    cfg.exec.tp_emulate = g_tp.emulate;
    cfg.exec.tp_timeout_s = g_tp.timeout_s;
    cfg.exec.max_batch_size = (int32_t)parallel;
    cfg.exec.max_num_tokens = (int32_t)max_num_tokens;
    cfg.exec.max_queue_size = (int32_t)max_queue;
    cfg.exec.n_ctx = (int32_t)ctx;
    cfg.exec.kv_cache_tokens = kv_tokens;
    cfg.exec.kv_cache_memory_limit = kv_mem_bytes;
    cfg.exec.kv_cache_memory_share = kv_mem_share;
    cfg.exec.kv_release_ms = kv_release_ms ? (int32_t)kv_release_ms : 1; /* 0: once idle */
    cfg.exec.kv_prefault = kv_prefault;
    cfg.exec.speculative = spec;
    cfg.exec.lora_cache_bytes = lora->cache_bytes;
    cfg.exec.lora_type = lora->type;
    cfg.on_load = load_adapters;
    cfg.on_load_user = lora;
    if (n_url_allow) {
        if (cli_fetch_init())
            return cli_usage_error("serve", "--image-url-allow: libcurl did not start");
        cfg.image_url_allow = url_allow;
        cfg.n_image_url_allow = n_url_allow;
        cfg.fetch_image = cli_fetch_image;
    }
    cfg.exec.kv_type = kv_type;
    cfg.exec.mmproj_path = mmproj;
    cfg.exec.vision_precision = vision_prec;
    char cache_buf[4096];
    int cache_default;
    cfg.exec.repack_cache_max_bytes = repack_cache_max;
    cfg.exec.repack_cache_dir =
        cli_repack_cache(repack_cache, model, cache_buf, sizeof cache_buf, &cache_default);
    struct cli_progress progress;
    cli_progress_init(&progress, "serve", 0);
    cfg.exec.load_progress = cli_progress_fn;
    cfg.exec.load_progress_user = &progress;
    cfg.api_key = api_key;
    cfg.cors_origin = cors;
    cfg.chat_template = tmpl;
    cfg.served_model_name = name;
    cfg.strict_model_name = strict_name;
    cfg.log_format = strcmp(log_format, "json") ? IFL_SERVER_LOG_TEXT : IFL_SERVER_LOG_JSON;
    cfg.max_body_bytes = max_body;
    cfg.quiet = quiet;
    cfg.request_timeout_s = (int)request_timeout;
    cfg.max_conns_per_ip = (int)per_ip;
    cfg.http_threads = (int)http_threads;
    cfg.log_level = strcmp(log_level, "debug") ? IFL_SERVER_LOG_INFO : IFL_SERVER_LOG_DEBUG;
    cfg.reuse_port = reuse_port;
    cfg.no_playground = no_playground;

    /* idle and slow connections cost a descriptor each, not a thread: take
     * every descriptor the hard limit allows (the server sizes its
     * connection limit from it) */
    struct rlimit rl;
    if (!getrlimit(RLIMIT_NOFILE, &rl) && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }

    /* every thread started from here on inherits the blocked signals; the
     * main thread takes them with sigwait */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    char err[512] = "";
    struct ifl_server *srv = NULL;
    int rc = ifl_server_create(&srv, &cfg, err);
    free(key_buf);
    free(tmpl);
    if (rc) {
        /* a host that does not resolve, an address in use or not of this
         * machine: the operator's to fix, like a bad argument */
        fprintf(stderr, "inflight serve: %s\n", err);
        return rc == IFL_EINVAL || rc == IFL_EIO ? CLI_EXIT_USAGE : 1;
    }
    fprintf(stderr, "inflight serve: listening on http://%s:%d (loading %s)\n", host,
            ifl_server_port(srv), model);
    rc = ifl_server_load(srv, err);
    if (rc) {
        /* a model that does not load is the operator's to fix, like a bad
         * argument; a rank lost on the way or memory short is a failure
         * while running */
        int lost = g_tp.comm && ifl_comm_broken(g_tp.comm);
        fprintf(stderr, "inflight serve: %s%s\n", err,
                lost ? " (the tensor parallel job lost a rank while loading)" : "");
        ifl_server_free(srv);
        return lost || rc == IFL_ENOMEM ? 1 : CLI_EXIT_USAGE;
    }
    cli_cache_note(&progress, cfg.exec.repack_cache_dir, cache_default);
    log_kv_pool(srv, (int32_t)parallel, kv_mem_share, kv_prefault);
    if (spec.type != IFL_SPEC_NONE) {
        static const char *const kinds[] = {"none", "draft model", "n-gram lookup", "EAGLE-3"};
        fprintf(
            stderr, "inflight serve: speculative decoding: %s%s%s, up to %d drafts a step%s, %s\n",
            kinds[spec.type], spec.draft_model ? " " : "", spec.draft_model ? spec.draft_model : "",
            spec.n_max, spec.adaptive ? " (adaptive)" : "",
            spec.accept == IFL_SPEC_ACCEPT_REJECTION
                ? "speculative sampling (sampled outputs follow the model's distribution)"
                : "outputs as without it");
    }
    fprintf(stderr, "inflight serve: ready on http://%s:%d\n", host, ifl_server_port(srv));
    int sig = 0;
    if (!g_tp.comm) {
        sigwait(&set, &sig);
    } else {
        /* the job may fail under us: look every 100 ms */
        const struct timespec tick = {0, 100 * 1000 * 1000};
        while ((sig = sigtimedwait(&set, NULL, &tick)) <= 0) {
            if (!tp_failed(srv))
                continue;
            fprintf(stderr, "inflight serve: the tensor parallel job lost a rank: requests "
                            "answered 503; exiting\n");
            ifl_server_shutdown(srv, 1000);
            ifl_server_free(srv);
            return 1;
        }
    }
    fprintf(stderr, "inflight serve: %s: finishing requests in flight (up to %llds)\n",
            sig == SIGINT ? "SIGINT" : "SIGTERM", (long long)shutdown_s);
    struct drain d = {.srv = srv, .grace_ms = shutdown_s * 1000};
    int forced = 0;
    if (pthread_create(&d.thread, NULL, drain_main, &d)) {
        ifl_server_shutdown(srv, d.grace_ms); /* no second signal then: plain drain */
    } else {
        /* the drain's thread ends within the grace plus the abort replies;
         * meanwhile a second signal cuts the grace short */
        const struct timespec tick = {0, 50 * 1000 * 1000};
        while (!atomic_load_explicit(&d.done, memory_order_acquire)) {
            sig = sigtimedwait(&set, NULL, &tick);
            if (sig > 0 && !forced) {
                forced = 1;
                fprintf(stderr, "inflight serve: second %s: cancelling requests in flight\n",
                        sig == SIGINT ? "SIGINT" : "SIGTERM");
                ifl_server_abort(srv);
            }
        }
        pthread_join(d.thread, NULL);
    }
    ifl_server_free(srv);
    fprintf(stderr, "inflight serve: stopped%s\n", forced ? " (requests cut short)" : "");
    return forced ? 1 : 0;
}
