/*
 * Batched decode (pkv_batch_decode, docs/design.md "Batched decode"): a step
 * of several sessions equals each session's own pkv_decode — the same logits
 * bit for bit, the same greedy tokens, the same cache rows — for
 * prompts of mixed lengths under mixed presses and budgets, sessions joining
 * and leaving the batch between steps, on every tiny architecture (Gemma 3's
 * sliding-window layers included); and a refused step changes no session.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "press_fixtures.h"
#include "promptkv.h"
#include "test.h"

#define TINY_LLAMA FIXTURE("models/tiny-llama-f32.gguf")
#define TINY_QWEN FIXTURE("models/tiny-qwen2-f32.gguf")
#define TINY_GEMMA FIXTURE("models/tiny-gemma3-f32.gguf")

enum { N_SEQ = 4, N_STEPS = 12 };

static void prompt_tokens(int32_t *t, int n, int n_vocab, uint32_t seed) {
    test_lcg_tokens(t, n, n_vocab, seed * 2654435761u + 7);
}

static pkv_session *session(pkv_model *m, int n_ctx) {
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    so.n_threads = 2;
    so.n_batch = 16;
    so.n_ctx = n_ctx;
    pkv_error err;
    pkv_session *s = pkv_session_new(m, &so, &err);
    if (!s) test_fail(__FILE__, __LINE__, "%s", err.msg);
    return s;
}

static int32_t argmax(const float *x, int n) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    return best;
}

static double max_abs_diff(const float *a, const float *b, int n) {
    double d = 0;
    for (int i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (e > d) d = e;
    }
    return d;
}

static bool same_rows(const pkv_session *a, const pkv_session *b) {
    for (int l = 0; l < pkv_session_n_layers(a); l++)
        for (int h = 0; h < pkv_session_n_heads(a, l); h++) {
            int32_t p1[600], p2[600];
            int n1 = pkv_session_positions(a, l, h, p1, 600), n2 = pkv_session_positions(b, l, h, p2, 600);
            if (n1 != n2 || memcmp(p1, p2, (size_t)n1 * sizeof *p1)) return false;
        }
    return true;
}

static void check_model(const char *path) {
    pkv_error err;
    pkv_model *m = pkv_model_load(path, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    int nv = pkv_n_vocab(m);
    /* mixed lengths, presses and budgets */
    const int lens[N_SEQ] = {23, 90, 57, 140};
    const char *press[N_SEQ] = {NULL, "snapkv", "streamingllm", "tova"};
    const char *budget[N_SEQ] = {NULL, "24", "40", "64"};
    /* sessions join and leave: session i is in the batch for steps [join, leave) */
    const int join[N_SEQ] = {0, 0, 3, 5}, leave[N_SEQ] = {N_STEPS, 8, N_STEPS, 10};
    pkv_session *alone[N_SEQ], *batched[N_SEQ];
    int32_t next[N_SEQ];
    for (int i = 0; i < N_SEQ; i++) {
        alone[i] = session(m, 512);
        batched[i] = session(m, 512);
        REQUIRE(alone[i] && batched[i]);
        int32_t toks[160];
        prompt_tokens(toks, lens[i], nv, 31 + (uint32_t)i);
        pkv_press_cfg *cfg = NULL;
        if (press[i]) {
            const char *o[] = {"budget", budget[i], "window", "8", NULL};
            cfg = test_press_cfg(press[i], o);
            REQUIRE(cfg);
        }
        REQUIRE_MSG(pkv_prefill(alone[i], toks, lens[i], cfg, NULL, &err) == 0, "%s", err.msg);
        REQUIRE_MSG(pkv_prefill(batched[i], toks, lens[i], cfg, NULL, &err) == 0, "%s", err.msg);
        pkv_press_cfg_free(cfg);
        next[i] = argmax(pkv_logits(alone[i]), nv);
    }
    pkv_batch *b = pkv_batch_new(m, 2, &err);
    REQUIRE_MSG(b, "%s", err.msg);
    double worst = 0;
    for (int step = 0; step < N_STEPS; step++) {
        pkv_session *in[N_SEQ];
        int32_t tok[N_SEQ];
        int n = 0, who[N_SEQ];
        for (int i = 0; i < N_SEQ; i++) {
            if (step < join[i] || step >= leave[i]) continue;
            in[n] = batched[i];
            tok[n] = next[i];
            who[n++] = i;
        }
        REQUIRE_MSG(pkv_batch_decode(b, in, tok, n, &err) == 0, "step %d: %s", step, err.msg);
        for (int k = 0; k < n; k++) {
            int i = who[k];
            REQUIRE_MSG(pkv_decode(alone[i], next[i], &err) == 0, "%s", err.msg);
            const float *la = pkv_logits(alone[i]), *lb = pkv_logits(batched[i]);
            /* rowwise matmuls and row-split activations: the bits of the session alone */
            double d = max_abs_diff(la, lb, nv);
            if (d > worst) worst = d;
            CHECK_MSG(!memcmp(la, lb, (size_t)nv * sizeof *la), "%s step %d session %d: logits differ by up to %g",
                      path, step, i, d);
            CHECK_MSG(argmax(la, nv) == argmax(lb, nv), "%s step %d session %d: another greedy token", path, step, i);
            CHECK_EQ_INT(pkv_session_n_pos(batched[i]), pkv_session_n_pos(alone[i]));
            next[i] = argmax(la, nv);
        }
        /* a session outside the step is untouched */
        for (int i = 0; i < N_SEQ; i++)
            if (step < join[i] || step >= leave[i])
                CHECK_EQ_INT(pkv_session_n_pos(batched[i]), pkv_session_n_pos(alone[i]));
    }
    for (int i = 0; i < N_SEQ; i++) CHECK_MSG(same_rows(alone[i], batched[i]), "%s session %d: other cache rows", path, i);
    printf("    %s: largest logit difference %.3g over %d steps\n", path, worst, N_STEPS);
    pkv_batch_free(b);
    for (int i = 0; i < N_SEQ; i++) {
        pkv_session_free(alone[i]);
        pkv_session_free(batched[i]);
    }
    pkv_model_free(m);
}

