/*
 * test_procaddr.c - cuGetProcAddress answers as the real driver would.
 *
 * argv[1]: expected answers (gen_expected.py, from cuda_api.resolve() and the
 * CUDA 13 runtime's recorded requests). A request resolving to a function
 * simcuda exports must return exactly that function (found with dlsym on
 * libcuda.so.1 here); one resolving to a function simcuda lacks answers
 * CUDA_ERROR_NOT_FOUND + SYMBOL_NOT_FOUND + NULL, like a symbol unknown to it.
 */
#include "harness.h"

#include <dlfcn.h>

static void *lib;

static void check_one(const char *sym, int ver, int flags, const char *status, const char *abi, int line,
                      int *implemented)
{
    CUdriverProcAddressQueryResult st = (CUdriverProcAddressQueryResult)-1;
    void *fn = (void *)1, *want = NULL;
    CUresult r = cuGetProcAddress(sym, &fn, ver, (cuuint64_t)flags, &st);

    if (!strcmp(status, "found"))
        want = dlsym(lib, abi);
    if (want) {
        (*implemented)++;
        if (r != CUDA_SUCCESS || st != CU_GET_PROC_ADDRESS_SUCCESS || fn != want)
            T_FAIL("line %d: %s ver=%d flags=%d: %s status %d fn %p, expected %s (%p)", line, sym, ver,
                   flags, t_err(r), (int)st, fn, abi, want);
        return;
    }
    if (r != CUDA_ERROR_NOT_FOUND || fn != NULL)
        T_FAIL("line %d: %s ver=%d flags=%d: %s fn %p, expected CUDA_ERROR_NOT_FOUND, NULL", line, sym, ver,
               flags, t_err(r), fn);
    if (!strcmp(status, "version") ? st != CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
                                   : st != CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND)
        T_FAIL("line %d: %s ver=%d flags=%d: status %d for '%s'", line, sym, ver, flags, (int)st, status);
}

static void *get(const char *sym, int ver, int flags, CUdriverProcAddressQueryResult want_st)
{
    CUdriverProcAddressQueryResult st;
    void *fn = NULL;
    CUresult r = cuGetProcAddress(sym, &fn, ver, (cuuint64_t)flags, &st);

    CHECK_EQ(st, want_st);
    CHECK_EQ(r, want_st == CU_GET_PROC_ADDRESS_SUCCESS ? CUDA_SUCCESS : CUDA_ERROR_NOT_FOUND);
    return fn;
}

static void explicit_cases(void)
{
    void *fn;

    CHECK_TRUE(get("cuMemAlloc", 3020, 0, CU_GET_PROC_ADDRESS_SUCCESS) == dlsym(lib, "cuMemAlloc_v2"));
    CHECK_TRUE(get("cuMemAlloc", 12000, 2, CU_GET_PROC_ADDRESS_SUCCESS) == dlsym(lib, "cuMemAlloc_v2"));
    CHECK_TRUE(get("cuMemcpyHtoD", 7000, 2, CU_GET_PROC_ADDRESS_SUCCESS) == dlsym(lib, "cuMemcpyHtoD_v2_ptds"));
    CHECK_TRUE(get("cuMemcpyHtoD", 7000, 1, CU_GET_PROC_ADDRESS_SUCCESS) == dlsym(lib, "cuMemcpyHtoD_v2"));
    CHECK_TRUE(get("cuMemcpyHtoD", 7000, 0, CU_GET_PROC_ADDRESS_SUCCESS) == dlsym(lib, "cuMemcpyHtoD_v2"));
    CHECK_TRUE(get("cuMemcpyHtoD", 4000, 2, CU_GET_PROC_ADDRESS_SUCCESS) == dlsym(lib, "cuMemcpyHtoD_v2"));
    CHECK_TRUE(get("cuLaunchKernel", 12000, 2, CU_GET_PROC_ADDRESS_SUCCESS) == dlsym(lib, "cuLaunchKernel_ptsz"));
    CHECK_TRUE(get("cuCtxCreate", 12050, 0, CU_GET_PROC_ADDRESS_SUCCESS) == dlsym(lib, "cuCtxCreate_v4"));
    CHECK_TRUE(get("cuCtxCreate", 3020, 0, CU_GET_PROC_ADDRESS_SUCCESS) == dlsym(lib, "cuCtxCreate_v2"));
    CHECK_TRUE(get("cuGetProcAddress", 12000, 0, CU_GET_PROC_ADDRESS_SUCCESS) == dlsym(lib, "cuGetProcAddress_v2"));
    CHECK_TRUE(get("cuMemAllocAsync", 11020, 2, CU_GET_PROC_ADDRESS_SUCCESS) == dlsym(lib, "cuMemAllocAsync_ptsz"));
    CHECK_TRUE(get("cuMemAlloc", 1000, 0, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT) == NULL);
    CHECK_TRUE(get("cuMemAllocAsync", 11000, 0, CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT) == NULL);
    CHECK_TRUE(get("cuNoSuchFunction", 12000, 0, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND) == NULL);
    CHECK_TRUE(get("cuArrayCreate", 3020, 0, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND) == NULL);  /* not simulated */
    CHECK_RES(cuGetProcAddress("cuMemAlloc", &fn, 3020, 4, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuGetProcAddress("cuMemAlloc", &fn, 99000, 0, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuGetProcAddress(NULL, &fn, 3020, 0, NULL), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuGetExportTable((const void **)&fn, &(CUuuid){ { 0 } }), CUDA_ERROR_NOT_SUPPORTED);
}

int main(int argc, char **argv)
{
    char sym[256], status[32], abi[256];
    int ver, flags, line = 0, implemented = 0, n;
    FILE *f;

    if (argc != 2)
        T_FAIL("usage: %s EXPECTED", argv[0]);
    CHECK_TRUE((lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_NOLOAD)) != NULL);
    CHECK_TRUE((f = fopen(argv[1], "r")) != NULL);
    /* Before cuInit, as the runtime does. */
    while ((n = fscanf(f, "%255s %d %d %31s %255s", sym, &ver, &flags, status, abi)) == 5) {
        line++;
        check_one(strcmp(sym, "-") ? sym : "", ver, flags, status, abi, line, &implemented);
    }
    CHECK_EQ(n, EOF);
    fclose(f);
    CHECK_TRUE(line > 1000);
    CHECK_TRUE(implemented > 300);
    explicit_cases();
    printf("procaddr: %d requests, %d resolved to simcuda functions: ok\n", line, implemented);
    return 0;
}
