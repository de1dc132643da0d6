/*
 * Presses against independent references (tests/fixtures/press/README.md):
 * kept sets of an official-semantics SnapKV written from docs/presses.md Part A
 * (tools/snapkv_reference.py) and of kvpress 0.5.5's presses, on tensors
 * dumped from tiny HF models. Checked twice: on the dumped tensors directly,
 * and end to end through the engine on the matching GGUF files.
 */
#include <stdlib.h>
#include <string.h>

#include "press/press.h"
#include "press_fixtures.h"
#include "test.h"

/* ---------------------------------------------------------------- .keep parsing */

typedef struct {
    int layer, head, n;
    int32_t pos[160];
} expect_row;

typedef struct {
    char line[512];          /* the case line */
    pkv_press_cfg *cfg;
    int window;
    int n_expect;
    expect_row expect[64];
} ref_case;

/* Builds the press configuration from a case line's key=value options. */
static pkv_press_cfg *cfg_from_line(const char *line, int *window) {
    char buf[512];
    snprintf(buf, sizeof buf, "%.500s", line);
    char *press = strstr(buf, "press=");
    if (!press) return NULL;
    char name[32];
    sscanf(press + 6, "%31s", name);
    pkv_error err;
    pkv_press_cfg *cfg = pkv_press_cfg_new(name, &err);
    if (!cfg) {
        test_fail(__FILE__, __LINE__, "%s", err.msg);
        return NULL;
    }
    *window = 0;
    bool has_budget = strstr(buf, " budget=") != NULL;
    for (char *tok = strtok(buf, " "); tok; tok = strtok(NULL, " ")) {
        char *eq = strchr(tok, '=');
        if (!eq) continue;
        *eq = '\0';
        const char *key = tok, *val = eq + 1;
        if (!strcmp(key, "press") || !strcmp(key, "source")) continue;
        if (!strcmp(key, "ratio") && has_budget) continue;
        if (!strcmp(key, "n_sink") && !strcmp(name, "streamingllm")) key = "sinks";
        if (!strcmp(key, "window")) *window = atoi(val);
        if (pkv_press_cfg_set(cfg, key, val, &err)) test_fail(__FILE__, __LINE__, "%s: %s", line, err.msg);
    }
    return cfg;
}

/* Reads the next case; false at end of file. */
static bool read_case(FILE *f, ref_case *c) {
    char line[4096];
    memset(c, 0, sizeof *c);
    while (fgets(line, sizeof line, f)) {
        if (!strncmp(line, "case ", 5)) {
            line[strcspn(line, "\n")] = '\0';
            snprintf(c->line, sizeof c->line, "%.500s", line);
            c->cfg = cfg_from_line(line, &c->window);
        } else if (!strncmp(line, "layer ", 6) && c->n_expect < 64) {
            int l, h, off = 0;
            if (sscanf(line, "layer %d head %d keep%n", &l, &h, &off) < 2) continue;
            expect_row *e = &c->expect[c->n_expect++];
            e->layer = l;
            e->head = h;
            char *p = line + off;
            int v, used;
            while (e->n < 160 && sscanf(p, "%d%n", &v, &used) == 1) {
                e->pos[e->n++] = v;
                p += used;
            }
        } else if (!strncmp(line, "end", 3)) {
            return true;
        }
    }
    return false;
}

static void free_case(ref_case *c) { pkv_press_cfg_free(c->cfg); }

static bool kept_equal(const int32_t *got, int n_got, const int32_t *want, int n_want) {
    return n_got == n_want && !memcmp(got, want, (size_t)n_got * sizeof *got);
}

/* ---------------------------------------------------------------- on the dumped tensors */

static void check_dump_case(const press_dump *d, const ref_case *c, int *n_checked) {
    pkv_compute comp = {.kern = pkv_kernels_get(PKV_SIMD_AUTO)};
    int window = c->window > 0 ? c->window : 1; /* presses without a window score with the last query */
    for (int l = 0; l < d->n_layers; l++) {
        pkv_arena arena = {0};
        float *q = pkv_arena_alloc(&arena, (size_t)d->n_head * window * d->head_dim * sizeof(float));
        int32_t qpos[64], counts_buf[512];
        for (int h = 0; h < d->n_head; h++)
            memcpy(q + (size_t)h * window * d->head_dim, d->q[l] + ((size_t)h * d->w_max + d->w_max - window) * d->head_dim,
                   (size_t)window * d->head_dim * sizeof(float));
        for (int r = 0; r < window; r++) qpos[r] = d->L - window + r;
        int n_rows[8];
        const float *keys[8], *values[8];
        const int32_t *pos[8], *counts[8];
        const float *sums[16];
        int32_t positions[512];
        for (int j = 0; j < d->L; j++) {
            positions[j] = j;
            counts_buf[j] = d->L - j;
        }
        for (int g = 0; g < d->n_head_kv; g++) {
            n_rows[g] = d->L;
            keys[g] = d->k[l] + (size_t)g * d->L * d->head_dim;
            values[g] = d->v[l] + (size_t)g * d->L * d->head_dim;
            pos[g] = positions;
            counts[g] = counts_buf;
        }
        for (int h = 0; h < d->n_head; h++) sums[h] = d->attn_sum[l] + (size_t)h * d->L;
        pkv_press_input in = {
            .layer = l, .n_layers = d->n_layers, .n_head = d->n_head, .n_head_kv = d->n_head_kv,
            .head_dim_k = d->head_dim, .head_dim_v = d->head_dim, .attn_scale = 1.0f / sqrtf((float)d->head_dim),
            .window = window, .q_window = q, .q_pos = qpos, .n_rows = n_rows, .keys = keys, .values = values,
            .pos = pos, .attn_sum = sums, .attn_count = counts, .comp = &comp, .arena = &arena,
        };
        pkv_press_selection sel;
        pkv_error err;
        if (pkv_press_run(c->cfg, &in, &sel, &err)) {
            test_fail(__FILE__, __LINE__, "%s: %s", c->line, err.msg);
        } else {
            for (int e = 0; e < c->n_expect; e++) {
                if (c->expect[e].layer != l) continue;
                int h = c->expect[e].head;
                CHECK_MSG(h < sel.n_sel && kept_equal(sel.keep[h], sel.n_keep[h], c->expect[e].pos, c->expect[e].n),
                          "%s: layer %d head %d kept set differs", c->line, l, h);
                (*n_checked)++;
            }
        }
        pkv_arena_free(&arena);
    }
}

