/*
 * GGUF reader: parses a GGUF v2/v3 file (ggml's docs/gguf.md) from a
 * read-only mmap or a caller buffer into a table of metadata entries and
 * tensor infos that point back into the bytes.
 *
 * The bytes are untrusted. Invariants the parser establishes before open
 * returns 0, so that the accessors below never need to check again:
 *   - every value (scalar, string, array element, nested array) lies inside
 *     the buffer; string and nested-array elements have an index built here
 *     so element access is O(1);
 *   - keys and tensor names are unique and contain no NUL;
 *   - every tensor has 1..4 dims, each >= 1, a known ggml type, ne[0] a
 *     multiple of the block size, an aligned offset, and its bytes inside
 *     the file without overlapping another tensor.
 * Allocations grow with what has actually been parsed (or are capped by
 * what the remaining bytes could hold), so a lying count never triggers a
 * huge allocation. Nested arrays are limited to IFL_GGUF_MAX_NEST levels so
 * recursion stays shallow.
 */
#include "model/gguf_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kernels/types.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "the GGUF reader assumes a little-endian host");

#define GGUF_MAGIC "GGUF"
#define GGUF_HEADER_SIZE 24 /* magic, version, n_tensors, n_kv */
#define GGUF_MIN_KV 13      /* u64 key length + u32 type + one u8 */
#define GGUF_MIN_TENSOR 32  /* u64 name length + u32 n_dims + one u64 ne + u32 type + u64 offset */
#define GGUF_MIN_SUBARR 12  /* u32 element type + u64 count */

struct parser {
    struct ifl_gguf *g;
    const uint8_t *base;
    size_t size;
    size_t pos;
    char *err;
    char what[128]; /* "key 'x'" or "tensor 'y'": who the next error is about */
};

/* ---- little helpers ---- */

static void *g_alloc(struct ifl_gguf *g, size_t n)
{
    if (n > SIZE_MAX - sizeof(struct gblk))
        return NULL;
    struct gblk *b = malloc(sizeof(struct gblk) + n);
    if (!b)
        return NULL;
    b->next = g->blocks;
    g->blocks = b;
    return b->data;
}

/* Printable, bounded rendering of a name taken from the file, for messages. */
void ifl_gguf_show_name(char *dst, size_t cap, const uint8_t *s, size_t len)
{
    size_t max = cap - 4, j = 0;
    for (size_t i = 0; i < len && j < max; i++)
        dst[j++] = (s[i] >= 0x20 && s[i] < 0x7f) ? (char)s[i] : '?';
    if (len > max)
        memcpy(dst + j, "...", 3), j += 3;
    dst[j] = 0;
}

static void set_what(struct parser *ps, const char *kind, const uint8_t *s, size_t len)
{
    char nm[80];
    ifl_gguf_show_name(nm, sizeof nm, s, len);
    snprintf(ps->what, sizeof ps->what, "%s '%s'", kind, nm);
}

static int fail(struct parser *ps, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(struct parser *ps, const char *fmt, ...)
{
    if (ps->err) {
        char msg[IFL_ERR_LEN];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof msg, fmt, ap);
        va_end(ap);
        if (ps->what[0])
            ifl_err(ps->err, IFL_EFORMAT, "gguf: %s: %s", ps->what, msg);
        else
            ifl_err(ps->err, IFL_EFORMAT, "gguf: %s", msg);
    }
    return IFL_EFORMAT;
}

static int oom(struct parser *ps)
{
    if (ps->what[0])
        return ifl_err(ps->err, IFL_ENOMEM, "gguf: %s: out of memory", ps->what);
    return ifl_err(ps->err, IFL_ENOMEM, "gguf: out of memory");
}

static size_t remaining(const struct parser *ps)
{
    return ps->size - ps->pos;
}

/* Checks that `n` more bytes holding `thing` are present. */
static int need(struct parser *ps, uint64_t n, const char *thing)
{
    if (n <= remaining(ps))
        return 0;
    return fail(ps, "%s at offset %zu runs past end of file (file is %zu bytes)", thing, ps->pos,
                ps->size);
}

static int take_u32(struct parser *ps, uint32_t *v, const char *thing)
{
    int rc = need(ps, 4, thing);
    if (rc)
        return rc;
    *v = rd_u32(ps->base + ps->pos);
    ps->pos += 4;
    return 0;
}

