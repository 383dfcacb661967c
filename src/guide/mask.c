/*
 * Token masks: which tokens of a vocabulary a guide state may accept next.
 *
 * The vocabulary index is a byte trie of every token's piece, stored in
 * preorder: node i's subtree is the run [i, skip[i]), so the walk is one
 * forward scan that jumps over a subtree the moment the automaton rejects
 * its prefix. The automaton state after each prefix is kept per depth, so a
 * token costs only its bytes beyond the prefix it shares with the token
 * before it. Each step is ifl_guide_step, the very function
 * ifl_guide_accept_bytes uses, so a mask equals "accept the token's bytes
 * from a copy of the state" token by token (tests check exactly that).
 *
 * Masks are memoised per masker in a small LRU keyed by the whole state
 * (stacks and pending UTF-8 bytes), compared exactly, not just by hash:
 * grammars revisit the same few states (inside a string, between JSON
 * values) again and again.
 */
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "guide/internal.h"

enum { TOK_NEVER = 0, TOK_TRIE = 1, TOK_EOG = 2 };

/* A byte trie over some of the tokens, preorder; node 0 is the root (the
 * empty prefix). */
struct trie {
    uint32_t n_nodes;
    uint8_t *byte;     /* [n_nodes] the byte leading into the node */
    uint16_t *depth;   /* [n_nodes] */
    uint32_t *skip;    /* [n_nodes] first node after the subtree */
    uint32_t *tok_off; /* [n_nodes] first of its tokens in toks */
    uint32_t *tok_n;   /* [n_nodes] tokens whose piece ends here */
    int32_t *toks;
    uint32_t max_depth;
};

/* Plain tokens: pieces of 1..PLAIN_MAX whole UTF-8 characters, each plain
 * (U+0020 and up except '"' and '\\', see ifl_guide_class_plain). From a
 * state where every stack top treats all plain characters alike, the
 * automaton cannot tell two plain characters apart, so a plain token of k
 * characters is allowed exactly when k steps on any plain character
 * succeed: no walk needed. That covers nearly the whole vocabulary inside
 * a JSON string, the states whose walk is the slowest. */
#define PLAIN_MAX 256

struct ifl_guide_vocab_index {
    const struct ifl_vocab *vocab;
    int32_t n_tokens;
    uint8_t *kind;       /* [n_tokens] TOK_* */
    uint32_t *piece_off; /* [n_tokens + 1] into blob */
    char *blob;          /* every token's piece */
    int32_t *eog;        /* end-of-generation ids */
    int32_t n_eog;
    struct trie all;      /* every token with a piece */
    struct trie rest;     /* the tokens that are not plain */
    uint32_t max_depth;   /* of all */
    int32_t max_plain;    /* longest plain token, in characters */
    uint32_t *plain_upto; /* [max_plain + 1][n_words] plain tokens of 1..k characters */
    int64_t *plain_count; /* [max_plain + 1] how many */
    size_t n_words;
};

/* A token's piece during sorting; the comparator needs no global. */
struct sort_item {
    const char *p;
    uint32_t len;
    int32_t id;
};

