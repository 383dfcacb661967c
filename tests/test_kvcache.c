/*
 * KV block manager. The K/V store is faked as an int array [n_blocks]
 * [block_size]: writing position p of a sequence stores a rolling hash of
 * its tokens [0, p] (like real K/V, it depends on the whole prefix), and the
 * copy callback copies those ints. Every test reads each live sequence back
 * through its block table and checks the pool's internal bookkeeping, which
 * this file reaches by including kvcache.c.
 */
#include "runtime/kvcache.c"

#include "core/rng.h"
#include "t.h"

/* ---- fake K/V store ------------------------------------------------------ */

struct fake {
    int32_t *kv; /* [n_blocks][block_size] */
    int32_t bs;
    int n_copies;
    int32_t last_dst, last_src, last_n;
};

static void fake_copy(void *user, int32_t dst, int32_t src, int32_t n_pos)
{
    struct fake *f = user;
    CHECK(n_pos > 0 && n_pos <= f->bs);
    CHECK(dst != src);
    memcpy(f->kv + (size_t)dst * f->bs, f->kv + (size_t)src * f->bs,
           sizeof(int32_t) * (size_t)n_pos);
    f->n_copies++;
    f->last_dst = dst;
    f->last_src = src;
    f->last_n = n_pos;
}

/* Giving memory back: the blocks must hold nothing anyone reads (free, not
 * cached); their contents turn to the never-written value, so a sequence
 * or a cached prefix that still needed them fails verify(). */
static struct ifl_kvc *release_pool; /* the pool whose blocks fake_release sees */
static int n_release_calls;

static void fake_release(void *user, int32_t first, int32_t n)
{
    struct fake *f = user;
    CHECK(n > 0);
    for (int32_t b = first; b < first + n; b++) {
        if (release_pool)
            CHECK_MSG(release_pool->ref[b] == 0 && !release_pool->registered[b],
                      "block %d given back with ref %d", b, release_pool->ref[b]);
        for (int32_t i = 0; i < f->bs; i++)
            f->kv[(size_t)b * f->bs + i] = -12345;
    }
    n_release_calls++;
}

/* A test sequence: the manager's view plus the tokens it should hold. */
struct tseq {
    struct ifl_kvc_seq s;
    int32_t tok[1024];
    uint32_t val[1024]; /* val[p] = rolling hash of tok[0..p] */
    int live;
};

static void set_tokens(struct tseq *t, int32_t from, const int32_t *tokens, int32_t n)
{
    for (int32_t i = 0; i < n; i++) {
        int32_t p = from + i;
        t->tok[p] = tokens[i];
        t->val[p] = (p ? t->val[p - 1] * 2654435761u : 17u) + (uint32_t)tokens[i] * 40503u + 1u;
    }
}

/* Writes positions [n_pos, n) into the fake store; the block written must
 * be this sequence's alone and not in the prefix table. */
static void fake_write(struct ifl_kvc *c, struct fake *f, struct tseq *t, int32_t n)
{
    int32_t bs = c->block_size;
    for (int32_t p = t->s.n_pos; p < n; p++) {
        int32_t b = t->s.blocks[p / bs];
        CHECK_MSG(c->ref[b] == 1, "write to block %d with ref %d", b, c->ref[b]);
        CHECK_MSG(!c->registered[b], "write to registered block %d", b);
        f->kv[(size_t)b * bs + p % bs] = (int32_t)t->val[p];
    }
}

static int verify(const struct ifl_kvc *c, const struct fake *f, const struct tseq *t)
{
    int32_t bs = c->block_size;
    for (int32_t p = 0; p < t->s.n_pos; p++) {
        int32_t b = t->s.blocks[p / bs];
        if (f->kv[(size_t)b * bs + p % bs] != (int32_t)t->val[p]) {
            T_FAIL_("position %d (block %d) holds the wrong K/V", p, b);
            return 0;
        }
    }
    return 1;
}

/* Reserves, writes and commits k more tokens. */
static int extend(struct ifl_kvc *c, struct fake *f, struct tseq *t, const int32_t *tokens,
                  int32_t k)
{
    int32_t n = t->s.n_pos + k;
    int rc = ifl_kvc_reserve(c, &t->s, n);
    if (rc)
        return rc;
    set_tokens(t, t->s.n_pos, tokens, k);
    fake_write(c, f, t, n);
    ifl_kvc_commit(c, &t->s, t->tok, n);
    return 0;
}

/* The engine's prompt path: match n - 1 tokens, compute the rest. Returns
 * the positions reused, or a negative status from reserve. */
static int32_t start(struct ifl_kvc *c, struct fake *f, struct tseq *t, int32_t cap,
                     const int32_t *prompt, int32_t n)
{
    CHECK_EQ(ifl_kvc_seq_init(&t->s, cap), 0);
    t->live = 1;
    set_tokens(t, 0, prompt, n);
    int32_t reused = ifl_kvc_match_prefix(c, &t->s, prompt, n - 1);
    CHECK(verify(c, f, t));
    int rc = ifl_kvc_reserve(c, &t->s, n);
    if (rc)
        return rc;
    fake_write(c, f, t, n);
    ifl_kvc_commit(c, &t->s, t->tok, n);
    return reused;
}

static void stop(struct ifl_kvc *c, struct tseq *t)
{
    ifl_kvc_seq_release(c, &t->s);
    t->live = 0;
}

/* Full bookkeeping check: reference counts match the live sequences, the
 * three states partition the pool, the table holds exactly the registered
 * blocks, and hashed sequences carry consistent keys. */
