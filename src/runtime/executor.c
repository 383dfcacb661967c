/*
 * The executor's public API (include/inflight.h): configuration defaults,
 * request validation and deep copies, the incoming queue, cancellation,
 * statistics, model queries and shutdown. The response queue that clients
 * await is responses.c; the engine thread (engine.c and the files named in
 * engine_internal.h) does the rest.
 *
 * Locks: in_mu (incoming requests, cancels, accepting) and out_mu (ready
 * responses, live-request table, caller count). Never both at once, except
 * in destroy, which takes them one after the other.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chat/chat.h"
#include "core/err.h"
#include "core/sysmem.h"
#include "core/timeutil.h"
#include "runtime/decoding.h"
#include "runtime/exec.h"
#include "runtime/sampler.h"

/* how long the ranks of a tensor parallel job wait for each other to load */
#define TP_START_S 600.0

void ifl_executor_config_default(struct ifl_executor_config *c)
{
    memset(c, 0, sizeof(*c));
    c->max_batch_size = 16;
    c->max_num_tokens = 512;
    c->kv_block_size = 16;
    c->kv_type = IFL_KV_F16;
    c->sched_policy = IFL_SCHED_GUARANTEED_NO_EVICT;
    c->enable_prefix_caching = 1;
    c->kv_cache_memory_share = 0.4;
    c->kv_release_ms = 5000;
    c->speculative.n_max = 16;
    c->speculative.p_min = 0.75f;
    c->speculative.ngram_size = 3;
    c->speculative.ngram_min_hits = 1;
    c->speculative.tree_budget = 24;
    c->speculative.tree_top_n = 4;
    c->speculative.adaptive = 1;
}

void ifl_request_init(struct ifl_request *r)
{
    memset(r, 0, sizeof(*r));
    r->max_tokens = 16;
    r->end_id = -1;
    r->pad_id = -1;
    r->priority = 0.5f;
    r->num_return_sequences = 1;
    r->output.exclude_input_from_output = 1;
    ifl_sampling_default(&r->sampling);
    r->speculative.n_max = -1;
    r->speculative.n_min = -1;
    r->speculative.p_min = -1;
}

/* ---- requests ---- */

static int check_words(const struct ifl_executor *ex, const char *what, const int32_t *tok,
                       const int32_t *len, int32_t n, int64_t *total, char *err)
{
    *total = 0;
    if (n < 0 || n > 1024)
        return ifl_err(err, IFL_EINVAL, "%s: %d sequences (0..1024 allowed)", what, n);
    if (n && (!tok || !len))
        return ifl_err(err, IFL_EINVAL, "%s: tokens and lengths are required", what);
    for (int32_t i = 0; i < n; i++) {
        if (len[i] < 1 || len[i] > 64)
            return ifl_err(err, IFL_EINVAL, "%s[%d]: length %d (1..64 allowed)", what, i, len[i]);
        for (int32_t k = 0; k < len[i]; k++) {
            int32_t t = tok[*total + k];
            if (t < 0 || t >= ex->n_vocab)
                return ifl_err(err, IFL_EINVAL, "%s[%d]: token %d outside the vocabulary", what, i,
                               t);
        }
        *total += len[i];
    }
    return 0;
}

static int validate_speculative(const struct ifl_executor *ex,
                                const struct ifl_request_speculative *sp, char *err)
{
    if (sp->disable != 0 && sp->disable != 1)
        return ifl_err(err, IFL_EINVAL, "speculative.disable: %d (0 or 1)", sp->disable);
    if (sp->n_max < -1 || sp->n_max > IFL_SPEC_MAX_DRAFT)
        return ifl_err(err, IFL_EINVAL, "speculative.n_max: %d (-1 for the executor's, 0..%d)",
                       sp->n_max, IFL_SPEC_MAX_DRAFT);
    if (sp->n_min < -1 || sp->n_min > IFL_SPEC_MAX_DRAFT)
        return ifl_err(err, IFL_EINVAL, "speculative.n_min: %d (-1 for the executor's, 0..%d)",
                       sp->n_min, IFL_SPEC_MAX_DRAFT);
    if (!(sp->p_min <= 1)) /* NaN too */
        return ifl_err(err, IFL_EINVAL, "speculative.p_min: %g (below 0 for the executor's, 0..1)",
                       (double)sp->p_min);
    if (sp->n_draft_tokens < 0 || sp->n_draft_tokens > 65536 ||
        (sp->n_draft_tokens && !sp->draft_tokens))
        return ifl_err(err, IFL_EINVAL,
                       "speculative.draft_tokens: %d tokens (0..65536, with the array)",
                       sp->n_draft_tokens);
    for (int32_t i = 0; i < sp->n_draft_tokens; i++)
        if (sp->draft_tokens[i] < 0 || sp->draft_tokens[i] >= ex->n_vocab)
            return ifl_err(err, IFL_EINVAL,
                           "speculative.draft_tokens[%d]: token %d outside the vocabulary of %d", i,
                           sp->draft_tokens[i], ex->n_vocab);
    return 0;
}

