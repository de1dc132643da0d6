/* Summary tables, CSV files and SVG plots of a results.jsonl (report.h). */
#include "eval/report.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/error.h"
#include "eval/json.h"
#include "eval/tasks.h"
#include "eval/text.h"

/* ---------------------------------------------------------------- rows */

typedef struct {
    char task[48], mode[24], config[48], press[32];
    int length, budget;
    double ratio, depth;
    bool grid;
    double score, needle_kept, agree, kl, nll_diff, kept_rows, L, cache, cache_full;
    double prefill_s, copy_s, press_s, question_s, decode_s, decode_steps;
} row;

typedef struct {
    row *rows;
    int n, cap;
    /* distinct values in order of first appearance */
    char (*modes)[24];
    int n_modes;
    int *configs; /* index of the first row of each config */
    int n_configs;
    char (*tasks)[48];
    int n_tasks;
    int *lengths;
    int n_lengths;
} table;

static double num_or_nan(const pkv_json *obj, const char *key) { return pkv_json_get_num(obj, key, NAN); }

static int parse_row(const pkv_json *j, row *r) {
    memset(r, 0, sizeof *r);
    const char *task = pkv_json_get_str(j, "task", NULL), *mode = pkv_json_get_str(j, "mode", NULL);
    const char *config = pkv_json_get_str(j, "config", NULL), *press = pkv_json_get_str(j, "press", NULL);
    if (!task || !mode || !config || !press) return -1;
    snprintf(r->task, sizeof r->task, "%s", task);
    snprintf(r->mode, sizeof r->mode, "%s", mode);
    snprintf(r->config, sizeof r->config, "%s", config);
    snprintf(r->press, sizeof r->press, "%s", press);
    const pkv_eval_task *t = pkv_eval_task_find(task);
    r->grid = t && t->grid;
    r->length = (int)pkv_json_get_num(j, "length", 0);
    r->budget = (int)pkv_json_get_num(j, "budget", 0);
    r->ratio = pkv_json_get_num(j, "ratio", 0);
    r->depth = num_or_nan(j, "depth");
    r->score = num_or_nan(j, "score");
    r->needle_kept = num_or_nan(j, "needle_kept");
    r->agree = num_or_nan(j, "agree_top1");
    r->kl = num_or_nan(j, "kl");
    r->nll_diff = num_or_nan(j, "nll_diff");
    r->kept_rows = num_or_nan(j, "kept_rows");
    r->L = num_or_nan(j, "L");
    r->cache = num_or_nan(j, "cache_bytes");
    r->cache_full = num_or_nan(j, "cache_bytes_full");
    const pkv_json *t_obj = pkv_json_get(j, "time");
    r->prefill_s = num_or_nan(t_obj, "prefill_s");
    r->copy_s = num_or_nan(t_obj, "copy_s");
    r->press_s = num_or_nan(t_obj, "press_s");
    r->question_s = num_or_nan(t_obj, "question_s");
    r->decode_s = num_or_nan(t_obj, "decode_s");
    r->decode_steps = num_or_nan(t_obj, "decode_steps");
    return 0;
}

static void table_free(table *t) {
    free(t->rows);
    free(t->modes);
    free(t->configs);
    free(t->tasks);
    free(t->lengths);
    memset(t, 0, sizeof *t);
}

static int index_values(table *t) {
    t->modes = calloc((size_t)t->n + 1, sizeof *t->modes);
    t->configs = calloc((size_t)t->n + 1, sizeof *t->configs);
    t->tasks = calloc((size_t)t->n + 1, sizeof *t->tasks);
    t->lengths = calloc((size_t)t->n + 1, sizeof *t->lengths);
    if (!t->modes || !t->configs || !t->tasks || !t->lengths) return -1;
    for (int i = 0; i < t->n; i++) {
        const row *r = &t->rows[i];
        int k;
        for (k = 0; k < t->n_modes && strcmp(t->modes[k], r->mode); k++) {}
        if (k == t->n_modes) snprintf(t->modes[t->n_modes++], sizeof t->modes[0], "%s", r->mode);
        for (k = 0; k < t->n_configs && strcmp(t->rows[t->configs[k]].config, r->config); k++) {}
        if (k == t->n_configs) t->configs[t->n_configs++] = i;
        for (k = 0; k < t->n_tasks && strcmp(t->tasks[k], r->task); k++) {}
        if (k == t->n_tasks) snprintf(t->tasks[t->n_tasks++], sizeof t->tasks[0], "%s", r->task);
        if (!r->grid) {
            for (k = 0; k < t->n_lengths && t->lengths[k] != r->length; k++) {}
            if (k == t->n_lengths) t->lengths[t->n_lengths++] = r->length;
        }
    }
    /* the full cache first, then as found */
    for (int k = 1; k < t->n_configs; k++)
        if (!strcmp(t->rows[t->configs[k]].config, "full")) {
            int f = t->configs[k];
            memmove(t->configs + 1, t->configs, (size_t)k * sizeof *t->configs);
            t->configs[0] = f;
        }
    return 0;
}

