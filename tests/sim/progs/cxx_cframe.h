/* cxx_cframe.h - a C frame for cxx_throw.cpp's exceptions to cross. */
#ifndef TCGPU_TEST_CXX_CFRAME_H
#define TCGPU_TEST_CXX_CFRAME_H

/* Calls fn(arg) from a C frame with unwind tables. */
void cframe_call(void (*fn)(void *), void *arg);

#endif
