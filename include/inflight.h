/*
 * inflight: an LLM inference executor and server for CPUs.
 *
 * This is the one public header. It uses plain C types only (fixed-width
 * integers, float, const char *, structs of those) so that bindings such as
 * Python's ctypes can mirror it without a compiler.
 *
 * Glossary of dimension names used across the project:
 *   n_embd     width of the residual stream
 *   n_head     query heads;  n_head_kv  key/value heads (grouped-query attention)
 *   head_dim   width of one head
 *   n_ff       width of the feed-forward hidden layer
 *   n_ctx      positions a sequence may hold
 *   n_vocab    tokens in the vocabulary
 *   n_batch    rows (tokens) in one forward step, from any number of sequences
 */
#ifndef INFLIGHT_H
#define INFLIGHT_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes. Every fallible function returns 0 on success or one of
 * these negative values. */
enum ifl_status {
    IFL_OK = 0,
    IFL_EINVAL = -1,       /* an argument is invalid */
    IFL_ENOMEM = -2,       /* out of memory */
    IFL_EFORMAT = -3,      /* a file or message is malformed */
    IFL_EIO = -4,          /* an operating-system I/O call failed */
    IFL_EFULL = -5,        /* a queue or pool is full */
    IFL_ECANCELLED = -6,   /* the operation was cancelled */
    IFL_ETIMEDOUT = -7,    /* a wait ran out of time */
    IFL_EUNSUPPORTED = -8, /* valid, but not supported by this build or model */
    IFL_ENOTFOUND = -9,    /* a named thing does not exist */
    IFL_ESTATE = -10,      /* the object is in the wrong state for this call */
};

/* A short English name for a status code ("invalid argument", ...). The
 * string is static; never free it. Thread-safe. */
const char *ifl_strerror(int status);

/* The library version as "MAJOR.MINOR.PATCH". Static string. */
const char *ifl_version(void);

/* ======================================================================
 * The executor: in-flight batching of generation requests.
 *
 * Any number of client threads enqueue requests and await their responses;
 * one engine thread batches every active request into each forward pass.
 * Modelled on TensorRT-LLM's Executor API.
 *
 * Threading: every function here is thread-safe except ifl_executor_destroy,
 * which must not race with other calls on the same executor. Responses
 * belong to the caller once awaited (free each with ifl_response_free).
 * ====================================================================== */

typedef struct ifl_executor ifl_executor;
struct ifl_comm;         /* an MPI job's communicator (src/dist/comm.h); tensor parallelism */
typedef uint64_t ifl_id; /* request ids start at 1; 0 means "none" or "any" */

enum ifl_sched_policy {
    /* admit a request only when KV blocks for its prompt plus max_tokens
     * can be reserved: a running request never has to wait for memory */
    IFL_SCHED_GUARANTEED_NO_EVICT = 0,
    /* admit greedily; when blocks run out, preempt the lowest-priority,
     * latest request (free its blocks, recompute it later, unseen by its
     * client) */
    IFL_SCHED_MAX_UTILIZATION = 1,
};

/* KV cache precision. Q8_0 halves F16's memory (blocks of 32 values with one
 * scale); it needs key and value widths that are multiples of 32. */
enum ifl_kv_type { IFL_KV_F16 = 0, IFL_KV_F32 = 1, IFL_KV_Q8_0 = 2 };

/* What decided the KV pool's size (struct ifl_iteration_stats kv_pool_bound). */
enum ifl_kv_bound {
    IFL_KV_BOUND_TOKENS = 1,        /* kv_cache_tokens */
    IFL_KV_BOUND_BYTES = 2,         /* kv_cache_bytes */
    IFL_KV_BOUND_CONTEXTS = 3,      /* the default, max_batch_size full contexts: it fit */
    IFL_KV_BOUND_LIMIT = 4,         /* the default, cut to kv_cache_memory_limit */
    IFL_KV_BOUND_MEM_AVAILABLE = 5, /* the default, cut to a share of MemAvailable */
    IFL_KV_BOUND_CGROUP = 6,        /* the default, cut to a share of the cgroup's room */
};

enum ifl_finish_reason {
    IFL_FINISH_NOT_FINISHED = 0,
    IFL_FINISH_END_ID = 1,     /* the end token (or another end-of-generation token) */
    IFL_FINISH_STOP_WORDS = 2, /* a stop word or stop string */
    IFL_FINISH_LENGTH = 3,     /* max_tokens or the end of the context */
    IFL_FINISH_TIMED_OUT = 4,  /* allotted_time_ms ran out */
    IFL_FINISH_CANCELLED = 5,
};

enum ifl_request_stage {
    IFL_STAGE_QUEUED = 0,
    IFL_STAGE_CONTEXT_IN_PROGRESS = 1,
    IFL_STAGE_GENERATION_IN_PROGRESS = 2,
    IFL_STAGE_COMPLETE = 3,
};

enum ifl_guide_type {
    IFL_GUIDE_NONE = 0,
    IFL_GUIDE_JSON = 1,        /* any JSON value (text ignored) or an object */
    IFL_GUIDE_JSON_SCHEMA = 2, /* text is a JSON Schema */
    IFL_GUIDE_REGEX = 3,       /* text is a regular expression */
    IFL_GUIDE_EBNF = 4,        /* text is a GBNF grammar */
};

/* Called on the engine thread for one row of logits before sampling; may
 * change logits in place. tokens are the request's tokens so far (prompt
 * then generated). Must not call back into the executor. */
typedef void (*ifl_logits_fn)(void *user, ifl_id request_id, float *logits, int32_t n_vocab,
                              const int32_t *tokens, int32_t n_tokens, uint64_t client_id);
/* Called once per step with every row whose request named the batched
 * processor ("batched"). logits is [n_rows][n_vocab]. */
typedef void (*ifl_batched_logits_fn)(void *user, int32_t n_rows, const ifl_id *request_ids,
                                      float *logits, int32_t n_vocab, const int32_t *const *tokens,
                                      const int32_t *n_tokens, const uint64_t *client_ids);

struct ifl_logits_processor {
    const char *name; /* what a request names; copied at creation */
    ifl_logits_fn fn;
    void *user;
};

