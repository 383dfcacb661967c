/* libFuzzer target for the Hermes tool-call parser (src/server/hermes.c),
 * alone or behind the <think> splitter: reply_chain.h's checks, whole
 * against streamed pieces and every call one a client can run. Whatever a
 * model writes, the reply is either a call a client can run or text.
 * Seeds: any reply text, e.g.
 * "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>". */
#define RP_T struct ifl_hermes
#define RP_INIT ifl_hermes_init
#define RP_PUSH ifl_hermes_push
#define RP_FINISH ifl_hermes_finish
#define RP_DEINIT ifl_hermes_deinit
#include "reply_chain.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static json_t *names;
    if (!names && !(names = json_pack("{s:i,s:i}", "get_weather", 0, "f", 1)))
        abort();
    struct ifl_reply_out a;
    if (read_both(names, data, size, &a) >= 0)
        out_free(&a);
    return 0;
}
