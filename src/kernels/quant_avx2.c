/*
 * AVX2 + FMA + F16C kernels (docs/engine.md §6.2). Reached only through the
 * AVX2/AVX-512 kernel tables (cpu.c), on CPUs that have these extensions.
 *
 * Dot products stay in integers inside a block: unsigned x signed byte
 * products with maddubs (pairs to i16), madd to i32 (with ones, or with the
 * sub-block scales), then one float FMA per block with the block's combined
 * scale. Dequantisation performs exactly the scalar operations in the same
 * order (no FMA: the build is ISO C11, so GCC does not contract mul+add), so
 * it is bit-identical to quant.c. The activation quantisers use cvtps2dq
 * under the default round-to-nearest-even MXCSR, which is the scalar
 * round_half_even rule, so they are bit-identical too.
 */
#include <float.h>
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "kernels/f16.h"
#include "kernels/levels.h"
#include "kernels/table.h"
#include "kernels/simd_x86.h"

/* ------------------------------------------------------------------ helpers */

/* Store 32 signed bytes as floats times d (bit-identical to (float)q * d). */
static inline void store_scaled_bytes(__m256i q, float d, float *dst) {
    const __m256 vd = _mm256_set1_ps(d);
    const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    _mm256_storeu_ps(dst + 0, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(lo)), vd));
    _mm256_storeu_ps(dst + 8, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(lo, 8))), vd));
    _mm256_storeu_ps(dst + 16, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(hi)), vd));
    _mm256_storeu_ps(dst + 24, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(hi, 8))), vd));
}

/* Store 32 unsigned bytes as q*d + m: the Q4_1/Q5_1 dequant order. */
static inline void store_affine_bytes(__m256i q, float d, float m, float *dst) {
    const __m256 vd = _mm256_set1_ps(d), vm = _mm256_set1_ps(m);
    const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++) {
        const __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[p]));
        _mm256_storeu_ps(dst + 8 * p, _mm256_add_ps(_mm256_mul_ps(f, vd), vm));
    }
}

/* d1*q - m1 for 32 unsigned bytes: the K-quant dequant order. */
static inline void store_k_bytes(__m256i q, float d1, float m1, float *dst) {
    const __m256 vd = _mm256_set1_ps(d1), vm = _mm256_set1_ps(m1);
    const __m128i lo = _mm256_castsi256_si128(q), hi = _mm256_extracti128_si256(q, 1);
    const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
#pragma GCC unroll 4
    for (int p = 0; p < 4; p++) {
        const __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(parts[p]));
        _mm256_storeu_ps(dst + 8 * p, _mm256_sub_ps(_mm256_mul_ps(vd, f), vm));
    }
}

/* A legacy block's 32 quants minus the type's offset, as signed bytes
 * (dequantisation and the several-row dot products). */
static inline __m256i q8_0_signed(const block_q8_0 *b) { return load256(b->qs); }
static inline __m256i q4_0_signed(const block_q4_0 *b) {
    return _mm256_sub_epi8(legacy_nibbles(b->qs), _mm256_set1_epi8(8));
}
/* q - 16: the nibble alone where the fifth bit is set, else nibble | 0xF0 */
static inline __m256i q5_0_signed(const block_q5_0 *b) {
    const __m256i missing = _mm256_andnot_si256(bits_to_bytes(load_u32(b->qh)), _mm256_set1_epi8((char)0xF0));
    return _mm256_or_si256(legacy_nibbles(b->qs), missing);
}

/* ------------------------------------------------------------------ dequantisation */

void pkv_dequant_f16_avx2(const void *src, float *dst, int64_t n) {
    pkv_f16_to_f32_avx2(src, dst, n);
}

void pkv_dequant_bf16_avx2(const void *src, float *dst, int64_t n) {
    const uint16_t *h = src;
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(h + i)));
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(w, 16)));
    }
    for (; i < n; i++) dst[i] = pkv_bf16_to_f32(h[i]);
}

