/*
 * The evaluation's pieces without a model: PRNG, word lists, prose and
 * sentence splitting, the structure of every generator (needle counts, depth
 * to position, Zipf and CWE counts, VT chain order), length fitting with a
 * counting tokenizer, the scorers on hand cases, JSON and the JSONL files.
 */
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "eval/json.h"
#include "eval/rng.h"
#include "eval/score.h"
#include "eval/sweep.h"
#include "eval/tasks.h"
#include "eval/text.h"
#include "test.h"

/* ---------------------------------------------------------------- PRNG */

TEST(eval_fnv1a64_vectors) {
    /* the published FNV-1a 64-bit test vectors */
    CHECK(pkv_fnv1a64("", 0) == 0xcbf29ce484222325ULL);
    CHECK(pkv_fnv1a64("a", 1) == 0xaf63dc4c8601ec8cULL);
    CHECK(pkv_fnv1a64("foobar", 6) == 0x85944171f73967e8ULL);
    CHECK(pkv_fnv1a64_more(pkv_fnv1a64("foo", 3), "bar", 3) == 0x85944171f73967e8ULL);
}

TEST(eval_xoshiro_reference_outputs) {
    /* xoshiro256** from state {1, 2, 3, 4}: the reference implementation's first outputs */
    pkv_rng r = {{1, 2, 3, 4}};
    CHECK(pkv_rng_next(&r) == 11520ULL);
    CHECK(pkv_rng_next(&r) == 0ULL);
    CHECK(pkv_rng_next(&r) == 1509978240ULL);
    CHECK(pkv_rng_next(&r) == 1215971899390074240ULL);
    /* splitmix64 from 0: its first output is 0xe220a8397b1dcdaf */
    pkv_rng_seed(&r, 0);
    CHECK(r.s[0] == 0xe220a8397b1dcdafULL);
}

TEST(eval_rng_below_distinct_shuffle) {
    pkv_rng r;
    pkv_rng_seed(&r, 42);
    int hist[7] = {0};
    for (int i = 0; i < 70000; i++) {
        uint64_t v = pkv_rng_below(&r, 7);
        REQUIRE(v < 7);
        hist[v]++;
    }
    for (int i = 0; i < 7; i++) CHECK_MSG(abs(hist[i] - 10000) < 500, "bucket %d: %d", i, hist[i]);
    for (int i = 0; i < 1000; i++) {
        int64_t v = pkv_rng_range(&r, 10000, 99998);
        REQUIRE(v >= 10000 && v <= 99998);
    }
    int d[50];
    pkv_rng_distinct(&r, 60, 50, d);
    for (int i = 0; i < 50; i++) {
        CHECK(d[i] >= 0 && d[i] < 60);
        for (int j = 0; j < i; j++) CHECK(d[i] != d[j]);
    }
    int a[100], seen[100] = {0};
    for (int i = 0; i < 100; i++) a[i] = i;
    pkv_rng_shuffle_int(&r, a, 100);
    int moved = 0;
    for (int i = 0; i < 100; i++) {
        seen[a[i]]++;
        moved += a[i] != i;
    }
    for (int i = 0; i < 100; i++) CHECK_EQ_INT(seen[i], 1);
    CHECK(moved > 80);
    /* one seed text per (task, length, sample, base) */
    CHECK(pkv_eval_seed("vt", 1024, 0, 0) == pkv_fnv1a64("vt/1024/0/0", 11));
    CHECK(pkv_eval_seed("vt", 1024, 1, 0) != pkv_eval_seed("vt", 1024, 0, 0));
}

/* ---------------------------------------------------------------- word lists */

/* Reads one word per line. */
static int read_list(const char *path, char words[][16], int max) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int n = 0;
    char line[64];
    while (fgets(line, sizeof line, f) && n < max) {
        line[strcspn(line, "\r\n")] = '\0';
        if (!line[0]) continue;
        snprintf(words[n++], 16, "%.15s", line);
    }
    fclose(f);
    return n;
}

static void check_list(const char *file, const char *const *list, int n, int at_least) {
    static char words[2000][16];
    int m = read_list(file, words, 2000);
    REQUIRE_MSG(m > 0, "cannot read %s", file);
    CHECK_EQ_INT(m, n);
    CHECK_MSG(n >= at_least, "%s: %d words, want at least %d", file, n, at_least);
    for (int i = 0; i < n && i < m; i++) {
        CHECK_STR(list[i], words[i]);
        size_t len = strlen(list[i]);
        CHECK_MSG(len >= 3 && len <= 12, "%s: '%s' is not 3-12 letters", file, list[i]);
        for (size_t k = 0; k < len; k++) CHECK(islower((unsigned char)list[i][k]));
        if (i > 0) CHECK_MSG(strcmp(list[i - 1], list[i]) < 0, "%s: not sorted/unique at '%s'", file, list[i]);
        /* words that would collide with prompts or needles */
        static const char *const BANNED[] = {"sandwich", "dolores", "francisco", "magic", "special", "sunny", "park"};
        for (size_t b = 0; b < sizeof BANNED / sizeof BANNED[0]; b++) CHECK(strcmp(list[i], BANNED[b]) != 0);
    }
}

