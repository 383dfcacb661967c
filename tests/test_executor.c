/*
 * The executor through its public API on the real stories260K model:
 * results equal the plain forward pass's greedy path, streaming concatenates
 * to the whole result, num_return_sequences, cancellation, timeouts, queue
 * limits, prefix caching, batch invariance under load and preemption, and a
 * multi-threaded stress run in which every request gets exactly one final
 * response.
 */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/rng.h"
#include "inflight.h"
#include "kernels/kernels.h"
#include "model/model.h"
#include "t.h"

static char model_path[600];
static const int32_t ONCE[] = {1, 403, 407, 261, 378}; /* "Once upon a time" with BOS */
/* llama.cpp's 64 greedy ids for ONCE (../shared/models/ref/stories260K.json) */
static const int32_t GREEDY[] = {432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401,
                                 396, 267, 337, 410, 408, 419, 292, 411, 322, 265, 282, 295, 433,
                                 426, 385, 328, 432, 358, 394, 261, 370, 432, 352, 266, 268, 388,
                                 426, 338, 391, 266, 267, 337, 335, 312, 432, 398, 312, 286, 267,
                                 414, 270, 333, 415, 426, 13,  438, 310, 439, 419, 357, 336};

static ifl_executor *open_ex(int32_t max_batch, int64_t kv_tokens, int policy, int32_t max_queue)
{
    struct ifl_executor_config c;
    ifl_executor_config_default(&c);
    c.max_batch_size = max_batch;
    c.kv_cache_tokens = kv_tokens;
    c.sched_policy = policy;
    c.max_queue_size = max_queue;
    c.n_threads = 2;
    c.kv_type = IFL_KV_F32;
    c.n_ctx = kv_tokens && kv_tokens < 512 ? (int32_t)kv_tokens : 512;
    ifl_executor *ex = NULL;
    char err[512] = "";
    int rc = ifl_executor_create(&ex, model_path, &c, err);
    CHECK_MSG(rc == 0, "create: %s", err);
    return ex;
}

static void greedy_req(struct ifl_request *r, const int32_t *ids, int32_t n, int32_t max_tokens)
{
    ifl_request_init(r);
    r->input_ids = ids;
    r->n_input = n;
    r->max_tokens = max_tokens;
    r->sampling.temperature = 0;
    r->sampling.ignore_eos = 1;
}

/* perf.preemptions of the last final response collect() saw */
static int32_t last_preemptions;
static int32_t last_end_token; /* collect: the final result's end_token */

/* Awaits every response of one request; concatenates tokens of sequence
 * `index` into out. Returns the finish reason of that sequence. */
static int collect(ifl_executor *ex, ifl_id id, int32_t index, int32_t *out, int32_t *n, float *lps,
                   char *text, size_t text_cap)
{
    int finish = -1, final = 0;
    *n = 0;
    size_t tl = 0;
    while (!final) {
        struct ifl_response *r[4];
        int32_t got = 0;
        int rc = ifl_await(ex, &id, 1, 20000, r, 4, &got);
        if (rc) {
            CHECK_MSG(0, "await %llu: %s", (unsigned long long)id, ifl_strerror(rc));
            return -1;
        }
        for (int32_t i = 0; i < got; i++) {
            CHECK_EQ(r[i]->status, 0);
            CHECK(r[i]->request_id == id);
            if (r[i]->sequence_index == index && r[i]->n_results == 1) {
                struct ifl_sequence_result *s = &r[i]->results[0];
                /* a final result may carry no tokens (and a NULL array):
                 * a request timed out before its first */
                if (s->n_tokens)
                    memcpy(out + *n, s->tokens, sizeof(int32_t) * (size_t)s->n_tokens);
                if (lps && s->log_probs && s->n_tokens)
                    memcpy(lps + *n, s->log_probs, sizeof(float) * (size_t)s->n_tokens);
                *n += s->n_tokens;
                if (text && s->n_text && tl + (size_t)s->n_text < text_cap) {
                    memcpy(text + tl, s->text, (size_t)s->n_text);
                    tl += (size_t)s->n_text;
                    text[tl] = 0;
                }
                if (r[i]->is_sequence_final) {
                    finish = s->finish_reason;
                    last_end_token = s->end_token;
                }
            }
            if (r[i]->is_final)
                last_preemptions = r[i]->perf.preemptions;
            final |= r[i]->is_final;
            ifl_response_free(r[i]);
        }
    }
    return finish;
}

static void test_greedy_matches_reference(void)
{
    ifl_executor *ex = open_ex(16, 0, IFL_SCHED_GUARANTEED_NO_EVICT, 0);
    if (!ex)
        return;
    struct ifl_request r;
    greedy_req(&r, ONCE, 5, 64);
    ifl_id id;
    char err[512];
    CHECK_EQ(ifl_enqueue(ex, &r, &id, err), 0);
    int32_t out[128], n;
    char text[4096];
    int fin = collect(ex, id, 0, out, &n, NULL, text, sizeof text);
    CHECK_EQ(fin, IFL_FINISH_LENGTH);
    CHECK_EQ(n, 64);
    CHECK(!memcmp(out, GREEDY, sizeof GREEDY));
    CHECK_MSG(strstr(text, "Lily") != NULL, "text: %s", text);
    CHECK_EQ(ifl_get_request_stats(ex, id, &(struct ifl_request_stats){0}), IFL_ENOTFOUND);
    ifl_executor_destroy(ex, 0);
}

static void test_streaming_equals_whole(void)
{
    ifl_executor *ex = open_ex(16, 0, IFL_SCHED_GUARANTEED_NO_EVICT, 0);
    if (!ex)
        return;
    struct ifl_request a, b;
    greedy_req(&a, ONCE, 5, 40);
    a.sampling.temperature = 0.9f;
    a.sampling.seed = 1234;
    a.output.return_log_probs = 1;
    b = a;
    b.streaming = 1;
    ifl_id ia, ib;
    CHECK_EQ(ifl_enqueue(ex, &a, &ia, NULL), 0);
    CHECK_EQ(ifl_enqueue(ex, &b, &ib, NULL), 0);
    int32_t ta[64], tb[64], na, nb;
    float la[64], lb[64];
    char xa[4096], xb[4096];
    collect(ex, ia, 0, ta, &na, la, xa, sizeof xa);
    collect(ex, ib, 0, tb, &nb, lb, xb, sizeof xb);
    CHECK_EQ(na, 40);
    CHECK_EQ(nb, 40);
    CHECK(!memcmp(ta, tb, sizeof(int32_t) * 40));
    CHECK(!memcmp(la, lb, sizeof(float) * 40));
    CHECK_STR(xa, xb);
    for (int i = 0; i < 40; i++)
        CHECK(la[i] <= 0 && la[i] > -30);
    ifl_executor_destroy(ex, 0);
}

static void test_return_sequences(void)
{
    ifl_executor *ex = open_ex(16, 0, IFL_SCHED_GUARANTEED_NO_EVICT, 0);
    if (!ex)
        return;
    struct ifl_request r;
    greedy_req(&r, ONCE, 5, 20);
    r.sampling.temperature = 1.0f;
    r.sampling.seed = 99;
    r.num_return_sequences = 3;
    ifl_id id;
    CHECK_EQ(ifl_enqueue(ex, &r, &id, NULL), 0);
    int seq_final[3] = {0}, finals = 0, n_tok[3] = {0};
    int32_t toks[3][64];
    while (!finals) {
        struct ifl_response *resp;
        int32_t got;
        CHECK_EQ(ifl_await(ex, &id, 1, 20000, &resp, 1, &got), 0);
        if (!got)
            break;
        int k = resp->sequence_index;
        CHECK(k >= 0 && k < 3);
        if (k >= 0 && k < 3) {
            CHECK(!seq_final[k]);
            seq_final[k] += resp->is_sequence_final;
            memcpy(toks[k], resp->results[0].tokens, sizeof(int32_t) * resp->results[0].n_tokens);
            n_tok[k] = resp->results[0].n_tokens;
        }
        finals += resp->is_final;
        ifl_response_free(resp);
    }
    CHECK(seq_final[0] && seq_final[1] && seq_final[2]);
    for (int k = 0; k < 3; k++)
        CHECK_EQ(n_tok[k], 20);
    CHECK(memcmp(toks[0], toks[1], sizeof(int32_t) * 20) ||
          memcmp(toks[1], toks[2], sizeof(int32_t) * 20));
    /* sample 0 equals the same request with one sequence */
    r.num_return_sequences = 1;
    CHECK_EQ(ifl_enqueue(ex, &r, &id, NULL), 0);
    int32_t one[64], n;
    collect(ex, id, 0, one, &n, NULL, NULL, 0);
    CHECK(n == 20 && !memcmp(one, toks[0], sizeof(int32_t) * 20));
    ifl_executor_destroy(ex, 0);
}

/* One request alone, then the same among 15 others of different shapes,
 * with a small row budget so prefill is chunked: identical tokens and
 * bitwise-identical log-probs. */
static void test_batch_invariance(void)
{
    int32_t alone[64], alone_n = 0;
    float alone_lp[64];
    for (int round = 0; round < 2; round++) {
        ifl_executor *ex;
        struct ifl_executor_config c;
        ifl_executor_config_default(&c);
        c.max_num_tokens = round ? 7 : 512;
        c.n_threads = round ? 2 : 1;
        c.kv_type = IFL_KV_F16;
        char err[512];
        CHECK_EQ(ifl_executor_create(&ex, model_path, &c, err), 0);
        int32_t prompts[16][40];
        ifl_id ids[16];
        struct ifl_rng g;
        ifl_rng_seed(&g, 5);
        int n_req = round ? 16 : 1;
        struct ifl_request reqs[16];
        for (int k = 0; k < n_req; k++) {
            int len = k == 0 ? 5 : 3 + (int)(ifl_rng_next(&g) % 30);
            for (int i = 0; i < len; i++)
                prompts[k][i] = k == 0 ? ONCE[i] : (i == 0 ? 1 : 3 + (int)(ifl_rng_next(&g) % 500));
            greedy_req(&reqs[k], prompts[k], len, k == 0 ? 48 : 10 + k);
            reqs[k].sampling.temperature = 0.8f;
            reqs[k].sampling.seed = 77 + k;
            reqs[k].output.return_log_probs = 1;
        }
        /* the request under test goes in the middle of the pack */
        if (round) {
            struct ifl_request t = reqs[0];
            reqs[0] = reqs[7];
            reqs[7] = t;
        }
        CHECK_EQ(ifl_enqueue_many(ex, reqs, n_req, ids, err), 0);
        int32_t out[64], n;
        float lp[64];
        collect(ex, ids[round ? 7 : 0], 0, out, &n, lp, NULL, 0);
        if (!round) {
            memcpy(alone, out, sizeof out);
            memcpy(alone_lp, lp, sizeof lp);
            alone_n = n;
        } else {
            CHECK_EQ(n, alone_n);
            CHECK(!memcmp(out, alone, sizeof(int32_t) * (size_t)n));
            CHECK(!memcmp(lp, alone_lp, sizeof(float) * (size_t)n));
        }
        ifl_executor_destroy(ex, 0);
    }
}