/* A batch of one: the same bits as pkv_decode. */
TEST(batch_of_one_is_decode) {
    const char *paths[] = {TINY_LLAMA, TINY_QWEN, TINY_GEMMA};
    for (int p = 0; p < 3; p++) {
        pkv_error err;
        pkv_model *m = pkv_model_load(paths[p], NULL, &err);
        REQUIRE_MSG(m, "%s", err.msg);
        int nv = pkv_n_vocab(m);
        pkv_session *a = session(m, 256), *b1 = session(m, 256);
        int32_t toks[70];
        prompt_tokens(toks, 70, nv, 77);
        REQUIRE(pkv_prefill(a, toks, 70, NULL, NULL, &err) == 0 && pkv_prefill(b1, toks, 70, NULL, NULL, &err) == 0);
        pkv_batch *b = pkv_batch_new(m, 2, &err);
        REQUIRE(b);
        for (int step = 0; step < 5; step++) {
            int32_t t = argmax(pkv_logits(a), nv);
            REQUIRE(pkv_decode(a, t, &err) == 0);
            REQUIRE(pkv_batch_decode(b, &b1, &t, 1, &err) == 0);
            CHECK_MSG(!memcmp(pkv_logits(a), pkv_logits(b1), (size_t)nv * sizeof(float)), "%s step %d: other bits",
                      paths[p], step);
        }
        pkv_batch_free(b);
        pkv_session_free(a);
        pkv_session_free(b1);
        pkv_model_free(m);
    }
}

TEST(batch_equals_single_steps_llama) { check_model(TINY_LLAMA); }
/* Legacy quantised weights, interleaved by 8 rows at load on AVX2 and
 * AVX-512 CPUs (kernels/repack.h): the decode kernel takes the batch's rows together and
 * still gives each the bits of its step alone. */
TEST(batch_equals_single_steps_interleaved_q8_0_q5_0) {
    check_model(FIXTURE("models/tiny-llama-q8_0.gguf"));
    check_model(FIXTURE("models/tiny-llama-q5_0.gguf"));
}
TEST(batch_equals_single_steps_qwen2) { check_model(TINY_QWEN); }
TEST(batch_equals_single_steps_gemma3) { check_model(TINY_GEMMA); }

/* Sessions whose rows span several 256-row chunks of decode attention: with
 * prompts of balanced lengths a step's attention runs each tile whole on one
 * thread, with one prompt far longer than the rest it spreads the chunks over
 * the threads and merges them in a second pass (src/cache/attention.c,
 * whole_tiles); either way the logits are those of each session alone, bit
 * for bit. */
