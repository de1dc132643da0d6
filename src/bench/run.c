/* The timed runs: prefill (ppN), decode from an empty cache (tgN) and decode
 * at a depth after a press (bench.h; llama-bench's definitions,
 * docs/engine.md §6.3). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "bench/bench.h"

__attribute__((format(printf, 2, 3))) static void progress(const pkv_bench_opts *o, const char *fmt, ...) {
    if (!o->progress) return;
    char line[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(line, sizeof line, fmt, ap);
    va_end(ap);
    o->progress(o->progress_user, line);
}

static void report(const pkv_bench_opts *o, const pkv_bench_result *r) {
    if (o->on_result) o->on_result(o->progress_user, r);
}


static void describe_press(const pkv_press_cfg *p, char *buf, int len) {
    if (!pkv_press_cfg_compresses(p) || pkv_press_cfg_describe(p, buf, len) < 0) snprintf(buf, (size_t)len, "none");
}

static int reps_of(const pkv_bench_opts *o) { return o->reps > 0 ? o->reps : 1; }

pkv_session *pkv_bench_session_new(pkv_model *m, const pkv_bench_opts *o, int n_tokens, int keep_window,
                                   bool keep_sums, pkv_error *err) {
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    so.n_threads = o->n_threads;
    if (o->n_batch > 0) so.n_batch = o->n_batch;
    so.cache_type_k = o->cache_type_k;
    so.cache_type_v = o->cache_type_v;
    so.residual_type = o->residual_type;
    so.residual_spill_dir = o->residual_spill_dir;
    pkv_model_info info;
    pkv_model_get_info(m, &info);
    so.n_ctx = info.n_ctx_train > n_tokens ? info.n_ctx_train : n_tokens;
    so.keep_press_window = keep_window;
    so.keep_attn_sums = keep_sums;
    return pkv_session_new(m, &so, err);
}

/* llama-bench: the first prompt token is BOS when the vocabulary adds one. */
static void prompt_tokens(const pkv_model *m, uint64_t *rng, int32_t *out, int n) {
    pkv_bench_random_tokens(rng, pkv_n_vocab(m), pkv_token_bos(m), pkv_token_add_bos(m), out, n);
}

static int32_t random_token(const pkv_model *m, uint64_t *rng) {
    int32_t t;
    pkv_bench_random_tokens(rng, pkv_n_vocab(m), -1, false, &t, 1);
    return t;
}

static void init_result(pkv_bench_result *r, pkv_bench_kind kind, const pkv_bench_opts *o) {
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->reps = reps_of(o);
    r->n_threads = pkv_bench_n_threads(o);
}

/* ---------------------------------------------------------------- ppN */

