/*
 * The decoding-strategy seam (src/runtime/decoding.h) on the real
 * stories260K model, through the public API. A test strategy proposes, for
 * each step, the next tokens of a plain run's output as drafts, some of
 * them deliberately wrong, and takes its tokens with the engine's verifying
 * acceptor: every output must equal plain decoding's token for token and
 * log-prob for log-prob (greedy and seeded sampling, streamed, among plain
 * requests, under preemption), which holds only if the rejected drafts'
 * KV is rolled back and no draft leaks into the outputs; both kept and
 * rejected drafts must have happened, and no KV block may stay in use.
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "inflight.h"
#include "runtime/engine_internal.h"
#include "t.h"

static char model_path[600];
static const int32_t ONCE[] = {1, 403, 407, 261, 378}; /* "Once upon a time" with BOS */
/* llama.cpp's first 32 greedy ids for ONCE (../shared/models/ref/stories260K.json) */
static const int32_t GREEDY[] = {432, 383, 286, 261, 376, 298, 315, 421, 395, 317, 426,
                                 338, 401, 396, 267, 337, 410, 408, 419, 292, 411, 322,
                                 265, 282, 295, 433, 426, 385, 328, 432, 358, 394};

/* ---- the test strategy: a plain run's tokens as drafts ---- */

#define DRAFT_BASE 7000 /* client_id DRAFT_BASE + i: drafts from ref[i] */
#define MAX_REFS 8
#define MAX_LEN 128
#define DRAFT_K 4

static int32_t ref_tok[MAX_REFS][MAX_LEN], ref_n[MAX_REFS];
static atomic_long n_drafted, n_kept, n_dropped_calls;

static int32_t ref_of(const struct xreq *q)
{
    uint64_t c = q->r.client_id;
    return c >= DRAFT_BASE && c < DRAFT_BASE + MAX_REFS ? (int32_t)(c - DRAFT_BASE) : -1;
}

static int fixed_wants(const struct ifl_executor *ex, const struct xreq *q)
{
    (void)ex;
    return ref_of(q) >= 0;
}

/* Draft i is the plain run's generated token n_gen + i (what row i will
 * pick if all is well), except that every seventh position gets a wrong
 * token, so that drafts are kept and rejected in the same runs. */
static int32_t fixed_propose(struct ifl_executor *ex, struct eseq *s, int32_t *draft, int32_t max)
{
    int32_t i = ref_of(s->q), k = 0;
    for (; k < max && k < DRAFT_K && s->n_gen + k < ref_n[i]; k++) {
        int32_t g = s->n_gen + k;
        draft[k] = g % 7 == 5 ? (ref_tok[i][g] + 1) % ex->n_vocab : ref_tok[i][g];
    }
    atomic_fetch_add(&n_drafted, k);
    return k;
}

/* The steps a request of n tokens alone takes with these drafts, if the
 * kept drafts' K/V is kept: the prefill gives the first token, then each
 * step takes the drafts up to the first wrong one and one token more. */
static int64_t steps_with_drafts(int32_t n)
{
    int64_t steps = 1;
    for (int32_t g = 1; g < n; steps++) {
        int32_t k = n - g - 1 < DRAFT_K ? n - g - 1 : DRAFT_K, j = 0;
        while (j < k && (g + j) % 7 != 5)
            j++;
        g += j + 1;
    }
    return steps;
}

static void fixed_accept(struct ifl_executor *ex, struct eseq *s, const int32_t *rows, int32_t n)
{
    int32_t before = s->n_gen;
    ifl_decoding_accept_drafts(ex, s, rows, n);
    /* all but the last token taken were drafts that were kept */
    if (s->n_gen - before > 1)
        atomic_fetch_add(&n_kept, s->n_gen - before - 1);
}

static void fixed_drop(struct ifl_executor *ex, struct eseq *s)
{
    (void)ex;
    (void)s;
    atomic_fetch_add(&n_dropped_calls, 1);
}

