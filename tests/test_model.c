/*
 * Golden tests of the forward pass against HF transformers: logits recorded by
 * tools/make-model-fixtures.py for seeded random-weight tiny models of each
 * architecture (tests/fixtures/models/README.md), for every prompt position
 * and for decode steps after it.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/prng.h"
#include "engine/residual.h"
#include "engine/state.h"
#include "kernels/f16.h"
#include "model/model.h"
#include "model_ref.h"
#include "test.h"

typedef struct {
    const ref_data *ref;
    double max_abs, sum_sq;
    long n;
    int argmax_mismatch;  /* rows whose reference top-1 leads by >= decisive_gap and differs */
    double decisive_gap;
} cmp_acc;

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static void compare_row(cmp_acc *a, int row, const float *logits) {
    const float *want = a->ref->logits + (size_t)row * a->ref->n_vocab;
    for (int i = 0; i < a->ref->n_vocab; i++) {
        double d = fabs((double)logits[i] - want[i]);
        if (!(d <= a->max_abs)) a->max_abs = isnan(d) ? INFINITY : d;
        a->sum_sq += d * d;
        a->n++;
    }
    int best = argmax(want, a->ref->n_vocab);
    float second = -INFINITY;
    for (int i = 0; i < a->ref->n_vocab; i++)
        if (i != best && want[i] > second) second = want[i];
    if (want[best] - second >= a->decisive_gap && argmax(logits, a->ref->n_vocab) != best) a->argmax_mismatch++;
}

static void on_row(void *user, int index, const float *logits) { compare_row(user, index, logits); }

typedef struct {
    int n_threads;
    int n_batch;
    int n_ctx;           /* 0: the model's trained context */
    pkv_simd simd;
    bool exact_matmul;   /* dequantise weight rows and dot in f32 (no activation quantisation) */
    double decisive_gap; /* top-1 compared only where the reference leads by this much */
    pkv_residual_type residual; /* pkv_session_opts.residual_type */
    bool gguf_layout;    /* pkv_load_opts.gguf_layout: no interleaved weights */
} run_cfg;

/* Runs the fixture's prompt (all logits) and decode steps; fills acc. The
 * reference is <name>.ref, or <name><ref_suffix>.ref on the same model. */
static bool run_fixture_ref(const char *name, const char *ref_suffix, const run_cfg *cfg, cmp_acc *acc,
                            ref_data *ref) {
    char gguf_path[256], ref_path[256];
    snprintf(gguf_path, sizeof gguf_path, "tests/fixtures/models/%s.gguf", name);
    snprintf(ref_path, sizeof ref_path, "tests/fixtures/models/%s%s.ref", name, ref_suffix);
    if (!ref_load(ref_path, true, ref)) {
        test_fail(__FILE__, __LINE__, "cannot read %s", ref_path);
        return false;
    }
    pkv_error err;
    pkv_load_opts lo = {.simd = cfg->simd, .gguf_layout = cfg->gguf_layout};
    pkv_model *m = pkv_model_load(gguf_path, &lo, &err);
    if (!m) {
        test_fail(__FILE__, __LINE__, "%s", err.msg);
        return false;
    }
    pkv_kernels exact;
    if (cfg->exact_matmul) {
        exact = *m->kern;
        memset(exact.vec_dot, 0, sizeof exact.vec_dot);
        m->kern = &exact;
    }
    bool ok = false;
    if (pkv_n_vocab(m) != ref->n_vocab) {
        test_fail(__FILE__, __LINE__, "%s: vocab %d vs ref %d", name, pkv_n_vocab(m), ref->n_vocab);
        goto out;
    }
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    so.cache_type_k = so.cache_type_v = PKV_CACHE_F32;
    so.n_threads = cfg->n_threads;
    so.n_batch = cfg->n_batch;
    so.n_ctx = cfg->n_ctx;
    so.residual_type = cfg->residual;
    pkv_session *s = pkv_session_new(m, &so, &err);
    if (!s) {
        test_fail(__FILE__, __LINE__, "%s", err.msg);
        goto out;
    }
    memset(acc, 0, sizeof *acc);
    acc->ref = ref;
    acc->decisive_gap = cfg->decisive_gap;
    if (pkv_eval(s, ref->tokens, ref->n_prompt, on_row, acc, &err)) {
        test_fail(__FILE__, __LINE__, "%s: %s", name, err.msg);
    } else {
        ok = true;
        for (int i = 0; i < ref->n_decode && ok; i++) {
            if (pkv_decode(s, ref->tokens[ref->n_prompt + i], &err)) {
                test_fail(__FILE__, __LINE__, "%s decode %d: %s", name, i, err.msg);
                ok = false;
            } else {
                compare_row(acc, ref->n_prompt + i, pkv_logits(s));
            }
        }
    }
    pkv_session_free(s);
out:
    pkv_model_free(m);
    return ok;
}

