/*
 * ProtoKV (docs/presses.md B.0): invariants on constructed keys (planted SATs are
 * found and hashed together, blocked assignment = brute force, exact budgets,
 * determinism, the window kept), and the kept sets, SAT candidates, buckets
 * and clusters of the brute-force numpy reference tools/protokv_reference.py
 * on the tiny models' dumped tensors (tests/fixtures/protokv/README.md).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/prng.h"
#include "press/observer.h"
#include "press/press.h"
#include "press/protokv_steps.h"
#include "press_fixtures.h"
#include "test.h"

/* ---------------------------------------------------------------- one constructed layer */

enum { MAX_ROWS = 400, MAX_DIM = 32, MAX_HEADS = 4 };

typedef struct {
    pkv_arena arena;
    pkv_compute comp;
    pkv_press_input in;
    int n_rows[MAX_HEADS];
    const float *key_ptr[MAX_HEADS];
    const int32_t *pos_ptr[MAX_HEADS];
    int32_t positions[MAX_ROWS];
    float keys[MAX_HEADS][MAX_ROWS * MAX_DIM];
    float q[MAX_HEADS * 2 * 64 * MAX_DIM];
    int32_t q_pos[64];
} layer_env;

/* One layer: n_kv KV heads (group 2) of n rows, window w; keys and queries zero. */
static void env_init(layer_env *e, int n_kv, int dim, int n, int window) {
    memset(e, 0, sizeof *e);
    e->comp.kern = pkv_kernels_get(PKV_SIMD_AUTO);
    for (int i = 0; i < MAX_ROWS; i++) e->positions[i] = i;
    for (int g = 0; g < n_kv; g++) {
        e->n_rows[g] = n;
        e->key_ptr[g] = e->keys[g];
        e->pos_ptr[g] = e->positions;
    }
    for (int r = 0; r < window; r++) e->q_pos[r] = n - window + r;
    e->in = (pkv_press_input){
        .n_layers = 1, .n_head = 2 * n_kv, .n_head_kv = n_kv, .head_dim_k = dim, .head_dim_v = dim,
        .attn_scale = 1.0f / sqrtf((float)dim), .window = window, .q_window = e->q, .q_pos = e->q_pos,
        .n_rows = e->n_rows, .keys = e->key_ptr, .pos = e->pos_ptr, .comp = &e->comp, .arena = &e->arena,
    };
}

static uint64_t lcg(uint64_t *s) { return *s = *s * 6364136223846793005ull + 1442695040888963407ull; }
static float noise(uint64_t *s) { return (float)((lcg(s) >> 40) / 16777216.0 - 0.5); }

/* Smooth keys along positions (each row close to its neighbours: PDTs) and
 * queries that look at everything a little. */
static void smooth_keys(layer_env *e, int g, int n, int dim, uint64_t seed) {
    for (int i = 0; i < n; i++)
        for (int j = 0; j < dim; j++)
            e->keys[g][i * dim + j] = 2.0f * sinf(0.015f * (float)i * (float)(j % 5 + 1) + (float)j) + 0.01f * noise(&seed);
    for (size_t k = 0; k < sizeof e->q / sizeof e->q[0]; k++) e->q[k] = noise(&seed);
}

/* Plants key `dir` (plus tiny noise) at the given rows: they deviate from their neighbours. */
static void plant(layer_env *e, int g, int dim, const int *rows, int n, const float *dir, uint64_t seed) {
    for (int k = 0; k < n; k++)
        for (int j = 0; j < dim; j++) e->keys[g][rows[k] * dim + j] = dir[j] + 1e-3f * noise(&seed);
}

/* The tests below check the mechanics of each step on the seed's first reading
 * (global assignment to ~500 prototypes, psi = the sum of raw window logits,
 * no vote pooling: docs/protokv.md), so they spell it out; their own options
 * come after and override it. The chosen defaults have their own test. */
static const char *const FIRST_READING[] = {"assign", "global", "score", "logit", "agg", "sum", "kernel", "1",
                                            "pool", "avg", "chunk", "none", NULL};

static pkv_press_cfg *protokv_cfg(const char *const *kv) {
    const char *all[64];
    int n = 0;
    for (int i = 0; FIRST_READING[i]; i++) all[n++] = FIRST_READING[i];
    for (int i = 0; kv[i] && n < 63; i++) all[n++] = kv[i];
    all[n] = NULL;
    return test_press_cfg("protokv", all);
}

/* What the watcher saw of each head. */
typedef struct {
    int n_views;
    int n_sat[MAX_HEADS];
    int32_t sat[MAX_HEADS][MAX_ROWS];
    int32_t bucket[MAX_HEADS][MAX_ROWS]; /* per SAT, ascending position */
    int32_t cluster[MAX_HEADS][MAX_ROWS];
    int n_prefix[MAX_HEADS];
    int n_clusters[MAX_HEADS], n_sat_clusters[MAX_HEADS];
    int kept_whole[MAX_HEADS], kept_part[MAX_HEADS];
    double intra[MAX_HEADS], inter[MAX_HEADS];
} seen_clusters;

static void on_view(void *user, const pkv_cluster_view *v) {
    seen_clusters *s = user;
    s->n_views++;
    if (v->head < 0 || v->head >= MAX_HEADS || v->n_prefix > MAX_ROWS) return;
    int h = v->head;
    s->n_sat[h] = 0;
    s->n_prefix[h] = v->n_prefix;
    for (int i = 0; i < v->n_prefix; i++) {
        s->cluster[h][i] = v->cluster[i];
        if (v->sat_bucket[i] >= 0) {
            s->sat[h][s->n_sat[h]] = i;
            s->bucket[h][s->n_sat[h]++] = v->sat_bucket[i];
        }
    }
    s->n_clusters[h] = v->n_clusters;
    s->n_sat_clusters[h] = v->n_sat_clusters;
    s->kept_whole[h] = s->kept_part[h] = 0;
    for (int c = 0; c < v->n_clusters; c++) {
        s->kept_whole[h] += v->cluster_kept[c] == 2;
        s->kept_part[h] += v->cluster_kept[c] == 1;
    }
    s->intra[h] = v->sat_intra;
    s->inter[h] = v->sat_inter;
}

