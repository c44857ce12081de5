/*
 * names.h - the names of tcgpu's states, operations and error codes: one
 * table each, used by the C API (tcgpu_state_name() ... tcgpu_strerror(),
 * declared in tcgpu.h and defined in names.c), the wire protocol and the
 * tools. All returned strings are static; all functions are thread-safe.
 */
#ifndef TCGPU_COMMON_NAMES_H
#define TCGPU_COMMON_NAMES_H

#include "tcgpu.h"

/* The state or operation named `name` ("suspended", "resume"), or -1. */
int tcgpu_state_parse(const char *name);
int tcgpu_op_parse(const char *name);

/* "EBUSY" for -EBUSY or EBUSY; "E?" when unknown. EOPNOTSUPP is "ENOTSUP",
 * the name tcgpu.h uses (the same value on Linux). */
const char *errno_name(int err);

/* EBUSY for "EBUSY" (positive), 0 when the name is unknown. */
int errno_from_name(const char *name);

#endif
