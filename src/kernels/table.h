/*
 * The kernel table (pkv_kernels) and what its kernels take: ggml type ids and
 * exact block layouts (docs/engine.md §2), the signatures of dequantisation,
 * activation quantisation and fused dot products, the batched matmul's packs
 * and arguments, the attention blocks.
 *
 * Every kernel has a scalar reference (quant.c for the block formats, vec.c
 * for the float kernels, gemm.c for the batched matmul); AVX2 (*_avx2.c) and
 * AVX-512 (*_avx512.c) versions sit beside it and are chosen at run time
 * (pkv_kernels_get, cpu.c). A kernel table is an immutable value: callers
 * keep a pointer to it, there is no global "current" table. This header is
 * the bottom of the folder: every kernel file may include it, and it includes
 * nothing of the folder.
 */
#ifndef PKV_KERNEL_TABLE_H
#define PKV_KERNEL_TABLE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "promptkv.h"

/* ggml type ids (docs/engine.md §1.3). Retired ids are not listed. */
typedef enum {
    PKV_TYPE_F32 = 0,
    PKV_TYPE_F16 = 1,
    PKV_TYPE_Q4_0 = 2,
    PKV_TYPE_Q4_1 = 3,
    PKV_TYPE_Q5_0 = 6,
    PKV_TYPE_Q5_1 = 7,
    PKV_TYPE_Q8_0 = 8,
    PKV_TYPE_Q8_1 = 9,
    PKV_TYPE_Q2_K = 10,
    PKV_TYPE_Q3_K = 11,
    PKV_TYPE_Q4_K = 12,
    PKV_TYPE_Q5_K = 13,
    PKV_TYPE_Q6_K = 14,
    PKV_TYPE_Q8_K = 15,
    PKV_TYPE_IQ4_NL = 20,
    PKV_TYPE_IQ4_XS = 23,
    PKV_TYPE_I8 = 24,
    PKV_TYPE_I16 = 25,
    PKV_TYPE_I32 = 26,
    PKV_TYPE_I64 = 27,
    PKV_TYPE_F64 = 28,
    PKV_TYPE_BF16 = 30,
    PKV_TYPE_TQ1_0 = 34,
    PKV_TYPE_TQ2_0 = 35,
    PKV_TYPE_MXFP4 = 39,
    PKV_TYPE_COUNT = 43 /* ggml's current GGML_TYPE_COUNT: ids >= this are unknown */
} pkv_type;

enum { QK4_0 = 32, QK5_0 = 32, QK8_0 = 32, QK_K = 256, K_SCALE_SIZE = 12 };

/* Block layouts, byte for byte as ggml-common.h. fp16 fields are raw bits. */
typedef struct {
    uint16_t d;
    uint8_t qs[QK4_0 / 2];
} block_q4_0;
typedef struct {
    uint16_t d;
    uint16_t m;
    uint8_t qs[QK4_0 / 2];
} block_q4_1;
typedef struct {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[QK5_0 / 2];
} block_q5_0;
typedef struct {
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[QK5_0 / 2];
} block_q5_1;
typedef struct {
    uint16_t d;
    int8_t qs[QK8_0];
} block_q8_0;
typedef struct {
    uint16_t d;
    uint16_t s; /* d * sum(qs) */
    int8_t qs[QK8_0];
} block_q8_1;
typedef struct {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qs[QK_K / 2];
} block_q4_K;
typedef struct {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[K_SCALE_SIZE];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
} block_q5_K;
/* The 12 bytes of Q4_K/Q5_K sub-block scales and mins, 6 bits each
 * (docs/engine.md §2.2): sub-blocks 0..3 in the low 6 bits of bytes 0..3
 * (scales) and 4..7 (mins); sub-blocks 4..7 in the nibbles of bytes 8..11
 * with their top 2 bits in the top bits of bytes 0..7. */
