/*
 * Sessions with quantised cache rows (--cache-type q8_0 / q4_0, keys and
 * values apart; docs/design.md "The cache layout"): on the tiny golden
 * fixtures a Q8_0 cache gives the f16 cache's greedy tokens and logits
 * within a stated bound, Q4_0 within a looser one; every press runs on Q8_0
 * rows; head sizes a block type cannot hold are refused; the bytes a
 * session reports and the admission estimate count the quantised rows.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "press_fixtures.h"
#include "promptkv.h"
#include "model_ref.h"
#include "test.h"

/* ------------------------------------------------------------------ golden fixtures */

static bool load_ref_tokens(const char *name, ref_data *r) {
    char path[256];
    snprintf(path, sizeof path, "tests/fixtures/models/%s.ref", name);
    return ref_load(path, false, r);
}

static pkv_session *session_of(pkv_model *m, pkv_cache_type tk, pkv_cache_type tv, int n_ctx) {
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    so.n_threads = 2;
    so.n_batch = 13;
    so.n_ctx = n_ctx;
    so.cache_type_k = tk;
    so.cache_type_v = tv;
    pkv_error err;
    pkv_session *s = pkv_session_new(m, &so, &err);
    if (!s) test_fail(__FILE__, __LINE__, "%s/%s: %s", pkv_cache_type_name(tk), pkv_cache_type_name(tv), err.msg);
    return s;
}

/* What a cache type does to a fixture, against the f16 cache: the logits of
 * every prompt position and of teacher-forced decode steps (the reference's
 * tokens), and greedy generation from the prompt. */
typedef struct {
    double max_abs;     /* largest |logit difference| at any position */
    double rms;
    int positions;
    double flip_lead;   /* the largest lead of the f16 cache's top token where the top tokens differ */
    int greedy_same;    /* leading greedy tokens equal to the f16 cache's */
    int n_greedy;
    float lead[32];     /* the f16 cache's lead of its greedy token over the runner-up, per step */
} type_effect;

/* The first greedy step where the f16 cache's top token leads by less than gap. */
static int first_near_tie(const type_effect *e, float gap) {
    for (int i = 0; i < e->n_greedy; i++)
        if (e->lead[i] < gap) return i;
    return e->n_greedy;
}

typedef struct {
    float *rows; /* [positions][n_vocab] */
    int n, n_vocab;
} logit_rows;

static void keep_row(void *user, int index, const float *logits) {
    logit_rows *lr = user;
    memcpy(lr->rows + (size_t)index * lr->n_vocab, logits, (size_t)lr->n_vocab * sizeof(float));
}

/* Logits of every prompt position and decode step; then n_greedy greedy tokens into greedy. */
static float lead_of(const float *a, int nv) {
    int t = pkv_logits_argmax(a, nv);
    float second = -INFINITY;
    for (int i = 0; i < nv; i++)
        if (i != t && a[i] > second) second = a[i];
    return a[t] - second;
}

static bool run_fixture(pkv_model *m, const ref_data *r, pkv_cache_type tk, pkv_cache_type tv, float *rows,
                        int32_t *greedy, float *lead, int n_greedy) {
    const int nv = r->n_vocab;
    pkv_error err;
    pkv_session *s = session_of(m, tk, tv, 256);
    if (!s) return false;
    logit_rows lr = {rows, r->n_prompt, nv};
    bool ok = pkv_eval(s, r->tokens, r->n_prompt, keep_row, &lr, &err) == 0;
    for (int i = 0; ok && i < r->n_decode; i++) {
        ok = pkv_decode(s, r->tokens[r->n_prompt + i], &err) == 0;
        if (ok) memcpy(rows + (size_t)(r->n_prompt + i) * nv, pkv_logits(s), (size_t)nv * sizeof(float));
    }
    pkv_session_reset(s);
    ok = ok && pkv_prefill(s, r->tokens, r->n_prompt, NULL, NULL, &err) == 0;
    for (int i = 0; ok && i < n_greedy; i++) {
        greedy[i] = pkv_logits_argmax(pkv_logits(s), nv);
        lead[i] = lead_of(pkv_logits(s), nv);
        ok = pkv_decode(s, greedy[i], &err) == 0;
    }
    if (!ok) test_fail(__FILE__, __LINE__, "%s: %s", pkv_cache_type_name(tk), err.msg);
    pkv_session_free(s);
    return ok;
}

