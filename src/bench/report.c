/* Bench reports: a markdown table, CSV, and an SVG plot of decode latency
 * against prompt length. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench/bench.h"

static double mib(uint64_t b) { return b / 1048576.0; }

/* Display width of UTF-8 text (continuation bytes take no column). */
static int display_width(const char *s) {
    int w = 0;
    for (; *s; s++) w += ((unsigned char)*s & 0xc0) != 0x80;
    return w;
}

/* One cell: text padded to width, right- or left-aligned. */
static void cell(FILE *out, const char *text, int width, bool right) {
    int pad = width - display_width(text);
    fputs("| ", out);
    if (right)
        for (int i = 0; i < pad; i++) fputc(' ', out);
    fputs(text, out);
    if (!right)
        for (int i = 0; i < pad; i++) fputc(' ', out);
    fputc(' ', out);
}

enum { N_TABLE_COLS = 12 };
static const struct {
    const char *title;
    int width;
    bool right;
} TABLE_COLS[N_TABLE_COLS] = {
    {"test", 20, false},      {"press", 28, false},           {"threads", 7, true},
    {"t/s", 20, true},        {"t/s min", 9, true},           {"ms/token", 9, true},
    {"prefill s", 10, true},  {"press s (share)", 17, false}, {"cache MiB (full)", 18, false},
    {"peak RSS MiB", 12, true}, {"BW frac", 7, true}, {"BW GB/s", 7, true},
};

void pkv_bench_print_table(FILE *out, const pkv_bench_result *r, int n) {
    for (int c = 0; c < N_TABLE_COLS; c++) cell(out, TABLE_COLS[c].title, TABLE_COLS[c].width, TABLE_COLS[c].right);
    fputs("|\n", out);
    for (int c = 0; c < N_TABLE_COLS; c++) {
        char dashes[64];
        int w = TABLE_COLS[c].width;
        memset(dashes, '-', (size_t)w);
        if (TABLE_COLS[c].right) dashes[w - 1] = ':';
        dashes[w] = '\0';
        cell(out, dashes, w, false);
    }
    fputs("|\n", out);
    for (int i = 0; i < n; i++) {
        const pkv_bench_result *x = &r[i];
        char v[N_TABLE_COLS][64];
        memset(v, 0, sizeof v);
        snprintf(v[0], sizeof v[0], "%s", x->test);
        snprintf(v[1], sizeof v[1], "%s", x->press);
        snprintf(v[2], sizeof v[2], "%d", x->n_threads);
        snprintf(v[3], sizeof v[3], "%.2f ± %.2f", x->tok_per_s.median, x->tok_per_s.stddev);
        snprintf(v[4], sizeof v[4], "%.2f", x->tok_per_s.min);
        snprintf(v[5], sizeof v[5], "%.2f", x->ms_per_token.median);
        bool prefilled = x->kind == PKV_BENCH_PP || x->kind == PKV_BENCH_DEPTH;
        if (prefilled) snprintf(v[6], sizeof v[6], "%.2f", x->prefill_seconds);
        if (strcmp(x->press, "none") && prefilled)
            snprintf(v[7], sizeof v[7], "%.3f (%.1f%%)", x->press_seconds, 100.0 * x->press_share);
        snprintf(v[8], sizeof v[8], "%.1f (%.1f)", mib(x->cache_bytes), mib(x->cache_bytes_full));
        if (x->peak_rss) snprintf(v[9], sizeof v[9], "%.0f", mib(x->peak_rss));
        if (x->bw_fraction > 0) {
            snprintf(v[10], sizeof v[10], "%.2f", x->bw_fraction);
            snprintf(v[11], sizeof v[11], "%.1f", x->mem_bw / 1e9);
        }
        for (int c = 0; c < N_TABLE_COLS; c++) cell(out, v[c], TABLE_COLS[c].width, TABLE_COLS[c].right);
        fputs("|\n", out);
    }
    /* paired streams: what each repetition's two runs give against each other */
    bool paired = false;
    for (int i = 0; i < n; i++) {
        const pkv_bench_result *x = &r[i];
        if (x->paired_ratio.n == 0) continue;
        fprintf(out, "\n%s (%s): %d streams / 1 stream, repetition by repetition: median %.2fx (min %.2fx, max %.2fx, "
                     "%d repetitions)",
                x->test, x->press, x->n_streams, x->paired_ratio.median, x->paired_ratio.min, x->paired_ratio.max,
                x->paired_ratio.n);
        paired = true;
    }
    if (paired) fputc('\n', out);
}

