/*
 * test_memory.c - device memory is not host memory; copies, memsets, host
 * memory, pointer attributes, stream-ordered allocation, kernel faults.
 */
#include "harness.h"

#include <elf.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/wait.h>

static CUmodule mod;

/* A host dereference of a device pointer faults, as with a real GPU. */
static void test_deref_faults(CUdeviceptr d)
{
    pid_t pid = fork();
    int st;

    CHECK_TRUE(pid >= 0);
    if (pid == 0) {
        volatile uint32_t *p = (volatile uint32_t *)(uintptr_t)d;
        signal(SIGSEGV, SIG_DFL);
        (void)*p;
        _exit(0);
    }
    CHECK_EQ(waitpid(pid, &st, 0), pid);
    CHECK_TRUE(WIFSIGNALED(st));
    CHECK_EQ(WTERMSIG(st), SIGSEGV);
}

static void test_copies(void)
{
    enum { N = 1 << 20 };
    uint32_t *h = malloc(N * 4), *back = malloc(N * 4);
    CUdeviceptr a, b, base;
    size_t size, free0, free1, total;

    CHECK(cuMemGetInfo(&free0, &total));
    CHECK_EQ(total, 1ull << 30);
    CHECK(cuMemAlloc(&a, N * 4));
    CHECK(cuMemAlloc(&b, N * 4));
    CHECK_EQ(a % 256, 0);
    CHECK(cuMemGetInfo(&free1, &total));
    CHECK_EQ(free0 - free1, 2ull * N * 4);
    test_deref_faults(a);

    for (uint32_t i = 0; i < N; i++)
        h[i] = i * 2654435761u;
    CHECK(cuMemcpyHtoD(a, h, N * 4));
    CHECK(cuMemcpyDtoD(b, a, N * 4));
    CHECK(cuMemcpyDtoH(back, b, N * 4));
    CHECK_TRUE(!memcmp(h, back, N * 4));
    /* Unified cuMemcpy infers directions. */
    memset(back, 0, N * 4);
    CHECK(cuMemcpy((CUdeviceptr)(uintptr_t)back, a, N * 4));
    CHECK_TRUE(!memcmp(h, back, N * 4));

    /* Out of bounds and unmapped: invalid value, no fault. */
    CHECK_RES(cuMemcpyHtoD(a + 4, h, N * 4), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuMemcpyDtoH(back, a - 4096, 16), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuMemsetD8(a + N * 4 - 1, 0, 2), CUDA_ERROR_INVALID_VALUE);

    CHECK(cuMemGetAddressRange(&base, &size, a + 100));
    CHECK_EQ(base, a);
    CHECK_EQ(size, N * 4);
    CHECK_RES(cuMemGetAddressRange(&base, &size, (CUdeviceptr)(uintptr_t)h), CUDA_ERROR_NOT_FOUND);

    /* Memsets, 1D and 2D. */
    CHECK(cuMemsetD32(a, 0xdeadbeef, N));
    CHECK(cuMemsetD16(a, 0x1234, 2));
    CHECK(cuMemsetD8(a + 4, 0x7f, 1));
    CHECK(cuMemcpyDtoH(back, a, 16));
    CHECK_EQ(back[0], 0x12341234);
    CHECK_EQ(back[1], 0xdeadbe7f);
    CHECK_EQ(back[2], 0xdeadbeef);

    /* 2D: a 3x5 window of a pitched allocation. */
    CUdeviceptr p2;
    size_t pitch;
    CHECK(cuMemAllocPitch(&p2, &pitch, 100, 8, 4));
    CHECK_TRUE(pitch >= 100 && pitch % 256 == 0);
    CHECK(cuMemsetD2D8(p2, pitch, 0, 100, 8));
    CHECK(cuMemsetD2D32(p2 + pitch, pitch, 7, 3, 5));
    uint8_t host2d[8][100];
    CUDA_MEMCPY2D c = { 0 };
    c.srcMemoryType = CU_MEMORYTYPE_DEVICE;
    c.srcDevice = p2;
    c.srcPitch = pitch;
    c.dstMemoryType = CU_MEMORYTYPE_HOST;
    c.dstHost = host2d;
    c.dstPitch = 100;
    c.WidthInBytes = 100;
    c.Height = 8;
    CHECK(cuMemcpy2D(&c));
    CHECK_EQ(host2d[0][0], 0);
    CHECK_EQ(host2d[1][0], 7);
    CHECK_EQ(host2d[5][11], 0);
    CHECK_EQ(host2d[5][12], 0);
    CHECK_EQ(host2d[6][0], 0);
    CHECK_EQ(host2d[5][8], 7);
    c.Height = 9;       /* one row past the allocation */
    CHECK_RES(cuMemcpy2D(&c), CUDA_ERROR_INVALID_VALUE);

    CHECK(cuMemFree(p2));
    CHECK(cuMemFree(a));
    CHECK(cuMemFree(b));
    CHECK_RES(cuMemFree(a), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuMemGetInfo(&free1, &total));
    CHECK_EQ(free1, free0);
    free(h);
    free(back);
}

