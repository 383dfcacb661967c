/*
 * inflight._core: the CPython extension under the inflight package.
 *
 * It is a thin, checked layer over include/inflight.h: an Executor type
 * whose methods convert Python values to the C structs field by field
 * (each error names the field), call the C API with the GIL released
 * wherever the call can block or take long, and convert responses back
 * into plain Python objects. Everything with policy in it (sampling
 * parameters, results, the response thread, asyncio) is Python, in
 * the package's .py files.
 *
 * Why an extension and not ctypes: the compiler checks every struct
 * against the header it is built with, so a field added to inflight.h can
 * never be silently misread; the GIL is released only around calls that
 * need it; and a response with thousands of tokens becomes Python objects
 * in one C loop instead of thousands of ctypes attribute reads.
 *
 * Lifetime: the C API forbids ifl_executor_destroy racing any other call.
 * Every method that calls into the executor without the GIL counts itself
 * in `active`; close() first shuts the executor down (which wakes a thread
 * waiting in ifl_await), then waits until `active` is 0, then destroys.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "inflight.h"

static PyObject *QueueFullError;

/* ---------------------------------------------------------------- errors */

/* Raises the Python exception for a C status with the C message. */
static PyObject *raise_status(int rc, const char *msg)
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
        PyErr_SetString(QueueFullError, m);
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

enum ftype { F_I32, F_I64, F_U64, F_F32, F_F64, F_BOOL };

struct field {
    const char *name;
    enum ftype type;
    size_t off;
};

/* Reads one number into the struct at base + f->off, range-checked for
 * its C type; errors say "<prefix><name>: ...". */
static int set_number(void *base, const struct field *f, PyObject *v, const char *prefix)
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

static const struct field *find_field(const struct field *t, const char *name)
{
    for (; t->name; t++)
        if (!strcmp(t->name, name))
            return t;
    return NULL;
}

/* Memory a converted request borrows until ifl_enqueue has copied it. */
struct arena {
    void **p;
    size_t n, cap;
};

static void *arena_alloc(struct arena *a, size_t bytes)
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

static void arena_free(struct arena *a)
{
    for (size_t i = 0; i < a->n; i++)
        free(a->p[i]);
    free(a->p);
    a->p = NULL;
    a->n = a->cap = 0;
}

