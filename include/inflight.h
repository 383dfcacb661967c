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

#ifdef __cplusplus
}
#endif

#endif /* INFLIGHT_H */
