/*
 * AVX2 + FMA + F16C float kernels (vec.c is the reference): f32/f16 dot
 * products and axpy, f16 conversion, exp and the gated activations, and the
 * attention blocks. Reached only through the AVX2/AVX-512 kernel tables (cpu.c).
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/f16.h"
#include "kernels/levels.h"
#include "kernels/simd_x86.h"
#include "kernels/table.h"

/* ------------------------------------------------------------------ float helpers */

float pkv_dot_f32_avx2(int64_t n, const float *a, const float *b) {
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            acc[k] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8 * k), _mm256_loadu_ps(b + i + 8 * k), acc[k]);
    for (; i + 8 <= n; i += 8) acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc[0]);
    float sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; i++) sum += a[i] * b[i];
    return sum;
}

void pkv_axpy_f32_avx2(int64_t n, float alpha, const float *x, float *y) {
    const __m256 va = _mm256_set1_ps(alpha);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += alpha * x[i];
}

static inline __m256 load_f16x8(const uint16_t *p) {
    return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p));
}

float pkv_dot_f16_f32_avx2(int64_t n, const uint16_t *a, const float *b) {
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    int64_t i = 0;
    for (; i + 32 <= n; i += 32)
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            acc[k] = _mm256_fmadd_ps(load_f16x8(a + i + 8 * k), _mm256_loadu_ps(b + i + 8 * k), acc[k]);
    for (; i + 8 <= n; i += 8) acc[0] = _mm256_fmadd_ps(load_f16x8(a + i), _mm256_loadu_ps(b + i), acc[0]);
    float sum = hsum_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
    for (; i < n; i++) sum += half(a[i]) * b[i];
    return sum;
}

void pkv_axpy_f16_avx2(int64_t n, float alpha, const uint16_t *x, float *y) {
    const __m256 va = _mm256_set1_ps(alpha);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, load_f16x8(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; i++) y[i] += alpha * half(x[i]);
}

void pkv_f32_to_f16_avx2(const float *src, uint16_t *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i),
                         _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++) dst[i] = pkv_f32_to_f16(src[i]);
}

void pkv_f16_to_f32_avx2(const uint16_t *src, float *dst, int64_t n) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(dst + i, load_f16x8(src + i));
    for (; i < n; i++) dst[i] = pkv_f16_to_f32(src[i]);
}

/* ------------------------------------------------------------------ exp and gated activations */

/* quant.c exp_ref, 8 lanes, the same operations in the same order. */
static inline __m256 exp8(__m256 x) {
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.33654f)), _mm256_set1_ps(88.72283f));
    const __m256 magic = _mm256_set1_ps(12582912.0f);
    const __m256 n = _mm256_sub_ps(_mm256_add_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)), magic), magic);
    __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-0.693359375f), x);
    r = _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f), r);
    __m256 p = _mm256_fmadd_ps(_mm256_set1_ps(1.9875691500e-4f), r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

void pkv_exp_f32_avx2(int64_t n, const float *x, float *y) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, exp8(_mm256_loadu_ps(x + i)));
    if (i < n) pkv_exp_f32_ref(n - i, x + i, y + i);
}

void pkv_gelu_tanh_mul_avx2(int64_t n, float *gate, const float *up) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(gate + i);
        const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(_mm256_mul_ps(_mm256_set1_ps(0.044715f), x), x), x);
        const __m256 u = _mm256_mul_ps(_mm256_set1_ps(0.7978845608028654f), _mm256_add_ps(x, x3));
        const __m256 den = _mm256_add_ps(_mm256_set1_ps(1.0f), exp8(_mm256_mul_ps(_mm256_set1_ps(-2.0f), u)));
        _mm256_storeu_ps(gate + i, _mm256_div_ps(_mm256_mul_ps(x, _mm256_loadu_ps(up + i)), den));
    }
    if (i < n) pkv_gelu_tanh_mul_ref(n - i, gate + i, up + i);
}

