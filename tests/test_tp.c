/*
 * Tensor parallelism in the forward pass (src/model/shard.c,
 * src/model/forward_tp.c).
 *
 * Run alone (as `make test` runs every test binary): what a process can
 * check by itself: a split that the model's KV heads or FFN blocks do not
 * allow is refused with a sentence naming the numbers; a shard is only run
 * with a communicator of its job; a split over one rank is the whole model.
 * tests/test_tp.sh runs it under mpirun:
 *
 *   test_tp have-mpi          prints 1 if the build has MPI, else 0
 *   test_tp logits KV M...    every rank loads its shard of each model M and
 *                             runs a 20-token prompt in one step, then 8
 *                             steps of one token, with the KV cache in type
 *                             KV (f32, f16); rank 0 also runs the whole model
 *                             alone and compares every row's logits: the
 *                             largest difference is printed and must be
 *                             under 1e-4 (f32 cache; 1e-3 with f16, whose
 *                             rounding of K and V can turn on a last bit)
 *
 * Under mpirun each rank ends with "rank R: N passed, N failed".
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "core/err.h"
#include "core/rng.h"
#include "dist/comm.h"
#include "kernels/kernels.h"
#include "model/forward.h"
#include "model/kv_store.h"
#include "model/model.h"
#include "t.h"

#define MODELS "../shared/models/"
#define N_PROMPT 20
#define N_DECODE 8
#define N_TOK (N_PROMPT + N_DECODE)
#define N_GEN 12

/* ---- one process ------------------------------------------------------- */

static void test_refusals(void)
{
    char err[IFL_ERR_LEN] = "";
    struct ifl_model *m = NULL;
    /* stories260K: 4 KV heads; 3 ranks cannot share them */
    struct ifl_model_load_opts o = {.tp_rank = 0, .tp_size = 3};
    CHECK_EQ(ifl_model_load_with(&m, MODELS "stories260K.gguf", &o, err), IFL_EUNSUPPORTED);
    CHECK(m == NULL);
    CHECK_MSG(strstr(err, "3 ranks") && strstr(err, "4 KV heads"), "message: %s", err);
    /* the reference models: 2 KV heads */
    o.tp_size = 4;
    CHECK_EQ(ifl_model_load_with(&m, MODELS "ref/llama-q8_0.gguf", &o, err), IFL_EUNSUPPORTED);
    CHECK_MSG(strstr(err, "4 ranks") && strstr(err, "2 KV heads"), "message: %s", err);
    /* a rank outside the job */
    o.tp_rank = 2;
    o.tp_size = 2;
    CHECK_EQ(ifl_model_load_with(&m, MODELS "stories260K.gguf", &o, err), IFL_EINVAL);
}

/* ffn_down's blocks must go round: a Q4_K model's n_ff of 768 is 3 blocks
 * of 256, split 1 + 2 over two ranks; over 4 (on a model with 4 KV heads)
 * it would need more blocks than there are. The reference Q4_K_M has 2 KV
 * heads, so the block count is checked on a shard directly. */
static void test_ff_blocks(void)
{
    char err[IFL_ERR_LEN] = "";
    struct ifl_model *m = NULL;
    struct ifl_model_load_opts o = {.tp_size = 1};
    CHECK_EQ(ifl_model_load_with(&m, MODELS "ref/llama-q4_k_m.gguf", &o, err), 0);
    if (!m)
        return;
    /* pretend 4 KV heads so that the FFN is what stops 4 ranks */
    m->hp.n_head_kv = 4;
    m->hp.n_head = 8;
    if (m->x16) { /* a repacked model cannot be split: load without repacking */
        ifl_model_free(m);
        m = NULL;
        setenv("IFL_REPACK", "0", 1);
        CHECK_EQ(ifl_model_load_with(&m, MODELS "ref/llama-q4_k_m.gguf", &o, err), 0);
        unsetenv("IFL_REPACK");
        if (!m)
            return;
        m->hp.n_head_kv = 4;
        m->hp.n_head = 8;
    }
    CHECK_EQ(ifl_model_shard(m, 1, 4, err), IFL_EUNSUPPORTED);
    CHECK_MSG(strstr(err, "768 rows are 3 blocks of 256"), "message: %s", err);
    ifl_model_free(m);

    /* over 2 ranks: rank 0 takes one block, rank 1 two; wo is kept whole
     * (a KV head's 4 query heads of 32 are 128 columns, half a Q4_K block) */
    setenv("IFL_REPACK", "0", 1);
    for (int r = 0; r < 2; r++) {
        m = NULL;
        struct ifl_model_load_opts o2 = {.tp_rank = r, .tp_size = 2};
        CHECK_EQ(ifl_model_load_with(&m, MODELS "ref/llama-q4_k_m.gguf", &o2, err), 0);
        if (!m)
            continue;
        CHECK_EQ(m->hp.n_ff, r == 0 ? 256 : 512);
        CHECK_EQ(m->shard->ff0, r == 0 ? 0 : 256);
        CHECK_EQ(m->layers[0].w_down.n_in, m->hp.n_ff);
        CHECK_EQ(m->hp.n_head_kv, 1);
        CHECK_EQ(m->hp.n_head, 4);
        CHECK_EQ(m->shard->wo_whole, 1);
        CHECK_EQ(m->layers[0].wo.n_in, 256);
        CHECK_EQ(m->output.n_out, 256);
        ifl_model_free(m);
    }
    unsetenv("IFL_REPACK");
}

