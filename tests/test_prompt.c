/*
 * Prompt assembly (pkv_prompt_tokenize): segment boundaries and tokens, plain
 * and with the chat template, against tokenizing the pieces by hand.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "promptkv.h"
#include "test.h"

#define TINY_LLAMA FIXTURE("models/tiny-llama-f32.gguf")
#define QWEN05 "models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"

static int tok(const pkv_model *m, const char *text, bool add_special, bool parse_special, int32_t *out, int max) {
    pkv_error err;
    return pkv_tokenize(m, text, strlen(text), add_special, parse_special, out, max, &err);
}

TEST(prompt_plain_segments) {
    pkv_error err;
    pkv_model *m = pkv_model_load(TINY_LLAMA, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    pkv_prompt_parts p = {.context = "the cat sat on the mat", .question = " where?", .answer_prefix = " on the"};
    pkv_prompt_tokens t;
    REQUIRE_MSG(pkv_prompt_tokenize(m, &p, &t, &err) == 0, "%s", err.msg);
    int32_t want[256];
    int n = tok(m, p.context, true, false, want, 256);
    int nq = tok(m, p.question, false, false, want + n, 256 - n);
    int na = tok(m, p.answer_prefix, false, false, want + n + nq, 256 - n - nq);
    CHECK_EQ_INT(t.n_tokens, n + nq + na);
    CHECK_EQ_INT(t.context_end, n);
    CHECK_EQ_INT(t.question_end, n + nq);
    CHECK_EQ_INT(t.context_begin, pkv_token_bos(m) >= 0 && want[0] == pkv_token_bos(m) ? 1 : 0);
    CHECK_EQ_INT(t.system_end, 0);
    CHECK(t.n_tokens == n + nq + na && !memcmp(t.tokens, want, (size_t)t.n_tokens * sizeof *want));
    pkv_prompt_tokens_free(&t);
    /* a system prompt needs the chat format */
    p.system = "be brief";
    CHECK(pkv_prompt_tokenize(m, &p, &t, &err) == -1 && err.code == PKV_ERR_ARG);
    pkv_model_free(m);
}

/* Qwen2.5-Coder-0.5B-Instruct: ChatML with the template's default system
 * prompt; the segments join to the tokens of the whole rendering. */
TEST(real_prompt_chat_segments_qwen) {
    pkv_error err;
    pkv_model *m = pkv_model_load(QWEN05, NULL, &err);
    REQUIRE_MSG(m, "%s missing (make model): %s", QWEN05, err.msg);
    pkv_prompt_parts p = {.context = "A long document.\nThe code is 4817.\n",
                          .question = "What is the code?",
                          .answer_prefix = "The code is",
                          .chat = true};
    pkv_prompt_tokens t;
    REQUIRE_MSG(pkv_prompt_tokenize(m, &p, &t, &err) == 0, "%s", err.msg);
    static const char rendered[] =
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nA long document.\nThe code is 4817.\nWhat is the code?<|im_end|>\n"
        "<|im_start|>assistant\nThe code is";
    int32_t want[512];
    int n = tok(m, rendered, false, true, want, 512);
    REQUIRE(n > 0 && n < 512);
    CHECK_EQ_INT(t.n_tokens, n);
    CHECK(t.n_tokens == n && !memcmp(t.tokens, want, (size_t)n * sizeof *want));
    int32_t part[512];
    int n_sys = tok(m, "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful "
                       "assistant.<|im_end|>\n", false, true, part, 512);
    int n_head = n_sys + tok(m, "<|im_start|>user\n", false, true, part, 512);
    CHECK_EQ_INT(t.system_end, n_sys);
    CHECK_EQ_INT(t.context_begin, n_head);
    CHECK_EQ_INT(t.context_end, n_head + tok(m, p.context, false, false, part, 512));
    CHECK_EQ_INT(t.question_end, t.context_end + tok(m, p.question, false, false, part, 512));
    pkv_prompt_tokens_free(&t);
    /* the user's text is not parsed for control tokens */
    p.context = "<|im_end|>";
    REQUIRE(pkv_prompt_tokenize(m, &p, &t, &err) == 0);
    CHECK(t.context_end - t.context_begin > 1);
    pkv_prompt_tokens_free(&t);
    pkv_model_free(m);
}
