/*
 * test_lock.c - a running kernel holds only the memory it uses.
 *
 * A kernel that waits (as a collective kernel waits for a peer) blocks no
 * allocation, free or mapping of other memory of its process, as on a GPU;
 * memory it uses that is freed or unmapped without synchronising keeps its
 * host view until the kernel is done with it, and its bytes come back then.
 * cuMemFree itself synchronises, as the driver's does.
 */
#include "harness.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#define BOUND_MS 200.0          /* "promptly" */
#define WATCHDOG_MS 2000        /* a blocked call would otherwise wait for ever */
#define N 4096                  /* words the kernel writes */

static CUcontext ctx;
static CUmodule mod;
static CUfunction fn;
static volatile uint32_t *flag;  /* cuMemHostAlloc: [0] 1 started, 2 done; [1] go */
static atomic_bool watchdog_stop;

static double now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* Runs call and fails if it took longer than BOUND_MS. */
#define PROMPT(call)                                                         \
    do {                                                                     \
        double t0_ = now_ms(), dt_;                                          \
        CHECK(call);                                                         \
        dt_ = now_ms() - t0_;                                                \
        if (dt_ > BOUND_MS)                                                  \
            T_FAIL("%s took %.0f ms while a kernel ran (bound %.0f ms)", #call, dt_, BOUND_MS); \
    } while (0)

/* Lets the kernel go after WATCHDOG_MS, so that a call the kernel blocks
 * returns (late, failing its bound) instead of deadlocking the test. */
static void *watchdog(void *arg)
{
    (void)arg;
    for (int i = 0; i < WATCHDOG_MS && !atomic_load(&watchdog_stop); i++)
        t_sleep_ms(1);
    __atomic_store_n(&flag[1], 1, __ATOMIC_SEQ_CST);
    return NULL;
}

/* Launch wait_then_fill(p, N, flag, v) on s and wait until it runs. */
static void start_kernel(CUstream s, CUdeviceptr p, uint32_t v, pthread_t *wd)
{
    uint64_t n = N, f = (uint64_t)(uintptr_t)flag;
    void *args[] = { &p, &n, &f, &v };

    flag[0] = flag[1] = 0;
    atomic_store(&watchdog_stop, false);
    CHECK(cuLaunchKernel(fn, 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
    for (int i = 0; __atomic_load_n(&flag[0], __ATOMIC_SEQ_CST) != 1; i++) {
        CHECK_TRUE(i < 5000);
        t_sleep_ms(1);
    }
    CHECK_TRUE(pthread_create(wd, NULL, watchdog, NULL) == 0);
}

static void finish_kernel(CUstream s, pthread_t wd)
{
    __atomic_store_n(&flag[1], 1, __ATOMIC_SEQ_CST);
    atomic_store(&watchdog_stop, true);
    pthread_join(wd, NULL);
    CHECK(cuStreamSynchronize(s));
    CHECK_EQ(flag[0], 2);
}

static size_t free_now(void)
{
    size_t fr, total;

    CHECK(cuMemGetInfo(&fr, &total));
    return fr;
}

static void check_filled(CUdeviceptr p, uint32_t v)
{
    static uint32_t h[N];

    CHECK(cuMemcpyDtoH(h, p, sizeof(h)));
    for (int i = 0; i < N; i++)
        if (h[i] != v)
            T_FAIL("word %d = %u, expected %u", i, h[i], v);
}

/* While a kernel waits: allocation, host registration, VMM, pinned host
 * memory, stream-ordered allocation and work of other streams on other
 * memory all complete promptly. */
static void test_other_memory_while_kernel_runs(void)
{
    const size_t g = 2u << 20;
    CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                 .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 } };
    CUmemAccessDesc acc = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    CUstream s, s2;
    CUdeviceptr buf, other, va, pa;
    CUmemGenericAllocationHandle h;
    pthread_t wd;
    void *reg, *pinned;

    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemAlloc(&buf, N * sizeof(uint32_t)));
    reg = mmap(NULL, 1u << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    CHECK_TRUE(reg != MAP_FAILED);

    start_kernel(s, buf, 7, &wd);
    PROMPT(cuMemAlloc(&other, 1u << 20));
    PROMPT(cuMemsetD32Async(other, 5, (1u << 20) / 4, s2));
    PROMPT(cuStreamSynchronize(s2));
    PROMPT(cuMemHostRegister(reg, 1u << 20, 0));
    PROMPT(cuMemHostUnregister(reg));
    PROMPT(cuMemAllocHost(&pinned, 1u << 16));
    PROMPT(cuMemFreeHost(pinned));
    PROMPT(cuMemCreate(&h, g, &prop, 0));
    PROMPT(cuMemAddressReserve(&va, g, 0, 0, 0));
    PROMPT(cuMemMap(va, g, 0, h, 0));
    PROMPT(cuMemSetAccess(va, g, &acc, 1));
    PROMPT(cuMemsetD32Async(va, 9, g / 4, s2));
    PROMPT(cuStreamSynchronize(s2));
    PROMPT(cuMemUnmap(va, g));
    PROMPT(cuMemRelease(h));
    PROMPT(cuMemAddressFree(va, g));
    PROMPT(cuMemAllocAsync(&pa, 1u << 20, s2));
    PROMPT(cuMemFreeAsync(pa, s2));
    PROMPT(cuStreamSynchronize(s2));
    PROMPT(cuMemAllocAsync(&pa, 1u << 20, s2));
    PROMPT(cuStreamSynchronize(s2));
    PROMPT(cuMemFree(pa));          /* stream-ordered memory: no implicit synchronisation */
    CHECK_EQ(__atomic_load_n(&flag[0], __ATOMIC_SEQ_CST), 1);    /* still running */
    finish_kernel(s, wd);
    check_filled(buf, 7);
    CHECK_RES(cuMemFree(pa), CUDA_ERROR_INVALID_VALUE);     /* freed already */

    CHECK(cuMemFree(other));
    CHECK(cuMemFree(buf));
    munmap(reg, 1u << 20);
    CHECK(cuStreamDestroy(s));
    CHECK(cuStreamDestroy(s2));
}

struct freer {
    CUdeviceptr p;
    double ms;
    atomic_bool done;
};

static void *free_thread(void *arg)
{
    struct freer *f = arg;
    double t0 = now_ms();

    CHECK(cuCtxSetCurrent(ctx));
    CHECK(cuMemFree(f->p));
    f->ms = now_ms() - t0;
    atomic_store(&f->done, true);
    return NULL;
}

/* cuMemFree of the memory a running kernel writes synchronises, as the
 * driver's does: it returns after the kernel, which finished its writes,
 * and the bytes are back. */
static void test_free_in_use_waits(void)
{
    struct freer f = { 0 };
    size_t before = free_now();
    CUstream s;
    pthread_t wd, th;

    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemAlloc(&f.p, N * sizeof(uint32_t)));
    start_kernel(s, f.p, 3, &wd);
    CHECK_TRUE(pthread_create(&th, NULL, free_thread, &f) == 0);
    t_sleep_ms(300);
    CHECK_TRUE(!atomic_load(&f.done));              /* waits for the kernel */
    finish_kernel(s, wd);
    pthread_join(th, NULL);
    CHECK_TRUE(f.ms >= 250);
    CHECK(cuCtxSynchronize());
    CHECK_EQ(free_now(), before);
    CHECK(cuStreamDestroy(s));
}

