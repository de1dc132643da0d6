/*
 * Test runner. Usage: test_runner [--list] [--exclude PREFIX]... [PATTERN]...
 * Runs every registered case whose name contains one of the patterns (all when
 * none are given) and does not start with an excluded prefix. Ends with
 * "N passed, N failed"; exits non-zero if any case failed.
 */
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "test.h"

typedef struct {
    const char *name;
    test_fn fn;
    const char *file;
} test_case;

static test_case *g_cases; /* registration table, filled before main by constructors */
static int g_n_cases, g_cap_cases;
static int g_current_failures;

void test_register(const char *name, test_fn fn, const char *file) {
    if (g_n_cases == g_cap_cases) {
        g_cap_cases = g_cap_cases ? 2 * g_cap_cases : 64;
        g_cases = realloc(g_cases, (size_t)g_cap_cases * sizeof *g_cases);
        if (!g_cases) abort();
    }
    g_cases[g_n_cases++] = (test_case){name, fn, file};
}

void test_fail(const char *file, int line, const char *fmt, ...) {
    if (g_current_failures < 20) {
        fprintf(stdout, "    %s:%d: ", file, line);
        va_list ap;
        va_start(ap, fmt);
        vfprintf(stdout, fmt, ap);
        va_end(ap);
        fputc('\n', stdout);
    } else if (g_current_failures == 20) {
        fprintf(stdout, "    (more failures not shown)\n");
    }
    g_current_failures++;
}

bool test_failed(void) { return g_current_failures > 0; }

char *test_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    char *buf = n >= 0 && fseek(f, 0, SEEK_SET) == 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (!buf) return NULL;
    buf[n] = '\0';
    if (len) *len = (size_t)n;
    return buf;
}

static int cmp_case(const void *a, const void *b) {
    const test_case *x = a, *y = b;
    int c = strcmp(x->file, y->file);
    return c ? c : strcmp(x->name, y->name);
}

int main(int argc, char **argv) {
    const char *patterns[64], *excludes[64];
    int n_patterns = 0, n_excludes = 0, list = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--list")) list = 1;
        else if (!strcmp(argv[i], "--exclude") && i + 1 < argc && n_excludes < 64)
            excludes[n_excludes++] = argv[++i];
        else if (n_patterns < 64) patterns[n_patterns++] = argv[i];
    }
    qsort(g_cases, (size_t)g_n_cases, sizeof *g_cases, cmp_case);
    int passed = 0, failed = 0;
    for (int i = 0; i < g_n_cases; i++) {
        const test_case *tc = &g_cases[i];
        int selected = n_patterns == 0;
        for (int p = 0; p < n_patterns; p++)
            if (strstr(tc->name, patterns[p])) selected = 1;
        for (int e = 0; e < n_excludes; e++)
            if (!strncmp(tc->name, excludes[e], strlen(excludes[e]))) selected = 0;
        if (!selected) continue;
        if (list) {
            printf("%s\n", tc->name);
            continue;
        }
        g_current_failures = 0;
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        fflush(stdout);
        tc->fn();
        clock_gettime(CLOCK_MONOTONIC, &t1);
        double ms = (t1.tv_sec - t0.tv_sec) * 1e3 + (t1.tv_nsec - t0.tv_nsec) / 1e6;
        if (g_current_failures) {
            printf("FAIL %s (%.0f ms)\n", tc->name, ms);
            failed++;
        } else {
            printf("ok   %s (%.0f ms)\n", tc->name, ms);
            passed++;
        }
        fflush(stdout);
    }
    if (!list) printf("%d passed, %d failed\n", passed, failed);
    free(g_cases);
    return failed ? 1 : 0;
}