/* A shard runs only with its job's communicator. */
static void test_shard_needs_comm(void)
{
    char err[IFL_ERR_LEN] = "";
    struct ifl_model *m = NULL;
    struct ifl_model_load_opts o = {.tp_rank = 1, .tp_size = 2};
    CHECK_EQ(ifl_model_load_with(&m, MODELS "stories260K.gguf", &o, err), 0);
    if (!m)
        return;
    CHECK_EQ(m->hp.n_head_kv, 2);
    CHECK_EQ(m->shard->kv0, 2);
    struct ifl_kv_store *kv = NULL;
    CHECK_EQ(ifl_kv_store_create(&kv, &m->hp, IFL_TYPE_F32, 4, 16, err), 0);
    struct ifl_fwd *f = NULL;
    struct ifl_fwd_config fc = {.max_rows = 4, .max_ctx = 64, .n_threads = 1};
    CHECK_EQ(ifl_fwd_create(&f, m, kv, &fc, err), IFL_EINVAL);
    CHECK_MSG(strstr(err, "rank 1's share of 2"), "message: %s", err);
    CHECK(f == NULL);
    ifl_kv_store_free(kv);
    ifl_model_free(m);
}

/* ---- under mpirun ------------------------------------------------------ */

struct run {
    struct ifl_model *m;
    struct ifl_kv_store *kv;
    struct ifl_fwd *f;
};

/* A shard (size > 1 with comm), the whole model, or the whole model
 * summing as `units` ranks do (--tp-emulate). */
static int run_open_units(struct run *r, const char *path, int rank, int size, int units,
                          struct ifl_comm *comm, enum ifl_type kvt, char *err)
{
    memset(r, 0, sizeof(*r));
    struct ifl_model_load_opts o = {.tp_rank = rank, .tp_size = size, .sum_units = units};
    int rc = ifl_model_load_with(&r->m, path, &o, err);
    if (!rc)
        rc = ifl_kv_store_create(&r->kv, &r->m->hp, kvt, 4, 16, err);
    struct ifl_fwd_config fc = {
        .max_rows = N_PROMPT, .max_ctx = 64, .n_threads = 1, .comm = comm, .comm_timeout_s = 20};
    if (!rc)
        rc = ifl_fwd_create(&r->f, r->m, r->kv, &fc, err);
    return rc;
}

static int run_open(struct run *r, const char *path, int rank, int size, struct ifl_comm *comm,
                    enum ifl_type kvt, char *err)
{
    return run_open_units(r, path, rank, size, 0, comm, kvt, err);
}

static void run_close(struct run *r)
{
    ifl_fwd_free(r->f);
    ifl_kv_store_free(r->kv);
    ifl_model_free(r->m);
}