/* A sequence of ints as int32_t (borrowed from the arena). */
static int to_i32_array(PyObject *v, const char *name, struct arena *a, int32_t **out,
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
    int32_t *arr = arena_alloc(a, sizeof(int32_t) * (size_t)n);
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
static int to_words(PyObject *v, const char *name, struct arena *a, const int32_t **tok,
                    const int32_t **lens, int32_t *n)
{
    PyObject *seq = PySequence_Fast(v, "");
    if (!seq) {
        PyErr_Clear();
        PyErr_Format(PyExc_TypeError, "%s: expected a list of token-id lists", name);
        return -1;
    }
    Py_ssize_t nw = PySequence_Fast_GET_SIZE(seq);
    int32_t *ls = arena_alloc(a, sizeof(int32_t) * (size_t)nw);
    int32_t **parts = arena_alloc(a, sizeof(int32_t *) * (size_t)nw);
    if (!ls || !parts || nw > INT32_MAX) {
        Py_DECREF(seq);
        PyErr_NoMemory();
        return -1;
    }
    int64_t total = 0;
    for (Py_ssize_t i = 0; i < nw; i++) {
        char nm[64];
        snprintf(nm, sizeof(nm), "%s[%zd]", name, i);
        if (to_i32_array(PySequence_Fast_GET_ITEM(seq, i), nm, a, &parts[i], &ls[i])) {
            Py_DECREF(seq);
            return -1;
        }
        total += ls[i];
    }
    Py_DECREF(seq);
    int32_t *all = arena_alloc(a, sizeof(int32_t) * (size_t)total);
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
static int to_cstr(PyObject *v, const char *name, struct arena *a, const char **out)
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
    char *c = arena_alloc(a, (size_t)len + 1);
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
static int fill_struct(void *base, const struct field *t, PyObject *d, const char *prefix)
{
    if (!PyDict_Check(d)) {
        PyErr_Format(PyExc_TypeError, "%s: expected a dict", prefix);
        return -1;
    }
    PyObject *k, *v;
    Py_ssize_t pos = 0;
    while (PyDict_Next(d, &pos, &k, &v)) {
        const char *name = PyUnicode_Check(k) ? PyUnicode_AsUTF8(k) : NULL;
        const struct field *f = name ? find_field(t, name) : NULL;
        if (!f) {
            PyErr_Format(PyExc_ValueError, "%s%S: no such field", prefix, k);
            return -1;
        }
        if (set_number(base, f, v, prefix))
            return -1;
    }
    return 0;
}

#define FLD(st, name, type)                                                                        \
    {                                                                                              \
#name, type, offsetof(st, name)                                                            \
    }

static const struct field sampling_fields[] = {
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

static const struct field output_fields[] = {
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

static const struct field rspec_fields[] = {
    FLD(struct ifl_request_speculative, disable, F_I32),
    FLD(struct ifl_request_speculative, n_max, F_I32),
    FLD(struct ifl_request_speculative, n_min, F_I32),
    FLD(struct ifl_request_speculative, p_min, F_F32),
    {NULL, F_I32, 0},
};

static const struct field request_fields[] = {
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

static const struct field spec_fields[] = {
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

static const struct field config_fields[] = {
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
    {NULL, F_I32, 0},
};

/* One request dict (inflight/executor.py builds it) into the C struct. */
static int to_request(PyObject *d, struct ifl_request *r, struct arena *a)
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
        const struct field *f = find_field(request_fields, name);
        int rc = 0;
        if (f) {
            rc = set_number(r, f, v, "");
        } else if (!strcmp(name, "input_ids")) {
            int32_t *ids;
            rc = to_i32_array(v, name, a, &ids, &r->n_input);
            r->input_ids = ids;
        } else if (!strcmp(name, "sampling")) {
            rc = fill_struct(&r->sampling, sampling_fields, v, "sampling.");
        } else if (!strcmp(name, "output")) {
            rc = fill_struct(&r->output, output_fields, v, "output.");
        } else if (!strcmp(name, "speculative")) {
            rc = fill_struct(&r->speculative, rspec_fields, v, "speculative.");
        } else if (!strcmp(name, "draft_tokens")) {
            int32_t *ids;
            rc = to_i32_array(v, "speculative.draft_tokens", a, &ids,
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
            const char **ss = arena_alloc(a, sizeof(char *) * (size_t)n);
            rc = ss ? 0 : (PyErr_NoMemory(), -1);
            for (Py_ssize_t i = 0; !rc && i < n; i++) {
                char nm[40];
                snprintf(nm, sizeof(nm), "stop_strings[%zd]", i);
                rc = to_cstr(PySequence_Fast_GET_ITEM(seq, i), nm, a, &ss[i]);
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
            int32_t *ids = arena_alloc(a, sizeof(int32_t) * (size_t)n);
            float *vals = arena_alloc(a, sizeof(float) * (size_t)n);
            if (!ids || !vals) {
                PyErr_NoMemory();
                return -1;
            }
            PyObject *bk, *bv;
            static const struct field idf = {"logit_bias key", F_I32, 0};
            static const struct field vf = {"logit_bias value", F_F32, 0};
            while (!rc && PyDict_Next(v, &p2, &bk, &bv)) {
                rc = set_number(&ids[i], &idf, bk, "");
                if (!rc)
                    rc = set_number(&vals[i], &vf, bv, "");
                i++;
            }
            r->logit_bias_ids = ids;
            r->logit_bias_values = vals;
            r->n_logit_bias = (int32_t)n;
        } else if (!strcmp(name, "logits_post_processor")) {
            rc = to_cstr(v, name, a, &r->logits_post_processor);
        } else if (!strcmp(name, "guide_text")) {
            rc = to_cstr(v, name, a, &r->guide_text);
        } else {
            PyErr_Format(PyExc_ValueError, "request: no field %s", name);
            return -1;
        }
        if (rc)
            return -1;
    }
    return 0;
}

/* -------------------------------------------------------------- executor */

struct proc_slot {
    PyObject *fn; /* the Python callable (owned) */
};

typedef struct {
    PyObject_HEAD ifl_executor *ex;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int active;  /* calls inside the C API without the GIL */
    int closing; /* close() began: no new call may start */
    int32_t n_procs;
    struct proc_slot *procs;
    PyObject *progress; /* load-progress callable during create, else NULL */
    int32_t n_vocab;
    int32_t n_embd;
    /* prompts' lengths of requests whose first response brings context
     * rows (it does not say how many), until that response is taken */
    struct ctx_len {
        ifl_id id;
        int32_t n_input;
    } * ctx;
    int32_t n_ctxlen, cap_ctxlen;
    pthread_mutex_t ctx_mu; /* ctx, and enqueue while it records into it */
} ExecutorObject;

static int enter(ExecutorObject *self)
{
    pthread_mutex_lock(&self->mu);
    int ok = self->ex && !self->closing;
    if (ok)
        self->active++;
    pthread_mutex_unlock(&self->mu);
    if (!ok)
        PyErr_SetString(PyExc_RuntimeError, "the executor is shut down");
    return ok ? 0 : -1;
}

static void leave(ExecutorObject *self)
{
    pthread_mutex_lock(&self->mu);
    if (--self->active == 0)
        pthread_cond_broadcast(&self->cv);
    pthread_mutex_unlock(&self->mu);
}

/* Runs a Python logits processor on the engine thread: the row is lent as
 * a writable float32 memoryview for the duration of the call. An
 * exception is reported as unraisable and the row is left as it was. */
static void py_logits_proc(void *user, ifl_id id, float *logits, int32_t n_vocab,
                           const int32_t *tokens, int32_t n_tokens, uint64_t client_id)
{
    struct proc_slot *s = user;
    PyGILState_STATE g = PyGILState_Ensure();
    float *copy = malloc(sizeof(float) * (size_t)n_vocab);
    PyObject *mv = NULL, *toks = NULL, *res = NULL;
    if (!copy)
        goto out;
    memcpy(copy, logits, sizeof(float) * (size_t)n_vocab);
    PyObject *raw = PyMemoryView_FromMemory((char *)copy, (Py_ssize_t)n_vocab * 4, PyBUF_WRITE);
    if (raw) {
        mv = PyObject_CallMethod(raw, "cast", "s", "f");
        Py_DECREF(raw);
    }
    toks = PyList_New(n_tokens);
    if (!mv || !toks)
        goto out;
    for (int32_t i = 0; i < n_tokens; i++) {
        PyObject *t = PyLong_FromLong(tokens[i]);
        if (!t)
            goto out;
        PyList_SET_ITEM(toks, i, t);
    }
    res = PyObject_CallFunction(s->fn, "KOOK", (unsigned long long)id, mv, toks,
                                (unsigned long long)client_id);
    if (res)
        memcpy(logits, copy, sizeof(float) * (size_t)n_vocab);
out:
    if (PyErr_Occurred())
        PyErr_WriteUnraisable(s->fn);
    if (mv) {
        /* a view the callable kept must not reach freed memory */
        PyObject *rr = PyObject_CallMethod(mv, "release", NULL);
        if (!rr)
            PyErr_WriteUnraisable(s->fn);
        Py_XDECREF(rr);
        if (!rr) {
            /* still exported (e.g. a numpy view): leak the copy rather than free it */
            copy = NULL;
        }
    }
    Py_XDECREF(mv);
    Py_XDECREF(toks);
    Py_XDECREF(res);
    free(copy);
    PyGILState_Release(g);
}

static void py_progress(void *user, const struct ifl_load_progress *p)
{
    ExecutorObject *self = user;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *r =
        PyObject_CallFunction(self->progress, "LLss", (long long)p->done, (long long)p->total,
                              p->stage ? p->stage : "", p->notice ? p->notice : NULL);
    if (!r)
        PyErr_WriteUnraisable(self->progress);
    Py_XDECREF(r);
    PyGILState_Release(g);
}

static void exec_free_procs(ExecutorObject *self)
{
    for (int32_t i = 0; i < self->n_procs; i++)
        Py_XDECREF(self->procs[i].fn);
    free(self->procs);
    self->procs = NULL;
    self->n_procs = 0;
}

static int Executor_init(ExecutorObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"model", "config", NULL};
    PyObject *model, *cfgd = NULL;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O&|O!", kwlist, PyUnicode_FSConverter, &model,
                                     &PyDict_Type, &cfgd))
        return -1;
    if (self->ex) {
        Py_DECREF(model);
        PyErr_SetString(PyExc_RuntimeError, "Executor: already initialised");
        return -1;
    }
    struct ifl_executor_config c;
    ifl_executor_config_default(&c);
    struct arena a = {0};
    struct ifl_logits_processor *lp = NULL;
    int ok = 0;
    if (cfgd) {
        PyObject *k, *v;
        Py_ssize_t pos = 0;
        while (PyDict_Next(cfgd, &pos, &k, &v)) {
            const char *name = PyUnicode_Check(k) ? PyUnicode_AsUTF8(k) : NULL;
            if (!name) {
                PyErr_SetString(PyExc_TypeError, "config: keys must be str");
                goto done;
            }
            const struct field *f = find_field(config_fields, name);
            if (f) {
                if (set_number(&c, f, v, ""))
                    goto done;
            } else if (!strcmp(name, "repack_cache_dir")) {
                if (to_cstr(v, name, &a, &c.repack_cache_dir))
                    goto done;
            } else if (!strcmp(name, "speculative")) {
                PyObject *dm = PyDict_Check(v) ? PyDict_GetItemString(v, "draft_model") : NULL;
                PyObject *rest = PyDict_Check(v) ? PyDict_Copy(v) : NULL;
                if (!rest) {
                    PyErr_SetString(PyExc_TypeError, "speculative: expected a dict");
                    goto done;
                }
                PyDict_DelItemString(rest, "draft_model");
                PyErr_Clear();
                int rc = fill_struct(&c.speculative, spec_fields, rest, "speculative.");
                Py_DECREF(rest);
                if (rc ||
                    (dm && to_cstr(dm, "speculative.draft_model", &a, &c.speculative.draft_model)))
                    goto done;
            } else if (!strcmp(name, "logits_processors")) {
                if (!PyDict_Check(v)) {
                    PyErr_SetString(PyExc_TypeError,
                                    "logits_processors: expected a dict {name: callable}");
                    goto done;
                }
                Py_ssize_t n = PyDict_Size(v), p2 = 0;
                exec_free_procs(self);
                self->procs = calloc((size_t)n + 1, sizeof(*self->procs));
                lp = calloc((size_t)n + 1, sizeof(*lp));
                if (!self->procs || !lp) {
                    PyErr_NoMemory();
                    goto done;
                }
                PyObject *pk, *pv;
                while (PyDict_Next(v, &p2, &pk, &pv)) {
                    int32_t i = self->n_procs;
                    if (!PyCallable_Check(pv)) {
                        PyErr_Format(PyExc_TypeError, "logits_processors[%R]: not callable", pk);
                        goto done;
                    }
                    if (to_cstr(pk, "logits_processors key", &a, &lp[i].name) || !lp[i].name)
                        goto done;
                    Py_INCREF(pv);
                    self->procs[i].fn = pv;
                    lp[i].fn = py_logits_proc;
                    lp[i].user = &self->procs[i];
                    self->n_procs++;
                }
                c.logits_processors = lp;
                c.n_logits_processors = self->n_procs;
            } else if (!strcmp(name, "load_progress")) {
                if (v != Py_None) {
                    if (!PyCallable_Check(v)) {
                        PyErr_SetString(PyExc_TypeError, "load_progress: not callable");
                        goto done;
                    }
                    self->progress = v;
                    c.load_progress = py_progress;
                    c.load_progress_user = self;
                }
            } else {
                PyErr_Format(PyExc_ValueError, "%s: no such executor option", name);
                goto done;
            }
        }
    }
    {
        char err[512] = "";
        ifl_executor *ex = NULL;
        int rc;
        Py_BEGIN_ALLOW_THREADS rc = ifl_executor_create(&ex, PyBytes_AS_STRING(model), &c, err);
        Py_END_ALLOW_THREADS if (rc)
        {
            raise_status(rc, err);
            goto done;
        }
        struct ifl_model_info mi;
        ifl_executor_model_info(ex, &mi);
        self->n_vocab = mi.n_vocab;
        self->n_embd = mi.n_embd;
        self->ex = ex;
        ok = 1;
    }
done:
    self->progress = NULL;
    if (!ok)
        exec_free_procs(self);
    free(lp);
    arena_free(&a);
    Py_DECREF(model);
    return ok ? 0 : -1;
}

static PyObject *Executor_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
    (void)args;
    (void)kw;
    ExecutorObject *self = (ExecutorObject *)type->tp_alloc(type, 0);
    if (!self)
        return NULL;
    pthread_mutex_init(&self->mu, NULL);
    pthread_mutex_init(&self->ctx_mu, NULL);
    pthread_cond_init(&self->cv, NULL);
    return (PyObject *)self;
}

/* Shuts down, waits out every call in flight, destroys. Idempotent. */
static void exec_close(ExecutorObject *self, int cancel)
{
    pthread_mutex_lock(&self->mu);
    ifl_executor *ex = self->ex;
    int first = ex && !self->closing;
    self->closing = 1;
    pthread_mutex_unlock(&self->mu);
    if (!first)
        return;
    Py_BEGIN_ALLOW_THREADS ifl_executor_shutdown(ex, cancel);
    pthread_mutex_lock(&self->mu);
    while (self->active > 0)
        pthread_cond_wait(&self->cv, &self->mu);
    self->ex = NULL;
    pthread_mutex_unlock(&self->mu);
    ifl_executor_destroy(ex, cancel);
    Py_END_ALLOW_THREADS
}

static void Executor_dealloc(ExecutorObject *self)
{
    exec_close(self, 1);
    exec_free_procs(self);
    pthread_mutex_destroy(&self->mu);
    pthread_mutex_destroy(&self->ctx_mu);
    pthread_cond_destroy(&self->cv);
    free(self->ctx);
    Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *Executor_enqueue(ExecutorObject *self, PyObject *arg)
{
    PyObject *seq = PySequence_Fast(arg, "enqueue: expected a list of request dicts");
    if (!seq)
        return NULL;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    struct arena a = {0};
    struct ifl_request *rs = calloc((size_t)n + 1, sizeof(*rs));
    ifl_id *ids = calloc((size_t)n + 1, sizeof(*ids));
    PyObject *out = NULL;
    if (!rs || !ids) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (to_request(PySequence_Fast_GET_ITEM(seq, i), &rs[i], &a))
            goto done;
    int32_t n_with_ctx = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        n_with_ctx += rs[i].output.return_context_logits != 0;
    if (n_with_ctx && self->n_ctxlen + n_with_ctx > self->cap_ctxlen) {
        int32_t cap = (self->n_ctxlen + n_with_ctx) * 2;
        void *np = realloc(self->ctx, sizeof(*self->ctx) * (size_t)cap);
        if (!np) {
            PyErr_NoMemory();
            goto done;
        }
        self->ctx = np;
        self->cap_ctxlen = cap;
    }
    if (enter(self))
        goto done;
    char err[512] = "";
    int rc;
    Py_BEGIN_ALLOW_THREADS;
    /* the response thread looks a context response's length up under
     * ctx_mu: it is recorded before anyone can look */
    if (n_with_ctx)
        pthread_mutex_lock(&self->ctx_mu);
    rc = ifl_enqueue_many(self->ex, rs, (int32_t)n, ids, err);
    if (n_with_ctx) {
        for (Py_ssize_t i = 0; !rc && i < n; i++)
            if (rs[i].output.return_context_logits)
                self->ctx[self->n_ctxlen++] = (struct ctx_len){ids[i], rs[i].n_input};
        pthread_mutex_unlock(&self->ctx_mu);
    }
    leave(self);
    Py_END_ALLOW_THREADS;
    if (rc) {
        raise_status(rc, err);
        goto done;
    }
    out = PyList_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        PyObject *x = PyLong_FromUnsignedLongLong(ids[i]);
        if (!x) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, x);
    }
done:
    arena_free(&a);
    free(rs);
    free(ids);
    Py_DECREF(seq);
    return out;
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

static PyObject *ints_list(const int32_t *x, int32_t n)
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
    int bad = put(d, "tokens", ints_list(s->tokens, s->n_tokens)) ||
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
static PyObject *response_obj(const struct ifl_response *r, int32_t n_input)
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

/* The prompt length recorded for a response with context rows; forgets
 * it (that response comes once). */
static int32_t take_ctx_len(ExecutorObject *self, ifl_id id)
{
    int32_t n = 0;
    pthread_mutex_lock(&self->ctx_mu);
    for (int32_t i = 0; i < self->n_ctxlen; i++)
        if (self->ctx[i].id == id) {
            n = self->ctx[i].n_input;
            self->ctx[i] = self->ctx[--self->n_ctxlen];
            break;
        }
    pthread_mutex_unlock(&self->ctx_mu);
    return n;
}

/* await_responses(max=64, timeout_ms=-1, ids=None): the next responses
 * (a list), [] when the wait timed out, None when nothing more can come
 * (the executor shut down, or every id given is over). Waits with the GIL
 * released. */
static PyObject *Executor_await(ExecutorObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"max", "timeout_ms", "ids", NULL};
    int max = 64;
    long long timeout_ms = -1;
    PyObject *idso = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "|iLO", kwlist, &max, &timeout_ms, &idso))
        return NULL;
    if (max < 1 || max > 4096)
        return PyErr_Format(PyExc_ValueError, "max: %d (1..4096)", max);
    ifl_id *ids = NULL;
    int32_t n_ids = 0;
    if (idso != Py_None) {
        PyObject *seq = PySequence_Fast(idso, "ids: expected a sequence of request ids");
        if (!seq)
            return NULL;
        n_ids = (int32_t)PySequence_Fast_GET_SIZE(seq);
        ids = calloc((size_t)n_ids + 1, sizeof(*ids));
        for (int32_t i = 0; ids && i < n_ids; i++)
            ids[i] = PyLong_AsUnsignedLongLong(PySequence_Fast_GET_ITEM(seq, i));
        Py_DECREF(seq);
        if (!ids)
            return PyErr_NoMemory();
        if (PyErr_Occurred()) {
            free(ids);
            return NULL;
        }
        if (n_ids == 0) {
            free(ids);
            return PyErr_Format(PyExc_ValueError, "ids: empty (None waits for any request)");
        }
    }
    struct ifl_response **out = calloc((size_t)max, sizeof(*out));
    if (!out) {
        free(ids);
        return PyErr_NoMemory();
    }
    if (enter(self)) {
        /* closed: nothing more can come */
        PyErr_Clear();
        free(ids);
        free(out);
        Py_RETURN_NONE;
    }
    int32_t got = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS;
    rc = ifl_await(self->ex, ids, n_ids, timeout_ms, out, max, &got);
    Py_END_ALLOW_THREADS;
    PyObject *list = NULL;
    if (rc == IFL_ESTATE && got == 0) {
        list = Py_NewRef(Py_None);
    } else if (rc && rc != IFL_ETIMEDOUT) {
        raise_status(rc, NULL);
    } else {
        list = PyList_New(got);
        for (int32_t i = 0; list && i < got; i++) {
            int32_t n_input = out[i]->context_logits || out[i]->context_hidden_states
                                  ? take_ctx_len(self, out[i]->request_id)
                                  : 0;
            PyObject *o = response_obj(out[i], n_input);
            if (!o) {
                Py_CLEAR(list);
                break;
            }
            PyList_SET_ITEM(list, i, o);
        }
    }
    for (int32_t i = 0; i < got; i++)
        ifl_response_free(out[i]);
    leave(self);
    free(out);
    free(ids);
    return list;
}