static int take_u64(struct parser *ps, uint64_t *v, const char *thing)
{
    int rc = need(ps, 8, thing);
    if (rc)
        return rc;
    *v = rd_u64(ps->base + ps->pos);
    ps->pos += 8;
    return 0;
}

/* A string: u64 length then bytes. Leaves ps->pos after it. */
static int take_str(struct parser *ps, const uint8_t **s, uint64_t *len, const char *thing)
{
    size_t at = ps->pos;
    int rc = take_u64(ps, len, thing);
    if (rc)
        return rc;
    if (*len > remaining(ps)) {
        ps->pos = at;
        return fail(ps, "%s of %llu bytes at offset %zu runs past end of file (file is %zu bytes)",
                    thing, (unsigned long long)*len, at, ps->size);
    }
    *s = ps->base + ps->pos;
    ps->pos += (size_t)*len;
    return 0;
}

const char *ifl_gguf_type_name(uint32_t t)
{
    static const char *const names[IFL_GGUF_TYPE_COUNT] = {
        "uint8", "int8",   "uint16", "int16",  "uint32", "int32",  "float32",
        "bool",  "string", "array",  "uint64", "int64",  "float64"};
    return t < IFL_GGUF_TYPE_COUNT ? names[t] : "unknown";
}

/* Bytes of one fixed-size value, 0 for STRING and ARRAY. */
size_t ifl_gguf_scalar_size(uint32_t t)
{
    switch (t) {
    case IFL_GGUF_UINT8:
    case IFL_GGUF_INT8:
    case IFL_GGUF_BOOL:
        return 1;
    case IFL_GGUF_UINT16:
    case IFL_GGUF_INT16:
        return 2;
    case IFL_GGUF_UINT32:
    case IFL_GGUF_INT32:
    case IFL_GGUF_FLOAT32:
        return 4;
    case IFL_GGUF_UINT64:
    case IFL_GGUF_INT64:
    case IFL_GGUF_FLOAT64:
        return 8;
    default:
        return 0;
    }
}

/* ---- values ---- */

static int parse_value(struct parser *ps, uint32_t type, struct gnode *out, int depth);

static int parse_array(struct parser *ps, struct gnode *out, int depth)
{
    if (depth >= IFL_GGUF_MAX_NEST)
        return fail(ps, "arrays nested deeper than %d levels at offset %zu", IFL_GGUF_MAX_NEST,
                    ps->pos);
    size_t at = ps->pos;
    uint32_t et;
    uint64_t n;
    int rc = take_u32(ps, &et, "array element type");
    if (!rc)
        rc = take_u64(ps, &n, "array count");
    if (rc)
        return rc;
    if (et >= IFL_GGUF_TYPE_COUNT)
        return fail(ps, "unknown array element type %u at offset %zu", et, at);
    out->elem_type = et;
    out->n = n;
    out->p = ps->base + ps->pos;
    size_t es = ifl_gguf_scalar_size(et);
    uint64_t min_each = es ? es : et == IFL_GGUF_STRING ? 8 : GGUF_MIN_SUBARR;
    if (n > remaining(ps) / min_each)
        return fail(ps,
                    "array of %llu %s values at offset %zu runs past end of file (file is %zu "
                    "bytes)",
                    (unsigned long long)n, ifl_gguf_type_name(et), at, ps->size);
    if (es) {
        ps->pos += (size_t)n * es;
        return 0;
    }
    if (et == IFL_GGUF_STRING) {
        /* n <= remaining / 8, so the index is no bigger than the bytes left */
        const uint8_t **idx = n ? g_alloc(ps->g, (size_t)n * sizeof *idx) : NULL;
        if (n && !idx)
            return oom(ps);
        for (uint64_t i = 0; i < n; i++) {
            const uint8_t *s;
            uint64_t len;
            idx[i] = ps->base + ps->pos;
            if ((rc = take_str(ps, &s, &len, "array string")))
                return rc;
        }
        out->index = idx;
        return 0;
    }
    struct gnode *subs = n ? g_alloc(ps->g, (size_t)n * sizeof *subs) : NULL;
    if (n && !subs)
        return oom(ps);
    for (uint64_t i = 0; i < n; i++) {
        memset(&subs[i], 0, sizeof subs[i]);
        if ((rc = parse_value(ps, et, &subs[i], depth + 1)))
            return rc;
    }
    out->index = subs;
    return 0;
}

