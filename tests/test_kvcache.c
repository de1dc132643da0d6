/*
 * The KV cache's storage (src/cache/kvcache.c): rows keep their K, V and position
 * through every resize — growth while a prompt is appended, the shrink after
 * a press, growth again while decoding, the window trim, copies — checked
 * against values computed from each row's position (f32 cache: exact).
 */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

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
    REQUIRE(pkv_kvcache_init(&c, PKV_CACHE_F32, PKV_CACHE_F32, 1, HEADS, DK, DV, NULL, &err) == 0);
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
    REQUIRE(pkv_kvcache_init(&d, PKV_CACHE_F32, PKV_CACHE_F32, 1, HEADS, DK, DV, NULL, &err) == 0);
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
    REQUIRE(pkv_kvcache_init(&c, PKV_CACHE_F32, PKV_CACHE_F32, 1, HEADS, DK, DV, window, &err) == 0);
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
    REQUIRE(pkv_kvcache_init(&c, PKV_CACHE_F32, PKV_CACHE_F32, 1, HEADS, DK, DV, NULL, &err) == 0);
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

/* ------------------------------------------------------------------ quantised rows */

/* Caches of Q8_0 and Q4_0 rows (llama.cpp's -ctk/-ctv q8_0, q4_0), alone
 * and mixed with f16/f32: every row reads back as its values quantised and
 * dequantised (the cache's conversion, bit for bit) through appends in
 * chunks, a press's selection, decode appends, a copy, a per-query-head
 * split and a window trim, which all move rows as bytes. Head sizes 32 and
 * 64 give rows of 34/68 (Q8_0) and 18/36 (Q4_0) bytes, so an odd capacity
 * would misalign the values and positions that follow them. */
enum { QK_DK = 32, QK_DV = 64 };

static float qk_of(int pos, int head, int i) { return sinf(0.37f * pos + 1.3f * head + 0.11f * i) * (1 + pos % 7); }
static float qv_of(int pos, int head, int i) { return cosf(0.23f * pos - 0.7f * head + 0.19f * i) * (1 + pos % 5); }

/* What a row of dim values of type t reads back as. */
static void roundtrip_row(pkv_cache_type t, const float *x, int dim, float *out) {
    const pkv_kernels *k = pkv_kernels_get(PKV_SIMD_SCALAR);
    uint8_t buf[512];
    switch (t) {
    case PKV_CACHE_F32: memcpy(out, x, (size_t)dim * sizeof(float)); return;
    case PKV_CACHE_F16: k->f32_to_f16(x, (uint16_t *)buf, dim); break;
    case PKV_CACHE_Q8_0: k->quantize[PKV_TYPE_Q8_0](x, buf, dim); break;
    default: pkv_quantize_row_ref(PKV_TYPE_Q4_0, x, buf, dim); break;
    }
    k->dequant[pkv_kvcache_kern_type(t)](buf, out, dim);
}

static bool q_append(pkv_kvcache *c, const pkv_kernels *kern, int first, int n) {
    pkv_error err;
    if (pkv_kvcache_reserve(c, 0, n, &err)) return false;
    float *k = malloc(sizeof(float) * n * HEADS * QK_DK), *v = malloc(sizeof(float) * n * HEADS * QK_DV);
    int32_t *pos = malloc(sizeof(int32_t) * n);
    for (int t = 0; t < n; t++) {
        pos[t] = first + t;
        for (int h = 0; h < HEADS; h++) {
            for (int i = 0; i < QK_DK; i++) k[((size_t)t * HEADS + h) * QK_DK + i] = qk_of(first + t, h, i);
            for (int i = 0; i < QK_DV; i++) v[((size_t)t * HEADS + h) * QK_DV + i] = qv_of(first + t, h, i);
        }
    }
    pkv_kvcache_append(c, kern, 0, k, v, pos, n);
    free(k), free(v), free(pos);
    return true;
}

/* Rows that differ from what their position says, for heads holding KV
 * head h / group's rows; misaligned value or position arrays count too. */
