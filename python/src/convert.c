/*
 * Conversions for inflight._core: Python values into the C API's structs,
 * field by field through tables (an unknown or out-of-range field is an
 * error naming it), and responses back into plain Python objects.
 */
#include "convert.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

PyObject *ifl_py_queue_full;

/* ---------------------------------------------------------------- errors */

/* Raises the Python exception for a C status with the C message. */
PyObject *ifl_py_raise(int rc, const char *msg)
{
    const char *m = msg && msg[0] ? msg : ifl_strerror(rc);
    switch (rc) {
    case IFL_EINVAL:
    case IFL_EUNSUPPORTED:
    case IFL_EFORMAT:
        PyErr_SetString(PyExc_ValueError, m);
        break;
    case IFL_ENOMEM:
        PyErr_SetString(PyExc_MemoryError, m);
        break;
    case IFL_EIO:
        PyErr_SetString(PyExc_OSError, m);
        break;
    case IFL_EFULL:
        PyErr_SetString(ifl_py_queue_full, m);
        break;
    case IFL_ETIMEDOUT:
        PyErr_SetString(PyExc_TimeoutError, m);
        break;
    case IFL_ENOTFOUND:
        PyErr_SetString(PyExc_KeyError, m);
        break;
    default:
        PyErr_SetString(PyExc_RuntimeError, m);
        break;
    }
    return NULL;
}

/* ------------------------------------------------- field tables and values */

/* Reads one number into the struct at base + f->off, range-checked for
 * its C type; errors say "<prefix><name>: ...". */
int ifl_py_set_number(void *base, const struct ifl_py_field *f, PyObject *v, const char *prefix)
{
    char *p = (char *)base + f->off;
    if (f->type == F_F32 || f->type == F_F64) {
        if (!PyFloat_Check(v) && !PyLong_Check(v)) {
            PyErr_Format(PyExc_TypeError, "%s%s: expected a number, got %s", prefix, f->name,
                         Py_TYPE(v)->tp_name);
            return -1;
        }
        double d = PyFloat_AsDouble(v);
        if (d == -1.0 && PyErr_Occurred()) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "%s%s: out of range", prefix, f->name);
            return -1;
        }
        if (f->type == F_F32)
            *(float *)p = (float)d;
        else
            *(double *)p = d;
        return 0;
    }
    if (!PyLong_Check(v)) {
        PyErr_Format(PyExc_TypeError, "%s%s: expected an integer, got %s", prefix, f->name,
                     Py_TYPE(v)->tp_name);
        return -1;
    }
    if (f->type == F_U64) {
        unsigned long long u = PyLong_AsUnsignedLongLong(v);
        if (u == (unsigned long long)-1 && PyErr_Occurred()) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "%s%s: must be in 0..2**64-1", prefix, f->name);
            return -1;
        }
        *(uint64_t *)p = u;
        return 0;
    }
    int overflow = 0;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred())
        return -1;
    if (f->type == F_I64) {
        if (overflow) {
            PyErr_Format(PyExc_ValueError, "%s%s: out of range", prefix, f->name);
            return -1;
        }
        *(int64_t *)p = x;
        return 0;
    }
    if (overflow || x < INT32_MIN || x > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%s%s: out of range for a 32-bit integer", prefix, f->name);
        return -1;
    }
    *(int32_t *)p = (int32_t)x;
    return 0;
}

const struct ifl_py_field *ifl_py_find_field(const struct ifl_py_field *t, const char *name)
{
    for (; t->name; t++)
        if (!strcmp(t->name, name))
            return t;
    return NULL;
}

void *ifl_py_arena_alloc(struct ifl_py_arena *a, size_t bytes)
{
    if (a->n == a->cap) {
        size_t cap = a->cap ? a->cap * 2 : 16;
        void **np = realloc(a->p, cap * sizeof(*np));
        if (!np)
            return NULL;
        a->p = np;
        a->cap = cap;
    }
    void *m = malloc(bytes ? bytes : 1);
    if (!m)
        return NULL;
    a->p[a->n++] = m;
    return m;
}

void ifl_py_arena_free(struct ifl_py_arena *a)
{
    for (size_t i = 0; i < a->n; i++)
        free(a->p[i]);
    free(a->p);
    a->p = NULL;
    a->n = a->cap = 0;
}

