/*
 * The kernels behind the pkv_kernels tables (table.h), one set per SIMD
 * level. quant.c (block formats), vec.c (float kernels) and gemm.c (batched
 * matmul) hold the scalar references, their _avx2.c and _avx512.c siblings
 * the vector versions; cpu.c detects the CPU and assembles the immutable
 * tables. Nothing outside those files should call these directly: go
 * through pkv_kernels_get so a kernel is only reached on a CPU that has it.
 *
 * Contract shared by every kernel: n is a multiple of the type's block size
 * (table.h), pointers need no alignment beyond their element type, and
 * dequant/quantize never read or write past n elements.
 */
#ifndef PKV_KERNEL_LEVELS_H
#define PKV_KERNEL_LEVELS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kernels/table.h"

/* The weight and activation types with real kernels, as a list macro so each
 * level declares the same names: X(suffix-of-type). */
#define PKV_DEQUANT_TYPES(X) \
    X(f32) X(f16) X(bf16) X(q4_0) X(q4_1) X(q5_0) X(q5_1) X(q8_0) X(q8_1) X(q4_K) X(q5_K) X(q6_K) X(q8_K)
#define PKV_VEC_DOT_TYPES(X) \
    X(f32) X(f16) X(bf16) X(q4_0) X(q4_1) X(q5_0) X(q5_1) X(q8_0) X(q4_K) X(q5_K) X(q6_K)
#define PKV_ACT_TYPES(X) X(f32) X(q8_0) X(q8_1) X(q8_K)

#define PKV_DECLARE_DEQUANT(LEVEL, T) void pkv_dequant_##T##_##LEVEL(const void *src, float *dst, int64_t n);
#define PKV_DECLARE_QUANTIZE(LEVEL, T) void pkv_quantize_##T##_##LEVEL(const float *src, void *dst, int64_t n);
#define PKV_DECLARE_VEC_DOT(LEVEL, T) \
    float pkv_vec_dot_##T##_##LEVEL(int64_t n, const void *weight_row, const void *act_row);
/* One weight row against several activation rows (table.h vec_dot_rows):
 * the legacy types with Q8_0 activations and Q4_K / Q6_K with Q8_K, AVX2
 * and AVX-512; each is pinned to its own level's vec_dot bit for bit by
 * tests. */
#define PKV_VEC_DOT_ROWS_TYPES(X) X(q4_0) X(q5_0) X(q8_0) X(q4_K) X(q6_K)
#define PKV_DECLARE_VEC_DOT_ROWS(LEVEL, T)                                                                  \
    void pkv_vec_dot_rows_##T##_##LEVEL(int64_t n, const void *weight_row, const void *act, uint64_t act_stride, \
                                        int n_rows, float *out, int64_t out_stride);
#define X(T) PKV_DECLARE_VEC_DOT_ROWS(avx2, T) PKV_DECLARE_VEC_DOT_ROWS(avx512, T)
PKV_VEC_DOT_ROWS_TYPES(X)
#undef X
/* The decode kernel on interleaved weights (table.h matvec_x8, repack.h),
 * AVX2 and AVX-512, and its staging of interleaved blocks for the batched
 * matmul (repack_x86.h). */
#define PKV_DECLARE_MATVEC_X8(LEVEL, T)                                                                      \
    void pkv_matvec_x8_##T##_##LEVEL(int64_t k, const void *w, int64_t n_rows, const void *act, uint64_t act_stride, \
                                     int n_act, const void *prep, float *y, int64_t ldy);
#define X(T) PKV_DECLARE_MATVEC_X8(avx2, T) PKV_DECLARE_MATVEC_X8(avx512, T)
PKV_VEC_DOT_ROWS_TYPES(X)
#undef X
void pkv_matvec_x8_prepare_avx2(uint32_t type, int64_t k, const void *act, uint64_t act_stride, int n_act, void *prep);
void pkv_matvec_x8_prepare_avx512(uint32_t type, int64_t k, const void *act, uint64_t act_stride, int n_act,
                                  void *prep);
void pkv_x8_stage_avx2(uint32_t type, const pkv_x8_group *grp, int64_t b0, int64_t nb, uint8_t *u, size_t u_stride,
                       float *dw, size_t dw_stride);
void pkv_x8_stage_avx512(uint32_t type, const pkv_x8_group *grp, int64_t b0, int64_t nb, uint8_t *u,
                         size_t u_stride, float *dw, size_t dw_stride);
/* ... and of interleaved Q4_K / Q6_K super-blocks into the K-quant kernels'
 * stage (simd_x86.h kquant_stage). */
struct kquant_stage;
void pkv_x8_stage_kquant_avx2(uint32_t type, const pkv_x8_group *grp, int64_t b0, int64_t nb, struct kquant_stage *st,
                              bool pair_scales);
void pkv_x8_stage_kquant_avx512(uint32_t type, const pkv_x8_group *grp, int64_t b0, int64_t nb,
                                struct kquant_stage *st, bool pair_scales);

