/*
 * macros.h - the few macros every folder uses.
 */
#ifndef TCGPU_COMMON_MACROS_H
#define TCGPU_COMMON_MACROS_H

/* The number of elements of an array (not a pointer). */
#define NELEM(a) (sizeof(a) / sizeof((a)[0]))

#endif
