/*
 * The response queue: the live-request table (an open-addressing table by
 * id: stats, cancel lookup, whether the final response is out), the list
 * of ready responses that the engine pushes and clients await, the
 * clients' waits (ifl_await, ifl_executor_wait_idle), and the freeing of
 * responses and of the executor's request copies.
 *
 * Lock: out_mu guards all of it (exec.h). The engine thread only pushes
 * and updates; every other function here is the clients'.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/exec.h"

/* The CLOCK_REALTIME time timeout_ms from now, for pthread_cond_timedwait. */
static struct timespec deadline_after(int64_t timeout_ms)
{
    struct timespec d;
    clock_gettime(CLOCK_REALTIME, &d);
    d.tv_sec += timeout_ms / 1000;
    d.tv_nsec += (timeout_ms % 1000) * 1000000;
    if (d.tv_nsec >= 1000000000) {
        d.tv_sec++;
        d.tv_nsec -= 1000000000;
    }
    return d;
}

/* ---- live-request table (out_mu held) ---- */

/* id 0 is the empty-slot marker, never a request: without the check it
 * would match the first empty slot on its probe chain. */
struct xlive *ifl_exec_live_find(struct ifl_executor *ex, ifl_id id)
{
    if (!ex->live_cap || id == 0)
        return NULL;
    for (int32_t i = (int32_t)(id % (uint64_t)ex->live_cap), n = 0; n < ex->live_cap;
         n++, i = (i + 1) % ex->live_cap) {
        if (ex->live[i].id == id)
            return &ex->live[i];
        if (ex->live[i].id == 0)
            return NULL;
    }
    return NULL;
}

int ifl_exec_live_insert(struct ifl_executor *ex, ifl_id id)
{
    if ((ex->n_live + 1) * 2 > ex->live_cap) {
        int32_t cap = ex->live_cap ? ex->live_cap * 2 : 64;
        struct xlive *old = ex->live, *nt = calloc((size_t)cap, sizeof(*nt));
        if (!nt)
            return IFL_ENOMEM;
        int32_t old_cap = ex->live_cap;
        ex->live = nt;
        ex->live_cap = cap;
        for (int32_t i = 0; i < old_cap; i++)
            if (old[i].id) {
                int32_t j = (int32_t)(old[i].id % (uint64_t)cap);
                while (nt[j].id)
                    j = (j + 1) % cap;
                nt[j] = old[i];
            }
        free(old);
    }
    int32_t j = (int32_t)(id % (uint64_t)ex->live_cap);
    while (ex->live[j].id)
        j = (j + 1) % ex->live_cap;
    memset(&ex->live[j], 0, sizeof(ex->live[j]));
    ex->live[j].id = id;
    ex->live[j].stats.request_id = id;
    ex->n_live++;
    return 0;
}

/* Backward-shift deletion keeps probe chains whole without tombstones. */
void ifl_exec_live_remove(struct ifl_executor *ex, struct xlive *e)
{
    int32_t cap = ex->live_cap;
    int32_t i = (int32_t)(e - ex->live);
    ex->live[i].id = 0;
    ex->n_live--;
    for (int32_t j = (i + 1) % cap; ex->live[j].id; j = (j + 1) % cap) {
        int32_t home = (int32_t)(ex->live[j].id % (uint64_t)cap);
        /* move j back to i when its home is not in (i, j] cyclically */
        int between = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!between) {
            ex->live[i] = ex->live[j];
            ex->live[j].id = 0;
            i = j;
        }
    }
}

void ifl_xreq_free(struct xreq *q)
{
    if (!q)
        return;
    free(q->input);
    free(q->stop_tok);
    free(q->stop_len);
    free(q->bad_tok);
    free(q->bad_len);
    if (q->stop_strings)
        for (int32_t i = 0; i < q->r.n_stop_strings; i++)
            free(q->stop_strings[i]);
    free(q->stop_strings);
    free(q->bias_ids);
    free(q->bias_vals);
    free(q->drafts);
    free(q->post_name);
    ifl_xguide_release(q->xg);
    ifl_lora_set_release(&q->lora);
    ifl_img_free_request(q);
    free(q);
}

