/*
 * mkmodel --mmproj: a synthetic mmproj file (llama.cpp's "clip" GGUF
 * layout, read by src/vision/clip.c) for tests and benchmarks: by default
 * LLaVA-1.5 style (a CLIP ViT and the two-layer MLP projector); with
 * --projector internvl InternVL's (an InternViT: class token, no pre-LN,
 * GELU, layer scales ls1/ls2, every layer run; then the pixel shuffle by
 * --merge, default 2, and the projector mm.model.mlp.0 (LayerNorm), .1,
 * .3; ImageNet's mean and std; --min-tiles / --max-tiles for the tiling
 * grid, keys written only when given; the scale factor always). --flat-pos gives every position
 * the same embedding row, so that a class token's place in the sequence
 * changes nothing (tests compare with llama.cpp's graph through it). Part of tools/mkmodel.c,
 * included by it: it uses that file's generator (struct gen, gen_worker).
 *
 * Weights: matrices N(0, 1/sqrt(n_in)), so each layer's outputs keep a
 * unit scale and any wrong operation shows in the output; the patch
 * convolution likewise over its 3 * P * P inputs; biases, the class and
 * position embeddings N(0, 0.1); LayerNorm weights 1 + N(0, 0.1) and
 * biases N(0, 0.1). Matrices take --type (f32, f16, q8_0; a row length
 * the type's block does not divide falls back as mkmodel's models do);
 * the patch convolution is F16 unless --type f32 (llama.cpp's converter
 * keeps it F16), the position embeddings F16 likewise, the rest F32.
 */
#include <stddef.h>

struct mmproj_opts {
    const char *out;
    int64_t image_size, patch_size, n_embd, n_ff, n_head, n_layer, proj_dim, n_mm;
    int64_t feature_layer; /* -1: no key */
    int no_class, gelu, post_ln, flat_pos;
    int internvl;
    int64_t merge, min_tiles, max_tiles; /* 0: no key */
    enum ifl_type type;
    uint64_t seed;
};

static const char mmproj_usage[] =
    "usage: mkmodel -o OUT.gguf --mmproj [--image-size 32] [--patch-size 8] [--n-embd 64]\n"
    "               [--n-ff 128] [--n-head 4] [--n-layer 3] [--proj-dim 64] [--n-mm N]\n"
    "               [--feature-layer L] [--no-class] [--gelu] [--post-ln]\n"
    "               [--type f32|f16|q8_0] [--seed S] [--flat-pos]\n"
    "               [--projector mlp|internvl] [--merge 2] [--min-tiles N] [--max-tiles N]\n"
    "       (a LLaVA-1.5 style mmproj: CLIP ViT + mlp projector, or InternVL's; --proj-dim\n"
    "        is the text model's n_embd, --n-mm the projector's hidden width, the proj-dim\n"
    "        by default)\n";

