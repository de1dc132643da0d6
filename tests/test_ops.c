/*
 * Tests for the batched matmul kernels (src/kernels/gemm*.c), the matmul
 * driver and elementwise ops (src/kernels/ops.c), the exp/GELU/SiLU kernels
 * (src/kernels/vec*.c) and the thread pool (src/base/threads.c).
 *
 * References: the batched kernels must reproduce the single-row fused dot
 * products (quant.h vec_dot, themselves tested against the formulas in
 * test_quant.c) to float rounding, and be bit-identical across SIMD levels,
 * tilings and thread counts. Float weights are checked against a double
 * precision dot product; exp against libm's double exp; GELU and SiLU
 * against their definitions evaluated in double.
 */
#include <math.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/prng.h"
#include "base/threads.h"
#include "kernels/f16.h"
#include "kernels/levels.h"
#include "kernels/repack.h"
#include "kernels/ops.h"
#include "kernels/quant.h"
#include "test.h"

/* ------------------------------------------------------------------ utilities */

static float rng_sym(uint64_t *s) { return (float)((pkv_splitmix64(s) >> 40) * (2.0 / 16777216.0) - 1.0); }

static int n_levels(pkv_simd out[3]) {
    int n = 0;
    for (pkv_simd l = PKV_SIMD_SCALAR; l <= PKV_SIMD_AVX512; l++)
        if (l <= pkv_simd_detect()) out[n++] = l;
    return n;
}

static const uint32_t gemm_types[] = {PKV_TYPE_F32,  PKV_TYPE_F16,  PKV_TYPE_Q4_0, PKV_TYPE_Q5_0,
                                      PKV_TYPE_Q8_0, PKV_TYPE_Q4_K, PKV_TYPE_Q5_K, PKV_TYPE_Q6_K};
#define N_GEMM_TYPES (int)(sizeof gemm_types / sizeof gemm_types[0])

/* Random bytes with every fp16 scale replaced by a finite value of magnitude
 * up to mag: all quant codes (Q8_0 -128, Q6_K scale -128, 6-bit scales of 63)
 * occur. */
static void random_rows(uint32_t type, int64_t k, int64_t rows, uint8_t *w, uint64_t *rng, float mag) {
    const uint64_t rb = pkv_row_bytes(type, k);
    for (uint64_t i = 0; i < rb * (uint64_t)rows; i++) w[i] = (uint8_t)pkv_splitmix64(rng);
    const pkv_type_info *ti = pkv_type_get(type);
    const int64_t nb = k / ti->block_elems * rows;
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *p = w + b * ti->block_bytes;
        uint16_t h1 = pkv_f32_to_f16(rng_sym(rng) * mag), h2 = pkv_f32_to_f16(rng_sym(rng) * mag);
        switch (type) {
        case PKV_TYPE_F32: {
            const float v = rng_sym(rng) * mag;
            memcpy(p, &v, 4);
            break;
        }
        case PKV_TYPE_F16:
        case PKV_TYPE_Q4_0:
        case PKV_TYPE_Q5_0:
        case PKV_TYPE_Q8_0: memcpy(p, &h1, 2); break;
        case PKV_TYPE_Q4_K:
        case PKV_TYPE_Q5_K:
            memcpy(p, &h1, 2);
            memcpy(p + 2, &h2, 2);
            break;
        case PKV_TYPE_Q6_K: memcpy(p + 208, &h1, 2); break;
        }
    }
}

static void random_acts(float *x, int64_t n, uint64_t *rng) {
    for (int64_t i = 0; i < n; i++) {
        x[i] = rng_sym(rng);
        if (pkv_splitmix64(rng) % 50 == 0) x[i] *= 30.0f; /* a few outliers, as real activations have */
    }
}

static int64_t k_for(uint32_t type) {
    /* two K chunks: 1280 = 1024 + 256 elements; floats 300 = 256 + 44 */
    return type == PKV_TYPE_F32 || type == PKV_TYPE_F16 ? 300 : 1280;
}

/* The scalar reference of a batched kernel (gemm.c). */
static pkv_gemm_fn ref_gemm(uint32_t type) {
    switch (type) {
    case PKV_TYPE_F32: return pkv_gemm_f32_ref;
    case PKV_TYPE_F16: return pkv_gemm_f16_ref;
    case PKV_TYPE_Q4_0: return pkv_gemm_q4_0_ref;
    case PKV_TYPE_Q5_0: return pkv_gemm_q5_0_ref;
    case PKV_TYPE_Q8_0: return pkv_gemm_q8_0_ref;
    case PKV_TYPE_Q4_K: return pkv_gemm_q4_K_ref;
    case PKV_TYPE_Q5_K: return pkv_gemm_q5_K_ref;
    default: return pkv_gemm_q6_K_ref;
    }
}

