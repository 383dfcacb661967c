/*
 * Repacking at load: the matrices the kernel table computes faster as x16
 * groups (kernels.h) are copied into that layout, on a pool of threads,
 * either into an anonymous map or, with a repack cache directory, into a
 * file there that later starts map instead of repacking again.
 *
 * Where a start's time went before this file (tinyllama-1.1b Q8_0, 1.1 GB,
 * on a 2-vCPU KVM guest): 78 % clearing fresh pages (the kernel zeroes
 * every page of the anonymous map on its first touch; in a guest that
 * also faults the host), 15 % the repack's moves, the rest noise. So the
 * work is split in chunks of about 1 MiB that every thread takes in turn:
 * both the first touches and the moves run on all threads. A warm start
 * from the cache maps pages the page cache already holds: nothing to
 * zero and nothing to move.
 *
 * Invariants: the bytes of a repacked matrix do not depend on the path
 * (fresh, cache built, cache mapped) nor on the thread count: each chunk
 * is a fixed range of x16 groups, written by ifl_repack_x16 alone. A
 * matrix's checksum folds its chunks' checksums in chunk order.
 *
 * Memory: once a chunk is copied, the file pages it was read from are
 * released (ifl_gguf_release: MADV_DONTNEED on the private read-only map,
 * which drops them from the process; the page cache keeps them), so the
 * resident set stays near the file's size and never holds both copies.
 *
 * The cache file (all integers little-endian, this machine's order):
 *   header: magic "IFLX16C1", u32 version, u32 header bytes (a multiple
 *           of 4096), u64 model file size, u64 mtime (ns), u64 device,
 *           u64 inode, char[16] kernel table name, u32 matrix count,
 *           u32 chunk bytes, u64 data bytes,
 *           then per matrix: u64 tensor data offset in the model file,
 *           u64 bytes, u64 offset in the cache file, u64 checksum;
 *           then u64 checksum of all the header bytes before it
 *   data:   each matrix at its offset (64-byte aligned), in x16 groups.
 * A file whose header does not match the model file and kernel table
 * (stale) or whose checksums do not match (corrupt) is rebuilt, and the
 * progress callback gets a notice saying which and why.
 */
#include "model/model.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "core/err.h"
#include "core/pool.h"
#include "core/timeutil.h"
#include "kernels/kernels.h"

#define CACHE_MAGIC "IFLX16C1"
#define CACHE_VERSION 1u
#define CHUNK_BYTES ((size_t)1 << 20)
#define PER_MAT 32 /* header bytes per matrix */

/* One chunk of work: groups [g0, g1) of matrix mi. */
struct chunk {
    int mi;
    int64_t g0, g1;
};

struct job {
    struct ifl_model *m;
    struct ifl_mat **mats; /* [n_mats] */
    size_t *dst_off;       /* [n_mats] where each goes, from base */
    uint64_t *mat_sum;     /* [n_mats] */
    int n_mats;
    struct chunk *chunks; /* [n_chunks] in matrix order */
    uint64_t *chunk_sum;  /* [n_chunks] */
    int64_t n_chunks;
    char *base;               /* the destination (or the mapped cache) */
    int verify;               /* 1: checksum base only; 0: repack into base */
    int release;              /* 1: release the file pages of each repacked chunk */
    atomic_int_fast64_t next; /* next chunk to take; relaxed: a ticket */
    atomic_int_fast64_t done; /* bytes finished; relaxed: only for progress */
    /* progress, called from thread 0 only */
    const struct ifl_model_load_opts *o;
    int64_t total, base_done, t_last_us;
    const char *stage;
    int delay_ms; /* IFL_TEST_LOAD_DELAY_MS (tests) */
};

/* A 64-bit checksum of n bytes, as cheap as reading them: eight lanes of
 * 64-bit words, each keeping a sum of its words (a) and a sum of those
 * sums (b, which weighs each word by its distance from the end, so moved
 * words count too), mixed at the end. Any change confined to one word
 * changes a; it is not a defence against someone forging a file. */
