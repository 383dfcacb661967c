/*
 * The communication layer (comm.h) on MPI-3: non-blocking collectives
 * (MPI_Iallreduce, MPI_Ibcast, MPI_Ibarrier) completed by polling MPI_Test
 * against a deadline, on a duplicate of MPI_COMM_WORLD whose errors are
 * returned rather than fatal. Only standard MPI-3 calls: it builds against
 * Open MPI and MPICH alike.
 *
 * Why polling a non-blocking collective rather than the blocking call: a
 * blocking MPI_Allreduce whose peer died never returns (Open MPI over
 * shared memory just waits; nothing in MPI-3 times a collective out), and
 * the only ways out of it, a watchdog thread calling MPI_Abort or a
 * heartbeat on a second communicator, either kill rank 0 before it can
 * answer its clients or need MPI_THREAD_MULTIPLE and still leave the
 * engine thread stuck in the call. MPI_Test hands control back between
 * polls, so the caller sees IFL_ETIMEDOUT and decides. The price is MPI's
 * non-blocking algorithms (Open MPI's libnbc) instead of its tuned
 * blocking ones; tools/commbench.c measures both (docs/distributed.md).
 *
 * The wait spins first (a collective between two ranks on one machine
 * takes microseconds, and a sleep would add tens), then yields the CPU
 * (another rank or a kernel thread may need this core), then sleeps in
 * short naps (a wait this long is a rank far behind or a fault; a nap adds
 * well under 1% to it).
 *
 * Unless the ranks compete for CPUs: then a waiting rank that spins burns
 * the time its peer (on the same cores, or in the same CPU cgroup) needs
 * to reach the collective, and every collective of a forward pass waits a
 * time slice. The tensor parallel decode of tinyllama over two ranks on
 * this 2-core machine, loaded by other builds, spent 92% of each step in
 * collectives that way. As the thread pool does (core/pool.c), the wait
 * reads the calling thread's run delay (/proc/thread-self/schedstat: time
 * runnable but not running) about every 50 ms: when it is a quarter or
 * more of the time, waits spin only briefly and then nap, until it falls
 * under an eighth.
 */
#include "dist/comm.h"

#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "core/err.h"
#include "core/timeutil.h"

#ifdef IFL_HAVE_MPI
#include <mpi.h>
#endif

/* The wait's phases, in seconds since the collective started. */
#define SPIN_S 0.002             /* poll without pause */
#define YIELD_S 0.020            /* poll, yielding the CPU between polls */
#define NAP_NS 50000L            /* then poll every 50 us */
#define CONTENDED_SPIN_S 0.00002 /* competing for CPUs: spin this long, then nap */
#define WINDOW_S 0.05            /* how often the run delay is read */
#define ENTER_PERMILLE 250       /* runnable-but-waiting share that starts napping */
#define LEAVE_PERMILLE 120       /* and the share under which spinning resumes */
#define ALIVE_S 0.1              /* a spawned job's rank 0 looks at its workers this often */
#define REAP_S 2.0               /* and waits this long for them at a broken finalize */

struct ifl_comm {
    int rank, size;
    int broken;      /* a collective timed out or failed: see why */
    int mpi_started; /* ifl_comm_init called MPI_Init_thread */
    int use_mpi;     /* size > 1 or MPI in use: the collectives go through mc */
    int *pids;       /* [size] rank 0 of a spawned job: its workers' process ids */
    double alive_t;  /* when they were last looked at */
#ifdef IFL_HAVE_MPI
    MPI_Comm mc; /* MPI_COMM_WORLD duplicated, errors returned */
#endif
    int *gcount, *gdispl; /* [size] a gather's byte counts and places (root only) */
    int napping;          /* the ranks compete for CPUs: wait in naps (top of the file) */
    double probe_t;       /* when the run delay was last read, and what it was (ns) */
    long long probe_delay;
    char why[IFL_ERR_LEN]; /* the sentence of the failure that broke it */
    struct ifl_comm_stats st;
};

/* One live communicator per process: MPI has one world. Set by init,
 * cleared by finalize; seq_cst is plenty for a flag taken twice a run. */