static void check_pool(const struct ifl_kvc *c, struct tseq *ts, int n_ts)
{
    int32_t n = c->n_blocks;
    int32_t *cnt = calloc((size_t)n, sizeof(*cnt));
    uint8_t *seen = calloc((size_t)n, 1);
    for (int i = 0; i < n_ts; i++) {
        if (!ts[i].live)
            continue;
        const struct ifl_kvc_seq *s = &ts[i].s;
        CHECK(s->n_blocks <= s->cap);
        CHECK((int64_t)s->n_pos <= (int64_t)s->n_blocks * c->block_size);
        for (int32_t j = 0; j < s->n_blocks; j++)
            cnt[s->blocks[j]]++;
        if (c->caching) {
            CHECK_EQ(s->n_hashed, s->n_pos / c->block_size);
            CHECK(s->last_key == (s->n_hashed ? c->key[s->blocks[s->n_hashed - 1]] : 0));
            if (s->n_hashed) {
                int32_t last = s->blocks[s->n_hashed - 1];
                CHECK_EQ(s->chain_block, c->canon[last]);
                CHECK_EQ(s->chain_gen, c->canon_gen[last]);
                /* a registered block of ours stands for itself */
                if (c->registered[last])
                    CHECK_EQ(s->chain_block, last);
            }
        } else {
            CHECK_EQ(s->n_hashed, 0);
        }
    }
    int32_t used = 0, regs = 0;
    for (int32_t b = 0; b < n; b++) {
        CHECK_MSG(cnt[b] == c->ref[b], "block %d: ref %d, held %d times", b, c->ref[b], cnt[b]);
        used += c->ref[b] > 0;
        regs += c->registered[b];
        if (!c->caching)
            CHECK(!c->registered[b]);
    }
    CHECK_EQ(used, c->n_used);
    CHECK_EQ(c->n_free + c->n_cached + c->n_used, n);
    int32_t nf = 0, ntf = 0, nt = 0;
    for (int32_t b = 0; b < n; b++) {
        nt += block_touched(c, b);
        if (!block_free(c, b))
            continue;
        CHECK(c->ref[b] == 0 && !c->registered[b] && !seen[b]);
        CHECK((b >> 6) >= c->free_hint);
        seen[b] = 1;
        nf++;
        ntf += block_touched(c, b);
    }
    CHECK_EQ(nf, c->n_free);
    CHECK_EQ(ntf, c->n_touched_free);
    CHECK_EQ(nt, c->n_touched);
    for (int32_t b = 0; b < n; b++) /* a block that holds data was touched */
        if (!block_free(c, b))
            CHECK(block_touched(c, b));
    int32_t k = 0, prev = KVC_NONE;
    for (int32_t b = c->lru_head; b != KVC_NONE && k <= n; b = c->lru_next[b], k++) {
        CHECK(c->ref[b] == 0 && c->registered[b] && !seen[b]);
        CHECK_EQ(c->lru_prev[b], prev);
        seen[b] = 1;
        prev = b;
    }
    CHECK_EQ(prev, c->lru_tail);
    CHECK_EQ(k, c->n_cached);
    int32_t in_table = 0;
    for (uint32_t i = 0; i <= c->table_mask; i++) {
        int32_t b = c->table[i];
        if (b == KVC_NONE)
            continue;
        in_table++;
        CHECK(c->registered[b]);
        /* reachable from its home bucket, and the only entry for its data */
        struct kvc_node parent = {c->pid[b], c->pgen[b]};
        CHECK_EQ(table_find(c, c->key[b], c->parent[b], parent, kvc_toks(c, b), c->xkey[b]), b);
    }
    CHECK_EQ(in_table, regs);
    free(cnt);
    free(seen);
}

static void stats_sum_ok(const struct ifl_kvc *c)
{
    struct ifl_kvc_stats st;
    ifl_kvc_get_stats(c, &st);
    CHECK_EQ(st.n_free + st.n_cached + st.n_used, st.n_blocks);
    CHECK_EQ(ifl_kvc_available(c), st.n_free + st.n_cached);
}

static struct ifl_kvc *make_pool(struct fake *f, int32_t n_blocks, int32_t bs, int caching)
{
    struct ifl_kvc_config cfg = {n_blocks, bs, caching, fake_copy, f, fake_release, f};
    struct ifl_kvc *c = NULL;
    memset(f, 0, sizeof(*f));
    f->bs = bs;
    f->kv = calloc((size_t)n_blocks * (size_t)bs, sizeof(int32_t));
    for (size_t i = 0; i < (size_t)n_blocks * (size_t)bs; i++)
        f->kv[i] = -12345; /* never a written value in practice */
    CHECK_EQ(ifl_kvc_create(&c, &cfg), 0);
    release_pool = c;
    return c;
}

static void free_pool(struct ifl_kvc *c, struct fake *f)
{
    ifl_kvc_free(c);
    free(f->kv);
    f->kv = NULL;
}

static void iota(int32_t *t, int32_t n, int32_t start_val)
{
    for (int32_t i = 0; i < n; i++)
        t[i] = start_val + i;
}

static struct tseq TS[40];

static void clear_ts(void)
{
    memset(TS, 0, sizeof(TS));
}

/* ---- tests --------------------------------------------------------------- */

static void test_create_args(void)
{
    struct fake f = {0};
    struct ifl_kvc *c = (struct ifl_kvc *)1;
    struct ifl_kvc_config bad = {0, 16, 1, fake_copy, &f, NULL, NULL};
    CHECK_EQ(ifl_kvc_create(&c, &bad), IFL_EINVAL);
    CHECK(c == NULL);
    bad.n_blocks = 4;
    bad.block_size = 0;
    CHECK_EQ(ifl_kvc_create(&c, &bad), IFL_EINVAL);
    bad.block_size = 16;
    bad.copy = NULL;
    CHECK_EQ(ifl_kvc_create(&c, &bad), IFL_EINVAL);
    ifl_kvc_free(NULL);
    c = make_pool(&f, 5, 16, 1);
    CHECK_EQ(ifl_kvc_block_size(c), 16);
    CHECK_EQ(ifl_kvc_available(c), 5);
    free_pool(c, &f);
}

static void test_accounting(void)
{
    struct fake f;
    struct ifl_kvc *c = make_pool(&f, 8, 4, 1);
    clear_ts();
    int32_t tok[64];
    iota(tok, 64, 100);

    CHECK_EQ(ifl_kvc_seq_init(&TS[0].s, 16), 0);
    TS[0].live = 1;
    CHECK_EQ(ifl_kvc_blocks_needed(c, &TS[0].s, 10), 3);
    CHECK_EQ(extend(c, &f, &TS[0], tok, 10), 0); /* 3 blocks, 2 full */
    struct ifl_kvc_stats st;
    ifl_kvc_get_stats(c, &st);
    CHECK_EQ(st.n_used, 3);
    CHECK_EQ(st.n_free, 5);
    CHECK_EQ(st.n_cached, 0);
    stats_sum_ok(c);

    /* 10 + 24 positions needs 6 more blocks than the 3 held; only 5 left */
    CHECK_EQ(ifl_kvc_blocks_needed(c, &TS[0].s, 34), 6);
    struct ifl_kvc_seq before = TS[0].s;
    int32_t blocks_before[16];
    memcpy(blocks_before, TS[0].s.blocks, sizeof(int32_t) * 3);
    CHECK_EQ(ifl_kvc_reserve(c, &TS[0].s, 34), IFL_EFULL);
    CHECK(memcmp(&before, &TS[0].s, sizeof(before)) == 0);
    CHECK(memcmp(blocks_before, TS[0].s.blocks, sizeof(int32_t) * 3) == 0);
    struct ifl_kvc_stats st2;
    ifl_kvc_get_stats(c, &st2);
    CHECK(memcmp(&st, &st2, sizeof(st)) == 0);
    /* exactly the capacity works */
    CHECK_EQ(extend(c, &f, &TS[0], tok + 10, 22), 0);
    ifl_kvc_get_stats(c, &st);
    CHECK_EQ(st.n_used, 8);
    CHECK_EQ(ifl_kvc_available(c), 0);
    CHECK_EQ(ifl_kvc_reserve(c, &TS[0].s, 33), IFL_EFULL);
    /* reserving what is already held needs nothing */
    CHECK_EQ(ifl_kvc_reserve(c, &TS[0].s, 32), 0);
    CHECK_EQ(ifl_kvc_reserve(c, &TS[0].s, 3), 0);
    CHECK(verify(c, &f, &TS[0]));
    check_pool(c, TS, 1);

    /* past the sequence's own capacity: EINVAL, unchanged */
    CHECK_EQ(ifl_kvc_seq_init(&TS[1].s, 1), 0);
    TS[1].live = 1;
    CHECK_EQ(ifl_kvc_reserve(c, &TS[1].s, 5), IFL_EINVAL);
    CHECK_EQ(TS[1].s.n_blocks, 0);

    /* release: the 8 full blocks are keyed, so they become cached */
    stop(c, &TS[0]);
    ifl_kvc_get_stats(c, &st);
    CHECK_EQ(st.n_cached, 8);
    CHECK_EQ(st.n_used, 0);
    CHECK_EQ(ifl_kvc_available(c), 8);
    check_pool(c, TS, 2);
    /* a fresh sequence evicts them all */
    CHECK_EQ(ifl_kvc_seq_init(&TS[0].s, 16), 0);
    TS[0].live = 1;
    CHECK_EQ(extend(c, &f, &TS[0], tok + 1, 30), 0);
    ifl_kvc_get_stats(c, &st);
    CHECK_EQ(st.evicted, 8);
    CHECK_EQ(st.n_used, 8);
    check_pool(c, TS, 2);
    /* reset keeps the array; 30 positions = 7 keyed blocks + 1 partial */
    ifl_kvc_seq_reset(c, &TS[0].s);
    CHECK_EQ(TS[0].s.n_blocks, 0);
    CHECK_EQ(TS[0].s.n_pos, 0);
    CHECK(TS[0].s.blocks != NULL);
    ifl_kvc_get_stats(c, &st);
    CHECK_EQ(st.n_cached, 7);
    CHECK_EQ(st.n_free, 1);
    stats_sum_ok(c);
    stop(c, &TS[0]);
    stop(c, &TS[1]);
    CHECK(TS[0].s.blocks == NULL);
    free_pool(c, &f);
}