static uint64_t checksum(const void *p, size_t n)
{
    const uint64_t K = 0x9E3779B97F4A7C15ull;
    uint64_t a[8] = {0}, b[8] = {0};
    const unsigned char *s = p;
    size_t i = 0;
    for (; i + 64 <= n; i += 64) {
        uint64_t w[8];
        memcpy(w, s + i, 64);
        for (int j = 0; j < 8; j++) {
            a[j] += w[j];
            b[j] += a[j];
        }
    }
    uint64_t h = (uint64_t)n * K;
    for (; i < n; i++)
        h = (h ^ s[i]) * K;
    for (int j = 0; j < 8; j++) {
        h = ((h ^ a[j]) * K) ^ (h >> 31);
        h = ((h ^ b[j]) * K) ^ (h >> 29);
    }
    return h;
}

static uint64_t fold(uint64_t h, uint64_t v)
{
    return ((h ^ v) * 0xC2B2AE3D27D4EB4Full) ^ (h >> 29);
}

static void report(const struct ifl_model_load_opts *o, int64_t done, int64_t total,
                   const char *stage, const char *notice)
{
    if (!o || !o->progress)
        return;
    struct ifl_load_progress p = {.done = done, .total = total, .stage = stage, .notice = notice};
    o->progress(o->progress_user, &p);
}

static void run_chunk(struct job *J, int64_t ci)
{
    const struct chunk *c = &J->chunks[ci];
    struct ifl_mat *w = J->mats[c->mi];
    size_t group = 16 * w->row_bytes;
    char *dst = J->base + J->dst_off[c->mi] + (size_t)c->g0 * group;
    size_t bytes = (size_t)(c->g1 - c->g0) * group;
    if (!J->verify) {
        const char *src = (const char *)w->data + (size_t)c->g0 * group;
        for (int64_t g = c->g0; g < c->g1; g++)
            ifl_repack_x16(w->type, w->n_in, (const char *)w->data + (size_t)g * group,
                           w->row_bytes, dst + (size_t)(g - c->g0) * group);
        if (J->release)
            ifl_gguf_release(J->m->gguf, src, bytes);
    }
#ifdef MADV_POPULATE_READ
    else { /* map the chunk's pages in one call rather than a fault per 16 of them */
        uintptr_t page = 4096, a = (uintptr_t)dst / page * page;
        madvise((void *)a, (uintptr_t)dst + bytes - a, MADV_POPULATE_READ);
    }
#endif
    J->chunk_sum[ci] = checksum(dst, bytes);
    atomic_fetch_add_explicit(&J->done, (int_fast64_t)bytes, memory_order_relaxed);
}

static void job_fn(void *arg, int ith, int nth)
{
    (void)nth;
    struct job *J = arg;
    for (;;) {
        int64_t ci = atomic_fetch_add_explicit(&J->next, 1, memory_order_relaxed);
        if (ci >= J->n_chunks)
            break;
        run_chunk(J, ci);
        if (J->delay_ms > 0 && J->chunks[ci].g1 == (J->mats[J->chunks[ci].mi]->n_out / 16))
            nanosleep(&(struct timespec){.tv_sec = J->delay_ms / 1000,
                                         .tv_nsec = (long)(J->delay_ms % 1000) * 1000000L},
                      NULL);
        if (ith == 0 && J->o && J->o->progress) {
            int64_t now = ifl_now_us();
            if (now - J->t_last_us >= 20000) { /* 50 calls a second at most */
                J->t_last_us = now;
                report(J->o, J->base_done + atomic_load_explicit(&J->done, memory_order_relaxed),
                       J->total, J->stage, NULL);
            }
        }
    }
}

/* Runs the job on n_threads threads (a pool made for it, or this thread
 * alone if that fails), then folds the chunk checksums per matrix. */
