/*
 * Early KV free for sliding-window models (issue 41): when every layer
 * slides (sliding_window_pattern 0), a sequence's blocks wholly behind
 * every window go back to the pool while it goes on; with a global layer
 * nothing is given back.
 *
 * The proof: a long greedy generation on a small gemma2 whose layers all
 * slide over 12 positions holds a bounded number of blocks (its peak does
 * not grow with the length), and its tokens and log-probs are bitwise those
 * of the same run with every block kept (IFL_KV_WINDOW_FREE=0), alone and
 * among other requests, two of which share its prompt (blocks shared
 * through the prefix cache stay with the others), and again after it, when
 * its prompt's blocks come back from the prefix cache, and with drafts
 * (many positions a step, rejected ones rolled back). The block manager's
 * part (ifl_kvc_drop_before: references, forks, resets, the prefix table)
 * is checked on its own. mkmodel runs through system(): $BUILD/tools/mkmodel.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/err.h"
#include "core/rng.h"
#include "inflight.h"
#include "runtime/kvcache.h"
#include "t.h"

static char g_dir[256], g_mk[512], g_vocab[512];

#define N_GEN 1200 /* generated tokens: 75 blocks of 16 */
#define N_PROMPT 40

static int make_model(const char *name, const char *args, char *path, size_t cap)
{
    char cmd[2048];
    snprintf(path, cap, "%s/%s.gguf", g_dir, name);
    snprintf(cmd, sizeof cmd, "'%s' -o '%s' --vocab '%s' %s >/dev/null 2>&1", g_mk, path, g_vocab,
             args);
    int rc = system(cmd);
    CHECK_MSG(rc == 0, "mkmodel failed (%d): %s", rc, cmd);
    return rc;
}

static ifl_executor *open_ex_sized(const char *path, int keep_all, int32_t n_ctx, int64_t kv_tokens)
{
    if (keep_all)
        setenv("IFL_KV_WINDOW_FREE", "0", 1);
    else
        unsetenv("IFL_KV_WINDOW_FREE");
    struct ifl_executor_config c;
    ifl_executor_config_default(&c);
    c.n_ctx = n_ctx;
    c.kv_cache_tokens = kv_tokens;
    c.n_threads = 2;
    c.kv_type = IFL_KV_F16;
    c.max_num_tokens = 64; /* prompts in chunks */
    ifl_executor *ex = NULL;
    char err[IFL_ERR_LEN] = "";
    int rc = ifl_executor_create(&ex, path, &c, err);
    unsetenv("IFL_KV_WINDOW_FREE");
    CHECK_MSG(rc == 0, "create %s: %s", path, err);
    return ex;
}

static ifl_executor *open_ex(const char *path, int keep_all)
{
    return open_ex_sized(path, keep_all, 2048, 8 * 2048);
}

struct out {
    int32_t tok[N_GEN];
    float lp[N_GEN];
    int32_t n;
    struct ifl_perf_metrics perf; /* the final response's, when asked */
};

static void request(struct ifl_request *r, const int32_t *ids, int32_t n, int32_t max_tokens)
{
    ifl_request_init(r);
    r->input_ids = ids;
    r->n_input = n;
    r->max_tokens = max_tokens;
    r->sampling.temperature = 0;
    r->sampling.ignore_eos = 1;
    r->output.return_log_probs = 1;
}

/* Awaits the requests, each one sequence, filling outs[i]; records the
 * largest kv_blocks_used seen between responses in *peak. */
static void collect(ifl_executor *ex, ifl_id *ids, int n, struct out *outs, int32_t *peak)
{
    int done = 0;
    for (int i = 0; i < n; i++)
        outs[i].n = 0;
    while (done < n) {
        struct ifl_response *r[8];
        int32_t got = 0;
        int rc = ifl_await(ex, ids, n, 60000, r, 8, &got);
        if (rc) {
            CHECK_MSG(0, "await: %s", ifl_strerror(rc));
            return;
        }
        struct ifl_iteration_stats st;
        if (peak && ifl_get_iteration_stats(ex, &st) == 0 && st.kv_blocks_used > *peak)
            *peak = st.kv_blocks_used;
        for (int32_t k = 0; k < got; k++) {
            int i = 0;
            while (i < n && ids[i] != r[k]->request_id)
                i++;
            CHECK(i < n && r[k]->status == 0);
            if (i < n && r[k]->n_results == 1) {
                const struct ifl_sequence_result *s = &r[k]->results[0];
                struct out *o = &outs[i];
                if (o->n + s->n_tokens <= N_GEN) {
                    memcpy(o->tok + o->n, s->tokens, sizeof(int32_t) * (size_t)s->n_tokens);
                    if (s->log_probs)
                        memcpy(o->lp + o->n, s->log_probs, sizeof(float) * (size_t)s->n_tokens);
                    o->n += s->n_tokens;
                }
            }
            if (i < n && r[k]->is_final)
                outs[i].perf = r[k]->perf;
            done += r[k]->is_final;
            ifl_response_free(r[k]);
        }
    }
}

