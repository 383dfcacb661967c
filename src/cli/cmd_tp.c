/*
 * --tp for run, bench and serve (cli.h), and the worker command of
 * orchestrator mode.
 *
 * Two ways to start a tensor parallel job (docs/distributed.md):
 *   leader mode        mpirun -np N inflight serve ... --tp N: every rank
 *                      runs the command; rank 0 serves, the others run
 *                      the worker loop (src/dist/tp.c);
 *   orchestrator mode  inflight serve ... --tp N with no launcher: this
 *                      process spawns N-1 copies of its own binary as
 *                      "inflight tp-worker -m FILE --tp N ..." (MPI's
 *                      spawn, dist/comm.h), which join it and run the same
 *                      worker loop; from there on it is leader mode.
 *
 * Open MPI waits without a deadline in the spawn until every worker has
 * started MPI: a worker that dies first would leave rank 0 waiting for
 * ever. A watchdog thread bounds it and ends the process with status 1
 * (Open MPI's daemon, our child, then ends the workers it started).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "core/err.h"
#include "dist/comm.h"
#include "dist/tp.h"

#define SPAWN_MIN_S 10.0 /* the spawn's bound: --tp-timeout, but at least this */

int cli_tp_option(const char *cmd, const char *a, const char *v, struct cli_tp *t)
{
    int64_t iv;
    if (!strcmp(a, "--tp")) {
        if (cli_parse_i64(v, 1, 4096, &iv))
            return cli_usage_error(cmd, "--tp wants a rank count from 1 to 4096, not '%s'", v);
        t->n = (int)iv;
        return 0;
    }
    if (!strcmp(a, "--tp-emulate")) {
        if (cli_parse_i64(v, 1, 4096, &iv))
            return cli_usage_error(cmd, "--tp-emulate wants a rank count from 1 to 4096, not '%s'",
                                   v);
        t->emulate = (int)iv;
        return 0;
    }
    if (!strcmp(a, "--tp-timeout")) {
        if (cli_parse_f64(v, 0.1, 86400, &t->timeout_s))
            return cli_usage_error(cmd, "--tp-timeout wants 0.1 to 86400 seconds, not '%s'", v);
        return 0;
    }
    return -1;
}

struct watchdog {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    double limit_s;
    const char *cmd;
    int n;
};

static void *watchdog_main(void *p)
{
    struct watchdog *w = p;
    struct timespec until;
    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += (time_t)w->limit_s;
    until.tv_nsec += (long)((w->limit_s - (double)(time_t)w->limit_s) * 1e9);
    if (until.tv_nsec >= 1000000000L) {
        until.tv_sec++;
        until.tv_nsec -= 1000000000L;
    }
    pthread_mutex_lock(&w->mu);
    int rc = 0;
    while (!w->done && rc == 0)
        rc = pthread_cond_timedwait(&w->cv, &w->mu, &until);
    int done = w->done;
    pthread_mutex_unlock(&w->mu);
    if (!done) {
        /* the main thread is inside MPI_Comm_spawn, which cannot be left */
        fprintf(stderr,
                "inflight %s: --tp %d: the %d worker%s did not join within %.1f s (one could "
                "not start or died starting: see the messages above); exiting\n",
                w->cmd, w->n, w->n - 1, w->n == 2 ? "" : "s", w->limit_s);
        fflush(stderr);
        _exit(1);
    }
    return NULL;
}

/* Orchestrator mode: this process becomes rank 0 of t->n, its workers
 * spawned. Returns 0 (t->comm set) or an exit status. */
static int spawn_workers(const char *cmd, struct cli_tp *t, const char *model, int n_threads)
{
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0 || (size_t)len >= sizeof self - 1) {
        fprintf(stderr,
                "inflight %s: --tp %d: cannot find this program's file (/proc/self/exe) "
                "to start the workers; start the job with mpirun -np %d ... --tp %d\n",
                cmd, t->n, t->n, t->n);
        return 1;
    }
    self[len] = '\0';
    char nbuf[16], tbuf[16], sbuf[32];
    snprintf(nbuf, sizeof nbuf, "%d", t->n);
    snprintf(tbuf, sizeof tbuf, "%d", n_threads);
    snprintf(sbuf, sizeof sbuf, "%.17g", t->timeout_s);
    char *argv[12];
    int k = 0;
    argv[k++] = "tp-worker";
    argv[k++] = "-m";
    argv[k++] = (char *)model;
    argv[k++] = "--tp";
    argv[k++] = nbuf;
    if (n_threads > 0) {
        argv[k++] = "-t";
        argv[k++] = tbuf;
    }
    if (t->timeout_s > 0) {
        argv[k++] = "--tp-timeout";
        argv[k++] = sbuf;
    }
    argv[k] = NULL;

    struct watchdog w = {.cmd = cmd, .n = t->n};
    w.limit_s = t->timeout_s > SPAWN_MIN_S ? t->timeout_s : SPAWN_MIN_S;
    if (t->timeout_s <= 0 && w.limit_s < 30)
        w.limit_s = 30; /* --tp-timeout's default */
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_mutex_init(&w.mu, NULL);
    pthread_cond_init(&w.cv, &ca);
    pthread_condattr_destroy(&ca);
    pthread_t th;
    int have_dog = pthread_create(&th, NULL, watchdog_main, &w) == 0;
    char err[IFL_ERR_LEN] = "";
    int rc = ifl_comm_spawn(&t->comm, t->n, self, argv, err);
    if (have_dog) {
        pthread_mutex_lock(&w.mu);
        w.done = 1;
        pthread_cond_signal(&w.cv);
        pthread_mutex_unlock(&w.mu);
        pthread_join(th, NULL);
    }
    pthread_cond_destroy(&w.cv);
    pthread_mutex_destroy(&w.mu);
    if (rc) {
        fprintf(stderr, "inflight %s: --tp %d: %s\n", cmd, t->n, err);
        return 1;
    }
    return 0;
}

