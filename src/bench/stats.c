/* The arithmetic of the bench: statistics of repetitions, bytes a decode
 * step reads, the bandwidth-bound fraction, random tokens, process memory. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "base/prng.h"
#include "base/threads.h"
#include "bench/bench.h"

void pkv_bench_opts_default(pkv_bench_opts *opts) {
    memset(opts, 0, sizeof *opts);
    opts->reps = 5;
    opts->warmup = true;
    opts->seed = 1234;
    opts->cache_type_k = PKV_CACHE_F16;
    opts->cache_type_v = PKV_CACHE_F16;
}

int pkv_bench_n_threads(const pkv_bench_opts *opts) {
    return opts->n_threads > 0 ? opts->n_threads : pkv_n_cpus();
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void pkv_bench_stat_of(const double *samples, int n, pkv_bench_stat *out) {
    memset(out, 0, sizeof *out);
    if (n <= 0) return;
    double *s = malloc((size_t)n * sizeof *s);
    if (!s) return;
    memcpy(s, samples, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    out->n = n;
    out->min = s[0];
    out->max = s[n - 1];
    out->median = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    double sum = 0.0;
    for (int i = 0; i < n; i++) sum += s[i];
    out->mean = sum / n;
    if (n > 1) {
        double sq = 0.0;
        for (int i = 0; i < n; i++) sq += (s[i] - out->mean) * (s[i] - out->mean);
        out->stddev = sqrt(sq / (n - 1));
    }
    free(s);
}

uint64_t pkv_bench_weight_bytes_per_token(const pkv_model *model) {
    int n = pkv_model_n_tensors(model);
    bool tied = true;
    pkv_tensor_info ti;
    for (int i = 0; i < n; i++) {
        pkv_model_tensor(model, i, &ti);
        if (!strcmp(ti.name, "output.weight")) tied = false;
    }
    uint64_t bytes = 0;
    for (int i = 0; i < n; i++) {
        pkv_model_tensor(model, i, &ti);
        if (!strcmp(ti.name, "token_embd.weight") && !tied) {
            /* only the row of the token is gathered */
            bytes += ti.ne[1] ? ti.nbytes / ti.ne[1] : 0;
            continue;
        }
        bytes += ti.nbytes;
    }
    return bytes;
}

double pkv_bench_bw_fraction(uint64_t bytes_per_token, double seconds_per_token, double bytes_per_second) {
    if (bytes_per_token == 0 || !(seconds_per_token > 0.0) || !(bytes_per_second > 0.0)) return 0.0;
    return ((double)bytes_per_token / bytes_per_second) / seconds_per_token;
}

void pkv_bench_random_tokens(uint64_t *state, int n_vocab, int32_t bos, bool first_is_bos, int32_t *out, int n) {
    for (int i = 0; i < n; i++) out[i] = (int32_t)(pkv_splitmix64(state) % (uint64_t)n_vocab);
    if (n > 0 && first_is_bos && bos >= 0) out[0] = bos;
}

/* ---------------------------------------------------------------- process memory */

/* A "Key:   123 kB" line of /proc/self/status, in bytes; 0 if absent. */
static uint64_t proc_status_kib(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    if (!f) return 0;
    char line[256];
    size_t kl = strlen(key);
    uint64_t v = 0;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, kl) && line[kl] == ':') {
            v = strtoull(line + kl + 1, NULL, 10) * 1024;
            break;
        }
    fclose(f);
    return v;
}

bool pkv_bench_rss_reset(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (!f) return false;
    bool ok = fputs("5", f) >= 0;
    if (fclose(f) != 0) ok = false;
    return ok;
}

uint64_t pkv_bench_rss_peak(void) {
    uint64_t v = proc_status_kib("VmHWM");
    if (v) return v;
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0) return (uint64_t)ru.ru_maxrss * 1024; /* Linux: KiB */
    return 0;
}

uint64_t pkv_bench_rss_now(void) { return proc_status_kib("VmRSS"); }
