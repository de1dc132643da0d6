/*
 * Eight-row interleaved weights (repack.h): the repacking done at load, the
 * row extraction the embedding lookup and the batched matmul use, and the
 * scalar reference of the decode kernel that repack_avx512.c reproduces bit
 * for bit.
 */
#include "kernels/repack.h"

#include <math.h>
#include <string.h>

#include "kernels/f16.h"
#include "kernels/table.h"

enum { ROWS = PKV_X8_ROWS, QK = 32 };

/* Offsets inside an interleaved block (repack.h). */
enum {
    X8_D = 0,
    X8_Q5_QH = 2 * ROWS,             /* Q5_0: 8 quads x 4 bytes of fifth bits */
    X8_Q5_QS = X8_Q5_QH + ROWS * 4,  /* Q5_0: 4 x 32 bytes of nibbles */
    X8_Q4_QS = 2 * ROWS,             /* Q4_0 */
    X8_Q8_QS = 2 * ROWS,             /* Q8_0: 8 x 32 bytes */
};

bool pkv_x8_supported(uint32_t type, int64_t k, int64_t n_rows) {
    return pkv_x8_block_bytes(type) && k > 0 && k % QK == 0 && n_rows > 0 && n_rows % ROWS == 0;
}

uint64_t pkv_x8_block_bytes(uint32_t type) {
    switch (type) {
    case PKV_TYPE_Q4_0: return ROWS * sizeof(block_q4_0);
    case PKV_TYPE_Q5_0: return ROWS * sizeof(block_q5_0);
    case PKV_TYPE_Q8_0: return ROWS * sizeof(block_q8_0);
    default: return 0;
    }
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

void pkv_x8_repack(uint32_t type, const void *src, uint64_t row_bytes, int64_t k, int64_t n_rows, void *dst) {
    const uint64_t bb = pkv_x8_block_bytes(type), gb = bb / ROWS;
    const int64_t nb = k / QK;
    const int64_t n_groups = n_rows / ROWS;
    uint8_t u[ROWS][QK];
    uint16_t d[ROWS];
    for (int64_t g = 0; g < n_groups; g++) {
        const uint8_t *rows = (const uint8_t *)src + (uint64_t)g * ROWS * row_bytes;
        for (int64_t b = 0; b < nb; b++) {
            uint8_t *blk = (uint8_t *)dst + pkv_x8_block_offset(bb, nb, n_groups, g, b);
            if (type == PKV_TYPE_Q8_0) {
                repack_q8_0_block(rows, row_bytes, b, blk);
                continue;
            }
            for (int r = 0; r < ROWS; r++) d[r] = gguf_block_unsigned(type, rows + r * row_bytes + b * gb, u[r]);
            put_x8_block(type, (const uint8_t(*)[QK])u, d, blk);
        }
    }
}

/* Block b of group grp. */
static const uint8_t *x8_block(uint32_t type, const pkv_x8_group *grp, int64_t b) {
    return (const uint8_t *)grp->data +
           pkv_x8_block_offset(pkv_x8_block_bytes(type), grp->nb, grp->n_groups, grp->g, b);
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
    for (int64_t b = 0; b < grp->nb; b++) {
        const float d = pkv_x8_unpack_block(type, grp, lane, b, u, &offset);
        for (int e = 0; e < QK; e++) out[b * QK + e] = (float)(u[e] - offset) * d;
    }
}

/* The decode kernel's arithmetic (table.h matvec_x8), row by row: per block
 * the exact integer dot product minus offset x (sum of the activation's
 * quants), one FMA with d_w d_a into the even or odd blocks' accumulator,
 * the two added at the end. */
void pkv_matvec_x8_ref(uint32_t type, int64_t k, const void *w, int64_t n_rows, const void *act,
                       uint64_t act_stride, int n_act, float *y, int64_t ldy) {
    const int64_t nb = k / QK;
    uint8_t u[QK];
    int offset;
    for (int64_t m = 0; m < n_rows; m++) {
        const pkv_x8_group group = {w, nb, n_rows / ROWS, m / ROWS};
        for (int a = 0; a < n_act; a++) {
            const block_q8_0 *x = (const block_q8_0 *)((const uint8_t *)act + (uint64_t)a * act_stride);
            float acc[2] = {0.0f, 0.0f};
            for (int64_t b = 0; b < nb; b++) {
                const float dw = pkv_x8_unpack_block(type, &group, (int)(m % ROWS), b, u, &offset);
                int32_t s = 0, sum_x = 0;
                for (int e = 0; e < QK; e++) s += u[e] * x[b].qs[e], sum_x += x[b].qs[e];
                s -= offset * sum_x;
                acc[b & 1] = fmaf((float)s, dw * pkv_f16_to_f32(x[b].d), acc[b & 1]);
            }
            y[(int64_t)a * ldy + m] = acc[0] + acc[1];
        }
    }
}
