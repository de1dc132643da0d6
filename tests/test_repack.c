/* Eight-row interleaved weights (kernels/repack.h): the layout keeps every
 * quant and scale, the decode kernel computes its scalar reference's bits
 * whatever the number of activation rows, and that reference is the GGUF
 * rows' dot product up to float rounding. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/prng.h"
#include "kernels/f16.h"
#include "kernels/quant.h"
#include "kernels/repack.h"
#include "test.h"

static const uint32_t x8_types[] = {PKV_TYPE_Q4_0, PKV_TYPE_Q5_0, PKV_TYPE_Q8_0};

static float rng_sym(uint64_t *s) { return (float)((double)(pkv_splitmix64(s) >> 11) / 9007199254740992.0 * 2.0 - 1.0); }

/* Random quant bytes with finite fp16 scales of magnitude up to mag (either
 * sign); extreme = 1: every quant byte 0x80, 2: 0xFF (the types' extremes). */
static void random_rows(uint32_t type, int64_t k, int64_t m, uint8_t *w, uint64_t *rng, float mag, int extreme) {
    const pkv_type_info *ti = pkv_type_get(type);
    const uint64_t bytes = pkv_row_bytes(type, k) * (uint64_t)m;
    for (uint64_t i = 0; i < bytes; i++) w[i] = extreme ? (extreme == 1 ? 0x80 : 0xFF) : (uint8_t)pkv_splitmix64(rng);
    for (uint64_t b = 0; b < bytes; b += (uint64_t)ti->block_bytes) {
        const uint16_t h = pkv_f32_to_f16(extreme ? 1.0f : rng_sym(rng) * mag);
        memcpy(w + b, &h, 2);
    }
}

static bool same_bits(float a, float b) { return pkv_f32_to_bits(a) == pkv_f32_to_bits(b); }

/* Row by row, the interleaved layout dequantises to exactly the GGUF row,
 * over a whole run and a run of one group, spans of 24, 24 and 2 blocks; and
 * the blocks lie where repack.h says, by hand: in the first run (8 groups),
 * row 8's (group 1's) block 24 is the second span's second piece, after the
 * first span's 8 x 24 blocks and group 0's 24 of the second span; in the
 * second run (group 8 alone), row 64's block 49 follows the first run's
 * 8 x 50 blocks and its own 49. */
TEST(repack_rows_dequantise_as_the_file) {
    const pkv_kernels *sk = pkv_kernels_get(PKV_SIMD_SCALAR);
    uint64_t rng = 11;
    for (int ti = 0; ti < 3; ti++) {
        const uint32_t type = x8_types[ti];
        const int64_t K = 1600, M = 72;
        const uint64_t rb = pkv_row_bytes(type, K), bb = pkv_x8_block_bytes(type);
        const pkv_type_info *info = pkv_type_get(type);
        uint8_t *w = malloc(rb * M), *w8 = malloc(rb * M);
        float want[1600], got[1600];
        random_rows(type, K, M, w, &rng, 0.5f, 0);
        CHECK(pkv_x8_supported(type, K, M));
        CHECK(!pkv_x8_supported(type, K, M - 4));
        pkv_x8_repack(type, w, rb, K, M, w8);
        CHECK_MSG(memcmp(w, w8, rb * M) != 0, "%s: the layout did not change", pkv_type_get(type)->name);
        /* an interleaved block starts with its 8 rows' fp16 scales */
        CHECK(memcmp(w8 + (8 * 24 + 24) * bb, w + 8 * rb + 24 * info->block_bytes, 2) == 0);
        CHECK(memcmp(w8 + (8 * 50 + 49) * bb, w + 64 * rb + 49 * info->block_bytes, 2) == 0);
        for (int64_t m = 0; m < M; m++) {
            sk->dequant[type](w + m * rb, want, K);
            pkv_x8_dequant_row(type, &(pkv_x8_group){w8, K / 32, M / 8, m / 8}, (int)(m % 8), got);
            for (int e = 0; e < K; e++)
                CHECK_MSG(same_bits(want[e], got[e]), "%s row %lld element %d: %g vs %g", pkv_type_get(type)->name,
                          (long long)m, e, got[e], want[e]);
        }
        free(w), free(w8);
    }
    CHECK(!pkv_x8_supported(PKV_TYPE_Q4_K, 256, 8));
}

