/*
 * The KV pool costs memory only for what it holds: an executor with room
 * for 256 full contexts of the llama-f16 reference model (128 MiB of F16
 * keys and values) starts small, its resident set grows with the blocks
 * its requests use, and once they have been free for kv_release_ms the
 * memory goes back, cached prefixes excepted. Outputs do not change when
 * blocks come back from the system as zeros. Also: the default pool's
 * memory bound, and the /proc and cgroup reader on a fake tree.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/sysmem.h"
#include "inflight.h"
#include "model/kv_store.h"
#include "t.h"

static char model_path[600];

/* A sanitizer's shadow memory grows the process's RSS with every page the
 * program touches (ASan 1/8, TSan 2-4x): the checks of the process's RSS
 * are only meaningful without one. The KV store's own resident figures
 * (mincore over its map) hold either way and are checked in both. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RSS_CHECKS 0
#else
#define RSS_CHECKS 1
#endif
static const int32_t ONCE[] = {1, 403, 407, 261, 378};

/* VmRSS or VmHWM of this process, in bytes */
static int64_t status_kb(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long long kb = -1;
    size_t n = strlen(key);
    while (f && fgets(line, sizeof(line), f))
        if (!strncmp(line, key, n) && line[n] == ':')
            sscanf(line + n + 1, "%lld", &kb);
    if (f)
        fclose(f);
    return kb < 0 ? -1 : (int64_t)kb * 1024;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
    nanosleep(&ts, NULL);
}

static ifl_executor *open_big(int caching, int32_t release_ms)
{
    struct ifl_executor_config c;
    ifl_executor_config_default(&c);
    c.max_batch_size = 256;
    c.n_ctx = 512;
    c.n_threads = 1; /* no spinning barrier on a loaded machine */
    c.kv_type = IFL_KV_F16;
    c.enable_prefix_caching = caching;
    c.kv_release_ms = release_ms;
    c.kv_cache_memory_limit = (int64_t)1 << 40; /* the full pool, whatever the machine */
    ifl_executor *ex = NULL;
    char err[512] = "";
    int rc = ifl_executor_create(&ex, model_path, &c, err);
    CHECK_MSG(rc == 0, "create: %s", err);
    return ex;
}

/* n requests of ONCE plus one distinct token, max_tokens each; their
 * tokens into out[n][max_tokens] */
static void run_load(ifl_executor *ex, int n, int32_t max_tokens, int32_t *out)
{
    ifl_id ids[64];
    int32_t prompts[64][6];
    static struct ifl_request reqs[64];
    for (int i = 0; i < n; i++) {
        memcpy(prompts[i], ONCE, sizeof(ONCE));
        prompts[i][5] = 3 + i;
        ifl_request_init(&reqs[i]);
        reqs[i].input_ids = prompts[i];
        reqs[i].n_input = 6;
        reqs[i].max_tokens = max_tokens;
        reqs[i].sampling.temperature = 0;
        reqs[i].sampling.ignore_eos = 1;
    }
    /* queued together, so they step together: one by one, a loaded machine
     * could hold this thread back while the engine ran a dozen steps, and
     * a request that finished first would hand its partial last block to
     * one that had yet to take its 13th */
    char err[512] = "";
    CHECK_MSG(ifl_enqueue_many(ex, reqs, n, ids, err) == 0, "%s", err);
    for (int i = 0; i < n; i++) {
        int32_t got = 0, k = 0, final = 0;
        while (!final) {
            struct ifl_response *resp[4];
            if (ifl_await(ex, &ids[i], 1, 120000, resp, 4, &got)) {
                CHECK_MSG(0, "request %d: no response", i);
                return;
            }
            for (int32_t j = 0; j < got; j++) {
                struct ifl_sequence_result *s = &resp[j]->results[0];
                if (resp[j]->n_results == 1 && k + s->n_tokens <= max_tokens) {
                    memcpy(out + (size_t)i * max_tokens + k, s->tokens,
                           sizeof(int32_t) * (size_t)s->n_tokens);
                    k += s->n_tokens;
                }
                final |= resp[j]->is_final;
                ifl_response_free(resp[j]);
            }
        }
        CHECK_EQ(k, max_tokens);
    }
}

