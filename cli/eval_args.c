/* promptkv eval: the command line (the usage, the lists of tasks, lengths,
 * presses, budgets and ratios, the options). */
#include "eval_args.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "flags.h"
#include "eval/json.h"
#include "eval/text.h"

static const char EVAL_USAGE[] =
    "usage: promptkv eval -m MODEL [options]\n"
    "\n"
    "Offline long-context benchmarks (RULER-synth, needle in a haystack, LongEval-Lines) under\n"
    "every press and budget, against the full cache. One prefill per sample serves every config.\n"
    "Writes DIR/results.jsonl (one line per sample, mode and config), DIR/summary.md, summary.csv,\n"
    "timing.csv, niah_*.csv and SVG plots.\n"
    "\n"
    "  -m, --model PATH       GGUF model\n"
    "      --tasks LIST       task names, or tier1 (default), ruler, grid, all; --list-tasks shows them\n"
    "      --lengths LIST     token lengths of the RULER-style tasks (default 1024,2048)\n"
    "      --samples N        samples per task and length (default 5)\n"
    "      --niah-lengths L   lengths of the needle grid (default 512,1024,2048)\n"
    "      --niah-depths LIST depths in percent (default 0,25,50,75,100)\n"
    "      --niah-samples N   samples per grid cell (default 1)\n"
    "      --press LIST       presses (default none,snapkv,streamingllm,h2o,tova,knorm,random and any\n"
    "                         other registered press but kvzip, which prefills again: name it);\n"
    "                         the full cache always runs. An item may\n"
    "                         carry options of its own and a label: snapkv:kernel=5:pool=avg,\n"
    "                         snapkv+pyramid=snapkv:layer_budget=pyramid\n"
    "      --budgets LIST     rows kept per head per layer (default 64,128,256,512)\n"
    "      --ratios LIST      fractions removed, e.g. 0.5,0.75,0.875 (default none)\n"
    "      --ratio-presses L  presses that also run at the ratios (default: every press); the\n"
    "                         others run at the budgets only, e.g. baselines as floors\n"
    "      --mode LIST        query_agnostic (default), query_aware, or both comma-separated\n"
    "      --window W         observation window of every press that has one (default 32)\n"
    "      --kernel K         pooling kernel of presses that pool (snapkv)\n"
    "      --pool avg|max     pooling of presses that pool\n"
    "      --press-opt K=V    an option for every press that has it; PRESS.K=V for one press\n"
    "      --chat auto|on|off prompts in the model's chat template (auto: when the GGUF carries\n"
    "                         tokenizer.chat_template, as for instruct models)\n"
    "      --chat-template T  the chat format instead of the model's: a name (chatml, llama3, ...) or a\n"
    "                         template text (--chat auto is then on)\n"
    "      --agree-k K        generated tokens compared with the full cache (default 8, 0: off)\n"
    "      --seed S           base seed of the generators (default 0)\n"
    "  -o, --out DIR          output directory (default eval-out)\n"
    "      --resume           continue DIR's run, skipping finished lines\n"
    "      --force            delete DIR's results and start over\n"
    "      --report-only      only rewrite the summary and plots from DIR/results.jsonl\n"
    "  -t, --threads N        threads (default: all CPUs, shared among MPI ranks on a node)\n"
    "      --simd L           auto, scalar, avx2, avx512\n"
    "      --cache-type T     how the KV cache stores keys and values: f16 (default), f32, q8_0, q4_0\n"
    "                         (--cache-type-k/-ctk, --cache-type-v/-ctv: keys or values alone); a resumed\n"
    "                         run keeps its types\n"
    "      --list-tasks       the tasks and what they test\n"
    "  -h, --help             this help (and --help-press for every press and its options)\n"
#ifdef PKV_MPI
    "\nBuilt with MPI: under mpirun, ranks share the samples and rank 0 merges the results.\n"
#endif
    ;


/* ---------------------------------------------------------------- argument lists */

/* Splits a comma list into items (in place in a copy); returns the count or -1. */
static int split_list(const char *cmd, const char *flag, const char *s, char items[][96], int max) {
    int n = 0;
    const char *p = s;
    while (*p) {
        const char *q = strchr(p, ',');
        size_t len = q ? (size_t)(q - p) : strlen(p);
        if (len == 0 || len >= 96) {
            cli_error(cmd, "%s: bad list item in '%s'", flag, s);
            return -1;
        }
        if (n == max) {
            cli_error(cmd, "%s: more than %d items", flag, max);
            return -1;
        }
        memcpy(items[n], p, len);
        items[n++][len] = '\0';
        p += len;
        if (*p == ',') p++;
    }
    if (n == 0) cli_error(cmd, "%s needs at least one item", flag);
    return n ? n : -1;
}

