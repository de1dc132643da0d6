/*
 * Qwen3 and Phi-3 (docs/engine.md §3.5, §3.6, §5.3) beyond the golden logits
 * of test_model.c: what the loader makes of their files (fused tensors as row
 * views, sliding layers, LongRoPE), that each Phi-3 detail of the fixtures
 * changes the computation (so that the goldens pin it down), and the one-line
 * refusals of what is not supported. The supported list itself, and an
 * unknown architecture refused with it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "format/gguf.h"
#include "model/model.h"
#include "promptkv.h"
#include "test.h"

#define QWEN3 FIXTURE("models/tiny-qwen3-f32.gguf")
#define PHI3 FIXTURE("models/tiny-phi3-f32.gguf")
#define PHI3_SU FIXTURE("models/tiny-phi3-su-f32.gguf")

/* ---------------------------------------------------------------- helpers */

static void temp_path(char *buf, size_t n, const char *tag) {
    const char *dir = getenv("TMPDIR");
    if (!dir || !*dir) dir = P_tmpdir;
    snprintf(buf, n, "%s/pkv_test_arch_%ld_%s.gguf", dir, (long)getpid(), tag);
}

/* A copy of src at dst with key set to *value, or to the string str when
 * value is NULL; false (and the test failed) if it cannot be written. */
static bool edit(const char *src, const char *dst, const char *key, const gguf_value *value, const char *str) {
    gguf_file f;
    pkv_error err;
    if (gguf_open(&f, src, &err)) {
        test_fail(__FILE__, __LINE__, "%s", err.msg);
        return false;
    }
    gguf_writer *w = gguf_writer_new();
    bool ok = w && gguf_writer_add_file(w, &f, key, &err) == 0;
    if (ok) {
        if (value) gguf_write_value(w, key, value);
        else gguf_write_str(w, key, str);
        ok = gguf_writer_save(w, dst, &err) == 0;
    }
    if (!ok) test_fail(__FILE__, __LINE__, "editing %s: %s", src, err.msg);
    gguf_writer_free(w);
    gguf_close(&f);
    return ok;
}

static gguf_value u32(uint32_t v) { return (gguf_value){.type = GGUF_VT_UINT32, .v.u = v}; }
static gguf_value f32(float v) { return (gguf_value){.type = GGUF_VT_FLOAT32, .v.f = v}; }

/* Logits after 40 fixed tokens in a session of n_ctx positions (0: trained). */
static bool logits_after_prompt(const pkv_model *mc, int n_ctx, float *out) {
    pkv_model *m = (pkv_model *)mc;
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    so.cache_type_k = so.cache_type_v = PKV_CACHE_F32;
    so.n_threads = 2;
    so.n_ctx = n_ctx;
    pkv_error err;
    pkv_session *s = pkv_session_new(m, &so, &err);
    if (!s) {
        test_fail(__FILE__, __LINE__, "%s", err.msg);
        return false;
    }
    int32_t toks[40];
    for (int i = 0; i < 40; i++) toks[i] = 3 + (i * 37) % 400; /* ordinary pieces of every fixture vocabulary */
    bool ok = pkv_prefill(s, toks, 40, NULL, NULL, &err) == 0;
    if (ok) memcpy(out, pkv_logits(s), (size_t)pkv_n_vocab(m) * sizeof(float));
    else test_fail(__FILE__, __LINE__, "%s", err.msg);
    pkv_session_free(s);
    return ok;
}

static double max_abs_diff(const float *a, const float *b, int n) {
    double worst = 0;
    for (int i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= worst)) worst = d;
    }
    return worst;
}

/* The fixture edited by key (value or string str) moves the logits after the
 * prompt by more than min_change (if min_change > 0), or leaves them
 * bit-identical (min_change == 0). */
