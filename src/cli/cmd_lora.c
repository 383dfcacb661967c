/*
 * `inflight lora merge`: writes a model whose adapted matrices are
 * W + sum over adapters of s B A (what llama-export-lora does), so a
 * fine-tune can be served without an adapter, or checked against one.
 *
 * Adapters are read by the runtime's loader (model/lora.h), so a merge
 * accepts exactly the files `--lora` does, with the same errors. Each
 * merged matrix is dequantised, gets every adapter's s B A added in double
 * and is rounded once, to F32 (or F16 with --type f16); every other tensor
 * is copied byte for byte, every metadata key verbatim. s is
 * scale * alpha / r, or the scale alone when the adapter's alpha is 0
 * (ifl_lora_scale).
 *
 * A tied base (no output.weight) whose token_embd is adapted gets an
 * output.weight of its own, a copy of the original token_embd: at run time
 * such an adapter changes the embedding lookup only, so must the merge.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cli/cli.h"
#include "kernels/kernels.h"
#include "kernels/types.h"
#include "model/gguf.h"
#include "model/lora.h"

#define MAX_ADAPTERS 64

static const char merge_help[] =
    "usage: inflight lora merge -m BASE.gguf --lora A.gguf[:SCALE] [--lora B.gguf[:SCALE] ...]\n"
    "                           -o OUT.gguf [--type f32|f16]\n"
    "  writes BASE with every adapted matrix replaced by W + s B A (s = SCALE * alpha / r,\n"
    "  or SCALE when the adapter's alpha is 0; SCALE defaults to 1). Merged matrices are\n"
    "  written as F32 (--type f16: F16); every other tensor and all metadata are copied.\n";

/* The adapted matrix of l that base tensor `name` is, or NULL. */
static const struct ifl_lora_mat *lora_mat_of(const struct ifl_lora *l, const char *name)
{
    if (!strcmp(name, "token_embd.weight"))
        return l->tok_embd.rank ? &l->tok_embd : NULL;
    if (!strcmp(name, "output.weight"))
        return l->output.rank ? &l->output : NULL;
    static const char *const targets[IFL_LORA_N_TARGETS] = {
        "attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"};
    int il, used = 0;
    char what[32];
    if (sscanf(name, "blk.%d.%31[a-z_].weight%n", &il, what, &used) != 2 ||
        used != (int)strlen(name) || il < 0 || il >= l->n_layer)
        return NULL;
    for (int t = 0; t < IFL_LORA_N_TARGETS; t++)
        if (!strcmp(what, targets[t])) {
            const struct ifl_lora_mat *m = ifl_lora_layer_mat(l, il, (enum ifl_lora_target)t);
            return m->rank ? m : NULL;
        }
    return NULL;
}

struct merge {
    struct ifl_model *base;
    struct ifl_lora *lora[MAX_ADAPTERS];
    float scale[MAX_ADAPTERS];
    int n;
    enum ifl_type out_type;
};

/* One merged tensor, made when the writer reaches it. */
struct merge_job {
    const struct merge *M;
    const struct ifl_gguf_tensor *t;
    const struct ifl_lora_mat *mats[MAX_ADAPTERS];
};

/* Writes base tensor t merged with every adapter that adapts it into dst
 * (out_type rows). */