/* Steps small enough run on the engine thread alone (forward.c SOLO_BYTES,
 * IFL_SOLO_BYTES): 16 sampled requests on two threads, every step shared
 * (0) and every step alone (1e15), give the same tokens and log-probs bit
 * for bit; so does the default, where the prefill's wide steps are shared
 * and the decode's narrow ones are not. */
static void test_solo_steps(void)
{
    static const char *const modes[] = {"0", "1e15", NULL};
    int32_t first[16][40], first_n[16];
    float first_lp[16][40];
    for (int round = 0; round < 3; round++) {
        if (modes[round])
            setenv("IFL_SOLO_BYTES", modes[round], 1);
        else
            unsetenv("IFL_SOLO_BYTES");
        ifl_executor *ex;
        struct ifl_executor_config c;
        ifl_executor_config_default(&c);
        c.n_threads = 2;
        char err[512];
        CHECK_EQ(ifl_executor_create(&ex, model_path, &c, err), 0);
        struct ifl_rng g;
        ifl_rng_seed(&g, 9);
        int32_t prompts[16][40];
        struct ifl_request reqs[16];
        ifl_id ids[16];
        for (int k = 0; k < 16; k++) {
            int len = 3 + (int)(ifl_rng_next(&g) % 30);
            for (int i = 0; i < len; i++)
                prompts[k][i] = i == 0 ? 1 : 3 + (int)(ifl_rng_next(&g) % 500);
            greedy_req(&reqs[k], prompts[k], len, 12 + k);
            reqs[k].sampling.temperature = 0.8f;
            reqs[k].sampling.seed = 31 + k;
            reqs[k].output.return_log_probs = 1;
        }
        CHECK_EQ(ifl_enqueue_many(ex, reqs, 16, ids, err), 0);
        for (int k = 0; k < 16; k++) {
            int32_t out[40], n;
            float lp[40];
            collect(ex, ids[k], 0, out, &n, lp, NULL, 0);
            if (!round) {
                memcpy(first[k], out, sizeof out);
                memcpy(first_lp[k], lp, sizeof lp);
                first_n[k] = n;
            } else {
                CHECK_EQ(n, first_n[k]);
                CHECK_MSG(!memcmp(out, first[k], sizeof(int32_t) * (size_t)n) &&
                              !memcmp(lp, first_lp[k], sizeof(float) * (size_t)n),
                          "request %d differs with IFL_SOLO_BYTES=%s", k,
                          modes[round] ? modes[round] : "(default)");
            }
        }
        ifl_executor_destroy(ex, 0);
    }
    unsetenv("IFL_SOLO_BYTES");
}

/* The forward pass's threads may wait by spinning, by blocking (a futex),
 * or switch between the two when the cores are oversubscribed: none of it
 * may change a token or a log-prob. 16 sampled requests are run with the
 * pool fixed to spinning (IFL_POOL_WAIT=spin), fixed to blocking, and
 * adaptive with 4 threads pinned to one CPU (which makes it block). */
static void test_pool_wait_modes(void)
{
    enum { NREQ = 16, MAXT = 40 };
    static int32_t toks[3][NREQ][MAXT];
    static float lps[3][NREQ][MAXT];
    int32_t ns[3][NREQ];
    cpu_set_t old, one;
    CHECK_EQ(sched_getaffinity(0, sizeof old, &old), 0);
    CPU_ZERO(&one);
    for (int i = 0; i < CPU_SETSIZE; i++)
        if (CPU_ISSET(i, &old)) {
            CPU_SET(i, &one);
            break;
        }
    for (int round = 0; round < 3; round++) {
        struct ifl_executor_config c;
        ifl_executor_config_default(&c);
        c.n_threads = round == 2 ? 4 : 2;
        c.kv_type = IFL_KV_F32;
        if (round < 2)
            setenv("IFL_POOL_WAIT", round ? "block" : "spin", 1);
        else /* the engine and the pool's threads inherit the mask */
            CHECK_EQ(sched_setaffinity(0, sizeof one, &one), 0);
        ifl_executor *ex = NULL;
        char err[512] = "";
        int rc = ifl_executor_create(&ex, model_path, &c, err);
        unsetenv("IFL_POOL_WAIT");
        CHECK_EQ(sched_setaffinity(0, sizeof old, &old), 0);
        CHECK_MSG(rc == 0, "create: %s", err);
        if (rc)
            return;
        int32_t prompts[NREQ][40];
        struct ifl_request reqs[NREQ];
        ifl_id ids[NREQ];
        struct ifl_rng g;
        ifl_rng_seed(&g, 9);
        for (int k = 0; k < NREQ; k++) {
            int len = 3 + (int)(ifl_rng_next(&g) % 30);
            for (int i = 0; i < len; i++)
                prompts[k][i] = i == 0 ? 1 : 3 + (int)(ifl_rng_next(&g) % 500);
            greedy_req(&reqs[k], prompts[k], len, MAXT - 8 + k % 8);
            reqs[k].sampling.temperature = 0.8f;
            reqs[k].sampling.seed = 300 + k;
            reqs[k].output.return_log_probs = 1;
        }
        CHECK_EQ(ifl_enqueue_many(ex, reqs, NREQ, ids, err), 0);
        for (int k = 0; k < NREQ; k++)
            collect(ex, ids[k], 0, toks[round][k], &ns[round][k], lps[round][k], NULL, 0);
        ifl_executor_destroy(ex, 0);
        for (int k = 0; round && k < NREQ; k++) {
            CHECK_EQ(ns[round][k], ns[0][k]);
            CHECK_MSG(!memcmp(toks[round][k], toks[0][k], sizeof(int32_t) * (size_t)ns[0][k]),
                      "round %d request %d: other tokens", round, k);
            CHECK_MSG(!memcmp(lps[round][k], lps[0][k], sizeof(float) * (size_t)ns[0][k]),
                      "round %d request %d: other log-probs", round, k);
        }
    }
}

static void test_prefix_caching(void)
{
    ifl_executor *ex = open_ex(4, 0, IFL_SCHED_GUARANTEED_NO_EVICT, 0);
    if (!ex)
        return;
    int32_t p1[230], p2[230];
    struct ifl_rng g;
    ifl_rng_seed(&g, 11);
    p1[0] = p2[0] = 1;
    for (int i = 1; i < 200; i++)
        p1[i] = p2[i] = 3 + (int)(ifl_rng_next(&g) % 500);
    for (int i = 200; i < 230; i++) {
        p1[i] = 3 + (int)(ifl_rng_next(&g) % 500);
        p2[i] = 3 + (int)(ifl_rng_next(&g) % 500);
    }
    struct ifl_request r;
    greedy_req(&r, p1, 230, 8);
    r.output.return_perf_metrics = 1;
    ifl_id id;
    struct ifl_response *resp;
    int32_t got;
    if (ifl_enqueue(ex, &r, &id, NULL) || ifl_await(ex, &id, 1, 20000, &resp, 1, &got)) {
        CHECK(0);
        ifl_executor_destroy(ex, 1);
        return;
    }
    CHECK_EQ(resp->perf.kv_blocks_reused, 0);
    ifl_response_free(resp);
    r.input_ids = p2;
    CHECK_EQ(ifl_enqueue(ex, &r, &id, NULL), 0);
    CHECK_EQ(ifl_await(ex, &id, 1, 20000, &resp, 1, &got), 0);
    CHECK_EQ(resp->perf.kv_blocks_reused, 200 / 16);
    int32_t cached[8];
    memcpy(cached, resp->results[0].tokens, sizeof cached);
    ifl_response_free(resp);
    struct ifl_iteration_stats st;
    ifl_get_iteration_stats(ex, &st);
    CHECK(st.kv_blocks_reused >= 12 && st.kv_cache_hit_rate > 0);
    ifl_executor_destroy(ex, 0);
    /* the same request on a fresh executor (nothing cached) gives the same tokens */
    ex = open_ex(4, 0, IFL_SCHED_GUARANTEED_NO_EVICT, 0);
    CHECK_EQ(ifl_enqueue(ex, &r, &id, NULL), 0);
    CHECK_EQ(ifl_await(ex, &id, 1, 20000, &resp, 1, &got), 0);
    CHECK_EQ(resp->perf.kv_blocks_reused, 0);
    CHECK(!memcmp(cached, resp->results[0].tokens, sizeof cached));
    ifl_response_free(resp);
    ifl_executor_destroy(ex, 0);
}

static void test_preemption_is_invisible(void)
{
    /* reference: alone, plenty of KV */
    ifl_executor *ex = open_ex(8, 0, IFL_SCHED_MAX_UTILIZATION, 0);
    struct ifl_request r;
    greedy_req(&r, ONCE, 5, 100);
    r.sampling.temperature = 0.7f;
    r.sampling.seed = 3;
    r.priority = 0.1f;
    r.output.return_log_probs = 1;
    r.output.return_perf_metrics = 1;
    ifl_id id;
    int32_t ref[128], nref;
    float ref_lp[128];
    CHECK_EQ(ifl_enqueue(ex, &r, &id, NULL), 0);
    collect(ex, id, 0, ref, &nref, ref_lp, NULL, 0);
    ifl_executor_destroy(ex, 0);
    /* 8 requests in a KV pool that holds 2.5 of them: the low-priority one
     * is preempted and recomputed */
    ex = open_ex(8, 256, IFL_SCHED_MAX_UTILIZATION, 0);
    if (!ex)
        return;
    struct ifl_request others[7];
    ifl_id oid[7];
    int32_t op[7][4];
    for (int k = 0; k < 7; k++) {
        op[k][0] = 1, op[k][1] = 403 + k, op[k][2] = 261, op[k][3] = 300 + k;
        greedy_req(&others[k], op[k], 4, 90);
        others[k].priority = 0.9f;
    }
    CHECK_EQ(ifl_enqueue(ex, &r, &id, NULL), 0);
    CHECK_EQ(ifl_enqueue_many(ex, others, 7, oid, NULL), 0);
    int32_t out[128], n;
    float lp[128];
    collect(ex, id, 0, out, &n, lp, NULL, 0);
    CHECK_EQ(n, nref);
    CHECK(!memcmp(out, ref, sizeof(int32_t) * (size_t)n));
    CHECK(!memcmp(lp, ref_lp, sizeof(float) * (size_t)n));
    CHECK_MSG(last_preemptions >= 1, "the request was never preempted (%d)", last_preemptions);
    for (int k = 0; k < 7; k++) {
        int32_t o[128], no;
        collect(ex, oid[k], 0, o, &no, NULL, NULL, 0);
        CHECK_EQ(no, 90);
    }
    ifl_executor_destroy(ex, 0);
}