static PyObject *Executor_cancel(ExecutorObject *self, PyObject *arg)
{
    unsigned long long id = PyLong_AsUnsignedLongLong(arg);
    if (id == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    if (enter(self))
        return NULL;
    int rc = ifl_cancel(self->ex, id);
    leave(self);
    if (rc && rc != IFL_ENOTFOUND)
        return raise_status(rc, NULL);
    return PyBool_FromLong(rc == 0);
}

static PyObject *Executor_tokenize(ExecutorObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"text", "add_special", "parse_special", NULL};
    const char *text;
    Py_ssize_t len;
    int add_special = 1, parse_special = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s#|pp", kwlist, &text, &len, &add_special,
                                     &parse_special))
        return NULL;
    if (enter(self))
        return NULL;
    /* a token stands for at least one byte, or is a special added once */
    int64_t cap = (int64_t)len + 8, n = 0;
    int32_t *ids = malloc(sizeof(int32_t) * (size_t)cap);
    int rc = IFL_ENOMEM;
    if (ids) {
        Py_BEGIN_ALLOW_THREADS;
        rc = ifl_executor_tokenize(self->ex, text, len, add_special, parse_special, ids, cap, &n);
        if (rc == IFL_EFULL) {
            int32_t *more = realloc(ids, sizeof(int32_t) * (size_t)n);
            if (more) {
                ids = more;
                cap = n;
                rc = ifl_executor_tokenize(self->ex, text, len, add_special, parse_special, ids,
                                           cap, &n);
            } else {
                rc = IFL_ENOMEM;
            }
        }
        Py_END_ALLOW_THREADS;
    }
    leave(self);
    PyObject *out = rc ? raise_status(rc, NULL) : ints_list(ids, (int32_t)n);
    free(ids);
    return out;
}