int pkv_bench_prefill(pkv_model *m, const pkv_bench_opts *o, int n_prompt, const pkv_press_cfg *press,
                      pkv_bench_result *out, pkv_error *err) {
    if (n_prompt < 1) return pkv_fail(err, PKV_ERR_ARG, "bench: prompt length must be >= 1, got %d", n_prompt);
    int reps = reps_of(o);
    int32_t *tokens = malloc((size_t)n_prompt * sizeof *tokens);
    double *tps = malloc((size_t)reps * sizeof *tps), *ms = malloc((size_t)reps * sizeof *ms),
           *secs = malloc((size_t)reps * sizeof *secs), *press_s = malloc((size_t)reps * sizeof *press_s);
    pkv_session *s = NULL;
    int rc = -1;
    if (!tokens || !tps || !ms || !secs || !press_s) {
        pkv_fail(err, PKV_ERR_NOMEM, "bench: out of memory for %d tokens", n_prompt);
        goto done;
    }
    if (!(s = pkv_bench_session_new(m, o, n_prompt, 0, false, err))) goto done;
    init_result(out, PKV_BENCH_PP, o);
    snprintf(out->test, sizeof out->test, "pp%d", n_prompt);
    describe_press(press, out->press, sizeof out->press);
    out->n_prompt = n_prompt;
    uint64_t rng = o->seed;
    pkv_prefill_stats st;
    if (o->warmup) {
        progress(o, "%s %s: warmup", out->test, out->press);
        prompt_tokens(m, &rng, tokens, n_prompt);
        if (pkv_prefill(s, tokens, n_prompt, press, &st, err)) goto done;
    }
    pkv_bench_rss_reset();
    for (int r = 0; r < reps; r++) {
        progress(o, "%s %s: repetition %d/%d", out->test, out->press, r + 1, reps);
        pkv_session_reset(s);
        prompt_tokens(m, &rng, tokens, n_prompt);
        double t0 = pkv_now_seconds();
        if (pkv_prefill(s, tokens, n_prompt, press, &st, err)) goto done;
        secs[r] = pkv_now_seconds() - t0;
        tps[r] = n_prompt / secs[r];
        ms[r] = 1000.0 * secs[r] / n_prompt;
        press_s[r] = st.press_seconds;
    }
    out->peak_rss = pkv_bench_rss_peak();
    pkv_bench_stat_of(tps, reps, &out->tok_per_s);
    pkv_bench_stat_of(ms, reps, &out->ms_per_token);
    pkv_bench_stat ps, pr;
    pkv_bench_stat_of(secs, reps, &ps);
    pkv_bench_stat_of(press_s, reps, &pr);
    out->prefill_seconds = ps.median;
    out->press_seconds = pr.median;
    out->press_share = ps.median > 0 ? pr.median / ps.median : 0.0;
    out->cache_bytes = st.cache_bytes;
    out->cache_bytes_full = st.cache_bytes_full;
    report(o, out);
    rc = 0;
done:
    pkv_session_free(s);
    free(tokens);
    free(tps);
    free(ms);
    free(secs);
    free(press_s);
    return rc;
}

/* ---------------------------------------------------------------- decode loops */

/* n_gen single-token steps: the first token is BOS when the vocabulary adds
 * one, then random ids (llama-bench test_gen). */
static int decode_steps(pkv_session *s, const pkv_model *m, uint64_t *rng, int n_gen, double *seconds,
                        pkv_error *err) {
    int32_t token = pkv_token_add_bos(m) ? pkv_token_bos(m) : random_token(m, rng);
    double t0 = pkv_now_seconds();
    for (int i = 0; i < n_gen; i++) {
        if (pkv_decode(s, token, err)) return -1;
        token = random_token(m, rng);
    }
    *seconds = pkv_now_seconds() - t0;
    return 0;
}

/* d's state becomes start's (a copy), or empty when start is NULL. */
static int restore(pkv_session *d, const pkv_session *start, pkv_error *err) {
    if (start) return pkv_session_copy(d, start, NULL, NULL, err);
    pkv_session_reset(d);
    return 0;
}

/* What the decode repetitions measured: per repetition its rate and time,
 * and, when the options read the bandwidth beside them (read_bw), the
 * readings before the first repetition and after each one (reps + 1). */
typedef struct {
    int reps;
    double *tps, *ms, *bw;
} decode_samples;

static int samples_alloc(decode_samples *d, int reps, pkv_error *err) {
    d->reps = reps;
    d->tps = malloc((size_t)reps * sizeof *d->tps);
    d->ms = malloc((size_t)reps * sizeof *d->ms);
    d->bw = malloc((size_t)(reps + 1) * sizeof *d->bw);
    if (d->tps && d->ms && d->bw) return 0;
    return pkv_fail(err, PKV_ERR_NOMEM, "bench: out of memory");
}

static void samples_free(decode_samples *d) {
    free(d->tps);
    free(d->ms);
    free(d->bw);
}

/* One bandwidth reading into bw[i], when the options take them. */
static int read_bw(const pkv_bench_opts *o, decode_samples *d, int i, pkv_error *err) {
    if (!o->read_bw) return 0;
    return o->read_bw(o->read_bw_user, &d->bw[i], err);
}

/* Decode timings over reps, each from a copy of `start` (an empty session
 * when start is NULL): llama-bench clears the cache, or restores its saved
 * depth state, before each repetition. */
