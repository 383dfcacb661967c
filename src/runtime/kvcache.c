/*
 * KV block manager (see kvcache.h): block ids, reference counts, copy-on-
 * write and automatic prefix caching over a fixed pool of n_blocks.
 *
 * Every block is in exactly one of three states, and the counters follow:
 *   free    ref == 0, not registered, its bit set in free_bits  (n_free)
 *   cached  ref == 0, registered, on the LRU list              (n_cached)
 *   used    ref >= 1, registered or not, on neither            (n_used)
 * so n_free + n_cached + n_used == n_blocks at every return.
 *
 * A registered block is full, carries key = hash(parent key, its tokens),
 * has its tokens, parent key and parent identity stored here, and sits in
 * the open-addressing table (linear probing, backward-shift deletion, no
 * tombstones). It is never written again: reserve() copies (ref > 1) or
 * unregisters (ref == 1) any block it is about to hand out for writing.
 *
 * The registered blocks form a trie. A block's identity is (id, gen); gen
 * changes whenever the block leaves the table, so an identity names one
 * token prefix for as long as it is valid. A lookup must match the key, the
 * parent key, the parent identity and all block_size tokens, hence even a
 * complete 64-bit key collision never shares wrong data: a block is shared
 * only if its own tokens and, inductively, every ancestor's tokens match.
 * (The cost: children of an evicted block become unreachable and simply age
 * out of the LRU list; release pushes tails first so they go first anyway.)
 *
 * With prefix caching on, a sequence always has n_hashed == n_pos /
 * block_size: every full block of it carries a key and a canonical node
 * (itself if it registered, else the identical block registered before it)
 * kept per block, so truncate can restore last_key and chain_block.
 *
 * Everything is allocated in ifl_kvc_create; only ifl_kvc_seq_init
 * allocates (a sequence's block array). Eviction takes the least recently
 * released cached block; release pushes a sequence's blocks last-to-first so
 * that the tails of a chain are evicted before its head.
 *
 * Memory: the store's pages cost memory only once written, so allocation
 * hands out the lowest-numbered free block (a bitmap searched from the
 * lowest word that may hold one): the blocks in use stay packed at the
 * front, and the rest, never touched, costs nothing. A block taken is
 * "touched" until given back: ifl_kvc_release_idle finds runs of free
 * blocks that have stayed free long enough and hands them to the release
 * callback (cached blocks hold prefixes and are never given back).
 */
#include "runtime/kvcache.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"

#define KVC_NONE (-1)

struct ifl_kvc {
    int32_t n_blocks;
    int32_t block_size;
    int caching;
    ifl_kvc_copy_fn copy;
    void *copy_user;

    int32_t *ref;        /* [n_blocks] sequences holding each block */
    uint8_t *registered; /* [n_blocks] 1 when in the prefix table */
    uint64_t *key;       /* [n_blocks] chain key of a full, hashed block */
    uint64_t *parent;    /* [n_blocks] parent key of a registered block */
    int32_t *pid;        /* [n_blocks] parent identity of a registered block: */
    uint32_t *pgen;      /*   block id and gen, -1 and 0 at the root */
    uint32_t *gen;       /* [n_blocks] bumped each time a block leaves the table */
    int32_t *canon;      /* [n_blocks] node standing for a hashed block's prefix */
    uint32_t *canon_gen;
    int32_t *toks;  /* [n_blocks][block_size] tokens of a registered block */
    uint64_t *xkey; /* [n_blocks] digest of a registered block's ext keys (0: none) */

    uint64_t *free_bits; /* [n_words] bit b: block b is free */
    uint64_t *touched;   /* [n_words] bit b: taken since creation or its last release */
    int64_t *freed_at;   /* [n_blocks] clock when a free block became free */
    int32_t n_words;
    int32_t free_hint; /* no word below this one has a free bit */
    int32_t n_free;
    int32_t n_touched_free; /* free blocks with their touched bit set */
    int32_t n_touched;
    _Atomic int32_t touched_end; /* one past the highest touched block; read by any thread */
    int32_t peak_used;
    int64_t now;      /* the caller's clock (ifl_kvc_set_clock) */
    int64_t released; /* blocks given back since creation */
    ifl_kvc_release_fn release;
    void *release_user;

