/*
 * Response emission: what the engine hands to the response queue. One
 * response per update of a sequence (its new tokens and text), finals for
 * requests that never ran, and the one final response of a beam search,
 * whose hypotheses' rows are read back from the search's trace.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/engine_internal.h"

/* ---- responses ---- */

static struct ifl_response *new_response(struct ifl_executor *ex, const struct xreq *q)
{
    struct ifl_response *r = calloc(1, sizeof(*r));
    if (!r)
        return NULL;
    r->request_id = q->id;
    r->client_id = q->r.client_id;
    r->n_vocab = ex->n_vocab;
    r->n_embd = ex->model->hp.n_embd;
    if (q->status) {
        r->status = q->status;
        r->error_msg = strdup(
            q->status == IFL_ESTATE   ? ex->tp_why /* the only status a whole job's end gives */
            : q->status == IFL_EINVAL ? "no token was left to pick: bad words, logit bias or "
                                        "min_tokens banned them all, or the logits were NaN"
            : q->status == IFL_EFULL  ? "the guide's grammar went past its limits (nesting "
                                        "depth or live parses)"
                                      : "out of memory for the outputs this request asks for");
    }
    if (q->r.output.return_perf_metrics)
        r->perf = q->perf;
    return r;
}

/* Moves the context logits (and hidden states) into r: the first response
 * that finds the whole prompt captured carries them. */
static void attach_context(struct xreq *q, struct ifl_response *r)
{
    if (q->ctx_sent || !q->ctx_logits || q->ctx_captured < q->r.n_input)
        return;
    r->context_logits = q->ctx_logits;
    r->context_hidden_states = q->ctx_hidden;
    q->ctx_logits = NULL;
    q->ctx_hidden = NULL;
    q->ctx_sent = 1;
}

/* Queues a response for sequence s: its tokens since the last response (or
 * all, as the request asks) and the text made since. */
void ifl_emit_seq(struct ifl_executor *ex, struct eseq *s, int is_final)
{
    struct xreq *q = s->q;
    struct ifl_response *r = new_response(ex, q);
    struct ifl_sequence_result *res = r ? calloc(1, sizeof(*res)) : NULL;
    if (!res) {
        free(r);
        return; /* out of memory: this update is lost; the final one retries */
    }
    r->is_final = is_final;
    r->sequence_index = s->index;
    r->is_sequence_final = s->finish != 0;
    r->n_results = 1;
    r->results = res;
    int all = !q->r.streaming || q->r.return_all_generated_tokens;
    int32_t from = all ? 0 : s->n_sent;
    int with_prompt = !q->r.streaming && !q->r.output.exclude_input_from_output;
    int32_t n_new = s->n_gen - from;
    int32_t n_out = n_new + (with_prompt ? s->n_prompt : 0);
    res->tokens = malloc(sizeof(int32_t) * (size_t)(n_out > 0 ? n_out : 1));
    if (res->tokens) {
        if (with_prompt)
            memcpy(res->tokens, s->tokens, sizeof(int32_t) * (size_t)s->n_prompt);
        memcpy(res->tokens + (with_prompt ? s->n_prompt : 0), s->tokens + s->n_prompt + from,
               sizeof(int32_t) * (size_t)n_new);
        res->n_tokens = n_out;
    }
    if (q->r.output.return_log_probs) {
        res->log_probs = ifl_exec_dup(s->logprobs + from, sizeof(float) * (size_t)n_new);
        int32_t k = q->r.output.top_log_probs;
        if (k > 0 && n_new > 0) {
            res->top_log_probs = malloc(sizeof(*res->top_log_probs) * (size_t)n_new * (size_t)k);
            if (res->top_log_probs) {
                res->n_top = k;
                for (int32_t i = 0; i < n_new; i++)
                    memcpy(res->top_log_probs + (size_t)i * k,
                           s->tops + (size_t)(from + i) * IFL_MAX_TOP,
                           sizeof(*s->tops) * (size_t)k);
            }
        }
    }
    if (s->glog)
        res->generation_logits = ifl_exec_dup(s->glog + (size_t)from * (size_t)ex->n_vocab,
                                              sizeof(float) * (size_t)n_new * (size_t)ex->n_vocab);
    if (s->ghid)
        res->hidden_states = ifl_exec_dup(s->ghid + (size_t)from * (size_t)r->n_embd,
                                          sizeof(float) * (size_t)n_new * (size_t)r->n_embd);
    res->cum_log_prob = s->cum_logprob;
    res->score = s->cum_logprob;
    res->finish_reason = s->finish;
    res->end_token = is_final ? s->end_token : -1;
    res->text = malloc(s->n_text + 1);
    if (res->text) {
        memcpy(res->text, s->text, s->n_text);
        res->text[s->n_text] = 0;
        res->n_text = (int32_t)s->n_text;
        s->n_text = 0;
    }
    attach_context(q, r);
    s->n_sent = s->n_gen;
    ifl_exec_push_response(ex, r);
}

/* A final response for a request that never got to run (cancelled or timed
 * out while waiting), one per sequence (one for a beam search). */
void ifl_emit_unstarted(struct ifl_executor *ex, struct xreq *q, int32_t reason)
{
    int32_t n = q->r.sampling.beam_width > 1 ? 1 : q->r.num_return_sequences;
    for (int32_t i = 0; i < n; i++) {
        struct ifl_response *r = new_response(ex, q);
        struct ifl_sequence_result *res = r ? calloc(1, sizeof(*res)) : NULL;
        if (!res) {
            free(r);
            continue;
        }
        r->is_final = i == n - 1;
        r->sequence_index = i;
        r->is_sequence_final = 1;
        r->n_results = 1;
        r->results = res;
        res->finish_reason = reason;
        res->end_token = -1;
        res->text = calloc(1, 1);
        ifl_exec_push_response(ex, r);
    }
}

