/* libFuzzer target for the LoRA adapter loader (src/model/lora.c): the
 * input is an adapter file, loaded against a tiny base model (llama, 2
 * layers, n_embd 32, n_ff 64, vocabulary 32, untied output, F32) that the
 * target writes once at start. A failure must leave *out NULL and say why
 * in a sentence starting "lora: "; a success must hand out exactly what
 * lora.h promises: every adapted matrix with the base's widths, A and B
 * allocated and finite, n_adapted and bytes consistent. ASan/UBSan watch
 * every read.
 *
 * The loader takes a path, so each input goes into a memfd read back
 * through /proc/self/fd (no disk). FUZZ_LORA_BASE=FILE keeps the base in
 * FILE, for making seeds with `mkmodel --lora-of FILE` (see README.md). */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/err.h"
#include "model/gguf.h"
#include "model/lora.h"
#include "model/model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static struct ifl_model *g_base;
static int g_fd = -1;
static volatile float sink;

static int add(struct ifl_gguf_writer *w, const char *name, int64_t ne0, int64_t ne1)
{
    size_t n = (size_t)(ne0 * ne1);
    float *v = malloc(n * sizeof(float));
    if (!v)
        return IFL_ENOMEM;
    for (size_t i = 0; i < n; i++) /* small, varied, deterministic */
        v[i] = ne1 == 1 ? 1.0f : 0.01f * (float)((i * 7919u) % 13u) - 0.06f;
    int64_t ne[2] = {ne0, ne1};
    int rc = ifl_gguf_writer_add_tensor(w, name, 0, ne1 == 1 ? 1 : 2, ne, v, n * sizeof(float));
    free(v);
    return rc;
}

static void make_base(void)
{
    const char *keep = getenv("FUZZ_LORA_BASE");
    char dir[] = "/tmp/fuzz_lora_XXXXXX", path[64], err[IFL_ERR_LEN] = "";
    if (!keep && !mkdtemp(dir))
        abort();
    snprintf(path, sizeof path, "%s/base.gguf", dir);
    struct ifl_gguf_writer *w = NULL;
    int rc = ifl_gguf_writer_create(&w);
    const uint32_t E = 32, L = 2, F = 64, V = 32;
    rc |= ifl_gguf_writer_set_str(w, "general.architecture", "llama", 5);
    rc |= ifl_gguf_writer_set_u32(w, "llama.embedding_length", E);
    rc |= ifl_gguf_writer_set_u32(w, "llama.block_count", L);
    rc |= ifl_gguf_writer_set_u32(w, "llama.feed_forward_length", F);
    rc |= ifl_gguf_writer_set_u32(w, "llama.attention.head_count", 2);
    rc |= ifl_gguf_writer_set_u32(w, "llama.attention.head_count_kv", 1);
    rc |= add(w, "token_embd.weight", E, V);
    for (uint32_t l = 0; l < L; l++) {
        char n[64];
#define T(s, a, b) (snprintf(n, sizeof n, "blk.%u." s, l), rc |= add(w, n, a, b))
        T("attn_norm.weight", E, 1);
        T("attn_q.weight", E, E);
        T("attn_k.weight", E, E / 2);
        T("attn_v.weight", E, E / 2);
        T("attn_output.weight", E, E);
        T("ffn_norm.weight", E, 1);
        T("ffn_gate.weight", E, F);
        T("ffn_up.weight", E, F);
        T("ffn_down.weight", F, E);
#undef T
    }
    rc |= add(w, "output_norm.weight", E, 1);
    rc |= add(w, "output.weight", E, V);
    if (rc || ifl_gguf_writer_write(w, keep ? keep : path, err) ||
        ifl_model_load(&g_base, keep ? keep : path, err)) {
        fprintf(stderr, "fuzz_lora: cannot make the base: %s\n", err);
        abort();
    }
    ifl_gguf_writer_free(w);
    if (!keep) { /* the mapping outlives the file */
        unlink(path);
        rmdir(dir);
    }
    g_fd = memfd_create("fuzz_lora", 0);
    if (g_fd < 0)
        abort();
}

static void check_mat(const struct ifl_lora_mat *m, int64_t n_in, int64_t n_out, float alpha,
                      int *n)
{
    if (!m->rank) {
        if (m->a || m->b)
            __builtin_trap();
        return;
    }
    if (m->rank < 0 || !m->a || !m->b || m->n_in != n_in || m->n_out != n_out || m->alpha != alpha)
        __builtin_trap();
    for (int64_t i = 0; i < m->rank * m->n_in; i++)
        if (!isfinite(m->a[i]))
            __builtin_trap();
    for (int64_t i = 0; i < m->rank * m->n_out; i++)
        if (!isfinite(m->b[i]))
            __builtin_trap();
    sink += ifl_lora_scale(m, 1.0f);
    (*n)++;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!g_base)
        make_base();
    if (ftruncate(g_fd, 0) || (size && pwrite(g_fd, data, size, 0) != (ssize_t)size))
        abort();
    char path[64], err[IFL_ERR_LEN];
    snprintf(path, sizeof path, "/proc/self/fd/%d", g_fd);
    err[0] = 0;
    struct ifl_lora *l = (struct ifl_lora *)1;
    if (ifl_lora_load(&l, path, g_base, err) != 0) {
        if (l != NULL || strncmp(err, "lora: ", 6) != 0 || !memchr(err, 0, sizeof err))
            __builtin_trap(); /* every failure must explain itself */
        return 0;
    }
    const struct ifl_model *b = g_base;
    int n = 0;
    if (l->n_layer != b->hp.n_layer || strcmp(l->arch, "llama"))
        __builtin_trap();
    for (int il = 0; il < l->n_layer; il++) {
        const struct ifl_layer_weights *w = &b->layers[il];
        const struct ifl_mat *mats[IFL_LORA_N_TARGETS] = {&w->wq,     &w->wk,   &w->wv,    &w->wo,
                                                          &w->w_gate, &w->w_up, &w->w_down};
        for (int t = 0; t < IFL_LORA_N_TARGETS; t++)
            check_mat(ifl_lora_layer_mat(l, il, (enum ifl_lora_target)t), mats[t]->n_in,
                      mats[t]->n_out, l->alpha, &n);
    }
    check_mat(&l->tok_embd, b->hp.n_vocab, b->hp.n_embd, l->alpha, &n);
    check_mat(&l->output, b->hp.n_embd, b->hp.n_vocab, l->alpha, &n);
    if (n != l->n_adapted || l->bytes < sizeof *l)
        __builtin_trap();
    ifl_lora_free(l);
    return 0;
}
