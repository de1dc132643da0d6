/* Length fitting (docs/evaluation.md §1.1): the largest size of each task whose
 * prompt fits a length, searched as RULER searches it. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "eval/items.h"
#include "eval/tasks.h"

/* ---------------------------------------------------------------- length fitting (§1.1) */

void pkv_eval_fitter_init(pkv_eval_fitter *f, pkv_token_count_fn count, void *user) {
    memset(f, 0, sizeof *f);
    f->count = count;
    f->user = user;
}

void pkv_eval_fitter_free(pkv_eval_fitter *f) {
    free(f->entries);
    f->entries = NULL;
    f->n_entries = f->cap = 0;
}

/* What a search measures: tokens (generation included) at size n; -1 on error. */
typedef int (*measure_fn)(pkv_eval_fitter *f, const pkv_eval_spec *spec, int n, int n_aux, pkv_error *err);

/* The most tokens of spec's item at size n over its task's questions, but
 * question `skip` (-1: none; a task with one question has question 0):
 * every question of a multi-question sample must fit with the same context
 * (docs/evaluation.md §2.5). 0 when no question is left; -1 on error. */
static int question_tokens(pkv_eval_fitter *f, const pkv_eval_spec *spec, int n, int n_aux, int skip,
                           pkv_error *err) {
    int most = 0, nq = spec->task->n_questions > 1 ? spec->task->n_questions : 1;
    for (int q = 0; q < nq; q++) {
        if (q == skip) continue;
        pkv_eval_spec one = *spec;
        one.question = q;
        pkv_eval_item it;
        if (pkv_eval_build(&one, n, n_aux, &it, err)) return -1;
        int tok = f->count(f->user, &it, err);
        pkv_eval_item_free(&it);
        if (tok < 0) return -1;
        if (tok > most) most = tok;
    }
    return most;
}

/* Tokens of spec's item at size n plus the task's generation budget (the
 * longest of a multi-question sample's questions). */
static int item_tokens(pkv_eval_fitter *f, const pkv_eval_spec *spec, int n, int n_aux, pkv_error *err) {
    int tok = question_tokens(f, spec, n, n_aux, -1, err);
    return tok < 0 ? -1 : tok + spec->task->tokens_to_generate;
}

/* Tokens of VT's one-shot example with n lines (as its own 500-token sample: 30 to generate). */
static int vt_example_tokens(pkv_eval_fitter *f, const pkv_eval_spec *spec, int n, int n_aux, pkv_error *err) {
    (void)n_aux;
    if (n < 5) return pkv_fail(err, PKV_ERR_ARG, "vt: the example needs 5 lines");
    pkv_item_builder b = {0};
    pkv_eval_vt_example(&b, &b.context, spec->base_seed, n, NULL, 0);
    if (b.context.failed) {
        pkv_item_builder_free(&b);
        return pkv_fail(err, PKV_ERR_NOMEM, "out of memory");
    }
    pkv_eval_item it = {.context = b.context.data, .question = "", .answer_prefix = ""};
    int tok = f->count(f->user, &it, err);
    pkv_item_builder_free(&b);
    return tok < 0 ? -1 : tok + 30;
}

/* RULER's search (§1.1): probe with `increment` units for tokens per unit,
 * then binary-search [lo, max(3 * limit / per_unit, 2 * increment)] for the
 * largest size whose tokens fit in limit. Two probes (increment and twice
 * that) measure the cost of a unit without the template's fixed tokens, and
 * the upper end doubles while it still fits, so the result is the true
 * maximum even where the estimate is off. *best = 0 when even lo does not fit. */
