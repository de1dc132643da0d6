/*
 * Expected Attention (Devoto et al. 2025), as kvpress 0.5.5's
 * ExpectedAttentionPress (docs/presses.md Part E.2). The queries to come are
 * modelled by the statistics of the prefill's own queries before RoPE
 * (mean mu and covariance S over the call's queries but its first n_sink),
 * moved to the next n_future_positions positions by the mean RoPE rotation R
 * over them: mu' = R mu, S' = R S R^T. A row j after the sinks then expects,
 * per query head, the logit z_j = k_j.mu' / sqrt(d) + k_j^T S' k_j / (2d) (the
 * log of E[exp(q.k / sqrt(d))] for q ~ N(mu', S')), softmax over the rows after the
 * sinks, mean over the query heads of the KV head, then (score + epsilon) *
 * |v_j|. The first n_sink rows are always kept.
 */
#include <math.h>
#include <stddef.h>
#include <string.h>

#include "base/error.h"
#include "base/threads.h"
#include "press/press.h"

typedef struct {
    int n_future;
    int n_sink;
    int use_covariance;
    int use_vnorm;
    double epsilon;
} ea_params;

static const pkv_press_choice BOOLS[] = {{"true", 1}, {"false", 0}, {NULL, 0}};

#define P(field) offsetof(ea_params, field)
static const pkv_press_option EA_OPTIONS[] = {
    {.key = "n_future_positions", .help = "future positions the mean RoPE rotation averages over (default 512)",
     .type = PKV_OPT_INT, .offset = P(n_future), .lo = 1, .hi = 1 << 20},
    {.key = "n_sink", .help = "first rows always kept and queries left out of the statistics (default 4)",
     .type = PKV_OPT_INT, .offset = P(n_sink), .lo = 0, .hi = PKV_QUERY_STATS_HEAD,
     .why = "(the prefill keeps the first 64 queries to leave out)"},
    {.key = "use_covariance", .help = "true (default) | false: add the queries' covariance term",
     .type = PKV_OPT_CHOICE, .offset = P(use_covariance), .choices = BOOLS},
    {.key = "use_vnorm", .help = "true (default) | false: multiply by the value norm",
     .type = PKV_OPT_CHOICE, .offset = P(use_vnorm), .choices = BOOLS},
    {.key = "epsilon", .help = "added to the score before the value norm multiplies it (default 0)",
     .type = PKV_OPT_REAL, .offset = P(epsilon), .lo = 0, .hi = INFINITY},
    {NULL, NULL, 0, 0, 0, 0, 0, NULL, NULL, NULL},
};
#undef P

static void ea_defaults(void *p) {
    *(ea_params *)p = (ea_params){.n_future = 512, .n_sink = 4, .use_covariance = 1, .use_vnorm = 1};
}

/* Rbar = mean over positions [p0, p0 + n) of the layer's RoPE rotation, as a
 * d x d matrix (column a = the mean of e_a rotated): built with the kernel the
 * forward pass rotates queries with, so any RoPE layout and scaling match. */
static int mean_rotation(const pkv_press_input *in, int32_t p0, int n, double *rbar, pkv_error *err) {
    int d = in->head_dim_k;
    float *x = pkv_arena_alloc(in->arena, (size_t)n * d * sizeof(float));
    int32_t *pos = pkv_arena_alloc(in->arena, (size_t)n * sizeof(int32_t));
    if (!x || !pos) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory scoring layer %d", in->layer);
    for (int t = 0; t < n; t++) pos[t] = p0 + t;
    for (int a = 0; a < d; a++) {
        memset(x, 0, (size_t)n * d * sizeof(float));
        for (int t = 0; t < n; t++) x[(size_t)t * d + a] = 1.0f;
        pkv_rope(x, n, 1, d, pos, in->rope, in->rope_inv_freq);
        for (int i = 0; i < d; i++) {
            double sum = 0.0;
            for (int t = 0; t < n; t++) sum += x[(size_t)t * d + i];
            rbar[(size_t)i * d + a] = sum / n;
        }
    }
    return 0;
}

