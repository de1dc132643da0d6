/*
 * A sweep: every (task, length, sample[, depth]) unit, in every mode, under
 * every configuration, one JSON line per result (docs/evaluation.md §5).
 *
 * Files of an output directory:
 *   results.jsonl        one line per (unit, mode, config), appended and
 *                        synced as each finishes; a line counts only when it
 *                        is complete and parses. --resume truncates a trailing
 *                        partial line and skips every key already present.
 *   results.jsonl.part<R> rank R's lines during an MPI run, merged into
 *                        results.jsonl by rank 0 at the end (or at the next
 *                        start, after a kill).
 * At the end results.jsonl is rewritten (temporary file + rename) in the
 * canonical order (unit, mode, config) without duplicates, so a run split over
 * ranks or interrupted and resumed ends with the same file as one straight run
 * (timings aside: they sit in each line's trailing "time" object).
 */
#ifndef PKV_EVAL_SWEEP_H
#define PKV_EVAL_SWEEP_H

#include <signal.h>
#include <stdbool.h>
#include <stdint.h>

#include "eval/runner.h"
#include "eval/tasks.h"

typedef struct {
    const pkv_eval_task *task;
    int length;
    int sample;
    double depth; /* grid tasks */
} pkv_eval_unit;

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

/* The key of a result line: "task/length/sample[/d<depth>]/mode/<config describe>". */
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

/* ---------------------------------------------------------------- the set of finished keys */

typedef struct {
    char **keys; /* sorted */
    int n, cap;
} pkv_key_set;

void pkv_key_set_free(pkv_key_set *s);
bool pkv_key_set_has(const pkv_key_set *s, const char *key);
int pkv_key_set_add(pkv_key_set *s, const char *key); /* keeps it sorted; -1 on allocation failure */

/* ---------------------------------------------------------------- files */

/* Drops a trailing partial line (no final newline) of a JSONL file; a
 * missing file is fine. */
int pkv_jsonl_truncate_partial(const char *path, pkv_error *err);
/* Adds the keys of every complete, parsable line of path (missing file: none). */
int pkv_jsonl_load_keys(const char *path, pkv_key_set *keys, pkv_error *err);
/* What pkv_jsonl_check found besides this run's lines (1-based line numbers). */
typedef struct {
    int corrupt, first_corrupt;          /* lines that are not result lines: recomputed */
    int outside, first_outside;          /* result lines of keys this plan does not produce: kept, not run */
    char first_outside_key[160];
} pkv_jsonl_check_report;

/* Adds to keys the keys of path's result lines that belong to this run and
 * plan, counting in rep the lines that do not parse (a partial last line is
 * dropped before by pkv_jsonl_truncate_partial) and those whose key the plan
 * does not produce. A line whose key the plan produces but that another run
 * wrote (another model, chat setting or seed: the item's seed is derived
 * from the run's) is refused: PKV_ERR_FORMAT naming the line, since counting
 * it as done would mix two runs' results. Lines written before lines carried
 * the model and chat fields are checked by their seed alone. */
int pkv_jsonl_check(const char *path, const pkv_eval_plan *plan, const pkv_eval_run_id *run, pkv_key_set *keys,
                    pkv_jsonl_check_report *rep, pkv_error *err);

/* Appends the complete, parsable lines of src whose keys are not in keys to
 * dst (adding them to keys), syncs dst, and removes src. */
int pkv_jsonl_merge(const char *dst, const char *src, pkv_key_set *keys, pkv_error *err);
/* Rewrites path in the canonical order of plan (unknown keys after, by key),
 * without duplicates or broken lines: temporary file, fsync, rename. */
int pkv_jsonl_normalize(const char *path, const pkv_eval_plan *plan, pkv_error *err);

/* An append-only JSONL writer: every line goes out in one write() and is
 * synced before the call returns. */
typedef struct {
    int fd;
} pkv_jsonl_writer;

int pkv_jsonl_open(pkv_jsonl_writer *w, const char *path, pkv_error *err);
int pkv_jsonl_write(pkv_jsonl_writer *w, const char *line, pkv_error *err);
void pkv_jsonl_close(pkv_jsonl_writer *w);

/* ---------------------------------------------------------------- running */

typedef struct {
    int done, total; /* result lines of this process: finished (this session) and to do */
    int skipped;     /* already present at the start */
    const pkv_eval_unit *unit;
    pkv_eval_mode mode;
    double elapsed;              /* seconds since the sweep started */
    const pkv_eval_result *last; /* the result just written (NULL at a unit's start) */
} pkv_eval_progress;

typedef struct {
    pkv_model *model;
    pkv_eval_runner_opts runner;
    const char *rows_path; /* where this process appends */
    int rank, n_ranks;     /* units i with i % n_ranks == rank */
    const pkv_key_set *done;
    pkv_eval_run_id run;   /* written into every line */
    void (*progress)(void *user, const pkv_eval_progress *p);
    void *user;
    volatile sig_atomic_t *stop;        /* set (e.g. by SIGINT) to stop at the next layer boundary */
    pkv_eval_runner *volatile *running; /* receives the runner while it runs (to interrupt it); may be NULL */
} pkv_eval_sweep_opts;

/* Runs this process's share of the plan. First every (task, length, depth)
 * is checked to fit its length (the sample-0 draw that fixes the haystack's
 * size), so a plan with a task too big for a length fails before its first
 * line. PKV_ERR_INTERRUPTED when stopped. */
int pkv_eval_sweep(const pkv_eval_plan *plan, const pkv_eval_sweep_opts *opts, pkv_error *err);

#endif