static int int_list(const char *flag, const char *s, long lo, long hi, int *out) {
    char items[MAX_LIST][96];
    int n = split_list("eval", flag, s, items, MAX_LIST);
    for (int i = 0; i < n; i++) {
        long v;
        if (!cli_int("eval", flag, items[i], lo, hi, &v)) return -1;
        out[i] = (int)v;
    }
    return n;
}

static int float_list(const char *flag, const char *s, double lo, double hi, double *out) {
    char items[MAX_LIST][96];
    int n = split_list("eval", flag, s, items, MAX_LIST);
    for (int i = 0; i < n; i++)
        if (!cli_float("eval", flag, items[i], lo, hi, &out[i])) return -1;
    return n;
}

static const char *const TIER1[] = {"niah_single_1",
                                    "niah_single_2",
                                    "niah_single_3",
                                    "niah_multikey_2",
                                    "niah_multivalue",
                                    "niah_multiquery",
                                    "vt",
                                    "fwe",
                                    "cwe",
                                    "longeval_lines",
                                    "niah_passkey_essay",
                                    "niah_classic"};

static int add_task(eval_args *a, const pkv_eval_task *t) {
    for (int i = 0; i < a->n_tasks; i++)
        if (a->tasks[i] == t) return 0;
    if (a->n_tasks == MAX_LIST) return -1;
    a->tasks[a->n_tasks++] = t;
    return 0;
}

static int parse_tasks(eval_args *a, const char *flag, const char *s) {
    char items[MAX_LIST][96];
    int n = split_list("eval", flag, s, items, MAX_LIST);
    if (n < 0) return -1;
    a->n_tasks = 0;
    for (int i = 0; i < n; i++) {
        const char *it = items[i];
        if (!strcmp(it, "tier1")) {
            for (size_t k = 0; k < sizeof TIER1 / sizeof TIER1[0]; k++) add_task(a, pkv_eval_task_find(TIER1[k]));
        } else if (!strcmp(it, "all") || !strcmp(it, "ruler") || !strcmp(it, "grid")) {
            for (int k = 0; k < pkv_eval_task_count(); k++) {
                const pkv_eval_task *t = pkv_eval_task_get(k);
                bool want =
                    !strcmp(it, "all") || (!strcmp(it, "grid") ? t->grid : (!t->grid && t->kind != PKV_TASK_LONGEVAL));
                if (want) add_task(a, t);
            }
        } else {
            const pkv_eval_task *t = pkv_eval_task_find(it);
            if (!t) {
                cli_error("eval", "unknown task '%s' (see promptkv eval --list-tasks)", it);
                return -1;
            }
            add_task(a, t);
        }
    }
    return 0;
}

static bool is_listed(const char (*names)[32], int n, const char *name) {
    for (int i = 0; i < n; i++)
        if (!strcmp(names[i], name)) return true;
    return false;
}

/* One --press item: PRESS, PRESS:KEY=VALUE[:KEY=VALUE...] (options of this
 * press only), or LABEL=PRESS:... to name the variant in tables and plots. */
