/*
 * callsite.c - where a large allocation was made (TCGPU_TRACE_ALLOC=1).
 *
 * glibc's backtrace() walks the caller's stack; each frame is named
 * "object+0xoff" or "symbol+0xoff" via dladdr. Frames inside libtcgpu itself
 * are skipped, so the first frame is the program's call into CUDA (or into
 * the framework).
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
#include <dlfcn.h>
#include <execinfo.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "callsite.h"
#include "settings.h"

#define CALLSITE_FRAMES 6

static int in_this_library(void *ip)
{
    static Dl_info self;
    Dl_info info;

    if (!self.dli_fbase && !dladdr((void *)in_this_library, &self))
        return 0;
    return dladdr(ip, &info) && info.dli_fbase == self.dli_fbase;
}

static int append_frame(char *buf, size_t cap, size_t *len, void *ip)
{
    Dl_info info;
    const char *obj = "?", *slash;
    int n;

    if (dladdr(ip, &info) && info.dli_fname) {
        obj = (slash = strrchr(info.dli_fname, '/')) ? slash + 1 : info.dli_fname;
        if (info.dli_sname)
            n = snprintf(buf + *len, cap - *len, "%s%s+0x%lx", *len ? " < " : "",
                         info.dli_sname, (unsigned long)((char *)ip - (char *)info.dli_saddr));
        else
            n = snprintf(buf + *len, cap - *len, "%s%s+0x%lx", *len ? " < " : "",
                         obj, (unsigned long)((char *)ip - (char *)info.dli_fbase));
    } else {
        n = snprintf(buf + *len, cap - *len, "%s%p", *len ? " < " : "", ip);
    }
    if (n < 0 || (size_t)n >= cap - *len)
        return -1;
    *len += (size_t)n;
    return 0;
}

char *callsite_capture(size_t bytes)
{
    const struct tcgpu_settings *set = settings_get();
    void *ips[CALLSITE_FRAMES + 16];
    char buf[512];
    size_t len = 0;
    int n, shown = 0;

    if (set->trace_alloc <= 0 || bytes < set->trace_alloc_min)
        return NULL;
    n = backtrace(ips, (int)(sizeof(ips) / sizeof(ips[0])));
    for (int i = 0; i < n && shown < CALLSITE_FRAMES; i++) {
        if (in_this_library(ips[i]))
            continue;
        if (append_frame(buf, sizeof(buf), &len, ips[i]))
            break;
        shown++;
    }
    return len ? strdup(buf) : NULL;
}