static void expect_change(const char *fixture, const char *key, const gguf_value *value, const char *str,
                          double min_change) {
    char path[512];
    temp_path(path, sizeof path, "change");
    if (!edit(fixture, path, key, value, str)) return;
    pkv_error err;
    pkv_model *a = pkv_model_load(fixture, NULL, &err), *b = pkv_model_load(path, NULL, &err);
    remove(path);
    CHECK_MSG(a && b, "%s with %s edited: %s", fixture, key, err.msg);
    if (a && b) {
        int nv = pkv_n_vocab(a);
        float *la = malloc((size_t)nv * sizeof(float)), *lb = malloc((size_t)nv * sizeof(float));
        if (logits_after_prompt(a, 0, la) && logits_after_prompt(b, 0, lb)) {
            double d = max_abs_diff(la, lb, nv);
            if (min_change > 0)
                CHECK_MSG(d > min_change, "%s: editing %s moves the logits by only %.3g", fixture, key, d);
            else
                CHECK_MSG(d == 0, "%s: editing %s moved the logits by %.3g", fixture, key, d);
        }
        free(la);
        free(lb);
    }
    pkv_model_free(a);
    pkv_model_free(b);
}

/* The fixture edited by key is refused with code and a one-line message containing want. */
static void expect_refusal(const char *fixture, const char *key, const gguf_value *value, const char *str,
                           pkv_status code, const char *want) {
    char path[512];
    temp_path(path, sizeof path, "refuse");
    if (!edit(fixture, path, key, value, str)) return;
    pkv_error err = {PKV_OK, ""};
    pkv_model *m = pkv_model_load(path, NULL, &err);
    remove(path);
    CHECK_MSG(!m && err.code == code && strstr(err.msg, want) && !strchr(err.msg, '\n'),
              "%s with %s edited: want error %d with \"%s\", got %s", fixture, key, (int)code, want,
              m ? "a loaded model" : err.msg);
    pkv_model_free(m);
}

/* ---------------------------------------------------------------- the list */

TEST(arch_supported_list_and_unknown_refused) {
    const char *want[] = {"llama", "qwen2", "qwen3", "gemma3", "phi3"};
    for (int i = 0; i < 5; i++) CHECK_STR(pkv_supported_arch(i), want[i]);
    CHECK(pkv_supported_arch(5) == NULL && pkv_supported_arch(-1) == NULL);
    pkv_error err;
    pkv_model *m = pkv_model_load(FIXTURE("bad/unknown-arch.gguf"), NULL, &err);
    CHECK(!m && err.code == PKV_ERR_UNSUPPORTED);
    CHECK_MSG(strstr(err.msg, "unsupported architecture 'mamba' (supported: llama, qwen2, qwen3, gemma3, phi3)"),
              "%s", err.msg);
    pkv_model_free(m);
}

/* ---------------------------------------------------------------- what the loader binds */