/* A sequence of ints as int32_t (borrowed from the arena). */
int ifl_py_to_i32_array(PyObject *v, const char *name, struct ifl_py_arena *a, int32_t **out,
                        int32_t *n_out)
{
    PyObject *seq = PySequence_Fast(v, "");
    if (!seq) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s: expected a sequence of token ids", name);
        return -1;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > INT32_MAX) {
        Py_DECREF(seq);
        PyErr_Format(PyExc_ValueError, "%s: too many values", name);
        return -1;
    }
    int32_t *arr = ifl_py_arena_alloc(a, sizeof(int32_t) * (size_t)n);
    if (!arr) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *x = PySequence_Fast_GET_ITEM(seq, i);
        int overflow = 0;
        long long t = PyLong_Check(x) ? PyLong_AsLongLongAndOverflow(x, &overflow) : 0;
        if (!PyLong_Check(x) || overflow || t < INT32_MIN || t > INT32_MAX) {
            Py_DECREF(seq);
            PyErr_Format(PyExc_ValueError, "%s[%zd]: expected a 32-bit integer token id", name, i);
            return -1;
        }
        arr[i] = (int32_t)t;
    }
    Py_DECREF(seq);
    *out = arr;
    *n_out = (int32_t)n;
    return 0;
}

/* A list of token sequences as the C API's concatenation plus lengths. */
static int to_words(PyObject *v, const char *name, struct ifl_py_arena *a, const int32_t **tok,
                    const int32_t **lens, int32_t *n)
{
    PyObject *seq = PySequence_Fast(v, "");
    if (!seq) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s: expected a list of token-id lists", name);
        return -1;
    }
    Py_ssize_t nw = PySequence_Fast_GET_SIZE(seq);
    int32_t *ls = ifl_py_arena_alloc(a, sizeof(int32_t) * (size_t)nw);
    int32_t **parts = ifl_py_arena_alloc(a, sizeof(int32_t *) * (size_t)nw);
    if (!ls || !parts || nw > INT32_MAX) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    int64_t total = 0;
    for (Py_ssize_t i = 0; i < nw; i++) {
        char nm[64];
        snprintf(nm, sizeof(nm), "%s[%zd]", name, i);
        if (ifl_py_to_i32_array(PySequence_Fast_GET_ITEM(seq, i), nm, a, &parts[i], &ls[i])) {
            Py_DECREF(seq);
            return -1;
        }
        total += ls[i];
    }
    Py_DECREF(seq);
    int32_t *all = ifl_py_arena_alloc(a, sizeof(int32_t) * (size_t)total);
    if (!all) {
        PyErr_NoMemory();
        return -1;
    }
    int64_t off = 0;
    for (Py_ssize_t i = 0; i < nw; i++) {
        memcpy(all + off, parts[i], sizeof(int32_t) * (size_t)ls[i]);
        off += ls[i];
    }
    *tok = all;
    *lens = ls;
    *n = (int32_t)nw;
    return 0;
}

/* A str as UTF-8 bytes that stay valid while the arena lives. */
int ifl_py_to_cstr(PyObject *v, const char *name, struct ifl_py_arena *a, const char **out)
{
    if (v == Py_None) {
        *out = NULL;
        return 0;
    }
    if (!PyUnicode_Check(v)) {
        PyErr_Format(PyExc_TypeError, "%s: expected a str", name);
        return -1;
    }
    Py_ssize_t len;
    const char *s = PyUnicode_AsUTF8AndSize(v, &len);
    if (!s)
        return -1;
    if ((Py_ssize_t)strlen(s) != len) {
        PyErr_Format(PyExc_ValueError, "%s: contains a NUL character", name);
        return -1;
    }
    char *c = ifl_py_arena_alloc(a, (size_t)len + 1);
    if (!c) {
        PyErr_NoMemory();
        return -1;
    }
    memcpy(c, s, (size_t)len + 1);
    *out = c;
    return 0;
}

/* Fills a struct from a dict through a table; keys the table lacks are
 * errors, so a misspelt field never goes unnoticed. */
int ifl_py_fill_struct(void *base, const struct ifl_py_field *t, PyObject *d, const char *prefix)
{
    if (!PyDict_Check(d)) {
        PyErr_Format(PyExc_TypeError, "%s: expected a dict", prefix);
        return -1;
    }
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(d, &pos, &k, &v)) {
        const char *name = PyUnicode_Check(k) ? PyUnicode_AsUTF8(k) : NULL;
        const struct ifl_py_field *f = name ? ifl_py_find_field(t, name) : NULL;
        if (!f) {
            PyErr_Format(PyExc_ValueError, "%s%S: no such field", prefix, k);
            return -1;
        }
        if (ifl_py_set_number(base, f, v, prefix))
            return -1;
    }
    return 0;
}

#define FLD(st, name, type)                                                                        \
    {                                                                                              \
#name, type, offsetof(st, name)                                                            \
    }

