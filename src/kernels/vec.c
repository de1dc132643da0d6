/*
 * Float kernels, scalar: dot products and axpy over f32 and f16 rows, f16
 * conversion, exp and the gated activations, and the attention blocks
 * (table.h "float helpers", "attention blocks"). The _scalar versions make the
 * scalar table; the _ref versions are the bit-exact references (fused
 * multiply-adds in the SIMD kernels' order) that vec_avx2.c and vec_avx512.c
 * are tested against.
 */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "kernels/f16.h"
#include "kernels/levels.h"
#include "kernels/table.h"

/* ------------------------------------------------------------------ float helpers */

/* Eight partial sums: the SIMD kernels' shape, and better rounding than one. */
float pkv_dot_f32_scalar(int64_t n, const float *a, const float *b) {
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) acc[k] += a[i + k] * b[i + k];
    float tail = 0.0f;
    for (; i < n; i++) tail += a[i] * b[i];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}

void pkv_axpy_f32_scalar(int64_t n, float alpha, const float *x, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] += alpha * x[i];
}

float pkv_dot_f16_f32_scalar(int64_t n, const uint16_t *a, const float *b) {
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
#pragma GCC unroll 8
        for (int k = 0; k < 8; k++) acc[k] += pkv_f16_to_f32(a[i + k]) * b[i + k];
    float tail = 0.0f;
    for (; i < n; i++) tail += pkv_f16_to_f32(a[i]) * b[i];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7])) + tail;
}

void pkv_axpy_f16_scalar(int64_t n, float alpha, const uint16_t *x, float *y) {
    for (int64_t i = 0; i < n; i++) y[i] += alpha * pkv_f16_to_f32(x[i]);
}

void pkv_f32_to_f16_scalar(const float *src, uint16_t *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = pkv_f32_to_f16(src[i]);
}

void pkv_f16_to_f32_scalar(const uint16_t *src, float *dst, int64_t n) {
    for (int64_t i = 0; i < n; i++) dst[i] = pkv_f16_to_f32(src[i]);
}

/* A multiply-add, fused (one rounding, as the SIMD kernels' FMA) or not. The
 * fused form is the bit-exact reference the SIMD kernels are tested
 * against; the scalar table uses the plain form, because CPUs that get the
 * scalar table have no FMA unit and fmaf is a slow library call there. */
static inline float mul_add(float a, float b, float c, bool fused) { return fused ? fmaf(a, b, c) : a * b + c; }

/* Cephes expf (the SIMD kernels' algorithm, operation for operation):
 * e^x = 2^n e^r with n = round(x log2 e), r = x - n ln2 (ln2 in two parts),
 * e^r = 1 + r + r^2 P(r). Rounding n by adding 1.5 * 2^23 rounds half to
 * even, as the vector code does. */
static inline float exp_poly(float x, bool fused) {
    x = fminf(fmaxf(x, -87.33654f), 88.72283f);
    const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    float r = mul_add(n, -0.693359375f, x, fused);
    r = mul_add(n, 2.12194440e-4f, r, fused);
    float p = mul_add(1.9875691500e-4f, r, 1.3981999507e-3f, fused);
    p = mul_add(p, r, 8.3334519073e-3f, fused);
    p = mul_add(p, r, 4.1665795894e-2f, fused);
    p = mul_add(p, r, 1.6666665459e-1f, fused);
    p = mul_add(p, r, 5.0000001201e-1f, fused);
    p = mul_add(p, r * r, r, fused) + 1.0f;
    return p * pkv_bits_to_f32((uint32_t)((int32_t)n + 127) << 23);
}

static inline void exp_rows(int64_t n, const float *x, float *y, bool fused) {
    for (int64_t i = 0; i < n; i++) y[i] = exp_poly(x[i], fused);
}

static inline void gelu_rows(int64_t n, float *gate, const float *up, bool fused) {
    for (int64_t i = 0; i < n; i++) {
        const float x = gate[i];
        const float u = 0.7978845608028654f * (x + 0.044715f * x * x * x);
        gate[i] = x * up[i] / (1.0f + exp_poly(-2.0f * u, fused));
    }
}

static inline void silu_rows(int64_t n, float *gate, const float *up, bool fused) {
    for (int64_t i = 0; i < n; i++) {
        const float x = gate[i];
        gate[i] = x * up[i] / (1.0f + exp_poly(-x, fused));
    }
}

void pkv_exp_f32_scalar(int64_t n, const float *x, float *y) { exp_rows(n, x, y, false); }
void pkv_exp_f32_ref(int64_t n, const float *x, float *y) { exp_rows(n, x, y, true); }
void pkv_gelu_tanh_mul_scalar(int64_t n, float *gate, const float *up) { gelu_rows(n, gate, up, false); }
void pkv_gelu_tanh_mul_ref(int64_t n, float *gate, const float *up) { gelu_rows(n, gate, up, true); }
void pkv_silu_mul_scalar(int64_t n, float *gate, const float *up) { silu_rows(n, gate, up, false); }
void pkv_silu_mul_ref(int64_t n, float *gate, const float *up) { silu_rows(n, gate, up, true); }

/* ------------------------------------------------------------------ attention blocks */

/* Element d of a cache row of type t, as that type's dequantiser gives it
 * (quant.c: q * d for Q8_0, (nibble - 8) * d for Q4_0, element j < 16 of a
 * Q4_0 block in the low nibble of byte j, element j + 16 in its high one). */