/* The prompt and decode steps of the test; logits [N_TOK][n_vocab] (rank 0). */
static int run_seq(struct run *r, float *logits, char *err)
{
    int32_t tok[N_TOK], pos[N_TOK], seq[N_TOK] = {0}, table[4] = {0, 1, 2, 3}, nb = 4;
    uint8_t want[N_TOK];
    for (int i = 0; i < N_TOK; i++) {
        tok[i] = (int32_t)((i * 7919 + 13) % r->m->hp.n_vocab);
        pos[i] = i;
        want[i] = 1;
    }
    const int32_t *tables[1] = {table};
    const int32_t V = r->m->hp.n_vocab;
    for (int at = 0; at < N_TOK;) {
        int n = at == 0 ? N_PROMPT : 1;
        struct ifl_batch b = {.n_rows = n,
                              .tokens = tok + at,
                              .pos = pos + at,
                              .seq = seq,
                              .logits = want,
                              .n_seqs = 1,
                              .block_tables = tables,
                              .n_blocks = &nb};
        int rc = ifl_forward(r->f, &b, logits ? logits + (size_t)at * (size_t)V : NULL, err);
        if (rc)
            return rc;
        at += n;
    }
    return 0;
}

/* Whether the model's kernels quantise their input (Q8_0, Q4_0, K quants,
 * and BF16 on a table that rounds its activations, kernels.h act_bf16):
 * then a sum's last-bit change may move an input by a rounding step. */
static int quantised(const struct ifl_model *m)
{
    const struct ifl_layer_weights *w0 = &m->layers[0];
    const int x = w0->gate_exps.data != NULL; /* experts */
    const struct ifl_mat *ms[] = {&w0->wq, &w0->wo, x ? &w0->gate_exps : &w0->w_gate,
                                  x ? &w0->down_exps : &w0->w_down, &m->output};
    int q = 0;
    for (int k = 0; k < 5; k++)
        q |= ifl_type_info(ifl_type_info(ms[k]->type)->act)->blck > 1 ||
             ifl_kernels_best()->act_bf16[ms[k]->type];
    return q;
}

/* Picks a token from a row of logits: the argmax at temperature 0, else a
 * draw from softmax(logits / temp). */
static int32_t pick(const float *l, int32_t V, float temp, struct ifl_rng *g)
{
    int32_t best = 0;
    for (int32_t t = 1; t < V; t++)
        best = l[t] > l[best] ? t : best;
    if (temp <= 0)
        return best;
    double sum = 0;
    for (int32_t t = 0; t < V; t++)
        sum += exp((double)(l[t] - l[best]) / temp);
    double u = (double)ifl_rng_uniform(g) * sum, acc = 0;
    for (int32_t t = 0; t < V; t++) {
        acc += exp((double)(l[t] - l[best]) / temp);
        if (acc >= u)
            return t;
    }
    return best;
}

/* N_GEN tokens after the test's prompt, one step each; rank 0 picks every
 * token and sends it to the others (comm NULL: one process). */
static int generate(struct run *r, struct ifl_comm *comm, float temp, uint64_t seed, int32_t *out,
                    char *err)
{
    const int32_t V = r->m->hp.n_vocab;
    int32_t tok[N_PROMPT], pos[N_PROMPT], seq[N_PROMPT] = {0}, table[4] = {0, 1, 2, 3}, nb = 4;
    uint8_t want[N_PROMPT] = {0};
    for (int i = 0; i < N_PROMPT; i++) {
        tok[i] = (int32_t)((i * 7919 + 13) % V);
        pos[i] = i;
    }
    want[N_PROMPT - 1] = 1;
    const int32_t *tables[1] = {table};
    const int rank = comm ? ifl_comm_rank(comm) : 0;
    float *l = rank == 0 ? malloc(sizeof(float) * (size_t)V) : NULL;
    struct ifl_rng g;
    ifl_rng_seed(&g, seed);
    int rc = 0;
    for (int k = 0; k < N_GEN && !rc; k++) {
        int n = k == 0 ? N_PROMPT : 1;
        int32_t p0 = k == 0 ? 0 : N_PROMPT + k - 1, t0 = k == 0 ? tok[0] : out[k - 1];
        struct ifl_batch b = {.n_rows = n,
                              .tokens = k == 0 ? tok : &t0,
                              .pos = k == 0 ? pos : &p0,
                              .seq = seq,
                              .logits = k == 0 ? want : want + N_PROMPT - 1,
                              .n_seqs = 1,
                              .block_tables = tables,
                              .n_blocks = &nb};
        rc = ifl_forward(r->f, &b, l, err);
        if (rc)
            break;
        if (rank == 0)
            out[k] = pick(l, V, temp, &g);
        if (comm)
            rc = ifl_comm_broadcast(comm, &out[k], sizeof(int32_t), 0, 20, err);
    }
    free(l);
    return rc;
}