/* The batched product through the kernels alone: pack with the table's
 * quantiser, then tiles of 8 rows over K chunks of `chunk` elements and
 * `groups_per_call` groups per call with `gemm`; the last chunk writes
 * y[t][m]. */
static void gemm_product_x8(const pkv_kernels *kern, pkv_gemm_fn gemm, uint32_t type, const uint8_t *w, bool x8,
                            int64_t M, int64_t K, const float *x, int n_tok, int64_t chunk, int groups_per_call,
                            float *y) {
    const pkv_pack_kind kind = pkv_pack_kind_of(type);
    const uint64_t gb = pkv_pack_group_bytes(kind, K);
    const int n_groups = (n_tok + PKV_GEMM_TOK - 1) / PKV_GEMM_TOK;
    uint8_t *packed = malloc(gb * (size_t)n_groups);
    void *tmp = malloc((size_t)K * 4);
    float *acc = malloc((size_t)n_groups * PKV_GEMM_ROWS * PKV_GEMM_TOK * sizeof(float));
    for (int g = 0; g < n_groups; g++) {
        const int n = n_tok - g * PKV_GEMM_TOK < PKV_GEMM_TOK ? n_tok - g * PKV_GEMM_TOK : PKV_GEMM_TOK;
        pkv_gemm_pack(kern, kind, x + (int64_t)g * PKV_GEMM_TOK * K, K, n, K, packed + (size_t)g * gb, tmp);
    }
    const uint64_t rb = pkv_row_bytes(type, K);
    for (int64_t m0 = 0; m0 < M; m0 += PKV_GEMM_ROWS) {
        for (int g0 = 0; g0 < n_groups; g0 += groups_per_call) {
            pkv_gemm_args a = {
                .w = w + m0 * rb,
                .x8 = x8 ? pkv_x8_group_of(type, w, K, M, m0 / PKV_X8_ROWS) : (pkv_x8_group){0},
                .row_bytes = rb,
                .n_rows = M - m0 < PKV_GEMM_ROWS ? (int)(M - m0) : PKV_GEMM_ROWS,
                .act = packed + (size_t)g0 * gb,
                .group_bytes = gb,
                .n_groups = n_groups - g0 < groups_per_call ? n_groups - g0 : groups_per_call,
                .acc = acc,
                .ldy = M,
                .y_tokens = n_tok - g0 * PKV_GEMM_TOK,
            };
            for (int64_t k0 = 0; k0 < K; k0 += chunk) {
                a.k0 = k0;
                a.k1 = k0 + chunk < K ? k0 + chunk : K;
                a.init = k0 == 0;
                a.y = a.k1 == K ? y + (int64_t)g0 * PKV_GEMM_TOK * M + m0 : NULL;
                gemm(&a);
            }
        }
    }
    free(packed);
    free(tmp);
    free(acc);
}

static void gemm_product(const pkv_kernels *kern, pkv_gemm_fn gemm, uint32_t type, const uint8_t *w, int64_t M,
                         int64_t K, const float *x, int n_tok, int64_t chunk, int groups_per_call, float *y) {
    gemm_product_x8(kern, gemm, type, w, false, M, K, x, n_tok, chunk, groups_per_call, y);
}

static bool same_floats(const float *a, const float *b, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (pkv_f32_to_bits(a[i]) != pkv_f32_to_bits(b[i])) return false;
    return true;
}

/* ------------------------------------------------------------------ batched kernels */

/* Every SIMD level computes the scalar reference's bits, whatever the K
 * chunking and however many token groups one call takes; rows past the last
 * tile and tokens past the last are left alone. The scalar table has no
 * batched kernels (its matmuls take the vec_dot path). */
