/*
 * Text pieces of the offline evaluation: a growable string, the shipped word
 * lists, the seeded "essay-synthetic" prose generator and the sentence
 * splitter (docs/evaluation.md §1.9).
 */
#ifndef PKV_EVAL_TEXT_H
#define PKV_EVAL_TEXT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "eval/rng.h"

/* ---------------------------------------------------------------- string buffer */

/* A growable NUL-terminated string. An allocation failure sets failed and
 * makes later appends no-ops, so builders check once at the end. */
typedef struct {
    char *data;
    size_t len, cap;
    bool failed;
} pkv_sbuf;

void pkv_sbuf_free(pkv_sbuf *b);
void pkv_sbuf_add(pkv_sbuf *b, const char *s, size_t n);
void pkv_sbuf_puts(pkv_sbuf *b, const char *s);
void pkv_sbuf_printf(pkv_sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Hands the string over (never NULL unless failed); the buffer is emptied. */
char *pkv_sbuf_take(pkv_sbuf *b);
/* A malloc'd copy; NULL on allocation failure. */
char *pkv_strdup(const char *s);

/* ---------------------------------------------------------------- word lists */

extern const char *const pkv_words_adjectives[];
extern const int pkv_words_n_adjectives;
extern const char *const pkv_words_nouns[];
extern const int pkv_words_n_nouns;
extern const char *const pkv_words_verbs[];
extern const int pkv_words_n_verbs;

/* The union of the three lists, de-duplicated and sorted (the CWE pool,
 * docs/evaluation.md §1.5): a malloc'd array of pointers into the lists; NULL on
 * allocation failure. */
const char **pkv_words_pool(int *n);

/* ---------------------------------------------------------------- prose */

/* Seed of the essay-synthetic corpus; recorded in every result file. */
#define PKV_PROSE_SEED 20240611ULL

/* Appends words [offset, offset + n) of the essay-synthetic corpus, joined by
 * single spaces. The corpus is an endless stream of sentences drawn from
 * templates over the word lists with the rng seeded by `seed`, so the first n
 * words are the same whatever n is (RULER's "first n words of the essays"). */
void pkv_prose_words(pkv_sbuf *out, uint64_t seed, long offset, long n);

/* ---------------------------------------------------------------- sentences */

typedef struct {
    int begin, end; /* bytes [begin, end) of the text, terminator included */
} pkv_byte_span;

/* Our sentence splitter (docs/evaluation.md §1.9): a sentence ends at '.', '?' or
 * '!' followed by a space, or at the end of the text; the spaces between
 * sentences belong to none. Returns the count and a malloc'd array in *out
 * (NULL when the text is empty or allocation fails; -1 then). */
int pkv_split_sentences(const char *text, pkv_byte_span **out);

#endif
