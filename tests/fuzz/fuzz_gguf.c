/* libFuzzer target for the GGUF reader: opens the input with
 * ifl_gguf_open_mem and, when it parses, reads every metadata value (all
 * getters, every array element, nested arrays included) and every tensor's
 * bytes, so ASan/UBSan see any access the parser let through. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "core/err.h"
#include "model/gguf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile uint64_t sink;

static void touch(const void *p, size_t n)
{
    const uint8_t *b = p;
    if (n)
        sink += b[0] + b[n - 1];
}

static void walk_value(const struct ifl_gguf_value *v)
{
    int64_t iv;
    double fv;
    const char *s;
    size_t len;
    if (v->type != IFL_GGUF_ARRAY) {
        if (ifl_gguf_value_int(v, &iv) == 0)
            sink += (uint64_t)iv;
        if (ifl_gguf_value_float(v, &fv) == 0)
            sink += (uint64_t)(fv == fv);
        if (ifl_gguf_value_str(v, &s, &len) == 0)
            touch(s, len);
        return;
    }
    for (uint64_t i = 0; i < v->n; i++) {
        struct ifl_gguf_value sub;
        if (ifl_gguf_arr_int(v, i, &iv) == 0)
            sink += (uint64_t)iv;
        if (ifl_gguf_arr_float(v, i, &fv) == 0)
            sink += (uint64_t)(fv == fv);
        if (ifl_gguf_arr_str(v, i, &s, &len) == 0)
            touch(s, len);
        if (ifl_gguf_arr_sub(v, i, &sub) == 0)
            walk_value(&sub);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[IFL_ERR_LEN];
    struct ifl_gguf *g;
    if (ifl_gguf_open_mem(&g, data, size, err) != 0) {
        if (strncmp(err, "gguf: ", 6) != 0 || !memchr(err, 0, sizeof err))
            __builtin_trap(); /* every failure must explain itself */
        return 0;
    }
    for (int64_t i = 0; i < ifl_gguf_n_kv(g); i++) {
        const char *key = ifl_gguf_key(g, i);
        struct ifl_gguf_value v;
        if (ifl_gguf_find_key(g, key) != i || ifl_gguf_value(g, i, &v) != 0)
            __builtin_trap();
        walk_value(&v);
        int64_t iv;
        double fv;
        int bv;
        const char *s;
        size_t len;
        struct ifl_gguf_value arr;
        int hits = (ifl_gguf_get_int(g, key, &iv, err) == 0) +
                   (ifl_gguf_get_float(g, key, &fv, err) == 0) +
                   (ifl_gguf_get_bool(g, key, &bv, err) == 0) +
                   (ifl_gguf_get_str(g, key, &s, &len, err) == 0) +
                   (ifl_gguf_get_arr(g, key, &arr, err) == 0);
        if (hits > 2) /* a bool is also an int; nothing else overlaps */
            __builtin_trap();
        const void *p;
        if (ifl_gguf_kv_span(g, i, &p, &len) == 0)
            touch(p, len);
    }
    for (int64_t i = 0; i < ifl_gguf_n_tensors(g); i++) {
        const struct ifl_gguf_tensor *t = ifl_gguf_tensor(g, i);
        if (ifl_gguf_find_tensor(g, t->name) != t)
            __builtin_trap();
        touch(t->data, t->nbytes);
    }
    ifl_gguf_free(g);
    return 0;
}