static void run_job(struct job *J, int n_threads)
{
    atomic_store_explicit(&J->next, 0, memory_order_relaxed);
    atomic_store_explicit(&J->done, 0, memory_order_relaxed);
    const char *d = getenv("IFL_TEST_LOAD_DELAY_MS");
    J->delay_ms = d ? atoi(d) : 0;
    if (J->delay_ms > 10000)
        J->delay_ms = 10000;
    struct ifl_pool *pool = NULL;
    if (J->n_chunks > 1 && ifl_pool_create(&pool, n_threads) == 0) {
        ifl_pool_run(pool, job_fn, J);
        ifl_pool_free(pool);
    } else {
        job_fn(J, 0, 1);
    }
    for (int i = 0; i < J->n_mats; i++)
        J->mat_sum[i] = 0x243F6A8885A308D3ull;
    for (int64_t ci = 0; ci < J->n_chunks; ci++)
        J->mat_sum[J->chunks[ci].mi] = fold(J->mat_sum[J->chunks[ci].mi], J->chunk_sum[ci]);
}

static int wants_x16(const struct ifl_kernels *kn, const struct ifl_mat *w)
{
    return w->data && kn->x16_pays[w->type] && kn->gemm_x16[w->type] && w->n_out % 16 == 0;
}

/* ---- the cache file ---- */

struct cache_id {
    uint64_t size, mtime_ns, dev, ino;
    char kernels[16];
};

static void put64(unsigned char **p, uint64_t v)
{
    memcpy(*p, &v, 8);
    *p += 8;
}

static void put32(unsigned char **p, uint32_t v)
{
    memcpy(*p, &v, 4);
    *p += 4;
}

static uint64_t get64(const unsigned char **p)
{
    uint64_t v;
    memcpy(&v, *p, 8);
    *p += 8;
    return v;
}

static uint32_t get32(const unsigned char **p)
{
    uint32_t v;
    memcpy(&v, *p, 4);
    *p += 4;
    return v;
}

/* Bytes of the header up to (not including) its closing checksum. */
static size_t header_body(int n_mats)
{
    return 8 + 4 + 4 + 4 * 8 + 16 + 4 + 4 + 8 + (size_t)n_mats * PER_MAT;
}

static size_t header_bytes(int n_mats)
{
    return (header_body(n_mats) + 8 + 4095) / 4096 * 4096;
}

static void write_header(unsigned char *h, const struct cache_id *id, const struct job *J,
                         size_t data_bytes)
{
    unsigned char *p = h;
    memcpy(p, CACHE_MAGIC, 8);
    p += 8;
    put32(&p, CACHE_VERSION);
    put32(&p, (uint32_t)header_bytes(J->n_mats));
    put64(&p, id->size);
    put64(&p, id->mtime_ns);
    put64(&p, id->dev);
    put64(&p, id->ino);
    memcpy(p, id->kernels, 16);
    p += 16;
    put32(&p, (uint32_t)J->n_mats);
    put32(&p, (uint32_t)CHUNK_BYTES);
    put64(&p, data_bytes);
    for (int i = 0; i < J->n_mats; i++) {
        put64(&p,
              (uint64_t)((const char *)J->mats[i]->data - (const char *)ifl_gguf_base(J->m->gguf)));
        put64(&p, (uint64_t)J->mats[i]->n_out * J->mats[i]->row_bytes);
        put64(&p, J->dst_off[i]);
        put64(&p, J->mat_sum[i]);
    }
    put64(&p, checksum(h, header_body(J->n_mats)));
}

/* Checks a mapped cache's header against what this start would write.
 * Returns 0 when it matches, else fills why (a clause) and returns -1. */