static const struct ifl_decoding fixed_drafts = {
    .name = "test-fixed-drafts",
    .wants = fixed_wants,
    .propose = fixed_propose,
    .accept = fixed_accept,
    .drop = fixed_drop,
};

/* ---- the probe: what the adaptive policy lets a strategy draft ---- */

#define PROBE_RIGHT 8000 /* client_id PROBE_RIGHT + i: drafts from ref_tok[i], all right */
#define PROBE_WRONG 8100 /* client_id PROBE_WRONG + i: drafts from ref_tok[i], all wrong */
#define PROBE_ONE 8200   /* client_id PROBE_ONE + i: the first draft right, the rest wrong */
#define MAX_CALLS 1024

/* Each propose() call: the max it was given, the sequences decoding and
 * whether a sequence had prompt rows still to run (both seen from the
 * engine's slots when the call came). */
static struct probe_call {
    int32_t max, n_decoding, prefill;
} calls[MAX_CALLS];
static int32_t n_calls;

static int probe_wants(const struct ifl_executor *ex, const struct xreq *q)
{
    (void)ex;
    return q->r.client_id >= PROBE_RIGHT && q->r.client_id < PROBE_ONE + MAX_REFS;
}

static int32_t probe_propose(struct ifl_executor *ex, struct eseq *s, int32_t *draft, int32_t max)
{
    const struct engine *e = ex->eng;
    uint64_t c = s->q->r.client_id;
    int one = c >= PROBE_ONE, wrong = !one && c >= PROBE_WRONG;
    int32_t i = (int32_t)(c - (one ? PROBE_ONE : wrong ? PROBE_WRONG : PROBE_RIGHT)), k = 0;
    if (n_calls < MAX_CALLS) {
        struct probe_call *pc = &calls[n_calls++];
        pc->max = max;
        pc->n_decoding = pc->prefill = 0;
        for (int32_t j = 0; j < e->n_slots; j++) {
            const struct eseq *o = &e->seqs[j];
            if (!o->q || !o->started || o->finish)
                continue;
            pc->n_decoding += o->n_tokens - o->kv.n_pos == 1;
            pc->prefill |= o->n_tokens - o->kv.n_pos > 1;
        }
    }
    for (; k < max && s->n_gen + k < ref_n[i]; k++) {
        int32_t t = ref_tok[i][s->n_gen + k];
        draft[k] = wrong || (one && k > 0) ? (t + 1) % ex->n_vocab : t;
    }
    return k;
}

static const struct ifl_decoding probe_drafts = {
    .name = "test-probe",
    .wants = probe_wants,
    .propose = probe_propose,
    .accept = ifl_decoding_accept_drafts,
};

/* ---- the KV after each rejection: a strategy that looks at it ---- */

/* client_id KV_RECORD: proposes nothing, and at each step records the
 * keys and values of every position its sequence has in the cache (plain
 * decoding's KV); KV_CHECK: at each step (after the previous step's
 * drafts were settled) checks that the sequence holds exactly its tokens'
 * positions, in as many blocks as they need, with the keys and values
 * plain decoding had there, byte for byte; then proposes the plain run's
 * next tokens with every third one wrong. */
#define KV_RECORD 7100
#define KV_CHECK 7101
static unsigned char *kv_ref; /* [MAX_LEN + 8][layer][k_row + v_row] */
static int32_t kv_ref_pos;    /* positions recorded */
static atomic_long kv_checked, kv_bad;

static size_t kv_pos_bytes(const struct ifl_kv_store *kv)
{
    return (size_t)kv->n_layer * (kv->k_row + kv->v_row);
}

static void kv_read(const struct ifl_kv_store *kv, const struct eseq *s, int32_t p,
                    unsigned char *out)
{
    int32_t b = s->kv.blocks[p / kv->block_size], slot = p % kv->block_size;
    for (int32_t l = 0; l < kv->n_layer; l++)
        for (int pc = 0; pc < kv->n_piece; pc++) { /* a block holds its positions head by head */
            memcpy(out, ifl_kv_at(kv, kv->k[l], kv->k_piece, b, slot, pc), kv->k_piece);
            out += kv->k_piece;
            memcpy(out, ifl_kv_at(kv, kv->v[l], kv->v_piece, b, slot, pc), kv->v_piece);
            out += kv->v_piece;
        }
}

