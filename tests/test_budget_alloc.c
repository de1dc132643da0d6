/*
 * Budget allocation (docs/presses.md A.13): PyramidKV's layer schedule and
 * AdaKV's head schedule against figures produced by the original code
 * (KVCache-Factory PyramidKVCluster / AdaKVCluster, kvpress 0.5.5
 * PyramidKVPress; tests/fixtures/protokv/README.md), and, through the engine,
 * caches that really hold those row counts per layer and per head.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "press/press.h"
#include "press_fixtures.h"
#include "test.h"


/* ---------------------------------------------------------------- PyramidKV */

/* Every "pyramid budget|ratio N C|r w L beta layer rows" line: the original
 * code's rows for that layer (KVCache-Factory keeps all L rows when L < C,
 * where our schedule answers C >= L: compare min(ours, L)). */
TEST(budget_pyramid_matches_original) {
    FILE *f = fopen(FIXTURE("protokv/pyramid.txt"), "r");
    REQUIRE(f);
    char line[256], kind[16], amount[32];
    int n_budget = 0, n_ratio = 0, N, w, L, layer, rows;
    double beta;
    while (fgets(line, sizeof line, f)) {
        if (sscanf(line, "pyramid %15s %d %31s %d %d %lf %d %d", kind, &N, amount, &w, &L, &beta, &layer, &rows) != 8)
            continue;
        char ws[16], bs[32];
        snprintf(ws, sizeof ws, "%d", w);
        snprintf(bs, sizeof bs, "%g", beta);
        bool ratio = !strcmp(kind, "ratio");
        pkv_press_cfg *cfg = test_press_cfg("snapkv", (const char *[]){ratio ? "ratio" : "budget", amount, "window", ws,
                                                                 "layer_budget", "pyramid", "pyramid_beta", bs, NULL});
        REQUIRE(cfg);
        int got = pkv_press_layer_budget(cfg, layer, N, L);
        if (got > L) got = L;
        CHECK_MSG(got == rows, "%s", line);
        n_budget += !ratio;
        n_ratio += ratio;
        pkv_press_cfg_free(cfg);
    }
    fclose(f);
    CHECK(n_budget >= 100 && n_ratio >= 100);
}

/* A.13's worked example: N = 32, C = 128, w = 8, L = 8000 gives 234 .. 17 prefix rows. */
TEST(budget_pyramid_a13_example) {
    pkv_press_cfg *cfg = test_press_cfg("snapkv", (const char *[]){"budget", "128", "window", "8", "layer_budget", "pyramid", NULL});
    REQUIRE(cfg);
    CHECK_EQ_INT(pkv_press_layer_budget(cfg, 0, 32, 8000) - 8, 234);
    CHECK_EQ_INT(pkv_press_layer_budget(cfg, 31, 32, 8000) - 8, 17);
    long total = 0;
    for (int l = 0; l < 32; l++) total += pkv_press_layer_budget(cfg, l, 32, 8000) - 8;
    CHECK_EQ_INT(total, 4016);
    /* uniform is untouched */
    CHECK(pkv_press_cfg_set(cfg, "layer_budget", "uniform", NULL) == 0);
    CHECK_EQ_INT(pkv_press_layer_budget(cfg, 5, 32, 8000), 128);
    pkv_press_cfg_free(cfg);
}

/* ---------------------------------------------------------------- AdaKV */

typedef struct {
    int H, L, C, w;
    double alpha;
    float *scores; /* [H][L - w] */
    int rows[32];
} adakv_case;

static bool read_adakv(FILE *f, adakv_case *c) {
    char line[65536];
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "adakv %d %d %d %d %lf", &c->H, &c->L, &c->C, &c->w, &c->alpha) == 5) break;
    if (feof(f) || c->H > 32) return false;
    int P = c->L - c->w;
    c->scores = calloc((size_t)c->H * P, sizeof(float));
    for (int h = 0; h < c->H; h++) {
        if (!fgets(line, sizeof line, f)) return false;
        char *p = line + strlen("scores ");
        strtol(p, &p, 10);
        for (int j = 0; j < P; j++) c->scores[(size_t)h * P + j] = strtof(p, &p);
    }
    if (!fgets(line, sizeof line, f)) return false;
    char *p = line + strlen("rows ");
    for (int h = 0; h < c->H; h++) c->rows[h] = (int)strtol(p, &p, 10);
    return true;
}