void pkv_dequant_q4_0_avx2(const void *src, float *dst, int64_t n) {
    const block_q4_0 *b = src;
    for (int64_t i = 0; i < n / QK4_0; i++, dst += QK4_0) {
        store_scaled_bytes(q4_0_signed(&b[i]), half(b[i].d), dst);
    }
}

void pkv_dequant_q4_1_avx2(const void *src, float *dst, int64_t n) {
    const block_q4_1 *b = src;
    for (int64_t i = 0; i < n / QK4_0; i++, dst += QK4_0)
        store_affine_bytes(legacy_nibbles(b[i].qs), half(b[i].d), half(b[i].m), dst);
}

void pkv_dequant_q5_0_avx2(const void *src, float *dst, int64_t n) {
    const block_q5_0 *b = src;
    for (int64_t i = 0; i < n / QK5_0; i++, dst += QK5_0) {
        store_scaled_bytes(q5_0_signed(&b[i]), half(b[i].d), dst);
    }
}

void pkv_dequant_q5_1_avx2(const void *src, float *dst, int64_t n) {
    const block_q5_1 *b = src;
    for (int64_t i = 0; i < n / QK5_0; i++, dst += QK5_0) {
        const __m256i fifth = _mm256_and_si256(bits_to_bytes(load_u32(b[i].qh)), _mm256_set1_epi8(16));
        store_affine_bytes(_mm256_or_si256(legacy_nibbles(b[i].qs), fifth), half(b[i].d), half(b[i].m), dst);
    }
}

void pkv_dequant_q8_0_avx2(const void *src, float *dst, int64_t n) {
    const block_q8_0 *b = src;
    for (int64_t i = 0; i < n / QK8_0; i++, dst += QK8_0)
        store_scaled_bytes(q8_0_signed(&b[i]), half(b[i].d), dst);
}

void pkv_dequant_q4_K_avx2(const void *src, float *dst, int64_t n) {
    const block_q4_K *b = src;
    const __m256i low4 = _mm256_set1_epi8(15);
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = half(b[i].d), dmin = half(b[i].dmin);
        uint64_t sc64, m64;
        k_scales_mins(b[i].scales, &sc64, &m64);
        uint8_t sc[8], m[8];
        memcpy(sc, &sc64, 8);
        memcpy(m, &m64, 8);
        for (int k = 0; k < 4; k++, dst += 64) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * k));
            store_k_bytes(_mm256_and_si256(q, low4), d * sc[2 * k], dmin * m[2 * k], dst);
            store_k_bytes(_mm256_and_si256(_mm256_srli_epi16(q, 4), low4), d * sc[2 * k + 1],
                          dmin * m[2 * k + 1], dst + 32);
        }
    }
}

void pkv_dequant_q5_K_avx2(const void *src, float *dst, int64_t n) {
    const block_q5_K *b = src;
    const __m256i low4 = _mm256_set1_epi8(15);
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = half(b[i].d), dmin = half(b[i].dmin);
        uint64_t sc64, m64;
        k_scales_mins(b[i].scales, &sc64, &m64);
        uint8_t sc[8], m[8];
        memcpy(sc, &sc64, 8);
        memcpy(m, &m64, 8);
        const __m256i qh = _mm256_loadu_si256((const __m256i *)b[i].qh);
        for (int k = 0; k < 4; k++, dst += 64) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(b[i].qs + 32 * k));
            const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, low4), q5k_fifth(qh, 2 * k));
            const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), low4),
                                               q5k_fifth(qh, 2 * k + 1));
            store_k_bytes(lo, d * sc[2 * k], dmin * m[2 * k], dst);
            store_k_bytes(hi, d * sc[2 * k + 1], dmin * m[2 * k + 1], dst + 32);
        }
    }
}

/* The four 32-element chunks of one Q6_K half (128 elements) as unsigned
 * 0..63 bytes: chunk c takes nibble c/2 of ql[32(c&1) + l] and bits 2c..2c+1
 * of qh[l] (docs/engine.md §2.2). */
