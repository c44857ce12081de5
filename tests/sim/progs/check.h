/*
 * check.h - the two assertions of the small test programs in tests/sim/progs:
 * CHECK(cond) counts a failure and goes on; cu(rc, what) stops the program
 * on a driver error, naming the call and the error.
 */
#ifndef TCGPU_TEST_CHECK_H
#define TCGPU_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>
#include <cuda.h>

#include "../../common/check.h"

static inline void cu(CUresult rc, const char *what)
{
    const char *name = "?";

    if (rc == CUDA_SUCCESS)
        return;
    cuGetErrorName(rc, &name);
    fprintf(stderr, "%s failed: %s\n", what, name);
    exit(1);
}

#endif
