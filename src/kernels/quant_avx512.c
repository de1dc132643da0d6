/*
 * AVX-512 kernels: F/BW/VL/DQ from the build flags, plus VNNI (vpdpbusd,
 * vpdpwssd), enabled below for this file only. cpu.c offers the AVX-512
 * table only on CPUs with all of them (every AVX-512 CPU since Cascade Lake,
 * and Zen 4, has VNNI); others get the AVX2 table.
 *
 * Here are the quantised dot products, each measured faster than its AVX2
 * version (single thread, rows in L2, Zen 4):
 *  - legacy blocks on 256-bit vectors: the Q5 fifth bits go straight into a
 *    mask register instead of the AVX2 shuffle/compare expansion, and
 *    vpdpbusd replaces maddubs + madd;
 *  - Q4_K/Q5_K on 256-bit vectors with vpdpwssd applying the sub-block scales
 *    and accumulating in one instruction (a 512-bit form, one vector per two
 *    sub-blocks, was slower than AVX2 on Zen 4, which splits 512-bit ops);
 *  - Q6_K on 512-bit vectors, where ternary logic and one scale shuffle per
 *    four sub-blocks cut the instruction count enough to pay.
 * The attention block kernels are in vec_avx512.c, the batched matmul
 * kernels in gemm_avx512.c. The rest of the AVX-512
 * table (dequantisation, activation quantisation, float helpers) is the AVX2
 * code: those loops are bound by loads and stores, and 512-bit versions did
 * not measure faster.
 */
#include <immintrin.h>
#include <math.h>

#include "kernels/levels.h"
#include "kernels/table.h"
#include "kernels/simd_x86.h"

#pragma GCC target("avx512vnni")

/* ------------------------------------------------------------------ legacy blocks x Q8_0 / Q8_1 */

static inline __m256i dpbusd(__m256i u, __m256i s) { return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u, s); }

/* signed x signed: x's sign moved onto y, as dot_i8_i8 in simd_x86.h */
static inline __m256i q8_0_sums(const block_q8_0 *b, __m256i y) {
    const __m256i x = load256(b->qs);
    return dpbusd(_mm256_abs_epi8(x), _mm256_sign_epi8(y, x));
}

float pkv_vec_dot_q8_0_avx512(int64_t n, const void *weight_row, const void *act_row) {
    const block_q8_0 *x = weight_row;
    const block_q8_0 *y = act_row;
#define Q8_0_SUMS(b) q8_0_sums(&x[b], load256(y[b].qs))
    LEGACY_DOT_LOOP(x, y, n / QK8_0, Q8_0_SUMS);
#undef Q8_0_SUMS
    return hsum_ps(acc_all);
}

/* sum (nibble - 8) * y = dot(nibble, y) - dot(8, y) */
static inline __m256i q4_0_sums(const block_q4_0 *b, __m256i y) {
    return _mm256_sub_epi32(dpbusd(legacy_nibbles(b->qs), y), dpbusd(_mm256_set1_epi8(8), y));
}

float pkv_vec_dot_q4_0_avx512(int64_t n, const void *weight_row, const void *act_row) {
    const block_q4_0 *x = weight_row;
    const block_q8_0 *y = act_row;
#define Q4_0_SUMS(b) q4_0_sums(&x[b], load256(y[b].qs))
    LEGACY_DOT_LOOP(x, y, n / QK8_0, Q4_0_SUMS);
#undef Q4_0_SUMS
    return hsum_ps(acc_all);
}

/* sum (nibble + 16*bit - 16) * y = dot(nibble, y) - dot(16, y where the
 * fifth bit is clear); qh is the mask register directly. */
static inline __m256i q5_0_sums(const block_q5_0 *b, __m256i y) {
    const __m256i y_bit_clear = _mm256_maskz_mov_epi8(_cvtu32_mask32(~load_u32(b->qh)), y);
    return _mm256_sub_epi32(dpbusd(legacy_nibbles(b->qs), y), dpbusd(_mm256_set1_epi8(16), y_bit_clear));
}

