/*
 * One generation over the executor, shared by the OpenAI and TGI routes:
 * parameters to a struct ifl_request, every prompt enqueued at once (all or
 * nothing), responses folded into choices (prompt-major, then sample), and
 * the per-request metrics (TTFT, queue time and inter-token latency from
 * the executor's perf stamps, end-to-end from the server's clock).
 *
 * Text comes only from the executor's `text` field, which is whole UTF-8
 * characters with stop strings held back and cut: never re-detokenized here.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/timeutil.h"
#include "server/internal.h"

/* ---- the job ---- */

struct ifl_gen_job *ifl_gen_job_new(struct ifl_server *s, ifl_executor *ex)
{
    struct ifl_gen_job *j = calloc(1, sizeof(*j));
    if (!j)
        return NULL;
    j->srv = s;
    j->ex = ex;
    j->t0_us = ifl_now_us();
    ifl_request_init(&j->req);
    return j;
}

void ifl_gen_job_free(struct ifl_gen_job *j)
{
    if (!j)
        return;
    if (j->registered) {
        /* nobody waits for what is still running */
        for (int i = 0; i < j->n_prompts; i++)
            if (!j->req_final[i])
                ifl_cancel(j->ex, j->ids[i]);
        if (ifl_pump_release(j))
            return; /* the pump frees it after the cancelled finals */
    }
    ifl_gen_job_destroy(j);
}

int ifl_gen_add_prompt(struct ifl_gen_job *j, const int32_t *ids, int32_t n)
{
    int32_t **p = realloc(j->prompts, sizeof(*p) * (size_t)(j->n_prompts + 1));
    if (!p)
        return IFL_ENOMEM;
    j->prompts = p;
    int32_t *np = realloc(j->n_prompt, sizeof(*np) * (size_t)(j->n_prompts + 1));
    if (!np)
        return IFL_ENOMEM;
    j->n_prompt = np;
    int32_t *copy = malloc(sizeof(int32_t) * (size_t)(n > 0 ? n : 1));
    if (!copy)
        return IFL_ENOMEM;
    if (n)
        memcpy(copy, ids, sizeof(int32_t) * (size_t)n);
    j->prompts[j->n_prompts] = copy;
    j->n_prompt[j->n_prompts] = n;
    j->n_prompts++;
    return 0;
}

int ifl_gen_text_too_long(const struct ifl_server *s, size_t n, int tgi, char *err)
{
    int64_t per = s->info.max_token_bytes, n_ctx = s->info.n_ctx;
    int64_t at_least = per > 0 ? ((int64_t)n + per - 1) / per : 0;
    if (per <= 0 || at_least < n_ctx)
        return 0; /* it may fit: only tokenizing tells */
    if (tgi)
        ifl_err(err, IFL_EINVAL,
                "`inputs` must have less than %lld tokens. Given: at least %lld (%zu bytes, and "
                "no token stands for more than %lld)",
                (long long)n_ctx, (long long)at_least, n, (long long)per);
    else
        ifl_err(err, IFL_EINVAL,
                "this model's maximum context length is %lld tokens, but the prompt has at least "
                "%lld tokens (%zu bytes, and no token stands for more than %lld); shorten it",
                (long long)n_ctx, (long long)at_least, n, (long long)per);
    return 1;
}

int ifl_gen_add_prompt_text(struct ifl_gen_job *j, const char *text, size_t n, int add_special)
{
    int64_t cap = (int64_t)n + 8, got = 0;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)cap);
    if (!ids)
        return IFL_ENOMEM;
    int rc = ifl_executor_tokenize(j->ex, text, (int64_t)n, add_special, 1, ids, cap, &got);
    if (rc == IFL_EFULL) {
        free(ids);
        cap = got;
        ids = malloc(sizeof(int32_t) * (size_t)(cap > 0 ? cap : 1));
        if (!ids)
            return IFL_ENOMEM;
        rc = ifl_executor_tokenize(j->ex, text, (int64_t)n, add_special, 1, ids, cap, &got);
    }
    if (!rc && got > INT32_MAX)
        rc = IFL_EINVAL;
    if (!rc)
        rc = ifl_gen_add_prompt(j, ids, (int32_t)got);
    free(ids);
    return rc;
}

