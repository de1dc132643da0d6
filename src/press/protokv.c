/*
 * ProtoKV (ICLR 2026): the keys of a head are grouped around prototypes and
 * whole groups are kept or evicted. The official repository holds no method
 * code; this follows docs/presses.md B.0, the project's reading of the write-up
 * document, per full-attention layer and KV head on the prefix [0, P) of
 * post-RoPE keys (the observation window of the last w rows is kept whole, as
 * in SnapKV, so budgets compare):
 *
 *  1. local similarity S(i) = mean of cos(k_i, k_j) over |j - i| <= kappa,
 *     self included; at the edges the neighbours that exist (edge=zero: divide
 *     by 2 kappa + 1 as the formula read literally);
 *  2. outlier degree theta = -z, z = (S - mean S) / std S over the prefix
 *     (population std): a deviating token has a low S (sign=similar flips it);
 *  3. SAT candidates O: the m rows of largest theta (ties to the lower
 *     position), or every row with theta > beta;
 *  4. SAT prototypes: random Fourier features phi(k) = sqrt(2/r) cos(W k + b),
 *     W ~ N(0, 1/sigma^2) [r x d], b ~ U[0, 2 pi) [r], seeded by (seed, layer,
 *     head) (pkv_protokv_lsh_draw); bucket = the r bits [phi > 0], most
 *     significant first, mod u = 2^r; each non-empty bucket gives the
 *     normalised sum of its keys. sigma: median pairwise distance of the
 *     candidates (the usual RBF bandwidth heuristic; 1 if undefined);
 *  5. chunk prototypes: the other prefix rows in position order, cut into v
 *     chunks (chunk c = ranks [floor(c R / v), floor((c+1) R / v)) of the R
 *     rows, v clamped to R), normalised sums;
 *  6. every prefix row joins the prototype of highest cosine (first wins
 *     ties; SAT prototypes come first, in bucket order, then the chunks);
 *  7. cluster score psi = sum over its rows of q.k summed over the window
 *     queries and the query heads of the KV head (raw logits, as the write-up
 *     writes it) or, score=attn, of SnapKV's softmax votes; agg=mean divides
 *     by the cluster size;
 *  8. clusters in psi order (ties to the lower cluster) are kept whole while
 *     they fit the prefix budget; overflow=fill gives the remaining slots to
 *     the best-voted rows of the first cluster that does not fit (exactly the
 *     budget is kept), overflow=skip keeps looking for later clusters that fit
 *     whole. Forced rows (window, protected spans) are kept anyway and count
 *     against the budget; a cluster needs only its rows not forced.
 *
 * Budget allocation (step 9: PyramidKV layers, AdaKV heads) is the
 * framework's (press/budget.c); with head_budget=adaptive the heads share the
 * layer's slots by the per-row votes of step 7.
 */
#include "press/protokv_steps.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"
#include "base/prng.h"
#include "press/press.h"
#include "press/snapkv.h"

enum { PROTOTYPES_TOTAL = 500, MAX_LSH_BITS = 16 };

typedef enum { AGG_SUM, AGG_MEAN, AGG_MAX } cluster_agg;

typedef struct {
    int m;
    bool use_beta;
    double beta;
    int kappa;
    int edge_zero;
    int sign_similar;
    int r;
    int v;        /* 0: PROTOTYPES_TOTAL - 2^r */
    double sigma; /* 0: median pairwise distance of the candidates */
    int score_attn;
    int chunk;        /* > 0: chunk prototypes of `chunk` rows each (v = ceil(rows / chunk)) instead of v */
    int assign_local;
    int reach;        /* assign=local: chunks on each side of a row's own chunk it may join */
    int kernel;       /* positional pooling of the row votes before the clusters (1: none) */
    int pool;         /* pkv_pool_kind */
    int agg;          /* cluster_agg */
    double mix;       /* a row's rank score: (1 - mix) vote + mix psi of its cluster (1: whole clusters) */
    int overflow_skip;
    int sinks;        /* the first `sinks` rows of the prompt are always kept */
} protokv_params;

static const pkv_press_choice EDGES[] = {{"exist", 0}, {"zero", 1}, {NULL, 0}};
static const pkv_press_choice SIGNS[] = {{"deviate", 0}, {"similar", 1}, {NULL, 0}};
static const pkv_press_choice SCORES[] = {{"logit", 0}, {"attn", 1}, {NULL, 0}};
static const pkv_press_choice AGGS[] = {{"sum", AGG_SUM}, {"mean", AGG_MEAN}, {"max", AGG_MAX}, {NULL, 0}};
static const pkv_press_choice ASSIGNS[] = {{"global", 0}, {"local", 1}, {NULL, 0}};
static const pkv_press_choice POOLS[] = {{"avg", PKV_POOL_AVG}, {"max", PKV_POOL_MAX}, {NULL, 0}};
static const pkv_press_choice OVERFLOWS[] = {{"fill", 0}, {"skip", 1}, {NULL, 0}};

