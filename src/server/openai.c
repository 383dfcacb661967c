/*
 * The OpenAI routes: POST /v1/completions, POST /v1/chat/completions,
 * GET /v1/models, with the request parameters, response objects, stream
 * chunks and error bodies of https://platform.openai.com/docs/api-reference
 * (the shapes the official clients parse).
 *
 * Choices are ordered prompt-major: with prompts P and n samples, choice
 * index = p * n + sample. Streamed replies are Server-Sent Events: one
 * `data: {chunk}` per executor response that carries text (or log-probs, or a
 * finish), an optional usage chunk, then `data: [DONE]`.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/err.h"
#include "core/timeutil.h"
#include "server/internal.h"

#define MAX_PROMPTS 64

static const char *finish_name(int f)
{
    switch (f) {
    case IFL_FINISH_END_ID:
    case IFL_FINISH_STOP_WORDS:
        return "stop";
    case IFL_FINISH_LENGTH:
    case IFL_FINISH_TIMED_OUT:
        return "length";
    case IFL_FINISH_CANCELLED:
        return "abort";
    default:
        return NULL;
    }
}

/* ---- parameters shared by both routes ---- */

struct oai_req {
    const char *model; /* the name responses show (one of srv->names, lives as long) */
    int chat, stream, include_usage, echo;
    int full_text;      /* TGI's return_full_text (completions: echo unless echo is given) */
    int parse;          /* chat: IFL_REPLY_* how replies are read for tool calls (0: not) */
    int think;          /* chat: a <think> block is split from the answer (1), and the
                           reply begins inside it (2: the prompt opened it); 0: not */
    int think_mistral;  /* the block is Mistral's [THINK] ... [/THINK] */
    json_t *tool_names; /* the request's functions, by name (owned), when parse */
    char prefill[128];  /* the text the prompt ends with and the reply continues
                           (harmony's header of a forced call), or "" */
    int want_lp;        /* log-probs asked */
    int top;            /* alternatives per token */
    struct ifl_gen_params p;
    char **echo_text; /* completions: per prompt, the prompt as text */
    size_t *echo_len;
    /* fields read by the tables, then applied */
    const char *model_asked, *user;
    int do_sample, watermark;
    int64_t max_new_tokens;
};

static void oai_req_free(struct oai_req *q, int n_prompts)
{
    (void)n_prompts;
    json_decref(q->tool_names);
    q->tool_names = NULL;
    if (q->echo_text)
        for (int i = 0; i < MAX_PROMPTS; i++)
            free(q->echo_text[i]);
    free(q->echo_text);
    free(q->echo_len);
}

/* The scalar parameters both routes take, with OpenAI's ranges and
 * defaults (docs/http.md), vLLM's extensions, and TGI's names as Hugging
 * Face's client forwards them (parse_tgi_fields). A later field wins over
 * an earlier one with the same target (max_completion_tokens over
 * max_tokens). */
/* the fields whose presence counts come first, at these indices */
enum { OF_MODEL, OF_TEMPERATURE, OF_MAX_NEW_TOKENS, OF_SEED };
#define Q struct oai_req
/* clang-format off */
static const struct ifl_json_field OAI_FIELDS[] = {
    [OF_MODEL] = IFL_FIELD_STR(Q, "model", model_asked),
    [OF_TEMPERATURE] = IFL_FIELD_NUM(Q, "temperature", 0, 2, p.temperature, 1),
    [OF_MAX_NEW_TOKENS] = IFL_FIELD_I64(Q, "max_new_tokens", 0, 1 << 24, max_new_tokens, 0),
    [OF_SEED] = IFL_FIELD_I64(Q, "seed", INT64_MIN, INT64_MAX, p.seed, 0),
    IFL_FIELD_I64(Q, "max_tokens", 0, 1 << 24, p.max_tokens, -1),
    IFL_FIELD_I64(Q, "max_completion_tokens", 0, 1 << 24, p.max_tokens, -1),
    IFL_FIELD_BOOL(Q, "do_sample", do_sample, 1),
    IFL_FIELD_NUM(Q, "top_p", 0, 1, p.top_p, 1),
    IFL_FIELD_INT(Q, "n", 1, 128, p.n, 1),
    IFL_FIELD_BOOL(Q, "stream", stream, 0),
    IFL_FIELD_NUM(Q, "presence_penalty", -2, 2, p.pres_pen, 0),
    IFL_FIELD_NUM(Q, "frequency_penalty", -2, 2, p.freq_pen, 0),
    IFL_FIELD_STR(Q, "user", user),
    IFL_FIELD_BOOL(Q, "return_full_text", full_text, 0),
    /* a watermark of any kind is refused with the same sentence */
    {.name = "watermark", .type = IFL_JSON_BOOL, .at = offsetof(Q, watermark),
     .msg = "watermark: not supported by this server"},
    /* vLLM's extensions */
    IFL_FIELD_I64(Q, "top_k", -1, 1 << 20, p.top_k, 0),
    IFL_FIELD_NUM(Q, "min_p", 0, 1, p.min_p, 0),
    IFL_FIELD_NUM(Q, "typical_p", 1e-6, 1, p.typical_p, 1),
    IFL_FIELD_NUM(Q, "repetition_penalty", 1e-3, 100, p.rep_pen, 1),
    IFL_FIELD_I64(Q, "min_tokens", 0, 1 << 24, p.min_tokens, 0),
    IFL_FIELD_BOOL(Q, "ignore_eos", p.ignore_eos, 0),
    IFL_FIELD_NUM(Q, "priority", 0, 1, p.priority, 0.5),
    /* llama-server's speculative decoding fields, dotted names and all */
    IFL_FIELD_I64(Q, "speculative.n_max", 0, 32, p.spec_n_max, -1),
    IFL_FIELD_I64(Q, "speculative.n_min", 0, 32, p.spec_n_min, -1),
    IFL_FIELD_NUM(Q, "speculative.p_min", 0, 1, p.spec_p_min, -1),
};
/* completions only: logprobs is the number of alternatives (want_lp when
 * given); echo defaults to return_full_text (applied after reading) */
enum { CF_ECHO, CF_LOGPROBS, CF_BEST_OF };
static const struct ifl_json_field COMPLETION_FIELDS[] = {
    [CF_ECHO] = IFL_FIELD_BOOL(Q, "echo", echo, 0),
    [CF_LOGPROBS] = IFL_FIELD_INT(Q, "logprobs", 0, 20, top, 0),
    [CF_BEST_OF] = IFL_FIELD_INT(Q, "best_of", 1, 128, p.best_of, 0),
};
/* chat only */
enum { HF_LOGPROBS, HF_TOP_LOGPROBS };
static const struct ifl_json_field CHAT_FIELDS[] = {
    [HF_LOGPROBS] = IFL_FIELD_BOOL(Q, "logprobs", want_lp, 0),
    [HF_TOP_LOGPROBS] = IFL_FIELD_INT(Q, "top_logprobs", 0, 20, top, 0),
};
/* clang-format on */
#undef Q
#define N_OF(a) ((int)(sizeof(a) / sizeof((a)[0])))

/* Reads table f of q's fields from b: 0, or 400 with param and err. */
static int read_fields(json_t *b, const struct ifl_json_field *f, int n, struct oai_req *q,
                       uint64_t *seen, char *param, char *err)
{
    int bad = 0;
    if (!ifl_json_read_fields(b, f, n, q, seen, &bad, err))
        return 0;
    snprintf(param, 64, "%s", f[bad].name);
    return 400;
}

/* TGI's parameters as Hugging Face's client forwards them to these routes
 * (its textGeneration sends `parameters` flattened, max_new_tokens renamed
 * max_tokens). Each is honoured or refused, never silently dropped when it
 * would change the output: do_sample false is greedy when no temperature is
 * given (TGI's default is greedy); max_new_tokens stands for max_tokens when
 * neither OpenAI name is given; return_full_text is completions' echo;
 * grammar may be TGI's {"type", "value"} object; truncate, watermark and
 * adapter_id are refused; details, decoder_input_details and top_n_tokens
 * shape TGI's reply only and are ignored here (logprobs and top_logprobs are
 * the OpenAI way). The scalars were read with OAI_FIELDS. 0, or fills
 * param/err and returns an HTTP status. */