static inline void q6k_chunks(const uint8_t *ql, const uint8_t *qh, __m256i q[4]) {
    const __m256i low4 = _mm256_set1_epi8(15), two = _mm256_set1_epi8(0x30);
    const __m256i l0 = _mm256_loadu_si256((const __m256i *)ql);
    const __m256i l1 = _mm256_loadu_si256((const __m256i *)(ql + 32));
    const __m256i h = _mm256_loadu_si256((const __m256i *)qh);
    q[0] = _mm256_or_si256(_mm256_and_si256(l0, low4), _mm256_and_si256(_mm256_slli_epi16(h, 4), two));
    q[1] = _mm256_or_si256(_mm256_and_si256(l1, low4), _mm256_and_si256(_mm256_slli_epi16(h, 2), two));
    q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), _mm256_and_si256(h, two));
    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                           _mm256_and_si256(_mm256_srli_epi16(h, 2), two));
}

void pkv_dequant_q6_K_avx2(const void *src, float *dst, int64_t n) {
    const block_q6_K *b = src;
    for (int64_t i = 0; i < n / QK_K; i++) {
        const float d = half(b[i].d);
        for (int h = 0; h < 2; h++, dst += 128) {
            __m256i q[4];
            q6k_chunks(b[i].ql + 64 * h, b[i].qh + 32 * h, q);
            const int8_t *sc = b[i].scales + 8 * h;
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) {
                const __m256i v = _mm256_sub_epi8(q[c], _mm256_set1_epi8(32));
                const __m128i lo = _mm256_castsi256_si128(v), hi = _mm256_extracti128_si256(v, 1);
                const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
#pragma GCC unroll 4
                for (int p = 0; p < 4; p++) { /* elements 8p..8p+7 of the chunk: scale 2c + p/2 */
                    const __m256 ds = _mm256_set1_ps(d * (float)sc[2 * c + p / 2]);
                    const __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[p]));
                    _mm256_storeu_ps(dst + 32 * c + 8 * p, _mm256_mul_ps(ds, f));
                }
            }
        }
    }
}

/* ------------------------------------------------------------------ activation quantisation */

/* |x| max of 32 floats. */
static inline float absmax32(const float *x) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_andnot_ps(sign, _mm256_loadu_ps(x));
    for (int k = 8; k < 32; k += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + k)));
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* 32 floats times scale, rounded half to even into 4 vectors of i32. */
static inline void scale_round32(const float *x, float scale, __m256i v[4]) {
    const __m256 s = _mm256_set1_ps(scale);
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++) v[k] = _mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), s));
}

/* Pack 4 vectors of i32 (each within int8 range) into 32 bytes in order. */
static inline __m256i pack_i32_to_i8(const __m256i v[4]) {
    const __m256i w01 = _mm256_packs_epi32(v[0], v[1]); /* lanes interleave per 128-bit half */
    const __m256i w23 = _mm256_packs_epi32(v[2], v[3]);
    const __m256i b = _mm256_packs_epi16(w01, w23);
    return _mm256_permutevar8x32_epi32(b, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

static inline int32_t hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

/* Same rule as quant.c q8_block_scale. */
static inline float q8_scale(const float *x, float *d) {
    const float amax = absmax32(x);
    *d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    return id <= FLT_MAX ? id : 0.0f;
}

void pkv_quantize_q8_0_avx2(const float *src, void *dst, int64_t n) {
    block_q8_0 *y = dst;
    for (int64_t i = 0; i < n / QK8_0; i++, src += QK8_0) {
        float d;
        const float id = q8_scale(src, &d);
        y[i].d = pkv_f32_to_f16(d);
        __m256i v[4];
        scale_round32(src, id, v);
        _mm256_storeu_si256((__m256i *)y[i].qs, pack_i32_to_i8(v));
    }
}

void pkv_quantize_q8_1_avx2(const float *src, void *dst, int64_t n) {
    block_q8_1 *y = dst;
    for (int64_t i = 0; i < n / QK8_0; i++, src += QK8_0) {
        float d;
        const float id = q8_scale(src, &d);
        y[i].d = pkv_f32_to_f16(d);
        __m256i v[4];
        scale_round32(src, id, v);
        const int32_t sum = hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(v[0], v[1]), _mm256_add_epi32(v[2], v[3])));
        y[i].s = pkv_f32_to_f16(d * (float)sum);
        _mm256_storeu_si256((__m256i *)y[i].qs, pack_i32_to_i8(v));
    }
}

