/*
 * The command line: shared argument parsing and a one-sequence session over
 * the forward pass, used by `run` and `eval`.
 */
#ifndef IFL_CLI_CLI_H
#define IFL_CLI_CLI_H

#include <stdint.h>

#include "inflight.h"
#include "model/forward.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

/* Exit statuses: 0 success, 1 runtime failure, 2 bad arguments or files. */
#define CLI_EXIT_USAGE 2

/* Prints "inflight CMD: message" to stderr and returns CLI_EXIT_USAGE. */
int cli_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Strict number parsing: the whole string must be a number within [lo, hi]. */
int cli_parse_i64(const char *s, int64_t lo, int64_t hi, int64_t *out);
int cli_parse_f64(const char *s, double lo, double hi, double *out);
/* Parses "1 2 3" (spaces, commas or newlines between) into a malloc'd array. */
int cli_parse_ids(const char *s, int32_t **ids, int64_t *n);
/* "f16", "f32" or "q8_0" to enum ifl_kv_type; -1 for anything else. */
int cli_parse_kv_type(const char *s);
/* --vision-precision: f32 or bf16 as enum ifl_vision_precision; -1 otherwise. */
int cli_parse_vision_precision(const char *s);
/* --repack-cache-max: a size ("20G", "512M", bytes) or "off" (-1: no
 * bound) into *out; 0, or -1 for anything else. */
int cli_parse_cache_max(const char *s, int64_t *out);
/* "1,4,16": 1..max counts, each in [lo, hi], into out; returns how many, or
 * -1 for anything else (an empty list included). */
int cli_parse_int_list(const char *s, int64_t lo, int64_t hi, int *out, int max);
/* The p-th quantile (0..1, nearest rank) of n values; sorts v in place. 0 when n is 0. */
double cli_percentile(double *v, int64_t n, double p);
/* A whole file of at most max bytes, NUL-terminated, malloc'd; NULL with
 * *why set (strerror, "too large", ...) when it cannot be read. */
char *cli_read_file(const char *path, size_t max, const char **why);
/* The same, any bytes (an image), its size in *n_out; only what the file holds is allocated. */
char *cli_read_file_n(const char *path, size_t max, size_t *n_out, const char **why);
/* enum ifl_kv_type to the weight-type id the KV store uses. */
enum ifl_type cli_kv_store_type(int kv_type);

/* serve --image-url-allow (fetch.c, libcurl): cli_fetch_init once before
 * any thread fetches (-1 on failure); cli_fetch_image is the server's
 * fetch_image (server.h). */
int cli_fetch_init(void);
int cli_fetch_image(void *user, const char *url, size_t max_bytes, unsigned char **out, size_t *n,
                    char *err);

/* LoRA adapters named on a command line (serve, run, bench):
 *   --lora FILE             global scale 1 (every request takes it, as
 *                           llama.cpp applies --lora)
 *   --lora-scaled FILE:S    global scale S
 *   --lora-modules NAME=FILE   (serve) global scale 0: requests select it
 *                           by name (OpenAI's model, TGI's adapter_id)
 *   --lora-cache-bytes N    the executor's lora_cache_bytes
 *   --lora-type f32|f16|q8_0  how adapters are held (the executor's lora_type)
 * each repeatable up to CLI_MAX_LORA adapters. */
#define CLI_MAX_LORA 64
struct cli_lora {
    int n;
    const char *path[CLI_MAX_LORA];
    char name[CLI_MAX_LORA][128]; /* "": the file's */
    float scale[CLI_MAX_LORA];
    int32_t id[CLI_MAX_LORA];      /* set by cli_lora_load */
    char pbuf[CLI_MAX_LORA][1024]; /* --lora-scaled's paths, cut from their scale */
    int64_t cache_bytes;
    int type; /* --lora-type: the executor's lora_type (IFL_LORA_TYPE_*) */
};
/* 0 when a (with value v) was a LoRA option and is taken, an exit status
 * when it was one with a bad value, -1 when it is none. */
int cli_lora_option(const char *cmd, const char *a, const char *v, struct cli_lora *l);
/* Loads l's adapters into ex, in order (ids into l->id); 0, or an exit
 * status after printing "inflight CMD: --lora FILE: why". */
