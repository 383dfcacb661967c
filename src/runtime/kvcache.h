/*
 * KV block manager: which KV blocks each sequence owns, reference counts,
 * copy-on-write, and automatic prefix caching. It hands out block ids; the
 * K/V data itself lives in the model's struct ifl_kv_store, which this
 * module reaches only through the copy callback (for copy-on-write).
 *
 * Prefix caching: a block that a sequence has filled completely gets a key,
 * hash(parent block's key, its block_size tokens), and is registered in a
 * table. A new sequence walks its prompt block by block, looks each key up,
 * and shares the blocks it finds (reference count + 1) instead of computing
 * them again. Keys are verified against stored tokens and parent keys, so a
 * hash collision never shares wrong data. When a registered block's last
 * reference goes, it stays cached (evictable) on a least-recently-used list;
 * allocation takes free blocks first, then evicts the least recently used
 * cached block.
 *
 * Copy-on-write: forked sequences (num_return_sequences, beams) share every
 * block. Before a sequence writes into a block whose count is above one,
 * reserve() gives it a private copy (the copy callback copies the positions
 * already written).
 *
 * Allocation takes the lowest-numbered free block, so used memory stays
 * compact; blocks free for a while are given back (ifl_kvc_release_idle).
 *
 * Single-owner: the engine thread. Nothing here allocates after create,
 * except ifl_kvc_seq_init (a sequence's block array, sized once to the
 * sequence's max_blocks; it never grows).
 */
#ifndef IFL_RUNTIME_KVCACHE_H
#define IFL_RUNTIME_KVCACHE_H

#include <stdint.h>

typedef void (*ifl_kvc_copy_fn)(void *user, int32_t dst_block, int32_t src_block, int32_t n_pos);
/* Gives the memory of blocks [first, first + n) back (they hold nothing). */
typedef void (*ifl_kvc_release_fn)(void *user, int32_t first, int32_t n);

struct ifl_kvc_config {
    int32_t n_blocks;
    int32_t block_size;
    int enable_prefix_caching;
    ifl_kvc_copy_fn copy; /* required */
    void *copy_user;
    ifl_kvc_release_fn release; /* optional: NULL never gives memory back */
    void *release_user;
};

struct ifl_kvc;

/* One sequence's view: its blocks in position order and how many positions
 * hold K/V. Owned by the engine; initialised and released through the API. */
struct ifl_kvc_seq {
    int32_t *blocks; /* [cap] block ids */
    int32_t n_blocks;
    int32_t cap;
    int32_t n_pos;     /* positions whose K/V are written (committed) */
    int32_t n_hashed;  /* leading blocks that carry a key */
    uint64_t last_key; /* key of block n_hashed - 1 (0 when none) */
    /* The prefix-table entry that stands for blocks [0, n_hashed): this
     * sequence's block n_hashed - 1 or an identical registered twin, as
     * (block id, generation); the next full block registers as its child.
     * Once that entry has left the table (the generation no longer
     * matches, or chain_block is -1), no further block of this sequence is
     * registered. Ignored while n_hashed == 0. */
    int32_t chain_block;
    uint32_t chain_gen;
    /* The parent key of the sequence's first block (0 by default): what
     * else than its tokens decides its K and V, e.g. its LoRA adapters and
     * their scales. Blocks are shared only between sequences with the same
     * salt, as a lookup matches parent keys. Kept by reset and copied by
     * fork. */
    uint64_t salt;
    /* Optional per-position keys besides the tokens (NULL: none), for
     * positions [0, n_ext); positions past n_ext count as 0. A nonzero
     * ext[p] says that position p's input is not its token's embedding
     * but something else of that identity (an image's row: a hash of the
     * image and the row's index). A full block's key and its match cover
     * these too, so blocks are shared only between sequences whose
     * positions agree in tokens and ext. Not owned; must outlive every
     * match and commit of the sequence. Kept by reset, copied by fork. */
    const uint64_t *ext;
    int32_t n_ext;
    /* Leading blocks given back early (ifl_kvc_drop_before): their
     * entries in blocks are -1; the sequence reads none of them again. */
    int32_t n_dropped;
};

struct ifl_kvc_stats {
    int32_t n_blocks; /* in the pool */
    int32_t n_free;   /* never used or released without a key */
    int32_t n_cached; /* unreferenced but kept for prefix reuse (evictable) */
    int32_t n_used;   /* referenced by some sequence */
    int64_t reused;   /* blocks found by prefix matching, since creation */
    int64_t missed;   /* full prompt blocks looked up and not found */
    int64_t evicted;
    int32_t n_touched; /* blocks taken since creation or their last release
                          (their memory is resident, or may be) */
    int32_t peak_used; /* most blocks used at once since creation */
    int64_t released;  /* touched blocks given back since creation */
};

int ifl_kvc_create(struct ifl_kvc **out, const struct ifl_kvc_config *cfg);
void ifl_kvc_free(struct ifl_kvc *c);
int32_t ifl_kvc_block_size(const struct ifl_kvc *c);

/* The time the pool sees, in any unit the caller keeps (the engine: us):
 * a block that becomes free is stamped with it. */
void ifl_kvc_set_clock(struct ifl_kvc *c, int64_t now);
/* Gives back, through the release callback, every maximal run of free
 * blocks that have all been free for at least min_idle (by the clock) and
 * of which some were touched; they count as untouched afterwards. Cached
 * blocks are never given back. O(n_blocks) and a system call per run in
 * the store: call it when idle, not from a step. Returns the touched
 * blocks given back. */