static int check_header(const unsigned char *h, size_t file_bytes, const struct cache_id *id,
                        const struct job *J, size_t data_bytes, char *why, size_t why_len,
                        const char **kind)
{
    *kind = "corrupt";
    size_t hb = header_bytes(J->n_mats);
    if (file_bytes < 8 || memcmp(h, CACHE_MAGIC, 8)) {
        snprintf(why, why_len, "it is not an inflight repack cache (bad magic)");
        return -1;
    }
    const unsigned char *p = h + 8;
    uint32_t ver = get32(&p), hdr = get32(&p);
    if (ver != CACHE_VERSION) {
        snprintf(why, why_len, "it has format version %u, this build writes %u", ver,
                 CACHE_VERSION);
        *kind = "stale";
        return -1;
    }
    if (file_bytes != hb + data_bytes || hdr != hb) {
        snprintf(why, why_len, "it is %zu bytes, expected %zu (truncated or from another layout)",
                 file_bytes, hb + data_bytes);
        return -1;
    }
    uint64_t hsum;
    memcpy(&hsum, h + header_body(J->n_mats), 8);
    if (hsum != checksum(h, header_body(J->n_mats))) {
        snprintf(why, why_len, "its header fails its checksum");
        return -1;
    }
    uint64_t size = get64(&p), mtime = get64(&p), dev = get64(&p), ino = get64(&p);
    if (size != id->size || mtime != id->mtime_ns || dev != id->dev || ino != id->ino) {
        snprintf(why, why_len,
                 "it was made from another version of the model file (size, modification time "
                 "or inode differ)");
        *kind = "stale";
        return -1;
    }
    if (memcmp(p, id->kernels, 16)) {
        snprintf(why, why_len, "it was made for the '%.16s' kernels, this machine uses '%.16s'",
                 (const char *)p, id->kernels);
        *kind = "stale";
        return -1;
    }
    p += 16;
    if (get32(&p) != (uint32_t)J->n_mats || get32(&p) != (uint32_t)CHUNK_BYTES ||
        get64(&p) != data_bytes) {
        snprintf(why, why_len, "it holds another set of matrices");
        *kind = "stale";
        return -1;
    }
    for (int i = 0; i < J->n_mats; i++) {
        uint64_t off = get64(&p), bytes = get64(&p), dst = get64(&p);
        p += 8; /* the checksum, checked after the data is read */
        uint64_t want =
            (uint64_t)((const char *)J->mats[i]->data - (const char *)ifl_gguf_base(J->m->gguf));
        if (off != want || bytes != (uint64_t)J->mats[i]->n_out * J->mats[i]->row_bytes ||
            dst != J->dst_off[i]) {
            snprintf(why, why_len, "its matrix %d does not match the model's", i);
            *kind = "stale";
            return -1;
        }
    }
    return 0;
}

/* The cache's path: DIR/<model base name>.<hash of its real path and the
 * kernel table>.x16 */
static int cache_path(char *out, size_t cap, const char *dir, const char *model_path,
                      const char *kernels)
{
    char real[PATH_MAX];
    if (!realpath(model_path, real))
        snprintf(real, sizeof real, "%s", model_path);
    const char *base = strrchr(real, '/');
    base = base ? base + 1 : real;
    uint64_t h = fold(checksum(real, strlen(real)), checksum(kernels, strlen(kernels)));
    int n = snprintf(out, cap, "%s/%.160s.%016llx.x16", dir, base, (unsigned long long)h);
    return n > 0 && (size_t)n < cap ? 0 : -1;
}

/* A cache file's directory into dir (PATH_MAX bytes); returns the slash
 * before the file's name, or NULL when path has no directory part. */
static const char *split_dir(const char *path, char *dir)
{
    const char *slash = strrchr(path, '/');
    size_t dl = slash ? (size_t)(slash - path) : 0;
    if (dl == 0 || dl >= PATH_MAX)
        return NULL;
    memcpy(dir, path, dl);
    dir[dl] = 0;
    return slash;
}

/* Removes what crashed builds of this cache file left: "<path>.tmp.<pid>"
 * files whose process is gone. A live writer's file is left alone (two
 * processes may build the same cache at once; the last rename wins). */