static const struct ifl_py_field sampling_fields[] = {
    FLD(struct ifl_sampling_config, beam_width, F_I32),
    FLD(struct ifl_sampling_config, top_k, F_I32),
    FLD(struct ifl_sampling_config, top_p, F_F32),
    FLD(struct ifl_sampling_config, top_p_min, F_F32),
    FLD(struct ifl_sampling_config, top_p_decay, F_F32),
    FLD(struct ifl_sampling_config, top_p_reset_ids, F_I32),
    FLD(struct ifl_sampling_config, min_p, F_F32),
    FLD(struct ifl_sampling_config, typical_p, F_F32),
    FLD(struct ifl_sampling_config, temperature, F_F32),
    FLD(struct ifl_sampling_config, seed, F_U64),
    FLD(struct ifl_sampling_config, min_tokens, F_I32),
    FLD(struct ifl_sampling_config, repetition_penalty, F_F32),
    FLD(struct ifl_sampling_config, presence_penalty, F_F32),
    FLD(struct ifl_sampling_config, frequency_penalty, F_F32),
    FLD(struct ifl_sampling_config, no_repeat_ngram_size, F_I32),
    FLD(struct ifl_sampling_config, length_penalty, F_F32),
    FLD(struct ifl_sampling_config, early_stopping, F_I32),
    FLD(struct ifl_sampling_config, ignore_eos, F_I32),
    {NULL, F_I32, 0},
};

static const struct ifl_py_field output_fields[] = {
    FLD(struct ifl_output_config, return_log_probs, F_I32),
    FLD(struct ifl_output_config, top_log_probs, F_I32),
    FLD(struct ifl_output_config, return_context_logits, F_I32),
    FLD(struct ifl_output_config, return_generation_logits, F_I32),
    /* exclude_input_from_output stays 1: the Python layer puts the prompt
     * in front itself, so every array here covers generated tokens only */
    FLD(struct ifl_output_config, return_perf_metrics, F_I32),
    FLD(struct ifl_output_config, return_hidden_states, F_I32),
    {NULL, F_I32, 0},
};

static const struct ifl_py_field rspec_fields[] = {
    FLD(struct ifl_request_speculative, disable, F_I32),
    FLD(struct ifl_request_speculative, n_max, F_I32),
    FLD(struct ifl_request_speculative, n_min, F_I32),
    FLD(struct ifl_request_speculative, p_min, F_F32),
    {NULL, F_I32, 0},
};

static const struct ifl_py_field request_fields[] = {
    FLD(struct ifl_request, max_tokens, F_I32),
    FLD(struct ifl_request, streaming, F_I32),
    FLD(struct ifl_request, end_id, F_I32),
    FLD(struct ifl_request, pad_id, F_I32),
    FLD(struct ifl_request, client_id, F_U64),
    FLD(struct ifl_request, priority, F_F32),
    FLD(struct ifl_request, num_return_sequences, F_I32),
    FLD(struct ifl_request, allotted_time_ms, F_I64),
    FLD(struct ifl_request, return_all_generated_tokens, F_I32),
    FLD(struct ifl_request, guide_type, F_I32),
    {NULL, F_I32, 0},
};

const struct ifl_py_field ifl_py_spec_fields[] = {
    FLD(struct ifl_speculative_config, type, F_I32),
    FLD(struct ifl_speculative_config, n_max, F_I32),
    FLD(struct ifl_speculative_config, n_min, F_I32),
    FLD(struct ifl_speculative_config, p_min, F_F32),
    FLD(struct ifl_speculative_config, ngram_size, F_I32),
    FLD(struct ifl_speculative_config, ngram_min_hits, F_I32),
    FLD(struct ifl_speculative_config, tree_budget, F_I32),
    FLD(struct ifl_speculative_config, tree_top_n, F_I32),
    FLD(struct ifl_speculative_config, accept, F_I32),
    FLD(struct ifl_speculative_config, adaptive, F_I32),
    {NULL, F_I32, 0},
};