#define P(field) offsetof(protokv_params, field)
static const pkv_press_option PROTOKV_OPTIONS[] = {
    {.key = "m",
     .help = "SAT candidates: the m rows of highest outlier degree (default 32; the write-up: 20-40 work best; 0: none)",
     .type = PKV_OPT_INT, .offset = P(m), .lo = 0, .hi = 1 << 24},
    {.key = "beta", .help = "instead of m, every row with outlier degree > beta (a number, or none: default)"},
    {.key = "kappa", .help = "radius of the local similarity, self included (default 5)", .type = PKV_OPT_INT,
     .offset = P(kappa), .lo = 0, .hi = 1 << 16},
    {.key = "edge",
     .help = "exist (default: average over the neighbours that exist) | zero (zero padding: divide by 2 kappa + 1)",
     .type = PKV_OPT_CHOICE, .offset = P(edge_zero), .choices = EDGES},
    {.key = "sign", .help = "deviate (default: SATs are the rows least similar to their neighbours) | similar (the most)",
     .type = PKV_OPT_CHOICE, .offset = P(sign_similar), .choices = SIGNS},
    {.key = "r", .help = "LSH bits: u = 2^r SAT buckets (default 2)", .type = PKV_OPT_INT, .offset = P(r), .lo = 1,
     .hi = MAX_LSH_BITS},
    {.key = "v", .help = "chunk prototypes of the other rows, with chunk=none (default then 500 - 2^r; at most one per row)",
     .type = PKV_OPT_INT, .offset = P(v), .lo = 1, .hi = 1 << 24, .clears = "chunk"},
    {.key = "sigma", .help = "hash bandwidth: median (default: median pairwise distance of the SAT candidates) | a number > 0"},
    /* custom (a number or none); its offset is what v clears */
    {.key = "chunk", .help = "rows per chunk prototype (default 16) | none: a count v of chunk prototypes instead",
     .offset = P(chunk)},
    {.key = "assign",
     .help = "local (default: a row joins the nearest of the SAT prototypes and the chunks within reach of its "
             "own) | global (the nearest of all prototypes)",
     .type = PKV_OPT_CHOICE, .offset = P(assign_local), .choices = ASSIGNS},
    {.key = "reach", .help = "assign=local: chunks on each side of a row's own chunk it may join (default 1)",
     .type = PKV_OPT_INT, .offset = P(reach), .lo = 0, .hi = 1 << 24},
    {.key = "score", .help = "attn (default: SnapKV's softmax votes) | logit (q.k summed over the window queries and the query group)",
     .type = PKV_OPT_CHOICE, .offset = P(score_attn), .choices = SCORES},
    {.key = "kernel", .help = "positional pooling of the row votes before clustering, odd (default 7, as SnapKV; 1: none)",
     .type = PKV_OPT_INT, .offset = P(kernel), .lo = 1, .hi = 1 << 16, .flags = PKV_OPT_ODD,
     .why = "(the pooled length must equal the rows)"},
    {.key = "pool", .help = "max (default, as SnapKV) | avg: the pooling of kernel", .type = PKV_OPT_CHOICE, .offset = P(pool),
     .choices = POOLS},
    {.key = "agg", .help = "mean (default) | sum | max: a cluster's score psi from its rows' votes",
     .type = PKV_OPT_CHOICE, .offset = P(agg), .choices = AGGS},
    {.key = "mix", .help = "rank rows by (1 - mix) vote + mix psi of their cluster (default 1: whole clusters in psi order)",
     .type = PKV_OPT_REAL, .offset = P(mix), .lo = 0, .hi = 1},
    {.key = "overflow",
     .help = "fill (default: the next cluster's best rows fill the budget exactly) | skip (whole clusters only)",
     .type = PKV_OPT_CHOICE, .offset = P(overflow_skip), .choices = OVERFLOWS},
    {.key = "sinks", .help = "the first N rows of the prompt are always kept (default 0)", .type = PKV_OPT_INT,
     .offset = P(sinks), .lo = 0, .hi = 1 << 24},
    {NULL, NULL, 0, 0, 0, 0, 0, NULL, NULL, NULL},
};
#undef P

static void protokv_defaults(void *p) {
    /* chosen on the development split (docs/protokv.md, "Choosing the defaults"):
     * chunks of 16 rows joined locally, psi the mean of SnapKV's pooled softmax
     * votes (SnapKV's own kernel and pooling), whole clusters; the seed's first
     * reading is assign=global score=logit agg=sum kernel=1 chunk=none */
    *(protokv_params *)p = (protokv_params){.m = 32, .kappa = 5, .r = 2, .chunk = 16, .assign_local = true,
                                            .reach = 1, .score_attn = true, .kernel = 7, .pool = PKV_POOL_MAX,
                                            .agg = AGG_MEAN, .mix = 1.0};
}

