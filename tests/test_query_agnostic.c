/*
 * The presses that need no question (docs/presses.md Part E) inside the
 * engine, beyond their kvpress kept sets (test_press_ref.c): pressing a copy
 * equals pressing in the prefill, KVzip's reconstruction passes leave the
 * session as it was, its budget is shared across layers (or each layer's
 * heads), rows before the context score nothing, what it refuses, and the
 * request estimate covering its peak.
 */
#include <stdlib.h>
#include <string.h>

#include "press_fixtures.h"
#include "promptkv.h"
#include "test.h"

#define TINY_LLAMA FIXTURE("models/tiny-llama-f32.gguf")
#define TINY_QWEN FIXTURE("models/tiny-qwen2-f32.gguf")
#define TINY_GEMMA FIXTURE("models/tiny-gemma3-f32.gguf")

static void prompt_tokens(int32_t *t, int n, int n_vocab, uint32_t seed) {
    test_lcg_tokens(t, n, n_vocab, seed * 2654435761u + 1);
}

static pkv_session *session(pkv_model *m, bool keep) {
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    so.n_threads = 2;
    so.n_batch = 17;
    so.n_ctx = 512;
    so.keep_press_window = keep ? 32 : 0;
    so.keep_query_stats = keep;
    pkv_error err;
    pkv_session *s = pkv_session_new(m, &so, &err);
    if (!s) test_fail(__FILE__, __LINE__, "%s", err.msg);
    return s;
}

static bool same_rows(const pkv_session *a, const pkv_session *b) {
    for (int l = 0; l < pkv_session_n_layers(a); l++) {
        if (pkv_session_n_heads(a, l) != pkv_session_n_heads(b, l)) return false;
        for (int h = 0; h < pkv_session_n_heads(a, l); h++) {
            int32_t p1[512], p2[512];
            int n1 = pkv_session_positions(a, l, h, p1, 512), n2 = pkv_session_positions(b, l, h, p2, 512);
            if (n1 != n2 || memcmp(p1, p2, (size_t)n1 * sizeof *p1)) return false;
        }
    }
    return true;
}

static int64_t rows_of_layer(const pkv_session *s, int l) {
    int64_t n = 0;
    for (int h = 0; h < pkv_session_n_heads(s, l); h++) n += pkv_session_head_rows(s, l, h);
    return n;
}

/* A request of n raw tokens under cfg, tokenized. */
static void token_request(pkv_model *m, const int32_t *toks, int n, const pkv_press_cfg *cfg, pkv_request *req,
                          pkv_request_prompt *rp) {
    pkv_error err;
    pkv_request_init(req);
    req->tokens = toks;
    req->n_tokens = n;
    req->press = cfg;
    REQUIRE_MSG(pkv_request_tokenize(m, req, rp, &err) == 0, "%s", err.msg);
}

/* Token prompts through the request API: the eval's path (one prefill, a
 * pressed copy per config) keeps what the live prefill keeps, and decodes
 * the same logits, for every query-agnostic press. */
