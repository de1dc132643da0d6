/*
 * AVX-512 (+VNNI) batched matmul kernels: the computation of gemm.c, one
 * token group (16 tokens) per 512-bit vector. Weight rows are unpacked once
 * per call into a stack buffer of unsigned bytes; each 4-byte group of a row
 * is then broadcast against the packed activations, so one vpdpbusd does
 * 4 multiply-adds for 16 tokens at once, and the partial sums stay exact in
 * i32 until the block's single float FMA.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/levels.h"
#include "kernels/table.h"
#include "kernels/simd_x86.h"

#pragma GCC target("avx512vnni")

enum { ROWS = PKV_GEMM_ROWS, KC = PKV_GEMM_KC_Q, NB32 = PKV_GEMM_KC_Q / 32, NB256 = PKV_GEMM_KC_Q / 256 };

static inline __m512i bcast32(const uint8_t *p) { return _mm512_set1_epi32((int)load_u32(p)); }
static inline __m512i load512(const void *p) { return _mm512_loadu_si512(p); }

/* Accumulators of the call's rows for one group: zero, or the stored values. */
static inline void load_acc(const pkv_gemm_args *a, const float *acc, __m512 c[ROWS]) {
    for (int r = 0; r < ROWS; r++)
        c[r] = a->init || r >= a->n_rows ? _mm512_setzero_ps() : _mm512_loadu_ps(acc + PKV_GEMM_TOK * r);
}

/* Results of one group to acc, or transposed into y on the last chunk. */
static inline void store_acc(const pkv_gemm_args *a, int g, float *acc, const __m512 c[ROWS]) {
    if (!a->y) {
        for (int r = 0; r < ROWS; r++) _mm512_storeu_ps(acc + PKV_GEMM_TOK * r, c[r]);
        return;
    }
    const int tok0 = g * PKV_GEMM_TOK;
    if (a->n_rows != ROWS || a->y_tokens - tok0 < PKV_GEMM_TOK) {
        for (int h = 0; h < 2; h++) {
            __m256 v[8];
            for (int r = 0; r < ROWS; r++) v[r] = h ? _mm512_extractf32x8_ps(c[r], 1) : _mm512_castps512_ps256(c[r]);
            if (tok0 + 8 * h < a->y_tokens) gemm_put8(a, acc, tok0 + 8 * h, h, v);
        }
        return;
    }
    /* an 8x8 transpose in each 256-bit half; then token i of a half and
     * token i + 4 share a vector */
    __m512 t[8], u[8];
    for (int i = 0; i < 4; i++) {
        t[2 * i] = _mm512_unpacklo_ps(c[2 * i], c[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(c[2 * i], c[2 * i + 1]);
    }
    for (int i = 0; i < 2; i++) {
        u[4 * i + 0] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);
        u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);
        u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44);
        u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE);
    }
    const __m512i lo = _mm512_setr_epi32(0, 1, 2, 3, 16, 17, 18, 19, 4, 5, 6, 7, 20, 21, 22, 23);
    const __m512i hi = _mm512_setr_epi32(8, 9, 10, 11, 24, 25, 26, 27, 12, 13, 14, 15, 28, 29, 30, 31);
    float *y = a->y + (int64_t)tok0 * a->ldy;
    const int64_t ld = a->ldy;
    for (int i = 0; i < 4; i++) {
        const __m512 wa = _mm512_permutex2var_ps(u[i], lo, u[i + 4]); /* tokens i, 4 + i */
        const __m512 wb = _mm512_permutex2var_ps(u[i], hi, u[i + 4]); /* tokens 8 + i, 12 + i */
        _mm256_storeu_ps(y + i * ld, _mm512_castps512_ps256(wa));
        _mm256_storeu_ps(y + (4 + i) * ld, _mm512_extractf32x8_ps(wa, 1));
        _mm256_storeu_ps(y + (8 + i) * ld, _mm512_castps512_ps256(wb));
        _mm256_storeu_ps(y + (12 + i) * ld, _mm512_extractf32x8_ps(wb, 1));
    }
}

/* ------------------------------------------------------------------ legacy blocks (Q8_32 pack) */

typedef struct {
    uint8_t u[ROWS][KC];
    float dw[ROWS][NB32];
} legacy_stage;

/* Unsigned quants of one block (value = u - offset), as gemm.c unpack_legacy. */
static inline float stage_block(uint32_t type, const void *row, int64_t b, uint8_t *u) {
    switch (type) {
    case PKV_TYPE_Q4_0: {
        const block_q4_0 *x = (const block_q4_0 *)row + b;
        _mm256_storeu_si256((__m256i *)u, legacy_nibbles(x->qs));
        return half(x->d);
    }
    case PKV_TYPE_Q5_0: {
        const block_q5_0 *x = (const block_q5_0 *)row + b;
        const __m256i nib = legacy_nibbles(x->qs);
        _mm256_storeu_si256((__m256i *)u,
                            _mm256_mask_add_epi8(nib, _cvtu32_mask32(load_u32(x->qh)), nib, _mm256_set1_epi8(16)));
        return half(x->d);
    }
    default: {
        const block_q8_0 *x = (const block_q8_0 *)row + b;
        _mm256_storeu_si256((__m256i *)u, _mm256_xor_si256(load256(x->qs), _mm256_set1_epi8((char)0x80)));
        return half(x->d);
    }
    }
}

