/* libFuzzer target for the mmproj loader (src/vision/clip.c): the input is
 * an mmproj GGUF file, read from memory. A failure must leave *out NULL
 * and say why in a sentence starting "mmproj: " or "gguf"; a success must
 * hand out what clip.h promises (shapes that fit the hyper-parameters,
 * every pointer the computation reads), and a file small enough is then
 * run: one grey image encoded, every output finite or not, but no read out
 * of bounds (ASan/UBSan watch). */
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/err.h"
#include "model/gguf.h"
#include "vision/clip.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static volatile float sink;

static void check_mat(const struct ifl_mat *m, int64_t n_in, int64_t n_out)
{
    if (!m->data || m->n_in != n_in || m->n_out != n_out)
        abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ifl_gguf *g = NULL;
    char err[IFL_ERR_LEN] = "";
    /* the reader keeps a view of the buffer: give it a copy it may keep */
    uint8_t *copy = malloc(size ? size : 1);
    if (!copy)
        return 0;
    memcpy(copy, data, size);
    if (ifl_gguf_open_mem(&g, copy, size, err)) {
        free(copy);
        return 0;
    }
    struct ifl_clip *c = (struct ifl_clip *)1;
    int rc = ifl_clip_from_gguf(&c, g, err);
    if (rc) {
        if (c || (strncmp(err, "mmproj: ", 8) && strncmp(err, "gguf", 4))) {
            fprintf(stderr, "bad failure: rc %d, out %p, '%s'\n", rc, (void *)c, err);
            abort();
        }
        free(copy);
        return 0;
    }
    const struct ifl_clip_hparams *hp = &c->hp;
    if (hp->n_side != hp->image_size / hp->patch_size || hp->n_patches != hp->n_side * hp->n_side ||
        hp->n_pos != hp->n_patches + (c->cls ? 1 : 0) || hp->head_dim * hp->n_head != hp->n_embd ||
        hp->n_run < 0 || hp->n_run > hp->n_layer || !c->pos || !c->layers)
        abort();
    check_mat(&c->patch, 3 * (int64_t)hp->patch_size * hp->patch_size, hp->n_embd);
    for (int il = 0; il < hp->n_layer; il++) {
        const struct ifl_clip_layer *L = &c->layers[il];
        check_mat(&L->wq, hp->n_embd, hp->n_embd);
        check_mat(&L->wo, hp->n_embd, hp->n_embd);
        check_mat(&L->up, hp->n_embd, hp->n_ff);
        check_mat(&L->down, hp->n_ff, hp->n_embd);
        if (!L->ln1_w || !L->ln2_w)
            abort();
    }
    check_mat(&c->mm0, (int64_t)hp->n_embd * hp->merge * hp->merge, hp->n_mm);
    if (hp->n_tok * hp->merge * hp->merge != hp->n_patches ||
        (hp->proj == IFL_CLIP_PROJ_INTERNVL && (!c->cls || !c->mmln_w || !c->mmln_b)))
        abort();
    check_mat(&c->mm2, hp->n_mm, hp->n_out);
    /* small enough to run quickly: encode one image */
    int64_t work = (int64_t)hp->n_pos * hp->n_embd * (hp->n_embd + hp->n_ff) * hp->n_run +
                   (int64_t)hp->n_patches * hp->n_mm * (hp->n_embd + hp->n_out);
    if (work < (1 << 22) && hp->image_size <= 64) {
        struct ifl_clip_ctx *x = NULL;
        if (!ifl_clip_ctx_create(&x, c, 1, NULL, 1, err)) {
            size_t np = (size_t)3 * hp->image_size * hp->image_size;
            float *px = calloc(np, sizeof(float));
            float *out = malloc(sizeof(float) * (size_t)hp->n_tok * hp->n_out);
            if (px && out && !ifl_clip_encode(x, px, 1, out, err))
                sink = out[0];
            free(px);
            free(out);
            ifl_clip_ctx_free(x);
        }
    }
    ifl_clip_free(c);
    free(copy);
    return 0;
}
