/*
 * AVX-512 att_block (table.h): one whole block of PKV_ATT_BK = 16 keys for
 * a tile's query rows, the scores, the online-softmax step and the
 * accumulation fused, so that a row's 16 scores live in one register from
 * the dot products to the weights that scale the values. Run one by one
 * (att_scores, attention.c's softmax step, exp_f32, att_accum) the steps
 * store and reload every score three times and spend most of a prefill's
 * attention time outside the multiply-adds (docs/performance.md, "Prefill
 * attention"). Every lane does the operations of pkv_att_block_ref in its
 * order, so the bits are those of the steps run one by one.
 *
 * Rows go four at a time: 4 score registers, then 4 rows x 4 registers of
 * output (64 value dimensions per pass) stay in the 32 vector registers.
 *
 * att_block_f16 is the same step on f16 cache rows where they lie, for a
 * decode step's few query rows per KV head: staging a block (converting and
 * transposing its keys, converting its values, through memory) cost more
 * than the attention itself there; here 16 dimensions of the block's 16 keys
 * are converted and transposed in registers and the values are converted as
 * they are loaded, the same values in the same order.
 */
#include <immintrin.h>

#include "kernels/levels.h"
#include "kernels/table.h"

_Static_assert(PKV_ATT_BK == 16, "one 512-bit register holds a row's block of scores");

/* vec_avx2.c exp8 on 16 lanes: the same operations in the same order. */
static inline __m512 exp16(__m512 x) {
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(-87.33654f)), _mm512_set1_ps(88.72283f));
    const __m512 magic = _mm512_set1_ps(12582912.0f);
    const __m512 n = _mm512_sub_ps(_mm512_add_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)), magic), magic);
    __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-0.693359375f), x);
    r = _mm512_fmadd_ps(n, _mm512_set1_ps(2.12194440e-4f), r);
    __m512 p = _mm512_fmadd_ps(_mm512_set1_ps(1.9875691500e-4f), r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    p = _mm512_add_ps(_mm512_fmadd_ps(p, _mm512_mul_ps(r, r), r), _mm512_set1_ps(1.0f));
    const __m512i e = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(e));
}

/* attention.c block_sum: four 4-lane partial sums taken in key order, then
 * (a0 + a1) + (a2 + a3). */
static inline float block_sum16(__m512 p) {
    __m128 a = _mm_add_ps(_mm_setzero_ps(), _mm512_castps512_ps128(p));
    a = _mm_add_ps(a, _mm512_extractf32x4_ps(p, 1));
    a = _mm_add_ps(a, _mm512_extractf32x4_ps(p, 2));
    a = _mm_add_ps(a, _mm512_extractf32x4_ps(p, 3));
    float v[4];
    _mm_storeu_ps(v, a);
    return (v[0] + v[1]) + (v[2] + v[3]);
}

/* The largest of m and the 16 lanes (exact in any order). */
static inline float block_max(__m512 v, float m) {
    const float b = _mm512_reduce_max_ps(v);
    return b > m ? b : m;
}

/* Lanes e0 .. e0 + 15 of value row j, masked: staged f32 rows (vt), or the
 * cache's f16 rows where they lie (vh; converted exactly, the values
 * att_stage would have written). */
static inline __attribute__((always_inline)) __m512 value_lanes(const float *vt, const uint16_t *vh, int dv, int j,
                                                                int e, __mmask16 mk) {
    if (vh) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(mk, vh + (size_t)j * dv + e));
    return _mm512_maskz_loadu_ps(mk, vt + (size_t)j * dv + e);
}

/* o[a][e0 .. e0 + 16C) of R rows (R x C <= 16 accumulators): scaled by
 * alpha, then the 16 keys' values in order; lanes past dv masked off (tail). */
static inline __attribute__((always_inline)) void accum_cols(const int R, const int C, __mmask16 tail, int dv, int e0,
                                                             const float *p, const float *alpha, const float *vt,
                                                             const uint16_t *vh, float *o) {
    __m512 x[8][4];
#pragma GCC unroll 8
    for (int a = 0; a < R; a++) {
        const __m512 al = _mm512_set1_ps(alpha[a]);
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            const __mmask16 mk = c == C - 1 ? tail : (__mmask16)0xFFFF;
            x[a][c] = _mm512_mul_ps(_mm512_maskz_loadu_ps(mk, o + (size_t)a * dv + e0 + 16 * c), al);
        }
    }
#pragma GCC unroll 2
    for (int j = 0; j < PKV_ATT_BK; j++) {
        __m512 v[4];
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
            v[c] = value_lanes(vt, vh, dv, j, e0 + 16 * c, c == C - 1 ? tail : (__mmask16)0xFFFF);
#pragma GCC unroll 8
        for (int a = 0; a < R; a++) {
            const __m512 pa = _mm512_set1_ps(p[a * PKV_ATT_BK + j]);
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) x[a][c] = _mm512_fmadd_ps(pa, v[c], x[a][c]);
        }
    }