#define PKV_DECLARE_FLOAT_HELPERS(LEVEL)                                                        \
    float pkv_dot_f32_##LEVEL(int64_t n, const float *a, const float *b);                      \
    void pkv_axpy_f32_##LEVEL(int64_t n, float alpha, const float *x, float *y);               \
    float pkv_dot_f16_f32_##LEVEL(int64_t n, const uint16_t *a, const float *b);               \
    void pkv_axpy_f16_##LEVEL(int64_t n, float alpha, const uint16_t *x, float *y);            \
    void pkv_f32_to_f16_##LEVEL(const float *src, uint16_t *dst, int64_t n);                   \
    void pkv_f16_to_f32_##LEVEL(const uint16_t *src, float *dst, int64_t n);                   \
    void pkv_exp_f32_##LEVEL(int64_t n, const float *x, float *y);                             \
    void pkv_gelu_tanh_mul_##LEVEL(int64_t n, float *gate, const float *up);                   \
    void pkv_silu_mul_##LEVEL(int64_t n, float *gate, const float *up);                        \
    void pkv_att_stage_##LEVEL(const void *k, const void *v, int n, int dk, int dv, pkv_type tk, pkv_type tv, \
                               float *kt, float *vt);                                          \
    void pkv_att_scores_##LEVEL(int nq, int dk, const float *q, const float *kt, float *s);    \
    void pkv_att_accum_##LEVEL(int nq, int dv, const float *p, const float *alpha, const float *vt, float *o);

/* Byte offsets inside one packed activation block (table.h, batched matmul). */
enum {
    PACK32_QS = 0, PACK32_D = 512, PACK32_SUM = 576, PACK32_BYTES = 640,
    PACK256_QS = 0, PACK256_D = 4096, PACK256_BSUMS = 4160, PACK256_BYTES = 4672,
    PACKF_BYTES = 64
};

/* Batched matmul kernels (gemm_avx2.c, gemm_avx512.c) and their bit-exact
 * scalar references (gemm.c). The scalar table has no batched kernels: its
 * CPUs lack FMA, which the references need to match the SIMD bits, and the
 * row-by-row vec_dot path is faster there. */
#define PKV_GEMM_TYPES(X) X(f32) X(f16) X(q4_0) X(q5_0) X(q8_0) X(q4_K) X(q5_K) X(q6_K)
#define PKV_DECLARE_GEMM(LEVEL, T) void pkv_gemm_##T##_##LEVEL(const pkv_gemm_args *a);
#define X(T) PKV_DECLARE_GEMM(ref, T) PKV_DECLARE_GEMM(avx2, T) PKV_DECLARE_GEMM(avx512, T)
PKV_GEMM_TYPES(X)
#undef X

/* Bit-exact scalar references (fused multiply-adds in the SIMD kernels'
 * order) of the float kernels whose scalar-table versions use plain
 * multiply-adds; tests pin the SIMD kernels to these. */
void pkv_exp_f32_ref(int64_t n, const float *x, float *y);
void pkv_gelu_tanh_mul_ref(int64_t n, float *gate, const float *up);
void pkv_silu_mul_ref(int64_t n, float *gate, const float *up);
void pkv_att_scores_ref(int nq, int dk, const float *q, const float *kt, float *s);
void pkv_att_accum_ref(int nq, int dv, const float *p, const float *alpha, const float *vt, float *o);
void pkv_att_block_ref(int nq, int dk, int dv, const float *q, const float *kt, const float *vt, float scale, float *m,
                       float *l, float *o);

/* scalar: every kernel */
#define X(T) PKV_DECLARE_DEQUANT(scalar, T)
PKV_DEQUANT_TYPES(X)
#undef X
#define X(T) PKV_DECLARE_QUANTIZE(scalar, T)
PKV_ACT_TYPES(X)
#undef X
#define X(T) PKV_DECLARE_VEC_DOT(scalar, T)
PKV_VEC_DOT_TYPES(X)
#undef X
PKV_DECLARE_FLOAT_HELPERS(scalar)

/* AVX2 + FMA + F16C: every kernel except the trivial ones (F32 copy, and
 * dequantising the activation-only Q8_1/Q8_K, which only tests use). */
#define PKV_AVX2_DEQUANT_TYPES(X) \
    X(f16) X(bf16) X(q4_0) X(q4_1) X(q5_0) X(q5_1) X(q8_0) X(q4_K) X(q5_K) X(q6_K)
#define PKV_AVX2_ACT_TYPES(X) X(q8_0) X(q8_1) X(q8_K)
#define X(T) PKV_DECLARE_DEQUANT(avx2, T)
PKV_AVX2_DEQUANT_TYPES(X)
#undef X
#define X(T) PKV_DECLARE_QUANTIZE(avx2, T)
PKV_AVX2_ACT_TYPES(X)
#undef X
#define X(T) PKV_DECLARE_VEC_DOT(avx2, T)
PKV_VEC_DOT_TYPES(X)
#undef X
PKV_DECLARE_FLOAT_HELPERS(avx2)

/* AVX-512 (+VNNI): the quantised dot products; the rest of its table is AVX2. */
#define PKV_AVX512_VEC_DOT_TYPES(X) X(q4_0) X(q4_1) X(q5_0) X(q5_1) X(q8_0) X(q4_K) X(q5_K) X(q6_K)
#define X(T) PKV_DECLARE_VEC_DOT(avx512, T)
PKV_AVX512_VEC_DOT_TYPES(X)
#undef X
void pkv_att_scores_avx512(int nq, int dk, const float *q, const float *kt, float *s);
void pkv_att_accum_avx512(int nq, int dv, const float *p, const float *alpha, const float *vt, float *o);
void pkv_att_block_avx512(int nq, int dk, int dv, const float *q, const float *kt, const float *vt, float scale, float *m,
                          float *l, float *o);
void pkv_att_block_f16_avx2(int nq, int dk, int dv, const float *q, const uint16_t *kh, const uint16_t *vh,
                            int n_blocks, float scale, float *m, float *l, float *o);
void pkv_att_block_f16_avx512(int nq, int dk, int dv, const float *q, const uint16_t *kh, const uint16_t *vh,
                              int n_blocks, float scale, float *m, float *l, float *o);

#endif