static atomic_int g_live;
/* A communicator broke in this process: MPI still holds its pending
 * collective, and a new communicator (MPI_Comm_dup is collective) would
 * wait on the dead rank. Set by finalize of a broken one. */
#ifdef IFL_HAVE_MPI
static atomic_int g_broken;
#endif

int ifl_comm_have_mpi(void)
{
#ifdef IFL_HAVE_MPI
    return 1;
#else
    return 0;
#endif
}

/* The launcher's word on this process: its rank and the job's size, -1
 * where it says nothing. Open MPI sets OMPI_COMM_WORLD_*, MPICH's hydra
 * and Slurm's PMI-2 PMI_*, PMIx launchers PMIX_RANK. */
static long env_long(const char *name)
{
    const char *s = getenv(name);
    if (!s || !*s)
        return -1;
    char *end;
    long v = strtol(s, &end, 10);
    return *end == '\0' && v >= 0 ? v : -1;
}

static int launched(long *size, long *rank);

int ifl_comm_launched(void)
{
    long size, rank;
    return launched(&size, &rank);
}

static int launched(long *size, long *rank)
{
    *size = env_long("OMPI_COMM_WORLD_SIZE");
    if (*size < 0)
        *size = env_long("PMI_SIZE");
    *rank = env_long("OMPI_COMM_WORLD_RANK");
    if (*rank < 0)
        *rank = env_long("PMI_RANK");
    if (*rank < 0)
        *rank = env_long("PMIX_RANK");
    return *size >= 0 || *rank >= 0;
}

#ifndef IFL_HAVE_MPI
static int single_rank(char *err)
{
    long size, rank;
    if (launched(&size, &rank) && (size > 1 || rank > 0))
        return ifl_err(err, IFL_EUNSUPPORTED,
                       "dist: started by a launcher as rank %ld of %ld, but this build has no "
                       "MPI (install libopenmpi-dev, rebuild with make, run again)",
                       rank, size);
    return 0;
}
#endif

#ifdef IFL_HAVE_MPI
static int mpi_fail(struct ifl_comm *c, char *err, int mrc, const char *what)
{
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    if (MPI_Error_string(mrc, msg, &len) != MPI_SUCCESS)
        len = 0;
    msg[len] = '\0';
    if (c) {
        c->broken = 1;
        ifl_err(c->why, IFL_EIO, "dist: %s failed on rank %d of %d: %s", what, c->rank, c->size,
                msg);
        return ifl_err(err, IFL_EIO, "%s", c->why);
    }
    return ifl_err(err, IFL_EIO, "dist: %s failed: %s", what, msg);
}

static int setup(struct ifl_comm *c, int mrc, int spawned, char *err);
static int start_mpi(struct ifl_comm *c, int inited, char *err);

static int init_mpi(struct ifl_comm *c, char *err)
{
    if (atomic_load(&g_broken))
        return ifl_err(err, IFL_ESTATE,
                       "dist: an earlier communicator of this process broke; MPI cannot "
                       "be used again until the process restarts");
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    if (finalized)
        return ifl_err(err, IFL_ESTATE,
                       "dist: MPI was finalised in this process and cannot "
                       "start again");
    long size, rank;
    if (!inited && !launched(&size, &rank))
        return 0; /* not started by mpirun: one rank, MPI left alone */
    int rc = start_mpi(c, inited, err);
    if (rc)
        return rc;
    /* spawned by ifl_comm_spawn: the job is the parent and its children */
    MPI_Comm parent = MPI_COMM_NULL;
    MPI_Comm_get_parent(&parent);
    int mrc;
    if (parent != MPI_COMM_NULL)
        mrc = MPI_Intercomm_merge(parent, 1, &c->mc);
    else
        mrc = MPI_Comm_dup(MPI_COMM_WORLD, &c->mc);
    return setup(c, mrc, parent != MPI_COMM_NULL, err);
}

/* MPI_Init_thread unless the application did it (inited), and the thread
 * level inflight needs. */
