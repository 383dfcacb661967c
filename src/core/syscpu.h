/*
 * How many CPUs this process may use: the online CPUs, narrowed by the
 * affinity mask (taskset, cpusets) and by the cgroup CPU quota (cgroup v2
 * cpu.max, v1 cpu.cfs_quota_us / cpu.cfs_period_us), as containers set them.
 * The forward pass's default thread count is this figure: a thread more than
 * the CPUs it may run on only waits at barriers for one that is descheduled.
 *
 * Thread safety: the functions keep no state; they read /proc and /sys.
 */
#ifndef IFL_CORE_SYSCPU_H
#define IFL_CORE_SYSCPU_H

struct ifl_syscpu {
    int n_online;   /* CPUs online (sysconf) */
    int n_affinity; /* CPUs in the calling thread's affinity mask; 0: unknown */
    double quota;   /* CPUs' worth of time the cgroup quota allows; 0: no quota */
    int n_usable;   /* the smallest of those, the quota rounded up; >= 1 */
};

/* Fills *out. root prefixes every /proc and /sys path read (NULL or "": the
 * real ones; tests give a directory laid out alike). Files that are absent or
 * do not parse count as "no limit", so this always succeeds. */
void ifl_syscpu_read(const char *root, struct ifl_syscpu *out);

/* ifl_syscpu_read(NULL, ...)'s n_usable, capped at max (max >= 1). */
int ifl_syscpu_count(int max);

/* The text of a cgroup v2 cpu.max file, "QUOTA PERIOD" in microseconds or
 * "max PERIOD": *cpus = QUOTA / PERIOD, 0 for "max". IFL_EFORMAT (and
 * *cpus = 0) for anything else. */
int ifl_syscpu_parse_cpu_max(const char *text, double *cpus);

/* cgroup v1: the texts of cpu.cfs_quota_us and cpu.cfs_period_us; a quota
 * of -1 is no limit (*cpus = 0). IFL_EFORMAT for anything else. */
int ifl_syscpu_parse_cfs(const char *quota, const char *period, double *cpus);

#endif
