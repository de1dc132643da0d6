/*
 * AVX2 batched matmul kernels: the computation of gemm.c on 256-bit vectors,
 * a token group as two halves of 8 tokens. Without vpdpbusd the 4-byte dots
 * go through maddubs (u8 x s8 pairs to i16); the pairs of several 4-byte
 * groups are added in i16 as far as the quants' range allows before one
 * madd widens them to i32 (with ones, or with the K-quant sub-block scale).
 * Q8_0 weights use the sign trick of the vec_dot kernels (|w| x sign(a, w)).
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/levels.h"
#include "kernels/table.h"
#include "kernels/simd_x86.h"

enum { ROWS = PKV_GEMM_ROWS, KC = PKV_GEMM_KC_Q, NB32 = PKV_GEMM_KC_Q / 32, NB256 = PKV_GEMM_KC_Q / 256 };

static inline __m256i bcast32(const uint8_t *p) { return _mm256_set1_epi32((int)load_u32(p)); }

static inline void load_acc(const pkv_gemm_args *a, const float *acc, int h, __m256 c[ROWS]) {
    for (int r = 0; r < ROWS; r++)
        c[r] = a->init || r >= a->n_rows ? _mm256_setzero_ps() : _mm256_loadu_ps(acc + PKV_GEMM_TOK * r + 8 * h);
}

static inline void store_acc(const pkv_gemm_args *a, int g, float *acc, int h, __m256 c[ROWS]) {
    gemm_put8(a, acc, g * PKV_GEMM_TOK + 8 * h, h, c);
}

/* ------------------------------------------------------------------ legacy blocks (Q8_32 pack) */

typedef struct {
    uint8_t u[ROWS][KC];  /* unsigned quants; for Q8_0 |w| */
    int8_t s[ROWS][KC];   /* Q8_0 only: w itself, for its sign */
    float dw[ROWS][NB32];
} legacy_stage;

static inline float stage_block(uint32_t type, const void *row, int64_t b, uint8_t *u, int8_t *s) {
    switch (type) {
    case PKV_TYPE_Q4_0: {
        const block_q4_0 *x = (const block_q4_0 *)row + b;
        _mm256_storeu_si256((__m256i *)u, legacy_nibbles(x->qs));
        return half(x->d);
    }
    case PKV_TYPE_Q5_0: {
        const block_q5_0 *x = (const block_q5_0 *)row + b;
        const __m256i fifth = _mm256_and_si256(bits_to_bytes(load_u32(x->qh)), _mm256_set1_epi8(16));
        _mm256_storeu_si256((__m256i *)u, _mm256_or_si256(legacy_nibbles(x->qs), fifth));
        return half(x->d);
    }
    default: {
        const block_q8_0 *x = (const block_q8_0 *)row + b;
        const __m256i w = load256(x->qs);
        _mm256_storeu_si256((__m256i *)u, _mm256_abs_epi8(w));
        _mm256_storeu_si256((__m256i *)s, w);
        return half(x->d);
    }
    }
}

/* i32 dot of one row's 32 unsigned quants (<= 31) with 8 tokens' quants:
 * pairs of 4 groups summed in i16 (4 * 2 * 31 * 127 < 2^15). */
static inline __m256i dot32_small(const uint8_t *u, const uint8_t *rec, int h) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i s = _mm256_setzero_si256();
#pragma GCC unroll 2
    for (int q = 0; q < 2; q++) {
        __m256i p = _mm256_setzero_si256();
#pragma GCC unroll 4
        for (int k = 4 * q; k < 4 * q + 4; k++)
            p = _mm256_add_epi16(p, _mm256_maddubs_epi16(bcast32(u + 4 * k), load256(rec + 64 * k + 32 * h)));
        s = _mm256_add_epi32(s, _mm256_madd_epi16(p, ones));
    }
    return s;
}

/* Q8_0: |w| x sign(a, w); one pair sum may reach 2 * 128 * 127, so each is widened at once. */
static inline __m256i dot32_q8(const uint8_t *u, const int8_t *w, const uint8_t *rec, int h) {
    const __m256i ones = _mm256_set1_epi16(1);
    __m256i s = _mm256_setzero_si256();
#pragma GCC unroll 8
    for (int k = 0; k < 8; k++) {
        const __m256i a = _mm256_sign_epi8(load256(rec + 64 * k + 32 * h), bcast32((const uint8_t *)w + 4 * k));
        s = _mm256_add_epi32(s, _mm256_madd_epi16(_mm256_maddubs_epi16(bcast32(u + 4 * k), a), ones));
    }
    return s;
}

