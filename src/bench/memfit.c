/* The longest prompt that fits in a memory cap (bench.h), measured: real
 * prefills of a few probe lengths, their peak RSS above the resident
 * baseline, a linear fit, and the fit solved for the cap. The library does not
 * enforce pkv_session_opts.mem_cap_bytes yet, so the bench measures instead
 * of asking it. */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "bench/bench.h"

int64_t pkv_bench_memfit_solve(double fixed_bytes, double bytes_per_token, uint64_t cap, int64_t n_max) {
    /* bisection on the predicate bytes(n) <= cap, which holds at lo and fails above hi */
    if (fixed_bytes > (double)cap) return 0;
    int64_t lo = 0, hi = n_max;
    if (fixed_bytes + bytes_per_token * (double)hi <= (double)cap) return hi;
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (fixed_bytes + bytes_per_token * (double)mid <= (double)cap) lo = mid;
        else hi = mid;
    }
    return lo;
}

/* Least squares y = a + b x; one point: through the origin. */
static void fit_line(const int *x, const uint64_t *y, int n, double *a, double *b) {
    if (n == 1) {
        *a = 0.0;
        *b = x[0] > 0 ? (double)y[0] / x[0] : 0.0;
        return;
    }
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int i = 0; i < n; i++) {
        sx += x[i];
        sy += (double)y[i];
        sxx += (double)x[i] * x[i];
        sxy += (double)x[i] * (double)y[i];
    }
    double den = n * sxx - sx * sx;
    *b = den != 0.0 ? (n * sxy - sx * sy) / den : 0.0;
    *a = (sy - *b * sx) / n;
}

/* Peak RSS above the baseline of one prefill of n tokens through press. */
static int measure_probe(pkv_model *m, const pkv_bench_opts *o, const pkv_press_cfg *press, const int32_t *tokens,
                         int n, uint64_t *peak, uint64_t *cache, pkv_error *err) {
    /* hand freed heap back first, so the baseline holds no memory the probe reuses */
    malloc_trim(0);
    uint64_t base = pkv_bench_rss_now();
    pkv_bench_rss_reset();
    pkv_session *s = pkv_bench_session_new(m, o, n, 0, false, err);
    if (!s) return -1;
    pkv_prefill_stats st;
    int rc = pkv_prefill(s, tokens, n, press, &st, err);
    uint64_t hwm = pkv_bench_rss_peak();
    *peak = hwm > base ? hwm - base : 0;
    *cache = st.cache_bytes;
    pkv_session_free(s);
    return rc;
}

int pkv_bench_mem_fit(pkv_model *m, const pkv_bench_opts *o, uint64_t cap, const pkv_press_cfg *press,
                      const int *probe_len, int n_probes, pkv_bench_memfit *out, pkv_error *err) {
    memset(out, 0, sizeof *out);
    if (n_probes < 1 || n_probes > PKV_BENCH_MAX_PROBES)
        return pkv_fail(err, PKV_ERR_ARG, "bench: 1..%d probe lengths, got %d", PKV_BENCH_MAX_PROBES, n_probes);
    int max_len = 0;
    for (int i = 0; i < n_probes; i++) {
        if (probe_len[i] < 1) return pkv_fail(err, PKV_ERR_ARG, "bench: probe length must be >= 1");
        if (probe_len[i] > max_len) max_len = probe_len[i];
    }
    if (pkv_press_cfg_compresses(press) && pkv_press_cfg_check(press, err)) return -1;
    if (!pkv_press_cfg_compresses(press) || pkv_press_cfg_describe(press, out->press, sizeof out->press) < 0)
        snprintf(out->press, sizeof out->press, "none");
    int32_t *tokens = malloc((size_t)max_len * sizeof *tokens);
    if (!tokens) return pkv_fail(err, PKV_ERR_NOMEM, "bench: out of memory for %d tokens", max_len);
    uint64_t rng = o->seed;
    pkv_bench_random_tokens(&rng, pkv_n_vocab(m), pkv_token_bos(m), pkv_token_add_bos(m), tokens, max_len);
    /* make the weights resident: they are outside the cap and must be in the baseline */
    int rc = -1;
    pkv_session *warm = pkv_bench_session_new(m, o, 16, 0, false, err);
    if (!warm) goto done;
    pkv_prefill_stats st;
    int wr = pkv_prefill(warm, tokens, max_len < 16 ? max_len : 16, NULL, &st, err);
    pkv_session_free(warm);
    if (wr) goto done;
    out->rss_reset = pkv_bench_rss_reset();
    for (int i = 0; i < n_probes; i++) {
        if (o->progress) {
            char line[200];
            snprintf(line, sizeof line, "mem: prefill of %d tokens with %s", probe_len[i], out->press);
            o->progress(o->progress_user, line);
        }
        out->probe_len[i] = probe_len[i];
        if (measure_probe(m, o, press, tokens, probe_len[i], &out->probe_peak[i], &out->probe_cache[i], err))
            goto done;
    }
    out->n_probes = n_probes;
    fit_line(out->probe_len, out->probe_peak, n_probes, &out->fixed_bytes, &out->bytes_per_token);
    out->cap = cap;
    out->max_tokens = out->bytes_per_token > 0 ? pkv_bench_memfit_solve(out->fixed_bytes, out->bytes_per_token, cap,
                                                                        (int64_t)1 << 40)
                                               : 0;
    rc = 0;
done:
    free(tokens);
    return rc;
}