void pkv_silu_mul_avx2(int64_t n, float *gate, const float *up) {
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(gate + i);
        const __m256 den = _mm256_add_ps(_mm256_set1_ps(1.0f), exp8(_mm256_xor_ps(x, _mm256_set1_ps(-0.0f))));
        _mm256_storeu_ps(gate + i, _mm256_div_ps(_mm256_mul_ps(x, _mm256_loadu_ps(up + i)), den));
    }
    if (i < n) pkv_silu_mul_ref(n - i, gate + i, up + i);
}

/* ------------------------------------------------------------------ attention blocks */

/* Elements d0..d0+7 of a cache row of type t as f32: the scalar
 * reference's row_elem (vec.c), eight lanes at a time (an int8 or a nibble
 * minus 8, converted exactly, times the block's scale: one rounding). For
 * Q8_0 and Q4_0, d0 is a multiple of 8, so the eight never cross a block. */
static inline __m256 load8_row(const uint8_t *row, pkv_type t, int d0) {
    switch (t) {
    case PKV_TYPE_F32: return _mm256_loadu_ps((const float *)row + d0);
    case PKV_TYPE_Q8_0: {
        const uint8_t *b = row + (size_t)(d0 / QK8_0) * sizeof(block_q8_0);
        uint16_t h;
        memcpy(&h, b, sizeof h);
        const __m256i q = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b + 2 + d0 % QK8_0)));
        return _mm256_mul_ps(_mm256_cvtepi32_ps(q), _mm256_set1_ps(half(h)));
    }
    case PKV_TYPE_Q4_0: {
        const uint8_t *b = row + (size_t)(d0 / QK4_0) * sizeof(block_q4_0);
        const int j = d0 % QK4_0;
        uint16_t h;
        memcpy(&h, b, sizeof h);
        __m256i q = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(b + 2 + j % (QK4_0 / 2))));
        q = j < QK4_0 / 2 ? _mm256_and_si256(q, _mm256_set1_epi32(15)) : _mm256_srli_epi32(q, 4);
        q = _mm256_sub_epi32(q, _mm256_set1_epi32(8));
        return _mm256_mul_ps(_mm256_cvtepi32_ps(q), _mm256_set1_ps(half(h)));
    }
    default: return load_f16x8((const uint16_t *)row + d0);
    }
}

/* One value row into dst, with the level's dequantisers (bit-exact with
 * quant.c's, test_quant.c). */
static inline void stage_value_row(const uint8_t *row, pkv_type t, int dv, float *dst) {
    switch (t) {
    case PKV_TYPE_F32: memcpy(dst, row, (size_t)dv * sizeof(float)); break;
    case PKV_TYPE_Q8_0: pkv_dequant_q8_0_avx2(row, dst, dv); break;
    case PKV_TYPE_Q4_0: pkv_dequant_q4_0_avx2(row, dst, dv); break;
    default: pkv_f16_to_f32_avx2((const uint16_t *)row, dst, dv); break;
    }
}

void pkv_att_stage_avx2(const void *k, const void *v, int n, int dk, int dv, pkv_type tk, pkv_type tv, float *kt,
                        float *vt) {
    const size_t kb = pkv_att_row_bytes(tk, dk), vb = pkv_att_row_bytes(tv, dv);
    const int d8 = dk & ~7; /* the block types have dk % 32 == 0: no tail */
    for (int j0 = 0; j0 < PKV_ATT_BK; j0 += 8) {
        for (int d0 = 0; d0 < d8; d0 += 8) {
            __m256 r[8];
            for (int i = 0; i < 8; i++)
                r[i] = j0 + i < n ? load8_row((const uint8_t *)k + (size_t)(j0 + i) * kb, tk, d0) : _mm256_setzero_ps();
            transpose8x8_ps(r);
            for (int i = 0; i < 8; i++) _mm256_storeu_ps(kt + (d0 + i) * PKV_ATT_BK + j0, r[i]);
        }
    }
    for (int d = d8; d < dk; d++)
        for (int j = 0; j < PKV_ATT_BK; j++)
            kt[d * PKV_ATT_BK + j] = j < n ? (tk == PKV_TYPE_F32 ? ((const float *)k)[(size_t)j * dk + d]
                                                                 : half(((const uint16_t *)k)[(size_t)j * dk + d]))
                                           : 0.0f;
    for (int j = 0; j < PKV_ATT_BK; j++) {
        float *dst = vt + (size_t)j * dv;
        if (j >= n) memset(dst, 0, (size_t)dv * sizeof(float));
        else stage_value_row((const uint8_t *)v + (size_t)j * vb, tv, dv, dst);
    }
}

