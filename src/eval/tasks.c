/*
 * Task generators (docs/evaluation.md §1.2-1.6, §2.2, §2.4). Each generator makes
 * its random draws in a fixed, documented order from one stream seeded by
 * (task, length, sample, base seed), so tools/eval-golden.py can rebuild every
 * prompt independently.
 */
#include "eval/tasks.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"

/* ---------------------------------------------------------------- the task table */

#define NIAH(nm, hay, k, v, nk, nv, nq, cap, sum)                                                                      \
    {                                                                                                                  \
        .name = nm, .kind = PKV_TASK_NIAH, .haystack = hay, .key = k, .value = v, .n_keys = nk, .n_values = nv,        \
        .n_queries = nq, .tokens_to_generate = 128, .max_new_tokens = cap, .metric = PKV_METRIC_MATCH_ALL,             \
        .summary = sum                                                                                                 \
    }

static const pkv_eval_task TASKS[] = {
    NIAH("niah_single_1", PKV_HAY_NOISE, PKV_RAND_WORDS, PKV_RAND_NUMBERS, 1, 1, 1, 24,
         "one number needle in repeated filler lines"),
    NIAH("niah_single_2", PKV_HAY_ESSAY, PKV_RAND_WORDS, PKV_RAND_NUMBERS, 1, 1, 1, 24,
         "one number needle in essay-synthetic prose"),
    NIAH("niah_single_3", PKV_HAY_ESSAY, PKV_RAND_WORDS, PKV_RAND_UUIDS, 1, 1, 1, 48,
         "one UUID needle in essay-synthetic prose"),
    NIAH("niah_multikey_1", PKV_HAY_ESSAY, PKV_RAND_WORDS, PKV_RAND_NUMBERS, 4, 1, 1, 24,
         "one queried needle among 4 keys in prose"),
    NIAH("niah_multikey_2", PKV_HAY_NEEDLE, PKV_RAND_WORDS, PKV_RAND_NUMBERS, 1, 1, 1, 24,
         "every line a same-format distractor needle"),
    NIAH("niah_multikey_3", PKV_HAY_NEEDLE, PKV_RAND_UUIDS, PKV_RAND_UUIDS, 1, 1, 1, 48,
         "UUID keys and values, every line a distractor"),
    NIAH("niah_multivalue", PKV_HAY_ESSAY, PKV_RAND_WORDS, PKV_RAND_NUMBERS, 1, 4, 1, 64,
         "4 values share one key in prose"),
    NIAH("niah_multiquery", PKV_HAY_ESSAY, PKV_RAND_WORDS, PKV_RAND_NUMBERS, 4, 1, 4, 64,
         "4 keys queried at once in prose"),
    {.name = "vt",
     .kind = PKV_TASK_VT,
     .tokens_to_generate = 30,
     .max_new_tokens = 30,
     .metric = PKV_METRIC_MATCH_ALL,
     .summary = "variable tracking: a 5-variable chain in filler lines"},
    {.name = "cwe",
     .kind = PKV_TASK_CWE,
     .tokens_to_generate = 120,
     .max_new_tokens = 64,
     .metric = PKV_METRIC_MATCH_ALL,
     .summary = "common words extraction: the 10 most repeated words of a list"},
    {.name = "fwe",
     .kind = PKV_TASK_FWE,
     .tokens_to_generate = 50,
     .max_new_tokens = 50,
     .metric = PKV_METRIC_MATCH_ALL,
     .summary = "frequent words extraction: the 3 most frequent coded words (Zipf)"},
    {.name = "longeval_lines",
     .kind = PKV_TASK_LONGEVAL,
     .tokens_to_generate = 32,
     .max_new_tokens = 16,
     .metric = PKV_METRIC_FIRST_INT,
     .summary = "LongEval-Lines: the register value of one of many lines"},
    {.name = "niah_passkey_noise",
     .kind = PKV_TASK_NIAH,
     .haystack = PKV_HAY_NOISE,
     .key = PKV_RAND_WORDS,
     .value = PKV_RAND_NUMBERS,
     .n_keys = 1,
     .n_values = 1,
     .n_queries = 1,
     .grid = true,
     .tokens_to_generate = 128,
     .max_new_tokens = 24,
     .metric = PKV_METRIC_MATCH_ALL,
     .summary = "grid: niah_single_1 with the needle at a given depth"},
    {.name = "niah_passkey_essay",
     .kind = PKV_TASK_NIAH,
     .haystack = PKV_HAY_ESSAY,
     .key = PKV_RAND_WORDS,
     .value = PKV_RAND_NUMBERS,
     .n_keys = 1,
     .n_values = 1,
     .n_queries = 1,
     .grid = true,
     .tokens_to_generate = 128,
     .max_new_tokens = 24,
     .metric = PKV_METRIC_MATCH_ALL,
     .summary = "grid: niah_single_2 with the needle at a given depth"},
    {.name = "niah_classic",
     .kind = PKV_TASK_CLASSIC,
     .grid = true,
     .tokens_to_generate = 50,
     .max_new_tokens = 48,
     .metric = PKV_METRIC_ROUGE1,
     .stop_newline = true,
     .summary = "grid: the San Francisco needle, story-book prompt, ROUGE-1 recall"},
};
enum { N_TASKS = sizeof TASKS / sizeof TASKS[0] };

const pkv_eval_task *pkv_eval_task_find(const char *name) {
    for (int i = 0; i < N_TASKS; i++)
        if (!strcmp(TASKS[i].name, name)) return &TASKS[i];
    return NULL;
}

int pkv_eval_task_count(void) { return N_TASKS; }
const pkv_eval_task *pkv_eval_task_get(int i) { return i >= 0 && i < N_TASKS ? &TASKS[i] : NULL; }

const int pkv_ruler_depths[40] = {0,  3,  5,  8,  10, 13, 15, 18, 21, 23, 26, 28, 31, 33, 36, 38, 41, 44, 46, 49,
                                  51, 54, 56, 59, 62, 64, 67, 69, 72, 74, 77, 79, 82, 85, 87, 90, 92, 95, 97, 100};

const char pkv_classic_needle[] =
    "The best thing to do in San Francisco is eat a sandwich and sit in Dolores Park on a sunny day.";