static void test_rss_follows_use(void)
{
    enum { N = 32, TOK = 240 };
    ifl_executor *ex = open_big(0, 300);
    if (!ex)
        return;
    struct ifl_iteration_stats s;
    CHECK_EQ(ifl_get_iteration_stats(ex, &s), 0);
    int64_t rss0 = status_kb("VmRSS");
    /* 256 contexts of 512 positions, 1 KiB each: 128 MiB reserved, none of it resident */
    CHECK(s.kv_bytes_reserved >= (int64_t)128 << 20);
    CHECK_EQ(s.kv_block_bytes, 16 * 1024);
    CHECK_MSG(s.kv_bytes_resident < (int64_t)1 << 20, "idle pool resident: %lld bytes",
              (long long)s.kv_bytes_resident);
    /* (the whole process, sanitizers' shadow included, under the pool alone) */
    CHECK_MSG(!RSS_CHECKS || rss0 < s.kv_bytes_reserved, "idle RSS %lld with %lld reserved",
              (long long)rss0, (long long)s.kv_bytes_reserved);

    static int32_t first[N * TOK], again[N * TOK];
    run_load(ex, N, TOK, first);
    CHECK_EQ(ifl_executor_wait_idle(ex, 120000), 0);
    CHECK_EQ(ifl_get_iteration_stats(ex, &s), 0);
    /* 32 sequences of 245 written positions: 16 blocks each, nearly all
     * at once (the first admitted may finish a step before the last) */
    CHECK(s.kv_blocks_peak > N * 15 && s.kv_blocks_peak <= N * 16);
    CHECK_EQ(s.kv_blocks_used, 0);
    int64_t peak = (int64_t)s.kv_blocks_peak * s.kv_block_bytes; /* 8 MiB */
    int64_t hwm = status_kb("VmHWM");
    /* the resident figure (measured over the touched blocks only) sees
     * the blocks just freed, and no more than their huge pages' worth */
    CHECK_MSG(s.kv_bytes_resident >= peak * 9 / 10 &&
                  s.kv_bytes_resident <= peak + ((int64_t)2 << 20) * 2 * 8,
              "resident %lld for %lld bytes of blocks", (long long)s.kv_bytes_resident,
              (long long)peak);
    /* the memory was really used, and not much more than that */
    CHECK_MSG(!RSS_CHECKS ||
                  (hwm - rss0 > peak * 8 / 10 && hwm - rss0 < peak * 3 / 2 + ((int64_t)16 << 20)),
              "RSS %lld -> peak %lld for %lld bytes of blocks", (long long)rss0, (long long)hwm,
              (long long)peak);

    /* free for 300 ms: given back (allow a loaded machine 20 s); the
     * resident figure is measured at the call while the release count is
     * the engine's last published step's, so wait for both */
    for (int i = 0; i < 200; i++) {
        CHECK_EQ(ifl_get_iteration_stats(ex, &s), 0);
        if (s.kv_bytes_resident < (int64_t)1 << 20 && s.kv_blocks_released >= s.kv_blocks_peak)
            break;
        sleep_ms(100);
    }
    CHECK_MSG(s.kv_bytes_resident < (int64_t)1 << 20, "after the load: %lld bytes resident",
              (long long)s.kv_bytes_resident);
    CHECK(s.kv_blocks_released >= s.kv_blocks_peak);
    int64_t rss1 = status_kb("VmRSS");
    CHECK_MSG(!RSS_CHECKS || rss1 < rss0 + peak / 4 + ((int64_t)8 << 20),
              "RSS %lld before, %lld after", (long long)rss0, (long long)rss1);

    /* blocks that came back as zeros are written before they are read:
     * the same requests give the same tokens */
    run_load(ex, N, TOK, again);
    CHECK(memcmp(first, again, sizeof(first)) == 0);
    ifl_executor_destroy(ex, 0);
}

/* kv_prefault: the whole pool resident from creation, never given back,
 * and the same outputs. */
