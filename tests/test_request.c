/*
 * The request API (src/engine/request.c, generate.c): the protocol run by
 * the library against the same steps done by hand with the session API, the
 * cache estimate against the rows the press really keeps, stop strings and
 * one-line answers, conversations and templates that trim.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "promptkv.h"
#include "test.h"

#define TINY_LLAMA FIXTURE("models/tiny-llama-f32.gguf")
#define TINY_GEMMA FIXTURE("models/tiny-gemma3-f32.gguf")
#define TINY_QWEN FIXTURE("models/tiny-qwen2-f32.gguf")

/* A long plain text, deterministic. */
static char *long_text(int words) {
    static const char *const W[] = {"the", "cat", "sat", "on", "a", "mat", "while", "rain", "fell", "softly"};
    char *t = malloc((size_t)words * 8 + 1);
    size_t n = 0;
    for (int i = 0; i < words; i++) n += (size_t)sprintf(t + n, "%s%s", i ? " " : "", W[(i * 7 + i / 3) % 10]);
    return t;
}

static pkv_press_cfg *press(const char *name, const char *const *kv, int n_kv) {
    pkv_error err;
    pkv_press_cfg *c = pkv_press_cfg_new(name, &err);
    for (int i = 0; c && i < n_kv; i++)
        if (pkv_press_cfg_set(c, kv[2 * i], kv[2 * i + 1], &err)) {
            pkv_press_cfg_free(c);
            return NULL;
        }
    return c;
}

typedef struct {
    int32_t tokens[64];
    int n;
    char text[1024];
    size_t len;
    int done_events;
    int prefilled_calls;
    int tokens_before_prefilled; /* token events seen when on_prefilled came */
    int n_prompt_prefilled;      /* its stats' n_prompt */
} collected;

static void note_prefilled(void *user, const pkv_request_stats *st) {
    collected *c = user;
    c->prefilled_calls++;
    c->tokens_before_prefilled = c->n;
    c->n_prompt_prefilled = st->n_prompt;
}

static bool collect(void *user, const pkv_token_event *ev) {
    collected *c = user;
    if (ev->token >= 0 && !ev->end_of_generation && c->n < 64) c->tokens[c->n++] = ev->token;
    if (c->len + ev->text_len < sizeof c->text) {
        memcpy(c->text + c->len, ev->text, ev->text_len);
        c->len += ev->text_len;
    }
    c->done_events += ev->done;
    return true;
}

static int64_t full_layer_rows(const pkv_session *s) {
    int64_t rows = 0;
    for (int l = 0; l < pkv_session_n_layers(s); l++) {
        if (!pkv_session_layer_is_full(s, l)) continue;
        for (int h = 0; h < pkv_session_n_heads(s, l); h++) rows += pkv_session_head_rows(s, l, h);
    }
    return rows;
}

/* Query-agnostic: the press runs on the context alone, the question is fed
 * after it, and greedy decoding continues; the same as the session calls. */