static PyObject *Executor_detokenize(ExecutorObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"ids", "show_special", NULL};
    PyObject *ido;
    int show = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "O|p", kwlist, &ido, &show))
        return NULL;
    struct arena a = {0};
    int32_t *ids, n;
    if (to_i32_array(ido, "ids", &a, &ids, &n)) {
        arena_free(&a);
        return NULL;
    }
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= self->n_vocab) {
            arena_free(&a);
            return PyErr_Format(PyExc_ValueError, "ids[%d]: token %d is not in [0, %d)", i, ids[i],
                                self->n_vocab);
        }
    if (enter(self)) {
        arena_free(&a);
        return NULL;
    }
    int64_t len = 0;
    char *buf = NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS;
    rc = ifl_executor_detokenize(self->ex, ids, n, show, NULL, 0, &len);
    if (rc == 0 || rc == IFL_EFULL) {
        buf = malloc((size_t)len + 1);
        rc = buf ? ifl_executor_detokenize(self->ex, ids, n, show, buf, len + 1, &len) : IFL_ENOMEM;
    }
    Py_END_ALLOW_THREADS;
    leave(self);
    arena_free(&a);
    PyObject *out = rc ? raise_status(rc, NULL) : PyUnicode_DecodeUTF8(buf, len, "replace");
    free(buf);
    return out;
}

