/*
 * Weights repacked at load for the decode step: the legacy 32-element types
 * (Q4_0, Q5_0, Q8_0), Q4_K and Q6_K with eight rows interleaved
 * (docs/engine.md §2.5).
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
 * multiple of 8), one interleaved block after another, each block the 8
 * rows' blocks of the same columns, exactly 8 x the GGUF block size.
 * Legacy types, a block of 32 columns:
 *   uint16 d[8]             the rows' fp16 scales
 *   Q5_0: uint8 qh[8][4]    fifth bits of quad q: bit 4r+e of qh[q] is row r's
 *                           element 4q+e
 *   Q4_0/Q5_0: uint8 qs[4][32]  byte 4r+e of qs[c]: row r's element 4c+e in
 *                           its low nibble, element 4(c+4)+e in its high one
 *   Q8_0: uint8 qs[8][32]   byte 4r+e of qs[q]: row r's element 4q+e + 128
 * Q4_K, a block of 256 columns (a super-block; value = d sc_j u - dmin m_j
 * in sub-block j of 32 elements, docs/engine.md §2.2):
 *   uint16 d[8], dmin[8]    the rows' fp16 super-block scales
 *   uint8 sm[8][8]          byte 8j+r: row r's 6-bit sc_j (low 4 bits) and
 *                           m_j (low 4 bits) in the low and high nibble
 *   uint8 smh[4][8]         byte 8i+r: the top 2 bits of row r's sc_i, m_i,
 *                           sc_(i+4), m_(i+4), from bit 0 up
 *   uint8 qs[4][8][32]      pair p, vector c, byte 4r+e: row r's element
 *                           64p+4c+e (sub-block 2p) in the low nibble,
 *                           64p+32+4c+e (sub-block 2p+1) in the high one
 * Q6_K, a block of 256 columns (value = d sc_i (u - 32) in sub-block i of
 * 16 elements):
 *   uint16 d[8]             the rows' fp16 scales
 *   int8 sc[16][8]          byte 8i+r: row r's scale of sub-block i
 *   4 pairs p of 32-element blocks, each:
 *     uint8 ql[8][32]       the low 4 bits of the pair's quants, as Q4_K's
 *                           qs[p]
 *     uint8 qh[2][2][32]    block h of the pair (j = 2p+h), vector v, byte
 *                           4r+e: bits 2k, 2k+1 hold the top 2 bits of row
 *                           r's element 32j + 4(4v+k) + e
 *   (each pair's top bits right after its nibbles: read as one stream, the
 *   hardware prefetchers keep up; with all top bits after all nibbles, two
 *   interleaved streams, a matrix streamed from memory at 8 GB/s instead of
 *   29, build/bench-dot q6_K 1536 65536 --x8)
 * so a 32-element block's 8 vectors have the legacy block's form (vector c
 * holds its elements 4c..4c+3 of the 8 rows) for either type.
 * Every quant is stored unsigned (value = u - offset, offset 8, 16, 128 or
 * 32, 0 for Q4_K), the form vpdpbusd multiplies and the batched matmul
 * stages (gemm.c).
 *
 * Where the blocks lie: the groups are taken in runs of PKV_X8_RUN_GROUPS
 * (64 rows; the matrix's last run may hold fewer groups), and a run's blocks
 * a span at a time: span after span, each span holding the run's groups'
 * blocks of those columns, group after group. Rows of up to
 * PKV_X8_WHOLE_COLS columns are one span (each group's blocks together);
 * longer rows are cut into spans of PKV_X8_SPAN_COLS (the last may be
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
    PKV_X8_WHOLE_COLS = 1024,
    PKV_X8_SPAN_COLS = 768,
};

/* Columns of one interleaved block: 256 for the K-quants, 32 for the legacy
 * types. */
static inline int64_t pkv_x8_block_cols(uint32_t type) {
    return type == PKV_TYPE_Q4_K || type == PKV_TYPE_Q6_K ? QK_K : 32;
}

/* Bytes of one interleaved block (8 rows of pkv_x8_block_cols columns); 0
 * for the types that are never interleaved. */