static void test_prefix_reuse(void)
{
    struct fake f;
    struct ifl_kvc *c = make_pool(&f, 64, 16, 1);
    clear_ts();
    int32_t a[260], other[260];
    iota(a, 260, 1000);
    CHECK_EQ(start(c, &f, &TS[0], 32, a, 200), 0);
    struct ifl_kvc_stats st;
    ifl_kvc_get_stats(c, &st);
    CHECK_EQ(st.reused, 0);
    CHECK_EQ(st.missed, 12); /* 199 / 16 full blocks, none cached */
    CHECK_EQ(TS[0].s.n_hashed, 12);
    int32_t a_blocks[13];
    memcpy(a_blocks, TS[0].s.blocks, sizeof(a_blocks));
    for (int j = 0; j < 12; j++)
        CHECK(c->registered[a_blocks[j]]);
    CHECK(!c->registered[a_blocks[12]]);
    stop(c, &TS[0]);
    ifl_kvc_get_stats(c, &st);
    CHECK_EQ(st.n_cached, 12);
    CHECK_EQ(st.n_free, 52);

    /* B: the same 200 tokens then others */
    memcpy(other, a, sizeof(int32_t) * 200);
    iota(other + 200, 60, 5000);
    CHECK_EQ(start(c, &f, &TS[1], 32, other, 250), 192);
    for (int j = 0; j < 12; j++)
        CHECK_EQ(TS[1].s.blocks[j], a_blocks[j]);
    ifl_kvc_get_stats(c, &st);
    CHECK_EQ(st.reused, 12);
    CHECK_EQ(st.missed, 12 + 3); /* 249 / 16 = 15 looked at, 3 not there */
    CHECK_EQ(st.n_cached, 0);
    CHECK(verify(c, &f, &TS[1]));
    check_pool(c, TS, 2);

    /* C: the same prompt as A exactly: 12 blocks again (n - 1 = 199) */
    CHECK_EQ(start(c, &f, &TS[2], 32, a, 200), 192);
    CHECK_EQ(TS[2].s.blocks[11], a_blocks[11]);
    CHECK_EQ(c->ref[a_blocks[0]], 2);

    /* D: a different first token: nothing */
    memcpy(other, a, sizeof(int32_t) * 200);
    other[0] = 7;
    CHECK_EQ(start(c, &f, &TS[3], 32, other, 200), 0);
    ifl_kvc_get_stats(c, &st);
    CHECK_EQ(st.reused, 24);
    CHECK_EQ(st.missed, 15 + 12);
    for (int j = 0; j < 13; j++)
        CHECK(TS[3].s.blocks[j] != a_blocks[j % 12]);
    for (int i = 1; i < 4; i++)
        CHECK(verify(c, &f, &TS[i]));
    check_pool(c, TS, 4);

    /* shorter than one block: nothing to match, nothing missed */
    CHECK_EQ(start(c, &f, &TS[4], 32, a, 16), 0);
    ifl_kvc_get_stats(c, &st);
    CHECK_EQ(st.missed, 27);
    for (int i = 1; i < 5; i++)
        stop(c, &TS[i]);
    ifl_kvc_get_stats(c, &st);
    CHECK_EQ(st.n_used, 0);
    stats_sum_ok(c);
    check_pool(c, TS, 5);
    free_pool(c, &f);
}

/* Per-position ext keys (an image's rows): a block is shared only between
 * sequences whose tokens and ext keys agree; blocks without ext keys keep
 * the keys they always had. */
static int32_t start_ext(struct ifl_kvc *c, struct ifl_kvc_seq *s, const int32_t *tok,
                         const uint64_t *ext, int32_t n)
{
    CHECK_EQ(ifl_kvc_seq_init(s, 16), 0);
    ifl_kvc_seq_set_ext(s, ext, ext ? n : 0);
    int32_t reused = ifl_kvc_match_prefix(c, s, tok, n - 1);
    CHECK_EQ(ifl_kvc_reserve(c, s, n), 0);
    ifl_kvc_commit(c, s, tok, n);
    return reused;
}

static void test_ext_keys(void)
{
    struct fake f;
    struct ifl_kvc *c = make_pool(&f, 64, 16, 1);
    int32_t tok[65];
    uint64_t a[65] = {0}, b[65] = {0};
    iota(tok, 65, 100);
    for (int i = 20; i < 36; i++) { /* an image at 20..35, a and b differ in its first row */
        a[i] = 1000 + (uint64_t)i;
        b[i] = a[i] + (i == 20);
    }
    struct ifl_kvc_seq s[5];
    memset(s, 0, sizeof s);
    CHECK_EQ(start_ext(c, &s[0], tok, a, 65), 0);
    CHECK_EQ(start_ext(c, &s[1], tok, b, 65), 16);    /* the text block only */
    CHECK_EQ(start_ext(c, &s[2], tok, a, 65), 64);    /* everything */
    CHECK_EQ(start_ext(c, &s[3], tok, NULL, 65), 16); /* plain tokens: the text block */
    for (int j = 1; j < 4; j++)
        CHECK(s[2].blocks[j] == s[0].blocks[j] && s[1].blocks[j] != s[0].blocks[j]);
    /* ext keys past the first block's text: a sequence without them keeps
     * the plain key of its first block */
    CHECK_EQ(s[3].blocks[0], s[0].blocks[0]);
    /* a fork keeps them */
    CHECK_EQ(ifl_kvc_seq_init(&s[4], 16), 0);
    CHECK_EQ(ifl_kvc_fork(c, &s[2], &s[4]), 0);
    CHECK(s[4].ext == a && s[4].n_ext == 65);
    for (int i = 0; i < 5; i++)
        ifl_kvc_seq_release(c, &s[i]);
    stats_sum_ok(c);
    free_pool(c, &f);
}

