/* Core utilities: status names, F16/BF16 conversions, RNG, thread pool
 * (spinning, blocking, and switching between them when oversubscribed), the
 * CPU count (affinity mask, cgroup v1 and v2 quotas on made-up trees). */
#include <sched.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/err.h"
#include "core/fp16.h"
#include "core/pool.h"
#include "core/rng.h"
#include "core/syscpu.h"
#include "core/utf8.h"
#include "t.h"

static void test_strerror(void)
{
    CHECK_STR(ifl_strerror(IFL_OK), "success");
    CHECK_STR(ifl_strerror(IFL_EFORMAT), "malformed input");
    CHECK_STR(ifl_strerror(-999), "unknown status");
    char err[IFL_ERR_LEN];
    CHECK_EQ(ifl_err(err, IFL_EINVAL, "x=%d", 5), IFL_EINVAL);
    CHECK_STR(err, "x=5");
    CHECK_EQ(ifl_err(NULL, IFL_EIO, "ignored"), IFL_EIO);
}

static void test_f16_roundtrip(void)
{
    /* every half value survives f16 -> f32 -> f16 (NaNs stay NaN) */
    for (uint32_t h = 0; h < 65536; h++) {
        float f = ifl_f16_to_f32((uint16_t)h);
        uint16_t back = ifl_f32_to_f16(f);
        if (isnan(f))
            CHECK(isnan(ifl_f16_to_f32(back)));
        else
            CHECK_MSG(back == h, "half %04x -> %g -> %04x", h, f, back);
    }
    CHECK_EQ(ifl_f32_to_f16(1.0f), 0x3c00);
    CHECK_EQ(ifl_f32_to_f16(65504.0f), 0x7bff);
    CHECK_EQ(ifl_f32_to_f16(65520.0f), 0x7c00);           /* rounds up to inf */
    CHECK_EQ(ifl_f32_to_f16(1.0f + 1.0f / 2048), 0x3c00); /* tie to even */
    CHECK_EQ(ifl_f32_to_f16(1.0f + 3.0f / 2048), 0x3c02);
    CHECK_EQ(ifl_f32_to_f16(5.96046448e-08f), 0x0001); /* smallest subnormal */
    CHECK_EQ(ifl_f32_to_f16(2.98023224e-08f), 0x0000); /* half of it: tie to even (0) */
}

static void test_bf16(void)
{
    CHECK_EQ(ifl_f32_to_bf16(1.0f), 0x3f80);
    CHECK_EQ(ifl_bf16_to_f32(0x3f80), 1.0f);
    /* 1 + 2^-8 is a tie between 0x3f80 and 0x3f81: even wins */
    CHECK_EQ(ifl_f32_to_bf16(1.0f + 1.0f / 256), 0x3f80);
    CHECK_EQ(ifl_f32_to_bf16(1.0f + 3.0f / 256), 0x3f82);
    CHECK(isnan(ifl_bf16_to_f32(ifl_f32_to_bf16(NAN))));
}

static void test_rng(void)
{
    struct ifl_rng a, b;
    ifl_rng_seed(&a, 42);
    ifl_rng_seed(&b, 42);
    for (int i = 0; i < 100; i++)
        CHECK(ifl_rng_next(&a) == ifl_rng_next(&b));
    double sum = 0, sq = 0;
    for (int i = 0; i < 20000; i++) {
        float u = ifl_rng_uniform(&a);
        CHECK(u >= 0.0f && u < 1.0f);
        float n = ifl_rng_normal(&b);
        sum += n;
        sq += (double)n * n;
    }
    CHECK_NEAR(sum / 20000, 0.0, 0.05);
    CHECK_NEAR(sq / 20000, 1.0, 0.05);
}

struct pool_job {
    struct ifl_pool *pool;
    atomic_int phase1;
    int seen_all[64];
    long sums[64];
};

static void pool_fn(void *arg, int ith, int nth)
{
    struct pool_job *j = arg;
    atomic_fetch_add(&j->phase1, 1);
    ifl_pool_barrier(j->pool);
    j->seen_all[ith] = atomic_load(&j->phase1) == nth;
    ifl_pool_barrier(j->pool);
    long lo, hi, s = 0;
    ifl_pool_split(1000, ith, nth, &lo, &hi);
    for (long i = lo; i < hi; i++)
        s += i;
    j->sums[ith] = s;
}