TEST(ops_gemm_levels_and_tilings_bit_identical) {
    pkv_simd lv[3];
    const int nl = n_levels(lv);
    uint64_t rng = 7;
    const int64_t M = 11;
    const int n_tok = 21;
    for (int ti = 0; ti < N_GEMM_TYPES; ti++) {
        const uint32_t type = gemm_types[ti];
        const int64_t K = k_for(type);
        const int64_t block = pkv_pack_block_elems(pkv_pack_kind_of(type));
        uint8_t *w = malloc(pkv_row_bytes(type, K) * (size_t)M);
        float *x = malloc((size_t)n_tok * K * sizeof(float));
        float *want = malloc((size_t)(n_tok + 1) * M * sizeof(float)), *got = malloc((size_t)(n_tok + 1) * M * sizeof(float));
        random_rows(type, K, M, w, &rng, 0.1f);
        random_acts(x, (int64_t)n_tok * K, &rng);
        for (int64_t i = 0; i < (n_tok + 1) * M; i++) want[i] = -7.0f;
        const pkv_kernels *sk = pkv_kernels_get(PKV_SIMD_SCALAR);
        CHECK(sk->gemm[type] == NULL);
        gemm_product(sk, ref_gemm(type), type, w, M, K, x, n_tok, pkv_pack_max_chunk(pkv_pack_kind_of(type)), 2, want);
        for (int64_t m = 0; m < M; m++) CHECK_MSG(want[(int64_t)n_tok * M + m] == -7.0f, "wrote past the last token");
        for (int li = 1; li < nl; li++) {
            const pkv_kernels *k = pkv_kernels_get(lv[li]);
            REQUIRE(k->gemm[type]);
            const int64_t chunks[2] = {pkv_pack_max_chunk(pkv_pack_kind_of(type)), block * 3};
            for (int c = 0; c < 2; c++) {
                for (int gpc = 1; gpc <= 2; gpc++) {
                    for (int64_t i = 0; i < (n_tok + 1) * M; i++) got[i] = -7.0f;
                    gemm_product(k, k->gemm[type], type, w, M, K, x, n_tok, chunks[c], gpc, got);
                    CHECK_MSG(same_floats(want, got, (size_t)(n_tok + 1) * M), "%s %s chunk %lld groups/call %d differs",
                              pkv_type_get(type)->name, pkv_simd_name(lv[li]), (long long)chunks[c], gpc);
                }
            }
        }
        free(w), free(x), free(want), free(got);
    }
}

/* On weights interleaved by 8 rows (kernels/repack.h) the batched kernels of
 * a table that interleaves them, and the scalar reference, stage the same
 * quants and scales as from the file's rows: the same bits (9 groups: a run
 * and a run of one; K chunks of 5 blocks, one across a span's end; the
 * K-quants: chunks of 2 super-blocks, the second across the span's end
 * after 3). */
TEST(ops_gemm_interleaved_weights_bit_identical) {
    static const uint32_t types[] = {PKV_TYPE_Q4_0, PKV_TYPE_Q5_0, PKV_TYPE_Q8_0, PKV_TYPE_Q4_K, PKV_TYPE_Q6_K};
    const pkv_kernels *sk = pkv_kernels_get(PKV_SIMD_SCALAR);
    uint64_t rng = 13;
    const int64_t M = 72, K = 1280;
    const int n_tok = 21;
    for (int ti = 0; ti < (int)(sizeof types / sizeof types[0]); ti++) {
        const uint32_t type = types[ti];
        const uint64_t rb = pkv_row_bytes(type, K);
        const int64_t small_chunk = pkv_x8_block_cols(type) == QK_K ? 512 : 160;
        uint8_t *w = malloc(rb * M), *w8 = malloc(rb * M);
        float *x = malloc((size_t)n_tok * K * sizeof(float));
        float *want = malloc((size_t)n_tok * M * sizeof(float)), *got = malloc((size_t)n_tok * M * sizeof(float));
        random_rows(type, K, M, w, &rng, 0.1f);
        random_acts(x, (int64_t)n_tok * K, &rng);
        pkv_x8_repack(type, w, rb, K, M, w8);
        gemm_product(sk, ref_gemm(type), type, w, M, K, x, n_tok, 1024, 2, want);
        gemm_product_x8(sk, ref_gemm(type), type, w8, true, M, K, x, n_tok, 1024, 2, got);
        CHECK_MSG(same_floats(want, got, (size_t)n_tok * M), "%s: reference on interleaved rows differs",
                  pkv_type_get(type)->name);
        for (pkv_simd level = PKV_SIMD_AVX2; level <= pkv_simd_detect(); level++) {
            const pkv_kernels *k = pkv_kernels_get(level);
            CHECK_MSG(k->matvec_x8[type] && k->gemm[type], "%s: %s interleaves without both kernels",
                      pkv_type_get(type)->name, pkv_simd_name(level));
            if (!k->matvec_x8[type]) continue;
            for (int c = 0; c < 2; c++) {
                memset(got, 0, (size_t)n_tok * M * sizeof(float));
                gemm_product_x8(k, k->gemm[type], type, w8, true, M, K, x, n_tok, c ? small_chunk : 1024, 1 + c, got);
                CHECK_MSG(same_floats(want, got, (size_t)n_tok * M), "%s %s chunk %lld: interleaved rows differ",
                          pkv_type_get(type)->name, pkv_simd_name(k->level), (long long)(c ? small_chunk : 1024));
            }
        }
        free(w), free(w8), free(x), free(want), free(got);
    }
}