static void test_async_copies(void)
{
    CUstream s;
    uint32_t *pinned, v = 0;
    CUdeviceptr d, dp;

    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemAllocHost((void **)&pinned, 4096));
    CHECK(cuMemAlloc(&d, 4096));
    for (int i = 0; i < 1024; i++)
        pinned[i] = (uint32_t)i;
    CHECK(cuMemcpyHtoDAsync(d, pinned, 4096, s));
    CHECK(cuMemsetD32Async(d, 5, 1, s));
    CHECK(cuMemcpyDtoHAsync(pinned, d, 4096, s));
    CHECK(cuStreamSynchronize(s));
    CHECK_EQ(pinned[0], 5);
    CHECK_EQ(pinned[1023], 1023);

    /* Pinned memory: its device pointer is its host address (UVA). */
    CHECK(cuMemHostGetDevicePointer(&dp, pinned, 0));
    CHECK_EQ(dp, (uintptr_t)pinned);
    CHECK(cuMemcpyDtoD(d, dp, 4));
    CHECK(cuMemcpyDtoH(&v, d, 4));
    CHECK_EQ(v, 5);

    unsigned type = 0;
    CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, dp));
    CHECK_EQ(type, CU_MEMORYTYPE_HOST);
    CHECK(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, d + 8));
    CHECK_EQ(type, CU_MEMORYTYPE_DEVICE);
    CUdeviceptr start = 0;
    size_t rsize = 0;
    int ordinal = -1;
    CUcontext c = NULL, cur;
    CHECK(cuPointerGetAttribute(&start, CU_POINTER_ATTRIBUTE_RANGE_START_ADDR, d + 8));
    CHECK(cuPointerGetAttribute(&rsize, CU_POINTER_ATTRIBUTE_RANGE_SIZE, d + 8));
    CHECK(cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, d));
    CHECK(cuPointerGetAttribute(&c, CU_POINTER_ATTRIBUTE_CONTEXT, d));
    CHECK(cuCtxGetCurrent(&cur));
    CHECK_EQ(start, d);
    CHECK_EQ(rsize, 4096);
    CHECK_EQ(ordinal, 0);
    CHECK_TRUE(c == cur);
    void *hp;
    CHECK_RES(cuPointerGetAttribute(&hp, CU_POINTER_ATTRIBUTE_HOST_POINTER, d), CUDA_ERROR_INVALID_VALUE);
    int on_stack;
    CHECK_RES(cuPointerGetAttribute(&type, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, (uintptr_t)&on_stack),
              CUDA_ERROR_INVALID_VALUE);
    CUpointer_attribute attrs[] = { CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_BUFFER_ID };
    unsigned long long id = 77;
    type = 77;
    void *data[] = { &type, &id };
    CHECK(cuPointerGetAttributes(2, attrs, data, (uintptr_t)&on_stack));
    CHECK_EQ(type, 0);
    CHECK_EQ(id, 0);
    CHECK(cuPointerGetAttributes(2, attrs, data, d));
    CHECK_EQ(type, CU_MEMORYTYPE_DEVICE);
    CHECK_TRUE(id != 0);

    /* Registered host memory. */
    static uint32_t reg[2048] __attribute__((aligned(4096)));
    CHECK(cuMemHostRegister(reg, sizeof(reg), CU_MEMHOSTREGISTER_DEVICEMAP));
    CHECK_RES(cuMemHostRegister(reg, sizeof(reg), 0), CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED);
    CHECK(cuMemcpyDtoD((uintptr_t)reg, d, 8));
    CHECK_EQ(reg[0], 5);
    CHECK(cuMemHostUnregister(reg));
    CHECK_RES(cuMemHostUnregister(reg), CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED);

    CHECK(cuMemFreeHost(pinned));
    CHECK(cuMemFree(d));
    CHECK(cuStreamDestroy(s));
}

