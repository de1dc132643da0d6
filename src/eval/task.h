/*
 * What the evaluation's tasks are made of (docs/evaluation.md §0.1): a task,
 * the spec of one item to build (task, length, sample, depth), and the item
 * with its four segments, gold answers and needle spans. The task table and
 * the generators are in tasks.h.
 */
#ifndef PKV_EVAL_TASK_H
#define PKV_EVAL_TASK_H

#include <stdbool.h>
#include <stdint.h>

#include "eval/text.h"

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
enum { PKV_EVAL_MAX_QUESTIONS = 16 }; /* a task's n_questions at most */
typedef enum { PKV_RAND_WORDS, PKV_RAND_NUMBERS, PKV_RAND_UUIDS } pkv_rand_kind;

typedef struct {
    const char *name;
    pkv_task_kind kind;
    pkv_haystack haystack;    /* NIAH */
    pkv_rand_kind key, value; /* NIAH */
    int n_keys, n_values, n_queries;
    /* > 1: the multi-question benchmark (docs/evaluation.md §2.5): that many
     * items share one context, item q asking one question of its own */
    int n_questions;
    bool grid;              /* needle placed at an explicit depth (length x depth grid) */
    int tokens_to_generate; /* RULER's, part of the length budget (§1.1) */
    int max_new_tokens;     /* decode cap (§5.2) */
    pkv_metric metric;
    bool stop_newline; /* stop decoding at a newline after some text (§2.2 story-book) */
    const char *summary;
} pkv_eval_task;

/* What to build: a task at a length (tokens, generation included), one
 * sample, and for grid tasks a depth in percent. */
typedef struct {
    const pkv_eval_task *task;
    int length;
    int sample;
    double depth; /* grid tasks only */
    uint64_t base_seed;
    int question; /* tasks with n_questions > 1: which one, from 0 (the context is the same for all) */
} pkv_eval_spec;

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

/* RULER's 40 essay depths, round(linspace(0, 100, 40)) (niah.c). */
extern const int pkv_ruler_depths[40];

/* The NIAH-classic needle, question and pass words (§2.1-2.2). */
extern const char pkv_classic_needle[];

#endif
