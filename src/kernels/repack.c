/*
 * Eight-row interleaved weights (repack.h): the repacking done at load, the
 * row extraction the embedding lookup and the batched matmul use, and the
 * scalar reference of the decode kernel that repack_x86.h reproduces bit
 * for bit.
 */
#include "kernels/repack.h"

#include <math.h>
#include <string.h>

#include "kernels/f16.h"
#include "kernels/levels.h"
#include "kernels/table.h"

enum { ROWS = PKV_X8_ROWS, QK = 32 };

/* Offsets inside an interleaved block (repack.h). */
enum {
    X8_D = 0,
    X8_Q5_QH = 2 * ROWS,             /* Q5_0: 8 quads x 4 bytes of fifth bits */
    X8_Q5_QS = X8_Q5_QH + ROWS * 4,  /* Q5_0: 4 x 32 bytes of nibbles */
    X8_Q4_QS = 2 * ROWS,             /* Q4_0 */
    X8_Q8_QS = 2 * ROWS,             /* Q8_0: 8 x 32 bytes */
    X8K_DMIN = 2 * ROWS,             /* Q4_K: the rows' dmin */
    X8K_SM = 4 * ROWS,               /* Q4_K: low 4 bits of the scales and mins, 8 x 8 bytes */
    X8K_SMH = X8K_SM + 8 * ROWS,     /* Q4_K: their top 2 bits, 4 x 8 bytes */
    X8K_QS = X8K_SMH + 4 * ROWS,     /* Q4_K: 4 pairs x 8 x 32 bytes of nibbles */
};
_Static_assert(X8K_QS + 4 * 8 * 32 == ROWS * sizeof(block_q4_K), "interleaved Q4_K block");
enum {
    X86_SC = 2 * ROWS,               /* Q6_K: int8 scales, 16 x 8 */
    X86_Q = X86_SC + 16 * ROWS,      /* Q6_K: 4 pairs of 8 x 32 bytes of low nibbles and 2 x 2 x 32 of top bits */
    X86_PAIR = 8 * 32 + 2 * 2 * 32,
};
_Static_assert(X86_Q + 4 * X86_PAIR == ROWS * sizeof(block_q6_K), "interleaved Q6_K block");

bool pkv_x8_supported(uint32_t type, int64_t k, int64_t n_rows) {
    return pkv_x8_block_bytes(type) && k > 0 && k % pkv_x8_block_cols(type) == 0 && n_rows > 0 &&
           n_rows % ROWS == 0;
}

static int x8_offset(uint32_t type) { return type == PKV_TYPE_Q4_0 ? 8 : type == PKV_TYPE_Q5_0 ? 16 : 128; }

/* Unsigned quants (element order) and fp16 scale of one GGUF block. */
static uint16_t gguf_block_unsigned(uint32_t type, const void *blk, uint8_t u[QK]) {
    switch (type) {
    case PKV_TYPE_Q4_0: {
        const block_q4_0 *x = blk;
        for (int j = 0; j < 16; j++) u[j] = x->qs[j] & 15, u[j + 16] = x->qs[j] >> 4;
        return x->d;
    }
    case PKV_TYPE_Q5_0: {
        const block_q5_0 *x = blk;
        uint32_t qh;
        memcpy(&qh, x->qh, 4);
        for (int j = 0; j < 16; j++) {
            u[j] = (uint8_t)((x->qs[j] & 15) | (((qh >> j) & 1) << 4));
            u[j + 16] = (uint8_t)((x->qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4));
        }
        return x->d;
    }
    default: {
        const block_q8_0 *x = blk;
        for (int j = 0; j < QK; j++) u[j] = (uint8_t)(x->qs[j] + 128);
        return x->d;
    }
    }
}