int32_t ifl_kvc_release_idle(struct ifl_kvc *c, int64_t min_idle);
/* The clock time at which ifl_kvc_release_idle(c, min_idle) would first
 * find something to give back; INT64_MAX when nothing is waiting. */
int64_t ifl_kvc_next_release(const struct ifl_kvc *c, int64_t min_idle);

/* One past the highest block taken since creation or its last release:
 * no block at or above it holds memory. Any thread may call it (the
 * allocator raises it before the block is written). */
int32_t ifl_kvc_touched_end(const struct ifl_kvc *c);

/* Blocks a sequence could get right now: free plus evictable. */
int32_t ifl_kvc_available(const struct ifl_kvc *c);
void ifl_kvc_get_stats(const struct ifl_kvc *c, struct ifl_kvc_stats *out);

/* max_blocks: the most blocks the sequence can ever hold (its block array
 * is allocated here, once). Returns IFL_ENOMEM on failure. */
int ifl_kvc_seq_init(struct ifl_kvc_seq *s, int32_t max_blocks);
/* Drops every block reference (keyed blocks become cached, others free) and
 * the block array. The struct may be initialised again afterwards. */
void ifl_kvc_seq_release(struct ifl_kvc *c, struct ifl_kvc_seq *s);
/* Drops every block reference but keeps the array, leaving an empty
 * sequence (preemption, restart). */
void ifl_kvc_seq_reset(struct ifl_kvc *c, struct ifl_kvc_seq *s);

/* Sets an empty sequence's salt (above), before ifl_kvc_match_prefix. */
void ifl_kvc_seq_set_salt(struct ifl_kvc_seq *s, uint64_t salt);
/* Sets an empty sequence's per-position keys (ext, n_ext above; NULL, 0
 * for none), before ifl_kvc_match_prefix. */
void ifl_kvc_seq_set_ext(struct ifl_kvc_seq *s, const uint64_t *ext, int32_t n_ext);

/* For an empty sequence: shares the cached blocks that hold tokens[0..n),
 * whole blocks only, and sets n_pos to the positions covered. Callers pass
 * n = prompt length - 1 so the last prompt token is always computed (its
 * logits are needed). Returns the positions reused. Stats: every block
 * shared counts in reused, every other full block of the n tokens (from
 * the first miss on) in missed, so each call adds n / block_size to the
 * two together. Returns 0 and counts nothing when caching is disabled. */
int32_t ifl_kvc_match_prefix(struct ifl_kvc *c, struct ifl_kvc_seq *s, const int32_t *tokens,
                             int32_t n);

/* Makes positions [s->n_pos, n_pos_total) writable: allocates blocks
 * (evicting cached ones if needed) and copies-on-write a shared block that
 * will be written. All or nothing: IFL_EFULL (nothing changed) when there
 * are not enough blocks; IFL_EINVAL (nothing changed) when n_pos_total
 * needs more blocks than the sequence's max_blocks. Call it after any fork
 * and right before writing: a fork shares the block being written. */
int ifl_kvc_reserve(struct ifl_kvc *c, struct ifl_kvc_seq *s, int32_t n_pos_total);

/* Blocks reserve() would need to take from the pool to reach n_pos_total. */
int32_t ifl_kvc_blocks_needed(const struct ifl_kvc *c, const struct ifl_kvc_seq *s,
                              int32_t n_pos_total);

/* Records that positions [s->n_pos, n_pos_total) now hold K/V for
 * tokens[s->n_pos .. n_pos_total) (tokens holds the whole sequence from
 * position 0); newly completed blocks get keys and enter the prefix table
 * (if an identical block is already registered, this one stays private). */
void ifl_kvc_commit(struct ifl_kvc *c, struct ifl_kvc_seq *s, const int32_t *tokens,
                    int32_t n_pos_total);

/* child (initialised, empty) shares all of parent's blocks that hold written
 * positions (not blocks reserved past parent->n_pos), and its n_pos, n_hashed,
 * last_key and chain. IFL_EINVAL (nothing changed) if child's max_blocks is
 * too small. */
int ifl_kvc_fork(struct ifl_kvc *c, const struct ifl_kvc_seq *parent, struct ifl_kvc_seq *child);

/* Gives back the sequence's blocks that lie wholly before position pos
 * (at most its written ones), which it promises never to read again (every
 * layer slides its window past them): each reference is dropped as a
 * release drops it (a keyed block stays in the prefix cache, its K/V still
 * right for that prefix; a block another sequence shares stays theirs) and
 * its entry becomes -1. Later calls give back only what is new. Returns
 * the blocks dropped. */
int32_t ifl_kvc_drop_before(struct ifl_kvc *c, struct ifl_kvc_seq *s, int32_t pos);

/* Forgets positions >= n_pos (speculative decoding rollback): blocks wholly
 * past the end (reserved ones included) are released; a block cut in the
 * middle loses its key (and leaves the prefix table if no other sequence
 * holds it; if shared, the next reserve copies it). n_pos above s->n_pos
 * only releases reserved blocks. */
void ifl_kvc_truncate(struct ifl_kvc *c, struct ifl_kvc_seq *s, int32_t n_pos);

#endif
