/*
 * Inline helpers shared by the x86 SIMD kernel files (quant_avx2.c,
 * quant_avx512.c, gemm_avx2.c, gemm_avx512.c, vec_avx2.c, vec_avx512.c). Include only from files compiled with at least
 * -mavx2 -mfma -mf16c.
 */
#ifndef PKV_SIMD_X86_H
#define PKV_SIMD_X86_H

#if !defined(__AVX2__) || !defined(__FMA__) || !defined(__F16C__)
#error "simd_x86.h needs AVX2, FMA and F16C"
#endif

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels/table.h"

static inline float hsum_ps(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float hsum_ps128(__m128 s) {
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline float half(uint16_t h) { return _cvtsh_ss(h); }

static inline uint32_t load_u32(const void *p) {
    uint32_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* 32 nibbles of a legacy block as bytes 0..15: element j < 16 is the low
 * nibble of qs[j], element 16 + j the high nibble (docs/engine.md §2.1).
 * The 16 bytes are broadcast to both halves by the load itself; one variable
 * shift moves the high half's high nibbles down. */
static inline __m256i legacy_nibbles(const uint8_t *qs) {
    const __m256i v = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)qs));
    return _mm256_and_si256(_mm256_srlv_epi64(v, _mm256_setr_epi64x(0, 0, 4, 4)), _mm256_set1_epi8(15));
}

/* 0xFF in byte j where bit j of bits is set (the Q5 fifth bits). */
static inline __m256i bits_to_bytes(uint32_t bits) {
    const __m256i spread = _mm256_setr_epi64x(0, 0x0101010101010101, 0x0202020202020202,
                                              0x0303030303030303);
    const __m256i bit_of_byte = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)bits), spread);
    return _mm256_cmpeq_epi8(_mm256_and_si256(v, bit_of_byte), bit_of_byte);
}

/* Eight i32 sums of 4 products each of unsigned u (0..255) and signed s bytes.
 * maddubs saturates to i16; callers keep u*s pair sums below 32767. */
static inline __m256i dot_u8_i8(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

/* The same for two signed operands: move x's sign onto y (x = -128 is fine:
 * its abs reads as unsigned 128; y is an activation quant, never -128). */
static inline __m256i dot_i8_i8(__m256i x, __m256i y) {
    return dot_u8_i8(_mm256_abs_epi8(x), _mm256_sign_epi8(y, x));
}

/* Eight i32 lanes to float, scaled and added to acc. */
static inline __m256 fma_block(__m256i sums, float scale, __m256 acc) {
    return _mm256_fmadd_ps(_mm256_set1_ps(scale), _mm256_cvtepi32_ps(sums), acc);
}

/* Q4_K/Q5_K scales and mins as two u64 of 8 bytes each, by the word-wise
 * unpacking of docs/engine.md §2.2 (same result as the per-j formulas). */
static inline void k_scales_mins(const uint8_t s[K_SCALE_SIZE], uint64_t *scales, uint64_t *mins) {
    const uint32_t w0 = load_u32(s), w1 = load_u32(s + 4), w2 = load_u32(s + 8);
    const uint32_t sc_lo = w0 & 0x3f3f3f3fu;
    const uint32_t m_lo = w1 & 0x3f3f3f3fu;
    const uint32_t sc_hi = (w2 & 0x0f0f0f0fu) | (((w0 >> 6) & 0x03030303u) << 4);
    const uint32_t m_hi = ((w2 >> 4) & 0x0f0f0f0fu) | (((w1 >> 6) & 0x03030303u) << 4);
    *scales = (uint64_t)sc_lo | ((uint64_t)sc_hi << 32);
    *mins = (uint64_t)m_lo | ((uint64_t)m_hi << 32);
}

/* sum_j mins[j] * (bsums[2j] + bsums[2j+1]) as 4 i32 lanes. */
static inline __m128i k_min_products(uint64_t mins, const int16_t *bsums) {
    const __m128i m16 = _mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)mins));
    const __m128i b_lo = _mm_loadu_si128((const __m128i *)bsums);
    const __m128i b_hi = _mm_loadu_si128((const __m128i *)(bsums + 8));
    return _mm_madd_epi16(m16, _mm_hadd_epi16(b_lo, b_hi));
}

/* A vector whose 16 i16 lanes all hold scale j of the 8 i16 scales broadcast
 * in both 128-bit halves of s16. */