static int mmproj_parse(int argc, char **argv, struct mmproj_opts *o)
{
    static const struct {
        const char *flag;
        size_t off;
        int64_t lo, hi;
    } ints[] = {
        {"--image-size", offsetof(struct mmproj_opts, image_size), 1, 4096},
        {"--patch-size", offsetof(struct mmproj_opts, patch_size), 1, 4096},
        {"--n-embd", offsetof(struct mmproj_opts, n_embd), 1, 16384},
        {"--n-ff", offsetof(struct mmproj_opts, n_ff), 1, 65536},
        {"--n-head", offsetof(struct mmproj_opts, n_head), 1, 1024},
        {"--n-layer", offsetof(struct mmproj_opts, n_layer), 1, 256},
        {"--proj-dim", offsetof(struct mmproj_opts, proj_dim), 1, 65536},
        {"--n-mm", offsetof(struct mmproj_opts, n_mm), 1, 65536},
        {"--feature-layer", offsetof(struct mmproj_opts, feature_layer), 0, 256},
        {"--seed", offsetof(struct mmproj_opts, seed), 0, INT64_MAX},
        {"--merge", offsetof(struct mmproj_opts, merge), 1, 64},
        {"--min-tiles", offsetof(struct mmproj_opts, min_tiles), 1, 63},
        {"--max-tiles", offsetof(struct mmproj_opts, max_tiles), 1, 63},
    };
    memset(o, 0, sizeof *o);
    o->image_size = 32;
    o->patch_size = 8;
    o->n_embd = 64;
    o->n_ff = 128;
    o->n_head = 4;
    o->n_layer = 3;
    o->proj_dim = 64;
    o->feature_layer = -1;
    o->type = IFL_TYPE_F32;
    o->seed = 1234;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--mmproj"))
            continue;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(mmproj_usage, stdout);
            exit(0);
        }
        if (!strcmp(a, "--flat-pos")) {
            o->flat_pos = 1;
            continue;
        }
        if (!strcmp(a, "--no-class") || !strcmp(a, "--gelu") || !strcmp(a, "--post-ln")) {
            *(a[2] == 'n' ? &o->no_class : a[2] == 'g' ? &o->gelu : &o->post_ln) = 1;
            continue;
        }
        if (i + 1 >= argc)
            return bad_arg("%s: unknown option or missing value%s", a, "");
        const char *v = argv[++i];
        int found = 0;
        for (size_t k = 0; k < sizeof ints / sizeof *ints; k++) {
            if (strcmp(a, ints[k].flag))
                continue;
            found = 1;
            int64_t val;
            if (parse_int(v, ints[k].lo, ints[k].hi, &val))
                return bad_arg("%s: bad value '%s'", a, v);
            memcpy((char *)o + ints[k].off, &val, sizeof val);
        }
        if (found)
            continue;
        if (!strcmp(a, "-o")) {
            o->out = v;
        } else if (!strcmp(a, "--projector")) {
            if (strcmp(v, "mlp") && strcmp(v, "internvl"))
                return bad_arg("--projector: '%s' (mlp or internvl)%s", v, "");
            o->internvl = !strcmp(v, "internvl");
        } else if (!strcmp(a, "--type")) {
            if (!strcmp(v, "f32"))
                o->type = IFL_TYPE_F32;
            else if (!strcmp(v, "f16"))
                o->type = IFL_TYPE_F16;
            else if (!strcmp(v, "q8_0"))
                o->type = IFL_TYPE_Q8_0;
            else
                return bad_arg("--type: '%s' (an mmproj takes f32, f16 or q8_0)%s", v, "");
        } else {
            return bad_arg("unknown option '%s' with --mmproj%s", a, "");
        }
    }
    if (!o->out || !*o->out)
        return bad_arg("missing -o OUT.gguf%s%s", "", "");
    if (o->patch_size > o->image_size)
        return bad_arg("--patch-size is larger than --image-size%s%s", "", "");
    if (o->n_embd % o->n_head)
        return bad_arg("--n-head must divide --n-embd%s%s", "", "");
    if (o->feature_layer > o->n_layer)
        return bad_arg("--feature-layer is past --n-layer%s%s", "", "");
    if (!o->n_mm)
        o->n_mm = o->proj_dim;
    if (!o->internvl && (o->merge || o->min_tiles || o->max_tiles))
        return bad_arg("--merge, --min-tiles and --max-tiles need --projector internvl%s%s", "",
                       "");
    if (o->internvl && (o->no_class || o->feature_layer >= 0))
        return bad_arg("--projector internvl takes neither --no-class nor --feature-layer "
                       "(InternViT has a class token and runs every layer)%s%s",
                       "", "");
    if (o->internvl && (o->image_size / o->patch_size) % (o->merge ? o->merge : 2))
        return bad_arg("--merge must divide the patches a side%s%s", "", "");
    if (o->min_tiles && o->max_tiles && o->min_tiles > o->max_tiles)
        return bad_arg("--min-tiles is over --max-tiles%s%s", "", "");
    return 0;
}

/* The position embeddings with every row the same (--flat-pos): one row
 * drawn as add_vector draws, repeated. */
