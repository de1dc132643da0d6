/*
 * bench-dot: one quantised dot-product kernel on one thread, over a weight
 * matrix of M rows of K elements (docs/performance.md "Where a target is
 * missed", docs/server.md "Measured: concurrent streams").
 *
 *   build/bench-dot TYPE K M [--rows R] [--reps N] [--simd avx2|avx512|scalar] [--x8]
 *
 * TYPE is a weight type name (q4_0, q5_0, q8_0, q4_K, q6_K, ...). The weights
 * are random bytes with every block scale set to 1/64 (finite values whatever
 * the bytes); R activation rows (default 1) are random floats quantised to the
 * type's activation type. With R = 1 every weight row goes through vec_dot;
 * with R > 1 through vec_dot_rows where the level has it (one unpacking of a
 * block for all rows), else vec_dot row by row, as the batched decode step
 * does. Prints the best of N passes over the matrix: ms, weight bytes read
 * per second, and ns per 32-element block and activation row. A matrix far
 * larger than the last-level cache (e.g. 896 x 151936) measures streaming
 * from memory, a small one the arithmetic alone. --x8 repacks the matrix with
 * 8 rows interleaved (kernels/repack.h) and times the decode kernel the model
 * then uses (matvec_x8, the R activation rows prepared once per pass, as a
 * matmul does, and all of them in one call per 64 rows).
 *
 *   build/bench-dot peak
 *
 * The ceilings those rates are measured against, one thread: the int8 dot
 * product instruction the weight kernels are built on (vpdpbusd, 256- and
 * 512-bit) and the f32 FMA of the attention kernels, each as 8 independent
 * chains so only the instruction's throughput counts; printed as multiply-adds
 * per second (docs/server.md "What 4x at the fast memory level would take").
 */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/clock.h"
#include "base/prng.h"
#include "kernels/f16.h"
#include "kernels/quant.h"
#include "kernels/repack.h"
#include "kernels/table.h"

static int usage(void) {
    fprintf(stderr, "usage: bench-dot TYPE K M [--rows R] [--reps N] [--simd avx2|avx512|scalar] [--x8]\n"
                    "       bench-dot peak\n");
    return 2;
}

/* The fp16 scale fields of every block set to 1/64: ggml blocks keep d first
 * (legacy types), or d (and dmin) at the end (K-quants). */
static void sane_scales(uint32_t type, uint8_t *w, uint64_t bytes) {
    const pkv_type_info *ti = pkv_type_get(type);
    const uint16_t h = pkv_f32_to_f16(1.0f / 64.0f);
    for (uint64_t b = 0; b + ti->block_bytes <= bytes; b += ti->block_bytes) {
        uint8_t *blk = w + b;
        if (ti->block_elems == 32) memcpy(blk, &h, 2);
        else if (type == PKV_TYPE_Q6_K) memcpy(blk + ti->block_bytes - 2, &h, 2);
        else {
            memcpy(blk, &h, 2);
            memcpy(blk + 2, &h, 2);
        }
    }
}

/* PEAK_CHAINS independent chains, enough to cover the instructions' latency
 * at two issued a cycle (the unroll pragma below spells the same count). */
enum { PEAK_ITERS = 50000000, PEAK_CHAINS = 8 };

/* G multiply-adds/s of one instruction form: PEAK_CHAINS chains of
 * PEAK_ITERS each, macs_per_insn (lanes x depth) per instruction. */
static double peak_rate(double seconds, int macs_per_insn) {
    return (double)PEAK_CHAINS * PEAK_ITERS * macs_per_insn / seconds / 1e9;
}

/* NAME: the rate of OP, PEAK_CHAINS chains s[c] = OP(s[c], a, b) of
 * PEAK_ITERS each; LANE0 reads a lane so the chains are kept. */