/* Index of the first of 256 floats whose |x| equals amax. */
static inline int first_index_of_abs(const float *x, float amax) {
    const __m256 sign = _mm256_set1_ps(-0.0f), target = _mm256_set1_ps(amax);
    for (int k = 0; k < QK_K; k += 8) {
        const __m256 eq = _mm256_cmp_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + k)), target, _CMP_EQ_OQ);
        const int mask = _mm256_movemask_ps(eq);
        if (mask) return k + __builtin_ctz((unsigned)mask);
    }
    return 0;
}

/* Same rule as quant.c pkv_quantize_q8_K_scalar: the sign of the first
 * element of largest magnitude decides the sign of d. */
void pkv_quantize_q8_K_avx2(const float *src, void *dst, int64_t n) {
    block_q8_K *y = dst;
    const __m256i q_max = _mm256_set1_epi32(127);
    for (int64_t i = 0; i < n / QK_K; i++, src += QK_K) {
        float amax = 0.0f;
        for (int k = 0; k < QK_K; k += 32) {
            const float a = absmax32(src + k);
            amax = a > amax ? a : amax;
        }
        const float max = amax != 0.0f ? src[first_index_of_abs(src, amax)] : 0.0f;
        const float iscale = amax != 0.0f ? -127.0f / max : 0.0f;
        if (!(fabsf(iscale) <= FLT_MAX) || iscale == 0.0f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        for (int k = 0; k < QK_K; k += 32) {
            __m256i v[4];
            scale_round32(src + k, iscale, v);
#pragma GCC unroll 4
            for (int p = 0; p < 4; p++) v[p] = _mm256_min_epi32(v[p], q_max);
            _mm256_storeu_si256((__m256i *)(y[i].qs + k), pack_i32_to_i8(v));
            /* bsums of elements k..k+15 and k+16..k+31 */
            const __m256i s01 = _mm256_add_epi32(v[0], v[1]), s23 = _mm256_add_epi32(v[2], v[3]);
            y[i].bsums[k / 16] = (int16_t)hsum_epi32(s01);
            y[i].bsums[k / 16 + 1] = (int16_t)hsum_epi32(s23);
        }
        y[i].d = 1.0f / iscale;
    }
}

/* ------------------------------------------------------------------ fused dot products */

/* F32/F16/BF16 weights: F32 activations, see quant.c. */
float pkv_vec_dot_f32_avx2(int64_t n, const void *weight_row, const void *act_row) {
    return pkv_dot_f32_avx2(n, weight_row, act_row);
}

float pkv_vec_dot_f16_avx2(int64_t n, const void *weight_row, const void *act_row) {
    return pkv_dot_f16_f32_avx2(n, weight_row, act_row);
}

static inline __m256 load_bf16x8(const uint16_t *p) {
    const __m256i w = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(w, 16));
}

float pkv_vec_dot_bf16_avx2(int64_t n, const void *weight_row, const void *act_row) {
    const uint16_t *w = weight_row;
    const float *a = act_row;
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            acc[k] = _mm256_fmadd_ps(load_bf16x8(w + i + 8 * k), _mm256_loadu_ps(a + i + 8 * k), acc[k]);
    for (; i + 8 <= n; i += 8) acc[0] = _mm256_fmadd_ps(load_bf16x8(w + i), _mm256_loadu_ps(a + i), acc[0]);
    float sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; i++) sum += pkv_bf16_to_f32(w[i]) * a[i];
    return sum;
}

