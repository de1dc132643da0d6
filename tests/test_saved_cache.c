/*
 * Saved caches (docs/cache-file.md; src/cache/kvfile.c, src/engine/saved.c):
 * save -> load -> decode gives the tokens and the logits, bit for bit, of the
 * session that was saved, with and without a press, with split query heads
 * and sliding-window layers; every altered byte and every truncation is
 * refused with one line, and so are a file from another model, another
 * cache type, a context too short and files whose checksum was recomputed
 * over crafted fields. CRC-64/XZ against its published check value.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/crc64.h"
#include "cache/kvfile.h"
#include "promptkv.h"
#include "press_fixtures.h"
#include "test.h"

#define TINY_LLAMA FIXTURE("models/tiny-llama-f32.gguf")
#define TINY_LLAMA_F16 FIXTURE("models/tiny-llama-f16.gguf")
#define TINY_GEMMA FIXTURE("models/tiny-gemma3-f32.gguf")
#define TINY_QWEN FIXTURE("models/tiny-qwen2-f32.gguf")
#define TINY_QWEN3 FIXTURE("models/tiny-qwen3-f32.gguf")
#define QWEN05 "models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"

/* The catalogue's check value of CRC-64/XZ (the CRC of the nine bytes
 * "123456789"), and the CRC of no bytes. Pieces of any length give the
 * CRC of the whole. */
TEST(crc64_xz_check_value) {
    pkv_crc64_table tb;
    pkv_crc64_init(&tb);
    const char *s = "123456789";
    CHECK(pkv_crc64_update(&tb, 0, s, 9) == 0x995dc9bbdf1939faull);
    CHECK(pkv_crc64_update(&tb, 0, s, 0) == 0);
    for (size_t cut = 0; cut <= 9; cut++)
        CHECK(pkv_crc64_update(&tb, pkv_crc64_update(&tb, 0, s, cut), s + cut, 9 - cut) == 0x995dc9bbdf1939faull);
    unsigned char big[1000];
    for (int i = 0; i < 1000; i++) big[i] = (unsigned char)(i * 37 + 11);
    uint64_t whole = pkv_crc64_update(&tb, 0, big, sizeof big);
    for (size_t cut = 0; cut <= sizeof big; cut += 7)
        CHECK(pkv_crc64_update(&tb, pkv_crc64_update(&tb, 0, big, cut), big + cut, sizeof big - cut) == whole);
}

static char *temp_path(char *buf, size_t n, const char *tag) {
    snprintf(buf, n, "/tmp/pkv-saved-%s-%d.pkvc", tag, (int)getpid());
    return buf;
}

static void prompt_tokens(int32_t *t, int n, int n_vocab) {
    for (int i = 0; i < n; i++) t[i] = (int32_t)((i * 131 + 7) % (n_vocab - 3)) + 3;
}

/* The two sessions hold the same state: length, tokens, rows and positions, logits. */
static void check_same_state(const pkv_session *a, const pkv_session *b, int n_vocab) {
    CHECK_EQ_INT(pkv_session_n_pos(a), pkv_session_n_pos(b));
    int na, nb;
    const int32_t *ta = pkv_session_tokens(a, &na), *tb = pkv_session_tokens(b, &nb);
    CHECK_EQ_INT(na, nb);
    CHECK(na == nb && (na == 0 || memcmp(ta, tb, (size_t)na * sizeof *ta) == 0));
    CHECK_EQ_INT(pkv_session_cache_bytes(a), pkv_session_cache_bytes(b));
    for (int l = 0; l < pkv_session_n_layers(a); l++) {
        CHECK_EQ_INT(pkv_session_n_heads(a, l), pkv_session_n_heads(b, l));
        for (int h = 0; h < pkv_session_n_heads(a, l); h++) {
            int ra = pkv_session_head_rows(a, l, h);
            CHECK_EQ_INT(ra, pkv_session_head_rows(b, l, h));
            int32_t pa[512], pb[512];
            if (ra > 512) continue;
            pkv_session_positions(a, l, h, pa, 512);
            pkv_session_positions(b, l, h, pb, 512);
            CHECK(memcmp(pa, pb, (size_t)ra * sizeof *pa) == 0);
        }
    }
    CHECK(memcmp(pkv_logits(a), pkv_logits(b), (size_t)n_vocab * sizeof(float)) == 0);
}