static int time_decode(pkv_model *m, const pkv_bench_opts *o, const pkv_session *start, int n_tokens, int n_gen,
                       const char *label, decode_samples *ds, uint64_t *cache_bytes_end, pkv_error *err) {
    uint64_t rng = o->seed ^ 0x5851f42d4c957f2dull;
    pkv_session *d = pkv_bench_session_new(m, o, n_tokens, 0, false, err);
    if (!d) return -1;
    int rc = -1;
    double sec;
    if (o->warmup) {
        progress(o, "%s: warmup", label);
        if (restore(d, start, err) || decode_steps(d, m, &rng, 1, &sec, err)) goto done;
    }
    for (int r = 0; r < ds->reps; r++) {
        progress(o, "%s: repetition %d/%d", label, r + 1, ds->reps);
        if (restore(d, start, err) || read_bw(o, ds, r, err) || decode_steps(d, m, &rng, n_gen, &sec, err)) goto done;
        ds->tps[r] = n_gen / sec;
        ds->ms[r] = 1000.0 * sec / n_gen;
    }
    if (read_bw(o, ds, ds->reps, err)) goto done;
    *cache_bytes_end = pkv_session_cache_bytes(d);
    rc = 0;
done:
    pkv_session_free(d);
    return rc;
}

/* Rates, bytes per step and the roofline fraction. With bandwidth readings
 * beside the repetitions, each repetition is set against the mean of the
 * readings just before and after it and the fraction is the median of
 * those: the host's bandwidth can move by half within seconds
 * (docs/performance.md "Roofline"), so one reading at the start would
 * compare the steps with another moment's memory. Without them, the median
 * time against opts->mem_bw. */
static void fill_decode_result(const pkv_model *m, const pkv_bench_opts *o, uint64_t cache_bytes,
                               const decode_samples *ds, pkv_bench_result *r) {
    pkv_bench_stat_of(ds->tps, ds->reps, &r->tok_per_s);
    pkv_bench_stat_of(ds->ms, ds->reps, &r->ms_per_token);
    r->decode_bytes_per_token = pkv_bench_weight_bytes_per_token(m) + cache_bytes;
    if (!o->read_bw) {
        r->mem_bw = o->mem_bw;
        r->bw_fraction = pkv_bench_bw_fraction(r->decode_bytes_per_token, r->ms_per_token.median / 1000.0, o->mem_bw);
        return;
    }
    double *bw = malloc((size_t)ds->reps * sizeof *bw), *frac = malloc((size_t)ds->reps * sizeof *frac);
    if (bw && frac) {
        for (int i = 0; i < ds->reps; i++) {
            bw[i] = 0.5 * (ds->bw[i] + ds->bw[i + 1]);
            frac[i] = pkv_bench_bw_fraction(r->decode_bytes_per_token, ds->ms[i] / 1000.0, bw[i]);
        }
        pkv_bench_stat s;
        pkv_bench_stat_of(bw, ds->reps, &s);
        r->mem_bw = s.median;
        pkv_bench_stat_of(frac, ds->reps, &s);
        r->bw_fraction = s.median;
    }
    free(bw);
    free(frac);
}

/* ---------------------------------------------------------------- tgN */

int pkv_bench_decode(pkv_model *m, const pkv_bench_opts *o, int n_gen, pkv_bench_result *out, pkv_error *err) {
    if (n_gen < 1) return pkv_fail(err, PKV_ERR_ARG, "bench: decode steps must be >= 1, got %d", n_gen);
    decode_samples ds;
    int rc = -1;
    if (samples_alloc(&ds, reps_of(o), err)) goto done;
    init_result(out, PKV_BENCH_TG, o);
    snprintf(out->test, sizeof out->test, "tg%d", n_gen);
    snprintf(out->press, sizeof out->press, "none");
    out->n_gen = n_gen;
    pkv_bench_rss_reset();
    uint64_t cache_end = 0;
    if (time_decode(m, o, NULL, n_gen + 8, n_gen, out->test, &ds, &cache_end, err)) goto done;
    out->peak_rss = pkv_bench_rss_peak();
    out->cache_bytes = cache_end;
    out->cache_bytes_full = cache_end;
    /* the cache grows from empty to n_gen rows: on average half of it is read */
    fill_decode_result(m, o, cache_end / 2, &ds, out);
    report(o, out);
    rc = 0;
done:
    samples_free(&ds);
    return rc;
}

