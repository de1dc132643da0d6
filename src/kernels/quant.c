/*
 * Weight types: the ggml type table, the scalar reference kernels
 * (dequantisation, activation quantisation, fused dot products) that the
 * SIMD files must agree with, and the reference weight quantisers.
 * Formulas: docs/engine.md §2.1/§2.2 (block layouts), §2.3 (activation
 * quantisation, integer dots).
 *
 * This file is baseline x86-64 C and must not depend on cpu.c: the GGUF
 * fuzzer links it alone for pkv_type_get/pkv_row_bytes.
 */
#include "kernels/quant.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "kernels/f16.h"
#include "kernels/levels.h"

/* ------------------------------------------------------------------ type table */

/* Ids not listed (retired 4, 5, 31-33, 36-38) stay zeroed: name == NULL means
 * unknown. Sizes of the types the engine does not compute are ggml's
 * (ggml-common.h / gguf-py GGML_QUANT_SIZES) so the GGUF reader can still
 * validate tensor byte counts and name the type in a message. act_type is
 * only meaningful when computable. */
static const pkv_type_info type_table[PKV_TYPE_COUNT] = {
    [PKV_TYPE_F32] = {"F32", 1, 4, true, PKV_TYPE_F32},
    [PKV_TYPE_F16] = {"F16", 1, 2, true, PKV_TYPE_F32},
    [PKV_TYPE_Q4_0] = {"Q4_0", 32, 18, true, PKV_TYPE_Q8_0},
    [PKV_TYPE_Q4_1] = {"Q4_1", 32, 20, true, PKV_TYPE_Q8_1},
    [PKV_TYPE_Q5_0] = {"Q5_0", 32, 22, true, PKV_TYPE_Q8_0},
    [PKV_TYPE_Q5_1] = {"Q5_1", 32, 24, true, PKV_TYPE_Q8_1},
    [PKV_TYPE_Q8_0] = {"Q8_0", 32, 34, true, PKV_TYPE_Q8_0},
    [PKV_TYPE_Q8_1] = {"Q8_1", 32, 36, false, PKV_TYPE_Q8_1},
    [PKV_TYPE_Q2_K] = {"Q2_K", 256, 84, false, PKV_TYPE_Q8_K},
    [PKV_TYPE_Q3_K] = {"Q3_K", 256, 110, false, PKV_TYPE_Q8_K},
    [PKV_TYPE_Q4_K] = {"Q4_K", 256, 144, true, PKV_TYPE_Q8_K},
    [PKV_TYPE_Q5_K] = {"Q5_K", 256, 176, true, PKV_TYPE_Q8_K},
    [PKV_TYPE_Q6_K] = {"Q6_K", 256, 210, true, PKV_TYPE_Q8_K},
    [PKV_TYPE_Q8_K] = {"Q8_K", 256, 292, false, PKV_TYPE_Q8_K},
    [16] = {"IQ2_XXS", 256, 66, false, PKV_TYPE_Q8_K},
    [17] = {"IQ2_XS", 256, 74, false, PKV_TYPE_Q8_K},
    [18] = {"IQ3_XXS", 256, 98, false, PKV_TYPE_Q8_K},
    [19] = {"IQ1_S", 256, 50, false, PKV_TYPE_Q8_K},
    [PKV_TYPE_IQ4_NL] = {"IQ4_NL", 32, 18, false, PKV_TYPE_Q8_0},
    [21] = {"IQ3_S", 256, 110, false, PKV_TYPE_Q8_K},
    [22] = {"IQ2_S", 256, 82, false, PKV_TYPE_Q8_K},
    [PKV_TYPE_IQ4_XS] = {"IQ4_XS", 256, 136, false, PKV_TYPE_Q8_K},
    [PKV_TYPE_I8] = {"I8", 1, 1, false, PKV_TYPE_F32},
    [PKV_TYPE_I16] = {"I16", 1, 2, false, PKV_TYPE_F32},
    [PKV_TYPE_I32] = {"I32", 1, 4, false, PKV_TYPE_F32},
    [PKV_TYPE_I64] = {"I64", 1, 8, false, PKV_TYPE_F32},
    [PKV_TYPE_F64] = {"F64", 1, 8, false, PKV_TYPE_F32},
    [29] = {"IQ1_M", 256, 56, false, PKV_TYPE_Q8_K},
    [PKV_TYPE_BF16] = {"BF16", 1, 2, true, PKV_TYPE_F32},
    [PKV_TYPE_TQ1_0] = {"TQ1_0", 256, 54, false, PKV_TYPE_Q8_K},
    [PKV_TYPE_TQ2_0] = {"TQ2_0", 256, 66, false, PKV_TYPE_Q8_K},
    [PKV_TYPE_MXFP4] = {"MXFP4", 32, 17, false, PKV_TYPE_Q8_0},
    [40] = {"NVFP4", 64, 36, false, PKV_TYPE_Q8_0},
    [41] = {"Q1_0", 128, 18, false, PKV_TYPE_Q8_0},
    [42] = {"Q2_0", 64, 18, false, PKV_TYPE_Q8_0},
};

