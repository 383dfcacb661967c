/*
 * The per-sequence sampler of the executor: logits processing (bias, bans,
 * penalties), token choice (greedy, or temperature + top-k/top-p/min-p/
 * typical-p and a seeded draw), log-probabilities, and top-p decay.
 *
 * One step of one sequence, on the engine thread:
 *
 *     ifl_sampler_process(cfg, st, logits, n_vocab, prompt, n_prompt, gen, n_gen, &extras);
 *     (guided-decoding masks, logits post-processors, ...)
 *     tok = ifl_sampler_pick(cfg, st, logits, &logprob, top, n_top);
 *     ifl_sampler_accept(cfg, st, tok);
 *
 * Ownership and threads: struct ifl_sampler_state is single-owner (the
 * engine thread, one per executor slot). ifl_sampler_state_init allocates
 * everything, sized by n_vocab; reset, process, pick and accept allocate
 * nothing. The configuration and extras are borrowed for the duration of a
 * call only.
 *
 * Determinism: the draw of generated token number i (0-based) uses a
 * generator seeded from (cfg->seed, i) alone, where i counts accept() calls
 * since reset. So a sequence's tokens depend only on its seed and its
 * logits, never on what else shares the batch, and a state rebuilt after a
 * preemption (reset, then accept() each generated token again) continues
 * exactly as the original would have. Candidate order is a total order
 * (value, then token id), so no result depends on sort stability. The
 * passes over the whole row (the largest logit, the exponential pass and
 * its sums) run in the kernel table (kernels.h), whose every table gives
 * ref's bits; the rest of the vector code uses 4-lane SSE2-level
 * operations only. So results are the same on every x86-64 CPU.
 *
 * Cost per pick, n_vocab = 152K, measured on the (slow, shared) 2.5 GHz
 * build VM with the 4-lane exponential pass: greedy 0.1 ms; top-k <= 128
 * 0.1 ms; anything needing the full softmax (plain temperature, top-p,
 * min-p, log-probs) 0.7-1.4 ms, of which the exp pass is most; typical-p
 * or a nucleus of ~50K tokens up to 3 ms. The AVX-512 table's pass made a
 * 32000-token log-sum-exp 60 -> 16 us on a Zen 5.
 */
#ifndef IFL_RUNTIME_SAMPLER_H
#define IFL_RUNTIME_SAMPLER_H

#include <stdint.h>

#include "core/rng.h"
#include "inflight.h"

/* Fills every field with its default (TensorRT-LLM's): temperature 1,
 * top_k 0 (off), top_p 1 (off), top_p_min 1e-6, top_p_decay 1 (off),
 * top_p_reset_ids -1, min_p 0, typical_p 1, seed 0, min_tokens 0,
 * repetition_penalty 1, presence and frequency penalties 0,
 * no_repeat_ngram_size 0, beam_width 1, length_penalty 1,
 * early_stopping 1, ignore_eos 0. */
void ifl_sampling_default(struct ifl_sampling_config *c);

/* Checks every field of c. Returns 0, or IFL_EINVAL and a sentence in err
 * (optional, IFL_ERR_LEN bytes) that starts with the field's name, e.g.
 * "sampling.top_p: must be in (0, 1] (got 1.5)". Ranges:
 *   temperature >= 0 (finite), top_k >= 0, top_p in (0, 1],
 *   top_p_min in (0, 1], top_p_decay in (0, 1], top_p_reset_ids in
 *   [-1, n_vocab), min_p in [0, 1], typical_p in (0, 1],
 *   repetition_penalty > 0, presence/frequency_penalty finite,
 *   min_tokens >= 0, no_repeat_ngram_size >= 0, beam_width 1..16,
 *   length_penalty finite, early_stopping 0, 1 or 2, ignore_eos 0 or 1. */
int ifl_sampling_validate(const struct ifl_sampling_config *c, int32_t n_vocab, char *err);

/* Request-level inputs of ifl_sampler_process that are not in the sampling
 * config. All pointers are borrowed; any count may be 0. */
struct ifl_sampler_extras {
    /* tokens banned while n_gen < min_tokens: the request's end_id, or the
     * model's end-of-generation tokens when end_id is -1 */
    const int32_t *end_ids;
    int32_t n_end_ids;
    /* logits[ids[i]] += values[i]; -inf bans a token */
    const int32_t *bias_ids;
    const float *bias_values;
    int32_t n_bias;
    /* bad words: n_bad token sequences, concatenated in bad_tokens, their
     * lengths in bad_lens (as in struct ifl_request) */
    const int32_t *bad_tokens;
    const int32_t *bad_lens;
    int32_t n_bad;
};

