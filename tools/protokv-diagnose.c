/*
 * protokv-diagnose: why ProtoKV loses needles that SnapKV keeps
 * (docs/protokv.md, "Diagnosis on the instruct models").
 *
 *   build/protokv-diagnose -m MODEL [--tasks LIST] [--length N] [--samples N] [--seed S]
 *                          (--budget C | --ratio r) [--window W] [--kernel K] [--pool avg|max]
 *                          [--mode query_aware|query_agnostic] [--protokv KEY=VALUE]... [-t N]
 *                          [--jsonl FILE]
 *
 * Builds the evaluation's prompts (the same generators, seeds, chat template
 * and token ids as `promptkv eval`), prefills each once and compresses copies
 * with SnapKV and with ProtoKV (twice: cluster scores psi from raw window
 * logits and from softmax attention; the clusters are the same, only their
 * scores differ). For every full-attention layer and KV head it records where
 * the needle's tokens went: kept by SnapKV / ProtoKV, the clusters they joined
 * (SAT or chunk, size, how far apart the members lie, psi rank under both
 * scores, kept or not), whether the needle was split over several clusters,
 * and whether its tokens were SAT candidates. One JSON line per head goes to
 * --jsonl; the summary tables are printed (markdown).
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "eval/runner.h"
#include "eval/tasks.h"
#include "press/observer.h"
#include "promptkv.h"

enum { MAX_TASKS = 32, MAX_OPTS = 32 };

typedef struct {
    const char *model;
    const char *tasks[MAX_TASKS];
    int n_tasks, length, samples, window, threads;
    uint64_t seed;
    int budget;
    double ratio;
    const char *kernel, *pool;
    bool query_aware;
    const char *opts[MAX_OPTS];
    int n_opts;
    const char *jsonl;
} diag_args;

static const char USAGE[] =
    "usage: protokv-diagnose -m MODEL [--tasks LIST] [--length N] [--samples N] [--seed S]\n"
    "                        (--budget C | --ratio r) [--window W] [--kernel K] [--pool avg|max]\n"
    "                        [--mode query_aware|query_agnostic] [--protokv KEY=VALUE]... [-t N] [--jsonl FILE]\n";

static int parse_args(int argc, char **argv, diag_args *a) {
    memset(a, 0, sizeof *a);
    a->length = 4096;
    a->samples = 3;
    a->window = 64;
    a->threads = 2;
    a->query_aware = true;
    a->kernel = "5";
    a->pool = "avg";
    static char task_buf[1024];
    snprintf(task_buf, sizeof task_buf, "niah_single_1,niah_single_2,niah_single_3,niah_multikey_2");
    char *tasks = task_buf;
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        bool has = v != NULL;
        if (!strcmp(f, "-h") || !strcmp(f, "--help")) {
            fputs(USAGE, stdout);
            return 1;
        }
        if (!has) {
            fprintf(stderr, "protokv-diagnose: %s needs a value\n%s", f, USAGE);
            return -1;
        }
        i++;
        if (!strcmp(f, "-m")) a->model = v;
        else if (!strcmp(f, "--tasks")) snprintf(task_buf, sizeof task_buf, "%s", v);
        else if (!strcmp(f, "--length")) a->length = atoi(v);
        else if (!strcmp(f, "--samples")) a->samples = atoi(v);
        else if (!strcmp(f, "--seed")) a->seed = strtoull(v, NULL, 10);
        else if (!strcmp(f, "--budget")) a->budget = atoi(v);
        else if (!strcmp(f, "--ratio")) a->ratio = atof(v);
        else if (!strcmp(f, "--window")) a->window = atoi(v);
        else if (!strcmp(f, "--kernel")) a->kernel = v;
        else if (!strcmp(f, "--pool")) a->pool = v;
        else if (!strcmp(f, "--mode")) a->query_aware = strcmp(v, "query_agnostic") != 0;
        else if (!strcmp(f, "--protokv") && a->n_opts < MAX_OPTS) a->opts[a->n_opts++] = v;
        else if (!strcmp(f, "-t")) a->threads = atoi(v);
        else if (!strcmp(f, "--jsonl")) a->jsonl = v;
        else {
            fprintf(stderr, "protokv-diagnose: unknown option '%s'\n%s", f, USAGE);
            return -1;
        }
    }
    for (char *t = strtok(tasks, ","); t && a->n_tasks < MAX_TASKS; t = strtok(NULL, ",")) a->tasks[a->n_tasks++] = t;
    if (!a->model || (a->budget <= 0 && !(a->ratio > 0 && a->ratio < 1)) || a->length < 64 || a->samples < 1) {
        fprintf(stderr, "protokv-diagnose: need -m MODEL and --budget C or --ratio r\n%s", USAGE);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------- presses */