static int same(const struct out *a, const struct out *b)
{
    return a->n == b->n && !memcmp(a->tok, b->tok, sizeof(int32_t) * (size_t)a->n) &&
           !memcmp(a->lp, b->lp, sizeof(float) * (size_t)a->n);
}

static int32_t g_prompt[N_PROMPT], g_other[N_PROMPT];

/* One long generation alone; returns its peak of blocks used. */
static int32_t run_alone(const char *path, int keep_all, struct out *o)
{
    ifl_executor *ex = open_ex(path, keep_all);
    if (!ex)
        return -1;
    struct ifl_request r;
    request(&r, g_prompt, N_PROMPT, N_GEN);
    ifl_id id;
    int32_t peak = 0;
    CHECK_EQ(ifl_enqueue(ex, &r, &id, NULL), 0);
    collect(ex, &id, 1, o, &peak);
    struct ifl_iteration_stats st;
    if (ifl_get_iteration_stats(ex, &st) == 0 && st.kv_blocks_peak > peak)
        peak = st.kv_blocks_peak;
    ifl_executor_destroy(ex, 0);
    return peak;
}

static void test_no_evict_books_the_window(const char *path, const struct out *kept);

static void test_all_sliding(void)
{
    char path[512];
    if (make_model("swa-all",
                   "--arch gemma2 --type q8_0 --n-embd 128 --n-layer 3 --n-head 4 "
                   "--n-head-kv 2 --n-ff 256 --n-swa 12 --swa-pattern 0 --ctx 2048 "
                   "--seed 8",
                   path, sizeof path))
        return;
    static struct out kept, freed, among[4], again;
    int32_t peak_kept = run_alone(path, 1, &kept);
    int32_t peak_freed = run_alone(path, 0, &freed);
    /* all 1240 positions: 78 blocks; behind the window the engine keeps at
     * most the 256-position alignment plus the window and the block being
     * written: (256 + 12) / 16 + 2 = 18 */
    fprintf(stderr, "  %d tokens, 12-position windows: peak blocks %d kept, %d with early free\n",
            N_PROMPT + N_GEN, peak_kept, peak_freed);
    CHECK_MSG(kept.n == N_GEN && freed.n == N_GEN, "generated %d and %d of %d", kept.n, freed.n,
              N_GEN);
    CHECK_MSG(peak_kept >= (N_PROMPT + N_GEN) / 16, "kept: peak %d blocks", peak_kept);
    CHECK_MSG(peak_freed > 0 && peak_freed <= 18, "early free: peak %d blocks (want <= 18)",
              peak_freed);
    CHECK_MSG(same(&kept, &freed), "early free changed the tokens or log-probs");

    /* among three others (two with its prompt, sharing its blocks through
     * the prefix cache, one shorter), then once more alone on the same
     * executor: its prompt's blocks come back from the prefix cache */
    ifl_executor *ex = open_ex(path, 0);
    if (!ex)
        return;
    struct ifl_request r[4];
    request(&r[0], g_prompt, N_PROMPT, N_GEN);
    request(&r[1], g_prompt, N_PROMPT, 300);
    request(&r[2], g_other, N_PROMPT, 700);
    request(&r[3], g_prompt, N_PROMPT / 2, 500);
    ifl_id ids[4];
    for (int i = 0; i < 4; i++)
        CHECK_EQ(ifl_enqueue(ex, &r[i], &ids[i], NULL), 0);
    collect(ex, ids, 4, among, NULL);
    CHECK_MSG(same(&among[0], &kept), "among others: differs from alone");
    CHECK_MSG(among[1].n == 300 && !memcmp(among[1].tok, kept.tok, sizeof(int32_t) * 300) &&
                  !memcmp(among[1].lp, kept.lp, sizeof(float) * 300),
              "the shorter twin differs from the long one's start");
    /* (the stats follow the step that ended them: wait for it) */
    struct ifl_iteration_stats st;
    for (int w = 0; w < 500; w++) {
        CHECK_EQ(ifl_get_iteration_stats(ex, &st), 0);
        if (st.kv_blocks_used == 0)
            break;
        usleep(10000);
    }
    CHECK_MSG(st.kv_blocks_used == 0, "%d blocks still used after every request ended",
              st.kv_blocks_used);
    int64_t reused0 = st.kv_blocks_reused;
    ifl_id id;
    CHECK_EQ(ifl_enqueue(ex, &r[0], &id, NULL), 0);
    collect(ex, &id, 1, &again, NULL);
    CHECK_EQ(ifl_get_iteration_stats(ex, &st), 0);
    CHECK_MSG(st.kv_blocks_reused > reused0, "the prompt's blocks were not found again");
    CHECK_MSG(same(&again, &kept), "again, from the prefix cache: differs");
    /* with drafts (the output itself, every 7th token wrong): steps move
     * many positions at once and roll rejected ones back */
    static int32_t drafts[N_GEN];
    for (int i = 0; i < N_GEN; i++)
        drafts[i] = i % 7 == 6 ? 3 + (kept.tok[i] + 1) % 509 : kept.tok[i];
    struct ifl_request rd = r[0];
    rd.speculative.draft_tokens = drafts;
    rd.speculative.n_draft_tokens = N_GEN;
    CHECK_EQ(ifl_enqueue(ex, &rd, &id, NULL), 0);
    collect(ex, &id, 1, &again, NULL);
    CHECK_MSG(same(&again, &kept), "with drafts: differs");
    CHECK_EQ(ifl_get_iteration_stats(ex, &st), 0);
    fprintf(stderr, "  with drafts: %lld run, %lld kept\n", (long long)st.draft_tokens,
            (long long)st.accepted_draft_tokens);
    CHECK(st.accepted_draft_tokens > 100 && st.draft_tokens > st.accepted_draft_tokens);
    ifl_executor_destroy(ex, 0);
    test_no_evict_books_the_window(path, &kept);
    unlink(path);
}

