/* The needle-in-a-haystack generators: RULER's NIAH family
 * (docs/evaluation.md §1.2-1.3, §2.2) and NIAH-classic (§2.2 story-book). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "eval/items.h"

const int pkv_ruler_depths[40] = {0,  3,  5,  8,  10, 13, 15, 18, 21, 23, 26, 28, 31, 33, 36, 38, 41, 44, 46, 49,
                                  51, 54, 56, 59, 62, 64, 67, 69, 72, 74, 77, 79, 82, 85, 87, 90, 92, 95, 97, 100};

const char pkv_classic_needle[] =
    "The best thing to do in San Francisco is eat a sandwich and sit in Dolores Park on a sunny day.";

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
    char key[PKV_ITEM_KEY_LEN], value[PKV_ITEM_KEY_LEN];
} needle;

static void write_needle(pkv_item_builder *b, const char *type, const needle *nd, bool record) {
    pkv_sbuf_printf(&b->context, "One of the special magic %s for %s is: ", type, nd->key);
    if (record)
        pkv_item_add_needle(b, nd->value);
    else
        pkv_sbuf_puts(&b->context, nd->value);
    pkv_sbuf_puts(&b->context, ".");
}

int pkv_eval_build_niah(const pkv_eval_spec *spec, int n, pkv_rng *rng, pkv_eval_item *out, pkv_error *err) {
    const pkv_eval_task *t = spec->task;
    int nk = t->n_keys > t->n_queries ? t->n_keys : t->n_queries;
    int nv = t->n_values, n_needles = nk * nv;
    bool single = t->n_queries * t->n_values == 1;
    if (t->haystack != PKV_HAY_ESSAY && n < n_needles)
        return pkv_fail(err, PKV_ERR_ARG, "%s: %d haystack lines cannot hold %d needles", t->name, n, n_needles);
    char(*keys)[PKV_ITEM_KEY_LEN] = calloc((size_t)nk, sizeof *keys);
    needle *needles = calloc((size_t)n_needles, sizeof *needles);
    int *order = calloc((size_t)n_needles, sizeof *order);
    int *pos = calloc((size_t)n_needles, sizeof *pos);
    int *qidx = calloc((size_t)t->n_queries, sizeof *qidx);
    needle *distract = t->haystack == PKV_HAY_NEEDLE ? calloc((size_t)n, sizeof *distract) : NULL;
    pkv_byte_span *sents = NULL;
    pkv_item_builder b = {0};
    int rc = -1;
    if (!keys || !needles || !order || !pos || !qidx || (t->haystack == PKV_HAY_NEEDLE && !distract)) {
        pkv_fail(err, PKV_ERR_NOMEM, "out of memory building %s", t->name);
        goto out;
    }
    for (int i = 0; i < nk; i++) {
        do pkv_item_rand_text(rng, t->key, keys[i], PKV_ITEM_KEY_LEN);
        while (pkv_item_key_taken(keys, i, keys[i]));
        for (int j = 0; j < nv; j++) {
            needle *nd = &needles[i * nv + j];
            memcpy(nd->key, keys[i], PKV_ITEM_KEY_LEN);
            pkv_item_rand_text(rng, t->value, nd->value, PKV_ITEM_KEY_LEN);
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
            do pkv_item_rand_text(rng, t->key, distract[i].key, PKV_ITEM_KEY_LEN);
            while (pkv_item_key_taken(keys, nk, distract[i].key));
            pkv_item_rand_text(rng, t->value, distract[i].value, PKV_ITEM_KEY_LEN);
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
        qsort(pos, (size_t)n_needles, sizeof *pos, pkv_item_cmp_int_asc);
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
            qsort(pos, (size_t)n_needles, sizeof *pos, pkv_item_cmp_int_desc);
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
                pkv_sbuf_puts(&b.context, pkv_item_noise_line);
            else
                write_needle(&b, type_plural, &distract[line], false);
        }
    }
    pkv_sbuf_puts(&b.context, "\n");

    /* the queried keys and their values (the gold), in query order; the
     * multi-question task draws one key per question at once and asks
     * this item's (docs/evaluation.md §2.5) */
    if (t->n_questions > 1) {
        int asked[PKV_EVAL_MAX_QUESTIONS];
        if (t->n_queries != 1 || t->n_questions > nk) {
            pkv_fail(err, PKV_ERR_INTERNAL, "%s: %d questions of one key each need as many keys", t->name,
                     t->n_questions);
            goto out;
        }
        pkv_rng_distinct(rng, nk, t->n_questions, asked);
        qidx[0] = asked[spec->question];
    } else {
        pkv_rng_distinct(rng, nk, t->n_queries, qidx);
    }
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
            pkv_item_add_gold(&b, v);
            int k = i * nv + j, total = t->n_queries * nv;
            if (k > 0) pkv_sbuf_puts(&b.reference, k == total - 1 ? (total > 2 ? ", and " : " and ") : ", ");
            pkv_sbuf_puts(&b.reference, v);
        }
    pkv_sbuf_puts(&b.reference, ".");
    rc = pkv_item_finish(&b, t->grid ? spec->depth : -1, n, 0, out, err);
out:
    if (rc) pkv_item_builder_free(&b);
    free(keys);
    free(needles);
    free(order);
    free(pos);
    free(qidx);
    free(distract);
    free(sents);
    return rc;
}

/* ---------------------------------------------------------------- NIAH-classic (§2.2 story-book) */

/*
 * No random draws: sample s reads the prose corpus of seed PKV_PROSE_SEED + s,
 * so repeats of a cell differ. The needle goes before sentence
 * floor(n_sents * depth / 100).
 */
int pkv_eval_build_classic(const pkv_eval_spec *spec, int n, pkv_eval_item *out, pkv_error *err) {
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
    pkv_item_builder b = {0};
    pkv_sbuf_puts(&b.context, "This is a very long story book: <book> ");
    for (int s = 0; s <= n_sents; s++) {
        if (s == at) {
            if (s > 0) pkv_sbuf_puts(&b.context, " ");
            pkv_item_add_needle(&b, pkv_classic_needle);
        }
        if (s == n_sents) break;
        if (s > 0 || at == 0) pkv_sbuf_puts(&b.context, " ");
        pkv_sbuf_add(&b.context, text + sents[s].begin, (size_t)(sents[s].end - sents[s].begin));
    }
    pkv_sbuf_puts(&b.context, " </book>.\n");
    pkv_sbuf_puts(&b.question,
                  " Based on the content of the book, Question: What is the best thing to do in San Francisco?\n");
    pkv_sbuf_puts(&b.prefix, "Answer:");
    pkv_item_add_gold(&b, pkv_classic_needle);
    pkv_sbuf_printf(&b.reference, " %s", pkv_classic_needle);
    free(text);
    free(sents);
    return pkv_item_finish(&b, spec->depth, n, 0, out, err);
}
