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

#include "eval/text.h"
#include "promptkv.h"

typedef enum {
    PKV_METRIC_MATCH_ALL,  /* fraction of gold strings contained (RULER string_match_all) */
    PKV_METRIC_MATCH_PART, /* 1 if any gold string is contained (string_match_part) */
    PKV_METRIC_FIRST_INT,  /* the first integer equals the gold value (LongEval) */
    PKV_METRIC_ROUGE1      /* ROUGE-1 recall of the needle's content words (NIAH-classic) */
} pkv_metric;

typedef enum {
    PKV_TASK_NIAH,
    PKV_TASK_VT,
    PKV_TASK_CWE,
    PKV_TASK_FWE,
    PKV_TASK_LONGEVAL,
    PKV_TASK_CLASSIC
} pkv_task_kind;
typedef enum { PKV_HAY_NOISE, PKV_HAY_ESSAY, PKV_HAY_NEEDLE } pkv_haystack;
typedef enum { PKV_RAND_WORDS, PKV_RAND_NUMBERS, PKV_RAND_UUIDS } pkv_rand_kind;

typedef struct {
    const char *name;
    pkv_task_kind kind;
    pkv_haystack haystack;    /* NIAH */
    pkv_rand_kind key, value; /* NIAH */
    int n_keys, n_values, n_queries;
    bool grid;              /* needle placed at an explicit depth (length x depth grid) */
    int tokens_to_generate; /* RULER's, part of the length budget (§1.1) */
    int max_new_tokens;     /* decode cap (§5.2) */
    pkv_metric metric;
    bool stop_newline; /* stop decoding at a newline after some text (§2.2 story-book) */
    const char *summary;
} pkv_eval_task;

const pkv_eval_task *pkv_eval_task_find(const char *name);
int pkv_eval_task_count(void);
const pkv_eval_task *pkv_eval_task_get(int i);

/* What to build: a task at a length (tokens, generation included), one
 * sample, and for grid tasks a depth in percent. */
typedef struct {
    const pkv_eval_task *task;
    int length;
    int sample;
    double depth; /* grid tasks only */
    uint64_t base_seed;
} pkv_eval_spec;

/* The text the seed of a spec is derived from: the task name, plus ":depth"
 * for grid tasks (e.g. "niah_passkey_noise:25"). */
void pkv_eval_seed_key(const pkv_eval_spec *spec, char *buf, int len);
uint64_t pkv_eval_spec_seed(const pkv_eval_spec *spec);

typedef struct {
    char *context, *question, *answer_prefix;
    char **gold;
    int n_gold;
    char *reference;        /* a correct continuation of the answer prefix (for the gold NLL) */
    pkv_byte_span *needles; /* spans of the answer-bearing text in context (retention oracle) */
    int n_needles;
    double depth; /* percent of the context where the (first) answer sits; -1 if none */
    int n_units;  /* haystack size it was built with (lines, words, ...) */
    int n_aux;    /* VT: lines of the one-shot example's haystack */
} pkv_eval_item;

void pkv_eval_item_free(pkv_eval_item *item);

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

/* RULER's 40 essay depths, round(linspace(0, 100, 40)). */
extern const int pkv_ruler_depths[40];

/* The NIAH-classic needle, question and pass words (§2.1-2.2). */
extern const char pkv_classic_needle[];

#endif
