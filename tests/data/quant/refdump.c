/*
 * refdump: what llama.cpp computes for a tiny model, in the layout of
 * ../shared/models/ref (see its README). Built by gen.sh against the peer
 * libllama; never part of our build.
 *
 *   refdump MODEL.gguf OUT_PREFIX N_GEN "prompt"
 *
 * Writes OUT_PREFIX.logits.f32 (row-major [n_pos][n_vocab], row i after
 * reading sequence[0..i]) and OUT_PREFIX.json (prompt_ids, greedy_ids,
 * greedy_margins, and how far two other llama.cpp setups land from the
 * logits file, for deriving tolerances: an F16 KV cache, and the sequence
 * split into ubatches of 5).
 *
 * Settings as the shared reference: 2 threads, n_ctx 512, KV F32, flash
 * attention off; greedy decoding takes the prompt in one decode and then
 * one token per call (argmax, lowest id on ties, no stop at EOS); the
 * teacher-forced pass clears the cache and decodes the whole sequence in
 * one call with logits at every position.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "llama.h"

static void quiet(enum ggml_log_level level, const char *text, void *ud)
{
    (void)ud;
    if (level >= GGML_LOG_LEVEL_ERROR)
        fputs(text, stderr);
}

static struct llama_context *make_ctx(struct llama_model *m, enum ggml_type kv, int ubatch)
{
    struct llama_context_params cp = llama_context_default_params();
    cp.n_ctx = 512;
    cp.n_batch = 512;
    cp.n_ubatch = ubatch;
    cp.n_threads = 2;
    cp.n_threads_batch = 2;
    cp.type_k = kv;
    cp.type_v = kv;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.no_perf = true;
    return llama_init_from_model(m, cp);
}

/* Logits of every position of seq[0..n) in one decode call. */
static int forced(struct llama_context *ctx, const llama_token *seq, int n, int nv, float *out)
{
    llama_memory_clear(llama_get_memory(ctx), true);
    struct llama_batch b = llama_batch_init(n, 0, 1);
    for (int i = 0; i < n; i++) {
        b.token[i] = seq[i];
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = 1;
    }
    b.n_tokens = n;
    int rc = llama_decode(ctx, b);
    if (rc == 0)
        for (int i = 0; i < n; i++)
            memcpy(out + (size_t)i * nv, llama_get_logits_ith(ctx, i), sizeof(float) * nv);
    llama_batch_free(b);
    return rc;
}

