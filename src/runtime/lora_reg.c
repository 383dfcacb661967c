/*
 * The executor's LoRA adapter registry (lora_reg.h): ids, names, global
 * scales, reference counts and the host cache.
 *
 * Invariants (under mu): an entry is on the list iff it is not unloaded;
 * an unloaded entry exists only while refs > 0; rt is NULL only for an
 * entry with refs == 0 and a source to load it from; resident is the sum
 * of bytes over entries whose rt is set.
 */
#include "runtime/lora_reg.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"

void ifl_lora_reg_init(struct ifl_lora_reg *g, const struct ifl_model *m, int64_t limit)
{
    memset(g, 0, sizeof(*g));
    pthread_mutex_init(&g->mu, NULL);
    g->model = m;
    g->next_id = 1;
    g->limit = limit > 0 ? limit : 0;
}

static void entry_free(struct ifl_lora_reg *g, struct xlora *e)
{
    if (e->rt)
        g->resident -= (int64_t)e->bytes;
    ifl_lora_rt_free(e->rt);
    if (e->src.free_user)
        e->src.free_user(e->src.user);
    free(e);
}

void ifl_lora_reg_deinit(struct ifl_lora_reg *g)
{
    struct xlora *e = g->head;
    while (e) {
        struct xlora *n = e->next;
        entry_free(g, e);
        e = n;
    }
    g->head = NULL;
    pthread_mutex_destroy(&g->mu);
}

static struct xlora *find_id(struct ifl_lora_reg *g, int32_t id)
{
    for (struct xlora *e = g->head; e; e = e->next)
        if (e->id == id)
            return e;
    return NULL;
}

/* Drops idle adapters that can come back, least recently used first,
 * until the cache is within its limit (or nothing more can go). */
static void shrink(struct ifl_lora_reg *g)
{
    while (g->limit && g->resident > g->limit) {
        struct xlora *v = NULL;
        for (struct xlora *e = g->head; e; e = e->next)
            if (e->rt && !e->refs && e->src.load && (!v || e->last_used < v->last_used))
                v = e;
        if (!v)
            return;
        ifl_lora_rt_free(v->rt);
        v->rt = NULL;
        g->resident -= (int64_t)v->bytes;
        g->n_dropped++;
    }
}

int ifl_lora_reg_add(struct ifl_lora_reg *g, struct ifl_lora_rt *rt,
                     const struct ifl_lora_source *src, const char *path, const char *name,
                     float scale, int32_t *id, char *err)
{
    struct xlora *e = calloc(1, sizeof(*e));
    if (!e) {
        ifl_lora_rt_free(rt);
        if (src && src->free_user)
            src->free_user(src->user);
        return ifl_err(err, IFL_ENOMEM, "lora: out of memory");
    }
    e->rt = rt;
    e->bytes = rt->bytes;
    e->rank = rt->max_rank;
    e->n_adapted = rt->n_adapted;
    e->scale = scale;
    if (src)
        e->src = *src;
    snprintf(e->path, sizeof e->path, "%s", path ? path : "");
    int rc = 0;
    if (!isfinite(scale))
        rc = ifl_err(err, IFL_EINVAL, "scale: not a finite number");
    else if (rt->base != g->model)
        rc = ifl_err(err, IFL_EINVAL, "lora: the adapter was made for another model");
    else if (name && strlen(name) >= sizeof e->name)
        rc = ifl_err(err, IFL_EINVAL, "name: longer than %zu bytes", sizeof e->name - 1);
    pthread_mutex_lock(&g->mu);
    if (!rc && name && name[0]) {
        snprintf(e->name, sizeof e->name, "%s", name);
    } else if (!rc) {
        /* the file's name without its directory and .gguf; else lora-<id> */
        const char *b = path ? strrchr(path, '/') : NULL;
        b = b ? b + 1 : path;
        size_t n = b ? strlen(b) : 0;
        if (n > 5 && !strcmp(b + n - 5, ".gguf"))
            n -= 5;
        if (n && n < sizeof e->name)
            snprintf(e->name, sizeof e->name, "%.*s", (int)n, b);
        else
            snprintf(e->name, sizeof e->name, "lora-%d", g->next_id);
    }
    for (struct xlora *o = g->head; o && !rc; o = o->next)
        if (!strcmp(o->name, e->name))
            rc = ifl_err(err, IFL_EINVAL, "name: '%s' is already adapter %d", e->name, o->id);
    if (rc) {
        pthread_mutex_unlock(&g->mu);
        g->resident += (int64_t)e->bytes; /* entry_free takes it off again */
        entry_free(g, e);
        return rc;
    }
    e->id = g->next_id++;
    e->last_used = ++g->tick;
    struct xlora **pp = &g->head;
    while (*pp)
        pp = &(*pp)->next;
    *pp = e;
    g->resident += (int64_t)e->bytes;
    shrink(g);
    *id = e->id;
    pthread_mutex_unlock(&g->mu);
    return 0;
}

