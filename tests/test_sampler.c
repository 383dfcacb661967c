/* Sampler, beam search and stop strings: each logits transform on
 * hand-made rows, the filters against a full-sort reference, seeded
 * sampling checked statistically, beam search against brute force and
 * greedy, the stop-string matcher against a naive full-text search. */
#include <time.h>

#include "core/err.h"
#include "core/rng.h"
#include "runtime/beam.h"
#include "runtime/sampler.h"
#include "runtime/stopstr.h"
#include "t.h"

#define NINF (-INFINITY)

static struct ifl_sampling_config dflt(void)
{
    struct ifl_sampling_config c;
    ifl_sampling_default(&c);
    return c;
}

/* ================= validation ================= */

static void test_defaults(void)
{
    struct ifl_sampling_config c = dflt();
    CHECK_NEAR(c.temperature, 1.0, 0);
    CHECK_EQ(c.top_k, 0);
    CHECK_NEAR(c.top_p, 1.0, 0);
    CHECK_NEAR(c.top_p_min, 1e-6, 1e-12);
    CHECK_NEAR(c.top_p_decay, 1.0, 0);
    CHECK_EQ(c.top_p_reset_ids, -1);
    CHECK_NEAR(c.typical_p, 1.0, 0);
    CHECK_NEAR(c.repetition_penalty, 1.0, 0);
    CHECK_EQ(c.beam_width, 1);
    CHECK_NEAR(c.length_penalty, 1.0, 0);
    CHECK_EQ(c.early_stopping, 1);
    char err[IFL_ERR_LEN] = "";
    CHECK_EQ(ifl_sampling_validate(&c, 100, err), 0);
    CHECK_STR(err, "");
}

