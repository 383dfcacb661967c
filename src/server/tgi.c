/*
 * The text-generation-inference routes: POST /generate, POST
 * /generate_stream, POST /tokenize, GET /info, and POST /detokenize, with
 * TGI's request parameters, response shapes and errors (422 with
 * {"error", "error_type"}), as its OpenAPI document describes them.
 *
 * Streaming sends one event per generated token ("data:{...}\n\n"). The
 * executor's text comes per response, not per token, so within one response
 * every token but the last carries empty text and the last carries all of it:
 * the concatenated token texts always equal generated_text, never split a
 * UTF-8 character and never show a stop sequence.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/utf8.h"
#include "server/internal.h"

static const char *tgi_finish(int f)
{
    switch (f) {
    case IFL_FINISH_END_ID:
        return "eos_token";
    case IFL_FINISH_STOP_WORDS:
        return "stop_sequence";
    default:
        return "length";
    }
}

static ifl_executor *executor(struct ifl_hconn *c)
{
    return atomic_load_explicit(&c->srv->ex, memory_order_acquire);
}

/* A control token: its text shows only with show_special. */
static int is_special(ifl_executor *ex, int32_t tok)
{
    char a[64], b[64];
    int64_t na = 0, nb = 0;
    ifl_executor_detokenize(ex, &tok, 1, 0, a, sizeof a, &na);
    ifl_executor_detokenize(ex, &tok, 1, 1, b, sizeof b, &nb);
    return na == 0 && nb > 0;
}

static json_t *token_json(struct ifl_server *s, ifl_executor *ex, int32_t tok, float lp,
                          const char *text, size_t n_text, int text_given)
{
    char piece[256];
    size_t pl = 0;
    if (!text_given) {
        pl = ifl_gen_piece(s, tok, piece, sizeof piece);
        text = piece;
        n_text = pl;
    }
    json_t *o = json_object();
    json_object_set_new(o, "id", json_integer(tok));
    json_object_set_new(o, "text", ifl_json_text(text, n_text));
    json_object_set_new(o, "logprob", json_real(isfinite(lp) ? (double)lp : -9999.0));
    json_object_set_new(o, "special", json_boolean(is_special(ex, tok)));
    return o;
}

static json_t *top_json(struct ifl_server *s, ifl_executor *ex, const struct ifl_top_logprob *t,
                        int32_t k)
{
    json_t *a = json_array();
    for (int32_t q = 0; q < k; q++)
        if (t[q].token >= 0)
            json_array_append_new(a, token_json(s, ex, t[q].token, t[q].logprob, NULL, 0, 0));
    return a;
}

struct tgi_req {
    int details, full_text, top_n;
    char *inputs;
    size_t n_inputs;
};

/* What `parameters` holds, read by TGI_FIELDS and then applied. */
struct tgi_params {
    struct ifl_gen_params g;
    int details, full_text, top_n, do_sample, watermark;
    int64_t truncate;
};

/* TGI's parameters with its ranges, defaults and error sentences
 * (docs/http.md, TGI parameters). Sampling is asked for by do_sample or by
 * any sampling parameter given (a temperature other than 1); otherwise the
 * request is greedy. best_of's bound is the server's --parallel, so it is
 * read apart. */
enum {
    TF_MAX_NEW_TOKENS,
    TF_TEMPERATURE,
    TF_TOP_K,
    TF_TOP_P,
    TF_TYPICAL_P,
    TF_REPETITION_PENALTY,
    TF_FREQUENCY_PENALTY,
    TF_SEED,
    TF_DO_SAMPLE,
    TF_DETAILS,
    TF_DECODER_INPUT_DETAILS,
    TF_RETURN_FULL_TEXT,
    TF_TOP_N_TOKENS,
    TF_WATERMARK,
    TF_TRUNCATE,
    TF_COUNT
};
/* clang-format off */
#define P struct tgi_params
#define NUM(nm, l, h, op, fld, d, m)                                                               \
    {.name = (nm), .type = IFL_JSON_NUM, .lo = (l), .hi = (h), .open = (op),                      \
     .at = offsetof(P, fld), .def = (d), .msg = (m)}
#define INT(ty, nm, l, h, fld, d, m)                                                               \
    {.name = (nm), .type = (ty), .ilo = (l), .ihi = (h), .at = offsetof(P, fld), .def = (d),      \
     .msg = (m)}