static void test_pool(void)
{
    for (int nth = 1; nth <= 4; nth++) {
        struct ifl_pool *pool;
        CHECK_EQ(ifl_pool_create(&pool, nth), 0);
        CHECK_EQ(ifl_pool_size(pool), nth);
        for (int rep = 0; rep < 200; rep++) {
            struct pool_job j = {.pool = pool};
            ifl_pool_run(pool, pool_fn, &j);
            long total = 0;
            for (int i = 0; i < nth; i++) {
                CHECK(j.seen_all[i]);
                total += j.sums[i];
            }
            CHECK_EQ(total, 999 * 1000 / 2);
        }
        ifl_pool_free(pool);
    }
    ifl_pool_free(NULL);
    struct ifl_pool *p;
    CHECK_EQ(ifl_pool_create(&p, -1), IFL_EINVAL);
}

/* ifl_pool_run_solo: fn runs once, as thread 0 of 1, on the caller, its
 * barriers passing at once (with the workers counted they would wait
 * forever); shared runs before and after it still meet at theirs. */
static void test_pool_solo(void)
{
    for (int nth = 1; nth <= 3; nth++) {
        struct ifl_pool *pool;
        CHECK_EQ(ifl_pool_create(&pool, nth), 0);
        for (int rep = 0; rep < 50; rep++) {
            struct pool_job j = {.pool = pool};
            if (rep % 2) {
                ifl_pool_run_solo(pool, pool_fn, &j);
                CHECK_EQ(atomic_load(&j.phase1), 1);
                CHECK(j.seen_all[0]);
                CHECK_EQ(j.sums[0], 999 * 1000 / 2);
                for (int i = 1; i < nth; i++)
                    CHECK_EQ(j.sums[i], 0);
            } else {
                ifl_pool_run(pool, pool_fn, &j);
                CHECK_EQ(atomic_load(&j.phase1), nth);
                long total = 0;
                for (int i = 0; i < nth; i++) {
                    CHECK(j.seen_all[i]);
                    total += j.sums[i];
                }
                CHECK_EQ(total, 999 * 1000 / 2);
            }
        }
        ifl_pool_free(pool);
    }
}

/* Barriers that fetch memory while they wait count like plain ones: the
 * threads mix the two kinds, one thread late each phase so the others
 * wait (and fetch), and every phase must see all of the previous one. */
struct fetch_job {
    struct ifl_pool *pool;
    const char *buf;
    size_t len;
    atomic_int count[8];
    int ok[64];
};

static void fetch_fn(void *arg, int ith, int nth)
{
    struct fetch_job *j = arg;
    j->ok[ith] = 1;
    for (int ph = 0; ph < 8; ph++) {
        if (ith == ph % nth) /* the late one */
            for (volatile int k = 0; k < 20000; k++)
                ;
        atomic_fetch_add(&j->count[ph], 1);
        if ((ith + ph) % 2)
            ifl_pool_barrier_fetch(j->pool, j->buf + (size_t)ph * 4096, j->len - (size_t)ph * 4096);
        else
            ifl_pool_barrier(j->pool);
        if (atomic_load(&j->count[ph]) != nth)
            j->ok[ith] = 0;
    }
    ifl_pool_barrier_fetch(j->pool, NULL, 0);
}

static void test_pool_fetch(void)
{
    size_t len = 1 << 20;
    char *buf = calloc(len, 1);
    CHECK(buf != NULL);
    for (int nth = 1; nth <= 4; nth++) {
        struct ifl_pool *pool;
        CHECK_EQ(ifl_pool_create(&pool, nth), 0);
        for (int rep = 0; rep < 50; rep++) {
            struct fetch_job j = {.pool = pool, .buf = buf, .len = len};
            ifl_pool_run(pool, fetch_fn, &j);
            for (int i = 0; i < nth; i++)
                CHECK(j.ok[i]);
        }
        ifl_pool_free(pool);
    }
    free(buf);
}

/* A job of real work and barriers whose result does not depend on how the
 * threads waited: every phase sums its rows into a per-thread slot, and the
 * next phase reads all slots of the previous one. */
struct work_job {
    struct ifl_pool *pool;
    long slot[8][64];
    long total;
    int late_us; /* thread 0 arrives this late at each barrier */
};

