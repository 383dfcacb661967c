/*
 * The communication layer (src/dist/comm.c).
 *
 * Run alone (as `make test` runs every test binary), it checks the one-rank
 * communicator every plain process gets: the collectives leave the data as
 * it is, bad arguments are refused, one communicator per process; in a build
 * without MPI, a process that a launcher started as one of several ranks is
 * refused. tests/test_mpi.sh runs it under mpirun with a mode:
 *
 *   test_comm have-mpi     prints 1 if the layer was built with MPI, else 0
 *   test_comm mpi          every rank: all-reduce sums exact against sums
 *                          computed here, 1 to 1 M floats; the same bits on
 *                          every rank; broadcast from each root; barrier
 *   test_comm nojoin SECS  rank 0 all-reduces with a deadline of SECS while
 *                          the others never join: it must get IFL_ETIMEDOUT
 *                          within the bound, then IFL_ESTATE, and exit 3
 *   test_comm kill SECS    the same, the others killed by SIGKILL instead
 *   test_comm loop SECS    all ranks all-reduce in a loop, the others print
 *                          their pid; the test script kills one, and rank 0
 *                          must time out as above
 *
 * Under mpirun each rank ends with "rank R: N passed, N failed".
 */
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "core/err.h"
#include "core/rng.h"
#include "core/timeutil.h"
#include "dist/comm.h"
#include "t.h"

#define BIG (1u << 20) /* 1 M floats */

static struct ifl_comm *g_comm;
static int g_rank, g_size;
static float *g_buf, *g_want, *g_part;

/* ---- one rank ---------------------------------------------------------- */

static void test_single_rank(void)
{
    char err[IFL_ERR_LEN] = "";
    struct ifl_comm *c = NULL;
    CHECK_EQ(ifl_comm_init(&c, err), 0);
    if (!c)
        return;
    CHECK_EQ(ifl_comm_rank(c), 0);
    CHECK_EQ(ifl_comm_size(c), 1);

    /* a sum over one rank is the data itself, bit for bit (NaN included) */
    float v[5] = {1.5f, -0.0f, 3e38f, NAN, 1e-45f}, keep[5];
    memcpy(keep, v, sizeof v);
    CHECK_EQ(ifl_comm_allreduce_sum(c, v, 5, 1.0, err), 0);
    CHECK(memcmp(v, keep, sizeof v) == 0);
    CHECK_EQ(ifl_comm_allreduce_sum(c, v, 0, 0.0, err), 0);
    CHECK_EQ(ifl_comm_allreduce_sum(c, NULL, 0, IFL_COMM_FOREVER, err), 0);
    char b[4] = "abc";
    CHECK_EQ(ifl_comm_broadcast(c, b, 4, 0, 1.0, err), 0);
    CHECK_STR(b, "abc");
    CHECK_EQ(ifl_comm_barrier(c, 0.0, err), 0);

    /* refused, with a sentence, and the communicator still works after */
    err[0] = '\0';
    CHECK_EQ(ifl_comm_broadcast(c, b, 4, 1, 1.0, err), IFL_EINVAL);
    CHECK(strstr(err, "rank 1") != NULL);
    CHECK_EQ(ifl_comm_broadcast(c, b, 4, -1, 1.0, err), IFL_EINVAL);
    CHECK_EQ(ifl_comm_allreduce_sum(c, NULL, 3, 1.0, err), IFL_EINVAL);
    CHECK_EQ(ifl_comm_allreduce_sum(c, v, (size_t)INT_MAX + 1, 1.0, err), IFL_EINVAL);
    CHECK(strstr(err, "at most") != NULL);
    CHECK_EQ(ifl_comm_allreduce_sum(c, v, 5, NAN, err), IFL_EINVAL);
    CHECK_EQ(ifl_comm_allreduce_sum(c, v, 5, -2.0, err), IFL_EINVAL);
    CHECK_EQ(ifl_comm_barrier(c, -0.5, err), IFL_EINVAL);
    CHECK_EQ(ifl_comm_barrier(NULL, 1.0, err), IFL_EINVAL);
    CHECK_EQ(ifl_comm_allreduce_sum(c, v, 5, 1.0, err), 0);
    CHECK(memcmp(v, keep, sizeof v) == 0);

    /* one world per process */
    struct ifl_comm *c2 = NULL;
    CHECK_EQ(ifl_comm_init(&c2, err), IFL_ESTATE);
    CHECK(c2 == NULL);
    CHECK_EQ(ifl_comm_init(NULL, err), IFL_EINVAL);
    /* nor a spawned one beside it (orchestrator mode), and the spawn's
     * arguments are checked before anything starts */
    char *const argv[] = {"tp-worker", NULL};
    CHECK_EQ(ifl_comm_spawn(&c2, 2, "/bin/true", argv, err),
             ifl_comm_have_mpi() ? IFL_ESTATE : IFL_EUNSUPPORTED);
    CHECK(c2 == NULL);
    CHECK_EQ(ifl_comm_spawn(&c2, 1, "/bin/true", argv, err), IFL_EINVAL);
    CHECK(strstr(err, "2 to 4096 ranks (not 1)") != NULL);
    CHECK_EQ(ifl_comm_spawn(&c2, 2, NULL, argv, err), IFL_EINVAL);
    CHECK_EQ(ifl_comm_spawn(NULL, 2, "/bin/true", argv, err), IFL_EINVAL);
    CHECK_EQ(ifl_comm_launched(), 0); /* run alone, as make test runs it */

    struct ifl_comm_stats st;
    ifl_comm_stats(c, &st);
    CHECK_EQ(st.calls, 0); /* nothing went over a wire */
    ifl_comm_finalize(c);
    ifl_comm_finalize(NULL);

    /* a one-rank communicator never started MPI, so another may follow */
    CHECK_EQ(ifl_comm_init(&c, err), 0);
    ifl_comm_finalize(c);
}