static bool run_press(const pkv_press_cfg *cfg, layer_env *e, pkv_press_selection *sel) {
    pkv_error err;
    pkv_arena_reset(&e->arena);
    if (pkv_press_run(cfg, &e->in, sel, &err)) {
        test_fail(__FILE__, __LINE__, "%s", err.msg);
        return false;
    }
    return true;
}

static bool contains(const int32_t *a, int n, int32_t x) {
    for (int i = 0; i < n; i++)
        if (a[i] == x) return true;
    return false;
}

/* ---------------------------------------------------------------- constructed keys */

static const int GROUP_A[] = {20, 70, 120, 170, 230};
static const int GROUP_B[] = {45, 145, 260};

/* A head of 300 smooth rows with two planted groups of far-apart similar rows. */
static void planted_layer(layer_env *e, int dim) {
    env_init(e, 1, dim, 300, 8);
    smooth_keys(e, 0, 300, dim, 11);
    float a[MAX_DIM], b[MAX_DIM];
    for (int j = 0; j < dim; j++) {
        a[j] = j % 2 ? 3.0f : -3.0f;
        b[j] = j < dim / 2 ? 3.0f : -2.0f;
    }
    plant(e, 0, dim, GROUP_A, 5, a, 5);
    plant(e, 0, dim, GROUP_B, 3, b, 6);
}

TEST(protokv_planted_sats_found) {
    static layer_env e;
    planted_layer(&e, 16);
    seen_clusters seen = {0};
    pkv_press_cfg *cfg = protokv_cfg((const char *[]){"budget", "64", "window", "8", "m", "8", "v", "20", NULL});
    REQUIRE(cfg);
    pkv_error err;
    REQUIRE(pkv_press_cfg_observe(cfg, &(pkv_press_observer){.layer = -1, .head = -1, .clusters = on_view, .user = &seen}, &err) == 0);
    pkv_press_selection sel;
    if (run_press(cfg, &e, &sel)) {
        CHECK_EQ_INT(seen.n_views, 1);
        CHECK_EQ_INT(seen.n_sat[0], 8);
        for (int k = 0; k < 5; k++) CHECK_MSG(contains(seen.sat[0], seen.n_sat[0], GROUP_A[k]), "row %d not a SAT", GROUP_A[k]);
        for (int k = 0; k < 3; k++) CHECK_MSG(contains(seen.sat[0], seen.n_sat[0], GROUP_B[k]), "row %d not a SAT", GROUP_B[k]);
        /* the planted rows cluster: far more similar to each other than to the rest */
        CHECK(seen.intra[0] > 0.3 && seen.intra[0] > 2.0 * fabs(seen.inter[0]));
    }
    pkv_press_cfg_free(cfg);
    pkv_arena_free(&e.arena);
}

/* Rows of one planted group, far apart in position, land in one bucket. */
TEST(protokv_planted_sats_share_bucket) {
    static layer_env e;
    planted_layer(&e, 16);
    for (int seed = 0; seed < 8; seed++) {
        seen_clusters seen = {0};
        char s[8];
        snprintf(s, sizeof s, "%d", seed);
        pkv_press_cfg *cfg =
            protokv_cfg((const char *[]){"budget", "64", "window", "8", "m", "8", "r", "3", "v", "20", "seed", s, NULL});
        REQUIRE(cfg);
        pkv_error err;
        REQUIRE(pkv_press_cfg_observe(cfg, &(pkv_press_observer){.layer = 0, .head = 0, .clusters = on_view, .user = &seen}, &err) == 0);
        pkv_press_selection sel;
        if (run_press(cfg, &e, &sel) && seen.n_sat[0] == 8) {
            int bucket_a = -1, bucket_b = -1;
            for (int k = 0; k < 8; k++) {
                int32_t row = seen.sat[0][k], bk = seen.bucket[0][k];
                bool in_a = false;
                for (int t = 0; t < 5; t++) in_a |= GROUP_A[t] == row;
                int *want = in_a ? &bucket_a : &bucket_b;
                if (*want < 0) *want = bk;
                CHECK_MSG(*want == bk, "seed %d: row %d in bucket %d, its group in %d", seed, row, bk, *want);
            }
            /* the SAT prototypes are the buckets: at most 2 here, at least 1 */
            CHECK(seen.n_sat_clusters[0] >= 1 && seen.n_sat_clusters[0] <= 2);
            /* the group's rows join their own SAT prototype, not a chunk */
            CHECK(seen.cluster[0][GROUP_A[0]] < seen.n_sat_clusters[0]);
            CHECK_EQ_INT(seen.cluster[0][GROUP_A[0]], seen.cluster[0][GROUP_A[4]]);
        } else {
            CHECK_MSG(false, "seed %d: %d SAT candidates", seed, seen.n_sat[0]);
        }
        pkv_press_cfg_free(cfg);
    }
    pkv_arena_free(&e.arena);
}