static pkv_press_cfg *make_press(const diag_args *a, const char *name, const char *score, pkv_error *err) {
    pkv_press_cfg *c = pkv_press_cfg_new(name, err);
    if (!c) return NULL;
    char num[64], win[16];
    snprintf(win, sizeof win, "%d", a->window);
    if (a->budget > 0) snprintf(num, sizeof num, "%d", a->budget);
    else snprintf(num, sizeof num, "%.17g", a->ratio);
    int rc = pkv_press_cfg_set(c, a->budget > 0 ? "budget" : "ratio", num, err) ||
             pkv_press_cfg_set(c, "window", win, err);
    if (!rc && !strcmp(name, "snapkv"))
        rc = pkv_press_cfg_set(c, "kernel", a->kernel, err) || pkv_press_cfg_set(c, "pool", a->pool, err);
    for (int i = 0; !rc && !strcmp(name, "protokv") && i < a->n_opts; i++) {
        char key[64];
        const char *eq = strchr(a->opts[i], '=');
        if (!eq) {
            rc = -1;
            snprintf(err->msg, sizeof err->msg, "--protokv expects KEY=VALUE, got '%s'", a->opts[i]);
            break;
        }
        snprintf(key, sizeof key, "%.*s", (int)(eq - a->opts[i]), a->opts[i]);
        rc = pkv_press_cfg_set(c, key, eq + 1, err);
    }
    if (!rc && score) rc = pkv_press_cfg_set(c, "score", score, err);
    if (rc) {
        pkv_press_cfg_free(c);
        return NULL;
    }
    return c;
}

/* ---------------------------------------------------------------- what the watcher keeps */

/* One head's clusters as ProtoKV formed them (copied out of the callback). */
typedef struct {
    int layer, head, n_prefix, n_clusters, n_sat_clusters;
    int32_t *pos, *cluster, *sat_bucket, *size;
    double *theta, *psi;
    int8_t *kept; /* per cluster */
    bool *row_kept;
} head_view;

typedef struct {
    head_view *heads;
    int n, cap;
} view_set;

static void *dup_mem(const void *src, size_t n) {
    void *d = malloc(n ? n : 1);
    if (d && n) memcpy(d, src, n);
    return d;
}

static void on_view(void *user, const pkv_cluster_view *v) {
    view_set *s = user;
    if (s->n == s->cap) {
        s->cap = s->cap ? 2 * s->cap : 64;
        s->heads = realloc(s->heads, (size_t)s->cap * sizeof *s->heads);
    }
    head_view *h = &s->heads[s->n++];
    h->layer = v->layer;
    h->head = v->head;
    h->n_prefix = v->n_prefix;
    h->n_clusters = v->n_clusters;
    h->n_sat_clusters = v->n_sat_clusters;
    h->pos = dup_mem(v->pos, (size_t)v->n_rows * sizeof *h->pos);
    h->cluster = dup_mem(v->cluster, (size_t)v->n_prefix * sizeof *h->cluster);
    h->sat_bucket = dup_mem(v->sat_bucket, (size_t)v->n_prefix * sizeof *h->sat_bucket);
    h->theta = dup_mem(v->theta, (size_t)v->n_prefix * sizeof *h->theta);
    h->size = dup_mem(v->cluster_size, (size_t)v->n_clusters * sizeof *h->size);
    h->psi = dup_mem(v->cluster_score, (size_t)v->n_clusters * sizeof *h->psi);
    h->kept = dup_mem(v->cluster_kept, (size_t)v->n_clusters);
    h->row_kept = dup_mem(v->row_kept, (size_t)v->n_rows);
}

