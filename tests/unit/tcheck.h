/*
 * tcheck.h - minimal checks for unit tests: CHECK(cond, fmt...) reports the
 * failed condition with file:line and fails the current test function.
 * A test program exits 0 (pass), 1 (fail) or 77 (skip).
 */
#ifndef TCGPU_TCHECK_H
#define TCGPU_TCHECK_H

#include <stdio.h>

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond);                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

#define RUN(fn)                                                                                    \
    do {                                                                                           \
        int r_ = fn();                                                                             \
        fprintf(stderr, "%s %s\n", r_ == 0 ? "ok  " : r_ == 77 ? "skip" : "FAIL", #fn);            \
        if (r_ == 1)                                                                               \
            failed_ = 1;                                                                           \
    } while (0)

#endif