/* guaranteed_no_evict books a sliding sequence's window, not its length:
 * in a cache of 80 blocks, three requests of 1240 positions (78 blocks
 * each if kept whole) run together, never preempted, each with the tokens
 * and log-probs it has alone. With every block kept they take turns. */
static void test_no_evict_books_the_window(const char *path, const struct out *kept)
{
    for (int keep_all = 0; keep_all < 2; keep_all++) {
        ifl_executor *ex = open_ex_sized(path, keep_all, 1280, 1280);
        if (!ex)
            return;
        static struct out o[3];
        struct ifl_request r[3];
        ifl_id ids[3];
        for (int i = 0; i < 3; i++) {
            request(&r[i], g_prompt, N_PROMPT, N_GEN);
            r[i].output.return_perf_metrics = 1;
        }
        CHECK_EQ(ifl_enqueue_many(ex, r, 3, ids, NULL), 0);
        collect(ex, ids, 3, o, NULL);
        int64_t last_start = 0, first_end = INT64_MAX;
        for (int i = 0; i < 3; i++) {
            CHECK_MSG(same(&o[i], kept), "keep_all %d: request %d differs from alone", keep_all, i);
            CHECK_MSG(o[i].perf.preemptions == 0, "keep_all %d: request %d preempted %d times",
                      keep_all, i, o[i].perf.preemptions);
            if (o[i].perf.first_scheduled_us > last_start)
                last_start = o[i].perf.first_scheduled_us;
            if (o[i].perf.last_token_us < first_end)
                first_end = o[i].perf.last_token_us;
        }
        if (!keep_all)
            CHECK_MSG(last_start < first_end, "the three did not run together");
        else
            CHECK_MSG(last_start > first_end, "kept whole, the three cannot run together");
        ifl_executor_destroy(ex, 0);
    }
}

/* gemma3's pattern keeps a global layer: every block stays. */
static void test_global_layer_keeps_all(void)
{
    char path[512];
    if (make_model("swa-mixed",
                   "--arch gemma3 --type q8_0 --n-embd 128 --n-layer 6 --n-head 4 "
                   "--n-head-kv 2 --n-ff 256 --n-swa 12 --ctx 2048 --seed 9",
                   path, sizeof path))
        return;
    struct out *o = calloc(1, sizeof *o);
    int32_t peak = run_alone(path, 0, o);
    fprintf(stderr, "  gemma3 (a global layer): peak blocks %d\n", peak);
    CHECK_MSG(o->n == N_GEN && peak >= (N_PROMPT + N_GEN) / 16, "peak %d blocks", peak);
    free(o);
    unlink(path);
}

/* ---- the block manager ---- */

static void kv_copy(void *user, int32_t dst, int32_t src, int32_t n)
{
    (void)user, (void)dst, (void)src, (void)n;
}

