/*
 * What memory this process has and may use: its resident set, the
 * kernel's estimate of memory available without swapping (MemAvailable),
 * and the room its memory cgroup leaves (cgroup v2 memory.max or v1
 * memory.limit_in_bytes, each less what the group already uses, the
 * tightest level of the hierarchy winning). The executor sizes its default
 * KV pool from these and the server shows them.
 *
 * Everything is read from /proc and /sys at call time; nothing is cached.
 * Thread-safe (no shared state).
 */
#ifndef IFL_CORE_SYSMEM_H
#define IFL_CORE_SYSMEM_H

#include <stddef.h>
#include <stdint.h>

struct ifl_sysmem {
    int64_t mem_available; /* bytes, -1: unknown (no /proc/meminfo) */
    int64_t cg_limit;      /* bytes, -1: no limit found */
    int64_t cg_usage;      /* bytes the limiting group uses (with cg_limit), else -1 */
    int cg_version;        /* 1 or 2 for the group that set cg_limit, else 0 */
};

/* Reads the figures above. root prefixes every path ("" or NULL for the
 * real /proc and /sys; tests point it at a directory laid out the same). */
void ifl_sysmem_read(const char *root, struct ifl_sysmem *out);

/* Bytes of [p, p + n) in memory now (mincore over the pages it touches,
 * counted whole, at most n), -1 if unknown. */
int64_t ifl_sysmem_resident(const void *p, size_t n);

/* The process's resident set in bytes (/proc/self/statm), -1 if unknown. */
int64_t ifl_sysmem_rss(void);

/* Parses an amount of memory: a percentage ("40%", "12.5%": *share in
 * (0, 1]) or a size in bytes with an optional binary suffix ("2G", "512M",
 * "64k", "1048576": *bytes > 0); the other output is set to 0. Returns 0,
 * or -1 for anything else (a bare fraction like "0.4" included). */
int ifl_sysmem_parse_amount(const char *s, int64_t *bytes, double *share);

#endif