static void diff(const float *a, const float *b, size_t n, double *mx, double *mean)
{
    double m = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        m = d > m ? d : m;
        s += d;
    }
    *mx = m;
    *mean = s / (double)n;
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: refdump MODEL.gguf OUT_PREFIX N_GEN PROMPT\n");
        return 2;
    }
    const char *model_path = argv[1], *prefix = argv[2], *prompt = argv[4];
    int n_gen = atoi(argv[3]);
    llama_log_set(quiet, NULL);
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *m = llama_model_load_from_file(model_path, mp);
    if (!m) {
        fprintf(stderr, "refdump: cannot load %s\n", model_path);
        return 1;
    }
    const struct llama_vocab *voc = llama_model_get_vocab(m);
    int nv = llama_vocab_n_tokens(voc);
    llama_token seq[1024];
    int np = llama_tokenize(voc, prompt, (int)strlen(prompt), seq, 512, true, false);
    if (np <= 0 || np + n_gen > 500) {
        fprintf(stderr, "refdump: bad prompt or length\n");
        return 1;
    }
    struct llama_context *ctx = make_ctx(m, GGML_TYPE_F32, 512);
    float *margins = calloc((size_t)n_gen, sizeof(float));
    /* greedy: the prompt in one call, then a token a call */
    struct llama_batch b = llama_batch_init(512, 0, 1);
    int n = np;
    for (int i = 0; i < np; i++) {
        b.token[i] = seq[i];
        b.pos[i] = i;
        b.n_seq_id[i] = 1;
        b.seq_id[i][0] = 0;
        b.logits[i] = i == np - 1;
    }
    b.n_tokens = np;
    for (int k = 0; k < n_gen; k++) {
        if (llama_decode(ctx, b) != 0) {
            fprintf(stderr, "refdump: decode failed\n");
            return 1;
        }
        const float *lg = llama_get_logits_ith(ctx, -1);
        int best = 0;
        for (int v = 1; v < nv; v++)
            if (lg[v] > lg[best])
                best = v;
        float second = -INFINITY;
        for (int v = 0; v < nv; v++)
            if (v != best && lg[v] > second)
                second = lg[v];
        margins[k] = lg[best] - second;
        seq[n] = best;
        b.token[0] = best;
        b.pos[0] = n;
        b.n_seq_id[0] = 1;
        b.seq_id[0][0] = 0;
        b.logits[0] = 1;
        b.n_tokens = 1;
        n++;
    }
    llama_batch_free(b);
    size_t nl = (size_t)n * nv;
    float *ref = malloc(nl * 4), *alt = malloc(nl * 4);
    if (forced(ctx, seq, n, nv, ref) != 0)
        return 1;
    /* teacher-forced argmax against the greedy path */
    int mism = 0;
    for (int k = 0; k < n_gen; k++) {
        const float *row = ref + (size_t)(np - 1 + k) * nv;
        int best = 0;
        for (int v = 1; v < nv; v++)
            if (row[v] > row[best])
                best = v;
        mism += best != seq[np + k];
    }
    llama_free(ctx);
    double kv_max, kv_mean, ub_max, ub_mean;
    ctx = make_ctx(m, GGML_TYPE_F16, 512);
    if (forced(ctx, seq, n, nv, alt) != 0)
        return 1;
    diff(ref, alt, nl, &kv_max, &kv_mean);
    llama_free(ctx);
    ctx = make_ctx(m, GGML_TYPE_F32, 5);
    if (forced(ctx, seq, n, nv, alt) != 0)
        return 1;
    diff(ref, alt, nl, &ub_max, &ub_mean);
    llama_free(ctx);

    char path[4096];
    snprintf(path, sizeof path, "%s.logits.f32", prefix);
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(ref, 4, nl, f) != nl || fclose(f) != 0) {
        fprintf(stderr, "refdump: cannot write %s\n", path);
        return 1;
    }
    snprintf(path, sizeof path, "%s.json", prefix);
    f = fopen(path, "w");
    if (!f)
        return 1;
    const char *base = strrchr(prefix, '/') ? strrchr(prefix, '/') + 1 : prefix;
    const char *mbase = strrchr(model_path, '/') ? strrchr(model_path, '/') + 1 : model_path;
    fprintf(f, "{\n \"model\": \"%s\",\n \"prompt_text\": \"%s\",\n \"prompt_ids\": [", mbase,
            prompt);
    for (int i = 0; i < np; i++)
        fprintf(f, "%s%d", i ? ", " : "", seq[i]);
    fprintf(f, "],\n \"greedy_ids\": [");
    for (int k = 0; k < n_gen; k++)
        fprintf(f, "%s%d", k ? ", " : "", seq[np + k]);
    fprintf(f, "],\n \"greedy_margins\": [");
    for (int k = 0; k < n_gen; k++)
        fprintf(f, "%s%.6g", k ? ", " : "", margins[k]);
    fprintf(f,
            "],\n \"n_vocab\": %d,\n \"logits_file\": \"%s.logits.f32\",\n"
            " \"logits_shape\": [%d, %d],\n \"tf_argmax_mismatches\": %d,\n"
            " \"diff_vs_logits_file\": {\"kv_f16_max\": %.3g, \"kv_f16_mean\": %.3g,"
            " \"ub5_max\": %.3g, \"ub5_mean\": %.3g}\n}\n",
            nv, base, n, nv, mism, kv_max, kv_mean, ub_max, ub_mean);
    fclose(f);
    llama_model_free(m);
    free(ref);
    free(alt);
    free(margins);
    return 0;
}
