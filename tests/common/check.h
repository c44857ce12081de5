/*
 * check.h - the counting assertion of the tests' C programs: CHECK(cond)
 * reports file:line and the condition, counts the failure and goes on, so
 * one run shows every broken check; main() returns 1 when `failures` > 0.
 * (tests/unit/tcheck.h is the other style: a failed check ends the test
 * function.)
 */
#ifndef TCGPU_TEST_COMMON_CHECK_H
#define TCGPU_TEST_COMMON_CHECK_H

#include <stdio.h>

static int failures;

#define CHECK(cond)                                                                 \
    do {                                                                            \
        if (!(cond)) {                                                              \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
            failures++;                                                             \
        }                                                                           \
    } while (0)

#endif