/* The batched kernels and the single-row vec_dot compute the same sum of the
 * same integer block products; only the float accumulation order differs. */
TEST(ops_gemm_matches_vec_dot) {
    uint64_t rng = 11;
    const int64_t M = 9;
    const int n_tok = 18;
    const pkv_kernels *sk = pkv_kernels_get(PKV_SIMD_SCALAR);
    for (int ti = 0; ti < N_GEMM_TYPES; ti++) {
        const uint32_t type = gemm_types[ti];
        const int64_t K = k_for(type);
        const pkv_type_info *info = pkv_type_get(type);
        const uint64_t rb = pkv_row_bytes(type, K), ab = pkv_row_bytes(info->act_type, K);
        uint8_t *w = malloc(rb * (size_t)M), *a = malloc(ab);
        float *x = malloc((size_t)n_tok * K * sizeof(float)), *y = malloc((size_t)n_tok * M * sizeof(float));
        float *wd = malloc((size_t)K * sizeof(float)), *ad = malloc((size_t)K * sizeof(float));
        for (int rep = 0; rep < 2; rep++) {
            random_rows(type, K, M, w, &rng, rep ? 3.0f : 0.02f);
            random_acts(x, (int64_t)n_tok * K, &rng);
            gemm_product(sk, ref_gemm(type), type, w, M, K, x, n_tok, pkv_pack_max_chunk(pkv_pack_kind_of(type)), 4, y);
            for (int t = 0; t < n_tok; t++) {
                sk->quantize[info->act_type](x + (int64_t)t * K, a, K);
                if (info->act_type == PKV_TYPE_F32) memcpy(ad, a, (size_t)K * sizeof(float));
                else sk->dequant[info->act_type](a, ad, K);
                for (int64_t m = 0; m < M; m++) {
                    const float want = sk->vec_dot[type](K, w + m * rb, a);
                    sk->dequant[type](w + m * rb, wd, K);
                    double mag = 0.0;
                    for (int64_t e = 0; e < K; e++) mag += fabs((double)wd[e] * ad[e]);
                    const double got = y[(int64_t)t * M + m];
                    CHECK_MSG(fabs(got - want) <= 1e-5 * mag + 1e-30, "%s token %d row %lld: %.9g vs vec_dot %.9g (mag %.3g)",
                              info->name, t, (long long)m, got, want, mag);
                }
            }
        }
        free(w), free(a), free(x), free(y), free(wd), free(ad);
    }
}

/* ------------------------------------------------------------------ matmul driver */

typedef struct {
    pkv_tensor t;
    uint8_t *data;
} weight;

static weight make_weight(uint32_t type, int64_t k, int64_t m, uint64_t *rng) {
    weight w;
    w.data = malloc(pkv_row_bytes(type, k) * (size_t)m);
    random_rows(type, k, m, w.data, rng, 0.05f);
    w.t = (pkv_tensor){.name = "w", .type = type, .ne = {k, m, 1, 1}, .data = w.data};
    w.t.row_bytes = pkv_row_bytes(type, k);
    w.t.nbytes = w.t.row_bytes * (uint64_t)m;
    return w;
}

/* pkv_matmul gives the same bits with 1, 2 and 3 threads, on both paths
 * (1 and 3 tokens: vec_dot; 4 and 37: batched), and a fused pkv_matmul_n
 * gives the same bits as separate calls. */