static int validate(const struct ifl_executor *ex, const struct ifl_request *r, char *err)
{
    if (!r->input_ids || r->n_input < 1)
        return ifl_err(err, IFL_EINVAL, "input_ids: the prompt must have at least one token");
    for (int32_t i = 0; i < r->n_input; i++)
        if (r->input_ids[i] < 0 || r->input_ids[i] >= ex->n_vocab)
            return ifl_err(err, IFL_EINVAL, "input_ids[%d]: token %d outside the vocabulary of %d",
                           i, r->input_ids[i], ex->n_vocab);
    if (r->max_tokens < 0)
        return ifl_err(err, IFL_EINVAL, "max_tokens: %d is negative", r->max_tokens);
    if ((int64_t)r->n_input + ifl_exec_max_tokens(r) > ex->n_ctx)
        return ifl_err(err, IFL_EINVAL,
                       "max_tokens: the prompt (%d tokens) plus max_tokens (%d) exceeds the "
                       "context of %d positions",
                       r->n_input, ifl_exec_max_tokens(r), ex->n_ctx);
    const struct ifl_sampling_config *s = &r->sampling;
    int rc = ifl_sampling_validate(s, ex->n_vocab, err);
    if (rc)
        return rc;
    if (s->beam_width > 1) {
        if (s->beam_width > ex->cfg.max_batch_size)
            return ifl_err(err, IFL_EINVAL,
                           "sampling.beam_width: %d beams need as many sequence slots, but "
                           "max_batch_size is %d",
                           s->beam_width, ex->cfg.max_batch_size);
        if (r->num_return_sequences > s->beam_width)
            return ifl_err(err, IFL_EINVAL,
                           "num_return_sequences: %d exceeds sampling.beam_width %d (beam search "
                           "returns its best num_return_sequences beams)",
                           r->num_return_sequences, s->beam_width);
        if (r->n_stop_strings || r->n_stop_words)
            return ifl_err(err, IFL_EUNSUPPORTED,
                           "stop_strings/stop_words: not supported with beam search "
                           "(beam_width > 1); beams end on the end token or max_tokens");
        if (r->output.top_log_probs)
            return ifl_err(err, IFL_EUNSUPPORTED,
                           "output.top_log_probs: not supported with beam search (beam_width > "
                           "1); return_log_probs is");
    }
    struct ifl_sampler_extras x = {.bias_ids = r->logit_bias_ids,
                                   .bias_values = r->logit_bias_values,
                                   .n_bias = r->n_logit_bias,
                                   .bad_tokens = r->bad_words_tokens,
                                   .bad_lens = r->bad_words_lens,
                                   .n_bad = r->n_bad_words};
    if (r->n_logit_bias < 0 || r->n_logit_bias > ex->n_vocab ||
        (r->n_logit_bias && (!r->logit_bias_ids || !r->logit_bias_values)))
        return ifl_err(err, IFL_EINVAL, "logit_bias: %d entries", r->n_logit_bias);
    if ((rc = ifl_sampler_check_extras(&x, ex->n_vocab, err)))
        return rc;
    if (r->num_return_sequences < 1 || r->num_return_sequences > ex->cfg.max_batch_size)
        return ifl_err(err, IFL_EINVAL, "num_return_sequences: %d (1..%d allowed)",
                       r->num_return_sequences, ex->cfg.max_batch_size);
    if (ex->cfg.sched_policy == IFL_SCHED_GUARANTEED_NO_EVICT) {
        /* a request that can never get its reservation would wait forever */
        int64_t bs = ex->cfg.kv_block_size,
                n = s->beam_width > 1 ? s->beam_width : r->num_return_sequences;
        int64_t need = ifl_exec_blocks_to_reserve(
            bs, ifl_exec_kv_span((int64_t)r->n_input + ifl_exec_max_tokens(r), ex->kv_span), n);
        if (need * bs > ex->kv_cache_tokens)
            return ifl_err(err, IFL_EINVAL,
                           "max_tokens: %lld sequence(s) of %d positions need %lld KV blocks; the "
                           "cache has %lld",
                           (long long)n, r->n_input + ifl_exec_max_tokens(r), (long long)need,
                           (long long)(ex->kv_cache_tokens / bs));
    }
    if (!(r->priority >= 0 && r->priority <= 1))
        return ifl_err(err, IFL_EINVAL, "priority: must be in [0, 1]");
    if (r->allotted_time_ms < 0)
        return ifl_err(err, IFL_EINVAL, "allotted_time_ms: must be >= 0");
    if (r->end_id < -1 || r->end_id >= ex->n_vocab)
        return ifl_err(err, IFL_EINVAL, "end_id: %d outside the vocabulary", r->end_id);
    if (r->pad_id < -1 || r->pad_id >= ex->n_vocab)
        return ifl_err(err, IFL_EINVAL, "pad_id: %d outside the vocabulary", r->pad_id);
    if (r->output.top_log_probs < 0 || r->output.top_log_probs > 20)
        return ifl_err(err, IFL_EINVAL, "output.top_log_probs: %d (0..20 allowed)",
                       r->output.top_log_probs);
    int64_t total;
    if ((rc = check_words(ex, "stop_words", r->stop_words_tokens, r->stop_words_lens,
                          r->n_stop_words, &total, err)) ||
        (rc = check_words(ex, "bad_words", r->bad_words_tokens, r->bad_words_lens, r->n_bad_words,
                          &total, err)))
        return rc;
    if (r->n_stop_strings < 0 || r->n_stop_strings > 64 || (r->n_stop_strings && !r->stop_strings))
        return ifl_err(err, IFL_EINVAL, "stop_strings: %d strings (0..64 allowed)",
                       r->n_stop_strings);
    for (int32_t i = 0; i < r->n_stop_strings; i++) {
        size_t l = r->stop_strings[i] ? strlen(r->stop_strings[i]) : 0;
        if (l == 0 || l > 256)
            return ifl_err(err, IFL_EINVAL, "stop_strings[%d]: must have 1 to 256 bytes", i);
    }
    if (r->logits_post_processor && r->logits_post_processor[0]) {
        int found =
            !strcmp(r->logits_post_processor, "batched") && ex->cfg.batched_logits_processor;
        for (int32_t i = 0; i < ex->cfg.n_logits_processors && !found; i++)
            found = !strcmp(ex->procs[i].name, r->logits_post_processor);
        if (!found)
            return ifl_err(err, IFL_EINVAL, "logits_post_processor: '%.64s' is not registered",
                           r->logits_post_processor);
    }
    if (r->guide_type < IFL_GUIDE_NONE || r->guide_type > IFL_GUIDE_EBNF)
        return ifl_err(err, IFL_EINVAL, "guide_type: %d is not a guide type (0..4)", r->guide_type);
    if (r->guide_type != IFL_GUIDE_NONE && s->ignore_eos)
        return ifl_err(err, IFL_EUNSUPPORTED,
                       "sampling.ignore_eos: not supported with a guide (guide_type); a "
                       "guided sequence ends where its grammar does");
    return validate_speculative(ex, &r->speculative, err);
}

