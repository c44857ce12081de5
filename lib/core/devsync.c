/*
 * devsync.c - contexts for tcgpu's own device work, and waiting for the
 * program's device work with a bound; see devsync.h.
 *
 * Apart from snapshot.c because it is a mechanism of its own, with a thread
 * of its own (the waiter), used before anything is collected (ops.c's
 * quiesce) and by every copy and prefetch after: snapshot.c decides what is
 * saved, this file only makes the device reachable and idle.
 */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "devsync.h"
#include "driver/driver.h"
#include "graphmem.h"
#include "objects.h"
#include "thread.h"
#include "common/clock.h"
#include "common/errmsg.h"

#define MAX_CTX 64

/* --- contexts ------------------------------------------------------------ */

/* The device whose primary context devsync_ctx_enter retained on this thread, or -1. */
static __thread int retained_primary = -1;

/*
 * A program that destroyed every context of a device still holds its VMM
 * memory there (that memory belongs to no context): copy it with the
 * device's primary context, retained for the copy only.
 */
static int enter_primary(int device)
{
    CUcontext ctx;
    CUresult rc = TCGPU_REAL(cuDevicePrimaryCtxRetain)(&ctx, device);

    if (rc == CUDA_SUCCESS && (rc = TCGPU_REAL(cuCtxPushCurrent)(ctx)) != CUDA_SUCCESS)
        TCGPU_REAL(cuDevicePrimaryCtxRelease)(device);
    if (rc != CUDA_SUCCESS) {
        errmsg_set("device %d: the program has no context left there, and its primary "
                   "context cannot be made current: %s", device, cu_error_name(rc));
        return -EIO;
    }
    retained_primary = device;
    return 0;
}

int devsync_ctx_enter(int device, void *unused)
{
    CUcontext ctxs[MAX_CTX];
    CUdevice devs[MAX_CTX];
    size_t n = objects_contexts(ctxs, devs, MAX_CTX);
    CUresult rc;

    (void)unused;
    for (size_t i = 0; i < n && i < MAX_CTX; i++) {
        if (devs[i] != device)
            continue;
        rc = TCGPU_REAL(cuCtxPushCurrent)(ctxs[i]);
        if (rc != CUDA_SUCCESS) {
            errmsg_set("cuCtxPushCurrent(device %d): %s", device, cu_error_name(rc));
            return -EIO;
        }
        return 0;
    }
    return enter_primary(device);
}

void devsync_ctx_leave(void *unused)
{
    CUcontext ignored;

    (void)unused;
    TCGPU_REAL(cuCtxPopCurrent)(&ignored);
    if (retained_primary >= 0) {
        TCGPU_REAL(cuDevicePrimaryCtxRelease)(retained_primary);
        retained_primary = -1;
    }
}

int devsync_ctx_live(CUcontext ctx)
{
    CUcontext ctxs[MAX_CTX];
    CUdevice devs[MAX_CTX];
    size_t n = objects_contexts(ctxs, devs, MAX_CTX);

    for (size_t i = 0; i < n && i < MAX_CTX; i++)
        if (ctxs[i] == ctx)
            return 1;
    return 0;
}

/* --- waiting for the device, with a bound ----------------------------------
 *
 * cuCtxSynchronize waits for ever when device work never ends while no
 * thread is inside a driver call (a kernel the program polls with
 * cuStreamQuery, a host function waiting for one of its threads): the
 * program would stay parked at the gate and the operation would never end.
 * So every stream tcgpu can name is polled with cuStreamQuery until the
 * deadline, and what is left (the per-thread default streams, which only
 * their thread can name) is waited for by cuCtxSynchronize on a thread of
 * ours, up to the deadline. On timeout the operation fails naming the stream
 * and its last work; the caller reopens the gate. (docs/interposition.md,
 * "Waiting for the device") */

#define SYNC_MAX_STREAMS 256

static void nap_us(unsigned us)
{
    struct timespec ts = { 0, (long)us * 1000 };

    nanosleep(&ts, NULL);
}