#define BOOL(nm, fld, m) {.name = (nm), .type = IFL_JSON_BOOL, .at = offsetof(P, fld), .msg = (m)}
enum { GT = IFL_JSON_ABOVE_LO, LT = IFL_JSON_BELOW_HI };
static const struct ifl_json_field TGI_FIELDS[TF_COUNT] = {
    [TF_MAX_NEW_TOKENS] = INT(IFL_JSON_I64, "max_new_tokens", 0, 1 << 24, g.max_tokens, 100,
                              "`max_new_tokens` must be an integer >= 0"),
    [TF_TEMPERATURE] = NUM("temperature", 0, 100, GT, g.temperature, 1,
                           "`temperature` must be strictly positive"),
    [TF_TOP_K] = INT(IFL_JSON_I64, "top_k", 1, 1 << 20, g.top_k, 0,
                     "`top_k` must be strictly positive"),
    [TF_TOP_P] = NUM("top_p", 0, 1, GT | LT, g.top_p, 1, "`top_p` must be > 0.0 and < 1.0"),
    [TF_TYPICAL_P] = NUM("typical_p", 0, 1, GT | LT, g.typical_p, 1,
                         "`typical_p` must be > 0.0 and < 1.0"),
    [TF_REPETITION_PENALTY] = NUM("repetition_penalty", 0, 100, GT, g.rep_pen, 1,
                                  "`repetition_penalty` must be strictly positive"),
    [TF_FREQUENCY_PENALTY] = NUM("frequency_penalty", -2, 2, 0, g.freq_pen, 0,
                                 "`frequency_penalty` must be >= -2.0 and <= 2.0"),
    [TF_SEED] = INT(IFL_JSON_I64, "seed", 0, INT64_MAX, g.seed, 0,
                    "`seed` must be a non-negative integer"),
    [TF_DO_SAMPLE] = BOOL("do_sample", do_sample, "`do_sample` must be a boolean"),
    [TF_DETAILS] = BOOL("details", details, "`details` must be a boolean"),
    [TF_DECODER_INPUT_DETAILS] = BOOL("decoder_input_details", g.score_prompt,
                                      "`decoder_input_details` must be a boolean"),
    [TF_RETURN_FULL_TEXT] = BOOL("return_full_text", full_text,
                                 "`return_full_text` must be a boolean"),
    [TF_TOP_N_TOKENS] = INT(IFL_JSON_INT, "top_n_tokens", 0, 20, top_n, 0,
                            "`top_n_tokens` must be an integer from 0 to 20"),
    /* a watermark of any kind is refused with the same sentence */
    [TF_WATERMARK] = BOOL("watermark", watermark, "`watermark` is not supported"),
    [TF_TRUNCATE] = INT(IFL_JSON_I64, "truncate", 1, 1 << 24, truncate, 0,
                        "`truncate` must be a strictly positive integer"),
};
/* clang-format on */
#undef P
#undef NUM
#undef INT
#undef BOOL