/* Checks extras against the vocabulary: ids in [0, n_vocab), bias values
 * not NaN or +inf, bad-word lengths >= 1. IFL_EINVAL with a message naming
 * the array and index ("logit_bias_ids[2]: ..."), else 0. process() skips
 * out-of-range entries anyway, so an unchecked request cannot crash it. */
int ifl_sampler_check_extras(const struct ifl_sampler_extras *x, int32_t n_vocab, char *err);

/* One candidate token during pick: v = (logit - max logit) / temperature,
 * p = exp(v) (unnormalised), k = the sort key of the current filter. */
struct ifl_sampler_cand {
    int32_t id;
    float v;
    float p;
    float k;
};

#define IFL_SAMPLER_NBINS 2048

struct ifl_sampler_state {
    int32_t n_vocab;
    uint64_t seed;
    int64_t n_accepted; /* accept() calls since reset: the draw counter */
    float top_p;        /* current top_p (after decay and resets) */
    struct ifl_rng rng; /* this step's generator, reseeded by pick */

    /* generated tokens: counts and the distinct ids with a count > 0 */
    int32_t *counts;  /* [n_vocab] */
    int32_t *gen_ids; /* [n_vocab] distinct generated ids, n_gen_ids of them */
    int32_t n_gen_ids;
    /* prompt tokens: membership and the distinct ids */
    uint8_t *in_prompt;  /* [n_vocab] 1 if the token occurs in the prompt */
    int32_t *prompt_ids; /* [n_vocab] distinct prompt ids, n_prompt_ids of them */
    int32_t n_prompt_ids;

    /* scratch of pick */
    float *e;                      /* [n_vocab] exp(v) of candidates, 0 for the others */
    float *v;                      /* [n_vocab] (logit - max) / temperature */
    struct ifl_sampler_cand *cand; /* [n_vocab] survivors, when listed */
    int32_t dense;                 /* 1: the survivors are the tokens with e > 0 */
    int32_t n_cand;                /* number of survivors of the last filtering */
    double cand_total;             /* their summed p */
    double *bins;                  /* [2][IFL_SAMPLER_NBINS] histogram */
};

/* Allocates the state for a vocabulary of n_vocab tokens (about 34 bytes
 * per token: 5 MB for 152K). Returns 0, IFL_EINVAL (n_vocab < 1) or IFL_ENOMEM; on failure
 * the state needs no deinit (deinit is harmless all the same). */
int ifl_sampler_state_init(struct ifl_sampler_state *st, int32_t n_vocab);
/* Frees the arrays; a zeroed or deinitialised state is fine. */
void ifl_sampler_state_deinit(struct ifl_sampler_state *st);

/* Prepares st for a new request with the validated config c: seed, top_p,
 * empty generated counts, and the prompt's token set (for the repetition
 * penalty). O(previous request's distinct tokens + n_prompt); no
 * allocation. Ids outside [0, n_vocab) are ignored. */
void ifl_sampler_reset(struct ifl_sampler_state *st, const struct ifl_sampling_config *c,
                       const int32_t *prompt, int32_t n_prompt);

/* Rebuilds the generated-token counts from gen[0..n_gen) (the prompt set
 * and the draw counter are kept). For beam search, where one state serves
 * every beam of a request in turn: recount with the beam's tokens, then
 * process its row. O(previous distinct + n_gen). */
void ifl_sampler_recount(struct ifl_sampler_state *st, const int32_t *gen, int32_t n_gen);

/* Transforms one row of logits in place, in this order:
 *  1. logit bias: logits[id] += value;
 *  2. bad words: a one-token bad word is always banned; a longer one bans
 *     its last token when its other tokens equal the end of prompt + gen;
 *  3. min_tokens: while n_gen < c->min_tokens every extras end id is banned;
 *  4. repetition penalty over every token of prompt and gen (each distinct
 *     token once): logit > 0 ? logit / r : logit * r (CTRL, as in HF);
 *  5. presence and frequency penalties over the generated tokens only:
 *     logit -= presence * (count > 0) + frequency * count (as OpenAI);
 *  6. no_repeat_ngram_size n: bans every token that would complete an
 *     n-gram already present in prompt + gen (n = 1: every token seen).
 * Banning sets the logit to -inf. Counts come from the state (accept, or
 * recount for beams); prompt and gen are read for bad words and n-grams.
 * ignore_eos bans nothing here: end tokens stay sampleable and the executor
 * simply does not stop on them (TensorRT-LLM's and vLLM's meaning).
 * Cost: O(distinct tokens + bad-word tokens + n-gram scan of prompt+gen). */