TEST(ops_matmul_threads_and_fusion_bit_identical) {
    uint64_t rng = 3;
    const int toks[] = {1, 3, 4, 37};
    const int64_t K = 512, M = 200;
    const pkv_kernels *kern = pkv_kernels_get(PKV_SIMD_AUTO);
    pkv_pool *pools[3];
    for (int i = 0; i < 3; i++) pools[i] = pkv_pool_new(i + 1);
    float *x = malloc(37 * K * sizeof(float));
    random_acts(x, 37 * K, &rng);
    size_t sb = pkv_matmul_scratch_bytes(K, 37, 3);
    void *scratch = malloc(sb);
    float *want = malloc(37 * M * sizeof(float)), *got = malloc(37 * M * sizeof(float));
    float *y2 = malloc(37 * M * sizeof(float)), *y3 = malloc(37 * M * sizeof(float));
    for (int ti = 0; ti < N_GEMM_TYPES; ti++) {
        weight w = make_weight(gemm_types[ti], K, M, &rng);
        weight w2 = make_weight(gemm_types[(ti + 3) % N_GEMM_TYPES], K, M / 2, &rng);
        for (size_t n = 0; n < sizeof toks / sizeof *toks; n++) {
            const int nt = toks[n];
            pkv_compute c1 = {.kern = kern, .pool = pools[0]};
            pkv_matmul(&c1, &w.t, x, nt, want, scratch);
            for (int p = 1; p < 3; p++) {
                pkv_compute c = {.kern = kern, .pool = pools[p]};
                pkv_matmul(&c, &w.t, x, nt, got, scratch);
                CHECK_MSG(same_floats(want, got, (size_t)nt * M), "%s, %d tokens: %d threads differ from 1",
                          pkv_type_get(w.t.type)->name, nt, p + 1);
            }
            /* fused with a second weight of another type, and the first again */
            pkv_compute c3 = {.kern = kern, .pool = pools[2]};
            const pkv_tensor *ws[3] = {&w2.t, &w.t, &w.t};
            float *ys[3] = {y2, got, y3};
            memset(got, 0, (size_t)nt * M * sizeof(float));
            pkv_matmul_n(&c3, 3, ws, x, nt, ys, scratch);
            CHECK_MSG(same_floats(want, got, (size_t)nt * M) && same_floats(want, y3, (size_t)nt * M),
                      "%s, %d tokens: fused differs", pkv_type_get(w.t.type)->name, nt);
            pkv_matmul(&c1, &w2.t, x, nt, want, scratch);
            CHECK_MSG(same_floats(want, y2, (size_t)nt * (M / 2)), "%s, %d tokens: fused second weight differs",
                      pkv_type_get(w2.t.type)->name, nt);
        }
        free(w.data);
        free(w2.data);
    }
    for (int i = 0; i < 3; i++) pkv_pool_free(pools[i]);
    free(x), free(scratch), free(want), free(got), free(y2), free(y3);
}

/* Q4_K and Q6_K weights interleaved by 8 rows (kernels/repack.h) through the
 * matmul driver, at each level that interleaves them: prefill (37 tokens, the batched
 * kernel on the tile's rows put back into the file's layout, K chunks of
 * 1024 and a last of 768) gives the file layout's bits; decode (1 and 3
 * tokens) gives the interleaved kernel's reference on the tokens' Q8_0 rows,
 * on 1 and 2 threads. */
static void interleaved_through_matmul(uint32_t type) {
    uint64_t rng = 29;
    const int64_t K = 4864, M = 136;
    const int toks[] = {1, 3, 37};
    weight w = make_weight(type, K, M, &rng);
    uint8_t *w8 = malloc(w.t.nbytes), *q = malloc(pkv_row_bytes(PKV_TYPE_Q8_0, K) * 37);
    pkv_x8_repack(type, w.data, w.t.row_bytes, K, M, w8);
    pkv_tensor t8 = w.t;
    t8.data = w8;
    t8.x8 = true;
    float *x = malloc(37 * K * sizeof(float)), *want = malloc(37 * M * sizeof(float)), *got = malloc(37 * M * sizeof(float));
    random_acts(x, 37 * K, &rng);
    void *scratch = malloc(pkv_matmul_scratch_bytes(K, 37, 2));
    int checked = 0;
    for (pkv_simd level = PKV_SIMD_AVX2; level <= pkv_simd_detect(); level++) {
        const pkv_kernels *kern = pkv_kernels_get(level);
        if (!kern->matvec_x8[type]) continue;
        for (int th = 1; th <= 2; th++) {
            pkv_pool *pool = pkv_pool_new(th);
            const pkv_compute c = {.kern = kern, .pool = pool};
            for (size_t n = 0; n < sizeof toks / sizeof *toks; n++) {
                const int nt = toks[n];
                if (nt < 4) {
                    const uint64_t ab = pkv_row_bytes(PKV_TYPE_Q8_0, K);
                    for (int t = 0; t < nt; t++) kern->quantize[PKV_TYPE_Q8_0](x + t * K, q + t * ab, K);
                    pkv_matvec_x8_ref(type, K, w8, M, q, ab, nt, want, M);
                } else {
                    pkv_matmul(&c, &w.t, x, nt, want, scratch);
                }
                memset(got, 0, (size_t)nt * M * sizeof(float));
                pkv_matmul(&c, &t8, x, nt, got, scratch);
                CHECK_MSG(same_floats(want, got, (size_t)nt * M), "%s %s, %d threads, %d tokens: interleaved rows differ",
                          pkv_type_get(type)->name, pkv_simd_name(level), th, nt);
                checked++;
            }
            pkv_pool_free(pool);
        }
    }
    CHECK(pkv_simd_detect() < PKV_SIMD_AVX2 || checked > 0);
    free(w.data), free(w8), free(q), free(x), free(want), free(got), free(scratch);
}

