/*
 * Weight types: ggml type ids, exact block layouts (engine-notes.md §2),
 * dequantisation, activation quantisation and fused dot products.
 *
 * Every kernel has a scalar reference (quant.c); AVX2 (quant_avx2.c) and
 * AVX-512 (quant_avx512.c) versions sit beside it and are chosen at run time
 * (pkv_kernels_get). A kernel table is an immutable value: callers keep a
 * pointer to it, there is no global "current" table.
 */
#ifndef PKV_QUANT_H
#define PKV_QUANT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "promptkv.h"

/* ggml type ids (engine-notes.md §1.3). Retired ids are not listed. */
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

typedef struct {
    const char *name;  /* "Q4_K" */
    int block_elems;   /* elements per block (1 for plain types) */
    int block_bytes;   /* bytes per block */
    bool computable;   /* the engine can run matmuls with it as a weight */
    pkv_type act_type; /* format activations are converted to for vec_dot */
} pkv_type_info;

/* Info for a type id, or NULL for an unknown/retired id. Known-but-not-
 * computable types (e.g. IQ4_XS) return info with computable == false so
 * messages can name them. */
const pkv_type_info *pkv_type_get(uint32_t type);

/* Bytes of a row of n elements; 0 if n is not a multiple of the block size
 * or the type is unknown. */
uint64_t pkv_row_bytes(uint32_t type, int64_t n);

typedef void (*pkv_dequant_fn)(const void *src, float *dst, int64_t n);
typedef void (*pkv_quant_fn)(const float *src, void *dst, int64_t n);
/* Dot product of one weight row (n elements in the weight's type) with one
 * activation row already converted to that weight type's act_type. */
typedef float (*pkv_vec_dot_fn)(int64_t n, const void *weight_row, const void *act_row);

typedef struct pkv_kernels {
    pkv_simd level;
    /* indexed by type id; NULL where the type has no such kernel */
    pkv_dequant_fn dequant[PKV_TYPE_COUNT];
    pkv_quant_fn quantize[PKV_TYPE_COUNT]; /* for activation types: F32 (copy), Q8_0, Q8_1, Q8_K */
    pkv_vec_dot_fn vec_dot[PKV_TYPE_COUNT];

    /* float helpers used by attention, norms and the KV cache */
    float (*dot_f32)(int64_t n, const float *a, const float *b);
    void (*axpy_f32)(int64_t n, float alpha, const float *x, float *y); /* y += alpha*x */
    float (*dot_f16_f32)(int64_t n, const uint16_t *a, const float *b);
    void (*axpy_f16)(int64_t n, float alpha, const uint16_t *x, float *y);
    void (*f32_to_f16)(const float *src, uint16_t *dst, int64_t n); /* round to nearest even */
    void (*f16_to_f32)(const uint16_t *src, float *dst, int64_t n);
} pkv_kernels;

/* The kernel table for a level. PKV_SIMD_AUTO resolves to the best level the
 * CPU supports; a level the CPU lacks falls back to the best it has below it.
 * Never NULL. */
const pkv_kernels *pkv_kernels_get(pkv_simd level);

/* Reference quantisers used by tests and by tools that write GGUF files
 * (promptkv synth): round-to-nearest like ggml's quantize_row_*_ref. */
void pkv_quantize_row_ref(pkv_type type, const float *src, void *dst, int64_t n);

#endif