static int load_rows(const char *path, table *t, pkv_error *err) {
    memset(t, 0, sizeof *t);
    FILE *f = fopen(path, "rb");
    if (!f) return pkv_fail(err, PKV_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int rc = 0;
    while ((len = getline(&line, &cap, f)) > 0) {
        if (line[len - 1] != '\n') break; /* a partial last line does not count */
        pkv_json *j = pkv_json_parse(line, (size_t)len);
        row r;
        if (j && parse_row(j, &r) == 0) {
            if (t->n == t->cap) {
                int c = t->cap ? 2 * t->cap : 1024;
                row *g = realloc(t->rows, (size_t)c * sizeof *g);
                if (!g) {
                    pkv_json_free(j);
                    rc = pkv_fail(err, PKV_ERR_NOMEM, "out of memory reading %s", path);
                    break;
                }
                t->rows = g;
                t->cap = c;
            }
            t->rows[t->n++] = r;
        }
        pkv_json_free(j);
    }
    free(line);
    fclose(f);
    if (rc == 0 && index_values(t)) rc = pkv_fail(err, PKV_ERR_NOMEM, "out of memory");
    return rc;
}

/* ---------------------------------------------------------------- aggregation */

typedef struct {
    int n;
    double score, needle_kept, agree, kl, nll_diff, kept_rows, L, cache, cache_full;
    int n_needle, n_agree, n_kl, n_nll;
    double prefill_s, copy_s, press_s, question_s, decode_s, decode_steps;
} agg;

/* Means over rows of (mode, config) and optionally task (NULL: every task,
 * grid tasks included unless no_grid), length (<= 0: all). */
static agg aggregate(const table *t, const char *mode, const char *config, const char *task, int length, bool no_grid) {
    agg a = {0};
    for (int i = 0; i < t->n; i++) {
        const row *r = &t->rows[i];
        if (strcmp(r->mode, mode) || strcmp(r->config, config)) continue;
        if (task && strcmp(r->task, task)) continue;
        if (!task && no_grid && r->grid) continue;
        if (length > 0 && r->length != length) continue;
        a.n++;
        a.score += r->score;
        if (isfinite(r->needle_kept)) a.needle_kept += r->needle_kept, a.n_needle++;
        if (isfinite(r->agree)) a.agree += r->agree, a.n_agree++;
        if (isfinite(r->kl)) a.kl += r->kl, a.n_kl++;
        if (isfinite(r->nll_diff)) a.nll_diff += r->nll_diff, a.n_nll++;
        a.kept_rows += r->kept_rows;
        a.L += r->L;
        a.cache += r->cache;
        a.cache_full += r->cache_full;
        a.prefill_s += isfinite(r->prefill_s) ? r->prefill_s : 0;
        a.copy_s += isfinite(r->copy_s) ? r->copy_s : 0;
        a.press_s += isfinite(r->press_s) ? r->press_s : 0;
        a.question_s += isfinite(r->question_s) ? r->question_s : 0;
        a.decode_s += isfinite(r->decode_s) ? r->decode_s : 0;
        a.decode_steps += isfinite(r->decode_steps) ? r->decode_steps : 0;
    }
    if (a.n == 0) {
        a.score = NAN;
        return a;
    }
    a.score /= a.n;
    a.needle_kept = a.n_needle ? a.needle_kept / a.n_needle : NAN;
    a.agree = a.n_agree ? a.agree / a.n_agree : NAN;
    a.kl = a.n_kl ? a.kl / a.n_kl : NAN;
    a.nll_diff = a.n_nll ? a.nll_diff / a.n_nll : NAN;
    a.kept_rows /= a.n;
    a.L /= a.n;
    a.cache /= a.n;
    a.cache_full /= a.n;
    return a;
}

/* Unweighted mean over tasks of the per-task mean score (RULER's headline). */
static double task_average(const table *t, const char *mode, const char *config, int length) {
    double sum = 0;
    int n = 0;
    for (int k = 0; k < t->n_tasks; k++) {
        agg a = aggregate(t, mode, config, t->tasks[k], length, false);
        if (a.n) sum += a.score, n++;
    }
    return n ? sum / n : NAN;
}

/* Mean over tasks where the full cache scores >= 50 of score / full score. */
static double relative_retention(const table *t, const char *mode, const char *config, int *n_tasks) {
    double sum = 0;
    int n = 0;
    for (int k = 0; k < t->n_tasks; k++) {
        agg f = aggregate(t, mode, "full", t->tasks[k], 0, false);
        agg a = aggregate(t, mode, config, t->tasks[k], 0, false);
        if (!f.n || !a.n || !(f.score >= 50.0)) continue;
        sum += a.score / f.score;
        n++;
    }
    *n_tasks = n;
    return n ? 100.0 * sum / n : NAN;
}

/* ---------------------------------------------------------------- output helpers */

static void fmt(pkv_sbuf *b, const char *f, double v) {
    if (isfinite(v))
        pkv_sbuf_printf(b, f, v);
    else
        pkv_sbuf_puts(b, "–");
}

static void csv_num(pkv_sbuf *b, const char *f, double v) {
    pkv_sbuf_puts(b, ",");
    if (isfinite(v)) pkv_sbuf_printf(b, f, v);
}

static int write_file(const char *dir, const char *name, pkv_sbuf *b, pkv_error *err) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (b->failed) return pkv_fail(err, PKV_ERR_NOMEM, "out of memory writing %s", path);
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f) return pkv_fail(err, PKV_ERR_IO, "%s: cannot create: %s", tmp, strerror(errno));
    size_t n = b->len ? fwrite(b->data, 1, b->len, f) : 0;
    int bad = n != b->len || fclose(f) != 0;
    if (bad || rename(tmp, path)) {
        remove(tmp);
        return pkv_fail(err, PKV_ERR_IO, "%s: cannot write", path);
    }
    return 0;
}

