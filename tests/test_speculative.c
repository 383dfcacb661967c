/*
 * Speculative decoding through the public API, with the proposers every
 * build has: n-gram lookup (speculative.type NGRAM) and client drafts
 * (ifl_request.speculative.draft_tokens). The proof is the issue's: with
 * speculation on, every output equals plain decoding's token for token and
 * log-prob for log-prob, greedy and seeded sampled, on stories260K and on
 * every reference model, alone and among 15 other requests, with chunked
 * prefill and after preemption; drafts were run and kept; rejected drafts
 * leave no KV block behind; the adaptive draft length stops wasting rows
 * on drafts that fail; bad settings are refused with the field named.
 */
#include <dirent.h>
#include <stdlib.h>
#include <string.h>

#include "inflight.h"
#include "t.h"

#define MAXN 256

static char stories[600], refdir[600];
static const int32_t ONCE[] = {1, 403, 407, 261, 378}; /* "Once upon a time" with BOS */

struct out {
    int32_t tok[MAXN], n;
    float lp[MAXN];
    int32_t drafted, accepted, preemptions;
    int32_t finish;
};

struct exopt {
    int32_t type, max_batch, max_num_tokens, policy, n_max, no_adapt, ngram, n_ctx, rejection;
    int64_t kv_tokens;
};

static ifl_executor *open_ex(const char *path, const struct exopt *o)
{
    struct ifl_executor_config c;
    ifl_executor_config_default(&c);
    c.n_threads = 2;
    c.n_ctx = o->n_ctx ? o->n_ctx : 512;
    c.kv_type = IFL_KV_F32;
    c.max_batch_size = o->max_batch ? o->max_batch : 16;
    if (o->max_num_tokens)
        c.max_num_tokens = o->max_num_tokens;
    if (o->kv_tokens)
        c.kv_cache_tokens = o->kv_tokens;
    c.sched_policy = o->policy;
    c.speculative.type = o->type;
    if (o->n_max)
        c.speculative.n_max = o->n_max;
    if (o->ngram)
        c.speculative.ngram_size = o->ngram;
    c.speculative.adaptive = !o->no_adapt;
    c.speculative.accept = o->rejection ? IFL_SPEC_ACCEPT_REJECTION : IFL_SPEC_ACCEPT_EXACT;
    ifl_executor *ex = NULL;
    char err[512] = "";
    int rc = ifl_executor_create(&ex, path, &c, err);
    CHECK_MSG(rc == 0, "create %s: %s", path, err);
    return ex;
}

static void mkreq(struct ifl_request *r, const int32_t *ids, int32_t n, int32_t max_tokens,
                  int sampled, uint64_t seed)
{
    ifl_request_init(r);
    r->input_ids = ids;
    r->n_input = n;
    r->max_tokens = max_tokens;
    r->sampling.ignore_eos = 1;
    r->sampling.temperature = sampled ? 0.8f : 0;
    r->sampling.top_p = sampled ? 0.9f : 1;
    r->sampling.seed = seed;
    r->output.return_log_probs = 1;
    r->output.return_perf_metrics = 1;
}

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
        CHECK_MSG(r->status == 0, "response: %s", r->error_msg ? r->error_msg : "?");
        if (r->n_results) {
            struct ifl_sequence_result *s = &r->results[0];
            if (o->n + s->n_tokens <= MAXN) {
                memcpy(o->tok + o->n, s->tokens, sizeof(int32_t) * (size_t)s->n_tokens);
                if (s->log_probs)
                    memcpy(o->lp + o->n, s->log_probs, sizeof(float) * (size_t)s->n_tokens);
                o->n += s->n_tokens;
            }
            o->finish = s->finish_reason;
        }
        if (r->is_final) {
            final = 1;
            o->drafted = r->perf.draft_tokens;
            o->accepted = r->perf.accepted_draft_tokens;
            o->preemptions = r->perf.preemptions;
        }
        ifl_response_free(r);
    }
}

static void run(ifl_executor *ex, const struct ifl_request *r, struct out *o)
{
    ifl_id id = 0;
    char err[512] = "";
    int rc = ifl_enqueue(ex, r, &id, err);
    CHECK_MSG(rc == 0, "enqueue: %s", err);
    if (rc) {
        memset(o, 0, sizeof(*o));
        return;
    }
    collect(ex, id, o);
}

