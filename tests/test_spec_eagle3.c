/*
 * EAGLE-3 speculative decoding (src/model/eagle3.c, src/runtime/spec_eagle3.c)
 * on stories260K and the reference models in ../shared/models/ref/:
 *  - a head is checked against its target: a layer or a width that does
 *    not fit is an error naming the key or the tensor, and the executor
 *    refuses to start with it, saying so;
 *  - the forward pass captures the residual stream entering the asked
 *    layers for the rows that ask, and nothing else changes (logits bitwise);
 *  - a draft tree verified in one pass gives each node the logits of a
 *    one-token step, bit for bit; a test strategy proposing trees around
 *    a plain run's tokens (the oracle) keeps deep paths and changes no
 *    output;
 *  - with a synthetic head, outputs (tokens, log-probs, generation logits)
 *    are bitwise those of plain decoding, greedy and seeded sampling, alone,
 *    among 15 other requests (some plain), with chunked prefill, and after
 *    preemption; drafts are run, some kept; no KV block stays used, also
 *    after a storm of cancels.
 * Heads are written here with the GGUF writer, random weights: a head over
 * the whole vocabulary (whose drafts the target seldom takes) and a
 * "narrow" one whose draft vocabulary is the few tokens a plain run emits
 * most, so that drafts are kept often (see make_narrow).
 */
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/rng.h"
#include "inflight.h"
#include "kernels/kernels.h"
#include "model/eagle3.h"
#include "model/forward.h"
#include "model/gguf.h"
#include "model/kv_store.h"
#include "runtime/engine_internal.h"
#include "t.h"

static char dir[256];
static char stories[600];

/* ---- writing heads ---- */

/* What a test head looks like; zeroes take the target's values. */
struct hspec {
    int32_t extract[3];
    int32_t n_draft;       /* 0: the target's vocabulary */
    const int32_t *map;    /* [n_draft] target ids, or NULL: identity */
    int64_t fc_in;         /* 0: 3 * n_embd */
    int64_t q_in;          /* 0: 2 * n_embd */
    int32_t bad_d2t;       /* 1: the last draft id maps past the vocabulary */
    const char *leave_out; /* a tensor not written */
    uint64_t seed;
};

static int add_rand(struct ifl_gguf_writer *w, const char *name, int64_t n_in, int64_t n_out,
                    float mean, float std, struct ifl_rng *r, const struct hspec *h)
{
    if (h->leave_out && !strcmp(h->leave_out, name))
        return 0;
    size_t n = (size_t)(n_in * n_out);
    float *d = malloc(sizeof(float) * n);
    if (!d)
        return -1;
    for (size_t i = 0; i < n; i++)
        d[i] = mean + std * (float)ifl_rng_normal(r);
    int64_t ne[2] = {n_in, n_out};
    int rc = ifl_gguf_writer_add_tensor(w, name, IFL_TYPE_F32, n_out > 1 ? 2 : 1, ne, d,
                                        sizeof(float) * n);
    free(d);
    return rc;
}

/* Writes a head for model m (F32, random) to path; 0 on success. */
static int write_head(const char *path, const struct ifl_model *m, const struct hspec *h)
{
    const struct ifl_hparams *hp = &m->hp;
    const int64_t E = hp->n_embd, q = (int64_t)hp->n_head * hp->head_dim;
    const int64_t kv = (int64_t)hp->n_head_kv * hp->head_dim;
    const int64_t nd = h->n_draft ? h->n_draft : hp->n_vocab;
    struct ifl_gguf_writer *w;
    if (ifl_gguf_writer_create(&w))
        return -1;
    struct ifl_rng r;
    ifl_rng_seed(&r, h->seed ? h->seed : 77);
    int rc = 0;
    rc |= ifl_gguf_writer_set_str(w, "general.architecture", "eagle3", 6);
    rc |= ifl_gguf_writer_set_arr(w, "eagle3.extract_layers", IFL_GGUF_INT32, h->extract, 3);
    rc |= ifl_gguf_writer_set_u32(w, "eagle3.embedding_length", (uint32_t)E);
    rc |= ifl_gguf_writer_set_u32(w, "eagle3.block_count", 1);
    rc |= ifl_gguf_writer_set_u32(w, "eagle3.feed_forward_length", (uint32_t)hp->n_ff);
    rc |= ifl_gguf_writer_set_u32(w, "eagle3.attention.head_count", (uint32_t)hp->n_head);
    rc |= ifl_gguf_writer_set_u32(w, "eagle3.attention.head_count_kv", (uint32_t)hp->n_head_kv);
    rc |= ifl_gguf_writer_set_u32(w, "eagle3.attention.key_length", (uint32_t)hp->head_dim);
    rc |= ifl_gguf_writer_set_f32(w, "eagle3.attention.layer_norm_rms_epsilon", 1e-5f);
    rc |= add_rand(w, "fc.weight", h->fc_in ? h->fc_in : 3 * E, E, 0, 0.05f, &r, h);
    rc |= add_rand(w, "blk.0.attn_norm.weight", E, 1, 1, 0.1f, &r, h);
    rc |= add_rand(w, "blk.0.hidden_norm.weight", E, 1, 1, 0.1f, &r, h);
    rc |= add_rand(w, "blk.0.attn_q.weight", h->q_in ? h->q_in : 2 * E, q, 0, 0.05f, &r, h);
    rc |= add_rand(w, "blk.0.attn_k.weight", 2 * E, kv, 0, 0.05f, &r, h);
    rc |= add_rand(w, "blk.0.attn_v.weight", 2 * E, kv, 0, 0.05f, &r, h);
    rc |= add_rand(w, "blk.0.attn_output.weight", q, E, 0, 0.05f, &r, h);
    rc |= add_rand(w, "blk.0.ffn_norm.weight", E, 1, 1, 0.1f, &r, h);
    rc |= add_rand(w, "blk.0.ffn_gate.weight", E, hp->n_ff, 0, 0.05f, &r, h);
    rc |= add_rand(w, "blk.0.ffn_up.weight", E, hp->n_ff, 0, 0.05f, &r, h);
    rc |= add_rand(w, "blk.0.ffn_down.weight", hp->n_ff, E, 0, 0.05f, &r, h);
    rc |= add_rand(w, "output_norm.weight", E, 1, 1, 0.1f, &r, h);
    rc |= add_rand(w, "output.weight", E, nd, 0, 0.5f, &r, h);
    int64_t *d2t = malloc(sizeof(int64_t) * (size_t)nd);
    if (!d2t)
        return -1;
    for (int64_t d = 0; d < nd; d++)
        d2t[d] = h->map ? h->map[d] - d : 0;
    if (h->bad_d2t)
        d2t[nd - 1] = hp->n_vocab;
    int64_t ne[1] = {nd};
    if (!h->leave_out || strcmp(h->leave_out, "d2t"))
        rc |= ifl_gguf_writer_add_tensor(w, "d2t", IFL_TYPE_I64, 1, ne, d2t,
                                         sizeof(int64_t) * (size_t)nd);
    free(d2t);
    char err[IFL_ERR_LEN] = "";
    if (!rc)
        rc = ifl_gguf_writer_write(w, path, err);
    if (rc)
        fprintf(stderr, "  write_head %s: %d %s\n", path, rc, err);
    ifl_gguf_writer_free(w);
    return rc;
}