static void work_fn(void *arg, int ith, int nth)
{
    struct work_job *j = arg;
    long prev = 0;
    for (int ph = 0; ph < 8; ph++) {
        long lo, hi, s = prev % 7;
        ifl_pool_split(20000, ith, nth, &lo, &hi);
        for (long i = lo; i < hi; i++)
            s += (i * (ph + 1)) % 13;
        j->slot[ph][ith] = s;
        if (ith == 0 && j->late_us)
            usleep((useconds_t)j->late_us);
        ifl_pool_barrier(j->pool);
        prev = 0;
        for (int t = 0; t < nth; t++)
            prev += j->slot[ph][t];
    }
    if (ith == 0)
        j->total = prev;
}

/* work_fn's result computed by one thread */
static long work_expected(int nth)
{
    long prev = 0;
    for (int ph = 0; ph < 8; ph++) {
        long sum = 0;
        for (int t = 0; t < nth; t++) {
            long lo, hi, s = prev % 7;
            ifl_pool_split(20000, t, nth, &lo, &hi);
            for (long i = lo; i < hi; i++)
                s += (i * (ph + 1)) % 13;
            sum += s;
        }
        prev = sum;
    }
    return prev;
}

static struct ifl_pool *pool_with_wait(int nth, const char *mode)
{
    struct ifl_pool *pool = NULL;
    if (mode)
        setenv("IFL_POOL_WAIT", mode, 1);
    CHECK_EQ(ifl_pool_create(&pool, nth), 0);
    unsetenv("IFL_POOL_WAIT");
    return pool;
}

/* Forced blocking waits (a short spin, then a futex) give the same results
 * as spinning, and do sleep when a thread is late. */
static void test_pool_blocking(void)
{
    for (int nth = 2; nth <= 4; nth++) {
        struct ifl_pool *spin = pool_with_wait(nth, "spin"), *block = pool_with_wait(nth, "block");
        if (!spin || !block)
            return;
        struct ifl_pool_stats st;
        ifl_pool_stats(block, &st);
        CHECK_EQ(st.blocking, 1);
        ifl_pool_stats(spin, &st);
        CHECK_EQ(st.blocking, 0);
        for (int rep = 0; rep < 40; rep++) {
            struct work_job a = {.pool = spin}, b = {.pool = block, .late_us = rep % 4 ? 0 : 300};
            ifl_pool_run(spin, work_fn, &a);
            ifl_pool_run(block, work_fn, &b);
            CHECK_EQ(a.total, work_expected(nth));
            CHECK_EQ(b.total, a.total);
        }
        ifl_pool_stats(block, &st);
        CHECK(st.sleeps > 0); /* 300 us late is far past the 30 us spin */
        CHECK_EQ(st.blocking, 1);
        CHECK_EQ(st.to_spinning, 0); /* a fixed mode stays */
        ifl_pool_free(spin);
        ifl_pool_free(block);
    }
}

static int have_schedstat(void)
{
    FILE *f = fopen("/proc/thread-self/schedstat", "r");
    if (f)
        fclose(f);
    return f != NULL;
}