float pkv_vec_dot_q8_0_avx2(int64_t n, const void *weight_row, const void *act_row) {
    const block_q8_0 *x = weight_row;
    const block_q8_0 *y = act_row;
#define Q8_0_SUMS(b) dot_i8_i8(load256(x[b].qs), load256(y[b].qs))
    LEGACY_DOT_LOOP(x, y, n / QK8_0, Q8_0_SUMS);
#undef Q8_0_SUMS
    return hsum_ps(acc_all);
}

/* Offset quants (q - off) x activations without the sign trick: maddubs of
 * the unsigned quants minus maddubs of the offset, both as i16 pair sums
 * (|pairs| <= 31*127*2 and 16*127*2, difference within i16). */
static inline __m256i dot_offset_u8_i8(__m256i q, __m256i offset, __m256i y) {
    const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(q, y), _mm256_maddubs_epi16(offset, y));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

float pkv_vec_dot_q4_0_avx2(int64_t n, const void *weight_row, const void *act_row) {
    const block_q4_0 *x = weight_row;
    const block_q8_0 *y = act_row;
    const __m256i eight = _mm256_set1_epi8(8);
#define Q4_0_SUMS(b) dot_offset_u8_i8(legacy_nibbles(x[b].qs), eight, load256(y[b].qs))
    LEGACY_DOT_LOOP(x, y, n / QK8_0, Q4_0_SUMS);
#undef Q4_0_SUMS
    return hsum_ps(acc_all);
}

/* The five-bit quant of a Q5_0/Q5_1 block (0..31): nibble | fifth bit << 4. */
static inline __m256i q5_unsigned(const uint8_t *qs, const uint8_t *qh) {
    const __m256i fifth = _mm256_and_si256(bits_to_bytes(load_u32(qh)), _mm256_set1_epi8(16));
    return _mm256_or_si256(legacy_nibbles(qs), fifth);
}

/* Q5_0: sum (nibble + 16*bit - 16) * y = maddubs(nibble, y) - 16 * (y where
 * the fifth bit is clear), which needs no shift or or of the fifth bits. */
static inline __m256i q5_0_sums(const block_q5_0 *b, __m256i y) {
    const __m256i y_bit_clear = _mm256_andnot_si256(bits_to_bytes(load_u32(b->qh)), y);
    const __m256i p = _mm256_sub_epi16(_mm256_maddubs_epi16(legacy_nibbles(b->qs), y),
                                       _mm256_maddubs_epi16(_mm256_set1_epi8(16), y_bit_clear));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

float pkv_vec_dot_q5_0_avx2(int64_t n, const void *weight_row, const void *act_row) {
    const block_q5_0 *x = weight_row;
    const block_q8_0 *y = act_row;
#define Q5_0_SUMS(b) q5_0_sums(&x[b], load256(y[b].qs))
    LEGACY_DOT_LOOP(x, y, n / QK8_0, Q5_0_SUMS);
#undef Q5_0_SUMS
    return hsum_ps(acc_all);
}

/* The legacy types against several activation rows (LEGACY_DOT_ROWS), the
 * quants as signed bytes (the helpers above); two rows per group keep the
 * accumulators in the 16 vector registers. */
LEGACY_DOT_ROWS(pkv_vec_dot_rows_q8_0_avx2, block_q8_0, 2, q8_0_signed, dot_u8_i8)
LEGACY_DOT_ROWS(pkv_vec_dot_rows_q4_0_avx2, block_q4_0, 2, q4_0_signed, dot_u8_i8)
LEGACY_DOT_ROWS(pkv_vec_dot_rows_q5_0_avx2, block_q5_0, 2, q5_0_signed, dot_u8_i8)

float pkv_vec_dot_q4_1_avx2(int64_t n, const void *weight_row, const void *act_row) {
    const block_q4_1 *x = weight_row;
    const block_q8_1 *y = act_row;
#define Q4_1_SUMS(b) dot_u8_i8(legacy_nibbles(x[b].qs), load256(y[b].qs))
    AFFINE_DOT_LOOP(x, y, n / QK8_0, Q4_1_SUMS);
#undef Q4_1_SUMS
    return hsum_ps(acc_all) + mins;
}

float pkv_vec_dot_q5_1_avx2(int64_t n, const void *weight_row, const void *act_row) {
    const block_q5_1 *x = weight_row;
    const block_q8_1 *y = act_row;
#define Q5_1_SUMS(b) dot_u8_i8(q5_unsigned(x[b].qs, x[b].qh), load256(y[b].qs))
    AFFINE_DOT_LOOP(x, y, n / QK8_0, Q5_1_SUMS);
#undef Q5_1_SUMS
    return hsum_ps(acc_all) + mins;
}

/* One 64-element chunk of Q4_K/Q5_K: lo/hi are the quants of sub-blocks 2k
 * and 2k+1 against activations a[0..31] and a[32..63]; each pair sum is
 * multiplied by its sub-block's 16-bit scale and accumulated in i32. */
static inline __m256i k_chunk(__m256i lo, __m256i hi, const int8_t *a, __m256i scale_lo, __m256i scale_hi,
                              __m256i sumi) {
    const __m256i p_lo = _mm256_maddubs_epi16(lo, _mm256_loadu_si256((const __m256i *)a));
    const __m256i p_hi = _mm256_maddubs_epi16(hi, _mm256_loadu_si256((const __m256i *)(a + 32)));
    sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p_lo, scale_lo));
    return _mm256_add_epi32(sumi, _mm256_madd_epi16(p_hi, scale_hi));
}

