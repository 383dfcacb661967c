/*
 * Reasoning models' <think> blocks, split from the answer as OpenAI-style
 * clients expect (message.reasoning_content beside content, as vLLM's and
 * llama.cpp's servers give it). Qwen3, QwQ, DeepSeek-R1 and their kin
 * answer
 *
 *   <think>
 *   Paris is the capital...
 *   </think>
 *
 *   The capital of France is Paris.
 *
 * or, when the template opened the block at the prompt's end (QwQ, R1:
 * the prompt ends with "<think>\n"), the same without the opening tag.
 * Only a block at the reply's start counts; a reply that begins with
 * anything else is all answer, byte for byte. The whitespace around the
 * reasoning and between </think> and the answer is the format's and is
 * dropped. Mistral's reasoning models (Ministral 3, Magistral) write the
 * same block between [THINK] and [/THINK] (control tokens their vocabulary
 * shows): the splitter takes its tags from the caller.
 *
 * Text arrives in pieces when streamed; the splitter gives the same result
 * however it is cut: bytes that could begin a tag, and whitespace the
 * reasoning may end with, are held back until the next piece says.
 */
#include <string.h>

#include "server/internal.h"

#define OPEN "<think>"
#define CLOSE "</think>"

enum {
    K_START = 0, /* only whitespace so far: the block may still open */
    K_REASON,    /* inside the block */
    K_AFTER,     /* the block closed: whitespace before the answer is dropped */
    K_ANSWER     /* the rest is the answer as it stands */
};

void ifl_think_init_tags(struct ifl_think *k, int inside, const char *open, const char *close)
{
    memset(k, 0, sizeof *k);
    k->state = inside ? K_REASON : K_START;
    k->open = open;
    k->close = close;
}

void ifl_think_init(struct ifl_think *k, int inside)
{
    ifl_think_init_tags(k, inside, OPEN, CLOSE);
}

void ifl_think_deinit(struct ifl_think *k)
{
    ifl_buf_free(&k->hold);
    ifl_buf_free(&k->ws);
}

int ifl_think_prompt_open(const char *p, size_t n)
{
    while (n && ifl_reply_ws(p[n - 1]))
        n--;
    size_t ol = strlen(OPEN);
    return n >= ol && !memcmp(p + n - ol, OPEN, ol);
}

/* Reasoning text: leading whitespace dropped, trailing whitespace held in
 * k->ws until text follows it (then it is the reasoning's) or the block
 * ends (then it is dropped). */
static void reason(struct ifl_think *k, const char *s, size_t n, struct ifl_reply_out *o)
{
    if (!k->r_text) {
        while (n && ifl_reply_ws(*s))
            s++, n--;
        if (!n)
            return;
        k->r_text = 1;
    }
    size_t e = n;
    while (e && ifl_reply_ws(s[e - 1]))
        e--;
    if (e) {
        ifl_buf_add(&o->reasoning, k->ws.p, k->ws.len);
        k->ws.len = 0;
        ifl_buf_add(&o->reasoning, s, e);
    }
    ifl_buf_add(&k->ws, s + e, n - e);
}

void ifl_think_push(struct ifl_think *k, const char *s, size_t n, struct ifl_reply_out *o,
                    struct ifl_buf *rest)
{
    if (k->state == K_ANSWER && !k->hold.len) { /* the common case: no copy */
        ifl_buf_add(rest, s, n);
        return;
    }
    ifl_buf_add(&k->hold, s, n);
    if (k->hold.oom || k->ws.oom)
        o->oom = 1;
    const char *h = k->hold.p ? k->hold.p : "";
    size_t hn = k->hold.len, i = 0;
    const size_t ol = strlen(k->open), cl = strlen(k->close);
    while (i < hn) {
        if (k->state == K_START) {
            size_t j = i;
            while (j < hn && ifl_reply_ws(h[j]))
                j++;
            size_t m = hn - j < ol ? hn - j : ol;
            if (memcmp(h + j, k->open, m)) { /* not the tag: all of it is answer */
                k->state = K_ANSWER;
                continue;
            }
            if (m < ol) /* whitespace, or the tag's start: wait for more */
                break;
            i = j + ol;
            k->state = K_REASON;
        } else if (k->state == K_REASON) {
            int whole;
            size_t at = i + ifl_reply_find_tag(h + i, hn - i, k->close, &whole);
            reason(k, h + i, at - i, o);
            i = at;
            if (!whole)
                break;
            i += cl;
            k->ws.len = 0; /* the reasoning's trailing whitespace */
            k->state = K_AFTER;
        } else if (k->state == K_AFTER) {
            while (i < hn && ifl_reply_ws(h[i]))
                i++;
            if (i < hn)
                k->state = K_ANSWER;
        } else {
            ifl_buf_add(rest, h + i, hn - i);
            i = hn;
        }
    }
    if (k->hold.p)
        memmove(k->hold.p, h + i, hn - i);
    k->hold.len = hn - i;
}

void ifl_think_finish(struct ifl_think *k, struct ifl_reply_out *o, struct ifl_buf *rest)
{
    const char *h = k->hold.p ? k->hold.p : "";
    if (k->state == K_REASON)
        reason(k, h, k->hold.len, o); /* a closing tag's start that never came */
    else if (k->state != K_AFTER)
        ifl_buf_add(rest, h, k->hold.len);
    k->hold.len = 0;
    k->ws.len = 0;
}