const struct ifl_py_field ifl_py_config_fields[] = {
    FLD(struct ifl_executor_config, n_threads, F_I32),
    FLD(struct ifl_executor_config, max_batch_size, F_I32),
    FLD(struct ifl_executor_config, max_num_tokens, F_I32),
    FLD(struct ifl_executor_config, max_queue_size, F_I32),
    FLD(struct ifl_executor_config, n_ctx, F_I32),
    FLD(struct ifl_executor_config, kv_cache_tokens, F_I64),
    FLD(struct ifl_executor_config, kv_cache_bytes, F_I64),
    FLD(struct ifl_executor_config, kv_block_size, F_I32),
    FLD(struct ifl_executor_config, kv_type, F_I32),
    FLD(struct ifl_executor_config, sched_policy, F_I32),
    FLD(struct ifl_executor_config, enable_prefix_caching, F_I32),
    FLD(struct ifl_executor_config, kv_cache_memory_share, F_F64),
    FLD(struct ifl_executor_config, kv_cache_memory_limit, F_I64),
    FLD(struct ifl_executor_config, kv_release_ms, F_I32),
    FLD(struct ifl_executor_config, kv_prefault, F_I32),
    FLD(struct ifl_executor_config, lora_cache_bytes, F_I64),
    FLD(struct ifl_executor_config, lora_type, F_I32),
    FLD(struct ifl_executor_config, tp_emulate, F_I32),
    FLD(struct ifl_executor_config, vision_images_per_step, F_I32),
    FLD(struct ifl_executor_config, image_cache_bytes, F_I64),
    FLD(struct ifl_executor_config, vision_precision, F_I32),
    FLD(struct ifl_executor_config, repack_cache_max_bytes, F_I64),
    {NULL, F_I32, 0},
};

/* A bytes-like object copied into the arena. */
static int to_bytes(PyObject *v, const char *name, struct ifl_py_arena *a, const void **out,
                    int64_t *n)
{
    Py_buffer b;
    if (PyObject_GetBuffer(v, &b, PyBUF_SIMPLE)) {
        PyErr_Format(PyExc_TypeError, "%s: expected bytes", name);
        return -1;
    }
    void *p = ifl_py_arena_alloc(a, b.len ? (size_t)b.len : 1);
    if (p && b.len)
        memcpy(p, b.buf, (size_t)b.len);
    *out = p;
    *n = (int64_t)b.len;
    PyBuffer_Release(&b);
    return p ? 0 : (PyErr_NoMemory(), -1);
}

/* "images": [{"data": bytes, "pos": int} or {"embd": float32 bytes,
 * "n_rows": int, "pos": int}, ...] into struct ifl_image_input. */
static int to_images(PyObject *v, struct ifl_request *r, struct ifl_py_arena *a)
{
    PyObject *seq = PySequence_Fast(v, "images: expected a list of dicts");
    if (!seq)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    struct ifl_image_input *im = ifl_py_arena_alloc(a, sizeof(*im) * (size_t)(n ? n : 1));
    int rc = im ? 0 : (PyErr_NoMemory(), -1);
    for (Py_ssize_t i = 0; !rc && i < n; i++) {
        PyObject *d = PySequence_Fast_GET_ITEM(seq, i);
        char nm[48];
        memset(&im[i], 0, sizeof im[i]);
        if (!PyDict_Check(d)) {
            PyErr_Format(PyExc_TypeError, "images[%zd]: expected a dict", i);
            rc = -1;
            break;
        }
        PyObject *data = PyDict_GetItemString(d, "data"), *embd = PyDict_GetItemString(d, "embd");
        PyObject *pos = PyDict_GetItemString(d, "pos"), *nr = PyDict_GetItemString(d, "n_rows");
        static const struct ifl_py_field posf = {"pos", F_I32, 0}, nrf = {"n_rows", F_I32, 0};
        snprintf(nm, sizeof nm, "images[%zd].", i);
        if (pos)
            rc = ifl_py_set_number(&im[i].pos, &posf, pos, nm);
        if (!rc && nr)
            rc = ifl_py_set_number(&im[i].n_rows, &nrf, nr, nm);
        if (!rc && data) {
            snprintf(nm, sizeof nm, "images[%zd].data", i);
            rc = to_bytes(data, nm, a, &im[i].data, &im[i].size);
        }
        if (!rc && embd) {
            const void *p;
            int64_t nb;
            snprintf(nm, sizeof nm, "images[%zd].embd", i);
            rc = to_bytes(embd, nm, a, &p, &nb);
            im[i].embd = p; /* inflight/executor.py checks it is n_rows x n_embd floats */
            if (!rc && nb % (int64_t)sizeof(float)) {
                PyErr_Format(PyExc_ValueError, "%s: %lld bytes is not a whole number of floats", nm,
                             (long long)nb);
                rc = -1;
            }
            if (!rc && im[i].n_rows > 0 && nb / (int64_t)sizeof(float) % im[i].n_rows) {
                PyErr_Format(PyExc_ValueError, "%s: %lld floats do not make %d rows", nm,
                             (long long)(nb / 4), (int)im[i].n_rows);
                rc = -1;
            }
        }
    }
    Py_DECREF(seq);
    r->images = im;
    r->n_images = (int32_t)n;
    return rc;
}

