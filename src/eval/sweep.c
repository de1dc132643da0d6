/* Running a plan (sweep.h). */
#include "eval/sweep.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/clock.h"
#include "base/error.h"

/* ---------------------------------------------------------------- running */

typedef struct {
    const pkv_eval_sweep_opts *opts;
    pkv_jsonl_writer *w;
    const pkv_eval_unit *unit;
    const pkv_eval_item *item;
    uint64_t seed;
    pkv_eval_progress *prog;
    double t0;
} emit_ctx;

static int emit_row(void *user, const pkv_eval_result *res, pkv_error *err) {
    emit_ctx *e = user;
    char *line = pkv_eval_row_json(e->unit, e->item, e->seed, &e->opts->run, res);
    if (!line) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory formatting a result line");
    int rc = pkv_jsonl_write(e->w, line, err);
    free(line);
    if (rc) return -1;
    e->prog->done++;
    e->prog->elapsed = pkv_now_seconds() - e->t0;
    e->prog->last = res;
    if (e->opts->progress) e->opts->progress(e->opts->user, e->prog);
    if (e->opts->stop && *e->opts->stop) return pkv_fail(err, PKV_ERR_INTERRUPTED, "interrupted");
    return 0;
}

/* Two units of one context: the questions of a multi-question task's sample. */
static bool same_context(const pkv_eval_unit *a, const pkv_eval_unit *b) {
    return a->task == b->task && a->task->n_questions > 1 && a->length == b->length && a->sample == b->sample &&
           a->depth == b->depth;
}

/* Execution order: sample-major, so a run cut short has every task at fewer samples. */
static int *execution_order(const pkv_eval_unit *units, int n_units) {
    int *order = malloc((size_t)(n_units > 0 ? n_units : 1) * sizeof *order);
    if (!order) return NULL;
    int n = 0, max_sample = 0;
    for (int u = 0; u < n_units; u++)
        if (units[u].sample > max_sample) max_sample = units[u].sample;
    for (int smp = 0; smp <= max_sample; smp++)
        for (int u = 0; u < n_units; u++)
            if (units[u].sample == smp) order[n++] = u;
    return order;
}

/* Before the first line: every (task, length, depth) of the units fits its
 * length, checked on the sample-0 draw that fixes each haystack's size (the
 * fitter keeps the sizes for the sweep), so a task too big for a length
 * fails at once rather than part-way through the run. */
static int check_fits(const pkv_eval_plan *plan, const pkv_eval_unit *units, int n_units, pkv_eval_fitter *fitter,
                      pkv_error *err) {
    /* every (task, length, depth) has exactly one sample-0 unit of question 0 */
    for (int u = 0; u < n_units; u++) {
        if (units[u].sample != 0 || units[u].question != 0) continue;
        pkv_eval_spec spec = pkv_eval_unit_spec(&units[u], plan->base_seed);
        pkv_eval_item item;
        if (pkv_eval_generate(fitter, &spec, &item, NULL, err)) {
            char msg[sizeof err->msg];
            snprintf(msg, sizeof msg, "%s", err->msg);
            return pkv_fail(err, err->code, "before the run: %s", msg);
        }
        pkv_eval_item_free(&item);
    }
    return 0;
}

