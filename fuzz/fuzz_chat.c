/*
 * libFuzzer target for the chat formatter and prompt assembly: random
 * conversations through every chat family (text/chat.h), then the same texts through pkv_prompt_tokenize with the tiny
 * Gemma 3 (Gemma template) and tiny Qwen2 (ChatML) models. Input: one byte
 * choosing the family and whether a default system prompt is given, then
 * messages separated by NUL bytes, each starting with a byte choosing its
 * role (system, user, assistant, or one the templates do not know).
 *
 *   make fuzz-chat
 *   build/fuzz_chat -max_total_time=600 fuzz/corpus-work/chat fuzz/corpus-chat
 *
 * Invariants (__builtin_trap): a rendering is NUL-terminated and as long as
 * returned; a buffer too small holds a NUL-terminated prefix of it and the
 * same length is returned; system_end lies inside it; in the families that
 * write every message (ChatML, Llama 3, Gemma, EXAONE) every message's
 * content (trimmed as the family trims it) is in it, except a Gemma system
 * message with no turn after it (the template drops it); a failure is a one-line
 * message. Prompt assembly: the segment boundaries are in order and inside
 * the tokens, every id is in the vocabulary, and assembling twice gives the
 * same tokens.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "promptkv.h"
#include "text/chat.h"
#include "text/tokenizer.h"

#define REQUIRE(cond)                  \
    do {                               \
        if (!(cond)) __builtin_trap(); \
    } while (0)

enum { MAX_MESSAGES = 16 };

static const char *const ROLES[4] = {"system", "user", "assistant", "tool"};

static pkv_model *g_gemma, *g_qwen; /* loaded once: the fuzzer's only state */

static pkv_model *load(const char *path) {
    pkv_error err;
    pkv_model *m = pkv_model_load(path, NULL, &err);
    if (!m) {
        fprintf(stderr, "fuzz_chat: cannot load %s: %s (run from the repository root)\n", path, err.msg);
        exit(1);
    }
    return m;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    g_gemma = load("tests/fixtures/models/tiny-gemma3-f32.gguf");
    g_qwen = load("tests/fixtures/models/tiny-qwen2-f32.gguf");
    return 0;
}

/* The content's core: control, space and non-ASCII bytes cut from both ends,
 * at least what Jinja's trim (Python's str.strip) cuts, so the core is in the
 * rendering whenever the content is. */
static bool maybe_space(unsigned char c) { return c <= 0x20 || c >= 0x7f; }

static const char *trimmed(const char *s, size_t *len) {
    size_t n = strlen(s);
    while (n && maybe_space((unsigned char)s[n - 1])) n--;
    while (n && maybe_space((unsigned char)*s)) s++, n--;
    *len = n;
    return s;
}

static void check_render(const pkv_chat_style *st, const pkv_chat_message *msgs, int n) {
    size_t cap = 4096;
    for (int i = 0; i < n; i++) cap += strlen(msgs[i].content) + strlen(msgs[i].role) + 64;
    char *buf = malloc(cap);
    REQUIRE(buf);
    pkv_error err = {PKV_OK, ""};
    int system_end = -1;
    int len = pkv_chat_render(st, msgs, n, buf, (int)cap, &system_end, &err);
    if (len < 0) {
        REQUIRE(err.msg[0] && !strchr(err.msg, '\n'));
        free(buf);
        return;
    }
    REQUIRE((size_t)len < cap && buf[len] == '\0' && strlen(buf) == (size_t)len);
    REQUIRE(system_end >= 0 && system_end <= len);
    for (int i = 0; i < n; i++) {
        size_t tl;
        const char *t = trimmed(msgs[i].content, &tl);
        /* families that write every message (others drop roles they do not know) */
        bool writes_all = st->family == PKV_CHAT_CHATML || st->family == PKV_CHAT_LLAMA3 ||
                          st->family == PKV_CHAT_GEMMA || st->family == PKV_CHAT_EXAONE3;
        bool dropped = st->family == PKV_CHAT_GEMMA && i == 0 && n == 1 && !strcmp(msgs[0].role, "system");
        if (tl && writes_all && !dropped) REQUIRE(memmem(buf, (size_t)len, t, tl) != NULL);
    }
    /* a buffer too small: a NUL-terminated prefix, the full length returned */
    int small = len / 2 + 1;
    char *part = malloc((size_t)small);
    REQUIRE(part);
    int again_end = -1;
    REQUIRE(pkv_chat_render(st, msgs, n, part, small, &again_end, &err) == len);
    REQUIRE(again_end == system_end && strlen(part) == (size_t)(small - 1) && !memcmp(part, buf, (size_t)small - 1));
    free(part);
    free(buf);
}

static void check_prompt(const pkv_model *m, const pkv_prompt_parts *parts) {
    pkv_prompt_tokens t, u;
    pkv_error err = {PKV_OK, ""};
    if (pkv_prompt_tokenize(m, parts, &t, &err)) {
        REQUIRE(err.msg[0] && !strchr(err.msg, '\n'));
        return;
    }
    REQUIRE(t.n_tokens >= 0 && (t.n_tokens == 0 || t.tokens)); /* empty text, no BOS: no tokens */
    REQUIRE(0 <= t.system_end && t.system_end <= t.context_begin && t.context_begin <= t.context_end &&
            t.context_end <= t.question_end && t.question_end <= t.n_tokens);
    for (int i = 0; i < t.n_tokens; i++) REQUIRE(t.tokens[i] >= 0 && t.tokens[i] < pkv_n_vocab(m));
    REQUIRE(pkv_prompt_tokenize(m, parts, &u, &err) == 0 && u.n_tokens == t.n_tokens &&
            (t.n_tokens == 0 || !memcmp(u.tokens, t.tokens, (size_t)t.n_tokens * sizeof *t.tokens)));
    pkv_prompt_tokens_free(&t);
    pkv_prompt_tokens_free(&u);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    pkv_chat_style st;
    pkv_chat_family_named(pkv_chat_family_name((pkv_chat_family)(1 + data[0] % (PKV_CHAT_N_FAMILIES - 1))), &st);
    pkv_chat_style_default_tokens(&st);
    if (data[0] & 0x10) {
        st.has_default_system = true;
        strcpy(st.default_system, "Be brief.");
    }
    /* a NUL-terminated copy; NUL bytes separate the messages */
    char *text = malloc(size);
    REQUIRE(text);
    memcpy(text, data + 1, size - 1);
    text[size - 1] = '\0';
    pkv_chat_message msgs[MAX_MESSAGES];
    int n = 0;
    for (size_t off = 0; off < size - 1 && n < MAX_MESSAGES;) {
        size_t l = strlen(text + off);
        if (l > 0) msgs[n++] = (pkv_chat_message){ROLES[(unsigned char)text[off] % 4], text + off + 1};
        off += l + 1;
    }
    if (n > 0) check_render(&st, msgs, n);

    /* the same texts as a prompt's parts: system, context, question, answer prefix */
    pkv_prompt_parts parts = {
        .system = n > 0 && (data[0] & 0x20) ? msgs[0].content : NULL,
        .context = n > 1 ? msgs[1].content : "",
        .question = n > 2 ? msgs[2].content : NULL,
        .answer_prefix = n > 3 ? msgs[3].content : NULL,
        .chat = data[0] & 0x40,
    };
    check_prompt(data[0] & 0x80 ? g_qwen : g_gemma, &parts);
    free(text);
    return 0;
}
