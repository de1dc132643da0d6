/*
 * The press registry and the configuration API: presses are found by name,
 * options are "key=value" strings shared by the CLI, the evaluation and the
 * server. A new press is one file in press/ and one line in PRESSES.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "press/press.h"

extern const pkv_press_ops pkv_press_snapkv, pkv_press_protokv, pkv_press_streamingllm, pkv_press_h2o,
    pkv_press_tova, pkv_press_knorm, pkv_press_random;

static const pkv_press_ops *const PRESSES[] = {
    &pkv_press_snapkv, &pkv_press_protokv, &pkv_press_streamingllm, &pkv_press_h2o,
    &pkv_press_tova,   &pkv_press_knorm,   &pkv_press_random,
};
enum { N_PRESSES = sizeof PRESSES / sizeof PRESSES[0] };

const pkv_press_ops *pkv_press_find(const char *name) {
    for (int i = 0; i < N_PRESSES; i++)
        if (!strcmp(PRESSES[i]->name, name)) return PRESSES[i];
    return NULL;
}

int pkv_press_registry_count(void) { return N_PRESSES; }
const pkv_press_ops *pkv_press_registry_get(int i) { return i >= 0 && i < N_PRESSES ? PRESSES[i] : NULL; }

/* ---------------------------------------------------------------- listing (public) */

/* The options every press shares (framework level). */
static const pkv_press_option COMMON_OPTIONS[] = {
    {"budget", "rows kept per KV head per layer, window included"},
    {"ratio", "fraction of rows removed, in [0, 1): keep floor(L * (1 - ratio))"},
    {"window", "observation window: the newest rows whose queries score the rest, always kept (default 32)"},
    {"mode", "query_aware (default) | query_agnostic | recompress"},
    {"layer_budget", "uniform (default) | pyramid: PyramidKV's per-layer schedule over the pressed layers"},
    {"pyramid_beta", "PyramidKV's beta: the last layer keeps about (C - w) / beta prefix rows (default 20)"},
    {"head_budget", "uniform (default) | adaptive: AdaKV shares each layer's budget among its heads by score"},
    {"adaptive_floor", "AdaKV's alpha in [0, 1]: share of a head's budget it keeps whatever the scores (default 0.2)"},
    {"seed", "seed for seeded presses (default 0)"},
    {"protect", "BEGIN:END token range no press may evict (repeatable)"},
    {NULL, NULL},
};

bool pkv_press_list(int i, const char **name, const char **summary) {
    if (i == 0) {
        *name = "none";
        *summary = "keep the full cache";
        return true;
    }
    const pkv_press_ops *ops = pkv_press_registry_get(i - 1);
    if (!ops) return false;
    *name = ops->name;
    *summary = ops->summary;
    return true;
}

bool pkv_press_option_list(const char *press, int i, const char **key, const char **help) {
    int n_common = 0;
    while (COMMON_OPTIONS[n_common].key) n_common++;
    if (i < n_common) {
        *key = COMMON_OPTIONS[i].key;
        *help = COMMON_OPTIONS[i].help;
        return true;
    }
    const pkv_press_ops *ops = press ? pkv_press_find(press) : NULL;
    if (!ops || !ops->options) return false;
    for (int k = 0; ops->options[k].key; k++)
        if (k == i - n_common) {
            *key = ops->options[k].key;
            *help = ops->options[k].help;
            return true;
        }
    return false;
}

/* ---------------------------------------------------------------- configuration */

pkv_press_cfg *pkv_press_cfg_new(const char *name, pkv_error *err) {
    const pkv_press_ops *ops = NULL;
    if (strcmp(name, "none") != 0) {
        ops = pkv_press_find(name);
        if (!ops) {
            char known[256] = "none";
            for (int i = 0; i < N_PRESSES; i++) {
                strncat(known, ", ", sizeof known - strlen(known) - 1);
                strncat(known, PRESSES[i]->name, sizeof known - strlen(known) - 1);
            }
            pkv_fail(err, PKV_ERR_ARG, "unknown press '%s' (known: %s)", name, known);
            return NULL;
        }
    }
    pkv_press_cfg *cfg = calloc(1, sizeof *cfg);
    if (!cfg) {
        pkv_fail(err, PKV_ERR_NOMEM, "out of memory");
        return NULL;
    }
    cfg->ops = ops;
    cfg->window = 32;
    cfg->pyramid_beta = 20.0;
    cfg->adaptive_floor = 0.2;
    if (ops && ops->params_size) {
        cfg->params = calloc(1, ops->params_size);
        if (!cfg->params) {
            free(cfg);
            pkv_fail(err, PKV_ERR_NOMEM, "out of memory");
            return NULL;
        }
        ops->defaults(cfg->params);
    }
    return cfg;
}

