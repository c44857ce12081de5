/*
 * test_procaddr_sim.c - the CUDA runtime's way to the driver, through
 * libtcgpu.so (suite 'sim'; run with LD_PRELOAD=libtcgpu.so and
 * TCGPU_REAL_LIBCUDA pointing at simcuda; libcuda.so.1 = simcuda on the
 * library path).
 *
 * Every entry point comes from cuGetProcAddress_v2 (as libcudart does) or
 * from dlopen("libcuda.so.1") + dlsym, never from the link: each returned
 * pointer must be libtcgpu.so's function of the expected ABI name (dladdr),
 * and the calls must work (allocate, copy there and back, compare).
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cuda.h>

static int failures;

#define EXPECT(cond, ...)                                                   \
    do {                                                                    \
        if (!(cond)) {                                                      \
            fprintf(stderr, "FAIL %s:%d: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stderr, __VA_ARGS__);                                   \
            fputc('\n', stderr);                                            \
            failures++;                                                     \
        }                                                                   \
    } while (0)

#define CU(call)                                                                    \
    do {                                                                            \
        CUresult rc_ = (call);                                                      \
        if (rc_ != CUDA_SUCCESS) {                                                  \
            fprintf(stderr, "FAIL %s:%d: %s = %d\n", __FILE__, __LINE__, #call, rc_); \
            exit(1);                                                                \
        }                                                                           \
    } while (0)

typedef CUresult (*gpa_fn)(const char *, void **, int, cuuint64_t, CUdriverProcAddressQueryResult *);

/* `p` must be libtcgpu.so's exported function `abi`. */
static void expect_ours(const void *p, const char *abi, const char *how)
{
    Dl_info info;
    if (!p || !dladdr(p, &info)) {
        EXPECT(0, "%s: %s: no symbol at %p", how, abi, p);
        return;
    }
    EXPECT(info.dli_fname && strstr(info.dli_fname, "libtcgpu.so"), "%s: %s comes from %s",
           how, abi, info.dli_fname);
    EXPECT(info.dli_sname && strcmp(info.dli_sname, abi) == 0 && info.dli_saddr == p,
           "%s: %s resolves to %s", how, abi, info.dli_sname ? info.dli_sname : "?");
}

static gpa_fn gpa;

static void *get(const char *symbol, int version, cuuint64_t flags, const char *abi)
{
    void *p = NULL;
    CUdriverProcAddressQueryResult st = -1;
    CUresult rc = gpa(symbol, &p, version, flags, &st);
    EXPECT(rc == CUDA_SUCCESS && st == CU_GET_PROC_ADDRESS_SUCCESS,
           "cuGetProcAddress_v2(%s, %d, %llu) = %d, status %d", symbol, version,
           (unsigned long long)flags, rc, (int)st);
    char how[96];
    snprintf(how, sizeof(how), "cuGetProcAddress_v2(%s, %d, %llu)", symbol, version,
             (unsigned long long)flags);
    expect_ours(p, abi, how);
    if (!p)
        exit(1);
    return p;
}

