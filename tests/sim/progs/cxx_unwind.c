/*
 * cxx_unwind - a C host that dlopens a C++ library (cxx_throw.cpp) the way
 * Python loads an extension, and computes on the device while the library
 * throws and catches: out of std::call_once, through C frames, and in a
 * cancelled thread. Under tcgpu an unwinder in the program's global scope
 * other than the one libstdc++ was built for aborts the first of them
 * (issue 35). A state maker (progs/cxx_unwind.desc): STEPS steps of device
 * work and ROUNDS of each exercise, "step K" every 10, then
 * "checksum: HEX" of the device memory and the exercises that behaved.
 *
 *   cxx_unwind LIBRARY [--steps N] [--sleep-ms T]
 */
#include <dlfcn.h>
#include <stdint.h>

#include "check.h"
#include "state.h"

#define DEVICE_BYTES (4u << 20)
#define SLICE (64u << 10)
#define ROUNDS 4

typedef int (*exercise_fn)(void);

static const char *const exercise_names[] = {
    "cxx_call_once_throws", "cxx_throw_through_c", "cxx_cancel_unwinds",
};
#define EXERCISES (sizeof(exercise_names) / sizeof(exercise_names[0]))

static void load_exercises(const char *path, exercise_fn *fns)
{
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);

    if (!lib) {
        fprintf(stderr, "cxx_unwind: %s\n", dlerror());
        exit(2);
    }
    for (size_t i = 0; i < EXERCISES; i++) {
        fns[i] = (exercise_fn)(uintptr_t)dlsym(lib, exercise_names[i]);
        if (!fns[i]) {
            fprintf(stderr, "cxx_unwind: %s: no %s\n", path, exercise_names[i]);
            exit(2);
        }
    }
}

/* One step's device work: a slice read back, changed by the step, written. */
static void device_step(CUdeviceptr d, unsigned char *slice, long step)
{
    CUdeviceptr at = d + (CUdeviceptr)((step * SLICE) % DEVICE_BYTES);

    cu(cuMemcpyDtoH(slice, at, SLICE), "cuMemcpyDtoH");
    for (size_t i = 0; i < SLICE; i++)
        slice[i] = (unsigned char)(slice[i] * 31u + (unsigned)step + i);
    cu(cuMemcpyHtoD(at, slice, SLICE), "cuMemcpyHtoD");
}

int main(int argc, char **argv)
{
    exercise_fn fns[EXERCISES];
    unsigned long behaved[EXERCISES] = { 0 };
    long steps = 100, sleep_ms = 0;
    CUcontext ctx;
    CUdeviceptr d;
    unsigned char *host;

    if (argc < 2 || state_parse_args(argc - 1, argv + 1, &steps, &sleep_ms)) {
        fprintf(stderr, "usage: cxx_unwind LIBRARY [--steps N] [--sleep-ms T]\n");
        return 2;
    }
    cu(cuInit(0), "cuInit");
    cu(cuDevicePrimaryCtxRetain(&ctx, 0), "cuDevicePrimaryCtxRetain");
    cu(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    cu(cuMemAlloc(&d, DEVICE_BYTES), "cuMemAlloc");
    cu(cuMemsetD8(d, 7, DEVICE_BYTES), "cuMemsetD8");
    /* loaded after the driver, as a framework is: libtcgpu.so and its
     * dependencies are in the global scope the library binds against */
    load_exercises(argv[1], fns);
    host = malloc(DEVICE_BYTES);
    if (!host)
        return 1;
    for (long s = 0; s < steps; s++) {
        for (size_t e = 0; e < EXERCISES; e++)
            for (int r = 0; r < ROUNDS; r++)
                behaved[e] += (unsigned long)fns[e]();
        device_step(d, host, s);
        state_sleep_ms(sleep_ms);
        if ((s + 1) % 10 == 0) {
            printf("step %ld\n", s + 1);
            fflush(stdout);
        }
    }
    for (size_t e = 0; e < EXERCISES; e++)
        CHECK(behaved[e] == (unsigned long)steps * ROUNDS);
    cu(cuMemcpyDtoH(host, d, DEVICE_BYTES), "cuMemcpyDtoH");
    unsigned long long h = fnv1a(FNV_OFFSET, host, DEVICE_BYTES, 1);
    printf("exceptions caught: %lu, cancellations unwound: %lu\n", behaved[0] + behaved[1],
           behaved[2]);
    printf("checksum: %016llx\n", fnv1a(h, (const unsigned char *)behaved, sizeof(behaved), 1));
    free(host);
    return failures ? 1 : 0;
}