static void test_cancel_and_timeout(void)
{
    ifl_executor *ex = open_ex(2, 0, IFL_SCHED_GUARANTEED_NO_EVICT, 0);
    struct ifl_request r;
    greedy_req(&r, ONCE, 5, 400);
    r.streaming = 1;
    ifl_id id;
    CHECK_EQ(ifl_enqueue(ex, &r, &id, NULL), 0);
    /* halfway: cancel after the 10th token */
    int32_t n = 0;
    int fin = -1, final = 0;
    while (!final) {
        struct ifl_response *resp;
        int32_t got;
        if (ifl_await(ex, &id, 1, 20000, &resp, 1, &got))
            break;
        n += resp->results[0].n_tokens;
        if (n >= 10 && n < 1000) {
            CHECK_EQ(ifl_cancel(ex, id), 0);
            CHECK_EQ(ifl_cancel(ex, id), 0); /* again, while on its way: still 0 */
            n += 1000;
        }
        final = resp->is_final;
        if (final)
            fin = resp->results[0].finish_reason;
        ifl_response_free(resp);
    }
    CHECK_EQ(fin, IFL_FINISH_CANCELLED);
    CHECK(n - 1000 < 400);
    CHECK_EQ(ifl_cancel(ex, id), IFL_ENOTFOUND);
    /* awaiting an id that is final or unknown returns at once */
    struct ifl_response *none[1];
    int32_t n_none = -1;
    const ifl_id unknown = id + 1000;
    CHECK_EQ(ifl_await(ex, &id, 1, -1, none, 1, &n_none), IFL_ESTATE);
    CHECK_EQ(ifl_await(ex, &unknown, 1, -1, none, 1, &n_none), IFL_ESTATE);
    CHECK_EQ(n_none, 0);
    /* allotted time */
    greedy_req(&r, ONCE, 5, 400);
    r.allotted_time_ms = 1;
    r.max_tokens = 450;
    CHECK_EQ(ifl_enqueue(ex, &r, &id, NULL), 0);
    int32_t out[512];
    fin = collect(ex, id, 0, out, &n, NULL, NULL, 0);
    CHECK_EQ(fin, IFL_FINISH_TIMED_OUT);
    ifl_executor_destroy(ex, 0);
}

static void test_bad_requests(void)
{
    /* a cache of exactly 4 contexts (the default has copy-on-write room) */
    ifl_executor *ex = open_ex(4, 2048, IFL_SCHED_GUARANTEED_NO_EVICT, 2);
    struct ifl_request r;
    ifl_id id = 0;
    char err[512];
    greedy_req(&r, ONCE, 5, 8);
    int32_t bad[2] = {1, 512};
    r.input_ids = bad;
    r.n_input = 2;
    CHECK_EQ(ifl_enqueue(ex, &r, &id, err), IFL_EINVAL);
    CHECK(strstr(err, "input_ids[1]") != NULL);
    greedy_req(&r, ONCE, 5, 600);
    CHECK_EQ(ifl_enqueue(ex, &r, &id, err), IFL_EINVAL);
    CHECK(strstr(err, "max_tokens") != NULL);
    /* max_tokens 0 is 1 everywhere: one token, and a prompt that fills
     * the context leaves no room for it */
    static int32_t full[512];
    for (int i = 0; i < 512; i++)
        full[i] = 3 + i % 400;
    greedy_req(&r, full, 512, 0);
    CHECK_EQ(ifl_enqueue(ex, &r, &id, err), IFL_EINVAL);
    CHECK(strstr(err, "plus max_tokens (1)") != NULL);
    greedy_req(&r, ONCE, 5, 0);
    CHECK_EQ(ifl_enqueue(ex, &r, &id, err), 0);
    int32_t one[4], n_one = 0;
    CHECK_EQ(collect(ex, id, 0, one, &n_one, NULL, NULL, 0), IFL_FINISH_LENGTH);
    CHECK_EQ(n_one, 1);
    greedy_req(&r, ONCE, 5, 8);
    r.sampling.top_p = 0;
    CHECK_EQ(ifl_enqueue(ex, &r, &id, err), IFL_EINVAL);
    CHECK(strstr(err, "top_p") != NULL);
    greedy_req(&r, ONCE, 0, 8);
    CHECK_EQ(ifl_enqueue(ex, &r, &id, err), IFL_EINVAL);
    greedy_req(&r, ONCE, 5, 8);
    r.logits_post_processor = "nope";
    CHECK_EQ(ifl_enqueue(ex, &r, &id, err), IFL_EINVAL);
    CHECK(strstr(err, "nope") != NULL);
    /* beams: more than max_batch_size slots; more KV than the cache could
     * ever reserve (4 beams of 512 positions in 2048) */
    greedy_req(&r, ONCE, 5, 8);
    r.sampling.beam_width = 8;
    CHECK_EQ(ifl_enqueue(ex, &r, &id, err), IFL_EINVAL);
    CHECK(strstr(err, "max_batch_size") != NULL);
    greedy_req(&r, ONCE, 5, 507);
    r.sampling.beam_width = 4;
    CHECK_EQ(ifl_enqueue(ex, &r, &id, err), IFL_EINVAL);
    CHECK(strstr(err, "KV blocks") != NULL);
    /* queue limit: 2 waiting at most, and all-or-nothing */
    greedy_req(&r, ONCE, 5, 8);
    struct ifl_request many[3] = {r, r, r};
    ifl_id ids[3];
    CHECK_EQ(ifl_enqueue_many(ex, many, 3, ids, err), IFL_EFULL);
    CHECK_EQ(ifl_num_responses_ready(ex, 0), 0);
    ifl_executor_destroy(ex, 0);
    char e2[512];
    struct ifl_executor_config c;
    ifl_executor_config_default(&c);
    ifl_executor *x2;
    CHECK(ifl_executor_create(&x2, "/nonexistent.gguf", &c, e2) != 0);
    c.max_batch_size = 0;
    CHECK_EQ(ifl_executor_create(&x2, model_path, &c, e2), IFL_EINVAL);
    ifl_executor_config_default(&c);
    CHECK_EQ(ifl_executor_create(NULL, model_path, &c, e2), IFL_EINVAL);
    CHECK_EQ(ifl_executor_create(&x2, NULL, &c, e2), IFL_EINVAL);
    /* a byte budget too small for one context is an error, not the default */
    c.kv_cache_bytes = 1;
    CHECK_EQ(ifl_executor_create(&x2, model_path, &c, e2), IFL_EINVAL);
    CHECK(strstr(e2, "cannot hold one full context") != NULL);
}

/* 8 client threads enqueue, await and cancel requests of random shapes
 * (samples, beams, logits and hidden-state outputs): every request gets
 * exactly one final response. */
struct stress {
    ifl_executor *ex;
    int thread;
    int n;
    atomic_int finals;
    atomic_int errors;
};

static void *stress_client(void *arg)
{
    struct stress *st = arg;
    struct ifl_rng g;
    ifl_rng_seed(&g, (uint64_t)st->thread * 1000 + 1);
    int32_t prompt[64];
    for (int k = 0; k < st->n; k++) {
        struct ifl_request r;
        int len = 1 + (int)(ifl_rng_next(&g) % 40);
        prompt[0] = 1;
        for (int i = 1; i < len; i++)
            prompt[i] = 3 + (int)(ifl_rng_next(&g) % 500);
        ifl_request_init(&r);
        r.input_ids = prompt;
        r.n_input = len;
        r.max_tokens = 1 + (int)(ifl_rng_next(&g) % 24);
        r.streaming = (int)(ifl_rng_next(&g) % 2);
        r.sampling.temperature = (float)(ifl_rng_next(&g) % 3) * 0.5f;
        r.sampling.seed = ifl_rng_next(&g);
        r.num_return_sequences = 1 + (int)(ifl_rng_next(&g) % 2);
        r.priority = (float)(ifl_rng_next(&g) % 3) * 0.5f;
        if (ifl_rng_next(&g) % 5 == 0)
            r.sampling.beam_width = 2 + (int)(ifl_rng_next(&g) % 3);
        r.output.return_generation_logits = ifl_rng_next(&g) % 4 == 0;
        r.output.return_context_logits = ifl_rng_next(&g) % 4 == 0;
        r.output.return_hidden_states = ifl_rng_next(&g) % 4 == 0;
        ifl_id id;
        if (ifl_enqueue(st->ex, &r, &id, NULL)) {
            atomic_fetch_add(&st->errors, 1);
            continue;
        }
        int cancel_at = ifl_rng_next(&g) % 4 == 0 ? (int)(ifl_rng_next(&g) % 3) : -1;
        int seen = 0, finals = 0;
        while (!finals) {
            struct ifl_response *resp[8];
            int32_t got = 0;
            if (ifl_await(st->ex, &id, 1, 60000, resp, 8, &got)) {
                atomic_fetch_add(&st->errors, 1);
                break;
            }
            for (int32_t i = 0; i < got; i++) {
                finals += resp[i]->is_final;
                ifl_response_free(resp[i]);
            }
            if (seen++ == cancel_at)
                ifl_cancel(st->ex, id);
        }
        atomic_fetch_add(&st->finals, finals);
        /* no response may follow the final one */
        if (ifl_num_responses_ready(st->ex, id) != 0)
            atomic_fetch_add(&st->errors, 1);
    }
    return NULL;
}