int ifl_lora_reg_remove(struct ifl_lora_reg *g, int32_t id, char *err)
{
    pthread_mutex_lock(&g->mu);
    struct xlora **pp = &g->head;
    while (*pp && (*pp)->id != id)
        pp = &(*pp)->next;
    struct xlora *e = *pp;
    if (!e) {
        pthread_mutex_unlock(&g->mu);
        return ifl_err(err, IFL_ENOTFOUND, "id: no adapter %d is loaded", id);
    }
    *pp = e->next;
    e->next = NULL;
    e->unloaded = 1;
    if (!e->refs)
        entry_free(g, e);
    pthread_mutex_unlock(&g->mu);
    return 0;
}

int ifl_lora_reg_set_scale(struct ifl_lora_reg *g, int32_t id, float scale, char *err)
{
    if (!isfinite(scale))
        return ifl_err(err, IFL_EINVAL, "scale: not a finite number");
    pthread_mutex_lock(&g->mu);
    struct xlora *e = find_id(g, id);
    if (e)
        e->scale = scale;
    pthread_mutex_unlock(&g->mu);
    return e ? 0 : ifl_err(err, IFL_ENOTFOUND, "id: no adapter %d is loaded", id);
}

int ifl_lora_reg_list(struct ifl_lora_reg *g, struct ifl_lora_info *out, int32_t cap,
                      int32_t *n_out)
{
    int32_t n = 0;
    pthread_mutex_lock(&g->mu);
    for (struct xlora *e = g->head; e; e = e->next, n++) {
        if (n >= cap || !out)
            continue;
        struct ifl_lora_info *i = &out[n];
        memset(i, 0, sizeof(*i));
        i->id = e->id;
        snprintf(i->name, sizeof i->name, "%s", e->name);
        snprintf(i->path, sizeof i->path, "%s", e->path);
        i->scale = e->scale;
        i->rank = e->rank;
        i->n_adapted = e->n_adapted;
        i->bytes = (int64_t)e->bytes;
        i->in_use = e->refs;
        i->loaded = e->rt != NULL;
    }
    pthread_mutex_unlock(&g->mu);
    *n_out = n;
    return n > cap ? IFL_EFULL : 0;
}

int ifl_lora_reg_find(struct ifl_lora_reg *g, const char *name, int32_t *id)
{
    int rc = IFL_ENOTFOUND;
    pthread_mutex_lock(&g->mu);
    for (struct xlora *e = g->head; e && rc; e = e->next)
        if (name && !strcmp(e->name, name)) {
            *id = e->id;
            rc = 0;
        }
    pthread_mutex_unlock(&g->mu);
    return rc;
}

void ifl_lora_reg_counts(struct ifl_lora_reg *g, int32_t *n_loaded, int32_t *n_resident,
                         int64_t *bytes)
{
    int32_t n = 0, r = 0;
    pthread_mutex_lock(&g->mu);
    for (struct xlora *e = g->head; e; e = e->next) {
        n++;
        r += e->rt != NULL;
    }
    *bytes = g->resident;
    pthread_mutex_unlock(&g->mu);
    *n_loaded = n;
    *n_resident = r;
}

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* The prefix cache's key of a set: 0 for none (the base model's KV, as
 * before adapters existed); one adapter's is its id and its scale's bits
 * side by side, so no two single-adapter sets share it; a larger set's is
 * a hash of its (id, scale) pairs with the top bit set. */
static uint64_t set_salt(const struct ifl_lora_set *s)
{
    if (s->n == 0)
        return 0;
    uint32_t bits;
    memcpy(&bits, &s->scale[0], 4);
    if (s->n == 1)
        return (uint64_t)(uint32_t)s->a[0]->id << 32 | bits;
    uint64_t h = 0x4c6f5241ull;
    for (int32_t i = 0; i < s->n; i++) {
        memcpy(&bits, &s->scale[i], 4);
        h = mix(h ^ ((uint64_t)(uint32_t)s->a[i]->id << 32 | bits));
    }
    return h | 1ull << 63;
}

