/*
 * wrappers.h - libtcgpu.so's own entry points, by driver table index.
 *
 * tcgpu_wrappers[TCGPU_FN_x] is our exported function of ABI name x: the
 * generated pass-through (gen_wrappers.py), a hand-written tracking wrapper
 * (track_*.c, names in tracked.list) or cuGetProcAddress/_v2 (procaddr.c).
 * dlsym.c and procaddr.c hand these out in place of the real driver's.
 */
#ifndef TCGPU_WRAPPERS_H
#define TCGPU_WRAPPERS_H

#include <stdint.h>

#include "driver/driver_table.h"

extern void *const tcgpu_wrappers[TCGPU_FN_COUNT];

/* Index whose wrapper is `p`, or -1 (a linear scan: for rare paths). */
int tcgpu_wrapper_index(const void *p);

/* What cuGetProcAddress hands out for `real`, the function the real driver
 * returned for (symbol, version, flags): our wrapper of exactly that function
 * (the ABI name the version rule gives, if the driver agrees, else the ABI
 * name whose real function is `real`); `real` itself when it is already ours
 * or unknown to us (logged at debug level). */
void *tcgpu_procaddr_wrap(const char *symbol, void *real, int version, uint64_t flags);

#endif /* TCGPU_WRAPPERS_H */