/* The device is stuck: name the first busy stream (and how many more). */
static int device_timeout(unsigned timeout_ms, const struct obj_stream *busy, size_t more)
{
    char what[320], also[48] = "";

    objects_describe_stream(busy, what, sizeof(what));
    if (more)
        snprintf(also, sizeof(also), " (and %zu more stream%s)", more, more > 1 ? "s" : "");
    errmsg_set("device work did not finish within %u ms (TCGPU_GATE_TIMEOUT_MS): %s%s",
               timeout_ms, what, also);
    return -ETIMEDOUT;
}

/* Polls the queryable streams of ctx (current) until idle, a sticky error or
 * the deadline. */
static int wait_streams(CUcontext ctx, int device, uint64_t deadline, unsigned timeout_ms)
{
    static struct obj_stream st[SYNC_MAX_STREAMS + 1];   /* the op thread's only */
    size_t n = objects_streams_of(ctx, st, SYNC_MAX_STREAMS), legacy = SIZE_MAX;
    unsigned nap = 100;

    if (n > SYNC_MAX_STREAMS)
        n = SYNC_MAX_STREAMS;
    for (size_t i = 0; i < n; i++)
        if (st[i].kind == OBJ_STREAM_LEGACY)
            legacy = i;
    if (legacy == SIZE_MAX) {
        /* the legacy stream is there whether or not work was noted on it */
        st[n] = (struct obj_stream){ .kind = OBJ_STREAM_LEGACY, .ctx = ctx };
        legacy = n++;
    }
    for (;;) {
        size_t busy = 0, first = 0;

        for (size_t i = 0; i < n; i++) {
            CUresult rc;
            if (st[i].kind == OBJ_STREAM_PER_THREAD)
                continue;
            rc = TCGPU_REAL(cuStreamQuery)(i == legacy ? CU_STREAM_LEGACY : st[i].handle);
            if (rc == CUDA_SUCCESS) {
                st[i].kind = OBJ_STREAM_PER_THREAD;         /* done: skip it from now on */
                continue;
            }
            if (rc != CUDA_ERROR_NOT_READY) {
                /* A sticky error (a kernel faulted): the device state is
                 * not trustworthy, so saving it would save garbage. */
                errmsg_set("device %d: %s", device, cu_error_name(rc));
                return -EIO;
            }
            if (!busy++)
                first = i;
        }
        if (!busy)
            return 0;
        if (now_ns() >= deadline)
            return device_timeout(timeout_ms, &st[first], busy - 1);
        nap_us(nap);
        nap = nap < 5000 ? nap * 2 : 5000;
    }
}

/* The thread that runs cuCtxSynchronize for the bounded wait. It may stay
 * inside the driver after a timeout until the work ends; the next wait then
 * waits for it first. */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t cv;            /* CLOCK_MONOTONIC */
    pid_t pid;                    /* the process it runs in; a fork child starts its own */
    CUcontext ctx;
    int asked, busy;
    CUresult result;
} waiter = { .lock = PTHREAD_MUTEX_INITIALIZER };

static void *waiter_main(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&waiter.lock);
    for (;;) {
        while (!waiter.asked)
            pthread_cond_wait(&waiter.cv, &waiter.lock);
        CUcontext ctx = waiter.ctx;
        waiter.asked = 0;
        pthread_mutex_unlock(&waiter.lock);
        CUresult rc = TCGPU_REAL(cuCtxPushCurrent)(ctx);
        if (rc == CUDA_SUCCESS) {
            CUcontext ignored;
            rc = TCGPU_REAL(cuCtxSynchronize)();
            TCGPU_REAL(cuCtxPopCurrent)(&ignored);
        }
        pthread_mutex_lock(&waiter.lock);
        waiter.result = rc;
        waiter.busy = 0;
        pthread_cond_broadcast(&waiter.cv);
    }
    return NULL;
}

/* Starts the waiter once per process (lock held). */
static int waiter_ensure(void)
{
    pthread_condattr_t ca;
    int rc;

    if (waiter.pid == getpid())
        return 0;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&waiter.cv, &ca);
    pthread_condattr_destroy(&ca);
    waiter.asked = waiter.busy = 0;
    if ((rc = core_thread_start(NULL, waiter_main, "tcgpu-devwait", 0)))
        return rc;
    waiter.pid = getpid();
    return 0;
}