static int same(const struct out *a, const struct out *b)
{
    return a->n == b->n && !memcmp(a->tok, b->tok, sizeof(int32_t) * (size_t)a->n) &&
           !memcmp(a->lp, b->lp, sizeof(float) * (size_t)a->n);
}

static void check_same(const struct out *a, const struct out *b, const char *what)
{
    CHECK_MSG(same(a, b), "%s: the output differs from plain decoding (%d and %d tokens)", what,
              a->n, b->n);
}

static int64_t used_blocks(ifl_executor *ex)
{
    struct ifl_iteration_stats st;
    CHECK_EQ(ifl_executor_wait_idle(ex, 30000), 0);
    CHECK_EQ(ifl_get_iteration_stats(ex, &st), 0);
    return st.kv_blocks_used;
}

/* ---- n-gram lookup ---- */

/* stories260K loops on its own phrases, which n-gram lookup drafts. */
static void test_ngram_alone(void)
{
    struct exopt po = {.type = IFL_SPEC_NONE}, so = {.type = IFL_SPEC_NGRAM};
    ifl_executor *plain = open_ex(stories, &po), *spec = open_ex(stories, &so);
    if (!plain || !spec)
        goto out;
    for (int sampled = 0; sampled <= 1; sampled++) {
        struct ifl_request r;
        struct out a, b;
        mkreq(&r, ONCE, 5, 200, sampled, 42);
        run(plain, &r, &a);
        run(spec, &r, &b);
        check_same(&a, &b, sampled ? "ngram, sampled" : "ngram, greedy");
        CHECK_EQ(a.n, 200);
        CHECK_EQ(a.drafted, 0);
        CHECK_MSG(b.drafted > 0 && b.accepted > 0 && b.accepted <= b.drafted, "drafted %d, kept %d",
                  b.drafted, b.accepted);
        fprintf(stderr, "  ngram %s: %d of %d drafts kept\n", sampled ? "sampled" : "greedy",
                b.accepted, b.drafted);
        /* the same request opting out runs no drafts */
        r.speculative.disable = 1;
        run(spec, &r, &b);
        check_same(&a, &b, "opted out");
        CHECK_EQ(b.drafted, 0);
    }
    struct ifl_iteration_stats st;
    CHECK_EQ(ifl_get_iteration_stats(spec, &st), 0);
    CHECK(st.draft_tokens > 0 && st.accepted_draft_tokens > 0 &&
          st.accepted_draft_tokens <= st.draft_tokens);
    CHECK_EQ(used_blocks(spec), 0);
out:
    ifl_executor_destroy(plain, 0);
    ifl_executor_destroy(spec, 0);
}

/* 16 requests at once (half greedy, half sampled, different prompts and
 * seeds, some opting out), with prefill chunks of 8 rows: each equals its
 * own plain run. */
static void test_ngram_batch_chunked(void)
{
    struct exopt po = {.type = IFL_SPEC_NONE, .max_num_tokens = 8},
                 so = {.type = IFL_SPEC_NGRAM, .max_num_tokens = 8};
    ifl_executor *plain = open_ex(stories, &po), *spec = open_ex(stories, &so);
    if (!plain || !spec)
        goto out;
    enum { N = 16 };
    static int32_t prompts[N][40];
    struct ifl_request r[N];
    static struct out ref[N], got[N];
    ifl_id ids[N];
    for (int i = 0; i < N; i++) {
        int32_t n = 5 + 3 * i; /* up to 50: several chunks of 8 */
        if (n > 40)
            n = 40;
        for (int32_t k = 0; k < n; k++)
            prompts[i][k] = k < 5 ? ONCE[k] : ONCE[1 + (k + i) % 4];
        mkreq(&r[i], prompts[i], n, 100 + i, i % 2, 1000 + (uint64_t)i);
        r[i].speculative.disable = i % 5 == 4;
        run(plain, &r[i], &ref[i]);
    }
    char err[512] = "";
    CHECK_EQ(ifl_enqueue_many(spec, r, N, ids, err), 0);
    int32_t drafted = 0;
    for (int i = 0; i < N; i++) {
        collect(spec, ids[i], &got[i]);
        char what[64];
        snprintf(what, sizeof what, "request %d of 16", i);
        check_same(&ref[i], &got[i], what);
        drafted += got[i].drafted;
        if (i % 5 == 4)
            CHECK_EQ(got[i].drafted, 0);
    }
    CHECK(drafted > 0);
    CHECK_EQ(used_blocks(spec), 0);
out:
    ifl_executor_destroy(plain, 0);
    ifl_executor_destroy(spec, 0);
}

