/*
 * faulty_driver.so - the driver as gpuckpt reaches it from outside a process
 * (TCGPU_REAL_LIBCUDA, lib/ckptapi), with faults: every entry point lib/ckptapi
 * resolves is the real driver's (FAULTY_DRIVER_REAL, default libcuda.so.1:
 * simcuda here), except that
 *   FAULTY_DRIVER_FAIL=checkpoint   cuCheckpointProcessCheckpoint fails
 *                                   (CUDA_ERROR_UNKNOWN, nothing done)
 *   FAULTY_DRIVER_DELAY_MS=N        cuCheckpointProcessLock waits N ms first
 *                                   (a signal then lands in the driver's step)
 * For the tests of a suspend whose driver step fails (suspend_undo.sh).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>

/* lib/ckptapi resolves the plain name, which cuda.h maps to _v2 */
#undef cuDeviceGetUuid
CUresult cuDeviceGetUuid(CUuuid *uuid, CUdevice d);

static void *real(const char *name)
{
    static void *h;
    const char *lib = getenv("FAULTY_DRIVER_REAL");
    void *f;

    if (!h && !(h = dlopen(lib && *lib ? lib : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL))) {
        fprintf(stderr, "faulty_driver: %s\n", dlerror());
        abort();
    }
    if (!(f = dlsym(h, name))) {
        fprintf(stderr, "faulty_driver: the real driver has no %s\n", name);
        abort();
    }
    return f;
}

/* The real driver's entry point `name`, called with the arguments given. */
#define FORWARD(name, params, args) \
    CUresult name params \
    { \
        CUresult (*f) params = real(#name); \
        return f args; \
    }

FORWARD(cuInit, (unsigned int flags), (flags))
FORWARD(cuDriverGetVersion, (int *v), (v))
FORWARD(cuGetErrorName, (CUresult e, const char **s), (e, s))
FORWARD(cuDeviceGetCount, (int *n), (n))
FORWARD(cuDeviceGet, (CUdevice *d, int ordinal), (d, ordinal))
FORWARD(cuDeviceGetName, (char *name, int len, CUdevice d), (name, len, d))
FORWARD(cuDeviceTotalMem_v2, (size_t *bytes, CUdevice d), (bytes, d))
FORWARD(cuDeviceGetUuid, (CUuuid *uuid, CUdevice d), (uuid, d))
FORWARD(cuCheckpointProcessGetState, (int pid, CUprocessState *s), (pid, s))
FORWARD(cuCheckpointProcessGetRestoreThreadId, (int pid, int *tid), (pid, tid))
FORWARD(cuCheckpointProcessRestore, (int pid, CUcheckpointRestoreArgs *a), (pid, a))
FORWARD(cuCheckpointProcessUnlock, (int pid, CUcheckpointUnlockArgs *a), (pid, a))

CUresult cuCheckpointProcessLock(int pid, CUcheckpointLockArgs *a)
{
    CUresult (*f)(int, CUcheckpointLockArgs *) = real("cuCheckpointProcessLock");
    const char *ms = getenv("FAULTY_DRIVER_DELAY_MS");

    if (ms && *ms)
        usleep((useconds_t)atoi(ms) * 1000u);
    return f(pid, a);
}

CUresult cuCheckpointProcessCheckpoint(int pid, CUcheckpointCheckpointArgs *a)
{
    CUresult (*f)(int, CUcheckpointCheckpointArgs *) = real("cuCheckpointProcessCheckpoint");
    const char *fail = getenv("FAULTY_DRIVER_FAIL");

    if (fail && !strcmp(fail, "checkpoint"))
        return CUDA_ERROR_UNKNOWN;
    return f(pid, a);
}
