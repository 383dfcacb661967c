/*
 * Memory figures from /proc and /sys (see sysmem.h).
 *
 * The memory cgroup: /proc/self/cgroup names the group ("0::/path" for v2,
 * "N:...memory...:/path" for v1), /proc/self/mountinfo where that
 * hierarchy is mounted and which group its mount shows as its root (in a
 * container the mount's root is the container's own group). The limit is
 * read at the group and at each ancestor up to the mount's root, and the
 * level with the least room (limit - usage) wins: a parent's limit binds
 * its children as much as their own. v1 shows "no limit" as a huge
 * number (2^63 rounded down to a page), v2 as "max".
 */
#include "core/sysmem.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SYSMEM_PATH 1024

static FILE *open_at(const char *root, const char *path)
{
    char full[SYSMEM_PATH];
    if (snprintf(full, sizeof(full), "%s%s", root, path) >= (int)sizeof(full))
        return NULL;
    return fopen(full, "r");
}

/* One integer from a file ("max" is -1, as is anything unreadable). */
static int64_t read_value(const char *root, const char *dir, const char *name)
{
    char path[SYSMEM_PATH];
    if (snprintf(path, sizeof(path), "%s/%s", dir, name) >= (int)sizeof(path))
        return -1;
    FILE *f = open_at(root, path);
    if (!f)
        return -1;
    char buf[64] = "";
    int ok = fgets(buf, sizeof(buf), f) != NULL;
    fclose(f);
    if (!ok || !strncmp(buf, "max", 3))
        return -1;
    char *end;
    long long v = strtoll(buf, &end, 10);
    if (end == buf || v < 0)
        return -1;
    /* v1's "unlimited" is 2^63 - page size; anything past 2^62 means none */
    return v >= (1LL << 62) ? -1 : (int64_t)v;
}

static int64_t read_mem_available(const char *root)
{
    FILE *f = open_at(root, "/proc/meminfo");
    if (!f)
        return -1;
    char line[256];
    int64_t kb = -1;
    while (fgets(line, sizeof(line), f))
        if (!strncmp(line, "MemAvailable:", 13)) {
            long long v;
            if (sscanf(line + 13, "%lld", &v) == 1 && v >= 0)
                kb = v;
            break;
        }
    fclose(f);
    return kb < 0 ? -1 : kb * 1024;
}

/* The group's path in the hierarchy that has the memory controller: v1's
 * memory line, else v2's "0::" line. Returns the version, 0 if neither. */
static int find_group(const char *root, char *path, size_t cap)
{
    FILE *f = open_at(root, "/proc/self/cgroup");
    if (!f)
        return 0;
    char line[SYSMEM_PATH];
    int version = 0;
    while (fgets(line, sizeof(line), f)) {
        line[strcspn(line, "\n")] = 0;
        char *c1 = strchr(line, ':');
        char *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
        if (!c2 || strlen(c2 + 1) >= cap)
            continue;
        *c1 = 0;
        *c2 = 0;
        const char *ctrl = c1 + 1;
        int is_v1_mem = 0;
        for (const char *t = ctrl; *t;) {
            size_t n = strcspn(t, ",");
            if (n == 6 && !strncmp(t, "memory", 6))
                is_v1_mem = 1;
            t += n + (t[n] == ',');
        }
        if (is_v1_mem) {
            strcpy(path, c2 + 1);
            version = 1;
            break; /* v1's memory controller is the one that limits */
        }
        if (!strcmp(line, "0") && !*ctrl) {
            strcpy(path, c2 + 1);
            version = 2;
        }
    }
    fclose(f);
    return version;
}

/* Where the hierarchy of that version (v1: the one with "memory" among
 * its super options) is mounted, and the group its mount shows as root. */
static int find_mount(const char *root, int version, char *mnt, char *mroot, size_t cap)
{
    FILE *f = open_at(root, "/proc/self/mountinfo");
    if (!f)
        return -1;
    char line[4096];
    int found = -1;
    while (found && fgets(line, sizeof(line), f)) {
        /* id parent maj:min root mountpoint options [optional...] - type source super */
        char r[SYSMEM_PATH], m[SYSMEM_PATH];
        if (sscanf(line, "%*s %*s %*s %1023s %1023s", r, m) != 2)
            continue;
        const char *dash = strstr(line, " - ");
        if (!dash)
            continue;
        char type[64] = "", super[SYSMEM_PATH] = "";
        if (sscanf(dash + 3, "%63s %*s %1023s", type, super) < 1)
            continue;
        int match = 0;
        if (version == 2)
            match = !strcmp(type, "cgroup2");
        else if (!strcmp(type, "cgroup"))
            for (const char *t = super; *t;) {
                size_t n = strcspn(t, ",");
                if (n == 6 && !strncmp(t, "memory", 6))
                    match = 1;
                t += n + (t[n] == ',');
            }
        if (match && strlen(m) < cap && strlen(r) < cap) {
            strcpy(mnt, m);
            strcpy(mroot, r);
            found = 0;
        }
    }
    fclose(f);
    return found;
}