static void test_shared_in_use(void)
{
    struct fake f;
    struct ifl_kvc *c = make_pool(&f, 64, 16, 1);
    clear_ts();
    int32_t a[400], b[400], more[200];
    iota(a, 400, 1);
    memcpy(b, a, sizeof(int32_t) * 200);
    iota(b + 200, 200, 9000);

    iota(more, 200, 20000);
    CHECK_EQ(start(c, &f, &TS[0], 32, a, 200), 0);   /* A stays live */
    CHECK_EQ(start(c, &f, &TS[1], 32, b, 230), 192); /* B shares 12 blocks */
    for (int j = 0; j < 12; j++) {
        CHECK_EQ(TS[0].s.blocks[j], TS[1].s.blocks[j]);
        CHECK_EQ(c->ref[TS[0].s.blocks[j]], 2);
    }
    CHECK(TS[0].s.blocks[12] != TS[1].s.blocks[12]);
    /* E: A's 200 tokens followed by exactly what A will write next. It
     * shares A's 12 full blocks, computes 192..240 itself and registers
     * blocks 12..14 first; when A fills the same blocks they stay private */
    int32_t e[300];
    memcpy(e, a, sizeof(int32_t) * 200);
    memcpy(e + 200, more, sizeof(int32_t) * 40);
    CHECK_EQ(start(c, &f, &TS[2], 32, e, 240), 192);
    CHECK_EQ(c->ref[TS[0].s.blocks[0]], 3);
    /* all three keep writing, token by token and in chunks */
    for (int step = 0; step < 40; step++) {
        CHECK_EQ(extend(c, &f, &TS[0], more + step, 1), 0);
        CHECK_EQ(extend(c, &f, &TS[1], more + 100 + step, step % 3 + 1), 0);
        CHECK_EQ(extend(c, &f, &TS[2], more + 150 + step, 1), 0);
        for (int i = 0; i < 3; i++)
            CHECK(verify(c, &f, &TS[i]));
        check_pool(c, TS, 3);
    }
    CHECK_EQ(f.n_copies, 0); /* nobody wrote into a shared block */
    for (int j = 12; j < 15; j++) {
        CHECK(TS[2].s.blocks[j] != TS[0].s.blocks[j]);
        CHECK(c->registered[TS[2].s.blocks[j]]);
        CHECK(!c->registered[TS[0].s.blocks[j]]);
        CHECK(c->key[TS[2].s.blocks[j]] == c->key[TS[0].s.blocks[j]]);
    }
    /* A's twin block 12 is freed, not cached, when A goes */
    int32_t twin = TS[0].s.blocks[12];
    stop(c, &TS[0]);
    CHECK_EQ(c->ref[twin], 0);
    CHECK(!c->registered[twin]);
    check_pool(c, TS, 3);
    /* a new request with A's whole history finds E's blocks */
    int32_t a2[240];
    memcpy(a2, e, sizeof(a2));
    CHECK_EQ(start(c, &f, &TS[3], 32, a2, 240), 224);
    CHECK_EQ(TS[3].s.blocks[12], TS[2].s.blocks[12]);
    CHECK(verify(c, &f, &TS[3]));
    for (int i = 1; i < 4; i++)
        stop(c, &TS[i]);
    struct ifl_kvc_stats st;
    ifl_kvc_get_stats(c, &st);
    CHECK_EQ(st.n_used, 0);
    stats_sum_ok(c);
    free_pool(c, &f);
}

static void test_fork(void)
{
    for (int parent_writes = 0; parent_writes < 2; parent_writes++) {
        struct fake f;
        struct ifl_kvc *c = make_pool(&f, 40, 16, 1);
        clear_ts();
        int32_t p[37], w[3][100];
        iota(p, 37, 50);
        CHECK_EQ(start(c, &f, &TS[0], 16, p, 37), 0);
        int32_t shared_tail = TS[0].s.blocks[2]; /* holds positions 32..36 */
        for (int i = 1; i <= 3; i++) {
            CHECK_EQ(ifl_kvc_seq_init(&TS[i].s, 16), 0);
            TS[i].live = 1;
            CHECK_EQ(ifl_kvc_fork(c, &TS[0].s, &TS[i].s), 0);
            memcpy(TS[i].tok, TS[0].tok, sizeof(TS[0].tok));
            memcpy(TS[i].val, TS[0].val, sizeof(TS[0].val));
            CHECK_EQ(TS[i].s.n_pos, 37);
            CHECK_EQ(TS[i].s.n_hashed, 2);
            CHECK(TS[i].s.last_key == TS[0].s.last_key);
            CHECK(verify(c, &f, &TS[i]));
            iota(w[i - 1], 100, 1000 * i);
        }
        CHECK_EQ(c->ref[shared_tail], 4);
        CHECK_EQ(c->ref[TS[0].s.blocks[0]], 4);
        if (!parent_writes)
            stop(c, &TS[0]);
        else
            CHECK_EQ(extend(c, &f, &TS[0], w[0] + 50, 1), 0); /* copies first */
        int expect = parent_writes;
        CHECK_EQ(f.n_copies, expect);
        for (int i = 1; i <= 3; i++) {
            /* the next token goes into the shared partial block: all but the
             * last holder copy it (5 positions), the last writes in place */
            CHECK_EQ(ifl_kvc_blocks_needed(c, &TS[i].s, 38), i < 3 ? 1 : 0);
            CHECK_EQ(extend(c, &f, &TS[i], w[i - 1], 1), 0);
            if (i < 3) {
                expect++;
                CHECK_EQ(f.last_src, shared_tail);
                CHECK_EQ(f.last_n, 5);
                CHECK(TS[i].s.blocks[2] != shared_tail);
            } else {
                CHECK_EQ(TS[i].s.blocks[2], shared_tail);
            }
            CHECK_EQ(f.n_copies, expect);
        }
        CHECK_EQ(c->ref[shared_tail], 1);
        /* full blocks stay shared; further writes copy nothing */
        for (int step = 1; step < 60; step++)
            for (int i = 1; i <= 3; i++)
                CHECK_EQ(extend(c, &f, &TS[i], w[i - 1] + step, 1), 0);
        CHECK_EQ(f.n_copies, expect);
        CHECK_EQ(c->ref[TS[1].s.blocks[0]], parent_writes ? 4 : 3);
        for (int i = 0; i <= 3; i++)
            if (TS[i].live)
                CHECK(verify(c, &f, &TS[i]));
        check_pool(c, TS, 4);
        for (int i = 0; i <= 3; i++)
            if (TS[i].live)
                stop(c, &TS[i]);
        struct ifl_kvc_stats st;
        ifl_kvc_get_stats(c, &st);
        CHECK_EQ(st.n_used, 0);
        CHECK_EQ(st.n_free + st.n_cached, 40);
        check_pool(c, TS, 4);
        free_pool(c, &f);
    }
}