/* Checks one fixture against a max |Δlogit| bound (and optionally an rms bound). */
static void check_fixture_ref(const char *name, const char *ref_suffix, const run_cfg *cfg, double max_tol,
                              double rms_tol, int max_argmax_miss) {
    ref_data ref;
    cmp_acc acc;
    if (run_fixture_ref(name, ref_suffix, cfg, &acc, &ref)) {
        double rms = sqrt(acc.sum_sq / (acc.n ? acc.n : 1));
        CHECK_MSG(acc.max_abs <= max_tol, "%s (threads %d, batch %d, simd %s%s): max |dlogit| %.3g > %.3g", name,
                  cfg->n_threads, cfg->n_batch, pkv_simd_name(cfg->simd), cfg->exact_matmul ? ", exact" : "",
                  acc.max_abs, max_tol);
        CHECK_MSG(rms <= rms_tol, "%s: rms |dlogit| %.3g > %.3g", name, rms, rms_tol);
        CHECK_MSG(acc.argmax_mismatch <= max_argmax_miss, "%s: top-1 differs on %d of %d rows", name,
                  acc.argmax_mismatch, ref.n_prompt + ref.n_decode);
    }
    ref_free(&ref);
}

static void check_fixture(const char *name, const run_cfg *cfg, double max_tol, double rms_tol, int max_argmax_miss) {
    check_fixture_ref(name, "", cfg, max_tol, rms_tol, max_argmax_miss);
}

static const char *FLOAT_FIXTURES[] = {
    "tiny-llama-f32", "tiny-llama31-f32", "tiny-qwen2-f32", "tiny-gemma3-f32", "tiny-qwen3-f32",
    "tiny-phi3-f32",  "tiny-phi3-su-f32", "tiny-llama-f16", "tiny-llama31-f16", "tiny-qwen2-f16",
    "tiny-gemma3-f16", "tiny-qwen3-f16",  "tiny-phi3-f16",  "tiny-phi3-su-f16",
};

static const char *QUANT_FIXTURES[] = {
    "tiny-llama-q8_0",  "tiny-llama31-q8_0", "tiny-qwen2-q8_0",   "tiny-gemma3-q8_0", "tiny-qwen3-q8_0",
    "tiny-phi3-q8_0",   "tiny-phi3-su-q8_0", "tiny-llama-q4_0",   "tiny-llama-q5_0",  "tiny-llama-k-q4_k",
    "tiny-llama-k-q5_k", "tiny-llama-k-q6_k",
};

/* F32 and F16 weights run with f32 activations: the engine must agree with
 * transformers to 1e-4 (the bound), in one prefill and in chunks of 7
 * tokens (so chunk boundaries, the sliding window of 16 and the causal mask
 * across chunks are all exercised). */
TEST(model_golden_float_weights) {
    run_cfg one = {.n_threads = 2, .n_batch = 512};
    run_cfg chunked = {.n_threads = 2, .n_batch = 7};
    for (size_t i = 0; i < sizeof FLOAT_FIXTURES / sizeof *FLOAT_FIXTURES; i++) {
        check_fixture(FLOAT_FIXTURES[i], &one, 1e-4, 1e-4, 0);
        check_fixture(FLOAT_FIXTURES[i], &chunked, 1e-4, 1e-4, 0);
    }
}