/* Loading progress, as ifl_executor_create reports it to
 * ifl_executor_config.load_progress. done and total count the bytes of the
 * model's weight tensors: tensors used as they lie in the file count as
 * done at once; the ones repacked for the kernels (or checked in a repack
 * cache) count as each ~1 MiB piece of them is finished. done only grows
 * within one stage; a last call has done == total and stage "ready" (the
 * engine then still allocates its KV cache, which takes no notable time
 * unless the cache is very large). */
struct ifl_load_progress {
    int64_t done;
    int64_t total;
    const char *stage;  /* "repacking", "repacking into the cache", "checking the repack cache",
                           "ready"; valid during the call only */
    const char *notice; /* NULL, or a sentence to show the user once, e.g. that a stale or
                           corrupt repack cache is rebuilt; valid during the call only */
};
/* Called on the thread that runs ifl_executor_create, at most about 50
 * times a second; must not call into the executor being created. */
typedef void (*ifl_load_progress_fn)(void *user, const struct ifl_load_progress *p);

/* Speculative decoding (docs/api.md "Speculative decoding"): each step a
 * decoding sequence runs its pending token and up to n_max proposed
 * tokens ("drafts") after it in one forward pass, which reads the weights
 * once for all of them, and keeps the drafts the target model would have
 * picked itself. */
enum ifl_spec_type {
    IFL_SPEC_NONE = 0,   /* no proposer (requests may still bring their own drafts) */
    IFL_SPEC_DRAFT = 1,  /* a smaller model with the target's vocabulary (draft_model) */
    IFL_SPEC_NGRAM = 2,  /* n-gram lookup in the prompt and the generated text */
    IFL_SPEC_EAGLE3 = 3, /* an EAGLE-3 head (draft_model) over the target's hidden states */
};

/* How drafts are accepted. */
enum ifl_spec_accept {
    /* every row's token is picked as plain decoding picks it (the argmax,
     * or the seeded sample), and a draft is kept while it equals that
     * pick: outputs and log-probs are bitwise those of plain decoding */
    IFL_SPEC_ACCEPT_EXACT = 0,
    /* speculative sampling: a draft x is kept with probability
     * min(1, p(x) / q(x)) (p the target's processed distribution, q the
     * proposer's; one-hot for n-gram and client drafts), else the token is
     * drawn from max(0, p - q). Outputs follow the target's distribution
     * but are not those of plain decoding; greedy requests stay exact. */
    IFL_SPEC_ACCEPT_REJECTION = 1,
};

struct ifl_speculative_config {
    int32_t type;            /* enum ifl_spec_type (default NONE) */
    const char *draft_model; /* DRAFT and EAGLE3: the GGUF file; copied at creation */
    int32_t n_max;           /* most drafts a sequence runs per step, 1..32 (default 16) */
    int32_t n_min;           /* fewer proposed drafts than this are not run (default 0) */
    float p_min;             /* DRAFT: drafting stops at a token the draft model gives
                                less than this probability (default 0.75) */
    int32_t ngram_size;      /* NGRAM: tokens matched before a proposal, 1..8 (default 3) */
    int32_t ngram_min_hits;  /* NGRAM: earlier occurrences a match needs (default 1) */
    int32_t tree_budget;     /* EAGLE3: nodes of a draft tree, 1..64 (default 24) */
    int32_t tree_top_n;      /* EAGLE3: children kept per node, 1..8 (default 4) */
    int32_t accept;          /* enum ifl_spec_accept (default EXACT) */
    /* 1 (default): each sequence's draft length follows its acceptance
     * (it starts at 7, grows after a step that kept all, halves after
     * repeated misses), a sequence whose drafts keep failing decodes
     * plain for a while, a step's drafts are shared out under a budget of
     * rows and none run beside a prompt chunk (docs/api.md); 0: always up
     * to n_max */
    int32_t adaptive;
};