static void test_stress(void)
{
    ifl_executor *ex = open_ex(16, 2048, IFL_SCHED_MAX_UTILIZATION, 0);
    if (!ex)
        return;
    enum { THREADS = 8, PER = 250 };
    static struct stress st[THREADS];
    pthread_t th[THREADS];
    for (int t = 0; t < THREADS; t++) {
        st[t].ex = ex;
        st[t].thread = t;
        st[t].n = PER;
        atomic_init(&st[t].finals, 0);
        atomic_init(&st[t].errors, 0);
        pthread_create(&th[t], NULL, stress_client, &st[t]);
    }
    int finals = 0, errors = 0;
    for (int t = 0; t < THREADS; t++) {
        pthread_join(th[t], NULL);
        finals += atomic_load(&st[t].finals);
        errors += atomic_load(&st[t].errors);
    }
    CHECK_EQ(errors, 0);
    CHECK_EQ(finals, THREADS * PER);
    /* statistics are published after each engine iteration: give the last one a moment */
    struct ifl_iteration_stats s;
    for (int i = 0; i < 500; i++) {
        ifl_get_iteration_stats(ex, &s);
        if (s.completed_requests == THREADS * PER && s.active_requests == 0)
            break;
        struct timespec ts = {0, 10 * 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    CHECK_EQ(s.completed_requests, THREADS * PER);
    CHECK_EQ(s.active_requests, 0);
    ifl_executor_destroy(ex, 0);
}

/* The KV pool's size is in the stats from creation on (it was all zeros
 * until a step had run), and wait_idle returns once every request is done
 * and the stats show their blocks released. */
static void test_baseline_and_wait_idle(void)
{
    ifl_executor *ex = open_ex(4, 0, IFL_SCHED_GUARANTEED_NO_EVICT, 0);
    if (!ex)
        return;
    struct ifl_iteration_stats s;
    CHECK_EQ(ifl_get_iteration_stats(ex, &s), 0);
    /* 4 contexts of 512 and 3 copy-on-write blocks, 16 positions a block */
    CHECK_EQ(s.kv_blocks_max, 4 * 32 + 3);
    CHECK_EQ(s.kv_blocks_free, s.kv_blocks_max);
    CHECK_EQ(s.kv_blocks_used, 0);
    CHECK_EQ(s.kv_pool_bound, IFL_KV_BOUND_CONTEXTS);
    CHECK(s.kv_block_bytes > 0);
    CHECK(s.kv_bytes_reserved >= (int64_t)s.kv_blocks_max * s.kv_block_bytes);
    CHECK(s.kv_bytes_resident >= 0 && s.kv_bytes_resident <= s.kv_bytes_reserved);
    CHECK(s.process_rss_bytes > 0);
    CHECK_EQ(ifl_executor_wait_idle(ex, 0), 0);
    CHECK_EQ(ifl_executor_wait_idle(ex, -1), 0);
    CHECK_EQ(ifl_executor_wait_idle(NULL, 0), IFL_EINVAL);

    struct ifl_request r;
    greedy_req(&r, ONCE, 5, 100);
    struct ifl_request rs[6] = {r, r, r, r, r, r};
    ifl_id ids[6];
    CHECK_EQ(ifl_enqueue_many(ex, rs, 6, ids, NULL), 0);
    /* six requests of 100 tokens on 4 slots are not done at once */
    CHECK_EQ(ifl_executor_wait_idle(ex, 0), IFL_ETIMEDOUT);
    CHECK_EQ(ifl_executor_wait_idle(ex, 1), IFL_ETIMEDOUT);
    CHECK_EQ(ifl_executor_wait_idle(ex, 300000), 0);
    CHECK_EQ(ifl_get_iteration_stats(ex, &s), 0);
    CHECK_EQ(s.active_requests, 0);
    CHECK_EQ(s.queued_requests, 0);
    CHECK_EQ(s.paused_requests, 0);
    CHECK_EQ(s.completed_requests, 6);
    CHECK_EQ(s.kv_blocks_used, 0);
    CHECK_EQ(s.kv_bytes_used, 0);
    CHECK(s.kv_blocks_peak >= 4 * 7); /* 4 at a time, 104 written positions each */
    CHECK(s.kv_blocks_peak <= s.kv_blocks_max);
    /* the responses are still there to await */
    for (int i = 0; i < 6; i++) {
        int32_t out[200], n;
        CHECK_EQ(collect(ex, ids[i], 0, out, &n, NULL, NULL, 0), IFL_FINISH_LENGTH);
        CHECK_EQ(n, 100);
    }
    /* a cancelled request counts as done too */
    CHECK_EQ(ifl_enqueue(ex, &r, &ids[0], NULL), 0);
    /* (on a loaded machine the request may be over before the cancel) */
    int crc = ifl_cancel(ex, ids[0]);
    CHECK(crc == 0 || crc == IFL_ENOTFOUND);
    CHECK_EQ(ifl_executor_wait_idle(ex, 300000), 0);
    ifl_executor_destroy(ex, 0);
}

static void test_destroy_wakes_waiters(void)
{
    ifl_executor *ex = open_ex(2, 0, IFL_SCHED_GUARANTEED_NO_EVICT, 0);
    struct ifl_request r;
    greedy_req(&r, ONCE, 5, 300);
    ifl_id ids[6];
    struct ifl_request rs[6] = {r, r, r, r, r, r};
    CHECK_EQ(ifl_enqueue_many(ex, rs, 6, ids, NULL), 0);
    ifl_executor_destroy(ex, 1); /* cancels all: nothing leaks, no hang */
}

/* A thread waiting in ifl_await for any request, as a binding's response
 * thread does: ifl_executor_shutdown cancels what runs, the thread takes
 * every final response and then gets IFL_ESTATE at once; enqueue is
 * refused, tokenize still works, a second shutdown returns, then destroy
 * frees with no caller left inside. */
struct shut_waiter {
    ifl_executor *ex;
    int finals;
    int rc;
};

static void *shut_wait_main(void *arg)
{
    struct shut_waiter *w = arg;
    for (;;) {
        struct ifl_response *r[8];
        int32_t got = 0;
        int rc = ifl_await(w->ex, NULL, 0, -1, r, 8, &got);
        for (int32_t i = 0; i < got; i++) {
            w->finals += r[i]->is_final && r[i]->results[0].finish_reason == IFL_FINISH_CANCELLED;
            ifl_response_free(r[i]);
        }
        if (rc) {
            w->rc = rc;
            return NULL;
        }
    }
}

static void test_shutdown_then_destroy(void)
{
    ifl_executor *ex = open_ex(2, 0, IFL_SCHED_GUARANTEED_NO_EVICT, 0);
    struct ifl_request r;
    greedy_req(&r, ONCE, 5, 400);
    ifl_id ids[4];
    struct ifl_request rs[4] = {r, r, r, r};
    CHECK_EQ(ifl_enqueue_many(ex, rs, 4, ids, NULL), 0);
    struct shut_waiter w = {.ex = ex};
    pthread_t th;
    CHECK_EQ(pthread_create(&th, NULL, shut_wait_main, &w), 0);
    CHECK_EQ(ifl_executor_shutdown(ex, 1), 0);
    pthread_join(th, NULL);
    CHECK_EQ(w.rc, IFL_ESTATE);
    CHECK_EQ(w.finals, 4);
    ifl_id id;
    char err[512] = "";
    CHECK_EQ(ifl_enqueue(ex, &r, &id, err), IFL_ESTATE);
    int32_t toks[16];
    int64_t n = 0;
    CHECK_EQ(ifl_executor_tokenize(ex, "Once upon", 9, 1, 0, toks, 16, &n), 0);
    CHECK(n >= 2);
    CHECK_EQ(ifl_executor_shutdown(ex, 0), 0);
    struct ifl_response *out;
    int32_t got = 1;
    CHECK_EQ(ifl_await(ex, NULL, 0, -1, &out, 1, &got), IFL_ESTATE);
    CHECK_EQ(got, 0);
    CHECK_EQ(ifl_executor_shutdown(NULL, 0), IFL_EINVAL);
    ifl_executor_destroy(ex, 0);
}

/* Stop strings never leak into the text, even across tokens; the finish
 * reason says stop; stop words (token sequences) end generation too. */
static void test_stops(void)
{
    ifl_executor *ex = open_ex(4, 0, IFL_SCHED_GUARANTEED_NO_EVICT, 0);
    if (!ex)
        return;
    struct ifl_request r;
    greedy_req(&r, ONCE, 5, 64);
    ifl_id id;
    int32_t out[128], n;
    char full[4096], text[4096];
    CHECK_EQ(ifl_enqueue(ex, &r, &id, NULL), 0);
    collect(ex, id, 0, out, &n, NULL, full, sizeof full);
    /* "..., there was a little girl named Lily. She loved to play..." */
    const char *cut = strstr(full, "named Li");
    CHECK(cut != NULL);
    for (int streaming = 0; streaming < 2 && cut; streaming++) {
        const char *stops[2] = {"zzz", "named Li"};
        greedy_req(&r, ONCE, 5, 64);
        r.streaming = streaming;
        r.stop_strings = stops;
        r.n_stop_strings = 2;
        CHECK_EQ(ifl_enqueue(ex, &r, &id, NULL), 0);
        int fin = collect(ex, id, 0, out, &n, NULL, text, sizeof text);
        CHECK_EQ(fin, IFL_FINISH_STOP_WORDS);
        CHECK_EQ(strlen(text), (size_t)(cut - full));
        CHECK(!strncmp(text, full, (size_t)(cut - full)));
    }
    /* a stop word: the two tokens at positions 3..4 of the greedy output */
    greedy_req(&r, ONCE, 5, 64);
    int32_t sw[2] = {GREEDY[3], GREEDY[4]}, swl[1] = {2};
    r.stop_words_tokens = sw;
    r.stop_words_lens = swl;
    r.n_stop_words = 1;
    CHECK_EQ(ifl_enqueue(ex, &r, &id, NULL), 0);
    CHECK_EQ(collect(ex, id, 0, out, &n, NULL, NULL, 0), IFL_FINISH_STOP_WORDS);
    CHECK_EQ(n, 5);
    ifl_executor_destroy(ex, 0);
}

/* Logit bias, bad words, penalties and min_tokens reach the sampler. */
static void test_sampling_controls(void)
{
    ifl_executor *ex = open_ex(4, 0, IFL_SCHED_GUARANTEED_NO_EVICT, 0);
    if (!ex)
        return;
    struct ifl_request r;
    ifl_id id;
    int32_t out[128], n;
    /* banning the first greedy token changes the first token */
    greedy_req(&r, ONCE, 5, 4);
    int32_t bid[1] = {GREEDY[0]};
    float bval[1] = {-INFINITY};
    r.logit_bias_ids = bid;
    r.logit_bias_values = bval;
    r.n_logit_bias = 1;
    CHECK_EQ(ifl_enqueue(ex, &r, &id, NULL), 0);
    collect(ex, id, 0, out, &n, NULL, NULL, 0);
    CHECK(n == 4 && out[0] != GREEDY[0]);
    /* a large positive bias forces a token */
    bval[0] = 100;
    bid[0] = 42;
    CHECK_EQ(ifl_enqueue(ex, &r, &id, NULL), 0);
    collect(ex, id, 0, out, &n, NULL, NULL, 0);
    CHECK(n == 4 && out[0] == 42 && out[3] == 42);
    /* a bad word of one token never appears */
    greedy_req(&r, ONCE, 5, 40);
    int32_t bw[1] = {261}, bwl[1] = {1}; /* " a" */
    r.bad_words_tokens = bw;
    r.bad_words_lens = bwl;
    r.n_bad_words = 1;
    CHECK_EQ(ifl_enqueue(ex, &r, &id, NULL), 0);
    collect(ex, id, 0, out, &n, NULL, NULL, 0);
    for (int i = 0; i < n; i++)
        CHECK(out[i] != 261);
    /* a strong frequency penalty: no token repeats in 20 steps */
    greedy_req(&r, ONCE, 5, 20);
    r.sampling.frequency_penalty = 50;
    CHECK_EQ(ifl_enqueue(ex, &r, &id, NULL), 0);
    CHECK_EQ(collect(ex, id, 0, out, &n, NULL, NULL, 0), IFL_FINISH_LENGTH);
    CHECK_EQ(last_end_token, -1);
    for (int i = 0; i < n; i++)
        for (int j = 0; j < i; j++)
            CHECK(out[i] != out[j]);
    /* the end token forced by bias is held off by min_tokens, then ends it */
    greedy_req(&r, ONCE, 5, 30);
    r.sampling.ignore_eos = 0;
    r.sampling.min_tokens = 6;
    int32_t eos[1] = {2};
    float big[1] = {100};
    r.logit_bias_ids = eos;
    r.logit_bias_values = big;
    r.n_logit_bias = 1;
    CHECK_EQ(ifl_enqueue(ex, &r, &id, NULL), 0);
    CHECK_EQ(collect(ex, id, 0, out, &n, NULL, NULL, 0), IFL_FINISH_END_ID);
    CHECK_EQ(n, 6);
    CHECK_EQ(last_end_token, 2); /* the end token, left out of the tokens */
    for (int i = 0; i < n; i++)
        CHECK(out[i] != 2);
    ifl_executor_destroy(ex, 0);
}

/* When bias bans every token there is nothing to pick: the request ends
 * with no token, status IFL_EINVAL and a message saying why (greedy,
 * sampled, two samples, beams), and the executor goes on serving. */
static void test_nothing_to_pick(void)
{
    ifl_executor *ex = open_ex(4, 0, IFL_SCHED_GUARANTEED_NO_EVICT, 0);
    if (!ex)
        return;
    int32_t nv = 512, all[512];
    float ban[512];
    for (int32_t i = 0; i < nv; i++) {
        all[i] = i;
        ban[i] = -INFINITY;
    }
    for (int mode = 0; mode < 4; mode++) {
        struct ifl_request r;
        greedy_req(&r, ONCE, 5, 6);
        r.logit_bias_ids = all;
        r.logit_bias_values = ban;
        r.n_logit_bias = nv;
        if (mode >= 1)
            r.sampling.temperature = 1;
        if (mode == 2)
            r.num_return_sequences = 2;
        if (mode == 3)
            r.sampling.beam_width = 2;
        ifl_id id;
        CHECK_EQ(ifl_enqueue(ex, &r, &id, NULL), 0);
        int final = 0, status = 0, tokens = 0;
        while (!final) {
            struct ifl_response *out[4];
            int32_t got = 0;
            if (ifl_await(ex, &id, 1, 20000, out, 4, &got)) {
                CHECK_MSG(0, "mode %d: await failed", mode);
                break;
            }
            for (int32_t i = 0; i < got; i++) {
                for (int32_t k = 0; k < out[i]->n_results; k++)
                    tokens += out[i]->results[k].n_tokens;
                if (out[i]->is_final) {
                    final = 1;
                    status = out[i]->status;
                    CHECK_MSG(out[i]->error_msg && strstr(out[i]->error_msg, "no token was left"),
                              "mode %d: message '%s'", mode,
                              out[i]->error_msg ? out[i]->error_msg : "(none)");
                }
                ifl_response_free(out[i]);
            }
        }
        CHECK_MSG(status == IFL_EINVAL, "mode %d: status %d", mode, status);
        CHECK_MSG(tokens == 0, "mode %d: %d tokens", mode, tokens);
    }
    struct ifl_request r;
    ifl_id id;
    int32_t out[16], n;
    greedy_req(&r, ONCE, 5, 4);
    CHECK_EQ(ifl_enqueue(ex, &r, &id, NULL), 0);
    collect(ex, id, 0, out, &n, NULL, NULL, 0);
    CHECK(n == 4 && out[0] == GREEDY[0]);
    ifl_executor_destroy(ex, 0);
}

/* Named and batched logits post-processors see their rows and can steer. */
static atomic_int proc_calls, batched_rows;
static void force_token(void *user, ifl_id id, float *logits, int32_t n_vocab,
                        const int32_t *tokens, int32_t n_tokens, uint64_t client_id)
{
    (void)id;
    (void)tokens;
    (void)n_tokens;
    atomic_fetch_add(&proc_calls, 1);
    if (client_id == 7)
        for (int32_t i = 0; i < n_vocab; i++)
            logits[i] = i == *(int32_t *)user ? 10.0f : -10.0f;
}
static void batched_fn(void *user, int32_t n_rows, const ifl_id *ids, float *logits,
                       int32_t n_vocab, const int32_t *const *tokens, const int32_t *n_tokens,
                       const uint64_t *client_ids)
{
    (void)user;
    (void)ids;
    (void)tokens;
    (void)n_tokens;
    (void)client_ids;
    atomic_fetch_add(&batched_rows, n_rows);
    for (int32_t r = 0; r < n_rows; r++)
        for (int32_t i = 0; i < n_vocab; i++)
            logits[(size_t)r * n_vocab + i] = i == 99 ? 1.0f : 0.0f;
}

static void test_logits_processors(void)
{
    static int32_t forced = 77;
    struct ifl_logits_processor p = {.name = "force", .fn = force_token, .user = &forced};
    struct ifl_executor_config c;
    ifl_executor_config_default(&c);
    c.logits_processors = &p;
    c.n_logits_processors = 1;
    c.batched_logits_processor = batched_fn;
    c.n_threads = 2;
    ifl_executor *ex;
    char err[512];
    CHECK_EQ(ifl_executor_create(&ex, model_path, &c, err), 0);
    struct ifl_request r[3];
    ifl_id ids[3];
    for (int k = 0; k < 3; k++) {
        greedy_req(&r[k], ONCE, 5, 5);
        r[k].logits_post_processor = k == 2 ? "batched" : "force";
        r[k].client_id = k == 0 ? 7 : 8;
    }
    CHECK_EQ(ifl_enqueue_many(ex, r, 3, ids, err), 0);
    int32_t out[16], n;
    collect(ex, ids[0], 0, out, &n, NULL, NULL, 0);
    CHECK(n == 5 && out[0] == 77 && out[4] == 77);
    collect(ex, ids[1], 0, out, &n, NULL, NULL, 0);
    CHECK(n == 5 && !memcmp(out, GREEDY, sizeof(int32_t) * 5));
    collect(ex, ids[2], 0, out, &n, NULL, NULL, 0);
    CHECK(n == 5 && out[0] == 99 && out[4] == 99);
    CHECK_EQ(atomic_load(&proc_calls), 10);
    CHECK_EQ(atomic_load(&batched_rows), 5);
    ifl_executor_destroy(ex, 0);
}

/* ---------------- beam search ---------------- */

/* The final response of id (earlier ones are dropped); NULL on error. */
static struct ifl_response *await_final(ifl_executor *ex, ifl_id id)
{
    for (;;) {
        struct ifl_response *r;
        int32_t got = 0;
        int rc = ifl_await(ex, &id, 1, 30000, &r, 1, &got);
        if (rc || !got) {
            CHECK_MSG(0, "await %llu: %s", (unsigned long long)id, ifl_strerror(rc));
            return NULL;
        }
        if (r->is_final)
            return r;
        ifl_response_free(r);
    }
}

static struct ifl_response *run_one(ifl_executor *ex, const struct ifl_request *r)
{
    ifl_id id;
    char err[512] = "";
    int rc = ifl_enqueue(ex, r, &id, err);
    CHECK_MSG(rc == 0, "enqueue: %s", err);
    return rc ? NULL : await_final(ex, id);
}

static void beam_req(struct ifl_request *r, const int32_t *ids, int32_t n, int32_t max_tokens,
                     int32_t width)
{
    greedy_req(r, ids, n, max_tokens);
    r->sampling.beam_width = width;
    r->output.return_log_probs = 1;
}

/* The same results, bitwise: tokens, log-probs, scores. */
static int same_results(const struct ifl_response *a, const struct ifl_response *b)
{
    if (!a || !b || a->n_results != b->n_results)
        return 0;
    for (int32_t i = 0; i < a->n_results; i++) {
        const struct ifl_sequence_result *x = &a->results[i], *y = &b->results[i];
        if (x->n_tokens != y->n_tokens || x->finish_reason != y->finish_reason ||
            memcmp(x->tokens, y->tokens, sizeof(int32_t) * (size_t)x->n_tokens) ||
            memcmp(&x->cum_log_prob, &y->cum_log_prob, sizeof(float)) ||
            memcmp(&x->score, &y->score, sizeof(float)))
            return 0;
        if ((x->log_probs == NULL) != (y->log_probs == NULL) ||
            (x->log_probs &&
             memcmp(x->log_probs, y->log_probs, sizeof(float) * (size_t)x->n_tokens)))
            return 0;
    }
    return 1;
}

static void test_beam_search(void)
{
    ifl_executor *ex = open_ex(16, 0, IFL_SCHED_GUARANTEED_NO_EVICT, 0);
    if (!ex)
        return;
    struct ifl_request r;
    /* width 1 is greedy */
    beam_req(&r, ONCE, 5, 32, 1);
    struct ifl_response *g = run_one(ex, &r);
    if (g) {
        CHECK_EQ(g->n_results, 1);
        CHECK_EQ(g->results[0].n_tokens, 32);
        CHECK(!memcmp(g->results[0].tokens, GREEDY, sizeof(int32_t) * 32));
    }
    /* width 4 with an end token (295, "k", ends "park" and friends after a
     * few words): 4 results by score, length penalty applied */
    beam_req(&r, ONCE, 5, 64, 4);
    r.sampling.ignore_eos = 0;
    r.end_id = 295;
    r.sampling.length_penalty = 0.7f;
    r.sampling.early_stopping = 0;
    struct ifl_response *b = run_one(ex, &r);
    if (b) {
        int n_end = 0;
        CHECK_EQ(b->status, 0);
        CHECK_EQ(b->n_results, 4);
        CHECK(b->is_final && b->is_sequence_final);
        for (int32_t i = 0; i < b->n_results; i++) {
            const struct ifl_sequence_result *x = &b->results[i];
            CHECK(x->n_tokens >= 1 && x->n_tokens <= 64);
            double sum = 0;
            for (int32_t k = 0; k < x->n_tokens; k++)
                sum += x->log_probs[k];
            CHECK_NEAR(sum, x->cum_log_prob, 1e-3);
            double want = x->cum_log_prob / pow((double)x->n_tokens, 0.7);
            CHECK_NEAR(x->score, want, 1e-4 * fabs(want) + 1e-6);
            CHECK(x->finish_reason == IFL_FINISH_END_ID || x->finish_reason == IFL_FINISH_LENGTH);
            if (x->finish_reason == IFL_FINISH_END_ID) {
                CHECK_EQ(x->tokens[x->n_tokens - 1], 295); /* the end token is kept */
                CHECK_EQ(x->end_token, -1);
                n_end++;
            }
            if (i > 0)
                CHECK(b->results[i - 1].score >= x->score);
            CHECK(x->text != NULL && x->n_text > 0);
            if (i > 0) /* distinct hypotheses */
                CHECK(
                    x->n_tokens != b->results[0].n_tokens ||
                    memcmp(x->tokens, b->results[0].tokens, sizeof(int32_t) * (size_t)x->n_tokens));
        }
        CHECK_MSG(n_end >= 2, "%d results ended on the end token", n_end);
        /* lengths differ, and the penalty ranks a longer, less likely
         * hypothesis above a shorter one */
        int reordered = 0;
        for (int32_t i = 1; i < b->n_results; i++)
            reordered |= b->results[i - 1].cum_log_prob < b->results[i].cum_log_prob;
        CHECK(reordered);
    }
    /* beam search finds a sequence at least as likely as greedy's (same
     * length, no end tokens, no length penalty) */
    greedy_req(&r, ONCE, 5, 24);
    r.output.return_log_probs = 1;
    struct ifl_response *gl = run_one(ex, &r);
    beam_req(&r, ONCE, 5, 24, 4);
    r.sampling.length_penalty = 0;
    struct ifl_response *bl = run_one(ex, &r);
    if (gl && bl) {
        double sum = 0;
        for (int32_t k = 0; k < gl->results[0].n_tokens; k++)
            sum += gl->results[0].log_probs[k];
        CHECK_EQ(bl->results[0].n_tokens, 24);
        CHECK_MSG(bl->results[0].cum_log_prob >= sum - 1e-4, "beam %g < greedy %g",
                  bl->results[0].cum_log_prob, sum);
        /* num_return_sequences = 2: the best two of the same search */
        r.num_return_sequences = 2;
        struct ifl_response *two = run_one(ex, &r);
        if (two) {
            CHECK_EQ(two->n_results, 2);
            struct ifl_response cut = *bl;
            cut.n_results = 2;
            CHECK(same_results(two, &cut));
        }
        ifl_response_free(two);
        /* streaming beams: one final response only, with the same results */
        r.num_return_sequences = 1;
        r.streaming = 1;
        ifl_id id;
        CHECK_EQ(ifl_enqueue(ex, &r, &id, NULL), 0);
        struct ifl_response *st = NULL;
        int32_t got = 0;
        CHECK_EQ(ifl_await(ex, &id, 1, 30000, &st, 1, &got), 0);
        if (got) {
            CHECK(st->is_final);
            CHECK(same_results(st, bl));
            ifl_response_free(st);
        }
    }
    /* unsupported combinations are refused with a message */
    char err[512];
    ifl_id id;
    beam_req(&r, ONCE, 5, 8, 4);
    const char *stops[1] = {"x"};
    r.stop_strings = stops;
    r.n_stop_strings = 1;
    CHECK_EQ(ifl_enqueue(ex, &r, &id, err), IFL_EUNSUPPORTED);
    CHECK(strstr(err, "beam") != NULL);
    beam_req(&r, ONCE, 5, 8, 4);
    r.num_return_sequences = 5;
    CHECK_EQ(ifl_enqueue(ex, &r, &id, err), IFL_EINVAL);
    beam_req(&r, ONCE, 5, 8, 4);
    r.output.top_log_probs = 2;
    CHECK_EQ(ifl_enqueue(ex, &r, &id, err), IFL_EUNSUPPORTED);
    ifl_response_free(g);
    ifl_response_free(b);
    ifl_response_free(gl);
    ifl_response_free(bl);
    ifl_executor_destroy(ex, 0);
}

/* A beam search alone, then among 16 other requests (sampling and beams)
 * with chunked prefill and two threads: the same results, bitwise. Then
 * under max_utilization with a KV pool too small for everyone, where the
 * low-priority beam search is preempted and recomputed. */
static void test_beam_invariance(void)
{
    struct ifl_response *ref = NULL;
    for (int round = 0; round < 3; round++) {
        struct ifl_executor_config c;
        ifl_executor_config_default(&c);
        c.max_num_tokens = round == 1 ? 7 : 512;
        c.n_threads = round ? 2 : 1;
        c.n_ctx = 256;
        c.kv_type = IFL_KV_F32;
        if (round == 2) {
            c.sched_policy = IFL_SCHED_MAX_UTILIZATION;
            c.kv_cache_tokens = 512;
            c.max_batch_size = 20;
        }
        ifl_executor *ex;
        char err[512];
        CHECK_EQ(ifl_executor_create(&ex, model_path, &c, err), 0);
        struct ifl_request r;
        beam_req(&r, ONCE, 5, 60, 4);
        r.sampling.ignore_eos = 0;
        r.sampling.early_stopping = 2;
        r.sampling.repetition_penalty = 1.3f; /* penalties apply per beam */
        r.output.return_generation_logits = 1;
        r.priority = 0.2f;
        r.output.return_perf_metrics = 1;
        ifl_id id;
        int expect_preempt = 1;
        if (round == 0) {
            ref = run_one(ex, &r);
            ifl_executor_destroy(ex, 0);
            continue;
        }
        int32_t prompts[16][40];
        struct ifl_request others[16];
        ifl_id oid[16];
        struct ifl_rng g;
        ifl_rng_seed(&g, 21);
        for (int k = 0; k < 16; k++) {
            int len = 3 + (int)(ifl_rng_next(&g) % 30);
            prompts[k][0] = 1;
            for (int i = 1; i < len; i++)
                prompts[k][i] = 3 + (int)(ifl_rng_next(&g) % 500);
            greedy_req(&others[k], prompts[k], len, round == 2 ? 90 : 30 + k * 4);
            others[k].sampling.temperature = 0.8f;
            others[k].sampling.seed = (uint64_t)k;
            others[k].priority = 0.8f;
            if (k % 5 == 0) {
                others[k].sampling.beam_width = 2 + k % 3;
                others[k].sampling.ignore_eos = 0;
            }
        }
        if (round == 2) {
            /* the beam search runs first; the others, of higher priority,
             * then need its blocks */
            CHECK_EQ(ifl_enqueue(ex, &r, &id, err), 0);
            for (int i = 0; i < 5000; i++) {
                struct ifl_request_stats rs;
                if (ifl_get_request_stats(ex, id, &rs) == 0 && rs.n_generated >= 4)
                    break;
                struct timespec ts = {0, 200 * 1000};
                nanosleep(&ts, NULL);
            }
            CHECK_EQ(ifl_enqueue_many(ex, others, 16, oid, err), 0);
            /* the engine takes the others in at its next step, so the beam
             * is preempted some ten steps later, unless this thread lost
             * the CPU between its polls and the beam was nearly done (a
             * once-seen flake of CI: "preemptions 0") */
            struct ifl_request_stats rs = {0};
            if (ifl_get_request_stats(ex, id, &rs) != 0 || rs.n_generated > 30) {
                expect_preempt = 0; /* done (no stats) or nearly */
                fprintf(stderr,
                        "  (the beam was at %d of 60 tokens or done when the others "
                        "came: its preemption is not checked)\n",
                        rs.n_generated);
            }
        } else {
            CHECK_EQ(ifl_enqueue_many(ex, others, 8, oid, err), 0);
            CHECK_EQ(ifl_enqueue(ex, &r, &id, err), 0);
            CHECK_EQ(ifl_enqueue_many(ex, others + 8, 8, oid + 8, err), 0);
        }
        struct ifl_response *got = await_final(ex, id);
        CHECK_MSG(same_results(got, ref), "round %d: beam results differ under load", round);
        if (got && ref && got->n_results == ref->n_results)
            for (int32_t i = 0; i < got->n_results; i++)
                CHECK(!memcmp(got->results[i].generation_logits, ref->results[i].generation_logits,
                              sizeof(float) * 512 * (size_t)got->results[i].n_tokens));
        if (round == 2 && got && expect_preempt)
            CHECK_MSG(got->perf.preemptions >= 1, "preemptions %d", got->perf.preemptions);
        ifl_response_free(got);
        for (int k = 0; k < 16; k++)
            ifl_response_free(await_final(ex, oid[k]));
        struct ifl_iteration_stats st;
        ifl_get_iteration_stats(ex, &st);
        ifl_executor_destroy(ex, 0);
    }
    /* every hypothesis's first token came from the prompt's row */
    if (ref)
        for (int32_t i = 0; i < ref->n_results; i++) {
            const float *row = ref->results[i].generation_logits;
            CHECK(row != NULL);
            if (!row)
                continue;
            for (int32_t i2 = 0; i2 < ref->n_results; i2++)
                CHECK(!memcmp(row, ref->results[i2].generation_logits, sizeof(float) * 512));
        }
    ifl_response_free(ref);
}

static void test_beam_cancel(void)
{
    ifl_executor *ex = open_ex(8, 0, IFL_SCHED_GUARANTEED_NO_EVICT, 0);
    if (!ex)
        return;
    struct ifl_request r;
    beam_req(&r, ONCE, 5, 480, 4);
    ifl_id id;
    CHECK_EQ(ifl_enqueue(ex, &r, &id, NULL), 0);
    /* wait until it generates, then cancel */
    for (int i = 0; i < 2000; i++) {
        struct ifl_request_stats rs;
        if (ifl_get_request_stats(ex, id, &rs) == 0 && rs.n_generated >= 3)
            break;
        struct timespec ts = {0, 1000 * 1000};
        nanosleep(&ts, NULL);
    }
    CHECK_EQ(ifl_cancel(ex, id), 0);
    struct ifl_response *f = await_final(ex, id);
    if (f) {
        CHECK(f->is_final);
        CHECK(f->n_results >= 1);
        CHECK_EQ(f->results[0].finish_reason, IFL_FINISH_CANCELLED);
        CHECK(f->results[0].n_tokens < 480);
        ifl_response_free(f);
    }
    /* cancelled while waiting: one final response */
    struct ifl_request many[9];
    ifl_id ids[9];
    for (int k = 0; k < 9; k++)
        beam_req(&many[k], ONCE, 5, 200, 4);
    CHECK_EQ(ifl_enqueue_many(ex, many, 9, ids, NULL), 0);
    CHECK_EQ(ifl_cancel(ex, ids[8]), 0);
    for (int k = 0; k < 9; k++) {
        struct ifl_response *x = await_final(ex, ids[k]);
        if (x && k == 8)
            CHECK_EQ(x->results[0].finish_reason, IFL_FINISH_CANCELLED);
        ifl_response_free(x);
        CHECK_EQ(ifl_num_responses_ready(ex, ids[k]), 0);
    }
    ifl_executor_destroy(ex, 1);
}

/* ---------------- logits and hidden states ---------------- */

static int32_t argmax(const float *x, int32_t n)
{
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b])
            b = i;
    return b;
}

