/*
 * Presses inside the engine, on the tiny fixture models: the compression
 * invariants of docs/evaluation.md §5.1 (budget >= L is bit-identical to the full
 * cache, kept counts are exactly the budget, the window and protected spans
 * survive, original positions are kept, results do not depend on threads).
 */
#include <stdlib.h>
#include <string.h>

#include "press_fixtures.h"
#include "promptkv.h"
#include "test.h"

static const char *LLAMA = "tests/fixtures/models/tiny-llama-f32.gguf";
static const char *GEMMA = "tests/fixtures/models/tiny-gemma3-f32.gguf";

static void prompt_tokens(int32_t *t, int n, int n_vocab, uint32_t seed) {
    test_lcg_tokens(t, n, n_vocab, seed * 2654435761u + 1);
}


static pkv_session *new_session(pkv_model *m, int threads) {
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    so.n_threads = threads;
    so.n_batch = 13;
    so.n_ctx = 512; /* past the tiny models' trained 128: positions only feed RoPE */
    pkv_error err;
    pkv_session *s = pkv_session_new(m, &so, &err);
    if (!s) test_fail(__FILE__, __LINE__, "%s", err.msg);
    return s;
}

/* Prefill n tokens with the press, then decode `steps` greedy tokens; the
 * final logits are copied into out. */
static bool run_press(pkv_model *m, const pkv_press_cfg *cfg, int n, int steps, int threads, float *out,
                      pkv_prefill_stats *ps_out, pkv_session **keep_session) {
    int32_t toks[512];
    prompt_tokens(toks, n, pkv_n_vocab(m), 11);
    pkv_session *s = new_session(m, threads);
    if (!s) return false;
    pkv_error err;
    pkv_prefill_stats ps;
    if (pkv_prefill(s, toks, n, cfg, &ps, &err)) {
        test_fail(__FILE__, __LINE__, "%s", err.msg);
        pkv_session_free(s);
        return false;
    }
    for (int i = 0; i < steps; i++) {
        const float *l = pkv_logits(s);
        int best = 0;
        for (int k = 1; k < pkv_n_vocab(m); k++)
            if (l[k] > l[best]) best = k;
        if (pkv_decode(s, best, &err)) {
            test_fail(__FILE__, __LINE__, "%s", err.msg);
            break;
        }
    }
    if (out) memcpy(out, pkv_logits(s), (size_t)pkv_n_vocab(m) * sizeof(float));
    if (ps_out) *ps_out = ps;
    if (keep_session) *keep_session = s;
    else pkv_session_free(s);
    return true;
}

