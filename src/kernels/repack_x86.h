/*
 * The decode kernel on eight-row interleaved weights (repack.h, table.h
 * matvec_x8) and, in repack_x86_stage.h (included below), the staging of
 * interleaved blocks for the batched matmul, written once for the x86
 * levels. The including file (repack_avx2.c,
 * repack_avx512.c) defines, before including this header:
 *   x8_quants(type, blk, q)           the 8 vectors of one block: vector q
 *                                     holds elements 4q..4q+3 of the 8 rows,
 *                                     unsigned (value = u - offset)
 *   x8_block_sums(type, q, ys, corr)  the 8 rows' exact integer dot products
 *                                     with the activation quants ys, minus
 *                                     offset x their sum (corr is that term)
 * and after it, X8_KERNELS(level) names the exported functions.
 *
 * Per block and activation row: the integer sums, one conversion, one
 * multiply (the 8 rows' scales by the activation's) and one FMA into the
 * even or odd blocks' accumulator; the two added at the end — the scalar
 * reference's order (pkv_matvec_x8_ref), lane by lane, so the bits are the
 * same for every row at every level and whatever the number of activation
 * rows handled together.
 */
#ifndef PKV_KERNEL_REPACK_X86_H
#define PKV_KERNEL_REPACK_X86_H

#include <immintrin.h>
#include <string.h>

#include "kernels/levels.h"
#include "kernels/repack.h"
#include "kernels/simd_x86.h"

enum {
    X8_ROWS = PKV_X8_ROWS,
    X8_MAX_NB = 1024, /* K up to 32768 here; longer rows take the scalar reference (same bits) */
    /* activation rows advanced together over a span of a group's blocks: up
     * to 8, so that a batch's weights are read and unpacked once per step.
     * A span of 8 rows' blocks and prepared scales (8 x 24 x 42 bytes, 8 KiB;
     * 11 KiB for a whole row of 32 blocks) stays in L1 while the run's
     * groups' pieces of that span stream past. */
    X8_ACT_TILE = PKV_X8_ACT_TILE,
    /* Over rows cut into spans, with 4 or more activation rows, the weights
     * are prefetched 4 KiB ahead (they lie in the order they are read):
     * streaming with 8 rows at K = 2048, 0.39 -> 0.34 ns per block and row;
     * with 1 or 2 rows, and over whole-row spans, the hardware's prefetch
     * alone was faster (build/bench-dot q8_0 K M --x8 --rows R, medians of 5
     * alternating runs) */
    X8_PREFETCH_MIN_ROWS = 4,
    X8_PREFETCH_BYTES = 4096,
};

/* The offset of a type's unsigned quants in the interleaved blocks (value
 * = u - offset; Q4_K's are its values, Q6_K's 32 below them). */
static inline int x8_offset(const uint32_t type) {
    switch (type) {
    case PKV_TYPE_Q4_0: return 8;
    case PKV_TYPE_Q5_0: return 16;
    case PKV_TYPE_Q8_0: return 128;
    case PKV_TYPE_Q6_K: return 32;
    default: return 0;
    }
}

/* The 8 vectors of one interleaved block: vector q holds elements 4q..4q+3
 * of the 8 rows, unsigned (value = u - offset). */
static inline __attribute__((always_inline)) void x8_quants(const uint32_t type, const uint8_t *blk, __m256i q[8]) {
    if (type == PKV_TYPE_Q8_0) {
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) q[i] = load256(blk + 2 * X8_ROWS + 32 * i);
        return;
    }
    const __m256i low = _mm256_set1_epi8(15);
    const uint8_t *qs = blk + 2 * X8_ROWS + (type == PKV_TYPE_Q5_0 ? 4 * X8_ROWS : 0);
#pragma GCC unroll 4
    for (int c = 0; c < 4; c++) {
        const __m256i v = load256(qs + 32 * c);
        q[c] = _mm256_and_si256(v, low);
        q[c + 4] = _mm256_and_si256(_mm256_srli_epi16(v, 4), low);
    }
    if (type == PKV_TYPE_Q5_0)
#pragma GCC unroll 8
        for (int i = 0; i < 8; i++) q[i] = x8_add_fifth(q[i], load_u32(blk + 2 * X8_ROWS + 4 * i));
}

/* What each activation block contributes besides its quants: its scale and
 * -offset x the sum of its quants. The activation rows' entries lie side by
 * side (row a's blocks at a * nb): rows of X8_MAX_NB entries each would put
 * every row's first blocks 8 KiB apart, in the same few L1 sets, where the
 * streaming weights evict them. */
typedef struct {
    float d;
    union {
        int32_t corr; /* legacy weights: -offset x the sum of the quants; Q6_K: -32 x that of the first 16 */
        float nsum;   /* Q4_K: -(d x the sum of the quants), the mins' factor */
    };
    int32_t corr_hi;  /* Q6_K: -32 x the sum of the last 16 quants */
} x8_act_prep;

static inline int32_t hsum_epi32_128(__m128i h) {
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0x4E));
    h = _mm_add_epi32(h, _mm_shuffle_epi32(h, 0xB1));
    return _mm_cvtsi128_si32(h);
}

static void x8_prepare(const uint32_t type, const block_q8_0 *x, int64_t nb, x8_act_prep *p) {
    const int offset = x8_offset(type);
    for (int64_t b = 0; b < nb; b++) {
        /* the quants' sums by 4: elements 0..15 in the low 128 bits, 16..31 in the high */
        const __m256i s = dot_u8_i8(_mm256_set1_epi8(1), load256(x[b].qs));
        const __m128i lo = _mm256_castsi256_si128(s), hi = _mm256_extracti128_si256(s, 1);
        p[b].d = half(x[b].d);
        if (type == PKV_TYPE_Q6_K) { /* the halves' sums apart */
            p[b].corr = -offset * hsum_epi32_128(lo);
            p[b].corr_hi = -offset * hsum_epi32_128(hi);
        } else if (type == PKV_TYPE_Q4_K) {
            p[b].nsum = -(p[b].d * (float)hsum_epi32_128(_mm_add_epi32(lo, hi)));
        } else {
            p[b].corr = -offset * hsum_epi32_128(_mm_add_epi32(lo, hi));
        }
    }
}