#define SCALE_OF(s16, j) _mm256_shuffle_epi8((s16), _mm256_set1_epi16((short)((2 * (j)) | ((2 * (j) + 1) << 8))))

/* Four fp16 fields at base, base + stride, ... as floats. The 16-bit loads
 * and shifts run in the general-purpose pipes, which are otherwise idle in
 * these loops, and one conversion serves four blocks. */
static inline __m128 halves4(const void *base, size_t stride) {
    const uint8_t *p = base;
    uint64_t packed = 0;
    for (int k = 0; k < 4; k++) {
        uint16_t h;
        memcpy(&h, p + k * stride, 2);
        packed |= (uint64_t)h << (16 * k);
    }
    return _mm_cvtph_ps(_mm_cvtsi64_si128((long long)packed));
}

static inline __m256i load256(const void *p) { return _mm256_loadu_si256((const __m256i *)p); }

/* The legacy x Q8_0/Q8_1 kernels share one shape: groups of 4 blocks whose
 * combined scales d_w*d_a are computed together (stored, then broadcast by
 * the load unit), one i32 dot vector and one FMA per block into 4
 * independent accumulators; leftover blocks one at a time. BLOCK_SUMS(k)
 * gives the 8-lane i32 sums of block k. */
#define LEGACY_DOT_LOOP(x, y, nb, BLOCK_SUMS)                                                       \
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()}; \
    int64_t i = 0;                                                                                  \
    for (; i + 4 <= (nb); i += 4) {                                                                 \
        float scale[4];                                                                             \
        _mm_storeu_ps(scale, _mm_mul_ps(halves4(&(x)[i].d, sizeof *(x)), halves4(&(y)[i].d, sizeof *(y)))); \
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {                                     \
            const int64_t blk = i + k;                                                              \
            acc[k] = _mm256_fmadd_ps(_mm256_broadcast_ss(&scale[k]), _mm256_cvtepi32_ps(BLOCK_SUMS(blk)), acc[k]); \
        }                                                                                           \
    }                                                                                               \
    for (; i < (nb); i++) {                                                                         \
        const int64_t blk = i;                                                                      \
        acc[0] = fma_block(BLOCK_SUMS(blk), half((x)[i].d) * half((y)[i].d), acc[0]);              \
    }                                                                                               \
    const __m256 acc_all = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]))

/* The fp16 pairs (d, m) of Q4_1/Q5_1 blocks, or (d, s) of Q8_1 blocks, of 4
 * consecutive blocks as [d0 m0 d1 m1 | d2 m2 d3 m3]. */
static inline __m256 half_pairs4(const void *base, size_t stride) {
    const uint8_t *p = base;
    uint32_t w[4];
    for (int k = 0; k < 4; k++) memcpy(&w[k], p + k * stride, 4);
    const uint64_t lo = w[0] | (uint64_t)w[1] << 32, hi = w[2] | (uint64_t)w[3] << 32;
    return _mm256_cvtph_ps(_mm_set_epi64x((long long)hi, (long long)lo));
}

/* The exported vec_dot_rows kernel NAME around ROWS(g, n, weight_row, act,
 * stride, out, ostride), an always-inlined function of g activation rows
 * whose accumulators stay in registers: called for g = G while G rows are
 * left, then 3, 2 or 1 (each a constant, so each call is its own copy). */
#define DOT_ROWS_DRIVER(NAME, ROWS, G)                                                              \
    void NAME(int64_t n, const void *weight_row, const void *act, uint64_t act_stride, int n_rows, float *out, \
              int64_t out_stride) {                                                                 \
        const char *a = act;                                                                        \
        for (int r0 = 0; r0 < n_rows;) {                                                            \
            const int left = n_rows - r0;                                                           \
            const char *ar = a + (uint64_t)r0 * act_stride;                                         \
            float *o = out + (int64_t)r0 * out_stride;                                              \
            if (left >= G) ROWS(G, n, weight_row, ar, act_stride, o, out_stride), r0 += G;          \
            else if (left == 3 && G > 3) ROWS(3, n, weight_row, ar, act_stride, o, out_stride), r0 += 3; \
            else if (left >= 2 && G > 2) ROWS(2, n, weight_row, ar, act_stride, o, out_stride), r0 += 2; \
            else ROWS(1, n, weight_row, ar, act_stride, o, out_stride), r0 += 1;                    \
        }                                                                                           \
    }