static struct ifl_model *load_model(const char *path)
{
    struct ifl_model *m = NULL;
    char err[IFL_ERR_LEN] = "";
    if (ifl_model_load(&m, path, err))
        fprintf(stderr, "  load %s: %s\n", path, err);
    return m;
}

/* The default extract layers for a target of n layers. */
static void default_extract(struct hspec *h, int32_t n)
{
    h->extract[0] = n > 2 ? 2 : 0;
    h->extract[1] = n / 2;
    h->extract[2] = n - 1;
}

/* ---- loading and validation ---- */

/* A valid head loads; each misfit is refused with its key or tensor named. */
static void test_validation(void)
{
    struct ifl_model *m = load_model(stories);
    char bigp[600];
    snprintf(bigp, sizeof bigp, "%s/models/ref/llama-f16.gguf", t_shared());
    struct ifl_model *big = load_model(bigp);
    if (!m || !big)
        goto out;
    char path[300], err[IFL_ERR_LEN];
    snprintf(path, sizeof path, "%s/head.gguf", dir);
    struct hspec ok = {0};
    default_extract(&ok, m->hp.n_layer);
    struct ifl_eagle3 *h = NULL;
    CHECK_EQ(write_head(path, m, &ok), 0);
    err[0] = 0;
    CHECK_MSG(ifl_eagle3_load(&h, path, m, err) == 0, "load: %s", err);
    if (h) {
        CHECK_EQ(h->n_vocab, m->hp.n_vocab);
        CHECK_EQ(h->extract[2], m->hp.n_layer - 1);
        CHECK_EQ(h->d2t[17], 17);
        ifl_eagle3_free(h);
    }
    /* a head for stories260K (layers that both have) against a target of another width */
    struct hspec low = ok;
    low.extract[0] = 0, low.extract[1] = 1, low.extract[2] = 2;
    CHECK_EQ(write_head(path, m, &low), 0);
    err[0] = 0;
    CHECK(ifl_eagle3_load(&h, path, big, err) != 0 && h == NULL);
    CHECK_MSG(strstr(err, "'fc.weight'") != NULL, "wrong target: %s", err);

    struct {
        struct hspec h;
        const char *want;
    } bad[6];
    memset(bad, 0, sizeof bad);
    for (int i = 0; i < 6; i++)
        bad[i].h = ok;
    bad[0].h.extract[1] = m->hp.n_layer; /* one past the last layer */
    bad[0].want = "'eagle3.extract_layers'";
    bad[1].h.fc_in = 2 * m->hp.n_embd;
    bad[1].want = "'fc.weight'";
    bad[2].h.q_in = 3 * m->hp.n_embd;
    bad[2].want = "'blk.0.attn_q.weight'";
    bad[3].h.bad_d2t = 1;
    bad[3].want = "'d2t'";
    bad[4].h.leave_out = "blk.0.hidden_norm.weight";
    bad[4].want = "'blk.0.hidden_norm.weight'";
    bad[5].h.extract[0] = -1;
    bad[5].want = "'eagle3.extract_layers'";
    for (int i = 0; i < 6; i++) {
        CHECK_EQ(write_head(path, m, &bad[i].h), 0);
        err[0] = 0;
        h = NULL;
        int rc = ifl_eagle3_load(&h, path, m, err);
        CHECK_MSG(rc != 0 && h == NULL && strstr(err, bad[i].want),
                  "case %d: rc %d, err '%s', want %s", i, rc, err, bad[i].want);
    }
    /* through the executor: creation fails with the sentence */
    struct ifl_executor_config c;
    ifl_executor_config_default(&c);
    c.n_threads = 2;
    c.speculative.type = IFL_SPEC_EAGLE3;
    c.speculative.draft_model = path; /* still the last bad head */
    ifl_executor *ex = NULL;
    err[0] = 0;
    CHECK(ifl_executor_create(&ex, stories, &c, err) != 0 && ex == NULL);
    CHECK_MSG(strstr(err, "'eagle3.extract_layers'") && strstr(err, "speculative.draft_model"),
              "executor: %s", err);
    char missing[320];
    snprintf(missing, sizeof missing, "%s/none.gguf", dir);
    c.speculative.draft_model = missing;
    err[0] = 0;
    CHECK(ifl_executor_create(&ex, stories, &c, err) != 0 && ex == NULL);
    CHECK_MSG(strstr(err, "none.gguf") != NULL, "missing file: %s", err);
out:
    ifl_model_free(m);
    ifl_model_free(big);
}

/* tools/mkmodel --eagle3 writes heads that load against their target,
 * with the reference code's layers and the draft map asked for. */