static inline __attribute__((always_inline)) __m256 x8_block_step(const uint32_t type, const __m256i q[8], __m256 dw,
                                                                  const block_q8_0 *x, const x8_act_prep *p, int64_t b,
                                                                  __m256 acc) {
    const __m256i s = x8_block_sums(type, q, (const uint8_t *)x[b].qs, p[b].corr);
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dw, _mm256_set1_ps(p[b].d)), acc);
}

/* Q4_K: sub-block j's 8 scales and 8 mins, one per 32-bit lane (repack.h:
 * low 4 bits in sm, top 2 in smh). */
static inline __attribute__((always_inline)) void x8k_scales_mins(const uint8_t *blk, int j, __m256i *sc, __m256i *m) {
    const __m256i lo = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(blk + 4 * X8_ROWS + 8 * j)));
    const __m256i hi = _mm256_srli_epi32(
        _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(blk + 12 * X8_ROWS + 8 * (j & 3)))), 4 * (j >> 2));
    const __m256i three = _mm256_set1_epi32(3), fifteen = _mm256_set1_epi32(15);
    *sc = _mm256_or_si256(_mm256_and_si256(lo, fifteen), _mm256_slli_epi32(_mm256_and_si256(hi, three), 4));
    *m = _mm256_or_si256(_mm256_srli_epi32(lo, 4), _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(hi, 2), three), 4));
}

/* Q6_K: the 8 quant vectors of 32-element block j of an interleaved
 * super-block (repack.h), unsigned 0..63: the nibbles of pair j/2 with the
 * two top bits of each quant from qh moved to bits 4 and 5. */
static inline __attribute__((always_inline)) void x86_quants(const uint8_t *blk, int j, __m256i q[8]) {
    const __m256i low = _mm256_set1_epi8(15), top = _mm256_set1_epi8(0x30);
    const uint8_t *ql = blk + 18 * X8_ROWS + 384 * (j >> 1), *qh = ql + 256 + 64 * (j & 1);
    const __m256i h[2] = {load256(qh), load256(qh + 32)};
#pragma GCC unroll 8
    for (int c = 0; c < 8; c++) {
        const __m256i v = load256(ql + 32 * c);
        const __m256i n = _mm256_and_si256(j & 1 ? _mm256_srli_epi16(v, 4) : v, low);
        const __m256i hb = h[c >> 2];
        const int sh = 2 * (c & 3); /* bits sh, sh+1 to 4, 5 */
        const __m256i t = sh < 4 ? _mm256_slli_epi16(hb, 4 - sh) : sh == 4 ? hb : _mm256_srli_epi16(hb, 2);
        q[c] = _mm256_or_si256(n, _mm256_and_si256(t, top));
    }
}

/* 32-element block j of Q4_K super-block blk (scales d, dmin) against na
 * activation rows, whose block is sb: scales' terms into acc[a][0], mins'
 * into acc[a][1]. */
static inline __attribute__((always_inline)) void x8k_q4_k_unpack(const uint8_t *blk, int j, __m256 d, __m256 dmin,
                                                                  __m256i q[8], __m256 *dsc, __m256 *dmn) {
    const __m256i low = _mm256_set1_epi8(15);
#pragma GCC unroll 8
    for (int c = 0; c < 8; c++) {
        const __m256i v = load256(blk + 16 * X8_ROWS + 256 * (j >> 1) + 32 * c);
        q[c] = _mm256_and_si256(j & 1 ? _mm256_srli_epi16(v, 4) : v, low);
    }
    __m256i sc, m;
    x8k_scales_mins(blk, j, &sc, &m);
    *dsc = _mm256_mul_ps(d, _mm256_cvtepi32_ps(sc));
    *dmn = _mm256_mul_ps(dmin, _mm256_cvtepi32_ps(m));
}

static inline __attribute__((always_inline)) void x8k_q4_k_rows(const int na, const __m256i q[8], __m256 dsc,
                                                                __m256 dmn, const block_q8_0 *const *x,
                                                                const x8_act_prep *const *p, int64_t sb,
                                                                __m256 acc[][2]) {
#pragma GCC unroll 8
    for (int a = 0; a < na; a++) {
        const __m256i s = x8_block_sums(PKV_TYPE_Q4_0, q, (const uint8_t *)x[a][sb].qs, 0);
        acc[a][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_mul_ps(dsc, _mm256_set1_ps(p[a][sb].d)), acc[a][0]);
        acc[a][1] = _mm256_fmadd_ps(dmn, _mm256_set1_ps(p[a][sb].nsum), acc[a][1]);
    }
}

static inline __attribute__((always_inline)) void x8k_q4_k_step(const int na, const uint8_t *blk, int j, __m256 d,
                                                                __m256 dmin, const block_q8_0 *const *x,
                                                                const x8_act_prep *const *p, int64_t sb,
                                                                __m256 acc[][2]) {
    __m256i q[8];
    __m256 dsc, dmn;
    x8k_q4_k_unpack(blk, j, d, dmin, q, &dsc, &dmn);
    x8k_q4_k_rows(na, q, dsc, dmn, x, p, sb, acc);
}

/* ... of a Q6_K super-block (scale d): the first 16 elements' terms into
 * acc[a][0], the last 16's into acc[a][1]. */
static inline __attribute__((always_inline)) void x8k_q6_k_unpack(const uint8_t *blk, int j, __m256 d, __m256i q[8],
                                                                  __m256 *dlo, __m256 *dhi) {
    x86_quants(blk, j, q);
    const uint8_t *sc = blk + 2 * X8_ROWS + 16 * j;
    *dlo = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)sc))));
    *dhi = _mm256_mul_ps(d, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(sc + 8)))));
}

