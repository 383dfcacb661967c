/*
 * N-gram lookup (prompt lookup decoding): the last ngram_size tokens of a
 * sequence (prompt and generated, the pending token last) are looked for
 * earlier in the same tokens; when they occurred at least ngram_min_hits
 * times, the tokens that followed their latest occurrence are proposed.
 * Text that repeats what came before (code edits, quoting, summaries of
 * the prompt, lists) is drafted for free; elsewhere nothing is proposed and
 * the step is plain. The scan is linear in the sequence, a few thousand
 * comparisons, next to a forward pass of millions of multiply-adds.
 */
#include "runtime/engine_internal.h"

static int32_t ngram_propose(struct ifl_executor *ex, struct eseq *s, int32_t *draft, int32_t max)
{
    const struct ifl_speculative_config *c = &ex->cfg.speculative;
    const int32_t *t = s->tokens;
    int32_t n = s->n_tokens, N = c->ngram_size;
    if (n <= N)
        return 0;
    const int32_t *key = t + n - N;
    int32_t hits = 0, latest = -1;
    /* occurrences ending before the key itself, latest first */
    for (int32_t j = n - N - 1; j >= 0; j--) {
        int32_t m = 0;
        while (m < N && t[j + m] == key[m])
            m++;
        if (m == N) {
            if (latest < 0)
                latest = j;
            if (++hits >= c->ngram_min_hits)
                break;
        }
    }
    if (hits < c->ngram_min_hits)
        return 0;
    int32_t from = latest + N, k = 0;
    while (k < max && from + k < n) {
        draft[k] = t[from + k];
        k++;
    }
    return k;
}

const struct ifl_decoding ifl_decoding_ngram = {
    .name = "ngram",
    .propose = ngram_propose,
    .accept = ifl_decoding_accept_drafts,
    .type = IFL_SPEC_NGRAM,
};