/* One interleaved block from the 8 rows' unsigned quants and scales. */
static void put_x8_block(uint32_t type, const uint8_t u[ROWS][QK], const uint16_t d[ROWS], uint8_t *dst) {
    memcpy(dst + X8_D, d, 2 * ROWS);
    if (type == PKV_TYPE_Q8_0) {
        for (int q = 0; q < 8; q++)
            for (int r = 0; r < ROWS; r++) memcpy(dst + X8_Q8_QS + 32 * q + 4 * r, &u[r][4 * q], 4);
        return;
    }
    uint8_t *qs = dst + (type == PKV_TYPE_Q5_0 ? X8_Q5_QS : X8_Q4_QS);
    for (int c = 0; c < 4; c++)
        for (int r = 0; r < ROWS; r++)
            for (int e = 0; e < 4; e++)
                qs[32 * c + 4 * r + e] = (uint8_t)((u[r][4 * c + e] & 15) | (u[r][4 * (c + 4) + e] & 15) << 4);
    if (type == PKV_TYPE_Q5_0)
        for (int q = 0; q < 8; q++) {
            uint32_t bits = 0;
            for (int r = 0; r < ROWS; r++)
                for (int e = 0; e < 4; e++) bits |= (uint32_t)(u[r][4 * q + e] >> 4) << (4 * r + e);
            memcpy(dst + X8_Q5_QH + 4 * q, &bits, 4);
        }
}

/* Q8_0 four quants at a time (the bulk of a Q8_0 model's load): the same
 * bytes put_x8_block writes. */
static void repack_q8_0_block(const uint8_t *rows, uint64_t row_bytes, int64_t b, uint8_t *out) {
    for (int r = 0; r < ROWS; r++) {
        const block_q8_0 *x = (const block_q8_0 *)(rows + r * row_bytes) + b;
        memcpy(out + X8_D + 2 * r, &x->d, 2);
        for (int q = 0; q < 8; q++) {
            uint32_t v;
            memcpy(&v, x->qs + 4 * q, 4);
            v ^= 0x80808080u; /* + 128 in each byte */
            memcpy(out + X8_Q8_QS + 32 * q + 4 * r, &v, 4);
        }
    }
}

/* One interleaved Q4_K block from the 8 rows' GGUF super-blocks. */
static void put_x8_q4_k(const block_q4_K *const x[ROWS], uint8_t *dst) {
    for (int r = 0; r < ROWS; r++) {
        memcpy(dst + X8_D + 2 * r, &x[r]->d, 2);
        memcpy(dst + X8K_DMIN + 2 * r, &x[r]->dmin, 2);
    }
    memset(dst + X8K_SMH, 0, 4 * ROWS);
    for (int r = 0; r < ROWS; r++) {
        uint8_t sc[8], m[8];
        pkv_k_scales_unpack(x[r]->scales, sc, m);
        for (int j = 0; j < 8; j++) {
            dst[X8K_SM + 8 * j + r] = (uint8_t)((sc[j] & 15) | (m[j] & 15) << 4);
            dst[X8K_SMH + 8 * (j & 3) + r] |= (uint8_t)(((sc[j] >> 4) | (m[j] >> 4) << 2) << (4 * (j >> 2)));
        }
    }
    /* GGUF: byte 32p+l holds element 64p+l (low nibble) and 64p+32+l (high) */
    for (int p = 0; p < 4; p++)
        for (int c = 0; c < 8; c++)
            for (int r = 0; r < ROWS; r++) memcpy(dst + X8K_QS + 256 * p + 32 * c + 4 * r, x[r]->qs + 32 * p + 4 * c, 4);
}

/* Row `lane` of an interleaved Q4_K block back as the GGUF super-block. */
static void get_x8_q4_k(const uint8_t *blk, int lane, block_q4_K *x) {
    uint8_t sc[8], m[8];
    memcpy(&x->d, blk + X8_D + 2 * lane, 2);
    memcpy(&x->dmin, blk + X8K_DMIN + 2 * lane, 2);
    for (int j = 0; j < 8; j++) {
        const uint8_t lo = blk[X8K_SM + 8 * j + lane], hi = blk[X8K_SMH + 8 * (j & 3) + lane] >> (4 * (j >> 2));
        sc[j] = (uint8_t)((lo & 15) | (hi & 3) << 4);
        m[j] = (uint8_t)((lo >> 4) | ((hi >> 2) & 3) << 4);
    }
    pkv_k_scales_pack(sc, m, x->scales);
    for (int p = 0; p < 4; p++)
        for (int c = 0; c < 8; c++) memcpy(x->qs + 32 * p + 4 * c, blk + X8K_QS + 256 * p + 32 * c + 4 * lane, 4);
}