/* Greedy and seeded sampled ids of the shard against the whole model's. */
static void check_gen(struct run *sh, struct ifl_comm *comm, const char *path, char *err)
{
    const int rank = ifl_comm_rank(comm);
    for (int mode = 0; mode < 2; mode++) {
        const float temp = mode ? 0.9f : 0.0f;
        int32_t got[N_GEN], want[N_GEN];
        int rc = generate(sh, comm, temp, 7, got, err);
        CHECK_MSG(rc == 0, "%s: %s", path, err);
        if (rank != 0 || rc)
            continue;
        struct run whole;
        int32_t emu[N_GEN];
        rc = run_open(&whole, path, 0, 1, NULL, sh->kv->type, err);
        if (!rc)
            rc = generate(&whole, NULL, temp, 7, want, err);
        run_close(&whole);
        CHECK_MSG(rc == 0, "%s whole: %s", path, err);
        /* one process summing as the job does: the very same ids, always */
        const int size = ifl_comm_size(comm);
        if (!rc && size > 1) {
            rc = run_open_units(&whole, path, 0, 1, size, NULL, sh->kv->type, err);
            if (!rc)
                rc = generate(&whole, NULL, temp, 7, emu, err);
            run_close(&whole);
            CHECK_MSG(rc == 0, "%s --tp-emulate: %s", path, err);
            const int same_emu = !rc && !memcmp(got, emu, sizeof got);
            printf("%s: TP %d %s ids against one process with --tp-emulate %d: %s\n", path, size,
                   mode ? "seeded sampled" : "greedy", size, same_emu ? "the same" : "DIFFER");
            CHECK_MSG(same_emu, "%s: --tp-emulate ids differ", path);
        }
        int same = !rc && !memcmp(got, want, sizeof got), at = 0;
        while (at < N_GEN && got[at] == want[at])
            at++;
        /* kernels that quantise their input move the logits by up to a
         * few hundredths (see mpi_logits): a draw near a boundary of the
         * distribution, or a near tie, may then go the other way; those
         * models' ids are reported, the others' must be equal */
        const int q = quantised(sh->m);
        printf("%s: TP %d %s ids: %s", path, ifl_comm_size(comm),
               mode ? "seeded sampled" : "greedy", same ? "the same" : "differ");
        if (!same)
            printf(" from token %d of %d%s", at, N_GEN, q ? " (quantised inputs: reported)" : "");
        printf("\n");
        CHECK_MSG(same || q, "%s: %s ids differ", path, mode ? "sampled" : "greedy");
    }
}

