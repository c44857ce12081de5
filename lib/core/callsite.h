/*
 * callsite.h - the call site of an allocation, for `gpuckpt inspect`.
 *
 * Off unless TCGPU_TRACE_ALLOC=1; then allocations of at least
 * TCGPU_TRACE_ALLOC_MIN bytes (default 1 MiB) record a short backtrace.
 */
#ifndef TCGPU_CALLSITE_H
#define TCGPU_CALLSITE_H

#include <stddef.h>

/*
 * A malloc'd string "frame < frame < ..." (innermost first, frames inside
 * libtcgpu skipped), or NULL when tracing is off, the allocation is small, or
 * memory is short. The caller frees it.
 */
char *callsite_capture(size_t bytes);

#endif