/* 0, or an HTTP status with err filled */
static int parse(struct ifl_hconn *c, json_t *b, struct ifl_gen_job *j, struct tgi_req *t,
                 int stream, char *err)
{
    struct ifl_server *s = c->srv;
    json_t *in = json_object_get(b, "inputs");
    if (!json_is_string(in))
        return ifl_err(err, 422, "`inputs` must be a string"), 422;
    if (json_string_length(in) == 0)
        return ifl_err(err, 422, "`inputs` cannot be empty"), 422;
    json_t *pp = json_object_get(b, "parameters");
    json_t *p = pp && !json_is_null(pp) ? pp : NULL;
    if (p && !json_is_object(p))
        return ifl_err(err, 422, "`parameters` must be an object"), 422;
    json_t *empty = json_object();
    if (!p)
        p = empty;
    struct tgi_params tp = {0};
    struct ifl_gen_params g = {0};
    int64_t v;
    int r, rc = 0, bad = 0;
    uint64_t seen = 0;
    char e2[IFL_ERR_LEN] = "";
#define BAD(...)                                                                                   \
    do {                                                                                           \
        ifl_err(err, 422, __VA_ARGS__);                                                            \
        rc = 422;                                                                                  \
        goto out;                                                                                  \
    } while (0)
#define SEEN(f) ((seen >> (f)) & 1)
    if (ifl_json_read_fields(p, TGI_FIELDS, TF_COUNT, &tp, &seen, &bad, e2))
        BAD("%s", e2);
    g = tp.g;
    g.n = 1;
    g.priority = 0.5;
    g.spec_n_max = g.spec_n_min = -1; /* the server's speculative decoding */
    g.spec_p_min = -1;
    const int has_max = SEEN(TF_MAX_NEW_TOKENS);
    int sampling = (SEEN(TF_TEMPERATURE) && g.temperature != 1.0) || SEEN(TF_TOP_K) ||
                   SEEN(TF_TOP_P) || SEEN(TF_TYPICAL_P) || tp.do_sample;
    g.has_seed = SEEN(TF_SEED);
    if (!sampling)
        g.temperature = 0; /* TGI: greedy unless sampling is asked for */
    json_t *stop = json_object_get(p, "stop");
    if (stop && !json_is_null(stop)) {
        if (!json_is_array(stop) || json_array_size(stop) > 64)
            BAD("`stop` must be a list of at most 64 strings");
        size_t i;
        json_t *e;
        json_array_foreach(stop, i, e)
        {
            if (!json_is_string(e) || json_string_length(e) > 256)
                BAD("`stop[%zu]` must be a string of at most 256 bytes", i);
            if (json_string_length(e) && ifl_gen_add_stop(j, json_string_value(e)))
                BAD("out of memory");
        }
    }
    t->details = tp.details;
    if (g.score_prompt && stream)
        BAD("`decoder_input_details` == true is not supported when streaming tokens");
    t->full_text = tp.full_text;
    t->top_n = tp.top_n;
    int max_best_of = s->cfg.exec.max_batch_size;
    if ((r = ifl_json_get_int(p, "best_of", 1, max_best_of, &v, e2)) < 0)
        BAD("`best_of` must be > 0 and <= %d (--parallel)", max_best_of);
    if (r && v > 1) {
        if (stream)
            BAD("`best_of` != 1 is not supported when streaming tokens");
        if (!sampling)
            BAD("you must use sampling when `best_of` is > 1");
        if (g.has_seed)
            BAD("`seed` must not be set when `best_of` > 1");
        g.best_of = (int)v;
    }
    if (tp.watermark)
        BAD("`watermark` is not supported");
    json_t *gr = json_object_get(p, "grammar");
    if (gr && !json_is_null(gr) && ifl_gen_set_tgi_grammar(j, gr, e2))
        BAD("%s", e2);
    json_t *ad = json_object_get(p, "adapter_id");
    if (ad && !json_is_null(ad)) {
        /* a LoRA adapter by name (or by the path it was loaded from), at
         * scale 1; "" is the base model */
        if (!json_is_string(ad))
            BAD("`adapter_id` must be a string");
        const char *name = json_string_value(ad);
        int32_t id = 0;
        if (name[0] && ifl_executor_find_lora(j->ex, name, &id)) {
            struct ifl_lora_info *li = NULL;
            int32_t n = 0, cap;
            if (ifl_executor_list_lora(j->ex, NULL, 0, &n) == IFL_EFULL &&
                (li = calloc((size_t)n, sizeof(*li)))) {
                cap = n;
                ifl_executor_list_lora(j->ex, li, cap, &n);
                for (int32_t i = 0; i < n && i < cap && !id; i++)
                    if (!strcmp(li[i].path, name))
                        id = li[i].id;
            }
            free(li);
            if (!id)
                BAD("`adapter_id` '%.100s' is not a loaded adapter (GET /lora-adapters lists them)",
                    name);
        }
        ifl_gen_set_lora_one(j, id, id ? 1.0f : 0.0f);
    }
    const int64_t truncate = tp.truncate;

    t->inputs = strndup(json_string_value(in), json_string_length(in));
    t->n_inputs = json_string_length(in);
    if (!t->inputs)
        BAD("out of memory");
    /* a vision model's images, as TGI takes them: ![](URL) in the text */
    struct ifl_vision_info vi;
    char *mtext = NULL, marker[64];
    size_t mlen = 0;
    if (ifl_executor_vision_info(j->ex, &vi) == 0) {
        ifl_server_image_marker(marker);
        if (ifl_server_md_images(s, j, t->inputs, t->n_inputs, marker, &mtext, &mlen, e2))
            BAD("%s", e2);
    }
    /* with truncate the input may be any length: its last tokens are
     * kept (the images' URLs do not count: they are not text) */
    if (!truncate && ifl_gen_text_too_long(s, mtext ? mlen : t->n_inputs, 1, e2)) {
        free(mtext);
        BAD("%s", e2);
    }
    if (mtext) {
        int r2 = ifl_gen_add_prompt_images(j, mtext, mlen, 1, marker, e2);
        free(mtext);
        if (r2)
            BAD("`inputs`: %s", r2 == IFL_ENOMEM ? "out of memory" : e2);
    } else if (ifl_gen_add_prompt_text(j, t->inputs, t->n_inputs, 1)) {
        BAD("`inputs` could not be tokenized");
    }
    if (truncate > 0 && j->n_prompt[0] > truncate && j->n_images)
        BAD("`truncate` %lld would cut a prompt with images (%d tokens); leave it out",
            (long long)truncate, j->n_prompt[0]);
    if (truncate > 0 && j->n_prompt[0] > truncate) {
        int32_t drop = j->n_prompt[0] - (int32_t)truncate;
        memmove(j->prompts[0], j->prompts[0] + drop, sizeof(int32_t) * (size_t)truncate);
        j->n_prompt[0] = (int32_t)truncate;
    }
    int32_t n_ctx = s->info.n_ctx;
    if (j->n_prompt[0] >= n_ctx)
        BAD("`inputs` must have less than %d tokens. Given: %d", n_ctx, j->n_prompt[0]);
    if (j->n_prompt[0] + g.max_tokens > n_ctx) {
        if (!has_max)
            g.max_tokens = n_ctx - j->n_prompt[0]; /* the default shrinks to fit */
        else
            BAD("`inputs` tokens + `max_new_tokens` must be <= %d. Given: %d `inputs` tokens and "
                "%lld `max_new_tokens`",
                n_ctx, j->n_prompt[0], (long long)g.max_tokens);
    }
    g.logprobs = 1;
    g.stream = stream;
    g.top_logprobs = t->top_n;
    char param[64];
    if (ifl_gen_apply(j, &g, param, e2))
        BAD("%s", e2);
    /* TGI reports the seed a sampled request used (the client's or one
     * drawn for it) and none for greedy decoding */
    j->seeded = sampling;
out:
    json_decref(empty);
    return rc;
#undef BAD
#undef SEEN
}