static inline __attribute__((always_inline)) void gemm_legacy(const pkv_gemm_args *a, uint32_t type, int shift) {
    legacy_stage st;
    const int64_t b0 = a->k0 / 32, nb = (a->k1 - a->k0) / 32;
    if (a->x8.data) { /* interleaved weights: all 8 rows from one group (repack_x86.h) */
        pkv_x8_stage_avx2(type, &a->x8, b0, nb, st.u[0], sizeof st.u[0], st.dw[0], NB32);
        for (int r = 0; r < ROWS && type == PKV_TYPE_Q8_0; r++)
            for (int64_t i = 0; i < nb * 32; i += 32) { /* w = u - 128: its sign and |w|, as stage_block gives */
                const __m256i w = _mm256_xor_si256(load256(st.u[r] + i), _mm256_set1_epi8((char)0x80));
                _mm256_storeu_si256((__m256i *)(st.s[r] + i), w);
                _mm256_storeu_si256((__m256i *)(st.u[r] + i), _mm256_abs_epi8(w));
            }
    }
    for (int r = 0; r < ROWS && !a->x8.data; r++) {
        if (r < a->n_rows) {
            const char *row = (const char *)a->w + (size_t)r * a->row_bytes;
            for (int64_t b = 0; b < nb; b++)
                st.dw[r][b] = stage_block(type, row, b0 + b, st.u[r] + 32 * b, st.s[r] + 32 * b);
        } else {
            memset(st.u[r], 0, (size_t)nb * 32);
            memset(st.s[r], 0, (size_t)nb * 32);
            memset(st.dw[r], 0, (size_t)nb * sizeof(float));
        }
    }
    for (int g = 0; g < a->n_groups; g++) {
        float *acc = a->acc + (size_t)g * ROWS * PKV_GEMM_TOK;
        const uint8_t *grp = (const uint8_t *)a->act + (size_t)g * a->group_bytes + (size_t)b0 * PACK32_BYTES;
        for (int h = 0; h < 2; h++) {
            __m256 c[ROWS];
            load_acc(a, acc, h, c);
            if (h == 0) gemm_prefetch_out(a, g);
            const uint8_t *rec = grp;
            for (int64_t b = 0; b < nb; b++, rec += PACK32_BYTES) {
                const __m256i corr = type == PKV_TYPE_Q8_0
                                         ? _mm256_setzero_si256()
                                         : _mm256_sub_epi32(_mm256_setzero_si256(),
                                                            _mm256_slli_epi32(load256(rec + PACK32_SUM + 32 * h), shift));
                const __m256 da = _mm256_loadu_ps((const float *)(rec + PACK32_D) + 8 * h);
#pragma GCC unroll 8
                for (int r = 0; r < ROWS; r++) {
                    const __m256i d = type == PKV_TYPE_Q8_0 ? dot32_q8(st.u[r] + 32 * b, st.s[r] + 32 * b, rec, h)
                                                            : dot32_small(st.u[r] + 32 * b, rec, h);
                    const __m256i s = _mm256_add_epi32(corr, d);
                    c[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(da, _mm256_set1_ps(st.dw[r][b])), c[r]);
                }
            }
            store_acc(a, g, acc, h, c);
        }
    }
}

void pkv_gemm_q4_0_avx2(const pkv_gemm_args *a) { gemm_legacy(a, PKV_TYPE_Q4_0, 3); }
void pkv_gemm_q5_0_avx2(const pkv_gemm_args *a) { gemm_legacy(a, PKV_TYPE_Q5_0, 4); }
void pkv_gemm_q8_0_avx2(const pkv_gemm_args *a) { gemm_legacy(a, PKV_TYPE_Q8_0, 7); }

/* ------------------------------------------------------------------ K-quants (Q8_256 pack) */

/* maddubs of n consecutive 4-byte groups (from group k0) of a row with 8 tokens, summed in i16 */
static inline __m256i pairs16(const uint8_t *u, const uint8_t *rec, int h, int k0, int n) {
    __m256i p = _mm256_maddubs_epi16(bcast32(u + 4 * k0), load256(rec + 64 * k0 + 32 * h));
    for (int k = k0 + 1; k < k0 + n; k++)
        p = _mm256_add_epi16(p, _mm256_maddubs_epi16(bcast32(u + 4 * k), load256(rec + 64 * k + 32 * h)));
    return p;
}

/* sum_j sc_j * dot_j of one super-block, one row, 8 tokens. How many groups
 * may share an i16 sum: u <= 15 (Q4_K): 8; u <= 31 (Q5_K): 4; u <= 63 (Q6_K): 2. */
static inline __attribute__((always_inline)) __m256i kquant_dot(uint32_t type, const uint8_t *u, const int32_t *scpair,
                                                                const uint8_t *rec, int h) {
    __m256i tot = _mm256_setzero_si256();
    if (type == PKV_TYPE_Q6_K) {
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++) {
            const __m256i sc = _mm256_set1_epi32(scpair[j]);
            tot = _mm256_add_epi32(tot, _mm256_madd_epi16(pairs16(u, rec, h, 4 * j, 2), sc));
            tot = _mm256_add_epi32(tot, _mm256_madd_epi16(pairs16(u, rec, h, 4 * j + 2, 2), sc));
        }
    } else {
        const int per = type == PKV_TYPE_Q4_K ? 8 : 4;
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            const __m256i sc = _mm256_set1_epi32(scpair[j]);
            for (int k = 8 * j; k < 8 * j + 8; k += per)
                tot = _mm256_add_epi32(tot, _mm256_madd_epi16(pairs16(u, rec, h, k, per), sc));
        }
    }
    return tot;
}