TEST(eval_words_match_files) {
    check_list("tests/data/words/adjectives.txt", pkv_words_adjectives, pkv_words_n_adjectives, 300);
    check_list("tests/data/words/nouns.txt", pkv_words_nouns, pkv_words_n_nouns, 600);
    check_list("tests/data/words/verbs.txt", pkv_words_verbs, pkv_words_n_verbs, 300);
    int n;
    const char **pool = pkv_words_pool(&n);
    REQUIRE(pool);
    CHECK(n > 1000 && n <= pkv_words_n_adjectives + pkv_words_n_nouns + pkv_words_n_verbs);
    for (int i = 1; i < n; i++) CHECK(strcmp(pool[i - 1], pool[i]) < 0);
    free((void *)pool);
}

/* ---------------------------------------------------------------- prose and sentences */

TEST(eval_sentence_splitter) {
    pkv_byte_span *s;
    const char *t = "Hi there. How are you? Fine! a.b end. last";
    int n = pkv_split_sentences(t, &s);
    REQUIRE(n == 5);
    const char *want[] = {"Hi there.", "How are you?", "Fine!", "a.b end.", "last"};
    for (int i = 0; i < n; i++) {
        char buf[32];
        snprintf(buf, sizeof buf, "%.*s", s[i].end - s[i].begin, t + s[i].begin);
        CHECK_STR(buf, want[i]);
    }
    free(s);
    CHECK_EQ_INT(pkv_split_sentences("", &s), 0);
    free(s);
}

static bool word_in(const char *w, size_t len, const char *const *list, int n) {
    for (int i = 0; i < n; i++)
        if (strlen(list[i]) == len && !strncmp(list[i], w, len)) return true;
    return false;
}

TEST(eval_prose_prefix_and_vocabulary) {
    pkv_sbuf a = {0}, b = {0}, c = {0};
    pkv_prose_words(&a, PKV_PROSE_SEED, 0, 300);
    pkv_prose_words(&b, PKV_PROSE_SEED, 0, 1000);
    pkv_prose_words(&c, PKV_PROSE_SEED, 100, 200);
    REQUIRE(a.data && b.data && c.data);
    /* the first n words do not depend on n; an offset skips words */
    CHECK(!strncmp(a.data, b.data, a.len) && b.data[a.len] == ' ');
    const char *p = a.data;
    for (int i = 0; i < 100; i++) p = strchr(p, ' ') + 1;
    CHECK(!strcmp(p, c.data));
    int words = 1, sentences = 0;
    for (const char *q = b.data; *q; q++) words += *q == ' ';
    CHECK_EQ_INT(words, 1000);
    /* every word is a list word, a template word or punctuation around one; sentences start upper-case */
    static const char *const GLUE[] = {"the",     "is",    "we",     "people", "a",       "an",   "near",    "every",
                                       "can",     "you",   "should", "your",   "before",  "they", "and",     "with",
                                       "it",      "to",    "i",      "that",   "no",      "will", "without", "are",
                                       "our",     "looks", "today",  "some",   "friends", "at",   "night",   "but",
                                       "because", "when",  "so",     "while",  "do",      "why"};
    for (const char *q = b.data; *q;) {
        const char *e = strchr(q, ' ');
        size_t len = e ? (size_t)(e - q) : strlen(q);
        char w[32];
        size_t k = 0;
        for (size_t i = 0; i < len && k < sizeof w - 1; i++)
            if (isalpha((unsigned char)q[i])) w[k++] = (char)tolower((unsigned char)q[i]);
        w[k] = '\0';
        bool ok = word_in(w, k, pkv_words_adjectives, pkv_words_n_adjectives) ||
                  word_in(w, k, pkv_words_nouns, pkv_words_n_nouns) ||
                  word_in(w, k, pkv_words_verbs, pkv_words_n_verbs) ||
                  word_in(w, k, GLUE, (int)(sizeof GLUE / sizeof GLUE[0]));
        CHECK_MSG(ok, "unexpected word '%.*s'", (int)len, q);
        if (strchr(".?!", q[len - 1])) sentences++;
        q += len;
        if (*q == ' ') q++;
    }
    CHECK(sentences > 50);
    pkv_byte_span *s;
    int n = pkv_split_sentences(b.data, &s);
    CHECK(n >= sentences);
    for (int i = 0; i < n; i++) CHECK(isupper((unsigned char)b.data[s[i].begin]));
    free(s);
    pkv_sbuf_free(&a);
    pkv_sbuf_free(&b);
    pkv_sbuf_free(&c);
}

/* ---------------------------------------------------------------- generators */

static int count_of(const char *hay, const char *needle) {
    int n = 0;
    size_t len = strlen(needle);
    for (const char *p = strstr(hay, needle); p; p = strstr(p + len, needle)) n++;
    return n;
}

static int build(const char *task, int length, int sample, int units, int aux, double depth, pkv_eval_item *it) {
    pkv_eval_spec spec = {pkv_eval_task_find(task), length, sample, depth, 7, 0};
    pkv_error err;
    int rc = pkv_eval_build(&spec, units, aux, it, &err);
    if (rc) fprintf(stdout, "    build %s: %s\n", task, err.msg);
    return rc;
}

