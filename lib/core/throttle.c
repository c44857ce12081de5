/*
 * throttle.c - a job's share of the GPU's compute; see throttle.h.
 *
 * Everything below the fast path runs under one mutex: the bucket, the
 * kernel durations learnt, the ring of launches being measured and the
 * events of each context. The driver calls made here (event create, record,
 * query, elapsed time) are the real driver's, never our wrappers.
 */
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "settings.h"
#include "throttle.h"
#include "driver/driver.h"
#include "driver/gate.h"
#include "common/clock.h"
#include "common/log.h"

#define RING        64            /* launches measured at once */
#define POOLS       4             /* contexts with events of ours */
#define ESTIMATES   256           /* kernels whose duration is known (open addressing) */
#define HISTORY     16            /* measurements kept per kernel: its duration is their least */
#define SAMPLE      8             /* alone on the device: measure one launch in SAMPLE */
#define DEFAULT_NS  1000000.0     /* a kernel never measured costs 1 ms until it is */
#define MIN_SLEEP   50000ull      /* ns: do not sleep for less */

_Atomic unsigned tcgpu_throttle_on;
_Atomic int tcgpu_throttle_launched;
_Atomic int tcgpu_throttle_counting;
_Atomic int tcgpu_throttle_device = -1;

struct pending {
    CUevent start, end;
    CUcontext ctx;
    CUfunction fn;
};

struct pool {
    CUcontext ctx;                /* NULL: free slot */
    int device;
    CUevent ev[2 * RING];
    int n;                        /* events free in ev[] */
};

static struct {
    pthread_mutex_t lock;
    int configured;
    unsigned share;               /* permille, 0: none */
    _Atomic unsigned cap;
    double tokens_ns;             /* device time the job may still use now */
    uint64_t last_ns;             /* tokens refilled up to here */
    struct pending ring[RING];
    unsigned head, n;
    struct pool pools[POOLS];
    struct estimate {
        CUfunction fn;
        double ns;                /* the least of hist[] */
        double hist[HISTORY];
        unsigned n, next;
    } est[ESTIMATES];
    double default_ns;            /* for kernels never measured: the last one measured */
    unsigned sample;
    double charged_ns;            /* since the last report */
    uint64_t period_ns;           /* the report period started */
    int device;                   /* of the last measured launch */
} th = { .lock = PTHREAD_MUTEX_INITIALIZER, .cap = THROTTLE_FULL, .default_ns = DEFAULT_NS,
         .device = -1 };

/* ---------------------------------------------------------------------------
 * Configuration
 * ------------------------------------------------------------------------- */

/* "30%" or "30" (1..100) into permille; 0 when malformed. */
static unsigned parse_share(const char *s)
{
    char *end;
    long v = strtol(s, &end, 10);

    if (end == s || (*end && strcmp(end, "%")) || v < 1 || v > 100)
        return 0;
    return (unsigned)v * 10;
}

void throttle_configure(void)
{
    const char *e = settings_get()->gpu_compute;

    pthread_mutex_lock(&th.lock);
    if (!th.configured) {
        th.configured = 1;
        if (*e) {
            unsigned share = parse_share(e);
            if (!share)
                log_err("TCGPU_GPU_COMPUTE=%s is not a percentage (1%%..100%%); no compute share", e);
            pthread_mutex_unlock(&th.lock);
            if (share)
                throttle_set_share(share);
            return;
        }
    }
    pthread_mutex_unlock(&th.lock);
}

void throttle_set_share(unsigned permille)
{
    if (permille > THROTTLE_FULL)
        permille = THROTTLE_FULL;
    pthread_mutex_lock(&th.lock);
    th.share = permille;
    th.tokens_ns = 0;
    th.last_ns = now_ns();
    th.period_ns = th.last_ns;
    pthread_mutex_unlock(&th.lock);
    /* until tcgpud says otherwise, the share itself: the careful guess */
    atomic_store(&th.cap, permille ? permille : THROTTLE_FULL);
    atomic_store(&tcgpu_throttle_on, permille > 0 && permille < THROTTLE_FULL);
}

