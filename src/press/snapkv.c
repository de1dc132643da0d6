/*
 * SnapKV (docs/presses.md Part A), as the official code does it: the softmax
 * attention of the observation window's queries over all rows (causal inside
 * the window), summed over the window rows on the prefix (the vote, A.4 S4),
 * pooled along positions (S5: avg with zero padding and divisor kernel as
 * PyTorch's avg_pool1d, or max), top-k with ties to the lower position (A.15).
 *
 * granularity query_head: each query head selects its own rows, as the
 * official code (A.5); the cache then stores one head per query head.
 * granularity kv_head (default, D.2): the votes of a KV head's query group are
 * aggregated (mean, max or sum) before pooling, one selection per KV head.
 */
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "press/press.h"
#include "press/snapkv.h"

typedef struct {
    int kernel;
    int pool;           /* pkv_pool_kind */
    int per_query_head; /* granularity */
    int agg;            /* pkv_group_agg */
} snapkv_params;

static const pkv_press_choice POOLS[] = {{"avg", PKV_POOL_AVG}, {"max", PKV_POOL_MAX}, {NULL, 0}};
static const pkv_press_choice GRANULARITIES[] = {{"kv_head", 0}, {"query_head", 1}, {NULL, 0}};
static const pkv_press_choice AGGS[] = {{"mean", PKV_AGG_MEAN}, {"max", PKV_AGG_MAX}, {"sum", PKV_AGG_SUM}, {NULL, 0}};

#define P(field) offsetof(snapkv_params, field)
static const pkv_press_option SNAPKV_OPTIONS[] = {
    {.key = "kernel", .help = "pooling kernel, odd (default 7; 1 = no pooling)", .type = PKV_OPT_INT,
     .offset = P(kernel), .lo = 1, .hi = 1001, .flags = PKV_OPT_ODD,
     .why = "(even kernels give P+1 pooled scores: docs/presses.md A.4 S5)"},
    {.key = "pool", .help = "avg | max (default max)", .type = PKV_OPT_CHOICE, .offset = P(pool), .choices = POOLS},
    {.key = "granularity", .help = "kv_head (default: one selection per KV head) | query_head (official: per query head)",
     .type = PKV_OPT_CHOICE, .offset = P(per_query_head), .choices = GRANULARITIES},
    {.key = "group_agg", .help = "mean | max | sum: how a KV head's query heads vote (kv_head granularity; default mean)",
     .type = PKV_OPT_CHOICE, .offset = P(agg), .choices = AGGS},
    {NULL, NULL, 0, 0, 0, 0, 0, NULL, NULL, NULL},
};
#undef P

static void snapkv_defaults(void *p) {
    /* the paper's LongBench setting (A.9): w 32, kernel 7, max pooling */
    *(snapkv_params *)p = (snapkv_params){.kernel = 7, .pool = PKV_POOL_MAX, .agg = PKV_AGG_MEAN};
}

static int snapkv_forced_window(const void *p, int window) {
    (void)p;
    return window;
}

static bool snapkv_per_query_head(const void *p) { return ((const snapkv_params *)p)->per_query_head; }

void pkv_snapkv_pool(const float *v, int n, int kernel, pkv_pool_kind kind, float *out) {
    int half = kernel / 2;
    if (kind == PKV_POOL_AVG) {
        /* zero padding, divisor always `kernel` (avg_pool1d's count_include_pad=True);
         * each window summed afresh so equal windows give equal sums (ties stay ties) */
        for (int i = 0; i < n; i++) {
            int lo = i - half < 0 ? 0 : i - half, hi = i + half >= n ? n - 1 : i + half;
            double sum = 0.0;
            for (int j = lo; j <= hi; j++) sum += v[j];
            out[i] = (float)(sum / kernel);
        }
    } else {
        /* padding never wins */
        for (int i = 0; i < n; i++) {
            int lo = i - half < 0 ? 0 : i - half, hi = i + half >= n ? n - 1 : i + half;
            float m = v[lo];
            for (int j = lo + 1; j <= hi; j++)
                if (v[j] > m) m = v[j];
            out[i] = m;
        }
    }
}

void pkv_snapkv_aggregate(const float *const *head_votes, int n_heads, int n, pkv_group_agg agg, float *out) {
    for (int j = 0; j < n; j++) {
        float acc = head_votes[0][j];
        for (int k = 1; k < n_heads; k++) {
            if (agg == PKV_AGG_MAX) acc = head_votes[k][j] > acc ? head_votes[k][j] : acc;
            else acc += head_votes[k][j];
        }
        out[j] = agg == PKV_AGG_MEAN ? acc / (float)n_heads : acc;
    }
}

static int snapkv_score(const void *pp, const pkv_press_input *in, pkv_press_selection *sel, pkv_error *err) {
    const snapkv_params *p = pp;
    int group = in->n_head / in->n_head_kv;
    int n_vote_heads = sel->per_query_head ? 1 : group;
    /* one set of buffers for the layer, reused head after head */
    int n_max = pkv_press_max_rows(in);
    float **head_votes = pkv_arena_alloc(in->arena, (size_t)n_vote_heads * sizeof(float *));
    float *votes = pkv_arena_alloc(in->arena, (size_t)n_max * sizeof(float) + 4);
    float *scratch = pkv_arena_alloc(in->arena, pkv_press_window_scratch_floats(n_max, in->window) * sizeof(float));
    if (!head_votes || !votes || !scratch) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory scoring layer %d", in->layer);
    for (int k = 0; k < n_vote_heads; k++) {
        head_votes[k] = pkv_arena_alloc(in->arena, (size_t)n_max * sizeof(float) + 4);
        if (!head_votes[k]) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory scoring layer %d", in->layer);
    }
    for (int s = 0; s < sel->n_sel; s++) {
        int g = pkv_sel_kv_head(in, sel, s);
        int n = in->n_rows[g];
        int prefix = n - in->window;
        for (int k = 0; k < n_vote_heads; k++) {
            memset(head_votes[k], 0, (size_t)n * sizeof(float));
            int h = sel->per_query_head ? s : g * group + k;
            pkv_press_window_attention(in, h, 0, scratch, head_votes[k]);
        }
        float *score = sel->scores[s];
        if (prefix > 0) {
            /* kv_head granularity: aggregate the group's votes before pooling (A.5, D.2) */
            pkv_snapkv_aggregate((const float *const *)head_votes, n_vote_heads, prefix, p->agg, votes);
            pkv_snapkv_pool(votes, prefix, p->kernel, p->pool, score);
        }
        for (int j = prefix > 0 ? prefix : 0; j < n; j++) score[j] = INFINITY; /* the window: kept anyway */
    }
    return 0;
}

const pkv_press_ops pkv_press_snapkv = {
    .name = "snapkv",
    .summary = "SnapKV: observation-window attention votes, pooled, top-k per head (NeurIPS 2024)",
    .options = SNAPKV_OPTIONS,
    .params_size = sizeof(snapkv_params),
    .defaults = snapkv_defaults,
    .forced_window = snapkv_forced_window,
    .per_query_head = snapkv_per_query_head,
    .score = snapkv_score,
};
