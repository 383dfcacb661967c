/*
 * The server's log on stderr: one line per event, in the --log-format
 * (text: "TIME LEVEL message"; json: {"time", "level", ...}), below the
 * --log-level nothing. The access log writes a line per finished request;
 * health probes are at debug, so a load balancer polling /health does not
 * fill the log at the default level. libmicrohttpd's own messages come here
 * too (at debug: they are mostly clients that left).
 *
 * Each line is formatted whole and written with one fprintf, so lines from
 * connection threads do not interleave (stdio locks the stream per call).
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/timeutil.h"
#include "server/internal.h"

static void now_text(char *ts, size_t cap)
{
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(ts, cap, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

static const char *level_name(int level, int upper)
{
    if (level <= IFL_SERVER_LOG_DEBUG)
        return upper ? "DEBUG" : "debug";
    return upper ? "INFO" : "info";
}

void ifl_server_log(struct ifl_server *s, int level, const char *fmt, ...)
{
    if (level < s->cfg.log_level)
        return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    size_t n = strlen(msg);
    while (n && (msg[n - 1] == '\n' || msg[n - 1] == '\r'))
        msg[--n] = 0; /* libmicrohttpd ends its messages with a newline */
    char ts[32];
    now_text(ts, sizeof ts);
    if (s->cfg.log_format == IFL_SERVER_LOG_JSON) {
        json_t *j = json_object();
        json_object_set_new(j, "time", json_string(ts));
        json_object_set_new(j, "level", json_string(level_name(level, 0)));
        json_object_set_new(j, "msg", ifl_json_text(msg, n));
        char *t = json_dumps(j, JSON_COMPACT);
        if (t)
            fprintf(stderr, "%s\n", t);
        free(t);
        json_decref(j);
    } else {
        fprintf(stderr, "%s %s %s\n", ts, level_name(level, 1), msg);
    }
}

void ifl_server_log_access(struct ifl_server *s, const struct ifl_hconn *c)
{
    const char *path = c->url ? c->url : "";
    const int level = !strcmp(path, "/health") ? IFL_SERVER_LOG_DEBUG : IFL_SERVER_LOG_INFO;
    if (s->cfg.quiet || level < s->cfg.log_level)
        return;
    double ms = (double)(ifl_now_us() - c->t0_us) / 1000.0;
    char ts[32];
    now_text(ts, sizeof ts);
    const char *method = c->method ? c->method : "";
    if (s->cfg.log_format == IFL_SERVER_LOG_JSON) {
        json_t *j = json_object();
        json_object_set_new(j, "time", json_string(ts));
        json_object_set_new(j, "level", json_string(level_name(level, 0)));
        json_object_set_new(j, "method", ifl_json_text(method, strlen(method)));
        json_object_set_new(j, "path", ifl_json_text(path, strlen(path)));
        json_object_set_new(j, "status", json_integer(c->status));
        json_object_set_new(j, "ms", json_real(ms));
        char *t = json_dumps(j, JSON_COMPACT);
        if (t)
            fprintf(stderr, "%s\n", t);
        free(t);
        json_decref(j);
    } else {
        /* a path is the client's text: control bytes shown as \xHH, never
         * written to a terminal raw */
        char safe[512];
        size_t o = 0;
        for (const char *p = path; *p && o + 5 < sizeof safe; p++) {
            unsigned char ch = (unsigned char)*p;
            if (ch < 0x20 || ch == 0x7f)
                o += (size_t)snprintf(safe + o, sizeof safe - o, "\\x%02x", ch);
            else
                safe[o++] = (char)ch;
        }
        safe[o] = 0;
        fprintf(stderr, "%s %s %s %s %d %.1fms\n", ts, level_name(level, 1), method, safe,
                c->status, ms);
    }
}
