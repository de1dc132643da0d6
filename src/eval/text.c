/* String buffer, word pool, essay-synthetic prose and the sentence splitter (text.h). */
#include "eval/text.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- string buffer */

static bool sbuf_reserve(pkv_sbuf *b, size_t extra) {
    if (b->failed) return false;
    if (b->len + extra + 1 <= b->cap) return true;
    size_t cap = b->cap ? b->cap : 256;
    while (cap < b->len + extra + 1) cap *= 2;
    char *d = realloc(b->data, cap);
    if (!d) {
        b->failed = true;
        return false;
    }
    b->data = d;
    b->cap = cap;
    return true;
}

void pkv_sbuf_free(pkv_sbuf *b) {
    free(b->data);
    *b = (pkv_sbuf){0};
}

void pkv_sbuf_add(pkv_sbuf *b, const char *s, size_t n) {
    if (!sbuf_reserve(b, n)) return;
    memcpy(b->data + b->len, s, n);
    b->len += n;
    b->data[b->len] = '\0';
}

void pkv_sbuf_puts(pkv_sbuf *b, const char *s) { pkv_sbuf_add(b, s, strlen(s)); }

void pkv_sbuf_printf(pkv_sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0) {
        b->failed = true;
        return;
    }
    if (!sbuf_reserve(b, (size_t)n)) return;
    va_start(ap, fmt);
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

char *pkv_sbuf_take(pkv_sbuf *b) {
    if (b->failed) {
        pkv_sbuf_free(b);
        return NULL;
    }
    if (!b->data && !sbuf_reserve(b, 0)) return NULL;
    if (!b->data) return NULL;
    b->data[b->len] = '\0';
    char *d = b->data;
    *b = (pkv_sbuf){0};
    return d;
}

char *pkv_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = malloc(n);
    if (d) memcpy(d, s, n);
    return d;
}

/* ---------------------------------------------------------------- word pool */

static int cmp_str(const void *a, const void *b) { return strcmp(*(const char *const *)a, *(const char *const *)b); }

const char **pkv_words_pool(int *n) {
    int total = pkv_words_n_adjectives + pkv_words_n_nouns + pkv_words_n_verbs;
    const char **pool = malloc((size_t)total * sizeof *pool);
    if (!pool) return NULL;
    int k = 0;
    for (int i = 0; i < pkv_words_n_adjectives; i++) pool[k++] = pkv_words_adjectives[i];
    for (int i = 0; i < pkv_words_n_nouns; i++) pool[k++] = pkv_words_nouns[i];
    for (int i = 0; i < pkv_words_n_verbs; i++) pool[k++] = pkv_words_verbs[i];
    qsort(pool, (size_t)k, sizeof *pool, cmp_str);
    int u = 0;
    for (int i = 0; i < k; i++)
        if (u == 0 || strcmp(pool[u - 1], pool[i])) pool[u++] = pool[i];
    *n = u;
    return pool;
}

/* ---------------------------------------------------------------- prose */

/*
 * Sentence grammar (the order of draws is part of the corpus definition):
 *   kind = below(10): 0 -> question, 1 -> exclamation, otherwise a statement.
 *   question: one of QUESTIONS[below(3)], ends with "?".
 *   statement / exclamation: CLAUSES[below(12)], then while fewer than 3
 *   clauses and below(3) == 0: CONNECTORS[below(6)] + CLAUSES[below(12)];
 *   ends with "." or "!".
 * Placeholders, filled left to right: {A} adjective, {N} noun, {V} verb, each
 * word[below(list size)]; {a} is "a" or "an" for the word that follows it and
 * draws nothing. The first letter is upper-cased.
 */
static const char *const CLAUSES[] = {
    "the {A} {N} is {A}",
    "we {V} the {N}",
    "people {V} {a} {A} {N} near the {N}",
    "every {N} can {V} the {A} {N}",
    "you should {V} your {N} before the {N}",
    "they {V} and {V} with the {N}",
    "it is {A} to {V} the {N}",
    "I {V} that {N}",
    "no {N} will {V} without {a} {N}",
    "the {N} and the {N} are {A}",
    "our {A} {N} looks {A} today",
    "some friends {V} the {N} at night",
};
static const char *const CONNECTORS[] = {", and ", ", but ", " because ", " when ", ", so ", " while "};
static const char *const QUESTIONS[] = {
    "do you {V} the {A} {N}",
    "why should we {V} the {N}",
    "can {a} {N} {V} the {A} {N}",
};
enum { N_CLAUSES = sizeof CLAUSES / sizeof CLAUSES[0], N_CONNECTORS = sizeof CONNECTORS / sizeof CONNECTORS[0] };

