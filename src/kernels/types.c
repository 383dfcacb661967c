/*
 * The ggml type table: block sizes and bytes per block for every type id a
 * GGUF file may carry, so the reader can check any tensor's size, and which
 * of them the kernels compute with. Sizes follow ggml's block structs.
 */
#include "kernels/types.h"

#include <stddef.h>

#define QK_K 256

static const struct ifl_type_info infos[IFL_TYPE_COUNT] = {
    [IFL_TYPE_F32] = {"f32", 1, 4, 1, IFL_TYPE_F32},
    [IFL_TYPE_F16] = {"f16", 1, 2, 1, IFL_TYPE_F32},
    [IFL_TYPE_Q4_0] = {"q4_0", 32, 2 + 16, 1, IFL_TYPE_Q8_0},
    [IFL_TYPE_Q4_1] = {"q4_1", 32, 4 + 16, 0, IFL_TYPE_F32},
    [IFL_TYPE_Q5_0] = {"q5_0", 32, 2 + 4 + 16, 1, IFL_TYPE_Q8_0},
    [IFL_TYPE_Q5_1] = {"q5_1", 32, 4 + 4 + 16, 1, IFL_TYPE_Q8_0},
    [IFL_TYPE_Q8_0] = {"q8_0", 32, 2 + 32, 1, IFL_TYPE_Q8_0},
    [IFL_TYPE_Q8_1] = {"q8_1", 32, 4 + 32, 0, IFL_TYPE_F32},
    [IFL_TYPE_Q2_K] = {"q2_K", QK_K, 16 + 64 + 4, 1, IFL_TYPE_Q8_K},
    [IFL_TYPE_Q3_K] = {"q3_K", QK_K, 32 + 64 + 12 + 2, 1, IFL_TYPE_Q8_K},
    [IFL_TYPE_Q4_K] = {"q4_K", QK_K, 4 + 12 + 128, 1, IFL_TYPE_Q8_K},
    [IFL_TYPE_Q5_K] = {"q5_K", QK_K, 4 + 12 + 32 + 128, 1, IFL_TYPE_Q8_K},
    [IFL_TYPE_Q6_K] = {"q6_K", QK_K, 128 + 64 + 16 + 2, 1, IFL_TYPE_Q8_K},
    [IFL_TYPE_Q8_K] = {"q8_K", QK_K, 4 + QK_K + 2 * (QK_K / 16), 0, IFL_TYPE_F32},
    [IFL_TYPE_IQ2_XXS] = {"iq2_xxs", QK_K, 2 + QK_K / 8 * 2, 0, IFL_TYPE_F32},
    [IFL_TYPE_IQ2_XS] = {"iq2_xs", QK_K, 2 + QK_K / 8 * 2 + QK_K / 32, 0, IFL_TYPE_F32},
    [IFL_TYPE_IQ3_XXS] = {"iq3_xxs", QK_K, 2 + 3 * QK_K / 8, 0, IFL_TYPE_F32},
    [IFL_TYPE_IQ1_S] = {"iq1_s", QK_K, 2 + QK_K / 8 + QK_K / 16, 0, IFL_TYPE_F32},
    [IFL_TYPE_IQ4_NL] = {"iq4_nl", 32, 2 + 16, 1, IFL_TYPE_Q8_0},
    [IFL_TYPE_IQ3_S] = {"iq3_s", QK_K, 2 + QK_K / 4 + QK_K / 8 + QK_K / 32 + 4, 0, IFL_TYPE_F32},
    [IFL_TYPE_IQ2_S] = {"iq2_s", QK_K, 2 + QK_K / 4 + QK_K / 16, 0, IFL_TYPE_F32},
    [IFL_TYPE_IQ4_XS] = {"iq4_xs", QK_K, 2 + 2 + QK_K / 64 + QK_K / 2, 1, IFL_TYPE_Q8_K},
    [IFL_TYPE_I8] = {"i8", 1, 1, 0, IFL_TYPE_F32},
    [IFL_TYPE_I16] = {"i16", 1, 2, 0, IFL_TYPE_F32},
    [IFL_TYPE_I32] = {"i32", 1, 4, 0, IFL_TYPE_F32},
    [IFL_TYPE_I64] = {"i64", 1, 8, 0, IFL_TYPE_F32},
    [IFL_TYPE_F64] = {"f64", 1, 8, 0, IFL_TYPE_F32},
    [IFL_TYPE_IQ1_M] = {"iq1_m", QK_K, QK_K / 8 + QK_K / 16 + QK_K / 32, 0, IFL_TYPE_F32},
    [IFL_TYPE_BF16] = {"bf16", 1, 2, 1, IFL_TYPE_F32},
    [IFL_TYPE_TQ1_0] = {"tq1_0", QK_K, 2 + 4 * 13, 0, IFL_TYPE_F32},
    [IFL_TYPE_TQ2_0] = {"tq2_0", QK_K, 2 + 64, 0, IFL_TYPE_F32},
    [IFL_TYPE_MXFP4] = {"mxfp4", 32, 1 + 16, 1, IFL_TYPE_Q8_0},
};

const struct ifl_type_info *ifl_type_info(uint32_t t)
{
    if (t >= IFL_TYPE_COUNT || infos[t].name == NULL)
        return NULL;
    return &infos[t];
}

size_t ifl_type_row_size(enum ifl_type t, int64_t n)
{
    const struct ifl_type_info *ti = ifl_type_info((uint32_t)t);
    return ti ? (size_t)(n / ti->blck) * ti->size : 0;
}