static int parse_positive(const char *key, const char *value, double *out, pkv_error *err) {
    char *end;
    double v = strtod(value, &end);
    if (*value == '\0' || *end || !isfinite(v) || v <= 0.0)
        return pkv_fail(err, PKV_ERR_ARG, "protokv %s must be a number > 0, got '%s'", key, value);
    *out = v;
    return 0;
}

/* The options whose values are a number or a word (the table's
 * PKV_OPT_CUSTOM entries). */
static int protokv_set(void *pp, const char *key, const char *value, pkv_error *err) {
    protokv_params *p = pp;
    if (!strcmp(key, "beta")) {
        if (!strcmp(value, "none")) {
            p->use_beta = false;
            return 0;
        }
        char *end;
        double b = strtod(value, &end);
        if (*value == '\0' || *end || !isfinite(b))
            return pkv_fail(err, PKV_ERR_ARG, "protokv beta must be a number or none, got '%s'", value);
        p->beta = b;
        p->use_beta = true;
        return 0;
    }
    if (!strcmp(key, "sigma")) {
        if (!strcmp(value, "median")) {
            p->sigma = 0.0;
            return 0;
        }
        return parse_positive(key, value, &p->sigma, err);
    }
    if (!strcmp(key, "chunk")) {
        if (!strcmp(value, "none")) {
            p->chunk = 0;
            return 0;
        }
        char *end;
        long v = strtol(value, &end, 10);
        if (*value == '\0' || *end || v < 1 || v > 1L << 24)
            return pkv_fail(err, PKV_ERR_ARG, "protokv chunk must be an integer in [1, %ld] or none, got '%s'",
                            1L << 24, value);
        p->chunk = (int)v;
        p->v = 0; /* a chunk size replaces a count of chunk prototypes */
        return 0;
    }
    return 1; /* not ours */
}

static int protokv_forced_window(const void *p, int window) {
    (void)p;
    return window;
}

/* v: chunk prototypes before clamping to the rows there are (n_rest of
 * them); chunk=N asks for chunks of N rows instead. */
static int chunk_count(const protokv_params *p, int n_rest) {
    if (p->chunk > 0) return n_rest > 0 ? (n_rest + p->chunk - 1) / p->chunk : 1;
    if (p->v > 0) return p->v;
    int v = PROTOTYPES_TOTAL - (1 << p->r);
    return v > 1 ? v : 1;
}

/* ---------------------------------------------------------------- the steps */

/* proto = sum / |sum| in float (zero stays zero) */
static void normalise_into(const double *sum, int dim, float *proto) {
    double ss = 0.0;
    for (int j = 0; j < dim; j++) ss += sum[j] * sum[j];
    double inv = ss > 0.0 ? 1.0 / sqrt(ss) : 0.0;
    for (int j = 0; j < dim; j++) proto[j] = (float)(sum[j] * inv);
}

static void add_row(double *sum, const float *k, int dim) {
    for (int j = 0; j < dim; j++) sum[j] += k[j];
}

/* ---------------------------------------------------------------- per head */

typedef struct {
    int n_prefix;
    int n_clusters, n_sat_clusters;
    int32_t *cluster;    /* [n_prefix] */
    int32_t *sat_bucket; /* [n_prefix] -1: not a candidate */
    double *theta;       /* [n_prefix] */
    double *vote;        /* [n_prefix] step 7 per row */
    double *psi;         /* [n_clusters] */
    int32_t *size;       /* [n_clusters] */
} head_clusters;

/* Scratch shared by the heads of a layer (sized for the largest head). */
typedef struct {
    float *unit;
    double *norm, *sim, *sum;
    int32_t *sat, *rest;
    float *protos;
    float *attn, *attn_scratch;
} scratch_bufs;

/* Tells the observer, if it times steps, the seconds since *t0 spent in `step`. */
static void lap(const pkv_press_observer *ob, const char *step, double *t0) {
    if (!ob) return;
    double t1 = pkv_now_seconds();
    ob->step(ob->user, step, t1 - *t0);
    *t0 = t1;
}

static const pkv_press_observer *timer(const pkv_press_input *in) {
    return in->observer && in->observer->step ? in->observer : NULL;
}

/* Step 7 per row: raw window logits, or SnapKV's softmax votes (A.4 S1-S4),
 * summed over the query heads of KV head g. */