static const char NOISE_LINE[] =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";

/* ---------------------------------------------------------------- seeds and sizes */

void pkv_eval_seed_key(const pkv_eval_spec *spec, char *buf, int len) {
    if (spec->task->grid)
        snprintf(buf, (size_t)len, "%s:%g", spec->task->name, spec->depth);
    else
        snprintf(buf, (size_t)len, "%s", spec->task->name);
}

uint64_t pkv_eval_spec_seed(const pkv_eval_spec *spec) {
    char key[96];
    pkv_eval_seed_key(spec, key, sizeof key);
    return pkv_eval_seed(key, spec->length, spec->sample, spec->base_seed);
}

void pkv_eval_task_units(const pkv_eval_task *t, int length, pkv_eval_units *u) {
    bool short_len = length < 4096;
    u->min_units = 1;
    switch (t->kind) {
    case PKV_TASK_NIAH:
        if (t->haystack == PKV_HAY_ESSAY)
            u->increment = short_len ? 50 : 500;
        else
            u->increment = short_len ? 5 : 25;
        if (t->haystack != PKV_HAY_ESSAY) u->min_units = t->n_keys * t->n_values;
        break;
    case PKV_TASK_CLASSIC:
        u->increment = short_len ? 50 : 500;
        break;
    case PKV_TASK_VT:
        u->increment = short_len ? 5 : 25;
        u->min_units = 5;
        break;
    case PKV_TASK_CWE:
        u->increment = 10;
        u->min_units = 10;
        break;
    case PKV_TASK_FWE:
        u->increment = (length - 50) / 32 > 0 ? (length - 50) / 32 : 1;
        break;
    case PKV_TASK_LONGEVAL:
        u->increment = short_len ? 5 : 25;
        break;
    }
}

/* ---------------------------------------------------------------- item helpers */

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

/* The pieces an item is built from; turned into an item by finish_item. */
typedef struct {
    pkv_sbuf context, question, prefix, reference;
    char **gold;
    int n_gold;
    pkv_byte_span *needles;
    int n_needles;
    bool failed;
} builder;

