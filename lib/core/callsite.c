/*
 * callsite.c - where a large allocation was made (TCGPU_TRACE_ALLOC=1).
 *
 * common/frames.h walks the caller's stack with glibc's backtrace(); frames
 * inside libtcgpu itself are skipped, so the first frame is the program's
 * call into CUDA (or into the framework).
 *
 * Why backtrace() and not libunwind: a preloaded library's dependencies join
 * the program's global symbol scope ahead of everything loaded later, and
 * libunwind.so exports its own _Unwind_RaiseException & co. Every C++
 * library the program dlopens then binds half of its exception handling to
 * libunwind and half to libgcc_s, and the first exception thrown through
 * std::call_once aborts (issue 35). backtrace() uses libgcc_s, which glibc
 * opens privately (RTLD_LOCAL) on first use: the unwinder the program has
 * anyway, and nothing new in its global scope. tests/sim/cxx_unwind.sh
 * checks that libtcgpu.so needs no unwinder and that exceptions still work.
 */
#include <stdlib.h>
#include <string.h>

#include "callsite.h"
#include "common/frames.h"
#include "settings.h"

#define CALLSITE_FRAMES 6

char *callsite_capture(size_t bytes)
{
    const struct tcgpu_settings *set = settings_get();
    char buf[512];

    if (set->trace_alloc <= 0 || bytes < set->trace_alloc_min)
        return NULL;
    return tcgpu_frames_caller(buf, sizeof(buf), CALLSITE_FRAMES) ? strdup(buf) : NULL;
}
