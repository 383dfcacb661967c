/*
 * specbench: the speculative-decoding benchmarks of bench/README.md.
 *
 *   build/tools/specbench verify MODEL [-t N] [--ctx N] [--rounds N] [--ks LIST] [--batches LIST]
 *   build/tools/specbench accept MODEL [-t N] [--gen N] [--rounds N] [--adaptive 0|1|both]
 *                                      [--only ext,ngram] [--prompt TEXT] [--streams N]
 *                                      [--pcts 0,25,50,100] [--nmax 8,16]
 *
 * verify: the cost of checking drafts. B sequences (--batches, default
 * 1,4,16) each hold --ctx positions (default 256) of random tokens in a
 * paged KV store; one forward step then carries k rows per sequence (k =
 * the pending token and k - 1 drafts; --ks, default 1,2,4,8,16,32), every
 * row asking for logits as a verifying step does. Each round runs every k
 * once, in an order that rotates from round to round, and the ratio of each
 * k's time to the k = 1 time of the same round is kept; the table shows the
 * medians over --rounds (default 25) after one round of warm-up. The step is
 * the model's forward pass alone (src/model/forward.h): no scheduler, no
 * sampling (an argmax over 32000 logits, about 10 us a row, is not in it).
 *
 * accept: single-stream decode through the executor's C API. A prompt is
 * decoded greedily (--gen tokens, default 128, end tokens ignored) with
 * speculation off; that output, with 0, 25, 50 and 100 % of its tokens
 * replaced by other tokens (positions and tokens from a fixed seed), is
 * given back as the request's speculative.draft_tokens with n_max 8 and
 * 16 (--pcts and --nmax pick others). With --streams N (up to 16), N
 * copies of each request run together and the rate is theirs in all.
 * N-gram lookup (speculative.type NGRAM, n_max 8 and 16) runs on the
 * same greedy request and on a seeded sampled one (temperature 1), each
 * against plain decoding of the same request. Whether the lookup finds
 * anything depends on the prompt (--prompt): the default, a paragraph to
 * rewrite, gets from a random-weight model (bench/compare's) an output
 * that hardly repeats itself nor copies the prompt, so the lookup can only
 * cost; a word repeated many times gets an output that falls into short
 * cycles, which the lookup finds. --only picks the client-draft (ext) or
 * n-gram cases. Every run's tokens must equal its plain run's (the tool fails
 * otherwise). Tokens/s is the decode rate (first token to last, so the
 * prompt's prefill is left out). Each round runs every case once, in an
 * order that rotates, each paired with a plain run of the same request on
 * the same executor just before or just after it (in turn), and keeps the
 * ratio of the two: on a shared machine whose neighbours come and go, a
 * ratio over seconds, not minutes. The table shows medians over --rounds
 * (default 5); a plain row, the median of all its paired runs. With
 * --adaptive both, two executors (adaptive on and off) are created and
 * their cases interleaved.
 *
 * Prints tables; checks only that speculation left every output unchanged.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "core/err.h"
#include "core/rng.h"
#include "inflight.h"
#include "model/forward.h"
#include "model/kv_store.h"
#include "model/model.h"

#define MAX_LIST 16
#define MAX_STREAMS 16
#define BLOCK 16

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median of v[0..n) (sorts a copy in tmp). */
static double median(const double *v, int n, double *tmp)
{
    if (n <= 0)
        return 0;
    memcpy(tmp, v, sizeof(double) * (size_t)n);
    qsort(tmp, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? tmp[n / 2] : 0.5 * (tmp[n / 2 - 1] + tmp[n / 2]);
}

/* "1,2,4" into v (at most MAX_LIST, each lo..1024); the count, or -1. */
static int parse_list(const char *s, int *v, long lo)
{
    int n = 0;
    while (*s) {
        char *end;
        long x = strtol(s, &end, 10);
        if (end == s || x < lo || x > 1024 || n == MAX_LIST)
            return -1;
        v[n++] = (int)x;
        s = *end == ',' ? end + 1 : end;
        if (*end && *end != ',')
            return -1;
    }
    return n;
}

/* ---- verify ---- */

struct vopts {
    const char *model;
    int threads, ctx, rounds;
    int ks[MAX_LIST], n_ks;
    int bs[MAX_LIST], n_bs;
};

static int run_verify(const struct vopts *o)
{
    char err[IFL_ERR_LEN] = "";
    int kmax = 0, bmax = 0, rc = 1;
    for (int i = 0; i < o->n_ks; i++)
        kmax = o->ks[i] > kmax ? o->ks[i] : kmax;
    for (int i = 0; i < o->n_bs; i++)
        bmax = o->bs[i] > bmax ? o->bs[i] : bmax;
    struct ifl_model *m = NULL;
    struct ifl_kv_store *kv = NULL;
    struct ifl_fwd *f = NULL;
    double t0 = now_s();
    if (ifl_model_load(&m, o->model, err)) {
        fprintf(stderr, "specbench: %s\n", err);
        return 1;
    }
    int32_t per_seq = (o->ctx + kmax + BLOCK - 1) / BLOCK;
    int32_t max_rows = bmax * kmax > 512 ? bmax * kmax : 512;
    struct ifl_fwd_config fc = {
        .max_rows = max_rows, .max_ctx = per_seq * BLOCK, .n_threads = o->threads};
    if (ifl_kv_store_create(&kv, &m->hp, IFL_TYPE_F16, bmax * per_seq, BLOCK, err) ||
        ifl_fwd_create(&f, m, kv, &fc, err)) {
        fprintf(stderr, "specbench: %s\n", err);
        goto out;
    }
    int32_t nv = m->hp.n_vocab;
    int32_t *tables = malloc(sizeof(int32_t) * (size_t)(bmax * per_seq));
    const int32_t **tptr = malloc(sizeof(*tptr) * (size_t)bmax);
    int32_t *nblk = malloc(sizeof(int32_t) * (size_t)bmax);
    int32_t *tok = malloc(sizeof(int32_t) * (size_t)max_rows);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)max_rows);
    int32_t *seq = malloc(sizeof(int32_t) * (size_t)max_rows);
    uint8_t *want = malloc((size_t)max_rows);
    float *logits = malloc(sizeof(float) * (size_t)max_rows * (size_t)nv);
    double *t = calloc((size_t)(o->n_bs * o->n_ks * o->rounds), sizeof(double));
    double *ratio = calloc((size_t)(o->n_bs * o->n_ks * o->rounds), sizeof(double));
    double *tmp = malloc(sizeof(double) * (size_t)o->rounds);
    if (!tables || !tptr || !nblk || !tok || !pos || !seq || !want || !logits || !t || !ratio ||
        !tmp) {
        fprintf(stderr, "specbench: out of memory\n");
        goto free_bufs;
    }
    /* sequence s holds blocks s, s + bmax, ...: interleaved, as a pool's are */
    for (int s = 0; s < bmax; s++) {
        for (int j = 0; j < per_seq; j++)
            tables[s * per_seq + j] = j * bmax + s;
        tptr[s] = tables + s * per_seq;
        nblk[s] = per_seq;
    }
    struct ifl_rng rng;
    ifl_rng_seed(&rng, 7);
    struct ifl_batch b = {.tokens = tok,
                          .pos = pos,
                          .seq = seq,
                          .logits = want,
                          .n_seqs = bmax,
                          .block_tables = tptr,
                          .n_blocks = nblk};
    /* the context: ctx random tokens per sequence, in chunks */
    for (int s = 0; s < bmax; s++)
        for (int p0 = 0; p0 < o->ctx; p0 += max_rows) {
            int n = o->ctx - p0 < max_rows ? o->ctx - p0 : max_rows;
            for (int i = 0; i < n; i++) {
                tok[i] = (int32_t)(ifl_rng_next(&rng) % (uint64_t)nv);
                pos[i] = p0 + i;
                seq[i] = s;
                want[i] = i == n - 1;
            }
            b.n_rows = n;
            if (ifl_forward(f, &b, logits, err)) {
                fprintf(stderr, "specbench: prefill: %s\n", err);
                goto free_bufs;
            }
        }
    printf("model %s: %s, %d layers, n_embd %d, n_vocab %d; loaded and %d x %d positions "
           "prefilled in %.1f s; %d threads\n",
           o->model, m->hp.arch_name, m->hp.n_layer, m->hp.n_embd, nv, bmax, o->ctx, now_s() - t0,
           ifl_fwd_n_threads(f));
    printf("verify: one forward step, every sequence at position %d carrying k rows (the "
           "pending token and k - 1 drafts), all with logits; median of %d rounds\n\n",
           o->ctx, o->rounds);
    for (int bi = 0; bi < o->n_bs; bi++) {
        int B = o->bs[bi];
        for (int r = -1; r < o->rounds; r++) {
            double t1 = 0;
            for (int j = 0; j < o->n_ks; j++) {
                /* k = 1 first in every round (the ratios' base), the rest rotated */
                int ki = j == 0 ? 0 : 1 + (j - 1 + (r < 0 ? 0 : r)) % (o->n_ks - 1);
                int k = o->ks[ki], n = 0;
                for (int s = 0; s < B; s++)
                    for (int i = 0; i < k; i++, n++) {
                        tok[n] = (int32_t)(ifl_rng_next(&rng) % (uint64_t)nv);
                        pos[n] = o->ctx + i;
                        seq[n] = s;
                        want[n] = 1;
                    }
                b.n_rows = n;
                double a = now_s();
                if (ifl_forward(f, &b, logits, err)) {
                    fprintf(stderr, "specbench: step: %s\n", err);
                    goto free_bufs;
                }
                double el = now_s() - a;
                if (j == 0)
                    t1 = el;
                if (r >= 0) {
                    size_t at = ((size_t)bi * (size_t)o->n_ks + (size_t)ki) * (size_t)o->rounds;
                    t[at + (size_t)r] = el;
                    ratio[at + (size_t)r] = el / t1;
                }
            }
        }
        printf("%d sequence%s x k rows (k = 1 is %d rows):\n\n", B, B > 1 ? "s" : "", B);
        printf(
            "| k | rows | step ms | vs k = 1 | per row vs k = 1 |\n|---:|---:|---:|---:|---:|\n");
        for (int ki = 0; ki < o->n_ks; ki++) {
            size_t at = ((size_t)bi * (size_t)o->n_ks + (size_t)ki) * (size_t)o->rounds;
            double tm = median(t + at, o->rounds, tmp), rm = median(ratio + at, o->rounds, tmp);
            printf("| %d | %d | %.2f | %.3f | %.3f |\n", o->ks[ki], B * o->ks[ki], tm * 1e3, rm,
                   rm / o->ks[ki]);
        }
        printf("\n");
        fflush(stdout);
    }
    rc = 0;