static void test_prefault(void)
{
    enum { N = 8, TOK = 40 };
    static int32_t plain[N * TOK], pre[N * TOK];
    ifl_executor *ex = open_big(0, 100);
    if (!ex)
        return;
    run_load(ex, N, TOK, plain);
    ifl_executor_destroy(ex, 0);

    struct ifl_executor_config c;
    ifl_executor_config_default(&c);
    c.max_batch_size = 64;
    c.n_ctx = 512;
    c.n_threads = 1;
    c.enable_prefix_caching = 0;
    c.kv_release_ms = 100;
    c.kv_prefault = 1;
    char err[512] = "";
    CHECK_MSG(ifl_executor_create(&ex, model_path, &c, err) == 0, "create: %s", err);
    if (!ex)
        return;
    struct ifl_iteration_stats s;
    CHECK_EQ(ifl_get_iteration_stats(ex, &s), 0);
    CHECK_MSG(s.kv_bytes_resident >= s.kv_bytes_reserved * 99 / 100,
              "prefaulted: %lld of %lld resident", (long long)s.kv_bytes_resident,
              (long long)s.kv_bytes_reserved);
    run_load(ex, N, TOK, pre);
    CHECK(memcmp(plain, pre, sizeof(plain)) == 0);
    CHECK_EQ(ifl_executor_wait_idle(ex, 120000), 0);
    sleep_ms(400); /* four release periods: nothing goes */
    CHECK_EQ(ifl_get_iteration_stats(ex, &s), 0);
    CHECK_EQ(s.kv_blocks_released, 0);
    CHECK(s.kv_bytes_resident >= s.kv_bytes_reserved * 99 / 100);
    ifl_executor_destroy(ex, 0);
    c.kv_prefault = 2;
    CHECK_EQ(ifl_executor_create(&ex, model_path, &c, err), IFL_EINVAL);
}

/* Cached prefixes hold data: they stay resident while free blocks go. */
static void test_cached_blocks_stay(void)
{
    enum { N = 8, TOK = 200 };
    ifl_executor *ex = open_big(1, 100);
    if (!ex)
        return;
    static int32_t out[N * TOK];
    run_load(ex, N, TOK, out);
    CHECK_EQ(ifl_executor_wait_idle(ex, 120000), 0);
    struct ifl_iteration_stats s;
    /* the requests end at different steps, so their blocks come free (and
     * go back) at different times: wait for all of them */
    for (int i = 0; i < 200; i++) {
        CHECK_EQ(ifl_get_iteration_stats(ex, &s), 0);
        if (s.kv_blocks_released >= N)
            break;
        sleep_ms(100);
    }
    /* 206 positions: 12 full blocks each are cached, the partial 13th was freed */
    CHECK_EQ(s.kv_blocks_cached, N * 12);
    CHECK_EQ(s.kv_blocks_released, N);
    /* cached blocks are resident (within a page per array at each edge) */
    CHECK(s.kv_bytes_resident >= (int64_t)s.kv_blocks_cached * s.kv_block_bytes * 9 / 10);
    ifl_executor_destroy(ex, 0);
}

/* A processor that makes each step of its request take 5 ms longer, so
 * that one long request keeps the engine busy for seconds. */
static void slow_rows(void *user, ifl_id id, float *logits, int32_t n_vocab, const int32_t *tokens,
                      int32_t n_tokens, uint64_t client_id)
{
    (void)user, (void)id, (void)logits, (void)n_vocab, (void)tokens, (void)n_tokens;
    (void)client_id;
    sleep_ms(5);
}

/* Under load the engine is never idle: when a burst has ended and a
 * quarter of the pool is free but resident, the memory still goes back
 * between steps while a long request runs on. */