/* every span holds a gold string */
static void check_spans(const pkv_eval_item *it) {
    for (int i = 0; i < it->n_needles; i++) {
        const pkv_byte_span *s = &it->needles[i];
        REQUIRE(s->begin >= 0 && s->end <= (int)strlen(it->context) && s->begin < s->end);
        bool any = false;
        for (int g = 0; g < it->n_gold; g++) {
            size_t len = strlen(it->gold[g]);
            char *hit = strstr(it->context + s->begin, it->gold[g]);
            any |= hit && hit + len <= it->context + s->end;
        }
        CHECK_MSG(any, "span %d holds no gold string", i);
    }
}

TEST(eval_niah_structure) {
    static const struct {
        const char *task;
        int needles;      /* needle sentences of real keys */
        int answer_spans; /* queried values */
        int gold;
        bool single;
    } CASES[] = {
        {"niah_single_1", 1, 1, 1, true},   {"niah_single_2", 1, 1, 1, true},    {"niah_single_3", 1, 1, 1, true},
        {"niah_multikey_1", 4, 1, 1, true}, {"niah_multivalue", 4, 4, 4, false}, {"niah_multiquery", 4, 4, 4, false},
    };
    for (size_t c = 0; c < sizeof CASES / sizeof CASES[0]; c++) {
        for (int sample = 0; sample < 3; sample++) {
            pkv_eval_item it;
            REQUIRE(build(CASES[c].task, 2048, sample, 60, 0, -1, &it) == 0);
            CHECK_MSG(count_of(it.context, "One of the special magic ") == CASES[c].needles, "%s: %d needles",
                      CASES[c].task, count_of(it.context, "One of the special magic "));
            CHECK_EQ_INT(it.n_gold, CASES[c].gold);
            CHECK_EQ_INT(it.n_needles, CASES[c].answer_spans);
            check_spans(&it);
            for (int g = 0; g < it.n_gold; g++) CHECK(strstr(it.context, it.gold[g]) != NULL);
            if (CASES[c].single) {
                CHECK(!strncmp(it.context, "A special magic ", 16));
                CHECK(!strncmp(it.question, "What is the special magic ", 26));
                CHECK(strstr(it.answer_prefix, "mentioned in the provided text is") != NULL);
            } else {
                CHECK(!strncmp(it.context, "Some special magic numbers are hidden", 37));
                CHECK(!strncmp(it.question, "What are all the special magic numbers for ", 43));
            }
            /* the needle sentence keeps the plural type name */
            CHECK(strstr(it.context, "One of the special magic numbers for ") ||
                  strstr(it.context, "One of the special magic uuids for "));
            if (!strcmp(CASES[c].task, "niah_multiquery")) CHECK(count_of(it.question, ", and ") == 1);
            pkv_eval_item_free(&it);
        }
    }
    /* distractor haystack: every line a needle; only the queried one is answer-bearing */
    pkv_eval_item it;
    REQUIRE(build("niah_multikey_2", 2048, 1, 40, 0, -1, &it) == 0);
    CHECK_EQ_INT(count_of(it.context, "One of the special magic numbers for "), 41);
    CHECK_EQ_INT(it.n_needles, 1);
    check_spans(&it);
    pkv_eval_item_free(&it);
    REQUIRE(build("niah_multikey_3", 2048, 1, 12, 0, -1, &it) == 0);
    CHECK_EQ_INT(count_of(it.context, "One of the special magic uuids for "), 13);
    CHECK_EQ_INT(strlen(it.gold[0]), 36);
    CHECK(it.gold[0][14] == '4' && strchr("89ab", it.gold[0][19])); /* version 4, RFC 4122 variant */
    pkv_eval_item_free(&it);
}

/* Line index (0-based, counted after the instruction line) of the line holding s. */
static int line_of(const char *context, const char *s) {
    const char *hit = strstr(context, s);
    if (!hit) return -1;
    int line = -1; /* the instruction is line -1 */
    for (const char *p = context; p < hit; p++) line += *p == '\n';
    return line;
}