/* Every fixture layer: the scores AdaKVCluster ranked, our shares == its head_lens. */
TEST(budget_adakv_matches_original) {
    FILE *f = fopen(FIXTURE("protokv/adakv.txt"), "r");
    REQUIRE(f);
    adakv_case c;
    int n_cases = 0;
    while (memset(&c, 0, sizeof c), read_adakv(f, &c)) {
        pkv_arena arena = {0};
        pkv_press_input in = {.n_head = c.H, .n_head_kv = c.H, .arena = &arena};
        int n_rows[32], budget[32], n_keep[32];
        float *scores[32];
        bool *forced[32];
        int P = c.L - c.w;
        for (int h = 0; h < c.H; h++) {
            n_rows[h] = c.L;
            budget[h] = c.C;
            scores[h] = calloc((size_t)c.L, sizeof(float));
            forced[h] = calloc((size_t)c.L, 1);
            memcpy(scores[h], c.scores + (size_t)h * P, (size_t)P * sizeof(float));
            for (int j = P; j < c.L; j++) {
                forced[h][j] = true;
                scores[h][j] = INFINITY;
            }
        }
        in.n_rows = n_rows;
        pkv_press_selection sel = {.n_sel = c.H, .budget = budget, .scores = scores, .forced = forced, .n_keep = n_keep};
        pkv_error err;
        CHECK(pkv_press_adaptive_budgets(c.alpha, &in, &sel, &err) == 0);
        int total = 0;
        for (int h = 0; h < c.H; h++) {
            int got = budget[h] < c.L ? budget[h] : c.L;
            CHECK_MSG(got == c.rows[h], "adakv H=%d L=%d C=%d w=%d alpha=%g head %d: %d rows, AdaKV %d", c.H, c.L, c.C,
                      c.w, c.alpha, h, got, c.rows[h]);
            total += got;
            free(scores[h]);
            free(forced[h]);
        }
        /* the floor guarantees, and the layer never holds more than H * C */
        CHECK(total <= c.H * (c.C < c.L ? c.C : c.L));
        free(c.scores);
        pkv_arena_free(&arena);
        n_cases++;
    }
    fclose(f);
    CHECK(n_cases >= 10);
}

/* A hand example: H = 2, B = 4 free slots each, alpha = 0.5, floor(alpha B) = 2.
 * Head 0's scores beat all of head 1's: global top 8 = 6 of head 0 (it has 6
 * candidates) + 2 of head 1 -> round(6 * 0.5 + 2) = 5, round(2 * 0.5 + 2) = 3. */
TEST(budget_adakv_hand_example) {
    pkv_arena arena = {0};
    float s0[8] = {9, 8, 7, 6, 5, 4, INFINITY, INFINITY}, s1[8] = {3, 2.5f, 1, 0.5f, 0.25f, 0.1f, INFINITY, INFINITY};
    bool f0[8] = {0, 0, 0, 0, 0, 0, 1, 1}, f1[8] = {0, 0, 0, 0, 0, 0, 1, 1};
    float *scores[2] = {s0, s1};
    bool *forced[2] = {f0, f1};
    int n_rows[2] = {8, 8}, budget[2] = {6, 6};
    pkv_press_input in = {.n_head = 2, .n_head_kv = 2, .n_rows = n_rows, .arena = &arena};
    pkv_press_selection sel = {.n_sel = 2, .budget = budget, .scores = scores, .forced = forced};
    pkv_error err;
    REQUIRE(pkv_press_adaptive_budgets(0.5, &in, &sel, &err) == 0);
    CHECK_EQ_INT(budget[0], 2 + 5);
    CHECK_EQ_INT(budget[1], 2 + 3);
    pkv_arena_free(&arena);
}

/* ---------------------------------------------------------------- real memory through the engine */

typedef struct {
    pkv_model *m;
    pkv_session *s;
    int32_t tokens[96];
    int n_tok;
} tiny_run;

static bool tiny_open(tiny_run *t) {
    memset(t, 0, sizeof *t);
    pkv_error err;
    t->m = pkv_model_load("tests/fixtures/models/tiny-llama-f32.gguf", NULL, &err);
    if (!t->m) return false;
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    so.cache_type_k = so.cache_type_v = PKV_CACHE_F32;
    so.n_threads = 1;
    t->s = pkv_session_new(t->m, &so, &err);
    t->n_tok = 96;
    for (int i = 0; i < t->n_tok; i++) t->tokens[i] = 3 + (i * 37) % 500;
    return t->s != NULL;
}

static void tiny_close(tiny_run *t) {
    pkv_session_free(t->s);
    pkv_model_free(t->m);
}

/* Rows the session holds, summed over layers and heads. */
static long held_rows(const pkv_session *s) {
    long rows = 0;
    for (int l = 0; l < pkv_session_n_layers(s); l++)
        for (int h = 0; h < pkv_session_n_heads(s, l); h++) rows += pkv_session_head_rows(s, l, h);
    return rows;
}

static bool prefill(tiny_run *t, const char *press, const char *const *kv) {
    pkv_press_cfg *cfg = kv ? test_press_cfg(press, kv) : NULL;
    pkv_error err;
    pkv_session_reset(t->s);
    bool ok = pkv_prefill(t->s, t->tokens, t->n_tok, cfg, NULL, &err) == 0;
    if (!ok) test_fail(__FILE__, __LINE__, "%s", err.msg);
    pkv_press_cfg_free(cfg);
    return ok;
}

