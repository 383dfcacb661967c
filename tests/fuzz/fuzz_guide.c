/* libFuzzer target for the guide: the input is compiled as GBNF, as a
 * regex and as a JSON Schema; a grammar that compiles is then run over a few byte strings (the
 * input's own tail and fixed probes), fed whole and one byte at a time, and
 * both ways must agree. Copies and resets are exercised along the way. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "guide/guide.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void run(const struct ifl_guide *g, const uint8_t *s, size_t n)
{
    struct ifl_guide_state a, b;
    if (ifl_guide_state_init(&a, g) || ifl_guide_state_init(&b, g)) {
        ifl_guide_state_deinit(&a);
        ifl_guide_state_deinit(&b);
        return;
    }
    if (n > 256)
        n = 256;
    int whole = ifl_guide_accept_bytes(&a, s, n);
    size_t i = 0;
    int rc = 0;
    for (; i < n && rc == 0; i++)
        rc = ifl_guide_accept_bytes(&b, s + i, 1);
    if (whole == 0 && rc != 0)
        abort(); /* whole accepted, bytewise did not */
    if (whole == IFL_EINVAL && rc == 0 && i == n)
        abort();
    if (whole == 0 && ifl_guide_is_accepting(&a) != ifl_guide_is_accepting(&b))
        abort();
    (void)ifl_guide_can_continue(&a);
    ifl_guide_state_copy(&b, &a);
    ifl_guide_accept_bytes(&b, "{\"a\": 1}", 8);
    ifl_guide_state_reset(&a);
    ifl_guide_state_deinit(&a);
    ifl_guide_state_deinit(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[IFL_ERR_LEN];
    struct ifl_guide *g = NULL;
    static const char *probes[] = {"",    "a", "0", "abc", "(1+2)", "\xC3\xA9", "\xF0\x9F\x98",
                                   "xx\n"};
    if (ifl_guide_compile_gbnf(&g, (const char *)data, size, err) == 0) {
        for (size_t k = 0; k < sizeof probes / sizeof *probes; k++)
            run(g, (const uint8_t *)probes[k], strlen(probes[k]));
        run(g, data + size / 2, size - size / 2);
        ifl_guide_free(g);
    } else if (!memchr(err, 0, sizeof err)) {
        abort();
    }
    if (size < 512 && ifl_guide_compile_regex(&g, (const char *)data, size, err) == 0) {
        for (size_t k = 0; k < sizeof probes / sizeof *probes; k++)
            run(g, (const uint8_t *)probes[k], strlen(probes[k]));
        ifl_guide_free(g);
    }
    if (size < 4096 && ifl_guide_compile_json_schema(&g, (const char *)data, size, err) == 0) {
        run(g, (const uint8_t *)"{\"a\": [1, \"x\"]}", 16);
        run(g, (const uint8_t *)"\"2024-01-01\"", 12);
        ifl_guide_free(g);
    }
    return 0;
}