/* B.0 step 6: the blocked assignment equals argmax over a plain double loop. */
TEST(protokv_blocked_assignment_is_brute_force) {
    enum { N = 301, M = 77, D = 24 };
    static float rows[N * D], protos[M * D];
    uint64_t s = 99;
    for (int i = 0; i < N * D; i++) rows[i] = noise(&s);
    for (int i = 0; i < M * D; i++) protos[i] = noise(&s);
    memcpy(protos + 40 * D, protos + 5 * D, D * sizeof(float)); /* an exact tie: the first prototype wins */
    for (int i = 0; i < N; i++) {
        double nn = 0;
        for (int j = 0; j < D; j++) nn += rows[i * D + j] * rows[i * D + j];
        for (int j = 0; j < D; j++) rows[i * D + j] /= (float)sqrt(nn);
    }
    for (int c = 0; c < M; c++) {
        double nn = 0;
        for (int j = 0; j < D; j++) nn += protos[c * D + j] * protos[c * D + j];
        for (int j = 0; j < D; j++) protos[c * D + j] /= (float)sqrt(nn);
    }
    for (int j = 0; j < D; j++) rows[7 * D + j] = protos[5 * D + j]; /* row 7 is prototype 5 (and 40) */
    static int32_t got[N];
    for (int level = PKV_SIMD_SCALAR; level <= PKV_SIMD_AVX512; level++) {
        pkv_protokv_nearest(pkv_kernels_get((pkv_simd)level), rows, N, protos, M, D, got);
        int mismatches = 0;
        for (int i = 0; i < N; i++) {
            int best = 0;
            double best_dot = -INFINITY;
            for (int c = 0; c < M; c++) {
                double dot = 0;
                for (int j = 0; j < D; j++) dot += (double)rows[i * D + j] * protos[c * D + j];
                if (dot > best_dot + 1e-12) {
                    best_dot = dot;
                    best = c;
                }
            }
            mismatches += got[i] != best;
        }
        CHECK_MSG(mismatches == 0, "simd %d: %d of %d rows assigned differently", level, mismatches, N);
        CHECK_EQ_INT(got[7], 5);
    }
}

/* Under overflow=fill exactly the budget is kept; under skip at most it; the window always. */
TEST(protokv_budget_exact_and_window_kept) {
    static layer_env e;
    env_init(&e, 2, 16, 300, 16);
    smooth_keys(&e, 0, 300, 16, 3);
    smooth_keys(&e, 1, 300, 16, 4);
    const int budgets[] = {17, 20, 57, 100, 150, 299};
    for (int b = 0; b < 6; b++)
        for (int skip = 0; skip < 2; skip++) {
            char bs[16];
            snprintf(bs, sizeof bs, "%d", budgets[b]);
            pkv_press_cfg *cfg = protokv_cfg((const char *[]){"budget", bs, "window", "16", "v", "30", "overflow",
                                                              skip ? "skip" : "fill", NULL});
            REQUIRE(cfg);
            pkv_press_selection sel;
            if (run_press(cfg, &e, &sel))
                for (int g = 0; g < 2; g++) {
                    if (skip) CHECK(sel.n_keep[g] <= budgets[b] && sel.n_keep[g] >= 16);
                    else CHECK_MSG(sel.n_keep[g] == budgets[b], "budget %d head %d kept %d", budgets[b], g, sel.n_keep[g]);
                    for (int r = 284; r < 300; r++) CHECK(contains(sel.keep[g], sel.n_keep[g], r));
                    for (int k = 1; k < sel.n_keep[g]; k++) CHECK(sel.keep[g][k] > sel.keep[g][k - 1]);
                }
            pkv_press_cfg_free(cfg);
        }
    pkv_arena_free(&e.arena);
}

/* Prefixes shorter than m (every row a SAT candidate, no chunk left) and of one row. */
TEST(protokv_short_prefix) {
    static layer_env e;
    const int rows[] = {33, 37, 40};
    for (int k = 0; k < 3; k++) {
        env_init(&e, 2, 16, rows[k], 32);
        smooth_keys(&e, 0, rows[k], 16, 21);
        smooth_keys(&e, 1, rows[k], 16, 22);
        pkv_press_cfg *cfg = protokv_cfg((const char *[]){"budget", "33", "window", "32", NULL});
        REQUIRE(cfg);
        seen_clusters seen = {0};
        pkv_error err;
        REQUIRE(pkv_press_cfg_observe(cfg, &(pkv_press_observer){.layer = -1, .head = -1, .clusters = on_view, .user = &seen}, &err) == 0);
        pkv_press_selection sel;
        if (run_press(cfg, &e, &sel))
            for (int g = 0; g < 2; g++) {
                CHECK_EQ_INT(sel.n_keep[g], 33 < rows[k] ? 33 : rows[k]);
                if (rows[k] > 33) CHECK_EQ_INT(seen.n_sat[g], rows[k] - 32); /* m = 32 > P: all of them */
            }
        pkv_press_cfg_free(cfg);
        pkv_arena_free(&e.arena); /* env_init forgets the arena */
    }
}

/* Protected rows are kept and count against the budget. */
TEST(protokv_protected_rows) {
    static layer_env e;
    env_init(&e, 1, 16, 200, 8);
    smooth_keys(&e, 0, 200, 16, 8);
    pkv_press_cfg *cfg = protokv_cfg((const char *[]){"budget", "40", "window", "8", "v", "12", "protect", "50:60", NULL});
    REQUIRE(cfg);
    pkv_press_selection sel;
    if (run_press(cfg, &e, &sel)) {
        CHECK_EQ_INT(sel.n_keep[0], 40);
        for (int r = 50; r < 60; r++) CHECK(contains(sel.keep[0], sel.n_keep[0], r));
    }
    pkv_press_cfg_free(cfg);
    pkv_arena_free(&e.arena);
}