static int parse_tgi_fields(json_t *b, struct oai_req *q, uint64_t seen, struct ifl_gen_job *j,
                            char *param, char *err)
{
    struct ifl_gen_params *p = &q->p;
#define FAIL(name)                                                                                 \
    do {                                                                                           \
        snprintf(param, 64, "%s", name);                                                           \
        return 400;                                                                                \
    } while (0)
    if (!q->do_sample && !(seen >> OF_TEMPERATURE & 1))
        p->temperature = 0;
    if ((seen >> OF_MAX_NEW_TOKENS & 1) && p->max_tokens < 0)
        p->max_tokens = q->max_new_tokens;
    if (q->full_text && q->chat) {
        ifl_err(err, IFL_EINVAL, "return_full_text: not on chat completions");
        FAIL("return_full_text");
    }
    if (q->watermark) {
        ifl_err(err, IFL_EUNSUPPORTED, "watermark: not supported by this server");
        FAIL("watermark");
    }
    json_t *x = json_object_get(b, "truncate");
    if (x && !json_is_null(x)) {
        ifl_err(err, IFL_EUNSUPPORTED, "truncate: only on the TGI routes (/generate)");
        FAIL("truncate");
    }
    x = json_object_get(b, "adapter_id");
    if (x && !json_is_null(x)) {
        ifl_err(err, IFL_EUNSUPPORTED, "adapter_id: not supported by this server");
        FAIL("adapter_id");
    }
    json_t *gr = json_object_get(b, "grammar");
    if (json_is_object(gr) && ifl_gen_set_tgi_grammar(j, gr, err))
        FAIL("grammar");
    return 0;
#undef FAIL
}

/* 0, or fills param/err and returns an HTTP status */
/* OpenAI's Predicted Outputs: {"type": "content", "content": text or
 * [{"type": "text", "text": ...}, ...]}, the text the reply is expected to
 * repeat for the most part (a file being edited). Its tokens become the
 * requests' client drafts: what matches is checked many tokens per step;
 * the output is the same as without it. 0, or 400 with param and err. */
static int parse_prediction(json_t *b, struct ifl_gen_job *j, char *param, char *err)
{
    json_t *pr = json_object_get(b, "prediction");
    if (!pr || json_is_null(pr))
        return 0;
    snprintf(param, 64, "prediction");
    json_t *ty = json_object_get(pr, "type"), *ct = json_object_get(pr, "content");
    if (!json_is_object(pr) || !json_is_string(ty) || strcmp(json_string_value(ty), "content"))
        return ifl_err(err, IFL_EINVAL,
                       "prediction: must be an object with type \"content\" and its content"),
               400;
    struct ifl_buf text = {0};
    if (json_is_string(ct)) {
        ifl_buf_add(&text, json_string_value(ct), json_string_length(ct));
    } else if (json_is_array(ct)) {
        size_t i;
        json_t *part;
        json_array_foreach(ct, i, part)
        {
            json_t *pt = json_object_get(part, "type"), *tx = json_object_get(part, "text");
            if (!json_is_string(pt) || strcmp(json_string_value(pt), "text") ||
                !json_is_string(tx)) {
                ifl_buf_free(&text);
                return ifl_err(err, IFL_EINVAL,
                               "prediction.content[%zu]: must be {\"type\": \"text\", \"text\": "
                               "string}",
                               i),
                       400;
            }
            ifl_buf_add(&text, json_string_value(tx), json_string_length(tx));
        }
    } else {
        return ifl_err(err, IFL_EINVAL,
                       "prediction.content: must be a string or an array of text parts"),
               400;
    }
    int rc = text.oom ? IFL_ENOMEM : text.len ? ifl_gen_set_prediction(j, text.p, text.len) : 0;
    ifl_buf_free(&text);
    if (rc)
        return ifl_err(err, rc, "prediction: %s", ifl_strerror(rc)), 500;
    return 0;
}

