/*
 * The press registry and the configuration API: presses are found by name,
 * options are "key=value" strings shared by the CLI, the evaluation and the
 * server. A new press is one file in press/ and one line in PRESSES. Whether
 * a configuration's budget words fit together (pkv_press_cfg_check) is
 * budget.c's, with every other budget rule.
 */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "press/press.h"

extern const pkv_press_ops pkv_press_snapkv, pkv_press_protokv, pkv_press_streamingllm, pkv_press_h2o,
    pkv_press_tova, pkv_press_knorm, pkv_press_random, pkv_press_keydiff, pkv_press_expected_attention,
    pkv_press_kvzip;

static const pkv_press_ops *const PRESSES[] = {
    &pkv_press_snapkv, &pkv_press_protokv, &pkv_press_streamingllm, &pkv_press_h2o,
    &pkv_press_tova,   &pkv_press_knorm,   &pkv_press_random,       &pkv_press_keydiff,
    &pkv_press_expected_attention, &pkv_press_kvzip,
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

/* The options every press shares (framework level), over pkv_press_cfg. */
static const pkv_press_choice MODES[] = {
    {"query_aware", PKV_MODE_QUERY_AWARE}, {"query_agnostic", PKV_MODE_QUERY_AGNOSTIC},
    {"recompress", PKV_MODE_RECOMPRESS}, {NULL, 0}};
static const pkv_press_choice LAYER_BUDGETS[] = {
    {"uniform", PKV_LAYER_BUDGET_UNIFORM}, {"pyramid", PKV_LAYER_BUDGET_PYRAMID}, {NULL, 0}};
static const pkv_press_choice HEAD_BUDGETS[] = {
    {"uniform", PKV_HEAD_BUDGET_UNIFORM}, {"adaptive", PKV_HEAD_BUDGET_ADAPTIVE}, {NULL, 0}};

#define CFG(field) offsetof(pkv_press_cfg, field)
static const pkv_press_option COMMON_OPTIONS[] = {
    {.key = "budget", .help = "rows kept per KV head per layer, window included", .type = PKV_OPT_INT,
     .offset = CFG(budget), .lo = 1, .hi = 1 << 30, .clears = "ratio"},
    {.key = "ratio", .help = "fraction of rows removed, in [0, 1): keep floor(L * (1 - ratio))", .type = PKV_OPT_REAL,
     .offset = CFG(ratio), .lo = 0, .hi = 1, .flags = PKV_OPT_BELOW_HI, .clears = "budget", .why = "(fraction removed)"},
    {.key = "window", .help = "observation window: the newest rows whose queries score the rest, always kept (default 32)",
     .type = PKV_OPT_INT, .offset = CFG(window), .lo = 1, .hi = 1 << 20},
    {.key = "mode", .help = "query_aware (default) | query_agnostic | recompress", .type = PKV_OPT_CHOICE,
     .offset = CFG(mode), .choices = MODES},
    {.key = "layer_budget", .help = "uniform (default) | pyramid: PyramidKV's per-layer schedule over the pressed layers",
     .type = PKV_OPT_CHOICE, .offset = CFG(layer_budget), .choices = LAYER_BUDGETS},
    {.key = "pyramid_beta", .help = "PyramidKV's beta: the last layer keeps about (C - w) / beta prefix rows (default 20)",
     .type = PKV_OPT_REAL, .offset = CFG(pyramid_beta), .lo = 1, .hi = INFINITY},
    {.key = "head_budget", .help = "uniform (default) | adaptive: AdaKV shares each layer's budget among its heads by score",
     .type = PKV_OPT_CHOICE, .offset = CFG(head_budget), .choices = HEAD_BUDGETS},
    {.key = "adaptive_floor",
     .help = "AdaKV's alpha in [0, 1]: share of a head's budget it keeps whatever the scores (default 0.2)",
     .type = PKV_OPT_REAL, .offset = CFG(adaptive_floor), .lo = 0, .hi = 1},
    {.key = "seed", .help = "seed for seeded presses (default 0)", .type = PKV_OPT_U64, .offset = CFG(seed)},
    {.key = "protect", .help = "BEGIN:END token range no press may evict (repeatable)", .type = PKV_OPT_SPAN},
    {NULL, NULL, 0, 0, 0, 0, 0, NULL, NULL, NULL},
};
#undef CFG

static const pkv_press_option *find_option(const pkv_press_option *table, const char *key) {
    for (const pkv_press_option *o = table; o && o->key; o++)
        if (!strcmp(o->key, key)) return o;
    return NULL;
}

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

bool pkv_press_reconstructs(const char *press) {
    const pkv_press_ops *ops = press ? pkv_press_find(press) : NULL;
    return ops && ops->recon;
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
bool pkv_press_cfg_needs_query_stats(const pkv_press_cfg *cfg) { return cfg && cfg->ops && cfg->ops->needs_query_stats; }

int pkv_press_cfg_set(pkv_press_cfg *cfg, const char *key, const char *value, pkv_error *err) {
    const pkv_press_option *o = find_option(COMMON_OPTIONS, key);
    if (o) return pkv_press_option_set(COMMON_OPTIONS, o, cfg, "press", value, cfg, err);
    if (cfg->ops) {
        o = find_option(cfg->ops->options, key);
        if (o && o->type != PKV_OPT_CUSTOM)
            return pkv_press_option_set(cfg->ops->options, o, cfg->params, cfg->ops->name, value, cfg, err);
        if (cfg->ops->set_option) {
            int rc = cfg->ops->set_option(cfg->params, key, value, err);
            if (rc <= 0) return rc;
        }
    }
    return pkv_fail(err, PKV_ERR_ARG, "press '%s' has no option '%s' (see promptkv run --help-press %s)",
                    pkv_press_cfg_name(cfg), key, pkv_press_cfg_name(cfg));
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

int pkv_press_cfg_observe(pkv_press_cfg *cfg, const pkv_press_observer *obs, pkv_error *err) {
    if (obs && obs->clusters && (!cfg || !cfg->ops || !cfg->ops->reports_clusters))
        return pkv_fail(err, PKV_ERR_ARG, "press '%s' forms no clusters to watch (protokv does)", pkv_press_cfg_name(cfg));
    if (!cfg) return 0;
    if (obs) cfg->observer = *obs;
    else memset(&cfg->observer, 0, sizeof cfg->observer);
    return 0;
}
