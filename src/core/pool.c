/*
 * Worker pool (see pool.h). Workers wait for `gen` to change; the caller
 * waits for `n_done` to reach nth - 1; the barrier is a sense-reversing
 * counter whose waiters wait for `bar_sense` to change. The job's fields are
 * written before `gen` is bumped and read after an acquire load of `gen`, so
 * a worker sees the job that woke it.
 *
 * Every wait spins for a budget, then sleeps on a futex of the word it
 * watches (FUTEX_WAIT compares the word in the kernel, so a change between
 * the last look and the sleep is never missed). A sleeper first adds itself
 * to a count with seq_cst; the thread that changes the word stores it with
 * seq_cst and then reads the count, so of the two at least one sees the
 * other's write (the store-load pattern that needs seq_cst on both sides):
 * either the sleeper finds the word changed, or the waker wakes it.
 *
 * Why the budget adapts: on cores that other processes also use, a thread is
 * descheduled for a time slice (a millisecond or more) while the others spin
 * at a barrier for it; with two threads on a loaded machine, wall time
 * reached 10-15x the CPU time. Spinning is right on a quiet machine, where a
 * barrier waits a few microseconds of imbalance and a futex wake costs more
 * than that; blocking is right when the threads compete for the cores, as it
 * hands the waiting thread's core to the descheduled one or to the other
 * process. The signal is each thread's run delay, the time it was runnable
 * but waited for a CPU (/proc/thread-self/schedstat, field 2), as a share of
 * the time since its last look: it is the competition itself, and unlike the
 * length of the waits it does not change with the mode (a thread asleep on a
 * futex is not runnable; a woken one waits for a CPU only if none is free).
 * Every thread looks about once a WINDOW_NS, at the end of a job; the caller
 * then takes the largest share: ENTER_PERMILLE or more switches to blocking
 * waits (a short spin, then the futex), less than LEAVE_PERMILLE back to
 * spinning. Where schedstat cannot be read the pool keeps spinning, and a
 * spin still ends in a sleep after LONG_NS. IFL_POOL_WAIT=spin|block in the
 * environment fixes the mode (tests, and comparing the two).
 */
#include "core/pool.h"

#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "core/err.h"
#include "core/syscpu.h"

/* The spin budget of a wait at a barrier or for the job's end in spinning
 * mode: far above a quiet machine's imbalance between threads (a few to some
 * tens of microseconds), short beside a time slice lost to another process
 * (about a millisecond or more). */
#define LONG_NS 200000
/* How often each thread reads its run delay, and the shares of that time
 * spent waiting for a CPU that switch to blocking and back (hysteresis
 * between them). Measured on the 2-core machine in 50 ms windows, the larger
 * of two threads' shares, 16-sequence decode: with a busy loop pinned to one
 * core, 36-47 % (the middle half of the windows); with the machine's other
 * processes given far less weight than ours (their sessions' autogroups at
 * nice 0, ours at -19), 2-9 %, at most 18 %. */
#define WINDOW_NS 50000000
#define ENTER_PERMILLE 250
#define LEAVE_PERMILLE 120
/* The spin before a sleep in blocking mode: bridges a barrier's usual
 * imbalance while both threads run, which a futex round trip would lengthen
 * (with another process pinned to one of two cores: 4 us gave 860-920
 * tokens/s, 30 us 976-982, 100 us 855-865 in the 16-sequence decode). */
#define BLOCK_SPIN_NS 30000
/* A worker waiting for the next job in spinning mode: bridges the engine's
 * work between forward passes; then it sleeps, so an idle pool costs no CPU. */
#define IDLE_SPIN_NS 500000

enum { MODE_ADAPT, MODE_SPIN, MODE_BLOCK };

/* One thread's last look at its run delay. */
struct probe {
    int64_t t_ns;     /* when; 0: never */
    int64_t delay_ns; /* the run delay then */
    pid_t tid;        /* whose (the caller may be another thread next time) */
};

