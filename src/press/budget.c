/*
 * Budget allocators (docs/presses.md A.13): how many rows each layer and each
 * head keeps. They wrap whatever press scores the rows instead of copying it
 * (docs/design.md "The press interface"): pkv_press_run asks
 * pkv_press_layer_budget for every head, lets the press score, and, for
 * head_budget=adaptive, rewrites the per-head budgets from the scores before
 * the top-k or the press's own select(). The cache then holds those row counts
 * (kvcache keeps ragged heads), so the memory saved is real.
 *
 * PyramidKV, budget C (rows per head, window included): KVCache-Factory's
 * PyramidKVCluster.update_kv, integer arithmetic. Ratio r: kvpress 0.5.5's
 * PyramidKVPress.get_layer_budget, float arithmetic and Python's round().
 * AdaKV: KVCache-Factory's AdaKVCluster.update_kv (from FFY0/AdaKV).
 */
#include <math.h>
#include <stdlib.h>

#include "base/error.h"
#include "press/press.h"

int pkv_press_forced_window(const pkv_press_cfg *cfg) {
    return cfg->ops && cfg->ops->forced_window ? cfg->ops->forced_window(cfg->params, cfg->window) : 0;
}

/* ---------------------------------------------------------------- the budget words */

int pkv_press_cfg_check(const pkv_press_cfg *cfg, pkv_error *err) {
    if (!cfg || !cfg->ops) return 0;
    if (cfg->budget <= 0 && cfg->ratio <= 0.0)
        return pkv_fail(err, PKV_ERR_ARG, "press '%s' needs a budget (--budget C) or a ratio (--ratio r)",
                        cfg->ops->name);
    int forced = pkv_press_forced_window(cfg);
    if (cfg->budget > 0 && cfg->budget <= forced)
        return pkv_fail(err, PKV_ERR_ARG,
                        "budget %d must be larger than the observation window %d that %s always keeps",
                        cfg->budget, forced, cfg->ops->name);
    /* the press's own parameters, against the budget and window */
    if (cfg->ops->check) return cfg->ops->check(cfg->params, cfg->window, cfg->budget, err);
    return 0;
}

/* ---------------------------------------------------------------- per layer */

static int uniform_budget(const pkv_press_cfg *cfg, int n_rows) {
    if (cfg->budget > 0) return cfg->budget;
    /* kvpress: n_kept = max(1, int(L * (1 - ratio))) */
    long kept = (long)floor((double)n_rows * (1.0 - cfg->ratio));
    return kept < 1 ? 1 : (int)kept;
}

/* KVCache-Factory PyramidKVCluster (beta 20): min = (C-w)//beta,
 * max = 2(C-w) - min, clamped to the prefix L-w; layer l keeps
 * max - l*((max-min)//(N-1)) prefix rows plus the window. L < C keeps all;
 * C <= L < 2(C-w) keeps C (SnapKV). One pressed layer: uniform (the original
 * divides by N-1 = 0). */
static int pyramid_budget_rows(const pkv_press_cfg *cfg, int layer, int n_layers, int n_rows) {
    long C = cfg->budget, w = pkv_press_forced_window(cfg), L = n_rows;
    if (L < C || L < 2 * (C - w) || n_layers < 2) return (int)C;
    long min_num = (long)floor((double)(C - w) / cfg->pyramid_beta);
    long max_num = 2 * (C - w) - min_num;
    if (max_num >= L - w) {
        max_num = L - w;
        min_num = 2 * (C - w) - max_num;
    }
    long steps = (max_num - min_num) / (n_layers - 1); /* max >= min here: floor division */
    return (int)(max_num - layer * steps + w);
}

/* kvpress PyramidKVPress.get_layer_budget: C = w + L(1-r) in floats; falls back
 * to SnapKV's round(L(1-r)) unless L >= max >= min >= w; returns
 * round(max - l*(max-min)/(N-1)) rows, window included. Python's round() is
 * half to even, as rint() in the default rounding mode. */
