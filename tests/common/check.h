/*
 * check.h - the assertions and exit codes of every test program in C.
 *
 *   CHECK(cond)            report file:line and the condition, count the
 *   CHECK(cond, fmt, ...)  failure and go on, so one run shows every broken
 *                          check (the optional message says what was seen)
 *   REQUIRE(cond, ...)     the same, then leave the current function with
 *                          T_EXIT_FAIL: for checks the rest depends on
 *   RUN(fn)                run one test function (int fn(void), returning a
 *                          T_EXIT_*), print "ok"/"skip"/"FAIL" and its name
 *   T_EXIT_STATUS()        what main() returns: T_EXIT_FAIL when anything
 *                          failed, else T_EXIT_PASS
 *
 * Exit codes are meson's (and liburing's test/helpers.h): 0 pass, 1 fail,
 * 77 skip. Single-threaded counting: call CHECK from the main thread, or
 * join the threads before the next check.
 */
#ifndef TCGPU_TESTS_CHECK_H
#define TCGPU_TESTS_CHECK_H

#include <stdarg.h>
#include <stdio.h>

enum t_test_result {
    T_EXIT_PASS = 0,
    T_EXIT_FAIL = 1,
    T_EXIT_SKIP = 77,
};

static int failures;

static inline void __attribute__((format(printf, 4, 5), unused))
check_failed(const char *file, int line, const char *cond, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "%s:%d: check failed: %s", file, line, cond);
    if (fmt[0]) {
        fputs(": ", stderr);
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
    }
    fputc('\n', stderr);
    failures++;
}

/* The "" before __VA_ARGS__ makes the message optional: CHECK(x) and
 * CHECK(x, "got %d", v) both expand to a valid call (the empty format of
 * the first is intended, hence the pragma). */
#define CHECK_FAILED_(cond, ...)                                                          \
    _Pragma("GCC diagnostic push")                                                        \
    _Pragma("GCC diagnostic ignored \"-Wformat-zero-length\"")                            \
    check_failed(__FILE__, __LINE__, cond, "" __VA_ARGS__);                               \
    _Pragma("GCC diagnostic pop")

#define CHECK(cond, ...)                                                                  \
    do {                                                                                  \
        if (!(cond))                                                                      \
            { CHECK_FAILED_(#cond, __VA_ARGS__) }                                         \
    } while (0)

#define REQUIRE(cond, ...)                                                                \
    do {                                                                                  \
        if (!(cond)) {                                                                    \
            CHECK_FAILED_(#cond, __VA_ARGS__)                                             \
            return T_EXIT_FAIL;                                                           \
        }                                                                                 \
    } while (0)

#define RUN(fn)                                                                           \
    do {                                                                                  \
        int before_ = failures, r_ = fn();                                                \
        if (r_ == T_EXIT_FAIL && failures == before_)                                     \
            failures++;                                                                   \
        fprintf(stderr, "%s %s\n",                                                        \
                r_ == T_EXIT_SKIP ? "skip" : failures > before_ ? "FAIL" : "ok  ", #fn);  \
    } while (0)

#define T_EXIT_STATUS() (failures ? T_EXIT_FAIL : T_EXIT_PASS)

#endif