static void view_set_free(view_set *s) {
    for (int i = 0; i < s->n; i++) {
        head_view *h = &s->heads[i];
        free(h->pos), free(h->cluster), free(h->sat_bucket), free(h->theta), free(h->size), free(h->psi);
        free(h->kept), free(h->row_kept);
    }
    free(s->heads);
    memset(s, 0, sizeof *s);
}

/* ---------------------------------------------------------------- per head */

static bool in_sorted(const int32_t *a, int n, int32_t x) {
    int lo = 0, hi = n;
    while (lo < hi) {
        int mid = (lo + hi) / 2;
        if (a[mid] < x) lo = mid + 1;
        else hi = mid;
    }
    return lo < n && a[lo] == x;
}

/* Rank (0 = best) of cluster c by psi among the non-empty clusters; ties to
 * the lower index, as the press orders them. */
static int psi_rank(const head_view *h, const double *psi, int c) {
    int rank = 0;
    for (int k = 0; k < h->n_clusters; k++)
        if (h->size[k] && k != c && (psi[k] > psi[c] || (psi[k] == psi[c] && k < c))) rank++;
    return rank;
}

/* Kept rows of a head of a compressed session (ascending positions). */
static int kept_positions(const pkv_session *s, int layer, int head, int32_t *buf, int max) {
    int n = pkv_session_positions(s, layer, head, buf, max);
    return n < max ? n : max;
}

typedef struct {
    /* tallies over heads that hold needle tokens */
    int heads, needle_tokens;
    long snap_kept, proto_kept;
    int heads_snap_all, heads_proto_all;
    int heads_split;          /* needle tokens in more than one cluster */
    long needle_clusters;     /* sum over heads of distinct needle clusters */
    long needle_in_sat;       /* needle tokens that were SAT candidates */
    long needle_in_sat_cluster;
    double spread_sum;        /* mean |member - needle| / L over needle clusters */
    long spread_n;
    long far_members, members; /* members of needle clusters more than 64 positions from every needle token */
    long rank_logit_sum, rank_attn_sum, rank_n; /* best needle cluster's psi rank */
    int best_kept_logit, best_kept_attn;       /* heads whose best needle cluster was kept (2) */
    double kept_size_logit, kept_size_all;     /* mean size of kept clusters vs of all non-empty clusters */
    long kept_clusters_logit, all_clusters;
    double psi_size_corr_sum;
    int psi_size_corr_n;
} tally;

static double pearson(const double *x, const double *y, int n) {
    double mx = 0, my = 0;
    for (int i = 0; i < n; i++) mx += x[i], my += y[i];
    mx /= n, my /= n;
    double sxy = 0, sxx = 0, syy = 0;
    for (int i = 0; i < n; i++) {
        sxy += (x[i] - mx) * (y[i] - my);
        sxx += (x[i] - mx) * (x[i] - mx);
        syy += (y[i] - my) * (y[i] - my);
    }
    return sxx > 0 && syy > 0 ? sxy / sqrt(sxx * syy) : NAN;
}

