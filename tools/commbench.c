/*
 * commbench: the all-reduce's cost between the ranks of this job, to set
 * the cost model of docs/distributed.md against what this machine does.
 *
 *   mpirun -np 2 --mca btl self,vader build/tools/commbench [--seconds S] [--label NAME]
 *
 * For each size from 64 to 1 M floats it times two ways of summing a float
 * buffer in place over all ranks: MPI's blocking MPI_Allreduce, and the
 * layer inflight uses, ifl_comm_allreduce_sum (MPI_Iallreduce polled with
 * a deadline, src/dist/comm.c), each call timed alone after a barrier, as
 * many as fit in S seconds (default 0.2) per size and method, in three
 * passes over all sizes: the median call and the 10th percentile, each the
 * largest over the ranks, of the best pass.
 *
 * It then fits the ring model t(bytes) = 2(N-1) a + 2(N-1)/N bytes / B:
 * the latency a from the smallest size, the bandwidth B from the largest,
 * and prints the model's time beside every measured one.
 *
 * Output: a markdown table on rank 0's stdout. Built only with MPI.
 */
#include <math.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "core/timeutil.h"
#include "dist/comm.h"

#define N_SIZES 9
static const int sizes[N_SIZES] = {64, 256, 1024, 4096, 16384, 65536, 262144, 1 << 20, 2048};
/* the last one is tinyllama's n_embd: one row of activations */

#define MAX_CALLS 100000

