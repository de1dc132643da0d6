/* promptkv eval's arguments (eval_args.c): what to sweep, where to write. */
#ifndef PKV_CLI_EVAL_ARGS_H
#define PKV_CLI_EVAL_ARGS_H

#include <stdbool.h>
#include <stdint.h>

#include "eval/runner.h"
#include "flags.h"
#include "eval/tasks.h"
#include "promptkv.h"

enum { MAX_LIST = 64, MAX_CONFIGS = 512 };

typedef struct {
    const char *model_path;
    const char *out_dir;
    const pkv_eval_task *tasks[MAX_LIST];
    int n_tasks;
    int lengths[MAX_LIST], n_lengths;
    int samples;
    int grid_lengths[MAX_LIST], n_grid_lengths;
    double grid_depths[MAX_LIST];
    int n_grid_depths;
    int grid_samples;
    char presses[MAX_LIST][32]; /* labels: the registry name, or LABEL of LABEL=PRESS:... */
    char press_base[MAX_LIST][32];
    char press_spec[MAX_LIST][160]; /* ":KEY=VALUE" options of the item, "" for none */
    int n_presses;
    int budgets[MAX_LIST], n_budgets;
    double ratios[MAX_LIST];
    int n_ratios;
    char ratio_presses[MAX_LIST][32]; /* presses run at the ratios; n_ratio_presses < 0: all */
    int n_ratio_presses;
    pkv_eval_mode modes[2];
    int n_modes;
    const char *opts[MAX_LIST];
    int n_opts;
    char opt_store[MAX_LIST][96];
    int window;
    int agree_k;
    uint64_t seed;
    bool resume, force, report_only;
    int chat; /* -1 auto (when the file has a chat template), 0 off, 1 on */
    const char *chat_template; /* --chat-template: the chat format's name or a template text; NULL: the model's */
    int threads;
    pkv_simd simd;
    cli_cache_types cache; /* how the sessions' caches store keys and values */
} eval_args;

/* Parses argv; 0, 1 when help or the task list was printed, -1 with an error printed. */
int eval_parse_args(int argc, char **argv, eval_args *a);

/* Whether press runs at the ratios too (--ratio-presses). */
bool eval_runs_ratios(const eval_args *a, const char *press);

#endif