/* Q6_K element e (0..255) of a GGUF block, unsigned (0..63, value u - 32):
 * element 128h + 32c + l is the low (c < 2) or high nibble of ql[64h +
 * 32(c & 1) + l] with bits 2c, 2c+1 of qh[32h + l] on top (docs/engine.md
 * §2.2); its scale is scales[e / 16]. */
static uint8_t q6_k_get(const block_q6_K *x, int e) {
    const int h = e / 128, c = (e % 128) / 32, l = e % 32;
    const uint8_t ql = x->ql[64 * h + 32 * (c & 1) + l];
    return (uint8_t)((c < 2 ? ql & 15 : ql >> 4) | ((x->qh[32 * h + l] >> (2 * c)) & 3) << 4);
}

static void q6_k_put(block_q6_K *x, int e, uint8_t u) {
    const int h = e / 128, c = (e % 128) / 32, l = e % 32;
    uint8_t *ql = &x->ql[64 * h + 32 * (c & 1) + l], *qh = &x->qh[32 * h + l];
    *ql = c < 2 ? (uint8_t)((*ql & 0xF0) | (u & 15)) : (uint8_t)((*ql & 0x0F) | (u & 15) << 4);
    *qh = (uint8_t)((*qh & ~(3 << (2 * c))) | ((u >> 4) & 3) << (2 * c));
}

/* Byte 4r+e of the interleaved Q6_K quant vectors of element i of row r
 * (repack.h): the low nibble's byte in ql and its nibble, the top bits' byte
 * in qh and their shift. */
static int x86_ql_byte(int r, int i, int *high) {
    const int p = i / 64, c = (i % 32) / 4, e = i % 4;
    *high = (i % 64) >= 32;
    return X86_Q + X86_PAIR * p + 32 * c + 4 * r + e;
}
static int x86_qh_byte(int r, int i, int *shift) {
    const int j = i / 32, c = (i % 32) / 4, e = i % 4;
    *shift = 2 * (c % 4);
    return X86_Q + X86_PAIR * (j / 2) + 8 * 32 + 64 * (j % 2) + 32 * (c / 4) + 4 * r + e;
}

/* One interleaved Q6_K block from the 8 rows' GGUF super-blocks. */
static void put_x8_q6_k(const block_q6_K *const x[ROWS], uint8_t *dst) {
    memset(dst, 0, ROWS * sizeof(block_q6_K));
    for (int r = 0; r < ROWS; r++) {
        memcpy(dst + X8_D + 2 * r, &x[r]->d, 2);
        for (int i = 0; i < 16; i++) dst[X86_SC + 8 * i + r] = (uint8_t)x[r]->scales[i];
        for (int i = 0; i < QK_K; i++) {
            const uint8_t u = q6_k_get(x[r], i);
            int high, shift;
            const int lo_at = x86_ql_byte(r, i, &high), hi_at = x86_qh_byte(r, i, &shift);
            dst[lo_at] |= (uint8_t)((u & 15) << (4 * high));
            dst[hi_at] |= (uint8_t)((u >> 4) << shift);
        }
    }
}

/* Row `lane` of an interleaved Q6_K block back as the GGUF super-block. */
static void get_x8_q6_k(const uint8_t *blk, int lane, block_q6_K *x) {
    memcpy(&x->d, blk + X8_D + 2 * lane, 2);
    for (int i = 0; i < 16; i++) x->scales[i] = (int8_t)blk[X86_SC + 8 * i + lane];
    memset(x->ql, 0, sizeof x->ql);
    memset(x->qh, 0, sizeof x->qh);
    for (int i = 0; i < QK_K; i++) {
        int high, shift;
        const int lo_at = x86_ql_byte(lane, i, &high), hi_at = x86_qh_byte(lane, i, &shift);
        const uint8_t lo = (uint8_t)(blk[lo_at] >> (4 * high)) & 15, hi = (uint8_t)(blk[hi_at] >> shift) & 3;
        q6_k_put(x, i, (uint8_t)(lo | hi << 4));
    }
}