static int copy_request(const struct ifl_executor *ex, const struct ifl_request *r,
                        struct xreq **out)
{
    struct xreq *q = calloc(1, sizeof(*q));
    if (!q)
        return IFL_ENOMEM;
    q->r = *r;
    q->r.max_tokens = ifl_exec_max_tokens(r); /* from here on, never 0 */
    int64_t stop_total = 0, bad_total = 0;
    for (int32_t i = 0; i < r->n_stop_words; i++)
        stop_total += r->stop_words_lens[i];
    for (int32_t i = 0; i < r->n_bad_words; i++)
        bad_total += r->bad_words_lens[i];
    q->input = ifl_exec_dup(r->input_ids, sizeof(int32_t) * (size_t)r->n_input);
    q->stop_tok = ifl_exec_dup(r->stop_words_tokens, sizeof(int32_t) * (size_t)stop_total);
    q->stop_len = ifl_exec_dup(r->stop_words_lens, sizeof(int32_t) * (size_t)r->n_stop_words);
    q->bad_tok = ifl_exec_dup(r->bad_words_tokens, sizeof(int32_t) * (size_t)bad_total);
    q->bad_len = ifl_exec_dup(r->bad_words_lens, sizeof(int32_t) * (size_t)r->n_bad_words);
    q->bias_ids = ifl_exec_dup(r->logit_bias_ids, sizeof(int32_t) * (size_t)r->n_logit_bias);
    q->bias_vals = ifl_exec_dup(r->logit_bias_values, sizeof(float) * (size_t)r->n_logit_bias);
    q->drafts = ifl_exec_dup(r->speculative.draft_tokens,
                             sizeof(int32_t) * (size_t)r->speculative.n_draft_tokens);
    int ok = q->input && (!stop_total || (q->stop_tok && q->stop_len)) &&
             (!r->speculative.n_draft_tokens || q->drafts) &&
             (!bad_total || (q->bad_tok && q->bad_len)) &&
             (!r->n_logit_bias || (q->bias_ids && q->bias_vals));
    if (ok && r->n_stop_strings) {
        q->stop_strings = calloc((size_t)r->n_stop_strings, sizeof(char *));
        ok = q->stop_strings != NULL;
        for (int32_t i = 0; ok && i < r->n_stop_strings; i++)
            ok = (q->stop_strings[i] = strdup(r->stop_strings[i])) != NULL;
    }
    q->post_index = -1;
    if (ok && r->logits_post_processor && r->logits_post_processor[0]) {
        if (!strcmp(r->logits_post_processor, "batched"))
            q->post_index = -2;
        for (int32_t i = 0; i < ex->cfg.n_logits_processors; i++)
            if (!strcmp(ex->procs[i].name, r->logits_post_processor))
                q->post_index = i;
        ok = (q->post_name = strdup(r->logits_post_processor)) != NULL;
    }
    /* the copy's pointers point at owned memory only */
    q->r.input_ids = q->input;
    q->r.stop_words_tokens = q->stop_tok;
    q->r.stop_words_lens = q->stop_len;
    q->r.bad_words_tokens = q->bad_tok;
    q->r.bad_words_lens = q->bad_len;
    q->r.stop_strings = (const char *const *)q->stop_strings;
    q->r.logit_bias_ids = q->bias_ids;
    q->r.logit_bias_values = q->bias_vals;
    q->r.logits_post_processor = q->post_name;
    q->r.speculative.draft_tokens = q->drafts;
    q->r.guide_text = NULL;
    q->r.lora = NULL; /* resolved into q->lora at enqueue */
    q->r.n_lora = 0;
    if (!ok) {
        if (!r->n_stop_strings)
            q->r.n_stop_strings = 0;
        ifl_xreq_free(q);
        return IFL_ENOMEM;
    }
    q->arrival_us = ifl_now_us();
    q->deadline_us = r->allotted_time_ms ? q->arrival_us + r->allotted_time_ms * 1000 : 0;
    q->perf.arrival_us = q->arrival_us;
    *out = q;
    return 0;
}