int ifl_gen_add_prompt_images(struct ifl_gen_job *j, const char *text, size_t n, int add_special,
                              const char *marker, char *err)
{
    int32_t pos[IFL_MAX_IMAGES_PER_REQUEST], rows[IFL_MAX_IMAGES_PER_REQUEST];
    /* each image's rows from its header (InternVL's tiles depend on its
     * size); a header that does not read takes the usual count here and
     * fails at enqueue, naming the image */
    struct ifl_vision_info vi;
    int have = ifl_executor_vision_info(j->ex, &vi) == 0;
    for (int k = 0; k < j->n_images; k++)
        if (!have ||
            ifl_executor_image_rows(j->ex, j->images[k].data, j->images[k].size, &rows[k], NULL))
            rows[k] = have ? vi.n_tokens : 1;
    int64_t cap = (int64_t)n + 8, got = 0;
    int32_t *ids = NULL;
    int rc = IFL_EFULL;
    for (int tries = 0; rc == IFL_EFULL && tries < 2; tries++) {
        free(ids);
        if (!(ids = malloc(sizeof(int32_t) * (size_t)(cap > 0 ? cap : 1))))
            return IFL_ENOMEM;
        rc = ifl_executor_tokenize_images(j->ex, text, (int64_t)n, marker, add_special, 1,
                                          j->n_images, rows, ids, cap, &got, pos, err);
        cap = got;
    }
    if (!rc && got > INT32_MAX)
        rc = ifl_err(err, IFL_EINVAL, "messages: too long");
    if (!rc)
        rc = ifl_gen_add_prompt(j, ids, (int32_t)got);
    free(ids);
    if (rc)
        return rc;
    for (int k = 0; k < j->n_images; k++)
        j->images[k].pos = pos[k];
    j->req.images = j->images;
    j->req.n_images = j->n_images;
    return 0;
}

int ifl_gen_set_lora_json(struct ifl_gen_job *j, json_t *v, char *param, char *err)
{
    snprintf(param, 64, "lora");
    if (!json_is_array(v))
        return ifl_err(err, IFL_EINVAL, "lora: must be a list of {\"id\", \"scale\"} objects");
    size_t n = json_array_size(v);
    if (n > IFL_LORA_MAX_PER_REQUEST)
        return ifl_err(err, IFL_EINVAL, "lora: %zu adapters, at most %d", n,
                       IFL_LORA_MAX_PER_REQUEST);
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(v, i);
        char e2[IFL_ERR_LEN] = "";
        int64_t id = 0;
        double sc = 1.0;
        if (!json_is_object(e))
            return ifl_err(err, IFL_EINVAL, "lora[%zu]: must be an object with id and scale", i);
        int got = ifl_json_get_int(e, "id", 0, INT32_MAX, &id, e2);
        if (got <= 0) {
            snprintf(param, 64, "lora[%zu].id", i);
            return ifl_err(err, IFL_EINVAL, "lora[%zu].id: %s", i,
                           got ? "must be an adapter id (an integer >= 0)" : "is required");
        }
        if (ifl_json_get_num(e, "scale", -1e6, 1e6, &sc, e2) < 0) {
            snprintf(param, 64, "lora[%zu].scale", i);
            return ifl_err(err, IFL_EINVAL, "lora[%zu].scale: must be a number from -1e6 to 1e6",
                           i);
        }
        j->lora[i] = (struct ifl_lora_ref){(int32_t)id, (float)sc};
    }
    j->n_lora = (int32_t)n;
    if (n == 0) /* none listed: the base alone, whatever the global scales (id 0: none) */
        j->lora[j->n_lora++] = (struct ifl_lora_ref){0, 0.0f};
    j->req.lora = j->lora;
    j->req.n_lora = j->n_lora;
    return 0;
}

void ifl_gen_set_lora_one(struct ifl_gen_job *j, int32_t id, float scale)
{
    j->lora[0] = (struct ifl_lora_ref){id, scale};
    j->n_lora = 1;
    j->req.lora = j->lora;
    j->req.n_lora = 1;
}

