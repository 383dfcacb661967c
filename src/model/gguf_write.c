/*
 * GGUF writer: assembles a GGUF v3 file (ggml's docs/gguf.md) in memory and
 * writes it to a temporary file beside the target, then renames it, so a
 * reader never sees half a file.
 *
 * Metadata is encoded as it is added (so the order is kept and copy_kv can
 * append a reader's bytes verbatim); tensors are kept as copies and laid out
 * at write time, when the alignment is final. Errors are sticky: the first
 * one is recorded with a sentence and returned by every later call.
 */
#include "model/gguf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/buf.h"
#include "kernels/types.h"

struct wtensor {
    char *name;
    uint32_t type;
    int n_dims;
    int64_t ne[IFL_GGUF_MAX_DIMS];
    void *data;            /* the writer's copy (add_tensor), or NULL */
    const void *view;      /* the caller's bytes (add_tensor_ref), or NULL */
    ifl_gguf_fill_fn fill; /* or made at write time (add_tensor_fill) */
    void *ctx;
    size_t nbytes;
};

struct ifl_gguf_writer {
    struct ifl_buf kv; /* encoded metadata entries */
    uint64_t n_kv;
    char **keys; /* for duplicate checks */
    size_t n_keys, cap_keys;
    struct wtensor *tensors;
    size_t n_tensors, cap_tensors;
    uint64_t alignment;
    int status; /* first error, sticky */
    char msg[IFL_ERR_LEN];
    int depth; /* open arrays of arrays */
    size_t count_at[IFL_GGUF_MAX_NEST];
    uint64_t count[IFL_GGUF_MAX_NEST];
};

static int wfail(struct ifl_gguf_writer *w, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int wfail(struct ifl_gguf_writer *w, int status, const char *fmt, ...)
{
    if (w->status)
        return w->status;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->msg, sizeof w->msg, fmt, ap);
    va_end(ap);
    w->status = status;
    return status;
}

static int put(struct ifl_gguf_writer *w, struct ifl_buf *b, const void *p, size_t n)
{
    ifl_buf_add(b, p, n);
    return b->oom ? wfail(w, IFL_ENOMEM, "gguf writer: out of memory") : 0;
}

static int put_u32(struct ifl_gguf_writer *w, struct ifl_buf *b, uint32_t v)
{
    return put(w, b, &v, 4);
}
static int put_u64(struct ifl_gguf_writer *w, struct ifl_buf *b, uint64_t v)
{
    return put(w, b, &v, 8);
}

static int put_str(struct ifl_gguf_writer *w, struct ifl_buf *b, const char *s, size_t len)
{
    int rc = put_u64(w, b, len);
    return rc ? rc : put(w, b, s, len);
}

int ifl_gguf_writer_create(struct ifl_gguf_writer **out)
{
    *out = calloc(1, sizeof **out);
    if (!*out)
        return IFL_ENOMEM;
    (*out)->alignment = 32;
    return 0;
}

void ifl_gguf_writer_free(struct ifl_gguf_writer *w)
{
    if (!w)
        return;
    ifl_buf_free(&w->kv);
    for (size_t i = 0; i < w->n_keys; i++)
        free(w->keys[i]);
    free(w->keys);
    for (size_t i = 0; i < w->n_tensors; i++) {
        free(w->tensors[i].name);
        free(w->tensors[i].data);
    }
    free(w->tensors);
    free(w);
}