static PyObject *Executor_model_info(ExecutorObject *self, PyObject *noarg)
{
    (void)noarg;
    if (enter(self))
        return NULL;
    struct ifl_model_info m;
    int rc = ifl_executor_model_info(self->ex, &m);
    leave(self);
    if (rc)
        return raise_status(rc, NULL);
    return Py_BuildValue("{s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:O,s:i,s:L}", "architecture",
                         m.architecture, "n_vocab", m.n_vocab, "n_ctx", m.n_ctx, "n_ctx_train",
                         m.n_ctx_train, "n_embd", m.n_embd, "n_layer", m.n_layer, "bos_id",
                         m.bos_id, "eos_id", m.eos_id, "add_bos", m.add_bos ? Py_True : Py_False,
                         "max_token_bytes", m.max_token_bytes, "kv_cache_tokens",
                         (long long)m.kv_cache_tokens);
}

static PyObject *Executor_model_meta(ExecutorObject *self, PyObject *arg)
{
    const char *key = PyUnicode_Check(arg) ? PyUnicode_AsUTF8(arg) : NULL;
    if (!key)
        return PyErr_Format(PyExc_TypeError, "key: expected a str");
    if (enter(self))
        return NULL;
    int64_t len = 0;
    int rc = ifl_executor_model_meta(self->ex, key, NULL, 0, &len);
    char *buf = NULL;
    if (rc == 0 || rc == IFL_EFULL) {
        buf = malloc((size_t)len + 1);
        rc = buf ? ifl_executor_model_meta(self->ex, key, buf, len + 1, &len) : IFL_ENOMEM;
    }
    leave(self);
    PyObject *out;
    if (rc == IFL_ENOTFOUND || rc == IFL_EINVAL)
        out = Py_NewRef(Py_None);
    else if (rc)
        out = raise_status(rc, NULL);
    else
        out = PyUnicode_DecodeUTF8(buf, len, "replace");
    free(buf);
    return out;
}

