/*
 * procaddr.c - cuGetProcAddress, cuGetExportTable, error names.
 *
 * The (symbol, version, flavour) -> ABI name table is generated at build time
 * from the toolkit headers (gen_procaddr.py, through codegen/cuda_api.py).
 * ABI names are resolved to our functions through the simcuda_api section
 * that SIM_EXPORT fills, never through dlsym: an interposer overriding dlsym
 * is loaded in the same process, and it must be able to call us to learn
 * the real driver's entry points.
 */
#include "sim.h"
#include "procaddr_table.h"

#include <stdlib.h>
#include <string.h>

extern const struct sim_api_entry __start_simcuda_api[];
extern const struct sim_api_entry __stop_simcuda_api[];

static const struct sim_api_entry **api_sorted;
static size_t api_count;
static pthread_once_t api_once = PTHREAD_ONCE_INIT;

static int api_cmp(const void *a, const void *b)
{
    return strcmp((*(const struct sim_api_entry *const *)a)->name,
                  (*(const struct sim_api_entry *const *)b)->name);
}

static void api_index(void)
{
    size_t n = (size_t)(__stop_simcuda_api - __start_simcuda_api);

    api_sorted = malloc((n ? n : 1) * sizeof(*api_sorted));
    if (!api_sorted)
        return;     /* lookups then find nothing: CUDA_ERROR_NOT_FOUND */
    for (size_t i = 0; i < n; i++)
        api_sorted[i] = &__start_simcuda_api[i];
    qsort(api_sorted, n, sizeof(*api_sorted), api_cmp);
    api_count = n;
}

/* Our implementation of the exported function abi, or NULL. */
static void *api_lookup(const char *abi)
{
    struct sim_api_entry key = { abi, NULL };
    const struct sim_api_entry *k = &key, **hit;

    pthread_once(&api_once, api_index);
    hit = bsearch(&k, api_sorted, api_count, sizeof(*api_sorted), api_cmp);
    return hit ? (void *)(*hit)->fn : NULL;
}