static bool measure(const char *name, pkv_cache_type tk, pkv_cache_type tv, type_effect *e) {
    memset(e, 0, sizeof *e);
    ref_data r = {0};
    char path[256];
    snprintf(path, sizeof path, "tests/fixtures/models/%s.gguf", name);
    pkv_error err;
    pkv_model *m = pkv_model_load(path, NULL, &err);
    if (!m || !load_ref_tokens(name, &r)) {
        test_fail(__FILE__, __LINE__, "%s: %s", name, m ? "cannot read its .ref" : err.msg);
        ref_free(&r);
        pkv_model_free(m);
        return false;
    }
    enum { N_GREEDY = 32 };
    const int n = r.n_prompt + r.n_decode, nv = r.n_vocab;
    float *base = malloc((size_t)n * nv * sizeof(float)), *got = malloc((size_t)n * nv * sizeof(float));
    int32_t g_base[N_GREEDY], g_got[N_GREEDY];
    float l_got[N_GREEDY];
    bool ok = run_fixture(m, &r, PKV_CACHE_F16, PKV_CACHE_F16, base, g_base, e->lead, N_GREEDY) &&
              run_fixture(m, &r, tk, tv, got, g_got, l_got, N_GREEDY);
    double sq = 0;
    for (int p = 0; ok && p < n; p++) {
        const float *a = base + (size_t)p * nv, *b = got + (size_t)p * nv;
        for (int i = 0; i < nv; i++) {
            const double d = fabs((double)a[i] - b[i]);
            e->max_abs = fmax(e->max_abs, d);
            sq += d * d;
        }
        if (pkv_logits_argmax(a, nv) != pkv_logits_argmax(b, nv)) e->flip_lead = fmax(e->flip_lead, lead_of(a, nv));
    }
    e->positions = n;
    e->rms = sqrt(sq / ((double)n * nv));
    e->n_greedy = N_GREEDY;
    while (ok && e->greedy_same < N_GREEDY && g_base[e->greedy_same] == g_got[e->greedy_same]) e->greedy_same++;
    free(base), free(got);
    ref_free(&r);
    pkv_model_free(m);
    return ok;
}

/* The fixtures whose head sizes are multiples of 32 (Gemma 3 and Qwen3: 32,
 * Llama-k: 64), with f32, f16, Q8_0 and K-quant weights. */
static const char *FIXTURES[] = {"tiny-gemma3-f32", "tiny-gemma3-q8_0", "tiny-qwen3-f32",
                                 "tiny-qwen3-f16",  "tiny-llama-k-q4_k", "tiny-llama-k-q6_k"};

/* Bounds of one cache type against the f16 cache: logits within max_abs
 * (rms within rms), the same top token wherever the f16 cache's leads by
 * at least gap, and the same greedy tokens up to the first step where it
 * leads by less than gap (a near-tie, which a change of the logits within
 * the bounds may flip). */
