/* Small helpers shared by the baseline presses. */
#ifndef PKV_PRESS_BASELINES_COMMON_H
#define PKV_PRESS_BASELINES_COMMON_H

#include <stdlib.h>

#include "base/error.h"

/* Parses a non-negative integer option value; 0 on success. */
static inline int press_parse_count(const char *press, const char *key, const char *value, int max, int *out,
                                    pkv_error *err) {
    char *end;
    long v = strtol(value, &end, 10);
    if (*value == '\0' || *end || v < 0 || v > max)
        return pkv_fail(err, PKV_ERR_ARG, "%s %s must be an integer in [0, %d], got '%s'", press, key, max, value);
    *out = (int)v;
    return 0;
}

#endif