/* Starts a top-level entry: checks the key and writes it. */
static int begin_key(struct ifl_gguf_writer *w, const char *key)
{
    if (w->status)
        return w->status;
    if (!key || !*key)
        return wfail(w, IFL_EINVAL, "gguf writer: empty key");
    if (w->depth)
        return wfail(w, IFL_EINVAL, "gguf writer: key '%s' set while an array of arrays is open",
                     key);
    for (size_t i = 0; i < w->n_keys; i++)
        if (strcmp(w->keys[i], key) == 0)
            return wfail(w, IFL_EINVAL, "gguf writer: key '%s' set twice", key);
    if (w->n_keys == w->cap_keys) {
        size_t nc = w->cap_keys ? w->cap_keys * 2 : 32;
        char **k = realloc(w->keys, nc * sizeof *k);
        if (!k)
            return wfail(w, IFL_ENOMEM, "gguf writer: out of memory");
        w->keys = k;
        w->cap_keys = nc;
    }
    char *copy = strdup(key);
    if (!copy)
        return wfail(w, IFL_ENOMEM, "gguf writer: out of memory");
    w->keys[w->n_keys++] = copy;
    w->n_kv++;
    return put_str(w, &w->kv, key, strlen(key));
}

/* general.alignment decides the data layout, so the writer follows it. */
static int adopt_alignment(struct ifl_gguf_writer *w, const char *key, uint32_t type, const void *v)
{
    if (strcmp(key, "general.alignment") != 0)
        return 0;
    uint64_t a = 0;
    switch (type) {
    case IFL_GGUF_UINT8:
    case IFL_GGUF_INT8:
        a = *(const uint8_t *)v;
        break;
    case IFL_GGUF_UINT16:
    case IFL_GGUF_INT16: {
        uint16_t x;
        memcpy(&x, v, 2);
        a = x;
        break;
    }
    case IFL_GGUF_UINT32:
    case IFL_GGUF_INT32: {
        uint32_t x;
        memcpy(&x, v, 4);
        a = x;
        break;
    }
    case IFL_GGUF_UINT64:
    case IFL_GGUF_INT64:
        memcpy(&a, v, 8);
        break;
    default:
        return wfail(w, IFL_EINVAL, "gguf writer: general.alignment must be an integer");
    }
    if (a == 0 || (a & (a - 1)) || a > (1u << 30))
        return wfail(w, IFL_EINVAL,
                     "gguf writer: general.alignment %llu is not a power of two in 1..2^30",
                     (unsigned long long)a);
    w->alignment = a;
    return 0;
}

static int set_scalar(struct ifl_gguf_writer *w, const char *key, uint32_t type, const void *v,
                      size_t size)
{
    int rc = begin_key(w, key);
    if (!rc)
        rc = adopt_alignment(w, key, type, v);
    if (!rc)
        rc = put_u32(w, &w->kv, type);
    if (!rc)
        rc = put(w, &w->kv, v, size);
    return rc;
}

int ifl_gguf_writer_set_u8(struct ifl_gguf_writer *w, const char *key, uint8_t v)
{
    return set_scalar(w, key, IFL_GGUF_UINT8, &v, 1);
}
int ifl_gguf_writer_set_i8(struct ifl_gguf_writer *w, const char *key, int8_t v)
{
    return set_scalar(w, key, IFL_GGUF_INT8, &v, 1);
}
int ifl_gguf_writer_set_u16(struct ifl_gguf_writer *w, const char *key, uint16_t v)
{
    return set_scalar(w, key, IFL_GGUF_UINT16, &v, 2);
}
int ifl_gguf_writer_set_i16(struct ifl_gguf_writer *w, const char *key, int16_t v)
{
    return set_scalar(w, key, IFL_GGUF_INT16, &v, 2);
}
int ifl_gguf_writer_set_u32(struct ifl_gguf_writer *w, const char *key, uint32_t v)
{
    return set_scalar(w, key, IFL_GGUF_UINT32, &v, 4);
}
int ifl_gguf_writer_set_i32(struct ifl_gguf_writer *w, const char *key, int32_t v)
{
    return set_scalar(w, key, IFL_GGUF_INT32, &v, 4);
}
int ifl_gguf_writer_set_u64(struct ifl_gguf_writer *w, const char *key, uint64_t v)
{
    return set_scalar(w, key, IFL_GGUF_UINT64, &v, 8);
}
int ifl_gguf_writer_set_i64(struct ifl_gguf_writer *w, const char *key, int64_t v)
{
    return set_scalar(w, key, IFL_GGUF_INT64, &v, 8);
}
int ifl_gguf_writer_set_f32(struct ifl_gguf_writer *w, const char *key, float v)
{
    return set_scalar(w, key, IFL_GGUF_FLOAT32, &v, 4);
}
int ifl_gguf_writer_set_f64(struct ifl_gguf_writer *w, const char *key, double v)
{
    return set_scalar(w, key, IFL_GGUF_FLOAT64, &v, 8);
}
int ifl_gguf_writer_set_bool(struct ifl_gguf_writer *w, const char *key, int v)
{
    uint8_t b = v != 0;
    return set_scalar(w, key, IFL_GGUF_BOOL, &b, 1);
}

