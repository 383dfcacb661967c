/*
 * Streaming stop-string matcher (contract in stopstr.h).
 *
 * The automaton is Aho-Corasick (Aho and Corasick 1975) turned into a full
 * transition table: state = the longest suffix of the text that is a
 * prefix of some stop string. Invariant between feeds: the bytes fed but
 * not emitted are exactly that suffix, i.e. n_emitted = n_fed - depth.
 * match_len[s] is the length of the longest stop string that is a suffix
 * of state s's string (0: none), found through the failure links while the
 * table is built, so the first byte at which it is non-zero is where the
 * earliest-ending match ends.
 */
#include "runtime/stopstr.h"

#include <stdlib.h>
#include <string.h>

#include "core/err.h"

struct ifl_stopstr {
    int32_t n_stops;
    char **stops; /* [n_stops] copies */
    int32_t n_nodes;
    int32_t n_classes;  /* distinct stop bytes + 1; class 0 is "any other byte" */
    uint8_t cls[256];   /* byte -> class */
    int32_t *delta;     /* [n_nodes][n_classes] next state */
    int32_t *depth;     /* [n_nodes] length of the state's string */
    int32_t *match_len; /* [n_nodes] longest stop ending here, 0 if none */
    int32_t *match_idx; /* [n_nodes] which stop that is */
    const char **str;   /* [n_nodes] a stop string the state's string prefixes */
    size_t max_len;

    int32_t node; /* current state */
    int64_t n_fed;
    int64_t n_emitted;
    int64_t match_off; /* -1 until a match */
    int32_t match_which;
};

void ifl_stopstr_free(struct ifl_stopstr *m)
{
    if (!m)
        return;
    for (int32_t i = 0; m->stops && i < m->n_stops; i++)
        free(m->stops[i]);
    free(m->stops);
    free(m->delta);
    free(m->depth);
    free(m->match_len);
    free(m->match_idx);
    free(m->str);
    free(m);
}

void ifl_stopstr_reset(struct ifl_stopstr *m)
{
    m->node = 0;
    m->n_fed = 0;
    m->n_emitted = 0;
    m->match_off = -1;
    m->match_which = -1;
}

int ifl_stopstr_create(struct ifl_stopstr **out, const char *const *stops, int32_t n_stops,
                       char *err)
{
    *out = NULL;
    if (n_stops < 0 || (n_stops > 0 && !stops))
        return ifl_err(err, IFL_EINVAL, "stop_strings: bad count %d", (int)n_stops);
    size_t total = 0;
    for (int32_t i = 0; i < n_stops; i++) {
        if (!stops[i] || !stops[i][0])
            return ifl_err(err, IFL_EINVAL, "stop_strings[%d]: must be a non-empty string", (int)i);
        total += strlen(stops[i]);
    }
    struct ifl_stopstr *m = calloc(1, sizeof(*m));
    if (!m)
        return ifl_err(err, IFL_ENOMEM, "stop_strings: out of memory");
    m->n_stops = n_stops;
    int ok = (m->stops = calloc((size_t)n_stops + 1, sizeof(char *))) != NULL;
    for (int32_t i = 0; ok && i < n_stops; i++)
        ok = (m->stops[i] = strdup(stops[i])) != NULL;
    if (!ok)
        goto nomem;

    int32_t k = 1;
    for (int32_t i = 0; i < n_stops; i++)
        for (const unsigned char *p = (const unsigned char *)stops[i]; *p; p++)
            if (!m->cls[*p])
                m->cls[*p] = (uint8_t)k++;
    /* k <= 256 because byte 0 never occurs inside a C string */
    m->n_classes = k;
    size_t cap = total + 1, nc = (size_t)k;
    m->delta = malloc(cap * nc * sizeof(*m->delta));
    m->depth = calloc(cap, sizeof(*m->depth));
    m->match_len = calloc(cap, sizeof(*m->match_len));
    m->match_idx = malloc(cap * sizeof(*m->match_idx));
    m->str = calloc(cap, sizeof(*m->str));
    int32_t *fail = malloc(cap * sizeof(*fail)), *queue = malloc(cap * sizeof(*queue));
    if (!m->delta || !m->depth || !m->match_len || !m->match_idx || !m->str || !fail || !queue) {
        free(fail);
        free(queue);
        goto nomem;
    }
    for (size_t i = 0; i < cap * nc; i++)
        m->delta[i] = -1;
    for (size_t i = 0; i < cap; i++)
        m->match_idx[i] = -1;

    /* the trie */
    m->n_nodes = 1;
    for (int32_t i = 0; i < n_stops; i++) {
        const char *s = m->stops[i];
        int32_t u = 0;
        size_t len = strlen(s);
        if (len > m->max_len)
            m->max_len = len;
        for (size_t j = 0; j < len; j++) {
            int32_t *slot = &m->delta[(size_t)u * nc + m->cls[(unsigned char)s[j]]];
            if (*slot < 0) {
                *slot = m->n_nodes++;
                m->depth[*slot] = (int32_t)j + 1;
                m->str[*slot] = s;
            }
            u = *slot;
        }
        if (m->match_len[u] == 0) { /* the first of equal duplicates names the match */
            m->match_len[u] = (int32_t)len;
            m->match_idx[u] = i;
        }
    }
    /* breadth first: failure links, inherited matches, missing transitions */
    int32_t head = 0, tail = 0;
    fail[0] = 0;
    for (size_t c = 0; c < nc; c++) {
        int32_t v = m->delta[c];
        if (v < 0) {
            m->delta[c] = 0;
        } else {
            fail[v] = 0;
            queue[tail++] = v;
        }
    }
    while (head < tail) {
        int32_t u = queue[head++];
        for (size_t c = 0; c < nc; c++) {
            int32_t *slot = &m->delta[(size_t)u * nc + c];
            int32_t via_fail = m->delta[(size_t)fail[u] * nc + c];
            if (*slot < 0) {
                *slot = via_fail;
                continue;
            }
            int32_t v = *slot;
            fail[v] = via_fail;
            if (m->match_len[v] == 0) {
                m->match_len[v] = m->match_len[via_fail];
                m->match_idx[v] = m->match_idx[via_fail];
            }
            queue[tail++] = v;
        }
    }
    free(fail);
    free(queue);
    ifl_stopstr_reset(m);
    *out = m;
    return 0;
nomem:
    ifl_stopstr_free(m);
    return ifl_err(err, IFL_ENOMEM, "stop_strings: out of memory");
}

