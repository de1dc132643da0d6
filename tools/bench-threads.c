/*
 * bench-threads: what the thread pool costs a step, and how a step scales
 * with threads (docs/performance.md, "Scaling past two cores").
 *
 *   build/bench-threads [-t N] [--jobs J]               fork-join latency, 1..N threads
 *   build/bench-threads -m MODEL [-t N] [-n STEPS] [-p PROMPT]
 *                                                       and, per thread count, a decode
 *                                                       step's and a prefill chunk's time
 *                                                       and fork-joins
 *
 * Latency: J jobs of as many items as threads, each item 2 us of work, back
 * to back as a decode step's jobs follow each other; a job's time less the
 * item's is what one fork and join cost (best of 5 runs). With a
 * model: STEPS decode steps after a PROMPT-token prefill of random ids (as
 * promptkv bench), and the PROMPT-token prefill itself (after an untimed one), the pool's joins
 * counted over each (pkv_pool_joins), so that joins x latency is the
 * synchronisation share of the step.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/prng.h"
#include "base/threads.h"
#include "engine/state.h"
#include "promptkv.h"

enum { ITEM_NS = 2000 }; /* work of one latency item */

/* An item that keeps its thread busy for ITEM_NS, so that every thread of
 * the pool takes one (an empty item would all be claimed by the first
 * thread to arrive, and no join would be measured). */
static void busy_item(void *arg, int64_t item, int thread) {
    (void)arg, (void)item, (void)thread;
    const double end = pkv_now_seconds() + ITEM_NS * 1e-9;
    while (pkv_now_seconds() < end) {
    }
}

/* Seconds one fork and join adds to a job of one ITEM_NS item per thread:
 * the job's time less the item's, best of 5 runs of n_jobs jobs. */
static double join_latency(int n_threads, int n_jobs) {
    pkv_pool *pool = pkv_pool_new(n_threads);
    if (!pool) return -1.0;
    double best = 1e30;
    for (int run = 0; run < 5; run++) {
        const double t0 = pkv_now_seconds();
        for (int j = 0; j < n_jobs; j++) pkv_pool_for(pool, n_threads, busy_item, NULL);
        const double t = (pkv_now_seconds() - t0) / n_jobs - ITEM_NS * 1e-9;
        if (t < best) best = t;
    }
    pkv_pool_free(pool);
    return best > 0.0 ? best : 0.0;
}

typedef struct {
    double step_ms, prefill_s;
    double joins_per_step, joins_per_prefill;
} model_run;

static int run_model(pkv_model *m, int n_threads, int n_prompt, int n_steps, model_run *out, pkv_error *err) {
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    so.n_threads = n_threads;
    so.n_ctx = n_prompt + n_steps + 8;
    pkv_session *s = pkv_session_new(m, &so, err);
    if (!s) return -1;
    int32_t *tok = malloc((size_t)(n_prompt + n_steps) * sizeof *tok);
    uint64_t rng = 42;
    pkv_model_info info;
    pkv_model_get_info(m, &info);
    const int n_vocab = info.n_vocab;
    for (int i = 0; i < n_prompt + n_steps; i++) tok[i] = (int32_t)(pkv_splitmix64(&rng) % (uint64_t)n_vocab);
    int rc = -1;
    /* an untimed prefill first: the weights' pages are faulted in and the
     * work buffers sized, as a warmup run does in promptkv bench */
    if (pkv_prefill(s, tok, n_prompt, NULL, NULL, err)) goto done;
    pkv_session_reset(s);
    uint64_t j0 = pkv_pool_joins(s->pool);
    double t0 = pkv_now_seconds();
    if (pkv_prefill(s, tok, n_prompt, NULL, NULL, err)) goto done;
    out->prefill_s = pkv_now_seconds() - t0;
    out->joins_per_prefill = (double)(pkv_pool_joins(s->pool) - j0);
    if (pkv_decode(s, tok[n_prompt], err)) goto done; /* warm */
    j0 = pkv_pool_joins(s->pool);
    t0 = pkv_now_seconds();
    for (int i = 1; i < n_steps; i++)
        if (pkv_decode(s, tok[n_prompt + i], err)) goto done;
    out->step_ms = 1000.0 * (pkv_now_seconds() - t0) / (n_steps - 1);
    out->joins_per_step = (double)(pkv_pool_joins(s->pool) - j0) / (n_steps - 1);
    rc = 0;
done:
    free(tok);
    pkv_session_free(s);
    return rc;
}

static int usage(void) {
    fprintf(stderr, "usage: bench-threads [-t N] [--jobs J] [-m MODEL [-n STEPS] [-p PROMPT]]\n");
    return 2;
}

int main(int argc, char **argv) {
    int max_threads = 2, n_jobs = 20000, n_steps = 64, n_prompt = 512;
    const char *model_path = NULL;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) return usage();
        if (!strcmp(f, "-t")) max_threads = atoi(v);
        else if (!strcmp(f, "--jobs")) n_jobs = atoi(v);
        else if (!strcmp(f, "-m")) model_path = v;
        else if (!strcmp(f, "-n")) n_steps = atoi(v);
        else if (!strcmp(f, "-p")) n_prompt = atoi(v);
        else return usage();
        i++;
    }
    if (max_threads < 1 || max_threads > 256 || n_jobs < 1 || n_steps < 2 || n_prompt < 1) {
        fprintf(stderr, "bench-threads: -t in 1..256, --jobs >= 1, -n >= 2, -p >= 1\n");
        return 2;
    }
    double lat[257] = {0};
    printf("fork-join latency (%d jobs of one %d ns item per thread, the item's time taken off; best of 5):\n", n_jobs,
           (int)ITEM_NS);
    for (int t = 1; t <= max_threads; t++) {
        lat[t] = join_latency(t, n_jobs);
        if (lat[t] < 0) {
            fprintf(stderr, "bench-threads: no pool of %d threads\n", t);
            return 1;
        }
        printf("  %d thread%s: %.2f us per job\n", t, t > 1 ? "s" : "", lat[t] * 1e6);
    }
    if (!model_path) return 0;
    pkv_error err;
    pkv_model *m = pkv_model_load(model_path, NULL, &err);
    if (!m) {
        fprintf(stderr, "bench-threads: %s\n", err.msg);
        return 1;
    }
    printf("\n%s: decode step after a %d-token prompt (%d steps), prefill of the prompt\n", model_path, n_prompt,
           n_steps);
    printf("| threads | decode ms/step | joins/step | joins x latency (share) | prefill s | joins/prefill | decode "
           "speed-up | prefill speed-up |\n");
    printf("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
    model_run one = {0};
    for (int t = 1; t <= max_threads; t++) {
        model_run r;
        if (run_model(m, t, n_prompt, n_steps, &r, &err)) {
            fprintf(stderr, "bench-threads: %s\n", err.msg);
            pkv_model_free(m);
            return 1;
        }
        if (t == 1) one = r;
        const double sync_ms = r.joins_per_step * lat[t] * 1e3;
        printf("| %d | %.2f | %.0f | %.3f ms (%.1f%%) | %.2f | %.0f | %.2fx | %.2fx |\n", t, r.step_ms, r.joins_per_step,
               sync_ms, 100.0 * sync_ms / r.step_ms, r.prefill_s, r.joins_per_prefill, one.step_ms / r.step_ms,
               one.prefill_s / r.prefill_s);
    }
    pkv_model_free(m);
    return 0;
}
