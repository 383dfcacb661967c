/*
 * The HTTP server: the executor behind OpenAI- and TGI-compatible routes.
 *
 * Life cycle, as `inflight serve` drives it:
 *   ifl_server_create   binds and starts listening at once (/health: 503)
 *   ifl_server_load     loads the model into an executor (/health: 200)
 *   ifl_server_shutdown stops accepting, lets requests in flight finish
 *                       for up to grace_ms, cancels the rest, stops
 *   ifl_server_free     frees everything (NULL is fine)
 *
 * Threads: libmicrohttpd's pool of http_threads threads (epoll) serves every
 * connection; a handler parses and enqueues, then suspends its connection,
 * and one pump thread hands the executor's responses to their connections
 * and resumes them (docs/http.md lists the routes and the limits).
 */
#ifndef IFL_SERVER_SERVER_H
#define IFL_SERVER_SERVER_H

#include <stdint.h>

#include "inflight.h"

enum ifl_server_log_format { IFL_SERVER_LOG_TEXT = 0, IFL_SERVER_LOG_JSON = 1 };
/* Messages below the configured level are not written. */
enum ifl_server_log_level { IFL_SERVER_LOG_INFO = 0, IFL_SERVER_LOG_DEBUG = -1 };

struct ifl_server_config {
    const char *host; /* address to bind (default "127.0.0.1") */
    int port;         /* 0: an ephemeral port (see ifl_server_port) */
    const char *model_path;
    struct ifl_executor_config exec;
    const char *api_key;           /* NULL: no authentication */
    const char *cors_origin;       /* NULL: no CORS headers */
    const char *chat_template;     /* template text (not a path); NULL: the model's or ChatML */
    const char *served_model_name; /* NULL: the model file's base name; else a comma-separated
                                      list: the first is the name responses and /metrics use,
                                      the others are aliases clients may send as `model` */
    int strict_model_name;         /* 1: a `model` naming none of them is a 404 (vLLM's way);
                                      0: any `model` value selects the one served model */
    int log_format;                /* enum ifl_server_log_format */
    int64_t max_body_bytes;        /* request bodies above this get 413 (default 4 MiB) */
    int quiet;                     /* 1: no access log */
    int request_timeout_s;         /* a connection delivers each request's headers and body
                                      within this many seconds of opening or of its last reply
                                      ending, else it is closed (default 10) */
    int max_conns_per_ip;          /* open connections per client address (default 256) */
    int max_conns;                 /* open connections in all (0: from RLIMIT_NOFILE) */
    int http_threads;              /* libmicrohttpd's pool threads (default 4) */
    int log_level;                 /* enum ifl_server_log_level (default info) */
    int reuse_port;                /* 1: SO_REUSEPORT, so replicas may share the port */
    int no_playground;             /* 1: / and /dashboard (and the page's files) are 404 */
    /* optional: run by ifl_server_load on the new executor before the
     * server answers with it (the command line loads its LoRA adapters);
     * a status other than 0 fails the load with err (IFL_ERR_LEN) */
    int (*on_load)(void *user, ifl_executor *ex, char *err);
    void *on_load_user;
    /* remote images (docs/http.md "Images"): an http(s) URL starting with
     * one of the n_image_url_allow prefixes is fetched with fetch_image;
     * any other remote URL is refused (400). The strings are kept by the
     * caller for the server's life. fetch_image (NULL: no remote images)
     * fills *out (malloc'd) and *n with at most max_bytes bytes, or
     * returns a status with err (IFL_ERR_LEN) saying why; it may block
     * (an HTTP pool thread waits for it). */
    const char *const *image_url_allow;
    int n_image_url_allow;
    int (*fetch_image)(void *user, const char *url, size_t max_bytes, unsigned char **out,
                       size_t *n, char *err);
    void *fetch_image_user;
};

struct ifl_server;

/* Binds host:port and starts serving; every route but /health answers 503
 * until ifl_server_load succeeds. err (IFL_ERR_LEN bytes) gets a sentence.
 * IFL_EINVAL: the host does not resolve; IFL_EIO: the address cannot be
 * listened on (err names it and says why, e.g. "address already in use":
 * without reuse_port a port already served is never shared). */
int ifl_server_create(struct ifl_server **out, const struct ifl_server_config *cfg, char *err);
/* The port actually bound. */
int ifl_server_port(const struct ifl_server *s);
/* Loads the model (blocking). */
int ifl_server_load(struct ifl_server *s, char *err);
/* Stops accepting, waits up to grace_ms for requests in flight, cancels
 * what is left, stops the HTTP threads, the pump and the executor. */
void ifl_server_shutdown(struct ifl_server *s, int64_t grace_ms);
/* Cuts a running ifl_server_shutdown's grace short: what is left is
 * cancelled now and answered with its abort ending. Safe from any thread,
 * before or during the shutdown. */
void ifl_server_abort(struct ifl_server *s);
void ifl_server_free(struct ifl_server *s);
/* The executor's stats (ifl_get_iteration_stats); IFL_ESTATE before the
 * model is loaded. */
int ifl_server_iteration_stats(struct ifl_server *s, struct ifl_iteration_stats *out);

#endif