int pkv_eval_sweep(const pkv_eval_plan *plan, const pkv_eval_sweep_opts *opts, pkv_error *err) {
    pkv_error_clear(err);
    int n_units;
    pkv_eval_unit *units = pkv_eval_plan_units(plan, &n_units);
    int *order = units ? execution_order(units, n_units) : NULL;
    bool *skip = calloc((size_t)plan->n_configs * plan->n_modes * (n_units > 0 ? n_units : 1), sizeof *skip);
    if (!units || !order || !skip) {
        free(units);
        free(order);
        free(skip);
        return pkv_fail(err, PKV_ERR_NOMEM, "out of memory");
    }
    /* this process's units are order[rank], order[rank + n_ranks], ...; count what is left */
    pkv_eval_progress prog = {0};
    char key[512];
    for (int i = opts->rank; i < n_units; i += opts->n_ranks)
        for (int m = 0, u = order[i]; m < plan->n_modes; m++)
            for (int c = 0; c < plan->n_configs; c++) {
                pkv_eval_row_key(&units[u], plan->modes[m], &plan->configs[c], key, sizeof key);
                bool done = opts->done && pkv_key_set_has(opts->done, key);
                skip[((size_t)u * plan->n_modes + m) * plan->n_configs + c] = done;
                if (done)
                    prog.skipped++;
                else
                    prog.total++;
            }
    pkv_eval_runner *runner = NULL;
    pkv_eval_fitter fitter;
    pkv_eval_tokenizing tz = {opts->model, opts->runner.chat};
    pkv_eval_fitter_init(&fitter, pkv_eval_count_tokens, &tz);
    pkv_jsonl_writer w = {-1};
    int rc = 0;
    if (prog.total > 0 && check_fits(plan, units, n_units, &fitter, err)) rc = -1;
    if (rc == 0 && prog.total > 0) {
        runner = pkv_eval_runner_new(opts->model, &opts->runner, err);
        if (!runner || pkv_jsonl_open(&w, opts->rows_path, err)) rc = -1;
    }
    if (opts->running) *opts->running = runner;
    double t0 = pkv_now_seconds();
    for (int i = opts->rank; i < n_units && rc == 0 && prog.total > 0;) {
        /* a context's questions run as a group, mode by mode, so that each
         * mode's prefill of the context serves them all (one process only:
         * ranks take units in turn) */
        int g = 1;
        if (opts->n_ranks == 1)
            while (i + g < n_units && g < PKV_EVAL_MAX_QUESTIONS && same_context(&units[order[i]], &units[order[i + g]]))
                g++;
        int first = i;
        i += opts->n_ranks == 1 ? g : opts->n_ranks;
        pkv_eval_item items[PKV_EVAL_MAX_QUESTIONS];
        bool have[PKV_EVAL_MAX_QUESTIONS] = {false};
        for (int k = 0; k < g && rc == 0; k++) {
            int u = order[first + k];
            bool any = false;
            for (int c = 0; c < plan->n_modes * plan->n_configs; c++)
                any |= !skip[(size_t)u * plan->n_modes * plan->n_configs + c];
            if (!any) continue;
            pkv_eval_spec spec = pkv_eval_unit_spec(&units[u], plan->base_seed);
            if (pkv_eval_generate(&fitter, &spec, &items[k], NULL, err)) rc = -1;
            else have[k] = true;
        }
        for (int m = 0; m < plan->n_modes && rc == 0; m++)
            for (int k = 0; k < g && rc == 0; k++) {
                int u = order[first + k];
                const bool *sk = skip + ((size_t)u * plan->n_modes + m) * plan->n_configs;
                bool todo = false;
                for (int c = 0; c < plan->n_configs; c++) todo |= !sk[c];
                if (!have[k] || !todo) continue;
                if (opts->stop && *opts->stop) {
                    rc = pkv_fail(err, PKV_ERR_INTERRUPTED, "interrupted");
                    break;
                }
                pkv_eval_spec spec = pkv_eval_unit_spec(&units[u], plan->base_seed);
                emit_ctx e = {opts, &w, &units[u], &items[k], pkv_eval_spec_seed(&spec), &prog, t0};
                prog.unit = &units[u];
                prog.mode = plan->modes[m];
                prog.last = NULL;
                if (opts->progress) opts->progress(opts->user, &prog);
                rc = pkv_eval_run_item(runner, units[u].task, &items[k], plan->modes[m], plan->configs,
                                       plan->n_configs, sk, emit_row, &e, err);
            }
        for (int k = 0; k < g; k++)
            if (have[k]) pkv_eval_item_free(&items[k]);
    }
    if (opts->running) *opts->running = NULL;
    pkv_jsonl_close(&w);
    pkv_eval_runner_free(runner);
    pkv_eval_fitter_free(&fitter);
    free(order);
    free(units);
    free(skip);
    return rc;
}