static void test_generation_and_context_logits(void)
{
    ifl_executor *ex = open_ex(16, 0, IFL_SCHED_GUARANTEED_NO_EVICT, 0);
    if (!ex)
        return;
    const int32_t nv = 512;
    int32_t prompt[150];
    struct ifl_rng g;
    ifl_rng_seed(&g, 8);
    prompt[0] = 1;
    for (int i = 1; i < 150; i++)
        prompt[i] = 3 + (int)(ifl_rng_next(&g) % 500);
    /* generation logits: argmax is the greedy token, streamed or not */
    struct ifl_request r;
    for (int streaming = 0; streaming < 2; streaming++) {
        greedy_req(&r, ONCE, 5, 12);
        r.output.return_generation_logits = 1;
        r.streaming = streaming;
        ifl_id id;
        CHECK_EQ(ifl_enqueue(ex, &r, &id, NULL), 0);
        int32_t n = 0, final = 0;
        while (!final) {
            struct ifl_response *x;
            int32_t got;
            if (ifl_await(ex, &id, 1, 30000, &x, 1, &got))
                break;
            const struct ifl_sequence_result *s = &x->results[0];
            CHECK(s->n_tokens == 0 || s->generation_logits != NULL);
            for (int32_t k = 0; k < s->n_tokens && s->generation_logits; k++)
                CHECK_EQ(argmax(s->generation_logits + (size_t)k * nv, nv), GREEDY[n + k]);
            n += s->n_tokens;
            CHECK(x->context_logits == NULL);
            final = x->is_final;
            ifl_response_free(x);
        }
        CHECK_EQ(n, 12);
    }
    /* context logits of a 150-token prompt (more rows than the 64 logits rows
     * of a step: its prefill is cut into chunks) */
    greedy_req(&r, prompt, 150, 4);
    r.output.return_context_logits = 1;
    r.output.return_generation_logits = 1;
    r.output.return_perf_metrics = 1;
    struct ifl_response *a = run_one(ex, &r);
    /* the same prompt again: no prefix reuse, identical rows */
    struct ifl_response *a2 = run_one(ex, &r);
    if (a && a2) {
        CHECK(a->context_logits != NULL);
        CHECK_EQ(a->n_vocab, nv);
        CHECK_EQ(a2->perf.kv_blocks_reused, 0);
        CHECK(!memcmp(a->context_logits, a2->context_logits, sizeof(float) * 150 * nv));
        /* the last prompt row predicted the first token */
        CHECK(!memcmp(a->context_logits + (size_t)149 * nv, a->results[0].generation_logits,
                      sizeof(float) * nv));
        /* a prefix prompt's first generation row is the matching context row */
        for (int cut = 1; cut <= 150; cut += 37) {
            struct ifl_request p;
            greedy_req(&p, prompt, cut, 1);
            p.output.return_generation_logits = 1;
            struct ifl_response *x = run_one(ex, &p);
            if (x) {
                CHECK_MSG(!memcmp(x->results[0].generation_logits,
                                  a->context_logits + (size_t)(cut - 1) * nv, sizeof(float) * nv),
                          "prefix %d", cut);
                ifl_response_free(x);
            }
        }
    }
    ifl_response_free(a2);
    ifl_executor_destroy(ex, 0);
    /* chunked by max_num_tokens = 7, among other requests: the same rows */
    struct ifl_executor_config c;
    ifl_executor_config_default(&c);
    c.max_num_tokens = 7;
    c.n_threads = 2;
    c.kv_type = IFL_KV_F32;
    c.n_ctx = 512;
    char err[512];
    CHECK_EQ(ifl_executor_create(&ex, model_path, &c, err), 0);
    struct ifl_request others[4];
    ifl_id oid[4], id;
    for (int k = 0; k < 4; k++) {
        greedy_req(&others[k], prompt + 10 * k, 20, 10);
        others[k].output.return_context_logits = k % 2;
    }
    CHECK_EQ(ifl_enqueue_many(ex, others, 2, oid, err), 0);
    CHECK_EQ(ifl_enqueue(ex, &r, &id, err), 0);
    CHECK_EQ(ifl_enqueue_many(ex, others + 2, 2, oid + 2, err), 0);
    struct ifl_response *b = await_final(ex, id);
    if (a && b) {
        CHECK(b->context_logits &&
              !memcmp(a->context_logits, b->context_logits, sizeof(float) * 150 * nv));
        CHECK(same_results(a, b));
    }
    for (int k = 0; k < 4; k++) {
        struct ifl_response *x = await_final(ex, oid[k]);
        if (x)
            CHECK((x->context_logits != NULL) == (k % 2));
        ifl_response_free(x);
    }
    ifl_response_free(a);
    ifl_response_free(b);
    ifl_executor_destroy(ex, 0);
}