static int q_bad_rows(const pkv_kvcache *c, const pkv_kernels *kern, int group) {
    int bad = 0;
    const pkv_kv_layer *L = &c->layers[0];
    for (int h = 0; h < L->n_heads; h++) {
        const pkv_kv_head *H = &L->heads[h];
        bad += (uintptr_t)H->v % 8 != 0 || (uintptr_t)H->pos % 4 != 0;
        float *k = malloc(sizeof(float) * ((size_t)H->n_rows * QK_DK + 1));
        float *v = malloc(sizeof(float) * ((size_t)H->n_rows * QK_DV + 1));
        pkv_kvcache_read_k(c, kern, 0, h, k);
        pkv_kvcache_read_v(c, kern, 0, h, v);
        for (int r = 0; r < H->n_rows; r++) {
            float x[QK_DV], want[QK_DV];
            for (int i = 0; i < QK_DK; i++) x[i] = qk_of(H->pos[r], h / group, i);
            roundtrip_row(c->type_k, x, QK_DK, want);
            bad += memcmp(want, k + (size_t)r * QK_DK, QK_DK * sizeof(float)) != 0;
            for (int i = 0; i < QK_DV; i++) x[i] = qv_of(H->pos[r], h / group, i);
            roundtrip_row(c->type_v, x, QK_DV, want);
            bad += memcmp(want, v + (size_t)r * QK_DV, QK_DV * sizeof(float)) != 0;
        }
        free(k), free(v);
    }
    return bad;
}

TEST(kvcache_quantised_rows_round_trip) {
    const pkv_cache_type pairs[][2] = {{PKV_CACHE_Q8_0, PKV_CACHE_Q8_0},
                                       {PKV_CACHE_Q4_0, PKV_CACHE_Q4_0},
                                       {PKV_CACHE_Q8_0, PKV_CACHE_F16},
                                       {PKV_CACHE_F32, PKV_CACHE_Q4_0}};
    pkv_simd levels[] = {PKV_SIMD_SCALAR, PKV_SIMD_AUTO};
    for (int pi = 0; pi < 4; pi++)
        for (int li = 0; li < 2; li++) {
            const pkv_kernels *kern = pkv_kernels_get(levels[li]);
            const pkv_cache_type tk = pairs[pi][0], tv = pairs[pi][1];
            pkv_error err;
            pkv_kvcache c;
            REQUIRE(pkv_kvcache_init(&c, tk, tv, 1, HEADS, QK_DK, QK_DV, NULL, &err) == 0);
            CHECK_EQ_INT(c.layers[0].k_row, pkv_cache_row_bytes(tk, QK_DK));
            CHECK_EQ_INT(pkv_kvcache_row_bytes(&c, 0), pkv_cache_row_bytes(tk, QK_DK) + pkv_cache_row_bytes(tv, QK_DV) + 4);
            for (int first = 0; first < 1000; first += 250) REQUIRE(q_append(&c, kern, first, 250));
            CHECK_MSG(q_bad_rows(&c, kern, 1) == 0, "%s/%s: appended rows", pkv_cache_type_name(tk), pkv_cache_type_name(tv));
            for (int h = 0; h < HEADS; h++) { /* odd counts and capacities */
                int32_t rows[201];
                for (int i = 0; i < 201; i++) rows[i] = i * (h + 2) + h;
                CHECK(pkv_kvcache_keep_rows(&c, 0, h, rows, 201, 4 + h, &err) == 0);
            }
            CHECK(pkv_kvcache_bytes(&c) == (uint64_t)HEADS * 201 * pkv_kvcache_row_bytes(&c, 0));
            CHECK_MSG(q_bad_rows(&c, kern, 1) == 0, "%s/%s: kept rows", pkv_cache_type_name(tk), pkv_cache_type_name(tv));
            for (int t = 0; t < 101; t++) REQUIRE(q_append(&c, kern, 1000 + t, 1));
            CHECK_EQ_INT(c.layers[0].heads[1].n_rows, 302);
            CHECK_MSG(q_bad_rows(&c, kern, 1) == 0, "%s/%s: decoded rows", pkv_cache_type_name(tk), pkv_cache_type_name(tv));
            pkv_kvcache d;
            REQUIRE(pkv_kvcache_init(&d, tk, tv, 1, HEADS, QK_DK, QK_DV, NULL, &err) == 0);
            CHECK(pkv_kvcache_copy(&d, &c, &err) == 0);
            CHECK(pkv_kvcache_bytes(&d) == pkv_kvcache_bytes(&c));
            CHECK_MSG(q_bad_rows(&d, kern, 1) == 0, "%s/%s: copy", pkv_cache_type_name(tk), pkv_cache_type_name(tv));
            pkv_kvcache_free(&d);
            /* a copy into a cache of other types is refused */
            REQUIRE(pkv_kvcache_init(&d, PKV_CACHE_F16, PKV_CACHE_F16, 1, HEADS, QK_DK, QK_DV, NULL, &err) == 0);
            CHECK(pkv_kvcache_copy(&d, &c, &err) != 0 && strstr(err.msg, pkv_cache_type_name(tk)));
            pkv_kvcache_free(&d);
            /* per query head: two heads per KV head, every third row, then a decode step */
            static int32_t rows[2 * HEADS][302];
            const int32_t *sel[2 * HEADS];
            int n_keep[2 * HEADS];
            for (int s = 0; s < 2 * HEADS; s++) {
                n_keep[s] = 0;
                for (int r = s % 3; r < 302; r += 3) rows[s][n_keep[s]++] = r;
                sel[s] = rows[s];
            }
            REQUIRE(pkv_kvcache_split_heads(&c, 0, 2 * HEADS, sel, n_keep, 3, &err) == 0);
            REQUIRE(q_append(&c, kern, 1101, 1));
            CHECK_MSG(q_bad_rows(&c, kern, 2) == 0, "%s/%s: split", pkv_cache_type_name(tk), pkv_cache_type_name(tv));
            pkv_kvcache_free(&c);
            /* a sliding-window layer trims its rows */
            const int window[1] = {40};
            REQUIRE(pkv_kvcache_init(&c, tk, tv, 1, HEADS, QK_DK, QK_DV, window, &err) == 0);
            REQUIRE(q_append(&c, kern, 0, 500));
            pkv_kvcache_trim_window(&c, 0, 500);
            for (int t = 0; t < 77; t++) {
                REQUIRE(q_append(&c, kern, 500 + t, 1));
                pkv_kvcache_trim_window(&c, 0, 501 + t);
            }
            CHECK(c.layers[0].heads[0].n_rows <= 80 && c.layers[0].heads[0].pos[c.layers[0].heads[0].n_rows - 1] == 576);
            CHECK_MSG(q_bad_rows(&c, kern, 1) == 0, "%s/%s: window", pkv_cache_type_name(tk), pkv_cache_type_name(tv));
            pkv_kvcache_free(&c);
        }
}