static inline __attribute__((always_inline)) void x8k_q6_k_rows(const int na, const __m256i q[8], __m256 dlo,
                                                                __m256 dhi, const block_q8_0 *const *x,
                                                                const x8_act_prep *const *p, int64_t sb,
                                                                __m256 acc[][2]) {
#pragma GCC unroll 8
    for (int a = 0; a < na; a++) {
        const uint8_t *ys = (const uint8_t *)x[a][sb].qs;
        const __m256i slo = x8_half_sums(q, ys, p[a][sb].corr);
        const __m256i shi = x8_half_sums(q + 4, ys + 16, p[a][sb].corr_hi);
        const __m256 da = _mm256_set1_ps(p[a][sb].d);
        acc[a][0] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(slo), _mm256_mul_ps(dlo, da), acc[a][0]);
        acc[a][1] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(shi), _mm256_mul_ps(dhi, da), acc[a][1]);
    }
}

static inline __attribute__((always_inline)) void x8k_q6_k_step(const int na, const uint8_t *blk, int j, __m256 d,
                                                                const block_q8_0 *const *x,
                                                                const x8_act_prep *const *p, int64_t sb,
                                                                __m256 acc[][2]) {
    __m256i q[8];
    __m256 dlo, dhi;
    x8k_q6_k_unpack(blk, j, d, q, &dlo, &dhi);
    x8k_q6_k_rows(na, q, dlo, dhi, x, p, sb, acc);
}

/* The next bytes of a weight stream, X8_PREFETCH_BYTES ahead. */
static inline __attribute__((always_inline)) void x8_prefetch(const uint8_t *blk, uint64_t bb) {
    for (uint64_t o = 0; o < bb; o += 64) _mm_prefetch((const char *)blk + X8_PREFETCH_BYTES + o, _MM_HINT_T0);
}

/* Super-block b of a group's span (prefetched ahead when asked): its scales
 * d and, for Q4_K, dmin (Q6_K: none). */
static inline __attribute__((always_inline)) const uint8_t *x8k_super_block(const uint32_t type, const uint8_t *group,
                                                                            int64_t b, bool prefetch, __m256 *d,
                                                                            __m256 *dmin) {
    const uint64_t bb = pkv_x8_block_bytes(type);
    const uint8_t *blk = group + (uint64_t)b * bb;
    if (prefetch) x8_prefetch(blk, bb);
    *d = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk));
    *dmin = type == PKV_TYPE_Q4_K ? _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(blk + 2 * X8_ROWS)))
                                  : _mm256_setzero_ps();
    return blk;
}

/* The K-quants' super-blocks of a span into the accumulators, 8 steps each. */
static inline __attribute__((always_inline)) void x8k_span(const uint32_t type, const int na, int64_t nb,
                                                           const uint8_t *group, const block_q8_0 *const *x,
                                                           const x8_act_prep *const *p, bool prefetch,
                                                           __m256 acc[][2]) {
    for (int64_t b = 0; b < nb; b++) {
        __m256 d, dmin;
        const uint8_t *blk = x8k_super_block(type, group, b, prefetch, &d, &dmin);
        if (type == PKV_TYPE_Q4_K) {
            for (int j = 0; j < 8; j++) x8k_q4_k_step(na, blk, j, d, dmin, x, p, 8 * b + j, acc);
        } else {
            for (int j = 0; j < 8; j++) x8k_q6_k_step(na, blk, j, d, x, p, 8 * b + j, acc);
        }
    }
}

/* Legacy block b of a group's span (prefetched ahead when asked): its 8
 * quant vectors and the 8 rows' scales. */
static inline __attribute__((always_inline)) void x8_legacy_block(const uint32_t type, const uint8_t *group,
                                                                  int64_t b, bool prefetch, __m256i q[8],
                                                                  __m256 *dw) {
    const uint64_t bb = pkv_x8_block_bytes(type);
    const uint8_t *blk = group + (uint64_t)b * bb;
    if (prefetch) x8_prefetch(blk, bb);
    x8_quants(type, blk, q);
    *dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)blk));
}

/* The legacy blocks of a span into the even and odd blocks' accumulators. */
static inline __attribute__((always_inline)) void x8_legacy_span(const uint32_t type, const int na, int64_t nb,
                                                                 const uint8_t *group, const block_q8_0 *const *x,
                                                                 const x8_act_prep *const *p, bool prefetch,
                                                                 __m256 acc[][2]) {
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
            __m256i q[8];
            __m256 dw;
            x8_legacy_block(type, group, b + h, prefetch, q, &dw);
#pragma GCC unroll 8
            for (int a = 0; a < na; a++) acc[a][h] = x8_block_step(type, q, dw, x[a], p[a], b + h, acc[a][h]);
        }
    }
    if (b < nb) {
        __m256i q[8];
        __m256 dw;
        x8_legacy_block(type, group, b, false, q, &dw);
#pragma GCC unroll 8
        for (int a = 0; a < na; a++) acc[a][0] = x8_block_step(type, q, dw, x[a], p[a], b, acc[a][0]);
    }
}

#ifdef X8_PAIRS
/*
 * Two activation rows in one 512-bit vector (the including file defines
 * X8_PAIRS where the level has 512-bit vpdpbusd): lane 2r holds weight row r
 * against the pair's first row, lane 2r + 1 against its second. A block's 8
 * quant vectors are widened once (each 32-bit lane twice) and serve every
 * pair; one broadcast of 8 bytes carries both rows' 4 quants of a group. Per
 * block and pair that is half the instructions of two rows taken one by one
 * (the broadcasts, the adds of the chains, the conversion, the scales' product
 * and the FMA), for the same multiply-adds: a batched decode step of legacy
 * weights is bound by those instructions, not by its bytes
 * (docs/server.md, "The batched kernels against the instruction ceiling").
 * Every lane does a one-row lane's operations in the same order, so the bits
 * are the reference's.
 */