static inline uint64_t pkv_x8_block_bytes(uint32_t type) {
    switch (type) {
    case PKV_TYPE_Q4_0: return PKV_X8_ROWS * sizeof(block_q4_0);
    case PKV_TYPE_Q5_0: return PKV_X8_ROWS * sizeof(block_q5_0);
    case PKV_TYPE_Q8_0: return PKV_X8_ROWS * sizeof(block_q8_0);
    case PKV_TYPE_Q4_K: return PKV_X8_ROWS * sizeof(block_q4_K);
    case PKV_TYPE_Q6_K: return PKV_X8_ROWS * sizeof(block_q6_K);
    default: return 0;
    }
}

/* Blocks per span for rows of nb blocks of this type. */
static inline int64_t pkv_x8_span_blocks(uint32_t type, int64_t nb) {
    const int64_t cols = pkv_x8_block_cols(type);
    return nb * cols <= PKV_X8_WHOLE_COLS ? nb : PKV_X8_SPAN_COLS / cols;
}

/* Byte offset of block b of group g in a matrix of n_groups groups of nb
 * blocks of this type (the layout above). */
static inline uint64_t pkv_x8_block_offset(uint32_t type, int64_t nb, int64_t n_groups, int64_t g, int64_t b) {
    const int64_t span = pkv_x8_span_blocks(type, nb), g0 = g - g % PKV_X8_RUN_GROUPS, c0 = b - b % span;
    const int64_t gn = n_groups - g0 < PKV_X8_RUN_GROUPS ? n_groups - g0 : PKV_X8_RUN_GROUPS;
    const int64_t cn = nb - c0 < span ? nb - c0 : span;
    return pkv_x8_block_bytes(type) * (uint64_t)(g0 * nb + c0 * gn + (g - g0) * cn + (b - c0));
}

/* Group g of a matrix of k columns and n_rows rows of this type at data. */
static inline pkv_x8_group pkv_x8_group_of(uint32_t type, const void *data, int64_t k, int64_t n_rows, int64_t g) {
    return (pkv_x8_group){data, k / pkv_x8_block_cols(type), n_rows / PKV_X8_ROWS, g};
}

/* Whether a weight of this type and shape can be interleaved. */
bool pkv_x8_supported(uint32_t type, int64_t k, int64_t n_rows);

/* Interleaves n_rows (a multiple of 8) GGUF rows of k elements, row_bytes
 * apart, into dst (the same number of bytes). A matrix may be interleaved a
 * slice at a time where every slice but the last is a whole number of runs. */
void pkv_x8_repack(uint32_t type, const void *src, uint64_t row_bytes, int64_t k, int64_t n_rows, void *dst);

/* Row `lane` (0..7) of group grp, a legacy type: block b's unsigned quants
 * (in element order, value = u - offset) and its scale; the offset is
 * returned through *offset unless offset is NULL. */
float pkv_x8_unpack_block(uint32_t type, const pkv_x8_group *grp, int lane, int64_t b, uint8_t u[32], int *offset);

/* Row `lane` of group grp dequantised into out[k]. */
void pkv_x8_dequant_row(uint32_t type, const pkv_x8_group *grp, int lane, float *out);

/* Blocks b0..b0+nb-1 of group grp's 8 rows back in the file's layout: row r
 * at dst + r * row_bytes (the batched matmul's K-quant kernels read those). */
void pkv_x8_file_rows(uint32_t type, const pkv_x8_group *grp, int64_t b0, int64_t nb, void *dst, uint64_t row_bytes);

/* Bytes of the decode kernel's prepared activations (table.h
 * matvec_x8_prepare) for n_act rows of k elements: PKV_X8_PREP_BYTES per
 * row and 32-element block, in tiles of PKV_X8_ACT_TILE rows (the rows the
 * kernel takes together). */
enum { PKV_X8_ACT_TILE = 8, PKV_X8_PREP_BYTES = 64 };
static inline size_t pkv_x8_prep_bytes(int64_t k, int n_act) {
    const size_t tiles = (size_t)(n_act + PKV_X8_ACT_TILE - 1) / PKV_X8_ACT_TILE;
    return tiles * PKV_X8_ACT_TILE * (size_t)(k / 32) * PKV_X8_PREP_BYTES;
}

/* The scalar reference of the decode kernel (table.h matvec_x8), whose bits
 * the vector kernels reproduce. */
void pkv_matvec_x8_ref(uint32_t type, int64_t k, const void *w, int64_t n_rows, const void *act,
                       uint64_t act_stride, int n_act, float *y, int64_t ldy);

#endif
