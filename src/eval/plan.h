/*
 * What a sweep runs (docs/evaluation.md §5): the plan — tasks, lengths,
 * samples, grid depths, modes, configurations —, its units in canonical
 * order, the key of each result line and the line itself.
 */
#ifndef PKV_EVAL_PLAN_H
#define PKV_EVAL_PLAN_H

#include <stdbool.h>
#include <stdint.h>

#include "eval/runner.h"
#include "eval/tasks.h"

typedef struct {
    const pkv_eval_task *task;
    int length;
    int sample;
    double depth; /* grid tasks */
    int question; /* tasks with n_questions > 1 (docs/evaluation.md §2.5) */
} pkv_eval_unit;

/* The spec of a unit's item. */
pkv_eval_spec pkv_eval_unit_spec(const pkv_eval_unit *u, uint64_t base_seed);

typedef struct {
    /* what to run */
    const pkv_eval_task **tasks;
    int n_tasks;
    const int *lengths; /* RULER-style tasks */
    int n_lengths;
    int samples;
    const int *grid_lengths; /* grid tasks */
    int n_grid_lengths;
    const double *grid_depths;
    int n_grid_depths;
    int grid_samples;
    const pkv_eval_mode *modes;
    int n_modes;
    const pkv_eval_config *configs; /* configs[0] is the full cache */
    int n_configs;
    uint64_t base_seed;
} pkv_eval_plan;

/* The units of a plan in canonical order; malloc'd, count in *n. */
pkv_eval_unit *pkv_eval_plan_units(const pkv_eval_plan *plan, int *n);

/* The key of a result line: "task/length/sample[/d<depth>][/q<question>]/mode/<config describe>". */
void pkv_eval_row_key(const pkv_eval_unit *u, pkv_eval_mode mode, const pkv_eval_config *c, char *buf, int len);

/* What makes result lines one run's (run.json): the model's name and the
 * chat setting, written into every line beside the item's seed, so a line
 * copied from another run is recognised. */
typedef struct {
    const char *model;
    bool chat;
} pkv_eval_run_id;

/* The JSON line (newline included) of a result. */
char *pkv_eval_row_json(const pkv_eval_unit *u, const pkv_eval_item *item, uint64_t seed, const pkv_eval_run_id *run,
                        const pkv_eval_result *res);

#endif