/* A type whose kernel ROWS is written for g activation rows: its vec_dot is
 * the one-row case of the same code (so vec_dot_rows gives each row
 * vec_dot's bits by construction) and its vec_dot_rows the driver above. */
#define DOT_AND_DOT_ROWS(DOT, DOT_ROWS, ROWS, G)                                                    \
    float DOT(int64_t n, const void *weight_row, const void *act_row) {                             \
        float out;                                                                                  \
        ROWS(1, n, weight_row, act_row, 0, &out, 0);                                                \
        return out;                                                                                 \
    }                                                                                               \
    DOT_ROWS_DRIVER(DOT_ROWS, ROWS, G)

/* One weight row of a legacy type against several Q8_0 activation rows (the
 * batched decode step, table.h vec_dot_rows). Each row's result has the bits
 * LEGACY_DOT_LOOP gives for that row alone: the same i32 lanes per block (the
 * products are exact integers however they are formed) into the same 4
 * accumulators, the same scales d_w*d_a, the same final sums. What changes is
 * the work per row: a block's quants are unpacked once, as signed bytes w and
 * their magnitudes |w|, and each activation row takes only the sign of w onto
 * its quants and one unsigned x signed dot (DOT_U_S), as dot_i8_i8 does.
 * Rows go in groups of G so that the group's 4G accumulators stay in
 * registers; the group loop is written for a constant g (always inlined per
 * group size). SIGNED_QUANTS(b) gives block b's 32 quants minus the type's
 * offset as signed bytes. */
#define LEGACY_DOT_ROWS(NAME, WTYPE, G, SIGNED_QUANTS, DOT_U_S)                                      \
    static inline __attribute__((always_inline)) void NAME##_group(                                   \
        const int g, int64_t n, const void *weight_row, const char *act, uint64_t stride, float *out,  \
        int64_t ostride) {                                                                            \
        const WTYPE *x = weight_row;                                                                  \
        const int64_t nb = n / QK8_0;                                                                 \
        const block_q8_0 *y[G];                                                                       \
        __m256 acc[G][4];                                                                             \
        _Pragma("GCC unroll 8") for (int r = 0; r < g; r++) {                                                                 \
            y[r] = (const block_q8_0 *)(act + (uint64_t)r * stride);                                  \
            for (int k = 0; k < 4; k++) acc[r][k] = _mm256_setzero_ps();                              \
        }                                                                                             \
        int64_t i = 0;                                                                                \
        for (; i + 4 <= nb; i += 4) {                                                                 \
            const __m128 dw = halves4(&x[i].d, sizeof *x);                                            \
            float scale[G][4];                                                                        \
            _Pragma("GCC unroll 8") for (int r = 0; r < g; r++)                                                               \
                _mm_storeu_ps(scale[r], _mm_mul_ps(dw, halves4(&y[r][i].d, sizeof(block_q8_0))));     \
            _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {                                     \
                const __m256i w = SIGNED_QUANTS(&x[i + k]), u = _mm256_abs_epi8(w);                   \
                _Pragma("GCC unroll 8") for (int r = 0; r < g; r++) {                                                         \
                    const __m256i s = DOT_U_S(u, _mm256_sign_epi8(load256(y[r][i + k].qs), w));        \
                    acc[r][k] = _mm256_fmadd_ps(_mm256_broadcast_ss(&scale[r][k]), _mm256_cvtepi32_ps(s), acc[r][k]); \
                }                                                                                     \
            }                                                                                         \
        }                                                                                             \
        for (; i < nb; i++) {                                                                         \
            const __m256i w = SIGNED_QUANTS(&x[i]), u = _mm256_abs_epi8(w);                           \
            _Pragma("GCC unroll 8") for (int r = 0; r < g; r++)                                                               \
                acc[r][0] = fma_block(DOT_U_S(u, _mm256_sign_epi8(load256(y[r][i].qs), w)),            \
                                      half(x[i].d) * half(y[r][i].d), acc[r][0]);                     \
        }                                                                                             \
        _Pragma("GCC unroll 8") for (int r = 0; r < g; r++)                                                                   \
            out[r * ostride] =                                                                        \
                hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[r][0], acc[r][1]), _mm256_add_ps(acc[r][2], acc[r][3]))); \
    }                                                                                                 \
    DOT_ROWS_DRIVER(NAME, NAME##_group, G)

/* Q4_1/Q5_1 x Q8_1: as LEGACY_DOT_LOOP, and one multiply gives both d_w*d_a
 * (even lanes, the block scales) and m_w*s_a (odd lanes, summed at the end). */
#define AFFINE_DOT_LOOP(x, y, nb, BLOCK_SUMS)                                                       \
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()}; \
    __m256 acc_m = _mm256_setzero_ps();                                                             \
    int64_t i = 0;                                                                                  \
    for (; i + 4 <= (nb); i += 4) {                                                                 \
        float prod[8];                                                                              \
        const __m256 p = _mm256_mul_ps(half_pairs4(&(x)[i], sizeof *(x)), half_pairs4(&(y)[i], sizeof *(y))); \
        _mm256_storeu_ps(prod, p);                                                                  \
        acc_m = _mm256_add_ps(acc_m, p);                                                            \
        _Pragma("GCC unroll 4") for (int k = 0; k < 4; k++) {                                     \
            const int64_t blk = i + k;                                                              \
            acc[k] = _mm256_fmadd_ps(_mm256_broadcast_ss(&prod[2 * k]), _mm256_cvtepi32_ps(BLOCK_SUMS(blk)), acc[k]); \
        }                                                                                           \
    }                                                                                               \
    float mins = hsum_ps(_mm256_blend_ps(_mm256_setzero_ps(), acc_m, 0xAA));                        \
    for (; i < (nb); i++) {                                                                         \
        const int64_t blk = i;                                                                      \
        acc[0] = fma_block(BLOCK_SUMS(blk), half((x)[i].d) * half((y)[i].d), acc[0]);              \
        mins += half((x)[i].m) * half((y)[i].s);                                                    \
    }                                                                                               \
    const __m256 acc_all = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]))

