/*
 * The public LoRA calls of the executor (inflight.h "LoRA adapters") over
 * its registry (lora_reg.h). Loading from a file is lora_file.c's.
 */
#include "core/err.h"
#include "runtime/exec.h"

int ifl_executor_unload_lora(ifl_executor *ex, int32_t id, char *err)
{
    if (!ex)
        return ifl_err(err, IFL_EINVAL, "unload_lora: the executor is NULL");
    return ifl_lora_reg_remove(&ex->lora, id, err);
}

int ifl_executor_set_lora_scale(ifl_executor *ex, int32_t id, float scale, char *err)
{
    if (!ex)
        return ifl_err(err, IFL_EINVAL, "set_lora_scale: the executor is NULL");
    return ifl_lora_reg_set_scale(&ex->lora, id, scale, err);
}

int ifl_executor_list_lora(ifl_executor *ex, struct ifl_lora_info *out, int32_t cap, int32_t *n_out)
{
    if (!ex || !n_out || cap < 0 || (cap && !out))
        return IFL_EINVAL;
    return ifl_lora_reg_list(&ex->lora, out, cap, n_out);
}

int ifl_executor_find_lora(ifl_executor *ex, const char *name, int32_t *id)
{
    if (!ex || !name || !id)
        return IFL_EINVAL;
    return ifl_lora_reg_find(&ex->lora, name, id);
}