TEST(ops_matmul_interleaved_k_quants) {
    interleaved_through_matmul(PKV_TYPE_Q4_K);
    interleaved_through_matmul(PKV_TYPE_Q6_K);
}

/* Rowwise (the batched decode step's matmul): n rows give, row by row, the
 * bits of n one-row matmuls, for every type, with any thread count; the
 * default path at the same row count is the packed one, which rounds
 * otherwise (what rowwise is for). */
TEST(ops_matmul_rowwise_rows_equal_single_rows) {
    uint64_t rng = 17;
    const int64_t K = 512, M = 96;
    enum { NT = 9 };
    const pkv_kernels *kern = pkv_kernels_get(PKV_SIMD_AUTO);
    pkv_pool *pool = pkv_pool_new(2);
    float *x = malloc(NT * K * sizeof(float)), *one = malloc(M * sizeof(float)), *rows = malloc(NT * M * sizeof(float));
    random_acts(x, NT * K, &rng);
    void *scratch = malloc(pkv_matmul_scratch_bytes(K, NT, 2));
    for (int ti = 0; ti < N_GEMM_TYPES; ti++) {
        weight w = make_weight(gemm_types[ti], K, M, &rng);
        pkv_compute row = {.kern = kern, .pool = pool, .rowwise = true}, single = {.kern = kern, .pool = pool};
        pkv_matmul(&row, &w.t, x, NT, rows, scratch);
        for (int t = 0; t < NT; t++) {
            pkv_matmul(&single, &w.t, x + t * K, 1, one, scratch);
            CHECK_MSG(same_floats(one, rows + t * M, (size_t)M), "%s row %d: rowwise differs from one row",
                      pkv_type_get(w.t.type)->name, t);
        }
        free(w.data);
    }
    pkv_pool_free(pool);
    free(x), free(one), free(rows), free(scratch);
}

/* Float weights take f32 activations unrounded: the batched path agrees with
 * a double-precision product to float rounding. */
TEST(ops_matmul_float_weights_match_double) {
    uint64_t rng = 5;
    const int64_t K = 300, M = 13;
    const int n_tok = 20;
    float *x = malloc((size_t)n_tok * K * sizeof(float)), *y = malloc((size_t)n_tok * M * sizeof(float));
    random_acts(x, (int64_t)n_tok * K, &rng);
    void *scratch = malloc(pkv_matmul_scratch_bytes(K, n_tok, 2));
    pkv_pool *pool = pkv_pool_new(2);
    pkv_simd lv[3];
    const int nl = n_levels(lv);
    for (int f16 = 0; f16 < 2; f16++) {
        weight w = make_weight(f16 ? PKV_TYPE_F16 : PKV_TYPE_F32, K, M, &rng);
        for (int li = 0; li < nl; li++) {
            pkv_compute c = {.kern = pkv_kernels_get(lv[li]), .pool = pool};
            pkv_matmul(&c, &w.t, x, n_tok, y, scratch);
            for (int t = 0; t < n_tok; t++)
                for (int64_t m = 0; m < M; m++) {
                    double want = 0.0, mag = 0.0;
                    for (int64_t e = 0; e < K; e++) {
                        double we;
                        if (f16) we = pkv_f16_to_f32(((const uint16_t *)w.data)[m * K + e]);
                        else we = ((const float *)w.data)[m * K + e];
                        want += we * x[(int64_t)t * K + e];
                        mag += fabs(we * x[(int64_t)t * K + e]);
                    }
                    CHECK_MSG(fabs(y[(int64_t)t * M + m] - want) <= 1e-6 * mag, "%s %s: %.9g vs %.9g", f16 ? "F16" : "F32",
                              pkv_simd_name(lv[li]), y[(int64_t)t * M + m], want);
                }
        }
        free(w.data);
    }
    pkv_pool_free(pool);
    free(x), free(y), free(scratch);
}

/* ------------------------------------------------------------------ exp, GELU, SiLU */

