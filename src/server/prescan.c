/*
 * A look at a request body before it is parsed, for one thing only: a prompt
 * far beyond the context. jansson parses about 50 MB/s, so a 30 MB prompt
 * would cost half a second of CPU before any check (and tokenizing it,
 * seconds more); this scan runs at memchr speed and refuses such a prompt at
 * once, by the bound the routes apply after parsing (ifl_gen_text_too_long:
 * a true lower bound on the prompt's tokens, so nothing that fits is
 * refused).
 *
 * It reads the top-level object's keys only: "prompt" on /v1/completions (a
 * string, a list of token ids, or a list of those) and "inputs" on the TGI
 * generate routes, unless "parameters" sets "truncate" (then any length is
 * fine: the last tokens are kept). When a key repeats the last one counts,
 * as in jansson. A key written with escapes, or anything else it does not
 * follow, makes it step aside: the body is then parsed as usual and the
 * checks after parsing still apply. Chat prompts are checked once rendered
 * (a template may leave text out), so not here; nor are a vision model's
 * TGI inputs holding ![](...) images (their URLs are not text).
 */
#include <stdio.h>
#include <string.h>

#include "core/err.h"
#include "server/internal.h"

struct scan {
    const char *p, *end;
};

static void ws(struct scan *sc)
{
    while (sc->p < sc->end && (*sc->p == ' ' || *sc->p == '\t' || *sc->p == '\n' || *sc->p == '\r'))
        sc->p++;
}

static int hex4(const char *h, unsigned *out)
{
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = h[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return -1;
        v = v << 4 | (unsigned)d;
    }
    *out = v;
    return 0;
}

/* Steps over the string whose opening quote is at sc->p. *len gets its
 * length once unescaped (the bytes jansson would hold), *escaped whether it
 * had escapes. -1 when it is cut off or malformed. */
static int skip_string(struct scan *sc, size_t *len, int *escaped)
{
    const char *p = sc->p + 1, *end = sc->end;
    size_t n = 0;
    *escaped = 0;
    for (;;) {
        const char *q = memchr(p, '"', (size_t)(end - p));
        if (!q)
            return -1;
        const char *bs = memchr(p, '\\', (size_t)(q - p));
        if (!bs) {
            *len = n + (size_t)(q - p);
            sc->p = q + 1;
            return 0;
        }
        n += (size_t)(bs - p);
        *escaped = 1;
        if (end - bs < 2)
            return -1;
        if (bs[1] != 'u') {
            n += 1;
            p = bs + 2;
            continue;
        }
        unsigned cp, lo;
        if (end - bs < 6 || hex4(bs + 2, &cp))
            return -1;
        if (cp >= 0xD800 && cp < 0xDC00 && end - bs >= 12 && bs[6] == '\\' && bs[7] == 'u' &&
            !hex4(bs + 8, &lo) && lo >= 0xDC00 && lo < 0xE000) {
            n += 4; /* a surrogate pair: one 4-byte character */
            p = bs + 12;
            continue;
        }
        n += cp < 0x80 ? 1 : cp < 0x800 ? 2 : 3;
        p = bs + 6;
    }
}

/* Steps over any value at sc->p. -1 when malformed or cut off. */
static int skip_value(struct scan *sc)
{
    size_t n;
    int e;
    if (sc->p >= sc->end)
        return -1;
    if (*sc->p == '"')
        return skip_string(sc, &n, &e);
    if (*sc->p == '{' || *sc->p == '[') {
        int depth = 0;
        while (sc->p < sc->end) {
            char c = *sc->p;
            if (c == '"') {
                if (skip_string(sc, &n, &e))
                    return -1;
                continue;
            }
            if (c == '{' || c == '[')
                depth++;
            else if ((c == '}' || c == ']') && --depth == 0) {
                sc->p++;
                return 0;
            }
            sc->p++;
        }
        return -1;
    }
    const char *start = sc->p; /* a number, true, false or null */
    while (sc->p < sc->end && !memchr(",}] \t\r\n", *sc->p, 7))
        sc->p++;
    return sc->p > start ? 0 : -1;
}

/* The object's next key: 1 with the key (no escapes) in key/klen and
 * sc->p at its value; 0 at the end (past the '}'); -1 otherwise. *first is
 * 1 before the object's first key. */
static int next_key(struct scan *sc, int *first, const char **key, size_t *klen)
{
    ws(sc);
    if (sc->p >= sc->end)
        return -1;
    if (*sc->p == '}') {
        sc->p++;
        return 0;
    }
    if (!*first) {
        if (*sc->p != ',')
            return -1;
        sc->p++;
        ws(sc);
    }
    *first = 0;
    if (sc->p >= sc->end || *sc->p != '"')
        return -1;
    const char *k = sc->p + 1;
    int esc;
    if (skip_string(sc, klen, &esc) || esc)
        return -1;
    *key = k;
    ws(sc);
    if (sc->p >= sc->end || *sc->p != ':')
        return -1;
    sc->p++;
    ws(sc);
    return sc->p < sc->end ? 1 : -1;
}

static int key_is(const char *key, size_t klen, const char *name)
{
    return klen == strlen(name) && !memcmp(key, name, klen);
}