static const row *config_row(const table *t, int k) { return &t->rows[t->configs[k]]; }

/* ---------------------------------------------------------------- summary.md */

static void markdown_mode(pkv_sbuf *b, const table *t, const char *mode) {
    pkv_sbuf_printf(b, "\n## %s\n\n", mode);
    pkv_sbuf_puts(b, "Score (0-100, mean over samples and lengths; grid tasks over their cells).\n\n| config |");
    for (int k = 0; k < t->n_tasks; k++) pkv_sbuf_printf(b, " %s |", t->tasks[k]);
    pkv_sbuf_puts(b, " avg | rel. retention % | needle kept % | top-1 agree % | KL | ΔNLL | kept rows / L | cache MiB "
                     "(% of full) |\n|---|");
    for (int k = 0; k < t->n_tasks + 8; k++) pkv_sbuf_puts(b, "---:|");
    pkv_sbuf_puts(b, "\n");
    for (int c = 0; c < t->n_configs; c++) {
        const char *cfg = config_row(t, c)->config;
        agg all = aggregate(t, mode, cfg, NULL, 0, false);
        if (!all.n) continue;
        pkv_sbuf_printf(b, "| %s |", cfg);
        for (int k = 0; k < t->n_tasks; k++) {
            agg a = aggregate(t, mode, cfg, t->tasks[k], 0, false);
            pkv_sbuf_puts(b, " ");
            fmt(b, "%.1f", a.n ? a.score : NAN);
            pkv_sbuf_puts(b, " |");
        }
        int n_rel;
        pkv_sbuf_puts(b, " **");
        fmt(b, "%.1f", task_average(t, mode, cfg, 0));
        pkv_sbuf_puts(b, "** | ");
        fmt(b, "%.1f", relative_retention(t, mode, cfg, &n_rel));
        pkv_sbuf_puts(b, " | ");
        fmt(b, "%.1f", 100.0 * all.needle_kept);
        pkv_sbuf_puts(b, " | ");
        fmt(b, "%.1f", 100.0 * all.agree);
        pkv_sbuf_puts(b, " | ");
        fmt(b, "%.3f", all.kl);
        pkv_sbuf_puts(b, " | ");
        fmt(b, "%+.3f", all.nll_diff);
        /* measured bytes against the full cache's measured bytes on the same rows of work */
        agg full = aggregate(t, mode, "full", NULL, 0, false);
        pkv_sbuf_printf(b, " | %.0f / %.0f | %.2f (", all.kept_rows, all.L, all.cache / 1048576.0);
        fmt(b, "%.0f%%", full.n && full.cache > 0 ? 100.0 * all.cache / full.cache : NAN);
        pkv_sbuf_puts(b, ") |\n");
    }
    /* the tasks a small model fails even with the full cache (§5.2) */
    pkv_sbuf lows = {0};
    for (int k = 0; k < t->n_tasks; k++) {
        agg f = aggregate(t, mode, "full", t->tasks[k], 0, false);
        if (f.n && f.score < 50.0) pkv_sbuf_printf(&lows, "%s%s (%.1f)", lows.len ? ", " : "", t->tasks[k], f.score);
    }
    if (lows.len)
        pkv_sbuf_printf(b, "\nFull cache under 50 (left out of the relative retention): %s.\n", lows.data);
    else
        pkv_sbuf_puts(b, "\nThe full cache scores at least 50 on every task.\n");
    pkv_sbuf_free(&lows);

    if (t->n_lengths > 1) {
        pkv_sbuf_puts(b, "\nAverage score by length (RULER-style tasks only).\n\n| config |");
        for (int l = 0; l < t->n_lengths; l++) pkv_sbuf_printf(b, " %d |", t->lengths[l]);
        pkv_sbuf_puts(b, "\n|---|");
        for (int l = 0; l < t->n_lengths; l++) pkv_sbuf_puts(b, "---:|");
        pkv_sbuf_puts(b, "\n");
        for (int c = 0; c < t->n_configs; c++) {
            const char *cfg = config_row(t, c)->config;
            if (!aggregate(t, mode, cfg, NULL, 0, true).n) continue;
            pkv_sbuf_printf(b, "| %s |", cfg);
            for (int l = 0; l < t->n_lengths; l++) {
                /* mean over the non-grid tasks at this length */
                double sum = 0;
                int n = 0;
                for (int k = 0; k < t->n_tasks; k++) {
                    const pkv_eval_task *task = pkv_eval_task_find(t->tasks[k]);
                    if (task && task->grid) continue;
                    agg a = aggregate(t, mode, cfg, t->tasks[k], t->lengths[l], false);
                    if (a.n) sum += a.score, n++;
                }
                pkv_sbuf_puts(b, " ");
                fmt(b, "%.1f", n ? sum / n : NAN);
                pkv_sbuf_puts(b, " |");
            }
            pkv_sbuf_puts(b, "\n");
        }
    }

    pkv_sbuf_puts(
        b, "\nCosts (means per result line; machine load makes them noisy).\n\n"
           "| config | rows | prefill s (shared) | copy + press ms | press ms | question ms | decode ms/token |\n"
           "|---|---:|---:|---:|---:|---:|---:|\n");
    for (int c = 0; c < t->n_configs; c++) {
        const char *cfg = config_row(t, c)->config;
        agg a = aggregate(t, mode, cfg, NULL, 0, false);
        if (!a.n) continue;
        pkv_sbuf_printf(b, "| %s | %d | %.2f | %.1f | %.1f | %.1f | ", cfg, a.n, a.prefill_s / a.n,
                        1e3 * a.copy_s / a.n, 1e3 * a.press_s / a.n, 1e3 * a.question_s / a.n);
        fmt(b, "%.1f", a.decode_steps > 0 ? 1e3 * a.decode_s / a.decode_steps : NAN);
        pkv_sbuf_puts(b, " |\n");
    }
}

