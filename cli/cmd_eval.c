/*
 * promptkv eval: the offline long-context suite (docs/evaluation.md §5). Sweeps
 * tasks x lengths x samples (and the needle grid) over presses, budgets,
 * ratios and modes with one prefill per sample, appends one JSON line per
 * result, and writes the summary tables and plots. Resumable (--resume) and,
 * built with MPI=1, sharded over MPI ranks.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifdef PKV_MPI
#include <mpi.h>
#endif

#include "args.h"
#include "eval_args.h"
#include "base/clock.h"
#include "commands.h"
#include "eval/json.h"
#include "eval/report.h"
#include "eval/sweep.h"
#include "eval/text.h"

static volatile sig_atomic_t g_stop;       /* SIGINT/SIGTERM: the CLI's only signal state */
static pkv_eval_runner *volatile g_runner; /* the runner a signal should interrupt */

static void on_signal(int sig) {
    (void)sig;
    g_stop = 1;
    if (g_runner) pkv_eval_runner_interrupt(g_runner);
}

/* ---------------------------------------------------------------- configs */

static int build_configs(const eval_args *a, pkv_eval_config *configs, int *n) {
    pkv_error err;
    *n = 0;
    if (pkv_eval_config_init(&configs[(*n)++], "none", "none", 0, 0, NULL, 0, &err)) goto fail;
    for (int p = 0; p < a->n_presses; p++) {
        if (!strcmp(a->presses[p], "none")) continue;
        int n_sizes = a->n_budgets + (eval_runs_ratios(a, a->presses[p]) ? a->n_ratios : 0);
        for (int b = 0; b < n_sizes; b++) {
            if (*n == MAX_CONFIGS) {
                cli_error("eval", "more than %d configurations", MAX_CONFIGS);
                return -1;
            }
            int budget = b < a->n_budgets ? a->budgets[b] : 0;
            double ratio = b < a->n_budgets ? 0 : a->ratios[b - a->n_budgets];
            /* the item's own options after the global ones: they win */
            const char *opts[2 * MAX_LIST];
            char item_opts[MAX_LIST][160];
            int n_opts = 0;
            for (int k = 0; k < a->n_opts; k++) opts[n_opts++] = a->opts[k];
            for (const char *o = a->press_spec[p]; *o && n_opts < 2 * MAX_LIST;) {
                const char *next = strchr(o + 1, ':');
                size_t len = next ? (size_t)(next - o - 1) : strlen(o + 1);
                /* "press.key=value": applied to this press only */
                snprintf(item_opts[n_opts - a->n_opts], sizeof item_opts[0], "%s.%.*s", a->press_base[p], (int)len,
                         o + 1);
                opts[n_opts] = item_opts[n_opts - a->n_opts];
                n_opts++;
                o = next ? next : o + 1 + len;
            }
            if (pkv_eval_config_init(&configs[*n], a->presses[p], a->press_base[p], budget, ratio, opts, n_opts,
                                     &err))
                goto fail;
            (*n)++;
        }
    }
    return 0;
fail:
    cli_error("eval", "%s", err.msg);
    return -1;
}

/* ---------------------------------------------------------------- files */

static void path_in(char *buf, size_t len, const char *dir, const char *name) {
    snprintf(buf, len, "%s/%s", dir, name);
}

/* The output directory and its missing parents (as mkdir -p). */
static int make_dir(const char *dir) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s", dir) >= (int)sizeof path) {
        cli_error("eval", "%s: the output directory's path is longer than %zu bytes", dir, sizeof path - 1);
        return -1;
    }
    for (char *p = path + 1;; p++) {
        bool end = *p == '\0';
        if (*p != '/' && !end) continue;
        *p = '\0';
        if (mkdir(path, 0755) && errno != EEXIST) {
            cli_error("eval", "%s: cannot create the output directory %s: %s", dir, path, strerror(errno));
            return -1;
        }
        if (end) break;
        *p = '/';
    }
    return 0;
}