static void test_kvc_drop_before(void)
{
    struct ifl_kvc *c;
    struct ifl_kvc_config cfg = {
        .n_blocks = 32, .block_size = 4, .enable_prefix_caching = 1, .copy = kv_copy};
    CHECK_EQ(ifl_kvc_create(&c, &cfg), 0);
    int32_t tok[40];
    for (int i = 0; i < 40; i++)
        tok[i] = 100 + i;
    struct ifl_kvc_seq a = {0}, b = {0}, f = {0};
    CHECK_EQ(ifl_kvc_seq_init(&a, 16), 0);
    CHECK_EQ(ifl_kvc_seq_init(&b, 16), 0);
    CHECK_EQ(ifl_kvc_seq_init(&f, 16), 0);
    CHECK_EQ(ifl_kvc_reserve(c, &a, 22), 0);
    ifl_kvc_commit(c, &a, tok, 22); /* 5 full blocks and 2 positions */
    /* b shares a's first two blocks through the prefix cache */
    CHECK_EQ(ifl_kvc_match_prefix(c, &b, tok, 9), 8);
    struct ifl_kvc_stats st;
    ifl_kvc_get_stats(c, &st);
    CHECK_EQ(st.n_used, 6);
    /* before position 13: blocks 0..2 (12 positions); 0 and 1 stay b's */
    CHECK_EQ(ifl_kvc_drop_before(c, &a, 13), 3);
    CHECK(a.blocks[0] == -1 && a.blocks[1] == -1 && a.blocks[2] == -1 && a.blocks[3] >= 0);
    CHECK(b.blocks[0] >= 0 && b.blocks[1] >= 0);
    ifl_kvc_get_stats(c, &st);
    CHECK_EQ(st.n_used, 5);   /* a's blocks 3..5 and b's two */
    CHECK_EQ(st.n_cached, 1); /* block 2 keeps its key: still right for that prefix */
    CHECK_EQ(ifl_kvc_drop_before(c, &a, 13), 0);  /* nothing new */
    CHECK_EQ(ifl_kvc_drop_before(c, &a, 400), 2); /* at most the written blocks: 3, 4 */
    CHECK(a.blocks[5] >= 0);
    /* a fork shares what is left; writing goes on as before */
    CHECK_EQ(ifl_kvc_fork(c, &a, &f), 0);
    CHECK(f.blocks[0] == -1 && f.blocks[4] == -1 && f.blocks[5] == a.blocks[5]);
    CHECK_EQ(ifl_kvc_reserve(c, &a, 30), 0);
    ifl_kvc_commit(c, &a, tok, 30);
    CHECK_EQ(ifl_kvc_reserve(c, &f, 26), 0); /* its own copy of the shared block 5 */
    CHECK(f.blocks[5] != a.blocks[5]);
    /* a new sequence finds the dropped prefix blocks in the cache */
    struct ifl_kvc_seq d = {0};
    CHECK_EQ(ifl_kvc_seq_init(&d, 16), 0);
    CHECK_EQ(ifl_kvc_match_prefix(c, &d, tok, 21), 20);
    ifl_kvc_seq_reset(c, &a);
    CHECK(a.n_blocks == 0 && a.n_dropped == 0);
    ifl_kvc_seq_release(c, &b);
    ifl_kvc_seq_release(c, &f);
    ifl_kvc_seq_release(c, &d);
    ifl_kvc_seq_release(c, &a);
    ifl_kvc_get_stats(c, &st);
    CHECK_EQ(st.n_used, 0);
    CHECK_EQ(st.n_free + st.n_cached, 32);
    ifl_kvc_free(c);
}

int main(void)
{
    const char *build = getenv("BUILD");
    snprintf(g_mk, sizeof g_mk, "%s/tools/mkmodel", build && *build ? build : "build");
    snprintf(g_vocab, sizeof g_vocab, "%s/models/stories260K.gguf", t_shared());
    snprintf(g_dir, sizeof g_dir, "/tmp/ifl_kvwin_XXXXXX");
    if (access(g_mk, X_OK) != 0 || !mkdtemp(g_dir)) {
        fprintf(stderr, "cannot run %s or make a temporary directory\n", g_mk);
        printf("0 passed, 1 failed\n");
        return 1;
    }
    struct ifl_rng rng;
    ifl_rng_seed(&rng, 41);
    g_prompt[0] = g_other[0] = 1;
    for (int i = 1; i < N_PROMPT; i++) {
        g_prompt[i] = 3 + (int32_t)(ifl_rng_next(&rng) % 509);
        g_other[i] = 3 + (int32_t)(ifl_rng_next(&rng) % 509);
    }
    T_RUN(test_kvc_drop_before);
    T_RUN(test_all_sliding);
    T_RUN(test_global_layer_keeps_all);
    rmdir(g_dir);
    return t_done();
}
