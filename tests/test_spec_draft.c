/*
 * Draft-model speculation (src/runtime/spec_draft.c) on real models,
 * through the public API. The target is the tiny reference llama of
 * ../shared/models/ref in F32; its drafts come from the same weights in
 * Q4_0 (they agree with the target sometimes, not always), from the
 * target's own file (they always agree, greedy or sampled: a draft is the
 * request's own seeded pick), and from smaller models that
 * tools/mkmodel writes over the same vocabulary. Every output must be the
 * plain run's token for token and log-prob for log-prob (greedy and seeded
 * sampling; alone, among 15 other requests with chunked prefill, after a
 * preemption); drafts must be kept and rejected; a draft whose vocabulary
 * differs is refused naming the first differing token id; no KV block
 * of either pool stays in use after a storm of cancels; and the adaptive
 * draft length weighs the draft model's cost (its statics: the file is
 * included).
 */
#include <stdlib.h>
#include <string.h>

#include "inflight.h"
#include "model/gguf.h"
#include "runtime/spec_draft.c"
#include "t.h"

#define MAX_LEN 160

static char ref_dir[600], target_path[700], q4_path[700], tmp_dir[600], mk[600];
static char small_path[700], swap_path[700], spm_path[700];

static const int32_t ONCE[] = {1, 403, 407, 261, 378}; /* "Once upon a time" with BOS */

struct spec {
    const char *draft; /* NULL: no speculation */
    int32_t n_max;
    float p_min;
    int32_t adaptive;
};

static ifl_executor *open_ex(const struct spec *sp, int32_t max_batch, int32_t max_num_tokens,
                             int64_t kv_tokens, int policy, char *err)
{
    struct ifl_executor_config c;
    ifl_executor_config_default(&c);
    c.max_batch_size = max_batch;
    c.max_num_tokens = max_num_tokens;
    c.kv_cache_tokens = kv_tokens;
    c.sched_policy = policy;
    c.n_threads = 2;
    c.n_ctx = 256;
    if (sp && sp->draft) {
        c.speculative.type = IFL_SPEC_DRAFT;
        c.speculative.draft_model = sp->draft;
        c.speculative.n_max = sp->n_max;
        c.speculative.p_min = sp->p_min;
        c.speculative.adaptive = sp->adaptive;
    }
    ifl_executor *ex = NULL;
    if (ifl_executor_create(&ex, target_path, &c, err))
        return NULL;
    return ex;
}

static ifl_executor *open_ok(const struct spec *sp, int32_t max_batch, int32_t max_num_tokens,
                             int64_t kv_tokens, int policy)
{
    char err[512] = "";
    ifl_executor *ex = open_ex(sp, max_batch, max_num_tokens, kv_tokens, policy, err);
    CHECK_MSG(ex, "create: %s", err);
    return ex;
}

static void req(struct ifl_request *r, const int32_t *ids, int32_t n, int32_t max_tokens,
                int sampled, uint64_t seed)
{
    ifl_request_init(r);
    r->input_ids = ids;
    r->n_input = n;
    r->max_tokens = max_tokens;
    r->sampling.temperature = 0;
    r->sampling.ignore_eos = 1;
    if (sampled) {
        r->sampling.temperature = 0.8f;
        r->sampling.top_p = 0.9f;
        r->sampling.seed = seed;
    }
    r->output.return_log_probs = 1;
    r->output.return_perf_metrics = 1;
}

struct out {
    int32_t tok[MAX_LEN], n;
    float lp[MAX_LEN];
    int32_t preemptions, drafted, accepted;
};