static bool file_nonempty(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && st.st_size > 0;
}

static char *command_line(int argc, char **argv) {
    pkv_sbuf b = {0};
    pkv_sbuf_puts(&b, "promptkv");
    for (int i = 0; i < argc; i++) {
        pkv_sbuf_puts(&b, " ");
        bool plain = argv[i][0] != '\0';
        for (const char *p = argv[i]; *p && plain; p++) plain = !strchr(" \t\"'$\\*?;&|<>()", *p);
        if (plain)
            pkv_sbuf_puts(&b, argv[i]);
        else {
            pkv_sbuf_puts(&b, "'");
            pkv_sbuf_puts(&b, argv[i]);
            pkv_sbuf_puts(&b, "'");
        }
    }
    return pkv_sbuf_take(&b);
}

/* run.json: what must not change when a run is resumed (model, seed, chat, cache types). */
static int check_or_write_manifest(const eval_args *a, const char *name, const char *command, bool fresh) {
    char path[4096];
    path_in(path, sizeof path, a->out_dir, "run.json");
    struct stat st;
    long long model_bytes = stat(a->model_path, &st) == 0 ? (long long)st.st_size : -1;
    size_t len;
    char *old = fresh ? NULL : cli_read_file("eval", path, &len);
    if (old) {
        pkv_json *j = pkv_json_parse(old, len);
        free(old);
        const char *m = pkv_json_get_str(j, "model", "");
        double bytes = pkv_json_get_num(j, "model_bytes", -1), seed = pkv_json_get_num(j, "seed", -1);
        /* runs written before the chat option were plain-text runs */
        bool chat = pkv_json_get_num(j, "chat", 0) != 0;
        bool same = !strcmp(m, name) && (long long)bytes == model_bytes && (uint64_t)seed == a->seed;
        if (!same)
            cli_error("eval",
                      "%s holds a run of model '%s' (%.0f bytes) with seed %.0f; this is '%s' (%lld bytes) "
                      "with seed %llu (use another --out, or --force to start over)",
                      a->out_dir, m, bytes, seed, name, model_bytes, (unsigned long long)a->seed);
        else if (chat != (a->chat == 1)) {
            cli_error("eval", "%s holds a run with the chat format %s; this one has it %s (see --chat)", a->out_dir,
                      chat ? "on" : "off", a->chat == 1 ? "on" : "off");
            same = false;
        } else {
            /* runs written before the cache types were f16 runs */
            const char *tk = pkv_json_get_str(j, "cache_type_k", "f16");
            const char *tv = pkv_json_get_str(j, "cache_type_v", "f16");
            if (strcmp(tk, pkv_cache_type_name(a->cache.k)) || strcmp(tv, pkv_cache_type_name(a->cache.v))) {
                cli_error("eval", "%s holds a run with %s keys and %s values in the cache; this one has %s and %s "
                          "(see --cache-type)", a->out_dir, tk, tv, pkv_cache_type_name(a->cache.k),
                          pkv_cache_type_name(a->cache.v));
                same = false;
            }
        }
        pkv_json_free(j);
        return same ? 0 : -1;
    }
    pkv_sbuf b = {0};
    pkv_sbuf_puts(&b, "{\"model\":");
    pkv_json_str(&b, name);
    pkv_sbuf_printf(&b,
                    ",\"model_bytes\":%lld,\"seed\":%llu,\"prose_seed\":%llu,\"chat\":%s,\"cache_type_k\":\"%s\","
                    "\"cache_type_v\":\"%s\",\"command\":",
                    model_bytes, (unsigned long long)a->seed, (unsigned long long)PKV_PROSE_SEED,
                    a->chat == 1 ? "true" : "false", pkv_cache_type_name(a->cache.k), pkv_cache_type_name(a->cache.v));
    pkv_json_str(&b, command);
    pkv_sbuf_puts(&b, "}\n");
    FILE *f = fopen(path, "wb");
    int rc = f && !b.failed && fwrite(b.data, 1, b.len, f) == b.len ? 0 : -1;
    if (f && fclose(f)) rc = -1;
    pkv_sbuf_free(&b);
    if (rc) cli_error("eval", "%s: cannot write", path);
    return rc;
}

