/*
 * The pump: the thread between the executor and the HTTP connections.
 *
 * libmicrohttpd serves every connection from a small pool of epoll threads,
 * so no handler may block while a generation runs. A handler enqueues its
 * requests (ifl_gen_start registers their ids here), then suspends its
 * connection. This one thread per server awaits every response of the
 * executor (ifl_await on any id), queues each in its job's inbox and resumes
 * the job's connection, whose pool thread folds the inbox and writes.
 *
 * The same thread runs two sweeps every PUMP_TICK_MS:
 *   - receive deadlines: a socket that has not delivered a whole request
 *     within --request-timeout of opening (or of its previous reply ending)
 *     is shut down, which libmicrohttpd sees as the client leaving. The
 *     deadline is absolute: bytes trickling in do not extend it.
 *   - hang-ups: a suspended connection is outside libmicrohttpd's polling,
 *     so a client that leaves while its request runs is noticed here
 *     (POLLRDHUP) and its connection resumed to cancel.
 *
 * Locks: pump_mu guards the id map, the inboxes, the suspended list and
 * the jobs' pump fields; sock_mu the socket list. pump_mu is taken before
 * libmicrohttpd's own mutex (MHD_suspend_connection, MHD_resume_connection),
 * never after: libmicrohttpd calls our callbacks without holding it.
 * Resuming under pump_mu keeps a connection alive while we resume it: only
 * its own pool thread can close it, and that thread takes pump_mu first.
 */
#include <errno.h>
#include <microhttpd.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "core/err.h"
#include "core/timeutil.h"
#include "server/internal.h"

#define PUMP_TICK_MS 100
#define PUMP_BATCH 64

struct ifl_sock {
    int fd;
    _Atomic int64_t deadline_us;  /* 0: none (relaxed: the sweep reads it late at worst) */
    struct ifl_sock *prev, *next; /* sock_mu */
};

/* ---- id map: open addressing, linear probing, backward-shift delete ---- */

static size_t slot_of(ifl_id id, size_t cap)
{
    uint64_t z = id * 0x9E3779B97F4A7C15ull;
    return (size_t)(z ^ (z >> 29)) & (cap - 1);
}

static int map_grow(struct ifl_idmap *m, size_t want)
{
    if (want * 2 <= m->cap)
        return 0;
    size_t cap = m->cap ? m->cap : 64;
    while (cap < want * 2)
        cap *= 2;
    ifl_id *keys = calloc(cap, sizeof(*keys));
    struct ifl_gen_job **jobs = calloc(cap, sizeof(*jobs));
    if (!keys || !jobs) {
        free(keys);
        free(jobs);
        return IFL_ENOMEM;
    }
    for (size_t i = 0; i < m->cap; i++) {
        if (!m->keys[i])
            continue;
        size_t at = slot_of(m->keys[i], cap);
        while (keys[at])
            at = (at + 1) & (cap - 1);
        keys[at] = m->keys[i];
        jobs[at] = m->jobs[i];
    }
    free(m->keys);
    free(m->jobs);
    m->keys = keys;
    m->jobs = jobs;
    m->cap = cap;
    return 0;
}

static size_t map_find(const struct ifl_idmap *m, ifl_id id)
{
    if (!m->cap || !id)
        return (size_t)-1;
    for (size_t at = slot_of(id, m->cap);; at = (at + 1) & (m->cap - 1)) {
        if (m->keys[at] == id)
            return at;
        if (!m->keys[at])
            return (size_t)-1;
    }
}

static void map_put(struct ifl_idmap *m, ifl_id id, struct ifl_gen_job *j)
{
    size_t at = slot_of(id, m->cap);
    while (m->keys[at])
        at = (at + 1) & (m->cap - 1);
    m->keys[at] = id;
    m->jobs[at] = j;
    m->n++;
}

static void map_del_at(struct ifl_idmap *m, size_t at)
{
    size_t mask = m->cap - 1;
    m->keys[at] = 0;
    m->jobs[at] = NULL;
    m->n--;
    /* pull later members of the probe run back over the hole */
    for (size_t i = (at + 1) & mask; m->keys[i]; i = (i + 1) & mask) {
        size_t home = slot_of(m->keys[i], m->cap);
        /* i may move to the hole when its home is not cyclically in (at, i] */
        int stays = at <= i ? (home > at && home <= i) : (home > at || home <= i);
        if (stays)
            continue;
        m->keys[at] = m->keys[i];
        m->jobs[at] = m->jobs[i];
        m->keys[i] = 0;
        m->jobs[i] = NULL;
        at = i;
    }
}

int ifl_pump_reserve(struct ifl_server *s, int n)
{
    pthread_mutex_lock(&s->pump_mu);
    int rc = map_grow(&s->idmap, s->idmap.n + s->idmap.reserved + (size_t)n);
    if (!rc)
        s->idmap.reserved += (size_t)n;
    pthread_mutex_unlock(&s->pump_mu);
    return rc;
}