static void test_mkmodel_head(void)
{
    const char *b = getenv("BUILD");
    char cmd[1200], path[300], err[IFL_ERR_LEN] = "";
    snprintf(path, sizeof path, "%s/mk.gguf", dir);
    snprintf(cmd, sizeof cmd,
             "%s/tools/mkmodel -o %s --eagle3 %s --draft-map 5,6,300 --type f16 2>/dev/null",
             b && *b ? b : "build", path, stories);
    CHECK_EQ(system(cmd), 0);
    struct ifl_model *m = load_model(stories);
    struct ifl_eagle3 *h = NULL;
    if (m && ifl_eagle3_load(&h, path, m, err) == 0) {
        CHECK_EQ(h->n_vocab, 3);
        CHECK(h->d2t[0] == 5 && h->d2t[1] == 6 && h->d2t[2] == 300);
        /* 2, n / 2, n - 3 for stories260K's 5 layers */
        CHECK(h->extract[0] == 2 && h->extract[1] == 2 && h->extract[2] == 2);
        CHECK_EQ(h->wq.type, IFL_TYPE_F16);
        CHECK_EQ(h->n_embd, m->hp.n_embd);
    } else {
        CHECK_MSG(0, "mkmodel's head: %s", err);
    }
    ifl_eagle3_free(h);
    snprintf(cmd, sizeof cmd, "%s/tools/mkmodel -o %s --eagle3 %s --extract 1,2,9 2>/dev/null",
             b && *b ? b : "build", path, stories);
    CHECK_EQ(system(cmd), 0);
    h = NULL;
    err[0] = 0;
    CHECK(m && ifl_eagle3_load(&h, path, m, err) != 0 && strstr(err, "layer 9"));
    ifl_model_free(m);
}

/* ---- capture of intermediate states ---- */

/* The forward pass's capture: layer 0 is the token's embedding; only
 * rows that ask are written; logits are bitwise the same with it; a row's
 * capture does not depend on the rows beside it. */
static void test_capture(void)
{
    struct ifl_model *m = load_model(stories);
    if (!m)
        return;
    const int32_t E = m->hp.n_embd, nv = m->hp.n_vocab;
    enum { N = 6, BS = 16, NB = 8 };
    const int32_t tok[N] = {1, 403, 407, 261, 378, 432};
    int32_t pos[N * 2], seq[N * 2], toks[N * 2];
    uint8_t want[N * 2], ask[N * 2];
    const int32_t layers[3] = {0, 2, m->hp.n_layer - 1};
    float *out = malloc(sizeof(float) * N * 2 * 3 * (size_t)E);
    float *out2 = malloc(sizeof(float) * N * 2 * 3 * (size_t)E);
    float *lg = malloc(sizeof(float) * N * 2 * (size_t)nv);
    float *lg2 = malloc(sizeof(float) * N * 2 * (size_t)nv);
    float *emb = malloc(sizeof(float) * (size_t)E);
    char err[IFL_ERR_LEN] = "";
    for (int pass = 0; pass < 3 && out && out2 && lg && lg2 && emb; pass++) {
        /* pass 0: no capture; 1: capture of every other row; 2: the same
         * sequence with another one's rows between its own */
        struct ifl_kv_store *kv = NULL;
        struct ifl_fwd *f = NULL;
        CHECK_EQ(ifl_kv_store_create(&kv, &m->hp, IFL_TYPE_F16, 2 * NB, BS, err), 0);
        struct ifl_fwd_config fc = {.max_rows = 2 * N, .max_ctx = BS * NB, .n_threads = 2};
        CHECK_EQ(ifl_fwd_create(&f, m, kv, &fc, err), 0);
        int32_t t0[NB], t1[NB];
        for (int i = 0; i < NB; i++)
            t0[i] = i, t1[i] = NB + i;
        const int32_t *tables[2] = {t0, t1};
        int32_t nblk[2] = {NB, NB};
        int n = 0;
        for (int i = 0; i < N; i++) {
            if (pass == 2) { /* a row of sequence 1 first */
                toks[n] = tok[N - 1 - i], pos[n] = i, seq[n] = 1, want[n] = 1, ask[n] = 1;
                n++;
            }
            toks[n] = tok[i], pos[n] = i, seq[n] = 0, want[n] = 1, ask[n] = pass == 2 || i % 2;
            n++;
        }
        float *o = pass == 2 ? out2 : out;
        for (size_t i = 0; i < (size_t)n * 3 * (size_t)E; i++)
            o[i] = -12345.0f;
        struct ifl_batch b = {.n_rows = n,
                              .tokens = toks,
                              .pos = pos,
                              .seq = seq,
                              .logits = want,
                              .n_seqs = 2,
                              .block_tables = tables,
                              .n_blocks = nblk};
        if (pass) {
            b.n_extract = 3;
            b.extract_layers = layers;
            b.extract_rows = ask;
            b.extract_out = o;
        }
        CHECK_MSG(ifl_forward(f, &b, pass ? lg2 : lg, err) == 0, "forward: %s", err);
        if (pass == 1) {
            /* logits as without capture */
            CHECK(!memcmp(lg, lg2, sizeof(float) * N * (size_t)nv));
            for (int r = 0; r < N; r++) {
                const float *c = out + (size_t)r * 3 * E;
                if (!(r % 2)) {
                    CHECK(c[0] == -12345.0f && c[3 * E - 1] == -12345.0f);
                    continue;
                }
                ifl_kernels_ref()->dequant[m->tok_embd.type](
                    (const char *)m->tok_embd.data + (size_t)tok[r] * m->tok_embd.row_bytes, emb,
                    E);
                CHECK(!memcmp(c, emb, sizeof(float) * (size_t)E));
                /* deeper layers have moved on from the embedding */
                CHECK(memcmp(c + E, emb, sizeof(float) * (size_t)E) != 0);
                CHECK(memcmp(c + 2 * E, c + E, sizeof(float) * (size_t)E) != 0);
            }
        }
        if (pass == 2) /* sequence 0's odd rows, interleaved: the same states */
            for (int i = 1; i < N; i += 2)
                CHECK(!memcmp(out2 + (size_t)(2 * i + 1) * 3 * E, out + (size_t)i * 3 * E,
                              sizeof(float) * 3 * (size_t)E));
        /* a layer outside the model is refused */
        if (pass == 1) {
            const int32_t badl[3] = {0, 1, m->hp.n_layer};
            b.extract_layers = badl;
            err[0] = 0;
            CHECK(ifl_forward(f, &b, lg2, err) == IFL_EINVAL);
            CHECK(strstr(err, "extract layer") != NULL);
        }
        ifl_fwd_free(f);
        ifl_kv_store_free(kv);
    }
    free(out);
    free(out2);
    free(lg);
    free(lg2);
    free(emb);
    ifl_model_free(m);
}

/* ---- tree rows in the forward pass ---- */