struct ifl_executor_config {
    int32_t n_threads;             /* forward-pass threads; 0: the CPUs this process may use */
    int32_t max_batch_size;        /* sequences per step (default 16) */
    int32_t max_num_tokens;        /* rows per step: decode rows + prefill chunk (default 512) */
    int32_t max_queue_size;        /* waiting requests before enqueue fails; 0: unlimited */
    int32_t n_ctx;                 /* positions one sequence may reach; 0: the model's, <= 4096 */
    int64_t kv_cache_tokens;       /* KV pool size in positions; 0: from kv_cache_bytes */
    int64_t kv_cache_bytes;        /* used when kv_cache_tokens is 0; 0 as well: the default,
                                      room for max_batch_size full contexts, and a
                                      copy-on-write block per sample after the first, cut to
                                      the memory bound below when it does not fit (never
                                      below one context) */
    int32_t kv_block_size;         /* positions per block (default 16) */
    int32_t kv_type;               /* enum ifl_kv_type (default F16) */
    int32_t sched_policy;          /* enum ifl_sched_policy */
    int32_t enable_prefix_caching; /* default 1 */
    const struct ifl_logits_processor *logits_processors; /* copied at creation */
    int32_t n_logits_processors;
    ifl_batched_logits_fn batched_logits_processor; /* requests name it "batched" */
    void *batched_logits_user;
    /* The default pool's memory bound: kv_cache_memory_limit bytes when
     * > 0, else kv_cache_memory_share (0 < share <= 1; 0: 0.4) of the
     * memory this process may still take: MemAvailable, or the room its
     * memory cgroup (v2 memory.max, v1 memory.limit_in_bytes) leaves if
     * that is less. The pool is address space, resident only as blocks are
     * written, so the bound matters once it fills. */
    double kv_cache_memory_share;
    int64_t kv_cache_memory_limit;
    /* KV blocks that have stayed free this long give their memory back
     * (madvise; cached prefixes are kept), when the engine is idle or, if
     * at least a quarter of the pool (8 MiB at least) is free and
     * resident, between steps at most once a second. 0: 5000 (default);
     * -1: never. */
    int32_t kv_release_ms;
    /* 1: the whole KV pool is written once at creation and kept (resident
     * from the start, never given back; kv_release_ms is then ignored).
     * For a machine where faulting memory in during serving costs more
     * than holding it: on the 2-vCPU Firecracker guest of bench/README.md
     * a 64-client small-110m bench ran 4 % faster with ITL p99 halved. */
    int32_t kv_prefault;
    ifl_load_progress_fn load_progress; /* NULL: none */
    void *load_progress_user;
    /* NULL: weights are repacked for the kernels in memory at each start.
     * A directory: the repacked weights go to a file there, named after the
     * model file and the kernel table, which later starts map instead of
     * repacking (a warm start then costs about what mapping the model
     * does). The file holds the model's identity (size, modification
     * time, inode) and a checksum of each matrix, all checked at each
     * start: a stale or corrupt file is rebuilt, with a notice through
     * load_progress. If the file cannot be written (no space, no access)
     * the weights are repacked in memory, with a notice. A file is built
     * under a temporary name and renamed when whole; a temporary file a
     * crashed build left (its process gone) is removed by the next build.
     * Read during ifl_executor_create only. */
    const char *repack_cache_dir;
    /* The bytes the cache files in repack_cache_dir may take in all: when
     * a start writes a new file there, the other cache files go, least
     * recently used first (each start that maps one marks it used), until
     * the rest fits; the new file always stays. Only files named as cache
     * files are counted or removed. 0: 32 GiB; -1: no bound. */
    int64_t repack_cache_max_bytes;
    struct ifl_speculative_config speculative;
    /* LoRA adapters' host cache: when the adapters in memory take more
     * than this many bytes, idle ones loaded from files (used by no
     * queued or running request) are dropped, least recently used first,
     * and read again when a request names them. 0: no limit. */
    int64_t lora_cache_bytes;
    /* How LoRA adapters are held (IFL_LORA_TYPE_*), which sets their
     * memory, the bytes each step reads for them and the arithmetic.
     * F32 (default): the values as loaded. F16: half, the values rounded
     * to 11 significant bits. Q8_0: a little over a quarter, and the
     * fastest: A in blocks of 32 values with one F16 scale (the rounding
     * of a Q8_0 base), B in blocks of 16 along the rank, both products on
     * int8 dot products over inputs quantised the same way (as llama.cpp
     * runs a Q8_0 adapter). A B whose rank or width is not a multiple of
     * 16 is held in F16, and so is a matrix whose input is not whole
     * blocks of 32. */
    int32_t lora_type;
    /* Tensor parallelism (docs/distributed.md): the communicator of an MPI
     * job (src/dist/comm.h, ifl_comm_init) of which this process is rank 0;
     * NULL or a job of one rank: none. The executor then loads rank 0's
     * share of the model and sends every step to the other ranks, which
     * run ifl_tp_worker_run (src/dist/tp.h) on the same model file. Not
     * with LoRA adapters or a draft model / EAGLE-3 head (IFL_EUNSUPPORTED).
     * tp_timeout_s bounds every collective (0: 30 s): when a rank dies or
     * stops answering, every request in flight and every later one fails
     * with IFL_ESTATE within that bound (plus a second when idle), and
     * ifl_executor_failed says so. Not owned; it must outlive the executor. */
    struct ifl_comm *tp_comm;
    double tp_timeout_s;
    /* One process (no tp_comm) summing as a tensor parallel job of
     * tp_emulate ranks does: attn_output's and ffn_down's products in the
     * column slices those ranks hold, added in rank order, so that logits
     * and tokens are the bits of that job's (a job adds the ranks' partial
     * sums in another order than one process's kernels, which moves a
     * model whose kernels quantise their input by up to a few hundredths).
     * Costs speed and copies those two matrices (with experts, every
     * expert's ffn_down); not with LoRA adapters. 0 or 1: the plain sums
     * (docs/distributed.md). */
    int32_t tp_emulate;
    /* Images (docs/api.md "Images in requests"): an mmproj GGUF file whose
     * vision encoder turns requests' images into embedding rows; NULL:
     * none (requests may still bring embedding rows of their own). Its
     * projection width must equal the model's n_embd (IFL_EINVAL at
     * creation otherwise). Not with tensor parallelism. Copied at creation. */
    const char *mmproj_path;
    /* most images one step's encoder pass takes (the others wait for the
     * next steps, so that decoding requests are not held up behind a queue
     * of images); 0: 2 */
    int32_t vision_images_per_step;
    /* The vision encoder's compute precision (enum ifl_vision_precision,
     * docs/api.md "Vision encoders"): F32 (0, the default) multiplies the
     * file's values in F32; BF16 rounds its F16 matrices, and their
     * activations, to BF16 for vdpbf16ps on CPUs with AVX-512 BF16 (the
     * embeddings move by about 1e-2 of their scale; on other CPUs it
     * changes nothing). IFL_EINVAL for another value. */
    int32_t vision_precision;
    /* the encoder's outputs kept for reuse by image hash once no request
     * uses them, in bytes, least recently used dropped first; 0: 64 MiB;
     * -1: none kept */
    int64_t image_cache_bytes;
};

#define IFL_LORA_TYPE_F32 0
#define IFL_LORA_TYPE_F16 1
#define IFL_LORA_TYPE_Q8_0 2

/* Beam search (beam_width 2..16, at most max_batch_size): each step keeps
 * the beam_width most likely continuations (by cumulative log-prob of the
 * processed logits: bias, bad words, min_tokens and penalties apply, each
 * beam penalised by its own tokens; logits post-processors see each beam's
 * row). A beam that emits an end token becomes a finished hypothesis
 * (length_penalty and early_stopping decide when the search ends, as in HF
 * transformers: 1 stop when beam_width are finished, 0 a heuristic bound,
 * 2 only when no live beam can beat them); at max_tokens the live beams
 * join the hypotheses. temperature, top-k/p, min-p, typical-p, top-p decay
 * and seed do not apply: beam search is deterministic. The request's one
 * final response carries the best hypotheses ordered by score (see
 * struct ifl_response). Not supported with beams (IFL_EUNSUPPORTED at
 * enqueue): stop_strings, stop_words, output.top_log_probs. Width 1 is the
 * plain sampling path (greedy at temperature 0). A beam search holds
 * beam_width of the max_batch_size sequence slots; under
 * guaranteed_no_evict its KV reservation covers every beam's whole length;
 * preempted, all its beams are recomputed together. */