TEST(eval_niah_depth_to_position) {
    /* noise grid: the needle goes before original line floor(n * depth / 100) */
    const double depths[] = {0, 25, 50, 75, 100, 12.5};
    for (size_t d = 0; d < sizeof depths / sizeof depths[0]; d++) {
        pkv_eval_item it;
        REQUIRE(build("niah_passkey_noise", 1024, 0, 40, 0, depths[d], &it) == 0);
        CHECK_EQ_INT(line_of(it.context, "One of the special magic"), (int)floor(40 * depths[d] / 100.0));
        CHECK_EQ_INT(count_of(it.context, "The grass is green."), 40);
        CHECK_NEAR(it.depth, depths[d], 0);
        pkv_eval_item_free(&it);
    }
    /* essay grid: floor(n_sentences * depth / 100) sentences before the needle */
    for (size_t d = 0; d < 5; d++) {
        pkv_eval_item it;
        REQUIRE(build("niah_passkey_essay", 1024, 0, 400, 0, depths[d], &it) == 0);
        const char *needle = strstr(it.context, "One of the special magic");
        REQUIRE(needle);
        pkv_sbuf essay = {0};
        pkv_prose_words(&essay, PKV_PROSE_SEED, 0, 400);
        pkv_byte_span *s;
        int n = pkv_split_sentences(essay.data, &s);
        int want = (int)floor(n * depths[d] / 100.0);
        /* the text before the needle is exactly the first `want` sentences */
        const char *body = strchr(it.context, '\n') + 1;
        size_t before = (size_t)(needle - body);
        size_t expect = want > 0 ? (size_t)s[want - 1].end + 1 : 1; /* + the joining space */
        CHECK_MSG(before == expect, "depth %g: %zu bytes before the needle, want %zu", depths[d], before, expect);
        free(s);
        pkv_sbuf_free(&essay);
        pkv_eval_item_free(&it);
    }
    /* RULER essay tasks: needles at floor(n_sentences * D / 100) for D of the 40-point grid */
    for (int i = 0; i < 40; i++) CHECK_EQ_INT(pkv_ruler_depths[i], (int)lround(100.0 * i / 39.0));
    pkv_eval_item it;
    REQUIRE(build("niah_multivalue", 2048, 2, 500, 0, -1, &it) == 0);
    pkv_sbuf essay = {0};
    pkv_prose_words(&essay, PKV_PROSE_SEED, 0, 500);
    pkv_byte_span *s;
    int n = pkv_split_sentences(essay.data, &s);
    const char *body = strchr(it.context, '\n') + 1;
    int found = 0;
    for (const char *p = strstr(body, "One of the special"); p; p = strstr(p + 1, "One of the special")) {
        /* sentences of the essay wholly before this needle */
        int before = 0;
        size_t skip = 0;
        for (const char *q = body; q < p; q++)
            if (!strncmp(q, "One of the special", 18) && q != p) skip += strcspn(q, ".") + 1;
        size_t essay_bytes = (size_t)(p - body) - skip;
        for (int k = 0; k < n; k++)
            if ((size_t)s[k].end < essay_bytes) before = k + 1;
        bool on_grid = false;
        for (int k = 0; k < 40; k++) on_grid |= before == (int)floor(n * (pkv_ruler_depths[k] / 100.0));
        CHECK_MSG(on_grid, "needle after %d of %d sentences is not on the depth grid", before, n);
        found++;
    }
    CHECK_EQ_INT(found, 4);
    free(s);
    pkv_sbuf_free(&essay);
    pkv_eval_item_free(&it);
}

TEST(eval_vt_chain_order) {
    for (int sample = 0; sample < 4; sample++) {
        pkv_eval_item it;
        REQUIRE(build("vt", 2048, sample, 50, 12, -1, &it) == 0);
        REQUIRE(it.n_gold == 5);
        const char *task = strstr(it.context, "Memorize and track");
        REQUIRE(task);
        /* the one-shot example comes first: a full item with its answer */
        CHECK(task == it.context);
        const char *second = strstr(task + 1, "Memorize and track");
        REQUIRE(second);
        CHECK(strstr(task, "they are: ") < second);
        const char *prev = second;
        for (int i = 0; i < 5; i++) {
            char stmt[32];
            snprintf(stmt, sizeof stmt, "VAR %s = ", it.gold[i]);
            const char *p = strstr(second, stmt);
            REQUIRE_MSG(p, "no statement for %s", it.gold[i]);
            CHECK_MSG(p > prev, "chain out of order at %d", i);
            prev = p;
            if (i == 0) {
                CHECK(isdigit((unsigned char)p[strlen(stmt)]));
            } else {
                char ref[32];
                snprintf(ref, sizeof ref, "VAR %s = VAR %s \n", it.gold[i], it.gold[i - 1]);
                CHECK(!strncmp(p, ref, strlen(ref)));
            }
            CHECK_EQ_INT(strlen(it.gold[i]), 5);
        }
        CHECK_EQ_INT(count_of(second, "The grass is green."), 50);
        CHECK_EQ_INT(count_of(it.context, "The grass is green."), 62);
        CHECK_EQ_INT(it.n_needles, 5);
        check_spans(&it);
        CHECK(strstr(it.answer_prefix, "5 variables are assigned the value") != NULL);
        /* the value of the question is the chain's value */
        char stmt[32];
        snprintf(stmt, sizeof stmt, "VAR %s = ", it.gold[0]);
        const char *v = strstr(second, stmt) + strlen(stmt);
        CHECK(!strncmp(strstr(it.question, "the value ") + 10, v, 5));
        /* the example's names are 3 letters and its value is not RULER's placeholder */
        CHECK(strstr(it.context, "= 12345\n") == NULL);
        pkv_eval_item_free(&it);
    }
}

/* entries "<k>. w" of a numbered list in [from, to) */
static int list_count(const char *from, const char *to, const char *w) {
    int n = 0;
    size_t len = strlen(w);
    for (const char *p = from + 1; p < to; p++)
        if (p[-1] == '.' && p[0] == ' ' && !strncmp(p + 1, w, len) && (p[1 + len] == ' ' || p[1 + len] == '\n')) n++;
    return n;
}