static void row_votes(const protokv_params *p, const pkv_press_input *in, int g, const float *keys, int n_prefix,
                      scratch_bufs *sb, double *vote) {
    int group = in->n_head / in->n_head_kv, dim = in->head_dim_k;
    if (p->score_attn) {
        memset(sb->attn, 0, (size_t)in->n_rows[g] * sizeof(float));
        for (int k = 0; k < group; k++) pkv_press_window_attention(in, g * group + k, 0, sb->attn_scratch, sb->attn);
        for (int i = 0; i < n_prefix; i++) vote[i] = sb->attn[i];
        return;
    }
    /* sum_h sum_r q_hr . k_i = (sum_h sum_r q_hr) . k_i */
    memset(sb->sum, 0, (size_t)dim * sizeof(double));
    for (int k = 0; k < group; k++)
        for (int r = 0; r < in->window; r++) {
            const float *q = pkv_press_query(in, g * group + k, r);
            for (int j = 0; j < dim; j++) sb->sum[j] += q[j];
        }
    for (int i = 0; i < n_prefix; i++) {
        const float *k = keys + (size_t)i * dim;
        double s = 0.0;
        for (int j = 0; j < dim; j++) s += sb->sum[j] * k[j];
        vote[i] = s;
    }
}

/* Step 6 with assign=local: a row may join the SAT prototypes (they span the
 * sequence by design) and the chunk prototypes within `reach` chunks of its
 * own chunk (the chunk of its rank among the non-candidate rows; a candidate
 * takes the chunk of the next non-candidate row). First wins ties, SAT
 * prototypes first, as in the global assignment. */
static int assign_local(const pkv_kernels *kern, const scratch_bufs *sb, head_clusters *hc, int n, int dim, int n_rest,
                        int v, int reach, pkv_arena *arena) {
    int32_t *chunk_of_rank = pkv_arena_alloc(arena, (size_t)n_rest * sizeof(int32_t) + 4);
    if (!chunk_of_rank) return -1;
    for (int c = 0; c < v; c++)
        for (long k = (long)c * n_rest / v; k < (long)(c + 1) * n_rest / v; k++) chunk_of_rank[k] = c;
    int n_sat = hc->n_sat_clusters, rank = 0;
    for (int i = 0; i < n; i++) {
        int home = chunk_of_rank[rank < n_rest ? rank : n_rest - 1];
        if (hc->sat_bucket[i] < 0) rank++;
        const float *u = sb->unit + (size_t)i * dim;
        float best = -INFINITY;
        int32_t arg = 0;
        for (int c = 0; c < n_sat; c++) {
            float s = kern->dot_f32(dim, u, sb->protos + (size_t)c * dim);
            if (s > best) best = s, arg = c;
        }
        int lo = home - reach > 0 ? home - reach : 0, hi = home + reach < v - 1 ? home + reach : v - 1;
        for (int c = lo; c <= hi; c++) {
            float s = kern->dot_f32(dim, u, sb->protos + (size_t)(n_sat + c) * dim);
            if (s > best) best = s, arg = n_sat + c;
        }
        hc->cluster[i] = arg;
    }
    return 0;
}

/* SnapKV's positional pooling (A.4 S5) of the row votes, in place. */
static int pool_votes(double *vote, int n, int kernel, pkv_pool_kind kind, pkv_arena *arena) {
    float *in = pkv_arena_alloc(arena, (size_t)n * sizeof(float) + 4), *out = pkv_arena_alloc(arena, (size_t)n * sizeof(float) + 4);
    if (!in || !out) return -1;
    for (int i = 0; i < n; i++) in[i] = (float)vote[i];
    pkv_snapkv_pool(in, n, kernel, kind, out);
    for (int i = 0; i < n; i++) vote[i] = out[i];
    return 0;
}

/* psi of every cluster from its rows' votes: sum, mean or max. */
static void cluster_scores(cluster_agg agg, const double *vote, const int32_t *cluster, int n, int n_clusters,
                           double *psi, int32_t *size) {
    for (int c = 0; c < n_clusters; c++) psi[c] = agg == AGG_MAX ? -INFINITY : 0.0;
    for (int i = 0; i < n; i++) {
        int c = cluster[i];
        psi[c] = agg == AGG_MAX ? (vote[i] > psi[c] ? vote[i] : psi[c]) : psi[c] + vote[i];
        size[c]++;
    }
    for (int c = 0; c < n_clusters; c++) {
        if (!size[c]) psi[c] = 0.0;
        else if (agg == AGG_MEAN) psi[c] /= size[c];
    }
}

