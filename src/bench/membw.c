/* Memory read bandwidth: the denominator of the decode roofline. A decode step
 * reads every weight and the whole cache once, so bytes / bandwidth bounds
 * its time from below (docs/engine.md §6.4: decode saturates memory
 * bandwidth at a few threads). */
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/threads.h"
#include "bench/bench.h"

typedef struct {
    const uint64_t *buf;
    int64_t n_words;
    uint64_t sink[256]; /* per thread, so the reads cannot be optimised away */
} read_job;

/* Eight independent sums: enough loads in flight to saturate DRAM from one
 * core without SIMD. */
static void read_slice(void *arg, int ith, int nth) {
    read_job *j = arg;
    int64_t b, e;
    pkv_split(j->n_words, ith, nth, 8, &b, &e);
    uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
    const uint64_t *p = j->buf;
    int64_t i = b;
    for (; i + 8 <= e; i += 8) {
        s0 += p[i];
        s1 += p[i + 1];
        s2 += p[i + 2];
        s3 += p[i + 3];
        s4 += p[i + 4];
        s5 += p[i + 5];
        s6 += p[i + 6];
        s7 += p[i + 7];
    }
    for (; i < e; i++) s0 += p[i];
    j->sink[ith % 256] += s0 ^ s1 ^ s2 ^ s3 ^ s4 ^ s5 ^ s6 ^ s7;
}

int pkv_bench_membw(uint64_t buf_bytes, int n_threads, int passes, double *bytes_per_s, pkv_error *err) {
    *bytes_per_s = 0.0;
    if (buf_bytes < 4096 || passes < 1) return pkv_fail(err, PKV_ERR_ARG, "membw: buffer >= 4 KiB and passes >= 1");
    int64_t n_words = (int64_t)(buf_bytes / sizeof(uint64_t));
    uint64_t *buf = malloc((size_t)n_words * sizeof *buf);
    if (!buf) return pkv_fail(err, PKV_ERR_NOMEM, "membw: out of memory for a %llu-byte buffer",
                              (unsigned long long)buf_bytes);
    pkv_pool *pool = pkv_pool_new(n_threads);
    read_job *job = calloc(1, sizeof *job);
    if (!pool || !job) {
        free(buf);
        free(job);
        pkv_pool_free(pool);
        return pkv_fail(err, PKV_ERR_NOMEM, "membw: out of memory for %d threads", n_threads);
    }
    /* distinct values, written once so every page is resident before timing */
    for (int64_t i = 0; i < n_words; i++) buf[i] = (uint64_t)i * 0x9e3779b97f4a7c15ull;
    job->buf = buf;
    job->n_words = n_words;
    pkv_pool_run(pool, read_slice, job); /* warm: TLBs, thread start-up */
    double best = 0.0;
    for (int p = 0; p < passes; p++) {
        double t0 = pkv_now_seconds();
        pkv_pool_run(pool, read_slice, job);
        double dt = pkv_now_seconds() - t0;
        double bw = dt > 0.0 ? (double)n_words * sizeof(uint64_t) / dt : 0.0;
        if (bw > best) best = bw;
    }
    *bytes_per_s = best;
    free(job);
    free(buf);
    pkv_pool_free(pool);
    return 0;
}