TEST(batch_long_rows_equal_single_steps) {
    pkv_error err;
    pkv_model *m = pkv_model_load(TINY_LLAMA, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    const int nv = pkv_n_vocab(m);
    static const int lens[2][N_SEQ] = {{300, 310, 600, 620}, {1000, 40, 40, 40}};
    for (int cfg = 0; cfg < 2; cfg++) {
        pkv_session *alone[N_SEQ], *batched[N_SEQ];
        int32_t next[N_SEQ];
        for (int i = 0; i < N_SEQ; i++) {
            alone[i] = session(m, 1024);
            batched[i] = session(m, 1024);
            int32_t toks[1000];
            prompt_tokens(toks, lens[cfg][i], nv, 7 + (uint32_t)(cfg * N_SEQ + i));
            REQUIRE_MSG(pkv_prefill(alone[i], toks, lens[cfg][i], NULL, NULL, &err) == 0, "%s", err.msg);
            REQUIRE_MSG(pkv_prefill(batched[i], toks, lens[cfg][i], NULL, NULL, &err) == 0, "%s", err.msg);
            next[i] = argmax(pkv_logits(alone[i]), nv);
        }
        pkv_batch *b = pkv_batch_new(m, 2, &err);
        REQUIRE_MSG(b, "%s", err.msg);
        for (int step = 0; step < 4; step++) {
            REQUIRE_MSG(pkv_batch_decode(b, batched, next, N_SEQ, &err) == 0, "step %d: %s", step, err.msg);
            for (int i = 0; i < N_SEQ; i++) {
                REQUIRE_MSG(pkv_decode(alone[i], next[i], &err) == 0, "%s", err.msg);
                const float *la = pkv_logits(alone[i]), *lb = pkv_logits(batched[i]);
                CHECK_MSG(!memcmp(la, lb, (size_t)nv * sizeof *la), "lengths %d..: step %d session %d: logits differ by up to %g",
                          lens[cfg][0], step, i, max_abs_diff(la, lb, nv));
                next[i] = argmax(la, nv);
            }
        }
        pkv_batch_free(b);
        for (int i = 0; i < N_SEQ; i++) {
            pkv_session_free(alone[i]);
            pkv_session_free(batched[i]);
        }
    }
    pkv_model_free(m);
}

/* A refused step names the session and why, and leaves every session as it was. */
TEST(batch_refusals_change_nothing) {
    pkv_error err;
    pkv_model *m = pkv_model_load(TINY_LLAMA, NULL, &err), *other = pkv_model_load(TINY_QWEN, NULL, &err);
    REQUIRE(m && other);
    int nv = pkv_n_vocab(m);
    pkv_session *a = session(m, 64), *c = session(m, 64), *full = session(m, 40), *foreign = session(other, 64);
    REQUIRE(a && c && full && foreign);
    int32_t toks[40];
    prompt_tokens(toks, 40, nv, 3);
    REQUIRE(pkv_prefill(a, toks, 10, NULL, NULL, &err) == 0);
    REQUIRE(pkv_prefill(c, toks, 12, NULL, NULL, &err) == 0);
    REQUIRE(pkv_prefill(full, toks, 40, NULL, NULL, &err) == 0);
    float *before = malloc((size_t)nv * sizeof *before);
    REQUIRE(before);
    memcpy(before, pkv_logits(a), (size_t)nv * sizeof *before);
    pkv_batch *b = pkv_batch_new(m, 1, &err);
    REQUIRE(b);
    struct {
        pkv_session *s[2];
        int32_t tok[2];
        const char *says;
    } cases[] = {
        {{a, a}, {5, 6}, "session 1 is also session 0"},
        {{a, foreign}, {5, 6}, "another model"},
        {{a, c}, {5, nv}, "outside the vocabulary"},
        {{a, full}, {5, 6}, "exceed the context length"},
    };
    for (size_t k = 0; k < sizeof cases / sizeof *cases; k++) {
        CHECK(pkv_batch_decode(b, cases[k].s, cases[k].tok, 2, &err) == -1);
        CHECK_MSG(strstr(err.msg, cases[k].says), "case %zu: '%s' does not say '%s'", k, err.msg, cases[k].says);
        CHECK_EQ_INT(pkv_session_n_pos(a), 10);
        CHECK_EQ_INT(pkv_session_n_pos(c), 12);
        CHECK_EQ_INT(pkv_session_n_pos(full), 40);
        CHECK(!memcmp(before, pkv_logits(a), (size_t)nv * sizeof *before));
    }
    CHECK(pkv_batch_decode(b, cases[0].s, cases[0].tok, 0, &err) == -1);
    /* and the sessions still step afterwards */
    pkv_session *ok[2] = {a, c};
    int32_t t2[2] = {5, 6};
    CHECK_MSG(pkv_batch_decode(b, ok, t2, 2, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(pkv_session_n_pos(a), 11);
    free(before);
    pkv_batch_free(b);
    pkv_session_free(a);
    pkv_session_free(c);
    pkv_session_free(full);
    pkv_session_free(foreign);
    pkv_model_free(m);
    pkv_model_free(other);
}

/* Generations stepped together through one batch write the texts each
 * writes alone (greedy), whatever their lengths, stops and presses; one
 * interrupted generation ends and the others go on. */
TEST(batch_generation_steps_equal_alone) {
    pkv_error err;
    pkv_model *m = pkv_model_load(TINY_QWEN, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    int nv = pkv_n_vocab(m);
    enum { G = 4 };
    const int lens[G] = {30, 75, 52, 110};
    const int max_tokens[G] = {9, 20, 14, 20};
    const char *press[G] = {NULL, "snapkv", "knorm", "streamingllm"};
    pkv_press_cfg *cfg[G] = {NULL};
    int32_t toks[G][120];
    pkv_request req[G];
    char *alone_text[G];
    for (int i = 0; i < G; i++) {
        prompt_tokens(toks[i], lens[i], nv, 300 + (uint32_t)i);
        if (press[i]) {
            const char *o[] = {"budget", "20", "window", "8", NULL};
            REQUIRE(cfg[i] = test_press_cfg(press[i], o));
        }
        pkv_request_init(&req[i]);
        req[i].tokens = toks[i];
        req[i].n_tokens = lens[i];
        req[i].press = cfg[i];
        req[i].max_tokens = max_tokens[i];
        req[i].ignore_eos = true;
        pkv_session *s = session(m, 256);
        REQUIRE(s);
        REQUIRE_MSG(pkv_request_prefill_all(s, &req[i], NULL, NULL, NULL, &err) == 0, "%s", err.msg);
        pkv_generation *one = pkv_generation_new(s, &req[i], &err);
        REQUIRE(one);
        while (pkv_generation_step(&one, 1, &err) > 0) {}
        size_t len;
        const char *t = pkv_generation_text(one, &len);
        alone_text[i] = strndup(t, len);
        pkv_generation_free(one);
        pkv_session_free(s);
    }
    for (int round = 0; round < 2; round++) {
        pkv_session *ss[G];
        pkv_generation *gs[G];
        for (int i = 0; i < G; i++) {
            REQUIRE(ss[i] = session(m, 256));
            REQUIRE(pkv_request_prefill_all(ss[i], &req[i], NULL, NULL, NULL, &err) == 0);
            REQUIRE(gs[i] = pkv_generation_new(ss[i], &req[i], &err));
        }
        pkv_batch *b = pkv_batch_new(m, 2, &err);
        REQUIRE(b);
        int steps = 0, rc;
        while ((rc = pkv_generation_step_batched(b, gs, G, &err)) != 0) {
            if (round == 1 && steps == 3) pkv_session_interrupt(ss[1]); /* round 2: stream 1 stopped midway */
            if (rc < 0) CHECK_MSG(round == 1 && err.code == PKV_ERR_INTERRUPTED, "step %d: %s", steps, err.msg);
            steps++;
            REQUIRE(steps < 100);
        }
        for (int i = 0; i < G; i++) {
            size_t len;
            const char *t = pkv_generation_text(gs[i], &len);
            if (round == 1 && i == 1) {
                CHECK(len < strlen(alone_text[i]) && !strncmp(t, alone_text[i], len));
                continue;
            }
            CHECK_MSG(len == strlen(alone_text[i]) && !memcmp(t, alone_text[i], len),
                      "round %d stream %d: '%.*s' batched, '%s' alone", round, i, (int)len, t, alone_text[i]);
        }
        pkv_batch_free(b);
        for (int i = 0; i < G; i++) {
            pkv_generation_free(gs[i]);
            pkv_session_free(ss[i]);
        }
    }
    for (int i = 0; i < G; i++) {
        free(alone_text[i]);
        pkv_press_cfg_free(cfg[i]);
    }
    pkv_model_free(m);
}