static void collect(ifl_executor *ex, ifl_id id, struct out *o)
{
    memset(o, 0, sizeof(*o));
    for (int final = 0; !final;) {
        struct ifl_response *r = NULL;
        int32_t got = 0;
        int rc = ifl_await(ex, &id, 1, 60000, &r, 1, &got);
        if (rc) {
            CHECK_MSG(0, "await: %s", ifl_strerror(rc));
            return;
        }
        CHECK_EQ(r->status, 0);
        struct ifl_sequence_result *s = &r->results[0];
        if (s->n_tokens > 0 && o->n + s->n_tokens <= MAX_LEN) {
            memcpy(o->tok + o->n, s->tokens, sizeof(int32_t) * (size_t)s->n_tokens);
            if (s->log_probs)
                memcpy(o->lp + o->n, s->log_probs, sizeof(float) * (size_t)s->n_tokens);
            o->n += s->n_tokens;
        }
        o->preemptions = r->perf.preemptions;
        o->drafted = r->perf.draft_tokens;
        o->accepted = r->perf.accepted_draft_tokens;
        final = r->is_final;
        ifl_response_free(r);
    }
}

static int run_one(ifl_executor *ex, const struct ifl_request *r, struct out *o)
{
    ifl_id id = 0;
    char err[512] = "";
    int rc = ifl_enqueue(ex, r, &id, err);
    CHECK_MSG(rc == 0, "enqueue: %s", err);
    if (rc)
        return rc;
    collect(ex, id, o);
    return 0;
}

static void check_same(const struct out *a, const struct out *b, const char *what)
{
    CHECK_MSG(a->n == b->n, "%s: %d tokens, plain %d", what, a->n, b->n);
    int32_t n = a->n < b->n ? a->n : b->n;
    CHECK_MSG(!memcmp(a->tok, b->tok, sizeof(int32_t) * (size_t)n), "%s: tokens differ", what);
    CHECK_MSG(!memcmp(a->lp, b->lp, sizeof(float) * (size_t)n), "%s: log-probs differ", what);
}

/* Both pools empty once the engine is idle. */
static void check_no_blocks_used(ifl_executor *ex)
{
    CHECK_EQ(ifl_executor_wait_idle(ex, 60000), 0);
    struct ifl_iteration_stats st;
    CHECK_EQ(ifl_get_iteration_stats(ex, &st), 0);
    CHECK_EQ(st.kv_blocks_used, 0);
    struct ifl_kvc_stats ds;
    if (ifl_spec_draft_stats(ex, &ds) == 0) {
        CHECK_EQ(ds.n_used, 0);
        /* the draft's pool in the stats: reserved, and resident while
         * it holds blocks taken and not yet given back */
        CHECK_MSG(st.draft_kv_bytes_reserved > 0 && st.draft_kv_bytes_resident >= 0 &&
                      (st.draft_kv_bytes_resident > 0) == (ds.n_touched > 0) &&
                      st.draft_kv_bytes_resident <= st.draft_kv_bytes_reserved,
                  "draft KV bytes: reserved %lld, resident %lld (%d blocks touched)",
                  (long long)st.draft_kv_bytes_reserved, (long long)st.draft_kv_bytes_resident,
                  ds.n_touched);
    } else {
        CHECK_EQ(st.draft_kv_bytes_reserved, 0);
        CHECK_EQ(st.draft_kv_bytes_resident, 0);
    }
}

static int mkmodel(const char *args)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "%s %s >%s/mk.log 2>&1", mk, args, tmp_dir);
    int sys = system(cmd);
    CHECK_MSG(sys == 0, "mkmodel failed (%d): %s", sys, cmd);
    return sys;
}

/* A prompt of n tokens from a seed (ids of the 512-token vocabulary
 * past its byte tokens), BOS first. */
static void prompt(int32_t *p, int32_t n, uint32_t seed)
{
    p[0] = 1;
    for (int32_t i = 1; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = 259 + (int32_t)((seed >> 8) % 253);
    }
}

/* ---- tests ---- */

/* The cost model: k drafts kept with probability a each, a draft pass
 * costing r target steps. */