static int pyramid_ratio_rows(const pkv_press_cfg *cfg, int layer, int n_layers, int n_rows) {
    double w = pkv_press_forced_window(cfg), q = n_rows, keep = q * (1.0 - cfg->ratio);
    double C = w + keep;
    double min_num = (C - w) / cfg->pyramid_beta;
    double max_num = (C - w) * 2.0 - min_num;
    if (max_num >= q - w) {
        max_num = q - w;
        min_num = (C - w) * 2.0 - max_num;
    }
    if (!(q >= max_num && max_num >= min_num && min_num >= w)) {
        double r = rint(keep);
        return r < 1.0 ? 1 : (int)r;
    }
    double steps = n_layers > 1 ? (max_num - min_num) / (n_layers - 1) : 0.0;
    return (int)rint(max_num - layer * steps);
}

int pkv_press_layer_budget(const pkv_press_cfg *cfg, int layer, int n_layers, int n_rows) {
    if (cfg->layer_budget != PKV_LAYER_BUDGET_PYRAMID) return uniform_budget(cfg, n_rows);
    if (cfg->budget > 0) return pyramid_budget_rows(cfg, layer, n_layers, n_rows);
    return pyramid_ratio_rows(cfg, layer, n_layers, n_rows);
}

/* ---------------------------------------------------------------- per head */

/* The layer schedule runs over the pressed layers when the caller says which
 * they are (full-attention layers only, D.6). */
static int layer_budget(const pkv_press_cfg *cfg, const pkv_press_input *in, int n_rows) {
    if (in->n_press_layers > 0) return pkv_press_layer_budget(cfg, in->press_layer, in->n_press_layers, n_rows);
    return pkv_press_layer_budget(cfg, in->layer, in->n_layers, n_rows);
}

int pkv_press_head_budgets(const pkv_press_cfg *cfg, const pkv_press_input *in, pkv_press_selection *sel,
                           pkv_error *err) {
    bool any_compress = false;
    for (int s = 0; s < sel->n_sel; s++) {
        int n = in->n_rows[pkv_sel_kv_head(in, sel, s)];
        sel->budget[s] = layer_budget(cfg, in, n);
        if (sel->budget[s] < n) any_compress = true;
    }
    if (!any_compress) return 0;
    int forced_window = pkv_press_forced_window(cfg);
    /* a schedule may leave a layer nothing but its window (PyramidKV's min can be 0) */
    bool scheduled = cfg->layer_budget != PKV_LAYER_BUDGET_UNIFORM || cfg->head_budget != PKV_HEAD_BUDGET_UNIFORM;
    for (int s = 0; s < sel->n_sel; s++) {
        int n = in->n_rows[pkv_sel_kv_head(in, sel, s)];
        if (sel->budget[s] < n && (scheduled ? sel->budget[s] < forced_window : sel->budget[s] <= forced_window))
            return pkv_fail(err, PKV_ERR_ARG,
                            "layer %d keeps %d rows, not more than the observation window of %d: raise the budget or "
                            "lower the ratio",
                            in->layer, sel->budget[s], forced_window);
    }
    return 1;
}

/* Rows pkv_press_run keeps for one head: all of them when its budget fits
 * (the S0 gate), else the forced rows (the window and the protected rows
 * before it) and the best others up to the budget. */
static int64_t head_rows(const pkv_press_cfg *cfg, int budget, int n_rows) {
    if (budget >= n_rows) return n_rows;
    int fw = pkv_press_forced_window(cfg);
    int64_t forced = fw < n_rows ? fw : n_rows;
    for (int p = 0; p < n_rows - fw; p++)
        for (int i = 0; i < cfg->n_protect; i++)
            if (p >= cfg->protect[i].begin && p < cfg->protect[i].end) {
                forced++;
                break;
            }
    return budget > forced ? budget : forced;
}