/* max_utilization with a pool of 12 blocks of 16 for 4 requests of 150
 * tokens: sequences are preempted (their KV dropped, recomputed later)
 * while speculating, and still give plain decoding's outputs. */
static void test_ngram_preempted(void)
{
    struct exopt po = {.type = IFL_SPEC_NONE, .max_batch = 4, .n_ctx = 160},
                 so = {.type = IFL_SPEC_NGRAM,
                       .max_batch = 4,
                       .kv_tokens = 192,
                       .n_ctx = 160,
                       .policy = IFL_SCHED_MAX_UTILIZATION};
    ifl_executor *plain = open_ex(stories, &po), *spec = open_ex(stories, &so);
    if (!plain || !spec)
        goto out;
    enum { N = 4 };
    struct ifl_request r[N];
    struct out ref[N], got[N];
    ifl_id ids[N];
    for (int i = 0; i < N; i++) {
        mkreq(&r[i], ONCE, 5, 150, i % 2, 7 + (uint64_t)i);
        run(plain, &r[i], &ref[i]);
    }
    char err[512] = "";
    CHECK_EQ(ifl_enqueue_many(spec, r, N, ids, err), 0);
    int32_t pre = 0;
    for (int i = 0; i < N; i++) {
        collect(spec, ids[i], &got[i]);
        check_same(&ref[i], &got[i], "preempted");
        pre += got[i].preemptions;
    }
    CHECK_MSG(pre > 0, "no request was preempted (the test needs it)");
    CHECK_EQ(used_blocks(spec), 0);
out:
    ifl_executor_destroy(plain, 0);
    ifl_executor_destroy(spec, 0);
}

/* Every reference model (each architecture and weight type): its prompt,
 * greedy and sampled, with n-gram lookup and with its own plain output as
 * client drafts, against plain decoding. */
static void test_ref_models(void)
{
    DIR *d = opendir(refdir);
    CHECK(d != NULL);
    if (!d)
        return;
    int n_models = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        size_t L = strlen(de->d_name);
        if (L < 6 || strcmp(de->d_name + L - 5, ".gguf"))
            continue;
        char path[1200];
        snprintf(path, sizeof path, "%s/%s", refdir, de->d_name);
        struct exopt po = {.type = IFL_SPEC_NONE}, so = {.type = IFL_SPEC_NGRAM, .ngram = 2};
        ifl_executor *plain = open_ex(path, &po), *spec = open_ex(path, &so);
        if (plain && spec) {
            for (int sampled = 0; sampled <= 1; sampled++) {
                struct ifl_request r;
                struct out a, b, c;
                mkreq(&r, ONCE, 5, 64, sampled, 99);
                run(plain, &r, &a);
                run(spec, &r, &b);
                char what[300];
                snprintf(what, sizeof what, "%s %s ngram", de->d_name,
                         sampled ? "sampled" : "greedy");
                check_same(&a, &b, what);
                r.speculative.draft_tokens = a.tok;
                r.speculative.n_draft_tokens = a.n;
                run(spec, &r, &c);
                snprintf(what, sizeof what, "%s %s client drafts", de->d_name,
                         sampled ? "sampled" : "greedy");
                check_same(&a, &c, what);
                /* the first token comes from the prompt; every draft after it is right */
                CHECK_MSG(c.drafted > 0 && c.accepted == c.drafted, "%s: %d of %d kept", what,
                          c.accepted, c.drafted);
            }
            CHECK_EQ(used_blocks(spec), 0);
            n_models++;
        }
        ifl_executor_destroy(plain, 0);
        ifl_executor_destroy(spec, 0);
    }
    closedir(d);
    CHECK_MSG(n_models >= 10, "%d reference models", n_models);
}

/* ---- client drafts ---- */

/* A plain run's output as drafts: kept, whole; corrupted at every fourth
 * position: the output is unchanged and some are kept, some not; shifted
 * by an inserted token: the drafts realign and most are still kept. */
