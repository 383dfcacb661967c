/*
 * `inflight tokenize` (stdin -> token ids) and `inflight info` (what a GGUF
 * model holds).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "core/buf.h"
#include "kernels/types.h"

int cmd_tokenize(int argc, char **argv)
{
    const char *path = NULL;
    int add_special = 0, parse_special = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--add-special")) {
            add_special = 1;
        } else if (!strcmp(a, "--parse-special")) {
            parse_special = 1;
        } else if ((!strcmp(a, "-m") || !strcmp(a, "--model")) && i + 1 < argc) {
            path = argv[++i];
        } else if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            puts("usage: inflight tokenize -m FILE [--add-special] [--parse-special] < text\n"
                 "  prints the token ids of all of stdin, space-separated on one line;\n"
                 "  by default adds no BOS/EOS and treats special-token text as plain text");
            return 0;
        } else {
            return cli_usage_error("tokenize", "unknown option '%s' (see --help)", a);
        }
    }
    if (!path)
        return cli_usage_error("tokenize", "a model or vocabulary is required (-m FILE)");
    char err[IFL_ERR_LEN] = "";
    struct ifl_gguf *g = NULL;
    struct ifl_vocab *v = NULL;
    if (ifl_gguf_open(&g, path, err) || ifl_vocab_load(&v, g, err)) {
        fprintf(stderr, "inflight tokenize: %s\n", err);
        ifl_gguf_free(g);
        return CLI_EXIT_USAGE;
    }
    ifl_gguf_free(g);
    struct ifl_buf in = {0};
    int status = 0;
    int32_t *ids = NULL;
    char chunk[1 << 16];
    for (size_t k; !in.oom && (k = fread(chunk, 1, sizeof chunk, stdin)) > 0;)
        ifl_buf_add(&in, chunk, k);
    int64_t n = 0;
    int rc = in.oom ? IFL_ENOMEM
                    : ifl_tokenize_alloc(v, in.p ? in.p : "", in.len, add_special, parse_special,
                                         &ids, &n);
    if (rc) {
        fprintf(stderr, "inflight tokenize: %s\n",
                rc == IFL_ENOMEM ? "out of memory" : "the text could not be tokenized");
        status = 1;
    } else {
        for (int64_t i = 0; i < n; i++)
            printf(i ? " %d" : "%d", ids[i]);
        putchar('\n');
    }
    free(ids);
    ifl_buf_free(&in);
    ifl_vocab_free(v);
    return status;
}

int cmd_info(int argc, char **argv)
{
    const char *path = NULL;
    for (int i = 1; i < argc; i++) {
        if ((!strcmp(argv[i], "-m") || !strcmp(argv[i], "--model")) && i + 1 < argc)
            path = argv[++i];
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) {
            puts("usage: inflight info -m FILE\n"
                 "  architecture, shapes, weight types, vocabulary and sizes of a GGUF model");
            return 0;
        } else
            return cli_usage_error("info", "unknown option '%s' (see --help)", argv[i]);
    }
    if (!path)
        return cli_usage_error("info", "a model is required (-m FILE)");
    char err[IFL_ERR_LEN] = "";
    struct ifl_model *m;
    if (ifl_model_load(&m, path, err)) {
        fprintf(stderr, "inflight info: %s\n", err);
        return CLI_EXIT_USAGE;
    }
    struct ifl_vocab *v = NULL;
    if (ifl_vocab_load(&v, m->gguf, err)) {
        fprintf(stderr, "inflight info: %s\n", err);
        ifl_model_free(m);
        return CLI_EXIT_USAGE;
    }
    const struct ifl_hparams *hp = &m->hp;
    const char *name = NULL;
    size_t nlen = 0;
    ifl_gguf_get_str(m->gguf, "general.name", &name, &nlen, NULL);
    printf("file:          %s (GGUF v%u, %zu bytes)\n", path, ifl_gguf_version(m->gguf),
           ifl_gguf_file_size(m->gguf));
    if (name)
        printf("name:          %.*s\n", (int)(nlen > 200 ? 200 : nlen), name);
    printf("architecture:  %s\n", hp->arch_name);
    printf("n_embd:        %d\n", hp->n_embd);
    printf("n_layer:       %d\n", hp->n_layer);
    printf("n_head:        %d (kv %d, head_dim %d, value dim %d)\n", hp->n_head, hp->n_head_kv,
           hp->head_dim, hp->head_dim_v);
    printf("n_ff:          %d%s\n", hp->n_ff, hp->n_expert ? " (each expert's)" : "");
    if (hp->n_expert)
        printf("experts:       %d, %d used a token\n", hp->n_expert, hp->n_expert_used);
    printf("n_ctx_train:   %d\n", hp->n_ctx_train);
    printf("rope:          %s, %d dims, base %g%s%s\n", hp->rope_neox ? "neox" : "normal",
           hp->n_rot, hp->rope_base, m->rope_freqs ? ", rope_freqs factors" : "",
           hp->rope_pos_scale != 1.0f ? ", linear scaling" : "");
    if (hp->yarn_factor > 0)
        printf("yarn:          factor %g, original context %d, beta fast %g, slow %g\n",
               hp->yarn_factor, hp->yarn_orig_ctx, hp->yarn_beta_fast, hp->yarn_beta_slow);
    if (m->layers && m->layers[0].attn_sinks)
        printf("sinks:         a learned logit per query head in each softmax\n");
    if (m->rope_long)
        printf("longrope:      short/long factors, original context %d, attn_factor %g\n",
               hp->n_ctx_orig, hp->rope_attn_factor);
    if (hp->n_swa > 0) {
        int n_slide = 0;
        for (int il = 0; il < hp->n_layer; il++)
            n_slide += ifl_hp_swa(hp, il);
        printf("sliding:       window %d on %d of %d layers, their rope base %g\n", hp->n_swa,
               n_slide, hp->n_layer, hp->rope_base_swa);
    }
    if (hp->attn_softcap > 0 || hp->final_softcap > 0)
        printf("soft-caps:     attention %g, final %g (0: none)\n", hp->attn_softcap,
               hp->final_softcap);
    printf("rms_eps:       %g\n", hp->rms_eps);
    printf("output:        %s\n", m->tied_output ? "tied to token_embd" : "separate matrix");
    int64_t counts[IFL_TYPE_COUNT] = {0};
    uint64_t params = 0;
    for (int64_t i = 0; i < ifl_gguf_n_tensors(m->gguf); i++) {
        const struct ifl_gguf_tensor *t = ifl_gguf_tensor(m->gguf, i);
        if (t->type < IFL_TYPE_COUNT)
            counts[t->type]++;
        params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2] * t->ne[3]);
    }
    printf("tensors:       %lld,", (long long)ifl_gguf_n_tensors(m->gguf));
    for (int t = 0; t < IFL_TYPE_COUNT; t++)
        if (counts[t])
            printf(" %s x%lld", ifl_type_info((uint32_t)t)->name, (long long)counts[t]);
    printf("\nparameters:    %llu (%.2f M)\n", (unsigned long long)params, params / 1e6);
    printf("weight bytes:  %llu (%.2f MiB, %.2f bits per weight)\n",
           (unsigned long long)m->weight_bytes, m->weight_bytes / 1048576.0,
           params ? 8.0 * (double)m->weight_bytes / (double)params : 0.0);
    printf("vocabulary:    %s, %d tokens, bos %d, eos %d%s\n",
           ifl_vocab_kind(v) == IFL_VOCAB_SPM   ? "sentencepiece"
           : ifl_vocab_kind(v) == IFL_VOCAB_WPM ? "wordpiece"
           : ifl_vocab_kind(v) == IFL_VOCAB_UGM ? "unigram"
                                                : "BPE",
           ifl_vocab_n_tokens(v), ifl_vocab_bos(v), ifl_vocab_eos(v),
           ifl_vocab_add_bos(v) ? ", adds BOS" : "");
    ifl_vocab_free(v);
    ifl_model_free(m);
    return 0;
}