static json_t *generated_text(struct tgi_req *t, struct ifl_gen_choice *ch);

/* details of one sample: finish_reason, generated_tokens, seed, and with
 * full the prefill (prompt tokens with their log-probs when asked), tokens
 * and top_tokens */
static json_t *sample_json(struct ifl_server *s, ifl_executor *ex, struct ifl_gen_job *j, int ci,
                           int full)
{
    struct ifl_gen_choice *ch = &j->ch[ci];
    json_t *d = json_object();
    json_object_set_new(d, "finish_reason", json_string(tgi_finish(ch->finish)));
    json_object_set_new(d, "generated_tokens", json_integer(ch->n_tokens));
    /* sample q of a request is drawn with seed + q (the executor's rule) */
    json_object_set_new(
        d, "seed", j->seeded ? json_integer((json_int_t)(j->seed + (uint64_t)ci)) : json_null());
    if (!full) {
        json_object_set_new(d, "input_length", json_integer(j->n_prompt[0]));
        return d;
    }
    json_t *prefill = json_array();
    const struct ifl_gen_prompt_scores *ps = j->pscore ? &j->pscore[0] : NULL;
    if (ps && ps->n == j->n_prompt[0]) {
        char piece[256];
        for (int32_t i = 0; i < ps->n; i++) {
            int32_t tok = j->prompts[0][i];
            size_t pl = ifl_gen_piece(s, tok, piece, sizeof piece);
            json_t *o = json_object();
            json_object_set_new(o, "id", json_integer(tok));
            json_object_set_new(o, "text", ifl_json_text(piece, pl));
            json_object_set_new(
                o, "logprob",
                isnan(ps->lps[i]) ? json_null()
                                  : json_real(isfinite(ps->lps[i]) ? (double)ps->lps[i] : -9999.0));
            json_array_append_new(prefill, o);
        }
    }
    json_object_set_new(d, "prefill", prefill);
    json_t *toks = json_array();
    json_t *tops = json_array();
    for (int32_t i = 0; i < ch->n_tokens; i++) {
        json_array_append_new(
            toks, token_json(s, ex, ch->tokens[i], ch->lps ? ch->lps[i] : 0, NULL, 0, 0));
        if (ch->n_top > 0 && ch->tops)
            json_array_append_new(tops,
                                  top_json(s, ex, &ch->tops[(size_t)i * ch->n_top], ch->n_top));
    }
    json_object_set_new(d, "tokens", toks);
    if (ch->n_top > 0)
        json_object_set_new(d, "top_tokens", tops);
    else
        json_decref(tops);
    return d;
}

/* details of the returned sample, and with best_of the others under
 * best_of_sequences (each with its generated_text) */
static json_t *details_json(struct ifl_server *s, ifl_executor *ex, struct ifl_gen_job *j,
                            struct tgi_req *t, int full)
{
    int best = ifl_gen_choice_at(j, 0);
    json_t *d = sample_json(s, ex, j, best, full);
    if (full && j->n_per > 1) {
        json_t *others = json_array();
        for (int q = 0; q < j->n_per; q++) {
            if (q == best)
                continue;
            json_t *o = json_object();
            json_object_set_new(o, "generated_text", generated_text(t, &j->ch[q]));
            json_t *sj = sample_json(s, ex, j, q, 1);
            json_object_update(o, sj);
            json_decref(sj);
            json_array_append_new(others, o);
        }
        json_object_set_new(d, "best_of_sequences", others);
    }
    return d;
}

