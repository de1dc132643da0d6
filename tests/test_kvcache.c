/*
 * The KV cache's storage (src/cache/kvcache.c): rows keep their K, V and position
 * through every resize — growth while a prompt is appended, the shrink after
 * a press, growth again while decoding, the window trim, copies — checked
 * against values computed from each row's position (f32 cache: exact).
 */
#include <stdint.h>
#include <stdlib.h>

#include "cache/kvcache.h"
#include "kernels/levels.h"
#include "test.h"

enum { DK = 24, DV = 40, HEADS = 3 };

static float k_of(int pos, int head, int i) { return (float)(pos * 1000 + head * 100 + i); }
static float v_of(int pos, int head, int i) { return -(float)(pos * 1000 + head * 100 + i) - 0.5f; }

/* Appends n tokens at positions first.. (all heads), reserving first. */
static bool append(pkv_kvcache *c, const pkv_kernels *kern, int first, int n) {
    pkv_error err;
    if (pkv_kvcache_reserve(c, 0, n, &err)) return false;
    float *k = malloc(sizeof(float) * n * HEADS * DK), *v = malloc(sizeof(float) * n * HEADS * DV);
    int32_t *pos = malloc(sizeof(int32_t) * n);
    for (int t = 0; t < n; t++) {
        pos[t] = first + t;
        for (int h = 0; h < HEADS; h++) {
            for (int i = 0; i < DK; i++) k[((size_t)t * HEADS + h) * DK + i] = k_of(first + t, h, i);
            for (int i = 0; i < DV; i++) v[((size_t)t * HEADS + h) * DV + i] = v_of(first + t, h, i);
        }
    }
    pkv_kvcache_append(c, kern, 0, k, v, pos, n);
    free(k);
    free(v);
    free(pos);
    return true;
}

/* Every row of every head holds what its position says. */
static int bad_rows(const pkv_kvcache *c, const pkv_kernels *kern) {
    int bad = 0;
    const pkv_kv_layer *L = &c->layers[0];
    for (int h = 0; h < L->n_heads; h++) {
        const pkv_kv_head *H = &L->heads[h];
        float *k = malloc(sizeof(float) * ((size_t)H->n_rows * DK + 1));
        float *v = malloc(sizeof(float) * ((size_t)H->n_rows * DV + 1));
        pkv_kvcache_read_k(c, kern, 0, h, k);
        pkv_kvcache_read_v(c, kern, 0, h, v);
        for (int r = 0; r < H->n_rows; r++) {
            int p = H->pos[r];
            for (int i = 0; i < DK; i++) bad += k[(size_t)r * DK + i] != k_of(p, h, i);
            for (int i = 0; i < DV; i++) bad += v[(size_t)r * DV + i] != v_of(p, h, i);
        }
        free(k);
        free(v);
    }
    return bad;
}

TEST(kvcache_rows_survive_grow_shrink_grow) {
    const pkv_kernels *kern = pkv_kernels_get(PKV_SIMD_SCALAR);
    pkv_error err;
    pkv_kvcache c;
    REQUIRE(pkv_kvcache_init(&c, PKV_CACHE_F32, 1, HEADS, DK, DV, NULL, &err) == 0);
    /* a prompt in chunks: the block grows several times with live rows in it */
    for (int first = 0; first < 3000; first += 250) REQUIRE(append(&c, kern, first, 250));
    CHECK_EQ_INT(c.layers[0].heads[1].n_rows, 3000);
    CHECK_EQ_INT(bad_rows(&c, kern), 0);
    /* a press keeps a different set per head, then the block shrinks */
    for (int h = 0; h < HEADS; h++) {
        int32_t rows[200];
        for (int i = 0; i < 200; i++) rows[i] = i * (h + 7) + h;
        CHECK(pkv_kvcache_keep_rows(&c, 0, h, rows, 200, 4, &err) == 0);
        CHECK_EQ_INT(c.layers[0].heads[h].n_rows, 200);
        CHECK_EQ_INT(c.layers[0].heads[h].pos[199], 199 * (h + 7) + h);
    }
    CHECK(pkv_kvcache_alloc_bytes(&c) == (uint64_t)HEADS * 204 * pkv_kvcache_row_bytes(&c, 0));
    CHECK_EQ_INT(bad_rows(&c, kern), 0);
    /* decoding grows it again one row at a time */
    for (int t = 0; t < 500; t++) REQUIRE(append(&c, kern, 3000 + t, 1));
    CHECK_EQ_INT(c.layers[0].heads[2].n_rows, 700);
    CHECK_EQ_INT(bad_rows(&c, kern), 0);
    /* a copy holds the same rows */
    pkv_kvcache d;
    REQUIRE(pkv_kvcache_init(&d, PKV_CACHE_F32, 1, HEADS, DK, DV, NULL, &err) == 0);
    CHECK(pkv_kvcache_copy(&d, &c, &err) == 0);
    CHECK_EQ_INT(d.layers[0].heads[0].n_rows, 700);
    CHECK_EQ_INT(bad_rows(&d, kern), 0);
    pkv_kvcache_free(&d);
    /* cleared and refilled */
    pkv_kvcache_clear(&c);
    CHECK_EQ_INT(c.layers[0].heads[0].n_rows, 0);
    REQUIRE(append(&c, kern, 0, 37));
    CHECK_EQ_INT(bad_rows(&c, kern), 0);
    pkv_kvcache_free(&c);
}

