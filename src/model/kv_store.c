/*
 * The paged K/V store (kv_store.h): one anonymous map reserved at
 * creation, resident as blocks are written, given back page by page.
 */
#include "model/kv_store.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/err.h"

/* the smallest array of one layer's keys or values put on huge pages */
#define KV_HUGE_MIN_ARRAY ((size_t)32 << 20)

int ifl_kv_store_create(struct ifl_kv_store **out, const struct ifl_hparams *hp, enum ifl_type type,
                        int32_t n_blocks, int32_t block_size, char *err)
{
    *out = NULL;
    if (type != IFL_TYPE_F16 && type != IFL_TYPE_F32 && type != IFL_TYPE_Q8_0)
        return ifl_err(err, IFL_EUNSUPPORTED, "kv: cache type must be f16, f32 or q8_0");
    /* the fewest KV heads whose keys and values are each whole Q8_0
     * blocks, dividing n_head_kv (any one head, for F16 and F32) */
    int hg = 1;
    if (type == IFL_TYPE_Q8_0)
        while (hg <= hp->n_head_kv &&
               (hp->n_head_kv % hg || (hg * hp->head_dim) % 32 || (hg * hp->head_dim_v) % 32))
            hg++;
    if (hg > hp->n_head_kv)
        return ifl_err(err, IFL_EUNSUPPORTED,
                       "kv: a q8_0 cache needs key and value widths that are multiples of 32 "
                       "(this model has %d and %d)",
                       hp->n_head_kv * hp->head_dim, hp->n_head_kv * hp->head_dim_v);
    if (n_blocks < 1 || block_size < 1 || block_size > 4096)
        return ifl_err(err, IFL_EINVAL, "kv: %d blocks of %d positions is not a valid cache",
                       n_blocks, block_size);
    struct ifl_kv_store *kv = calloc(1, sizeof(*kv));
    if (!kv)
        return ifl_err(err, IFL_ENOMEM, "kv: out of memory");
    kv->type = type;
    kv->n_layer = hp->n_layer;
    kv->n_blocks = n_blocks;
    kv->block_size = block_size;
    kv->k_dim = hp->n_head_kv * hp->head_dim;
    kv->v_dim = hp->n_head_kv * hp->head_dim_v;
    kv->hg = hg;
    kv->n_piece = hp->n_head_kv / hg;
    kv->k_piece = ifl_type_row_size(type, (int64_t)hg * hp->head_dim);
    kv->v_piece = ifl_type_row_size(type, (int64_t)hg * hp->head_dim_v);
    kv->k_row = kv->k_piece * (size_t)kv->n_piece;
    kv->v_row = kv->v_piece * (size_t)kv->n_piece;
    kv->k = calloc((size_t)hp->n_layer, sizeof(void *));
    kv->v = calloc((size_t)hp->n_layer, sizeof(void *));
    if (!kv->k || !kv->v)
        goto oom;
    /* One anonymous map, reserved and never touched here: a page costs
     * memory only once a block on it is written, so the process's resident
     * set follows the blocks in use, and ifl_kv_store_release gives pages
     * of blocks that stay free back. A page never written reads as zeros.
     *
     * A large store asks for huge pages: a step reads and writes positions
     * all over the store (every sequence's blocks, every layer), far more
     * pages than the TLB holds, and in a VM each miss walks two page
     * tables. In a 16-sequence small-110m F16 decode on the Zen 5, storing
     * one row's keys and values of a layer (3 KiB) took 3500-12000 cycles
     * with 4 KiB pages and 1100-1200 on huge pages, and attention 5-10 %
     * fewer. Memory then grows 2 MiB of each layer's keys or values at a
     * time, so only arrays of at least KV_HUGE_MIN_ARRAY take them (a step
     * of at most 1/16 of one). It is given back in 4 KiB pages all the
     * same: a huge page partly free is split rather than kept whole, else
     * one cached prefix block amid free ones would pin 2 MiB of every
     * array (48 MiB for small-110m). */
    const size_t huge = (size_t)2 << 20;
    size_t pos = (size_t)n_blocks * (size_t)block_size, kb, vb, total;
    if (__builtin_mul_overflow(pos, kv->k_row + kv->v_row, &total) ||
        __builtin_mul_overflow(total + 128, (size_t)hp->n_layer, &total) || total > SIZE_MAX / 2)
        goto oom;
    /* each array padded by 65 lines, so that one's block b does not fall
     * on the same cache sets as the other's (or the next layer's): on
     * huge pages the sets follow the layout */
    kb = ((pos * kv->k_row + 63) / 64) * 64 + 65 * 64;
    vb = ((pos * kv->v_row + 63) / 64) * 64 + 65 * 64;
    total = (size_t)hp->n_layer * (kb + vb);
    kv->arena_bytes = total + huge; /* room to start on a huge-page boundary */
    kv->arena = mmap(NULL, kv->arena_bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (kv->arena == MAP_FAILED) {
        kv->arena = NULL;
        goto oom;
    }
    char *base = (char *)(((uintptr_t)kv->arena + huge - 1) & ~(uintptr_t)(huge - 1));
    long page = sysconf(_SC_PAGESIZE);
    kv->page = page > 0 ? (size_t)page : 4096;
    /* advisory: where the kernel gives none, 4 KiB pages still work */
    kv->huge = (kb < vb ? kb : vb) >= KV_HUGE_MIN_ARRAY && madvise(base, total, MADV_HUGEPAGE) == 0;
    kv->base = base;
    kv->bytes = total;
    kv->k_bytes = kb;
    kv->v_bytes = vb;
    for (int il = 0; il < hp->n_layer; il++) {
        kv->k[il] = base + (size_t)il * (kb + vb);
        kv->v[il] = base + (size_t)il * (kb + vb) + kb;
    }
    *out = kv;
    return 0;
oom:
    ifl_kv_store_free(kv);
    return ifl_err(err, IFL_ENOMEM, "kv: out of memory for %d blocks of %d positions", n_blocks,
                   block_size);
}

int ifl_kv_store_prefault(struct ifl_kv_store *kv, char *err)
{
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23 /* Linux 5.14 */
#endif
    if (madvise(kv->base, kv->bytes, MADV_POPULATE_WRITE) != 0) {
        if (errno != EINVAL)
            return ifl_err(err, IFL_ENOMEM, "kv: cannot make the %.2f GiB pool resident (%s)",
                           (double)kv->bytes / (1 << 30), strerror(errno));
        memset(kv->base, 0, kv->bytes); /* a kernel before 5.14; the store holds no data yet */
    } else {
        /* Populating gives the pages to the process, but a guest whose
         * host backs its memory only when written (the Firecracker guest
         * of bench/README.md) still paid about 6 us a page at each page's
         * first write afterwards, in the middle of a step. One zero
         * written to each page (the store holds none but zeros yet) makes
         * the host back it here: 1.5 s a GiB there. */
        volatile char *p = kv->base;
        for (size_t at = 0; at < kv->bytes; at += kv->page)
            p[at] = 0;
    }
    kv->prefaulted = 1;
    return 0;
}

void ifl_kv_store_free(struct ifl_kv_store *kv)
{
    if (!kv)
        return;
    if (kv->arena)
        munmap(kv->arena, kv->arena_bytes);
    free(kv->k);
    free(kv->v);
    free(kv);
}

void ifl_kv_store_copy_block(struct ifl_kv_store *kv, int32_t dst, int32_t src, int32_t n)
{
    IFL_ASSERT(dst >= 0 && dst < kv->n_blocks && src >= 0 && src < kv->n_blocks);
    IFL_ASSERT(n >= 0 && n <= kv->block_size);
    if (kv->mirror)
        kv->mirror(kv->mirror_user, IFL_KV_OP_COPY_BLOCK, dst, src, n, 0);
    for (int il = 0; il < kv->n_layer; il++)
        for (int pc = 0; pc < kv->n_piece; pc++) {
            memcpy(ifl_kv_at(kv, kv->k[il], kv->k_piece, dst, 0, pc),
                   ifl_kv_at(kv, kv->k[il], kv->k_piece, src, 0, pc), (size_t)n * kv->k_piece);
            memcpy(ifl_kv_at(kv, kv->v[il], kv->v_piece, dst, 0, pc),
                   ifl_kv_at(kv, kv->v[il], kv->v_piece, src, 0, pc), (size_t)n * kv->v_piece);
        }
}

void ifl_kv_store_copy_pos(struct ifl_kv_store *kv, int32_t dst, int32_t dst_slot, int32_t src,
                           int32_t src_slot)
{
    IFL_ASSERT(dst >= 0 && dst < kv->n_blocks && src >= 0 && src < kv->n_blocks);
    IFL_ASSERT(dst_slot >= 0 && dst_slot < kv->block_size && src_slot >= 0 &&
               src_slot < kv->block_size);
    if (kv->mirror)
        kv->mirror(kv->mirror_user, IFL_KV_OP_COPY_POS, dst, dst_slot, src, src_slot);
    for (int il = 0; il < kv->n_layer; il++)
        for (int pc = 0; pc < kv->n_piece; pc++) {
            memmove(ifl_kv_at(kv, kv->k[il], kv->k_piece, dst, dst_slot, pc),
                    ifl_kv_at(kv, kv->k[il], kv->k_piece, src, src_slot, pc), kv->k_piece);
            memmove(ifl_kv_at(kv, kv->v[il], kv->v_piece, dst, dst_slot, pc),
                    ifl_kv_at(kv, kv->v[il], kv->v_piece, src, src_slot, pc), kv->v_piece);
        }
}

/* Gives back the pages of [lo, hi) of one array, rounded inwards so that
 * no page a neighbouring block uses is dropped. */
static size_t release_range(const struct ifl_kv_store *kv, char *lo, char *hi)
{
    uintptr_t a = ((uintptr_t)lo + kv->page - 1) & ~(uintptr_t)(kv->page - 1);
    uintptr_t b = (uintptr_t)hi & ~(uintptr_t)(kv->page - 1);
    if (b <= a)
        return 0;
    return madvise((void *)a, b - a, MADV_DONTNEED) == 0 ? b - a : 0;
}

size_t ifl_kv_store_release(struct ifl_kv_store *kv, int32_t first, int32_t n)
{
    IFL_ASSERT(first >= 0 && n >= 0 && first + n <= kv->n_blocks);
    if (kv->mirror)
        kv->mirror(kv->mirror_user, IFL_KV_OP_RELEASE, first, n, 0, 0);
    size_t kbs = (size_t)kv->block_size * kv->k_row;
    size_t vbs = (size_t)kv->block_size * kv->v_row;
    size_t done = 0;
    for (int il = 0; il < kv->n_layer; il++) {
        char *k = kv->k[il], *v = kv->v[il];
        done += release_range(kv, k + (size_t)first * kbs, k + (size_t)(first + n) * kbs);
        done += release_range(kv, v + (size_t)first * vbs, v + (size_t)(first + n) * vbs);
    }
    return done;
}

/* Resident bytes of the pages of [lo, lo + len) at or above *done (the
 * arrays share a page where one ends and the next begins: it is counted
 * once); moves *done past them. */
static int64_t resident_range(const struct ifl_kv_store *kv, const char *lo, size_t len,
                              uintptr_t *done)
{
    unsigned char vec[4096];
    uintptr_t a = (uintptr_t)lo & ~(uintptr_t)(kv->page - 1);
    uintptr_t end = (uintptr_t)lo + len;
    int64_t n = 0;
    if (a < *done)
        a = *done;
    while (a < end) {
        size_t pages = (end - a + kv->page - 1) / kv->page;
        if (pages > sizeof(vec))
            pages = sizeof(vec);
        if (mincore((void *)a, pages * kv->page, vec))
            return -1;
        for (size_t i = 0; i < pages; i++)
            n += vec[i] & 1;
        a += pages * kv->page;
    }
    if (a > *done)
        *done = a;
    return n * (int64_t)kv->page;
}

/* The bytes of one array up to the end of the huge page holding byte
 * `used` (or to the array's end). */
static size_t array_span(const char *arr, size_t arr_bytes, size_t used)
{
    const uintptr_t huge = (uintptr_t)2 << 20;
    uintptr_t end = ((uintptr_t)arr + used + huge - 1) & ~(huge - 1);
    size_t span = end - (uintptr_t)arr;
    return span < arr_bytes ? span : arr_bytes;
}

int64_t ifl_kv_store_resident(const struct ifl_kv_store *kv, int32_t n_blocks)
{
    if (kv->prefaulted)
        n_blocks = kv->n_blocks;
    if (n_blocks <= 0)
        return 0;
    if (n_blocks > kv->n_blocks)
        n_blocks = kv->n_blocks;
    size_t ku = (size_t)n_blocks * (size_t)kv->block_size * kv->k_row;
    size_t vu = (size_t)n_blocks * (size_t)kv->block_size * kv->v_row;
    int64_t n = 0;
    uintptr_t done = 0; /* the arrays lie in address order: k0 v0 k1 v1 ... */
    for (int il = 0; il < kv->n_layer; il++) {
        const char *k = kv->k[il], *v = kv->v[il];
        int64_t rk = resident_range(kv, k, array_span(k, kv->k_bytes, ku), &done);
        int64_t rv = resident_range(kv, v, array_span(v, kv->v_bytes, vu), &done);
        if (rk < 0 || rv < 0)
            return -1;
        n += rk + rv;
    }
    return n;
}