static int parse_common(struct ifl_server *s, json_t *b, struct oai_req *q, struct ifl_gen_job *j,
                        char *param, char *err)
{
    struct ifl_gen_params *p = &q->p;
    *p = (struct ifl_gen_params){0};
    int bo;
#define FAIL(name)                                                                                 \
    do {                                                                                           \
        snprintf(param, 64, "%s", name);                                                           \
        return 400;                                                                                \
    } while (0)
    uint64_t seen = 0;
    int st = read_fields(b, OAI_FIELDS, N_OF(OAI_FIELDS), q, &seen, param, err);
    if (st)
        return st;
    const char *model = q->model_asked;
    /* One model is served: any name selects it (as TGI and llama-server do,
     * so clients configured with a placeholder such as "gpt-3.5-turbo", or
     * Hugging Face's client sending its endpoint URL, work), unless
     * --strict-model-name asks for vLLM's 404. A name the server answers to
     * is echoed back; any other shows the served name, which is what
     * answered. A LoRA adapter's name (vLLM's --lora-modules) is looked up
     * first: it selects the adapter at scale 1, unless `lora` lists the
     * adapters itself, and is echoed back. */
    q->model = s->model_name;
    int named = 0;
    int32_t lid = 0;
    if (model && ifl_executor_find_lora(j->ex, model, &lid) == 0) {
        snprintf(j->lora_model, sizeof j->lora_model, "%s", model);
        q->model = j->lora_model;
        ifl_gen_set_lora_one(j, lid, 1.0f);
        named = 1;
    }
    for (int i = 0; model && i < s->n_names; i++)
        if (!strcmp(model, s->names[i])) {
            q->model = s->names[i];
            named = 1;
        }
    json_t *lo = json_object_get(b, "lora"); /* llama.cpp's per-request adapters */
    if (lo && !json_is_null(lo) && ifl_gen_set_lora_json(j, lo, param, err))
        return 400;
    if (model && !named && s->cfg.strict_model_name) {
        snprintf(param, 64, "model");
        char list[512] = "";
        size_t at = 0;
        for (int i = 0; i < s->n_names && at < sizeof list; i++)
            at +=
                (size_t)snprintf(list + at, sizeof list - at, "%s'%s'", i ? ", " : "", s->names[i]);
        ifl_err(err, IFL_ENOTFOUND, "the model '%.100s' does not exist (this server serves %s)",
                model, list);
        return 404;
    }
    if (p->top_p == 0)
        p->top_p = 1e-6; /* "nucleus of nothing": the top token only */
    if (p->top_k < 0)
        p->top_k = 0;
    p->has_seed = seen >> OF_SEED & 1;
    json_t *so = json_object_get(b, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) {
            ifl_err(err, IFL_EINVAL, "stream_options: must be an object");
            FAIL("stream_options");
        }
        if (!q->stream) {
            ifl_err(err, IFL_EINVAL, "stream_options: only allowed when stream is true");
            FAIL("stream_options");
        }
        bo = 0;
        if (ifl_json_get_bool(so, "include_usage", &bo, err) < 0)
            FAIL("stream_options.include_usage");
        q->include_usage = bo;
    }
    json_t *stop = json_object_get(b, "stop");
    if (json_is_string(stop)) {
        if (json_string_length(stop) > 256) {
            ifl_err(err, IFL_EINVAL, "stop: at most 256 bytes");
            FAIL("stop");
        }
        if (json_string_length(stop) && ifl_gen_add_stop(j, json_string_value(stop)))
            return 500;
    } else if (json_is_array(stop)) {
        size_t i;
        json_t *e;
        if (json_array_size(stop) > 64) {
            ifl_err(err, IFL_EINVAL, "stop: at most 64 strings");
            FAIL("stop");
        }
        json_array_foreach(stop, i, e)
        {
            if (!json_is_string(e)) {
                ifl_err(err, IFL_EINVAL, "stop[%zu]: must be a string", i);
                FAIL("stop");
            }
            if (json_string_length(e) > 256) {
                ifl_err(err, IFL_EINVAL, "stop[%zu]: at most 256 bytes", i);
                FAIL("stop");
            }
            if (json_string_length(e) && ifl_gen_add_stop(j, json_string_value(e)))
                return 500;
        }
    } else if (stop && !json_is_null(stop)) {
        ifl_err(err, IFL_EINVAL, "stop: must be a string or a list of strings");
        FAIL("stop");
    }
    json_t *lb = json_object_get(b, "logit_bias");
    if (lb && !json_is_null(lb)) {
        if (!json_is_object(lb)) {
            ifl_err(err, IFL_EINVAL, "logit_bias: must be an object of token id to bias");
            FAIL("logit_bias");
        }
        const char *key;
        json_t *val;
        json_object_foreach(lb, key, val)
        {
            char *end;
            long id = strtol(key, &end, 10);
            if (!*key || *end || id < 0 || id >= s->info.n_vocab) {
                ifl_err(err, IFL_EINVAL, "logit_bias: '%.40s' is not a token id (0..%d)", key,
                        s->info.n_vocab - 1);
                FAIL("logit_bias");
            }
            double bias = json_is_number(val) ? json_number_value(val) : NAN;
            if (!(bias >= -100 && bias <= 100)) {
                ifl_err(err, IFL_EINVAL, "logit_bias['%s']: must be a number from -100 to 100",
                        key);
                FAIL("logit_bias");
            }
            if (ifl_gen_add_bias(j, (int32_t)id, (float)bias))
                return 500;
        }
    }
    json_t *rf = json_object_get(b, "response_format");
    if (rf && !json_is_null(rf)) {
        const char *type =
            json_is_object(rf) ? json_string_value(json_object_get(rf, "type")) : NULL;
        if (!type) {
            ifl_err(err, IFL_EINVAL, "response_format: must be an object with a type");
            FAIL("response_format");
        }
        int rc = 0;
        if (!strcmp(type, "json_object")) {
            static const char obj[] = "{\"type\":\"object\"}";
            rc = ifl_gen_set_guide(j, IFL_GUIDE_JSON_SCHEMA, obj, sizeof obj - 1, "response_format",
                                   err);
        } else if (!strcmp(type, "json_schema")) {
            /* {"json_schema": {"name", "schema", "strict", "description"}}:
             * the schema is enforced whether strict is true or not */
            json_t *js = json_object_get(rf, "json_schema");
            json_t *schema = json_is_object(js) ? json_object_get(js, "schema") : NULL;
            json_t *strict = json_is_object(js) ? json_object_get(js, "strict") : NULL;
            if (!schema || json_is_null(schema)) {
                ifl_err(err, IFL_EINVAL, "response_format: json_schema.schema is required");
                FAIL("response_format");
            }
            if (strict && !json_is_null(strict) && !json_is_boolean(strict)) {
                ifl_err(err, IFL_EINVAL,
                        "response_format: json_schema.strict must be true or false");
                FAIL("response_format");
            }
            char *t = ifl_json_schema_text(schema, "response_format", err);
            if (!t)
                FAIL("response_format");
            rc = ifl_gen_set_guide(j, IFL_GUIDE_JSON_SCHEMA, t, strlen(t), "response_format", err);
            free(t);
        } else if (strcmp(type, "text")) {
            ifl_err(err, IFL_EINVAL,
                    "response_format: unknown type '%.40s' (text, json_object, json_schema)", type);
            FAIL("response_format");
        }
        if (rc)
            FAIL("response_format");
    }
    /* llama.cpp server's fields: a GBNF grammar, or a schema */
    const char *gbnf = NULL;
    /* (TGI's object form is taken by parse_tgi_fields) */
    if (!json_is_object(json_object_get(b, "grammar")) &&
        ifl_json_get_str(b, "grammar", &gbnf, err) < 0)
        FAIL("grammar");
    if (gbnf && *gbnf && ifl_gen_set_guide(j, IFL_GUIDE_EBNF, gbnf, strlen(gbnf), "grammar", err))
        FAIL("grammar");
    json_t *jsch = json_object_get(b, "json_schema");
    if (jsch && !json_is_null(jsch)) {
        char *t = ifl_json_schema_text(jsch, "json_schema", err);
        if (!t)
            FAIL("json_schema");
        int rc = ifl_gen_set_guide(j, IFL_GUIDE_JSON_SCHEMA, t, strlen(t), "json_schema", err);
        free(t);
        if (rc)
            FAIL("json_schema");
    }
    st = parse_tgi_fields(b, q, seen, j, param, err);
    if (st)
        return st;
    if ((st = parse_prediction(b, j, param, err)))
        return st;
    static const char *const unsupported[] = {"tools", "tool_choice", "functions", "function_call",
                                              "audio", "modalities",  "suffix"};
    for (size_t i = 0; i < sizeof unsupported / sizeof unsupported[0]; i++) {
        if (i < 2 && q->chat && ifl_server_tool_format(s))
            continue; /* tools: read by ifl_oai_chat (tools.c) */
        json_t *x = json_object_get(b, unsupported[i]);
        if (x && !json_is_null(x) && !(json_is_array(x) && json_array_size(x) == 0) &&
            !(json_is_string(x) &&
              (json_string_length(x) == 0 || !strcmp(json_string_value(x), "none")))) {
            if (i < 2 && q->chat)
                ifl_err(err, IFL_EUNSUPPORTED,
                        "%s: this model's chat template writes tool calls in no format the "
                        "server reads back (docs/http.md lists them); --chat-template can give "
                        "one that does",
                        unsupported[i]);
            else if (i < 2)
                ifl_err(err, IFL_EUNSUPPORTED, "%s: only /v1/chat/completions takes tools",
                        unsupported[i]);
            else
                ifl_err(err, IFL_EUNSUPPORTED, "%s: not supported by this server", unsupported[i]);
            FAIL(unsupported[i]);
        }
    }
    if (p->ignore_eos && j->guide_param) {
        ifl_err(err, IFL_EINVAL,
                "ignore_eos: not with %s (a constrained output ends where its "
                "grammar does)",
                j->guide_param);
        FAIL("ignore_eos");
    }
    return 0;
#undef FAIL
}

/* ---- rendering ---- */

/* Whether a chat's replies go through a reply_parser. */
static int parsed(const struct oai_req *q)
{
    return q->chat && (q->parse || q->think);
}

/* One choice's reply parser: gpt-oss's channels, or a <think> block's
 * reasoning, then Hermes' call blocks, Llama 3.1's call objects,
 * Qwen3-Coder's XML call blocks, Mistral's [TOOL_CALLS] groups,
 * DeepSeek-R1's call blocks or the text as it stands. */
struct reply_parser {
    int kind;  /* IFL_REPLY_HARMONY, _HERMES, _LLAMA3, _XML, _MISTRAL, _DEEPSEEK or _PLAIN */
    int think; /* the text goes through k first */
    struct ifl_think k;
    struct ifl_buf rest; /* what k gave of the answer, passed on (reused) */
    struct ifl_harmony h;
    struct ifl_hermes t; /* Hermes' blocks, or the XML or DeepSeek ones */
    struct ifl_llama3 l;
    struct ifl_mistral m;
};

static void rp_init(struct reply_parser *p, const struct oai_req *q, const char *id_base)
{
    p->kind = q->parse;
    p->think = q->think != 0;
    if (q->think_mistral)
        ifl_think_init_tags(&p->k, 0, "[THINK]", "[/THINK]");
    else
        ifl_think_init(&p->k, q->think == 2);
    p->rest = (struct ifl_buf){0};
    ifl_harmony_init(&p->h);
    if (p->kind == IFL_REPLY_XML)
        ifl_xml_init(&p->t, q->tool_names);
    else if (p->kind == IFL_REPLY_DEEPSEEK)
        ifl_deepseek_init(&p->t, q->tool_names);
    else
        ifl_hermes_init(&p->t, q->tool_names);
    ifl_llama3_init(&p->l, q->tool_names);
    snprintf(p->h.id_base, sizeof p->h.id_base, "%s", id_base);
    snprintf(p->t.id_base, sizeof p->t.id_base, "%s", id_base);
    snprintf(p->l.id_base, sizeof p->l.id_base, "%s", id_base);
    ifl_mistral_init(&p->m, q->tool_names);
    snprintf(p->m.id_base, sizeof p->m.id_base, "%s", id_base);
    if (q->prefill[0] && p->kind == IFL_REPLY_HARMONY) { /* a header: it gives no text */
        struct ifl_reply_out o = {0};
        ifl_harmony_push(&p->h, q->prefill, strlen(q->prefill), &o);
        ifl_buf_free(&o.content);
        ifl_buf_free(&o.reasoning);
    }
    if (q->prefill[0] && p->kind == IFL_REPLY_MISTRAL) { /* [TOOL_CALLS]: no text either */
        struct ifl_reply_out o = {0};
        ifl_mistral_push(&p->m, q->prefill, strlen(q->prefill), &o);
        ifl_buf_free(&o.content);
        ifl_buf_free(&o.reasoning);
    }
}