/* Hidden states: h . W_out[token] is the token's raw logit; the last
 * context row is the state that produced the first token; the same alone
 * and in a batch; beams carry them per result. */
static void test_hidden_states(void)
{
    struct ifl_model *m = NULL;
    char err[512];
    CHECK_EQ(ifl_model_load(&m, model_path, err), 0);
    if (!m)
        return;
    const int32_t nv = 512, ne = m->hp.n_embd;
    CHECK_EQ(ne, 64);
    float *w = malloc(sizeof(float) * (size_t)nv * (size_t)ne);
    for (int32_t t = 0; t < nv; t++)
        ifl_kernels_ref()->dequant[m->output.type](
            (const char *)m->output.data + (size_t)t * m->output.row_bytes, w + (size_t)t * ne, ne);
    ifl_executor *ex = open_ex(16, 0, IFL_SCHED_GUARANTEED_NO_EVICT, 0);
    struct ifl_request r;
    greedy_req(&r, ONCE, 5, 16);
    r.output.return_hidden_states = 1;
    r.output.return_generation_logits = 1;
    r.output.return_context_logits = 1;
    struct ifl_response *a = run_one(ex, &r);
    if (a) {
        const struct ifl_sequence_result *s = &a->results[0];
        CHECK_EQ(a->n_embd, ne);
        CHECK(s->hidden_states != NULL && a->context_hidden_states != NULL);
        for (int32_t k = 0; k < s->n_tokens && s->hidden_states; k++)
            for (int32_t t = 0; t < nv; t += 37) {
                double d = 0;
                for (int32_t i = 0; i < ne; i++)
                    d += (double)s->hidden_states[(size_t)k * ne + i] * w[(size_t)t * ne + i];
                CHECK_NEAR(d, s->generation_logits[(size_t)k * nv + t], 1e-4);
            }
        if (a->context_hidden_states && s->hidden_states)
            CHECK(!memcmp(a->context_hidden_states + (size_t)4 * ne, s->hidden_states,
                          sizeof(float) * (size_t)ne));
    }
    /* in a batch with others: bitwise the same */
    struct ifl_request rs[6];
    ifl_id ids[6];
    int32_t pr[6][8];
    for (int k = 0; k < 6; k++) {
        for (int i = 0; i < 8; i++)
            pr[k][i] = i == 0 ? 1 : 20 + 30 * k + i;
        greedy_req(&rs[k], pr[k], 8, 20);
        rs[k].output.return_hidden_states = k % 2;
    }
    rs[3] = r;
    CHECK_EQ(ifl_enqueue_many(ex, rs, 6, ids, err), 0);
    struct ifl_response *b = await_final(ex, ids[3]);
    if (a && b) {
        CHECK(same_results(a, b));
        CHECK(!memcmp(a->results[0].hidden_states, b->results[0].hidden_states,
                      sizeof(float) * 16 * (size_t)ne));
        CHECK(!memcmp(a->context_hidden_states, b->context_hidden_states,
                      sizeof(float) * 5 * (size_t)ne));
    }
    for (int k = 0; k < 6; k++)
        if (k != 3)
            ifl_response_free(await_final(ex, ids[k]));
    /* beams: each result's rows are the ones its tokens came from; with no
     * processing, log_softmax(row)[token] is the token's log-prob */
    beam_req(&r, ONCE, 5, 20, 3);
    r.sampling.ignore_eos = 0;
    r.output.return_hidden_states = 1;
    r.output.return_generation_logits = 1;
    r.output.return_context_logits = 0;
    struct ifl_response *bm = run_one(ex, &r);
    if (bm) {
        CHECK_EQ(bm->n_results, 3);
        for (int32_t i = 0; i < bm->n_results; i++) {
            const struct ifl_sequence_result *s = &bm->results[i];
            CHECK(s->generation_logits && s->hidden_states);
            if (!s->generation_logits || !s->hidden_states)
                continue;
            for (int32_t k = 0; k < s->n_tokens; k++) {
                const float *row = s->generation_logits + (size_t)k * nv;
                double mx = row[argmax(row, nv)], sum = 0;
                for (int32_t t = 0; t < nv; t++)
                    sum += exp((double)row[t] - mx);
                double lp = row[s->tokens[k]] - mx - log(sum);
                CHECK_NEAR(lp, s->log_probs[k], 1e-4);
                double d = 0;
                for (int32_t e2 = 0; e2 < ne; e2++)
                    d += (double)s->hidden_states[(size_t)k * ne + e2] *
                         w[(size_t)s->tokens[k] * ne + e2];
                CHECK_NEAR(d, row[s->tokens[k]], 1e-4);
            }
        }
        ifl_response_free(bm);
    }
    ifl_response_free(a);
    ifl_response_free(b);
    ifl_executor_destroy(ex, 0);
    free(w);
    ifl_model_free(m);
}

