/* Eight-row interleaved weights (kernels/repack.h): the layout keeps every
 * quant and scale, the decode kernel computes its scalar reference's bits
 * whatever the number of activation rows, and that reference is the GGUF
 * rows' dot product up to float rounding. */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/prng.h"
#include "kernels/f16.h"
#include "kernels/quant.h"
#include "kernels/repack.h"
#include "test.h"

static const uint32_t x8_types[] = {PKV_TYPE_Q4_0, PKV_TYPE_Q5_0, PKV_TYPE_Q8_0, PKV_TYPE_Q4_K, PKV_TYPE_Q6_K};
#define N_X8_TYPES (int)(sizeof x8_types / sizeof x8_types[0])

/* Where a GGUF block's fp16 scale d lies. */
static uint64_t d_offset(uint32_t type) { return type == PKV_TYPE_Q6_K ? offsetof(block_q6_K, d) : 0; }

static float rng_sym(uint64_t *s) { return (float)((double)(pkv_splitmix64(s) >> 11) / 9007199254740992.0 * 2.0 - 1.0); }

/* Random quant bytes with finite fp16 scales of magnitude up to mag (either
 * sign; Q4_K's d and dmin, Q6_K's d at the block's end); extreme = 1: every
 * quant byte 0x80, 2: 0xFF (the types' extremes; all of Q4_K's 6-bit scales
 * and mins 63 with 0xFF, Q6_K's scales -128 and -1). */
static void random_rows(uint32_t type, int64_t k, int64_t m, uint8_t *w, uint64_t *rng, float mag, int extreme) {
    const pkv_type_info *ti = pkv_type_get(type);
    const uint64_t bytes = pkv_row_bytes(type, k) * (uint64_t)m;
    for (uint64_t i = 0; i < bytes; i++) w[i] = extreme ? (extreme == 1 ? 0x80 : 0xFF) : (uint8_t)pkv_splitmix64(rng);
    for (uint64_t b = 0; b < bytes; b += (uint64_t)ti->block_bytes) {
        const uint16_t h = pkv_f32_to_f16(extreme ? 1.0f : rng_sym(rng) * mag);
        memcpy(w + b + d_offset(type), &h, 2);
        if (type == PKV_TYPE_Q4_K) {
            const uint16_t hm = pkv_f32_to_f16(extreme ? 0.5f : rng_sym(rng) * mag);
            memcpy(w + b + 2, &hm, 2);
        }
    }
}

static bool same_bits(float a, float b) { return pkv_f32_to_bits(a) == pkv_f32_to_bits(b); }

/* Row by row, the interleaved layout dequantises to exactly the GGUF row and
 * gives back the file's bytes (pkv_x8_file_rows), over a whole run and a run
 * of one group, spans of 24, 24 and 2 blocks (Q4_K: 3, 3, 3 and 1
 * super-blocks); and the blocks lie where repack.h says, by hand: in the
 * first run (8 groups), row 8's (group 1's) block 24 is the second span's
 * second piece, after the first span's 8 x 24 blocks and group 0's 24 of the
 * second span; in the second run (group 8 alone), row 64's block 49 follows
 * the first run's 8 x 50 blocks and its own 49. Q4_K by the same rule: row
 * 8's super-block 3 at 8 x 3 + 3, row 64's super-block 9 at 8 x 10 + 9. */