static void add_gold(builder *b, const char *s) {
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
static void add_needle_text(builder *b, const char *s) {
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

static void builder_free(builder *b) {
    pkv_sbuf_free(&b->context);
    pkv_sbuf_free(&b->question);
    pkv_sbuf_free(&b->prefix);
    pkv_sbuf_free(&b->reference);
    for (int i = 0; i < b->n_gold; i++) free(b->gold[i]);
    free(b->gold);
    free(b->needles);
}

static int finish_item(builder *b, double depth, int n_units, int n_aux, pkv_eval_item *out, pkv_error *err) {
    memset(out, 0, sizeof *out);
    if (b->failed || b->context.failed || b->question.failed || b->prefix.failed || b->reference.failed) {
        builder_free(b);
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
static void rand_text(pkv_rng *rng, pkv_rand_kind kind, char *buf, size_t len) {
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

enum { RAND_MAX_LEN = 64 };

/* ---------------------------------------------------------------- NIAH (§1.2-1.3, §2.2) */

/* Plain substring replacement of every occurrence, into a new sbuf. */
static void replace_all(pkv_sbuf *out, const char *s, const char *from, const char *to) {
    size_t fl = strlen(from);
    for (const char *p = s; *p;) {
        const char *q = strstr(p, from);
        if (!q) {
            pkv_sbuf_puts(out, p);
            break;
        }
        pkv_sbuf_add(out, p, (size_t)(q - p));
        pkv_sbuf_puts(out, to);
        p = q + fl;
    }
}

/* RULER's singular rewrite, in its order: "Some"->"A", "are all"->"is", "are"->"is", "answers"->"answer". */
static char *singular_rewrite(const char *s) {
    static const char *const RULES[][2] = {{"Some", "A"}, {"are all", "is"}, {"are", "is"}, {"answers", "answer"}};
    char *cur = pkv_strdup(s);
    for (size_t r = 0; r < 4 && cur; r++) {
        pkv_sbuf b = {0};
        replace_all(&b, cur, RULES[r][0], RULES[r][1]);
        free(cur);
        cur = pkv_sbuf_take(&b);
    }
    return cur;
}

/* Fills "{type}" and "{query}" placeholders. */
static void fill_niah(pkv_sbuf *out, const char *tpl, const char *type, const char *query) {
    for (const char *p = tpl; *p;) {
        if (!strncmp(p, "{type}", 6)) {
            pkv_sbuf_puts(out, type);
            p += 6;
        } else if (!strncmp(p, "{query}", 7)) {
            pkv_sbuf_puts(out, query);
            p += 7;
        } else {
            pkv_sbuf_add(out, p, 1);
            p++;
        }
    }
}

static const char *rand_type_name(pkv_rand_kind k) {
    return k == PKV_RAND_WORDS ? "words" : k == PKV_RAND_NUMBERS ? "numbers" : "uuids";
}

typedef struct {
    char key[RAND_MAX_LEN], value[RAND_MAX_LEN];
} needle;

static void write_needle(builder *b, const char *type, const needle *nd, bool record) {
    pkv_sbuf_printf(&b->context, "One of the special magic %s for %s is: ", type, nd->key);
    if (record)
        add_needle_text(b, nd->value);
    else
        pkv_sbuf_puts(&b->context, nd->value);
    pkv_sbuf_puts(&b->context, ".");
}

static int cmp_int_desc(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x < y) - (x > y);
}
static int cmp_str_ptr(const void *a, const void *b) {
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

static int cmp_int_asc(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    return (x > y) - (x < y);
}

static bool key_taken(const char (*keys)[RAND_MAX_LEN], int n, const char *k) {
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
static int build_niah(const pkv_eval_spec *spec, int n, pkv_rng *rng, pkv_eval_item *out, pkv_error *err) {
    const pkv_eval_task *t = spec->task;
    int nk = t->n_keys > t->n_queries ? t->n_keys : t->n_queries;
    int nv = t->n_values, n_needles = nk * nv;
    bool single = t->n_queries * t->n_values == 1;
    if (t->haystack != PKV_HAY_ESSAY && n < n_needles)
        return pkv_fail(err, PKV_ERR_ARG, "%s: %d haystack lines cannot hold %d needles", t->name, n, n_needles);
    char(*keys)[RAND_MAX_LEN] = calloc((size_t)nk, sizeof *keys);
    needle *needles = calloc((size_t)n_needles, sizeof *needles);
    int *order = calloc((size_t)n_needles, sizeof *order);
    int *pos = calloc((size_t)n_needles, sizeof *pos);
    int *qidx = calloc((size_t)t->n_queries, sizeof *qidx);
    needle *distract = t->haystack == PKV_HAY_NEEDLE ? calloc((size_t)n, sizeof *distract) : NULL;
    pkv_byte_span *sents = NULL;
    builder b = {0};
    int rc = -1;
    if (!keys || !needles || !order || !pos || !qidx || (t->haystack == PKV_HAY_NEEDLE && !distract)) {
        pkv_fail(err, PKV_ERR_NOMEM, "out of memory building %s", t->name);
        goto out;
    }
    for (int i = 0; i < nk; i++) {
        do rand_text(rng, t->key, keys[i], RAND_MAX_LEN);
        while (key_taken(keys, i, keys[i]));
        for (int j = 0; j < nv; j++) {
            needle *nd = &needles[i * nv + j];
            memcpy(nd->key, keys[i], RAND_MAX_LEN);
            rand_text(rng, t->value, nd->value, RAND_MAX_LEN);
        }
    }
    /* shuffle the needles (through an index permutation) */
    for (int i = 0; i < n_needles; i++) order[i] = i;
    pkv_rng_shuffle_int(rng, order, (size_t)n_needles);

    const char *type_plural = rand_type_name(t->value);
    char type_single[16];
    snprintf(type_single, sizeof type_single, "%s", type_plural);
    if (single) type_single[strlen(type_single) - 1] = '\0';
    static const char INSTR[] = "Some special magic {type} are hidden within the following text. Make sure to "
                                "memorize it. I will quiz you about the {type} afterwards.\n";
    static const char QUESTION[] = "What are all the special magic {type} for {query} mentioned in the provided text?";
    static const char PREFIX[] = " The special magic {type} for {query} mentioned in the provided text are";

    /* queried keys are drawn after the haystack; the context is written first, so draw the haystack now */
    if (t->haystack == PKV_HAY_NEEDLE) {
        for (int i = 0; i < n; i++) {
            do rand_text(rng, t->key, distract[i].key, RAND_MAX_LEN);
            while (key_taken(keys, nk, distract[i].key));
            rand_text(rng, t->value, distract[i].value, RAND_MAX_LEN);
        }
    }
    char *instr = single ? singular_rewrite(INSTR) : pkv_strdup(INSTR);
    if (!instr) {
        pkv_fail(err, PKV_ERR_NOMEM, "out of memory building %s", t->name);
        goto out;
    }
    fill_niah(&b.context, instr, single ? type_single : type_plural, "");
    free(instr);

    if (t->haystack == PKV_HAY_ESSAY) {
        /* the first n words of the prose, split into sentences; needles at sentence indices */
        pkv_sbuf essay = {0};
        pkv_prose_words(&essay, PKV_PROSE_SEED, 0, n);
        char *text = pkv_sbuf_take(&essay);
        int n_sents = text ? pkv_split_sentences(text, &sents) : -1;
        if (n_sents < 0) {
            free(text);
            pkv_fail(err, PKV_ERR_NOMEM, "out of memory building %s", t->name);
            goto out;
        }
        if (t->grid) {
            pos[0] = (int)floor(n_sents * spec->depth / 100.0);
        } else {
            int didx[40];
            if (n_needles > 40) {
                free(text);
                pkv_fail(err, PKV_ERR_ARG, "%s: more needles than depths", t->name);
                goto out;
            }
            pkv_rng_distinct(rng, 40, n_needles, didx);
            for (int i = 0; i < n_needles; i++) pos[i] = (int)floor(n_sents * (pkv_ruler_depths[didx[i]] / 100.0));
        }
        qsort(pos, (size_t)n_needles, sizeof *pos, cmp_int_asc);
        /* RULER: " ".join(segment_0, needle_0, segment_1, ..., segment_k), empty segments included */
        int last = 0;
        for (int i = 0; i <= n_needles; i++) {
            int next = i < n_needles ? pos[i] : n_sents;
            if (i > 0) pkv_sbuf_puts(&b.context, " ");
            for (int s = last; s < next; s++) {
                if (s > last) pkv_sbuf_puts(&b.context, " ");
                pkv_sbuf_add(&b.context, text + sents[s].begin, (size_t)(sents[s].end - sents[s].begin));
            }
            last = next;
            if (i < n_needles) {
                pkv_sbuf_puts(&b.context, " ");
                const needle *nd = &needles[order[i]];
                write_needle(&b, type_plural, nd, true);
            }
        }
        free(text);
    } else {
        /* lines; needle i goes before original line pos[i], positions sorted descending (RULER's insert order) */
        if (t->grid)
            pos[0] = (int)floor(n * spec->depth / 100.0);
        else {
            pkv_rng_distinct(rng, n, n_needles, pos);
            qsort(pos, (size_t)n_needles, sizeof *pos, cmp_int_desc);
        }
        for (int line = 0; line <= n; line++) {
            for (int i = 0; i < n_needles; i++)
                if (pos[i] == line) {
                    if (b.context.len && b.context.data[b.context.len - 1] != '\n') pkv_sbuf_puts(&b.context, "\n");
                    write_needle(&b, type_plural, &needles[order[i]], true);
                }
            if (line == n) break;
            if (b.context.len && b.context.data[b.context.len - 1] != '\n') pkv_sbuf_puts(&b.context, "\n");
            if (t->haystack == PKV_HAY_NOISE)
                pkv_sbuf_puts(&b.context, NOISE_LINE);
            else
                write_needle(&b, type_plural, &distract[line], false);
        }
    }
    pkv_sbuf_puts(&b.context, "\n");

    /* the queried keys and their values (the gold), in query order */
    pkv_rng_distinct(rng, nk, t->n_queries, qidx);
    pkv_sbuf query = {0};
    for (int i = 0; i < t->n_queries; i++) {
        if (i > 0) pkv_sbuf_puts(&query, i == t->n_queries - 1 ? ", and " : ", "); /* RULER: "k1, k2, and k3" */
        pkv_sbuf_puts(&query, keys[qidx[i]]);
    }
    char *qtext = pkv_sbuf_take(&query);
    char *qtpl = single ? singular_rewrite(QUESTION) : pkv_strdup(QUESTION);
    char *ptpl = single ? singular_rewrite(PREFIX) : pkv_strdup(PREFIX);
    if (!qtext || !qtpl || !ptpl) {
        free(qtext);
        free(qtpl);
        free(ptpl);
        pkv_fail(err, PKV_ERR_NOMEM, "out of memory building %s", t->name);
        goto out;
    }
    fill_niah(&b.question, qtpl, single ? type_single : type_plural, qtext);
    fill_niah(&b.prefix, ptpl, single ? type_single : type_plural, qtext);
    free(qtext);
    free(qtpl);
    free(ptpl);
    /* only the queried needles bear the answer: keep their spans, in context order */
    pkv_byte_span *kept = b.needles;
    int n_kept = 0;
    for (int s = 0; s < b.n_needles; s++) {
        const char *val = b.context.data + kept[s].begin;
        size_t vlen = (size_t)(kept[s].end - kept[s].begin);
        bool queried = false;
        for (int i = 0; i < t->n_queries && !queried; i++)
            for (int j = 0; j < nv && !queried; j++) {
                const needle *nd = &needles[qidx[i] * nv + j];
                queried = strlen(nd->value) == vlen && !memcmp(nd->value, val, vlen);
            }
        if (queried) kept[n_kept++] = kept[s];
    }
    b.n_needles = n_kept;
    pkv_sbuf_puts(&b.reference, " ");
    for (int i = 0; i < t->n_queries; i++)
        for (int j = 0; j < nv; j++) {
            const char *v = needles[qidx[i] * nv + j].value;
            add_gold(&b, v);
            int k = i * nv + j, total = t->n_queries * nv;
            if (k > 0) pkv_sbuf_puts(&b.reference, k == total - 1 ? (total > 2 ? ", and " : " and ") : ", ");
            pkv_sbuf_puts(&b.reference, v);
        }
    pkv_sbuf_puts(&b.reference, ".");
    rc = finish_item(&b, t->grid ? spec->depth : -1, n, 0, out, err);
out:
    if (rc) builder_free(&b);
    free(keys);
    free(needles);
    free(order);
    free(pos);
    free(qidx);
    free(distract);
    free(sents);
    return rc;
}

/* ---------------------------------------------------------------- variable tracking (§1.4) */

static const char VT_INSTR[] =
    "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n";

static void rand_upper(pkv_rng *rng, int len, char *out) {
    for (int i = 0; i < len; i++) out[i] = (char)('A' + pkv_rng_below(rng, 26));
    out[len] = '\0';
}

/* 5 distinct names of len uppercase letters. */
static void vt_names(pkv_rng *rng, int len, char names[5][8]) {
    for (int i = 0; i < 5; i++) {
        bool dup;
        do {
            rand_upper(rng, len, names[i]);
            dup = false;
            for (int j = 0; j < i; j++) dup |= !strcmp(names[i], names[j]);
        } while (dup);
    }
}

/* The filled task (instruction, noise lines with the chain, question, prefix)
 * into context/question/prefix; chain line j goes before original line pos[j]
 * (positions ascending: the chain stays in order). record: keep needle spans. */
static void vt_write(builder *b, pkv_sbuf *ctx, pkv_sbuf *question, pkv_sbuf *prefix, char names[5][8], int value,
                     const int *pos, int n, bool record) {
    pkv_sbuf_puts(ctx, VT_INSTR);
    int j = 0;
    bool first = true; /* lines are joined by "\n" */
    for (int line = 0; line <= n; line++) {
        while (j < 5 && pos[j] == line) {
            if (!first) pkv_sbuf_puts(ctx, "\n");
            first = false;
            char stmt[64];
            if (j == 0)
                snprintf(stmt, sizeof stmt, "VAR %s = %d", names[0], value);
            else
                snprintf(stmt, sizeof stmt, "VAR %s = VAR %s ", names[j], names[j - 1]);
            if (record)
                add_needle_text(b, stmt);
            else
                pkv_sbuf_puts(ctx, stmt);
            j++;
        }
        if (line == n) break;
        if (!first) pkv_sbuf_puts(ctx, "\n");
        first = false;
        pkv_sbuf_puts(ctx, NOISE_LINE);
    }
    pkv_sbuf_puts(ctx, "\n");
    pkv_sbuf_printf(question, "Question: Find all variables that are assigned the value %d in the text above.", value);
    pkv_sbuf_printf(prefix,
                    " Answer: According to the chain(s) of variable assignment in the text above, 5 variables are "
                    "assigned the value %d, they are: ",
                    value);
}

/*
 * The one-shot example is a VT item of n_aux lines built from its own stream,
 * seed("vt-example", 500, 0, base): 5 distinct 3-letter names, then the
 * positions distinct(n_aux, 5); value 12345. It is written as the filled
 * template + answer prefix + " " + the names + "\n". With names == NULL the
 * skeleton's own names and 12345 are written (that is what is fitted to 500
 * tokens); otherwise the given ones (RULER's randomize_icl).
 */
static void vt_example(builder *b, pkv_sbuf *out, uint64_t base_seed, int n_aux, char names[5][8], int value) {
    pkv_rng ex_rng;
    pkv_rng_seed(&ex_rng, pkv_eval_seed("vt-example", 500, 0, base_seed));
    char skeleton[5][8];
    int pos[5];
    vt_names(&ex_rng, 3, skeleton);
    pkv_rng_distinct(&ex_rng, n_aux, 5, pos);
    qsort(pos, 5, sizeof *pos, cmp_int_asc);
    if (!names) {
        names = skeleton;
        value = 12345;
    }
    pkv_sbuf q = {0}, p = {0};
    vt_write(b, out, &q, &p, names, value, pos, n_aux, false);
    pkv_sbuf_add(out, q.data ? q.data : "", q.len);
    pkv_sbuf_add(out, p.data ? p.data : "", p.len);
    pkv_sbuf_puts(out, " ");
    for (int i = 0; i < 5; i++) pkv_sbuf_printf(out, "%s%s", i ? " " : "", names[i]);
    pkv_sbuf_puts(out, "\n");
    if (q.failed || p.failed) out->failed = true;
    pkv_sbuf_free(&q);
    pkv_sbuf_free(&p);
}

/*
 * Draw order of a sample: the example's replacement names (5 distinct, 3
 * letters) and value in [10000, 99998]; then the sample's 5 distinct 5-letter
 * names, its value in [10000, 99998], and the positions distinct(n, 5),
 * sorted ascending so the chain stays in order.
 */
static int build_vt(const pkv_eval_spec *spec, int n, int n_aux, pkv_rng *rng, pkv_eval_item *out, pkv_error *err) {
    if (n < 5 || n_aux < 5)
        return pkv_fail(err, PKV_ERR_ARG, "vt: %d / %d haystack lines cannot hold a 5-variable chain", n, n_aux);
    builder b = {0};
    char ex_names[5][8], names[5][8];
    int pos[5];
    vt_names(rng, 3, ex_names);
    int ex_value = (int)pkv_rng_range(rng, 10000, 99998);
    vt_example(&b, &b.context, spec->base_seed, n_aux, ex_names, ex_value);
    vt_names(rng, 5, names);
    int value = (int)pkv_rng_range(rng, 10000, 99998);
    pkv_rng_distinct(rng, n, 5, pos);
    qsort(pos, 5, sizeof *pos, cmp_int_asc);
    vt_write(&b, &b.context, &b.question, &b.prefix, names, value, pos, n, true);
    for (int i = 0; i < 5; i++) {
        add_gold(&b, names[i]);
        pkv_sbuf_printf(&b.reference, "%s%s", i ? " " : "", names[i]);
    }
    return finish_item(&b, -1, n, n_aux, out, err);
}

/* ---------------------------------------------------------------- common words extraction (§1.5) */

static const char CWE_INSTR[] =
    "Below is a numbered list of words. In these words, some appear more often than others. "
    "Memorize the ones that appear most often.\n";
static const char CWE_QUESTION[] = "Question: What are the 10 most common words in the above list?";
static const char CWE_PREFIX[] = " Answer: The top 10 words that appear most often in the list are:";

/* distinct(pool, n_words) words; the first 10 are common: the list is the
 * 10 common words repeated c times then the rest u times, shuffled, written
 * "1. w 2. w ...". The chosen words land in words[]. */
static void cwe_list(pkv_sbuf *out, pkv_rng *rng, const char **pool, int n_pool, int n_words, int c, int u,
                     const char **words, bool *failed) {
    int *idx = malloc((size_t)n_words * sizeof *idx);
    int total = 10 * c + (n_words - 10) * u;
    const char **list = malloc((size_t)(total > 0 ? total : 1) * sizeof *list);
    if (!idx || !list) {
        free(idx);
        free(list);
        *failed = true;
        return;
    }
    pkv_rng_distinct(rng, n_pool, n_words, idx);
    for (int i = 0; i < n_words; i++) words[i] = pool[idx[i]];
    int k = 0;
    for (int r = 0; r < c; r++)
        for (int i = 0; i < 10; i++) list[k++] = words[i];
    for (int r = 0; r < u; r++)
        for (int i = 10; i < n_words; i++) list[k++] = words[i];
    pkv_rng_shuffle_ptr(rng, list, (size_t)total);
    for (int i = 0; i < total; i++) pkv_sbuf_printf(out, "%s%d. %s", i ? " " : "", i + 1, list[i]);
    free(idx);
    free(list);
}

/*
 * Draw order: the one-shot example's words (distinct over the pool, 20 or 40)
 * and its shuffle, then the sample's words (distinct, n) and its shuffle.
 * Below 4096 tokens: c = 6, u = 1, example 20 words with c = 3, u = 1; else
 * c = 30, u = 3, example 40 words with c = 10, u = 3.
 */
static int build_cwe(const pkv_eval_spec *spec, int n, pkv_rng *rng, pkv_eval_item *out, pkv_error *err) {
    bool short_len = spec->length < 4096;
    int c = short_len ? 6 : 30, u = short_len ? 1 : 3;
    int ex_n = short_len ? 20 : 40, ex_c = short_len ? 3 : 10, ex_u = short_len ? 1 : 3;
    int n_pool;
    const char **pool = pkv_words_pool(&n_pool);
    if (!pool) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory building cwe");
    if (n < 10 || n > n_pool) {
        free(pool);
        return pkv_fail(err, PKV_ERR_LIMIT, "cwe: %d words requested; the shipped word pool holds %d (at least 10)", n,
                        n_pool);
    }
    const char **words = malloc((size_t)n * sizeof *words);
    const char *ex_words[40];
    builder b = {0};
    if (!words) {
        free(pool);
        return pkv_fail(err, PKV_ERR_NOMEM, "out of memory building cwe");
    }
    pkv_sbuf_puts(&b.context, CWE_INSTR);
    cwe_list(&b.context, rng, pool, n_pool, ex_n, ex_c, ex_u, ex_words, &b.failed);
    pkv_sbuf_printf(&b.context, "\n%s%s", CWE_QUESTION, CWE_PREFIX);
    for (int i = 0; i < 10; i++) pkv_sbuf_printf(&b.context, " %d. %s", i + 1, ex_words[i]);
    pkv_sbuf_puts(&b.context, "\n");
    pkv_sbuf_puts(&b.context, CWE_INSTR);
    cwe_list(&b.context, rng, pool, n_pool, n, c, u, words, &b.failed);
    pkv_sbuf_puts(&b.context, "\n");
    pkv_sbuf_puts(&b.question, CWE_QUESTION);
    pkv_sbuf_puts(&b.prefix, CWE_PREFIX);
    for (int i = 0; i < 10 && !b.failed; i++) {
        add_gold(&b, words[i]);
        pkv_sbuf_printf(&b.reference, " %d. %s", i + 1, words[i]);
    }
    free(words);
    free(pool);
    return finish_item(&b, -1, n, 0, out, err);
}

/* ---------------------------------------------------------------- frequent words extraction (§1.6) */

/*
 * Draw order: V = (length - 50) / 50 distinct 6-letter lowercase words (each
 * letter below(26), a word redrawn while equal to an earlier one), sorted,
 * shuffled; rank 1 becomes "..."; the word of rank k appears
 * floor(N * k^-2 / zeta(2)) times; the occurrences (rank order) are shuffled.
 * Gold: ranks 2-4.
 */
static int build_fwe(const pkv_eval_spec *spec, int n_words, pkv_rng *rng, pkv_eval_item *out, pkv_error *err) {
    int v = (spec->length - 50) / 50;
    if (v < 4) return pkv_fail(err, PKV_ERR_ARG, "fwe: length %d is too short (at least 250 tokens)", spec->length);
    char(*vocab)[8] = calloc((size_t)v, sizeof *vocab);
    const char **ranked = calloc((size_t)v, sizeof *ranked);
    if (!vocab || !ranked) {
        free(vocab);
        free(ranked);
        return pkv_fail(err, PKV_ERR_NOMEM, "out of memory building fwe");
    }
    for (int i = 0; i < v; i++) {
        bool dup;
        do {
            for (int c = 0; c < 6; c++) vocab[i][c] = (char)('a' + pkv_rng_below(rng, 26));
            vocab[i][6] = '\0';
            dup = false;
            for (int j = 0; j < i && !dup; j++) dup = !strcmp(vocab[i], vocab[j]);
        } while (dup);
    }
    for (int i = 0; i < v; i++) ranked[i] = vocab[i];
    qsort(ranked, (size_t)v, sizeof *ranked, cmp_str_ptr);
    pkv_rng_shuffle_ptr(rng, ranked, (size_t)v);
    ranked[0] = "...";
    const double zeta2 = M_PI * M_PI / 6.0;
    long total = 0;
    for (int k = 1; k <= v; k++) total += (long)floor(n_words * pow((double)k, -2.0) / zeta2);
    const char **occ = malloc((size_t)(total > 0 ? total : 1) * sizeof *occ);
    builder b = {0};
    if (!occ) {
        free(vocab);
        free(ranked);
        return pkv_fail(err, PKV_ERR_NOMEM, "out of memory building fwe");
    }
    long m = 0;
    for (int k = 1; k <= v; k++) {
        long cnt = (long)floor(n_words * pow((double)k, -2.0) / zeta2);
        for (long i = 0; i < cnt; i++) occ[m++] = ranked[k - 1];
    }
    pkv_rng_shuffle_ptr(rng, occ, (size_t)total);
    pkv_sbuf_puts(&b.context,
                  "Read the following coded text and track the frequency of each coded word. Find the three "
                  "most frequently appeared coded words. ");
    for (long i = 0; i < total; i++) {
        if (i) pkv_sbuf_puts(&b.context, " ");
        pkv_sbuf_puts(&b.context, occ[i]);
    }
    pkv_sbuf_puts(&b.context, "\n");
    pkv_sbuf_puts(&b.question, "Question: Do not provide any explanation. Please ignore the dots '....'. What are the "
                               "three most frequently appeared words in the above coded text?");
    pkv_sbuf_puts(&b.prefix,
                  " Answer: According to the coded text above, the three most frequently appeared words are:");
    for (int k = 1; k <= 3; k++) {
        add_gold(&b, ranked[k]);
        pkv_sbuf_printf(&b.reference, " %s", ranked[k]);
    }
    free(occ);
    free(vocab);
    free(ranked);
    return finish_item(&b, -1, n_words, 0, out, err);
}

/* ---------------------------------------------------------------- LongEval-Lines (§2.4) */

/*
 * Draw order: per line, its key (adjective-noun, redrawn while equal to an
 * earlier line's) then its value in [10000, 99999]; then the queried line
 * below(n).
 */
static int build_longeval(const pkv_eval_spec *spec, int n, pkv_rng *rng, pkv_eval_item *out, pkv_error *err) {
    (void)spec;
    if (n < 1) return pkv_fail(err, PKV_ERR_ARG, "longeval_lines: needs at least one line");
    char(*keys)[RAND_MAX_LEN] = calloc((size_t)n, sizeof *keys);
    int *values = calloc((size_t)n, sizeof *values);
    if (!keys || !values) {
        free(keys);
        free(values);
        return pkv_fail(err, PKV_ERR_NOMEM, "out of memory building longeval_lines");
    }
    for (int i = 0; i < n; i++) {
        do rand_text(rng, PKV_RAND_WORDS, keys[i], RAND_MAX_LEN);
        while (key_taken(keys, i, keys[i]));
        values[i] = (int)pkv_rng_range(rng, 10000, 99999);
    }
    int target = (int)pkv_rng_below(rng, (uint64_t)n);
    builder b = {0};
    pkv_sbuf_puts(&b.context,
                  "Below is a record of lines I want you to remember. Each line begins with 'line <line index>' and "
                  "contains a '<REGISTER_CONTENT>' at the end of the line as a numerical value. For each line index, "
                  "memorize its corresponding <REGISTER_CONTENT>. At the end of the record, I will ask you to retrieve "
                  "the corresponding <REGISTER_CONTENT> of a certain line index. Now the record start:\n\n");
    for (int i = 0; i < n; i++) {
        pkv_sbuf_printf(&b.context, "line %s: REGISTER_CONTENT is <", keys[i]);
        char v[16];
        snprintf(v, sizeof v, "%d", values[i]);
        if (i == target)
            add_needle_text(&b, v);
        else
            pkv_sbuf_puts(&b.context, v);
        pkv_sbuf_puts(&b.context, ">\n");
    }
    pkv_sbuf_printf(&b.question,
                    "\nNow the record is over. Tell me what is the <REGISTER_CONTENT> in line %s? I need the number.",
                    keys[target]);
    pkv_sbuf_printf(&b.prefix, " Answer: The <REGISTER_CONTENT> in line %s is", keys[target]);
    char v[16];
    snprintf(v, sizeof v, "%d", values[target]);
    add_gold(&b, v);
    pkv_sbuf_printf(&b.reference, " <%d>", values[target]);
    double depth = n > 1 ? 100.0 * target / (n - 1) : 0.0;
    free(keys);
    free(values);
    return finish_item(&b, depth, n, 0, out, err);
}

/* ---------------------------------------------------------------- NIAH-classic (§2.2 story-book) */

/*
 * No random draws: sample s reads the prose corpus of seed PKV_PROSE_SEED + s,
 * so repeats of a cell differ. The needle goes before sentence
 * floor(n_sents * depth / 100).
 */
static int build_classic(const pkv_eval_spec *spec, int n, pkv_eval_item *out, pkv_error *err) {
    pkv_sbuf essay = {0};
    pkv_prose_words(&essay, PKV_PROSE_SEED + (uint64_t)spec->sample, 0, n);
    char *text = pkv_sbuf_take(&essay);
    pkv_byte_span *sents = NULL;
    int n_sents = text ? pkv_split_sentences(text, &sents) : -1;
    if (n_sents < 0) {
        free(text);
        return pkv_fail(err, PKV_ERR_NOMEM, "out of memory building niah_classic");
    }
    int at = (int)floor(n_sents * spec->depth / 100.0);
    builder b = {0};
    pkv_sbuf_puts(&b.context, "This is a very long story book: <book> ");
    for (int s = 0; s <= n_sents; s++) {
        if (s == at) {
            if (s > 0) pkv_sbuf_puts(&b.context, " ");
            add_needle_text(&b, pkv_classic_needle);
        }
        if (s == n_sents) break;
        if (s > 0 || at == 0) pkv_sbuf_puts(&b.context, " ");
        pkv_sbuf_add(&b.context, text + sents[s].begin, (size_t)(sents[s].end - sents[s].begin));
    }
    pkv_sbuf_puts(&b.context, " </book>.\n");
    pkv_sbuf_puts(&b.question,
                  " Based on the content of the book, Question: What is the best thing to do in San Francisco?\n");
    pkv_sbuf_puts(&b.prefix, "Answer:");
    add_gold(&b, pkv_classic_needle);
    pkv_sbuf_printf(&b.reference, " %s", pkv_classic_needle);
    free(text);
    free(sents);
    return finish_item(&b, spec->depth, n, 0, out, err);
}

/* ---------------------------------------------------------------- dispatch */

int pkv_eval_build(const pkv_eval_spec *spec, int n_units, int n_aux, pkv_eval_item *out, pkv_error *err) {
    memset(out, 0, sizeof *out);
    const pkv_eval_task *t = spec->task;
    if (t->grid && (spec->depth < 0 || spec->depth > 100))
        return pkv_fail(err, PKV_ERR_ARG, "%s: depth %g is outside [0, 100]", t->name, spec->depth);
    if (n_units < 1) return pkv_fail(err, PKV_ERR_ARG, "%s: haystack size %d must be positive", t->name, n_units);
    pkv_rng rng;
    pkv_rng_seed(&rng, pkv_eval_spec_seed(spec));
    switch (t->kind) {
    case PKV_TASK_NIAH:
        return build_niah(spec, n_units, &rng, out, err);
    case PKV_TASK_VT:
        return build_vt(spec, n_units, n_aux, &rng, out, err);
    case PKV_TASK_CWE:
        return build_cwe(spec, n_units, &rng, out, err);
    case PKV_TASK_FWE:
        return build_fwe(spec, n_units, &rng, out, err);
    case PKV_TASK_LONGEVAL:
        return build_longeval(spec, n_units, &rng, out, err);
    case PKV_TASK_CLASSIC:
        return build_classic(spec, n_units, out, err);
    }
    return pkv_fail(err, PKV_ERR_INTERNAL, "unknown task kind");
}

/* ---------------------------------------------------------------- length fitting (§1.1) */

void pkv_eval_fitter_init(pkv_eval_fitter *f, pkv_token_count_fn count, void *user) {
    memset(f, 0, sizeof *f);
    f->count = count;
    f->user = user;
}

void pkv_eval_fitter_free(pkv_eval_fitter *f) {
    free(f->entries);
    f->entries = NULL;
    f->n_entries = f->cap = 0;
}

/* What a search measures: tokens (generation included) at size n; -1 on error. */
typedef int (*measure_fn)(pkv_eval_fitter *f, const pkv_eval_spec *spec, int n, int n_aux, pkv_error *err);

/* Tokens of spec's item at size n plus the task's generation budget. */
static int item_tokens(pkv_eval_fitter *f, const pkv_eval_spec *spec, int n, int n_aux, pkv_error *err) {
    pkv_eval_item it;
    if (pkv_eval_build(spec, n, n_aux, &it, err)) return -1;
    int tok = f->count(f->user, &it, err);
    pkv_eval_item_free(&it);
    return tok < 0 ? -1 : tok + spec->task->tokens_to_generate;
}

/* Tokens of VT's one-shot example with n lines (as its own 500-token sample: 30 to generate). */
static int vt_example_tokens(pkv_eval_fitter *f, const pkv_eval_spec *spec, int n, int n_aux, pkv_error *err) {
    (void)n_aux;
    if (n < 5) return pkv_fail(err, PKV_ERR_ARG, "vt: the example needs 5 lines");
    builder b = {0};
    vt_example(&b, &b.context, spec->base_seed, n, NULL, 0);
    if (b.context.failed) {
        builder_free(&b);
        return pkv_fail(err, PKV_ERR_NOMEM, "out of memory");
    }
    pkv_eval_item it = {.context = b.context.data, .question = "", .answer_prefix = ""};
    int tok = f->count(f->user, &it, err);
    builder_free(&b);
    return tok < 0 ? -1 : tok + 30;
}

/* RULER's search (§1.1): probe with `increment` units for tokens per unit,
 * then binary-search [lo, max(3 * limit / per_unit, 2 * increment)] for the
 * largest size whose tokens fit in limit. Two probes (increment and twice
 * that) measure the cost of a unit without the template's fixed tokens, and
 * the upper end doubles while it still fits, so the result is the true
 * maximum even where the estimate is off. *best = 0 when even lo does not fit. */
static int binary_search_units(pkv_eval_fitter *f, measure_fn measure, const pkv_eval_spec *spec, int limit, int n_aux,
                               int lo, int increment, int *best, pkv_error *err) {
    int probe_n = increment > lo ? increment : lo;
    int p1 = measure(f, spec, probe_n, n_aux, err);
    if (p1 < 0 && !(err && err->code == PKV_ERR_LIMIT)) return -1;
    int p2 = p1 >= 0 ? measure(f, spec, 2 * probe_n, n_aux, err) : -1;
    if (p2 < 0 && err && err->code != PKV_ERR_LIMIT && err->code != PKV_OK) return -1;
    double per_unit = p2 > p1 && p1 >= 0 ? (double)(p2 - p1) / probe_n : p1 > 0 ? (double)p1 / probe_n : 1.0;
    double est = 3.0 * limit / per_unit;
    int hi = est > 1e7 ? 10000000 : (int)est;
    if (hi < 2 * increment) hi = 2 * increment;
    if (hi < lo) hi = lo;
    *best = 0;
    for (;;) {
        int tok = measure(f, spec, hi, n_aux, err);
        if (tok < 0 && !(err && err->code == PKV_ERR_LIMIT)) return -1;
        if (tok < 0 || tok > limit || hi >= 10000000) break;
        *best = hi; /* still fits: the maximum lies above */
        lo = hi + 1;
        hi *= 2;
    }
    pkv_error_clear(err);
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int tok = measure(f, spec, mid, n_aux, err);
        if (tok < 0) {
            /* a size the task cannot hold (more CWE words than the pool) counts as too big */
            if (err && err->code == PKV_ERR_LIMIT) {
                hi = mid - 1;
                continue;
            }
            return -1;
        }
        if (tok <= limit) {
            *best = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    pkv_error_clear(err);
    return 0;
}

/* FWE's own search (§1.6): from (length - 50) / 6 words, grow by the
 * increment until the prompt reaches length - 50 tokens, then step back once. */
static int fwe_search(pkv_eval_fitter *f, const pkv_eval_spec *spec, int increment, int *best, pkv_error *err) {
    int gen = spec->task->tokens_to_generate, max_len = spec->length - gen;
    int n = max_len / 6 > 1 ? max_len / 6 : 1;
    for (int guard = 0;; guard++) {
        if (guard > 100000) return pkv_fail(err, PKV_ERR_INTERNAL, "fwe: the length search does not end");
        int tok = item_tokens(f, spec, n, 0, err);
        if (tok < 0) return -1;
        if (tok - gen >= max_len) break;
        n += increment;
    }
    *best = n - increment;
    return 0;
}

static int fitted_lookup(const pkv_eval_fitter *f, const char *key) {
    for (int i = 0; i < f->n_entries; i++)
        if (!strcmp(f->entries[i].key, key)) return f->entries[i].n_units;
    return -1;
}

static int fitted_store(pkv_eval_fitter *f, const char *key, int n, pkv_error *err) {
    if (f->n_entries == f->cap) {
        int cap = f->cap ? 2 * f->cap : 16;
        pkv_fit_entry *e = realloc(f->entries, (size_t)cap * sizeof *e);
        if (!e) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory");
        f->entries = e;
        f->cap = cap;
    }
    snprintf(f->entries[f->n_entries].key, sizeof f->entries[0].key, "%s", key);
    f->entries[f->n_entries++].n_units = n;
    return 0;
}

/* The haystack size for (task, length, depth), searched once on sample 0. */
static int fitted_units(pkv_eval_fitter *f, const pkv_eval_spec *spec, int n_aux, pkv_error *err) {
    char key[96], seed_key[80];
    pkv_eval_seed_key(spec, seed_key, sizeof seed_key);
    snprintf(key, sizeof key, "%s/%d", seed_key, spec->length);
    int n = fitted_lookup(f, key);
    if (n > 0) return n;
    pkv_eval_spec probe = *spec;
    probe.sample = 0;
    pkv_eval_units u;
    pkv_eval_task_units(spec->task, spec->length, &u);
    if (spec->task->kind == PKV_TASK_FWE) {
        if (fwe_search(f, &probe, u.increment, &n, err)) return -1;
    } else if (binary_search_units(f, item_tokens, &probe, spec->length, n_aux, u.min_units, u.increment, &n, err)) {
        return -1;
    }
    if (n < u.min_units)
        return pkv_fail(err, PKV_ERR_LIMIT, "%s does not fit in %d tokens with this tokenizer (try a longer length)",
                        spec->task->name, spec->length);
    return fitted_store(f, key, n, err) ? -1 : n;
}

int pkv_eval_generate(pkv_eval_fitter *f, const pkv_eval_spec *spec, pkv_eval_item *out, int *n_tokens,
                      pkv_error *err) {
    memset(out, 0, sizeof *out);
    int n_aux = 0;
    if (spec->task->kind == PKV_TASK_VT) {
        if (f->vt_example_lines <= 0) {
            int best;
            pkv_eval_spec ex = *spec;
            if (binary_search_units(f, vt_example_tokens, &ex, 500, 0, 5, 5, &best, err)) return -1;
            /* a tokenizer so coarse that even 5 lines exceed 500 tokens gets the 5-line example */
            f->vt_example_lines = best >= 5 ? best : 5;
        }
        n_aux = f->vt_example_lines;
    }
    int n = fitted_units(f, spec, n_aux, err);
    if (n < 0) return -1;
    pkv_eval_units u;
    pkv_eval_task_units(spec->task, spec->length, &u);
    /* this sample's draw may be longer than the probe's: shrink by the increment until it fits */
    for (;;) {
        if (pkv_eval_build(spec, n, n_aux, out, err)) return -1;
        int tok = f->count(f->user, out, err);
        if (tok < 0) {
            pkv_eval_item_free(out);
            return -1;
        }
        if (tok + spec->task->tokens_to_generate <= spec->length) {
            if (n_tokens) *n_tokens = tok;
            return 0;
        }
        pkv_eval_item_free(out);
        n -= u.increment;
        if (n < u.min_units)
            return pkv_fail(err, PKV_ERR_LIMIT, "%s sample %d does not fit in %d tokens", spec->task->name,
                            spec->sample, spec->length);
    }
}