    int32_t *lru_prev; /* [n_blocks] cached list links, KVC_NONE at the ends */
    int32_t *lru_next;
    int32_t lru_head; /* least recently used (evicted first) */
    int32_t lru_tail; /* most recently used */
    int32_t n_cached;
    int32_t n_used;

    int32_t *table;      /* [table_cap] block ids, KVC_NONE when empty */
    uint32_t table_mask; /* table_cap - 1, table_cap a power of two >= 2 * n_blocks */

    int64_t reused, missed, evicted;
};

/* ---- hashing ------------------------------------------------------------ */

static uint64_t kvc_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint64_t kvc_hash_default(uint64_t parent, const int32_t *tokens, int32_t n)
{
    uint64_t h = kvc_mix(parent ^ 0x6a09e667f3bcc909ull);
    for (int32_t i = 0; i < n; i++)
        h = kvc_mix(h ^
                    ((uint64_t)(uint32_t)tokens[i] + 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1)));
    /* 0 is the root's parent key; no block may have it. */
    return h ? h : 1;
}

/* Tests that #include this file may point this elsewhere to force
 * collisions; it is not reachable from any other translation unit. */
static uint64_t (*kvc_hash)(uint64_t parent, const int32_t *tokens, int32_t n) = kvc_hash_default;

/* The digest of the ext keys of block j of s (kvcache.h): 0 when every
 * position's is 0 (a block of plain tokens keeps the key it always had),
 * else a hash of each position's key and its place in the block. */
static uint64_t kvc_block_xkey(const struct ifl_kvc *c, const struct ifl_kvc_seq *s, int32_t j)
{
    int64_t p0 = (int64_t)j * c->block_size;
    if (!s->ext || p0 >= s->n_ext)
        return 0;
    uint64_t h = 0;
    int any = 0;
    for (int32_t i = 0; i < c->block_size && p0 + i < s->n_ext; i++) {
        uint64_t x = s->ext[p0 + i];
        any |= x != 0;
        h = kvc_mix(h ^ kvc_mix(x + 0x9e3779b97f4a7c15ull * (uint64_t)(i + 1)));
    }
    if (!any)
        return 0;
    return h ? h : 1;
}

/* A block's key: its parent's and tokens', and its ext digest if any. */
static uint64_t kvc_block_key(const struct ifl_kvc *c, uint64_t parent, const int32_t *t,
                              uint64_t xkey)
{
    if (xkey)
        parent = kvc_mix(parent ^ xkey ^ 0xbb67ae8584caa73bull);
    return kvc_hash(parent, t, c->block_size);
}

/* ---- prefix table ------------------------------------------------------- */

static int32_t *kvc_toks(const struct ifl_kvc *c, int32_t b)
{
    return c->toks + (size_t)b * (size_t)c->block_size;
}

/* A trie position: the registered block (id, gen), or the root (-1, 0). */
struct kvc_node {
    int32_t id;
    uint32_t gen;
};

static const struct kvc_node kvc_root = {KVC_NONE, 0};
/* No node: the sequence's prefix is not (or no longer) in the table. */
static const struct kvc_node kvc_nowhere = {KVC_NONE, 1};

static int node_valid(const struct ifl_kvc *c, struct kvc_node n)
{
    return n.id == KVC_NONE ? n.gen == 0 : c->registered[n.id] && c->gen[n.id] == n.gen;
}

/* The registered child of parent (whose key is pkey) with this key and
 * tokens, or KVC_NONE. */