TEST(repack_rows_dequantise_as_the_file) {
    const pkv_kernels *sk = pkv_kernels_get(PKV_SIMD_SCALAR);
    uint64_t rng = 11;
    for (int ti = 0; ti < N_X8_TYPES; ti++) {
        const uint32_t type = x8_types[ti];
        const bool kq = pkv_x8_block_cols(type) == QK_K;
        const int64_t K = kq ? 2560 : 1600, M = 72;
        const uint64_t rb = pkv_row_bytes(type, K), bb = pkv_x8_block_bytes(type);
        const pkv_type_info *info = pkv_type_get(type);
        uint8_t *w = malloc(rb * M), *w8 = malloc(rb * M), *back = malloc(rb * 8);
        float want[2560], got[2560];
        random_rows(type, K, M, w, &rng, 0.5f, 0);
        CHECK(pkv_x8_supported(type, K, M));
        CHECK(!pkv_x8_supported(type, K, M - 4));
        CHECK(!kq || !pkv_x8_supported(type, K + 32, M)); /* Q4_K: whole super-blocks */
        pkv_x8_repack(type, w, rb, K, M, w8);
        CHECK_MSG(memcmp(w, w8, rb * M) != 0, "%s: the layout did not change", info->name);
        /* an interleaved block starts with its 8 rows' fp16 scales */
        const int64_t at8 = kq ? 8 * 3 + 3 : 8 * 24 + 24, b8 = kq ? 3 : 24;
        const int64_t at64 = kq ? 8 * 10 + 9 : 8 * 50 + 49, b64 = kq ? 9 : 49;
        CHECK(memcmp(w8 + at8 * bb, w + 8 * rb + b8 * info->block_bytes + d_offset(type), 2) == 0);
        CHECK(memcmp(w8 + at64 * bb, w + 64 * rb + b64 * info->block_bytes + d_offset(type), 2) == 0);
        for (int64_t m = 0; m < M; m++) {
            const pkv_x8_group grp = pkv_x8_group_of(type, w8, K, M, m / 8);
            sk->dequant[type](w + m * rb, want, K);
            pkv_x8_dequant_row(type, &grp, (int)(m % 8), got);
            for (int e = 0; e < K; e++)
                CHECK_MSG(same_bits(want[e], got[e]), "%s row %lld element %d: %g vs %g", info->name, (long long)m, e,
                          got[e], want[e]);
            if (m % 8 == 0) {
                pkv_x8_file_rows(type, &grp, 0, grp.nb, back, rb);
                CHECK_MSG(memcmp(back, w + m * rb, rb * 8) == 0, "%s group %lld: not the file's bytes", info->name,
                          (long long)m / 8);
            }
        }
        free(w), free(w8), free(back);
    }
    CHECK(!pkv_x8_supported(PKV_TYPE_Q5_K, 256, 8));
}

/* Weight row w (dequantised into tmp) dotted with x in double; *mag: the
 * sum of the products' magnitudes (what float rounding scales with). */
static float dequant_dot(const pkv_kernels *sk, uint32_t type, const uint8_t *w, const float *x, int64_t K, float *tmp,
                         double *mag) {
    sk->dequant[type](w, tmp, K);
    double s = 0.0, m = 0.0;
    for (int64_t i = 0; i < K; i++) s += (double)tmp[i] * x[i], m += fabs((double)tmp[i] * x[i]);
    *mag = m;
    return (float)s;
}

/* The vector kernel against its scalar reference, bit for bit, for 1..9
 * activation rows at once (every row's result as when it is alone), block
 * counts odd and even, random and extreme quants, rows short enough for one
 * span of 24 blocks and rows of several spans (an odd last span at K = 2080;
 * at K = 8224 too many blocks for the AVX-512 kernel's pairs), over one run
 * and a part (9 groups) or two and a part (19 groups), with the activations
 * prepared by the kernel itself and beforehand (matvec_x8_prepare, into a
 * buffer of garbage); and the reference against the GGUF rows' vec_dot
 * within float rounding. */
