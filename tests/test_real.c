/*
 * The real model (Gemma 3 270M Q4_K_M, installed by `make model`) against
 * llama.cpp: perplexity on a fixed English text within 1% of llama-perplexity
 * on the same file and context (reference in tests/fixtures/perplexity/).
 * These tests fail, not skip, when the model is missing.
 */
#include <stdlib.h>
#include <string.h>

#include "eval/perplexity.h"
#include "promptkv.h"
#include "test.h"

static const char *GEMMA = "models/gemma-3-270m-q4_k_m.gguf";


/* value of "key <number>" in the reference file */
static double ref_value(const char *text, const char *key) {
    char pat[64];
    snprintf(pat, sizeof pat, "\n%s ", key);
    const char *p = strstr(text, pat);
    return p ? atof(p + strlen(pat)) : -1.0;
}

TEST(real_perplexity_matches_llamacpp) {
    size_t ref_len, len;
    char *ref = test_read_file("tests/fixtures/perplexity/gemma3-270m.ref", &ref_len);
    char *text = test_read_file("tests/data/english.txt", &len);
    REQUIRE(ref && text);
    if (len > 0 && text[len - 1] == '\n') text[--len] = '\0'; /* as llama.cpp's -f */
    double want = ref_value(ref, "ppl");
    int want_tokens = (int)ref_value(ref, "n_tokens"), n_ctx = (int)ref_value(ref, "n_ctx");
    pkv_error err;
    pkv_model *m = pkv_model_load(GEMMA, NULL, &err);
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
    printf("    perplexity %.4f vs llama.cpp %.4f (%+.2f%%)\n", r.ppl, want, 100 * rel);
    CHECK_MSG(rel < 0.01 && rel > -0.01, "perplexity %.4f is not within 1%% of llama.cpp's %.4f", r.ppl, want);
    pkv_session_free(s);
    free(toks);
    pkv_model_free(m);
    free(text);
    free(ref);
}