static int start_mpi(struct ifl_comm *c, int inited, char *err)
{
    int provided = 0, mrc;
    if (!inited) {
        /* Open MPI's non-blocking all-reduce (coll/libnbc) picks a binomial
         * tree whenever there are fewer than 4 ranks: 5-10 times slower
         * than its blocking one at 1 M floats between two ranks here.
         * Rabenseifner's reduce-scatter + all-gather (algorithm 3) matches
         * the blocking call at every size measured (docs/distributed.md).
         * A value the user set wins; other MPIs ignore the variable. */
        setenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm", "3", 0);
        mrc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &provided);
        if (mrc != MPI_SUCCESS)
            return mpi_fail(NULL, err, mrc, "MPI_Init_thread");
        c->mpi_started = 1;
    } else {
        MPI_Query_thread(&provided);
    }
    /* the engine thread calls, but not the thread that initialised */
    if (provided < MPI_THREAD_SERIALIZED) {
        if (c->mpi_started)
            MPI_Finalize();
        return ifl_err(err, IFL_EUNSUPPORTED,
                       "dist: this MPI offers thread level %d; inflight needs "
                       "MPI_THREAD_SERIALIZED (%d)",
                       provided, MPI_THREAD_SERIALIZED);
    }
    return 0;
}

/* The communicator's errors, rank, size and buffers, once c->mc exists
 * (mrc: how creating it went). A spawned job also sends rank 0 each
 * rank's process id (ifl_comm_spawn: its liveness checks and cleanup). */
static int setup(struct ifl_comm *c, int mrc, int spawned, char *err)
{
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Comm_set_errhandler(c->mc, MPI_ERRORS_RETURN);
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Comm_rank(c->mc, &c->rank);
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Comm_size(c->mc, &c->size);
    if (mrc == MPI_SUCCESS && spawned) {
        int pid = (int)getpid();
        if (c->rank == 0 && !(c->pids = malloc(sizeof(int) * (size_t)c->size)))
            mrc = MPI_ERR_NO_MEM;
        else
            mrc = MPI_Gather(&pid, 1, MPI_INT, c->pids, 1, MPI_INT, 0, c->mc);
    }
    if (mrc != MPI_SUCCESS) {
        int rc = mpi_fail(NULL, err, mrc, "creating the communicator");
        free(c->pids);
        if (c->mpi_started)
            MPI_Finalize();
        return rc;
    }
    c->gcount = malloc(sizeof(int) * (size_t)c->size);
    c->gdispl = malloc(sizeof(int) * (size_t)c->size);
    if (!c->gcount || !c->gdispl) {
        free(c->gcount);
        free(c->gdispl);
        free(c->pids);
        MPI_Comm_free(&c->mc);
        if (c->mpi_started)
            MPI_Finalize();
        return ifl_err(err, IFL_ENOMEM, "dist: out of memory for the communicator");
    }
    c->use_mpi = 1;
    return 0;
}

/* ifl_comm_spawn's MPI part (comm.h). Open MPI would map the workers onto
 * the singleton's slots (one per core: a 2-core machine refuses 2 workers
 * besides rank 0) and bind each to one core (a worker's threads would
 * share it); map_by :OVERSUBSCRIBE and bind_to none start them as mpirun
 * --oversubscribe --bind-to none does. Other MPIs ignore keys they do not
 * know. Open MPI's daemon (orted, forked by MPI_Init_thread) forwards its
 * standard input to the first worker: it gets /dev/null instead of this
 * process's (the info key ompi_stdin_target would say so, but Open MPI
 * 4.1's daemon crashes on it: it reads the number it is given as a
 * string). */