TEST(eval_cwe_counts) {
    const struct { int length, c, u, ex_c, ex_u; } V[] = {{2048, 6, 1, 3, 1}, {4096, 30, 3, 10, 3}};
    for (int v = 0; v < 2; v++) {
        pkv_eval_item it;
        REQUIRE(build("cwe", V[v].length, 1, 40, 0, -1, &it) == 0);
        REQUIRE(it.n_gold == 10);
        const char *real = strstr(it.context + 1, "Below is a numbered list");
        REQUIRE(real);
        const char *end = it.context + strlen(it.context);
        for (int g = 0; g < 10; g++) CHECK_EQ_INT(list_count(real, end, it.gold[g]), V[v].c);
        /* 40 words in all: 30 uncommon ones, u times each */
        int entries = count_of(strchr(real, '\n') + 1, ". ");
        CHECK_EQ_INT(entries, 10 * V[v].c + 30 * V[v].u);
        /* the one-shot block: its 10 answers, ex_c times each in its list */
        const char *ans = strstr(it.context, "most often in the list are: 1. ");
        REQUIRE(ans && ans < real);
        ans = strchr(ans, ':') + 1;
        const char *list_end = strstr(it.context, "\nQuestion:");
        for (int k = 1; k <= 10; k++) {
            char tag[16];
            snprintf(tag, sizeof tag, " %d. ", k);
            const char *w = strstr(ans, tag);
            REQUIRE(w);
            w += strlen(tag);
            char word[32];
            snprintf(word, sizeof word, "%.*s", (int)strcspn(w, " \n"), w);
            CHECK_EQ_INT(list_count(it.context, list_end, word), V[v].ex_c);
        }
        pkv_eval_item_free(&it);
    }
}

TEST(eval_fwe_zipf_counts) {
    /* docs/evaluation.md §1.6: at N = 1000 ranks 1-4 appear 607, 151, 67, 37 times */
    pkv_eval_item it;
    REQUIRE(build("fwe", 4096, 0, 1000, 0, -1, &it) == 0);
    REQUIRE(it.n_gold == 3);
    CHECK_EQ_INT(count_of(it.context, " ..."), 607);
    const int want[] = {151, 67, 37};
    for (int g = 0; g < 3; g++) {
        char w[16];
        snprintf(w, sizeof w, " %s", it.gold[g]);
        CHECK_EQ_INT(count_of(it.context, w), want[g]);
        CHECK_EQ_INT(strlen(it.gold[g]), 6);
    }
    /* V = (4096 - 50) / 50 = 80 coded words (rank 1 being the dots); every rank with a positive count appears */
    int distinct = 0;
    for (const char *p = strstr(it.context, "coded words. ") + 13; *p && *p != '\n';) {
        size_t len = strcspn(p, " \n");
        if (len == 6) {
            char w[8];
            memcpy(w, p, 6);
            w[6] = '\0';
            const char *first = strstr(it.context, w);
            distinct += first == p;
        }
        p += len;
        if (*p == ' ') p++;
    }
    int positive = 0;
    for (int k = 2; k <= 80; k++) positive += floor(1000.0 / (k * (double)k) / (M_PI * M_PI / 6)) > 0;
    CHECK_EQ_INT(distinct, positive);
    pkv_eval_item_free(&it);
}

TEST(eval_longeval_and_classic_structure) {
    pkv_eval_item it;
    REQUIRE(build("longeval_lines", 2048, 3, 30, 0, -1, &it) == 0);
    CHECK_EQ_INT(count_of(it.context, ": REGISTER_CONTENT is <"), 30);
    REQUIRE(it.n_gold == 1 && strlen(it.gold[0]) == 5);
    const char *key = strstr(it.question, "in line ") + 8;
    char line[96];
    snprintf(line, sizeof line, "line %.*s: REGISTER_CONTENT is <%s>\n", (int)strcspn(key, "?"), key, it.gold[0]);
    CHECK(strstr(it.context, line) != NULL);
    CHECK_EQ_INT(it.n_needles, 1);
    check_spans(&it);
    pkv_eval_item_free(&it);

    REQUIRE(build("niah_classic", 1024, 0, 300, 0, 50, &it) == 0);
    CHECK(!strncmp(it.context, "This is a very long story book: <book> ", 39));
    CHECK(strstr(it.context, " </book>.\n") != NULL);
    CHECK_STR(it.answer_prefix, "Answer:");
    const char *needle = strstr(it.context, pkv_classic_needle);
    REQUIRE(needle);
    /* at a sentence boundary: a sentence end and a space before it */
    CHECK(needle[-1] == ' ' && strchr(".?!", needle[-2]));
    CHECK_EQ_INT(count_of(it.context, "San Francisco"), 1);
    check_spans(&it);
    pkv_eval_item_free(&it);
    /* repeats of a cell read different prose */
    pkv_eval_item other;
    REQUIRE(build("niah_classic", 1024, 0, 300, 0, 50, &it) == 0);
    REQUIRE(build("niah_classic", 1024, 1, 300, 0, 50, &other) == 0);
    CHECK(strcmp(it.context, other.context) != 0);
    pkv_eval_item_free(&it);
    pkv_eval_item_free(&other);
}

