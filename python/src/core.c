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

#include "convert.h"

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
    PyObject *batched;  /* the batched logits processor (owned), or NULL */
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

/* Rows of logits as a writable float32 memoryview (2-D [n_rows][n_vocab]
 * when two_d, else flat) over a bytearray holding a copy: a view the
 * callable keeps after the call stays valid (it keeps the bytearray
 * alive), and only a copy of the right size goes back to the engine. */
static PyObject *rows_view(const float *logits, int64_t n_rows, int32_t n_vocab, int two_d,
                           PyObject **buf)
{
    *buf = PyByteArray_FromStringAndSize((const char *)logits,
                                         (Py_ssize_t)(n_rows * n_vocab * (int64_t)sizeof(float)));
    if (!*buf)
        return NULL;
    PyObject *raw = PyMemoryView_FromObject(*buf);
    if (!raw)
        return NULL;
    PyObject *mv =
        two_d ? PyObject_CallMethod(raw, "cast", "s(Li)", "f", (long long)n_rows, (int)n_vocab)
              : PyObject_CallMethod(raw, "cast", "s", "f");
    Py_DECREF(raw);
    return mv;
}

static void rows_back(float *logits, int64_t n_rows, int32_t n_vocab, PyObject *buf)
{
    size_t bytes = (size_t)(n_rows * n_vocab) * sizeof(float);
    if (buf && (size_t)PyByteArray_GET_SIZE(buf) == bytes)
        memcpy(logits, PyByteArray_AS_STRING(buf), bytes);
}

static PyObject *ids_list(const int32_t *x, int32_t n)
{
    return ifl_py_ints(x, n);
}

/* Runs a Python logits processor on the engine thread (see rows_view). An
 * exception is reported as unraisable and the row is left as it was. */
static void py_logits_proc(void *user, ifl_id id, float *logits, int32_t n_vocab,
                           const int32_t *tokens, int32_t n_tokens, uint64_t client_id)
{
    struct proc_slot *s = user;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *buf = NULL, *mv = rows_view(logits, 1, n_vocab, 0, &buf);
    PyObject *toks = mv ? ids_list(tokens, n_tokens) : NULL;
    PyObject *res = toks ? PyObject_CallFunction(s->fn, "KOOK", (unsigned long long)id, mv, toks,
                                                 (unsigned long long)client_id)
                         : NULL;
    if (res)
        rows_back(logits, 1, n_vocab, buf);
    else
        PyErr_WriteUnraisable(s->fn);
    Py_XDECREF(res);
    Py_XDECREF(toks);
    Py_XDECREF(mv);
    Py_XDECREF(buf);
    PyGILState_Release(g);
}

/* The batched processor: every row of a step that asked for "batched", in
 * one call: fn(request_ids, logits [n_rows][n_vocab], token_id lists,
 * client_ids). */
