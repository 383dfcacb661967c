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
 * Slow clients: every socket must deliver a whole request within
 * --request-timeout of opening or of its previous reply ending (the pump
 * shuts down the late ones; bytes trickling in do not extend it), and each
 * client address may hold --max-conns-per-ip connections.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "core/err.h"
#include "core/timeutil.h"
#include "server/internal.h"

/* ---- byte buffer ---- */

void ifl_sbuf_add(struct ifl_sbuf *b, const void *data, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = 0;
}

void ifl_sbuf_addf(struct ifl_sbuf *b, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof small) {
        ifl_sbuf_add(b, small, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->oom = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    ifl_sbuf_add(b, big, (size_t)n);
    free(big);
}

void ifl_sbuf_free(struct ifl_sbuf *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}

/* ---- ids ---- */

void ifl_server_make_id(struct ifl_server *s, const char *prefix, char *out, size_t cap)
{
    uint64_t n = atomic_fetch_add_explicit(&s->next_id, 1, memory_order_relaxed);
    /* splitmix64 of the counter under a per-process salt: unique, unguessable enough */
    uint64_t z = s->id_salt + n * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    snprintf(out, cap, "%s-%016llx%08llx", prefix, (unsigned long long)z,
             (unsigned long long)(n & 0xffffffffu));
}

/* ---- replies ---- */

static void add_common_headers(struct ifl_hconn *c, struct MHD_Response *r, const char *type)
{
    if (type)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (c->srv->cors_origin) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", c->srv->cors_origin);
        if (strcmp(c->srv->cors_origin, "*"))
            MHD_add_response_header(r, "Vary", "Origin");
    }
}

/* The headers a status asks for: a challenge with every 401 (RFC 9110
 * 11.6.1), and with 429 and 503 when to come back, in seconds. */
static void add_status_headers(struct ifl_hconn *c, struct MHD_Response *r, int status)
{
    if (status == 401)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (status == 429 || status == 503) {
        char v[16];
        snprintf(v, sizeof v, "%d", ifl_server_retry_after(c->srv));
        MHD_add_response_header(r, MHD_HTTP_HEADER_RETRY_AFTER, v);
    }
}

int ifl_http_reply(struct ifl_hconn *c, int status, const char *type, const char *body, size_t n)
{
    struct MHD_Response *r =
        MHD_create_response_from_buffer(n, (void *)(uintptr_t)body, MHD_RESPMEM_MUST_COPY);
    if (!r)
        return MHD_NO;
    add_common_headers(c, r, type);
    add_status_headers(c, r, status);
    enum MHD_Result rc = MHD_queue_response(c->conn, (unsigned)status, r);
    MHD_destroy_response(r);
    c->status = status;
    ifl_server_metrics_http(c->srv, status);
    return rc;
}

int ifl_http_reply_json(struct ifl_hconn *c, int status, json_t *j)
{
    char *s = j ? json_dumps(j, JSON_COMPACT) : NULL;
    json_decref(j);
    if (!s)
        return ifl_http_reply(c, 500, "application/json",
                              "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                              "\"param\":null,\"code\":null}}",
                              91);
    int rc = ifl_http_reply(c, status, "application/json", s, strlen(s));
    free(s);
    return rc;
}

static const char *oai_type(int status)
{
    switch (status) {
    case 401:
        return "authentication_error";
    case 404:
        return "not_found_error";
    case 429:
        return "rate_limit_error";
    case 500:
        return "server_error";
    case 503:
        return "service_unavailable";
    default:
        return "invalid_request_error";
    }
}

int ifl_http_reply_oai_error(struct ifl_hconn *c, int status, const char *param, const char *msg)
{
    json_t *e = json_object();
    json_object_set_new(e, "message", ifl_json_text(msg, strlen(msg)));
    json_object_set_new(e, "type", json_string(oai_type(status)));
    json_object_set_new(e, "param", param && *param ? json_string(param) : json_null());
    const char *code = NULL;
    if (status == 404)
        code = "not_found";
    else if (status == 401)
        code = "invalid_api_key";
    else if (status == 413)
        code = "request_too_large";
    else if (status == 429)
        code = "queue_full";
    json_object_set_new(e, "code", code ? json_string(code) : json_null());
    json_t *j = json_object();
    json_object_set_new(j, "error", e);
    return ifl_http_reply_json(c, status, j);
}

