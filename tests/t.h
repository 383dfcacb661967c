/*
 * A tiny test runner. Each test file defines test functions, registers
 * them in main with T_RUN, and ends with `return t_done();`, which prints
 * the closing line "N passed, N failed" and returns the exit status.
 * A check that fails prints file:line and the values, marks the current
 * test failed, and carries on.
 */
#ifndef IFL_TESTS_T_H
#define IFL_TESTS_T_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int t_pass_, t_fail_, t_cur_failed_;

#define T_FAIL_(...)                                                                               \
    do {                                                                                           \
        fprintf(stderr, "  %s:%d: ", __FILE__, __LINE__);                                          \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        t_cur_failed_ = 1;                                                                         \
    } while (0)

#define CHECK(c)                                                                                   \
    do {                                                                                           \
        if (!(c))                                                                                  \
            T_FAIL_("CHECK(%s)", #c);                                                              \
    } while (0)

#define CHECK_MSG(c, ...)                                                                          \
    do {                                                                                           \
        if (!(c))                                                                                  \
            T_FAIL_(__VA_ARGS__);                                                                  \
    } while (0)

#define CHECK_EQ(a, b)                                                                             \
    do {                                                                                           \
        long long a_ = (long long)(a), b_ = (long long)(b);                                        \
        if (a_ != b_)                                                                              \
            T_FAIL_("CHECK_EQ(%s, %s): %lld != %lld", #a, #b, a_, b_);                             \
    } while (0)

#define CHECK_NEAR(a, b, tol)                                                                      \
    do {                                                                                           \
        double a_ = (double)(a), b_ = (double)(b);                                                 \
        if (!(fabs(a_ - b_) <= (tol)))                                                             \
            T_FAIL_("CHECK_NEAR(%s, %s): %.9g vs %.9g (tol %g)", #a, #b, a_, b_, (double)(tol));   \
    } while (0)

#define CHECK_STR(a, b)                                                                            \
    do {                                                                                           \
        const char *a_ = (a), *b_ = (b);                                                           \
        if (strcmp(a_, b_) != 0)                                                                   \
            T_FAIL_("CHECK_STR(%s, %s): \"%s\" != \"%s\"", #a, #b, a_, b_);                        \
    } while (0)

#define T_RUN(fn)                                                                                  \
    do {                                                                                           \
        t_cur_failed_ = 0;                                                                         \
        fn();                                                                                      \
        if (t_cur_failed_) {                                                                       \
            t_fail_++;                                                                             \
            fprintf(stderr, "FAIL %s\n", #fn);                                                     \
        } else {                                                                                   \
            t_pass_++;                                                                             \
            fprintf(stderr, "ok   %s\n", #fn);                                                     \
        }                                                                                          \
    } while (0)

static inline int t_done(void)
{
    printf("%d passed, %d failed\n", t_pass_, t_fail_);
    fflush(stdout);
    return t_fail_ ? 1 : 0;
}

/* Path of the shared test data folder: $IFL_SHARED or ../shared. */
static inline const char *t_shared(void)
{
    const char *s = getenv("IFL_SHARED");
    return s && *s ? s : "../shared";
}

/* The weight-type reference data this repository keeps (tests/data/quant,
 * README there), from the worktree root where tests run: $IFL_QUANT_DATA
 * or tests/data/quant. */
static inline const char *t_quant_data(void)
{
    const char *s = getenv("IFL_QUANT_DATA");
    return s && *s ? s : "tests/data/quant";
}

#endif
