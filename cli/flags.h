/* Command-line flags as data: each command lists its flags in a table (name,
 * alias, kind, the field its value goes to, range), and one parser reads
 * them. The flags run, serve and bench share are one table, CLI_ENGINE_FLAGS,
 * over cli_engine_args, which each command's arguments embed. */
#ifndef PKV_CLI_FLAGS_H
#define PKV_CLI_FLAGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "promptkv.h"

typedef enum {
    CLI_TEXT,       /* const char *: the argument itself */
    CLI_INT,        /* int in [lo, hi] */
    CLI_UINT,       /* unsigned in [lo, hi] */
    CLI_FLOAT,      /* float in [lo, hi] */
    CLI_DOUBLE,     /* double in [lo, hi] */
    CLI_U64,        /* uint64_t */
    CLI_SIZE,       /* uint64_t from 512M, 8G, 1024 ... */
    CLI_TRUE,       /* bool set, no value */
    CLI_FALSE,      /* bool cleared, no value */
    CLI_SIMD,       /* pkv_simd from auto, scalar, avx2, avx512 */
    CLI_CACHE_TYPE, /* pkv_cache_type from f16, f32, q8_0, q4_0 */
    CLI_CACHE_TYPES, /* both fields of a cli_cache_types from one of those */
    CLI_RESIDUAL_TYPE /* pkv_residual_type from f32, f16, q8_0 */
} cli_flag_kind;

/* How the cache stores keys and values: --cache-type sets both,
 * --cache-type-k/-ctk and --cache-type-v/-ctv each (llama.cpp's flags). */
typedef struct {
    pkv_cache_type k, v;
} cli_cache_types;

typedef struct cli_flag {
    const char *name;  /* "--threads"; NULL ends a table */
    const char *alias; /* "-t", or NULL */
    cli_flag_kind kind;
    size_t offset;     /* of the field in the arguments struct */
    double lo, hi;     /* the range of numeric kinds */
    /* Optional: a further check of the parsed value (an error printed, false). */
    bool (*check)(const char *cmd, const char *flag, const char *text, const void *field);
} cli_flag;

/* If argv[*i] is a flag of table, stores its value in args (advancing *i past
 * it) and returns 1; 0 when it is not one; -1 with an error printed. */
int cli_flag_parse(const char *cmd, const cli_flag *table, void *args, int argc, char **argv, int *i);

/* What every command that runs the model takes. */
typedef struct {
    const char *model_path;
    int n_threads;  /* 0: the command's default */
    int n_batch;    /* 0: the library's default */
    cli_cache_types cache;
    pkv_simd simd;
    const char *chat_template; /* --chat-template: a chat format's name or a template text; NULL: the model's */
    bool gguf_layout;          /* --gguf-layout: weights as in the file (pkv_load_opts.gguf_layout) */
} cli_engine_args;

/* -m/--model, -t/--threads, -b/--batch, --cache-type, --cache-type-k/-ctk,
 * --cache-type-v/-ctv, --simd, --chat-template, --gguf-layout */
extern const cli_flag CLI_ENGINE_FLAGS[];

/* Parses argv[*i] with the shared flags into engine (when not NULL), then the
 * command's own table into args: 1, 0 or -1 as cli_flag_parse. */
int cli_command_flag(const char *cmd, cli_engine_args *engine, const cli_flag *own, void *args, int argc,
                     char **argv, int *i);

/* What extra returns for a flag that printed what it was asked for (eval's
 * --list-tasks): the command ends there, as after --help. */
enum { CLI_FLAG_DONE = 2 };

/* A command's whole argument list: -h/--help (and --help-press when
 * help_press) print usage and the press options; then the press flags, the
 * shared flags, the command's own table and, when not NULL, extra (flags a
 * table cannot say: 1, 0 or -1 as cli_flag_parse, or CLI_FLAG_DONE). pa and
 * engine may be NULL for a command that takes no press flags (then no press
 * options are printed) or none of the shared flags. An unknown flag is an
 * error (after its value, when unknown_takes_value). Returns 0, 1 when the
 * usage was printed (or extra said CLI_FLAG_DONE), -1 with an error printed. */
struct press_args;
int cli_parse_command(const char *cmd, const char *usage, bool help_press, struct press_args *pa,
                      cli_engine_args *engine, const cli_flag *own, void *args,
                      int (*extra)(void *args, int argc, char **argv, int *i), bool unknown_takes_value, int argc,
                      char **argv);

#endif