static void test_fork_reserved_tail(void)
{
    /* The parent reserved past its committed end before forking: the child
     * does not share those unwritten blocks. */
    struct fake f;
    struct ifl_kvc *c = make_pool(&f, 16, 4, 1);
    clear_ts();
    int32_t t[40];
    iota(t, 40, 3);
    CHECK_EQ(start(c, &f, &TS[0], 10, t, 6), 0);
    CHECK_EQ(ifl_kvc_reserve(c, &TS[0].s, 13), 0); /* blocks 0..3 */
    CHECK_EQ(TS[0].s.n_blocks, 4);
    CHECK_EQ(ifl_kvc_seq_init(&TS[1].s, 10), 0);
    TS[1].live = 1;
    CHECK_EQ(ifl_kvc_fork(c, &TS[0].s, &TS[1].s), 0);
    memcpy(TS[1].tok, TS[0].tok, sizeof(TS[0].tok));
    memcpy(TS[1].val, TS[0].val, sizeof(TS[0].val));
    CHECK_EQ(TS[1].s.n_blocks, 2);
    check_pool(c, TS, 2);
    /* the parent writes into its reserved blocks after all, reserving
     * again after the fork as the engine must */
    CHECK_EQ(ifl_kvc_reserve(c, &TS[0].s, 13), 0);
    set_tokens(&TS[0], 6, t + 20, 7);
    fake_write(c, &f, &TS[0], 13);
    ifl_kvc_commit(c, &TS[0].s, TS[0].tok, 13);
    CHECK_EQ(f.n_copies, 1); /* block 1 (4..5 written) was shared */
    CHECK_EQ(extend(c, &f, &TS[1], t + 30, 7), 0);
    CHECK(verify(c, &f, &TS[0]));
    CHECK(verify(c, &f, &TS[1]));
    /* a child whose capacity is too small is refused */
    CHECK_EQ(ifl_kvc_seq_init(&TS[2].s, 1), 0);
    TS[2].live = 1;
    CHECK_EQ(ifl_kvc_fork(c, &TS[0].s, &TS[2].s), IFL_EINVAL);
    check_pool(c, TS, 3);
    for (int i = 0; i < 3; i++)
        stop(c, &TS[i]);
    check_pool(c, TS, 3);
    free_pool(c, &f);
}

static void test_lru(void)
{
    struct fake f;
    struct ifl_kvc *c = make_pool(&f, 12, 4, 1);
    clear_ts();
    int32_t s[3][17];
    int32_t ids[3][4];
    for (int i = 0; i < 3; i++) {
        iota(s[i], 17, 100 * (i + 1));
        /* 17 tokens: 4 full registered blocks + 1 partial. Commit only 16
         * so the pool holds exactly 12 */
        CHECK_EQ(start(c, &f, &TS[i], 8, s[i], 16), 0);
        memcpy(ids[i], TS[i].s.blocks, sizeof(ids[i]));
    }
    for (int i = 0; i < 3; i++)
        stop(c, &TS[i]);
    struct ifl_kvc_stats st;
    ifl_kvc_get_stats(c, &st);
    CHECK_EQ(st.n_cached, 12);
    CHECK_EQ(st.n_free, 0);
    check_pool(c, TS, 3);

    /* touch sequence 0's first block: match it, release it */
    int32_t touch[8];
    memcpy(touch, s[0], sizeof(int32_t) * 4);
    iota(touch + 4, 4, 7777);
    CHECK_EQ(ifl_kvc_seq_init(&TS[3].s, 8), 0);
    TS[3].live = 1;
    CHECK_EQ(ifl_kvc_match_prefix(c, &TS[3].s, touch, 7), 4);
    CHECK_EQ(TS[3].s.blocks[0], ids[0][0]);
    stop(c, &TS[3]);

    /* 4 new blocks: least recently used are seq 0's blocks 3, 2, 1 (its
     * release pushed tails first), then seq 1's block 3 */
    int32_t fresh[16];
    iota(fresh, 16, 55555);
    CHECK_EQ(start(c, &f, &TS[4], 8, fresh, 16), 0);
    ifl_kvc_get_stats(c, &st);
    CHECK_EQ(st.evicted, 4);
    CHECK_EQ(st.n_cached, 8);
    CHECK(c->registered[ids[0][0]]);
    for (int j = 1; j < 4; j++)
        CHECK_EQ(c->ref[ids[0][j]], 1); /* now sequence 4's */
    CHECK_EQ(c->ref[ids[1][3]], 1);
    check_pool(c, TS, 5);

    /* seq 0's prompt: only its touched first block is still there; seq
     * 1's: 3 of 4; seq 2's: all 4 */
    int32_t expect[3] = {4, 12, 16};
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(ifl_kvc_seq_init(&TS[5 + i].s, 8), 0);
        TS[5 + i].live = 1;
        set_tokens(&TS[5 + i], 0, s[i], 17);
        CHECK_EQ(ifl_kvc_match_prefix(c, &TS[5 + i].s, s[i], 16), expect[i]);
        CHECK(verify(c, &f, &TS[5 + i]));
    }
    CHECK_EQ(TS[5].s.blocks[0], ids[0][0]);
    CHECK_EQ(ifl_kvc_available(c), 0);
    CHECK_EQ(ifl_kvc_reserve(c, &TS[7].s, 17), IFL_EFULL);
    check_pool(c, TS, 8);
    for (int i = 4; i < 8; i++)
        stop(c, &TS[i]);
    stats_sum_ok(c);
    free_pool(c, &f);
}

