/*
 * Model files with hostile metadata or weights, generated here from the
 * committed fixtures (tests/fixtures/models): one GGUF per class of float
 * metadata (norm epsilon, RoPE bases, RoPE scaling factor, rope_freqs
 * values, soft-capping, attention scale), per-layer arrays that do not match
 * block_count, special-token ids outside the vocabulary, and NaN weights.
 * Each bad value must be refused at load with a one-line error naming the
 * key (or tensor), and a good value in the same place must load, so the test
 * shows the edit itself is sound. NaN weights load (nothing in the file is
 * malformed) and must end in the sampler's "non-finite logits" error.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/gguf.h"
#include "model/model.h"
#include "promptkv.h"
#include "test.h"

#define TINY_LLAMA FIXTURE("models/tiny-llama-f32.gguf")
#define TINY_LLAMA31 FIXTURE("models/tiny-llama31-f32.gguf")
#define TINY_GEMMA FIXTURE("models/tiny-gemma3-f32.gguf")
#define TINY_PHI3_SU FIXTURE("models/tiny-phi3-su-f32.gguf")

static void temp_model_path(char *buf, size_t n, const char *tag) {
    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir) dir = P_tmpdir;
    snprintf(buf, n, "%s/pkv_test_hostile_%ld_%s.gguf", dir, (long)getpid(), tag);
}

/* A copy of the fixture with key set to value (added when absent) written to
 * path; false (and the test failed) if the copy cannot be made. */
static bool write_edited(const char *fixture, const char *key, const gguf_value *value, const char *path) {
    gguf_file f;
    pkv_error err;
    if (gguf_open(&f, fixture, &err)) {
        test_fail(__FILE__, __LINE__, "%s", err.msg);
        return false;
    }
    gguf_writer *w = gguf_writer_new();
    bool ok = w && gguf_writer_add_file(w, &f, key, &err) == 0;
    if (ok) {
        gguf_write_value(w, key, value);
        ok = gguf_writer_save(w, path, &err) == 0;
    }
    if (!ok) test_fail(__FILE__, __LINE__, "editing %s: %s", fixture, err.msg);
    gguf_writer_free(w);
    gguf_close(&f);
    return ok;
}

static gguf_value f32_value(float x) { return (gguf_value){.type = GGUF_VT_FLOAT32, .v.f = x}; }

/* Loads path; returns the model, or NULL with err filled. */
static pkv_model *load(const char *path, pkv_error *err) { return pkv_model_load(path, NULL, err); }

/* The fixture with key = value must be refused at load with a message naming
 * the key and containing want; with key = good it must load. */
static void expect_refused(const char *fixture, const char *key, gguf_value value, const char *want) {
    char path[512];
    temp_model_path(path, sizeof path, "edit");
    if (!write_edited(fixture, key, &value, path)) return;
    pkv_error err = {PKV_OK, ""};
    pkv_model *m = load(path, &err);
    remove(path);
    char shown[64];
    if (value.type == GGUF_VT_FLOAT32) snprintf(shown, sizeof shown, "%g", value.v.f);
    else snprintf(shown, sizeof shown, "(type %s)", gguf_vtype_name(value.type));
    CHECK_MSG(!m && err.code == PKV_ERR_FORMAT && strstr(err.msg, key) && strstr(err.msg, want) &&
                  !strchr(err.msg, '\n'),
              "%s = %s: want a format error naming the key with \"%s\", got %s", key, shown, want,
              m ? "a loaded model" : err.msg);
    pkv_model_free(m);
}

static void expect_loads(const char *fixture, const char *key, gguf_value value, pkv_hparams *hp_out) {
    char path[512];
    temp_model_path(path, sizeof path, "good");
    if (!write_edited(fixture, key, &value, path)) return;
    pkv_error err;
    pkv_model *m = load(path, &err);
    remove(path);
    CHECK_MSG(m != NULL, "%s with a good value: %s", key, err.msg);
    if (m && hp_out) {
        *hp_out = m->hp;
        hp_out->layer_swa = NULL; /* freed with the model */
    }
    pkv_model_free(m);
}