/* Steps 1-7 for KV head g. */
static int cluster_head(const protokv_params *p, const pkv_press_input *in, int g, scratch_bufs *sb, head_clusters *hc,
                        pkv_error *err) {
    const pkv_press_observer *t = timer(in);
    double t0 = t ? pkv_now_seconds() : 0.0;
    const pkv_kernels *kern = in->comp->kern;
    int dim = in->head_dim_k, n = hc->n_prefix;
    const float *keys = pkv_press_keys(in, g);
    hc->theta = pkv_arena_alloc(in->arena, (size_t)n * sizeof(double));
    hc->sat_bucket = pkv_arena_alloc(in->arena, (size_t)n * sizeof(int32_t));
    hc->cluster = pkv_arena_alloc(in->arena, (size_t)n * sizeof(int32_t));
    hc->vote = pkv_arena_alloc(in->arena, (size_t)n * sizeof(double));
    if (!hc->theta || !hc->sat_bucket || !hc->cluster || !hc->vote) goto nomem;

    pkv_protokv_unit_vectors(keys, n, dim, sb->unit, sb->norm);
    pkv_protokv_local_similarity(kern, sb->unit, sb->norm, n, dim, p->kappa, p->edge_zero, sb->sim);
    pkv_protokv_outlier_degree(sb->sim, n, p->sign_similar, hc->theta);
    int n_sat = pkv_protokv_sat_candidates(hc->theta, n, p->use_beta, p->beta, p->m, in->arena, sb->sat);
    if (n_sat < 0) goto nomem;
    lap(t, "similarity", &t0);

    double sigma = p->sigma > 0.0 ? p->sigma : pkv_protokv_median_distance(keys, dim, sb->sat, n_sat, in->arena);
    double *W = pkv_arena_alloc(in->arena, (size_t)p->r * dim * sizeof(double)), b[MAX_LSH_BITS];
    if (sigma < 0.0 || !W) goto nomem;
    pkv_protokv_lsh_draw(in->seed, in->layer, g, p->r, dim, sigma, W, b);
    for (int i = 0; i < n; i++) hc->sat_bucket[i] = -1;
    for (int s = 0; s < n_sat; s++)
        hc->sat_bucket[sb->sat[s]] = pkv_protokv_lsh_bucket(W, b, p->r, dim, keys + (size_t)sb->sat[s] * dim);
    lap(t, "lsh", &t0);

    /* step 4: one prototype per non-empty bucket, in bucket order */
    int n_protos = 0, n_buckets = 1 << p->r;
    for (int bucket = 0; bucket < n_buckets; bucket++) {
        memset(sb->sum, 0, (size_t)dim * sizeof(double));
        int members = 0;
        for (int s = 0; s < n_sat; s++)
            if (hc->sat_bucket[sb->sat[s]] == bucket) {
                add_row(sb->sum, keys + (size_t)sb->sat[s] * dim, dim);
                members++;
            }
        if (members) normalise_into(sb->sum, dim, sb->protos + (size_t)n_protos++ * dim);
    }
    hc->n_sat_clusters = n_protos;
    /* step 5: the other rows in position order, v near-equal contiguous chunks */
    int n_rest = 0;
    for (int i = 0; i < n; i++)
        if (hc->sat_bucket[i] < 0) sb->rest[n_rest++] = i;
    int v = chunk_count(p, n_rest) < n_rest ? chunk_count(p, n_rest) : n_rest;
    for (int c = 0; c < v; c++) {
        long lo = (long)c * n_rest / v, hi = (long)(c + 1) * n_rest / v;
        memset(sb->sum, 0, (size_t)dim * sizeof(double));
        for (long k = lo; k < hi; k++) add_row(sb->sum, keys + (size_t)sb->rest[k] * dim, dim);
        normalise_into(sb->sum, dim, sb->protos + (size_t)n_protos++ * dim);
    }
    hc->n_clusters = n_protos;
    lap(t, "prototypes", &t0);

    /* step 6 */
    if (p->assign_local && v > 0) {
        if (assign_local(kern, sb, hc, n, dim, n_rest, v, p->reach, in->arena)) goto nomem;
    } else {
        pkv_protokv_nearest(kern, sb->unit, n, sb->protos, n_protos, dim, hc->cluster);
    }
    lap(t, "assignment", &t0);

    /* step 7 */
    row_votes(p, in, g, keys, n, sb, hc->vote);
    if (p->kernel > 1 && pool_votes(hc->vote, n, p->kernel, p->pool, in->arena)) goto nomem;
    hc->psi = pkv_arena_alloc(in->arena, (size_t)(n_protos + 1) * sizeof(double));
    hc->size = pkv_arena_alloc(in->arena, (size_t)(n_protos + 1) * sizeof(int32_t));
    if (!hc->psi || !hc->size) goto nomem;
    cluster_scores(p->agg, hc->vote, hc->cluster, n, n_protos, hc->psi, hc->size);
    lap(t, "scoring", &t0);
    return 0;
nomem:
    return pkv_fail(err, PKV_ERR_NOMEM, "out of memory clustering layer %d head %d", in->layer, g);
}