static int mmproj_flat_pos(struct gen *g, int64_t E, int64_t n_pos)
{
    uint64_t st = g->seed ^ name_hash("v.position_embd.weight");
    float *v = malloc(sizeof(float) * (size_t)(E * n_pos));
    if (!v)
        return -1;
    for (int64_t i = 0; i < E; i++) {
        /* a uniform pair to a normal (Box-Muller), std 0.1 */
        double u1 = ((double)(ifl_splitmix64(&st) >> 11) + 1.0) / 9007199254740993.0;
        double u2 = (double)(ifl_splitmix64(&st) >> 11) / 9007199254740992.0;
        v[i] = (float)(0.1 * sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2));
    }
    for (int64_t r = 1; r < n_pos; r++)
        memcpy(v + r * E, v, sizeof(float) * (size_t)E);
    int64_t ne[2] = {E, n_pos};
    int rc = ifl_gguf_writer_add_tensor(g->w, "v.position_embd.weight", IFL_TYPE_F32, 2, ne, v,
                                        sizeof(float) * (size_t)(E * n_pos));
    free(v);
    g->bytes += sizeof(float) * (size_t)(E * n_pos);
    return rc ? -1 : 0;
}

/* Draws a tensor of any shape whose rows are ne[0] long and adds it. */
static int mmproj_add(struct gen *g, const char *name, enum ifl_type type, int n_dims,
                      const int64_t *ne, float mean, float std)
{
    int64_t rows = 1;
    for (int d = 1; d < n_dims; d++)
        rows *= ne[d];
    if (n_dims <= 2)
        return add_random(g, name, type, n_dims, ne[0], rows, mean, std);
    /* a convolution: drawn as rows, stored with its shape */
    struct gen_job j = {0};
    j.rows = rows;
    j.row_len = ne[0];
    j.type = type;
    j.row_size = ifl_type_row_size(type, ne[0]);
    j.mean = mean;
    j.std = std;
    j.seed = g->seed ^ name_hash(name);
    j.chunk_rows = CHUNK_ELEMS / ne[0] > 0 ? CHUNK_ELEMS / ne[0] : 1;
    j.n_chunks = (rows + j.chunk_rows - 1) / j.chunk_rows;
    j.quant = ifl_kernels_ref()->quant[type];
    size_t nbytes = j.row_size * (size_t)rows;
    j.out = malloc(nbytes);
    if (!j.out)
        return -1;
    for (int t = 0; t < g->nth; t++) {
        float *p = realloc(g->scratch[t], (size_t)(j.chunk_rows * ne[0]) * sizeof(float));
        if (!p) {
            free(j.out);
            return -1;
        }
        g->scratch[t] = p;
    }
    j.scratch = g->scratch;
    ifl_pool_run(g->pool, gen_worker, &j);
    int rc = ifl_gguf_writer_add_tensor(g->w, name, type, n_dims, ne, j.out, nbytes);
    free(j.out);
    if (rc)
        return -1;
    g->bytes += nbytes;
    return 0;
}

static int mmproj_linear(struct gen *g, const struct mmproj_opts *o, const char *base, int64_t n_in,
                         int64_t n_out)
{
    char name[96];
    int64_t ne[2] = {n_in, n_out};
    snprintf(name, sizeof name, "%s.weight", base);
    if (mmproj_add(g, name, fit_type(name, o->type, n_in), 2, ne, 0.0f, 1.0f / sqrtf((float)n_in)))
        return -1;
    snprintf(name, sizeof name, "%s.bias", base);
    return add_vector(g, name, n_out, 0.0f, 0.1f);
}

static int mmproj_norm(struct gen *g, const char *base, int64_t n)
{
    char name[96];
    snprintf(name, sizeof name, "%s.weight", base);
    if (add_vector(g, name, n, 1.0f, 0.1f))
        return -1;
    snprintf(name, sizeof name, "%s.bias", base);
    return add_vector(g, name, n, 0.0f, 0.1f);
}