void pkv_att_scores_avx2(int nq, int dk, const float *q, const float *kt, float *s) {
    int i = 0;
    for (; i + 4 <= nq; i += 4) {
        __m256 acc[4][2];
        for (int a = 0; a < 4; a++) acc[a][0] = acc[a][1] = _mm256_setzero_ps();
        const float *qi = q + (size_t)i * dk;
        for (int d = 0; d < dk; d++) {
            const __m256 k0 = _mm256_loadu_ps(kt + d * PKV_ATT_BK), k1 = _mm256_loadu_ps(kt + d * PKV_ATT_BK + 8);
#pragma GCC unroll 4
            for (int a = 0; a < 4; a++) {
                const __m256 b = _mm256_broadcast_ss(qi + (size_t)a * dk + d);
                acc[a][0] = _mm256_fmadd_ps(b, k0, acc[a][0]);
                acc[a][1] = _mm256_fmadd_ps(b, k1, acc[a][1]);
            }
        }
        for (int a = 0; a < 4; a++) {
            _mm256_storeu_ps(s + (i + a) * PKV_ATT_BK, acc[a][0]);
            _mm256_storeu_ps(s + (i + a) * PKV_ATT_BK + 8, acc[a][1]);
        }
    }
    for (; i < nq; i++) {
        __m256 a0 = _mm256_setzero_ps(), a1 = _mm256_setzero_ps();
        for (int d = 0; d < dk; d++) {
            const __m256 b = _mm256_broadcast_ss(q + (size_t)i * dk + d);
            a0 = _mm256_fmadd_ps(b, _mm256_loadu_ps(kt + d * PKV_ATT_BK), a0);
            a1 = _mm256_fmadd_ps(b, _mm256_loadu_ps(kt + d * PKV_ATT_BK + 8), a1);
        }
        _mm256_storeu_ps(s + i * PKV_ATT_BK, a0);
        _mm256_storeu_ps(s + i * PKV_ATT_BK + 8, a1);
    }
}

/* Two queries x 32 value dimensions per pass: the 4 value loads of each key
 * serve both queries. */
