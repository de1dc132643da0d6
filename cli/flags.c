#include "flags.h"

#include <stdio.h>
#include <string.h>

#include "args.h"
#include "press_args.h"

const cli_flag CLI_ENGINE_FLAGS[] = {
    {"--model", "-m", CLI_TEXT, offsetof(cli_engine_args, model_path), 0, 0, NULL},
    {"--threads", "-t", CLI_INT, offsetof(cli_engine_args, n_threads), 1, 1024, NULL},
    {"--batch", "-b", CLI_INT, offsetof(cli_engine_args, n_batch), 1, 1 << 20, NULL},
    {"--cache-type", NULL, CLI_CACHE_TYPES, offsetof(cli_engine_args, cache), 0, 0, NULL},
    {"--cache-type-k", "-ctk", CLI_CACHE_TYPE, offsetof(cli_engine_args, cache.k), 0, 0, NULL},
    {"--cache-type-v", "-ctv", CLI_CACHE_TYPE, offsetof(cli_engine_args, cache.v), 0, 0, NULL},
    {"--simd", NULL, CLI_SIMD, offsetof(cli_engine_args, simd), 0, 0, NULL},
    {"--chat-template", NULL, CLI_TEXT, offsetof(cli_engine_args, chat_template), 0, 0, NULL},
    {"--gguf-layout", NULL, CLI_TRUE, offsetof(cli_engine_args, gguf_layout), 0, 0, NULL},
    {NULL, NULL, 0, 0, 0, 0, NULL},
};

static const cli_flag *find(const cli_flag *table, const char *f) {
    for (const cli_flag *fl = table; fl->name; fl++)
        if (!strcmp(f, fl->name) || (fl->alias && !strcmp(f, fl->alias))) return fl;
    return NULL;
}

static bool store(const char *cmd, const cli_flag *fl, const char *f, const char *v, void *field) {
    long n;
    double d;
    switch (fl->kind) {
    case CLI_TEXT: *(const char **)field = v; return true;
    case CLI_INT:
        if (!cli_int(cmd, f, v, (long)fl->lo, (long)fl->hi, &n)) return false;
        *(int *)field = (int)n;
        return true;
    case CLI_UINT:
        if (!cli_int(cmd, f, v, (long)fl->lo, (long)fl->hi, &n)) return false;
        *(unsigned *)field = (unsigned)n;
        return true;
    case CLI_FLOAT:
        if (!cli_float(cmd, f, v, fl->lo, fl->hi, &d)) return false;
        *(float *)field = (float)d;
        return true;
    case CLI_DOUBLE: return cli_float(cmd, f, v, fl->lo, fl->hi, (double *)field);
    case CLI_U64: return cli_u64(cmd, f, v, (uint64_t *)field);
    case CLI_SIZE: return cli_size(cmd, f, v, (uint64_t *)field);
    case CLI_SIMD: return cli_simd(cmd, v, (pkv_simd *)field);
    case CLI_CACHE_TYPE: return cli_cache_type(cmd, f, v, (pkv_cache_type *)field);
    case CLI_CACHE_TYPES: {
        cli_cache_types *t = field;
        if (!cli_cache_type(cmd, f, v, &t->k)) return false;
        t->v = t->k;
        return true;
    }
    case CLI_RESIDUAL_TYPE: return cli_residual_type(cmd, f, v, (pkv_residual_type *)field);
    case CLI_TRUE:
    case CLI_FALSE: break;
    }
    return false;
}

int cli_flag_parse(const char *cmd, const cli_flag *table, void *args, int argc, char **argv, int *i) {
    const char *f = argv[*i];
    const cli_flag *fl = find(table, f);
    if (!fl) return 0;
    void *field = (char *)args + fl->offset;
    if (fl->kind == CLI_TRUE || fl->kind == CLI_FALSE) {
        *(bool *)field = fl->kind == CLI_TRUE;
        return 1;
    }
    const char *v = cli_value(cmd, argc, argv, i);
    if (!v || !store(cmd, fl, f, v, field)) return -1;
    if (fl->check && !fl->check(cmd, f, v, field)) return -1;
    return 1;
}

int cli_command_flag(const char *cmd, cli_engine_args *engine, const cli_flag *own, void *args, int argc,
                     char **argv, int *i) {
    int rc = engine ? cli_flag_parse(cmd, CLI_ENGINE_FLAGS, engine, argc, argv, i) : 0;
    return rc ? rc : cli_flag_parse(cmd, own, args, argc, argv, i);
}

int cli_parse_command(const char *cmd, const char *usage, bool help_press, struct press_args *pa,
                      cli_engine_args *engine, const cli_flag *own, void *args,
                      int (*extra)(void *args, int argc, char **argv, int *i), bool unknown_takes_value, int argc,
                      char **argv) {
    for (int i = 1; i < argc; i++) {
        const char *f = argv[i];
        if (!strcmp(f, "-h") || !strcmp(f, "--help") || (help_press && !strcmp(f, "--help-press"))) {
            fputs(usage, stdout);
            if (pa || !strcmp(f, "--help-press")) press_args_usage(stdout); /* eval lists the presses too */
            return 1;
        }
        int rc = pa ? press_args_parse(pa, cmd, argc, argv, &i) : 0;
        if (rc == 0) rc = cli_command_flag(cmd, engine, own, args, argc, argv, &i);
        if (rc == 0 && extra) rc = extra(args, argc, argv, &i);
        if (rc < 0) return -1;
        if (rc == CLI_FLAG_DONE) return 1;
        if (rc == 0) {
            if (unknown_takes_value && !cli_value(cmd, argc, argv, &i)) return -1;
            cli_error(cmd, "unknown option '%s' (see promptkv %s --help)", f, cmd);
            return -1;
        }
    }
    return 0;
}