static void test_best_drafts(void)
{
    CHECK_EQ(best_drafts(1.0, 0.0, 8), 8);  /* free and always right: all */
    CHECK_EQ(best_drafts(0.0, 0.0, 8), 0);  /* never right: none */
    CHECK_EQ(best_drafts(0.99, 1.0, 8), 0); /* as dear as the target: never pays */
    CHECK_EQ(best_drafts(0.3, 0.5, 8), 0);  /* 1.3 tokens for 1.5 steps */
    CHECK_EQ(best_drafts(0.8, 0.1, 16), 6); /* (1 - 0.8^(k+1)) / 0.2 / (1 + 0.1 k) peaks at 6 */
    CHECK_EQ(best_drafts(0.5, 0.05, 8), 3);
    CHECK_EQ(best_drafts(0.9, 0.1, 3), 3); /* bounded by kmax */
    /* 1.02 tokens per step at least: a = 0.02 with free drafts is not enough */
    CHECK_EQ(best_drafts(0.019, 0.0, 8), 0);
    CHECK(best_drafts(0.021, 0.0, 8) > 0);
}

/* One request, greedy and seeded-sampled, with the Q4_0 draft: the plain
 * run's output bitwise; some drafts kept, some not. Then the target's own
 * file as its draft: greedy keeps every draft. */
static void test_alone(void)
{
    const char *drafts[] = {q4_path, target_path, small_path};
    const char *names[] = {"q4_0 copy", "same file", "mkmodel qwen2 64x1"};
    for (int di = 0; di < 3; di++) {
        struct spec sp = {drafts[di], 8, 0.0f, 0};
        ifl_executor *ex = open_ok(&sp, 4, 512, 0, IFL_SCHED_GUARANTEED_NO_EVICT);
        if (!ex)
            return;
        for (int sampled = 0; sampled < 2; sampled++) {
            struct ifl_request r;
            req(&r, ONCE, 5, 120, sampled, 7);
            struct out plain, spec;
            r.speculative.disable = 1;
            if (run_one(ex, &r, &plain))
                break;
            CHECK_EQ(plain.drafted, 0);
            r.speculative.disable = 0;
            if (run_one(ex, &r, &spec))
                break;
            char what[96];
            snprintf(what, sizeof what, "%s, %s", names[di], sampled ? "sampled" : "greedy");
            check_same(&spec, &plain, what);
            printf("  %s: %d of %d drafts kept\n", what, spec.accepted, spec.drafted);
            CHECK_MSG(spec.drafted > 0, "%s: nothing drafted", what);
            if (di == 0)
                CHECK_MSG(spec.accepted > 0 && spec.accepted < spec.drafted,
                          "%s: %d of %d drafts kept (want some, not all)", what, spec.accepted,
                          spec.drafted);
            /* the same model drafts what the target picks: the argmax, or
             * the same seeded sample */
            if (di == 1)
                CHECK_MSG(spec.accepted == spec.drafted, "%s: %d of %d drafts kept (want all)",
                          what, spec.accepted, spec.drafted);
        }
        check_no_blocks_used(ex);
        ifl_executor_destroy(ex, 0);
    }
}

/* Three samples of one request: each forks from the primary's first row
 * and then drafts on its own; every sample's tokens and log-probs as
 * without speculation (the same file drafts, so each keeps all). */