static inline __attribute__((always_inline)) void gemm_legacy(const pkv_gemm_args *a, uint32_t type, int shift) {
    legacy_stage st;
    const int64_t b0 = a->k0 / 32, nb = (a->k1 - a->k0) / 32;
    if (a->x8.data) /* interleaved weights: all 8 rows from one group (repack_avx512.c) */
        pkv_x8_stage_avx512(type, &a->x8, b0, nb, st.u[0], sizeof st.u[0], st.dw[0], NB32);
    for (int r = 0; r < ROWS && !a->x8.data; r++) {
        if (r < a->n_rows) {
            const char *row = (const char *)a->w + (size_t)r * a->row_bytes;
            for (int64_t b = 0; b < nb; b++) st.dw[r][b] = stage_block(type, row, b0 + b, st.u[r] + 32 * b);
        } else {
            memset(st.u[r], 0, (size_t)nb * 32);
            memset(st.dw[r], 0, (size_t)nb * sizeof(float));
        }
    }
    for (int g = 0; g < a->n_groups; g++) {
        float *acc = a->acc + (size_t)g * ROWS * PKV_GEMM_TOK;
        __m512 c[ROWS];
        load_acc(a, acc, c);
        gemm_prefetch_out(a, g);
        const uint8_t *rec = (const uint8_t *)a->act + (size_t)g * a->group_bytes + (size_t)b0 * PACK32_BYTES;
        for (int64_t b = 0; b < nb; b++, rec += PACK32_BYTES) {
            __m512i av[8];
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) av[k] = load512(rec + 64 * k);
            const __m512i corr = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(load512(rec + PACK32_SUM), shift));
            const __m512 da = _mm512_loadu_ps((const float *)(rec + PACK32_D));
            /* the rows' 8-step chains interleaved, so they overlap */
            __m512i s[ROWS];
#pragma GCC unroll 8
            for (int r = 0; r < ROWS; r++) s[r] = corr;
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++)
#pragma GCC unroll 8
                for (int r = 0; r < ROWS; r++) s[r] = _mm512_dpbusd_epi32(s[r], bcast32(st.u[r] + 32 * b + 4 * k), av[k]);
#pragma GCC unroll 8
            for (int r = 0; r < ROWS; r++)
                c[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s[r]), _mm512_mul_ps(da, _mm512_set1_ps(st.dw[r][b])), c[r]);
        }
        store_acc(a, g, acc, c);
    }
}

void pkv_gemm_q4_0_avx512(const pkv_gemm_args *a) { gemm_legacy(a, PKV_TYPE_Q4_0, 3); }
void pkv_gemm_q5_0_avx512(const pkv_gemm_args *a) { gemm_legacy(a, PKV_TYPE_Q5_0, 4); }
void pkv_gemm_q8_0_avx512(const pkv_gemm_args *a) { gemm_legacy(a, PKV_TYPE_Q8_0, 7); }

/* ------------------------------------------------------------------ K-quants (Q8_256 pack) */

/* sum_j sc_j * dot_j over one super-block for every row; sub = 32 (Q4_K,
 * Q5_K) or 16 (Q6_K) elements per scale. */
static inline __attribute__((always_inline)) void kquant_dots(const kquant_stage *st, int64_t b, const uint8_t *rec,
                                                              int sub, __m512i tot[ROWS]) {
    const int dwords = sub / 4;
    for (int r = 0; r < ROWS; r++) tot[r] = _mm512_setzero_si512();
    for (int j0 = 0; j0 < QK_K / sub; j0 += 32 / sub) { /* 32 elements = 8 activation vectors at a time */
        __m512i av[8];
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) av[k] = load512(rec + 64 * (8 * (j0 * sub / 32) + k));
        for (int jj = 0; jj < 32 / sub; jj++) {
            /* the rows' chains interleaved, so they overlap */
            __m512i s[ROWS];
#pragma GCC unroll 8
            for (int r = 0; r < ROWS; r++) s[r] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int k = 0; k < dwords; k++)
#pragma GCC unroll 8
                for (int r = 0; r < ROWS; r++)
                    s[r] = _mm512_dpbusd_epi32(s[r], bcast32(st->u[r] + QK_K * b + j0 * sub + 4 * (jj * dwords + k)),
                                               av[jj * dwords + k]);
#pragma GCC unroll 8
            for (int r = 0; r < ROWS; r++)
                tot[r] = _mm512_add_epi32(tot[r], _mm512_mullo_epi32(s[r], _mm512_set1_epi32(st->sc[r][b][j0 + jj])));
        }
    }
}