/* Per query head: mu' (d) and S' (d x d, f32 for the kernels' dot products). */
typedef struct {
    const pkv_press_input *in;
    const ea_params *p;
    const double *rbar;
    double *work;     /* [n_head][3 d d] scratch */
    float *mu, *cov;  /* [n_head][d], [n_head][d][d] */
    float **z;        /* [n_head] -> [n_rows of its KV head] logits, then probabilities */
} ea_job;

static void head_stats(ea_job *j, int h) {
    const pkv_press_input *in = j->in;
    int d = in->head_dim_k, ns = j->p->n_sink;
    double n = in->q_stats_n - ns;
    double *mu = j->work + (size_t)h * 3 * d * d, *cov = mu + d, *tmp = cov + (size_t)d * d;
    /* the call's queries after its first n_sink: all of them minus those */
    for (int a = 0; a < d; a++) {
        double s = in->q_sum[(size_t)h * d + a];
        for (int t = 0; t < ns; t++) s -= in->q_head[((size_t)t * in->n_head + h) * d + a];
        mu[a] = s / n;
    }
    for (int a = 0; a < d; a++)
        for (int b = 0; b < d; b++) {
            double s = in->q_sq[((size_t)h * d + a) * d + b];
            for (int t = 0; t < ns; t++) {
                const float *q = in->q_head + ((size_t)t * in->n_head + h) * d;
                s -= (double)q[a] * q[b];
            }
            /* population covariance, divided by the queries counted (kvpress) */
            cov[(size_t)a * d + b] = s / n - mu[a] * mu[b];
        }
    /* mu' = R mu, S' = R S R^T */
    for (int i = 0; i < d; i++) {
        double s = 0.0;
        for (int a = 0; a < d; a++) s += j->rbar[(size_t)i * d + a] * mu[a];
        j->mu[(size_t)h * d + i] = (float)s;
    }
    if (!j->p->use_covariance) return;
    for (int i = 0; i < d; i++)
        for (int b = 0; b < d; b++) {
            double s = 0.0;
            for (int a = 0; a < d; a++) s += j->rbar[(size_t)i * d + a] * cov[(size_t)a * d + b];
            tmp[(size_t)i * d + b] = s;
        }
    for (int i = 0; i < d; i++)
        for (int k = 0; k < d; k++) {
            double s = 0.0;
            for (int b = 0; b < d; b++) s += tmp[(size_t)i * d + b] * j->rbar[(size_t)k * d + b];
            j->cov[((size_t)h * d + i) * d + k] = (float)s;
        }
}

/* Query head h: expected logits of the rows after the sinks, softmax in place. */
static void head_scores(void *arg, int64_t item, int thread) {
    (void)thread;
    ea_job *j = arg;
    const pkv_press_input *in = j->in;
    int h = (int)item, d = in->head_dim_k, ns = j->p->n_sink;
    int g = h / (in->n_head / in->n_head_kv), n = in->n_rows[g];
    const pkv_kernels *k = in->comp->kern;
    head_stats(j, h);
    const float *mu = j->mu + (size_t)h * d, *cov = j->cov + (size_t)h * d * d;
    float *z = j->z[h];
    float y[1024];
    double inv_sqrt_d = 1.0 / sqrt((double)d), mx = -INFINITY;
    for (int r = ns; r < n; r++) {
        const float *key = in->keys[g] + (size_t)r * d;
        double v = k->dot_f32(d, key, mu) * inv_sqrt_d;
        if (j->p->use_covariance) {
            for (int i = 0; i < d; i++) y[i] = k->dot_f32(d, cov + (size_t)i * d, key);
            v += k->dot_f32(d, key, y) / d / 2.0;
        }
        z[r] = (float)v;
        if (v > mx) mx = v;
    }
    double sum = 0.0;
    for (int r = ns; r < n; r++) sum += exp((double)z[r] - mx);
    for (int r = ns; r < n; r++) z[r] = (float)(exp((double)z[r] - mx) / sum);
}