static int kv_wants(const struct ifl_executor *ex, const struct xreq *q)
{
    (void)ex;
    return q->r.client_id == KV_RECORD || q->r.client_id == KV_CHECK;
}

static int32_t kv_propose(struct ifl_executor *ex, struct eseq *s, int32_t *draft, int32_t max)
{
    const struct ifl_kv_store *kv = ex->eng->store;
    size_t pb = kv_pos_bytes(kv);
    int32_t n_pos = s->kv.n_pos, bs = kv->block_size;
    if (s->q->r.client_id == KV_RECORD) {
        for (int32_t p = 0; p < n_pos && p < MAX_LEN + 8; p++)
            kv_read(kv, s, p, kv_ref + (size_t)p * pb);
        kv_ref_pos = n_pos;
        return 0;
    }
    unsigned char *buf = malloc(pb);
    /* (the step being built has already reserved the pending token's
     * position: its block, and no other, may follow the committed ones) */
    int bad = !buf || n_pos != s->n_tokens - 1 || s->kv.n_blocks != (n_pos + bs) / bs ||
              n_pos > kv_ref_pos;
    for (int32_t p = 0; !bad && p < n_pos; p++) {
        kv_read(kv, s, p, buf);
        bad = memcmp(buf, kv_ref + (size_t)p * pb, pb) != 0;
    }
    free(buf);
    atomic_fetch_add(&kv_checked, 1);
    if (bad)
        atomic_fetch_add(&kv_bad, 1);
    int32_t k = 0;
    for (; k < max && k < DRAFT_K && s->n_gen + k < ref_n[0]; k++) {
        int32_t g = s->n_gen + k;
        draft[k] = g % 3 == 2 ? (ref_tok[0][g] + 1) % ex->n_vocab : ref_tok[0][g];
    }
    return k;
}

static const struct ifl_decoding kv_drafts = {
    .name = "test-kv-check",
    .wants = kv_wants,
    .propose = kv_propose,
    .accept = ifl_decoding_accept_drafts,
};

/* ---- helpers ---- */

/* An executor with the speculative config's defaults but adaptive and
 * n_max, and max_num_tokens rows a step (0: the default). */
static ifl_executor *open_ex_spec(int32_t max_batch, int64_t kv_tokens, int policy, int adaptive,
                                  int32_t n_max, int32_t max_num_tokens)
{
    struct ifl_executor_config c;
    ifl_executor_config_default(&c);
    c.speculative.adaptive = adaptive;
    c.speculative.n_max = n_max;
    if (max_num_tokens)
        c.max_num_tokens = max_num_tokens;
    c.max_batch_size = max_batch;
    c.kv_cache_tokens = kv_tokens;
    c.sched_policy = policy;
    c.n_threads = 2;
    c.kv_type = IFL_KV_F32;
    c.n_ctx = kv_tokens && kv_tokens < 512 ? (int32_t)kv_tokens : 512;
    ifl_executor *ex = NULL;
    char err[512] = "";
    int rc = ifl_executor_create(&ex, model_path, &c, err);
    CHECK_MSG(rc == 0, "create: %s", err);
    return ex;
}

static ifl_executor *open_ex(int32_t max_batch, int64_t kv_tokens, int policy)
{
    return open_ex_spec(max_batch, kv_tokens, policy, 1, 16, 0);
}

static void req(struct ifl_request *r, const int32_t *ids, int32_t n, int32_t max_tokens)
{
    ifl_request_init(r);
    r->input_ids = ids;
    r->n_input = n;
    r->max_tokens = max_tokens;
    r->sampling.temperature = 0;
    r->sampling.ignore_eos = 1;
    r->output.return_log_probs = 1;
}