static void test_validate_fields(void)
{
#define BAD(field, stmt)                                                                           \
    do {                                                                                           \
        struct ifl_sampling_config c = dflt();                                                     \
        char err[IFL_ERR_LEN] = "";                                                                \
        stmt;                                                                                      \
        CHECK_EQ(ifl_sampling_validate(&c, 100, err), IFL_EINVAL);                                 \
        CHECK_MSG(strstr(err, "sampling." field ":") != NULL, "%s: message '%s'", field, err);     \
    } while (0)
#define GOOD(stmt)                                                                                 \
    do {                                                                                           \
        struct ifl_sampling_config c = dflt();                                                     \
        stmt;                                                                                      \
        CHECK_MSG(ifl_sampling_validate(&c, 100, NULL) == 0, "rejected: %s", #stmt);               \
    } while (0)
    BAD("temperature", c.temperature = -0.1f);
    BAD("temperature", c.temperature = NAN);
    BAD("temperature", c.temperature = INFINITY);
    GOOD(c.temperature = 0);
    BAD("top_k", c.top_k = -1);
    GOOD(c.top_k = 1000000);
    BAD("top_p", c.top_p = 0);
    BAD("top_p", c.top_p = 1.5f);
    BAD("top_p", c.top_p = NAN);
    GOOD(c.top_p = 1e-3f);
    BAD("top_p_min", c.top_p_min = 0);
    BAD("top_p_min", c.top_p_min = 2);
    BAD("top_p_decay", c.top_p_decay = 0);
    BAD("top_p_decay", c.top_p_decay = 1.01f);
    BAD("top_p_reset_ids", c.top_p_reset_ids = -2);
    BAD("top_p_reset_ids", c.top_p_reset_ids = 100);
    GOOD(c.top_p_reset_ids = 99);
    BAD("min_p", c.min_p = -0.01f);
    BAD("min_p", c.min_p = 1.01f);
    GOOD(c.min_p = 1);
    BAD("typical_p", c.typical_p = 0);
    BAD("typical_p", c.typical_p = 1.2f);
    BAD("min_tokens", c.min_tokens = -1);
    BAD("repetition_penalty", c.repetition_penalty = 0);
    BAD("repetition_penalty", c.repetition_penalty = -1);
    BAD("repetition_penalty", c.repetition_penalty = INFINITY);
    GOOD(c.repetition_penalty = 0.5f);
    BAD("presence_penalty", c.presence_penalty = NAN);
    BAD("frequency_penalty", c.frequency_penalty = -INFINITY);
    GOOD(c.presence_penalty = -2; c.frequency_penalty = 2);
    BAD("no_repeat_ngram_size", c.no_repeat_ngram_size = -1);
    BAD("beam_width", c.beam_width = 0);
    BAD("beam_width", c.beam_width = 17);
    GOOD(c.beam_width = 16);
    BAD("length_penalty", c.length_penalty = NAN);
    GOOD(c.length_penalty = -1);
    BAD("early_stopping", c.early_stopping = 3);
    BAD("ignore_eos", c.ignore_eos = 2);
#undef BAD
#undef GOOD
    char err[IFL_ERR_LEN];
    struct ifl_sampling_config c = dflt();
    c.top_p = 1.5f;
    ifl_sampling_validate(&c, 100, err);
    CHECK_STR(err, "sampling.top_p: must be in (0, 1] (got 1.5)");
}

static void test_check_extras(void)
{
    char err[IFL_ERR_LEN];
    int32_t ids[] = {1, 2, 10};
    float vals[] = {1, NINF, 0.5f};
    struct ifl_sampler_extras x = {.bias_ids = ids, .bias_values = vals, .n_bias = 2};
    CHECK_EQ(ifl_sampler_check_extras(&x, 10, err), 0);
    x.n_bias = 3;
    CHECK_EQ(ifl_sampler_check_extras(&x, 10, err), IFL_EINVAL);
    CHECK_STR(err, "logit_bias_ids[2]: token 10 is not in [0, 10)");
    vals[1] = NAN;
    x.n_bias = 2;
    CHECK_EQ(ifl_sampler_check_extras(&x, 10, err), IFL_EINVAL);
    CHECK(strstr(err, "logit_bias_values[1]") != NULL);
    vals[1] = INFINITY;
    CHECK_EQ(ifl_sampler_check_extras(&x, 10, err), IFL_EINVAL);
    int32_t bt[] = {1, 2, 3}, bl[] = {2, 0};
    struct ifl_sampler_extras y = {.bad_tokens = bt, .bad_lens = bl, .n_bad = 2};
    CHECK_EQ(ifl_sampler_check_extras(&y, 10, err), IFL_EINVAL);
    CHECK(strstr(err, "bad_words_lens[1]") != NULL);
    bl[1] = 1;
    CHECK_EQ(ifl_sampler_check_extras(&y, 10, err), 0);
    bt[2] = -1;
    CHECK_EQ(ifl_sampler_check_extras(&y, 10, err), IFL_EINVAL);
    CHECK(strstr(err, "bad_words_tokens[2]") != NULL);
    int32_t ends[] = {3, 11};
    struct ifl_sampler_extras z = {.end_ids = ends, .n_end_ids = 2};
    CHECK_EQ(ifl_sampler_check_extras(&z, 10, err), IFL_EINVAL);
    CHECK(strstr(err, "end_ids[1]") != NULL);
}

/* ================= logits processing ================= */

/* Runs process on a copy of in (n values) and checks the result. */
static void expect_process(const struct ifl_sampling_config *c, const float *in, int32_t n,
                           const int32_t *prompt, int32_t np, const int32_t *gen, int32_t ng,
                           const struct ifl_sampler_extras *x, const float *want, int line)
{
    struct ifl_sampler_state st;
    CHECK_EQ(ifl_sampler_state_init(&st, n), 0);
    ifl_sampler_reset(&st, c, prompt, np);
    for (int32_t i = 0; i < ng; i++)
        ifl_sampler_accept(c, &st, gen[i]);
    float l[64];
    memcpy(l, in, sizeof(float) * (size_t)n);
    ifl_sampler_process(c, &st, l, n, prompt, np, gen, ng, x);
    for (int32_t i = 0; i < n; i++)
        CHECK_MSG(l[i] == want[i] || (isnan(l[i]) && isnan(want[i])),
                  "line %d: logit %d = %g, want %g", line, i, (double)l[i], (double)want[i]);
    ifl_sampler_state_deinit(&st);
}
#define EXPECT(c, in, n, p, np, g, ng, x, want)                                                    \
    expect_process(c, in, n, p, np, g, ng, x, want, __LINE__)

static void test_bias(void)
{
    struct ifl_sampling_config c = dflt();
    float in[] = {1, 2, 3, 4};
    int32_t ids[] = {0, 2, 0, 7};
    float vals[] = {1.5f, NINF, 0.25f, 100};
    struct ifl_sampler_extras x = {.bias_ids = ids, .bias_values = vals, .n_bias = 4};
    float want[] = {2.75f, 2, NINF, 4}; /* repeated ids add up; id 7 is out of range */
    EXPECT(&c, in, 4, NULL, 0, NULL, 0, &x, want);
}

static void test_bad_words(void)
{
    struct ifl_sampling_config c = dflt();
    float in[10] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
    int32_t prompt[] = {5, 6}, gen[] = {7};
    /* words: [3] always; [6 7 2] matches the end -> 2; [7 1] -> 1; [5 4] no;
     * [9 6 7 8] no; [5 6 7 0] spans prompt and generated -> 0;
     * [1 2 3 5 6 7 9] longer than the text -> no */
    int32_t bt[] = {3, 6, 7, 2, 7, 1, 5, 4, 9, 6, 7, 8, 5, 6, 7, 0, 1, 2, 3, 5, 6, 7, 9};
    int32_t bl[] = {1, 3, 2, 2, 4, 4, 7};
    struct ifl_sampler_extras x = {.bad_tokens = bt, .bad_lens = bl, .n_bad = 7};
    float want[10] = {NINF, NINF, NINF, NINF, 4, 5, 6, 7, 8, 9};
    EXPECT(&c, in, 10, prompt, 2, gen, 1, &x, want);
    /* without generated tokens [6 2]-style words look at the prompt's end */
    int32_t bt2[] = {6, 8, 5, 9};
    int32_t bl2[] = {2, 2};
    struct ifl_sampler_extras x2 = {.bad_tokens = bt2, .bad_lens = bl2, .n_bad = 2};
    float want2[10] = {0, 1, 2, 3, 4, 5, 6, 7, NINF, 9};
    EXPECT(&c, in, 10, prompt, 2, NULL, 0, &x2, want2);
}

static void test_min_tokens(void)
{
    struct ifl_sampling_config c = dflt();
    c.min_tokens = 2;
    float in[] = {1, 2, 3, 4};
    int32_t ends[] = {2, 3};
    struct ifl_sampler_extras x = {.end_ids = ends, .n_end_ids = 2};
    int32_t gen[] = {0, 1};
    float banned[] = {1, 2, NINF, NINF};
    EXPECT(&c, in, 4, NULL, 0, gen, 0, &x, banned);
    EXPECT(&c, in, 4, NULL, 0, gen, 1, &x, banned);
    EXPECT(&c, in, 4, NULL, 0, gen, 2, &x, in);
    c.min_tokens = 0;
    EXPECT(&c, in, 4, NULL, 0, gen, 0, &x, in);
    /* ignore_eos bans nothing: end tokens stay sampleable */
    c.ignore_eos = 1;
    EXPECT(&c, in, 4, NULL, 0, gen, 0, &x, in);
}

static void test_repetition_penalty(void)
{
    struct ifl_sampling_config c = dflt();
    c.repetition_penalty = 2;
    float in[] = {2, -2, 0.5f, 3, -1, 0};
    int32_t prompt[] = {0, 0, 2}, gen[] = {1, 2, 1};
    /* 0 (prompt, twice): 2/2; 1 (generated): -2*2; 2 (both): 0.5/2 once;
     * 5 has logit 0 and is unseen */
    float want[] = {1, -4, 0.25f, 3, -1, 0};
    EXPECT(&c, in, 6, prompt, 3, gen, 3, NULL, want);
    c.repetition_penalty = 0.5f; /* < 1 rewards repeats */
    float want2[] = {4, -1, 1, 3, -1, 0};
    EXPECT(&c, in, 6, prompt, 3, gen, 3, NULL, want2);
}

static void test_presence_frequency(void)
{
    struct ifl_sampling_config c = dflt();
    c.presence_penalty = 0.5f;
    c.frequency_penalty = 0.25f;
    float in[] = {1, 1, 1, 1};
    int32_t prompt[] = {3, 3}, gen[] = {1, 1, 2, 1};
    /* 1: 3 times -> 1 - 0.5 - 0.75; 2: once -> 1 - 0.75; prompt-only 3 untouched */
    float want[] = {1, -0.25f, 0.25f, 1};
    EXPECT(&c, in, 4, prompt, 2, gen, 4, NULL, want);
    c.presence_penalty = -1;
    c.frequency_penalty = 0;
    float want2[] = {1, 2, 2, 1};
    EXPECT(&c, in, 4, prompt, 2, gen, 4, NULL, want2);
}

static void test_no_repeat_ngram(void)
{
    struct ifl_sampling_config c = dflt();
    float in[] = {0, 1, 2, 3, 4};
    int32_t prompt[] = {1, 2, 3}, gen[] = {1, 2};
    c.no_repeat_ngram_size = 3; /* [1 2] seen before followed by 3 */
    float w3[] = {0, 1, 2, NINF, 4};
    EXPECT(&c, in, 5, prompt, 3, gen, 2, NULL, w3);
    c.no_repeat_ngram_size = 2; /* [2] was followed by 3 */
    EXPECT(&c, in, 5, prompt, 3, gen, 2, NULL, w3);
    c.no_repeat_ngram_size = 1; /* every token seen */
    float w1[] = {0, NINF, NINF, NINF, 4};
    EXPECT(&c, in, 5, prompt, 3, gen, 2, NULL, w1);
    c.no_repeat_ngram_size = 4; /* [3 1 2] never seen before */
    EXPECT(&c, in, 5, prompt, 3, gen, 2, NULL, in);
    c.no_repeat_ngram_size = 6; /* longer than the text */
    EXPECT(&c, in, 5, prompt, 3, gen, 2, NULL, in);
    int32_t rep[] = {4, 4, 4};
    c.no_repeat_ngram_size = 2;
    float w4[] = {0, 1, 2, 3, NINF};
    EXPECT(&c, in, 5, rep, 3, NULL, 0, NULL, w4);
    /* several n-grams share the prefix: [0 1] then 2 and then 4 */
    int32_t multi[] = {0, 1, 2, 0, 1, 4, 0, 1};
    float w5[] = {0, 1, NINF, 3, NINF};
    c.no_repeat_ngram_size = 3;
    EXPECT(&c, in, 5, multi, 5, multi + 5, 3, NULL, w5);
}

static void test_order_of_transforms(void)
{
    /* bias then penalties: a biased repeated token is penalised after the
     * bias; a banned token stays -inf through every penalty */
    struct ifl_sampling_config c = dflt();
    c.repetition_penalty = 2;
    c.presence_penalty = 1;
    float in[] = {1, 1, 1};
    int32_t ids[] = {0, 1};
    float vals[] = {3, -3};
    int32_t bt[] = {2};
    int32_t bl[] = {1};
    struct ifl_sampler_extras x = {.bias_ids = ids,
                                   .bias_values = vals,
                                   .n_bias = 2,
                                   .bad_tokens = bt,
                                   .bad_lens = bl,
                                   .n_bad = 1};
    int32_t gen[] = {0, 1, 2};
    /* 0: (1+3)/2 - 1 = 1; 1: (1-3)*2 - 1 = -5; 2: banned */
    float want[] = {1, -5, NINF};
    EXPECT(&c, in, 3, NULL, 0, gen, 3, &x, want);
}

static void test_recount_matches_accept(void)
{
    struct ifl_sampling_config c = dflt();
    c.repetition_penalty = 1.3f;
    c.presence_penalty = 0.4f;
    c.frequency_penalty = 0.2f;
    struct ifl_sampler_state a, b;
    CHECK_EQ(ifl_sampler_state_init(&a, 50), 0);
    CHECK_EQ(ifl_sampler_state_init(&b, 50), 0);
    int32_t prompt[] = {1, 2, 3, 4, 4};
    int32_t gen[] = {7, 7, 9, 1, 40, 7};
    ifl_sampler_reset(&a, &c, prompt, 5);
    ifl_sampler_reset(&b, &c, prompt, 5);
    /* b first counts an unrelated history, then recounts */
    int32_t other[] = {11, 12, 11};
    ifl_sampler_recount(&b, other, 3);
    for (int i = 0; i < 6; i++)
        ifl_sampler_accept(&c, &a, gen[i]);
    ifl_sampler_recount(&b, gen, 6);
    float la[50], lb[50];
    for (int i = 0; i < 50; i++)
        la[i] = lb[i] = (float)(i % 7) - 3;
    ifl_sampler_process(&c, &a, la, 50, prompt, 5, gen, 6, NULL);
    ifl_sampler_process(&c, &b, lb, 50, prompt, 5, gen, 6, NULL);
    CHECK(memcmp(la, lb, sizeof(la)) == 0);
    CHECK(lb[11] == (float)(11 % 7) - 3); /* the old history left no trace */
    /* reset clears everything of the previous request */
    ifl_sampler_reset(&a, &c, NULL, 0);
    float lc[50], ld[50];
    for (int i = 0; i < 50; i++)
        lc[i] = ld[i] = (float)i;
    ifl_sampler_process(&c, &a, lc, 50, NULL, 0, NULL, 0, NULL);
    CHECK(memcmp(lc, ld, sizeof(lc)) == 0);
    ifl_sampler_state_deinit(&a);
    ifl_sampler_state_deinit(&b);
}

/* ================= picking ================= */

static void test_greedy(void)
{
    struct ifl_sampling_config c = dflt();
    c.temperature = 0;
    struct ifl_sampler_state st;
    CHECK_EQ(ifl_sampler_state_init(&st, 6), 0);
    ifl_sampler_reset(&st, &c, NULL, 0);
    float a[] = {1, 5, 2, 5, NAN, 5};
    CHECK_EQ(ifl_sampler_pick(&c, &st, a, NULL, NULL, 0), 1);
    float b[] = {NINF, NINF, NINF, NINF, NINF, NINF};
    CHECK_EQ(ifl_sampler_pick(&c, &st, b, NULL, NULL, 0), 0);
    float d[] = {NINF, -1e30f, NINF, NAN, -1e30f, 0};
    CHECK_EQ(ifl_sampler_pick(&c, &st, d, NULL, NULL, 0), 5);
    /* filters do not apply to greedy */
    c.typical_p = 0.01f;
    c.top_k = 1;
    float e[] = {0, 0, 9, 0, 0, 0};
    CHECK_EQ(ifl_sampler_pick(&c, &st, e, NULL, NULL, 0), 2);
    /* sampling over a row with no finite logit falls back to greedy */
    c = dflt();
    CHECK_EQ(ifl_sampler_pick(&c, &st, b, NULL, NULL, 0), 0);
    /* top_k 1 samples greedily, lowest id among equals */
    c.top_k = 1;
    CHECK_EQ(ifl_sampler_pick(&c, &st, a, NULL, NULL, 0), 1);
    ifl_sampler_state_deinit(&st);
}

static void test_logprobs(void)
{
    float l[] = {1, 3, 3, 0, NINF};
    double lse = log(exp(1.0) + 2 * exp(3.0) + 1);
    CHECK_NEAR(ifl_sampler_logsumexp(l, 5), lse, 1e-6);
    struct ifl_sampling_config c = dflt();
    struct ifl_sampler_state st;
    CHECK_EQ(ifl_sampler_state_init(&st, 5), 0);
    for (int pass = 0; pass < 3; pass++) {
        c.temperature = pass == 0 ? 0.0f : pass == 1 ? 1.0f : 0.3f;
        ifl_sampler_reset(&st, &c, NULL, 0);
        float lp = 0;
        struct ifl_top_logprob top[7];
        int32_t t = ifl_sampler_pick(&c, &st, l, &lp, top, 7);
        CHECK(t >= 0 && t <= 3);
        /* the reported log-prob ignores the temperature */
        CHECK_NEAR(lp, l[t] - lse, 1e-6);
        int32_t want_tok[] = {1, 2, 0, 3, 4, -1, -1};
        for (int j = 0; j < 7; j++)
            CHECK_EQ(top[j].token, want_tok[j]);
        CHECK_NEAR(top[0].logprob, 3 - lse, 1e-6);
        CHECK_NEAR(top[1].logprob, 3 - lse, 1e-6);
        CHECK_NEAR(top[2].logprob, 1 - lse, 1e-6);
        CHECK_NEAR(top[3].logprob, 0 - lse, 1e-6);
        CHECK(top[4].logprob == NINF);
        CHECK(top[5].logprob == NINF);
    }
    /* top-n smaller than the vocabulary, on a bigger row, against a sort */
    enum { N = 3000 };
    static float big[N];
    struct ifl_rng r;
    ifl_rng_seed(&r, 5);
    for (int i = 0; i < N; i++)
        big[i] = (float)(ifl_rng_next(&r) % 200) * 0.05f; /* many ties */
    struct ifl_sampler_state s2;
    CHECK_EQ(ifl_sampler_state_init(&s2, N), 0);
    c = dflt();
    ifl_sampler_reset(&s2, &c, NULL, 0);
    struct ifl_top_logprob top[20];
    float lp;
    int32_t t = ifl_sampler_pick(&c, &s2, big, &lp, top, 20);
    double blse = 0, m = 0;
    for (int i = 0; i < N; i++)
        m = fmax(m, big[i]);
    for (int i = 0; i < N; i++)
        blse += exp(big[i] - m);
    blse = m + log(blse);
    CHECK_NEAR(lp, big[t] - blse, 1e-5);
    for (int j = 0; j < 20; j++) {
        /* count tokens strictly better, or equal with a lower id */
        int better = 0;
        for (int i = 0; i < N; i++)
            better +=
                big[i] > big[top[j].token] || (big[i] == big[top[j].token] && i < top[j].token);
        CHECK_EQ(better, j);
        CHECK_NEAR(top[j].logprob, big[top[j].token] - blse, 1e-5);
    }
    ifl_sampler_state_deinit(&s2);
    ifl_sampler_state_deinit(&st);
}

/* ---- the filtered distribution against a full-sort reference ---- */

struct rcand {
    int32_t id;
    float v, p, k;
};

static int rcand_cmp(const void *a, const void *b)
{
    const struct rcand *x = a, *y = b;
    if (x->k != y->k)
        return x->k < y->k ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Straightforward version of the documented filters: sort everything. */
static int32_t ref_dist(const struct ifl_sampling_config *c, float top_p, const float *l, int32_t n,
                        struct rcand *out)
{
    float m = NINF;
    for (int32_t i = 0; i < n; i++)
        if (l[i] > m)
            m = l[i];
    int32_t nc = 0;
    for (int32_t i = 0; i < n; i++) {
        float v = (l[i] - m) / c->temperature;
        if (v >= -64.0f)
            out[nc++] = (struct rcand){i, v, ifl_sampler_exp(v), -l[i]};
    }
    qsort(out, (size_t)nc, sizeof(*out), rcand_cmp);
    if (c->top_k > 0 && c->top_k < nc)
        nc = c->top_k;
    if (top_p < 1 && nc > 1) {
        double tot = 0, cum = 0;
        for (int32_t i = 0; i < nc; i++)
            tot += out[i].p;
        for (int32_t i = 0; i < nc; i++) {
            cum += out[i].p;
            if (cum >= top_p * tot) {
                nc = i + 1;
                break;
            }
        }
    }
    if (c->min_p > 0 && nc > 1) {
        int32_t k = 0;
        for (int32_t i = 0; i < nc; i++)
            if (out[i].p >= c->min_p)
                out[k++] = out[i];
        nc = k;
    }
    if (c->typical_p < 1 && nc > 1) {
        double z = 0, ev = 0, cum = 0;
        for (int32_t i = 0; i < nc; i++)
            z += out[i].p;
        for (int32_t i = 0; i < nc; i++)
            ev += (double)out[i].p * out[i].v;
        ev /= z;
        for (int32_t i = 0; i < nc; i++)
            out[i].k = (float)fabs((double)out[i].v - ev);
        qsort(out, (size_t)nc, sizeof(*out), rcand_cmp);
        for (int32_t i = 0; i < nc; i++) {
            cum += out[i].p;
            if (cum >= c->typical_p * z) {
                nc = i + 1;
                break;
            }
        }
    }
    return nc;
}

static int cmp_i32(const void *a, const void *b)
{
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

static void test_dist_vs_reference(void)
{
    enum { N = 40000, NCFG = 11 };
    static float l[N];
    static struct rcand ref[N];
    static int32_t ia[N], ib[N];
    struct ifl_sampler_state st;
    CHECK_EQ(ifl_sampler_state_init(&st, N), 0);
    struct ifl_rng r;
    ifl_rng_seed(&r, 77);
    int mismatches = 0, cases = 0;
    for (int trial = 0; trial < 45; trial++) {
        /* LLM-like rows: a normal body with a few strong tokens; some rows
         * quantised so that ties are common */
        int32_t n = trial % 3 == 0 ? 300 : N;
        float scale = 1.0f + (float)(trial % 5);
        for (int32_t i = 0; i < n; i++) {
            float x = ifl_rng_normal(&r) * scale;
            if (trial % 4 == 1)
                x = roundf(x * 4) / 4;
            l[i] = x;
        }
        for (int j = 0; j < 5; j++)
            l[ifl_rng_next(&r) % (uint64_t)n] += 8 + 2 * (float)j;
        if (trial % 7 == 3)
            for (int32_t i = 0; i < n; i += 3)
                l[i] = NINF;
        struct ifl_sampler_state *sp = &st, small;
        if (n != N) {
            CHECK_EQ(ifl_sampler_state_init(&small, n), 0);
            sp = &small;
        }
        for (int cfgi = 0; cfgi < NCFG; cfgi++) {
            struct ifl_sampling_config c = dflt();
            c.temperature =
                (float[]){1.0f, 0.7f, 1.5f, 0.2f, 1.0f, 3.0f, 1.0f, 0.9f, 1.2f, 2.0f, 1.0f}[cfgi];
            c.top_k = (int32_t[]){0, 40, 0, 0, 1000, 0, 0, 5, 0, 0, 200}[cfgi];
            c.top_p = (float[]){1, 0.95f, 0.9f, 1, 0.5f, 0.99f, 1, 0.8f, 0.6f, 0.999f, 1}[cfgi];
            c.min_p = (float[]){0, 0, 0, 0.05f, 0, 0.01f, 0, 0.1f, 0, 0, 0.02f}[cfgi];
            c.typical_p = (float[]){1, 1, 1, 1, 0.9f, 1, 0.7f, 0.95f, 0.5f, 1, 1}[cfgi];
            ifl_sampler_reset(sp, &c, NULL, 0);
            const struct ifl_sampler_cand *got;
            int32_t ng = ifl_sampler_dist(&c, sp, l, &got);
            int32_t nr = ref_dist(&c, c.top_p, l, n, ref);
            cases++;
            if (ng != nr) {
                mismatches++;
                fprintf(stderr, "  trial %d cfg %d: %d survivors, reference %d\n", trial, cfgi, ng,
                        nr);
                continue;
            }
            for (int32_t i = 0; i < ng; i++) {
                ia[i] = got[i].id;
                ib[i] = ref[i].id;
            }
            qsort(ia, (size_t)ng, sizeof(int32_t), cmp_i32);
            qsort(ib, (size_t)ng, sizeof(int32_t), cmp_i32);
            if (memcmp(ia, ib, sizeof(int32_t) * (size_t)ng) != 0) {
                mismatches++;
                fprintf(stderr, "  trial %d cfg %d: survivor sets differ\n", trial, cfgi);
            }
        }
        if (n != N)
            ifl_sampler_state_deinit(&small);
    }
    CHECK_EQ(mismatches, 0);
    CHECK_EQ(cases, 45 * NCFG);
    ifl_sampler_state_deinit(&st);
}

/* ---- statistical checks at fixed seeds ---- */

/* Draws n tokens and returns chi-square against want[] (probabilities,
 * zero entries must never be drawn: they count as failures). */
static double chi_square(struct ifl_sampling_config *c, const float *l, int32_t nv,
                         const double *want, int n, int *forbidden)
{
    struct ifl_sampler_state st;
    CHECK_EQ(ifl_sampler_state_init(&st, nv), 0);
    ifl_sampler_reset(&st, c, NULL, 0);
    int hist[16] = {0};
    for (int i = 0; i < n; i++) {
        int32_t t = ifl_sampler_pick(c, &st, l, NULL, NULL, 0);
        hist[t]++;
        ifl_sampler_accept(c, &st, t);
    }
    double chi = 0;
    *forbidden = 0;
    for (int32_t i = 0; i < nv; i++) {
        if (want[i] == 0) {
            *forbidden += hist[i];
            continue;
        }
        double e = want[i] * n;
        chi += (hist[i] - e) * (hist[i] - e) / e;
    }
    ifl_sampler_state_deinit(&st);
    return chi;
}

static void test_statistics(void)
{
    /* probabilities .4 .3 .2 .1 as logits */
    float l[4];
    double p[4] = {0.4, 0.3, 0.2, 0.1};
    for (int i = 0; i < 4; i++)
        l[i] = logf((float)p[i]) + 2.0f;
    /* expected distributions worked by hand */
    double h = 0; /* entropy, for typical-p */
    for (int i = 0; i < 4; i++)
        h -= p[i] * log(p[i]);
    CHECK_NEAR(h, 1.2799, 1e-4);
    /* |-log p - H|: .4 -> .36, .3 -> .08, .2 -> .33, .1 -> 1.02: typical
     * keeps tokens in the order 1, 2, 0, 3 (cumulative .3, .5, .9, 1);
     * thresholds are chosen away from those sums */
    struct {
        const char *name;
        float t;
        int32_t k;
        float top_p, min_p, typ;
        double want[4];
    } cases[] = {
        {"plain", 1, 0, 1, 0, 1, {0.4, 0.3, 0.2, 0.1}},
        {"temperature 0.5", 0.5f, 0, 1, 0, 1, {16 / 30.0, 9 / 30.0, 4 / 30.0, 1 / 30.0}},
        {"temperature 2", 2, 0, 1, 0, 1, {0, 0, 0, 0}},
        {"top_k 2", 1, 2, 1, 0, 1, {4 / 7.0, 3 / 7.0, 0, 0}},
        {"top_p 0.75", 1, 0, 0.75f, 0, 1, {4 / 9.0, 3 / 9.0, 2 / 9.0, 0}},
        {"top_p 0.7", 1, 0, 0.7f, 0, 1, {4 / 7.0, 3 / 7.0, 0, 0}},
        {"top_k 3 + top_p 0.6", 1, 3, 0.6f, 0, 1, {4 / 7.0, 3 / 7.0, 0, 0}},
        {"min_p 0.5", 1, 0, 1, 0.5f, 1, {4 / 9.0, 3 / 9.0, 2 / 9.0, 0}},
        {"typical 0.25", 1, 0, 1, 0, 0.25f, {0, 1, 0, 0}},
        {"typical 0.45", 1, 0, 1, 0, 0.45f, {0, 3 / 5.0, 2 / 5.0, 0}},
        {"typical 0.6", 1, 0, 1, 0, 0.6f, {4 / 9.0, 3 / 9.0, 2 / 9.0, 0}},
    };
    /* temperature 2: p^(1/2) normalised */
    double s = 0;
    for (int i = 0; i < 4; i++)
        s += sqrt(p[i]);
    for (int i = 0; i < 4; i++)
        cases[2].want[i] = sqrt(p[i]) / s;
    /* "top_k 3 + top_p 0.6": top-3 renormalised is 4/9 3/9 2/9; 0.6 needs two */
    for (size_t ci = 0; ci < sizeof(cases) / sizeof(cases[0]); ci++) {
        struct ifl_sampling_config c = dflt();
        c.temperature = cases[ci].t;
        c.top_k = cases[ci].k;
        c.top_p = cases[ci].top_p;
        c.min_p = cases[ci].min_p;
        c.typical_p = cases[ci].typ;
        c.seed = 1234 + ci;
        int forbidden;
        int nonzero = 0;
        for (int i = 0; i < 4; i++)
            nonzero += cases[ci].want[i] > 0;
        double chi = chi_square(&c, l, 4, cases[ci].want, 40000, &forbidden);
        /* df <= 3: 25 is far beyond any plausible value (p ~ 1e-5) */
        CHECK_MSG(chi < 25, "%s: chi-square %.2f (df %d)", cases[ci].name, chi, nonzero - 1);
        CHECK_MSG(forbidden == 0, "%s: %d draws of filtered tokens", cases[ci].name, forbidden);
    }
    /* a larger vocabulary: 16 tokens, top_p 0.9 at temperature 0.8,
     * expected from the reference filters */
    float l16[16];
    struct ifl_rng r;
    ifl_rng_seed(&r, 3);
    for (int i = 0; i < 16; i++)
        l16[i] = ifl_rng_normal(&r);
    struct ifl_sampling_config c = dflt();
    c.temperature = 0.8f;
    c.top_p = 0.9f;
    c.seed = 99;
    struct rcand ref[16];
    int32_t nr = ref_dist(&c, c.top_p, l16, 16, ref);
    double want[16] = {0}, tot = 0;
    for (int i = 0; i < nr; i++)
        tot += ref[i].p;
    for (int i = 0; i < nr; i++)
        want[ref[i].id] = ref[i].p / tot;
    int forbidden;
    double chi = chi_square(&c, l16, 16, want, 100000, &forbidden);
    CHECK_MSG(chi < nr - 1 + 8 * sqrt(2.0 * (nr - 1)) + 10, "16 tokens: chi-square %.2f df %d", chi,
              nr - 1);
    CHECK_EQ(forbidden, 0);
}

static void test_seeds(void)
{
    enum { N = 1000, T = 64 };
    static float l[N];
    struct ifl_rng r;
    ifl_rng_seed(&r, 8);
    for (int i = 0; i < N; i++)
        l[i] = ifl_rng_normal(&r) * 2;
    struct ifl_sampling_config c = dflt();
    c.seed = 42;
    c.top_p = 0.95f;
    struct ifl_sampler_state a, b;
    CHECK_EQ(ifl_sampler_state_init(&a, N), 0);
    CHECK_EQ(ifl_sampler_state_init(&b, N), 0);
    int32_t ta[T], tb[T];
    ifl_sampler_reset(&a, &c, NULL, 0);
    for (int i = 0; i < T; i++) {
        ta[i] = ifl_sampler_pick(&c, &a, l, NULL, NULL, 0);
        ifl_sampler_accept(&c, &a, ta[i]);
    }
    /* same seed, same tokens, with a greedy pick of another request (on the
     * same state object, reset between) in the middle */
    ifl_sampler_reset(&b, &c, NULL, 0);
    for (int i = 0; i < T; i++) {
        tb[i] = ifl_sampler_pick(&c, &b, l, NULL, NULL, 0);
        ifl_sampler_accept(&c, &b, tb[i]);
    }
    CHECK(memcmp(ta, tb, sizeof(ta)) == 0);
    /* a state rebuilt from the first half continues identically */
    ifl_sampler_reset(&b, &c, NULL, 0);
    for (int i = 0; i < T / 2; i++)
        ifl_sampler_accept(&c, &b, ta[i]);
    int same = 1;
    for (int i = T / 2; i < T; i++) {
        int32_t t = ifl_sampler_pick(&c, &b, l, NULL, NULL, 0);
        same &= t == ta[i];
        ifl_sampler_accept(&c, &b, t);
    }
    CHECK(same);
    /* another seed differs */
    c.seed = 43;
    ifl_sampler_reset(&b, &c, NULL, 0);
    int diff = 0;
    for (int i = 0; i < T; i++) {
        int32_t t = ifl_sampler_pick(&c, &b, l, NULL, NULL, 0);
        diff += t != ta[i];
        ifl_sampler_accept(&c, &b, t);
    }
    CHECK(diff > T / 4);
    ifl_sampler_state_deinit(&a);
    ifl_sampler_state_deinit(&b);
}

static void test_top_p_decay(void)
{
    struct ifl_sampling_config c = dflt();
    c.top_p = 0.95f;
    c.top_p_decay = 0.5f;
    c.top_p_min = 0.2f;
    c.top_p_reset_ids = 7;
    struct ifl_sampler_state st;
    CHECK_EQ(ifl_sampler_state_init(&st, 10), 0);
    ifl_sampler_reset(&st, &c, NULL, 0);
    CHECK_NEAR(st.top_p, 0.95, 1e-7);
    ifl_sampler_accept(&c, &st, 3);
    CHECK_NEAR(st.top_p, 0.475, 1e-7);
    ifl_sampler_accept(&c, &st, 3);
    CHECK_NEAR(st.top_p, 0.2375, 1e-7);
    ifl_sampler_accept(&c, &st, 3);
    CHECK_NEAR(st.top_p, 0.2, 1e-7);
    ifl_sampler_accept(&c, &st, 7);
    CHECK_NEAR(st.top_p, 0.95, 1e-7);
    ifl_sampler_accept(&c, &st, 1);
    CHECK_NEAR(st.top_p, 0.475, 1e-7);
    /* the decayed value drives the filter: probabilities .4 .3 .2 .1 */
    float l[10];
    for (int i = 0; i < 10; i++)
        l[i] = NINF;
    l[0] = logf(0.4f);
    l[1] = logf(0.3f);
    l[2] = logf(0.2f);
    l[3] = logf(0.1f);
    const struct ifl_sampler_cand *cd;
    CHECK_EQ(ifl_sampler_dist(&c, &st, l, &cd), 2); /* 0.475 needs .4 + .3 */
    ifl_sampler_accept(&c, &st, 1);
    CHECK_EQ(ifl_sampler_dist(&c, &st, l, &cd), 1); /* 0.2375 */
    ifl_sampler_reset(&st, &c, NULL, 0);
    CHECK_EQ(ifl_sampler_dist(&c, &st, l, &cd), 4); /* 0.95 */
    /* decay from top_p 1 turns the filter on, as in TensorRT-LLM */
    c.top_p = 1;
    c.top_p_reset_ids = -1;
    ifl_sampler_reset(&st, &c, NULL, 0);
    CHECK_EQ(ifl_sampler_dist(&c, &st, l, &cd), 4);
    ifl_sampler_accept(&c, &st, 0);
    CHECK_EQ(ifl_sampler_dist(&c, &st, l, &cd), 2);
    ifl_sampler_state_deinit(&st);
}

static void test_extreme_temperatures(void)
{
    struct ifl_sampling_config c = dflt();
    struct ifl_sampler_state st;
    CHECK_EQ(ifl_sampler_state_init(&st, 4), 0);
    float l[] = {1, 2, 2.5f, 0};
    const struct ifl_sampler_cand *cd;
    c.temperature = 1e-30f; /* effectively greedy */
    ifl_sampler_reset(&st, &c, NULL, 0);
    CHECK_EQ(ifl_sampler_dist(&c, &st, l, &cd), 1);
    CHECK_EQ(cd[0].id, 2);
    CHECK_EQ(ifl_sampler_pick(&c, &st, l, NULL, NULL, 0), 2);
    c.temperature = 1e30f; /* effectively uniform */
    CHECK_EQ(ifl_sampler_dist(&c, &st, l, &cd), 4);
    for (int i = 0; i < 4; i++)
        CHECK_NEAR(cd[i].p, 1.0, 1e-6);
    float inf_row[] = {0, INFINITY, 1, INFINITY};
    c.temperature = 1;
    CHECK_EQ(ifl_sampler_dist(&c, &st, inf_row, &cd), 2);
    int32_t t = ifl_sampler_pick(&c, &st, inf_row, NULL, NULL, 0);
    CHECK(t == 1 || t == 3);
    ifl_sampler_state_deinit(&st);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static void test_speed(void)
{
    enum { N = 152064, REPS = 20 };
    float *l = malloc(sizeof(float) * N);
    struct ifl_rng r;
    ifl_rng_seed(&r, 1);
    for (int i = 0; i < N; i++)
        l[i] = ifl_rng_normal(&r) * 2.5f;
    for (int j = 0; j < 20; j++)
        l[ifl_rng_next(&r) % N] += 10 + (float)j * 0.5f;
    struct ifl_sampler_state st;
    CHECK_EQ(ifl_sampler_state_init(&st, N), 0);
    struct {
        const char *name;
        float t;
        int32_t k;
        float top_p, min_p, typ;
        int lp;
    } cfgs[] = {
        {"greedy", 0, 0, 1, 0, 1, 0},
        {"greedy + logprobs", 0, 0, 1, 0, 1, 1},
        {"temperature 0.8", 0.8f, 0, 1, 0, 1, 0},
        {"top_k 40 + top_p 0.95", 1, 40, 0.95f, 0, 1, 0},
        {"  the same + logprobs", 1, 40, 0.95f, 0, 1, 1},
        {"top_p 0.9", 1, 0, 0.9f, 0, 1, 1},
        {"top_p 0.9 at T 0.7", 0.7f, 0, 0.9f, 0, 1, 0},
        {"min_p 0.05", 1, 0, 1, 0.05f, 1, 0},
        {"typical 0.9", 1, 0, 1, 0, 0.9f, 0},
        {"top_p 0.99 at T 1.5", 1.5f, 0, 0.99f, 0, 1, 0},
    };
    for (size_t ci = 0; ci < sizeof(cfgs) / sizeof(cfgs[0]); ci++) {
        struct ifl_sampling_config c = dflt();
        c.temperature = cfgs[ci].t;
        c.top_k = cfgs[ci].k;
        c.top_p = cfgs[ci].top_p;
        c.min_p = cfgs[ci].min_p;
        c.typical_p = cfgs[ci].typ;
        ifl_sampler_reset(&st, &c, NULL, 0);
        struct ifl_top_logprob top[5];
        float lp;
        double t0 = now_s();
        for (int i = 0; i < REPS; i++) {
            int32_t t = ifl_sampler_pick(&c, &st, l, cfgs[ci].lp ? &lp : NULL,
                                         cfgs[ci].lp ? top : NULL, cfgs[ci].lp ? 5 : 0);
            ifl_sampler_accept(&c, &st, t);
        }
        double us = (now_s() - t0) / REPS * 1e6;
        fprintf(stderr, "  pick, n_vocab %d, %-24s %7.1f us cpu (%d candidates)\n", N,
                cfgs[ci].name, us, (int)st.n_cand);
    }
    ifl_sampler_state_deinit(&st);
    free(l);
}

/* ================= beam search ================= */

/* Toy model over {0 = END, 1 = A, 2 = B}: probabilities by history. */
static void toy_row(const int32_t *h, int32_t n, float *row)
{
    double p[3];
    if (n == 0) {
        p[0] = 0.5, p[1] = 0.4, p[2] = 0.1;
    } else if (n == 1 && h[0] == 1) {
        p[0] = 0.1, p[1] = 0.8, p[2] = 0.1;
    } else if (n == 2 && h[0] == 1 && h[1] == 1) {
        p[0] = 0.9, p[1] = 0.05, p[2] = 0.05;
    } else {
        p[0] = 0.34, p[1] = 0.33, p[2] = 0.33;
    }
    for (int i = 0; i < 3; i++)
        row[i] = (float)log(p[i]);
}

/* Runs beam search with model fn; returns the number of steps taken. */
static int run_beam(struct ifl_beam *b, const struct ifl_sampling_config *c, int32_t max_len,
                    int32_t nv, void (*fn)(const int32_t *, int32_t, float *), const int32_t *ends,
                    int32_t n_end)
{
    CHECK_EQ(ifl_beam_reset(b, c, max_len), 0);
    float rows[IFL_BEAM_MAX_WIDTH * 64];
    struct ifl_beam_choice ch[IFL_BEAM_MAX_WIDTH];
    int steps = 0;
    for (;;) {
        int32_t nl = ifl_beam_n_live(b);
        for (int32_t i = 0; i < nl; i++)
            fn(ifl_beam_tokens(b, i), ifl_beam_len(b), rows + i * nv);
        int32_t nch;
        int done = ifl_beam_step(b, rows, nv, ends, n_end, ch, &nch);
        steps++;
        if (done) {
            CHECK_EQ(nch, 0);
            break;
        }
        CHECK_EQ(nch, ifl_beam_n_live(b));
        for (int32_t i = 0; i < nch; i++) {
            CHECK(ch[i].parent >= 0 && ch[i].parent < nl);
            CHECK_EQ(ifl_beam_tokens(b, i)[ifl_beam_len(b) - 1], ch[i].token);
        }
    }
    return steps;
}

static void check_hyp(const struct ifl_beam_hyp *h, const int32_t *want, int32_t n, double cum,
                      double lp, int32_t reason, int line)
{
    CHECK_MSG(h->n_tokens == n, "line %d: %d tokens, want %d", line, h->n_tokens, n);
    for (int32_t i = 0; i < n && i < h->n_tokens; i++)
        CHECK_MSG(h->tokens[i] == want[i], "line %d: token %d is %d, want %d", line, i,
                  h->tokens[i], want[i]);
    CHECK_NEAR(h->cum_log_prob, cum, 1e-5);
    CHECK_NEAR(h->score, cum / pow(n, lp), 1e-5);
    CHECK_EQ(h->finish_reason, reason);
    double s = 0;
    for (int32_t i = 0; i < h->n_tokens; i++)
        s += h->logprobs[i];
    CHECK_NEAR(s, h->cum_log_prob, 1e-5);
}
#define CHECK_HYP(h, want, n, cum, lp, reason) check_hyp(h, want, n, cum, lp, reason, __LINE__)

static void test_beam_early_stopping_and_length_penalty(void)
{
    struct ifl_beam b;
    CHECK_EQ(ifl_beam_init(&b, 4, 32), 0);
    int32_t end = 0;
    struct ifl_beam_hyp h[4];
    struct ifl_sampling_config c = dflt();
    c.beam_width = 2;
    int32_t w_end[] = {0}, w_aend[] = {1, 0}, w_aaend[] = {1, 1, 0};
    double l_end = log(0.5), l_aend = log(0.4 * 0.1), l_aaend = log(0.4 * 0.8 * 0.9);

    /* early_stopping 1: done as soon as two hypotheses finished (step 2) */
    c.length_penalty = 1;
    c.early_stopping = 1;
    CHECK_EQ(run_beam(&b, &c, 5, 3, toy_row, &end, 1), 2);
    CHECK_EQ(ifl_beam_results(&b, h, 4), 2);
    CHECK_HYP(&h[0], w_end, 1, l_end, 1, IFL_FINISH_END_ID);
    CHECK_HYP(&h[1], w_aend, 2, l_aend, 1, IFL_FINISH_END_ID);

    /* heuristic: goes on while the best live beam could still win; the
     * long hypothesis wins under length_penalty 1 */
    c.early_stopping = 0;
    CHECK_EQ(run_beam(&b, &c, 5, 3, toy_row, &end, 1), 3);
    CHECK_EQ(ifl_beam_results(&b, h, 4), 2);
    CHECK_HYP(&h[0], w_aaend, 3, l_aaend, 1, IFL_FINISH_END_ID);
    CHECK_HYP(&h[1], w_end, 1, l_end, 1, IFL_FINISH_END_ID);

    /* length_penalty 0 ranks by cumulative log-prob: the short one first */
    c.length_penalty = 0;
    CHECK_EQ(run_beam(&b, &c, 5, 3, toy_row, &end, 1), 3);
    CHECK_EQ(ifl_beam_results(&b, h, 4), 2);
    CHECK_HYP(&h[0], w_end, 1, l_end, 0, IFL_FINISH_END_ID);
    CHECK_HYP(&h[1], w_aaend, 3, l_aaend, 0, IFL_FINISH_END_ID);

    /* "never" with length_penalty 1 bounds with max_len: longer search,
     * same answer (nothing later can beat it); with max_len 5 it runs to
     * the length limit */
    c.length_penalty = 1;
    c.early_stopping = 2;
    int steps = run_beam(&b, &c, 20, 3, toy_row, &end, 1);
    CHECK(steps > 3);
    CHECK_EQ(ifl_beam_results(&b, h, 4), 2);
    CHECK_HYP(&h[0], w_aaend, 3, l_aaend, 1, IFL_FINISH_END_ID);
    CHECK_HYP(&h[1], w_end, 1, l_end, 1, IFL_FINISH_END_ID);
    ifl_beam_deinit(&b);
}

/* Greedy picks A (0.6) but the best pair starts with B. No end token. */
static void pair_row(const int32_t *h, int32_t n, float *row)
{
    double p[3] = {0, 0.6, 0.4};
    if (n == 1)
        p[1] = h[0] == 1 ? 0.5 : 0.9, p[2] = h[0] == 1 ? 0.5 : 0.1;
    for (int i = 0; i < 3; i++)
        row[i] = p[i] > 0 ? (float)log(p[i]) : NINF;
}

static void test_beam_beats_greedy(void)
{
    struct ifl_beam b;
    CHECK_EQ(ifl_beam_init(&b, 4, 8), 0);
    struct ifl_sampling_config c = dflt();
    struct ifl_beam_hyp h[4];
    int32_t ba[] = {2, 1}, aa[] = {1, 1};
    c.beam_width = 2;
    CHECK_EQ(run_beam(&b, &c, 2, 3, pair_row, NULL, 0), 2);
    CHECK_EQ(ifl_beam_results(&b, h, 4), 2);
    CHECK_HYP(&h[0], ba, 2, log(0.36), 1, IFL_FINISH_LENGTH);
    CHECK_HYP(&h[1], aa, 2, log(0.3), 1, IFL_FINISH_LENGTH); /* AA ties AB: lower token */
    c.beam_width = 1;
    CHECK_EQ(run_beam(&b, &c, 2, 3, pair_row, NULL, 0), 2);
    CHECK_EQ(ifl_beam_results(&b, h, 4), 1);
    CHECK_HYP(&h[0], aa, 2, log(0.3), 1, IFL_FINISH_LENGTH);
    /* results clipped to max */
    c.beam_width = 2;
    run_beam(&b, &c, 2, 3, pair_row, NULL, 0);
    CHECK_EQ(ifl_beam_results(&b, h, 1), 1);
    CHECK_EQ(h[0].tokens[0], 2);
    /* a reset with a width over the capacity is refused */
    c.beam_width = 5;
    CHECK_EQ(ifl_beam_reset(&b, &c, 4), IFL_EINVAL);
    c.beam_width = 2;
    CHECK_EQ(ifl_beam_reset(&b, &c, 9), IFL_EINVAL);
    ifl_beam_deinit(&b);
}

/* A pseudo-random model: logits from a hash of the history, quantised so
 * that ties occur. */
static int32_t g_nv = 6;
static void hash_row(const int32_t *h, int32_t n, float *row)
{
    uint64_t x = 0x1234567ull + (uint64_t)n;
    for (int32_t i = 0; i < n; i++)
        x = (x ^ (uint64_t)h[i]) * 0x100000001b3ull;
    for (int32_t t = 0; t < g_nv; t++) {
        uint64_t y = x + (uint64_t)t * 0x9e3779b97f4a7c15ull;
        y = (y ^ (y >> 29)) * 0xbf58476d1ce4e5b9ull;
        row[t] = (float)((y >> 40) % 8) * 0.5f;
    }
}

static void test_beam_width1_is_greedy(void)
{
    struct ifl_beam b;
    CHECK_EQ(ifl_beam_init(&b, 1, 40), 0);
    int32_t end = 0;
    for (int es = 0; es <= 2; es++)
        for (int trial = 0; trial < 30; trial++) {
            g_nv = 4 + trial % 7;
            struct ifl_sampling_config c = dflt();
            c.early_stopping = es;
            c.length_penalty = (float)(trial % 3) - 0.5f;
            int32_t max_len = 5 + trial;
            if (max_len > 40)
                max_len = 40;
            /* greedy reference on processed logits */
            int32_t seq[64], n = 0, reason = IFL_FINISH_LENGTH;
            float row[64];
            struct ifl_sampler_state st;
            CHECK_EQ(ifl_sampler_state_init(&st, g_nv), 0);
            struct ifl_sampling_config g = dflt();
            g.temperature = 0;
            /* end token banned at the first step so some runs are long */
            while (n < max_len) {
                hash_row(seq, n, row);
                if (trial % 2)
                    row[0] -= 1.0f;
                int32_t t = ifl_sampler_pick(&g, &st, row, NULL, NULL, 0);
                seq[n++] = t;
                if (t == end) {
                    reason = IFL_FINISH_END_ID;
                    break;
                }
            }
            ifl_sampler_state_deinit(&st);
            void (*fn)(const int32_t *, int32_t, float *) = hash_row;
            if (trial % 2) {
                /* same shift in the beam's model */
                struct ifl_sampling_config cc = c;
                CHECK_EQ(ifl_beam_reset(&b, &cc, max_len), 0);
                float rows[64];
                struct ifl_beam_choice ch[1];
                int32_t nch;
                for (;;) {
                    hash_row(ifl_beam_tokens(&b, 0), ifl_beam_len(&b), rows);
                    rows[0] -= 1.0f;
                    if (ifl_beam_step(&b, rows, g_nv, &end, 1, ch, &nch))
                        break;
                }
            } else {
                run_beam(&b, &c, max_len, g_nv, fn, &end, 1);
            }
            struct ifl_beam_hyp h;
            CHECK_EQ(ifl_beam_results(&b, &h, 1), 1);
            CHECK_MSG(h.n_tokens == n, "trial %d: %d tokens, greedy %d", trial, h.n_tokens, n);
            CHECK(memcmp(h.tokens, seq,
                         sizeof(int32_t) * (size_t)(n < h.n_tokens ? n : h.n_tokens)) == 0);
            CHECK_EQ(h.finish_reason, reason);
        }
    ifl_beam_deinit(&b);
}

/* With enough width nothing is pruned: every sequence of a 3-token
 * vocabulary up to length 3 comes back, ordered as brute force ranks them. */
static void test_beam_vs_brute_force(void)
{
    struct ifl_beam b;
    CHECK_EQ(ifl_beam_init(&b, 16, 3), 0);
    int32_t end = 0;
    g_nv = 3;
    for (int lpi = 0; lpi < 3; lpi++) {
        float lpen = (float[]){1.0f, 0.0f, 2.5f}[lpi];
        struct ifl_sampling_config c = dflt();
        c.beam_width = 16;
        c.length_penalty = lpen;
        c.early_stopping = 2;
        run_beam(&b, &c, 3, 3, hash_row, &end, 1);
        struct ifl_beam_hyp h[16];
        int32_t nh = ifl_beam_results(&b, h, 16);
        CHECK_EQ(nh, 1 + 2 + 4 + 8);
        /* brute force: sequences ending at END (length <= 3) or of length 3 */
        double best[16];
        int nb = 0;
        int32_t s[3];
        float row[3];
        for (int len = 1; len <= 3; len++) {
            int combos = 1;
            for (int i = 0; i < len; i++)
                combos *= 3;
            for (int code = 0; code < combos; code++) {
                int x = code, ok = 1;
                for (int i = 0; i < len; i++, x /= 3)
                    s[i] = x % 3;
                for (int i = 0; i < len - 1; i++)
                    ok &= s[i] != end;
                if (!ok || (len < 3 && s[len - 1] != end))
                    continue;
                double cum = 0;
                for (int i = 0; i < len; i++) {
                    hash_row(s, i, row);
                    cum += row[s[i]] - ifl_sampler_logsumexp(row, 3);
                }
                best[nb++] = cum / pow(len, lpen);
            }
        }
        CHECK_EQ(nb, 15);
        for (int i = 0; i < nb; i++)
            for (int j = i + 1; j < nb; j++)
                if (best[j] > best[i]) {
                    double t = best[i];
                    best[i] = best[j];
                    best[j] = t;
                }
        for (int i = 0; i < nh && i < nb; i++)
            CHECK_NEAR(h[i].score, best[i], 1e-5);
    }
    ifl_beam_deinit(&b);
}

static void test_beam_finalize_and_dead_rows(void)
{
    struct ifl_beam b;
    CHECK_EQ(ifl_beam_init(&b, 3, 10), 0);
    struct ifl_sampling_config c = dflt();
    c.beam_width = 3;
    CHECK_EQ(ifl_beam_reset(&b, &c, 10), 0);
    /* only two tokens are allowed: two live beams */
    float row[5] = {NINF, 0, NINF, -1, NINF};
    struct ifl_beam_choice ch[3];
    int32_t nch;
    CHECK_EQ(ifl_beam_step(&b, row, 5, NULL, 0, ch, &nch), 0);
    CHECK_EQ(nch, 2);
    CHECK_EQ(ch[0].token, 1);
    CHECK_EQ(ch[1].token, 3);
    /* cancelled: live beams become hypotheses with that reason */
    ifl_beam_finalize(&b, IFL_FINISH_CANCELLED);
    CHECK_EQ(ifl_beam_n_live(&b), 0);
    struct ifl_beam_hyp h[3];
    CHECK_EQ(ifl_beam_results(&b, h, 3), 2);
    CHECK_EQ(h[0].tokens[0], 1);
    CHECK_EQ(h[0].finish_reason, IFL_FINISH_CANCELLED);
    CHECK_NEAR(h[0].cum_log_prob, 0 - log(1 + exp(-1.0)), 1e-6);
    /* every row banned: done with nothing live */
    CHECK_EQ(ifl_beam_reset(&b, &c, 10), 0);
    float dead[5] = {NINF, NINF, NINF, NINF, NINF};
    CHECK_EQ(ifl_beam_step(&b, dead, 5, NULL, 0, ch, &nch), 1);
    CHECK_EQ(ifl_beam_results(&b, h, 3), 0);
    ifl_beam_deinit(&b);
}

/* ================= stop strings ================= */

struct feed_out {
    char text[4096];
    size_t n;
    int stopped;
};

static void feed(struct ifl_stopstr *m, struct feed_out *o, const char *s)
{
    char buf[1024];
    size_t k;
    o->stopped = ifl_stopstr_feed(m, s, strlen(s), buf, &k);
    memcpy(o->text + o->n, buf, k);
    o->n += k;
    o->text[o->n] = 0;
}

static struct ifl_stopstr *mk(int n, const char *const *stops)
{
    struct ifl_stopstr *m = NULL;
    char err[IFL_ERR_LEN];
    CHECK_EQ(ifl_stopstr_create(&m, stops, n, err), 0);
    return m;
}

static void test_stop_basic(void)
{
    const char *s1[] = {"STOP"};
    struct ifl_stopstr *m = mk(1, s1);
    struct feed_out o = {.n = 0};
    CHECK_EQ(ifl_stopstr_max_hold(m), 3);
    feed(m, &o, "hello ST");
    CHECK_STR(o.text, "hello ");
    CHECK(!o.stopped);
    feed(m, &o, "O");
    CHECK_STR(o.text, "hello ");
    feed(m, &o, "P and more");
    CHECK(o.stopped);
    CHECK_STR(o.text, "hello ");
    CHECK_EQ(ifl_stopstr_match_offset(m), 6);
    CHECK_EQ(ifl_stopstr_match_index(m), 0);
    feed(m, &o, "STOP again");
    CHECK(o.stopped);
    CHECK_STR(o.text, "hello ");
    char fl[8];
    CHECK_EQ(ifl_stopstr_flush(m, fl), 0);
    /* a false start is released once it cannot match */
    ifl_stopstr_reset(m);
    o.n = 0;
    feed(m, &o, "xS");
    feed(m, &o, "T");
    CHECK_STR(o.text, "x");
    feed(m, &o, "Ox");
    CHECK_STR(o.text, "xSTOx");
    feed(m, &o, "STO");
    CHECK_EQ(ifl_stopstr_flush(m, fl), 3);
    CHECK(memcmp(fl, "STO", 3) == 0);
    CHECK_EQ(ifl_stopstr_match_offset(m), -1);
    CHECK_EQ(ifl_stopstr_n_fed(m), 8);
    CHECK_EQ(ifl_stopstr_n_emitted(m), 8);
    ifl_stopstr_free(m);
    ifl_stopstr_free(NULL);
}

static void test_stop_overlaps(void)
{
    struct feed_out o;
    /* "ab" and "bc" on "abc": "ab" ends first */
    const char *s1[] = {"bc", "ab"};
    struct ifl_stopstr *m = mk(2, s1);
    o = (struct feed_out){.n = 0};
    feed(m, &o, "xabc");
    CHECK(o.stopped);
    CHECK_STR(o.text, "x");
    CHECK_EQ(ifl_stopstr_match_offset(m), 1);
    CHECK_EQ(ifl_stopstr_match_index(m), 1);
    ifl_stopstr_free(m);
    /* the earliest end wins over the earliest start, in any chunking */
    const char *s2[] = {"abcd", "c"};
    m = mk(2, s2);
    o = (struct feed_out){.n = 0};
    feed(m, &o, "abcd");
    CHECK(o.stopped);
    CHECK_STR(o.text, "ab");
    CHECK_EQ(ifl_stopstr_match_index(m), 1);
    ifl_stopstr_free(m);
    /* one stop is a prefix of another: the shorter ends first */
    const char *s3[] = {"abc", "ab"};
    m = mk(2, s3);
    o = (struct feed_out){.n = 0};
    feed(m, &o, "x");
    feed(m, &o, "a");
    feed(m, &o, "b");
    CHECK(o.stopped);
    CHECK_STR(o.text, "x");
    CHECK_EQ(ifl_stopstr_match_offset(m), 1);
    ifl_stopstr_free(m);
    /* two stops ending at the same byte: the longer one */
    const char *s4[] = {"b", "ab"};
    m = mk(2, s4);
    o = (struct feed_out){.n = 0};
    feed(m, &o, "xa");
    CHECK_STR(o.text, "x");
    feed(m, &o, "b");
    CHECK(o.stopped);
    CHECK_STR(o.text, "x");
    CHECK_EQ(ifl_stopstr_match_index(m), 1);
    ifl_stopstr_free(m);
    /* self-overlap: "aab" inside "aaab" */
    const char *s5[] = {"aab"};
    m = mk(1, s5);
    o = (struct feed_out){.n = 0};
    feed(m, &o, "a");
    feed(m, &o, "a");
    feed(m, &o, "a");
    CHECK_STR(o.text, "a");
    feed(m, &o, "b");
    CHECK(o.stopped);
    CHECK_STR(o.text, "a");
    CHECK_EQ(ifl_stopstr_match_offset(m), 1);
    ifl_stopstr_free(m);
    /* spanning several tokens, with held bytes from earlier feeds */
    const char *s6[] = {"</answer>"};
    m = mk(1, s6);
    o = (struct feed_out){.n = 0};
    feed(m, &o, "42 </");
    CHECK_STR(o.text, "42 ");
    feed(m, &o, "ans");
    feed(m, &o, "wer");
    CHECK_STR(o.text, "42 ");
    feed(m, &o, "> tail");
    CHECK(o.stopped);
    CHECK_STR(o.text, "42 ");
    CHECK_EQ(ifl_stopstr_match_offset(m), 3);
    ifl_stopstr_free(m);
}

static void test_stop_utf8(void)
{
    const char *s[] = {"\xc3\xa9!"}; /* "é!" */
    struct ifl_stopstr *m = mk(1, s);
    struct feed_out o = {.n = 0};
    feed(m, &o, "caf\xc3\xa9"); /* "café": é is held */
    CHECK_STR(o.text, "caf");
    feed(m, &o, ".");
    CHECK_STR(o.text, "caf\xc3\xa9.");
    feed(m, &o, "\xc3\xa9");
    feed(m, &o, "!");
    CHECK(o.stopped);
    CHECK_STR(o.text, "caf\xc3\xa9.");
    CHECK_EQ(ifl_stopstr_match_offset(m), 6);
    ifl_stopstr_free(m);
    /* a stop string sharing a lead byte with other characters */
    const char *s2[] = {"\xe2\x82\xac"}; /* "€" */
    m = mk(1, s2);
    o = (struct feed_out){.n = 0};
    feed(m, &o, "\xe2\x80\x94"); /* "—" shares e2 */
    CHECK_STR(o.text, "\xe2\x80\x94");
    feed(m, &o, "5\xe2\x82\xac");
    CHECK(o.stopped);
    CHECK_STR(o.text, "\xe2\x80\x94"
                      "5");
    ifl_stopstr_free(m);
}

static void test_stop_create(void)
{
    struct ifl_stopstr *m = (struct ifl_stopstr *)1;
    char err[IFL_ERR_LEN];
    const char *bad[] = {"ok", ""};
    CHECK_EQ(ifl_stopstr_create(&m, bad, 2, err), IFL_EINVAL);
    CHECK(m == NULL);
    CHECK_STR(err, "stop_strings[1]: must be a non-empty string");
    const char *bad2[] = {NULL};
    CHECK_EQ(ifl_stopstr_create(&m, bad2, 1, err), IFL_EINVAL);
    /* no stop strings: everything passes */
    m = mk(0, NULL);
    struct feed_out o = {.n = 0};
    feed(m, &o, "anything at all");
    CHECK_STR(o.text, "anything at all");
    CHECK_EQ(ifl_stopstr_max_hold(m), 0);
    ifl_stopstr_free(m);
    /* the strings are copied */
    char buf[8] = "end";
    const char *s[] = {buf};
    m = mk(1, s);
    strcpy(buf, "xyz");
    o = (struct feed_out){.n = 0};
    feed(m, &o, "the end");
    CHECK(o.stopped);
    CHECK_STR(o.text, "the ");
    ifl_stopstr_free(m);
}

/* Naive reference: the first byte e at which some stop ends; the longest
 * such. Returns the match start or -1. */
static int naive_match(const char *t, int n, const char *const *stops, int ns)
{
    for (int e = 1; e <= n; e++) {
        int best = -1;
        for (int i = 0; i < ns; i++) {
            int l = (int)strlen(stops[i]);
            if (l <= e && memcmp(t + e - l, stops[i], (size_t)l) == 0 && l > best)
                best = l;
        }
        if (best > 0)
            return e - best;
    }
    return -1;
}

/* Longest suffix of t[0..n) that is a proper prefix of some stop. */
static int naive_hold(const char *t, int n, const char *const *stops, int ns)
{
    int best = 0;
    for (int i = 0; i < ns; i++) {
        int l = (int)strlen(stops[i]);
        for (int k = l - 1; k > best; k--)
            if (k <= n && memcmp(t + n - k, stops[i], (size_t)k) == 0) {
                best = k;
                break;
            }
    }
    return best;
}

static void test_stop_random_vs_naive(void)
{
    struct ifl_rng r;
    ifl_rng_seed(&r, 2024);
    const char alpha[] = "abca\xc3\xa9"; /* skewed toward a; é as two bytes */
    int failures = 0;
    for (int trial = 0; trial < 4000 && failures < 5; trial++) {
        char sbuf[6][8];
        const char *stops[6];
        int ns = 1 + (int)(ifl_rng_next(&r) % 5);
        for (int i = 0; i < ns; i++) {
            int l = 1 + (int)(ifl_rng_next(&r) % 5), k = 0;
            while (k < l) {
                int c = (int)(ifl_rng_next(&r) % 5);
                if (c == 4) {
                    if (k + 2 > 6)
                        break;
                    sbuf[i][k++] = alpha[4];
                    sbuf[i][k++] = alpha[5];
                } else {
                    sbuf[i][k++] = alpha[c];
                }
            }
            if (k == 0)
                sbuf[i][k++] = 'a';
            sbuf[i][k] = 0;
            stops[i] = sbuf[i];
        }
        char text[80];
        int n = 0, want_n = (int)(ifl_rng_next(&r) % 40);
        while (n < want_n) {
            int c = (int)(ifl_rng_next(&r) % 5);
            if (c == 4) {
                text[n++] = alpha[4];
                text[n++] = alpha[5];
            } else {
                text[n++] = alpha[c];
            }
        }
        struct ifl_stopstr *m = mk(ns, stops);
        int want_off = naive_match(text, n, stops, ns);
        int want_len = want_off >= 0 ? want_off : n;
        char out[200];
        size_t n_out = 0;
        int pos = 0, stopped = 0, bad = 0;
        while (pos < n && !stopped) {
            /* chunks of 0..4 bytes, never splitting é */
            int k = (int)(ifl_rng_next(&r) % 5);
            if (pos + k > n)
                k = n - pos;
            if (pos + k < n && (unsigned char)text[pos + k] == 0xa9)
                k++;
            char buf[64];
            size_t got;
            stopped = ifl_stopstr_feed(m, text + pos, (size_t)k, buf, &got);
            memcpy(out + n_out, buf, got);
            n_out += got;
            pos += k;
            int end_match = naive_match(text, pos, stops, ns);
            if (stopped != (end_match >= 0))
                bad = 1;
            else if (!stopped && (int)n_out != pos - naive_hold(text, pos, stops, ns))
                bad = 2; /* holds back exactly the possible stop prefix */
            if ((int)n_out > want_len || memcmp(out, text, n_out) != 0)
                bad = 3; /* output is always a prefix of the answer */
        }
        if (!stopped) {
            char fl[8];
            size_t k = ifl_stopstr_flush(m, fl);
            memcpy(out + n_out, fl, k);
            n_out += k;
        }
        if ((int)n_out != want_len || memcmp(out, text, n_out) != 0)
            bad = 4;
        if (ifl_stopstr_match_offset(m) != want_off)
            bad = 5;
        if (bad) {
            failures++;
            fprintf(stderr, "  trial %d: check %d failed on text '%.*s' (%d stops, first '%s')\n",
                    trial, bad, n, text, ns, stops[0]);
        }
        ifl_stopstr_free(m);
    }
    CHECK_EQ(failures, 0);
}

/* Speculative sampling keeps the target distribution. 10^5 draws (draw
 * numbers 0..99999 of one seed) on a synthetic row at temperature 0.8 and
 * top-p 0.95: with one-hot proposals (a likely draft, an unlikely one and
 * one the filters remove), and with drafts sampled from a distribution q
 * near p, each histogram's chi-square against ifl_sampler_dist's
 * distribution is below the 0.1 % critical value. With sampled drafts the
 * share kept is sum min(p, q), above the sum p q that plain decoding's
 * independent draw would match. */
static void test_spec_rejection_distribution(void)
{
    enum { V = 12, DRAWS = 100000 };
    const float row[V] = {2.0f, 1.5f, 1.4f, 1.0f, 0.5f, 0.4f, 0.0f, -0.5f, -1.0f, -3, -6, -9};
    struct ifl_sampling_config c;
    ifl_sampling_default(&c);
    c.temperature = 0.8f;
    c.top_p = 0.95f;
    c.seed = 1234;
    struct ifl_sampler_state st;
    CHECK_EQ(ifl_sampler_state_init(&st, V), 0);
    int32_t prompt[1] = {0};
    ifl_sampler_reset(&st, &c, prompt, 1);
    const struct ifl_sampler_cand *cd;
    int32_t nc = ifl_sampler_dist(&c, &st, row, &cd);
    double p[V] = {0}, total = 0;
    for (int32_t i = 0; i < nc; i++)
        total += cd[i].p;
    for (int32_t i = 0; i < nc; i++)
        p[cd[i].id] = cd[i].p / total;
    CHECK(nc >= 6 && nc < V); /* top-p removed some */
    /* q: a softmax of the row, flatter and shifted, over every token */
    float q[V];
    double qs = 0, min_sum = 0, prod_sum = 0;
    for (int32_t t = 0; t < V; t++)
        qs += (q[t] = expf(0.7f * row[(t + 1) % V]));
    for (int32_t t = 0; t < V; t++) {
        q[t] = (float)(q[t] / qs);
        min_sum += p[t] < q[t] ? p[t] : q[t];
        prod_sum += p[t] * q[t];
    }
    const int32_t drafts[4] = {1, 6, V - 1, -1}; /* -1: sampled from q */
    uint64_t g = 99;
    for (int k = 0; k < 4; k++) {
        long hist[V] = {0}, kept = 0;
        for (int64_t i = 0; i < DRAWS; i++) {
            int32_t d = drafts[k];
            if (d < 0) { /* a draw from q of the test's own */
                g = g * 6364136223846793005ull + 1442695040888963407ull;
                double u = (double)(g >> 11) * 0x1p-53, cum = 0;
                for (d = 0; d < V - 1; d++)
                    if (u < (cum += q[d]))
                        break;
            }
            st.n_accepted = i; /* draw number i */
            int32_t t =
                ifl_sampler_pick_spec(&c, &st, row, d, drafts[k] < 0 ? q : NULL, NULL, NULL, 0);
            CHECK(t >= 0 && t < V);
            if (t >= 0 && t < V)
                hist[t]++;
            kept += t == d;
        }
        double chi = 0;
        int df = -1;
        for (int32_t t = 0; t < V; t++) {
            if (p[t] == 0) {
                CHECK_MSG(hist[t] == 0, "token %d outside the filters drawn %ld times", t, hist[t]);
                continue;
            }
            double want = p[t] * DRAWS;
            chi += (hist[t] - want) * (hist[t] - want) / want;
            df++;
        }
        /* 0.1 % critical values of chi-square, df 5..11 */
        static const double crit[] = {20.52, 22.46, 24.32, 26.12, 27.88, 29.59, 31.26};
        CHECK_MSG(df >= 5 && df <= 11 && chi < crit[df - 5], "case %d: chi-square %.1f, df %d", k,
                  chi, df);
        double share = (double)kept / DRAWS;
        fprintf(stderr, "  case %d: chi-square %.1f on %d df; drafts kept %.3f\n", k, chi, df,
                share);
        if (drafts[k] < 0)
            CHECK_MSG(fabs(share - min_sum) < 0.01 && share > prod_sum + 0.05,
                      "sampled drafts kept %.3f; sum min(p,q) %.3f, sum pq %.3f", share, min_sum,
                      prod_sum);
    }
    ifl_sampler_state_deinit(&st);
}

int main(void)
{
    T_RUN(test_defaults);
    T_RUN(test_spec_rejection_distribution);
    T_RUN(test_validate_fields);
    T_RUN(test_check_extras);
    T_RUN(test_bias);
    T_RUN(test_bad_words);
    T_RUN(test_min_tokens);
    T_RUN(test_repetition_penalty);
    T_RUN(test_presence_frequency);
    T_RUN(test_no_repeat_ngram);
    T_RUN(test_order_of_transforms);
    T_RUN(test_recount_matches_accept);
    T_RUN(test_greedy);
    T_RUN(test_logprobs);
    T_RUN(test_dist_vs_reference);
    T_RUN(test_statistics);
    T_RUN(test_seeds);
    T_RUN(test_top_p_decay);
    T_RUN(test_extreme_temperatures);
    T_RUN(test_speed);
    T_RUN(test_beam_early_stopping_and_length_penalty);
    T_RUN(test_beam_beats_greedy);
    T_RUN(test_beam_width1_is_greedy);
    T_RUN(test_beam_vs_brute_force);
    T_RUN(test_beam_finalize_and_dead_rows);
    T_RUN(test_stop_basic);
    T_RUN(test_stop_overlaps);
    T_RUN(test_stop_utf8);
    T_RUN(test_stop_create);
    T_RUN(test_stop_random_vs_naive);
    return t_done();
}