/* Quantised weights, dequantised and dotted in f32: the same 1e-4 against
 * transformers run on the dequantised weights. */
TEST(model_golden_quant_exact) {
    run_cfg cfg = {.n_threads = 2, .n_batch = 512, .exact_matmul = true};
    for (size_t i = 0; i < sizeof QUANT_FIXTURES / sizeof *QUANT_FIXTURES; i++) check_fixture(QUANT_FIXTURES[i], &cfg, 1e-4, 1e-4, 0);
}

/* Quantised weights with the fused integer dot products: activations are
 * quantised to Q8_0 / Q8_K as llama.cpp does, which moves logits by up to
 * ~0.6 on these small random models (llama.cpp itself shows 0.16..0.57 against
 * the same references; tests/fixtures/models/README.md). Bound max and rms,
 * and require the top token to agree wherever the reference's top token
 * leads the runner-up by at least 0.5 (twice the rms error). */
TEST(model_golden_quant_fused) {
    run_cfg cfg = {.n_threads = 2, .n_batch = 512, .decisive_gap = 0.5};
    for (size_t i = 0; i < sizeof QUANT_FIXTURES / sizeof *QUANT_FIXTURES; i++) check_fixture(QUANT_FIXTURES[i], &cfg, 1.0, 0.12, 0);
}

/* The legacy types' weights are interleaved by 8 rows at load where the CPU
 * has the decode kernel (kernels/repack.h); the fixtures' are (every matrix
 * has a multiple of 8 rows), and with or without it the fused path is as
 * close to transformers as model_golden_quant_fused asks. */
TEST(model_interleaved_weights_and_file_layout) {
    static const char *names[] = {"tiny-llama-q8_0", "tiny-llama-q5_0", "tiny-llama-q4_0", "tiny-gemma3-q8_0"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char path[256];
        snprintf(path, sizeof path, "tests/fixtures/models/%s.gguf", names[i]);
        pkv_error err;
        pkv_model *m = pkv_model_load(path, NULL, &err);
        REQUIRE_MSG(m, "%s", err.msg);
        int n_x8 = m->output.x8;
        for (int il = 0; il < m->hp.n_layer; il++)
            n_x8 += m->layers[il].wq.x8 + m->layers[il].wo.x8 + m->layers[il].w_up.x8 + m->layers[il].w_down.x8;
        const bool expected = m->kern->matvec_x8[m->layers[0].wq.type] != NULL;
        CHECK_MSG(!expected || n_x8 == 1 + 4 * m->hp.n_layer, "%s: %d of %d weights interleaved", names[i], n_x8,
                  1 + 4 * m->hp.n_layer);
        CHECK_MSG(expected || n_x8 == 0, "%s: interleaved without the kernel", names[i]);
        pkv_model_free(m);
        for (int layout = 0; layout < 2; layout++) {
            run_cfg cfg = {.n_threads = 2, .n_batch = 512, .decisive_gap = 0.5, .gguf_layout = layout};
            check_fixture(names[i], &cfg, 1.0, 0.12, 0);
        }
    }
}

/* LongRoPE (docs/engine.md §5.3): a session whose context is no longer than
 * the original context (32 in tiny-phi3-su) rotates with the short factors,
 * and matches HF run on a 32-token sequence (which takes the short factors by
 * its length); the same tokens in a longer session take the long factors and
 * differ from that reference by far more than the tolerance. */
