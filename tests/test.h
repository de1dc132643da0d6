/*
 * A tiny test framework: TEST(name) { ... } registers a test case; CHECK*
 * record failures without stopping the case (REQUIRE* stop it). The runner
 * (test_main.c) prints one line per case and ends with "N passed, N failed".
 */
#ifndef PKV_TEST_H
#define PKV_TEST_H

#include <math.h>
#include <stdbool.h>
#include <stdio.h>

typedef void (*test_fn)(void);
void test_register(const char *name, test_fn fn, const char *file);
void test_fail(const char *file, int line, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* true if the current case has failed so far */
bool test_failed(void);
/* The whole file, NUL-terminated (malloc'ed; its length in *len when len is
 * not NULL); NULL if it cannot be read whole. */
char *test_read_file(const char *path, size_t *len);

#define TEST(name)                                                                  \
    static void name(void);                                                         \
    __attribute__((constructor)) static void test_register_##name(void) {           \
        test_register(#name, name, __FILE__);                                       \
    }                                                                               \
    static void name(void)

#define CHECK(cond)                                                                 \
    do {                                                                            \
        if (!(cond)) test_fail(__FILE__, __LINE__, "CHECK(%s)", #cond);             \
    } while (0)

#define CHECK_MSG(cond, ...)                                                        \
    do {                                                                            \
        if (!(cond)) test_fail(__FILE__, __LINE__, __VA_ARGS__);                    \
    } while (0)

#define CHECK_EQ_INT(a, b)                                                          \
    do {                                                                            \
        long long va_ = (long long)(a), vb_ = (long long)(b);                       \
        if (va_ != vb_)                                                             \
            test_fail(__FILE__, __LINE__, "%s == %s: %lld != %lld", #a, #b, va_, vb_); \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                       \
    do {                                                                            \
        double va_ = (double)(a), vb_ = (double)(b);                                \
        if (!(fabs(va_ - vb_) <= (tol)))                                            \
            test_fail(__FILE__, __LINE__, "%s ~ %s: %.9g vs %.9g (tol %g)", #a, #b, va_, vb_, \
                      (double)(tol));                                               \
    } while (0)

#define CHECK_STR(a, b)                                                             \
    do {                                                                            \
        const char *sa_ = (a), *sb_ = (b);                                          \
        if (!sa_ || !sb_ || strcmp(sa_, sb_) != 0)                                  \
            test_fail(__FILE__, __LINE__, "%s == %s: \"%s\" != \"%s\"", #a, #b,     \
                      sa_ ? sa_ : "(null)", sb_ ? sb_ : "(null)");                  \
    } while (0)

#define REQUIRE(cond)                                                               \
    do {                                                                            \
        if (!(cond)) {                                                              \
            test_fail(__FILE__, __LINE__, "REQUIRE(%s)", #cond);                    \
            return;                                                                 \
        }                                                                           \
    } while (0)

#define REQUIRE_MSG(cond, ...)                                                      \
    do {                                                                            \
        if (!(cond)) {                                                              \
            test_fail(__FILE__, __LINE__, __VA_ARGS__);                             \
            return;                                                                 \
        }                                                                           \
    } while (0)

/* Path of a file under tests/fixtures (tests run from the repository root). */
#define FIXTURE(rel) ("tests/fixtures/" rel)

#endif
