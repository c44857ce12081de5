/* The real-driver function table: loading, lookups, reverse map. See driver.h. */
#include "driver.h"

#include <dlfcn.h>
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"

#ifndef TCGPU_GLIBC_DL_VERSION
#define TCGPU_GLIBC_DL_VERSION "GLIBC_2.34"
#endif

/* glibc's own dlsym, found with dlvsym (a versioned lookup never matches the
 * interposer's unversioned dlsym; the interposer does not override dlvsym). */
void *(*tcgpu_libc_dlsym_ptr)(void *, const char *);

TCGPU_NO_SANITIZE static void find_libc_dlsym(void)
{
    static const char *const versions[] = { TCGPU_GLIBC_DL_VERSION, "GLIBC_2.34", "GLIBC_2.2.5",
                                            "GLIBC_2.17" };
    void *p = NULL;
    for (size_t i = 0; !p && i < sizeof(versions) / sizeof(versions[0]); i++) {
        p = dlvsym(RTLD_NEXT, "dlsym", versions[i]);
        if (!p)
            p = dlvsym(RTLD_DEFAULT, "dlsym", versions[i]);
    }
    if (!p) {
        static const char msg[] = "tcgpu: cannot find glibc's dlsym (dlvsym failed)\n";
        if (write(2, msg, sizeof(msg) - 1) < 0) {
            /* nothing left to report it with */
        }
        abort();
    }
    __atomic_store_n(&tcgpu_libc_dlsym_ptr, (void *(*)(void *, const char *))p, __ATOMIC_RELEASE);
}

/*
 * No pthread_once here: this runs inside every dlsym of the process, a
 * sanitizer's own start-up included (TSan looks up the functions it
 * intercepts with dlsym before it is initialised, and pthread_once is one of
 * them). Threads that race here find the same pointer and store it alike.
 */
TCGPU_NO_SANITIZE void tcgpu_real_dlsym_init(void)
{
    if (!__atomic_load_n(&tcgpu_libc_dlsym_ptr, __ATOMIC_ACQUIRE))
        find_libc_dlsym();
}

void *tcgpu_real_dlsym(void *handle, const char *name)
{
    tcgpu_real_dlsym_init();
    return __atomic_load_n(&tcgpu_libc_dlsym_ptr, __ATOMIC_ACQUIRE)(handle, name);
}

union tcgpu_driver_table tcgpu_driver;
_Atomic int tcgpu_driver_state;

static pthread_once_t load_once = PTHREAD_ONCE_INIT;
static void *handle;
static const char *_Atomic driver_path;   /* tcgpu_driver_set_path */

struct rev {
    uintptr_t addr;
    int fn;
};
static struct rev rev[TCGPU_FN_COUNT];   /* real address -> index, sorted */
static unsigned nrev;

#define MAX_RANGES 16
struct range {
    uintptr_t lo, hi;
};
static struct range ranges[MAX_RANGES];  /* the driver's executable segments */
static unsigned nranges;

static _Atomic unsigned char missing_logged[TCGPU_FN_COUNT];

static int rev_cmp(const void *a, const void *b)
{
    const struct rev *x = a, *y = b;
    if (x->addr != y->addr)
        return x->addr < y->addr ? -1 : 1;
    return x->fn - y->fn;
}

struct find_segments {
    uintptr_t base;
    const char *name;
};

static int collect_segments(struct dl_phdr_info *info, size_t size, void *arg)
{
    const struct find_segments *want = arg;
    (void)size;
    if (info->dlpi_addr != want->base || !info->dlpi_name || strcmp(info->dlpi_name, want->name) != 0)
        return 0;
    for (int i = 0; i < info->dlpi_phnum && nranges < MAX_RANGES; i++) {
        const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
        if (ph->p_type != PT_LOAD || !(ph->p_flags & PF_X))
            continue;
        ranges[nranges].lo = info->dlpi_addr + ph->p_vaddr;
        ranges[nranges].hi = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
        nranges++;
    }
    return 1;
}

static void record_segments(void *h)
{
    struct link_map *lm = NULL;
    if (dlinfo(h, RTLD_DI_LINKMAP, &lm) != 0 || !lm)
        return;
    struct find_segments want = { lm->l_addr, lm->l_name };
    dl_iterate_phdr(collect_segments, &want);
}

static void load(void)
{
    const char *path = atomic_load(&driver_path);
    if (!path || !*path)
        path = "libcuda.so.1";

    handle = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char *why = dlerror();
        log_err("cannot load the CUDA driver %s: %s; every CUDA call will return "
                "CUDA_ERROR_STUB_LIBRARY (set TCGPU_REAL_LIBCUDA to the driver's path)",
                path, why ? why : "unknown error");
        for (int i = 0; i < TCGPU_FN_COUNT; i++)
            tcgpu_driver.slot[i] = tcgpu_fn_missing_stubs[i];
        atomic_store_explicit(&tcgpu_driver_state, TCGPU_DRIVER_FAILED, memory_order_release);
        return;
    }
    unsigned missing = 0;
    for (int i = 0; i < TCGPU_FN_COUNT; i++) {
        void *p = tcgpu_real_dlsym(handle, tcgpu_fn_names[i]);
        if (p) {
            rev[nrev].addr = (uintptr_t)p;
            rev[nrev].fn = i;
            nrev++;
        } else {
            p = tcgpu_fn_missing_stubs[i];
            missing++;
        }
        tcgpu_driver.slot[i] = p;
    }
    qsort(rev, nrev, sizeof(rev[0]), rev_cmp);
    record_segments(handle);
    log_debug("driver %s: %u of %d entry points (%u missing), %u code segments",
              path, nrev, TCGPU_FN_COUNT, missing, nranges);
    atomic_store_explicit(&tcgpu_driver_state, TCGPU_DRIVER_LOADED, memory_order_release);
}

