/* The press framework: pkv_press_run, one call per layer, puts budgets
 * (budget.c), protected and forced rows and the shared top-k around a press's
 * scores; and the window attention that scoring presses share. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "press/press.h"

/* out[j] += softmax(logits)[j] over the visible rows, fp32 exp, double sum (A.4 S3-S4) */
static void softmax_accumulate(float *logits, int visible, float *out) {
    pkv_softmax(logits, visible);
    for (int j = 0; j < visible; j++) out[j] += logits[j];
}

/* rows visible to the window query r (rows are in ascending position: a prefix) */
static int visible_rows(const int32_t *pos, int n, int32_t query_pos) {
    int visible = n;
    while (visible > 0 && pos[visible - 1] > query_pos) visible--;
    return visible;
}

enum { QUERY_BLOCK = 8, KEY_TILE = 64 };

size_t pkv_press_window_scratch_floats(int n_rows, int n_queries) {
    return (size_t)(n_queries > 1 ? QUERY_BLOCK : 1) * (size_t)n_rows + 1;
}

void pkv_press_window_attention(const pkv_press_input *in, int h, int first_query, float *scratch, float *out) {
    int g = h / (in->n_head / in->n_head_kv);
    int n = in->n_rows[g], dim = in->head_dim_k;
    const float *keys = pkv_press_keys(in, g);
    const int32_t *pos = in->pos[g];
    const pkv_kernels *k = in->comp->kern;
    /* A block of queries walks the keys tile by tile, so long prompts read
     * their keys from memory once per block instead of once per query. The
     * logits are the same dot products either way: the result is identical. */
    float *z = scratch;
    int block = in->window - first_query > 1 ? QUERY_BLOCK : 1;
    for (int r0 = first_query; r0 < in->window; r0 += block) {
        int r1 = r0 + block < in->window ? r0 + block : in->window;
        int visible[QUERY_BLOCK], most = 0;
        for (int r = r0; r < r1; r++) {
            visible[r - r0] = visible_rows(pos, n, in->q_pos[r]);
            if (visible[r - r0] > most) most = visible[r - r0];
        }
        for (int j0 = 0; j0 < most; j0 += KEY_TILE) {
            int j1 = j0 + KEY_TILE < most ? j0 + KEY_TILE : most;
            for (int r = r0; r < r1; r++) {
                const float *q = pkv_press_query(in, h, r);
                float *zr = z + (size_t)(r - r0) * n;
                int end = j1 < visible[r - r0] ? j1 : visible[r - r0];
                for (int j = j0; j < end; j++) zr[j] = k->dot_f32(dim, q, keys + (size_t)j * dim) * in->attn_scale;
            }
        }
        for (int r = r0; r < r1; r++) softmax_accumulate(z + (size_t)(r - r0) * n, visible[r - r0], out);
    }
}

/* ---------------------------------------------------------------- top-k */

int pkv_press_cmp_ranked(const void *a, const void *b) {
    const pkv_press_ranked *x = a, *y = b;
    float sx = isnan(x->score) ? -INFINITY : x->score, sy = isnan(y->score) ? -INFINITY : y->score;
    if (sx != sy) return sx > sy ? -1 : 1;
    return (x->idx > y->idx) - (x->idx < y->idx);
}

int pkv_press_topk(const pkv_press_input *in, pkv_press_selection *sel, pkv_error *err) {
    /* the candidates and marks of one head at a time, reused head after head */
    int n_max = pkv_press_max_rows(in);
    pkv_press_ranked *cand = pkv_arena_alloc(in->arena, (size_t)(n_max + 1) * sizeof *cand);
    bool *take = pkv_arena_alloc(in->arena, (size_t)n_max + 1);
    if (!cand || !take) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory selecting rows of layer %d", in->layer);
    for (int s = 0; s < sel->n_sel; s++) {
        int g = pkv_sel_kv_head(in, sel, s);
        int n = in->n_rows[g];
        const bool *forced = sel->forced[s];
        int n_forced = 0;
        for (int j = 0; j < n; j++) n_forced += forced[j];
        int want = sel->budget[s] - n_forced;
        for (int j = 0; j < n; j++) take[j] = false;
        int n_cand = 0;
        for (int j = 0; j < n; j++)
            if (!forced[j]) cand[n_cand++] = (pkv_press_ranked){sel->scores[s][j], j};
        if (want > 0 && want < n_cand) qsort(cand, (size_t)n_cand, sizeof *cand, pkv_press_cmp_ranked);
        if (want > n_cand) want = n_cand;
        if (want < 0) want = 0;
        for (int i = 0; i < want; i++) take[cand[i].idx] = true;
        /* the kept rows stay until the cache is compacted: their own size */
        int32_t *keep = pkv_arena_alloc(in->arena, (size_t)(n_forced + want) * sizeof *keep + 4);
        if (!keep) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory selecting rows of layer %d", in->layer);
        int m = 0;
        for (int j = 0; j < n; j++)
            if (forced[j] || take[j]) keep[m++] = j;
        sel->keep[s] = keep;
        sel->n_keep[s] = m;
    }
    return 0;
}

