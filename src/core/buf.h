/*
 * A growable byte buffer: appends, formatted appends, and a sticky oom flag
 * (an append that cannot grow the buffer drops its bytes and sets it). The
 * bytes are always NUL-terminated (p[len] == 0) once anything was added.
 * Zero-initialise to start; ifl_buf_free to end.
 */
#ifndef IFL_CORE_BUF_H
#define IFL_CORE_BUF_H

#include <stddef.h>

struct ifl_buf {
    char *p;
    size_t len, cap;
    int oom; /* an append failed: contents are incomplete */
};

void ifl_buf_add(struct ifl_buf *b, const void *data, size_t n);
void ifl_buf_addf(struct ifl_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ifl_buf_free(struct ifl_buf *b);

#endif
