/* What the task generators share (items.c): the pieces an item is built
 * from, random keys, comparators; and the generators other files call. */
#ifndef PKV_EVAL_ITEMS_H
#define PKV_EVAL_ITEMS_H

#include <stdbool.h>
#include <stdint.h>

#include "eval/task.h"
#include "eval/text.h"

/* The pieces an item is built from; turned into an item by pkv_item_finish. */
typedef struct {
    pkv_sbuf context, question, prefix, reference;
    char **gold;
    int n_gold;
    pkv_byte_span *needles;
    int n_needles;
    bool failed;
} pkv_item_builder;

void pkv_item_add_gold(pkv_item_builder *b, const char *s);
/* Appends s to the context and records its span as answer-bearing. */
void pkv_item_add_needle(pkv_item_builder *b, const char *s);
void pkv_item_builder_free(pkv_item_builder *b);
/* The item from the pieces (b is consumed); -1 on failure. */
int pkv_item_finish(pkv_item_builder *b, double depth, int n_units, int n_aux, pkv_eval_item *out, pkv_error *err);

/* RULER's noise haystack line. */
extern const char pkv_item_noise_line[];

enum { PKV_ITEM_KEY_LEN = 64 };
/* words: "adjective-noun"; numbers: 7 digits; uuids: version-4 UUID text (docs/evaluation.md §1.2). */
void pkv_item_rand_text(pkv_rng *rng, pkv_rand_kind kind, char *buf, size_t len);
bool pkv_item_key_taken(const char (*keys)[PKV_ITEM_KEY_LEN], int n, const char *k);

int pkv_item_cmp_int_desc(const void *a, const void *b);
int pkv_item_cmp_int_asc(const void *a, const void *b);
int pkv_item_cmp_str_ptr(const void *a, const void *b);

/* The generators in niah.c, and VT's one-shot example (tasks.c), which the
 * length fitting measures on its own. */
int pkv_eval_build_niah(const pkv_eval_spec *spec, int n, pkv_rng *rng, pkv_eval_item *out, pkv_error *err);
int pkv_eval_build_classic(const pkv_eval_spec *spec, int n, pkv_eval_item *out, pkv_error *err);
void pkv_eval_vt_example(pkv_item_builder *b, pkv_sbuf *out, uint64_t base_seed, int n_aux, char names[5][8], int value);

#endif
