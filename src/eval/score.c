/* Scorers (score.h). Case folding is ASCII: every gold string is ASCII. */
#include "eval/score.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

/* Python's str.isspace() for ASCII: \t\n\v\f\r, space and \x1c-\x1f. */
static bool py_space(unsigned char c) { return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f); }

static void strip_into(const char *s, size_t n, char *out, int cap) {
    size_t b = 0, e = n;
    while (b < e && py_space((unsigned char)s[b])) b++;
    while (e > b && py_space((unsigned char)s[e - 1])) e--;
    size_t len = e - b;
    if (cap <= 0) return;
    if (len > (size_t)cap - 1) len = (size_t)cap - 1;
    memmove(out, s + b, len);
    out[len] = '\0';
}

void pkv_score_postprocess(const char *pred, char *out, int cap) {
    if (cap <= 0) return;
    strip_into(pred, strlen(pred), out, cap);
    for (char *p = out; *p; p++)
        if ((unsigned char)*p < 0x20) *p = '\n';
    strip_into(out, strlen(out), out, cap);
}

/* Case-insensitive (ASCII) substring test. */
static bool contains_ci(const char *hay, const char *needle) {
    size_t n = strlen(needle);
    if (n == 0) return true;
    for (const char *h = hay; *h; h++) {
        size_t i = 0;
        while (i < n && h[i] && tolower((unsigned char)h[i]) == tolower((unsigned char)needle[i])) i++;
        if (i == n) return true;
    }
    return false;
}

double pkv_score_match_all(const char *pred, const char *const *gold, int n_gold) {
    if (n_gold <= 0) return 0.0;
    int hit = 0;
    for (int i = 0; i < n_gold; i++) hit += contains_ci(pred, gold[i]);
    return (double)hit / n_gold;
}

double pkv_score_match_part(const char *pred, const char *const *gold, int n_gold) {
    for (int i = 0; i < n_gold; i++)
        if (contains_ci(pred, gold[i])) return 1.0;
    return 0.0;
}

/* digits without leading zeros ("0" stays "0") */
static void skip_zeros(const char **s, size_t *n) {
    while (*n > 1 && **s == '0') {
        (*s)++;
        (*n)--;
    }
}

double pkv_score_first_int(const char *pred, const char *gold) {
    const char *p = pred;
    while (*p && !isdigit((unsigned char)*p)) p++;
    if (!*p) return 0.0;
    size_t n = 0;
    while (isdigit((unsigned char)p[n])) n++;
    const char *g = gold;
    size_t gn = strlen(g);
    skip_zeros(&p, &n);
    skip_zeros(&g, &gn);
    return n == gn && !memcmp(p, g, n) ? 1.0 : 0.0;
}

/* ---------------------------------------------------------------- ROUGE-1 */

enum { MAX_WORDS = 512, WORD_LEN = 32 };

/* rouge_score's tokenizer: lowercase, non-alphanumerics become spaces, split. */
static int rouge_tokens(const char *s, char (*words)[WORD_LEN], int max) {
    int n = 0;
    for (const char *p = s; *p && n < max;) {
        while (*p && !isalnum((unsigned char)*p)) p++;
        if (!*p) break;
        int len = 0;
        while (isalnum((unsigned char)*p)) {
            if (len < WORD_LEN - 1) words[n][len++] = (char)tolower((unsigned char)*p);
            p++;
        }
        words[n++][len] = '\0';
    }
    return n;
}

static bool is_stopword(const char *w) {
    static const char *const STOP[] = {"a", "an", "the", "to", "do", "in", "is", "and", "on", "of", "at", "it"};
    for (size_t i = 0; i < sizeof STOP / sizeof STOP[0]; i++)
        if (!strcmp(w, STOP[i])) return true;
    return false;
}

double pkv_score_rouge1_recall(const char *pred, const char *reference) {
    char(*ref)[WORD_LEN] = malloc(sizeof(char[MAX_WORDS][WORD_LEN]));
    char(*hyp)[WORD_LEN] = malloc(sizeof(char[MAX_WORDS][WORD_LEN]));
    bool *used = calloc(MAX_WORDS, sizeof *used);
    double r = 0.0;
    if (ref && hyp && used) {
        int nr = rouge_tokens(reference, ref, MAX_WORDS), nh = rouge_tokens(pred, hyp, MAX_WORDS);
        int content = 0, hit = 0;
        for (int i = 0; i < nr; i++) {
            if (is_stopword(ref[i])) continue;
            content++;
            /* clipped counts: each prediction token matches at most one reference token */
            for (int j = 0; j < nh; j++)
                if (!used[j] && !strcmp(ref[i], hyp[j])) {
                    used[j] = true;
                    hit++;
                    break;
                }
        }
        r = content ? (double)hit / content : 0.0;
    }
    free(ref);
    free(hyp);
    free(used);
    return r;
}

bool pkv_score_classic_pass(const char *pred) {
    return contains_ci(pred, "sandwich") && contains_ci(pred, "dolores park");
}

double pkv_score(pkv_metric metric, const char *pred, const char *const *gold, int n_gold) {
    size_t cap = strlen(pred) + 1;
    char *clean = malloc(cap);
    if (!clean) return 0.0;
    pkv_score_postprocess(pred, clean, (int)cap);
    double s = 0.0;
    switch (metric) {
    case PKV_METRIC_MATCH_ALL:
        s = pkv_score_match_all(clean, gold, n_gold);
        break;
    case PKV_METRIC_MATCH_PART:
        s = pkv_score_match_part(clean, gold, n_gold);
        break;
    case PKV_METRIC_FIRST_INT:
        s = n_gold > 0 ? pkv_score_first_int(clean, gold[0]) : 0.0;
        break;
    case PKV_METRIC_ROUGE1:
        s = n_gold > 0 ? pkv_score_rouge1_recall(clean, gold[0]) : 0.0;
        break;
    }
    free(clean);
    return s;
}