static int wanted(const ifl_id *ids, int32_t n_ids, ifl_id id)
{
    if (n_ids == 0)
        return 1;
    for (int32_t i = 0; i < n_ids; i++)
        if (ids[i] == id)
            return 1;
    return 0;
}

void ifl_exec_push_response(struct ifl_executor *ex, struct ifl_response *r)
{
    struct xresp *n = malloc(sizeof(*n));
    pthread_mutex_lock(&ex->out_mu);
    if (r->is_final) {
        struct xlive *e = ifl_exec_live_find(ex, r->request_id);
        if (e && !e->final_sent && --ex->n_unfinished == 0)
            ex->idle_seq = ex->stats_seq; /* idle once the engine publishes again */
    }
    if (!n) {
        /* out of memory: the response is lost, but a final one must not be:
         * keep the request's stats truthful and wake everyone */
        ifl_response_free(r);
    } else {
        n->resp = r;
        n->next = NULL;
        if (ex->out_tail)
            ex->out_tail->next = n;
        else
            ex->out_head = n;
        ex->out_tail = n;
        ex->n_ready++;
        if (r->is_final) {
            struct xlive *e = ifl_exec_live_find(ex, r->request_id);
            if (e) {
                e->final_sent = 1;
                e->stats.stage = IFL_STAGE_COMPLETE;
            }
        }
    }
    for (struct xwaiter *w = ex->waiters; w; w = w->next)
        if (wanted(w->ids, w->n_ids, r->request_id))
            pthread_cond_signal(&w->cv);
    pthread_mutex_unlock(&ex->out_mu);
}

void ifl_exec_update_stats(struct ifl_executor *ex, ifl_id id, const struct ifl_request_stats *s)
{
    pthread_mutex_lock(&ex->out_mu);
    struct xlive *e = ifl_exec_live_find(ex, id);
    if (e && !e->final_sent)
        e->stats = *s;
    pthread_mutex_unlock(&ex->out_mu);
}

/* Whether any of ids can still produce a response (out_mu held). */
static int any_pending(struct ifl_executor *ex, const ifl_id *ids, int32_t n_ids)
{
    if (ex->engine_done)
        return 0;
    if (n_ids == 0)
        return 1;
    for (int32_t i = 0; i < n_ids; i++) {
        struct xlive *e = ifl_exec_live_find(ex, ids[i]);
        if (e && !e->final_sent)
            return 1;
    }
    return 0;
}

int ifl_await(ifl_executor *ex, const ifl_id *ids, int32_t n_ids, int64_t timeout_ms,
              struct ifl_response **out, int32_t max, int32_t *n_out)
{
    if (!n_out)
        return IFL_EINVAL;
    *n_out = 0;
    if (!ex || !out || max < 1 || n_ids < 0 || (n_ids && !ids))
        return IFL_EINVAL;
    struct timespec deadline;
    if (timeout_ms > 0)
        deadline = deadline_after(timeout_ms);
    struct xwaiter me = {.ids = ids, .n_ids = n_ids};
    pthread_cond_init(&me.cv, NULL);
    pthread_mutex_lock(&ex->out_mu);
    ex->n_callers++;
    me.next = ex->waiters;
    ex->waiters = &me;
    int rc = 0;
    for (;;) {
        struct xresp **pp = &ex->out_head, *prev = NULL;
        while (*pp && *n_out < max) {
            struct xresp *n = *pp;
            if (wanted(ids, n_ids, n->resp->request_id)) {
                *pp = n->next;
                if (ex->out_tail == n)
                    ex->out_tail = prev;
                ex->n_ready--;
                out[(*n_out)++] = n->resp;
                if (n->resp->is_final) {
                    struct xlive *e = ifl_exec_live_find(ex, n->resp->request_id);
                    if (e)
                        ifl_exec_live_remove(ex, e);
                }
                free(n);
            } else {
                prev = n;
                pp = &n->next;
            }
        }
        if (*n_out > 0)
            break;
        /* nothing ready: give up, or wait */
        int pending = any_pending(ex, ids, n_ids);
        if (!pending) {
            rc = IFL_ESTATE;
            break;
        }
        if (timeout_ms == 0) {
            rc = IFL_ETIMEDOUT;
            break;
        }
        if (timeout_ms < 0) {
            pthread_cond_wait(&me.cv, &ex->out_mu);
        } else if (pthread_cond_timedwait(&me.cv, &ex->out_mu, &deadline) == ETIMEDOUT) {
            timeout_ms = 0; /* one last look, then IFL_ETIMEDOUT */
        }
    }
    for (struct xwaiter **pp = &ex->waiters; *pp; pp = &(*pp)->next)
        if (*pp == &me) {
            *pp = me.next;
            break;
        }
    ex->n_callers--;
    if (ex->engine_done)
        pthread_cond_broadcast(&ex->out_cv); /* destroy waits for the last caller */
    pthread_mutex_unlock(&ex->out_mu);
    pthread_cond_destroy(&me.cv);
    return rc;
}