/* Q4_K against g activation rows (1 for vec_dot, up to K_ROWS for
 * vec_dot_rows): each block's nibbles and scales unpacked once, then every
 * row takes exactly the steps a single row takes, so each row has the bits
 * of vec_dot alone. */
enum { K_ROWS = 2 };

static inline __attribute__((always_inline)) void q4_K_rows(const int g, int64_t n, const void *weight_row,
                                                            const char *act, uint64_t stride, float *out,
                                                            int64_t ostride) {
    const block_q4_K *x = weight_row;
    const block_q8_K *y[K_ROWS];
    const __m256i low4 = _mm256_set1_epi8(15);
    __m256 acc[K_ROWS];
    __m128 acc_m[K_ROWS];
#pragma GCC unroll 2
    for (int r = 0; r < g; r++) {
        y[r] = (const block_q8_K *)(act + (uint64_t)r * stride);
        acc[r] = _mm256_setzero_ps();
        acc_m[r] = _mm_setzero_ps();
    }
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint64_t sc, m;
        k_scales_mins(x[i].scales, &sc, &m);
        const float dmin = half(x[i].dmin), dx = half(x[i].d);
        const __m256i s16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
        __m256i lo[4], hi[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * k));
            lo[k] = _mm256_and_si256(q, low4);
            hi[k] = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
        }
#pragma GCC unroll 2
        for (int r = 0; r < g; r++) {
            const block_q8_K *yr = &y[r][i];
            const float dy = yr->d;
            acc_m[r] = _mm_fmadd_ps(_mm_set1_ps(dmin * dy), _mm_cvtepi32_ps(k_min_products(m, yr->bsums)), acc_m[r]);
            __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++)
                sumi = k_chunk(lo[k], hi[k], yr->qs + 64 * k, SCALE_OF(s16, 2 * k), SCALE_OF(s16, 2 * k + 1), sumi);
            acc[r] = fma_block(sumi, dx * dy, acc[r]);
        }
    }
#pragma GCC unroll 2
    for (int r = 0; r < g; r++) out[r * ostride] = hsum_ps(acc[r]) - hsum_ps128(acc_m[r]);
}

DOT_AND_DOT_ROWS(pkv_vec_dot_q4_K_avx2, pkv_vec_dot_rows_q4_K_avx2, q4_K_rows, K_ROWS)