size_t ifl_stopstr_max_hold(const struct ifl_stopstr *m)
{
    return m->max_len ? m->max_len - 1 : 0;
}

/* Copies the first k bytes of held (hl bytes) followed by text to out. */
static void emit(char *out, const char *held, size_t hl, const char *text, size_t k)
{
    size_t a = k < hl ? k : hl;
    if (a)
        memcpy(out, held, a);
    if (k > a)
        memcpy(out + a, text, k - a);
}

int ifl_stopstr_feed(struct ifl_stopstr *m, const char *text, size_t n, char *out, size_t *n_out)
{
    *n_out = 0;
    if (m->match_off >= 0)
        return 1;
    const char *held = m->str[m->node];
    size_t hl = (size_t)m->depth[m->node];
    int32_t u = m->node;
    size_t nc = (size_t)m->n_classes;
    for (size_t i = 0; i < n; i++) {
        u = m->delta[(size_t)u * nc + m->cls[(unsigned char)text[i]]];
        if (m->match_len[u]) {
            int64_t end = m->n_fed + (int64_t)i + 1;
            m->match_off = end - m->match_len[u];
            m->match_which = m->match_idx[u];
            size_t k = (size_t)(m->match_off - m->n_emitted);
            emit(out, held, hl, text, k);
            *n_out = k;
            m->n_fed = end;
            m->n_emitted = m->match_off;
            m->node = 0;
            return 1;
        }
    }
    size_t k = hl + n - (size_t)m->depth[u];
    emit(out, held, hl, text, k);
    *n_out = k;
    m->node = u;
    m->n_fed += (int64_t)n;
    m->n_emitted += (int64_t)k;
    return 0;
}

size_t ifl_stopstr_flush(struct ifl_stopstr *m, char *out)
{
    if (m->match_off >= 0)
        return 0;
    size_t hl = (size_t)m->depth[m->node];
    if (hl)
        memcpy(out, m->str[m->node], hl);
    m->n_emitted += (int64_t)hl;
    m->node = 0;
    return hl;
}

int64_t ifl_stopstr_match_offset(const struct ifl_stopstr *m)
{
    return m->match_off;
}

int32_t ifl_stopstr_match_index(const struct ifl_stopstr *m)
{
    return m->match_which;
}

int64_t ifl_stopstr_n_fed(const struct ifl_stopstr *m)
{
    return m->n_fed;
}

int64_t ifl_stopstr_n_emitted(const struct ifl_stopstr *m)
{
    return m->n_emitted;
}
