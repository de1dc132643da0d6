/*
 * CPU feature detection and the immutable kernel tables (table.h), one per
 * SIMD level. Detection runs on every call (cpuid through libgcc, which also
 * checks that the OS saves the wide registers): there is no cached global.
 */
#include <stdbool.h>

#include "kernels/levels.h"
#include "kernels/table.h"

/* ------------------------------------------------------------------ detection */

static bool cpu_has_avx2(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
}

/* The AVX-512 kernels use F/BW/VL/DQ (the Makefile's AVX512_FLAGS), VNNI
 * (quant_avx512.c enables it for itself) and the AVX2 set. An AVX-512 CPU
 * without VNNI (Skylake-SP/X) runs the AVX2 table. */
static bool cpu_has_avx512(void) {
    __builtin_cpu_init();
    return cpu_has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vnni");
}

pkv_simd pkv_simd_detect(void) {
    if (cpu_has_avx512()) return PKV_SIMD_AVX512;
    if (cpu_has_avx2()) return PKV_SIMD_AVX2;
    return PKV_SIMD_SCALAR;
}

const char *pkv_simd_name(pkv_simd level) {
    switch (level) {
    case PKV_SIMD_AUTO: return "auto";
    case PKV_SIMD_SCALAR: return "scalar";
    case PKV_SIMD_AVX2: return "avx2";
    case PKV_SIMD_AVX512: return "avx512";
    }
    return "unknown";
}

/* ------------------------------------------------------------------ tables */

#define SCALAR_DEQUANT                                                                              \
    [PKV_TYPE_F32] = pkv_dequant_f32_scalar, [PKV_TYPE_Q8_1] = pkv_dequant_q8_1_scalar,            \
    [PKV_TYPE_Q8_K] = pkv_dequant_q8_K_scalar

static const pkv_kernels scalar_kernels = {
    .level = PKV_SIMD_SCALAR,
    .dequant =
        {
            SCALAR_DEQUANT,
            [PKV_TYPE_F16] = pkv_dequant_f16_scalar,
            [PKV_TYPE_BF16] = pkv_dequant_bf16_scalar,
            [PKV_TYPE_Q4_0] = pkv_dequant_q4_0_scalar,
            [PKV_TYPE_Q4_1] = pkv_dequant_q4_1_scalar,
            [PKV_TYPE_Q5_0] = pkv_dequant_q5_0_scalar,
            [PKV_TYPE_Q5_1] = pkv_dequant_q5_1_scalar,
            [PKV_TYPE_Q8_0] = pkv_dequant_q8_0_scalar,
            [PKV_TYPE_Q4_K] = pkv_dequant_q4_K_scalar,
            [PKV_TYPE_Q5_K] = pkv_dequant_q5_K_scalar,
            [PKV_TYPE_Q6_K] = pkv_dequant_q6_K_scalar,
        },
    .quantize =
        {
            [PKV_TYPE_F32] = pkv_quantize_f32_scalar,
            [PKV_TYPE_Q8_0] = pkv_quantize_q8_0_scalar,
            [PKV_TYPE_Q8_1] = pkv_quantize_q8_1_scalar,
            [PKV_TYPE_Q8_K] = pkv_quantize_q8_K_scalar,
        },
    .vec_dot =
        {
            [PKV_TYPE_F32] = pkv_vec_dot_f32_scalar,
            [PKV_TYPE_F16] = pkv_vec_dot_f16_scalar,
            [PKV_TYPE_BF16] = pkv_vec_dot_bf16_scalar,
            [PKV_TYPE_Q4_0] = pkv_vec_dot_q4_0_scalar,
            [PKV_TYPE_Q4_1] = pkv_vec_dot_q4_1_scalar,
            [PKV_TYPE_Q5_0] = pkv_vec_dot_q5_0_scalar,
            [PKV_TYPE_Q5_1] = pkv_vec_dot_q5_1_scalar,
            [PKV_TYPE_Q8_0] = pkv_vec_dot_q8_0_scalar,
            [PKV_TYPE_Q4_K] = pkv_vec_dot_q4_K_scalar,
            [PKV_TYPE_Q5_K] = pkv_vec_dot_q5_K_scalar,
            [PKV_TYPE_Q6_K] = pkv_vec_dot_q6_K_scalar,
        },
    .dot_f32 = pkv_dot_f32_scalar,
    .axpy_f32 = pkv_axpy_f32_scalar,
    .dot_f16_f32 = pkv_dot_f16_f32_scalar,
    .axpy_f16 = pkv_axpy_f16_scalar,
    .f32_to_f16 = pkv_f32_to_f16_scalar,
    .f16_to_f32 = pkv_f16_to_f32_scalar,
    .exp_f32 = pkv_exp_f32_scalar,
    .gelu_tanh_mul = pkv_gelu_tanh_mul_scalar,
    .silu_mul = pkv_silu_mul_scalar,
    .att_stage = pkv_att_stage_scalar,
    .att_scores = pkv_att_scores_scalar,
    .att_accum = pkv_att_accum_scalar,
};