struct out {
    int32_t tok[MAX_LEN], n;
    float lp[MAX_LEN];
    float *glog; /* [n][n_vocab] with return_generation_logits */
    int32_t preemptions;
    int64_t steps; /* engine iterations while it ran (alone on its executor) */
};

/* Awaits every response of request id, concatenating what they carry. */
static void collect(ifl_executor *ex, ifl_id id, int32_t n_vocab, struct out *o)
{
    memset(o, 0, sizeof(*o));
    for (int final = 0; !final;) {
        struct ifl_response *r = NULL;
        int32_t got = 0;
        int rc = ifl_await(ex, &id, 1, 30000, &r, 1, &got);
        if (rc) {
            CHECK_MSG(0, "await: %s", ifl_strerror(rc));
            return;
        }
        CHECK_EQ(r->status, 0);
        struct ifl_sequence_result *s = &r->results[0];
        if (o->n + s->n_tokens <= MAX_LEN) {
            memcpy(o->tok + o->n, s->tokens, sizeof(int32_t) * (size_t)s->n_tokens);
            if (s->log_probs)
                memcpy(o->lp + o->n, s->log_probs, sizeof(float) * (size_t)s->n_tokens);
            if (s->generation_logits) {
                float *g = realloc(o->glog,
                                   sizeof(float) * (size_t)(o->n + s->n_tokens) * (size_t)n_vocab);
                if (g) {
                    memcpy(g + (size_t)o->n * (size_t)n_vocab, s->generation_logits,
                           sizeof(float) * (size_t)s->n_tokens * (size_t)n_vocab);
                    o->glog = g;
                }
            }
            o->n += s->n_tokens;
        }
        o->preemptions = r->perf.preemptions;
        final = r->is_final;
        ifl_response_free(r);
    }
}

static int32_t run_one(ifl_executor *ex, const struct ifl_request *r, struct out *o)
{
    ifl_id id = 0;
    char err[512] = "";
    struct ifl_iteration_stats st0, st1;
    CHECK_EQ(ifl_get_iteration_stats(ex, &st0), 0);
    int rc = ifl_enqueue(ex, r, &id, err);
    CHECK_MSG(rc == 0, "enqueue: %s", err);
    if (rc)
        return rc;
    collect(ex, id, 512, o);
    /* the strategy counts after the final response is out: let the step end */
    CHECK_EQ(ifl_executor_wait_idle(ex, 30000), 0);
    CHECK_EQ(ifl_get_iteration_stats(ex, &st1), 0);
    o->steps = st1.iteration - st0.iteration;
    return 0;
}

static void check_same(const struct out *a, const struct out *b, int32_t n_vocab)
{
    CHECK_EQ(a->n, b->n);
    int32_t n = a->n < b->n ? a->n : b->n;
    CHECK_MSG(!memcmp(a->tok, b->tok, sizeof(int32_t) * (size_t)n), "tokens differ");
    CHECK_MSG(!memcmp(a->lp, b->lp, sizeof(float) * (size_t)n), "log-probs differ");
    if (a->glog || b->glog) {
        CHECK(a->glog && b->glog);
        if (a->glog && b->glog)
            CHECK_MSG(!memcmp(a->glog, b->glog, sizeof(float) * (size_t)n * (size_t)n_vocab),
                      "generation logits differ");
    }
}

static void check_no_blocks_used(ifl_executor *ex)
{
    CHECK_EQ(ifl_executor_wait_idle(ex, 30000), 0);
    struct ifl_iteration_stats st;
    CHECK_EQ(ifl_get_iteration_stats(ex, &st), 0);
    CHECK_EQ(st.kv_blocks_used, 0);
}

/* ---- tests ---- */

/* Plain requests still decode plain with a strategy registered that does
 * not want them: the reference ids, one token per step. */
