/*
 * Scalar IEEE half (F16) and bfloat16 (BF16) conversions. These are the
 * reference conversions: SIMD code that converts with F16C or AVX-512 BF16
 * instructions must give the same bits (round to nearest even, NaN kept).
 */
#ifndef IFL_CORE_FP16_H
#define IFL_CORE_FP16_H

#include <stdint.h>
#include <string.h>

static inline float ifl_bits_to_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static inline uint32_t ifl_f32_to_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static inline float ifl_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t man = h & 0x3ff;
    if (exp == 0) {
        if (man == 0)
            return ifl_bits_to_f32(sign);
        /* subnormal: value = man * 2^-24 */
        float v = (float)man * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    if (exp == 31)
        return ifl_bits_to_f32(sign | 0x7f800000u | (man << 13));
    return ifl_bits_to_f32(sign | ((exp + 112) << 23) | (man << 13));
}

static inline uint16_t ifl_f32_to_f16(float f)
{
    uint32_t x = ifl_f32_to_bits(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t ax = x & 0x7fffffffu;
    if (ax >= 0x7f800000u) /* inf or nan */
        return (uint16_t)(sign | 0x7c00 | (ax > 0x7f800000u ? 0x200 | ((ax >> 13) & 0x3ff) : 0));
    if (ax >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(sign | 0x7c00);
    if (ax < 0x38800000u) { /* below the smallest normal half: subnormal or zero */
        /* add 0.5 (as float) so the FPU rounds the mantissa to nearest even */
        float v = ifl_bits_to_f32(ax) + 0.5f;
        return (uint16_t)(sign | (ifl_f32_to_bits(v) - 0x3f000000u));
    }
    uint32_t mant_odd = (ax >> 13) & 1;
    ax += 0xc8000fffu + mant_odd; /* rebias exponent (-112 << 23) and round to nearest even */
    return (uint16_t)(sign | (ax >> 13));
}

static inline float ifl_bf16_to_f32(uint16_t h)
{
    return ifl_bits_to_f32((uint32_t)h << 16);
}

static inline uint16_t ifl_f32_to_bf16(float f)
{
    uint32_t x = ifl_f32_to_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) /* nan: keep it a quiet nan */
        return (uint16_t)((x >> 16) | 64);
    return (uint16_t)((x + (0x7fff + ((x >> 16) & 1))) >> 16);
}

#endif