free_bufs:
    free(tables);
    free(tptr);
    free(nblk);
    free(tok);
    free(pos);
    free(seq);
    free(want);
    free(logits);
    free(t);
    free(ratio);
    free(tmp);
out:
    ifl_fwd_free(f);
    ifl_kv_store_free(kv);
    ifl_model_free(m);
    return rc;
}

/* ---- accept ---- */

enum ckind { C_PLAIN, C_EXT, C_NGRAM };

/* One case: a request shape run once a round on one executor. */
struct scase {
    int ex; /* which executor (0: adaptive as first listed) */
    enum ckind kind;
    int sampled;         /* 0: greedy; 1: seeded sampling at temperature 1 */
    int pct, ci;         /* C_EXT: corrupted share, and which drafts those are */
    int n_max;           /* the request's n_max */
    int base;            /* the case whose rate this one is compared with */
    double *rate;        /* [rounds] decode tokens/s */
    double *prate;       /* [rounds] tokens/s of the plain run paired with it */
    double *ratio;       /* [rounds] rate / prate */
    double plain_median; /* C_PLAIN: over every paired plain run */
    int n_plain;
    int64_t drafted, accepted;
};

struct aopts {
    const char *model, *prompt;
    int threads, gen, rounds, streams;
    int pcts[MAX_LIST], n_pcts, nmaxs[MAX_LIST], n_nmaxs;
    int adaptive[2], n_ex;
    int want_plain, want_ext, want_ngram;
};