#pragma GCC unroll 8
    for (int a = 0; a < R; a++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
            _mm512_mask_storeu_ps(o + (size_t)a * dv + e0 + 16 * c, c == C - 1 ? tail : (__mmask16)0xFFFF, x[a][c]);
}

/* The online-softmax step of R (1..8) query rows whose block scores are
 * s[0..R): their m and l updated, the weights in p[a][16] and the rescale
 * factors in alpha[a]. */
static inline __attribute__((always_inline)) void softmax_rows(const int R, const __m512 *s, float scale, float *m,
                                                               float *l, float *p, float *alpha) {
    float sums[8];
    _mm512_storeu_ps(alpha, _mm512_setzero_ps());
#pragma GCC unroll 8
    for (int a = 0; a < R; a++) {
        const __m512 v = _mm512_mul_ps(s[a], _mm512_set1_ps(scale));
        const float bm = block_max(v, m[a]);
        const __m512 pa = exp16(_mm512_sub_ps(v, _mm512_set1_ps(bm)));
        alpha[a] = m[a] - bm; /* the rows' rescale exponents, one exp16 for all */
        m[a] = bm;
        sums[a] = block_sum16(pa);
        _mm512_storeu_ps(p + a * PKV_ATT_BK, pa);
    }
    _mm512_storeu_ps(alpha, exp16(_mm512_loadu_ps(alpha)));
#pragma GCC unroll 8
    for (int a = 0; a < R; a++) l[a] = l[a] * alpha[a] + sums[a];
}

/* The accumulation of R rows over all dv columns, C vectors of 16 at a
 * time (R x C <= 16). */
static inline __attribute__((always_inline)) void accum_rows(const int R, const int C, int dv, const float *p,
                                                             const float *alpha, const float *vt, const uint16_t *vh,
                                                             float *o) {
    int e = 0;
    for (; e + 16 * C <= dv; e += 16 * C) accum_cols(R, C, 0xFFFF, dv, e, p, alpha, vt, vh, o);
    const int rest = dv - e; /* fewer than 16 C columns left: one more pass, its last vector masked */
    if (rest <= 0) return;
    const __mmask16 tail = (__mmask16)(rest % 16 ? (1u << (rest % 16)) - 1 : 0xFFFF);
    switch ((rest + 15) / 16) {
    case 1: accum_cols(R, 1, tail, dv, e, p, alpha, vt, vh, o); break;
    case 2: accum_cols(R, C < 2 ? C : 2, tail, dv, e, p, alpha, vt, vh, o); break;
    case 3: accum_cols(R, C < 3 ? C : 3, tail, dv, e, p, alpha, vt, vh, o); break;
    default: accum_cols(R, C, tail, dv, e, p, alpha, vt, vh, o); break; /* (rest + 15) / 16 <= C */
    }
}

/* The online-softmax step and the accumulation for R (1..4) query rows
 * whose block scores are s[0..R), their m, l and output rows; values staged
 * (vt) or f16 cache rows (vh). */
static inline __attribute__((always_inline)) void finish_rows(const int R, const __m512 *s, int dv, const float *vt,
                                                              const uint16_t *vh, float scale, float *m, float *l,
                                                              float *o) {
    float p[4 * PKV_ATT_BK], alpha[16];
    softmax_rows(R, s, scale, m, l, p, alpha);
    accum_rows(R, 4, dv, p, alpha, vt, vh, o);
}

/* R (1..4) query rows at q, their m, l and output rows, on a staged block. */
static inline __attribute__((always_inline)) void block_rows(const int R, int dk, int dv, const float *q,
                                                             const float *kt, const float *vt, float scale, float *m,
                                                             float *l, float *o) {
    __m512 s[4];
#pragma GCC unroll 4
    for (int a = 0; a < R; a++) s[a] = _mm512_setzero_ps();
    for (int d = 0; d < dk; d++) {
        const __m512 kd = _mm512_loadu_ps(kt + d * PKV_ATT_BK);
#pragma GCC unroll 4
        for (int a = 0; a < R; a++) s[a] = _mm512_fmadd_ps(_mm512_set1_ps(q[(size_t)a * dk + d]), kd, s[a]);
    }
    finish_rows(R, s, dv, vt, NULL, scale, m, l, o);
}

void pkv_att_block_avx512(int nq, int dk, int dv, const float *q, const float *kt, const float *vt, float scale, float *m,
                          float *l, float *o) {
    int i = 0;
    for (; i + 4 <= nq; i += 4)
        block_rows(4, dk, dv, q + (size_t)i * dk, kt, vt, scale, m + i, l + i, o + (size_t)i * dv);
    switch (nq - i) {
    case 3: block_rows(3, dk, dv, q + (size_t)i * dk, kt, vt, scale, m + i, l + i, o + (size_t)i * dv); break;
    case 2: block_rows(2, dk, dv, q + (size_t)i * dk, kt, vt, scale, m + i, l + i, o + (size_t)i * dv); break;
    case 1: block_rows(1, dk, dv, q + (size_t)i * dk, kt, vt, scale, m + i, l + i, o + (size_t)i * dv); break;
    default: break;
    }
}