static int write_markdown(const table *t, const pkv_eval_report_opts *o, pkv_error *err) {
    pkv_sbuf b = {0};
    pkv_sbuf_printf(&b, "# promptkv eval: %s\n\n", o->model_name);
    if (o->command) pkv_sbuf_printf(&b, "Command:\n\n```\n%s\n```\n\n", o->command);
    pkv_sbuf_printf(&b, "%d result lines; %d configs; tasks:", t->n, t->n_configs);
    for (int k = 0; k < t->n_tasks; k++) pkv_sbuf_printf(&b, " %s", t->tasks[k]);
    pkv_sbuf_puts(&b,
                  ".\n\nPrompts are RULER-equivalent in construction and distribution, not byte-identical "
                  "(own PRNG, word lists and essay-synthetic prose). \"avg\" is the unweighted mean over the "
                  "tasks shown (an offline RULER-synth subset plus extras, not RULER). \"rel. retention\" is the "
                  "mean of score / full-cache score over the tasks where the full cache scores at least 50. "
                  "Needle kept: fraction of the answer's token positions still in the cache, over full-attention "
                  "layers and heads. Top-1 agree / KL: the first generated tokens, teacher-forced on the full "
                  "cache's. ΔNLL: mean per-token NLL of the gold continuation, this config minus the full cache.\n");
    for (int m = 0; m < t->n_modes; m++) markdown_mode(&b, t, t->modes[m]);
    int rc = write_file(o->out_dir, "summary.md", &b, err);
    pkv_sbuf_free(&b);
    return rc;
}

/* ---------------------------------------------------------------- CSV */