/* Without MPI, a process that mpirun started as one of two ranks cannot
 * act as a whole job: it would compute the full model on each rank and
 * disagree with its peers about everything. */
static void test_launched_without_mpi(void)
{
    if (ifl_comm_have_mpi())
        return; /* with MPI these variables would send MPI_Init looking for mpirun */
    char err[IFL_ERR_LEN] = "";
    struct ifl_comm *c = NULL;
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    setenv("OMPI_COMM_WORLD_RANK", "1", 1);
    CHECK_EQ(ifl_comm_init(&c, err), IFL_EUNSUPPORTED);
    CHECK(c == NULL);
    CHECK(strstr(err, "no MPI") != NULL);
    unsetenv("OMPI_COMM_WORLD_SIZE");
    unsetenv("OMPI_COMM_WORLD_RANK");
    setenv("PMI_SIZE", "4", 1);
    setenv("PMI_RANK", "0", 1);
    CHECK_EQ(ifl_comm_init(&c, err), IFL_EUNSUPPORTED);
    setenv("PMI_SIZE", "1", 1);
    CHECK_EQ(ifl_comm_init(&c, err), 0); /* mpirun -np 1: one rank is fine */
    ifl_comm_finalize(c);
    unsetenv("PMI_SIZE");
    unsetenv("PMI_RANK");
}

/* ---- several ranks ------------------------------------------------------ */

/* Rank r's data for one round: `ints` gives small whole numbers, whose sum
 * is exact in any order and any rank count; otherwise floats spread over
 * magnitudes, whose sum of two is exact in either order (a + b == b + a). */
static void fill(float *x, size_t n, int r, uint64_t round, int ints)
{
    struct ifl_rng rng;
    ifl_rng_seed(&rng, round * 1000003u + (uint64_t)r * 7919u + 1);
    for (size_t i = 0; i < n; i++) {
        uint64_t u = ifl_rng_next(&rng);
        if (ints) {
            x[i] = (float)((int)(u % 2001) - 1000);
        } else {
            float m = (float)((u >> 11) & 0xffffff) / 16777216.0f - 0.5f;
            x[i] = ldexpf(m, (int)((u >> 40) % 24) - 12);
        }
    }
}