void ifl_pump_unreserve(struct ifl_server *s, int n)
{
    pthread_mutex_lock(&s->pump_mu);
    s->idmap.reserved -= (size_t)n;
    pthread_mutex_unlock(&s->pump_mu);
}

/* ---- inboxes ---- */

static int inbox_push(struct ifl_gen_job *j, struct ifl_response *r)
{
    if (j->n_inbox == j->cap_inbox) {
        int32_t cap = j->cap_inbox ? j->cap_inbox * 2 : 16;
        struct ifl_response **p = realloc(j->inbox, sizeof(*p) * (size_t)cap);
        if (!p)
            return IFL_ENOMEM;
        j->inbox = p;
        j->cap_inbox = cap;
    }
    j->inbox[j->n_inbox++] = r;
    return 0;
}

/* pump_mu held */
static void resume_locked(struct ifl_server *s, struct ifl_hconn *c)
{
    if (!c->suspended)
        return;
    c->suspended = 0;
    if (c->susp_prev)
        c->susp_prev->susp_next = c->susp_next;
    else
        s->susp_head = c->susp_next;
    if (c->susp_next)
        c->susp_next->susp_prev = c->susp_prev;
    c->susp_prev = c->susp_next = NULL;
    MHD_resume_connection(c->conn);
}

/* pump_mu held. A response for a released job is folded at once (its
 * metrics count as if the connection had stayed); the job is freed with
 * its last final. */
static void deliver_locked(struct ifl_server *s, struct ifl_gen_job *j, struct ifl_response *r)
{
    if (j->released) {
        ifl_gen_fold(j, &r, 1, NULL, NULL);
        if (j->n_routed_final == j->n_prompts)
            ifl_gen_job_destroy(j);
        return;
    }
    if (inbox_push(j, r)) {
        ifl_response_free(r);
        j->lost = 1;
    }
    if (j->hc)
        resume_locked(s, j->hc);
}

static void route(struct ifl_server *s, struct ifl_response **rs, int32_t n)
{
    pthread_mutex_lock(&s->pump_mu);
    for (int32_t i = 0; i < n; i++) {
        struct ifl_response *r = rs[i];
        size_t at = map_find(&s->idmap, r->request_id);
        if (at == (size_t)-1) {
            /* its job is between enqueue and register: keep it for the job */
            if (s->n_orphans == s->cap_orphans) {
                int32_t cap = s->cap_orphans ? s->cap_orphans * 2 : 16;
                struct ifl_response **p = realloc(s->orphans, sizeof(*p) * (size_t)cap);
                if (!p) {
                    ifl_response_free(r);
                    continue;
                }
                s->orphans = p;
                s->cap_orphans = cap;
            }
            s->orphans[s->n_orphans++] = r;
            continue;
        }
        struct ifl_gen_job *j = s->idmap.jobs[at];
        if (r->is_final) {
            j->n_routed_final++;
            map_del_at(&s->idmap, at);
        }
        deliver_locked(s, j, r);
    }
    pthread_mutex_unlock(&s->pump_mu);
}

void ifl_pump_register(struct ifl_gen_job *j)
{
    struct ifl_server *s = j->srv;
    pthread_mutex_lock(&s->pump_mu);
    s->idmap.reserved -= (size_t)j->n_prompts;
    for (int i = 0; i < j->n_prompts; i++)
        map_put(&s->idmap, j->ids[i], j);
    j->registered = 1;
    /* claim what the pump saw before the ids were known, in arrival order */
    int32_t keep = 0;
    for (int32_t i = 0; i < s->n_orphans; i++) {
        struct ifl_response *r = s->orphans[i];
        size_t at = map_find(&s->idmap, r->request_id);
        if (at == (size_t)-1 || s->idmap.jobs[at] != j) {
            s->orphans[keep++] = r;
            continue;
        }
        if (r->is_final) {
            j->n_routed_final++;
            map_del_at(&s->idmap, at);
        }
        deliver_locked(s, j, r);
    }
    s->n_orphans = keep;
    pthread_mutex_unlock(&s->pump_mu);
}

int32_t ifl_pump_take(struct ifl_gen_job *j, struct ifl_response **out, int32_t max, int *ended)
{
    struct ifl_server *s = j->srv;
    pthread_mutex_lock(&s->pump_mu);
    int32_t n = j->n_inbox < max ? j->n_inbox : max;
    if (n) {
        memcpy(out, j->inbox, sizeof(*out) * (size_t)n);
        memmove(j->inbox, j->inbox + n, sizeof(*out) * (size_t)(j->n_inbox - n));
        j->n_inbox -= n;
    }
    *ended = j->lost || s->exec_gone;
    pthread_mutex_unlock(&s->pump_mu);
    return n;
}