struct ifl_sampling_config {
    int32_t beam_width;      /* 1: sampling; 2..16: beam search */
    int32_t top_k;           /* 0: off */
    float top_p;             /* 1: off */
    float top_p_min;         /* floor of the decayed top_p (default 1e-6) */
    float top_p_decay;       /* top_p *= decay after each token; 1: off */
    int32_t top_p_reset_ids; /* token that resets top_p to its start; -1: none */
    float min_p;             /* 0: off */
    float typical_p;         /* 1: off */
    float temperature;       /* 0: greedy */
    uint64_t seed;
    int32_t min_tokens;           /* end tokens are banned before this many */
    float repetition_penalty;     /* 1: off */
    float presence_penalty;       /* 0: off */
    float frequency_penalty;      /* 0: off */
    int32_t no_repeat_ngram_size; /* 0: off */
    float length_penalty;         /* beam scores are divided by length^length_penalty */
    int32_t early_stopping;       /* beams: 1 stop when beam_width beams finished */
    int32_t ignore_eos;           /* keep generating past end tokens */
};

/* Logits and hidden states are raw model outputs: logits as the LM head
 * computed them, before logits post-processors and the sampler's
 * processing (bias, bans, penalties, temperature); the hidden state is the
 * final RMSNorm's output (times its weight), the vector the LM head
 * multiplies, so hidden . output_row[t] is logit t. All are bitwise the
 * same whatever else shares the batch and however the prompt is chunked.
 * They are allocated when the request is admitted (generation outputs:
 * max_tokens rows per sequence; a beam search keeps every live beam's rows
 * per step, beam_width * max_tokens); if that fails the request ends at
 * once with status IFL_ENOMEM. */
struct ifl_output_config {
    int32_t return_log_probs; /* log-prob of each generated token */
    int32_t top_log_probs;    /* and of this many top alternatives (0..20; not with beams) */
    /* context_logits in the first response: [n_input][n_vocab], row i the
     * logits after prompt token i (predicting token i + 1; the last row is
     * the one the first generated token came from). Such a request does not
     * reuse prefix-cached KV blocks (every prompt row must be computed), and
     * its prefill chunks are cut to the logits rows free in a step. */
    int32_t return_context_logits;
    /* generation_logits in each result: the raw row each returned generated
     * token was chosen from ([n][n_vocab] for the n generated tokens the
     * result carries; none for the prompt when it is included) */
    int32_t return_generation_logits;
    int32_t exclude_input_from_output; /* output tokens without the prompt (default 1) */
    int32_t return_perf_metrics;
    /* additional output "hidden_states": each result's hidden_states
     * [n][n_embd], the final hidden state from which each of its generated
     * tokens was chosen; with return_context_logits also set, the first
     * response's context_hidden_states [n_input][n_embd], row i the state
     * after prompt token i */
    int32_t return_hidden_states;
};

/* A request's part in speculative decoding. */
struct ifl_request_speculative {
    int32_t disable; /* 1: plain decoding for this request */
    int32_t n_max;   /* -1 (default): the executor's; 0: no drafts */
    int32_t n_min;   /* -1 (default): the executor's */
    float p_min;     /* < 0 (default): the executor's */
    /* Drafts the client brings (TensorRT-LLM's external draft tokens):
     * the tokens it expects to follow the prompt, e.g. the text being
     * edited. Copied at enqueue. While the generated tokens follow them
     * they are proposed at their positions; after a difference, the
     * proposal resumes after the latest place in them where the last
     * tokens generated occur. Used instead of the executor's proposer. */
    const int32_t *draft_tokens;
    int32_t n_draft_tokens; /* 0..65536 */
};

/* One image of a request, or the embedding rows of one (TensorRT-LLM's
 * prompt-table input). Its rows take the places of input_ids[pos .. pos +
 * n): those tokens stay in the prompt as placeholders (any valid ids; they
 * are what a response echoes, stop words see and the sampler's penalties
 * count), and the forward pass takes the rows instead of their
 * embeddings. Either:
 *  - data, size: a PNG or JPEG file in memory, encoded by the executor's
 *    vision encoder (config.mmproj_path) into its rows: n_tokens
 *    (ifl_executor_vision_info) for LLaVA; for InternVL n_tokens per tile,
 *    tiles by the image's size (ifl_executor_image_rows); n_rows 0 or that
 *    count. Bad data is IFL_EINVAL at enqueue, naming the image;
 *  - embd: n_rows rows of the model's n_embd floats, used as given (not
 *    scaled by the model's embedding scale).
 * Images must not overlap; positions in any order. The prefix cache keys
 * each row by a hash of the image's pixels (or of the rows) and the row's
 * index, so KV computed for one image is never reused for another, and
 * the same image behind the same tokens reuses it. */
struct ifl_image_input {
    const void *data;
    int64_t size;
    const float *embd; /* [n_rows][n_embd] */
    int32_t n_rows;
    int32_t pos;
};

#define IFL_MAX_IMAGES_PER_REQUEST 64

struct ifl_request {
    const int32_t *input_ids; /* prompt tokens; copied at enqueue */
    int32_t n_input;
    int32_t max_tokens; /* tokens to generate, at most; 0 is taken as 1 */
    int32_t streaming;  /* 1: a response per new token(s) */
    struct ifl_sampling_config sampling;
    struct ifl_output_config output;
    int32_t end_id; /* -1: the model's end-of-generation tokens */
    int32_t pad_id; /* -1: the model's */
    /* stop and bad words: n sequences of tokens, concatenated in *_tokens
     * with their lengths in *_lens */
    const int32_t *stop_words_tokens;
    const int32_t *stop_words_lens;
    int32_t n_stop_words;
    const int32_t *bad_words_tokens;
    const int32_t *bad_words_lens;
    int32_t n_bad_words;
    const char *const *stop_strings; /* matched on the detokenized text, across tokens */
    int32_t n_stop_strings;
    const int32_t *logit_bias_ids;
    const float *logit_bias_values;
    int32_t n_logit_bias;
    uint64_t client_id;                  /* echoed in responses */
    float priority;                      /* 0..1 (default 0.5); higher is served first */
    int32_t num_return_sequences;        /* independent samples (default 1); with beam search: how
                                            many of the best hypotheses to return (1 means
                                            beam_width; at most beam_width) */
    int64_t allotted_time_ms;            /* 0: no limit */
    int32_t return_all_generated_tokens; /* streaming: every response carries all tokens so far */
    const char *logits_post_processor;   /* a registered name, "batched", or NULL */
    int32_t guide_type;                  /* enum ifl_guide_type */
    const char *guide_text;
    /* LoRA adapters (see "LoRA adapters" below): n_lora (id, scale) pairs,
     * copied at enqueue. n_lora 0: every loaded adapter at its global
     * scale as of enqueue (none, unless some adapter has a nonzero global
     * scale); otherwise exactly those listed (scale 0: not applied). Id 0
     * names no adapter: a list of just {0, 0} asks for the base model
     * alone, whatever the global scales. */
    const struct ifl_lora_ref *lora;
    int32_t n_lora; /* 0..IFL_LORA_MAX_PER_REQUEST */
    struct ifl_request_speculative speculative;
    /* Images (docs/api.md "Images in requests"): n_images inputs, each
     * standing in for n rows of placeholder tokens of input_ids; copied
     * (and PNG/JPEG data decoded) at enqueue. */
    const struct ifl_image_input *images;
    int32_t n_images; /* 0..IFL_MAX_IMAGES_PER_REQUEST */
};

