/*
 * GGUF reader: a read-only view of a GGUF file (versions 2 and 3).
 *
 * File layout (little-endian throughout):
 *   u32 magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
 *   n_kv x { string key | u32 value_type | value }
 *   n_tensors x { string name | u32 n_dims | n_dims x u64 ne | u32 ggml_type | u64 offset }
 *   padding to general.alignment (default 32)
 *   tensor data; each tensor's offset is relative to the start of this section
 * where string = u64 length + bytes (no NUL), and an array value is
 *   u32 element_type | u64 count | count x element (elements may be strings or arrays).
 *
 * The file is untrusted. ifl_gguf_open checks every count, length, offset,
 * dimension and type against the bytes that remain before using it, and
 * fails with one sentence naming the key or tensor and the file offset.
 *
 * Ownership: the struct owns the mapping (or borrows the caller's buffer for
 * ifl_gguf_open_mem). Every pointer it hands out (keys, string views, tensor
 * names and data) lives until ifl_gguf_free. Immutable after open: share it
 * freely between threads.
 */
#ifndef IFL_MODEL_GGUF_H
#define IFL_MODEL_GGUF_H

#include <stddef.h>
#include <stdint.h>

#include "core/err.h"

enum ifl_gguf_type {
    IFL_GGUF_UINT8 = 0,
    IFL_GGUF_INT8 = 1,
    IFL_GGUF_UINT16 = 2,
    IFL_GGUF_INT16 = 3,
    IFL_GGUF_UINT32 = 4,
    IFL_GGUF_INT32 = 5,
    IFL_GGUF_FLOAT32 = 6,
    IFL_GGUF_BOOL = 7,
    IFL_GGUF_STRING = 8,
    IFL_GGUF_ARRAY = 9,
    IFL_GGUF_UINT64 = 10,
    IFL_GGUF_INT64 = 11,
    IFL_GGUF_FLOAT64 = 12,
    IFL_GGUF_TYPE_COUNT
};

#define IFL_GGUF_MAX_DIMS 4
/* Arrays may hold arrays; the reader rejects nesting deeper than this many
 * array levels (the format sets no limit; this keeps recursion bounded). */
#define IFL_GGUF_MAX_NEST 8

struct ifl_gguf;

struct ifl_gguf_tensor {
    const char *name;              /* NUL-terminated copy */
    uint32_t type;                 /* ggml type id (enum ifl_type in kernels/types.h) */
    int n_dims;                    /* 1..4 */
    int64_t ne[IFL_GGUF_MAX_DIMS]; /* ne[0] is the innermost (contiguous) dimension; unused dims are
                                      1 */
    uint64_t offset;               /* from the start of the data section */
    uint64_t nbytes;               /* checked against the file */
    const void *data;              /* into the mapping; aligned to general.alignment */
};

/* A view of one metadata value. For arrays, `n` is the element count and
 * elements are read with ifl_gguf_arr_* below. */
struct ifl_gguf_value {
    enum ifl_gguf_type type;
    enum ifl_gguf_type elem_type; /* arrays only */
    uint64_t n;                   /* arrays only */
    const void *impl;             /* reader-private */
};

int ifl_gguf_open(struct ifl_gguf **out, const char *path, char *err);
/* Parses a buffer the caller keeps alive until ifl_gguf_free (fuzzing, tests). */
int ifl_gguf_open_mem(struct ifl_gguf **out, const void *data, size_t size, char *err);
void ifl_gguf_free(struct ifl_gguf *g);

uint32_t ifl_gguf_version(const struct ifl_gguf *g);
uint64_t ifl_gguf_alignment(const struct ifl_gguf *g);
size_t ifl_gguf_file_size(const struct ifl_gguf *g);
const char *ifl_gguf_path(const struct ifl_gguf *g); /* "" for memory buffers */
/* Says the bytes [p, p + len) of a file's mapping will not be read again
 * soon: their pages leave resident memory (a later read brings them back
 * from the file). Nothing happens for memory buffers. */
void ifl_gguf_release(const struct ifl_gguf *g, const void *p, size_t len);
/* File offset of the tensor data section (tensor offsets are relative to it). */
size_t ifl_gguf_data_offset(const struct ifl_gguf *g);
/* The first byte of the file (or buffer): tensor data pointers minus this
 * are file offsets. */