/* Same seed, same selection; the hash's numbers change with the seed, layer and head. */
TEST(protokv_deterministic_by_seed) {
    static layer_env e;
    planted_layer(&e, 16);
    int32_t first[300];
    int n_first = 0;
    for (int rep = 0; rep < 2; rep++) {
        pkv_press_cfg *cfg = protokv_cfg((const char *[]){"budget", "60", "window", "8", "m", "8", "r", "3", "v", "25",
                                                          "seed", "12345", NULL});
        REQUIRE(cfg);
        pkv_press_selection sel;
        if (run_press(cfg, &e, &sel)) {
            if (rep == 0) {
                n_first = sel.n_keep[0];
                memcpy(first, sel.keep[0], (size_t)n_first * sizeof(int32_t));
            } else {
                CHECK(n_first == sel.n_keep[0] && !memcmp(first, sel.keep[0], (size_t)n_first * sizeof(int32_t)));
            }
        }
        pkv_press_cfg_free(cfg);
    }
    double W1[3 * 16], b1[3], W2[3 * 16], b2[3], W3[3 * 16], b3[3];
    pkv_protokv_lsh_draw(1, 0, 0, 3, 16, 1.0, W1, b1);
    pkv_protokv_lsh_draw(2, 0, 0, 3, 16, 1.0, W2, b2);
    pkv_protokv_lsh_draw(1, 0, 1, 3, 16, 1.0, W3, b3);
    CHECK(memcmp(W1, W2, sizeof W1) != 0 && memcmp(W1, W3, sizeof W1) != 0);
    /* W ~ N(0, 1/sigma^2): sigma scales it exactly */
    double W4[3 * 16], b4[3];
    pkv_protokv_lsh_draw(1, 0, 0, 3, 16, 4.0, W4, b4);
    for (int i = 0; i < 3 * 16; i++) CHECK_NEAR(W4[i] * 4.0, W1[i], 1e-12);
    for (int i = 0; i < 3; i++) CHECK(b1[i] >= 0.0 && b1[i] < 6.2831853072 && b1[i] == b4[i]);
    pkv_arena_free(&e.arena);
}

/* The seeded stream is splitmix64 (published outputs for state 0) into Box-Muller. */
TEST(protokv_rng_is_splitmix64) {
    uint64_t state = 0;
    CHECK(pkv_splitmix64(&state) == 0xe220a8397b1dcdafull);
    CHECK(pkv_splitmix64(&state) == 0x6e789e6aa1b965f4ull);
    /* W[0][0] from (seed 0, layer -1, head -1): state 0, so the first two uniforms above */
    double W[1], b[1];
    pkv_protokv_lsh_draw(0, -1, -1, 1, 1, 1.0, W, b);
    double u1 = 1.0 - (double)(0xe220a8397b1dcdafull >> 11) * 0x1p-53, u2 = (double)(0x6e789e6aa1b965f4ull >> 11) * 0x1p-53;
    CHECK_NEAR(W[0], sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2), 1e-15);
}

/* Bad options name the option. */
TEST(protokv_options) {
    pkv_error err;
    pkv_press_cfg *cfg = pkv_press_cfg_new("protokv", &err);
    REQUIRE(cfg);
    CHECK(pkv_press_cfg_set(cfg, "r", "0", &err) != 0 && strstr(err.msg, "protokv r"));
    CHECK(pkv_press_cfg_set(cfg, "overflow", "truncate", &err) != 0 && strstr(err.msg, "overflow"));
    CHECK(pkv_press_cfg_set(cfg, "sigma", "-1", &err) != 0 && strstr(err.msg, "sigma"));
    CHECK(pkv_press_cfg_set(cfg, "beta", "x", &err) != 0 && strstr(err.msg, "beta"));
    CHECK(pkv_press_cfg_set(cfg, "beta", "1.5", &err) == 0 && pkv_press_cfg_set(cfg, "beta", "none", &err) == 0);
    CHECK(pkv_press_cfg_set(cfg, "sigma", "median", &err) == 0 && pkv_press_cfg_set(cfg, "score", "attn", &err) == 0);
    pkv_press_cfg_free(cfg);
    cfg = pkv_press_cfg_new("snapkv", &err);
    REQUIRE(cfg);
    CHECK(pkv_press_cfg_observe(cfg, &(pkv_press_observer){.layer = 0, .head = 0, .clusters = on_view}, &err) != 0);
    pkv_press_cfg_free(cfg);
}

/* ---------------------------------------------------------------- against the reference */

enum { MAX_EXPECT = 8 };

typedef struct {
    int layer, head;
    int n_keep, n_sat, n_cluster;
    int32_t keep[128], sat[128], bucket[128], cluster[128];
} expect_head;

typedef struct {
    char line[512];
    pkv_press_cfg *cfg;
    int window;
    int n;
    expect_head e[MAX_EXPECT];
} ref_case;

static int read_ints(const char *p, int32_t *out, int max) {
    int n = 0, used, v;
    while (n < max && sscanf(p, "%d%n", &v, &used) == 1) {
        out[n++] = v;
        p += used;
    }
    return n;
}

static expect_head *find_expect(ref_case *c, int layer, int head) {
    for (int i = 0; i < c->n; i++)
        if (c->e[i].layer == layer && c->e[i].head == head) return &c->e[i];
    if (c->n == MAX_EXPECT) return NULL;
    c->e[c->n] = (expect_head){.layer = layer, .head = head};
    return &c->e[c->n++];
}

static pkv_press_cfg *cfg_from_case(const char *line, int *window) {
    char buf[512];
    snprintf(buf, sizeof buf, "%.500s", line);
    pkv_error err;
    pkv_press_cfg *cfg = pkv_press_cfg_new("protokv", &err);
    if (!cfg) return NULL;
    for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
        char *eq = strchr(tok, '=');
        if (!eq) continue;
        *eq = '\0';
        if (!strcmp(tok, "press")) continue;
        if (!strcmp(tok, "window")) *window = atoi(eq + 1);
        if (pkv_press_cfg_set(cfg, tok, eq + 1, &err)) test_fail(__FILE__, __LINE__, "%s: %s", line, err.msg);
    }
    return cfg;
}

