/*
 * A job's results: the executor's responses folded into its choices
 * (tokens, log-probs, alternatives, text), the prompt scores computed from
 * context logits, best_of's ranking, the per-request metrics, and the job's
 * release. The pump calls in here for jobs whose connection has gone, and
 * gen.c for the rest; nothing here calls back into either.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/timeutil.h"
#include "server/internal.h"

void ifl_gen_job_destroy(struct ifl_gen_job *j)
{
    for (int32_t i = 0; i < j->n_inbox; i++)
        ifl_response_free(j->inbox[i]);
    free(j->inbox);
    for (int i = 0; i < j->n_prompts; i++)
        free(j->prompts[i]);
    free(j->prompts);
    free(j->n_prompt);
    for (int i = 0; i < j->n_stops; i++)
        free(j->stops[i]);
    free(j->stops);
    free(j->bias_ids);
    free(j->bias_vals);
    free(j->drafts);
    for (int i = 0; i < j->n_images; i++)
        free(j->image_data[i]);
    free(j->ids);
    free(j->req_final);
    free(j->order);
    free(j->guide_text);
    if (j->pscore) {
        for (int i = 0; i < j->n_prompts; i++) {
            free(j->pscore[i].lps);
            free(j->pscore[i].tops);
        }
        free(j->pscore);
    }
    if (j->ch) {
        for (int i = 0; i < j->n_prompts * j->n_per; i++) {
            ifl_buf_free(&j->ch[i].text);
            free(j->ch[i].tokens);
            free(j->ch[i].lps);
            free(j->ch[i].tops);
        }
        free(j->ch);
    }
    free(j);
}

static int fold(struct ifl_gen_job *j, struct ifl_gen_choice *c,
                const struct ifl_sequence_result *res)
{
    int32_t add = res->n_tokens;
    if (c->n_tokens + add > c->cap) {
        int32_t cap = c->cap ? c->cap * 2 : 64;
        while (cap < c->n_tokens + add)
            cap *= 2;
        int32_t *t = realloc(c->tokens, sizeof(int32_t) * (size_t)cap);
        if (!t)
            return IFL_ENOMEM;
        c->tokens = t;
        if (j->req.output.return_log_probs) {
            float *l = realloc(c->lps, sizeof(float) * (size_t)cap);
            if (!l)
                return IFL_ENOMEM;
            c->lps = l;
        }
        if (j->req.output.top_log_probs > 0) {
            struct ifl_top_logprob *tp =
                realloc(c->tops, sizeof(*tp) * (size_t)cap * (size_t)j->req.output.top_log_probs);
            if (!tp)
                return IFL_ENOMEM;
            c->tops = tp;
        }
        c->cap = cap;
    }
    if (add)
        memcpy(c->tokens + c->n_tokens, res->tokens, sizeof(int32_t) * (size_t)add);
    if (c->lps)
        for (int32_t i = 0; i < add; i++)
            c->lps[c->n_tokens + i] = res->log_probs ? res->log_probs[i] : 0.0f;
    int32_t k = j->req.output.top_log_probs;
    if (c->tops && k > 0) {
        c->n_top = k;
        for (int32_t i = 0; i < add; i++)
            for (int32_t t = 0; t < k; t++) {
                struct ifl_top_logprob *dst = &c->tops[(size_t)(c->n_tokens + i) * k + t];
                if (res->top_log_probs && t < res->n_top)
                    *dst = res->top_log_probs[(size_t)i * res->n_top + t];
                else
                    *dst = (struct ifl_top_logprob){.token = -1, .logprob = -INFINITY};
            }
    }
    c->n_tokens += add;
    c->cum = res->cum_log_prob;
    if (res->n_text > 0)
        ifl_buf_add(&c->text, res->text, (size_t)res->n_text);
    return c->text.oom ? IFL_ENOMEM : 0;
}

static void observe_request(struct ifl_gen_job *j, const struct ifl_response *r, int64_t n_gen)
{
    struct ifl_server *s = j->srv;
    const struct ifl_perf_metrics *pm = &r->perf;
    j->drafted += pm->draft_tokens;
    j->accepted += pm->accepted_draft_tokens;
    if (pm->first_scheduled_us && pm->arrival_us)
        ifl_server_metrics_observe(s, IFL_HIST_QUEUE,
                                   (double)(pm->first_scheduled_us - pm->arrival_us) * 1e-6);
    if (pm->first_token_us && pm->arrival_us)
        ifl_server_metrics_observe(s, IFL_HIST_TTFT,
                                   (double)(pm->first_token_us - pm->arrival_us) * 1e-6);
    if (n_gen > 1 && pm->last_token_us > pm->first_token_us) {
        /* one observation per gap, at the request's mean gap */
        double gap = (double)(pm->last_token_us - pm->first_token_us) * 1e-6 / (double)(n_gen - 1);
        for (int64_t i = 0; i < n_gen - 1 && i < 4096; i++)
            ifl_server_metrics_observe(s, IFL_HIST_ITL, gap);
    }
}

