/*
 * Per-sequence sampler (see sampler.h for the contract and the order of
 * the transforms).
 *
 * Speed: n_vocab reaches 152K and a pick must cost well under a
 * millisecond, so nothing sorts the whole vocabulary. Tokens more than 64
 * (scaled) nats below the best are dropped up front; top-k, top-p and
 * typical-p each need only "the shortest prefix, in key order, whose weight
 * reaches a target", which sorted_prefix finds with a 1024-bin histogram of
 * the keys: one pass sums the weight per bin, the bins up to the one where
 * the running sum crosses the target are moved to the front and only they
 * are sorted. Bins are monotone in the key, so the front is exactly a
 * prefix of the total order and the result equals a full sort's.
 *
 * References: repetition penalty from CTRL (Keskar et al. 2019) as HF
 * applies it; presence/frequency penalties from OpenAI's API docs; typical
 * sampling from Meister et al. 2022; min-p from Nguyen et al. 2024; top-p
 * decay from TensorRT-LLM's sampling config.
 */
#include "runtime/sampler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "kernels/kernels.h"

#define CUTOFF 64.0f     /* scaled nats below the best token that stay candidates */
#define SMALL_SORT 256   /* sets this small are simply sorted */
#define TOP_K_INSERT 128 /* top-k up to this by insertion, larger by histogram */

void ifl_sampling_default(struct ifl_sampling_config *c)
{
    memset(c, 0, sizeof(*c));
    c->beam_width = 1;
    c->top_k = 0;
    c->top_p = 1.0f;
    c->top_p_min = 1e-6f;
    c->top_p_decay = 1.0f;
    c->top_p_reset_ids = -1;
    c->min_p = 0.0f;
    c->typical_p = 1.0f;
    c->temperature = 1.0f;
    c->seed = 0;
    c->min_tokens = 0;
    c->repetition_penalty = 1.0f;
    c->presence_penalty = 0.0f;
    c->frequency_penalty = 0.0f;
    c->no_repeat_ngram_size = 0;
    c->length_penalty = 1.0f;
    c->early_stopping = 1;
    c->ignore_eos = 0;
}

static int bad_f(char *err, const char *field, const char *rule, float got)
{
    return ifl_err(err, IFL_EINVAL, "sampling.%s: must be %s (got %g)", field, rule, (double)got);
}

static int bad_i(char *err, const char *field, const char *rule, int32_t got)
{
    return ifl_err(err, IFL_EINVAL, "sampling.%s: must be %s (got %d)", field, rule, (int)got);
}

/* Written as !(in range) so that NaN fails every check. */
int ifl_sampling_validate(const struct ifl_sampling_config *c, int32_t n_vocab, char *err)
{
    if (!(c->temperature >= 0 && isfinite(c->temperature)))
        return bad_f(err, "temperature", "a finite number >= 0", c->temperature);
    if (c->top_k < 0)
        return bad_i(err, "top_k", ">= 0 (0: off)", c->top_k);
    if (!(c->top_p > 0 && c->top_p <= 1))
        return bad_f(err, "top_p", "in (0, 1]", c->top_p);
    if (!(c->top_p_min > 0 && c->top_p_min <= 1))
        return bad_f(err, "top_p_min", "in (0, 1]", c->top_p_min);
    if (!(c->top_p_decay > 0 && c->top_p_decay <= 1))
        return bad_f(err, "top_p_decay", "in (0, 1]", c->top_p_decay);
    if (c->top_p_reset_ids < -1 || c->top_p_reset_ids >= n_vocab)
        return ifl_err(err, IFL_EINVAL,
                       "sampling.top_p_reset_ids: must be -1 or a token id below %d (got %d)",
                       (int)n_vocab, (int)c->top_p_reset_ids);
    if (!(c->min_p >= 0 && c->min_p <= 1))
        return bad_f(err, "min_p", "in [0, 1]", c->min_p);
    if (!(c->typical_p > 0 && c->typical_p <= 1))
        return bad_f(err, "typical_p", "in (0, 1]", c->typical_p);
    if (c->min_tokens < 0)
        return bad_i(err, "min_tokens", ">= 0", c->min_tokens);
    if (!(c->repetition_penalty > 0 && isfinite(c->repetition_penalty)))
        return bad_f(err, "repetition_penalty", "a finite number > 0 (1: off)",
                     c->repetition_penalty);
    if (!isfinite(c->presence_penalty))
        return bad_f(err, "presence_penalty", "finite", c->presence_penalty);
    if (!isfinite(c->frequency_penalty))
        return bad_f(err, "frequency_penalty", "finite", c->frequency_penalty);
    if (c->no_repeat_ngram_size < 0)
        return bad_i(err, "no_repeat_ngram_size", ">= 0 (0: off)", c->no_repeat_ngram_size);
    if (c->beam_width < 1 || c->beam_width > 16)
        return bad_i(err, "beam_width", "in 1..16", c->beam_width);
    if (!isfinite(c->length_penalty))
        return bad_f(err, "length_penalty", "finite", c->length_penalty);
    if (c->early_stopping < 0 || c->early_stopping > 2)
        return bad_i(err, "early_stopping", "0 (heuristic), 1 (stop) or 2 (never)",
                     c->early_stopping);
    if (c->ignore_eos != 0 && c->ignore_eos != 1)
        return bad_i(err, "ignore_eos", "0 or 1", c->ignore_eos);
    return 0;
}