/* The answer's text (after any reasoning) to the call parser, if any. */
static void rp_answer(struct reply_parser *p, const char *text, size_t n, struct ifl_reply_out *o)
{
    if (p->kind == IFL_REPLY_HERMES || p->kind == IFL_REPLY_XML || p->kind == IFL_REPLY_DEEPSEEK)
        ifl_hermes_push(&p->t, text, n, o);
    else if (p->kind == IFL_REPLY_LLAMA3)
        ifl_llama3_push(&p->l, text, n, o);
    else if (p->kind == IFL_REPLY_MISTRAL)
        ifl_mistral_push(&p->m, text, n, o);
    else if (p->kind == IFL_REPLY_HARMONY)
        ifl_harmony_push(&p->h, text, n, o);
    else
        ifl_buf_add(&o->content, text, n);
}

/* The answer's text the <think> splitter put in p->rest, passed on. */
static void rp_rest(struct reply_parser *p, struct ifl_reply_out *o)
{
    if (p->rest.oom)
        o->oom = 1;
    if (p->rest.len)
        rp_answer(p, p->rest.p, p->rest.len, o);
    p->rest.len = 0;
}

static void rp_push(struct reply_parser *p, const char *text, size_t n, struct ifl_reply_out *o)
{
    if (!p->think) {
        rp_answer(p, text, n, o);
        return;
    }
    ifl_think_push(&p->k, text, n, o, &p->rest);
    rp_rest(p, o);
}

static void rp_finish(struct reply_parser *p, struct ifl_reply_out *o)
{
    if (p->think) {
        ifl_think_finish(&p->k, o, &p->rest);
        rp_rest(p, o);
    }
    if (p->kind == IFL_REPLY_HERMES || p->kind == IFL_REPLY_XML || p->kind == IFL_REPLY_DEEPSEEK)
        ifl_hermes_finish(&p->t, o);
    else if (p->kind == IFL_REPLY_LLAMA3)
        ifl_llama3_finish(&p->l, o);
    else if (p->kind == IFL_REPLY_MISTRAL)
        ifl_mistral_finish(&p->m, o);
    else if (p->kind == IFL_REPLY_HARMONY)
        ifl_harmony_finish(&p->h, o);
}

static void rp_deinit(struct reply_parser *p)
{
    ifl_buf_free(&p->rest);
    ifl_think_deinit(&p->k);
    ifl_harmony_deinit(&p->h);
    ifl_hermes_deinit(&p->t);
    ifl_llama3_deinit(&p->l);
    ifl_mistral_deinit(&p->m);
}

static json_t *usage_json(const struct ifl_gen_job *j)
{
    int64_t pt = ifl_gen_prompt_tokens(j), ct = ifl_gen_completion_tokens(j);
    json_t *u = json_pack("{s:I,s:I,s:I}", "prompt_tokens", (json_int_t)pt, "completion_tokens",
                          (json_int_t)ct, "total_tokens", (json_int_t)(pt + ct));
    if (u && j->n_drafts) /* as OpenAI reports a prediction's use */
        json_object_set_new(u, "completion_tokens_details",
                            json_pack("{s:I,s:I}", "accepted_prediction_tokens",
                                      (json_int_t)j->accepted, "rejected_prediction_tokens",
                                      (json_int_t)(j->drafted - j->accepted)));
    return u;
}

static json_t *envelope(const struct oai_req *q, const char *id, const char *object,
                        int64_t created)
{
    json_t *o = json_object();
    json_object_set_new(o, "id", json_string(id));
    json_object_set_new(o, "object", json_string(object));
    json_object_set_new(o, "created", json_integer(created));
    json_object_set_new(o, "model", json_string(q->model));
    json_object_set_new(o, "system_fingerprint", json_string("fp_inflight"));
    return o;
}

static int status_of(int rc)
{
    return rc == IFL_EFULL ? 429 : rc == IFL_ESTATE ? 503 : rc == IFL_ENOMEM ? 500 : 400;
}

static int reply_whole(struct ifl_hconn *c, struct ifl_gen_job *j, struct oai_req *q)
{
    struct ifl_server *s = c->srv;
    char id[64];
    ifl_server_make_id(s, q->chat ? "chatcmpl" : "cmpl", id, sizeof id);
    json_t *o =
        envelope(q, id, q->chat ? "chat.completion" : "text_completion", (int64_t)time(NULL));
    json_t *choices = json_array();
    for (int i = 0; i < j->n_prompts * j->n_ret; i++) {
        int ci = ifl_gen_choice_at(j, i);
        struct ifl_gen_choice *ch = &j->ch[ci];
        json_t *cj = json_object();
        json_object_set_new(cj, "index", json_integer(i));
        const char *fin = finish_name(ch->finish);
        if (parsed(q)) {
            /* the channels or blocks: reasoning, the answer, tool calls */
            struct reply_parser h;
            struct ifl_reply_out ho = {.calls = json_array()};
            char base[80];
            snprintf(base, sizeof base, "%s_%d", id + strlen("chatcmpl-"), i);
            rp_init(&h, q, base);
            rp_push(&h, ch->text.p ? ch->text.p : "", ch->text.len, &ho);
            rp_finish(&h, &ho);
            rp_deinit(&h);
            if (ho.oom || ho.content.oom || ho.reasoning.oom || !ho.calls) {
                /* a reply read in part would be a wrong answer: none at all */
                json_decref(ho.calls);
                ifl_buf_free(&ho.content);
                ifl_buf_free(&ho.reasoning);
                json_decref(cj);
                json_decref(choices);
                json_decref(o);
                return ifl_http_reply_oai_error(c, 500, NULL,
                                                "out of memory reading the model's reply");
            }
            json_t *msg = json_object();
            json_object_set_new(msg, "role", json_string("assistant"));
            size_t n_calls = json_array_size(ho.calls);
            json_object_set_new(
                msg, "content",
                ho.content.len || !n_calls
                    ? ifl_json_text(ho.content.p ? ho.content.p : "", ho.content.len)
                    : json_null());
            if (ho.reasoning.len)
                json_object_set_new(msg, "reasoning_content",
                                    ifl_json_text(ho.reasoning.p, ho.reasoning.len));
            if (n_calls) {
                json_object_set_new(msg, "tool_calls", ho.calls);
                if (ch->finish == IFL_FINISH_END_ID || ch->finish == IFL_FINISH_STOP_WORDS)
                    fin = "tool_calls";
            } else {
                json_decref(ho.calls);
            }
            ifl_buf_free(&ho.content);
            ifl_buf_free(&ho.reasoning);
            json_object_set_new(msg, "refusal", json_null());
            json_object_set_new(cj, "message", msg);
            json_object_set_new(cj, "logprobs",
                                q->want_lp ? ifl_oai_lp_chat(s, ch->tokens, ch->lps, ch->tops,
                                                             ch->n_top, ch->n_tokens)
                                           : json_null());
        } else if (q->chat) {
            json_t *msg = json_object();
            json_object_set_new(msg, "role", json_string("assistant"));
            json_object_set_new(msg, "content",
                                ifl_json_text(ch->text.p ? ch->text.p : "", ch->text.len));
            json_object_set_new(msg, "refusal", json_null());
            json_object_set_new(cj, "message", msg);
            json_object_set_new(cj, "logprobs",
                                q->want_lp ? ifl_oai_lp_chat(s, ch->tokens, ch->lps, ch->tops,
                                                             ch->n_top, ch->n_tokens)
                                           : json_null());
        } else {
            int pi = ci / j->n_per;
            struct ifl_buf t = {0};
            if (q->echo)
                ifl_buf_add(&t, q->echo_text[pi], q->echo_len[pi]);
            ifl_buf_add(&t, ch->text.p ? ch->text.p : "", ch->text.len);
            json_object_set_new(cj, "text", ifl_json_text(t.p ? t.p : "", t.len));
            ifl_buf_free(&t);
            int64_t off = q->echo ? (int64_t)q->echo_len[pi] : 0;
            json_t *lp = json_null();
            if (q->want_lp) {
                lp = ifl_oai_lp_completion_new();
                if (q->echo)
                    ifl_oai_lp_completion_echo(s, lp, j, pi, off);
                ifl_oai_lp_completion_add(s, lp, ch->tokens, ch->lps, ch->tops, ch->n_top,
                                          ch->n_tokens, &off);
            }
            json_object_set_new(cj, "logprobs", lp);
        }
        json_object_set_new(cj, "finish_reason", fin ? json_string(fin) : json_null());
        json_array_append_new(choices, cj);
    }
    json_object_set_new(o, "choices", choices);
    json_object_set_new(o, "usage", usage_json(j));
    return ifl_http_reply_json(c, 200, o);
}