static void test_samples(void)
{
    struct spec sp = {target_path, 6, 0.0f, 0};
    ifl_executor *ex = open_ok(&sp, 4, 512, 0, IFL_SCHED_GUARANTEED_NO_EVICT);
    if (!ex)
        return;
    static struct out o[2][3];
    int64_t drafted = 0;
    for (int on = 0; on < 2; on++) {
        struct ifl_request r;
        req(&r, ONCE, 5, 60, 1, 21);
        r.num_return_sequences = 3;
        r.speculative.disable = !on;
        struct ifl_iteration_stats st0, st1;
        CHECK_EQ(ifl_get_iteration_stats(ex, &st0), 0);
        ifl_id id = 0;
        char err[512] = "";
        CHECK_MSG(ifl_enqueue(ex, &r, &id, err) == 0, "enqueue: %s", err);
        memset(o[on], 0, sizeof o[on]);
        for (int final = 0; !final;) {
            struct ifl_response *resp = NULL;
            int32_t got = 0;
            if (ifl_await(ex, &id, 1, 60000, &resp, 1, &got)) {
                CHECK(0);
                break;
            }
            CHECK_EQ(resp->status, 0);
            struct out *so = &o[on][resp->sequence_index % 3];
            struct ifl_sequence_result *sr = &resp->results[0];
            if (sr->n_tokens > 0 && so->n + sr->n_tokens <= MAX_LEN) {
                memcpy(so->tok + so->n, sr->tokens, sizeof(int32_t) * (size_t)sr->n_tokens);
                memcpy(so->lp + so->n, sr->log_probs, sizeof(float) * (size_t)sr->n_tokens);
                so->n += sr->n_tokens;
            }
            final = resp->is_final;
            ifl_response_free(resp);
        }
        CHECK_EQ(ifl_executor_wait_idle(ex, 60000), 0);
        CHECK_EQ(ifl_get_iteration_stats(ex, &st1), 0);
        if (on)
            drafted = st1.draft_tokens - st0.draft_tokens;
    }
    for (int k = 0; k < 3; k++) {
        CHECK_EQ(o[0][k].n, 60);
        check_same(&o[1][k], &o[0][k], "a sample");
    }
    CHECK_MSG(memcmp(o[0][0].tok, o[0][1].tok, sizeof(int32_t) * 60), "samples 0 and 1 agree");
    CHECK_MSG(drafted > 0, "no drafts for the samples");
    check_no_blocks_used(ex);
    ifl_executor_destroy(ex, 0);
}

/* p_min: a draft model sure of nothing proposes nothing; a request's own
 * p_min overrides the executor's. */
static void test_p_min(void)
{
    struct spec sp = {q4_path, 8, 1.0f, 0};
    ifl_executor *ex = open_ok(&sp, 2, 512, 0, IFL_SCHED_GUARANTEED_NO_EVICT);
    if (!ex)
        return;
    struct ifl_request r;
    req(&r, ONCE, 5, 40, 0, 0);
    struct out a, b;
    if (!run_one(ex, &r, &a))
        CHECK_EQ(a.drafted, 0);
    r.speculative.p_min = 0;
    if (!run_one(ex, &r, &b)) {
        CHECK(b.drafted > 0);
        check_same(&b, &a, "p_min 0 against 1");
    }
    ifl_executor_destroy(ex, 0);
}

/* The plain outputs of a set of requests, each alone. */
static void run_alone(struct ifl_request *r, int n, struct out *alone)
{
    ifl_executor *ex = open_ok(NULL, 4, 512, 0, IFL_SCHED_GUARANTEED_NO_EVICT);
    if (!ex)
        return;
    for (int k = 0; k < n; k++)
        run_one(ex, &r[k], &alone[k]);
    ifl_executor_destroy(ex, 0);
}

/* Sixteen requests at once, greedy and sampled, drafting and not, with
 * prompts of 40-70 tokens and 16 rows a step (so prefills, the target's
 * and the draft's, come in chunks): each output as when it ran alone
 * without speculation. */