TEST(request_agnostic_matches_session_calls) {
    pkv_error err;
    pkv_model *m = pkv_model_load(TINY_LLAMA, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    char *ctx = long_text(120);
    static const char *const KV[] = {"budget", "40", "window", "8"};
    pkv_press_cfg *cfg = press("snapkv", KV, 2);
    REQUIRE(cfg);
    pkv_request req;
    pkv_request_init(&req);
    req.prompt = (pkv_prompt_parts){.context = ctx, .question = " where is the cat?", .answer_prefix = " on"};
    req.press = cfg;
    req.mode = PKV_MODE_QUERY_AGNOSTIC;
    req.max_tokens = 12;
    collected got = {0};
    req.on_token = collect;
    req.on_prefilled = note_prefilled;
    req.user = &got;
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    so.n_ctx = 1024;
    pkv_session *s = pkv_session_new(m, &so, &err);
    REQUIRE(s);
    pkv_request_stats st;
    REQUIRE_MSG(pkv_request_run(s, &req, NULL, &st, &err) == 0, "%s", err.msg);
    CHECK(st.press.compressed);
    CHECK(st.prefilled);
    CHECK_EQ_INT(st.n_generated, got.n);
    CHECK_EQ_INT(got.done_events, 1);
    /* once, with the prompt read and before the first token */
    CHECK_EQ_INT(got.prefilled_calls, 1);
    CHECK_EQ_INT(got.tokens_before_prefilled, 0);
    CHECK_EQ_INT(got.n_prompt_prefilled, st.n_prompt);

    /* by hand */
    pkv_prompt_tokens pt;
    REQUIRE(pkv_prompt_tokenize(m, &req.prompt, &pt, &err) == 0);
    CHECK_EQ_INT(st.n_compressed, pt.context_end);
    CHECK_EQ_INT(st.n_prompt, pt.n_tokens);
    pkv_session *h = pkv_session_new(m, &so, &err);
    REQUIRE(h);
    pkv_prefill_stats ps;
    REQUIRE(pkv_prefill(h, pt.tokens, pt.context_end, cfg, &ps, &err) == 0);
    REQUIRE(pkv_prefill(h, pt.tokens + pt.context_end, pt.n_tokens - pt.context_end, NULL, &ps, &err) == 0);
    pkv_sampler_params sp;
    pkv_sampler_params_default(&sp);
    pkv_sampler *smp = pkv_sampler_new(&sp, pkv_n_vocab(m));
    int n = 0;
    bool same = true;
    for (; n < 12; n++) {
        int32_t tok = pkv_sample(smp, pkv_logits(h), &err);
        if (pkv_token_is_eog(m, tok)) break;
        same = same && n < got.n && got.tokens[n] == tok;
        if (n + 1 < 12) REQUIRE(pkv_decode(h, tok, &err) == 0);
    }
    CHECK_EQ_INT(got.n, n);
    CHECK(same);
    pkv_sampler_free(smp);
    pkv_prompt_tokens_free(&pt);
    pkv_session_free(h);
    pkv_session_free(s);
    pkv_press_cfg_free(cfg);
    free(ctx);
    pkv_model_free(m);
}

/* The estimate counts the rows the press keeps: exactly with uniform budgets,
 * at least as many with PyramidKV, AdaKV and protected rows; and its peak
 * covers the cache the request reaches. */
TEST(request_estimate_covers_kept_rows) {
    pkv_error err;
    pkv_model *m = pkv_model_load(TINY_QWEN, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    char *ctx = long_text(160);
    static const char *const UNIFORM[] = {"budget", "48", "window", "8"};
    static const char *const PYRAMID[] = {"budget", "48", "window", "8", "layer_budget", "pyramid"};
    static const char *const ADAPTIVE[] = {"ratio", "0.7", "window", "8", "head_budget", "adaptive"};
    static const char *const PROTECT[] = {"budget", "48", "window", "8", "protect", "10:40"};
    const char *const *opts[] = {UNIFORM, PYRAMID, ADAPTIVE, PROTECT};
    int n_opts[] = {2, 3, 3, 3};
    for (int c = 0; c < 4; c++) {
        pkv_press_cfg *cfg = press("snapkv", opts[c], n_opts[c]);
        REQUIRE(cfg);
        pkv_request req;
        pkv_request_init(&req);
        req.prompt = (pkv_prompt_parts){.context = ctx, .question = " who sat?"};
        req.press = cfg;
        req.max_tokens = 6;
        pkv_request_prompt rp;
        REQUIRE(pkv_request_tokenize(m, &req, &rp, &err) == 0);
        pkv_session_opts so;
        pkv_session_opts_default(&so);
        so.n_ctx = 1024;
        pkv_cache_estimate est;
        REQUIRE(pkv_request_estimate(m, &req, &rp, &so, &est, &err) == 0);
        pkv_session *s = pkv_session_new(m, &so, &err);
        REQUIRE(s);
        pkv_request_stats st;
        REQUIRE_MSG(pkv_request_prefill_compressed(s, &req, &rp, NULL, &st, &err) == 0 &&
                        pkv_request_prefill_rest(s, &rp, &st, &err) == 0,
                    "%s", err.msg);
        int64_t rows = full_layer_rows(s);
        if (c == 0) CHECK_EQ_INT((int)est.rows_kept, (int)rows);
        else CHECK_MSG(est.rows_kept >= rows, "config %d: estimate %lld < %lld kept", c, (long long)est.rows_kept,
                       (long long)rows);
        CHECK(est.rows_kept < est.rows_full);
        REQUIRE(pkv_generate(s, &req, &st, &err) == 0);
        CHECK_MSG(est.bytes_peak >= pkv_session_cache_bytes(s), "config %d: peak %llu < %llu held", c,
                  (unsigned long long)est.bytes_peak, (unsigned long long)pkv_session_cache_bytes(s));
        pkv_session_free(s);
        pkv_request_prompt_free(&rp);
        pkv_press_cfg_free(cfg);
    }
    free(ctx);
    pkv_model_free(m);
}

/* Stop strings end the text before them; stop_at_newline ends a one-line
 * answer; max_tokens counts generated tokens. */
TEST(request_stops) {
    pkv_error err;
    pkv_model *m = pkv_model_load(TINY_LLAMA, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    pkv_session *s = pkv_session_new(m, NULL, &err);
    REQUIRE(s);
    pkv_request req;
    pkv_request_init(&req);
    req.prompt = (pkv_prompt_parts){.context = "the cat sat on the mat"};
    req.max_tokens = 24;
    req.ignore_eos = true;
    collected whole = {0};
    req.on_token = collect;
    req.user = &whole;
    pkv_request_stats st;
    REQUIRE(pkv_request_run(s, &req, NULL, &st, &err) == 0);
    CHECK_EQ_INT(st.finish, PKV_FINISH_LENGTH);
    CHECK_EQ_INT(st.n_generated, 24);
    REQUIRE(whole.len > 4);
    /* a stop string taken from the middle of that text */
    char stop[8];
    size_t at = whole.len / 2;
    memcpy(stop, whole.text + at, 3);
    stop[3] = '\0';
    const char *stops[] = {stop};
    const char *first = strstr(whole.text, stop);
    REQUIRE(first);
    collected cut = {0};
    req.user = &cut;
    req.stop = stops;
    req.n_stop = 1;
    pkv_session_reset(s);
    REQUIRE(pkv_request_run(s, &req, NULL, &st, &err) == 0);
    CHECK_EQ_INT(st.finish, PKV_FINISH_STOP);
    CHECK_EQ_INT((int)cut.len, (int)(first - whole.text));
    CHECK(!memcmp(cut.text, whole.text, cut.len));
    pkv_session_free(s);
    pkv_model_free(m);
}

/* A prompt the session cannot hold fails in the prefill: stats say so
 * (prefilled unset), and neither callback is called; the prompt passed in
 * is the one run. */
TEST(request_prefill_failure_is_told) {
    pkv_error err;
    pkv_model *m = pkv_model_load(TINY_LLAMA, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    char *ctx = long_text(60);
    pkv_request req;
    pkv_request_init(&req);
    req.prompt = (pkv_prompt_parts){.context = ctx};
    collected got = {0};
    req.on_token = collect;
    req.on_prefilled = note_prefilled;
    req.user = &got;
    pkv_request_prompt rp;
    REQUIRE(pkv_request_tokenize(m, &req, &rp, &err) == 0);
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    so.n_ctx = rp.prompt.n_tokens / 2;
    pkv_session *s = pkv_session_new(m, &so, &err);
    REQUIRE(s);
    pkv_request_stats st;
    CHECK(pkv_request_run(s, &req, &rp, &st, &err) != 0);
    CHECK_EQ_INT(err.code, PKV_ERR_LIMIT);
    CHECK(!st.prefilled);
    CHECK_EQ_INT(got.prefilled_calls, 0);
    CHECK_EQ_INT(got.n, 0);
    pkv_session_free(s);
    so.n_ctx = 1024;
    s = pkv_session_new(m, &so, &err);
    REQUIRE(s);
    req.max_tokens = 3;
    req.ignore_eos = true;
    REQUIRE(pkv_request_run(s, &req, &rp, &st, &err) == 0);
    CHECK(st.prefilled);
    CHECK_EQ_INT(st.n_prompt, rp.prompt.n_tokens);
    CHECK_EQ_INT(pkv_session_n_pos(s), rp.prompt.n_tokens + 2);
    CHECK_EQ_INT(got.prefilled_calls, 1);
    pkv_session_free(s);
    pkv_request_prompt_free(&rp);
    free(ctx);
    pkv_model_free(m);
}

/* A conversation: the last user message is the question, everything before
 * it the context; a template that trims (Gemma) trims the segments too. */
TEST(request_conversation_segments) {
    pkv_error err;
    pkv_model *m = pkv_model_load(TINY_GEMMA, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    pkv_chat_message msgs[] = {{"user", "Hello there."}, {"assistant", "Hi."}, {"user", "  Name a colour.\n"}};
    pkv_request req;
    pkv_request_init(&req);
    req.prompt = (pkv_prompt_parts){.chat = true, .messages = msgs, .n_messages = 3};
    req.mode = PKV_MODE_QUERY_AGNOSTIC;
    pkv_request_prompt rp;
    REQUIRE_MSG(pkv_request_tokenize(m, &req, &rp, &err) == 0, "%s", err.msg);
    const pkv_prompt_tokens *t = &rp.prompt;
    CHECK_EQ_INT(rp.n_compressed, t->context_end);
    CHECK_EQ_INT(t->context_begin, t->context_end);
    int32_t q[64];
    int nq = pkv_tokenize(m, "Name a colour.", 14, false, false, q, 64, &err);
    CHECK_EQ_INT(t->question_end - t->context_end, nq);
    CHECK(nq > 0 && !memcmp(t->tokens + t->context_end, q, (size_t)nq * sizeof *q));
    /* the segments join to the tokens of the whole rendering */
    char buf[512];
    int len = pkv_chat_format(m, msgs, 3, buf, sizeof buf, NULL, &err);
    REQUIRE(len > 0 && len < (int)sizeof buf);
    int32_t all[256];
    int n = pkv_tokenize(m, buf, (size_t)len, false, true, all, 256, &err);
    CHECK_EQ_INT(t->n_tokens, n);
    CHECK(t->n_tokens == n && !memcmp(t->tokens, all, (size_t)n * sizeof *all));
    pkv_request_prompt_free(&rp);
    pkv_model_free(m);
}
