/*
 * Server internals shared by the files of src/server/:
 *   server.c    life cycle (create, load, shutdown, free)
 *   http.c      transport: libmicrohttpd's callbacks, the route table
 *   reply.c     replies, errors, streams and SSE events
 *   openai.c, tgi.c    the two protocols' routes
 *   adapters.c  llama-server's /lora-adapters: the LoRA adapters and their global scales
 *   web.c       the playground page, its files and /openapi.json (embedded, web.h)
 *   logprobs.c  log-probs in OpenAI's two shapes
 *   gen.c       one generation over the executor: parameters, start, poll
 *   fold.c      a job's results: responses folded into choices; freeing
 *   pump.c      the thread between the executor and the connections
 *   json.c      jansson helpers: typed field readers, field-spec tables, text
 *   messages.c  chat messages rendered into a prompt by the chat template
 *   tools.c     a chat request's tools and tool_choice; a forced call's grammar
 *   harmony.c, hermes.c   tool calls (and channels) read back from replies
 *   prescan.c   a look at a raw body for a prompt beyond the context
 *   metrics.c, log.c   counters, log lines (the byte buffer is core/buf.h)
 * Calls between these files go one way: no two call each other, and no
 * longer cycle runs through them (server.c and http.c at the top, json.c
 * at the bottom).
 *
 * Ownership: a struct ifl_hconn lives from the first callback of an HTTP
 * request to libmicrohttpd's "request completed" callback, which frees it
 * together with its stream, and its job unless requests of the job are still
 * running (then the pump frees the job once their last responses came). Only
 * the pool thread that serves the connection touches an hconn, except the
 * fields marked "pump_mu". The server struct is shared: its fields are
 * immutable after load except the atomics (each commented with its memory
 * order) and what pump_mu or sock_mu guards.
 */
#ifndef IFL_SERVER_INTERNAL_H
#define IFL_SERVER_INTERNAL_H

#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/buf.h"
#include "inflight.h"
#include "server/server.h"

/* ---- metrics (metrics.c): lock-free counters and histograms ---- */

enum ifl_hist_id {
    IFL_HIST_TTFT = 0,  /* time to first token */
    IFL_HIST_ITL = 1,   /* between tokens */
    IFL_HIST_E2E = 2,   /* whole request */
    IFL_HIST_QUEUE = 3, /* arrival to first scheduled */
    IFL_HIST_COUNT = 4,
};

void ifl_server_metrics_observe(struct ifl_server *s, int hist, double seconds);
/* One finished sequence: its enum ifl_finish_reason, or -1 for an error. */
void ifl_server_metrics_finish(struct ifl_server *s, int finish_reason);
void ifl_server_metrics_tokens(struct ifl_server *s, int64_t prompt, int64_t generated);
void ifl_server_metrics_http(struct ifl_server *s, int status);
void ifl_server_metrics_disconnect(struct ifl_server *s);
/* The Prometheus text exposition; the caller frees the buffer. */
void ifl_server_metrics_render(struct ifl_server *s, struct ifl_buf *out);
/* Seconds a client turned away (429, 503) should wait before it retries:
 * the time the engine needs to work off what is queued at its recent rate
 * of completed requests (at least 1, at most 600). */
int ifl_server_retry_after(struct ifl_server *s);

/* Samples of the executor's completed-request count, taken as requests
 * finish, from which the recent completion rate is read (mu guards all). */
#define IFL_RATE_SAMPLES 64
struct ifl_server_rate {
    pthread_mutex_t mu;
    int64_t t_us[IFL_RATE_SAMPLES];
    int64_t done[IFL_RATE_SAMPLES];
    int n, head; /* head: the next slot written */
};

struct ifl_server_metrics {
    /* relaxed order everywhere: counters are read only for exposition */
    atomic_llong hist_bucket[IFL_HIST_COUNT][32];
    atomic_llong hist_count[IFL_HIST_COUNT];
    atomic_llong hist_sum_us[IFL_HIST_COUNT];
    atomic_llong finish[8]; /* by enum ifl_finish_reason; [7]: errors */
    atomic_llong prompt_tokens, generated_tokens;
    atomic_llong http_status[6]; /* 1xx..5xx by hundreds; [0]: other */
    atomic_llong disconnects;    /* clients gone before their request ended */
    atomic_llong requests;       /* generation requests accepted */
    atomic_llong rejected_full;  /* 429s */
};

/* ---- the server ---- */

struct ifl_chat_template;
struct ifl_gen_job;
struct ifl_hconn;
struct ifl_sock;

/* Request id -> job, open addressing (pump.c). */
struct ifl_idmap {
    ifl_id *keys; /* 0: empty */
    struct ifl_gen_job **jobs;
    size_t cap, n, reserved; /* reserved: ids promised to jobs about to enqueue */
};