static int32_t table_find(const struct ifl_kvc *c, uint64_t key, uint64_t pkey,
                          struct kvc_node parent, const int32_t *tokens, uint64_t xkey)
{
    size_t bytes = sizeof(int32_t) * (size_t)c->block_size;
    for (uint32_t i = (uint32_t)key & c->table_mask;; i = (i + 1) & c->table_mask) {
        int32_t b = c->table[i];
        if (b == KVC_NONE)
            return KVC_NONE;
        if (c->key[b] == key && c->parent[b] == pkey && c->pid[b] == parent.id &&
            c->pgen[b] == parent.gen && c->xkey[b] == xkey &&
            memcmp(kvc_toks(c, b), tokens, bytes) == 0)
            return b;
    }
}

static void table_insert(struct ifl_kvc *c, int32_t b)
{
    uint32_t i = (uint32_t)c->key[b] & c->table_mask;
    while (c->table[i] != KVC_NONE)
        i = (i + 1) & c->table_mask;
    c->table[i] = b;
}

/* Removes block b, then shifts later members of the probe run back so that
 * every entry stays reachable from its home bucket without tombstones. */
static void table_remove(struct ifl_kvc *c, int32_t b)
{
    uint32_t i = (uint32_t)c->key[b] & c->table_mask;
    while (c->table[i] != b) {
        IFL_ASSERT(c->table[i] != KVC_NONE);
        i = (i + 1) & c->table_mask;
    }
    uint32_t hole = i;
    for (uint32_t j = (hole + 1) & c->table_mask; c->table[j] != KVC_NONE;
         j = (j + 1) & c->table_mask) {
        uint32_t home = (uint32_t)c->key[c->table[j]] & c->table_mask;
        /* The entry at j may move to the hole unless its home lies
         * cyclically in (hole, j]. */
        if (((j - home) & c->table_mask) >= ((j - hole) & c->table_mask)) {
            c->table[hole] = c->table[j];
            hole = j;
        }
    }
    c->table[hole] = KVC_NONE;
}

/* Block b, full with key c->key[b], enters the table as parent's child. */
static void kvc_register(struct ifl_kvc *c, int32_t b, uint64_t pkey, struct kvc_node parent,
                         const int32_t *tokens, uint64_t xkey)
{
    memcpy(kvc_toks(c, b), tokens, sizeof(int32_t) * (size_t)c->block_size);
    c->xkey[b] = xkey;
    c->parent[b] = pkey;
    c->pid[b] = parent.id;
    c->pgen[b] = parent.gen;
    c->registered[b] = 1;
    table_insert(c, b);
}

/* Leaves the table; the new gen makes every identity naming b stale. */
static void kvc_unregister(struct ifl_kvc *c, int32_t b)
{
    table_remove(c, b);
    c->registered[b] = 0;
    c->gen[b]++;
}

/* ---- LRU list of cached blocks ------------------------------------------ */

static void lru_unlink(struct ifl_kvc *c, int32_t b)
{
    int32_t p = c->lru_prev[b], n = c->lru_next[b];
    if (p != KVC_NONE)
        c->lru_next[p] = n;
    else
        c->lru_head = n;
    if (n != KVC_NONE)
        c->lru_prev[n] = p;
    else
        c->lru_tail = p;
    c->lru_prev[b] = c->lru_next[b] = KVC_NONE;
    c->n_cached--;
}

static void lru_push_recent(struct ifl_kvc *c, int32_t b)
{
    c->lru_prev[b] = c->lru_tail;
    c->lru_next[b] = KVC_NONE;
    if (c->lru_tail != KVC_NONE)
        c->lru_next[c->lru_tail] = b;
    else
        c->lru_head = b;
    c->lru_tail = b;
    c->n_cached++;
}

/* ---- block references ---------------------------------------------------- */

/* A block with ref 1: a free one, else the least recently used cached one
 * (unregistered). The caller has checked ifl_kvc_available(). */