/* Runs n copies of a request together to their ends: the decode rate (each
 * copy's tokens after its first, over the time from the first first token
 * to the last last one) in *rate, copy i's tokens (at most cap) in
 * out[i * cap ..), the drafts run and kept by all in *drafted, *accepted.
 * Returns the fewest tokens a copy got, -1 on error. */
static int32_t run_request(ifl_executor *ex, const struct ifl_request *req, int n_copies,
                           int32_t *out, int32_t cap, double *rate, int64_t *drafted,
                           int64_t *accepted)
{
    char err[IFL_ERR_LEN] = "";
    struct ifl_request reqs[MAX_STREAMS];
    ifl_id ids[MAX_STREAMS];
    int32_t n[MAX_STREAMS] = {0};
    int64_t first = INT64_MAX, last = 0;
    if (n_copies < 1 || n_copies > MAX_STREAMS)
        return -1;
    for (int i = 0; i < n_copies; i++)
        reqs[i] = *req;
    if (ifl_enqueue_many(ex, reqs, n_copies, ids, err)) {
        fprintf(stderr, "specbench: enqueue: %s\n", err);
        return -1;
    }
    *drafted = *accepted = 0;
    for (int left = n_copies, failed = 0; left > 0;) {
        struct ifl_response *r[16];
        int32_t got = 0;
        if (ifl_await(ex, ids, n_copies, 600000, r, 16, &got) || got == 0) {
            fprintf(stderr, "specbench: no response\n");
            return -1;
        }
        for (int32_t i = 0; i < got; i++) {
            int c = 0;
            while (c < n_copies - 1 && ids[c] != r[i]->request_id)
                c++;
            if (r[i]->status) {
                fprintf(stderr, "specbench: request failed: %s\n",
                        r[i]->error_msg ? r[i]->error_msg : ifl_strerror(r[i]->status));
                failed = 1;
            } else if (r[i]->n_results > 0) {
                const struct ifl_sequence_result *res = &r[i]->results[0];
                for (int32_t k = 0; k < res->n_tokens && n[c] < cap; k++)
                    out[(size_t)c * (size_t)cap + (size_t)n[c]++] = res->tokens[k];
            }
            if (r[i]->is_final) {
                const struct ifl_perf_metrics *p = &r[i]->perf;
                first = p->first_token_us < first ? p->first_token_us : first;
                last = p->last_token_us > last ? p->last_token_us : last;
                *drafted += p->draft_tokens;
                *accepted += p->accepted_draft_tokens;
                left--;
            }
            ifl_response_free(r[i]);
        }
        if (failed && left == 0)
            return -1;
    }
    int32_t fewest = cap, total = 0;
    for (int c = 0; c < n_copies; c++) {
        fewest = n[c] < fewest ? n[c] : fewest;
        total += n[c] - 1;
    }
    *rate = last > first ? total / ((double)(last - first) * 1e-6) : 0;
    return fewest;
}

