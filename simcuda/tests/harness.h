/*
 * harness.h - the few checks simcuda's tests need; no framework.
 *
 * Every failed check prints file:line, the expression and, for CUresults,
 * the code's name, then exits 1. sim_test_setup() gives the test its own
 * simulated machine (a unique SIMCUDA_SHM, unlinked at exit) unless the
 * environment already names one (child processes inherit it).
 */
#ifndef SIMCUDA_TEST_HARNESS_H
#define SIMCUDA_TEST_HARNESS_H

#include <cuda.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

/* Per-thread-default-stream ABI variants (cuda.h declares them only for
 * CUDA_API_PER_THREAD_DEFAULT_STREAM builds). */
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                             unsigned int bx, unsigned int by, unsigned int bz, unsigned int shmem,
                             CUstream s, void **params, void **extra);
CUresult cuMemcpyDtoH_v2_ptds(void *dst, CUdeviceptr src, size_t n);
CUresult cuMemcpyHtoD_v2_ptds(CUdeviceptr dst, const void *src, size_t n);

static inline const char *t_err(CUresult r)
{
    const char *n = NULL;

    if (cuGetErrorName(r, &n) != CUDA_SUCCESS || !n)
        return "?";
    return n;
}

#define T_FAIL(...)                                                          \
    do {                                                                     \
        fprintf(stderr, "%s:%d: FAIL: ", __FILE__, __LINE__);                \
        fprintf(stderr, __VA_ARGS__);                                        \
        fprintf(stderr, "\n");                                               \
        exit(1);                                                             \
    } while (0)

/* call must return want. */
#define CHECK_RES(call, want)                                                \
    do {                                                                     \
        CUresult r_ = (call), w_ = (want);                                   \
        if (r_ != w_)                                                        \
            T_FAIL("%s = %s (%d), expected %s", #call, t_err(r_), (int)r_,  \
                   t_err(w_));                                               \
    } while (0)
#define CHECK(call) CHECK_RES(call, CUDA_SUCCESS)
#define CHECK_TRUE(cond)                                                     \
    do {                                                                     \
        if (!(cond))                                                         \
            T_FAIL("%s is false", #cond);                                    \
    } while (0)
#define CHECK_EQ(a, b)                                                       \
    do {                                                                     \
        unsigned long long a_ = (unsigned long long)(a), b_ = (unsigned long long)(b); \
        if (a_ != b_)                                                        \
            T_FAIL("%s = %llu (0x%llx), expected %s = %llu (0x%llx)", #a, a_, a_, #b, b_, b_); \
    } while (0)

static char t_shm_name[96];

static inline void t_unlink_shm(void)
{
    if (t_shm_name[0])
        shm_unlink(t_shm_name);
}

/* Own simulated machine for this test (and its children). */
static inline void sim_test_setup(const char *name)
{
    const char *cur = getenv("SIMCUDA_SHM");

    if (cur && !strncmp(cur, "/simcuda-test-", 14))
        return;     /* a child of a test: share the parent's machine */
    snprintf(t_shm_name, sizeof(t_shm_name), "/simcuda-test-%s-%d", name, (int)getpid());
    shm_unlink(t_shm_name);
    setenv("SIMCUDA_SHM", t_shm_name, 1);
    atexit(t_unlink_shm);
}

/* simcuda-smi (SIMCUDA_SMI) of our machine with args (a query), to read line
 * by line; pclose() it. */
static inline FILE *t_smi_query(const char *args)
{
    char cmd[512];
    FILE *f;

    snprintf(cmd, sizeof(cmd), "%s %s", getenv("SIMCUDA_SMI"), args);
    CHECK_TRUE((f = popen(cmd, "r")) != NULL);
    return f;
}

static inline void t_sleep_ms(unsigned ms)
{
    struct timespec ts = { ms / 1000, (long)(ms % 1000) * 1000000L };

    while (nanosleep(&ts, &ts))
        ;
}

/* The test kernel module: argv or SIMCUDA_TEST_MODULE. */
static inline const char *t_module_path(void)
{
    const char *p = getenv("SIMCUDA_TEST_MODULE");

    if (!p)
        T_FAIL("SIMCUDA_TEST_MODULE is not set");
    return p;
}

/* cuInit + primary context of device 0, current. */
static inline CUcontext t_init(void)
{
    CUcontext ctx;

    CHECK(cuInit(0));
    CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CHECK(cuCtxSetCurrent(ctx));
    return ctx;
}

/* A log the test kernels write (word 0: how many ids, then the ids), read
 * once all work is done, as a number: the ids as decimal digits. */
static inline unsigned t_log_read(CUdeviceptr log)
{
    uint32_t v[64];
    unsigned r = 0;

    CHECK(cuCtxSynchronize());
    CHECK(cuMemcpyDtoH(v, log, sizeof(v)));
    for (uint32_t i = 0; i < v[0] && i < 63; i++)
        r = r * 10 + v[1 + i];
    return r;
}

#endif
