/*
 * AVX-512 float kernels (vec.c is the reference): the attention blocks,
 * twice the keys or value dimensions per instruction of the AVX2 versions
 * (measured about 2x). Reached only through the AVX-512 kernel table (cpu.c);
 * the rest of that table's float kernels is the AVX2 code.
 */
#include <immintrin.h>
#include <string.h>

#include "kernels/levels.h"
#include "kernels/simd_x86.h"
#include "kernels/table.h"

/* ------------------------------------------------------------------ attention blocks */

/* table.h att_scores: 8 queries at a time, one 16-key vector each; the query
 * element is a broadcast memory operand of the FMA. */
void pkv_att_scores_avx512(int nq, int dk, const float *q, const float *kt, float *s) {
    int i = 0;
    for (; i + 8 <= nq; i += 8) {
        __m512 acc[8];
        for (int a = 0; a < 8; a++) acc[a] = _mm512_setzero_ps();
        const float *qi = q + (size_t)i * dk;
        for (int d = 0; d < dk; d++) {
            const __m512 kv = _mm512_loadu_ps(kt + d * PKV_ATT_BK);
#pragma GCC unroll 8
            for (int a = 0; a < 8; a++) acc[a] = _mm512_fmadd_ps(_mm512_set1_ps(qi[(size_t)a * dk + d]), kv, acc[a]);
        }
        for (int a = 0; a < 8; a++) _mm512_storeu_ps(s + (i + a) * PKV_ATT_BK, acc[a]);
    }
    for (; i < nq; i++) {
        __m512 acc = _mm512_setzero_ps();
        for (int d = 0; d < dk; d++)
            acc = _mm512_fmadd_ps(_mm512_set1_ps(q[(size_t)i * dk + d]), _mm512_loadu_ps(kt + d * PKV_ATT_BK), acc);
        _mm512_storeu_ps(s + i * PKV_ATT_BK, acc);
    }
}

/* table.h att_accum: 4 queries x 64 value dimensions per pass, so each value
 * vector loaded serves 4 queries. */
void pkv_att_accum_avx512(int nq, int dv, const float *p, const float *alpha, const float *vt, float *o) {
    const int e64 = dv & ~63;
    int i = 0;
    for (; i + 4 <= nq; i += 4) {
        for (int e = 0; e < e64; e += 64) {
            __m512 x[4][4];
            for (int a = 0; a < 4; a++) {
                const __m512 al = _mm512_set1_ps(alpha[i + a]);
                for (int c = 0; c < 4; c++) x[a][c] = _mm512_mul_ps(_mm512_loadu_ps(o + (size_t)(i + a) * dv + e + 16 * c), al);
            }
            for (int j = 0; j < PKV_ATT_BK; j++) {
                const float *vj = vt + (size_t)j * dv + e;
                const __m512 v0 = _mm512_loadu_ps(vj), v1 = _mm512_loadu_ps(vj + 16);
                const __m512 v2 = _mm512_loadu_ps(vj + 32), v3 = _mm512_loadu_ps(vj + 48);
#pragma GCC unroll 4
                for (int a = 0; a < 4; a++) {
                    const __m512 pa = _mm512_set1_ps(p[(i + a) * PKV_ATT_BK + j]);
                    x[a][0] = _mm512_fmadd_ps(pa, v0, x[a][0]);
                    x[a][1] = _mm512_fmadd_ps(pa, v1, x[a][1]);
                    x[a][2] = _mm512_fmadd_ps(pa, v2, x[a][2]);
                    x[a][3] = _mm512_fmadd_ps(pa, v3, x[a][3]);
                }
            }
            for (int a = 0; a < 4; a++)
                for (int c = 0; c < 4; c++) _mm512_storeu_ps(o + (size_t)(i + a) * dv + e + 16 * c, x[a][c]);
        }
        att_accum_cols(i, i + 4, e64, dv, p, alpha, vt, o);
    }
    for (; i < nq; i++) {
        const __m512 al = _mm512_set1_ps(alpha[i]);
        for (int e = 0; e < e64; e += 64) {
            __m512 x[4];
            for (int c = 0; c < 4; c++) x[c] = _mm512_mul_ps(_mm512_loadu_ps(o + (size_t)i * dv + e + 16 * c), al);
            for (int j = 0; j < PKV_ATT_BK; j++) {
                const __m512 pj = _mm512_set1_ps(p[i * PKV_ATT_BK + j]);
                for (int c = 0; c < 4; c++) x[c] = _mm512_fmadd_ps(pj, _mm512_loadu_ps(vt + (size_t)j * dv + e + 16 * c), x[c]);
            }
            for (int c = 0; c < 4; c++) _mm512_storeu_ps(o + (size_t)i * dv + e + 16 * c, x[c]);
        }
        att_accum_cols(i, i + 1, e64, dv, p, alpha, vt, o);
    }
}
