/*
 * test_streams.c - stream ordering, default-stream semantics, events, callbacks.
 *
 * The "mark" kernel sleeps, then appends its id to a log in device memory;
 * the order of the log is the order in which the device ran the kernels.
 */
#include "harness.h"

#include <pthread.h>

static CUfunction k_mark;
static CUdeviceptr logbuf;

static void mark(CUstream s, uint32_t id, uint32_t ms)
{
    void *args[] = { &logbuf, &id, &ms };

    CHECK(cuLaunchKernel(k_mark, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
}

static void log_reset(void)
{
    CHECK(cuCtxSynchronize());
    CHECK(cuMemsetD32(logbuf, 0, 64));
}

/* The log after everything finished, as a number: ids as decimal digits. */
static unsigned log_read(void)
{
    return t_log_read(logbuf);
}

static void test_in_order(CUstream s)
{
    log_reset();
    mark(s, 1, 60);
    mark(s, 2, 0);
    mark(s, 3, 20);
    mark(s, 4, 0);
    CHECK_EQ(log_read(), 1234);
}

/* The legacy stream waits for blocking streams, and they wait for it. */
static void test_legacy(void)
{
    CUstream blocking, nonblocking;

    CHECK(cuStreamCreate(&blocking, CU_STREAM_DEFAULT));
    CHECK(cuStreamCreate(&nonblocking, CU_STREAM_NON_BLOCKING));

    log_reset();
    mark(blocking, 1, 80);
    mark(NULL, 2, 0);
    CHECK_EQ(log_read(), 12);

    log_reset();
    mark(CU_STREAM_LEGACY, 1, 80);
    mark(blocking, 2, 0);
    CHECK_EQ(log_read(), 12);

    /* Non-blocking streams are exempt in both directions. */
    log_reset();
    mark(nonblocking, 1, 150);
    mark(NULL, 2, 0);
    CHECK(cuStreamSynchronize(NULL));
    CHECK_EQ(log_read(), 21);

    log_reset();
    mark(NULL, 1, 150);
    mark(nonblocking, 2, 0);
    CHECK_EQ(log_read(), 21);

    /* Two blocking streams do not wait for each other. */
    CUstream other;
    CHECK(cuStreamCreate(&other, 0));
    log_reset();
    mark(blocking, 1, 150);
    mark(other, 2, 0);
    CHECK_EQ(log_read(), 21);

    CHECK(cuStreamDestroy(other));
    CHECK(cuStreamDestroy(blocking));
    CHECK(cuStreamDestroy(nonblocking));
}

static void test_events(void)
{
    CUstream a, b;
    CUevent e, t0, t1;
    float ms = 0;

    CHECK(cuStreamCreate(&a, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&b, CU_STREAM_NON_BLOCKING));
    CHECK(cuEventCreate(&e, CU_EVENT_DISABLE_TIMING));
    CHECK(cuEventCreate(&t0, 0));
    CHECK(cuEventCreate(&t1, 0));

    CHECK(cuEventQuery(e));                 /* never recorded: complete */
    log_reset();
    CHECK(cuEventRecord(t0, a));
    mark(a, 1, 100);
    CHECK(cuEventRecord(e, a));
    CHECK(cuEventRecord(t1, a));
    CHECK_RES(cuEventQuery(e), CUDA_ERROR_NOT_READY);
    CHECK_RES(cuStreamQuery(a), CUDA_ERROR_NOT_READY);
    CHECK_RES(cuEventElapsedTime(&ms, t0, t1), CUDA_ERROR_NOT_READY);
    CHECK(cuStreamWaitEvent(b, e, 0));
    mark(b, 2, 0);
    CHECK(cuEventSynchronize(e));
    CHECK(cuEventQuery(e));
    CHECK_EQ(log_read(), 12);
    CHECK(cuStreamQuery(a));
    CHECK(cuEventElapsedTime(&ms, t0, t1));
    CHECK_TRUE(ms >= 95.0f && ms < 5000.0f);
    CHECK_RES(cuEventElapsedTime(&ms, t0, e), CUDA_ERROR_INVALID_HANDLE);   /* no timing */

    /* Without the wait, b runs first. */
    log_reset();
    mark(a, 1, 100);
    CHECK(cuEventRecord(e, a));
    mark(b, 2, 0);
    CHECK_EQ(log_read(), 21);

    CHECK(cuEventDestroy(e));
    CHECK_RES(cuEventQuery(e), CUDA_ERROR_INVALID_HANDLE);
    CHECK(cuEventDestroy(t0));
    CHECK(cuEventDestroy(t1));
    CHECK(cuStreamDestroy(a));
    CHECK(cuStreamDestroy(b));
    CHECK_RES(cuStreamQuery(a), CUDA_ERROR_INVALID_HANDLE);
}

static int host_seen[4];
static CUresult cb_status = (CUresult)-1;

static void host_fn(void *p)
{
    uint32_t v[64];
    int *slot = p;

    /* Runs after the kernel before it: the log already has its id. */
    (void)v;
    *slot = 1;
}

static void stream_cb(CUstream s, CUresult status, void *p)
{
    (void)s;
    cb_status = status;
    *(int *)p = 2;
}

static void test_callbacks(void)
{
    CUstream s;

    CHECK(cuStreamCreate(&s, 0));
    log_reset();
    mark(s, 1, 100);
    CHECK(cuLaunchHostFunc(s, host_fn, &host_seen[0]));
    CHECK(cuStreamAddCallback(s, stream_cb, &host_seen[1], 0));
    CHECK_EQ(host_seen[0], 0);             /* still behind the kernel */
    CHECK_RES(cuStreamAddCallback(s, stream_cb, NULL, 1), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuStreamSynchronize(s));
    CHECK_EQ(host_seen[0], 1);
    CHECK_EQ(host_seen[1], 2);
    CHECK_EQ(cb_status, CUDA_SUCCESS);
    CHECK(cuStreamDestroy(s));
}

/* Per-thread default streams: each thread has its own, not waiting for the
 * other's; the legacy stream waits for both. */
static CUcontext g_ctx;

static void *ptds_thread(void *arg)
{
    uint32_t id = (uint32_t)(uintptr_t)arg;
    uint32_t ms = id == 1 ? 200 : 0;
    void *args[] = { &logbuf, &id, &ms };

    CHECK(cuCtxSetCurrent(g_ctx));
    CHECK(cuLaunchKernel_ptsz(k_mark, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
    if (id == 2) {
        CHECK(cuStreamSynchronize(CU_STREAM_PER_THREAD));
        uint32_t v[2];
        CHECK(cuMemcpyDtoH_v2_ptds(v, logbuf, sizeof(v)));
        CHECK_EQ(v[0], 1);      /* thread 1's slow kernel has not run yet */
        CHECK_EQ(v[1], 2);
    }
    return NULL;
}

static void test_per_thread(void)
{
    pthread_t t1, t2;
    CUstream a, b;

    log_reset();
    CHECK_EQ(pthread_create(&t1, NULL, ptds_thread, (void *)1), 0);
    t_sleep_ms(20);
    CHECK_EQ(pthread_create(&t2, NULL, ptds_thread, (void *)2), 0);
    pthread_join(t2, NULL);
    pthread_join(t1, NULL);
    CHECK_EQ(log_read(), 21);

    /* The legacy stream waits for this thread's per-thread stream. */
    log_reset();
    mark(CU_STREAM_PER_THREAD, 1, 100);
    mark(CU_STREAM_LEGACY, 2, 0);
    CHECK_EQ(log_read(), 12);

    /* CU_STREAM_PER_THREAD is a different stream from CU_STREAM_LEGACY. */
    CHECK(cuStreamGetId(CU_STREAM_PER_THREAD, (unsigned long long *)&a));
    CHECK(cuStreamGetId(CU_STREAM_LEGACY, (unsigned long long *)&b));
    CHECK_TRUE(a != b);
}

static void test_stream_queries(void)
{
    CUstream s;
    unsigned flags = 99;
    int prio = 99, least, greatest;
    CUcontext c;

    CHECK(cuCtxGetStreamPriorityRange(&least, &greatest));
    CHECK(cuStreamCreateWithPriority(&s, CU_STREAM_NON_BLOCKING, greatest - 10));
    CHECK(cuStreamGetFlags(s, &flags));
    CHECK_EQ(flags, CU_STREAM_NON_BLOCKING);
    CHECK(cuStreamGetPriority(s, &prio));
    CHECK_EQ(prio, greatest);               /* clamped */
    CHECK(cuStreamGetCtx(s, &c));
    CHECK_TRUE(c == g_ctx);
    CHECK_RES(cuStreamCreate(&s, 0x40), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuStreamDestroy(s));
}

int main(void)
{
    CUmodule mod;
    CUstream s;

    sim_test_setup("streams");
    g_ctx = t_init();
    CHECK(cuModuleLoad(&mod, t_module_path()));
    CHECK(cuModuleGetFunction(&k_mark, mod, "mark"));
    CHECK(cuMemAlloc(&logbuf, 64 * sizeof(uint32_t)));

    test_in_order(NULL);
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    test_in_order(s);
    CHECK(cuStreamDestroy(s));
    test_legacy();
    test_events();
    test_callbacks();
    test_per_thread();
    test_stream_queries();

    CHECK(cuMemFree(logbuf));
    CHECK(cuModuleUnload(mod));
    CHECK(cuDevicePrimaryCtxRelease(0));
    printf("streams: ok\n");
    return 0;
}