static int cmp_piece(const void *a, const void *b)
{
    const struct sort_item *x = a, *y = b;
    int c = memcmp(x->p, y->p, x->len < y->len ? x->len : y->len);
    if (c)
        return c;
    if (x->len != y->len)
        return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

static void trie_free(struct trie *t)
{
    free(t->byte);
    free(t->depth);
    free(t->skip);
    free(t->tok_off);
    free(t->tok_n);
    free(t->toks);
}

void ifl_guide_vocab_index_free(struct ifl_guide_vocab_index *vi)
{
    if (!vi)
        return;
    free(vi->kind);
    free(vi->piece_off);
    free(vi->blob);
    free(vi->eog);
    trie_free(&vi->all);
    trie_free(&vi->rest);
    free(vi->plain_upto);
    free(vi->plain_count);
    free(vi);
}

int32_t ifl_guide_vocab_index_n_tokens(const struct ifl_guide_vocab_index *vi)
{
    return vi->n_tokens;
}

/* Characters of a plain piece (1..PLAIN_MAX), or 0 when it is not plain:
 * a byte that is not strict UTF-8 (overlong, surrogate, cut short), or a
 * character below U+0020, '"' or '\\'. */
static int32_t plain_chars(const char *p, uint32_t len)
{
    int32_t k = 0;
    for (size_t i = 0; i < len;) {
        size_t at = i;
        int64_t cp = ifl_guide_utf8_next(p, len, &i);
        size_t used = i - at;
        if (cp < 0x20 || cp == '"' || cp == '\\' || (cp >= 0xD800 && cp <= 0xDFFF) ||
            cp > 0x10FFFF ||
            used != (size_t)(cp < 0x80      ? 1
                             : cp < 0x800   ? 2
                             : cp < 0x10000 ? 3
                                            : 4))
            return 0;
        if (++k > PLAIN_MAX)
            return 0;
    }
    return k;
}

/* Builds a trie over ids[0..n) (sorted by piece). */
static int trie_build(struct trie *t, const struct ifl_guide_vocab_index *vi, const int32_t *ids,
                      int32_t n, uint64_t total_bytes, size_t maxp)
{
    size_t max_nodes = total_bytes + 1;
    t->byte = malloc(max_nodes);
    t->depth = malloc(max_nodes * sizeof *t->depth);
    t->skip = malloc(max_nodes * sizeof *t->skip);
    t->tok_off = malloc(max_nodes * sizeof *t->tok_off);
    t->tok_n = calloc(max_nodes, sizeof *t->tok_n);
    t->toks = malloc(((size_t)n + 1) * sizeof *t->toks);
    uint32_t *path = malloc((maxp + 1) * sizeof *path);
    if (!t->byte || !t->depth || !t->skip || !t->tok_off || !t->tok_n || !t->toks || !path) {
        free(path);
        return IFL_ENOMEM;
    }
    uint32_t nn = 1, pd = 0; /* path[0..pd] is the current root-to-node path */
    t->byte[0] = 0;
    t->depth[0] = 0;
    t->tok_off[0] = 0;
    path[0] = 0;
    const char *prev = NULL;
    uint32_t prev_len = 0;
    for (int32_t k = 0; k < n; k++) {
        int32_t id = ids[k];
        const char *p = vi->blob + vi->piece_off[id];
        uint32_t len = vi->piece_off[id + 1] - vi->piece_off[id];
        uint32_t l = 0;
        while (prev && l < len && l < prev_len && p[l] == prev[l])
            l++;
        while (pd > l)
            t->skip[path[pd--]] = nn;
        for (uint32_t d = l; d < len; d++) {
            t->byte[nn] = (uint8_t)p[d];
            t->depth[nn] = (uint16_t)(d + 1);
            t->tok_off[nn] = (uint32_t)k;
            path[++pd] = nn++;
        }
        uint32_t node = path[pd];
        if (t->tok_n[node] == 0)
            t->tok_off[node] = (uint32_t)k;
        t->toks[k] = id;
        t->tok_n[node]++;
        if (len > t->max_depth)
            t->max_depth = len;
        prev = p;
        prev_len = len;
    }
    while (pd > 0)
        t->skip[path[pd--]] = nn;
    t->skip[0] = nn;
    t->n_nodes = nn;
    free(path);
    return 0;
}

int ifl_guide_vocab_index_create(struct ifl_guide_vocab_index **out, const struct ifl_vocab *vocab,
                                 char *err)
{
    int32_t n = ifl_vocab_n_tokens(vocab);
    if (n <= 0)
        return ifl_err(err, IFL_EINVAL, "guide: empty vocabulary");
    struct ifl_guide_vocab_index *vi = calloc(1, sizeof *vi);
    size_t cap = 1 << 16, used = 0, maxp = ifl_vocab_max_piece(vocab) + 1;
    int32_t *order = malloc((size_t)n * sizeof *order);
    if (!vi || !order)
        goto nomem;
    vi->vocab = vocab;
    vi->n_tokens = n;
    vi->kind = calloc((size_t)n, 1);
    vi->piece_off = malloc(((size_t)n + 1) * sizeof *vi->piece_off);
    vi->eog = malloc((size_t)n * sizeof *vi->eog);
    vi->blob = malloc(cap);
    if (!vi->kind || !vi->piece_off || !vi->eog || !vi->blob)
        goto nomem;
    int32_t n_trie = 0;
    uint64_t total_bytes = 0;
    for (int32_t id = 0; id < n; id++) {
        vi->piece_off[id] = (uint32_t)used;
        if (ifl_vocab_is_eog(vocab, id)) {
            vi->kind[id] = TOK_EOG;
            vi->eog[vi->n_eog++] = id;
            continue;
        }
        if (ifl_vocab_is_control(vocab, id))
            continue;
        if (used + maxp > cap) {
            while (used + maxp > cap)
                cap *= 2;
            char *b = realloc(vi->blob, cap);
            if (!b)
                goto nomem;
            vi->blob = b;
        }
        size_t len = ifl_vocab_piece(vocab, id, 0, vi->blob + used, cap - used);
        if (len == 0 || len > 65535)
            continue;
        used += len;
        total_bytes += len;
        vi->kind[id] = TOK_TRIE;
        order[n_trie++] = id;
    }
    vi->piece_off[n] = (uint32_t)used;
    struct sort_item *items = malloc(((size_t)n_trie + 1) * sizeof *items);
    if (!items)
        goto nomem;
    for (int32_t k = 0; k < n_trie; k++) {
        int32_t id = order[k];
        items[k] = (struct sort_item){vi->blob + vi->piece_off[id],
                                      vi->piece_off[id + 1] - vi->piece_off[id], id};
    }
    qsort(items, (size_t)n_trie, sizeof *items, cmp_piece);
    for (int32_t k = 0; k < n_trie; k++)
        order[k] = items[k].id;
    free(items);
    int32_t *rest = malloc(((size_t)n_trie + 1) * sizeof *rest);
    int32_t *plen = calloc((size_t)n, sizeof *plen);
    if (!rest || !plen) {
        free(rest);
        free(plen);
        goto nomem;
    }
    int32_t n_rest = 0;
    for (int32_t k = 0; k < n_trie; k++) {
        int32_t id = order[k];
        plen[id] =
            plain_chars(vi->blob + vi->piece_off[id], vi->piece_off[id + 1] - vi->piece_off[id]);
        if (plen[id] > vi->max_plain)
            vi->max_plain = plen[id];
        if (!plen[id])
            rest[n_rest++] = id;
    }
    vi->n_words = ((size_t)n + 31) / 32;
    vi->plain_upto = calloc(((size_t)vi->max_plain + 1) * vi->n_words, sizeof *vi->plain_upto);
    vi->plain_count = calloc((size_t)vi->max_plain + 1, sizeof *vi->plain_count);
    int bad = !vi->plain_upto || !vi->plain_count;
    for (int32_t id = 0; !bad && id < n; id++)
        if (plen[id])
            for (int32_t k = plen[id]; k <= vi->max_plain; k++) {
                vi->plain_upto[(size_t)k * vi->n_words + (size_t)(id >> 5)] |= 1u << (id & 31);
                vi->plain_count[k]++;
            }
    bad = bad || trie_build(&vi->all, vi, order, n_trie, total_bytes, maxp) ||
          trie_build(&vi->rest, vi, rest, n_rest, total_bytes, maxp);
    free(rest);
    free(plen);
    if (bad)
        goto nomem;
    vi->max_depth = vi->all.max_depth;
    free(order);
    *out = vi;
    return 0;
nomem:
    free(order);
    ifl_guide_vocab_index_free(vi);
    return ifl_err(err, IFL_ENOMEM, "guide: out of memory building the vocabulary index");
}

int ifl_guide_accept_token(struct ifl_guide_state *st, const struct ifl_guide_vocab_index *vi,
                           int32_t id)
{
    if (id < 0 || id >= vi->n_tokens)
        return IFL_EINVAL;
    if (vi->kind[id] == TOK_EOG)
        return ifl_guide_is_accepting(st) ? 0 : IFL_EINVAL;
    if (vi->kind[id] != TOK_TRIE)
        return IFL_EINVAL;
    return ifl_guide_accept_bytes(st, vi->blob + vi->piece_off[id],
                                  vi->piece_off[id + 1] - vi->piece_off[id]);
}

/* ---------------------------------------------------------------- masker */

#define CACHE_N 8

struct centry {
    uint64_t gid;
    uint64_t hash;
    uint32_t *key; /* [len] stacks */
    size_t len, key_cap;
    uint32_t cp, need;
    uint32_t *bits;
    int64_t count;
    uint64_t used; /* LRU stamp, 0 = empty */
};

/* The class fast path: the plain one generalised to any class C that
 * every stack top of a state either is or shares nothing with (identifier
 * and e-mail characters, digits, hex). From such states the characters of
 * C are alike, so a token made only of them is allowed exactly when as
 * many steps on one of them succeed; the walk skips every subtree of the
 * trie that holds only such tokens. Per (grammar, class) the token lengths
 * and the subtree flags are computed once (O(vocabulary)) and cached. */
#define CLASS_CACHE 16
#define CLASS_MIN_ASCII 20 /* narrower classes take the plain walk */

struct cinfo {
    uint64_t gid;
    uint32_t cls;
    uint64_t used;   /* LRU stamp, 0 = empty */
    int32_t max_len; /* longest token made of C, in characters */
    uint16_t *len;   /* [n_tokens] characters when the piece is whole characters of C, else 0 */
    uint32_t *sub;   /* [(all.n_nodes + 31) / 32] node's subtree holds a token not made of C */
};

struct ifl_guide_masker {
    const struct ifl_guide_vocab_index *vi;
    struct ifl_guide_scratch *s;
    struct ifl_guide_vec *bufs;     /* [max_depth + 1] */
    struct ifl_guide_level *levels; /* [max_depth + 1] */
    size_t n_words;
    struct centry *cache; /* [n_cache] */
    int n_cache;
    uint64_t clock, hits, misses;
    int no_fast;                   /* tests: always walk the whole trie */
    struct ifl_guide_vec chain[2]; /* plain_run's levels */
    struct cinfo ccache[CLASS_CACHE];
    uint64_t cclock;
    uint32_t *pref; /* [all.n_nodes + 1] scratch of cinfo_build */
};

int ifl_guide_masker_create(struct ifl_guide_masker **out, const struct ifl_guide_vocab_index *vi)
{
    return ifl_guide_masker_create_sized(out, vi, CACHE_N);
}

int ifl_guide_masker_create_sized(struct ifl_guide_masker **out,
                                  const struct ifl_guide_vocab_index *vi, int n_cache)
{
    if (n_cache < 1)
        n_cache = 1;
    struct ifl_guide_masker *m = calloc(1, sizeof *m);
    if (!m || !(m->cache = calloc((size_t)n_cache, sizeof *m->cache))) {
        free(m);
        return IFL_ENOMEM;
    }
    m->n_cache = n_cache;
    m->vi = vi;
    m->n_words = ((size_t)vi->n_tokens + 31) / 32;
    m->bufs = calloc((size_t)vi->max_depth + 2, sizeof *m->bufs);
    m->levels = calloc((size_t)vi->max_depth + 2, sizeof *m->levels);
    int rc = m->bufs && m->levels ? ifl_guide_scratch_create(&m->s) : IFL_ENOMEM;
    for (int i = 0; !rc && i < m->n_cache; i++)
        if (!(m->cache[i].bits = malloc(m->n_words * sizeof(uint32_t))))
            rc = IFL_ENOMEM;
    if (rc) {
        ifl_guide_masker_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

void ifl_guide_masker_free(struct ifl_guide_masker *m)
{
    if (!m)
        return;
    if (m->bufs)
        for (uint32_t d = 0; d <= m->vi->max_depth + 1; d++)
            free(m->bufs[d].v);
    free(m->bufs);
    free(m->levels);
    ifl_guide_scratch_free(m->s);
    free(m->chain[0].v);
    free(m->chain[1].v);
    for (int i = 0; i < CLASS_CACHE; i++) {
        free(m->ccache[i].len);
        free(m->ccache[i].sub);
    }
    free(m->pref);
    for (int i = 0; i < m->n_cache; i++) {
        free(m->cache[i].key);
        free(m->cache[i].bits);
    }
    free(m->cache);
    free(m);
}

void ifl_guide_masker_stats(const struct ifl_guide_masker *m, uint64_t *hits, uint64_t *misses)
{
    *hits = m->hits;
    *misses = m->misses;
}

static uint64_t state_hash(const struct ifl_guide_state *st)
{
    uint64_t h = 0xCBF29CE484222325ull ^ ((uint64_t)st->cp << 8) ^ st->need;
    for (size_t i = 0; i < st->len; i++) {
        h ^= st->buf[i];
        h *= 0x100000001B3ull;
    }
    return h ^ st->g->id;
}

void ifl_guide_masker_set_fast(struct ifl_guide_masker *m, int on)
{
    m->no_fast = !on;
}

/* Whether every stack top of l treats the plain characters alike: 1 some
 * stack takes them all (the rest none), 0 none does, -1 mixed. */
static int plain_uniform(const struct ifl_guide *g, const struct ifl_guide_level *l)
{
    int any = 0;
    for (const uint32_t *w = l->buf, *end = l->buf + l->len; w < end; w += 1 + w[0]) {
        if (!w[0])
            continue;
        int u = ifl_guide_class_plain(g, E_VAL(g->elems[w[w[0]]]));
        if (u < 0)
            return -1;
        any |= u;
    }
    return any;
}

/* Whether two levels hold the same stacks: a step that leads back to the
 * same level loops, so it takes any number of the same characters. */
static int same_level(const struct ifl_guide_level *a, const struct ifl_guide_level *b)
{
    return a->len == b->len && a->n_stacks == b->n_stacks &&
           !memcmp(a->buf, b->buf, a->len * sizeof *a->buf);
}

/* How many plain characters in a row l may take, capped at the longest
 * plain token (so plain tokens up to that many characters are allowed and
 * longer ones are not); -1 when the fast path does not apply (a pending
 * UTF-8 character, or a state along the run that tells plain characters
 * apart); IFL_ENOMEM or IFL_EFULL. */
static int64_t plain_run(struct ifl_guide_masker *m, const struct ifl_guide_level *l0,
                         const struct ifl_guide *g)
{
    const struct ifl_guide_vocab_index *vi = m->vi;
    if (l0->need || vi->max_plain == 0)
        return -1;
    struct ifl_guide_level cur = *l0, nx;
    int k = 0, b = 0;
    for (; k < vi->max_plain; k++) {
        int u = plain_uniform(g, &cur);
        if (u < 0)
            return -1;
        if (u == 0)
            return k;
        int rc = ifl_guide_step(g, &cur, 'a', &m->chain[b], &nx, m->s);
        if (rc < 0)
            return rc == IFL_ENOMEM ? IFL_ENOMEM : -1;
        if (rc == 0)
            return k;
        if (same_level(&nx, &cur)) /* loops on plain characters */
            return vi->max_plain;
        cur = nx;
        b ^= 1;
    }
    return k;
}

/* The class view of (g, cls), built on first use; NULL when out of memory. */
static struct cinfo *cinfo_get(struct ifl_guide_masker *m, const struct ifl_guide *g, uint32_t cls)
{
    const struct ifl_guide_vocab_index *vi = m->vi;
    const struct trie *t = &vi->all;
    struct cinfo *v = &m->ccache[0];
    for (int i = 0; i < CLASS_CACHE; i++) {
        struct cinfo *c = &m->ccache[i];
        if (c->used && c->gid == g->id && c->cls == cls) {
            c->used = ++m->cclock;
            return c;
        }
        if (c->used < v->used)
            v = c;
    }
    if (!v->len && !(v->len = malloc((size_t)vi->n_tokens * sizeof *v->len)))
        return NULL;
    if (!v->sub && !(v->sub = malloc(((size_t)t->n_nodes + 31) / 32 * sizeof *v->sub)))
        return NULL;
    if (!m->pref && !(m->pref = malloc(((size_t)t->n_nodes + 1) * sizeof *m->pref)))
        return NULL;
    v->max_len = 0;
    for (int32_t id = 0; id < vi->n_tokens; id++) {
        v->len[id] = 0;
        if (vi->kind[id] != TOK_TRIE)
            continue;
        const char *p = vi->blob + vi->piece_off[id];
        size_t n = vi->piece_off[id + 1] - vi->piece_off[id], k = 0;
        for (size_t i = 0; i < n;) {
            size_t at = i;
            int64_t cp = ifl_guide_utf8_next(p, n, &i);
            if (cp < 0 || (cp >= 0xD800 && cp <= 0xDFFF) || cp > 0x10FFFF ||
                i - at != (size_t)(cp < 0x80      ? 1
                                   : cp < 0x800   ? 2
                                   : cp < 0x10000 ? 3
                                                  : 4) ||
                !ifl_guide_class_has(g, cls, (uint32_t)cp) || ++k > 65535) {
                k = 0;
                break;
            }
        }
        v->len[id] = (uint16_t)k;
        if ((int32_t)k > v->max_len)
            v->max_len = (int32_t)k;
    }
    /* pref[i]: nodes before i that end a token not made of C */
    m->pref[0] = 0;
    for (uint32_t i = 0; i < t->n_nodes; i++) {
        uint32_t bad = 0;
        for (uint32_t k = 0; k < t->tok_n[i] && !bad; k++)
            bad = v->len[t->toks[t->tok_off[i] + k]] == 0;
        m->pref[i + 1] = m->pref[i] + bad;
    }
    memset(v->sub, 0, ((size_t)t->n_nodes + 31) / 32 * sizeof *v->sub);
    for (uint32_t i = 0; i < t->n_nodes; i++)
        if (m->pref[t->skip[i]] > m->pref[i])
            v->sub[i >> 5] |= 1u << (i & 31);
    v->gid = g->id;
    v->cls = cls;
    v->used = ++m->cclock;
    return v;
}

/* How many characters of one class C in a row l0 may take (C: the class
 * of the first stack's top), capped at C's longest token; *out is C's
 * view. -1 when the path does not apply: a pending UTF-8 character, no
 * ASCII character in C, or a state along the run with a top that is
 * neither C nor apart from it. IFL_ENOMEM. */
static int64_t class_run(struct ifl_guide_masker *m, const struct ifl_guide_level *l0,
                         const struct ifl_guide *g, struct cinfo **out)
{
    if (l0->need)
        return -1;
    const uint32_t *w = l0->buf, *end = l0->buf + l0->len;
    while (w < end && !w[0])
        w += 1;
    if (w >= end)
        return -1;
    uint32_t cls = E_VAL(g->elems[w[w[0]]]);
    /* narrow classes (a literal character, digits) prune the walk at the
     * first byte already: the class view (O(vocabulary) to build) pays
     * only for wide ones, such as letters */
    int rep = -1, n_ascii = 0;
    for (int cp = 0; cp < 128; cp++)
        if (ifl_guide_class_has(g, cls, (uint32_t)cp)) {
            if (rep < 0)
                rep = cp;
            n_ascii++;
        }
    if (rep < 0 || n_ascii < CLASS_MIN_ASCII)
        return -1;
    struct cinfo *ci = cinfo_get(m, g, cls);
    if (!ci)
        return IFL_ENOMEM;
    *out = ci;
    struct ifl_guide_level cur = *l0, nx;
    int b = 0;
    for (int32_t k = 0; k < ci->max_len; k++) {
        int any = 0;
        for (w = cur.buf, end = cur.buf + cur.len; w < end; w += 1 + w[0]) {
            if (!w[0])
                continue;
            uint32_t c = E_VAL(g->elems[w[w[0]]]);
            if (c == cls)
                any = 1;
            else if (ifl_guide_class_apart(g, c, cls) != 1)
                return -1;
        }
        if (!any)
            return k;
        int rc = ifl_guide_step(g, &cur, (uint8_t)rep, &m->chain[b], &nx, m->s);
        if (rc < 0)
            return rc == IFL_ENOMEM ? IFL_ENOMEM : -1;
        if (rc == 0)
            return k;
        if (same_level(&nx, &cur))
            return ci->max_len;
        cur = nx;
        b ^= 1;
    }
    return ci->max_len;
}

/* Sets the bits of every token of trie t that m->levels[0] accepts. */
static int walk(struct ifl_guide_masker *m, const struct trie *t, const struct ifl_guide *g,
                uint32_t *allowed, int64_t *count, const uint32_t *sub)
{
    for (uint32_t i = 1; i < t->n_nodes;) {
        if (sub && !((sub[i >> 5] >> (i & 31)) & 1)) {
            i = t->skip[i]; /* only tokens the class run decided */
            continue;
        }
        uint32_t d = t->depth[i];
        int rc = ifl_guide_step(g, &m->levels[d - 1], t->byte[i], &m->bufs[d], &m->levels[d], m->s);
        if (rc == IFL_ENOMEM)
            return rc;
        if (rc <= 0) {
            i = t->skip[i];
            continue;
        }
        for (uint32_t k = 0; k < t->tok_n[i]; k++) {
            int32_t id = t->toks[t->tok_off[i] + k];
            allowed[id >> 5] |= 1u << (id & 31);
            (*count)++;
        }
        i++;
    }
    return 0;
}

int64_t ifl_guide_mask(struct ifl_guide_masker *m, const struct ifl_guide_state *st,
                       uint32_t *allowed)
{
    const struct ifl_guide_vocab_index *vi = m->vi;
    uint64_t h = state_hash(st);
    struct centry *victim = &m->cache[0];
    for (int i = 0; i < m->n_cache; i++) {
        struct centry *c = &m->cache[i];
        if (c->used && c->hash == h && c->gid == st->g->id && c->len == st->len &&
            c->cp == st->cp && c->need == st->need &&
            (!st->len || memcmp(c->key, st->buf, st->len * sizeof *st->buf) == 0)) {
            memcpy(allowed, c->bits, m->n_words * sizeof *allowed);
            c->used = ++m->clock;
            m->hits++;
            return c->count;
        }
        if (c->used < victim->used)
            victim = c;
    }
    m->misses++;
    memset(allowed, 0, m->n_words * sizeof *allowed);
    int64_t count = 0;
    const struct ifl_guide *g = st->g;
    m->levels[0] = (struct ifl_guide_level){st->buf, st->len, st->n_stacks, st->cp, st->need};
    int64_t run = m->no_fast ? -1 : plain_run(m, &m->levels[0], g);
    struct cinfo *ci = NULL;
    int64_t crun = run < 0 && !m->no_fast ? class_run(m, &m->levels[0], g, &ci) : -1;
    if (run == IFL_ENOMEM || crun == IFL_ENOMEM)
        return IFL_ENOMEM;
    if (run >= 0) {
        /* plain tokens by their length; the walk covers the others */
        if (run > 0) {
            memcpy(allowed, vi->plain_upto + (size_t)run * vi->n_words,
                   m->n_words * sizeof *allowed);
            count = vi->plain_count[run];
        }
        if (walk(m, &vi->rest, g, allowed, &count, NULL))
            return IFL_ENOMEM;
    } else if (crun >= 0) {
        /* tokens of the class by their length; the walk skips subtrees
         * that hold nothing else, and may set a decided bit again */
        for (int32_t id = 0; id < vi->n_tokens; id++)
            if (ci->len[id] && ci->len[id] <= crun)
                allowed[id >> 5] |= 1u << (id & 31);
        if (walk(m, &vi->all, g, allowed, &count, ci->sub))
            return IFL_ENOMEM;
        count = 0;
        for (size_t w = 0; w < m->n_words; w++)
            count += __builtin_popcount(allowed[w]);
    } else if (walk(m, &vi->all, g, allowed, &count, NULL)) {
        return IFL_ENOMEM;
    }
    if (ifl_guide_is_accepting(st)) {
        for (int32_t k = 0; k < vi->n_eog; k++) {
            int32_t id = vi->eog[k];
            allowed[id >> 5] |= 1u << (id & 31);
            count++;
        }
    }
    /* remember it (a failed allocation only skips the cache) */
    if (victim->key_cap < st->len) {
        uint32_t *k = realloc(victim->key, (st->len + 1) * sizeof *k);
        if (!k) {
            victim->used = 0;
            return count;
        }
        victim->key = k;
        victim->key_cap = st->len + 1;
    }
    if (st->len)
        memcpy(victim->key, st->buf, st->len * sizeof *st->buf);
    victim->len = st->len;
    victim->gid = g->id;
    victim->hash = h;
    victim->cp = st->cp;
    victim->need = st->need;
    victim->count = count;
    memcpy(victim->bits, allowed, m->n_words * sizeof *allowed);
    victim->used = ++m->clock;
    return count;
}