static int parse_value(struct parser *ps, uint32_t type, struct gnode *out, int depth)
{
    out->type = type;
    if (type == IFL_GGUF_STRING) {
        const uint8_t *s;
        uint64_t len;
        int rc = take_str(ps, &s, &len, "string value");
        if (rc)
            return rc;
        out->p = s;
        out->n = len;
        return 0;
    }
    if (type == IFL_GGUF_ARRAY)
        return parse_array(ps, out, depth);
    size_t es = ifl_gguf_scalar_size(type);
    int rc = need(ps, es, ifl_gguf_type_name(type));
    if (rc)
        return rc;
    out->p = ps->base + ps->pos;
    ps->pos += es;
    return 0;
}

/* Reads an integer or bool of type t at p. 0, IFL_EINVAL (not an integer)
 * or IFL_EFORMAT (a uint64 above INT64_MAX). */
int ifl_gguf_read_int(uint32_t t, const uint8_t *p, int64_t *out)
{
    switch (t) {
    case IFL_GGUF_UINT8:
    case IFL_GGUF_BOOL:
        *out = p[0];
        return 0;
    case IFL_GGUF_INT8: {
        int8_t v;
        memcpy(&v, p, 1);
        *out = v;
        return 0;
    }
    case IFL_GGUF_UINT16: {
        uint16_t v;
        memcpy(&v, p, 2);
        *out = v;
        return 0;
    }
    case IFL_GGUF_INT16: {
        int16_t v;
        memcpy(&v, p, 2);
        *out = v;
        return 0;
    }
    case IFL_GGUF_UINT32:
        *out = rd_u32(p);
        return 0;
    case IFL_GGUF_INT32: {
        int32_t v;
        memcpy(&v, p, 4);
        *out = v;
        return 0;
    }
    case IFL_GGUF_INT64: {
        int64_t v;
        memcpy(&v, p, 8);
        *out = v;
        return 0;
    }
    case IFL_GGUF_UINT64: {
        uint64_t v = rd_u64(p);
        if (v > INT64_MAX)
            return IFL_EFORMAT;
        *out = (int64_t)v;
        return 0;
    }
    default:
        return IFL_EINVAL;
    }
}

int ifl_gguf_read_float(uint32_t t, const uint8_t *p, double *out)
{
    if (t == IFL_GGUF_FLOAT32) {
        float f;
        memcpy(&f, p, 4);
        *out = f;
        return 0;
    }
    if (t == IFL_GGUF_FLOAT64) {
        memcpy(out, p, 8);
        return 0;
    }
    return IFL_EINVAL;
}

/* ---- hash tables of names ---- */

static uint64_t hash_str(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 1099511628211ull;
    return h;
}

/* Builds a table of 2..4x n slots; returns the index of an earlier duplicate
 * of entry `*dup` through dup (or -1). */
static int build_table(struct ifl_gguf *g, int64_t n,
                       const char *(*name_of)(const struct ifl_gguf *, int64_t),
                       int64_t **slots_out, uint64_t *mask_out, int64_t *dup_a, int64_t *dup_b)
{
    uint64_t cap = 16;
    while (cap < (uint64_t)n * 2)
        cap <<= 1;
    int64_t *slots = g_alloc(g, cap * sizeof *slots);
    if (!slots)
        return IFL_ENOMEM;
    memset(slots, 0, cap * sizeof *slots);
    *dup_a = *dup_b = -1;
    for (int64_t i = 0; i < n; i++) {
        const char *nm = name_of(g, i);
        uint64_t h = hash_str(nm) & (cap - 1);
        while (slots[h]) {
            if (strcmp(name_of(g, slots[h] - 1), nm) == 0) {
                *dup_a = slots[h] - 1;
                *dup_b = i;
                return IFL_EFORMAT;
            }
            h = (h + 1) & (cap - 1);
        }
        slots[h] = i + 1;
    }
    *slots_out = slots;
    *mask_out = cap - 1;
    return 0;
}

const char *ifl_gguf_kv_name(const struct ifl_gguf *g, int64_t i)
{
    return g->kvs[i].key;
}
const char *ifl_gguf_t_name(const struct ifl_gguf *g, int64_t i)
{
    return g->tensors[i].t.name;
}