static json_t *generated_text(struct tgi_req *t, struct ifl_gen_choice *ch)
{
    struct ifl_buf b = {0};
    if (t->full_text)
        ifl_buf_add(&b, t->inputs, t->n_inputs);
    ifl_buf_add(&b, ch->text.p ? ch->text.p : "", ch->text.len);
    json_t *j = ifl_json_text(b.p ? b.p : "", b.len);
    ifl_buf_free(&b);
    return j;
}

/* ---- streaming ---- */

struct tgi_stream {
    struct ifl_server *srv;
    ifl_executor *ex;
    struct ifl_stream *st;
    struct tgi_req t;
    int64_t index;
};

/* TGI's events have no space after "data:" */
static void sse(struct ifl_buf *out, json_t *o)
{
    ifl_sse_event(out, "data:", o);
}

static void tgi_on_resp(void *user, int choice, const struct ifl_response *r)
{
    (void)choice;
    struct tgi_stream *ts = user;
    struct ifl_gen_job *j = ts->st->job;
    if (r->n_results < 1)
        return;
    const struct ifl_sequence_result *res = &r->results[0];
    int final = r->is_final;
    /* cancelled at shutdown: TGI has no finish reason for that, so the
     * tokens made go out as they are and tgi_on_end closes the stream with
     * TGI's incomplete_generation error, not with a made-up last token */
    int aborted = final && res->finish_reason == IFL_FINISH_CANCELLED;
    /* when the tokens' pieces spell the response's text exactly, each token
     * gets its own piece; otherwise (held-back or cut text) the last gets all */
    size_t *cut = calloc((size_t)res->n_tokens + 1, sizeof(size_t));
    int split = cut != NULL && res->n_tokens > 1;
    size_t at = 0;
    char piece[256];
    for (int32_t i = 0; split && i < res->n_tokens; i++) {
        size_t pl = ifl_gen_piece(ts->srv, res->tokens[i], piece, sizeof piece);
        split = at + pl <= (size_t)res->n_text && !memcmp(res->text + at, piece, pl) &&
                ifl_utf8_valid(piece, pl);
        at += pl;
        cut[i + 1] = at;
    }
    split = split && at == (size_t)res->n_text;
    for (int32_t i = 0; i < res->n_tokens; i++) {
        int last = i == res->n_tokens - 1;
        json_t *ev = json_object();
        json_object_set_new(ev, "index", json_integer(++ts->index));
        const char *text = last ? (res->text ? res->text : "") : "";
        size_t n_text = last ? (size_t)res->n_text : 0;
        if (split) {
            text = res->text + cut[i];
            n_text = cut[i + 1] - cut[i];
        }
        json_object_set_new(ev, "token",
                            token_json(ts->srv, ts->ex, res->tokens[i],
                                       res->log_probs ? res->log_probs[i] : 0, text, n_text, 1));
        json_object_set_new(
            ev, "top_tokens",
            res->n_top > 0 && res->top_log_probs
                ? top_json(ts->srv, ts->ex, &res->top_log_probs[(size_t)i * res->n_top], res->n_top)
                : json_null());
        if (final && last && !r->status && !aborted) {
            json_object_set_new(ev, "generated_text", generated_text(&ts->t, &j->ch[0]));
            json_object_set_new(ev, "details", details_json(ts->srv, ts->ex, j, &ts->t, 0));
        } else {
            json_object_set_new(ev, "generated_text", json_null());
            json_object_set_new(ev, "details", json_null());
        }
        sse(&ts->st->out, ev);
    }
    free(cut);
    if (final && res->n_tokens == 0 && !r->status && !aborted) {
        /* the end came with no new token (end token or stop string): close
         * with an empty-text event that carries the totals */
        json_t *ev = json_object();
        json_object_set_new(ev, "index", json_integer(++ts->index));
        json_t *tok = json_object();
        json_object_set_new(tok, "id", json_integer(ts->srv->info.eos_id));
        json_object_set_new(tok, "text",
                            ifl_json_text(res->text ? res->text : "", (size_t)res->n_text));
        json_object_set_new(tok, "logprob", json_real(0.0));
        json_object_set_new(tok, "special", json_true());
        json_object_set_new(ev, "token", tok);
        json_object_set_new(ev, "top_tokens", json_null());
        json_object_set_new(ev, "generated_text", generated_text(&ts->t, &j->ch[0]));
        json_object_set_new(ev, "details", details_json(ts->srv, ts->ex, j, &ts->t, 0));
        sse(&ts->st->out, ev);
    }
}

/* The reply to a request cancelled at shutdown: TGI's error for a
 * generation that stopped before it finished, with how far it got. */