/* The fifth bits of Q5_K sub-block `bit` (0..7) as 0 or 16 per byte: one
 * 16-bit shift moves bit `bit` of every byte to bit 4 of the same byte. */
static inline __m256i q5k_fifth(__m256i qh, int bit) {
    const __m256i shifted = bit <= 4 ? _mm256_slli_epi16(qh, 4 - bit) : _mm256_srli_epi16(qh, bit - 4);
    return _mm256_and_si256(shifted, _mm256_set1_epi8(16));
}

/* ------------------------------------------------------------------ K-quant staging (batched matmul) */

/* One call's weight rows of a K-quant type (Q4_K, Q5_K, Q6_K), unpacked once
 * for the batched matmul kernels (gemm_avx2.c, gemm_avx512.c): the quants as
 * unsigned bytes in element order, the sub-block scales, the pairs that
 * multiply the activations' block sums, and the super-block scales. */
typedef struct kquant_stage {
    uint8_t u[PKV_GEMM_ROWS][PKV_GEMM_KC_Q];
    /* Q4_K/Q5_K: 8 scales; Q6_K: 16 signed scales. As i16 pairs (sc_j, sc_j)
     * for kernels that widen with madd (AVX2), else plain (vpdpbusd, AVX-512). */
    int32_t sc[PKV_GEMM_ROWS][PKV_GEMM_KC_Q / QK_K][16];
    int32_t pair[PKV_GEMM_ROWS][PKV_GEMM_KC_Q / QK_K][8]; /* i16 pairs: (m_j, m_j) for Q4_K/Q5_K, (sc_2i, sc_2i+1) for Q6_K */
    float d[PKV_GEMM_ROWS][PKV_GEMM_KC_Q / QK_K], dmin[PKV_GEMM_ROWS][PKV_GEMM_KC_Q / QK_K];
} kquant_stage;

static inline int32_t i16_pair(int lo, int hi) { return (int32_t)(((uint32_t)(uint16_t)lo) | ((uint32_t)(uint16_t)hi << 16)); }

