#include "args.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void cli_error(const char *cmd, const char *fmt, ...) {
    fprintf(stderr, "promptkv %s: error: ", cmd);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

const char *cli_value(const char *cmd, int argc, char **argv, int *i) {
    if (*i + 1 >= argc) {
        cli_error(cmd, "%s needs a value", argv[*i]);
        return NULL;
    }
    return argv[++*i];
}

bool cli_int(const char *cmd, const char *flag, const char *s, long lo, long hi, long *out) {
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end) {
        cli_error(cmd, "%s expects an integer, got '%s'", flag, s);
        return false;
    }
    if (v < lo || v > hi) {
        cli_error(cmd, "%s must be in [%ld, %ld], got %ld", flag, lo, hi, v);
        return false;
    }
    *out = v;
    return true;
}

bool cli_u64(const char *cmd, const char *flag, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    if (*s == '-') {
        cli_error(cmd, "%s expects a non-negative integer, got '%s'", flag, s);
        return false;
    }
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *end) {
        cli_error(cmd, "%s expects a non-negative integer, got '%s'", flag, s);
        return false;
    }
    *out = v;
    return true;
}

bool cli_float(const char *cmd, const char *flag, const char *s, double lo, double hi, double *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v)) {
        cli_error(cmd, "%s expects a number, got '%s'", flag, s);
        return false;
    }
    if (v < lo || v > hi) {
        cli_error(cmd, "%s must be in [%g, %g], got %g", flag, lo, hi, v);
        return false;
    }
    *out = v;
    return true;
}

bool cli_size(const char *cmd, const char *flag, const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    double mul = 1;
    if (end != s && *end) {
        switch (*end) {
        case 'k': case 'K': mul = 1024.0; break;
        case 'm': case 'M': mul = 1024.0 * 1024; break;
        case 'g': case 'G': mul = 1024.0 * 1024 * 1024; break;
        case 't': case 'T': mul = 1024.0 * 1024 * 1024 * 1024; break;
        default: mul = -1;
        }
        end++;
        if (*end == 'i' || *end == 'I') end++;
        if (*end == 'b' || *end == 'B') end++;
    }
    if (errno || end == s || *end || mul < 0 || !(v >= 0) || v * mul > 1.8e19) {
        cli_error(cmd, "%s expects a size such as 512M or 8G, got '%s'", flag, s);
        return false;
    }
    *out = (uint64_t)(v * mul);
    return true;
}

char *cli_read_file(const char *cmd, const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        cli_error(cmd, "cannot open %s: %s", path, strerror(errno));
        return NULL;
    }
    /* read in growing steps up to one byte past the cap, so an endless
     * source (/dev/zero, a pipe that never ends) is refused, not swallowed */
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    bool too_big = false;
    while (buf) {
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        if (n > CLI_MAX_TEXT_FILE) {
            too_big = true;
            break;
        }
        cap = cap * 2 > CLI_MAX_TEXT_FILE ? CLI_MAX_TEXT_FILE + 1 : cap * 2;
        char *nb = realloc(buf, cap + 1);
        if (!nb) {
            free(buf);
            buf = NULL;
        } else {
            buf = nb;
        }
    }
    int failed = ferror(f);
    fclose(f);
    if (too_big) {
        free(buf);
        cli_error(cmd, "%s is larger than the %d MiB limit for a text file", path, (int)(CLI_MAX_TEXT_FILE >> 20));
        return NULL;
    }
    if (!buf || failed) {
        free(buf);
        cli_error(cmd, "cannot read %s%s", path, buf ? "" : ": out of memory");
        return NULL;
    }
    buf[n] = '\0';
    if (len) *len = n;
    return buf;
}

bool cli_simd(const char *cmd, const char *s, pkv_simd *out) {
    if (!strcmp(s, "auto")) *out = PKV_SIMD_AUTO;
    else if (!strcmp(s, "scalar")) *out = PKV_SIMD_SCALAR;
    else if (!strcmp(s, "avx2")) *out = PKV_SIMD_AVX2;
    else if (!strcmp(s, "avx512")) *out = PKV_SIMD_AVX512;
    else {
        cli_error(cmd, "--simd must be auto, scalar, avx2 or avx512, got '%s'", s);
        return false;
    }
    return true;
}

bool cli_cache_type(const char *cmd, const char *flag, const char *s, pkv_cache_type *out) {
    if (pkv_cache_type_parse(s, out)) return true;
    cli_error(cmd, "%s must be f16, f32, q8_0 or q4_0, got '%s'", flag, s);
    return false;
}

bool cli_residual_type(const char *cmd, const char *flag, const char *s, pkv_residual_type *out) {
    if (pkv_residual_type_parse(s, out)) return true;
    cli_error(cmd, "%s must be f32, f16 or q8_0, got '%s'", flag, s);
    return false;
}

void cli_model_id(const char *path, char *out, size_t len) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    snprintf(out, len, "%s", base);
    size_t n = strlen(out);
    if (n > 5 && !strcmp(out + n - 5, ".gguf")) out[n - 5] = '\0';
}

pkv_model *cli_load_model(const char *cmd, const char *path, pkv_simd simd) {
    return cli_load_model_chat(cmd, path, simd, NULL, false);
}

pkv_model *cli_load_model_chat(const char *cmd, const char *path, pkv_simd simd, const char *chat_template,
                               bool gguf_layout) {
    pkv_error err;
    pkv_load_opts lo = {.simd = simd, .chat_template = chat_template, .gguf_layout = gguf_layout};
    pkv_model *m = pkv_model_load(path, &lo, &err);
    if (!m) cli_error(cmd, "%s", err.msg);
    return m;
}