static void test_plain_unchanged(void)
{
    ifl_executor *ex = open_ex(8, 0, IFL_SCHED_GUARANTEED_NO_EVICT);
    if (!ex)
        return;
    struct ifl_request r;
    req(&r, ONCE, 5, 32);
    struct out o;
    long drafted = atomic_load(&n_drafted);
    if (!run_one(ex, &r, &o)) {
        CHECK_EQ(o.n, 32);
        CHECK(!memcmp(o.tok, GREEDY, sizeof GREEDY));
    }
    CHECK_EQ(atomic_load(&n_drafted), drafted);
    ifl_executor_destroy(ex, 0);
}

/* One request, greedy then seeded sampling, streamed and whole, with its
 * generation logits: equal to the plain run bitwise; drafts both kept and
 * rejected. */
static void test_drafts_equal_plain(void)
{
    /* not adaptive: the step count below assumes DRAFT_K drafts each step */
    ifl_executor *ex = open_ex_spec(8, 0, IFL_SCHED_GUARANTEED_NO_EVICT, 0, 16, 0);
    if (!ex)
        return;
    for (int sampled = 0; sampled < 2; sampled++)
        for (int streaming = 0; streaming < 2; streaming++) {
            struct ifl_request r;
            req(&r, ONCE, 5, 100);
            r.streaming = streaming;
            r.output.return_generation_logits = 1;
            if (sampled) {
                r.sampling.temperature = 0.8f;
                r.sampling.top_p = 0.9f;
                r.sampling.seed = 11;
            }
            struct out plain, spec;
            if (run_one(ex, &r, &plain))
                break;
            memcpy(ref_tok[0], plain.tok, sizeof(int32_t) * (size_t)plain.n);
            ref_n[0] = plain.n;
            long d0 = atomic_load(&n_drafted), k0 = atomic_load(&n_kept);
            r.client_id = DRAFT_BASE;
            if (!run_one(ex, &r, &spec))
                check_same(&spec, &plain, 512);
            long drafted = atomic_load(&n_drafted) - d0, kept = atomic_load(&n_kept) - k0;
            printf("  sampled %d streaming %d: %ld of %ld drafts kept; %lld steps, plain %lld\n",
                   sampled, streaming, kept, drafted, (long long)spec.steps,
                   (long long)plain.steps);
            CHECK_MSG(kept > 0 && kept < drafted,
                      "sampled %d streaming %d: %ld of %ld drafts kept (want some, not all)",
                      sampled, streaming, kept, drafted);
            /* the kept drafts' K/V is kept too, not computed again */
            CHECK_EQ(plain.steps, 100);
            CHECK_EQ(spec.steps, steps_with_drafts(100));
            free(plain.glog);
            free(spec.glog);
        }
    check_no_blocks_used(ex);
    ifl_executor_destroy(ex, 0);
}

/* Drafting requests among plain ones, sharing steps and the prefix cache,
 * in a pool so small that the low-priority drafting request is preempted
 * and recomputed: every output as when it ran alone, no block left used. */
