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
#include "eval/items.h"

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
    /* the multi-question benchmark (docs/evaluation.md §2.5): one context, a question per item */
    {.name = "niah_multiquestion",
     .kind = PKV_TASK_NIAH,
     .haystack = PKV_HAY_ESSAY,
     .key = PKV_RAND_WORDS,
     .value = PKV_RAND_NUMBERS,
     .n_keys = 4,
     .n_values = 1,
     .n_queries = 1,
     .n_questions = 4,
     .tokens_to_generate = 128,
     .max_new_tokens = 24,
     .metric = PKV_METRIC_MATCH_ALL,
     .summary = "4 needles in prose, each asked in its own question of one context"},
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
    {.name = "longeval_multiquestion",
     .kind = PKV_TASK_LONGEVAL,
     .n_questions = 4,
     .tokens_to_generate = 32,
     .max_new_tokens = 16,
     .metric = PKV_METRIC_FIRST_INT,
     .summary = "LongEval-Lines, 4 lines of one record each asked in its own question"},
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
        if (t->n_questions > 1) u->min_units = t->n_questions; /* a line per question */
        break;
    }
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
static void vt_write(pkv_item_builder *b, pkv_sbuf *ctx, pkv_sbuf *question, pkv_sbuf *prefix, char names[5][8], int value,
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
                pkv_item_add_needle(b, stmt);
            else
                pkv_sbuf_puts(ctx, stmt);
            j++;
        }
        if (line == n) break;
        if (!first) pkv_sbuf_puts(ctx, "\n");
        first = false;
        pkv_sbuf_puts(ctx, pkv_item_noise_line);
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
void pkv_eval_vt_example(pkv_item_builder *b, pkv_sbuf *out, uint64_t base_seed, int n_aux, char names[5][8], int value) {
    pkv_rng ex_rng;
    pkv_rng_seed(&ex_rng, pkv_eval_seed("vt-example", 500, 0, base_seed));
    char skeleton[5][8];
    int pos[5];
    vt_names(&ex_rng, 3, skeleton);
    pkv_rng_distinct(&ex_rng, n_aux, 5, pos);
    qsort(pos, 5, sizeof *pos, pkv_item_cmp_int_asc);
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
    pkv_item_builder b = {0};
    char ex_names[5][8], names[5][8];
    int pos[5];
    vt_names(rng, 3, ex_names);
    int ex_value = (int)pkv_rng_range(rng, 10000, 99998);
    pkv_eval_vt_example(&b, &b.context, spec->base_seed, n_aux, ex_names, ex_value);
    vt_names(rng, 5, names);
    int value = (int)pkv_rng_range(rng, 10000, 99998);
    pkv_rng_distinct(rng, n, 5, pos);
    qsort(pos, 5, sizeof *pos, pkv_item_cmp_int_asc);
    vt_write(&b, &b.context, &b.question, &b.prefix, names, value, pos, n, true);
    for (int i = 0; i < 5; i++) {
        pkv_item_add_gold(&b, names[i]);
        pkv_sbuf_printf(&b.reference, "%s%s", i ? " " : "", names[i]);
    }
    return pkv_item_finish(&b, -1, n, n_aux, out, err);
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
    pkv_item_builder b = {0};
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
        pkv_item_add_gold(&b, words[i]);
        pkv_sbuf_printf(&b.reference, " %d. %s", i + 1, words[i]);
    }
    free(words);
    free(pool);
    return pkv_item_finish(&b, -1, n, 0, out, err);
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
    qsort(ranked, (size_t)v, sizeof *ranked, pkv_item_cmp_str_ptr);
    pkv_rng_shuffle_ptr(rng, ranked, (size_t)v);
    ranked[0] = "...";
    const double zeta2 = M_PI * M_PI / 6.0;
    long total = 0;
    for (int k = 1; k <= v; k++) total += (long)floor(n_words * pow((double)k, -2.0) / zeta2);
    const char **occ = malloc((size_t)(total > 0 ? total : 1) * sizeof *occ);
    pkv_item_builder b = {0};
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
        pkv_item_add_gold(&b, ranked[k]);
        pkv_sbuf_printf(&b.reference, " %s", ranked[k]);
    }
    free(occ);
    free(vocab);
    free(ranked);
    return pkv_item_finish(&b, -1, n_words, 0, out, err);
}