#define PEAK_FN(NAME, TARGET, VEC, A, B, OP, LANE0, MACS)                                  \
    __attribute__((target(TARGET))) static double NAME(void) {                            \
        VEC s[PEAK_CHAINS], a = A, b = B;                                                 \
        for (int c = 0; c < PEAK_CHAINS; c++) s[c] = a;                                   \
        const double t0 = pkv_now_seconds();                                              \
        for (long i = 0; i < PEAK_ITERS; i++)                                             \
            _Pragma("GCC unroll 8") for (int c = 0; c < PEAK_CHAINS; c++) s[c] = OP(s[c], a, b); \
        const double t = pkv_now_seconds() - t0;                                          \
        volatile double sink = 0;                                                         \
        for (int c = 0; c < PEAK_CHAINS; c++) sink += (double)LANE0(s[c]);                \
        (void)sink;                                                                       \
        return peak_rate(t, MACS);                                                        \
    }

PEAK_FN(peak_dpbusd256, "avx512f,avx512vl,avx512vnni", __m256i, _mm256_set1_epi8(3), _mm256_set1_epi8(-2),
        _mm256_dpbusd_epi32, _mm256_cvtsi256_si32, 32)
PEAK_FN(peak_dpbusd512, "avx512f,avx512vl,avx512vnni", __m512i, _mm512_set1_epi8(3), _mm512_set1_epi8(-2),
        _mm512_dpbusd_epi32, _mm512_cvtsi512_si32, 64)
PEAK_FN(peak_fma256, "avx2,fma", __m256, _mm256_set1_ps(0.999f), _mm256_set1_ps(1e-3f), _mm256_fmadd_ps,
        _mm256_cvtss_f32, 8)

/* The best of 3 runs (the first may meet the core below its full clock). */
static double best_of_3(double (*run)(void)) {
    double best = 0;
    for (int i = 0; i < 3; i++) {
        const double r = run();
        if (r > best) best = r;
    }
    return best;
}