static int mmproj_write(struct gen *g, const struct mmproj_opts *o)
{
    struct ifl_gguf_writer *w = g->w;
    const int64_t E = o->n_embd, P = o->patch_size, side = o->image_size / o->patch_size;
    const int64_t n_pos = side * side + (o->no_class ? 0 : 1);
    const int vl = o->internvl;
    const int64_t M = vl ? (o->merge ? o->merge : 2) : 1;
    static const float mean_clip[3] = {0.48145466f, 0.4578275f, 0.40821073f};
    static const float std_clip[3] = {0.26862954f, 0.26130258f, 0.27577711f};
    static const float mean_inet[3] = {0.485f, 0.456f, 0.406f};
    static const float std_inet[3] = {0.229f, 0.224f, 0.225f};
    const char *proj = vl ? "internvl" : "mlp";
    if (ifl_gguf_writer_set_str(w, "general.architecture", "clip", 4) ||
        ifl_gguf_writer_set_str(w, "general.name", "mkmodel mmproj", 14) ||
        ifl_gguf_writer_set_u32(w, "general.file_type",
                                o->type == IFL_TYPE_F32   ? 0
                                : o->type == IFL_TYPE_F16 ? 1
                                                          : 7) ||
        ifl_gguf_writer_set_bool(w, "clip.has_text_encoder", 0) ||
        ifl_gguf_writer_set_bool(w, "clip.has_vision_encoder", 1) ||
        (!vl && ifl_gguf_writer_set_bool(w, "clip.has_llava_projector", 1)) ||
        ifl_gguf_writer_set_str(w, "clip.projector_type", proj, strlen(proj)) ||
        ifl_gguf_writer_set_bool(w, "clip.use_gelu", vl || o->gelu) ||
        ifl_gguf_writer_set_u32(w, "clip.vision.image_size", (uint32_t)o->image_size) ||
        ifl_gguf_writer_set_u32(w, "clip.vision.patch_size", (uint32_t)P) ||
        ifl_gguf_writer_set_u32(w, "clip.vision.embedding_length", (uint32_t)E) ||
        ifl_gguf_writer_set_u32(w, "clip.vision.feed_forward_length", (uint32_t)o->n_ff) ||
        ifl_gguf_writer_set_u32(w, "clip.vision.projection_dim", (uint32_t)o->proj_dim) ||
        ifl_gguf_writer_set_u32(w, "clip.vision.attention.head_count", (uint32_t)o->n_head) ||
        ifl_gguf_writer_set_f32(w, "clip.vision.attention.layer_norm_epsilon",
                                vl ? 1e-6f : 1e-5f) ||
        ifl_gguf_writer_set_u32(w, "clip.vision.block_count", (uint32_t)o->n_layer) ||
        ifl_gguf_writer_set_arr(w, "clip.vision.image_mean", IFL_GGUF_FLOAT32,
                                vl ? mean_inet : mean_clip, 3) ||
        ifl_gguf_writer_set_arr(w, "clip.vision.image_std", IFL_GGUF_FLOAT32,
                                vl ? std_inet : std_clip, 3))
        return -1;
    /* the scale factor is always written, as llama.cpp's converter does
     * (llama.cpp takes 1, no shuffle, when the key is absent) */
    if (vl && (ifl_gguf_writer_set_u32(w, "clip.vision.projector.scale_factor", (uint32_t)M) ||
               (o->min_tiles && ifl_gguf_writer_set_u32(w, "clip.vision.preproc_min_tiles",
                                                        (uint32_t)o->min_tiles)) ||
               (o->max_tiles && ifl_gguf_writer_set_u32(w, "clip.vision.preproc_max_tiles",
                                                        (uint32_t)o->max_tiles))))
        return -1;
    if (o->feature_layer >= 0) {
        int32_t fl = (int32_t)o->feature_layer;
        if (ifl_gguf_writer_set_arr(w, "clip.vision.feature_layer", IFL_GGUF_INT32, &fl, 1))
            return -1;
    }
    enum ifl_type f16 = o->type == IFL_TYPE_F32 ? IFL_TYPE_F32 : IFL_TYPE_F16;
    /* llama.cpp's InternVL converter keeps the position embeddings F32 */
    enum ifl_type tpos = vl ? IFL_TYPE_F32 : f16;
    int64_t pe[4] = {P, P, 3, E}, pos[2] = {E, n_pos};
    if (mmproj_add(g, "v.patch_embd.weight", f16, 4, pe, 0.0f, 1.0f / sqrtf((float)(3 * P * P))) ||
        add_vector(g, "v.patch_embd.bias", E, 0.0f, 0.1f) ||
        (!o->no_class && add_vector(g, "v.class_embd", E, 0.0f, 0.1f)) ||
        (o->flat_pos ? mmproj_flat_pos(g, E, n_pos)
                     : mmproj_add(g, "v.position_embd.weight", tpos, 2, pos, 0.0f, 0.1f)) ||
        (!vl && mmproj_norm(g, "v.pre_ln", E)) || (o->post_ln && mmproj_norm(g, "v.post_ln", E)))
        return -1;
    for (int64_t il = 0; il < o->n_layer; il++) {
        char b[64];
        static const char *const qkvo[4] = {"attn_q", "attn_k", "attn_v", "attn_out"};
        snprintf(b, sizeof b, "v.blk.%lld.ln1", (long long)il);
        if (mmproj_norm(g, b, E))
            return -1;
        for (int i = 0; i < 4; i++) {
            snprintf(b, sizeof b, "v.blk.%lld.%s", (long long)il, qkvo[i]);
            if (mmproj_linear(g, o, b, E, E))
                return -1;
        }
        snprintf(b, sizeof b, "v.blk.%lld.ln2", (long long)il);
        if (mmproj_norm(g, b, E))
            return -1;
        /* llava's converter names fc1 (E -> n_ff) ffn_down and fc2 ffn_up;
         * real files carry that swap, so these do too (InternVL's do not) */
        snprintf(b, sizeof b, "v.blk.%lld.%s", (long long)il, vl ? "ffn_up" : "ffn_down");
        if (mmproj_linear(g, o, b, E, o->n_ff))
            return -1;
        snprintf(b, sizeof b, "v.blk.%lld.%s", (long long)il, vl ? "ffn_down" : "ffn_up");
        if (mmproj_linear(g, o, b, o->n_ff, E))
            return -1;
        if (vl) {
            snprintf(b, sizeof b, "v.blk.%lld.ls1.weight", (long long)il);
            if (add_vector(g, b, E, 0.5f, 0.1f))
                return -1;
            snprintf(b, sizeof b, "v.blk.%lld.ls2.weight", (long long)il);
            if (add_vector(g, b, E, 0.5f, 0.1f))
                return -1;
        }
    }
    if (vl)
        return mmproj_norm(g, "mm.model.mlp.0", E * M * M) ||
                       mmproj_linear(g, o, "mm.model.mlp.1", E * M * M, o->n_mm) ||
                       mmproj_linear(g, o, "mm.model.mlp.3", o->n_mm, o->proj_dim)
                   ? -1
                   : 0;
    return mmproj_linear(g, o, "mm.0", E, o->n_mm) ||
                   mmproj_linear(g, o, "mm.2", o->n_mm, o->proj_dim)
               ? -1
               : 0;
}