static int32_t kvc_take(struct ifl_kvc *c)
{
    int32_t b;
    if (c->n_free > 0) {
        int32_t w = c->free_hint;
        while (!c->free_bits[w])
            w++;
        c->free_hint = w;
        b = w * 64 + __builtin_ctzll(c->free_bits[w]);
        c->free_bits[w] &= c->free_bits[w] - 1;
        c->n_free--;
        if (c->touched[w] >> (b & 63) & 1)
            c->n_touched_free--;
        else
            c->n_touched++;
        c->touched[w] |= 1ull << (b & 63);
        if (b >= atomic_load_explicit(&c->touched_end, memory_order_relaxed))
            atomic_store_explicit(&c->touched_end, b + 1, memory_order_release);
    } else {
        b = c->lru_head;
        IFL_ASSERT(b != KVC_NONE);
        lru_unlink(c, b);
        kvc_unregister(c, b);
        c->evicted++;
    }
    IFL_ASSERT(c->ref[b] == 0);
    c->ref[b] = 1;
    if (++c->n_used > c->peak_used)
        c->peak_used = c->n_used;
    return b;
}

static void kvc_ref(struct ifl_kvc *c, int32_t b)
{
    if (c->ref[b]++ == 0) {
        lru_unlink(c, b); /* only cached blocks are shared with ref 0 */
        if (++c->n_used > c->peak_used)
            c->peak_used = c->n_used;
    }
}

static void kvc_unref(struct ifl_kvc *c, int32_t b)
{
    IFL_ASSERT(c->ref[b] > 0);
    if (--c->ref[b] > 0)
        return;
    c->n_used--;
    if (c->registered[b]) {
        lru_push_recent(c, b);
    } else {
        c->free_bits[b >> 6] |= 1ull << (b & 63);
        if ((b >> 6) < c->free_hint)
            c->free_hint = b >> 6;
        c->n_free++;
        c->n_touched_free++; /* a block in use is always touched */
        c->freed_at[b] = c->now;
    }
}

/* ---- pool ---------------------------------------------------------------- */

int ifl_kvc_create(struct ifl_kvc **out, const struct ifl_kvc_config *cfg)
{
    *out = NULL;
    if (!cfg || cfg->n_blocks < 1 || cfg->block_size < 1 || !cfg->copy ||
        cfg->n_blocks > (1 << 29) ||
        (uint64_t)cfg->n_blocks * (uint64_t)cfg->block_size > (1ull << 40))
        return IFL_EINVAL;
    struct ifl_kvc *c = calloc(1, sizeof(*c));
    if (!c)
        return IFL_ENOMEM;
    size_t n = (size_t)cfg->n_blocks;
    uint32_t cap = 16;
    while (cap < 2u * (uint32_t)cfg->n_blocks)
        cap <<= 1;
    c->n_blocks = cfg->n_blocks;
    c->block_size = cfg->block_size;
    c->caching = cfg->enable_prefix_caching != 0;
    c->copy = cfg->copy;
    c->copy_user = cfg->copy_user;
    c->release = cfg->release;
    c->release_user = cfg->release_user;
    c->n_words = (int32_t)((n + 63) / 64);
    c->ref = calloc(n, sizeof(*c->ref));
    c->registered = calloc(n, sizeof(*c->registered));
    c->key = calloc(n, sizeof(*c->key));
    c->parent = calloc(n, sizeof(*c->parent));
    c->pid = calloc(n, sizeof(*c->pid));
    c->pgen = calloc(n, sizeof(*c->pgen));
    c->gen = calloc(n, sizeof(*c->gen));
    c->canon = calloc(n, sizeof(*c->canon));
    c->canon_gen = calloc(n, sizeof(*c->canon_gen));
    c->toks = calloc(n * (size_t)cfg->block_size, sizeof(*c->toks));
    c->xkey = calloc(n, sizeof(*c->xkey));
    c->free_bits = calloc((size_t)c->n_words, sizeof(*c->free_bits));
    c->touched = calloc((size_t)c->n_words, sizeof(*c->touched));
    c->freed_at = malloc(n * sizeof(*c->freed_at));
    c->lru_prev = malloc(n * sizeof(*c->lru_prev));
    c->lru_next = malloc(n * sizeof(*c->lru_next));
    c->table = malloc((size_t)cap * sizeof(*c->table));
    if (!c->ref || !c->registered || !c->key || !c->parent || !c->pid || !c->pgen || !c->gen ||
        !c->canon || !c->canon_gen || !c->toks || !c->xkey || !c->free_bits || !c->touched ||
        !c->freed_at || !c->lru_prev || !c->lru_next || !c->table) {
        ifl_kvc_free(c);
        return IFL_ENOMEM;
    }
    for (int32_t i = 0; i < c->n_blocks; i++) {
        c->free_bits[i >> 6] |= 1ull << (i & 63);
        c->freed_at[i] = INT64_MIN; /* never used: free since forever */
        c->lru_prev[i] = c->lru_next[i] = KVC_NONE;
    }
    c->n_free = c->n_blocks;
    c->lru_head = c->lru_tail = KVC_NONE;
    for (uint32_t i = 0; i < cap; i++)
        c->table[i] = KVC_NONE;
    c->table_mask = cap - 1;
    *out = c;
    return 0;
}