void throttle_set_cap(unsigned permille)
{
    if (!permille || permille > THROTTLE_FULL)
        permille = THROTTLE_FULL;
    atomic_store(&th.cap, permille);
}

unsigned throttle_share(void)
{
    return th.share;
}

unsigned throttle_cap(void)
{
    return atomic_load(&th.cap);
}

void throttle_take_report(int *active, unsigned *busy, int *device)
{
    uint64_t now = now_ns();

    *active = atomic_exchange(&tcgpu_throttle_launched, 0);
    pthread_mutex_lock(&th.lock);
    *busy = now > th.period_ns ? (unsigned)(th.charged_ns * THROTTLE_FULL / (double)(now - th.period_ns))
                               : 0;
    if (*busy > THROTTLE_FULL)
        *busy = THROTTLE_FULL;
    *device = th.device >= 0 ? th.device : atomic_load(&tcgpu_throttle_device);
    th.charged_ns = 0;
    th.period_ns = now;
    pthread_mutex_unlock(&th.lock);
}

/* ---------------------------------------------------------------------------
 * Kernel durations
 * ------------------------------------------------------------------------- */

static size_t est_slot(CUfunction fn)
{
    size_t k = (size_t)(((uintptr_t)fn * 0x9e3779b97f4a7c15ull) >> 40) % ESTIMATES;

    for (size_t i = 0; i < ESTIMATES; i++, k = (k + 1) % ESTIMATES)
        if (th.est[k].fn == fn || !th.est[k].fn)
            return k;
    return (size_t)-1;                    /* full: kernels beyond get the default */
}

static double estimate(CUfunction fn)
{
    size_t k = est_slot(fn);

    return k != (size_t)-1 && th.est[k].fn == fn ? th.est[k].ns : th.default_ns;
}

/*
 * One measurement of fn. A kernel measured while another process's kernels
 * ran in between looks slower than it is; charging that would give the job
 * less than its share. So its duration is the least of its last HISTORY
 * measurements: one clean run in those resets it, and a kernel that really
 * became slower is followed once HISTORY measurements say so.
 */
static void learn(CUfunction fn, double ns)
{
    size_t k = est_slot(fn);
    struct estimate *e;

    if (ns <= 0)
        return;
    th.default_ns = ns;
    if (k == (size_t)-1)
        return;
    e = &th.est[k];
    if (e->fn != fn) {
        memset(e, 0, sizeof(*e));
        e->fn = fn;
    }
    e->hist[e->next] = ns;
    e->next = (e->next + 1) % HISTORY;
    if (e->n < HISTORY)
        e->n++;
    e->ns = e->hist[0];
    for (unsigned i = 1; i < e->n; i++)
        if (e->hist[i] < e->ns)
            e->ns = e->hist[i];
}

/* ---------------------------------------------------------------------------
 * Events
 * ------------------------------------------------------------------------- */

static struct pool *pool_of(CUcontext ctx)
{
    struct pool *free_slot = NULL;
    CUdevice dev;

    for (int i = 0; i < POOLS; i++) {
        if (th.pools[i].ctx == ctx)
            return &th.pools[i];
        if (!th.pools[i].ctx && !free_slot)
            free_slot = &th.pools[i];
    }
    if (!free_slot)
        return NULL;                      /* more contexts than pools: not measured */
    memset(free_slot, 0, sizeof(*free_slot));
    free_slot->ctx = ctx;
    free_slot->device = TCGPU_REAL(cuCtxGetDevice)(&dev) == CUDA_SUCCESS ? (int)dev : -1;
    return free_slot;
}

/* Two events of ctx's pool (made when needed). 0, or -1: none to be had. */
static int take_events(struct pool *pl, CUevent *a, CUevent *b)
{
    while (pl->n < 2) {
        CUevent e;
        if (TCGPU_REAL(cuEventCreate)(&e, CU_EVENT_DEFAULT) != CUDA_SUCCESS)
            return -1;
        pl->ev[pl->n++] = e;
    }
    *a = pl->ev[--pl->n];
    *b = pl->ev[--pl->n];
    return 0;
}