static void py_batched_proc(void *user, int32_t n_rows, const ifl_id *ids, float *logits,
                            int32_t n_vocab, const int32_t *const *tokens, const int32_t *n_tokens,
                            const uint64_t *client_ids)
{
    PyObject *fn = user;
    PyGILState_STATE g = PyGILState_Ensure();
    PyObject *buf = NULL, *mv = NULL, *rid = PyList_New(n_rows), *toks = PyList_New(n_rows),
             *cid = PyList_New(n_rows), *res = NULL;
    int ok = rid && toks && cid;
    for (int32_t i = 0; ok && i < n_rows; i++) {
        PyObject *a = PyLong_FromUnsignedLongLong(ids[i]);
        PyObject *t = ids_list(tokens[i], n_tokens[i]);
        PyObject *c = PyLong_FromUnsignedLongLong(client_ids[i]);
        ok = a && t && c;
        if (ok) {
            PyList_SET_ITEM(rid, i, a);
            PyList_SET_ITEM(toks, i, t);
            PyList_SET_ITEM(cid, i, c);
        } else {
            Py_XDECREF(a);
            Py_XDECREF(t);
            Py_XDECREF(c);
        }
    }
    /* one row is still a 2-D view: the callable always indexes [row, token] */
    if (ok)
        mv = rows_view(logits, n_rows, n_vocab, 1, &buf);
    if (mv)
        res = PyObject_CallFunctionObjArgs(fn, rid, mv, toks, cid, NULL);
    if (res)
        rows_back(logits, n_rows, n_vocab, buf);
    else
        PyErr_WriteUnraisable(fn);
    Py_XDECREF(res);
    Py_XDECREF(mv);
    Py_XDECREF(buf);
    Py_XDECREF(rid);
    Py_XDECREF(toks);
    Py_XDECREF(cid);
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
    Py_CLEAR(self->batched);
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
    struct ifl_py_arena a = {0};
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
            const struct ifl_py_field *f = ifl_py_find_field(ifl_py_config_fields, name);
            if (f) {
                if (ifl_py_set_number(&c, f, v, ""))
                    goto done;
            } else if (!strcmp(name, "repack_cache_dir")) {
                if (ifl_py_to_cstr(v, name, &a, &c.repack_cache_dir))
                    goto done;
            } else if (!strcmp(name, "mmproj_path")) {
                if (ifl_py_to_cstr(v, name, &a, &c.mmproj_path))
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
                int rc =
                    ifl_py_fill_struct(&c.speculative, ifl_py_spec_fields, rest, "speculative.");
                Py_DECREF(rest);
                if (rc || (dm && ifl_py_to_cstr(dm, "speculative.draft_model", &a,
                                                &c.speculative.draft_model)))
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
                    if (ifl_py_to_cstr(pk, "logits_processors key", &a, &lp[i].name) || !lp[i].name)
                        goto done;
                    Py_INCREF(pv);
                    self->procs[i].fn = pv;
                    lp[i].fn = py_logits_proc;
                    lp[i].user = &self->procs[i];
                    self->n_procs++;
                }
                c.logits_processors = lp;
                c.n_logits_processors = self->n_procs;
            } else if (!strcmp(name, "batched_logits_processor")) {
                if (v != Py_None) {
                    if (!PyCallable_Check(v)) {
                        PyErr_SetString(PyExc_TypeError, "batched_logits_processor: not callable");
                        goto done;
                    }
                    Py_XSETREF(self->batched, Py_NewRef(v));
                    c.batched_logits_processor = py_batched_proc;
                    c.batched_logits_user = self->batched;
                }
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
            ifl_py_raise(rc, err);
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
    ifl_py_arena_free(&a);
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
    struct ifl_py_arena a = {0};
    struct ifl_request *rs = calloc((size_t)n + 1, sizeof(*rs));
    ifl_id *ids = calloc((size_t)n + 1, sizeof(*ids));
    PyObject *out = NULL;
    if (!rs || !ids) {
        PyErr_NoMemory();
        goto done;
    }
    for (Py_ssize_t i = 0; i < n; i++)
        if (ifl_py_to_request(PySequence_Fast_GET_ITEM(seq, i), &rs[i], &a))
            goto done;
    int32_t n_with_ctx = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        n_with_ctx += rs[i].output.return_context_logits != 0;
    if (enter(self))
        goto done;
    char err[512] = "";
    int rc = 0;
    Py_BEGIN_ALLOW_THREADS;
    /* the response thread looks a context response's length up under
     * ctx_mu: it is recorded before anyone can look */
    if (n_with_ctx) {
        pthread_mutex_lock(&self->ctx_mu);
        if (self->n_ctxlen + n_with_ctx > self->cap_ctxlen) {
            int32_t cap = (self->n_ctxlen + n_with_ctx) * 2;
            void *np = realloc(self->ctx, sizeof(*self->ctx) * (size_t)cap);
            if (np) {
                self->ctx = np;
                self->cap_ctxlen = cap;
            } else {
                snprintf(err, sizeof(err), "enqueue: out of memory");
                rc = IFL_ENOMEM;
            }
        }
    }
    if (!rc)
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
        ifl_py_raise(rc, err);
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
    ifl_py_arena_free(&a);
    free(rs);
    free(ids);
    Py_DECREF(seq);
    return out;
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
/* What stands in for a response that could not be converted (out of
 * memory): for a final one, a final error of the same request, so that
 * nothing waiting on it is left hanging; else NULL (the update is lost,
 * the request goes on). The Python error is cleared either way. */
static PyObject *lost_response(const struct ifl_response *r)
{
    PyErr_Clear();
    if (!r->is_final)
        return NULL;
    PyObject *d = Py_BuildValue(
        "{s:K,s:K,s:i,s:s,s:O,s:i,s:O,s:i,s:i,s:{},s:[]}", "request_id",
        (unsigned long long)r->request_id, "client_id", (unsigned long long)r->client_id, "status",
        IFL_ENOMEM, "error", "out of memory while converting its final response", "is_final",
        Py_True, "sequence_index", r->sequence_index, "is_sequence_final", Py_True, "n_vocab",
        r->n_vocab, "n_embd", r->n_embd, "perf", "results");
    if (!d)
        PyErr_Clear();
    return d;
}

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
    /* the list, made before any response is taken, with room for max:
     * once taken, a response always reaches it (or its stand-in does) */
    PyObject *list = PyList_New(max);
    if (!list) {
        free(ids);
        free(out);
        return NULL;
    }
    if (enter(self)) {
        /* closed: nothing more can come */
        PyErr_Clear();
        Py_DECREF(list);
        free(ids);
        free(out);
        Py_RETURN_NONE;
    }
    int32_t got = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS;
    rc = ifl_await(self->ex, ids, n_ids, timeout_ms, out, max, &got);
    Py_END_ALLOW_THREADS;
    if (rc == IFL_ESTATE && got == 0) {
        Py_SETREF(list, Py_NewRef(Py_None));
    } else if (rc && rc != IFL_ETIMEDOUT) {
        Py_CLEAR(list);
        ifl_py_raise(rc, NULL);
    } else {
        Py_ssize_t n = 0;
        for (int32_t i = 0; i < got; i++) {
            /* a final response forgets the length too, for a request
             * that ended before its context rows were complete */
            int32_t n_input =
                out[i]->context_logits || out[i]->context_hidden_states || out[i]->is_final
                    ? take_ctx_len(self, out[i]->request_id)
                    : 0;
            PyObject *o = ifl_py_response(out[i], n_input);
            if (!o) /* the batch's other responses still go out */
                o = lost_response(out[i]);
            if (o)
                PyList_SET_ITEM(list, n++, o);
        }
        /* the slots left are NULL and never were items: the list ends
         * before them (no allocation, so this cannot fail) */
        Py_SET_SIZE(list, n);
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
        return ifl_py_raise(rc, NULL);
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
    PyObject *out = rc ? ifl_py_raise(rc, NULL) : ifl_py_ints(ids, (int32_t)n);
    free(ids);
    return out;
}

/* image_rows(data) -> int: ifl_executor_image_rows (the rows a PNG/JPEG
 * file takes, from its header). */
static PyObject *Executor_image_rows(ExecutorObject *self, PyObject *args)
{
    Py_buffer b;
    if (!PyArg_ParseTuple(args, "y*", &b))
        return NULL;
    if (enter(self)) {
        PyBuffer_Release(&b);
        return NULL;
    }
    char err[512] = "";
    int32_t rows = 0;
    int rc = ifl_executor_image_rows(self->ex, b.buf, (int64_t)b.len, &rows, err);
    leave(self);
    PyBuffer_Release(&b);
    return rc ? ifl_py_raise(rc, err[0] ? err : NULL) : PyLong_FromLong(rows);
}

/* tokenize_images(text, n_images, add_special=True, marker=None, rows=None)
 * -> (ids, positions): ifl_executor_tokenize_images with each image
 * rows[k] rows (None: n_tokens each). */
static PyObject *Executor_tokenize_images(ExecutorObject *self, PyObject *args, PyObject *kw)
{
    static char *kwlist[] = {"text", "n_images", "add_special", "marker", "rows", NULL};
    const char *text, *marker = NULL;
    Py_ssize_t len;
    int n_images, add_special = 1;
    PyObject *rows_obj = Py_None;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "s#i|pzO", kwlist, &text, &len, &n_images,
                                     &add_special, &marker, &rows_obj))
        return NULL;
    if (n_images < 0 || n_images > IFL_MAX_IMAGES_PER_REQUEST) {
        PyErr_Format(PyExc_ValueError, "images: %d (0..%d)", n_images, IFL_MAX_IMAGES_PER_REQUEST);
        return NULL;
    }
    int32_t rows[IFL_MAX_IMAGES_PER_REQUEST];
    if (rows_obj != Py_None) {
        PyObject *seq = PySequence_Fast(rows_obj, "rows: a sequence of ints");
        if (!seq)
            return NULL;
        int bad = PySequence_Fast_GET_SIZE(seq) != n_images;
        for (int k = 0; k < n_images && !bad; k++) {
            long v = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, k));
            bad = (v == -1 && PyErr_Occurred()) || v < 1 || v > INT32_MAX;
            rows[k] = (int32_t)v;
        }
        Py_DECREF(seq);
        if (bad) {
            PyErr_Clear();
            PyErr_Format(PyExc_ValueError, "rows: %d positive ints, one an image", n_images);
            return NULL;
        }
    }
    if (enter(self))
        return NULL;
    int32_t pos[IFL_MAX_IMAGES_PER_REQUEST];
    char err[512] = "";
    int64_t cap = (int64_t)len + 8, n = 0;
    int32_t *ids = NULL;
    int rc = IFL_EFULL;
    Py_BEGIN_ALLOW_THREADS;
    for (int tries = 0; rc == IFL_EFULL && tries < 2; tries++) {
        free(ids);
        if (!(ids = malloc(sizeof(int32_t) * (size_t)(cap > 0 ? cap : 1)))) {
            rc = IFL_ENOMEM;
            break;
        }
        rc =
            ifl_executor_tokenize_images(self->ex, text, len, marker, add_special, 1, n_images,
                                         rows_obj != Py_None ? rows : NULL, ids, cap, &n, pos, err);
        cap = n;
    }
    Py_END_ALLOW_THREADS;
    leave(self);
    PyObject *out = NULL;
    if (rc) {
        ifl_py_raise(rc, err[0] ? err : NULL);
    } else {
        PyObject *l = ifl_py_ints(ids, (int32_t)n), *p = ifl_py_ints(pos, n_images);
        if (l && p)
            out = PyTuple_Pack(2, l, p);
        Py_XDECREF(l);
        Py_XDECREF(p);
    }
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
    struct ifl_py_arena a = {0};
    int32_t *ids, n;
    if (ifl_py_to_i32_array(ido, "ids", &a, &ids, &n)) {
        ifl_py_arena_free(&a);
        return NULL;
    }
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= self->n_vocab) {
            PyErr_Format(PyExc_ValueError, "ids[%d]: token %d is not in [0, %d)", i, ids[i],
                         self->n_vocab);
            ifl_py_arena_free(&a);
            return NULL;
        }
    if (enter(self)) {
        ifl_py_arena_free(&a);
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
    ifl_py_arena_free(&a);
    PyObject *out = rc ? ifl_py_raise(rc, NULL) : PyUnicode_DecodeUTF8(buf, len, "replace");
    free(buf);
    return out;
}