void ifl_kvc_free(struct ifl_kvc *c)
{
    if (!c)
        return;
    free(c->ref);
    free(c->registered);
    free(c->key);
    free(c->parent);
    free(c->pid);
    free(c->pgen);
    free(c->gen);
    free(c->canon);
    free(c->canon_gen);
    free(c->toks);
    free(c->xkey);
    free(c->free_bits);
    free(c->touched);
    free(c->freed_at);
    free(c->lru_prev);
    free(c->lru_next);
    free(c->table);
    free(c);
}

int32_t ifl_kvc_block_size(const struct ifl_kvc *c)
{
    return c->block_size;
}

int32_t ifl_kvc_available(const struct ifl_kvc *c)
{
    return c->n_free + c->n_cached;
}

void ifl_kvc_get_stats(const struct ifl_kvc *c, struct ifl_kvc_stats *out)
{
    out->n_blocks = c->n_blocks;
    out->n_free = c->n_free;
    out->n_cached = c->n_cached;
    out->n_used = c->n_used;
    out->reused = c->reused;
    out->missed = c->missed;
    out->evicted = c->evicted;
    out->n_touched = c->n_touched;
    out->peak_used = c->peak_used;
    out->released = c->released;
}

void ifl_kvc_set_clock(struct ifl_kvc *c, int64_t now)
{
    c->now = now;
}

static int block_free(const struct ifl_kvc *c, int32_t b)
{
    return (int)(c->free_bits[b >> 6] >> (b & 63) & 1);
}

static int block_touched(const struct ifl_kvc *c, int32_t b)
{
    return (int)(c->touched[b >> 6] >> (b & 63) & 1);
}

int32_t ifl_kvc_release_idle(struct ifl_kvc *c, int64_t min_idle)
{
    if (!c->release || c->n_touched_free == 0)
        return 0;
    int32_t given = 0;
    /* maximal runs of blocks free for at least min_idle; untouched ones
     * join a run (giving them back costs nothing and makes runs longer, so
     * more whole pages fall inside) but a run of only those is skipped */
    int64_t before = c->now - min_idle; /* freed at or before this: long enough */
    for (int32_t b = 0; b < c->n_blocks && c->n_touched_free > 0;) {
        if (!block_free(c, b) || c->freed_at[b] > before) {
            b++;
            continue;
        }
        int32_t first = b, n_touched = 0;
        while (b < c->n_blocks && block_free(c, b) && c->freed_at[b] <= before)
            n_touched += block_touched(c, b++);
        if (!n_touched)
            continue;
        c->release(c->release_user, first, b - first);
        for (int32_t i = first; i < b; i++)
            c->touched[i >> 6] &= ~(1ull << (i & 63));
        c->n_touched_free -= n_touched;
        c->n_touched -= n_touched;
        given += n_touched;
    }
    c->released += given;
    int32_t w = c->n_words;
    while (w > 0 && !c->touched[w - 1])
        w--;
    int32_t end = w ? (w - 1) * 64 + 64 - __builtin_clzll(c->touched[w - 1]) : 0;
    atomic_store_explicit(&c->touched_end, end, memory_order_release);
    return given;
}

