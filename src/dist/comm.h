/*
 * The communication layer between ranks (processes of one job started by
 * mpirun): rank and size, a float32 sum all-reduce in place, a byte
 * broadcast from a root, and a barrier. Tensor parallelism needs nothing
 * more: the forward pass sums the partial products of its slices twice a
 * layer, and rank 0 sends each step's batch to the others.
 *
 * Every collective takes a deadline. A rank that died or stopped answering
 * would leave a blocking MPI call waiting forever; here the call returns
 * IFL_ETIMEDOUT instead, so rank 0 can fail its requests and exit. After a
 * timeout (or an MPI error) the communicator is broken: the collective is
 * still pending inside MPI and cannot be cancelled, so every later call
 * returns IFL_ESTATE and ifl_comm_finalize leaves MPI alone. The process
 * should then exit with a non-zero status, which makes mpirun end the job.
 *
 * Builds: with MPI (the Makefile defines IFL_HAVE_MPI when it finds mpicc)
 * and without. Without, or when the process was not started by a launcher
 * (mpirun, mpiexec, srun), the communicator is one rank: the collectives
 * return at once and leave the data as it is (a sum over one rank). A
 * process that a launcher started as one of several ranks in a build
 * without MPI gets IFL_EUNSUPPORTED from ifl_comm_init.
 *
 * Thread safety: one call at a time per process (MPI_THREAD_SERIALIZED),
 * from any thread; the engine thread is the intended caller. The
 * collectives allocate nothing.
 */
#ifndef IFL_DIST_COMM_H
#define IFL_DIST_COMM_H

#include <stddef.h>

struct ifl_comm;

/* Waiting without a deadline: for a worker rank idle between steps, which
 * cannot know when the next one comes (rank 0's keep-alives bound it). */
#define IFL_COMM_FOREVER (-1.0)

/* 1 if this build can talk MPI, 0 if every communicator is one rank. */
int ifl_comm_have_mpi(void);

/* Joins the job: MPI_Init_thread when a launcher started this process
 * (OMPI_COMM_WORLD_SIZE, PMI_SIZE or PMIX_RANK in the environment) and MPI
 * is not initialised yet, else one rank without touching MPI. A process
 * that ifl_comm_spawn started joins its parent's job (as rank 1..n-1). An MPI that
 * the application initialised itself is used and left to it. One live
 * communicator per process; MPI cannot start again after it finalised,
 * nor after a communicator broke.
 * Returns 0, IFL_EUNSUPPORTED (several ranks, no MPI in this build),
 * IFL_ESTATE (one is live, MPI finalised, or one broke), IFL_EIO (MPI failed),
 * IFL_ENOMEM; err (IFL_ERR_LEN bytes, may be NULL) says which. */
int ifl_comm_init(struct ifl_comm **out, char *err);
/* Whether a launcher (mpirun, mpiexec, srun, or Open MPI's spawn) started
 * this process: what ifl_comm_init looks at to decide between MPI and one
 * rank. */
int ifl_comm_launched(void);

/* Orchestrator mode: a process that no launcher started becomes rank 0 of
 * a job of n ranks by starting n - 1 workers itself: MPI as a singleton,
 * MPI_Comm_spawn of path with argv (argv[0] is the first argument, as MPI
 * has it; NULL-terminated) on this machine, unbound and oversubscribing
 * its cores if there are fewer than ranks, their standard input closed;
 * then one communicator of the n processes, this one rank 0, the workers
 * 1..n-1. A worker joins by calling ifl_comm_init, which finds the parent
 * that spawned it.
 *
 * Open MPI 4.1 blocks in MPI_Comm_spawn and in the join until every worker
 * has started MPI, without a deadline: a worker that dies before (cannot
 * start, crashes while starting) makes this call wait forever. The caller
 * bounds it itself (the CLI runs a watchdog that ends the process).
 *
 * While the job runs, a collective that waits also looks about every
 * 100 ms whether the workers are alive, and fails at once (IFL_EIO, broken)
 * naming the rank that died instead of waiting out its deadline. Finalize
 * of a broken communicator kills the workers that are left (SIGKILL) and
 * waits for them (up to 2 s), so that none outlives rank 0; Open MPI's
 * daemon (orted, a child of this process) ends them too when rank 0 dies
 * without finalize.
 * Returns 0, IFL_EINVAL (n < 2, path NULL), IFL_EUNSUPPORTED (no MPI in
 * this build), IFL_ESTATE (a communicator is live, MPI already running:
 * started by a launcher, or finalised), IFL_EIO (MPI refused: the sentence
 * says why), IFL_ENOMEM. */
int ifl_comm_spawn(struct ifl_comm **out, int n, const char *path, char *const argv[], char *err);

/* Leaves the job (MPI_Finalize if init started MPI and the communicator is
 * not broken; see ifl_comm_spawn for a broken one that spawned its
 * workers). NULL does nothing. */
void ifl_comm_finalize(struct ifl_comm *comm);

int ifl_comm_rank(const struct ifl_comm *comm);
int ifl_comm_size(const struct ifl_comm *comm);
/* Whether a collective on comm timed out or failed (a rank died, MPI
 * reported an error): from then on every call fails. Read it only when no
 * other thread is in a collective on comm (after a call that failed). */
int ifl_comm_broken(const struct ifl_comm *comm);

/* buf[0..n) becomes the sum over all ranks of their buf, on every rank,
 * bit for bit the same everywhere. Every rank calls it with the same n.
 * timeout_s >= 0 bounds the wait (IFL_COMM_FOREVER: none). Returns 0,
 * IFL_EINVAL (n over INT_MAX, buf NULL with n > 0, timeout not a number),
 * IFL_ETIMEDOUT (the others did not all join in time: broken from now
 * on), IFL_EIO (MPI reported an error: broken), IFL_ESTATE (broken). */
int ifl_comm_allreduce_sum(struct ifl_comm *comm, float *buf, size_t n, double timeout_s,
                           char *err);
/* buf[0..nbytes) of rank root is copied into buf of every other rank.
 * Same arguments on every rank; statuses as for the all-reduce, and
 * IFL_EINVAL for a root outside [0, size). */
int ifl_comm_broadcast(struct ifl_comm *comm, void *buf, size_t nbytes, int root, double timeout_s,
                       char *err);
/* Gathers nbytes of send from every rank into recv of rank root, rank i's
 * counts[i] bytes after those of ranks 0..i-1 (recv and counts are read
 * on the root only; counts[root] must equal the root's nbytes, and the
 * total must fit an int). The root's send must not overlap recv. Statuses
 * as for the broadcast. */
int ifl_comm_gather(struct ifl_comm *comm, const void *send, size_t nbytes, void *recv,
                    const size_t *counts, int root, double timeout_s, char *err);
/* Returns when every rank has called it, or times out as above. */
int ifl_comm_barrier(struct ifl_comm *comm, double timeout_s, char *err);

/* What the collectives have cost so far (engine thread; for /metrics and
 * the allreduce share of a step). */
struct ifl_comm_stats {
    long long calls;    /* collectives that completed */
    long long bytes;    /* payload bytes of those (per rank, not on the wire) */
    double seconds;     /* time spent inside them, waiting included */
    double max_seconds; /* the longest single one */
};
void ifl_comm_stats(const struct ifl_comm *comm, struct ifl_comm_stats *out);

#endif