int32_t ifl_num_responses_ready(ifl_executor *ex, ifl_id id)
{
    if (!ex)
        return 0;
    pthread_mutex_lock(&ex->out_mu);
    int32_t n = 0;
    if (id == 0) {
        n = ex->n_ready;
    } else {
        for (struct xresp *p = ex->out_head; p; p = p->next)
            n += p->resp->request_id == id;
    }
    pthread_mutex_unlock(&ex->out_mu);
    return n;
}

void ifl_response_free(struct ifl_response *r)
{
    if (!r)
        return;
    for (int32_t i = 0; i < r->n_results; i++) {
        struct ifl_sequence_result *s = &r->results[i];
        free(s->tokens);
        free(s->log_probs);
        free(s->top_log_probs);
        free(s->generation_logits);
        free(s->hidden_states);
        free(s->text);
    }
    free(r->results);
    free(r->context_logits);
    free(r->context_hidden_states);
    free(r->error_msg);
    free(r);
}

int ifl_executor_wait_idle(ifl_executor *ex, int64_t timeout_ms)
{
    if (!ex)
        return IFL_EINVAL;
    struct timespec deadline;
    if (timeout_ms > 0)
        deadline = deadline_after(timeout_ms);
    int rc = 0;
    pthread_mutex_lock(&ex->out_mu);
    ex->n_callers++;
    ex->n_idle_waiters++;
    while (!(ex->n_unfinished == 0 && ex->stats_seq > ex->idle_seq)) {
        if (ex->engine_done) {
            rc = IFL_ESTATE;
            break;
        }
        if (timeout_ms == 0 ||
            (timeout_ms > 0 && pthread_cond_timedwait(&ex->idle_cv, &ex->out_mu, &deadline))) {
            rc = IFL_ETIMEDOUT;
            break;
        }
        if (timeout_ms < 0)
            pthread_cond_wait(&ex->idle_cv, &ex->out_mu);
    }
    ex->n_idle_waiters--;
    if (--ex->n_callers == 0 && ex->engine_done)
        pthread_cond_broadcast(&ex->out_cv);
    pthread_mutex_unlock(&ex->out_mu);
    return rc;
}

void ifl_exec_guide_stats(struct ifl_executor *ex, struct ifl_xguide_stats *out)
{
    pthread_mutex_lock(&ex->out_mu);
    *out = ex->guide_stats;
    pthread_mutex_unlock(&ex->out_mu);
}

int ifl_get_request_stats(ifl_executor *ex, ifl_id id, struct ifl_request_stats *out)
{
    if (!ex || !out)
        return IFL_EINVAL;
    pthread_mutex_lock(&ex->out_mu);
    struct xlive *e = ifl_exec_live_find(ex, id);
    if (e)
        *out = e->stats;
    pthread_mutex_unlock(&ex->out_mu);
    return e ? 0 : IFL_ENOTFOUND;
}
