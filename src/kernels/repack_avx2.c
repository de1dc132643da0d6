/*
 * AVX2 kernels on eight-row interleaved weights (repack.h; the skeleton is
 * repack_x86.h). Without vpdpbusd the 4-product sums take maddubs (pairs in
 * i16) and madd (pairs of pairs in i32). Q4_0/Q5_0 quants are at most 31, so
 * four maddubs results add up in i16 without overflow (4 x 2 x 31 x 127 =
 * 31,496) before one madd; Q8_0's unsigned quants (up to 255) would
 * saturate maddubs, so its rows are dotted signed, with the sign moved onto
 * the activation (dot_i8_i8), which needs no offset correction: the integer
 * sums are the same as the reference's. The Q5 fifth bits are expanded to
 * bytes (bits_to_bytes).
 */
#include <immintrin.h>
#include <stdint.h>

#include "kernels/repack.h"
#include "kernels/simd_x86.h"

/* Q5_0: 16 or'ed in where the fifth bit is set, the bits expanded to bytes. */
static inline __m256i x8_add_fifth(__m256i q, uint32_t bits) {
    return _mm256_or_si256(q, _mm256_and_si256(bits_to_bytes(bits), _mm256_set1_epi8(16)));
}

static inline __m256i bcast4(const uint8_t *ys, int i) { return _mm256_set1_epi32((int)load_u32(ys + 4 * i)); }

static inline __attribute__((always_inline)) __m256i x8_block_sums(const uint32_t type, const __m256i q[8],
                                                                   const uint8_t *ys, int32_t corr) {
    const __m256i ones = _mm256_set1_epi16(1);
    if (type == PKV_TYPE_Q8_0) {
        const __m256i flip = _mm256_set1_epi8((char)0x80);
        __m256i s[2] = {_mm256_setzero_si256(), _mm256_setzero_si256()};
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) s[i & 1] = _mm256_add_epi32(s[i & 1], dot_i8_i8(_mm256_xor_si256(q[i], flip), bcast4(ys, i)));
        return _mm256_add_epi32(s[0], s[1]);
    }
    __m256i p[2];
#pragma GCC unroll 2
    for (int h = 0; h < 2; h++)
        p[h] = _mm256_add_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(q[4 * h], bcast4(ys, 4 * h)),
                                                 _mm256_maddubs_epi16(q[4 * h + 1], bcast4(ys, 4 * h + 1))),
                                _mm256_add_epi16(_mm256_maddubs_epi16(q[4 * h + 2], bcast4(ys, 4 * h + 2)),
                                                 _mm256_maddubs_epi16(q[4 * h + 3], bcast4(ys, 4 * h + 3))));
    return _mm256_add_epi32(_mm256_set1_epi32(corr),
                            _mm256_add_epi32(_mm256_madd_epi16(p[0], ones), _mm256_madd_epi16(p[1], ones)));
}

/* Elements 0..15 (q[0..3], ys[0..15]) of a block: the 8 rows' exact sums
 * plus corr (Q6_K's half blocks; quants up to 63, so a pair of maddubs
 * products stays within int16: 2 x 2 x 63 x 128 < 32768). */
static inline __attribute__((always_inline)) __m256i x8_half_sums(const __m256i q[4], const uint8_t *ys,
                                                                  int32_t corr) {
    const __m256i ones = _mm256_set1_epi16(1);
    const __m256i p0 = _mm256_add_epi16(_mm256_maddubs_epi16(q[0], bcast4(ys, 0)), _mm256_maddubs_epi16(q[1], bcast4(ys, 1)));
    const __m256i p1 = _mm256_add_epi16(_mm256_maddubs_epi16(q[2], bcast4(ys, 2)), _mm256_maddubs_epi16(q[3], bcast4(ys, 3)));
    return _mm256_add_epi32(_mm256_set1_epi32(corr), _mm256_add_epi32(_mm256_madd_epi16(p0, ones), _mm256_madd_epi16(p1, ones)));
}

#include "kernels/repack_x86.h"

X8_KERNELS(avx2)