/* ---------------------------------------------------------------- decode at depth */

typedef struct {
    pkv_model *m;
    const pkv_bench_opts *o;
    int depth, n_gen;
    decode_samples *ds;
} depth_ctx;

/* Times decode from `start` (the prompt, compressed or not) into r. */
static int depth_decode(const depth_ctx *c, const pkv_session *start, pkv_bench_result *r, pkv_error *err) {
    uint64_t cache_end;
    char label[200];
    snprintf(label, sizeof label, "%s %s", r->test, r->press);
    if (time_decode(c->m, c->o, start, c->depth + c->n_gen + 8, c->n_gen, label, c->ds, &cache_end, err))
        return -1;
    fill_decode_result(c->m, c->o, r->cache_bytes, c->ds, r);
    report(c->o, r);
    return 0;
}

static void init_depth_result(const depth_ctx *c, const pkv_press_cfg *press, bool shared, pkv_bench_result *r) {
    init_result(r, PKV_BENCH_DEPTH, c->o);
    snprintf(r->test, sizeof r->test, "tg%d@d%d", c->n_gen, c->depth);
    describe_press(press, r->press, sizeof r->press);
    r->n_prompt = c->depth;
    r->n_gen = c->n_gen;
    r->shared_prefill = shared;
}

/* One prefill without a press, then each press on a copy. */
static int depth_shared(const depth_ctx *c, const int32_t *tokens, const pkv_press_cfg *const *presses,
                        int n_presses, pkv_bench_result *out, pkv_error *err) {
    int keep_window = 0;
    bool keep_sums = false;
    for (int p = 0; p < n_presses; p++)
        if (pkv_press_cfg_compresses(presses[p])) {
            if (pkv_press_cfg_window(presses[p]) > keep_window) keep_window = pkv_press_cfg_window(presses[p]);
            keep_sums |= pkv_press_cfg_needs_attn_sums(presses[p]);
        }
    pkv_session *src = pkv_bench_session_new(c->m, c->o, c->depth + c->n_gen + 8, keep_window, keep_sums, err);
    if (!src) return -1;
    int rc = -1;
    pkv_session *pressed = NULL;
    progress(c->o, "d%d: prefill of %d tokens (shared by %d presses)", c->depth, c->depth, n_presses);
    pkv_bench_rss_reset();
    pkv_prefill_stats st;
    double t0 = pkv_now_seconds();
    if (pkv_prefill(src, tokens, c->depth, NULL, &st, err)) goto done;
    double prefill_s = pkv_now_seconds() - t0;
    uint64_t peak = pkv_bench_rss_peak();
    for (int p = 0; p < n_presses; p++) {
        pkv_bench_result *r = &out[p];
        init_depth_result(c, presses[p], true, r);
        r->prefill_seconds = prefill_s;
        r->cache_bytes_full = st.cache_bytes_full;
        const pkv_session *start = src;
        if (pkv_press_cfg_compresses(presses[p])) {
            pkv_prefill_stats cs;
            if (!(pressed = pkv_bench_session_new(c->m, c->o, c->depth + c->n_gen + 8, 0, false, err))) goto done;
            progress(c->o, "d%d: %s on a copy of the prompt's cache", c->depth, r->press);
            if (pkv_session_copy(pressed, src, presses[p], &cs, err)) goto done;
            r->press_seconds = cs.press_seconds;
            r->press_share = cs.press_seconds / (prefill_s + cs.press_seconds);
            r->cache_bytes = cs.cache_bytes;
            start = pressed;
        } else {
            r->cache_bytes = st.cache_bytes;
            r->peak_rss = peak; /* the shared prefill is this row's own */
        }
        if (depth_decode(c, start, r, err)) goto done;
        pkv_session_free(pressed);
        pressed = NULL;
    }
    rc = 0;
done:
    pkv_session_free(pressed);
    pkv_session_free(src);
    return rc;
}