static void test_release_while_busy(void)
{
    struct ifl_logits_processor slow = {"slow", slow_rows, NULL};
    struct ifl_executor_config c;
    ifl_executor_config_default(&c);
    c.max_batch_size = 40;
    c.n_ctx = 512;
    c.n_threads = 1; /* no spinning barrier on a loaded machine */
    c.kv_type = IFL_KV_F16;
    c.enable_prefix_caching = 0;
    c.kv_release_ms = 100;
    c.kv_cache_memory_limit = (int64_t)1 << 40;
    c.logits_processors = &slow;
    c.n_logits_processors = 1;
    ifl_executor *ex = NULL;
    char err[512] = "";
    CHECK_MSG(ifl_executor_create(&ex, model_path, &c, err) == 0, "%s", err);
    if (!ex)
        return;
    struct ifl_request r;
    ifl_request_init(&r);
    r.input_ids = ONCE;
    r.n_input = 5;
    r.max_tokens = 500; /* at least 2.5 s */
    r.sampling.temperature = 0;
    r.sampling.ignore_eos = 1;
    r.logits_post_processor = "slow";
    ifl_id long_id;
    CHECK_EQ(ifl_enqueue(ex, &r, &long_id, NULL), 0);
    /* the burst: 36 sequences of 246 positions, 576 of 1319 blocks (9 MiB) */
    static int32_t out[36 * 240];
    run_load(ex, 36, 240, out);
    struct ifl_iteration_stats s;
    CHECK_EQ(ifl_get_iteration_stats(ex, &s), 0);
    CHECK(s.kv_blocks_peak >= 36 * 16);
    int64_t peak = (int64_t)s.kv_blocks_peak * s.kv_block_bytes;
    int gone = 0;
    for (int i = 0; i < 300 && !gone; i++) {
        CHECK_EQ(ifl_get_iteration_stats(ex, &s), 0);
        if (s.active_requests == 0)
            break; /* the long one ended first: the machine was too slow to tell */
        /* (the count is published with the step after the release) */
        gone = s.kv_bytes_resident < peak / 4 && s.kv_blocks_released >= 36 * 15;
        if (!gone)
            sleep_ms(10);
    }
    CHECK_MSG(gone, "resident %lld of a %lld peak, %lld blocks released, while busy (active %d)",
              (long long)s.kv_bytes_resident, (long long)peak, (long long)s.kv_blocks_released,
              s.active_requests);
    ifl_executor_destroy(ex, 1);
}

/* The default pool is --parallel full contexts when they fit the bound,
 * else what fits, one context at least; the stats say which. */
static void test_default_bound(void)
{
    struct ifl_executor_config c;
    ifl_executor_config_default(&c);
    c.max_batch_size = 64;
    c.n_ctx = 512;
    c.n_threads = 1;
    c.kv_type = IFL_KV_F16;
    /* 64 contexts need 32 MiB (1 KiB a position): a 4 MiB bound takes 256 blocks */
    c.kv_cache_memory_limit = (int64_t)4 << 20;
    ifl_executor *ex = NULL;
    char err[512] = "";
    CHECK_MSG(ifl_executor_create(&ex, model_path, &c, err) == 0, "%s", err);
    struct ifl_iteration_stats s;
    if (ex) {
        CHECK_EQ(ifl_get_iteration_stats(ex, &s), 0);
        CHECK_EQ(s.kv_pool_bound, IFL_KV_BOUND_LIMIT);
        CHECK_EQ(s.kv_blocks_max, 256);
        CHECK_EQ(s.kv_bytes_bound, (int64_t)4 << 20);
        ifl_executor_destroy(ex, 0);
    }
    /* a bound below one context: one context */
    c.kv_cache_memory_limit = 1000;
    CHECK_MSG(ifl_executor_create(&ex, model_path, &c, err) == 0, "%s", err);
    if (ex) {
        CHECK_EQ(ifl_get_iteration_stats(ex, &s), 0);
        CHECK_EQ(s.kv_blocks_max, 32);
        ifl_executor_destroy(ex, 0);
    }
    /* the share of what the machine has: 64 contexts (32 MiB) fit in any test machine */
    c.kv_cache_memory_limit = 0;
    c.kv_cache_memory_share = 0.5;
    CHECK_MSG(ifl_executor_create(&ex, model_path, &c, err) == 0, "%s", err);
    if (ex) {
        CHECK_EQ(ifl_get_iteration_stats(ex, &s), 0);
        CHECK_EQ(s.kv_pool_bound, IFL_KV_BOUND_CONTEXTS);
        CHECK_EQ(s.kv_blocks_max, 64 * 32 + 63);
        struct ifl_sysmem m;
        ifl_sysmem_read(NULL, &m);
        CHECK(s.kv_bytes_bound > 0);
        CHECK(m.mem_available < 0 || s.kv_bytes_bound <= m.mem_available);
        ifl_executor_destroy(ex, 0);
    }
    c.kv_cache_memory_share = 1.5;
    CHECK_EQ(ifl_executor_create(&ex, model_path, &c, err), IFL_EINVAL);
    c.kv_cache_memory_share = 0;
    c.kv_release_ms = -2;
    CHECK_EQ(ifl_executor_create(&ex, model_path, &c, err), IFL_EINVAL);
}