void pkv_x8_repack(uint32_t type, const void *src, uint64_t row_bytes, int64_t k, int64_t n_rows, void *dst) {
    const uint64_t gb = pkv_x8_block_bytes(type) / ROWS;
    const int64_t nb = k / pkv_x8_block_cols(type);
    const int64_t n_groups = n_rows / ROWS;
    uint8_t u[ROWS][QK];
    uint16_t d[ROWS];
    for (int64_t g = 0; g < n_groups; g++) {
        const uint8_t *rows = (const uint8_t *)src + (uint64_t)g * ROWS * row_bytes;
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *blk = (uint8_t *)dst + pkv_x8_block_offset(type, nb, n_groups, g, b);
            if (type == PKV_TYPE_Q8_0) {
                repack_q8_0_block(rows, row_bytes, b, blk);
                continue;
            }
            if (type == PKV_TYPE_Q4_K) {
                const block_q4_K *x[ROWS];
                for (int r = 0; r < ROWS; r++) x[r] = (const block_q4_K *)(rows + r * row_bytes) + b;
                put_x8_q4_k(x, blk);
                continue;
            }
            if (type == PKV_TYPE_Q6_K) {
                const block_q6_K *x[ROWS];
                for (int r = 0; r < ROWS; r++) x[r] = (const block_q6_K *)(rows + r * row_bytes) + b;
                put_x8_q6_k(x, blk);
                continue;
            }
            for (int r = 0; r < ROWS; r++) d[r] = gguf_block_unsigned(type, rows + r * row_bytes + b * gb, u[r]);
            put_x8_block(type, (const uint8_t(*)[QK])u, d, blk);
        }
    }
}

/* Block b of group grp. */
static const uint8_t *x8_block(uint32_t type, const pkv_x8_group *grp, int64_t b) {
    return (const uint8_t *)grp->data + pkv_x8_block_offset(type, grp->nb, grp->n_groups, grp->g, b);
}

void pkv_x8_file_rows(uint32_t type, const pkv_x8_group *grp, int64_t b0, int64_t nb, void *dst, uint64_t row_bytes) {
    const uint64_t gb = pkv_x8_block_bytes(type) / ROWS;
    for (int64_t b = 0; b < nb; b++) {
        const uint8_t *blk = x8_block(type, grp, b0 + b);
        for (int r = 0; r < ROWS; r++) {
            uint8_t *out = (uint8_t *)dst + r * row_bytes + (uint64_t)b * gb;
            if (type == PKV_TYPE_Q4_K) {
                get_x8_q4_k(blk, r, (block_q4_K *)out);
                continue;
            }
            if (type == PKV_TYPE_Q6_K) {
                get_x8_q6_k(blk, r, (block_q6_K *)out);
                continue;
            }
            uint8_t u[QK];
            int offset;
            pkv_x8_unpack_block(type, grp, r, b0 + b, u, &offset);
            uint16_t h;
            memcpy(&h, blk + X8_D + 2 * r, 2);
            if (type == PKV_TYPE_Q8_0) {
                block_q8_0 *x = (block_q8_0 *)out;
                x->d = h;
                for (int e = 0; e < QK; e++) x->qs[e] = (int8_t)(u[e] - 128);
            } else if (type == PKV_TYPE_Q5_0) {
                block_q5_0 *x = (block_q5_0 *)out;
                uint32_t qh = 0;
                x->d = h;
                for (int e = 0; e < 16; e++) {
                    x->qs[e] = (uint8_t)((u[e] & 15) | (u[e + 16] & 15) << 4);
                    qh |= (uint32_t)(u[e] >> 4) << e | (uint32_t)(u[e + 16] >> 4) << (e + 16);
                }
                memcpy(x->qh, &qh, 4);
            } else {
                block_q4_0 *x = (block_q4_0 *)out;
                x->d = h;
                for (int e = 0; e < 16; e++) x->qs[e] = (uint8_t)(u[e] | u[e + 16] << 4);
            }
        }
    }
}