static void give_events(CUcontext ctx, CUevent a, CUevent b)
{
    for (int i = 0; i < POOLS; i++) {
        struct pool *pl = &th.pools[i];
        if (pl->ctx == ctx && pl->n + 2 <= 2 * RING) {
            pl->ev[pl->n++] = a;
            pl->ev[pl->n++] = b;
            return;
        }
    }
    /* its context is gone, or the pool is full: nothing to keep them for */
}

static CUresult record(CUevent e, CUstream s, int per_thread)
{
    return per_thread ? TCGPU_REAL_ABI(cuEventRecord_ptsz)(e, s) : TCGPU_REAL(cuEventRecord)(e, s);
}

/* Take what has been measured: the oldest launches whose end event fired. */
static void harvest(void)
{
    while (th.n) {
        struct pending *p = &th.ring[th.head];
        CUresult r = TCGPU_REAL(cuEventQuery)(p->end);
        float ms;
        if (r == CUDA_ERROR_NOT_READY)
            break;
        if (r == CUDA_SUCCESS && TCGPU_REAL(cuEventElapsedTime)(&ms, p->start, p->end) == CUDA_SUCCESS)
            learn(p->fn, (double)ms * 1e6);
        give_events(p->ctx, p->start, p->end);
        th.head = (th.head + 1) % RING;
        th.n--;
    }
}

void throttle_learn_device(void)
{
    CUdevice dev;

    if (TCGPU_REAL(cuCtxGetDevice)(&dev) == CUDA_SUCCESS)
        atomic_store(&tcgpu_throttle_device, (int)dev);
}

void throttle_ctx_gone(CUcontext ctx)
{
    pthread_mutex_lock(&th.lock);
    for (int i = 0; i < POOLS; i++)
        if (th.pools[i].ctx == ctx)
            memset(&th.pools[i], 0, sizeof(th.pools[i]));
    /* its launches are gone with it: drop them, keep the others in order */
    unsigned keep = 0;
    for (unsigned k = 0; k < th.n; k++) {
        struct pending p = th.ring[(th.head + k) % RING];
        if (p.ctx != ctx)
            th.ring[(th.head + keep++) % RING] = p;
    }
    th.n = keep;
    pthread_mutex_unlock(&th.lock);
}

/* ---------------------------------------------------------------------------
 * The launch path
 * ------------------------------------------------------------------------- */

static void refill(uint64_t now, unsigned cap)
{
    double full = (double)THROTTLE_WINDOW_NS * cap / THROTTLE_FULL;

    if (now > th.last_ns)
        th.tokens_ns += (double)(now - th.last_ns) * cap / THROTTLE_FULL;
    th.last_ns = now;
    if (th.tokens_ns > full)
        th.tokens_ns = full;
}

/* Sleep ns with the lock dropped and outside the API gate (when the launch
 * is the thread's outermost call), so that a suspend can close the gate. */
static void pause_launch(uint64_t ns)
{
    struct timespec ts = { (time_t)(ns / 1000000000ull), (long)(ns % 1000000000ull) };
    int left = tcgpu_gate_depth() == 1;

    pthread_mutex_unlock(&th.lock);
    if (left)
        tcgpu_gate_leave();
    nanosleep(&ts, NULL);
    if (left)
        tcgpu_gate_enter("cuLaunchKernel (compute share)");
    pthread_mutex_lock(&th.lock);
}

/* Wait until the bucket has device time for the launch, then take its cost. */
static void wait_turn(double cost)
{
    unsigned cap = atomic_load(&th.cap);

    refill(now_ns(), cap);
    while (cap < THROTTLE_FULL && th.tokens_ns < 0) {
        uint64_t ns = (uint64_t)(-th.tokens_ns * THROTTLE_FULL / cap);
        pause_launch(ns < MIN_SLEEP ? MIN_SLEEP : ns > THROTTLE_WINDOW_NS ? THROTTLE_WINDOW_NS : ns);
        harvest();
        cap = atomic_load(&th.cap);
        refill(now_ns(), cap);
    }
    if (cap < THROTTLE_FULL)
        th.tokens_ns -= cost;
    th.charged_ns += cost;
}