int ifl_enqueue_many(ifl_executor *ex, const struct ifl_request *reqs, int32_t n, ifl_id *ids,
                     char *err)
{
    if (!ex || (n > 0 && (!reqs || !ids)) || n < 0)
        return ifl_err(err, IFL_EINVAL, "enqueue: invalid arguments");
    if (n == 0)
        return 0;
    struct xreq **qs = calloc((size_t)n, sizeof(*qs));
    if (!qs)
        return ifl_err(err, IFL_ENOMEM, "enqueue: out of memory");
    int rc = 0;
    for (int32_t i = 0; i < n && !rc; i++) {
        char e2[IFL_ERR_LEN] = "";
        rc = validate(ex, &reqs[i], e2);
        if (rc) {
            if (n > 1)
                ifl_err(err, rc, "request %d: %s", i, e2);
            else
                ifl_err(err, rc, "%s", e2);
        } else if ((rc = copy_request(ex, &reqs[i], &qs[i]))) {
            ifl_err(err, rc, "enqueue: out of memory");
        } else if ((rc = ifl_img_intake(ex, &reqs[i], qs[i], e2))) {
            /* images are decoded here: a bad one fails the enqueue */
            if (n > 1)
                ifl_err(err, rc, "request %d: %s", i, e2);
            else
                ifl_err(err, rc, "%s", e2);
        } else if ((rc = ifl_lora_reg_acquire(&ex->lora, reqs[i].lora, reqs[i].n_lora, &qs[i]->lora,
                                              e2))) {
            /* the adapters and their scales are taken here, once */
            if (n > 1)
                ifl_err(err, rc, "request %d: %s", i, e2);
            else
                ifl_err(err, rc, "%s", e2);
        } else if (reqs[i].guide_type != IFL_GUIDE_NONE &&
                   (rc = ifl_xguide_acquire(&ex->guides, reqs[i].guide_type, reqs[i].guide_text,
                                            &qs[i]->xg, e2))) {
            /* the grammar is compiled here: a bad one fails the enqueue */
            if (n > 1)
                ifl_err(err, rc, "request %d: %s", i, e2);
            else
                ifl_err(err, rc, "%s", e2);
        }
    }
    if (!rc) {
        pthread_mutex_lock(&ex->in_mu);
        if (!ex->accepting && atomic_load_explicit(&ex->tp_failed, memory_order_acquire))
            rc = ifl_err(err, IFL_ESTATE, "enqueue: %s", ex->tp_why);
        else if (!ex->accepting)
            rc = ifl_err(err, IFL_ESTATE, "enqueue: the executor is shutting down");
        else if (ex->cfg.max_queue_size > 0 && ex->n_queued + n > ex->cfg.max_queue_size)
            rc = ifl_err(err, IFL_EFULL, "enqueue: the queue is full (%d waiting, limit %d)",
                         ex->n_queued, ex->cfg.max_queue_size);
        if (!rc) {
            /* register in the live table first so await and cancel see them */
            pthread_mutex_lock(&ex->out_mu);
            int32_t k = 0;
            for (; k < n && !rc; k++) {
                qs[k]->id = ex->next_id + (ifl_id)k;
                rc = ifl_exec_live_insert(ex, qs[k]->id);
            }
            if (rc) {
                for (int32_t m = 0; m < k - 1; m++)
                    ifl_exec_live_remove(ex, ifl_exec_live_find(ex, qs[m]->id));
                ifl_err(err, rc, "enqueue: out of memory");
            } else {
                ex->n_unfinished += n;
            }
            pthread_mutex_unlock(&ex->out_mu);
        }
        if (!rc) {
            for (int32_t i = 0; i < n; i++) {
                qs[i]->seq_no = ex->next_seq_no++;
                ids[i] = qs[i]->id;
                if (ex->in_tail)
                    ex->in_tail->next = qs[i];
                else
                    ex->in_head = qs[i];
                ex->in_tail = qs[i];
                qs[i] = NULL;
            }
            ex->next_id += (ifl_id)n;
            ex->n_queued += n;
            pthread_cond_signal(&ex->in_cv);
        }
        pthread_mutex_unlock(&ex->in_mu);
    }
    for (int32_t i = 0; i < n; i++)
        ifl_xreq_free(qs[i]);
    free(qs);
    return rc;
}

int ifl_enqueue(ifl_executor *ex, const struct ifl_request *req, ifl_id *id, char *err)
{
    return ifl_enqueue_many(ex, req, 1, id, err);
}

int ifl_can_enqueue(ifl_executor *ex)
{
    if (!ex)
        return 0;
    pthread_mutex_lock(&ex->in_mu);
    int ok =
        ex->accepting && (ex->cfg.max_queue_size <= 0 || ex->n_queued < ex->cfg.max_queue_size);
    pthread_mutex_unlock(&ex->in_mu);
    return ok;
}

int ifl_cancel(ifl_executor *ex, ifl_id id)
{
    if (!ex)
        return IFL_EINVAL;
    pthread_mutex_lock(&ex->out_mu);
    struct xlive *e = ifl_exec_live_find(ex, id);
    int found = e && !e->final_sent, again = found && e->cancel_requested;
    if (found)
        e->cancel_requested = 1;
    pthread_mutex_unlock(&ex->out_mu);
    if (!found)
        return IFL_ENOTFOUND;
    if (again) /* already on its way */
        return 0;
    pthread_mutex_lock(&ex->in_mu);
    int rc = 0;
    if (ex->n_cancels == ex->cap_cancels) {
        int32_t cap = ex->cap_cancels ? ex->cap_cancels * 2 : 16;
        ifl_id *c = realloc(ex->cancels, sizeof(ifl_id) * (size_t)cap);
        if (c) {
            ex->cancels = c;
            ex->cap_cancels = cap;
        } else {
            rc = IFL_ENOMEM;
        }
    }
    if (!rc) {
        ex->cancels[ex->n_cancels++] = id;
        pthread_cond_signal(&ex->in_cv);
    }
    pthread_mutex_unlock(&ex->in_mu);
    if (rc) { /* not queued: a later call may try again */
        pthread_mutex_lock(&ex->out_mu);
        if ((e = ifl_exec_live_find(ex, id)))
            e->cancel_requested = 0;
        pthread_mutex_unlock(&ex->out_mu);
    }
    return rc;
}

int ifl_get_iteration_stats(ifl_executor *ex, struct ifl_iteration_stats *out)
{
    if (!ex || !out)
        return IFL_EINVAL;
    pthread_mutex_lock(&ex->out_mu);
    *out = ex->last_stats;
    pthread_mutex_unlock(&ex->out_mu);
    /* measured now, outside the lock: the store's map is fixed at creation */
    out->kv_bytes_resident = ifl_engine_kv_resident(ex);
    out->process_rss_bytes = ifl_sysmem_rss();
    ifl_decoding_kv_memory(ex, &out->draft_kv_bytes_reserved, &out->draft_kv_bytes_resident);
    return 0;
}