static int main_mmproj(int argc, char **argv)
{
    struct mmproj_opts o;
    int rc = mmproj_parse(argc, argv, &o);
    if (rc)
        return rc;
    char err[IFL_ERR_LEN] = "";
    struct gen g = {0};
    int status = 1;
    uint64_t seed = o.seed;
    if (ifl_gguf_writer_create(&g.w) || ifl_pool_create(&g.pool, 0))
        goto out;
    g.nth = ifl_pool_size(g.pool);
    g.seed = ifl_splitmix64(&seed);
    g.scratch = calloc((size_t)g.nth, sizeof(float *));
    if (!g.scratch || mmproj_write(&g, &o))
        goto out;
    if (ifl_gguf_writer_write(g.w, o.out, err)) {
        fprintf(stderr, "mkmodel: %s\n", err);
        goto out;
    }
    fprintf(stderr,
            "mkmodel: wrote %s: mmproj (clip, %s) %s, image %lld, patch %lld, n_embd %lld, "
            "%lld layers, projection %lld, %.2f MiB\n",
            o.out, o.internvl ? "internvl" : "mlp", ifl_type_info(o.type)->name,
            (long long)o.image_size, (long long)o.patch_size, (long long)o.n_embd,
            (long long)o.n_layer, (long long)o.proj_dim, (double)g.bytes / (1024.0 * 1024.0));
    status = 0;
out:
    if (status && !*err)
        fprintf(stderr, "mkmodel: failed to build %s\n", o.out);
    if (g.scratch)
        for (int i = 0; i < g.nth; i++)
            free(g.scratch[i]);
    free(g.scratch);
    ifl_pool_free(g.pool);
    ifl_gguf_writer_free(g.w);
    return status;
}
