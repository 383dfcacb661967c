/*
 * Log-probabilities in the OpenAI shapes: completions' {tokens,
 * token_logprobs, top_logprobs, text_offset} and chat's {content: [{token,
 * logprob, bytes, top_logprobs}], refusal}. JSON has no -Infinity, so an
 * impossible token shows as -9999, as OpenAI reports it.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/internal.h"

static json_t *lp_json(float v)
{
    /* JSON has no -Infinity; OpenAI reports impossible tokens as -9999 */
    return json_real(isfinite(v) ? (double)v : -9999.0);
}

static json_t *bytes_json(const char *p, size_t n)
{
    json_t *a = json_array();
    for (size_t i = 0; i < n; i++)
        json_array_append_new(a, json_integer((unsigned char)p[i]));
    return a;
}

/* ---- log-probs in both APIs' shapes ---- */

/* Completions: {tokens, token_logprobs, top_logprobs, text_offset}. */
json_t *ifl_oai_lp_completion_new(void)
{
    json_t *o = json_object();
    json_object_set_new(o, "tokens", json_array());
    json_object_set_new(o, "token_logprobs", json_array());
    json_object_set_new(o, "top_logprobs", json_array());
    json_object_set_new(o, "text_offset", json_array());
    return o;
}

/* Appends n tokens to o; *offset advances by each token's bytes. A NAN
 * log-prob (the first prompt token of an echo: nothing predicts it) shows
 * as null with null alternatives. With plain (an echoed prompt, shown as
 * the client sent it), *offset counts the tokens' text without control
 * tokens, and the offset shown is that less plain->shift, within
 * 0..plain->limit. */
struct plain_offsets {
    int64_t shift, limit;
};

static void add(struct ifl_server *s, json_t *o, const int32_t *toks, const float *lps,
                const struct ifl_top_logprob *tops, int32_t k, int32_t n, int64_t *offset,
                const struct plain_offsets *plain)
{
    json_t *t = json_object_get(o, "tokens"), *l = json_object_get(o, "token_logprobs"),
           *tl = json_object_get(o, "top_logprobs"), *off = json_object_get(o, "text_offset");
    ifl_executor *ex = atomic_load_explicit(&s->ex, memory_order_acquire);
    char piece[256];
    for (int32_t i = 0; i < n; i++) {
        size_t pl = ifl_gen_piece(s, toks[i], piece, sizeof piece);
        json_array_append_new(t, ifl_json_text(piece, pl));
        int unknown = lps && isnan(lps[i]);
        json_array_append_new(l, unknown ? json_null() : lp_json(lps ? lps[i] : 0));
        if (plain) {
            int64_t at = *offset - plain->shift, np = 0;
            at = at < 0 ? 0 : at > plain->limit ? plain->limit : at;
            json_array_append_new(off, json_integer(at));
            char plain_text[256];
            if (ifl_executor_detokenize(ex, &toks[i], 1, 0, plain_text, sizeof plain_text, &np))
                np = 0;
            *offset += np;
        } else {
            json_array_append_new(off, json_integer(*offset));
            *offset += (int64_t)pl;
        }
        if (k > 0 && tops && !unknown) {
            json_t *d = json_object();
            for (int32_t q = 0; q < k; q++) {
                const struct ifl_top_logprob *tp = &tops[(size_t)i * k + q];
                if (tp->token < 0)
                    continue;
                char alt[256];
                size_t al = ifl_gen_piece(s, tp->token, alt, sizeof alt);
                json_t *key = ifl_json_text(alt, al);
                if (key && !json_object_get(d, json_string_value(key)))
                    json_object_set_new(d, json_string_value(key), lp_json(tp->logprob));
                json_decref(key);
            }
            json_array_append_new(tl, d);
        } else {
            json_array_append_new(tl, json_null());
        }
    }
}

void ifl_oai_lp_completion_add(struct ifl_server *s, json_t *o, const int32_t *toks,
                               const float *lps, const struct ifl_top_logprob *tops, int32_t k,
                               int32_t n, int64_t *offset)
{
    add(s, o, toks, lps, tops, k, n, offset, NULL);
}

json_t *ifl_oai_lp_completion(struct ifl_server *s, const int32_t *toks, const float *lps,
                              const struct ifl_top_logprob *tops, int32_t k, int32_t n,
                              int64_t *offset)
{
    json_t *o = ifl_oai_lp_completion_new();
    add(s, o, toks, lps, tops, k, n, offset, NULL);
    return o;
}

/* The echoed prompt's part of the log-probs: prompt pi's tokens from the
 * job's prompt scores. Offsets index the prompt's text: the tokens' plain
 * text may be longer at its start (a SentencePiece word's space), so the
 * difference is taken off. */
void ifl_oai_lp_completion_echo(struct ifl_server *s, json_t *o, const struct ifl_gen_job *j,
                                int pi, int64_t echo_len)
{
    const struct ifl_gen_prompt_scores *ps = &j->pscore[pi];
    if (ps->n != j->n_prompt[pi])
        return;
    ifl_executor *ex = atomic_load_explicit(&s->ex, memory_order_acquire);
    int64_t total = 0, shown = 0, off = 0;
    char one[1];
    ifl_executor_detokenize(ex, j->prompts[pi], ps->n, 0, one, 1, &total);
    ifl_executor_detokenize(ex, j->prompts[pi], ps->n, 1, one, 1, &shown);
    /* a prompt of token ids is echoed as its tokens' shown pieces */
    struct plain_offsets po = {.shift = total > echo_len ? total - echo_len : 0, .limit = echo_len};
    add(s, o, j->prompts[pi], ps->lps, ps->tops, ps->n_top, ps->n, &off,
        shown == echo_len ? NULL : &po);
}

/* Chat: {content: [{token, logprob, bytes, top_logprobs: [...]}], refusal} */
json_t *ifl_oai_lp_chat(struct ifl_server *s, const int32_t *toks, const float *lps,
                        const struct ifl_top_logprob *tops, int32_t k, int32_t n)
{
    json_t *content = json_array();
    char piece[256];
    for (int32_t i = 0; i < n; i++) {
        size_t pl = ifl_gen_piece(s, toks[i], piece, sizeof piece);
        json_t *e = json_object();
        json_object_set_new(e, "token", ifl_json_text(piece, pl));
        json_object_set_new(e, "logprob", lp_json(lps ? lps[i] : 0));
        json_object_set_new(e, "bytes", bytes_json(piece, pl));
        json_t *alts = json_array();
        for (int32_t q = 0; q < k && tops; q++) {
            const struct ifl_top_logprob *tp = &tops[(size_t)i * k + q];
            if (tp->token < 0)
                continue;
            char alt[256];
            size_t al = ifl_gen_piece(s, tp->token, alt, sizeof alt);
            json_t *a = json_object();
            json_object_set_new(a, "token", ifl_json_text(alt, al));
            json_object_set_new(a, "logprob", lp_json(tp->logprob));
            json_object_set_new(a, "bytes", bytes_json(alt, al));
            json_array_append_new(alts, a);
        }
        json_object_set_new(e, "top_logprobs", alts);
        json_array_append_new(content, e);
    }
    json_t *o = json_object();
    json_object_set_new(o, "content", content);
    json_object_set_new(o, "refusal", json_null());
    return o;
}