static void sweep_stale_tmp(const char *path)
{
    char dir[PATH_MAX];
    const char *slash = split_dir(path, dir);
    if (!slash)
        return;
    char prefix[PATH_MAX];
    int pl = snprintf(prefix, sizeof prefix, "%s.tmp.", slash + 1);
    if (pl <= 0 || (size_t)pl >= sizeof prefix)
        return;
    DIR *d = opendir(dir);
    if (!d)
        return;
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, prefix, (size_t)pl))
            continue;
        char *end;
        long pid = strtol(e->d_name + pl, &end, 10);
        if (*end || pid <= 0 || pid == (long)getpid())
            continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue; /* alive, or not ours to judge */
        char full[PATH_MAX + 256];
        if (snprintf(full, sizeof full, "%s/%s", dir, e->d_name) < (int)sizeof full)
            unlink(full);
    }
    closedir(d);
}

/* A cache file's name as cache_path makes it: "*.<16 hex digits>.x16". */
static int is_cache_name(const char *name)
{
    size_t n = strlen(name);
    if (n < 22 || strcmp(name + n - 4, ".x16") || name[n - 21] != '.')
        return 0;
    for (size_t i = n - 20; i < n - 4; i++)
        if (!isxdigit((unsigned char)name[i]))
            return 0;
    return 1;
}

struct cache_file {
    char name[NAME_MAX + 1];
    int64_t bytes;
    int64_t used_ns; /* modification time: set when written and at each use */
};

static int newest_first(const void *a, const void *b)
{
    const struct cache_file *x = a, *y = b;
    return x->used_ns > y->used_ns ? -1 : x->used_ns < y->used_ns;
}

/* Keeps the cache files of path's directory within max bytes in all:
 * path itself (just written or used) stays, the others go least recently
 * used first (a process that maps one keeps its pages). Writes what went
 * to notice (empty if nothing). */
static void trim_cache(const char *path, int64_t max, char *notice, size_t cap)
{
    notice[0] = 0;
    char dir[PATH_MAX];
    const char *slash = split_dir(path, dir);
    if (max < 0 || !slash)
        return;
    DIR *d = opendir(dir);
    if (!d)
        return;
    struct cache_file *f = NULL;
    size_t n = 0, cap_f = 0;
    int64_t total = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (!is_cache_name(e->d_name) || !strcmp(e->d_name, slash + 1))
            continue;
        struct stat st;
        if (fstatat(dirfd(d), e->d_name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode))
            continue;
        if (n == cap_f) {
            size_t c = cap_f ? 2 * cap_f : 16;
            struct cache_file *g = realloc(f, sizeof *f * c);
            if (!g)
                break;
            f = g;
            cap_f = c;
        }
        snprintf(f[n].name, sizeof f[n].name, "%s", e->d_name);
        f[n].bytes = (int64_t)st.st_size;
        f[n].used_ns = (int64_t)st.st_mtim.tv_sec * 1000000000 + st.st_mtim.tv_nsec;
        total += f[n].bytes;
        n++;
    }
    struct stat self;
    int64_t kept = stat(path, &self) ? 0 : (int64_t)self.st_size;
    if (n && kept + total > max) {
        qsort(f, n, sizeof *f, newest_first);
        int removed = 0;
        int64_t freed = 0;
        for (size_t i = 0; i < n; i++) {
            if (kept + f[i].bytes <= max) {
                kept += f[i].bytes;
                continue;
            }
            if (unlinkat(dirfd(d), f[i].name, 0) == 0) {
                removed++;
                freed += f[i].bytes;
            }
        }
        if (removed)
            snprintf(notice, cap,
                     "repack cache: removed %d least recently used file%s (%.1f MiB) to keep "
                     "'%s' within %.1f GiB",
                     removed, removed == 1 ? "" : "s", (double)freed / 1048576.0, dir,
                     (double)max / 1073741824.0);
    }
    free(f);
    closedir(d);
}

/* The bound on a cache directory's files (ifl_model_load_opts). */
static int64_t cache_max(const struct ifl_model_load_opts *o)
{
    return o->repack_cache_max ? o->repack_cache_max : IFL_REPACK_CACHE_MAX_DEFAULT;
}