static void test_drafts_in_a_crowd_and_preempted(void)
{
    enum { N = 8 };
    int32_t prompts[N][4];
    struct ifl_request r[N];
    struct out alone[N];
    ifl_executor *ex = open_ex(N, 0, IFL_SCHED_MAX_UTILIZATION);
    if (!ex)
        return;
    for (int k = 0; k < N; k++) {
        prompts[k][0] = 1, prompts[k][1] = 403 + k, prompts[k][2] = 261, prompts[k][3] = 300 + k;
        req(&r[k], prompts[k], 4, 90);
        r[k].priority = k == 0 ? 0.1f : 0.9f;
        if (k % 2) { /* half of them sampled */
            r[k].sampling.temperature = 0.7f;
            r[k].sampling.seed = (uint64_t)k;
        }
        r[k].output.return_perf_metrics = 1;
        if (run_one(ex, &r[k], &alone[k])) {
            ifl_executor_destroy(ex, 0);
            return;
        }
        memcpy(ref_tok[k], alone[k].tok, sizeof(int32_t) * (size_t)alone[k].n);
        ref_n[k] = alone[k].n;
    }
    ifl_executor_destroy(ex, 0);
    /* the first and every third draft; a pool of 256 positions holds about
     * three of these requests */
    for (int k = 0; k < N; k++)
        if (k % 3 == 0)
            r[k].client_id = DRAFT_BASE + (uint64_t)k;
    long k0 = atomic_load(&n_kept), drop0 = atomic_load(&n_dropped_calls);
    ex = open_ex(N, 256, IFL_SCHED_MAX_UTILIZATION);
    if (!ex)
        return;
    ifl_id ids[N];
    char err[512] = "";
    /* queued together: admitted in order, the drafting request first,
     * and preempted as the others grow (it has the lowest priority).
     * Queued apart, a loaded machine could hold this thread back until
     * it had finished alone. */
    CHECK_EQ(ifl_enqueue_many(ex, r, N, ids, err), 0);
    int32_t preempted = 0;
    for (int k = 0; k < N; k++) {
        struct out o;
        collect(ex, ids[k], 512, &o);
        check_same(&o, &alone[k], 512);
        if (k == 0)
            preempted = o.preemptions;
    }
    CHECK_EQ(ifl_executor_wait_idle(ex, 30000), 0);
    CHECK_MSG(preempted >= 1, "the drafting request was never preempted (%d)", preempted);
    CHECK(atomic_load(&n_kept) > k0);
    CHECK(atomic_load(&n_dropped_calls) > drop0); /* finishes and preemptions */
    check_no_blocks_used(ex);
    ifl_executor_destroy(ex, 0);
}

/* Drafts that all fail: the adaptive draft length starts at the 7 drafts
 * that cost little (not at n_max: 15 at n_max 16, with the step's rows),
 * stays after one miss and halves from the length that ran after the
 * second (7, 7, 3: not from the cap, which ran 8 three times at n_max 8),
 * then drafting pauses; the output is plain decoding's. */
static void test_adaptive_backs_off_from_what_ran(void)
{
    for (int32_t n_max = 8; n_max <= 16; n_max += 8) {
        ifl_executor *ex = open_ex_spec(4, 0, IFL_SCHED_GUARANTEED_NO_EVICT, 1, n_max, 0);
        if (!ex)
            return;
        struct ifl_request r;
        req(&r, ONCE, 5, 32);
        memcpy(ref_tok[0], GREEDY, sizeof GREEDY);
        ref_n[0] = 32;
        r.client_id = PROBE_WRONG;
        n_calls = 0;
        struct out o;
        if (!run_one(ex, &r, &o))
            CHECK(o.n == 32 && !memcmp(o.tok, GREEDY, sizeof GREEDY));
        CHECK(n_calls >= 4);
        if (n_calls >= 4) {
            CHECK_MSG(calls[0].max == 7 && calls[1].max == 7 && calls[2].max == 3,
                      "n_max %d: draft lengths %d, %d, %d (want 7, 7, 3)", n_max, calls[0].max,
                      calls[1].max, calls[2].max);
            CHECK_EQ(calls[3].max, 1);
        }
        /* 7 + 7 + 3, then ones after the first pause of 8 steps */
        int32_t drafted = 0;
        for (int32_t i = 0; i < n_calls; i++)
            drafted += calls[i].max;
        CHECK_MSG(drafted <= 7 + 7 + 3 + 3 + 3, "n_max %d: %d drafts run for 32 tokens", n_max,
                  drafted);
        ifl_executor_destroy(ex, 0);
    }
}

/* Drafts of which only the first is kept: the draft length stays at the
 * 7 drafts that cost little (the old rule cut it to what was kept plus one
 * or half: 8, 4, 2, 2, ... at n_max 8); the output is plain decoding's. */
