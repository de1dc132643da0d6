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

/* o[a][e0 .. e0 + 16c) of R rows: scaled by alpha, then the 16 keys' values
 * in order; lanes past dv masked off (tail). */
static inline __attribute__((always_inline)) void accum_cols(const int R, const int C, __mmask16 tail, int dv, int e0,
                                                             const float *p, const float *alpha, const float *vt,
                                                             float *o) {
    __m512 x[4][4];
#pragma GCC unroll 4
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
            v[c] = _mm512_maskz_loadu_ps(c == C - 1 ? tail : (__mmask16)0xFFFF, vt + (size_t)j * dv + e0 + 16 * c);
#pragma GCC unroll 4
        for (int a = 0; a < R; a++) {
            const __m512 pa = _mm512_set1_ps(p[a * PKV_ATT_BK + j]);
#pragma GCC unroll 4
            for (int c = 0; c < C; c++) x[a][c] = _mm512_fmadd_ps(pa, v[c], x[a][c]);
        }
    }
#pragma GCC unroll 4
    for (int a = 0; a < R; a++)
#pragma GCC unroll 4
        for (int c = 0; c < C; c++)
            _mm512_mask_storeu_ps(o + (size_t)a * dv + e0 + 16 * c, c == C - 1 ? tail : (__mmask16)0xFFFF, x[a][c]);
}

/* R (1..4) query rows at q, their m, l and output rows. */
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
    float p[4 * PKV_ATT_BK], alpha[16] = {0}, sums[4];
#pragma GCC unroll 4
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
#pragma GCC unroll 4
    for (int a = 0; a < R; a++) l[a] = l[a] * alpha[a] + sums[a];
    int e = 0;
    for (; e + 64 <= dv; e += 64) accum_cols(R, 4, 0xFFFF, dv, e, p, alpha, vt, o);
    const int rest = dv - e;
    if (rest > 0) {
        const int c = (rest + 15) / 16;
        const __mmask16 tail = (__mmask16)(rest % 16 ? (1u << (rest % 16)) - 1 : 0xFFFF);
        switch (c) {
        case 1: accum_cols(R, 1, tail, dv, e, p, alpha, vt, o); break;
        case 2: accum_cols(R, 2, tail, dv, e, p, alpha, vt, o); break;
        case 3: accum_cols(R, 3, tail, dv, e, p, alpha, vt, o); break;
        default: accum_cols(R, 4, tail, dv, e, p, alpha, vt, o); break;
        }
    }
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