TEST(model_golden_longrope_short_factors) {
    run_cfg short_ctx = {.n_threads = 2, .n_batch = 512, .n_ctx = 32};
    run_cfg chunked = {.n_threads = 2, .n_batch = 7, .n_ctx = 32};
    check_fixture_ref("tiny-phi3-su-f32", "-short", &short_ctx, 1e-4, 1e-4, 0);
    check_fixture_ref("tiny-phi3-su-f32", "-short", &chunked, 1e-4, 1e-4, 0);
    check_fixture_ref("tiny-phi3-su-f16", "-short", &short_ctx, 1e-4, 1e-4, 0);
    run_cfg exact = {.n_threads = 2, .n_batch = 512, .n_ctx = 32, .exact_matmul = true};
    check_fixture_ref("tiny-phi3-su-q8_0", "-short", &exact, 1e-4, 1e-4, 0);
    run_cfg long_ctx = {.n_threads = 2, .n_batch = 512, .n_ctx = 33};
    ref_data ref;
    cmp_acc acc;
    if (run_fixture_ref("tiny-phi3-su-f32", "-short", &long_ctx, &acc, &ref))
        CHECK_MSG(acc.max_abs > 0.05, "n_ctx 33 (long factors) is within %.3g of the short-factor reference",
                  acc.max_abs);
    ref_free(&ref);
}

/* Same logits with any thread count and any SIMD path (within float tolerance). */
TEST(model_threads_and_simd_agree) {
    const char *names[] = {"tiny-gemma3-q8_0", "tiny-llama-k-q4_k", "tiny-qwen2-f16", "tiny-phi3-q8_0"};
    pkv_simd levels[] = {PKV_SIMD_SCALAR, PKV_SIMD_AVX2, PKV_SIMD_AVX512};
    for (size_t n = 0; n < sizeof names / sizeof *names; n++) {
        for (int t = 1; t <= 3; t++) {
            for (size_t l = 0; l < 3; l++) {
                run_cfg cfg = {.n_threads = t, .n_batch = 11, .simd = levels[l], .decisive_gap = 0.5};
                check_fixture(names[n], &cfg, 1.0, 0.12, 0);
            }
        }
    }
}

/* Bit-identical results across thread counts: every output element is
 * computed by one thread in a fixed order. */