/* Scores prompt k from its context logits (row i predicts token i + 1):
 * log_softmax of each row at the next prompt token, and the row's best
 * alternatives. */
static int score_prompt(struct ifl_gen_job *j, int k, const float *logits, int32_t nv)
{
    struct ifl_gen_prompt_scores *ps = &j->pscore[k];
    int32_t n = j->n_prompt[k], top = j->prompt_top;
    ps->lps = malloc(sizeof(float) * (size_t)n);
    if (top > 0)
        ps->tops = malloc(sizeof(*ps->tops) * (size_t)n * (size_t)top);
    if (!ps->lps || (top > 0 && !ps->tops))
        return IFL_ENOMEM;
    ps->n = n;
    ps->n_top = top;
    ps->lps[0] = NAN;
    for (int32_t t = 0; t < top; t++)
        ps->tops[t] = (struct ifl_top_logprob){.token = -1, .logprob = -INFINITY};
    for (int32_t i = 1; i < n; i++) {
        const float *row = logits + (size_t)(i - 1) * (size_t)nv;
        float mx = row[0];
        for (int32_t v = 1; v < nv; v++)
            mx = row[v] > mx ? row[v] : mx;
        double sum = 0;
        for (int32_t v = 0; v < nv; v++)
            sum += exp((double)(row[v] - mx));
        float lse = mx + (float)log(sum);
        ps->lps[i] = row[j->prompts[k][i]] - lse;
        if (top <= 0)
            continue;
        /* the best `top` of the row, kept sorted (ties: the lower id first) */
        struct ifl_top_logprob *b = ps->tops + (size_t)i * (size_t)top;
        int32_t have = 0;
        for (int32_t v = 0; v < nv; v++) {
            if (have == top && row[v] <= b[top - 1].logprob)
                continue;
            int32_t at = have < top ? have++ : top - 1;
            while (at > 0 && b[at - 1].logprob < row[v]) {
                b[at] = b[at - 1];
                at--;
            }
            b[at] = (struct ifl_top_logprob){.token = v, .logprob = row[v]};
        }
        for (int32_t t = 0; t < have; t++)
            b[t].logprob -= lse;
        for (int32_t t = have; t < top; t++)
            b[t] = (struct ifl_top_logprob){.token = -1, .logprob = -INFINITY};
    }
    return 0;
}

/* A sample's rank key: its mean log-probability per generated token
 * (OpenAI's and TGI's best_of both pick by it). */
static double mean_lp(const struct ifl_gen_choice *c)
{
    return c->n_tokens > 0 ? (double)c->cum / c->n_tokens : (double)c->cum;
}

static int rank_choices(struct ifl_gen_job *j)
{
    j->order = malloc(sizeof(int) * (size_t)(j->n_prompts * j->n_ret + 1));
    if (!j->order)
        return IFL_ENOMEM;
    for (int k = 0; k < j->n_prompts; k++) {
        int *o = j->order + k * j->n_ret;
        int have = 0;
        for (int q = 0; q < j->n_per; q++) {
            int ci = k * j->n_per + q;
            if (j->n_ret == j->n_per) {
                o[have++] = ci;
                continue;
            }
            /* insertion into the n_ret best; equal keys keep sample order */
            double key = mean_lp(&j->ch[ci]);
            if (have == j->n_ret && key <= mean_lp(&j->ch[o[have - 1]]))
                continue;
            int at = have < j->n_ret ? have++ : j->n_ret - 1;
            while (at > 0 && mean_lp(&j->ch[o[at - 1]]) < key) {
                o[at] = o[at - 1];
                at--;
            }
            o[at] = ci;
        }
    }
    return 0;
}

