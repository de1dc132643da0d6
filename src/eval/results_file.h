/*
 * A results file (results.jsonl, docs/evaluation.md §5): the set of keys
 * already done, checking a file against a plan before resuming, merging the
 * ranks' parts, rewriting it in canonical order, and the append-only writer.
 */
#ifndef PKV_EVAL_RESULTS_FILE_H
#define PKV_EVAL_RESULTS_FILE_H

#include <stdbool.h>

#include "eval/plan.h"

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

#endif
