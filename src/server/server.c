/*
 * The server's life cycle (server/server.h): create binds and starts the
 * HTTP daemon (http.c) and the pump (pump.c) before any model is loaded, so
 * that /health answers while loading; load publishes the executor; shutdown
 * drains, then cancels, then stops the daemon, the pump and the executor in
 * that order; free releases the rest.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/err.h"
#include "core/timeutil.h"
#include "server/internal.h"

/* The listening socket, made here so that a failure names the address and
 * the reason. SO_REUSEADDR lets a restart bind while the last run's
 * connections sit in TIME_WAIT; SO_REUSEPORT, which lets a second server
 * take a share of the port's connections without a word, only when asked. */
static int open_listener(struct ifl_server *s, const struct addrinfo *ai, int *out, char *err)
{
    char addr[300];
    snprintf(addr, sizeof addr, strchr(s->host, ':') ? "[%s]:%d" : "%s:%d", s->host, s->cfg.port);
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, ai->ai_protocol);
    const char *step = "socket";
    int one = 1;
    if (fd < 0)
        goto fail;
    step = "SO_REUSEADDR";
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one))
        goto fail;
    step = "SO_REUSEPORT";
    if (s->cfg.reuse_port && setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof one))
        goto fail;
    step = NULL;
    if (bind(fd, ai->ai_addr, ai->ai_addrlen) || listen(fd, SOMAXCONN))
        goto fail;
    *out = fd;
    return 0;
fail:;
    char why[128];
    snprintf(why, sizeof why, "%s", strerror(errno));
    why[0] = (char)tolower((unsigned char)why[0]); /* "Address already in use" mid-sentence */
    if (fd >= 0)
        close(fd);
    return ifl_err(err, IFL_EIO, "cannot listen on %s: %s%s%s", addr, step ? step : "",
                   step ? ": " : "", why);
}

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

int ifl_server_create(struct ifl_server **out, const struct ifl_server_config *cfg, char *err)
{
    *out = NULL;
    struct ifl_server *s = calloc(1, sizeof(*s));
    if (!s)
        return ifl_err(err, IFL_ENOMEM, "out of memory");
    pthread_mutex_init(&s->rate.mu, NULL);
    s->cfg = *cfg;
    if (s->cfg.max_body_bytes <= 0)
        s->cfg.max_body_bytes = 4 << 20;
    if (s->cfg.request_timeout_s <= 0)
        s->cfg.request_timeout_s = 10;
    if (s->cfg.max_conns_per_ip <= 0)
        s->cfg.max_conns_per_ip = 256;
    if (s->cfg.http_threads <= 0)
        s->cfg.http_threads = 4;
    s->host = strdup(cfg->host ? cfg->host : "127.0.0.1");
    s->model_path = dup_or_null(cfg->model_path);
    s->api_key = dup_or_null(cfg->api_key);
    s->cors_origin = dup_or_null(cfg->cors_origin);
    s->chat_template = dup_or_null(cfg->chat_template);
    if (cfg->served_model_name) {
        s->model_name = strdup(cfg->served_model_name);
    } else {
        const char *p = cfg->model_path ? cfg->model_path : "model";
        const char *slash = strrchr(p, '/');
        s->model_name = strdup(slash ? slash + 1 : p);
        char *dot = s->model_name ? strrchr(s->model_name, '.') : NULL;
        if (dot && !strcmp(dot, ".gguf"))
            *dot = 0;
    }
    if (s->model_name && ifl_oai_names_init(s, cfg->served_model_name != NULL)) {
        ifl_server_free(s);
        return ifl_err(err, IFL_ENOMEM, "out of memory");
    }
    s->cfg.host = s->host;
    s->cfg.model_path = s->model_path;
    s->cfg.api_key = s->api_key;
    s->cfg.cors_origin = s->cors_origin;
    s->cfg.chat_template = s->chat_template;
    s->cfg.served_model_name = s->model_name;
    s->id_salt = (uint64_t)ifl_now_us() ^ ((uint64_t)getpid() << 32) ^ (uint64_t)(uintptr_t)s;
    if (!s->host || !s->model_name) {
        ifl_server_free(s);
        return ifl_err(err, IFL_ENOMEM, "out of memory");
    }

    struct addrinfo hints = {
        .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *ai = NULL;
    char port[16];
    snprintf(port, sizeof port, "%d", cfg->port);
    int g = getaddrinfo(s->host, port, &hints, &ai);
    if (g || !ai) {
        ifl_err(err, IFL_EINVAL, "--host '%s': %s", s->host, gai_strerror(g));
        ifl_server_free(s);
        return IFL_EINVAL;
    }
    int lfd = -1;
    int rc = open_listener(s, ai, &lfd, err);
    freeaddrinfo(ai);
    if (rc) {
        ifl_server_free(s);
        return rc;
    }
    if (ifl_pump_start(s, err)) {
        close(lfd);
        ifl_server_free(s);
        return IFL_EIO;
    }
    rc = ifl_http_start(s, lfd, err);
    if (rc) {
        /* lfd is not closed here: libmicrohttpd may have closed it already,
         * and a second close could hit a descriptor reused meanwhile */
        ifl_server_free(s);
        return rc;
    }
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    s->port = cfg->port;
    if (getsockname(lfd, (struct sockaddr *)&sa, &sl) == 0)
        s->port = ntohs(sa.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&sa)->sin6_port
                                                 : ((struct sockaddr_in *)&sa)->sin_port);
    *out = s;
    return 0;
}