/* A text field of dir/run.json (the run's first command, the model's name); NULL when absent. */
static char *recorded_field(const char *dir, const char *field) {
    char path[4096];
    path_in(path, sizeof path, dir, "run.json");
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fclose(f);
    size_t len;
    char *text = cli_read_file("eval", path, &len);
    if (!text) return NULL;
    pkv_json *j = pkv_json_parse(text, len);
    free(text);
    const char *c = pkv_json_get_str(j, field, NULL);
    char *out = c ? pkv_strdup(c) : NULL;
    pkv_json_free(j);
    return out;
}

/* ---------------------------------------------------------------- progress */

typedef struct {
    bool tty;
    int rank, n_ranks;
    double last_draw;
} progress_state;

static void format_eta(double s, char *buf, size_t len) {
    if (!(s >= 0) || s > 1e7)
        snprintf(buf, len, "--");
    else if (s >= 3600)
        snprintf(buf, len, "%dh%02dm", (int)(s / 3600), (int)(s / 60) % 60);
    else
        snprintf(buf, len, "%dm%02ds", (int)(s / 60), (int)s % 60);
}

static void on_progress(void *user, const pkv_eval_progress *p) {
    progress_state *ps = user;
    double eta = p->done > 0 ? p->elapsed / p->done * (p->total - p->done) : -1;
    char eta_s[32];
    format_eta(eta, eta_s, sizeof eta_s);
    int pct = p->total ? (int)(100.0 * p->done / p->total) : 100;
    char what[160];
    if (p->unit->task->grid)
        snprintf(what, sizeof what, "%s L=%d depth %g s%d %s", p->unit->task->name, p->unit->length, p->unit->depth,
                 p->unit->sample, pkv_eval_mode_name(p->mode));
    else
        snprintf(what, sizeof what, "%s L=%d s%d %s", p->unit->task->name, p->unit->length, p->unit->sample,
                 pkv_eval_mode_name(p->mode));
    if (ps->tty && ps->rank == 0) {
        double now = pkv_now_seconds();
        if (p->last && now - ps->last_draw < 0.2 && p->done < p->total) return;
        ps->last_draw = now;
        char bar[31];
        int fill = p->total ? 30 * p->done / p->total : 30;
        for (int i = 0; i < 30; i++) bar[i] = i < fill ? '#' : '-';
        bar[30] = '\0';
        fprintf(stderr, "\r\033[K[%s] %d/%d %3d%% ETA %s  %s%s%s", bar, p->done, p->total, pct, eta_s, what,
                p->last ? " " : "", p->last ? p->last->config->label : "");
        fflush(stderr);
    } else if (!ps->tty && !p->last) {
        /* plain lines: one per sample and mode, when it starts */
        if (ps->n_ranks > 1) fprintf(stderr, "[rank %d] ", ps->rank);
        fprintf(stderr, "[%d/%d %d%% ETA %s] %s\n", p->done, p->total, pct, eta_s, what);
    }
}

/* ---------------------------------------------------------------- MPI */

typedef struct {
    int rank, size, local_size;
} ranks;

static void ranks_init(int *argc, char ***argv, ranks *r) {
    r->rank = 0, r->size = 1, r->local_size = 1;
#ifdef PKV_MPI
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &r->rank);
    MPI_Comm_size(MPI_COMM_WORLD, &r->size);
    MPI_Comm local;
    MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, r->rank, MPI_INFO_NULL, &local);
    MPI_Comm_size(local, &r->local_size);
    MPI_Comm_free(&local);
