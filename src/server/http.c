/*
 * HTTP transport over libmicrohttpd: a fixed pool of threads, each with its
 * own epoll set, serves every connection, so no callback may block. A
 * generation suspends its connection after enqueueing; the pump (pump.c)
 * resumes it when responses arrive. A whole reply is then built by the
 * route's done callback; a streamed reply's content reader hands out what is
 * rendered and suspends when nothing is.
 *
 * Order of checks for every request (before its body is read): control
 * characters in the path (400), CORS preflight (any path), API key (401;
 * /health stays open), route (404), method (405; HEAD is GET without the
 * body), shutdown (503), declared body size (413). Then the body is collected
 * up to the limit (413 past it), parsed with jansson (400 / 422), and handed
 * to the route. 401 carries WWW-Authenticate, 429 and 503 Retry-After.
 *
 * A client that leaves is noticed by libmicrohttpd while its connection is
 * active, and by the pump (POLLRDHUP) while it is suspended; either way the
 * request-completed callback cancels whatever is still running.
 *
 * Routing goes through one table (ROUTES below): each route's method,
 * path, handler and the flags that say what it needs before its handler
 * runs. Replies are built in reply.c; the life cycle is in server.c.
 *
 * Slow clients: every socket must deliver a whole request within
 * --request-timeout of opening or of its previous reply ending (the pump
 * shuts down the late ones; bytes trickling in do not extend it), and each
 * client address may hold --max-conns-per-ip connections.
 */
#include <microhttpd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>

#include "core/err.h"
#include "core/timeutil.h"
#include "server/internal.h"

/* ---- routes ---- */

/* What a route needs before its handler runs. */
enum {
    ROUTE_OPEN = 1 << 0,  /* answered without the API key (health probes) */
    ROUTE_HEAD = 1 << 1,  /* HEAD is served as GET without the body */
    ROUTE_MODEL = 1 << 2, /* 503 until the model is loaded */
    ROUTE_JSON = 1 << 3,  /* the body is a JSON object, prescanned then parsed */
    ROUTE_TGI = 1 << 4,   /* errors in TGI's shape; a body that is no JSON object is a 422 */
    ROUTE_LIST = 1 << 5,  /* with ROUTE_JSON: the body may be a JSON array too */
    ROUTE_PAGE = 1 << 6,  /* the playground: a 404 with --no-playground */
};

struct route {
    const char *method;
    const char *path; /* matched whole; trailing slashes of the request are ignored */
    int flags;
    ifl_route_fn handler; /* body: the parsed object with ROUTE_JSON, else NULL */
};

static int handle_health(struct ifl_hconn *c, json_t *body);
static int handle_metrics(struct ifl_hconn *c, json_t *body);

/* clang-format off */
static const struct route ROUTES[] = {
    {"GET",  "/health",              ROUTE_OPEN | ROUTE_HEAD,         handle_health},
    {"GET",  "/metrics",             ROUTE_HEAD,                      handle_metrics},
    {"GET",  "/v1/models",           ROUTE_HEAD | ROUTE_MODEL,        ifl_oai_models},
    {"POST", "/v1/completions",      ROUTE_MODEL | ROUTE_JSON,        ifl_oai_completions},
    {"POST", "/v1/chat/completions", ROUTE_MODEL | ROUTE_JSON,        ifl_oai_chat},
    {"POST", "/generate",            ROUTE_MODEL | ROUTE_JSON | ROUTE_TGI, ifl_tgi_generate},
    {"POST", "/generate_stream",     ROUTE_MODEL | ROUTE_JSON | ROUTE_TGI, ifl_tgi_generate_stream},
    {"POST", "/tokenize",            ROUTE_MODEL | ROUTE_JSON | ROUTE_TGI, ifl_tgi_tokenize},
    {"POST", "/detokenize",          ROUTE_MODEL | ROUTE_JSON | ROUTE_TGI, ifl_tgi_detokenize},
    {"GET",  "/info",                ROUTE_HEAD | ROUTE_MODEL | ROUTE_TGI, ifl_tgi_info},
    /* llama-server's LoRA adapter list and global scales */
    {"GET",  "/lora-adapters",       ROUTE_HEAD | ROUTE_MODEL,        ifl_lora_list},
    {"POST", "/lora-adapters",       ROUTE_MODEL | ROUTE_JSON | ROUTE_LIST, ifl_lora_set_scales},
    /* TGI's compat routes (huggingface_hub's InferenceClient posts to the
     * base URL; SageMaker to /invocations): /generate or /generate_stream
     * as the body's "stream" says */
    {"POST", "/",                    ROUTE_MODEL | ROUTE_JSON | ROUTE_TGI, ifl_tgi_generate_any},
    {"POST", "/invocations",         ROUTE_MODEL | ROUTE_JSON | ROUTE_TGI, ifl_tgi_generate_any},
    /* the playground (web.c): open, since a browser's navigation carries
     * no key (its API calls do); /openapi.json lists the routes, so it
     * needs the key like them. src/server/web/openapi.json must describe
     * every route here (tests/test_playground.sh reads this table) */
    {"GET",  "/",                    ROUTE_OPEN | ROUTE_HEAD | ROUTE_PAGE, ifl_web_page},
    {"GET",  "/dashboard",           ROUTE_OPEN | ROUTE_HEAD | ROUTE_PAGE, ifl_web_page},
    {"GET",  "/app.js",              ROUTE_OPEN | ROUTE_HEAD | ROUTE_PAGE, ifl_web_file},
    {"GET",  "/app.css",             ROUTE_OPEN | ROUTE_HEAD | ROUTE_PAGE, ifl_web_file},
    {"GET",  "/openapi.json",        ROUTE_HEAD,                      ifl_web_file},
};
/* clang-format on */