int ifl_gen_set_prediction(struct ifl_gen_job *j, const char *text, size_t n)
{
    int64_t cap = (int64_t)n + 8, got = 0;
    if (cap > 65536)
        cap = 65536; /* a longer prediction is used up to there */
    free(j->drafts);
    j->n_drafts = 0;
    if (!(j->drafts = malloc(sizeof(int32_t) * (size_t)cap)))
        return IFL_ENOMEM;
    /* the continuation's tokens: no BOS, special-token text as text */
    int rc = ifl_executor_tokenize(j->ex, text, (int64_t)n, 0, 0, j->drafts, cap, &got);
    if (rc && rc != IFL_EFULL)
        return rc;
    j->n_drafts = (int32_t)(got < cap ? got : cap);
    j->req.speculative.draft_tokens = j->drafts;
    j->req.speculative.n_draft_tokens = j->n_drafts;
    return 0;
}

int ifl_gen_add_stop(struct ifl_gen_job *j, const char *s)
{
    char **p = realloc(j->stops, sizeof(*p) * (size_t)(j->n_stops + 1));
    if (!p)
        return IFL_ENOMEM;
    j->stops = p;
    if (!(j->stops[j->n_stops] = strdup(s)))
        return IFL_ENOMEM;
    j->n_stops++;
    return 0;
}

int ifl_gen_add_bias(struct ifl_gen_job *j, int32_t id, float v)
{
    int n = j->req.n_logit_bias;
    int32_t *ids = realloc(j->bias_ids, sizeof(int32_t) * (size_t)(n + 1));
    if (!ids)
        return IFL_ENOMEM;
    j->bias_ids = ids;
    float *vals = realloc(j->bias_vals, sizeof(float) * (size_t)(n + 1));
    if (!vals)
        return IFL_ENOMEM;
    j->bias_vals = vals;
    j->bias_ids[n] = id;
    j->bias_vals[n] = v;
    j->req.n_logit_bias = n + 1;
    return 0;
}

int ifl_gen_set_guide(struct ifl_gen_job *j, int type, const char *text, size_t n,
                      const char *param, char *err)
{
    if (j->req.guide_type != IFL_GUIDE_NONE)
        return ifl_err(err, IFL_EINVAL,
                       "%s: only one of response_format, grammar and json_schema "
                       "may constrain the output (%s already does)",
                       param, j->guide_param);
    char *copy = malloc(n + 1);
    if (!copy)
        return ifl_err(err, IFL_ENOMEM, "out of memory");
    memcpy(copy, text, n);
    copy[n] = 0;
    j->guide_text = copy;
    j->guide_param = param;
    j->req.guide_type = type;
    j->req.guide_text = copy;
    return 0;
}

int ifl_gen_set_tgi_grammar(struct ifl_gen_job *j, json_t *gr, char *err)
{
    /* {"type": "json", "value": schema} or {"type": "regex", "value": "..."}
     * (and "json_schema" with value {"name", "schema"}) */
    const char *gt = json_is_object(gr) ? json_string_value(json_object_get(gr, "type")) : NULL;
    json_t *gv = json_is_object(gr) ? json_object_get(gr, "value") : NULL;
    if (!gt || !gv)
        return ifl_err(err, IFL_EINVAL,
                       "`grammar` must be an object with `type` (json, regex) and `value`");
    if (!strcmp(gt, "regex")) {
        if (!json_is_string(gv))
            return ifl_err(err, IFL_EINVAL,
                           "`grammar.value` must be a regular expression (a string)");
        return ifl_gen_set_guide(j, IFL_GUIDE_REGEX, json_string_value(gv), json_string_length(gv),
                                 "grammar", err);
    }
    if (strcmp(gt, "json") && strcmp(gt, "json_schema"))
        return ifl_err(err, IFL_EINVAL, "`grammar.type` must be json or regex; got '%.40s'", gt);
    if (!strcmp(gt, "json_schema"))
        gv = json_is_object(gv) ? json_object_get(gv, "schema") : NULL;
    if (!gv)
        return ifl_err(err, IFL_EINVAL, "`grammar.value.schema` is required");
    char *sch = ifl_json_schema_text(gv, "grammar", err);
    if (!sch)
        return IFL_EINVAL;
    int rc = ifl_gen_set_guide(j, IFL_GUIDE_JSON_SCHEMA, sch, strlen(sch), "grammar", err);
    free(sch);
    return rc;
}