const pkv_type_info *pkv_type_get(uint32_t type) {
    if (type >= PKV_TYPE_COUNT || !type_table[type].name) return NULL;
    return &type_table[type];
}

uint64_t pkv_row_bytes(uint32_t type, int64_t n) {
    const pkv_type_info *info = pkv_type_get(type);
    if (!info || n < 0 || n % info->block_elems != 0) return 0;
    uint64_t blocks = (uint64_t)(n / info->block_elems);
    if (blocks > UINT64_MAX / (uint64_t)info->block_bytes) return 0;
    return blocks * (uint64_t)info->block_bytes;
}

/* ------------------------------------------------------------------ shared helpers */

/* Round to nearest, ties to even, for |v| <= 2^22: the float add lands v in
 * [2^23, 2^24) where the ulp is 1, so the FPU's own rounding does the work.
 * This is ggml's nearest_int and what cvtps2dq does under the default MXCSR,
 * which keeps the scalar and SIMD activation quantisers bit-identical. */
static inline int32_t round_half_even(float v) {
    uint32_t bits = pkv_f32_to_bits(v + 12582912.0f);
    return (int32_t)(bits & 0x7fffff) - 0x400000;
}

static inline uint32_t load_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* ------------------------------------------------------------------ dequantisation */

void pkv_dequant_f32_scalar(const void *src, float *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

void pkv_dequant_f16_scalar(const void *src, float *dst, int64_t n) {
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++) dst[i] = pkv_f16_to_f32(h[i]);
}

void pkv_dequant_bf16_scalar(const void *src, float *dst, int64_t n) {
    const uint16_t *h = src;
    for (int64_t i = 0; i < n; i++) dst[i] = pkv_bf16_to_f32(h[i]);
}

void pkv_dequant_q4_0_scalar(const void *src, float *dst, int64_t n) {
    const block_q4_0 *b = src;
    for (int64_t i = 0; i < n / QK4_0; i++, dst += QK4_0) {
        const float d = pkv_f16_to_f32(b[i].d);
        for (int j = 0; j < QK4_0 / 2; j++) {
            dst[j] = (float)((b[i].qs[j] & 15) - 8) * d;
            dst[j + QK4_0 / 2] = (float)((b[i].qs[j] >> 4) - 8) * d;
        }
    }
}

void pkv_dequant_q4_1_scalar(const void *src, float *dst, int64_t n) {
    const block_q4_1 *b = src;
    for (int64_t i = 0; i < n / QK4_0; i++, dst += QK4_0) {
        const float d = pkv_f16_to_f32(b[i].d), m = pkv_f16_to_f32(b[i].m);
        for (int j = 0; j < QK4_0 / 2; j++) {
            dst[j] = (float)(b[i].qs[j] & 15) * d + m;
            dst[j + QK4_0 / 2] = (float)(b[i].qs[j] >> 4) * d + m;
        }
    }
}