/* Greedy decoding of n tokens on both, the logits compared bit for bit at every step. */
static void check_same_decode(pkv_session *a, pkv_session *b, int n_vocab, int n) {
    pkv_error err;
    for (int i = 0; i < n; i++) {
        int32_t ta = pkv_logits_argmax(pkv_logits(a), n_vocab), tb = pkv_logits_argmax(pkv_logits(b), n_vocab);
        CHECK_EQ_INT(ta, tb);
        REQUIRE_MSG(pkv_decode(a, ta, &err) == 0, "%s", err.msg);
        REQUIRE_MSG(pkv_decode(b, tb, &err) == 0, "%s", err.msg);
        CHECK_MSG(memcmp(pkv_logits(a), pkv_logits(b), (size_t)n_vocab * sizeof(float)) == 0, "step %d logits differ", i);
    }
}

/* Prefill n tokens with the press, save, load into a fresh session, then
 * the same continuation (a prefill of 5 more tokens and greedy decoding)
 * on both. */
static void roundtrip_kv(const char *model_path, pkv_cache_type type_k, pkv_cache_type type_v, const char *press,
                         const char *const *kv, int n) {
    pkv_error err;
    pkv_model *m = pkv_model_load(model_path, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    so.n_threads = 1;
    so.cache_type_k = type_k;
    so.cache_type_v = type_v;
    so.n_ctx = 256;
    pkv_session *a = pkv_session_new(m, &so, &err), *b = pkv_session_new(m, &so, &err);
    pkv_press_cfg *cfg = test_press_cfg(press, kv);
    REQUIRE(a && b && cfg);
    int n_vocab = pkv_n_vocab(m);
    int32_t toks[200];
    prompt_tokens(toks, n + 5, n_vocab);
    REQUIRE_MSG(pkv_prefill(a, toks, n, cfg, NULL, &err) == 0, "%s", err.msg);
    char path[128];
    temp_path(path, sizeof path, "rt");
    REQUIRE_MSG(pkv_session_save(a, path, "snapkv budget=24 window=4", "label text", &err) == 0, "%s", err.msg);
    pkv_saved_cache_info info;
    REQUIRE_MSG(pkv_session_load(b, path, &info, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(info.n_tokens, n);
    CHECK_STR(info.press, "snapkv budget=24 window=4");
    CHECK_STR(info.label, "label text");
    CHECK_EQ_INT(info.cache_bytes, pkv_session_cache_bytes(a));
    check_same_state(a, b, n_vocab);
    check_same_decode(a, b, n_vocab, 3);
    REQUIRE_MSG(pkv_prefill(a, toks + n, 5, NULL, NULL, &err) == 0, "%s", err.msg);
    REQUIRE_MSG(pkv_prefill(b, toks + n, 5, NULL, NULL, &err) == 0, "%s", err.msg);
    check_same_state(a, b, n_vocab);
    check_same_decode(a, b, n_vocab, 4);
    unlink(path);
    pkv_press_cfg_free(cfg);
    pkv_session_free(a);
    pkv_session_free(b);
    pkv_model_free(m);
}

static void roundtrip(const char *model_path, pkv_cache_type type, const char *press, const char *const *kv, int n) {
    roundtrip_kv(model_path, type, type, press, kv, n);
}

TEST(saved_cache_roundtrip_full_cache) { roundtrip(TINY_LLAMA, PKV_CACHE_F16, "none", NULL, 60); }

TEST(saved_cache_roundtrip_snapkv) {
    const char *kv[] = {"budget", "24", "window", "4", NULL};
    roundtrip(TINY_LLAMA, PKV_CACHE_F16, "snapkv", kv, 90);
    roundtrip(TINY_QWEN, PKV_CACHE_F32, "snapkv", kv, 90);
}

/* Per query head: the full layers hold the query heads (4, not 2) */
TEST(saved_cache_roundtrip_query_heads_and_adakv) {
    const char *kv[] = {"budget", "24", "window", "4", "granularity", "query_head", NULL};
    roundtrip(TINY_LLAMA, PKV_CACHE_F16, "snapkv", kv, 90);
    const char *ada[] = {"budget", "24", "window", "4", "head_budget", "adaptive", NULL};
    roundtrip(TINY_LLAMA, PKV_CACHE_F32, "snapkv", ada, 90);
}

/* Gemma 3: five sliding-window layers (window 16) and one full layer */
TEST(saved_cache_roundtrip_sliding_window) {
    const char *kv[] = {"budget", "20", "window", "4", NULL};
    roundtrip(TINY_GEMMA, PKV_CACHE_F16, "snapkv", kv, 100);
    roundtrip(TINY_GEMMA, PKV_CACHE_F16, "none", NULL, 40);
}

/* Quantised rows (head size 32: the tiny Qwen3 and Gemma 3): a Q8_0 cache
 * with SnapKV, per query head, Q4_0 with sliding-window layers, and mixed key
 * and value types continue bit for bit after a save and a load. */
TEST(saved_cache_roundtrip_quantised) {
    const char *kv[] = {"budget", "24", "window", "4", NULL};
    const char *qh[] = {"budget", "24", "window", "4", "granularity", "query_head", NULL};
    roundtrip(TINY_QWEN3, PKV_CACHE_Q8_0, "snapkv", kv, 90);
    roundtrip(TINY_QWEN3, PKV_CACHE_Q8_0, "none", NULL, 60);
    roundtrip_kv(TINY_QWEN3, PKV_CACHE_Q8_0, PKV_CACHE_F16, "snapkv", qh, 90);
    roundtrip(TINY_GEMMA, PKV_CACHE_Q4_0, "snapkv", kv, 100);
    roundtrip_kv(TINY_GEMMA, PKV_CACHE_F32, PKV_CACHE_Q8_0, "none", NULL, 40);
}

/* A saved file of the tiny Llama (with a press), its bytes and the model. */
typedef struct {
    pkv_model *m;
    char path[128];
    unsigned char *bytes;
    size_t size;
} saved_file;

static bool make_saved(saved_file *sf, int n) {
    pkv_error err;
    memset(sf, 0, sizeof *sf);
    sf->m = pkv_model_load(TINY_LLAMA, NULL, &err);
    if (!sf->m) return false;
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    so.n_threads = 1;
    so.n_ctx = 256;
    pkv_session *s = pkv_session_new(sf->m, &so, &err);
    const char *kv[] = {"budget", "12", "window", "4", NULL};
    pkv_press_cfg *cfg = test_press_cfg("snapkv", kv);
    int32_t toks[100];
    prompt_tokens(toks, n, pkv_n_vocab(sf->m));
    bool ok = s && cfg && pkv_prefill(s, toks, n, cfg, NULL, &err) == 0;
    temp_path(sf->path, sizeof sf->path, "hostile");
    ok = ok && pkv_session_save(s, sf->path, "snapkv budget=12 window=4", NULL, &err) == 0;
    pkv_press_cfg_free(cfg);
    pkv_session_free(s);
    if (ok) sf->bytes = (unsigned char *)test_read_file(sf->path, &sf->size);
    return ok && sf->bytes;
}

static void free_saved(saved_file *sf) {
    unlink(sf->path);
    free(sf->bytes);
    pkv_model_free(sf->m);
}

static bool one_line(const char *msg) { return msg[0] && !strchr(msg, '\n'); }

/* Every byte altered (each bit pattern flipped) and every truncation: all refused
 * with one line; the file as saved loads. */
TEST(saved_cache_every_altered_byte_and_truncation_refused) {
    saved_file sf;
    REQUIRE(make_saved(&sf, 40));
    pkv_kvfile f;
    pkv_error err;
    REQUIRE_MSG(pkv_kvfile_open_memory(&f, sf.bytes, sf.size, "saved", &err) == 0, "%s", err.msg);
    pkv_kvfile_close(&f);
    unsigned char *copy = malloc(sf.size);
    REQUIRE(copy);
    int accepted = 0, multiline = 0;
    for (size_t i = 0; i < sf.size; i++) {
        memcpy(copy, sf.bytes, sf.size);
        copy[i] ^= (unsigned char)(1u << (i % 8));
        if (pkv_kvfile_open_memory(&f, copy, sf.size, "saved", &err) == 0) {
            accepted++;
            pkv_kvfile_close(&f);
        } else if (!one_line(err.msg)) {
            multiline++;
        }
    }
    CHECK_EQ_INT(accepted, 0);
    CHECK_EQ_INT(multiline, 0);
    for (size_t len = 0; len < sf.size; len++) {
        if (pkv_kvfile_open_memory(&f, sf.bytes, len, "saved", &err) == 0) {
            accepted++;
            pkv_kvfile_close(&f);
        } else if (!one_line(err.msg)) {
            multiline++;
        }
    }
    CHECK_EQ_INT(accepted, 0);
    CHECK_EQ_INT(multiline, 0);
    free(copy);
    free_saved(&sf);
}

/* Through the public API and a real file: an altered byte, a truncation and a
 * file that is not a saved cache; the session is left empty each time. */
TEST(saved_cache_damaged_file_refused_by_load) {
    saved_file sf;
    REQUIRE(make_saved(&sf, 40));
    pkv_error err;
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    so.n_threads = 1;
    so.n_ctx = 256;
    pkv_session *s = pkv_session_new(sf.m, &so, &err);
    REQUIRE(s);
    char bad[128];
    temp_path(bad, sizeof bad, "bad");
    struct {
        size_t len;
        long flip; /* byte to change, or -1 */
        const char *want;
    } cases[] = {
        {sf.size, (long)sf.size / 2, "checksum mismatch"},
        {sf.size, 20, "the header says"},
        {sf.size - 1, -1, "truncated"},
        {sf.size / 3, -1, "truncated"},
        {10, -1, "not a promptkv saved cache"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        unsigned char *copy = malloc(sf.size);
        memcpy(copy, sf.bytes, sf.size);
        if (cases[c].flip >= 0) copy[cases[c].flip] ^= 0x10;
        FILE *fp = fopen(bad, "wb");
        REQUIRE(fp);
        fwrite(copy, 1, cases[c].len, fp);
        fclose(fp);
        free(copy);
        int32_t t = 5;
        REQUIRE(pkv_prefill(s, &t, 1, NULL, NULL, &err) == 0);
        CHECK(pkv_session_load(s, bad, NULL, &err) != 0);
        CHECK_MSG(strstr(err.msg, cases[c].want) != NULL, "case %zu: '%s' lacks '%s'", c, err.msg, cases[c].want);
        CHECK(one_line(err.msg) && strstr(err.msg, bad) != NULL);
        CHECK_EQ_INT(pkv_session_n_pos(s), 0);
    }
    CHECK(pkv_session_load(s, "/nonexistent/x.pkvc", NULL, &err) != 0 && err.code == PKV_ERR_IO);
    CHECK(pkv_session_load(s, "/tmp", NULL, &err) != 0 && strstr(err.msg, "not a regular file"));
    CHECK(pkv_session_load(s, sf.path, NULL, &err) == 0);
    CHECK_EQ_INT(pkv_session_n_pos(s), 40);
    unlink(bad);
    pkv_session_free(s);
    free_saved(&sf);
}

/* The file of one model into another: a different file of the same shape
 * (the f16 tiny Llama) by its fingerprint, another shape by its shape; an
 * f32 session and a short context by their settings. */
TEST(saved_cache_other_model_type_and_context_refused) {
    saved_file sf;
    REQUIRE(make_saved(&sf, 40));
    pkv_error err;
    struct {
        const char *model;
        pkv_cache_type type;
        int n_ctx;
        const char *want;
    } cases[] = {
        {TINY_LLAMA_F16, PKV_CACHE_F16, 256, "another model file of the same shape"},
        {TINY_QWEN, PKV_CACHE_F16, 256, "saved from another model"},
        {TINY_GEMMA, PKV_CACHE_F16, 256, "saved from another model"},
        {TINY_LLAMA, PKV_CACHE_F32, 256, "saved with an f16 cache"},
        {TINY_LLAMA, PKV_CACHE_F16, 30, "more than the context length 30"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        pkv_model *m = pkv_model_load(cases[c].model, NULL, &err);
        REQUIRE_MSG(m, "%s", err.msg);
        pkv_session_opts so;
        pkv_session_opts_default(&so);
        so.n_threads = 1;
        so.n_ctx = cases[c].n_ctx;
        so.cache_type_k = so.cache_type_v = cases[c].type;
        pkv_session *s = pkv_session_new(m, &so, &err);
        REQUIRE(s);
        CHECK(pkv_session_load(s, sf.path, NULL, &err) != 0);
        CHECK_MSG(strstr(err.msg, cases[c].want) != NULL, "case %zu: '%s' lacks '%s'", c, err.msg, cases[c].want);
        CHECK(one_line(err.msg));
        pkv_session_free(s);
        pkv_model_free(m);
    }
    free_saved(&sf);
}

/* Crafted files whose checksum is recomputed: the structure is checked
 * after it (a token outside the vocabulary, positions out of order or past
 * the length, a row count past the data, a head count the model cannot
 * have, a non-finite key, a control character in the label). */
static void put32(unsigned char *p, uint32_t v) { memcpy(p, &v, 4); }
static uint32_t get32(const unsigned char *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static void reseal(unsigned char *b, size_t size) {
    pkv_crc64_table tb;
    pkv_crc64_init(&tb);
    uint64_t crc = pkv_crc64_update(&tb, 0, b, size - 8);
    memcpy(b + size - 8, &crc, 8);
}

TEST(saved_cache_crafted_fields_refused) {
    saved_file sf;
    REQUIRE(make_saved(&sf, 40));
    pkv_kvfile f;
    pkv_error err;
    REQUIRE(pkv_kvfile_open_memory(&f, sf.bytes, sf.size, "ok", &err) == 0);
    size_t press_len = f.press_len;
    size_t tokens_at = (size_t)(f.tokens - sf.bytes), layers_at = (size_t)(f.layers - sf.bytes);
    int n_vocab = f.n_vocab;
    pkv_kvfile_close(&f);
    size_t head0 = layers_at + 8; /* layer 0: head count, window; head 0: rows, positions... */
    uint32_t rows0 = get32(sf.bytes + head0);
    REQUIRE(rows0 >= 3);
    unsigned char *b = malloc(sf.size);
    struct {
        const char *want;
        size_t at;
        uint32_t value;
        int width; /* 4: a u32; 2: an f16; 1: a byte */
    } cases[] = {
        {"outside the vocabulary", tokens_at + 8, (uint32_t)n_vocab, 4},
        {"position", head0 + 4 + 4, 0, 4},                  /* row 1's position equals row 0's (0) */
        {"below 40", head0 + 4 + 4 * (rows0 - 1), 40, 4},   /* the last row past the length */
        {"more than the 40 tokens", head0, 41, 4},
        {"heads; the model has", layers_at, 3, 4},
        {"not finite", head0 + 4 + 4 * rows0 + 6, 0x7c00, 2}, /* a key: +inf in f16 */
        {"control character", PKV_KVFILE_HEADER_BYTES + press_len - 1, '\n', 1},
        {"layers", 36, 0, 4},
        {"cache type", 32, 7, 4},
        {"query heads are not a multiple", 44, 3, 4},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        memcpy(b, sf.bytes, sf.size);
        if (cases[c].width == 4) put32(b + cases[c].at, cases[c].value);
        else if (cases[c].width == 2) memcpy(b + cases[c].at, &(uint16_t){(uint16_t)cases[c].value}, 2);
        else b[cases[c].at] = (unsigned char)cases[c].value;
        reseal(b, sf.size);
        int rc = pkv_kvfile_open_memory(&f, b, sf.size, "crafted", &err);
        CHECK_MSG(rc != 0, "case %zu accepted", c);
        if (rc == 0) pkv_kvfile_close(&f);
        else CHECK_MSG(strstr(err.msg, cases[c].want) && one_line(err.msg), "case %zu: '%s' lacks '%s'", c, err.msg,
                       cases[c].want);
    }
    free(b);
    free_saved(&sf);
}

/* A session of model_path with the given cache types, n tokens prefilled
 * (SnapKV, budget 12) and saved to path; NULL on failure. */
static pkv_session *saved_session(pkv_model *m, pkv_cache_type tk, pkv_cache_type tv, int n, const char *path) {
    pkv_error err;
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    so.n_threads = 1;
    so.n_ctx = 256;
    so.cache_type_k = tk;
    so.cache_type_v = tv;
    pkv_session *s = pkv_session_new(m, &so, &err);
    const char *kv[] = {"budget", "12", "window", "4", NULL};
    pkv_press_cfg *cfg = test_press_cfg("snapkv", kv);
    int32_t toks[100];
    prompt_tokens(toks, n, pkv_n_vocab(m));
    bool ok = s && cfg && pkv_prefill(s, toks, n, cfg, NULL, &err) == 0 &&
              pkv_session_save(s, path, "snapkv", NULL, &err) == 0;
    if (!ok) test_fail(__FILE__, __LINE__, "%s", err.msg);
    pkv_press_cfg_free(cfg);
    if (ok) return s;
    pkv_session_free(s);
    return NULL;
}

/* A file's key and value types must be the session's: each mismatch is
 * refused with one line naming both and the flags that fit the file. In a
 * quantised file the block scales are checked finite (the quants are
 * integers, any byte is a value). */
TEST(saved_cache_types_must_match) {
    pkv_error err;
    pkv_model *m = pkv_model_load(TINY_QWEN3, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    char q8[128], mixed[128];
    temp_path(q8, sizeof q8, "q8");
    temp_path(mixed, sizeof mixed, "q8f16");
    pkv_session *a = saved_session(m, PKV_CACHE_Q8_0, PKV_CACHE_Q8_0, 40, q8);
    pkv_session *b = saved_session(m, PKV_CACHE_Q8_0, PKV_CACHE_F16, 40, mixed);
    REQUIRE(a && b);
    struct {
        const char *file;
        pkv_cache_type tk, tv;
        const char *want; /* NULL: loads */
    } cases[] = {
        {q8, PKV_CACHE_F16, PKV_CACHE_F16, "saved with a q8_0 cache; this session's is f16 (--cache-type q8_0)"},
        {q8, PKV_CACHE_Q8_0, PKV_CACHE_F16, "saved with a q8_0 cache; this session's is q8_0 keys and f16 values"},
        {q8, PKV_CACHE_Q4_0, PKV_CACHE_Q4_0, "this session's is q4_0"},
        {mixed, PKV_CACHE_Q8_0, PKV_CACHE_Q8_0,
         "saved with a cache of q8_0 keys and f16 values; this session's is q8_0 (--cache-type-k q8_0 --cache-type-v f16)"},
        {q8, PKV_CACHE_Q8_0, PKV_CACHE_Q8_0, NULL},
        {mixed, PKV_CACHE_Q8_0, PKV_CACHE_F16, NULL},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        pkv_session_opts so;
        pkv_session_opts_default(&so);
        so.n_threads = 1;
        so.n_ctx = 256;
        so.cache_type_k = cases[c].tk;
        so.cache_type_v = cases[c].tv;
        pkv_session *s = pkv_session_new(m, &so, &err);
        REQUIRE_MSG(s, "%s", err.msg);
        int rc = pkv_session_load(s, cases[c].file, NULL, &err);
        if (cases[c].want) {
            CHECK_MSG(rc != 0 && strstr(err.msg, cases[c].want) && one_line(err.msg), "case %zu: '%s' lacks '%s'", c,
                      rc ? err.msg : "(loaded)", cases[c].want);
            CHECK_EQ_INT(pkv_session_n_pos(s), 0);
        } else {
            CHECK_MSG(rc == 0, "case %zu: %s", c, err.msg);
            check_same_state(cases[c].file == q8 ? a : b, s, pkv_n_vocab(m));
        }
        pkv_session_free(s);
    }
    /* the first key block's scale made infinite is refused; a quant byte changed is a value like any other */
    size_t size;
    unsigned char *bytes = (unsigned char *)test_read_file(q8, &size);
    REQUIRE(bytes);
    pkv_kvfile f;
    REQUIRE(pkv_kvfile_open_memory(&f, bytes, size, "q8", &err) == 0);
    CHECK(f.type_k == PKV_CACHE_Q8_0 && f.type_v == PKV_CACHE_Q8_0 && f.k_row == 34 && f.version == 2);
    size_t head0 = (size_t)(f.layers - bytes) + 8, keys0 = head0 + 4 + 4 * (size_t)get32(bytes + head0);
    pkv_kvfile_close(&f);
    memcpy(bytes + keys0, &(uint16_t){0x7c00}, 2);
    reseal(bytes, size);
    CHECK(pkv_kvfile_open_memory(&f, bytes, size, "q8", &err) != 0 && strstr(err.msg, "not finite"));
    free(bytes);
    bytes = (unsigned char *)test_read_file(q8, &size);
    bytes[keys0 + 2] = 0x80;
    reseal(bytes, size);
    CHECK_MSG(pkv_kvfile_open_memory(&f, bytes, size, "q8", &err) == 0, "%s", err.msg);
    pkv_kvfile_close(&f);
    free(bytes);
    unlink(q8);
    unlink(mixed);
    pkv_session_free(a);
    pkv_session_free(b);
    pkv_model_free(m);
}

/* Version 1 files (one cache type at offset 32, f16 or f32, and 8 reserved
 * bytes at 88) are still read; another version is refused by its number. */
TEST(saved_cache_version_1_still_read) {
    pkv_error err;
    pkv_model *m = pkv_model_load(TINY_LLAMA, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    char path[128];
    temp_path(path, sizeof path, "v1");
    pkv_session *a = saved_session(m, PKV_CACHE_F32, PKV_CACHE_F32, 40, path);
    REQUIRE(a);
    size_t size;
    unsigned char *bytes = (unsigned char *)test_read_file(path, &size);
    REQUIRE(bytes && get32(bytes + 8) == 2 && get32(bytes + 32) == 1 && get32(bytes + 88) == 1);
    /* as version 1 wrote it */
    put32(bytes + 8, 1);
    put32(bytes + 88, 0);
    reseal(bytes, size);
    FILE *fp = fopen(path, "wb");
    REQUIRE(fp && fwrite(bytes, 1, size, fp) == size);
    fclose(fp);
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    so.n_threads = 1;
    so.n_ctx = 256;
    so.cache_type_k = so.cache_type_v = PKV_CACHE_F32;
    pkv_session *s = pkv_session_new(m, &so, &err);
    REQUIRE(s);
    CHECK_MSG(pkv_session_load(s, path, NULL, &err) == 0, "%s", err.msg);
    check_same_state(a, s, pkv_n_vocab(m));
    check_same_decode(a, s, pkv_n_vocab(m), 3);
    pkv_kvfile f;
    put32(bytes + 32, 2); /* q8_0 did not exist in version 1 */
    reseal(bytes, size);
    CHECK(pkv_kvfile_open_memory(&f, bytes, size, "v1", &err) != 0 && strstr(err.msg, "in version 1"));
    put32(bytes + 8, 3);
    reseal(bytes, size);
    CHECK(pkv_kvfile_open_memory(&f, bytes, size, "v3", &err) != 0 && strstr(err.msg, "version 3") &&
          strstr(err.msg, "reads versions 1 and 2"));
    free(bytes);
    unlink(path);
    pkv_session_free(s);
    pkv_session_free(a);
    pkv_model_free(m);
}

/* A broken session is not saved; the press text and the label are bounded. */
TEST(saved_cache_save_refusals) {
    pkv_error err;
    pkv_model *m = pkv_model_load(TINY_LLAMA, NULL, &err);
    REQUIRE(m);
    pkv_session *s = pkv_session_new(m, NULL, &err);
    REQUIRE(s);
    int32_t t[3] = {5, 6, 7};
    REQUIRE(pkv_prefill(s, t, 3, NULL, NULL, &err) == 0);
    char path[128];
    temp_path(path, sizeof path, "refuse");
    char *big = malloc(5000);
    memset(big, 'a', 4999);
    big[4999] = '\0';
    CHECK(pkv_session_save(s, path, big, NULL, &err) != 0 && strstr(err.msg, "4096"));
    CHECK(pkv_session_save(s, path, "snapkv", "two\nlines", &err) != 0 && strstr(err.msg, "control character"));
    CHECK(pkv_session_save(s, "/nonexistent/dir/x.pkvc", NULL, NULL, &err) != 0 && err.code == PKV_ERR_IO);
    CHECK(access(path, F_OK) != 0); /* nothing written, no temporary left beside it */
    free(big);
    pkv_session_free(s);
    pkv_model_free(m);
}

/* Qwen2.5-Coder-0.5B: a context compressed query-agnostically (SnapKV,
 * budget 64), saved and loaded; the question fed after it and 24 greedy
 * tokens give the same tokens and logits as the live session. */
TEST(real_qwen_saved_cache_continues_as_live) {
    pkv_error err;
    pkv_model *m = pkv_model_load(QWEN05, NULL, &err);
    REQUIRE_MSG(m, "%s (run `make model`)", err.msg);
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    so.n_ctx = 1024;
    pkv_session *a = pkv_session_new(m, &so, &err), *b = pkv_session_new(m, &so, &err);
    REQUIRE(a && b);
    char *doc = test_read_file("tests/data/english.txt", NULL);
    REQUIRE(doc);
    doc[1500] = '\0';
    pkv_request req;
    pkv_request_init(&req);
    const char *kv[] = {"budget", "64", "window", "8", "mode", "query_agnostic", NULL};
    pkv_press_cfg *cfg = test_press_cfg("snapkv", kv);
    REQUIRE(cfg);
    req.prompt = (pkv_prompt_parts){.context = doc, .question = "\nQuestion: what is this text about? Answer:",
                                    .chat = true};
    req.press = cfg;
    req.mode = PKV_MODE_QUERY_AGNOSTIC;
    pkv_request_prompt rp;
    REQUIRE_MSG(pkv_request_tokenize(m, &req, &rp, &err) == 0, "%s", err.msg);
    REQUIRE_MSG(pkv_request_prefill_compressed(a, &req, &rp, NULL, NULL, &err) == 0, "%s", err.msg);
    char path[128];
    temp_path(path, sizeof path, "qwen");
    REQUIRE_MSG(pkv_session_save(a, path, "snapkv budget=64 window=8 mode=query_agnostic", NULL, &err) == 0, "%s",
                err.msg);
    REQUIRE_MSG(pkv_session_load(b, path, NULL, &err) == 0, "%s", err.msg);
    /* it was compressed */
    CHECK(pkv_session_cache_bytes(b) < pkv_model_kv_bytes_full(m, rp.n_compressed, PKV_CACHE_F16, PKV_CACHE_F16));
    int n_vocab = pkv_n_vocab(m);
    check_same_state(a, b, n_vocab);
    REQUIRE(pkv_request_prefill_rest(a, &rp, NULL, &err) == 0);
    REQUIRE(pkv_request_prefill_rest(b, &rp, NULL, &err) == 0);
    check_same_decode(a, b, n_vocab, 24);
    unlink(path);
    pkv_request_prompt_free(&rp);
    pkv_press_cfg_free(cfg);
    free(doc);
    pkv_session_free(a);
    pkv_session_free(b);
    pkv_model_free(m);
}

/* The prompt after a stored context equals the whole prompt's tokens: the
 * context's tokens [0, context_end) of the whole prompt, then the question
 * and the template's tail (chat on ChatML and on Gemma's trimming template,
 * with a question that starts with white space; plain text with BOS), and the
 * context's own text continued; token ids as they are. */
TEST(request_continuation_equals_whole_prompt) {
    const char *models[] = {TINY_QWEN, TINY_GEMMA, TINY_LLAMA};
    for (int mi = 0; mi < 3; mi++) {
        pkv_error err;
        pkv_model *m = pkv_model_load(models[mi], NULL, &err);
        REQUIRE(m);
        for (int chat = 0; chat < (mi < 2 ? 2 : 1); chat++) { /* the tiny Llama has no chat template */
            pkv_request whole_req, cont_req;
            pkv_request_init(&whole_req);
            whole_req.prompt = (pkv_prompt_parts){.system = chat ? "be brief" : NULL, .context = "the cat sat on the mat",
                                                  .question = " where did it sit?", .chat = chat};
            pkv_request_prompt whole, cont;
            REQUIRE_MSG(pkv_request_tokenize(m, &whole_req, &whole, &err) == 0, "%s", err.msg);
            int n_ctx = whole.prompt.context_end;
            pkv_request_init(&cont_req);
            cont_req.prompt = (pkv_prompt_parts){.question = " where did it sit?", .chat = chat};
            REQUIRE_MSG(pkv_request_tokenize_continuation(m, &cont_req, whole.prompt.tokens, n_ctx, &cont, &err) == 0,
                        "%s", err.msg);
            CHECK_EQ_INT(cont.prompt.n_tokens, whole.prompt.n_tokens);
            CHECK_MSG(cont.prompt.n_tokens == whole.prompt.n_tokens &&
                          !memcmp(cont.prompt.tokens, whole.prompt.tokens, sizeof(int32_t) * whole.prompt.n_tokens),
                      "%s chat=%d: the continuation differs from the whole prompt", models[mi], chat);
            CHECK_EQ_INT(cont.n_compressed, n_ctx);
            CHECK_EQ_INT(cont.prompt.question_end, whole.prompt.question_end);
            pkv_request_prompt_free(&cont);
            /* more of the context's text: "the cat sat" stored, " on the mat" continued */
            pkv_request_prompt part;
            pkv_request part_req = whole_req;
            part_req.prompt.context = "the cat sat";
            part_req.prompt.question = "";
            REQUIRE(pkv_request_tokenize(m, &part_req, &part, &err) == 0);
            cont_req.prompt.context = " on the mat";
            REQUIRE(pkv_request_tokenize_continuation(m, &cont_req, part.prompt.tokens, part.prompt.context_end, &cont,
                                                      &err) == 0);
            int n_cut = part.prompt.context_end;
            CHECK(cont.prompt.n_tokens > n_cut && !memcmp(cont.prompt.tokens, part.prompt.tokens, sizeof(int32_t) * n_cut));
            pkv_request_prompt_free(&cont);
            pkv_request_prompt_free(&part);
            pkv_request_prompt_free(&whole);
        }
        int32_t ids[3] = {7, 8, 9}, state[2] = {1, 2};
        pkv_request idr;
        pkv_request_init(&idr);
        idr.tokens = ids;
        idr.n_tokens = 3;
        pkv_request_prompt cont;
        REQUIRE(pkv_request_tokenize_continuation(m, &idr, state, 2, &cont, &err) == 0);
        CHECK(cont.prompt.n_tokens == 5 && cont.prompt.tokens[1] == 2 && cont.prompt.tokens[2] == 7 &&
              cont.prompt.tokens[4] == 9);
        pkv_request_prompt_free(&cont);
        pkv_chat_message msg = {"user", "hi"};
        idr.tokens = NULL;
        idr.prompt = (pkv_prompt_parts){.chat = true, .messages = &msg, .n_messages = 1};
        CHECK(pkv_request_tokenize_continuation(m, &idr, state, 2, &cont, &err) != 0 && strstr(err.msg, "conversation"));
        pkv_model_free(m);
    }
}
