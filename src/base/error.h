/* Filling a pkv_error: one line, naming what failed and where. */
#ifndef PKV_ERROR_H
#define PKV_ERROR_H

#include "promptkv.h"

/* Sets err (if not NULL) and returns -1, so callers can write
 * `return pkv_fail(err, PKV_ERR_FORMAT, "...", ...);`. */
int pkv_fail(pkv_error *err, pkv_status code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Clears err to PKV_OK. */
void pkv_error_clear(pkv_error *err);

#endif