static int binary_search_units(pkv_eval_fitter *f, measure_fn measure, const pkv_eval_spec *spec, int limit, int n_aux,
                               int lo, int increment, int *best, pkv_error *err) {
    int probe_n = increment > lo ? increment : lo;
    int p1 = measure(f, spec, probe_n, n_aux, err);
    if (p1 < 0 && !(err && err->code == PKV_ERR_LIMIT)) return -1;
    int p2 = p1 >= 0 ? measure(f, spec, 2 * probe_n, n_aux, err) : -1;
    if (p2 < 0 && err && err->code != PKV_ERR_LIMIT && err->code != PKV_OK) return -1;
    double per_unit = p2 > p1 && p1 >= 0 ? (double)(p2 - p1) / probe_n : p1 > 0 ? (double)p1 / probe_n : 1.0;
    double est = 3.0 * limit / per_unit;
    int hi = est > 1e7 ? 10000000 : (int)est;
    if (hi < 2 * increment) hi = 2 * increment;
    if (hi < lo) hi = lo;
    *best = 0;
    for (;;) {
        int tok = measure(f, spec, hi, n_aux, err);
        if (tok < 0 && !(err && err->code == PKV_ERR_LIMIT)) return -1;
        if (tok < 0 || tok > limit || hi >= 10000000) break;
        *best = hi; /* still fits: the maximum lies above */
        lo = hi + 1;
        hi *= 2;
    }
    pkv_error_clear(err);
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int tok = measure(f, spec, mid, n_aux, err);
        if (tok < 0) {
            /* a size the task cannot hold (more CWE words than the pool) counts as too big */
            if (err && err->code == PKV_ERR_LIMIT) {
                hi = mid - 1;
                continue;
            }
            return -1;
        }
        if (tok <= limit) {
            *best = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    pkv_error_clear(err);
    return 0;
}

/* FWE's own search (§1.6): from (length - 50) / 6 words, grow by the
 * increment until the prompt reaches length - 50 tokens, then step back once. */
static int fwe_search(pkv_eval_fitter *f, const pkv_eval_spec *spec, int increment, int *best, pkv_error *err) {
    int gen = spec->task->tokens_to_generate, max_len = spec->length - gen;
    int n = max_len / 6 > 1 ? max_len / 6 : 1;
    for (int guard = 0;; guard++) {
        if (guard > 100000) return pkv_fail(err, PKV_ERR_INTERNAL, "fwe: the length search does not end");
        int tok = item_tokens(f, spec, n, 0, err);
        if (tok < 0) return -1;
        if (tok - gen >= max_len) break;
        n += increment;
    }
    *best = n - increment;
    return 0;
}

static int fitted_lookup(const pkv_eval_fitter *f, const char *key) {
    for (int i = 0; i < f->n_entries; i++)
        if (!strcmp(f->entries[i].key, key)) return f->entries[i].n_units;
    return -1;
}

static int fitted_store(pkv_eval_fitter *f, const char *key, int n, pkv_error *err) {
    if (f->n_entries == f->cap) {
        int cap = f->cap ? 2 * f->cap : 16;
        pkv_fit_entry *e = realloc(f->entries, (size_t)cap * sizeof *e);
        if (!e) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory");
        f->entries = e;
        f->cap = cap;
    }
    snprintf(f->entries[f->n_entries].key, sizeof f->entries[0].key, "%s", key);
    f->entries[f->n_entries++].n_units = n;
    return 0;
}

/* The haystack size for (task, length, depth), searched once on sample 0. */
static int fitted_units(pkv_eval_fitter *f, const pkv_eval_spec *spec, int n_aux, pkv_error *err) {
    char key[96], seed_key[80];
    pkv_eval_seed_key(spec, seed_key, sizeof seed_key);
    snprintf(key, sizeof key, "%s/%d", seed_key, spec->length);
    int n = fitted_lookup(f, key);
    if (n > 0) return n;
    pkv_eval_spec probe = *spec;
    probe.sample = 0;
    pkv_eval_units u;
    pkv_eval_task_units(spec->task, spec->length, &u);
    if (spec->task->kind == PKV_TASK_FWE) {
        if (fwe_search(f, &probe, u.increment, &n, err)) return -1;
    } else if (binary_search_units(f, item_tokens, &probe, spec->length, n_aux, u.min_units, u.increment, &n, err)) {
        return -1;
    }
    if (n < u.min_units)
        return pkv_fail(err, PKV_ERR_LIMIT, "%s does not fit in %d tokens with this tokenizer (try a longer length)",
                        spec->task->name, spec->length);
    return fitted_store(f, key, n, err) ? -1 : n;
}

int pkv_eval_generate(pkv_eval_fitter *f, const pkv_eval_spec *spec, pkv_eval_item *out, int *n_tokens,
                      pkv_error *err) {
    memset(out, 0, sizeof *out);
    int n_aux = 0;
    if (spec->task->kind == PKV_TASK_VT) {
        if (f->vt_example_lines <= 0) {
            int best;
            pkv_eval_spec ex = *spec;
            if (binary_search_units(f, vt_example_tokens, &ex, 500, 0, 5, 5, &best, err)) return -1;
            /* a tokenizer so coarse that even 5 lines exceed 500 tokens gets the 5-line example */
            f->vt_example_lines = best >= 5 ? best : 5;
        }
        n_aux = f->vt_example_lines;
    }
    int n = fitted_units(f, spec, n_aux, err);
    if (n < 0) return -1;
    pkv_eval_units u;
    pkv_eval_task_units(spec->task, spec->length, &u);
    /* this sample's draw may be longer than the probe's: shrink by the increment until it fits */
    for (;;) {
        if (pkv_eval_build(spec, n, n_aux, out, err)) return -1;
        int tok = f->count(f->user, out, err);
        int others = tok < 0 ? -1 : question_tokens(f, spec, n, n_aux, spec->question, err);
        if (others < 0) {
            pkv_eval_item_free(out);
            return -1;
        }
        int most = tok > others ? tok : others;
        if (most + spec->task->tokens_to_generate <= spec->length) {
            if (n_tokens) *n_tokens = tok;
            return 0;
        }
        pkv_eval_item_free(out);
        n -= u.increment;
        if (n < u.min_units)
            return pkv_fail(err, PKV_ERR_LIMIT, "%s sample %d does not fit in %d tokens", spec->task->name,
                            spec->sample, spec->length);
    }
}