static PyObject *Executor_model_info(ExecutorObject *self, PyObject *noarg)
{
    (void)noarg;
    if (enter(self))
        return NULL;
    struct ifl_model_info m;
    struct ifl_vision_info vi = {0};
    int rc = ifl_executor_model_info(self->ex, &m);
    ifl_executor_vision_info(self->ex, &vi); /* n_tokens 0 without an encoder */
    leave(self);
    if (rc)
        return ifl_py_raise(rc, NULL);
    return Py_BuildValue("{s:s,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:O,s:i,s:L,s:i}", "architecture",
                         m.architecture, "n_vocab", m.n_vocab, "n_ctx", m.n_ctx, "n_ctx_train",
                         m.n_ctx_train, "n_embd", m.n_embd, "n_layer", m.n_layer, "bos_id",
                         m.bos_id, "eos_id", m.eos_id, "add_bos", m.add_bos ? Py_True : Py_False,
                         "max_token_bytes", m.max_token_bytes, "kv_cache_tokens",
                         (long long)m.kv_cache_tokens, "image_tokens", vi.n_tokens);
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
        out = ifl_py_raise(rc, NULL);
    else
        out = PyUnicode_DecodeUTF8(buf, len, "replace");
    free(buf);
    return out;
}

/* load_lora(path, name=None, scale=0.0) -> id */
static PyObject *Executor_load_lora(ExecutorObject *self, PyObject *args)
{
    PyObject *path;
    const char *name = NULL;
    float scale = 0.0f;
    if (!PyArg_ParseTuple(args, "O&|zf", PyUnicode_FSConverter, &path, &name, &scale))
        return NULL;
    if (enter(self)) {
        Py_DECREF(path);
        return NULL;
    }
    char err[512] = "";
    int32_t id = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS;
    rc = ifl_executor_load_lora(self->ex, PyBytes_AS_STRING(path), name, scale, &id, err);
    Py_END_ALLOW_THREADS;
    leave(self);
    Py_DECREF(path);
    return rc ? ifl_py_raise(rc, err) : PyLong_FromLong(id);
}

