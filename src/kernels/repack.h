/*
 * Weights repacked at load for the decode step: the legacy 32-element types
 * (Q4_0, Q5_0, Q8_0) with eight rows interleaved (docs/engine.md §2.5).
 *
 * A decode step is a matrix-vector product bound by memory bandwidth, but on
 * one core the GGUF block layout makes it bound by arithmetic: each row's
 * block needs its own unpacking, sign transfer, scale conversion and
 * horizontal reduction (docs/performance.md "Where a target is missed").
 * With eight rows interleaved, one 32-byte vector holds the same four quants
 * of eight rows, so one vpdpbusd against four broadcast activation quants
 * advances eight rows at once, one instruction converts the eight rows'
 * scales, and each row's sum ends in its own vector lane (no reduction).
 *
 * Layout of a group of 8 rows (rows 8i..8i+7 of a matrix whose row count is a
 * multiple of 8), K/32 blocks after each other, each block the 8 rows' blocks
 * of the same 32 columns, exactly 8 x the GGUF block size:
 *   uint16 d[8]             the rows' fp16 scales
 *   Q5_0: uint8 qh[8][4]    fifth bits of quad q: bit 4r+e of qh[q] is row r's
 *                           element 4q+e
 *   Q4_0/Q5_0: uint8 qs[4][32]  byte 4r+e of qs[c]: row r's element 4c+e in
 *                           its low nibble, element 4(c+4)+e in its high one
 *   Q8_0: uint8 qs[8][32]   byte 4r+e of qs[q]: row r's element 4q+e + 128
 * Every quant is stored unsigned (value = u - offset, offset 8, 16 or 128),
 * the form vpdpbusd multiplies and the batched matmul stages (gemm.c).
 *
 * Where the blocks lie: the groups are taken in runs of PKV_X8_RUN_GROUPS
 * (64 rows; the matrix's last run may hold fewer groups), and a run's blocks
 * a span at a time: span after span, each span holding the run's groups'
 * blocks of those columns, group after group. Rows of up to
 * PKV_X8_WHOLE_BLOCKS blocks are one span (each group's blocks together);
 * longer rows are cut into spans of PKV_X8_SPAN_BLOCKS (the last may be
 * shorter). The decode kernel takes a span across a run's groups while the
 * activation rows' blocks of that span stay in L1, so it reads the weights
 * in the order they lie, one sequential stream (docs/engine.md §2.5). A
 * range of rows that starts at a run and is a whole number of runs, or
 * reaches the matrix's end, is itself such a matrix.
 */
#ifndef PKV_KERNEL_REPACK_H
#define PKV_KERNEL_REPACK_H

#include <stdbool.h>
#include <stdint.h>

#include "kernels/table.h"

enum {
    PKV_X8_ROWS = 8,
    PKV_X8_RUN_GROUPS = 8,
    PKV_X8_RUN_ROWS = PKV_X8_RUN_GROUPS * PKV_X8_ROWS,
    PKV_X8_WHOLE_BLOCKS = 32,
    PKV_X8_SPAN_BLOCKS = 24,
};

/* Blocks per span for rows of nb blocks. */
static inline int64_t pkv_x8_span_blocks(int64_t nb) { return nb <= PKV_X8_WHOLE_BLOCKS ? nb : PKV_X8_SPAN_BLOCKS; }

/* Block b of group g, in blocks of block_bytes from a matrix of n_groups
 * groups of nb blocks (the layout above). */
static inline uint64_t pkv_x8_block_offset(uint64_t block_bytes, int64_t nb, int64_t n_groups, int64_t g, int64_t b) {
    const int64_t span = pkv_x8_span_blocks(nb), g0 = g - g % PKV_X8_RUN_GROUPS, c0 = b - b % span;
    const int64_t gn = n_groups - g0 < PKV_X8_RUN_GROUPS ? n_groups - g0 : PKV_X8_RUN_GROUPS;
    const int64_t cn = nb - c0 < span ? nb - c0 : span;
    return block_bytes * (uint64_t)(g0 * nb + c0 * gn + (g - g0) * cn + (b - c0));
}

/* Whether a weight of this type and shape can be interleaved. */
bool pkv_x8_supported(uint32_t type, int64_t k, int64_t n_rows);

/* Bytes of one interleaved block (8 rows x 32 columns); 0 for other types. */
uint64_t pkv_x8_block_bytes(uint32_t type);

/* Interleaves n_rows (a multiple of 8) GGUF rows of k elements, row_bytes
 * apart, into dst (the same number of bytes). A matrix may be interleaved a
 * slice at a time where every slice but the last is a whole number of runs. */
void pkv_x8_repack(uint32_t type, const void *src, uint64_t row_bytes, int64_t k, int64_t n_rows, void *dst);

/* Row `lane` (0..7) of group grp: block b's unsigned quants (in element
 * order, value = u - offset) and its scale; the offset is returned through
 * *offset unless offset is NULL. */
float pkv_x8_unpack_block(uint32_t type, const pkv_x8_group *grp, int lane, int64_t b, uint8_t u[32], int *offset);

/* Row `lane` of group grp dequantised into out[32 nb]. */
void pkv_x8_dequant_row(uint32_t type, const pkv_x8_group *grp, int lane, float *out);

/* The scalar reference of the decode kernel (table.h matvec_x8), whose bits
 * the vector kernels reproduce. */
void pkv_matvec_x8_ref(uint32_t type, int64_t k, const void *w, int64_t n_rows, const void *act,
                       uint64_t act_stride, int n_act, float *y, int64_t ldy);

#endif