static inline __attribute__((always_inline)) void gemm_kquant(const pkv_gemm_args *a, uint32_t type) {
    kquant_stage st;
    const int64_t b0 = a->k0 / QK_K, nb = (a->k1 - a->k0) / QK_K;
    if (a->x8.data) /* interleaved weights: all 8 rows from one group (repack_x86.h) */
        pkv_x8_stage_kquant_avx2(type, &a->x8, b0, nb, &st, true);
    else
        stage_kquant(a, type, &st, b0, nb, true);
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (int g = 0; g < a->n_groups; g++) {
        float *acc = a->acc + (size_t)g * ROWS * PKV_GEMM_TOK;
        const uint8_t *grp = (const uint8_t *)a->act + (size_t)g * a->group_bytes + (size_t)b0 * PACK256_BYTES;
        for (int h = 0; h < 2; h++) {
            __m256 c[ROWS];
            load_acc(a, acc, h, c);
            if (h == 0) gemm_prefetch_out(a, g);
            const uint8_t *rec = grp;
            for (int64_t b = 0; b < nb; b++, rec += PACK256_BYTES) {
                const __m256 da = _mm256_loadu_ps((const float *)(rec + PACK256_D) + 8 * h);
                __m256i bs[8];
                for (int i = 0; i < 8; i++) bs[i] = load256(rec + PACK256_BSUMS + 64 * i + 32 * h);
                for (int r = 0; r < ROWS; r++) {
                    const __m256i tot = kquant_dot(type, st.u[r] + QK_K * b, st.sc[r][b], rec, h);
                    __m256i pr = _mm256_setzero_si256();
                    for (int i = 0; i < 8; i++)
                        pr = _mm256_add_epi32(pr, _mm256_madd_epi16(bs[i], _mm256_set1_epi32(st.pair[r][b][i])));
                    if (type == PKV_TYPE_Q6_K) {
                        const __m256i v = _mm256_sub_epi32(tot, _mm256_slli_epi32(pr, 5));
                        c[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), _mm256_mul_ps(da, _mm256_set1_ps(st.d[r][b])), c[r]);
                    } else {
                        c[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(tot), _mm256_mul_ps(da, _mm256_set1_ps(st.d[r][b])), c[r]);
                        const __m256 neg = _mm256_xor_ps(_mm256_mul_ps(da, _mm256_set1_ps(st.dmin[r][b])), sign);
                        c[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(pr), neg, c[r]);
                    }
                }
            }
            store_acc(a, g, acc, h, c);
        }
    }
}

void pkv_gemm_q4_K_avx2(const pkv_gemm_args *a) { gemm_kquant(a, PKV_TYPE_Q4_K); }
void pkv_gemm_q5_K_avx2(const pkv_gemm_args *a) { gemm_kquant(a, PKV_TYPE_Q5_K); }
void pkv_gemm_q6_K_avx2(const pkv_gemm_args *a) { gemm_kquant(a, PKV_TYPE_Q6_K); }

/* ------------------------------------------------------------------ float weights (F32 pack) */

static inline __attribute__((always_inline)) void gemm_float(const pkv_gemm_args *a, bool f16) {
    float st[ROWS][PKV_GEMM_KC_F];
    const int64_t n = a->k1 - a->k0;
    gemm_stage_float(a, f16 ? pkv_f16_to_f32_avx2 : NULL, st);
    for (int g = 0; g < a->n_groups; g++) {
        float *acc = a->acc + (size_t)g * ROWS * PKV_GEMM_TOK;
        const float *x0 = (const float *)((const uint8_t *)a->act + (size_t)g * a->group_bytes) + a->k0 * PKV_GEMM_TOK;
        for (int h = 0; h < 2; h++) {
            __m256 c[ROWS];
            load_acc(a, acc, h, c);
            if (h == 0) gemm_prefetch_out(a, g);
            const float *x = x0 + 8 * h;
            for (int64_t e = 0; e < n; e++, x += PKV_GEMM_TOK) {
                const __m256 xv = _mm256_loadu_ps(x);
#pragma GCC unroll 8
                for (int r = 0; r < ROWS; r++) c[r] = _mm256_fmadd_ps(_mm256_set1_ps(st[r][e]), xv, c[r]);
            }
            store_acc(a, g, acc, h, c);
        }
    }
}

void pkv_gemm_f32_avx2(const pkv_gemm_args *a) { gemm_float(a, false); }
void pkv_gemm_f16_avx2(const pkv_gemm_args *a) { gemm_float(a, true); }