void pkv_dequant_q5_0_scalar(const void *src, float *dst, int64_t n) {
    const block_q5_0 *b = src;
    for (int64_t i = 0; i < n / QK5_0; i++, dst += QK5_0) {
        const float d = pkv_f16_to_f32(b[i].d);
        const uint32_t qh = load_u32(b[i].qh);
        for (int j = 0; j < QK5_0 / 2; j++) {
            const int lo = (b[i].qs[j] & 15) | (int)(((qh >> j) & 1) << 4);
            const int hi = (b[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            dst[j] = (float)(lo - 16) * d;
            dst[j + QK5_0 / 2] = (float)(hi - 16) * d;
        }
    }
}

void pkv_dequant_q5_1_scalar(const void *src, float *dst, int64_t n) {
    const block_q5_1 *b = src;
    for (int64_t i = 0; i < n / QK5_0; i++, dst += QK5_0) {
        const float d = pkv_f16_to_f32(b[i].d), m = pkv_f16_to_f32(b[i].m);
        const uint32_t qh = load_u32(b[i].qh);
        for (int j = 0; j < QK5_0 / 2; j++) {
            const int lo = (b[i].qs[j] & 15) | (int)(((qh >> j) & 1) << 4);
            const int hi = (b[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            dst[j] = (float)lo * d + m;
            dst[j + QK5_0 / 2] = (float)hi * d + m;
        }
    }
}

void pkv_dequant_q8_0_scalar(const void *src, float *dst, int64_t n) {
    const block_q8_0 *b = src;
    for (int64_t i = 0; i < n / QK8_0; i++, dst += QK8_0) {
        const float d = pkv_f16_to_f32(b[i].d);
        for (int j = 0; j < QK8_0; j++) dst[j] = (float)b[i].qs[j] * d;
    }
}

void pkv_dequant_q8_1_scalar(const void *src, float *dst, int64_t n) {
    const block_q8_1 *b = src;
    for (int64_t i = 0; i < n / QK8_0; i++, dst += QK8_0) {
        const float d = pkv_f16_to_f32(b[i].d);
        for (int j = 0; j < QK8_0; j++) dst[j] = (float)b[i].qs[j] * d;
    }
}

void pkv_dequant_q4_K_scalar(const void *src, float *dst, int64_t n) {
    const block_q4_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = pkv_f16_to_f32(b[i].d), dmin = pkv_f16_to_f32(b[i].dmin);
        uint8_t sc[8], m[8];
        pkv_k_scales_unpack(b[i].scales, sc, m);
        /* sub-blocks 2k (low nibbles) and 2k+1 (high nibbles) share qs[32k..32k+31] */
        for (int k = 0; k < 4; k++, dst += 64) {
            const uint8_t *q = b[i].qs + 32 * k;
            const float d1 = d * sc[2 * k], m1 = dmin * m[2 * k];
            const float d2 = d * sc[2 * k + 1], m2 = dmin * m[2 * k + 1];
            for (int l = 0; l < 32; l++) {
                dst[l] = d1 * (float)(q[l] & 15) - m1;
                dst[l + 32] = d2 * (float)(q[l] >> 4) - m2;
            }
        }
    }
}

void pkv_dequant_q5_K_scalar(const void *src, float *dst, int64_t n) {
    const block_q5_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = pkv_f16_to_f32(b[i].d), dmin = pkv_f16_to_f32(b[i].dmin);
        uint8_t sc[8], m[8];
        pkv_k_scales_unpack(b[i].scales, sc, m);
        for (int k = 0; k < 4; k++, dst += 64) {
            const uint8_t *q = b[i].qs + 32 * k;
            const int lo_bit = 2 * k, hi_bit = 2 * k + 1; /* bit of qh[l] = sub-block index */
            const float d1 = d * sc[2 * k], m1 = dmin * m[2 * k];
            const float d2 = d * sc[2 * k + 1], m2 = dmin * m[2 * k + 1];
            for (int l = 0; l < 32; l++) {
                const int lo = (q[l] & 15) | (((b[i].qh[l] >> lo_bit) & 1) << 4);
                const int hi = (q[l] >> 4) | (((b[i].qh[l] >> hi_bit) & 1) << 4);
                dst[l] = d1 * (float)lo - m1;
                dst[l + 32] = d2 * (float)hi - m2;
            }
        }
    }
}

/* Q6_K element 128h + 32c + l (docs/engine.md §2.2): low nibble of
 * ql[64h + 32(c&1) + l] (high nibble for c >= 2), 2 high bits from
 * qh[32h + l] >> 2c, scale scales[8h + 2c + l/16]. */
void pkv_dequant_q6_K_scalar(const void *src, float *dst, int64_t n) {
    const block_q6_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = pkv_f16_to_f32(b[i].d);
        for (int h = 0; h < 2; h++, dst += 128) {
            const uint8_t *ql = b[i].ql + 64 * h, *qh = b[i].qh + 32 * h;
            const int8_t *sc = b[i].scales + 8 * h;
            for (int l = 0; l < 32; l++) {
                const int is = l / 16;
                const int q0 = ((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
                const int q1 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
                const int q2 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                const int q3 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                dst[l] = d * (float)sc[is + 0] * (float)q0;
                dst[l + 32] = d * (float)sc[is + 2] * (float)q1;
                dst[l + 64] = d * (float)sc[is + 4] * (float)q2;
                dst[l + 96] = d * (float)sc[is + 6] * (float)q3;
            }
        }
    }
}

void pkv_dequant_q8_K_scalar(const void *src, float *dst, int64_t n) {
    const block_q8_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++, dst += QK_K)
        for (int j = 0; j < QK_K; j++) dst[j] = b[i].d * (float)b[i].qs[j];
}

/* ------------------------------------------------------------------ activation quantisation */

void pkv_quantize_f32_scalar(const float *src, void *dst, int64_t n) {
    memcpy(dst, src, (size_t)n * sizeof(float));
}

/* Q8_0/Q8_1 scale of one 32-value block, as llama.cpp's x86 quantize_row_q8_0
 * computes it (docs/engine.md §2.3): d = amax/127 (stored as fp16), values
 * multiplied by id = 127/amax and rounded half to even. ggml's portable
 * reference instead uses 1/d and roundf; on AVX2 machines llama.cpp runs the
 * rule used here. Returns id; 0 for an all-zero block, and also when 127/amax
 * overflows (amax < ~4e-37), where llama.cpp's quants would be garbage and
 * zero quants are the exact answer to within d. */
static float q8_block_scale(const float *x, float *d) {
    float amax = 0.0f;
    for (int j = 0; j < QK8_0; j++) amax = fmaxf(amax, fabsf(x[j]));
    *d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    return id <= FLT_MAX ? id : 0.0f;
}

void pkv_quantize_q8_0_scalar(const float *src, void *dst, int64_t n) {
    block_q8_0 *y = dst;
    for (int64_t i = 0; i < n / QK8_0; i++, src += QK8_0) {
        float d;
        const float id = q8_block_scale(src, &d);
        y[i].d = pkv_f32_to_f16(d);
        for (int j = 0; j < QK8_0; j++) y[i].qs[j] = (int8_t)round_half_even(src[j] * id);
    }
}

void pkv_quantize_q8_1_scalar(const float *src, void *dst, int64_t n) {
    block_q8_1 *y = dst;
    for (int64_t i = 0; i < n / QK8_0; i++, src += QK8_0) {
        float d;
        const float id = q8_block_scale(src, &d);
        y[i].d = pkv_f32_to_f16(d);
        int32_t sum = 0;
        for (int j = 0; j < QK8_0; j++) {
            y[i].qs[j] = (int8_t)round_half_even(src[j] * id);
            sum += y[i].qs[j];
        }
        y[i].s = pkv_f32_to_f16(d * (float)sum); /* the f32 d, as llama.cpp */
    }
}

/* Q8_K (docs/engine.md §2.3, ggml quantize_row_q8_K_ref, which x86 uses):
 * the first element of largest magnitude, with its sign, is `max`;
 * iscale = -127/max, q = min(127, round_half_even(iscale*x)), d = 1/iscale
 * (so d < 0 when max > 0), bsums = sums of 16 quants. A block of zeros (or
 * so small that iscale overflows) gets d = 0 and zero quants and bsums. */
void pkv_quantize_q8_K_scalar(const float *src, void *dst, int64_t n) {
    block_q8_K *y = dst;
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        float amax = 0.0f, max = 0.0f;
        for (int j = 0; j < QK_K; j++) {
            if (fabsf(src[j]) > amax) {
                amax = fabsf(src[j]);
                max = src[j];
            }
        }
        const float iscale = amax != 0.0f ? -127.0f / max : 0.0f;
        if (!(fabsf(iscale) <= FLT_MAX) || iscale == 0.0f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        for (int j = 0; j < QK_K; j++) {
            const int32_t v = round_half_even(iscale * src[j]);
            y[i].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int g = 0; g < QK_K / 16; g++) {
            int sum = 0;
            for (int j = 0; j < 16; j++) sum += y[i].qs[16 * g + j];
            y[i].bsums[g] = (int16_t)sum;
        }
        y[i].d = 1.0f / iscale;
    }
}

/* ------------------------------------------------------------------ fused dot products */

/* F32/F16/BF16 weights are dotted with F32 activations: the weight is
 * converted exactly and the activation is not rounded. llama.cpp rounds
 * activations to fp16/bf16 for these weights (docs/engine.md §2.3), so
 * results are more accurate than its and differ from them in the last bits. */
float pkv_vec_dot_f32_scalar(int64_t n, const void *weight_row, const void *act_row) {
    return pkv_dot_f32_scalar(n, weight_row, act_row);
}

float pkv_vec_dot_f16_scalar(int64_t n, const void *weight_row, const void *act_row) {
    return pkv_dot_f16_f32_scalar(n, weight_row, act_row);
}

float pkv_vec_dot_bf16_scalar(int64_t n, const void *weight_row, const void *act_row) {
    const uint16_t *w = weight_row;
    const float *a = act_row;
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) acc[k] += pkv_bf16_to_f32(w[i + k]) * a[i + k];
    float tail = 0.0f;
    for (; i < n; i++) tail += pkv_bf16_to_f32(w[i]) * a[i];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}

/* Legacy blocks: integer dot per 32-block, then one float multiply-add with
 * d_w*d_a (docs/engine.md §2.3). */
float pkv_vec_dot_q4_0_scalar(int64_t n, const void *weight_row, const void *act_row) {
    const block_q4_0 *x = weight_row;
    const block_q8_0 *y = act_row;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        int32_t sumi = 0;
        for (int j = 0; j < QK8_0 / 2; j++) {
            sumi += ((x[i].qs[j] & 15) - 8) * y[i].qs[j];
            sumi += ((x[i].qs[j] >> 4) - 8) * y[i].qs[j + QK8_0 / 2];
        }
        sum += (pkv_f16_to_f32(x[i].d) * pkv_f16_to_f32(y[i].d)) * (float)sumi;
    }
    return sum;
}

