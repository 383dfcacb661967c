/*
 * Writes llama.cpp's image embeddings (libmtmd) for one mmproj file and one
 * synthetic image, as raw little-endian float32, n_tokens x n_embd: every
 * image chunk in prompt order (InternVL's tiles, then its thumbnail). Built
 * and run by make.sh against a llama.cpp build tree; not part of our
 * build. The image is the pattern tests/test_clip_llamacpp.c draws:
 * pixel (x, y) channel c = (x * 37 + y * 91 + c * 53 + (x * y) % 17 * 5) % 256.
 *
 * usage: mtmd_dump TEXT.gguf MMPROJ.gguf WIDTH HEIGHT OUT.bin [REPEAT [THREADS]]
 * With REPEAT, the image is encoded that many times more and the time per
 * encode is printed (bench/README.md's vision figures).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "llama.h"
#include "mtmd.h"

int main(int argc, char **argv)
{
    if (argc < 6 || argc > 8) {
        fprintf(stderr, "usage: mtmd_dump TEXT.gguf MMPROJ.gguf WIDTH HEIGHT OUT.bin [REPEAT "
                        "[THREADS]]\n");
        return 2;
    }
    int w = atoi(argv[3]), h = atoi(argv[4]);
    int repeat = argc > 6 ? atoi(argv[6]) : 0, threads = argc > 7 ? atoi(argv[7]) : 2;
    llama_backend_init();
    struct llama_model_params mp = llama_model_default_params();
    struct llama_model *model = llama_model_load_from_file(argv[1], mp);
    if (!model)
        return 1;
    struct mtmd_context_params cp = mtmd_context_params_default();
    cp.use_gpu = false;
    cp.n_threads = threads;
    cp.warmup = false;
    mtmd_context *ctx = mtmd_init_from_file(argv[2], model, cp);
    if (!ctx)
        return 1;
    unsigned char *px = malloc((size_t)w * h * 3);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++)
            for (int c = 0; c < 3; c++)
                px[((size_t)y * w + x) * 3 + c] =
                    (unsigned char)((x * 37 + y * 91 + c * 53 + (x * y) % 17 * 5) % 256);
    mtmd_bitmap *bm = mtmd_bitmap_init((uint32_t)w, (uint32_t)h, px);
    mtmd_input_chunks *chunks = mtmd_input_chunks_init();
    const char *marker = mtmd_default_marker();
    mtmd_input_text text = {marker, strlen(marker), true, true};
    const mtmd_bitmap *bms[1] = {bm};
    if (mtmd_tokenize(ctx, chunks, &text, bms, 1) != 0)
        return 1;
    FILE *f = fopen(argv[5], "wb");
    if (!f)
        return 1;
    size_t total = 0;
    for (size_t i = 0; i < mtmd_input_chunks_size(chunks); i++) {
        const mtmd_input_chunk *ch = mtmd_input_chunks_get(chunks, i);
        if (mtmd_input_chunk_get_type(ch) != MTMD_INPUT_CHUNK_TYPE_IMAGE)
            continue;
        if (mtmd_encode_chunk(ctx, ch) != 0)
            return 1;
        if (repeat > 0) {
            struct timespec t0, t1;
            clock_gettime(CLOCK_MONOTONIC, &t0);
            for (int r = 0; r < repeat; r++)
                if (mtmd_encode_chunk(ctx, ch) != 0)
                    return 1;
            clock_gettime(CLOCK_MONOTONIC, &t1);
            double s = (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec);
            printf("mtmd_dump: %s: %d threads, %d encodes in %.2f s, %.1f ms/image, %.3f "
                   "images/s\n",
                   argv[2], threads, repeat, s, 1e3 * s / repeat, repeat / s);
        }
        size_t n_tok = mtmd_input_chunk_get_n_tokens(ch);
        int n_embd = llama_model_n_embd_inp(model);
        const float *e = mtmd_get_output_embd(ctx);
        if (fwrite(e, sizeof(float), n_tok * (size_t)n_embd, f) != n_tok * (size_t)n_embd)
            return 1;
        total += n_tok;
        fprintf(stderr, "mtmd_dump: %s: chunk %zu: %zu tokens x %d\n", argv[5], i, n_tok, n_embd);
    }
    if (fclose(f))
        return 1;
    fprintf(stderr, "mtmd_dump: %s: %zu tokens\n", argv[5], total);
    mtmd_input_chunks_free(chunks);
    mtmd_bitmap_free(bm);
    free(px);
    mtmd_free(ctx);
    llama_model_free(model);
    return 0;
}