int ifl_pump_release(struct ifl_gen_job *j)
{
    struct ifl_server *s = j->srv;
    pthread_mutex_lock(&s->pump_mu);
    if (j->n_inbox)
        ifl_gen_fold(j, j->inbox, j->n_inbox, NULL, NULL);
    j->n_inbox = 0;
    j->hc = NULL;
    int handed = !s->exec_gone && j->n_routed_final < j->n_prompts;
    if (handed) {
        j->released = 1;
    } else {
        /* nothing more will come: drop whatever ids are left */
        for (int i = 0; i < j->n_prompts; i++) {
            size_t at = map_find(&s->idmap, j->ids[i]);
            if (at != (size_t)-1 && s->idmap.jobs[at] == j)
                map_del_at(&s->idmap, at);
        }
        j->registered = 0;
    }
    pthread_mutex_unlock(&s->pump_mu);
    return handed;
}

int ifl_pump_suspend(struct ifl_hconn *c, struct ifl_gen_job *j)
{
    struct ifl_server *s = c->srv;
    pthread_mutex_lock(&s->pump_mu);
    if (s->stopping) {
        pthread_mutex_unlock(&s->pump_mu);
        return -1;
    }
    if (j)
        j->hc = c;
    int ready = atomic_load_explicit(&c->gone, memory_order_relaxed) ||
                (j && (j->n_inbox || j->lost || s->exec_gone)) ||
                (j && !j->cancelled && atomic_load_explicit(&s->aborting, memory_order_relaxed));
    if (!ready) {
        c->suspended = 1;
        c->susp_prev = NULL;
        c->susp_next = s->susp_head;
        if (s->susp_head)
            s->susp_head->susp_prev = c;
        s->susp_head = c;
        MHD_suspend_connection(c->conn);
    }
    pthread_mutex_unlock(&s->pump_mu);
    return ready ? 0 : 1;
}

void ifl_pump_wake_all(struct ifl_server *s, int stopping)
{
    pthread_mutex_lock(&s->pump_mu);
    if (stopping)
        s->stopping = 1;
    while (s->susp_head)
        resume_locked(s, s->susp_head);
    pthread_mutex_unlock(&s->pump_mu);
}

/* ---- sweeps ---- */

/* Suspended connections whose client hung up: mark and resume them, their
 * pool thread cancels. */
static void watch_hangups(struct ifl_server *s, struct pollfd **pfd, size_t *cap)
{
    pthread_mutex_lock(&s->pump_mu);
    size_t n = 0;
    for (struct ifl_hconn *c = s->susp_head; c; c = c->susp_next)
        n++;
    if (n > *cap) {
        struct pollfd *p = realloc(*pfd, sizeof(*p) * n);
        if (!p) {
            pthread_mutex_unlock(&s->pump_mu);
            return; /* next tick */
        }
        *pfd = p;
        *cap = n;
    }
    size_t i = 0;
    for (struct ifl_hconn *c = s->susp_head; c; c = c->susp_next)
        (*pfd)[i++] = (struct pollfd){.fd = c->fd, .events = POLLRDHUP};
    if (n && poll(*pfd, (nfds_t)n, 0) > 0) {
        /* the list is in the same order as the array; resuming unlinks */
        struct ifl_hconn *c = s->susp_head;
        for (i = 0; i < n && c; i++) {
            struct ifl_hconn *next = c->susp_next;
            if ((*pfd)[i].revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) {
                atomic_store_explicit(&c->gone, 1, memory_order_relaxed);
                resume_locked(s, c);
            }
            c = next;
        }
    }
    pthread_mutex_unlock(&s->pump_mu);
}

static void sweep_deadlines(struct ifl_server *s, int64_t now)
{
    pthread_mutex_lock(&s->sock_mu);
    for (struct ifl_sock *k = s->socks; k; k = k->next) {
        int64_t d = atomic_load_explicit(&k->deadline_us, memory_order_relaxed);
        if (d && now >= d) {
            /* libmicrohttpd reads end-of-file and closes the connection
             * itself; the descriptor stays its own to close */
            shutdown(k->fd, SHUT_RDWR);
            atomic_store_explicit(&k->deadline_us, 0, memory_order_relaxed);
        }
    }
    pthread_mutex_unlock(&s->sock_mu);
}