static PyObject *Executor_iteration_stats(ExecutorObject *self, PyObject *noarg)
{
    (void)noarg;
    if (enter(self))
        return NULL;
    struct ifl_iteration_stats s;
    int rc;
    Py_BEGIN_ALLOW_THREADS;
    rc = ifl_get_iteration_stats(self->ex, &s);
    Py_END_ALLOW_THREADS;
    leave(self);
    if (rc)
        return raise_status(rc, NULL);
    return Py_BuildValue(
        "{s:L,s:d,s:L,s:i,s:i,s:L,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:L,s:L,s:d,s:L,s:L,s:L,s:i,"
        "s:i,s:i,s:i,s:L,s:L,s:L,s:L,s:L}",
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
        (long long)s.draft_tokens, "accepted_draft_tokens", (long long)s.accepted_draft_tokens);
}

static PyObject *Executor_request_stats(ExecutorObject *self, PyObject *arg)
{
    unsigned long long id = PyLong_AsUnsignedLongLong(arg);
    if (id == (unsigned long long)-1 && PyErr_Occurred())
        return NULL;
    if (enter(self))
        return NULL;
    struct ifl_request_stats s;
    int rc = ifl_get_request_stats(self->ex, id, &s);
    leave(self);
    if (rc == IFL_ENOTFOUND)
        Py_RETURN_NONE;
    if (rc)
        return raise_status(rc, NULL);
    return Py_BuildValue("{s:K,s:i,s:i,s:i,s:O}", "request_id", (unsigned long long)s.request_id,
                         "stage", s.stage, "context_prefill_position", s.context_prefill_position,
                         "n_generated", s.n_generated, "paused", s.paused ? Py_True : Py_False);
}