static uint64_t fnv(const void *p, size_t n)
{
    const unsigned char *b = p;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 1099511628211ull;
    return h;
}

/* Every rank holds the same 8 bytes: rank 0 broadcasts its, the others
 * compare with theirs, and all learn whether everyone agreed. */
static int same_everywhere(uint64_t h)
{
    char err[IFL_ERR_LEN] = "";
    uint64_t h0 = h;
    if (ifl_comm_broadcast(g_comm, &h0, sizeof h0, 0, 30.0, err) != 0) {
        fprintf(stderr, "  %s\n", err);
        return 0;
    }
    float differs = h0 != h;
    if (ifl_comm_allreduce_sum(g_comm, &differs, 1, 30.0, err) != 0) {
        fprintf(stderr, "  %s\n", err);
        return 0;
    }
    return differs == 0.0f;
}

static void test_allreduce_exact(void)
{
    static const size_t sizes[] = {1, 2, 3, 7, 64, 1000, 4096, 65536 + 13, 262144, BIG};
    char err[IFL_ERR_LEN] = "";
    uint64_t round = 0;
    for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
        size_t n = sizes[k];
        for (int ints = 0; ints <= 1; ints++, round++) {
            /* the sum every rank should get, computed here from every rank's data */
            fill(g_want, n, 0, round, ints);
            for (int r = 1; r < g_size; r++) {
                fill(g_part, n, r, round, ints);
                for (size_t i = 0; i < n; i++)
                    g_want[i] += g_part[i];
            }
            fill(g_buf, n, g_rank, round, ints);
            int rc = ifl_comm_allreduce_sum(g_comm, g_buf, n, 30.0, err);
            CHECK_MSG(rc == 0, "allreduce of %zu: %s", n, err);
            /* floats are exact only for two ranks; whole numbers for any */
            size_t bad = 0;
            double worst = 0;
            for (size_t i = 0; i < n; i++) {
                if (ints || g_size == 2) {
                    bad += memcmp(&g_buf[i], &g_want[i], sizeof(float)) != 0;
                } else {
                    double d = fabs((double)g_buf[i] - g_want[i]);
                    worst = d > worst ? d : worst;
                }
            }
            CHECK_MSG(bad == 0, "allreduce of %zu (%s): %zu sums differ from the local ones", n,
                      ints ? "whole numbers" : "floats", bad);
            CHECK_MSG(worst <= 1e-3, "allreduce of %zu floats over %d ranks: off by %g", n, g_size,
                      worst);
            CHECK_MSG(same_everywhere(fnv(g_buf, n * sizeof(float))),
                      "allreduce of %zu: the ranks hold different bits", n);
        }
    }
}

static void test_broadcast(void)
{
    static const size_t sizes[] = {0, 1, 13, 4096, 4u << 20};
    char err[IFL_ERR_LEN] = "";
    unsigned char *b = (unsigned char *)g_buf;
    for (int root = 0; root < g_size; root++) {
        for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
            size_t n = sizes[k];
            for (size_t i = 0; i < n; i++)
                b[i] = (unsigned char)(i * 31 + (size_t)g_rank * 7 + 1);
            int rc = ifl_comm_broadcast(g_comm, b, n, root, 30.0, err);
            CHECK_MSG(rc == 0, "broadcast of %zu from %d: %s", n, root, err);
            size_t bad = 0;
            for (size_t i = 0; i < n; i++)
                bad += b[i] != (unsigned char)(i * 31 + (size_t)root * 7 + 1);
            CHECK_MSG(bad == 0, "broadcast of %zu bytes from rank %d: %zu bytes differ", n, root,
                      bad);
        }
    }
    CHECK_EQ(ifl_comm_broadcast(g_comm, b, 1, g_size, 1.0, err), IFL_EINVAL);
}