static double mono_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Each thread of the pool sets its own affinity (threads created before a
 * change keep theirs, so the pool's threads must do it themselves). */
static void pin_fn(void *arg, int ith, int nth)
{
    (void)ith, (void)nth;
    sched_setaffinity(0, sizeof(cpu_set_t), (cpu_set_t *)arg);
}

static void nap_fn(void *arg, int ith, int nth)
{
    (void)arg, (void)ith, (void)nth;
    usleep(80000);
}

/* Four threads pinned to one CPU wait for it most of the time: the adaptive
 * pool must notice (each is runnable but not running about three quarters
 * of the time) and block, with the results of the spinning path. Then,
 * unpinned and mostly asleep (so little waiting for a CPU even on a busy
 * machine), it must go back to spinning. */
static void test_pool_oversubscribed(void)
{
    if (!have_schedstat()) {
        fprintf(stderr, "  (no /proc/thread-self/schedstat: the pool cannot adapt here)\n");
        return;
    }
    cpu_set_t old, one;
    CHECK_EQ(sched_getaffinity(0, sizeof old, &old), 0);
    int cpu = 0;
    while (cpu < CPU_SETSIZE - 1 && !CPU_ISSET(cpu, &old))
        cpu++;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    struct ifl_pool *pool = pool_with_wait(4, NULL);
    if (!pool)
        return;
    struct ifl_pool_stats st;
    ifl_pool_stats(pool, &st);
    CHECK_EQ(st.blocking, 0); /* an adaptive pool starts spinning */
    ifl_pool_run(pool, pin_fn, &one);
    const long want = work_expected(4);
    double t0 = mono_s();
    int reps = 0;
    /* the spinning path of four threads on one CPU makes slow progress:
     * bounded by time rather than by count */
    while (mono_s() - t0 < 5.0 && !st.blocking) {
        struct work_job j = {.pool = pool};
        ifl_pool_run(pool, work_fn, &j);
        CHECK_EQ(j.total, want);
        ifl_pool_stats(pool, &st);
        reps++;
    }
    CHECK_MSG(st.blocking && st.to_blocking >= 1, "not blocking after %d jobs in %.2f s", reps,
              mono_s() - t0);
    for (int rep = 0; rep < 50; rep++) {
        struct work_job j = {.pool = pool};
        ifl_pool_run(pool, work_fn, &j);
        CHECK_EQ(j.total, want);
    }
    ifl_pool_run(pool, pin_fn, &old);
    t0 = mono_s();
    reps = 0;
    while (mono_s() - t0 < 8.0 && st.blocking) {
        ifl_pool_run(pool, nap_fn, NULL);
        ifl_pool_stats(pool, &st);
        reps++;
    }
    CHECK_MSG(!st.blocking && st.to_spinning >= 1, "still blocking after %d naps in %.2f s", reps,
              mono_s() - t0);
    struct work_job j = {.pool = pool};
    ifl_pool_run(pool, work_fn, &j);
    CHECK_EQ(j.total, want);
    ifl_pool_free(pool);
}

static void test_syscpu_parse(void)
{
    double c = -1;
    CHECK_EQ(ifl_syscpu_parse_cpu_max("max 100000\n", &c), 0);
    CHECK_NEAR(c, 0, 0);
    CHECK_EQ(ifl_syscpu_parse_cpu_max("150000 100000\n", &c), 0);
    CHECK_NEAR(c, 1.5, 1e-12);
    CHECK_EQ(ifl_syscpu_parse_cpu_max("50000 100000", &c), 0);
    CHECK_NEAR(c, 0.5, 1e-12);
    CHECK_EQ(ifl_syscpu_parse_cpu_max("400000 50000\n", &c), 0);
    CHECK_NEAR(c, 8, 1e-12);
    static const char *const bad[] = {"",
                                      "max",
                                      "150000",
                                      "150000 ",
                                      "-5 100000",
                                      "150000 0",
                                      "0 100000",
                                      "1e5 100000",
                                      "150000 100000 7",
                                      "max max",
                                      " 150000 100000",
                                      "150000  100000",
                                      "abc 100000",
                                      "99999999999999999999 100000"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        c = -1;
        CHECK_MSG(ifl_syscpu_parse_cpu_max(bad[i], &c) == IFL_EFORMAT, "accepted '%s'", bad[i]);
        CHECK_NEAR(c, 0, 0);
    }
    CHECK_EQ(ifl_syscpu_parse_cfs("-1\n", "100000\n", &c), 0);
    CHECK_NEAR(c, 0, 0);
    CHECK_EQ(ifl_syscpu_parse_cfs("250000\n", "100000\n", &c), 0);
    CHECK_NEAR(c, 2.5, 1e-12);
    CHECK_EQ(ifl_syscpu_parse_cfs("x", "100000", &c), IFL_EFORMAT);
    CHECK_EQ(ifl_syscpu_parse_cfs("50000", "0", &c), IFL_EFORMAT);
    CHECK_EQ(ifl_syscpu_parse_cfs("-1x", "100000", &c), IFL_EFORMAT);
    CHECK_EQ(ifl_syscpu_parse_cfs("-2", "100000", &c), IFL_EFORMAT);
    CHECK_EQ(ifl_syscpu_parse_cfs("50000", "", &c), IFL_EFORMAT);
}

/* Writes text to root/rel, making the directories on the way. */
static void put(const char *root, const char *rel, const char *text)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", root, rel);
    for (char *p = path + strlen(root) + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            mkdir(path, 0700);
            *p = '/';
        }
    FILE *f = fopen(path, "w");
    CHECK(f != NULL);
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static void rm_tree(const char *root)
{
    char cmd[1100];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", root);
    CHECK_EQ(system(cmd), 0);
}

/* A made-up /proc and /sys under a temporary root. */
static double quota_of(const char *cgroup, const char *mountinfo, const char *const *files)
{
    char root[] = "/tmp/ifl-syscpu-XXXXXX";
    CHECK(mkdtemp(root) != NULL);
    if (cgroup)
        put(root, "proc/self/cgroup", cgroup);
    if (mountinfo)
        put(root, "proc/self/mountinfo", mountinfo);
    for (int i = 0; files && files[i]; i += 2)
        put(root, files[i], files[i + 1]);
    struct ifl_syscpu c;
    ifl_syscpu_read(root, &c);
    rm_tree(root);
    return c.quota;
}

static void test_syscpu_trees(void)
{
    const char *v2 = "30 20 0:26 / /sys/fs/cgroup rw,nosuid shared:4 - cgroup2 cgroup2 rw\n";
    /* the smallest quota from the process's cgroup up to the root */
    const char *nested[] = {"sys/fs/cgroup/a/cpu.max",
                            "120000 100000\n",
                            "sys/fs/cgroup/a/b/cpu.max",
                            "300000 100000\n",
                            "sys/fs/cgroup/a/b/c/cpu.max",
                            "max 100000\n",
                            NULL};
    CHECK_NEAR(quota_of("0::/a/b/c\n", v2, nested), 1.2, 1e-9);
    /* a container with a cgroup namespace: its own cgroup is "/" */
    const char *ns[] = {"sys/fs/cgroup/cpu.max", "200000 100000\n", NULL};
    CHECK_NEAR(quota_of("0::/\n", v2, ns), 2.0, 1e-9);
    /* without one: the mount shows the container's cgroup as its root */
    const char *v2sub = "30 20 0:26 /kubepods/pod1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
    const char *sub[] = {"sys/fs/cgroup/cpu.max", "250000 100000\n", "sys/fs/cgroup/ctr/cpu.max",
                         "50000 100000\n", NULL};
    CHECK_NEAR(quota_of("0::/kubepods/pod1/ctr\n", v2sub, sub), 0.5, 1e-9);
    /* a cgroup outside the mount's root is read at the mount point */
    CHECK_NEAR(quota_of("0::/elsewhere\n", v2sub, sub), 2.5, 1e-9);
    /* v1: the cpu controller's line and mount (comma-joined names, an
     * escaped space in the mount point) */
    const char *v1 = "25 20 0:21 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
                     "26 20 0:22 / /sys/fs/cgroup/cpu\\040acct rw - cgroup cgroup rw,cpuacct,cpu\n";
    const char *v1f[] = {"sys/fs/cgroup/cpu acct/grp/cpu.cfs_quota_us",
                         "350000\n",
                         "sys/fs/cgroup/cpu acct/grp/cpu.cfs_period_us",
                         "100000\n",
                         "sys/fs/cgroup/cpu acct/cpu.cfs_quota_us",
                         "-1\n",
                         "sys/fs/cgroup/cpu acct/cpu.cfs_period_us",
                         "100000\n",
                         NULL};
    CHECK_NEAR(quota_of("5:memory:/grp\n4:cpuacct,cpu:/grp\n", v1, v1f), 3.5, 1e-9);
    /* "cpuacct" or "cpuset" alone is not "cpu" */
    CHECK_NEAR(quota_of("4:cpuacct,cpuset:/grp\n", v1, v1f), 0, 0);
    /* both hierarchies: the smaller */
    char both_mi[512];
    snprintf(both_mi, sizeof both_mi, "%s%s", v1, v2);
    const char *both[] = {"sys/fs/cgroup/cpu acct/grp/cpu.cfs_quota_us",
                          "350000\n",
                          "sys/fs/cgroup/cpu acct/grp/cpu.cfs_period_us",
                          "100000\n",
                          "sys/fs/cgroup/x/cpu.max",
                          "150000 100000\n",
                          NULL};
    CHECK_NEAR(quota_of("0::/x\n4:cpu:/grp\n", both_mi, both), 1.5, 1e-9);
    /* missing or bad files are no limit, never an error */
    CHECK_NEAR(quota_of(NULL, NULL, NULL), 0, 0);
    CHECK_NEAR(quota_of("0::/a\n", NULL, NULL), 0, 0);
    CHECK_NEAR(quota_of("0::/a\n", v2, NULL), 0, 0);
    const char *junk[] = {"sys/fs/cgroup/a/cpu.max", "lots\n", NULL};
    CHECK_NEAR(quota_of("0::/a\n", v2, junk), 0, 0);
    CHECK_NEAR(quota_of("garbage without colons\n", "short line\n", junk), 0, 0);
}

/* The real machine: at least one CPU, no more than are online or allowed,
 * and a quota, when there is one, rounds up. */
static void test_syscpu_here(void)
{
    struct ifl_syscpu c;
    ifl_syscpu_read(NULL, &c);
    CHECK(c.n_online >= 1);
    CHECK(c.n_usable >= 1 && c.n_usable <= c.n_online);
    cpu_set_t set;
    CHECK_EQ(sched_getaffinity(0, sizeof set, &set), 0);
    CHECK_EQ(c.n_affinity, CPU_COUNT(&set));
    CHECK(c.n_usable <= c.n_affinity);
    if (c.quota > 0)
        CHECK(c.n_usable >= c.quota - 1e-9 || c.n_usable == c.n_affinity);
    CHECK_EQ(ifl_syscpu_count(1), 1);
    CHECK_EQ(ifl_syscpu_count(512), c.n_usable);
    /* a pool of 0 threads takes that count */
    struct ifl_pool *pool;
    CHECK_EQ(ifl_pool_create(&pool, 0), 0);
    CHECK_EQ(ifl_pool_size(pool), c.n_usable);
    ifl_pool_free(pool);
    /* one CPU in the mask: one thread */
    cpu_set_t one;
    CPU_ZERO(&one);
    for (int i = 0; i < CPU_SETSIZE; i++)
        if (CPU_ISSET(i, &set)) {
            CPU_SET(i, &one);
            break;
        }
    CHECK_EQ(sched_setaffinity(0, sizeof one, &one), 0);
    ifl_syscpu_read(NULL, &c);
    CHECK_EQ(c.n_affinity, 1);
    CHECK_EQ(c.n_usable, 1);
    CHECK_EQ(sched_setaffinity(0, sizeof set, &set), 0);
}

/* core/utf8.h: what is whole, valid UTF-8 (the server's JSON text and
 * chat templates rely on it) */
static void test_utf8(void)
{
    CHECK(ifl_utf8_valid("", 0));
    CHECK(ifl_utf8_valid("a\0b", 3));                                 /* NUL is a character */
    CHECK(ifl_utf8_valid("\xc3\xa9\xe2\x82\xac\xf0\x9f\x98\x80", 9)); /* é € 😀 */
    CHECK(ifl_utf8_valid("\xf4\x8f\xbf\xbf", 4));                     /* U+10FFFF */
    CHECK(!ifl_utf8_valid("\xc0\x80", 2));                            /* overlong NUL */
    CHECK(!ifl_utf8_valid("\xe0\x9f\xbf", 3));                        /* overlong U+07FF */
    CHECK(!ifl_utf8_valid("\xed\xa0\x80", 3));                        /* a surrogate */
    CHECK(!ifl_utf8_valid("\xf4\x90\x80\x80", 4));                    /* above U+10FFFF */
    CHECK(!ifl_utf8_valid("\xe2\x82", 2));                            /* cut short */
    CHECK(!ifl_utf8_valid("\x80", 1)); /* a stray continuation byte */
    const unsigned char euro[] = {0xe2, 0x82, 0xac};
    CHECK_EQ(ifl_utf8_char_len(euro, 3), 3);
    CHECK_EQ(ifl_utf8_char_len(euro, 2), 0);
    char out[4];
    CHECK_EQ(ifl_utf8_encode(0x20ac, out), 3);
    CHECK(memcmp(out, euro, 3) == 0);
    size_t len = 0;
    CHECK_EQ(ifl_utf8_check(euro, 3, &len), IFL_UTF8_OK);
    CHECK_EQ(ifl_utf8_decode(euro, len), 0x20ac);
}

int main(void)
{
    T_RUN(test_strerror);
    T_RUN(test_f16_roundtrip);
    T_RUN(test_bf16);
    T_RUN(test_rng);
    T_RUN(test_pool);
    T_RUN(test_pool_solo);
    T_RUN(test_pool_fetch);
    T_RUN(test_pool_blocking);
    T_RUN(test_pool_oversubscribed);
    T_RUN(test_syscpu_parse);
    T_RUN(test_syscpu_trees);
    T_RUN(test_syscpu_here);
    T_RUN(test_utf8);
    return t_done();
}
