/* ckptapi.c - the driver from outside a process: its checkpoint API, its devices; see ckptapi.h. */
#include <cuda.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ckptapi.h"

#define MIN_DRIVER_VERSION 12080    /* the checkpoint API appeared in CUDA 12.8 (r570) */

/* The functions we use, resolved once. */
static struct {
    int loaded;                 /* the checkpoint API: 0 not tried, 1 present, -1 absent */
    int usable;                 /* the driver loads and initialises */
    char why[512];
    int version;
    CUresult (*init)(unsigned);
    CUresult (*driver_version)(int *);
    CUresult (*error_name)(CUresult, const char **);
    CUresult (*get_state)(int, CUprocessState *);
    CUresult (*restore_tid)(int, int *);
    CUresult (*lock)(int, CUcheckpointLockArgs *);
    CUresult (*checkpoint)(int, CUcheckpointCheckpointArgs *);
    CUresult (*restore)(int, CUcheckpointRestoreArgs *);
    CUresult (*unlock)(int, CUcheckpointUnlockArgs *);
    CUresult (*dev_count)(int *);
    CUresult (*dev_get)(CUdevice *, int);
    CUresult (*dev_name)(char *, int, CUdevice);
    CUresult (*dev_mem)(size_t *, CUdevice);
    CUresult (*dev_uuid)(CUuuid *, CUdevice);
} drv;

/* GPUs to remap at Restore (another machine, same model): old UUID -> new. */
static CUcheckpointGpuPair remap[16];
static unsigned nremap;

void gdrv_set_remap(const uint8_t (*old_uuid)[16], const uint8_t (*new_uuid)[16], int n)
{
    nremap = 0;
    for (int i = 0; i < n && i < 16; i++) {
        memcpy(remap[i].oldUuid.bytes, old_uuid[i], 16);
        memcpy(remap[i].newUuid.bytes, new_uuid[i], 16);
        nremap++;
    }
}

static int resolve(void *h, const char *name, void **out)
{
    *out = dlsym(h, name);
    if (*out)
        return 0;
    snprintf(drv.why, sizeof(drv.why), "the driver has no %s", name);
    return -1;
}

#define RESOLVE(h, field, name) resolve(h, name, (void **)&drv.field)

/* What every use needs: initialising the driver, its version, its devices. */
static int resolve_base(void *h)
{
    return RESOLVE(h, init, "cuInit") || RESOLVE(h, driver_version, "cuDriverGetVersion") ||
           RESOLVE(h, error_name, "cuGetErrorName") ||
           RESOLVE(h, dev_count, "cuDeviceGetCount") || RESOLVE(h, dev_get, "cuDeviceGet") ||
           RESOLVE(h, dev_name, "cuDeviceGetName") || RESOLVE(h, dev_mem, "cuDeviceTotalMem_v2") ||
           RESOLVE(h, dev_uuid, "cuDeviceGetUuid") ? -1 : 0;
}

/* The checkpoint API (CUDA 12.8+, r570+). */
static int resolve_checkpoint(void *h)
{
    return RESOLVE(h, get_state, "cuCheckpointProcessGetState") ||
           RESOLVE(h, restore_tid, "cuCheckpointProcessGetRestoreThreadId") ||
           RESOLVE(h, lock, "cuCheckpointProcessLock") ||
           RESOLVE(h, checkpoint, "cuCheckpointProcessCheckpoint") ||
           RESOLVE(h, restore, "cuCheckpointProcessRestore") ||
           RESOLVE(h, unlock, "cuCheckpointProcessUnlock") ? -1 : 0;
}

static const char *library_path;

void gdrv_set_library(const char *path)
{
    library_path = path;
}

static const char *library_name(void)
{
    return library_path && *library_path ? library_path : "libcuda.so.1";
}

/* Loads the driver once: usable (drv.usable) when it loads and cuInit works,
 * with the checkpoint API (drv.loaded = 1) when it also has that. */