static int mpi_logits(struct ifl_comm *comm, const char *kvs, int gen, int n_models, char **models)
{
    const int rank = ifl_comm_rank(comm), size = ifl_comm_size(comm);
    const enum ifl_type kvt = !strncmp(kvs, "f16", 3) ? IFL_TYPE_F16 : IFL_TYPE_F32;
    int n_pass = 0, n_fail = 0;
    for (int i = 0; i < n_models; i++) {
        t_cur_failed_ = 0;
        char err[IFL_ERR_LEN] = "";
        struct run sh, whole;
        int rc = run_open(&sh, models[i], rank, size, comm, kvt, err);
        CHECK_MSG(rc == 0, "%s: %s", models[i], err);
        float *got = NULL, *want = NULL;
        int32_t V = sh.m ? sh.m->hp.n_vocab : 0;
        if (rank == 0 && !rc) {
            got = malloc(sizeof(float) * N_TOK * (size_t)V);
            want = malloc(sizeof(float) * N_TOK * (size_t)V);
            rc = run_open(&whole, models[i], 0, 1, NULL, kvt, err);
            CHECK_MSG(rc == 0, "%s whole: %s", models[i], err);
            if (!rc)
                rc = run_seq(&whole, want, err);
            run_close(&whole);
        }
        /* a rank whose shard would not load (a model that refuses the
         * split) has nothing to run; the others then fail on their
         * collectives' time limit, with a message */
        if (sh.f && (!rc || rank != 0)) {
            rc = run_seq(&sh, got, err);
            CHECK_MSG(rc == 0, "%s: %s", models[i], err);
        }
        if (rank == 0 && !rc) {
            const int q = quantised(sh.m);
            /* over one rank the "shard" is the whole model: bitwise */
            const double tol = size == 1 ? 0 : q ? 0.1 : kvt == IFL_TYPE_F32 ? 1e-4 : 1e-3;
            double md = 0;
            int same_argmax = 1, n_close = 0;
            for (int r = 0; r < N_TOK; r++) {
                const float *g = got + (size_t)r * V, *w = want + (size_t)r * V;
                int ag = 0, aw = 0;
                for (int32_t t = 0; t < V; t++) {
                    double d = fabs((double)g[t] - (double)w[t]);
                    md = d > md || isnan(d) ? d : md;
                    ag = g[t] > g[ag] ? t : ag;
                    aw = w[t] > w[aw] ? t : aw;
                }
                float second = -INFINITY;
                for (int32_t t = 0; t < V; t++)
                    if (t != aw && w[t] > second)
                        second = w[t];
                /* a row whose top two are closer than twice the bound may
                 * swap them within it */
                if (w[aw] - second > 2 * tol || size == 1)
                    same_argmax &= ag == aw;
                else
                    n_close++;
            }
            /* weights whose kernels quantise their input (Q8_0, Q4_0, K
             * quants): an input that moved by one ulp (the ranks' partial
             * sums add up in another order) can round to the next integer
             * step, which moves the logits by far more than the ulp */
            printf("%s: TP %d (%s KV cache%s%s): max |logit diff| against one rank = %.3g over %d "
                   "rows of %d, bound %g, argmax %s (%d rows closer than twice the bound)\n",
                   models[i], size, kvs, sh.m->shard && sh.m->shard->wo_whole ? ", wo whole" : "",
                   q ? ", quantised inputs" : "", md, N_TOK, V, tol,
                   same_argmax ? "the same" : "DIFFERS", n_close);
            CHECK_MSG(md <= tol, "%s: max diff %g", models[i], md);
            CHECK(same_argmax);
            /* one process summing as the job does (--tp-emulate): the
             * same bits, whatever the weights */
            if (size > 1) {
                struct run emu;
                float *e = malloc(sizeof(float) * N_TOK * (size_t)V);
                int erc = e ? run_open_units(&emu, models[i], 0, 1, size, NULL, kvt, err) : 1;
                if (!erc)
                    erc = run_seq(&emu, e, err);
                run_close(&emu);
                CHECK_MSG(erc == 0, "%s --tp-emulate: %s", models[i], err);
                double me = 0;
                for (size_t k = 0; !erc && k < (size_t)N_TOK * (size_t)V; k++) {
                    double d = fabs((double)got[k] - (double)e[k]);
                    me = d > me || isnan(d) ? d : me;
                }
                const int bits = !erc && !memcmp(got, e, sizeof(float) * N_TOK * (size_t)V);
                printf("%s: TP %d against one process with --tp-emulate %d: max |logit diff| "
                       "%.3g, %s\n",
                       models[i], size, size, me, bits ? "bit for bit" : "NOT bit for bit");
                CHECK_MSG(bits, "%s: --tp-emulate differs by %g", models[i], me);
                free(e);
            }
        }
        free(got);
        free(want);
        if (gen && sh.f)
            check_gen(&sh, comm, models[i], err);
        run_close(&sh);
        n_pass += !t_cur_failed_;
        n_fail += t_cur_failed_;
    }
    printf("rank %d: %d passed, %d failed\n", rank, n_pass, n_fail);
    fflush(stdout);
    return n_fail ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc > 1 && !strcmp(argv[1], "have-mpi")) {
        printf("%d\n", ifl_comm_have_mpi());
        return 0;
    }
    if (argc > 3 && !strcmp(argv[1], "logits")) {
        char err[IFL_ERR_LEN] = "";
        struct ifl_comm *comm = NULL;
        if (ifl_comm_init(&comm, err)) {
            fprintf(stderr, "%s\n", err);
            return 2;
        }
        /* "f32+gen": also greedy and seeded sampled ids */
        int gen = strstr(argv[2], "+gen") != NULL;
        int rc = mpi_logits(comm, argv[2], gen, argc - 3, argv + 3);
        ifl_comm_finalize(comm);
        return rc;
    }
    T_RUN(test_refusals);
    T_RUN(test_ff_blocks);
    T_RUN(test_shard_needs_comm);
    return t_done();
}