int cli_lora_load(const char *cmd, ifl_executor *ex, struct cli_lora *l);

/* One sequence: the model, its vocabulary, a KV store of n_ctx positions and
 * a forward context. */
struct cli_session {
    struct ifl_model *model;
    struct ifl_vocab *vocab;
    struct ifl_kv_store *kv;
    struct ifl_fwd *fwd;
    int32_t n_ctx;
    int32_t max_rows;
    int32_t *table; /* block ids 0..n_blocks-1 */
    int32_t n_blocks;
    int32_t *rows; /* scratch for a batch: tokens, pos, seq */
    uint8_t *want;
};

/* Loading progress on stderr (an ifl_load_progress_fn; user is this).
 * On a terminal, one line redrawn in place (MiB done of total, percent,
 * rate, stage) once loading has taken show_after_s seconds, finished with
 * a newline when ready. Elsewhere (a log file, a pipe) only one closing
 * line, and only when loading took show_after_s or more. Notices (a repack
 * cache rebuilt, ...) always get a line of their own. */
struct cli_progress {
    const char *cmd;     /* "serve", "run" */
    double show_after_s; /* 0: from the start */
    int tty;             /* set by cli_progress_init */
    int64_t t0_us, t_last_us;
    int64_t first_done; /* done at the first call: what needed no work */
    int drawn;          /* a tty line is on screen, not yet ended */
    int wrote_cache;    /* the weights went into a new repack cache file */
    int64_t total;      /* bytes of weights, from the last call */
};
/* 0 when path is a directory this process can write into, else an exit
 * status after printing why ("inflight CMD: --repack-cache ...") */
int cli_check_cache_dir(const char *cmd, const char *path);
/* The repack cache directory a command uses: NULL for `--repack-cache off`;
 * the flag's directory when given (checked with cli_check_cache_dir);
 * unset, the default for models of CLI_CACHE_MIN_BYTES or more:
 * $INFLIGHT_CACHE_DIR, else $XDG_CACHE_HOME/inflight, else
 * $HOME/.cache/inflight, made if missing (NULL when none can be made or
 * written: the weights are then repacked in memory, as for small models,
 * whose repack costs less than reading a file). *is_default says the
 * default was chosen. buf holds the path built. */
#define CLI_CACHE_MIN_BYTES ((int64_t)64 << 20)
const char *cli_repack_cache(const char *flag, const char *model_path, char *buf, size_t cap,
                             int *is_default);
/* After loading with the default cache: says once, on stderr, where the
 * weights were saved, if this start wrote them. */
void cli_cache_note(const struct cli_progress *p, const char *dir, int is_default);
void cli_progress_init(struct cli_progress *p, const char *cmd, double show_after_s);
void cli_progress_fn(void *user, const struct ifl_load_progress *lp);

struct cli_session_opts {
    const char *model_path;
    const char *repack_cache_dir; /* NULL: repack in memory */
    int64_t repack_cache_max;     /* --repack-cache-max (0: the default bound) */
    int32_t n_ctx;                /* 0: the model's training context, at most 4096 */
    int n_threads;                /* 0: the CPUs this process may use (ifl_syscpu_count) */
    enum ifl_type kv_type;
    int32_t max_rows; /* prefill chunk */
};

/* Returns 0, or an exit status after printing the error. */
int cli_session_open(struct cli_session *s, const struct cli_session_opts *o, const char *cmd);
void cli_session_close(struct cli_session *s);
/* Runs tokens[0..n) at positions start.. ; writes logits of every position
 * to logits_all (n x n_vocab) when non-NULL, else of the last into last. */
int cli_session_eval(struct cli_session *s, const int32_t *tokens, int64_t n, int32_t start,
                     float *logits_all, float *last, char *err);

/* Speculative decoding flags, shared by run, serve and bench:
 * --spec-type, --draft-model (-md), --draft-max, --draft-min,
 * --draft-p-min, --spec-ngram, --spec-ngram-min-hits, --spec-tree-budget,
 * --spec-tree-top-n, --spec-accept, --spec-adaptive. cli_spec_option
 * takes flag a with value v into c: 0 when taken, -1 when a is not one of
 * them, else an exit status after printing why. cli_spec_finish checks
 * the whole (--draft-model alone means --spec-type draft). */