/* Runs n rows of one batch, every row wanting logits; tree arrays optional. */
static int fwd(struct ifl_fwd *f, int32_t n, const int32_t *tok, const int32_t *pos,
               const int32_t *seq, const int32_t *const *tables, const int32_t *nblk,
               const int32_t *kvp, const int32_t *pre, const int32_t *off, const int32_t *path,
               int32_t n_path, float *logits)
{
    uint8_t want[64];
    for (int32_t i = 0; i < n; i++)
        want[i] = 1;
    struct ifl_batch b = {.n_rows = n,
                          .tokens = tok,
                          .pos = pos,
                          .seq = seq,
                          .logits = want,
                          .kv_pos = kvp,
                          .att_prefix = pre,
                          .tree_off = off,
                          .tree_path = path,
                          .n_tree_path = n_path,
                          .n_seqs = 3,
                          .block_tables = tables,
                          .n_blocks = nblk};
    char err[IFL_ERR_LEN] = "";
    int rc = ifl_forward(f, &b, logits, err);
    if (rc)
        fprintf(stderr, "  forward: %s\n", err);
    return rc;
}

/* A draft tree verified in one pass: each node's logits equal, bit for
 * bit, those of a one-token step at its depth after its ancestors were
 * decoded one by one, for F16, Q8_0 and F32 caches, one and two threads,
 * with another sequence's decode row in the same batch. */
static void tree_forward_on(const char *model, enum ifl_type kvt, int nth)
{
    struct ifl_model *m = load_model(model);
    if (!m)
        return;
    enum { BS = 16, NB = 4, P = 13, K = 9 };
    const int32_t nv = m->hp.n_vocab;
    struct ifl_kv_store *kv = NULL;
    struct ifl_fwd *f = NULL;
    char err[IFL_ERR_LEN] = "";
    if (ifl_kv_store_create(&kv, &m->hp, kvt, 3 * NB, BS, err)) {
        fprintf(stderr, "  kv: %s\n", err);
        ifl_model_free(m);
        return;
    }
    struct ifl_fwd_config fc = {.max_rows = 64, .max_ctx = BS * NB, .n_threads = nth};
    CHECK_EQ(ifl_fwd_create(&f, m, kv, &fc, err), 0);
    int32_t tb[3][NB];
    for (int s = 0; s < 3; s++)
        for (int i = 0; i < NB; i++)
            tb[s][i] = (NB - 1 - i) * 3 + s; /* scattered */
    const int32_t *tables[3] = {tb[0], tb[1], tb[2]};
    int32_t nblk[3] = {NB, NB, NB};
    /* the prompt, the pending token, and a tree: node i's parent (-1: the pending token) */
    int32_t prompt[P + 1];
    for (int i = 0; i <= P; i++)
        prompt[i] = i ? 260 + (i * 31) % 200 : 1;
    const int32_t parent[K] = {-1, -1, 0, 0, 1, 2, 5, 4, 6};
    int32_t ntok[K], depth[K];
    for (int i = 0; i < K; i++) {
        ntok[i] = 300 + (i * 47) % 150;
        depth[i] = parent[i] < 0 ? 1 : depth[parent[i]] + 1;
    }
    float *lg = malloc(sizeof(float) * 64 * (size_t)nv);
    float *ref = malloc(sizeof(float) * 64 * (size_t)nv);
    int32_t tok[64], pos[64], seq[64], kvp[64], pre[64], off[64], path[256];
    if (!f || !lg || !ref)
        goto out;
    /* prefill the prompt (positions 0 .. P - 1) of sequences 0 and 2 */
    int32_t n = 0;
    for (int s = 0; s < 3; s += 2)
        for (int i = 0; i < P; i++, n++)
            tok[n] = prompt[i], pos[n] = i, seq[n] = s;
    if (fwd(f, n, tok, pos, seq, tables, nblk, NULL, NULL, NULL, NULL, 0, lg))
        goto out;
    /* the tree step: sequence 2's pending token, then 0's with its tree */
    int32_t np = 0;
    n = 0;
    tok[n] = prompt[P], pos[n] = P, seq[n] = 2, kvp[n] = P, pre[n] = P + 1, off[n] = 0, n++;
    tok[n] = prompt[P], pos[n] = P, seq[n] = 0, kvp[n] = P, pre[n] = P + 1, off[n] = 0, n++;
    for (int i = 0; i < K; i++, n++) {
        tok[n] = ntok[i], pos[n] = P + depth[i], seq[n] = 0, kvp[n] = P + 1 + i, pre[n] = P + 1;
        off[n] = np;
        int32_t chain[K], d = 0;
        for (int a = i; a >= 0; a = parent[a])
            chain[d++] = a;
        while (d > 0)
            path[np++] = P + 1 + chain[--d];
    }
    if (fwd(f, n, tok, pos, seq, tables, nblk, kvp, pre, off, path, np, lg))
        goto out;
    /* sequence 2's row is an ordinary decode row: as alone */
    /* references on sequence 1: the prompt, then each node's path one token a step */
    int32_t m1 = 0;
    for (int i = 0; i <= P; i++, m1++)
        tok[m1] = prompt[i], pos[m1] = i, seq[m1] = 1;
    if (fwd(f, m1, tok, pos, seq, tables, nblk, NULL, NULL, NULL, NULL, 0, ref))
        goto out;
    CHECK_MSG(!memcmp(ref + (size_t)P * nv, lg + (size_t)1 * nv, sizeof(float) * (size_t)nv),
              "%s kv %d nth %d: the pending row", model, kvt, nth);
    CHECK(!memcmp(ref + (size_t)P * nv, lg, sizeof(float) * (size_t)nv));
    for (int i = 0; i < K; i++) {
        int32_t chain[K], d = 0;
        for (int a = i; a >= 0; a = parent[a])
            chain[d++] = a;
        for (int e = d - 1; e >= 0; e--) { /* one token a step, nearest ancestor last */
            int32_t t1 = ntok[chain[e]], p1 = P + (d - e), s1 = 1;
            if (fwd(f, 1, &t1, &p1, &s1, tables, nblk, NULL, NULL, NULL, NULL, 0, ref))
                goto out;
        }
        CHECK_MSG(!memcmp(ref, lg + (size_t)(2 + i) * nv, sizeof(float) * (size_t)nv),
                  "%s kv %d nth %d: node %d (depth %d) differs from a one-token step", model, kvt,
                  nth, i, depth[i]);
    }
    /* a tree row whose path does not end at its own place is refused */
    path[off[2 + 3] + depth[3] - 1] = P + 1;
    err[0] = 0;
    uint8_t want[64];
    memset(want, 1, sizeof want);
    struct ifl_batch bad = {.n_rows = n,
                            .tokens = tok,
                            .pos = pos,
                            .seq = seq,
                            .logits = want,
                            .kv_pos = kvp,
                            .att_prefix = pre,
                            .tree_off = off,
                            .tree_path = path,
                            .n_tree_path = np,
                            .n_seqs = 3,
                            .block_tables = tables,
                            .n_blocks = nblk};
    for (int i = 0; i < n; i++) /* the tree step's rows again (tok was reused) */
        tok[i] = i < 2 ? prompt[P] : ntok[i - 2], pos[i] = i < 2 ? P : P + depth[i - 2],
        seq[i] = i == 0 ? 2 : 0;
    CHECK(ifl_forward(f, &bad, lg, err) == IFL_EINVAL && strstr(err, "tree path"));
out:
    free(lg);
    free(ref);
    ifl_fwd_free(f);
    ifl_kv_store_free(kv);
    ifl_model_free(m);
}