int ifl_get_iteration_stats_since(ifl_executor *ex, int64_t after_iteration,
                                  struct ifl_iteration_stats *out, int32_t max, int32_t *n_out)
{
    if (n_out)
        *n_out = 0;
    if (!ex || !out || !n_out || max < 1)
        return IFL_EINVAL;
    int32_t n = 0;
    pthread_mutex_lock(&ex->out_mu);
    int64_t first = ex->n_hist > IFL_STATS_HISTORY ? ex->n_hist - IFL_STATS_HISTORY : 0;
    /* the oldest kept entry past after_iteration: iterations only grow */
    int64_t k = ex->n_hist;
    while (k > first && ex->hist[(k - 1) % IFL_STATS_HISTORY].iteration > after_iteration)
        k--;
    for (; k < ex->n_hist && n < max; k++)
        out[n++] = ex->hist[k % IFL_STATS_HISTORY];
    pthread_mutex_unlock(&ex->out_mu);
    if (n > 0) {
        int64_t resident = ifl_engine_kv_resident(ex), rss = ifl_sysmem_rss(), dr, dm;
        ifl_decoding_kv_memory(ex, &dr, &dm);
        for (int32_t i = 0; i < n; i++) {
            out[i].kv_bytes_resident = resident;
            out[i].process_rss_bytes = rss;
            out[i].draft_kv_bytes_reserved = dr;
            out[i].draft_kv_bytes_resident = dm;
        }
    }
    *n_out = n;
    return 0;
}

/* ---- model and vocabulary ---- */

int ifl_executor_model_info(ifl_executor *ex, struct ifl_model_info *out)
{
    if (!ex || !out)
        return IFL_EINVAL;
    memset(out, 0, sizeof(*out));
    const struct ifl_hparams *hp = &ex->model->hp;
    snprintf(out->architecture, sizeof out->architecture, "%s", hp->arch_name);
    out->n_vocab = ex->n_vocab;
    out->n_ctx = ex->n_ctx;
    out->n_ctx_train = hp->n_ctx_train;
    out->n_embd = hp->n_embd;
    out->n_layer = hp->n_layer;
    out->bos_id = ifl_vocab_bos(ex->vocab);
    out->eos_id = ifl_vocab_eos(ex->vocab);
    out->add_bos = ifl_vocab_add_bos(ex->vocab);
    size_t cover = ifl_vocab_max_cover(ex->vocab);
    out->max_token_bytes = cover > INT32_MAX ? 0 : (int32_t)cover;
    out->kv_cache_tokens = ex->kv_cache_tokens;
    out->tp_ranks = ex->tp ? ifl_tp_size(ex->tp) : 1;
    return 0;
}

int ifl_executor_model_meta(ifl_executor *ex, const char *key, char *buf, int64_t cap,
                            int64_t *len_out)
{
    if (!len_out)
        return IFL_EINVAL;
    *len_out = 0;
    if (!ex || !key || cap < 0 || (cap && !buf))
        return IFL_EINVAL;
    const char *v;
    size_t len;
    int rc = ifl_gguf_get_str(ex->model->gguf, key, &v, &len, NULL);
    if (rc == IFL_ENOTFOUND)
        return rc;
    if (rc)
        return IFL_EINVAL;
    *len_out = (int64_t)len;
    if (cap) { /* cap 0 asks for the length only */
        size_t n = (int64_t)len < cap ? len : (size_t)cap - 1;
        memcpy(buf, v, n);
        buf[n] = 0;
    }
    return (int64_t)len < cap ? 0 : IFL_EFULL;
}

int ifl_executor_tokenize(ifl_executor *ex, const char *text, int64_t len, int32_t add_special,
                          int32_t parse_special, int32_t *ids, int64_t cap, int64_t *n_out)
{
    if (!n_out)
        return IFL_EINVAL;
    *n_out = 0;
    if (!ex || len < 0 || cap < 0 || (len && !text) || (cap && !ids))
        return IFL_EINVAL;
    return ifl_tokenize(ex->vocab, text, (size_t)len, add_special, parse_special, ids, cap, n_out);
}

int ifl_executor_detokenize(ifl_executor *ex, const int32_t *ids, int64_t n, int32_t show_special,
                            char *buf, int64_t cap, int64_t *len_out)
{
    if (!len_out)
        return IFL_EINVAL;
    *len_out = 0;
    if (!ex || n < 0 || cap < 0 || (cap && !buf) || (n && !ids))
        return IFL_EINVAL;
    int64_t len = 0;
    for (int64_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= ex->n_vocab)
            return IFL_EINVAL;
        int64_t room = len < cap ? cap - len : 0;
        len += (int64_t)ifl_vocab_piece(ex->vocab, ids[i], show_special, room ? buf + len : NULL,
                                        (size_t)room);
    }
    *len_out = len;
    if (cap) /* cap 0 asks for the length only */
        buf[len < cap ? len : cap - 1] = 0;
    return len < cap ? 0 : IFL_EFULL;
}

/* ---- lifetime ---- */

