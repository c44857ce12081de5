/* The caller's stack, named. Contract in frames.h. */
#include <dlfcn.h>
#include <execinfo.h>
#include <stdio.h>
#include <string.h>

#include "frames.h"

/* Frames walked at most: enough to get past our own frames (the interposer's
 * wrapper, its gate and bookkeeping) to `max` of the caller's. */
#define FRAMES_WALKED 32

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
    const char *obj, *slash;
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
    if (n < 0 || (size_t)n >= cap - *len) {
        buf[*len] = '\0';          /* a cut frame is left out whole */
        return -1;
    }
    *len += (size_t)n;
    return 0;
}

size_t tcgpu_frames_caller(char *buf, size_t len, int max)
{
    void *ips[FRAMES_WALKED];
    size_t at = 0;
    int n, first, shown = 0;

    if (!len)
        return 0;
    buf[0] = '\0';
    n = backtrace(ips, FRAMES_WALKED);
    /* A sanitizer's backtrace() interceptor shows itself before our frames:
     * the caller's frames start after ours, never before them. */
    first = 0;
    while (first < n && !in_this_library(ips[first]))
        first++;
    if (first == n)
        first = 0;
    for (int i = first; i < n && shown < max; i++) {
        if (in_this_library(ips[i]))
            continue;
        if (append_frame(buf, len, &at, ips[i]))
            break;
        shown++;
    }
    return at;
}