/* The vector kernel against its scalar reference, bit for bit, for 1..9
 * activation rows at once (every row's result as when it is alone), block
 * counts odd and even, random and extreme quants, rows short enough for one
 * span of 24 blocks and rows of several spans (an odd last span at K = 2080),
 * over one run and a part (9 groups) or two and a part (19 groups); and the
 * reference against the GGUF rows'
 * vec_dot within float rounding. */
TEST(repack_matvec_equals_reference) {
    const pkv_kernels *sk = pkv_kernels_get(PKV_SIMD_SCALAR);
    enum { MAX_ACT = 9 };
    static const int64_t lengths[] = {32, 96, 896, 1280, 2048, 2080, 4160};
    uint64_t rng = 5;
    int checked = 0;
    for (pkv_simd level = PKV_SIMD_AVX2; level <= pkv_simd_detect(); level++)
    for (int ti = 0; ti < 3; ti++) {
        const pkv_kernels *k = pkv_kernels_get(level);
        const uint32_t type = x8_types[ti];
        CHECK_MSG(k->matvec_x8[type] != NULL, "%s: no interleaved kernel at %s", pkv_type_get(type)->name,
                  pkv_simd_name(level));
        if (!k->matvec_x8[type]) continue;
        for (int li = 0; li < (int)(sizeof lengths / sizeof lengths[0]); li++) {
            const int64_t K = lengths[li], M = K >= 2048 ? 152 : 72;
            const uint64_t rb = pkv_row_bytes(type, K), ab = pkv_row_bytes(PKV_TYPE_Q8_0, K);
            uint8_t *w = malloc(rb * M), *w8 = malloc(rb * M), *act = malloc(ab * MAX_ACT);
            float *x = malloc(sizeof(float) * K);
            float *got = malloc(sizeof(float) * MAX_ACT * M), *ref = malloc(sizeof(float) * MAX_ACT * M);
            float *one = malloc(sizeof(float) * M);
            for (int rep = 0; rep < 3; rep++) {
                random_rows(type, K, M, w, &rng, 0.1f, rep);
                for (int a = 0; a < MAX_ACT; a++) {
                    for (int64_t i = 0; i < K; i++) x[i] = rep ? ((a + i) % 2 ? -1.0f : 1.0f) : rng_sym(&rng) * 3.0f;
                    k->quantize[PKV_TYPE_Q8_0](x, act + a * ab, K);
                }
                pkv_x8_repack(type, w, rb, K, M, w8);
                pkv_matvec_x8_ref(type, K, w8, M, act, ab, MAX_ACT, ref, M);
                for (int n_act = 1; n_act <= MAX_ACT; n_act++) {
                    k->matvec_x8[type](K, w8, M, act, ab, n_act, got, M);
                    for (int i = 0; i < n_act * M; i++) {
                        CHECK_MSG(same_bits(got[i], ref[i]), "%s %s K=%lld rep %d n_act %d act %d row %d: %.9g vs ref %.9g",
                                  pkv_type_get(type)->name, pkv_simd_name(level), (long long)K, rep, n_act, (int)(i / M), (int)(i % M), got[i], ref[i]);
                        checked++;
                    }
                }
                /* the reference is the dot product of the file's rows */
                for (int a = 0; a < MAX_ACT; a++) {
                    for (int64_t m = 0; m < M; m++) {
                        const float want = sk->vec_dot[type](K, w + m * rb, act + a * ab);
                        const float tol = 1e-5f * (fabsf(want) + 1e-3f * (float)K * 128.0f);
                        CHECK_MSG(fabsf(ref[a * M + m] - want) <= tol, "%s K=%lld rep %d: %.9g vs vec_dot %.9g",
                                  pkv_type_get(type)->name, (long long)K, rep, ref[a * M + m], want);
                    }
                }
                /* a range of rows from the second run to the end is a matrix of its own */
                k->matvec_x8[type](K, w8 + PKV_X8_RUN_ROWS * rb, M - PKV_X8_RUN_ROWS, act, ab, 1, one, M);
                for (int m = 0; m < M - PKV_X8_RUN_ROWS; m++) CHECK(same_bits(one[m], ref[PKV_X8_RUN_ROWS + m]));
            }
            free(w), free(w8), free(act), free(x), free(got), free(ref), free(one);
        }
    }
    /* where the CPU has AVX2, the kernels were there to check */
    CHECK(pkv_simd_detect() < PKV_SIMD_AVX2 || checked > 0);
}