static void test_crowd_chunked(void)
{
    enum { N = 16 };
    static int32_t prompts[N][80];
    struct ifl_request r[N];
    static struct out alone[N], got[N];
    for (int k = 0; k < N; k++) {
        int32_t len = 40 + 2 * k;
        prompt(prompts[k], len, 100u + (uint32_t)k);
        req(&r[k], prompts[k], len, 60 + k, k % 2, (uint64_t)k);
        r[k].speculative.disable = k % 4 == 3; /* a few plain ones among them */
    }
    run_alone(r, N, alone);
    struct spec sp = {q4_path, 6, 0.0f, 0};
    ifl_executor *ex = open_ok(&sp, N, 16, 0, IFL_SCHED_GUARANTEED_NO_EVICT);
    if (!ex)
        return;
    ifl_id ids[N];
    char err[512] = "";
    CHECK_MSG(ifl_enqueue_many(ex, r, N, ids, err) == 0, "enqueue: %s", err);
    int32_t drafted = 0, kept = 0;
    for (int k = 0; k < N; k++) {
        collect(ex, ids[k], &got[k]);
        char what[64];
        snprintf(what, sizeof what, "request %d of %d", k, N);
        check_same(&got[k], &alone[k], what);
        if (r[k].speculative.disable)
            CHECK_EQ(got[k].drafted, 0);
        drafted += got[k].drafted;
        kept += got[k].accepted;
    }
    printf("  16 requests, 16 rows a step: %d of %d drafts kept\n", kept, drafted);
    CHECK(kept > 0 && kept < drafted);
    check_no_blocks_used(ex);
    ifl_executor_destroy(ex, 0);
}

/* A KV pool of 256 positions holds about three of eight requests of 90
 * tokens: the low-priority drafting request is preempted, its draft KV
 * dropped and caught up again, and its output is still the plain one. */
static void test_preempted(void)
{
    enum { N = 8 };
    static int32_t prompts[N][8];
    struct ifl_request r[N];
    static struct out alone[N], got[N];
    for (int k = 0; k < N; k++) {
        prompt(prompts[k], 6, 900u + (uint32_t)k);
        req(&r[k], prompts[k], 6, 90, k % 2, (uint64_t)k + 3);
        r[k].priority = k == 0 ? 0.1f : 0.9f;
    }
    run_alone(r, N, alone);
    struct spec sp = {q4_path, 4, 0.0f, 0};
    ifl_executor *ex = open_ok(&sp, N, 64, 256, IFL_SCHED_MAX_UTILIZATION);
    if (!ex)
        return;
    ifl_id ids[N];
    char err[512] = "";
    CHECK_EQ(ifl_enqueue(ex, &r[0], &ids[0], err), 0);
    CHECK_EQ(ifl_enqueue_many(ex, r + 1, N - 1, ids + 1, err), 0);
    int32_t drafted = 0;
    for (int k = 0; k < N; k++) {
        collect(ex, ids[k], &got[k]);
        char what[64];
        snprintf(what, sizeof what, "request %d (preempted %d times)", k, got[k].preemptions);
        check_same(&got[k], &alone[k], what);
        drafted += got[k].drafted;
    }
    CHECK_MSG(got[0].preemptions >= 1, "the drafting request was never preempted");
    CHECK(got[0].drafted > 0 && drafted > got[0].drafted);
    check_no_blocks_used(ex);
    ifl_executor_destroy(ex, 0);
}

/* Adaptive drafting with a draft model that is never right: it soon
 * stops drafting (and running at all) for most steps; the output is
 * still the plain one. Then the drafts of a request that follows start
 * from what the first one learnt. */