static void test_tree_forward(void)
{
    char p[600];
    snprintf(p, sizeof p, "%s/models/ref/llama-f16.gguf", t_shared());
    const enum ifl_type kvt[3] = {IFL_TYPE_F16, IFL_TYPE_Q8_0, IFL_TYPE_F32};
    for (int k = 0; k < 3; k++)
        for (int nth = 1; nth <= 2; nth++) {
            tree_forward_on(p, kvt[k], nth);
            tree_forward_on(stories, kvt[k], nth);
        }
    snprintf(p, sizeof p, "%s/models/ref/qwen3-hd64-f16.gguf", t_shared());
    tree_forward_on(p, IFL_TYPE_F16, 2);
    /* sliding windows of 8 positions: the deepest nodes' windows start
     * inside the prompt, and a tree row reads its ancestors past them */
    static const char *const swa[2] = {"gemma3 --n-layer 6", "gemma2 --n-layer 4 --softcap 0.5,2"};
    const char *b = getenv("BUILD");
    for (int a = 0; a < 2; a++) {
        char cmd[2400];
        snprintf(p, sizeof p, "%s/swa%d.gguf", dir, a);
        snprintf(cmd, sizeof cmd,
                 "%s/tools/mkmodel -o %s --vocab %s --arch %s --n-embd 256 --n-head 8 "
                 "--n-head-kv 2 --n-ff 512 --n-swa 8 --type f16 2>/dev/null",
                 b && *b ? b : "build", p, stories, swa[a]);
        CHECK_EQ(system(cmd), 0);
        for (int k = 0; k < 3; k++)
            tree_forward_on(p, kvt[k], 1 + (k + a) % 2);
        unlink(p);
    }
}

/* ---- outputs with EAGLE-3 equal plain decoding's ---- */

#define MAX_LEN 160

struct out {
    int32_t tok[MAX_LEN], n;
    float lp[MAX_LEN];
    float *glog;
    float *hid; /* [n][n_embd] with return_hidden_states */
    int32_t n_embd;
    int32_t drafted, kept, preemptions, finish;
};

static void collect(ifl_executor *ex, ifl_id id, int32_t nv, struct out *o)
{
    int32_t ne = o->n_embd; /* set by the caller to collect hidden states */
    memset(o, 0, sizeof(*o));
    o->n_embd = ne;
    for (int final = 0; !final;) {
        struct ifl_response *r = NULL;
        int32_t got = 0;
        int rc = ifl_await(ex, &id, 1, 60000, &r, 1, &got);
        if (rc) {
            CHECK_MSG(0, "await: %s", ifl_strerror(rc));
            return;
        }
        CHECK_EQ(r->status, 0);
        const struct ifl_sequence_result *s = &r->results[0];
        if (s->n_tokens > 0 && o->n + s->n_tokens <= MAX_LEN) {
            memcpy(o->tok + o->n, s->tokens, sizeof(int32_t) * (size_t)s->n_tokens);
            if (s->log_probs)
                memcpy(o->lp + o->n, s->log_probs, sizeof(float) * (size_t)s->n_tokens);
            if (s->generation_logits) {
                float *g = realloc(o->glog, sizeof(float) * (size_t)(o->n + s->n_tokens) * nv);
                if (g) {
                    memcpy(g + (size_t)o->n * nv, s->generation_logits,
                           sizeof(float) * (size_t)s->n_tokens * nv);
                    o->glog = g;
                }
            }
            if (s->hidden_states && o->n_embd > 0) {
                size_t w = (size_t)o->n_embd;
                float *h = realloc(o->hid, sizeof(float) * (size_t)(o->n + s->n_tokens) * w);
                if (h) {
                    memcpy(h + (size_t)o->n * w, s->hidden_states,
                           sizeof(float) * (size_t)s->n_tokens * w);
                    o->hid = h;
                }
            }
            o->n += s->n_tokens;
        }
        o->drafted = r->perf.draft_tokens;
        o->kept = r->perf.accepted_draft_tokens;
        o->preemptions = r->perf.preemptions;
        if (r->is_final)
            o->finish = s->finish_reason;
        final = r->is_final;
        ifl_response_free(r);
    }
}

static void check_same(const struct out *a, const struct out *b, int32_t nv, const char *what)
{
    CHECK_MSG(a->n == b->n, "%s: %d tokens, plain %d", what, a->n, b->n);
    int32_t n = a->n < b->n ? a->n : b->n;
    CHECK_MSG(!memcmp(a->tok, b->tok, sizeof(int32_t) * (size_t)n), "%s: tokens differ", what);
    CHECK_MSG(!memcmp(a->lp, b->lp, sizeof(float) * (size_t)n), "%s: log-probs differ", what);
    if (a->glog || b->glog)
        CHECK_MSG(a->glog && b->glog &&
                      !memcmp(a->glog, b->glog, sizeof(float) * (size_t)n * (size_t)nv),
                  "%s: generation logits differ", what);
    if (a->hid || b->hid)
        CHECK_MSG(a->hid && b->hid && a->n_embd == b->n_embd &&
                      !memcmp(a->hid, b->hid, sizeof(float) * (size_t)n * (size_t)a->n_embd),
                  "%s: hidden states differ", what);
}

struct excfg {
    const char *head; /* NULL: plain */
    int32_t max_batch, max_tokens, n_max, adaptive;
    int32_t top_n, budget; /* 0: the defaults (4, 24) */
    int64_t kv_tokens;
    int policy;
};