static int check_speculative(const struct ifl_speculative_config *c, char *err)
{
    const char *name = ifl_decoding_type_name(c->type);
    if (!name)
        return ifl_err(err, IFL_EINVAL,
                       "config: speculative.type %d (none = 0, draft = 1, ngram = 2, eagle3 = 3)",
                       c->type);
    if (!ifl_decoding_type_built(c->type))
        return ifl_err(err, IFL_EUNSUPPORTED,
                       "config: speculative.type %s: this build has no such proposer", name);
    if (c->n_max < 1 || c->n_max > IFL_SPEC_MAX_DRAFT || c->n_min < 0 || c->n_min > c->n_max)
        return ifl_err(err, IFL_EINVAL,
                       "config: speculative.n_max %d (1..%d) and n_min %d (0..n_max)", c->n_max,
                       IFL_SPEC_MAX_DRAFT, c->n_min);
    if (!(c->p_min >= 0 && c->p_min <= 1))
        return ifl_err(err, IFL_EINVAL, "config: speculative.p_min %g (0..1)", (double)c->p_min);
    if (c->ngram_size < 1 || c->ngram_size > 8 || c->ngram_min_hits < 1 || c->ngram_min_hits > 1000)
        return ifl_err(err, IFL_EINVAL,
                       "config: speculative.ngram_size %d (1..8) and ngram_min_hits %d (1..1000)",
                       c->ngram_size, c->ngram_min_hits);
    if (c->tree_budget < 1 || c->tree_budget > 64 || c->tree_top_n < 1 || c->tree_top_n > 8)
        return ifl_err(err, IFL_EINVAL,
                       "config: speculative.tree_budget %d (1..64) and tree_top_n %d (1..8)",
                       c->tree_budget, c->tree_top_n);
    if (c->accept != IFL_SPEC_ACCEPT_EXACT && c->accept != IFL_SPEC_ACCEPT_REJECTION)
        return ifl_err(err, IFL_EINVAL, "config: speculative.accept %d (exact = 0, rejection = 1)",
                       c->accept);
    if (c->adaptive != 0 && c->adaptive != 1)
        return ifl_err(err, IFL_EINVAL, "config: speculative.adaptive %d (0 or 1)", c->adaptive);
    int needs_file = c->type == IFL_SPEC_DRAFT || c->type == IFL_SPEC_EAGLE3;
    if (needs_file != (c->draft_model && c->draft_model[0]))
        return ifl_err(err, IFL_EINVAL, "config: speculative.draft_model is %s with type %s",
                       needs_file ? "required" : "only for draft and eagle3", name);
    return 0;
}

static int create(ifl_executor **out, const char *model_path,
                  const struct ifl_executor_config *cfg_in, char *err, int *agreed);

int ifl_executor_create(ifl_executor **out, const char *model_path,
                        const struct ifl_executor_config *cfg_in, char *err)
{
    int agreed = 0;
    int rc = create(out, model_path, cfg_in, err, &agreed);
    /* the workers wait to hear that every rank loaded its shard: a rank 0
     * that stopped before tells them it did not */
    const struct ifl_comm *c = cfg_in ? cfg_in->tp_comm : NULL;
    if (rc && !agreed && c && ifl_comm_size(c) > 1 && ifl_comm_rank(c) == 0)
        ifl_tp_agree(cfg_in->tp_comm, 1, TP_START_S, NULL);
    return rc;
}