int32_t ifl_kvc_touched_end(const struct ifl_kvc *c)
{
    return atomic_load_explicit(&((struct ifl_kvc *)c)->touched_end, memory_order_acquire);
}

int64_t ifl_kvc_next_release(const struct ifl_kvc *c, int64_t min_idle)
{
    if (!c->release || c->n_touched_free == 0)
        return INT64_MAX;
    int64_t first = INT64_MAX;
    for (int32_t b = 0; b < c->n_blocks; b++)
        if (block_free(c, b) && block_touched(c, b) && c->freed_at[b] < first)
            first = c->freed_at[b];
    return first == INT64_MAX ? first : first + min_idle;
}

/* ---- sequences ----------------------------------------------------------- */

int ifl_kvc_seq_init(struct ifl_kvc_seq *s, int32_t max_blocks)
{
    memset(s, 0, sizeof(*s));
    if (max_blocks < 0)
        return IFL_EINVAL;
    s->blocks = malloc(sizeof(*s->blocks) * (size_t)(max_blocks > 0 ? max_blocks : 1));
    if (!s->blocks)
        return IFL_ENOMEM;
    s->cap = max_blocks;
    s->chain_block = KVC_NONE;
    return 0;
}

/* Drops blocks [keep, n_blocks), last first: the most recently released
 * block is then the chain's earliest, which the LRU keeps longest. */
static void seq_drop_from(struct ifl_kvc *c, struct ifl_kvc_seq *s, int32_t keep)
{
    for (int32_t j = s->n_blocks - 1; j >= keep; j--)
        if (s->blocks[j] != KVC_NONE) /* (given back early) */
            kvc_unref(c, s->blocks[j]);
    s->n_blocks = keep;
    if (s->n_dropped > keep)
        s->n_dropped = keep;
}

void ifl_kvc_seq_set_salt(struct ifl_kvc_seq *s, uint64_t salt)
{
    IFL_ASSERT(s->n_blocks == 0 && s->n_pos == 0);
    s->salt = salt;
    s->last_key = salt;
}

void ifl_kvc_seq_set_ext(struct ifl_kvc_seq *s, const uint64_t *ext, int32_t n_ext)
{
    IFL_ASSERT(s->n_blocks == 0 && s->n_pos == 0);
    s->ext = n_ext > 0 ? ext : NULL;
    s->n_ext = n_ext > 0 ? n_ext : 0;
}

void ifl_kvc_seq_reset(struct ifl_kvc *c, struct ifl_kvc_seq *s)
{
    seq_drop_from(c, s, 0);
    s->n_pos = 0;
    s->n_hashed = 0;
    s->last_key = s->salt; /* kept: a preempted sequence recomputes under its own key */
    s->chain_block = KVC_NONE;
    s->chain_gen = 0;
}

void ifl_kvc_seq_release(struct ifl_kvc *c, struct ifl_kvc_seq *s)
{
    if (s->blocks)
        seq_drop_from(c, s, 0);
    free(s->blocks);
    memset(s, 0, sizeof(*s));
}