int ifl_http_reply_tgi_error(struct ifl_hconn *c, int status, const char *type, const char *msg)
{
    json_t *j = json_object();
    json_object_set_new(j, "error", ifl_json_text(msg, strlen(msg)));
    json_object_set_new(j, "error_type", json_string(type));
    return ifl_http_reply_json(c, status, j);
}

/* The content reader of a streamed reply: hand out what is rendered, else
 * fold what the pump queued, else suspend until it queues more (returning
 * 0 without suspending would have libmicrohttpd call again at once). */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct ifl_hconn *c = cls;
    struct ifl_stream *st = c->stream;
    for (;;) {
        if (st->off < st->out.len) {
            size_t n = st->out.len - st->off;
            if (n > max)
                n = max;
            memcpy(buf, st->out.p + st->off, n);
            st->off += n;
            if (st->off == st->out.len) {
                st->off = 0;
                st->out.len = 0;
            }
            return (ssize_t)n;
        }
        if (st->ended)
            return MHD_CONTENT_READER_END_OF_STREAM;
        if (st->out.oom)
            return MHD_CONTENT_READER_END_WITH_ERROR;
        if (atomic_load_explicit(&c->gone, memory_order_relaxed)) {
            ifl_gen_cancel(st->job, 1);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (atomic_load_explicit(&c->srv->aborting, memory_order_relaxed))
            ifl_gen_abort(st->job); /* its cancelled finals end the stream */
        if (ifl_gen_poll(st->job, st->on_resp, st->user)) {
            st->on_end(st);
            st->ended = 1;
            continue;
        }
        if (st->out.len)
            continue;
        int w = ifl_pump_suspend(c, st->job);
        if (w > 0)
            return 0;
        if (w < 0) { /* shutdown ran out of time */
            ifl_gen_cancel(st->job, 0);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
}

int ifl_http_reply_stream(struct ifl_hconn *c, struct ifl_stream *st)
{
    c->stream = st;
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, c, NULL);
    if (!r)
        return MHD_NO;
    add_common_headers(c, r, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(r, "X-Accel-Buffering", "no");
    enum MHD_Result rc = MHD_queue_response(c->conn, 200, r);
    MHD_destroy_response(r);
    c->status = 200;
    ifl_server_metrics_http(c->srv, 200);
    return rc;
}

int ifl_http_reply_when_done(struct ifl_hconn *c, struct ifl_gen_job *j, ifl_http_done_fn done,
                             void *user, void (*free_user)(void *))
{
    c->job = j;
    c->done = done;
    c->done_user = user;
    c->done_free = free_user;
    return MHD_YES; /* on_request goes on with await_whole */
}

/* A whole reply's wait, on every call of the handler until the job ends. */
static enum MHD_Result await_whole(struct ifl_hconn *c)
{
    struct ifl_gen_job *j = c->job;
    for (;;) {
        if (atomic_load_explicit(&c->gone, memory_order_relaxed)) {
            ifl_gen_cancel(j, 1);
            return MHD_NO; /* the client is gone: close without a reply */
        }
        if (atomic_load_explicit(&c->srv->aborting, memory_order_relaxed))
            ifl_gen_abort(j); /* its cancelled finals end it */
        if (ifl_gen_poll(j, NULL, NULL)) {
            ifl_http_done_fn done = c->done;
            c->done = NULL;
            return (enum MHD_Result)done(c, j, c->done_user);
        }
        int w = ifl_pump_suspend(c, j);
        if (w > 0)
            return MHD_YES;
        if (w < 0) { /* shutdown ran out of time */
            ifl_gen_cancel(j, 0);
            return MHD_NO;
        }
    }
}

void ifl_stream_free(struct ifl_stream *st)
{
    if (!st)
        return;
    if (st->free_user)
        st->free_user(st->user);
    ifl_sbuf_free(&st->out);
    free(st);
}

/* ---- routes ---- */

enum route_kind { R_OAI, R_TGI, R_PLAIN };

struct route {
    const char *path;
    const char *method;
    int kind;
    int needs_model;
};

static const struct route ROUTES[] = {
    {"/health", "GET", R_PLAIN, 0},
    {"/metrics", "GET", R_PLAIN, 0},
    {"/v1/models", "GET", R_OAI, 1},
    {"/v1/completions", "POST", R_OAI, 1},
    {"/v1/chat/completions", "POST", R_OAI, 1},
    {"/generate", "POST", R_TGI, 1},
    {"/generate_stream", "POST", R_TGI, 1},
    {"/tokenize", "POST", R_TGI, 1},
    {"/detokenize", "POST", R_TGI, 1},
    {"/info", "GET", R_TGI, 1},
    /* TGI's compat routes (huggingface_hub's InferenceClient posts to the
     * base URL; SageMaker to /invocations): /generate or /generate_stream
     * as the body's "stream" says */
    {"/", "POST", R_TGI, 1},
    {"/invocations", "POST", R_TGI, 1},
};

static const struct route *find_route(const char *url)
{
    size_t n = strlen(url);
    while (n > 1 && url[n - 1] == '/')
        n--; /* "/v1/models/" is "/v1/models" */
    for (size_t i = 0; i < sizeof ROUTES / sizeof ROUTES[0]; i++)
        if (strlen(ROUTES[i].path) == n && !strncmp(ROUTES[i].path, url, n))
            return &ROUTES[i];
    return NULL;
}

static int reply_error(struct ifl_hconn *c, const struct route *rt, int status, const char *param,
                       const char *msg)
{
    if (rt && rt->kind == R_TGI) {
        const char *type = status == 422 ? "validation"
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

static int handle_health(struct ifl_hconn *c)
{
    int ready = atomic_load_explicit(&c->srv->ex, memory_order_acquire) != NULL;
    if (!ready) {
        /* the share of weight bytes loaded; 0.99 at most until the
         * executor is ready, so 1.0 never comes with a 503 */
        int64_t done = atomic_load_explicit(&c->srv->load_done, memory_order_relaxed);
        int64_t total = atomic_load_explicit(&c->srv->load_total, memory_order_relaxed);
        double f = total > 0 ? (double)done / (double)total : 0.0;
        char body[64];
        int n = snprintf(body, sizeof body, "{\"status\":\"loading\",\"progress\":%.2f}",
                         f < 0 ? 0.0 : f > 0.99 ? 0.99 : f);
        return ifl_http_reply(c, 503, "application/json", body, (size_t)n);
    }
    return ifl_http_reply(c, 200, "application/json", "{\"status\":\"ok\"}", 15);
}

static int handle_metrics(struct ifl_hconn *c)
{
    struct ifl_sbuf b = {0};
    ifl_server_metrics_render(c->srv, &b);
    if (b.oom) {
        ifl_sbuf_free(&b);
        return ifl_http_reply(c, 500, "text/plain", "out of memory\n", 14);
    }
    int rc = ifl_http_reply(c, 200, "text/plain; version=0.0.4; charset=utf-8", b.p ? b.p : "",
                            b.len);
    ifl_sbuf_free(&b);
    return rc;
}

static int dispatch(struct ifl_hconn *c, const struct route *rt)
{
    struct ifl_server *s = c->srv;
    if (!strcmp(rt->path, "/health"))
        return handle_health(c);
    if (!strcmp(rt->path, "/metrics"))
        return handle_metrics(c);
    if (rt->needs_model && !atomic_load_explicit(&s->ex, memory_order_acquire))
        return reply_error(c, rt, 503, NULL, "the model is still loading; retry shortly");
    if (!strcmp(rt->path, "/v1/models"))
        return ifl_oai_models(c);
    if (!strcmp(rt->path, "/info"))
        return ifl_tgi_info(c);
    /* POST routes: a JSON object body; a prompt far beyond the context is
     * refused before it is parsed (prescan.c) */
    char pparam[64] = "", pmsg[IFL_ERR_LEN] = "";
    int pst = ifl_prescan_prompt(s, rt->path, c->body.p, c->body.len, pparam, pmsg);
    if (pst)
        return reply_error(c, rt, pst, pparam, pmsg);
    json_error_t je;
    json_t *body = json_loadb(c->body.p ? c->body.p : "", c->body.len, 0, &je);
    if (!body) {
        char msg[400];
        snprintf(msg, sizeof msg, "the body is not valid JSON: %s (line %d, column %d)", je.text,
                 je.line, je.column);
        return reply_error(c, rt, rt->kind == R_TGI ? 422 : 400, NULL, msg);
    }
    if (!json_is_object(body)) {
        json_decref(body);
        return reply_error(c, rt, rt->kind == R_TGI ? 422 : 400, NULL,
                           "the body must be a JSON object");
    }
    int rc;
    if (!strcmp(rt->path, "/v1/completions"))
        rc = ifl_oai_completions(c, body);
    else if (!strcmp(rt->path, "/v1/chat/completions"))
        rc = ifl_oai_chat(c, body);
    else if (!strcmp(rt->path, "/generate"))
        rc = ifl_tgi_generate(c, body, 0);
    else if (!strcmp(rt->path, "/generate_stream"))
        rc = ifl_tgi_generate(c, body, 1);
    else if (!strcmp(rt->path, "/") || !strcmp(rt->path, "/invocations")) {
        json_t *st = json_object_get(body, "stream");
        if (st && !json_is_null(st) && !json_is_boolean(st))
            rc = reply_error(c, rt, 422, NULL, "`stream` must be a boolean");
        else
            rc = ifl_tgi_generate(c, body, json_is_true(st));
    } else if (!strcmp(rt->path, "/tokenize"))
        rc = ifl_tgi_tokenize(c, body);
    else
        rc = ifl_tgi_detokenize(c, body);
    json_decref(body);
    return rc;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_size, void **con_cls)
{
    struct ifl_server *s = cls;
    struct ifl_hconn *c = *con_cls;
    const struct route *rt = find_route(url);
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
        if (!strcmp(method, "OPTIONS") && s->cors_origin) {
            struct MHD_Response *r =
                MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
            if (!r)
                return MHD_NO;
            add_common_headers(c, r, NULL);
            MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, HEAD, POST, OPTIONS");
            MHD_add_response_header(r, "Access-Control-Allow-Headers",
                                    "Authorization, Content-Type");
            MHD_add_response_header(r, "Access-Control-Max-Age", "600");
            enum MHD_Result rc = MHD_queue_response(conn, 204, r);
            MHD_destroy_response(r);
            c->status = 204;
            return rc;
        }
        /* the key before the route: without it every path answers the same
         * 401, so routes cannot be listed (/health stays open for probes) */
        if (s->api_key && !(rt && !strcmp(rt->path, "/health")) && !key_ok(s, conn))
            return (enum MHD_Result)ifl_http_reply_oai_error(
                c, 401, NULL, "a valid API key is required (Authorization: Bearer KEY)");
        if (!rt)
            return (enum MHD_Result)ifl_http_reply_oai_error(
                c, 404, NULL, "no such route (docs/http.md lists them)");
        /* HEAD is GET without the body (libmicrohttpd leaves it out) */
        const int is_get = !strcmp(rt->method, "GET");
        if (strcmp(method, rt->method) && !(is_get && !strcmp(method, "HEAD"))) {
            char msg[160];
            snprintf(msg, sizeof msg, "%s is not allowed on %s (use %s)", method, rt->path,
                     is_get ? "GET or HEAD" : rt->method);
            struct MHD_Response *r = NULL;
            json_t *j = json_object(), *e = json_object();
            json_object_set_new(e, "message", ifl_json_text(msg, strlen(msg)));
            json_object_set_new(e, "type", json_string("invalid_request_error"));
            json_object_set_new(e, "param", json_null());
            json_object_set_new(e, "code", json_string("method_not_allowed"));
            json_object_set_new(j, "error", e);
            char *txt = json_dumps(j, JSON_COMPACT);
            json_decref(j);
            if (txt)
                r = MHD_create_response_from_buffer(strlen(txt), txt, MHD_RESPMEM_MUST_FREE);
            if (!r) {
                free(txt);
                return MHD_NO;
            }
            add_common_headers(c, r, "application/json");
            MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, is_get ? "GET, HEAD" : rt->method);
            enum MHD_Result rc = MHD_queue_response(conn, 405, r);
            MHD_destroy_response(r);
            c->status = 405;
            ifl_server_metrics_http(s, 405);
            return rc;
        }
        if (atomic_load_explicit(&s->draining, memory_order_relaxed))
            return (enum MHD_Result)reply_error(c, rt, 503, NULL, "the server is shutting down");
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
                                                     MHD_HTTP_HEADER_CONTENT_LENGTH);
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
        return await_whole(c); /* resumed */
    if (*upload_size) {
        if (!c->too_large && c->body.len + *upload_size > (size_t)s->cfg.max_body_bytes) {
            c->too_large = 1;
            ifl_sbuf_free(&c->body);
        }
        if (!c->too_large && !c->body.p && c->content_length > 0) {
            /* the declared size (within the limit) at once: growing a 30 MB
             * body by doubling takes longer than everything else it needs */
            c->body.p = malloc((size_t)c->content_length + 1);
            c->body.cap = c->body.p ? (size_t)c->content_length + 1 : 0;
        }
        if (!c->too_large)
            ifl_sbuf_add(&c->body, upload_data, *upload_size);
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
        return await_whole(c);
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
    ifl_sbuf_free(&c->body);
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

/* ---- life cycle ---- */

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

/* The listening socket, made here so that a failure names the address and
 * the reason. SO_REUSEADDR lets a restart bind while the last run's
 * connections sit in TIME_WAIT; SO_REUSEPORT, which lets a second server
 * take a share of the port's connections without a word, only when asked. */
static int open_listener(struct ifl_server *s, const struct addrinfo *ai, int *out, char *err)
{
    char addr[300];
    snprintf(addr, sizeof addr, strchr(s->host, ':') ? "[%s]:%d" : "%s:%d", s->host,
             s->cfg.port);
    int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK,
                    ai->ai_protocol);
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

    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM,
                             .ai_flags = AI_PASSIVE};
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
    /* a pool of epoll threads; handlers suspend rather than block */
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ITC |
                     MHD_USE_ERROR_LOG;
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
        flags, (uint16_t)cfg->port, NULL, NULL, on_request, s, MHD_OPTION_ARRAY, opts,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_NOTIFY_CONNECTION, on_connection,
        s, MHD_OPTION_THREAD_POOL_SIZE, (unsigned)s->cfg.http_threads,
        /* idle time while libmicrohttpd itself waits on the socket (a reply
         * the client does not take); the receive deadline is the pump's and
         * suspended connections have none */
        MHD_OPTION_CONNECTION_TIMEOUT, idle_s, MHD_OPTION_CONNECTION_LIMIT, conn_limit(&s->cfg),
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)s->cfg.max_conns_per_ip, MHD_OPTION_END);
    if (!s->mhd) {
        /* lfd is not closed here: libmicrohttpd may have closed it already,
         * and a second close could hit a descriptor reused meanwhile */
        ifl_err(err, IFL_EIO, "cannot serve on %s:%d (libmicrohttpd did not start)", s->host,
                cfg->port);
        ifl_server_free(s);
        return IFL_EIO;
    }
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
