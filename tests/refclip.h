/*
 * A plain float64 reference of the LLaVA-1.5 CLIP encoder and projector
 * (what src/vision/clip.h describes), for tests: the ground truth the
 * encoder in src/vision/clip_encode.c is compared with. It reads the
 * mmproj file with code of its own (names, shapes, the ffn_up/ffn_down
 * swap, feature_layer), dequantises each weight with
 * ifl_kernels_ref()->dequant and keeps every activation in double. Slow on
 * purpose.
 */
#ifndef IFL_TESTS_REFCLIP_H
#define IFL_TESTS_REFCLIP_H

/* What the file says the encoder takes and gives. */
struct refclip_shape {
    int image_size;
    int n_patches; /* output rows per image (InternVL: per tile, after the shuffle) */
    int n_out;     /* floats per row */
};

/* Encodes one preprocessed image (3 x image_size^2 floats, planar,
 * normalised) into n_patches x n_out floats (out may be NULL to learn the
 * shape only). cls_last: put the class token after the patches, as
 * llama.cpp's current llava graph does (its issue 25814: patch i then
 * takes position embedding i, the class token the last one, and the
 * outputs kept are rows 1 .. n_patches of that order, the class token's
 * among them), to reproduce its embeddings. Returns 0 or a negative status
 * with a sentence in err (may be NULL). */
int ref_clip_encode(const char *path, const float *pixels, int cls_last, float *out,
                    struct refclip_shape *shape, char *err);

#endif