static inline void stage_q4_5_K(const uint8_t *qs, const uint8_t *qh, const uint8_t *scales, uint8_t *u, int32_t *sc,
                                int32_t *pair, bool pair_scales) {
    const __m256i low4 = _mm256_set1_epi8(15);
    const __m256i h = qh ? load256(qh) : _mm256_setzero_si256();
    for (int k = 0; k < 4; k++) {
        const __m256i q = load256(qs + 32 * k);
        __m256i lo = _mm256_and_si256(q, low4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
        if (qh) {
            lo = _mm256_or_si256(lo, q5k_fifth(h, 2 * k));
            hi = _mm256_or_si256(hi, q5k_fifth(h, 2 * k + 1));
        }
        _mm256_storeu_si256((__m256i *)(u + 64 * k), lo);
        _mm256_storeu_si256((__m256i *)(u + 64 * k + 32), hi);
    }
    uint64_t sc64, m64;
    k_scales_mins(scales, &sc64, &m64);
    for (int j = 0; j < 8; j++) {
        const int s = (int)((sc64 >> (8 * j)) & 0xff), m = (int)((m64 >> (8 * j)) & 0xff);
        sc[j] = pair_scales ? i16_pair(s, s) : s;
        pair[j] = i16_pair(m, m);
    }
}

/* Q6_K quants as unsigned 0..63 in element order (see q6k_chunks in quant_avx2.c). */
static inline void stage_q6_K(const block_q6_K *x, uint8_t *u, int32_t *sc, int32_t *pair, bool pair_scales) {
    const __m256i low4 = _mm256_set1_epi8(15), two = _mm256_set1_epi8(0x30);
    for (int h = 0; h < 2; h++) {
        const __m256i l0 = load256(x->ql + 64 * h), l1 = load256(x->ql + 64 * h + 32);
        const __m256i qh = load256(x->qh + 32 * h);
        uint8_t *o = u + 128 * h;
        _mm256_storeu_si256((__m256i *)o, _mm256_or_si256(_mm256_and_si256(l0, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), two)));
        _mm256_storeu_si256((__m256i *)(o + 32), _mm256_or_si256(_mm256_and_si256(l1, low4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), two)));
        _mm256_storeu_si256((__m256i *)(o + 64), _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l0, 4), low4), _mm256_and_si256(qh, two)));
        _mm256_storeu_si256((__m256i *)(o + 96), _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), low4),
                                                                 _mm256_and_si256(_mm256_srli_epi16(qh, 2), two)));
    }
    for (int j = 0; j < 16; j++) sc[j] = pair_scales ? i16_pair(x->scales[j], x->scales[j]) : x->scales[j];
    for (int i = 0; i < 8; i++) pair[i] = i16_pair(x->scales[2 * i], x->scales[2 * i + 1]);
}

/* Unpacks blocks [b0, b0 + nb) of the call's rows; rows past n_rows are zero. */
static inline void stage_kquant(const pkv_gemm_args *a, uint32_t type, kquant_stage *st, int64_t b0, int64_t nb,
                                bool pair_scales) {
    for (int r = 0; r < PKV_GEMM_ROWS; r++) {
        if (r >= a->n_rows) {
            memset(st->u[r], 0, (size_t)nb * QK_K);
            memset(st->sc[r], 0, sizeof st->sc[r]);
            memset(st->pair[r], 0, sizeof st->pair[r]);
            memset(st->d[r], 0, sizeof st->d[r]);
            memset(st->dmin[r], 0, sizeof st->dmin[r]);
            continue;
        }
        const char *row = (const char *)a->w + (size_t)r * a->row_bytes;
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *u = st->u[r] + QK_K * b;
            if (type == PKV_TYPE_Q6_K) {
                const block_q6_K *x = (const block_q6_K *)row + b0 + b;
                stage_q6_K(x, u, st->sc[r][b], st->pair[r][b], pair_scales);
                st->d[r][b] = half(x->d);
                st->dmin[r][b] = 0.0f;
            } else if (type == PKV_TYPE_Q4_K) {
                const block_q4_K *x = (const block_q4_K *)row + b0 + b;
                stage_q4_5_K(x->qs, NULL, x->scales, u, st->sc[r][b], st->pair[r][b], pair_scales);
                st->d[r][b] = half(x->d);
                st->dmin[r][b] = half(x->dmin);
            } else {
                const block_q5_K *x = (const block_q5_K *)row + b0 + b;
                stage_q4_5_K(x->qs, x->qh, x->scales, u, st->sc[r][b], st->pair[r][b], pair_scales);
                st->d[r][b] = half(x->d);
                st->dmin[r][b] = half(x->dmin);
            }
        }
    }
}

