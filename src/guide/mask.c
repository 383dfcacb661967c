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

struct ifl_guide_vocab_index {
    const struct ifl_vocab *vocab;
    int32_t n_tokens;
    uint8_t *kind;       /* [n_tokens] TOK_* */
    uint32_t *piece_off; /* [n_tokens + 1] into blob */
    char *blob;          /* every token's piece */
    int32_t *eog;        /* end-of-generation ids */
    int32_t n_eog;
    /* the trie, preorder; node 0 is the root (empty prefix) */
    uint32_t n_nodes;
    uint8_t *byte;     /* [n_nodes] the byte leading into the node */
    uint16_t *depth;   /* [n_nodes] */
    uint32_t *skip;    /* [n_nodes] first node after the subtree */
    uint32_t *tok_off; /* [n_nodes] first of its tokens in toks */
    uint32_t *tok_n;   /* [n_nodes] tokens whose piece ends here */
    int32_t *toks;
    uint32_t max_depth;
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

void ifl_guide_vocab_index_free(struct ifl_guide_vocab_index *vi)
{
    if (!vi)
        return;
    free(vi->kind);
    free(vi->piece_off);
    free(vi->blob);
    free(vi->eog);
    free(vi->byte);
    free(vi->depth);
    free(vi->skip);
    free(vi->tok_off);
    free(vi->tok_n);
    free(vi->toks);
    free(vi);
}

int32_t ifl_guide_vocab_index_n_tokens(const struct ifl_guide_vocab_index *vi)
{
    return vi->n_tokens;
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
    size_t max_nodes = total_bytes + 1;
    vi->byte = malloc(max_nodes);
    vi->depth = malloc(max_nodes * sizeof *vi->depth);
    vi->skip = malloc(max_nodes * sizeof *vi->skip);
    vi->tok_off = malloc(max_nodes * sizeof *vi->tok_off);
    vi->tok_n = calloc(max_nodes, sizeof *vi->tok_n);
    vi->toks = malloc(((size_t)n_trie + 1) * sizeof *vi->toks);
    uint32_t *path = malloc((maxp + 1) * sizeof *path);
    if (!vi->byte || !vi->depth || !vi->skip || !vi->tok_off || !vi->tok_n || !vi->toks || !path) {
        free(path);
        goto nomem;
    }
    uint32_t nn = 1, pd = 0; /* path[0..pd] is the current root-to-node path */
    vi->byte[0] = 0;
    vi->depth[0] = 0;
    vi->tok_off[0] = 0;
    path[0] = 0;
    const char *prev = NULL;
    uint32_t prev_len = 0;
    for (int32_t k = 0; k < n_trie; k++) {
        int32_t id = order[k];
        const char *p = vi->blob + vi->piece_off[id];
        uint32_t len = vi->piece_off[id + 1] - vi->piece_off[id];
        uint32_t l = 0;
        while (prev && l < len && l < prev_len && p[l] == prev[l])
            l++;
        while (pd > l)
            vi->skip[path[pd--]] = nn;
        for (uint32_t d = l; d < len; d++) {
            vi->byte[nn] = (uint8_t)p[d];
            vi->depth[nn] = (uint16_t)(d + 1);
            vi->tok_off[nn] = (uint32_t)k;
            path[++pd] = nn++;
        }
        uint32_t node = path[pd];
        if (vi->tok_n[node] == 0)
            vi->tok_off[node] = (uint32_t)k;
        vi->toks[k] = id;
        vi->tok_n[node]++;
        if (len > vi->max_depth)
            vi->max_depth = len;
        prev = p;
        prev_len = len;
    }
    while (pd > 0)
        vi->skip[path[pd--]] = nn;
    vi->skip[0] = nn;
    vi->n_nodes = nn;
    free(path);
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

struct ifl_guide_masker {
    const struct ifl_guide_vocab_index *vi;
    struct ifl_guide_scratch *s;
    struct ifl_guide_vec *bufs;     /* [max_depth + 1] */
    struct ifl_guide_level *levels; /* [max_depth + 1] */
    size_t n_words;
    struct centry cache[CACHE_N];
    uint64_t clock, hits, misses;
};

int ifl_guide_masker_create(struct ifl_guide_masker **out, const struct ifl_guide_vocab_index *vi)
{
    struct ifl_guide_masker *m = calloc(1, sizeof *m);
    if (!m)
        return IFL_ENOMEM;
    m->vi = vi;
    m->n_words = ((size_t)vi->n_tokens + 31) / 32;
    m->bufs = calloc((size_t)vi->max_depth + 2, sizeof *m->bufs);
    m->levels = calloc((size_t)vi->max_depth + 2, sizeof *m->levels);
    int rc = m->bufs && m->levels ? ifl_guide_scratch_create(&m->s) : IFL_ENOMEM;
    for (int i = 0; !rc && i < CACHE_N; i++)
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
    for (int i = 0; i < CACHE_N; i++) {
        free(m->cache[i].key);
        free(m->cache[i].bits);
    }
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

int64_t ifl_guide_mask(struct ifl_guide_masker *m, const struct ifl_guide_state *st,
                       uint32_t *allowed)
{
    const struct ifl_guide_vocab_index *vi = m->vi;
    uint64_t h = state_hash(st);
    struct centry *victim = &m->cache[0];
    for (int i = 0; i < CACHE_N; i++) {
        struct centry *c = &m->cache[i];
        if (c->used && c->hash == h && c->gid == st->g->id && c->len == st->len && c->cp == st->cp &&
            c->need == st->need &&
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
    for (uint32_t i = 1; i < vi->n_nodes;) {
        uint32_t d = vi->depth[i];
        int rc = ifl_guide_step(g, &m->levels[d - 1], vi->byte[i], &m->bufs[d], &m->levels[d],
                                m->s);
        if (rc == IFL_ENOMEM)
            return rc;
        if (rc <= 0) {
            i = vi->skip[i];
            continue;
        }
        for (uint32_t k = 0; k < vi->tok_n[i]; k++) {
            int32_t id = vi->toks[vi->tok_off[i] + k];
            allowed[id >> 5] |= 1u << (id & 31);
            count++;
        }
        i++;
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