/* PyramidKV over the 2 layers, C = 48, L = 96, w = the rows the press always
 * keeps: w = 8 (snapkv, protokv): min = 40 // 20 = 2, max = 80 - 2 = 78, layer
 * 0 keeps 78 + 8 and layer 1 2 + 8; w = 1 (tova): min 2, max 92 -> 93 and 3;
 * w = 0 (knorm): min 2, max 94 -> 94 and 2. The cache bytes are exactly those
 * rows. */
TEST(budget_pyramid_real_rows) {
    tiny_run t;
    REQUIRE(tiny_open(&t));
    REQUIRE(prefill(&t, NULL, NULL));
    uint64_t full = pkv_session_cache_bytes(t.s);
    long full_rows = held_rows(t.s);
    CHECK_EQ_INT(full_rows, 2 * 2 * 96);
    uint64_t row_bytes = full / (uint64_t)full_rows;
    const char *presses[] = {"snapkv", "protokv", "knorm", "tova"};
    const int want[4][2] = {{86, 10}, {86, 10}, {94, 2}, {93, 3}};
    for (int p = 0; p < 4; p++) {
        if (!prefill(&t, presses[p], (const char *[]){"budget", "48", "window", "8", "layer_budget", "pyramid", NULL}))
            continue;
        for (int h = 0; h < 2; h++) {
            for (int l = 0; l < 2; l++)
                CHECK_MSG(pkv_session_head_rows(t.s, l, h) == want[p][l], "%s layer %d head %d: %d rows, want %d",
                          presses[p], l, h, pkv_session_head_rows(t.s, l, h), want[p][l]);
        }
        CHECK(pkv_session_cache_bytes(t.s) == (uint64_t)held_rows(t.s) * row_bytes);
        CHECK(pkv_session_cache_bytes(t.s) < full);
    }
    tiny_close(&t);
}

/* AdaKV: per-head row counts differ, the layer never holds more than its
 * budget, the floor holds, and the bytes are the rows held. */
TEST(budget_adaptive_real_rows) {
    tiny_run t;
    REQUIRE(tiny_open(&t));
    REQUIRE(prefill(&t, NULL, NULL));
    uint64_t row_bytes = pkv_session_cache_bytes(t.s) / (uint64_t)held_rows(t.s);
    const char *presses[] = {"snapkv", "protokv"};
    for (int p = 0; p < 2; p++) {
        if (!prefill(&t, presses[p], (const char *[]){"budget", "40", "window", "8", "head_budget", "adaptive", NULL}))
            continue;
        bool ragged = false;
        for (int l = 0; l < 2; l++) {
            int r0 = pkv_session_head_rows(t.s, l, 0), r1 = pkv_session_head_rows(t.s, l, 1);
            ragged |= r0 != r1;
            CHECK_MSG(r0 + r1 <= 2 * 40, "%s layer %d: %d + %d rows", presses[p], l, r0, r1);
            /* floor(0.2 * 32) = 6 prefix rows at least, plus the window */
            CHECK(r0 >= 8 + 6 && r1 >= 8 + 6);
        }
        CHECK_MSG(ragged, "%s: every head kept the same number of rows", presses[p]);
        CHECK(pkv_session_cache_bytes(t.s) == (uint64_t)held_rows(t.s) * row_bytes);
        /* the cache still decodes */
        pkv_error err;
        CHECK(pkv_decode(t.s, 7, &err) == 0);
    }
    tiny_close(&t);
}

/* Options: bad values are named; a schedule shows in the description. */
TEST(budget_options) {
    pkv_error err;
    pkv_press_cfg *cfg = pkv_press_cfg_new("protokv", &err);
    REQUIRE(cfg);
    CHECK(pkv_press_cfg_set(cfg, "pyramid_beta", "0.5", &err) != 0 && strstr(err.msg, "pyramid_beta"));
    CHECK(pkv_press_cfg_set(cfg, "adaptive_floor", "1.5", &err) != 0 && strstr(err.msg, "adaptive_floor"));
    CHECK(pkv_press_cfg_set(cfg, "budget", "256", &err) == 0 && pkv_press_cfg_set(cfg, "layer_budget", "pyramid", &err) == 0 &&
          pkv_press_cfg_set(cfg, "head_budget", "adaptive", &err) == 0);
    char desc[160];
    pkv_press_cfg_describe(cfg, desc, sizeof desc);
    CHECK(strstr(desc, "protokv budget=256") && strstr(desc, "layer_budget=pyramid") && strstr(desc, "head_budget=adaptive"));
    pkv_press_cfg_free(cfg);
}