#else
    (void)argc, (void)argv;
#endif
}

/* The worst status of all ranks (a collective: every rank calls it). */
static int ranks_max(int status) {
#ifdef PKV_MPI
    int out = status;
    MPI_Allreduce(&status, &out, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    return out;
#else
    return status;
#endif
}

static void ranks_finish(void) {
#ifdef PKV_MPI
    MPI_Finalize();
#endif
}

/* ---------------------------------------------------------------- the command */

static int report(const eval_args *a, const char *name, const char *command) {
    char results[4096];
    path_in(results, sizeof results, a->out_dir, "results.jsonl");
    pkv_error err;
    pkv_eval_report_opts ro = {results, a->out_dir, name, command};
    if (pkv_eval_report(&ro, &err)) {
        cli_error("eval", "%s", err.msg);
        return -1;
    }
    return 0;
}

/* What is in results.jsonl besides this run's lines, on stderr: a line that
 * is not a result (recomputed) and lines of keys the plan does not produce
 * (kept, not run), each named by its line. */
static void warn_check(const char *results, const pkv_jsonl_check_report *rep) {
    if (rep->corrupt == 1)
        fprintf(stderr, "eval: warning: %s line %d is not a valid result line; its result will be computed again\n",
                results, rep->first_corrupt);
    else if (rep->corrupt > 1)
        fprintf(stderr,
                "eval: warning: %s: %d lines are not valid result lines (the first is line %d); their results will "
                "be computed again\n",
                results, rep->corrupt, rep->first_corrupt);
    if (rep->outside > 0)
        fprintf(stderr,
                "eval: warning: %s: %d line%s of results this plan does not produce (the first is line %d, '%s'): "
                "kept in the file and the report, not run\n",
                results, rep->outside, rep->outside > 1 ? "s" : "", rep->first_outside, rep->first_outside_key);
}

/* Rank 0 before the sweep: start over or pick up what an earlier run left. */
static int prepare_dir(const eval_args *a, const char *name, const char *command, const pkv_eval_plan *plan) {
    char results[4096], part[4200];
    path_in(results, sizeof results, a->out_dir, "results.jsonl");
    if (make_dir(a->out_dir)) return -1;
    if (a->force) {
        remove(results);
        for (int r = 0; r < 4096; r++) { /* parts of any earlier run, whatever its number of ranks */
            snprintf(part, sizeof part, "%s.part%d", results, r);
            remove(part);
        }
    } else if (!a->resume && file_nonempty(results)) {
        cli_error("eval", "%s already holds results: --resume to continue, --force to start over", a->out_dir);
        return -1;
    }
    if (check_or_write_manifest(a, name, command, a->force || !file_nonempty(results))) return -1;
    pkv_error err;
    if (pkv_jsonl_truncate_partial(results, &err)) {
        cli_error("eval", "%s", err.msg);
        return -1;
    }
    /* parts of an interrupted MPI run (any number of ranks) */
    pkv_key_set keys = {0};
    int rc = pkv_jsonl_load_keys(results, &keys, &err);
    for (int r = 0; r < 4096 && rc == 0; r++) {
        snprintf(part, sizeof part, "%s.part%d", results, r);
        if (access(part, F_OK) == 0) rc = pkv_jsonl_merge(results, part, &keys, &err);
    }
    pkv_key_set_free(&keys);
    /* every line must be this run's: a corrupt one is named, another run's refused */
    pkv_jsonl_check_report rep;
    pkv_eval_run_id run = {name, a->chat == 1};
    if (rc == 0) rc = pkv_jsonl_check(results, plan, &run, &keys, &rep, &err);
    pkv_key_set_free(&keys);
    if (rc == 0) warn_check(results, &rep);
    if (rc) cli_error("eval", "%s", err.msg);
    return rc;
}

/* Rank 0 after the sweep: merge the parts, put the file in canonical order. */
static int finish_dir(const eval_args *a, const pkv_eval_plan *plan, int n_ranks) {
    char results[4096], part[4200];
    path_in(results, sizeof results, a->out_dir, "results.jsonl");
    pkv_error err;
    pkv_key_set keys = {0};
    int rc = pkv_jsonl_load_keys(results, &keys, &err);
    for (int r = 0; r < n_ranks && rc == 0; r++) {
        snprintf(part, sizeof part, "%s.part%d", results, r);
        if (access(part, F_OK) == 0) rc = pkv_jsonl_merge(results, part, &keys, &err);
    }
    pkv_key_set_free(&keys);
    if (rc == 0) rc = pkv_jsonl_normalize(results, plan, &err);
    if (rc) cli_error("eval", "%s", err.msg);
    return rc;
}

static int max_length(const eval_args *a) {
    int m = 0;
    bool grid = false, plain = false;
    for (int t = 0; t < a->n_tasks; t++) {
        if (a->tasks[t]->grid)
            grid = true;
        else
            plain = true;
    }
    for (int i = 0; i < a->n_lengths && plain; i++)
        if (a->lengths[i] > m) m = a->lengths[i];
    for (int i = 0; i < a->n_grid_lengths && grid; i++)
        if (a->grid_lengths[i] > m) m = a->grid_lengths[i];
    return m;
}

int cmd_eval(int argc, char **argv) {
    ranks rk;
    ranks_init(&argc, &argv, &rk);
    eval_args a;
    int rc = eval_parse_args(argc, argv, &a);
    if (rc) {
        ranks_finish();
        return rc > 0 ? 0 : EXIT_USAGE;
    }
    char name[256];
    char *command = command_line(argc, argv);
    if (a.report_only) {
        char *recorded = recorded_field(a.out_dir, "model");
        if (a.model_path)
            cli_model_id(a.model_path, name, sizeof name);
        else
            snprintf(name, sizeof name, "%s", recorded ? recorded : "model");
        free(recorded);
        char *cmdline = recorded_field(a.out_dir, "command");
        int code = rk.rank == 0 && report(&a, name, cmdline ? cmdline : command) ? EXIT_RUNTIME : 0;
        free(cmdline);
        free(command);
        ranks_finish();
        return code;
    }
    cli_model_id(a.model_path, name, sizeof name);

    static pkv_eval_config configs[MAX_CONFIGS];
    int n_configs = 0;
    if (build_configs(&a, configs, &n_configs)) {
        for (int i = 0; i < n_configs; i++) pkv_eval_config_free(&configs[i]);
        free(command);
        ranks_finish();
        return EXIT_USAGE;
    }
    pkv_eval_plan plan = {a.tasks,        a.n_tasks,        a.lengths,     a.n_lengths,     a.samples,
                          a.grid_lengths, a.n_grid_lengths, a.grid_depths, a.n_grid_depths, a.grid_samples,
                          a.modes,        a.n_modes,        configs,       n_configs,       a.seed};
    int exit_code = 0;
    pkv_model *model = NULL;
    char results[4096], rows_path[4200];
    path_in(results, sizeof results, a.out_dir, "results.jsonl");
    if (rk.size > 1)
        snprintf(rows_path, sizeof rows_path, "%s.part%d", results, rk.rank);
    else
        snprintf(rows_path, sizeof rows_path, "%s", results);

    model = cli_load_model_chat("eval", a.model_path, a.simd, a.chat_template, false);
    if (ranks_max(model ? 0 : 1)) {
        exit_code = EXIT_RUNTIME;
        goto done;
    }
    if (a.chat < 0) a.chat = a.chat_template || pkv_model_has_chat_template(model) ? 1 : 0;
    /* rank 0 prepares the directory; everyone then reads what is done */
    int status = rk.rank == 0 ? (prepare_dir(&a, name, command, &plan) ? 1 : 0) : 0;
    if (ranks_max(status)) {
        exit_code = EXIT_RUNTIME;
        goto done;
    }
    /* this run's lines of this plan (rank 0 has warned about the others) */
    pkv_key_set done_keys = {0};
    pkv_error err;
    pkv_jsonl_check_report check;
    pkv_eval_run_id run = {name, a.chat == 1};
    status = pkv_jsonl_check(results, &plan, &run, &done_keys, &check, &err) ? 1 : 0;
    if (status) cli_error("eval", "%s", err.msg);

    int n_units;
    pkv_eval_unit *units = pkv_eval_plan_units(&plan, &n_units);
    free(units);
    if (rk.rank == 0)
        fprintf(stderr, "eval: %s, %d prompts x %d mode(s) x %d configs = %d result lines, %d already done%s\n", name,
                n_units, a.n_modes, n_configs, n_units * a.n_modes * n_configs, done_keys.n,
                rk.size > 1 ? " (shared among ranks)" : "");

    int threads = a.threads;
    if (threads <= 0) {
        long cpus = sysconf(_SC_NPROCESSORS_ONLN);
        threads = (int)(cpus > 0 ? cpus : 1) / (rk.local_size > 0 ? rk.local_size : 1);
        if (threads < 1) threads = 1;
    }
    bool attn_sums = false, query_stats = false;
    for (int i = 0; i < n_configs; i++) {
        attn_sums |= pkv_press_cfg_needs_attn_sums(configs[i].cfg);
        query_stats |= pkv_press_cfg_needs_query_stats(configs[i].cfg);
    }
    progress_state ps = {isatty(STDERR_FILENO), rk.rank, rk.size, 0};
    pkv_eval_sweep_opts so = {
        .model = model,
        .runner = {.n_threads = threads,
                   .n_ctx = max_length(&a) + 64,
                   .cache_type_k = a.cache.k,
                   .cache_type_v = a.cache.v,
                   .keep_window = a.window,
                   .attn_sums = attn_sums,
                   .query_stats = query_stats,
                   .agree_k = a.agree_k,
                   .chat = a.chat == 1,
                   .stop = &g_stop},
        .rows_path = rows_path,
        .rank = rk.rank,
        .n_ranks = rk.size,
        .done = &done_keys,
        .run = run,
        .progress = on_progress,
        .user = &ps,
        .stop = &g_stop,
        .running = &g_runner,
    };
    struct sigaction sa = {0};
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    double t0 = pkv_now_seconds();
    if (status == 0 && pkv_eval_sweep(&plan, &so, &err)) {
        status = err.code == PKV_ERR_INTERRUPTED ? 2 : 1;
        if (ps.tty && rk.rank == 0) fputc('\n', stderr);
        if (status == 1) cli_error("eval", "%s", err.msg);
    } else if (ps.tty && rk.rank == 0) {
        fputc('\n', stderr);
    }
    pkv_key_set_free(&done_keys);
    status = ranks_max(status);
    /* rank 0: merge, order, summarise what there is, even after an interrupt */
    if (rk.rank == 0) {
        if (finish_dir(&a, &plan, rk.size) == 0 && file_nonempty(results)) {
            char *cmdline = recorded_field(a.out_dir, "command");
            if (report(&a, name, cmdline ? cmdline : command) == 0)
                fprintf(stderr, "eval: %.0f s; results in %s (summary.md, summary.csv, plots)\n", pkv_now_seconds() - t0,
                        a.out_dir);
            else if (status == 0)
                status = 1;
            free(cmdline);
        }
        if (status == 2) fprintf(stderr, "eval: interrupted; resume with the same command plus --resume\n");
    }
    exit_code = status == 0 ? 0 : status == 2 ? EXIT_INTERRUPTED : EXIT_RUNTIME;
done:
    for (int i = 0; i < n_configs; i++) pkv_eval_config_free(&configs[i]);
    pkv_model_free(model);
    free(command);
    ranks_finish();
    return exit_code;
}
