/*
 * libFuzzer target for what the server does with a request body before any
 * forward pass: JSON parsing and type checks, the chat template, tokenization,
 * the press options, the length checks and the memory estimate (with the tiny
 * Gemma 3 fixture), and the path generated text takes back out (stop strings,
 * UTF-8 repair, the JSON encoders). Input: one byte choosing the endpoint and
 * the server's default press, then the body.
 *
 *   make fuzz-request
 *   build/fuzz_request -max_total_time=600 fuzz/corpus-work/request fuzz/corpus-request
 *
 * PKV_FUZZ_MODEL overrides the model (default: the tiny Gemma 3 fixture).
 * Invariants are checked with __builtin_trap, so libFuzzer reports them as crashes.
 */
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/textout.h"
#include "promptkv.h"
#include "server/prompt.h"
#include "server/request.h"
#include "server/response.h"

#define REQUIRE(cond)                \
    do {                             \
        if (!(cond)) __builtin_trap(); \
    } while (0)

static pkv_model *g_model; /* loaded once: the fuzzer's only state */

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    const char *path = getenv("PKV_FUZZ_MODEL");
    if (!path) path = "tests/fixtures/models/tiny-gemma3-f32.gguf";
    pkv_error err;
    g_model = pkv_model_load(path, NULL, &err);
    if (!g_model) {
        fprintf(stderr, "fuzz_request: cannot load %s: %s (run from the repository root)\n", path, err.msg);
        exit(1);
    }
    return 0;
}

/* A JSON text produced by our encoders must parse back. */
static void require_json(char *text, bool sse) {
    REQUIRE(text != NULL);
    const char *start = sse ? text + 6 : text;
    if (sse) REQUIRE(!strncmp(text, "data: ", 6) && strlen(text) >= 8 && !strcmp(text + strlen(text) - 2, "\n\n"));
    json_error_t jerr;
    json_t *j = json_loadb(start, strlen(start) - (sse ? 2 : 0), JSON_ALLOW_NUL, &jerr);
    REQUIRE(j != NULL);
    json_decref(j);
    free(text);
}

/* Feeds pieces through a textout as a slot does and takes the ready text as
 * a connection does, repairing each chunk's UTF-8 on its own as the stream
 * does: what was taken must be the final text, which holds no stop string,
 * and the chunks repaired one by one must read as the whole text repaired at
 * once (a stream says what the whole response says). */
static void check_textout(const char *const *stop, int n_stop, const char *bytes, size_t len, const uint8_t *cuts,
                          size_t n_cuts) {
    pkv_textout t;
    pkv_textout_init(&t, stop, n_stop);
    char *chunks = malloc(3 * len + 1), *whole = malloc(3 * len + 1);
    REQUIRE(chunks && whole);
    size_t n_taken = 0, n_chunks = 0, off = 0;
    chunks[0] = '\0';
    for (size_t c = 0; off < len && !t.stopped; c++) {
        size_t piece = n_cuts ? (size_t)(cuts[c % n_cuts] % 8) + 1 : 3;
        if (piece > len - off) piece = len - off;
        REQUIRE(pkv_textout_append(&t, bytes + off, piece) == 0);
        off += piece;
        REQUIRE(t.ready <= t.len && t.ready >= n_taken);
        if (t.ready > n_taken) n_chunks += pkv_utf8_repair(t.text + n_taken, t.ready - n_taken, chunks + n_chunks);
        n_taken = t.ready;
    }
    pkv_textout_finish(&t);
    REQUIRE(t.ready == t.len && n_taken <= t.len);
    if (t.len > n_taken) n_chunks += pkv_utf8_repair(t.text + n_taken, t.len - n_taken, chunks + n_chunks);
    size_t n_whole = pkv_utf8_repair(t.text ? t.text : "", t.len, whole);
    REQUIRE(n_whole == n_chunks && !memcmp(whole, chunks, n_whole));
    for (int i = 0; i < n_stop; i++) REQUIRE(!t.len || !memmem(t.text, t.len, stop[i], strlen(stop[i])));
    if (!t.stopped) REQUIRE(t.len == len && (len == 0 || !memcmp(t.text, bytes, len)));
    free(chunks);
    free(whole);

    /* the repaired text is valid UTF-8 (jansson checks) and encodes */
    json_t *s = srv_json_text(t.text ? t.text : "", t.len);
    REQUIRE(s != NULL);
    json_decref(s);
    srv_resp_meta meta = {SRV_CHAT, "chatcmpl-fuzz", 0, "fuzz"};
    srv_usage usage = {.prompt_tokens = 1, .completion_tokens = 2, .kv_rows = 3, .kv_rows_full = 4,
                       .kv_bytes = 5, .kv_bytes_full = 6, .press = "none"};
    require_json(srv_response_body(&meta, t.text ? t.text : "", t.len, "stop", &usage), false);
    require_json(srv_chunk_event(&meta, t.text ? t.text : "", t.len, true, NULL, true), true);
    meta.endpoint = SRV_COMPLETION;
    require_json(srv_chunk_event(&meta, t.text ? t.text : "", t.len, false, "length", false), true);
    pkv_textout_free(&t);
}