static void read_cgroup(const char *root, struct ifl_sysmem *out)
{
    char group[SYSMEM_PATH], mnt[SYSMEM_PATH], mroot[SYSMEM_PATH];
    int version = find_group(root, group, sizeof(group));
    if (!version || find_mount(root, version, mnt, mroot, sizeof(mnt)))
        return;
    /* the part of the group's path below the mount's root */
    const char *rel = group;
    size_t rl = strlen(mroot);
    if (strcmp(mroot, "/") && !strncmp(group, mroot, rl) && (group[rl] == '/' || !group[rl]))
        rel = group + rl;
    char dir[2 * SYSMEM_PATH];
    snprintf(dir, sizeof(dir), "%s%s", mnt, strcmp(rel, "/") ? rel : "");
    size_t mlen = strlen(mnt);
    const char *limit_name = version == 2 ? "memory.max" : "memory.limit_in_bytes";
    const char *usage_name = version == 2 ? "memory.current" : "memory.usage_in_bytes";
    int64_t best_room = -1;
    for (;;) {
        int64_t lim = read_value(root, dir, limit_name);
        if (lim >= 0) {
            int64_t use = read_value(root, dir, usage_name);
            if (use < 0)
                use = 0;
            int64_t room = lim > use ? lim - use : 0;
            if (best_room < 0 || room < best_room) {
                best_room = room;
                out->cg_limit = lim;
                out->cg_usage = use;
                out->cg_version = version;
            }
        }
        if (strlen(dir) <= mlen)
            break;
        char *slash = strrchr(dir, '/');
        if (!slash || (size_t)(slash - dir) < mlen)
            break;
        *slash = 0;
    }
}

void ifl_sysmem_read(const char *root, struct ifl_sysmem *out)
{
    if (!root)
        root = "";
    out->mem_available = read_mem_available(root);
    out->cg_limit = -1;
    out->cg_usage = -1;
    out->cg_version = 0;
    read_cgroup(root, out);
}

int64_t ifl_sysmem_resident(const void *p, size_t n)
{
    if (!p || !n)
        return 0;
    long pg = sysconf(_SC_PAGESIZE);
    if (pg <= 0)
        return -1;
    const uintptr_t page = (uintptr_t)pg;
    uintptr_t a = (uintptr_t)p & ~(page - 1), end = (uintptr_t)p + n;
    unsigned char vec[4096];
    int64_t resident = 0;
    while (a < end) {
        size_t pages = (end - a + page - 1) / page;
        if (pages > sizeof vec)
            pages = sizeof vec;
        if (mincore((void *)a, pages * page, vec))
            return -1;
        for (size_t i = 0; i < pages; i++)
            resident += vec[i] & 1;
        a += pages * page;
    }
    resident *= (int64_t)page;
    return resident < (int64_t)n ? resident : (int64_t)n;
}

int64_t ifl_sysmem_rss(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return -1;
    long long size, res;
    int n = fscanf(f, "%lld %lld", &size, &res);
    fclose(f);
    long page = sysconf(_SC_PAGESIZE);
    return n == 2 && page > 0 ? (int64_t)res * page : -1;
}

int ifl_sysmem_parse_amount(const char *s, int64_t *bytes, double *share)
{
    *bytes = 0;
    *share = 0;
    if (!s || !*s)
        return -1;
    char *end;
    size_t n = strlen(s);
    if (s[n - 1] == '%') {
        double p = strtod(s, &end);
        if (end != s + n - 1 || !(p > 0) || p > 100)
            return -1;
        *share = p / 100;
        return 0;
    }
    if (*s < '0' || *s > '9')
        return -1;
    unsigned long long v = strtoull(s, &end, 10);
    int shift = 0;
    if (*end) {
        switch (*end) {
        case 'k':
        case 'K':
            shift = 10;
            break;
        case 'm':
        case 'M':
            shift = 20;
            break;
        case 'g':
        case 'G':
            shift = 30;
            break;
        case 't':
        case 'T':
            shift = 40;
            break;
        default:
            return -1;
        }
        end++;
        if (*end == 'i')
            end++;
        if (*end == 'B' || *end == 'b')
            end++;
        if (*end)
            return -1;
    }
    if (v == 0 || v > (1ULL << 62) >> shift)
        return -1;
    *bytes = (int64_t)(v << shift);
    return 0;
}