static ifl_executor *open_ex(const char *model, const struct excfg *x)
{
    struct ifl_executor_config c;
    ifl_executor_config_default(&c);
    c.n_threads = 2;
    c.max_batch_size = x->max_batch ? x->max_batch : 16;
    c.max_num_tokens = x->max_tokens ? x->max_tokens : 512;
    c.kv_cache_tokens = x->kv_tokens;
    c.sched_policy = x->policy;
    c.n_ctx = 512;
    if (x->head) {
        c.speculative.type = IFL_SPEC_EAGLE3;
        c.speculative.draft_model = x->head;
        c.speculative.n_max = x->n_max ? x->n_max : 6;
        c.speculative.adaptive = x->adaptive;
        if (x->top_n)
            c.speculative.tree_top_n = x->top_n;
        if (x->budget)
            c.speculative.tree_budget = x->budget;
    }
    ifl_executor *ex = NULL;
    char err[IFL_ERR_LEN] = "";
    int rc = ifl_executor_create(&ex, model, &c, err);
    CHECK_MSG(rc == 0, "create %s: %s", model, err);
    return ex;
}

static void req(struct ifl_request *r, const int32_t *ids, int32_t n, int32_t max_tokens,
                int sampled, uint64_t seed)
{
    ifl_request_init(r);
    r->input_ids = ids;
    r->n_input = n;
    r->max_tokens = max_tokens;
    r->sampling.ignore_eos = 1;
    r->sampling.temperature = 0;
    if (sampled) {
        r->sampling.temperature = 0.8f;
        r->sampling.top_p = 0.9f;
        r->sampling.seed = seed;
    }
    r->output.return_log_probs = 1;
    r->output.return_perf_metrics = 1;
}

static int run_one(ifl_executor *ex, const struct ifl_request *r, int32_t nv, struct out *o)
{
    ifl_id id = 0;
    char err[IFL_ERR_LEN] = "";
    int rc = ifl_enqueue(ex, r, &id, err);
    CHECK_MSG(rc == 0, "enqueue: %s", err);
    if (rc)
        return rc;
    collect(ex, id, nv, o);
    return 0;
}

static int ex_is_eagle3(const ifl_executor *ex)
{
    return ex->cfg.speculative.type == IFL_SPEC_EAGLE3;
}

static void check_idle_no_blocks(ifl_executor *ex)
{
    CHECK_EQ(ifl_executor_wait_idle(ex, 60000), 0);
    struct ifl_iteration_stats st;
    CHECK_EQ(ifl_get_iteration_stats(ex, &st), 0);
    CHECK_EQ(st.kv_blocks_used, 0);
    /* an EAGLE-3 head's cache in the stats: reserved, and what drafting
     * wrote (a test's own tree strategy has none) */
    CHECK_MSG(st.draft_kv_bytes_resident >= 0 &&
                  st.draft_kv_bytes_resident <= st.draft_kv_bytes_reserved,
              "head cache bytes: reserved %lld, resident %lld",
              (long long)st.draft_kv_bytes_reserved, (long long)st.draft_kv_bytes_resident);
    if (ex_is_eagle3(ex) && st.draft_tokens > 0)
        CHECK_MSG(st.draft_kv_bytes_reserved > 0 && st.draft_kv_bytes_resident > 0,
                  "head cache bytes: reserved %lld, resident %lld",
                  (long long)st.draft_kv_bytes_reserved, (long long)st.draft_kv_bytes_resident);
}

/* A head whose draft vocabulary is the (up to) 4 tokens that o emits most,
 * written to path: random weights choose among likely tokens, so the
 * target takes some drafts, not all. */
static int make_narrow_of(const char *path, const struct ifl_model *m, const struct out *o,
                          int n_out)
{
    int32_t cnt[4096] = {0}, map[4];
    int32_t n = 0;
    for (int k = 0; k < n_out; k++)
        for (int32_t i = 0; i < o[k].n; i++)
            if (o[k].tok[i] >= 0 && o[k].tok[i] < 4096)
                cnt[o[k].tok[i]]++;
    for (; n < 4; n++) {
        int32_t best = -1;
        for (int32_t t = 0; t < 4096 && t < m->hp.n_vocab; t++)
            if (cnt[t] > 0 && (best < 0 || cnt[t] > cnt[best]))
                best = t;
        if (best < 0)
            break;
        map[n] = best;
        cnt[best] = 0;
    }
    struct hspec h = {.n_draft = n, .map = map, .seed = 5};
    default_extract(&h, m->hp.n_layer);
    return n ? write_head(path, m, &h) : -1;
}

static int make_narrow(const char *path, const struct ifl_model *m, const struct out *o)
{
    return make_narrow_of(path, m, o, 1);
}

static const int32_t ONCE[] = {1, 403, 407, 261, 378}; /* "Once upon a time" with BOS */

/* ---- the tree seam, with an oracle ---- */

/* A test strategy (registered, so it takes requests with client_id
 * ORACLE) that proposes, each step, a tree around a plain run's next
 * tokens: at each depth the right token sits among wrong siblings, not
 * first, so the kept path's K/V must move; a right token also hangs
 * under a wrong node (it must not be taken); and every fifth right
 * token is spoiled, so paths end early too. */
#define ORACLE 4242
static int32_t oracle_tok[MAX_LEN], oracle_n;
static atomic_long oracle_trees;

static int oracle_wants(const struct ifl_executor *ex, const struct xreq *q)
{
    (void)ex;
    return q->r.client_id == ORACLE;
}

static int32_t oracle_propose(struct ifl_executor *ex, struct eseq *s, int32_t *draft,
                              int32_t *parent, int32_t max)
{
    int32_t g = s->n_gen, nv = ex->n_vocab, k = 0;
    if (g + 4 > oracle_n)
        return 0;
    int32_t r[4];
    for (int i = 0; i < 4; i++)
        r[i] = (g + i) % 5 == 3 ? (oracle_tok[g + i] + 7) % nv : oracle_tok[g + i];
    /* node: token, parent */
    const int32_t tree[10][2] = {{(r[0] + 1) % nv, -1},
                                 {r[0], -1},
                                 {(r[0] + 2) % nv, -1},
                                 {(r[1] + 1) % nv, 1},
                                 {r[1], 1},
                                 {r[2], 4},
                                 {(r[2] + 3) % nv, 4},
                                 {r[1], 0},
                                 {r[3], 5},
                                 {r[2], 3}};
    for (; k < max && k < 10; k++) {
        draft[k] = tree[k][0];
        parent[k] = tree[k][1];
    }
    atomic_fetch_add(&oracle_trees, 1);
    return k;
}