static const char *const CSV_COLUMNS[] = {
    "test", "kind", "press", "n_prompt", "n_gen", "threads", "reps", "tps_median", "tps_min", "tps_max",
    "tps_mean", "tps_stddev", "ms_per_token_median", "ms_per_token_min", "prefill_s", "press_s", "press_share",
    "shared_prefill", "cache_bytes", "cache_bytes_full", "peak_rss_bytes", "decode_bytes_per_token", "bw_fraction",
    "streams", "batched", "mem_bw_bytes_per_s", "paired_ratio_median", "paired_ratio_min", "paired_ratio_max",
};

int pkv_bench_csv_columns(void) { return (int)(sizeof CSV_COLUMNS / sizeof CSV_COLUMNS[0]); }

static const char *kind_name(pkv_bench_kind k) {
    return k == PKV_BENCH_PP ? "pp" : k == PKV_BENCH_TG ? "tg" : k == PKV_BENCH_DEPTH ? "depth" : "streams";
}

/* A CSV field in double quotes, quotes doubled (RFC 4180). */
static void csv_quoted(FILE *out, const char *s) {
    fputc('"', out);
    for (; *s; s++) {
        if (*s == '"') fputc('"', out);
        fputc(*s, out);
    }
    fputc('"', out);
}

void pkv_bench_print_csv(FILE *out, const pkv_bench_result *r, int n) {
    for (int c = 0; c < pkv_bench_csv_columns(); c++) fprintf(out, "%s%s", c ? "," : "", CSV_COLUMNS[c]);
    fputc('\n', out);
    for (int i = 0; i < n; i++) {
        const pkv_bench_result *x = &r[i];
        fprintf(out, "%s,%s,", x->test, kind_name(x->kind));
        csv_quoted(out, x->press);
        fprintf(out, ",%d,%d,%d,%d,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.4f,%.5f,%.5f,%d,%llu,%llu,%llu,%llu,%.4f,%d,%d,%.0f,%.4f,%.4f,%.4f\n",
                x->n_prompt, x->n_gen, x->n_threads, x->reps, x->tok_per_s.median, x->tok_per_s.min,
                x->tok_per_s.max, x->tok_per_s.mean, x->tok_per_s.stddev, x->ms_per_token.median,
                x->ms_per_token.min, x->prefill_seconds, x->press_seconds, x->press_share, x->shared_prefill ? 1 : 0,
                (unsigned long long)x->cache_bytes, (unsigned long long)x->cache_bytes_full,
                (unsigned long long)x->peak_rss, (unsigned long long)x->decode_bytes_per_token, x->bw_fraction,
                x->n_streams, x->batched ? 1 : 0, x->mem_bw, x->paired_ratio.median, x->paired_ratio.min,
                x->paired_ratio.max);
    }
}

/* ---------------------------------------------------------------- SVG */

enum { SVG_W = 760, SVG_H = 460, M_LEFT = 70, M_RIGHT = 30, M_TOP = 50, M_BOTTOM = 60, MAX_LINES = 16 };