int ifl_gguf_writer_set_str(struct ifl_gguf_writer *w, const char *key, const char *s, size_t len)
{
    int rc = begin_key(w, key);
    if (!rc && !s && len)
        rc = wfail(w, IFL_EINVAL, "gguf writer: key '%s': NULL string", key);
    if (!rc)
        rc = put_u32(w, &w->kv, IFL_GGUF_STRING);
    if (!rc)
        rc = put_str(w, &w->kv, s, len);
    return rc;
}

static size_t fixed_size(uint32_t t)
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

/* Starts an array value: with a key at top level, or as the next element
 * of the innermost open array of arrays. */
static int begin_array(struct ifl_gguf_writer *w, const char *key, uint32_t et, uint64_t n)
{
    if (w->status)
        return w->status;
    int rc;
    if (key) {
        if ((rc = begin_key(w, key)) || (rc = put_u32(w, &w->kv, IFL_GGUF_ARRAY)))
            return rc;
    } else {
        if (!w->depth)
            return wfail(w, IFL_EINVAL,
                         "gguf writer: an array without a key needs an open array of arrays");
        if (w->depth >= IFL_GGUF_MAX_NEST)
            return wfail(w, IFL_EINVAL, "gguf writer: arrays nested deeper than %d levels",
                         IFL_GGUF_MAX_NEST);
        w->count[w->depth - 1]++;
    }
    if ((rc = put_u32(w, &w->kv, et)))
        return rc;
    return put_u64(w, &w->kv, n);
}

int ifl_gguf_writer_set_arr(struct ifl_gguf_writer *w, const char *key,
                            enum ifl_gguf_type elem_type, const void *data, uint64_t n)
{
    size_t es = fixed_size(elem_type);
    if (!es)
        return wfail(w, IFL_EINVAL, "gguf writer: array '%s': element type %d is not fixed-size",
                     key ? key : "(nested)", (int)elem_type);
    if (n > SIZE_MAX / es || (n && !data))
        return wfail(w, IFL_EINVAL, "gguf writer: array '%s': bad data", key ? key : "(nested)");
    int rc = begin_array(w, key, elem_type, n);
    return rc ? rc : put(w, &w->kv, data, (size_t)n * es);
}

int ifl_gguf_writer_set_arr_str(struct ifl_gguf_writer *w, const char *key, const char *const *strs,
                                const size_t *lens, uint64_t n)
{
    if (n && !strs)
        return wfail(w, IFL_EINVAL, "gguf writer: array '%s': NULL strings",
                     key ? key : "(nested)");
    int rc = begin_array(w, key, IFL_GGUF_STRING, n);
    for (uint64_t i = 0; i < n && !rc; i++) {
        size_t len = lens ? lens[i] : strs[i] ? strlen(strs[i]) : 0;
        if (!strs[i] && len)
            return wfail(w, IFL_EINVAL, "gguf writer: array '%s': NULL string %llu",
                         key ? key : "(nested)", (unsigned long long)i);
        rc = put_str(w, &w->kv, strs[i], len);
    }
    return rc;
}