/* Waits until !waiter.busy or the deadline (lock held); 1 when still busy. */
static int waiter_busy_until(uint64_t deadline)
{
    while (waiter.busy) {
        struct timespec ts = { (time_t)(deadline / 1000000000u), (long)(deadline % 1000000000u) };
        if (now_ns() >= deadline)
            return 1;
        pthread_cond_timedwait(&waiter.cv, &waiter.lock, &ts);
    }
    return 0;
}

/* What cuCtxSynchronize still waits for when no queryable stream is busy. */
static void describe_unqueryable(CUcontext ctx, char *buf, size_t len)
{
    static struct obj_stream st[SYNC_MAX_STREAMS];
    size_t n = objects_streams_of(ctx, st, SYNC_MAX_STREAMS);

    for (size_t i = 0; i < n && i < SYNC_MAX_STREAMS; i++) {
        if (st[i].kind == OBJ_STREAM_PER_THREAD) {
            objects_describe_stream(&st[i], buf, len);
            return;
        }
    }
    snprintf(buf, len, "work of context %p on no stream tcgpu can query", (void *)ctx);
}

static int sync_bounded(CUcontext ctx, int device, uint64_t deadline, unsigned timeout_ms)
{
    char what[320];
    CUresult rc;
    int r;

    if (waiter.pid != getpid())               /* a fork child: the parent's state is stale */
        pthread_mutex_init(&waiter.lock, NULL);
    pthread_mutex_lock(&waiter.lock);
    if ((r = waiter_ensure()) != 0) {
        pthread_mutex_unlock(&waiter.lock);
        errmsg_set("cannot start the device wait thread: %s", strerror(-r));
        return r;
    }
    if (waiter_busy_until(deadline)) {
        pthread_mutex_unlock(&waiter.lock);
        errmsg_set("device work did not finish within %u ms (TCGPU_GATE_TIMEOUT_MS): an "
                   "earlier operation's wait for it still has not ended", timeout_ms);
        return -ETIMEDOUT;
    }
    waiter.ctx = ctx;
    waiter.asked = waiter.busy = 1;
    pthread_cond_broadcast(&waiter.cv);
    if (waiter_busy_until(deadline)) {
        pthread_mutex_unlock(&waiter.lock);
        describe_unqueryable(ctx, what, sizeof(what));
        errmsg_set("device work did not finish within %u ms (TCGPU_GATE_TIMEOUT_MS): %s",
                   timeout_ms, what);
        return -ETIMEDOUT;
    }
    rc = waiter.result;
    pthread_mutex_unlock(&waiter.lock);
    if (rc != CUDA_SUCCESS) {
        errmsg_set("cuCtxSynchronize on device %d: %s", device, cu_error_name(rc));
        return -EIO;
    }
    return 0;
}

/*
 * A stream capture in progress: synchronising the context now would be an
 * error that invalidates the program's capture (the driver's rule), so the
 * operation is refused and the program carries on; a later try succeeds
 * once the capture has ended.
 */
static int refuse_during_capture(void)
{
    char what[160];

    if (!graphmem_capture_describe(what, sizeof(what)))
        return 0;
    errmsg_set("%s: the device cannot be synchronised until it ends (try again later)", what);
    return -EBUSY;
}

int devsync_wait(unsigned timeout_ms)
{
    CUcontext ctxs[MAX_CTX];
    CUdevice devs[MAX_CTX];
    size_t n = objects_contexts(ctxs, devs, MAX_CTX);
    uint64_t deadline = now_ns() + (uint64_t)timeout_ms * 1000000u;
    CUresult rc;
    int r;

    if ((r = refuse_during_capture()) != 0)
        return r;
    for (size_t i = 0; i < n && i < MAX_CTX; i++) {
        if ((rc = TCGPU_REAL(cuCtxPushCurrent)(ctxs[i])) != CUDA_SUCCESS) {
            errmsg_set("cuCtxPushCurrent: %s", cu_error_name(rc));
            return -EIO;
        }
        r = wait_streams(ctxs[i], (int)devs[i], deadline, timeout_ms);
        devsync_ctx_leave(NULL);
        if (r == 0)
            r = sync_bounded(ctxs[i], (int)devs[i], deadline, timeout_ms);
        if (r)
            return r;
    }
    return 0;
}