float pkv_vec_dot_q5_K_avx2(int64_t n, const void *weight_row, const void *act_row) {
    const block_q5_K *x = weight_row;
    const block_q8_K *y = act_row;
    const __m256i low4 = _mm256_set1_epi8(15);
    __m256 acc = _mm256_setzero_ps();
    __m128 acc_m = _mm_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint64_t sc, m;
        k_scales_mins(x[i].scales, &sc, &m);
        const float dy = y[i].d;
        acc_m = _mm_fmadd_ps(_mm_set1_ps(half(x[i].dmin) * dy), _mm_cvtepi32_ps(k_min_products(m, y[i].bsums)), acc_m);
        const __m256i s16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
        const __m256i qh = _mm256_loadu_si256((const __m256i *)x[i].qh);
        __m256i sumi = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(x[i].qs + 32 * k));
            const __m256i lo = _mm256_or_si256(_mm256_and_si256(q, low4), q5k_fifth(qh, 2 * k));
            const __m256i hi = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q, 4), low4), q5k_fifth(qh, 2 * k + 1));
            sumi = k_chunk(lo, hi, y[i].qs + 64 * k, SCALE_OF(s16, 2 * k), SCALE_OF(s16, 2 * k + 1), sumi);
        }
        acc = fma_block(sumi, half(x[i].d) * dy, acc);
    }
    return hsum_ps(acc) - hsum_ps128(acc_m);
}

/* Q6_K: 32-element chunk c of a half holds sub-blocks 2c (first 16 bytes) and
 * 2c+1 (last 16), so its scale vector is scale 2c in the low 128-bit lane and
 * 2c+1 in the high one. */
#define Q6K_SCALES(s16, c)                                                                         \
    _mm256_shuffle_epi8((s16), _mm256_set_m128i(_mm_set1_epi16((short)((4 * (c) + 2) | ((4 * (c) + 3) << 8))), \
                                                _mm_set1_epi16((short)((4 * (c)) | ((4 * (c) + 1) << 8)))))

/* Q6_K against g activation rows, as q4_K_rows: the chunks and scale
 * vectors of a block unpacked once, each row the steps of one row alone. */
static inline __attribute__((always_inline)) void q6_K_rows(const int g, int64_t n, const void *weight_row,
                                                            const char *act, uint64_t stride, float *out,
                                                            int64_t ostride) {
    const block_q6_K *x = weight_row;
    const block_q8_K *y[K_ROWS];
    __m256 acc[K_ROWS];
#pragma GCC unroll 2
    for (int r = 0; r < g; r++) {
        y[r] = (const block_q8_K *)(act + (uint64_t)r * stride);
        acc[r] = _mm256_setzero_ps();
    }
    for (int64_t i = 0; i < n / QK_K; i++) {
        const __m256i all16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[i].scales));
        __m256i q[2][4], sv[2][4];
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            q6k_chunks(x[i].ql + 64 * h, x[i].qh + 32 * h, q[h]);
            const __m256i s16 = _mm256_broadcastsi128_si256(_mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(x[i].scales + 8 * h))));
#pragma GCC unroll 4
            for (int c = 0; c < 4; c++) sv[h][c] = Q6K_SCALES(s16, c);
        }
        const float dx = half(x[i].d);
#pragma GCC unroll 2
        for (int r = 0; r < g; r++) {
            const block_q8_K *yr = &y[r][i];
            /* -32 offset: sumi starts at -32 * sum_j scale_j * bsum_j */
            const __m256i offset = _mm256_madd_epi16(all16, _mm256_loadu_si256((const __m256i *)yr->bsums));
            __m256i sumi = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(offset, 5));
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                const int8_t *a = yr->qs + 128 * h;
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++) {
                    const __m256i p = _mm256_maddubs_epi16(q[h][c], _mm256_loadu_si256((const __m256i *)(a + 32 * c)));
                    sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(p, sv[h][c]));
                }
            }
            acc[r] = fma_block(sumi, dx * yr->d, acc[r]);
        }
    }
#pragma GCC unroll 2
    for (int r = 0; r < g; r++) out[r * ostride] = hsum_ps(acc[r]);
}

DOT_AND_DOT_ROWS(pkv_vec_dot_q6_K_avx2, pkv_vec_dot_rows_q6_K_avx2, q6_K_rows, K_ROWS)