static void test_pool(void)
{
    CUmemoryPool pool;
    CUstream s;
    CUdeviceptr a, b;
    cuuint64_t reserved = 0, used = 0, thr = ~0ull;
    size_t f0, f1, f2, total;

    CHECK(cuStreamCreate(&s, 0));
    CHECK(cuDeviceGetDefaultMemPool(&pool, 0));
    CHECK(cuMemGetInfo(&f0, &total));
    CHECK(cuMemAllocAsync(&a, 8 << 20, s));
    CHECK(cuMemsetD8Async(a, 1, 8 << 20, s));
    CHECK(cuMemFreeAsync(a, s));
    CHECK_RES(cuMemFreeAsync(a, s), CUDA_ERROR_INVALID_VALUE);   /* double free */
    CHECK(cuStreamSynchronize(s));
    /* Threshold 0: released at the synchronisation. */
    CHECK(cuMemGetInfo(&f1, &total));
    CHECK_EQ(f1, f0);

    thr = 64 << 20;
    CHECK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &thr));
    CHECK(cuMemAllocAsync(&a, 8 << 20, s));
    CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
    CHECK_EQ(used, 8 << 20);
    CHECK(cuMemFreeAsync(a, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemGetInfo(&f1, &total));
    CHECK_EQ(f0 - f1, 8 << 20);                 /* kept in the pool */
    CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_RESERVED_MEM_CURRENT, &reserved));
    CHECK_EQ(reserved, 8 << 20);
    CHECK(cuMemAllocAsync(&b, 8 << 20, s));     /* reused */
    CHECK_EQ(b, a);
    CHECK(cuMemGetInfo(&f2, &total));
    CHECK_EQ(f2, f1);
    unsigned long long mp = 0;
    CHECK(cuPointerGetAttribute(&mp, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, b));
    CHECK_EQ(mp, (uintptr_t)pool);
    /* Stream-ordered allocations belong to their pool, not to a context. */
    CUcontext owner = (CUcontext)1;
    CHECK(cuPointerGetAttribute(&owner, CU_POINTER_ATTRIBUTE_CONTEXT, b));
    CHECK_TRUE(owner == NULL);
    CHECK(cuMemFreeAsync(b, s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemPoolTrimTo(pool, 0));
    CHECK(cuMemGetInfo(&f1, &total));
    CHECK_EQ(f1, f0);
    CHECK(cuStreamDestroy(s));
}

/*
 * A pool block freed and taken again for a larger size (up to what its pages
 * hold) keeps its address, so its address range must cover the larger size:
 * before, three blocks of 5000 bytes and then one of 8000 (into the first
 * block's 8 KiB) overlapped the second block and failed as out of memory with
 * the device all but empty. USED_MEM_CURRENT counts the bytes asked for, as
 * the driver's does, not the pages behind them.
 */
