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

#include "eval/plan.h"
#include "eval/results_file.h"
#include "eval/runner.h"

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
