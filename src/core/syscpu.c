/*
 * The CPUs this process may use (see syscpu.h).
 *
 * The quota is found as the kernel applies it: the process's cgroup is named
 * in /proc/self/cgroup (v2: the "0::PATH" line; v1: the line whose
 * controllers include "cpu"), the hierarchy's mount point and the cgroup
 * its mount shows as root come from /proc/self/mountinfo (a container sees
 * its own cgroup as the root), and every level from the process's cgroup up
 * to that root may cap it, so the smallest quota on the way wins. Formats:
 * Documentation/admin-guide/cgroup-v2.rst (cpu.max) and
 * Documentation/scheduler/sched-bwc.rst (cfs_quota_us, cfs_period_us), and
 * proc(5) for mountinfo's fields and octal escapes.
 */
#include "core/syscpu.h"

#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/err.h"

#define PATH_CAP 4096

/* A decimal integer in [1, 2^53] followed only by whitespace up to end, or
 * (when `end` is given) by one blank and more text, whose start goes to
 * *end. */
static int parse_count(const char *s, int64_t *v, const char **end)
{
    if (*s < '0' || *s > '9')
        return IFL_EFORMAT;
    int64_t x = 0;
    for (; *s >= '0' && *s <= '9'; s++) {
        x = x * 10 + (*s - '0');
        if (x > ((int64_t)1 << 53))
            return IFL_EFORMAT;
    }
    if (x < 1)
        return IFL_EFORMAT;
    if (end) {
        if (*s != ' ')
            return IFL_EFORMAT;
        *end = s + 1;
    } else {
        while (*s == ' ' || *s == '\n' || *s == '\t')
            s++;
        if (*s)
            return IFL_EFORMAT;
    }
    *v = x;
    return 0;
}

/* cpu.max into quota and period in microseconds; quota 0 for "max". */
static int parse_cpu_max(const char *text, int64_t *quota, int64_t *period)
{
    const char *rest;
    *quota = *period = 0;
    if (!strncmp(text, "max ", 4)) {
        rest = text + 4;
    } else if (parse_count(text, quota, &rest)) {
        *quota = 0;
        return IFL_EFORMAT;
    }
    if (parse_count(rest, period, NULL)) {
        *quota = *period = 0;
        return IFL_EFORMAT;
    }
    return 0;
}

static int parse_cfs(const char *q, const char *p, int64_t *quota, int64_t *period)
{
    *quota = *period = 0;
    if (parse_count(p, period, NULL))
        return IFL_EFORMAT;
    if (!strncmp(q, "-1", 2)) { /* no limit */
        const char *s = q + 2;
        while (*s == ' ' || *s == '\n' || *s == '\t')
            s++;
        if (*s)
            *period = 0;
        return *s ? IFL_EFORMAT : 0;
    }
    if (parse_count(q, quota, NULL)) {
        *quota = *period = 0;
        return IFL_EFORMAT;
    }
    return 0;
}

int ifl_syscpu_parse_cpu_max(const char *text, double *cpus)
{
    int64_t q, p;
    *cpus = 0;
    if (!text || parse_cpu_max(text, &q, &p))
        return IFL_EFORMAT;
    *cpus = q ? (double)q / (double)p : 0;
    return 0;
}

int ifl_syscpu_parse_cfs(const char *quota, const char *period, double *cpus)
{
    int64_t q, p;
    *cpus = 0;
    if (!quota || !period || parse_cfs(quota, period, &q, &p))
        return IFL_EFORMAT;
    *cpus = q ? (double)q / (double)p : 0;
    return 0;
}

/* The first line of a small file, NUL-terminated; -1 when unreadable. */
static int read_line(const char *path, char *buf, size_t cap)
{
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    int ok = fgets(buf, (int)cap, f) != NULL;
    fclose(f);
    return ok ? 0 : -1;
}

static int join(char *out, const char *a, const char *b, const char *c)
{
    int n = snprintf(out, PATH_CAP, "%s%s%s", a, b, c);
    return n < 0 || n >= PATH_CAP ? -1 : 0;
}

/* Whether the comma-separated list holds the token. */
static int has_token(const char *list, size_t len, const char *tok)
{
    size_t tl = strlen(tok);
    for (size_t i = 0; i < len;) {
        size_t j = i;
        while (j < len && list[j] != ',')
            j++;
        if (j - i == tl && !memcmp(list + i, tok, tl))
            return 1;
        i = j + 1;
    }
    return 0;
}

/* mountinfo writes space, tab, newline and backslash as \ooo. In place. */
static void unescape(char *s)
{
    char *w = s;
    for (char *r = s; *r;) {
        if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' &&
            r[3] >= '0' && r[3] <= '7') {
            *w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
            r += 4;
        } else {
            *w++ = *r++;
        }
    }
    *w = 0;
}

/* The cgroup path of hierarchy v2 (v1 = 0) or of v1's cpu controller, from
 * /proc/self/cgroup. */
static int cgroup_path(const char *root, int v1, char *out)
{
    char path[PATH_CAP];
    if (join(path, root, "/proc/self/cgroup", ""))
        return -1;
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    char *line = NULL;
    size_t cap = 0;
    ssize_t n;
    int found = -1;
    while (found && (n = getline(&line, &cap, f)) > 0) {
        if (line[n - 1] == '\n')
            line[--n] = 0;
        char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2)
            continue;
        int match = v1 ? has_token(c1 + 1, (size_t)(c2 - c1 - 1), "cpu")
                       : (c1 - line == 1 && line[0] == '0' && c2 == c1 + 1);
        if (match && strlen(c2 + 1) < PATH_CAP) {
            strcpy(out, c2 + 1);
            found = 0;
        }
    }
    free(line);
    fclose(f);
    return found;
}

