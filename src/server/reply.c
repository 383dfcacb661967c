/*
 * Replies and streams: every HTTP answer the server sends is built here,
 * with the headers each status asks for (CORS, WWW-Authenticate on 401,
 * Retry-After on 429 and 503), in the OpenAI or TGI error shape, as a whole
 * reply once a job ends, or as a stream of Server-Sent Events.
 *
 * A streamed reply's content reader and a whole reply's wait both fold what
 * the pump queued for the job and suspend the connection when nothing is
 * there; both run on the connection's pool thread, inside libmicrohttpd's
 * callbacks, and never block.
 */
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/internal.h"

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
    return MHD_YES; /* on_request goes on with ifl_http_await_whole */
}

/* A whole reply's wait, on every call of the handler until the job ends. */
int ifl_http_await_whole(struct ifl_hconn *c)
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
            return done(c, j, c->done_user);
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
    ifl_buf_free(&st->out);
    free(st);
}

/* The playground's Content-Security-Policy: its own script and style sheet
 * only (no inline code, so text that reached the page's DOM can never run),
 * and fetches to this server or, for the page's API base URL setting, to
 * another one. */
#define PAGE_CSP                                                                                   \
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "              \
    "connect-src 'self' http: https:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

int ifl_http_reply_asset(struct ifl_hconn *c, const char *type, const void *data, size_t n,
                         const char *etag, int not_modified)
{
    const int status = not_modified ? 304 : 200;
    struct MHD_Response *r = MHD_create_response_from_buffer(
        not_modified ? 0 : n, (void *)(uintptr_t)data, MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    add_common_headers(c, r, not_modified ? NULL : type);
    MHD_add_response_header(r, MHD_HTTP_HEADER_ETAG, etag);
    /* revalidate on every load: after an upgrade the ETag differs and the
     * new file comes at once; otherwise the 304 costs no body */
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    MHD_add_response_header(r, "Content-Security-Policy", PAGE_CSP);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    enum MHD_Result rc = MHD_queue_response(c->conn, (unsigned)status, r);
    MHD_destroy_response(r);
    c->status = status;
    ifl_server_metrics_http(c->srv, status);
    return rc;
}

/* ---- replies before routing ---- */

int ifl_http_reply_preflight(struct ifl_hconn *c)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r)
        return MHD_NO;
    add_common_headers(c, r, NULL);
    MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, HEAD, POST, OPTIONS");
    MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type");
    MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    enum MHD_Result rc = MHD_queue_response(c->conn, 204, r);
    MHD_destroy_response(r);
    c->status = 204;
    return rc;
}

int ifl_http_reply_not_allowed(struct ifl_hconn *c, const char *allow, const char *msg)
{
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
    MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    enum MHD_Result rc = MHD_queue_response(c->conn, 405, r);
    MHD_destroy_response(r);
    c->status = 405;
    ifl_server_metrics_http(c->srv, 405);
    return rc;
}

/* ---- Server-Sent Events ---- */

void ifl_sse_event(struct ifl_buf *out, const char *prefix, json_t *o)
{
    char *t = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!t) {
        out->oom = 1;
        return;
    }
    ifl_buf_add(out, prefix, strlen(prefix));
    ifl_buf_add(out, t, strlen(t));
    ifl_buf_add(out, "\n\n", 2);
    free(t);
}