/* Q?_1 x Q8_1: sum (q*d_w + m) * (d_a*qa) = d_w*d_a*sum(q*qa) + m*s, with
 * s = d_a*sum(qa) precomputed by the quantiser. */
float pkv_vec_dot_q4_1_scalar(int64_t n, const void *weight_row, const void *act_row) {
    const block_q4_1 *x = weight_row;
    const block_q8_1 *y = act_row;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        int32_t sumi = 0;
        for (int j = 0; j < QK8_0 / 2; j++) {
            sumi += (x[i].qs[j] & 15) * y[i].qs[j];
            sumi += (x[i].qs[j] >> 4) * y[i].qs[j + QK8_0 / 2];
        }
        sum += (pkv_f16_to_f32(x[i].d) * pkv_f16_to_f32(y[i].d)) * (float)sumi +
               pkv_f16_to_f32(x[i].m) * pkv_f16_to_f32(y[i].s);
    }
    return sum;
}

float pkv_vec_dot_q5_0_scalar(int64_t n, const void *weight_row, const void *act_row) {
    const block_q5_0 *x = weight_row;
    const block_q8_0 *y = act_row;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const uint32_t qh = load_u32(x[i].qh);
        int32_t sumi = 0;
        for (int j = 0; j < QK8_0 / 2; j++) {
            const int lo = ((x[i].qs[j] & 15) | (int)(((qh >> j) & 1) << 4)) - 16;
            const int hi = ((x[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4)) - 16;
            sumi += lo * y[i].qs[j] + hi * y[i].qs[j + QK8_0 / 2];
        }
        sum += (pkv_f16_to_f32(x[i].d) * pkv_f16_to_f32(y[i].d)) * (float)sumi;
    }
    return sum;
}