float pkv_vec_dot_q5_0_avx512(int64_t n, const void *weight_row, const void *act_row) {
    const block_q5_0 *x = weight_row;
    const block_q8_0 *y = act_row;
#define Q5_0_SUMS(b) q5_0_sums(&x[b], load256(y[b].qs))
    LEGACY_DOT_LOOP(x, y, n / QK8_0, Q5_0_SUMS);
#undef Q5_0_SUMS
    return hsum_ps(acc_all);
}

/* The legacy types against several activation rows (LEGACY_DOT_ROWS), four
 * rows per group (16 of the 32 vector registers hold their accumulators):
 * the fifth bits of Q5_0 subtract 16 under a mask, one instruction. */
static inline __m256i q8_0_signed(const block_q8_0 *b) { return load256(b->qs); }
static inline __m256i q4_0_signed(const block_q4_0 *b) {
    return _mm256_sub_epi8(legacy_nibbles(b->qs), _mm256_set1_epi8(8));
}
static inline __m256i q5_0_signed(const block_q5_0 *b) {
    const __m256i nib = legacy_nibbles(b->qs);
    return _mm256_mask_sub_epi8(nib, _cvtu32_mask32(~load_u32(b->qh)), nib, _mm256_set1_epi8(16));
}

LEGACY_DOT_ROWS(pkv_vec_dot_rows_q8_0_avx512, block_q8_0, 4, q8_0_signed, dpbusd)
LEGACY_DOT_ROWS(pkv_vec_dot_rows_q4_0_avx512, block_q4_0, 4, q4_0_signed, dpbusd)
LEGACY_DOT_ROWS(pkv_vec_dot_rows_q5_0_avx512, block_q5_0, 4, q5_0_signed, dpbusd)

float pkv_vec_dot_q4_1_avx512(int64_t n, const void *weight_row, const void *act_row) {
    const block_q4_1 *x = weight_row;
    const block_q8_1 *y = act_row;
#define Q4_1_SUMS(b) dpbusd(legacy_nibbles(x[b].qs), load256(y[b].qs))
    AFFINE_DOT_LOOP(x, y, n / QK8_0, Q4_1_SUMS);
#undef Q4_1_SUMS
    return hsum_ps(acc_all) + mins;
}

/* nibble + 16 where the fifth bit is set */
static inline __m256i q5_1_quants(const block_q5_1 *b) {
    const __m256i nib = legacy_nibbles(b->qs);
    return _mm256_mask_add_epi8(nib, _cvtu32_mask32(load_u32(b->qh)), nib, _mm256_set1_epi8(16));
}

float pkv_vec_dot_q5_1_avx512(int64_t n, const void *weight_row, const void *act_row) {
    const block_q5_1 *x = weight_row;
    const block_q8_1 *y = act_row;
#define Q5_1_SUMS(b) dpbusd(q5_1_quants(&x[b]), load256(y[b].qs))
    AFFINE_DOT_LOOP(x, y, n / QK8_0, Q5_1_SUMS);
#undef Q5_1_SUMS
    return hsum_ps(acc_all) + mins;
}

/* ------------------------------------------------------------------ K-quants x Q8_K */

/* ternary-logic immediate for (a & b) | c */
#define TERN_AND_OR 0xEA

/* Q4_K/Q5_K on 256-bit vectors (the 512-bit form, one vector per two
 * sub-blocks, measured slower on Zen 4): per 64-element chunk the two
 * sub-blocks' pair sums go straight into vpdpwssd with their scales. */

/* Shared per-block set-up: the min term into acc_m, the 8 scales as i16 in
 * both 128-bit halves. */
static inline __m256i k_block_setup(const uint8_t *scales, const block_q8_K *y, float dmin, __m128 *acc_m) {
    uint64_t sc, m;
    k_scales_mins(scales, &sc, &m);
    *acc_m = _mm_fmadd_ps(_mm_set1_ps(dmin * y->d), _mm_cvtepi32_ps(k_min_products(m, y->bsums)), *acc_m);
    return _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
}

/* Q4_K against g activation rows (1 for vec_dot, up to K_ROWS for
 * vec_dot_rows): each block's nibbles and scales unpacked once, then every
 * row takes exactly the steps a single row takes, so each row has the bits
 * of vec_dot alone. */
enum { K_ROWS = 4 };