TEST(repack_matvec_equals_reference) {
    const pkv_kernels *sk = pkv_kernels_get(PKV_SIMD_SCALAR);
    enum { MAX_ACT = 9 };
    static const int64_t lengths[] = {32, 96, 896, 1280, 2048, 2080, 4160, 8224};
    /* K-quants: one super-block, one span of 3 and 4, spans of 3 + 2, 3 x 3 + 1 and Qwen's ffn_down (19) */
    static const int64_t k_lengths[] = {256, 768, 1024, 1280, 2560, 4864};
    uint64_t rng = 5;
    int checked = 0;
    for (pkv_simd level = PKV_SIMD_AVX2; level <= pkv_simd_detect(); level++)
    for (int ti = 0; ti < N_X8_TYPES; ti++) {
        const pkv_kernels *k = pkv_kernels_get(level);
        const uint32_t type = x8_types[ti];
        const bool kq = pkv_x8_block_cols(type) == QK_K;
        CHECK_MSG(k->matvec_x8[type] != NULL, "%s: no interleaved kernel at %s", pkv_type_get(type)->name,
                  pkv_simd_name(level));
        if (!k->matvec_x8[type]) continue;
        const int n_lengths = kq ? (int)(sizeof k_lengths / sizeof k_lengths[0]) : (int)(sizeof lengths / sizeof lengths[0]);
        for (int li = 0; li < n_lengths; li++) {
            const int64_t K = kq ? k_lengths[li] : lengths[li], M = K >= 2048 ? 152 : 72;
            const uint64_t rb = pkv_row_bytes(type, K), ab = pkv_row_bytes(PKV_TYPE_Q8_0, K);
            uint8_t *w = malloc(rb * M), *w8 = malloc(rb * M), *act = malloc(ab * MAX_ACT);
            float *x = malloc(sizeof(float) * K);
            float *got = malloc(sizeof(float) * MAX_ACT * M), *ref = malloc(sizeof(float) * MAX_ACT * M);
            float *one = malloc(sizeof(float) * M), *wrow = malloc(sizeof(float) * K);
            uint8_t *prep = malloc(pkv_x8_prep_bytes(K, MAX_ACT));
            for (int rep = 0; rep < 3; rep++) {
                random_rows(type, K, M, w, &rng, 0.1f, rep);
                for (int a = 0; a < MAX_ACT; a++) {
                    for (int64_t i = 0; i < K; i++) x[i] = rep ? ((a + i) % 2 ? -1.0f : 1.0f) : rng_sym(&rng) * 3.0f;
                    k->quantize[PKV_TYPE_Q8_0](x, act + a * ab, K);
                }
                pkv_x8_repack(type, w, rb, K, M, w8);
                pkv_matvec_x8_ref(type, K, w8, M, act, ab, MAX_ACT, ref, M);
                for (int n_act = 1; n_act <= MAX_ACT; n_act++)
                    for (int prepared = 0; prepared < 2; prepared++) {
                        if (prepared) {
                            memset(prep, 0xA5, pkv_x8_prep_bytes(K, n_act));
                            k->matvec_x8_prepare(type, K, act, ab, n_act, prep);
                        }
                        k->matvec_x8[type](K, w8, M, act, ab, n_act, prepared ? prep : NULL, got, M);
                        for (int i = 0; i < n_act * M; i++) {
                            CHECK_MSG(same_bits(got[i], ref[i]),
                                      "%s %s K=%lld rep %d n_act %d%s act %d row %d: %.9g vs ref %.9g",
                                      pkv_type_get(type)->name, pkv_simd_name(level), (long long)K, rep, n_act,
                                      prepared ? " prepared" : "", (int)(i / M), (int)(i % M), got[i], ref[i]);
                            checked++;
                        }
                    }
                /* the reference is the dot product of the file's rows (the
                 * K-quants, whose vec_dot takes Q8_K rows: of the rows
                 * dequantised, in double) */
                for (int a = 0; a < MAX_ACT; a++) {
                    if (kq) sk->dequant[PKV_TYPE_Q8_0](act + a * ab, x, K);
                    for (int64_t m = 0; m < M; m++) {
                        double mag = 0.0;
                        const float want = kq ? dequant_dot(sk, type, w + m * rb, x, K, wrow, &mag)
                                              : sk->vec_dot[type](K, w + m * rb, act + a * ab);
                        /* the file's vec_dot: as before; the K-quants, whose scaled terms
                         * are large and cancel: 2e-5 of the products' magnitudes */
                        const float tol = kq ? (float)(2e-5 * mag) : 1e-5f * (fabsf(want) + 1e-3f * (float)K * 128.0f);
                        CHECK_MSG(fabsf(ref[a * M + m] - want) <= tol, "%s K=%lld rep %d: %.9g vs vec_dot %.9g",
                                  pkv_type_get(type)->name, (long long)K, rep, ref[a * M + m], want);
                    }
                }
                /* a range of rows from the second run to the end is a matrix of its own */
                for (int prepared = 0; prepared < 2; prepared++) {
                    if (prepared) k->matvec_x8_prepare(type, K, act, ab, 1, prep);
                    k->matvec_x8[type](K, w8 + PKV_X8_RUN_ROWS * rb, M - PKV_X8_RUN_ROWS, act, ab, 1,
                                       prepared ? prep : NULL, one, M);
                    for (int m = 0; m < M - PKV_X8_RUN_ROWS; m++) CHECK(same_bits(one[m], ref[PKV_X8_RUN_ROWS + m]));
                }
            }
            free(w), free(w8), free(act), free(x), free(got), free(ref), free(one), free(wrow), free(prep);
        }
    }
    /* where the CPU has AVX2, the kernels were there to check */
    CHECK(pkv_simd_detect() < PKV_SIMD_AVX2 || checked > 0);
}