static int parse_press_item(eval_args *a, const char *item) {
    const char *colon = strchr(item, ':'), *eq = strchr(item, '=');
    char label[96] = "", spec[160];
    const char *body = item;
    if (eq && (!colon || eq < colon)) {
        snprintf(label, sizeof label, "%.*s", (int)(eq - item), item);
        body = eq + 1;
        colon = strchr(body, ':');
    }
    char base[96];
    snprintf(base, sizeof base, "%.*s", (int)(colon ? (size_t)(colon - body) : strlen(body)), body);
    snprintf(spec, sizeof spec, "%s", colon ? colon : "");
    if (!label[0]) snprintf(label, sizeof label, "%.95s", body);
    const char *name, *summary;
    bool known = false;
    for (int k = 0; pkv_press_list(k, &name, &summary) && !known; k++) known = !strcmp(name, base);
    if (!known) {
        cli_error("eval", "unknown press '%s' in --press item '%s' (see promptkv run --help-press)", base, item);
        return -1;
    }
    if (strlen(label) >= sizeof a->presses[0] || strlen(base) >= sizeof a->press_base[0] ||
        strlen(colon ? colon : "") >= sizeof a->press_spec[0]) {
        cli_error("eval", "--press item '%s' is too long (labels up to %zu bytes)", item, sizeof a->presses[0] - 1);
        return -1;
    }
    for (const char *o = spec; *o;) { /* each option is KEY=VALUE */
        const char *next = strchr(o + 1, ':');
        size_t len = next ? (size_t)(next - o - 1) : strlen(o + 1);
        const char *e = memchr(o + 1, '=', len);
        if (!e || e == o + 1 || len == (size_t)(e - o)) {
            cli_error("eval", "--press item '%s': options are :KEY=VALUE", item);
            return -1;
        }
        o = next ? next : o + 1 + len;
    }
    if (is_listed(a->presses, a->n_presses, label)) {
        cli_error("eval", "--press: '%s' is listed twice (give variants their own LABEL=PRESS:...)", label);
        return -1;
    }
    int i = a->n_presses++;
    snprintf(a->presses[i], sizeof a->presses[0], "%.31s", label);
    snprintf(a->press_base[i], sizeof a->press_base[0], "%.31s", base);
    snprintf(a->press_spec[i], sizeof a->press_spec[0], "%.159s", spec);
    return 0;
}

static int parse_presses(eval_args *a, const char *flag, const char *s) {
    char items[MAX_LIST][96];
    int n = split_list("eval", flag, s, items, MAX_LIST);
    if (n < 0) return -1;
    a->n_presses = 0;
    for (int i = 0; i < n; i++)
        if (parse_press_item(a, items[i])) return -1;
    return 0;
}

/* --ratio-presses: names only; that each one is in --press is checked once all flags are read. */
static int parse_ratio_presses(eval_args *a, const char *flag, const char *s) {
    char items[MAX_LIST][96];
    int n = split_list("eval", flag, s, items, MAX_LIST);
    if (n < 0) return -1;
    for (int i = 0; i < n; i++) snprintf(a->ratio_presses[i], sizeof a->ratio_presses[0], "%.31s", items[i]);
    a->n_ratio_presses = n;
    return 0;
}

/* Whether a press runs at the ratios as well as at the budgets. */
bool eval_runs_ratios(const eval_args *a, const char *press) {
    return a->n_ratio_presses < 0 || is_listed(a->ratio_presses, a->n_ratio_presses, press);
}

static int add_opt(eval_args *a, const char *key, const char *value) {
    if (a->n_opts == MAX_LIST) {
        cli_error("eval", "too many press options");
        return -1;
    }
    if (key)
        snprintf(a->opt_store[a->n_opts], sizeof a->opt_store[0], "%s=%s", key, value);
    else
        snprintf(a->opt_store[a->n_opts], sizeof a->opt_store[0], "%s", value);
    if (!strchr(a->opt_store[a->n_opts], '=')) {
        cli_error("eval", "--press-opt expects KEY=VALUE or PRESS.KEY=VALUE, got '%s'", value);
        return -1;
    }
    a->opts[a->n_opts] = a->opt_store[a->n_opts];
    a->n_opts++;
    return 0;
}

static void defaults(eval_args *a) {
    memset(a, 0, sizeof *a);
    a->out_dir = "eval-out";
    a->lengths[0] = 1024, a->lengths[1] = 2048, a->n_lengths = 2;
    a->samples = 5;
    a->grid_lengths[0] = 512, a->grid_lengths[1] = 1024, a->grid_lengths[2] = 2048, a->n_grid_lengths = 3;
    for (int i = 0; i < 5; i++) a->grid_depths[i] = 25.0 * i;
    a->n_grid_depths = 5;
    a->grid_samples = 1;
    const char *name, *summary;
    for (int k = 0; pkv_press_list(k, &name, &summary) && a->n_presses < MAX_LIST; k++) {
        if (pkv_press_reconstructs(name)) continue; /* prefills again for every config: only when named */
        snprintf(a->presses[a->n_presses], sizeof a->presses[0], "%.31s", name);
        snprintf(a->press_base[a->n_presses++], sizeof a->press_base[0], "%.31s", name);
    }
    a->chat = -1;
    int b[] = {64, 128, 256, 512};
    for (int i = 0; i < 4; i++) a->budgets[i] = b[i];
    a->n_budgets = 4;
    a->modes[0] = PKV_EVAL_QUERY_AGNOSTIC;
    a->n_modes = 1;
    a->n_ratio_presses = -1;
    a->window = 32;
    a->agree_k = 8;
}