/* The last rank comes 300 ms late: nobody leaves the barrier before it
 * arrives, and the all-reduce that waited through the spin, yield and nap
 * phases still sums right. "Before" is read on CLOCK_MONOTONIC, which all
 * ranks of this test share (one machine), so the check holds however the
 * ranks are scheduled. */
static void test_barrier_and_late_rank(void)
{
    char err[IFL_ERR_LEN] = "";
    int late = g_rank == g_size - 1;
    CHECK_EQ(ifl_comm_barrier(g_comm, 30.0, err), 0);
    double arrived = 0;
    if (late) {
        usleep(300000);
        arrived = ifl_now_s();
    }
    CHECK_EQ(ifl_comm_barrier(g_comm, 30.0, err), 0);
    double left = ifl_now_s();
    CHECK_EQ(ifl_comm_broadcast(g_comm, &arrived, sizeof arrived, g_size - 1, 30.0, err), 0);
    CHECK_MSG(left >= arrived, "rank %d left the barrier %.6f s before the late rank came", g_rank,
              arrived - left);

    double called = 0;
    if (late) {
        usleep(100000);
        called = ifl_now_s();
    }
    float x[3] = {1, 2, (float)g_rank};
    CHECK_EQ(ifl_comm_allreduce_sum(g_comm, x, 3, 30.0, err), 0);
    double done = ifl_now_s();
    CHECK(x[0] == (float)g_size && x[1] == 2.0f * (float)g_size);
    CHECK(x[2] == (float)(g_size * (g_size - 1) / 2));
    CHECK_EQ(ifl_comm_broadcast(g_comm, &called, sizeof called, g_size - 1, 30.0, err), 0);
    CHECK_MSG(done >= called, "rank %d had the sum %.6f s before the late rank gave its part",
              g_rank, called - done);

    struct ifl_comm_stats st;
    ifl_comm_stats(g_comm, &st);
    CHECK(st.calls >= 5 && st.bytes >= 12 + 2 * (long long)sizeof(double));
    CHECK(st.max_seconds > 0 && st.seconds >= st.max_seconds);
}

/* Under Open MPI's mpirun, init chose Rabenseifner's algorithm for the
 * non-blocking all-reduce (its binomial default is 5-10 times slower at
 * 1 M floats between two ranks); the environment of this test sets none. */
static void test_nbc_algorithm(void)
{
    if (!getenv("OMPI_COMM_WORLD_SIZE"))
        return; /* another MPI */
    const char *v = getenv("OMPI_MCA_coll_libnbc_iallreduce_algorithm");
    CHECK(v != NULL && strcmp(v, "3") == 0);
}

/* Rank 0 waits for ranks that will never come: asleep (FAULT_SLEEP), dead
 * before the collective (FAULT_KILL), or killed from outside while all
 * ranks all-reduce 256 K floats in a loop (FAULT_LOOP: the others print
 * their pid for the killer). */
enum { FAULT_SLEEP, FAULT_KILL, FAULT_LOOP };