int ifl_sampler_check_extras(const struct ifl_sampler_extras *x, int32_t n_vocab, char *err)
{
    for (int32_t i = 0; i < x->n_end_ids; i++)
        if (x->end_ids[i] < 0 || x->end_ids[i] >= n_vocab)
            return ifl_err(err, IFL_EINVAL, "end_ids[%d]: token %d is not in [0, %d)", (int)i,
                           (int)x->end_ids[i], (int)n_vocab);
    for (int32_t i = 0; i < x->n_bias; i++) {
        if (x->bias_ids[i] < 0 || x->bias_ids[i] >= n_vocab)
            return ifl_err(err, IFL_EINVAL, "logit_bias_ids[%d]: token %d is not in [0, %d)",
                           (int)i, (int)x->bias_ids[i], (int)n_vocab);
        float v = x->bias_values[i];
        if (isnan(v) || v == INFINITY)
            return ifl_err(err, IFL_EINVAL,
                           "logit_bias_values[%d]: must be a number or -inf (got %g)", (int)i,
                           (double)v);
    }
    int32_t off = 0;
    for (int32_t w = 0; w < x->n_bad; w++) {
        int32_t len = x->bad_lens[w];
        if (len < 1)
            return ifl_err(err, IFL_EINVAL, "bad_words_lens[%d]: must be >= 1 (got %d)", (int)w,
                           (int)len);
        for (int32_t j = 0; j < len; j++) {
            int32_t t = x->bad_tokens[off + j];
            if (t < 0 || t >= n_vocab)
                return ifl_err(err, IFL_EINVAL, "bad_words_tokens[%d]: token %d is not in [0, %d)",
                               (int)(off + j), (int)t, (int)n_vocab);
        }
        off += len;
    }
    return 0;
}

int ifl_sampler_state_init(struct ifl_sampler_state *st, int32_t n_vocab)
{
    memset(st, 0, sizeof(*st));
    if (n_vocab < 1)
        return IFL_EINVAL;
    size_t n = (size_t)n_vocab;
    st->n_vocab = n_vocab;
    st->top_p = 1.0f;
    st->counts = calloc(n, sizeof(*st->counts));
    st->gen_ids = malloc(n * sizeof(*st->gen_ids));
    st->in_prompt = calloc(n, sizeof(*st->in_prompt));
    st->prompt_ids = malloc(n * sizeof(*st->prompt_ids));
    st->cand = malloc(n * sizeof(*st->cand));
    st->bins = malloc(2 * IFL_SAMPLER_NBINS * sizeof(*st->bins));
    st->e = malloc(n * sizeof(*st->e));
    st->v = malloc(n * sizeof(*st->v));
    if (!st->counts || !st->gen_ids || !st->in_prompt || !st->prompt_ids || !st->cand ||
        !st->bins || !st->e || !st->v) {
        ifl_sampler_state_deinit(st);
        return IFL_ENOMEM;
    }
    return 0;
}

void ifl_sampler_state_deinit(struct ifl_sampler_state *st)
{
    free(st->counts);
    free(st->gen_ids);
    free(st->in_prompt);
    free(st->prompt_ids);
    free(st->cand);
    free(st->bins);
    free(st->e);
    free(st->v);
    memset(st, 0, sizeof(*st));
}

static void clear_gen(struct ifl_sampler_state *st)
{
    for (int32_t i = 0; i < st->n_gen_ids; i++)
        st->counts[st->gen_ids[i]] = 0;
    st->n_gen_ids = 0;
}

static void count_gen(struct ifl_sampler_state *st, int32_t t)
{
    if (t < 0 || t >= st->n_vocab)
        return;
    if (st->counts[t]++ == 0)
        st->gen_ids[st->n_gen_ids++] = t;
}

void ifl_sampler_reset(struct ifl_sampler_state *st, const struct ifl_sampling_config *c,
                       const int32_t *prompt, int32_t n_prompt)
{
    clear_gen(st);
    for (int32_t i = 0; i < st->n_prompt_ids; i++)
        st->in_prompt[st->prompt_ids[i]] = 0;
    st->n_prompt_ids = 0;
    for (int32_t i = 0; i < n_prompt; i++) {
        int32_t t = prompt[i];
        if (t >= 0 && t < st->n_vocab && !st->in_prompt[t]) {
            st->in_prompt[t] = 1;
            st->prompt_ids[st->n_prompt_ids++] = t;
        }
    }
    st->seed = c->seed;
    st->n_accepted = 0;
    st->top_p = c->top_p;
    st->n_cand = 0;
    st->cand_total = 0;
}

void ifl_sampler_recount(struct ifl_sampler_state *st, const int32_t *gen, int32_t n_gen)
{
    clear_gen(st);
    for (int32_t i = 0; i < n_gen; i++)
        count_gen(st, gen[i]);
}

void ifl_sampler_accept(const struct ifl_sampling_config *c, struct ifl_sampler_state *st,
                        int32_t token)
{
    count_gen(st, token);
    st->n_accepted++;
    if (c->top_p_reset_ids >= 0 && token == c->top_p_reset_ids)
        st->top_p = c->top_p;
    else if (c->top_p_decay < 1)
        st->top_p = fmaxf(st->top_p * c->top_p_decay, c->top_p_min);
}

/* ---- processing ---- */