/* ---- streaming ---- */

struct oai_stream {
    struct ifl_server *srv;
    struct ifl_stream *st;
    struct oai_req q;
    int n_prompts, n_choices;
    char id[64];
    int64_t created;
    int64_t *offset;         /* completions: text_offset per choice */
    unsigned char *echo_due; /* completions, echo with logprobs: the prompt is still to send */
    struct reply_parser *h;  /* chat with tools, harmony or <think>: a parser per choice */
    unsigned char *called;   /* per choice: a tool call was sent */
};

/* A parsed choice's streamed text: the delta of what it gave (NULL when
 * nothing yet), fin set when the text ended. */
static json_t *parsed_delta(struct oai_stream *os, int choice, const char *text, size_t n, int fin)
{
    struct reply_parser *h = &os->h[choice];
    struct ifl_reply_out ho = {.calls = json_array()};
    rp_push(h, text, n, &ho);
    if (fin)
        rp_finish(h, &ho);
    if (ho.oom || ho.content.oom || ho.reasoning.oom || !ho.calls)
        os->st->out.oom = 1; /* the stream ends with an error, not with a part of the reply */
    json_t *d = NULL;
    if (ho.reasoning.len || ho.content.len || json_array_size(ho.calls)) {
        d = json_object();
        if (ho.reasoning.len)
            json_object_set_new(d, "reasoning_content",
                                ifl_json_text(ho.reasoning.p, ho.reasoning.len));
        if (ho.content.len)
            json_object_set_new(d, "content", ifl_json_text(ho.content.p, ho.content.len));
        if (json_array_size(ho.calls)) {
            json_object_set(d, "tool_calls", ho.calls);
            os->called[choice] = 1;
        }
    }
    json_decref(ho.calls);
    ifl_buf_free(&ho.content);
    ifl_buf_free(&ho.reasoning);
    return d;
}

static void sse(struct ifl_buf *out, json_t *o)
{
    ifl_sse_event(out, "data: ", o);
}

static json_t *chunk(struct oai_stream *os, json_t *choice)
{
    json_t *o = envelope(&os->q, os->id, os->q.chat ? "chat.completion.chunk" : "text_completion",
                         os->created);
    json_t *arr = json_array();
    if (choice)
        json_array_append_new(arr, choice);
    json_object_set_new(o, "choices", arr);
    if (os->q.include_usage)
        json_object_set_new(o, "usage", json_null());
    return o;
}

static void oai_on_resp(void *user, int choice, const struct ifl_response *r)
{
    struct oai_stream *os = user;
    struct ifl_server *s = os->srv;
    if (r->n_results < 1)
        return;
    const struct ifl_sequence_result *res = &r->results[0];
    struct ifl_gen_job *j = os->st->job;
    if (os->echo_due && os->echo_due[choice]) {
        /* the prompt's log-probs came with the request's first response */
        int pi = choice / j->n_per;
        os->echo_due[choice] = 0;
        json_t *cj = json_object();
        json_object_set_new(cj, "index", json_integer(choice));
        json_object_set_new(cj, "text", ifl_json_text(os->q.echo_text[pi], os->q.echo_len[pi]));
        json_t *lp = ifl_oai_lp_completion_new();
        ifl_oai_lp_completion_echo(s, lp, j, pi, (int64_t)os->q.echo_len[pi]);
        json_object_set_new(cj, "logprobs", lp);
        json_object_set_new(cj, "finish_reason", json_null());
        sse(&os->st->out, chunk(os, cj));
    }
    int seq_final = r->is_sequence_final || r->is_final;
    const char *fin = seq_final ? finish_name(res->finish_reason) : NULL;
    int has_lp = os->q.want_lp && res->n_tokens > 0;
    if (os->h && (res->n_text > 0 || fin || has_lp)) {
        json_t *delta =
            parsed_delta(os, choice, res->text ? res->text : "", (size_t)res->n_text, fin != NULL);
        if (delta || has_lp) {
            json_t *cj = json_object();
            json_object_set_new(cj, "index", json_integer(choice));
            json_object_set_new(cj, "delta", delta ? delta : json_object());
            json_object_set_new(cj, "logprobs",
                                has_lp
                                    ? ifl_oai_lp_chat(s, res->tokens, res->log_probs,
                                                      res->top_log_probs, res->n_top, res->n_tokens)
                                    : json_null());
            json_object_set_new(cj, "finish_reason", json_null());
            sse(&os->st->out, chunk(os, cj));
        }
        if (fin && os->called[choice] &&
            (res->finish_reason == IFL_FINISH_END_ID ||
             res->finish_reason == IFL_FINISH_STOP_WORDS))
            fin = "tool_calls";
    } else if (res->n_text > 0 || has_lp || (fin && !os->q.chat)) {
        json_t *cj = json_object();
        json_object_set_new(cj, "index", json_integer(choice));
        if (os->q.chat) {
            json_t *delta = json_object();
            json_object_set_new(delta, "content",
                                ifl_json_text(res->text ? res->text : "", (size_t)res->n_text));
            json_object_set_new(cj, "delta", delta);
            json_object_set_new(cj, "logprobs",
                                has_lp
                                    ? ifl_oai_lp_chat(s, res->tokens, res->log_probs,
                                                      res->top_log_probs, res->n_top, res->n_tokens)
                                    : json_null());
            json_object_set_new(cj, "finish_reason", json_null());
        } else {
            json_object_set_new(cj, "text",
                                ifl_json_text(res->text ? res->text : "", (size_t)res->n_text));
            json_object_set_new(cj, "logprobs",
                                has_lp ? ifl_oai_lp_completion(s, res->tokens, res->log_probs,
                                                               res->top_log_probs, res->n_top,
                                                               res->n_tokens, &os->offset[choice])
                                       : json_null());
            json_object_set_new(cj, "finish_reason", fin ? json_string(fin) : json_null());
        }
        sse(&os->st->out, chunk(os, cj));
    }
    if (fin && os->q.chat) {
        json_t *cj = json_object();
        json_object_set_new(cj, "index", json_integer(choice));
        json_object_set_new(cj, "delta", json_object());
        json_object_set_new(cj, "logprobs", json_null());
        json_object_set_new(cj, "finish_reason", json_string(fin));
        sse(&os->st->out, chunk(os, cj));
    }
}

static void oai_on_end(struct ifl_stream *st)
{
    struct oai_stream *os = st->user;
    struct ifl_gen_job *j = st->job;
    if (j->error_status && !j->cancelled) {
        json_t *e = json_pack("{s:{s:s,s:s,s:n,s:n}}", "error", "message", j->error_msg, "type",
                              "server_error", "param", "code");
        if (e)
            sse(&st->out, e);
    }
    if (os->q.include_usage) {
        json_t *o = chunk(os, NULL);
        json_object_set_new(o, "usage", usage_json(j));
        sse(&st->out, o);
    }
    ifl_buf_add(&st->out, "data: [DONE]\n\n", 14);
}

static void oai_stream_free(void *user)
{
    struct oai_stream *os = user;
    if (!os)
        return;
    oai_req_free(&os->q, os->n_prompts);
    free(os->offset);
    free(os->echo_due);
    for (int i = 0; os->h && i < os->n_choices; i++)
        rp_deinit(&os->h[i]);
    free(os->h);
    free(os->called);
    free(os);
}

