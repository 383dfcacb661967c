/*
 * Errors: status codes (enum ifl_status in inflight.h) plus an optional
 * caller-owned message buffer of IFL_ERR_LEN bytes.
 *
 * Functions that can fail in ways worth explaining take `char *err`; it may
 * be NULL. On failure they write one sentence naming the place and the
 * problem, e.g. "gguf: tensor 'blk.3.attn_q.weight': data offset 81920 +
 * 4096 past end of file (83000 bytes)". On success they leave it untouched.
 */
#ifndef IFL_CORE_ERR_H
#define IFL_CORE_ERR_H

#include <stdio.h>
#include <stdlib.h>

#include "inflight.h"

#define IFL_ERR_LEN 512

/* Formats into err (if not NULL) and returns status, so a failure path can
 * read `return ifl_err(err, IFL_EFORMAT, "gguf: ...", ...);`. */
int ifl_err(char *err, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Programmer errors only: never for input that came from a file or socket. */
#define IFL_ASSERT(cond)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "%s:%d: assertion failed: %s\n", __FILE__, __LINE__, #cond);           \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

#endif