void pkv_att_accum_avx2(int nq, int dv, const float *p, const float *alpha, const float *vt, float *o) {
    const int e32 = dv & ~31;
    int i = 0;
    for (; i + 2 <= nq; i += 2) {
        const __m256 a0 = _mm256_set1_ps(alpha[i]), a1 = _mm256_set1_ps(alpha[i + 1]);
        float *o0 = o + (size_t)i * dv, *o1 = o0 + dv;
        for (int e = 0; e < e32; e += 32) {
            __m256 x0[4], x1[4];
            for (int c = 0; c < 4; c++) {
                x0[c] = _mm256_mul_ps(_mm256_loadu_ps(o0 + e + 8 * c), a0);
                x1[c] = _mm256_mul_ps(_mm256_loadu_ps(o1 + e + 8 * c), a1);
            }
            for (int j = 0; j < PKV_ATT_BK; j++) {
                const __m256 p0 = _mm256_broadcast_ss(p + i * PKV_ATT_BK + j);
                const __m256 p1 = _mm256_broadcast_ss(p + (i + 1) * PKV_ATT_BK + j);
                const float *vj = vt + (size_t)j * dv + e;
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++) {
                    const __m256 vv = _mm256_loadu_ps(vj + 8 * c);
                    x0[c] = _mm256_fmadd_ps(p0, vv, x0[c]);
                    x1[c] = _mm256_fmadd_ps(p1, vv, x1[c]);
                }
            }
            for (int c = 0; c < 4; c++) {
                _mm256_storeu_ps(o0 + e + 8 * c, x0[c]);
                _mm256_storeu_ps(o1 + e + 8 * c, x1[c]);
            }
        }
        att_accum_cols(i, i + 2, e32, dv, p, alpha, vt, o);
    }
    for (; i < nq; i++) {
        const __m256 a0 = _mm256_set1_ps(alpha[i]);
        float *o0 = o + (size_t)i * dv;
        for (int e = 0; e < e32; e += 32) {
            __m256 x0[4];
            for (int c = 0; c < 4; c++) x0[c] = _mm256_mul_ps(_mm256_loadu_ps(o0 + e + 8 * c), a0);
            for (int j = 0; j < PKV_ATT_BK; j++) {
                const __m256 p0 = _mm256_broadcast_ss(p + i * PKV_ATT_BK + j);
#pragma GCC unroll 4
                for (int c = 0; c < 4; c++) x0[c] = _mm256_fmadd_ps(p0, _mm256_loadu_ps(vt + (size_t)j * dv + e + 8 * c), x0[c]);
            }
            for (int c = 0; c < 4; c++) _mm256_storeu_ps(o0 + e + 8 * c, x0[c]);
        }
        att_accum_cols(i, i + 1, e32, dv, p, alpha, vt, o);
    }
}

/* table.h att_block_f16 at AVX2, for up to 4 query rows at a time (16 vector
 * registers): per half of the block (8 keys), 8 dimensions of the 8 keys
 * converted and transposed in registers, then the multiply-adds of
 * att_scores in its order; the softmax step as pkv_att_block_ref takes it
 * (exp8 is exp_f32's, block_sum's order); the values converted as they are
 * loaded and accumulated in att_accum's order. Needs dk % 8 == 0 and
 * dv % 16 == 0 (attention.c asks dk % 16 and dv % 16). */
static inline __attribute__((always_inline)) void block_f16_rows(const int R, int dk, int dv, const float *q,
                                                                 const uint16_t *kh, const uint16_t *vh, float scale,
                                                                 float *m, float *l, float *o) {
    float p[4 * PKV_ATT_BK], alpha[4];
    for (int h = 0; h < 2; h++) {
        __m256 s[4];
#pragma GCC unroll 4
        for (int a = 0; a < R; a++) s[a] = _mm256_setzero_ps();
        for (int d0 = 0; d0 < dk; d0 += 8) {
            __m256 t[8];
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) t[j] = load_f16x8(kh + (size_t)(8 * h + j) * dk + d0);
            transpose8x8_ps(t);
#pragma GCC unroll 8
            for (int dd = 0; dd < 8; dd++)
#pragma GCC unroll 4
                for (int a = 0; a < R; a++)
                    s[a] = _mm256_fmadd_ps(_mm256_set1_ps(q[(size_t)a * dk + d0 + dd]), t[dd], s[a]);
        }
#pragma GCC unroll 4
        for (int a = 0; a < R; a++) _mm256_storeu_ps(p + a * PKV_ATT_BK + 8 * h, s[a]);
    }