static void check_type(pkv_cache_type tk, pkv_cache_type tv, double max_abs, double rms, float gap) {
    for (size_t i = 0; i < sizeof FIXTURES / sizeof *FIXTURES; i++) {
        type_effect e;
        if (!measure(FIXTURES[i], tk, tv, &e)) continue;
        const char *k = pkv_cache_type_name(tk), *v = pkv_cache_type_name(tv);
        CHECK_MSG(e.max_abs <= max_abs && e.rms <= rms,
                  "%s, %s/%s cache: logits up to %.3g (rms %.3g) from f16's, over the bound %.3g (%.3g)", FIXTURES[i], k,
                  v, e.max_abs, e.rms, max_abs, rms);
        CHECK_MSG(e.flip_lead < gap, "%s, %s/%s cache: another top token where f16's led by %.3g (>= %.3g)", FIXTURES[i],
                  k, v, e.flip_lead, gap);
        const int tie = first_near_tie(&e, gap);
        CHECK_MSG(e.greedy_same >= tie,
                  "%s, %s/%s cache: greedy tokens differ at step %d (f16's lead %.3g), before the first near-tie (%d)",
                  FIXTURES[i], k, v, e.greedy_same, e.greedy_same < e.n_greedy ? e.lead[e.greedy_same] : 0.0f, tie);
        if (getenv("PKV_TEST_VERBOSE"))
            fprintf(stderr, "    %s %s/%s: max %.3g rms %.3g flip %.3g greedy %d tie %d\n", FIXTURES[i], k, v, e.max_abs,
                    e.rms, e.flip_lead, e.greedy_same, tie);
    }
}

/* Q8_0 rows (and Q8_0 keys with f16 values) against f16 rows. Measured on
 * these six fixtures (PKV_TEST_VERBOSE=1 prints the figures): logits within
 * 0.39 of the f16 cache's (rms <= 0.072), top tokens that differ only where
 * f16's led by <= 0.022, and greedy tokens equal for 32, 32, 26, 26, 32 and
 * 20 steps (Q8_0 values) and 32, 32, 32, 32, 13 and 26 (f16 values), each
 * divergence at a step where f16's top token led by less than 0.13 (a lead
 * well inside twice the logits' difference). Bounds: 0.5 (rms 0.1), and a
 * gap of 0.15 for the top token and the greedy tokens. */
TEST(cache_types_golden_q8_0_as_f16) {
    check_type(PKV_CACHE_Q8_0, PKV_CACHE_Q8_0, 0.5, 0.1, 0.15f);
    check_type(PKV_CACHE_Q8_0, PKV_CACHE_F16, 0.5, 0.1, 0.15f);
}

/* Q4_0 rows: 16 levels per block instead of 255, a quantisation step 16
 * times Q8_0's (amax/8 against amax/127), so the bounds are looser by about
 * that much less what the softmax averages out. Measured: logits within 2.46
 * of the f16 cache's (rms <= 0.44), top tokens that differ where f16's led
 * by up to 0.74. Bounds: 3.0 (rms 0.6), and a gap of 1.0 for the top token
 * and the greedy tokens. (On Qwen2.5-Coder-0.5B, Q4_0 keys do not give
 * usable text at all: docs/design.md "The cache layout".) */
TEST(cache_types_golden_q4_0) { check_type(PKV_CACHE_Q4_0, PKV_CACHE_Q4_0, 3.0, 0.6, 1.0f); }

/* ------------------------------------------------------------------ presses */

static void prompt_tokens(int32_t *t, int n, int n_vocab) {
    uint32_t x = 12345;
    for (int i = 0; i < n; i++) {
        x = x * 1664525u + 1013904223u;
        t[i] = 3 + (int32_t)((x >> 8) % (uint32_t)(n_vocab - 3));
    }
}

/* Prefill n tokens through the press, decode 3 greedy tokens; the session. */
static pkv_session *pressed(pkv_model *m, pkv_cache_type tk, pkv_cache_type tv, const pkv_press_cfg *cfg, int n,
                            pkv_prefill_stats *ps) {
    int32_t toks[256];
    prompt_tokens(toks, n, pkv_n_vocab(m));
    pkv_session *s = session_of(m, tk, tv, 512);
    pkv_error err;
    if (!s) return NULL;
    bool ok = pkv_prefill(s, toks, n, cfg, ps, &err) == 0;
    for (int i = 0; ok && i < 3; i++) ok = pkv_decode(s, pkv_logits_argmax(pkv_logits(s), pkv_n_vocab(m)), &err) == 0;
    if (!ok) {
        test_fail(__FILE__, __LINE__, "%s/%s: %s", pkv_cache_type_name(tk), pkv_cache_type_name(tv), err.msg);
        pkv_session_free(s);
        return NULL;
    }
    return s;
}