/* Index of the first table entry for symbol, or -1. */
static long table_first(const char *symbol)
{
    long lo = 0, hi = (long)sim_proc_table_len;

    while (lo < hi) {
        long mid = (lo + hi) / 2;
        if (strcmp(sim_proc_table[mid].symbol, symbol) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < (long)sim_proc_table_len && !strcmp(sim_proc_table[lo].symbol, symbol) ? lo : -1;
}

/* The ABI name for (symbol, version, flags), as cuda_api.resolve() documents:
 * the newest legacy version <= version; with the per-thread flag, a per-thread
 * flavour at least as new as that one, if any. *status says why not found. */
static const char *resolve(const char *symbol, int version, cuuint64_t flags,
                           CUdriverProcAddressQueryResult *status)
{
    long i = table_first(symbol);
    const struct sim_proc_entry *best = NULL, *pt = NULL;

    *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
    if (i < 0)
        return NULL;
    for (long j = i; j < (long)sim_proc_table_len && !strcmp(sim_proc_table[j].symbol, symbol); j++) {
        const struct sim_proc_entry *e = &sim_proc_table[j];

        if (e->version > version)
            continue;
        if (e->flavour == SIM_FLAVOUR_LEGACY && (!best || e->version >= best->version))
            best = e;
    }
    if (!best) {
        *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
        return NULL;
    }
    if (flags & CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM)
        for (long j = i; j < (long)sim_proc_table_len && !strcmp(sim_proc_table[j].symbol, symbol); j++) {
            const struct sim_proc_entry *e = &sim_proc_table[j];

            if (e->flavour != SIM_FLAVOUR_LEGACY && e->version <= version &&
                e->version >= best->version && (!pt || e->version >= pt->version))
                pt = e;
        }
    *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return pt ? pt->abi : best->abi;
}

static CUresult get_proc(const char *symbol, void **pfn, int version, cuuint64_t flags,
                         CUdriverProcAddressQueryResult *status)
{
    CUdriverProcAddressQueryResult st;
    const char *abi;
    void *fn = NULL;

    if (!symbol || !pfn)
        return CUDA_ERROR_INVALID_VALUE;
    *pfn = NULL;
    if (flags & ~(cuuint64_t)(CU_GET_PROC_ADDRESS_LEGACY_STREAM | CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM))
        return CUDA_ERROR_INVALID_VALUE;
    if (version > SIM_DRIVER_VERSION)
        return CUDA_ERROR_INVALID_VALUE;
    abi = resolve(symbol, version, flags, &st);
    if (abi && !(fn = api_lookup(abi)))
        st = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;   /* a driver function simcuda lacks */
    if (status)
        *status = st;
    if (!fn)
        return CUDA_ERROR_NOT_FOUND;
    *pfn = fn;
    return CUDA_SUCCESS;
}

CUresult cuGetProcAddress_v2(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags,
                             CUdriverProcAddressQueryResult *symbolStatus)
{
    SIM_GATE();
    return get_proc(symbol, pfn, cudaVersion, flags, symbolStatus);
}
SIM_EXPORT(cuGetProcAddress_v2);

CUresult cuGetProcAddress(const char *symbol, void **pfn, int cudaVersion, cuuint64_t flags)
{
    SIM_GATE();
    return get_proc(symbol, pfn, cudaVersion, flags, NULL);
}
SIM_EXPORT(cuGetProcAddress);

/* The runtime's private tables cannot be provided by a stand-in driver. */
CUresult cuGetExportTable(const void **ppExportTable, const CUuuid *pExportTableId)
{
    if (ppExportTable)
        *ppExportTable = NULL;
    (void)pExportTableId;
    return CUDA_ERROR_NOT_SUPPORTED;
}
SIM_EXPORT(cuGetExportTable);
SIM_PARTIAL(cuGetExportTable,
    "no export table (the runtime's private interfaces): CUDA_ERROR_NOT_SUPPORTED, so the"
    " CUDA runtime cannot run on simcuda");

/* ---- error names ------------------------------------------------------------ */

static const char *error_name(int code)
{
    for (unsigned i = 0; i < sim_error_names_len; i++)
        if (sim_error_names[i].code == code)
            return sim_error_names[i].name;
    return NULL;
}

const char *sim_result_name(CUresult r)
{
    const char *n = error_name((int)r);

    return n ? n : "CUDA_ERROR_UNKNOWN_CODE";
}

CUresult cuGetErrorName(CUresult error, const char **pStr)
{
    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    *pStr = error_name((int)error);
    return *pStr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
SIM_EXPORT(cuGetErrorName);

/* Descriptions: the real driver's wording for the common ones, else the name. */
CUresult cuGetErrorString(CUresult error, const char **pStr)
{
    static const struct { CUresult code; const char *text; } texts[] = {
        { CUDA_SUCCESS, "no error" },
        { CUDA_ERROR_INVALID_VALUE, "invalid argument" },
        { CUDA_ERROR_OUT_OF_MEMORY, "out of memory" },
        { CUDA_ERROR_NOT_INITIALIZED, "initialization error" },
        { CUDA_ERROR_INVALID_CONTEXT, "invalid device context" },
        { CUDA_ERROR_INVALID_HANDLE, "invalid resource handle" },
        { CUDA_ERROR_NOT_FOUND, "named symbol not found" },
        { CUDA_ERROR_NOT_READY, "device not ready" },
        { CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered" },
        { CUDA_ERROR_NOT_SUPPORTED, "operation not supported" },
        { CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state" },
        { CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid" },
        { CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal" },
        { CUDA_ERROR_OPERATING_SYSTEM, "OS call failed or operation not supported on this OS" },
    };

    if (!pStr)
        return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < sizeof(texts) / sizeof(texts[0]); i++)
        if (texts[i].code == error) {
            *pStr = texts[i].text;
            return CUDA_SUCCESS;
        }
    *pStr = error_name((int)error);
    return *pStr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
SIM_EXPORT(cuGetErrorString);
