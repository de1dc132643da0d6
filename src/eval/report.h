/*
 * The summary of a results.jsonl (docs/evaluation.md §5.2 "Reporting", §2.3):
 *   summary.md       per mode: score per task (0-100) for every config, the
 *                    average, relative retention against the full cache
 *                    (tasks where the full cache scores >= 50), needle
 *                    retention, top-1 agreement, NLL difference, cache bytes;
 *                    then costs (prefill, copy + press, decode ms/token).
 *                    Tasks where the full cache scores under 50 are listed.
 *   summary.csv      the same numbers in long form, per task and length (no timings)
 *   timing.csv       costs per mode and config
 *   niah_<model>_<press>_<budget>.csv  the grid tasks' cells (§2.3 columns + task)
 *   accuracy_<mode>.svg  average score against budget and against ratio, a line per press
 *   heatmap_<task>_<mode>.svg  depth x length heatmaps, one panel per config
 */
#ifndef PKV_EVAL_REPORT_H
#define PKV_EVAL_REPORT_H

#include "promptkv.h"

typedef struct {
    const char *results_path; /* results.jsonl */
    const char *out_dir;      /* where the summary files go */
    const char *model_name;   /* for titles and file names */
    const char *command;      /* the command line, quoted in summary.md (may be NULL) */
} pkv_eval_report_opts;

int pkv_eval_report(const pkv_eval_report_opts *opts, pkv_error *err);

/* The heatmap colour of a score in [0, 100]: #F0496E -> #EBB839 -> #0CD79F. */
void pkv_eval_heat_color(double score, char out[8]);

#endif