static int path_is(const struct route *r, const char *url, size_t n)
{
    return strlen(r->path) == n && !strncmp(r->path, url, n);
}

/* With --no-playground the page's routes do not exist: a 404 (GET /),
 * and not listed in a 405's Allow (PUT / names POST alone). */
static int route_on(const struct ifl_server *s, const struct route *r)
{
    return !(r->flags & ROUTE_PAGE) || !s->cfg.no_playground;
}

/* The route of url for method (HEAD counts as GET where a route serves
 * it), else the path's first route (whose method then gets a 405), else
 * NULL. */
static const struct route *find_route(const struct ifl_server *s, const char *url,
                                      const char *method)
{
    size_t n = strlen(url);
    while (n > 1 && url[n - 1] == '/')
        n--; /* "/v1/models/" is "/v1/models" */
    const struct route *first = NULL;
    int off = 0; /* the method's route here is a page turned off */
    for (size_t i = 0; i < sizeof ROUTES / sizeof ROUTES[0]; i++) {
        const struct route *r = &ROUTES[i];
        if (!path_is(r, url, n))
            continue;
        int match =
            !strcmp(method, r->method) || ((r->flags & ROUTE_HEAD) && !strcmp(method, "HEAD"));
        if (!route_on(s, r)) {
            off |= match;
            continue;
        }
        if (match)
            return r;
        first = first ? first : r;
    }
    return off ? NULL : first;
}

static int reply_error(struct ifl_hconn *c, const struct route *rt, int status, const char *param,
                       const char *msg)
{
    if (rt && (rt->flags & ROUTE_TGI)) {
        const char *type = status == 422   ? "validation"
                           : status == 429 ? "overloaded"
                           : status == 503 ? "unavailable"
                                           : "request";
        return ifl_http_reply_tgi_error(c, status, type, msg);
    }
    return ifl_http_reply_oai_error(c, status, param, msg);
}

/* Paths never hold control characters. libmicrohttpd hands the handler a
 * NUL-terminated path after %-decoding, so "/v1/models%00" would read as
 * "/v1/models": unescape_path decodes, and a path that decodes to a control
 * byte becomes a lone DEL, which bad_path (like any raw control byte)
 * refuses with 400. */
static size_t unescape_path(void *cls, struct MHD_Connection *conn, char *str)
{
    (void)cls;
    (void)conn;
    size_t n = MHD_http_unescape(str);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)str[i];
        if (ch < 0x20 || ch == 0x7f) {
            str[0] = 0x7f; /* n >= 1: the string had room for two bytes */
            str[1] = 0;
            return 1;
        }
    }
    return n;
}

/* A raw NUL in the request line ends the path libmicrohttpd hands on, so
 * "GET /v1/models<NUL>x HTTP/1.1" would read as /v1/models. on_uri, called
 * with the raw request target before anything is decoded, notes where it
 * starts and how long it reads as a string; the HTTP version follows the
 * target's end in the same buffer (libmicrohttpd parses the request line in
 * place), so a target shorter as a string than that span held a NUL. */
static void *on_uri(void *cls, const char *uri, struct MHD_Connection *conn)
{
    (void)cls;
    (void)conn;
    struct ifl_hconn *c = calloc(1, sizeof(*c));
    if (c) {
        c->raw_uri = uri;
        c->raw_uri_len = strlen(uri);
    }
    return c;
}