/* unload_lora(id) / set_lora_scale(id, scale) */
static PyObject *Executor_unload_lora(ExecutorObject *self, PyObject *args)
{
    int id;
    if (!PyArg_ParseTuple(args, "i", &id) || enter(self))
        return NULL;
    char err[512] = "";
    int rc = ifl_executor_unload_lora(self->ex, id, err);
    leave(self);
    if (rc)
        return ifl_py_raise(rc, err);
    Py_RETURN_NONE;
}

static PyObject *Executor_set_lora_scale(ExecutorObject *self, PyObject *args)
{
    int id;
    float scale;
    if (!PyArg_ParseTuple(args, "if", &id, &scale) || enter(self))
        return NULL;
    char err[512] = "";
    int rc = ifl_executor_set_lora_scale(self->ex, id, scale, err);
    leave(self);
    if (rc)
        return ifl_py_raise(rc, err);
    Py_RETURN_NONE;
}

/* list_loras() -> [dict] ; find_lora(name) -> id or None */
static PyObject *Executor_list_loras(ExecutorObject *self, PyObject *noarg)
{
    (void)noarg;
    if (enter(self))
        return NULL;
    int32_t n = 0, cap = 16;
    struct ifl_lora_info *info = NULL;
    int rc;
    for (;;) {
        free(info);
        info = calloc((size_t)cap, sizeof(*info));
        if (!info) {
            rc = IFL_ENOMEM;
            break;
        }
        rc = ifl_executor_list_lora(self->ex, info, cap, &n);
        if (rc != IFL_EFULL)
            break;
        cap = n + 16;
    }
    leave(self);
    PyObject *list = rc ? ifl_py_raise(rc, NULL) : PyList_New(n);
    for (int32_t i = 0; list && i < n; i++) {
        const struct ifl_lora_info *l = &info[i];
        PyObject *d = Py_BuildValue(
            "{s:i,s:s,s:s,s:f,s:i,s:i,s:L,s:i,s:O}", "id", l->id, "name", l->name, "path", l->path,
            "scale", (double)l->scale, "rank", l->rank, "n_adapted", l->n_adapted, "bytes",
            (long long)l->bytes, "in_use", l->in_use, "loaded", l->loaded ? Py_True : Py_False);
        if (!d) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, i, d);
    }
    free(info);
    return list;
}

