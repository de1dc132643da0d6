/*
 * Scoring (docs/evaluation.md §1.7, §2.2, §2.4): RULER's postprocessing and
 * substring metrics, LongEval's first integer, ROUGE-1 recall for
 * NIAH-classic. Every score is in [0, 1]; reports multiply by 100.
 */
#ifndef PKV_EVAL_SCORE_H
#define PKV_EVAL_SCORE_H

#include <stdbool.h>

#include "eval/tasks.h"

/* RULER's postprocess_pred: strip whitespace, replace every control
 * character U+0000-U+001F by "\n", strip again. Writes into out (cap bytes,
 * NUL-terminated, truncated if needed). */
void pkv_score_postprocess(const char *pred, char *out, int cap);

/* Fraction of gold strings contained in pred (case-insensitive substring). */
double pkv_score_match_all(const char *pred, const char *const *gold, int n_gold);
/* 1 if any gold string is contained in pred, else 0. */
double pkv_score_match_part(const char *pred, const char *const *gold, int n_gold);
/* 1 if the first run of digits in pred is the integer gold, else 0. */
double pkv_score_first_int(const char *pred, const char *gold);
/* ROUGE-1 recall of reference's content words (lowercase alphanumeric tokens
 * minus a few stopwords) in pred, counts clipped. */
double pkv_score_rouge1_recall(const char *pred, const char *reference);
/* NIAH-classic pass flag: "sandwich" and "dolores park" both present. */
bool pkv_score_classic_pass(const char *pred);

/* The task's metric on a raw prediction (postprocessed here). */
double pkv_score(pkv_metric metric, const char *pred, const char *const *gold, int n_gold);

#endif
