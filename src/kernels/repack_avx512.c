/*
 * AVX-512 (VL + VNNI) kernels on eight-row interleaved weights (repack.h):
 * the decode matrix-vector product (table.h matvec_x8) and the staging of
 * interleaved blocks for the batched matmul (gemm_avx512.c).
 *
 * One block of a group is 8 vectors of 32 unsigned quants, vector q holding
 * elements 4q..4q+3 of the 8 rows. Against an activation block, vector q
 * meets the broadcast of the activation's quants 4q..4q+3, so 8 vpdpbusd
 * give the 8 rows' integer dot products in 8 lanes (four independent chains
 * of two, so their latencies overlap), exact in int32; the offset's
 * correction -offset x sum(activation quants) is the chains' start value.
 * One conversion, one multiply (the 8 rows' scales by the activation's) and
 * one FMA per block then finish 8 rows; even and odd blocks go to two
 * accumulators. Every step is the scalar reference's (pkv_matvec_x8_ref) in
 * its order, lane by lane, so the bits are the same for every row whatever
 * the number of activation rows handled together.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/levels.h"
#include "kernels/repack.h"
#include "kernels/simd_x86.h"

#pragma GCC target("avx512vnni")

enum {
    ROWS = PKV_X8_ROWS,
    MAX_NB = 1024, /* K up to 32768 here; longer rows take the scalar reference (same bits) */
    ACT_TILE = 4,  /* activation rows advanced together over one group's blocks */
    MAX_ACT = 8,   /* activation rows prepared at once */
};

static inline __m256i bcast32(const void *p) { return _mm256_set1_epi32((int)load_u32(p)); }

/* The 8 vectors of unsigned quants of one interleaved block. */
static inline __attribute__((always_inline)) void x8_quants(const uint32_t type, const uint8_t *blk, __m256i q[8]) {
    if (type == PKV_TYPE_Q8_0) {
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) q[i] = load256(blk + 2 * ROWS + 32 * i);
        return;
    }
    const __m256i low = _mm256_set1_epi8(15);
    const uint8_t *qs = blk + 2 * ROWS + (type == PKV_TYPE_Q5_0 ? 4 * ROWS : 0);
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        const __m256i v = load256(qs + 32 * c);
        q[c] = _mm256_and_si256(v, low);
        q[c + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
    }
    if (type == PKV_TYPE_Q5_0) {
        const __m256i sixteen = _mm256_set1_epi8(16);
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++)
            q[i] = _mm256_mask_add_epi8(q[i], _cvtu32_mask32(load_u32(blk + 2 * ROWS + 4 * i)), q[i], sixteen);
    }
}

/* What each activation block contributes besides its quants: its scale and
 * -offset x the sum of its quants. */
typedef struct {
    float d[MAX_NB];
    int32_t corr[MAX_NB];
} act_prep;

static void prepare(const block_q8_0 *x, int64_t nb, int offset, act_prep *p) {
    const __m256i ones = _mm256_set1_epi8(1);
    for (int64_t b = 0; b < nb; b++) {
        const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), ones, load256(x[b].qs));
        __m128i h = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
        h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xB1));
        p->corr[b] = -offset * _mm_cvtsi128_si32(h);
        p->d[b] = half(x[b].d);
    }
}

/* Block b of the group against one activation row, into acc. */
static inline __attribute__((always_inline)) __m256 block_step(const __m256i q[8], __m256 dw, const block_q8_0 *x,
                                                               const act_prep *p, int64_t b, __m256 acc) {
    const uint8_t *ys = (const uint8_t *)x[b].qs;
    __m256i s0 = _mm256_set1_epi32(p->corr[b]), s1 = _mm256_setzero_si256(), s2 = _mm256_setzero_si256(),
            s3 = _mm256_setzero_si256();
    s0 = _mm256_dpbusd_epi32(s0, q[0], bcast32(ys));
    s1 = _mm256_dpbusd_epi32(s1, q[1], bcast32(ys + 4));
    s2 = _mm256_dpbusd_epi32(s2, q[2], bcast32(ys + 8));
    s3 = _mm256_dpbusd_epi32(s3, q[3], bcast32(ys + 12));
    s0 = _mm256_dpbusd_epi32(s0, q[4], bcast32(ys + 16));
    s1 = _mm256_dpbusd_epi32(s1, q[5], bcast32(ys + 20));
    s2 = _mm256_dpbusd_epi32(s2, q[6], bcast32(ys + 24));
    s3 = _mm256_dpbusd_epi32(s3, q[7], bcast32(ys + 28));
    const __m256i s = _mm256_add_epi32(_mm256_add_epi32(s0, s1), _mm256_add_epi32(s2, s3));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, _mm256_set1_ps(p->d[b])), acc);
}

/* One group's 8 rows against na (1..ACT_TILE, a constant per inlined copy)
 * activation rows; results to y[a * ldy + 0..7]. */
static inline __attribute__((always_inline)) void group_tile(const uint32_t type, const int na, int64_t nb,
                                                             const uint8_t *group, const block_q8_0 *const *x,
                                                             const act_prep *const *p, float *y, int64_t ldy) {
    const uint64_t bb = pkv_x8_block_bytes(type);
    __m256 acc[ACT_TILE][2];
#pragma GCC unroll 4
    for (int a = 0; a < na; a++) acc[a][0] = acc[a][1] = _mm256_setzero_ps();
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            const uint8_t *blk = group + (uint64_t)(b + h) * bb;
            __m256i q[8];
            x8_quants(type, blk, q);
            const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk));