int ifl_server_port(const struct ifl_server *s)
{
    return s->port;
}

/* Keeps the loading progress for /health, and passes it on to the
 * caller's callback, if any. */
static void load_progress(void *user, const struct ifl_load_progress *p)
{
    struct ifl_server *s = user;
    atomic_store_explicit(&s->load_total, p->total, memory_order_relaxed);
    atomic_store_explicit(&s->load_done, p->done, memory_order_relaxed);
    if (s->cfg.exec.load_progress)
        s->cfg.exec.load_progress(s->cfg.exec.load_progress_user, p);
}

int ifl_server_load(struct ifl_server *s, char *err)
{
    ifl_executor *ex = NULL;
    struct ifl_executor_config ec = s->cfg.exec;
    ec.load_progress = load_progress;
    ec.load_progress_user = s;
    int rc = ifl_executor_create(&ex, s->model_path, &ec, err);
    if (rc)
        return rc;
    ifl_executor_model_info(ex, &s->info);
    int64_t n = 0;
    if (s->info.bos_id >= 0)
        ifl_executor_detokenize(ex, &s->info.bos_id, 1, 1, s->bos_text, sizeof s->bos_text, &n);
    if (s->info.eos_id >= 0)
        ifl_executor_detokenize(ex, &s->info.eos_id, 1, 1, s->eos_text, sizeof s->eos_text, &n);
    s->created = (int64_t)time(NULL);
    rc = ifl_server_chat_init(s, ex, err);
    if (rc) {
        ifl_executor_destroy(ex, 1);
        return rc;
    }
    /* e.g. LoRA adapters, loaded before any request can name them */
    if (s->cfg.on_load && (rc = s->cfg.on_load(s->cfg.on_load_user, ex, err))) {
        ifl_server_chat_free(s);
        ifl_executor_destroy(ex, 1);
        return rc;
    }
    /* last: a request that sees the executor sees all of the above */
    atomic_store_explicit(&s->ex, ex, memory_order_release);
    return 0;
}

/* How long cancelled requests get to send their replies at shutdown: a
 * cancel takes effect at the engine's next step. */
#define ABORT_REPLY_MS 5000

void ifl_server_shutdown(struct ifl_server *s, int64_t grace_ms)
{
    if (!s || !s->mhd)
        return;
    atomic_store_explicit(&s->draining, 1, memory_order_relaxed);
    /* new connections are refused at once rather than left waiting in the
     * backlog for the drain */
    MHD_socket lsock = MHD_quiesce_daemon(s->mhd);
    if (lsock != MHD_INVALID_SOCKET)
        close(lsock);
    int64_t t_end = ifl_now_us() + grace_ms * 1000;
    while (atomic_load_explicit(&s->in_flight, memory_order_acquire) > 0 && ifl_now_us() < t_end &&
           !atomic_load_explicit(&s->forced, memory_order_relaxed))
        usleep(10000);
    /* what is left is cancelled: woken, each connection cancels its job and
     * answers with finish reason abort (streams with their last chunks)
     * once the cancelled finals come, so give them a bounded while before
     * the sockets go */
    atomic_store_explicit(&s->aborting, 1, memory_order_relaxed);
    ifl_pump_wake_all(s, 0);
    t_end = ifl_now_us() + ABORT_REPLY_MS * 1000;
    while (atomic_load_explicit(&s->in_flight, memory_order_acquire) > 0 && ifl_now_us() < t_end)
        usleep(10000);
    /* libmicrohttpd must not stop with a connection suspended: resume the
     * rest for good (they close) */
    ifl_pump_wake_all(s, 1);
    MHD_stop_daemon(s->mhd);
    s->mhd = NULL;
    ifl_pump_stop(s); /* after the daemon (whose jobs it frees), before the executor */
    ifl_executor *ex = atomic_exchange_explicit(&s->ex, NULL, memory_order_acq_rel);
    if (ex)
        ifl_executor_destroy(ex, 1);
}

void ifl_server_abort(struct ifl_server *s)
{
    if (s)
        atomic_store_explicit(&s->forced, 1, memory_order_relaxed);
}

void ifl_server_free(struct ifl_server *s)
{
    if (!s)
        return;
    if (s->mhd)
        ifl_server_shutdown(s, 0);
    ifl_pump_stop(s);
    ifl_server_chat_free(s);
    free(s->host);
    free(s->model_path);
    free(s->api_key);
    free(s->cors_origin);
    free(s->chat_template);
    free(s->model_name);
    ifl_oai_names_free(s);
    pthread_mutex_destroy(&s->rate.mu);
    free(s);
}