enum { X8_PAIR_MAX_NB = 256 }; /* K up to 8192 on the pair path (its activations on the stack) */

/* A pair's activation block: group q's quants of both rows side by side
 * (unpacked 32-bit elements: group q at X8_PAIR_AT[q]), their scales and
 * corrections in lane order. */
typedef struct {
    uint8_t qs[64];
    float d[2];
    union {
        int32_t corr[2]; /* x8_act_prep's, row by row */
        float nsum[2];
    };
    int32_t corr_hi[2];
} x8_pair_prep;

static const int X8_PAIR_AT[8] = {0, 8, 32, 40, 16, 24, 48, 56};

static void x8_pair_prepare(const block_q8_0 *xa, const block_q8_0 *xb, const x8_act_prep *pa,
                            const x8_act_prep *pb, int64_t nb, x8_pair_prep *pp) {
    for (int64_t b = 0; b < nb; b++) {
        const __m256i a = load256(xa[b].qs), c = load256(xb[b].qs);
        _mm256_storeu_si256((__m256i *)pp[b].qs, _mm256_unpacklo_epi32(a, c));
        _mm256_storeu_si256((__m256i *)(pp[b].qs + 32), _mm256_unpackhi_epi32(a, c));
        pp[b].d[0] = pa[b].d, pp[b].d[1] = pb[b].d;
        pp[b].corr[0] = pa[b].corr, pp[b].corr[1] = pb[b].corr; /* or nsum's bits */
        pp[b].corr_hi[0] = pa[b].corr_hi, pp[b].corr_hi[1] = pb[b].corr_hi;
    }
}

static inline __m512i x8_pair_dup_index(void) { return _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7); }

static inline uint64_t load_u64(const void *p) {
    uint64_t v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Both rows' 8 bytes at p, in every pair of lanes. */
static inline __m512i x8_pair_bcast(const void *p) { return _mm512_set1_epi64((long long)load_u64(p)); }
static inline __m512 x8_pair_bcast_ps(const void *p) { return _mm512_castsi512_ps(x8_pair_bcast(p)); }

/* The pair's exact integer sums over groups g0 .. g0 + 4n - 1 (4 or 8
 * groups; q2 from group g0) plus the corrections in corr (32-bit lanes in
 * row order), as x8_block_sums and x8_half_sums give them (int32 sums are
 * exact in any order). Two chains, not the one-row kernel's four: a block's
 * pairs run side by side, so their chains' latencies overlap anyway, and
 * every chain more costs a zeroed register and an add. With 8 rows from cache
 * (build/bench-dot TYPE K M --x8 --rows 8, the builds alternating) Q5_0 went
 * 0.236 -> 0.223 ns per block and row (896 4864), Q8_0 0.190 -> 0.181 (896
 * 512), Q4_K 0.25 -> 0.244 and Q6_K 0.303 -> 0.283 (4864 896). */
static inline __attribute__((always_inline)) __m512i x8_pair_sums(const int n, const __m512i *q2,
                                                                  const x8_pair_prep *pp, int g0,
                                                                  const int32_t *corr) {
    __m512i s[2] = {x8_pair_bcast(corr), _mm512_setzero_si512()};
#pragma GCC unroll 8
    for (int g = 0; g < 4 * n; g++)
        s[g % 2] = _mm512_dpbusd_epi32(s[g % 2], q2[g], x8_pair_bcast(pp->qs + X8_PAIR_AT[g0 + g]));
    return _mm512_add_epi32(s[0], s[1]);
}

static inline __attribute__((always_inline)) __m512 x8_pair_block_step(const __m512i q2[8], __m512 dw2,
                                                                       const x8_pair_prep *pp, __m512 acc) {
    const __m512i s = x8_pair_sums(2, q2, pp, 0, pp->corr);
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dw2, x8_pair_bcast_ps(pp->d)), acc);
}

/* Each 32-bit lane of 8 twice (lane r to lanes 2r and 2r + 1). */
static inline __m512i x8_pair_dup(__m256i v) { return _mm512_permutexvar_epi32(x8_pair_dup_index(), _mm512_castsi256_si512(v)); }
static inline __m512 x8_pair_dup_ps(__m256 v) { return _mm512_permutexvar_ps(x8_pair_dup_index(), _mm512_castps256_ps512(v)); }

/* x8k_q4_k_step and x8k_q6_k_step for np pairs (and the last row of an odd
 * count on its own, x[0], p[0], acc1), block j of a super-block. */
static inline __attribute__((always_inline)) void x8k_pair_q4_k_step(const int np, const int odd, const uint8_t *blk,
                                                                     int j, __m256 d, __m256 dmin,
                                                                     const block_q8_0 *const *x1,
                                                                     const x8_act_prep *const *p1,
                                                                     const x8_pair_prep *const *pp, int64_t sb,
                                                                     __m512 acc2[][2], __m256 acc1[][2]) {
    __m256i q[8];
    __m256 dsc, dmn;
    x8k_q4_k_unpack(blk, j, d, dmin, q, &dsc, &dmn);
    if (odd) x8k_q4_k_rows(1, q, dsc, dmn, x1, p1, sb, acc1);
    __m512i q2[8];
#pragma GCC unroll 8
    for (int c = 0; c < 8; c++) q2[c] = x8_pair_dup(q[c]);
    const __m512 dsc2 = x8_pair_dup_ps(dsc), dmn2 = x8_pair_dup_ps(dmn);
    static const int32_t zero[2] = {0, 0};
#pragma GCC unroll 4
    for (int i = 0; i < np; i++) {
        const x8_pair_prep *a = &pp[i][sb];
        const __m512i s = x8_pair_sums(2, q2, a, 0, zero);
        acc2[i][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s), _mm512_mul_ps(dsc2, x8_pair_bcast_ps(a->d)), acc2[i][0]);
        acc2[i][1] = _mm512_fmadd_ps(dmn2, x8_pair_bcast_ps(a->nsum), acc2[i][1]);
    }
}