int64_t ifl_gguf_lookup(const struct ifl_gguf *g, const int64_t *slots, uint64_t mask,
                        const char *(*name_of)(const struct ifl_gguf *, int64_t), const char *nm)
{
    if (!slots || !nm)
        return -1;
    uint64_t h = hash_str(nm) & mask;
    while (slots[h]) {
        if (strcmp(name_of(g, slots[h] - 1), nm) == 0)
            return slots[h] - 1;
        h = (h + 1) & mask;
    }
    return -1;
}

/* ---- the file ---- */

/* Grows an array of `each`-byte items to hold at least n + 1. */
static int grow(void **arr, int64_t *cap, int64_t n, size_t each)
{
    if (n < *cap)
        return 0;
    int64_t nc = *cap ? *cap * 2 : 64;
    void *p = realloc(*arr, (size_t)nc * each);
    if (!p)
        return IFL_ENOMEM;
    *arr = p;
    *cap = nc;
    return 0;
}

static int parse_kvs(struct parser *ps, uint64_t n_kv)
{
    struct ifl_gguf *g = ps->g;
    int64_t cap = 0;
    for (uint64_t i = 0; i < n_kv; i++) {
        snprintf(ps->what, sizeof ps->what, "key #%llu", (unsigned long long)i);
        if (grow((void **)&g->kvs, &cap, g->n_kv, sizeof *g->kvs))
            return oom(ps);
        struct gkv *kv = &g->kvs[g->n_kv];
        memset(kv, 0, sizeof *kv);
        kv->off = ps->pos;
        const uint8_t *s;
        uint64_t len;
        int rc = take_str(ps, &s, &len, "key");
        if (rc)
            return rc;
        if (len == 0)
            return fail(ps, "empty key at offset %zu", kv->off);
        if (memchr(s, 0, (size_t)len))
            return fail(ps, "key at offset %zu contains a NUL byte", kv->off);
        set_what(ps, "key", s, (size_t)len);
        char *key = g_alloc(g, (size_t)len + 1);
        if (!key)
            return oom(ps);
        memcpy(key, s, (size_t)len);
        key[len] = 0;
        kv->key = key;
        kv->val_off = ps->pos;
        uint32_t type;
        if ((rc = take_u32(ps, &type, "value type")))
            return rc;
        if (type >= IFL_GGUF_TYPE_COUNT)
            return fail(ps, "unknown value type %u at offset %zu", type, kv->val_off);
        if ((rc = parse_value(ps, type, &kv->val, 0)))
            return rc;
        kv->val_end = ps->pos;
        g->n_kv++;
    }
    ps->what[0] = 0;
    return 0;
}

static int parse_tensor_infos(struct parser *ps, uint64_t n_tensors)
{
    struct ifl_gguf *g = ps->g;
    int64_t cap = 0;
    for (uint64_t i = 0; i < n_tensors; i++) {
        snprintf(ps->what, sizeof ps->what, "tensor #%llu", (unsigned long long)i);
        if (grow((void **)&g->tensors, &cap, g->n_tensors, sizeof *g->tensors))
            return oom(ps);
        struct gtensor *gt = &g->tensors[g->n_tensors];
        struct ifl_gguf_tensor *t = &gt->t;
        memset(gt, 0, sizeof *gt);
        gt->off = ps->pos;
        const uint8_t *s;
        uint64_t len;
        int rc = take_str(ps, &s, &len, "tensor name");
        if (rc)
            return rc;
        if (len == 0)
            return fail(ps, "empty tensor name at offset %zu", gt->off);
        if (memchr(s, 0, (size_t)len))
            return fail(ps, "tensor name at offset %zu contains a NUL byte", gt->off);
        set_what(ps, "tensor", s, (size_t)len);
        char *name = g_alloc(g, (size_t)len + 1);
        if (!name)
            return oom(ps);
        memcpy(name, s, (size_t)len);
        name[len] = 0;
        t->name = name;
        size_t at = ps->pos;
        uint32_t n_dims;
        if ((rc = take_u32(ps, &n_dims, "n_dims")))
            return rc;
        if (n_dims < 1 || n_dims > IFL_GGUF_MAX_DIMS)
            return fail(ps, "n_dims %u at offset %zu is not in 1..%d", n_dims, at,
                        IFL_GGUF_MAX_DIMS);
        t->n_dims = (int)n_dims;
        for (int d = 0; d < IFL_GGUF_MAX_DIMS; d++)
            t->ne[d] = 1;
        for (uint32_t d = 0; d < n_dims; d++) {
            uint64_t ne;
            at = ps->pos;
            if ((rc = take_u64(ps, &ne, "dimension")))
                return rc;
            if (ne < 1 || ne > INT64_MAX)
                return fail(ps, "dimension %u is %llu at offset %zu (must be 1..2^63-1)", d,
                            (unsigned long long)ne, at);
            t->ne[d] = (int64_t)ne;
        }
        at = ps->pos;
        if ((rc = take_u32(ps, &t->type, "tensor type")))
            return rc;
        if (!ifl_type_info(t->type))
            return fail(ps, "unknown ggml type %u at offset %zu", t->type, at);
        if ((rc = take_u64(ps, &t->offset, "data offset")))
            return rc;
        g->n_tensors++;
    }
    ps->what[0] = 0;
    return 0;
}

