/*
 * criu_rlimits.c - libtcgpu-criu-rlimits.so, preloaded into CRIU by gpuckpt
 * save when CRIU, root without CAP_SYS_RESOURCE, dumps another user's tree
 * (docs/save-restore.md, "Ordinary users").
 *
 * CRIU reads each process's resource limits with prlimit64(pid, res, NULL,
 * &old). The kernel allows that to a caller whose real ids are the
 * target's, or with CAP_SYS_RESOURCE; root in a container or a sandboxed
 * VM may lack the capability, and CRIU cannot run with another real uid
 * (libnftables, which it loads, exits when the real and effective uids
 * differ). The same numbers are in /proc/PID/limits, which the kernel
 * lets everyone read: when the kernel refuses the read-only prlimit64 with
 * EPERM, this library answers it from there. Every other call, and every
 * prlimit64 that sets a limit, goes to the kernel unchanged.
 */
#include <dlfcn.h>
#include <errno.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

/* "unlimited" or a decimal number. 0 or -1. */
static int parse_limit(const char *s, uint64_t *v)
{
    char *end;

    if (!strncmp(s, "unlimited", 9)) {
        *v = RLIM64_INFINITY;
        return 0;
    }
    errno = 0;
    *v = strtoull(s, &end, 10);
    return errno || end == s ? -1 : 0;
}

/*
 * Limit `res` of pid from /proc/PID/limits: a header line, then one line per
 * resource in the kernel's RLIMIT_* order, the name in the first 26 columns,
 * then the soft and the hard value. 0 or -1.
 */
static int limits_from_proc(pid_t pid, int res, struct rlimit64 *out)
{
    char path[64], line[256], a[32], b[32];
    uint64_t cur, max;
    int n = -1, ok = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/limits", (int)pid);
    if (!(f = fopen(path, "re")))
        return -1;
    while (fgets(line, sizeof(line), f)) {
        if (n++ != res)
            continue;
        if (strlen(line) > 26 && sscanf(line + 26, "%31s %31s", a, b) == 2 &&
            parse_limit(a, &cur) == 0 && parse_limit(b, &max) == 0) {
            out->rlim_cur = cur;
            out->rlim_max = max;
            ok = 0;
        }
        break;
    }
    fclose(f);
    return ok;
}

long syscall(long number, ...)
{
    static long (*real)(long, ...);
    long a[6], r;
    va_list ap;

    va_start(ap, number);
    for (int i = 0; i < 6; i++)
        a[i] = va_arg(ap, long);
    va_end(ap);
    if (!real && !(*(void **)&real = dlsym(RTLD_NEXT, "syscall"))) {
        errno = ENOSYS;
        return -1;
    }
    r = real(number, a[0], a[1], a[2], a[3], a[4], a[5]);
    if (r < 0 && errno == EPERM && number == SYS_prlimit64 && a[0] > 0 && !a[2] && a[3] &&
        a[1] >= 0 && a[1] < RLIM_NLIMITS &&
        limits_from_proc((pid_t)a[0], (int)a[1], (struct rlimit64 *)a[3]) == 0) {
        errno = 0;
        return 0;
    }
    return r;
}