static void csv_line(pkv_sbuf *b, const table *t, const char *mode, const row *c, const char *task, int length) {
    agg a = aggregate(t, mode, c->config, task, length, false);
    if (!a.n) return;
    agg f = aggregate(t, mode, "full", task, length, false);
    if (length > 0)
        pkv_sbuf_printf(b, "%s,%s,%d,%s,%s,%d,%g,%d", mode, task, length, c->config, c->press, c->budget, c->ratio,
                        a.n);
    else
        pkv_sbuf_printf(b, "%s,%s,all,%s,%s,%d,%g,%d", mode, task, c->config, c->press, c->budget, c->ratio, a.n);
    csv_num(b, "%.4f", a.score);
    csv_num(b, "%.4f", f.n ? f.score : NAN);
    csv_num(b, "%.4f", f.n && f.score > 0 ? 100.0 * a.score / f.score : NAN);
    csv_num(b, "%.6f", a.needle_kept);
    csv_num(b, "%.6f", a.agree);
    csv_num(b, "%.6f", a.kl);
    csv_num(b, "%.6f", a.nll_diff);
    csv_num(b, "%.2f", a.kept_rows);
    csv_num(b, "%.2f", a.L);
    csv_num(b, "%.0f", a.cache);
    csv_num(b, "%.0f", a.cache_full);
    pkv_sbuf_puts(b, "\n");
}

static int write_csvs(const table *t, const pkv_eval_report_opts *o, pkv_error *err) {
    pkv_sbuf b = {0}, tb = {0};
    pkv_sbuf_puts(&b, "mode,task,length,config,press,budget,ratio,n,score,full_score,relative,needle_kept,agree_top1,"
                      "kl,nll_diff,kept_rows,L,cache_bytes,cache_bytes_full\n");
    pkv_sbuf_puts(&tb,
                  "mode,config,press,budget,ratio,rows,prefill_s,copy_ms,press_ms,question_ms,decode_ms_per_token\n");
    for (int m = 0; m < t->n_modes; m++)
        for (int c = 0; c < t->n_configs; c++) {
            const row *cr = config_row(t, c);
            for (int k = 0; k < t->n_tasks; k++) {
                csv_line(&b, t, t->modes[m], cr, t->tasks[k], 0);
                for (int l = 0; l < t->n_lengths; l++) csv_line(&b, t, t->modes[m], cr, t->tasks[k], t->lengths[l]);
            }
            agg a = aggregate(t, t->modes[m], cr->config, NULL, 0, false);
            if (!a.n) continue;
            pkv_sbuf_printf(&tb, "%s,%s,%s,%d,%g,%d,%.4f,%.3f,%.3f,%.3f", t->modes[m], cr->config, cr->press,
                            cr->budget, cr->ratio, a.n, a.prefill_s / a.n, 1e3 * a.copy_s / a.n, 1e3 * a.press_s / a.n,
                            1e3 * a.question_s / a.n);
            csv_num(&tb, "%.3f", a.decode_steps > 0 ? 1e3 * a.decode_s / a.decode_steps : NAN);
            pkv_sbuf_puts(&tb, "\n");
        }
    int rc = write_file(o->out_dir, "summary.csv", &b, err);
    if (rc == 0) rc = write_file(o->out_dir, "timing.csv", &tb, err);
    pkv_sbuf_free(&b);
    pkv_sbuf_free(&tb);
    return rc;
}

/* distinct sorted values of grid rows matching (mode?, task?) */
static int grid_values(const table *t, const char *task, bool depths, double *out, int max) {
    int n = 0;
    for (int i = 0; i < t->n; i++) {
        const row *r = &t->rows[i];
        if (!r->grid || (task && strcmp(r->task, task))) continue;
        double v = depths ? r->depth : r->length;
        int k;
        for (k = 0; k < n && out[k] != v; k++) {}
        if (k == n && n < max) out[n++] = v;
    }
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && out[j - 1] > out[j]; j--) {
            double x = out[j];
            out[j] = out[j - 1];
            out[j - 1] = x;
        }
    return n;
}

static agg grid_cell(const table *t, const char *mode, const char *config, const char *task, int length, double depth) {
    agg a = {0};
    for (int i = 0; i < t->n; i++) {
        const row *r = &t->rows[i];
        if (!r->grid || strcmp(r->mode, mode) || strcmp(r->config, config) || strcmp(r->task, task)) continue;
        if (r->length != length || r->depth != depth) continue;
        a.n++;
        a.score += r->score;
    }
    a.score = a.n ? a.score / a.n : NAN;
    return a;
}

static void budget_name(const row *c, char *buf, size_t len) {
    if (!strcmp(c->press, "none"))
        snprintf(buf, len, "full");
    else if (c->budget > 0)
        snprintf(buf, len, "%d", c->budget);
    else
        snprintf(buf, len, "r%g", c->ratio);
}