/* wait_idle(timeout_ms=-1) -> True when idle, False on timeout. */
static PyObject *Executor_wait_idle(ExecutorObject *self, PyObject *args)
{
    long long timeout_ms = -1;
    if (!PyArg_ParseTuple(args, "|L", &timeout_ms))
        return NULL;
    if (enter(self))
        return NULL;
    int rc;
    Py_BEGIN_ALLOW_THREADS;
    rc = ifl_executor_wait_idle(self->ex, timeout_ms);
    Py_END_ALLOW_THREADS;
    leave(self);
    if (rc == IFL_ETIMEDOUT)
        Py_RETURN_FALSE;
    if (rc)
        return raise_status(rc, "the executor shut down while waiting for idle");
    Py_RETURN_TRUE;
}

static PyObject *Executor_num_ready(ExecutorObject *self, PyObject *args)
{
    unsigned long long id = 0;
    if (!PyArg_ParseTuple(args, "|K", &id))
        return NULL;
    if (enter(self))
        return NULL;
    int32_t n = ifl_num_responses_ready(self->ex, id);
    leave(self);
    return PyLong_FromLong(n);
}

/* shutdown(cancel=True): stop the engine (ifl_executor_shutdown); a thread
 * in await_responses then drains what is queued and gets None. */
static PyObject *Executor_shutdown(ExecutorObject *self, PyObject *args)
{
    int cancel = 1;
    if (!PyArg_ParseTuple(args, "|p", &cancel))
        return NULL;
    if (enter(self)) {
        PyErr_Clear();
        Py_RETURN_NONE;
    }
    Py_BEGIN_ALLOW_THREADS;
    ifl_executor_shutdown(self->ex, cancel);
    Py_END_ALLOW_THREADS;
    leave(self);
    Py_RETURN_NONE;
}

/* close(cancel=True): shutdown, wait for every call in flight, free. */
static PyObject *Executor_close(ExecutorObject *self, PyObject *args)
{
    int cancel = 1;
    if (!PyArg_ParseTuple(args, "|p", &cancel))
        return NULL;
    exec_close(self, cancel);
    Py_RETURN_NONE;
}

static PyObject *Executor_get_closed(ExecutorObject *self, void *closure)
{
    (void)closure;
    pthread_mutex_lock(&self->mu);
    int c = self->closing || !self->ex;
    pthread_mutex_unlock(&self->mu);
    return PyBool_FromLong(c);
}

static PyMethodDef Executor_methods[] = {
    {"enqueue", (PyCFunction)Executor_enqueue, METH_O,
     "enqueue(requests) -> ids: queue every request dict, or none (ValueError names the field)"},
    {"await_responses", (PyCFunction)(void (*)(void))Executor_await, METH_VARARGS | METH_KEYWORDS,
     "await_responses(max=64, timeout_ms=-1, ids=None) -> list, [] on timeout, None when over"},
    {"cancel", (PyCFunction)Executor_cancel, METH_O,
     "cancel(id) -> True if it will end as cancelled"},
    {"tokenize", (PyCFunction)(void (*)(void))Executor_tokenize, METH_VARARGS | METH_KEYWORDS,
     "tokenize(text, add_special=True, parse_special=False) -> ids"},
    {"detokenize", (PyCFunction)(void (*)(void))Executor_detokenize, METH_VARARGS | METH_KEYWORDS,
     "detokenize(ids, show_special=False) -> str"},
    {"model_info", (PyCFunction)Executor_model_info, METH_NOARGS, "the model and context"},
    {"model_meta", (PyCFunction)Executor_model_meta, METH_O,
     "model_meta(key) -> the GGUF string value, or None"},
    {"iteration_stats", (PyCFunction)Executor_iteration_stats, METH_NOARGS,
     "the engine's figures as of its last step"},
    {"request_stats", (PyCFunction)Executor_request_stats, METH_O,
     "request_stats(id) -> dict, or None once its final response was taken"},
    {"wait_idle", (PyCFunction)Executor_wait_idle, METH_VARARGS,
     "wait_idle(timeout_ms=-1) -> True when idle, False on timeout"},
    {"num_responses_ready", (PyCFunction)Executor_num_ready, METH_VARARGS,
     "num_responses_ready(id=0)"},
    {"shutdown", (PyCFunction)Executor_shutdown, METH_VARARGS,
     "shutdown(cancel=True): stop the engine, wake waiters"},
    {"close", (PyCFunction)Executor_close, METH_VARARGS, "close(cancel=True): shut down and free"},
    {NULL, NULL, 0, NULL},
};