/* One request dict (inflight/executor.py builds it) into the C struct. */
int ifl_py_to_request(PyObject *d, struct ifl_request *r, struct ifl_py_arena *a)
{
    ifl_request_init(r);
    if (!PyDict_Check(d)) {
        PyErr_SetString(PyExc_TypeError, "request: expected a dict");
        return -1;
    }
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(d, &pos, &k, &v)) {
        const char *name = PyUnicode_Check(k) ? PyUnicode_AsUTF8(k) : NULL;
        if (!name) {
            PyErr_SetString(PyExc_TypeError, "request: keys must be str");
            return -1;
        }
        const struct ifl_py_field *f = ifl_py_find_field(request_fields, name);
        int rc = 0;
        if (f) {
            rc = ifl_py_set_number(r, f, v, "");
        } else if (!strcmp(name, "input_ids")) {
            int32_t *ids;
            rc = ifl_py_to_i32_array(v, name, a, &ids, &r->n_input);
            r->input_ids = ids;
        } else if (!strcmp(name, "sampling")) {
            rc = ifl_py_fill_struct(&r->sampling, sampling_fields, v, "sampling.");
        } else if (!strcmp(name, "output")) {
            rc = ifl_py_fill_struct(&r->output, output_fields, v, "output.");
        } else if (!strcmp(name, "speculative")) {
            rc = ifl_py_fill_struct(&r->speculative, rspec_fields, v, "speculative.");
        } else if (!strcmp(name, "draft_tokens")) {
            int32_t *ids;
            rc = ifl_py_to_i32_array(v, "speculative.draft_tokens", a, &ids,
                                     &r->speculative.n_draft_tokens);
            r->speculative.draft_tokens = ids;
        } else if (!strcmp(name, "stop_words")) {
            rc = to_words(v, name, a, &r->stop_words_tokens, &r->stop_words_lens, &r->n_stop_words);
        } else if (!strcmp(name, "bad_words")) {
            rc = to_words(v, name, a, &r->bad_words_tokens, &r->bad_words_lens, &r->n_bad_words);
        } else if (!strcmp(name, "stop_strings")) {
            PyObject *seq = PySequence_Fast(v, "stop_strings: expected a list of str");
            if (!seq)
                return -1;
            Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
            const char **ss = ifl_py_arena_alloc(a, sizeof(char *) * (size_t)n);
            rc = ss ? 0 : (PyErr_NoMemory(), -1);
            for (Py_ssize_t i = 0; !rc && i < n; i++) {
                char nm[40];
                snprintf(nm, sizeof(nm), "stop_strings[%zd]", i);
                rc = ifl_py_to_cstr(PySequence_Fast_GET_ITEM(seq, i), nm, a, &ss[i]);
                if (!rc && !ss[i]) {
                    PyErr_Format(PyExc_TypeError, "%s: expected a str", nm);
                    rc = -1;
                }
            }
            Py_DECREF(seq);
            r->stop_strings = ss;
            r->n_stop_strings = (int32_t)n;
        } else if (!strcmp(name, "logit_bias")) {
            if (!PyDict_Check(v)) {
                PyErr_SetString(PyExc_TypeError, "logit_bias: expected a dict {token id: bias}");
                return -1;
            }
            Py_ssize_t n = PyDict_Size(v), p2 = 0, i = 0;
            int32_t *ids = ifl_py_arena_alloc(a, sizeof(int32_t) * (size_t)n);
            float *vals = ifl_py_arena_alloc(a, sizeof(float) * (size_t)n);
            if (!ids || !vals) {
                PyErr_NoMemory();
                return -1;
            }
            PyObject *bk, *bv;
            static const struct ifl_py_field idf = {"logit_bias key", F_I32, 0};
            static const struct ifl_py_field vf = {"logit_bias value", F_F32, 0};
            while (!rc && PyDict_Next(v, &p2, &bk, &bv)) {
                rc = ifl_py_set_number(&ids[i], &idf, bk, "");
                if (!rc)
                    rc = ifl_py_set_number(&vals[i], &vf, bv, "");
                i++;
            }
            r->logit_bias_ids = ids;
            r->logit_bias_values = vals;
            r->n_logit_bias = (int32_t)n;
        } else if (!strcmp(name, "lora")) {
            /* [(id, scale), ...] */
            PyObject *seq = PySequence_Fast(v, "lora: expected a list of (id, scale) pairs");
            if (!seq)
                return -1;
            Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
            struct ifl_lora_ref *refs = ifl_py_arena_alloc(a, sizeof(*refs) * (size_t)n);
            rc = refs ? 0 : (PyErr_NoMemory(), -1);
            static const struct ifl_py_field idf = {"lora id", F_I32, 0};
            static const struct ifl_py_field sf = {"lora scale", F_F32, 0};
            for (Py_ssize_t i = 0; !rc && i < n; i++) {
                PyObject *pair = PySequence_Fast_GET_ITEM(seq, i);
                if (!PyTuple_Check(pair) || PyTuple_GET_SIZE(pair) != 2) {
                    PyErr_Format(PyExc_TypeError, "lora[%zd]: expected an (id, scale) pair", i);
                    rc = -1;
                    break;
                }
                rc = ifl_py_set_number(&refs[i].id, &idf, PyTuple_GET_ITEM(pair, 0), "") ||
                     ifl_py_set_number(&refs[i].scale, &sf, PyTuple_GET_ITEM(pair, 1), "");
            }
            Py_DECREF(seq);
            r->lora = refs;
            r->n_lora = (int32_t)n;
        } else if (!strcmp(name, "images")) {
            rc = to_images(v, r, a);
        } else if (!strcmp(name, "logits_post_processor")) {
            rc = ifl_py_to_cstr(v, name, a, &r->logits_post_processor);
        } else if (!strcmp(name, "guide_text")) {
            rc = ifl_py_to_cstr(v, name, a, &r->guide_text);
        } else {
            PyErr_Format(PyExc_ValueError, "request: no field %s", name);
            return -1;
        }
        if (rc)
            return -1;
    }
    return 0;
}