struct ifl_pool {
    int nth;
    int mode; /* MODE_*, fixed at creation */
    pthread_t *threads;
    ifl_pool_fn fn;
    void *arg;
    atomic_uint gen;          /* bumped once per job (seq_cst) */
    atomic_uint n_done;       /* workers finished with the current job */
    atomic_int idle_sleepers; /* workers asleep on gen */
    atomic_int done_sleeper;  /* the caller asleep on n_done */
    atomic_bool stop;
    /* 1 while a job of ifl_pool_run_solo runs (the caller's only: workers
     * read it in barriers of ifl_pool_run's jobs, after gen's acquire) */
    int solo;
    /* barrier */
    atomic_int bar_count;
    atomic_uint bar_sense;
    atomic_int bar_sleepers; /* threads asleep on bar_sense */
    /* adaptation: on its own line, so that a worker reporting its share does
     * not take the barrier's line from the spinning threads */
    _Alignas(64) atomic_int blocking; /* 1: blocking mode (relaxed: a hint) */
    atomic_int win_permille;          /* the largest share reported in this window */
    int64_t win_start_ns;             /* the caller's: when this window began */
    struct probe caller_probe;        /* the caller's */
    atomic_llong n_sleeps, n_to_blocking, n_to_spinning; /* statistics (relaxed) */
};

struct worker_arg {
    struct ifl_pool *pool;
    int ith;
};

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void futex_wait(atomic_uint *word, unsigned expected)
{
    /* returns at once (EAGAIN) when *word != expected; spurious wakes and
     * EINTR are fine, every caller looks at the word again */
    syscall(SYS_futex, (unsigned *)word, FUTEX_WAIT_PRIVATE, expected, NULL, NULL, 0);
}

static void futex_wake(atomic_uint *word, int n)
{
    syscall(SYS_futex, (unsigned *)word, FUTEX_WAKE_PRIVATE, n, NULL, NULL, 0);
}

static int blocking(struct ifl_pool *pool)
{
    return atomic_load_explicit(&pool->blocking, memory_order_relaxed);
}

/* The calling thread's share (per mille) of the time since its last look
 * that it spent runnable but not running; -1 when unknown (the first look,
 * another thread's probe, or no schedstat). */
static int probe_share(struct probe *p, int64_t now)
{
    char buf[96];
    int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    unsigned long long run, delay;
    if (n <= 0 || (buf[n] = 0, sscanf(buf, "%llu %llu", &run, &delay) != 2))
        return -1;
    pid_t tid = (pid_t)syscall(SYS_gettid);
    int share = -1;
    if (p->t_ns && p->tid == tid && now > p->t_ns && (int64_t)delay >= p->delay_ns) {
        int64_t s = ((int64_t)delay - p->delay_ns) * 1000 / (now - p->t_ns);
        share = s > 1000 ? 1000 : (int)s;
    }
    p->t_ns = now;
    p->delay_ns = (int64_t)delay;
    p->tid = tid;
    return share;
}

/* A thread at the end of a job: once a window, report its share. */
static void report(struct ifl_pool *pool, struct probe *p, int64_t now)
{
    if (pool->mode != MODE_ADAPT || now - p->t_ns < WINDOW_NS)
        return;
    int share = probe_share(p, now);
    int cur = atomic_load_explicit(&pool->win_permille, memory_order_relaxed);
    while (share > cur &&
           !atomic_compare_exchange_weak_explicit(&pool->win_permille, &cur, share,
                                                  memory_order_relaxed, memory_order_relaxed)) {
    }
}

/* The caller at the end of a job: once a window, pick the mode from the
 * largest share the threads reported. */
static void adapt(struct ifl_pool *pool, int64_t now)
{
    if (pool->mode != MODE_ADAPT || now - pool->win_start_ns < WINDOW_NS)
        return;
    pool->win_start_ns = now;
    int share = atomic_exchange_explicit(&pool->win_permille, -1, memory_order_relaxed);
    if (share < 0)
        return; /* no thread knew its run delay */
    if (!blocking(pool) && share >= ENTER_PERMILLE) {
        atomic_store_explicit(&pool->blocking, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&pool->n_to_blocking, 1, memory_order_relaxed);
    } else if (blocking(pool) && share < LEAVE_PERMILLE) {
        atomic_store_explicit(&pool->blocking, 0, memory_order_relaxed);
        atomic_fetch_add_explicit(&pool->n_to_spinning, 1, memory_order_relaxed);
    }
}

