/*
 * ckptapi.h - the CUDA driver seen from outside a process: its checkpoint
 * API (cuCheckpointProcess*, docs/save-restore.md) and its device list.
 *
 * In a process under tcgpu, lib/driver is the door to the driver; this is
 * the door for the programs that act on other processes: gpuckpt, the CRIU
 * plugin and its helper, and tcgpud's device probe. None is preloaded with
 * libtcgpu.so: the driver is loaded here with dlopen (the library the
 * program named with gdrv_set_library, else "libcuda.so.1") and its
 * functions looked up with dlsym. The driver is "usable" when it loads and
 * cuInit(0) succeeds (that creates no context); the checkpoint API is
 * "present" when, besides, the driver is >= 12.8 (12080) and every
 * cuCheckpointProcess* function resolves.
 *
 * After tcgpu has drained and released a process's device memory, what the
 * process still holds on the GPU is its context, modules and the driver's
 * bookkeeping. Lock + Checkpoint hands those to the driver, which releases
 * them (the process then holds no GPU resources, and CRIU can dump it);
 * Restore + Unlock take them back.
 *
 * Functions return 0 or -errno and, on failure, write a one-line message
 * naming the process, the call and the driver's error into err (when err
 * is not NULL):
 *   -ENODEV     the API is not present (err says why)
 *   -ESRCH      the driver does not know the process (not a CUDA process)
 *   -EALREADY   the process is not in the state the call needs
 *   -ETIMEDOUT  Lock: a CUDA call did not finish in time (still running)
 *   -ENOMEM     Restore: no room on the device now (still checkpointed)
 *   -EIO        any other driver error
 * Not thread-safe: each of its users calls it from one thread.
 */
#ifndef TCGPU_CKPTAPI_H
#define TCGPU_CKPTAPI_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* The driver's process states (CUprocessState), plus "unknown to the driver". */
enum gdrv_state {
    GDRV_RUNNING = 0,
    GDRV_LOCKED = 1,
    GDRV_CHECKPOINTED = 2,
    GDRV_FAILED = 3,
    GDRV_NONE = -1,             /* not a CUDA process (or the API is absent) */
};

/* The driver library to load (the programs pass $TCGPU_REAL_LIBCUDA); NULL
 * or "" for "libcuda.so.1". Call it before anything here loads the driver:
 * it is loaded once. path must stay valid (an environment string does). */
void gdrv_set_library(const char *path);

/* 1 when the checkpoint API is present, else 0 with the reason in why. Loads once. */
int gdrv_available(char *why, size_t len);

/* What gpuckpt check says about the driver. */
struct gdrv_probe {
    const char *library;        /* $TCGPU_REAL_LIBCUDA, else "libcuda.so.1" */
    int usable;                 /* it loads and cuInit succeeds */
    int version;                /* cuDriverGetVersion's, 0 when unknown */
    int checkpoint_api;         /* gdrv_available() */
    char why[512];              /* without the API: why (the first thing that failed) */
};
void gdrv_probe(struct gdrv_probe *p);

/* "running", "locked", "checkpointed", "failed", "none". */
const char *gdrv_state_name(int state);

/* The driver's state of pid: 0 with *state set, -ESRCH (unknown to the driver), -ENODEV. */
int gdrv_get_state(pid_t pid, int *state, char *err, size_t len);

/*
 * Lock + Checkpoint: the process's remaining GPU state goes to the driver
 * and is released. All or nothing: when Checkpoint fails the process is
 * unlocked again and keeps its context. timeout_ms bounds Lock (0: none).
 */
int gdrv_release(pid_t pid, unsigned timeout_ms, char *err, size_t len);

/*
 * Brings the process back to RUNNING from whatever state a release left it
 * in (GetState says): CHECKPOINTED -> Restore -> Unlock; LOCKED -> Unlock;
 * RUNNING: nothing. -ENOMEM from Restore leaves it checkpointed, safely.
 */
int gdrv_reacquire(pid_t pid, char *err, size_t len);

/* The driver's restore thread of pid (cuCheckpointProcessGetRestoreThreadId),
 * as the caller numbers threads: 0, -ESRCH, -ENODEV. */
int gdrv_restore_tid(pid_t pid, pid_t *tid, char *err, size_t len);

/* Restore onto other GPUs of the same model: n pairs (at most 16) of old and
 * new device UUIDs, passed to every later Restore (gpuckpt restore). */
void gdrv_set_remap(const uint8_t (*old_uuid)[16], const uint8_t (*new_uuid)[16], int n);

/* Device identity as the driver reports it now (gpuckpt save/restore). */
struct gdrv_device {
    int ordinal;
    uint64_t total_mem;
    uint8_t uuid[16];
    char name[256];
};

/* The driver version (e.g. 12080), or -ENODEV. */
int gdrv_driver_version(void);

/* Number of devices, filling at most max entries of devs; or -errno
 * (-ENODEV without the checkpoint API). */
int gdrv_devices(struct gdrv_device *devs, int max, char *err, size_t len);

/*
 * The devices one by one, from any usable driver, with or without the
 * checkpoint API (tcgpud's probe, which also skips a device that cannot be
 * asked). gdrv_device_count: the number of devices, or -ENODEV (the driver
 * is not usable: err says why) or another -errno of the list above.
 * gdrv_device: the identity of device `ordinal` into *dev: 0 or -errno.
 */
int gdrv_device_count(char *err, size_t len);
int gdrv_device(int ordinal, struct gdrv_device *dev, char *err, size_t len);

#endif