/* Token i of prompt + gen. */
static inline int32_t seq_at(const int32_t *prompt, int32_t n_prompt, const int32_t *gen, int32_t i)
{
    return i < n_prompt ? prompt[i] : gen[i - n_prompt];
}

static inline void ban(float *logits, int32_t n_vocab, int32_t t)
{
    if (t >= 0 && t < n_vocab)
        logits[t] = -INFINITY;
}

static inline float repeat_penalised(float l, float r)
{
    return l > 0 ? l / r : l * r;
}

static void ban_ngrams(float *logits, int32_t n_vocab, int32_t n, const int32_t *prompt,
                       int32_t n_prompt, const int32_t *gen, int32_t n_gen)
{
    int32_t total = n_prompt + n_gen;
    if (total < n)
        return;
    /* the n-1 latest tokens start at s; an earlier n-gram at i whose first
     * n-1 tokens equal them bans its last token */
    int32_t s = total - (n - 1);
    int32_t last = n >= 2 ? seq_at(prompt, n_prompt, gen, total - 1) : 0;
    for (int32_t i = 0; i + n <= total; i++) {
        if (n >= 2 && seq_at(prompt, n_prompt, gen, i + n - 2) != last)
            continue;
        int32_t j = 0;
        while (j < n - 1 &&
               seq_at(prompt, n_prompt, gen, i + j) == seq_at(prompt, n_prompt, gen, s + j))
            j++;
        if (j == n - 1)
            ban(logits, n_vocab, seq_at(prompt, n_prompt, gen, i + n - 1));
    }
}

void ifl_sampler_process(const struct ifl_sampling_config *c, struct ifl_sampler_state *st,
                         float *logits, int32_t n_vocab, const int32_t *prompt, int32_t n_prompt,
                         const int32_t *gen, int32_t n_gen, const struct ifl_sampler_extras *x)
{
    IFL_ASSERT(n_vocab == st->n_vocab);
    int32_t total = n_prompt + n_gen;
    if (x) {
        for (int32_t i = 0; i < x->n_bias; i++) {
            int32_t t = x->bias_ids[i];
            if (t >= 0 && t < n_vocab)
                logits[t] += x->bias_values[i];
        }
        int32_t off = 0;
        for (int32_t w = 0; w < x->n_bad; w++) {
            int32_t len = x->bad_lens[w];
            if (len < 1)
                continue;
            const int32_t *t = x->bad_tokens + off;
            off += len;
            if (len - 1 > total)
                continue;
            int32_t j = 0, s = total - (len - 1);
            while (j < len - 1 && seq_at(prompt, n_prompt, gen, s + j) == t[j])
                j++;
            if (j == len - 1)
                ban(logits, n_vocab, t[len - 1]);
        }
        if (n_gen < c->min_tokens)
            for (int32_t i = 0; i < x->n_end_ids; i++)
                ban(logits, n_vocab, x->end_ids[i]);
    }
    if (c->repetition_penalty != 1.0f) {
        float r = c->repetition_penalty;
        for (int32_t i = 0; i < st->n_prompt_ids; i++) {
            int32_t t = st->prompt_ids[i];
            logits[t] = repeat_penalised(logits[t], r);
        }
        for (int32_t i = 0; i < st->n_gen_ids; i++) {
            int32_t t = st->gen_ids[i];
            if (!st->in_prompt[t])
                logits[t] = repeat_penalised(logits[t], r);
        }
    }
    if (c->presence_penalty != 0.0f || c->frequency_penalty != 0.0f) {
        for (int32_t i = 0; i < st->n_gen_ids; i++) {
            int32_t t = st->gen_ids[i];
            logits[t] -= c->presence_penalty + c->frequency_penalty * (float)st->counts[t];
        }
    }
    if (c->no_repeat_ngram_size > 0)
        ban_ngrams(logits, n_vocab, c->no_repeat_ngram_size, prompt, n_prompt, gen, n_gen);
}

/* ---- choosing ---- */

/* Four-lane vectors (GCC/clang vector extensions): SSE2 on any x86-64,
 * no ISA flags needed, and the same IEEE operations on every machine, so
 * results do not depend on the CPU. */
typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

/* exp(x) for the sampler's weights: the kernels' (kernels.h), which every
 * kernel table's exp_pass computes lane by lane. */
float ifl_sampler_exp(float x)
{
    return ifl_kernels_exp(x);
}

static inline v4f splat(float x)
{
    return (v4f){x, x, x, x};
}

/* The passes over the whole vocabulary run in the best kernel table: each
 * table's results equal the scalar reference's bit for bit (kernels.h),
 * so what is sampled does not depend on the CPU. */
static const struct ifl_kernels *kern(void)
{
    return ifl_kernels_best();
}

/* The largest logit, NaN ignored; -inf if there is none. */
static float max_logit(const float *l, int32_t n)
{
    return kern()->max_f32(n, l);
}

/* The exponential pass over a whole row (kernels.h: struct ifl_exp_pass):
 * for each token v = (l - m) / t; a candidate when v >= -CUTOFF and
 * e = exp(v) >= min_e. Writes e (0 for non-candidates) and v when the
 * arrays are given; returns the sum of e, and the sum of e * v and the
 * number of candidates through the optional pointers. */