static const char *draw_word(pkv_rng *rng, char kind) {
    switch (kind) {
    case 'A':
        return pkv_words_adjectives[pkv_rng_below(rng, (uint64_t)pkv_words_n_adjectives)];
    case 'N':
        return pkv_words_nouns[pkv_rng_below(rng, (uint64_t)pkv_words_n_nouns)];
    default:
        return pkv_words_verbs[pkv_rng_below(rng, (uint64_t)pkv_words_n_verbs)];
    }
}

/* Appends a template with its placeholders filled. */
static void fill_template(pkv_sbuf *out, pkv_rng *rng, const char *tpl) {
    bool article = false;
    for (const char *p = tpl; *p;) {
        if (p[0] == '{' && p[2] == '}') {
            if (p[1] == 'a') {
                article = true; /* resolved by the next word */
            } else {
                const char *w = draw_word(rng, p[1]);
                if (article) {
                    pkv_sbuf_puts(out, strchr("aeiou", w[0]) ? "an " : "a ");
                    article = false;
                }
                pkv_sbuf_puts(out, w);
            }
            p += 3;
            if (article && *p == ' ') p++; /* the article's own space is written with the word */
        } else {
            pkv_sbuf_add(out, p, 1);
            p++;
        }
    }
}

static void prose_sentence(pkv_sbuf *out, pkv_rng *rng) {
    size_t start = out->len;
    uint64_t kind = pkv_rng_below(rng, 10);
    if (kind == 0) {
        fill_template(out, rng, QUESTIONS[pkv_rng_below(rng, 3)]);
        pkv_sbuf_puts(out, "?");
    } else {
        fill_template(out, rng, CLAUSES[pkv_rng_below(rng, N_CLAUSES)]);
        for (int n = 1; n < 3 && pkv_rng_below(rng, 3) == 0; n++) {
            pkv_sbuf_puts(out, CONNECTORS[pkv_rng_below(rng, N_CONNECTORS)]);
            fill_template(out, rng, CLAUSES[pkv_rng_below(rng, N_CLAUSES)]);
        }
        pkv_sbuf_puts(out, kind == 1 ? "!" : ".");
    }
    if (!out->failed && out->len > start) out->data[start] = (char)toupper((unsigned char)out->data[start]);
}

void pkv_prose_words(pkv_sbuf *out, uint64_t seed, long offset, long n) {
    pkv_rng rng;
    pkv_rng_seed(&rng, seed);
    pkv_sbuf sentence = {0};
    long word = 0, end = offset + n;
    while (word < end && !out->failed && !sentence.failed) {
        sentence.len = 0;
        prose_sentence(&sentence, &rng);
        /* words of the sentence are separated by single spaces */
        for (const char *p = sentence.data; *p && word < end;) {
            const char *q = strchr(p, ' ');
            size_t len = q ? (size_t)(q - p) : strlen(p);
            if (word >= offset) {
                if (word > offset) pkv_sbuf_puts(out, " ");
                pkv_sbuf_add(out, p, len);
            }
            word++;
            p += len;
            if (*p == ' ') p++;
        }
    }
    if (sentence.failed) out->failed = true;
    pkv_sbuf_free(&sentence);
}

/* ---------------------------------------------------------------- sentences */

int pkv_split_sentences(const char *text, pkv_byte_span **out) {
    *out = NULL;
    int n = 0, cap = 0;
    int len = (int)strlen(text);
    int i = 0;
    while (i < len) {
        while (i < len && text[i] == ' ') i++;
        if (i >= len) break;
        int begin = i;
        while (i < len && !(strchr(".?!", text[i]) && (i + 1 == len || text[i + 1] == ' '))) i++;
        int end = i < len ? i + 1 : len;
        if (n == cap) {
            cap = cap ? 2 * cap : 64;
            pkv_byte_span *s = realloc(*out, (size_t)cap * sizeof *s);
            if (!s) {
                free(*out);
                *out = NULL;
                return -1;
            }
            *out = s;
        }
        (*out)[n++] = (pkv_byte_span){begin, end};
        i = end;
    }
    return n;
}
