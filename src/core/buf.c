/*
 * The growable byte buffer (struct ifl_buf) every module builds text or
 * bytes in: the server's replies, stream chunks and metrics, the guide's
 * grammar texts, the GGUF writer's metadata. An append that cannot grow the
 * buffer sets oom and drops the bytes, so a writer checks once at the end
 * instead of after every append.
 */
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/buf.h"

void ifl_buf_add(struct ifl_buf *b, const void *data, size_t n)
{
    if (b->oom)
        return;
    if (n > SIZE_MAX - b->len - 1) {
        b->oom = 1; /* no size_t holds it */
        return;
    }
    if (b->len + n + 1 > b->cap) {
        size_t need = b->len + n + 1, cap = b->cap ? b->cap : 256;
        while (cap < need)
            cap = cap > SIZE_MAX / 2 ? need : cap * 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = 1;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = 0;
}

void ifl_buf_addf(struct ifl_buf *b, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof small) {
        ifl_buf_add(b, small, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->oom = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    ifl_buf_add(b, big, (size_t)n);
    free(big);
}

void ifl_buf_free(struct ifl_buf *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}