/* Sizes, alignment, bounds and overlap of every tensor, now that the data
 * section's start is known. */
static int check_tensors(struct parser *ps)
{
    struct ifl_gguf *g = ps->g;
    for (int64_t i = 0; i < g->n_tensors; i++) {
        struct ifl_gguf_tensor *t = &g->tensors[i].t;
        set_what(ps, "tensor", (const uint8_t *)t->name, strlen(t->name));
        const struct ifl_type_info *ti = ifl_type_info(t->type);
        uint64_t nel = 1;
        for (int d = 0; d < t->n_dims; d++)
            if (__builtin_mul_overflow(nel, (uint64_t)t->ne[d], &nel) || nel > INT64_MAX)
                return fail(ps, "element count overflows (ne = %lld x %lld x %lld x %lld)",
                            (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2],
                            (long long)t->ne[3]);
        if (t->ne[0] % ti->blck)
            return fail(ps, "ne[0] = %lld is not a multiple of the %s block size %lld",
                        (long long)t->ne[0], ti->name, (long long)ti->blck);
        uint64_t nbytes;
        if (__builtin_mul_overflow(nel / (uint64_t)ti->blck, (uint64_t)ti->size, &nbytes))
            return fail(ps, "byte size overflows");
        t->nbytes = nbytes;
        if (t->offset % g->alignment)
            return fail(ps, "data offset %llu is not a multiple of the alignment %llu",
                        (unsigned long long)t->offset, (unsigned long long)g->alignment);
        uint64_t avail = g->size - g->data_off;
        if (t->offset > avail || nbytes > avail - t->offset)
            return fail(ps, "data offset %llu + %llu past end of file (%zu bytes)",
                        (unsigned long long)(g->data_off + t->offset), (unsigned long long)nbytes,
                        g->size);
        t->data = g->base + g->data_off + t->offset;
    }
    ps->what[0] = 0;
    if (g->n_tensors < 2)
        return 0;
    int64_t *ord = malloc((size_t)g->n_tensors * sizeof *ord);
    if (!ord)
        return oom(ps);
    for (int64_t i = 0; i < g->n_tensors; i++)
        ord[i] = i;
    /* insertion sort would be quadratic on big models; a simple merge sort */
    int64_t *tmp = malloc((size_t)g->n_tensors * sizeof *tmp);
    if (!tmp) {
        free(ord);
        return oom(ps);
    }
    for (int64_t w = 1; w < g->n_tensors; w *= 2) {
        for (int64_t lo = 0; lo < g->n_tensors; lo += 2 * w) {
            int64_t mid = lo + w < g->n_tensors ? lo + w : g->n_tensors;
            int64_t hi = lo + 2 * w < g->n_tensors ? lo + 2 * w : g->n_tensors;
            int64_t a = lo, b = mid, k = lo;
            while (a < mid || b < hi) {
                if (b >= hi ||
                    (a < mid && g->tensors[ord[a]].t.offset <= g->tensors[ord[b]].t.offset))
                    tmp[k++] = ord[a++];
                else
                    tmp[k++] = ord[b++];
            }
        }
        memcpy(ord, tmp, (size_t)g->n_tensors * sizeof *ord);
    }
    free(tmp);
    int rc = 0;
    for (int64_t i = 1; i < g->n_tensors && !rc; i++) {
        const struct ifl_gguf_tensor *a = &g->tensors[ord[i - 1]].t, *b = &g->tensors[ord[i]].t;
        if (a->offset + a->nbytes > b->offset) {
            char na[80], nb[80];
            ifl_gguf_show_name(na, sizeof na, (const uint8_t *)a->name, strlen(a->name));
            ifl_gguf_show_name(nb, sizeof nb, (const uint8_t *)b->name, strlen(b->name));
            rc = fail(ps,
                      "tensor '%s' (data offset %llu, %llu bytes) overlaps tensor '%s' (data "
                      "offset %llu)",
                      na, (unsigned long long)a->offset, (unsigned long long)a->nbytes, nb,
                      (unsigned long long)b->offset);
        }
    }
    free(ord);
    return rc;
}