/* ---------------------------------------------------------------- LongEval-Lines (§2.4) */

/*
 * Draw order: per line, its key (adjective-noun, redrawn while equal to an
 * earlier line's) then its value in [10000, 99999]; then the queried line
 * below(n).
 */
static int build_longeval(const pkv_eval_spec *spec, int n, pkv_rng *rng, pkv_eval_item *out, pkv_error *err) {
    (void)spec;
    if (n < 1) return pkv_fail(err, PKV_ERR_ARG, "%s: needs at least one line", spec->task->name);
    char(*keys)[PKV_ITEM_KEY_LEN] = calloc((size_t)n, sizeof *keys);
    int *values = calloc((size_t)n, sizeof *values);
    if (!keys || !values) {
        free(keys);
        free(values);
        return pkv_fail(err, PKV_ERR_NOMEM, "out of memory building %s", spec->task->name);
    }
    for (int i = 0; i < n; i++) {
        do pkv_item_rand_text(rng, PKV_RAND_WORDS, keys[i], PKV_ITEM_KEY_LEN);
        while (pkv_item_key_taken(keys, i, keys[i]));
        values[i] = (int)pkv_rng_range(rng, 10000, 99999);
    }
    /* one line asked; the multi-question task draws its n_questions lines at once (all distinct) */
    int target, nq = spec->task->n_questions;
    if (nq > 1) {
        int picked[PKV_EVAL_MAX_QUESTIONS];
        if (n < nq) {
            free(keys);
            free(values);
            return pkv_fail(err, PKV_ERR_LIMIT, "%s: %d lines cannot hold %d questions", spec->task->name, n, nq);
        }
        pkv_rng_distinct(rng, n, nq, picked);
        target = picked[spec->question];
    } else {
        target = (int)pkv_rng_below(rng, (uint64_t)n);
    }
    pkv_item_builder b = {0};
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
            pkv_item_add_needle(&b, v);
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
    pkv_item_add_gold(&b, v);
    pkv_sbuf_printf(&b.reference, " <%d>", values[target]);
    double depth = n > 1 ? 100.0 * target / (n - 1) : 0.0;
    free(keys);
    free(values);
    return pkv_item_finish(&b, depth, n, 0, out, err);
}

/* ---------------------------------------------------------------- dispatch */

int pkv_eval_build(const pkv_eval_spec *spec, int n_units, int n_aux, pkv_eval_item *out, pkv_error *err) {
    memset(out, 0, sizeof *out);
    const pkv_eval_task *t = spec->task;
    if (t->grid && (spec->depth < 0 || spec->depth > 100))
        return pkv_fail(err, PKV_ERR_ARG, "%s: depth %g is outside [0, 100]", t->name, spec->depth);
    if (n_units < 1) return pkv_fail(err, PKV_ERR_ARG, "%s: haystack size %d must be positive", t->name, n_units);
    int nq = t->n_questions > 1 ? t->n_questions : 1;
    if (spec->question < 0 || spec->question >= nq)
        return pkv_fail(err, PKV_ERR_ARG, "%s: question %d is outside [0, %d)", t->name, spec->question, nq);
    pkv_rng rng;
    pkv_rng_seed(&rng, pkv_eval_spec_seed(spec));
    switch (t->kind) {
    case PKV_TASK_NIAH:
        return pkv_eval_build_niah(spec, n_units, &rng, out, err);
    case PKV_TASK_VT:
        return build_vt(spec, n_units, n_aux, &rng, out, err);
    case PKV_TASK_CWE:
        return build_cwe(spec, n_units, &rng, out, err);
    case PKV_TASK_FWE:
        return build_fwe(spec, n_units, &rng, out, err);
    case PKV_TASK_LONGEVAL:
        return build_longeval(spec, n_units, &rng, out, err);
    case PKV_TASK_CLASSIC:
        return pkv_eval_build_classic(spec, n_units, out, err);
    }
    return pkv_fail(err, PKV_ERR_INTERNAL, "unknown task kind");
}
