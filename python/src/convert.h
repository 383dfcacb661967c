/*
 * The Python extension's conversions between Python values and the C
 * API's structs (convert.c), shared with the executor type (core.c).
 */
#ifndef IFL_PY_CONVERT_H
#define IFL_PY_CONVERT_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stddef.h>
#include <stdint.h>

#include "inflight.h"

enum ftype { F_I32, F_I64, F_U64, F_F32, F_F64, F_BOOL };

struct ifl_py_field {
    const char *name;
    enum ftype type;
    size_t off;
};

/* Memory a converted request borrows until ifl_enqueue has copied it. */
struct ifl_py_arena {
    void **p;
    size_t n, cap;
};

extern PyObject *ifl_py_queue_full;                      /* inflight._core.QueueFullError */
extern const struct ifl_py_field ifl_py_spec_fields[];   /* struct ifl_speculative_config */
extern const struct ifl_py_field ifl_py_config_fields[]; /* struct ifl_executor_config */

/* Raises the Python exception for a C status (msg, or the status's name);
 * returns NULL. */
PyObject *ifl_py_raise(int rc, const char *msg);
int ifl_py_set_number(void *base, const struct ifl_py_field *f, PyObject *v, const char *prefix);
const struct ifl_py_field *ifl_py_find_field(const struct ifl_py_field *t, const char *name);
int ifl_py_fill_struct(void *base, const struct ifl_py_field *t, PyObject *d, const char *prefix);
void *ifl_py_arena_alloc(struct ifl_py_arena *a, size_t bytes);
void ifl_py_arena_free(struct ifl_py_arena *a);
int ifl_py_to_i32_array(PyObject *v, const char *name, struct ifl_py_arena *a, int32_t **out,
                        int32_t *n_out);
int ifl_py_to_cstr(PyObject *v, const char *name, struct ifl_py_arena *a, const char **out);
/* One request dict (the C struct's field names) into r; arrays borrowed
 * from a until ifl_enqueue has copied them. */
int ifl_py_to_request(PyObject *d, struct ifl_request *r, struct ifl_py_arena *a);
PyObject *ifl_py_ints(const int32_t *x, int32_t n);
/* A response as a dict; n_input: the prompt's length when it carries
 * context rows. */
PyObject *ifl_py_response(const struct ifl_response *r, int32_t n_input);
PyObject *ifl_py_stats(const struct ifl_iteration_stats *s);
PyObject *ifl_py_prompt_logprobs(PyObject *mod, PyObject *args);

#endif