TEST(qa_copy_equals_direct) {
    pkv_error err;
    pkv_model *m = pkv_model_load(TINY_QWEN, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    int nv = pkv_n_vocab(m);
    int32_t toks[90];
    prompt_tokens(toks, 90, nv, 5);
    const char *presses[] = {"keydiff", "expected_attention", "kvzip"};
    const char *opts[] = {"ratio", "0.6", "chunk_size", "32", NULL};
    pkv_session *src = session(m, true), *live = session(m, false), *copy = session(m, false);
    REQUIRE(src && live && copy);
    for (size_t i = 0; i < sizeof presses / sizeof *presses; i++) {
        const char *o[] = {opts[0], opts[1], i == 2 ? opts[2] : NULL, opts[3], NULL};
        pkv_press_cfg *cfg = test_press_cfg(presses[i], o);
        REQUIRE(cfg);
        pkv_request req;
        pkv_request_prompt rp;
        token_request(m, toks, 90, cfg, &req, &rp);
        pkv_request unpressed = req;
        unpressed.press = NULL;
        pkv_request_stats st;
        pkv_session_reset(src);
        pkv_session_reset(live);
        REQUIRE_MSG(pkv_request_prefill_compressed(src, &unpressed, &rp, NULL, &st, &err) == 0, "%s", err.msg);
        REQUIRE_MSG(pkv_request_prefill_compressed(live, &req, &rp, NULL, &st, &err) == 0, "%s: %s", presses[i], err.msg);
        CHECK(st.press.compressed && st.press.cache_bytes < st.press.cache_bytes_full);
        REQUIRE_MSG(pkv_request_prefill_compressed(copy, &req, &rp, src, &st, &err) == 0, "%s: %s", presses[i], err.msg);
        CHECK_MSG(same_rows(live, copy), "%s: the copy keeps other rows than the live prefill", presses[i]);
        /* the prefill's own logits are the full cache's: the press changes what decode reads */
        CHECK_MSG(!memcmp(pkv_logits(live), pkv_logits(src), (size_t)nv * sizeof(float)), "%s: prefill logits changed",
                  presses[i]);
        CHECK_EQ_INT(pkv_session_n_pos(live), 90);
        for (int step = 0; step < 3; step++) {
            REQUIRE(pkv_decode(live, 7 + step, &err) == 0 && pkv_decode(copy, 7 + step, &err) == 0);
            CHECK_MSG(!memcmp(pkv_logits(live), pkv_logits(copy), (size_t)nv * sizeof(float)),
                      "%s: decode differs on the copy", presses[i]);
        }
        pkv_session_reset(copy);
        pkv_request_prompt_free(&rp);
        pkv_press_cfg_free(cfg);
    }
    /* the public copy has no tokens to feed again; a source without statistics cannot serve expected_attention */
    const char *kz[] = {"ratio", "0.5", NULL};
    pkv_press_cfg *cfg = test_press_cfg("kvzip", kz);
    CHECK(pkv_session_copy(copy, src, cfg, NULL, &err) == -1 && strstr(err.msg, "pkv_request_prefill_compressed"));
    pkv_press_cfg_free(cfg);
    cfg = test_press_cfg("expected_attention", kz);
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    so.keep_press_window = 32;
    pkv_session *plain = pkv_session_new(m, &so, &err);
    REQUIRE(plain);
    REQUIRE(pkv_prefill(plain, toks, 90, NULL, NULL, &err) == 0);
    CHECK(pkv_session_copy(copy, plain, cfg, NULL, &err) == -1 && strstr(err.msg, "keep_query_stats"));
    pkv_press_cfg_free(cfg);
    pkv_session_free(plain);
    pkv_session_free(src);
    pkv_session_free(live);
    pkv_session_free(copy);
    pkv_model_free(m);
}

/* One source pressed by KVzip at several budgets (the eval's ratios): the
 * copies reuse the source's passes and keep what a live prefill keeps at
 * each; a new prompt in the source, or other pass options, run new passes. */
TEST(qa_kvzip_memo_across_budgets) {
    pkv_error err;
    pkv_model *m = pkv_model_load(TINY_QWEN, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    pkv_session *src = session(m, true), *live = session(m, false), *copy = session(m, false);
    REQUIRE(src && live && copy);
    const char *ratio[] = {"0.25", "0.5", "0.75", "0.5", "0.5", "0.5"};
    const char *chunk[] = {"32", "32", "32", "64", "32", "32"};
    const char *sinks[] = {"4", "4", "4", "4", "2", "2"};
    int32_t toks[90];
    for (int i = 0; i < 6; i++) {
        /* the last step changes the source's prompt under an unchanged press */
        if (i == 0 || i == 5) prompt_tokens(toks, 90, pkv_n_vocab(m), i == 0 ? 5 : 6);
        const char *o[] = {"ratio", ratio[i], "chunk_size", chunk[i], "n_sink", sinks[i], NULL};
        pkv_press_cfg *cfg = test_press_cfg("kvzip", o);
        REQUIRE(cfg);
        pkv_request req;
        pkv_request_prompt rp;
        token_request(m, toks, 90, cfg, &req, &rp);
        pkv_request unpressed = req;
        unpressed.press = NULL;
        pkv_request_stats st;
        if (i == 0 || i == 5) {
            pkv_session_reset(src);
            REQUIRE_MSG(pkv_request_prefill_compressed(src, &unpressed, &rp, NULL, &st, &err) == 0, "%s", err.msg);
        }
        pkv_session_reset(live);
        REQUIRE_MSG(pkv_request_prefill_compressed(live, &req, &rp, NULL, &st, &err) == 0, "%s", err.msg);
        REQUIRE_MSG(pkv_request_prefill_compressed(copy, &req, &rp, src, &st, &err) == 0, "%s", err.msg);
        CHECK_MSG(same_rows(live, copy), "step %d (ratio %s chunk %s n_sink %s): the copy keeps other rows", i,
                  ratio[i], chunk[i], sinks[i]);
        pkv_session_reset(copy);
        pkv_request_prompt_free(&rp);
        pkv_press_cfg_free(cfg);
    }
    pkv_session_free(src);
    pkv_session_free(live);
    pkv_session_free(copy);
    pkv_model_free(m);
}

/* KVzip's budget: scope=global keeps the per-head budgets summed over all
 * layers and heads, shared unevenly; scope=layer keeps each layer's heads'
 * sum; the sinks stay in every head. The passes leave no row behind. */
TEST(qa_kvzip_budget_scopes) {
    pkv_error err;
    pkv_model *m = pkv_model_load(TINY_LLAMA, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    int32_t toks[120];
    prompt_tokens(toks, 120, pkv_n_vocab(m), 9);
    for (int scope = 0; scope < 2; scope++) {
        const char *o[] = {"budget", "40", "chunk_size", "50", "scope", scope ? "layer" : "global", NULL};
        pkv_press_cfg *cfg = test_press_cfg("kvzip", o);
        pkv_session *s = session(m, false);
        REQUIRE(cfg && s);
        REQUIRE_MSG(pkv_prefill(s, toks, 120, cfg, NULL, &err) == 0, "%s", err.msg);
        CHECK_EQ_INT(pkv_session_n_pos(s), 120);
        int64_t total = 0;
        bool uneven = false;
        int n_layers = pkv_session_n_layers(s), n_heads = pkv_session_n_heads(s, 0);
        for (int l = 0; l < n_layers; l++) {
            if (scope) CHECK_EQ_INT(rows_of_layer(s, l), 40 * n_heads);
            total += rows_of_layer(s, l);
            for (int h = 0; h < n_heads; h++) {
                int32_t p[128];
                int n = pkv_session_positions(s, l, h, p, 128);
                uneven |= n != 40;
                CHECK_MSG(n >= 4 && p[0] == 0 && p[1] == 1 && p[2] == 2 && p[3] == 3, "layer %d head %d lost a sink", l, h);
                for (int i = 0; i < n; i++) CHECK(p[i] < 120);
            }
        }
        CHECK_EQ_INT(total, 40 * n_heads * n_layers);
        CHECK_MSG(uneven, "scope %d: every head kept exactly the budget; KVzip shares it by score", scope);
        pkv_session_free(s);
        pkv_press_cfg_free(cfg);
    }
    pkv_model_free(m);
}

/* A chat prompt: the template's opening before the context is not
 * reconstructed, so its rows after the sinks score 0 and go first. */
TEST(qa_kvzip_chat_prefix_goes_first) {
    pkv_error err;
    pkv_model *m = pkv_model_load(TINY_QWEN, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    const char *o[] = {"ratio", "0.5", NULL};
    pkv_press_cfg *cfg = test_press_cfg("kvzip", o);
    REQUIRE(cfg);
    pkv_request req;
    pkv_request_init(&req);
    req.prompt = (pkv_prompt_parts){.system = "You are a careful reader of the text below.",
                                    .context = "The river runs past the old mill, and the town keeps a record of "
                                               "the highest floods on a wall by the mill with a date for each one.",
                                    .question = "What is on the wall?",
                                    .chat = true};
    req.press = cfg;
    req.mode = PKV_MODE_QUERY_AGNOSTIC;
    pkv_request_prompt rp;
    REQUIRE_MSG(pkv_request_tokenize(m, &req, &rp, &err) == 0, "%s", err.msg);
    int begin = rp.prompt.context_begin;
    REQUIRE_MSG(begin > 8 && rp.n_compressed - begin > begin, "context_begin %d of %d", begin, rp.n_compressed);
    pkv_session *s = session(m, false);
    REQUIRE(s);
    pkv_request_stats st;
    REQUIRE_MSG(pkv_request_prefill_compressed(s, &req, &rp, NULL, &st, &err) == 0, "%s", err.msg);
    for (int l = 0; l < pkv_session_n_layers(s); l++)
        for (int h = 0; h < pkv_session_n_heads(s, l); h++) {
            int32_t p[256];
            int n = pkv_session_positions(s, l, h, p, 256);
            for (int i = 0; i < n; i++)
                CHECK_MSG(p[i] < 4 || p[i] >= begin, "layer %d head %d kept row %d of the template's opening", l, h, p[i]);
        }
    pkv_session_free(s);
    pkv_request_prompt_free(&rp);
    pkv_press_cfg_free(cfg);
    pkv_model_free(m);
}

/* What KVzip refuses, each in one clear line: sliding-window layers, a
 * later prefill (recompress), a pass past the model's trained positions. */
TEST(qa_kvzip_refusals) {
    pkv_error err;
    int32_t toks[64];
    pkv_model *g = pkv_model_load(TINY_GEMMA, NULL, &err);
    REQUIRE_MSG(g, "%s", err.msg);
    prompt_tokens(toks, 64, pkv_n_vocab(g), 3);
    const char *o[] = {"budget", "20", "mode", "recompress", NULL};
    pkv_press_cfg *cfg = test_press_cfg("kvzip", o);
    pkv_session *s = session(g, false);
    CHECK(pkv_prefill(s, toks, 64, cfg, NULL, &err) == -1 && strstr(err.msg, "sliding window"));
    pkv_session_free(s);
    pkv_model_free(g);

    pkv_model *m = pkv_model_load(TINY_LLAMA, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    s = session(m, false);
    CHECK(pkv_prefill(s, toks, 40, NULL, NULL, &err) == 0);
    CHECK(pkv_prefill(s, toks + 40, 24, cfg, NULL, &err) == -1 && strstr(err.msg, "first prefill"));
    pkv_session_free(s);
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    so.n_ctx = 80;
    s = pkv_session_new(m, &so, &err);
    REQUIRE(s);
    /* the pass may reach the model's trained 128 positions, not past them */
    CHECK(pkv_prefill(s, toks, 64, cfg, NULL, &err) == -1 && strstr(err.msg, "exceeds the context length 128"));
    pkv_session_free(s);
    pkv_press_cfg_free(cfg);
    pkv_model_free(m);
}

/* The admission estimate covers KVzip's peak: every layer whole plus a pass. */
TEST(qa_kvzip_estimate_covers_peak) {
    pkv_error err;
    pkv_model *m = pkv_model_load(TINY_QWEN, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    int32_t toks[150];
    prompt_tokens(toks, 150, pkv_n_vocab(m), 21);
    const char *o[] = {"budget", "30", "chunk_size", "64", NULL};
    pkv_press_cfg *cfg = test_press_cfg("kvzip", o);
    pkv_request req;
    pkv_request_init(&req);
    req.tokens = toks;
    req.n_tokens = 150;
    req.press = cfg;
    req.max_tokens = 4;
    pkv_request_prompt rp;
    REQUIRE(pkv_request_tokenize(m, &req, &rp, &err) == 0);
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    so.n_ctx = 512;
    so.cache_type_k = so.cache_type_v = PKV_CACHE_F32;
    pkv_cache_estimate est;
    REQUIRE(pkv_request_estimate(m, &req, &rp, &so, &est, &err) == 0);
    pkv_session *s = pkv_session_new(m, &so, &err);
    REQUIRE(s);
    pkv_request_stats st;
    REQUIRE_MSG(pkv_request_run(s, &req, &rp, &st, &err) == 0, "%s", err.msg);
    /* the cache itself at its largest: 150 rows and a pass of 64 + its instruction, per head and layer */
    uint64_t row = est.row_bytes, held = 0;
    int n_layers = pkv_session_n_layers(s), n_heads = pkv_session_n_heads(s, 0);
    held = (uint64_t)n_layers * n_heads * (150 + 64) * row;
    CHECK_MSG(est.bytes_peak >= held, "estimate %llu below the cache during a pass %llu", (unsigned long long)est.bytes_peak,
              (unsigned long long)held);
    CHECK_EQ_INT((int)est.rows_kept, (int)(30 * n_heads * n_layers + (int64_t)n_layers * n_heads * 0));
    pkv_session_free(s);
    pkv_request_prompt_free(&rp);
    pkv_press_cfg_free(cfg);
    pkv_model_free(m);
}
