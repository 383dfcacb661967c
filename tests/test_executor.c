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
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/rng.h"
#include "inflight.h"
#include "t.h"

static char model_path[600];
static const int32_t ONCE[] = {1, 403, 407, 261, 378}; /* "Once upon a time" with BOS */
/* llama.cpp's 64 greedy ids for ONCE (../shared/models/ref/stories260K.json) */
static const int32_t GREEDY[] = {432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426, 338, 401,
                                 396, 267, 337, 410, 408, 419, 292, 411, 322, 265, 282, 295, 433,
                                 426, 385, 328, 432, 358, 394, 261, 370, 432, 352, 266, 268, 388,
                                 426, 338, 391, 266, 267, 337, 335, 312, 432, 398, 312, 286, 267,
                                 414, 270, 333, 415, 426, 13, 438, 310, 439, 419, 357, 336};

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

/* Awaits every response of one request; concatenates tokens of sequence
 * `index` into out. Returns the finish reason of that sequence. */
static int collect(ifl_executor *ex, ifl_id id, int32_t index, int32_t *out, int32_t *n,
                   float *lps, char *text, size_t text_cap)
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
                memcpy(out + *n, s->tokens, sizeof(int32_t) * (size_t)s->n_tokens);
                if (lps && s->log_probs)
                    memcpy(lps + *n, s->log_probs, sizeof(float) * (size_t)s->n_tokens);
                *n += s->n_tokens;
                if (text && tl + (size_t)s->n_text < text_cap) {
                    memcpy(text + tl, s->text, (size_t)s->n_text);
                    tl += (size_t)s->n_text;
                    text[tl] = 0;
                }
                if (r[i]->is_sequence_final)
                    finish = s->finish_reason;
            }
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
    CHECK(memcmp(toks[0], toks[1], sizeof(int32_t) * 20) || memcmp(toks[1], toks[2], sizeof(int32_t) * 20));
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
    ifl_id id;
    int32_t ref[128], nref;
    CHECK_EQ(ifl_enqueue(ex, &r, &id, NULL), 0);
    collect(ex, id, 0, ref, &nref, NULL, NULL, 0);
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
    collect(ex, id, 0, out, &n, NULL, NULL, 0);
    CHECK_EQ(n, nref);
    CHECK(!memcmp(out, ref, sizeof(int32_t) * (size_t)n));
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
    ifl_executor *ex = open_ex(4, 0, IFL_SCHED_GUARANTEED_NO_EVICT, 2);
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
}

/* 8 client threads enqueue, await and cancel requests of random shapes:
 * every request gets exactly one final response. */
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
    collect(ex, id, 0, out, &n, NULL, NULL, 0);
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

int main(void)
{
    snprintf(model_path, sizeof model_path, "%s/models/stories260K.gguf", t_shared());
    T_RUN(test_greedy_matches_reference);
    T_RUN(test_streaming_equals_whole);
    T_RUN(test_return_sequences);
    T_RUN(test_batch_invariance);
    T_RUN(test_prefix_caching);
    T_RUN(test_preemption_is_invisible);
    T_RUN(test_cancel_and_timeout);
    T_RUN(test_bad_requests);
    T_RUN(test_stops);
    T_RUN(test_sampling_controls);
    T_RUN(test_logits_processors);
    T_RUN(test_destroy_wakes_waiters);
    T_RUN(test_stress);
    return t_done();
}
