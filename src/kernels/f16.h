/* IEEE binary16 and bfloat16 <-> float, portable and exact (docs/engine.md §2). */
#ifndef PKV_F16_H
#define PKV_F16_H

#include <stdint.h>
#include <string.h>

static inline float pkv_bits_to_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint32_t pkv_f32_to_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* Exact decode of every binary16 code, subnormals, infinities and NaN included. */
static inline float pkv_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1f;
    uint32_t mant = h & 0x3ff;
    if (exp == 0x1f) return pkv_bits_to_f32(sign | 0x7f800000u | (mant << 13));
    if (exp == 0) {
        if (mant == 0) return pkv_bits_to_f32(sign);
        /* subnormal: mant * 2^-24 */
        float v = (float)mant * (1.0f / 16777216.0f);
        return sign ? -v : v;
    }
    return pkv_bits_to_f32(sign | ((exp + 112) << 23) | (mant << 13));
}

/* Round to nearest even, as F16C's _mm_cvtps_ph with rounding mode 0. */
static inline uint16_t pkv_f32_to_f16(float f) {
    uint32_t x = pkv_f32_to_bits(f);
    uint32_t sign = (x >> 16) & 0x8000;
    uint32_t absx = x & 0x7fffffff;
    if (absx > 0x7f800000) return (uint16_t)(sign | 0x7e00 | ((absx >> 13) & 0x3ff)); /* NaN */
    if (absx >= 0x477ff000) return (uint16_t)(sign | 0x7c00); /* overflow -> inf */
    if (absx < 0x38800000) { /* subnormal or zero in f16 */
        if (absx < 0x33000000) return (uint16_t)sign; /* rounds to zero */
        uint32_t e = absx >> 23;
        uint32_t m = (absx & 0x7fffff) | 0x800000;
        uint32_t shift = 126 - e; /* 14 + (113 - e) - 1 */
        uint32_t half = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t mid = 1u << (shift - 1);
        if (rem > mid || (rem == mid && (half & 1))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t r = absx - 0x38000000; /* rebias exponent 127 -> 15 */
    uint32_t half = r >> 13;
    uint32_t rem = r & 0x1fff;
    if (rem > 0x1000 || (rem == 0x1000 && (half & 1))) half++;
    return (uint16_t)(sign | half);
}

static inline float pkv_bf16_to_f32(uint16_t h) { return pkv_bits_to_f32((uint32_t)h << 16); }

/* Round to nearest even, NaN kept quiet (as ggml's fp32 -> bf16). */
static inline uint16_t pkv_f32_to_bf16(float f) {
    uint32_t u = pkv_f32_to_bits(f);
    if ((u & 0x7fffffff) > 0x7f800000) return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + (0x7fff + ((u >> 16) & 1))) >> 16);
}

#endif