/* Budget >= L keeps everything: logits bit-identical to no press, for every press. */
TEST(press_engine_budget_ge_prompt_is_identity) {
    pkv_error err;
    pkv_model *m = pkv_model_load(LLAMA, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    int nv = pkv_n_vocab(m);
    float *full = malloc((size_t)nv * sizeof(float)), *got = malloc((size_t)nv * sizeof(float));
    REQUIRE(run_press(m, NULL, 60, 5, 2, full, NULL, NULL));
    const char *presses[] = {"snapkv", "streamingllm", "h2o", "tova", "knorm", "random"};
    for (size_t i = 0; i < sizeof presses / sizeof *presses; i++) {
        const char *opts[] = {"budget", "60", "window", "8", NULL};
        pkv_press_cfg *cfg = test_press_cfg(presses[i], opts);
        REQUIRE(cfg);
        if (run_press(m, cfg, 60, 5, 2, got, NULL, NULL))
            CHECK_MSG(!memcmp(full, got, (size_t)nv * sizeof(float)), "%s with budget = L changed the logits", presses[i]);
        pkv_press_cfg_free(cfg);
    }
    free(full);
    free(got);
    pkv_model_free(m);
}

/* Kept rows per head are exactly the budget; the window survives; positions
 * ascend; decode continues at the original positions. */
TEST(press_engine_counts_and_window) {
    pkv_error err;
    pkv_model *m = pkv_model_load(LLAMA, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    const char *presses[] = {"snapkv", "streamingllm", "h2o", "tova", "knorm", "random"};
    for (size_t i = 0; i < sizeof presses / sizeof *presses; i++) {
        const char *opts[] = {"budget", "24", "window", "8", NULL};
        pkv_press_cfg *cfg = test_press_cfg(presses[i], opts);
        pkv_session *s = NULL;
        pkv_prefill_stats ps;
        REQUIRE(run_press(m, cfg, 100, 0, 2, NULL, &ps, &s));
        CHECK(ps.compressed);
        CHECK(ps.cache_bytes < ps.cache_bytes_full);
        CHECK_EQ_INT(pkv_session_n_pos(s), 100);
        for (int l = 0; l < pkv_session_n_layers(s); l++) {
            for (int h = 0; h < pkv_session_n_heads(s, l); h++) {
                CHECK_EQ_INT(pkv_session_head_rows(s, l, h), 24);
                int32_t pos[64];
                int n = pkv_session_positions(s, l, h, pos, 64);
                for (int k = 1; k < n; k++) CHECK(pos[k] > pos[k - 1]);
                if (!strcmp(presses[i], "snapkv"))
                    for (int k = 0; k < 8; k++) CHECK_MSG(pos[n - 8 + k] == 92 + k, "%s lost window row", presses[i]);
                if (!strcmp(presses[i], "streamingllm")) {
                    for (int k = 0; k < 4; k++) CHECK(pos[k] == k);
                    for (int k = 4; k < 24; k++) CHECK(pos[k] == 80 + k - 4 + 0);
                }
            }
        }
        /* decode appends one row at logical position 100 */
        CHECK(pkv_decode(s, 5, &err) == 0);
        CHECK_EQ_INT(pkv_session_head_rows(s, 0, 0), 25);
        int32_t pos[64];
        int n = pkv_session_positions(s, 0, 0, pos, 64);
        CHECK_EQ_INT(pos[n - 1], 100);
        pkv_session_free(s);
        pkv_press_cfg_free(cfg);
    }
    pkv_model_free(m);
}

TEST(press_engine_protected_spans) {
    pkv_error err;
    pkv_model *m = pkv_model_load(LLAMA, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    const char *opts[] = {"budget", "30", "window", "4", "protect", "40:50", "protect", "10:13", NULL};
    const char *presses[] = {"snapkv", "knorm", "random", "streamingllm"};
    for (size_t i = 0; i < 4; i++) {
        pkv_press_cfg *cfg = test_press_cfg(presses[i], opts);
        pkv_session *s = NULL;
        REQUIRE(run_press(m, cfg, 100, 0, 2, NULL, NULL, &s));
        for (int l = 0; l < pkv_session_n_layers(s); l++)
            for (int h = 0; h < pkv_session_n_heads(s, l); h++) {
                int32_t pos[64];
                int n = pkv_session_positions(s, l, h, pos, 64);
                CHECK_EQ_INT(n, 30);
                bool seen[100] = {0};
                for (int k = 0; k < n; k++) seen[pos[k]] = true;
                for (int p = 40; p < 50; p++) CHECK_MSG(seen[p], "%s evicted protected %d", presses[i], p);
                for (int p = 10; p < 13; p++) CHECK_MSG(seen[p], "%s evicted protected %d", presses[i], p);
            }
        pkv_session_free(s);
        pkv_press_cfg_free(cfg);
    }
    pkv_model_free(m);
}

/* The same kept positions with 1, 2 and 3 threads. */
TEST(press_engine_thread_invariant) {
    pkv_error err;
    pkv_model *m = pkv_model_load(LLAMA, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    const char *presses[] = {"snapkv", "h2o", "tova"};
    for (size_t i = 0; i < 3; i++) {
        const char *opts[] = {"budget", "20", "window", "6", NULL};
        pkv_press_cfg *cfg = test_press_cfg(presses[i], opts);
        int32_t ref[2][8][64];
        for (int t = 1; t <= 3; t++) {
            pkv_session *s = NULL;
            REQUIRE(run_press(m, cfg, 90, 0, t, NULL, NULL, &s));
            for (int l = 0; l < 2; l++)
                for (int h = 0; h < pkv_session_n_heads(s, l); h++) {
                    int32_t pos[64];
                    int n = pkv_session_positions(s, l, h, pos, 64);
                    if (t == 1) memcpy(ref[l][h], pos, (size_t)n * sizeof *pos);
                    else CHECK_MSG(!memcmp(ref[l][h], pos, (size_t)n * sizeof *pos), "%s differs at %d threads", presses[i], t);
                }
            pkv_session_free(s);
        }
        pkv_press_cfg_free(cfg);
    }
    pkv_model_free(m);
}

/* Sliding-window layers are not pressed (D.6); full layers are. The full
 * cache's size is what a run without the press holds. */
TEST(press_engine_gemma_sliding_layers_untouched) {
    pkv_error err;
    pkv_model *m = pkv_model_load(GEMMA, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    const char *opts[] = {"budget", "20", "window", "4", NULL};
    pkv_press_cfg *cfg = test_press_cfg("snapkv", opts);
    pkv_session *s = NULL;
    pkv_prefill_stats ps, ps_none;
    REQUIRE(run_press(m, NULL, 80, 0, 2, NULL, &ps_none, NULL));
    CHECK_EQ_INT(ps_none.cache_bytes_full, ps_none.cache_bytes);
    REQUIRE(run_press(m, cfg, 80, 0, 2, NULL, &ps, &s));
    CHECK_EQ_INT(ps.cache_bytes_full, ps_none.cache_bytes);
    CHECK(ps.cache_bytes < ps.cache_bytes_full);
    for (int l = 0; l < pkv_session_n_layers(s); l++) {
        int rows = pkv_session_head_rows(s, l, 0);
        if (pkv_session_layer_is_full(s, l)) CHECK_EQ_INT(rows, 20);
        else {
            /* window 16: rows with positions > 80 - 16 remain (compaction is lazy) */
            int32_t pos[128];
            int n = pkv_session_positions(s, l, 0, pos, 128);
            CHECK(n >= 15 && n < 80);
            CHECK_EQ_INT(pos[n - 1], 79);
        }
    }
    pkv_session_free(s);
    pkv_press_cfg_free(cfg);
    pkv_model_free(m);
}

/* granularity=query_head stores one head per query head, each with the budget. */
TEST(press_engine_query_head_granularity) {
    pkv_error err;
    pkv_model *m = pkv_model_load(LLAMA, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    const char *opts[] = {"budget", "24", "window", "8", "granularity", "query_head", NULL};
    pkv_press_cfg *cfg = test_press_cfg("snapkv", opts);
    pkv_session *s = NULL;
    REQUIRE(run_press(m, cfg, 100, 3, 2, NULL, NULL, &s));
    pkv_model_info mi;
    pkv_model_get_info(m, &mi);
    for (int l = 0; l < pkv_session_n_layers(s); l++) {
        CHECK_EQ_INT(pkv_session_n_heads(s, l), mi.n_head);
        for (int h = 0; h < mi.n_head; h++) CHECK_EQ_INT(pkv_session_head_rows(s, l, h), 27);
    }
    pkv_session_reset(s);
    CHECK_EQ_INT(pkv_session_n_heads(s, 0), mi.n_head_kv);
    pkv_session_free(s);
    pkv_press_cfg_free(cfg);
    pkv_model_free(m);
}

/* Later turns: appended uncompressed by default, compressed again in recompress mode. */
TEST(press_engine_turns_and_recompress) {
    pkv_error err;
    pkv_model *m = pkv_model_load(LLAMA, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    int32_t toks[160];
    prompt_tokens(toks, 160, pkv_n_vocab(m), 5);
    for (int mode = 0; mode < 2; mode++) {
        const char *opts[] = {"budget", "24", "window", "8", "mode", mode ? "recompress" : "query_aware", NULL};
        pkv_press_cfg *cfg = test_press_cfg("snapkv", opts);
        pkv_session *s = new_session(m, 2);
        CHECK(pkv_prefill(s, toks, 100, cfg, NULL, &err) == 0);
        CHECK_EQ_INT(pkv_session_head_rows(s, 0, 0), 24);
        pkv_prefill_stats ps;
        CHECK(pkv_prefill(s, toks + 100, 40, cfg, &ps, &err) == 0);
        CHECK_EQ_INT(pkv_session_n_pos(s), 140);
        CHECK_EQ_INT(pkv_session_head_rows(s, 0, 0), mode ? 24 : 64);
        CHECK(ps.compressed == (mode == 1));
        pkv_session_free(s);
        pkv_press_cfg_free(cfg);
    }
    pkv_model_free(m);
}

/* ratio r keeps floor(L * (1 - r)) rows (kvpress's rule). */
TEST(press_engine_ratio) {
    pkv_error err;
    pkv_model *m = pkv_model_load(LLAMA, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    const char *opts[] = {"ratio", "0.75", "window", "8", NULL};
    pkv_press_cfg *cfg = test_press_cfg("snapkv", opts);
    pkv_session *s = NULL;
    REQUIRE(run_press(m, cfg, 99, 0, 2, NULL, NULL, &s));
    CHECK_EQ_INT(pkv_session_head_rows(s, 1, 1), 24); /* floor(99 * 0.25) */
    pkv_session_free(s);
    /* a ratio leaving no more than the window is a clear error */
    const char *tight[] = {"ratio", "0.95", "window", "8", NULL};
    pkv_press_cfg *cfg2 = test_press_cfg("snapkv", tight);
    int32_t toks[99];
    prompt_tokens(toks, 99, pkv_n_vocab(m), 3);
    s = new_session(m, 1);
    CHECK(pkv_prefill(s, toks, 99, cfg2, NULL, &err) == -1 && strstr(err.msg, "observation window"));
    pkv_session_free(s);
    pkv_press_cfg_free(cfg);
    pkv_press_cfg_free(cfg2);
    pkv_model_free(m);
}

/* One prefill, many presses: compressing a copy gives exactly what the press
 * gives inside the prefill (kept positions and logits after decoding), for
 * every press, in both the chunked and the single-call prefill. */
TEST(press_engine_copy_equals_direct) {
    pkv_error err;
    pkv_model *m = pkv_model_load(LLAMA, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    int nv = pkv_n_vocab(m);
    int32_t toks[100];
    prompt_tokens(toks, 100, nv, 11); /* the prompt run_press uses */
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    so.n_threads = 2;
    so.n_batch = 13;
    so.n_ctx = 512;
    so.keep_press_window = 16;
    so.keep_attn_sums = true;
    pkv_session *src = pkv_session_new(m, &so, &err), *dst = pkv_session_new(m, &so, &err);
    REQUIRE(src && dst);
    CHECK(pkv_prefill(src, toks, 100, NULL, NULL, &err) == 0);
    const char *presses[] = {"snapkv", "streamingllm", "h2o", "tova", "knorm", "random"};
    float *a = malloc((size_t)nv * sizeof(float)), *b = malloc((size_t)nv * sizeof(float));
    for (size_t i = 0; i < sizeof presses / sizeof *presses; i++) {
        for (int window = 4; window <= 16; window += 12) {
            char wbuf[8];
            snprintf(wbuf, sizeof wbuf, "%d", window);
            const char *opts[] = {"budget", "30", "window", wbuf, NULL};
            pkv_press_cfg *cfg = test_press_cfg(presses[i], opts);
            pkv_session *direct = NULL;
            REQUIRE(run_press(m, cfg, 100, 3, 2, a, NULL, &direct));
            pkv_prefill_stats ps;
            CHECK_MSG(pkv_session_copy(dst, src, cfg, &ps, &err) == 0, "%s", err.msg);
            CHECK(ps.compressed && ps.cache_bytes < ps.cache_bytes_full);
            for (int l = 0; l < pkv_session_n_layers(dst); l++)
                for (int h = 0; h < pkv_session_n_heads(dst, l); h++) {
                    int32_t p1[128], p2[128];
                    int n1 = pkv_session_positions(direct, l, h, p1, 128), n2 = pkv_session_positions(dst, l, h, p2, 128);
                    /* direct has decoded 3 tokens already */
                    CHECK_MSG(n1 == n2 + 3 && !memcmp(p1, p2, (size_t)n2 * sizeof *p1), "%s window %d: layer %d head %d differs",
                              presses[i], window, l, h);
                }
            /* decode the same greedy tokens on the copy: identical logits */
            for (int step = 0; step < 3; step++) {
                const float *l = pkv_logits(dst);
                int best = 0;
                for (int k = 1; k < nv; k++)
                    if (l[k] > l[best]) best = k;
                CHECK(pkv_decode(dst, best, &err) == 0);
            }
            memcpy(b, pkv_logits(dst), (size_t)nv * sizeof(float));
            CHECK_MSG(!memcmp(a, b, (size_t)nv * sizeof(float)), "%s window %d: logits differ from the direct press", presses[i],
                      window);
            pkv_session_free(direct);
            pkv_press_cfg_free(cfg);
        }
    }
    /* a copy without a press is the full cache; a source that pressed cannot be re-pressed */
    CHECK(pkv_session_copy(dst, src, NULL, NULL, &err) == 0);
    CHECK_EQ_INT(pkv_session_head_rows(dst, 0, 0), 100);
    const char *o[] = {"budget", "30", "window", "8", NULL};
    pkv_press_cfg *cfg = test_press_cfg("snapkv", o);
    CHECK(pkv_decode(src, 5, &err) == 0);
    CHECK(pkv_session_copy(dst, src, cfg, NULL, &err) == -1 && strstr(err.msg, "keep_press_window"));
    pkv_press_cfg_free(cfg);
    free(a);
    free(b);
    pkv_session_free(src);
    pkv_session_free(dst);
    pkv_model_free(m);
}

/* The memory cap: the full cache of a long prompt does not fit, the compressed
 * one does, because only one layer's uncompressed K/V is alive at a time.
 * (f32 cache: presses read its rows in place, without a scratch copy.) */
TEST(press_engine_memory_cap) {
    pkv_error err;
    pkv_model *m = pkv_model_load(LLAMA, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    int32_t toks[400];
    prompt_tokens(toks, 400, pkv_n_vocab(m), 4);
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    so.n_ctx = 512;
    so.n_batch = 64;
    so.cache_type_k = so.cache_type_v = PKV_CACHE_F32;
    const char *opts[] = {"budget", "24", "window", "8", NULL};
    pkv_press_cfg *cfg = test_press_cfg("snapkv", opts);
    pkv_session *s = pkv_session_new(m, &so, &err);
    REQUIRE(s);
    CHECK(pkv_prefill(s, toks, 400, NULL, NULL, &err) == 0);
    uint64_t peak_full = pkv_session_peak_mem_bytes(s), after_full = pkv_session_cache_bytes(s);
    pkv_session_free(s);
    s = pkv_session_new(m, &so, &err);
    CHECK(pkv_prefill(s, toks, 400, cfg, NULL, &err) == 0);
    uint64_t peak_snap = pkv_session_peak_mem_bytes(s), after_snap = pkv_session_cache_bytes(s);
    pkv_session_free(s);
    CHECK_MSG(peak_snap < peak_full, "peak with snapkv %llu >= without %llu", (unsigned long long)peak_snap,
              (unsigned long long)peak_full);
    CHECK(after_snap < after_full / 4);
    /* a cap between the two peaks: the full cache fails with a clear error, the compressed one fits */
    so.mem_cap_bytes = (peak_full + peak_snap) / 2;
    s = pkv_session_new(m, &so, &err);
    CHECK(pkv_prefill(s, toks, 400, NULL, NULL, &err) == -1 && err.code == PKV_ERR_LIMIT && strstr(err.msg, "memory cap"));
    pkv_session_reset(s);
    CHECK_MSG(pkv_prefill(s, toks, 400, cfg, NULL, &err) == 0, "%s", err.msg);
    CHECK(pkv_decode(s, 7, &err) == 0);
    pkv_press_cfg_free(cfg);
    pkv_session_free(s);
    pkv_model_free(m);
}

/* An interrupted prefill leaves the session unusable until it is reset (its
 * layers are at different lengths), and says so. */
TEST(press_engine_interrupt_then_reset) {
    pkv_error err;
    pkv_model *m = pkv_model_load(LLAMA, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    pkv_session *s = new_session(m, 1);
    int32_t toks[50];
    prompt_tokens(toks, 50, pkv_n_vocab(m), 2);
    pkv_session_interrupt(s);
    CHECK(pkv_prefill(s, toks, 50, NULL, NULL, &err) == -1 && err.code == PKV_ERR_INTERRUPTED);
    CHECK(pkv_decode(s, 5, &err) == -1 && strstr(err.msg, "reset it first"));
    pkv_session_reset(s);
    CHECK(pkv_prefill(s, toks, 50, NULL, NULL, &err) == 0);
    CHECK(pkv_decode(s, 5, &err) == 0);
    pkv_session_free(s);
    pkv_model_free(m);
}

/* After a press, the next tokens (a query-agnostic question, a new turn) go
 * through a multi-token prefill over the ragged, compressed cache. That must
 * be the same computation as feeding them one decode step at a time over the
 * same kept rows (docs/evaluation.md §0.1): only float summation order differs. */
TEST(press_engine_prefill_after_press_equals_decode_steps) {
    const char *models[] = {LLAMA, GEMMA};
    for (int mi = 0; mi < 2; mi++) {
        pkv_error err;
        pkv_model *m = pkv_model_load(models[mi], NULL, &err);
        REQUIRE_MSG(m, "%s", err.msg);
        const int n_prompt = 150, n_more = 40, nv = pkv_n_vocab(m);
        int32_t toks[190];
        prompt_tokens(toks, n_prompt + n_more, nv, 23);
        const char *opts[] = {"budget", "24", "window", "8", NULL};
        pkv_press_cfg *cfg = test_press_cfg("snapkv", opts);
        pkv_session *a = new_session(m, 2), *b = new_session(m, 2);
        REQUIRE(a && b);
        CHECK(pkv_prefill(a, toks, n_prompt, cfg, NULL, &err) == 0);
        CHECK(pkv_prefill(b, toks, n_prompt, cfg, NULL, &err) == 0);
        CHECK(pkv_prefill(a, toks + n_prompt, n_more, cfg, NULL, &err) == 0);
        for (int i = 0; i < n_more; i++) CHECK(pkv_decode(b, toks[n_prompt + i], &err) == 0);
        CHECK_EQ_INT(pkv_session_n_pos(a), n_prompt + n_more);
        CHECK_EQ_INT(pkv_session_n_pos(b), n_prompt + n_more);
        const float *la = pkv_logits(a), *lb = pkv_logits(b);
        float worst = 0;
        for (int k = 0; k < nv; k++) {
            float d = la[k] > lb[k] ? la[k] - lb[k] : lb[k] - la[k];
            if (d > worst) worst = d;
        }
        CHECK_MSG(worst <= 1e-4f, "%s: max |logit difference| %g between prefill and decode steps", models[mi],
                  (double)worst);
        pkv_session_free(a);
        pkv_session_free(b);
        pkv_press_cfg_free(cfg);
        pkv_model_free(m);
    }
}

/* Every press of the registry, and the two budget allocators over SnapKV, on
 * the Qwen3 and LongRoPE Phi-3 fixtures (full attention everywhere): each
 * compresses every head of every layer to the budget (ProtoKV, which keeps
 * whole clusters, to at most the budget and at least its window), decoding
 * continues at the original positions with finite logits, and a budget of the
 * whole prompt is bit-identical to no press. */
TEST(press_engine_every_press_on_qwen3_and_phi3) {
    const char *models[] = {"tests/fixtures/models/tiny-qwen3-f32.gguf", "tests/fixtures/models/tiny-phi3-su-f32.gguf"};
    for (int mi = 0; mi < 2; mi++) {
        pkv_error err;
        pkv_model *m = pkv_model_load(models[mi], NULL, &err);
        REQUIRE_MSG(m, "%s", err.msg);
        int nv = pkv_n_vocab(m);
        float *full = malloc((size_t)nv * sizeof(float)), *got = malloc((size_t)nv * sizeof(float));
        REQUIRE(run_press(m, NULL, 100, 3, 2, full, NULL, NULL));
        const char *name, *summary;
        int n_tested = 0;
        for (int i = 1; pkv_press_list(i, &name, &summary); i++) {
            for (int variant = 0; variant < (strcmp(name, "snapkv") ? 1 : 3); variant++) {
                const char *extra_key = variant == 1 ? "layer_budget" : variant == 2 ? "head_budget" : NULL;
                const char *extra_val = variant == 1 ? "pyramid" : "adaptive";
                const char *opts[] = {"budget", "24", "window", "8", extra_key, extra_val, NULL};
                pkv_press_cfg *cfg = test_press_cfg(name, opts);
                REQUIRE(cfg);
                pkv_session *s = NULL;
                pkv_prefill_stats ps;
                REQUIRE(run_press(m, cfg, 100, 0, 2, NULL, &ps, &s));
                CHECK_MSG(ps.compressed && ps.cache_bytes < ps.cache_bytes_full, "%s %s did not compress", models[mi],
                          name);
                /* KVzip shares the budget across layers and heads (docs/presses.md E.3): the total is exact */
                bool shared = !strcmp(name, "kvzip");
                int64_t total = 0, want = 0;
                for (int l = 0; l < pkv_session_n_layers(s); l++) {
                    CHECK(pkv_session_layer_is_full(s, l));
                    for (int h = 0; h < pkv_session_n_heads(s, l); h++) {
                        int rows = pkv_session_head_rows(s, l, h);
                        total += rows;
                        want += 24;
                        /* PyramidKV moves budget between layers; AdaKV between heads */
                        if (variant == 0 && strcmp(name, "protokv") && !shared)
                            CHECK_MSG(rows == 24, "%s %s layer %d head %d keeps %d", models[mi], name, l, h, rows);
                        else
                            CHECK_MSG(rows >= 8 && rows <= 100, "%s %s (%s) layer %d head %d keeps %d", models[mi],
                                      name, extra_key ? extra_key : "", l, h, rows);
                    }
                }
                if (shared) CHECK_MSG(total == want, "%s kvzip keeps %lld rows, not %lld", models[mi], (long long)total,
                                      (long long)want);
                for (int step = 0; step < 3; step++) {
                    const float *l = pkv_logits(s);
                    int best = 0;
                    for (int k = 1; k < nv; k++)
                        if (l[k] > l[best]) best = k;
                    CHECK(pkv_decode(s, best, &err) == 0);
                }
                CHECK_EQ_INT(pkv_session_n_pos(s), 103);
                int32_t pos[128];
                int n = pkv_session_positions(s, 0, 0, pos, 128);
                CHECK(n > 0 && pos[n - 1] == 102);
                const float *l = pkv_logits(s);
                bool finite = true;
                for (int k = 0; k < nv; k++) finite = finite && isfinite(l[k]);
                CHECK_MSG(finite, "%s %s: non-finite logits after the press", models[mi], name);
                pkv_session_free(s);
                pkv_press_cfg_free(cfg);
                n_tested++;
            }
            const char *all[] = {"budget", "100", "window", "8", NULL};
            pkv_press_cfg *cfg = test_press_cfg(name, all);
            REQUIRE(cfg);
            if (run_press(m, cfg, 100, 3, 2, got, NULL, NULL))
                CHECK_MSG(!memcmp(full, got, (size_t)nv * sizeof(float)), "%s %s with budget = L changed the logits",
                          models[mi], name);
            pkv_press_cfg_free(cfg);
        }
        CHECK(n_tested >= 9); /* 7 presses, 2 allocator variants */
        free(full);
        free(got);
        pkv_model_free(m);
    }
}

/* Phi-3 with a stated window shorter than its context (tiny-phi3: 16 of 128)
 * has only sliding layers, which no press touches (docs/presses.md D.6): a
 * press leaves the logits bit-identical and reports nothing compressed, and
 * each layer holds no more than what its window still needs. */
TEST(press_engine_phi3_sliding_layers_untouched) {
    pkv_error err;
    pkv_model *m = pkv_model_load("tests/fixtures/models/tiny-phi3-f32.gguf", NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    int nv = pkv_n_vocab(m);
    float *full = malloc((size_t)nv * sizeof(float)), *got = malloc((size_t)nv * sizeof(float));
    REQUIRE(run_press(m, NULL, 80, 3, 2, full, NULL, NULL));
    const char *opts[] = {"budget", "8", "window", "4", NULL};
    pkv_press_cfg *cfg = test_press_cfg("snapkv", opts);
    pkv_session *s = NULL;
    pkv_prefill_stats ps;
    REQUIRE(run_press(m, cfg, 80, 3, 2, got, &ps, &s));
    CHECK(!ps.compressed);
    CHECK_MSG(!memcmp(full, got, (size_t)nv * sizeof(float)), "a press changed a sliding-only model's logits");
    for (int l = 0; l < pkv_session_n_layers(s); l++) {
        CHECK(!pkv_session_layer_is_full(s, l));
        int32_t pos[128];
        int n = pkv_session_positions(s, l, 0, pos, 128);
        CHECK_MSG(n >= 16 && n < 83 && pos[n - 1] == 82, "layer %d holds %d rows", l, n);
    }
    pkv_session_free(s);
    pkv_press_cfg_free(cfg);
    free(full);
    free(got);
    pkv_model_free(m);
}