/* Record the start event of a launch to be measured. */
static void start_measure(struct throttle_ticket *t, CUfunction fn, CUstream s, int per_thread)
{
    CUcontext ctx = NULL;
    struct pool *pl;

    if (th.n >= RING || TCGPU_REAL(cuCtxGetCurrent)(&ctx) != CUDA_SUCCESS || !ctx ||
        !(pl = pool_of(ctx)) || take_events(pl, &t->start, &t->end) < 0)
        return;
    if (record(t->start, s, per_thread) != CUDA_SUCCESS) {
        give_events(ctx, t->start, t->end);
        t->start = NULL;
        return;
    }
    t->ctx = ctx;
    t->fn = fn;
    t->stream = s;
    t->per_thread = per_thread;
    th.device = pl->device;
    atomic_store_explicit(&tcgpu_throttle_device, pl->device, memory_order_relaxed);
}

/* Is the launch's stream being captured into a graph? Then nothing runs
 * now: the launch is not charged, and no event of ours goes into the graph. */
static int capturing(CUstream s, int per_thread)
{
    CUstreamCaptureStatus st = CU_STREAM_CAPTURE_STATUS_NONE;

    if (!tcgpu_driver_has(per_thread ? TCGPU_FN_ABI(cuStreamIsCapturing_ptsz)
                                     : TCGPU_FN(cuStreamIsCapturing)))
        return 0;
    if ((per_thread ? TCGPU_REAL_ABI(cuStreamIsCapturing_ptsz)(s, &st)
                    : TCGPU_REAL(cuStreamIsCapturing)(s, &st)) != CUDA_SUCCESS)
        return 1;                       /* cannot tell: stay out of its way */
    return st != CU_STREAM_CAPTURE_STATUS_NONE;
}

/* Our event calls must not disturb another thread's capture in global mode:
 * this thread's capture mode is relaxed while we make them. */
static CUstreamCaptureMode relax(void)
{
    CUstreamCaptureMode m = CU_STREAM_CAPTURE_MODE_RELAXED;

    if (tcgpu_driver_has(TCGPU_FN(cuThreadExchangeStreamCaptureMode)))
        TCGPU_REAL(cuThreadExchangeStreamCaptureMode)(&m);
    return m;
}

static void unrelax(CUstreamCaptureMode m)
{
    if (tcgpu_driver_has(TCGPU_FN(cuThreadExchangeStreamCaptureMode)))
        TCGPU_REAL(cuThreadExchangeStreamCaptureMode)(&m);
}

void throttle_before_slow(struct throttle_ticket *t, CUfunction fn, CUstream s, int per_thread)
{
    CUstreamCaptureMode mode;

    atomic_store_explicit(&tcgpu_throttle_launched, 1, memory_order_relaxed);
    if (capturing(s, per_thread))
        return;
    mode = relax();
    pthread_mutex_lock(&th.lock);
    harvest();
    wait_turn(estimate(fn));
    /* contended: measure every launch; alone: now and then, to know the kernels */
    if (atomic_load(&th.cap) < THROTTLE_FULL || ++th.sample % SAMPLE == 0)
        start_measure(t, fn, s, per_thread);
    pthread_mutex_unlock(&th.lock);
    unrelax(mode);
}

void throttle_after_slow(struct throttle_ticket *t, CUresult rc)
{
    CUstreamCaptureMode mode = relax();

    pthread_mutex_lock(&th.lock);
    if (rc == CUDA_SUCCESS && th.n < RING && record(t->end, t->stream, t->per_thread) == CUDA_SUCCESS) {
        th.ring[(th.head + th.n) % RING] = (struct pending){ t->start, t->end, t->ctx, t->fn };
        th.n++;
    } else {
        give_events(t->ctx, t->start, t->end);
    }
    pthread_mutex_unlock(&th.lock);
    unrelax(mode);
    t->start = NULL;
}