static int raw_nul(const struct ifl_hconn *c, const char *version)
{
    /* pointers compared only, never read; no version (HTTP/0.9): no span */
    if (!c->raw_uri || !version || !*version || version <= c->raw_uri)
        return 0;
    return (size_t)(version - c->raw_uri) - 1 > c->raw_uri_len;
}

static int bad_path(const char *url)
{
    for (const unsigned char *p = (const unsigned char *)url; *p; p++)
        if (*p < 0x20 || *p == 0x7f)
            return 1;
    return 0;
}

static int key_ok(const struct ifl_server *s, struct MHD_Connection *conn)
{
    const char *h = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7))
        return 0;
    h += 7;
    while (*h == ' ')
        h++;
    size_t a = strlen(h), b = strlen(s->api_key);
    unsigned diff = a != b;
    for (size_t i = 0; i < b; i++)
        diff |= (unsigned)(unsigned char)s->api_key[i] ^ (unsigned)(unsigned char)h[i < a ? i : 0];
    return diff == 0;
}

static int handle_health(struct ifl_hconn *c, json_t *body)
{
    (void)body;
    int ready = atomic_load_explicit(&c->srv->ex, memory_order_acquire) != NULL;
    if (!ready) {
        /* the share of weight bytes loaded; 0.99 at most until the
         * executor is ready, so 1.0 never comes with a 503 */
        int64_t done = atomic_load_explicit(&c->srv->load_done, memory_order_relaxed);
        int64_t total = atomic_load_explicit(&c->srv->load_total, memory_order_relaxed);
        double f = total > 0 ? (double)done / (double)total : 0.0;
        char text[64];
        int n = snprintf(text, sizeof text, "{\"status\":\"loading\",\"progress\":%.2f}",
                         f < 0      ? 0.0
                         : f > 0.99 ? 0.99
                                    : f);
        return ifl_http_reply(c, 503, "application/json", text, (size_t)n);
    }
    return ifl_http_reply(c, 200, "application/json", "{\"status\":\"ok\"}", 15);
}