static const struct ifl_decoding oracle = {
    .name = "test-oracle-tree",
    .wants = oracle_wants,
    .propose_tree = oracle_propose,
    .accept = ifl_decoding_accept_drafts,
};

/* One model: greedy and seeded sampling, with generation logits, alone;
 * the wide head and the narrow one. */
static void equal_plain_on(const char *model)
{
    struct ifl_model *m = load_model(model);
    if (!m)
        return;
    const int32_t nv = m->hp.n_vocab;
    char wide[300], narrow[300];
    snprintf(wide, sizeof wide, "%s/wide.gguf", dir);
    snprintf(narrow, sizeof narrow, "%s/narrow.gguf", dir);
    struct hspec hw = {0};
    default_extract(&hw, m->hp.n_layer);
    CHECK_EQ(write_head(wide, m, &hw), 0);
    struct excfg pc = {0};
    ifl_executor *plain = open_ex(model, &pc);
    if (!plain) {
        ifl_model_free(m);
        return;
    }
    for (int sampled = 0; sampled < 2; sampled++) {
        struct ifl_request r;
        req(&r, ONCE, 5, 120, sampled, 11);
        r.output.return_generation_logits = 1;
        struct out p = {0};
        if (run_one(plain, &r, nv, &p))
            break;
        CHECK_EQ(p.n, 120);
        CHECK_EQ(make_narrow(narrow, m, &p), 0);
        /* the wide head adaptive, with trees; the narrow one as chains of
         * 6 and as trees of 16, always drafting */
        for (int which = 0; which < 3; which++) {
            struct excfg sc = {.head = which ? narrow : wide,
                               .adaptive = which == 0,
                               .top_n = which == 1 ? 1 : 4,
                               .n_max = which == 2 ? 16 : 6,
                               .budget = 16};
            ifl_executor *ex = open_ex(model, &sc);
            if (!ex)
                continue;
            struct out s = {0};
            if (!run_one(ex, &r, nv, &s)) {
                char what[400];
                snprintf(what, sizeof what, "%s %s head %s", model,
                         which == 0   ? "wide, trees"
                         : which == 1 ? "narrow, chains"
                                      : "narrow, trees",
                         sampled ? "sampled" : "greedy");
                check_same(&s, &p, nv, what);
                printf("  %s: %d drafts, %d kept\n", what, s.drafted, s.kept);
                CHECK_MSG(s.drafted > 0, "%s: no drafts", what);
                if (which) /* the narrow head: some kept, not all */
                    CHECK_MSG(s.kept > 0 && s.kept < s.drafted, "%s: %d of %d kept", what, s.kept,
                              s.drafted);
                free(s.glog);
            }
            check_idle_no_blocks(ex);
            ifl_executor_destroy(ex, 0);
        }
        free(p.glog);
    }
    ifl_executor_destroy(plain, 0);
    ifl_model_free(m);
}

/* The tree seam alone: outputs (tokens, log-probs, generation logits) as
 * plain decoding's, greedy and sampled, alone and with preemption; deep
 * paths kept; no block left used. */
static void test_oracle_trees(void)
{
    struct ifl_model *m = load_model(stories);
    if (!m)
        return;
    const int32_t nv = m->hp.n_vocab, ne = m->hp.n_embd;
    ifl_model_free(m);
    struct excfg pc = {0};
    ifl_executor *ex = open_ex(stories, &pc);
    if (!ex)
        return;
    for (int sampled = 0; sampled < 2; sampled++) {
        struct ifl_request r;
        req(&r, ONCE, 5, 100, sampled, 3);
        r.output.return_generation_logits = 1;
        r.output.return_hidden_states = 1;
        struct out p = {.n_embd = ne}, t = {.n_embd = ne};
        if (run_one(ex, &r, nv, &p))
            break;
        memcpy(oracle_tok, p.tok, sizeof(int32_t) * (size_t)p.n);
        oracle_n = p.n;
        /* a decoy of the same shape just before, so that output buffers
         * the tree run does not fill hold another run's values, not these */
        struct out d = {.n_embd = ne};
        const int32_t other[] = {1, 300, 301, 302};
        struct ifl_request rd = r;
        rd.input_ids = other;
        rd.n_input = 4;
        if (!run_one(ex, &rd, nv, &d))
            CHECK(memcmp(d.tok, p.tok, sizeof(int32_t) * 8) != 0);
        free(d.glog);
        free(d.hid);
        long t0 = atomic_load(&oracle_trees);
        r.client_id = ORACLE;
        if (!run_one(ex, &r, nv, &t)) {
            check_same(&t, &p, nv, sampled ? "oracle sampled" : "oracle greedy");
            long trees = atomic_load(&oracle_trees) - t0;
            printf("  oracle %s: %ld trees, %d drafts, %d kept\n", sampled ? "sampled" : "greedy",
                   trees, t.drafted, t.kept);
            /* each tree keeps its path up to the first spoiled token: on
             * average well over one node a tree */
            CHECK_MSG(trees > 0 && t.kept > trees && t.kept < 4 * trees, "%ld trees, %d kept",
                      trees, t.kept);
            CHECK(t.hid != NULL);
            free(t.glog);
            free(t.hid);
        }
        free(p.glog);
        free(p.hid);
    }
    check_idle_no_blocks(ex);
    ifl_executor_destroy(ex, 0);
}

static void test_equal_plain_stories(void)
{
    equal_plain_on(stories);
}

static void test_equal_plain_ref_models(void)
{
    static const char *const names[] = {"llama-f16", "llama-q8_0", "llama-q4_k_m",
                                        "qwen2-f16", "qwen3-f16",  "llama3-ropefreqs-f16"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char p[600];
        snprintf(p, sizeof p, "%s/models/ref/%s.gguf", t_shared(), names[i]);
        equal_plain_on(p);
    }
}

/* 16 requests at once, half of them opted out (plain), half sampled, long
 * prompts cut into chunks of 16 rows, in a pool so small that requests are
 * preempted and recomputed: every output as the plain executor's alone. */