/* Keys that divide, scale or cap: 0, negative, NaN and infinities refused. */
static void expect_positive_finite(const char *fixture, const char *key, float good) {
    expect_refused(fixture, key, f32_value(0.0f), "must be > 0");
    expect_refused(fixture, key, f32_value(-1.0f), "must be > 0");
    expect_refused(fixture, key, f32_value(-1e-5f), "must be > 0");
    expect_refused(fixture, key, f32_value(NAN), "is not finite");
    expect_refused(fixture, key, f32_value(INFINITY), "is not finite");
    expect_refused(fixture, key, f32_value(-INFINITY), "is not finite");
    expect_loads(fixture, key, f32_value(good), NULL);
}

TEST(hostile_norm_epsilon_refused_unless_positive_and_finite) {
    expect_positive_finite(TINY_LLAMA, "llama.attention.layer_norm_rms_epsilon", 1e-6f);
    expect_positive_finite(TINY_GEMMA, "gemma3.attention.layer_norm_rms_epsilon", 1e-5f);
}

TEST(hostile_rope_bases_refused_unless_positive_and_finite) {
    expect_positive_finite(TINY_LLAMA, "llama.rope.freq_base", 5e5f);
    expect_positive_finite(TINY_GEMMA, "gemma3.rope.freq_base", 1e4f);
    /* Gemma 3's local layers have a base of their own */
    expect_positive_finite(TINY_GEMMA, "gemma3.rope.freq_base_swa", 1e5f);
}

TEST(hostile_rope_scaling_factor_refused_not_ignored) {
    /* a factor in the file is used (linear: positions divided by it), so a bad
     * one is refused instead of silently meaning "no scaling" */
    expect_positive_finite(TINY_LLAMA, "llama.rope.scaling.factor", 4.0f);
    pkv_hparams hp;
    memset(&hp, 0, sizeof hp);
    expect_loads(TINY_LLAMA, "llama.rope.scaling.factor", f32_value(4.0f), &hp);
    CHECK_NEAR(hp.rope_global.freq_scale, 0.25, 1e-7);
}

TEST(hostile_softcapping_and_attention_scale_refused_unless_positive) {
    expect_positive_finite(TINY_GEMMA, "gemma3.final_logit_softcapping", 30.0f);
    expect_positive_finite(TINY_GEMMA, "gemma3.attn_logit_softcapping", 50.0f);
    expect_positive_finite(TINY_LLAMA, "llama.attention.scale", 0.125f);
}

/* The fixture's bytes and the offset of an F32 tensor's data in them (to
 * edit weights in place); NULL (and the test failed) if either is missing. */
static char *fixture_tensor(const char *fixture, const char *tensor, size_t *size, size_t *data_off, uint64_t *n) {
    char *bytes = test_read_file(fixture, size);
    gguf_file f;
    pkv_error err;
    if (!bytes || gguf_open_memory(&f, bytes, *size, fixture, &err)) {
        test_fail(__FILE__, __LINE__, "cannot read %s", fixture);
        free(bytes);
        return NULL;
    }
    const gguf_tensor *t = gguf_find_tensor(&f, tensor);
    if (t && t->type == 0) {
        *data_off = (size_t)((const char *)t->data - bytes);
        *n = t->ne[0];
    } else {
        test_fail(__FILE__, __LINE__, "%s has no F32 tensor %s", fixture, tensor);
        free(bytes);
        bytes = NULL;
    }
    gguf_close(&f);
    return bytes;
}

static bool write_bytes(const char *path, const char *bytes, size_t size) {
    FILE *out = fopen(path, "wb");
    bool ok = out && fwrite(bytes, 1, size, out) == size;
    if (out && fclose(out)) ok = false;
    if (!ok) test_fail(__FILE__, __LINE__, "cannot write %s", path);
    return ok;
}

/* rope_freqs.weight (Llama 3 scaling) divides each pair's frequency: one bad
 * element is refused, naming it. */