static json_t *incomplete_json(const struct ifl_gen_job *j)
{
    char msg[200];
    snprintf(msg, sizeof msg,
             "Incomplete generation: the server is shutting down and cancelled the request "
             "after %d generated tokens",
             j->ch ? j->ch[ifl_gen_choice_at(j, 0)].n_tokens : 0);
    return json_pack("{s:s,s:s}", "error", msg, "error_type", "incomplete_generation");
}

static int was_aborted(const struct ifl_gen_job *j)
{
    for (int q = 0; j->ch && q < j->n_prompts * j->n_per; q++)
        if (j->ch[q].finish == IFL_FINISH_CANCELLED)
            return 1;
    return 0;
}

static void tgi_on_end(struct ifl_stream *st)
{
    struct ifl_gen_job *j = st->job;
    if (j->error_status && !j->cancelled) {
        json_t *e = json_object();
        json_object_set_new(e, "error", ifl_json_text(j->error_msg, strlen(j->error_msg)));
        json_object_set_new(e, "error_type", json_string("generation"));
        sse(&st->out, e);
    } else if (!j->error_status && was_aborted(j)) {
        sse(&st->out, incomplete_json(j));
    }
}

static void tgi_stream_free(void *user)
{
    struct tgi_stream *ts = user;
    if (!ts)
        return;
    free(ts->t.inputs);
    free(ts);
}

static int whole_done(struct ifl_hconn *c, struct ifl_gen_job *j, void *user)
{
    struct tgi_req *t = user;
    if (j->error_status)
        return ifl_http_reply_tgi_error(c, j->error_status == IFL_ESTATE ? 503 : 500, "generation",
                                        j->error_msg);
    if (was_aborted(j))
        return ifl_http_reply_json(c, 503, incomplete_json(j));
    json_t *o = json_object();
    json_object_set_new(o, "generated_text", generated_text(t, &j->ch[ifl_gen_choice_at(j, 0)]));
    if (t->details)
        json_object_set_new(o, "details", details_json(c->srv, j->ex, j, t, 1));
    return ifl_http_reply_json(c, 200, o);
}

static void whole_free(void *user)
{
    struct tgi_req *t = user;
    free(t->inputs);
    free(t);
}

static int generate(struct ifl_hconn *c, json_t *body, int stream)
{
    struct ifl_server *s = c->srv;
    ifl_executor *ex = executor(c);
    struct tgi_req t = {0};
    char err[IFL_ERR_LEN] = "";
    struct ifl_gen_job *j = ifl_gen_job_new(s, ex);
    if (!j)
        return ifl_http_reply_tgi_error(c, 500, "generation", "out of memory");
    int st = parse(c, body, j, &t, stream, err);
    if (!st && ifl_gen_start(j, err) == IFL_EFULL)
        st = 429;
    else if (!st && !j->enqueued)
        st = 422;
    if (st) {
        ifl_gen_job_free(j);
        free(t.inputs);
        if (st == 429)
            return ifl_http_reply_tgi_error(c, 429, "overloaded",
                                            "Model is overloaded (request queue full)");
        return ifl_http_reply_tgi_error(c, st, "validation", err);
    }
    if (stream) {
        struct ifl_stream *sp = calloc(1, sizeof(*sp));
        struct tgi_stream *ts = calloc(1, sizeof(*ts));
        if (!sp || !ts) {
            free(sp);
            free(ts);
            ifl_gen_cancel(j, 0);
            ifl_gen_job_free(j);
            free(t.inputs);
            return ifl_http_reply_tgi_error(c, 500, "generation", "out of memory");
        }
        ts->srv = s;
        ts->ex = ex;
        ts->st = sp;
        ts->t = t;
        sp->job = j;
        sp->user = ts;
        sp->on_resp = tgi_on_resp;
        sp->on_end = tgi_on_end;
        sp->free_user = tgi_stream_free;
        return ifl_http_reply_stream(c, sp);
    }
    /* the reply is built when the job ends (whole_done) */
    struct tgi_req *tc = malloc(sizeof(*tc));
    if (!tc) {
        ifl_gen_job_free(j);
        free(t.inputs);
        return ifl_http_reply_tgi_error(c, 500, "generation", "out of memory");
    }
    *tc = t;
    return ifl_http_reply_when_done(c, j, whole_done, tc, whole_free);
}

int ifl_tgi_generate(struct ifl_hconn *c, json_t *body)
{
    return generate(c, body, 0);
}

int ifl_tgi_generate_stream(struct ifl_hconn *c, json_t *body)
{
    return generate(c, body, 1);
}