#define AVX2_DEQUANT                                                                                \
    SCALAR_DEQUANT, [PKV_TYPE_F16] = pkv_dequant_f16_avx2, [PKV_TYPE_BF16] = pkv_dequant_bf16_avx2, \
    [PKV_TYPE_Q4_0] = pkv_dequant_q4_0_avx2, [PKV_TYPE_Q4_1] = pkv_dequant_q4_1_avx2,              \
    [PKV_TYPE_Q5_0] = pkv_dequant_q5_0_avx2, [PKV_TYPE_Q5_1] = pkv_dequant_q5_1_avx2,              \
    [PKV_TYPE_Q8_0] = pkv_dequant_q8_0_avx2, [PKV_TYPE_Q4_K] = pkv_dequant_q4_K_avx2,              \
    [PKV_TYPE_Q5_K] = pkv_dequant_q5_K_avx2, [PKV_TYPE_Q6_K] = pkv_dequant_q6_K_avx2

#define AVX2_QUANTIZE                                                                               \
    [PKV_TYPE_F32] = pkv_quantize_f32_scalar, [PKV_TYPE_Q8_0] = pkv_quantize_q8_0_avx2,            \
    [PKV_TYPE_Q8_1] = pkv_quantize_q8_1_avx2, [PKV_TYPE_Q8_K] = pkv_quantize_q8_K_avx2

#define AVX2_VEC_DOT                                                                                \
    [PKV_TYPE_F32] = pkv_vec_dot_f32_avx2, [PKV_TYPE_F16] = pkv_vec_dot_f16_avx2,                  \
    [PKV_TYPE_BF16] = pkv_vec_dot_bf16_avx2, [PKV_TYPE_Q4_0] = pkv_vec_dot_q4_0_avx2,              \
    [PKV_TYPE_Q4_1] = pkv_vec_dot_q4_1_avx2, [PKV_TYPE_Q5_0] = pkv_vec_dot_q5_0_avx2,              \
    [PKV_TYPE_Q5_1] = pkv_vec_dot_q5_1_avx2, [PKV_TYPE_Q8_0] = pkv_vec_dot_q8_0_avx2,              \
    [PKV_TYPE_Q4_K] = pkv_vec_dot_q4_K_avx2, [PKV_TYPE_Q5_K] = pkv_vec_dot_q5_K_avx2,              \
    [PKV_TYPE_Q6_K] = pkv_vec_dot_q6_K_avx2

static const pkv_kernels avx2_kernels = {
    .level = PKV_SIMD_AVX2,
    .dequant = {AVX2_DEQUANT},
    .quantize = {AVX2_QUANTIZE},
    .vec_dot = {AVX2_VEC_DOT},
    .vec_dot_rows = {[PKV_TYPE_Q4_0] = pkv_vec_dot_rows_q4_0_avx2, [PKV_TYPE_Q5_0] = pkv_vec_dot_rows_q5_0_avx2,
                     [PKV_TYPE_Q8_0] = pkv_vec_dot_rows_q8_0_avx2, [PKV_TYPE_Q4_K] = pkv_vec_dot_rows_q4_K_avx2,
                     [PKV_TYPE_Q6_K] = pkv_vec_dot_rows_q6_K_avx2},
    .matvec_x8 = {[PKV_TYPE_Q4_0] = pkv_matvec_x8_q4_0_avx2, [PKV_TYPE_Q5_0] = pkv_matvec_x8_q5_0_avx2,
                  [PKV_TYPE_Q8_0] = pkv_matvec_x8_q8_0_avx2,
                  [PKV_TYPE_Q4_K] = pkv_matvec_x8_q4_K_avx2, [PKV_TYPE_Q6_K] = pkv_matvec_x8_q6_K_avx2},
    .matvec_x8_prepare = pkv_matvec_x8_prepare_avx2,
    .dot_f32 = pkv_dot_f32_avx2,
    .axpy_f32 = pkv_axpy_f32_avx2,
    .dot_f16_f32 = pkv_dot_f16_f32_avx2,
    .axpy_f16 = pkv_axpy_f16_avx2,
    .f32_to_f16 = pkv_f32_to_f16_avx2,
    .f16_to_f32 = pkv_f16_to_f32_avx2,
    .exp_f32 = pkv_exp_f32_avx2,
    .gelu_tanh_mul = pkv_gelu_tanh_mul_avx2,
    .silu_mul = pkv_silu_mul_avx2,
    .att_stage = pkv_att_stage_avx2,
    .att_scores = pkv_att_scores_avx2,
    .att_accum = pkv_att_accum_avx2,
    .att_block_f16 = pkv_att_block_f16_avx2,
    .gemm =
        {
            [PKV_TYPE_F32] = pkv_gemm_f32_avx2,
            [PKV_TYPE_F16] = pkv_gemm_f16_avx2,
            [PKV_TYPE_Q4_0] = pkv_gemm_q4_0_avx2,
            [PKV_TYPE_Q5_0] = pkv_gemm_q5_0_avx2,
            [PKV_TYPE_Q8_0] = pkv_gemm_q8_0_avx2,
            [PKV_TYPE_Q4_K] = pkv_gemm_q4_K_avx2,
            [PKV_TYPE_Q5_K] = pkv_gemm_q5_K_avx2,
            [PKV_TYPE_Q6_K] = pkv_gemm_q6_K_avx2,
        },
};