struct ifl_server {
    struct ifl_server_config cfg;
    char *host, *model_path, *api_key, *cors_origin, *chat_template, *model_name; /* owned copies */
    char **names; /* [n_names]: model_name, then its aliases (owned) */
    int n_names;
    struct MHD_Daemon *mhd;
    int port;
    int64_t created; /* unix time the model loaded */
    /* set once by ifl_server_load (release), read by handlers (acquire) */
    _Atomic(ifl_executor *) ex;
    struct ifl_model_info info; /* valid once ex is set */
    /* loading progress for /health: bytes of weights done and in all, set
     * by the loading thread; relaxed, each a figure on its own */
    _Atomic int64_t load_done, load_total;
    char bos_text[64], eos_text[64];     /* the model's BOS/EOS token text, for templates */
    struct ifl_chat_template *chat_tmpl; /* compiled chat template (messages.c) */
    int chat_default;                    /* chat_tmpl is the built-in ChatML */
    int chat_sees_images;                /* its source names "image": it is given content
                                            parts (messages.c) */
    int chat_harmony;                    /* gpt-oss's harmony format: the template writes
                                            <|channel|>; tools accepted, replies parsed
                                            (harmony.c) */
    int chat_hermes;                     /* the template renders tools and writes calls as
                                            <tool_call> JSON blocks (Qwen, Hermes): tools
                                            accepted, replies parsed (hermes.c) */
    int chat_llama3;                     /* the template renders tools and writes a call as
                                            a {"name", "parameters"} JSON object (Llama
                                            3.1-3.3): tools accepted, replies parsed
                                            (llama3.c); 2 when it also renders an
                                            assistant turn with several calls */
    int chat_xml;                        /* the template renders tools and writes calls as
                                            <tool_call><function=NAME><parameter=KEY>
                                            blocks (Qwen3-Coder, Qwen3.5, Nemotron 3,
                                            StepFun 3.5): tools accepted, replies parsed
                                            (xmlcall.c) */
    int chat_mistral;                    /* the template renders tools and writes a call as
                                            Mistral's [TOOL_CALLS]NAME[ARGS]{...}: tools
                                            accepted, replies parsed (mistral.c) */
    int chat_deepseek;                   /* the template renders tools and writes calls as
                                            DeepSeek-R1's <｜tool▁calls▁begin｜> block:
                                            tools accepted, replies parsed (deepseek.c) */
    int chat_think;                      /* the template writes <think> and </think>: a
                                            reasoning model's block is split from the
                                            answer (think.c); 2: Mistral's [THINK] and
                                            [/THINK] */
    atomic_int draining;                 /* shutdown began: new requests get 503 (relaxed) */
    atomic_int aborting;                 /* grace ran out: cancel what is running (relaxed) */
    atomic_int forced;     /* ifl_server_abort: skip the rest of the grace (relaxed) */
    atomic_int in_flight;  /* HTTP requests being handled (acq_rel) */
    atomic_ullong next_id; /* response ids (relaxed) */
    uint64_t id_salt;
    struct ifl_server_metrics m;
    /* the pump (pump.c): one thread that takes every response of the
     * executor, hands it to its job and resumes the job's connection; it
     * also closes connections past their receive deadline and notices
     * clients that hang up while their connection is suspended */
    pthread_t pump_thread;
    int pump_started;
    atomic_int pump_stop;    /* (release/acquire) */
    pthread_mutex_t pump_mu; /* guards the fields below */
    struct ifl_idmap idmap;
    struct ifl_response **orphans; /* responses that came before their job registered */
    int32_t n_orphans, cap_orphans;
    struct ifl_hconn *susp_head; /* suspended connections */
    int stopping;                /* shutdown: nothing suspends any more */
    int exec_gone;               /* the executor ended (ifl_await said IFL_ESTATE) */
    pthread_mutex_t sock_mu;     /* guards the socket list */
    struct ifl_sock *socks;      /* every open connection, for the receive deadline */
    struct ifl_server_rate rate;
};

/* ---- one HTTP request ---- */

struct ifl_stream;

/* A whole (not streamed) reply, built on a pool thread once the job ended. */
typedef int (*ifl_http_done_fn)(struct ifl_hconn *c, struct ifl_gen_job *j, void *user);

struct ifl_hconn {
    struct ifl_server *srv;
    struct MHD_Connection *conn;
    const char *method, *url; /* owned by libmicrohttpd for the request's life */
    const char *raw_uri;      /* where the raw request target began (compared, never read) */
    size_t raw_uri_len;       /* its length as a string (short of the span: a raw NUL) */
    struct ifl_buf body;
    int64_t content_length; /* -1: unknown */
    int too_large;
    int counted; /* in srv->in_flight */
    int status;  /* the status sent, for the log */
    int64_t t0_us;
    struct ifl_gen_job *job;
    struct ifl_stream *stream;
    ifl_http_done_fn done; /* set: a whole reply waits for job */
    void *done_user;
    void (*done_free)(void *user);
    struct ifl_sock *sock; /* the connection's socket record (deadline) */
    int fd;
    atomic_int gone;                         /* the pump saw the client hang up (relaxed) */
    int suspended;                           /* pump_mu: suspended, in srv->susp_head */
    struct ifl_hconn *susp_prev, *susp_next; /* pump_mu */
};

/* ---- replies (reply.c) ---- */

/* Replies. Each returns an MHD result to hand back from the handler; body
 * ownership stays with the caller. */
int ifl_http_reply(struct ifl_hconn *c, int status, const char *type, const char *body, size_t n);
int ifl_http_reply_json(struct ifl_hconn *c, int status, json_t *j); /* steals j */
/* OpenAI-shaped error: {"error": {"message", "type", "param", "code"}} */
int ifl_http_reply_oai_error(struct ifl_hconn *c, int status, const char *param, const char *msg);
/* TGI-shaped error: {"error", "error_type"} */
int ifl_http_reply_tgi_error(struct ifl_hconn *c, int status, const char *type, const char *msg);
/* Starts a chunked text/event-stream reply fed by the stream's producer. */
int ifl_http_reply_stream(struct ifl_hconn *c, struct ifl_stream *st);
/* Replies once job (started) has ended: the connection is suspended until
 * then, and done (on a pool thread) queues the reply from the job's results
 * and user. The connection owns job and user from here on (free_user frees
 * user, also when the client leaves first; it may be NULL). */
int ifl_http_reply_when_done(struct ifl_hconn *c, struct ifl_gen_job *j, ifl_http_done_fn done,
                             void *user, void (*free_user)(void *));
/* The handler's call for a connection whose whole reply waits on its job
 * (ifl_http_reply_when_done): folds what came, queues the reply once the job
 * ended, else suspends the connection again. An MHD result. */
int ifl_http_await_whole(struct ifl_hconn *c);
/* A CORS preflight's 204 (any path, before the API key). */
int ifl_http_reply_preflight(struct ifl_hconn *c);
/* A file of the playground (data: static, n bytes) with its ETag, no-cache
 * and the page's Content-Security-Policy; not_modified: a 304 without the
 * body (the client's If-None-Match matched etag). */
int ifl_http_reply_asset(struct ifl_hconn *c, const char *type, const void *data, size_t n,
                         const char *etag, int not_modified);
/* 405 in OpenAI's error shape with an Allow header (allow: "GET, HEAD"). */
int ifl_http_reply_not_allowed(struct ifl_hconn *c, const char *allow, const char *msg);
/* Appends one Server-Sent Event "PREFIX{json}\n\n" to out and frees o
 * (OpenAI writes "data: ", TGI "data:"); out->oom on failure. */
void ifl_sse_event(struct ifl_buf *out, const char *prefix, json_t *o);
/* An id "PREFIX-<24 hex>" unique in this process. */
void ifl_server_make_id(struct ifl_server *s, const char *prefix, char *out, size_t cap);

/* ---- logging (log.c) ---- */

/* One line on stderr in the --log-format, at level (enum
 * ifl_server_log_level; below the configured level: nothing). */