static int parse(struct ifl_gguf *g, char *err)
{
    struct parser ps = {.g = g, .base = g->base, .size = g->size, .err = err};
    if (g->size < GGUF_HEADER_SIZE)
        return fail(&ps, "file is %zu bytes, too small for the %d-byte header", g->size,
                    GGUF_HEADER_SIZE);
    if (memcmp(g->base, GGUF_MAGIC, 4) != 0)
        return fail(&ps, "bad magic %02x %02x %02x %02x at offset 0 (not a GGUF file)", g->base[0],
                    g->base[1], g->base[2], g->base[3]);
    g->version = rd_u32(g->base + 4);
    if (g->version != 2 && g->version != 3) {
        if ((g->version & 0xffff) == 0 && g->version)
            return fail(&ps, "unsupported GGUF version %u (a big-endian file?)", g->version);
        return fail(&ps, "unsupported GGUF version %u", g->version);
    }
    uint64_t n_tensors = rd_u64(g->base + 8), n_kv = rd_u64(g->base + 16);
    ps.pos = GGUF_HEADER_SIZE;
    if (n_kv > remaining(&ps) / GGUF_MIN_KV)
        return fail(&ps, "n_kv %llu at offset 16 is more than the remaining %zu bytes can hold",
                    (unsigned long long)n_kv, remaining(&ps));
    if (n_tensors > remaining(&ps) / GGUF_MIN_TENSOR)
        return fail(&ps, "n_tensors %llu at offset 8 is more than the remaining %zu bytes can hold",
                    (unsigned long long)n_tensors, remaining(&ps));
    int rc = parse_kvs(&ps, n_kv);
    if (rc)
        return rc;
    int64_t dup_a, dup_b;
    rc = build_table(g, g->n_kv, ifl_gguf_kv_name, &g->kv_slots, &g->kv_mask, &dup_a, &dup_b);
    if (rc == IFL_ENOMEM)
        return oom(&ps);
    if (rc) {
        const struct gkv *b = &g->kvs[dup_b];
        set_what(&ps, "key", (const uint8_t *)b->key, strlen(b->key));
        ifl_err(err, IFL_EFORMAT, "gguf: %s appears twice (at offsets %zu and %zu)", ps.what,
                g->kvs[dup_a].off, b->off);
        return IFL_EFORMAT;
    }
    g->alignment = 32;
    int64_t ai = ifl_gguf_find_key(g, "general.alignment");
    if (ai >= 0) {
        const struct gkv *kv = &g->kvs[ai];
        int64_t a = 0;
        snprintf(ps.what, sizeof ps.what, "key 'general.alignment'");
        int arc = kv->val.type == IFL_GGUF_BOOL ? IFL_EINVAL
                                                : ifl_gguf_read_int(kv->val.type, kv->val.p, &a);
        if (arc == IFL_EINVAL)
            return fail(&ps, "has type %s at offset %zu; expected uint32",
                        ifl_gguf_type_name(kv->val.type), kv->val_off);
        if (arc || a <= 0 || (a & (a - 1)) || a > (1 << 30))
            return fail(&ps, "value %lld at offset %zu is not a power of two in 1..2^30",
                        (long long)a, kv->val_off);
        g->alignment = (uint64_t)a;
        ps.what[0] = 0;
    }
    rc = parse_tensor_infos(&ps, n_tensors);
    if (rc)
        return rc;
    rc = build_table(g, g->n_tensors, ifl_gguf_t_name, &g->t_slots, &g->t_mask, &dup_a, &dup_b);
    if (rc == IFL_ENOMEM)
        return oom(&ps);
    if (rc) {
        const struct gtensor *b = &g->tensors[dup_b];
        set_what(&ps, "tensor", (const uint8_t *)b->t.name, strlen(b->t.name));
        ifl_err(err, IFL_EFORMAT, "gguf: %s appears twice (tensor infos at offsets %zu and %zu)",
                ps.what, g->tensors[dup_a].off, b->off);
        return IFL_EFORMAT;
    }
    /* pos <= size and alignment <= 2^30, so this cannot overflow */
    uint64_t data_off = ((uint64_t)ps.pos + g->alignment - 1) & ~(g->alignment - 1);
    if (g->n_tensors > 0 && data_off > g->size) {
        const char *nm = g->tensors[0].t.name;
        set_what(&ps, "tensor", (const uint8_t *)nm, strlen(nm));
        return fail(&ps,
                    "tensor data section at offset %llu starts past end of file (file is %zu "
                    "bytes)",
                    (unsigned long long)data_off, g->size);
    }
    g->data_off = data_off > g->size ? g->size : (size_t)data_off;
    return check_tensors(&ps);
}