/* One prefill per press, the press inside it. */
static int depth_separate(const depth_ctx *c, const int32_t *tokens, const pkv_press_cfg *const *presses,
                          int n_presses, pkv_bench_result *out, pkv_error *err) {
    for (int p = 0; p < n_presses; p++) {
        pkv_bench_result *r = &out[p];
        init_depth_result(c, presses[p], false, r);
        pkv_session *s = pkv_bench_session_new(c->m, c->o, c->depth + c->n_gen + 8, 0, false, err);
        if (!s) return -1;
        progress(c->o, "d%d: prefill of %d tokens with %s", c->depth, c->depth, r->press);
        pkv_bench_rss_reset();
        pkv_prefill_stats st;
        double t0 = pkv_now_seconds();
        int rc = pkv_prefill(s, tokens, c->depth, presses[p], &st, err);
        r->prefill_seconds = pkv_now_seconds() - t0;
        r->peak_rss = pkv_bench_rss_peak();
        r->press_seconds = st.press_seconds;
        r->press_share = r->prefill_seconds > 0 ? st.press_seconds / r->prefill_seconds : 0.0;
        r->cache_bytes = st.cache_bytes;
        r->cache_bytes_full = st.cache_bytes_full;
        if (rc == 0) rc = depth_decode(c, s, r, err);
        pkv_session_free(s);
        if (rc) return -1;
    }
    return 0;
}

int pkv_bench_depths(pkv_model *m, const pkv_bench_opts *o, const int *depths, int n_depths, int n_gen,
                     const pkv_press_cfg *const *presses, int n_presses, bool shared_prefill, pkv_bench_result *out,
                     pkv_error *err) {
    if (n_gen < 1 || n_presses < 1) return pkv_fail(err, PKV_ERR_ARG, "bench: need decode steps >= 1 and a press");
    int max_depth = 0;
    for (int i = 0; i < n_depths; i++) {
        if (depths[i] < 1) return pkv_fail(err, PKV_ERR_ARG, "bench: depth must be >= 1, got %d", depths[i]);
        if (depths[i] > max_depth) max_depth = depths[i];
    }
    for (int p = 0; p < n_presses; p++)
        if (presses[p] && pkv_press_cfg_check(presses[p], err)) return -1;
    int32_t *tokens = malloc((size_t)max_depth * sizeof *tokens);
    decode_samples ds;
    int rc = -1;
    if (samples_alloc(&ds, reps_of(o), err)) goto done;
    if (!tokens) {
        pkv_fail(err, PKV_ERR_NOMEM, "bench: out of memory for %d tokens", max_depth);
        goto done;
    }
    for (int i = 0; i < n_depths; i++) {
        depth_ctx c = {m, o, depths[i], n_gen, &ds};
        uint64_t rng = o->seed + (uint64_t)depths[i];
        prompt_tokens(m, &rng, tokens, depths[i]);
        pkv_bench_result *row = out + (size_t)i * n_presses;
        if (shared_prefill ? depth_shared(&c, tokens, presses, n_presses, row, err)
                           : depth_separate(&c, tokens, presses, n_presses, row, err))
            goto done;
    }
    rc = 0;
done:
    free(tokens);
    samples_free(&ds);
    return rc;
}

/* ---------------------------------------------------------------- concurrent streams */

/* n_gen steps of every stream: batched (one pkv_batch_decode a step) or one
 * by one (pkv_decode of each stream in turn, as interleaved serving runs them). */
static int stream_steps(pkv_session **d, int n_seq, pkv_batch *b, const pkv_model *m, uint64_t *rng, int n_gen,
                        double *seconds, pkv_error *err) {
    int32_t tok[PKV_BENCH_MAX_STREAMS];
    double t0 = pkv_now_seconds();
    for (int i = 0; i < n_gen; i++) {
        for (int k = 0; k < n_seq; k++) tok[k] = random_token(m, rng);
        if (b) {
            if (pkv_batch_decode(b, d, tok, n_seq, err)) return -1;
        } else {
            for (int k = 0; k < n_seq; k++)
                if (pkv_decode(d[k], tok[k], err)) return -1;
        }
    }
    *seconds = pkv_now_seconds() - t0;
    return 0;
}

/* The streams of a streams test: n_seq prompts of depth tokens, each its own
 * (random) and pressed by its own copy of the press, in src[k]; d[k] the
 * sessions the timed steps run on, restored from src[k] before each run. */