static double exp_pass(const float *l, int32_t n, float m, float t, float min_e, float *e, float *v,
                       double *sum_ev, int32_t *count)
{
    const struct ifl_exp_pass a = {.m = m,
                                   .t = t,
                                   .cutoff = CUTOFF,
                                   .min_e = min_e,
                                   .e = e,
                                   .v = v,
                                   .sum_ev = sum_ev,
                                   .count = count};
    return kern()->exp_pass(n, l, &a);
}

double ifl_sampler_logsumexp(const float *logits, int32_t n_vocab)
{
    float m = max_logit(logits, n_vocab);
    if (!(m > -INFINITY) || m == INFINITY)
        return m;
    return m + log(exp_pass(logits, n_vocab, m, 1.0f, 0.0f, NULL, NULL, NULL, NULL));
}

static int32_t argmax(const float *logits, int32_t n)
{
    float m = max_logit(logits, n);
    if (!(m > -INFINITY))
        return 0;
    return (int32_t)kern()->find_f32(n, logits, m);
}

/* Key ascending, then id ascending: a total order. */
static int cand_cmp(const void *a, const void *b)
{
    const struct ifl_sampler_cand *x = a, *y = b;
    if (x->k != y->k)
        return x->k < y->k ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

static void sort_cands(struct ifl_sampler_cand *c, int32_t n)
{
    if (n > 1)
        qsort(c, (size_t)n, sizeof(*c), cand_cmp);
}

/* Continues a prefix scan over c[from..to): returns the length of the
 * prefix at which the running weight first reaches target, or -1. */
static int32_t scan_prefix(const struct ifl_sampler_cand *c, int32_t from, int32_t to, double *cum,
                           double target, int by_mass)
{
    for (int32_t i = from; i < to; i++) {
        *cum += by_mass ? (double)c[i].p : 1.0;
        if (*cum >= target)
            return i + 1;
    }
    return -1;
}

static inline int32_t bin_of(float k, float kmin, double scale)
{
    double b = ((double)k - (double)kmin) * scale;
    if (b < 0)
        return 0;
    if (b >= IFL_SAMPLER_NBINS - 1)
        return IFL_SAMPLER_NBINS - 1;
    return (int32_t)b;
}

/* The first bin at which the running weight reaches target (the last bin
 * if none); *before gets the weight of the bins before it. */
static int32_t crossing_bin(const double *bins, double target, double *before)
{
    double acc = 0;
    for (int32_t b = 0; b < IFL_SAMPLER_NBINS - 1; b++) {
        if (acc + bins[b] >= target) {
            *before = acc;
            return b;
        }
        acc += bins[b];
    }
    *before = acc;
    return IFL_SAMPLER_NBINS - 1;
}

/* Moves the entries of c[from..n) whose bin is b to c[from..) and
 * returns the new end of that group. */
static int32_t gather_bin(struct ifl_sampler_cand *c, int32_t from, int32_t n, int32_t b,
                          float kmin, double scale)
{
    for (int32_t i = from; i < n; i++)
        if (bin_of(c[i].k, kmin, scale) == b) {
            struct ifl_sampler_cand t = c[i];
            c[i] = c[from];
            c[from++] = t;
        }
    return from;
}

/* Finds the shortest prefix, in (key, id) order, of the list c[0..n) whose
 * weight (p if by_mass, else 1 per entry) reaches target; moves it to the
 * front and returns its length (n when the whole set falls short). Only
 * the histogram bin where the target is crossed gets sorted: every entry
 * of an earlier bin belongs to the prefix anyway. The front is therefore
 * not in key order. */
static int32_t sorted_prefix(struct ifl_sampler_state *st, struct ifl_sampler_cand *c, int32_t n,
                             double target, int by_mass)
{
    double cum = 0;
    float kmin = INFINITY, kmax = -INFINITY;
    for (int32_t i = 0; i < n && n > SMALL_SORT; i++) {
        kmin = fminf(kmin, c[i].k);
        kmax = fmaxf(kmax, c[i].k);
    }
    if (n <= SMALL_SORT || !(kmax > kmin) || !isfinite(kmax - kmin)) {
        sort_cands(c, n);
        int32_t j = scan_prefix(c, 0, n, &cum, target, by_mass);
        return j < 0 ? n : j;
    }
    double scale = IFL_SAMPLER_NBINS / ((double)kmax - (double)kmin);
    double *bins = st->bins;
    memset(bins, 0, IFL_SAMPLER_NBINS * sizeof(*bins));
    for (int32_t i = 0; i < n; i++)
        bins[bin_of(c[i].k, kmin, scale)] += by_mass ? (double)c[i].p : 1.0;
    int32_t last = crossing_bin(bins, target, &cum);
    int32_t front = 0;
    for (int32_t i = 0; i < n; i++)
        if (bin_of(c[i].k, kmin, scale) < last) {
            struct ifl_sampler_cand t = c[i];
            c[i] = c[front];
            c[front++] = t;
        }
    for (;;) {
        int32_t end = gather_bin(c, front, n, last, kmin, scale);
        sort_cands(c + front, end - front);
        int32_t j = scan_prefix(c, front, end, &cum, target, by_mass);
        if (j >= 0)
            return j;
        /* rounding left the bin just short: the next bin follows it */
        if (end == n || last == IFL_SAMPLER_NBINS - 1)
            return n;
        front = end;
        last++;
    }
}

/* Sort keys. By probability: the raw logit, descending (exact, and the
 * same order as v). Typical: |v - E[v]| ascending. */
static inline float typical_key(float v, double ev)
{
    return (float)fabs((double)v - ev);
}

/* Histogram bin over a key in [0, CUTOFF]: 32 bins per nat. */
static inline int32_t dense_bin(float key)
{
    float b = key * (IFL_SAMPLER_NBINS / CUTOFF);
    return b < (float)(IFL_SAMPLER_NBINS - 1) ? (int32_t)b : IFL_SAMPLER_NBINS - 1;
}

/* 1 if any of x[0..16) is > t (NaN never is). */
static inline int any_above16(const float *x, float t)
{
    v4f tt = splat(t), a, b, c, d;
    memcpy(&a, x, sizeof(a));
    memcpy(&b, x + 4, sizeof(b));
    memcpy(&c, x + 8, sizeof(c));
    memcpy(&d, x + 12, sizeof(d));
    v4i m = (a > tt) | (b > tt) | (c > tt) | (d > tt);
    return (m[0] | m[1] | m[2] | m[3]) != 0;
}

/* The first bin below nb at which the running weight reaches target, or
 * -1; *before gets the weight of the bins before it. */
static int32_t crossing_within(const double *bins, int32_t nb, double target, double *before)
{
    double acc = 0;
    for (int32_t b = 0; b < nb; b++) {
        if (acc + bins[b] >= target) {
            *before = acc;
            return b;
        }
        acc += bins[b];
    }
    return -1;
}

/* A first histogram covers only the bins of the best FOCUS_BINS / 32 nats
 * of the logit order, skipping (16 at a time) the tokens below: the
 * prefix usually ends there. */
#define FOCUS_BINS 448

/* Sums over the dense survivors (e > 0): weight, weight * v, count.
 * Non-survivors have e = 0 and a finite v, so they add nothing. */
static double dense_sums(const struct ifl_sampler_state *st, double *sum_ev, int32_t *count)
{
    const float *e = st->e, *v = st->v;
    int32_t n = st->n_vocab, i = 0, cnt = 0;
    double z = 0, sev = 0;
    for (; i + 16 <= n; i += 16) {
        v4f s = splat(0), sv = splat(0);
        v4i c = {0, 0, 0, 0};
        for (int j = 0; j < 16; j += 4) {
            v4f ee, vv;
            memcpy(&ee, e + i + j, sizeof(ee));
            memcpy(&vv, v + i + j, sizeof(vv));
            s += ee;
            sv += ee * vv;
            c -= ee > splat(0.0f);
        }
        z += (double)((s[0] + s[1]) + (s[2] + s[3]));
        sev += (double)((sv[0] + sv[1]) + (sv[2] + sv[3]));
        cnt += c[0] + c[1] + c[2] + c[3];
    }
    for (; i < n; i++) {
        z += e[i];
        sev += (double)(e[i] * v[i]);
        cnt += e[i] > 0;
    }
    *sum_ev = sev;
    *count = cnt;
    return z;
}

/* Histogram of the dense survivors over bins [from, NBINS) (a token of
 * an earlier bin adds nothing). Branch-free, alternating between two
 * copies of the bins so that runs of tokens in one bin do not wait on each
 * other's stores. Returns nothing; the caller reads st->bins. */
static void dense_hist(struct ifl_sampler_state *st, int typical, double ev, int by_mass,
                       int32_t from, int32_t upto, float vskip)
{
    const float *e = st->e, *v = st->v;
    double *b0 = st->bins, *b1 = st->bins + IFL_SAMPLER_NBINS;
    int32_t n = st->n_vocab;
    memset(b1, 0, IFL_SAMPLER_NBINS * sizeof(*b1));
    for (int32_t i = 0; i < n; i += 16) {
        int32_t end = i + 16 <= n ? i + 16 : n;
        if (end - i == 16 && vskip > -INFINITY && !any_above16(v + i, vskip))
            continue;
        for (int32_t j = i; j < end; j++) {
            int32_t b = dense_bin(typical ? typical_key(v[j], ev) : -v[j]);
            double w = by_mass ? (double)e[j] : (double)(e[j] > 0);
            w = b >= from ? w : 0.0;
            b = b < upto ? b : upto;
            if (j & 1)
                b1[b] += w;
            else
                b0[b] += w;
        }
    }
    for (int32_t b = 0; b < IFL_SAMPLER_NBINS; b++)
        b0[b] += b1[b];
}

/* The dense form of sorted_prefix, over the survivors of exp_pass
 * (st->e[i] > 0): keeps the shortest prefix whose weight (e, or 1 per
 * token) reaches target and zeroes e of every other token. typical 0:
 * order by logit (binned by -v, which is monotone in it); typical 1: by
 * typical_key. Only the bin where the target is crossed gets sorted (in
 * st->cand), with the next one in reserve for rounding. */
static void dense_cut(struct ifl_sampler_state *st, const float *l, int typical, double ev,
                      double target, int by_mass)
{
    float *e = st->e;
    const float *v = st->v;
    struct ifl_sampler_cand *cd = st->cand;
    int32_t n = st->n_vocab;
    double *bins = st->bins;
    double cum = 0;
    int32_t last = -1;
    /* blocks whose v are all below this hold no token of the focus bins */
    float vskip = -(float)FOCUS_BINS / (IFL_SAMPLER_NBINS / CUTOFF) - 0.5f;
    memset(bins, 0, IFL_SAMPLER_NBINS * sizeof(*bins));
    if (!typical) {
        /* bins past the focus are lumped into bin FOCUS_BINS */
        dense_hist(st, 0, 0, by_mass, 0, FOCUS_BINS, vskip);
        last = crossing_within(bins, FOCUS_BINS, target, &cum);
    }
    if (last < 0) {
        /* typical, or the prefix reaches past the focus: every bin (the
         * focus bins are already counted) */
        int32_t from = typical ? 0 : FOCUS_BINS;
        bins[from] = 0;
        dense_hist(st, typical, ev, by_mass, from, IFL_SAMPLER_NBINS - 1, -INFINITY);
        last = crossing_within(bins, IFL_SAMPLER_NBINS, target, &cum);
        if (last < 0)
            return; /* the whole set falls short: keep it */
        vskip = -INFINITY;
    }
    /* one pass: the crossing bin to the front of cd, the next one to the
     * back, every later token zeroed. By logit, bin(-v) < b exactly when
     * -v * 32 < b (truncation), which classifies four lanes at once. */
    const float scale = IFL_SAMPLER_NBINS / CUTOFF;
    const v4f lo = splat((float)last);
    const v4f hi = splat(last + 2 < IFL_SAMPLER_NBINS ? (float)(last + 2) : INFINITY);
    int32_t na = 0, nb = n;
    for (int32_t i = 0; i < n; i += 16) {
        int32_t end = i + 16 <= n ? i + 16 : n;
        if (end - i == 16 && !typical) {
            if (vskip > -INFINITY && !any_above16(v + i, vskip)) {
                memset(e + i, 0, 16 * sizeof(*e));
                continue;
            }
            v4i mid = {0, 0, 0, 0};
            for (int32_t j = 0; j < 16; j += 4) {
                v4f x, ee;
                memcpy(&x, v + i + j, sizeof(x));
                memcpy(&ee, e + i + j, sizeof(ee));
                x = -x * scale;
                v4i beyond = x >= hi, before = x < lo;
                ee = (v4f)((v4i)ee & ~beyond);
                memcpy(e + i + j, &ee, sizeof(ee));
                mid |= ~beyond & ~before & (ee > splat(0.0f));
            }
            if (!(mid[0] | mid[1] | mid[2] | mid[3]))
                continue;
        }
        for (int32_t j = i; j < end; j++) {
            if (!(e[j] > 0))
                continue;
            float k = typical ? typical_key(v[j], ev) : -v[j];
            int32_t b = dense_bin(k);
            if (b < last)
                continue;
            struct ifl_sampler_cand x = {j, v[j], e[j], typical ? k : -l[j]};
            if (b == last)
                cd[na++] = x;
            else if (b == last + 1)
                cd[--nb] = x;
            else
                e[j] = 0;
        }
    }
    int32_t end = na + (n - nb);
    memmove(cd + na, cd + nb, (size_t)(n - nb) * sizeof(*cd));
    sort_cands(cd, na);
    int32_t keep = scan_prefix(cd, 0, na, &cum, target, by_mass);
    if (keep < 0) {
        /* rounding left the bin just short: the next bin follows it */
        sort_cands(cd + na, end - na);
        keep = scan_prefix(cd, na, end, &cum, target, by_mass);
        if (keep < 0)
            keep = end;
    }
    for (int32_t i = keep; i < end; i++)
        e[cd[i].id] = 0;
}

/* The top k (<= TOP_K_INSERT) candidates by logit (ties: lower id) into
 * st->cand, sorted. */
static int32_t select_top_k(struct ifl_sampler_state *st, const float *l, float m, float t,
                            int32_t k)
{
    struct ifl_sampler_cand *cd = st->cand;
    int32_t n = st->n_vocab;
    /* insertion into a sorted array; most blocks of 16 fail the first
     * comparison */
    int32_t cnt = 0;
    for (int32_t i0 = 0; i0 < n; i0 += 16) {
        int32_t end = i0 + 16 <= n ? i0 + 16 : n;
        if (end - i0 == 16 && !any_above16(l + i0, cnt == k ? -cd[k - 1].k : -INFINITY))
            continue;
        for (int32_t i = i0; i < end; i++) {
            float x = l[i];
            if (!(x > -INFINITY) || (cnt == k && !(x > -cd[k - 1].k)))
                continue;
            float v = t != 1.0f ? (x - m) / t : x - m;
            if (!(v >= -CUTOFF))
                continue;
            int32_t j = cnt < k ? cnt++ : k - 1;
            while (j > 0 && x > -cd[j - 1].k) {
                cd[j] = cd[j - 1];
                j--;
            }
            cd[j] = (struct ifl_sampler_cand){i, v, 0.0f, -x};
        }
    }
    for (int32_t i = 0; i < cnt; i++)
        cd[i].p = ifl_sampler_exp(cd[i].v);
    return cnt;
}

static double sum_p(const struct ifl_sampler_cand *c, int32_t n)
{
    double s = 0;
    for (int32_t i = 0; i < n; i++)
        s += c[i].p;
    return s;
}

/* The filters of ifl_sampler_dist. The survivors end up either listed in
 * st->cand (st->dense 0: small top-k, or +inf logits) or as the tokens
 * with st->e[i] > 0 (st->dense 1). *lse_t1 gets log-sum-exp of the
 * logits when it came for free (temperature 1), else NAN. */
static int32_t filter(const struct ifl_sampling_config *c, struct ifl_sampler_state *st,
                      const float *l, double *lse_t1)
{
    int32_t n = st->n_vocab;
    struct ifl_sampler_cand *cd = st->cand;
    float t = c->temperature, top_p = st->top_p;
    *lse_t1 = NAN;
    st->dense = 0;
    st->n_cand = 0;
    st->cand_total = 0;
    float m = max_logit(l, n);
    if (!(m > -INFINITY))
        return 0;
    int32_t nc = 0;
    if (m == INFINITY) {
        for (int32_t i = 0; i < n; i++)
            if (l[i] == INFINITY)
                cd[nc++] = (struct ifl_sampler_cand){i, 0.0f, 1.0f, -INFINITY};
    } else if (c->top_k > 0 && c->top_k <= TOP_K_INSERT && c->top_k < n) {
        nc = select_top_k(st, l, m, t, c->top_k);
    } else {
        /* min-p is a threshold on e; before top-p it would change top-p's
         * total, so it joins the pass only when top-p is off */
        int fold_min_p = c->min_p > 0 && top_p >= 1.0f;
        double sev, z;
        z = exp_pass(l, n, m, t, fold_min_p ? c->min_p : 0.0f, st->e, st->v, &sev, &nc);
        if (t == 1.0f && !fold_min_p)
            *lse_t1 = m + log(z);
        if (c->top_k > 0 && c->top_k < nc) {
            dense_cut(st, l, 0, 0, (double)c->top_k, 0);
            z = dense_sums(st, &sev, &nc);
        }
        if (top_p < 1.0f && nc > 1) {
            dense_cut(st, l, 0, 0, (double)top_p * z, 1);
            z = dense_sums(st, &sev, &nc);
        }
        if (c->min_p > 0.0f && !fold_min_p && nc > 1) {
            /* the best token (v = 0, e = 1) always survives top-k and top-p */
            for (int32_t i = 0; i < n; i++)
                if (st->e[i] < c->min_p)
                    st->e[i] = 0;
            z = dense_sums(st, &sev, &nc);
        }
        if (c->typical_p < 1.0f && nc > 1) {
            /* surprisal - entropy = (log Z - v) - (log Z - E[v]) = E[v] - v */
            dense_cut(st, l, 1, sev / z, (double)c->typical_p * z, 1);
            z = dense_sums(st, &sev, &nc);
        }
        st->dense = 1;
        st->n_cand = nc;
        st->cand_total = z;
        return nc;
    }
    /* listed: cd is sorted by logit */
    if (top_p < 1.0f && nc > 1) {
        double cum = 0;
        int32_t j = scan_prefix(cd, 0, nc, &cum, (double)top_p * sum_p(cd, nc), 1);
        nc = j < 0 ? nc : j;
    }
    if (c->min_p > 0.0f && nc > 1) {
        int32_t keep = 0;
        for (int32_t i = 0; i < nc; i++)
            if (cd[i].p >= c->min_p)
                cd[keep++] = cd[i];
        nc = keep;
    }
    if (c->typical_p < 1.0f && nc > 1) {
        double z = sum_p(cd, nc), ev = 0;
        for (int32_t i = 0; i < nc; i++)
            ev += (double)cd[i].p * cd[i].v;
        ev /= z;
        for (int32_t i = 0; i < nc; i++)
            cd[i].k = typical_key(cd[i].v, ev);
        nc = sorted_prefix(st, cd, nc, (double)c->typical_p * z, 1);
    }
    st->n_cand = nc;
    st->cand_total = sum_p(cd, nc);
    return nc;
}

int32_t ifl_sampler_dist(const struct ifl_sampling_config *c, struct ifl_sampler_state *st,
                         const float *logits, const struct ifl_sampler_cand **out)
{
    double lse;
    int32_t nc = filter(c, st, logits, &lse);
    if (st->dense) {
        /* list the candidates in id order */
        nc = 0;
        for (int32_t i = 0; i < st->n_vocab; i++)
            if (st->e[i] > 0)
                st->cand[nc++] = (struct ifl_sampler_cand){i, st->v[i], st->e[i], -logits[i]};
        st->dense = 0;
        st->n_cand = nc;
        st->cand_total = sum_p(st->cand, nc);
    }
    *out = st->cand;
    return nc;
}

/* The n_top best logits, descending, ties by lower id; NaN counts as -inf.
 * Entries past n_vocab get token -1. Values are raw logits. */
static void top_logits(const float *logits, int32_t n_vocab, struct ifl_top_logprob *top,
                       int32_t n_top)
{
    int32_t cnt = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        if (cnt == n_top && (i & 15) == 0 && i + 16 <= n_vocab &&
            !any_above16(logits + i, top[cnt - 1].logprob)) {
            i += 15;
            continue;
        }
        float l = isnan(logits[i]) ? -INFINITY : logits[i];
        if (cnt == n_top && !(l > top[cnt - 1].logprob))
            continue;
        int32_t j = cnt < n_top ? cnt++ : n_top - 1;
        while (j > 0 && l > top[j - 1].logprob) {
            top[j] = top[j - 1];
            j--;
        }
        top[j].token = i;
        top[j].logprob = l;
    }
    for (int32_t j = cnt; j < n_top; j++) {
        top[j].token = -1;
        top[j].logprob = -INFINITY;
    }
}

