/*
 * names.h - the names of tcgpu's states, operations and error codes: one
 * table each, used by the C API (tcgpu_state_name() ... tcgpu_strerror(),
 * declared in tcgpu.h and defined in names.c), the wire protocol and the
 * tools. All returned strings are static; all functions are thread-safe.
 */
#ifndef TCGPU_COMMON_NAMES_H
#define TCGPU_COMMON_NAMES_H

#include "tcgpu.h"

/*
 * The phases of a long operation, in the order they happen, as its progress
 * names them (docs/cli.md): a checkpoint quiesces and writes; a suspend
 * quiesces, drains, releases (and writes, to an image); a resume verifies
 * (an image) and refills.
 */
enum tcgpu_phase {
    TCGPU_PHASE_QUIESCE,        /* CUDA calls in flight and the device's work end */
    TCGPU_PHASE_DRAIN,          /* device memory to host memory */
    TCGPU_PHASE_RELEASE,        /* the device memory freed */
    TCGPU_PHASE_WRITE,          /* compressed and written to the image */
    TCGPU_PHASE_VERIFY,         /* the image's checksums, before anything is touched */
    TCGPU_PHASE_REFILL,         /* the memory back on the device */
    TCGPU_PHASE_COUNT
};

/* "quiesce", "drain", ...; "unknown" out of range. */
const char *tcgpu_phase_name(enum tcgpu_phase p);

/* The state or operation named `name` ("suspended", "resume"), or -1. */
int tcgpu_state_parse(const char *name);
int tcgpu_op_parse(const char *name);

/* "EBUSY" for -EBUSY or EBUSY; "E?" when unknown. EOPNOTSUPP is "ENOTSUP",
 * the name tcgpu.h uses (the same value on Linux). */
const char *errno_name(int err);

/* EBUSY for "EBUSY" (positive), 0 when the name is unknown. */
int errno_from_name(const char *name);

#endif