TEST(eval_generators_deterministic) {
    for (int k = 0; k < pkv_eval_task_count(); k++) {
        const pkv_eval_task *t = pkv_eval_task_get(k);
        int units = t->kind == PKV_TASK_FWE                                       ? 500
                    : t->kind == PKV_TASK_CWE                                     ? 40
                    : t->haystack == PKV_HAY_ESSAY || t->kind == PKV_TASK_CLASSIC ? 300
                                                                                  : 30;
        pkv_eval_item a, b, c;
        REQUIRE(build(t->name, 2048, 2, units, 10, 50, &a) == 0);
        REQUIRE(build(t->name, 2048, 2, units, 10, 50, &b) == 0);
        REQUIRE(build(t->name, 2048, 3, units, 10, 50, &c) == 0);
        CHECK_STR(a.context, b.context);
        CHECK_STR(a.question, b.question);
        CHECK_MSG(strcmp(a.context, c.context) || strcmp(a.question, c.question), "%s: samples 2 and 3 equal", t->name);
        CHECK(a.reference[0] != '\0');
        pkv_eval_item_free(&a);
        pkv_eval_item_free(&b);
        pkv_eval_item_free(&c);
    }
}

/* ---------------------------------------------------------------- length fitting */

/* A tokenizer stand-in: one token per 4 bytes of each segment (+1 BOS). */
static int count_bytes(void *user, const pkv_eval_item *it, pkv_error *err) {
    (void)user, (void)err;
    return 1 + (int)(strlen(it->context) / 4) + (int)((strlen(it->question) + strlen(it->answer_prefix)) / 4);
}

TEST(eval_length_fitting) {
    const char *tasks[] = {"niah_single_1",  "niah_single_2",      "niah_multikey_2", "vt", "cwe",
                           "longeval_lines", "niah_passkey_essay", "niah_classic",    "fwe"};
    for (size_t t = 0; t < sizeof tasks / sizeof tasks[0]; t++) {
        pkv_eval_fitter f;
        pkv_eval_fitter_init(&f, count_bytes, NULL);
        const pkv_eval_task *task = pkv_eval_task_find(tasks[t]);
        pkv_eval_units u;
        pkv_eval_task_units(task, 2048, &u);
        int probe_units = 0;
        for (int sample = 0; sample < 3; sample++) {
            pkv_eval_spec spec = {task, 2048, sample, 50, 0, 0};
            pkv_eval_item it, more;
            pkv_error err;
            int tok;
            REQUIRE_MSG(pkv_eval_generate(&f, &spec, &it, &tok, &err) == 0, "%s: %s", tasks[t], err.msg);
            CHECK_EQ_INT(tok, count_bytes(NULL, &it, NULL));
            CHECK_MSG(tok + task->tokens_to_generate <= 2048, "%s: %d tokens + %d", tasks[t], tok,
                      task->tokens_to_generate);
            if (sample == 0) probe_units = it.n_units;
            CHECK(it.n_units <= probe_units);
            /* within one increment of the maximum: one more increment overflows (FWE: reaches length - 50) */
            REQUIRE(pkv_eval_build(&spec, it.n_units + u.increment, it.n_aux, &more, &err) == 0);
            int more_tok = count_bytes(NULL, &more, NULL);
            if (task->kind == PKV_TASK_FWE)
                CHECK(more_tok >= 2048 - 50 || it.n_units < probe_units);
            else
                CHECK_MSG(more_tok + task->tokens_to_generate > 2048 || it.n_units < probe_units,
                          "%s sample %d: %d units fit, %d more still fit", tasks[t], sample, it.n_units, u.increment);
            /* sample 0 is the binary search's probe: even one more unit overflows */
            if (sample == 0 && task->kind != PKV_TASK_FWE) {
                pkv_eval_item one;
                REQUIRE(pkv_eval_build(&spec, it.n_units + 1, it.n_aux, &one, &err) == 0);
                CHECK(count_bytes(NULL, &one, NULL) + task->tokens_to_generate > 2048);
                pkv_eval_item_free(&one);
            }
            if (task->kind == PKV_TASK_VT) {
                /* the one-shot example fits 500 tokens with 30 to generate, one more line does not */
                CHECK(it.n_aux >= 5);
            }
            pkv_eval_item_free(&more);
            pkv_eval_item_free(&it);
        }
        pkv_eval_fitter_free(&f);
    }
    /* too short for a task: a clear error */
    pkv_eval_fitter f;
    pkv_eval_fitter_init(&f, count_bytes, NULL);
    pkv_eval_spec spec = {pkv_eval_task_find("vt"), 300, 0, 0, 0, 0};
    pkv_eval_item it;
    pkv_error err;
    CHECK(pkv_eval_generate(&f, &spec, &it, NULL, &err) == -1);
    CHECK(strstr(err.msg, "vt") != NULL);
    pkv_eval_fitter_free(&f);
}

/* The multi-question tasks (docs/evaluation.md §2.5): every question of a
 * sample is asked of the same context, fitted so that all of them fit; the
 * questions, and their answers, differ; a question outside the task's count
 * is refused. */