static void list_tasks(void) {
    puts("tasks (tier1 = the development suite of docs/evaluation.md §5.2):");
    for (int k = 0; k < pkv_eval_task_count(); k++) {
        const pkv_eval_task *t = pkv_eval_task_get(k);
        bool tier1 = false;
        for (size_t i = 0; i < sizeof TIER1 / sizeof TIER1[0]; i++) tier1 |= !strcmp(TIER1[i], t->name);
        printf("  %-20s %s%s (decode cap %d)\n", t->name, t->summary, tier1 ? " [tier1]" : "", t->max_new_tokens);
    }
}

/* ---------------------------------------------------------------- the flags */

/* The flags a table says (cli/flags.h), then those that take lists or fill
 * two fields (list_flag). */
static const cli_flag EVAL_FLAGS[] = {
    {"--model", "-m", CLI_TEXT, offsetof(eval_args, model_path), 0, 0, NULL},
    {"--out", "-o", CLI_TEXT, offsetof(eval_args, out_dir), 0, 0, NULL},
    {"--samples", NULL, CLI_INT, offsetof(eval_args, samples), 1, 100000, NULL},
    {"--niah-samples", NULL, CLI_INT, offsetof(eval_args, grid_samples), 1, 100000, NULL},
    {"--chat-template", NULL, CLI_TEXT, offsetof(eval_args, chat_template), 0, 0, NULL},
    {"--agree-k", NULL, CLI_INT, offsetof(eval_args, agree_k), 0, 4096, NULL},
    {"--seed", NULL, CLI_U64, offsetof(eval_args, seed), 0, 0, NULL},
    {"--resume", NULL, CLI_TRUE, offsetof(eval_args, resume), 0, 0, NULL},
    {"--force", NULL, CLI_TRUE, offsetof(eval_args, force), 0, 0, NULL},
    {"--report-only", NULL, CLI_TRUE, offsetof(eval_args, report_only), 0, 0, NULL},
    {"--threads", "-t", CLI_INT, offsetof(eval_args, threads), 1, 1024, NULL},
    {"--simd", NULL, CLI_SIMD, offsetof(eval_args, simd), 0, 0, NULL},
    {"--cache-type", NULL, CLI_CACHE_TYPES, offsetof(eval_args, cache), 0, 0, NULL},
    {"--cache-type-k", "-ctk", CLI_CACHE_TYPE, offsetof(eval_args, cache.k), 0, 0, NULL},
    {"--cache-type-v", "-ctv", CLI_CACHE_TYPE, offsetof(eval_args, cache.v), 0, 0, NULL},
    {NULL, NULL, 0, 0, 0, 0, NULL},
};

static int parse_lengths(eval_args *a, const char *f, const char *v) {
    return (a->n_lengths = int_list(f, v, 64, 1 << 20, a->lengths)) < 0 ? -1 : 0;
}

static int parse_grid_lengths(eval_args *a, const char *f, const char *v) {
    return (a->n_grid_lengths = int_list(f, v, 64, 1 << 20, a->grid_lengths)) < 0 ? -1 : 0;
}

static int parse_grid_depths(eval_args *a, const char *f, const char *v) {
    return (a->n_grid_depths = float_list(f, v, 0.0, 100.0, a->grid_depths)) < 0 ? -1 : 0;
}

static int parse_budgets(eval_args *a, const char *f, const char *v) {
    if (!strcmp(v, "none")) a->n_budgets = 0;
    else if ((a->n_budgets = int_list(f, v, 1, 1 << 24, a->budgets)) < 0) return -1;
    return 0;
}

static int parse_ratios(eval_args *a, const char *f, const char *v) {
    if (!strcmp(v, "none")) a->n_ratios = 0;
    else if ((a->n_ratios = float_list(f, v, 0.0, 0.999999, a->ratios)) < 0) return -1;
    return 0;
}