static PyGetSetDef Executor_getset[] = {
    {"closed", (getter)Executor_get_closed, NULL, "close() was called", NULL},
    {NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject ExecutorType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "inflight._core.Executor",
    .tp_basicsize = sizeof(ExecutorObject),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Executor(model, config=None): the C executor (include/inflight.h)",
    .tp_new = Executor_new,
    .tp_init = (initproc)Executor_init,
    .tp_dealloc = (destructor)Executor_dealloc,
    .tp_methods = Executor_methods,
    .tp_getset = Executor_getset,
};

/* prompt_logprobs(context_logits: bytes, n_vocab, ids, k) -> list: entry
 * i (i >= 1) is (logprob of ids[i] under row i - 1, [(token, logprob)] of
 * the k most likely); entry 0 is None (nothing predicts the first token). */
static PyObject *core_prompt_logprobs(PyObject *mod, PyObject *args)
{
    (void)mod;
    Py_buffer buf;
    int n_vocab, k;
    PyObject *ido;
    if (!PyArg_ParseTuple(args, "y*iOi", &buf, &n_vocab, &ido, &k))
        return NULL;
    struct arena a = {0};
    int32_t *ids = NULL, n = 0;
    PyObject *out = NULL;
    if (n_vocab < 1 || k < 0 || k > 20) {
        PyErr_SetString(PyExc_ValueError, "prompt_logprobs: n_vocab >= 1 and k in 0..20");
        goto done;
    }
    if (to_i32_array(ido, "ids", &a, &ids, &n))
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
    arena_free(&a);
    PyBuffer_Release(&buf);
    return out;
}

static PyObject *core_version(PyObject *mod, PyObject *noarg)
{
    (void)mod;
    (void)noarg;
    return PyUnicode_FromString(ifl_version());
}

static PyMethodDef core_methods[] = {
    {"version", core_version, METH_NOARGS, "the C library's version"},
    {"prompt_logprobs", core_prompt_logprobs, METH_VARARGS,
     "prompt_logprobs(context_logits, n_vocab, ids, k) -> per-position log-probs"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT,
    "inflight._core",
    "The C executor under the inflight package.",
    -1,
    core_methods,
    NULL,
    NULL,
    NULL,
    NULL,
};

PyMODINIT_FUNC PyInit__core(void);
PyMODINIT_FUNC PyInit__core(void)
{
    if (PyType_Ready(&ExecutorType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&core_module);
    if (!m)
        return NULL;
    QueueFullError = PyErr_NewException("inflight._core.QueueFullError", PyExc_RuntimeError, NULL);
    if (!QueueFullError || PyModule_AddObjectRef(m, "QueueFullError", QueueFullError) < 0 ||
        PyModule_AddObjectRef(m, "Executor", (PyObject *)&ExecutorType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    struct {
        const char *name;
        long v;
    } consts[] = {
        {"FINISH_NOT_FINISHED", IFL_FINISH_NOT_FINISHED},
        {"FINISH_END_ID", IFL_FINISH_END_ID},
        {"FINISH_STOP_WORDS", IFL_FINISH_STOP_WORDS},
        {"FINISH_LENGTH", IFL_FINISH_LENGTH},
        {"FINISH_TIMED_OUT", IFL_FINISH_TIMED_OUT},
        {"FINISH_CANCELLED", IFL_FINISH_CANCELLED},
        {"GUIDE_NONE", IFL_GUIDE_NONE},
        {"GUIDE_JSON", IFL_GUIDE_JSON},
        {"GUIDE_JSON_SCHEMA", IFL_GUIDE_JSON_SCHEMA},
        {"GUIDE_REGEX", IFL_GUIDE_REGEX},
        {"GUIDE_EBNF", IFL_GUIDE_EBNF},
        {"KV_F16", IFL_KV_F16},
        {"KV_F32", IFL_KV_F32},
        {"KV_Q8_0", IFL_KV_Q8_0},
        {"SCHED_GUARANTEED_NO_EVICT", IFL_SCHED_GUARANTEED_NO_EVICT},
        {"SCHED_MAX_UTILIZATION", IFL_SCHED_MAX_UTILIZATION},
        {"SPEC_NONE", IFL_SPEC_NONE},
        {"SPEC_DRAFT", IFL_SPEC_DRAFT},
        {"SPEC_NGRAM", IFL_SPEC_NGRAM},
        {"SPEC_EAGLE3", IFL_SPEC_EAGLE3},
        {"SPEC_ACCEPT_EXACT", IFL_SPEC_ACCEPT_EXACT},
        {"SPEC_ACCEPT_REJECTION", IFL_SPEC_ACCEPT_REJECTION},
        {"STATUS_CANCELLED", IFL_ECANCELLED},
    };
    for (size_t i = 0; i < sizeof(consts) / sizeof(consts[0]); i++)
        if (PyModule_AddIntConstant(m, consts[i].name, consts[i].v) < 0) {
            Py_DECREF(m);
            return NULL;
        }
    return m;
}