#define CLI_SPEC_HELP                                                                              \
    "  --spec-type T             speculative decoding: none (default), ngram, draft, eagle3\n"     \
    "  --draft-model FILE, -md FILE  the draft model (draft) or EAGLE-3 head (eagle3)\n"           \
    "  --draft-max N             most drafts per step, 1..32 (default 16)\n"                       \
    "  --draft-min N             run no fewer drafts than this (default 0)\n"                      \
    "  --draft-p-min P           draft model: stop drafting below this probability (0.75)\n"       \
    "  --spec-ngram N            ngram: tokens matched, 1..8 (default 3)\n"                        \
    "  --spec-ngram-min-hits N   ngram: earlier occurrences needed (default 1)\n"                  \
    "  --spec-tree-budget N      eagle3: nodes per draft tree (default 24)\n"                      \
    "  --spec-tree-top-n N       eagle3: children per node (default 4)\n"                          \
    "  --spec-accept MODE        exact (default: outputs as without speculation) or\n"             \
    "                            rejection (speculative sampling)\n"                               \
    "  --spec-adaptive on|off    draft length follows acceptance (default on)\n"
int cli_spec_option(const char *cmd, const char *a, const char *v,
                    struct ifl_speculative_config *c);
int cli_spec_finish(const char *cmd, struct ifl_speculative_config *c);
/* The LoRA flags' help, shared likewise. */
#define CLI_LORA_HELP                                                                              \
    "LoRA adapters (repeatable; docs/cli.md):\n"                                                   \
    "  --lora FILE               an adapter at global scale 1 (applied to every request)\n"        \
    "  --lora-scaled FILE:SCALE  an adapter at global scale SCALE\n"                               \
    "  --lora-modules NAME=FILE  an adapter at scale 0, chosen per request by name or id\n"        \
    "  --lora-cache-bytes N      drop idle adapters over N bytes (read again when named)\n"        \
    "  --lora-type f32|f16|q8_0  how adapters are held: f16 halves their memory and bandwidth,\n"  \
    "                            q8_0 quarters them (f32)\n"

/* Tensor parallelism (run, bench, serve; docs/distributed.md; cmd_tp.c):
 *   --tp N           the model split over N ranks: those of the MPI job this
 *                    process belongs to (mpirun -np N inflight ... --tp N),
 *                    or, started without a launcher, this process and N-1
 *                    workers it spawns (orchestrator mode)
 *   --tp-timeout S   each collective's deadline, seconds (default 30)
 * cli_tp_option takes flag a with value v: 0 when taken, -1 when a is not
 * one of them, else an exit status after printing why. cli_tp_start joins
 * or starts the job: -1 means go on as rank 0 (or without --tp; t->comm is
 * then the executor's tp_comm); otherwise it returns an exit status, a
 * worker rank's when its loop ended, or an error's (no MPI in this build,
 * a job of another size, workers that could not start). cli_tp_end leaves
 * the job and returns status. */
struct cli_tp {
    int n;
    int emulate; /* --tp-emulate N: one process summing as N ranks do */
    double timeout_s;
    struct ifl_comm *comm;
};
#define CLI_TP_HELP                                                                                \
    "  --tp N                    split the model over N ranks: an MPI job's (mpirun -np N),\n"     \
    "                            or this process and N-1 workers it starts "                       \
    "(docs/distributed.md)\n"                                                                      \
    "  --tp-timeout S            a rank silent for S seconds ends the job (default 30)\n"          \
    "  --tp-emulate N            one process summing as --tp N does: the same logits and\n"        \
    "                            tokens as that job, bit for bit (slower; docs/distributed.md)\n"
int cli_tp_option(const char *cmd, const char *a, const char *v, struct cli_tp *t);
int cli_tp_start(const char *cmd, struct cli_tp *t, const char *model, int n_threads);
int cli_tp_end(struct cli_tp *t, int status);
/* inflight tp-worker: a worker of orchestrator mode (started by --tp N). */
int cmd_tp_worker(int argc, char **argv);

int cmd_run(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_loadgen(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_lora(int argc, char **argv);

#endif
