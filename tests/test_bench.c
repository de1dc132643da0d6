/*
 * bench: the arithmetic (statistics, bytes a decode step reads, the
 * bandwidth-bound fraction, the memory-cap solve), the report formats, and
 * short real runs on the tiny fixture model. Expected values are computed by
 * hand from the definitions and the fixture's shape
 * (tests/fixtures/models/README.md); no timing is asserted.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "bench/bench.h"
#include "test.h"

#define TINY FIXTURE("models/tiny-llama-f32.gguf")
#define TINY31 FIXTURE("models/tiny-llama31-f32.gguf")

TEST(bench_stat_min_median_mean_stddev) {
    pkv_bench_stat s;
    const double odd[] = {3, 1, 2, 5, 4};
    pkv_bench_stat_of(odd, 5, &s);
    CHECK_EQ_INT(s.n, 5);
    CHECK_NEAR(s.min, 1, 0);
    CHECK_NEAR(s.max, 5, 0);
    CHECK_NEAR(s.median, 3, 0);
    CHECK_NEAR(s.mean, 3, 1e-12);
    CHECK_NEAR(s.stddev, sqrt(2.5), 1e-12); /* sample: sum of squares 10 over n - 1 = 4 */
    const double even[] = {10, 1, 3, 2};
    pkv_bench_stat_of(even, 4, &s);
    CHECK_NEAR(s.median, 2.5, 0);
    const double one[] = {7};
    pkv_bench_stat_of(one, 1, &s);
    CHECK_NEAR(s.median, 7, 0);
    CHECK_NEAR(s.stddev, 0, 0);
}

TEST(bench_bandwidth_bound_fraction) {
    /* 1 GB per token at 20 GB/s takes at least 50 ms; a 100 ms step reaches half the bound */
    CHECK_NEAR(pkv_bench_bw_fraction(1000000000ull, 0.100, 20e9), 0.5, 1e-12);
    CHECK_NEAR(pkv_bench_bw_fraction(1000000000ull, 0.050, 20e9), 1.0, 1e-12);
    CHECK_NEAR(pkv_bench_bw_fraction(0, 0.1, 20e9), 0.0, 0);
    CHECK_NEAR(pkv_bench_bw_fraction(1000, 0.0, 20e9), 0.0, 0);
    CHECK_NEAR(pkv_bench_bw_fraction(1000, 0.1, 0.0), 0.0, 0);
}

/* tiny-llama: 2 layers, n_embd 64, 4/2 heads of 16, n_ff 128, vocab 512,
 * untied, all F32. Per layer 2*64 (norms) + 64*64 (q) + 2*64*32 (k, v)
 * + 64*64 (o) + 3*64*128 (ffn) = 36992 floats; plus output_norm 64, output
 * 64*512 and one embedding row of 64. tiny-llama31 is tied (token_embd is
 * the output matrix, read whole) and adds rope_freqs (8 floats). */