static void test_adaptive(void)
{
    struct out o[2][3];
    for (int adaptive = 0; adaptive < 2; adaptive++) {
        struct spec sp = {small_path, 8, 0.0f, adaptive};
        ifl_executor *ex = open_ok(&sp, 2, 512, 0, IFL_SCHED_GUARANTEED_NO_EVICT);
        if (!ex)
            return;
        struct ifl_request r;
        req(&r, ONCE, 5, 150, 0, 0);
        r.speculative.disable = 1;
        run_one(ex, &r, &o[adaptive][0]);
        r.speculative.disable = 0;
        run_one(ex, &r, &o[adaptive][1]);
        run_one(ex, &r, &o[adaptive][2]);
        check_same(&o[adaptive][1], &o[adaptive][0], "first");
        check_same(&o[adaptive][2], &o[adaptive][0], "second");
        printf("  adaptive %d: %d and then %d drafts\n", adaptive, o[adaptive][1].drafted,
               o[adaptive][2].drafted);
        check_no_blocks_used(ex);
        ifl_executor_destroy(ex, 0);
    }
    CHECK_EQ(o[0][1].accepted, 0);
    CHECK(o[0][1].drafted >= 500);
    CHECK_MSG(o[1][1].drafted * 5 < o[0][1].drafted, "adaptive: %d drafts, %d without",
              o[1][1].drafted, o[0][1].drafted);
    CHECK(o[1][2].drafted <= o[1][1].drafted);
}

/* Sixteen drafting requests cancelled while they decode (some at once,
 * some after their first tokens): no block of the target's pool or the
 * draft's stays used, and the draft's pool was in use. */
static void test_cancel_storm(void)
{
    enum { N = 16 };
    static int32_t prompts[N][40];
    struct ifl_request r[N];
    struct spec sp = {q4_path, 8, 0.0f, 0};
    ifl_executor *ex = open_ok(&sp, N, 64, 0, IFL_SCHED_GUARANTEED_NO_EVICT);
    if (!ex)
        return;
    for (int round = 0; round < 3; round++) {
        ifl_id ids[N];
        for (int k = 0; k < N; k++) {
            prompt(prompts[k], 30, 7000u + (uint32_t)(round * N + k));
            req(&r[k], prompts[k], 30, 200, k % 2, (uint64_t)k);
            r[k].streaming = 1;
        }
        char err[512] = "";
        CHECK_EQ(ifl_enqueue_many(ex, r, N, ids, err), 0);
        /* round 0 cancels at once; the others once a token has come */
        for (int k = 0; k < N; k++) {
            if (round > 0) {
                struct ifl_response *resp = NULL;
                int32_t got = 0;
                if (ifl_await(ex, &ids[k], 1, 60000, &resp, 1, &got) == 0)
                    ifl_response_free(resp);
            }
            ifl_cancel(ex, ids[k]);
        }
        for (int k = 0; k < N; k++) {
            struct out o;
            collect(ex, ids[k], &o);
        }
        struct ifl_kvc_stats ds;
        CHECK_EQ(ifl_executor_wait_idle(ex, 60000), 0);
        CHECK_EQ(ifl_spec_draft_stats(ex, &ds), 0);
        if (round == 2)
            CHECK_MSG(ds.peak_used > 0, "the draft's pool was never used");
        check_no_blocks_used(ex);
    }
    ifl_executor_destroy(ex, 0);
}

/* The first differing token id of two GGUF vocabularies, -1 if none. */
static int64_t first_difference(const char *a, const char *b)
{
    struct ifl_gguf *ga = NULL, *gb = NULL;
    int64_t at = -2;
    struct ifl_gguf_value ta, tb;
    if (!ifl_gguf_open(&ga, a, NULL) && !ifl_gguf_open(&gb, b, NULL) &&
        !ifl_gguf_get_arr(ga, "tokenizer.ggml.tokens", &ta, NULL) &&
        !ifl_gguf_get_arr(gb, "tokenizer.ggml.tokens", &tb, NULL)) {
        uint64_t n = ta.n < tb.n ? ta.n : tb.n;
        at = ta.n == tb.n ? -1 : (int64_t)n;
        for (uint64_t i = 0; i < n; i++) {
            const char *sa, *sb;
            size_t la, lb;
            ifl_gguf_arr_str(&ta, i, &sa, &la);
            ifl_gguf_arr_str(&tb, i, &sb, &lb);
            if (la != lb || memcmp(sa, sb, la)) {
                at = (int64_t)i;
                break;
            }
        }
    }
    ifl_gguf_free(ga);
    ifl_gguf_free(gb);
    return at;
}