/* The chosen token's log-prob and the top alternatives, as pick reports
 * them (lse: the row's log-sum-exp if known, else NAN). */
static void report(const float *logits, int32_t n, int32_t tok, double lse, float *logprob,
                   struct ifl_top_logprob *top, int32_t n_top)
{
    if (logprob || (top && n_top > 0)) {
        if (isnan(lse))
            lse = ifl_sampler_logsumexp(logits, n);
        if (logprob)
            *logprob = lse == -INFINITY ? -INFINITY : (float)((double)logits[tok] - lse);
        if (top && n_top > 0) {
            top_logits(logits, n, top, n_top);
            for (int32_t j = 0; j < n_top; j++)
                if (top[j].token >= 0)
                    top[j].logprob = (float)((double)top[j].logprob - lse);
        }
    }
}

int32_t ifl_sampler_pick(const struct ifl_sampling_config *c, struct ifl_sampler_state *st,
                         const float *logits, float *logprob, struct ifl_top_logprob *top,
                         int32_t n_top)
{
    int32_t n = st->n_vocab;
    int32_t tok;
    double lse = NAN;
    if (c->temperature <= 0) {
        tok = argmax(logits, n);
    } else if (filter(c, st, logits, &lse) == 0) {
        tok = argmax(logits, n);
    } else {
        /* the generator of draw number n_accepted: see sampler.h */
        uint64_t ctr = (uint64_t)st->n_accepted;
        ifl_rng_seed(&st->rng, st->seed ^ ifl_splitmix64(&ctr));
        double u = (double)(ifl_rng_next(&st->rng) >> 11) * 0x1p-53 * st->cand_total;
        double cum = 0;
        tok = -1;
        if (st->dense) {
            /* skip whole blocks of 16 by their sum, then token by token */
            const float *e = st->e;
            int32_t i = 0;
            for (; i + 16 <= n; i += 16) {
                v4f a, b, c4, d;
                memcpy(&a, e + i, sizeof(a));
                memcpy(&b, e + i + 4, sizeof(b));
                memcpy(&c4, e + i + 8, sizeof(c4));
                memcpy(&d, e + i + 12, sizeof(d));
                v4f s4 = (a + b) + (c4 + d);
                double bs = (double)((s4[0] + s4[1]) + (s4[2] + s4[3]));
                if (!(cum + bs <= u))
                    break;
                cum += bs;
            }
            for (; i < n; i++) {
                if (e[i] > 0) {
                    tok = i;
                    cum += e[i];
                    if (u < cum)
                        break;
                }
            }
            if (i == n) /* rounding: u past the sum; the last candidate */
                for (tok = n - 1; tok > 0 && !(e[tok] > 0); tok--)
                    ;
        } else {
            for (int32_t i = 0; i < st->n_cand; i++) {
                tok = st->cand[i].id;
                cum += st->cand[i].p;
                if (u < cum)
                    break;
            }
        }
    }
    report(logits, n, tok, lse, logprob, top, n_top);
    return tok;
}