static int streams_setup(pkv_model *m, const pkv_bench_opts *o, int n_seq, int depth, int n_gen,
                         const pkv_press_cfg *press, pkv_session **src, pkv_session **d, uint64_t *rng,
                         pkv_bench_result *out, pkv_error *err) {
    int32_t *tokens = malloc((size_t)depth * sizeof *tokens);
    if (!tokens) return pkv_fail(err, PKV_ERR_NOMEM, "bench: out of memory");
    int rc = -1;
    for (int k = 0; k < n_seq; k++) {
        if (!(src[k] = pkv_bench_session_new(m, o, depth + n_gen + 8, 0, false, err)) ||
            !(d[k] = pkv_bench_session_new(m, o, depth + n_gen + 8, 0, false, err)))
            goto done;
        prompt_tokens(m, rng, tokens, depth);
        progress(o, "%s: prompt of stream %d", out->test, k + 1);
        pkv_prefill_stats st;
        if (pkv_prefill(src[k], tokens, depth, press, &st, err)) goto done;
        out->cache_bytes += st.cache_bytes;
        out->cache_bytes_full += st.cache_bytes_full;
    }
    rc = 0;
done:
    free(tokens);
    return rc;
}

static int restore_all(pkv_session **d, pkv_session *const *src, int n_seq, pkv_error *err) {
    for (int k = 0; k < n_seq; k++)
        if (restore(d[k], src[k], err)) return -1;
    return 0;
}

static void streams_free(pkv_session **src, pkv_session **d, int n_seq) {
    for (int k = 0; k < n_seq; k++) {
        pkv_session_free(src[k]);
        pkv_session_free(d[k]);
    }
}

static void streams_result(pkv_bench_result *r, const pkv_bench_opts *o, const pkv_press_cfg *press, int n_seq,
                           int depth, int n_gen, const char *how) {
    init_result(r, PKV_BENCH_STREAMS, o);
    snprintf(r->test, sizeof r->test, "tg%d@d%d x%d %s", n_gen, depth, n_seq, how);
    describe_press(press, r->press, sizeof r->press);
    r->n_prompt = depth;
    r->n_gen = n_gen;
    r->n_streams = n_seq;
    r->batched = strcmp(how, "serial") != 0;
}

int pkv_bench_streams(pkv_model *m, const pkv_bench_opts *o, int n_seq, int depth, int n_gen,
                      const pkv_press_cfg *press, bool batched, pkv_bench_result *out, pkv_error *err) {
    if (n_seq < 1 || n_seq > PKV_BENCH_MAX_STREAMS)
        return pkv_fail(err, PKV_ERR_ARG, "bench: streams must be in [1, %d], got %d", PKV_BENCH_MAX_STREAMS, n_seq);
    if (n_gen < 1 || depth < 1) return pkv_fail(err, PKV_ERR_ARG, "bench: streams need a depth and steps >= 1");
    int reps = reps_of(o);
    streams_result(out, o, press, n_seq, depth, n_gen, batched ? "batch" : "serial");
    pkv_session *src[PKV_BENCH_MAX_STREAMS] = {0}, *d[PKV_BENCH_MAX_STREAMS] = {0};
    double *tps = malloc((size_t)reps * sizeof *tps), *ms = malloc((size_t)reps * sizeof *ms);
    pkv_batch *b = batched ? pkv_batch_new(m, o->n_threads, err) : NULL;
    int rc = -1;
    if (!tps || !ms) {
        pkv_fail(err, PKV_ERR_NOMEM, "bench: out of memory");
        goto done;
    }
    if (batched && !b) goto done;
    uint64_t rng = o->seed ^ 0x2545f4914f6cdd1dull;
    if (streams_setup(m, o, n_seq, depth, n_gen, press, src, d, &rng, out, err)) goto done;
    double sec;
    for (int r = -1; r < reps; r++) {
        if (r < 0 && !o->warmup) continue;
        progress(o, "%s: %s", out->test, r < 0 ? "warmup" : "repetition");
        if (restore_all(d, src, n_seq, err) || stream_steps(d, n_seq, b, m, &rng, r < 0 ? 1 : n_gen, &sec, err))
            goto done;
        if (r < 0) continue;
        tps[r] = (double)n_seq * n_gen / sec; /* all streams' tokens */
        ms[r] = 1000.0 * sec / n_gen;         /* a step: each stream's time between its tokens */
    }
    pkv_bench_stat_of(tps, reps, &out->tok_per_s);
    pkv_bench_stat_of(ms, reps, &out->ms_per_token);
    report(o, out);
    rc = 0;
done:
    streams_free(src, d, n_seq);
    pkv_batch_free(b);
    free(tps);
    free(ms);
    return rc;
}