int ifl_gguf_open_mem(struct ifl_gguf **out, const void *data, size_t size, char *err)
{
    *out = NULL;
    struct ifl_gguf *g = calloc(1, sizeof *g);
    if (!g)
        return ifl_err(err, IFL_ENOMEM, "gguf: out of memory");
    g->base = data;
    g->size = data ? size : 0;
    int rc = parse(g, err);
    if (rc) {
        ifl_gguf_free(g);
        return rc;
    }
    *out = g;
    return 0;
}

int ifl_gguf_open(struct ifl_gguf **out, const char *path, char *err)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return ifl_err(err, IFL_EIO, "gguf: cannot open '%s': %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return ifl_err(err, IFL_EIO, "gguf: cannot stat '%s': %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) {
        close(fd);
        return ifl_err(err, IFL_EIO, "gguf: '%s' is not a regular file", path);
    }
    if (st.st_size < GGUF_HEADER_SIZE) {
        close(fd);
        return ifl_err(err, IFL_EFORMAT,
                       "gguf: '%s' is %lld bytes, too small for the %d-byte header", path,
                       (long long)st.st_size, GGUF_HEADER_SIZE);
    }
    if ((unsigned long long)st.st_size > SIZE_MAX) {
        close(fd);
        return ifl_err(err, IFL_EIO, "gguf: '%s' is too large to map", path);
    }
    size_t size = (size_t)st.st_size;
    void *map = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (map == MAP_FAILED)
        return ifl_err(err, IFL_EIO, "gguf: cannot mmap '%s': %s", path, strerror(e));
    struct ifl_gguf *g = calloc(1, sizeof *g);
    char *p = strdup(path);
    if (!g || !p) {
        free(g);
        free(p);
        munmap(map, size);
        return ifl_err(err, IFL_ENOMEM, "gguf: out of memory");
    }
    g->map = map;
    g->base = map;
    g->size = size;
    g->path = p;
    int rc = parse(g, err);
    if (rc) {
        ifl_gguf_free(g);
        return rc;
    }
    *out = g;
    return 0;
}

void ifl_gguf_release(const struct ifl_gguf *g, const void *p, size_t len)
{
    if (!g->map || !len)
        return;
    /* only the mapping's pages: a shard's copies (shard.c) are not file
     * pages, and dropping them would zero them */
    if ((const char *)p < (const char *)g->map ||
        (const char *)p + len > (const char *)g->map + g->size)
        return;
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)p + page - 1) / page * page, b = ((uintptr_t)p + len) / page * page;
    if (a < b)
        madvise((void *)a, b - a, MADV_DONTNEED);
}

void ifl_gguf_free(struct ifl_gguf *g)
{
    if (!g)
        return;
    if (g->map)
        munmap(g->map, g->size);
    while (g->blocks) {
        struct gblk *b = g->blocks;
        g->blocks = b->next;
        free(b);
    }
    free(g->kvs);
    free(g->tensors);
    free(g->path);
    free(g);
}

uint32_t ifl_gguf_version(const struct ifl_gguf *g)
{
    return g->version;
}
uint64_t ifl_gguf_alignment(const struct ifl_gguf *g)
{
    return g->alignment;
}
size_t ifl_gguf_file_size(const struct ifl_gguf *g)
{
    return g->size;
}
const char *ifl_gguf_path(const struct ifl_gguf *g)
{
    return g->path ? g->path : "";
}
size_t ifl_gguf_data_offset(const struct ifl_gguf *g)
{
    return g->data_off;
}
const void *ifl_gguf_base(const struct ifl_gguf *g)
{
    return g->base;
}