void tcgpu_driver_set_path(const char *path)
{
    atomic_store(&driver_path, path);
}

int tcgpu_driver_load(void)
{
    pthread_once(&load_once, load);
    return atomic_load_explicit(&tcgpu_driver_state, memory_order_acquire) == TCGPU_DRIVER_LOADED
        ? 0 : -ENOENT;
}

const char *cu_error_name(CUresult rc)
{
    const char *name = NULL;

    if (TCGPU_REAL(cuGetErrorName)(rc, &name) != CUDA_SUCCESS || !name)
        return "unknown CUresult";
    return name;
}

int tcgpu_driver_index(const char *abi)
{
    int lo = 0, hi = TCGPU_FN_COUNT - 1;
    if (!abi)
        return -1;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        int c = strcmp(abi, tcgpu_fn_names[mid]);
        if (c == 0)
            return mid;
        if (c < 0)
            hi = mid - 1;
        else
            lo = mid + 1;
    }
    return -1;
}

const char *tcgpu_driver_name(int fn)
{
    return fn >= 0 && fn < TCGPU_FN_COUNT ? tcgpu_fn_names[fn] : NULL;
}

static bool loaded(void)
{
    return atomic_load_explicit(&tcgpu_driver_state, memory_order_acquire) == TCGPU_DRIVER_LOADED;
}

bool tcgpu_driver_has(int fn)
{
    return loaded() && fn >= 0 && fn < TCGPU_FN_COUNT &&
           tcgpu_driver.slot[fn] != tcgpu_fn_missing_stubs[fn];
}

/* Whether ABI name `abi` is `api` or one of its versions ("cuFoo_v2_ptsz"). */
static bool abi_of_api(const char *abi, const char *api)
{
    size_t n = strlen(api);
    return strncmp(abi, api, n) == 0 && (abi[n] == '\0' || abi[n] == '_');
}

int tcgpu_driver_index_of_real(const void *real, const char *prefer)
{
    if (!loaded() || !real)
        return -1;
    uintptr_t a = (uintptr_t)real;
    unsigned lo = 0, hi = nrev;
    while (lo < hi) {                     /* first entry with addr >= a */
        unsigned mid = lo + (hi - lo) / 2;
        if (rev[mid].addr < a)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == nrev || rev[lo].addr != a)
        return -1;
    if (prefer)
        for (unsigned i = lo; i < nrev && rev[i].addr == a; i++)
            if (abi_of_api(tcgpu_fn_names[rev[i].fn], prefer))
                return rev[i].fn;
    return rev[lo].fn;
}

int tcgpu_driver_resolve(const char *symbol, int version, uint64_t flags, int *why)
{
    int dummy;
    if (!why)
        why = &dummy;
    *why = 2;
    if (!symbol)
        return -1;
    unsigned lo = 0, hi = tcgpu_fn_versions_count;
    while (lo < hi) {                     /* first entry with symbol >= symbol */
        unsigned mid = lo + (hi - lo) / 2;
        if (strcmp(tcgpu_fn_versions[mid].symbol, symbol) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    const struct tcgpu_fn_version *best = NULL, *flav = NULL;
    bool any = false;
    for (unsigned i = lo; i < tcgpu_fn_versions_count && strcmp(tcgpu_fn_versions[i].symbol, symbol) == 0; i++) {
        const struct tcgpu_fn_version *v = &tcgpu_fn_versions[i];
        any = true;
        if (version < 0 || v->version > (unsigned)version)
            continue;
        if (v->flavour == 0 && (!best || v->version > best->version))
            best = v;
    }
    if (!any)
        return -1;
    if (!best) {
        *why = 1;
        return -1;
    }
    *why = 0;
    if (flags & 2) {   /* CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM */
        for (unsigned i = lo; i < tcgpu_fn_versions_count && strcmp(tcgpu_fn_versions[i].symbol, symbol) == 0; i++) {
            const struct tcgpu_fn_version *v = &tcgpu_fn_versions[i];
            if (v->flavour != 0 && v->version <= (unsigned)version && v->version >= best->version &&
                (!flav || v->version > flav->version))
                flav = v;
        }
        if (flav)
            return flav->fn;
    }
    return best->fn;
}

bool tcgpu_driver_owns_address(const void *pc)
{
    if (!loaded())
        return false;
    uintptr_t a = (uintptr_t)pc;
    for (unsigned i = 0; i < nranges; i++)
        if (a >= ranges[i].lo && a < ranges[i].hi)
            return true;
    return false;
}

void *tcgpu_driver_handle(void)
{
    return loaded() ? handle : NULL;
}

CUresult tcgpu_driver_missing(int fn)
{
    if (atomic_load_explicit(&tcgpu_driver_state, memory_order_acquire) != TCGPU_DRIVER_LOADED)
        return CUDA_ERROR_STUB_LIBRARY;        /* logged once, at load */
    if (fn >= 0 && fn < TCGPU_FN_COUNT &&
        !atomic_exchange_explicit(&missing_logged[fn], 1, memory_order_relaxed))
        log_info("the CUDA driver has no %s: returning CUDA_ERROR_NOT_FOUND", tcgpu_fn_names[fn]);
    return CUDA_ERROR_NOT_FOUND;
}