TEST(ops_exp_gelu_silu_accuracy_and_levels) {
    enum { N = 4099 };
    static float x[N], want[N], got[N], gate[N], up[N];
    uint64_t rng = 9;
    for (int i = 0; i < N; i++) x[i] = -87.0f + 175.0f * (float)i / (N - 1);
    x[0] = 0.0f, x[1] = -1e-8f, x[2] = 1e-8f, x[3] = 1.0f;
    pkv_simd lv[3];
    const int nl = n_levels(lv);
    /* the reference (fused multiply-adds), the scalar table's plain version,
     * and the SIMD levels, which must reproduce the reference's bits */
    pkv_exp_f32_ref(N, x, want);
    pkv_kernels_get(PKV_SIMD_SCALAR)->exp_f32(N, x, got);
    for (int i = 0; i < N; i++) {
        const double e = exp((double)x[i]);
        CHECK_MSG(fabs(want[i] - e) <= 3e-7 * e, "exp(%.9g) = %.9g, want %.9g", x[i], want[i], e);
        CHECK_MSG(fabs(got[i] - e) <= 3e-7 * e, "scalar exp(%.9g) = %.9g, want %.9g", x[i], got[i], e);
    }
    CHECK(want[0] == 1.0f);
    for (int li = 1; li < nl; li++) {
        pkv_kernels_get(lv[li])->exp_f32(N, x, got);
        CHECK_MSG(same_floats(want, got, N), "exp %s differs from the reference", pkv_simd_name(lv[li]));
    }
    for (int gelu = 0; gelu < 2; gelu++) {
        float ref[N];
        for (int i = 0; i < N; i++) {
            x[i] = rng_sym(&rng) * (i % 7 == 0 ? 60.0f : 6.0f);
            up[i] = rng_sym(&rng);
        }
        float plain[N];
        memcpy(ref, x, sizeof ref);
        if (gelu) pkv_gelu_tanh_mul_ref(N, ref, up);
        else pkv_silu_mul_ref(N, ref, up);
        for (int li = 0; li < nl; li++) {
            const pkv_kernels *k = pkv_kernels_get(lv[li]);
            memcpy(gate, x, sizeof gate);
            if (gelu) k->gelu_tanh_mul(N, gate, up);
            else k->silu_mul(N, gate, up);
            if (li == 0) memcpy(plain, gate, sizeof plain);
            else CHECK_MSG(same_floats(ref, gate, N), "%s %s differs from the reference", gelu ? "gelu" : "silu", pkv_simd_name(lv[li]));
        }
        for (int round = 0; round < 2; round++) {
            for (int i = 0; i < N; i++) {
                /* 0.5v(1 + tanh(u)) = v / (1 + e^-2u), the second form without
                 * the cancellation of 1 + tanh(u) for large negative u */
                const double v = x[i], u = 0.7978845608028654 * (v + 0.044715 * v * v * v);
                const double z = gelu ? -2.0 * u : -v;
                const double want_v = v / (1.0 + exp(z)) * up[i];
                /* a float argument z carries a relative error of ~1e-7, e^z then ~1e-7 |z| */
                const double tol = 3e-7 * (1.0 + fabs(z)) * fabs(want_v) + 1e-35;
                const float v_got = round ? plain[i] : ref[i];
                CHECK_MSG(fabs(v_got - want_v) <= tol, "%s %s(%.9g) * %.9g = %.9g, want %.9g", round ? "scalar" : "reference",
                          gelu ? "gelu" : "silu", x[i], up[i], v_got, want_v);
            }
        }
    }
}

/* ------------------------------------------------------------------ thread pool */

typedef struct {
    atomic_int *count;
    int n_threads;
    atomic_int bad_thread;
} count_job;

static void count_item(void *arg, int64_t item, int thread) {
    count_job *j = arg;
    atomic_fetch_add(&j->count[item], 1);
    if (thread < 0 || thread >= j->n_threads) atomic_store(&j->bad_thread, 1);
}

static void count_part(void *arg, int part, int n_parts) {
    count_job *j = arg;
    atomic_fetch_add(&j->count[part], 1);
    if (n_parts != j->n_threads) atomic_store(&j->bad_thread, 1);
}

/* Every item runs exactly once, job after job (back to back, and after the
 * workers have gone to sleep), with thread indices inside the pool. */
TEST(ops_pool_runs_every_item_once) {
    enum { ITEMS = 997 };
    static atomic_int count[ITEMS];
    for (int nt = 1; nt <= 4; nt++) {
        pkv_pool *pool = pkv_pool_new(nt);
        REQUIRE(pool);
        count_job j = {count, nt, 0};
        for (int job = 0; job < 300; job++) {
            const int n = job % 3 == 0 ? ITEMS : job % 17;
            for (int i = 0; i < ITEMS; i++) atomic_store(&count[i], 0);
            if (job == 150) {
                struct timespec ts = {0, 3 * PKV_POOL_SPIN_US * 1000}; /* let the workers fall asleep */
                nanosleep(&ts, NULL);
            }
            /* every other job in thread order (the ranges and their stealing) */
            if (job % 2) pkv_pool_for_in_order(pool, n, count_item, &j);
            else pkv_pool_for(pool, n, count_item, &j);
            int wrong = 0;
            for (int i = 0; i < ITEMS; i++) wrong += atomic_load(&count[i]) != (i < n ? 1 : 0);
            CHECK_MSG(wrong == 0, "%d threads, job %d of %d items: %d items ran a wrong number of times", nt, job, n, wrong);
        }
        for (int i = 0; i < ITEMS; i++) atomic_store(&count[i], 0);
        pkv_pool_run(pool, count_part, &j);
        for (int i = 0; i < ITEMS; i++) CHECK(atomic_load(&count[i]) == (i < nt ? 1 : 0));
        CHECK(atomic_load(&j.bad_thread) == 0);
        CHECK_EQ_INT(pkv_pool_size(pool), nt);
        pkv_pool_free(pool);
    }
    count_job j = {count, 1, 0};
    for (int i = 0; i < ITEMS; i++) atomic_store(&count[i], 0);
    pkv_pool_for(NULL, 5, count_item, &j); /* no pool: inline */
    for (int i = 0; i < 5; i++) CHECK(atomic_load(&count[i]) == 1);
}