void ifl_pump_sock_open(struct ifl_server *s, struct MHD_Connection *conn, void **ctx)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    struct ifl_sock *k = calloc(1, sizeof(*k));
    if (!k || !ci) {
        /* a connection without a deadline would be unpoliced: refuse it */
        free(k);
        if (ci)
            shutdown(ci->connect_fd, SHUT_RDWR);
        return;
    }
    k->fd = ci->connect_fd;
    atomic_store_explicit(&k->deadline_us,
                          ifl_now_us() + (int64_t)s->cfg.request_timeout_s * 1000000,
                          memory_order_relaxed);
    pthread_mutex_lock(&s->sock_mu);
    k->next = s->socks;
    if (s->socks)
        s->socks->prev = k;
    s->socks = k;
    pthread_mutex_unlock(&s->sock_mu);
    *ctx = k;
}

void ifl_pump_sock_close(struct ifl_server *s, void **ctx)
{
    struct ifl_sock *k = *ctx;
    if (!k)
        return;
    *ctx = NULL;
    pthread_mutex_lock(&s->sock_mu);
    if (k->prev)
        k->prev->next = k->next;
    else
        s->socks = k->next;
    if (k->next)
        k->next->prev = k->prev;
    pthread_mutex_unlock(&s->sock_mu);
    free(k);
}

void ifl_pump_sock_deadline(struct ifl_sock *k, int64_t deadline_us)
{
    if (k)
        atomic_store_explicit(&k->deadline_us, deadline_us, memory_order_relaxed);
}

/* ---- the thread ---- */

static void *pump_main(void *arg)
{
    struct ifl_server *s = arg;
    struct ifl_response *rs[PUMP_BATCH];
    struct pollfd *pfd = NULL;
    size_t pfd_cap = 0;
    int64_t next_sweep = 0;
    while (!atomic_load_explicit(&s->pump_stop, memory_order_acquire)) {
        /* the executor is destroyed only after this thread is joined */
        ifl_executor *ex = atomic_load_explicit(&s->ex, memory_order_acquire);
        int32_t got = 0;
        int rc = IFL_ETIMEDOUT;
        if (ex && !s->exec_gone) {
            rc = ifl_await(ex, NULL, 0, PUMP_TICK_MS, rs, PUMP_BATCH, &got);
        } else {
            struct timespec ts = {0, PUMP_TICK_MS * 1000000L};
            nanosleep(&ts, NULL);
        }
        if (got > 0) {
            route(s, rs, got);
        } else if (rc == IFL_ESTATE) {
            /* the executor ended: nothing more comes for anyone */
            pthread_mutex_lock(&s->pump_mu);
            s->exec_gone = 1;
            while (s->susp_head)
                resume_locked(s, s->susp_head);
            pthread_mutex_unlock(&s->pump_mu);
        }
        int64_t now = ifl_now_us();
        if (now >= next_sweep) {
            sweep_deadlines(s, now);
            watch_hangups(s, &pfd, &pfd_cap);
            next_sweep = now + PUMP_TICK_MS * 1000;
        }
    }
    free(pfd);
    return NULL;
}

int ifl_pump_start(struct ifl_server *s, char *err)
{
    pthread_mutex_init(&s->pump_mu, NULL);
    pthread_mutex_init(&s->sock_mu, NULL);
    atomic_store_explicit(&s->pump_stop, 0, memory_order_relaxed);
    int rc = pthread_create(&s->pump_thread, NULL, pump_main, s);
    if (rc) {
        pthread_mutex_destroy(&s->pump_mu);
        pthread_mutex_destroy(&s->sock_mu);
        return ifl_err(err, IFL_EIO, "cannot start the server's pump thread: %s", strerror(rc));
    }
    s->pump_started = 1;
    return 0;
}

void ifl_pump_stop(struct ifl_server *s)
{
    if (!s->pump_started)
        return;
    atomic_store_explicit(&s->pump_stop, 1, memory_order_release);
    pthread_join(s->pump_thread, NULL);
    s->pump_started = 0;
    /* what the pump still held: jobs released with requests running (the
     * executor, destroyed next, ends those) and unclaimed responses */
    for (size_t i = 0; i < s->idmap.cap; i++) {
        struct ifl_gen_job *j = s->idmap.jobs[i];
        if (!j)
            continue;
        for (int k = 0; k < j->n_prompts; k++) {
            size_t at = map_find(&s->idmap, j->ids[k]);
            if (at != (size_t)-1)
                map_del_at(&s->idmap, at);
        }
        if (j->released)
            ifl_gen_job_destroy(j);
        i = (size_t)-1; /* deleting shifts entries: start over */
    }
    for (int32_t i = 0; i < s->n_orphans; i++)
        ifl_response_free(s->orphans[i]);
    free(s->orphans);
    free(s->idmap.keys);
    free(s->idmap.jobs);
    s->orphans = NULL;
    s->idmap = (struct ifl_idmap){0};
    for (struct ifl_sock *k = s->socks, *next; k; k = next) {
        next = k->next;
        free(k);
    }
    s->socks = NULL;
    pthread_mutex_destroy(&s->pump_mu);
    pthread_mutex_destroy(&s->sock_mu);
}
