/*
 * throttle.h - a job's share of the GPU's compute (docs/tcgpud.md,
 * "Compute share"): the launch wrappers (interpose/track_launch.c) hold the
 * job's kernel launches back so that, over a window, its kernels occupy
 * about its cap of the device.
 *
 * The share comes from TCGPU_GPU_COMPUTE (gpuckpt run --gpu-compute 30%) or
 * from tcgpud (the project's default_compute); the cap is what tcgpud says
 * applies now (no cap while no other job computes on the device), or the
 * share itself when there is no tcgpud to ask.
 *
 * How: a token bucket in device time. The cap refills it (cap x wall time,
 * at most one window's worth); each launch takes the kernel's expected
 * duration; a launch that finds the bucket empty sleeps until it refills,
 * outside the API gate (so a suspend is never held up by it). The expected
 * duration of each kernel (by CUfunction) is learnt from events recorded
 * around some of its launches, keeping the fastest of what it measured:
 * when another process's kernels run in between, a kernel looks slower than
 * it is, and charging that would give the job less than its share.
 *
 * Cost: a job without a share pays one relaxed load and (when tcgpud is
 * there) one relaxed store and load per launch, and once cuCtxGetDevice; a job with a share alone on its
 * device a lock and a clock read, and two event records every 8th launch.
 *
 * Thread-safe: any thread may launch; the reporter thread (daemon_client.c)
 * reads and sets the numbers.
 */
#ifndef TCGPU_THROTTLE_H
#define TCGPU_THROTTLE_H

#include <stdatomic.h>
#include <stdint.h>

#include <cuda.h>

#define THROTTLE_FULL      1000u          /* permille: the whole device */
#define THROTTLE_WINDOW_NS 100000000ull   /* the bucket holds at most this much of cap */

extern _Atomic unsigned tcgpu_throttle_on;      /* a share is set: launches go the slow way */
extern _Atomic int tcgpu_throttle_launched;     /* a launch since the last report */
extern _Atomic int tcgpu_throttle_counting;     /* tcgpud wants to hear of launches */
extern _Atomic int tcgpu_throttle_device;       /* the device launched on; -1: not known yet */

/* One launch in flight between throttle_before() and throttle_after(). */
struct throttle_ticket {
    CUevent start;                /* recorded before the kernel, NULL: not measured */
    CUevent end;                  /* recorded after it */
    CUcontext ctx;
    CUfunction fn;
    CUstream stream;
    int per_thread;               /* the _ptsz flavour: events on the per-thread stream */
};

/* Take TCGPU_GPU_COMPUTE from the settings (once; at cuInit). */
void throttle_configure(void);
/* The job's share (permille, 0: none; tcgpud's answer at registration
 * when the settings gave none) and the cap that applies now. */
void throttle_set_share(unsigned permille);
void throttle_set_cap(unsigned permille);
unsigned throttle_share(void);
unsigned throttle_cap(void);

/* What the reporter tells tcgpud: whether the job launched since the last
 * call, the device share its kernels took (permille, as charged), and the
 * device of its last measured launch (-1: unknown). Resets the period. */
void throttle_take_report(int *active, unsigned *busy, int *device);

void throttle_before_slow(struct throttle_ticket *t, CUfunction fn, CUstream s, int per_thread);
void throttle_learn_device(void);
void throttle_after_slow(struct throttle_ticket *t, CUresult rc);

/* Before the real launch (inside the API gate): may sleep (outside it). */
static inline void throttle_before(struct throttle_ticket *t, CUfunction fn, CUstream s,
                                   int per_thread)
{
    t->start = NULL;
    if (atomic_load_explicit(&tcgpu_throttle_on, memory_order_relaxed)) {
        throttle_before_slow(t, fn, s, per_thread);
        return;
    }
    if (atomic_load_explicit(&tcgpu_throttle_counting, memory_order_relaxed)) {
        atomic_store_explicit(&tcgpu_throttle_launched, 1, memory_order_relaxed);
        if (__builtin_expect(atomic_load_explicit(&tcgpu_throttle_device, memory_order_relaxed) < 0, 0))
            throttle_learn_device();      /* once: tcgpud is told where the job computes */
    }
}

/* After the real launch returned rc. */
static inline void throttle_after(struct throttle_ticket *t, CUresult rc)
{
    if (t->start)
        throttle_after_slow(t, rc);
}

/* The context is gone: forget the events made in it (no driver call). */
void throttle_ctx_gone(CUcontext ctx);

#endif