static int handle_metrics(struct ifl_hconn *c, json_t *body)
{
    (void)body;
    struct ifl_buf b = {0};
    ifl_server_metrics_render(c->srv, &b);
    if (b.oom) {
        ifl_buf_free(&b);
        return ifl_http_reply(c, 500, "text/plain", "out of memory\n", 14);
    }
    int rc =
        ifl_http_reply(c, 200, "text/plain; version=0.0.4; charset=utf-8", b.p ? b.p : "", b.len);
    ifl_buf_free(&b);
    return rc;
}
/* Runs the route's handler once the whole request is in. */
static int dispatch(struct ifl_hconn *c, const struct route *rt)
{
    struct ifl_server *s = c->srv;
    if ((rt->flags & ROUTE_MODEL) && !atomic_load_explicit(&s->ex, memory_order_acquire))
        return reply_error(c, rt, 503, NULL, "the model is still loading; retry shortly");
    if (!(rt->flags & ROUTE_JSON))
        return rt->handler(c, NULL);
    /* a prompt far beyond the context is refused before the body is parsed
     * (prescan.c) */
    char pparam[64] = "", pmsg[IFL_ERR_LEN] = "";
    int pst = ifl_prescan_prompt(s, rt->path, c->body.p, c->body.len, pparam, pmsg);
    if (pst)
        return reply_error(c, rt, pst, pparam, pmsg);
    const int bad_body = rt->flags & ROUTE_TGI ? 422 : 400;
    json_error_t je;
    json_t *body = json_loadb(c->body.p ? c->body.p : "", c->body.len, 0, &je);
    if (!body) {
        char msg[400];
        snprintf(msg, sizeof msg, "the body is not valid JSON: %s (line %d, column %d)", je.text,
                 je.line, je.column);
        return reply_error(c, rt, bad_body, NULL, msg);
    }
    if (!json_is_object(body) && !((rt->flags & ROUTE_LIST) && json_is_array(body))) {
        json_decref(body);
        return reply_error(c, rt, bad_body, NULL, "the body must be a JSON object");
    }
    int rc = rt->handler(c, body);
    json_decref(body);
    return rc;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload_data,
                                  size_t *upload_size, void **con_cls)
{
    struct ifl_server *s = cls;
    struct ifl_hconn *c = *con_cls;
    const struct route *rt = find_route(s, url, method);
    if (!c || !c->srv) { /* the first call (c may come from on_uri) */
        if (!c)
            c = calloc(1, sizeof(*c));
        if (!c)
            return MHD_NO;
        c->srv = s;
        c->conn = conn;
        c->method = method;
        c->url = url;
        c->t0_us = ifl_now_us();
        c->content_length = -1;
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
        c->fd = ci ? ci->connect_fd : -1;
        ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        c->sock = ci ? ci->socket_context : NULL;
        *con_cls = c;
        atomic_fetch_add_explicit(&s->in_flight, 1, memory_order_acq_rel);
        c->counted = 1;
        if (bad_path(url) || raw_nul(c, version))
            return (enum MHD_Result)ifl_http_reply_oai_error(
                c, 400, NULL, "the path holds a control character (raw or %-escaped)");
        /* a browser's preflight never carries the key: answered for any
         * path, so that it tells nothing about which routes exist */
        if (!strcmp(method, "OPTIONS") && s->cors_origin)
            return (enum MHD_Result)ifl_http_reply_preflight(c);
        /* the key before the route: without it every path answers the same
         * 401, so routes cannot be listed (/health stays open for probes) */
        if (s->api_key && !(rt && (rt->flags & ROUTE_OPEN)) && !key_ok(s, conn))
            return (enum MHD_Result)ifl_http_reply_oai_error(
                c, 401, NULL, "a valid API key is required (Authorization: Bearer KEY)");
        if (!rt)
            return (enum MHD_Result)ifl_http_reply_oai_error(
                c, 404, NULL, "no such route (docs/http.md lists them)");
        /* HEAD is GET without the body (libmicrohttpd leaves it out) */
        const int head = (rt->flags & ROUTE_HEAD) && !strcmp(method, "HEAD");
        if (strcmp(method, rt->method) && !head) {
            /* every method the path takes */
            char msg[160], allow[32] = "";
            size_t at = 0;
            for (size_t i = 0; i < sizeof ROUTES / sizeof ROUTES[0]; i++)
                if (!strcmp(ROUTES[i].path, rt->path) && route_on(s, &ROUTES[i]) &&
                    at < sizeof allow)
                    at += (size_t)snprintf(allow + at, sizeof allow - at, "%s%s%s", at ? ", " : "",
                                           ROUTES[i].method,
                                           ROUTES[i].flags & ROUTE_HEAD ? ", HEAD" : "");
            snprintf(msg, sizeof msg, "%s is not allowed on %s (use %s)", method, rt->path, allow);
            return (enum MHD_Result)ifl_http_reply_not_allowed(c, allow, msg);
        }
        if (atomic_load_explicit(&s->draining, memory_order_relaxed))
            return (enum MHD_Result)reply_error(c, rt, 503, NULL, "the server is shutting down");
        const char *cl =
            MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl) {
            char *end;
            long long v = strtoll(cl, &end, 10);
            if (*end == 0 && v >= 0)
                c->content_length = v;
        }
        if (c->content_length > s->cfg.max_body_bytes) {
            char msg[160];
            snprintf(msg, sizeof msg, "the body (%lld bytes) exceeds the limit of %lld bytes",
                     (long long)c->content_length, (long long)s->cfg.max_body_bytes);
            return (enum MHD_Result)reply_error(c, rt, 413, NULL, msg);
        }
        return MHD_YES;
    }
    if (c->done)
        return (enum MHD_Result)ifl_http_await_whole(c); /* resumed */
    if (*upload_size) {
        if (!c->too_large && c->body.len + *upload_size > (size_t)s->cfg.max_body_bytes) {
            c->too_large = 1;
            ifl_buf_free(&c->body);
        }
        if (!c->too_large && !c->body.p && c->content_length > 0) {
            /* the declared size (within the limit) at once: growing a 30 MB
             * body by doubling takes longer than everything else it needs */
            c->body.p = malloc((size_t)c->content_length + 1);
            c->body.cap = c->body.p ? (size_t)c->content_length + 1 : 0;
        }
        if (!c->too_large)
            ifl_buf_add(&c->body, upload_data, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    ifl_pump_sock_deadline(c->sock, 0); /* the whole request is in */
    if (c->status)
        return MHD_YES; /* already answered (an error before the body) */
    if (c->too_large) {
        char msg[120];
        snprintf(msg, sizeof msg, "the body exceeds the limit of %lld bytes",
                 (long long)s->cfg.max_body_bytes);
        return (enum MHD_Result)reply_error(c, rt, 413, NULL, msg);
    }
    if (c->body.oom)
        return (enum MHD_Result)reply_error(c, rt, 500, NULL, "out of memory");
    enum MHD_Result rc = (enum MHD_Result)dispatch(c, rt);
    if (rc == MHD_YES && c->done)
        return (enum MHD_Result)ifl_http_await_whole(c);
    return rc;
}
static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)conn;
    struct ifl_server *s = cls;
    struct ifl_hconn *c = *con_cls;
    if (!c)
        return;
    *con_cls = NULL;
    if (!c->srv) { /* from on_uri; the request never reached the handler */
        free(c);
        return;
    }
    struct ifl_gen_job *job = c->stream ? c->stream->job : c->job;
    if (job && !job->finished)
        ifl_gen_cancel(job, toe != MHD_REQUEST_TERMINATED_COMPLETED_OK);
    ifl_server_log_access(s, c);
    if (c->stream) {
        ifl_gen_job_free(c->stream->job);
        ifl_stream_free(c->stream);
    } else {
        ifl_gen_job_free(c->job);
    }
    if (c->done_free)
        c->done_free(c->done_user);
    /* a kept-alive connection has as long for its next request */
    ifl_pump_sock_deadline(c->sock, ifl_now_us() + (int64_t)s->cfg.request_timeout_s * 1000000);
    ifl_buf_free(&c->body);
    if (c->counted)
        atomic_fetch_sub_explicit(&s->in_flight, 1, memory_order_acq_rel);
    free(c);
}

