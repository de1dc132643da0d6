/*
 * Offline long-context tasks (docs/evaluation.md §1 RULER-synth, §2 needle in a
 * haystack, §2.4 LongEval-Lines), deterministic by seed.
 *
 * An item has four segments (§0.1): context (compressed), question
 * (compressed only in query-aware mode), answer_prefix (never compressed) and
 * gold. Items are built for an explicit haystack size by pkv_eval_build (no
 * tokenizer involved); pkv_eval_generate fits the size to a token length with
 * the caller's token counter (§1.1).
 *
 * Our prompts are RULER-equivalent in construction and distribution, not
 * byte-identical (our own PRNG, word lists and prose; §0.5).
 */
#ifndef PKV_EVAL_TASKS_H
#define PKV_EVAL_TASKS_H

#include <stdbool.h>
#include <stdint.h>

#include "eval/task.h"
#include "eval/text.h"
#include "promptkv.h"

const pkv_eval_task *pkv_eval_task_find(const char *name);
int pkv_eval_task_count(void);
const pkv_eval_task *pkv_eval_task_get(int i);

/* The text the seed of a spec is derived from: the task name, plus ":depth"
 * for grid tasks (e.g. "niah_passkey_noise:25"). */
void pkv_eval_seed_key(const pkv_eval_spec *spec, char *buf, int len);
uint64_t pkv_eval_spec_seed(const pkv_eval_spec *spec);

/* Haystack size rules of a task at a length (§1.1). */
typedef struct {
    int increment; /* essay 500 words (50 below 4096), noise/needle/LongEval lines 25 (5 below 4096), CWE 10 */
    int min_units;
} pkv_eval_units;
void pkv_eval_task_units(const pkv_eval_task *task, int length, pkv_eval_units *out);

/* Builds spec's item with n_units of haystack (and, for VT, n_aux lines in
 * the one-shot example). */
int pkv_eval_build(const pkv_eval_spec *spec, int n_units, int n_aux, pkv_eval_item *out, pkv_error *err);

/* Counts the tokens the engine will see for an item: context (with BOS),
 * question, answer prefix; -1 with err set on failure. */
typedef int (*pkv_token_count_fn)(void *user, const pkv_eval_item *item, pkv_error *err);

/* Fitted haystack sizes, shared by every sample of a (task, length, depth):
 * the binary search runs once on sample 0 (§1.1). */
typedef struct {
    char key[96];
    int n_units;
} pkv_fit_entry;

typedef struct {
    pkv_token_count_fn count;
    void *user;
    pkv_fit_entry *entries;
    int n_entries, cap;
    int vt_example_lines; /* fitted once per run; 0 until then */
} pkv_eval_fitter;

void pkv_eval_fitter_init(pkv_eval_fitter *f, pkv_token_count_fn count, void *user);
void pkv_eval_fitter_free(pkv_eval_fitter *f);

/* Builds spec's item with the largest haystack whose tokens plus the task's
 * tokens_to_generate fit in spec->length; per sample, shrinks by the
 * increment while a draw overflows. *n_tokens receives the item's tokens. */
int pkv_eval_generate(pkv_eval_fitter *f, const pkv_eval_spec *spec, pkv_eval_item *out, int *n_tokens, pkv_error *err);

#endif