static void test_client_drafts(void)
{
    struct exopt po = {.type = IFL_SPEC_NONE}, so = {.type = IFL_SPEC_NONE, .n_max = 8};
    ifl_executor *plain = open_ex(stories, &po), *spec = open_ex(stories, &so);
    if (!plain || !spec)
        goto out;
    for (int sampled = 0; sampled <= 1; sampled++) {
        struct ifl_request r;
        struct out a, b;
        mkreq(&r, ONCE, 5, 160, sampled, 5);
        run(plain, &r, &a);
        static int32_t d[MAXN + 1];
        /* whole */
        r.speculative.draft_tokens = a.tok;
        r.speculative.n_draft_tokens = a.n;
        run(spec, &r, &b);
        check_same(&a, &b, "right drafts");
        /* after the first token, steps of 8 drafts and the bonus token */
        CHECK_MSG(b.accepted == b.drafted && b.drafted >= (a.n - 1) * 8 / 9 - 8,
                  "right drafts: %d of %d kept", b.accepted, b.drafted);
        /* a quarter corrupted */
        for (int32_t i = 0; i < a.n; i++)
            d[i] = i % 4 == 3 ? (a.tok[i] + 1) % 512 : a.tok[i];
        r.speculative.draft_tokens = d;
        run(spec, &r, &b);
        check_same(&a, &b, "corrupted drafts");
        CHECK_MSG(b.accepted > 0 && b.accepted < b.drafted, "corrupted: %d of %d kept", b.accepted,
                  b.drafted);
        /* one token inserted at 20 */
        for (int32_t i = 0, j = 0; i <= a.n; i++)
            d[i] = i == 20 ? 3 : a.tok[j++];
        r.speculative.n_draft_tokens = a.n + 1;
        run(spec, &r, &b);
        check_same(&a, &b, "shifted drafts");
        CHECK_MSG(b.accepted > a.n / 2, "shifted: %d of %d kept", b.accepted, b.drafted);
        /* none right: outputs unchanged, and the adaptive length gives up */
        for (int32_t i = 0; i < a.n; i++)
            d[i] = (a.tok[i] + 7) % 512;
        r.speculative.n_draft_tokens = a.n;
        run(spec, &r, &b);
        check_same(&a, &b, "wrong drafts");
        CHECK_MSG(b.drafted < a.n / 2, "wrong drafts: %d drafts run for %d tokens", b.drafted, a.n);
    }
    CHECK_EQ(used_blocks(spec), 0);
out:
    ifl_executor_destroy(plain, 0);
    ifl_executor_destroy(spec, 0);
}

/* Without the adaptive length, wrong drafts are run every step. */
static void test_not_adaptive(void)
{
    struct exopt so = {.type = IFL_SPEC_NONE, .n_max = 4, .no_adapt = 1};
    ifl_executor *spec = open_ex(stories, &so);
    if (!spec)
        return;
    struct ifl_request r;
    struct out a, b;
    mkreq(&r, ONCE, 5, 60, 0, 5);
    r.speculative.disable = 1;
    run(spec, &r, &a);
    static int32_t d[MAXN];
    for (int32_t i = 0; i < a.n; i++)
        d[i] = (a.tok[i] + 7) % 512;
    r.speculative.disable = 0;
    r.speculative.draft_tokens = d;
    r.speculative.n_draft_tokens = a.n;
    run(spec, &r, &b);
    check_same(&a, &b, "wrong drafts, not adaptive");
    /* each step after the first runs min(4, drafts left) */
    CHECK_MSG(b.drafted >= 4 * (a.n - 8) && b.accepted == 0, "%d drafts, %d kept", b.drafted,
              b.accepted);
    /* a request's n_max 0 is plain decoding */
    r.speculative.n_max = 0;
    run(spec, &r, &b);
    CHECK_EQ(b.drafted, 0);
    r.speculative.n_max = 2; /* and a smaller bound holds */
    run(spec, &r, &b);
    CHECK_MSG(b.drafted <= 2 * a.n && b.drafted > 0, "%d drafts", b.drafted);
    ifl_executor_destroy(spec, 0);
}

/* Cancels land mid-speculation (16 streams with right drafts of which
 * half are cancelled after some responses): nothing stays in use. */
