/*
 * Tests for the weight types, dequantisation, activation quantisation, fused
 * dot products, float helpers and CPU dispatch (src/kernels/: quant*.c,
 * vec*.c, cpu.c).
 *
 * The reference here is written independently from docs/engine.md §2: it
 * reads raw block bytes at the documented offsets and computes one element
 * at a time from its index (not the chunked loops of quant.c), decodes fp16
 * with ldexp, and computes dot products in double. Hand-computed literals
 * pin the formulas themselves.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/prng.h"
#include "kernels/f16.h"
#include "kernels/quant.h"
#include "test.h"

/* ------------------------------------------------------------------ independent reference */

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (p[1] << 8)); }
static uint32_t rd32(const uint8_t *p) {
    return (uint32_t)p[0] | ((uint32_t)p[1] << 8) | ((uint32_t)p[2] << 16) | ((uint32_t)p[3] << 24);
}
static void wr16(uint8_t *p, uint16_t v) {
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* IEEE binary16 by its definition: (-1)^s * 2^(e-15) * 1.m, subnormal 2^-14 * 0.m. */
static float ref_half(uint16_t h) {
    const int s = h >> 15, e = (h >> 10) & 31, m = h & 1023;
    double v;
    if (e == 31) v = m ? NAN : INFINITY;
    else if (e == 0) v = ldexp((double)m, -24);
    else v = ldexp((double)(1024 + m), e - 25);
    return (float)(s ? -v : v);
}

static float rdf32(const uint8_t *p) {
    float f;
    memcpy(&f, p, 4);
    return f;
}

/* Q4_K/Q5_K 6-bit scale and min of sub-block j (docs/engine.md §2.2). */
static void ref_k_scale_min(const uint8_t *s, int j, int *sc, int *m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

typedef struct {
    int type, elems, bytes;
} ref_layout;

static const ref_layout layouts[] = {
    {PKV_TYPE_F32, 1, 4},      {PKV_TYPE_F16, 1, 2},      {PKV_TYPE_BF16, 1, 2},
    {PKV_TYPE_Q4_0, 32, 18},   {PKV_TYPE_Q4_1, 32, 20},   {PKV_TYPE_Q5_0, 32, 22},
    {PKV_TYPE_Q5_1, 32, 24},   {PKV_TYPE_Q8_0, 32, 34},   {PKV_TYPE_Q8_1, 32, 36},
    {PKV_TYPE_Q4_K, 256, 144}, {PKV_TYPE_Q5_K, 256, 176}, {PKV_TYPE_Q6_K, 256, 210},
    {PKV_TYPE_Q8_K, 256, 292},
};

static const ref_layout *layout_of(int type) {
    for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
        if (layouts[i].type == type) return &layouts[i];
    return NULL;
}

/* Element j of the block at b, straight from the formulas. */
static float ref_elem(int type, const uint8_t *b, int j) {
    switch (type) {
    case PKV_TYPE_F32: return rdf32(b);
    case PKV_TYPE_F16: return ref_half(rd16(b));
    case PKV_TYPE_BF16: {
        const uint32_t u = (uint32_t)rd16(b) << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    case PKV_TYPE_Q4_0: {
        const float d = ref_half(rd16(b));
        const int q = j < 16 ? (b[2 + j] & 15) : (b[2 + j - 16] >> 4);
        return (float)(q - 8) * d;
    }
    case PKV_TYPE_Q4_1: {
        const float d = ref_half(rd16(b)), m = ref_half(rd16(b + 2));
        const int q = j < 16 ? (b[4 + j] & 15) : (b[4 + j - 16] >> 4);
        return (float)q * d + m;
    }
    case PKV_TYPE_Q5_0: {
        const float d = ref_half(rd16(b));
        const uint32_t qh = rd32(b + 2);
        const int lo4 = j < 16 ? (b[6 + j] & 15) : (b[6 + j - 16] >> 4);
        const int q = lo4 | (int)(((qh >> j) & 1) << 4); /* bit j: element j, either half */
        return (float)(q - 16) * d;
    }
    case PKV_TYPE_Q5_1: {
        const float d = ref_half(rd16(b)), m = ref_half(rd16(b + 2));
        const uint32_t qh = rd32(b + 4);
        const int lo4 = j < 16 ? (b[8 + j] & 15) : (b[8 + j - 16] >> 4);
        const int q = lo4 | (int)(((qh >> j) & 1) << 4);
        return (float)q * d + m;
    }
    case PKV_TYPE_Q8_0: return (float)(int8_t)b[2 + j] * ref_half(rd16(b));
    case PKV_TYPE_Q8_1: return (float)(int8_t)b[4 + j] * ref_half(rd16(b));
    case PKV_TYPE_Q4_K:
    case PKV_TYPE_Q5_K: {
        const float d = ref_half(rd16(b)), dmin = ref_half(rd16(b + 2));
        const int sub = j / 32, l = j % 32;
        int sc, m;
        ref_k_scale_min(b + 4, sub, &sc, &m);
        const uint8_t *qs = b + (type == PKV_TYPE_Q4_K ? 16 : 48);
        const uint8_t byte = qs[32 * (sub / 2) + l];
        int q = sub % 2 ? byte >> 4 : byte & 15;
        if (type == PKV_TYPE_Q5_K) q += 16 * ((b[16 + l] >> sub) & 1);
        return d * sc * q - dmin * m;
    }
    case PKV_TYPE_Q6_K: {
        const int h = j / 128, r = j % 128, c = r / 32, l = r % 32;
        const uint8_t lbyte = b[64 * h + 32 * (c & 1) + l];
        const int low = c < 2 ? lbyte & 15 : lbyte >> 4;
        const int high = (b[128 + 32 * h + l] >> (2 * c)) & 3;
        const int q = low | (high << 4);
        const float d = ref_half(rd16(b + 208));
        return d * (int8_t)b[192 + j / 16] * (q - 32);
    }
    case PKV_TYPE_Q8_K: return rdf32(b) * (float)(int8_t)b[4 + j];
    }
    return NAN;
}

static float ref_row_elem(int type, const void *row, int64_t i) {
    const ref_layout *L = layout_of(type);
    return ref_elem(type, (const uint8_t *)row + (i / L->elems) * L->bytes, (int)(i % L->elems));
}

/* ------------------------------------------------------------------ test utilities */

static float rng_uniform(uint64_t *s) { return (float)((pkv_splitmix64(s) >> 40) * (1.0 / 16777216.0)); }
static float rng_sym(uint64_t *s) { return 2.0f * rng_uniform(s) - 1.0f; }

static pkv_simd levels[3];
static int available_levels(void) {
    int n = 0;
    const pkv_simd best = pkv_simd_detect();
    for (pkv_simd l = PKV_SIMD_SCALAR; l <= PKV_SIMD_AVX512; l++)
        if (l <= best) levels[n++] = l;
    return n;
}

static bool same_bits(float a, float b) { return pkv_f32_to_bits(a) == pkv_f32_to_bits(b); }

/* A random weight row: random bytes, then every fp16 scale field set to a
 * finite value of magnitude up to mag (either sign). */
static void random_weight_row(int type, int64_t n, uint8_t *row, uint64_t *rng, float mag) {
    const uint64_t bytes = pkv_row_bytes((uint32_t)type, n);
    for (uint64_t i = 0; i < bytes; i++) row[i] = (uint8_t)pkv_splitmix64(rng);
    const ref_layout *L = layout_of(type);
    const int64_t nb = n / L->elems;
    for (int64_t i = 0; i < nb; i++) {
        uint8_t *b = row + i * L->bytes;
        switch (type) {
        case PKV_TYPE_F32: {
            const float v = rng_sym(rng) * mag;
            memcpy(b, &v, 4);
            break;
        }
        case PKV_TYPE_F16: wr16(b, pkv_f32_to_f16(rng_sym(rng) * mag)); break;
        case PKV_TYPE_BF16: wr16(b, pkv_f32_to_bf16(rng_sym(rng) * mag)); break;
        case PKV_TYPE_Q4_0:
        case PKV_TYPE_Q5_0:
        case PKV_TYPE_Q8_0: wr16(b, pkv_f32_to_f16(rng_sym(rng) * mag)); break;
        case PKV_TYPE_Q4_1:
        case PKV_TYPE_Q5_1:
        case PKV_TYPE_Q4_K:
        case PKV_TYPE_Q5_K:
            wr16(b, pkv_f32_to_f16(rng_sym(rng) * mag));
            wr16(b + 2, pkv_f32_to_f16(rng_sym(rng) * mag));
            break;
        case PKV_TYPE_Q6_K: wr16(b + 208, pkv_f32_to_f16(rng_sym(rng) * mag)); break;
        }
    }
}

static const int weight_types[] = {PKV_TYPE_F32,  PKV_TYPE_F16,  PKV_TYPE_BF16, PKV_TYPE_Q4_0,
                                   PKV_TYPE_Q4_1, PKV_TYPE_Q5_0, PKV_TYPE_Q5_1, PKV_TYPE_Q8_0,
                                   PKV_TYPE_Q4_K, PKV_TYPE_Q5_K, PKV_TYPE_Q6_K};
#define N_WEIGHT_TYPES (int)(sizeof weight_types / sizeof weight_types[0])

/* Dequantise with every level and compare bit for bit with the reference. */
static void check_dequant_row(int type, const void *row, int64_t n, const char *what) {
    float *out = malloc((size_t)(n + 8) * sizeof(float));
    const int nl = available_levels();
    for (int li = 0; li < nl; li++) {
        const pkv_kernels *k = pkv_kernels_get(levels[li]);
        for (int g = 0; g < 8; g++) out[n + g] = 12345.0f;
        k->dequant[type](row, out, n);
        int bad = 0;
        for (int64_t i = 0; i < n && bad < 3; i++) {
            const float want = ref_row_elem(type, row, i);
            if (!same_bits(out[i], want)) {
                bad++;
                test_fail(__FILE__, __LINE__, "%s %s %s: element %lld = %.9g, want %.9g",
                          pkv_type_get((uint32_t)type)->name, what, pkv_simd_name(levels[li]), (long long)i,
                          out[i], want);
            }
        }
        for (int g = 0; g < 8; g++) CHECK_MSG(out[n + g] == 12345.0f, "dequant wrote past n");
    }
    free(out);
}

/* ------------------------------------------------------------------ type table and dispatch */

TEST(quant_type_table_sizes_and_flags) {
    /* docs/engine.md §1.3 */
    static const struct {
        uint32_t id;
        const char *name;
        int elems, bytes;
        bool computable;
    } want[] = {
        {0, "F32", 1, 4, true},          {1, "F16", 1, 2, true},          {2, "Q4_0", 32, 18, true},
        {3, "Q4_1", 32, 20, true},       {6, "Q5_0", 32, 22, true},       {7, "Q5_1", 32, 24, true},
        {8, "Q8_0", 32, 34, true},       {9, "Q8_1", 32, 36, false},      {10, "Q2_K", 256, 84, false},
        {11, "Q3_K", 256, 110, false},   {12, "Q4_K", 256, 144, true},    {13, "Q5_K", 256, 176, true},
        {14, "Q6_K", 256, 210, true},    {15, "Q8_K", 256, 292, false},   {20, "IQ4_NL", 32, 18, false},
        {23, "IQ4_XS", 256, 136, false}, {24, "I8", 1, 1, false},         {25, "I16", 1, 2, false},
        {26, "I32", 1, 4, false},        {27, "I64", 1, 8, false},        {28, "F64", 1, 8, false},
        {30, "BF16", 1, 2, true},        {34, "TQ1_0", 256, 54, false},   {35, "TQ2_0", 256, 66, false},
        {39, "MXFP4", 32, 17, false},
        /* not in the engine-notes table; sizes from gguf-py GGML_QUANT_SIZES and ggml-common.h */
        {16, "IQ2_XXS", 256, 66, false}, {17, "IQ2_XS", 256, 74, false},  {18, "IQ3_XXS", 256, 98, false},
        {19, "IQ1_S", 256, 50, false},   {21, "IQ3_S", 256, 110, false},  {22, "IQ2_S", 256, 82, false},
        {29, "IQ1_M", 256, 56, false},   {40, "NVFP4", 64, 36, false},    {41, "Q1_0", 128, 18, false},
        {42, "Q2_0", 64, 18, false},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const pkv_type_info *t = pkv_type_get(want[i].id);
        REQUIRE_MSG(t != NULL, "type %u missing", want[i].id);
        CHECK_STR(t->name, want[i].name);
        CHECK_EQ_INT(t->block_elems, want[i].elems);
        CHECK_EQ_INT(t->block_bytes, want[i].bytes);
        CHECK_MSG(t->computable == want[i].computable, "%s computable flag", want[i].name);
    }
    const uint32_t retired[] = {4, 5, 31, 32, 33, 36, 37, 38, 43, 44, 100, 0xffffffffu};
    for (size_t i = 0; i < sizeof retired / sizeof retired[0]; i++)
        CHECK_MSG(pkv_type_get(retired[i]) == NULL, "id %u should be unknown", retired[i]);
    /* every known id has a positive block size, so byte counts can be validated */
    for (uint32_t id = 0; id < PKV_TYPE_COUNT; id++) {
        const pkv_type_info *t = pkv_type_get(id);
        if (t) CHECK_MSG(t->block_elems > 0 && t->block_bytes > 0, "id %u sizes", id);
    }
    /* activation formats, docs/engine.md §2.3 (F32 activations for float weights: our choice) */
    CHECK_EQ_INT(pkv_type_get(PKV_TYPE_Q4_0)->act_type, PKV_TYPE_Q8_0);
    CHECK_EQ_INT(pkv_type_get(PKV_TYPE_Q5_0)->act_type, PKV_TYPE_Q8_0);
    CHECK_EQ_INT(pkv_type_get(PKV_TYPE_Q8_0)->act_type, PKV_TYPE_Q8_0);
    CHECK_EQ_INT(pkv_type_get(PKV_TYPE_Q4_1)->act_type, PKV_TYPE_Q8_1);
    CHECK_EQ_INT(pkv_type_get(PKV_TYPE_Q5_1)->act_type, PKV_TYPE_Q8_1);
    CHECK_EQ_INT(pkv_type_get(PKV_TYPE_Q4_K)->act_type, PKV_TYPE_Q8_K);
    CHECK_EQ_INT(pkv_type_get(PKV_TYPE_Q5_K)->act_type, PKV_TYPE_Q8_K);
    CHECK_EQ_INT(pkv_type_get(PKV_TYPE_Q6_K)->act_type, PKV_TYPE_Q8_K);
    CHECK_EQ_INT(pkv_type_get(PKV_TYPE_F16)->act_type, PKV_TYPE_F32);
    CHECK_EQ_INT(pkv_type_get(PKV_TYPE_BF16)->act_type, PKV_TYPE_F32);
    CHECK_EQ_INT(pkv_type_get(PKV_TYPE_F32)->act_type, PKV_TYPE_F32);
}

TEST(quant_row_bytes) {
    CHECK_EQ_INT(pkv_row_bytes(PKV_TYPE_Q4_K, 512), 288);
    CHECK_EQ_INT(pkv_row_bytes(PKV_TYPE_Q8_0, 640), 680);
    CHECK_EQ_INT(pkv_row_bytes(PKV_TYPE_Q5_0, 640), 440);
    CHECK_EQ_INT(pkv_row_bytes(PKV_TYPE_F32, 3), 12);
    CHECK_EQ_INT(pkv_row_bytes(PKV_TYPE_Q4_K, 640), 0); /* not a multiple of 256 */
    CHECK_EQ_INT(pkv_row_bytes(PKV_TYPE_Q4_0, 33), 0);
    CHECK_EQ_INT(pkv_row_bytes(4, 32), 0);               /* retired */
    CHECK_EQ_INT(pkv_row_bytes(PKV_TYPE_F16, -2), 0);
    CHECK_EQ_INT(pkv_row_bytes(PKV_TYPE_I64, INT64_MAX), 0); /* overflow */
}

TEST(quant_kernel_tables_dispatch) {
    const pkv_simd best = pkv_simd_detect();
    CHECK(best >= PKV_SIMD_SCALAR && best <= PKV_SIMD_AVX512);
    CHECK_EQ_INT(pkv_kernels_get(PKV_SIMD_AUTO)->level, best);
    CHECK_EQ_INT(pkv_kernels_get(PKV_SIMD_SCALAR)->level, PKV_SIMD_SCALAR);
    /* a level above the CPU's falls back to the best it has */
    CHECK(pkv_kernels_get(PKV_SIMD_AVX512)->level <= best);
    CHECK(pkv_kernels_get(PKV_SIMD_AVX2)->level <= best);
    CHECK(pkv_kernels_get(PKV_SIMD_AUTO) == pkv_kernels_get(best)); /* immutable, shared tables */
    CHECK_STR(pkv_simd_name(PKV_SIMD_SCALAR), "scalar");
    CHECK_STR(pkv_simd_name(PKV_SIMD_AVX2), "avx2");
    CHECK_STR(pkv_simd_name(PKV_SIMD_AVX512), "avx512");
    CHECK_STR(pkv_simd_name(PKV_SIMD_AUTO), "auto");
    const int nl = available_levels();
    for (int li = 0; li < nl; li++) {
        const pkv_kernels *k = pkv_kernels_get(levels[li]);
        CHECK_EQ_INT(k->level, levels[li]);
        for (uint32_t id = 0; id < PKV_TYPE_COUNT; id++) {
            const pkv_type_info *t = pkv_type_get(id);
            if (!t || !t->computable) continue;
            CHECK_MSG(k->dequant[id] && k->vec_dot[id] && k->quantize[t->act_type],
                      "%s: %s kernels missing", pkv_simd_name(levels[li]), t->name);
        }
        CHECK(k->dot_f32 && k->axpy_f32 && k->dot_f16_f32 && k->axpy_f16 && k->f32_to_f16 && k->f16_to_f32);
        CHECK(k->vec_dot[PKV_TYPE_IQ4_XS] == NULL && k->dequant[PKV_TYPE_Q2_K] == NULL);
    }
}

/* ------------------------------------------------------------------ fp16 / bf16 */

TEST(quant_f16_all_codes_decode_exactly) {
    static uint16_t codes[65536];
    static float dec[65536];
    for (int h = 0; h < 65536; h++) codes[h] = (uint16_t)h;
    int bad = 0;
    for (int h = 0; h < 65536 && bad < 5; h++) {
        const float got = pkv_f16_to_f32((uint16_t)h), want = ref_half((uint16_t)h);
        if (isnan(want)) {
            if (!isnan(got) || signbit(got) != signbit(want)) bad++, test_fail(__FILE__, __LINE__, "NaN code %04x", h);
            continue;
        }
        if (!same_bits(got, want)) bad++, test_fail(__FILE__, __LINE__, "code %04x: %.9g vs %.9g", h, got, want);
        /* the round trip returns the code (both zeros keep their sign) */
        if (pkv_f32_to_f16(got) != h) bad++, test_fail(__FILE__, __LINE__, "round trip of %04x", h);
    }
    /* every level's f16_to_f32 and f32_to_f16 kernels on all codes */
    const int nl = available_levels();
    for (int li = 0; li < nl; li++) {
        const pkv_kernels *k = pkv_kernels_get(levels[li]);
        k->f16_to_f32(codes, dec, 65536);
        int bad_level = 0;
        for (int h = 0; h < 65536 && bad_level < 5; h++) {
            const float want = ref_half((uint16_t)h);
            const bool ok = isnan(want) ? isnan(dec[h]) && signbit(dec[h]) == signbit(want) : same_bits(dec[h], want);
            if (!ok) bad_level++, test_fail(__FILE__, __LINE__, "%s f16_to_f32 %04x", pkv_simd_name(levels[li]), h);
        }
        static uint16_t back[65536];
        k->f32_to_f16(dec, back, 65536);
        for (int h = 0; h < 65536 && bad_level < 10; h++) {
            if (isnan(dec[h])) continue;
            if (back[h] != h) bad_level++, test_fail(__FILE__, __LINE__, "%s f32_to_f16 %04x", pkv_simd_name(levels[li]), h);
        }
    }
}

TEST(quant_f16_literals) {
    CHECK(pkv_f16_to_f32(0x3C00) == 1.0f);
    CHECK(pkv_f16_to_f32(0x3555) == 0.333251953125f);
    CHECK(pkv_f16_to_f32(0x7BFF) == 65504.0f);
    CHECK(pkv_f16_to_f32(0x0001) == 5.9604644775390625e-08f); /* 2^-24 */
    CHECK(pkv_f16_to_f32(0x03FF) == 6.09755516052246094e-05f); /* 1023 * 2^-24 */
    CHECK(pkv_f16_to_f32(0x8400) == -6.103515625e-05f);       /* -2^-14 */
    CHECK(isinf(pkv_f16_to_f32(0xFC00)) && pkv_f16_to_f32(0xFC00) < 0);
    CHECK(same_bits(pkv_f16_to_f32(0x8000), -0.0f));
}

TEST(quant_f32_to_f16_rounding_ties) {
    const float ulp1 = 0x1p-10f; /* spacing of f16 at 1.0 */
    CHECK_EQ_INT(pkv_f32_to_f16(1.0f + ulp1 / 2), 0x3C00);             /* tie -> even (down) */
    CHECK_EQ_INT(pkv_f32_to_f16(1.0f + 3 * ulp1 / 2), 0x3C02);         /* tie -> even (up) */
    CHECK_EQ_INT(pkv_f32_to_f16(1.0f + ulp1 / 2 + 0x1p-20f), 0x3C01);  /* just above tie */
    CHECK_EQ_INT(pkv_f32_to_f16(-(1.0f + ulp1 / 2)), 0xBC00);
    CHECK_EQ_INT(pkv_f32_to_f16(65519.0f), 0x7BFF);                    /* below the 65520 tie */
    CHECK_EQ_INT(pkv_f32_to_f16(65520.0f), 0x7C00);                    /* tie with odd 65504 -> inf */
    CHECK_EQ_INT(pkv_f32_to_f16(-65520.0f), 0xFC00);
    CHECK_EQ_INT(pkv_f32_to_f16(1e10f), 0x7C00);
    CHECK_EQ_INT(pkv_f32_to_f16(0x1p-25f), 0x0000);                    /* tie 0 / 2^-24 -> 0 */
    CHECK_EQ_INT(pkv_f32_to_f16(0x1p-25f + 0x1p-40f), 0x0001);
    CHECK_EQ_INT(pkv_f32_to_f16(3 * 0x1p-25f), 0x0002);                /* tie 1 / 2 -> 2 */
    CHECK_EQ_INT(pkv_f32_to_f16(5 * 0x1p-25f), 0x0002);                /* tie 2 / 3 -> 2 */
    CHECK_EQ_INT(pkv_f32_to_f16(0x1p-14f - 0x1p-25f), 0x0400);         /* tie 0x3FF / 0x400 -> even */
    CHECK_EQ_INT(pkv_f32_to_f16(-0x1p-26f), 0x8000);
    CHECK_EQ_INT(pkv_f32_to_f16(INFINITY), 0x7C00);
    const uint16_t nan = pkv_f32_to_f16(NAN);
    CHECK(((nan & 0x7C00) == 0x7C00) && (nan & 0x3FF) && (nan & 0x200)); /* quiet NaN */

    /* the exact midpoint between every pair of neighbouring finite codes rounds
     * to the even one, on every level */
    static float mids[2 * 31743];
    static uint16_t want[2 * 31743], got[2 * 31743];
    int n = 0;
    for (uint32_t h = 0; h < 0x7BFF; h++) {
        const float lo = ref_half((uint16_t)h), hi = ref_half((uint16_t)(h + 1));
        const uint16_t even = (uint16_t)((h & 1) ? h + 1 : h);
        mids[n] = (lo + hi) / 2, want[n++] = even;
        mids[n] = -(lo + hi) / 2, want[n++] = (uint16_t)(even | 0x8000);
    }
    const int nl = available_levels();
    for (int li = 0; li < nl; li++) {
        pkv_kernels_get(levels[li])->f32_to_f16(mids, got, n);
        int bad = 0;
        for (int i = 0; i < n && bad < 5; i++)
            if (got[i] != want[i])
                bad++, test_fail(__FILE__, __LINE__, "%s: midpoint %.9g -> %04x, want %04x",
                                 pkv_simd_name(levels[li]), mids[i], got[i], want[i]);
    }
}

TEST(quant_f32_to_f16_simd_matches_scalar_on_random_bits) {
    enum { N = 100003 };
    float *x = malloc(N * sizeof(float));
    uint16_t *want = malloc(N * 2), *got = malloc((N + 4) * 2);
    uint64_t rng = 7;
    for (int i = 0; i < N; i++) {
        uint32_t u = (uint32_t)pkv_splitmix64(&rng);
        if (i % 2) u = (u & 0x807fffffu) | ((uint32_t)(100 + (pkv_splitmix64(&rng) % 60)) << 23); /* near f16 range */
        memcpy(&x[i], &u, 4);
    }
    for (int i = 0; i < N; i++) want[i] = pkv_f32_to_f16(x[i]);
    const int nl = available_levels();
    for (int li = 0; li < nl; li++) {
        for (int g = 0; g < 4; g++) got[N + g] = 0xABCD;
        pkv_kernels_get(levels[li])->f32_to_f16(x, got, N);
        int bad = 0;
        for (int i = 0; i < N && bad < 5; i++)
            if (got[i] != want[i])
                bad++, test_fail(__FILE__, __LINE__, "%s: %08x -> %04x, want %04x", pkv_simd_name(levels[li]),
                                 pkv_f32_to_bits(x[i]), got[i], want[i]);
        for (int g = 0; g < 4; g++) CHECK(got[N + g] == 0xABCD);
    }
    free(x), free(want), free(got);
}

TEST(quant_bf16_rounding) {
    float v[5];
    uint16_t out[5];
    const uint32_t bits[5] = {0x3F808000u /* tie, even down */, 0x3F818000u /* tie, up */, 0x3F808001u,
                              0x7F800001u /* sNaN */, 0xFF7FFFFFu /* -max rounds to -inf */};
    for (int i = 0; i < 5; i++) memcpy(&v[i], &bits[i], 4);
    pkv_quantize_row_ref(PKV_TYPE_BF16, v, out, 5);
    CHECK_EQ_INT(out[0], 0x3F80);
    CHECK_EQ_INT(out[1], 0x3F82);
    CHECK_EQ_INT(out[2], 0x3F81);
    CHECK((out[3] & 0x7FC0) == 0x7FC0); /* NaN kept, made quiet */
    CHECK_EQ_INT(out[4], 0xFF80);
}

/* ------------------------------------------------------------------ dequantisation */

/* A row made of one hand-built block, checked against literals and, on every
 * level, bit for bit against the reference. */
static void expect_elem(int type, const uint8_t *block, int n, int j, float want) {
    float out[256];
    const int nl = available_levels();
    for (int li = 0; li < nl; li++) {
        pkv_kernels_get(levels[li])->dequant[type](block, out, n);
        CHECK_MSG(same_bits(out[j], want), "%s %s element %d = %.9g, want %.9g", pkv_type_get((uint32_t)type)->name,
                  pkv_simd_name(levels[li]), j, out[j], want);
    }
}

TEST(quant_dequant_legacy_hand_values) {
    uint8_t b[36];

    memset(b, 0, sizeof b); /* Q4_0: d = 0.5 */
    wr16(b, 0x3800);
    b[2 + 0] = 0xF0, b[2 + 15] = 0x9A;
    expect_elem(PKV_TYPE_Q4_0, b, 32, 0, -4.0f);  /* (0 - 8) * 0.5 */
    expect_elem(PKV_TYPE_Q4_0, b, 32, 16, 3.5f); /* (15 - 8) * 0.5 */
    expect_elem(PKV_TYPE_Q4_0, b, 32, 15, 1.0f); /* (10 - 8) * 0.5 */
    expect_elem(PKV_TYPE_Q4_0, b, 32, 31, 0.5f); /* (9 - 8) * 0.5 */
    check_dequant_row(PKV_TYPE_Q4_0, b, 32, "hand");

    memset(b, 0, sizeof b); /* Q4_1: d = 1, m = -2 */
    wr16(b, 0x3C00), wr16(b + 2, 0xC000);
    b[4 + 3] = 0x5C;
    expect_elem(PKV_TYPE_Q4_1, b, 32, 3, 10.0f); /* 12 - 2 */
    expect_elem(PKV_TYPE_Q4_1, b, 32, 19, 3.0f); /* 5 - 2 */
    expect_elem(PKV_TYPE_Q4_1, b, 32, 0, -2.0f);
    check_dequant_row(PKV_TYPE_Q4_1, b, 32, "hand");

    memset(b, 0, sizeof b); /* Q5_0: d = 2, qh bits 0 and 31 */
    wr16(b, 0x4000);
    b[2] = 0x01, b[5] = 0x80;
    b[6 + 0] = 0x3A, b[6 + 15] = 0xF0;
    expect_elem(PKV_TYPE_Q5_0, b, 32, 0, 20.0f);   /* (10 | 16) - 16 = 10, * 2 */
    expect_elem(PKV_TYPE_Q5_0, b, 32, 16, -26.0f); /* 3 - 16 */
    expect_elem(PKV_TYPE_Q5_0, b, 32, 15, -32.0f); /* 0 - 16 */
    expect_elem(PKV_TYPE_Q5_0, b, 32, 31, 30.0f);  /* (15 | 16) - 16 */
    check_dequant_row(PKV_TYPE_Q5_0, b, 32, "hand");

    memset(b, 0, sizeof b); /* Q5_1: d = 0.5, m = 1, qh bit 16 */
    wr16(b, 0x3800), wr16(b + 2, 0x3C00);
    b[4 + 2] = 0x01;
    b[8 + 0] = 0x21;
    expect_elem(PKV_TYPE_Q5_1, b, 32, 0, 1.5f);   /* 1 * 0.5 + 1 */
    expect_elem(PKV_TYPE_Q5_1, b, 32, 16, 10.0f); /* (2 | 16) * 0.5 + 1 */
    check_dequant_row(PKV_TYPE_Q5_1, b, 32, "hand");

    memset(b, 0, sizeof b); /* Q8_0: d = -0.25 */
    wr16(b, 0xB400);
    b[2 + 0] = 0x80, b[2 + 31] = 127;
    expect_elem(PKV_TYPE_Q8_0, b, 32, 0, 32.0f);
    expect_elem(PKV_TYPE_Q8_0, b, 32, 31, -31.75f);
    check_dequant_row(PKV_TYPE_Q8_0, b, 32, "hand");

    uint16_t h[4] = {0x3FC0, 0xC049, 0x3555, 0x0001};
    expect_elem(PKV_TYPE_BF16, (uint8_t *)h, 2, 0, 1.5f);
    expect_elem(PKV_TYPE_BF16, (uint8_t *)h, 2, 1, -3.140625f);
    expect_elem(PKV_TYPE_F16, (uint8_t *)(h + 2), 2, 0, 0.333251953125f);
    expect_elem(PKV_TYPE_F16, (uint8_t *)(h + 2), 2, 1, 0x1p-24f);
}

TEST(quant_dequant_q5_fifth_bit_every_position) {
    for (int j = 0; j < 32; j++) {
        uint8_t b0[22] = {0}, b1[24] = {0};
        wr16(b0, 0x3C00); /* Q5_0, d = 1, all nibbles 0: value -16 unless bit j adds 16 */
        b0[2 + j / 8] = (uint8_t)(1u << (j % 8));
        wr16(b1, 0x3C00), wr16(b1 + 2, 0x3800); /* Q5_1, d = 1, m = 0.5 */
        b1[4 + j / 8] = (uint8_t)(1u << (j % 8));
        float o0[32], o1[32];
        const int nl = available_levels();
        for (int li = 0; li < nl; li++) {
            const pkv_kernels *k = pkv_kernels_get(levels[li]);
            k->dequant[PKV_TYPE_Q5_0](b0, o0, 32);
            k->dequant[PKV_TYPE_Q5_1](b1, o1, 32);
            for (int e = 0; e < 32; e++) {
                CHECK_MSG(o0[e] == (e == j ? 0.0f : -16.0f), "Q5_0 %s bit %d element %d = %g",
                          pkv_simd_name(levels[li]), j, e, o0[e]);
                CHECK_MSG(o1[e] == (e == j ? 16.5f : 0.5f), "Q5_1 %s bit %d element %d = %g",
                          pkv_simd_name(levels[li]), j, e, o1[e]);
            }
        }
    }
}

/* Pack 8 six-bit scales and mins per the words of docs/engine.md §2.2. */
static void pack_k_scales_from_words(const int sc[8], const int m[8], uint8_t s[12]) {
    for (int j = 0; j < 4; j++) {
        s[j] = (uint8_t)(sc[j] | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = (uint8_t)(m[j] | ((m[j + 4] >> 4) << 6));
        s[j + 8] = (uint8_t)((sc[j + 4] & 15) | ((m[j + 4] & 15) << 4));
    }
}

TEST(quant_dequant_k_scale_unpacking) {
    const int sc[8] = {1, 2, 63, 40, 17, 33, 48, 62}, m[8] = {5, 0, 62, 31, 47, 16, 63, 34};
    /* packed by hand: top bits of scales/mins 4..7 in bits 6-7 of bytes 0..7 */
    const uint8_t packed[12] = {0x41, 0x82, 0xFF, 0xE8, 0x85, 0x40, 0xFE, 0x9F, 0xF1, 0x01, 0xF0, 0x2E};
    uint8_t check[12];
    pack_k_scales_from_words(sc, m, check);
    CHECK(memcmp(check, packed, 12) == 0);

    uint8_t q4k[144] = {0}, q5k[176] = {0};
    wr16(q4k, 0x3C00), wr16(q4k + 2, 0x3C00); /* d = dmin = 1 */
    memcpy(q4k + 4, packed, 12);
    memset(q4k + 16, 0x11, 128); /* q = 1 everywhere */
    wr16(q5k, 0x3C00), wr16(q5k + 2, 0x3C00);
    memcpy(q5k + 4, packed, 12);
    memset(q5k + 16, 0xFF, 32); /* every fifth bit: q = 17 */
    memset(q5k + 48, 0x11, 128);
    const float want4[8] = {-4, 2, 1, 9, -30, 17, -15, 28};           /* sc - m */
    const float want5[8] = {12, 34, 1009, 649, 242, 545, 753, 1020}; /* 17 sc - m */
    for (int j = 0; j < 8; j++) {
        expect_elem(PKV_TYPE_Q4_K, q4k, 256, 32 * j + 7, want4[j]);
        expect_elem(PKV_TYPE_Q5_K, q5k, 256, 32 * j + 30, want5[j]);
    }
    check_dequant_row(PKV_TYPE_Q4_K, q4k, 256, "hand");
    check_dequant_row(PKV_TYPE_Q5_K, q5k, 256, "hand");

    /* negative dmin adds the min; fifth bit l%8 set only: each sub-block sees it in 4 lanes */
    wr16(q5k + 2, 0xB800); /* dmin = -0.5 */
    for (int l = 0; l < 32; l++) q5k[16 + l] = (uint8_t)(1u << (l % 8));
    for (int j = 0; j < 8; j++) {
        expect_elem(PKV_TYPE_Q5_K, q5k, 256, 32 * j + j, (float)(17 * sc[j]) + 0.5f * (float)m[j]);
        expect_elem(PKV_TYPE_Q5_K, q5k, 256, 32 * j + (j + 1) % 8, (float)sc[j] + 0.5f * (float)m[j]);
    }
    check_dequant_row(PKV_TYPE_Q5_K, q5k, 256, "negative dmin");
}

TEST(quant_dequant_q6_K_quarters) {
    uint8_t b[210] = {0};
    wr16(b + 208, 0x3C00); /* d = 1 */
    int8_t *scales = (int8_t *)(b + 192);
    scales[0] = 2, scales[2] = -3, scales[4] = 5, scales[6] = -128, scales[8] = 7;
    b[0] = 0x21, b[32] = 0x43, b[128] = 0xE4; /* qh pairs 00, 01, 10, 11 */
    b[64] = 0x0F, b[128 + 32] = 0x03;
    expect_elem(PKV_TYPE_Q6_K, b, 256, 0, -62.0f);    /* q 1 - 32 = -31, * 2 */
    expect_elem(PKV_TYPE_Q6_K, b, 256, 32, 39.0f);    /* (3 | 1<<4) - 32 = -13, * -3 */
    expect_elem(PKV_TYPE_Q6_K, b, 256, 64, 10.0f);    /* (2 | 2<<4) - 32 = 2, * 5 */
    expect_elem(PKV_TYPE_Q6_K, b, 256, 96, -2560.0f); /* (4 | 3<<4) - 32 = 20, * -128 */
    expect_elem(PKV_TYPE_Q6_K, b, 256, 128, 217.0f);  /* (15 | 3<<4) - 32 = 31, * 7 */
    expect_elem(PKV_TYPE_Q6_K, b, 256, 1, -64.0f);    /* q 0 - 32, * 2 */
    check_dequant_row(PKV_TYPE_Q6_K, b, 256, "hand");
}

/* Extreme scales: fp16 max, negative, subnormal, zero (signed zeros must
 * match too), with random quants, on every level. */
TEST(quant_dequant_extreme_scales) {
    const uint16_t scales[] = {0x7BFF, 0xFBFF, 0x0001, 0x8001, 0x03FF, 0x0000, 0x8000, 0xBC00, 0x3C00, 0x1400};
    const int ns = (int)(sizeof scales / sizeof scales[0]);
    uint64_t rng = 99;
    static uint8_t row[8 * 210];
    for (int t = 0; t < N_WEIGHT_TYPES; t++) {
        const int type = weight_types[t];
        const ref_layout *L = layout_of(type);
        if (L->elems == 1) continue;
        const int nblocks = 8, n = nblocks * L->elems;
        for (int si = 0; si < ns; si++) {
            for (int i = 0; i < nblocks * L->bytes; i++) row[i] = (uint8_t)pkv_splitmix64(&rng);
            for (int bi = 0; bi < nblocks; bi++) {
                uint8_t *b = row + bi * L->bytes;
                const uint16_t d = scales[si], other = scales[(si + bi + 1) % ns];
                if (type == PKV_TYPE_Q6_K) wr16(b + 208, d);
                else wr16(b, d);
                if (type == PKV_TYPE_Q4_1 || type == PKV_TYPE_Q5_1 || type == PKV_TYPE_Q4_K ||
                    type == PKV_TYPE_Q5_K)
                    wr16(b + 2, other);
            }
            check_dequant_row(type, row, n, "extreme");
        }
    }
    /* literals */
    uint8_t b[34] = {0};
    wr16(b, 0x7BFF);
    b[2] = 127, b[3] = 0x80, b[4] = 1;
    expect_elem(PKV_TYPE_Q8_0, b, 32, 0, 8319008.0f);  /* 65504 * 127 */
    expect_elem(PKV_TYPE_Q8_0, b, 32, 1, -8384512.0f); /* 65504 * -128 */
    expect_elem(PKV_TYPE_Q8_0, b, 32, 2, 65504.0f);
    uint8_t q4[18] = {0};
    wr16(q4, 0x0001);
    expect_elem(PKV_TYPE_Q4_0, q4, 32, 0, -0x1p-21f); /* -8 * 2^-24 */
    wr16(q4, 0x0000);
    expect_elem(PKV_TYPE_Q4_0, q4, 32, 0, -0.0f); /* (0 - 8) * +0 = -0 */
}

TEST(quant_dequant_random_rows_exact_all_levels) {
    uint64_t rng = 1234;
    static uint8_t row[8192];
    for (int t = 0; t < N_WEIGHT_TYPES; t++) {
        const int type = weight_types[t];
        const int64_t n = layout_of(type)->elems == 256 ? 2048 : 1024 + (layout_of(type)->elems == 1 ? 7 : 0);
        for (int rep = 0; rep < 4; rep++) {
            random_weight_row(type, n, row, &rng, rep == 0 ? 1e-3f : 3.0f);
            check_dequant_row(type, row, n, "random");
        }
    }
}

/* ------------------------------------------------------------------ activation quantisers */

/* Run quantize[type] on every level; all must produce the same bytes. Returns
 * the scalar bytes in out. */
static void quantize_all_levels(int type, const float *x, int64_t n, uint8_t *out, const char *what) {
    const uint64_t bytes = pkv_row_bytes((uint32_t)type, n);
    uint8_t *other = malloc(bytes + 16);
    memset(out, 0xAB, bytes);
    pkv_kernels_get(PKV_SIMD_SCALAR)->quantize[type](x, out, n);
    const int nl = available_levels();
    for (int li = 1; li < nl; li++) {
        memset(other, 0xAB, bytes + 16);
        pkv_kernels_get(levels[li])->quantize[type](x, other, n);
        for (uint64_t i = 0; i < bytes; i++) {
            if (other[i] != out[i]) {
                test_fail(__FILE__, __LINE__, "%s %s %s: byte %llu differs (%02x vs scalar %02x)",
                          pkv_type_get((uint32_t)type)->name, what, pkv_simd_name(levels[li]),
                          (unsigned long long)i, other[i], out[i]);
                break;
            }
        }
        for (int g = 0; g < 16; g++) CHECK_MSG(other[bytes + g] == 0xAB, "quantize wrote past the row");
    }
    free(other);
}

TEST(quant_q8_0_q8_1_quantiser_hand_values) {
    float x[64] = {0};
    x[0] = 127, x[1] = 2.5f, x[2] = 3.5f, x[3] = -2.5f, x[4] = -0.5f, x[5] = 0.5f, x[6] = 1.5f, x[7] = -127,
    x[8] = 100.49f, x[9] = -0.51f;
    x[32] = 12.7f, x[33] = 1.0f, x[34] = -12.7f; /* second block: d = fp16(0.1) */
    uint8_t q[2 * 36];
    quantize_all_levels(PKV_TYPE_Q8_0, x, 64, q, "hand");
    CHECK_EQ_INT(rd16(q), 0x3C00); /* 127/127 */
    const int want[10] = {127, 2, 4, -2, 0, 0, 2, -127, 100, -1}; /* half to even */
    for (int j = 0; j < 10; j++) CHECK_EQ_INT((int8_t)q[2 + j], want[j]);
    CHECK_EQ_INT(rd16(q + 34), 0x2E66);
    CHECK_EQ_INT((int8_t)q[34 + 2], 127);
    CHECK_EQ_INT((int8_t)q[34 + 3], 10);
    CHECK_EQ_INT((int8_t)q[34 + 4], -127);

    float y[32] = {0};
    y[0] = 127, y[1] = -1.5f, y[2] = 3;
    quantize_all_levels(PKV_TYPE_Q8_1, y, 32, q, "hand");
    CHECK_EQ_INT(rd16(q), 0x3C00);
    CHECK_EQ_INT(rd16(q + 2), 0x5800); /* s = 1 * (127 - 2 + 3) = 128 */
    CHECK_EQ_INT((int8_t)q[4 + 1], -2);

    float z[32] = {0}; /* all zero: d = 0, quants 0 */
    quantize_all_levels(PKV_TYPE_Q8_0, z, 32, q, "zero");
    CHECK_EQ_INT(rd16(q), 0);
    for (int j = 0; j < 32; j++) CHECK_EQ_INT(q[2 + j], 0);
}

TEST(quant_q8_K_quantiser_hand_values) {
    static float x[3 * 256];
    memset(x, 0, sizeof x);
    /* block 0: largest |x| is -4 (first of -4 / +4): iscale = +31.75, d > 0 */
    x[3] = -4, x[10] = 4, x[20] = 2, x[21] = -2, x[22] = 1, x[40] = 1, x[41] = 0.5f;
    /* block 1: largest |x| is +2 (first of +2 / -2): iscale = -63.5, d < 0 */
    float *b1 = x + 256;
    b1[0] = 2, b1[1] = -2, b1[2] = 1, b1[3] = 0.5f, b1[4] = 0.25f, b1[255] = 0.125f;
    /* block 2: zeros */
    static uint8_t q[3 * 292];
    quantize_all_levels(PKV_TYPE_Q8_K, x, 3 * 256, q, "hand");

    const uint8_t *k0 = q, *k1 = q + 292, *k2 = q + 584;
    CHECK(same_bits(rdf32(k0), 1.0f / 31.75f));
    CHECK_EQ_INT((int8_t)k0[4 + 3], -127);
    CHECK_EQ_INT((int8_t)k0[4 + 10], 127);
    CHECK_EQ_INT((int8_t)k0[4 + 20], 64);  /* 63.5 -> even */
    CHECK_EQ_INT((int8_t)k0[4 + 21], -64);
    CHECK_EQ_INT((int8_t)k0[4 + 22], 32);  /* 31.75 */
    CHECK_EQ_INT((int8_t)k0[4 + 41], 16);  /* 15.875 */
    CHECK_EQ_INT((int16_t)rd16(k0 + 260 + 0), 0);   /* -127 + 127 */
    CHECK_EQ_INT((int16_t)rd16(k0 + 260 + 2), 32);  /* 64 - 64 + 32 */
    CHECK_EQ_INT((int16_t)rd16(k0 + 260 + 4), 48);  /* 32 + 16 */
    CHECK_EQ_INT((int16_t)rd16(k0 + 260 + 6), 0);

    CHECK(rdf32(k1) < 0);
    CHECK(same_bits(rdf32(k1), 1.0f / -63.5f));
    CHECK_EQ_INT((int8_t)k1[4 + 0], -127);
    CHECK_EQ_INT((int8_t)k1[4 + 1], 127);
    CHECK_EQ_INT((int8_t)k1[4 + 2], -64); /* -63.5 -> even */
    CHECK_EQ_INT((int8_t)k1[4 + 3], -32); /* -31.75 */
    CHECK_EQ_INT((int8_t)k1[4 + 4], -16);
    CHECK_EQ_INT((int8_t)k1[4 + 255], -8); /* -7.9375 */
    CHECK_EQ_INT((int16_t)rd16(k1 + 260), -112);
    CHECK_EQ_INT((int16_t)rd16(k1 + 260 + 30), -8);

    CHECK(same_bits(rdf32(k2), 0.0f));
    for (int j = 0; j < 256 + 32; j++) CHECK_EQ_INT(k2[4 + j], 0);
}

/* Random data and crafted half-way cases: every level bit-identical to scalar. */
TEST(quant_activation_quantisers_simd_bit_exact) {
    enum { N = 4096 };
    float *x = malloc(N * sizeof(float));
    uint8_t *q = malloc(N * sizeof(float) + 64);
    uint64_t rng = 5;
    for (int rep = 0; rep < 6; rep++) {
        for (int i = 0; i < N; i++) {
            const float scale = rep == 0 ? 1.0f : rep == 1 ? 1e-3f : rep == 2 ? 1e4f : 1.0f;
            x[i] = rng_sym(&rng) * scale;
        }
        if (rep == 3) /* blocks whose amax is 127: every half-integer is a tie */
            for (int i = 0; i < N; i++) x[i] = (i % 32 == 0) ? 127.0f : (float)((int)(pkv_splitmix64(&rng) % 253) - 126) + 0.5f;
        if (rep == 4) /* magnitude ties of opposite sign inside Q8_K blocks */
            for (int i = 0; i < N; i++) x[i] = (i % 7 == 0) ? ((i / 7) % 2 ? 2.0f : -2.0f) : rng_sym(&rng);
        if (rep == 5) /* tiny blocks */
            for (int i = 0; i < N; i++) x[i] = rng_sym(&rng) * ((i / 256) % 2 ? 1e-39f : 1e-20f); /* 127/amax overflows for the first */
        quantize_all_levels(PKV_TYPE_Q8_0, x, N, q, "random");
        quantize_all_levels(PKV_TYPE_Q8_1, x, N, q, "random");
        quantize_all_levels(PKV_TYPE_Q8_K, x, N, q, "random");
        quantize_all_levels(PKV_TYPE_F32, x, N, q, "copy");
        CHECK(memcmp(q, x, N * sizeof(float)) == 0);
    }
    free(x), free(q);
}

/* ------------------------------------------------------------------ dot products */

/* The part of a weight element that a kernel computes separately from the
 * quant product (Q?_1 min, K-quant dmin*m), so the float tolerance can cover
 * rounding of either part. */
static float ref_min_part(int type, const uint8_t *b, int j) {
    switch (type) {
    case PKV_TYPE_Q4_1:
    case PKV_TYPE_Q5_1: return ref_half(rd16(b + 2));
    case PKV_TYPE_Q4_K:
    case PKV_TYPE_Q5_K: {
        int sc, m;
        ref_k_scale_min(b + 4, j / 32, &sc, &m);
        return ref_half(rd16(b + 2)) * m;
    }
    }
    return 0.0f;
}

/* sum_i w_i * a_i in double from the independent dequantisation, with
 * *mag = sum |w_i a_i| + 2 |min part_i a_i|. For Q?_1 the kernel uses the
 * activation's stored s = fp16(d_a * sum qa) in place of d_a * sum qa
 * (docs/engine.md §2.3), so the reference does too. */
static double ref_dot(int wtype, const uint8_t *w, int atype, const uint8_t *a, int64_t n, double *mag) {
    double sum = 0, m = 0;
    for (int64_t i = 0; i < n; i++) {
        const double wi = ref_row_elem(wtype, w, i), ai = ref_row_elem(atype, a, i);
        const ref_layout *L = layout_of(wtype);
        const double mi = ref_min_part(wtype, w + (i / L->elems) * L->bytes, (int)(i % L->elems));
        sum += wi * ai;
        m += fabs(wi * ai) + 2 * fabs(mi * ai);
    }
    if (atype == PKV_TYPE_Q8_1) {
        for (int64_t blk = 0; blk < n / 32; blk++) {
            const uint8_t *ab = a + blk * 36, *wb = w + blk * layout_of(wtype)->bytes;
            double qsum = 0;
            for (int j = 0; j < 32; j++) qsum += (int8_t)ab[4 + j];
            const double s_exact = (double)ref_half(rd16(ab)) * qsum, s = ref_half(rd16(ab + 2));
            sum += (double)ref_half(rd16(wb + 2)) * (s - s_exact);
        }
    }
    *mag = m;
    return sum;
}

static void random_activation(float *x, int64_t n, uint64_t *rng) {
    for (int64_t i = 0; i < n; i++) {
        x[i] = rng_sym(rng);
        if (pkv_splitmix64(rng) % 97 == 0) x[i] *= 20.0f; /* outliers */
    }
}

static const int64_t legacy_lengths[] = {32, 256, 640, 2048, 4096};
static const int64_t k_lengths[] = {256, 1024, 2048, 4096};
static const int64_t float_lengths[] = {1, 7, 33, 256, 640, 1000, 4096};

typedef struct {
    const int64_t *v;
    int n;
} length_list;

static length_list lengths_for(int type) {
    const int elems = layout_of(type)->elems;
    if (elems == 256) return (length_list){k_lengths, 4};
    if (elems == 32) return (length_list){legacy_lengths, 5};
    return (length_list){float_lengths, 7};
}

/* Every level's vec_dot equals the scalar one, and the scalar one equals the
 * double dot of the dequantised weight and dequantised activation. */
TEST(quant_vec_dot_all_levels_match_reference) {
    uint64_t rng = 42;
    uint8_t *w = malloc(pkv_row_bytes(PKV_TYPE_F32, 4096));
    uint8_t *a = malloc(pkv_row_bytes(PKV_TYPE_F32, 4096));
    float *x = malloc(4096 * sizeof(float));
    const pkv_kernels *scalar = pkv_kernels_get(PKV_SIMD_SCALAR);
    const int nl = available_levels();
    for (int t = 0; t < N_WEIGHT_TYPES; t++) {
        const int type = weight_types[t];
        const int atype = pkv_type_get((uint32_t)type)->act_type;
        const length_list L = lengths_for(type);
        for (int li_len = 0; li_len < L.n; li_len++) {
            const int64_t n = L.v[li_len];
            for (int rep = 0; rep < 3; rep++) {
                random_weight_row(type, n, w, &rng, rep == 2 ? 2.0f : 0.05f);
                random_activation(x, n, &rng);
                scalar->quantize[atype](x, a, n);
                double mag;
                const double want = ref_dot(type, w, atype, a, n, &mag);
                const double tol = 1e-5 * mag + 1e-30;
                const float s = scalar->vec_dot[type](n, w, a);
                CHECK_MSG(fabs(s - want) <= tol, "%s n=%lld scalar %.9g vs reference %.9g (tol %.3g)",
                          pkv_type_get((uint32_t)type)->name, (long long)n, s, want, tol);
                for (int li = 1; li < nl; li++) {
                    const float v = pkv_kernels_get(levels[li])->vec_dot[type](n, w, a);
                    CHECK_MSG(fabs(v - s) <= tol, "%s n=%lld %s %.9g vs scalar %.9g (tol %.3g)",
                              pkv_type_get((uint32_t)type)->name, (long long)n, pkv_simd_name(levels[li]), v, s,
                              tol);
                }
            }
        }
    }
    free(w), free(a), free(x);
}

/* Extreme activations: the Q8_K -128-free rule (q >= -127) and Q8_0 weights of
 * -128 are what keep the maddubs pair sums from saturating. */
TEST(quant_vec_dot_extreme_quants) {
    const pkv_kernels *scalar = pkv_kernels_get(PKV_SIMD_SCALAR);
    const int nl = available_levels();
    static uint8_t w[16 * 210], a[16 * 292];
    static float x[4096];
    for (int t = 0; t < N_WEIGHT_TYPES; t++) {
        const int type = weight_types[t];
        if (layout_of(type)->elems == 1) continue;
        const int atype = pkv_type_get((uint32_t)type)->act_type;
        const int64_t n = 2048;
        for (int rep = 0; rep < 2; rep++) {
            /* every quant byte at its maximum, activations at +-amax */
            memset(w, rep ? 0xFF : 0x80, pkv_row_bytes((uint32_t)type, n));
            const ref_layout *L = layout_of(type);
            for (int64_t bi = 0; bi < n / L->elems; bi++) {
                uint8_t *b = w + bi * L->bytes;
                wr16(type == PKV_TYPE_Q6_K ? b + 208 : b, 0x3C00);
                if (type == PKV_TYPE_Q4_1 || type == PKV_TYPE_Q5_1 || type == PKV_TYPE_Q4_K || type == PKV_TYPE_Q5_K)
                    wr16(b + 2, 0x3800);
            }
            for (int64_t i = 0; i < n; i++) x[i] = rep ? -1.0f : 1.0f;
            scalar->quantize[atype](x, a, n);
            double mag;
            const double want = ref_dot(type, w, atype, a, n, &mag);
            const double tol = 1e-5 * mag;
            for (int li = 0; li < nl; li++) {
                const float v = pkv_kernels_get(levels[li])->vec_dot[type](n, w, a);
                CHECK_MSG(fabs(v - want) <= tol, "%s rep %d %s: %.9g vs %.9g", pkv_type_get((uint32_t)type)->name,
                          rep, pkv_simd_name(levels[li]), v, want);
            }
        }
    }
}

/* vec_dot_rows (one weight row, several activation rows: the batched decode
 * step) gives each row the bits of its own level's vec_dot, which the tests
 * above pin to the reference: random and extreme blocks (every quant at its
 * limits, scales up to 2), block counts with and without a tail of fewer than
 * four, 1 to 11 rows (whole groups and every remainder), strided rows and
 * outputs. A type with vec_dot_rows at one level has it at every SIMD level. */
TEST(quant_vec_dot_rows_equal_vec_dot_per_row) {
    enum { MAX_ROWS = 11, STRIDE_PAD = 36, N_TYPES = 5, N_LENGTHS = 6 }; /* a pad that keeps Q8_K's float scale aligned */
    static const int types[N_TYPES] = {PKV_TYPE_Q4_0, PKV_TYPE_Q5_0, PKV_TYPE_Q8_0, PKV_TYPE_Q4_K, PKV_TYPE_Q6_K};
    static const int64_t legacy_len[N_LENGTHS] = {32, 96, 128, 160, 896, 4864};
    static const int64_t k_len[N_LENGTHS] = {256, 512, 768, 1024, 2048, 4864};
    uint64_t rng = 2024;
    const int nl = available_levels();
    int checked = 0;
    float *x = malloc(4864 * sizeof(float));
    uint8_t *w = malloc(pkv_row_bytes(PKV_TYPE_Q8_0, 4864));
    const uint64_t stride = pkv_row_bytes(PKV_TYPE_Q8_K, 4864) + STRIDE_PAD;
    uint8_t *a = malloc(stride * MAX_ROWS);
    float out[3 * MAX_ROWS];
    for (int li = 1; li < nl; li++) {
        const pkv_kernels *k = pkv_kernels_get(levels[li]);
        for (int t = 0; t < N_TYPES; t++) {
            const int type = types[t];
            const uint32_t act = pkv_type_get((uint32_t)type)->act_type;
            const ref_layout *L = layout_of(type);
            CHECK_MSG(k->vec_dot_rows[type] != NULL, "%s has no vec_dot_rows at %s",
                      pkv_type_get((uint32_t)type)->name, pkv_simd_name(levels[li]));
            if (!k->vec_dot_rows[type]) continue;
            for (int li_len = 0; li_len < N_LENGTHS; li_len++) {
                const int64_t n = L->elems == 256 ? k_len[li_len] : legacy_len[li_len];
                for (int rep = 0; rep < 4; rep++) {
                    if (rep < 2) {
                        random_weight_row(type, n, w, &rng, rep == 1 ? 2.0f : 0.05f);
                        for (int r = 0; r < MAX_ROWS; r++) {
                            random_activation(x, n, &rng);
                            k->quantize[act](x, a + r * stride, n);
                        }
                    } else {
                        /* every quant and scale byte 0x80 / 0xFF (Q8_0 -128 / -1; Q4/Q5/Q6 quants at both
                         * ends; K-quant sub-block scales at their limits), the block scales 1, activations at
                         * +-amax */
                        memset(w, rep == 2 ? 0x80 : 0xFF, pkv_row_bytes((uint32_t)type, n));
                        for (int64_t bi = 0; bi < n / L->elems; bi++) {
                            uint8_t *b = w + bi * L->bytes;
                            if (type == PKV_TYPE_Q6_K) wr16(b + 208, 0x3C00);
                            else wr16(b, 0x3C00);
                            if (type == PKV_TYPE_Q4_K) wr16(b + 2, 0x3C00);
                        }
                        for (int r = 0; r < MAX_ROWS; r++) {
                            for (int64_t i = 0; i < n; i++) x[i] = (r + i) % 2 ? -1.0f : 1.0f;
                            k->quantize[act](x, a + r * stride, n);
                        }
                    }
                    for (int rows = 1; rows <= MAX_ROWS; rows++) {
                        for (int i = 0; i < 3 * MAX_ROWS; i++) out[i] = -7.0f;
                        k->vec_dot_rows[type](n, w, a, stride, rows, out, 3);
                        for (int r = 0; r < 3 * MAX_ROWS; r++) {
                            if (r % 3 || r / 3 >= rows) {
                                CHECK_MSG(out[r] == -7.0f, "%s %s: out[%d] written", pkv_type_get((uint32_t)type)->name,
                                          pkv_simd_name(levels[li]), r);
                                continue;
                            }
                            const float want = k->vec_dot[type](n, w, a + (r / 3) * stride);
                            CHECK_MSG(same_bits(out[r], want), "%s %s n=%lld rep %d rows %d row %d: %.9g vs vec_dot %.9g",
                                      pkv_type_get((uint32_t)type)->name, pkv_simd_name(levels[li]), (long long)n, rep,
                                      rows, r / 3, out[r], want);
                            checked++;
                        }
                    }
                }
            }
        }
    }
    /* on a CPU without AVX2 there is nothing to check; here the SIMD levels are there */
    CHECK(nl < 2 || checked > 0);
    free(x), free(w), free(a);
}

/* End to end: vec_dot(w, quantize(x)) is close to the exact dot with x. */
TEST(quant_vec_dot_end_to_end_accuracy) {
    uint64_t rng = 77;
    static float wf[4096], x[4096], wd[4096];
    static uint8_t w[4096 * 4], a[4096 * 4];
    const pkv_kernels *k = pkv_kernels_get(PKV_SIMD_AUTO);
    for (int t = 0; t < N_WEIGHT_TYPES; t++) {
        const int type = weight_types[t];
        const int atype = pkv_type_get((uint32_t)type)->act_type;
        const int64_t n = 4096;
        for (int64_t i = 0; i < n; i++) wf[i] = rng_sym(&rng) * 0.1f;
        random_activation(x, n, &rng);
        pkv_quantize_row_ref((pkv_type)type, wf, w, n);
        k->dequant[type](w, wd, n);
        k->quantize[atype](x, a, n);
        double exact = 0, mag = 0;
        for (int64_t i = 0; i < n; i++) exact += (double)wd[i] * x[i], mag += fabs((double)wd[i] * x[i]);
        const float got = k->vec_dot[type](n, w, a);
        const double tol = (atype == PKV_TYPE_F32 ? 1e-5 : 1e-2) * mag;
        CHECK_MSG(fabs(got - exact) <= tol, "%s: %.6g vs exact %.6g (tol %.3g)", pkv_type_get((uint32_t)type)->name,
                  got, exact, tol);
    }
}

/* ------------------------------------------------------------------ reference weight quantisers */

/* Gaussian-ish rows (sum of uniforms) with an outlier now and then. */
static void random_weights(float *x, int64_t n, uint64_t *rng, float scale) {
    for (int64_t i = 0; i < n; i++) {
        x[i] = (rng_sym(rng) + rng_sym(rng) + rng_sym(rng)) * scale;
        if (pkv_splitmix64(rng) % 211 == 0) x[i] *= 8.0f;
    }
}

TEST(quant_ref_quantisers_round_trip) {
    static const struct {
        int type;
        double max_rel_rms;   /* rms error / rms of x */
        double max_rel_worst; /* largest error / largest |x| */
    } cases[] = {
        /* about 1.2-1.3x what round-to-nearest gives on these rows */
        {PKV_TYPE_Q8_0, 0.01, 0.005},  {PKV_TYPE_Q4_0, 0.15, 0.08},  {PKV_TYPE_Q4_1, 0.11, 0.05},
        {PKV_TYPE_Q5_0, 0.08, 0.04},   {PKV_TYPE_Q5_1, 0.055, 0.025}, {PKV_TYPE_Q4_K, 0.11, 0.05},
        {PKV_TYPE_Q5_K, 0.055, 0.025}, {PKV_TYPE_Q6_K, 0.03, 0.02},   {PKV_TYPE_F16, 3e-4, 5e-4},
        {PKV_TYPE_BF16, 2.5e-3, 4e-3},
    };
    enum { N = 4096 };
    static float x[N], y[N];
    static uint8_t q[N * 2 + 64];
    uint64_t rng = 3;
    const pkv_kernels *k = pkv_kernels_get(PKV_SIMD_SCALAR);
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const int type = cases[c].type;
        for (int rep = 0; rep < 3; rep++) {
            random_weights(x, N, &rng, rep == 0 ? 1.0f : rep == 1 ? 1e-3f : 50.0f);
            if (rep == 2) /* one-signed blocks and a zero block */
                for (int i = 0; i < 512; i++) x[i] = i < 256 ? fabsf(x[i]) : i < 384 ? -fabsf(x[i]) : 0.0f;
            memset(q, 0xEE, sizeof q);
            pkv_quantize_row_ref((pkv_type)type, x, q, N);
            CHECK_EQ_INT(q[pkv_row_bytes((uint32_t)type, N)], 0xEE); /* nothing past the row */
            k->dequant[type](q, y, N);
            double err = 0, ref = 0, worst = 0, xmax = 0;
            for (int i = 0; i < N; i++) {
                CHECK(isfinite(y[i]));
                err += (double)(y[i] - x[i]) * (y[i] - x[i]);
                ref += (double)x[i] * x[i];
                worst = fmax(worst, fabs(y[i] - x[i]));
                xmax = fmax(xmax, fabs(x[i]));
            }
            const double rel = sqrt(err / ref);
            CHECK_MSG(rel <= cases[c].max_rel_rms, "%s rep %d: relative rms error %.4g > %.4g",
                      pkv_type_get((uint32_t)type)->name, rep, rel, cases[c].max_rel_rms);
            CHECK_MSG(worst <= cases[c].max_rel_worst * xmax, "%s rep %d: largest error %.4g of max %.4g",
                      pkv_type_get((uint32_t)type)->name, rep, worst, xmax);
            if (rep == 2)
                for (int i = 384; i < 512; i++) CHECK_MSG(y[i] == 0.0f, "%s: zero block", pkv_type_get((uint32_t)type)->name);
        }
    }
}

/* Values already on a type's grid survive quantisation exactly. */
TEST(quant_ref_quantisers_exact_on_grid) {
    float x[256], y[256];
    uint8_t q[512];
    const pkv_kernels *k = pkv_kernels_get(PKV_SIMD_SCALAR);
    /* Q8_0: multiples of 0.5 with amax 63.5 -> d = 0.5 */
    for (int i = 0; i < 32; i++) x[i] = 0.5f * (float)((i * 37) % 255 - 127);
    x[5] = 63.5f;
    pkv_quantize_row_ref(PKV_TYPE_Q8_0, x, q, 32);
    k->dequant[PKV_TYPE_Q8_0](q, y, 32);
    for (int i = 0; i < 32; i++) CHECK_MSG(y[i] == x[i], "Q8_0 %d: %g vs %g", i, y[i], x[i]);
    /* Q4_0: (q - 8) * 0.25 with the extreme -2 present -> d = 0.25 */
    for (int i = 0; i < 32; i++) x[i] = 0.25f * (float)(i % 16 - 8);
    pkv_quantize_row_ref(PKV_TYPE_Q4_0, x, q, 32);
    k->dequant[PKV_TYPE_Q4_0](q, y, 32);
    for (int i = 0; i < 32; i++) CHECK_MSG(y[i] == x[i], "Q4_0 %d: %g vs %g", i, y[i], x[i]);
    /* Q5_1: 0.5 * q + 1 for q in 0..31 */
    for (int i = 0; i < 32; i++) x[i] = 0.5f * (float)i + 1.0f;
    pkv_quantize_row_ref(PKV_TYPE_Q5_1, x, q, 32);
    k->dequant[PKV_TYPE_Q5_1](q, y, 32);
    for (int i = 0; i < 32; i++) CHECK_MSG(y[i] == x[i], "Q5_1 %d: %g vs %g", i, y[i], x[i]);
    /* Q6_K: integers -32..31 in every sub-block (extreme -32 present) */
    for (int i = 0; i < 256; i++) x[i] = (float)((i * 7) % 64 - 32);
    for (int j = 0; j < 16; j++) x[16 * j] = -32.0f;
    pkv_quantize_row_ref(PKV_TYPE_Q6_K, x, q, 256);
    k->dequant[PKV_TYPE_Q6_K](q, y, 256);
    for (int i = 0; i < 256; i++) CHECK_MSG(y[i] == x[i], "Q6_K %d: %g vs %g", i, y[i], x[i]);
}

/* ------------------------------------------------------------------ float helpers */

TEST(quant_float_helpers_all_levels_match_scalar) {
    static const int64_t lengths[] = {0, 1, 3, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 100, 257, 1000, 4099};
    enum { MAXN = 4099, GUARD = 8 };
    static float a[MAXN], b[MAXN], y0[MAXN + GUARD], y1[MAXN + GUARD], y2[MAXN + GUARD], f[MAXN + GUARD];
    static uint16_t h[MAXN], h1[MAXN + GUARD];
    uint64_t rng = 11;
    const pkv_kernels *s = pkv_kernels_get(PKV_SIMD_SCALAR);
    const int nl = available_levels();
    for (size_t li_len = 0; li_len < sizeof lengths / sizeof lengths[0]; li_len++) {
        const int64_t n = lengths[li_len];
        for (int64_t i = 0; i < n; i++) {
            a[i] = rng_sym(&rng) * 4.0f, b[i] = rng_sym(&rng);
            h[i] = pkv_f32_to_f16(rng_sym(&rng) * 3.0f);
            y0[i] = rng_sym(&rng);
        }
        double mag = 0, mag16 = 0;
        for (int64_t i = 0; i < n; i++)
            mag += fabs((double)a[i] * b[i]), mag16 += fabs((double)pkv_f16_to_f32(h[i]) * b[i]);
        const float dot = s->dot_f32(n, a, b), dot16 = s->dot_f16_f32(n, h, b);
        /* the scalar ones against double */
        double exact = 0, exact16 = 0;
        for (int64_t i = 0; i < n; i++) exact += (double)a[i] * b[i], exact16 += (double)pkv_f16_to_f32(h[i]) * b[i];
        CHECK_MSG(fabs(dot - exact) <= 1e-5 * mag, "scalar dot_f32 n=%lld", (long long)n);
        CHECK_MSG(fabs(dot16 - exact16) <= 1e-5 * mag16, "scalar dot_f16_f32 n=%lld", (long long)n);
        const float alpha = 0.37f;
        for (int li = 0; li < nl; li++) {
            const pkv_kernels *k = pkv_kernels_get(levels[li]);
            const char *name = pkv_simd_name(levels[li]);
            CHECK_MSG(fabs(k->dot_f32(n, a, b) - dot) <= 1e-5 * mag, "%s dot_f32 n=%lld", name, (long long)n);
            CHECK_MSG(fabs(k->dot_f16_f32(n, h, b) - dot16) <= 1e-5 * mag16, "%s dot_f16_f32 n=%lld", name,
                      (long long)n);
            CHECK_MSG(fabs(k->vec_dot[PKV_TYPE_F32](n, a, b) - dot) <= 1e-5 * mag, "%s vec_dot f32 n=%lld", name,
                      (long long)n);
            /* axpy: y += alpha*x, within one rounding of each term */
            memcpy(y1, y0, (size_t)n * 4), memcpy(y2, y0, (size_t)n * 4);
            for (int g = 0; g < GUARD; g++) y1[n + g] = y2[n + g] = 777.0f;
            k->axpy_f32(n, alpha, a, y1);
            k->axpy_f16(n, alpha, h, y2);
            int bad = 0;
            for (int64_t i = 0; i < n && bad < 3; i++) {
                const double w1 = (double)y0[i] + (double)alpha * a[i];
                const double w2 = (double)y0[i] + (double)alpha * pkv_f16_to_f32(h[i]);
                if (fabs(y1[i] - w1) > 2e-7 * (fabs(y0[i]) + fabs(alpha * a[i])) ||
                    fabs(y2[i] - w2) > 2e-7 * (fabs(y0[i]) + fabs(alpha * pkv_f16_to_f32(h[i]))))
                    bad++, test_fail(__FILE__, __LINE__, "%s axpy n=%lld i=%lld", name, (long long)n, (long long)i);
            }
            for (int g = 0; g < GUARD; g++) CHECK_MSG(y1[n + g] == 777.0f && y2[n + g] == 777.0f, "%s axpy tail", name);
            /* conversions: exact, and nothing written past n */
            for (int g = 0; g < GUARD; g++) f[n + g] = 777.0f, h1[n + g] = 0xABCD;
            k->f16_to_f32(h, f, n);
            k->f32_to_f16(a, h1, n);
            for (int64_t i = 0; i < n; i++) {
                if (!same_bits(f[i], pkv_f16_to_f32(h[i])) || h1[i] != pkv_f32_to_f16(a[i])) {
                    test_fail(__FILE__, __LINE__, "%s conversion n=%lld i=%lld", name, (long long)n, (long long)i);
                    break;
                }
            }
            for (int g = 0; g < GUARD; g++) CHECK_MSG(f[n + g] == 777.0f && h1[n + g] == 0xABCD, "%s convert tail", name);
        }
    }
}

/* Every kernel on buffers of exactly the row's size, so the sanitizer build
 * catches any read or write past a row; the results must still agree. */
TEST(quant_kernels_stay_inside_rows) {
    uint64_t rng = 21;
    const int nl = available_levels();
    for (int t = 0; t < N_WEIGHT_TYPES; t++) {
        const int type = weight_types[t];
        const int atype = pkv_type_get((uint32_t)type)->act_type;
        const int64_t n = layout_of(type)->elems == 256 ? 256 : layout_of(type)->elems == 32 ? 32 : 5;
        uint8_t *w = malloc(pkv_row_bytes((uint32_t)type, n));
        uint8_t *a = malloc(pkv_row_bytes((uint32_t)atype, n));
        float *x = malloc((size_t)n * sizeof(float)), *out = malloc((size_t)n * sizeof(float));
        random_weight_row(type, n, w, &rng, 1.0f);
        random_activation(x, n, &rng);
        for (int li = 0; li < nl; li++) {
            const pkv_kernels *k = pkv_kernels_get(levels[li]);
            k->quantize[atype](x, a, n);
            k->dequant[type](w, out, n);
            k->dequant[atype](a, out, n);
            double mag;
            const double want = ref_dot(type, w, atype, a, n, &mag);
            const float v = k->vec_dot[type](n, w, a);
            CHECK_MSG(fabs(v - want) <= 1e-5 * mag, "%s %s: %.9g vs %.9g", pkv_type_get((uint32_t)type)->name,
                      pkv_simd_name(levels[li]), v, want);
        }
        free(w), free(a), free(x), free(out);
    }
}