static int protokv_score(const void *pp, const pkv_press_input *in, pkv_press_selection *sel, pkv_error *err) {
    const protokv_params *p = pp;
    int nkv = in->n_head_kv, dim = in->head_dim_k, n_max = pkv_press_max_rows(in);
    head_clusters *heads = pkv_arena_alloc(in->arena, (size_t)nkv * sizeof *heads);
    scratch_bufs sb = {
        .unit = pkv_arena_alloc(in->arena, (size_t)n_max * dim * sizeof(float) + 4),
        .norm = pkv_arena_alloc(in->arena, (size_t)n_max * sizeof(double) + 8),
        .sim = pkv_arena_alloc(in->arena, (size_t)n_max * sizeof(double) + 8),
        .sum = pkv_arena_alloc(in->arena, (size_t)dim * sizeof(double)),
        .sat = pkv_arena_alloc(in->arena, (size_t)n_max * sizeof(int32_t) + 4),
        .rest = pkv_arena_alloc(in->arena, (size_t)n_max * sizeof(int32_t) + 4),
        .protos = pkv_arena_alloc(in->arena, ((size_t)(1 << p->r) + chunk_count(p, n_max)) * dim * sizeof(float)),
        .attn = p->score_attn ? pkv_arena_alloc(in->arena, (size_t)n_max * sizeof(float) + 4) : NULL,
        .attn_scratch = p->score_attn ? pkv_arena_alloc(in->arena, pkv_press_window_scratch_floats(n_max, in->window) *
                                                                        sizeof(float))
                                      : NULL,
    };
    if (!heads || !sb.unit || !sb.norm || !sb.sim || !sb.sum || !sb.sat || !sb.rest || !sb.protos ||
        (p->score_attn && (!sb.attn || !sb.attn_scratch)))
        return pkv_fail(err, PKV_ERR_NOMEM, "out of memory clustering layer %d", in->layer);
    for (int g = 0; g < nkv; g++) {
        int n = in->n_rows[g];
        heads[g].n_prefix = n - in->window > 0 ? n - in->window : 0;
        if (heads[g].n_prefix > 0 && cluster_head(p, in, g, &sb, &heads[g], err)) return -1;
        /* the per-row scores AdaKV's head budgets compare: the row votes, or the mixed ranking score */
        for (int i = 0; i < n; i++) {
            const head_clusters *hc = &heads[g];
            double s = i < hc->n_prefix
                           ? (p->mix < 1.0 ? (1.0 - p->mix) * hc->vote[i] + p->mix * hc->psi[hc->cluster[i]] : hc->vote[i])
                           : INFINITY;
            sel->scores[g][i] = (float)s;
        }
    }
    sel->state = heads;
    return 0;
}

/* ---------------------------------------------------------------- step 8 */

/* rows grouped by cluster, ascending inside a cluster (counting sort) */
typedef struct {
    int32_t *start; /* [n_clusters + 1] */
    int32_t *rows;  /* [n_prefix] */
} cluster_members;

static int group_members(const head_clusters *hc, pkv_arena *arena, cluster_members *cm) {
    cm->start = pkv_arena_alloc(arena, (size_t)(hc->n_clusters + 1) * sizeof(int32_t));
    cm->rows = pkv_arena_alloc(arena, (size_t)hc->n_prefix * sizeof(int32_t) + 4);
    int32_t *fill = pkv_arena_alloc(arena, (size_t)(hc->n_clusters + 1) * sizeof(int32_t));
    if (!cm->start || !cm->rows || !fill) return -1;
    for (int c = 0; c < hc->n_clusters; c++) cm->start[c + 1] = cm->start[c] + hc->size[c];
    memcpy(fill, cm->start, (size_t)hc->n_clusters * sizeof(int32_t));
    for (int i = 0; i < hc->n_prefix; i++) cm->rows[fill[hc->cluster[i]]++] = i;
    return 0;
}

/* Keeps clusters of hc in score order into take[]. free_slots: the budget
 * left after the forced rows. */
static int retain_clusters(const protokv_params *p, const head_clusters *hc, const bool *forced, int free_slots,
                           pkv_arena *arena, bool *take) {
    cluster_members cm;
    pkv_protokv_ranked_row *order = pkv_arena_alloc(arena, (size_t)(hc->n_clusters + 1) * sizeof *order);
    int32_t *need = pkv_arena_alloc(arena, (size_t)(hc->n_clusters + 1) * sizeof *need);
    pkv_protokv_ranked_row *cand = pkv_arena_alloc(arena, (size_t)hc->n_prefix * sizeof *cand + 16);
    if (!order || !need || !cand || group_members(hc, arena, &cm)) return -1;
    int n_order = 0;
    for (int c = 0; c < hc->n_clusters; c++) {
        if (!hc->size[c]) continue; /* a prototype nobody joined is no cluster */
        order[n_order++] = (pkv_protokv_ranked_row){hc->psi[c], c};
        for (int k = cm.start[c]; k < cm.start[c + 1]; k++) need[c] += !forced[cm.rows[k]];
    }
    qsort(order, (size_t)n_order, sizeof *order, pkv_protokv_cmp_ranked_row);
    for (int o = 0; o < n_order && free_slots > 0; o++) {
        int c = order[o].idx;
        if (need[c] <= free_slots) {
            for (int k = cm.start[c]; k < cm.start[c + 1]; k++) take[cm.rows[k]] = true;
            free_slots -= need[c];
            continue;
        }
        if (p->overflow_skip) continue;
        /* fill: the cluster's best-voted rows, ties to the lower position */
        int n_cand = 0;
        for (int k = cm.start[c]; k < cm.start[c + 1]; k++)
            if (!forced[cm.rows[k]]) cand[n_cand++] = (pkv_protokv_ranked_row){hc->vote[cm.rows[k]], cm.rows[k]};
        qsort(cand, (size_t)n_cand, sizeof *cand, pkv_protokv_cmp_ranked_row);
        for (int k = 0; k < free_slots; k++) take[cand[k].idx] = true;
        free_slots = 0;
    }
    return 0;
}