static int ea_score(const void *pp, const pkv_press_input *in, pkv_press_selection *sel, pkv_error *err) {
    const ea_params *p = pp;
    int d = in->head_dim_k, ns = p->n_sink, group = in->n_head / in->n_head_kv;
    if (!in->q_sum || !in->rope)
        return pkv_fail(err, PKV_ERR_INTERNAL, "expected_attention needs the prefill's query statistics");
    if (!in->values) return pkv_fail(err, PKV_ERR_INTERNAL, "expected_attention needs the values");
    if (d > 1024) return pkv_fail(err, PKV_ERR_UNSUPPORTED, "expected_attention: head_dim %d above 1024", d);
    if (in->q_stats_n <= ns || in->q_head_n < ns)
        return pkv_fail(err, PKV_ERR_ARG, "expected_attention: layer %d's prefill has %d queries, n_sink is %d",
                        in->layer, in->q_stats_n, ns);
    for (int g = 0; g < in->n_head_kv; g++)
        if (in->n_rows[g] <= ns)
            return pkv_fail(err, PKV_ERR_ARG, "expected_attention: layer %d head %d holds %d rows, n_sink is %d",
                            in->layer, g, in->n_rows[g], ns);
    ea_job j = {.in = in, .p = p};
    double *rbar = pkv_arena_alloc(in->arena, (size_t)d * d * sizeof(double));
    j.work = pkv_arena_alloc(in->arena, (size_t)in->n_head * 3 * d * d * sizeof(double));
    j.mu = pkv_arena_alloc(in->arena, (size_t)in->n_head * d * sizeof(float));
    j.cov = pkv_arena_alloc(in->arena, (size_t)in->n_head * d * d * sizeof(float));
    j.z = pkv_arena_alloc(in->arena, (size_t)in->n_head * sizeof(float *));
    if (!rbar || !j.work || !j.mu || !j.cov || !j.z)
        return pkv_fail(err, PKV_ERR_NOMEM, "out of memory scoring layer %d", in->layer);
    for (int h = 0; h < in->n_head; h++) {
        j.z[h] = pkv_arena_alloc(in->arena, (size_t)in->n_rows[h / group] * sizeof(float) + 4);
        if (!j.z[h]) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory scoring layer %d", in->layer);
    }
    /* the next token's position: kvpress takes the call's length, the same
     * number for a first prefill */
    int32_t next = in->q_pos[in->window - 1] + 1;
    if (mean_rotation(in, next, p->n_future, rbar, err)) return -1;
    j.rbar = rbar;
    pkv_pool_for(in->comp->pool, in->n_head, head_scores, &j);

    for (int s = 0; s < sel->n_sel; s++) {
        int g = pkv_sel_kv_head(in, sel, s), n = in->n_rows[g];
        int h0 = sel->per_query_head ? s : g * group, h1 = sel->per_query_head ? s + 1 : (g + 1) * group;
        float *score = sel->scores[s];
        for (int r = 0; r < ns; r++) score[r] = INFINITY; /* kvpress: max + 1 */
        for (int r = ns; r < n; r++) {
            double m = 0.0;
            for (int h = h0; h < h1; h++) m += j.z[h][r];
            m /= (h1 - h0);
            if (p->use_vnorm) {
                const float *v = in->values[g] + (size_t)r * in->head_dim_v;
                double ss = 0.0;
                for (int i = 0; i < in->head_dim_v; i++) ss += (double)v[i] * v[i];
                m = (m + p->epsilon) * sqrt(ss);
            }
            score[r] = (float)m;
        }
    }
    return 0;
}

const pkv_press_ops pkv_press_expected_attention = {
    .name = "expected_attention",
    .summary = "Expected Attention: attention expected from the statistics of future queries (no question needed)",
    .options = EA_OPTIONS,
    .params_size = sizeof(ea_params),
    .defaults = ea_defaults,
    .keys_all_heads = true, /* its query heads are scored in parallel */
    .needs_values = true,
    .needs_query_stats = true,
    .score = ea_score,
};