static void load(void)
{
    const char *lib = library_name();
    void *h;
    CUresult r;

    if (drv.loaded)
        return;
    drv.loaded = -1;
    /* RTLD_LOCAL: nothing else in the caller should bind to the driver's symbols */
    h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        snprintf(drv.why, sizeof(drv.why), "cannot load the CUDA driver %s: %s", lib, dlerror());
        return;
    }
    /* keep the handle from here on: harmless, and dlclose may run destructors */
    if (resolve_base(h) < 0)
        return;
    if ((r = drv.driver_version(&drv.version)) != CUDA_SUCCESS)
        drv.version = 0;
    if ((r = drv.init(0)) != CUDA_SUCCESS) {
        const char *name = "?";
        drv.error_name(r, &name);
        snprintf(drv.why, sizeof(drv.why), "cuInit failed: %s", name ? name : "?");
        return;
    }
    drv.usable = 1;
    if (drv.version < MIN_DRIVER_VERSION) {
        snprintf(drv.why, sizeof(drv.why),
                 "driver version %d.%d has no checkpoint API (needs 12.8 / r570 or later)",
                 drv.version / 1000, drv.version % 1000 / 10);
        return;
    }
    if (resolve_checkpoint(h) < 0)
        return;
    drv.loaded = 1;
}

void gdrv_probe(struct gdrv_probe *p)
{
    load();
    memset(p, 0, sizeof(*p));
    p->library = library_name();
    p->usable = drv.usable;
    p->version = drv.version;
    p->checkpoint_api = drv.loaded > 0;
    snprintf(p->why, sizeof(p->why), "%s", drv.loaded > 0 ? "" : drv.why);
}

int gdrv_available(char *why, size_t len)
{
    load();
    if (drv.loaded < 0 && why)
        snprintf(why, len, "%s", drv.why);
    return drv.loaded > 0;
}

int gdrv_driver_version(void)
{
    load();
    return drv.loaded > 0 ? drv.version : -ENODEV;
}

const char *gdrv_state_name(int state)
{
    switch (state) {
    case GDRV_RUNNING: return "running";
    case GDRV_LOCKED: return "locked";
    case GDRV_CHECKPOINTED: return "checkpointed";
    case GDRV_FAILED: return "failed";
    default: return "none";
    }
}

static const char *cu_name(CUresult r)
{
    const char *name = NULL;

    if (drv.error_name(r, &name) != CUDA_SUCCESS || !name)
        return "unknown CUresult";
    return name;
}

static int to_errno(CUresult r)
{
    switch (r) {
    case CUDA_SUCCESS: return 0;
    case CUDA_ERROR_INVALID_VALUE: return -ESRCH;       /* the driver's "no such process" */
    case CUDA_ERROR_ILLEGAL_STATE: return -EALREADY;
    case CUDA_ERROR_NOT_READY: return -ETIMEDOUT;
    case CUDA_ERROR_OUT_OF_MEMORY: return -ENOMEM;
    default: return -EIO;
    }
}

/* One driver call's result as -errno, with "CALL(pid): NAME" in err on failure. */
static int check(CUresult r, const char *call, pid_t pid, char *err, size_t len)
{
    if (r != CUDA_SUCCESS && err)
        snprintf(err, len, "%s(%d): %s", call, (int)pid, cu_name(r));
    return to_errno(r);
}

static int need_driver(char *err, size_t len)
{
    load();
    if (drv.loaded > 0)
        return 0;
    if (err)
        snprintf(err, len, "driver checkpoint API not available: %s", drv.why);
    return -ENODEV;
}

int gdrv_get_state(pid_t pid, int *state, char *err, size_t len)
{
    CUprocessState s;
    int r;

    *state = GDRV_NONE;
    if ((r = need_driver(err, len)) < 0)
        return r;
    r = check(drv.get_state((int)pid, &s), "cuCheckpointProcessGetState", pid, err, len);
    if (r == 0)
        *state = (int)s;
    return r;
}

int gdrv_restore_tid(pid_t pid, pid_t *tid, char *err, size_t len)
{
    int t = 0, r;

    if ((r = need_driver(err, len)) < 0)
        return r;
    r = check(drv.restore_tid((int)pid, &t), "cuCheckpointProcessGetRestoreThreadId", pid, err, len);
    *tid = (pid_t)t;
    return r;
}