/* sum_i pair_i . (bsum_2i, bsum_2i+1) for every row */
static inline __attribute__((always_inline)) void kquant_pairs(const kquant_stage *st, int64_t b, const uint8_t *rec,
                                                               __m512i out[ROWS]) {
    __m512i bs[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) bs[i] = load512(rec + PACK256_BSUMS + 64 * i);
#pragma GCC unroll 8
    for (int r = 0; r < ROWS; r++) {
        __m512i s = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) s = _mm512_dpwssd_epi32(s, bs[i], _mm512_set1_epi32(st->pair[r][b][i]));
        out[r] = s;
    }
}

static inline __attribute__((always_inline)) void gemm_kquant(const pkv_gemm_args *a, uint32_t type) {
    kquant_stage st;
    const int64_t b0 = a->k0 / QK_K, nb = (a->k1 - a->k0) / QK_K;
    if (a->x8.data) /* interleaved weights: all 8 rows from one group (repack_x86.h) */
        pkv_x8_stage_kquant_avx512(type, &a->x8, b0, nb, &st, false);
    else
        stage_kquant(a, type, &st, b0, nb, false);
    const __m512 sign = _mm512_set1_ps(-0.0f);
    for (int g = 0; g < a->n_groups; g++) {
        float *acc = a->acc + (size_t)g * ROWS * PKV_GEMM_TOK;
        __m512 c[ROWS];
        load_acc(a, acc, c);
        gemm_prefetch_out(a, g);
        const uint8_t *rec = (const uint8_t *)a->act + (size_t)g * a->group_bytes + (size_t)b0 * PACK256_BYTES;
        for (int64_t b = 0; b < nb; b++, rec += PACK256_BYTES) {
            const __m512 da = _mm512_loadu_ps((const float *)(rec + PACK256_D));
            __m512i tot[ROWS], pr[ROWS];
            kquant_dots(&st, b, rec, type == PKV_TYPE_Q6_K ? 16 : 32, tot);
            kquant_pairs(&st, b, rec, pr);
            if (type == PKV_TYPE_Q6_K) {
#pragma GCC unroll 8
                for (int r = 0; r < ROWS; r++) {
                    const __m512i v = _mm512_sub_epi32(tot[r], _mm512_slli_epi32(pr[r], 5));
                    c[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), _mm512_mul_ps(da, _mm512_set1_ps(st.d[r][b])), c[r]);
                }
            } else {
#pragma GCC unroll 8
                for (int r = 0; r < ROWS; r++) {
                    c[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(tot[r]), _mm512_mul_ps(da, _mm512_set1_ps(st.d[r][b])), c[r]);
                    const __m512 neg = _mm512_xor_ps(_mm512_mul_ps(da, _mm512_set1_ps(st.dmin[r][b])), sign);
                    c[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(pr[r]), neg, c[r]);
                }
            }
        }
        store_acc(a, g, acc, c);
    }
}

void pkv_gemm_q4_K_avx512(const pkv_gemm_args *a) { gemm_kquant(a, PKV_TYPE_Q4_K); }
void pkv_gemm_q5_K_avx512(const pkv_gemm_args *a) { gemm_kquant(a, PKV_TYPE_Q5_K); }
void pkv_gemm_q6_K_avx512(const pkv_gemm_args *a) { gemm_kquant(a, PKV_TYPE_Q6_K); }

/* ------------------------------------------------------------------ float weights (F32 pack) */

static inline __attribute__((always_inline)) void gemm_float(const pkv_gemm_args *a, bool f16) {
    float st[ROWS][PKV_GEMM_KC_F];
    const int64_t n = a->k1 - a->k0;
    gemm_stage_float(a, f16 ? pkv_f16_to_f32_avx2 : NULL, st);
    for (int g = 0; g < a->n_groups; g++) {
        float *acc = a->acc + (size_t)g * ROWS * PKV_GEMM_TOK;
        __m512 c[ROWS];
        load_acc(a, acc, c);
        gemm_prefetch_out(a, g);
        const float *x = (const float *)((const uint8_t *)a->act + (size_t)g * a->group_bytes) + a->k0 * PKV_GEMM_TOK;
        for (int64_t e = 0; e < n; e++, x += PKV_GEMM_TOK) {
            const __m512 xv = _mm512_loadu_ps(x);
#pragma GCC unroll 8
            for (int r = 0; r < ROWS; r++) c[r] = _mm512_fmadd_ps(_mm512_set1_ps(st[r][e]), xv, c[r]);
        }
        store_acc(a, g, acc, c);
    }
}

void pkv_gemm_f32_avx512(const pkv_gemm_args *a) { gemm_float(a, false); }
void pkv_gemm_f16_avx512(const pkv_gemm_args *a) { gemm_float(a, true); }