static void crowd_on(const char *model)
{
    enum { N = 16, PL = 40 };
    struct ifl_model *m = load_model(model);
    if (!m)
        return;
    const int32_t nv = m->hp.n_vocab;
    int32_t prompts[N][PL];
    struct ifl_request r[N];
    struct out alone[N];
    memset(alone, 0, sizeof alone);
    for (int k = 0; k < N; k++) {
        prompts[k][0] = 1;
        for (int i = 1; i < PL; i++)
            prompts[k][i] = 260 + (k * 37 + i * 13) % 240;
        req(&r[k], prompts[k], PL - (k % 5), 70, k % 2, (uint64_t)k + 1);
        r[k].priority = k < 4 ? 0.1f : 0.5f;
        r[k].speculative.disable = k % 4 == 3;
    }
    struct excfg pc = {.max_tokens = 16};
    ifl_executor *plain = open_ex(model, &pc);
    if (!plain) {
        ifl_model_free(m);
        return;
    }
    for (int k = 0; k < N; k++)
        if (run_one(plain, &r[k], nv, &alone[k]))
            break;
    ifl_executor_destroy(plain, 0);
    char narrow[300];
    snprintf(narrow, sizeof narrow, "%s/narrow.gguf", dir);
    CHECK_EQ(make_narrow_of(narrow, m, alone, N), 0);
    /* 16 sequences of up to 110 positions in 640: with the adaptive
     * draft length, preemption is certain; drafting always, fewer
     * sequences share a step and none is preempted, but many more drafts
     * are run (and kept) */
    int32_t preempted = 0, drafted = 0, kept = 0;
    for (int adaptive = 1; adaptive >= 0; adaptive--) {
        struct excfg sc = {.head = narrow,
                           .max_tokens = 16,
                           .kv_tokens = 640,
                           .policy = IFL_SCHED_MAX_UTILIZATION,
                           .adaptive = adaptive};
        ifl_executor *ex = open_ex(model, &sc);
        if (!ex)
            break;
        ifl_id ids[N];
        char err[IFL_ERR_LEN] = "";
        CHECK_EQ(ifl_enqueue_many(ex, r, N, ids, err), 0);
        for (int k = 0; k < N; k++) {
            struct out o = {0};
            collect(ex, ids[k], nv, &o);
            char what[700];
            snprintf(what, sizeof what, "%s request %d adaptive %d", model, k, adaptive);
            check_same(&o, &alone[k], nv, what);
            preempted += o.preemptions;
            drafted += o.drafted;
            kept += o.kept;
            if (r[k].speculative.disable)
                CHECK_EQ(o.drafted, 0);
        }
        if (adaptive)
            CHECK_MSG(preempted > 0, "%s: no preemption", model);
        check_idle_no_blocks(ex);
        ifl_executor_destroy(ex, 0);
    }
    printf("  %s: %d preemptions, %d drafts, %d kept\n", model, preempted, drafted, kept);
    CHECK(drafted > 0 && kept > 0);
    ifl_model_free(m);
}

static void test_crowd_chunked_preempted(void)
{
    char p[600];
    crowd_on(stories);
    snprintf(p, sizeof p, "%s/models/ref/llama-q8_0.gguf", t_shared());
    crowd_on(p);
    snprintf(p, sizeof p, "%s/models/ref/qwen2-f16.gguf", t_shared());
    crowd_on(p);
}

/* Requests cancelled while they draft, many at a time, more than once:
 * every one ends, cancelled or finished, and no block stays used. */
static void test_cancel_storm(void)
{
    enum { N = 24 };
    char wide[300];
    snprintf(wide, sizeof wide, "%s/wide.gguf", dir);
    struct ifl_model *m = load_model(stories);
    if (!m)
        return;
    struct hspec h = {0};
    default_extract(&h, m->hp.n_layer);
    CHECK_EQ(write_head(wide, m, &h), 0);
    ifl_model_free(m);
    struct excfg sc = {
        .head = wide, .max_batch = 8, .kv_tokens = 1024, .policy = IFL_SCHED_MAX_UTILIZATION};
    ifl_executor *ex = open_ex(stories, &sc);
    if (!ex)
        return;
    int32_t prompt[12] = {1, 403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315};
    for (int round = 0; round < 3; round++) {
        struct ifl_request r[N];
        ifl_id ids[N];
        for (int k = 0; k < N; k++) {
            req(&r[k], prompt, 12 - k % 6, 300, k % 2, (uint64_t)k);
            r[k].streaming = 1;
        }
        char err[IFL_ERR_LEN] = "";
        CHECK_EQ(ifl_enqueue_many(ex, r, N, ids, err), 0);
        /* a third cancelled at once (some still wait), a third after their
         * first streamed response, a third after their fourth (drafting by then) */
        int done[N] = {0};
        for (int k = 0; k < N; k++) {
            int fin = 0;
            for (int i = 0; i < (k % 3 == 2 ? 4 : k % 3) && !fin; i++) {
                struct ifl_response *resp = NULL;
                int32_t got = 0;
                if (ifl_await(ex, &ids[k], 1, 60000, &resp, 1, &got))
                    break;
                fin = resp->is_final;
                ifl_response_free(resp);
            }
            if (!fin)
                CHECK_EQ(ifl_cancel(ex, ids[k]), 0);
            done[k] = fin;
        }
        for (int k = 0; k < N; k++) {
            struct out o = {0};
            if (!done[k])
                collect(ex, ids[k], 0, &o);
        }
        check_idle_no_blocks(ex);
    }
    struct ifl_iteration_stats st;
    CHECK_EQ(ifl_get_iteration_stats(ex, &st), 0);
    CHECK(st.draft_tokens > 0);
    ifl_executor_destroy(ex, 0);
}

int main(void)
{
    snprintf(stories, sizeof stories, "%s/models/stories260K.gguf", t_shared());
    snprintf(dir, sizeof dir, "/tmp/ifl_eagle3_%d", (int)getpid());
    if (mkdir(dir, 0700)) {
        perror(dir);
        return 1;
    }
    T_RUN(test_validation);
    T_RUN(test_mkmodel_head);
    T_RUN(test_capture);
    T_RUN(test_tree_forward);
    CHECK_EQ(ifl_decoding_register(&oracle), 0);
    T_RUN(test_oracle_trees);
    ifl_decoding_unregister(&oracle);
    T_RUN(test_equal_plain_stories);
    T_RUN(test_equal_plain_ref_models);
    T_RUN(test_crowd_chunked_preempted);
    T_RUN(test_cancel_storm);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    if (system(cmd))
        fprintf(stderr, "  could not remove %s\n", dir);
    return t_done();
}
