/*
 * The executor's LoRA adapters: a registry of ids, names and global
 * scales over the applied adapters (model/lora_rt.h), with reference
 * counts, deferred freeing and a host cache with a byte limit.
 *
 * A request takes its adapters at enqueue (ifl_lora_reg_acquire): the
 * list it names, or every adapter at its global scale, resolved there and
 * then, sorted by id, zero scales dropped; each adapter's count goes up.
 * From then on nothing another thread does (a new global scale, an
 * unload) changes what the request computes: an unloaded adapter stays in
 * memory until its last request lets go (ifl_lora_reg_release), and the
 * host cache drops only adapters no request holds. The engine reads a
 * held adapter's applied form with no lock: it neither changes nor goes
 * while held.
 *
 * Thread-safe: one mutex (mu) guards the registry; it is a leaf lock
 * (nothing else is locked while it is held). Loading a dropped adapter
 * again happens under it, in the enqueuing thread.
 */
#ifndef IFL_RUNTIME_LORA_REG_H
#define IFL_RUNTIME_LORA_REG_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "inflight.h"
#include "model/lora_rt.h"
#include "model/model.h"

/* Where a dropped adapter comes back from (a file, for one loaded from a
 * path). load NULL: the adapter is never dropped. */
struct ifl_lora_source {
    int (*load)(void *user, const struct ifl_model *m, struct ifl_lora_rt **out, char *err);
    void (*free_user)(void *user);
    void *user;
};

struct xlora {
    int32_t id;
    char name[128];
    char path[1024];
    float scale;            /* global */
    struct ifl_lora_rt *rt; /* NULL while dropped from the cache */
    struct ifl_lora_source src;
    int32_t refs;       /* requests that hold it */
    int unloaded;       /* out of the registry; freed when refs reaches 0 */
    uint64_t last_used; /* tick of the last acquire */
    size_t bytes;       /* rt's, also while dropped */
    int32_t rank, n_adapted;
    struct xlora *next;
};

struct ifl_lora_reg {
    pthread_mutex_t mu;
    const struct ifl_model *model;
    struct xlora *head; /* registered, by id */
    int32_t next_id;
    int64_t limit;    /* host cache bytes; 0: none */
    int64_t resident; /* bytes of the adapters in memory, unloaded ones still held included */
    uint64_t tick;
    int64_t n_dropped, n_reloaded; /* since creation */
};

/* A request's adapters, resolved at enqueue. */
struct ifl_lora_set {
    int32_t n;
    struct xlora *a[IFL_LORA_MAX_PER_REQUEST]; /* by id */
    float scale[IFL_LORA_MAX_PER_REQUEST];
    uint64_t salt;            /* the prefix cache's key for this set; 0: none (the base) */
    struct ifl_lora_reg *reg; /* where the adapters are held; NULL: nothing held */
};

void ifl_lora_reg_init(struct ifl_lora_reg *g, const struct ifl_model *m, int64_t limit);
/* Frees every adapter (no request may hold one any more). */
void ifl_lora_reg_deinit(struct ifl_lora_reg *g);
/* Registers rt (ownership moves here, also on failure, as does src.user). */
int ifl_lora_reg_add(struct ifl_lora_reg *g, struct ifl_lora_rt *rt,
                     const struct ifl_lora_source *src, const char *path, const char *name,
                     float scale, int32_t *id, char *err);
int ifl_lora_reg_remove(struct ifl_lora_reg *g, int32_t id, char *err);
int ifl_lora_reg_set_scale(struct ifl_lora_reg *g, int32_t id, float scale, char *err);
int ifl_lora_reg_list(struct ifl_lora_reg *g, struct ifl_lora_info *out, int32_t cap,
                      int32_t *n_out);
int ifl_lora_reg_find(struct ifl_lora_reg *g, const char *name, int32_t *id);
/* Checks a request's list (errors name the field, e.g. "lora[1].id") and
 * resolves it into set, each adapter held; n 0: the global scales. */
int ifl_lora_reg_acquire(struct ifl_lora_reg *g, const struct ifl_lora_ref *list, int32_t n,
                         struct ifl_lora_set *set, char *err);
/* Lets go of a set's adapters (nothing for one never acquired, or zeroed). */
void ifl_lora_set_release(struct ifl_lora_set *set);
/* Adapters registered, and bytes in memory (for /metrics). */
void ifl_lora_reg_counts(struct ifl_lora_reg *g, int32_t *n_loaded, int32_t *n_resident,
                         int64_t *bytes);

#endif