#pragma GCC unroll 4
            for (int a = 0; a < na; a++) acc[a][h] = block_step(q, dw, x[a], p[a], b + h, acc[a][h]);
        }
    }
    if (b < nb) {
        const uint8_t *blk = group + (uint64_t)b * bb;
        __m256i q[8];
        x8_quants(type, blk, q);
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk));
#pragma GCC unroll 4
        for (int a = 0; a < na; a++) acc[a][0] = block_step(q, dw, x[a], p[a], b, acc[a][0]);
    }
#pragma GCC unroll 4
    for (int a = 0; a < na; a++) _mm256_storeu_ps(y + (int64_t)a * ldy, _mm256_add_ps(acc[a][0], acc[a][1]));
}

static inline __attribute__((always_inline)) void matvec_x8(const uint32_t type, int offset, int64_t k, const void *w,
                                                            int64_t n_rows, const void *act, uint64_t act_stride,
                                                            int n_act, float *y, int64_t ldy) {
    const int64_t nb = k / 32;
    if (nb > MAX_NB) {
        pkv_matvec_x8_ref(type, k, w, n_rows, act, act_stride, n_act, y, ldy);
        return;
    }
    const uint64_t group_bytes = (uint64_t)nb * pkv_x8_block_bytes(type);
    act_prep prep[MAX_ACT];
    for (int a0 = 0; a0 < n_act; a0 += MAX_ACT) {
        const int n_prep = n_act - a0 < MAX_ACT ? n_act - a0 : MAX_ACT;
        const block_q8_0 *x[MAX_ACT];
        const act_prep *p[MAX_ACT];
        for (int a = 0; a < n_prep; a++) {
            x[a] = (const block_q8_0 *)((const uint8_t *)act + (uint64_t)(a0 + a) * act_stride);
            p[a] = &prep[a];
            prepare(x[a], nb, offset, &prep[a]);
        }
        for (int64_t g = 0; g < n_rows / ROWS; g++) {
            const uint8_t *group = (const uint8_t *)w + (uint64_t)g * group_bytes;
            for (int t = 0; t < n_prep; t += ACT_TILE) {
                float *yt = y + (int64_t)(a0 + t) * ldy + g * ROWS;
                switch (n_prep - t < ACT_TILE ? n_prep - t : ACT_TILE) {
                case 1: group_tile(type, 1, nb, group, x + t, p + t, yt, ldy); break;
                case 2: group_tile(type, 2, nb, group, x + t, p + t, yt, ldy); break;
                case 3: group_tile(type, 3, nb, group, x + t, p + t, yt, ldy); break;
                default: group_tile(type, 4, nb, group, x + t, p + t, yt, ldy); break;
                }
            }
        }
    }
}

void pkv_matvec_x8_q4_0_avx512(int64_t k, const void *w, int64_t n_rows, const void *act, uint64_t act_stride,
                               int n_act, float *y, int64_t ldy) {
    matvec_x8(PKV_TYPE_Q4_0, 8, k, w, n_rows, act, act_stride, n_act, y, ldy);
}
void pkv_matvec_x8_q5_0_avx512(int64_t k, const void *w, int64_t n_rows, const void *act, uint64_t act_stride,
                               int n_act, float *y, int64_t ldy) {
    matvec_x8(PKV_TYPE_Q5_0, 16, k, w, n_rows, act, act_stride, n_act, y, ldy);
}
void pkv_matvec_x8_q8_0_avx512(int64_t k, const void *w, int64_t n_rows, const void *act, uint64_t act_stride,
                               int n_act, float *y, int64_t ldy) {
    matvec_x8(PKV_TYPE_Q8_0, 128, k, w, n_rows, act, act_stride, n_act, y, ldy);
}

/* Blocks b0..b0+nb-1 of the group at w as the batched matmul stages them
 * (gemm_avx512.c): row r's unsigned quants at u + r * u_stride + 32 (b - b0),
 * its scale at dw[r * dw_stride + b - b0]. The 8 quant vectors of a block are
 * an 8 x 8 matrix of 4-byte groups (vector q, lane r); transposed, vector r
 * is row r's 32 quants. */
void pkv_x8_stage_avx512(uint32_t type, const void *w, int64_t b0, int64_t nb, uint8_t *u, size_t u_stride,
                         float *dw, size_t dw_stride) {
    const uint64_t bb = pkv_x8_block_bytes(type);
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = (const uint8_t *)w + (uint64_t)(b0 + b) * bb;
        __m256i q[8];
        switch (type) {
        case PKV_TYPE_Q4_0: x8_quants(PKV_TYPE_Q4_0, blk, q); break;
        case PKV_TYPE_Q5_0: x8_quants(PKV_TYPE_Q5_0, blk, q); break;
        default: x8_quants(PKV_TYPE_Q8_0, blk, q); break;
        }
        __m256 r[8];
        for (int i = 0; i < 8; i++) r[i] = _mm256_castsi256_ps(q[i]);
        transpose8x8_ps(r);
        for (int i = 0; i < 8; i++) _mm256_storeu_ps((float *)(u + i * u_stride + 32 * b), r[i]);
        float d[ROWS];
        _mm256_storeu_ps(d, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk)));
        for (int i = 0; i < ROWS; i++) dw[i * dw_stride + b] = d[i];
    }
}