/* r[i][j] <- r[j][i] for an 8x8 block of floats. */
static inline void transpose8x8_ps(__m256 r[8]) {
    const __m256 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
    const __m256 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
    const __m256 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
    const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xEE);
    const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xEE);
    const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xEE);
    const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xEE);
    r[0] = _mm256_permute2f128_ps(u0, u4, 0x20);
    r[1] = _mm256_permute2f128_ps(u1, u5, 0x20);
    r[2] = _mm256_permute2f128_ps(u2, u6, 0x20);
    r[3] = _mm256_permute2f128_ps(u3, u7, 0x20);
    r[4] = _mm256_permute2f128_ps(u0, u4, 0x31);
    r[5] = _mm256_permute2f128_ps(u1, u5, 0x31);
    r[6] = _mm256_permute2f128_ps(u2, u6, 0x31);
    r[7] = _mm256_permute2f128_ps(u3, u7, 0x31);
}

/* On the last K chunk, asks for the output lines of group g while the
 * group computes: y is usually several MB and its lines are not cached. */
static inline void gemm_prefetch_out(const pkv_gemm_args *a, int g) {
    if (!a->y) return;
    const int t0 = g * PKV_GEMM_TOK, t1 = t0 + PKV_GEMM_TOK < a->y_tokens ? t0 + PKV_GEMM_TOK : a->y_tokens;
    for (int t = t0; t < t1; t++) _mm_prefetch((const char *)(a->y + (int64_t)t * a->ldy), _MM_HINT_T0);
}

/* Batched matmul output (table.h pkv_gemm_args): 8 tokens x n_rows values,
 * one vector per row (t[r] = row r of tokens tok0..tok0+7), to acc or, on
 * the last chunk, transposed into y. */
static inline void gemm_put8(const pkv_gemm_args *a, float *acc_g, int tok0, int h, __m256 v[8]) {
    if (!a->y) {
        for (int r = 0; r < 8; r++) _mm256_storeu_ps(acc_g + PKV_GEMM_TOK * r + 8 * h, v[r]);
        return;
    }
    transpose8x8_ps(v);
    const int nt = a->y_tokens - tok0 < 8 ? a->y_tokens - tok0 : 8;
    if (a->n_rows == 8) {
        for (int i = 0; i < nt; i++) _mm256_storeu_ps(a->y + (int64_t)(tok0 + i) * a->ldy, v[i]);
        return;
    }
    for (int i = 0; i < nt; i++) {
        float tmp[8];
        _mm256_storeu_ps(tmp, v[i]);
        memcpy(a->y + (int64_t)(tok0 + i) * a->ldy, tmp, (size_t)a->n_rows * sizeof(float));
    }
}

/* The float weights' batched matmul (gemm_float of gemm_avx2.c and
 * gemm_avx512.c) reads its PKV_GEMM_ROWS weight rows of the K chunk as f32:
 * F16 rows converted by f16_to_f32 (the caller's level's; NULL for F32
 * rows), rows past n_rows zero. */
static inline void gemm_stage_float(const pkv_gemm_args *a, void (*f16_to_f32)(const uint16_t *, float *, int64_t),
                                    float st[PKV_GEMM_ROWS][PKV_GEMM_KC_F]) {
    const int64_t n = a->k1 - a->k0;
    for (int r = 0; r < PKV_GEMM_ROWS; r++) {
        if (r >= a->n_rows) {
            memset(st[r], 0, (size_t)n * sizeof(float));
            continue;
        }
        const char *row = (const char *)a->w + (size_t)r * a->row_bytes;
        if (f16_to_f32) f16_to_f32((const uint16_t *)row + a->k0, st[r], n);
        else memcpy(st[r], (const float *)row + a->k0, (size_t)n * sizeof(float));
    }
}

/* Columns [e0, dv) of att_accum (table.h) for queries [i0, i1), element by
 * element in the reference's order: the tail the vector loops of vec_avx2.c
 * and vec_avx512.c leave. */
static inline void att_accum_cols(int i0, int i1, int e0, int dv, const float *p, const float *alpha, const float *vt,
                                  float *o) {
    for (int i = i0; i < i1; i++)
        for (int e = e0; e < dv; e++) {
            float x = o[(size_t)i * dv + e] * alpha[i];
            for (int j = 0; j < PKV_ATT_BK; j++) x = fmaf(p[i * PKV_ATT_BK + j], vt[(size_t)j * dv + e], x);
            o[(size_t)i * dv + e] = x;
        }
}

#endif
