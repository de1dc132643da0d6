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

static inline __attribute__((always_inline)) void x8_quants(const uint32_t type, const uint8_t *blk, __m256i q[8]) {
    if (type == PKV_TYPE_Q8_0) {
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) q[i] = load256(blk + 2 * PKV_X8_ROWS + 32 * i);
        return;
    }
    const __m256i low = _mm256_set1_epi8(15);
    const uint8_t *qs = blk + 2 * PKV_X8_ROWS + (type == PKV_TYPE_Q5_0 ? 4 * PKV_X8_ROWS : 0);
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        const __m256i v = load256(qs + 32 * c);
        q[c] = _mm256_and_si256(v, low);
        q[c + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
    }
    if (type == PKV_TYPE_Q5_0) {
        const __m256i sixteen = _mm256_set1_epi8(16);
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++)
            q[i] = _mm256_mask_add_epi8(q[i], _cvtu32_mask32(load_u32(blk + 2 * PKV_X8_ROWS + 4 * i)), q[i], sixteen);
    }
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

#include "kernels/repack_x86.h"

X8_KERNELS(avx512)