int ifl_tgi_generate_any(struct ifl_hconn *c, json_t *body)
{
    json_t *st = json_object_get(body, "stream");
    if (st && !json_is_null(st) && !json_is_boolean(st))
        return ifl_http_reply_tgi_error(c, 422, "validation", "`stream` must be a boolean");
    return generate(c, body, json_is_true(st));
}

int ifl_tgi_tokenize(struct ifl_hconn *c, json_t *b)
{
    struct ifl_server *s = c->srv;
    ifl_executor *ex = executor(c);
    json_t *in = json_object_get(b, "inputs");
    if (!json_is_string(in))
        return ifl_http_reply_tgi_error(c, 422, "validation", "`inputs` must be a string");
    int add = 1;
    char e2[IFL_ERR_LEN];
    json_t *pp = json_object_get(b, "parameters");
    if (json_is_object(pp) && ifl_json_get_bool(pp, "add_special_tokens", &add, e2) < 0)
        return ifl_http_reply_tgi_error(c, 422, "validation",
                                        "`add_special_tokens` must be a boolean");
    if (ifl_json_get_bool(b, "add_special_tokens", &add, e2) < 0)
        return ifl_http_reply_tgi_error(c, 422, "validation",
                                        "`add_special_tokens` must be a boolean");
    struct ifl_gen_job *j = ifl_gen_job_new(s, ex);
    if (!j || ifl_gen_add_prompt_text(j, json_string_value(in), json_string_length(in), add)) {
        ifl_gen_job_free(j);
        return ifl_http_reply_tgi_error(c, 500, "tokenizer", "tokenization failed");
    }
    /* offsets are where each token's text falls in the concatenated plain
     * texts, which equal the input (byte-level BPE) or, for SentencePiece,
     * the input after the space it puts in front: then every offset moves
     * back by one, so that they index the input itself */
    const char *text = json_string_value(in);
    int64_t len = (int64_t)json_string_length(in), n = j->n_prompt[0], total = 0;
    int64_t *np = malloc(sizeof(int64_t) * (size_t)(n ? n : 1));
    char *cat = malloc((size_t)len + 2);
    if (!np || !cat) {
        free(np);
        free(cat);
        ifl_gen_job_free(j);
        return ifl_http_reply_tgi_error(c, 500, "tokenizer", "out of memory");
    }
    char plain[256], piece[256];
    for (int64_t i = 0; i < n; i++) {
        np[i] = 0;
        ifl_executor_detokenize(ex, &j->prompts[0][i], 1, 0, plain, sizeof plain, &np[i]);
        if (np[i] > (int64_t)sizeof plain)
            np[i] = (int64_t)sizeof plain; /* one token's text never is; keep the copy in bounds */
        if (total + np[i] <= len + 1)
            memcpy(cat + total, plain, (size_t)np[i]);
        total += np[i];
    }
    const int64_t lead =
        total == len + 1 && cat[0] == ' ' && memcmp(cat + 1, text, (size_t)len) == 0;
    free(cat);
    /* the answer is bounded like a request body (--max-body-bytes): each
     * entry costs at least its piece and 36 bytes of JSON, so a text that
     * would answer with more is refused before the reply is built */
    const int64_t limit = s->cfg.max_body_bytes;
    int64_t size = 2;
    json_t *arr = json_array();
    for (int64_t i = 0, off = -lead; i < n; off += np[i], i++) {
        int32_t tok = j->prompts[0][i];
        size_t pl = ifl_gen_piece(s, tok, piece, sizeof piece);
        size += 36 + (int64_t)pl;
        if (size > limit) {
            json_decref(arr);
            free(np);
            ifl_gen_job_free(j);
            char msg[256];
            snprintf(msg, sizeof msg,
                     "the answer for %lld tokens would exceed %lld bytes (--max-body-bytes); "
                     "tokenize less text at a time",
                     (long long)n, (long long)limit);
            return ifl_http_reply_tgi_error(c, 413, "validation", msg);
        }
        int64_t start = off < 0 ? 0 : off < len ? off : len;
        int64_t stop = off + np[i] < 0 ? 0 : off + np[i] < len ? off + np[i] : len;
        json_t *o = json_object();
        json_object_set_new(o, "id", json_integer(tok));
        json_object_set_new(o, "text", ifl_json_text(piece, pl));
        json_object_set_new(o, "start", json_integer(start));
        json_object_set_new(o, "stop", json_integer(stop));
        json_array_append_new(arr, o);
    }
    free(np);
    ifl_gen_job_free(j);
    char *txt = json_dumps(arr, JSON_COMPACT);
    json_decref(arr);
    if (!txt)
        return ifl_http_reply_tgi_error(c, 500, "tokenizer", "out of memory");
    size_t tl = strlen(txt);
    int rc;
    if ((int64_t)tl > limit) { /* escapes and long ids: past the estimate */
        char msg[256];
        snprintf(msg, sizeof msg,
                 "the answer for %lld tokens would be %zu bytes, over %lld (--max-body-bytes); "
                 "tokenize less text at a time",
                 (long long)n, tl, (long long)limit);
        rc = ifl_http_reply_tgi_error(c, 413, "validation", msg);
    } else {
        rc = ifl_http_reply(c, 200, "application/json", txt, tl);
    }
    free(txt);
    return rc;
}