static PyObject *Executor_find_lora(ExecutorObject *self, PyObject *arg)
{
    const char *name = PyUnicode_Check(arg) ? PyUnicode_AsUTF8(arg) : NULL;
    if (!name)
        return PyErr_Format(PyExc_TypeError, "name: expected a str");
    if (enter(self))
        return NULL;
    int32_t id = 0;
    int rc = ifl_executor_find_lora(self->ex, name, &id);
    leave(self);
    if (rc == IFL_ENOTFOUND)
        Py_RETURN_NONE;
    return rc ? ifl_py_raise(rc, NULL) : PyLong_FromLong(id);
}

/* apply_chat_template(context_json, template=None) -> str */
static PyObject *Executor_chat(ExecutorObject *self, PyObject *args)
{
    const char *ctx, *tmpl = NULL;
    if (!PyArg_ParseTuple(args, "s|z", &ctx, &tmpl))
        return NULL;
    if (enter(self))
        return NULL;
    char err[512] = "", *text = NULL;
    int64_t len = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS;
    rc = ifl_executor_apply_chat_template(self->ex, tmpl, ctx, &text, &len, err);
    Py_END_ALLOW_THREADS;
    leave(self);
    if (rc)
        return ifl_py_raise(rc, err);
    PyObject *out = PyUnicode_DecodeUTF8(text, (Py_ssize_t)len, "replace");
    ifl_free(text);
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
        return ifl_py_raise(rc, NULL);
    return ifl_py_stats(&s);
}

/* iteration_stats_since(after_iteration=0, max=1024) -> list of the kept
 * steps' stats newer than after_iteration, oldest first. */