static void test_cancel_storm(void)
{
    struct exopt po = {.type = IFL_SPEC_NONE}, so = {.type = IFL_SPEC_NGRAM, .n_max = 8};
    ifl_executor *plain = open_ex(stories, &po), *spec = open_ex(stories, &so);
    if (!plain || !spec)
        goto out;
    struct ifl_request r;
    struct out a;
    mkreq(&r, ONCE, 5, 200, 0, 1);
    run(plain, &r, &a);
    for (int round = 0; round < 4; round++) {
        enum { N = 16 };
        struct ifl_request rs[N];
        ifl_id ids[N];
        for (int i = 0; i < N; i++) {
            rs[i] = r;
            rs[i].streaming = 1;
            rs[i].speculative.draft_tokens = a.tok;
            rs[i].speculative.n_draft_tokens = a.n;
        }
        char err[512] = "";
        CHECK_EQ(ifl_enqueue_many(spec, rs, N, ids, err), 0);
        for (int i = 0; i < N; i += 2) {
            struct ifl_response *resp = NULL;
            int32_t got = 0;
            for (int k = 0; k < 1 + (i + round) % 5; k++)
                if (!ifl_await(spec, &ids[i], 1, 30000, &resp, 1, &got)) {
                    int fin = resp->is_final;
                    ifl_response_free(resp);
                    if (fin)
                        break;
                }
            ifl_cancel(spec, ids[i]);
        }
        for (int i = 0; i < N; i++) {
            struct out o;
            collect(spec, ids[i], &o);
        }
        CHECK_EQ(used_blocks(spec), 0);
    }
out:
    ifl_executor_destroy(plain, 0);
    ifl_executor_destroy(spec, 0);
}

/* speculative.accept = rejection: greedy requests stay exact; sampled
 * ones are reproducible from their seed, alone or in a batch of 8, and
 * still take drafts. */
static void test_rejection_mode(void)
{
    struct exopt po = {.type = IFL_SPEC_NONE}, so = {.type = IFL_SPEC_NGRAM, .rejection = 1};
    ifl_executor *plain = open_ex(stories, &po), *spec = open_ex(stories, &so);
    if (!plain || !spec)
        goto out;
    struct ifl_request r;
    struct out a, b, c;
    mkreq(&r, ONCE, 5, 150, 0, 3);
    run(plain, &r, &a);
    run(spec, &r, &b);
    check_same(&a, &b, "rejection mode, greedy");
    mkreq(&r, ONCE, 5, 150, 1, 3);
    run(spec, &r, &b);
    run(spec, &r, &c);
    check_same(&b, &c, "rejection mode, sampled, twice");
    CHECK_MSG(b.drafted > 0 && b.accepted > 0, "%d of %d kept", b.accepted, b.drafted);
    struct ifl_request rs[8];
    ifl_id ids[8];
    for (int i = 0; i < 8; i++)
        mkreq(&rs[i], ONCE, 5, 150, 1, i == 5 ? 3 : 100 + (uint64_t)i);
    char err[512] = "";
    CHECK_EQ(ifl_enqueue_many(spec, rs, 8, ids, err), 0);
    for (int i = 0; i < 8; i++) {
        collect(spec, ids[i], &c);
        if (i == 5)
            check_same(&b, &c, "rejection mode, sampled, in a batch");
    }
    CHECK_EQ(used_blocks(spec), 0);
out:
    ifl_executor_destroy(plain, 0);
    ifl_executor_destroy(spec, 0);
}

/* A request of 3 samples with n-gram lookup and with client drafts: the
 * first token forks the samples (as plain decoding does) and each sample
 * equals its plain run. */
static void test_samples(void)
{
    struct exopt po = {.type = IFL_SPEC_NONE}, so = {.type = IFL_SPEC_NGRAM};
    ifl_executor *plain = open_ex(stories, &po), *spec = open_ex(stories, &so);
    if (!plain || !spec)
        goto out;
    for (int client = 0; client <= 1; client++) {
        struct ifl_request r;
        mkreq(&r, ONCE, 5, 80, 1, 11);
        r.num_return_sequences = 3;
        int32_t seen[2][3] = {{0}};
        static struct out o[2][3];
        for (int which = 0; which < 2; which++) {
            ifl_executor *ex = which ? spec : plain;
            if (which && client) {
                r.speculative.draft_tokens = o[0][0].tok;
                r.speculative.n_draft_tokens = o[0][0].n;
            }
            ifl_id id = 0;
            char err[512] = "";
            CHECK_EQ(ifl_enqueue(ex, &r, &id, err), 0);
            memset(o[which], 0, sizeof(o[which]));
            for (int final = 0; !final;) {
                struct ifl_response *resp = NULL;
                int32_t got = 0;
                if (ifl_await(ex, &id, 1, 60000, &resp, 1, &got)) {
                    CHECK_MSG(0, "await timed out (samples never forked?)");
                    break;
                }
                int si = resp->sequence_index;
                if (resp->n_results && si >= 0 && si < 3) {
                    struct ifl_sequence_result *sr = &resp->results[0];
                    struct out *x = &o[which][si];
                    if (x->n + sr->n_tokens <= MAXN) {
                        memcpy(x->tok + x->n, sr->tokens, sizeof(int32_t) * (size_t)sr->n_tokens);
                        if (sr->log_probs)
                            memcpy(x->lp + x->n, sr->log_probs,
                                   sizeof(float) * (size_t)sr->n_tokens);
                        x->n += sr->n_tokens;
                    }
                    seen[which][si] = 1;
                }
                final = resp->is_final;
                ifl_response_free(resp);
            }
        }
        for (int i = 0; i < 3; i++) {
            CHECK(seen[0][i] && seen[1][i]);
            check_same(&o[0][i], &o[1][i], client ? "sample, client drafts" : "sample, ngram");
            CHECK_EQ(o[1][i].n, 80);
        }
    }
    CHECK_EQ(used_blocks(spec), 0);
out:
    ifl_executor_destroy(plain, 0);
    ifl_executor_destroy(spec, 0);
}