/* Counts the numbers of the list at sc->p (a prompt of token ids); -1 when
 * it holds anything else. */
static int64_t count_ids(struct scan *sc)
{
    int64_t n = 0;
    sc->p++; /* '[' */
    for (;;) {
        ws(sc);
        if (sc->p >= sc->end)
            return -1;
        if (*sc->p == ']' && n == 0) {
            sc->p++;
            return 0;
        }
        if (!(*sc->p == '-' || (*sc->p >= '0' && *sc->p <= '9')) || skip_value(sc))
            return -1;
        n++;
        ws(sc);
        if (sc->p >= sc->end)
            return -1;
        if (*sc->p == ']') {
            sc->p++;
            return n;
        }
        if (*sc->p++ != ',')
            return -1;
    }
}

/* One prompt at sc->p: 1 when it certainly reaches the context (msg says
 * why), 0 when it may fit, -1 when it is neither a string nor a list of
 * token ids. */
static int one_prompt(const struct ifl_server *s, struct scan *sc, int tgi, char *msg)
{
    if (*sc->p == '"') {
        size_t len;
        int esc;
        const char *start = sc->p;
        if (skip_string(sc, &len, &esc))
            return -1;
        /* a vision model's TGI inputs may hold images (![](data URL)),
         * whose bytes are not text: the route checks what is left */
        struct ifl_vision_info vi;
        ifl_executor *ex =
            atomic_load_explicit(&((struct ifl_server *)s)->ex, memory_order_acquire);
        if (tgi && ex && memmem(start, (size_t)(sc->p - start), "![](", 4) &&
            ifl_executor_vision_info(ex, &vi) == 0)
            return 0;
        return ifl_gen_text_too_long(s, len, tgi, msg);
    }
    if (*sc->p != '[' || tgi)
        return -1;
    int64_t n = count_ids(sc);
    if (n < 0)
        return -1;
    if (n < s->info.n_ctx)
        return 0;
    ifl_err(msg, IFL_EINVAL,
            "this model's maximum context length is %d tokens, but the prompt has %lld tokens; "
            "shorten it",
            s->info.n_ctx, (long long)n);
    return 1;
}

/* The prompt value at sc->p (completions: also a list of prompts). */
static int prompt_value(const struct ifl_server *s, struct scan *sc, int tgi, char *msg)
{
    if (tgi || *sc->p == '"')
        return one_prompt(s, sc, tgi, msg);
    if (*sc->p != '[')
        return -1;
    struct scan peek = {sc->p + 1, sc->end};
    ws(&peek);
    if (peek.p < peek.end && *peek.p != '"' && *peek.p != '[')
        return one_prompt(s, sc, tgi, msg); /* a list of token ids */
    sc->p++;
    for (int first = 1;; first = 0) {
        ws(sc);
        if (sc->p >= sc->end)
            return -1;
        if (*sc->p == ']')
            return 0;
        if (!first) {
            if (*sc->p != ',')
                return -1;
            sc->p++;
            ws(sc);
            if (sc->p >= sc->end)
                return -1;
        }
        int r = one_prompt(s, sc, tgi, msg);
        if (r)
            return r;
    }
}

/* Whether the TGI "parameters" object at sc->p sets truncate; -1 when it
 * is not an object this scan follows. */
static int sets_truncate(struct scan *sc)
{
    if (*sc->p != '{')
        return skip_value(sc) ? -1 : 0;
    sc->p++;
    int first = 1, r, set = 0;
    const char *key;
    size_t klen;
    while ((r = next_key(sc, &first, &key, &klen)) == 1) {
        if (key_is(key, klen, "truncate"))
            set = !(sc->end - sc->p >= 4 && !memcmp(sc->p, "null", 4));
        if (skip_value(sc))
            return -1;
    }
    return r < 0 ? -1 : set;
}

int ifl_prescan_prompt(const struct ifl_server *s, const char *path, const char *body, size_t n,
                       char *param, char *msg)
{
    int tgi;
    if (!strcmp(path, "/v1/completions"))
        tgi = 0;
    else if (!strcmp(path, "/generate") || !strcmp(path, "/generate_stream") ||
             !strcmp(path, "/") || !strcmp(path, "/invocations"))
        tgi = 1;
    else
        return 0;
    if (!body)
        return 0;
    struct scan sc = {body, body + n};
    ws(&sc);
    if (sc.p >= sc.end || *sc.p != '{')
        return 0;
    sc.p++;
    const char *prompt = NULL, *key;
    size_t klen;
    int first = 1, r, truncate = 0;
    while ((r = next_key(&sc, &first, &key, &klen)) == 1) {
        if (key_is(key, klen, tgi ? "inputs" : "prompt")) {
            prompt = sc.p;
        } else if (tgi && key_is(key, klen, "parameters")) {
            if ((truncate = sets_truncate(&sc)) < 0)
                return 0;
            continue;
        }
        if (skip_value(&sc))
            return 0;
    }
    if (r < 0 || !prompt || truncate)
        return 0;
    sc.p = prompt;
    if (prompt_value(s, &sc, tgi, msg) != 1)
        return 0;
    snprintf(param, 64, "%s", tgi ? "inputs" : "prompt");
    return tgi ? 422 : 400;
}