/* niah_<model>_<method>_<budget>.csv (§2.3), one per config that has grid rows */
static int write_niah_csvs(const table *t, const pkv_eval_report_opts *o, pkv_error *err) {
    double lengths[64], depths[64];
    for (int c = 0; c < t->n_configs; c++) {
        const row *cr = config_row(t, c);
        pkv_sbuf b = {0};
        pkv_sbuf_puts(&b, "context_length,depth_percent,score,n_samples,method,budget,ratio,mode,task\n");
        int lines = 0;
        for (int m = 0; m < t->n_modes; m++)
            for (int k = 0; k < t->n_tasks; k++) {
                int nl = grid_values(t, t->tasks[k], false, lengths, 64);
                int nd = grid_values(t, t->tasks[k], true, depths, 64);
                for (int l = 0; l < nl; l++)
                    for (int d = 0; d < nd; d++) {
                        agg a = grid_cell(t, t->modes[m], cr->config, t->tasks[k], (int)lengths[l], depths[d]);
                        if (!a.n) continue;
                        pkv_sbuf_printf(&b, "%d,%g,%.4f,%d,%s,%d,%g,%s,%s\n", (int)lengths[l], depths[d], a.score, a.n,
                                        !strcmp(cr->press, "none") ? "full" : cr->press, cr->budget, cr->ratio,
                                        t->modes[m], t->tasks[k]);
                        lines++;
                    }
            }
        int rc = 0;
        if (lines) {
            char bud[32], name[256];
            budget_name(cr, bud, sizeof bud);
            snprintf(name, sizeof name, "niah_%s_%s_%s.csv", o->model_name,
                     !strcmp(cr->press, "none") ? "full" : cr->press, bud);
            rc = write_file(o->out_dir, name, &b, err);
        }
        pkv_sbuf_free(&b);
        if (rc) return rc;
    }
    return 0;
}

/* ---------------------------------------------------------------- SVG */

void pkv_eval_heat_color(double score, char out[8]) {
    static const int STOPS[3][3] = {{0xF0, 0x49, 0x6E}, {0xEB, 0xB8, 0x39}, {0x0C, 0xD7, 0x9F}};
    double x = isfinite(score) ? score : 0.0;
    if (x < 0) x = 0;
    if (x > 100) x = 100;
    int seg = x < 50 ? 0 : 1;
    double f = (x - 50.0 * seg) / 50.0;
    int rgb[3];
    for (int i = 0; i < 3; i++) rgb[i] = (int)lround(STOPS[seg][i] + f * (STOPS[seg + 1][i] - STOPS[seg][i]));
    snprintf(out, 8, "#%02X%02X%02X", rgb[0], rgb[1], rgb[2]);
}

static const char *press_color(const char *press, int index) {
    static const struct {
        const char *name, *color;
    } KNOWN[] = {{"snapkv", "#1f77b4"}, {"protokv", "#e377c2"}, {"streamingllm", "#ff7f0e"}, {"h2o", "#2ca02c"},
                 {"tova", "#d62728"},   {"knorm", "#9467bd"},   {"random", "#8c564b"}};
    static const char *const OTHER[] = {"#17becf", "#bcbd22", "#7f7f7f", "#393b79"};
    for (size_t i = 0; i < sizeof KNOWN / sizeof KNOWN[0]; i++)
        if (!strcmp(press, KNOWN[i].name)) return KNOWN[i].color;
    return OTHER[index % 4];
}

static void svg_text(pkv_sbuf *b, double x, double y, const char *anchor, int size, const char *text) {
    pkv_sbuf_printf(b, "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"%s\" font-size=\"%d\">", x, y, anchor, size);
    for (const char *p = text; *p; p++) {
        if (*p == '<')
            pkv_sbuf_puts(b, "&lt;");
        else if (*p == '>')
            pkv_sbuf_puts(b, "&gt;");
        else if (*p == '&')
            pkv_sbuf_puts(b, "&amp;");
        else
            pkv_sbuf_add(b, p, 1);
    }
    pkv_sbuf_puts(b, "</text>\n");
}

/* the presses of the table other than none, in order */
static int press_list(const table *t, const char **out, int max) {
    int n = 0;
    for (int c = 0; c < t->n_configs; c++) {
        const char *p = config_row(t, c)->press;
        if (!strcmp(p, "none")) continue;
        int k;
        for (k = 0; k < n && strcmp(out[k], p); k++) {}
        if (k == n && n < max) out[n++] = p;
    }
    return n;
}