static inline __attribute__((always_inline)) void x8k_pair_q6_k_step(const int np, const int odd, const uint8_t *blk,
                                                                     int j, __m256 d, const block_q8_0 *const *x1,
                                                                     const x8_act_prep *const *p1,
                                                                     const x8_pair_prep *const *pp, int64_t sb,
                                                                     __m512 acc2[][2], __m256 acc1[][2]) {
    __m256i q[8];
    __m256 dlo, dhi;
    x8k_q6_k_unpack(blk, j, d, q, &dlo, &dhi);
    if (odd) x8k_q6_k_rows(1, q, dlo, dhi, x1, p1, sb, acc1);
    __m512i q2[8];
#pragma GCC unroll 8
    for (int c = 0; c < 8; c++) q2[c] = x8_pair_dup(q[c]);
    const __m512 dlo2 = x8_pair_dup_ps(dlo), dhi2 = x8_pair_dup_ps(dhi);
#pragma GCC unroll 4
    for (int i = 0; i < np; i++) {
        const x8_pair_prep *a = &pp[i][sb];
        const __m512i slo = x8_pair_sums(1, q2, a, 0, a->corr), shi = x8_pair_sums(1, q2 + 4, a, 4, a->corr_hi);
        const __m512 da = x8_pair_bcast_ps(a->d);
        acc2[i][0] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(slo), _mm512_mul_ps(dlo2, da), acc2[i][0]);
        acc2[i][1] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(shi), _mm512_mul_ps(dhi2, da), acc2[i][1]);
    }
}

/* Lanes r of a (row one) and of b (row two) into lanes 2r and 2r + 1. */
static inline __m512 x8_pair_join(__m256 a, __m256 b) {
    return _mm512_permutex2var_ps(_mm512_castps256_ps512(a),
                                  _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23),
                                  _mm512_castps256_ps512(b));
}

/* Lanes 2r (half 0) or 2r + 1 (half 1) into lanes r. */
static inline __m256 x8_pair_half(__m512 v, int half) {
    const __m512i idx = half ? _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 0, 0, 0, 0, 0, 0, 0, 0)
                             : _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_castps512_ps256(_mm512_permutexvar_ps(idx, v));
}

/* Legacy block b against np pairs (and, odd, the last row on its own: x1,
 * p1, acc1) into the even or odd blocks' accumulators h. */
static inline __attribute__((always_inline)) void x8_pair_legacy_block(const uint32_t type, const int np,
                                                                       const int odd, const uint8_t *group,
                                                                       int64_t b, int h, bool prefetch,
                                                                       const block_q8_0 *const *x1,
                                                                       const x8_act_prep *const *p1,
                                                                       const x8_pair_prep *const *pp,
                                                                       __m512 acc2[][2], __m256 acc1[2]) {
    __m256i q[8];
    __m256 dw;
    x8_legacy_block(type, group, b, prefetch, q, &dw);
    if (odd) acc1[h] = x8_block_step(type, q, dw, x1[0], p1[0], b, acc1[h]);
    __m512i q2[8];
#pragma GCC unroll 8
    for (int i = 0; i < 8; i++) q2[i] = x8_pair_dup(q[i]);
    const __m512 dw2 = x8_pair_dup_ps(dw);
#pragma GCC unroll 4
    for (int i = 0; i < np; i++) acc2[i][h] = x8_pair_block_step(q2, dw2, &pp[i][b], acc2[i][h]);
}

/* x8_legacy_span for np pairs and an odd last row: blocks two at a time, so
 * that the even and odd blocks' accumulators stay in registers. */
static inline __attribute__((always_inline)) void x8_pair_legacy_span(const uint32_t type, const int np,
                                                                      const int odd, int64_t nb,
                                                                      const uint8_t *group,
                                                                      const block_q8_0 *const *x1,
                                                                      const x8_act_prep *const *p1,
                                                                      const x8_pair_prep *const *pp, bool prefetch,
                                                                      __m512 acc2[][2], __m256 acc1[2]) {
    int64_t b = 0;
    for (; b + 2 <= nb; b += 2) {
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++)
            x8_pair_legacy_block(type, np, odd, group, b + h, h, prefetch, x1, p1, pp, acc2, acc1);
    }
    if (b < nb) x8_pair_legacy_block(type, np, odd, group, b, 0, false, x1, p1, pp, acc2, acc1);
}

/* x8k_span for np pairs and an odd last row: the reference's two
 * accumulators, 8 steps a super-block. */
static inline __attribute__((always_inline)) void x8k_pair_span(const uint32_t type, const int np, const int odd,
                                                                int64_t nb, const uint8_t *group,
                                                                const block_q8_0 *const *x1,
                                                                const x8_act_prep *const *p1,
                                                                const x8_pair_prep *const *pp, bool prefetch,
                                                                __m512 acc2[][2], __m256 acc1[2]) {
    __m256 acc1k[1][2] = {{acc1[0], acc1[1]}};
    for (int64_t b = 0; b < nb; b++) {
        __m256 d, dmin;
        const uint8_t *blk = x8k_super_block(type, group, b, prefetch, &d, &dmin);
        if (type == PKV_TYPE_Q4_K) {
            for (int j = 0; j < 8; j++)
                x8k_pair_q4_k_step(np, odd, blk, j, d, dmin, x1, p1, pp, 8 * b + j, acc2, acc1k);
        } else {
            for (int j = 0; j < 8; j++) x8k_pair_q6_k_step(np, odd, blk, j, d, x1, p1, pp, 8 * b + j, acc2, acc1k);
        }
    }
    acc1[0] = acc1k[0][0], acc1[1] = acc1k[0][1];
}