int32_t ifl_kvc_match_prefix(struct ifl_kvc *c, struct ifl_kvc_seq *s, const int32_t *tokens,
                             int32_t n)
{
    IFL_ASSERT(s->n_blocks == 0 && s->n_pos == 0);
    if (!c->caching || n <= 0)
        return 0;
    int32_t bs = c->block_size;
    int32_t n_full = n / bs;
    uint64_t last = s->salt;
    struct kvc_node node = kvc_root;
    int32_t i = 0;
    for (; i < n_full && i < s->cap; i++) {
        const int32_t *t = tokens + (size_t)i * (size_t)bs;
        uint64_t xk = kvc_block_xkey(c, s, i);
        uint64_t k = kvc_block_key(c, last, t, xk);
        int32_t b = table_find(c, k, last, node, t, xk);
        if (b == KVC_NONE)
            break;
        kvc_ref(c, b);
        s->blocks[s->n_blocks++] = b;
        last = k;
        node.id = b;
        node.gen = c->gen[b];
    }
    /* Every full block of the n tokens that is not shared counts as missed
     * (blocks cut off by the sequence's capacity included), so per call
     * reused + missed == n / block_size. */
    c->reused += i;
    c->missed += n_full - i;
    s->n_pos = i * bs;
    s->n_hashed = i;
    s->last_key = last;
    s->chain_block = node.id;
    s->chain_gen = node.gen;
    return s->n_pos;
}

/* Blocks at indices [first, end) are written by a reserve to n_pos_total. */
static void write_range(const struct ifl_kvc *c, const struct ifl_kvc_seq *s, int32_t n_pos_total,
                        int32_t *first, int32_t *end)
{
    int32_t bs = c->block_size;
    *first = s->n_pos / bs;
    *end = (int32_t)(((int64_t)n_pos_total + bs - 1) / bs);
}

int32_t ifl_kvc_blocks_needed(const struct ifl_kvc *c, const struct ifl_kvc_seq *s,
                              int32_t n_pos_total)
{
    if (n_pos_total <= s->n_pos)
        return 0;
    int32_t first, end;
    write_range(c, s, n_pos_total, &first, &end);
    int32_t need = end > s->n_blocks ? end - s->n_blocks : 0;
    for (int32_t j = first; j < end && j < s->n_blocks; j++)
        if (c->ref[s->blocks[j]] > 1)
            need++;
    return need;
}

int ifl_kvc_reserve(struct ifl_kvc *c, struct ifl_kvc_seq *s, int32_t n_pos_total)
{
    if (n_pos_total <= s->n_pos)
        return 0;
    int32_t first, end;
    write_range(c, s, n_pos_total, &first, &end);
    if (end > s->cap)
        return IFL_EINVAL;
    if (ifl_kvc_blocks_needed(c, s, n_pos_total) > ifl_kvc_available(c))
        return IFL_EFULL;
    /* From here nothing can fail. */
    int32_t bs = c->block_size;
    for (int32_t j = first; j < end && j < s->n_blocks; j++) {
        int32_t b = s->blocks[j];
        if (c->ref[b] > 1) {
            int32_t nb = kvc_take(c);
            int32_t written = s->n_pos - j * bs;
            if (written > 0)
                c->copy(c->copy_user, nb, b, written);
            c->ref[b]--; /* stays >= 1: still used by the other holders */
            s->blocks[j] = nb;
        } else if (c->registered[b]) {
            /* Ours alone, but keyed: it is about to change, so it must
             * leave the table first (this happens after truncate). */
            kvc_unregister(c, b);
        }
    }
    while (s->n_blocks < end)
        s->blocks[s->n_blocks++] = kvc_take(c);
    return 0;
}

void ifl_kvc_commit(struct ifl_kvc *c, struct ifl_kvc_seq *s, const int32_t *tokens,
                    int32_t n_pos_total)
{
    int32_t bs = c->block_size;
    IFL_ASSERT(n_pos_total >= s->n_pos && (int64_t)n_pos_total <= (int64_t)s->n_blocks * bs);
    s->n_pos = n_pos_total;
    if (!c->caching)
        return;
    while ((int64_t)(s->n_hashed + 1) * bs <= n_pos_total) {
        int32_t b = s->blocks[s->n_hashed];
        const int32_t *t = tokens + (size_t)s->n_hashed * (size_t)bs;
        uint64_t xk = kvc_block_xkey(c, s, s->n_hashed);
        uint64_t k = kvc_block_key(c, s->last_key, t, xk);
        IFL_ASSERT(!c->registered[b]);
        c->key[b] = k;
        struct kvc_node parent = {s->chain_block, s->chain_gen};
        if (s->n_hashed == 0)
            parent = kvc_root;
        struct kvc_node self = kvc_nowhere;
        if (node_valid(c, parent)) {
            /* An identical block registered by another sequence that
             * computed the same prefix meanwhile: keep that one, this one
             * stays private, and our next block becomes its child. */
            int32_t twin = table_find(c, k, s->last_key, parent, t, xk);
            if (twin == KVC_NONE)
                kvc_register(c, b, s->last_key, parent, t, xk);
            self.id = twin == KVC_NONE ? b : twin;
            self.gen = c->gen[self.id];
        } /* else our prefix left the table: nothing below it can enter */
        c->canon[b] = self.id;
        c->canon_gen[b] = self.gen;
        s->chain_block = self.id;
        s->chain_gen = self.gen;
        s->last_key = k;
        s->n_hashed++;
    }
}