int32_t ifl_sampler_pick_spec(const struct ifl_sampling_config *c, struct ifl_sampler_state *st,
                              const float *logits, int32_t draft, const float *q, float *logprob,
                              struct ifl_top_logprob *top, int32_t n_top)
{
    if (c->temperature <= 0 || draft < 0 || draft >= st->n_vocab)
        return ifl_sampler_pick(c, st, logits, logprob, top, n_top);
    const struct ifl_sampler_cand *cd;
    int32_t nc = ifl_sampler_dist(c, st, logits, &cd);
    if (nc == 0)
        return ifl_sampler_pick(c, st, logits, logprob, top, n_top);
    double total = 0, pd = 0;
    for (int32_t i = 0; i < nc; i++) {
        total += cd[i].p;
        if (cd[i].id == draft)
            pd = cd[i].p;
    }
    pd /= total;
    double qd = q ? (double)q[draft] : 1.0;
    /* the draw of this token number, from a generator of its own (the
     * plain draw's stream is not reused: a kept draft consumes none) */
    uint64_t ctr = (uint64_t)st->n_accepted;
    ifl_rng_seed(&st->rng, st->seed ^ ifl_splitmix64(&ctr) ^ 0x5bd1e9955bd1e995ull);
    double u1 = (double)(ifl_rng_next(&st->rng) >> 11) * 0x1p-53;
    double u2 = (double)(ifl_rng_next(&st->rng) >> 11) * 0x1p-53;
    int32_t tok = draft;
    if (!(u1 * qd < pd)) {
        /* rejected: a draw from max(0, p - q), renormalised (q one-hot at
         * the draft when NULL); tokens outside p's candidates have none */
        double rest = 0;
        for (int32_t i = 0; i < nc; i++) {
            double qi = q ? (double)q[cd[i].id] : cd[i].id == draft;
            double r = cd[i].p / total - qi;
            rest += r > 0 ? r : 0;
        }
        double want = u2 * rest, cum = 0;
        tok = -1;
        for (int32_t i = 0; i < nc; i++) {
            double qi = q ? (double)q[cd[i].id] : cd[i].id == draft;
            double r = cd[i].p / total - qi;
            if (r <= 0)
                continue;
            tok = cd[i].id;
            cum += r;
            if (want < cum)
                break;
        }
        if (tok < 0) /* p <= q everywhere, i.e. p == q: the draft stands */
            tok = draft;
    }
    report(logits, st->n_vocab, tok, NAN, logprob, top, n_top);
    return tok;
}