static int create(ifl_executor **out, const char *model_path,
                  const struct ifl_executor_config *cfg_in, char *err, int *agreed)
{
    if (!out || !model_path)
        return ifl_err(err, IFL_EINVAL, "%s is NULL", out ? "model_path" : "the output pointer");
    *out = NULL;
    struct ifl_executor_config cfg;
    if (cfg_in)
        cfg = *cfg_in;
    else
        ifl_executor_config_default(&cfg);
    if (cfg.max_batch_size < 1 || cfg.max_batch_size > 1024)
        return ifl_err(err, IFL_EINVAL, "config: max_batch_size %d (1..1024)", cfg.max_batch_size);
    if (cfg.max_num_tokens < 1 || cfg.max_num_tokens > 65536)
        return ifl_err(err, IFL_EINVAL, "config: max_num_tokens %d (1..65536)", cfg.max_num_tokens);
    if (cfg.max_queue_size < 0 || cfg.n_threads < 0 || cfg.n_threads > 256 || cfg.n_ctx < 0 ||
        cfg.kv_cache_tokens < 0 || cfg.kv_cache_bytes < 0)
        return ifl_err(err, IFL_EINVAL,
                       "config: max_queue_size, n_threads, n_ctx and KV sizes must be >= 0");
    if (!(cfg.kv_cache_memory_share >= 0 && cfg.kv_cache_memory_share <= 1) ||
        cfg.kv_cache_memory_limit < 0)
        return ifl_err(err, IFL_EINVAL,
                       "config: kv_cache_memory_share %g (0..1) and kv_cache_memory_limit %lld "
                       "(>= 0)",
                       cfg.kv_cache_memory_share, (long long)cfg.kv_cache_memory_limit);
    if (cfg.lora_type < IFL_LORA_TYPE_F32 || cfg.lora_type > IFL_LORA_TYPE_Q8_0)
        return ifl_err(err, IFL_EINVAL, "config: lora_type %d (0 F32, 1 F16, 2 Q8_0)",
                       cfg.lora_type);
    if (cfg.repack_cache_max_bytes < -1)
        return ifl_err(err, IFL_EINVAL,
                       "config: repack_cache_max_bytes %lld (-1: no bound, 0: 32 GiB, or bytes)",
                       (long long)cfg.repack_cache_max_bytes);
    if (cfg.lora_cache_bytes < 0)
        return ifl_err(err, IFL_EINVAL, "config: lora_cache_bytes %lld (>= 0; 0: no limit)",
                       (long long)cfg.lora_cache_bytes);
    if (cfg.kv_prefault != 0 && cfg.kv_prefault != 1)
        return ifl_err(err, IFL_EINVAL, "config: kv_prefault %d (0 or 1)", cfg.kv_prefault);
    if (cfg.kv_release_ms < -1)
        return ifl_err(err, IFL_EINVAL, "config: kv_release_ms %d (-1 never, 0 default, or ms)",
                       cfg.kv_release_ms);
    if (cfg.kv_block_size < 1 || cfg.kv_block_size > 256)
        return ifl_err(err, IFL_EINVAL, "config: kv_block_size %d (1..256)", cfg.kv_block_size);
    if (cfg.kv_type != IFL_KV_F16 && cfg.kv_type != IFL_KV_F32 && cfg.kv_type != IFL_KV_Q8_0)
        return ifl_err(err, IFL_EINVAL, "config: kv_type %d (f16 = 0, f32 = 1, q8_0 = 2)",
                       cfg.kv_type);
    if (cfg.sched_policy != IFL_SCHED_GUARANTEED_NO_EVICT &&
        cfg.sched_policy != IFL_SCHED_MAX_UTILIZATION)
        return ifl_err(err, IFL_EINVAL, "config: sched_policy %d", cfg.sched_policy);
    if (cfg.n_logits_processors < 0 || (cfg.n_logits_processors && !cfg.logits_processors))
        return ifl_err(err, IFL_EINVAL, "config: logits_processors");
    int rc0 = check_speculative(&cfg.speculative, err);
    if (rc0)
        return rc0;
    const int tp = cfg.tp_comm && ifl_comm_size(cfg.tp_comm) > 1;
    if (tp && ifl_comm_rank(cfg.tp_comm) != 0)
        return ifl_err(err, IFL_EINVAL,
                       "config: tensor parallelism: the executor runs on rank 0 (this is rank %d; "
                       "the others run ifl_tp_worker_run)",
                       ifl_comm_rank(cfg.tp_comm));
    if (tp && (cfg.speculative.type == IFL_SPEC_DRAFT || cfg.speculative.type == IFL_SPEC_EAGLE3))
        return ifl_err(err, IFL_EUNSUPPORTED,
                       "config: speculative decoding with a draft model or an EAGLE-3 head is not "
                       "available with tensor parallelism (--tp) in this version");
    if (cfg.tp_emulate < 0 || cfg.tp_emulate > 4096)
        return ifl_err(err, IFL_EINVAL, "config: tp_emulate %d (0 to 4096)", cfg.tp_emulate);
    if (tp && cfg.tp_emulate > 1)
        return ifl_err(err, IFL_EINVAL,
                       "config: tp_emulate is for one process; a tensor parallel job (tp_comm) "
                       "sums as its ranks do already");
    if (cfg.vision_images_per_step < 0 || cfg.vision_images_per_step > 64 ||
        cfg.image_cache_bytes < -1)
        return ifl_err(err, IFL_EINVAL,
                       "config: vision_images_per_step %d (0..64; 0: 2) and image_cache_bytes %lld "
                       "(-1 none, 0 default, or bytes)",
                       cfg.vision_images_per_step, (long long)cfg.image_cache_bytes);
    if (!cfg.vision_images_per_step)
        cfg.vision_images_per_step = 2;
    if (cfg.vision_precision != IFL_VISION_PREC_F32 && cfg.vision_precision != IFL_VISION_PREC_BF16)
        return ifl_err(err, IFL_EINVAL, "config: vision_precision %d (0: f32, 1: bf16)",
                       cfg.vision_precision);
    if (!cfg.image_cache_bytes)
        cfg.image_cache_bytes = (int64_t)64 << 20;
    if (!(cfg.tp_timeout_s >= 0))
        return ifl_err(err, IFL_EINVAL, "config: tp_timeout_s %g (>= 0; 0: 30 s)",
                       cfg.tp_timeout_s);
    struct ifl_executor *ex = calloc(1, sizeof(*ex));
    if (!ex)
        return ifl_err(err, IFL_ENOMEM, "executor: out of memory");
    ex->cfg = cfg;
    ex->next_id = 1;
    pthread_mutex_init(&ex->in_mu, NULL);
    pthread_cond_init(&ex->in_cv, NULL);
    pthread_mutex_init(&ex->out_mu, NULL);
    pthread_cond_init(&ex->out_cv, NULL);
    pthread_cond_init(&ex->idle_cv, NULL);
    pthread_mutex_init(&ex->chat_mu, NULL);
    ifl_xguide_cache_init(&ex->guides);
    int rc = 0;
    ex->hist = calloc(IFL_STATS_HISTORY, sizeof(*ex->hist));
    if (!ex->hist)
        rc = ifl_err(err, IFL_ENOMEM, "executor: out of memory");
    if (!rc && cfg.n_logits_processors) {
        ex->procs = calloc((size_t)cfg.n_logits_processors, sizeof(*ex->procs));
        if (!ex->procs)
            rc = ifl_err(err, IFL_ENOMEM, "executor: out of memory");
        for (int32_t i = 0; !rc && i < cfg.n_logits_processors; i++) {
            const struct ifl_logits_processor *p = &cfg.logits_processors[i];
            if (!p->name || !p->name[0] || !p->fn || !strcmp(p->name, "batched"))
                rc = ifl_err(err, IFL_EINVAL,
                             "config: logits_processors[%d] needs a name "
                             "(not \"batched\") and a function",
                             i);
            else if (!(ex->procs[i].name = strdup(p->name)))
                rc = ifl_err(err, IFL_ENOMEM, "executor: out of memory");
            ex->procs[i].fn = p->fn;
            ex->procs[i].user = p->user;
        }
        ex->cfg.logits_processors = ex->procs;
    }
    if (!rc && tp)
        rc = ifl_tp_leader_create(&ex->tp, cfg.tp_comm, cfg.tp_timeout_s, err);
    if (!rc) {
        struct ifl_model_load_opts lo = {.n_threads = cfg.n_threads,
                                         .repack_cache_dir = cfg.repack_cache_dir,
                                         .repack_cache_max = cfg.repack_cache_max_bytes,
                                         .progress = cfg.load_progress,
                                         .progress_user = cfg.load_progress_user,
                                         .tp_rank = 0,
                                         .tp_size = tp ? ifl_comm_size(cfg.tp_comm) : 1,
                                         .sum_units = cfg.tp_emulate};
        rc = ifl_model_load_with(&ex->model, model_path, &lo, err);
        if (ex->tp) {
            /* every rank loaded its shard, or all stop here */
            char e2[IFL_ERR_LEN] = "";
            int arc = ifl_tp_agree(cfg.tp_comm, rc != 0, TP_START_S, e2);
            *agreed = 1;
            ex->tp_live = arc == 0;
            if (!rc && arc)
                rc = ifl_err(err, arc, "%s", e2);
        }
    }
    if (!rc) {
        ifl_lora_reg_init(&ex->lora, ex->model, cfg.lora_cache_bytes);
        ex->lora_ready = 1;
        rc = ifl_vocab_load(&ex->vocab, ex->model->gguf, err);
    }
    if (!rc) /* the vision encoder, checked against the model */
        rc = ifl_img_exec_init(ex, cfg.mmproj_path, err);
    ex->cfg.mmproj_path = NULL; /* not kept: the caller's string */
    if (!rc) {
        ex->n_vocab = ex->model->hp.n_vocab;
        int32_t n_ctx = cfg.n_ctx;
        if (n_ctx == 0)
            n_ctx = ex->model->hp.n_ctx_train < 4096 ? ex->model->hp.n_ctx_train : 4096;
        ex->n_ctx = n_ctx;
        rc = ifl_engine_create(ex, err);
    }
    if (!rc && ex->tp) /* the workers build their KV stores and forward passes */
        rc = ifl_engine_tp_setup(ex, err);
    if (!rc) {
        ex->accepting = 1;
        if (pthread_create(&ex->thread, NULL, ifl_engine_main, ex) != 0)
            rc = ifl_err(err, IFL_ENOMEM, "executor: cannot start the engine thread");
        else
            ex->thread_started = 1;
    }
    if (rc) {
        ex->accepting = 0;
        ifl_executor_destroy(ex, 1);
        return rc;
    }
    *out = ex;
    return 0;
}