TEST(bench_decode_reads_every_weight_once) {
    pkv_error err;
    pkv_model *m = pkv_model_load(TINY, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    CHECK_EQ_INT(pkv_bench_weight_bytes_per_token(m), (2 * 36992 + 64 + 64 * 512 + 64) * 4);
    pkv_model_free(m);
    m = pkv_model_load(TINY31, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    CHECK_EQ_INT(pkv_bench_weight_bytes_per_token(m), (2 * 36992 + 64 + 64 * 512 + 8) * 4);
    pkv_model_free(m);
}

TEST(bench_memfit_solve_bisects_the_linear_fit) {
    /* 100 + 10 n <= 1000  <=>  n <= 90 */
    CHECK_EQ_INT(pkv_bench_memfit_solve(100, 10, 1000, 1 << 20), 90);
    CHECK_EQ_INT(pkv_bench_memfit_solve(100, 10, 1009, 1 << 20), 90);
    CHECK_EQ_INT(pkv_bench_memfit_solve(100, 10, 1010, 1 << 20), 91);
    CHECK_EQ_INT(pkv_bench_memfit_solve(2000, 10, 1000, 1 << 20), 0);
    CHECK_EQ_INT(pkv_bench_memfit_solve(0, 1, 1ull << 40, 1000), 1000);
}

TEST(bench_random_tokens_like_llama_bench) {
    int32_t t[1000];
    uint64_t st = 42;
    pkv_bench_random_tokens(&st, 512, 1, true, t, 1000);
    CHECK_EQ_INT(t[0], 1);
    bool in_range = true, varied = false;
    for (int i = 1; i < 1000; i++) {
        in_range &= t[i] >= 0 && t[i] < 512;
        varied |= t[i] != t[1];
    }
    CHECK(in_range && varied);
    int32_t u[1000];
    st = 42;
    pkv_bench_random_tokens(&st, 512, 1, true, u, 1000);
    CHECK(memcmp(t, u, sizeof t) == 0);
    st = 42;
    pkv_bench_random_tokens(&st, 512, 1, false, u, 1);
    CHECK(u[0] != 1 || t[1] == 1); /* without BOS the first id is random */
}

/* Fields of one CSV line, quotes respected (RFC 4180). */
static int csv_fields(const char *line) {
    int n = 1;
    bool quoted = false;
    for (const char *p = line; *p && *p != '\n'; p++) {
        if (*p == '"') quoted = !quoted;
        else if (*p == ',' && !quoted) n++;
    }
    return n;
}

static void fake_result(pkv_bench_result *r, pkv_bench_kind kind, const char *press, int n_prompt, double ms) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    snprintf(r->test, sizeof r->test, "tg32@d%d", n_prompt);
    snprintf(r->press, sizeof r->press, "%s", press);
    r->n_prompt = n_prompt;
    r->n_gen = 32;
    r->n_threads = 2;
    r->reps = 3;
    r->ms_per_token.median = ms;
    r->tok_per_s.median = 1000.0 / ms;
}

TEST(bench_csv_has_one_header_and_equal_columns) {
    pkv_bench_result r[3];
    fake_result(&r[0], PKV_BENCH_PP, "none", 512, 2.0);
    fake_result(&r[1], PKV_BENCH_DEPTH, "snapkv budget=1024 window=32", 4096, 30.0);
    fake_result(&r[2], PKV_BENCH_DEPTH, "odd, \"quoted\" press", 4096, 31.0);
    FILE *f = tmpfile();
    REQUIRE(f);
    pkv_bench_print_csv(f, r, 3);
    rewind(f);
    char line[2048];
    int lines = 0;
    while (fgets(line, sizeof line, f)) {
        CHECK_EQ_INT(csv_fields(line), pkv_bench_csv_columns());
        if (lines == 0) CHECK(!strncmp(line, "test,kind,press,", 16));
        if (lines == 3) CHECK(strstr(line, "\"odd, \"\"quoted\"\" press\"") != NULL);
        lines++;
    }
    fclose(f);
    CHECK_EQ_INT(lines, 4);
}

TEST(bench_svg_draws_one_line_per_press) {
    pkv_bench_result r[7];
    int depths[3] = {1024, 4096, 16384};
    for (int i = 0; i < 3; i++) {
        fake_result(&r[2 * i], PKV_BENCH_DEPTH, "none", depths[i], 10.0 * (i + 1));
        fake_result(&r[2 * i + 1], PKV_BENCH_DEPTH, "snapkv budget=1024 window=32", depths[i], 8.0);
    }
    fake_result(&r[6], PKV_BENCH_PP, "none", 512, 1.0); /* not a depth result: not drawn */
    FILE *f = tmpfile();
    REQUIRE(f);
    CHECK_EQ_INT(pkv_bench_write_svg(f, r, 7, "a <title> & more"), 2);
    long size = ftell(f);
    rewind(f);
    char *buf = calloc(1, (size_t)size + 1);
    REQUIRE(buf && fread(buf, 1, (size_t)size, f) == (size_t)size);
    fclose(f);
    CHECK(!strncmp(buf, "<svg", 4));
    CHECK(strstr(buf, "</svg>\n") != NULL);
    int polylines = 0, circles = 0;
    for (const char *p = buf; (p = strstr(p, "<polyline")); p++) polylines++;
    for (const char *p = buf; (p = strstr(p, "<circle")); p++) circles++;
    CHECK_EQ_INT(polylines, 2);
    CHECK_EQ_INT(circles, 6);
    CHECK(strstr(buf, "a &lt;title&gt; &amp; more") != NULL);
    CHECK(strstr(buf, ">16K<") != NULL);
    free(buf);
}

TEST(bench_membw_and_rss_report_something) {
    double bw = 0;
    pkv_error err;
    REQUIRE_MSG(pkv_bench_membw(8 << 20, 1, 1, &bw, &err) == 0, "%s", err.msg);
    CHECK(bw > 1e8); /* any machine reads faster than 100 MB/s */
    CHECK(pkv_bench_membw(100, 1, 1, &bw, &err) == -1);
    uint64_t now = pkv_bench_rss_now();
    CHECK(now > 0);
    CHECK(pkv_bench_rss_peak() >= now);
}

/* The probe answers every request from its own process, and a stopped
 * probe's child is gone (no zombie left: waitpid in stop). */
TEST(bench_membw_probe_reads_on_demand) {
    pkv_error err;
    CHECK(pkv_membw_probe_start(100, 1, 1, &err) == NULL);
    pkv_membw_probe *p = pkv_membw_probe_start(8 << 20, 1, 1, &err);
    REQUIRE_MSG(p, "%s", err.msg);
    const uint64_t rss_before = pkv_bench_rss_now();
    for (int i = 0; i < 3; i++) {
        double bw = 0;
        CHECK_MSG(pkv_membw_probe_read(p, &bw, &err) == 0, "%s", err.msg);
        CHECK(bw > 1e8);
    }
    /* the buffer is the child's: this process did not grow by its 8 MiB */
    CHECK(pkv_bench_rss_now() < rss_before + (4u << 20));
    pkv_membw_probe_stop(p);
}

/* Paired streams on the tiny model: one stream and n streams, every
 * repetition's ratio of the two, and the caches of the streams it stepped
 * (all of one depth: n times stream 1's). A count below 2 is refused. */
TEST(bench_streams_paired_times_both_in_every_repetition) {
    pkv_error err;
    pkv_model *m = pkv_model_load(TINY, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    pkv_bench_opts o;
    pkv_bench_opts_default(&o);
    o.n_threads = 2;
    o.reps = 3;
    pkv_bench_result r[2];
    CHECK(pkv_bench_streams_paired(m, &o, 1, 24, 3, NULL, r, &err) == -1 && err.code == PKV_ERR_ARG);
    REQUIRE_MSG(pkv_bench_streams_paired(m, &o, 3, 24, 3, NULL, r, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(r[0].n_streams, 1);
    CHECK_EQ_INT(r[1].n_streams, 3);
    CHECK(r[0].batched && r[1].batched);
    CHECK(!strcmp(r[0].test, "tg3@d24 x1 paired") && !strcmp(r[1].test, "tg3@d24 x3 paired"));
    CHECK_EQ_INT(r[0].tok_per_s.n, 3);
    CHECK_EQ_INT(r[1].tok_per_s.n, 3);
    CHECK_EQ_INT(r[0].paired_ratio.n, 0);
    CHECK_EQ_INT(r[1].paired_ratio.n, 3);
    CHECK(r[0].cache_bytes > 0);
    CHECK_EQ_INT(r[1].cache_bytes, 3 * r[0].cache_bytes);
    CHECK_EQ_INT(r[1].cache_bytes_full, 3 * r[0].cache_bytes_full);
    /* each repetition's ratio lies between the extremes the two runs allow */
    const pkv_bench_stat *q = &r[1].paired_ratio;
    CHECK(q->min > 0 && q->min <= q->median && q->median <= q->max);
    CHECK(q->min >= r[1].tok_per_s.min / r[0].tok_per_s.max * (1 - 1e-9));
    CHECK(q->max <= r[1].tok_per_s.max / r[0].tok_per_s.min * (1 + 1e-9));
    pkv_model_free(m);
}

/* Readings handed out in turn by a fake probe; fails after `fail_after`. */
typedef struct {
    double values[4];
    int calls, fail_after;
} fake_bw;

static int fake_read_bw(void *user, double *bw, pkv_error *err) {
    fake_bw *f = user;
    if (f->calls >= f->fail_after) return pkv_fail(err, PKV_ERR_IO, "fake probe: no reading %d", f->calls);
    *bw = f->values[f->calls++ % 4];
    return 0;
}

static pkv_bench_opts quick_opts(void) {
    pkv_bench_opts o;
    pkv_bench_opts_default(&o);
    o.reps = 2;
    o.n_threads = 2;
    o.mem_bw = 10e9;
    return o;
}

/* Cache bytes per kept row of one head: key + value in f16 and a position:
 * 2 * 16 * 2 + 4 = 68 bytes; 2 layers x 2 KV heads. */
TEST(bench_runs_on_the_tiny_model) {
    pkv_error err;
    pkv_model *m = pkv_model_load(TINY, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    pkv_bench_opts o = quick_opts();
    pkv_bench_result pp, tg, d[4];
    REQUIRE_MSG(pkv_bench_prefill(m, &o, 48, NULL, &pp, &err) == 0, "%s", err.msg);
    CHECK_STR(pp.test, "pp48");
    CHECK_STR(pp.press, "none");
    CHECK_EQ_INT(pp.tok_per_s.n, 2);
    CHECK(pp.tok_per_s.min > 0);
    CHECK_EQ_INT(pp.cache_bytes, 2 * 2 * 48 * 68);
    CHECK_EQ_INT(pp.cache_bytes_full, pp.cache_bytes);

    REQUIRE_MSG(pkv_bench_decode(m, &o, 8, &tg, &err) == 0, "%s", err.msg);
    CHECK_STR(tg.test, "tg8");
    CHECK_EQ_INT(tg.cache_bytes, 2 * 2 * 8 * 68);
    CHECK(tg.bw_fraction > 0);

    pkv_press_cfg *snap = pkv_press_cfg_new("snapkv", &err);
    REQUIRE(snap);
    REQUIRE(pkv_press_cfg_set(snap, "budget", "40", &err) == 0 && pkv_press_cfg_set(snap, "window", "8", &err) == 0);
    const pkv_press_cfg *presses[2] = {NULL, snap};
    int depths[2] = {64, 96};
    for (int shared = 0; shared < 2; shared++) {
        REQUIRE_MSG(pkv_bench_depths(m, &o, depths, 2, 4, presses, 2, shared, d, &err) == 0, "%s", err.msg);
        CHECK_STR(d[0].test, "tg4@d64");
        CHECK_STR(d[0].press, "none");
        CHECK(strstr(d[1].press, "snapkv") != NULL);
        CHECK_STR(d[3].test, "tg4@d96");
        CHECK_EQ_INT(d[2].cache_bytes, 2 * 2 * 96 * 68);   /* full cache */
        CHECK_EQ_INT(d[3].cache_bytes, 2 * 2 * 40 * 68);   /* the budget's rows */
        CHECK_EQ_INT(d[3].cache_bytes_full, 2 * 2 * 96 * 68);
        CHECK(d[3].press_seconds > 0 && d[3].press_share > 0 && d[3].press_share < 1);
        CHECK(d[3].shared_prefill == (shared != 0));
        CHECK(d[3].decode_bytes_per_token < d[2].decode_bytes_per_token);
        CHECK_EQ_INT(d[2].ms_per_token.n, 2);
    }
    pkv_press_cfg_free(snap);
    pkv_model_free(m);
}

TEST(bench_memfit_measures_probes) {
    pkv_error err;
    pkv_model *m = pkv_model_load(TINY, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    pkv_bench_opts o = quick_opts();
    pkv_bench_memfit fit;
    int probes[2] = {64, 128};
    REQUIRE_MSG(pkv_bench_mem_fit(m, &o, 64ull << 20, NULL, probes, 2, &fit, &err) == 0, "%s", err.msg);
    CHECK_STR(fit.press, "none");
    CHECK_EQ_INT(fit.n_probes, 2);
    CHECK_EQ_INT(fit.probe_cache[0], 2 * 2 * 64 * 68);
    CHECK_EQ_INT(fit.probe_cache[1], 2 * 2 * 128 * 68);
    CHECK(fit.max_tokens >= 0);
    CHECK(pkv_bench_mem_fit(m, &o, 1, NULL, probes, 0, &fit, &err) == -1);
    pkv_model_free(m);
}

/* Quantised cache rows (tiny Qwen3: head size 32, 2 layers x 2 KV heads):
 * the prefill, the decode and the memory fit's probes report Q8_0 rows at
 * 34 + 34 + 4 = 72 bytes and Q8_0 keys with Q4_0 values at 34 + 18 + 4 = 56,
 * against f16's 64 + 64 + 4 = 132. */
TEST(bench_quantised_cache_rows) {
    pkv_error err;
    pkv_model *m = pkv_model_load(FIXTURE("models/tiny-qwen3-f32.gguf"), NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    const struct {
        pkv_cache_type k, v;
        int row;
    } cases[] = {{PKV_CACHE_F16, PKV_CACHE_F16, 132}, {PKV_CACHE_Q8_0, PKV_CACHE_Q8_0, 72},
                 {PKV_CACHE_Q8_0, PKV_CACHE_Q4_0, 56}};
    for (int c = 0; c < 3; c++) {
        pkv_bench_opts o = quick_opts();
        o.cache_type_k = cases[c].k;
        o.cache_type_v = cases[c].v;
        pkv_bench_result pp, tg;
        REQUIRE_MSG(pkv_bench_prefill(m, &o, 48, NULL, &pp, &err) == 0, "%s", err.msg);
        CHECK_EQ_INT(pp.cache_bytes, 2 * 2 * 48 * cases[c].row);
        REQUIRE_MSG(pkv_bench_decode(m, &o, 8, &tg, &err) == 0, "%s", err.msg);
        CHECK_EQ_INT(tg.cache_bytes, 2 * 2 * 8 * cases[c].row);
        pkv_bench_memfit fit;
        int probes[2] = {64, 128};
        REQUIRE_MSG(pkv_bench_mem_fit(m, &o, 64ull << 20, NULL, probes, 2, &fit, &err) == 0, "%s", err.msg);
        CHECK_EQ_INT(fit.probe_cache[1], 2 * 2 * 128 * cases[c].row);
    }
    pkv_model_free(m);
}

/* Bad requests fail with a message naming the value, before any work. */
TEST(bench_rejects_bad_lengths_and_presses) {
    pkv_error err;
    pkv_model *m = pkv_model_load(TINY, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    pkv_bench_opts o = quick_opts();
    pkv_bench_result r[2];
    CHECK(pkv_bench_prefill(m, &o, 0, NULL, &r[0], &err) == -1);
    CHECK(strstr(err.msg, "prompt length") && strstr(err.msg, "0"));
    CHECK(pkv_bench_decode(m, &o, 0, &r[0], &err) == -1);
    CHECK(strstr(err.msg, "decode steps") != NULL);
    int depths[2] = {64, -3};
    const pkv_press_cfg *none[1] = {NULL};
    CHECK(pkv_bench_depths(m, &o, depths, 2, 4, none, 1, true, r, &err) == -1);
    CHECK(strstr(err.msg, "depth") && strstr(err.msg, "-3"));
    CHECK(pkv_bench_depths(m, &o, depths, 1, 0, none, 1, true, r, &err) == -1);
    CHECK(pkv_bench_depths(m, &o, depths, 1, 4, none, 0, true, r, &err) == -1);
    int probes[1] = {0};
    pkv_bench_memfit fit;
    CHECK(pkv_bench_mem_fit(m, &o, 1ull << 30, NULL, probes, 1, &fit, &err) == -1);
    CHECK(strstr(err.msg, "probe length") != NULL);

    /* presses: an unknown name, and a budget the observation window does not fit in */
    CHECK(pkv_press_cfg_new("snapk", &err) == NULL);
    CHECK(strstr(err.msg, "snapk") != NULL);
    pkv_press_cfg *snap = pkv_press_cfg_new("snapkv", &err);
    REQUIRE(snap);
    REQUIRE(pkv_press_cfg_set(snap, "budget", "4", &err) == 0 && pkv_press_cfg_set(snap, "window", "8", &err) == 0);
    CHECK(pkv_press_cfg_check(snap, &err) == -1);
    CHECK(strstr(err.msg, "budget 4") && strstr(err.msg, "window 8"));
    pkv_press_cfg_free(snap);
    pkv_model_free(m);
}

/* With a probe, a decode repetition is set against the mean of the readings
 * just before and after it (one repetition: 10 and 30 GB/s, so 20), and
 * the probe is read once more than there are repetitions; a failed reading
 * fails the run with its message. */
TEST(bench_decode_fraction_uses_the_readings_beside_it) {
    pkv_error err;
    pkv_model *m = pkv_model_load(TINY, NULL, &err);
    REQUIRE_MSG(m, "%s", err.msg);
    pkv_bench_opts o = quick_opts();
    o.reps = 1;
    o.mem_bw = 1e9; /* not used once a probe is there */
    fake_bw f = {{10e9, 30e9, 10e9, 30e9}, 0, 100};
    o.read_bw = fake_read_bw;
    o.read_bw_user = &f;
    pkv_bench_result tg;
    REQUIRE_MSG(pkv_bench_decode(m, &o, 8, &tg, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(f.calls, 2);
    CHECK_NEAR(tg.mem_bw, 20e9, 1e-3);
    CHECK_NEAR(tg.bw_fraction,
               pkv_bench_bw_fraction(tg.decode_bytes_per_token, tg.ms_per_token.median / 1000.0, 20e9), 1e-12);
    o.reps = 3; /* four readings: 10, 30, 10, 30 -> pairs of 20 each */
    f.calls = 0;
    REQUIRE_MSG(pkv_bench_decode(m, &o, 8, &tg, &err) == 0, "%s", err.msg);
    CHECK_EQ_INT(f.calls, 4);
    CHECK_NEAR(tg.mem_bw, 20e9, 1e-3);
    f.calls = 0;
    f.fail_after = 1;
    CHECK(pkv_bench_decode(m, &o, 8, &tg, &err) == -1);
    CHECK(strstr(err.msg, "fake probe") != NULL);
    pkv_model_free(m);
}