void pkv_press_cfg_free(pkv_press_cfg *cfg) {
    if (!cfg) return;
    free(cfg->params);
    free(cfg->protect);
    free(cfg);
}

const char *pkv_press_cfg_name(const pkv_press_cfg *cfg) { return cfg && cfg->ops ? cfg->ops->name : "none"; }

bool pkv_press_cfg_compresses(const pkv_press_cfg *cfg) { return cfg && cfg->ops; }
pkv_mode pkv_press_cfg_mode(const pkv_press_cfg *cfg) { return cfg ? cfg->mode : PKV_MODE_QUERY_AWARE; }
int pkv_press_cfg_window(const pkv_press_cfg *cfg) { return cfg && cfg->ops ? cfg->window : 0; }
bool pkv_press_cfg_needs_attn_sums(const pkv_press_cfg *cfg) { return cfg && cfg->ops && cfg->ops->needs_attn_sum; }

static int parse_int(const char *key, const char *value, long lo, long hi, long *out, pkv_error *err) {
    char *end;
    long v = strtol(value, &end, 10);
    if (*value == '\0' || *end || v < lo || v > hi)
        return pkv_fail(err, PKV_ERR_ARG, "press option %s must be an integer in [%ld, %ld], got '%s'", key, lo, hi,
                        value);
    *out = v;
    return 0;
}

static int parse_double(const char *key, const char *value, double *out, pkv_error *err) {
    char *end;
    double v = strtod(value, &end);
    if (*value == '\0' || *end || !isfinite(v))
        return pkv_fail(err, PKV_ERR_ARG, "press option %s must be a number, got '%s'", key, value);
    *out = v;
    return 0;
}

int pkv_press_cfg_add_protect(pkv_press_cfg *cfg, int begin, int end, pkv_error *err) {
    if (begin < 0 || end <= begin)
        return pkv_fail(err, PKV_ERR_ARG, "protected span %d:%d must satisfy 0 <= begin < end", begin, end);
    pkv_span *p = realloc(cfg->protect, (size_t)(cfg->n_protect + 1) * sizeof *p);
    if (!p) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory");
    cfg->protect = p;
    cfg->protect[cfg->n_protect++] = (pkv_span){begin, end};
    return 0;
}

int pkv_press_cfg_set(pkv_press_cfg *cfg, const char *key, const char *value, pkv_error *err) {
    long v;
    if (!strcmp(key, "budget")) {
        if (parse_int(key, value, 1, 1L << 30, &v, err)) return -1;
        cfg->budget = (int)v;
        cfg->ratio = 0.0;
        return 0;
    }
    if (!strcmp(key, "ratio")) {
        double r = 0.0;
        if (parse_double(key, value, &r, err)) return -1;
        if (!(r >= 0.0 && r < 1.0))
            return pkv_fail(err, PKV_ERR_ARG, "press ratio must be in [0, 1) (fraction removed), got %s", value);
        cfg->ratio = r;
        cfg->budget = 0;
        return 0;
    }
    if (!strcmp(key, "window")) {
        if (parse_int(key, value, 1, 1L << 20, &v, err)) return -1;
        cfg->window = (int)v;
        return 0;
    }
    if (!strcmp(key, "seed")) {
        char *end;
        unsigned long long s = strtoull(value, &end, 10);
        if (*value == '\0' || *end || *value == '-')
            return pkv_fail(err, PKV_ERR_ARG, "press seed must be a non-negative integer, got '%s'", value);
        cfg->seed = s;
        return 0;
    }
    if (!strcmp(key, "mode")) {
        if (!strcmp(value, "query_aware")) cfg->mode = PKV_MODE_QUERY_AWARE;
        else if (!strcmp(value, "query_agnostic")) cfg->mode = PKV_MODE_QUERY_AGNOSTIC;
        else if (!strcmp(value, "recompress")) cfg->mode = PKV_MODE_RECOMPRESS;
        else
            return pkv_fail(err, PKV_ERR_ARG, "press mode must be query_aware, query_agnostic or recompress, got '%s'",
                            value);
        return 0;
    }
    if (!strcmp(key, "layer_budget")) {
        if (!strcmp(value, "uniform")) cfg->layer_budget = PKV_LAYER_BUDGET_UNIFORM;
        else if (!strcmp(value, "pyramid")) cfg->layer_budget = PKV_LAYER_BUDGET_PYRAMID;
        else return pkv_fail(err, PKV_ERR_ARG, "layer_budget must be uniform or pyramid, got '%s'", value);
        return 0;
    }
    if (!strcmp(key, "head_budget")) {
        if (!strcmp(value, "uniform")) cfg->head_budget = PKV_HEAD_BUDGET_UNIFORM;
        else if (!strcmp(value, "adaptive")) cfg->head_budget = PKV_HEAD_BUDGET_ADAPTIVE;
        else return pkv_fail(err, PKV_ERR_ARG, "head_budget must be uniform or adaptive, got '%s'", value);
        return 0;
    }
    if (!strcmp(key, "pyramid_beta")) {
        double b = 0.0;
        if (parse_double(key, value, &b, err)) return -1;
        if (!(b >= 1.0)) return pkv_fail(err, PKV_ERR_ARG, "pyramid_beta must be >= 1, got %s", value);
        cfg->pyramid_beta = b;
        return 0;
    }
    if (!strcmp(key, "adaptive_floor")) {
        double a = 0.0;
        if (parse_double(key, value, &a, err)) return -1;
        if (!(a >= 0.0 && a <= 1.0)) return pkv_fail(err, PKV_ERR_ARG, "adaptive_floor must be in [0, 1], got %s", value);
        cfg->adaptive_floor = a;
        return 0;
    }
    if (!strcmp(key, "protect")) {
        char *colon;
        long b = strtol(value, &colon, 10), e;
        if (colon == value || *colon != ':' || parse_int(key, colon + 1, 1, 1L << 30, &e, NULL))
            return pkv_fail(err, PKV_ERR_ARG, "protect expects BEGIN:END token positions, got '%s'", value);
        return pkv_press_cfg_add_protect(cfg, (int)b, (int)e, err);
    }
    if (cfg->ops && cfg->ops->set_option) {
        int rc = cfg->ops->set_option(cfg->params, key, value, err);
        if (rc <= 0) return rc;
    }
    return pkv_fail(err, PKV_ERR_ARG, "press '%s' has no option '%s' (see promptkv run --help-press %s)",
                    pkv_press_cfg_name(cfg), key, pkv_press_cfg_name(cfg));
}

