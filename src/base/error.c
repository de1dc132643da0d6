#include "base/error.h"

#include <stdarg.h>
#include <stdio.h>

int pkv_fail(pkv_error *err, pkv_status code, const char *fmt, ...) {
    if (err) {
        err->code = code;
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof err->msg, fmt, ap);
        va_end(ap);
        /* one line: a message never carries a newline */
        for (char *p = err->msg; *p; p++)
            if (*p == '\n' || *p == '\r') *p = ' ';
    }
    return -1;
}

void pkv_error_clear(pkv_error *err) {
    if (err) {
        err->code = PKV_OK;
        err->msg[0] = '\0';
    }
}

const char *pkv_status_name(pkv_status code) {
    switch (code) {
    case PKV_OK: return "ok";
    case PKV_ERR_IO: return "io error";
    case PKV_ERR_FORMAT: return "format error";
    case PKV_ERR_UNSUPPORTED: return "unsupported";
    case PKV_ERR_ARG: return "bad argument";
    case PKV_ERR_LIMIT: return "limit exceeded";
    case PKV_ERR_NOMEM: return "out of memory";
    case PKV_ERR_INTERRUPTED: return "interrupted";
    case PKV_ERR_INTERNAL: return "internal error";
    case PKV_ERR_NUMERIC: return "numeric error";
    }
    return "unknown";
}