static int parse_modes(eval_args *a, const char *f, const char *v) {
    char items[4][96];
    int k = split_list("eval", f, v, items, 4);
    if (k < 0) return -1;
    a->n_modes = 0;
    for (int j = 0; j < k; j++) {
        pkv_eval_mode m;
        if (!strcmp(items[j], "query_agnostic"))
            m = PKV_EVAL_QUERY_AGNOSTIC;
        else if (!strcmp(items[j], "query_aware"))
            m = PKV_EVAL_QUERY_AWARE;
        else {
            cli_error("eval", "--mode must be query_agnostic and/or query_aware, got '%s'", items[j]);
            return -1;
        }
        bool dup = false;
        for (int d = 0; d < a->n_modes; d++) dup |= a->modes[d] == m;
        if (!dup) a->modes[a->n_modes++] = m;
    }
    return 0;
}

/* --window sets the window the budgets are checked against and is an option of every press. */
static int parse_window(eval_args *a, const char *f, const char *v) {
    long n;
    if (!cli_int("eval", f, v, 1, 1 << 20, &n)) return -1;
    a->window = (int)n;
    return add_opt(a, "window", v);
}

/* --kernel K and --pool P: the press option of that name */
static int parse_press_flag(eval_args *a, const char *f, const char *v) { return add_opt(a, f + 2, v); }

static int parse_press_opt(eval_args *a, const char *f, const char *v) { return add_opt(a, NULL, v); }

static int parse_chat(eval_args *a, const char *f, const char *v) {
    if (!strcmp(v, "auto")) a->chat = -1;
    else if (!strcmp(v, "on")) a->chat = 1;
    else if (!strcmp(v, "off")) a->chat = 0;
    else {
        cli_error("eval", "--chat must be auto, on or off, got '%s'", v);
        return -1;
    }
    return 0;
}

static const struct {
    const char *flag;
    int (*parse)(eval_args *a, const char *flag, const char *value);
} LIST_FLAGS[] = {
    {"--tasks", parse_tasks},
    {"--lengths", parse_lengths},
    {"--niah-lengths", parse_grid_lengths},
    {"--niah-depths", parse_grid_depths},
    {"--press", parse_presses},
    {"--budgets", parse_budgets},
    {"--ratios", parse_ratios},
    {"--ratio-presses", parse_ratio_presses},
    {"--mode", parse_modes},
    {"--window", parse_window},
    {"--kernel", parse_press_flag},
    {"--pool", parse_press_flag},
    {"--press-opt", parse_press_opt},
    {"--chat", parse_chat},
};

/* cli_parse_command's extra: --list-tasks, and the flags of LIST_FLAGS. */
static int list_flag(void *args, int argc, char **argv, int *i) {
    const char *f = argv[*i];
    if (!strcmp(f, "--list-tasks")) {
        list_tasks();
        return CLI_FLAG_DONE;
    }
    for (size_t k = 0; k < sizeof LIST_FLAGS / sizeof LIST_FLAGS[0]; k++) {
        if (strcmp(f, LIST_FLAGS[k].flag)) continue;
        const char *v = cli_value("eval", argc, argv, i);
        return v && !LIST_FLAGS[k].parse(args, f, v) ? 1 : -1;
    }
    return 0;
}

int eval_parse_args(int argc, char **argv, eval_args *a) {
    const char *cmd = "eval";
    defaults(a);
    int rc = cli_parse_command(cmd, EVAL_USAGE, true, NULL, NULL, EVAL_FLAGS, a, list_flag, false, argc, argv);
    if (rc) return rc;
    /* --tasks leaves at least one task */
    if (!a->n_tasks && parse_tasks(a, "--tasks", "tier1")) return -1;
    if (!a->model_path && !a->report_only) {
        cli_error(cmd, "a model is required (-m MODEL)");
        return -1;
    }
    if (a->resume && a->force) {
        cli_error(cmd, "give at most one of --resume and --force");
        return -1;
    }
    for (int i = 0; i < a->n_ratio_presses; i++)
        if (!is_listed(a->presses, a->n_presses, a->ratio_presses[i])) {
            cli_error(cmd, "--ratio-presses: '%s' is not among the presses of --press", a->ratio_presses[i]);
            return -1;
        }
    for (int i = 0; i < a->n_budgets; i++)
        if (a->budgets[i] <= a->window) {
            cli_error(cmd, "budget %d must be larger than the observation window %d (see --window)", a->budgets[i],
                      a->window);
            return -1;
        }
    return 0;
}