/* Maps an existing cache read-only and checks it; 0 when it can be used
 * (m->x16 then owns the map). Else a notice says why it is rebuilt, or
 * notice stays empty when there is no cache file. */
static int try_cache(struct job *J, const char *path, const struct cache_id *id, size_t data_bytes,
                     int n_threads, char *notice, size_t cap)
{
    notice[0] = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        if (errno != ENOENT)
            snprintf(notice, cap, "repack cache '%s' cannot be opened (%s); rebuilding it", path,
                     strerror(errno));
        return -1;
    }
    struct stat st;
    void *map = MAP_FAILED;
    char why[200] = "";
    if (fstat(fd, &st) == 0 && st.st_size >= 4096)
        map = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    else
        snprintf(why, sizeof why, "it is %lld bytes, too small for a header",
                 (long long)st.st_size);
    close(fd);
    if (map == MAP_FAILED) {
        if (!why[0])
            snprintf(why, sizeof why, "it cannot be mapped (%s)", strerror(errno));
        snprintf(notice, cap, "repack cache '%s' is unusable: %s; rebuilding it", path, why);
        return -1;
    }
    /* after a cold boot the file comes from disk: ask for all of it now,
     * in the background, while the threads check it piece by piece */
    madvise(map, (size_t)st.st_size, MADV_WILLNEED);
    size_t hb = header_bytes(J->n_mats);
    const char *kind;
    if (check_header(map, (size_t)st.st_size, id, J, data_bytes, why, sizeof why, &kind)) {
        munmap(map, (size_t)st.st_size);
        snprintf(notice, cap, "repack cache '%s' is %s: %s; rebuilding it", path, kind, why);
        return -1;
    }
    J->base = (char *)map + hb;
    J->verify = 1;
    J->release = 0;
    J->stage = "checking the repack cache";
    run_job(J, n_threads);
    const unsigned char *p = (const unsigned char *)map + 8 + 4 + 4 + 4 * 8 + 16 + 4 + 4 + 8;
    for (int i = 0; i < J->n_mats; i++) {
        p += 24;
        if (get64(&p) != J->mat_sum[i]) {
            munmap(map, (size_t)st.st_size);
            snprintf(notice, cap,
                     "repack cache '%s' is corrupt: matrix %d (%lld x %lld) fails its checksum; "
                     "rebuilding it",
                     path, i, (long long)J->mats[i]->n_out, (long long)J->mats[i]->n_in);
            return -1;
        }
    }
    J->m->x16 = map;
    J->m->x16_bytes = (size_t)st.st_size;
    return 0;
}

/* Creates the cache file under a temporary name, with its blocks
 * allocated (a shared map of a file the disk cannot hold would fault with
 * SIGBUS at the first write past the space). Returns the map or NULL with
 * a notice. */
static void *create_cache(const char *tmp, size_t bytes, char *notice, size_t cap)
{
    int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        snprintf(notice, cap, "repack cache: cannot create '%s' (%s); repacking in memory only",
                 tmp, strerror(errno));
        return NULL;
    }
    int e = posix_fallocate(fd, 0, (off_t)bytes);
    void *map = MAP_FAILED;
    if (e == 0) {
        map = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
        e = map == MAP_FAILED ? errno : 0;
    }
    close(fd);
    if (e) {
        unlink(tmp);
        snprintf(notice, cap,
                 "repack cache: cannot write %zu bytes to '%s' (%s); repacking in "
                 "memory only",
                 bytes, tmp, strerror(e));
        return NULL;
    }
    return map;
}