/* Sleeps until *word != old; *sleepers counts the sleepers for the waker. */
static void sleep_on(struct ifl_pool *pool, atomic_uint *word, unsigned old, atomic_int *sleepers)
{
    atomic_fetch_add_explicit(sleepers, 1, memory_order_seq_cst);
    while (atomic_load_explicit(word, memory_order_seq_cst) == old)
        futex_wait(word, old);
    atomic_fetch_sub_explicit(sleepers, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&pool->n_sleeps, 1, memory_order_relaxed);
}

/* Spins until *word != old, for up to budget_ns, then sleeps. */
static void wait_word(struct ifl_pool *pool, atomic_uint *word, unsigned old, atomic_int *sleepers,
                      int64_t budget_ns)
{
    int64_t t0 = 0;
    for (int spins = 1; atomic_load_explicit(word, memory_order_acquire) == old; spins++) {
        cpu_relax();
        if (spins % 16)
            continue;
        /* the clock only once a wait is more than a few hundred cycles */
        int64_t t = now_ns();
        if (!t0)
            t0 = t;
        else if (t - t0 > budget_ns) {
            sleep_on(pool, word, old, sleepers);
            return;
        }
    }
}

static void *worker_main(void *p)
{
    struct worker_arg wa = *(struct worker_arg *)p;
    free(p);
    struct ifl_pool *pool = wa.pool;
    struct probe probe = {0};
    unsigned seen = 0; /* workers exist before the first job: gen starts at 0 */
    for (;;) {
        wait_word(pool, &pool->gen, seen, &pool->idle_sleepers,
                  blocking(pool) ? BLOCK_SPIN_NS : IDLE_SPIN_NS);
        seen = atomic_load_explicit(&pool->gen, memory_order_acquire);
        if (atomic_load_explicit(&pool->stop, memory_order_acquire))
            return NULL;
        pool->fn(pool->arg, wa.ith, pool->nth);
        atomic_fetch_add_explicit(&pool->n_done, 1, memory_order_seq_cst);
        if (atomic_load_explicit(&pool->done_sleeper, memory_order_seq_cst))
            futex_wake(&pool->n_done, 1);
        report(pool, &probe, now_ns()); /* off the job's path: the caller goes on */
    }
}

int ifl_pool_create(struct ifl_pool **out, int n_threads)
{
    *out = NULL;
    if (n_threads < 0)
        return IFL_EINVAL;
    if (n_threads == 0)
        n_threads = ifl_syscpu_count(512);
    if (n_threads > 512)
        return IFL_EINVAL;
    struct ifl_pool *pool = aligned_alloc(64, (sizeof(*pool) + 63) / 64 * 64);
    if (!pool)
        return IFL_ENOMEM;
    memset(pool, 0, sizeof(*pool));
    pool->nth = n_threads;
    const char *env = getenv("IFL_POOL_WAIT");
    pool->mode = !env                    ? MODE_ADAPT
                 : !strcmp(env, "spin")  ? MODE_SPIN
                 : !strcmp(env, "block") ? MODE_BLOCK
                                         : MODE_ADAPT;
    atomic_store_explicit(&pool->blocking, pool->mode == MODE_BLOCK, memory_order_relaxed);
    atomic_store_explicit(&pool->win_permille, -1, memory_order_relaxed);
    pool->win_start_ns = now_ns();
    pool->threads = calloc((size_t)n_threads, sizeof(pthread_t));
    if (!pool->threads) {
        free(pool);
        return IFL_ENOMEM;
    }
    for (int i = 1; i < n_threads; i++) {
        struct worker_arg *wa = malloc(sizeof(*wa));
        if (!wa || (wa->pool = pool, wa->ith = i,
                    pthread_create(&pool->threads[i], NULL, worker_main, wa) != 0)) {
            free(wa);
            pool->nth = i; /* workers 1..i-1 exist */
            ifl_pool_free(pool);
            return IFL_ENOMEM;
        }
    }
    *out = pool;
    return 0;
}