static void run_dump_tests(const char *model) {
    char path[256];
    press_dump d;
    snprintf(path, sizeof path, "tests/fixtures/press/%s.tensors", model);
    REQUIRE_MSG(press_dump_load(path, &d), "cannot read %s", path);
    snprintf(path, sizeof path, "tests/fixtures/press/%s.keep", model);
    FILE *f = fopen(path, "r");
    REQUIRE_MSG(f, "cannot read %s", path);
    ref_case *c = malloc(sizeof *c);
    int n_cases = 0, n_checked = 0;
    while (read_case(f, c)) {
        /* presses that read the prefill's query statistics or feed the context
         * again need the model: the engine tests below check them */
        bool engine_only = c->cfg && (c->cfg->ops->needs_query_stats || c->cfg->ops->recon);
        if (c->cfg && !engine_only) check_dump_case(&d, c, &n_checked);
        n_cases++;
        free_case(c);
    }
    fclose(f);
    free(c);
    CHECK_MSG(n_cases >= 50 && n_checked >= 50 * 2 * d.n_head_kv, "%s: only %d cases, %d head selections", model, n_cases,
              n_checked);
    press_dump_free(&d);
}

TEST(press_ref_tensors_tiny_llama) { run_dump_tests("tiny-llama"); }
TEST(press_ref_tensors_tiny_qwen2) { run_dump_tests("tiny-qwen2"); }

/* ---------------------------------------------------------------- end to end through the engine */

static void run_engine_tests(const char *model) {
    char path[256];
    press_dump d;
    snprintf(path, sizeof path, "tests/fixtures/press/%s.tensors", model);
    REQUIRE_MSG(press_dump_load(path, &d), "cannot read %s", path);
    snprintf(path, sizeof path, "tests/fixtures/models/%s-f32.gguf", model);
    pkv_error err;
    pkv_model *m = pkv_model_load(path, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    snprintf(path, sizeof path, "tests/fixtures/press/%s.keep", model);
    FILE *f = fopen(path, "r");
    REQUIRE(f);
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    so.cache_type_k = so.cache_type_v = PKV_CACHE_F32;
    so.n_threads = 2;
    so.n_batch = 40; /* chunked: the window's queries span chunks */
    so.n_ctx = 512;  /* room for KVzip's reconstruction passes after the prompt */
    pkv_session *s = pkv_session_new(m, &so, &err);
    REQUIRE_MSG(s, "%s", err.msg);
    ref_case *c = malloc(sizeof *c);
    int n_checked = 0;
    while (read_case(f, c)) {
        if (!c->cfg) continue;
        pkv_session_reset(s);
        if (pkv_prefill(s, d.tokens, d.L, c->cfg, NULL, &err)) {
            test_fail(__FILE__, __LINE__, "%s: %s", c->line, err.msg);
        } else {
            for (int e = 0; e < c->n_expect; e++) {
                int32_t got[512];
                int n = pkv_session_positions(s, c->expect[e].layer, c->expect[e].head, got, 512);
                CHECK_MSG(kept_equal(got, n, c->expect[e].pos, c->expect[e].n), "%s: layer %d head %d differs (engine)",
                          c->line, c->expect[e].layer, c->expect[e].head);
                n_checked++;
            }
        }
        free_case(c);
    }
    CHECK_MSG(n_checked >= 63 * 2 * d.n_head_kv, "%s: %d head selections checked", model, n_checked);
    free(c);
    fclose(f);
    pkv_session_free(s);
    pkv_model_free(m);
    press_dump_free(&d);
}

TEST(press_ref_engine_tiny_llama) { run_engine_tests("tiny-llama"); }
TEST(press_ref_engine_tiny_qwen2) { run_engine_tests("tiny-qwen2"); }