const void *ifl_gguf_base(const struct ifl_gguf *g);

/* Metadata, by index or key. */
int64_t ifl_gguf_n_kv(const struct ifl_gguf *g);
const char *ifl_gguf_key(const struct ifl_gguf *g, int64_t i);
int64_t ifl_gguf_find_key(const struct ifl_gguf *g, const char *key); /* -1 if absent */
int ifl_gguf_value(const struct ifl_gguf *g, int64_t i, struct ifl_gguf_value *out);
/* The exact encoded bytes of entry i's value (u32 type, then the value), a
 * view into the file; IFL_EINVAL if i is out of range. */
int ifl_gguf_kv_span(const struct ifl_gguf *g, int64_t i, const void **p, size_t *len);
/* Scalar values from ifl_gguf_value: same conversions as the typed getters
 * (_int takes integers and bool). IFL_EINVAL on a type mismatch, IFL_EFORMAT
 * when a uint64 does not fit int64. */
int ifl_gguf_value_int(const struct ifl_gguf_value *v, int64_t *out);
int ifl_gguf_value_float(const struct ifl_gguf_value *v, double *out);
int ifl_gguf_value_str(const struct ifl_gguf_value *v, const char **s, size_t *len);

/* Typed getters by key. They return IFL_ENOTFOUND when the key is absent
 * (err untouched, so optional keys are easy) and IFL_EFORMAT with a message
 * naming the key when its type does not fit. Integers convert between
 * integer types when the value fits (_get_int also reads a bool as 0/1);
 * floats accept FLOAT32 and FLOAT64; _get_bool wants BOOL. */
int ifl_gguf_get_int(const struct ifl_gguf *g, const char *key, int64_t *out, char *err);
int ifl_gguf_get_float(const struct ifl_gguf *g, const char *key, double *out, char *err);
int ifl_gguf_get_bool(const struct ifl_gguf *g, const char *key, int *out, char *err);
/* String view into the file: not NUL-terminated, `len` bytes. */
int ifl_gguf_get_str(const struct ifl_gguf *g, const char *key, const char **s, size_t *len,
                     char *err);
/* Array by key: fills `out` (type ARRAY, elem_type, n). */
int ifl_gguf_get_arr(const struct ifl_gguf *g, const char *key, struct ifl_gguf_value *out,
                     char *err);

/* Array elements; i must be < arr->n (programmer error otherwise). The
 * element type must match the getter: _int for integer and bool elements,
 * _float for FLOAT32/FLOAT64, _str for STRING, _sub for nested arrays.
 * Each is O(1). They return IFL_EINVAL on a type mismatch (and _int
 * returns IFL_EFORMAT for a uint64 element above INT64_MAX). */
int ifl_gguf_arr_int(const struct ifl_gguf_value *arr, uint64_t i, int64_t *out);
int ifl_gguf_arr_float(const struct ifl_gguf_value *arr, uint64_t i, double *out);
int ifl_gguf_arr_str(const struct ifl_gguf_value *arr, uint64_t i, const char **s, size_t *len);
int ifl_gguf_arr_sub(const struct ifl_gguf_value *arr, uint64_t i, struct ifl_gguf_value *out);

/* Tensors. */
int64_t ifl_gguf_n_tensors(const struct ifl_gguf *g);
const struct ifl_gguf_tensor *ifl_gguf_tensor(const struct ifl_gguf *g, int64_t i);
const struct ifl_gguf_tensor *ifl_gguf_find_tensor(const struct ifl_gguf *g, const char *name);

/* ---- Writer (for tools/mkmodel and tests) ----
 * Builds a GGUF v3 file and writes it. Keys and tensors are written in the
 * order added. Tensor data is copied at ifl_gguf_writer_add_tensor time
 * (or borrowed, or made at write time: _ref and _fill below). Not
 * thread-safe.
 * Errors are sticky: a setter that fails (duplicate key or tensor name, bad
 * type or shape, size mismatch: IFL_EINVAL; IFL_ENOMEM) returns the code and
 * records a sentence; every later call returns the same code and
 * ifl_gguf_writer_write reports the sentence without writing anything.
 * Setting "general.alignment" (a power of two, as u32) changes the data
 * alignment from the default 32; copy_kv of that key does the same. */
