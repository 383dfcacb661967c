/* libFuzzer target for Mistral's [TOOL_CALLS] parser (src/server/mistral.c),
 * alone or behind the splitter with Mistral's [THINK] tags
 * (src/server/think.c): the input's first byte seeds where the rest is cut
 * into streamed pieces, and its top two bits choose the chain (the parser
 * alone, the splitter first, the splitter first with the block open). The
 * text parsed whole and in those pieces must give the same reasoning,
 * content and calls; every call's arguments must be a JSON object naming
 * one of the target's functions (reply_chain.h), its id nine letters and
 * digits or the model's (at most 64 of them, '_' and '-'); and a reply
 * without calls is content as written, byte for byte (parser alone).
 * Seeds: any reply text, e.g.
 * "[TOOL_CALLS]get_weather[ARGS]{\"city\": \"Paris\"}". */
#define RP_T struct ifl_mistral
#define RP_INIT ifl_mistral_init
#define RP_PUSH ifl_mistral_push
#define RP_FINISH ifl_mistral_finish
#define RP_DEINIT ifl_mistral_deinit
#define RP_THINK_OPEN "[THINK]"
#define RP_THINK_CLOSE "[/THINK]"
#include "reply_chain.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static json_t *names;
    if (!names && !(names = json_pack("{s:i,s:i}", "get_weather", 0, "f", 1)))
        abort();
    struct ifl_reply_out a;
    int chain = read_both(names, data, size, &a);
    if (chain < 0)
        return 0;
    const char *s = (const char *)data + 1;
    size_t n = size - 1;
    if (!chain && !json_array_size(a.calls) &&
        (a.content.len != n || (n && memcmp(a.content.p, s, n))))
        abort(); /* text lost or changed */
    size_t i;
    json_t *c;
    json_array_foreach(a.calls, i, c)
    {
        const char *id = json_string_value(json_object_get(c, "id"));
        size_t il = id ? strlen(id) : 0;
        if (!il || il > 64 ||
            strspn(id, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-") != il)
            abort(); /* an id a template could not take back */
    }
    out_free(&a);
    return 0;
}