static int run_fault(int how, double bound)
{
    char err[IFL_ERR_LEN] = "";
    enum { N = 256 * 1024 };
    float *x = calloc(N, sizeof(float));
    if (!x)
        return 2;
    for (int i = 0; i < 1024; i++)
        x[i] = (float)g_rank;
    /* one all-reduce that works, so the connections exist before the fault */
    CHECK_EQ(ifl_comm_allreduce_sum(g_comm, x, 1024, 30.0, err), 0);
    CHECK(x[0] == (float)(g_size * (g_size - 1) / 2));
    if (g_rank != 0) {
        if (how == FAULT_LOOP) {
            printf("rank %d pid %d\n", g_rank, (int)getpid());
            fflush(stdout);
            for (double t0 = ifl_now_s(); ifl_now_s() - t0 < 60;)
                if (ifl_comm_allreduce_sum(g_comm, x, N, 30.0, err) != 0)
                    break;
        }
        fflush(stdout);
        if (how == FAULT_KILL)
            raise(SIGKILL);
        sleep(60); /* mpirun ends this rank once rank 0 exits non-zero */
        _exit(1);
    }
    double t0 = ifl_now_s();
    long rounds = 0;
    int rc;
    do {
        t0 = ifl_now_s();
        rc = ifl_comm_allreduce_sum(g_comm, x, how == FAULT_LOOP ? N : 1024, bound, err);
        rounds += rc == 0;
    } while (rc == 0 && how == FAULT_LOOP && ifl_now_s() < t0 + 60);
    double took = ifl_now_s() - t0;
    printf("rank 0: allreduce returned %d (%s) after %.3f s, bound %.3f s, %ld rounds before: "
           "%s\n",
           rc, ifl_strerror(rc), took, bound, rounds, err);
    CHECK_EQ(rc, IFL_ETIMEDOUT);
    CHECK(strstr(err, "did not all join") != NULL);
    CHECK_MSG(took >= bound && took <= bound + 2.0, "took %.3f s for a bound of %.3f s", took,
              bound);
    /* broken from now on: nothing waits again */
    t0 = ifl_now_s();
    CHECK_EQ(ifl_comm_allreduce_sum(g_comm, x, 4, 10.0, err), IFL_ESTATE);
    CHECK(strstr(err, "broke earlier") != NULL);
    CHECK_EQ(ifl_comm_barrier(g_comm, 10.0, err), IFL_ESTATE);
    CHECK_EQ(ifl_comm_broadcast(g_comm, x, 4, 0, 10.0, err), IFL_ESTATE);
    CHECK(ifl_now_s() - t0 < 1.0);
    ifl_comm_finalize(g_comm); /* must not wait on the dead rank either */
    struct ifl_comm *again = NULL;
    CHECK_EQ(ifl_comm_init(&again, err), IFL_ESTATE);
    CHECK(strstr(err, "broke") != NULL && again == NULL);
    CHECK(ifl_now_s() - t0 < 1.0);
    free(x);
    printf("rank 0: %d passed, %d failed\n", t_pass_ + !t_cur_failed_, t_fail_ + t_cur_failed_);
    fflush(stdout);
    return 3;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    if (argc < 2) {
        T_RUN(test_single_rank);
        T_RUN(test_launched_without_mpi);
        return t_done();
    }
    if (!strcmp(argv[1], "have-mpi")) {
        printf("%d\n", ifl_comm_have_mpi());
        return 0;
    }
    char err[IFL_ERR_LEN] = "";
    if (ifl_comm_init(&g_comm, err) != 0) {
        fprintf(stderr, "test_comm: %s\n", err);
        return 2;
    }
    g_rank = ifl_comm_rank(g_comm);
    g_size = ifl_comm_size(g_comm);
    if (g_size < 2) {
        fprintf(stderr, "test_comm %s: needs mpirun -np 2 or more (size %d, MPI %s)\n", argv[1],
                g_size, ifl_comm_have_mpi() ? "built in" : "not built in");
        return 2;
    }
    if (argc >= 3 &&
        (!strcmp(argv[1], "nojoin") || !strcmp(argv[1], "kill") || !strcmp(argv[1], "loop"))) {
        t_cur_failed_ = 0;
        int how = !strcmp(argv[1], "nojoin") ? FAULT_SLEEP
                  : !strcmp(argv[1], "kill") ? FAULT_KILL
                                             : FAULT_LOOP;
        return run_fault(how, atof(argv[2]));
    }
    g_buf = malloc(BIG * sizeof(float));
    g_want = malloc(BIG * sizeof(float));
    g_part = malloc(BIG * sizeof(float));
    if (!g_buf || !g_want || !g_part)
        return 2;
    T_RUN(test_allreduce_exact);
    T_RUN(test_broadcast);
    T_RUN(test_barrier_and_late_rank);
    T_RUN(test_nbc_algorithm);
    printf("rank %d: %d passed, %d failed\n", g_rank, t_pass_, t_fail_);
    free(g_buf);
    free(g_want);
    free(g_part);
    ifl_comm_finalize(g_comm);
    return t_fail_ ? 1 : 0;
}