/* A head size a block type cannot hold is refused with one line naming the
 * layer, the size and the type; an unknown type too. */
TEST(kvcache_quantised_head_size_refused) {
    pkv_kvcache c;
    pkv_error err;
    CHECK(pkv_kvcache_init(&c, PKV_CACHE_Q8_0, PKV_CACHE_F16, 2, HEADS, 24, 32, NULL, &err) != 0);
    CHECK_MSG(strstr(err.msg, "layer 0") && strstr(err.msg, "key head size 24") && strstr(err.msg, "q8_0") &&
                  !strchr(err.msg, '\n'),
              "%s", err.msg);
    CHECK(pkv_kvcache_init(&c, PKV_CACHE_F32, PKV_CACHE_Q4_0, 2, HEADS, 32, 40, NULL, &err) != 0);
    CHECK_MSG(strstr(err.msg, "value head size 40") && strstr(err.msg, "q4_0"), "%s", err.msg);
    CHECK(pkv_kvcache_init(&c, (pkv_cache_type)9, PKV_CACHE_F16, 2, HEADS, 32, 32, NULL, &err) != 0);
    CHECK_EQ_INT(pkv_cache_row_bytes(PKV_CACHE_Q8_0, 64), 68);
    CHECK_EQ_INT(pkv_cache_row_bytes(PKV_CACHE_Q4_0, 64), 36);
    CHECK_EQ_INT(pkv_cache_row_bytes(PKV_CACHE_Q4_0, 48), 0);
    CHECK_EQ_INT(pkv_cache_row_bytes(PKV_CACHE_F16, 48), 96);
    pkv_cache_type t;
    CHECK(pkv_cache_type_parse("q4_0", &t) && t == PKV_CACHE_Q4_0);
    CHECK(!pkv_cache_type_parse("q5_0", &t) && !pkv_cache_type_parse("Q8_0", &t));
    CHECK_STR(pkv_cache_type_name(PKV_CACHE_Q8_0), "q8_0");
}
