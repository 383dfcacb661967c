/* libFuzzer target for DeepSeek-R1's tool-call parser
 * (src/server/deepseek.c on hermes.c's machine), alone or behind the
 * <think> splitter: reply_chain.h's checks (whole against streamed pieces,
 * every call's arguments an object naming one of the target's functions);
 * and (parser alone) a reply without calls is content exactly as written,
 * and no block gives more calls than it has <｜tool▁call▁begin｜> tags.
 * Seeds: any reply text, e.g. "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>
 * function<｜tool▁sep｜>get_weather\n```json\n{}\n```<｜tool▁call▁end｜>
 * <｜tool▁calls▁end｜>". */
#define RP_T struct ifl_hermes
#define RP_INIT ifl_deepseek_init
#define RP_PUSH ifl_hermes_push
#define RP_FINISH ifl_hermes_finish
#define RP_DEINIT ifl_hermes_deinit
#include "reply_chain.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static json_t *names;
    if (!names && !(names = json_pack("{s:{},s:{}}", "get_weather", "f")))
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
    if (json_array_size(a.calls) > count_of(s, n, IFL_DS_CALL_BEGIN))
        abort(); /* a call made up */
    out_free(&a);
    return 0;
}