int ifl_tgi_detokenize(struct ifl_hconn *c, json_t *b)
{
    struct ifl_server *s = c->srv;
    ifl_executor *ex = executor(c);
    json_t *toks = json_object_get(b, "tokens");
    if (!json_is_array(toks))
        return ifl_http_reply_tgi_error(c, 422, "validation",
                                        "`tokens` must be a list of token ids");
    int skip = 1;
    char e2[IFL_ERR_LEN];
    if (ifl_json_get_bool(b, "skip_special_tokens", &skip, e2) < 0)
        return ifl_http_reply_tgi_error(c, 422, "validation",
                                        "`skip_special_tokens` must be a boolean");
    size_t n = json_array_size(toks), i;
    int32_t *ids = malloc(sizeof(int32_t) * (n ? n : 1));
    if (!ids)
        return ifl_http_reply_tgi_error(c, 500, "tokenizer", "out of memory");
    json_t *t;
    json_array_foreach(toks, i, t)
    {
        json_int_t id = json_is_integer(t) ? json_integer_value(t) : -1;
        if (id < 0 || id >= s->info.n_vocab) {
            free(ids);
            char msg[128];
            snprintf(msg, sizeof msg, "`tokens[%zu]` must be a token id from 0 to %d", i,
                     s->info.n_vocab - 1);
            return ifl_http_reply_tgi_error(c, 422, "validation", msg);
        }
        ids[i] = (int32_t)id;
    }
    int64_t len = 0;
    char one[1];
    ifl_executor_detokenize(ex, ids, (int64_t)n, !skip, one, 1, &len);
    char *buf = malloc((size_t)len + 1);
    if (!buf || ifl_executor_detokenize(ex, ids, (int64_t)n, !skip, buf, len + 1, &len)) {
        free(ids);
        free(buf);
        return ifl_http_reply_tgi_error(c, 500, "tokenizer", "out of memory");
    }
    free(ids);
    json_t *o = json_object();
    json_object_set_new(o, "text", ifl_json_text(buf, (size_t)len));
    free(buf);
    return ifl_http_reply_json(c, 200, o);
}

int ifl_tgi_info(struct ifl_hconn *c, json_t *body)
{
    (void)body;
    struct ifl_server *s = c->srv;
    const struct ifl_executor_config *e = &s->cfg.exec;
    json_t *o = json_object();
    json_object_set_new(o, "model_id", json_string(s->model_name));
    json_object_set_new(o, "model_sha", json_null());
    json_object_set_new(o, "model_dtype", json_string("gguf"));
    json_object_set_new(o, "model_device_type", json_string("cpu"));
    json_object_set_new(o, "model_pipeline_tag", json_string("text-generation"));
    json_object_set_new(o, "architecture", json_string(s->info.architecture));
    json_object_set_new(
        o, "max_concurrent_requests",
        json_integer(e->max_queue_size > 0 ? e->max_queue_size + e->max_batch_size : 0));
    json_object_set_new(o, "max_best_of", json_integer(e->max_batch_size));
    json_object_set_new(o, "max_stop_sequences", json_integer(64));
    json_object_set_new(o, "max_input_tokens", json_integer(s->info.n_ctx - 1));
    json_object_set_new(o, "max_input_length", json_integer(s->info.n_ctx - 1));
    json_object_set_new(o, "max_total_tokens", json_integer(s->info.n_ctx));
    json_object_set_new(o, "max_batch_size", json_integer(e->max_batch_size));
    json_object_set_new(o, "max_batch_total_tokens", json_integer(s->info.kv_cache_tokens));
    json_object_set_new(o, "max_client_batch_size", json_integer(64));
    /* tensor parallelism: the ranks the model is split over (TGI's shards) */
    json_object_set_new(o, "num_shard", json_integer(s->info.tp_ranks));
    json_object_set_new(o, "sharded", json_boolean(s->info.tp_ranks > 1));
    json_object_set_new(o, "validation_workers", json_integer(1));
    json_object_set_new(o, "router", json_string("inflight"));
    json_object_set_new(o, "version", json_string(ifl_version()));
    json_object_set_new(o, "sha", json_null());
    json_object_set_new(o, "docker_label", json_null());
    return ifl_http_reply_json(c, 200, o);
}