int pkv_bench_streams_paired(pkv_model *m, const pkv_bench_opts *o, int n_seq, int depth, int n_gen,
                             const pkv_press_cfg *press, pkv_bench_result out[2], pkv_error *err) {
    if (n_seq < 2 || n_seq > PKV_BENCH_MAX_STREAMS)
        return pkv_fail(err, PKV_ERR_ARG, "bench: paired streams must be in [2, %d], got %d", PKV_BENCH_MAX_STREAMS,
                        n_seq);
    if (n_gen < 1 || depth < 1) return pkv_fail(err, PKV_ERR_ARG, "bench: streams need a depth and steps >= 1");
    int reps = reps_of(o);
    streams_result(&out[0], o, press, 1, depth, n_gen, "paired");
    streams_result(&out[1], o, press, n_seq, depth, n_gen, "paired");
    pkv_session *src[PKV_BENCH_MAX_STREAMS] = {0}, *d[PKV_BENCH_MAX_STREAMS] = {0};
    double *v = malloc((size_t)reps * 5 * sizeof *v);
    pkv_batch *b = pkv_batch_new(m, o->n_threads, err);
    int rc = -1;
    if (!v) {
        pkv_fail(err, PKV_ERR_NOMEM, "bench: out of memory");
        goto done;
    }
    if (!b) goto done;
    double *tps1 = v, *ms1 = v + reps, *tpsn = v + 2 * reps, *msn = v + 3 * reps, *ratio = v + 4 * reps;
    uint64_t rng = o->seed ^ 0x2545f4914f6cdd1dull;
    if (streams_setup(m, o, n_seq, depth, n_gen, press, src, d, &rng, &out[1], err)) goto done;
    /* stream 1 alone is the first of the n_seq streams */
    out[0].cache_bytes = pkv_session_cache_bytes(src[0]);
    out[0].cache_bytes_full = out[1].cache_bytes_full / (uint64_t)n_seq;
    for (int r = -1; r < reps; r++) {
        if (r < 0 && !o->warmup) continue;
        progress(o, "%s: %s", out[1].test, r < 0 ? "warmup" : "repetition");
        const int steps = r < 0 ? 1 : n_gen;
        double sec[2];
        /* the two runs of a repetition in turns, one first in even repetitions and the other in odd,
         * so a drift of the machine's speed within a repetition favours neither */
        for (int turn = 0; turn < 2; turn++) {
            const int alone = (turn + (r < 0 ? 0 : r)) % 2 == 0, n_run = alone ? 1 : n_seq;
            if (restore_all(d, src, n_run, err) || stream_steps(d, n_run, b, m, &rng, steps, &sec[alone ? 0 : 1], err))
                goto done;
        }
        if (r < 0) continue;
        tps1[r] = n_gen / sec[0];
        ms1[r] = 1000.0 * sec[0] / n_gen;
        tpsn[r] = (double)n_seq * n_gen / sec[1];
        msn[r] = 1000.0 * sec[1] / n_gen;
        ratio[r] = tpsn[r] / tps1[r];
    }
    pkv_bench_stat_of(tps1, reps, &out[0].tok_per_s);
    pkv_bench_stat_of(ms1, reps, &out[0].ms_per_token);
    pkv_bench_stat_of(tpsn, reps, &out[1].tok_per_s);
    pkv_bench_stat_of(msn, reps, &out[1].ms_per_token);
    pkv_bench_stat_of(ratio, reps, &out[1].paired_ratio);
    report(o, &out[0]);
    report(o, &out[1]);
    rc = 0;
done:
    streams_free(src, d, n_seq);
    pkv_batch_free(b);
    free(v);
    return rc;
}
