/*
 * Sampling: greedy, or temperature with top-k, top-p and min-p filters,
 * seeded (splitmix64 seeding xoshiro256**). Filters apply in llama.cpp's
 * default order: top-k, top-p, min-p, then temperature.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/prng.h"
#include "promptkv.h"

struct pkv_sampler {
    pkv_sampler_params p;
    int n_vocab;
    pkv_rng rng;
    int32_t *idx;
    float *prob;
};

void pkv_sampler_params_default(pkv_sampler_params *p) {
    memset(p, 0, sizeof *p);
    p->temperature = 0.0f;
    p->top_p = 1.0f;
    p->seed = 42;
}

pkv_sampler *pkv_sampler_new(const pkv_sampler_params *params, int n_vocab) {
    pkv_sampler *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    if (params) s->p = *params;
    else pkv_sampler_params_default(&s->p);
    s->n_vocab = n_vocab;
    pkv_rng_seed(&s->rng, s->p.seed);
    s->idx = malloc((size_t)n_vocab * sizeof *s->idx);
    s->prob = malloc((size_t)n_vocab * sizeof *s->prob);
    if (!s->idx || !s->prob) {
        pkv_sampler_free(s);
        return NULL;
    }
    return s;
}

void pkv_sampler_free(pkv_sampler *s) {
    if (!s) return;
    free(s->idx);
    free(s->prob);
    free(s);
}

static int32_t argmax(const float *x, int n) {
    int32_t best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i; /* ties: the lower id, deterministic */
    return best;
}

/* sort candidates by logit descending, ties by id */
static int cmp_desc(const void *a, const void *b, void *ctx) {
    const float *l = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (l[x] != l[y]) return l[x] > l[y] ? -1 : 1;
    return x < y ? -1 : (x > y);
}

int32_t pkv_sample(pkv_sampler *s, const float *logits) {
    int n_vocab = s->n_vocab;
    int32_t best = argmax(logits, n_vocab);
    if (s->p.temperature <= 0.0f) return best;
    /* Candidates: tokens within 40 nats (times the temperature, if above 1)
     * of the best. The rest have probability below e^-40 relative to it, so
     * dropping them changes no filter's outcome and keeps the sort small. */
    float mx = logits[best];
    float cut = 40.0f * (s->p.temperature > 1.0f ? s->p.temperature : 1.0f);
    int n = 0;
    for (int i = 0; i < n_vocab; i++)
        if (logits[i] >= mx - cut) s->idx[n++] = i;
    qsort_r(s->idx, (size_t)n, sizeof *s->idx, cmp_desc, (void *)logits);
    int k = s->p.top_k > 0 && s->p.top_k < n ? s->p.top_k : n;
    /* softmax at temperature 1 over the k candidates for the p/min-p filters */
    double sum = 0.0;
    for (int i = 0; i < k; i++) {
        s->prob[i] = expf(logits[s->idx[i]] - mx);
        sum += s->prob[i];
    }
    for (int i = 0; i < k; i++) s->prob[i] = (float)(s->prob[i] / sum);
    if (s->p.top_p < 1.0f) {
        double cum = 0.0;
        int keep = k;
        for (int i = 0; i < k; i++) {
            cum += s->prob[i];
            if (cum >= s->p.top_p) {
                keep = i + 1;
                break;
            }
        }
        k = keep;
    }
    if (s->p.min_p > 0.0f) {
        float floor_p = s->p.min_p * s->prob[0];
        int keep = 1;
        while (keep < k && s->prob[keep] >= floor_p) keep++;
        k = keep;
    }
    /* temperature on the survivors */
    double tsum = 0.0;
    for (int i = 0; i < k; i++) {
        s->prob[i] = expf((logits[s->idx[i]] - mx) / s->p.temperature);
        tsum += s->prob[i];
    }
    double r = pkv_rng_uniform(&s->rng) * tsum, acc = 0.0;
    for (int i = 0; i < k; i++) {
        acc += s->prob[i];
        if (r < acc) return s->idx[i];
    }
    return s->idx[k - 1];
}