TEST(hostile_rope_freqs_values_refused) {
    size_t size, off;
    uint64_t n;
    char *bytes = fixture_tensor(TINY_LLAMA31, "rope_freqs.weight", &size, &off, &n);
    REQUIRE(bytes && n > 3);
    off += 3 * sizeof(float);
    const float bad[] = {NAN, INFINITY, -INFINITY, 0.0f, -2.0f};
    char path[512];
    temp_model_path(path, sizeof path, "rope_freqs");
    pkv_error err;
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        memcpy(bytes + off, &bad[i], sizeof(float));
        if (!write_bytes(path, bytes, size)) break;
        pkv_model *m = load(path, &err);
        CHECK_MSG(!m && strstr(err.msg, "rope_freqs.weight[3]") && strstr(err.msg, "must be finite and > 0"),
                  "rope_freqs.weight[3] = %g: %s", bad[i], m ? "loaded" : err.msg);
        pkv_model_free(m);
    }
    remove(path);
    free(bytes);
}

/* LongRoPE's factor tensors divide each pair's frequency too (docs/engine.md
 * §5.3): a bad element of either is refused, naming it. */
TEST(hostile_longrope_factor_values_refused) {
    const char *tensors[] = {"rope_factors_long.weight", "rope_factors_short.weight"};
    for (int ti = 0; ti < 2; ti++) {
        size_t size, off;
        uint64_t n;
        char *bytes = fixture_tensor(TINY_PHI3_SU, tensors[ti], &size, &off, &n);
        REQUIRE(bytes && n > 2);
        off += 2 * sizeof(float);
        const float bad[] = {NAN, INFINITY, 0.0f, -1.5f};
        char path[512], want[64];
        temp_model_path(path, sizeof path, "longrope");
        snprintf(want, sizeof want, "%s[2]", tensors[ti]);
        pkv_error err;
        for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
            memcpy(bytes + off, &bad[i], sizeof(float));
            if (!write_bytes(path, bytes, size)) break;
            pkv_model *m = load(path, &err);
            CHECK_MSG(!m && strstr(err.msg, want) && strstr(err.msg, "must be finite and > 0"), "%s = %g: %s", want,
                      bad[i], m ? "loaded" : err.msg);
            pkv_model_free(m);
        }
        remove(path);
        free(bytes);
    }
}

/* LongRoPE's magnitude scale multiplies cos and sin, and its original context
 * decides between the factor sets: neither may be zero, negative or NaN. */
TEST(hostile_phi3_rope_keys_refused_unless_positive) {
    expect_positive_finite(TINY_PHI3_SU, "phi3.rope.scaling.attn_factor", 1.0f);
    expect_refused(TINY_PHI3_SU, "phi3.rope.scaling.original_context_length",
                   (gguf_value){.type = GGUF_VT_UINT32, .v.u = 0}, "must be > 0");
    expect_loads(TINY_PHI3_SU, "phi3.rope.scaling.original_context_length",
                 (gguf_value){.type = GGUF_VT_UINT32, .v.u = 64}, NULL);
}

static gguf_value i32_array(const int32_t *v, uint64_t n) {
    gguf_value a = {.type = GGUF_VT_ARRAY};
    a.v.arr.elem_type = GGUF_VT_INT32;
    a.v.arr.count = n;
    a.v.arr.data = (const uint8_t *)v; /* little-endian host: packed as the file stores it */
    return a;
}

/* A per-layer array has block_count entries (2 here); any other length is
 * refused, and so is an array where only a single value makes sense. */
