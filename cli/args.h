/* Command-line helpers shared by the subcommands: strict number parsing and
 * one-line errors. */
#ifndef PKV_CLI_ARGS_H
#define PKV_CLI_ARGS_H

#include <stdbool.h>
#include <stdint.h>

#include "promptkv.h"

/* Exit codes: 0 ok, 1 runtime error (bad model, prompt too long, ...), 2 usage
 * error (unknown flag, bad value), 130 interrupted. */
enum { EXIT_RUNTIME = 1, EXIT_USAGE = 2, EXIT_INTERRUPTED = 130 };

/* Prints "promptkv CMD: error: ..." on stderr. */
void cli_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Value of a flag that takes one: argv[*i + 1], advancing *i; NULL (and an
 * error printed) when it is missing. */
const char *cli_value(const char *cmd, int argc, char **argv, int *i);

/* Strict parsers: the whole string must be a number within [lo, hi]. They
 * print an error naming the flag and return false otherwise. */
bool cli_int(const char *cmd, const char *flag, const char *s, long lo, long hi, long *out);
bool cli_u64(const char *cmd, const char *flag, const char *s, uint64_t *out);
bool cli_float(const char *cmd, const char *flag, const char *s, double lo, double hi, double *out);
/* Sizes like 512M, 8G, 1024 (bytes). */
bool cli_size(const char *cmd, const char *flag, const char *s, uint64_t *out);

/* The largest text file -f, --question-file and the like read: 64 MiB, some
 * 16 million tokens, far beyond any context (docs/input-limits.md). */
#define CLI_MAX_TEXT_FILE ((size_t)64 << 20)

/* Reads a whole file into a NUL-terminated buffer; NULL and an error printed
 * on failure or past CLI_MAX_TEXT_FILE. */
char *cli_read_file(const char *cmd, const char *path, size_t *len);

bool cli_simd(const char *cmd, const char *s, pkv_simd *out);
/* The value of a cache type flag (--cache-type, -k, -v): f16, f32, q8_0, q4_0. */
bool cli_cache_type(const char *cmd, const char *flag, const char *s, pkv_cache_type *out);
/* The value of --residual-type: f32, f16, q8_0. */
bool cli_residual_type(const char *cmd, const char *flag, const char *s, pkv_residual_type *out);

/* The model's name for titles, file names and the API: the file name without
 * ".gguf" ("models/gemma-3-270m-q4_k_m.gguf" -> "gemma-3-270m-q4_k_m"). */
void cli_model_id(const char *path, char *out, size_t len);

/* A model loaded with the error reported; NULL on failure. */
pkv_model *cli_load_model(const char *cmd, const char *path, pkv_simd simd);
/* The same with a chat format (--chat-template: a name or a template text; NULL: the model's). */
pkv_model *cli_load_model_chat(const char *cmd, const char *path, pkv_simd simd, const char *chat_template,
                               bool gguf_layout);

#endif