/* x8_group_tile for na (2..8) activation rows: na / 2 pairs, and the last
 * row of an odd na on its own, over a span of nb blocks (K-quants:
 * super-blocks). Accumulators, carries and results as x8_group_tile's. */
static inline __attribute__((always_inline)) void x8_pair_tile(const uint32_t type, const int na, int64_t nb,
                                                               const uint8_t *group, const block_q8_0 *const *x,
                                                               const x8_act_prep *const *p,
                                                               const x8_pair_prep *const *pp, float *y, int64_t ldy,
                                                               const float *carry_in, float *carry_out) {
    const int np = na / 2, odd = na % 2;
    const bool prefetch = na >= X8_PREFETCH_MIN_ROWS && (carry_in || carry_out);
    __m512 acc2[X8_ACT_TILE / 2][2];
    __m256 acc1[2];
#pragma GCC unroll 4
    for (int i = 0; i < np; i++)
        for (int h = 0; h < 2; h++)
            acc2[i][h] = carry_in ? x8_pair_join(_mm256_loadu_ps(carry_in + (4 * i + h) * X8_ROWS),
                                                 _mm256_loadu_ps(carry_in + (4 * i + 2 + h) * X8_ROWS))
                                  : _mm512_setzero_ps();
    for (int h = 0; h < 2; h++)
        acc1[h] = odd && carry_in ? _mm256_loadu_ps(carry_in + (2 * (na - 1) + h) * X8_ROWS) : _mm256_setzero_ps();
    if (pkv_x8_block_cols(type) == QK_K)
        x8k_pair_span(type, np, odd, nb, group, x + na - 1, p + na - 1, pp, prefetch, acc2, acc1);
    else x8_pair_legacy_span(type, np, odd, nb, group, x + na - 1, p + na - 1, pp, prefetch, acc2, acc1);
#pragma GCC unroll 4
    for (int i = 0; i < np; i++) {
        if (carry_out) {
            for (int h = 0; h < 2; h++)
                for (int r = 0; r < 2; r++)
                    _mm256_storeu_ps(carry_out + (4 * i + 2 * r + h) * X8_ROWS, x8_pair_half(acc2[i][h], r));
        } else {
            const __m512 sum = _mm512_add_ps(acc2[i][0], acc2[i][1]);
            _mm256_storeu_ps(y + (int64_t)(2 * i) * ldy, x8_pair_half(sum, 0));
            _mm256_storeu_ps(y + (int64_t)(2 * i + 1) * ldy, x8_pair_half(sum, 1));
        }
    }
    if (!odd) return;
    if (carry_out) {
        _mm256_storeu_ps(carry_out + 2 * (na - 1) * X8_ROWS, acc1[0]);
        _mm256_storeu_ps(carry_out + (2 * (na - 1) + 1) * X8_ROWS, acc1[1]);
    } else {
        _mm256_storeu_ps(y + (int64_t)(na - 1) * ldy, _mm256_add_ps(acc1[0], acc1[1]));
    }
}

static inline __attribute__((always_inline)) void x8_pair_tile_of(const uint32_t type, int na, int64_t nb,
                                                                  const uint8_t *piece, const block_q8_0 *const *x,
                                                                  const x8_act_prep *const *p,
                                                                  const x8_pair_prep *const *pp, float *y,
                                                                  int64_t ldy, const float *carry_in,
                                                                  float *carry_out) {
    switch (na) {
    case 2: x8_pair_tile(type, 2, nb, piece, x, p, pp, y, ldy, carry_in, carry_out); break;
    case 3: x8_pair_tile(type, 3, nb, piece, x, p, pp, y, ldy, carry_in, carry_out); break;
    case 4: x8_pair_tile(type, 4, nb, piece, x, p, pp, y, ldy, carry_in, carry_out); break;
    case 5: x8_pair_tile(type, 5, nb, piece, x, p, pp, y, ldy, carry_in, carry_out); break;
    case 6: x8_pair_tile(type, 6, nb, piece, x, p, pp, y, ldy, carry_in, carry_out); break;
    case 7: x8_pair_tile(type, 7, nb, piece, x, p, pp, y, ldy, carry_in, carry_out); break;
    default: x8_pair_tile(type, 8, nb, piece, x, p, pp, y, ldy, carry_in, carry_out); break;
    }
}
#endif

/* A tile of na activation rows prepared (table.h matvec_x8_prepare): each
 * row's x8_act_prep, nq blocks apart, at prep; with pairs, the pairs'
 * x8_pair_prep, nq apart, at pair_prep. PKV_X8_PREP_BYTES per row and block
 * hold both. */
#ifdef X8_PAIRS
_Static_assert(sizeof(x8_act_prep) + sizeof(x8_pair_prep) / 2 <= PKV_X8_PREP_BYTES, "prepared tile");
#else
typedef struct x8_pair_prep x8_pair_prep; /* none at this level */
_Static_assert(sizeof(x8_act_prep) <= PKV_X8_PREP_BYTES, "prepared tile");
#endif

static inline bool x8_tile_pairs(int na, int64_t nq) {
#ifdef X8_PAIRS
    return na >= 2 && nq <= X8_PAIR_MAX_NB;
#else
    (void)na, (void)nq;
    return false;
#endif
}

static void x8_prepare_tile(const uint32_t type, const block_q8_0 *const *x, int na, int64_t nq, x8_act_prep *prep,
                            x8_pair_prep *pair_prep) {
    for (int a = 0; a < na; a++) x8_prepare(type, x[a], nq, prep + a * nq);
#ifdef X8_PAIRS
    if (x8_tile_pairs(na, nq))
        for (int i = 0; i < na / 2; i++)
            x8_pair_prepare(x[2 * i], x[2 * i + 1], prep + 2 * i * nq, prep + (2 * i + 1) * nq, nq,
                            pair_prep + i * nq);
#else
    (void)pair_prep;
#endif
}

/* Tile t of a prepared area (pkv_x8_prep_bytes): its rows' x8_act_prep,
 * then its pairs'. */