TEST(hostile_per_layer_arrays_must_match_block_count) {
    const int32_t three[] = {2, 2, 2}, two[] = {2, 2}, differ[] = {2, 1};
    expect_refused(TINY_LLAMA, "llama.attention.head_count_kv", i32_array(three, 3),
                   "3 per-layer values, block_count is 2");
    expect_refused(TINY_LLAMA, "llama.attention.head_count_kv", i32_array(two, 1),
                   "1 per-layer values, block_count is 2");
    expect_refused(TINY_LLAMA, "llama.feed_forward_length", i32_array(three, 3), "block_count is 2");
    expect_refused(TINY_LLAMA, "llama.context_length", i32_array(two, 2), "expected an integer");
    pkv_hparams hp;
    memset(&hp, 0, sizeof hp);
    expect_loads(TINY_LLAMA, "llama.attention.head_count_kv", i32_array(two, 2), &hp);
    CHECK_EQ_INT(hp.n_head_kv, 2);
    /* differing values are well-formed but not supported */
    char path[512];
    temp_model_path(path, sizeof path, "differ");
    gguf_value v = i32_array(differ, 2);
    REQUIRE(write_edited(TINY_LLAMA, "llama.attention.head_count_kv", &v, path));
    pkv_error err;
    pkv_model *m = load(path, &err);
    remove(path);
    CHECK_MSG(!m && err.code == PKV_ERR_UNSUPPORTED && strstr(err.msg, "per-layer values differ"), "%s",
              m ? "loaded" : err.msg);
    pkv_model_free(m);
}

TEST(hostile_zero_context_length_refused) {
    expect_refused(TINY_LLAMA, "llama.context_length", (gguf_value){.type = GGUF_VT_UINT32, .v.u = 0},
                   "must be > 0");
}

/* Special-token ids outside the 512-token vocabulary: refused, not replaced. */
TEST(hostile_token_ids_outside_the_vocabulary_refused) {
    static const char *const keys[] = {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id",
                                       "tokenizer.ggml.unknown_token_id", "tokenizer.ggml.padding_token_id",
                                       "tokenizer.ggml.eot_token_id"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        expect_refused(TINY_GEMMA, keys[i], (gguf_value){.type = GGUF_VT_UINT32, .v.u = 512},
                       "= 512 is outside the vocabulary [0, 512)");
        expect_refused(TINY_GEMMA, keys[i], (gguf_value){.type = GGUF_VT_UINT32, .v.u = UINT32_MAX},
                       "is outside the vocabulary");
        expect_loads(TINY_GEMMA, keys[i], (gguf_value){.type = GGUF_VT_UINT32, .v.u = 511}, NULL);
    }
}

/* NaN weights pass every load check; the logits come out NaN and every
 * sampling mode stops with the step named, never a token. */
TEST(hostile_nan_weights_end_in_a_numeric_error) {
    size_t size, off;
    uint64_t n;
    char *bytes = fixture_tensor(TINY_LLAMA, "output_norm.weight", &size, &off, &n);
    REQUIRE(bytes);
    const float nan = NAN;
    for (uint64_t i = 0; i < n; i++) memcpy(bytes + off + i * sizeof(float), &nan, sizeof(float));
    char path[512];
    temp_model_path(path, sizeof path, "nan");
    bool written = write_bytes(path, bytes, size);
    free(bytes);
    REQUIRE(written);
    pkv_error err;
    pkv_model *m = load(path, &err);
    remove(path);
    REQUIRE_MSG(m, "%s", err.msg);
    pkv_session *s = pkv_session_new(m, NULL, &err);
    REQUIRE(s);
    int32_t toks[16];
    int n_toks = pkv_tokenize(m, "hello", 5, true, false, toks, 16, &err);
    REQUIRE(n_toks > 0 && n_toks <= 16);
    REQUIRE_MSG(pkv_prefill(s, toks, n_toks, NULL, NULL, &err) == 0, "%s", err.msg);
    for (int mode = 0; mode < 5; mode++) {
        pkv_sampler_params sp;
        pkv_sampler_params_default(&sp);
        sp.temperature = mode ? 0.8f : 0.0f;
        sp.top_k = mode == 2 ? 5 : 0;
        sp.top_p = mode == 3 ? 0.9f : 1.0f;
        sp.min_p = mode == 4 ? 0.1f : 0.0f;
        pkv_sampler *smp = pkv_sampler_new(&sp, pkv_n_vocab(m));
        REQUIRE(smp);
        CHECK_EQ_INT(pkv_sample(smp, pkv_logits(s), &err), -1);
        CHECK_MSG(err.code == PKV_ERR_NUMERIC && strstr(err.msg, "non-finite logits at step 0"), "mode %d: %s",
                  mode, err.msg);
        pkv_sampler_free(smp);
    }
    pkv_session_free(s);
    pkv_model_free(m);
}