int ifl_gguf_writer_begin_arr(struct ifl_gguf_writer *w, const char *key)
{
    if (!w->status && w->depth >= IFL_GGUF_MAX_NEST)
        return wfail(w, IFL_EINVAL, "gguf writer: arrays nested deeper than %d levels",
                     IFL_GGUF_MAX_NEST);
    int rc = begin_array(w, key, IFL_GGUF_ARRAY, 0);
    if (rc)
        return rc;
    w->count_at[w->depth] = w->kv.len - 8;
    w->count[w->depth] = 0;
    w->depth++;
    return 0;
}

int ifl_gguf_writer_end_arr(struct ifl_gguf_writer *w)
{
    if (w->status)
        return w->status;
    if (!w->depth)
        return wfail(w, IFL_EINVAL, "gguf writer: end_arr without begin_arr");
    w->depth--;
    memcpy(w->kv.p + w->count_at[w->depth], &w->count[w->depth], 8);
    return 0;
}

int ifl_gguf_writer_copy_kv(struct ifl_gguf_writer *w, const struct ifl_gguf *src, int64_t i)
{
    if (w->status)
        return w->status;
    const char *key = ifl_gguf_key(src, i);
    const void *p;
    size_t len;
    if (!key || ifl_gguf_kv_span(src, i, &p, &len))
        return wfail(w, IFL_EINVAL, "gguf writer: copy_kv: no entry %lld", (long long)i);
    int rc = begin_key(w, key);
    if (rc)
        return rc;
    /* the span is a u32 type then the value, validated by the reader */
    uint32_t type;
    memcpy(&type, p, 4);
    if (type != IFL_GGUF_STRING && type != IFL_GGUF_ARRAY &&
        (rc = adopt_alignment(w, key, type, (const uint8_t *)p + 4)))
        return rc;
    return put(w, &w->kv, p, len);
}

/* Checks a tensor's name and shape and appends its entry; *out is the
 * new entry, its data for the caller to set. */
static int add_entry(struct ifl_gguf_writer *w, const char *name, uint32_t type, int n_dims,
                     const int64_t *ne, int has_data, size_t nbytes, struct wtensor **out)
{
    if (w->status)
        return w->status;
    if (!name || !*name)
        return wfail(w, IFL_EINVAL, "gguf writer: tensor with an empty name");
    const struct ifl_type_info *ti = ifl_type_info(type);
    if (!ti)
        return wfail(w, IFL_EINVAL, "gguf writer: tensor '%s': unknown ggml type %u", name, type);
    if (n_dims < 1 || n_dims > IFL_GGUF_MAX_DIMS)
        return wfail(w, IFL_EINVAL, "gguf writer: tensor '%s': n_dims %d is not in 1..%d", name,
                     n_dims, IFL_GGUF_MAX_DIMS);
    uint64_t nel = 1;
    for (int d = 0; d < n_dims; d++)
        if (ne[d] < 1 || __builtin_mul_overflow(nel, (uint64_t)ne[d], &nel) || nel > INT64_MAX)
            return wfail(w, IFL_EINVAL, "gguf writer: tensor '%s': bad dimension %d (%lld)", name,
                         d, (long long)ne[d]);
    if (ne[0] % ti->blck)
        return wfail(w, IFL_EINVAL,
                     "gguf writer: tensor '%s': ne[0] = %lld is not a multiple of the %s block "
                     "size %lld",
                     name, (long long)ne[0], ti->name, (long long)ti->blck);
    uint64_t want;
    if (__builtin_mul_overflow(nel / (uint64_t)ti->blck, (uint64_t)ti->size, &want) ||
        want != nbytes)
        return wfail(w, IFL_EINVAL, "gguf writer: tensor '%s': %zu bytes given, shape needs %llu",
                     name, nbytes, (unsigned long long)want);
    if (!has_data)
        return wfail(w, IFL_EINVAL, "gguf writer: tensor '%s': NULL data", name);
    for (size_t i = 0; i < w->n_tensors; i++)
        if (strcmp(w->tensors[i].name, name) == 0)
            return wfail(w, IFL_EINVAL, "gguf writer: tensor '%s' added twice", name);
    if (w->n_tensors == w->cap_tensors) {
        size_t nc = w->cap_tensors ? w->cap_tensors * 2 : 32;
        struct wtensor *t = realloc(w->tensors, nc * sizeof *t);
        if (!t)
            return wfail(w, IFL_ENOMEM, "gguf writer: out of memory");
        w->tensors = t;
        w->cap_tensors = nc;
    }
    struct wtensor *t = &w->tensors[w->n_tensors];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    if (!t->name)
        return wfail(w, IFL_ENOMEM, "gguf writer: tensor '%s': out of memory", name);
    t->type = type;
    t->n_dims = n_dims;
    for (int d = 0; d < IFL_GGUF_MAX_DIMS; d++)
        t->ne[d] = d < n_dims ? ne[d] : 1;
    t->nbytes = nbytes;
    *out = t;
    return 0;
}

