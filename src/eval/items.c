/* Building an item: the pieces a generator fills (context, question, answer
 * prefix, reference, gold answers, needle spans), random keys and values
 * (docs/evaluation.md §1.2), and small helpers the generators share. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "eval/items.h"

/* ---------------------------------------------------------------- item helpers */

/* RULER's noise haystack line (docs/evaluation.md §1.2). */
const char pkv_item_noise_line[] =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";

void pkv_eval_item_free(pkv_eval_item *it) {
    free(it->context);
    free(it->question);
    free(it->answer_prefix);
    for (int i = 0; i < it->n_gold; i++) free(it->gold[i]);
    free(it->gold);
    free(it->reference);
    free(it->needles);
    *it = (pkv_eval_item){0};
}


void pkv_item_add_gold(pkv_item_builder *b, const char *s) {
    char **g = realloc(b->gold, (size_t)(b->n_gold + 1) * sizeof *g);
    char *d = pkv_strdup(s);
    if (!g || !d) {
        if (g) b->gold = g;
        free(d);
        b->failed = true;
        return;
    }
    b->gold = g;
    b->gold[b->n_gold++] = d;
}

/* Appends s to the context and records its span as answer-bearing. */
void pkv_item_add_needle(pkv_item_builder *b, const char *s) {
    pkv_byte_span *n = realloc(b->needles, (size_t)(b->n_needles + 1) * sizeof *n);
    if (!n) {
        b->failed = true;
        return;
    }
    b->needles = n;
    int begin = (int)b->context.len;
    pkv_sbuf_puts(&b->context, s);
    b->needles[b->n_needles++] = (pkv_byte_span){begin, (int)b->context.len};
}

void pkv_item_builder_free(pkv_item_builder *b) {
    pkv_sbuf_free(&b->context);
    pkv_sbuf_free(&b->question);
    pkv_sbuf_free(&b->prefix);
    pkv_sbuf_free(&b->reference);
    for (int i = 0; i < b->n_gold; i++) free(b->gold[i]);
    free(b->gold);
    free(b->needles);
}

int pkv_item_finish(pkv_item_builder *b, double depth, int n_units, int n_aux, pkv_eval_item *out, pkv_error *err) {
    memset(out, 0, sizeof *out);
    if (b->failed || b->context.failed || b->question.failed || b->prefix.failed || b->reference.failed) {
        pkv_item_builder_free(b);
        return pkv_fail(err, PKV_ERR_NOMEM, "out of memory building an evaluation item");
    }
    int ctx_len = (int)b->context.len;
    out->context = pkv_sbuf_take(&b->context);
    out->question = pkv_sbuf_take(&b->question);
    out->answer_prefix = pkv_sbuf_take(&b->prefix);
    out->reference = pkv_sbuf_take(&b->reference);
    out->gold = b->gold;
    out->n_gold = b->n_gold;
    out->needles = b->needles;
    out->n_needles = b->n_needles;
    out->n_units = n_units;
    out->n_aux = n_aux;
    /* depth: given for grid items, else where the first answer starts (percent of context bytes) */
    if (depth >= 0)
        out->depth = depth;
    else if (b->n_needles > 0 && ctx_len > 0)
        out->depth = 100.0 * b->needles[0].begin / ctx_len;
    else
        out->depth = -1;
    b->gold = NULL;
    b->needles = NULL;
    if (!out->context || !out->question || !out->answer_prefix || !out->reference) {
        pkv_eval_item_free(out);
        return pkv_fail(err, PKV_ERR_NOMEM, "out of memory building an evaluation item");
    }
    return 0;
}

/* ---------------------------------------------------------------- random keys and values (§1.2) */

/* words: "adjective-noun"; numbers: 7 digits; uuids: version-4 UUID text. */
void pkv_item_rand_text(pkv_rng *rng, pkv_rand_kind kind, char *buf, size_t len) {
    switch (kind) {
    case PKV_RAND_WORDS: {
        const char *adj = pkv_words_adjectives[pkv_rng_below(rng, (uint64_t)pkv_words_n_adjectives)];
        const char *noun = pkv_words_nouns[pkv_rng_below(rng, (uint64_t)pkv_words_n_nouns)];
        snprintf(buf, len, "%s-%s", adj, noun);
        break;
    }
    case PKV_RAND_NUMBERS:
        snprintf(buf, len, "%lld", (long long)pkv_rng_range(rng, 1000000, 9999999));
        break;
    case PKV_RAND_UUIDS: {
        /* 128 random bits (high word first) with the version and variant set as
         * Python's uuid.UUID(int=..., version=4) does */
        uint64_t hi = pkv_rng_next(rng), lo = pkv_rng_next(rng);
        hi = (hi & ~0xf000ULL) | 0x4000ULL;
        lo = (lo & ~(0xc000ULL << 48)) | (0x8000ULL << 48);
        snprintf(buf, len, "%08llx-%04llx-%04llx-%04llx-%012llx", (unsigned long long)(hi >> 32),
                 (unsigned long long)((hi >> 16) & 0xffff), (unsigned long long)(hi & 0xffff),
                 (unsigned long long)(lo >> 48), (unsigned long long)(lo & 0xffffffffffffULL));
        break;
    }
    }
}


int pkv_item_cmp_int_desc(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x < y) - (x > y);
}
int pkv_item_cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int pkv_item_cmp_int_asc(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

bool pkv_item_key_taken(const char (*keys)[PKV_ITEM_KEY_LEN], int n, const char *k) {
    for (int i = 0; i < n; i++)
        if (!strcmp(keys[i], k)) return true;
    return false;
}

/*
 * Draw order: keys (redrawn while equal to an earlier key), then for each key
 * its values; the needle list (key-major) is shuffled; the haystack draws
 * (noise/needle: line indices by distinct(n, needles), the needle haystack's
 * distractors first, one key and one value per line, keys redrawn while equal
 * to a real key; essay: distinct depths from the 40-point grid); then the
 * queried keys by distinct(k, q). Grid items place their one needle at
 * floor(n * depth / 100) and draw no positions.
 */