int ifl_lora_reg_acquire(struct ifl_lora_reg *g, const struct ifl_lora_ref *list, int32_t n,
                         struct ifl_lora_set *set, char *err)
{
    memset(set, 0, sizeof(*set));
    if (n < 0 || n > IFL_LORA_MAX_PER_REQUEST || (n && !list))
        return ifl_err(err, IFL_EINVAL, "lora: %d adapters (0..%d, with the list)", n,
                       IFL_LORA_MAX_PER_REQUEST);
    for (int32_t i = 0; i < n; i++) {
        if (!isfinite(list[i].scale))
            return ifl_err(err, IFL_EINVAL, "lora[%d].scale: not a finite number", i);
        for (int32_t k = 0; k < i && list[i].id; k++)
            if (list[k].id == list[i].id)
                return ifl_err(err, IFL_EINVAL, "lora[%d].id: adapter %d is listed twice", i,
                               list[i].id);
    }
    int rc = 0;
    pthread_mutex_lock(&g->mu);
    if (n) {
        for (int32_t i = 0; i < n && !rc; i++) {
            struct xlora *e = find_id(g, list[i].id);
            if (list[i].id == 0) /* no adapter: only makes the list explicit */
                continue;
            if (!e)
                rc =
                    ifl_err(err, IFL_EINVAL, "lora[%d].id: no adapter %d is loaded", i, list[i].id);
            else if (list[i].scale != 0.0f) {
                set->a[set->n] = e;
                set->scale[set->n++] = list[i].scale;
            }
        }
    } else {
        for (struct xlora *e = g->head; e && !rc; e = e->next)
            if (e->scale != 0.0f) {
                if (set->n == IFL_LORA_MAX_PER_REQUEST)
                    rc = ifl_err(err, IFL_EINVAL,
                                 "lora: more than %d adapters have a global scale; name the ones "
                                 "to apply",
                                 IFL_LORA_MAX_PER_REQUEST);
                else {
                    set->a[set->n] = e;
                    set->scale[set->n++] = e->scale;
                }
            }
    }
    /* by id: the forward pass adds a row's adapters in the step's order,
     * which the engine makes the order of ids */
    for (int32_t i = 1; i < set->n; i++)
        for (int32_t k = i; k > 0 && set->a[k - 1]->id > set->a[k]->id; k--) {
            struct xlora *t = set->a[k];
            float ts = set->scale[k];
            set->a[k] = set->a[k - 1];
            set->scale[k] = set->scale[k - 1];
            set->a[k - 1] = t;
            set->scale[k - 1] = ts;
        }
    /* bring back adapters dropped from the cache */
    for (int32_t i = 0; i < set->n && !rc; i++) {
        struct xlora *e = set->a[i];
        if (e->rt)
            continue;
        char e2[IFL_ERR_LEN] = "";
        if ((rc = e->src.load(e->src.user, g->model, &e->rt, e2)))
            ifl_err(err, rc, "lora: adapter %d ('%s') could not be read again: %s", e->id, e->name,
                    e2);
        else {
            e->bytes = e->rt->bytes;
            g->resident += (int64_t)e->bytes;
            g->n_reloaded++;
        }
    }
    if (rc) {
        set->n = 0;
    } else {
        for (int32_t i = 0; i < set->n; i++) {
            set->a[i]->refs++;
            set->a[i]->last_used = ++g->tick;
        }
        set->salt = set_salt(set);
        set->reg = g;
    }
    shrink(g);
    pthread_mutex_unlock(&g->mu);
    return rc;
}

void ifl_lora_set_release(struct ifl_lora_set *set)
{
    struct ifl_lora_reg *g = set->reg;
    set->reg = NULL;
    if (!g || !set->n)
        return;
    pthread_mutex_lock(&g->mu);
    for (int32_t i = 0; i < set->n; i++) {
        struct xlora *e = set->a[i];
        if (--e->refs == 0 && e->unloaded)
            entry_free(g, e);
    }
    shrink(g);
    pthread_mutex_unlock(&g->mu);
    set->n = 0;
}