static inline __attribute__((always_inline)) void q4_K_rows(const int g, int64_t n, const void *weight_row,
                                                            const char *act, uint64_t stride, float *out,
                                                            int64_t ostride) {
    const block_q4_K *x = weight_row;
    const block_q8_K *y[K_ROWS];
    const __m256i low4 = _mm256_set1_epi8(15);
    __m256 acc[K_ROWS];
    __m128 acc_m[K_ROWS];
#pragma GCC unroll 4
    for (int r = 0; r < g; r++) {
        y[r] = (const block_q8_K *)(act + (uint64_t)r * stride);
        acc[r] = _mm256_setzero_ps();
        acc_m[r] = _mm_setzero_ps();
    }
    for (int64_t i = 0; i < n / QK_K; i++) {
        uint64_t sc, m;
        k_scales_mins(x[i].scales, &sc, &m);
        const __m256i s16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128((long long)sc)));
        const float dmin = half(x[i].dmin), dx = half(x[i].d);
        __m256i lo[4], hi[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const __m256i q = load256(x[i].qs + 32 * k);
            lo[k] = _mm256_and_si256(q, low4);
            hi[k] = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
        }
#pragma GCC unroll 4
        for (int r = 0; r < g; r++) {
            const block_q8_K *yr = &y[r][i];
            acc_m[r] = _mm_fmadd_ps(_mm_set1_ps(dmin * yr->d), _mm_cvtepi32_ps(k_min_products(m, yr->bsums)), acc_m[r]);
            __m256i sumi_lo = _mm256_setzero_si256(), sumi_hi = _mm256_setzero_si256();
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                const __m256i p_lo = _mm256_maddubs_epi16(lo[k], load256(yr->qs + 64 * k));
                const __m256i p_hi = _mm256_maddubs_epi16(hi[k], load256(yr->qs + 64 * k + 32));
                sumi_lo = _mm256_dpwssd_epi32(sumi_lo, p_lo, SCALE_OF(s16, 2 * k));
                sumi_hi = _mm256_dpwssd_epi32(sumi_hi, p_hi, SCALE_OF(s16, 2 * k + 1));
            }
            acc[r] = fma_block(_mm256_add_epi32(sumi_lo, sumi_hi), dx * yr->d, acc[r]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < g; r++) out[r * ostride] = hsum_ps(acc[r]) - hsum_ps128(acc_m[r]);
}

DOT_AND_DOT_ROWS(pkv_vec_dot_q4_K_avx512, pkv_vec_dot_rows_q4_K_avx512, q4_K_rows, K_ROWS)

float pkv_vec_dot_q5_K_avx512(int64_t n, const void *weight_row, const void *act_row) {
    const block_q5_K *x = weight_row;
    const block_q8_K *y = act_row;
    const __m256i low4 = _mm256_set1_epi8(15);
    __m256 acc = _mm256_setzero_ps();
    __m128 acc_m = _mm_setzero_ps();
    for (int64_t i = 0; i < n / QK_K; i++) {
        const __m256i s16 = k_block_setup(x[i].scales, &y[i], half(x[i].dmin), &acc_m);
        const __m256i qh = load256(x[i].qh);
        __m256i sumi_lo = _mm256_setzero_si256(), sumi_hi = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const __m256i q = load256(x[i].qs + 32 * k);
            /* (nibble & 15) | fifth bit, one ternary-logic op each */
            const __m256i lo = _mm256_ternarylogic_epi64(q, low4, q5k_fifth(qh, 2 * k), TERN_AND_OR);
            const __m256i hi =
                _mm256_ternarylogic_epi64(_mm256_srli_epi16(q, 4), low4, q5k_fifth(qh, 2 * k + 1), TERN_AND_OR);
            sumi_lo = _mm256_dpwssd_epi32(sumi_lo, _mm256_maddubs_epi16(lo, load256(y[i].qs + 64 * k)),
                                          SCALE_OF(s16, 2 * k));
            sumi_hi = _mm256_dpwssd_epi32(sumi_hi, _mm256_maddubs_epi16(hi, load256(y[i].qs + 64 * k + 32)),
                                          SCALE_OF(s16, 2 * k + 1));
        }
        acc = fma_block(_mm256_add_epi32(sumi_lo, sumi_hi), half(x[i].d) * y[i].d, acc);
    }
    return hsum_ps(acc) - hsum_ps128(acc_m);
}

