/*
 * promptkv synth: random-weight GGUF files with real shapes. Tiny shapes are
 * written, reloaded by pkv_model_load and checked tensor by tensor; the
 * built-in shapes are checked against parameter counts computed by hand from
 * each model's config.json (and published on its model card).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/gguf.h"
#include "kernels/f16.h"
#include "model/synth.h"
#include "test.h"

static const pkv_synth_shape TINY_LLAMA = {
    .name = "tiny-llama", .source = "test", .arch = "llama", .n_vocab = 300, .n_ctx_train = 256, .n_embd = 64,
    .n_layer = 2, .n_ff = 128, .n_head = 4, .n_head_kv = 2, .head_dim = 16, .rope_theta = 10000.0f,
    .rms_eps = 1e-5f, .tied_embeddings = false, .qkv_bias = false,
};

static const pkv_synth_shape TINY_QWEN2 = {
    .name = "tiny-qwen2", .source = "test", .arch = "qwen2", .n_vocab = 320, .n_ctx_train = 128, .n_embd = 64,
    .n_layer = 3, .n_ff = 96, .n_head = 4, .n_head_kv = 1, .head_dim = 16, .rope_theta = 1e6f, .rms_eps = 1e-6f,
    .tied_embeddings = true, .qkv_bias = true,
};

/* A temporary file name; the file is removed by the caller. */
static void temp_path(char *buf, size_t len, const char *tag) {
    const char *dir = getenv("TMPDIR");
    snprintf(buf, len, "%s/pkv-test-synth-%s-%d.gguf", dir && *dir ? dir : P_tmpdir, tag, (int)getpid());
}


static const gguf_tensor *tensor(const gguf_file *f, const char *name) { return gguf_find_tensor(f, name); }

static bool has_shape(const gguf_tensor *t, uint32_t type, uint64_t ne0, uint64_t ne1) {
    return t && t->type == type && t->ne[0] == ne0 && t->ne[1] == ne1 && t->ne[2] == 1 && t->ne[3] == 1;
}