/* The forms the engine's own kernel tables use on this CPU (kernels/cpu.c). */
static int peak(void) {
    const pkv_simd level = pkv_simd_detect();
    if (level >= PKV_SIMD_AVX2)
        printf("f32 FMA, 256-bit: %.1f G multiply-adds/s per thread\n", best_of_3(peak_fma256));
    if (level < PKV_SIMD_AVX512) {
        printf("int8 dot product (vpdpbusd): not used on this CPU (its kernels are %s)\n", pkv_simd_name(level));
        return 0;
    }
    printf("int8 dot product (vpdpbusd), 256-bit: %.1f G multiply-adds/s per thread\n", best_of_3(peak_dpbusd256));
    printf("int8 dot product (vpdpbusd), 512-bit: %.1f G multiply-adds/s per thread\n", best_of_3(peak_dpbusd512));
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 2 && !strcmp(argv[1], "peak")) return peak();
    if (argc < 4) return usage();
    int rows = 1, reps = 5;
    pkv_simd level = PKV_SIMD_AUTO;
    bool x8 = false;
    for (int i = 4; i < argc; i += 2) {
        if (!strcmp(argv[i], "--x8")) {
            x8 = true;
            i--;
            continue;
        }
        if (i + 1 >= argc) return usage();
        if (!strcmp(argv[i], "--rows")) rows = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--simd")) {
            const char *v = argv[i + 1];
            level = !strcmp(v, "avx512") ? PKV_SIMD_AVX512 : !strcmp(v, "avx2") ? PKV_SIMD_AVX2 : PKV_SIMD_SCALAR;
        } else return usage();
    }
    uint32_t type = PKV_TYPE_COUNT;
    for (uint32_t t = 0; t < PKV_TYPE_COUNT; t++) {
        const pkv_type_info *ti = pkv_type_get(t);
        if (ti && ti->name && !strcasecmp(ti->name, argv[1])) type = t;
    }
    const int64_t K = atoll(argv[2]), M = atoll(argv[3]);
    const pkv_kernels *k = pkv_kernels_get(level);
    if (type == PKV_TYPE_COUNT || !k->vec_dot[type]) {
        fprintf(stderr, "bench-dot: no dot product for type '%s' at %s\n", argv[1], pkv_simd_name(k->level));
        return 2;
    }
    const pkv_type_info *ti = pkv_type_get(type);
    if (K <= 0 || M <= 0 || K % ti->block_elems || rows < 1 || rows > 64 || reps < 1) {
        fprintf(stderr, "bench-dot: K a positive multiple of %d, M > 0, rows in 1..64, reps >= 1\n", ti->block_elems);
        return 2;
    }
    const uint32_t at = x8 ? PKV_TYPE_Q8_0 : ti->act_type; /* the interleaved kernel takes Q8_0 rows */
    const uint64_t rb = pkv_row_bytes(type, K), ab = pkv_row_bytes(at, K);
    uint8_t *w = malloc(rb * (uint64_t)M), *a = malloc(ab * (uint64_t)rows);
    float *x = malloc((size_t)K * sizeof *x), *y = malloc((size_t)M * rows * sizeof *y);
    if (!w || !a || !x || !y) {
        fprintf(stderr, "bench-dot: out of memory for %lld x %lld\n", (long long)M, (long long)K);
        return 1;
    }
    uint64_t rng = 1;
    for (uint64_t i = 0; i < rb * (uint64_t)M; i++) w[i] = (uint8_t)pkv_splitmix64(&rng);
    sane_scales(type, w, rb * (uint64_t)M);
    for (int r = 0; r < rows; r++) {
        for (int64_t i = 0; i < K; i++) x[i] = (float)((int)(pkv_splitmix64(&rng) % 2001) - 1000) / 500.0f;
        k->quantize[at](x, a + (uint64_t)r * ab, K);
    }
    pkv_vec_dot_rows_fn dot_rows = rows > 1 ? k->vec_dot_rows[type] : NULL;
    pkv_matvec_x8_fn matvec = x8 ? k->matvec_x8[type] : NULL;
    void *prep = NULL;
    if (x8) {
        if (!matvec || !pkv_x8_supported(type, K, M)) {
            fprintf(stderr, "bench-dot: no interleaved kernel for %s at %s, or M not a multiple of 8\n", ti->name,
                    pkv_simd_name(k->level));
            return 2;
        }
        uint8_t *w8 = malloc(rb * (uint64_t)M);
        if (!w8) return 1;
        pkv_x8_repack(type, w, rb, K, M, w8);
        free(w);
        w = w8;
        prep = malloc(pkv_x8_prep_bytes(K, rows));
        if (!prep) return 1;
    }
    double best = 1e30;
    for (int rep = 0; rep < reps; rep++) {
        const double t0 = pkv_now_seconds();
        if (matvec) k->matvec_x8_prepare(type, K, a, ab, rows, prep); /* once per product, as ops.c does */
        for (int64_t m = 0; matvec && m < M; m += 64)
            matvec(K, w + (uint64_t)m * rb, M - m < 64 ? M - m : 64, a, ab, rows, prep, y + m, M);
        for (int64_t m = 0; !matvec && m < M; m++) {
            const uint8_t *row = w + (uint64_t)m * rb;
            if (dot_rows) dot_rows(K, row, a, ab, rows, y + m, M);
            else
                for (int r = 0; r < rows; r++) y[(int64_t)r * M + m] = k->vec_dot[type](K, row, a + (uint64_t)r * ab);
        }
        const double t = pkv_now_seconds() - t0;
        if (t < best) best = t;
    }
    const double blocks = (double)M * (double)K / 32.0 * rows;
    printf("%s %s, %lld x %lld, %d activation row%s (%s): %.3f ms, %.2f GB/s of weights, %.3f ns per 32-element "
           "block and row\n",
           ti->name, pkv_simd_name(k->level), (long long)M, (long long)K, rows, rows > 1 ? "s" : "",
           matvec ? "matvec_x8" : dot_rows ? "vec_dot_rows" : "vec_dot", best * 1e3, (double)rb * M / best / 1e9, best * 1e9 / blocks);
    free(w), free(a), free(x), free(y), free(prep);
    return 0;
}