int ifl_model_repack(struct ifl_model *m, const struct ifl_model_load_opts *o, char *err)
{
    const char *env = getenv("IFL_REPACK");
    int64_t total = (int64_t)m->weight_bytes;
    if (env && !strcmp(env, "0")) {
        report(o, total, total, "ready", NULL);
        return 0;
    }
    const struct ifl_kernels *kn = ifl_kernels_best();
    const struct ifl_units *U = m->units;
    int per_layer = 7, cap = m->hp.n_layer * (per_layer + 3 + (U ? 2 * U->n : 0)) + 1, rc = 0;
    struct job J = {.m = m, .o = o, .total = total, .stage = "repacking"};
    J.mats = malloc(sizeof(*J.mats) * (size_t)cap);
    J.dst_off = malloc(sizeof(*J.dst_off) * (size_t)cap);
    J.mat_sum = malloc(sizeof(*J.mat_sum) * (size_t)cap);
    if (!J.mats || !J.dst_off || !J.mat_sum) {
        rc = ifl_err(err, IFL_ENOMEM, "model: out of memory");
        goto out;
    }
    for (int il = 0; il < m->hp.n_layer; il++) {
        struct ifl_layer_weights *w = &m->layers[il];
        struct ifl_mat *lm[] = {&w->wq, &w->wk, &w->wv, &w->wo, &w->w_gate, &w->w_up, &w->w_down};
        for (int i = 0; i < per_layer; i++) {
            /* summing in units: the units are read instead of wo and down */
            if (U && ((lm[i] == &w->wo && U->wo_split) || lm[i] == &w->w_down))
                continue;
            if (wants_x16(kn, lm[i]))
                J.mats[J.n_mats++] = lm[i];
        }
        for (int r = 0; U && r < U->n; r++) {
            struct ifl_mat *um[] = {U->wo_split ? &U->wo[(size_t)il * U->n + r] : NULL,
                                    &U->down[(size_t)il * U->n + r]};
            for (int i = 0; i < 2; i++)
                if (um[i] && wants_x16(kn, um[i]) &&
                    (!m->hp.n_expert || i == 0 || (um[i]->n_out / m->hp.n_expert) % 16 == 0))
                    J.mats[J.n_mats++] = um[i];
        }
        /* experts: one matrix of all their rows, repacked when each
         * expert's slice is whole groups (forward_moe.c computes a slice);
         * summing in units, down's units stand for down */
        struct ifl_mat *em[] = {&w->gate_exps, &w->up_exps, U ? NULL : &w->down_exps};
        for (int i = 0; i < 3 && m->hp.n_expert; i++)
            if (em[i] && wants_x16(kn, em[i]) && (em[i]->n_out / m->hp.n_expert) % 16 == 0)
                J.mats[J.n_mats++] = em[i];
    }
    if (!m->tied_output && wants_x16(kn, &m->output))
        J.mats[J.n_mats++] = &m->output;
    size_t data_bytes = 0;
    int64_t moved = 0;
    for (int i = 0; i < J.n_mats; i++) {
        struct ifl_mat *w = J.mats[i];
        size_t group = 16 * w->row_bytes, per = CHUNK_BYTES / group ? CHUNK_BYTES / group : 1;
        J.dst_off[i] = data_bytes;
        data_bytes += ((size_t)w->n_out * w->row_bytes + 63) / 64 * 64;
        moved += (int64_t)((size_t)w->n_out * w->row_bytes);
        J.n_chunks += (w->n_out / 16 + (int64_t)per - 1) / (int64_t)per;
    }
    /* the tensors left where they are count as ready from the start */
    J.base_done = total - moved;
    report(o, J.base_done, total, "repacking", NULL);
    if (!J.n_mats)
        goto ready;
    J.chunks = malloc(sizeof(*J.chunks) * (size_t)J.n_chunks);
    J.chunk_sum = malloc(sizeof(*J.chunk_sum) * (size_t)J.n_chunks);
    if (!J.chunks || !J.chunk_sum) {
        rc = ifl_err(err, IFL_ENOMEM, "model: out of memory");
        goto out;
    }
    int64_t k = 0;
    for (int i = 0; i < J.n_mats; i++) {
        struct ifl_mat *w = J.mats[i];
        size_t group = 16 * w->row_bytes;
        int64_t per = CHUNK_BYTES / group ? (int64_t)(CHUNK_BYTES / group) : 1;
        for (int64_t g = 0; g < w->n_out / 16; g += per)
            J.chunks[k++] = (struct chunk){i, g, g + per < w->n_out / 16 ? g + per : w->n_out / 16};
    }
    int n_threads = o ? o->n_threads : 0;

    /* with a cache directory: map a good cache, or build one */
    char path[PATH_MAX + 64] = "", tmp[PATH_MAX + 96] = "", notice[PATH_MAX + 400] = "";
    struct cache_id id = {0};
    const char *model_path = ifl_gguf_path(m->gguf);
    /* a shard's matrices are not the file's (copies, slices): no cache */
    int use_cache = o && o->repack_cache_dir && *o->repack_cache_dir && model_path && *model_path &&
                    !m->shard && !m->units;
    if (use_cache) {
        struct stat st;
        snprintf(id.kernels, sizeof id.kernels, "%s", kn->name);
        if (stat(model_path, &st) != 0 ||
            cache_path(path, sizeof path, o->repack_cache_dir, model_path, kn->name)) {
            snprintf(notice, sizeof notice,
                     "repack cache: cannot name a cache file for '%s' in '%s'; repacking in "
                     "memory only",
                     model_path, o->repack_cache_dir);
            report(o, J.base_done, total, "repacking", notice);
            use_cache = 0;
        } else {
            id.size = (uint64_t)st.st_size;
            id.mtime_ns =
                (uint64_t)st.st_mtim.tv_sec * 1000000000ull + (uint64_t)st.st_mtim.tv_nsec;
            id.dev = (uint64_t)st.st_dev;
            id.ino = (uint64_t)st.st_ino;
            if (try_cache(&J, path, &id, data_bytes, n_threads, notice, sizeof notice) == 0) {
                /* its time of last use, which the bound's trimming reads */
                utimensat(AT_FDCWD, path, NULL, 0);
                goto mapped;
            }
            report(o, J.base_done, total, "repacking", notice[0] ? notice : NULL);
        }
    }

    size_t hb = use_cache ? header_bytes(J.n_mats) : 0, bytes = hb + data_bytes;
    void *arena = NULL;
    if (use_cache) {
        sweep_stale_tmp(path);
        snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
        notice[0] = 0;
        arena = create_cache(tmp, bytes, notice, sizeof notice);
        if (!arena) {
            report(o, J.base_done, total, "repacking", notice);
            use_cache = 0;
            hb = 0;
            bytes = data_bytes;
        }
    }
    if (!arena) {
        arena = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (arena == MAP_FAILED)
            goto ready;                       /* the rows as they are still work, only slower */
        madvise(arena, bytes, MADV_HUGEPAGE); /* fewer TLB misses on the weight stream */
    }
    J.base = (char *)arena + hb;
    J.verify = 0;
    J.release = 1;
    J.stage = use_cache ? "repacking into the cache" : "repacking";
    run_job(&J, n_threads);
    if (use_cache) {
        write_header(arena, &id, &J, data_bytes);
        if (rename(tmp, path) != 0) {
            snprintf(notice, sizeof notice, "repack cache: cannot rename '%s' to '%s' (%s)", tmp,
                     path, strerror(errno));
            unlink(tmp);
            report(o, total, total, "repacking", notice);
        } else {
            trim_cache(path, cache_max(o), notice, sizeof notice);
            if (notice[0])
                report(o, total, total, "repacking", notice);
        }
    }
    mprotect(arena, bytes, PROT_READ);
    m->x16 = arena;
    m->x16_bytes = bytes;
mapped:
    for (int i = 0; i < J.n_mats; i++) {
        struct ifl_mat *w = J.mats[i];
        /* the pages a chunk boundary shared, or none for a mapped cache */
        ifl_gguf_release(m->gguf, w->data, (size_t)w->n_out * w->row_bytes);
        w->data = J.base + J.dst_off[i];
        w->x16 = 1;
    }
ready:
    report(o, total, total, "ready", NULL);
out:
    free(J.mats);
    free(J.dst_off);
    free(J.mat_sum);
    free(J.chunks);
    free(J.chunk_sum);
    return rc;
}