/* Frees that do not synchronise (an unmap, a stream-ordered free and a
 * pool trim, freeing pinned host memory) of memory a running kernel
 * writes: they return at once; the kernel still writes where it had
 * translated (no fault, nothing pulled from under it); the bytes come back
 * when it is done. */
static void test_unsynchronised_frees_in_use(void)
{
    const size_t g = 2u << 20;
    CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                 .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 } };
    CUmemAccessDesc acc = { { CU_MEM_LOCATION_TYPE_DEVICE, 0 }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    CUmemGenericAllocationHandle h;
    CUmemoryPool pool;
    CUdeviceptr va, pa;
    CUstream s, s2;
    pthread_t wd;
    size_t before;
    void *host;

    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuStreamCreate(&s2, CU_STREAM_NON_BLOCKING));

    /* VMM: unmapped and released under the kernel */
    before = free_now();
    CHECK(cuMemCreate(&h, g, &prop, 0));
    CHECK(cuMemAddressReserve(&va, g, 0, 0, 0));
    CHECK(cuMemMap(va, g, 0, h, 0));
    CHECK(cuMemSetAccess(va, g, &acc, 1));
    start_kernel(s, va, 11, &wd);
    PROMPT(cuMemUnmap(va, g));
    PROMPT(cuMemRelease(h));
    PROMPT(cuMemAddressFree(va, g));
    CHECK_EQ(free_now(), before - g);                /* the kernel still holds them */
    finish_kernel(s, wd);
    CHECK_EQ(free_now(), before);

    /* stream-ordered memory freed on another stream, then trimmed away */
    CHECK(cuDeviceGetDefaultMemPool(&pool, 0));
    CHECK(cuMemPoolTrimTo(pool, 0));
    before = free_now();
    CHECK(cuMemAllocAsync(&pa, g, s));
    CHECK(cuStreamSynchronize(s));
    start_kernel(s, pa, 12, &wd);
    PROMPT(cuMemFreeAsync(pa, s2));
    PROMPT(cuStreamSynchronize(s2));
    PROMPT(cuMemPoolTrimTo(pool, 0));
    CHECK_TRUE(free_now() < before);
    finish_kernel(s, wd);
    CHECK_EQ(free_now(), before);

    /* pinned host memory freed under the kernel: nothing faults */
    CHECK(cuMemAllocHost(&host, N * sizeof(uint32_t)));
    start_kernel(s, (CUdeviceptr)(uintptr_t)host, 13, &wd);
    PROMPT(cuMemFreeHost(host));
    finish_kernel(s, wd);

    CHECK(cuCtxSynchronize());                       /* no sticky fault */
    CHECK(cuStreamDestroy(s));
    CHECK(cuStreamDestroy(s2));
}