/* ---------------------------------------------------------------- run */

static bool in_protected(const pkv_press_cfg *cfg, int32_t pos) {
    for (int i = 0; i < cfg->n_protect; i++)
        if (pos >= cfg->protect[i].begin && pos < cfg->protect[i].end) return true;
    return false;
}

/* The observer sees a run when it times steps, or watches this layer's clusters. */
static bool observed(const pkv_press_observer *o, bool reports_clusters, int layer) {
    return o->step || (reports_clusters && o->clusters && (o->layer < 0 || o->layer == layer));
}

int pkv_press_run(const pkv_press_cfg *cfg, const pkv_press_input *in_caller, pkv_press_selection *sel,
                  pkv_error *err) {
    const pkv_press_ops *ops = cfg->ops;
    pkv_press_input in_copy = *in_caller;
    if (observed(&cfg->observer, ops->reports_clusters, in_copy.layer)) in_copy.observer = &cfg->observer;
    const pkv_press_input *in = &in_copy;
    memset(sel, 0, sizeof *sel);
    sel->per_query_head = ops->per_query_head && ops->per_query_head(cfg->params);
    sel->n_sel = sel->per_query_head ? in->n_head : in->n_head_kv;
    int ns = sel->n_sel;
    sel->budget = pkv_arena_alloc(in->arena, (size_t)ns * sizeof *sel->budget);
    sel->scores = pkv_arena_alloc(in->arena, (size_t)ns * sizeof *sel->scores);
    sel->forced = pkv_arena_alloc(in->arena, (size_t)ns * sizeof *sel->forced);
    sel->keep = pkv_arena_alloc(in->arena, (size_t)ns * sizeof *sel->keep);
    sel->n_keep = pkv_arena_alloc(in->arena, (size_t)ns * sizeof *sel->n_keep);
    if (!sel->budget || !sel->scores || !sel->forced || !sel->keep || !sel->n_keep)
        return pkv_fail(err, PKV_ERR_NOMEM, "out of memory for the press of layer %d", in->layer);

    int compress = pkv_press_head_budgets(cfg, in, sel, err);
    if (compress < 0) return -1;
    /* S0 gate (A.4): a head whose rows fit the budget keeps them all */
    if (!compress) {
        for (int s = 0; s < ns; s++) {
            int n = in->n_rows[pkv_sel_kv_head(in, sel, s)];
            int32_t *keep = pkv_arena_alloc(in->arena, (size_t)n * sizeof *keep + 4);
            if (!keep) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory for the press of layer %d", in->layer);
            for (int j = 0; j < n; j++) keep[j] = j;
            sel->keep[s] = keep;
            sel->n_keep[s] = n;
        }
        return 0;
    }

    int forced_window = pkv_press_forced_window(cfg);
    for (int s = 0; s < ns; s++) {
        int g = pkv_sel_kv_head(in, sel, s);
        int n = in->n_rows[g];
        sel->scores[s] = pkv_arena_alloc(in->arena, (size_t)n * sizeof(float) + 4);
        sel->forced[s] = pkv_arena_alloc(in->arena, (size_t)n + 1);
        if (!sel->scores[s] || !sel->forced[s])
            return pkv_fail(err, PKV_ERR_NOMEM, "out of memory for the press of layer %d", in->layer);
        for (int j = 0; j < n; j++)
            sel->forced[s][j] = j >= n - forced_window || in_protected(cfg, in->pos[g][j]);
        /* a head whose rows fit keeps them all: force everything */
        if (sel->budget[s] >= n) memset(sel->forced[s], 1, (size_t)n);
    }
    if (in->recon_scores) {
        /* a budget shared across layers: every pressed layer holds the rows
         * of this one (a first prefill), each with its own schedule */
        int n_layers = in->n_press_layers > 0 ? in->n_press_layers : in->n_layers;
        for (int l = 0; l < n_layers; l++)
            for (int s = 0; s < ns; s++) {
                int n = in->n_rows[pkv_sel_kv_head(in, sel, s)], b = pkv_press_layer_budget(cfg, l, n_layers, n);
                sel->all_layers_budget += b < n ? b : n;
            }
    }
    if (ops->score(cfg->params, in, sel, err)) return -1;
    if (cfg->head_budget == PKV_HEAD_BUDGET_ADAPTIVE && pkv_press_adaptive_budgets(cfg->adaptive_floor, in, sel, err))
        return -1;
    if (ops->select) return ops->select(cfg->params, in, sel, err);
    return pkv_press_topk(in, sel, err);
}