static int merge_fill(void *ctx, void *dst, size_t nbytes, char *err)
{
    const struct merge_job *J = ctx;
    const struct merge *M = J->M;
    const struct ifl_gguf_tensor *t = J->t;
    /* rows of n_in (ne[0]) values, n_rows (ne[1]) of them; the loader has
     * checked the adapters' shapes against these */
    const int64_t n_in = t->ne[0], n_rows = t->ne[1];
    const int embd = !strcmp(t->name, "token_embd.weight");
    ifl_dequant_fn dq = ifl_kernels_ref()->dequant[t->type];
    ifl_quant_fn q = ifl_kernels_ref()->quant[M->out_type];
    size_t out_row = ifl_type_row_size(M->out_type, n_in);
    uint8_t *out = dst;
    (void)nbytes;
    float *row = malloc((size_t)n_in * sizeof(float));
    double *acc = malloc((size_t)n_in * sizeof(double));
    if (!row || !acc) {
        free(row);
        free(acc);
        return ifl_err(err, IFL_ENOMEM, "lora merge: out of memory for '%s'", t->name);
    }
    size_t in_row = ifl_type_row_size((enum ifl_type)t->type, n_in);
    for (int64_t o = 0; o < n_rows; o++) {
        dq((const uint8_t *)t->data + (size_t)o * in_row, row, n_in);
        for (int64_t i = 0; i < n_in; i++)
            acc[i] = (double)row[i];
        for (int j = 0; j < M->n; j++) {
            const struct ifl_lora_mat *m = J->mats[j];
            if (!m)
                continue;
            const double s = (double)ifl_lora_scale(m, M->scale[j]);
            const int64_t r = m->rank;
            if (embd) { /* row o is token o: a[o] (r values), b [n_embd][r] */
                const float *a = m->a + o * r;
                for (int64_t e = 0; e < n_in; e++) {
                    double d = 0.0;
                    for (int64_t k = 0; k < r; k++)
                        d += (double)m->b[e * r + k] * (double)a[k];
                    acc[e] += s * d;
                }
            } else { /* row o is output o: sum_k b[o][k] a[k][.] */
                for (int64_t k = 0; k < r; k++) {
                    const double bk = s * (double)m->b[o * r + k];
                    const float *a = m->a + k * n_in;
                    for (int64_t i = 0; i < n_in; i++)
                        acc[i] += bk * (double)a[i];
                }
            }
        }
        for (int64_t i = 0; i < n_in; i++)
            row[i] = (float)acc[i];
        q(row, out + (size_t)o * out_row, n_in);
    }
    free(row);
    free(acc);
    return 0;
}

/* Adds base tensor t to w: as it stands (a view of the mapped base), or,
 * when an adapter adapts it, merged at write time by job J. *merged
 * counts the matrices merged. */
static int merge_tensor(const struct merge *M, struct ifl_gguf_writer *w,
                        const struct ifl_gguf_tensor *t, struct merge_job *J, int *merged,
                        char *err)
{
    int any = 0;
    J->M = M;
    J->t = t;
    for (int j = 0; j < M->n; j++)
        any |= (J->mats[j] = lora_mat_of(M->lora[j], t->name)) != NULL;
    if (!any)
        return ifl_gguf_writer_add_tensor_ref(w, t->name, t->type, t->n_dims, t->ne, t->data,
                                              t->nbytes);
    const struct ifl_type_info *ti = ifl_type_info(t->type);
    if (!ifl_kernels_ref()->dequant[t->type] || !ifl_kernels_ref()->quant[M->out_type])
        return ifl_err(err, IFL_EUNSUPPORTED, "lora merge: tensor '%s': type %s", t->name,
                       ti && ti->name ? ti->name : "?");
    size_t out_row = ifl_type_row_size(M->out_type, t->ne[0]);
    (*merged)++;
    return ifl_gguf_writer_add_tensor_fill(w, t->name, M->out_type, t->n_dims, t->ne,
                                           out_row * (size_t)t->ne[1], merge_fill, J);
}

/* The output is written tensor by tensor: the base's tensors straight from
 * its mapping, each merged one made as the writer reaches it, so the merge
 * holds one merged matrix at a time, never the whole output. */
static int merge_write(const struct merge *M, const char *out_path, int *merged, char *err)
{
    struct ifl_gguf *g = M->base->gguf;
    struct ifl_gguf_writer *w = NULL;
    int64_t nt = ifl_gguf_n_tensors(g);
    struct merge_job *jobs = calloc(nt > 0 ? (size_t)nt : 1, sizeof *jobs);
    int rc = jobs ? ifl_gguf_writer_create(&w) : IFL_ENOMEM;
    if (rc) {
        free(jobs);
        return ifl_err(err, rc, "lora merge: out of memory");
    }
    for (int64_t i = 0; !rc && i < ifl_gguf_n_kv(g); i++)
        rc = ifl_gguf_writer_copy_kv(w, g, i);
    for (int64_t i = 0; !rc && i < nt; i++)
        rc = merge_tensor(M, w, ifl_gguf_tensor(g, i), &jobs[i], merged, err);
    int embd_adapted = 0;
    for (int j = 0; j < M->n; j++)
        embd_adapted |= M->lora[j]->tok_embd.rank > 0;
    if (!rc && M->base->tied_output && embd_adapted) {
        /* the LM head stays the original table (see the top of the file) */
        const struct ifl_gguf_tensor *t = ifl_gguf_find_tensor(g, "token_embd.weight");
        rc = ifl_gguf_writer_add_tensor_ref(w, "output.weight", t->type, t->n_dims, t->ne, t->data,
                                            t->nbytes);
    }
    /* a failed writer call left its sentence in the writer: write reports it */
    if (!rc || !*err)
        rc = ifl_gguf_writer_write(w, out_path, err);
    ifl_gguf_writer_free(w);
    free(jobs);
    return rc;
}