static PyObject *Executor_stats_since(ExecutorObject *self, PyObject *args)
{
    long long after = 0;
    int max = 1024;
    if (!PyArg_ParseTuple(args, "|Li", &after, &max))
        return NULL;
    if (max < 1 || max > 1024)
        return PyErr_Format(PyExc_ValueError, "max: %d (1..1024)", max);
    struct ifl_iteration_stats *h = malloc(sizeof(*h) * (size_t)max);
    if (!h)
        return PyErr_NoMemory();
    if (enter(self)) {
        free(h);
        return NULL;
    }
    int32_t n = 0;
    int rc;
    Py_BEGIN_ALLOW_THREADS;
    rc = ifl_get_iteration_stats_since(self->ex, after, h, max, &n);
    Py_END_ALLOW_THREADS;
    leave(self);
    PyObject *list = rc ? ifl_py_raise(rc, NULL) : PyList_New(n);
    for (int32_t i = 0; list && i < n; i++) {
        PyObject *d = ifl_py_stats(&h[i]);
        if (!d) {
            Py_CLEAR(list);
            break;
        }
        PyList_SET_ITEM(list, i, d);
    }
    free(h);
    return list;
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
        return ifl_py_raise(rc, NULL);
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
        return ifl_py_raise(rc, "the executor shut down while waiting for idle");
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
    {"image_rows", (PyCFunction)Executor_image_rows, METH_VARARGS,
     "image_rows(data) -> rows a PNG/JPEG file takes with the vision encoder"},
    {"tokenize_images", (PyCFunction)(void (*)(void))Executor_tokenize_images,
     METH_VARARGS | METH_KEYWORDS,
     "tokenize_images(text, n_images, add_special=True, marker=None, rows=None) -> (ids, "
     "positions)"},
    {"detokenize", (PyCFunction)(void (*)(void))Executor_detokenize, METH_VARARGS | METH_KEYWORDS,
     "detokenize(ids, show_special=False) -> str"},
    {"model_info", (PyCFunction)Executor_model_info, METH_NOARGS, "the model and context"},
    {"load_lora", (PyCFunction)Executor_load_lora, METH_VARARGS,
     "load_lora(path, name=None, scale=0.0) -> id"},
    {"unload_lora", (PyCFunction)Executor_unload_lora, METH_VARARGS, "unload_lora(id)"},
    {"set_lora_scale", (PyCFunction)Executor_set_lora_scale, METH_VARARGS,
     "set_lora_scale(id, scale)"},
    {"list_loras", (PyCFunction)Executor_list_loras, METH_NOARGS, "the registered adapters"},
    {"find_lora", (PyCFunction)Executor_find_lora, METH_O, "find_lora(name) -> id or None"},
    {"apply_chat_template", (PyCFunction)Executor_chat, METH_VARARGS,
     "apply_chat_template(context_json, template=None) -> the rendered text"},
    {"model_meta", (PyCFunction)Executor_model_meta, METH_O,
     "model_meta(key) -> the GGUF string value, or None"},
    {"iteration_stats", (PyCFunction)Executor_iteration_stats, METH_NOARGS,
     "the engine's figures as of its last step"},
    {"iteration_stats_since", (PyCFunction)Executor_stats_since, METH_VARARGS,
     "iteration_stats_since(after_iteration=0, max=1024) -> each kept step's stats, oldest first"},
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

static PyObject *core_version(PyObject *mod, PyObject *noarg)
{
    (void)mod;
    (void)noarg;
    return PyUnicode_FromString(ifl_version());
}

static PyMethodDef core_methods[] = {
    {"version", core_version, METH_NOARGS, "the C library's version"},
    {"prompt_logprobs", ifl_py_prompt_logprobs, METH_VARARGS,
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
    ifl_py_queue_full =
        PyErr_NewException("inflight._core.QueueFullError", PyExc_RuntimeError, NULL);
    if (!ifl_py_queue_full || PyModule_AddObjectRef(m, "QueueFullError", ifl_py_queue_full) < 0 ||
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
        {"VISION_PREC_F32", IFL_VISION_PREC_F32},
        {"VISION_PREC_BF16", IFL_VISION_PREC_BF16},
        {"STATUS_CANCELLED", IFL_ECANCELLED},
    };
    for (size_t i = 0; i < sizeof(consts) / sizeof(consts[0]); i++)
        if (PyModule_AddIntConstant(m, consts[i].name, consts[i].v) < 0) {
            Py_DECREF(m);
            return NULL;
        }
    return m;
}
