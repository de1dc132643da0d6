/* Sampling: greedy, temperature, top-k, top-p, min-p, seeds. Expected
 * frequencies are the softmax of hand-chosen logits. */
#include <math.h>
#include <string.h>

#include "promptkv.h"
#include "test.h"

/* log-probabilities 0.5, 0.25, 0.125, 0.0625, 0.0625 (then negligible tokens) */
static void make_logits(float *l, int n) {
    const double p[5] = {0.5, 0.25, 0.125, 0.0625, 0.0625};
    for (int i = 0; i < n; i++) l[i] = -100.0f;
    for (int i = 0; i < 5; i++) l[(i * 7 + 3) % n] = (float)log(p[i]); /* not in id order */
}

static int id_of(int rank, int n) { return (rank * 7 + 3) % n; }

static void sample_counts(const pkv_sampler_params *sp, const float *l, int n, int draws, int *counts) {
    pkv_sampler *s = pkv_sampler_new(sp, n);
    memset(counts, 0, (size_t)n * sizeof *counts);
    for (int i = 0; i < draws; i++) counts[pkv_sample(s, l)]++;
    pkv_sampler_free(s);
}

TEST(sampler_greedy_is_argmax_lowest_id_on_ties) {
    float l[8] = {0, 3, 1, 3, -1, 2, 0, 0};
    pkv_sampler_params sp;
    pkv_sampler_params_default(&sp);
    pkv_sampler *s = pkv_sampler_new(&sp, 8);
    CHECK_EQ_INT(pkv_sample(s, l), 1);
    pkv_sampler_free(s);
}

TEST(sampler_temperature_one_matches_softmax) {
    enum { N = 64, DRAWS = 40000 };
    float l[N];
    make_logits(l, N);
    pkv_sampler_params sp;
    pkv_sampler_params_default(&sp);
    sp.temperature = 1.0f;
    sp.seed = 7;
    int c[N];
    sample_counts(&sp, l, N, DRAWS, c);
    const double p[5] = {0.5, 0.25, 0.125, 0.0625, 0.0625};
    for (int r = 0; r < 5; r++) {
        double sd = sqrt(DRAWS * p[r] * (1 - p[r]));
        CHECK_MSG(fabs(c[id_of(r, N)] - DRAWS * p[r]) < 5 * sd, "rank %d drawn %d times, expected %.0f", r, c[id_of(r, N)],
                  DRAWS * p[r]);
    }
}

TEST(sampler_filters) {
    enum { N = 64, DRAWS = 20000 };
    float l[N];
    make_logits(l, N);
    pkv_sampler_params sp;
    pkv_sampler_params_default(&sp);
    sp.temperature = 1.0f;
    int c[N];
    /* top-k 2: only the two best, renormalised 2/3 : 1/3 */
    sp.top_k = 2;
    sample_counts(&sp, l, N, DRAWS, c);
    CHECK_EQ_INT(c[id_of(0, N)] + c[id_of(1, N)], DRAWS);
    CHECK_NEAR((double)c[id_of(0, N)] / DRAWS, 2.0 / 3, 0.02);
    /* top-p 0.8: cumulative 0.5, 0.75, 0.875 -> the first three */
    sp.top_k = 0;
    sp.top_p = 0.8f;
    sample_counts(&sp, l, N, DRAWS, c);
    CHECK_EQ_INT(c[id_of(0, N)] + c[id_of(1, N)] + c[id_of(2, N)], DRAWS);
    CHECK(c[id_of(2, N)] > 0);
    /* min-p 0.3: keep p >= 0.15 -> the first two */
    sp.top_p = 1.0f;
    sp.min_p = 0.3f;
    sample_counts(&sp, l, N, DRAWS, c);
    CHECK_EQ_INT(c[id_of(0, N)] + c[id_of(1, N)], DRAWS);
    /* low temperature sharpens towards the best token */
    sp.min_p = 0.0f;
    sp.temperature = 0.1f;
    sample_counts(&sp, l, N, DRAWS, c);
    CHECK(c[id_of(0, N)] > DRAWS * 0.99);
}

TEST(sampler_seed_determinism) {
    enum { N = 64 };
    float l[N];
    make_logits(l, N);
    pkv_sampler_params sp;
    pkv_sampler_params_default(&sp);
    sp.temperature = 1.0f;
    sp.seed = 1234;
    int a[200], b[200], c[200];
    pkv_sampler *s1 = pkv_sampler_new(&sp, N), *s2 = pkv_sampler_new(&sp, N);
    sp.seed = 1235;
    pkv_sampler *s3 = pkv_sampler_new(&sp, N);
    for (int i = 0; i < 200; i++) {
        a[i] = pkv_sample(s1, l);
        b[i] = pkv_sample(s2, l);
        c[i] = pkv_sample(s3, l);
    }
    CHECK(!memcmp(a, b, sizeof a));
    CHECK(memcmp(a, c, sizeof a) != 0);
    pkv_sampler_free(s1);
    pkv_sampler_free(s2);
    pkv_sampler_free(s3);
}