static bool read_case(FILE *f, ref_case *c) {
    char line[8192];
    memset(c, 0, sizeof *c);
    int l, h, off;
    while (fgets(line, sizeof line, f)) {
        line[strcspn(line, "\n")] = '\0';
        expect_head *e = NULL;
        if (!strncmp(line, "case ", 5)) {
            snprintf(c->line, sizeof c->line, "%.500s", line);
            c->cfg = cfg_from_case(line, &c->window);
        } else if (sscanf(line, "layer %d head %d keep%n", &l, &h, &off) == 2 && (e = find_expect(c, l, h))) {
            e->n_keep = read_ints(line + off, e->keep, 128);
        } else if (sscanf(line, "sat layer %d head %d%n", &l, &h, &off) == 2 && (e = find_expect(c, l, h))) {
            e->n_sat = read_ints(line + off, e->sat, 128);
        } else if (sscanf(line, "bucket layer %d head %d%n", &l, &h, &off) == 2 && (e = find_expect(c, l, h))) {
            read_ints(line + off, e->bucket, 128);
        } else if (sscanf(line, "cluster layer %d head %d%n", &l, &h, &off) == 2 && (e = find_expect(c, l, h))) {
            e->n_cluster = read_ints(line + off, e->cluster, 128);
        } else if (!strcmp(line, "end")) {
            return true;
        }
    }
    return false;
}

typedef struct {
    int selections, keep_equal, sat_equal, bucket_equal, cluster_equal;
} match_counts;

static void check_case(const press_dump *d, ref_case *c, match_counts *mc) {
    pkv_compute comp = {.kern = pkv_kernels_get(PKV_SIMD_AUTO)};
    int w = c->window;
    for (int l = 0; l < d->n_layers; l++) {
        seen_clusters *seen = calloc(1, sizeof *seen);
        pkv_arena arena = {0};
        pkv_error err;
        pkv_press_cfg_observe(c->cfg, &(pkv_press_observer){.layer = -1, .head = -1, .clusters = on_view, .user = seen}, &err);
        float *q = malloc((size_t)d->n_head * w * d->head_dim * sizeof(float));
        int32_t qpos[64], positions[512];
        for (int h = 0; h < d->n_head; h++)
            memcpy(q + (size_t)h * w * d->head_dim, d->q[l] + ((size_t)h * d->w_max + d->w_max - w) * d->head_dim,
                   (size_t)w * d->head_dim * sizeof(float));
        for (int r = 0; r < w; r++) qpos[r] = d->L - w + r;
        for (int j = 0; j < d->L; j++) positions[j] = j;
        int n_rows[4];
        const float *keys[4];
        const int32_t *pos[4];
        for (int g = 0; g < d->n_head_kv; g++) {
            n_rows[g] = d->L;
            keys[g] = d->k[l] + (size_t)g * d->L * d->head_dim;
            pos[g] = positions;
        }
        pkv_press_input in = {
            .layer = l, .n_layers = d->n_layers, .n_head = d->n_head, .n_head_kv = d->n_head_kv,
            .head_dim_k = d->head_dim, .head_dim_v = d->head_dim, .attn_scale = 1.0f / sqrtf((float)d->head_dim),
            .window = w, .q_window = q, .q_pos = qpos, .n_rows = n_rows, .keys = keys, .pos = pos, .comp = &comp,
            .arena = &arena, .seed = c->cfg->seed,
        };
        pkv_press_selection sel;
        if (pkv_press_run(c->cfg, &in, &sel, &err)) {
            test_fail(__FILE__, __LINE__, "%s: %s", c->line, err.msg);
        } else {
            for (int i = 0; i < c->n; i++) {
                expect_head *e = &c->e[i];
                if (e->layer != l) continue;
                int g = e->head;
                mc->selections++;
                bool keep_ok = sel.n_keep[g] == e->n_keep && !memcmp(sel.keep[g], e->keep, (size_t)e->n_keep * 4);
                mc->keep_equal += keep_ok;
                CHECK_MSG(keep_ok, "%s: layer %d head %d kept set differs", c->line, l, g);
                if (!e->n_sat && !e->n_cluster) continue; /* kept everything: no clustering */
                bool sat_ok = seen->n_sat[g] == e->n_sat && !memcmp(seen->sat[g], e->sat, (size_t)e->n_sat * 4);
                bool bucket_ok = sat_ok && !memcmp(seen->bucket[g], e->bucket, (size_t)e->n_sat * 4);
                bool cluster_ok = seen->n_prefix[g] == e->n_cluster &&
                                  !memcmp(seen->cluster[g], e->cluster, (size_t)e->n_cluster * 4);
                mc->sat_equal += sat_ok;
                mc->bucket_equal += bucket_ok;
                mc->cluster_equal += cluster_ok;
                CHECK_MSG(sat_ok && bucket_ok && cluster_ok, "%s: layer %d head %d: SATs %s, buckets %s, clusters %s",
                          c->line, l, g, sat_ok ? "equal" : "differ", bucket_ok ? "equal" : "differ",
                          cluster_ok ? "equal" : "differ");
            }
        }
        free(q);
        free(seen);
        pkv_arena_free(&arena);
    }
}