/* A single request that fills the whole context fits the default KV pool
 * of one context; model metadata is readable through the API. */
static void test_full_context_and_meta(void)
{
    struct ifl_executor_config c;
    ifl_executor_config_default(&c);
    c.max_batch_size = 1;
    c.n_threads = 1;
    ifl_executor *ex;
    char err[512];
    CHECK_EQ(ifl_executor_create(&ex, model_path, &c, err), 0);
    struct ifl_model_info mi;
    ifl_executor_model_info(ex, &mi);
    CHECK_EQ(mi.n_ctx, 128);
    CHECK(mi.kv_cache_tokens >= 128);
    struct ifl_request r;
    greedy_req(&r, ONCE, 5, mi.n_ctx - 5);
    ifl_id id;
    CHECK_EQ(ifl_enqueue(ex, &r, &id, err), 0);
    int32_t out[256], n;
    CHECK_EQ(collect(ex, id, 0, out, &n, NULL, NULL, 0), IFL_FINISH_LENGTH);
    CHECK_EQ(n, mi.n_ctx - 5);
    char buf[64];
    int64_t len;
    CHECK_EQ(ifl_executor_model_meta(ex, "general.architecture", buf, sizeof buf, &len), 0);
    CHECK_STR(buf, "llama");
    CHECK_EQ(len, 5);
    CHECK_EQ(ifl_executor_model_meta(ex, "no.such.key", buf, sizeof buf, &len), IFL_ENOTFOUND);
    CHECK_EQ(ifl_executor_model_meta(ex, "llama.block_count", buf, sizeof buf, &len), IFL_EINVAL);
    CHECK_EQ(ifl_executor_model_meta(ex, "general.architecture", buf, 3, &len), IFL_EFULL);
    CHECK_STR(buf, "ll");
    /* cap 0 asks for the length alone */
    len = -1;
    CHECK_EQ(ifl_executor_model_meta(ex, "general.architecture", NULL, 0, &len), IFL_EFULL);
    CHECK_EQ(len, 5);
    const int32_t once[4] = {403, 407, 261, 378}; /* " Once upon a time" */
    len = -1;
    CHECK_EQ(ifl_executor_detokenize(ex, once, 4, 0, NULL, 0, &len), IFL_EFULL);
    CHECK_EQ(len, 17);
    CHECK_EQ(ifl_executor_detokenize(ex, once, 4, 0, buf, len + 1, &len), 0);
    CHECK_STR(buf, " Once upon a time");
    ifl_executor_destroy(ex, 0);
}

/* A NULL executor (a failed create) or output pointer is an argument
 * error for every entry point, never a crash. */
static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Id 0 is "none": no call that takes a request id may treat it as one, with
 * a request live (the table then has empty slots, whose marker is 0) or
 * after it ended. */
static void check_id_zero(ifl_executor *ex)
{
    const ifl_id zero = 0;
    struct ifl_request_stats rs;
    struct ifl_response *none[1];
    int32_t n_none = -1;
    CHECK_EQ(ifl_cancel(ex, 0), IFL_ENOTFOUND);
    CHECK_EQ(ifl_get_request_stats(ex, 0, &rs), IFL_ENOTFOUND);
    /* 10 s and forever both end at once: nothing can come for id 0 (the
     * wait without end is tried only once the bounded one passed, so a
     * regression fails here instead of hanging) */
    double t0 = now_s();
    int rc = ifl_await(ex, &zero, 1, 10000, none, 1, &n_none);
    CHECK_EQ(rc, IFL_ESTATE);
    CHECK_EQ(n_none, 0);
    CHECK(now_s() - t0 < 5.0);
    if (rc == IFL_ESTATE)
        CHECK_EQ(ifl_await(ex, &zero, 1, -1, none, 1, &n_none), IFL_ESTATE);
}

