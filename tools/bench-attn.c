/*
 * bench-attn: one head's decode attention on one thread, over ROWS f16 cache
 * rows of keys and values (dk = dv = D), for NQ query rows (the query heads
 * that share the KV head: 4 on Gemma 3 270M and the Llama-3.2-1B shape, 7 on
 * Qwen2.5-Coder-0.5B) — docs/performance.md "Decode attention".
 *
 *   build/bench-attn NQ D ROWS [--reps N] [--simd avx2|avx512]
 *
 * Times the two ways attention.c can take whole blocks of 16 rows: staged
 * (att_stage converts and transposes the block into f32 scratch, then
 * att_block) and direct (att_block_f16 on the rows where they lie). Both give
 * the same bits (tests/test_attention.c). A level without att_block (AVX2:
 * attention.c runs the staged steps one by one there) times the direct path
 * only. Prints the best of N passes: ns per cache row and the K + V bytes
 * read per second.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "kernels/table.h"

static int usage(void) {
    fprintf(stderr, "usage: bench-attn NQ D ROWS [--reps N] [--simd avx2|avx512]   (NQ in 1..%d, D a multiple of 16 "
                    "up to 256, ROWS a positive multiple of 16)\n", PKV_ATT_F16_MAX_Q);
    return 2;
}

int main(int argc, char **argv) {
    enum { MAXD = 256 };
    if (argc < 4) return usage();
    const int nq = atoi(argv[1]), d = atoi(argv[2]), rows = atoi(argv[3]);
    int reps = 5;
    pkv_simd level = PKV_SIMD_AUTO;
    for (int i = 4; i < argc; i += 2) {
        if (i + 1 >= argc) return usage();
        if (!strcmp(argv[i], "--reps")) reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--simd") && !strcmp(argv[i + 1], "avx2")) level = PKV_SIMD_AVX2;
        else if (!strcmp(argv[i], "--simd") && !strcmp(argv[i + 1], "avx512")) level = PKV_SIMD_AVX512;
        else return usage();
    }
    if (nq < 1 || nq > PKV_ATT_F16_MAX_Q || d < 16 || d > MAXD || d % 16 || rows < 16 || rows % 16 || reps < 1)
        return usage();
    if (level != PKV_SIMD_AUTO && level > pkv_simd_detect()) {
        fprintf(stderr, "bench-attn: this CPU has no %s\n", pkv_simd_name(level));
        return 2;
    }
    const pkv_kernels *k = pkv_kernels_get(level);
    if (!k->att_block_f16) {
        fprintf(stderr, "bench-attn: no direct f16 attention block at %s\n", pkv_simd_name(k->level));
        return 2;
    }
    const size_t n = (size_t)rows * d;
    uint16_t *kh = malloc(n * sizeof *kh), *vh = malloc(n * sizeof *vh);
    float *f = malloc(n * sizeof *f);
    if (!kh || !vh || !f) {
        fprintf(stderr, "bench-attn: out of memory for %d rows of %d\n", rows, d);
        return 1;
    }
    for (size_t i = 0; i < n; i++) f[i] = (float)((i * 7919) % 1000) / 1000.0f - 0.5f;
    k->f32_to_f16(f, kh, (int64_t)n);
    k->f32_to_f16(f, vh, (int64_t)n);
    static float q[PKV_ATT_F16_MAX_Q * MAXD], kt[MAXD * PKV_ATT_BK], vt[PKV_ATT_BK * MAXD], o[PKV_ATT_F16_MAX_Q * MAXD];
    float m[PKV_ATT_F16_MAX_Q], l[PKV_ATT_F16_MAX_Q];
    for (int i = 0; i < nq * d; i++) q[i] = 0.01f * (float)(i % 13);
    const float scale = 1.0f / sqrtf((float)d);
    static const char *const names[2] = {"staged", "direct"};
    for (int mode = k->att_block ? 0 : 1; mode < 2; mode++) {
        double best = 1e30;
        for (int r = 0; r < reps; r++) {
            for (int i = 0; i < nq; i++) m[i] = -INFINITY, l[i] = 0.0f;
            memset(o, 0, sizeof o);
            const double t0 = pkv_now_seconds();
            if (mode == 1) {
                k->att_block_f16(nq, d, d, q, kh, vh, rows / PKV_ATT_BK, scale, m, l, o);
            } else {
                for (int b = 0; b < rows; b += PKV_ATT_BK) {
                    k->att_stage(kh + (size_t)b * d, vh + (size_t)b * d, PKV_ATT_BK, d, d, PKV_TYPE_F16, PKV_TYPE_F16,
                                 kt, vt);
                    k->att_block(nq, d, d, q, kt, vt, scale, m, l, o);
                }
            }
            const double t = pkv_now_seconds() - t0;
            if (t < best) best = t;
        }
        printf("%s (%s): %d query rows, d %d, %d rows: %.2f ns per row, %.2f GB/s of keys and values\n", names[mode],
               pkv_simd_name(k->level), nq, d, rows, best * 1e9 / rows, 4.0 * (double)n / best / 1e9);
    }
    free(kh), free(vh), free(f);
    return 0;
}