/* Every press of the registry (and SnapKV's two budget allocators) on Q8_0
 * rows, on the tiny Qwen3 (full attention) and Gemma 3 (sliding layers
 * too): each keeps as many rows per head of a full layer as on f16 rows
 * (the budget; in total where ProtoKV, KVzip and the allocators move it),
 * the cache holds Q8_0 bytes (about half of f16's), decoding continues at
 * the original positions with finite logits, and a budget of the whole
 * prompt is bit-identical to no press on the same rows. Each press runs with
 * f32 keys and Q4_0 values too (keys and values are read apart). */
TEST(cache_types_every_press_on_q8_0_rows) {
    const char *models[] = {"tests/fixtures/models/tiny-qwen3-f32.gguf", "tests/fixtures/models/tiny-gemma3-f32.gguf"};
    for (int mi = 0; mi < 2; mi++) {
        pkv_error err;
        pkv_model *m = pkv_model_load(models[mi], NULL, &err);
        REQUIRE_MSG(m, "%s", err.msg);
        const int nv = pkv_n_vocab(m);
        pkv_prefill_stats ps_full;
        pkv_session *full = pressed(m, PKV_CACHE_Q8_0, PKV_CACHE_Q8_0, NULL, 100, &ps_full);
        REQUIRE(full);
        const char *name, *summary;
        int n_tested = 0;
        for (int i = 1; pkv_press_list(i, &name, &summary); i++)
            /* KVzip refuses sliding-window layers (docs/design.md "Reconstruction passes") */
            for (int variant = 0; variant < (strcmp(name, "snapkv") ? 1 : 3) && !(mi == 1 && !strcmp(name, "kvzip"));
                 variant++) {
                const char *extra_key = variant == 1 ? "layer_budget" : variant == 2 ? "head_budget" : NULL;
                const char *extra_val = variant == 1 ? "pyramid" : "adaptive";
                const char *opts[] = {"budget", "24", "window", "8", extra_key, extra_val, NULL};
                pkv_press_cfg *cfg = test_press_cfg(name, opts);
                REQUIRE(cfg);
                pkv_prefill_stats ps, ps16;
                pkv_session *s = pressed(m, PKV_CACHE_Q8_0, PKV_CACHE_Q8_0, cfg, 100, &ps);
                pkv_session *s16 = pressed(m, PKV_CACHE_F16, PKV_CACHE_F16, cfg, 100, &ps16);
                if (!s || !s16) {
                    pkv_session_free(s), pkv_session_free(s16), pkv_press_cfg_free(cfg);
                    continue;
                }
                CHECK_MSG(ps.compressed && ps.cache_bytes < ps.cache_bytes_full, "%s %s did not compress", models[mi], name);
                /* Q8_0 rows of 32 elements take 34 bytes against f16's 64 (positions aside) */
                CHECK_MSG(ps.cache_bytes < ps16.cache_bytes * 0.6 && ps.cache_bytes_full < ps16.cache_bytes_full * 0.6,
                          "%s %s: %llu bytes on q8_0 rows, %llu on f16", models[mi], name,
                          (unsigned long long)ps.cache_bytes, (unsigned long long)ps16.cache_bytes);
                int64_t rows = 0, rows16 = 0;
                for (int l = 0; l < pkv_session_n_layers(s); l++) {
                    const int nh = pkv_session_n_heads(s, l);
                    CHECK_EQ_INT(nh, pkv_session_n_heads(s16, l));
                    for (int h = 0; h < nh && h < pkv_session_n_heads(s16, l); h++) {
                        const int r = pkv_session_head_rows(s, l, h);
                        rows += r, rows16 += pkv_session_head_rows(s16, l, h);
                        if (pkv_session_layer_is_full(s, l) && variant == 0 && strcmp(name, "protokv") &&
                            strcmp(name, "kvzip"))
                            CHECK_MSG(r == 24 + 3, "%s %s layer %d head %d keeps %d", models[mi], name, l, h, r);
                    }
                    int32_t pos[256];
                    const int n = pkv_session_positions(s, l, 0, pos, 256);
                    CHECK(n > 0 && pos[n - 1] == 102);
                }
                if (variant || !strcmp(name, "kvzip")) CHECK_EQ_INT(rows, rows16); /* budgets moved, not lost */
                bool finite = true;
                for (int k = 0; k < nv; k++) finite = finite && isfinite(pkv_logits(s)[k]);
                CHECK_MSG(finite, "%s %s: non-finite logits on q8_0 rows", models[mi], name);
                pkv_session_free(s);
                pkv_session_free(s16);
                pkv_session *mixed = pressed(m, PKV_CACHE_F32, PKV_CACHE_Q4_0, cfg, 100, &ps);
                CHECK_MSG(mixed && ps.compressed, "%s %s on f32 keys and q4_0 values", models[mi], name);
                pkv_session_free(mixed);
                pkv_press_cfg_free(cfg);
                n_tested++;
            }
        /* a budget of the whole prompt keeps every row: the logits of no press */
        for (int i = 1; pkv_press_list(i, &name, &summary); i++) {
            if (mi == 1 && !strcmp(name, "kvzip")) continue;
            const char *all[] = {"budget", "100", "window", "8", NULL};
            pkv_press_cfg *cfg = test_press_cfg(name, all);
            pkv_prefill_stats ps;
            pkv_session *s = cfg ? pressed(m, PKV_CACHE_Q8_0, PKV_CACHE_Q8_0, cfg, 100, &ps) : NULL;
            if (s)
                CHECK_MSG(!memcmp(pkv_logits(full), pkv_logits(s), (size_t)nv * sizeof(float)),
                          "%s %s with budget = L changed the logits on q8_0 rows", models[mi], name);
            pkv_session_free(s);
            pkv_press_cfg_free(cfg);
        }
        CHECK(n_tested >= 9);
        pkv_session_free(full);
        pkv_model_free(m);
    }
}

