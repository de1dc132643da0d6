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

/* The detokenized tokens (control tokens as text) of t[from, to). */
static size_t detok(const pkv_model *m, const pkv_prompt_tokens *t, int from, int to, char *out, size_t cap) {
    size_t n = 0;
    for (int i = from; i < to; i++) {
        int len = pkv_token_to_piece(m, t->tokens[i], true, out + n, (int)(cap - n));
        if (len < 0 || (size_t)len >= cap - n) return (size_t)-1;
        n += (size_t)len;
    }
    out[n] = '\0';
    return n;
}

/* Every chat family (chosen by name on the tiny Qwen2 model, whose
 * byte-level BPE gives back the text it read): the prompt's tokens read back
 * as the family's rendering of [system,] user = context + question plus the
 * answer prefix, whatever the template trims of the user's text; the system
 * span ends where the rendering's system prompt does. */
TEST(prompt_chat_every_family) {
    static const char *const families[] = {
        "chatml", "llama2", "llama2-sys", "llama3", "mistral-v1", "mistral-v3", "mistral-v3-tekken", "mistral-v7",
        "mistral-v7-tekken",
        "phi3", "phi4", "gemma", "deepseek", "deepseek3", "command-r", "zephyr", "vicuna", "vicuna-orca", "openchat",
        "granite", "falcon3", "exaone3"};
    static const struct {
        const char *system, *context, *question;
    } parts[] = {
        {"Be brief.", "A document.\nThe code is 4817.\n", "What is the code?"},
        {NULL, "A document.", " What is it?"},
        {" Padded system. ", "  padded context ", "padded question  \n"},
        {"S", "", "only a question"},
    };
    int n_checked = 0;
    for (size_t f = 0; f < sizeof families / sizeof families[0]; f++) {
        pkv_error err;
        pkv_load_opts lo = {.chat_template = families[f]};
        pkv_model *m = pkv_model_load(FIXTURE("models/tiny-qwen2-f32.gguf"), &lo, &err);
        REQUIRE_MSG(m, "%s: %s", families[f], err.msg);
        CHECK_STR(pkv_model_chat_format(m), families[f]);
        for (size_t k = 0; k < sizeof parts / sizeof parts[0]; k++) {
            pkv_prompt_parts p = {.system = parts[k].system, .context = parts[k].context,
                                  .question = parts[k].question, .answer_prefix = " The", .chat = true};
            char user[256], want[2048], got[2048];
            snprintf(user, sizeof user, "%s%s", p.context, p.question);
            pkv_chat_message msgs[2] = {{"system", p.system ? p.system : ""}, {"user", user}};
            int system_end;
            int n = pkv_chat_format(m, p.system ? msgs : msgs + 1, p.system ? 2 : 1, want, sizeof want, &system_end,
                                    &err);
            pkv_prompt_tokens t;
            int rc = pkv_prompt_tokenize(m, &p, &t, &err);
            if (n < 0) { /* the template refuses the conversation (llama2: no system role) */
                CHECK_MSG(rc == -1 && err.code == PKV_ERR_ARG, "%s/%zu: %s", families[f], k, err.msg);
                continue;
            }
            REQUIRE_MSG(rc == 0, "%s/%zu: %s", families[f], k, err.msg);
            strcat(want, p.answer_prefix);
            size_t len = detok(m, &t, 0, t.n_tokens, got, sizeof got);
            CHECK_MSG(len == strlen(want) && !strcmp(got, want), "%s/%zu:\n      got  \"%s\"\n      want \"%s\"",
                      families[f], k, got, want);
            len = detok(m, &t, 0, t.system_end, got, sizeof got);
            CHECK_MSG(len <= (size_t)system_end && !strncmp(got, want, len) &&
                          (p.system == NULL || len == (size_t)system_end || strcmp(families[f], "mistral-v3")),
                      "%s/%zu: system span \"%s\" (%d bytes of the rendering)", families[f], k, got, system_end);
            CHECK(t.system_end <= t.context_begin && t.context_begin <= t.context_end &&
                  t.context_end <= t.question_end && t.question_end <= t.n_tokens);
            pkv_prompt_tokens_free(&t);
            n_checked++;
        }
        pkv_model_free(m);
    }
    CHECK(n_checked >= 80);
}