/* A kernel that translates memory freed before it ran still faults, sticky. */
static void test_fault_still_sticky(void)
{
    CUdeviceptr p;
    void *args[] = { &p };
    CUfunction touch;
    CUcontext c2;

    CHECK(cuCtxCreate(&c2, NULL, 0, 0));
    CHECK(cuModuleLoad(&mod, t_module_path()));
    CHECK(cuModuleGetFunction(&touch, mod, "touch"));
    CHECK(cuMemAlloc(&p, 64));
    CHECK(cuMemFree(p));
    CHECK(cuLaunchKernel(touch, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
    CHECK_RES(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
    CHECK_RES(cuMemAlloc(&p, 64), CUDA_ERROR_ILLEGAL_ADDRESS);
    CHECK(cuCtxDestroy(c2));
    CHECK(cuCtxSetCurrent(ctx));
}

int main(void)
{
    void *f;

    sim_test_setup("lock");
    ctx = t_init();
    CHECK(cuModuleLoad(&mod, t_module_path()));
    CHECK(cuModuleGetFunction(&fn, mod, "wait_then_fill"));
    CHECK(cuMemHostAlloc(&f, 2 * sizeof(uint32_t), CU_MEMHOSTALLOC_DEVICEMAP));
    flag = f;
    test_other_memory_while_kernel_runs();
    test_free_in_use_waits();
    test_unsynchronised_frees_in_use();
    test_fault_still_sticky();
    CHECK(cuMemFreeHost(f));
    printf("ok\n");
    return 0;
}