static int reply_stream(struct ifl_hconn *c, struct ifl_gen_job *j, struct oai_req *q)
{
    struct ifl_stream *st = calloc(1, sizeof(*st));
    struct oai_stream *os = calloc(1, sizeof(*os));
    int n_choices = j->n_prompts * j->n_per;
    int64_t *offset = calloc((size_t)n_choices, sizeof(int64_t));
    unsigned char *due = q->echo && q->want_lp ? calloc((size_t)n_choices, 1) : NULL;
    struct reply_parser *h = parsed(q) ? calloc((size_t)n_choices, sizeof *h) : NULL;
    unsigned char *called = parsed(q) ? calloc((size_t)n_choices, 1) : NULL;
    if (!st || !os || !offset || (q->echo && q->want_lp && !due) ||
        (parsed(q) && (!h || !called))) {
        free(st);
        free(os);
        free(offset);
        free(due);
        free(h);
        free(called);
        ifl_gen_cancel(j, 0);
        oai_req_free(q, j->n_prompts);
        ifl_gen_job_free(j);
        return ifl_http_reply_oai_error(c, 500, NULL, "out of memory");
    }
    os->srv = c->srv;
    os->st = st;
    os->q = *q; /* takes the echo arrays */
    os->n_prompts = j->n_prompts;
    os->offset = offset;
    os->echo_due = due;
    os->created = (int64_t)time(NULL);
    ifl_server_make_id(c->srv, q->chat ? "chatcmpl" : "cmpl", os->id, sizeof os->id);
    os->n_choices = n_choices;
    os->h = h;
    os->called = called;
    for (int i = 0; h && i < n_choices; i++) {
        char base[80];
        snprintf(base, sizeof base, "%s_%d", os->id + strlen("chatcmpl-"), i);
        rp_init(&h[i], q, base);
    }
    st->job = j;
    st->user = os;
    st->on_resp = oai_on_resp;
    st->on_end = oai_on_end;
    st->free_user = oai_stream_free;
    /* openers: the assistant role (chat) or the echoed prompt (completions) */
    for (int i = 0; i < n_choices; i++) {
        json_t *cj = json_object();
        json_object_set_new(cj, "index", json_integer(i));
        if (q->chat) {
            json_t *delta = json_pack("{s:s,s:s}", "role", "assistant", "content", "");
            json_object_set_new(cj, "delta", delta);
            json_object_set_new(cj, "logprobs", json_null());
            json_object_set_new(cj, "finish_reason", json_null());
        } else if (q->echo) {
            int pi = i / j->n_per;
            offset[i] = (int64_t)q->echo_len[pi];
            if (due) {
                due[i] = 1; /* sent with the prompt's log-probs, once they are known */
                json_decref(cj);
                continue;
            }
            json_object_set_new(cj, "text", ifl_json_text(q->echo_text[pi], q->echo_len[pi]));
            json_object_set_new(cj, "logprobs", json_null());
            json_object_set_new(cj, "finish_reason", json_null());
        } else {
            json_decref(cj);
            continue;
        }
        sse(&st->out, chunk(os, cj));
    }
    return ifl_http_reply_stream(c, st);
}

/* ---- the routes ---- */

static int whole_done(struct ifl_hconn *c, struct ifl_gen_job *j, void *user)
{
    if (j->error_status)
        return ifl_http_reply_oai_error(c, j->error_status == IFL_ESTATE ? 503 : 500, NULL,
                                        j->error_msg);
    return reply_whole(c, j, user);
}

static void whole_free(void *user)
{
    oai_req_free(user, 0);
    free(user);
}

static int finish(struct ifl_hconn *c, struct ifl_gen_job *j, struct oai_req *q)
{
    char err[IFL_ERR_LEN] = "";
    int rc = ifl_gen_start(j, err);
    if (rc) {
        int n = j->n_prompts;
        /* an invalid schema, regex or grammar is found by the executor */
        const char *param =
            j->guide_param && (rc == IFL_EINVAL || rc == IFL_EFORMAT || rc == IFL_EUNSUPPORTED)
                ? j->guide_param
                : NULL;
        /* the executor checks adapter ids: its sentence names lora[i].id */
        if (!param && rc == IFL_EINVAL && !strncmp(err, "lora", 4))
            param = "lora";
        /* and the images it decodes: a chat message's image_url part, or
         * a completions prompt object's multimodal_data */
        if (!param && rc == IFL_EINVAL && !strncmp(err, "images", 6))
            param = q->chat ? "messages" : "prompt";
        ifl_gen_job_free(j);
        oai_req_free(q, n);
        if (rc == IFL_EFULL)
            return ifl_http_reply_oai_error(c, 429, NULL,
                                            "the server is busy (request queue full); retry later");
        return ifl_http_reply_oai_error(c, status_of(rc), param, err);
    }
    if (q->stream)
        return reply_stream(c, j, q);
    /* the reply is built when the job ends (whole_done); the connection
     * frees the job and the request copy */
    struct oai_req *qc = malloc(sizeof(*qc));
    if (!qc) {
        ifl_gen_job_free(j);
        oai_req_free(q, 0);
        return ifl_http_reply_oai_error(c, 500, NULL, "out of memory");
    }
    *qc = *q;
    return ifl_http_reply_when_done(c, j, whole_done, qc, whole_free);
}

static int fail(struct ifl_hconn *c, struct ifl_gen_job *j, struct oai_req *q, int status,
                const char *param, const char *err)
{
    int n = j ? j->n_prompts : 0;
    ifl_gen_job_free(j);
    oai_req_free(q, n);
    return ifl_http_reply_oai_error(c, status, param, err[0] ? err : "invalid request");
}

static ifl_executor *executor(struct ifl_hconn *c)
{
    return atomic_load_explicit(&c->srv->ex, memory_order_acquire);
}

/* A completions prompt object (llama.cpp's server's shape): prompt_string
 * with an <__media__> marker for each of multimodal_data's images (none:
 * the images go first), each a PNG or JPEG as bare base64 or a data URL
 * (or an allowed remote URL). 0, or an HTTP status with err filled. */
static int multimodal_prompt(struct ifl_server *s, struct ifl_gen_job *j, json_t *po,
                             struct oai_req *q, char *err)
{
    json_t *ps = json_object_get(po, "prompt_string");
    json_t *md = json_object_get(po, "multimodal_data");
    const char *k;
    json_t *v;
    json_object_foreach(po, k, v) if (strcmp(k, "prompt_string") && strcmp(k, "multimodal_data"))
    {
        snprintf(err, IFL_ERR_LEN,
                 "prompt.%.64s: a prompt object takes prompt_string and multimodal_data only", k);
        return 400;
    }
    if (!json_is_string(ps)) {
        snprintf(err, IFL_ERR_LEN, "prompt.prompt_string: required, a string");
        return 400;
    }
    if (md && !json_is_null(md) && !json_is_array(md)) {
        snprintf(err, IFL_ERR_LEN, "prompt.multimodal_data: a list of base64 images");
        return 400;
    }
    size_t n_md = md && json_is_array(md) ? json_array_size(md) : 0;
    struct ifl_vision_info vi;
    if (n_md && ifl_executor_vision_info(j->ex, &vi) != 0) {
        snprintf(err, IFL_ERR_LEN,
                 "prompt.multimodal_data: this server has no vision encoder for images (start it "
                 "with --mmproj FILE)");
        return 400;
    }
    if (n_md > IFL_MAX_IMAGES_PER_REQUEST) {
        snprintf(err, IFL_ERR_LEN, "prompt.multimodal_data: at most %d images a request",
                 IFL_MAX_IMAGES_PER_REQUEST);
        return 400;
    }
    for (size_t i = 0; i < n_md; i++) {
        json_t *e = json_array_get(md, i);
        char why[IFL_ERR_LEN] = "";
        unsigned char *data = NULL;
        size_t dn = 0;
        if (!json_is_string(e)) {
            snprintf(err, IFL_ERR_LEN, "prompt.multimodal_data[%zu]: must be a base64 string", i);
            return 400;
        }
        int rc = ifl_server_image_url(s, json_string_value(e), json_string_length(e), 1, &data, &dn,
                                      why);
        if (rc) {
            snprintf(err, IFL_ERR_LEN, "prompt.multimodal_data[%zu]: %s", i, why);
            return rc == IFL_ENOMEM ? 500 : 400;
        }
        j->image_data[j->n_images] = data;
        j->images[j->n_images] = (struct ifl_image_input){.data = data, .size = (int64_t)dn};
        j->n_images++;
    }
    const char *text = json_string_value(ps);
    size_t len = json_string_length(ps);
    if (ifl_gen_text_too_long(s, len, 0, err))
        return 400;
    int rc = j->n_images ? ifl_gen_add_prompt_images(j, text, len, 1, IFL_IMAGE_MARKER, err)
                         : ifl_gen_add_prompt_text(j, text, len, 1);
    if (rc == IFL_ENOMEM) {
        snprintf(err, IFL_ERR_LEN, "out of memory");
        return 500;
    }
    if (rc) {
        if (!j->n_images)
            snprintf(err, IFL_ERR_LEN, "prompt: too long");
        return 400;
    }
    q->echo_text[0] = strndup(text, len);
    q->echo_len[0] = len;
    return q->echo_text[0] ? 0 : (snprintf(err, IFL_ERR_LEN, "out of memory"), 500);
}