static void on_connection(void *cls, struct MHD_Connection *conn, void **socket_context,
                          enum MHD_ConnectionNotificationCode toe)
{
    struct ifl_server *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED)
        ifl_pump_sock_open(s, conn, socket_context);
    else
        ifl_pump_sock_close(s, socket_context);
}
/* ---- the daemon ---- */

/* How long a reply may wait on a client that takes none of it (at least
 * the request timeout, which this idle timeout must not cut short). */
#define IDLE_TIMEOUT_S 60

/* Connections in all: what the descriptor limit allows, less a reserve for
 * the model file, logs and libmicrohttpd's own descriptors. */
static unsigned conn_limit(const struct ifl_server_config *cfg)
{
    if (cfg->max_conns > 0)
        return (unsigned)cfg->max_conns;
    struct rlimit rl;
    rlim_t n = 1024;
    if (!getrlimit(RLIMIT_NOFILE, &rl))
        n = rl.rlim_cur;
    if (n == RLIM_INFINITY || n > (1 << 20))
        n = 1 << 20;
    return n > 128 ? (unsigned)(n - 64) : 64;
}

/* libmicrohttpd's own messages: at debug, since nearly all are clients
 * that left ("Closing connection (application error generating
 * response)"), in the server's log format. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[512];
    vsnprintf(msg, sizeof msg, fmt, ap);
    ifl_server_log(cls, IFL_SERVER_LOG_DEBUG, "libmicrohttpd: %s", msg);
}
int ifl_http_start(struct ifl_server *s, int lfd, char *err)
{
    /* a pool of epoll threads; handlers suspend rather than block */
    unsigned flags =
        MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ITC | MHD_USE_ERROR_LOG;
    struct sockaddr_storage sa;
    socklen_t sl = sizeof sa;
    if (getsockname(lfd, (struct sockaddr *)&sa, &sl) == 0 && sa.ss_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    unsigned idle_s = IDLE_TIMEOUT_S;
    if (s->cfg.request_timeout_s > IDLE_TIMEOUT_S)
        idle_s = (unsigned)s->cfg.request_timeout_s;
    /* first: the logger takes libmicrohttpd's messages from the start */
    struct MHD_OptionItem opts[] = {
        {MHD_OPTION_EXTERNAL_LOGGER, (intptr_t)mhd_log, s},
        {MHD_OPTION_UNESCAPE_CALLBACK, (intptr_t)unescape_path, NULL},
        {MHD_OPTION_URI_LOG_CALLBACK, (intptr_t)on_uri, NULL},
        {MHD_OPTION_LISTEN_SOCKET, lfd, NULL},
        {MHD_OPTION_END, 0, NULL},
    };
    s->mhd = MHD_start_daemon(
        flags, (uint16_t)s->cfg.port, NULL, NULL, on_request, s, MHD_OPTION_ARRAY, opts,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_NOTIFY_CONNECTION, on_connection,
        s, MHD_OPTION_THREAD_POOL_SIZE, (unsigned)s->cfg.http_threads,
        /* idle time while libmicrohttpd itself waits on the socket (a reply
         * the client does not take); the receive deadline is the pump's and
         * suspended connections have none */
        MHD_OPTION_CONNECTION_TIMEOUT, idle_s, MHD_OPTION_CONNECTION_LIMIT, conn_limit(&s->cfg),
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)s->cfg.max_conns_per_ip, MHD_OPTION_END);
    if (!s->mhd)
        return ifl_err(err, IFL_EIO, "cannot serve on %s:%d (libmicrohttpd did not start)", s->host,
                       s->cfg.port);
    return 0;
}