TEST(eval_multi_question_items) {
    const char *tasks[] = {"niah_multiquestion", "longeval_multiquestion"};
    for (size_t t = 0; t < 2; t++) {
        const pkv_eval_task *task = pkv_eval_task_find(tasks[t]);
        REQUIRE(task && task->n_questions == 4);
        pkv_eval_fitter f;
        pkv_eval_fitter_init(&f, count_bytes, NULL);
        for (int sample = 0; sample < 3; sample++) {
            pkv_eval_item it[4];
            pkv_error err;
            for (int q = 0; q < 4; q++) {
                pkv_eval_spec spec = {task, 2048, sample, -1, 0, q};
                REQUIRE_MSG(pkv_eval_generate(&f, &spec, &it[q], NULL, &err) == 0, "%s: %s", tasks[t], err.msg);
                CHECK(count_bytes(NULL, &it[q], NULL) + task->tokens_to_generate <= 2048);
                CHECK_EQ_INT(it[q].n_gold, 1);
                CHECK_EQ_INT(it[q].n_needles, 1);
                check_spans(&it[q]);
            }
            for (int q = 1; q < 4; q++) {
                CHECK_MSG(!strcmp(it[q].context, it[0].context), "%s sample %d: question %d has another context",
                          tasks[t], sample, q);
                for (int p = 0; p < q; p++) {
                    CHECK(strcmp(it[q].question, it[p].question) != 0);
                    CHECK(strcmp(it[q].gold[0], it[p].gold[0]) != 0);
                }
            }
            for (int q = 0; q < 4; q++) pkv_eval_item_free(&it[q]);
        }
        pkv_eval_fitter_free(&f);
        pkv_eval_spec bad = {task, 2048, 0, -1, 0, 4};
        pkv_eval_item it;
        pkv_error err;
        CHECK(pkv_eval_build(&bad, 200, 0, &it, &err) == -1 && strstr(err.msg, "question 4"));
    }
}

/* ---------------------------------------------------------------- scoring */

TEST(eval_score_string_match) {
    const char *one[] = {"1234567"};
    CHECK_NEAR(pkv_score(PKV_METRIC_MATCH_ALL, " The number is 1234567.", one, 1), 1.0, 0);
    CHECK_NEAR(pkv_score(PKV_METRIC_MATCH_ALL, "123456", one, 1), 0.0, 0);
    CHECK_NEAR(pkv_score(PKV_METRIC_MATCH_ALL, "", one, 1), 0.0, 0);
    const char *words[] = {"Apple", "pear", "plum", "fig"};
    /* case folding, partial credit */
    CHECK_NEAR(pkv_score(PKV_METRIC_MATCH_ALL, "APPLE, PEAR and a banana", words, 4), 0.5, 0);
    CHECK_NEAR(pkv_score(PKV_METRIC_MATCH_PART, "apple", words, 4), 1.0, 0);
    CHECK_NEAR(pkv_score(PKV_METRIC_MATCH_PART, "banana", words, 4), 0.0, 0);
    /* control characters become newlines, so they split words; surrounding ones are stripped */
    const char *ab[] = {"ab"};
    CHECK_NEAR(pkv_score(PKV_METRIC_MATCH_ALL,
                         "a\x01"
                         "b",
                         ab, 1),
               0.0, 0);
    CHECK_NEAR(pkv_score(PKV_METRIC_MATCH_ALL, "\x02 ab \x1f", ab, 1), 1.0, 0);
    char out[32];
    pkv_score_postprocess("  \x01x\x02y\t \n", out, sizeof out);
    CHECK_STR(out, "x\ny");
    pkv_score_postprocess("\x1c\x1d", out, sizeof out);
    CHECK_STR(out, "");
}

TEST(eval_score_first_int_and_rouge) {
    CHECK_NEAR(pkv_score_first_int(" <10536>", "10536"), 1.0, 0);
    CHECK_NEAR(pkv_score_first_int("line 7: 10536", "10536"), 0.0, 0);
    CHECK_NEAR(pkv_score_first_int("it is 010536", "10536"), 1.0, 0);
    CHECK_NEAR(pkv_score_first_int("no digits", "10536"), 0.0, 0);
    CHECK_NEAR(pkv_score_first_int("105367", "10536"), 0.0, 0);
    const char *needle = pkv_classic_needle;
    /* content words: best thing san francisco eat sandwich sit dolores park sunny day (11) */
    CHECK_NEAR(pkv_score_rouge1_recall(needle, needle), 1.0, 1e-12);
    CHECK_NEAR(pkv_score_rouge1_recall("Eat a sandwich in Dolores Park.", needle), 4.0 / 11.0, 1e-12);
    CHECK_NEAR(pkv_score_rouge1_recall("park park park", needle), 1.0 / 11.0, 1e-12);
    CHECK_NEAR(pkv_score_rouge1_recall("", needle), 0.0, 0);
    CHECK(pkv_score_classic_pass("eat a SANDWICH and sit in dolores park"));
    CHECK(!pkv_score_classic_pass("eat a sandwich in the park"));
    const char *gold[] = {needle};
    CHECK_NEAR(pkv_score(PKV_METRIC_ROUGE1, " Sit in Dolores Park on a sunny day.", gold, 1), 5.0 / 11.0, 1e-12);
}

/* ---------------------------------------------------------------- JSON */