struct ifl_gguf_writer;

int ifl_gguf_writer_create(struct ifl_gguf_writer **out);
void ifl_gguf_writer_free(struct ifl_gguf_writer *w);
int ifl_gguf_writer_set_u32(struct ifl_gguf_writer *w, const char *key, uint32_t v);
int ifl_gguf_writer_set_i32(struct ifl_gguf_writer *w, const char *key, int32_t v);
int ifl_gguf_writer_set_f32(struct ifl_gguf_writer *w, const char *key, float v);
int ifl_gguf_writer_set_bool(struct ifl_gguf_writer *w, const char *key, int v);
int ifl_gguf_writer_set_str(struct ifl_gguf_writer *w, const char *key, const char *s, size_t len);
int ifl_gguf_writer_set_u8(struct ifl_gguf_writer *w, const char *key, uint8_t v);
int ifl_gguf_writer_set_i8(struct ifl_gguf_writer *w, const char *key, int8_t v);
int ifl_gguf_writer_set_u16(struct ifl_gguf_writer *w, const char *key, uint16_t v);
int ifl_gguf_writer_set_i16(struct ifl_gguf_writer *w, const char *key, int16_t v);
int ifl_gguf_writer_set_u64(struct ifl_gguf_writer *w, const char *key, uint64_t v);
int ifl_gguf_writer_set_i64(struct ifl_gguf_writer *w, const char *key, int64_t v);
int ifl_gguf_writer_set_f64(struct ifl_gguf_writer *w, const char *key, double v);
/* Arrays. `data` holds n packed values of elem_type (a fixed-size type:
 * not STRING or ARRAY) in host (little-endian) order. Strings: n pointers
 * and their lengths (lens may be NULL for NUL-terminated strings).
 * Arrays of arrays: _begin_arr(key) opens one, then each element is added
 * with key NULL (_set_arr, _set_arr_str or a nested _begin_arr), and
 * _end_arr closes it; at most IFL_GGUF_MAX_NEST levels. While an array of
 * arrays is open, only key-less array calls are allowed. */
int ifl_gguf_writer_set_arr(struct ifl_gguf_writer *w, const char *key,
                            enum ifl_gguf_type elem_type, const void *data, uint64_t n);
int ifl_gguf_writer_set_arr_str(struct ifl_gguf_writer *w, const char *key, const char *const *strs,
                                const size_t *lens, uint64_t n);
int ifl_gguf_writer_begin_arr(struct ifl_gguf_writer *w, const char *key);
int ifl_gguf_writer_end_arr(struct ifl_gguf_writer *w);
/* Copies one metadata entry (any type, arrays included) from a reader. */
int ifl_gguf_writer_copy_kv(struct ifl_gguf_writer *w, const struct ifl_gguf *src, int64_t i);
int ifl_gguf_writer_add_tensor(struct ifl_gguf_writer *w, const char *name, uint32_t type,
                               int n_dims, const int64_t *ne, const void *data, size_t nbytes);
/* The same without a copy: data must stay valid until the write (a
 * mapped source's tensor, say). */
int ifl_gguf_writer_add_tensor_ref(struct ifl_gguf_writer *w, const char *name, uint32_t type,
                                   int n_dims, const int64_t *ne, const void *data, size_t nbytes);
/* A tensor made at write time: fill(ctx, dst, nbytes, err) writes its
 * nbytes into dst and returns 0, or an IFL_E* code with a sentence in err,
 * which stops the write (no file is left). Only one such tensor is in
 * memory at a time; ctx must stay valid until the write. */
typedef int (*ifl_gguf_fill_fn)(void *ctx, void *dst, size_t nbytes, char *err);
int ifl_gguf_writer_add_tensor_fill(struct ifl_gguf_writer *w, const char *name, uint32_t type,
                                    int n_dims, const int64_t *ne, size_t nbytes,
                                    ifl_gguf_fill_fn fill, void *ctx);
/* Writes path (through a temporary file renamed at the end): the header
 * from memory, then each tensor's bytes in turn. */
int ifl_gguf_writer_write(struct ifl_gguf_writer *w, const char *path, char *err);

#endif