#pragma GCC unroll 4
    for (int a = 0; a < R; a++) {
        const __m256 vs = _mm256_set1_ps(scale);
        const __m256 v0 = _mm256_mul_ps(_mm256_loadu_ps(p + a * PKV_ATT_BK), vs),
                     v1 = _mm256_mul_ps(_mm256_loadu_ps(p + a * PKV_ATT_BK + 8), vs);
        __m256 mx = _mm256_max_ps(v0, v1);
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
        m4 = _mm_max_ps(m4, _mm_shuffle_ps(m4, m4, 0x4E));
        m4 = _mm_max_ps(m4, _mm_shuffle_ps(m4, m4, 0xB1));
        const float b = _mm_cvtss_f32(m4), bm = b > m[a] ? b : m[a];
        const __m256 p0 = exp8(_mm256_sub_ps(v0, _mm256_set1_ps(bm))), p1 = exp8(_mm256_sub_ps(v1, _mm256_set1_ps(bm)));
        alpha[a] = _mm_cvtss_f32(_mm256_castps256_ps128(exp8(_mm256_set1_ps(m[a] - bm))));
        m[a] = bm;
        /* block_sum: lanes e of the four quarters in key order, then (a0 + a1) + (a2 + a3) */
        __m128 acc = _mm_add_ps(_mm_setzero_ps(), _mm256_castps256_ps128(p0));
        acc = _mm_add_ps(acc, _mm256_extractf128_ps(p0, 1));
        acc = _mm_add_ps(acc, _mm256_castps256_ps128(p1));
        acc = _mm_add_ps(acc, _mm256_extractf128_ps(p1, 1));
        float q4[4];
        _mm_storeu_ps(q4, acc);
        l[a] = l[a] * alpha[a] + ((q4[0] + q4[1]) + (q4[2] + q4[3]));
        _mm256_storeu_ps(p + a * PKV_ATT_BK, p0);
        _mm256_storeu_ps(p + a * PKV_ATT_BK + 8, p1);
    }
    for (int e = 0; e < dv; e += 16) {
        __m256 x[4][2];
#pragma GCC unroll 4
        for (int a = 0; a < R; a++) {
            const __m256 al = _mm256_set1_ps(alpha[a]);
            x[a][0] = _mm256_mul_ps(_mm256_loadu_ps(o + (size_t)a * dv + e), al);
            x[a][1] = _mm256_mul_ps(_mm256_loadu_ps(o + (size_t)a * dv + e + 8), al);
        }
        for (int j = 0; j < PKV_ATT_BK; j++) {
            const __m256 w0 = load_f16x8(vh + (size_t)j * dv + e), w1 = load_f16x8(vh + (size_t)j * dv + e + 8);
#pragma GCC unroll 4
            for (int a = 0; a < R; a++) {
                const __m256 pa = _mm256_broadcast_ss(p + a * PKV_ATT_BK + j);
                x[a][0] = _mm256_fmadd_ps(pa, w0, x[a][0]);
                x[a][1] = _mm256_fmadd_ps(pa, w1, x[a][1]);
            }
        }
#pragma GCC unroll 4
        for (int a = 0; a < R; a++) {
            _mm256_storeu_ps(o + (size_t)a * dv + e, x[a][0]);
            _mm256_storeu_ps(o + (size_t)a * dv + e + 8, x[a][1]);
        }
    }
}

void pkv_att_block_f16_avx2(int nq, int dk, int dv, const float *q, const uint16_t *kh, const uint16_t *vh,
                            int n_blocks, float scale, float *m, float *l, float *o) {
    for (int b = 0; b < n_blocks; b++) {
        const uint16_t *kb = kh + (size_t)b * PKV_ATT_BK * dk, *vb = vh + (size_t)b * PKV_ATT_BK * dv;
        int i = 0;
        for (; i + 4 <= nq; i += 4)
            block_f16_rows(4, dk, dv, q + (size_t)i * dk, kb, vb, scale, m + i, l + i, o + (size_t)i * dv);
        switch (nq - i) {
        case 3: block_f16_rows(3, dk, dv, q + (size_t)i * dk, kb, vb, scale, m + i, l + i, o + (size_t)i * dv); break;
        case 2: block_f16_rows(2, dk, dv, q + (size_t)i * dk, kb, vb, scale, m + i, l + i, o + (size_t)i * dv); break;
        case 1: block_f16_rows(1, dk, dv, q + (size_t)i * dk, kb, vb, scale, m + i, l + i, o + (size_t)i * dv); break;
        default: break;
        }
    }
}