/* One alternative at a position: token and its log-probability. */
struct ifl_top_logprob {
    int32_t token;
    float logprob;
};

/* The result for one sequence (a beam hypothesis, or one of
 * num_return_sequences). With the prompt included (not streaming and
 * exclude_input_from_output 0) tokens starts with it, while log_probs,
 * generation_logits and hidden_states cover the generated tokens only. */
struct ifl_sequence_result {
    int32_t *tokens; /* new tokens in this response (or all so far; see request);
                        a beam hypothesis keeps the end token that finished it */
    int32_t n_tokens;
    float *log_probs;                      /* [generated tokens] when asked, else NULL */
    struct ifl_top_logprob *top_log_probs; /* [n_tokens][n_top] when asked */
    int32_t n_top;
    float cum_log_prob;       /* sum of the generated tokens' log-probs */
    float score;              /* beams: cum_log_prob / length^length_penalty, length =
                                 generated tokens (end token included); else
                                 cum_log_prob */
    int32_t finish_reason;    /* enum ifl_finish_reason */
    float *generation_logits; /* [generated tokens][n_vocab] when asked */
    float *hidden_states;     /* [generated tokens][n_embd] when asked */
    char *text;               /* the new tokens as text, NUL-terminated: whole UTF-8
                                 characters only; with stop strings, text that may begin
                                 one is held back until resolved, and a matched stop
                                 string and all after it are left out */
    int32_t n_text;           /* bytes in text (it may contain NUL bytes) */
    /* the final result of a sequence that an end token ended
     * (finish_reason IFL_FINISH_END_ID, not a beam): that token, which
     * tokens leaves out; -1 otherwise (also when a grammar ended it with
     * no token) */
    int32_t end_token;
};

struct ifl_perf_metrics {
    int64_t arrival_us; /* monotonic microseconds */
    int64_t first_scheduled_us;
    int64_t first_token_us;
    int64_t last_token_us;
    int32_t kv_blocks_reused; /* prompt blocks found in the prefix cache */
    int32_t kv_blocks_missed;
    int32_t preemptions;
    int32_t draft_tokens;          /* drafts run for this sequence (speculative decoding) */
    int32_t accepted_draft_tokens; /* of those, kept */
};

struct ifl_response {
    ifl_id request_id;
    uint64_t client_id;
    int32_t status; /* 0, or an enum ifl_status with error_msg */
    char *error_msg;
    int32_t is_final;          /* the last response of this request */
    int32_t sequence_index;    /* num_return_sequences: which sample this is */
    int32_t is_sequence_final; /* the last response of that sample */
    /* beam search: n_results hypotheses, best score first, all in the one
     * final response (num_return_sequences of them when > 1, else
     * beam_width; fewer if cancelled early), text detokenized from each
     * hypothesis's tokens; a streaming beam request also gets only that
     * final response. Otherwise 1. */
    int32_t n_results;
    struct ifl_sequence_result *results;
    float *context_logits;        /* [n_input][n_vocab] when asked (first response, once the
                                     whole prompt was computed) */
    float *context_hidden_states; /* [n_input][n_embd] when asked (first response) */
    int32_t n_vocab;
    int32_t n_embd;
    struct ifl_perf_metrics perf; /* when asked */
};

struct ifl_iteration_stats {
    int64_t iteration;
    double latency_ms;
    int64_t timestamp_us;
    int32_t active_requests;
    int32_t queued_requests;
    int64_t completed_requests; /* since creation */
    int32_t paused_requests;    /* preempted, waiting to resume */
    int32_t context_requests;   /* in this step */
    int32_t context_tokens;
    int32_t generation_requests;
    int32_t generation_tokens;
    int32_t kv_blocks_max;
    int32_t kv_blocks_free;
    int32_t kv_blocks_used;
    int64_t kv_blocks_reused; /* since creation */
    int64_t kv_blocks_missed;
    double kv_cache_hit_rate; /* reused / (reused + missed) */
    /* KV memory, from creation on. reserved: the pool's address space;
     * resident: what of it is in memory now (measured at the call);
     * used: the blocks sequences hold, at their full size. */
    int64_t kv_bytes_reserved;
    int64_t kv_bytes_resident;
    int64_t kv_bytes_used;
    int32_t kv_block_bytes;        /* one block, every layer's keys and values */
    int32_t kv_blocks_peak;        /* most blocks used at once, since creation */
    int32_t kv_blocks_cached;      /* unused but kept for prefix reuse (in kv_blocks_free) */
    int32_t kv_pool_bound;         /* enum ifl_kv_bound: what sized the pool */
    int64_t kv_bytes_bound;        /* the memory bound the default pool was held to
                                      (0 with kv_cache_tokens or kv_cache_bytes) */
    int64_t kv_blocks_released;    /* blocks whose memory was given back, since creation */
    int64_t process_rss_bytes;     /* the process's resident set, measured at the call */
    int64_t draft_tokens;          /* speculative decoding: drafts run, since creation */
    int64_t accepted_draft_tokens; /* of those, kept */
    /* tensor parallelism: ranks (1: off), collectives rank 0 has done and
     * the seconds it spent in them since creation, and 1 once the job
     * failed (a rank died or stopped answering) */
    int32_t tp_ranks;
    int32_t tp_failed;
    int64_t tp_collectives;
    double tp_comm_seconds;
    /* images, since creation: encoded by the vision encoder, found in its
     * output cache instead, and the encoder's seconds */
    int64_t images_encoded;
    int64_t image_cache_hits;
    double image_encode_seconds;
    /* speculative decoding's own KV memory (a draft model's pool, an
     * EAGLE-3 head's cache), measured at the call: its address space and
     * what of it is in memory (-1: unknown); 0 and 0 without one */
    int64_t draft_kv_bytes_reserved;
    int64_t draft_kv_bytes_resident;
};