/* ------------------------------------------------ responses into Python */

static PyObject *floats_list(const float *x, int32_t n)
{
    PyObject *l = PyList_New(n);
    for (int32_t i = 0; l && i < n; i++) {
        PyObject *f = PyFloat_FromDouble(x[i]);
        if (!f) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, i, f);
    }
    return l;
}

PyObject *ifl_py_ints(const int32_t *x, int32_t n)
{
    PyObject *l = PyList_New(n);
    for (int32_t i = 0; l && i < n; i++) {
        PyObject *v = PyLong_FromLong(x[i]);
        if (!v) {
            Py_CLEAR(l);
            break;
        }
        PyList_SET_ITEM(l, i, v);
    }
    return l;
}

static PyObject *bytes_or_none(const float *x, int64_t n)
{
    if (!x)
        Py_RETURN_NONE;
    return PyBytes_FromStringAndSize((const char *)x, (Py_ssize_t)(n * (int64_t)sizeof(float)));
}

/* Sets d[key] = v and drops the reference; -1 when v is NULL. */
static int put(PyObject *d, const char *key, PyObject *v)
{
    if (!v)
        return -1;
    int rc = PyDict_SetItemString(d, key, v);
    Py_DECREF(v);
    return rc;
}

static PyObject *result_obj(const struct ifl_sequence_result *s, int32_t n_vocab, int32_t n_embd,
                            int32_t n_gen)
{
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    int bad = put(d, "tokens", ifl_py_ints(s->tokens, s->n_tokens)) ||
              put(d, "text", PyUnicode_DecodeUTF8(s->text ? s->text : "", s->n_text, "replace")) ||
              put(d, "cum_log_prob", PyFloat_FromDouble(s->cum_log_prob)) ||
              put(d, "score", PyFloat_FromDouble(s->score)) ||
              put(d, "finish_reason", PyLong_FromLong(s->finish_reason)) ||
              put(d, "end_token", PyLong_FromLong(s->end_token)) ||
              put(d, "n_generated", PyLong_FromLong(n_gen));
    if (!bad && s->log_probs)
        bad = put(d, "log_probs", floats_list(s->log_probs, n_gen));
    if (!bad && s->top_log_probs && s->n_top > 0) {
        PyObject *rows = PyList_New(n_gen);
        for (int32_t i = 0; rows && i < n_gen; i++) {
            PyObject *row = PyList_New(s->n_top);
            for (int32_t j = 0; row && j < s->n_top; j++) {
                const struct ifl_top_logprob *t = &s->top_log_probs[(int64_t)i * s->n_top + j];
                PyObject *pair = Py_BuildValue("(if)", t->token, (double)t->logprob);
                if (!pair) {
                    Py_CLEAR(row);
                    break;
                }
                PyList_SET_ITEM(row, j, pair);
            }
            if (!row) {
                Py_CLEAR(rows);
                break;
            }
            PyList_SET_ITEM(rows, i, row);
        }
        bad = put(d, "top_log_probs", rows);
    }
    if (!bad && s->generation_logits)
        bad = put(d, "generation_logits",
                  bytes_or_none(s->generation_logits, (int64_t)n_gen * n_vocab));
    if (!bad && s->hidden_states)
        bad = put(d, "hidden_states", bytes_or_none(s->hidden_states, (int64_t)n_gen * n_embd));
    if (bad)
        Py_CLEAR(d);
    return d;
}