int main(void)
{
    void *h = dlopen("libcuda.so.1", RTLD_NOW);
    if (!h) {
        fprintf(stderr, "FAIL dlopen(libcuda.so.1): %s\n", dlerror());
        return 1;
    }
    gpa = (gpa_fn)dlsym(h, "cuGetProcAddress_v2");
    expect_ours((void *)gpa, "cuGetProcAddress_v2", "dlsym(libcuda, cuGetProcAddress_v2)");
    expect_ours(dlsym(RTLD_DEFAULT, "cuGetProcAddress"), "cuGetProcAddress", "dlsym(RTLD_DEFAULT)");
    expect_ours(dlsym(h, "cuMemFree_v2"), "cuMemFree_v2", "dlsym(libcuda, cuMemFree_v2)");
    EXPECT(dlsym(h, "cuNoSuchFunction") == NULL, "dlsym of an unknown cu name");
    EXPECT(dlsym(h, "cudaMalloc") == NULL, "dlsym(libcuda, cudaMalloc)");
    /* RTLD_NEXT for other names is glibc's answer for *our* caller: the next
     * malloc after this program (libc's, or a sanitizer's), never a miss.
     * dladdr names TSan's by its alias __interceptor_malloc. */
    void *next_malloc = dlsym(RTLD_NEXT, "malloc");
    Dl_info mi;
    EXPECT(next_malloc && dladdr(next_malloc, &mi) && mi.dli_sname &&
           (strcmp(mi.dli_sname, "malloc") == 0 || strcmp(mi.dli_sname, "__interceptor_malloc") == 0) &&
           !strstr(mi.dli_fname, "libtcgpu"),
           "dlsym(RTLD_NEXT, malloc) = %p from %s", next_malloc,
           next_malloc && dladdr(next_malloc, &mi) ? mi.dli_fname : "?");

    /* As libcudart asks: versions and the per-thread-stream flag. */
    get("cuGetProcAddress", 11030, 0, "cuGetProcAddress");
    gpa_fn gpa2 = (gpa_fn)get("cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2");
    CUresult (*init)(unsigned) = get("cuInit", 2000, 0, "cuInit");
    CUresult (*device_get)(CUdevice *, int) = get("cuDeviceGet", 2000, 0, "cuDeviceGet");
    CUresult (*retain)(CUcontext *, CUdevice) = get("cuDevicePrimaryCtxRetain", 7000, 0, "cuDevicePrimaryCtxRetain");
    CUresult (*set_current)(CUcontext) = get("cuCtxSetCurrent", 4000, 0, "cuCtxSetCurrent");
    CUresult (*mem_alloc)(CUdeviceptr *, size_t) = get("cuMemAlloc", 13000, 0, "cuMemAlloc_v2");
    CUresult (*mem_free)(CUdeviceptr) = get("cuMemFree", 13000, 2, "cuMemFree_v2");
    CUresult (*htod)(CUdeviceptr, const void *, size_t) = get("cuMemcpyHtoD", 13000, 0, "cuMemcpyHtoD_v2");
    CUresult (*htod_ptds)(CUdeviceptr, const void *, size_t) = get("cuMemcpyHtoD", 13000, 2, "cuMemcpyHtoD_v2_ptds");
    CUresult (*dtoh)(void *, CUdeviceptr, size_t) = get("cuMemcpyDtoH", 13000, 0, "cuMemcpyDtoH_v2");
    CUresult (*htod_async)(CUdeviceptr, const void *, size_t, CUstream) =
        get("cuMemcpyHtoDAsync", 13000, 2, "cuMemcpyHtoDAsync_v2_ptsz");
    CUresult (*stream_sync)(CUstream) = get("cuStreamSynchronize", 13000, 2, "cuStreamSynchronize_ptsz");
    CUresult (*stream_sync_legacy)(CUstream) = get("cuStreamSynchronize", 13000, 0, "cuStreamSynchronize");

    /* The profiler's entry points are declared in cudaProfiler.h, not
     * cuda.h: ours all the same, or they would bypass the gate. */
    CUresult (*prof_start)(void) = get("cuProfilerStart", 4000, 0, "cuProfilerStart");
    CUresult (*prof_stop)(void) = get("cuProfilerStop", 4000, 0, "cuProfilerStop");
    expect_ours(dlsym(h, "cuProfilerStop"), "cuProfilerStop", "dlsym(libcuda, cuProfilerStop)");

    /* Our cuGetProcAddress_v2 obtained through itself works the same. */
    void *again = NULL;
    CUdriverProcAddressQueryResult st;
    CU(gpa2("cuMemcpyDtoH", &again, 13000, 0, &st));
    expect_ours(again, "cuMemcpyDtoH_v2", "cuGetProcAddress_v2 via itself");
    /* Not found answers are the driver's. */
    void *none = (void *)1;
    CUresult rc = gpa("cuNoSuchFunction", &none, 13000, 0, &st);
    EXPECT(rc == CUDA_ERROR_NOT_FOUND && st == CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND && none == NULL,
           "unknown symbol: rc %d status %d pfn %p", rc, (int)st, none);
    rc = gpa("cuMemAlloc", &none, 2000, 0, &st);    /* the v1 ABI: simcuda may lack it */
    EXPECT((rc == CUDA_SUCCESS) == (none != NULL), "cuMemAlloc at 2000: rc %d pfn %p", rc, none);
    if (rc == CUDA_SUCCESS)
        expect_ours(none, "cuMemAlloc", "cuGetProcAddress_v2(cuMemAlloc, 2000)");

    /* And through dlsym on the driver's handle. */
    CUresult (*dl_dtoh)(void *, CUdeviceptr, size_t) = dlsym(h, "cuMemcpyDtoH_v2");
    expect_ours((void *)dl_dtoh, "cuMemcpyDtoH_v2", "dlsym(libcuda, cuMemcpyDtoH_v2)");
    CUresult (*dl_ctx_sync)(void) = dlsym(h, "cuCtxSynchronize");
    expect_ours((void *)dl_ctx_sync, "cuCtxSynchronize", "dlsym(libcuda, cuCtxSynchronize)");

    /* The calls work. */
    CUdevice dev;
    CUcontext ctx;
    CU(init(0));
    CU(device_get(&dev, 0));
    CU(retain(&ctx, dev));
    CU(set_current(ctx));
    CU(prof_start());
    CU(prof_stop());
    size_t n = 1 << 20;
    unsigned char *src = malloc(n), *dst = malloc(n), *dst2 = malloc(n);
    for (size_t i = 0; i < n; i++)
        src[i] = (unsigned char)(i * 7 + 3);
    CUdeviceptr d;
    CU(mem_alloc(&d, n));
    CU(htod(d, src, n / 2));
    CU(htod_ptds(d + n / 2, src + n / 2, n / 4));
    CU(htod_async(d + 3 * n / 4, src + 3 * n / 4, n / 4, NULL));
    CU(stream_sync(NULL));
    CU(stream_sync_legacy(NULL));
    CU(dtoh(dst, d, n));
    CU(dl_dtoh(dst2, d, n));
    CU(dl_ctx_sync());
    EXPECT(memcmp(src, dst, n) == 0, "data differs after the round trip");
    EXPECT(memcmp(src, dst2, n) == 0, "data differs (dlsym'd cuMemcpyDtoH_v2)");
    CU(mem_free(d));
    free(src);
    free(dst);
    free(dst2);

    if (failures)
        return 1;
    printf("ok: every entry point was libtcgpu.so's, data round trip correct\n");
    return 0;
}