/* A draft over another vocabulary is refused, the error naming the first
 * token id where they differ: the same 512 texts with two swapped, and
 * SentencePiece's 32000; a missing file names the file. */
static void test_vocab_mismatch(void)
{
    const char *bad[] = {swap_path, spm_path};
    for (int i = 0; i < 2; i++) {
        int64_t at = first_difference(target_path, bad[i]);
        CHECK(at >= 0);
        if (i == 0)
            CHECK_EQ(at, 300);
        struct spec sp = {bad[i], 8, 0.5f, 1};
        char err[512] = "", want[64];
        ifl_executor *ex = open_ex(&sp, 4, 512, 0, IFL_SCHED_GUARANTEED_NO_EVICT, err);
        CHECK(ex == NULL);
        ifl_executor_destroy(ex, 0);
        snprintf(want, sizeof want, "token id %lld ", (long long)at);
        CHECK_MSG(strstr(err, want) != NULL, "error \"%s\" does not name %s", err, want);
        printf("  %s\n", err);
    }
    char missing[700], err[512] = "";
    snprintf(missing, sizeof missing, "%s/no-such-draft.gguf", tmp_dir);
    struct spec sp = {missing, 8, 0.5f, 1};
    ifl_executor *ex = open_ex(&sp, 4, 512, 0, IFL_SCHED_GUARANTEED_NO_EVICT, err);
    CHECK(ex == NULL);
    CHECK_MSG(strstr(err, "no-such-draft.gguf") != NULL, "error \"%s\"", err);
}

int main(void)
{
    const char *shared = t_shared();
    snprintf(ref_dir, sizeof ref_dir, "%s/models/ref", shared);
    snprintf(target_path, sizeof target_path, "%s/llama-f32.gguf", ref_dir);
    snprintf(q4_path, sizeof q4_path, "%s/llama-q4_0.gguf", ref_dir);
    const char *build = getenv("BUILD");
    snprintf(mk, sizeof mk, "%s/tools/mkmodel", build && *build ? build : "build");
    snprintf(tmp_dir, sizeof tmp_dir, "/tmp/test_spec_draft.XXXXXX");
    if (!mkdtemp(tmp_dir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(small_path, sizeof small_path, "%s/small.gguf", tmp_dir);
    snprintf(swap_path, sizeof swap_path, "%s/swapped.gguf", tmp_dir);
    snprintf(spm_path, sizeof spm_path, "%s/spm.gguf", tmp_dir);
    char args[2048];
    snprintf(args, sizeof args,
             "-o %s --vocab %s --arch qwen2 --n-embd 64 --n-layer 1 --n-head 2 --n-head-kv 1 "
             "--n-ff 128 --type q8_0",
             small_path, target_path);
    int ok = mkmodel(args) == 0;
    snprintf(args, sizeof args,
             "-o %s --vocab %s --n-embd 64 --n-layer 1 --n-head 2 --n-head-kv 1 --n-ff 128 "
             "--swap-tokens 301,300",
             swap_path, target_path);
    ok = ok && mkmodel(args) == 0;
    snprintf(args, sizeof args,
             "-o %s --vocab %s/models/vocab/ggml-vocab-llama-spm.gguf --n-embd 64 --n-layer 1 "
             "--n-head 2 --n-head-kv 1 --n-ff 128",
             spm_path, shared);
    ok = ok && mkmodel(args) == 0;
    if (ok) {
        T_RUN(test_best_drafts);
        T_RUN(test_vocab_mismatch);
        T_RUN(test_alone);
        T_RUN(test_p_min);
        T_RUN(test_samples);
        T_RUN(test_adaptive);
        T_RUN(test_crowd_chunked);
        T_RUN(test_preempted);
        T_RUN(test_cancel_storm);
    }
    char cmd[1400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmp_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", tmp_dir);
    return t_done();
}
