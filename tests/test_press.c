/*
 * Press tests: the hand-checkable SnapKV examples of docs/presses.md A.14, the
 * edge cases of A.7, and the framework's invariants (window and protected
 * rows always kept, exact budgets, ties to the lower position).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/prng.h"
#include "press/press.h"
#include "press/snapkv.h"
#include "test.h"

/* ---------------------------------------------------------------- helpers */

typedef struct {
    pkv_arena arena;
    pkv_compute comp;
    pkv_press_input in;
    int n_rows[8];
    const float *keys[8];
    const int32_t *pos[8];
    int32_t positions[256];
} press_env;

/* One layer with n_kv KV heads of n rows at positions 0..n-1 (keys NULL until set). */
static void env_init(press_env *e, int n_head, int n_kv, int head_dim, int n, int window) {
    memset(e, 0, sizeof *e);
    e->comp.kern = pkv_kernels_get(PKV_SIMD_AUTO);
    for (int i = 0; i < 256; i++) e->positions[i] = i;
    for (int g = 0; g < n_kv; g++) {
        e->n_rows[g] = n;
        e->pos[g] = e->positions;
    }
    e->in = (pkv_press_input){
        .n_layers = 1,
        .n_head = n_head,
        .n_head_kv = n_kv,
        .head_dim_k = head_dim,
        .head_dim_v = head_dim,
        .attn_scale = 1.0f / sqrtf((float)head_dim),
        .window = window,
        .n_rows = e->n_rows,
        .keys = e->keys,
        .pos = e->pos,
        .comp = &e->comp,
        .arena = &e->arena,
    };
}

/* A selection with given scores for one head of n rows, the last `window` forced. */
static void select_one(press_env *e, const float *scores, int n, int window, int budget, int32_t *keep, int *n_keep) {
    pkv_press_selection sel = {.n_sel = 1};
    int b = budget;
    float *sc = pkv_arena_alloc(&e->arena, (size_t)n * sizeof(float));
    bool *forced = pkv_arena_alloc(&e->arena, (size_t)n);
    memcpy(sc, scores, (size_t)n * sizeof(float));
    for (int j = 0; j < n; j++) forced[j] = j >= n - window;
    int32_t *kept = NULL;
    int nk = 0;
    sel.budget = &b;
    sel.scores = &sc;
    sel.forced = &forced;
    sel.keep = &kept;
    sel.n_keep = &nk;
    pkv_error err;
    CHECK(pkv_press_topk(&e->in, &sel, &err) == 0);
    *n_keep = nk;
    memcpy(keep, kept, (size_t)nk * sizeof *keep);
}

static bool same_set(const int32_t *got, int n_got, const int32_t *want, int n_want) {
    if (n_got != n_want) return false;
    for (int i = 0; i < n_got; i++)
        if (got[i] != want[i]) return false;
    return true;
}

