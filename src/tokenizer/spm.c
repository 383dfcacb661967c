/*
 * SentencePiece-style tokenizing as llama.cpp does it for
 * tokenizer.ggml.model = "llama" (its llm_tokenizer_spm): spaces become
 * U+2581 "▁" (with one prepended when asked), the text starts as one symbol
 * per UTF-8 character, and the adjacent pair whose concatenation is the
 * highest-scoring token is merged (leftmost first on ties) until no pair is
 * a token. A symbol left without a token becomes one <0xNN> byte token per
 * byte (byte fallback), else the token of that single byte's text, else the
 * unknown token.
 *
 * Characters are cut by their lead byte's announced length without
 * validation (clipped at the end of the text), so invalid UTF-8 simply
 * falls back to bytes: nothing is lost.
 */
#include "tokenizer/internal.h"

static const char SPACE_MARK[3] = {'\xe2', '\x96', '\x81'}; /* U+2581 */

struct spm_work {
    const char *s; /* the escaped text */
    struct ifl_tok_sym *sym;
    struct ifl_tok_heap heap;
};

static int try_merge(const struct ifl_vocab *v, struct spm_work *w, int32_t l, int32_t r)
{
    if (l < 0 || r < 0)
        return 0;
    const struct ifl_tok_sym *a = &w->sym[l], *b = &w->sym[r];
    /* adjacent symbols are adjacent slices, so the pair's text is contiguous */
    int32_t id = ifl_vocab_find(v, w->s + a->start, (size_t)a->n + (size_t)b->n);
    if (id < 0)
        return 0;
    return ifl_tok_heap_push(
        &w->heap, ifl_tok_cand_make(ifl_tok_score_key(v->scores[id]), l, a->n + b->n, id));
}

static void emit_symbol(const struct ifl_vocab *v, const char *s, int32_t n,
                        struct ifl_tok_out *out)
{
    int32_t id = ifl_vocab_find(v, s, (size_t)n);
    if (id >= 0) {
        ifl_tok_out_push(out, id);
        return;
    }
    for (int32_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)s[i];
        id = v->byte_tok[b];
        if (id < 0)
            id = ifl_vocab_find(v, s + i, 1);
        if (id < 0)
            id = v->unk;
        if (id >= 0)
            ifl_tok_out_push(out, id);
    }
}

int ifl_vocab_spm_tokenize(const struct ifl_vocab *v, const char *text, size_t len,
                           int prefix_space, struct ifl_tok_out *out)
{
    if (len > (size_t)INT32_MAX / 4)
        return IFL_EINVAL;
    /* escape: every ' ' becomes "▁" (3 bytes) */
    size_t cap = 3 * (len + 1);
    char *s = malloc(cap);
    struct spm_work w = {s, NULL, {0}};
    int rc = IFL_ENOMEM;
    if (!s)
        goto done;
    size_t n = 0;
    if (prefix_space) {
        memcpy(s, SPACE_MARK, 3);
        n = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(s + n, SPACE_MARK, 3);
            n += 3;
        } else {
            s[n++] = text[i];
        }
    }
    if (n == 0) {
        rc = 0;
        goto done;
    }
    w.sym = malloc(n * sizeof(*w.sym));
    if (!w.sym)
        goto done;
    int32_t ns = 0;
    for (size_t i = 0; i < n;) {
        size_t cl = ifl_utf8_len_lead((unsigned char)s[i]);
        if (cl > n - i)
            cl = n - i;
        w.sym[ns] = (struct ifl_tok_sym){(int32_t)i, (int32_t)cl, ns - 1, ns + 1, -1};
        ns++;
        i += cl;
    }
    w.sym[ns - 1].next = -1;
    for (int32_t i = 0; i + 1 < ns; i++)
        if ((rc = try_merge(v, &w, i, i + 1)) < 0)
            goto done;
    while (w.heap.n) {
        struct ifl_tok_cand c = ifl_tok_heap_pop(&w.heap);
        int32_t left = ifl_tok_cand_left(&c);
        struct ifl_tok_sym *a = &w.sym[left];
        if (a->n == 0 || a->next < 0 || a->n + w.sym[a->next].n != c.size)
            continue; /* stale: one side changed since it was queued */
        struct ifl_tok_sym *b = &w.sym[a->next];
        a->n += b->n;
        a->id = c.id;
        b->n = 0;
        a->next = b->next;
        if (b->next >= 0)
            w.sym[b->next].prev = left;
        if ((rc = try_merge(v, &w, a->prev, left)) < 0 ||
            (rc = try_merge(v, &w, left, a->next)) < 0)
            goto done;
    }
    for (int32_t i = 0; i >= 0; i = w.sym[i].next) {
        if (w.sym[i].id >= 0)
            ifl_tok_out_push(out, w.sym[i].id);
        else
            emit_symbol(v, s + w.sym[i].start, w.sym[i].n, out);
    }
    rc = 0;
done:
    free(s);
    free(w.sym);
    free(w.heap.a);
    return rc;
}