static void run_reference(const char *model, match_counts *mc) {
    char path[256];
    press_dump d;
    snprintf(path, sizeof path, "tests/fixtures/press/%s.tensors", model);
    REQUIRE_MSG(press_dump_load(path, &d), "cannot read %s", path);
    snprintf(path, sizeof path, "tests/fixtures/protokv/%s.keep", model);
    FILE *f = fopen(path, "r");
    REQUIRE_MSG(f, "cannot read %s", path);
    ref_case *c = malloc(sizeof *c);
    int n_cases = 0;
    while (read_case(f, c)) {
        if (c->cfg) check_case(&d, c, mc);
        pkv_press_cfg_free(c->cfg);
        n_cases++;
    }
    fclose(f);
    free(c);
    press_dump_free(&d);
    CHECK_MSG(n_cases >= 15 && mc->selections == n_cases * d.n_layers * d.n_head_kv, "%s: %d cases, %d selections",
              model, n_cases, mc->selections);
    printf("    %s: %d head selections, kept sets equal %d, SAT sets %d, buckets %d, clusters %d\n", model,
           mc->selections, mc->keep_equal, mc->sat_equal, mc->bucket_equal, mc->cluster_equal);
}

TEST(protokv_reference_tiny_llama) {
    match_counts mc = {0};
    run_reference("tiny-llama", &mc);
}

TEST(protokv_reference_tiny_qwen2) {
    match_counts mc = {0};
    run_reference("tiny-qwen2", &mc);
}

/* End to end: the engine's own prefill of tiny-qwen2 (its post-RoPE vectors are
 * HF's, dimension for dimension; tiny-llama's GGUF permutes q/k dimensions,
 * which changes the random projections of the hash) keeps the reference's rows. */
