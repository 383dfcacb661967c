/*
 * The server's growable byte buffer (struct ifl_sbuf): replies, stream
 * chunks, metrics text and chat text are built in it. An append that cannot
 * grow the buffer sets oom and drops the bytes, so a writer checks once at
 * the end instead of after every append.
 */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/internal.h"

void ifl_sbuf_add(struct ifl_sbuf *b, const void *data, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1)
            cap *= 2;
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

void ifl_sbuf_addf(struct ifl_sbuf *b, const char *fmt, ...)
{
    char small[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(small, sizeof small, fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    if ((size_t)n < sizeof small) {
        ifl_sbuf_add(b, small, (size_t)n);
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
    ifl_sbuf_add(b, big, (size_t)n);
    free(big);
}

void ifl_sbuf_free(struct ifl_sbuf *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}
