/* libFuzzer target for the Llama 3.1 tool-call parser (src/server/llama3.c),
 * alone or behind the <think> splitter: reply_chain.h's checks, whole
 * against streamed pieces and every call one a client can run; and a
 * reply is calls or content, never both, the content then being the whole
 * answer as written (parser alone). Seeds: any reply text, e.g.
 * "{\"name\": \"get_weather\", \"parameters\": {}}". */
#define RP_T struct ifl_llama3
#define RP_INIT ifl_llama3_init
#define RP_PUSH ifl_llama3_push
#define RP_FINISH ifl_llama3_finish
#define RP_DEINIT ifl_llama3_deinit
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
    if (json_array_size(a.calls) && a.content.len)
        abort(); /* calls and content: the reply is one or the other */
    if (!chain && !json_array_size(a.calls) &&
        (a.content.len != n || (n && memcmp(a.content.p, s, n))))
        abort(); /* content that is not the reply as written */
    out_free(&a);
    return 0;
}