struct ifl_request_stats {
    ifl_id request_id;
    int32_t stage; /* enum ifl_request_stage */
    int32_t context_prefill_position;
    int32_t n_generated;
    int32_t paused;
};

void ifl_executor_config_default(struct ifl_executor_config *cfg);
void ifl_request_init(struct ifl_request *req); /* every field to its default */

/* Loads the model and starts the engine thread. err (optional, 512 bytes)
 * receives a sentence on failure. */
int ifl_executor_create(ifl_executor **out, const char *model_path,
                        const struct ifl_executor_config *cfg, char *err);
/* Stops the engine. cancel_in_flight = 0 finishes every accepted request
 * first; 1 cancels them (each gets a final "cancelled" response). Then every
 * waiting caller is woken and everything is freed, including responses never
 * awaited. */
void ifl_executor_destroy(ifl_executor *ex, int cancel_in_flight);
/* Nonzero when the executor can no longer run a step (a tensor parallel
 * job lost a rank): every request then fails with IFL_ESTATE, and the
 * process should exit non-zero. err (optional) receives the sentence.
 * Thread-safe. */
int ifl_executor_failed(ifl_executor *ex, char *err);
/* The first half of destroy, without freeing: stops accepting requests
 * (ifl_enqueue then returns IFL_ESTATE), finishes (cancel_in_flight 0) or
 * cancels (1) every accepted request, stops the engine thread and wakes
 * every waiting caller. Afterwards ifl_await still hands out the responses
 * already queued, then returns IFL_ESTATE at once; tokenize, detokenize,
 * model info and stats keep working until ifl_executor_destroy. Blocks
 * until the engine has stopped. Thread-safe: a second call (from any
 * thread) waits for the first to finish, and may turn its drain into a
 * cancel. For a binding whose own thread waits in ifl_await: shut down,
 * let that thread return, then destroy. */
int ifl_executor_shutdown(ifl_executor *ex, int cancel_in_flight);

/* Validates and queues a request (the request's arrays are copied). Returns
 * IFL_EINVAL with a message naming the field, IFL_EFULL when the queue is
 * full, IFL_ESTATE after shutdown began. */
int ifl_enqueue(ifl_executor *ex, const struct ifl_request *req, ifl_id *id, char *err);
/* All or nothing: either every request is queued (ids filled) or none. */
int ifl_enqueue_many(ifl_executor *ex, const struct ifl_request *reqs, int32_t n, ifl_id *ids,
                     char *err);
int ifl_can_enqueue(ifl_executor *ex);
/* Cancels a request; it ends at the next step with a final response whose
 * finish reason is cancelled. Cancelling again before that final response
 * is 0; IFL_ENOTFOUND if unknown or already final (so for id 0, which is
 * never a request). */
int ifl_cancel(ifl_executor *ex, ifl_id id);

/* Waits for responses to any of ids (n_ids 0: any request) for up to
 * timeout_ms (< 0: forever; 0: no wait). Moves up to max of them into out
 * (in arrival order) and sets *n_out. Returns 0 with *n_out >= 1,
 * IFL_ETIMEDOUT with *n_out = 0, or IFL_ESTATE at once when nothing more
 * can come for those ids (unknown or 0, their final responses taken, or the
 * executor shut down). */
int ifl_await(ifl_executor *ex, const ifl_id *ids, int32_t n_ids, int64_t timeout_ms,
              struct ifl_response **out, int32_t max, int32_t *n_out);
/* Responses ready for id (0: for all requests). */
int32_t ifl_num_responses_ready(ifl_executor *ex, ifl_id id);
void ifl_response_free(struct ifl_response *r);

/* What the executor serves. */
struct ifl_model_info {
    char architecture[32];
    int32_t n_vocab;
    int32_t n_ctx; /* positions a sequence may reach in this executor */
    int32_t n_ctx_train;
    int32_t n_embd;
    int32_t n_layer;
    int32_t bos_id; /* -1 when the vocabulary has none */
    int32_t eos_id;
    int32_t add_bos;         /* the model's metadata asks for BOS before a prompt */
    int32_t max_token_bytes; /* no token of ifl_executor_tokenize stands for more input
                                bytes than this, so a text of len bytes has at least
                                ceil(len / max_token_bytes) tokens: a prompt can be
                                found too long before it is tokenized; 0 when the
                                vocabulary can drop bytes (no bound holds) */
    int64_t kv_cache_tokens; /* positions the KV pool holds */
    int32_t tp_ranks;        /* processes the model is split over (1: not split) */
};

int ifl_executor_model_info(ifl_executor *ex, struct ifl_model_info *out);

/* A string value of the model's GGUF metadata (e.g. "tokenizer.chat_template",
 * "general.name"), NUL-terminated in buf. IFL_ENOTFOUND when the key is
 * absent, IFL_EINVAL when its value is not a string, IFL_EFULL when buf (cap
 * bytes) is too small; *len_out is the value's length in every case where
 * the key is a string (cap 0, buf NULL: the length only). Thread-safe. */
int ifl_executor_model_meta(ifl_executor *ex, const char *key, char *buf, int64_t cap,
                            int64_t *len_out);

/* Tokenizes len bytes of text with the model's vocabulary. add_special adds
 * BOS/EOS as the metadata says; parse_special turns special-token text into
 * those tokens. Writes at most cap ids, sets *n_out to the full count and
 * returns IFL_EFULL when it exceeds cap. Thread-safe. */
int ifl_executor_tokenize(ifl_executor *ex, const char *text, int64_t len, int32_t add_special,
                          int32_t parse_special, int32_t *ids, int64_t cap, int64_t *n_out);
/* The text of n tokens (control tokens left out unless show_special),
 * NUL-terminated in buf; *len_out is the full length, and IFL_EFULL means
 * buf (cap bytes) was too small (cap 0, buf NULL: the length only).
 * Thread-safe. */
int ifl_executor_detokenize(ifl_executor *ex, const int32_t *ids, int64_t n, int32_t show_special,
                            char *buf, int64_t cap, int64_t *len_out);

/* The engine's figures as of its last step (or creation: the KV pool's
 * size and use are there from the start); kv_bytes_resident and
 * process_rss_bytes are measured during the call (about a millisecond for
 * a pool of gigabytes). Thread-safe. */