static inline x8_act_prep *x8_prep_tile(void *prep, int64_t nq, int t) {
    return (x8_act_prep *)((uint8_t *)prep + (size_t)t * X8_ACT_TILE * nq * PKV_X8_PREP_BYTES);
}
static inline x8_pair_prep *x8_prep_pairs(x8_act_prep *tile, int64_t nq) {
    return (x8_pair_prep *)(tile + X8_ACT_TILE * nq);
}

/* The na activation rows of the tile from row a0 (act_stride bytes apart). */
static inline void x8_tile_rows(const void *act, uint64_t act_stride, int a0, int na, const block_q8_0 **x) {
    for (int a = 0; a < na; a++) x[a] = (const block_q8_0 *)((const uint8_t *)act + (uint64_t)(a0 + a) * act_stride);
}

static void x8_matvec_prepare(const uint32_t type, int64_t k, const void *act, uint64_t act_stride, int n_act,
                              void *prep) {
    const int64_t nq = k / 32;
    if (nq > X8_MAX_NB) return; /* x8_matvec takes the reference, which prepares nothing */
    for (int a0 = 0; a0 < n_act; a0 += X8_ACT_TILE) {
        const int na = n_act - a0 < X8_ACT_TILE ? n_act - a0 : X8_ACT_TILE;
        const block_q8_0 *x[X8_ACT_TILE];
        x8_tile_rows(act, act_stride, a0, na, x);
        x8_act_prep *tile = x8_prep_tile(prep, nq, a0 / X8_ACT_TILE);
        x8_prepare_tile(type, x, na, nq, tile, x8_prep_pairs(tile, nq));
    }
}

/* One group's 8 rows against na (1..X8_ACT_TILE, a constant per inlined
 * copy) activation rows over a span of nb blocks (K-quants: super-blocks);
 * results to y[a * ldy + 0..7]. Legacy blocks go to the even or odd
 * blocks' accumulator; the K-quants' two accumulators are their
 * reference's (pkv_matvec_x8_ref). A span starts from the accumulators in carry_in (none for the
 * row's first) and, unless it is the row's last, leaves them in carry_out
 * instead of y: spans start at even blocks, so every block meets the
 * accumulator it meets in one pass over the row, and the bits are the
 * reference's. */
static inline __attribute__((always_inline)) void x8_group_tile(const uint32_t type, const int na, int64_t nb,
                                                                const uint8_t *group, const block_q8_0 *const *x,
                                                                const x8_act_prep *const *p, float *y, int64_t ldy,
                                                                const float *carry_in, float *carry_out) {
    /* a span of a row cut into spans (it carries accumulators in or out) */
    const bool prefetch = na >= X8_PREFETCH_MIN_ROWS && (carry_in || carry_out);
    __m256 acc[X8_ACT_TILE][2];
#pragma GCC unroll 8
    for (int a = 0; a < na; a++)
        for (int h = 0; h < 2; h++)
            acc[a][h] = carry_in ? _mm256_loadu_ps(carry_in + (2 * a + h) * X8_ROWS) : _mm256_setzero_ps();
    if (pkv_x8_block_cols(type) == QK_K) x8k_span(type, na, nb, group, x, p, prefetch, acc);
    else x8_legacy_span(type, na, nb, group, x, p, prefetch, acc);
#pragma GCC unroll 8
    for (int a = 0; a < na; a++) {
        if (carry_out) {
            _mm256_storeu_ps(carry_out + 2 * a * X8_ROWS, acc[a][0]);
            _mm256_storeu_ps(carry_out + (2 * a + 1) * X8_ROWS, acc[a][1]);
        } else {
            _mm256_storeu_ps(y + (int64_t)a * ldy, _mm256_add_ps(acc[a][0], acc[a][1]));
        }
    }
}

/* x8_group_tile for na (1..8) activation rows, each an inlined copy. */
static inline __attribute__((always_inline)) void x8_tile_of(const uint32_t type, int na, int64_t nb,
                                                             const uint8_t *piece, const block_q8_0 *const *x,
                                                             const x8_act_prep *const *p, float *y, int64_t ldy,
                                                             const float *carry_in, float *carry_out) {
    switch (na) {
    case 1: x8_group_tile(type, 1, nb, piece, x, p, y, ldy, carry_in, carry_out); break;
    case 2: x8_group_tile(type, 2, nb, piece, x, p, y, ldy, carry_in, carry_out); break;
    case 3: x8_group_tile(type, 3, nb, piece, x, p, y, ldy, carry_in, carry_out); break;
    case 4: x8_group_tile(type, 4, nb, piece, x, p, y, ldy, carry_in, carry_out); break;
    case 5: x8_group_tile(type, 5, nb, piece, x, p, y, ldy, carry_in, carry_out); break;
    case 6: x8_group_tile(type, 6, nb, piece, x, p, y, ldy, carry_in, carry_out); break;
    case 7: x8_group_tile(type, 7, nb, piece, x, p, y, ldy, carry_in, carry_out); break;
    default: x8_group_tile(type, 8, nb, piece, x, p, y, ldy, carry_in, carry_out); break;
    }
}

/* Up to 8 activation rows at a time over the matrix in the order its blocks
 * lie (repack.h): run by run, a span at a time across the run's groups, so
 * the span's activation blocks are read from L1 by every group and the
 * weights are one sequential stream, read once per tile of activation rows. */