static int cmd_lora_merge(int argc, char **argv)
{
    const char *base_path = NULL, *out_path = NULL;
    const char *specs[MAX_ADAPTERS];
    struct merge M = {.out_type = IFL_TYPE_F32};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(merge_help, stdout);
            return 0;
        }
        if (i + 1 >= argc)
            return cli_usage_error("lora merge",
                                   "unknown option or missing value '%s' (see "
                                   "--help)",
                                   a);
        const char *v = argv[++i];
        if (!strcmp(a, "-m") || !strcmp(a, "--model")) {
            base_path = v;
        } else if (!strcmp(a, "-o") || !strcmp(a, "--output")) {
            out_path = v;
        } else if (!strcmp(a, "--lora")) {
            if (M.n == MAX_ADAPTERS)
                return cli_usage_error("lora merge", "at most %d adapters", MAX_ADAPTERS);
            specs[M.n++] = v;
        } else if (!strcmp(a, "--type")) {
            if (!strcmp(v, "f32"))
                M.out_type = IFL_TYPE_F32;
            else if (!strcmp(v, "f16"))
                M.out_type = IFL_TYPE_F16;
            else
                return cli_usage_error("lora merge", "--type: '%s' is not f32 or f16", v);
        } else {
            return cli_usage_error("lora merge", "unknown option '%s' (see --help)", a);
        }
    }
    if (!base_path || !out_path || !M.n)
        return cli_usage_error("lora merge", "-m BASE, at least one --lora FILE and -o OUT are "
                                             "required (see --help)");

    /* Merging reads the file's rows; repacking them for the kernels would
     * only cost time and memory. */
    setenv("IFL_REPACK", "0", 1);
    char err[IFL_ERR_LEN] = "";
    int status = CLI_EXIT_USAGE;
    if (ifl_model_load(&M.base, base_path, err)) {
        fprintf(stderr, "inflight lora merge: %s\n", err);
        return CLI_EXIT_USAGE;
    }
    int n_loaded = 0;
    for (; n_loaded < M.n; n_loaded++) {
        /* FILE:SCALE when what follows the last ':' is a number, else FILE */
        char path[1024];
        const char *spec = specs[n_loaded];
        const char *colon = strrchr(spec, ':');
        double scale = 1.0;
        size_t plen = strlen(spec);
        if (colon && cli_parse_f64(colon + 1, -1e6, 1e6, &scale) == 0)
            plen = (size_t)(colon - spec);
        else if (colon && colon[1] && strchr("+-.0123456789", colon[1])) {
            fprintf(stderr, "inflight lora merge: --lora %s: bad scale '%s'\n", spec, colon + 1);
            goto out;
        }
        if (plen >= sizeof path) {
            fprintf(stderr, "inflight lora merge: --lora: path too long\n");
            goto out;
        }
        memcpy(path, spec, plen);
        path[plen] = 0;
        M.scale[n_loaded] = (float)scale;
        if (ifl_lora_load(&M.lora[n_loaded], path, M.base, err)) {
            fprintf(stderr, "inflight lora merge: %s: %s\n", path, err);
            goto out;
        }
    }
    int merged = 0;
    if (merge_write(&M, out_path, &merged, err)) {
        fprintf(stderr, "inflight lora merge: %s\n", err);
        status = 1;
        goto out;
    }
    fprintf(stderr, "inflight lora merge: wrote %s: %d matrices merged (%s) from %d adapter%s\n",
            out_path, merged, ifl_type_info(M.out_type)->name, M.n, M.n > 1 ? "s" : "");
    status = 0;
out:
    for (int j = 0; j < n_loaded; j++)
        ifl_lora_free(M.lora[j]);
    ifl_model_free(M.base);
    return status;
}

int cmd_lora(int argc, char **argv)
{
    if (argc >= 2 && !strcmp(argv[1], "merge"))
        return cmd_lora_merge(argc - 1, argv + 1);
    if (argc >= 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        fputs(merge_help, stdout);
        return 0;
    }
    return cli_usage_error("lora", "a subcommand is required: merge (see 'inflight lora merge "
                                   "--help')");
}
