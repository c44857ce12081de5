/*
 * simcuda_kernel.h - how kernels are written for the simulated GPU.
 *
 * On simcuda a CUDA module is a shared object of host functions: cuModuleLoad()
 * takes its path, cuModuleLoadData() its ELF bytes (it is loaded from a memfd).
 * cuModuleGetFunction(&f, mod, "name") finds the exported symbol "name", which
 * must have the type simcuda_kernel_fn below. cuLaunchKernel() runs it once per
 * launch on the stream's worker thread (not once per CUDA thread): the kernel
 * loops over the grid itself, so the result must not depend on how the work is
 * split, exactly as on a real GPU.
 *
 * Device pointers are not host addresses. A kernel turns each device pointer
 * argument into a host view with k->dev(k, ptr, bytes) before touching it; a
 * pointer that is not inside one mapped device allocation for `bytes` bytes
 * returns NULL and marks the launch as faulted: the context then reports
 * CUDA_ERROR_ILLEGAL_ADDRESS, sticky, as a real GPU does after a bad access.
 * The kernel must return promptly after a NULL. A view stays valid until the
 * kernel returns, even if the memory is freed or unmapped meanwhile (simcuda
 * unmaps it afterwards); dev() takes a lock only while it translates, so a
 * kernel may run, or wait, as long as it likes without holding up the
 * process's allocations.
 *
 * params[i] points at the i-th argument value, as given to cuLaunchKernel.
 * Kernel-side code may not call the CUDA API.
 *
 * Argument sizes: a real driver knows them from the kernel image and copies
 * the values at launch, so the caller may reuse its variables at once. Give
 * simcuda the same knowledge with SIMCUDA_KERNEL_PARAMS(name, sizeof(T0), ...)
 * next to the kernel; a kernel without it still works, but its launches wait
 * for the kernel to finish (simcuda warns once).
 */
#ifndef SIMCUDA_KERNEL_H
#define SIMCUDA_KERNEL_H

#include <stddef.h>
#include <stdint.h>

#define SIMCUDA_KERNEL_ABI 2          /* 2: charge_cpu */

typedef struct simcuda_kernel_ctx simcuda_kernel_ctx;

struct simcuda_kernel_ctx {
    unsigned int abi;              /* SIMCUDA_KERNEL_ABI */
    unsigned int grid[3];          /* gridDimX/Y/Z as launched */
    unsigned int block[3];         /* blockDimX/Y/Z as launched */
    unsigned int shared_bytes;     /* sharedMemBytes as launched */
    /* Host view of [ptr, ptr + bytes) in device memory, or NULL (see above). */
    void *(*dev)(const simcuda_kernel_ctx *k, uint64_t ptr, size_t bytes);
    void *priv;                    /* simcuda's own */
    /* Since ABI 2: adds cpu_ns to the device's CPU time (simcuda-smi's
     * device_cpu_ns). The launch's own thread is counted already; a kernel
     * that runs part of its work on threads of its own charges theirs. */
    void (*charge_cpu)(const simcuda_kernel_ctx *k, uint64_t cpu_ns);
};

typedef void (*simcuda_kernel_fn)(const simcuda_kernel_ctx *k, void **params);

/* Declare a kernel in a module: SIMCUDA_KERNEL(saxpy) { ... uses k, params ... } */
#define SIMCUDA_KERNEL(name) \
    __attribute__((visibility("default"))) \
    void name(const simcuda_kernel_ctx *k, void **params); \
    __attribute__((visibility("default"))) \
    void name(const simcuda_kernel_ctx *k, void **params)

/* Argument sizes of kernel name, in order: exported as simcuda_params__<name>
 * = { count, size0, size1, ... }. E.g. SIMCUDA_KERNEL_PARAMS(saxpy,
 * sizeof(float), sizeof(uint64_t), sizeof(uint64_t), sizeof(size_t)); */
#define SIMCUDA_KERNEL_PARAMS(name, ...) \
    extern const uint32_t simcuda_params__##name[]; \
    __attribute__((visibility("default"))) \
    const uint32_t simcuda_params__##name[] = { \
        (uint32_t)(sizeof((uint32_t[]){ __VA_ARGS__ }) / sizeof(uint32_t)), __VA_ARGS__ }

/* The i-th kernel argument, of type T. */
#define SIMCUDA_ARG(T, i) (*(T *)params[(i)])

#endif