TEST(protokv_reference_engine_tiny_qwen2) {
    press_dump d;
    REQUIRE(press_dump_load("tests/fixtures/press/tiny-qwen2.tensors", &d));
    pkv_error err;
    pkv_model *m = pkv_model_load("tests/fixtures/models/tiny-qwen2-f32.gguf", NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    so.cache_type_k = so.cache_type_v = PKV_CACHE_F32;
    so.n_threads = 2;
    so.n_batch = 40;
    pkv_session *s = pkv_session_new(m, &so, &err);
    REQUIRE_MSG(s, "%s", err.msg);
    FILE *f = fopen("tests/fixtures/protokv/tiny-qwen2.keep", "r");
    REQUIRE(f);
    ref_case *c = malloc(sizeof *c);
    int checked = 0, equal = 0;
    while (read_case(f, c)) {
        pkv_session_reset(s);
        if (c->cfg && pkv_prefill(s, d.tokens, d.L, c->cfg, NULL, &err) == 0) {
            for (int i = 0; i < c->n; i++) {
                int32_t got[512];
                int n = pkv_session_positions(s, c->e[i].layer, c->e[i].head, got, 512);
                bool ok = n == c->e[i].n_keep && !memcmp(got, c->e[i].keep, (size_t)n * 4);
                CHECK_MSG(ok, "%s: layer %d head %d differs (engine)", c->line, c->e[i].layer, c->e[i].head);
                checked++;
                equal += ok;
            }
        } else if (c->cfg) {
            test_fail(__FILE__, __LINE__, "%s: %s", c->line, err.msg);
        }
        pkv_press_cfg_free(c->cfg);
    }
    printf("    tiny-qwen2 through the engine: %d of %d head selections equal\n", equal, checked);
    CHECK(checked >= 60);
    free(c);
    fclose(f);
    press_dump_free(&d);
    pkv_session_free(s);
    pkv_model_free(m);
}

/* ---------------------------------------------------------------- the variants, by hand */

/* A head whose raw window votes are chosen row by row: every window query is
 * e0 (both query heads of the group), row i's key is a[i] e0 + e1, so
 * vote(i) = 2 heads x w queries x a[i] under score=logit; the e1 part keeps
 * every key non-zero and alike (local similarity plays no role with m = 0). */
static void voted_layer(layer_env *e, int n, int window, const float *a) {
    enum { DIM = 4 };
    env_init(e, 1, DIM, n, window);
    for (int i = 0; i < n; i++) {
        e->keys[0][i * DIM + 0] = a[i];
        e->keys[0][i * DIM + 1] = 1.0f;
    }
    for (int h = 0; h < 2; h++)
        for (int r = 0; r < window; r++) e->q[(h * window + r) * DIM] = 1.0f;
}

static void kept_prefix(const pkv_press_selection *sel, int n_prefix, bool *kept) {
    memset(kept, 0, (size_t)n_prefix);
    for (int k = 0; k < sel->n_keep[0]; k++)
        if (sel->keep[0][k] < n_prefix) kept[sel->keep[0][k]] = true;
}

/* Runs the press with opts (chunks of 4 rows) and checks that exactly the
 * rows of chunk want, and the window, are kept. */
static void check_one_chunk_kept(layer_env *e, const char *const *opts, int n_prefix, int want, const char *what) {
    pkv_press_cfg *cfg = protokv_cfg(opts);
    REQUIRE(cfg);
    pkv_press_selection sel;
    bool kept[64];
    if (run_press(cfg, e, &sel)) {
        kept_prefix(&sel, n_prefix, kept);
        CHECK_EQ_INT(sel.n_keep[0], 8);
        for (int i = 0; i < n_prefix; i++)
            CHECK_MSG(kept[i] == (i / 4 == want), "%s: row %d kept %d", what, i, kept[i]);
    }
    pkv_press_cfg_free(cfg);
}

/* 16 prefix rows in chunks of 4 (m = 0, assign=local, reach 0: chunk c is
 * rows 4c..4c+3), budget 4 prefix rows + a window of 4: agg decides which
 * chunk survives whole. Chunk 0 holds one strong vote (10, 0, 0, 0: sum 10,
 * max 10), chunk 1 four middling ones (4, 4, 4, 4: sum 16, max 4), chunk 2 and
 * 3 weak ones. */
TEST(protokv_agg_sum_max_mean_by_hand) {
    static layer_env e;
    const float a[20] = {10, 0, 0, 0, 4, 4, 4, 4, 1, 1, 1, 1, 0, 1, 0, 1, 0, 0, 0, 0};
    voted_layer(&e, 20, 4, a);
    const char *aggs[] = {"sum", "max", "mean"};
    const int want_chunk[] = {1, 0, 1}; /* sum 16 > 10; max 10 > 4; mean 4 > 2.5 */
    for (int k = 0; k < 3; k++)
        check_one_chunk_kept(&e,
                             (const char *[]){"budget", "8", "window", "4", "m", "0", "chunk", "4", "assign", "local",
                                              "reach", "0", "agg", aggs[k], NULL},
                             16, want_chunk[k], aggs[k]);
    pkv_arena_free(&e.arena);
}

/* chunk=N gives ceil(R / N) chunk prototypes; reach 0 puts every row in its
 * own chunk (clusters are contiguous), and a larger reach lets rows move. */
TEST(protokv_chunk_and_local_assignment) {
    static layer_env e;
    planted_layer(&e, 16); /* 300 rows, window 8: 292 prefix rows */
    seen_clusters seen = {0};
    pkv_press_cfg *cfg = protokv_cfg(
        (const char *[]){"budget", "64", "window", "8", "m", "0", "chunk", "10", "assign", "local", "reach", "0", NULL});
    REQUIRE(cfg);
    pkv_error err;
    REQUIRE(pkv_press_cfg_observe(cfg, &(pkv_press_observer){.layer = 0, .head = 0, .clusters = on_view, .user = &seen}, &err) == 0);
    pkv_press_selection sel;
    if (run_press(cfg, &e, &sel)) {
        CHECK_EQ_INT(seen.n_sat_clusters[0], 0);
        CHECK_EQ_INT(seen.n_clusters[0], 30); /* ceil(292 / 10) */
        for (int i = 0; i < 292; i++) {
            /* chunk c holds ranks [floor(c R / v), floor((c+1) R / v)) */
            int want = 0;
            while (want < 29 && (long)(want + 1) * 292 / 30 <= i) want++;
            CHECK_MSG(seen.cluster[0][i] == want, "row %d in cluster %d, its chunk is %d", i, seen.cluster[0][i], want);
        }
    }
    pkv_press_cfg_free(cfg);
    /* with the SAT candidates back, the planted far-apart rows share a SAT cluster under local assignment too */
    seen = (seen_clusters){0};
    cfg = protokv_cfg((const char *[]){"budget", "64", "window", "8", "m", "8", "chunk", "10", "assign", "local", NULL});
    REQUIRE(cfg);
    REQUIRE(pkv_press_cfg_observe(cfg, &(pkv_press_observer){.layer = 0, .head = 0, .clusters = on_view, .user = &seen}, &err) == 0);
    if (run_press(cfg, &e, &sel)) {
        CHECK(seen.cluster[0][GROUP_A[0]] < seen.n_sat_clusters[0]);
        CHECK_EQ_INT(seen.cluster[0][GROUP_A[0]], seen.cluster[0][GROUP_A[4]]);
        /* a chunk row joins a chunk at most `reach` (1) away from its own */
        for (int i = 0; i < 292; i++) {
            bool sat = contains(seen.sat[0], seen.n_sat[0], i);
            int cl = seen.cluster[0][i] - seen.n_sat_clusters[0];
            if (!sat && cl >= 0) {
                int rank = i; /* rows before i that are not candidates */
                for (int k = 0; k < seen.n_sat[0]; k++) rank -= seen.sat[0][k] < i;
                int v = seen.n_clusters[0] - seen.n_sat_clusters[0], home = 0;
                while (home < v - 1 && (long)(home + 1) * (292 - seen.n_sat[0]) / v <= rank) home++;
                CHECK_MSG(abs(cl - home) <= 1, "row %d joined chunk %d, home %d", i, cl, home);
            }
        }
    }
    pkv_press_cfg_free(cfg);
    pkv_arena_free(&e.arena);
}

/* kernel: the votes are pooled along positions before the clusters. One
 * spike (row 9, vote 8) among zeros; chunks of 1 row (every row its own
 * cluster), budget 3 prefix rows: without pooling ties to the lower position
 * keep 9, 0, 1; avg pooling over 3 spreads the spike to rows 8 and 10. */
TEST(protokv_vote_pooling_by_hand) {
    static layer_env e;
    float a[24] = {0};
    a[9] = 8.0f;
    voted_layer(&e, 24, 4, a);
    const char *kernels[] = {"1", "3"};
    const int want[2][3] = {{0, 1, 9}, {8, 9, 10}};
    for (int k = 0; k < 2; k++) {
        pkv_press_cfg *cfg = protokv_cfg((const char *[]){"budget", "7", "window", "4", "m", "0", "chunk", "1", "assign",
                                                          "local", "reach", "0", "kernel", kernels[k], "pool", "avg",
                                                          NULL});
        REQUIRE(cfg);
        pkv_press_selection sel;
        if (run_press(cfg, &e, &sel)) {
            CHECK_EQ_INT(sel.n_keep[0], 7);
            for (int j = 0; j < 3; j++) CHECK_EQ_INT(sel.keep[0][j], want[k][j]);
        }
        pkv_press_cfg_free(cfg);
    }
    pkv_arena_free(&e.arena);
}

/* mix < 1 ranks rows by (1 - mix) vote + mix psi: with mix 0.5 a row of a
 * strong cluster can lose to a strong row of a weak cluster. Chunks of 4:
 * chunk 0 votes (3, 3, 3, 3) (psi max 3), chunk 1 (9, 0, 0, 0) (psi 9);
 * budget 2 prefix rows. mix 1 (whole clusters): chunk 1's best rows, 4 and 5
 * (fill, ties to the lower position). mix 0.5: row 4 scores 9, rows 5-7 4.5,
 * rows 0-3 3: rows 4 and 5. mix 0: row 4 (9), then row 0 (3). */
TEST(protokv_mix_by_hand) {
    static layer_env e;
    const float a[12] = {3, 3, 3, 3, 9, 0, 0, 0, 0, 0, 0, 0};
    voted_layer(&e, 12, 4, a);
    const char *mixes[] = {"1", "0.5", "0"};
    const int want[3][2] = {{4, 5}, {4, 5}, {0, 4}};
    for (int k = 0; k < 3; k++) {
        pkv_press_cfg *cfg = protokv_cfg((const char *[]){"budget", "6", "window", "4", "m", "0", "chunk", "4", "assign",
                                                          "local", "reach", "0", "agg", "max", "mix", mixes[k], NULL});
        REQUIRE(cfg);
        pkv_press_selection sel;
        if (run_press(cfg, &e, &sel)) {
            CHECK_EQ_INT(sel.n_keep[0], 6);
            CHECK_MSG(sel.keep[0][0] == want[k][0] && sel.keep[0][1] == want[k][1], "mix %s: kept %d, %d", mixes[k],
                      sel.keep[0][0], sel.keep[0][1]);
        }
        pkv_press_cfg_free(cfg);
    }
    pkv_arena_free(&e.arena);
}

/* mix 0 with SnapKV's pooling and softmax votes is SnapKV: the same kept rows
 * on smooth random keys, every budget. */
TEST(protokv_mix0_is_snapkv) {
    static layer_env e;
    env_init(&e, 2, 16, 200, 16);
    smooth_keys(&e, 0, 200, 16, 3);
    smooth_keys(&e, 1, 200, 16, 4);
    const char *budgets[] = {"24", "40", "100"};
    for (int b = 0; b < 3; b++) {
        pkv_press_cfg *snap = test_press_cfg(
            "snapkv", (const char *[]){"budget", budgets[b], "window", "16", "kernel", "5", "pool", "avg", NULL});
        pkv_press_cfg *pk = protokv_cfg((const char *[]){"budget", budgets[b], "window", "16", "score", "attn", "kernel",
                                                         "5", "pool", "avg", "mix", "0", NULL});
        REQUIRE(snap && pk);
        pkv_press_selection a, c;
        int32_t want[2][200];
        int n_want[2];
        if (run_press(snap, &e, &a)) {
            for (int g = 0; g < 2; g++) {
                n_want[g] = a.n_keep[g];
                memcpy(want[g], a.keep[g], (size_t)a.n_keep[g] * sizeof(int32_t));
            }
            if (run_press(pk, &e, &c))
                for (int g = 0; g < 2; g++)
                    CHECK_MSG(c.n_keep[g] == n_want[g] && !memcmp(c.keep[g], want[g], (size_t)n_want[g] * 4),
                              "budget %s head %d: protokv mix 0 differs from snapkv", budgets[b], g);
        }
        pkv_press_cfg_free(snap);
        pkv_press_cfg_free(pk);
    }
    pkv_arena_free(&e.arena);
}

/* sinks=N keeps the prompt's first N rows, counted against the budget. */
TEST(protokv_sinks_kept) {
    static layer_env e;
    float a[40] = {0};
    for (int i = 20; i < 36; i++) a[i] = 5.0f; /* the votes are all later */
    voted_layer(&e, 40, 4, a);
    pkv_press_cfg *cfg = protokv_cfg((const char *[]){"budget", "12", "window", "4", "m", "0", "chunk", "4", "assign",
                                                      "local", "sinks", "3", NULL});
    REQUIRE(cfg);
    pkv_press_selection sel;
    if (run_press(cfg, &e, &sel)) {
        CHECK_EQ_INT(sel.n_keep[0], 12);
        for (int i = 0; i < 3; i++) CHECK(contains(sel.keep[0], sel.n_keep[0], i));
        CHECK(!contains(sel.keep[0], sel.n_keep[0], 3));
        for (int r = 36; r < 40; r++) CHECK(contains(sel.keep[0], sel.n_keep[0], r));
    }
    pkv_press_cfg_free(cfg);
    pkv_arena_free(&e.arena);
}

/* score: psi from raw window logits or from SnapKV's softmax votes. Chunks of
 * 4, sum over the cluster, budget 4 prefix rows: chunk 0 has one row far above
 * the rest and three below (logits 4, -2, -2, -2: sum -2), chunk 1 is flat
 * (0, 0, 0, 0: sum 0). Raw logits keep chunk 1 (0 > -2); softmax votes are
 * proportional to exp(logit / sqrt(d)) = exp(logit / 2), so chunk 0 sums
 * e^2 + 3 e^-1 = 8.5 against chunk 1's 4 and is kept: the negative logits of
 * the diagnosis (docs/protokv.md) stop counting against a cluster. */
TEST(protokv_score_logit_or_attn_by_hand) {
    static layer_env e;
    const float a[16] = {4, -2, -2, -2, 0, 0, 0, 0, -5, -5, -5, -5, 0, 0, 0, 0};
    voted_layer(&e, 16, 4, a);
    const char *scores[] = {"logit", "attn"};
    const int want_chunk[] = {1, 0};
    for (int k = 0; k < 2; k++)
        check_one_chunk_kept(&e,
                             (const char *[]){"budget", "8", "window", "4", "m", "0", "chunk", "4", "assign", "local",
                                              "reach", "0", "score", scores[k], NULL},
                             12, want_chunk[k], scores[k]);
    pkv_arena_free(&e.arena);
}