int ifl_gen_apply(struct ifl_gen_job *j, const struct ifl_gen_params *p, char *param, char *err)
{
    struct ifl_server *s = j->srv;
    int32_t n_ctx = s->info.n_ctx, longest = 0;
    for (int i = 0; i < j->n_prompts; i++) {
        if (j->n_prompt[i] < 1) {
            strcpy(param, "prompt");
            return ifl_err(err, IFL_EINVAL, "the prompt is empty (no tokens)");
        }
        if (j->n_prompt[i] > longest)
            longest = j->n_prompt[i];
    }
    if (longest >= n_ctx) {
        strcpy(param, "prompt");
        return ifl_err(err, IFL_EINVAL,
                       "this model's maximum context length is %d tokens, but the prompt has %d "
                       "tokens; shorten it",
                       n_ctx, longest);
    }
    int64_t max_tokens = p->max_tokens < 0 ? n_ctx - longest : p->max_tokens;
    if (longest + max_tokens > n_ctx) {
        strcpy(param, "max_tokens");
        return ifl_err(err, IFL_EINVAL,
                       "this model's maximum context length is %d tokens, but %lld were requested "
                       "(%d in the prompt, %lld for the completion); reduce the prompt or "
                       "max_tokens",
                       n_ctx, (long long)(longest + max_tokens), longest, (long long)max_tokens);
    }
    if (p->n < 1 || p->n > s->cfg.exec.max_batch_size) {
        strcpy(param, "n");
        return ifl_err(err, IFL_EINVAL,
                       "n: %d samples asked, this server allows 1 to %d (--parallel)", p->n,
                       s->cfg.exec.max_batch_size);
    }
    int n_gen = p->best_of > p->n ? p->best_of : p->n;
    if (n_gen > s->cfg.exec.max_batch_size) {
        strcpy(param, "best_of");
        return ifl_err(err, IFL_EINVAL,
                       "best_of: %d samples asked, this server allows 1 to %d (--parallel)", n_gen,
                       s->cfg.exec.max_batch_size);
    }
    struct ifl_request *r = &j->req;
    j->no_output = max_tokens == 0;
    r->max_tokens = max_tokens == 0 ? 1 : (int32_t)max_tokens;
    r->streaming = p->stream;
    r->num_return_sequences = n_gen;
    j->n_per = n_gen;
    j->n_ret = p->n;
    j->score_prompt = p->score_prompt;
    j->prompt_top = p->score_prompt ? p->prompt_top : 0;
    r->output.return_context_logits = p->score_prompt;
    struct ifl_sampling_config *sc = &r->sampling;
    sc->temperature = (float)p->temperature;
    sc->top_p = (float)p->top_p;
    sc->top_k = (int32_t)p->top_k;
    sc->min_p = (float)p->min_p;
    sc->typical_p = (float)p->typical_p;
    sc->repetition_penalty = (float)p->rep_pen;
    sc->presence_penalty = (float)p->pres_pen;
    sc->frequency_penalty = (float)p->freq_pen;
    sc->min_tokens = (int32_t)p->min_tokens;
    sc->ignore_eos = p->ignore_eos;
    if (p->has_seed) {
        j->seed = (uint64_t)p->seed;
        j->seeded = 1;
    } else {
        uint64_t z = s->id_salt ^ (uint64_t)ifl_now_us() ^
                     (atomic_fetch_add_explicit(&s->next_id, 1, memory_order_relaxed) << 20);
        z = (z ^ (z >> 33)) * 0xff51afd7ed558ccdull;
        j->seed = (z ^ (z >> 33)) & 0x7fffffffffffull;
    }
    sc->seed = j->seed;
    r->output.return_log_probs = p->logprobs;
    r->output.top_log_probs = p->top_logprobs;
    r->output.return_perf_metrics = 1;
    r->priority = (float)p->priority;
    r->stop_strings = (const char *const *)j->stops;
    r->n_stop_strings = j->n_stops;
    r->logit_bias_ids = j->bias_ids;
    r->logit_bias_values = j->bias_vals;
    r->speculative.n_max = (int32_t)p->spec_n_max;
    r->speculative.n_min = (int32_t)p->spec_n_min;
    r->speculative.p_min = (float)p->spec_p_min;
    return 0;
}