int ifl_oai_completions(struct ifl_hconn *c, json_t *b)
{
    struct ifl_server *s = c->srv;
    struct oai_req q = {0};
    char param[64] = "", err[IFL_ERR_LEN] = "";
    struct ifl_gen_job *j = ifl_gen_job_new(s, executor(c));
    if (!j)
        return ifl_http_reply_oai_error(c, 500, NULL, "out of memory");
    int st = parse_common(s, b, &q, j, param, err);
    if (st)
        return fail(c, j, &q, st, param, err);
    /* best_of and n share p: keep n, read into best_of */
    uint64_t seen = 0;
    const int full_text = q.full_text;
    st = read_fields(b, COMPLETION_FIELDS, N_OF(COMPLETION_FIELDS), &q, &seen, param, err);
    if (st)
        return fail(c, j, &q, st, param, err);
    if (!(seen >> CF_ECHO & 1))
        q.echo = full_text; /* TGI's return_full_text, unless echo is given */
    q.want_lp = seen >> CF_LOGPROBS & 1;
    int64_t v = q.p.best_of;
    if ((seen >> CF_BEST_OF & 1) && v < q.p.n) {
        snprintf(err, sizeof err, "best_of: must be at least n (%d)", q.p.n);
        return fail(c, j, &q, 400, "best_of", err);
    }
    if ((seen >> CF_BEST_OF & 1) && v > q.p.n && q.stream) {
        snprintf(err, sizeof err,
                 "best_of: cannot be used with stream (the best are known only "
                 "at the end)");
        return fail(c, j, &q, 400, "best_of", err);
    }
    /* prompt: a string, a list of strings, a list of token ids, or a list of those lists */
    json_t *prompt = json_object_get(b, "prompt");
    q.echo_text = calloc(MAX_PROMPTS, sizeof(char *));
    q.echo_len = calloc(MAX_PROMPTS, sizeof(size_t));
    if (!q.echo_text || !q.echo_len)
        return fail(c, j, &q, 500, NULL, "out of memory");
    json_t *list[MAX_PROMPTS];
    int n_list = 0, ids_prompt = 0;
    /* llama.cpp's multimodal prompt object: {"prompt_string": text with
     * <__media__> markers, "multimodal_data": [base64 or data URLs]}, alone
     * or as the only element of the list */
    json_t *po = json_is_object(prompt) ? prompt : NULL;
    if (json_is_array(prompt)) {
        size_t i;
        json_t *e;
        json_array_foreach(prompt, i, e) if (json_is_object(e))
        {
            if (json_array_size(prompt) != 1) {
                snprintf(err, sizeof err,
                         "prompt[%zu]: a prompt object (prompt_string, multimodal_data) must be "
                         "the request's only prompt",
                         i);
                return fail(c, j, &q, 400, "prompt", err);
            }
            po = e;
        }
    }
    if (po) {
        int st2 = multimodal_prompt(s, j, po, &q, err);
        if (st2)
            return fail(c, j, &q, st2, "prompt", err);
        n_list = -1;
    } else if (json_is_string(prompt)) {
        list[n_list++] = prompt;
    } else if (json_is_array(prompt) && json_array_size(prompt) > 0) {
        if (json_is_integer(json_array_get(prompt, 0))) {
            ids_prompt = 1;
            list[n_list++] = prompt;
        } else {
            if (json_array_size(prompt) > MAX_PROMPTS) {
                snprintf(err, sizeof err, "prompt: at most %d prompts in one request", MAX_PROMPTS);
                return fail(c, j, &q, 400, "prompt", err);
            }
            size_t i;
            json_t *e;
            json_array_foreach(prompt, i, e) list[n_list++] = e;
        }
    } else {
        snprintf(err, sizeof err,
                 "prompt: required, a string, a list of strings, or a list of token ids");
        return fail(c, j, &q, 400, "prompt", err);
    }
    for (int i = 0; i < n_list; i++) {
        json_t *e = list[i];
        int rc;
        if (json_is_string(e)) {
            if (ifl_gen_text_too_long(s, json_string_length(e), 0, err))
                return fail(c, j, &q, 400, "prompt", err);
            rc = ifl_gen_add_prompt_text(j, json_string_value(e), json_string_length(e), 1);
            q.echo_text[i] = strndup(json_string_value(e), json_string_length(e));
            q.echo_len[i] = json_string_length(e);
        } else if (json_is_array(e) && json_array_size(e) > 0 &&
                   (ids_prompt || json_is_integer(json_array_get(e, 0)))) {
            size_t n = json_array_size(e), k;
            int32_t *ids = malloc(sizeof(int32_t) * n);
            if (!ids)
                return fail(c, j, &q, 500, NULL, "out of memory");
            json_t *t;
            json_array_foreach(e, k, t)
            {
                json_int_t id = json_is_integer(t) ? json_integer_value(t) : -1;
                if (id < 0 || id >= s->info.n_vocab) {
                    free(ids);
                    snprintf(err, sizeof err, "prompt: token ids must be integers from 0 to %d",
                             s->info.n_vocab - 1);
                    return fail(c, j, &q, 400, "prompt", err);
                }
                ids[k] = (int32_t)id;
            }
            rc = ifl_gen_add_prompt(j, ids, (int32_t)n);
            struct ifl_buf t2 = {0};
            char piece[256];
            for (size_t x = 0; x < n; x++) {
                size_t pl = ifl_gen_piece(s, ids[x], piece, sizeof piece);
                ifl_buf_add(&t2, piece, pl);
            }
            q.echo_text[i] = t2.p ? t2.p : strdup("");
            q.echo_len[i] = t2.len;
            free(ids);
        } else {
            snprintf(err, sizeof err,
                     "prompt[%d]: must be a string or a non-empty list of token ids", i);
            return fail(c, j, &q, 400, "prompt", err);
        }
        if (rc || !q.echo_text[i])
            return fail(c, j, &q, rc == IFL_EINVAL ? 400 : 500, "prompt",
                        rc == IFL_EINVAL ? "prompt: too long" : "out of memory");
    }
    q.p.score_prompt = q.echo && q.want_lp;
    q.p.prompt_top = q.top;
    if (q.p.max_tokens < 0)
        q.p.max_tokens = 16; /* OpenAI's default for completions */
    q.p.logprobs = q.want_lp;
    q.p.top_logprobs = q.top;
    q.p.stream = q.stream;
    if (ifl_gen_apply(j, &q.p, param, err))
        return fail(c, j, &q, 400, param, err);
    return finish(c, j, &q);
}

/* More variables for the chat template: chat_template_kwargs (an object,
 * as vLLM and llama.cpp's server take it) and OpenAI's reasoning_effort
 * (gpt-oss's template reads it; "low", "medium" or "high"). *vars is a new
 * object or NULL. The variables the server sets itself cannot be given. */
static int read_template_vars(json_t *b, json_t **vars, char *param, char *err)
{
    json_t *kw = json_object_get(b, "chat_template_kwargs");
    json_t *re = json_object_get(b, "reasoning_effort");
    *vars = NULL;
    if (kw && !json_is_null(kw)) {
        static const char *const fixed[] = {"messages",  "tools",     "documents",
                                            "bos_token", "eos_token", "add_generation_prompt"};
        snprintf(param, 64, "chat_template_kwargs");
        if (!json_is_object(kw)) {
            snprintf(err, IFL_ERR_LEN, "chat_template_kwargs: must be an object");
            return 400;
        }
        for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; i++)
            if (json_object_get(kw, fixed[i])) {
                snprintf(err, IFL_ERR_LEN,
                         "chat_template_kwargs: '%s' is set by the server (give it as a request "
                         "field)",
                         fixed[i]);
                return 400;
            }
        *vars = json_deep_copy(kw);
    }
    if (re && !json_is_null(re)) {
        const char *v = json_string_value(re);
        if (!v || (strcmp(v, "low") && strcmp(v, "medium") && strcmp(v, "high"))) {
            json_decref(*vars);
            *vars = NULL;
            snprintf(param, 64, "reasoning_effort");
            snprintf(err, IFL_ERR_LEN, "reasoning_effort: \"low\", \"medium\" or \"high\"");
            return 400;
        }
        if (!*vars)
            *vars = json_object();
        json_object_set(*vars, "reasoning_effort", re);
    }
    param[0] = 0;
    return 0;
}

/* reasoning_format (llama.cpp's server's field): "none" leaves a reasoning
 * model's <think> block in content; "auto" or "deepseek" split it out
 * (*split keeps the server's default: whether its template is such a
 * model's). */