static int spawn_mpi(struct ifl_comm *c, int n, const char *path, char *const argv[], char *err)
{
    if (atomic_load(&g_broken))
        return ifl_err(err, IFL_ESTATE,
                       "dist: an earlier communicator of this process broke; MPI cannot "
                       "be used again until the process restarts");
    int inited = 0, finalized = 0;
    MPI_Initialized(&inited);
    MPI_Finalized(&finalized);
    long size, rank;
    if (inited || finalized || launched(&size, &rank))
        return ifl_err(err, IFL_ESTATE,
                       "dist: spawning workers needs a process that no launcher started and "
                       "that has not started MPI (%s)",
                       finalized ? "MPI was finalised"
                       : inited  ? "MPI is running"
                                 : "mpirun did");
    /* Open MPI 4.1's shared memory transport (vader) does not connect
     * processes of two jobs, and a spawned job is a second one: rank 0
     * talks to its workers over TCP (they talk among themselves over
     * shared memory). Its TCP transport leaves out the loopback interface
     * unless told, and a container may have no other; the workers run on
     * this machine, so loopback it is, unless the user chose interfaces.
     * The daemon and the workers inherit the variable. */
    if (!getenv("OMPI_MCA_btl_tcp_if_include") && !getenv("OMPI_MCA_btl_tcp_if_exclude"))
        setenv("OMPI_MCA_btl_tcp_if_include", "lo", 1);
    int in = dup(0), nul = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (in >= 0 && nul >= 0)
        dup2(nul, 0);
    int rc = start_mpi(c, 0, err);
    if (in >= 0 && nul >= 0)
        dup2(in, 0);
    if (in >= 0)
        close(in);
    if (nul >= 0)
        close(nul);
    if (rc)
        return rc;
    int *codes = malloc(sizeof(int) * (size_t)n);
    if (!codes) {
        MPI_Finalize();
        return ifl_err(err, IFL_ENOMEM, "dist: out of memory");
    }
    MPI_Comm inter = MPI_COMM_NULL;
    MPI_Info info = MPI_INFO_NULL;
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    int mrc = MPI_Info_create(&info);
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Info_set(info, "map_by", ":OVERSUBSCRIBE");
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Info_set(info, "bind_to", "none");
    if (mrc == MPI_SUCCESS)
        mrc = MPI_Comm_spawn(path, (char **)argv, n - 1, info, 0, MPI_COMM_SELF, &inter, codes);
    if (info != MPI_INFO_NULL)
        MPI_Info_free(&info);
    free(codes);
    if (mrc != MPI_SUCCESS) {
        /* MPI may hold pieces of the failed start: leave it alone */
        atomic_store(&g_broken, 1);
        return mpi_fail(NULL, err, mrc, "starting the workers (MPI_Comm_spawn)");
    }
    mrc = MPI_Intercomm_merge(inter, 0, &c->mc);
    MPI_Comm_free(&inter);
    return setup(c, mrc, 1, err);
}

/* A spawned job's rank 0: 1 if worker i is gone (no such process, or a
 * zombie its daemon has not reaped yet). */
static int worker_gone(int pid)
{
    char path[64], buf[256];
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 1;
    buf[n] = 0;
    const char *p = strrchr(buf, ')'); /* the name may hold anything but ends there */
    return !p || p[1] != ' ' || p[2] == 'Z' || p[2] == 'X';
}

/* Every ALIVE_S of a wait: a worker that died fails the collective now
 * rather than at its deadline. Returns 0 or IFL_EIO (broken). */
static int check_workers(struct ifl_comm *c, double now, const char *what, char *err)
{
    if (!c->pids || now - c->alive_t < ALIVE_S)
        return 0;
    c->alive_t = now;
    for (int i = 1; i < c->size; i++)
        if (worker_gone(c->pids[i])) {
            c->broken = 1;
            ifl_err(c->why, IFL_EIO,
                    "dist: %s on rank 0 of %d: rank %d (process %d, which this process spawned) "
                    "died",
                    what, c->size, i, c->pids[i]);
            return ifl_err(err, IFL_EIO, "%s", c->why);
        }
    return 0;
}

/* The parent of pid, or -1. */
static long parent_of(long pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return -1;
    buf[n] = 0;
    const char *p = strrchr(buf, ')');
    long ppid;
    char st;
    return p && sscanf(p + 1, " %c %ld", &st, &ppid) == 2 ? ppid : -1;
}

/* A broken spawned job's rank 0, leaving: the workers it started (each a
 * child of Open MPI's daemon, itself a child of this process; a process
 * id that was reused by another is left alone) get SIGKILL, and this
 * waits until they are gone, up to REAP_S. */