float pkv_vec_dot_q5_1_scalar(int64_t n, const void *weight_row, const void *act_row) {
    const block_q5_1 *x = weight_row;
    const block_q8_1 *y = act_row;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        const uint32_t qh = load_u32(x[i].qh);
        int32_t sumi = 0;
        for (int j = 0; j < QK8_0 / 2; j++) {
            const int lo = (x[i].qs[j] & 15) | (int)(((qh >> j) & 1) << 4);
            const int hi = (x[i].qs[j] >> 4) | (int)(((qh >> (j + 16)) & 1) << 4);
            sumi += lo * y[i].qs[j] + hi * y[i].qs[j + QK8_0 / 2];
        }
        sum += (pkv_f16_to_f32(x[i].d) * pkv_f16_to_f32(y[i].d)) * (float)sumi +
               pkv_f16_to_f32(x[i].m) * pkv_f16_to_f32(y[i].s);
    }
    return sum;
}

float pkv_vec_dot_q8_0_scalar(int64_t n, const void *weight_row, const void *act_row) {
    const block_q8_0 *x = weight_row;
    const block_q8_0 *y = act_row;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK8_0; i++) {
        int32_t sumi = 0;
        for (int j = 0; j < QK8_0; j++) sumi += x[i].qs[j] * y[i].qs[j];
        sum += (pkv_f16_to_f32(x[i].d) * pkv_f16_to_f32(y[i].d)) * (float)sumi;
    }
    return sum;
}

/* The min term of Q4_K/Q5_K x Q8_K: sum_j m_j * (sum of the 32 activation
 * quants of sub-block j), from the 16 bsums (docs/engine.md §2.3). */
static int32_t k_min_term(const uint8_t m[8], const int16_t bsums[16]) {
    int32_t s = 0;
    for (int j = 0; j < 8; j++) s += m[j] * (bsums[2 * j] + bsums[2 * j + 1]);
    return s;
}

