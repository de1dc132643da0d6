/*
 * Batched matmul (table.h "batched matmul"): activation packing, the pack
 * geometry, and the scalar reference kernels that gemm_avx2.c and
 * gemm_avx512.c must reproduce bit for bit.
 *
 * A kernel call covers up to PKV_GEMM_ROWS weight rows, a K chunk and any
 * number of token groups. Each weight row's chunk is first unpacked into
 * unsigned bytes u with a per-type offset o (value = u - o) and its block
 * scales; then, for every token and block, the integer dot product is exact
 * and is added to the token's float accumulator with one fused multiply-add:
 *   legacy   acc = fma(sum(u*q) - o*sum(q),                      dw*da, acc)
 *   Q4/5_K   acc = fma(sum_j sc_j*dot_j,                          dw*da, acc)
 *            acc = fma(sum_j m_j*bsum_j,                     -(dmin*da), acc)
 *   Q6_K     acc = fma(sum_j sc_j*dot_j - 32*sum_j sc_j*bsum_j,   dw*da, acc)
 *   float    acc = fma(w, x, acc)   element after element
 * These are the vec_dot formulas (docs/engine.md §2.3) with one accumulator
 * per output element instead of a vector of partial sums.
 */
#include <math.h>
#include <string.h>

#include "kernels/f16.h"
#include "kernels/levels.h"
#include "kernels/repack.h"
#include "kernels/table.h"

/* ------------------------------------------------------------------ pack geometry */

pkv_pack_kind pkv_pack_kind_of(uint32_t weight_type) {
    switch (weight_type) {
    case PKV_TYPE_Q4_0:
    case PKV_TYPE_Q5_0:
    case PKV_TYPE_Q8_0: return PKV_PACK_Q8_32;
    case PKV_TYPE_Q4_K:
    case PKV_TYPE_Q5_K:
    case PKV_TYPE_Q6_K: return PKV_PACK_Q8_256;
    case PKV_TYPE_F32:
    case PKV_TYPE_F16: return PKV_PACK_F32;
    default: return PKV_PACK_NONE;
    }
}

int pkv_pack_block_elems(pkv_pack_kind kind) {
    switch (kind) {
    case PKV_PACK_Q8_32: return QK8_0;
    case PKV_PACK_Q8_256: return QK_K;
    default: return 1;
    }
}

uint64_t pkv_pack_group_bytes(pkv_pack_kind kind, int64_t k) {
    switch (kind) {
    case PKV_PACK_Q8_32: return (uint64_t)(k / QK8_0) * PACK32_BYTES;
    case PKV_PACK_Q8_256: return (uint64_t)(k / QK_K) * PACK256_BYTES;
    case PKV_PACK_F32: return (uint64_t)k * PACKF_BYTES;
    default: return 0;
    }
}

int64_t pkv_pack_max_chunk(pkv_pack_kind kind) { return kind == PKV_PACK_F32 ? PKV_GEMM_KC_F : PKV_GEMM_KC_Q; }

/* ------------------------------------------------------------------ packing */

static void pack_q8_32(const block_q8_0 *q, int t, int64_t nb, uint8_t *dst) {
    for (int64_t b = 0; b < nb; b++, dst += PACK32_BYTES) {
        int32_t sum = 0;
        for (int k = 0; k < 8; k++) memcpy(dst + PACK32_QS + 64 * k + 4 * t, q[b].qs + 4 * k, 4);
        for (int j = 0; j < QK8_0; j++) sum += q[b].qs[j];
        const float d = pkv_f16_to_f32(q[b].d);
        memcpy(dst + PACK32_D + 4 * t, &d, 4);
        memcpy(dst + PACK32_SUM + 4 * t, &sum, 4);
    }
}

static void pack_q8_256(const block_q8_K *q, int t, int64_t nb, uint8_t *dst) {
    for (int64_t b = 0; b < nb; b++, dst += PACK256_BYTES) {
        for (int k = 0; k < 64; k++) memcpy(dst + PACK256_QS + 64 * k + 4 * t, q[b].qs + 4 * k, 4);
        memcpy(dst + PACK256_D + 4 * t, &q[b].d, 4);
        for (int i = 0; i < 8; i++) memcpy(dst + PACK256_BSUMS + 64 * i + 4 * t, &q[b].bsums[2 * i], 4);
    }
}