/* ---- validation ---- */

static void test_validation(void)
{
    struct ifl_executor_config c;
    char err[512] = "";
    ifl_executor *ex = NULL;
    ifl_executor_config_default(&c);
    c.speculative.type = 9;
    CHECK_EQ(ifl_executor_create(&ex, stories, &c, err), IFL_EINVAL);
    CHECK(strstr(err, "speculative.type") != NULL);
    ifl_executor_config_default(&c);
    c.speculative.type = IFL_SPEC_NGRAM;
    c.speculative.ngram_size = 0;
    CHECK_EQ(ifl_executor_create(&ex, stories, &c, err), IFL_EINVAL);
    CHECK(strstr(err, "ngram_size") != NULL);
    ifl_executor_config_default(&c);
    c.speculative.n_max = 33;
    CHECK_EQ(ifl_executor_create(&ex, stories, &c, err), IFL_EINVAL);
    CHECK(strstr(err, "n_max") != NULL);
    ifl_executor_config_default(&c);
    c.speculative.type = IFL_SPEC_NGRAM;
    c.speculative.draft_model = stories;
    CHECK_EQ(ifl_executor_create(&ex, stories, &c, err), IFL_EINVAL);
    CHECK(strstr(err, "draft_model") != NULL);
    CHECK(ex == NULL);

    struct exopt so = {.type = IFL_SPEC_NGRAM};
    ex = open_ex(stories, &so);
    if (!ex)
        return;
    struct ifl_request r;
    ifl_id id;
    mkreq(&r, ONCE, 5, 10, 0, 1);
    r.speculative.n_max = 40;
    CHECK_EQ(ifl_enqueue(ex, &r, &id, err), IFL_EINVAL);
    CHECK(strstr(err, "speculative.n_max") != NULL);
    mkreq(&r, ONCE, 5, 10, 0, 1);
    r.speculative.p_min = 2;
    CHECK_EQ(ifl_enqueue(ex, &r, &id, err), IFL_EINVAL);
    CHECK(strstr(err, "speculative.p_min") != NULL);
    int32_t bad[3] = {5, 600, 7};
    mkreq(&r, ONCE, 5, 10, 0, 1);
    r.speculative.draft_tokens = bad;
    r.speculative.n_draft_tokens = 3;
    CHECK_EQ(ifl_enqueue(ex, &r, &id, err), IFL_EINVAL);
    CHECK(strstr(err, "speculative.draft_tokens[1]") != NULL);
    r.speculative.draft_tokens = NULL;
    CHECK_EQ(ifl_enqueue(ex, &r, &id, err), IFL_EINVAL);
    /* nothing was queued by the refusals: a good request is served */
    mkreq(&r, ONCE, 5, 10, 0, 1);
    struct out o;
    run(ex, &r, &o);
    CHECK_EQ(o.n, 10);
    ifl_executor_destroy(ex, 0);
}

int main(void)
{
    snprintf(stories, sizeof stories, "%s/models/stories260K.gguf", t_shared());
    snprintf(refdir, sizeof refdir, "%s/models/ref", t_shared());
    T_RUN(test_validation);
    T_RUN(test_ngram_alone);
    T_RUN(test_ngram_batch_chunked);
    T_RUN(test_ngram_preempted);
    T_RUN(test_client_drafts);
    T_RUN(test_not_adaptive);
    T_RUN(test_cancel_storm);
    T_RUN(test_rejection_mode);
    T_RUN(test_samples);
    T_RUN(test_ref_models);
    return t_done();
}