/* A worker rank's life after joining (leader or orchestrator mode). */
static int run_worker(const char *cmd, struct cli_tp *t, const char *model, int n_threads)
{
    char err[IFL_ERR_LEN] = "";
    const int size = ifl_comm_size(t->comm), rank = ifl_comm_rank(t->comm);
    struct ifl_tp_worker_opts wo = {
        .model_path = model, .n_threads = n_threads, .timeout_s = t->timeout_s};
    int rc = ifl_tp_worker_run(t->comm, &wo, err);
    if (rc)
        fprintf(stderr, "inflight %s: rank %d of %d: %s\n", cmd, rank, size, err);
    return cli_tp_end(t, rc ? 1 : 0);
}

int cli_tp_start(const char *cmd, struct cli_tp *t, const char *model, int n_threads)
{
    if (t->emulate > 1 && t->n > 1)
        return cli_usage_error(cmd,
                               "--tp-emulate is for one process: with --tp %d the ranks sum "
                               "that way already",
                               t->n);
    if (!t->n)
        return -1;
    if (!ifl_comm_have_mpi())
        return cli_usage_error(cmd, "--tp needs MPI, and this build has none: install openmpi-bin "
                                    "and libopenmpi-dev (scripts/deps.sh) and rebuild with make");
    if (t->n > 1 && !ifl_comm_launched()) {
        int rc = spawn_workers(cmd, t, model, n_threads);
        return rc ? rc : -1;
    }
    char err[IFL_ERR_LEN] = "";
    if (ifl_comm_init(&t->comm, err)) {
        fprintf(stderr, "inflight %s: --tp %d: %s\n", cmd, t->n, err);
        return CLI_EXIT_USAGE;
    }
    const int size = ifl_comm_size(t->comm), rank = ifl_comm_rank(t->comm);
    if (size != t->n) {
        if (rank == 0)
            fprintf(stderr,
                    "inflight %s: --tp %d, but this process is one of an MPI job of %d rank%s: "
                    "start it with mpirun -np %d ... --tp %d, or without mpirun (it then starts "
                    "its workers itself)\n",
                    cmd, t->n, size, size == 1 ? "" : "s", t->n, t->n);
        return cli_tp_end(t, CLI_EXIT_USAGE);
    }
    if (rank == 0)
        return -1;
    return run_worker(cmd, t, model, n_threads);
}

int cli_tp_end(struct cli_tp *t, int status)
{
    ifl_comm_finalize(t->comm);
    t->comm = NULL;
    return status;
}

int cmd_tp_worker(int argc, char **argv)
{
    struct cli_tp t = {0};
    const char *model = NULL;
    int64_t threads = 0;
    for (int i = 1; i < argc; i += 2) { /* every option takes a value */
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            return cli_usage_error("tp-worker", "%s wants a value", a);
        int rc = cli_tp_option("tp-worker", a, v, &t);
        if (rc > 0)
            return rc;
        if (rc < 0) {
            if (!strcmp(a, "-m"))
                model = v;
            else if (!strcmp(a, "-t")) {
                if (cli_parse_i64(v, 1, 1024, &threads))
                    return cli_usage_error("tp-worker", "-t wants 1 to 1024 threads, not '%s'", v);
            } else
                return cli_usage_error("tp-worker", "unknown option '%s'", a);
        }
    }
    /* started by hand, it would be a job of one */
    if (!model || t.n < 2 || !ifl_comm_launched())
        return cli_usage_error("tp-worker",
                               "this command is a worker of 'inflight run|bench|serve --tp N', "
                               "which starts it; it is not run by hand");
    int rc = cli_tp_start("tp-worker", &t, model, (int)threads);
    if (rc >= 0)
        return rc;
    /* rank 0: not spawned by a leader */
    fprintf(stderr, "inflight tp-worker: this process is rank 0 of its job: workers are "
                    "started by 'inflight run|bench|serve --tp N', not by hand\n");
    return cli_tp_end(&t, CLI_EXIT_USAGE);
}