int ifl_gen_start(struct ifl_gen_job *j, char *err)
{
    int n = j->n_prompts;
    const int32_t max_queue = j->srv->cfg.exec.max_queue_size;
    if (max_queue > 0 && n > max_queue) /* a full queue could never take it: not a 429 */
        return ifl_err(err, IFL_EINVAL,
                       "prompt: %d prompts in one request, but the queue takes at most %d "
                       "(--max-queue)",
                       n, max_queue);
    struct ifl_request *reqs = calloc((size_t)n, sizeof(*reqs));
    j->ids = calloc((size_t)n, sizeof(ifl_id));
    j->req_final = calloc((size_t)n, 1);
    j->ch = calloc((size_t)n * (size_t)j->n_per, sizeof(*j->ch));
    if (j->score_prompt)
        j->pscore = calloc((size_t)n, sizeof(*j->pscore));
    if (!reqs || !j->ids || !j->req_final || !j->ch || (j->score_prompt && !j->pscore)) {
        free(reqs);
        return ifl_err(err, IFL_ENOMEM, "out of memory");
    }
    for (int i = 0; i < n; i++) {
        reqs[i] = j->req;
        reqs[i].input_ids = j->prompts[i];
        reqs[i].n_input = j->n_prompt[i];
    }
    /* room in the pump's map first, so that once enqueued, registering
     * cannot fail */
    if (ifl_pump_reserve(j->srv, n)) {
        free(reqs);
        return ifl_err(err, IFL_ENOMEM, "out of memory");
    }
    int rc = ifl_enqueue_many(j->ex, reqs, n, j->ids, err);
    free(reqs);
    if (rc) {
        ifl_pump_unreserve(j->srv, n);
        if (rc == IFL_EFULL)
            atomic_fetch_add_explicit(&j->srv->m.rejected_full, 1, memory_order_relaxed);
        return rc;
    }
    j->enqueued = 1;
    ifl_pump_register(j);
    atomic_fetch_add_explicit(&j->srv->m.requests, 1, memory_order_relaxed);
    ifl_server_metrics_tokens(j->srv, ifl_gen_prompt_tokens(j), 0);
    return 0;
}

int ifl_gen_poll(struct ifl_gen_job *j, ifl_gen_resp_fn fn, void *user)
{
    if (j->finished)
        return 1;
    if (!j->enqueued) {
        j->finished = 1;
        return 1;
    }
    struct ifl_response *rs[32];
    for (;;) {
        int ended = 0;
        int32_t got = ifl_pump_take(j, rs, 32, &ended);
        if (got > 0) {
            if (ifl_gen_fold(j, rs, got, fn, user))
                return 1;
            continue;
        }
        if (!ended)
            return 0;
        /* the executor ended, or a response was lost: nothing more comes */
        j->finished = 1;
        if (!j->error_status) {
            j->error_status = IFL_ESTATE;
            snprintf(j->error_msg, sizeof j->error_msg, "the server is shutting down");
        }
        return 1;
    }
}

void ifl_gen_abort(struct ifl_gen_job *j)
{
    if (j->finished || !j->enqueued || j->cancelled)
        return;
    j->cancelled = 1;
    for (int i = 0; i < j->n_prompts; i++)
        if (!j->req_final[i])
            ifl_cancel(j->ex, j->ids[i]);
}

void ifl_gen_cancel(struct ifl_gen_job *j, int disconnected)
{
    if (j->finished || !j->enqueued)
        return;
    if (!j->cancelled && disconnected)
        ifl_server_metrics_disconnect(j->srv);
    ifl_gen_abort(j);
}

int64_t ifl_gen_completion_tokens(const struct ifl_gen_job *j)
{
    int64_t n = 0;
    for (int i = 0; i < j->n_prompts * j->n_per; i++)
        n += j->ch ? j->ch[i].n_tokens : 0;
    return n;
}

int64_t ifl_gen_prompt_tokens(const struct ifl_gen_job *j)
{
    int64_t n = 0;
    for (int i = 0; i < j->n_prompts; i++)
        n += j->n_prompt[i];
    return n;
}

size_t ifl_gen_piece(struct ifl_server *s, int32_t tok, char *buf, size_t cap)
{
    int64_t n = 0;
    ifl_executor *ex = atomic_load_explicit(&s->ex, memory_order_acquire);
    if (!ex || tok < 0 || ifl_executor_detokenize(ex, &tok, 1, 1, buf, (int64_t)cap, &n)) {
        if (cap)
            buf[0] = 0;
        return 0;
    }
    return (size_t)n;
}