/* Q6_K half h (128 elements): [chunk 0 | chunk 1] and [chunk 2 | chunk 3] as
 * unsigned 0..63 bytes (see q6k_chunks in quant_avx2.c). Each 128-bit lane of
 * their maddubs output is one 16-element sub-block. Against g activation
 * rows as q4_K_rows: unpacked once, each row the steps of one row alone. */
static inline __attribute__((always_inline)) void q6_K_rows(const int g, int64_t n, const void *weight_row,
                                                            const char *act, uint64_t stride, float *out,
                                                            int64_t ostride) {
    const block_q6_K *x = weight_row;
    const block_q8_K *y[K_ROWS];
    const __m512i low4 = _mm512_set1_epi8(15), bits45 = _mm512_set1_epi8(0x30);
    const __m512i shl_a = _mm512_setr_epi64(4, 4, 4, 4, 2, 2, 2, 2); /* qh bits 0-1 | 2-3 -> 4-5 */
    const __m512i shr_b = _mm512_setr_epi64(0, 0, 0, 0, 2, 2, 2, 2); /* qh bits 4-5 | 6-7 -> 4-5 */
    /* lane L of a scale vector takes i16 L (first 4 sub-blocks) or L + 4 */
    const __m512i pick_a = _mm512_setr_epi32(0x01000100, 0x01000100, 0x01000100, 0x01000100, 0x03020302, 0x03020302,
                                             0x03020302, 0x03020302, 0x05040504, 0x05040504, 0x05040504, 0x05040504,
                                             0x07060706, 0x07060706, 0x07060706, 0x07060706);
    const __m512i pick_b = _mm512_add_epi8(pick_a, _mm512_set1_epi8(8));
    __m512 acc[K_ROWS];
#pragma GCC unroll 4
    for (int r = 0; r < g; r++) {
        y[r] = (const block_q8_K *)(act + (uint64_t)r * stride);
        acc[r] = _mm512_setzero_ps();
    }
    for (int64_t i = 0; i < n / QK_K; i++) {
        const __m256i all16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)x[i].scales));
        __m512i qa[2], qb[2], sa[2], sb[2];
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const __m512i ql = _mm512_loadu_si512(x[i].ql + 64 * h);
            const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(x[i].qh + 32 * h)));
            const __m512i hi_a = _mm512_and_si512(_mm512_sllv_epi64(qh, shl_a), bits45);
            const __m512i hi_b = _mm512_and_si512(_mm512_srlv_epi64(qh, shr_b), bits45);
            qa[h] = _mm512_ternarylogic_epi64(ql, low4, hi_a, TERN_AND_OR);
            qb[h] = _mm512_ternarylogic_epi64(_mm512_srli_epi16(ql, 4), low4, hi_b, TERN_AND_OR);
            const __m512i s16 = _mm512_broadcast_i32x4(_mm_cvtepi8_epi16(_mm_loadl_epi64((const __m128i *)(x[i].scales + 8 * h))));
            sa[h] = _mm512_shuffle_epi8(s16, pick_a);
            sb[h] = _mm512_shuffle_epi8(s16, pick_b);
        }
        const float dx = half(x[i].d);
#pragma GCC unroll 4
        for (int r = 0; r < g; r++) {
            const block_q8_K *yr = &y[r][i];
            /* -32 offset: sumi starts at -32 * sum_j scale_j * bsum_j */
            const __m256i offset = _mm256_madd_epi16(all16, _mm256_loadu_si256((const __m256i *)yr->bsums));
            __m512i sumi = _mm512_zextsi256_si512(_mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(offset, 5)));
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                const int8_t *a = yr->qs + 128 * h;
                sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(qa[h], _mm512_loadu_si512(a)), sa[h]);
                sumi = _mm512_dpwssd_epi32(sumi, _mm512_maddubs_epi16(qb[h], _mm512_loadu_si512(a + 64)), sb[h]);
            }
            acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(dx * yr->d), _mm512_cvtepi32_ps(sumi), acc[r]);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < g; r++) out[r * ostride] = _mm512_reduce_add_ps(acc[r]);
}

DOT_AND_DOT_ROWS(pkv_vec_dot_q6_K_avx512, pkv_vec_dot_rows_q6_K_avx512, q6_K_rows, K_ROWS)