float pkv_x8_unpack_block(uint32_t type, const pkv_x8_group *grp, int lane, int64_t b, uint8_t u[QK], int *offset) {
    const uint8_t *blk = x8_block(type, grp, b);
    uint16_t d;
    memcpy(&d, blk + X8_D + 2 * lane, 2);
    if (offset) *offset = x8_offset(type);
    if (type == PKV_TYPE_Q8_0) {
        for (int q = 0; q < 8; q++) memcpy(&u[4 * q], blk + X8_Q8_QS + 32 * q + 4 * lane, 4);
        return pkv_f16_to_f32(d);
    }
    const uint8_t *qs = blk + (type == PKV_TYPE_Q5_0 ? X8_Q5_QS : X8_Q4_QS);
    for (int c = 0; c < 4; c++)
        for (int e = 0; e < 4; e++) {
            const uint8_t v = qs[32 * c + 4 * lane + e];
            u[4 * c + e] = v & 15;
            u[4 * (c + 4) + e] = v >> 4;
        }
    if (type == PKV_TYPE_Q5_0)
        for (int q = 0; q < 8; q++) {
            uint32_t bits;
            memcpy(&bits, blk + X8_Q5_QH + 4 * q, 4);
            for (int e = 0; e < 4; e++) u[4 * q + e] |= (uint8_t)(((bits >> (4 * lane + e)) & 1) << 4);
        }
    return pkv_f16_to_f32(d);
}

void pkv_x8_dequant_row(uint32_t type, const pkv_x8_group *grp, int lane, float *out) {
    uint8_t u[QK];
    int offset;
    if (pkv_x8_block_cols(type) == QK_K) { /* the super-block back in the file's layout, then its dequantiser */
        union {
            block_q4_K q4;
            block_q6_K q6;
        } x;
        for (int64_t b = 0; b < grp->nb; b++) {
            if (type == PKV_TYPE_Q4_K) get_x8_q4_k(x8_block(type, grp, b), lane, &x.q4);
            else get_x8_q6_k(x8_block(type, grp, b), lane, &x.q6);
            if (type == PKV_TYPE_Q4_K) pkv_dequant_q4_K_scalar(&x.q4, out + b * QK_K, QK_K);
            else pkv_dequant_q6_K_scalar(&x.q6, out + b * QK_K, QK_K);
        }
        return;
    }
    for (int64_t b = 0; b < grp->nb; b++) {
        const float d = pkv_x8_unpack_block(type, grp, lane, b, u, &offset);
        for (int e = 0; e < QK; e++) out[b * QK + e] = (float)(u[e] - offset) * d;
    }
}

/* The decode kernel's arithmetic (table.h matvec_x8), row by row: per block
 * the exact integer dot product minus offset x (sum of the activation's
 * quants), one FMA with d_w d_a into the even or odd blocks' accumulator,
 * the two added at the end. */
/* Q4_K (value = d sc_j u - dmin m_j in sub-block j): per 32-element
 * sub-block, the exact integer dot product, one FMA with (d sc_j) d_a into
 * the scales' accumulator and one of dmin m_j with -(d_a x the sum of the
 * activation's quants) into the mins' accumulator. Each product of an fp16
 * scale and a 6-bit integer is exact in float. x: the super-block's 8
 * activation blocks. */