/* AVX-512 versions of the quantised dot products, batched matmul and
 * attention blocks; the rest is AVX2 (see quant_avx512.c). */
static const pkv_kernels avx512_kernels = {
    .level = PKV_SIMD_AVX512,
    .dequant = {AVX2_DEQUANT},
    .quantize = {AVX2_QUANTIZE},
    .vec_dot =
        {
            [PKV_TYPE_F32] = pkv_vec_dot_f32_avx2,
            [PKV_TYPE_F16] = pkv_vec_dot_f16_avx2,
            [PKV_TYPE_BF16] = pkv_vec_dot_bf16_avx2,
            [PKV_TYPE_Q4_0] = pkv_vec_dot_q4_0_avx512,
            [PKV_TYPE_Q4_1] = pkv_vec_dot_q4_1_avx512,
            [PKV_TYPE_Q5_0] = pkv_vec_dot_q5_0_avx512,
            [PKV_TYPE_Q5_1] = pkv_vec_dot_q5_1_avx512,
            [PKV_TYPE_Q8_0] = pkv_vec_dot_q8_0_avx512,
            [PKV_TYPE_Q4_K] = pkv_vec_dot_q4_K_avx512,
            [PKV_TYPE_Q5_K] = pkv_vec_dot_q5_K_avx512,
            [PKV_TYPE_Q6_K] = pkv_vec_dot_q6_K_avx512,
        },
    .vec_dot_rows = {[PKV_TYPE_Q4_0] = pkv_vec_dot_rows_q4_0_avx512, [PKV_TYPE_Q5_0] = pkv_vec_dot_rows_q5_0_avx512,
                     [PKV_TYPE_Q8_0] = pkv_vec_dot_rows_q8_0_avx512, [PKV_TYPE_Q4_K] = pkv_vec_dot_rows_q4_K_avx512,
                     [PKV_TYPE_Q6_K] = pkv_vec_dot_rows_q6_K_avx512},
    .matvec_x8 = {[PKV_TYPE_Q4_0] = pkv_matvec_x8_q4_0_avx512, [PKV_TYPE_Q5_0] = pkv_matvec_x8_q5_0_avx512,
                  [PKV_TYPE_Q8_0] = pkv_matvec_x8_q8_0_avx512,
                  [PKV_TYPE_Q4_K] = pkv_matvec_x8_q4_K_avx512, [PKV_TYPE_Q6_K] = pkv_matvec_x8_q6_K_avx512},
    .matvec_x8_prepare = pkv_matvec_x8_prepare_avx512,
    .dot_f32 = pkv_dot_f32_avx2,
    .axpy_f32 = pkv_axpy_f32_avx2,
    .dot_f16_f32 = pkv_dot_f16_f32_avx2,
    .axpy_f16 = pkv_axpy_f16_avx2,
    .f32_to_f16 = pkv_f32_to_f16_avx2,
    .f16_to_f32 = pkv_f16_to_f32_avx2,
    .exp_f32 = pkv_exp_f32_avx2,
    .gelu_tanh_mul = pkv_gelu_tanh_mul_avx2,
    .silu_mul = pkv_silu_mul_avx2,
    .att_stage = pkv_att_stage_avx2,
    .att_scores = pkv_att_scores_avx512,
    .att_accum = pkv_att_accum_avx512,
    .att_block = pkv_att_block_avx512,
    .att_block_f16 = pkv_att_block_f16_avx512,
    .gemm =
        {
            [PKV_TYPE_F32] = pkv_gemm_f32_avx512,
            [PKV_TYPE_F16] = pkv_gemm_f16_avx512,
            [PKV_TYPE_Q4_0] = pkv_gemm_q4_0_avx512,
            [PKV_TYPE_Q5_0] = pkv_gemm_q5_0_avx512,
            [PKV_TYPE_Q8_0] = pkv_gemm_q8_0_avx512,
            [PKV_TYPE_Q4_K] = pkv_gemm_q4_K_avx512,
            [PKV_TYPE_Q5_K] = pkv_gemm_q5_K_avx512,
            [PKV_TYPE_Q6_K] = pkv_gemm_q6_K_avx512,
        },
};

const pkv_kernels *pkv_kernels_get(pkv_simd level) {
    const pkv_simd best = pkv_simd_detect();
    if (level == PKV_SIMD_AUTO || level > best) level = best;
    switch (level) {
    case PKV_SIMD_AVX512: return &avx512_kernels;
    case PKV_SIMD_AVX2: return &avx2_kernels;
    default: return &scalar_kernels;
    }
}
