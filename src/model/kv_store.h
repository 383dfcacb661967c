/*
 * The paged K/V store the forward pass reads and writes (see forward.h for
 * how a step addresses it through block tables). Single-owner (the engine
 * thread), except ifl_kv_store_resident (see there).
 */
#ifndef IFL_MODEL_KV_STORE_H
#define IFL_MODEL_KV_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

/* K/V storage: per layer, n_blocks blocks of block_size positions, each
 * block holding its positions head by head: per layer, keys
 * [n_blocks][n_piece][block_size][k_piece bytes], values likewise, where a
 * piece is hg KV heads' values of one position in `type`. hg is 1 (a
 * head's positions of a block are one contiguous run: 16 positions of an
 * F16 head of 64 are 2 KiB) unless the cache is Q8_0 and a head is not
 * whole blocks of 32: then the fewest heads that are (phi-2's 80: two),
 * n_head_kv at most. A block is as long as before (block_size * k_row
 * bytes), so copies and releases of whole blocks stay single ranges.
 * The memory is reserved, not touched: it becomes resident as blocks are
 * written. */
struct ifl_kv_store {
    enum ifl_type type; /* IFL_TYPE_F16 (default), IFL_TYPE_F32 or IFL_TYPE_Q8_0 */
    int32_t n_layer;
    int32_t n_blocks;
    int32_t block_size;
    int32_t k_dim;   /* n_head_kv * head_dim */
    int32_t v_dim;   /* n_head_kv * head_dim_v */
    int32_t hg;      /* KV heads a piece (1 but for a Q8_0 cache of heads not whole blocks) */
    int32_t n_piece; /* n_head_kv / hg */
    size_t k_row;    /* bytes of one position's keys (k_dim values in `type`) */
    size_t v_row;    /* bytes of one position's values */
    size_t k_piece;  /* bytes of one piece of one position's keys (hg * head_dim values) */
    size_t v_piece;  /* likewise for values: the step between a piece's positions */
    void **k;        /* [n_layer] -> [n_blocks][n_piece][block_size][k_piece] */
    void **v;        /* [n_layer] -> [n_blocks][n_piece][block_size][v_piece] */
    void *arena;     /* one anonymous map holding every k[il] and v[il] */
    size_t arena_bytes;
    char *base; /* the arrays' part of it, base[0 .. bytes) */
    size_t bytes;
    size_t page;    /* the system's page: memory is given back in these */
    size_t k_bytes; /* each k[il] array's length, padding included */
    size_t v_bytes;
    int huge;       /* the arrays asked for transparent huge pages */
    int prefaulted; /* ifl_kv_store_prefault made all of it resident */
    /* optional: told of every copy and release (IFL_KV_OP_*, then the
     * call's arguments), so that a tensor parallel job's other ranks
     * repeat them on their stores (dist/tp.c); NULL: none */
    void (*mirror)(void *user, int op, int32_t a, int32_t b, int32_t c, int32_t d);
    void *mirror_user;
};

/* Where piece `pc` (KV heads pc * hg ..) of position `slot` of block `blk`
 * starts in one layer's keys (arr kv->k[il], piece kv->k_piece) or values
 * (kv->v[il], kv->v_piece). The piece's next position is `piece` bytes on,
 * within the block; the next piece of the same position block_size *
 * piece bytes on. */
static inline char *ifl_kv_at(const struct ifl_kv_store *kv, void *arr, size_t piece, int32_t blk,
                              int32_t slot, int pc)
{
    size_t at = ((size_t)blk * (size_t)kv->n_piece + (size_t)pc) * (size_t)kv->block_size;
    return (char *)arr + (at + (size_t)slot) * piece;
}

enum { IFL_KV_OP_COPY_BLOCK = 1, IFL_KV_OP_COPY_POS = 2, IFL_KV_OP_RELEASE = 3 };

int ifl_kv_store_create(struct ifl_kv_store **out, const struct ifl_hparams *hp, enum ifl_type type,
                        int32_t n_blocks, int32_t block_size, char *err);
void ifl_kv_store_free(struct ifl_kv_store *kv);
/* Makes every page of the store resident now (MADV_POPULATE_WRITE and a
 * zero written to each page, or zeros written over all of it where the
 * kernel lacks that call), before any block is used.
 * IFL_ENOMEM when the memory is not there. */
int ifl_kv_store_prefault(struct ifl_kv_store *kv, char *err);
/* Copies positions [0, n) of one block into another (copy-on-write forks). */
void ifl_kv_store_copy_block(struct ifl_kv_store *kv, int32_t dst, int32_t src, int32_t n);
/* Copies one position's keys and values, in every layer, from slot
 * src_slot of block src to slot dst_slot of block dst (a tree draft's kept
 * node moved to its place in the sequence). */
void ifl_kv_store_copy_pos(struct ifl_kv_store *kv, int32_t dst, int32_t dst_slot, int32_t src,
                           int32_t src_slot);
/* Gives the memory of blocks [first, first + n) back to the system
 * (madvise MADV_DONTNEED on the whole pages that lie inside them in each
 * layer's keys and values; a huge page only partly inside is split); they
 * then read as zeros until written. Only for blocks no sequence holds and no cached prefix
 * needs. Returns the bytes given back (as asked: pages never touched
 * count too). A system call per array: not for the hot path. */
size_t ifl_kv_store_release(struct ifl_kv_store *kv, int32_t first, int32_t n);
/* Bytes of the store in memory now, -1 if unknown: mincore over blocks
 * [0, n_blocks) of every array, each range widened to the huge page that
 * holds its end (no page beyond a block never taken since its last
 * release is resident, so n_blocks is the allocator's touched end and the
 * cost follows the memory held: 48 system calls and a few microseconds for
 * small-110m's 300 MiB, where the whole 4.7 GiB map took 2-4 ms; a
 * prefaulted store is measured whole). Reads
 * only what creation fixed, so any thread may call it while the engine
 * runs. */
int64_t ifl_kv_store_resident(const struct ifl_kv_store *kv, int32_t n_blocks);

#endif
