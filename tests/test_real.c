/*
 * The real models (Qwen2.5-Coder-0.5B-Instruct and Gemma 3 270M Q4_K_M,
 * installed by make test) against llama.cpp: perplexity on a fixed English
 * text within 1% of llama-perplexity on the same file and context (references
 * in tests/fixtures/perplexity/), and greedy continuations of long prompts
 * against llama.cpp's (tests/fixtures/greedy/). These tests fail, not skip,
 * when the model is missing. The manual_ tests need the 1.5B model and run
 * with make test-qwen1.5b.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "eval/perplexity.h"
#include "promptkv.h"
#include "test.h"

static const char *GEMMA = "models/gemma-3-270m-q4_k_m.gguf";
static const char *QWEN05 = "models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";
static const char *QWEN15 = "models/qwen2.5-coder-1.5b-instruct-q4_k_m.gguf";


/* value of "key <number>" in the reference file */
static double ref_value(const char *text, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\n%s ", key);
    const char *p = strstr(text, pat);
    return p ? atof(p + strlen(pat)) : -1.0;
}

/* The engine's perplexity on tests/data/english.txt within 1% of the
 * llama-perplexity reference (tools/make-perplexity-ref.sh) for the model. */
static void check_perplexity(const char *model, const char *ref_path) {
    size_t ref_len, len;
    char *ref = test_read_file(ref_path, &ref_len);
    char *text = test_read_file("tests/data/english.txt", &len);
    REQUIRE(ref && text);
    if (len > 0 && text[len - 1] == '\n') text[--len] = '\0'; /* as llama.cpp's -f */
    double want = ref_value(ref, "ppl");
    int want_tokens = (int)ref_value(ref, "n_tokens"), n_ctx = (int)ref_value(ref, "n_ctx");
    pkv_error err;
    pkv_model *m = pkv_model_load(model, NULL, &err);
    REQUIRE_MSG(m, "%s (run `make model`)", err.msg);
    int32_t *toks = malloc((len + 16) * sizeof *toks);
    int n = pkv_tokenize(m, text, len, true, false, toks, (int)len + 16, &err);
    CHECK_EQ_INT(n, want_tokens);
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    so.n_ctx = n_ctx;
    pkv_session *s = pkv_session_new(m, &so, &err);
    REQUIRE(s);
    pkv_ppl_result r;
    CHECK_MSG(pkv_perplexity(s, toks, n, n_ctx, 0, NULL, NULL, &r, &err) == 0, "%s", err.msg);
    double rel = (r.ppl - want) / want;
    printf("    %s: perplexity %.4f vs llama.cpp %.4f (%+.2f%%)\n", model, r.ppl, want, 100 * rel);
    CHECK_MSG(rel < 0.01 && rel > -0.01, "perplexity %.4f is not within 1%% of llama.cpp's %.4f", r.ppl, want);
    pkv_session_free(s);
    free(toks);
    pkv_model_free(m);
    free(text);
    free(ref);
}

TEST(real_perplexity_matches_llamacpp) { check_perplexity(GEMMA, "tests/fixtures/perplexity/gemma3-270m.ref"); }

TEST(real_qwen_perplexity_matches_llamacpp) {
    check_perplexity(QWEN05, "tests/fixtures/perplexity/qwen2.5-coder-0.5b.ref");
}

/* Not in make test (the 1.5B model is not installed there): make test-qwen1.5b */
TEST(manual_qwen15_perplexity_matches_llamacpp) {
    check_perplexity(QWEN15, "tests/fixtures/perplexity/qwen2.5-coder-1.5b.ref");
}

/* ---------------------------------------------------------------- greedy continuations */

/* One generated token of llama.cpp's reference: its id and logit, and the
 * runner-up's (tools/make-greedy-ref.sh, tools/llamacpp-greedy.c). */
typedef struct {
    int32_t id, second;
    double logit, second_logit;
} ref_step;

typedef struct {
    char name[32];
    int32_t *ids;
    int n_ids;
    ref_step *steps;
    int n_steps;
} greedy_case;

/* Parses "prompt NAME N ids..." / "step K id logit id2 logit2" / "end"
 * records; returns the number of cases (at most max), -1 on a malformed file. */