static void analyse_head(FILE *out, const char *what, const head_view *hl, const head_view *ha, const int32_t *needle,
                         int n_needle, const int32_t *snap_pos, int n_snap, int L, tally *t) {
    /* needle tokens of the prefix of this head (pos[i] for i < n_prefix) */
    int np = hl->n_prefix;
    int *rows = malloc((size_t)np * sizeof *rows + 4);
    int n_rows = 0;
    for (int i = 0; i < np; i++)
        if (in_sorted(needle, n_needle, hl->pos[i])) rows[n_rows++] = i;
    if (n_rows == 0) {
        free(rows);
        return;
    }
    t->heads++;
    t->needle_tokens += n_rows;
    int snap = 0, proto = 0, in_sat = 0, in_sat_cluster = 0;
    int32_t clusters[256];
    int n_cl = 0;
    for (int k = 0; k < n_rows; k++) {
        int i = rows[k];
        snap += in_sorted(snap_pos, n_snap, hl->pos[i]);
        proto += hl->row_kept[i];
        in_sat += hl->sat_bucket[i] >= 0;
        in_sat_cluster += hl->cluster[i] < hl->n_sat_clusters;
        bool seen = false;
        for (int c = 0; c < n_cl; c++) seen |= clusters[c] == hl->cluster[i];
        if (!seen && n_cl < 256) clusters[n_cl++] = hl->cluster[i];
    }
    t->snap_kept += snap;
    t->proto_kept += proto;
    t->heads_snap_all += snap == n_rows;
    t->heads_proto_all += proto == n_rows;
    t->heads_split += n_cl > 1;
    t->needle_clusters += n_cl;
    t->needle_in_sat += in_sat;
    t->needle_in_sat_cluster += in_sat_cluster;
    /* spread of the needle clusters' members */
    int best_logit = -1, best_attn = -1, best_c = -1;
    for (int c = 0; c < n_cl; c++) {
        int cl = clusters[c];
        for (int i = 0; i < np; i++) {
            if (hl->cluster[i] != cl) continue;
            int dmin = 1 << 30;
            for (int k = 0; k < n_rows; k++) {
                int d = abs(hl->pos[i] - hl->pos[rows[k]]);
                if (d < dmin) dmin = d;
            }
            t->spread_sum += (double)dmin / L;
            t->spread_n++;
            t->far_members += dmin > 64;
            t->members++;
        }
        int rl = psi_rank(hl, hl->psi, cl), ra = psi_rank(ha, ha->psi, cl);
        if (best_logit < 0 || rl < best_logit) best_logit = rl, best_c = cl;
        if (best_attn < 0 || ra < best_attn) best_attn = ra;
    }
    t->rank_logit_sum += best_logit;
    t->rank_attn_sum += best_attn;
    t->rank_n++;
    t->best_kept_logit += best_c >= 0 && hl->kept[best_c] == 2;
    int best_ca = -1, rbest = 1 << 30;
    for (int c = 0; c < n_cl; c++) {
        int ra = psi_rank(ha, ha->psi, clusters[c]);
        if (ra < rbest) rbest = ra, best_ca = clusters[c];
    }
    t->best_kept_attn += best_ca >= 0 && ha->kept[best_ca] == 2;
    /* sizes of kept clusters against all; psi (raw logits) against size */
    double *x = malloc((size_t)hl->n_clusters * sizeof *x + 8), *y = malloc((size_t)hl->n_clusters * sizeof *y + 8);
    int nz = 0;
    for (int c = 0; c < hl->n_clusters; c++) {
        if (!hl->size[c]) continue;
        t->kept_size_all += hl->size[c];
        t->all_clusters++;
        if (hl->kept[c]) {
            t->kept_size_logit += hl->size[c];
            t->kept_clusters_logit++;
        }
        x[nz] = hl->size[c];
        y[nz++] = hl->psi[c];
    }
    double corr = nz > 2 ? pearson(x, y, nz) : NAN;
    if (isfinite(corr)) {
        t->psi_size_corr_sum += corr;
        t->psi_size_corr_n++;
    }
    free(x);
    free(y);
    if (out) {
        fprintf(out,
                "{\"prompt\":\"%s\",\"layer\":%d,\"head\":%d,\"needle\":%d,\"snapkv_kept\":%d,\"protokv_kept\":%d,"
                "\"needle_clusters\":%d,\"needle_sat_candidates\":%d,\"needle_in_sat_clusters\":%d,"
                "\"best_rank_logit\":%d,\"best_rank_attn\":%d,\"clusters\":[",
                what, hl->layer, hl->head, n_rows, snap, proto, n_cl, in_sat, in_sat_cluster, best_logit, best_attn);
        for (int c = 0; c < n_cl; c++) {
            int cl = clusters[c], lo = 1 << 30, hi = -1;
            for (int i = 0; i < np; i++)
                if (hl->cluster[i] == cl) {
                    if (hl->pos[i] < lo) lo = hl->pos[i];
                    if (hl->pos[i] > hi) hi = hl->pos[i];
                }
            fprintf(out, "%s{\"id\":%d,\"sat\":%s,\"size\":%d,\"first\":%d,\"last\":%d,\"psi_logit\":%.6g,"
                         "\"rank_logit\":%d,\"psi_attn\":%.6g,\"rank_attn\":%d,\"kept_logit\":%d,\"kept_attn\":%d}",
                    c ? "," : "", cl, cl < hl->n_sat_clusters ? "true" : "false", hl->size[cl], lo, hi, hl->psi[cl],
                    psi_rank(hl, hl->psi, cl), ha->psi[cl], psi_rank(ha, ha->psi, cl), hl->kept[cl], ha->kept[cl]);
        }
        fprintf(out, "]}\n");
    }
    free(rows);
}

