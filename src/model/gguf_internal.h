/*
 * The GGUF reader's own header (gguf.c parses, gguf_meta.c answers
 * lookups): the parsed file's layout and the helpers both use. Not for
 * other modules; they use model/gguf.h.
 */
#ifndef IFL_MODEL_GGUF_INTERNAL_H
#define IFL_MODEL_GGUF_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "model/gguf.h"

/* One parsed value. `p` is the first payload byte: the scalar itself, a
 * string's bytes, or an array's first element. */
struct gnode {
    const uint8_t *p;
    uint64_t n;         /* string length in bytes, or array element count */
    uint32_t type;      /* enum ifl_gguf_type */
    uint32_t elem_type; /* arrays only */
    const void *index;  /* STRING elements: const uint8_t *[n], each at the string's u64 length;
                           ARRAY elements: struct gnode[n]; NULL otherwise */
};

struct gkv {
    const char *key; /* NUL-terminated copy */
    size_t off;      /* of the key's length field */
    size_t val_off;  /* of the u32 value type */
    size_t val_end;  /* one past the value: [val_off, val_end) re-encodes it exactly */
    struct gnode val;
};

struct gtensor {
    struct ifl_gguf_tensor t;
    size_t off; /* of the name's length field */
};

/* Allocations that live until ifl_gguf_free, chained for one sweep. */
struct gblk {
    struct gblk *next;
    max_align_t data[];
};

struct ifl_gguf {
    const uint8_t *base;
    size_t size;
    void *map; /* non-NULL when we mmap'd the file */
    char *path;
    uint32_t version;
    uint64_t alignment;
    size_t data_off; /* start of the tensor data section */
    struct gkv *kvs;
    int64_t n_kv;
    struct gtensor *tensors;
    int64_t n_tensors;
    int64_t *kv_slots; /* open addressing: index + 1, 0 = empty */
    int64_t *t_slots;
    uint64_t kv_mask, t_mask;
    struct gblk *blocks;
};

static inline uint32_t rd_u32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline uint64_t rd_u64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* A printable copy of a name of len bytes (cut, control bytes escaped). */
void ifl_gguf_show_name(char *dst, size_t cap, const uint8_t *s, size_t len);
/* The name of a value type, for messages. */
const char *ifl_gguf_type_name(uint32_t t);
/* Bytes of one scalar of type t; 0 for strings and arrays. */
size_t ifl_gguf_scalar_size(uint32_t t);
/* A scalar at p of type t as an integer or a float: IFL_EINVAL for a type
 * that is not one; ifl_gguf_read_int gives IFL_EFORMAT for a uint64 above
 * INT64_MAX. */
int ifl_gguf_read_int(uint32_t t, const uint8_t *p, int64_t *out);
int ifl_gguf_read_float(uint32_t t, const uint8_t *p, double *out);
/* Name tables (open addressing, built by gguf.c): the index of the entry
 * named nm, -1 when absent; name_of is ifl_gguf_kv_name or _t_name. */
const char *ifl_gguf_kv_name(const struct ifl_gguf *g, int64_t i);
const char *ifl_gguf_t_name(const struct ifl_gguf *g, int64_t i);
int64_t ifl_gguf_lookup(const struct ifl_gguf *g, const int64_t *slots, uint64_t mask,
                        const char *(*name_of)(const struct ifl_gguf *, int64_t), const char *nm);

#endif