/* The mount of hierarchy v2, or of v1's cpu controller: the cgroup it shows
 * as its root (mroot) and where it is mounted (mpoint). */
static int cgroup_mount(const char *root, int v1, char *mroot, char *mpoint)
{
    char path[PATH_CAP];
    if (join(path, root, "/proc/self/mountinfo", ""))
        return -1;
    FILE *f = fopen(path, "re");
    if (!f)
        return -1;
    char *line = NULL;
    size_t cap = 0;
    int found = -1;
    while (found && getline(&line, &cap, f) > 0) {
        /* id parent major:minor root mountpoint options [optional...] - type source superopts */
        char *save = NULL, *tok[6] = {0};
        char *t = strtok_r(line, " \n", &save);
        int i = 0;
        for (; t && i < 5; i++, t = strtok_r(NULL, " \n", &save))
            tok[i] = t;
        while (t && strcmp(t, "-"))
            t = strtok_r(NULL, " \n", &save);
        char *type = t ? strtok_r(NULL, " \n", &save) : NULL;
        char *src = type ? strtok_r(NULL, " \n", &save) : NULL;
        char *sopt = src ? strtok_r(NULL, " \n", &save) : NULL;
        if (i < 5 || !sopt)
            continue;
        int match = v1 ? !strcmp(type, "cgroup") && has_token(sopt, strlen(sopt), "cpu")
                       : !strcmp(type, "cgroup2");
        if (!match || strlen(tok[3]) >= PATH_CAP || strlen(tok[4]) >= PATH_CAP)
            continue;
        strcpy(mroot, tok[3]);
        strcpy(mpoint, tok[4]);
        unescape(mroot);
        unescape(mpoint);
        found = 0;
    }
    free(line);
    fclose(f);
    return found;
}

/* The quota one cgroup directory sets, in CPUs; 0: none. */
static double dir_quota(const char *dir, int v1)
{
    char path[PATH_CAP], a[128], b[128];
    int64_t q = 0, p = 0;
    if (v1) {
        if (join(path, dir, "/cpu.cfs_quota_us", "") || read_line(path, a, sizeof a) ||
            join(path, dir, "/cpu.cfs_period_us", "") || read_line(path, b, sizeof b) ||
            parse_cfs(a, b, &q, &p))
            return 0;
    } else {
        if (join(path, dir, "/cpu.max", "") || read_line(path, a, sizeof a) ||
            parse_cpu_max(a, &q, &p))
            return 0;
    }
    return q ? (double)q / (double)p : 0;
}

/* The smallest quota from the process's cgroup up to its mount's root. */
static double hierarchy_quota(const char *root, int v1)
{
    char cg[PATH_CAP], mroot[PATH_CAP], mpoint[PATH_CAP], dir[PATH_CAP];
    if (cgroup_path(root, v1, cg) || cgroup_mount(root, v1, mroot, mpoint))
        return 0;
    /* the part of the cgroup's path below the mount's root; a cgroup outside
     * it (a container without a cgroup namespace) is read at the mount point */
    const char *rel = "";
    size_t rl = strlen(mroot);
    if (!strcmp(mroot, "/"))
        rel = cg;
    else if (!strncmp(cg, mroot, rl) && (cg[rl] == '/' || cg[rl] == 0))
        rel = cg + rl;
    if (!strcmp(rel, "/"))
        rel = "";
    char base[PATH_CAP];
    if (join(base, root, mpoint, "") || join(dir, base, rel, ""))
        return 0;
    size_t bl = strlen(base);
    double best = 0;
    for (;;) {
        double q = dir_quota(dir, v1);
        if (q > 0 && (best == 0 || q < best))
            best = q;
        size_t dl = strlen(dir);
        if (dl <= bl)
            break;
        char *slash = strrchr(dir + bl, '/');
        if (!slash)
            break;
        *slash = 0;
    }
    return best;
}

static int affinity_count(void)
{
    for (int n = 1024; n <= 65536; n *= 4) {
        cpu_set_t *set = CPU_ALLOC((size_t)n);
        if (!set)
            return 0;
        size_t sz = CPU_ALLOC_SIZE((size_t)n);
        CPU_ZERO_S(sz, set);
        int rc = sched_getaffinity(0, sz, set);
        int count = rc == 0 ? CPU_COUNT_S(sz, set) : 0;
        int again = rc != 0 && errno == EINVAL; /* a mask wider than n */
        CPU_FREE(set);
        if (!again)
            return count;
    }
    return 0;
}

void ifl_syscpu_read(const char *root, struct ifl_syscpu *out)
{
    if (!root)
        root = "";
    long on = sysconf(_SC_NPROCESSORS_ONLN);
    out->n_online = on > 0 && on < (1 << 20) ? (int)on : 1;
    out->n_affinity = affinity_count();
    double q2 = hierarchy_quota(root, 0), q1 = hierarchy_quota(root, 1);
    out->quota = q1 > 0 && (q2 == 0 || q1 < q2) ? q1 : q2;
    int n = out->n_online;
    if (out->n_affinity > 0 && out->n_affinity < n)
        n = out->n_affinity;
    if (out->quota > 0) {
        /* rounded up: 1.5 CPUs' worth of time is best spent by 2 threads */
        double c = out->quota < (double)n ? out->quota : (double)n;
        int qn = (int)c;
        if ((double)qn < c)
            qn++;
        if (qn < n)
            n = qn;
    }
    out->n_usable = n > 0 ? n : 1;
}

int ifl_syscpu_count(int max)
{
    struct ifl_syscpu s;
    ifl_syscpu_read(NULL, &s);
    return s.n_usable < max ? s.n_usable : max > 0 ? max : 1;
}