TEST(kvcache_window_trim_keeps_recent_rows) {
    const pkv_kernels *kern = pkv_kernels_get(PKV_SIMD_SCALAR);
    pkv_error err;
    pkv_kvcache c;
    const int window[1] = {64};
    REQUIRE(pkv_kvcache_init(&c, PKV_CACHE_F32, 1, HEADS, DK, DV, window, &err) == 0);
    REQUIRE(append(&c, kern, 0, 2000));
    pkv_kvcache_trim_window(&c, 0, 2000);
    const pkv_kv_head *H = &c.layers[0].heads[0];
    CHECK(H->n_rows >= 63 && H->n_rows <= 64);
    CHECK_EQ_INT(H->pos[H->n_rows - 1], 1999);
    CHECK(H->cap < 2000); /* the memory after the long prefill was given back */
    CHECK_EQ_INT(bad_rows(&c, kern), 0);
    for (int t = 0; t < 300; t++) {
        REQUIRE(append(&c, kern, 2000 + t, 1));
        pkv_kvcache_trim_window(&c, 0, 2001 + t);
    }
    CHECK_EQ_INT(c.layers[0].heads[2].pos[c.layers[0].heads[2].n_rows - 1], 2299);
    CHECK_EQ_INT(bad_rows(&c, kern), 0);
    pkv_kvcache_free(&c);
}

/* A layer split per query head (SnapKV granularity=query_head): 3 KV heads
 * become 6 heads, head s holding rows of KV head s / 2; a new token then
 * appends KV head s / 2's key and value to head s (the projections hold 3
 * KV heads a token, not 6). */
TEST(kvcache_split_layer_appends_each_kv_heads_row) {
    const pkv_kernels *kern = pkv_kernels_get(PKV_SIMD_SCALAR);
    pkv_kvcache c;
    pkv_error err;
    REQUIRE(pkv_kvcache_init(&c, PKV_CACHE_F32, 1, HEADS, DK, DV, NULL, &err) == 0);
    REQUIRE(append(&c, kern, 0, 10));
    int32_t rows[2 * HEADS][10];
    const int32_t *sel[2 * HEADS];
    int n_keep[2 * HEADS];
    for (int s = 0; s < 2 * HEADS; s++) {
        n_keep[s] = 0;
        for (int r = s % 2; r < 10; r += 2) rows[s][n_keep[s]++] = r; /* even rows for one, odd for the other */
        sel[s] = rows[s];
    }
    REQUIRE(pkv_kvcache_split_heads(&c, 0, 2 * HEADS, sel, n_keep, 4, &err) == 0);
    REQUIRE(append(&c, kern, 10, 3));
    for (int s = 0; s < 2 * HEADS; s++) {
        const pkv_kv_head *H = &c.layers[0].heads[s];
        REQUIRE(H->n_rows == 8);
        float k[8 * DK], v[8 * DV];
        pkv_kvcache_read_k(&c, kern, 0, s, k);
        pkv_kvcache_read_v(&c, kern, 0, s, v);
        int bad = 0;
        for (int r = 0; r < 8; r++)
            for (int i = 0; i < DK; i++) bad += k[r * DK + i] != k_of(H->pos[r], s / 2, i);
        for (int r = 0; r < 8; r++)
            for (int i = 0; i < DV; i++) bad += v[r * DV + i] != v_of(H->pos[r], s / 2, i);
        CHECK_MSG(bad == 0, "head %d: %d values are not its KV head's", s, bad);
        CHECK_EQ_INT(H->pos[7], 12);
    }
    pkv_kvcache_free(&c);
}