static void test_truncate(void)
{
    struct fake f;
    struct ifl_kvc *c = make_pool(&f, 32, 16, 1);
    clear_ts();
    int32_t a[64], x[64];
    iota(a, 64, 1);
    iota(x, 64, 700);

    /* shared registered block cut in the middle: copied, never modified */
    CHECK_EQ(start(c, &f, &TS[0], 8, a, 40), 0);
    CHECK_EQ(start(c, &f, &TS[1], 8, a, 33), 32); /* B relies on blocks 0, 1 */
    int32_t b1 = TS[0].s.blocks[1];
    int32_t saved[16];
    memcpy(saved, f.kv + b1 * 16, sizeof(saved));
    uint64_t key1 = c->key[b1];
    ifl_kvc_truncate(c, &TS[0].s, 20);
    CHECK_EQ(TS[0].s.n_pos, 20);
    CHECK_EQ(TS[0].s.n_blocks, 2);
    CHECK_EQ(TS[0].s.n_hashed, 1);
    CHECK(TS[0].s.last_key == c->key[TS[0].s.blocks[0]]);
    CHECK(c->registered[b1]); /* B holds it too */
    check_pool(c, TS, 2);
    CHECK_EQ(extend(c, &f, &TS[0], x, 30), 0);
    CHECK_EQ(f.n_copies, 1);
    CHECK_EQ(f.last_src, b1);
    CHECK_EQ(f.last_n, 4);
    CHECK(memcmp(saved, f.kv + b1 * 16, sizeof(saved)) == 0);
    CHECK(c->key[b1] == key1 && c->registered[b1]);
    CHECK(verify(c, &f, &TS[0]));
    CHECK(verify(c, &f, &TS[1]));
    check_pool(c, TS, 2);

    /* a registered block held by this sequence alone: unregistered at the
     * cut; the old prefix then matches one block only */
    stop(c, &TS[0]);
    stop(c, &TS[1]);
    int32_t y[64];
    iota(y, 64, 3000);
    CHECK_EQ(start(c, &f, &TS[2], 8, y, 32), 0);
    int32_t y1 = TS[2].s.blocks[1];
    CHECK(c->registered[y1]);
    ifl_kvc_truncate(c, &TS[2].s, 24);
    CHECK(!c->registered[y1]);
    CHECK_EQ(TS[3].live, 0);
    CHECK_EQ(start(c, &f, &TS[3], 8, y, 33), 16);
    stop(c, &TS[3]);
    check_pool(c, TS, 4);
    /* write different tokens: block 1 registered again, with its new key */
    CHECK_EQ(extend(c, &f, &TS[2], x, 8), 0);
    CHECK(c->registered[y1]);
    int32_t y2[33];
    memcpy(y2, y, sizeof(int32_t) * 24);
    memcpy(y2 + 24, x, sizeof(int32_t) * 9);
    CHECK_EQ(start(c, &f, &TS[3], 8, y2, 33), 32);
    CHECK_EQ(TS[3].s.blocks[1], y1);
    CHECK(verify(c, &f, &TS[3]));
    stop(c, &TS[3]);
    stop(c, &TS[2]);

    /* cut while shared, then the other holder leaves: reserve finds a
     * registered block with ref 1 at n_pos and unregisters it in place */
    CHECK_EQ(start(c, &f, &TS[4], 8, a, 40), 32);
    CHECK_EQ(start(c, &f, &TS[5], 8, a, 33), 32);
    int32_t s1 = TS[4].s.blocks[1];
    ifl_kvc_truncate(c, &TS[4].s, 28);
    CHECK(c->registered[s1]);
    stop(c, &TS[5]);
    CHECK_EQ(c->ref[s1], 1);
    int copies = f.n_copies;
    CHECK_EQ(ifl_kvc_blocks_needed(c, &TS[4].s, 29), 0);
    CHECK_EQ(extend(c, &f, &TS[4], x + 5, 1), 0);
    CHECK_EQ(f.n_copies, copies);
    CHECK_EQ(TS[4].s.blocks[1], s1);
    CHECK(!c->registered[s1]);
    CHECK(verify(c, &f, &TS[4]));
    check_pool(c, TS, 6);

    /* at a block boundary and to zero */
    ifl_kvc_truncate(c, &TS[4].s, 16);
    CHECK_EQ(TS[4].s.n_blocks, 1);
    CHECK_EQ(TS[4].s.n_hashed, 1);
    ifl_kvc_truncate(c, &TS[4].s, 0);
    CHECK_EQ(TS[4].s.n_blocks, 0);
    CHECK(TS[4].s.last_key == 0);
    CHECK_EQ(extend(c, &f, &TS[4], x, 20), 0);
    CHECK(verify(c, &f, &TS[4]));
    check_pool(c, TS, 6);
    stop(c, &TS[4]);
    struct ifl_kvc_stats st;
    ifl_kvc_get_stats(c, &st);
    CHECK_EQ(st.n_used, 0);
    stats_sum_ok(c);
    free_pool(c, &f);
}

static void test_disabled(void)
{
    struct fake f;
    struct ifl_kvc *c = make_pool(&f, 16, 4, 0);
    clear_ts();
    int32_t t[40];
    iota(t, 40, 9);
    CHECK_EQ(start(c, &f, &TS[0], 10, t, 30), 0);
    CHECK_EQ(start(c, &f, &TS[1], 10, t, 30), 0);
    CHECK_EQ(TS[1].s.n_hashed, 0);
    check_pool(c, TS, 2);
    stop(c, &TS[0]);
    stop(c, &TS[1]);
    struct ifl_kvc_stats st;
    ifl_kvc_get_stats(c, &st);
    CHECK_EQ(st.n_cached, 0);
    CHECK_EQ(st.n_free, 16);
    CHECK_EQ(st.reused, 0);
    CHECK_EQ(st.missed, 0);
    free_pool(c, &f);
}

/* ---- collisions ---------------------------------------------------------- */

/* Every block at the root gets the same key (only the first token counts
 * in deeper blocks' parent), so keys collide completely at depth 0. */
static uint64_t hash_root_collide(uint64_t parent, const int32_t *tokens, int32_t n)
{
    if (parent == 0)
        return 42;
    return kvc_hash_default(parent, tokens, n);
}

/* Different keys, same bucket: low 16 bits all ones, so every block's home
 * is the table's last slot and probe runs wrap around. */
static uint64_t hash_same_bucket(uint64_t parent, const int32_t *tokens, int32_t n)
{
    return kvc_hash_default(parent, tokens, n) | 0xffffull;
}