static inline void pkv_k_scales_unpack(const uint8_t s[K_SCALE_SIZE], uint8_t sc[8], uint8_t m[8]) {
    for (int j = 0; j < 4; j++) {
        sc[j] = s[j] & 63;
        m[j] = s[j + 4] & 63;
    }
    for (int j = 4; j < 8; j++) {
        sc[j] = (uint8_t)((s[j + 4] & 15) | ((s[j - 4] >> 6) << 4));
        m[j] = (uint8_t)((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}
static inline void pkv_k_scales_pack(const uint8_t sc[8], const uint8_t m[8], uint8_t s[K_SCALE_SIZE]) {
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = (uint8_t)((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        s[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
    }
}
typedef struct {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    uint16_t d;
} block_q6_K;
typedef struct {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
} block_q8_K;

_Static_assert(sizeof(block_q4_0) == 18, "q4_0 layout");
_Static_assert(sizeof(block_q4_1) == 20, "q4_1 layout");
_Static_assert(sizeof(block_q5_0) == 22, "q5_0 layout");
_Static_assert(sizeof(block_q5_1) == 24, "q5_1 layout");
_Static_assert(sizeof(block_q8_0) == 34, "q8_0 layout");
_Static_assert(sizeof(block_q8_1) == 36, "q8_1 layout");
_Static_assert(sizeof(block_q4_K) == 144, "q4_K layout");
_Static_assert(sizeof(block_q5_K) == 176, "q5_K layout");
_Static_assert(sizeof(block_q6_K) == 210, "q6_K layout");
_Static_assert(sizeof(block_q8_K) == 292, "q8_K layout");

typedef void (*pkv_dequant_fn)(const void *src, float *dst, int64_t n);
typedef void (*pkv_quant_fn)(const float *src, void *dst, int64_t n);
/* Dot product of one weight row (n elements in the weight's type) with one
 * activation row already converted to that weight type's act_type. */
typedef float (*pkv_vec_dot_fn)(int64_t n, const void *weight_row, const void *act_row);
/* The dot products of one weight row with n_rows activation rows (act_stride
 * bytes apart) into out[r * out_stride], each with the bits vec_dot gives
 * for that row alone, the weight's blocks unpacked once for all rows (the
 * batched decode step: docs/design.md "Batched decode"). */
typedef void (*pkv_vec_dot_rows_fn)(int64_t n, const void *weight_row, const void *act, uint64_t act_stride,
                                    int n_rows, float *out, int64_t out_stride);
/* The decode matrix-vector product on weights interleaved by 8 rows
 * (kernels/repack.h, docs/engine.md §2.5): n_rows rows of the interleaved
 * matrix at w (from a run's first row: a whole number of runs, or to the
 * matrix's end), each dotted with n_act Q8_0 activation rows
 * (act_stride bytes apart) into y[a * ldy + row]. A row's result has the
 * same bits whatever n_act and level (pkv_matvec_x8_ref's), so a batched
 * step equals single steps. A table with this kernel for a type also has a gemm for it
 * that reads interleaved weights (pkv_gemm_args.x8); the model interleaves a
 * weight only then. */
typedef void (*pkv_matvec_x8_fn)(int64_t k, const void *w, int64_t n_rows, const void *act, uint64_t act_stride,
                                 int n_act, const void *prep, float *y, int64_t ldy);
/* What matvec_x8 works out from the activation rows alone before it reads a
 * weight — per block the scale and the sums of the quants, and with AVX-512
 * the rows paired — into prep (pkv_x8_prep_bytes(k, n_act) bytes), for a
 * weight of this type. A matmul cut into many row ranges, or several weights
 * of one type on the same rows, prepare once and pass prep to every call;
 * matvec_x8 with prep NULL prepares for itself. The results do not depend on
 * which. */
typedef void (*pkv_matvec_x8_prepare_fn)(uint32_t type, int64_t k, const void *act, uint64_t act_stride, int n_act,
                                         void *prep);

/* ------------------------------------------------------------------ batched matmul (prefill)
 *
 * Prefill multiplies each weight matrix by many activation rows. The batched
 * kernels compute PKV_GEMM_ROWS weight rows x PKV_GEMM_TOK tokens at a time:
 * the activations are quantised once and packed token-interleaved, so that
 * one vector holds the same 4 consecutive quants of 16 tokens, and a weight
 * row's 4 quants are broadcast against it (one vpdpbusd = 4 multiply-adds
 * for each of 16 tokens). Each weight row is unpacked once per call into
 * unsigned bytes and reused for every token group. Each output element is
 * accumulated in its own vector lane in a fixed order (block after block,
 * one FMA per block), so the result does not depend on how the output is
 * tiled or on the thread count, and the scalar reference (gemm.c) computes
 * bit-identical values.
 *
 * Packed layouts, for one group of 16 tokens, K-block after K-block (missing
 * tokens of the last group are zero):
 *   PKV_PACK_Q8_32  (Q4_0, Q5_0, Q8_0 weights), 640 bytes per 32 elements:
 *       int8  qs[8][16][4]   quants 4k..4k+3 of token t at [k][t] (Q8_0 rules)
 *       float d[16]          the token's Q8_0 scale (fp16 value)
 *       int32 sum[16]        the sum of the token's 32 quants
 *   PKV_PACK_Q8_256 (Q4_K, Q5_K, Q6_K weights), 4672 bytes per 256 elements:
 *       int8  qs[64][16][4]  (Q8_K rules)
 *       float d[16]
 *       int16 bsums[8][16][2]  Q8_K bsums 2i and 2i+1 of token t at [i][t]
 *   PKV_PACK_F32    (F32, F16 weights), 64 bytes per element: float x[16]
 */
enum {
    PKV_GEMM_TOK = 16, /* tokens per packed group */
    PKV_GEMM_ROWS = 8, /* weight rows per kernel call */
    PKV_GEMM_KC_Q = 1024, /* largest K chunk of one call, quantised packs (elements) */
    PKV_GEMM_KC_F = 256,  /* ... F32 pack */
};

typedef enum { PKV_PACK_NONE = 0, PKV_PACK_Q8_32, PKV_PACK_Q8_256, PKV_PACK_F32, PKV_PACK_COUNT } pkv_pack_kind;

/* The pack a weight type's batched kernel reads; PKV_PACK_NONE without one. */
pkv_pack_kind pkv_pack_kind_of(uint32_t weight_type);
/* Elements per packed block, and bytes of one token group's K elements. */
int pkv_pack_block_elems(pkv_pack_kind kind);
uint64_t pkv_pack_group_bytes(pkv_pack_kind kind, int64_t k);
/* Largest K chunk (elements) one kernel call may take. */
int64_t pkv_pack_max_chunk(pkv_pack_kind kind);

/* One group of 8 rows of a matrix interleaved by 8 rows (kernels/repack.h):
 * the matrix's data (from a run's first row), its blocks per row and groups,
 * and the group's index. */
typedef struct {
    const void *data;
    int64_t nb, n_groups, g;
} pkv_x8_group;

typedef struct {
    const void *w;       /* first of n_rows weight rows in the file's layout (unless x8) */
    pkv_x8_group x8;     /* or, where x8.data is set, their group of weights interleaved by 8
                          * rows (kernels/repack.h); n_rows is 8 */
    uint64_t row_bytes;
    int n_rows;          /* 1..PKV_GEMM_ROWS; acc rows >= n_rows are left undefined */
    int64_t k0, k1;      /* K range (elements, multiples of the pack block, k1-k0 <= max chunk) */
    const void *act;     /* packed group 0, at element 0 of K */
    uint64_t group_bytes;
    int n_groups;
    float *acc;          /* [n_groups][PKV_GEMM_ROWS][PKV_GEMM_TOK], accumulated into */
    bool init;           /* start acc from zero instead of its contents */
    /* The last K chunk writes its results to y instead of acc: token t of
     * the call (group t / 16) and row r at y[t * ldy + r], for t < y_tokens
     * and r < n_rows. NULL: results stay in acc. */
    float *y;
    int64_t ldy;
    int y_tokens;
} pkv_gemm_args;

typedef void (*pkv_gemm_fn)(const pkv_gemm_args *a);

enum {
    PKV_ATT_BK = 16,        /* keys per attention block (att_* kernels below) */
    PKV_ATT_F16_MAX_Q = 8, /* query rows att_block_f16 takes at once */
};

/* The row types of the KV cache that att_stage reads: F32, F16 and the
 * 32-element blocks Q8_0 and Q4_0 (d a multiple of 32 for those). Bytes of
 * one row of d elements; rows of a head follow each other with no gap. */
static inline size_t pkv_att_row_bytes(pkv_type t, int d) {
    switch (t) {
    case PKV_TYPE_F32: return (size_t)d * 4;
    case PKV_TYPE_Q8_0: return (size_t)d / QK8_0 * sizeof(block_q8_0);
    case PKV_TYPE_Q4_0: return (size_t)d / QK4_0 * sizeof(block_q4_0);
    default: return (size_t)d * 2; /* F16 */
    }
}

typedef struct pkv_kernels {
    pkv_simd level;
    /* indexed by type id; NULL where the type has no such kernel */
    pkv_dequant_fn dequant[PKV_TYPE_COUNT];
    pkv_quant_fn quantize[PKV_TYPE_COUNT]; /* for activation types: F32 (copy), Q8_0, Q8_1, Q8_K */
    pkv_vec_dot_fn vec_dot[PKV_TYPE_COUNT];
    /* NULL where the type has none: vec_dot row by row does the same */
    pkv_vec_dot_rows_fn vec_dot_rows[PKV_TYPE_COUNT];
    /* NULL where the type is never interleaved at this level */
    pkv_matvec_x8_fn matvec_x8[PKV_TYPE_COUNT];
    pkv_matvec_x8_prepare_fn matvec_x8_prepare; /* NULL where matvec_x8 is */

    /* float helpers used by attention, norms and the KV cache */
    float (*dot_f32)(int64_t n, const float *a, const float *b);
    void (*axpy_f32)(int64_t n, float alpha, const float *x, float *y); /* y += alpha*x */
    float (*dot_f16_f32)(int64_t n, const uint16_t *a, const float *b);
    void (*axpy_f16)(int64_t n, float alpha, const uint16_t *x, float *y);
    void (*f32_to_f16)(const float *src, uint16_t *dst, int64_t n); /* round to nearest even */
    void (*f16_to_f32)(const uint16_t *src, float *dst, int64_t n);
    /* y = e^x (Cephes' expf polynomial, about 2 ulp; x clamped to
     * [-87.34, 88.72], so no overflow and no subnormal results); y may alias x.
     * Here and below, the SIMD kernels use fused multiply-adds and compute
     * the bits of the scalar references (pkv_*_ref, levels.h); the scalar
     * table's own versions use plain multiply-adds (no FMA unit there). */
    void (*exp_f32)(int64_t n, const float *x, float *y);
    /* gate = act(gate) * up: gelu_tanh(x) = 0.5x(1 + tanh(u)) = x / (1 + e^(-2u)),
     * u = sqrt(2/pi)(x + 0.044715x^3) (HF gelu_pytorch_tanh); silu(x) = x / (1 + e^-x) */
    void (*gelu_tanh_mul)(int64_t n, float *gate, const float *up);
    void (*silu_mul)(int64_t n, float *gate, const float *up);

    /* Attention blocks of PKV_ATT_BK keys (attention.c), each output element
     * accumulated in a fixed order:
     * att_stage: n <= PKV_ATT_BK cache rows of keys (dk, type tk) and
     *   values (dv, type tv), each F32, F16, Q8_0 or Q4_0 (pkv_att_row_bytes),
     *   into kt[dk][PKV_ATT_BK] (transposed) and vt[PKV_ATT_BK][dv] as f32,
     *   each element the value its type's dequantiser gives, rows >= n zero;
     * att_scores: s[i][j] = sum_d q[i][d] kt[d][j] for nq query rows, d in order;
     * att_accum: o[i][e] = o[i][e] alpha[i] + sum_j p[i][j] vt[j][e], j in order. */
    void (*att_stage)(const void *k, const void *v, int n, int dk, int dv, pkv_type tk, pkv_type tv, float *kt,
                      float *vt);
    void (*att_scores)(int nq, int dk, const float *q, const float *kt, float *s);
    void (*att_accum)(int nq, int dv, const float *p, const float *alpha, const float *vt, float *o);
    /* att_block: one staged block that every one of the nq query rows sees
     * whole, without soft-cap — the scores, the online-softmax step
     * (attention.c: v = s scale, m' = max(m, v), p = e^(v - m'),
     * alpha = e^(m - m'), l = l alpha + sum p in block_sum's order) and the
     * accumulation, with the bits of att_scores, exp_f32 and att_accum run in
     * turn (pkv_att_block_ref), but the scores and weights kept in registers
     * between them. NULL: attention.c runs the steps one by one. */
    void (*att_block)(int nq, int dk, int dv, const float *q, const float *kt, const float *vt, float scale, float *m,
                      float *l, float *o);
    /* att_block_f16: att_stage then att_block, bit for bit, block after
     * block, on n_blocks whole blocks of PKV_ATT_BK f16 cache rows read where
     * they lie (keys kh[j * dk + d], values vh[j * dv + e], j over all the
     * blocks' rows), for 1..PKV_ATT_F16_MAX_Q query rows, dk % 16 == 0 and
     * dv % 16 == 0: a decode step's few query rows per KV head paid more for
     * staging a block than for attending to it (docs/performance.md, "Decode
     * attention"). NULL: attention.c stages. */
    void (*att_block_f16)(int nq, int dk, int dv, const float *q, const uint16_t *kh, const uint16_t *vh,
                          int n_blocks, float scale, float *m, float *l, float *o);

    /* batched matmul kernels by weight type (NULL: none, as in the scalar
     * table, whose references need FMA; see above) */
    pkv_gemm_fn gemm[PKV_TYPE_COUNT];
} pkv_kernels;

/* Packs n_tok (<= PKV_GEMM_TOK) rows of k floats, x_stride apart, into one
 * token group at dst (pkv_pack_group_bytes), quantising with the table's
 * activation quantiser. tmp: one row of the pack's activation type. */
void pkv_gemm_pack(const pkv_kernels *kern, pkv_pack_kind kind, const float *x, int64_t x_stride, int n_tok,
                   int64_t k, void *dst, void *tmp);

/* The kernel table for a level. PKV_SIMD_AUTO resolves to the best level the
 * CPU supports; a level the CPU lacks falls back to the best it has below it.
 * Never NULL. */
const pkv_kernels *pkv_kernels_get(pkv_simd level);

#endif