void pkv_gemm_pack(const pkv_kernels *kern, pkv_pack_kind kind, const float *x, int64_t x_stride, int n_tok,
                   int64_t k, void *dst, void *tmp) {
    uint8_t *out = dst;
    if (n_tok < PKV_GEMM_TOK) memset(out, 0, pkv_pack_group_bytes(kind, k));
    for (int t = 0; t < n_tok; t++) {
        const float *row = x + t * x_stride;
        switch (kind) {
        case PKV_PACK_Q8_32:
            kern->quantize[PKV_TYPE_Q8_0](row, tmp, k);
            pack_q8_32(tmp, t, k / QK8_0, out);
            break;
        case PKV_PACK_Q8_256:
            kern->quantize[PKV_TYPE_Q8_K](row, tmp, k);
            pack_q8_256(tmp, t, k / QK_K, out);
            break;
        case PKV_PACK_F32:
            for (int64_t e = 0; e < k; e++) memcpy(out + e * PACKF_BYTES + 4 * t, row + e, 4);
            break;
        default: break;
        }
    }
}

/* ------------------------------------------------------------------ scalar reference kernels */

static inline int8_t act_q(const uint8_t *rec, int e, int t) {
    return (int8_t)rec[64 * (e / 4) + 4 * t + (e % 4)];
}
static inline float rd_f32(const uint8_t *p) {
    float v;
    memcpy(&v, p, 4);
    return v;
}
static inline int32_t rd_i32(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return v;
}
static inline int16_t rd_i16(const uint8_t *p) {
    int16_t v;
    memcpy(&v, p, 2);
    return v;
}

static float *acc_of(const pkv_gemm_args *a, int g, int r) {
    return a->acc + ((size_t)g * PKV_GEMM_ROWS + (size_t)r) * PKV_GEMM_TOK;
}

/* Where a finished value goes: acc, or y on the last chunk. */
static void put(const pkv_gemm_args *a, int g, int r, int t, float v) {
    if (!a->y) {
        acc_of(a, g, r)[t] = v;
        return;
    }
    const int tok = g * PKV_GEMM_TOK + t;
    if (tok < a->y_tokens) a->y[(int64_t)tok * a->ldy + r] = v;
}

