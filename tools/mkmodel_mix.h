/*
 * mkmodel's llama-quantize presets: `--type q3_k_m`, `q3_k_l` and
 * `iq4_xs_mix` give each tensor the type llama-quantize's Q3_K_M, Q3_K_L
 * and IQ4_XS presets give it when they quantise the F32 model of the same
 * arguments (no imatrix, no overrides). Part of tools/mkmodel.c, included
 * by it before write_tensors.
 *
 * The rules, as llama.cpp's src/llama-quant.cpp applies them to the
 * tensors mkmodel writes (llama_tensor_get_type_impl, then
 * tensor_type_fallback), with n the layer count, i the layer, and
 * "8 experts" meaning expert_count == 8:
 *
 * - output.weight, and token_embd.weight when tied: Q8_0 when the row is
 *   not a multiple of the preset type's 256-element block, else Q6_K;
 * - attn_v (and phi3's fused attn_qkv, which llama.cpp counts as an attn_v):
 *   Q3_K_M Q5_K in the first two layers then Q4_K; Q3_K_L Q5_K; IQ4_XS
 *   Q5_K when n_head / n_head_kv >= 4; with 8 experts Q8_0 whatever the
 *   preset; attn_k Q8_0 with 8 experts;
 * - attn_output: Q3_K_M Q4_K, Q3_K_L Q5_K; with 8 experts Q5_K for Q3_K_M
 *   and IQ4_XS (and Q3_K_L keeps Q3_K);
 * - ffn_down (and ffn_down_exps): Q3_K_M Q5_K for i < n/16 then Q4_K;
 *   Q3_K_L Q5_K; IQ4_XS Q5_K for i < n/8;
 * - everything else quantised takes the preset's type (Q3_K or IQ4_XS),
 *   and ffn_gate_inp and 1-D tensors stay F32;
 * - then a row length the chosen type's block does not divide falls back:
 *   Q3_K to Q4_0, Q4_K to Q5_0, Q5_K to Q5_1, Q6_K to Q8_0, IQ4_XS to
 *   IQ4_NL, and to F16 when that block does not divide it either.
 *
 * Not mirrored: llama.cpp's 70B rule (attn_v one step up in llama models
 * it sizes as 70B) and Falcon's rules, as mkmodel writes neither.
 */

enum preset { PRESET_NONE, PRESET_Q3_K_M, PRESET_Q3_K_L, PRESET_IQ4_XS };

/* llama-quant.cpp's broad tensor categories, as far as mkmodel writes them. */
enum tcat { C_EMBD, C_OUTPUT, C_Q, C_K, C_V, C_ATTN_OUT, C_GATE, C_UP, C_DOWN };

/* tensor_type_fallback: the type llama-quantize writes when t's block does
 * not divide a row of row_len. */
static enum ifl_type preset_fallback(enum ifl_type t, int64_t row_len)
{
    if (row_len % ifl_type_info(t)->blck == 0)
        return t;
    enum ifl_type f = t == IFL_TYPE_Q3_K || t == IFL_TYPE_Q2_K ? IFL_TYPE_Q4_0
                      : t == IFL_TYPE_Q4_K                     ? IFL_TYPE_Q5_0
                      : t == IFL_TYPE_Q5_K                     ? IFL_TYPE_Q5_1
                      : t == IFL_TYPE_Q6_K                     ? IFL_TYPE_Q8_0
                      : t == IFL_TYPE_IQ4_XS                   ? IFL_TYPE_IQ4_NL
                                                               : IFL_TYPE_F16;
    return row_len % ifl_type_info(f)->blck == 0 ? f : IFL_TYPE_F16;
}

/* The type of tensor category c of layer il (rows of row_len) under the
 * mix's preset. */
static enum ifl_type preset_type(const struct opts *o, enum tcat c, int64_t il, int64_t row_len)
{
    const enum preset p = (enum preset)o->mix->preset;
    const enum ifl_type def = o->mix->main;
    const int x8 = o->n_expert == 8, n = (int)o->n_layer;
    enum ifl_type t = def;
    switch (c) {
    case C_EMBD:
    case C_OUTPUT:
        if (c == C_EMBD && !o->tied)
            break;
        t = row_len % ifl_type_info(def)->blck ? IFL_TYPE_Q8_0 : IFL_TYPE_Q6_K;
        break;
    case C_V:
        if (p == PRESET_Q3_K_M)
            t = il < 2 ? IFL_TYPE_Q5_K : IFL_TYPE_Q4_K;
        else if (p == PRESET_Q3_K_L)
            t = IFL_TYPE_Q5_K;
        else if (p == PRESET_IQ4_XS && o->n_head / o->n_head_kv >= 4)
            t = IFL_TYPE_Q5_K;
        if (x8)
            t = IFL_TYPE_Q8_0;
        break;
    case C_K:
        if (x8)
            t = IFL_TYPE_Q8_0;
        break;
    case C_ATTN_OUT:
        if (x8)
            t = p == PRESET_Q3_K_L ? def : IFL_TYPE_Q5_K;
        else if (p == PRESET_Q3_K_M)
            t = IFL_TYPE_Q4_K;
        else if (p == PRESET_Q3_K_L)
            t = IFL_TYPE_Q5_K;
        break;
    case C_DOWN:
        if (p == PRESET_Q3_K_M)
            t = il < n / 16 ? IFL_TYPE_Q5_K : IFL_TYPE_Q4_K;
        else if (p == PRESET_Q3_K_L)
            t = IFL_TYPE_Q5_K;
        else if (p == PRESET_IQ4_XS && il < n / 8)
            t = IFL_TYPE_Q5_K;
        break;
    default:
        break;
    }
    return preset_fallback(t, row_len);
}

/* The type mkmodel writes for category c of layer il: the preset's rules,
 * or else `plain`, the simple mixes' choice. */
static enum ifl_type mix_type(const struct opts *o, enum tcat c, int64_t il, int64_t row_len,
                              enum ifl_type plain)
{
    return o->mix->preset ? preset_type(o, c, il, row_len) : plain;
}