/* mix < 1: rows ranked by (1 - mix) vote + mix psi of their cluster ("cluster-
 * aware pooling": the cluster's score redistributed to its rows), ties to
 * the larger own vote, then the lower position; the best free_slots rows not
 * forced are kept. */
typedef struct {
    double key, vote;
    int32_t idx;
} mixed_row;

static int cmp_mixed_row(const void *a, const void *b) {
    const mixed_row *x = a, *y = b;
    if (x->key != y->key) return x->key > y->key ? -1 : 1;
    if (x->vote != y->vote) return x->vote > y->vote ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

static int retain_rows(const protokv_params *p, const head_clusters *hc, const bool *forced, int free_slots,
                       pkv_arena *arena, bool *take) {
    mixed_row *rows = pkv_arena_alloc(arena, (size_t)hc->n_prefix * sizeof *rows + 16);
    if (!rows) return -1;
    int n = 0;
    for (int i = 0; i < hc->n_prefix; i++)
        if (!forced[i])
            rows[n++] = (mixed_row){(1.0 - p->mix) * hc->vote[i] + p->mix * hc->psi[hc->cluster[i]], hc->vote[i], i};
    qsort(rows, (size_t)n, sizeof *rows, cmp_mixed_row);
    for (int k = 0; k < free_slots && k < n; k++) take[rows[k].idx] = true;
    return 0;
}

/* cluster_kept[c]: 2 every row kept, 1 some, 0 none (for the watcher). */
static void clusters_kept(const head_clusters *hc, const bool *take, pkv_arena *arena, int8_t *cluster_kept) {
    int32_t *kept = pkv_arena_alloc(arena, (size_t)(hc->n_clusters + 1) * sizeof(int32_t));
    if (!kept) return;
    for (int i = 0; i < hc->n_prefix; i++) kept[hc->cluster[i]] += take[i];
    for (int c = 0; c < hc->n_clusters; c++)
        cluster_kept[c] = !kept[c] ? 0 : kept[c] == hc->size[c] ? 2 : 1;
}

/* ---------------------------------------------------------------- the watcher */

static double cosine(const float *a, const float *b, int dim) {
    double ab = 0.0, aa = 0.0, bb = 0.0;
    for (int j = 0; j < dim; j++) {
        ab += (double)a[j] * b[j];
        aa += (double)a[j] * a[j];
        bb += (double)b[j] * b[j];
    }
    return aa > 0.0 && bb > 0.0 ? ab / sqrt(aa * bb) : 0.0;
}

/* Mean cosine among the marked rows and between them and the others (the
 * write-up's Gamma = intra / inter, "do the SATs cluster"). */
static void group_similarity(const float *keys, int n, int dim, const bool *in_group, double *intra, double *inter) {
    double s_in = 0.0, s_out = 0.0;
    long n_in = 0, n_out = 0;
    for (int i = 0; i < n; i++) {
        if (!in_group[i]) continue;
        for (int j = 0; j < n; j++) {
            if (j == i || (in_group[j] && j < i)) continue;
            double c = cosine(keys + (size_t)i * dim, keys + (size_t)j * dim, dim);
            if (in_group[j]) {
                s_in += c;
                n_in++;
            } else {
                s_out += c;
                n_out++;
            }
        }
    }
    *intra = n_in ? s_in / n_in : NAN;
    *inter = n_out ? s_out / n_out : NAN;
}

static int report_head(const pkv_press_input *in, int g, const head_clusters *hc, const bool *take,
                       const int8_t *cluster_kept) {
    int n = in->n_rows[g], np = hc->n_prefix, dim = in->head_dim_k;
    bool *sat = pkv_arena_alloc(in->arena, (size_t)np + 1), *rnd = pkv_arena_alloc(in->arena, (size_t)np + 1);
    int32_t *perm = pkv_arena_alloc(in->arena, (size_t)np * sizeof(int32_t) + 4);
    if (!sat || !rnd || !perm) return -1;
    int n_sat = 0;
    for (int i = 0; i < np; i++) n_sat += sat[i] = hc->sat_bucket[i] >= 0;
    /* the control: as many rows drawn at random (partial Fisher-Yates) */
    uint64_t state = in->seed ^ 0x5eedc0de5eedc0deull ^ ((uint64_t)(in->layer + 1) << 32) ^ (uint64_t)(g + 1);
    for (int i = 0; i < np; i++) perm[i] = i;
    for (int i = 0; i < n_sat && i < np; i++) {
        int j = i + (int)(pkv_splitmix64(&state) % (uint64_t)(np - i));
        int32_t tmp = perm[i];
        perm[i] = perm[j];
        perm[j] = tmp;
        rnd[perm[i]] = true;
    }
    pkv_cluster_view view = {
        .layer = in->layer,
        .head = g,
        .n_rows = n,
        .n_prefix = np,
        .pos = in->pos[g],
        .theta = hc->theta,
        .sat_bucket = hc->sat_bucket,
        .cluster = hc->cluster,
        .n_clusters = hc->n_clusters,
        .n_sat_clusters = hc->n_sat_clusters,
        .cluster_size = hc->size,
        .cluster_score = hc->psi,
        .cluster_kept = cluster_kept,
        .row_kept = take,
    };
    const float *keys = pkv_press_keys(in, g);
    group_similarity(keys, np, dim, sat, &view.sat_intra, &view.sat_inter);
    group_similarity(keys, np, dim, rnd, &view.rand_intra, &view.rand_inter);
    in->observer->clusters(in->observer->user, &view);
    return 0;
}

static int protokv_select(const void *pp, const pkv_press_input *in, pkv_press_selection *sel, pkv_error *err) {
    const protokv_params *p = pp;
    const head_clusters *heads = sel->state;
    const pkv_press_observer *t = timer(in);
    double t0 = t ? pkv_now_seconds() : 0.0;
    const pkv_press_observer *ob = in->observer;
    bool watching = ob && ob->clusters && (ob->layer < 0 || ob->layer == in->layer);
    for (int g = 0; g < sel->n_sel; g++) {
        int n = in->n_rows[g];
        const head_clusters *hc = &heads[g];
        bool *take = pkv_arena_alloc(in->arena, (size_t)n + 1);
        int8_t *cluster_kept = pkv_arena_alloc(in->arena, (size_t)(hc->n_prefix > 0 ? hc->n_clusters : 0) + 1);
        int32_t *keep = pkv_arena_alloc(in->arena, (size_t)n * sizeof(int32_t) + 4);
        if (!take || !cluster_kept || !keep) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory selecting layer %d", in->layer);
        /* forced: the framework's (window, protected spans), then the sinks */
        bool *forced = pkv_arena_alloc(in->arena, (size_t)n + 1);
        if (!forced) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory selecting layer %d", in->layer);
        int n_forced = 0;
        for (int j = 0; j < n; j++) {
            forced[j] = sel->forced[g][j] || (j < hc->n_prefix && in->pos[g][j] < p->sinks);
            n_forced += take[j] = forced[j];
        }
        int free_slots = sel->budget[g] - n_forced;
        if (hc->n_prefix > 0 && free_slots > 0 &&
            (p->mix < 1.0 ? retain_rows(p, hc, forced, free_slots, in->arena, take)
                          : retain_clusters(p, hc, forced, free_slots, in->arena, take)))
            return pkv_fail(err, PKV_ERR_NOMEM, "out of memory selecting layer %d", in->layer);
        if (hc->n_prefix > 0) clusters_kept(hc, take, in->arena, cluster_kept);
        int m = 0;
        for (int j = 0; j < n; j++)
            if (take[j]) keep[m++] = j;
        sel->keep[g] = keep;
        sel->n_keep[g] = m;
        if (watching && hc->n_prefix > 0 && (ob->head < 0 || ob->head == g) &&
            report_head(in, g, hc, take, cluster_kept))
            return pkv_fail(err, PKV_ERR_NOMEM, "out of memory reporting layer %d", in->layer);
    }
    lap(t, "retention", &t0);
    return 0;
}


const pkv_press_ops pkv_press_protokv = {
    .name = "protokv",
    .summary = "ProtoKV: SAT (LSH) and chunk prototypes, nearest-prototype clusters kept whole (ICLR 2026)",
    .options = PROTOKV_OPTIONS,
    .params_size = sizeof(protokv_params),
    .defaults = protokv_defaults,
    .set_option = protokv_set,
    .reports_clusters = true,
    .forced_window = protokv_forced_window,
    .score = protokv_score,
    .select = protokv_select,
};