/* r[i] lane c -> r[c] lane i: sixteen rows of 16 floats transposed (pairs
 * of 32-bit, then 64-bit elements within each 128-bit lane, then the 128-bit
 * lanes across registers). */
static inline __attribute__((always_inline)) void transpose16(__m512 r[16]) {
    __m512 t[16];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* r[4i + c] lane L: rows 4i..4i+3 of column 4L + c */
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 1]),
                      c = _mm512_castps_pd(t[4 * i + 2]), d = _mm512_castps_pd(t[4 * i + 3]);
        r[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
        r[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
        r[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
        r[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        const __m512 x = _mm512_shuffle_f32x4(r[c], r[4 + c], 0x88), y = _mm512_shuffle_f32x4(r[c], r[4 + c], 0xDD),
                     x2 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0x88),
                     y2 = _mm512_shuffle_f32x4(r[8 + c], r[12 + c], 0xDD);
        t[c] = _mm512_shuffle_f32x4(x, x2, 0x88);
        t[8 + c] = _mm512_shuffle_f32x4(x, x2, 0xDD);
        t[4 + c] = _mm512_shuffle_f32x4(y, y2, 0x88);
        t[12 + c] = _mm512_shuffle_f32x4(y, y2, 0xDD);
    }
#pragma GCC unroll 16
    for (int i = 0; i < 16; i++) r[i] = t[i];
}

/* The scores of R (1..8) query rows against a block of 16 f16 key rows
 * (dk % 16 == 0): 16 dimensions of the 16 rows converted and transposed in
 * registers, then the multiply-adds of block_rows in its order (d ascending,
 * from zero). (Two blocks' scores at once, for two independent chains per
 * row, spilled registers and measured 15% slower.) */
static inline __attribute__((always_inline)) void scores_f16(const int R, int dk, const float *q, const uint16_t *kh,
                                                             float *sc) {
    __m512 s[8];
#pragma GCC unroll 8
    for (int a = 0; a < R; a++) s[a] = _mm512_setzero_ps();
    for (int d0 = 0; d0 < dk; d0 += 16) {
        __m512 t[16];
#pragma GCC unroll 16
        for (int j = 0; j < PKV_ATT_BK; j++)
            t[j] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(kh + (size_t)j * dk + d0)));
        transpose16(t);
#pragma GCC unroll 16
        for (int dd = 0; dd < 16; dd++)
#pragma GCC unroll 8
            for (int a = 0; a < R; a++)
                s[a] = _mm512_fmadd_ps(_mm512_set1_ps(q[(size_t)a * dk + d0 + dd]), t[dd], s[a]);
    }
#pragma GCC unroll 8
    for (int a = 0; a < R; a++) _mm512_storeu_ps(sc + a * PKV_ATT_BK, s[a]);
}

/* All nq query rows of a block at once: the softmax step of each, then the
 * accumulation with every row's outputs in registers, two vectors of
 * columns at a time, so each value row is loaded and converted once per
 * block (in fours, the values were converted once per four rows). */
static inline __attribute__((always_inline)) void block_f16(const int R, int dk, int dv, const float *q,
                                                            const uint16_t *kb, const uint16_t *vb, float scale,
                                                            float *m, float *l, float *o) {
    float sc[PKV_ATT_F16_MAX_Q * PKV_ATT_BK], p[8 * PKV_ATT_BK], alpha[16];
    scores_f16(R, dk, q, kb, sc);
    __m512 s[8];
#pragma GCC unroll 8
    for (int a = 0; a < R; a++) s[a] = _mm512_loadu_ps(sc + a * PKV_ATT_BK);
    softmax_rows(R, s, scale, m, l, p, alpha);
    accum_rows(R, 2, dv, p, alpha, NULL, vb, o);
}

void pkv_att_block_f16_avx512(int nq, int dk, int dv, const float *q, const uint16_t *kh, const uint16_t *vh,
                              int n_blocks, float scale, float *m, float *l, float *o) {
    for (int b = 0; b < n_blocks; b++) {
        const uint16_t *kb = kh + (size_t)b * PKV_ATT_BK * dk, *vb = vh + (size_t)b * PKV_ATT_BK * dv;
        switch (nq) {
        case 1: block_f16(1, dk, dv, q, kb, vb, scale, m, l, o); break;
        case 2: block_f16(2, dk, dv, q, kb, vb, scale, m, l, o); break;
        case 3: block_f16(3, dk, dv, q, kb, vb, scale, m, l, o); break;
        case 4: block_f16(4, dk, dv, q, kb, vb, scale, m, l, o); break;
        case 5: block_f16(5, dk, dv, q, kb, vb, scale, m, l, o); break;
        case 6: block_f16(6, dk, dv, q, kb, vb, scale, m, l, o); break;
        case 7: block_f16(7, dk, dv, q, kb, vb, scale, m, l, o); break;
        default: block_f16(8, dk, dv, q, kb, vb, scale, m, l, o); break;
        }
    }
}