/* ---- the /proc and cgroup reader, on fake trees -------------------------- */

static void put(const char *root, const char *path, const char *text)
{
    char full[1024], dir[1024];
    snprintf(full, sizeof(full), "%s%s", root, path);
    /* make every parent directory */
    for (char *p = strchr(full + strlen(root) + 1, '/'); p; p = strchr(p + 1, '/')) {
        snprintf(dir, sizeof(dir), "%.*s", (int)(p - full), full);
        mkdir(dir, 0755);
    }
    FILE *f = fopen(full, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void test_sysmem_tree(void)
{
    char root[] = "/tmp/ifl-sysmem-XXXXXX";
    CHECK(mkdtemp(root) != NULL);
    struct ifl_sysmem m;
    /* nothing there: all unknown */
    ifl_sysmem_read(root, &m);
    CHECK_EQ(m.mem_available, -1);
    CHECK_EQ(m.cg_limit, -1);

    put(root, "/proc/meminfo", "MemTotal: 100 kB\nMemFree: 50 kB\nMemAvailable: 8000000 kB\n");
    /* v2: the group's own limit is "max", its parent's 2 GiB binds */
    put(root, "/proc/self/cgroup", "0::/box/job\n");
    put(root, "/proc/self/mountinfo",
        "25 1 0:22 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw\n");
    put(root, "/sys/fs/cgroup/box/job/memory.max", "max\n");
    put(root, "/sys/fs/cgroup/box/job/memory.current", "1000\n");
    put(root, "/sys/fs/cgroup/box/memory.max", "2147483648\n");
    put(root, "/sys/fs/cgroup/box/memory.current", "147483648\n");
    ifl_sysmem_read(root, &m);
    CHECK_EQ(m.mem_available, (int64_t)8000000 * 1024);
    CHECK_EQ(m.cg_version, 2);
    CHECK_EQ(m.cg_limit, (int64_t)2147483648LL);
    CHECK_EQ(m.cg_usage, (int64_t)147483648LL);

    /* v1 in a container: the mount's root is the container's group, whose
     * path /proc/self/cgroup names in full; no limit is a huge number */
    put(root, "/proc/self/cgroup", "5:cpu,cpuacct:/\n4:memory:/docker/abc\n0::/\n");
    put(root, "/proc/self/mountinfo",
        "30 25 0:26 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
        "31 25 0:27 /docker/abc /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory\n");
    put(root, "/sys/fs/cgroup/memory/memory.limit_in_bytes", "536870912\n");
    put(root, "/sys/fs/cgroup/memory/memory.usage_in_bytes", "36870912\n");
    ifl_sysmem_read(root, &m);
    CHECK_EQ(m.cg_version, 1);
    CHECK_EQ(m.cg_limit, (int64_t)536870912);
    CHECK_EQ(m.cg_usage, (int64_t)36870912);
    put(root, "/sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
    ifl_sysmem_read(root, &m);
    CHECK_EQ(m.cg_limit, -1);
    char cmd[1100];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", root);
    CHECK_EQ(system(cmd), 0);

    /* the real machine: whatever it has, consistent */
    ifl_sysmem_read(NULL, &m);
    CHECK(m.mem_available > 0);
    CHECK(m.cg_limit < 0 || (m.cg_usage >= 0 && m.cg_version > 0));
    CHECK(ifl_sysmem_rss() > 0);

    int64_t b;
    double sh;
    CHECK_EQ(ifl_sysmem_parse_amount("40%", &b, &sh), 0);
    CHECK(b == 0 && sh > 0.399 && sh < 0.401);
    CHECK_EQ(ifl_sysmem_parse_amount("2G", &b, &sh), 0);
    CHECK(b == (int64_t)2 << 30 && sh == 0);
    CHECK_EQ(ifl_sysmem_parse_amount("512MiB", &b, &sh), 0);
    CHECK_EQ(b, (int64_t)512 << 20);
    CHECK_EQ(ifl_sysmem_parse_amount("1048576", &b, &sh), 0);
    CHECK_EQ(b, 1048576);
    const char *bad[] = {"", "0.4", "0", "0%", "101%", "2X", "G", "-1G", "12.5G", "1GG"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        CHECK_MSG(ifl_sysmem_parse_amount(bad[i], &b, &sh) == -1, "'%s' accepted", bad[i]);
}

/* The store keeps each block head by head: a head's positions of a block
 * are one run (keys [n_piece][block_size][k_piece] a block), a block is
 * as long as before, copies and releases move every piece; a Q8_0 cache
 * groups the fewest heads that are whole blocks of 32. */
static uint8_t mark(int il, int v, int32_t blk, int32_t slot, int pc, size_t i)
{
    return (uint8_t)(il * 131 + v * 71 + blk * 37 + slot * 11 + pc * 5 + (int)i * 3 + 1);
}

static void fill_store(struct ifl_kv_store *kv)
{
    for (int il = 0; il < kv->n_layer; il++)
        for (int v = 0; v < 2; v++)
            for (int32_t blk = 0; blk < kv->n_blocks; blk++)
                for (int32_t s = 0; s < kv->block_size; s++)
                    for (int pc = 0; pc < kv->n_piece; pc++) {
                        const size_t pb = v ? kv->v_piece : kv->k_piece;
                        uint8_t *p =
                            (uint8_t *)ifl_kv_at(kv, (v ? kv->v : kv->k)[il], pb, blk, s, pc);
                        for (size_t i = 0; i < pb; i++)
                            p[i] = mark(il, v, blk, s, pc, i);
                    }
}

/* whether position (blk, slot) holds what fill_store put at (fb, fs) */
static int holds(const struct ifl_kv_store *kv, int32_t blk, int32_t slot, int32_t fb, int32_t fs)
{
    for (int il = 0; il < kv->n_layer; il++)
        for (int v = 0; v < 2; v++)
            for (int pc = 0; pc < kv->n_piece; pc++) {
                const size_t pb = v ? kv->v_piece : kv->k_piece;
                const uint8_t *p =
                    (const uint8_t *)ifl_kv_at(kv, (v ? kv->v : kv->k)[il], pb, blk, slot, pc);
                for (size_t i = 0; i < pb; i++)
                    if (p[i] != mark(il, v, fb, fs, pc, i))
                        return 0;
            }
    return 1;
}

static void test_store_layout(void)
{
    char err[256];
    struct ifl_hparams hp;
    memset(&hp, 0, sizeof hp);
    hp.n_layer = 2;
    hp.n_head_kv = 4;
    hp.head_dim = 64;
    hp.head_dim_v = 32;
    struct ifl_kv_store *kv = NULL;
    CHECK_EQ(ifl_kv_store_create(&kv, &hp, IFL_TYPE_F16, 8, 16, err), 0);
    if (!kv)
        return;
    CHECK_EQ(kv->hg, 1);
    CHECK_EQ(kv->n_piece, 4);
    CHECK_EQ(kv->k_piece, 128);
    CHECK_EQ(kv->v_piece, 64);
    CHECK_EQ(kv->k_row, 512);
    char *k0 = kv->k[1];
    /* a head's 16 positions are 2 KiB in a run; the next head follows; a
     * block is 16 rows of all four heads */
    CHECK_EQ(ifl_kv_at(kv, k0, kv->k_piece, 3, 1, 2) - ifl_kv_at(kv, k0, kv->k_piece, 3, 0, 2),
             128);
    CHECK_EQ(ifl_kv_at(kv, k0, kv->k_piece, 3, 0, 3) - ifl_kv_at(kv, k0, kv->k_piece, 3, 0, 2),
             16 * 128);
    CHECK_EQ(ifl_kv_at(kv, k0, kv->k_piece, 4, 0, 0) - ifl_kv_at(kv, k0, kv->k_piece, 3, 0, 0),
             16 * 512);
    CHECK(ifl_kv_at(kv, k0, kv->k_piece, 4, 0, 0) == k0 + 4 * 16 * kv->k_row);
    fill_store(kv);
    ifl_kv_store_copy_pos(kv, 5, 7, 2, 3);
    CHECK(holds(kv, 5, 7, 2, 3));
    CHECK(holds(kv, 5, 6, 5, 6) && holds(kv, 5, 8, 5, 8) && holds(kv, 2, 3, 2, 3));
    ifl_kv_store_copy_block(kv, 6, 1, 9);
    for (int32_t s = 0; s < 16; s++)
        CHECK(s < 9 ? holds(kv, 6, s, 1, s) : holds(kv, 6, s, 6, s));
    /* blocks 2-5 of layer 0's keys are whole pages (8 KiB blocks from a
     * huge-page boundary): they read as zeros after their release, their
     * neighbours do not change */
    CHECK(ifl_kv_store_release(kv, 2, 4) > 0);
    const uint8_t *z = (const uint8_t *)ifl_kv_at(kv, kv->k[0], kv->k_piece, 2, 0, 0);
    int zeros = 1;
    for (size_t i = 0; i < 4 * 16 * kv->k_row; i++)
        zeros &= z[i] == 0;
    CHECK(zeros);
    CHECK(holds(kv, 1, 15, 1, 15) && holds(kv, 6, 0, 1, 0) && holds(kv, 7, 0, 7, 0));
    ifl_kv_store_free(kv);

    /* Q8_0: heads of 64 are pieces of their own; heads of 16 go in pairs
     * (one block of 32), phi-2's 80 too (160); heads of 8 in fours */
    static const struct {
        int n_head_kv, hd, hg;
    } q8[] = {{4, 64, 1}, {4, 16, 2}, {32, 80, 2}, {4, 8, 4}, {2, 8, 0}, {3, 16, 0}};
    for (size_t c = 0; c < sizeof q8 / sizeof *q8; c++) {
        hp.n_head_kv = q8[c].n_head_kv;
        hp.head_dim = hp.head_dim_v = q8[c].hd;
        int rc = ifl_kv_store_create(&kv, &hp, IFL_TYPE_Q8_0, 4, 16, err);
        if (!q8[c].hg) {
            CHECK_EQ(rc, IFL_EUNSUPPORTED);
            CHECK(strstr(err, "multiples of 32") != NULL);
            continue;
        }
        CHECK_EQ(rc, 0);
        if (rc)
            continue;
        CHECK_EQ(kv->hg, q8[c].hg);
        CHECK_EQ(kv->k_piece, (size_t)q8[c].hg * q8[c].hd / 32 * 34);
        CHECK_EQ(kv->k_row, kv->k_piece * (size_t)(q8[c].n_head_kv / q8[c].hg));
        fill_store(kv);
        ifl_kv_store_copy_pos(kv, 3, 0, 1, 15);
        CHECK(holds(kv, 3, 0, 1, 15) && holds(kv, 3, 1, 3, 1));
        ifl_kv_store_free(kv);
    }
}

int main(void)
{
    snprintf(model_path, sizeof model_path, "%s/models/ref/llama-f16.gguf", t_shared());
    T_RUN(test_store_layout);
    T_RUN(test_sysmem_tree);
    T_RUN(test_default_bound);
    T_RUN(test_rss_follows_use);
    T_RUN(test_cached_blocks_stay);
    T_RUN(test_prefault);
    T_RUN(test_release_while_busy);
    return t_done();
}