static void kill_workers(struct ifl_comm *c)
{
    const long self = (long)getpid();
    for (int i = 1; i < c->size; i++)
        if (!worker_gone(c->pids[i]) && parent_of(parent_of(c->pids[i])) == self)
            kill(c->pids[i], SIGKILL);
    double t0 = ifl_now_s();
    for (int i = 1; i < c->size; i++)
        while (!worker_gone(c->pids[i]) && ifl_now_s() - t0 < REAP_S) {
            struct timespec nap = {0, 2000000L};
            nanosleep(&nap, NULL);
        }
}
#endif

int ifl_comm_spawn(struct ifl_comm **out, int n, const char *path, char *const argv[], char *err)
{
    if (!out || n < 2 || n > 4096 || !path || !argv)
        return ifl_err(err, IFL_EINVAL,
                       "dist: ifl_comm_spawn needs an out pointer, 2 to 4096 ranks (not %d), a "
                       "program and its arguments",
                       n);
    *out = NULL;
#ifndef IFL_HAVE_MPI
    return ifl_err(err, IFL_EUNSUPPORTED,
                   "dist: spawning %d workers needs MPI, and this build has none (install "
                   "libopenmpi-dev, rebuild with make)",
                   n - 1);
#else
    int expect = 0;
    if (!atomic_compare_exchange_strong(&g_live, &expect, 1))
        return ifl_err(err, IFL_ESTATE, "dist: a communicator is already live in this process");
    struct ifl_comm *c = calloc(1, sizeof *c);
    if (!c) {
        atomic_store(&g_live, 0);
        return ifl_err(err, IFL_ENOMEM, "dist: out of memory for the communicator");
    }
    int rc = spawn_mpi(c, n, path, argv, err);
    if (rc != 0) {
        free(c);
        atomic_store(&g_live, 0);
        return rc;
    }
    *out = c;
    return 0;
#endif
}

int ifl_comm_init(struct ifl_comm **out, char *err)
{
    if (!out)
        return ifl_err(err, IFL_EINVAL, "dist: ifl_comm_init needs an out pointer");
    *out = NULL;
    int expect = 0;
    if (!atomic_compare_exchange_strong(&g_live, &expect, 1))
        return ifl_err(err, IFL_ESTATE, "dist: a communicator is already live in this process");
    struct ifl_comm *c = calloc(1, sizeof *c);
    if (!c) {
        atomic_store(&g_live, 0);
        return ifl_err(err, IFL_ENOMEM, "dist: out of memory for the communicator");
    }
    c->rank = 0;
    c->size = 1;
#ifdef IFL_HAVE_MPI
    int rc = init_mpi(c, err);
#else
    int rc = single_rank(err);
#endif
    if (rc != 0) {
        free(c);
        atomic_store(&g_live, 0);
        return rc;
    }
    *out = c;
    return 0;
}

void ifl_comm_finalize(struct ifl_comm *comm)
{
    if (!comm)
        return;
#ifdef IFL_HAVE_MPI
    /* a broken communicator has a collective pending that a dead or stuck
     * rank will never finish: freeing it or MPI_Finalize could wait on it */
    if (comm->use_mpi && !comm->broken) {
        MPI_Comm_free(&comm->mc);
        if (comm->mpi_started)
            MPI_Finalize();
    }
    if (comm->broken)
        atomic_store(&g_broken, 1);
    if (comm->broken && comm->pids)
        kill_workers(comm);
    free(comm->gcount);
    free(comm->gdispl);
    free(comm->pids);
#endif
    free(comm);
    atomic_store(&g_live, 0);
}

int ifl_comm_rank(const struct ifl_comm *comm)
{
    return comm->rank;
}

int ifl_comm_size(const struct ifl_comm *comm)
{
    return comm->size;
}

int ifl_comm_broken(const struct ifl_comm *comm)
{
    return comm->broken;
}

void ifl_comm_stats(const struct ifl_comm *comm, struct ifl_comm_stats *out)
{
    *out = comm->st;
}

