/*
 * llama-server's LoRA routes over the executor's adapters (inflight.h
 * "LoRA adapters"):
 *   GET  /lora-adapters  [{"id", "name", "path", "scale", "rank", "loaded",
 *                          "in_use"}], by id
 *   POST /lora-adapters  [{"id", "scale"}]: the global scales, which
 *                        requests naming no adapter take at enqueue; an
 *                        adapter left out goes to 0, as in llama-server.
 *                        All entries are checked before any is applied.
 * A request in flight keeps the scales it took.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "server/internal.h"

static ifl_executor *executor(struct ifl_hconn *c)
{
    return atomic_load_explicit(&c->srv->ex, memory_order_acquire);
}

/* The adapters by id, malloc'd (NULL with *n 0 for none). */
static struct ifl_lora_info *listing(ifl_executor *ex, int32_t *n)
{
    int32_t cap = 0;
    *n = 0;
    struct ifl_lora_info *li = NULL;
    /* an adapter loaded between the two calls makes the second one short:
     * ask again with the new count */
    for (int tries = 0; tries < 8; tries++) {
        if (ifl_executor_list_lora(ex, li, cap, n) == 0)
            return li;
        free(li);
        cap = *n;
        if (!(li = calloc((size_t)cap, sizeof(*li)))) {
            *n = 0;
            return NULL;
        }
    }
    *n = *n < cap ? *n : cap;
    return li;
}

int ifl_lora_list(struct ifl_hconn *c, json_t *body)
{
    (void)body;
    int32_t n = 0;
    struct ifl_lora_info *li = listing(executor(c), &n);
    json_t *a = json_array();
    for (int32_t i = 0; i < n; i++)
        json_array_append_new(a, json_pack("{s:i,s:s,s:s,s:f,s:i,s:b,s:i}", "id", li[i].id, "name",
                                           li[i].name, "path", li[i].path, "scale",
                                           (double)li[i].scale, "rank", li[i].rank, "loaded",
                                           li[i].loaded, "in_use", li[i].in_use));
    free(li);
    return ifl_http_reply_json(c, 200, a);
}

int ifl_lora_set_scales(struct ifl_hconn *c, json_t *body)
{
    ifl_executor *ex = executor(c);
    if (!json_is_array(body))
        return ifl_http_reply_oai_error(c, 400, NULL,
                                        "the body must be a list of {\"id\", \"scale\"} objects");
    int32_t n = 0;
    struct ifl_lora_info *li = listing(ex, &n);
    float *scale = calloc((size_t)(n ? n : 1), sizeof(float));
    char param[64] = "", err[IFL_ERR_LEN] = "";
    const int oom = !scale;
    int bad = oom;
    if (bad)
        snprintf(err, sizeof err, "out of memory");
    size_t i;
    json_t *e;
    json_array_foreach(body, i, e)
    {
        if (bad)
            break;
        int64_t id = 0;
        double sc = 0;
        char e2[IFL_ERR_LEN] = "";
        int32_t k = 0;
        if (!json_is_object(e)) {
            snprintf(param, sizeof param, "[%zu]", i);
            snprintf(err, sizeof err, "[%zu]: must be an object with id and scale", i);
            bad = 1;
        } else if (ifl_json_get_int(e, "id", INT32_MIN, INT32_MAX, &id, e2) <= 0) {
            snprintf(param, sizeof param, "[%zu].id", i);
            snprintf(err, sizeof err, "[%zu].id: an adapter id (an integer) is required", i);
            bad = 1;
        } else if (ifl_json_get_num(e, "scale", -1e6, 1e6, &sc, e2) < 0) {
            snprintf(param, sizeof param, "[%zu].scale", i);
            snprintf(err, sizeof err, "[%zu].scale: must be a number from -1e6 to 1e6", i);
            bad = 1;
        } else {
            while (k < n && li[k].id != id)
                k++;
            if (k == n) {
                snprintf(param, sizeof param, "[%zu].id", i);
                snprintf(err, sizeof err, "[%zu].id: no adapter %lld is loaded", i, (long long)id);
                bad = 1;
            } else {
                scale[k] = (float)sc;
            }
        }
    }
    int rc = 0;
    for (int32_t k = 0; !bad && k < n && !rc; k++) {
        char e2[IFL_ERR_LEN] = "";
        rc = ifl_executor_set_lora_scale(ex, li[k].id, scale[k], e2);
        if (rc == IFL_ENOTFOUND) /* unloaded meanwhile: nothing to set */
            rc = 0;
        else if (rc)
            snprintf(err, sizeof err, "%s", e2);
    }
    free(li);
    free(scale);
    if (bad || rc)
        return ifl_http_reply_oai_error(c, oom ? 500 : 400, param[0] ? param : NULL, err);
    return ifl_http_reply_json(c, 200, json_pack("{s:b}", "success", 1));
}
