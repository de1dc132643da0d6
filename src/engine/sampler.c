/*
 * Sampling: greedy, or temperature with top-k, top-p and min-p filters,
 * seeded (splitmix64 seeding xoshiro256**). Filters apply in llama.cpp's
 * default order: top-k, top-p, min-p, then temperature.
 *
 * The sampler is total over non-finite logits (a corrupt model's NaN or
 * infinite weights reach them): NaN ranks below every number and is never
 * chosen, -inf has probability 0, and +inf logits, when present, share all
 * the probability (the limit of the softmax). A step without a single finite
 * logit is an error, never a random token.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "base/prng.h"
#include "promptkv.h"

struct pkv_sampler {
    pkv_sampler_params p;
    int n_vocab;
    int step; /* tokens sampled so far, for messages */
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

int32_t pkv_logits_argmax(const float *x, int n) {
    int32_t best = -1;
    bool finite = false;
    for (int i = 0; i < n; i++) {
        if (isnan(x[i])) continue;
        finite = finite || isfinite(x[i]);
        if (best < 0 || x[i] > x[best]) best = i; /* ties: the lower id, deterministic */
    }
    return finite ? best : -1;
}

/* A candidate's logit relative to the best one (0 for every +inf logit when the best is +inf). */
static float relative(const float *logits, int32_t id, float mx, bool inf_top) {
    return inf_top ? 0.0f : logits[id] - mx;
}

/* sort candidates by logit descending, ties by id (candidates are never NaN) */
static int cmp_desc(const void *a, const void *b, void *ctx) {
    const float *l = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (l[x] != l[y]) return l[x] > l[y] ? -1 : 1;
    return x < y ? -1 : (x > y);
}

int32_t pkv_sample(pkv_sampler *s, const float *logits, pkv_error *err) {
    int n_vocab = s->n_vocab;
    int step = s->step++;
    int32_t best = pkv_logits_argmax(logits, n_vocab);
    if (best < 0)
        return pkv_fail(err, PKV_ERR_NUMERIC,
                        "non-finite logits at step %d: none of the %d logits is a finite number (NaN or "
                        "infinite: a corrupt model or a numerical overflow)",
                        step, n_vocab);
    if (s->p.temperature <= 0.0f) return best;
    /* Candidates: tokens within 40 nats (times the temperature, if above 1)
     * of the best. The rest have probability below e^-40 relative to it, so
     * dropping them changes no filter's outcome and keeps the sort small.
     * NaN and -inf fail the comparison. When the best is +inf the candidates
     * are the +inf logits, each at 0 relative to the best. */
    float mx = logits[best];
    bool inf_top = isinf(mx);
    float cut = 40.0f * (s->p.temperature > 1.0f ? s->p.temperature : 1.0f);
    int n = 0;
    for (int i = 0; i < n_vocab; i++)
        if (inf_top ? logits[i] == mx : logits[i] >= mx - cut) s->idx[n++] = i;
    qsort_r(s->idx, (size_t)n, sizeof *s->idx, cmp_desc, (void *)logits);
    int k = s->p.top_k > 0 && s->p.top_k < n ? s->p.top_k : n;
    /* softmax at temperature 1 over the k candidates for the p/min-p filters */
    double sum = 0.0;
    for (int i = 0; i < k; i++) {
        s->prob[i] = expf(relative(logits, s->idx[i], mx, inf_top));
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
        s->prob[i] = expf(relative(logits, s->idx[i], mx, inf_top) / s->p.temperature);
        tsum += s->prob[i];
    }
    double r = pkv_rng_uniform(&s->rng) * tsum, acc = 0.0;
    for (int i = 0; i < k; i++) {
        acc += s->prob[i];
        if (r < acc) return s->idx[i];
    }
    return s->idx[k - 1];
}