float pkv_vec_dot_q4_K_scalar(int64_t n, const void *weight_row, const void *act_row) {
    const block_q4_K *x = weight_row;
    const block_q8_K *y = act_row;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t sc[8], m[8];
        pkv_k_scales_unpack(x[i].scales, sc, m);
        int32_t sumi = 0;
        for (int k = 0; k < 4; k++) {
            const uint8_t *q = x[i].qs + 32 * k;
            const int8_t *a = y[i].qs + 64 * k;
            int32_t lo = 0, hi = 0;
            for (int l = 0; l < 32; l++) {
                lo += (q[l] & 15) * a[l];
                hi += (q[l] >> 4) * a[l + 32];
            }
            sumi += sc[2 * k] * lo + sc[2 * k + 1] * hi;
        }
        const float dw = pkv_f16_to_f32(x[i].d) * y[i].d;
        const float mw = pkv_f16_to_f32(x[i].dmin) * y[i].d;
        sum += dw * (float)sumi - mw * (float)k_min_term(m, y[i].bsums);
    }
    return sum;
}

float pkv_vec_dot_q5_K_scalar(int64_t n, const void *weight_row, const void *act_row) {
    const block_q5_K *x = weight_row;
    const block_q8_K *y = act_row;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint8_t sc[8], m[8];
        pkv_k_scales_unpack(x[i].scales, sc, m);
        int32_t sumi = 0;
        for (int k = 0; k < 4; k++) {
            const uint8_t *q = x[i].qs + 32 * k;
            const int8_t *a = y[i].qs + 64 * k;
            int32_t lo = 0, hi = 0;
            for (int l = 0; l < 32; l++) {
                lo += ((q[l] & 15) | (((x[i].qh[l] >> (2 * k)) & 1) << 4)) * a[l];
                hi += ((q[l] >> 4) | (((x[i].qh[l] >> (2 * k + 1)) & 1) << 4)) * a[l + 32];
            }
            sumi += sc[2 * k] * lo + sc[2 * k + 1] * hi;
        }
        const float dw = pkv_f16_to_f32(x[i].d) * y[i].d;
        const float mw = pkv_f16_to_f32(x[i].dmin) * y[i].d;
        sum += dw * (float)sumi - mw * (float)k_min_term(m, y[i].bsums);
    }
    return sum;
}

/* Q6_K x Q8_K on the unsigned 0..63 quants; the -32 offset comes off once per
 * super-block as 32 * sum_j scale_j * bsum_j (docs/engine.md §2.3). */
float pkv_vec_dot_q6_K_scalar(int64_t n, const void *weight_row, const void *act_row) {
    const block_q6_K *x = weight_row;
    const block_q8_K *y = act_row;
    float sum = 0.0f;
    for (int64_t i = 0; i < n / QK_K; i++) {
        int32_t sumi = 0;
        for (int h = 0; h < 2; h++) {
            const uint8_t *ql = x[i].ql + 64 * h, *qh = x[i].qh + 32 * h;
            const int8_t *sc = x[i].scales + 8 * h, *a = y[i].qs + 128 * h;
            for (int sub = 0; sub < 2; sub++) { /* l in [16*sub, 16*sub + 16) */
                int32_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
                for (int l = 16 * sub; l < 16 * sub + 16; l++) {
                    s0 += ((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) * a[l];
                    s1 += ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) * a[l + 32];
                    s2 += ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) * a[l + 64];
                    s3 += ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) * a[l + 96];
                }
                sumi += sc[sub] * s0 + sc[sub + 2] * s1 + sc[sub + 4] * s2 + sc[sub + 6] * s3;
            }
        }
        int32_t offset = 0;
        for (int j = 0; j < QK_K / 16; j++) offset += x[i].scales[j] * y[i].bsums[j];
        sum += (pkv_f16_to_f32(x[i].d) * y[i].d) * (float)(sumi - 32 * offset);
    }
    return sum;
}

/* ------------------------------------------------------------------ reference weight quantisers */

/* Nearest integer of v clamped to [lo, hi]; NaN maps to lo. */
static int round_clamp(float v, int lo, int hi) {
    if (!(v >= (float)lo)) return lo;
    if (v >= (float)hi) return hi;
    return round_half_even(v);
}

/* A scale as fp16, clamped to the finite range so a block never decodes to inf. */
static uint16_t f16_scale(float d) {
    if (d > 65504.0f) d = 65504.0f;
    if (d < -65504.0f) d = -65504.0f;
    return pkv_f32_to_f16(d);
}

/* The first value of largest magnitude, with its sign. */
static float signed_absmax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

/* Q4_0/Q5_0: d = max/-2^(bits-1) so the extreme value maps to the lowest code
 * (ggml's choice), q = round(x/d) + 2^(bits-1). */
static void quantize_symmetric_block(const float *x, int bits, uint16_t *d_out, uint8_t q[32]) {
    const int mid = 1 << (bits - 1);
    *d_out = f16_scale(signed_absmax(x, 32) / (float)-mid);
    const float d = pkv_f16_to_f32(*d_out);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < 32; j++) q[j] = (uint8_t)round_clamp(x[j] * id + (float)mid, 0, 2 * mid - 1);
}

