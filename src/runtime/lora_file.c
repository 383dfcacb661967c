/*
 * Adapters from files (inflight.h ifl_executor_load_lora): the loader
 * (model/lora.c) reads and checks the GGUF file, the applied form is made
 * from it (model/lora_rt.h) and registered. The path stays the adapter's
 * source: the host cache may drop it while idle and read it again here
 * when a request names it.
 */
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "model/lora.h"
#include "runtime/exec.h"

/* An adapter's file and the form it is held in: its source. */
struct file_src {
    int hold;
    char path[];
};

/* Reads path and makes its applied form for m. */
static int read_adapter(const char *path, int hold, const struct ifl_model *m,
                        struct ifl_lora_rt **out, char *err)
{
    struct ifl_lora *l = NULL;
    int rc = ifl_lora_load(&l, path, m, err);
    if (rc)
        return rc;
    rc = ifl_lora_rt_create(out, l, m, hold, err);
    ifl_lora_free(l);
    return rc;
}

static int reload(void *user, const struct ifl_model *m, struct ifl_lora_rt **out, char *err)
{
    const struct file_src *fs = user;
    return read_adapter(fs->path, fs->hold, m, out, err);
}

int ifl_executor_load_lora(ifl_executor *ex, const char *path, const char *name, float scale,
                           int32_t *id, char *err)
{
    if (!ex || !path || !path[0] || !id)
        return ifl_err(err, IFL_EINVAL, "load_lora: %s is missing",
                       !ex   ? "the executor"
                       : !id ? "the id pointer"
                             : "the path");
    if (ex->tp)
        return ifl_err(err, IFL_EUNSUPPORTED,
                       "load_lora: LoRA adapters are not available with tensor parallelism "
                       "(--tp) in this version");
    if (ex->model->units)
        return ifl_err(err, IFL_EUNSUPPORTED,
                       "load_lora: LoRA adapters are not available when summing as tensor "
                       "parallel ranks do (--tp-emulate), as with --tp itself");
    struct ifl_lora_rt *rt = NULL;
    int rc = read_adapter(path, ex->cfg.lora_type, ex->model, &rt, err);
    if (rc)
        return rc;
    size_t n = strlen(path) + 1;
    struct file_src *fs = malloc(sizeof(*fs) + n);
    if (!fs) {
        ifl_lora_rt_free(rt);
        return ifl_err(err, IFL_ENOMEM, "load_lora: out of memory");
    }
    fs->hold = ex->cfg.lora_type;
    memcpy(fs->path, path, n);
    struct ifl_lora_source src = {reload, free, fs};
    return ifl_lora_reg_add(&ex->lora, rt, &src, path, name, scale, id, err);
}