/* n_input: the prompt's length when the response carries context rows */
PyObject *ifl_py_response(const struct ifl_response *r, int32_t n_input)
{
    PyObject *d = PyDict_New();
    if (!d)
        return NULL;
    const struct ifl_perf_metrics *p = &r->perf;
    int bad =
        put(d, "request_id", PyLong_FromUnsignedLongLong(r->request_id)) ||
        put(d, "client_id", PyLong_FromUnsignedLongLong(r->client_id)) ||
        put(d, "status", PyLong_FromLong(r->status)) ||
        put(d, "error",
            r->error_msg
                ? PyUnicode_DecodeUTF8(r->error_msg, (Py_ssize_t)strlen(r->error_msg), "replace")
                : Py_NewRef(Py_None)) ||
        put(d, "is_final", PyBool_FromLong(r->is_final)) ||
        put(d, "sequence_index", PyLong_FromLong(r->sequence_index)) ||
        put(d, "is_sequence_final", PyBool_FromLong(r->is_sequence_final)) ||
        put(d, "n_vocab", PyLong_FromLong(r->n_vocab)) ||
        put(d, "n_embd", PyLong_FromLong(r->n_embd)) ||
        put(d, "perf",
            Py_BuildValue(
                "{s:L,s:L,s:L,s:L,s:i,s:i,s:i,s:i,s:i}", "arrival_us", (long long)p->arrival_us,
                "first_scheduled_us", (long long)p->first_scheduled_us, "first_token_us",
                (long long)p->first_token_us, "last_token_us", (long long)p->last_token_us,
                "kv_blocks_reused", p->kv_blocks_reused, "kv_blocks_missed", p->kv_blocks_missed,
                "preemptions", p->preemptions, "draft_tokens", p->draft_tokens,
                "accepted_draft_tokens", p->accepted_draft_tokens));
    if (!bad && r->context_logits)
        bad = put(d, "context_logits",
                  bytes_or_none(r->context_logits, (int64_t)n_input * r->n_vocab));
    if (!bad && r->context_hidden_states)
        bad = put(d, "context_hidden_states",
                  bytes_or_none(r->context_hidden_states, (int64_t)n_input * r->n_embd));
    PyObject *res = bad ? NULL : PyList_New(r->n_results);
    for (int32_t i = 0; res && i < r->n_results; i++) {
        const struct ifl_sequence_result *s = &r->results[i];
        /* generated tokens this result carries: log-probs and the like
         * cover exactly these (the prompt, when included, is not) */
        int32_t n_gen = s->n_tokens;
        PyObject *o = result_obj(s, r->n_vocab, r->n_embd, n_gen);
        if (!o) {
            Py_CLEAR(res);
            break;
        }
        PyList_SET_ITEM(res, i, o);
    }
    if (bad || put(d, "results", res))
        Py_CLEAR(d);
    return d;
}

/* prompt_logprobs(context_logits: bytes, n_vocab, ids, k) -> list: entry
 * i (i >= 1) is (logprob of ids[i] under row i - 1, [(token, logprob)] of
 * the k most likely); entry 0 is None (nothing predicts the first token). */
