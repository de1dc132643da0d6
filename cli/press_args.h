/* Press flags shared by run, inspect, bench and serve. */
#ifndef PKV_CLI_PRESS_ARGS_H
#define PKV_CLI_PRESS_ARGS_H

#include <stdbool.h>
#include <stdio.h>

#include "promptkv.h"

enum { PRESS_ARGS_MAX_OPTS = 64 };

typedef struct press_args {
    const char *press;                      /* NULL: none */
    char keys[PRESS_ARGS_MAX_OPTS][64];     /* option key/value pairs in flag order */
    const char *values[PRESS_ARGS_MAX_OPTS];
    int n_opts;
    bool protect_system;                    /* --protect-system (with --chat) */
    const char *mode;                       /* the mode option's value, for the caller's protocol */
} press_args;

/* If argv[*i] is a press flag, consumes it (and its value, advancing *i) and
 * returns 1; returns 0 if it is not one; -1 (error printed) on a bad flag. */
int press_args_parse(press_args *pa, const char *cmd, int argc, char **argv, int *i);

/* The configured press; NULL with an error printed on a bad option. Always a
 * valid configuration ("none" when no --press was given). */
pkv_press_cfg *press_args_build(const press_args *pa, const char *cmd);

void press_args_usage(FILE *out);

#endif
