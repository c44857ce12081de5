/*
 * driver.h - the real CUDA driver, reached only through a function table.
 *
 * The table (driver_table.h, generated from cuda.h + cudaTypedefs.h by
 * codegen/gen_driver_table.py) has one slot per exported ABI name. It is filled
 * once, by tcgpu_driver_load(): dlopen(the path tcgpu_driver_set_path gave,
 * default "libcuda.so.1") and glibc's own dlsym (never our dlsym override),
 * so calls made through it never re-enter the interposer's wrappers.
 * libtcgpu.so takes the path from TCGPU_REAL_LIBCUDA (core/settings.h); tests
 * point it at simcuda.
 *
 * Calling the real driver:
 *
 *     CUresult rc = TCGPU_REAL(cuMemAlloc)(&dptr, bytes);   // cuMemAlloc_v2
 *     TCGPU_REAL(cuMemcpyAsync_ptsz)(...);                   // an ABI name works too
 *
 * TCGPU_REAL(name) expands `name` through cuda.h's #defines first (so
 * cuMemAlloc means cuMemAlloc_v2, exactly as a direct call would), loads the
 * table if needed, and yields the typed pointer. It is never NULL: a function
 * the driver lacks is a stub returning CUDA_ERROR_NOT_FOUND, and when the
 * driver cannot be loaded at all every slot returns CUDA_ERROR_STUB_LIBRARY
 * (what the toolkit's stand-in libcuda returns for every call, the nearest a
 * real system has to "no driver"); the reason is logged once.
 *
 * Thread-safety: everything here is thread-safe; the table is written once,
 * before tcgpu_driver_state becomes non-zero (release), and read-only after.
 */
#ifndef TCGPU_DRIVER_H
#define TCGPU_DRIVER_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <cuda.h>

#include "driver_table.h"

extern union tcgpu_driver_table tcgpu_driver;

enum tcgpu_driver_state_value {
    TCGPU_DRIVER_UNLOADED = 0,
    TCGPU_DRIVER_LOADED = 1,       /* real driver found */
    TCGPU_DRIVER_FAILED = 2,       /* not found: every slot is a stub */
};
extern _Atomic int tcgpu_driver_state;

/* The driver library the load opens (NULL or "": "libcuda.so.1"). Kept,
 * not copied: it must live until the load. Takes effect only before the
 * first load. */
void tcgpu_driver_set_path(const char *path);

/* Load the table (once; later calls wait for the first). Returns 0, or
 * -ENOENT if the driver could not be loaded (the table then holds stubs). */
int tcgpu_driver_load(void);

static inline void tcgpu_driver_ensure(void)
{
    if (__builtin_expect(atomic_load_explicit(&tcgpu_driver_state, memory_order_acquire) ==
                         TCGPU_DRIVER_UNLOADED, 0))
        tcgpu_driver_load();
}

/* The real function, typed: by API name (cuda.h's #define applies) ... */
#define TCGPU_REAL(name) TCGPU_REAL_ABI(name)
/* ... or by exact ABI name, with no expansion. */
#define TCGPU_REAL_ABI(abi) (tcgpu_driver_ensure(), tcgpu_driver.fn_##abi)
/* Index in the table (enum tcgpu_fn) of an API name / ABI name. */
#define TCGPU_FN(name) TCGPU_FN_ABI(name)
#define TCGPU_FN_ABI(abi) TCGPU_FN_##abi

/* The real driver's name of rc ("CUDA_ERROR_OUT_OF_MEMORY"), for messages;
 * "unknown CUresult" when the driver does not know it or is not loaded.
 * A static string. */
const char *cu_error_name(CUresult rc);

/* Index of an exported ABI name ("cuMemAlloc_v2"), or -1. Binary search. */
int tcgpu_driver_index(const char *abi);

/* ABI name of an index; NULL if out of range. */
const char *tcgpu_driver_name(int fn);

/* Whether the loaded driver has the function (false before loading). */
bool tcgpu_driver_has(int fn);

/* Index whose real function is `real` (reverse map, after loading), or -1.
 * If the driver aliases several ABI names to one function, the one whose name
 * is `prefer` wins when given, else the lowest index. */
int tcgpu_driver_index_of_real(const void *real, const char *prefer);

/* cuGetProcAddress's rule as cuda.h/cudaTypedefs.h describe it (the same as
 * codegen/cuda_api.py resolve()): highest version <= `version`; flag 2
 * (CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM) picks a _ptds/_ptsz
 * flavour. Returns the index, or -1 with *why = 1 (symbol only exists in
 * newer versions) or 2 (unknown symbol). `why` may be NULL. */
int tcgpu_driver_resolve(const char *symbol, int version, uint64_t flags, int *why);

/* Whether code address `pc` lies in the loaded real driver's mapped segments. */
bool tcgpu_driver_owns_address(const void *pc);

/* The dlopen handle of the real driver (NULL before loading or if missing). */
void *tcgpu_driver_handle(void);

/* Result of a call to a function the driver lacks (used by the generated
 * stubs): CUDA_ERROR_STUB_LIBRARY when no driver, else CUDA_ERROR_NOT_FOUND;
 * logs the first time for each function. */
CUresult tcgpu_driver_missing(int fn);

/* glibc's dlsym, found once with dlvsym(RTLD_NEXT, "dlsym", "GLIBC_x"): never
 * the interposer's override, whatever the symbol search order. */
void *tcgpu_real_dlsym(void *handle, const char *name);
void tcgpu_real_dlsym_init(void);

/* For code our dlsym runs before a sanitizer runtime has initialised (ASan's
 * own start-up looks up the functions it intercepts with dlsym(RTLD_NEXT)). */
#define TCGPU_NO_SANITIZE __attribute__((no_sanitize("address", "undefined", "thread")))
extern void *(*tcgpu_libc_dlsym_ptr)(void *, const char *);   /* after init */

#endif /* TCGPU_DRIVER_H */