int ifl_get_iteration_stats(ifl_executor *ex, struct ifl_iteration_stats *out);
/* Every step's figures, not only the last (TensorRT-LLM's
 * getLatestIterationStats): the executor keeps those of its last 1024
 * steps. Copies, oldest first, up to max of the kept ones whose iteration
 * is greater than after_iteration (0: all kept), and sets *n_out; pass
 * the last iteration seen to get only newer ones. kv_bytes_resident and
 * process_rss_bytes are measured once, during the call. Thread-safe. */
int ifl_get_iteration_stats_since(ifl_executor *ex, int64_t after_iteration,
                                  struct ifl_iteration_stats *out, int32_t max, int32_t *n_out);
/* Renders a conversation with a chat template, as Hugging Face
 * transformers' apply_chat_template does (the Jinja subset of docs/api.md
 * "Chat templates"). template_src: NULL for the model's
 * tokenizer.chat_template (ChatML when it has none or it does not
 * compile), or a template's text. context_json: a JSON object of the
 * template's variables: "messages" (required: [{"role", "content"}, ...]),
 * "add_generation_prompt" (default false), "tools", "documents", anything
 * else the template reads; "bos_token" and "eos_token" default to the
 * model's. On success *out is the text, NUL-terminated, *out_len bytes
 * (optional); free it with ifl_free. IFL_EINVAL for bad JSON or a
 * conversation the template refuses (its message in err), IFL_EFORMAT for
 * a template_src that does not compile, IFL_EFULL when rendering hit its
 * limits. Thread-safe. */
int ifl_executor_apply_chat_template(ifl_executor *ex, const char *template_src,
                                     const char *context_json, char **out, int64_t *out_len,
                                     char *err);
/* Frees memory the library handed out (ifl_executor_apply_chat_template's
 * text). */
void ifl_free(void *p);

/* Waits until the executor is idle: every request enqueued so far has had
 * its final response queued (none active, queued or paused) and the engine
 * has published its stats since, so ifl_get_iteration_stats shows the
 * blocks they held as released. timeout_ms < 0 waits without limit, 0
 * only checks. Returns 0 when idle, IFL_ETIMEDOUT, IFL_ESTATE if the
 * executor is destroyed before it was (a caller waiting then is woken),
 * IFL_EINVAL for a NULL executor. Responses still waiting to be awaited do not count.
 * Thread-safe. */
int ifl_executor_wait_idle(ifl_executor *ex, int64_t timeout_ms);
/* IFL_ENOTFOUND once a request's final response was awaited, and for ids
 * never issued (0 among them). */
int ifl_get_request_stats(ifl_executor *ex, ifl_id id, struct ifl_request_stats *out);

/* ======================================================================
 * LoRA adapters (docs/api.md "LoRA adapters").
 *
 * llama.cpp's GGUF LoRA adapters for the executor's model, loaded and
 * unloaded while it runs. Requests name them by id in struct ifl_request's
 * lora list; rows with different adapters, or none, share each forward
 * pass, and a request's tokens and log-probs do not depend on what else
 * shares it. The prefix cache is keyed by a request's adapters and scales:
 * KV computed under one adapter set is never reused under another.
 *
 * Every function here is thread-safe.
 * ====================================================================== */

#define IFL_LORA_MAX_PER_REQUEST 8

/* One adapter a request applies: its id (ifl_executor_load_lora) and the
 * user scale s of y = W x + s * alpha / rank * B (A x) (alpha / rank
 * left out when the adapter has no alpha). */
struct ifl_lora_ref {
    int32_t id;
    float scale;
};

struct ifl_lora_info {
    int32_t id;
    char name[128];
    char path[1024];
    float scale;       /* the global scale (requests with n_lora 0 use it) */
    int32_t rank;      /* the largest rank of its matrices */
    int32_t n_adapted; /* matrices it adapts */
    int64_t bytes;     /* host memory it takes while loaded */
    int32_t in_use;    /* queued and running requests that use it */
    int32_t loaded;    /* 1: in memory; 0: dropped from the host cache (read again on use) */
};

/* Loads the adapter file at path (checked against the model: architecture,
 * every tensor's name and shape), registers it as name (NULL or "": the
 * file's name without .gguf) with global scale `scale`, and sets *id (ids
 * start at 1 and are never reused). IFL_EINVAL for a name in use, a
 * non-finite scale; the loader's codes (IFL_EFORMAT, IFL_EUNSUPPORTED,
 * IFL_EIO, IFL_ENOMEM) with a message naming the tensor or key. */
int ifl_executor_load_lora(ifl_executor *ex, const char *path, const char *name, float scale,
                           int32_t *id, char *err);
/* Unregisters an adapter: new requests can no longer name it; requests
 * already queued or running keep it until they finish, and its memory goes
 * with the last of them. IFL_ENOTFOUND for an unknown id. */
int ifl_executor_unload_lora(ifl_executor *ex, int32_t id, char *err);
/* Sets an adapter's global scale. Requests already enqueued keep the scales
 * they took. IFL_ENOTFOUND, IFL_EINVAL (not finite). */
int ifl_executor_set_lora_scale(ifl_executor *ex, int32_t id, float scale, char *err);
/* The registered adapters by id: up to cap into out, *n_out the count of
 * all (IFL_EFULL when more than cap). */
int ifl_executor_list_lora(ifl_executor *ex, struct ifl_lora_info *out, int32_t cap,
                           int32_t *n_out);
/* The id of the adapter registered as name; IFL_ENOTFOUND. */
int ifl_executor_find_lora(ifl_executor *ex, const char *name, int32_t *id);

/* ======================================================================
 * Vision encoders (docs/api.md "Vision encoders").
 *
 * An image turned into embedding rows for a text model, by a vision
 * encoder read from a llama.cpp mmproj GGUF file (general.architecture
 * "clip"): the LLaVA-1.5 style (clip.projector_type "mlp": a CLIP ViT and
 * a two-layer MLP projector), or InternVL ("internvl": an InternViT, a
 * pixel shuffle and an MLP projector; an image larger than image_size is
 * cut into tiles of image_size plus a thumbnail, as llama.cpp does). The
 * rows stand where a prompt's image placeholder tokens would, one per
 * image patch (InternVL: per merged block of patches, tile after tile),
 * each as wide as the text model's n_embd. An executor loads one with config.mmproj_path and
 * encodes requests' images itself (struct ifl_image_input).
 *
 * Thread-safe: calls on one ifl_vision run one at a time (a lock); the
 * encoder's own threads do the work.
 * ====================================================================== */