/* Whether every one of n copies' tokens (cap apart in got) equals ref. */
static int all_equal(const int32_t *got, int n, int32_t cap, const int32_t *ref)
{
    for (int c = 0; c < n; c++)
        if (memcmp(got + (size_t)c * (size_t)cap, ref, sizeof(int32_t) * (size_t)cap))
            return 0;
    return 1;
}

static const char *prompt_text =
    "Rewrite the following paragraph in plain words, keeping its meaning. The committee met on "
    "Tuesday to review the budget for the coming year. After a long discussion about the cost "
    "of repairs to the old library, the members agreed to postpone the new playground until "
    "spring, and to ask the town for a grant that would cover the heating of the community "
    "hall. The chair thanked the volunteers who had counted the books and closed the meeting "
    "at nine.\n\nRewritten paragraph:";

/* The request of case c: base with its sampling and its speculation. */
static void make_request(const struct ifl_request *base, const struct scase *c,
                         const int32_t *drafts, int32_t G, struct ifl_request *q)
{
    *q = *base;
    if (c->sampled) {
        q->sampling.temperature = 1.0f;
        q->sampling.seed = 1234;
    }
    if (c->kind == C_PLAIN)
        q->speculative.disable = 1;
    else
        q->speculative.n_max = c->n_max;
    if (c->kind == C_EXT) {
        q->speculative.draft_tokens = drafts + (size_t)c->ci * (size_t)G;
        q->speculative.n_draft_tokens = G;
    }
}