static void test_pool_reuse_larger(void)
{
    CUmemoryPool pool;
    CUstream s;
    CUdeviceptr a[3], b;
    cuuint64_t thr = ~0ull, used = 0;
    uint8_t out[8000], in[8000];

    CHECK(cuStreamCreate(&s, 0));
    CHECK(cuDeviceGetDefaultMemPool(&pool, 0));
    CHECK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &thr));
    for (int i = 0; i < 3; i++)
        CHECK(cuMemAllocFromPoolAsync(&a[i], 5000, pool, s));
    CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
    CHECK_EQ(used, 3 * 5000);
    CHECK(cuMemFreeAsync(a[0], s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemAllocFromPoolAsync(&b, 8000, pool, s));
    CHECK_EQ(b, a[0]);                          /* the freed block, reused */
    CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
    CHECK_EQ(used, 2 * 5000 + 8000);
    /* All of it is b's: a copy of 8000 bytes lands there and nowhere else. */
    memset(in, 0x5a, sizeof(in));
    CHECK(cuMemsetD8Async(a[1], 0x11, 5000, s));
    CHECK(cuMemcpyHtoDAsync(b, in, sizeof(in), s));
    CHECK(cuMemcpyDtoHAsync(out, b, sizeof(out), s));
    CHECK(cuStreamSynchronize(s));
    CHECK_TRUE(memcmp(in, out, sizeof(out)) == 0);
    CHECK(cuMemcpyDtoH(out, a[1], 5000));
    for (int i = 0; i < 5000; i++)
        CHECK_EQ(out[i], 0x11);
    CHECK(cuMemFreeAsync(b, s));
    CHECK(cuMemFreeAsync(a[1], s));
    CHECK(cuMemFreeAsync(a[2], s));
    CHECK(cuStreamSynchronize(s));
    CHECK(cuMemPoolGetAttribute(pool, CU_MEMPOOL_ATTR_USED_MEM_CURRENT, &used));
    CHECK_EQ(used, 0);
    thr = 0;
    CHECK(cuMemPoolSetAttribute(pool, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, &thr));
    CHECK(cuMemPoolTrimTo(pool, 0));
    CHECK(cuStreamDestroy(s));
}