static void test_id_zero(void)
{
    ifl_executor *ex = open_ex(2, 0, IFL_SCHED_GUARANTEED_NO_EVICT, 0);
    if (!ex)
        return;
    check_id_zero(ex); /* before any request: the table is not yet allocated */
    struct ifl_request r;
    greedy_req(&r, ONCE, 5, 300);
    r.streaming = 1;
    ifl_id id;
    CHECK_EQ(ifl_enqueue(ex, &r, &id, NULL), 0);
    check_id_zero(ex);
    /* 0 beside a live id waits for that id only, and does not cancel it */
    const ifl_id both[2] = {0, id};
    struct ifl_response *resp[4];
    int32_t got = 0;
    CHECK_EQ(ifl_await(ex, both, 2, 20000, resp, 4, &got), 0);
    CHECK(got >= 1);
    int32_t first = 0, final = 0;
    for (int32_t i = 0; i < got; i++) {
        CHECK(resp[i]->request_id == id);
        if (resp[i]->n_results == 1)
            first += resp[i]->results[0].n_tokens;
        final |= resp[i]->is_final;
        ifl_response_free(resp[i]);
    }
    int32_t out[512], n = 0;
    if (!final)
        CHECK_EQ(collect(ex, id, 0, out, &n, NULL, NULL, 0), IFL_FINISH_LENGTH);
    CHECK_EQ(first + n, 300);
    check_id_zero(ex); /* every request final: the table is empty but allocated */
    ifl_executor_destroy(ex, 0);
}

static void test_null_executor(void)
{
    struct ifl_request r;
    ifl_request_init(&r);
    ifl_id id = 0;
    struct ifl_response *out[2];
    int32_t n_out = -1;
    char err[512];
    CHECK_EQ(ifl_enqueue(NULL, &r, &id, err), IFL_EINVAL);
    CHECK_EQ(ifl_can_enqueue(NULL), 0);
    CHECK_EQ(ifl_cancel(NULL, 1), IFL_EINVAL);
    CHECK_EQ(ifl_await(NULL, NULL, 0, 0, out, 2, &n_out), IFL_EINVAL);
    CHECK_EQ(n_out, 0);
    CHECK_EQ(ifl_await(NULL, NULL, 0, 0, out, 2, NULL), IFL_EINVAL);
    CHECK_EQ(ifl_num_responses_ready(NULL, 0), 0);
    struct ifl_iteration_stats is;
    struct ifl_request_stats rs;
    struct ifl_model_info mi;
    CHECK_EQ(ifl_get_iteration_stats(NULL, &is), IFL_EINVAL);
    CHECK_EQ(ifl_get_request_stats(NULL, 1, &rs), IFL_EINVAL);
    CHECK_EQ(ifl_executor_model_info(NULL, &mi), IFL_EINVAL);
    char buf[16];
    int64_t len = -1, n = -1;
    int32_t ids[4];
    CHECK_EQ(ifl_executor_model_meta(NULL, "general.name", buf, sizeof buf, &len), IFL_EINVAL);
    CHECK_EQ(len, 0);
    CHECK_EQ(ifl_executor_tokenize(NULL, "a", 1, 0, 0, ids, 4, &n), IFL_EINVAL);
    CHECK_EQ(n, 0);
    len = -1;
    CHECK_EQ(ifl_executor_detokenize(NULL, ids, 0, 0, buf, sizeof buf, &len), IFL_EINVAL);
    CHECK_EQ(len, 0);
    ifl_executor_destroy(NULL, 1);

    ifl_executor *ex = open_ex(4, 0, IFL_SCHED_GUARANTEED_NO_EVICT, 0);
    if (!ex)
        return;
    CHECK_EQ(ifl_await(ex, NULL, 0, 0, NULL, 2, &n_out), IFL_EINVAL);
    CHECK_EQ(ifl_get_iteration_stats(ex, NULL), IFL_EINVAL);
    CHECK_EQ(ifl_executor_model_info(ex, NULL), IFL_EINVAL);
    CHECK_EQ(ifl_executor_tokenize(ex, "a", 1, 0, 0, ids, 4, NULL), IFL_EINVAL);
    ifl_executor_destroy(ex, 0);
}

/* Every step's stats are kept: consecutive iterations, the newest equal
 * to ifl_get_iteration_stats', rows adding up to the work done, and
 * `after_iteration` returns only newer ones. */
static void test_stats_history(void)
{
    ifl_executor *ex = open_ex(4, 0, IFL_SCHED_GUARANTEED_NO_EVICT, 0);
    struct ifl_iteration_stats *h = calloc(2048, sizeof(*h));
    int32_t n = -1;
    CHECK_EQ(ifl_get_iteration_stats_since(ex, 0, h, 2048, &n), 0);
    int32_t n0 = n;
    int64_t last0 = n0 ? h[n0 - 1].iteration : 0;
    struct ifl_request r;
    greedy_req(&r, ONCE, 5, 20);
    struct ifl_request rs[3] = {r, r, r};
    ifl_id ids[3];
    CHECK_EQ(ifl_enqueue_many(ex, rs, 3, ids, NULL), 0);
    for (int i = 0; i < 3; i++)
        ifl_response_free(await_final(ex, ids[i]));
    CHECK_EQ(ifl_executor_wait_idle(ex, 60000), 0);
    CHECK_EQ(ifl_get_iteration_stats_since(ex, last0, h, 2048, &n), 0);
    CHECK(n >= 20);
    int64_t ctx = 0, gen = 0;
    for (int32_t i = 0; i < n; i++) {
        CHECK(h[i].iteration > last0);
        if (i)
            CHECK_EQ(h[i].iteration, h[i - 1].iteration + 1);
        ctx += h[i].context_tokens;
        gen += h[i].generation_tokens;
    }
    CHECK_EQ(ctx, 15);     /* three prompts of 5 */
    CHECK_EQ(gen, 3 * 19); /* the first token of each comes with its prompt */
    struct ifl_iteration_stats now;
    CHECK_EQ(ifl_get_iteration_stats(ex, &now), 0);
    CHECK_EQ(h[n - 1].iteration, now.iteration);
    CHECK_EQ(h[n - 1].completed_requests, now.completed_requests);
    int32_t m = -1;
    CHECK_EQ(ifl_get_iteration_stats_since(ex, now.iteration, h, 2048, &m), 0);
    CHECK_EQ(m, 0);
    CHECK_EQ(ifl_get_iteration_stats_since(ex, 0, h, 2, &m), 0);
    CHECK_EQ(m, 2);
    CHECK_EQ(ifl_get_iteration_stats_since(ex, 0, h, 0, &m), IFL_EINVAL);
    CHECK_EQ(ifl_get_iteration_stats_since(NULL, 0, h, 2, &m), IFL_EINVAL);
    free(h);
    ifl_executor_destroy(ex, 0);
}

/* The public chat-template call: ChatML for a model without a template,
 * a template given with the call, the model's special tokens as defaults,
 * and each kind of error with its status. */
static void test_apply_chat_template(void)
{
    ifl_executor *ex = open_ex(2, 0, IFL_SCHED_GUARANTEED_NO_EVICT, 0);
    char *out = NULL, err[512] = "";
    int64_t n = -1;
    const char *ctx = "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], "
                      "\"add_generation_prompt\": true}";
    CHECK_EQ(ifl_executor_apply_chat_template(ex, NULL, ctx, &out, &n, err), 0);
    const char *chatml = "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n";
    CHECK(out && !strcmp(out, chatml) && n == (int64_t)strlen(chatml));
    ifl_free(out);
    CHECK_EQ(ifl_executor_apply_chat_template(
                 ex,
                 "{{ bos_token }}|{% for m in messages %}{{ m.role }}:{{ m.content }}{% endfor %}|"
                 "{{ eos_token }}|{{ add_generation_prompt }}",
                 "{\"messages\": [{\"role\": \"user\", \"content\": \"x\"}]}", &out, NULL, err),
             0);
    CHECK_MSG(out && !strcmp(out, "<s>|user:x|</s>|False"), "got %s", out ? out : "(null)");
    ifl_free(out);
    out = (char *)1;
    CHECK_EQ(ifl_executor_apply_chat_template(ex, NULL, "{\"messages\": ", &out, NULL, err),
             IFL_EINVAL);
    CHECK(out == NULL && strstr(err, "context: line 1"));
    CHECK_EQ(ifl_executor_apply_chat_template(ex, NULL, "[1]", &out, NULL, err), IFL_EINVAL);
    CHECK_EQ(ifl_executor_apply_chat_template(ex, NULL, "{\"messages\": 3}", &out, NULL, err),
             IFL_EINVAL);
    CHECK(strstr(err, "context.messages"));
    CHECK_EQ(ifl_executor_apply_chat_template(ex, "{% if %}", ctx, &out, NULL, err), IFL_EFORMAT);
    CHECK(strstr(err, "TemplateSyntaxError"));
    CHECK_EQ(ifl_executor_apply_chat_template(ex, "{{ raise_exception('no system role') }}", ctx,
                                              &out, NULL, err),
             IFL_EINVAL);
    CHECK(strstr(err, "no system role"));
    CHECK_EQ(ifl_executor_apply_chat_template(NULL, NULL, ctx, &out, NULL, err), IFL_EINVAL);
    CHECK_EQ(ifl_executor_apply_chat_template(ex, NULL, NULL, &out, NULL, err), IFL_EINVAL);
    ifl_free(NULL);
    ifl_executor_destroy(ex, 0);
}

int main(void)
{
    snprintf(model_path, sizeof model_path, "%s/models/stories260K.gguf", t_shared());
    T_RUN(test_greedy_matches_reference);
    T_RUN(test_streaming_equals_whole);
    T_RUN(test_return_sequences);
    T_RUN(test_batch_invariance);
    T_RUN(test_solo_steps);
    T_RUN(test_pool_wait_modes);
    T_RUN(test_prefix_caching);
    T_RUN(test_preemption_is_invisible);
    T_RUN(test_cancel_and_timeout);
    T_RUN(test_id_zero);
    T_RUN(test_bad_requests);
    T_RUN(test_full_context_and_meta);
    T_RUN(test_stops);
    T_RUN(test_sampling_controls);
    T_RUN(test_nothing_to_pick);
    T_RUN(test_logits_processors);
    T_RUN(test_beam_search);
    T_RUN(test_beam_invariance);
    T_RUN(test_beam_cancel);
    T_RUN(test_generation_and_context_logits);
    T_RUN(test_hidden_states);
    T_RUN(test_destroy_wakes_waiters);
    T_RUN(test_shutdown_then_destroy);
    T_RUN(test_stats_history);
    T_RUN(test_apply_chat_template);
    T_RUN(test_baseline_and_wait_idle);
    T_RUN(test_stress);
    T_RUN(test_null_executor);
    return t_done();
}