/* ---------------------------------------------------------------- main */

static int run(const diag_args *a) {
    pkv_error err;
    pkv_model *m = pkv_model_load(a->model, NULL, &err);
    if (!m) {
        fprintf(stderr, "protokv-diagnose: %s\n", err.msg);
        return 1;
    }
    bool chat = pkv_model_has_chat_template(m);
    pkv_eval_tokenizing tz = {m, chat};
    pkv_eval_fitter fitter;
    pkv_eval_fitter_init(&fitter, pkv_eval_count_tokens, &tz);
    pkv_session_opts so;
    pkv_session_opts_default(&so);
    so.n_threads = a->threads;
    so.n_ctx = a->length + 64;
    pkv_session_opts src_opts = so;
    src_opts.keep_press_window = a->window;
    pkv_session *src = pkv_session_new(m, &src_opts, &err), *dst = src ? pkv_session_new(m, &so, &err) : NULL;
    pkv_press_cfg *snap = dst ? make_press(a, "snapkv", NULL, &err) : NULL;
    pkv_press_cfg *logit = snap ? make_press(a, "protokv", "logit", &err) : NULL;
    pkv_press_cfg *attn = logit ? make_press(a, "protokv", "attn", &err) : NULL;
    if (!attn) {
        fprintf(stderr, "protokv-diagnose: %s\n", err.msg);
        return 1;
    }
    FILE *out = a->jsonl ? fopen(a->jsonl, "w") : NULL;
    if (a->jsonl && !out) {
        fprintf(stderr, "protokv-diagnose: cannot write %s\n", a->jsonl);
        return 1;
    }
    tally t = {0};
    int n_layers = pkv_session_n_layers(src);
    int32_t *buf = malloc((size_t)(a->length + 64) * sizeof *buf);
    for (int ti = 0; ti < a->n_tasks; ti++) {
        const pkv_eval_task *task = pkv_eval_task_find(a->tasks[ti]);
        if (!task || task->grid) {
            fprintf(stderr, "protokv-diagnose: '%s' is not a RULER-style task (promptkv eval --list-tasks)\n",
                    a->tasks[ti]);
            return 1;
        }
        for (int s = 0; s < a->samples; s++) {
            pkv_eval_spec spec = {task, a->length, s, -1, a->seed, 0};
            pkv_eval_item item;
            pkv_prompt_tokens pt;
            int32_t *needle = NULL;
            int n_needle = 0;
            if (pkv_eval_generate(&fitter, &spec, &item, NULL, &err) ||
                pkv_eval_item_tokens(m, chat, &item, &pt, &needle, &n_needle, &err)) {
                fprintf(stderr, "protokv-diagnose: %s\n", err.msg);
                return 1;
            }
            int n = a->query_aware ? pt.question_end : pt.context_end;
            pkv_session_reset(src);
            if (pkv_prefill(src, pt.tokens, n, NULL, NULL, &err)) {
                fprintf(stderr, "protokv-diagnose: %s\n", err.msg);
                return 1;
            }
            char what[96];
            snprintf(what, sizeof what, "%s/%d/%d", task->name, a->length, s);
            view_set vl = {0}, va = {0};
            if (pkv_press_cfg_observe(attn, &(pkv_press_observer){.layer = -1, .head = -1, .clusters = on_view, .user = &va}, &err) ||
                pkv_session_copy(dst, src, attn, NULL, &err) ||
                pkv_press_cfg_observe(attn, NULL, &err) ||
                pkv_press_cfg_observe(logit, &(pkv_press_observer){.layer = -1, .head = -1, .clusters = on_view, .user = &vl}, &err) ||
                pkv_session_copy(dst, src, logit, NULL, &err) ||
                pkv_press_cfg_observe(logit, NULL, &err) ||
                pkv_session_copy(dst, src, snap, NULL, &err)) {
                fprintf(stderr, "protokv-diagnose: %s\n", err.msg);
                return 1;
            }
            /* dst now holds SnapKV's cache */
            for (int i = 0; i < vl.n; i++) {
                const head_view *hl = &vl.heads[i], *ha = NULL;
                for (int k = 0; k < va.n && !ha; k++)
                    if (va.heads[k].layer == hl->layer && va.heads[k].head == hl->head) ha = &va.heads[k];
                if (!ha || hl->layer >= n_layers) continue;
                int n_snap = kept_positions(dst, hl->layer, hl->head, buf, a->length + 64);
                analyse_head(out, what, hl, ha, needle, n_needle, buf, n_snap, n, &t);
            }
            fprintf(stderr, "protokv-diagnose: %s: %d tokens, %d needle tokens\n", what, n, n_needle);
            view_set_free(&vl);
            view_set_free(&va);
            free(needle);
            pkv_prompt_tokens_free(&pt);
            pkv_eval_item_free(&item);
        }
    }
    if (out) fclose(out);
    int h = t.heads ? t.heads : 1;
    printf("| heads with needle tokens | needle tokens per head | kept by SnapKV | kept by ProtoKV | heads all kept: "
           "SnapKV / ProtoKV | needle split over clusters | clusters per needle | needle tokens that are SAT "
           "candidates | in SAT clusters |\n|---|---|---|---|---|---|---|---|---|\n");
    printf("| %d | %.1f | %.1f%% | %.1f%% | %.0f%% / %.0f%% | %.0f%% of heads | %.2f | %.1f%% | %.1f%% |\n", t.heads,
           (double)t.needle_tokens / h, 100.0 * t.snap_kept / (t.needle_tokens ? t.needle_tokens : 1),
           100.0 * t.proto_kept / (t.needle_tokens ? t.needle_tokens : 1), 100.0 * t.heads_snap_all / h,
           100.0 * t.heads_proto_all / h, 100.0 * t.heads_split / h, (double)t.needle_clusters / h,
           100.0 * t.needle_in_sat / (t.needle_tokens ? t.needle_tokens : 1),
           100.0 * t.needle_in_sat_cluster / (t.needle_tokens ? t.needle_tokens : 1));
    printf("\n| members of needle clusters > 64 positions from the needle | mean distance / L | best needle cluster's psi "
           "rank: logits / attention | best needle cluster kept: logits / attention | kept cluster size vs all | corr(psi "
           "logits, size) |\n|---|---|---|---|---|---|\n");
    printf("| %.1f%% | %.3f | %.1f / %.1f | %.0f%% / %.0f%% | %.1f vs %.1f | %.2f |\n",
           100.0 * t.far_members / (t.members ? t.members : 1), t.spread_n ? t.spread_sum / t.spread_n : NAN,
           t.rank_n ? (double)t.rank_logit_sum / t.rank_n : NAN, t.rank_n ? (double)t.rank_attn_sum / t.rank_n : NAN,
           100.0 * t.best_kept_logit / h, 100.0 * t.best_kept_attn / h,
           t.kept_clusters_logit ? t.kept_size_logit / t.kept_clusters_logit : NAN,
           t.all_clusters ? t.kept_size_all / t.all_clusters : NAN,
           t.psi_size_corr_n ? t.psi_size_corr_sum / t.psi_size_corr_n : NAN);
    free(buf);
    pkv_press_cfg_free(snap);
    pkv_press_cfg_free(logit);
    pkv_press_cfg_free(attn);
    pkv_session_free(dst);
    pkv_session_free(src);
    pkv_eval_fitter_free(&fitter);
    pkv_model_free(m);
    return 0;
}

int main(int argc, char **argv) {
    diag_args a;
    int rc = parse_args(argc, argv, &a);
    if (rc) return rc > 0 ? 0 : 2;
    return run(&a);
}