int ifl_executor_shutdown(ifl_executor *ex, int cancel_in_flight)
{
    if (!ex)
        return IFL_EINVAL;
    pthread_mutex_lock(&ex->in_mu);
    int first = !ex->stop;
    ex->accepting = 0;
    ex->stop = 1;
    /* a later call may turn a drain into a cancel, never the reverse */
    if (cancel_in_flight)
        ex->cancel_all = 1;
    pthread_cond_broadcast(&ex->in_cv);
    pthread_mutex_unlock(&ex->in_mu);
    if (!first) {
        /* another thread joins the engine: wait until it has */
        pthread_mutex_lock(&ex->out_mu);
        while (!ex->engine_done)
            pthread_cond_wait(&ex->out_cv, &ex->out_mu);
        pthread_mutex_unlock(&ex->out_mu);
        return 0;
    }
    if (ex->thread_started)
        pthread_join(ex->thread, NULL);
    /* every final response is queued: wake every waiting caller, so each
     * takes what is left for it and then sees that nothing more comes */
    pthread_mutex_lock(&ex->out_mu);
    ex->engine_done = 1;
    for (struct xwaiter *w = ex->waiters; w; w = w->next)
        pthread_cond_signal(&w->cv);
    pthread_cond_broadcast(&ex->idle_cv);
    pthread_cond_broadcast(&ex->out_cv);
    pthread_mutex_unlock(&ex->out_mu);
    return 0;
}

int ifl_executor_failed(ifl_executor *ex, char *err)
{
    if (!ex || !atomic_load_explicit(&ex->tp_failed, memory_order_acquire))
        return 0;
    ifl_err(err, IFL_ESTATE, "%s", ex->tp_why);
    return 1;
}

void ifl_executor_destroy(ifl_executor *ex, int cancel_in_flight)
{
    if (!ex)
        return;
    ifl_executor_shutdown(ex, cancel_in_flight);
    if (ex->tp && ex->tp_live) /* the workers return (nothing is sent after a failure) */
        ifl_tp_send_stop(ex->tp, NULL);
    /* wait until every caller has left */
    pthread_mutex_lock(&ex->out_mu);
    while (ex->n_callers > 0)
        pthread_cond_wait(&ex->out_cv, &ex->out_mu);
    pthread_mutex_unlock(&ex->out_mu);
    ifl_engine_free(ex);
    for (struct xreq *q = ex->in_head, *n; q; q = n) {
        n = q->next;
        ifl_xreq_free(q);
    }
    for (struct xresp *p = ex->out_head, *n; p; p = n) {
        n = p->next;
        ifl_response_free(p->resp);
        free(p);
    }
    for (int32_t i = 0; ex->procs && i < ex->cfg.n_logits_processors; i++)
        free((char *)ex->procs[i].name);
    free(ex->procs);
    free(ex->hist);
    free(ex->cancels);
    free(ex->live);
    ifl_xguide_cache_deinit(&ex->guides);
    ifl_chat_template_free(ex->chat);
    pthread_mutex_destroy(&ex->chat_mu);
    if (ex->lora_ready) /* after every request that could hold an adapter */
        ifl_lora_reg_deinit(&ex->lora);
    ifl_vocab_free(ex->vocab);
    ifl_img_exec_fini(ex);
    ifl_model_free(ex->model);
    ifl_tp_free(ex->tp);
    pthread_mutex_destroy(&ex->in_mu);
    pthread_cond_destroy(&ex->in_cv);
    pthread_mutex_destroy(&ex->out_mu);
    pthread_cond_destroy(&ex->out_cv);
    pthread_cond_destroy(&ex->idle_cv);
    free(ex);
}