int gdrv_release(pid_t pid, unsigned timeout_ms, char *err, size_t len)
{
    CUcheckpointLockArgs la = { .timeoutMs = timeout_ms };
    char why[256];
    int r;

    if ((r = need_driver(err, len)) < 0)
        return r;
    r = check(drv.lock((int)pid, &la), "cuCheckpointProcessLock", pid, err, len);
    if (r < 0)
        return r;
    r = check(drv.checkpoint((int)pid, NULL), "cuCheckpointProcessCheckpoint", pid, why, sizeof(why));
    if (r == 0)
        return 0;
    /* All or nothing: give the process its CUDA calls back. */
    if (check(drv.unlock((int)pid, NULL), "cuCheckpointProcessUnlock", pid, err, len) < 0) {
        size_t n = strlen(err);
        snprintf(err + n, len - n, " after %s: the process's CUDA calls stay locked", why);
    } else {
        snprintf(err, len, "%s (unlocked again: the process keeps its context)", why);
    }
    return r;
}

int gdrv_reacquire(pid_t pid, char *err, size_t len)
{
    int state, r;

    if ((r = gdrv_get_state(pid, &state, err, len)) < 0)
        return r;
    if (state == GDRV_CHECKPOINTED) {
        CUcheckpointRestoreArgs ra;
        memset(&ra, 0, sizeof(ra));
        ra.gpuPairs = remap;
        ra.gpuPairsCount = nremap;
        r = check(drv.restore((int)pid, nremap ? &ra : NULL), "cuCheckpointProcessRestore", pid,
                  err, len);
        if (r < 0)
            return r;
        state = GDRV_LOCKED;
    }
    if (state == GDRV_LOCKED)
        return check(drv.unlock((int)pid, NULL), "cuCheckpointProcessUnlock", pid, err, len);
    if (state == GDRV_FAILED) {
        snprintf(err, len, "process %d: the driver reports its checkpoint state as FAILED", (int)pid);
        return -EIO;
    }
    return 0;
}

/* Device listing needs only a driver that loads and initialises. */
static int need_usable(char *err, size_t len)
{
    load();
    if (drv.usable)
        return 0;
    if (err)
        snprintf(err, len, "%s", drv.why);
    return -ENODEV;
}

int gdrv_device_count(char *err, size_t len)
{
    int n = 0, r;

    if ((r = need_usable(err, len)) < 0)
        return r;
    r = check(drv.dev_count(&n), "cuDeviceGetCount", 0, err, len);
    return r < 0 ? r : n;
}

int gdrv_device(int ordinal, struct gdrv_device *dev, char *err, size_t len)
{
    CUdevice d;
    size_t mem = 0;
    CUuuid u;
    int r;

    if ((r = need_usable(err, len)) < 0)
        return r;
    memset(dev, 0, sizeof(*dev));
    dev->ordinal = ordinal;
    if ((r = check(drv.dev_get(&d, ordinal), "cuDeviceGet", ordinal, err, len)) < 0 ||
        (r = check(drv.dev_name(dev->name, (int)sizeof(dev->name), d), "cuDeviceGetName", ordinal,
                   err, len)) < 0 ||
        (r = check(drv.dev_mem(&mem, d), "cuDeviceTotalMem", ordinal, err, len)) < 0 ||
        (r = check(drv.dev_uuid(&u, d), "cuDeviceGetUuid", ordinal, err, len)) < 0)
        return r;
    dev->total_mem = mem;
    memcpy(dev->uuid, u.bytes, 16);
    return 0;
}

int gdrv_devices(struct gdrv_device *devs, int max, char *err, size_t len)
{
    int n, r;

    if ((r = need_driver(err, len)) < 0)
        return r;
    if ((n = gdrv_device_count(err, len)) < 0)
        return n;
    for (int i = 0; i < n && i < max; i++)
        if ((r = gdrv_device(i, &devs[i], err, len)) < 0)
            return r;
    return n;
}