static inline __attribute__((always_inline)) void x8_matvec(const uint32_t type, int64_t k, const void *w,
                                                            int64_t n_rows, const void *act, uint64_t act_stride,
                                                            int n_act, const void *prepared, float *y, int64_t ldy) {
    /* nb interleaved blocks per row, nq activation blocks of 32 (per interleaved block: cq) */
    const int64_t cq = pkv_x8_block_cols(type) / 32, nq = k / 32, nb = nq / cq, n_groups = n_rows / X8_ROWS;
    const int64_t span = pkv_x8_span_blocks(type, nb);
    if (nq > X8_MAX_NB) {
        pkv_matvec_x8_ref(type, k, w, n_rows, act, act_stride, n_act, y, ldy);
        return;
    }
    const uint64_t bb = pkv_x8_block_bytes(type);
    float carry[PKV_X8_RUN_GROUPS][2 * X8_ACT_TILE * X8_ROWS];
    /* a tile's preparation, where the caller passed none */
    x8_act_prep own_prep[X8_ACT_TILE * X8_MAX_NB];
#ifdef X8_PAIRS
    x8_pair_prep own_pairs[X8_ACT_TILE / 2 * X8_PAIR_MAX_NB];
#else
    x8_pair_prep *own_pairs = NULL;
#endif
    for (int a0 = 0; a0 < n_act; a0 += X8_ACT_TILE) {
        const int na = n_act - a0 < X8_ACT_TILE ? n_act - a0 : X8_ACT_TILE;
        const block_q8_0 *x[X8_ACT_TILE];
        x8_tile_rows(act, act_stride, a0, na, x);
        const x8_act_prep *tile = own_prep;
        const x8_pair_prep *tile_pairs = own_pairs;
        if (prepared) {
            x8_act_prep *t = x8_prep_tile((void *)prepared, nq, a0 / X8_ACT_TILE);
            tile = t, tile_pairs = x8_prep_pairs(t, nq);
        } else {
            x8_prepare_tile(type, x, na, nq, own_prep, own_pairs);
        }
        const x8_act_prep *p[X8_ACT_TILE];
        for (int a = 0; a < na; a++) p[a] = tile + a * nq;
#ifdef X8_PAIRS
        const bool pairs = x8_tile_pairs(na, nq);
        const x8_pair_prep *pp[X8_ACT_TILE / 2];
        if (pairs)
            for (int i = 0; i < na / 2; i++) pp[i] = tile_pairs + i * nq;
#else
        (void)tile_pairs;
#endif
        float *ya = y + (int64_t)a0 * ldy;
        const uint8_t *piece = w;
        for (int64_t g0 = 0; g0 < n_groups; g0 += PKV_X8_RUN_GROUPS) {
            const int64_t gn = n_groups - g0 < PKV_X8_RUN_GROUPS ? n_groups - g0 : PKV_X8_RUN_GROUPS;
            for (int64_t c0 = 0; c0 < nb; c0 += span) {
                const int64_t cn = nb - c0 < span ? nb - c0 : span;
                const bool first = c0 == 0, last = c0 + cn == nb;
                const block_q8_0 *xs[X8_ACT_TILE];
                const x8_act_prep *ps[X8_ACT_TILE];
                for (int a = 0; a < na; a++) xs[a] = x[a] + c0 * cq, ps[a] = p[a] + c0 * cq;
#ifdef X8_PAIRS
                if (pairs) {
                    const x8_pair_prep *pps[X8_ACT_TILE / 2];
                    for (int i = 0; i < na / 2; i++) pps[i] = pp[i] + c0 * cq;
                    for (int64_t g = g0; g < g0 + gn; g++, piece += (uint64_t)cn * bb)
                        x8_pair_tile_of(type, na, cn, piece, xs, ps, pps, ya + g * X8_ROWS, ldy,
                                        first ? NULL : carry[g - g0], last ? NULL : carry[g - g0]);
                    continue;
                }
#endif
                for (int64_t g = g0; g < g0 + gn; g++, piece += (uint64_t)cn * bb)
                    x8_tile_of(type, na, cn, piece, xs, ps, ya + g * X8_ROWS, ldy, first ? NULL : carry[g - g0],
                               last ? NULL : carry[g - g0]);
            }
        }
    }
}

#include "kernels/repack_x86_stage.h"

/* The exported kernels of a level (levels.h): the decode kernel of each
 * type, its preparation of the activations, the stagings for the batched
 * matmul. */
#define X8_MATVEC(T, TYPE, LEVEL)                                                                                    \
    void pkv_matvec_x8_##T##_##LEVEL(int64_t k, const void *w, int64_t n_rows, const void *act, uint64_t act_stride,  \
                                     int n_act, const void *prep, float *y, int64_t ldy) {                          \
        x8_matvec(TYPE, k, w, n_rows, act, act_stride, n_act, prep, y, ldy);                                        \
    }
#define X8_KERNELS(LEVEL)                                                                                            \
    X8_MATVEC(q4_0, PKV_TYPE_Q4_0, LEVEL)                                                                            \
    X8_MATVEC(q5_0, PKV_TYPE_Q5_0, LEVEL)                                                                            \
    X8_MATVEC(q8_0, PKV_TYPE_Q8_0, LEVEL)                                                                            \
    X8_MATVEC(q4_K, PKV_TYPE_Q4_K, LEVEL)                                                                            \
    X8_MATVEC(q6_K, PKV_TYPE_Q6_K, LEVEL)                                                                            \
    void pkv_matvec_x8_prepare_##LEVEL(uint32_t type, int64_t k, const void *act, uint64_t act_stride, int n_act,   \
                                       void *prep) {                                                                 \
        x8_matvec_prepare(type, k, act, act_stride, n_act, prep);                                                    \
    }                                                                                                                \
    void pkv_x8_stage_##LEVEL(uint32_t type, const pkv_x8_group *grp, int64_t b0, int64_t nb, uint8_t *u,          \
                              size_t u_stride, float *dw, size_t dw_stride) {                                        \
        x8_stage(type, grp, b0, nb, u, u_stride, dw, dw_stride);                                                     \
    }                                                                                                                \
    void pkv_x8_stage_kquant_##LEVEL(uint32_t type, const pkv_x8_group *grp, int64_t b0, int64_t nb,               \
                                     struct kquant_stage *st, bool pair_scales) {                                    \
        x8_stage_kquant(type, grp, b0, nb, st, pair_scales);                                                         \
    }

#endif