/* The checks every collective shares; 1 means "done, nothing to send". */
static int precheck(struct ifl_comm *c, const void *buf, size_t n, double timeout_s,
                    const char *what, char *err)
{
    if (!c)
        return ifl_err(err, IFL_EINVAL, "dist: %s on no communicator", what);
    if (c->broken)
        return ifl_err(err, IFL_ESTATE, "dist: %s refused: the communicator broke earlier (%s)",
                       what, c->why);
    if (n > INT_MAX)
        return ifl_err(err, IFL_EINVAL, "dist: %s of %zu elements: at most %d at once", what, n,
                       INT_MAX);
    if (!buf && n > 0)
        return ifl_err(err, IFL_EINVAL, "dist: %s of %zu elements from a NULL buffer", what, n);
    if (isnan(timeout_s) || (timeout_s < 0 && timeout_s != IFL_COMM_FOREVER))
        return ifl_err(err, IFL_EINVAL,
                       "dist: %s: timeout %g s is neither >= 0 nor IFL_COMM_FOREVER", what,
                       timeout_s);
    return 0;
}

#ifdef IFL_HAVE_MPI
static void account(struct ifl_comm *c, size_t bytes, double t0)
{
    double dt = ifl_now_s() - t0;
    c->st.calls++;
    c->st.bytes += (long long)bytes;
    c->st.seconds += dt;
    if (dt > c->st.max_seconds)
        c->st.max_seconds = dt;
}

/* Once a window: the share of the time since the last look that this
 * thread was runnable but not running decides between spinning and
 * napping (the top of the file). Where schedstat cannot be read, spin. */
