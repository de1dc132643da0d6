/*
 * AVX-512 (VL + VNNI) kernels on eight-row interleaved weights (repack.h;
 * the skeleton is repack_x86.h). One block of a group is 8 vectors of 32
 * unsigned quants, vector q holding elements 4q..4q+3 of the 8 rows; against
 * an activation block, vector q meets the broadcast of the activation's
 * quants 4q..4q+3, so 8 vpdpbusd give the 8 rows' integer dot products in 8
 * lanes (four independent chains of two, so their latencies overlap), exact
 * in int32, the offset's correction the chains' start value. The Q5 fifth
 * bits go straight into a mask register.
 */
#include <immintrin.h>
#include <stdint.h>

#include "kernels/repack.h"
#include "kernels/simd_x86.h"

#pragma GCC target("avx512vnni")

/* Q5_0: 16 added where the fifth bit is set; the bits go straight into a mask register. */
static inline __m256i x8_add_fifth(__m256i q, uint32_t bits) {
    return _mm256_mask_add_epi8(q, _cvtu32_mask32(bits), q, _mm256_set1_epi8(16));
}

static inline __attribute__((always_inline)) __m256i x8_block_sums(const uint32_t type, const __m256i q[8],
                                                                   const uint8_t *ys, int32_t corr) {
    (void)type;
    __m256i s0 = _mm256_set1_epi32(corr), s1 = _mm256_setzero_si256(), s2 = _mm256_setzero_si256(),
            s3 = _mm256_setzero_si256();
    s0 = _mm256_dpbusd_epi32(s0, q[0], _mm256_set1_epi32((int)load_u32(ys)));
    s1 = _mm256_dpbusd_epi32(s1, q[1], _mm256_set1_epi32((int)load_u32(ys + 4)));
    s2 = _mm256_dpbusd_epi32(s2, q[2], _mm256_set1_epi32((int)load_u32(ys + 8)));
    s3 = _mm256_dpbusd_epi32(s3, q[3], _mm256_set1_epi32((int)load_u32(ys + 12)));
    s0 = _mm256_dpbusd_epi32(s0, q[4], _mm256_set1_epi32((int)load_u32(ys + 16)));
    s1 = _mm256_dpbusd_epi32(s1, q[5], _mm256_set1_epi32((int)load_u32(ys + 20)));
    s2 = _mm256_dpbusd_epi32(s2, q[6], _mm256_set1_epi32((int)load_u32(ys + 24)));
    s3 = _mm256_dpbusd_epi32(s3, q[7], _mm256_set1_epi32((int)load_u32(ys + 28)));
    return _mm256_add_epi32(_mm256_add_epi32(s0, s1), _mm256_add_epi32(s2, s3));
}

/* Elements 0..15 (q[0..3], ys[0..15]) of a block: the 8 rows' exact sums
 * plus corr (Q6_K's half blocks). */
static inline __attribute__((always_inline)) __m256i x8_half_sums(const __m256i q[4], const uint8_t *ys,
                                                                  int32_t corr) {
    __m256i s0 = _mm256_set1_epi32(corr), s1 = _mm256_setzero_si256();
    s0 = _mm256_dpbusd_epi32(s0, q[0], _mm256_set1_epi32((int)load_u32(ys)));
    s1 = _mm256_dpbusd_epi32(s1, q[1], _mm256_set1_epi32((int)load_u32(ys + 4)));
    s0 = _mm256_dpbusd_epi32(s0, q[2], _mm256_set1_epi32((int)load_u32(ys + 8)));
    s1 = _mm256_dpbusd_epi32(s1, q[3], _mm256_set1_epi32((int)load_u32(ys + 12)));
    return _mm256_add_epi32(s0, s1);
}

#define X8_PAIRS /* two activation rows per 512-bit vector (repack_x86.h) */
#include "kernels/repack_x86.h"

X8_KERNELS(avx512)