int ifl_kvc_fork(struct ifl_kvc *c, const struct ifl_kvc_seq *parent, struct ifl_kvc_seq *child)
{
    IFL_ASSERT(child->n_blocks == 0 && child->n_pos == 0);
    /* Only the blocks holding written positions: reserved-but-unwritten
     * blocks past them would be written by both, so the child gets its own
     * in its reserve. */
    int32_t n = (int32_t)(((int64_t)parent->n_pos + c->block_size - 1) / c->block_size);
    if (n > child->cap)
        return IFL_EINVAL;
    for (int32_t j = 0; j < n; j++) {
        if (parent->blocks[j] != KVC_NONE)
            kvc_ref(c, parent->blocks[j]);
        child->blocks[j] = parent->blocks[j];
    }
    child->n_blocks = n;
    child->n_dropped = parent->n_dropped < n ? parent->n_dropped : n;
    child->n_pos = parent->n_pos;
    child->n_hashed = parent->n_hashed;
    child->last_key = parent->last_key;
    child->salt = parent->salt;
    child->ext = parent->ext;
    child->n_ext = parent->n_ext;
    child->chain_block = parent->chain_block;
    child->chain_gen = parent->chain_gen;
    return 0;
}

void ifl_kvc_truncate(struct ifl_kvc *c, struct ifl_kvc_seq *s, int32_t n_pos)
{
    IFL_ASSERT(n_pos >= 0);
    if (n_pos > s->n_pos)
        n_pos = s->n_pos;
    int32_t bs = c->block_size;
    seq_drop_from(c, s, (n_pos + bs - 1) / bs);
    s->n_pos = n_pos;
    if (s->n_hashed > n_pos / bs) {
        s->n_hashed = n_pos / bs;
        /* (a block given back early ends the chain: nothing more registers) */
        int32_t last = s->n_hashed ? s->blocks[s->n_hashed - 1] : KVC_NONE;
        s->last_key = last != KVC_NONE ? c->key[last] : s->salt;
        s->chain_block = last != KVC_NONE ? c->canon[last] : KVC_NONE;
        s->chain_gen = last != KVC_NONE ? c->canon_gen[last] : 0;
    }
    /* The block cut in the middle will be written again: unregister it now
     * if it is ours alone; if shared, reserve() copies it. */
    if (n_pos % bs) {
        int32_t b = s->blocks[n_pos / bs];
        if (c->ref[b] == 1 && c->registered[b])
            kvc_unregister(c, b);
    }
}

int32_t ifl_kvc_drop_before(struct ifl_kvc *c, struct ifl_kvc_seq *s, int32_t pos)
{
    if (pos > s->n_pos)
        pos = s->n_pos;
    int32_t end = pos / c->block_size, n = 0;
    if (end > s->n_blocks)
        end = s->n_blocks;
    for (int32_t j = s->n_dropped; j < end; j++) {
        if (s->blocks[j] != KVC_NONE) {
            kvc_unref(c, s->blocks[j]);
            s->blocks[j] = KVC_NONE;
            n++;
        }
    }
    if (end > s->n_dropped)
        s->n_dropped = end;
    return n;
}