static const char *const COLORS[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd",
                                     "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

static void xml_text(FILE *out, const char *s) {
    for (; *s; s++) {
        if (*s == '<') fputs("&lt;", out);
        else if (*s == '>') fputs("&gt;", out);
        else if (*s == '&') fputs("&amp;", out);
        else if (*s == '"') fputs("&quot;", out);
        else fputc(*s, out);
    }
}

/* "1K", "16K", "1.5K", "300" */
static void length_label(int n, char *buf, size_t len) {
    if (n >= 1024 && n % 1024 == 0) snprintf(buf, len, "%dK", n / 1024);
    else if (n >= 1024) snprintf(buf, len, "%.1fK", n / 1024.0);
    else snprintf(buf, len, "%d", n);
}

/* A round step giving about 5 ticks up to max. */
static double nice_step(double max) {
    double raw = max / 5.0, p = pow(10.0, floor(log10(raw)));
    double f = raw / p;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
}

static int cmp_int(const void *a, const void *b) { return *(const int *)a - *(const int *)b; }

int pkv_bench_write_svg(FILE *out, const pkv_bench_result *r, int n, const char *title) {
    /* the presses (lines) and prompt lengths (x ticks) of the depth results */
    const char *lines[MAX_LINES];
    int n_lines = 0, *xs = malloc((size_t)(n > 0 ? n : 1) * sizeof *xs), n_x = 0;
    if (!xs) return 0;
    double y_max = 0.0;
    for (int i = 0; i < n; i++) {
        if (r[i].kind != PKV_BENCH_DEPTH) continue;
        int l = 0;
        while (l < n_lines && strcmp(lines[l], r[i].press)) l++;
        if (l == n_lines && n_lines < MAX_LINES) lines[n_lines++] = r[i].press;
        int k = 0;
        while (k < n_x && xs[k] != r[i].n_prompt) k++;
        if (k == n_x) xs[n_x++] = r[i].n_prompt;
        if (r[i].ms_per_token.median > y_max) y_max = r[i].ms_per_token.median;
    }
    qsort(xs, (size_t)n_x, sizeof *xs, cmp_int);
    double lx0 = n_x ? log2(xs[0]) : 0.0, lx1 = n_x ? log2(xs[n_x - 1]) : 1.0;
    if (lx1 - lx0 < 1e-9) {
        lx0 -= 1.0;
        lx1 += 1.0;
    }
    double step = nice_step(y_max > 0 ? y_max : 1.0), y_top = step * ceil((y_max > 0 ? y_max : 1.0) * 1.05 / step);
    double pw = SVG_W - M_LEFT - M_RIGHT, ph = SVG_H - M_TOP - M_BOTTOM;
#define PX(len) (M_LEFT + (log2(len) - lx0) / (lx1 - lx0) * pw)
#define PY(ms) (M_TOP + ph - (ms) / y_top * ph)
    fprintf(out, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%d\" height=\"%d\" viewBox=\"0 0 %d %d\" "
                 "font-family=\"sans-serif\" font-size=\"12\">\n", SVG_W, SVG_H, SVG_W, SVG_H);
    fprintf(out, "<rect width=\"100%%\" height=\"100%%\" fill=\"white\"/>\n");
    fprintf(out, "<text x=\"%d\" y=\"24\" font-size=\"15\" text-anchor=\"middle\">", SVG_W / 2);
    xml_text(out, title ? title : "decode latency vs prompt length");
    fputs("</text>\n", out);
    /* axes, grid and ticks */
    fprintf(out, "<g stroke=\"#ccc\" stroke-width=\"1\">\n");
    for (double y = 0; y <= y_top + 1e-9; y += step)
        fprintf(out, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>\n", M_LEFT, PY(y), M_LEFT + pw, PY(y));
    fputs("</g>\n", out);
    fprintf(out, "<g stroke=\"black\"><line x1=\"%d\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\"/>"
                 "<line x1=\"%d\" y1=\"%d\" x2=\"%d\" y2=\"%.1f\"/></g>\n",
            M_LEFT, M_TOP + ph, M_LEFT + pw, M_TOP + ph, M_LEFT, M_TOP, M_LEFT, M_TOP + ph);
    for (double y = 0; y <= y_top + 1e-9; y += step)
        fprintf(out, "<text x=\"%d\" y=\"%.1f\" text-anchor=\"end\">%g</text>\n", M_LEFT - 6, PY(y) + 4, y);
    for (int k = 0; k < n_x; k++) {
        char lab[16];
        length_label(xs[k], lab, sizeof lab);
        fprintf(out, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"black\"/>"
                     "<text x=\"%.1f\" y=\"%.1f\" text-anchor=\"middle\">%s</text>\n",
                PX(xs[k]), M_TOP + ph, PX(xs[k]), M_TOP + ph + 5, PX(xs[k]), M_TOP + ph + 20, lab);
    }
    fprintf(out, "<text x=\"%.1f\" y=\"%d\" text-anchor=\"middle\">prompt length (tokens, log scale)</text>\n",
            M_LEFT + pw / 2, SVG_H - 15);
    fprintf(out, "<text x=\"18\" y=\"%.1f\" text-anchor=\"middle\" transform=\"rotate(-90 18 %.1f)\">"
                 "decode ms/token (median)</text>\n", M_TOP + ph / 2, M_TOP + ph / 2);
    /* one line per press, points in prompt-length order */
    for (int l = 0; l < n_lines; l++) {
        const char *color = COLORS[l % (sizeof COLORS / sizeof COLORS[0])];
        fprintf(out, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", color);
        for (int k = 0; k < n_x; k++)
            for (int i = 0; i < n; i++)
                if (r[i].kind == PKV_BENCH_DEPTH && r[i].n_prompt == xs[k] && !strcmp(r[i].press, lines[l]))
                    fprintf(out, "%.1f,%.1f ", PX(xs[k]), PY(r[i].ms_per_token.median));
        fputs("\"/>\n", out);
        for (int i = 0; i < n; i++)
            if (r[i].kind == PKV_BENCH_DEPTH && !strcmp(r[i].press, lines[l]))
                fprintf(out, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3.5\" fill=\"%s\"/>\n", PX(r[i].n_prompt),
                        PY(r[i].ms_per_token.median), color);
        fprintf(out, "<rect x=\"%d\" y=\"%d\" width=\"14\" height=\"4\" fill=\"%s\"/><text x=\"%d\" y=\"%d\">",
                M_LEFT + 14, M_TOP + 8 + 18 * l, color, M_LEFT + 34, M_TOP + 14 + 18 * l);
        xml_text(out, lines[l]);
        fputs("</text>\n", out);
    }
    fputs("</svg>\n", out);
#undef PX
#undef PY
    free(xs);
    return n_lines;
}