TEST(synth_tiny_llama_loads_with_exact_tensors) {
    char path[512];
    temp_path(path, sizeof path, "llama");
    pkv_synth_opts o;
    pkv_synth_opts_default(&o);
    o.type = PKV_TYPE_Q8_0;
    o.n_threads = 2;
    pkv_error err;
    REQUIRE_MSG(pkv_synth_write(&TINY_LLAMA, &o, path, &err) == 0, "%s", err.msg);

    pkv_model *m = pkv_model_load(path, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    pkv_model_info mi;
    pkv_model_get_info(m, &mi);
    CHECK_STR(mi.arch, "llama");
    CHECK_EQ_INT(mi.n_vocab, 300);
    CHECK_EQ_INT(mi.n_embd, 64);
    CHECK_EQ_INT(mi.n_layer, 2);
    CHECK_EQ_INT(mi.n_ff, 128);
    CHECK_EQ_INT(mi.n_head, 4);
    CHECK_EQ_INT(mi.n_head_kv, 2);
    CHECK_EQ_INT(mi.head_dim, 16);
    CHECK_EQ_INT(mi.n_ctx_train, 256);
    CHECK_STR(mi.tokenizer, "spm");
    /* token_embd, 9 per layer, output_norm, output (untied) */
    CHECK_EQ_INT(pkv_model_n_tensors(m), 1 + 9 * 2 + 2);

    /* a byte-level vocabulary: text falls back to byte tokens <0xXX> */
    int32_t toks[8];
    int n = pkv_tokenize(m, "hi\n", 3, true, false, toks, 8, &err);
    REQUIRE_MSG(n == 4, "tokenize gave %d tokens: %s", n, err.msg);
    char piece[8];
    CHECK_EQ_INT(toks[0], pkv_token_bos(m));
    CHECK(pkv_token_to_piece(m, toks[1], false, piece, 8) == 1 && piece[0] == 'h');
    CHECK(pkv_token_to_piece(m, toks[3], false, piece, 8) == 1 && piece[0] == '\n');

    /* the model runs */
    pkv_session *s = pkv_session_new(m, NULL, &err);
    REQUIRE_MSG(s, "%s", err.msg);
    CHECK_MSG(pkv_prefill(s, toks, n, NULL, NULL, &err) == 0, "%s", err.msg);
    const float *logits = pkv_logits(s);
    bool finite = true;
    for (int i = 0; i < 300; i++) finite &= isfinite(logits[i]);
    CHECK(finite);
    pkv_session_free(s);
    pkv_model_free(m);

    /* types and shapes, straight from the file (docs/engine.md §1.6) */
    gguf_file f;
    REQUIRE_MSG(gguf_open(&f, path, &err) == 0, "%s", err.msg);
    CHECK(has_shape(tensor(&f, "token_embd.weight"), PKV_TYPE_Q8_0, 64, 300));
    CHECK(has_shape(tensor(&f, "blk.1.attn_q.weight"), PKV_TYPE_Q8_0, 64, 64));
    CHECK(has_shape(tensor(&f, "blk.1.attn_k.weight"), PKV_TYPE_Q8_0, 64, 32));
    CHECK(has_shape(tensor(&f, "blk.1.attn_v.weight"), PKV_TYPE_Q8_0, 64, 32));
    CHECK(has_shape(tensor(&f, "blk.1.attn_output.weight"), PKV_TYPE_Q8_0, 64, 64));
    CHECK(has_shape(tensor(&f, "blk.0.ffn_gate.weight"), PKV_TYPE_Q8_0, 64, 128));
    CHECK(has_shape(tensor(&f, "blk.0.ffn_down.weight"), PKV_TYPE_Q8_0, 128, 64));
    CHECK(has_shape(tensor(&f, "blk.0.attn_norm.weight"), PKV_TYPE_F32, 64, 1));
    CHECK(has_shape(tensor(&f, "output.weight"), PKV_TYPE_Q8_0, 64, 300));
    CHECK(tensor(&f, "rope_freqs.weight") == NULL);
    const gguf_tensor *norm = tensor(&f, "output_norm.weight");
    REQUIRE(has_shape(norm, PKV_TYPE_F32, 64, 1));
    for (int i = 0; i < 64; i++) CHECK(((const float *)norm->data)[i] == 1.0f);
    uint32_t ftype = 0;
    CHECK(gguf_get_u32(&f, "general.file_type", &ftype, &err) == 0 && ftype == 7); /* MOSTLY_Q8_0 */
    gguf_close(&f);
    remove(path);
}

TEST(synth_qwen2_has_biases_and_ties_the_output) {
    char path[512];
    temp_path(path, sizeof path, "qwen2");
    pkv_synth_opts o;
    pkv_synth_opts_default(&o);
    o.type = PKV_TYPE_F16;
    pkv_error err;
    REQUIRE_MSG(pkv_synth_write(&TINY_QWEN2, &o, path, &err) == 0, "%s", err.msg);
    pkv_model *m = pkv_model_load(path, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    /* token_embd, 12 per layer (9 + 3 biases), output_norm; no output.weight */
    CHECK_EQ_INT(pkv_model_n_tensors(m), 1 + 12 * 3 + 1);
    pkv_model_free(m);
    gguf_file f;
    REQUIRE_MSG(gguf_open(&f, path, &err) == 0, "%s", err.msg);
    CHECK(has_shape(tensor(&f, "blk.2.attn_q.bias"), PKV_TYPE_F32, 64, 1));
    CHECK(has_shape(tensor(&f, "blk.2.attn_k.bias"), PKV_TYPE_F32, 16, 1));
    CHECK(has_shape(tensor(&f, "blk.2.attn_v.bias"), PKV_TYPE_F32, 16, 1));
    CHECK(has_shape(tensor(&f, "blk.2.attn_k.weight"), PKV_TYPE_F16, 64, 16));
    CHECK(has_shape(tensor(&f, "token_embd.weight"), PKV_TYPE_F16, 64, 320));
    CHECK(tensor(&f, "output.weight") == NULL);
    gguf_close(&f);
    remove(path);
}

/* The weights look like N(0, std^2) (Irwin-Hall sum of 4 uniforms: bounded
 * at sqrt(12) sigma) and do not depend on the number of threads. */
TEST(synth_weights_are_small_normal_and_thread_independent) {
    char p1[512], p2[512];
    temp_path(p1, sizeof p1, "t1");
    temp_path(p2, sizeof p2, "t2");
    pkv_synth_opts o;
    pkv_synth_opts_default(&o);
    o.type = PKV_TYPE_F32;
    o.weight_std = 0.02f;
    o.seed = 7;
    o.n_threads = 1;
    pkv_error err;
    REQUIRE_MSG(pkv_synth_write(&TINY_LLAMA, &o, p1, &err) == 0, "%s", err.msg);
    o.n_threads = 3;
    REQUIRE_MSG(pkv_synth_write(&TINY_LLAMA, &o, p2, &err) == 0, "%s", err.msg);
    size_t n1, n2;
    char *b1 = test_read_file(p1, &n1), *b2 = test_read_file(p2, &n2);
    REQUIRE(b1 && b2);
    CHECK(n1 == n2 && n1 > 0 && memcmp(b1, b2, n1) == 0);
    free(b1);
    free(b2);

    gguf_file f;
    REQUIRE_MSG(gguf_open(&f, p1, &err) == 0, "%s", err.msg);
    const gguf_tensor *t = tensor(&f, "token_embd.weight");
    REQUIRE(t && t->type == PKV_TYPE_F32);
    const float *w = t->data;
    int64_t n = (int64_t)(t->ne[0] * t->ne[1]);
    double sum = 0, sq = 0, amax = 0;
    for (int64_t i = 0; i < n; i++) {
        sum += w[i];
        sq += (double)w[i] * w[i];
        if (fabs(w[i]) > amax) amax = fabs(w[i]);
    }
    double mean = sum / n, sd = sqrt(sq / n - mean * mean);
    /* 19200 samples: the sample sd is within ~1% of 0.02, the mean within ~5 sd/sqrt(n) */
    CHECK_NEAR(sd, 0.02, 0.0008);
    CHECK_NEAR(mean, 0.0, 5 * 0.02 / sqrt((double)n));
    CHECK(amax <= 0.02 * sqrt(12.0) + 1e-6);
    /* a different seed gives different weights */
    gguf_close(&f);
    o.seed = 8;
    REQUIRE_MSG(pkv_synth_write(&TINY_LLAMA, &o, p2, &err) == 0, "%s", err.msg);
    gguf_file g;
    REQUIRE_MSG(gguf_open(&f, p1, &err) == 0 && gguf_open(&g, p2, &err) == 0, "%s", err.msg);
    CHECK(memcmp(tensor(&f, "blk.0.ffn_up.weight")->data, tensor(&g, "blk.0.ffn_up.weight")->data, 64 * 4) != 0);
    gguf_close(&f);
    gguf_close(&g);
    remove(p1);
    remove(p2);
}

/* rope_freqs.weight for llama3 scaling equals what llama.cpp's converter wrote
 * into the tiny-llama31 fixture (base 5e5, factor 8, low/high freq factor
 * 1/4, original context 64, head_dim 16; tests/fixtures/models/README.md). */
TEST(synth_llama3_rope_factors_match_the_converter) {
    pkv_synth_shape s = TINY_LLAMA;
    s.rope_theta = 500000.0f;
    s.rope_llama3_factor = 8.0f;
    s.rope_llama3_low_freq_factor = 1.0f;
    s.rope_llama3_high_freq_factor = 4.0f;
    s.rope_llama3_original_ctx = 64;
    float mine[8];
    pkv_synth_llama3_rope_factors(&s, mine);
    gguf_file f;
    pkv_error err;
    REQUIRE_MSG(gguf_open(&f, FIXTURE("models/tiny-llama31-f32.gguf"), &err) == 0, "%s", err.msg);
    const gguf_tensor *t = tensor(&f, "rope_freqs.weight");
    REQUIRE(t && t->type == PKV_TYPE_F32 && t->ne[0] == 8);
    for (int i = 0; i < 8; i++) CHECK_NEAR(mine[i], ((const float *)t->data)[i], 1e-5 * mine[i]);
    gguf_close(&f);

    /* and a file with the scaling carries the tensor, which the loader accepts */
    char path[512];
    temp_path(path, sizeof path, "rope");
    pkv_synth_opts o;
    pkv_synth_opts_default(&o);
    REQUIRE_MSG(pkv_synth_write(&s, &o, path, &err) == 0, "%s", err.msg);
    pkv_model *m = pkv_model_load(path, NULL, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    pkv_model_free(m);
    REQUIRE_MSG(gguf_open(&f, path, &err) == 0, "%s", err.msg);
    CHECK(has_shape(tensor(&f, "rope_freqs.weight"), PKV_TYPE_F32, 8, 1));
    gguf_close(&f);
    remove(path);
}

TEST(synth_k_quants_fall_back_on_narrow_rows_and_bad_shapes_fail) {
    char path[512];
    temp_path(path, sizeof path, "q4k");
    pkv_synth_shape s = TINY_LLAMA;
    s.n_ff = 256; /* ffn_down rows (n_ff wide) take Q4_K; 64-wide rows fall back to Q5_0 */
    pkv_synth_opts o;
    pkv_synth_opts_default(&o);
    o.type = PKV_TYPE_Q4_K;
    pkv_error err;
    REQUIRE_MSG(pkv_synth_write(&s, &o, path, &err) == 0, "%s", err.msg);
    gguf_file f;
    REQUIRE_MSG(gguf_open(&f, path, &err) == 0, "%s", err.msg);
    CHECK(has_shape(tensor(&f, "blk.0.ffn_down.weight"), PKV_TYPE_Q4_K, 256, 64));
    CHECK(has_shape(tensor(&f, "blk.0.ffn_up.weight"), PKV_TYPE_Q5_0, 64, 256));
    gguf_close(&f);
    pkv_model *m = pkv_model_load(path, NULL, &err);
    CHECK_MSG(m != NULL, "%s", err.msg);
    pkv_model_free(m);
    remove(path);

    pkv_synth_shape bad = TINY_LLAMA;
    bad.n_embd = 48; /* not whole 32-element Q8_0 blocks */
    CHECK(pkv_synth_check(&bad, PKV_TYPE_Q8_0, &err) == -1);
    CHECK(strstr(err.msg, "Q8_0") && strstr(err.msg, "48"));
    CHECK(pkv_synth_check(&bad, PKV_TYPE_F16, &err) == 0);
    bad = TINY_LLAMA;
    bad.n_vocab = 100; /* fewer than the 259 byte-level tokens */
    CHECK(pkv_synth_check(&bad, PKV_TYPE_Q8_0, &err) == -1);
    bad = TINY_LLAMA;
    bad.n_head_kv = 3;
    CHECK(pkv_synth_check(&bad, PKV_TYPE_Q8_0, &err) == -1);
    CHECK(pkv_synth_check(&TINY_LLAMA, PKV_TYPE_IQ4_XS, &err) == -1);
}

/* Parameter counts (F32 bytes / 4) computed by hand from config.json:
 * Llama-3.2-1B: 128256*2048 + 16 * (2*2048^2 + 2*2048*512 + 3*2048*8192 + 2*2048) + 2048
 *             = 1,235,814,400 (+ 32 rope factors the GGUF adds);
 * Qwen2.5-1.5B: 151936*1536 + 28 * (2*1536^2 + 2*1536*256 + (1536+2*256) + 3*1536*8960
 *             + 2*1536) + 1536 = 1,543,714,304 (model card: 1.54B, 1.31B non-embedding);
 * Mistral-7B: 2*32000*4096 + 32 * (2*4096^2 + 2*4096*1024 + 3*4096*14336 + 2*4096) + 4096
 *             = 7,241,732,096. */
TEST(synth_builtin_shapes_have_the_real_parameter_counts) {
    const pkv_synth_shape *l = pkv_synth_shape_find("llama-3.2-1b"), *q = pkv_synth_shape_find("Qwen2.5-1.5B"),
                          *mi = pkv_synth_shape_find("mistral-7b");
    REQUIRE(l && q && mi);
    CHECK_EQ_INT(pkv_synth_tensor_bytes(l, PKV_TYPE_F32) / 4, 1235814400LL + 32);
    CHECK_EQ_INT(pkv_synth_tensor_bytes(q, PKV_TYPE_F32) / 4, 1543714304LL);
    CHECK_EQ_INT(pkv_synth_tensor_bytes(mi, PKV_TYPE_F32) / 4, 7241732096LL);
    /* Q8_0: 34 bytes per 32 weights for the 2-D tensors, F32 for the rest */
    uint64_t l_1d = 2048 * 33 + 32;
    CHECK_EQ_INT(pkv_synth_tensor_bytes(l, PKV_TYPE_Q8_0), (1235814400ULL - 2048 * 33) / 32 * 34 + l_1d * 4);
    CHECK(pkv_synth_shape_find("no-such-model") == NULL);
    for (int i = 0; pkv_synth_shape_at(i); i++) {
        pkv_error err;
        CHECK_MSG(pkv_synth_check(pkv_synth_shape_at(i), PKV_TYPE_Q4_K, &err) == 0, "%s", err.msg);
    }
}

/* The built-in shapes against the models' config.json files on the Hugging
 * Face hub (hidden_size, num_hidden_layers, intermediate_size,
 * num_attention_heads, num_key_value_heads, head_dim or hidden/heads,
 * vocab_size, max_position_embeddings, rope_theta, rms_norm_eps,
 * tie_word_embeddings, rope_scaling). */
TEST(synth_builtin_shapes_match_the_public_configs) {
    const pkv_synth_shape *l = pkv_synth_shape_find("llama-3.2-1b");
    REQUIRE(l);
    CHECK_STR(l->arch, "llama");
    CHECK(l->n_embd == 2048 && l->n_layer == 16 && l->n_ff == 8192 && l->n_head == 32 && l->n_head_kv == 8 &&
          l->head_dim == 64 && l->n_vocab == 128256 && l->n_ctx_train == 131072);
    CHECK(l->rope_theta == 500000.0f && l->rms_eps == 1e-5f && l->tied_embeddings && !l->qkv_bias);
    CHECK(l->rope_llama3_factor == 32.0f && l->rope_llama3_low_freq_factor == 1.0f &&
          l->rope_llama3_high_freq_factor == 4.0f && l->rope_llama3_original_ctx == 8192);

    const pkv_synth_shape *q = pkv_synth_shape_find("qwen2.5-1.5b");
    REQUIRE(q);
    CHECK_STR(q->arch, "qwen2");
    CHECK(q->n_embd == 1536 && q->n_layer == 28 && q->n_ff == 8960 && q->n_head == 12 && q->n_head_kv == 2 &&
          q->head_dim == 128 && q->n_vocab == 151936 && q->n_ctx_train == 32768);
    CHECK(q->rope_theta == 1000000.0f && q->rms_eps == 1e-6f && q->tied_embeddings && q->qkv_bias);
    CHECK(q->rope_llama3_factor == 0.0f);

    const pkv_synth_shape *mi = pkv_synth_shape_find("mistral-7b"); /* Mistral-7B-Instruct-v0.2 */
    REQUIRE(mi);
    CHECK_STR(mi->arch, "llama");
    CHECK(mi->n_embd == 4096 && mi->n_layer == 32 && mi->n_ff == 14336 && mi->n_head == 32 && mi->n_head_kv == 8 &&
          mi->head_dim == 128 && mi->n_vocab == 32000 && mi->n_ctx_train == 32768);
    CHECK(mi->rope_theta == 1000000.0f && mi->rms_eps == 1e-5f && !mi->tied_embeddings && !mi->qkv_bias);
    CHECK(mi->rope_llama3_factor == 0.0f);
}

static bool u32_key(const gguf_file *f, const char *key, uint32_t want) {
    uint32_t v = 0;
    pkv_error err;
    return gguf_get_u32(f, key, &v, &err) == 0 && v == want;
}

static bool f32_key(const gguf_file *f, const char *key, float want) {
    float v = 0;
    pkv_error err;
    return gguf_get_f32(f, key, &v, &err) == 0 && v == want;
}

static bool str_key(const gguf_file *f, const char *key, const char *want) {
    gguf_str v;
    pkv_error err;
    return gguf_get_str(f, key, &v, &err) == 0 && v.len == strlen(want) && !memcmp(v.ptr, want, v.len);
}

/* The metadata llama.cpp reads (docs/engine.md §1.5), written from the shape:
 * a Mistral-like GQA shape with its own theta and eps, shrunk to test size. */
TEST(synth_writes_the_hyperparameter_keys) {
    pkv_synth_shape s = TINY_LLAMA;
    s.name = "mini-mistral";
    s.n_head = 8;
    s.n_head_kv = 2;
    s.head_dim = 8;
    s.n_ctx_train = 32768;
    s.rope_theta = 1e6f;
    s.rms_eps = 1e-5f;
    char path[512];
    temp_path(path, sizeof path, "keys");
    pkv_synth_opts o;
    pkv_synth_opts_default(&o);
    o.type = PKV_TYPE_F16;
    pkv_error err;
    REQUIRE_MSG(pkv_synth_write(&s, &o, path, &err) == 0, "%s", err.msg);
    gguf_file f;
    REQUIRE_MSG(gguf_open(&f, path, &err) == 0, "%s", err.msg);
    CHECK(str_key(&f, "general.architecture", "llama"));
    CHECK(str_key(&f, "tokenizer.ggml.model", "llama"));
    CHECK(u32_key(&f, "general.file_type", 1)); /* MOSTLY_F16 */
    CHECK(u32_key(&f, "llama.block_count", 2));
    CHECK(u32_key(&f, "llama.context_length", 32768));
    CHECK(u32_key(&f, "llama.embedding_length", 64));
    CHECK(u32_key(&f, "llama.feed_forward_length", 128));
    CHECK(u32_key(&f, "llama.attention.head_count", 8));
    CHECK(u32_key(&f, "llama.attention.head_count_kv", 2));
    CHECK(u32_key(&f, "llama.rope.dimension_count", 8));
    CHECK(u32_key(&f, "llama.vocab_size", 300));
    CHECK(f32_key(&f, "llama.rope.freq_base", 1e6f));
    CHECK(f32_key(&f, "llama.attention.layer_norm_rms_epsilon", 1e-5f));
    /* k and v project to n_head_kv * head_dim = 16 rows */
    CHECK(has_shape(tensor(&f, "blk.0.attn_k.weight"), PKV_TYPE_F16, 64, 16));
    CHECK(has_shape(tensor(&f, "blk.0.attn_q.weight"), PKV_TYPE_F16, 64, 64));
    gguf_close(&f);
    remove(path);
}

/* Logits of a 5-token prompt through the engine, for the given weight type. */
static int forward_logits(const pkv_synth_shape *s, pkv_type type, uint64_t seed, float *logits, pkv_error *err) {
    char path[512];
    temp_path(path, sizeof path, "fwd");
    pkv_synth_opts o;
    pkv_synth_opts_default(&o);
    o.type = type;
    o.seed = seed;
    o.weight_std = 0.05f;
    o.n_threads = 2;
    if (pkv_synth_write(s, &o, path, err)) return -1;
    int rc = -1;
    pkv_model *m = pkv_model_load(path, NULL, err);
    pkv_session *ses = m ? pkv_session_new(m, NULL, err) : NULL;
    const int32_t toks[5] = {1, 72, 105, 33, 10};
    if (ses && pkv_prefill(ses, toks, 5, NULL, NULL, err) == 0) {
        memcpy(logits, pkv_logits(ses), (size_t)s->n_vocab * sizeof *logits);
        rc = 0;
    }
    pkv_session_free(ses);
    pkv_model_free(m);
    remove(path);
    return rc;
}

static double relative_l2(const float *a, const float *ref, int n) {
    double d = 0, r = 0;
    for (int i = 0; i < n; i++) {
        d += ((double)a[i] - ref[i]) * ((double)a[i] - ref[i]);
        r += (double)ref[i] * ref[i];
    }
    return r > 0 ? sqrt(d / r) : INFINITY;
}

/* F16, Q8_0 and Q4_K files of one seed hold the same random weights, rounded:
 * their forward passes give the F32 file's logits up to the format's
 * rounding (relative L2 error about 1e-3 for F16, 3e-2 for Q8_0 and 0.3
 * for 4.5-bit Q4_K after two layers), while another seed gives unrelated
 * logits (about 1.5; sqrt(2) for independent vectors of equal norm). The
 * shape has 256- and 512-wide rows so that every 2-D weight is Q4_K. */
TEST(synth_each_type_runs_the_same_model_through_the_engine) {
    pkv_synth_shape s = TINY_LLAMA;
    s.n_embd = 256;
    s.n_ff = 512;
    s.n_head = 4;
    s.n_head_kv = 2;
    s.head_dim = 64;
    int nv = s.n_vocab;
    float *ref = malloc((size_t)nv * sizeof *ref), *got = malloc((size_t)nv * sizeof *got);
    REQUIRE(ref && got);
    pkv_error err;
    REQUIRE_MSG(forward_logits(&s, PKV_TYPE_F32, 11, ref, &err) == 0, "%s", err.msg);
    double spread = 0;
    for (int i = 0; i < nv; i++) spread = fmax(spread, fabs(ref[i]));
    CHECK(spread > 1e-3); /* the logits are not all zero */

    const struct {
        pkv_type type;
        double max_rel;
    } cases[] = {{PKV_TYPE_F16, 0.005}, {PKV_TYPE_Q8_0, 0.08}, {PKV_TYPE_Q4_K, 0.5}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        REQUIRE_MSG(forward_logits(&s, cases[c].type, 11, got, &err) == 0, "%s", err.msg);
        double rel = relative_l2(got, ref, nv);
        CHECK_MSG(rel < cases[c].max_rel, "type %d: relative L2 error %.4f >= %.4f", (int)cases[c].type, rel,
                  cases[c].max_rel);
    }
    REQUIRE_MSG(forward_logits(&s, PKV_TYPE_F32, 12, got, &err) == 0, "%s", err.msg);
    CHECK(relative_l2(got, ref, nv) > 1.0);
    free(ref);
    free(got);
}