static void test_adaptive_keeps_cheap_drafts(void)
{
    ifl_executor *ex = open_ex_spec(4, 0, IFL_SCHED_GUARANTEED_NO_EVICT, 1, 8, 0);
    if (!ex)
        return;
    struct ifl_request r;
    req(&r, ONCE, 5, 32);
    memcpy(ref_tok[0], GREEDY, sizeof GREEDY);
    ref_n[0] = 32;
    r.client_id = PROBE_ONE;
    n_calls = 0;
    struct out o;
    if (!run_one(ex, &r, &o))
        CHECK(o.n == 32 && !memcmp(o.tok, GREEDY, sizeof GREEDY));
    /* two tokens a step: 15 steps after the first token, the last few
     * held by max_tokens */
    CHECK(n_calls >= 8);
    if (n_calls >= 8)
        for (int32_t i = 0; i < 8; i++)
            CHECK_MSG(calls[i].max == 7, "call %d: %d drafts (want 7)", i, calls[i].max);
    ifl_executor_destroy(ex, 0);
}

/* Four sequences decoding together share the step's draft rows evenly
 * (16 rows in all: 3 drafts each, where 8 each made 36 rows), and no
 * sequence drafts while another's prompt is in the step (a prefill chunk
 * makes the step compute-bound); outputs stay plain decoding's. */
static void test_adaptive_step_rows(void)
{
    enum { N = 4 };
    int32_t prompts[N][4];
    struct ifl_request r[N];
    struct out alone[N];
    ifl_executor *ex = open_ex_spec(N + 1, 0, IFL_SCHED_GUARANTEED_NO_EVICT, 1, 8, 64);
    if (!ex)
        return;
    for (int k = 0; k < N; k++) {
        prompts[k][0] = 1, prompts[k][1] = 403 + k, prompts[k][2] = 261, prompts[k][3] = 300 + k;
        req(&r[k], prompts[k], 4, 60);
        if (run_one(ex, &r[k], &alone[k])) {
            ifl_executor_destroy(ex, 0);
            return;
        }
        memcpy(ref_tok[k], alone[k].tok, sizeof(int32_t) * (size_t)alone[k].n);
        ref_n[k] = alone[k].n;
        r[k].client_id = PROBE_RIGHT + (uint64_t)k;
    }
    n_calls = 0;
    ifl_id ids[N];
    char err[512] = "";
    /* queued together: admitted in order, the drafting request first,
     * and preempted as the others grow (it has the lowest priority).
     * Queued apart, a loaded machine could hold this thread back until
     * it had finished alone. */
    CHECK_EQ(ifl_enqueue_many(ex, r, N, ids, err), 0);
    for (int k = 0; k < N; k++) {
        struct out o;
        collect(ex, ids[k], 512, &o);
        check_same(&o, &alone[k], 512);
    }
    CHECK_EQ(ifl_executor_wait_idle(ex, 30000), 0);
    int32_t four = 0;
    for (int32_t i = 0; i < n_calls; i++)
        if (calls[i].n_decoding == N) {
            four++;
            CHECK_MSG(calls[i].max <= 3, "call %d: max %d with 4 sequences decoding", i,
                      calls[i].max);
        }
    CHECK_MSG(four > 0, "no step had 4 sequences drafting");
    /* one drafting request beside a 300-token prompt that takes five
     * steps of 64 rows: no drafts while that prompt runs */
    static int32_t longp[300];
    longp[0] = 1;
    for (int i = 1; i < 300; i++)
        longp[i] = 3 + (i * 37) % 500;
    struct ifl_request two[2];
    two[0] = r[0];
    req(&two[1], longp, 300, 4);
    n_calls = 0;
    CHECK_EQ(ifl_enqueue_many(ex, two, 2, ids, err), 0);
    for (int k = 0; k < 2; k++) {
        struct out o;
        collect(ex, ids[k], 512, &o);
        if (k == 0)
            check_same(&o, &alone[0], 512);
    }
    CHECK_EQ(ifl_executor_wait_idle(ex, 30000), 0);
    int32_t beside = 0;
    for (int32_t i = 0; i < n_calls; i++)
        beside += calls[i].prefill;
    CHECK_MSG(beside == 0, "%d of %d proposals beside a prefill", beside, n_calls);
    CHECK(n_calls > 0);
    check_no_blocks_used(ex);
    ifl_executor_destroy(ex, 0);
}

/* The registry: a strategy is chosen only by executors created after it
 * was registered, and no longer after it was removed. */