#define CHECK_KEEP(got, n_got, ...)                                                                 \
    do {                                                                                            \
        const int32_t want_[] = {__VA_ARGS__};                                                      \
        int nw_ = (int)(sizeof want_ / sizeof want_[0]);                                            \
        if (!same_set(got, n_got, want_, nw_)) {                                                    \
            char buf_[512];                                                                         \
            int o_ = 0;                                                                             \
            for (int i_ = 0; i_ < (n_got) && o_ < 480; i_++) o_ += snprintf(buf_ + o_, 512 - o_, "%d ", (got)[i_]); \
            test_fail(__FILE__, __LINE__, "kept {%s} differs from {%s}", buf_, #__VA_ARGS__);       \
        }                                                                                           \
    } while (0)

/* A.14.1 votes: units of 1/16 */
static const float VOTES_141[8] = {16 / 16.f, 3 / 16.f, 3 / 16.f, 4 / 16.f, 12 / 16.f, 7 / 16.f, 2 / 16.f, 7 / 16.f};

/* ---------------------------------------------------------------- A.14 */

TEST(press_a14_1_avgpool_evicts_the_sink) {
    float pooled[8];
    pkv_snapkv_pool(VOTES_141, 8, 3, PKV_POOL_AVG, pooled);
    const float sums[8] = {19, 22, 10, 19, 23, 21, 16, 9};
    for (int i = 0; i < 8; i++) CHECK_NEAR(pooled[i], sums[i] / 48.0, 1e-7);
    press_env e;
    env_init(&e, 1, 1, 2, 12, 4);
    float scores[12];
    memcpy(scores, pooled, sizeof pooled);
    for (int j = 8; j < 12; j++) scores[j] = INFINITY;
    int32_t keep[12];
    int nk;
    select_one(&e, scores, 12, 4, 7, keep, &nk);
    CHECK_KEEP(keep, nk, 1, 4, 5, 8, 9, 10, 11);
    /* without pooling (kernel 1): {0, 4, 5/7 tie} -> ties to the lower position -> 5 */
    pkv_snapkv_pool(VOTES_141, 8, 1, PKV_POOL_AVG, pooled);
    memcpy(scores, pooled, sizeof pooled);
    select_one(&e, scores, 12, 4, 7, keep, &nk);
    CHECK_KEEP(keep, nk, 0, 4, 5, 8, 9, 10, 11);
    pkv_arena_free(&e.arena);
}

TEST(press_a14_2_maxpool_ties) {
    float pooled[8];
    pkv_snapkv_pool(VOTES_141, 8, 3, PKV_POOL_MAX, pooled);
    const float want[8] = {16, 16, 4, 12, 12, 12, 7, 7};
    for (int i = 0; i < 8; i++) CHECK_NEAR(pooled[i] * 16, want[i], 1e-6);
    press_env e;
    env_init(&e, 1, 1, 2, 12, 4);
    float scores[12];
    memcpy(scores, pooled, sizeof pooled);
    for (int j = 8; j < 12; j++) scores[j] = INFINITY;
    int32_t keep[12];
    int nk;
    select_one(&e, scores, 12, 4, 9, keep, &nk);
    CHECK_KEEP(keep, nk, 0, 1, 3, 4, 5, 8, 9, 10, 11);
    select_one(&e, scores, 12, 4, 7, keep, &nk); /* three-way tie at 12: the lowest wins */
    CHECK_KEEP(keep, nk, 0, 1, 3, 8, 9, 10, 11);
    pkv_arena_free(&e.arena);
}

/* A.14.3: from raw Q and K through the whole press: scale, the window's causal
 * mask, softmax over all eight keys, votes, pooling. */
static void run_a14_3(const char *pool, const char *kernel, float *pooled_out, int32_t *keep, int *nk) {
    static const float keys[8 * 2] = {-1, -2, -2, -2, -2, 1, 2, -1, -1, -2, -1, -1, 0, -2, 1, 1};
    static const float q[2 * 2] = {2, 2, -2, 0};
    static const int32_t qpos[2] = {6, 7};
    press_env e;
    env_init(&e, 1, 1, 2, 8, 2);
    e.keys[0] = keys;
    e.in.q_window = q;
    e.in.q_pos = qpos;
    pkv_error err;
    pkv_press_cfg *cfg = pkv_press_cfg_new("snapkv", &err);
    REQUIRE(cfg);
    CHECK(pkv_press_cfg_set(cfg, "budget", "5", &err) == 0);
    CHECK(pkv_press_cfg_set(cfg, "window", "2", &err) == 0);
    CHECK(pkv_press_cfg_set(cfg, "kernel", kernel, &err) == 0);
    CHECK(pkv_press_cfg_set(cfg, "pool", pool, &err) == 0);
    pkv_press_selection sel;
    REQUIRE_MSG(pkv_press_run(cfg, &e.in, &sel, &err) == 0, "%s", err.msg);
    if (pooled_out) memcpy(pooled_out, sel.scores[0], 6 * sizeof(float));
    *nk = sel.n_keep[0];
    memcpy(keep, sel.keep[0], (size_t)*nk * sizeof *keep);
    pkv_press_cfg_free(cfg);
    pkv_arena_free(&e.arena);
}

TEST(press_a14_3_from_raw_qk) {
    float pooled[6];
    int32_t keep[8];
    int nk;
    run_a14_3("avg", "3", pooled, keep, &nk);
    const double want[6] = {0.148978, 0.285739, 0.560439, 0.471341, 0.367829, 0.063189};
    for (int i = 0; i < 6; i++) CHECK_NEAR(pooled[i], want[i], 1e-5);
    CHECK_KEEP(keep, nk, 2, 3, 4, 6, 7);
    run_a14_3("max", "3", pooled, keep, &nk);
    const double want_max[6] = {0.357114, 0.410283, 0.913919, 0.913919, 0.913919, 0.099747};
    for (int i = 0; i < 6; i++) CHECK_NEAR(pooled[i], want_max[i], 1e-5);
    CHECK_KEEP(keep, nk, 2, 3, 4, 6, 7);
    run_a14_3("avg", "1", pooled, keep, &nk); /* no pooling: the raw vote */
    const double votes[6] = {0.089820, 0.357114, 0.410283, 0.913919, 0.089820, 0.099747};
    for (int i = 0; i < 6; i++) CHECK_NEAR(pooled[i], votes[i], 1e-5);
    CHECK_KEEP(keep, nk, 1, 2, 3, 6, 7);
}

TEST(press_a14_4_gqa_granularity) {
    const float h0[8] = {8, 0, 1, 6, 6, 1, 0, 2}, h1[8] = {7, 2, 0, 0, 1, 3, 7, 8};
    float v0[8], v1[8];
    for (int i = 0; i < 8; i++) {
        v0[i] = h0[i] / 16;
        v1[i] = h1[i] / 16;
    }
    press_env e;
    env_init(&e, 2, 1, 2, 10, 2);
    float p0[10], p1[10], agg[8], pm[10];
    int32_t keep[10];
    int nk;
    /* query-head granularity (official): one selection per query head */
    pkv_snapkv_pool(v0, 8, 3, PKV_POOL_AVG, p0);
    pkv_snapkv_pool(v1, 8, 3, PKV_POOL_AVG, p1);
    const float s0[8] = {8, 9, 7, 13, 13, 7, 3, 2}, s1[8] = {9, 9, 2, 1, 4, 11, 18, 15};
    for (int i = 0; i < 8; i++) {
        CHECK_NEAR(p0[i] * 48, s0[i], 1e-5);
        CHECK_NEAR(p1[i] * 48, s1[i], 1e-5);
    }
    p0[8] = p0[9] = p1[8] = p1[9] = INFINITY;
    select_one(&e, p0, 10, 2, 5, keep, &nk);
    CHECK_KEEP(keep, nk, 1, 3, 4, 8, 9);
    select_one(&e, p1, 10, 2, 5, keep, &nk);
    CHECK_KEEP(keep, nk, 5, 6, 7, 8, 9);
    /* kv-head granularity, mean (and sum) before pooling: {1, 5, 6, 8, 9} */
    const float *heads[2] = {v0, v1};
    pkv_group_agg aggs[2] = {PKV_AGG_MEAN, PKV_AGG_SUM};
    for (int a = 0; a < 2; a++) {
        pkv_snapkv_aggregate(heads, 2, 8, aggs[a], agg);
        pkv_snapkv_pool(agg, 8, 3, PKV_POOL_AVG, pm);
        const float sums[8] = {8.5, 9, 4.5, 7, 8.5, 9, 10.5, 8.5};
        for (int i = 0; i < 8; i++) CHECK_NEAR(pm[i] * 48 / (a == 0 ? 1 : 2), sums[i], 1e-5);
        pm[8] = pm[9] = INFINITY;
        select_one(&e, pm, 10, 2, 5, keep, &nk);
        CHECK_KEEP(keep, nk, 1, 5, 6, 8, 9);
    }
    pkv_arena_free(&e.arena);
}

TEST(press_a14_5_budget_edges) {
    press_env e;
    /* L = 8, w = 4, C = 7: prefix votes [14, 1, 5, 3]/16 -> pooled sums [15, 20, 9, 8] -> drop 3 */
    const float v[4] = {14 / 16.f, 1 / 16.f, 5 / 16.f, 3 / 16.f};
    float p[8];
    pkv_snapkv_pool(v, 4, 3, PKV_POOL_AVG, p);
    const float sums[4] = {15, 20, 9, 8};
    for (int i = 0; i < 4; i++) CHECK_NEAR(p[i] * 48, sums[i], 1e-5);
    for (int j = 4; j < 8; j++) p[j] = INFINITY;
    env_init(&e, 1, 1, 2, 8, 4);
    int32_t keep[8];
    int nk;
    select_one(&e, p, 8, 4, 7, keep, &nk);
    CHECK_KEEP(keep, nk, 0, 1, 2, 4, 5, 6, 7);
    pkv_arena_free(&e.arena);

    /* L = 6 < C and L = 7 == C: everything is kept (the S0 gate) */
    static float keys[8 * 2];
    static float q[4 * 2];
    static const int32_t qpos7[4] = {3, 4, 5, 6}, qpos6[4] = {2, 3, 4, 5};
    for (int i = 0; i < 16; i++) keys[i] = (float)((i * 7) % 5) - 2.0f;
    for (int i = 0; i < 8; i++) q[i] = (float)((i * 3) % 4) - 1.5f;
    pkv_error err;
    pkv_press_cfg *cfg = pkv_press_cfg_new("snapkv", &err);
    REQUIRE(cfg);
    CHECK(pkv_press_cfg_set(cfg, "budget", "7", &err) == 0);
    CHECK(pkv_press_cfg_set(cfg, "window", "4", &err) == 0);
    CHECK(pkv_press_cfg_set(cfg, "kernel", "3", &err) == 0);
    for (int L = 6; L <= 7; L++) {
        env_init(&e, 1, 1, 2, L, 4);
        e.keys[0] = keys;
        e.in.q_window = q;
        e.in.q_pos = L == 7 ? qpos7 : qpos6;
        pkv_press_selection sel;
        CHECK(pkv_press_run(cfg, &e.in, &sel, &err) == 0);
        CHECK_EQ_INT(sel.n_keep[0], L);
        pkv_arena_free(&e.arena);
    }
    pkv_press_cfg_free(cfg);
}

/* ---------------------------------------------------------------- A.7 edge cases and bad input */

TEST(press_bad_options) {
    pkv_error err;
    CHECK(pkv_press_cfg_new("snapkvv", &err) == NULL && err.code == PKV_ERR_ARG && strstr(err.msg, "unknown press"));
    pkv_press_cfg *cfg = pkv_press_cfg_new("snapkv", &err);
    REQUIRE(cfg);
    CHECK(pkv_press_cfg_set(cfg, "kernel", "4", &err) == -1 && strstr(err.msg, "odd"));
    CHECK(pkv_press_cfg_set(cfg, "kernel", "0", &err) == -1);
    CHECK(pkv_press_cfg_set(cfg, "pool", "median", &err) == -1);
    CHECK(pkv_press_cfg_set(cfg, "ratio", "1", &err) == -1 && strstr(err.msg, "[0, 1)"));
    CHECK(pkv_press_cfg_set(cfg, "ratio", "-0.1", &err) == -1);
    CHECK(pkv_press_cfg_set(cfg, "frobnicate", "1", &err) == -1 && strstr(err.msg, "no option 'frobnicate'"));
    CHECK(pkv_press_cfg_check(cfg, &err) == -1 && strstr(err.msg, "needs a budget"));
    CHECK(pkv_press_cfg_set(cfg, "window", "32", &err) == 0);
    CHECK(pkv_press_cfg_set(cfg, "budget", "32", &err) == 0);
    CHECK(pkv_press_cfg_check(cfg, &err) == -1 && strstr(err.msg, "larger than the observation window"));
    CHECK(pkv_press_cfg_set(cfg, "budget", "33", &err) == 0);
    CHECK(pkv_press_cfg_check(cfg, &err) == 0);
    CHECK(pkv_press_cfg_set(cfg, "protect", "10", &err) == -1);
    CHECK(pkv_press_cfg_set(cfg, "protect", "10:5", &err) == -1);
    CHECK(pkv_press_cfg_set(cfg, "protect", "0:120", &err) == 0);
    pkv_press_cfg_free(cfg);
}

/* Random scores, protected spans and the window: forced rows are never lost,
 * counts are exactly the budget, the rest are the best by score. */
TEST(press_topk_invariants) {
    press_env e;
    env_init(&e, 1, 1, 2, 200, 16);
    uint64_t st = 7;
    float scores[200];
    for (int trial = 0; trial < 50; trial++) {
        for (int j = 0; j < 200; j++) scores[j] = (float)(pkv_splitmix64(&st) % 17); /* many ties */
        int budget = 17 + trial * 3;
        int32_t keep[200];
        int nk;
        select_one(&e, scores, 200, 16, budget, keep, &nk);
        CHECK_EQ_INT(nk, budget);
        for (int j = 184; j < 200; j++) {
            bool found = false;
            for (int i = 0; i < nk; i++) found |= keep[i] == j;
            CHECK_MSG(found, "window row %d evicted", j);
        }
        for (int i = 1; i < nk; i++) CHECK(keep[i] > keep[i - 1]);
        /* every evicted prefix row ranks below every kept one (score, then lower position first) */
        bool kept[200] = {0};
        for (int i = 0; i < nk; i++) kept[keep[i]] = true;
        for (int a = 0; a < 184; a++)
            for (int b = 0; b < 184; b++)
                if (kept[a] && !kept[b])
                    CHECK_MSG(scores[a] > scores[b] || (scores[a] == scores[b] && a < b), "row %d kept over %d", a, b);
        pkv_arena_reset(&e.arena);
    }
    pkv_arena_free(&e.arena);
}

/* Options as data: every option of every press (the common ones included)
 * refuses a value that is not one, naming the press and the key; budget and
 * ratio replace each other. */
TEST(press_options_tables) {
    pkv_error err;
    const char *name, *summary;
    for (int i = 1; pkv_press_list(i, &name, &summary); i++) {
        pkv_press_cfg *cfg = pkv_press_cfg_new(name, &err);
        REQUIRE(cfg);
        const char *key, *help;
        for (int k = 0; pkv_press_option_list(name, k, &key, &help); k++) {
            CHECK_MSG(help && help[0], "%s %s has no help", name, key);
            int rc = pkv_press_cfg_set(cfg, key, "@@", &err);
            CHECK_MSG(rc == -1 && err.code == PKV_ERR_ARG && strstr(err.msg, key), "%s %s: '%s'", name, key, err.msg);
        }
        REQUIRE(pkv_press_cfg_set(cfg, "budget", "64", &err) == 0);
        REQUIRE(pkv_press_cfg_set(cfg, "ratio", "0.5", &err) == 0);
        char desc[160];
        pkv_press_cfg_describe(cfg, desc, sizeof desc);
        CHECK_MSG(strstr(desc, "ratio=0.5") && !strstr(desc, "budget="), "%s: %s", name, desc);
        pkv_press_cfg_free(cfg);
    }
    /* a choice names its values */
    pkv_press_cfg *cfg = pkv_press_cfg_new("snapkv", &err);
    REQUIRE(cfg);
    CHECK(pkv_press_cfg_set(cfg, "pool", "min", &err) == -1 && strstr(err.msg, "avg | max"));
    CHECK(pkv_press_cfg_set(cfg, "pool", "avg", &err) == 0);
    CHECK(pkv_press_cfg_set(cfg, "mode", "sometimes", &err) == -1 &&
          strstr(err.msg, "query_aware | query_agnostic | recompress"));
    pkv_press_cfg_free(cfg);
}

/* Keys read one head at a time from a key source (a cache of f16 or quantised
 * rows) give every press that reads keys the selection it makes with every
 * head's keys in place; and a source is read once per head when the press
 * walks the heads in order. */
typedef struct {
    const float *keys[2];
    int n, dim, reads;
} key_arrays;

static void read_key_arrays(void *user, int g, float *dst) {
    key_arrays *k = user;
    memcpy(dst, k->keys[g], (size_t)k->n * k->dim * sizeof(float));
    k->reads++;
}

TEST(press_key_source_same_selection) {
    enum { NKV = 2, NH = 4, DIM = 16, N = 200, W = 16 };
    static float keys[NKV][N * DIM], q[NH * W * DIM];
    static int32_t qpos[W];
    pkv_rng rng;
    pkv_rng_seed(&rng, 11);
    for (int g = 0; g < NKV; g++)
        for (int i = 0; i < N * DIM; i++) keys[g][i] = (float)(pkv_rng_uniform(&rng) * 2.0 - 1.0);
    for (int i = 0; i < NH * W * DIM; i++) q[i] = (float)(pkv_rng_uniform(&rng) * 2.0 - 1.0);
    for (int r = 0; r < W; r++) qpos[r] = N - W + r;
    const char *presses[] = {"snapkv", "knorm", "keydiff", "tova", "protokv", "protokv:score=attn", "streamingllm"};
    for (size_t pi = 0; pi < sizeof presses / sizeof *presses; pi++) {
        int32_t want[NKV][N], got[NKV][N];
        int n_want[NKV], n_got[NKV];
        int reads = 0;
        for (int from_source = 0; from_source < 2; from_source++) {
            press_env e;
            env_init(&e, NH, NKV, DIM, N, W);
            e.in.q_window = q;
            e.in.q_pos = qpos;
            key_arrays ka = {{keys[0], keys[1]}, N, DIM, 0};
            pkv_press_key_source src = {.read = read_key_arrays, .user = &ka, .loaded = -1};
            if (from_source) {
                src.buf = pkv_arena_alloc(&e.arena, (size_t)N * DIM * sizeof(float));
                e.in.key_source = &src;
            } else {
                e.keys[0] = keys[0];
                e.keys[1] = keys[1];
            }
            pkv_error err;
            char name[32];
            snprintf(name, sizeof name, "%s", presses[pi]);
            char *opt = strchr(name, ':');
            if (opt) *opt++ = '\0';
            pkv_press_cfg *cfg = pkv_press_cfg_new(name, &err);
            REQUIRE(cfg);
            CHECK(pkv_press_cfg_set(cfg, "budget", "60", &err) == 0);
            CHECK(pkv_press_cfg_set(cfg, "window", "16", &err) == 0);
            if (opt) {
                char *eq = strchr(opt, '=');
                *eq = '\0';
                CHECK(pkv_press_cfg_set(cfg, opt, eq + 1, &err) == 0);
            }
            pkv_press_selection sel;
            REQUIRE_MSG(pkv_press_run(cfg, &e.in, &sel, &err) == 0, "%s: %s", presses[pi], err.msg);
            REQUIRE(sel.n_sel == NKV);
            for (int g = 0; g < NKV; g++) {
                int *nk = from_source ? &n_got[g] : &n_want[g];
                *nk = sel.n_keep[g];
                memcpy(from_source ? got[g] : want[g], sel.keep[g], (size_t)*nk * sizeof(int32_t));
            }
            if (from_source) reads = ka.reads;
            pkv_press_cfg_free(cfg);
            pkv_arena_free(&e.arena);
        }
        for (int g = 0; g < NKV; g++)
            CHECK_MSG(same_set(got[g], n_got[g], want[g], n_want[g]), "%s head %d: %d rows kept from the source, %d in place",
                      presses[pi], g, n_got[g], n_want[g]);
        /* presses that read keys read each head once; streamingllm reads none */
        int want_reads = strcmp(presses[pi], "streamingllm") ? NKV : 0;
        CHECK_MSG(reads == want_reads, "%s: %d head reads, want %d", presses[pi], reads, want_reads);
    }
}

/* The press arena keeps what a layer needs and no more: a cycle that takes
 * its large allocations in another order than the last (first-fit, a large
 * allocation gets a block of its own size) would otherwise leave a second
 * large block beside the first, resident for the rest of the prefill. */
TEST(arena_reset_keeps_one_block_of_the_peak) {
    pkv_arena a = {0};
    enum { BIG = 4 << 20, SMALL = 100 << 10 };
    /* cycle 1: big, then small (a block of its own each) */
    char *p = pkv_arena_alloc(&a, BIG), *q = pkv_arena_alloc(&a, SMALL);
    REQUIRE(p && q);
    p[BIG - 1] = 1;
    size_t peak = a.peak;
    CHECK(pkv_arena_held(&a) > (size_t)BIG);
    pkv_arena_reset(&a);
    CHECK_MSG(pkv_arena_held(&a) == peak, "held %zu after a reset, the peak is %zu", pkv_arena_held(&a), peak);
    /* cycle 2 in the other order fits the one block: nothing more is held */
    for (int cycle = 0; cycle < 3; cycle++) {
        char *s = pkv_arena_alloc(&a, SMALL), *b = pkv_arena_alloc(&a, BIG);
        REQUIRE(s && b);
        CHECK(s[0] == 0 && b[BIG - 1] == 0); /* zero-filled again */
        b[BIG - 1] = 1;
        CHECK_MSG(pkv_arena_held(&a) == peak, "cycle %d holds %zu, the peak is %zu", cycle, pkv_arena_held(&a), peak);
        pkv_arena_reset(&a);
    }
    pkv_arena_free(&a);
    CHECK(pkv_arena_held(&a) == 0 && a.peak == 0);
}