void ifl_server_log(struct ifl_server *s, int level, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The access-log line of a finished request (health probes at debug). */
void ifl_server_log_access(struct ifl_server *s, const struct ifl_hconn *c);

/* ---- JSON helpers (json.c) ---- */

/* Parameter readers: 0 absent (or null), 1 read, -1 wrong type or range
 * (err then says "param: problem"). */
int ifl_json_get_num(json_t *o, const char *key, double lo, double hi, double *out, char *err);
int ifl_json_get_int(json_t *o, const char *key, int64_t lo, int64_t hi, int64_t *out, char *err);
int ifl_json_get_bool(json_t *o, const char *key, int *out, char *err);
int ifl_json_get_str(json_t *o, const char *key, const char **out, char *err);
/* The JSON text of a request field (a schema given as an object or as a
 * string holding one), malloc'd; NULL with err when it is neither. */
char *ifl_json_schema_text(json_t *v, const char *param, char *err);

/* One request field of a protocol's table: its name, JSON type and range,
 * where it goes in the caller's struct and its value when absent. Both
 * protocols read their scalar parameters through such tables, each with its
 * own ranges, defaults and (TGI) error sentences. */
enum ifl_json_type {
    IFL_JSON_NUM,  /* a number into a double, within [lo, hi] */
    IFL_JSON_I64,  /* an integer (5.0 counts) into an int64_t, within [ilo, ihi] */
    IFL_JSON_INT,  /* the same into an int (the range must fit an int) */
    IFL_JSON_BOOL, /* true or false into an int */
    IFL_JSON_STR,  /* a string into a const char * (a view into the body) */
};
enum {
    IFL_JSON_ABOVE_LO = 1, /* NUM: lo itself is refused */
    IFL_JSON_BELOW_HI = 2, /* NUM: hi itself is refused */
};
struct ifl_json_field {
    const char *name;
    int type;         /* enum ifl_json_type */
    double lo, hi;    /* NUM's range */
    int open;         /* NUM: IFL_JSON_ABOVE_LO | IFL_JSON_BELOW_HI */
    int64_t ilo, ihi; /* I64's and INT's range */
    size_t at;        /* offsetof the target in the caller's struct */
    double def;       /* the target's value when the field is absent or null (STR: NULL) */
    const char *msg;  /* the error sentence; NULL: the reader's "name: must be ..." */
};
/* Sets every target of the table f[0..n) (n <= 64) to its default, then
 * reads the fields o holds, in table order. 0 with *seen (bit i: field i
 * was given, not null); IFL_EINVAL at the first wrong field, with *bad its
 * index and err its sentence. */
int ifl_json_read_fields(json_t *o, const struct ifl_json_field *f, int n, void *base,
                         uint64_t *seen, int *bad, char *err);
/* Table entries (S: the target struct). */
/* clang-format off */
#define IFL_FIELD_NUM(S, nm, l, h, fld, d)                                                         \
    {.name = (nm), .type = IFL_JSON_NUM, .lo = (l), .hi = (h), .at = offsetof(S, fld), .def = (d)}
#define IFL_FIELD_I64(S, nm, l, h, fld, d)                                                         \
    {.name = (nm), .type = IFL_JSON_I64, .ilo = (l), .ihi = (h), .at = offsetof(S, fld), .def = (d)}
#define IFL_FIELD_INT(S, nm, l, h, fld, d)                                                         \
    {.name = (nm), .type = IFL_JSON_INT, .ilo = (l), .ihi = (h), .at = offsetof(S, fld), .def = (d)}
#define IFL_FIELD_BOOL(S, nm, fld, d)                                                              \
    {.name = (nm), .type = IFL_JSON_BOOL, .at = offsetof(S, fld), .def = (d)}
#define IFL_FIELD_STR(S, nm, fld) {.name = (nm), .type = IFL_JSON_STR, .at = offsetof(S, fld)}
/* clang-format on */

/* ---- one generation over the executor (gen.c, fold.c) ---- */

/* A JSON string from bytes that may hold invalid UTF-8 (replaced by U+FFFD). */
json_t *ifl_json_text(const char *s, size_t n);

/* Everything a choice accumulates. */
struct ifl_gen_choice {
    struct ifl_buf text;
    int32_t *tokens;
    float *lps;
    struct ifl_top_logprob *tops; /* [n_tokens][n_top] */
    int32_t n_tokens, cap, n_top;
    int finish; /* enum ifl_finish_reason, 0 while running */
    int done;
    float cum; /* sum of the generated tokens' log-probs (executor's) */
};

/* A prompt's scores (decoder input details, completions echo with
 * logprobs): lps[i] the model's log-probability of prompt token i given
 * the tokens before it (lps[0] is NAN: nothing predicts the first), tops
 * [n][n_top] the most likely tokens at each position (row 0 empty). */
struct ifl_gen_prompt_scores {
    float *lps;
    struct ifl_top_logprob *tops;
    int32_t n, n_top;
};

struct ifl_gen_job {
    struct ifl_server *srv;
    ifl_executor *ex;
    struct ifl_request req;       /* template; input_ids set per prompt */
    int n_prompts, n_per;         /* choices = n_prompts * n_per, prompt-major */
    int n_ret;                    /* of each prompt's n_per, how many are returned (best_of) */
    int *order;                   /* [n_prompts * n_ret]: the returned choices, best first per
                                     prompt (identity unless best_of > n); set when finished */
    int score_prompt, prompt_top; /* as in ifl_gen_params */
    char *guide_text;             /* the request's guided-decoding text (owned) */
    const char *guide_param;      /* the parameter that asked for it, for errors */
    int no_output;                /* max_tokens 0: the executor samples one token (its minimum),
                                     which the job drops: the prompt alone is scored and echoed */
    struct ifl_gen_prompt_scores *pscore; /* [n_prompts] when score_prompt */
    int32_t **prompts;
    int32_t *n_prompt;
    char **stops;
    int n_stops;
    int32_t *bias_ids;
    float *bias_vals;
    int32_t *drafts; /* OpenAI's prediction, tokenized: each prompt's client drafts */
    struct ifl_lora_ref lora[IFL_LORA_MAX_PER_REQUEST]; /* the request's adapters */
    int32_t n_lora;
    char lora_model[128]; /* the adapter OpenAI's `model` named (responses echo it), or "" */
    int32_t n_drafts;
    /* images of a chat request (image_url parts, decoded from their data
     * URLs; owned), placed in req by ifl_gen_add_prompt_images */
    struct ifl_image_input images[IFL_MAX_IMAGES_PER_REQUEST];
    unsigned char *image_data[IFL_MAX_IMAGES_PER_REQUEST];
    int n_images;
    int64_t drafted, accepted; /* from the final responses' perf metrics */
    ifl_id *ids;
    unsigned char *req_final; /* [n_prompts] its final response came */
    struct ifl_gen_choice *ch;
    int n_final; /* requests with their final response */
    int enqueued, finished, cancelled;
    int error_status; /* a response came back with an error */
    char error_msg[256];
    int64_t t0_us, t_first_us, t_last_us;
    uint64_t seed;
    int seeded; /* the client gave the seed */
    /* the pump's side, under srv->pump_mu */
    struct ifl_hconn *hc;        /* the connection to resume; NULL once released */
    struct ifl_response **inbox; /* routed, not yet folded */
    int32_t n_inbox, cap_inbox;
    int n_routed_final; /* final responses routed */
    int registered;     /* its ids are in the pump's map */
    int released;       /* its connection is done with it: the pump folds and frees */
    int lost;           /* a response could not be queued (out of memory) */
};

/* Sampling parameters shared by both protocols. */
struct ifl_gen_params {
    int64_t max_tokens; /* -1: default (fill the context) */
    int n;
    double temperature, top_p, min_p, typical_p, rep_pen, pres_pen, freq_pen;
    int64_t top_k, min_tokens, seed;
    int has_seed, ignore_eos, logprobs, top_logprobs;
    int best_of;      /* 0: n; else generate best_of per prompt, return the n best */
    int score_prompt; /* 1: the prompt tokens' log-probs (pscore) */
    int prompt_top;   /* and this many alternatives at each */
    int stream;       /* a response per step */
    double priority;
    /* speculative decoding (llama-server's speculative.* fields): -1 the server's */
    int64_t spec_n_max, spec_n_min;
    double spec_p_min;
};

struct ifl_gen_job *ifl_gen_job_new(struct ifl_server *s, ifl_executor *ex);
void ifl_gen_job_free(struct ifl_gen_job *j);
/* Adds a prompt (tokens copied). */
int ifl_gen_add_prompt(struct ifl_gen_job *j, const int32_t *ids, int32_t n);
/* 1 when a prompt text of n bytes certainly has the context's length or
 * more in tokens (the fewest it can give, from the vocabulary's bound
 * ifl_model_info.max_token_bytes, reaches n_ctx): err (IFL_ERR_LEN) then
 * says so in the OpenAI or, with tgi, TGI's words. 0 when it may fit. Such
 * a prompt is refused without tokenizing it: a 3 MB prompt takes seconds. */
int ifl_gen_text_too_long(const struct ifl_server *s, size_t n, int tgi, char *err);
/* The same for a raw JSON body, before it is parsed (prescan.c): on the
 * prompt routes (path), when a prompt in body (a string, or a list of
 * token ids) certainly reaches the context, returns the HTTP status to
 * answer with (400; TGI 422) and fills param and msg (IFL_ERR_LEN);
 * otherwise 0. Parsing a 30 MB body takes half a second, which is why. */
int ifl_prescan_prompt(const struct ifl_server *s, const char *path, const char *body, size_t n,
                       char *param, char *msg);
/* Tokenizes text (BOS as the model says; special-token text parsed). */
int ifl_gen_add_prompt_text(struct ifl_gen_job *j, const char *text, size_t n, int add_special);
int ifl_gen_add_stop(struct ifl_gen_job *j, const char *s);
int ifl_gen_add_bias(struct ifl_gen_job *j, int32_t id, float v);
/* Constrains the output (enum ifl_guide_type; text copied). param names the
 * request field for errors; a second guide is an IFL_EINVAL. The executor
 * compiles it at enqueue: an invalid schema, regex or grammar fails there. */
int ifl_gen_set_guide(struct ifl_gen_job *j, int type, const char *text, size_t n,
                      const char *param, char *err);
/* TGI's `grammar` object ({"type": "json" | "json_schema" | "regex",
 * "value"}) as the request's constraint; err names the problem. */
int ifl_gen_set_tgi_grammar(struct ifl_gen_job *j, json_t *gr, char *err);
/* llama.cpp's per-request `lora`: a list of {"id", "scale"} (scale
 * defaults to 1), up to IFL_LORA_MAX_PER_REQUEST, as the request's
 * adapters; an empty list asks for the base model alone. Ids are checked
 * by the executor at start. IFL_EINVAL with param and err naming the
 * field (e.g. "lora[1].scale"). */
int ifl_gen_set_lora_json(struct ifl_gen_job *j, json_t *v, char *param, char *err);
/* One adapter, by id, at scale (TGI's adapter_id, OpenAI's model naming
 * an adapter); replaces any earlier list. */
void ifl_gen_set_lora_one(struct ifl_gen_job *j, int32_t id, float scale);
/* The text the output is expected to follow (OpenAI's prediction), given
 * to every prompt's request as client drafts; 0 or IFL_ENOMEM. */
int ifl_gen_set_prediction(struct ifl_gen_job *j, const char *text, size_t n);
/* Applies p to the request template; err gets "param: problem". The
 * max_tokens default (p->max_tokens < 0) fills the context of the longest
 * prompt. Returns 0 or a 400-worthy IFL_EINVAL. */
int ifl_gen_apply(struct ifl_gen_job *j, const struct ifl_gen_params *p, char *param, char *err);
/* Enqueues every prompt's request (all or nothing) and registers them with
 * the pump, which from then on queues their responses for the job.
 * IFL_EFULL: 429. */
int ifl_gen_start(struct ifl_gen_job *j, char *err);
/* Folds the responses the pump queued for the job into its choices, calling
 * fn (may be NULL) for each with the choice index; never waits. Returns 1
 * when every request has ended, 0 otherwise. */
typedef void (*ifl_gen_resp_fn)(void *user, int choice, const struct ifl_response *r);
int ifl_gen_poll(struct ifl_gen_job *j, ifl_gen_resp_fn fn, void *user);
/* Folds n responses (and frees them); the same return as ifl_gen_poll. */
int ifl_gen_fold(struct ifl_gen_job *j, struct ifl_response **rs, int32_t n, ifl_gen_resp_fn fn,
                 void *user);
/* Frees a job for good (ifl_gen_job_free hands a running one to the pump). */
void ifl_gen_job_destroy(struct ifl_gen_job *j);
/* Cancels what is still running (its cancelled finals go to the pump when
 * the job is freed first). Counts a client disconnect when disconnected is
 * 1. */
void ifl_gen_cancel(struct ifl_gen_job *j, int disconnected);
/* Cancels what is still running (once) and returns: the caller's polling
 * takes the cancelled finals, so a reply or stream can say abort. */
void ifl_gen_abort(struct ifl_gen_job *j);
int64_t ifl_gen_completion_tokens(const struct ifl_gen_job *j);
/* The i-th returned choice (0 <= i < n_prompts * n_ret) as an index into
 * ch: prompt-major, best first within a prompt when best_of ranked them. */
int ifl_gen_choice_at(const struct ifl_gen_job *j, int i);
int64_t ifl_gen_prompt_tokens(const struct ifl_gen_job *j);
/* Text of one token (raw bytes, special tokens shown) into buf; length. */
size_t ifl_gen_piece(struct ifl_server *s, int32_t tok, char *buf, size_t cap);

/* A streamed reply: the producer renders each response into out; finish
 * appends the closing events. reply.c drains out into the socket. */
struct ifl_stream {
    struct ifl_gen_job *job;
    void (*on_resp)(void *user, int choice, const struct ifl_response *r);
    void (*on_end)(struct ifl_stream *st);
    void *user; /* the protocol's state, freed by free_user */
    void (*free_user)(void *user);
    struct ifl_buf out;
    size_t off;
    int ended;
};
void ifl_stream_free(struct ifl_stream *st);

/* ---- the pump (pump.c) ---- */

int ifl_pump_start(struct ifl_server *s, char *err);
/* Joins the pump thread and frees the jobs it still held. Call after the
 * HTTP daemon has stopped and before the executor is destroyed. */
void ifl_pump_stop(struct ifl_server *s);
/* Room for n more ids in the map, so that registering cannot fail. */
int ifl_pump_reserve(struct ifl_server *s, int n);
void ifl_pump_unreserve(struct ifl_server *s, int n);
/* After the job's requests were enqueued (its n_prompts ids reserved). */
void ifl_pump_register(struct ifl_gen_job *j);
/* Moves up to max responses queued for j into out; *ended is set when the
 * executor ended or a response was lost, so no more will come. */
int32_t ifl_pump_take(struct ifl_gen_job *j, struct ifl_response **out, int32_t max, int *ended);
/* The connection is done with j: 1 when the pump took it over (requests
 * still running, their responses folded and the job freed as they come),
 * 0 when the caller frees it. */
int ifl_pump_release(struct ifl_gen_job *j);
/* Suspends c (from its pool thread, inside a libmicrohttpd callback) until
 * something arrives for j, the client hangs up, or shutdown moves on.
 * 1: suspended (return, libmicrohttpd calls again on resume); 0: something
 * is already there, look again; -1: the server is stopping, close. */
int ifl_pump_suspend(struct ifl_hconn *c, struct ifl_gen_job *j);
/* Resumes every suspended connection (shutdown's abort phase); with
 * stopping, no connection suspends again. */
void ifl_pump_wake_all(struct ifl_server *s, int stopping);
/* Socket records (libmicrohttpd's connection notifications). */
void ifl_pump_sock_open(struct ifl_server *s, struct MHD_Connection *conn, void **ctx);
void ifl_pump_sock_close(struct ifl_server *s, void **ctx);
/* The socket must deliver a whole request by now (µs on ifl_now_us' clock;
 * 0: no deadline), else the pump closes it. */
void ifl_pump_sock_deadline(struct ifl_sock *k, int64_t deadline_us);

/* ---- the HTTP daemon (http.c) ---- */

/* Starts libmicrohttpd's thread pool on the listening socket lfd, with the
 * route table behind it. IFL_EIO with err when it does not start. */
int ifl_http_start(struct ifl_server *s, int lfd, char *err);

/* ---- routes (openai.c, tgi.c) ---- */

/* A route's handler: body is the request's JSON object on the routes that
 * take one, NULL on the others (it stays the caller's). Returns an MHD
 * result. */
typedef int (*ifl_route_fn)(struct ifl_hconn *c, json_t *body);

int ifl_oai_completions(struct ifl_hconn *c, json_t *body);
int ifl_oai_chat(struct ifl_hconn *c, json_t *body);
int ifl_oai_models(struct ifl_hconn *c, json_t *body);
/* Log-probs in OpenAI's shapes (logprobs.c); each returns a new object. */
json_t *ifl_oai_lp_completion_new(void);
/* Appends n tokens (with k alternatives each in tops) to a completions
 * log-probs object; *offset advances by each token's text. */
void ifl_oai_lp_completion_add(struct ifl_server *s, json_t *o, const int32_t *toks,
                               const float *lps, const struct ifl_top_logprob *tops, int32_t k,
                               int32_t n, int64_t *offset);
json_t *ifl_oai_lp_completion(struct ifl_server *s, const int32_t *toks, const float *lps,
                              const struct ifl_top_logprob *tops, int32_t k, int32_t n,
                              int64_t *offset);
/* Appends prompt pi's scored tokens (the job's prompt scores) to o, their
 * offsets indexing the prompt as echoed (echo_len bytes). */
void ifl_oai_lp_completion_echo(struct ifl_server *s, json_t *o, const struct ifl_gen_job *j,
                                int pi, int64_t echo_len);
json_t *ifl_oai_lp_chat(struct ifl_server *s, const int32_t *toks, const float *lps,
                        const struct ifl_top_logprob *tops, int32_t k, int32_t n);
/* Splits s->model_name, when split is 1 a comma-separated list (from
 * --served-model-name), into s->names and keeps the first as model_name.
 * IFL_ENOMEM. ifl_oai_names_free frees s->names. */
int ifl_oai_names_init(struct ifl_server *s, int split);
void ifl_oai_names_free(struct ifl_server *s);
int ifl_tgi_generate(struct ifl_hconn *c, json_t *body);
int ifl_tgi_generate_stream(struct ifl_hconn *c, json_t *body);
/* /generate or /generate_stream as the body's "stream" says (TGI's compat
 * routes / and /invocations). */
int ifl_tgi_generate_any(struct ifl_hconn *c, json_t *body);
int ifl_tgi_tokenize(struct ifl_hconn *c, json_t *body);
int ifl_tgi_detokenize(struct ifl_hconn *c, json_t *body);
int ifl_tgi_info(struct ifl_hconn *c, json_t *body);
/* llama-server's GET and POST /lora-adapters (adapters.c). */
int ifl_lora_list(struct ifl_hconn *c, json_t *body);
int ifl_lora_set_scales(struct ifl_hconn *c, json_t *body);
/* The playground (web.c): the page at / and /dashboard; a file named by
 * the route's path (/app.js, /app.css, /openapi.json). */
int ifl_web_page(struct ifl_hconn *c, json_t *body);
int ifl_web_file(struct ifl_hconn *c, json_t *body);

/* ---- chat templates (messages.c) ---- */

int ifl_server_chat_init(struct ifl_server *s, ifl_executor *ex, char *err);
void ifl_server_chat_free(struct ifl_server *s);
/* Renders messages (validated: role, content) into a malloc'd prompt.
 * IFL_EINVAL with err naming the message field. */
int ifl_server_chat_render(struct ifl_server *s, json_t *messages, char **out, size_t *n,
                           char *err);
/* The same, image_url parts accepted: their data URLs decoded into j's
 * images (in order; 400-worthy IFL_EINVAL for a remote URL, another type,
 * bad base64, or a server without a vision encoder), and marker written in
 * the prompt where each goes. A template whose source names "image" sees
 * the content as parts ({"type": "image"} for an image; its text for one
 * is kept, the marker after it); any other sees a string with the marker
 * where the part was. */
int ifl_server_chat_render_images(struct ifl_server *s, json_t *messages, struct ifl_gen_job *j,
                                  const char *marker, char **out, size_t *n, char *err);
/* The same with tools (an OpenAI tools list, or NULL) and vars (an
 * object of more template variables, or NULL: chat_template_kwargs,
 * reasoning_effort) given to the template; the variables the server sets
 * win over vars. With a template that takes tools (s->chat_harmony,
 * s->chat_hermes, s->chat_llama3, s->chat_xml) messages may also be tool results (role "tool", with
 * their tool_call_id and name) and assistant turns with tool_calls (their
 * JSON arguments given to the template as objects) and reasoning_content
 * (given as "thinking", as gpt-oss's template names it, or as it is). */
int ifl_server_chat_render_tools(struct ifl_server *s, json_t *messages, json_t *tools,
                                 json_t *vars, struct ifl_gen_job *j, const char *marker,
                                 char **out, size_t *n, char *err);

/* ---- function tools in a chat request (tools.c) ---- */

/* How a template's model writes its tool calls, which is how its replies are read. */
enum {
    IFL_REPLY_PLAIN = 0,
    IFL_REPLY_HARMONY = 1,
    IFL_REPLY_HERMES = 2,
    IFL_REPLY_LLAMA3 = 3,
    IFL_REPLY_XML = 4,     /* Qwen3-Coder's <function=...> blocks (xmlcall.c) */
    IFL_REPLY_MISTRAL = 5, /* Mistral's [TOOL_CALLS] (mistral.c) */
    IFL_REPLY_DEEPSEEK = 6 /* DeepSeek-R1's <｜tool▁calls▁begin｜> blocks (deepseek.c) */
};

/* The server's template's tool format (IFL_REPLY_*; PLAIN: it takes no tools). (messages.c) */
int ifl_server_tool_format(const struct ifl_server *s);

struct ifl_chat_tools {
    json_t *list;            /* the tools for the template (a view of the body), or NULL */
    json_t *names;           /* function name -> its parameters schema, or {} (owned), or NULL */
    int parse;               /* IFL_REPLY_*: how the reply is read for calls (0: it is not) */
    int forced;              /* tool_choice "required" (1) or a named function (2) */
    const char *forced_name; /* that function (a view of the body) */
    int parallel;            /* parallel_tool_calls (default 1) */
    int multi;               /* the template renders an assistant turn with several calls */
    char prefill[128];       /* harmony or Mistral, a forced call: what the prompt ends with
                                (ifl_chat_tools_guide), which the reply continues */
};
/* Reads tools, tool_choice and parallel_tool_calls of body b for the
 * server's template (ifl_server_tool_format; with none, t is
 * empty and the fields are left to the caller's refusal). 0, or an HTTP
 * status with param and err (IFL_ERR_LEN) naming the field: tools not a
 * list, a bad entry, a parameters schema that is malformed (or, for a
 * forced call, one a grammar cannot express), an unknown tool_choice or
 * function name, a forced call without tools or with harmony. On success
 * t->names is the caller's to free. */
int ifl_chat_tools_read(struct ifl_server *s, json_t *b, struct ifl_chat_tools *t, char *param,
                        char *err);
/* A forced call (t->forced) as j's grammar: the format's call blocks with
 * each function's arguments schema (harmony, Mistral: what follows
 * t->prefill, which the caller appends to the prompt and gives the reply
 * parser first). 0
 * when nothing is forced; 400 when another field already constrains the
 * output or ignore_eos is set; 500. */
int ifl_chat_tools_guide(struct ifl_gen_job *j, struct ifl_chat_tools *t, int ignore_eos,
                         char *param, char *err);

/* ---- gpt-oss's harmony replies (harmony.c) ---- */

/* One choice's parser state: text pushed in pieces as it streams. */
struct ifl_harmony {
    int state, channel, seen_header, n_calls;
    struct ifl_buf hdr;  /* the header being read, up to <|message|> */
    struct ifl_buf hold; /* bytes not yet placed (a tag may be starting) */
    struct ifl_buf args; /* the tool call's arguments so far */
    char name[128];      /* the tool call's function */
    size_t name_len;
    char id_base[80]; /* tool call ids are call_<id_base>_<n> (set by the caller) */
};
/* What pieces gave: appended to, never reset by the parser. */
struct ifl_reply_out {
    struct ifl_buf reasoning; /* the analysis channel */
    struct ifl_buf content;   /* the final channel (or the text, when not harmony) */
    json_t *calls;            /* OpenAI tool_calls, each with its index (caller's array) */
    int oom;
};
void ifl_harmony_init(struct ifl_harmony *h);
void ifl_harmony_deinit(struct ifl_harmony *h);
void ifl_harmony_push(struct ifl_harmony *h, const char *text, size_t n, struct ifl_reply_out *o);
/* The text ended: bytes held for a tag that never came are text, and a
 * tool call cut short is given as it stands. */
void ifl_harmony_finish(struct ifl_harmony *h, struct ifl_reply_out *o);

/* ---- what the reply parsers share of plain text ---- */

/* JSON's whitespace, which the call formats take between their tags. */
static inline int ifl_reply_ws(char c)
{
    return c == ' ' || c == '\n' || c == '\r' || c == '\t';
}

/* The first byte of s[i, n) that is not whitespace, or n. */
static inline size_t ifl_reply_skip_ws(const char *s, size_t n, size_t i)
{
    while (i < n && ifl_reply_ws(s[i]))
        i++;
    return i;
}

/* Whether s[i, n) begins with lit. */
static inline int ifl_reply_starts(const char *s, size_t n, size_t i, const char *lit)
{
    size_t l = strlen(lit);
    return n - i >= l && !memcmp(s + i, lit, l);
}

/* A byte of a function name as tools.c takes them: letters, digits, '_', '-', '.'. */
static inline int ifl_reply_name_char(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
           c == '-' || c == '.';
}

/* ---- Hermes-style tool calls: <tool_call>{JSON}</tool_call> (hermes.c) ---- */

/* One choice's parser state: text pushed in pieces as it streams. The
 * XML format (xmlcall.c) and DeepSeek-R1's (deepseek.c) are read by the
 * same machine with their own tags and block readers. */
struct ifl_hermes {
    int state, n_calls;
    const char *open, *close; /* the block's tags (static strings; Hermes':
                                 <tool_call>, </tool_call>) */
    int in_span;              /* inside the block, between span_open and span_close */
    const char *span_open;    /* within a block, text from span_open to span_close is
                                 opaque: the closing tag is not looked for in it (NULL:
                                 none); static strings */
    const char *span_close;
    /* whether the block in blk (closed: its closing tag came) is a call:
     * appends it to o and returns 1, or returns 0 (NULL: Hermes' JSON) */
    int (*block_fn)(struct ifl_hermes *t, int closed, struct ifl_reply_out *o);
    int seg_text;        /* the text since the last call (or the start) is not all
                            whitespace */
    struct ifl_buf hold; /* bytes not yet placed (a tag may be starting) */
    struct ifl_buf pend; /* whitespace alone since the last call: dropped when a
                            call follows */
    struct ifl_buf pre;  /* that whitespace, before the open block */
    struct ifl_buf blk;  /* the open block's text */
    json_t *names;       /* the request's functions (an object keyed by name; a
                            reference), or NULL: any name is taken */
    char id_base[80];    /* tool call ids are call_<id_base>_<n> (set by the caller) */
};
void ifl_hermes_init(struct ifl_hermes *t, json_t *names);
void ifl_hermes_deinit(struct ifl_hermes *t);
/* Appends what the text gives to o: content and, once each block closes,
 * its call (with its index) to o->calls. */
void ifl_hermes_push(struct ifl_hermes *t, const char *s, size_t n, struct ifl_reply_out *o);
/* The text ended: held bytes are text; an unclosed block is a call when
 * its JSON is one, else text. */
void ifl_hermes_finish(struct ifl_hermes *t, struct ifl_reply_out *o);

/* Where tag starts in s (n bytes): its offset, or where a prefix of it
 * ends s (a tag that may be arriving), or n. *whole says which. (hermes.c) */
size_t ifl_reply_find_tag(const char *s, size_t n, const char *tag, int *whole);
/* The raw text of the top-level member key of the JSON object in s (n
 * bytes, valid JSON): *v and its length (the last, when given twice, as the
 * JSON parser takes it), or 0 when the key is not written plainly. (hermes.c) */
size_t ifl_reply_raw_member(const char *s, size_t n, const char *key, const char **v);
/* Appends the call {index, id "call_<id_base>_<index>", type "function",
 * function {name, arguments: raw (rl bytes)}} to o->calls (o->oom when it
 * cannot, or raw is NULL). (hermes.c) */
void ifl_reply_add_call(struct ifl_reply_out *o, const char *id_base, int index, json_t *name,
                        const char *raw, size_t rl);
/* A JSON value read a byte at a time: strings (with their escapes) and
 * nesting are all it follows, the rest is left to a parser. */
struct ifl_reply_json {
    int depth, in_str, esc;
};
/* Reads c: 1 when it closes the outermost object or list. (hermes.c) */
int ifl_reply_json_byte(struct ifl_reply_json *j, char c);
/* Text outside a format's call blocks: a run of whitespace alone since the
 * reply's start or the last call (*seg_text 0) waits in pend, dropped by
 * the caller when a call follows; text with anything else in it goes to
 * o->content after that run, and *seg_text becomes 1 (the caller sets it
 * back to 0 after a call). (hermes.c) */
void ifl_reply_text(int *seg_text, struct ifl_buf *pend, const char *s, size_t n,
                    struct ifl_reply_out *o);
/* The same with the id given. (hermes.c) */
void ifl_reply_add_call_id(struct ifl_reply_out *o, const char *id, int index, json_t *name,
                           const char *raw, size_t rl);

/* ---- Qwen3-Coder's XML tool calls (xmlcall.c) ---- */

/* Kinds of JSON value a schema allows, as a mask of IFL_XML_K_* (0: it
 * does not say): its type (or types), else its anyOf/oneOf members', else
 * its enum/const values'; a $ref to root's #/$defs/NAME or
 * #/definitions/NAME followed (a few levels). */
enum {
    IFL_XML_K_STRING = 1,
    IFL_XML_K_INTEGER = 2,
    IFL_XML_K_NUMBER = 4,
    IFL_XML_K_BOOLEAN = 8,
    IFL_XML_K_NULL = 16,
    IFL_XML_K_OBJECT = 32,
    IFL_XML_K_ARRAY = 64
};
int ifl_xml_kinds(json_t *schema, json_t *root);
/* A parser of the XML format: ifl_hermes_push, _finish and _deinit read it.
 * names: function name -> its parameters schema (a reference), or NULL:
 * any name is taken, every value a string. */
void ifl_xml_init(struct ifl_hermes *t, json_t *names);
/* GBNF rule xml-text (a static string): any text that does not hold
 * "</parameter>", a string parameter's value in a forced call. */
const char *ifl_xml_text_gbnf(void);

/* ---- DeepSeek-R1's tool calls (deepseek.c) ---- */

/* Its tags, in UTF-8: <｜tool▁calls▁begin｜> and so on (U+FF5C and U+2581). */
#define IFL_DS_BAR "\xef\xbd\x9c"
#define IFL_DS_SP "\xe2\x96\x81"
#define IFL_DS_CALLS_BEGIN "<" IFL_DS_BAR "tool" IFL_DS_SP "calls" IFL_DS_SP "begin" IFL_DS_BAR ">"
#define IFL_DS_CALLS_END "<" IFL_DS_BAR "tool" IFL_DS_SP "calls" IFL_DS_SP "end" IFL_DS_BAR ">"
#define IFL_DS_CALL_BEGIN "<" IFL_DS_BAR "tool" IFL_DS_SP "call" IFL_DS_SP "begin" IFL_DS_BAR ">"
#define IFL_DS_CALL_END "<" IFL_DS_BAR "tool" IFL_DS_SP "call" IFL_DS_SP "end" IFL_DS_BAR ">"
#define IFL_DS_TOOL_SEP "<" IFL_DS_BAR "tool" IFL_DS_SP "sep" IFL_DS_BAR ">"
/* A parser of DeepSeek-R1's format: ifl_hermes_push, _finish and _deinit
 * read it. names: the request's functions, or NULL: any name is taken. */
void ifl_deepseek_init(struct ifl_hermes *t, json_t *names);

/* ---- Llama 3.1's JSON tool calls: {"name", "parameters"} (llama3.c) ---- */

/* One choice's parser state: text pushed in pieces as it streams. A reply
 * that is one JSON call object, or several separated by ';', is calls; any
 * other is content as it stands. */
struct ifl_llama3 {
    int state;                /* L3_* (llama3.c) */
    struct ifl_reply_json js; /* the object being read */
    int expect_obj;           /* between objects: a '{' is next (after a ';'), not a ';' */
    size_t scan;              /* bytes of hold read by the scanner */
    size_t obj;               /* where the object being read begins in hold */
    struct ifl_buf hold;      /* the reply so far, while it may still be calls */
    json_t *calls;            /* the calls read so far, given when the reply ends */
    json_t *names;            /* the request's functions (a reference), or NULL: any */
    char id_base[80];         /* tool call ids are call_<id_base>_<n> (set by the caller) */
};
void ifl_llama3_init(struct ifl_llama3 *t, json_t *names);
void ifl_llama3_deinit(struct ifl_llama3 *t);
/* Appends content to o as soon as the reply cannot be calls; a reply that
 * may still be is held. */
void ifl_llama3_push(struct ifl_llama3 *t, const char *s, size_t n, struct ifl_reply_out *o);
/* The text ended: a held reply is given as its calls, or as content. */
void ifl_llama3_finish(struct ifl_llama3 *t, struct ifl_reply_out *o);

/* ---- Mistral's tool calls: [TOOL_CALLS]NAME[CALL_ID]ID[ARGS]{JSON} (mistral.c) ---- */

/* One choice's parser state: text pushed in pieces as it streams. */
struct ifl_mistral {
    int state, n_calls;
    int seg_text;             /* the text since the last call (or the start) is not all
                                 whitespace */
    int list;                 /* the group is the v3 form, [TOOL_CALLS] [{...}, ...] */
    struct ifl_reply_json js; /* its JSON, once begun */
    size_t name, name_len;    /* the name in grp */
    size_t id, id_len;        /* the id in grp (CALL_ID), or none */
    size_t json;              /* where the JSON begins in grp */
    struct ifl_buf hold;      /* bytes not yet placed (a tag may be starting) */
    struct ifl_buf grp;       /* the open group's text after [TOOL_CALLS] */
    struct ifl_buf pend;      /* whitespace alone since the last call: dropped when a
                                 call follows */
    json_t *names;            /* the request's functions (a reference), or NULL: any */
    char id_base[80];         /* ids made for calls derive from it (set by the caller) */
};
void ifl_mistral_init(struct ifl_mistral *t, json_t *names);
void ifl_mistral_deinit(struct ifl_mistral *t);
/* Appends what the text gives to o: content and, once each call's JSON
 * closes, the call (with its index) to o->calls. */
void ifl_mistral_push(struct ifl_mistral *t, const char *s, size_t n, struct ifl_reply_out *o);
/* The text ended: a group cut short, and held bytes, are text. */
void ifl_mistral_finish(struct ifl_mistral *t, struct ifl_reply_out *o);
/* The id of call index of a reply whose ids derive from id_base: nine
 * letters and digits, as Mistral's templates take them back. */
void ifl_mistral_call_id(const char *id_base, int index, char out[10]);

/* ---- reasoning in <think> blocks (think.c) ---- */

/* One choice's splitter: a reply that begins with <think> (after any
 * whitespace), or whose prompt left a <think> block open, has its
 * reasoning up to </think> taken out; the rest is the answer. */
struct ifl_think {
    int state;
    const char *open, *close; /* the tags: <think> and </think>, or others */
    int r_text;               /* the reasoning has had text other than whitespace */
    struct ifl_buf hold;      /* bytes not yet placed (a tag may be starting) */
    struct ifl_buf ws;        /* whitespace the reasoning ends with so far */
};
/* inside: the prompt ends inside an open block (ifl_think_prompt_open) */
void ifl_think_init(struct ifl_think *k, int inside);
/* The same for a block between other tags (static strings; Mistral's
 * [THINK] and [/THINK]). */
void ifl_think_init_tags(struct ifl_think *k, int inside, const char *open, const char *close);
void ifl_think_deinit(struct ifl_think *k);
/* Appends the reasoning to o->reasoning, without the whitespace it begins
 * or ends with, and the answer's text to *rest, without the whitespace
 * that follows </think>. Text that does not begin with <think> is all
 * answer, as it stands. */
void ifl_think_push(struct ifl_think *k, const char *s, size_t n, struct ifl_reply_out *o,
                    struct ifl_buf *rest);
/* The text ended: a reply cut inside its block (max_tokens, a stop
 * string) is reasoning and no answer. */
void ifl_think_finish(struct ifl_think *k, struct ifl_reply_out *o, struct ifl_buf *rest);
/* Whether a rendered prompt (n bytes) ends with <think> and whitespace
 * only: the template opened the block, so the reply begins in it. */
int ifl_think_prompt_open(const char *p, size_t n);

/* An image_url part's URL (dataurl.c): a PNG or JPEG data URL's bytes,
 * malloc'd; IFL_EINVAL with a sentence for anything else (remote URLs
 * are not fetched). */
int ifl_server_data_url(const char *url, size_t len, unsigned char **out, size_t *n, char *err);
/* An image's URL (dataurl.c): a PNG or JPEG data URL's bytes, or an
 * http(s) URL under one of the server's --image-url-allow prefixes
 * fetched (cfg.fetch_image), malloc'd; IFL_EINVAL with a sentence for
 * anything else (a remote URL outside the list, another type, bad
 * base64, a failed fetch). raw_b64: bare base64 (llama.cpp's
 * multimodal_data) is taken too. */
int ifl_server_image_url(struct ifl_server *s, const char *url, size_t len, int raw_b64,
                         unsigned char **out, size_t *n, char *err);
/* A marker for an image's place that no client text holds (a counter
 * and the time, mixed): "<__media_%016llx__>". */
void ifl_server_image_marker(char out[64]);
/* TGI's image syntax in `inputs` (dataurl.c): each ![](URL) is an image,
 * taken into j's images in order, and replaced by marker in *text
 * (malloc'd, *tn bytes). 0 images: *text NULL. IFL_EINVAL naming the
 * image (its index and the problem). */
int ifl_server_md_images(struct ifl_server *s, struct ifl_gen_job *j, const char *in, size_t n,
                         const char *marker, char **text, size_t *tn, char *err);
/* Tokenizes a prompt rendered with images' markers and adds it to j with
 * its images placed (gen.c). */
int ifl_gen_add_prompt_images(struct ifl_gen_job *j, const char *text, size_t n, int add_special,
                              const char *marker, char *err);

#endif