/* One panel of the accuracy plot: x = budgets (by_budget) or ratios. */
static void accuracy_panel(pkv_sbuf *b, const table *t, const char *mode, bool by_budget, double x0, double y0,
                           double w, double h, const char **presses, int n_presses) {
    double xs[64];
    int nx = 0;
    for (int c = 0; c < t->n_configs; c++) {
        const row *r = config_row(t, c);
        if (!strcmp(r->press, "none") || (by_budget ? r->budget <= 0 : r->budget > 0)) continue;
        double v = by_budget ? r->budget : r->ratio;
        int k;
        for (k = 0; k < nx && xs[k] != v; k++) {}
        if (k == nx && nx < 64) xs[nx++] = v;
    }
    for (int i = 1; i < nx; i++)
        for (int j = i; j > 0 && xs[j - 1] > xs[j]; j--) {
            double v = xs[j];
            xs[j] = xs[j - 1];
            xs[j - 1] = v;
        }
    pkv_sbuf_printf(b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" stroke=\"#888\"/>\n",
                    x0, y0, w, h);
    svg_text(b, x0 + w / 2, y0 - 8, "middle", 13,
             by_budget ? "by budget (rows kept per head)" : "by ratio (fraction removed)");
    for (int g = 0; g <= 100; g += 20) {
        double y = y0 + h - h * g / 100.0;
        pkv_sbuf_printf(b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n", x0, y, x0 + w,
                        y);
        char lab[8];
        snprintf(lab, sizeof lab, "%d", g);
        svg_text(b, x0 - 5, y + 4, "end", 11, lab);
    }
    if (nx == 0) {
        svg_text(b, x0 + w / 2, y0 + h / 2, "middle", 12, "no configs");
        return;
    }
    double step = w / nx;
    for (int i = 0; i < nx; i++) {
        char lab[32];
        if (by_budget)
            snprintf(lab, sizeof lab, "%g", xs[i]);
        else
            snprintf(lab, sizeof lab, "%g", xs[i]);
        svg_text(b, x0 + step * (i + 0.5), y0 + h + 16, "middle", 11, lab);
    }
    /* the full cache: a dashed line */
    double full = task_average(t, mode, "full", 0);
    if (isfinite(full)) {
        double y = y0 + h - h * full / 100.0;
        pkv_sbuf_printf(
            b, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#333\" stroke-dasharray=\"6 4\"/>\n", x0,
            y, x0 + w, y);
    }
    for (int p = 0; p < n_presses; p++) {
        pkv_sbuf pts = {0};
        for (int i = 0; i < nx; i++)
            for (int c = 0; c < t->n_configs; c++) {
                const row *r = config_row(t, c);
                if (strcmp(r->press, presses[p]) ||
                    (by_budget ? r->budget != xs[i] : (r->budget > 0 || r->ratio != xs[i])))
                    continue;
                double v = task_average(t, mode, r->config, 0);
                if (!isfinite(v)) continue;
                double x = x0 + step * (i + 0.5), y = y0 + h - h * v / 100.0;
                pkv_sbuf_printf(&pts, "%.1f,%.1f ", x, y);
                pkv_sbuf_printf(b, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n", x, y,
                                press_color(presses[p], p));
            }
        if (pts.len)
            pkv_sbuf_printf(b, "<polyline points=\"%s\" fill=\"none\" stroke=\"%s\" stroke-width=\"2\"/>\n", pts.data,
                            press_color(presses[p], p));
        pkv_sbuf_free(&pts);
    }
}

static int write_accuracy_svg(const table *t, const pkv_eval_report_opts *o, const char *mode, pkv_error *err) {
    const char *presses[32];
    int np = press_list(t, presses, 32);
    double W = 980, H = 400;
    pkv_sbuf b = {0};
    pkv_sbuf_printf(
        &b,
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" font-family=\"sans-serif\">\n"
        "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
        W, H);
    char title[256];
    snprintf(title, sizeof title, "%s: average score vs compression (%s)", o->model_name, mode);
    svg_text(&b, W / 2, 22, "middle", 15, title);
    accuracy_panel(&b, t, mode, true, 60, 60, 340, 280, presses, np);
    accuracy_panel(&b, t, mode, false, 460, 60, 340, 280, presses, np);
    svg_text(&b, 20, 200, "middle", 12, "score");
    /* legend */
    double lx = 830, ly = 70;
    pkv_sbuf_printf(
        &b, "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"#333\" stroke-dasharray=\"6 4\"/>\n", lx,
        ly, lx + 24, ly);
    svg_text(&b, lx + 30, ly + 4, "start", 12, "full cache");
    for (int p = 0; p < np; p++) {
        double y = ly + 20 * (p + 1);
        pkv_sbuf_printf(&b,
                        "<line x1=\"%.0f\" y1=\"%.0f\" x2=\"%.0f\" y2=\"%.0f\" stroke=\"%s\" stroke-width=\"2\"/>\n",
                        lx, y, lx + 24, y, press_color(presses[p], p));
        svg_text(&b, lx + 30, y + 4, "start", 12, presses[p]);
    }
    pkv_sbuf_puts(&b, "</svg>\n");
    char name[128];
    snprintf(name, sizeof name, "accuracy_%s.svg", mode);
    int rc = write_file(o->out_dir, name, &b, err);
    pkv_sbuf_free(&b);
    return rc;
}

/* Heatmaps of a grid task in a mode: one panel per config; rows of panels =
 * presses (the full cache first), columns = budgets and ratios. */