int ifl_gguf_writer_add_tensor(struct ifl_gguf_writer *w, const char *name, uint32_t type,
                               int n_dims, const int64_t *ne, const void *data, size_t nbytes)
{
    struct wtensor *t;
    int rc = add_entry(w, name, type, n_dims, ne, data != NULL, nbytes, &t);
    if (rc)
        return rc;
    t->data = malloc(nbytes ? nbytes : 1);
    if (!t->data) {
        free(t->name);
        return wfail(w, IFL_ENOMEM, "gguf writer: tensor '%s': out of memory", name);
    }
    memcpy(t->data, data, nbytes);
    w->n_tensors++;
    return 0;
}

int ifl_gguf_writer_add_tensor_ref(struct ifl_gguf_writer *w, const char *name, uint32_t type,
                                   int n_dims, const int64_t *ne, const void *data, size_t nbytes)
{
    struct wtensor *t;
    int rc = add_entry(w, name, type, n_dims, ne, data != NULL, nbytes, &t);
    if (rc)
        return rc;
    t->view = data;
    w->n_tensors++;
    return 0;
}

int ifl_gguf_writer_add_tensor_fill(struct ifl_gguf_writer *w, const char *name, uint32_t type,
                                    int n_dims, const int64_t *ne, size_t nbytes,
                                    ifl_gguf_fill_fn fill, void *ctx)
{
    struct wtensor *t;
    int rc = add_entry(w, name, type, n_dims, ne, fill != NULL, nbytes, &t);
    if (rc)
        return rc;
    t->fill = fill;
    t->ctx = ctx;
    w->n_tensors++;
    return 0;
}

static uint64_t align_up(uint64_t x, uint64_t a)
{
    return (x + a - 1) & ~(a - 1);
}

static int pad_to(struct ifl_gguf_writer *w, struct ifl_buf *b, uint64_t a)
{
    static const uint8_t zeros[64];
    uint64_t target = align_up(b->len, a);
    int rc = 0;
    while (!rc && b->len < target) {
        size_t n = target - b->len < sizeof zeros ? (size_t)(target - b->len) : sizeof zeros;
        rc = put(w, b, zeros, n);
    }
    return rc;
}

