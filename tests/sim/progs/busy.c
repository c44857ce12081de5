/*
 * busy - device work that never ends while no thread is inside a driver
 * call, the way real programs make it; an operation must wait for it with a
 * bound and leave the program as it was.
 *
 *   busy MODULE.so kernel|ptsz|hostfn HOLD_MS
 *
 *   kernel   a kernel on a stream of its own spins until the host sets a
 *            flag; the program polls the stream with cuStreamQuery and sets
 *            the flag after HOLD_MS
 *   ptsz     the same on the thread's per-thread default stream (only that
 *            thread can query it)
 *   hostfn   a host function on a stream waits for a thread of the program,
 *            which lets it go only after a driver call of its own, HOLD_MS
 *            from the start
 * It prints "busy" once the work is running, then, after the work ended, a
 * few steps of ordinary device work and "checksum: HEX".
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cuda.h>

#include "check.h"

/* The per-thread-stream flavours, as a program built with
 * --default-stream per-thread calls them. */
CUresult cuLaunchKernel_ptsz(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx,
                             unsigned by, unsigned bz, unsigned shmem, CUstream s, void **params,
                             void **extra);
CUresult cuStreamQuery_ptsz(CUstream s);

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t cv = PTHREAD_COND_INITIALIZER;
static int released;

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

/* Runs on the stream's worker: waits for the program's main thread.
 * Exported, so that messages can name it. */
void wait_for_app(void *arg);
void wait_for_app(void *arg)
{
    (void)arg;
    pthread_mutex_lock(&lock);
    while (!released)
        pthread_cond_wait(&cv, &lock);
    pthread_mutex_unlock(&lock);
}

static void poll_until(CUstream s, int per_thread, volatile uint32_t *flag, unsigned hold_ms)
{
    uint64_t t0 = now_ms();
    CUresult rc;

    for (;;) {
        rc = per_thread ? cuStreamQuery_ptsz(s) : cuStreamQuery(s);
        if (rc == CUDA_SUCCESS)
            return;
        if (rc != CUDA_ERROR_NOT_READY)
            cu(rc, "cuStreamQuery");
        if (now_ms() - t0 >= hold_ms)
            __atomic_store_n(flag, 1, __ATOMIC_RELEASE);   /* the kernel reads it on another thread */
        usleep(1000);
    }
}

int main(int argc, char **argv)
{
    unsigned hold_ms = argc > 3 ? (unsigned)strtoul(argv[3], NULL, 10) : 3000;
    volatile uint32_t *flag;
    CUdeviceptr buf;
    CUcontext ctx;
    CUmodule mod;
    CUfunction fn;
    CUstream s;
    uint64_t sum = 0xcbf29ce484222325ull, t0;
    uint32_t host[1024];

    if (argc < 3) {
        fprintf(stderr, "usage: busy MODULE.so kernel|ptsz|hostfn HOLD_MS\n");
        return 2;
    }
    cu(cuInit(0), "cuInit");
    cu(cuDevicePrimaryCtxRetain(&ctx, 0), "cuDevicePrimaryCtxRetain");
    cu(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    cu(cuModuleLoad(&mod, argv[1]), "cuModuleLoad");
    cu(cuModuleGetFunction(&fn, mod, "wait_flag"), "cuModuleGetFunction");
    cu(cuMemAlloc(&buf, 4 << 20), "cuMemAlloc");
    cu(cuMemsetD32(buf, 7, 1 << 20), "cuMemsetD32");
    cu(cuMemHostAlloc((void **)&flag, 4096, CU_MEMHOSTALLOC_DEVICEMAP), "cuMemHostAlloc");
    *flag = 0;
    cu(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    CUdeviceptr f = (CUdeviceptr)(uintptr_t)flag;
    void *args[] = { &f };
    if (!strcmp(argv[2], "kernel")) {
        cu(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, s, args, NULL), "cuLaunchKernel");
        printf("busy\n");
        fflush(stdout);
        poll_until(s, 0, flag, hold_ms);
    } else if (!strcmp(argv[2], "ptsz")) {
        cu(cuLaunchKernel_ptsz(fn, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL), "cuLaunchKernel_ptsz");
        printf("busy\n");
        fflush(stdout);
        poll_until(NULL, 1, flag, hold_ms);
    } else if (!strcmp(argv[2], "hostfn")) {
        t0 = now_ms();
        cu(cuLaunchHostFunc(s, wait_for_app, NULL), "cuLaunchHostFunc");
        printf("busy\n");
        fflush(stdout);
        while (now_ms() - t0 < hold_ms)
            usleep(1000);
        size_t fr, total;
        cu(cuMemGetInfo(&fr, &total), "cuMemGetInfo");   /* parks while the gate is closed */
        pthread_mutex_lock(&lock);
        released = 1;
        pthread_cond_broadcast(&cv);
        pthread_mutex_unlock(&lock);
        cu(cuStreamSynchronize(s), "cuStreamSynchronize");
    } else {
        fprintf(stderr, "busy: unknown mode %s\n", argv[2]);
        return 2;
    }
    printf("done waiting\n");
    fflush(stdout);
    /* Ordinary work after it: a suspend now succeeds and loses nothing. */
    for (unsigned step = 1; step <= 40; step++) {
        cu(cuMemsetD32(buf + (step % 16) * 4096, step, 1024), "cuMemsetD32");
        cu(cuMemcpyDtoH(host, buf + ((step * 7) % 16) * 4096, sizeof(host)), "cuMemcpyDtoH");
        for (size_t i = 0; i < 1024; i++)
            sum = (sum ^ host[i]) * 0x100000001b3ull;
        usleep(20000);
    }
    printf("checksum: %016llx\n", (unsigned long long)sum);
    return T_EXIT_STATUS();
}