/* A kernel given a bad pointer faults; the error is sticky, as on a GPU. */
static void test_kernel_fault(void)
{
    CUcontext ctx, prev;
    CUmodule m;
    CUfunction touch, add;
    CUdeviceptr d, bad = 0x1000;
    uint32_t v = 0;
    void *args[] = { &d };
    void *badargs[] = { &bad };

    CHECK(cuCtxCreate(&ctx, NULL, 0, 0));
    CHECK(cuModuleLoad(&m, t_module_path()));
    CHECK(cuModuleGetFunction(&touch, m, "touch"));
    CHECK_RES(cuModuleGetFunction(&add, m, "no_such_kernel"), CUDA_ERROR_NOT_FOUND);
    CHECK(cuModuleGetFunction(&add, m, "add_one_nometa"));
    CHECK(cuMemAlloc(&d, 4));
    CHECK(cuMemsetD32(d, 1, 1));
    CHECK(cuLaunchKernel(add, 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
    CHECK(cuLaunchKernel(touch, 1, 1, 1, 32, 1, 1, 0, NULL, args, NULL));
    CHECK(cuMemcpyDtoH(&v, d, 4));
    CHECK_EQ(v, 42);
    CHECK_RES(cuLaunchKernel(touch, 1, 1, 1, 2048, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuLaunchKernel(touch, 0, 1, 1, 1, 1, 1, 0, NULL, args, NULL), CUDA_ERROR_INVALID_VALUE);

    CHECK(cuLaunchKernel(touch, 1, 1, 1, 1, 1, 1, 0, NULL, badargs, NULL));   /* async: accepted */
    CHECK_RES(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
    CHECK_RES(cuMemcpyDtoH(&v, d, 4), CUDA_ERROR_ILLEGAL_ADDRESS);
    CHECK_RES(cuMemAlloc(&d, 4), CUDA_ERROR_ILLEGAL_ADDRESS);
    CHECK_RES(cuCtxSynchronize(), CUDA_ERROR_ILLEGAL_ADDRESS);
    CHECK(cuCtxDestroy(ctx));
    CHECK(cuCtxGetCurrent(&prev));
    CHECK_TRUE(prev != ctx);
}

static void test_module_data(void)
{
    FILE *f = fopen(t_module_path(), "rb");
    static unsigned char img[1 << 22];
    size_t n;
    CUmodule m;
    CUfunction fn;

    CHECK_TRUE(f != NULL);
    n = fread(img, 1, sizeof(img), f);
    fclose(f);
    CHECK_TRUE(n > 0 && n < sizeof(img));
    CHECK(cuModuleLoadData(&m, img));
    CHECK(cuModuleGetFunction(&fn, m, "fill_u32"));
    CHECK(cuModuleUnload(m));
    CHECK_RES(cuModuleGetFunction(&fn, m, "fill_u32"), CUDA_ERROR_INVALID_HANDLE);
    CHECK_RES(cuModuleLoadData(&m, "not an elf image"), CUDA_ERROR_INVALID_IMAGE);
}

/* What `call` says on stderr while it runs, into buf. */
#define STDERR_OF(buf, call)                                                 \
    do {                                                                     \
        FILE *t_ = tmpfile();                                                \
        int saved_ = dup(2);                                                 \
        size_t n_;                                                           \
        CHECK_TRUE(t_ && saved_ >= 0);                                       \
        fflush(stderr);                                                      \
        dup2(fileno(t_), 2);                                                 \
        call;                                                                \
        fflush(stderr);                                                      \
        dup2(saved_, 2);                                                     \
        close(saved_);                                                       \
        rewind(t_);                                                          \
        n_ = fread(buf, 1, sizeof(buf) - 1, t_);                             \
        buf[n_] = '\0';                                                      \
        fclose(t_);                                                          \
    } while (0)

/*
 * A CUDA cubin (device code, ELF machine EM_CUDA) cannot run here: the load
 * fails as an invalid image and says so, naming the call, where it used to
 * say only "cannot load simcuda-library" (the name of simcuda's own memfd).
 */
static void test_load_failure_says_why(void)
{
    Elf64_Ehdr cubin = { .e_type = ET_EXEC, .e_machine = 190 /* EM_CUDA */,
                         .e_version = EV_CURRENT, .e_ehsize = sizeof(Elf64_Ehdr) };
    char said[1024];
    CUlibrary lib;
    CUmodule m;
    CUresult r;

    memcpy(cubin.e_ident, ELFMAG, SELFMAG);
    cubin.e_ident[EI_CLASS] = ELFCLASS64;
    cubin.e_ident[EI_DATA] = ELFDATA2LSB;
    cubin.e_ident[EI_VERSION] = EV_CURRENT;
    STDERR_OF(said, r = cuLibraryLoadData(&lib, &cubin, NULL, NULL, 0, NULL, NULL, 0));
    CHECK_RES(r, CUDA_ERROR_INVALID_IMAGE);
    CHECK_TRUE(strstr(said, "cuLibraryLoadData") && strstr(said, "CUDA device code"));
    CHECK_TRUE(!strstr(said, "simcuda-library"));
    STDERR_OF(said, r = cuModuleLoadData(&m, &cubin));
    CHECK_RES(r, CUDA_ERROR_INVALID_IMAGE);
    CHECK_TRUE(strstr(said, "cuModuleLoadData") && strstr(said, "CUDA device code"));
    /* A host object that is not a module says what a module is. */
    cubin.e_machine = EM_X86_64;
    STDERR_OF(said, r = cuModuleLoadData(&m, &cubin));
    CHECK_RES(r, CUDA_ERROR_INVALID_IMAGE);
    CHECK_TRUE(strstr(said, "not a simcuda kernel module"));
}

/* Bytes of this process's mappings that transparent huge pages may back
 * (smaps' "THPeligible: 1"), or -1 when the kernel does not say. */
static long long thp_eligible_bytes(void)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    unsigned long lo, hi, size = 0;
    long long total = -1;
    char line[256];
    int v;

    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f)) {
        if (sscanf(line, "%lx-%lx ", &lo, &hi) == 2)
            size = hi - lo;
        else if (sscanf(line, "THPeligible: %d", &v) == 1)
            total = (total < 0 ? 0 : total) + (v ? (long long)size : 0);
    }
    fclose(f);
    return total;
}

/* With SIMCUDA_DEVICE_THP=0 (this program run again, "no-thp"), device
 * memory of 2 MiB and more is in small pages: huge pages may not back it. */
static int small_pages_only(void)
{
    const size_t len = 16u << 20;
    long long before;
    CUdeviceptr d;

    setenv("SIMCUDA_DEVICE_THP", "0", 1);
    t_init();
    before = thp_eligible_bytes();
    CHECK(cuMemAlloc(&d, len));
    CHECK(cuMemsetD8(d, 0x5a, len));
    if (before >= 0 && thp_eligible_bytes() - before >= (long long)len)
        T_FAIL("SIMCUDA_DEVICE_THP=0: %zu bytes of device memory that huge pages may back", len);
    CHECK(cuMemFree(d));
    return 0;
}

/* Device memory of 2 MiB and more is backed by memory huge pages may back
 * (a GPU's pages are 2 MiB: docs/simcuda.md) when SIMCUDA_DEVICE_THP=1 (as
 * main sets it; by default, unless the guest reports free pages to its
 * hypervisor), and gives it back when freed; with 0, small pages. */
static void test_huge_pages(void)
{
    const size_t len = 16u << 20;
    FILE *f = fopen("/sys/kernel/mm/transparent_hugepage/enabled", "r");
    char mode[128] = "";
    long long before = thp_eligible_bytes(), held;
    CUdeviceptr d;

    if (f) {
        if (!fgets(mode, sizeof(mode), f))
            mode[0] = '\0';
        fclose(f);
    }
    if (before < 0 || !mode[0] || strstr(mode, "[never]")) {
        printf("huge pages: none on this kernel (%s), not checked\n", mode[0] ? mode : "?");
        return;
    }
    CHECK(cuMemAlloc(&d, len));
    CHECK(cuMemsetD8(d, 0x5a, len));
    held = thp_eligible_bytes();
    if (held - before < (long long)len)
        T_FAIL("%zu bytes of device memory, %lld more bytes huge pages may back", len, held - before);
    CHECK(cuMemFree(d));
    CHECK_TRUE(thp_eligible_bytes() <= held - (long long)len);
    {
        char self[4096], cmd[4200];
        ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
        CHECK_TRUE(n > 0);
        self[n] = '\0';
        snprintf(cmd, sizeof(cmd), "'%s' no-thp", self);
        CHECK_EQ(system(cmd), 0);
    }
}

int main(int argc, char **argv)
{
    CUdevice dev;
    char name[64];
    int v;

    sim_test_setup("memory");
    if (argc == 2 && !strcmp(argv[1], "no-thp"))
        return small_pages_only();
    setenv("SIMCUDA_DEVICE_THP", "1", 1);     /* whatever this guest is (test_huge_pages) */
    CHECK_RES(cuMemAlloc(&(CUdeviceptr){ 0 }, 4), CUDA_ERROR_NOT_INITIALIZED);
    t_init();
    CHECK(cuDeviceGet(&dev, 0));
    CHECK_RES(cuDeviceGet(&dev, 1), CUDA_ERROR_INVALID_DEVICE);
    CHECK(cuDeviceGetName(name, sizeof(name), dev));
    CHECK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, dev));
    CHECK_EQ(v, 9);
    CHECK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, dev));
    CHECK_EQ(v, 1);
    CHECK(cuDriverGetVersion(&v));
    CHECK_EQ(v, 13000);
    CHECK(cuModuleLoad(&mod, t_module_path()));
    test_copies();
    test_async_copies();
    test_pool();
    test_pool_reuse_larger();
    test_module_data();
    test_load_failure_says_why();
    test_kernel_fault();
    test_huge_pages();
    printf("memory: ok\n");
    return 0;
}