/* ------------------------------------------------------------------ sessions, bytes, estimates */

/* A quantised type on a model whose head size is not a multiple of 32 (the
 * tiny Llama: 16) is refused by pkv_session_new with one line naming the
 * layer, the head size and the type; an unknown type too. */
TEST(cache_types_session_refuses_head_size) {
    pkv_error err;
    pkv_model *m = pkv_model_load("tests/fixtures/models/tiny-llama-f32.gguf", NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    so.cache_type_k = PKV_CACHE_Q8_0;
    CHECK(pkv_session_new(m, &so, &err) == NULL);
    CHECK_MSG(err.code == PKV_ERR_UNSUPPORTED && strstr(err.msg, "layer 0: key head size 16") &&
                  strstr(err.msg, "q8_0") && !strchr(err.msg, '\n'),
              "%s", err.msg);
    so.cache_type_k = PKV_CACHE_F16;
    so.cache_type_v = PKV_CACHE_Q4_0;
    CHECK(pkv_session_new(m, &so, &err) == NULL);
    CHECK_MSG(strstr(err.msg, "value head size 16") && strstr(err.msg, "q4_0"), "%s", err.msg);
    so.cache_type_v = (pkv_cache_type)7;
    CHECK(pkv_session_new(m, &so, &err) == NULL && err.code == PKV_ERR_ARG);
    CHECK_EQ_INT(pkv_model_kv_bytes_per_token(m, PKV_CACHE_Q8_0, PKV_CACHE_Q8_0), 0);
    pkv_model_free(m);
}

/* The bytes a session holds, the model's bytes per token and the admission
 * estimate count Q8_0 and Q4_0 rows at their block sizes (tiny Qwen3: 2
 * layers, 2 KV heads of 32: a key or value row is 34 bytes in Q8_0, 18 in
 * Q4_0, 64 in f16), and so does the memory cap. */
TEST(cache_types_bytes_and_estimate) {
    pkv_error err;
    pkv_model *m = pkv_model_load("tests/fixtures/models/tiny-qwen3-f32.gguf", NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    const struct {
        pkv_cache_type k, v;
        uint64_t row; /* key + value bytes of one row of one head */
    } cases[] = {{PKV_CACHE_F16, PKV_CACHE_F16, 128}, {PKV_CACHE_Q8_0, PKV_CACHE_Q8_0, 68},
                 {PKV_CACHE_Q4_0, PKV_CACHE_Q4_0, 36}, {PKV_CACHE_Q8_0, PKV_CACHE_F32, 34 + 128}};
    int32_t toks[100];
    prompt_tokens(toks, 100, pkv_n_vocab(m));
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        CHECK_EQ_INT(pkv_model_kv_bytes_per_token(m, cases[c].k, cases[c].v), 2 * 2 * cases[c].row);
        CHECK_EQ_INT(pkv_model_kv_bytes_full(m, 100, cases[c].k, cases[c].v), 100 * 2 * 2 * cases[c].row);
        pkv_session *s = session_of(m, cases[c].k, cases[c].v, 256);
        REQUIRE(s);
        pkv_prefill_stats ps;
        REQUIRE_MSG(pkv_prefill(s, toks, 100, NULL, &ps, &err) == 0, "%s", err.msg);
        CHECK_EQ_INT(pkv_session_cache_bytes(s), 100 * 2 * 2 * (cases[c].row + 4));
        CHECK_EQ_INT(ps.cache_bytes_full, ps.cache_bytes);
        pkv_request req;
        pkv_request_init(&req);
        req.tokens = toks;
        req.n_tokens = 100;
        req.max_tokens = 10;
        pkv_request_prompt rp;
        REQUIRE(pkv_request_tokenize(m, &req, &rp, &err) == 0);
        pkv_session_opts so;
        pkv_session_opts_default(&so);
        so.cache_type_k = cases[c].k;
        so.cache_type_v = cases[c].v;
        pkv_cache_estimate est;
        REQUIRE(pkv_request_estimate(m, &req, &rp, &so, &est, &err) == 0);
        CHECK_EQ_INT(est.row_bytes, cases[c].row + 4);
        CHECK_EQ_INT(est.bytes_peak, 110 * 2 * 2 * (cases[c].row + 4));
        pkv_request_prompt_free(&rp);
        pkv_session_free(s);
    }
    /* the memory cap counts the cache's allocation at the rows' size: a cap
     * between the peaks of a Q4_0 and an f16 prefill of the same prompt
     * admits the first and refuses the second */
    uint64_t peak[2];
    for (int q = 0; q < 2; q++) {
        pkv_session *s = session_of(m, q ? PKV_CACHE_Q4_0 : PKV_CACHE_F16, q ? PKV_CACHE_Q4_0 : PKV_CACHE_F16, 256);
        REQUIRE(s && pkv_prefill(s, toks, 100, NULL, NULL, &err) == 0);
        peak[q] = pkv_session_peak_mem_bytes(s);
        pkv_session_free(s);
    }
    REQUIRE_MSG(peak[1] + 100 * 2 * 2 * (128 - 36) <= peak[0], "peaks %llu (q4_0) and %llu (f16)",
                (unsigned long long)peak[1], (unsigned long long)peak[0]);
    for (int q = 0; q < 2; q++) {
        pkv_session_opts so;
        pkv_session_opts_default(&so);
        so.n_threads = 2;
        so.n_batch = 13;
        so.n_ctx = 256;
        so.cache_type_k = so.cache_type_v = q ? PKV_CACHE_Q4_0 : PKV_CACHE_F16;
        so.mem_cap_bytes = (peak[0] + peak[1]) / 2;
        pkv_session *s = pkv_session_new(m, &so, &err);
        REQUIRE(s);
        int rc = pkv_prefill(s, toks, 100, NULL, NULL, &err);
        if (q) CHECK_MSG(rc == 0, "q4_0 rows over the cap: %s", err.msg);
        else CHECK_MSG(rc != 0 && err.code == PKV_ERR_LIMIT, "f16 rows fit a cap they exceed");
        pkv_session_free(s);
    }
    pkv_model_free(m);
}