/* After every step of a request whose drafts are kept and rejected in
 * turn, its KV is what plain decoding's was: its block table holds its
 * committed positions exactly (rejected positions truncated), and every
 * position's keys and values equal plain decoding's byte for byte. */
static void test_kv_after_rejections(void)
{
    ifl_executor *ex = open_ex_spec(4, 0, IFL_SCHED_GUARANTEED_NO_EVICT, 0, 16, 0);
    if (!ex)
        return;
    const struct ifl_kv_store *kv = ex->eng->store;
    kv_ref = calloc((size_t)(MAX_LEN + 8), kv_pos_bytes(kv));
    CHECK(kv_ref != NULL);
    if (!kv_ref)
        goto out;
    for (int sampled = 0; sampled < 2; sampled++) {
        struct ifl_request r;
        req(&r, ONCE, 5, 100);
        if (sampled) {
            r.sampling.temperature = 0.8f;
            r.sampling.top_p = 0.9f;
            r.sampling.seed = 5;
        }
        struct out plain, spec;
        r.client_id = KV_RECORD;
        if (run_one(ex, &r, &plain))
            break;
        memcpy(ref_tok[0], plain.tok, sizeof(int32_t) * (size_t)plain.n);
        ref_n[0] = plain.n;
        /* drafts are asked for while a draft and the bonus still fit:
         * the last time with 98 tokens generated, 102 positions cached */
        CHECK_EQ(kv_ref_pos, 5 + 98 - 1);
        long c0 = atomic_load(&kv_checked), b0 = atomic_load(&kv_bad);
        r.client_id = KV_CHECK;
        if (!run_one(ex, &r, &spec))
            check_same(&spec, &plain, 512);
        long checked = atomic_load(&kv_checked) - c0, bad = atomic_load(&kv_bad) - b0;
        CHECK_MSG(checked > 20 && bad == 0, "sampled %d: %ld steps checked, %ld wrong", sampled,
                  checked, bad);
        free(plain.glog);
        free(spec.glog);
    }
    check_no_blocks_used(ex);
out:
    free(kv_ref);
    kv_ref = NULL;
    ifl_executor_destroy(ex, 0);
}

static void test_registry(void)
{
    ifl_decoding_unregister(&fixed_drafts);
    ifl_executor *ex = open_ex(4, 0, IFL_SCHED_GUARANTEED_NO_EVICT);
    CHECK_EQ(ifl_decoding_register(&fixed_drafts), 0);
    if (!ex)
        return;
    struct ifl_request r;
    req(&r, ONCE, 5, 32);
    memcpy(ref_tok[0], GREEDY, sizeof GREEDY);
    ref_n[0] = 32;
    r.client_id = DRAFT_BASE;
    long d0 = atomic_load(&n_drafted);
    struct out o;
    if (!run_one(ex, &r, &o))
        CHECK(!memcmp(o.tok, GREEDY, sizeof GREEDY));
    CHECK_EQ(atomic_load(&n_drafted), d0); /* decoded plain */
    ifl_executor_destroy(ex, 0);
}

int main(void)
{
    snprintf(model_path, sizeof model_path, "%s/models/stories260K.gguf", t_shared());
    CHECK_EQ(ifl_decoding_register(&fixed_drafts), 0);
    CHECK_EQ(ifl_decoding_register(&probe_drafts), 0);
    CHECK_EQ(ifl_decoding_register(&kv_drafts), 0);
    T_RUN(test_plain_unchanged);
    T_RUN(test_drafts_equal_plain);
    T_RUN(test_drafts_in_a_crowd_and_preempted);
    T_RUN(test_adaptive_backs_off_from_what_ran);
    T_RUN(test_adaptive_keeps_cheap_drafts);
    T_RUN(test_adaptive_step_rows);
    T_RUN(test_kv_after_rejections);
    T_RUN(test_registry);
    ifl_decoding_unregister(&kv_drafts);
    ifl_decoding_unregister(&probe_drafts);
    ifl_decoding_unregister(&fixed_drafts);
    return t_done();
}