static void test_collisions(void)
{
    struct fake f;
    kvc_hash = hash_root_collide;
    struct ifl_kvc *c = make_pool(&f, 16, 4, 1);
    clear_ts();
    int32_t a[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    int32_t b[9] = {1, 2, 3, 5, 5, 6, 7, 8, 9}; /* same key for block 0 */
    CHECK_EQ(start(c, &f, &TS[0], 4, a, 9), 0);
    stop(c, &TS[0]);
    CHECK_EQ(start(c, &f, &TS[1], 4, b, 9), 0); /* tokens differ: no share */
    CHECK(verify(c, &f, &TS[1]));
    /* both registered under key 42, each found by its own tokens */
    CHECK_EQ(start(c, &f, &TS[2], 4, a, 9), 8);
    CHECK(verify(c, &f, &TS[2]));
    CHECK(TS[1].s.blocks[0] != TS[2].s.blocks[0]);
    check_pool(c, TS, 3);
    for (int i = 1; i < 3; i++)
        stop(c, &TS[i]);
    check_pool(c, TS, 3);

    /* A's chain [x][y] loses its root block x while y stays cached; then
     * C registers [w] under the same root key. B = [w][y] has the same key
     * and parent key for y as A's cached y, but not the same parent: it
     * must not get A's y (its K/V was computed after x, not w). */
    int32_t xa[9] = {10, 11, 12, 13, 20, 21, 22, 23, 0};
    int32_t wb[9] = {10, 99, 98, 97, 20, 21, 22, 23, 0};
    CHECK_EQ(start(c, &f, &TS[0], 4, xa, 8), 0);
    int32_t y_block = TS[0].s.blocks[1];
    CHECK_EQ(ifl_kvc_seq_init(&TS[1].s, 4), 0);
    TS[1].live = 1;
    CHECK_EQ(ifl_kvc_fork(c, &TS[0].s, &TS[1].s), 0);
    memcpy(TS[1].tok, TS[0].tok, sizeof(TS[0].tok));
    memcpy(TS[1].val, TS[0].val, sizeof(TS[0].val));
    stop(c, &TS[0]);
    ifl_kvc_truncate(c, &TS[1].s, 2); /* x: ours alone, cut: unregistered */
    CHECK(!c->registered[TS[1].s.blocks[0]]);
    CHECK(c->registered[y_block] && c->ref[y_block] == 0);
    CHECK_EQ(start(c, &f, &TS[2], 4, wb, 5), 0); /* registers [w] */
    CHECK_EQ(start(c, &f, &TS[3], 4, wb, 9), 4); /* [w] yes, y no */
    CHECK(TS[3].s.blocks[1] != y_block);
    CHECK(verify(c, &f, &TS[3]));
    check_pool(c, TS, 4);
    for (int i = 1; i < 4; i++)
        stop(c, &TS[i]);
    free_pool(c, &f);

    kvc_hash = hash_same_bucket;
    c = make_pool(&f, 26, 4, 1);
    clear_ts();
    int32_t p[8][12];
    for (int i = 0; i < 8; i++) {
        iota(p[i], 12, 100 * i);
        CHECK_EQ(start(c, &f, &TS[i], 4, p[i], 12), 0);
        stop(c, &TS[i]);
    }
    check_pool(c, TS, 8);
    /* 24 registered blocks all homed at one slot; evict some from the
     * middle of the run and every survivor must stay findable */
    int32_t q[12];
    iota(q, 12, 77777);
    CHECK_EQ(start(c, &f, &TS[8], 4, q, 12), 0);
    check_pool(c, TS, 9);
    for (int i = 0; i < 8; i++) {
        int32_t got = start(c, &f, &TS[i], 4, p[i], 12);
        CHECK(got >= 0);
        CHECK(verify(c, &f, &TS[i]));
        check_pool(c, TS, 9);
        stop(c, &TS[i]);
    }
    struct ifl_kvc_stats st;
    ifl_kvc_get_stats(c, &st);
    CHECK(st.reused > 0);
    stop(c, &TS[8]);
    free_pool(c, &f);
    kvc_hash = kvc_hash_default;
}

/* ---- random stress ------------------------------------------------------- */

struct snap {
    struct ifl_kvc_stats st;
    struct ifl_kvc_seq s;
    int32_t blocks[64];
    int32_t ref[512];
    uint8_t reg[512];
};

static void take_snap(const struct ifl_kvc *c, const struct tseq *t, struct snap *sn)
{
    memset(sn, 0, sizeof(*sn));
    IFL_ASSERT(c->n_blocks <= 512 && t->s.n_blocks <= 64);
    ifl_kvc_get_stats(c, &sn->st);
    sn->s = t->s;
    memcpy(sn->blocks, t->s.blocks, sizeof(int32_t) * (size_t)t->s.n_blocks);
    memcpy(sn->ref, c->ref, sizeof(int32_t) * (size_t)c->n_blocks);
    memcpy(sn->reg, c->registered, (size_t)c->n_blocks);
}

static uint32_t rnd(struct ifl_rng *r, uint32_t n)
{
    return (uint32_t)(ifl_rng_next(r) % n);
}

static void stress(uint64_t seed, int32_t n_blocks, int32_t bs, int caching, int32_t vocab,
                   int steps, int expect_full)
{
    enum { N_SEQ = 32, N_BASE = 4 };
    struct fake f;
    struct ifl_kvc *c = make_pool(&f, n_blocks, bs, caching);
    clear_ts();
    struct ifl_rng r;
    ifl_rng_seed(&r, seed);
    int32_t cap = 1000 / bs < 24 ? 1000 / bs : 24;
    int32_t max_pos = cap * bs;
    static int32_t base[N_BASE][1024];
    for (int i = 0; i < N_BASE; i++)
        for (int j = 0; j < max_pos; j++)
            base[i][j] = (int32_t)rnd(&r, (uint32_t)vocab);
    int32_t buf[1024];
    static struct snap sn;
    int n_full = 0, n_ok = 0, failed_before = t_cur_failed_;
    for (int step = 0; step < steps && !(t_cur_failed_ && !failed_before); step++) {
        int i = (int)rnd(&r, N_SEQ);
        struct tseq *t = &TS[i];
        uint32_t op = rnd(&r, 100);
        if (!t->live) {
            if (op < 70) { /* a new request */
                int32_t n = 1 + (int32_t)rnd(&r, (uint32_t)(max_pos / 2));
                int32_t shared = rnd(&r, 4) ? (int32_t)rnd(&r, (uint32_t)n + 1) : 0;
                const int32_t *b = base[rnd(&r, N_BASE)];
                for (int32_t j = 0; j < n; j++)
                    buf[j] = j < shared ? b[j] : (int32_t)rnd(&r, (uint32_t)vocab);
                int32_t got = start(c, &f, t, cap, buf, n);
                if (got == IFL_EFULL) {
                    n_full++;
                    if (rnd(&r, 2))
                        stop(c, t);
                } else {
                    CHECK(got >= 0 && got % bs == 0 && got <= n - 1);
                    n_ok++;
                }
            } else { /* fork of a random live sequence */
                int k = (int)rnd(&r, N_SEQ);
                if (!TS[k].live || k == i)
                    continue;
                CHECK_EQ(ifl_kvc_seq_init(&t->s, cap), 0);
                t->live = 1;
                CHECK_EQ(ifl_kvc_fork(c, &TS[k].s, &t->s), 0);
                memcpy(t->tok, TS[k].tok, sizeof(int32_t) * (size_t)max_pos);
                memcpy(t->val, TS[k].val, sizeof(uint32_t) * (size_t)max_pos);
            }
        } else if (op < 50) { /* decode or a chunk */
            int32_t k = 1 + (int32_t)(rnd(&r, 3) ? rnd(&r, 3) : rnd(&r, (uint32_t)(3 * bs)));
            if (t->s.n_pos + k > max_pos)
                k = max_pos - t->s.n_pos;
            if (k <= 0)
                continue;
            for (int32_t j = 0; j < k; j++)
                buf[j] = (int32_t)rnd(&r, (uint32_t)vocab);
            int32_t need = ifl_kvc_blocks_needed(c, &t->s, t->s.n_pos + k);
            take_snap(c, t, &sn);
            int32_t n = t->s.n_pos + k;
            int rc = ifl_kvc_reserve(c, &t->s, n);
            CHECK_EQ(rc != 0, need > sn.st.n_free + sn.st.n_cached);
            if (rc) {
                CHECK_EQ(rc, IFL_EFULL);
                struct snap now;
                take_snap(c, t, &now);
                CHECK(memcmp(&now, &sn, sizeof(now)) == 0);
                n_full++;
                continue;
            }
            struct ifl_kvc_stats st;
            ifl_kvc_get_stats(c, &st);
            CHECK_EQ(st.n_free + st.n_cached, sn.st.n_free + sn.st.n_cached - need);
            /* sometimes commit less than reserved */
            int32_t m = rnd(&r, 4) ? n : t->s.n_pos + (int32_t)rnd(&r, (uint32_t)k + 1);
            set_tokens(t, t->s.n_pos, buf, m - t->s.n_pos);
            fake_write(c, &f, t, m);
            ifl_kvc_commit(c, &t->s, t->tok, m);
            n_ok++;
        } else if (op < 53) { /* time passes; blocks free long enough go back */
            ifl_kvc_set_clock(c, step);
            int64_t idle = rnd(&r, 40);
            int64_t next = ifl_kvc_next_release(c, idle);
            int32_t given = ifl_kvc_release_idle(c, idle);
            CHECK_EQ(given > 0, next <= step);
        } else if (op < 65) {
            ifl_kvc_truncate(c, &t->s, (int32_t)rnd(&r, (uint32_t)t->s.n_pos + 1));
        } else if (op < 72) {
            ifl_kvc_seq_reset(c, &t->s);
        } else if (op < 85) {
            stop(c, t);
        } else { /* fork into a random free slot */
            int k = (int)rnd(&r, N_SEQ);
            if (TS[k].live)
                continue;
            CHECK_EQ(ifl_kvc_seq_init(&TS[k].s, cap), 0);
            TS[k].live = 1;
            CHECK_EQ(ifl_kvc_fork(c, &t->s, &TS[k].s), 0);
            memcpy(TS[k].tok, t->tok, sizeof(int32_t) * (size_t)max_pos);
            memcpy(TS[k].val, t->val, sizeof(uint32_t) * (size_t)max_pos);
        }
        for (int k = 0; k < N_SEQ; k++)
            if (TS[k].live && !verify(c, &f, &TS[k]))
                T_FAIL_("seed %llu step %d: sequence %d corrupted", (unsigned long long)seed, step,
                        k);
        check_pool(c, TS, N_SEQ);
    }
    CHECK(n_ok > steps / 4);
    CHECK(!expect_full || n_full > 0); /* the pool was under pressure */
    for (int k = 0; k < N_SEQ; k++)
        if (TS[k].live)
            stop(c, &TS[k]);
    struct ifl_kvc_stats st;
    ifl_kvc_get_stats(c, &st);
    CHECK_EQ(st.n_used, 0);
    CHECK_EQ(st.n_free + st.n_cached, n_blocks);
    if (caching)
        CHECK(st.reused > 0 && st.evicted > 0);
    CHECK(st.released > 0); /* blocks were given back along the way */
    if (getenv("KVC_VERBOSE"))
        fprintf(stderr,
                "  seed %llu: %d ok, %d full, reused %lld missed %lld evicted %lld copies %d\n",
                (unsigned long long)seed, n_ok, n_full, (long long)st.reused, (long long)st.missed,
                (long long)st.evicted, f.n_copies);
    check_pool(c, TS, N_SEQ);
    free_pool(c, &f);
}

/* Free blocks are handed out lowest id first, whatever order they were
 * freed in, and blocks that stay free are given back in whole runs once
 * they have been free for the time asked, never cached ones. */
static void test_low_first_and_release(void)
{
    struct fake f;
    struct ifl_kvc *c = make_pool(&f, 100, 4, 1);
    clear_ts();
    int32_t tok[64];
    iota(tok, 64, 7);
    for (int i = 0; i < 4; i++) { /* 0-1, 2-3, 4-5, 6-7; 6 positions each */
        CHECK_EQ(ifl_kvc_seq_init(&TS[i].s, 16), 0);
        TS[i].live = 1;
        CHECK_EQ(extend(c, &f, &TS[i], tok + 10 * i, 6), 0);
        CHECK_EQ(TS[i].s.blocks[0], 2 * i);
        CHECK_EQ(TS[i].s.blocks[1], 2 * i + 1);
    }
    struct ifl_kvc_stats st;
    ifl_kvc_get_stats(c, &st);
    CHECK_EQ(st.n_touched, 8);
    CHECK_EQ(st.peak_used, 8);
    CHECK_EQ(ifl_kvc_touched_end(c), 8);
    ifl_kvc_set_clock(c, 1000);
    stop(c, &TS[0]); /* block 0 is full: cached; 1 free */
    ifl_kvc_set_clock(c, 2000);
    stop(c, &TS[2]); /* 4 cached, 5 free */
    /* a new sequence gets 1 and 5 (lowest free first; a stack gave 5, 1) */
    CHECK_EQ(ifl_kvc_seq_init(&TS[0].s, 16), 0);
    TS[0].live = 1;
    CHECK_EQ(extend(c, &f, &TS[0], tok + 40, 7), 0);
    CHECK_EQ(TS[0].s.blocks[0], 1);
    CHECK_EQ(TS[0].s.blocks[1], 5);
    CHECK_EQ(ifl_kvc_next_release(c, 10), INT64_MAX); /* nothing touched is free */
    ifl_kvc_set_clock(c, 3000);
    stop(c, &TS[3]); /* 6 cached, 7 free at 3000 */
    stop(c, &TS[0]); /* 1 cached, 5 free at 3000 */
    ifl_kvc_get_stats(c, &st);
    CHECK_EQ(st.n_cached, 4);
    CHECK_EQ(st.n_touched, 8);
    CHECK_EQ(ifl_kvc_next_release(c, 500), 3500);
    n_release_calls = 0;
    ifl_kvc_set_clock(c, 3499);
    CHECK_EQ(ifl_kvc_release_idle(c, 500), 0);
    CHECK_EQ(n_release_calls, 0);
    ifl_kvc_set_clock(c, 3500);
    /* runs: [5, 6) and [7, 100) (8..99 never touched ride along) */
    CHECK_EQ(ifl_kvc_release_idle(c, 500), 2);
    CHECK_EQ(n_release_calls, 2);
    ifl_kvc_get_stats(c, &st);
    CHECK_EQ(st.n_touched, 6);           /* 2, 3 used; 0, 1, 4, 6 cached */
    CHECK_EQ(ifl_kvc_touched_end(c), 7); /* 7 went back: no memory at or above it */
    CHECK_EQ(st.released, 2);
    CHECK_EQ(ifl_kvc_next_release(c, 500), INT64_MAX);
    CHECK_EQ(ifl_kvc_release_idle(c, 0), 0); /* nothing left to give */
    CHECK(verify(c, &f, &TS[1]));
    check_pool(c, TS, 4);
    /* the cached prefixes survived: a request for TS[0]'s first prompt
     * shares block 0 */
    CHECK_EQ(start(c, &f, &TS[0], 16, tok, 6), 4);
    CHECK_EQ(TS[0].s.blocks[0], 0);
    CHECK(verify(c, &f, &TS[0]));
    for (int i = 0; i < 4; i++)
        if (TS[i].live)
            stop(c, &TS[i]);
    check_pool(c, TS, 4);
    free_pool(c, &f);
}

static void test_stress(void)
{
    stress(1, 64, 4, 1, 3, 24000, 1);
    stress(2, 96, 4, 1, 2, 24000, 1);
    stress(3, 48, 16, 1, 2, 16000, 1);
    stress(4, 40, 3, 1, 4, 24000, 1);
    stress(5, 64, 4, 0, 3, 16000, 1);
    stress(6, 400, 8, 1, 3, 16000, 0);
    kvc_hash = hash_same_bucket;
    stress(7, 64, 4, 1, 3, 16000, 1);
    kvc_hash = hash_root_collide;
    stress(8, 64, 4, 1, 2, 16000, 1);
    kvc_hash = kvc_hash_default;
}

int main(void)
{
    T_RUN(test_create_args);
    T_RUN(test_accounting);
    T_RUN(test_prefix_reuse);
    T_RUN(test_ext_keys);
    T_RUN(test_shared_in_use);
    T_RUN(test_fork);
    T_RUN(test_fork_reserved_tail);
    T_RUN(test_lru);
    T_RUN(test_truncate);
    T_RUN(test_disabled);
    T_RUN(test_collisions);
    T_RUN(test_low_first_and_release);
    T_RUN(test_stress);
    return t_done();
}