int pkv_press_cfg_check(const pkv_press_cfg *cfg, pkv_error *err) {
    if (!cfg || !cfg->ops) return 0;
    if (cfg->budget <= 0 && cfg->ratio <= 0.0)
        return pkv_fail(err, PKV_ERR_ARG, "press '%s' needs a budget (--budget C) or a ratio (--ratio r)",
                        cfg->ops->name);
    int forced = cfg->ops->forced_window ? cfg->ops->forced_window(cfg->params, cfg->window) : 0;
    if (cfg->budget > 0 && cfg->budget <= forced)
        return pkv_fail(err, PKV_ERR_ARG,
                        "budget %d must be larger than the observation window %d that %s always keeps",
                        cfg->budget, forced, cfg->ops->name);
    if (cfg->ops->check) return cfg->ops->check(cfg->params, cfg->window, cfg->budget, err);
    return 0;
}

int pkv_press_cfg_describe(const pkv_press_cfg *cfg, char *buf, int len) {
    if (!cfg || !cfg->ops) return snprintf(buf, (size_t)len, "none");
    int n;
    if (cfg->budget > 0) n = snprintf(buf, (size_t)len, "%s budget=%d window=%d", cfg->ops->name, cfg->budget, cfg->window);
    else n = snprintf(buf, (size_t)len, "%s ratio=%g window=%d", cfg->ops->name, cfg->ratio, cfg->window);
    if (n >= 0 && n < len && cfg->layer_budget == PKV_LAYER_BUDGET_PYRAMID)
        n += snprintf(buf + n, (size_t)(len - n), " layer_budget=pyramid");
    if (n >= 0 && n < len && cfg->head_budget == PKV_HEAD_BUDGET_ADAPTIVE)
        n += snprintf(buf + n, (size_t)(len - n), " head_budget=adaptive");
    return n;
}

int pkv_press_cfg_watch_clusters(pkv_press_cfg *cfg, int layer, int head, pkv_cluster_view_fn fn, void *user,
                                 pkv_error *err) {
    if (fn && (!cfg || !cfg->ops || !cfg->ops->reports_clusters))
        return pkv_fail(err, PKV_ERR_ARG, "press '%s' forms no clusters to watch (protokv does)", pkv_press_cfg_name(cfg));
    if (!cfg) return 0;
    cfg->watch = (pkv_press_watch){.layer = layer, .head = head, .fn = fn, .user = user};
    return 0;
}