static void probe(struct ifl_comm *c, double now)
{
    if (now - c->probe_t < WINDOW_S)
        return;
    char buf[96];
    int fd = open("/proc/thread-self/schedstat", O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    unsigned long long run, delay;
    if (n <= 0 || (buf[n] = 0, sscanf(buf, "%llu %llu", &run, &delay) != 2))
        return;
    if (c->probe_t > 0 && (long long)delay >= c->probe_delay) {
        double share = (double)((long long)delay - c->probe_delay) / 1e9 / (now - c->probe_t);
        if (!c->napping && share * 1000 >= ENTER_PERMILLE)
            c->napping = 1;
        else if (c->napping && share * 1000 < LEAVE_PERMILLE)
            c->napping = 0;
    }
    c->probe_t = now;
    c->probe_delay = (long long)delay;
}

/* Polls req to completion or the deadline (see the top of the file). */
static int wait_req(struct ifl_comm *c, MPI_Request *req, double t0, double timeout_s,
                    const char *what, char *err)
{
    probe(c, t0);
    const double spin = c->napping ? CONTENDED_SPIN_S : SPIN_S;
    const double yield = c->napping ? CONTENDED_SPIN_S : YIELD_S;
    for (;;) {
        int done = 0;
        int mrc = MPI_Test(req, &done, MPI_STATUS_IGNORE);
        if (mrc != MPI_SUCCESS)
            return mpi_fail(c, err, mrc, what);
        if (done)
            return 0;
        double now = ifl_now_s(), waited = now - t0;
        int rc = check_workers(c, now, what, err);
        if (rc)
            return rc;
        if (timeout_s >= 0 && waited >= timeout_s) {
            c->broken = 1;
            ifl_err(c->why, IFL_ETIMEDOUT,
                    "dist: %s on rank %d of %d: the other ranks did not all join within %.3f s "
                    "(a rank died or stopped answering)",
                    what, c->rank, c->size, timeout_s);
            return ifl_err(err, IFL_ETIMEDOUT, "%s", c->why);
        }
        if (waited < spin)
            continue;
        if (waited < yield) {
            sched_yield();
            continue;
        }
        struct timespec nap = {0, NAP_NS};
        nanosleep(&nap, NULL);
    }
}
#endif

int ifl_comm_allreduce_sum(struct ifl_comm *comm, float *buf, size_t n, double timeout_s, char *err)
{
    int rc = precheck(comm, buf, n, timeout_s, "allreduce", err);
    if (rc != 0 || comm->size == 1 || n == 0)
        return rc;
#ifdef IFL_HAVE_MPI
    double t0 = ifl_now_s();
    MPI_Request req;
    int mrc = MPI_Iallreduce(MPI_IN_PLACE, buf, (int)n, MPI_FLOAT, MPI_SUM, comm->mc, &req);
    if (mrc != MPI_SUCCESS)
        return mpi_fail(comm, err, mrc, "allreduce");
    rc = wait_req(comm, &req, t0, timeout_s, "allreduce", err);
    if (rc == 0)
        account(comm, n * sizeof(float), t0);
    return rc;
#else
    return 0;
#endif
}

int ifl_comm_broadcast(struct ifl_comm *comm, void *buf, size_t nbytes, int root, double timeout_s,
                       char *err)
{
    int rc = precheck(comm, buf, nbytes, timeout_s, "broadcast", err);
    if (rc != 0)
        return rc;
    if (root < 0 || root >= comm->size)
        return ifl_err(err, IFL_EINVAL, "dist: broadcast from rank %d of a job of %d", root,
                       comm->size);
    if (comm->size == 1 || nbytes == 0)
        return 0;
#ifdef IFL_HAVE_MPI
    double t0 = ifl_now_s();
    MPI_Request req;
    int mrc = MPI_Ibcast(buf, (int)nbytes, MPI_BYTE, root, comm->mc, &req);
    if (mrc != MPI_SUCCESS)
        return mpi_fail(comm, err, mrc, "broadcast");
    rc = wait_req(comm, &req, t0, timeout_s, "broadcast", err);
    if (rc == 0)
        account(comm, nbytes, t0);
    return rc;
#else
    return 0;
#endif
}

int ifl_comm_barrier(struct ifl_comm *comm, double timeout_s, char *err)
{
    static const char dummy = 0;
    int rc = precheck(comm, &dummy, 0, timeout_s, "barrier", err);
    if (rc != 0 || comm->size == 1)
        return rc;
#ifdef IFL_HAVE_MPI
    double t0 = ifl_now_s();
    MPI_Request req;
    int mrc = MPI_Ibarrier(comm->mc, &req);
    if (mrc != MPI_SUCCESS)
        return mpi_fail(comm, err, mrc, "barrier");
    rc = wait_req(comm, &req, t0, timeout_s, "barrier", err);
    if (rc == 0)
        account(comm, 0, t0);
    return rc;
#else
    return 0;
#endif
}

int ifl_comm_gather(struct ifl_comm *comm, const void *send, size_t nbytes, void *recv,
                    const size_t *counts, int root, double timeout_s, char *err)
{
    int rc = precheck(comm, send, nbytes, timeout_s, "gather", err);
    if (rc != 0)
        return rc;
    if (root < 0 || root >= comm->size)
        return ifl_err(err, IFL_EINVAL, "dist: gather to rank %d of a job of %d", root, comm->size);
    if (comm->rank == root) {
        size_t total = 0;
        for (int i = 0; i < comm->size; i++)
            total += counts[i];
        if (total > INT_MAX || counts[root] != nbytes || (!recv && total > 0))
            return ifl_err(err, IFL_EINVAL,
                           "dist: gather of %zu bytes into %s (at most %d, root's own %zu)", total,
                           recv ? "a buffer" : "NULL", INT_MAX, nbytes);
    }
    if (comm->size == 1) {
        if (nbytes && send != recv)
            memmove(recv, send, nbytes);
        return 0;
    }
#ifdef IFL_HAVE_MPI
    if (comm->rank == root) {
        int at = 0;
        for (int i = 0; i < comm->size; i++) {
            comm->gcount[i] = (int)counts[i];
            comm->gdispl[i] = at;
            at += (int)counts[i];
        }
    }
    double t0 = ifl_now_s();
    MPI_Request req;
    int mrc = MPI_Igatherv(send, (int)nbytes, MPI_BYTE, recv, comm->gcount, comm->gdispl, MPI_BYTE,
                           root, comm->mc, &req);
    if (mrc != MPI_SUCCESS)
        return mpi_fail(comm, err, mrc, "gather");
    rc = wait_req(comm, &req, t0, timeout_s, "gather", err);
    if (rc == 0)
        account(comm, nbytes, t0);
    return rc;
#else
    return 0;
#endif
}