int64_t pkv_press_layer_rows(const pkv_press_cfg *cfg, int layer, int n_layers, int n_rows, int n_head,
                             int n_head_kv) {
    const pkv_press_ops *ops = cfg->ops;
    if (!ops) return (int64_t)n_head_kv * n_rows;
    int n_sel = ops->per_query_head && ops->per_query_head(cfg->params) ? n_head : n_head_kv;
    int budget = pkv_press_layer_budget(cfg, layer, n_layers, n_rows);
    int64_t rows = (int64_t)n_sel * head_rows(cfg, budget, n_rows);
    /* AdaKV moves rows between heads; its rounding (half to even, per head)
     * may add up to half a row per head */
    if (cfg->head_budget == PKV_HEAD_BUDGET_ADAPTIVE && budget < n_rows) rows += (n_sel + 1) / 2;
    int64_t all = (int64_t)n_sel * n_rows;
    return rows < all ? rows : all;
}

/* ---------------------------------------------------------------- AdaKV */

/*
 * AdaKVCluster.update_kv: with base capacity B per head (prefix rows), take
 * the top H*B scores over all heads of the layer; head h holding n_h of them
 * keeps round(n_h * (1 - alpha) + floor(B * alpha)) rows, computed in float32
 * and rounded half to even as torch does. Here B is the free slots of a head
 * (its budget minus its forced rows: window and protected spans), and the
 * candidates are its rows not forced; heads with different free slots share
 * their sum, B being its mean rounded down.
 */
int pkv_press_adaptive_budgets(double alpha, const pkv_press_input *in, pkv_press_selection *sel, pkv_error *err) {
    int ns = sel->n_sel;
    int *n_forced = pkv_arena_alloc(in->arena, (size_t)ns * sizeof *n_forced);
    int *n_cand = pkv_arena_alloc(in->arena, (size_t)ns * sizeof *n_cand);
    if (!n_forced || !n_cand) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory sharing the budget of layer %d", in->layer);
    long total_free = 0, total_cand = 0;
    for (int s = 0; s < ns; s++) {
        int n = in->n_rows[pkv_sel_kv_head(in, sel, s)];
        for (int j = 0; j < n; j++) n_forced[s] += sel->forced[s][j];
        n_cand[s] = n - n_forced[s];
        int free_slots = sel->budget[s] - n_forced[s];
        total_free += free_slots > 0 ? free_slots : 0;
        total_cand += n_cand[s];
    }
    if (total_free >= total_cand) return 0; /* nothing to share: every head keeps all it has */
    pkv_press_ranked *all = pkv_arena_alloc(in->arena, (size_t)(total_cand + 1) * sizeof *all);
    if (!all) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory sharing the budget of layer %d", in->layer);
    long k = 0;
    for (int s = 0; s < ns; s++) {
        int n = in->n_rows[pkv_sel_kv_head(in, sel, s)];
        for (int j = 0; j < n; j++)
            if (!sel->forced[s][j]) all[k++] = (pkv_press_ranked){sel->scores[s][j], s};
    }
    /* score descending, ties to the lower head (then any order: counts only) */
    qsort(all, (size_t)total_cand, sizeof *all, pkv_press_cmp_ranked);
    long base = total_free / ns;
    int floor_rows = (int)((double)base * alpha); /* Python int(): truncation */
    float keep_share = (float)(1.0 - alpha);
    int *n_top = pkv_arena_alloc(in->arena, (size_t)ns * sizeof *n_top);
    if (!n_top) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory sharing the budget of layer %d", in->layer);
    for (long i = 0; i < total_free; i++) n_top[all[i].idx]++;
    for (int s = 0; s < ns; s++) {
        int cap = (int)rintf((float)n_top[s] * keep_share + (float)floor_rows);
        if (cap > n_cand[s]) cap = n_cand[s];
        if (cap < 0) cap = 0;
        sel->budget[s] = n_forced[s] + cap;
    }
    return 0;
}