void ifl_pool_free(struct ifl_pool *pool)
{
    if (!pool)
        return;
    atomic_store_explicit(&pool->stop, 1, memory_order_seq_cst);
    atomic_fetch_add_explicit(&pool->gen, 1, memory_order_seq_cst);
    futex_wake(&pool->gen, INT_MAX);
    for (int i = 1; i < pool->nth; i++)
        pthread_join(pool->threads[i], NULL);
    free(pool->threads);
    free(pool);
}

int ifl_pool_size(const struct ifl_pool *pool)
{
    return pool->nth;
}

void ifl_pool_stats(struct ifl_pool *pool, struct ifl_pool_stats *out)
{
    out->sleeps = atomic_load_explicit(&pool->n_sleeps, memory_order_relaxed);
    out->to_blocking = atomic_load_explicit(&pool->n_to_blocking, memory_order_relaxed);
    out->to_spinning = atomic_load_explicit(&pool->n_to_spinning, memory_order_relaxed);
    out->blocking = blocking(pool);
}

void ifl_pool_run(struct ifl_pool *pool, ifl_pool_fn fn, void *arg)
{
    if (pool->nth == 1) {
        fn(arg, 0, 1);
        return;
    }
    pool->fn = fn;
    pool->arg = arg;
    atomic_store_explicit(&pool->n_done, 0, memory_order_relaxed);
    atomic_fetch_add_explicit(&pool->gen, 1, memory_order_seq_cst);
    if (atomic_load_explicit(&pool->idle_sleepers, memory_order_seq_cst) > 0)
        futex_wake(&pool->gen, INT_MAX);
    fn(arg, 0, pool->nth);
    const int64_t done_ns = now_ns();
    const unsigned all = (unsigned)pool->nth - 1;
    const int64_t budget = blocking(pool) ? BLOCK_SPIN_NS : LONG_NS;
    unsigned d;
    for (int spins = 1; (d = atomic_load_explicit(&pool->n_done, memory_order_acquire)) != all;
         spins++) {
        cpu_relax();
        if (spins % 16 || now_ns() - done_ns <= budget)
            continue;
        /* n_done counts up: sleep on each value until the last */
        atomic_store_explicit(&pool->done_sleeper, 1, memory_order_seq_cst);
        while ((d = atomic_load_explicit(&pool->n_done, memory_order_seq_cst)) != all)
            futex_wait(&pool->n_done, d);
        atomic_store_explicit(&pool->done_sleeper, 0, memory_order_relaxed);
        atomic_fetch_add_explicit(&pool->n_sleeps, 1, memory_order_relaxed);
        break;
    }
    report(pool, &pool->caller_probe, done_ns);
    adapt(pool, done_ns);
}

void ifl_pool_run_solo(struct ifl_pool *pool, ifl_pool_fn fn, void *arg)
{
    pool->solo = 1;
    fn(arg, 0, 1);
    pool->solo = 0;
}

void ifl_pool_barrier(struct ifl_pool *pool)
{
    ifl_pool_barrier_fetch(pool, NULL, 0);
}

void ifl_pool_barrier_fetch(struct ifl_pool *pool, const void *p, size_t n)
{
    if (pool->nth == 1 || pool->solo)
        return;
    unsigned sense = atomic_load_explicit(&pool->bar_sense, memory_order_acquire);
    if (atomic_fetch_add_explicit(&pool->bar_count, 1, memory_order_acq_rel) == pool->nth - 1) {
        atomic_store_explicit(&pool->bar_count, 0, memory_order_relaxed);
        atomic_store_explicit(&pool->bar_sense, sense + 1, memory_order_seq_cst);
        if (atomic_load_explicit(&pool->bar_sleepers, memory_order_seq_cst) > 0)
            futex_wake(&pool->bar_sense, INT_MAX);
        return;
    }
    /* eight lines between looks at the sense: a look is a cache miss once
     * the last thread has flipped it */
    for (size_t off = 0;
         off < n && atomic_load_explicit(&pool->bar_sense, memory_order_acquire) == sense;)
        for (int i = 0; i < 8 && off < n; i++, off += 64)
            __builtin_prefetch((const char *)p + off, 0, 2);
    wait_word(pool, &pool->bar_sense, sense, &pool->bar_sleepers,
              blocking(pool) ? BLOCK_SPIN_NS : LONG_NS);
}