static int run_accept(const struct aopts *o)
{
    char err[IFL_ERR_LEN] = "";
    ifl_executor *ex[2] = {NULL, NULL};
    int rc = 1, n_cs = 0;
    struct scase cs[64];
    int32_t G = o->gen;
    int32_t *got = malloc(sizeof(int32_t) * (size_t)G * MAX_STREAMS);
    int32_t *drafts = malloc(sizeof(int32_t) * (size_t)G * MAX_LIST);
    int32_t *ref[2] = {malloc(sizeof(int32_t) * (size_t)G), malloc(sizeof(int32_t) * (size_t)G)};
    double *tmp = malloc(sizeof(double) * (size_t)o->rounds);
    double *allp = malloc(sizeof(double) * (size_t)o->rounds * 64 * 2);
    if (!got || !drafts || !ref[0] || !ref[1] || !tmp || !allp)
        goto out;
    for (int e = 0; e < o->n_ex; e++) {
        struct ifl_executor_config cfg;
        ifl_executor_config_default(&cfg);
        cfg.n_threads = o->threads;
        cfg.max_batch_size = o->streams > 4 ? o->streams : 4;
        cfg.speculative.type = IFL_SPEC_NGRAM;
        cfg.speculative.n_max = 16;
        cfg.speculative.adaptive = o->adaptive[e];
        double t0 = now_s();
        if (ifl_executor_create(&ex[e], o->model, &cfg, err)) {
            fprintf(stderr, "specbench: %s\n", err);
            goto out;
        }
        printf("executor %d (adaptive %d) created in %.1f s\n", e, o->adaptive[e], now_s() - t0);
    }
    int64_t np = 0;
    int32_t prompt[512];
    if (ifl_executor_tokenize(ex[0], o->prompt, (int64_t)strlen(o->prompt), 1, 0, prompt, 512,
                              &np)) {
        fprintf(stderr, "specbench: cannot tokenize the prompt\n");
        goto out;
    }
    struct ifl_request base;
    ifl_request_init(&base);
    base.input_ids = prompt;
    base.n_input = (int32_t)np;
    base.max_tokens = G;
    base.sampling.ignore_eos = 1;
    base.sampling.temperature = 0;
    base.output.return_perf_metrics = 1;
    /* the references: greedy and sampled, speculation off */
    for (int smp = 0; smp < 2; smp++) {
        struct ifl_request r = base;
        r.speculative.disable = 1;
        if (smp) {
            r.sampling.temperature = 1.0f;
            r.sampling.seed = 1234;
        }
        double rate;
        int64_t d, a;
        if (run_request(ex[0], &r, 1, ref[smp], G, &rate, &d, &a) != G) {
            fprintf(stderr, "specbench: the reference run did not give %d tokens\n", G);
            goto out;
        }
    }
    int distinct = 0;
    for (int32_t i = 0; i < G; i++) {
        int seen = 0;
        for (int32_t j = 0; j < i && !seen; j++)
            seen = ref[0][j] == ref[0][i];
        distinct += !seen;
    }
    printf("prompt %lld tokens; greedy reference %d tokens, %d distinct\n", (long long)np, G,
           distinct);
    /* drafts: the greedy output with pct % of positions given another token */
    struct ifl_rng rng;
    ifl_rng_seed(&rng, 42);
    struct ifl_model_info mi;
    ifl_executor_model_info(ex[0], &mi);
    for (int c = 0; c < o->n_pcts; c++) {
        int32_t *d = drafts + (size_t)c * (size_t)G;
        memcpy(d, ref[0], sizeof(int32_t) * (size_t)G);
        int32_t *idx = got; /* a shuffled index, reusing got */
        for (int32_t i = 0; i < G; i++)
            idx[i] = i;
        for (int32_t i = G - 1; i > 0; i--) {
            int32_t j = (int32_t)(ifl_rng_next(&rng) % (uint64_t)(i + 1)), x = idx[i];
            idx[i] = idx[j];
            idx[j] = x;
        }
        int32_t n_bad = (int32_t)((int64_t)G * o->pcts[c] / 100);
        for (int32_t i = 0; i < n_bad; i++) {
            int32_t p = idx[i], t;
            do
                t = (int32_t)(ifl_rng_next(&rng) % (uint64_t)mi.n_vocab);
            while (t == ref[0][p]);
            d[p] = t;
        }
    }
    /* the cases */
    for (int e = 0; e < o->n_ex; e++) {
        int plain_g = n_cs, plain_s = -1;
        cs[n_cs++] = (struct scase){.ex = e, .kind = C_PLAIN, .base = plain_g};
        if (o->want_ext)
            for (int c = 0; c < o->n_pcts; c++)
                for (int nm = 0; nm < o->n_nmaxs; nm++)
                    cs[n_cs++] = (struct scase){.ex = e,
                                                .kind = C_EXT,
                                                .pct = o->pcts[c],
                                                .ci = c,
                                                .n_max = o->nmaxs[nm],
                                                .base = plain_g};
        if (o->want_ngram) {
            for (int nm = 0; nm < o->n_nmaxs; nm++)
                cs[n_cs++] = (struct scase){
                    .ex = e, .kind = C_NGRAM, .n_max = o->nmaxs[nm], .base = plain_g};
            plain_s = n_cs;
            cs[n_cs++] = (struct scase){.ex = e, .kind = C_PLAIN, .sampled = 1, .base = plain_s};
            for (int nm = 0; nm < o->n_nmaxs; nm++)
                cs[n_cs++] = (struct scase){
                    .ex = e, .kind = C_NGRAM, .sampled = 1, .n_max = o->nmaxs[nm], .base = plain_s};
        }
    }
    for (int i = 0; i < n_cs; i++) {
        cs[i].rate = calloc((size_t)o->rounds, sizeof(double));
        cs[i].ratio = calloc((size_t)o->rounds, sizeof(double));
        cs[i].prate = calloc((size_t)o->rounds, sizeof(double));
        if (!cs[i].rate || !cs[i].ratio || !cs[i].prate)
            goto out;
    }
    for (int r = 0; r < o->rounds; r++) {
        double t0 = now_s();
        for (int j = 0; j < n_cs; j++) {
            /* rotated: a different start each round */
            struct scase *c = &cs[(j + r * 5) % n_cs];
            if (c->kind == C_PLAIN)
                continue;
            /* the case and a plain run of the same request just before or
             * just after it, in turn: a ratio over seconds, not minutes */
            for (int half = 0; half < 2; half++) {
                int plain = half == (r + j) % 2;
                const struct scase *run = plain ? &cs[c->base] : c;
                struct ifl_request q;
                make_request(&base, run, drafts, G, &q);
                int64_t d = 0, a = 0;
                double rate = 0;
                if (run_request(ex[c->ex], &q, o->streams, got, G, &rate, &d, &a) != G ||
                    !all_equal(got, o->streams, G, ref[c->sampled])) {
                    fprintf(stderr, "specbench: a run's tokens differ from plain decoding's\n");
                    goto out;
                }
                if (plain) {
                    c->prate[r] = rate;
                } else {
                    c->rate[r] = rate;
                    c->drafted += d;
                    c->accepted += a;
                }
            }
            c->ratio[r] = c->rate[r] / c->prate[r];
        }
        fprintf(stderr, "round %d of %d: %.1f s\n", r + 1, o->rounds, now_s() - t0);
    }
    /* a plain row: every plain run paired with its cases */
    for (int i = 0; i < n_cs; i++) {
        if (cs[i].kind != C_PLAIN)
            continue;
        int n = 0;
        for (int k = 0; k < n_cs; k++)
            if (k != i && cs[k].base == i)
                for (int r = 0; r < o->rounds; r++)
                    allp[n++] = cs[k].prate[r];
        cs[i].plain_median = median(allp, n, allp + n);
        cs[i].n_plain = n;
    }
    printf("\n%d stream%s of %d tokens after a %lld-token prompt, decode tokens/s (all streams, "
           "first token to last), median of %d rounds; every output equal to plain decoding's\n\n",
           o->streams, o->streams > 1 ? "s" : "", G, (long long)np, o->rounds);
    printf("| adaptive | case | n_max | drafts corrupted | drafted per run | "
           "of them kept | tok/s | vs plain |\n|---|---|---:|---:|---:|---:|---:|---:|\n");
    for (int i = 0; i < n_cs; i++) {
        const struct scase *c = &cs[i];
        const char *name = c->kind == C_PLAIN ? (c->sampled ? "plain (sampled)" : "plain")
                           : c->kind == C_EXT ? "client drafts"
                           : c->sampled       ? "n-gram (sampled)"
                                              : "n-gram (greedy)";
        char pct[16] = "-", nm[16] = "-", acc[32] = "-", dr[32] = "-";
        if (c->kind == C_EXT)
            snprintf(pct, sizeof pct, "%d %%", c->pct);
        if (c->kind != C_PLAIN) {
            snprintf(nm, sizeof nm, "%d", c->n_max);
            snprintf(dr, sizeof dr, "%.1f", (double)c->drafted / o->rounds);
            snprintf(acc, sizeof acc, "%.0f %%",
                     c->drafted ? 100.0 * (double)c->accepted / (double)c->drafted : 0.0);
        }
        if (c->kind == C_PLAIN)
            printf("| %s | %s | - | - | - | - | %.1f | 1 (%d runs) |\n",
                   o->adaptive[c->ex] ? "on" : "off", name, c->plain_median, c->n_plain);
        else
            printf("| %s | %s | %s | %s | %s | %s | %.1f | %.2f |\n",
                   o->adaptive[c->ex] ? "on" : "off", name, nm, pct, dr, acc,
                   median(c->rate, o->rounds, tmp), median(c->ratio, o->rounds, tmp));
    }
    rc = 0;
out:
    for (int i = 0; i < n_cs; i++) {
        free(cs[i].rate);
        free(cs[i].ratio);
        free(cs[i].prate);
    }
    for (int e = 0; e < o->n_ex; e++)
        if (ex[e])
            ifl_executor_destroy(ex[e], 1);
    free(got);
    free(drafts);
    free(ref[0]);
    free(ref[1]);
    free(tmp);
    free(allp);
    return rc;
}