static void q4_k_block_ref(const uint8_t *blk, int lane, const block_q8_0 *x, float acc[2]) {
    block_q4_K wb;
    get_x8_q4_k(blk, lane, &wb);
    const float d = pkv_f16_to_f32(wb.d), dmin = pkv_f16_to_f32(wb.dmin);
    uint8_t scs[8], mns[8];
    pkv_k_scales_unpack(wb.scales, scs, mns);
    for (int j = 0; j < 8; j++) {
        const uint8_t *q = wb.qs + 32 * (j / 2), sc = scs[j], mn = mns[j];
        int32_t s = 0, sum_x = 0;
        for (int e = 0; e < QK; e++) {
            const int u = j % 2 ? q[e] >> 4 : q[e] & 15;
            s += u * x[j].qs[e], sum_x += x[j].qs[e];
        }
        const float da = pkv_f16_to_f32(x[j].d);
        acc[0] = fmaf((float)s, d * (float)sc * da, acc[0]);
        acc[1] = fmaf(dmin * (float)mn, -(da * (float)sum_x), acc[1]);
    }
}

/* Q6_K (value = d sc_i (u - 32) in sub-block i of 16 elements): per half of
 * a 32-element activation block, the exact integer dot product minus 32 x
 * the sum of the half's activation quants, one FMA with (d sc_i) d_a into
 * the first or second halves' accumulator. */
static void q6_k_block_ref(const uint8_t *blk, int lane, const block_q8_0 *x, float acc[2]) {
    block_q6_K wb;
    get_x8_q6_k(blk, lane, &wb);
    const float d = pkv_f16_to_f32(wb.d);
    for (int i = 0; i < 16; i++) {
        const block_q8_0 *xa = &x[i / 2];
        int32_t s = 0, sum_x = 0;
        for (int e = 0; e < 16; e++) {
            const int8_t v = xa->qs[16 * (i % 2) + e];
            s += q6_k_get(&wb, 16 * i + e) * v, sum_x += v;
        }
        s -= 32 * sum_x;
        acc[i % 2] = fmaf((float)s, d * (float)wb.scales[i] * pkv_f16_to_f32(xa->d), acc[i % 2]);
    }
}

/* Block b's contribution to a row's two accumulators: a legacy block's
 * exact integer dot product minus offset x (sum of the activation's quants),
 * one FMA with d_w d_a into the even or odd blocks' accumulator; a K-quant
 * super-block's as q4_k_block_ref and q6_k_block_ref say. x: the row's
 * activation blocks. */
static void x8_block_ref(uint32_t type, const pkv_x8_group *grp, int lane, int64_t b, const block_q8_0 *x,
                         float acc[2]) {
    if (type == PKV_TYPE_Q4_K) {
        q4_k_block_ref(x8_block(type, grp, b), lane, x + 8 * b, acc);
        return;
    }
    if (type == PKV_TYPE_Q6_K) {
        q6_k_block_ref(x8_block(type, grp, b), lane, x + 8 * b, acc);
        return;
    }
    uint8_t u[QK];
    int offset;
    const float dw = pkv_x8_unpack_block(type, grp, lane, b, u, &offset);
    int32_t s = 0, sum_x = 0;
    for (int e = 0; e < QK; e++) s += u[e] * x[b].qs[e], sum_x += x[b].qs[e];
    s -= offset * sum_x;
    acc[b & 1] = fmaf((float)s, dw * pkv_f16_to_f32(x[b].d), acc[b & 1]);
}

void pkv_matvec_x8_ref(uint32_t type, int64_t k, const void *w, int64_t n_rows, const void *act,
                       uint64_t act_stride, int n_act, float *y, int64_t ldy) {
    const int64_t nb = k / pkv_x8_block_cols(type);
    for (int64_t m = 0; m < n_rows; m++) {
        const pkv_x8_group group = {w, nb, n_rows / ROWS, m / ROWS};
        for (int a = 0; a < n_act; a++) {
            const block_q8_0 *x = (const block_q8_0 *)((const uint8_t *)act + (uint64_t)a * act_stride);
            float acc[2] = {0.0f, 0.0f};
            for (int64_t b = 0; b < nb; b++) x8_block_ref(type, &group, (int)(m % ROWS), b, x, acc);
            y[(int64_t)a * ldy + m] = acc[0] + acc[1];
        }
    }
}
