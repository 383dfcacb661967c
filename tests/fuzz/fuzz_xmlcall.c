/* libFuzzer target for Qwen3-Coder's XML tool-call parser
 * (src/server/xmlcall.c on hermes.c's machine), alone or behind the
 * <think> splitter: reply_chain.h's checks, whole against streamed pieces
 * and every call one a client can run; and (parser alone) a reply without
 * calls is content exactly as written, no call is made without a
 * <tool_call> block of its own, and each typed parameter is of its kind or
 * the text as a string. Seeds: any reply text, e.g.
 * "<tool_call>\n<function=get_weather>\n<parameter=days>\n3\n</parameter>\n
 * </function>\n</tool_call>". */
#define RP_T struct ifl_hermes
#define RP_INIT ifl_xml_init
#define RP_PUSH ifl_hermes_push
#define RP_FINISH ifl_hermes_finish
#define RP_DEINIT ifl_hermes_deinit
#include "reply_chain.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static json_t *names;
    if (!names &&
        !(names = json_loads("{\"get_weather\": {\"type\": \"object\", \"properties\": {\"city\": "
                             "{\"type\": \"string\"}, \"days\": {\"type\": \"integer\"}, "
                             "\"hourly\": {\"type\": \"boolean\"}, \"tags\": {\"type\": "
                             "\"array\"}}}, \"f\": {}}",
                             0, NULL)))
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
    if (json_array_size(a.calls) > count_of(s, n, "<tool_call>"))
        abort(); /* a call made up */
    size_t i;
    json_t *c;
    json_array_foreach(a.calls, i, c)
    {
        json_t *args = json_object_get(json_object_get(c, "function"), "arguments");
        json_t *v = json_loadb(json_string_value(args), json_string_length(args), 0, NULL);
        json_t *d = json_object_get(v, "days"), *h = json_object_get(v, "hourly");
        json_t *ci = json_object_get(v, "city"), *tg = json_object_get(v, "tags");
        if ((d && !json_is_integer(d) && !json_is_string(d)) ||
            (h && !json_is_boolean(h) && !json_is_string(h)) || (ci && !json_is_string(ci)) ||
            (tg && !json_is_array(tg) && !json_is_string(tg)))
            abort(); /* a value of another kind than its schema's */
        json_decref(v);
    }
    out_free(&a);
    return 0;
}