static void usage(void)
{
    fprintf(stderr,
            "usage: specbench verify MODEL [-t N] [--ctx N] [--rounds N] [--ks 1,2,4] "
            "[--batches 1,4,16]\n"
            "       specbench accept MODEL [-t N] [--gen N] [--rounds N] [--adaptive 0|1|both] "
            "[--only ext,ngram] [--prompt TEXT]\n"
            "                            [--streams N] [--pcts 0,25,50,100] [--nmax 8,16]\n");
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        usage();
        return 2;
    }
    int verify = !strcmp(argv[1], "verify");
    if (!verify && strcmp(argv[1], "accept")) {
        usage();
        return 2;
    }
    struct vopts v = {.model = argv[2],
                      .threads = 2,
                      .ctx = 256,
                      .rounds = 25,
                      .ks = {1, 2, 4, 8, 16, 32},
                      .n_ks = 6,
                      .bs = {1, 4, 16},
                      .n_bs = 3};
    struct aopts a = {.model = argv[2],
                      .prompt = prompt_text,
                      .threads = 2,
                      .gen = 128,
                      .rounds = 5,
                      .streams = 1,
                      .pcts = {0, 25, 50, 100},
                      .n_pcts = 4,
                      .nmaxs = {8, 16},
                      .n_nmaxs = 2,
                      .adaptive = {1, 0},
                      .n_ex = 2,
                      .want_plain = 1,
                      .want_ext = 1,
                      .want_ngram = 1};
    for (int i = 3; i < argc; i++) {
        const char *k = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!val) {
            usage();
            return 2;
        }
        i++;
        int bad = 0;
        if (!strcmp(k, "-t"))
            v.threads = a.threads = atoi(val);
        else if (!strcmp(k, "--rounds"))
            bad = (v.rounds = a.rounds = atoi(val)) < 1;
        else if (!strcmp(k, "--ctx"))
            bad = (v.ctx = atoi(val)) < 1 || v.ctx > 3000;
        else if (!strcmp(k, "--prompt"))
            a.prompt = val;
        else if (!strcmp(k, "--gen"))
            bad = (a.gen = atoi(val)) < 2 || a.gen > 900;
        else if (!strcmp(k, "--ks"))
            bad = (v.n_ks = parse_list(val, v.ks, 1)) < 1 || v.ks[0] != 1;
        else if (!strcmp(k, "--batches"))
            bad = (v.n_bs = parse_list(val, v.bs, 1)) < 1;
        else if (!strcmp(k, "--streams"))
            bad = (a.streams = atoi(val)) < 1 || a.streams > MAX_STREAMS;
        else if (!strcmp(k, "--nmax")) {
            bad = (a.n_nmaxs = parse_list(val, a.nmaxs, 1)) < 1;
            for (int j = 0; !bad && j < a.n_nmaxs; j++)
                bad = a.nmaxs[j] > 16;
        } else if (!strcmp(k, "--pcts")) {
            bad = (a.n_pcts = parse_list(val, a.pcts, 0)) < 1;
            for (int j = 0; !bad && j < a.n_pcts; j++)
                bad = a.pcts[j] > 100;
        } else if (!strcmp(k, "--adaptive")) {
            if (!strcmp(val, "both"))
                a.n_ex = 2;
            else if (!strcmp(val, "0") || !strcmp(val, "1")) {
                a.n_ex = 1;
                a.adaptive[0] = atoi(val);
            } else
                bad = 1;
        } else if (!strcmp(k, "--only")) {
            a.want_ext = strstr(val, "ext") != NULL;
            a.want_ngram = strstr(val, "ngram") != NULL;
        } else
            bad = 1;
        if (bad) {
            fprintf(stderr, "specbench: bad option %s %s (k lists start with 1)\n", k, val);
            usage();
            return 2;
        }
    }
    return verify ? run_verify(&v) : run_accept(&a);
}
