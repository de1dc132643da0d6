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
            q[i] = _mm256_or_si256(q[i], _mm256_and_si256(bits_to_bytes(load_u32(blk + 2 * PKV_X8_ROWS + 4 * i)), sixteen));
    }
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

#include "kernels/repack_x86.h"

X8_KERNELS(avx2)
