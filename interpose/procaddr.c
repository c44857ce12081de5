/*
 * procaddr.c - cuGetProcAddress and cuGetProcAddress_v2: the CUDA runtime's
 * (and so PyTorch's) way to the driver. The real driver answers; we hand back
 * our wrapper of the function it found, so every call the runtime makes goes
 * through the gate. Return codes, symbolStatus and NULL results are exactly
 * the real driver's.
 */
#ifndef __CUDA_API_VERSION_INTERNAL
#define __CUDA_API_VERSION_INTERNAL 1    /* both exported names, unrenamed */
#endif
#include "driver/driver.h"
#include "driver/gate.h"
#include "common/log.h"
#include "wrappers.h"

#define TCGPU_WRAPPER __attribute__((visibility("default")))

int tcgpu_wrapper_index(const void *p)
{
    for (int i = 0; i < TCGPU_FN_COUNT; i++)
        if (tcgpu_wrappers[i] == p)
            return i;
    return -1;
}

void *tcgpu_procaddr_wrap(const char *symbol, void *real, int version, uint64_t flags)
{
    int fn = tcgpu_driver_resolve(symbol, version, flags, NULL);
    if (fn >= 0 && tcgpu_driver.slot[fn] == real)
        return tcgpu_wrappers[fn];
    int by_addr = tcgpu_driver_index_of_real(real, symbol);
    if (by_addr >= 0) {
        log_debug("cuGetProcAddress(%s, %d, %llu): the driver returned %s%s%s", symbol, version,
                  (unsigned long long)flags, tcgpu_fn_names[by_addr],
                  fn >= 0 ? ", the headers' rule says " : "", fn >= 0 ? tcgpu_fn_names[fn] : "");
        return tcgpu_wrappers[by_addr];
    }
    if (tcgpu_wrapper_index(real) >= 0)
        return real;
    log_debug("cuGetProcAddress(%s, %d, %llu): %p is no driver function we know: "
              "returned as is (calls through it bypass the gate)",
              symbol, version, (unsigned long long)flags, real);
    return real;
}

TCGPU_WRAPPER CUresult CUDAAPI cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion,
                                                cuuint64_t flags)
{
    TCGPU_GATE_ENTER("cuGetProcAddress");
    CUresult r = TCGPU_REAL_ABI(cuGetProcAddress)(symbol, pfn, cudaVersion, flags);
    if (r == CUDA_SUCCESS && pfn && *pfn)
        *pfn = tcgpu_procaddr_wrap(symbol, *pfn, cudaVersion, flags);
    TCGPU_GATE_LEAVE();
    return r;
}

TCGPU_WRAPPER CUresult CUDAAPI cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion,
                                                   cuuint64_t flags,
                                                   CUdriverProcAddressQueryResult *symbolStatus)
{
    TCGPU_GATE_ENTER("cuGetProcAddress_v2");
    CUresult r = TCGPU_REAL_ABI(cuGetProcAddress_v2)(symbol, pfn, cudaVersion, flags, symbolStatus);
    if (r == CUDA_SUCCESS && pfn && *pfn)
        *pfn = tcgpu_procaddr_wrap(symbol, *pfn, cudaVersion, flags);
    TCGPU_GATE_LEAVE();
    return r;
}
