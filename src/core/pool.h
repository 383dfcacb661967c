/*
 * A fixed pool of worker threads for the kernels of one forward pass.
 *
 * ifl_pool_run(pool, fn, arg) calls fn(arg, ith, nth) once on each of nth
 * threads: the calling thread is ith 0 and the workers are 1..nth-1. It
 * returns when all have returned. Inside fn, threads may meet at
 * ifl_pool_barrier(). Waiting threads spin briefly, then sleep, so a pool
 * between steps costs no CPU and a step costs a few microseconds to start.
 * When waits show that a thread was descheduled (cores shared with other
 * processes, or more threads than cores), the waits block sooner, until they
 * are short again (pool.c says how; IFL_POOL_WAIT=spin|block fixes the mode).
 *
 * Thread safety: one caller at a time (the engine thread). The pool itself is
 * shared by its workers through atomics whose orders are noted in pool.c.
 */
#ifndef IFL_CORE_POOL_H
#define IFL_CORE_POOL_H

#include <stddef.h>

struct ifl_pool;

typedef void (*ifl_pool_fn)(void *arg, int ith, int nth);

/* n_threads >= 1 counts the caller; 0 means one per CPU this process may
 * use (ifl_syscpu_count: affinity mask and cgroup quota). */
int ifl_pool_create(struct ifl_pool **out, int n_threads);
void ifl_pool_free(struct ifl_pool *pool);
int ifl_pool_size(const struct ifl_pool *pool);
void ifl_pool_run(struct ifl_pool *pool, ifl_pool_fn fn, void *arg);
/* fn(arg, 0, 1) on the calling thread alone, the workers left asleep or
 * spinning on their own; barriers inside it return at once. For jobs too
 * small to share: no wake-up, no barrier, no cache line passed between
 * cores. */
void ifl_pool_run_solo(struct ifl_pool *pool, ifl_pool_fn fn, void *arg);
/* How the pool has waited so far: for tests and diagnostics; the figures
 * are read without a lock, each exact but not all of one instant. */
struct ifl_pool_stats {
    long long sleeps;      /* waits that ended asleep on a futex */
    long long to_blocking; /* switches to blocking mode */
    long long to_spinning; /* switches back */
    int blocking;          /* in blocking mode now */
};
void ifl_pool_stats(struct ifl_pool *pool, struct ifl_pool_stats *out);
/* Every thread of the running job must call it the same number of times. */
void ifl_pool_barrier(struct ifl_pool *pool);
/* The same barrier (the calls of both kinds count alike); while a thread
 * waits at it, it asks for the cache lines of [p, p + n) in order, into L2,
 * as many as it has time for: a thread that arrives early fetches the start
 * of what it reads next while the memory bus would idle. */
void ifl_pool_barrier_fetch(struct ifl_pool *pool, const void *p, size_t n);

/* Rows [*lo, *hi) of n for thread ith of nth, in contiguous even shares. */
static inline void ifl_pool_split(long n, int ith, int nth, long *lo, long *hi)
{
    *lo = n * ith / nth;
    *hi = n * (ith + 1) / nth;
}

#endif