TEST(eval_json_roundtrip) {
    pkv_sbuf b = {0};
    pkv_sbuf_puts(&b, "{\"s\":");
    pkv_json_str(&b, "a\"b\\c\nd\x01\xe2\x82\xac\xff end");
    pkv_sbuf_puts(&b, ",\"n\":");
    pkv_json_num(&b, 0.125);
    pkv_sbuf_puts(&b, ",\"i\":");
    pkv_json_num(&b, 42);
    pkv_sbuf_puts(&b, ",\"x\":");
    pkv_json_num(&b, NAN);
    pkv_sbuf_puts(&b, ",\"a\":[1,[2,3],{\"k\":true}]}");
    REQUIRE(!b.failed);
    CHECK(strstr(b.data, "\\u0001") && strstr(b.data, "\\ufffd") && strstr(b.data, "\"i\":42,"));
    pkv_json *j = pkv_json_parse(b.data, b.len);
    REQUIRE(j);
    CHECK_STR(pkv_json_get_str(j, "s", NULL), "a\"b\\c\nd\x01\xe2\x82\xac\xef\xbf\xbd end");
    CHECK_NEAR(pkv_json_get_num(j, "n", 0), 0.125, 0);
    CHECK(pkv_json_get(j, "x")->type == PKV_JSON_NULL);
    const pkv_json *a = pkv_json_get(j, "a");
    REQUIRE(a && a->type == PKV_JSON_ARR && a->n_items == 3);
    CHECK(a->items[1].n_items == 2 && a->items[1].items[1].num == 3);
    CHECK_NEAR(pkv_json_get_num(&a->items[2], "k", 0), 1, 0);
    pkv_json_free(j);
    pkv_sbuf_free(&b);
    /* \u escapes decode to UTF-8 */
    const char *esc = "\"\\u00e9\\u20ac\\u0041\"";
    j = pkv_json_parse(esc, strlen(esc));
    REQUIRE(j && j->type == PKV_JSON_STR);
    CHECK_STR(j->str, "\xc3\xa9\xe2\x82\xac" "A");
    pkv_json_free(j);
    const char *bad[] = {"{\"a\":1", "{\"a\" 1}", "[1,]", "{\"a\":1}x", "\"\x01\"", "{\"k\":tru}", ""};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK_MSG(!pkv_json_parse(bad[i], strlen(bad[i])), "%s", bad[i]);
}

/* ---------------------------------------------------------------- JSONL files */

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "wb");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    static char buf[8192];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

TEST(eval_jsonl_resume_and_merge) {
    char dir[] = "/tmp/pkv-eval-test-XXXXXX";
    REQUIRE(mkdtemp(dir));
    char main_path[256], part[256];
    snprintf(main_path, sizeof main_path, "%s/results.jsonl", dir);
    snprintf(part, sizeof part, "%s/results.jsonl.part1", dir);
    /* a killed writer: two complete lines, a broken one, and a partial last line */
    write_text(main_path,
               "{\"key\":\"a\",\"v\":1}\n{\"key\":\"b\",\"v\":2}\n{\"key\":\"c\",\"v\"\n{\"key\":\"d\",\"v\":");
    pkv_error err;
    REQUIRE(pkv_jsonl_truncate_partial(main_path, &err) == 0);
    CHECK_STR(read_text(main_path), "{\"key\":\"a\",\"v\":1}\n{\"key\":\"b\",\"v\":2}\n{\"key\":\"c\",\"v\"\n");
    pkv_key_set keys = {0};
    REQUIRE(pkv_jsonl_load_keys(main_path, &keys, &err) == 0);
    CHECK_EQ_INT(keys.n, 2);
    CHECK(pkv_key_set_has(&keys, "a") && pkv_key_set_has(&keys, "b") && !pkv_key_set_has(&keys, "c"));
    /* a rank's part: one duplicate, one new, one partial line */
    write_text(part, "{\"key\":\"b\",\"v\":9}\n{\"key\":\"e\",\"v\":5}\n{\"key\":\"f\"");
    REQUIRE(pkv_jsonl_merge(main_path, part, &keys, &err) == 0);
    CHECK(access(part, F_OK) != 0);
    CHECK_EQ_INT(keys.n, 3);
    CHECK(strstr(read_text(main_path), "{\"key\":\"e\",\"v\":5}\n") != NULL);
    CHECK(strstr(read_text(main_path), "\"v\":9") == NULL);
    /* appends are whole lines */
    pkv_jsonl_writer w;
    REQUIRE(pkv_jsonl_open(&w, main_path, &err) == 0);
    REQUIRE(pkv_jsonl_write(&w, "{\"key\":\"g\"}\n", &err) == 0);
    pkv_jsonl_close(&w);
    pkv_key_set_free(&keys);
    REQUIRE(pkv_jsonl_load_keys(main_path, &keys, &err) == 0);
    CHECK_EQ_INT(keys.n, 4);
    pkv_key_set_free(&keys);
    /* a missing file is an empty one */
    char missing[300];
    snprintf(missing, sizeof missing, "%s/none.jsonl", dir);
    REQUIRE(pkv_jsonl_load_keys(missing, &keys, &err) == 0);
    CHECK_EQ_INT(keys.n, 0);
    REQUIRE(pkv_jsonl_truncate_partial(missing, &err) == 0);
    unlink(main_path);
    rmdir(dir);
}

TEST(eval_key_set_sorted) {
    pkv_key_set s = {0};
    const char *keys[] = {"m", "c", "x", "a", "c", "q", "b"};
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) REQUIRE(pkv_key_set_add(&s, keys[i]) == 0);
    CHECK_EQ_INT(s.n, 6);
    for (int i = 1; i < s.n; i++) CHECK(strcmp(s.keys[i - 1], s.keys[i]) < 0);
    CHECK(pkv_key_set_has(&s, "q") && !pkv_key_set_has(&s, "z"));
    pkv_key_set_free(&s);
}