int ifl_gen_choice_at(const struct ifl_gen_job *j, int i)
{
    if (j->order)
        return j->order[i];
    return (i / j->n_ret) * j->n_per + i % j->n_ret;
}

int ifl_gen_fold(struct ifl_gen_job *j, struct ifl_response **rs, int32_t got, ifl_gen_resp_fn fn,
                 void *user)
{
    if (j->finished) { /* ended early (see ifl_gen_poll): late responses are dropped */
        for (int32_t i = 0; i < got; i++)
            ifl_response_free(rs[i]);
        return 1;
    }
    for (int32_t i = 0; i < got; i++) {
        struct ifl_response *r = rs[i];
        int k = 0;
        while (k < j->n_prompts && j->ids[k] != r->request_id)
            k++;
        int seq = r->sequence_index;
        if (k < j->n_prompts && r->context_logits && j->pscore && !j->pscore[k].lps &&
            score_prompt(j, k, r->context_logits, r->n_vocab) && !j->error_status) {
            j->error_status = IFL_ENOMEM;
            snprintf(j->error_msg, sizeof j->error_msg, "out of memory");
        }
        if (j->no_output)
            for (int32_t q = 0; q < r->n_results; q++) {
                struct ifl_sequence_result *res = &r->results[q];
                res->n_tokens = 0;
                res->n_text = 0;
                res->cum_log_prob = 0;
                if (res->finish_reason)
                    res->finish_reason = IFL_FINISH_LENGTH;
            }
        if (k < j->n_prompts && seq >= 0 && seq < j->n_per) {
            int choice = k * j->n_per + seq;
            struct ifl_gen_choice *c = &j->ch[choice];
            if (r->status && !j->error_status) {
                j->error_status = r->status;
                snprintf(j->error_msg, sizeof j->error_msg, "%s",
                         r->error_msg ? r->error_msg : ifl_strerror(r->status));
            }
            if (r->n_results > 0) {
                if (!j->t_first_us && r->results[0].n_tokens > 0)
                    j->t_first_us = ifl_now_us();
                if (fold(j, c, &r->results[0]) && !j->error_status) {
                    j->error_status = IFL_ENOMEM;
                    snprintf(j->error_msg, sizeof j->error_msg, "out of memory");
                }
            }
            if (r->is_sequence_final || r->is_final) {
                if (!c->done) {
                    c->done = 1;
                    c->finish = r->n_results > 0 ? r->results[0].finish_reason : 0;
                    ifl_server_metrics_finish(j->srv, r->status ? -1 : c->finish);
                    ifl_server_metrics_tokens(j->srv, 0, c->n_tokens);
                }
            }
            if (fn)
                fn(user, choice, r);
            if (r->is_final && !j->req_final[k]) {
                j->req_final[k] = 1;
                j->n_final++;
                int64_t n_gen = 0;
                for (int q = 0; q < j->n_per; q++)
                    n_gen += j->ch[k * j->n_per + q].n_tokens;
                observe_request(j, r, j->n_per ? n_gen / j->n_per : n_gen);
            }
        }
        ifl_response_free(r);
    }
    if (j->n_final == j->n_prompts) {
        j->finished = 1;
        if (rank_choices(j) && !j->error_status) {
            j->error_status = IFL_ENOMEM;
            snprintf(j->error_msg, sizeof j->error_msg, "out of memory");
        }
        j->t_last_us = ifl_now_us();
        ifl_server_metrics_observe(j->srv, IFL_HIST_E2E, (double)(j->t_last_us - j->t0_us) * 1e-6);
        return 1;
    }
    return 0;
}