static int read_reasoning_format(json_t *b, int *split, char *param, char *err)
{
    json_t *rf = json_object_get(b, "reasoning_format");
    if (!rf || json_is_null(rf))
        return 0;
    const char *v = json_string_value(rf);
    if (!v || (strcmp(v, "none") && strcmp(v, "auto") && strcmp(v, "deepseek"))) {
        snprintf(param, 64, "reasoning_format");
        snprintf(err, IFL_ERR_LEN, "reasoning_format: \"auto\", \"deepseek\" or \"none\"");
        return 400;
    }
    if (!strcmp(v, "none"))
        *split = 0;
    return 0;
}

int ifl_oai_chat(struct ifl_hconn *c, json_t *b)
{
    struct ifl_server *s = c->srv;
    struct oai_req q = {.chat = 1};
    char param[64] = "", err[IFL_ERR_LEN] = "";
    struct ifl_gen_job *j = ifl_gen_job_new(s, executor(c));
    if (!j)
        return ifl_http_reply_oai_error(c, 500, NULL, "out of memory");
    int st = parse_common(s, b, &q, j, param, err);
    if (st)
        return fail(c, j, &q, st, param, err);
    uint64_t seen = 0;
    st = read_fields(b, CHAT_FIELDS, N_OF(CHAT_FIELDS), &q, &seen, param, err);
    if (st)
        return fail(c, j, &q, st, param, err);
    if (q.top > 0 && !q.want_lp) {
        snprintf(err, sizeof err, "top_logprobs: needs logprobs set to true");
        return fail(c, j, &q, 400, "top_logprobs", err);
    }
    struct ifl_chat_tools tl;
    st = ifl_chat_tools_read(s, b, &tl, param, err);
    if (!st)
        st = ifl_chat_tools_guide(j, &tl, q.p.ignore_eos, param, err);
    json_t *tools = tl.list;
    q.parse = s->chat_harmony ? IFL_REPLY_HARMONY : tl.parse;
    snprintf(q.prefill, sizeof q.prefill, "%s", tl.prefill);
    q.tool_names = tl.names; /* q owns them now */
    if (st)
        return fail(c, j, &q, st, param, err);
    json_t *vars = NULL;
    if ((st = read_template_vars(b, &vars, param, err)))
        return fail(c, j, &q, st, param, err);
    int split = s->chat_think;
    if ((st = read_reasoning_format(b, &split, param, err)))
        return fail(c, j, &q, st, param, err);
    char *prompt = NULL;
    size_t plen = 0;
    json_t *msgs = json_object_get(b, "messages");
    /* image_url parts: each image's place is a marker no client text holds */
    static atomic_uint_fast64_t marker_no;
    char marker[64];
    snprintf(marker, sizeof marker, "<__media_%016llx__>",
             (unsigned long long)(ifl_now_us() * 0x9e3779b97f4a7c15ull ^
                                  atomic_fetch_add(&marker_no, 1) * 0xbf58476d1ce4e5b9ull));
    int rc = ifl_server_chat_render_tools(s, msgs, tools, vars, j, marker, &prompt, &plen, err);
    json_decref(vars);
    if (rc)
        return fail(c, j, &q, rc == IFL_EINVAL ? 400 : 500, "messages", err);
    /* the reply begins inside the prompt's last words (q.prefill); a
     * forced call where the template left a <think> block open (QwQ,
     * DeepSeek-R1) follows the block closed empty, as a finished thought */
    char tail[sizeof q.prefill + 16];
    snprintf(tail, sizeof tail, "%s%s",
             tools && tl.forced && s->chat_think == 1 && ifl_think_prompt_open(prompt, plen)
                 ? "</think>\n\n"
                 : "",
             q.prefill);
    if (tail[0]) {
        size_t fl = strlen(tail);
        char *p2 = realloc(prompt, plen + fl + 1);
        if (!p2) {
            free(prompt);
            return fail(c, j, &q, 500, NULL, "out of memory");
        }
        memcpy(p2 + plen, tail, fl + 1);
        prompt = p2;
        plen += fl;
    }
    if (ifl_gen_text_too_long(s, plen, 0, err)) {
        free(prompt);
        return fail(c, j, &q, 400, "messages", err);
    }
    /* a constrained reply (a grammar, a forced call) is the answer, even
     * where the template left a <think> block open */
    if (split)
        q.think = !j->guide_param && split == 1 && ifl_think_prompt_open(prompt, plen) ? 2 : 1;
    q.think_mistral = split == 2;
    size_t bl = strlen(s->bos_text);
    int add_special = !(bl && plen >= bl && !memcmp(prompt, s->bos_text, bl));
    if (j->n_images)
        rc = ifl_gen_add_prompt_images(j, prompt, plen, add_special, marker, err);
    else
        rc = ifl_gen_add_prompt_text(j, prompt, plen, add_special);
    free(prompt);
    if (rc && j->n_images)
        return fail(c, j, &q, rc == IFL_ENOMEM ? 500 : 400, "messages",
                    rc == IFL_ENOMEM ? "out of memory" : err);
    if (rc)
        return fail(c, j, &q, rc == IFL_EINVAL ? 400 : 500, "messages",
                    rc == IFL_EINVAL ? "messages: too long" : "out of memory");
    if (s->chat_default && j->n_stops >= 64) /* the executor takes 64 in all */
        return fail(c, j, &q, 400, "stop",
                    "stop: at most 63 strings with the built-in ChatML template, which adds "
                    "<|im_end|>");
    if (s->chat_default && ifl_gen_add_stop(j, "<|im_end|>"))
        return fail(c, j, &q, 500, NULL, "out of memory");
    q.p.logprobs = q.want_lp;
    q.p.top_logprobs = q.top;
    q.p.stream = q.stream;
    if (ifl_gen_apply(j, &q.p, param, err))
        return fail(c, j, &q, 400, param, err);
    return finish(c, j, &q);
}

/* One entry per name the server answers to: the served name, then its
 * aliases, each with root (the model it serves) and parent (null for the
 * base model); then each LoRA adapter (vLLM's way: root its file, parent
 * the served name). */
int ifl_oai_models(struct ifl_hconn *c, json_t *body)
{
    (void)body;
    struct ifl_server *s = c->srv;
    json_t *data = json_array();
    for (int i = 0; i < s->n_names; i++)
        json_array_append_new(data, json_pack("{s:s,s:s,s:I,s:s,s:s,s:n,s:i}", "id", s->names[i],
                                              "object", "model", "created", (json_int_t)s->created,
                                              "owned_by", "inflight", "root", s->model_name,
                                              "parent", "max_model_len", s->info.n_ctx));
    ifl_executor *ex = atomic_load_explicit(&s->ex, memory_order_acquire);
    struct ifl_lora_info *ad = NULL;
    int32_t n = 0;
    if (ifl_executor_list_lora(ex, NULL, 0, &n) == IFL_EFULL &&
        (ad = calloc((size_t)n, sizeof(*ad)))) {
        int32_t cap = n; /* one loaded meanwhile waits for the next listing */
        ifl_executor_list_lora(ex, ad, cap, &n);
        n = n < cap ? n : cap;
    }
    for (int32_t i = 0; ad && i < n; i++)
        json_array_append_new(data, json_pack("{s:s,s:s,s:I,s:s,s:s,s:s,s:i}", "id", ad[i].name,
                                              "object", "model", "created", (json_int_t)s->created,
                                              "owned_by", "inflight", "root", ad[i].path, "parent",
                                              s->model_name, "max_model_len", s->info.n_ctx));
    free(ad);
    json_t *o = json_pack("{s:s,s:o}", "object", "list", "data", data);
    return ifl_http_reply_json(c, 200, o);
}

int ifl_oai_names_init(struct ifl_server *s, int split)
{
    int n = 1;
    for (const char *p = s->model_name; split && *p; p++)
        n += *p == ',';
    s->names = calloc((size_t)n, sizeof(char *));
    if (!s->names)
        return IFL_ENOMEM;
    const char *p = s->model_name;
    for (int i = 0; i < n; i++) {
        size_t len = split ? strcspn(p, ",") : strlen(p);
        if (!(s->names[i] = strndup(p, len)))
            return IFL_ENOMEM; /* names freed by ifl_oai_names_free */
        s->n_names = i + 1;
        p += len + (p[len] == ',');
    }
    s->model_name[strlen(s->names[0])] = 0; /* the first name is the served name */
    return 0;
}

void ifl_oai_names_free(struct ifl_server *s)
{
    for (int i = 0; s->names && i < s->n_names; i++)
        free(s->names[i]);
    free(s->names);
    s->names = NULL;
    s->n_names = 0;
}