struct fig {
    double med_block, med_poll; /* seconds per call: the median call */
    double p10_block, p10_poll; /* the 10th percentile: what a quiet moment gives */
};

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void call(struct ifl_comm *comm, int poll, float *buf, int n)
{
    char err[IFL_ERR_LEN];
    if (!poll) {
        MPI_Allreduce(MPI_IN_PLACE, buf, n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    } else if (ifl_comm_allreduce_sum(comm, buf, (size_t)n, 30.0, err) != 0) {
        fprintf(stderr, "commbench: %s\n", err);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
}

/* Times single calls of the chosen method at n floats, the way the OSU
 * micro-benchmarks do: a barrier, then one timed call. A pilot of 20 sets
 * how many fit in the budget (every rank makes the same number). The
 * median and 10th percentile are each the largest over the ranks. Single
 * calls rather than a loop's mean: on a shared 2-core machine a rank that
 * loses its core for a time slice makes one call slow, not the figure. */
static void time_one(struct ifl_comm *comm, int poll, float *buf, int n, double budget, double *t,
                     double *med, double *p10)
{
    for (int i = 0; i < n; i++)
        buf[i] = 1e-3f; /* the sums double each call; start each size alike */
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = ifl_now_s();
    for (int i = 0; i < 20; i++)
        call(comm, poll, buf, n);
    double dt = (ifl_now_s() - t0) / 20;
    MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    int iters = (int)fmin(MAX_CALLS, fmax(50, budget / dt));
    MPI_Bcast(&iters, 1, MPI_INT, 0, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 0; i < iters; i++) {
        MPI_Barrier(MPI_COMM_WORLD); /* all start together: no pipelining of calls */
        double c0 = ifl_now_s();
        call(comm, poll, buf, n);
        t[i] = ifl_now_s() - c0;
    }
    qsort(t, (size_t)iters, sizeof *t, cmp_double);
    double m[2] = {t[iters / 2], t[iters / 10]};
    MPI_Allreduce(MPI_IN_PLACE, m, 2, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    *med = m[0];
    *p10 = m[1];
}

int main(int argc, char **argv)
{
    double budget = 0.2;
    const char *label = "";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seconds") && i + 1 < argc)
            budget = atof(argv[++i]);
        else if (!strcmp(argv[i], "--label") && i + 1 < argc)
            label = argv[++i];
        else {
            fprintf(stderr, "usage: mpirun -np N %s [--seconds S] [--label NAME]\n", argv[0]);
            return 2;
        }
    }
    char err[IFL_ERR_LEN];
    struct ifl_comm *comm;
    if (ifl_comm_init(&comm, err) != 0) {
        fprintf(stderr, "commbench: %s\n", err);
        return 1;
    }
    int rank = ifl_comm_rank(comm), size = ifl_comm_size(comm);
    if (size < 2) {
        fprintf(stderr, "commbench: run it under mpirun -np 2 (or more)\n");
        ifl_comm_finalize(comm);
        return 2;
    }
    float *buf = malloc(sizeof(float) << 20);
    double *t = malloc(sizeof(double) * MAX_CALLS);
    if (!buf || !t)
        return 1;

    /* warm up: connections, buffers and page faults of every size first */
    for (int k = 0; k < N_SIZES; k++)
        for (int i = 0; i < 10; i++) {
            call(comm, 0, buf, sizes[k]);
            call(comm, 1, buf, sizes[k]);
        }

    /* three passes over all sizes, each size's figures the best pass's: a
     * burst of other work on the machine spoils one pass, not the figure */
    struct fig f[N_SIZES];
    for (int k = 0; k < N_SIZES; k++)
        f[k] = (struct fig){INFINITY, INFINITY, INFINITY, INFINITY};
    for (int pass = 0; pass < 3; pass++) {
        for (int k = 0; k < N_SIZES; k++) {
            double med, p10;
            time_one(comm, 0, buf, sizes[k], budget / 3, t, &med, &p10);
            f[k].med_block = fmin(f[k].med_block, med);
            f[k].p10_block = fmin(f[k].p10_block, p10);
            time_one(comm, 1, buf, sizes[k], budget / 3, t, &med, &p10);
            f[k].med_poll = fmin(f[k].med_poll, med);
            f[k].p10_poll = fmin(f[k].p10_poll, p10);
        }
    }

    if (rank == 0) {
        /* the ring model t = 2(N-1) a + 2(N-1)/N bytes / B, its two
         * parameters from the two ends of the medians */
        double ring = 2.0 * (size - 1) / size, hops = 2.0 * (size - 1);
        double big = (double)sizes[7] * 4;
        double a_b = f[0].med_block / hops, a_p = f[0].med_poll / hops;
        double bw_b = ring * big / (f[7].med_block - hops * a_b);
        double bw_p = ring * big / (f[7].med_poll - hops * a_p);
        printf("### all-reduce, %d ranks%s%s\n\n", size, *label ? ": " : "", label);
        printf("Ring model fitted to the medians at 64 floats (latency a) and 1 M floats "
               "(bandwidth B): a = %.2f us, B = %.2f GB/s (MPI_Allreduce); a = %.2f us, "
               "B = %.2f GB/s (ifl_comm_allreduce_sum).\n\n",
               a_b * 1e6, bw_b / 1e9, a_p * 1e6, bw_p / 1e9);
        printf("| floats | bytes | MPI_Allreduce us, median (p10) | model us | ifl_comm us, median "
               "(p10) | model us | ifl_comm bus GB/s |\n");
        printf("| ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
        int order[N_SIZES] = {0, 1, 2, 8, 3, 4, 5, 6, 7};
        for (int j = 0; j < N_SIZES; j++) {
            int k = order[j];
            double bytes = (double)sizes[k] * 4;
            printf("| %d | %.0f | %.2f (%.2f) | %.2f | %.2f (%.2f) | %.2f | %.2f |\n", sizes[k],
                   bytes, f[k].med_block * 1e6, f[k].p10_block * 1e6,
                   (hops * a_b + ring * bytes / bw_b) * 1e6, f[k].med_poll * 1e6,
                   f[k].p10_poll * 1e6, (hops * a_p + ring * bytes / bw_p) * 1e6,
                   ring * bytes / f[k].med_poll / 1e9);
        }
        printf("\n");
    }
    free(buf);
    free(t);
    ifl_comm_finalize(comm);
    return 0;
}
