/*
 * drv_ckpt.c - the CUDA driver's own checkpoint API on another process, timed:
 * the "cuda-checkpoint" path the real-GPU suite compares tcgpu with
 * (tests/gpu/README.md).
 *
 *   drv_ckpt state PID                 RUNNING, LOCKED, CHECKPOINTED or FAILED
 *   drv_ckpt suspend PID [--timeout-ms T]   Lock + Checkpoint: the process's GPU
 *                                      memory goes to host memory, its context
 *                                      and device handles are released
 *   drv_ckpt resume PID                Restore + Unlock
 *   drv_ckpt cycle PID [--hold-ms H]   suspend, wait H ms, resume
 *
 * Each call prints "drv_<call>_ms <milliseconds>" on stdout (drv_lock_ms,
 * drv_checkpoint_ms, drv_restore_ms, drv_unlock_ms). The driver is loaded with
 * dlopen ($DRV_CKPT_LIBCUDA, else libcuda.so.1), so this builds without CUDA
 * libraries and runs on simcuda too; cuInit(0) comes first because Restore
 * needs an initialised driver (or persistence mode) in the calling process.
 * Exit status: 0 ok, 1 a driver call failed (its name and error on stderr),
 * 2 usage, 3 the API is missing (driver older than r570 / CUDA 12.8).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <cuda.h>

typedef CUresult (*init_fn)(unsigned);
typedef CUresult (*ver_fn)(int *);
typedef CUresult (*errname_fn)(CUresult, const char **);
typedef CUresult (*state_fn)(int, CUprocessState *);
typedef CUresult (*lock_fn)(int, CUcheckpointLockArgs *);
typedef CUresult (*ckpt_fn)(int, CUcheckpointCheckpointArgs *);
typedef CUresult (*restore_fn)(int, CUcheckpointRestoreArgs *);
typedef CUresult (*unlock_fn)(int, CUcheckpointUnlockArgs *);

static struct {
    init_fn init;
    ver_fn version;
    errname_fn errname;
    state_fn state;
    lock_fn lock;
    ckpt_fn checkpoint;
    restore_fn restore;
    unlock_fn unlock;
} drv;

static const char *err_name(CUresult rc)
{
    const char *s = NULL;

    if (drv.errname && drv.errname(rc, &s) == CUDA_SUCCESS && s)
        return s;
    return "unknown error";
}

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static int load_driver(void)
{
    const char *path = getenv("DRV_CKPT_LIBCUDA");
    void *h = dlopen(path && *path ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    int version = 0;
    CUresult rc;

    if (!h) {
        fprintf(stderr, "drv_ckpt: cannot load the driver: %s\n", dlerror());
        return 3;
    }
    drv.init = (init_fn)dlsym(h, "cuInit");
    drv.version = (ver_fn)dlsym(h, "cuDriverGetVersion");
    drv.errname = (errname_fn)dlsym(h, "cuGetErrorName");
    drv.state = (state_fn)dlsym(h, "cuCheckpointProcessGetState");
    drv.lock = (lock_fn)dlsym(h, "cuCheckpointProcessLock");
    drv.checkpoint = (ckpt_fn)dlsym(h, "cuCheckpointProcessCheckpoint");
    drv.restore = (restore_fn)dlsym(h, "cuCheckpointProcessRestore");
    drv.unlock = (unlock_fn)dlsym(h, "cuCheckpointProcessUnlock");
    if (!drv.init || !drv.version) {
        fprintf(stderr, "drv_ckpt: the driver lacks cuInit/cuDriverGetVersion\n");
        return 3;
    }
    if ((rc = drv.init(0)) != CUDA_SUCCESS) {
        fprintf(stderr, "drv_ckpt: cuInit: %s (%d)\n", err_name(rc), (int)rc);
        return 1;
    }
    if (drv.version(&version) == CUDA_SUCCESS && version < 12080) {
        fprintf(stderr, "drv_ckpt: driver API %d has no checkpoint API (needs 12080)\n", version);
        return 3;
    }
    if (!drv.state || !drv.lock || !drv.checkpoint || !drv.restore || !drv.unlock) {
        fprintf(stderr, "drv_ckpt: the driver lacks cuCheckpointProcess* functions\n");
        return 3;
    }
    return 0;
}

/* Runs one call, prints its time; 0 or 1. */
#define TIMED(label, call)                                                          \
    do {                                                                            \
        double t0_ = now_ms();                                                      \
        CUresult rc_ = (call);                                                      \
        double t1_ = now_ms();                                                      \
        if (rc_ != CUDA_SUCCESS) {                                                  \
            fprintf(stderr, "drv_ckpt: %s(pid %d): %s (%d) after %.1f ms\n",        \
                    #call, pid, err_name(rc_), (int)rc_, t1_ - t0_);                \
            return 1;                                                               \
        }                                                                           \
        printf("drv_%s_ms %.2f\n", label, t1_ - t0_);                               \
        fflush(stdout);                                                             \
    } while (0)

static int do_suspend(int pid, unsigned timeout_ms)
{
    CUcheckpointLockArgs la;
    CUcheckpointCheckpointArgs ca;

    memset(&la, 0, sizeof(la));
    memset(&ca, 0, sizeof(ca));
    la.timeoutMs = timeout_ms;
    TIMED("lock", drv.lock(pid, &la));
    TIMED("checkpoint", drv.checkpoint(pid, &ca));
    return 0;
}

static int do_resume(int pid)
{
    CUcheckpointRestoreArgs ra;
    CUcheckpointUnlockArgs ua;

    memset(&ra, 0, sizeof(ra));
    memset(&ua, 0, sizeof(ua));
    TIMED("restore", drv.restore(pid, &ra));
    TIMED("unlock", drv.unlock(pid, &ua));
    return 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: drv_ckpt state|suspend|resume|cycle PID [--timeout-ms T] [--hold-ms H]\n");
    return 2;
}

int main(int argc, char **argv)
{
    static const char *names[] = { "RUNNING", "LOCKED", "CHECKPOINTED", "FAILED" };
    unsigned timeout_ms = 10000, hold_ms = 0;
    CUprocessState st;
    char *end;
    int pid, rc;

    if (argc < 3)
        return usage();
    pid = (int)strtol(argv[2], &end, 10);
    if (*end || pid <= 0)
        return usage();
    for (int i = 3; i < argc; i += 2) {
        if (i + 1 >= argc)
            return usage();
        if (!strcmp(argv[i], "--timeout-ms"))
            timeout_ms = (unsigned)strtoul(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--hold-ms"))
            hold_ms = (unsigned)strtoul(argv[i + 1], NULL, 10);
        else
            return usage();
    }
    if ((rc = load_driver()) != 0)
        return rc;

    if (!strcmp(argv[1], "state")) {
        CUresult r = drv.state(pid, &st);
        if (r != CUDA_SUCCESS) {
            fprintf(stderr, "drv_ckpt: cuCheckpointProcessGetState(pid %d): %s (%d)\n", pid,
                    err_name(r), (int)r);
            return 1;
        }
        printf("%s\n", (unsigned)st < 4 ? names[st] : "UNKNOWN");
        return 0;
    }
    if (!strcmp(argv[1], "suspend"))
        return do_suspend(pid, timeout_ms);
    if (!strcmp(argv[1], "resume"))
        return do_resume(pid);
    if (!strcmp(argv[1], "cycle")) {
        if ((rc = do_suspend(pid, timeout_ms)) != 0)
            return rc;
        struct timespec ts = { hold_ms / 1000, (long)(hold_ms % 1000) * 1000000L };
        nanosleep(&ts, NULL);
        return do_resume(pid);
    }
    return usage();
}