/* Unsigned quants u of legacy block b (value = u - offset); returns its scale. */
static float unpack_legacy(uint32_t type, const void *row, int64_t b, uint8_t u[32]) {
    switch (type) {
    case PKV_TYPE_Q4_0: {
        const block_q4_0 *x = (const block_q4_0 *)row + b;
        for (int j = 0; j < 16; j++) {
            u[j] = x->qs[j] & 15;
            u[j + 16] = x->qs[j] >> 4;
        }
        return pkv_f16_to_f32(x->d);
    }
    case PKV_TYPE_Q5_0: {
        const block_q5_0 *x = (const block_q5_0 *)row + b;
        uint32_t qh;
        memcpy(&qh, x->qh, 4);
        for (int j = 0; j < 16; j++) {
            u[j] = (uint8_t)((x->qs[j] & 15) | (((qh >> j) & 1) << 4));
            u[j + 16] = (uint8_t)((x->qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
        }
        return pkv_f16_to_f32(x->d);
    }
    default: { /* Q8_0 */
        const block_q8_0 *x = (const block_q8_0 *)row + b;
        for (int j = 0; j < 32; j++) u[j] = (uint8_t)(x->qs[j] + 128);
        return pkv_f16_to_f32(x->d);
    }
    }
}

static void gemm_legacy(const pkv_gemm_args *a, uint32_t type, int offset) {
    const int64_t b0 = a->k0 / QK8_0, nb = (a->k1 - a->k0) / QK8_0;
    uint8_t u[PKV_GEMM_KC_Q];
    float dw[PKV_GEMM_KC_Q / QK8_0];
    for (int r = 0; r < a->n_rows; r++) {
        const char *row = (const char *)a->w + (size_t)r * a->row_bytes;
        for (int64_t b = 0; b < nb; b++)
            dw[b] = a->x8.data ? pkv_x8_unpack_block(type, &a->x8, r, b0 + b, u + 32 * b, NULL)
                          : unpack_legacy(type, row, b0 + b, u + 32 * b);
        for (int g = 0; g < a->n_groups; g++) {
            float *acc = acc_of(a, g, r);
            const uint8_t *grp = (const uint8_t *)a->act + (size_t)g * a->group_bytes + (size_t)b0 * PACK32_BYTES;
            for (int t = 0; t < PKV_GEMM_TOK; t++) {
                float v = a->init ? 0.0f : acc[t];
                for (int64_t b = 0; b < nb; b++) {
                    const uint8_t *rec = grp + b * PACK32_BYTES;
                    int32_t s = -offset * rd_i32(rec + PACK32_SUM + 4 * t);
                    for (int e = 0; e < 32; e++) s += u[32 * b + e] * act_q(rec, e, t);
                    v = fmaf((float)s, rd_f32(rec + PACK32_D + 4 * t) * dw[b], v);
                }
                put(a, g, r, t, v);
            }
        }
    }
}

void pkv_gemm_q4_0_ref(const pkv_gemm_args *a) { gemm_legacy(a, PKV_TYPE_Q4_0, 8); }
void pkv_gemm_q5_0_ref(const pkv_gemm_args *a) { gemm_legacy(a, PKV_TYPE_Q5_0, 16); }
void pkv_gemm_q8_0_ref(const pkv_gemm_args *a) { gemm_legacy(a, PKV_TYPE_Q8_0, 128); }

/* One K-quant super-block unpacked: unsigned quants in element order and
 * the scales (Q6_K: 16 signed scales, u = q + 32; Q4_K/Q5_K: 8 scales and 8
 * mins). */
typedef struct {
    uint8_t u[QK_K];
    int32_t sc[16];
    int32_t m[8];
    float d, dmin;
} kq_block;

static void unpack_kquant(uint32_t type, const void *row, int64_t b, kq_block *o) {
    if (type == PKV_TYPE_Q6_K) {
        const block_q6_K *x = (const block_q6_K *)row + b;
        for (int e = 0; e < QK_K; e++) {
            const int h = e / 128, c = (e % 128) / 32, l = e % 32;
            const uint8_t ql = x->ql[64 * h + 32 * (c & 1) + l];
            const int lo = c < 2 ? ql & 15 : ql >> 4;
            o->u[e] = (uint8_t)(lo | (((x->qh[32 * h + l] >> (2 * c)) & 3) << 4));
        }
        for (int j = 0; j < 16; j++) o->sc[j] = x->scales[j];
        o->d = pkv_f16_to_f32(x->d);
        o->dmin = 0.0f;
        return;
    }
    const uint8_t *qs, *scales, *qh = NULL;
    if (type == PKV_TYPE_Q4_K) {
        const block_q4_K *x = (const block_q4_K *)row + b;
        qs = x->qs, scales = x->scales;
        o->d = pkv_f16_to_f32(x->d), o->dmin = pkv_f16_to_f32(x->dmin);
    } else {
        const block_q5_K *x = (const block_q5_K *)row + b;
        qs = x->qs, scales = x->scales, qh = x->qh;
        o->d = pkv_f16_to_f32(x->d), o->dmin = pkv_f16_to_f32(x->dmin);
    }
    for (int k = 0; k < 4; k++)
        for (int l = 0; l < 32; l++) {
            int lo = qs[32 * k + l] & 15, hi = qs[32 * k + l] >> 4;
            if (qh) {
                lo |= ((qh[l] >> (2 * k)) & 1) << 4;
                hi |= ((qh[l] >> (2 * k + 1)) & 1) << 4;
            }
            o->u[64 * k + l] = (uint8_t)lo;
            o->u[64 * k + 32 + l] = (uint8_t)hi;
        }
    uint8_t sc[8], m[8];
    pkv_k_scales_unpack(scales, sc, m);
    for (int j = 0; j < 8; j++) o->sc[j] = sc[j], o->m[j] = m[j];
}

static void gemm_kquant(const pkv_gemm_args *a, uint32_t type) {
    const int64_t b0 = a->k0 / QK_K, nb = (a->k1 - a->k0) / QK_K;
    kq_block blk[PKV_GEMM_KC_Q / QK_K];
    /* interleaved weights: the chunk's 8 rows put back into the file's layout */
    uint8_t file[PKV_X8_ROWS][PKV_GEMM_KC_Q / QK_K * sizeof(block_q6_K)];
    if (a->x8.data) pkv_x8_file_rows(type, &a->x8, b0, nb, file, sizeof file[0]);
    for (int r = 0; r < a->n_rows; r++) {
        const char *row = (const char *)a->w + (size_t)r * a->row_bytes;
        for (int64_t b = 0; b < nb; b++) {
            if (a->x8.data) unpack_kquant(type, file[r], b, &blk[b]);
            else unpack_kquant(type, row, b0 + b, &blk[b]);
        }
        for (int g = 0; g < a->n_groups; g++) {
            float *acc = acc_of(a, g, r);
            const uint8_t *grp = (const uint8_t *)a->act + (size_t)g * a->group_bytes + (size_t)b0 * PACK256_BYTES;
            for (int t = 0; t < PKV_GEMM_TOK; t++) {
                float v = a->init ? 0.0f : acc[t];
                for (int64_t b = 0; b < nb; b++) {
                    const kq_block *x = &blk[b];
                    const uint8_t *rec = grp + b * PACK256_BYTES;
                    const float da = rd_f32(rec + PACK256_D + 4 * t);
                    const int sub = type == PKV_TYPE_Q6_K ? 16 : 32; /* elements per scale */
                    int32_t sumi = 0;
                    for (int j = 0; j < QK_K / sub; j++) {
                        int32_t dot = 0;
                        for (int e = sub * j; e < sub * (j + 1); e++) dot += x->u[e] * act_q(rec, e, t);
                        sumi += x->sc[j] * dot;
                    }
                    int32_t bs[16];
                    for (int i = 0; i < 16; i++) bs[i] = rd_i16(rec + PACK256_BSUMS + 64 * (i / 2) + 4 * t + 2 * (i % 2));
                    if (type == PKV_TYPE_Q6_K) {
                        int32_t offset = 0;
                        for (int j = 0; j < 16; j++) offset += x->sc[j] * bs[j];
                        v = fmaf((float)(sumi - 32 * offset), da * x->d, v);
                    } else {
                        int32_t mins = 0;
                        for (int j = 0; j < 8; j++) mins += x->m[j] * bs[2 * j] + x->m[j] * bs[2 * j + 1];
                        v = fmaf((float)sumi, da * x->d, v);
                        v = fmaf((float)mins, -(da * x->dmin), v);
                    }
                }
                put(a, g, r, t, v);
            }
        }
    }
}

void pkv_gemm_q4_K_ref(const pkv_gemm_args *a) { gemm_kquant(a, PKV_TYPE_Q4_K); }
void pkv_gemm_q5_K_ref(const pkv_gemm_args *a) { gemm_kquant(a, PKV_TYPE_Q5_K); }
void pkv_gemm_q6_K_ref(const pkv_gemm_args *a) { gemm_kquant(a, PKV_TYPE_Q6_K); }

static void gemm_float(const pkv_gemm_args *a, bool f16) {
    for (int r = 0; r < a->n_rows; r++) {
        const char *row = (const char *)a->w + (size_t)r * a->row_bytes;
        for (int g = 0; g < a->n_groups; g++) {
            float *acc = acc_of(a, g, r);
            const uint8_t *grp = (const uint8_t *)a->act + (size_t)g * a->group_bytes;
            for (int t = 0; t < PKV_GEMM_TOK; t++) {
                float v = a->init ? 0.0f : acc[t];
                for (int64_t e = a->k0; e < a->k1; e++) {
                    float w;
                    if (f16) {
                        uint16_t h;
                        memcpy(&h, row + 2 * e, 2);
                        w = pkv_f16_to_f32(h);
                    } else {
                        memcpy(&w, row + 4 * e, 4);
                    }
                    v = fmaf(w, rd_f32(grp + e * PACKF_BYTES + 4 * t), v);
                }
                put(a, g, r, t, v);
            }
        }
    }
}

void pkv_gemm_f32_ref(const pkv_gemm_args *a) { gemm_float(a, false); }
void pkv_gemm_f16_ref(const pkv_gemm_args *a) { gemm_float(a, true); }