static int write_all(int fd, const uint8_t *p, size_t n)
{
    while (n) {
        ssize_t k = write(fd, p, n);
        if (k < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += k;
        n -= (size_t)k;
    }
    return 0;
}

/* Tensor i's bytes, then the zeros to the next one's offset when pad. A
 * failed write sets *what and *e; a failed fill returns its code (its
 * sentence in err). */
static int write_tensor(struct ifl_gguf_writer *w, int fd, size_t i, int pad, const char **what,
                        int *e, char *err)
{
    static const uint8_t zeros[64];
    const struct wtensor *t = &w->tensors[i];
    const void *p = t->data ? t->data : t->view;
    void *made = NULL;
    if (t->fill) {
        made = malloc(t->nbytes ? t->nbytes : 1);
        if (!made)
            return ifl_err(err, IFL_ENOMEM, "gguf writer: tensor '%s': out of memory", t->name);
        int rc = t->fill(t->ctx, made, t->nbytes, err);
        if (rc) {
            free(made);
            return rc;
        }
        p = made;
    }
    if (write_all(fd, p, t->nbytes) != 0)
        *what = "write", *e = errno;
    free(made);
    uint64_t gap = pad ? align_up(t->nbytes, w->alignment) - t->nbytes : 0;
    while (!*what && gap) {
        size_t n = gap < sizeof zeros ? (size_t)gap : sizeof zeros;
        if (write_all(fd, zeros, n) != 0)
            *what = "write", *e = errno;
        gap -= n;
    }
    return 0;
}

int ifl_gguf_writer_write(struct ifl_gguf_writer *w, const char *path, char *err)
{
    if (!w->status && w->depth)
        wfail(w, IFL_EINVAL, "gguf writer: %d array(s) of arrays left open", w->depth);
    if (w->status)
        return ifl_err(err, w->status, "%s", w->msg);
    struct ifl_buf b = {0};
    int rc = put(w, &b, "GGUF", 4);
    if (!rc)
        rc = put_u32(w, &b, 3);
    if (!rc)
        rc = put_u64(w, &b, w->n_tensors);
    if (!rc)
        rc = put_u64(w, &b, w->n_kv);
    if (!rc)
        rc = put(w, &b, w->kv.p, w->kv.len);
    uint64_t off = 0;
    for (size_t i = 0; i < w->n_tensors && !rc; i++) {
        const struct wtensor *t = &w->tensors[i];
        rc = put_str(w, &b, t->name, strlen(t->name));
        if (!rc)
            rc = put_u32(w, &b, (uint32_t)t->n_dims);
        for (int d = 0; d < t->n_dims && !rc; d++)
            rc = put_u64(w, &b, (uint64_t)t->ne[d]);
        if (!rc)
            rc = put_u32(w, &b, t->type);
        if (!rc)
            rc = put_u64(w, &b, off);
        off = align_up(off + t->nbytes, w->alignment);
    }
    if (!rc && w->n_tensors)
        rc = pad_to(w, &b, w->alignment);
    if (rc) {
        ifl_buf_free(&b);
        return ifl_err(err, rc, "%s", w->msg);
    }

    size_t plen = strlen(path);
    char *tmp = malloc(plen + 16);
    if (!tmp) {
        ifl_buf_free(&b);
        return ifl_err(err, IFL_ENOMEM, "gguf writer: out of memory");
    }
    memcpy(tmp, path, plen);
    memcpy(tmp + plen, ".tmp.XXXXXX", 12);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        int e = errno;
        ifl_buf_free(&b);
        rc = ifl_err(err, IFL_EIO, "gguf writer: cannot create '%s': %s", tmp, strerror(e));
        free(tmp);
        return rc;
    }
    const char *what = NULL;
    int e = 0;
    if (fchmod(fd, 0644) != 0)
        what = "chmod", e = errno;
    else if (write_all(fd, (const uint8_t *)b.p, b.len) != 0)
        what = "write", e = errno;
    ifl_buf_free(&b);
    /* the tensors' bytes go to the file one at a time: the file is never
     * whole in memory, and a tensor made at write time lives only while it
     * is written */
    for (size_t i = 0; i < w->n_tensors && !what && !rc; i++)
        rc = write_tensor(w, fd, i, i + 1 < w->n_tensors, &what, &e, err);
    if (!what && !rc && fsync(fd) != 0)
        what = "fsync", e = errno;
    if (close(fd) != 0 && !what && !rc)
        what = "close", e = errno;
    if (!what && !rc && rename(tmp, path) != 0)
        what = "rename", e = errno;
    if (what || rc) {
        unlink(tmp);
        if (what)
            rc = ifl_err(err, IFL_EIO, "gguf writer: cannot %s '%s': %s", what, path, strerror(e));
    }
    free(tmp);
    return rc;
}