/* Q4_1/Q5_1: x = q*d + m with m = min, d = (max - min)/(2^bits - 1). */
static void quantize_affine_block(const float *x, int bits, uint16_t *d_out, uint16_t *m_out,
                                  uint8_t q[32]) {
    const int qmax = (1 << bits) - 1;
    float lo = x[0], hi = x[0];
    for (int j = 1; j < 32; j++) {
        lo = fminf(lo, x[j]);
        hi = fmaxf(hi, x[j]);
    }
    *d_out = f16_scale((hi - lo) / (float)qmax);
    *m_out = f16_scale(lo);
    const float d = pkv_f16_to_f32(*d_out), m = pkv_f16_to_f32(*m_out);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < 32; j++) q[j] = (uint8_t)round_clamp((x[j] - m) * id, 0, qmax);
}

static void pack_nibbles(const uint8_t q[32], uint8_t qs[16]) {
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)((q[j] & 15) | ((q[j + 16] & 15) << 4));
}

static void pack_fifth_bits(const uint8_t q[32], uint8_t qh[4]) {
    uint32_t bits = 0;
    for (int j = 0; j < 32; j++) bits |= (uint32_t)((q[j] >> 4) & 1) << j;
    memcpy(qh, &bits, sizeof bits);
}

/* Q4_K/Q5_K super-block: each 32-element sub-block j covers [lo_j, hi_j]
 * (lo_j <= 0) as x = step_j*q - offset_j. d = (largest range/qmax)/63 and
 * dmin = (largest -lo)/63 are stored first; then each 6-bit min is rounded
 * up (the offset reaches down to lo_j) and each 6-bit scale is rounded up
 * from the range left to cover (the top reaches hi_j), so no quant clamps
 * and the error stays within half a step; quants are round to nearest. */
static void quantize_k_affine(const float *x, int bits, uint16_t *d_out, uint16_t *dmin_out,
                              uint8_t scales[K_SCALE_SIZE], uint8_t q[QK_K]) {
    const int qmax = (1 << bits) - 1;
    float lo[8], hi[8], max_scale = 0.0f, max_min = 0.0f;
    for (int j = 0; j < 8; j++) {
        lo[j] = 0.0f, hi[j] = x[32 * j];
        for (int l = 0; l < 32; l++) {
            lo[j] = fminf(lo[j], x[32 * j + l]);
            hi[j] = fmaxf(hi[j], x[32 * j + l]);
        }
        hi[j] = fmaxf(hi[j], lo[j]);
        max_scale = fmaxf(max_scale, (hi[j] - lo[j]) / (float)qmax);
        max_min = fmaxf(max_min, -lo[j]);
    }
    *d_out = f16_scale(max_scale / 63.0f);
    *dmin_out = f16_scale(max_min / 63.0f);
    const float d = pkv_f16_to_f32(*d_out), dmin = pkv_f16_to_f32(*dmin_out);
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; j++) {
        m[j] = (uint8_t)(dmin > 0.0f ? round_clamp(ceilf(-lo[j] / dmin), 0, 63) : 0);
        const float offset = dmin * (float)m[j];
        sc[j] = (uint8_t)(d > 0.0f ? round_clamp(ceilf((hi[j] + offset) / (float)qmax / d), 0, 63) : 0);
        const float step = d * (float)sc[j];
        for (int l = 0; l < 32; l++)
            q[32 * j + l] =
                (uint8_t)(step > 0.0f ? round_clamp((x[32 * j + l] + offset) / step, 0, qmax) : 0);
    }
    pkv_k_scales_pack(sc, m, scales);
}

static void quantize_row_q4_K_ref(const float *x, block_q4_K *y, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        uint8_t q[QK_K];
        quantize_k_affine(x, 4, &y[i].d, &y[i].dmin, y[i].scales, q);
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < 32; l++)
                y[i].qs[32 * k + l] = (uint8_t)(q[64 * k + l] | (q[64 * k + 32 + l] << 4));
    }
}

static void quantize_row_q5_K_ref(const float *x, block_q5_K *y, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        uint8_t q[QK_K];
        quantize_k_affine(x, 5, &y[i].d, &y[i].dmin, y[i].scales, q);
        memset(y[i].qh, 0, sizeof y[i].qh);
        for (int k = 0; k < 4; k++)
            for (int l = 0; l < 32; l++) {
                const uint8_t lo = q[64 * k + l], hi = q[64 * k + 32 + l];
                y[i].qs[32 * k + l] = (uint8_t)((lo & 15) | ((hi & 15) << 4));
                y[i].qh[l] |= (uint8_t)(((lo >> 4) << (2 * k)) | ((hi >> 4) << (2 * k + 1)));
            }
    }
}