typedef struct ifl_vision ifl_vision;

/* The encoder's compute precision (config.vision_precision). */
enum ifl_vision_precision { IFL_VISION_PREC_F32 = 0, IFL_VISION_PREC_BF16 = 1 };

struct ifl_vision_info {
    int32_t image_size; /* the side images are scaled and padded to */
    int32_t patch_size;
    int32_t n_tokens;   /* embedding rows per image (per tile for InternVL):
                           (image_size / patch_size)^2, over merge^2 for InternVL */
    int32_t n_embd;     /* floats per row: the text model's n_embd */
    int32_t n_layer;    /* encoder layers in the file */
    int32_t n_run;      /* layers run: the feature layer (by default the penultimate) */
    int32_t max_images; /* images one call may encode (ifl_vision_load) */
};

/* Loads an mmproj file and starts its n_threads encoder threads (0: one
 * per CPU this process may use). max_images (>= 1) bounds the images one
 * call encodes together (its scratch memory grows with it). IFL_EFORMAT or
 * IFL_EUNSUPPORTED with a sentence naming the key or tensor (another
 * projector type, tiling grids, a missing or misshapen tensor), IFL_EIO,
 * IFL_EINVAL, IFL_ENOMEM. err: optional, 512 bytes. */
int ifl_vision_load(ifl_vision **out, const char *mmproj_path, int32_t max_images,
                    int32_t n_threads, char *err);
/* ifl_vision_load with a compute precision (enum ifl_vision_precision, as
 * the executor's config.vision_precision takes it): IFL_VISION_PREC_BF16
 * rounds the file's F16 matrices and their activations to BF16 on CPUs
 * with AVX-512 BF16, and changes nothing elsewhere. IFL_EINVAL for another
 * value. */
int ifl_vision_load_prec(ifl_vision **out, const char *mmproj_path, int32_t max_images,
                         int32_t n_threads, int32_t precision, char *err);
void ifl_vision_free(ifl_vision *v); /* NULL is fine */
int ifl_vision_info(const ifl_vision *v, struct ifl_vision_info *out);
/* The rows an image of w x h pixels becomes: n_tokens, or for InternVL
 * n_tokens times its tiles (1 when it fits in image_size, else the grid's
 * tiles plus the thumbnail). IFL_EINVAL for a side under 1. */
int ifl_vision_image_rows(const ifl_vision *v, int32_t w, int32_t h, int32_t *rows);
/* Encodes n_images PNG or JPEG files held in memory (images[i], sizes[i]
 * bytes; 1..max_images of them) into out: each image's rows
 * (ifl_vision_image_rows; n_tokens for LLaVA) of n_embd floats, image
 * after image, rows in raster order of the patches (InternVL: tile after
 * tile, the thumbnail last). LLaVA: each image is scaled to fit
 * image_size keeping its aspect, padded with LLaVA's mean colour (122,
 * 116, 104); InternVL: tiled as llama.cpp's mtmd does; then normalised
 * with the file's mean and std. An image's rows do not depend on the
 * others in the call.
 * IFL_EINVAL naming the image for data that is not a PNG or JPEG, is
 * corrupt or truncated, or is over the limits (64 MiB, 8192 pixels a
 * side, 32 Mi pixels); then nothing is written. */
int ifl_vision_encode(ifl_vision *v, const void *const *images, const int64_t *sizes,
                      int32_t n_images, float *out, char *err);
/* The same for one image given as pixels: w x h of `channels` bytes
 * (1 grey, 3 RGB, 4 RGBA whose alpha is dropped), rows packed. */
int ifl_vision_encode_pixels(ifl_vision *v, const uint8_t *pixels, int32_t w, int32_t h,
                             int32_t channels, float *out, char *err);

/* The executor's vision encoder (config.mmproj_path): its figures, n_tokens
 * being the placeholder tokens each image of a request stands for.
 * IFL_ENOTFOUND when the executor has none. Thread-safe. */
int ifl_executor_vision_info(ifl_executor *ex, struct ifl_vision_info *out);

/* The rows (placeholder tokens) a PNG or JPEG file in memory takes with
 * the executor's vision encoder, from its header's size: n_tokens, or for
 * InternVL n_tokens per tile. IFL_EINVAL naming the problem for data that
 * is not a PNG or JPEG header within the limits, IFL_ENOTFOUND without an
 * encoder. Thread-safe. */
int ifl_executor_image_rows(ifl_executor *ex, const void *data, int64_t size, int32_t *rows,
                            char *err);

/* The marker of an image's place in a prompt's text (llama.cpp's). */
#define IFL_IMAGE_MARKER "<__media__>"

/* Tokenizes a prompt with n_images images: each occurrence of marker in
 * the text (NULL or "": IFL_IMAGE_MARKER) stands for the next image; with
 * no marker at all, every image goes before the text (after BOS, when one
 * is added). The pieces of text between markers are tokenized apart
 * (add_special for the first only, parse_special for all). Image k takes
 * n_rows[k] placeholder tokens (n_rows NULL: the vision encoder's n_tokens
 * each, not allowed for InternVL, whose rows depend on each image's size;
 * the model's padding token, or 0) and pos[k] receives its first index:
 * ready for struct ifl_image_input. With an InternVL encoder each image's
 * placeholders are wrapped in "<img>" and "</img>" (tokenized with special
 * tokens parsed), as llama.cpp's mtmd does. ids, cap, n_out as
 * ifl_executor_tokenize (IFL_EFULL when more than cap; pos is filled
 * either way). IFL_EINVAL when the markers are neither none nor n_images
 * (err says so), IFL_ENOTFOUND for n_rows NULL without an encoder.
 * Thread-safe. */
int ifl_executor_tokenize_images(ifl_executor *ex, const char *text, int64_t len,
                                 const char *marker, int32_t add_special, int32_t parse_special,
                                 int32_t n_images, const int32_t *n_rows, int32_t *ids, int64_t cap,
                                 int64_t *n_out, int32_t *pos, char *err);

#ifdef __cplusplus
}
#endif

#endif /* INFLIGHT_H */
