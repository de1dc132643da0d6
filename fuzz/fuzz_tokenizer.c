/*
 * libFuzzer target for the tokenizers: random bytes through SentencePiece
 * (tiny Llama: byte fallback, space prefix; tiny Gemma 3: no space prefix)
 * and byte-level BPE (tiny Qwen2, the qwen2 pre-tokenizer), with and without
 * BOS and special-token parsing. Input: one byte choosing the vocabulary and
 * the flags, one byte for a short output buffer, then the text.
 *
 *   make fuzz-tokenizer
 *   build/fuzz_tokenizer -max_total_time=600 fuzz/corpus-work/tokenizer fuzz/corpus-tokenizer
 *
 * Invariants (__builtin_trap, so libFuzzer reports them as crashes): every
 * text tokenizes (these vocabularies have every byte); at most 3 ids per
 * input byte plus 5 (a space is U+2581, three byte tokens at worst; an
 * invalid UTF-8 byte is U+FFFD, three byte characters; the space prefix;
 * BOS and EOS); ids inside the vocabulary; a short buffer gets the same
 * count and the same leading ids; the same text gives the same ids; and,
 * without special-token parsing, the pieces read back as the text (with
 * the SPM space prefix; for valid UTF-8, and for SPM without U+2581, which
 * decodes to a space).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "promptkv.h"
#include "text/unicode.h"

#define REQUIRE(cond)                  \
    do {                               \
        if (!(cond)) __builtin_trap(); \
    } while (0)

enum { N_MODELS = 3 };
static const char *const MODEL_PATHS[N_MODELS] = {
    "tests/fixtures/models/tiny-llama-f32.gguf",
    "tests/fixtures/models/tiny-gemma3-f32.gguf",
    "tests/fixtures/models/tiny-qwen2-f32.gguf",
};

/* loaded once: the fuzzer's only state */
static pkv_model *g_models[N_MODELS];
static bool g_space_prefix[N_MODELS], g_bpe[N_MODELS];

/* The text the pieces of ids spell (control tokens render as nothing). */
static char *decode(const pkv_model *m, const int32_t *ids, int n, size_t *len) {
    size_t cap = 64, used = 0;
    char *out = malloc(cap);
    REQUIRE(out);
    for (int i = 0; i < n; i++) {
        char piece[256];
        int pl = pkv_token_to_piece(m, ids[i], false, piece, sizeof piece);
        REQUIRE(pl >= 0 && pl <= (int)sizeof piece);
        if (used + (size_t)pl > cap) {
            while (used + (size_t)pl > cap) cap *= 2;
            out = realloc(out, cap);
            REQUIRE(out);
        }
        memcpy(out + used, piece, (size_t)pl);
        used += (size_t)pl;
    }
    *len = used;
    return out;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    for (int i = 0; i < N_MODELS; i++) {
        pkv_error err;
        g_models[i] = pkv_model_load(MODEL_PATHS[i], NULL, &err);
        if (!g_models[i]) {
            fprintf(stderr, "fuzz_tokenizer: cannot load %s: %s (run from the repository root)\n", MODEL_PATHS[i],
                    err.msg);
            exit(1);
        }
        pkv_model_info info;
        pkv_model_get_info(g_models[i], &info);
        g_bpe[i] = !strcmp(info.tokenizer, "bpe");
        /* whether SPM adds its space prefix: "x" decodes to " x" */
        int32_t ids[8];
        int n = pkv_tokenize(g_models[i], "x", 1, false, false, ids, 8, &err);
        REQUIRE(n > 0 && n <= 8);
        size_t len;
        char *text = decode(g_models[i], ids, n, &len);
        g_space_prefix[i] = len == 2 && text[0] == ' ';
        free(text);
    }
    return 0;
}

/* Text that the byte-level BPE reads back unchanged: every codepoint as the
 * tokenizer decodes it re-encodes to the same bytes (an invalid byte becomes
 * U+FFFD, which does not). */
static bool utf8_round_trips(const char *s, size_t len) {
    for (size_t i = 0; i < len;) {
        size_t used;
        char again[4];
        uint32_t cp = pkv_utf8_decode(s + i, len - i, &used);
        if (pkv_utf8_encode(cp, again) != used || memcmp(again, s + i, used)) return false;
        i += used;
    }
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    int which = data[0] % N_MODELS;
    bool add_special = data[0] & 0x10, parse_special = data[0] & 0x20;
    int short_cap = data[1] % 16;
    const char *text = (const char *)data + 2;
    size_t len = size - 2;
    const pkv_model *m = g_models[which];
    int n_vocab = pkv_n_vocab(m);

    int cap = (int)(3 * len + 5);
    int32_t *ids = malloc((size_t)cap * sizeof *ids), *again = malloc((size_t)cap * sizeof *again);
    REQUIRE(ids && again);
    pkv_error err;
    int n = pkv_tokenize(m, text, len, add_special, parse_special, ids, cap, &err);
    REQUIRE(n >= 0 && n <= cap);
    for (int i = 0; i < n; i++) REQUIRE(ids[i] >= 0 && ids[i] < n_vocab);

    int32_t few[16];
    REQUIRE(pkv_tokenize(m, text, len, add_special, parse_special, few, short_cap, &err) == n);
    for (int i = 0; i < short_cap && i < n; i++) REQUIRE(few[i] == ids[i]);
    REQUIRE(pkv_tokenize(m, text, len, add_special, parse_special, again, cap, &err) == n);
    REQUIRE(!memcmp(ids, again, (size_t)n * sizeof *ids));

    /* SPM splits at lead bytes without checking what follows (as llama.cpp
     * does), so a broken sequence can swallow an escaped space's bytes */
    bool lossless = utf8_round_trips(text, len) && (g_bpe[which] || !memmem(text, len, "\xe2\x96\x81", 3));
    if (!parse_special && lossless) {
        size_t got_len;
        char *got = decode(m, ids, n, &got_len);
        size_t skip = g_space_prefix[which] && len > 0 ? 1 : 0;
        REQUIRE(got_len == len + skip && (!skip || got[0] == ' ') && !memcmp(got + skip, text, len));
        free(got);
    }
    free(ids);
    free(again);
    return 0;
}