/* ------------------------------------------------------------------ norms and RoPE */

TEST(ops_rmsnorm_and_rope_against_double) {
    uint64_t rng = 13;
    enum { N = 200 };
    float x[3 * N], w[N], y[3 * N];
    for (int i = 0; i < 3 * N; i++) x[i] = rng_sym(&rng) * 3.0f;
    for (int i = 0; i < N; i++) w[i] = rng_sym(&rng);
    pkv_rmsnorm(y, x, w, N, 3, 1e-6f);
    for (int r = 0; r < 3; r++) {
        double ss = 0.0;
        for (int i = 0; i < N; i++) ss += (double)x[r * N + i] * x[r * N + i];
        const double s = 1.0 / sqrt(ss / N + 1e-6);
        for (int i = 0; i < N; i++) CHECK_NEAR(y[r * N + i], x[r * N + i] * s * w[i], 1e-6 * fabs(x[r * N + i] * s) + 1e-7);
    }
    /* RoPE (docs/engine.md §5.1) at large positions: the angle, reduced in
     * double, keeps its phase */
    const int hd = 64;
    float v[2 * 64], orig[2 * 64], inv[32];
    pkv_rope_params p = {.mode = PKV_ROPE_NEOX, .n_rot = hd, .base = 10000.0f, .freq_scale = 1.0f};
    pkv_rope_inv_freq(&p, inv);
    for (int i = 0; i < 2 * hd; i++) orig[i] = v[i] = rng_sym(&rng);
    const int32_t pos[2] = {7, 131071};
    pkv_rope(v, 2, 1, hd, pos, &p, inv);
    for (int t = 0; t < 2; t++)
        for (int i = 0; i < hd / 2; i++) {
            /* the angle of the engine's (float) frequency, computed exactly */
            CHECK_NEAR(inv[i], pow(10000.0, -2.0 * i / hd), 1e-7 * pow(10000.0, -2.0 * i / hd));
            const double th = (double)pos[t] * (double)inv[i];
            const double a = orig[t * hd + i], b = orig[t * hd + i + hd / 2];
            CHECK_NEAR(v[t * hd + i], a * cos(th) - b * sin(th), 2e-6);
            CHECK_NEAR(v[t * hd + i + hd / 2], a * sin(th) + b * cos(th), 2e-6);
        }
    /* a long run of consecutive positions (the angles advance by rotation) */
    enum { RUN = 3000 };
    float *r = malloc((size_t)RUN * hd * sizeof(float)), *r0 = malloc((size_t)RUN * hd * sizeof(float));
    int32_t *rp = malloc(RUN * sizeof(int32_t));
    for (int i = 0; i < RUN * hd; i++) r0[i] = r[i] = rng_sym(&rng);
    for (int t = 0; t < RUN; t++) rp[t] = 100000 + t + (t >= 2000 ? 5 : 0); /* and a jump */
    pkv_rope(r, RUN, 1, hd, rp, &p, inv);
    double worst = 0.0;
    for (int t = 0; t < RUN; t++)
        for (int i = 0; i < hd / 2; i++) {
            const double th = (double)rp[t] * (double)inv[i];
            const double a = r0[t * hd + i], b = r0[t * hd + i + hd / 2];
            const double e0 = fabs(r[t * hd + i] - (a * cos(th) - b * sin(th)));
            const double e1 = fabs(r[t * hd + i + hd / 2] - (a * sin(th) + b * cos(th)));
            if (e0 > worst) worst = e0;
            if (e1 > worst) worst = e1;
        }
    CHECK_MSG(worst <= 2e-6, "rope over 3000 consecutive positions: max error %.3g", worst);
    free(r), free(r0), free(rp);
}