TEST(model_threads_bit_identical) {
    ref_data ref;
    if (!ref_load("tests/fixtures/models/tiny-gemma3-q8_0.ref", true, &ref)) {
        test_fail(__FILE__, __LINE__, "cannot read ref");
        return;
    }
    pkv_error err;
    pkv_model *m = pkv_model_load("tests/fixtures/models/tiny-gemma3-q8_0.gguf", NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    float *first = malloc((size_t)ref.n_vocab * sizeof(float));
    for (int t = 1; t <= 4; t++) {
        pkv_session_opts so;
        pkv_session_opts_default(&so);
        so.n_threads = t;
        pkv_session *s = pkv_session_new(m, &so, &err);
        REQUIRE_MSG(s, "%s", err.msg);
        CHECK(pkv_prefill(s, ref.tokens, ref.n_prompt, NULL, NULL, &err) == 0);
        for (int i = 0; i < ref.n_decode; i++) CHECK(pkv_decode(s, ref.tokens[ref.n_prompt + i], &err) == 0);
        if (t == 1) memcpy(first, pkv_logits(s), (size_t)ref.n_vocab * sizeof(float));
        else CHECK_MSG(!memcmp(first, pkv_logits(s), (size_t)ref.n_vocab * sizeof(float)), "threads %d differ", t);
        pkv_session_free(s);
    }
    free(first);
    pkv_model_free(m);
    ref_free(&ref);
}

/* The KV cache in f16 (the default) stays close to the f32 reference. */
TEST(model_f16_cache_close) {
    ref_data ref;
    REQUIRE(ref_load("tests/fixtures/models/tiny-llama-f32.ref", true, &ref));
    pkv_error err;
    pkv_model *m = pkv_model_load("tests/fixtures/models/tiny-llama-f32.gguf", NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    pkv_session *s = pkv_session_new(m, NULL, &err);
    REQUIRE_MSG(s, "%s", err.msg);
    cmp_acc acc = {.ref = &ref};
    CHECK(pkv_eval(s, ref.tokens, ref.n_prompt, on_row, &acc, &err) == 0);
    CHECK_MSG(acc.max_abs < 2e-2 && acc.max_abs > 0, "f16 cache max |dlogit| %.3g", acc.max_abs);
    pkv_session_free(s);
    pkv_model_free(m);
    ref_free(&ref);
}

/* The residual stream at 16 bits: every row comes back within f16's relative
 * precision (2^-11) whatever its range, with the smallest power-of-two scale
 * that fits it; inf and NaN stay what they were. Q8_0: each value within half
 * a step of its block's scale, d = largest / 127, plus 127 times the error of
 * storing d in f16 (the quantiser divides by d before rounding it). */
TEST(residual_pack_row_range_and_precision) {
    pkv_rng rng;
    pkv_rng_seed(&rng, 7);
    enum { D = 96 };
    const pkv_simd levels[] = {PKV_SIMD_SCALAR, PKV_SIMD_AUTO};
    const float mags[] = {1e-3f, 1.0f, 300.0f, 32767.0f, 32768.0f, 65504.0f, 7e4f, 3e6f, 1e9f};
    for (int li = 0; li < 2; li++) {
        const pkv_kernels *k = pkv_kernels_get(levels[li]);
        for (size_t mi = 0; mi < sizeof mags / sizeof *mags; mi++) {
            float x[D], row[D], y[D];
            uint16_t packed[D];
            for (int i = 0; i < D; i++) x[i] = ((float)pkv_rng_uniform(&rng) * 2.0f - 1.0f) * mags[mi];
            x[5] = mags[mi]; /* the row's largest value, exactly */
            memcpy(row, x, sizeof row);
            int e = pkv_residual_pack_row(k, PKV_RESIDUAL_F16, row, D, packed);
            pkv_residual_unpack_row(k, PKV_RESIDUAL_F16, packed, e, D, y);
            CHECK_MSG(ldexpf(mags[mi], -e) < 32768.0f && (e == 0 || ldexpf(mags[mi], 1 - e) >= 32768.0f),
                      "max %g: exponent %d is not the smallest that fits", mags[mi], e);
            for (int i = 0; i < D; i++) {
                /* below f16's normal range the step is 2^-24, scaled like the row */
                double tol = fabs(x[i]) * 0x1p-11 + ldexp(1.0, e - 24);
                CHECK_MSG(fabs(y[i] - x[i]) <= tol, "f16, max %g, value %d: %.9g came back as %.9g", mags[mi], i,
                          x[i], y[i]);
            }
            if (mags[mi] > 1e6f) continue; /* Q8_0's f16 block scale holds up to 65504 * 127 */
            uint8_t q[D / 32 * 34];
            CHECK(pkv_residual_row_bytes(PKV_RESIDUAL_Q8_0, D) == sizeof q);
            memcpy(row, x, sizeof row);
            CHECK(pkv_residual_pack_row(k, PKV_RESIDUAL_Q8_0, row, D, q) == 0);
            pkv_residual_unpack_row(k, PKV_RESIDUAL_Q8_0, q, 0, D, y);
            for (int b0 = 0; b0 < D; b0 += 32) {
                float bmax = 0.0f;
                for (int i = b0; i < b0 + 32; i++) bmax = fmaxf(bmax, fabsf(x[i]));
                float d = bmax / 127.0f, d16 = pkv_f16_to_f32(pkv_f32_to_f16(d));
                double tol = 0.5 * d16 + 127.0 * fabs(d16 - d) + 1e-6 * d;
                for (int i = b0; i < b0 + 32; i++)
                    CHECK_MSG(fabs(y[i] - x[i]) <= tol, "q8_0, max %g, value %d: %.9g came back as %.9g", mags[mi], i,
                              x[i], y[i]);
            }
        }
        float inf_row[4] = {1.0f, INFINITY, -2.0f, NAN}, back[4];
        uint16_t p4[4];
        int e = pkv_residual_pack_row(k, PKV_RESIDUAL_F16, inf_row, 4, p4);
        pkv_residual_unpack_row(k, PKV_RESIDUAL_F16, p4, e, 4, back);
        CHECK(e == 0 && back[0] == 1.0f && isinf(back[1]) && back[2] == -2.0f && isnan(back[3]));
    }
    CHECK(pkv_residual_row_bytes(PKV_RESIDUAL_Q8_0, 40) == 0 && pkv_residual_row_bytes(PKV_RESIDUAL_F32, 64) == 0);
}

/* A prefill that keeps its residual stream in f16 or q8_0 stays close to the
 * reference on every architecture (chunks of 7 tokens: the packed path), and
 * a call of one chunk is untouched by the option (bit-identical logits). Q8_0
 * is the quantiser the fused matmuls apply to their inputs: bounded as
 * model_golden_quant_fused bounds those, the top token compared where the
 * reference leads by 0.5. */
TEST(model_residual_types_close) {
    const pkv_residual_type types[] = {PKV_RESIDUAL_F16, PKV_RESIDUAL_Q8_0};
    const double tol[] = {2e-2, 1.0}, gap[] = {0.0, 0.5};
    for (size_t i = 0; i < sizeof FLOAT_FIXTURES / sizeof *FLOAT_FIXTURES; i++)
        for (int ti = 0; ti < 2; ti++) {
            run_cfg packed = {.n_threads = 2, .n_batch = 7, .residual = types[ti], .decisive_gap = gap[ti]};
            ref_data ref = {0};
            cmp_acc acc;
            if (run_fixture_ref(FLOAT_FIXTURES[i], "", &packed, &acc, &ref)) {
                CHECK_MSG(acc.max_abs < tol[ti] && acc.max_abs > 1e-6, "%s: %s residual max |dlogit| %.3g",
                          FLOAT_FIXTURES[i], pkv_residual_type_name(types[ti]), acc.max_abs);
                CHECK_MSG(acc.argmax_mismatch == 0, "%s: %s residual: top-1 differs on %d rows", FLOAT_FIXTURES[i],
                          pkv_residual_type_name(types[ti]), acc.argmax_mismatch);
            }
            ref_free(&ref);
            run_cfg one = {.n_threads = 2, .n_batch = 512}, one_packed = one;
            one_packed.residual = types[ti];
            cmp_acc a32, a16;
            ref_data r32 = {0}, r16 = {0};
            if (run_fixture_ref(FLOAT_FIXTURES[i], "", &one, &a32, &r32) &&
                run_fixture_ref(FLOAT_FIXTURES[i], "", &one_packed, &a16, &r16))
                CHECK_MSG(a32.max_abs == a16.max_abs && a32.sum_sq == a16.sum_sq,
                          "%s: one chunk differs with a %s residual (%.9g vs %.9g)", FLOAT_FIXTURES[i],
                          pkv_residual_type_name(types[ti]), a32.max_abs, a16.max_abs);
            ref_free(&r32);
            ref_free(&r16);
        }
}

/* A prompt longer than the context is a clear error, not a crash. */
TEST(model_context_limit) {
    pkv_error err;
    pkv_model *m = pkv_model_load("tests/fixtures/models/tiny-llama-q8_0.gguf", NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    so.n_ctx = 8;
    pkv_session *s = pkv_session_new(m, &so, &err);
    REQUIRE(s);
    int32_t toks[9] = {5, 6, 7, 8, 9, 10, 11, 12, 13};
    CHECK(pkv_prefill(s, toks, 9, NULL, NULL, &err) == -1);
    CHECK(err.code == PKV_ERR_LIMIT);
    CHECK(strstr(err.msg, "context length 8") != NULL);
    CHECK(pkv_prefill(s, toks, 8, NULL, NULL, &err) == 0);
    CHECK(pkv_decode(s, 5, &err) == -1 && err.code == PKV_ERR_LIMIT);
    int32_t bad = 1 << 20;
    pkv_session_reset(s);
    CHECK(pkv_prefill(s, &bad, 1, NULL, NULL, &err) == -1 && err.code == PKV_ERR_ARG);
    pkv_session_free(s);
    pkv_model_free(m);
}
