/*
 * Client drafts (TensorRT-LLM's external draft tokens): the request brings
 * the tokens it expects to follow the prompt, as an editor does with the
 * text being rewritten. They are proposed at their positions: generated
 * token i is expected to be draft_tokens[i + spec_align]. A generated token
 * that differs is either a substitution (the drafts go on at the same
 * alignment) or an insertion or deletion: when the last few generated
 * tokens occur together somewhere in the drafts, the alignment moves to
 * the occurrence nearest the old one.
 */
#include "runtime/engine_internal.h"

#define REALIGN_TOKENS 3

static int external_wants(const struct ifl_executor *ex, const struct xreq *q)
{
    (void)ex;
    return q->r.speculative.n_draft_tokens > 0;
}

/* Moves s's alignment to where its last generated tokens occur in d, if
 * they do; called when the newest generated token is not the one d has. */
static void realign(struct eseq *s, const int32_t *d, int32_t m)
{
    const int32_t *g = s->tokens + s->n_prompt;
    int32_t last = s->n_gen - 1; /* index of the newest generated token */
    int32_t L = s->n_gen < REALIGN_TOKENS ? s->n_gen : REALIGN_TOKENS;
    int32_t want = last + s->spec_align, best = -1;
    for (int32_t j = L - 1; j < m; j++) { /* j: where the newest would sit */
        int32_t k = 0;
        while (k < L && d[j - k] == g[last - k])
            k++;
        if (k == L && (best < 0 || (j > want ? j - want : want - j) <
                                       (best > want ? best - want : want - best)))
            best = j;
    }
    if (best >= 0)
        s->spec_align = best - last;
}

static int32_t external_propose(struct ifl_executor *ex, struct eseq *s, int32_t *draft,
                                int32_t max)
{
    (void)ex;
    const int32_t *d = s->q->drafts;
    int32_t m = s->q->r.speculative.n_draft_tokens;
    if (s->n_gen < 1)
        return 0;
    int32_t last = s->n_gen - 1, at = last + s->spec_align;
    if (at < 0 || at >= m || d[at] != s->tokens[s->n_prompt + last])
        realign(s, d, m);
    int32_t from = s->n_gen + s->spec_align, k = 0;
    if (from < 0)
        return 0;
    while (k < max && from + k < m) {
        draft[k] = d[from + k];
        k++;
    }
    return k;
}

const struct ifl_decoding ifl_decoding_external = {
    .name = "external",
    .wants = external_wants,
    .propose = external_propose,
    .accept = ifl_decoding_accept_drafts,
};