static int parse_greedy(char *text, greedy_case *cases, int max) {
    int n = 0;
    greedy_case *c = NULL;
    for (char *save = NULL, *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (line[0] == '#') continue;
        if (!strncmp(line, "prompt ", 7)) {
            if (n == max) return -1;
            c = &cases[n++];
            memset(c, 0, sizeof *c);
            int used = 0;
            if (sscanf(line, "prompt %31s %d%n", c->name, &c->n_ids, &used) != 2 || c->n_ids <= 0) return -1;
            c->ids = malloc((size_t)c->n_ids * sizeof *c->ids);
            c->steps = malloc(1024 * sizeof *c->steps);
            if (!c->ids || !c->steps) return -1;
            char *p = line + used, *end;
            for (int i = 0; i < c->n_ids; i++, p = end) {
                c->ids[i] = (int32_t)strtol(p, &end, 10);
                if (end == p) return -1;
            }
        } else if (!strncmp(line, "step ", 5)) {
            ref_step st;
            int k;
            if (!c || c->n_steps == 1024 ||
                sscanf(line, "step %d %d %lf %d %lf", &k, &st.id, &st.logit, &st.second, &st.second_logit) != 5 ||
                k != c->n_steps)
                return -1;
            c->steps[c->n_steps++] = st;
        } else if (strcmp(line, "end") != 0) {
            return -1;
        }
    }
    return n;
}

static int32_t argmax(const float *logits, int n_vocab) {
    int32_t best = 0;
    for (int t = 1; t < n_vocab; t++)
        if (logits[t] > logits[best]) best = t;
    return best;
}

/* A step where the engine's greedy token differs from llama.cpp's is allowed
 * only where both engines see a near tie: llama.cpp's top two logits, and the
 * engine's logits of its own choice and of llama.cpp's, each closer than this.
 * The two engines' logits of one token differ by up to ~0.5 after thousands
 * of tokens (quantised activations, accumulation order; docs/correctness.md),
 * but a gap between two tokens moves far less. */
#define GREEDY_NEAR_TIE 0.25

TEST(real_qwen_greedy_matches_llamacpp) {
    size_t len;
    char *text = test_read_file("tests/fixtures/greedy/qwen2.5-coder-0.5b.ref", &len);
    REQUIRE(text);
    greedy_case cases[8];
    int n_cases = parse_greedy(text, cases, 8);
    REQUIRE_MSG(n_cases >= 3, "malformed greedy reference (%d cases)", n_cases);
    pkv_error err;
    pkv_model *m = pkv_model_load(QWEN05, NULL, &err);
    REQUIRE_MSG(m, "%s (run `make model`)", err.msg);
    int n_vocab = pkv_n_vocab(m);
    for (int ci = 0; ci < n_cases; ci++) {
        greedy_case *c = &cases[ci];
        pkv_session_opts so;
        pkv_session_opts_default(&so);
        so.n_ctx = c->n_ids + c->n_steps + 8;
        pkv_session *s = pkv_session_new(m, &so, &err);
        REQUIRE_MSG(s, "%s", err.msg);
        CHECK_MSG(pkv_prefill(s, c->ids, c->n_ids, NULL, NULL, &err) == 0, "%s", err.msg);
        /* teacher forcing: both engines continue from llama.cpp's tokens, so
         * every step compares the same history; the free-running
         * continuations are identical up to the first differing step */
        int first_diff = -1, n_diff = 0;
        double max_err = 0.0;
        for (int k = 0; k < c->n_steps && !test_failed(); k++) {
            const ref_step *r = &c->steps[k];
            const float *logits = pkv_logits(s);
            int32_t best = argmax(logits, n_vocab);
            double e = fabs(logits[r->id] - r->logit);
            if (e > max_err) max_err = e;
            if (best != r->id) {
                n_diff++;
                if (first_diff < 0) first_diff = k;
                double ref_gap = r->logit - r->second_logit, our_gap = logits[best] - logits[r->id];
                printf("    %s step %d: engine %d (gap %.3f to llama.cpp's %d), llama.cpp %d (gap %.3f to %d)\n",
                       c->name, k, best, our_gap, r->id, r->id, ref_gap, r->second);
                CHECK_MSG(ref_gap < GREEDY_NEAR_TIE && our_gap < GREEDY_NEAR_TIE,
                          "%s step %d: the engine picks %d, llama.cpp %d, and it is no near tie", c->name, k, best,
                          r->id);
            }
            if (pkv_token_is_eog(m, r->id) || k + 1 == c->n_steps) break;
            CHECK_MSG(pkv_decode(s, r->id, &err) == 0, "%s", err.msg);
        }
        printf("    %s: %d prompt tokens, greedy identical for %d of %d tokens, %d steps differ; max |logit - "
               "llama.cpp's| of its token %.3f\n",
               c->name, c->n_ids, first_diff < 0 ? c->n_steps : first_diff, c->n_steps, n_diff, max_err);
        pkv_session_free(s);
    }
    for (int ci = 0; ci < n_cases; ci++) {
        free(cases[ci].ids);
        free(cases[ci].steps);
    }
    pkv_model_free(m);
    free(text);
}