static void check_prepared(const srv_limits *lim, const srv_request *req, const srv_prepared *p) {
    const pkv_prompt_tokens *t = &p->prompt.prompt;
    REQUIRE(t->n_tokens > 0 && t->n_tokens < lim->n_ctx);
    REQUIRE(p->prompt.n_compressed > 0 && p->prompt.n_compressed <= t->n_tokens);
    REQUIRE(p->prompt.n_protected >= 0 && p->prompt.n_protected <= t->n_tokens);
    REQUIRE(p->req.max_tokens >= 1 && p->req.max_tokens <= lim->max_tokens &&
            t->n_tokens + p->req.max_tokens <= lim->n_ctx);
    REQUIRE(p->press != NULL && p->req.press == p->press && p->cache_bytes_max > 0);
    int n_vocab = pkv_n_vocab(g_model);
    for (int i = 0; i < t->n_tokens; i++) REQUIRE(t->tokens[i] >= 0 && t->tokens[i] < n_vocab);
    /* the prompt's own text through the output path, with the request's stop strings */
    char *text = malloc((size_t)t->n_tokens * 64 + 1);
    REQUIRE(text != NULL);
    size_t len = 0;
    for (int i = 0; i < t->n_tokens; i++) {
        int n = pkv_token_to_piece(g_model, t->tokens[i], true, text + len, 64);
        REQUIRE(n >= 0 && n <= 64);
        len += (size_t)n;
    }
    check_textout((const char *const *)req->stop, req->n_stop, text, len, (const uint8_t *)text, len < 16 ? len : 16);
    free(text);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    srv_endpoint ep = data[0] & 1 ? SRV_CHAT : SRV_COMPLETION;
    static const char *const KEYS[] = {"budget", "window", "mode"};
    static const char *const VALUES[] = {"16", "4", "query_agnostic"};
    srv_limits lim = {.n_ctx = 128, .max_tokens = 64, .default_max_tokens = 16, .n_batch = 32};
    if (data[0] & 2) lim.press = (srv_press_default){"snapkv", KEYS, VALUES, data[0] & 4 ? 3 : 2, (data[0] & 8) != 0};
    const char *body = (const char *)data + 1;
    size_t len = size - 1;

    srv_request req;
    srv_error e;
    if (srv_request_parse(body, len, ep, &req, &e) == 0) {
        srv_prepared p;
        if (srv_prepare(g_model, &lim, &req, &p, &e) == 0) {
            check_prepared(&lim, &req, &p);
            srv_prepared_free(&p);
        } else {
            REQUIRE(e.status >= 400 && e.status < 600 && e.message[0]);
            require_json(srv_error_body(&e), false);
        }
        srv_request_free(&req);
    } else {
        REQUIRE(e.status >= 400 && e.status < 600 && e.message[0]);
        require_json(srv_error_body(&e), false);
        require_json(srv_error_event(&e), true);
    }
    /* the raw bytes as generated text, with fixed stop strings */
    static const char *const STOPS[] = {"\n\n", "</s>", "\xc3\xa9t", "aaa"};
    check_textout(STOPS, 4, body, len, data, size < 8 ? size : 8);
    return 0;
}