TEST(arch_qwen3_qk_norms_without_biases) {
    pkv_error err;
    pkv_model *m = pkv_model_load(QWEN3, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    pkv_model_info mi;
    pkv_model_get_info(m, &mi);
    CHECK_STR(mi.arch, "qwen3");
    CHECK_EQ_INT(mi.head_dim, 32); /* key_length: 4 heads of 32 over n_embd 64 */
    CHECK_EQ_INT(mi.n_swa_layers, 0);
    CHECK_STR(mi.rope_scaling, "none");
    for (int il = 0; il < mi.n_layer; il++) {
        const pkv_layer_weights *L = &m->layers[il];
        CHECK(pkv_tensor_present(&L->q_norm) && pkv_tensor_present(&L->k_norm));
        CHECK_EQ_INT(L->q_norm.ne[0], 32);
        CHECK(!pkv_tensor_present(&L->bq) && !pkv_tensor_present(&L->bk) && !pkv_tensor_present(&L->bv));
        CHECK_EQ_INT(L->wq.ne[1], 128);
    }
    CHECK(m->hp.rope_global.mode == PKV_ROPE_NEOX);
    pkv_model_free(m);
}

/* attn_qkv and ffn_up are split into row views of the mapped file: q, k, v
 * and gate, up follow each other in the fused tensors. */
TEST(arch_phi3_fused_tensors_and_sliding_layers) {
    pkv_error err;
    pkv_model *m = pkv_model_load(PHI3, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    pkv_model_info mi;
    pkv_model_get_info(m, &mi);
    CHECK_STR(mi.arch, "phi3");
    CHECK_EQ_INT(mi.sliding_window, 16);
    CHECK_EQ_INT(mi.n_swa_layers, mi.n_layer); /* every phi3 layer slides */
    CHECK_EQ_INT(m->hp.rope_global.n_rot, 8);  /* partial rotary: 8 of 16 dims */
    for (int il = 0; il < mi.n_layer; il++) {
        const pkv_layer_weights *L = &m->layers[il];
        CHECK_EQ_INT(L->wq.ne[1], 64);
        CHECK_EQ_INT(L->wk.ne[1], 32);
        CHECK_EQ_INT(L->wv.ne[1], 32);
        CHECK((const char *)L->wk.data == (const char *)L->wq.data + 64 * L->wq.row_bytes);
        CHECK((const char *)L->wv.data == (const char *)L->wk.data + 32 * L->wk.row_bytes);
        CHECK_EQ_INT(L->w_gate.ne[1], 128);
        CHECK_EQ_INT(L->w_up.ne[1], 128);
        CHECK((const char *)L->w_up.data == (const char *)L->w_gate.data + 128 * L->w_gate.row_bytes);
    }
    pkv_model_free(m);
    m = pkv_model_load(PHI3_SU, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    pkv_model_get_info(m, &mi);
    CHECK_EQ_INT(mi.n_swa_layers, 0); /* sliding_window 0: the converter's "none" */
    CHECK_STR(mi.rope_scaling, "longrope");
    CHECK_EQ_INT(mi.n_ctx_orig, 32);
    CHECK(m->hp.rope_long && m->hp.rope_short);
    CHECK_NEAR(m->hp.rope_global.attn_factor, 1.1832159566, 1e-6); /* sqrt(1 + ln 4 / ln 32) */
    pkv_model_free(m);
}

/* ---------------------------------------------------------------- each detail matters */

/* Without the window, with full rotary dims, without the magnitude scale, the
 * logits move by far more than the goldens' 1e-4: the fixtures pin each down.
 * The type key "longrope", which the converter does not write, changes nothing. */
TEST(arch_phi3_details_change_the_logits) {
    gguf_value none = u32(0), full_rot = u32(16), one = f32(1.0f);
    expect_change(PHI3, "phi3.attention.sliding_window", &none, NULL, 0.05);
    expect_change(PHI3, "phi3.rope.dimension_count", &full_rot, NULL, 0.05);
    expect_change(PHI3_SU, "phi3.rope.scaling.attn_factor", &one, NULL, 0.05);
    expect_change(PHI3_SU, "phi3.rope.scaling.type", NULL, "longrope", 0);
}

/* A window at least the trained context (Phi-3.5's 262144 over 131072) masks
 * nothing a session of that length holds: the layers stay full (and pressed),
 * the logits equal those without a window, and a longer session is refused. */
TEST(arch_phi3_window_past_the_context) {
    char path[512];
    temp_path(path, sizeof path, "window");
    gguf_value w128 = u32(128), w127 = u32(127), none = u32(0);
    REQUIRE(edit(PHI3, path, "phi3.attention.sliding_window", &w128, NULL));
    pkv_error err;
    pkv_model *m = pkv_model_load(path, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    pkv_model_info mi;
    pkv_model_get_info(m, &mi);
    CHECK_EQ_INT(mi.n_swa_layers, 0);
    CHECK_EQ_INT(mi.sliding_window, 0);
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    so.n_ctx = 129;
    pkv_session *s = pkv_session_new(m, &so, &err);
    CHECK_MSG(!s && err.code == PKV_ERR_UNSUPPORTED && strstr(err.msg, "context length 129") &&
                  strstr(err.msg, "sliding window 128"),
              "%s", s ? "a session" : err.msg);
    pkv_session_free(s);
    int nv = pkv_n_vocab(m);
    float *a = malloc((size_t)nv * sizeof(float)), *b = malloc((size_t)nv * sizeof(float));
    CHECK(logits_after_prompt(m, 128, a));
    pkv_model_free(m);
    REQUIRE(edit(PHI3, path, "phi3.attention.sliding_window", &none, NULL));
    m = pkv_model_load(path, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    CHECK(logits_after_prompt(m, 128, b));
    CHECK(!memcmp(a, b, (size_t)nv * sizeof(float)));
    pkv_model_free(m);
    REQUIRE(edit(PHI3, path, "phi3.attention.sliding_window", &w127, NULL));
    m = pkv_model_load(path, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    pkv_model_get_info(m, &mi);
    CHECK_EQ_INT(mi.n_swa_layers, mi.n_layer);
    pkv_model_free(m);
    remove(path);
    free(a);
    free(b);
}

/* LongRoPE's factor set is the session's (by its context length), so a cache
 * copied between sessions on either side of the original context would mix
 * the two rotations: refused. On the same side the copy works. */
TEST(arch_longrope_session_copy_needs_the_same_factors) {
    pkv_error err;
    pkv_model *m = pkv_model_load(PHI3_SU, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    so.n_ctx = 32;
    pkv_session *short_ctx = pkv_session_new(m, &so, &err);
    so.n_ctx = 64;
    pkv_session *mid = pkv_session_new(m, &so, &err);
    so.n_ctx = 128;
    pkv_session *long_ctx = pkv_session_new(m, &so, &err);
    REQUIRE(short_ctx && mid && long_ctx);
    int32_t toks[20];
    for (int i = 0; i < 20; i++) toks[i] = 10 + i;
    CHECK(pkv_prefill(short_ctx, toks, 20, NULL, NULL, &err) == 0);
    CHECK(pkv_prefill(mid, toks, 20, NULL, NULL, &err) == 0);
    CHECK(pkv_session_copy(long_ctx, short_ctx, NULL, NULL, &err) == -1 && strstr(err.msg, "same RoPE") &&
          strstr(err.msg, "original context 32"));
    CHECK(pkv_session_copy(long_ctx, mid, NULL, NULL, &err) == 0);
    CHECK(!memcmp(pkv_logits(long_ctx), pkv_logits(mid), (size_t)pkv_n_vocab(m) * sizeof(float)));
    /* the short session's first logits differ from the long ones: the factors were different */
    CHECK(memcmp(pkv_logits(short_ctx), pkv_logits(mid), (size_t)pkv_n_vocab(m) * sizeof(float)));
    pkv_session_free(short_ctx);
    pkv_session_free(mid);
    pkv_session_free(long_ctx);
    pkv_model_free(m);
}

/* ---------------------------------------------------------------- refusals */

TEST(arch_rope_scaling_refusals_name_the_key) {
    expect_refusal(PHI3_SU, "phi3.rope.scaling.type", NULL, "yarn", PKV_ERR_UNSUPPORTED,
                   "key phi3.rope.scaling.type = 'yarn' is not supported (none, linear, longrope)");
    expect_refusal(QWEN3, "qwen3.rope.scaling.type", NULL, "yarn", PKV_ERR_UNSUPPORTED,
                   "key qwen3.rope.scaling.type = 'yarn' is not supported (none, linear)");
    expect_refusal(QWEN3, "qwen3.rope.scaling.type", NULL, "longrope", PKV_ERR_UNSUPPORTED,
                   "key qwen3.rope.scaling.type = 'longrope' is not supported (none, linear)");
    /* longrope without its tensors */
    expect_refusal(PHI3, "phi3.rope.scaling.type", NULL, "longrope", PKV_ERR_FORMAT,
                   "key phi3.rope.scaling.type = 'longrope' needs tensors rope_factors_long.weight and "
                   "rope_factors_short.weight");
    /* longrope with a linear factor as well: the file's intent is unclear */
    char path[512];
    temp_path(path, sizeof path, "typed");
    REQUIRE(edit(PHI3_SU, path, "phi3.rope.scaling.type", NULL, "longrope"));
    gguf_value four = f32(4.0f);
    expect_refusal(path, "phi3.rope.scaling.factor", &four, NULL, PKV_ERR_UNSUPPORTED,
                   "key phi3.rope.scaling.factor = 4 with rope.scaling.type 'longrope' is not supported");
    remove(path);
    /* linear scaling stays what it was for every architecture */
    gguf_value two = f32(2.0f);
    expect_change(QWEN3, "qwen3.rope.scaling.factor", &two, NULL, 0.05);
}