/* The live beam of step t (history of t tokens) whose history is h[0..t),
 * found through the trace; -1 if none (cannot happen: histories of live
 * beams are distinct, and every hypothesis extends one). */
static int32_t beam_find(const struct ebeam *eb, int32_t t, const int32_t *h)
{
    int32_t w = eb->width;
    for (int32_t j = 0; j < eb->tlive[t]; j++) {
        int32_t cur = j, k = t - 1;
        for (; k >= 0 && eb->ttok[(size_t)k * w + cur] == h[k]; k--)
            cur = eb->tpar[(size_t)k * w + cur];
        if (k < 0)
            return j;
    }
    return -1;
}

/* Copies, for each token of hypothesis h, the trace row it was chosen
 * from: the last token from its parent's row at step n - 1, the others
 * walking the parents back. dst is [n][dim] (zeros where not found). */
static void beam_trace_rows(const struct ebeam *eb, const struct ifl_beam_hyp *h,
                            const float *trace, int32_t dim, float *dst)
{
    int32_t n = h->n_tokens, w = eb->width;
    if (n < 1)
        return;
    int32_t j = beam_find(eb, n - 1, h->tokens);
    if (j < 0)
        return;
    size_t d = (size_t)dim;
    memcpy(dst + (size_t)(n - 1) * d, trace + ((size_t)(n - 1) * w + j) * d, sizeof(float) * d);
    for (int32_t k = n - 2; k >= 0; k--) {
        j = eb->tpar[(size_t)k * w + j];
        memcpy(dst + (size_t)k * d, trace + ((size_t)k * w + j) * d, sizeof(float) * d);
    }
}

/* Queues the one (final) response of a beam search: its best n_ret
 * hypotheses, each with its tokens (the end token that finished it
 * included), log-probs, scores, text and traced rows. */
void ifl_emit_beams(struct ifl_executor *ex, struct xreq *q)
{
    struct engine *e = ex->eng;
    struct ebeam *eb = q->beam;
    struct ifl_response *r = new_response(ex, q);
    if (!r)
        return;
    r->is_final = 1;
    r->is_sequence_final = 1;
    struct ifl_beam_hyp h[IFL_BEAM_MAX_WIDTH];
    int32_t n = eb ? ifl_beam_results(&eb->b, h, eb->n_ret) : 0;
    r->results = calloc((size_t)(n > 0 ? n : 1), sizeof(*r->results));
    if (!r->results) {
        free(r->error_msg);
        free(r);
        return;
    }
    r->n_results = n > 0 ? n : 1;
    for (int32_t i = 0; i < r->n_results; i++)
        r->results[i].end_token = -1; /* a hypothesis keeps its end token in tokens */
    if (n == 0)                       /* failed before the search began */
        r->results[0].finish_reason = IFL_FINISH_CANCELLED;
    int with_prompt = !q->r.output.exclude_input_from_output;
    int32_t n_in = with_prompt ? q->r.n_input : 0, nv = ex->n_vocab, ne = r->n_embd;
    for (int32_t i = 0; i < n; i++) {
        struct ifl_sequence_result *res = &r->results[i];
        int32_t nt = h[i].n_tokens;
        res->tokens = malloc(sizeof(int32_t) * (size_t)(n_in + nt > 0 ? n_in + nt : 1));
        if (res->tokens) {
            memcpy(res->tokens, q->input, sizeof(int32_t) * (size_t)n_in);
            memcpy(res->tokens + n_in, h[i].tokens, sizeof(int32_t) * (size_t)nt);
            res->n_tokens = n_in + nt;
        }
        if (q->r.output.return_log_probs)
            res->log_probs = ifl_exec_dup(h[i].logprobs, sizeof(float) * (size_t)nt);
        res->cum_log_prob = h[i].cum_log_prob;
        res->score = h[i].score;
        res->finish_reason = h[i].finish_reason;
        if (eb->tlog && nt > 0 &&
            (res->generation_logits = calloc((size_t)nt * (size_t)nv, sizeof(float))))
            beam_trace_rows(eb, &h[i], eb->tlog, nv, res->generation_logits);
        if (eb->thid && nt > 0 &&
            (res->hidden_states = calloc((size_t)nt * (size_t)ne, sizeof(float))))
            beam_trace_rows(eb, &h[i], eb->thid, ne, res->hidden_states);
        /* text: the hypothesis detokenized afresh */
        struct ifl_detok dt;
        ifl_detok_init(&dt, ex->vocab, 0);
        size_t len = 0, cap = 64;
        char *text = malloc(cap);
        for (int32_t k = 0; k <= nt && text; k++) {
            size_t m = k < nt ? ifl_detok_push(&dt, h[i].tokens[k], e->piece)
                              : ifl_detok_flush(&dt, e->piece);
            if (len + m + 1 > cap) {
                char *t = realloc(text, (len + m + 1) * 2);
                if (!t) {
                    free(text);
                    text = NULL;
                    break;
                }
                text = t;
                cap = (len + m + 1) * 2;
            }
            memcpy(text + len, e->piece, m);
            len += m;
        }
        if (text) {
            text[len] = 0;
            res->text = text;
            res->n_text = (int32_t)len;
        }
    }
    attach_context(q, r);
    ifl_exec_push_response(ex, r);
}
