#include "press_args.h"

#include <stdio.h>
#include <string.h>

#include "args.h"

/* --flag -> press option key (common options and SnapKV's), and the value's name in the help */
static const struct {
    const char *flag, *key, *value;
} FLAG_KEYS[] = {
    {"--budget", "budget", "C"},         {"--ratio", "ratio", "r"},
    {"--window", "window", "W"},         {"--kernel", "kernel", "K"},
    {"--pool", "pool", "P"},             {"--granularity", "granularity", "G"},
    {"--group-agg", "group_agg", "A"},   {"--mode", "mode", "M"},
    {"--protect", "protect", "B:E"},     {"--layer-budget", "layer_budget", "L"},
    {"--head-budget", "head_budget", "H"}, {"--press-seed", "seed", "S"},
};

int press_args_parse(press_args *pa, const char *cmd, int argc, char **argv, int *i) {
    const char *f = argv[*i], *v;
    if (!strcmp(f, "--press")) {
        if (!(v = cli_value(cmd, argc, argv, i))) return -1;
        pa->press = v;
        return 1;
    }
    if (!strcmp(f, "--protect-system")) {
        pa->protect_system = true;
        return 1;
    }
    const char *key = NULL;
    for (size_t k = 0; k < sizeof FLAG_KEYS / sizeof FLAG_KEYS[0]; k++)
        if (!strcmp(f, FLAG_KEYS[k].flag)) key = FLAG_KEYS[k].key;
    if (!key && !strcmp(f, "--press-opt")) {
        /* --press-opt key=value: any option of the chosen press */
        if (!(v = cli_value(cmd, argc, argv, i))) return -1;
        const char *eq = strchr(v, '=');
        if (!eq || eq == v) {
            cli_error(cmd, "--press-opt expects key=value, got '%s'", v);
            return -1;
        }
        if (pa->n_opts == PRESS_ARGS_MAX_OPTS) {
            cli_error(cmd, "too many press options");
            return -1;
        }
        size_t kl = (size_t)(eq - v) < sizeof pa->keys[0] - 1 ? (size_t)(eq - v) : sizeof pa->keys[0] - 1;
        memcpy(pa->keys[pa->n_opts], v, kl);
        pa->keys[pa->n_opts][kl] = '\0';
        pa->values[pa->n_opts++] = eq + 1;
        return 1;
    }
    if (!key && pa->press && !strncmp(f, "--", 2)) {
        /* --<press>-<option> VALUE, e.g. --protokv-m 32 */
        size_t pl = strlen(pa->press);
        if (!strncmp(f + 2, pa->press, pl) && f[2 + pl] == '-' && f[3 + pl]) key = f + 3 + pl;
    }
    if (!key) return 0;
    if (!(v = cli_value(cmd, argc, argv, i))) return -1;
    if (pa->n_opts == PRESS_ARGS_MAX_OPTS) {
        cli_error(cmd, "too many press options");
        return -1;
    }
    snprintf(pa->keys[pa->n_opts], sizeof pa->keys[0], "%s", key);
    pa->values[pa->n_opts++] = v;
    if (!strcmp(key, "mode")) pa->mode = v;
    return 1;
}

pkv_press_cfg *press_args_build(const press_args *pa, const char *cmd) {
    pkv_error err;
    pkv_press_cfg *cfg = pkv_press_cfg_new(pa->press ? pa->press : "none", &err);
    if (!cfg) {
        cli_error(cmd, "%s", err.msg);
        return NULL;
    }
    if (!pa->press && pa->n_opts > 0) {
        cli_error(cmd, "press options given without --press (e.g. --press snapkv)");
        pkv_press_cfg_free(cfg);
        return NULL;
    }
    for (int k = 0; k < pa->n_opts; k++) {
        /* option keys in flags use '-', the library uses '_' */
        char key[64];
        snprintf(key, sizeof key, "%s", pa->keys[k]);
        for (char *p = key; *p; p++)
            if (*p == '-') *p = '_';
        if (pkv_press_cfg_set(cfg, key, pa->values[k], &err)) {
            cli_error(cmd, "%s", err.msg);
            pkv_press_cfg_free(cfg);
            return NULL;
        }
    }
    if (pkv_press_cfg_check(cfg, &err)) {
        cli_error(cmd, "%s", err.msg);
        pkv_press_cfg_free(cfg);
        return NULL;
    }
    return cfg;
}

/* The help of a press option (NULL press: the common ones first). */
static const char *option_help(const char *press, const char *key) {
    const char *k, *help;
    for (int i = 0; pkv_press_option_list(press, i, &k, &help); i++)
        if (!strcmp(k, key)) return help;
    return NULL;
}

void press_args_usage(FILE *out) {
    fputs("\ncompression (after the prompt is read, each full-attention layer's cache is cut to a budget):\n"
          "      --press NAME       ",
          out);
    const char *name, *summary;
    for (int i = 0; pkv_press_list(i, &name, &summary); i++) fprintf(out, "%s%s", i ? ", " : "", name);
    fputs(" (default none)\n", out);
    /* the flags for options, with the registry's help (snapkv's own flags are its options) */
    for (size_t k = 0; k < sizeof FLAG_KEYS / sizeof FLAG_KEYS[0]; k++) {
        const char *help = option_help(NULL, FLAG_KEYS[k].key);
        if (!help) help = option_help("snapkv", FLAG_KEYS[k].key);
        char flag[48];
        snprintf(flag, sizeof flag, "%s %s", FLAG_KEYS[k].flag, FLAG_KEYS[k].value);
        fprintf(out, "      %-18s %s\n", flag, help ? help : "");
    }
    fputs("      --protect-system   with --chat: protect the system prompt\n"
          "      --press-opt K=V    any option of the press; also --<press>-<option> V\n",
          out);
    for (int i = 1; pkv_press_list(i, &name, &summary); i++) {
        fprintf(out, "  %-13s %s\n", name, summary);
        const char *key, *help;
        int n_common = 0;
        while (pkv_press_option_list(NULL, n_common, &key, &help)) n_common++;
        for (int k = n_common; pkv_press_option_list(name, k, &key, &help); k++)
            fprintf(out, "      %-16s %s\n", key, help);
    }
}
