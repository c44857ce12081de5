/*
 * cxx_cframe.c - C frames between a C++ throw and its catch (cxx_throw.cpp).
 * Built with -fexceptions, as C that calls back into C++ must be.
 */
#include "cxx_cframe.h"

/* noinline, and work after the call, so that these frames stay on the
 * stack the exception crosses */
__attribute__((noinline)) static int cframe_inner(void (*fn)(void *), void *arg)
{
    volatile int after = 0;

    fn(arg);
    after = 1;
    return after;
}

void cframe_call(void (*fn)(void *), void *arg)
{
    volatile int r = cframe_inner(fn, arg);

    (void)r;
}
