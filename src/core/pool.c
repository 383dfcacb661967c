/*
 * Worker pool (see pool.h). Workers wait for `gen` to change: they spin on
 * it for a while, then sleep on a condition variable. The job's fields are
 * written before `gen` is bumped with release order and read after an
 * acquire load of `gen`, so a worker sees the job that woke it. Completion
 * is an acq_rel counter the caller spins on; the barrier is a sense-reversing
 * counter.
 */
#include "core/pool.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#include "core/err.h"
#include "core/syscpu.h"

/* A pause takes some 10-150 cycles depending on the core: these budgets are
 * tens of microseconds, long enough to bridge the gaps inside and between
 * steps, short enough not to starve a thread that shares the core. */
#define SPIN_IDLE 20000   /* a worker waiting for the next job, then it sleeps */
#define SPIN_WAIT 2000    /* a barrier or the caller waiting, then it yields */

struct ifl_pool {
    int nth;
    pthread_t *threads;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    ifl_pool_fn fn;
    void *arg;
    atomic_uint gen;       /* bumped once per job (release) */
    atomic_int n_done;     /* workers finished with the current job */
    atomic_int n_sleeping; /* workers parked on cv; read by run() */
    atomic_bool stop;
    /* barrier */
    atomic_int bar_count;
    atomic_uint bar_sense;
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

static void *worker_main(void *p)
{
    struct worker_arg wa = *(struct worker_arg *)p;
    free(p);
    struct ifl_pool *pool = wa.pool;
    unsigned seen = 0; /* workers exist before the first job: gen starts at 0 */
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&pool->gen, memory_order_acquire)) == seen &&
               !atomic_load_explicit(&pool->stop, memory_order_acquire)) {
            if (++spins < SPIN_IDLE) {
                cpu_relax();
                continue;
            }
            pthread_mutex_lock(&pool->mu);
            atomic_fetch_add_explicit(&pool->n_sleeping, 1, memory_order_seq_cst);
            while (atomic_load_explicit(&pool->gen, memory_order_acquire) == seen &&
                   !atomic_load_explicit(&pool->stop, memory_order_acquire))
                pthread_cond_wait(&pool->cv, &pool->mu);
            atomic_fetch_sub_explicit(&pool->n_sleeping, 1, memory_order_seq_cst);
            pthread_mutex_unlock(&pool->mu);
            spins = 0;
        }
        if (atomic_load_explicit(&pool->stop, memory_order_acquire))
            return NULL;
        seen = g;
        pool->fn(pool->arg, wa.ith, pool->nth);
        atomic_fetch_add_explicit(&pool->n_done, 1, memory_order_acq_rel);
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
    struct ifl_pool *pool = calloc(1, sizeof(*pool));
    if (!pool)
        return IFL_ENOMEM;
    pool->nth = n_threads;
    pthread_mutex_init(&pool->mu, NULL);
    pthread_cond_init(&pool->cv, NULL);
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
    pthread_mutex_lock(&pool->mu);
    atomic_store_explicit(&pool->stop, 1, memory_order_release);
    pthread_cond_broadcast(&pool->cv);
    pthread_mutex_unlock(&pool->mu);
    for (int i = 1; i < pool->nth; i++)
        pthread_join(pool->threads[i], NULL);
    pthread_mutex_destroy(&pool->mu);
    pthread_cond_destroy(&pool->cv);
    free(pool->threads);
    free(pool);
}

int ifl_pool_size(const struct ifl_pool *pool) { return pool->nth; }

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
    if (atomic_load_explicit(&pool->n_sleeping, memory_order_seq_cst) > 0) {
        pthread_mutex_lock(&pool->mu);
        pthread_cond_broadcast(&pool->cv);
        pthread_mutex_unlock(&pool->mu);
    }
    fn(arg, 0, pool->nth);
    int spins = 0;
    while (atomic_load_explicit(&pool->n_done, memory_order_acquire) != pool->nth - 1) {
        if (++spins < SPIN_WAIT)
            cpu_relax();
        else
            sched_yield();
    }
}

void ifl_pool_barrier(struct ifl_pool *pool)
{
    ifl_pool_barrier_fetch(pool, NULL, 0);
}

void ifl_pool_barrier_fetch(struct ifl_pool *pool, const void *p, size_t n)
{
    if (pool->nth == 1)
        return;
    unsigned sense = atomic_load_explicit(&pool->bar_sense, memory_order_acquire);
    if (atomic_fetch_add_explicit(&pool->bar_count, 1, memory_order_acq_rel) == pool->nth - 1) {
        atomic_store_explicit(&pool->bar_count, 0, memory_order_relaxed);
        atomic_store_explicit(&pool->bar_sense, sense + 1, memory_order_release);
        return;
    }
    int spins = 0;
    size_t off = 0;
    while (atomic_load_explicit(&pool->bar_sense, memory_order_acquire) == sense) {
        if (off < n) {
            /* eight lines between looks at the sense: a look is a cache
             * miss once the last thread has flipped it */
            for (int i = 0; i < 8 && off < n; i++, off += 64)
                __builtin_prefetch((const char *)p + off, 0, 2);
        } else if (++spins < SPIN_WAIT) {
            cpu_relax();
        } else {
            sched_yield();
        }
    }
}