static inline float row_elem(const uint8_t *row, pkv_type t, int d) {
    uint16_t h;
    switch (t) {
    case PKV_TYPE_F32: {
        float x;
        memcpy(&x, row + (size_t)d * 4, sizeof x);
        return x;
    }
    case PKV_TYPE_Q8_0: {
        const uint8_t *b = row + (size_t)(d / QK8_0) * sizeof(block_q8_0);
        memcpy(&h, b, sizeof h);
        return (float)(int8_t)b[2 + d % QK8_0] * pkv_f16_to_f32(h);
    }
    case PKV_TYPE_Q4_0: {
        const uint8_t *b = row + (size_t)(d / QK4_0) * sizeof(block_q4_0);
        const int j = d % QK4_0, q = j < QK4_0 / 2 ? b[2 + j] & 15 : b[2 + j - QK4_0 / 2] >> 4;
        memcpy(&h, b, sizeof h);
        return (float)(q - 8) * pkv_f16_to_f32(h);
    }
    default:
        memcpy(&h, row + (size_t)d * 2, sizeof h);
        return pkv_f16_to_f32(h);
    }
}

void pkv_att_stage_scalar(const void *k, const void *v, int n, int dk, int dv, pkv_type tk, pkv_type tv, float *kt,
                          float *vt) {
    const size_t kb = pkv_att_row_bytes(tk, dk), vb = pkv_att_row_bytes(tv, dv);
    for (int j = 0; j < PKV_ATT_BK; j++) {
        if (j >= n) {
            for (int d = 0; d < dk; d++) kt[d * PKV_ATT_BK + j] = 0.0f;
            memset(vt + (size_t)j * dv, 0, (size_t)dv * sizeof(float));
            continue;
        }
        const uint8_t *kr = (const uint8_t *)k + (size_t)j * kb, *vr = (const uint8_t *)v + (size_t)j * vb;
        for (int d = 0; d < dk; d++) kt[d * PKV_ATT_BK + j] = row_elem(kr, tk, d);
        for (int e = 0; e < dv; e++) vt[(size_t)j * dv + e] = row_elem(vr, tv, e);
    }
}

/* Loops ordered so the innermost runs over independent accumulators; each
 * one still takes its terms in the documented order. */
static inline void att_scores(int nq, int dk, const float *q, const float *kt, float *s, bool fused) {
    for (int i = 0; i < nq; i++) {
        float acc[PKV_ATT_BK] = {0};
        for (int d = 0; d < dk; d++) {
            const float qd = q[(size_t)i * dk + d];
            for (int j = 0; j < PKV_ATT_BK; j++) acc[j] = mul_add(qd, kt[d * PKV_ATT_BK + j], acc[j], fused);
        }
        memcpy(s + i * PKV_ATT_BK, acc, sizeof acc);
    }
}

static inline void att_accum(int nq, int dv, const float *p, const float *alpha, const float *vt, float *o, bool fused) {
    for (int i = 0; i < nq; i++) {
        float *oi = o + (size_t)i * dv;
        for (int e = 0; e < dv; e++) oi[e] *= alpha[i];
        for (int j = 0; j < PKV_ATT_BK; j++) {
            const float pj = p[i * PKV_ATT_BK + j];
            const float *vj = vt + (size_t)j * dv;
            for (int e = 0; e < dv; e++) oi[e] = mul_add(pj, vj[e], oi[e], fused);
        }
    }
}

/* table.h att_block, composed of the fused references: the scores, then per
 * query row the online-softmax step exactly as attention.c takes it for a
 * whole block (its softmax_block_start and block_sum), then the
 * accumulation. */
void pkv_att_block_ref(int nq, int dk, int dv, const float *q, const float *kt, const float *vt, float scale, float *m,
                       float *l, float *o) {
    enum { MAXQ = 64 };
    float s[MAXQ * PKV_ATT_BK], alpha[MAXQ];
    for (int i0 = 0; i0 < nq; i0 += MAXQ) {
        const int n = nq - i0 < MAXQ ? nq - i0 : MAXQ;
        att_scores(n, dk, q + (size_t)i0 * dk, kt, s, true);
        for (int i = 0; i < n; i++) {
            float *si = s + i * PKV_ATT_BK;
            float bm = m[i0 + i];
            for (int j = 0; j < PKV_ATT_BK; j++) {
                si[j] *= scale;
                bm = si[j] > bm ? si[j] : bm;
            }
            for (int j = 0; j < PKV_ATT_BK; j++) si[j] = exp_poly(si[j] - bm, true);
            alpha[i] = exp_poly(m[i0 + i] - bm, true);
            m[i0 + i] = bm;
            float a[4];
            for (int e = 0; e < 4; e++) a[e] = (((0.0f + si[e]) + si[4 + e]) + si[8 + e]) + si[12 + e];
            l[i0 + i] = l[i0 + i] * alpha[i] + ((a[0] + a[1]) + (a[2] + a[3]));
        }
        att_accum(n, dv, s, alpha, vt, o + (size_t)i0 * dv, true);
    }
}

void pkv_att_scores_scalar(int nq, int dk, const float *q, const float *kt, float *s) { att_scores(nq, dk, q, kt, s, false); }
void pkv_att_scores_ref(int nq, int dk, const float *q, const float *kt, float *s) { att_scores(nq, dk, q, kt, s, true); }
void pkv_att_accum_scalar(int nq, int dv, const float *p, const float *alpha, const float *vt, float *o) {
    att_accum(nq, dv, p, alpha, vt, o, false);
}
void pkv_att_accum_ref(int nq, int dv, const float *p, const float *alpha, const float *vt, float *o) {
    att_accum(nq, dv, p, alpha, vt, o, true);
}