/* Q6_K: each 16-element sub-block's extreme value maps to -32; the 16 sub-
 * block scales are quantised to int8 against d = (largest scale)/-128. */
static void quantize_row_q6_K_ref(const float *x, block_q6_K *y, int64_t n) {
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float scale[16], big = 0.0f;
        for (int j = 0; j < 16; j++) {
            scale[j] = signed_absmax(x + 16 * j, 16) / -32.0f;
            if (fabsf(scale[j]) > fabsf(big)) big = scale[j];
        }
        y[i].d = f16_scale(big / -128.0f);
        const float d = pkv_f16_to_f32(y[i].d);
        memset(y[i].ql, 0, sizeof y[i].ql);
        memset(y[i].qh, 0, sizeof y[i].qh);
        for (int e = 0; e < QK_K; e++) {
            const int j = e / 16;
            if (e % 16 == 0) y[i].scales[j] = (int8_t)(d != 0.0f ? round_clamp(scale[j] / d, -128, 127) : 0);
            const float step = d * (float)y[i].scales[j];
            const int q = (step != 0.0f ? round_clamp(x[e] / step, -32, 31) : 0) + 32;
            const int h = e / 128, c = (e % 128) / 32, l = e % 32;
            y[i].ql[64 * h + 32 * (c & 1) + l] |= (uint8_t)((q & 15) << (c < 2 ? 0 : 4));
            y[i].qh[32 * h + l] |= (uint8_t)((q >> 4) << (2 * c));
        }
    }
}

void pkv_quantize_row_ref(pkv_type type, const float *src, void *dst, int64_t n) {
    uint8_t q[32];
    switch (type) {
    case PKV_TYPE_F32: memcpy(dst, src, (size_t)n * sizeof(float)); break;
    case PKV_TYPE_F16: pkv_f32_to_f16_scalar(src, dst, n); break;
    case PKV_TYPE_BF16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = pkv_f32_to_bf16(src[i]);
        break;
    case PKV_TYPE_Q4_0:
        for (int64_t i = 0; i < n / 32; i++) {
            block_q4_0 *y = (block_q4_0 *)dst + i;
            quantize_symmetric_block(src + 32 * i, 4, &y->d, q);
            pack_nibbles(q, y->qs);
        }
        break;
    case PKV_TYPE_Q5_0:
        for (int64_t i = 0; i < n / 32; i++) {
            block_q5_0 *y = (block_q5_0 *)dst + i;
            quantize_symmetric_block(src + 32 * i, 5, &y->d, q);
            pack_nibbles(q, y->qs);
            pack_fifth_bits(q, y->qh);
        }
        break;
    case PKV_TYPE_Q4_1:
        for (int64_t i = 0; i < n / 32; i++) {
            block_q4_1 *y = (block_q4_1 *)dst + i;
            quantize_affine_block(src + 32 * i, 4, &y->d, &y->m, q);
            pack_nibbles(q, y->qs);
        }
        break;
    case PKV_TYPE_Q5_1:
        for (int64_t i = 0; i < n / 32; i++) {
            block_q5_1 *y = (block_q5_1 *)dst + i;
            quantize_affine_block(src + 32 * i, 5, &y->d, &y->m, q);
            pack_nibbles(q, y->qs);
            pack_fifth_bits(q, y->qh);
        }
        break;
    case PKV_TYPE_Q8_0:
        for (int64_t i = 0; i < n / 32; i++) {
            block_q8_0 *y = (block_q8_0 *)dst + i;
            const float *x = src + 32 * i;
            float amax = 0.0f;
            for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
            y->d = f16_scale(amax / 127.0f);
            const float d = pkv_f16_to_f32(y->d);
            const float id = d != 0.0f ? 1.0f / d : 0.0f;
            for (int j = 0; j < 32; j++) y->qs[j] = (int8_t)round_clamp(x[j] * id, -127, 127);
        }
        break;
    case PKV_TYPE_Q8_1: pkv_quantize_q8_1_scalar(src, dst, n); break;
    case PKV_TYPE_Q8_K: pkv_quantize_q8_K_scalar(src, dst, n); break;
    case PKV_TYPE_Q4_K: quantize_row_q4_K_ref(src, dst, n); break;
    case PKV_TYPE_Q5_K: quantize_row_q5_K_ref(src, dst, n); break;
    case PKV_TYPE_Q6_K: quantize_row_q6_K_ref(src, dst, n); break;
    default: break; /* no reference quantiser: nothing written */
    }
}