static int write_heatmap_svg(const table *t, const pkv_eval_report_opts *o, const char *mode, const char *task,
                             pkv_error *err) {
    double lengths[64], depths[64];
    int nl = grid_values(t, task, false, lengths, 64), nd = grid_values(t, task, true, depths, 64);
    if (!nl || !nd) return 0;
    const char *presses[33];
    presses[0] = "none";
    int np = 1 + press_list(t, presses + 1, 32);
    int per_row[33] = {0}, max_cols = 1;
    for (int p = 0; p < np; p++) {
        for (int c = 0; c < t->n_configs; c++) per_row[p] += !strcmp(config_row(t, c)->press, presses[p]);
        if (per_row[p] > max_cols) max_cols = per_row[p];
    }
    double cw = 34, ch = 20, pad = 60;
    double pw = 50 + nl * cw + 50, ph = 40 + nd * ch + 30;
    double W = pad + max_cols * pw, H = 90 + np * ph + 60;
    if (W < 720) W = 720;
    pkv_sbuf b = {0};
    pkv_sbuf_printf(&b,
                    "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
                    "font-family=\"sans-serif\">\n<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n",
                    W, H);
    char title[256];
    snprintf(title, sizeof title, "%s: %s (%s)", o->model_name, task, mode);
    svg_text(&b, W / 2, 24, "middle", 15, title);
    svg_text(&b, W / 2, 44, "middle", 12,
             "score 0-100 per cell; rows: depth of the needle (%), columns: token limit; one panel per config");
    for (int p = 0; p < np; p++) {
        int col = 0;
        for (int c = 0; c < t->n_configs; c++) {
            const row *cr = config_row(t, c);
            if (strcmp(cr->press, presses[p])) continue;
            double px = pad + col * pw, py = 80 + p * ph;
            col++;
            svg_text(&b, px + 50 + nl * cw / 2, py + 14, "middle", 12, cr->config);
            for (int d = 0; d < nd; d++) {
                char lab[16];
                snprintf(lab, sizeof lab, "%g", depths[d]);
                svg_text(&b, px + 45, py + 24 + d * ch + 14, "end", 10, lab);
                for (int l = 0; l < nl; l++) {
                    agg a = grid_cell(t, mode, cr->config, task, (int)lengths[l], depths[d]);
                    char color[8];
                    pkv_eval_heat_color(a.score, color);
                    double x = px + 50 + l * cw, y = py + 24 + d * ch;
                    pkv_sbuf_printf(
                        &b,
                        "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\" stroke=\"white\"/>\n",
                        x, y, cw, ch, a.n ? color : "#dddddd");
                    if (a.n) {
                        char v[16];
                        snprintf(v, sizeof v, "%.0f", a.score);
                        svg_text(&b, x + cw / 2, y + 14, "middle", 10, v);
                    }
                }
            }
            for (int l = 0; l < nl; l++) {
                char lab[16];
                snprintf(lab, sizeof lab, "%g", lengths[l]);
                svg_text(&b, px + 50 + l * cw + cw / 2, py + 24 + nd * ch + 13, "middle", 9, lab);
            }
        }
    }
    /* colour bar */
    double bx = pad, by = H - 40;
    for (int i = 0; i < 50; i++) {
        char color[8];
        pkv_eval_heat_color(i * 2.0 + 1.0, color);
        pkv_sbuf_printf(&b, "<rect x=\"%.1f\" y=\"%.1f\" width=\"4\" height=\"12\" fill=\"%s\"/>\n", bx + i * 4, by,
                        color);
    }
    svg_text(&b, bx, by + 26, "start", 10, "0");
    svg_text(&b, bx + 100, by + 26, "middle", 10, "50");
    svg_text(&b, bx + 200, by + 26, "end", 10, "100");
    pkv_sbuf_puts(&b, "</svg>\n");
    char name[160];
    snprintf(name, sizeof name, "heatmap_%s_%s.svg", task, mode);
    int rc = write_file(o->out_dir, name, &b, err);
    pkv_sbuf_free(&b);
    return rc;
}

int pkv_eval_report(const pkv_eval_report_opts *o, pkv_error *err) {
    pkv_error_clear(err);
    table t;
    if (load_rows(o->results_path, &t, err)) {
        table_free(&t);
        return -1;
    }
    int rc = write_markdown(&t, o, err);
    if (rc == 0) rc = write_csvs(&t, o, err);
    if (rc == 0) rc = write_niah_csvs(&t, o, err);
    for (int m = 0; m < t.n_modes && rc == 0; m++) {
        rc = write_accuracy_svg(&t, o, t.modes[m], err);
        for (int k = 0; k < t.n_tasks && rc == 0; k++) {
            const pkv_eval_task *task = pkv_eval_task_find(t.tasks[k]);
            if (task && task->grid) rc = write_heatmap_svg(&t, o, t.modes[m], t.tasks[k], err);
        }
    }
    table_free(&t);
    return rc;
}
