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

/* Draws tokens and counts them; a draw outside [0, n) fails the test. */
static void sample_counts(const pkv_sampler_params *sp, const float *l, int n, int draws, int *counts) {
    pkv_sampler *s = pkv_sampler_new(sp, n);
    memset(counts, 0, (size_t)n * sizeof *counts);
    pkv_error err;
    for (int i = 0; i < draws; i++) {
        int32_t t = pkv_sample(s, l, &err);
        if (t < 0 || t >= n) {
            test_fail(__FILE__, __LINE__, "draw %d gave token %d (%s)", i, t, t < 0 ? err.msg : "out of range");
            break;
        }
        counts[t]++;
    }
    pkv_sampler_free(s);
}

TEST(sampler_greedy_is_argmax_lowest_id_on_ties) {
    float l[8] = {0, 3, 1, 3, -1, 2, 0, 0};
    pkv_sampler_params sp;
    pkv_sampler_params_default(&sp);
    pkv_sampler *s = pkv_sampler_new(&sp, 8);
    CHECK_EQ_INT(pkv_sample(s, l, NULL), 1);
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
        a[i] = pkv_sample(s1, l, NULL);
        b[i] = pkv_sample(s2, l, NULL);
        c[i] = pkv_sample(s3, l, NULL);
    }
    CHECK(!memcmp(a, b, sizeof a));
    CHECK(memcmp(a, c, sizeof a) != 0);
    pkv_sampler_free(s1);
    pkv_sampler_free(s2);
    pkv_sampler_free(s3);
}

/* ---------------------------------------------------------------- non-finite logits */

/* The five sampling modes: greedy, temperature, top-k, top-p, min-p. */
enum { N_MODES = 5 };
static const char *const MODE_NAMES[N_MODES] = {"greedy", "temperature", "top-k", "top-p", "min-p"};

static void mode_params(int mode, pkv_sampler_params *sp) {
    pkv_sampler_params_default(sp);
    sp->seed = 99;
    if (mode > 0) sp->temperature = 1.0f;
    if (mode == 2) sp->top_k = 2;
    if (mode == 3) sp->top_p = 0.8f;
    if (mode == 4) sp->min_p = 0.3f;
}

/* The hand-chosen distribution with NaN at token 0 (the argmax's old seed)
 * and at one of the five likely tokens, -inf and NaN sprinkled in: no draw
 * may be a non-finite token, and the finite ones keep their relative
 * frequencies (the best remaining token is drawn most). */
TEST(sampler_nan_and_minus_inf_never_drawn_in_any_mode) {
    enum { N = 64, DRAWS = 4000 };
    float l[N];
    make_logits(l, N);
    l[0] = NAN;
    l[id_of(1, N)] = NAN; /* the second most likely token */
    for (int i = 5; i < N; i += 9) l[i] = (i / 9) % 2 ? -INFINITY : NAN;
    for (int mode = 0; mode < N_MODES; mode++) {
        pkv_sampler_params sp;
        mode_params(mode, &sp);
        int c[N];
        sample_counts(&sp, l, N, DRAWS, c);
        int drawn = 0;
        for (int i = 0; i < N; i++) {
            if (!isfinite(l[i])) CHECK_MSG(c[i] == 0, "%s: non-finite token %d drawn %d times", MODE_NAMES[mode], i, c[i]);
            drawn += c[i];
        }
        CHECK_MSG(drawn == DRAWS, "%s: %d draws counted", MODE_NAMES[mode], drawn);
        int best = id_of(0, N);
        for (int i = 0; i < N; i++)
            CHECK_MSG(c[i] <= c[best], "%s: token %d drawn more than the best", MODE_NAMES[mode], i);
    }
    /* greedy: the best finite token, whatever lies at index 0 */
    pkv_sampler_params sp;
    mode_params(0, &sp);
    pkv_sampler *s = pkv_sampler_new(&sp, N);
    CHECK_EQ_INT(pkv_sample(s, l, NULL), id_of(0, N));
    pkv_sampler_free(s);
}

/* One finite logit among NaN and -inf: every mode draws it, every time. */
TEST(sampler_single_finite_logit_among_nan) {
    enum { N = 32 };
    float l[N];
    for (int i = 0; i < N; i++) l[i] = i % 3 ? NAN : -INFINITY;
    l[17] = -3.0f;
    for (int mode = 0; mode < N_MODES; mode++) {
        pkv_sampler_params sp;
        mode_params(mode, &sp);
        int c[N];
        sample_counts(&sp, l, N, 500, c);
        CHECK_MSG(c[17] == 500, "%s: the finite token drawn %d of 500 times", MODE_NAMES[mode], c[17]);
    }
}

/* +inf logits share all the probability (the softmax's limit); greedy takes
 * the lowest id among them. */
TEST(sampler_plus_inf_logits_share_the_probability) {
    enum { N = 16, DRAWS = 4000 };
    float l[N];
    for (int i = 0; i < N; i++) l[i] = (float)i;
    l[3] = INFINITY;
    l[11] = INFINITY;
    l[7] = NAN;
    for (int mode = 0; mode < N_MODES; mode++) {
        pkv_sampler_params sp;
        mode_params(mode, &sp);
        int c[N];
        sample_counts(&sp, l, N, DRAWS, c);
        CHECK_MSG(c[3] + c[11] == DRAWS, "%s: %d of %d draws on the +inf tokens", MODE_NAMES[mode], c[3] + c[11], DRAWS);
        if (mode == 0) CHECK_EQ_INT(c[3], DRAWS);
        /* temperature and min-p keep both (equal probabilities); top-k 2 keeps both;
         * top-p 0.8 needs both (0.5 each) */
        if (mode > 0) CHECK_MSG(fabs((double)c[3] / DRAWS - 0.5) < 0.05, "%s: %d : %d", MODE_NAMES[mode], c[3], c[11]);
    }
}

/* No finite logit (all NaN; all -inf; NaN with +inf): an error naming the
 * step, in every mode, and the step counts the draws made before. */
TEST(sampler_no_finite_logit_is_an_error_naming_the_step) {
    enum { N = 8 };
    float ok[N] = {0, 1, 2, 3, 4, 5, 6, 7};
    float bad[3][N];
    for (int i = 0; i < N; i++) {
        bad[0][i] = NAN;
        bad[1][i] = -INFINITY;
        bad[2][i] = i == 4 ? INFINITY : NAN;
    }
    for (int mode = 0; mode < N_MODES; mode++) {
        for (int b = 0; b < 3; b++) {
            pkv_sampler_params sp;
            mode_params(mode, &sp);
            pkv_sampler *s = pkv_sampler_new(&sp, N);
            pkv_error err = {PKV_OK, ""};
            for (int i = 0; i < 3; i++) CHECK(pkv_sample(s, ok, &err) >= 0);
            CHECK_EQ_INT(pkv_sample(s, bad[b], &err), -1);
            CHECK_EQ_INT(err.code, PKV_ERR_NUMERIC);
            CHECK_MSG(strstr(err.msg, "non-finite logits at step 3") != NULL, "%s/%d: %s", MODE_NAMES[mode], b, err.msg);
            CHECK(pkv_sample(s, ok, &err) >= 0); /* the next step is fine again */
            pkv_sampler_free(s);
        }
    }
}