void ifl_sampler_process(const struct ifl_sampling_config *c, struct ifl_sampler_state *st,
                         float *logits, int32_t n_vocab, const int32_t *prompt, int32_t n_prompt,
                         const int32_t *gen, int32_t n_gen, const struct ifl_sampler_extras *x);

/* Computes the distribution pick draws from, without drawing. Each token
 * gets v = (logit - max) / temperature and weight p = ifl_sampler_exp(v);
 * tokens with v < -64 (weight ratio under 1e-27) and -inf/NaN logits are
 * never candidates. Then, each filter seeing the renormalised output of the
 * one before (as in HF, vLLM and TensorRT-LLM):
 *   top-k     the k highest logits;
 *   top-p     the shortest prefix, by logit, whose mass reaches the state's
 *             current top_p;
 *   min-p     p >= min_p * p_max;
 *   typical-p the shortest prefix, in order of |surprisal - entropy|,
 *             whose mass reaches typical_p.
 * Orders are total: ties go to the lower token id. Sets *out to the
 * survivors (a view into st, valid until the next call; p unnormalised;
 * in an unspecified but deterministic order) and returns their number: at
 * least 1 unless every logit is -inf or NaN (then 0). Meaningless for temperature 0. For tests and
 * for future speculative decoding (acceptance needs the filtered distribution). */
int32_t ifl_sampler_dist(const struct ifl_sampling_config *c, struct ifl_sampler_state *st,
                         const float *logits, const struct ifl_sampler_cand **out);

/* Chooses the next token from processed logits [n_vocab].
 * temperature 0: greedy, the highest logit, lowest id on ties (the filters
 * do not apply). Otherwise one draw from ifl_sampler_dist's distribution.
 * A row with no finite logit yields the greedy answer (token 0 if all are
 * -inf).
 * logprob (optional): the chosen token's log-probability under
 * log_softmax(logits), the processed logits before temperature and filters,
 * which is what OpenAI-style APIs report. top (optional, n_top entries):
 * the n_top most likely tokens under that same distribution, descending,
 * ties by lower id. Costs: see the top of this file. */
int32_t ifl_sampler_pick(const struct ifl_sampling_config *c, struct ifl_sampler_state *st,
                         const float *logits, float *logprob, struct ifl_top_logprob *top,
                         int32_t n_top);

/* Speculative sampling (speculative.accept = rejection) at a position
 * where a proposer offered draft, drawn from its distribution q
 * ([n_vocab], normalised; NULL: a proposal made deterministically, q
 * one-hot at the draft). With p ifl_sampler_dist's distribution
 * normalised: the draft is kept with probability min(1, p(d) / q(d)),
 * else the token is drawn from max(0, p - q) renormalised, so that the
 * token follows p exactly while drafts are kept with probability
 * sum min(p, q) (against sum p q for an independent draw: more, when the
 * drafts were sampled from a q near p). Both uniforms come from a
 * generator seeded by (seed, draw number) alone: reproducible and
 * independent of batching. temperature 0, or no candidates:
 * ifl_sampler_pick. logprob and top as for ifl_sampler_pick. */
int32_t ifl_sampler_pick_spec(const struct ifl_sampling_config *c, struct ifl_sampler_state *st,
                              const float *logits, int32_t draft, const float *q, float *logprob,
                              struct ifl_top_logprob *top, int32_t n_top);

/* Records a generated token: counts for the penalties, the draw counter,
 * and top_p decay: when token == top_p_reset_ids (>= 0) top_p goes back to
 * c->top_p, else when top_p_decay < 1 top_p = max(top_p * decay,
 * top_p_min). Note that decay applies even when c->top_p is 1 (off), as in
 * TensorRT-LLM. */
void ifl_sampler_accept(const struct ifl_sampling_config *c, struct ifl_sampler_state *st,
                        int32_t token);

/* log(sum(exp(logits))) over one row, skipping NaN and terms below
 * e^-64 of the largest; -inf if all are -inf. */
double ifl_sampler_logsumexp(const float *logits, int32_t n_vocab);

/* exp(x) for x in [-87, 0] (smaller x gives exp(-87)), relative error
 * under 1e-7: ifl_kernels_exp. The sampler's weights are computed with it,
 * identically in every kernel table's row pass and in its scalar paths. */
float ifl_sampler_exp(float x);

#endif