PyObject *ifl_py_prompt_logprobs(PyObject *mod, PyObject *args)
{
    (void)mod;
    Py_buffer buf;
    int n_vocab, k;
    PyObject *ido;
    if (!PyArg_ParseTuple(args, "y*iOi", &buf, &n_vocab, &ido, &k))
        return NULL;
    struct ifl_py_arena a = {0};
    int32_t *ids = NULL, n = 0;
    PyObject *out = NULL;
    if (n_vocab < 1 || k < 0 || k > 20) {
        PyErr_SetString(PyExc_ValueError, "prompt_logprobs: n_vocab >= 1 and k in 0..20");
        goto done;
    }
    if (ifl_py_to_i32_array(ido, "ids", &a, &ids, &n))
        goto done;
    if (buf.len != (Py_ssize_t)n * n_vocab * (Py_ssize_t)sizeof(float)) {
        PyErr_SetString(PyExc_ValueError, "prompt_logprobs: logits are not [len(ids)][n_vocab]");
        goto done;
    }
    const float *L = buf.buf;
    out = PyList_New(n);
    if (n > 0 && out)
        PyList_SET_ITEM(out, 0, Py_NewRef(Py_None));
    int32_t *top = calloc((size_t)k + 1, sizeof(int32_t));
    for (int32_t i = 1; out && top && i < n; i++) {
        const float *row = L + (int64_t)(i - 1) * n_vocab;
        float mx = row[0];
        for (int32_t j = 1; j < n_vocab; j++)
            mx = row[j] > mx ? row[j] : mx;
        double sum = 0;
        for (int32_t j = 0; j < n_vocab; j++)
            sum += exp((double)row[j] - mx);
        double lse = mx + log(sum);
        int32_t t = ids[i];
        if (t < 0 || t >= n_vocab) {
            PyErr_Format(PyExc_ValueError, "ids[%d]: token %d is not in [0, %d)", i, t, n_vocab);
            Py_CLEAR(out);
            break;
        }
        /* the k largest, by selection (k <= 20) */
        int32_t nt = 0;
        for (int32_t j = 0; j < n_vocab && k > 0; j++) {
            if (nt < k || row[j] > row[top[nt - 1]]) {
                int32_t p = nt < k ? nt++ : k - 1;
                while (p > 0 && row[top[p - 1]] < row[j]) {
                    top[p] = top[p - 1];
                    p--;
                }
                top[p] = j;
            }
        }
        PyObject *alts = PyList_New(nt);
        for (int32_t j = 0; alts && j < nt; j++)
            PyList_SET_ITEM(alts, j, Py_BuildValue("(if)", top[j], (double)row[top[j]] - lse));
        PyObject *e = alts ? Py_BuildValue("(fN)", (double)row[t] - lse, alts) : NULL;
        if (!e) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, e);
    }
    if (!top && out) {
        Py_CLEAR(out);
        PyErr_NoMemory();
    }
    free(top);
done:
    ifl_py_arena_free(&a);
    PyBuffer_Release(&buf);
    return out;
}

PyObject *ifl_py_stats(const struct ifl_iteration_stats *st)
{
    const struct ifl_iteration_stats s = *st;
    return Py_BuildValue(
        "{s:L,s:d,s:L,s:i,s:i,s:L,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:L,s:L,s:d,s:L,s:L,s:L,s:i,"
        "s:i,s:i,s:i,s:L,s:L,s:L,s:L,s:L,s:i,s:i,s:L,s:d,s:L,s:L,s:d,s:L,s:L}",
        "iteration", (long long)s.iteration, "latency_ms", s.latency_ms, "timestamp_us",
        (long long)s.timestamp_us, "active_requests", s.active_requests, "queued_requests",
        s.queued_requests, "completed_requests", (long long)s.completed_requests, "paused_requests",
        s.paused_requests, "context_requests", s.context_requests, "context_tokens",
        s.context_tokens, "generation_requests", s.generation_requests, "generation_tokens",
        s.generation_tokens, "kv_blocks_max", s.kv_blocks_max, "kv_blocks_free", s.kv_blocks_free,
        "kv_blocks_used", s.kv_blocks_used, "kv_blocks_reused", (long long)s.kv_blocks_reused,
        "kv_blocks_missed", (long long)s.kv_blocks_missed, "kv_cache_hit_rate", s.kv_cache_hit_rate,
        "kv_bytes_reserved", (long long)s.kv_bytes_reserved, "kv_bytes_resident",
        (long long)s.kv_bytes_resident, "kv_bytes_used", (long long)s.kv_bytes_used,
        "kv_block_bytes", s.kv_block_bytes, "kv_blocks_peak", s.kv_blocks_peak, "kv_blocks_cached",
        s.kv_blocks_cached, "kv_pool_bound", s.kv_pool_bound, "kv_bytes_bound",
        (long long)s.kv_bytes_bound, "kv_blocks_released", (long long)s.kv_blocks_released,
        "process_rss_bytes", (long long)s.process_rss_bytes, "draft_tokens",
        (long long)s.draft_tokens, "accepted_draft_tokens", (long long)s.accepted_draft_tokens,
        "tp_ranks", s.tp_ranks, "tp_failed", s.tp_failed, "tp_collectives",
        (long long)s.tp_collectives, "tp_comm_seconds", s.tp_comm_seconds, "images_encoded",
        (long long)s.images_encoded, "image_cache_hits", (long long)s.image_cache_hits,
        "image_encode_seconds", s.image_encode_seconds, "draft_kv_bytes_reserved",
        (long long)s.draft_kv_bytes_reserved, "draft_kv_bytes_resident",
        (long long)s.draft_kv_bytes_resident);
}
