/*
 * peer_user - peer access under tcgpu. The memory tcgpu serves is VMM
 * memory, which context peer access does not reach on a GPU: tcgpu grants
 * the peer device access itself, and puts it back with the memory.
 *
 *   peer_user MODULE      run with libtcgpu.so preloaded, two simulated
 *                         devices (SIMCUDA_DEVICES=2): a kernel of device 0
 *                         updates device 1's memory after
 *                         cuCtxEnablePeerAccess, across a suspend and resume
 *                         the program makes itself, and not after
 *                         cuCtxDisablePeerAccess; exit 0 when all checks pass
 *   peer_user MODULE --steps N [--sleep-ms T]
 *                         a state maker (progs/peer_user.desc), with or
 *                         without tcgpu: each step a kernel of device 0 adds
 *                         one to device 1's buffer through peer access, a
 *                         window of it is copied to device 0, and a kernel
 *                         adds one there; "step K" every 10 steps, then
 *                         "checksum: HEX" of both buffers. A suspend that
 *                         loses the peer access fails the next step's kernel.
 */
#include <dlfcn.h>
#include <stdint.h>

#include "check.h"
#include "state.h"

#define WORDS (1u << 20)         /* 4 MiB on each device */
#define WINDOW (WORDS / 16)

struct peers {
    CUcontext c0, c1;
    CUfunction add;
    CUstream s;                  /* device 0's */
    CUdeviceptr d0, d1;
};

static uint32_t read_word(CUcontext c1, CUdeviceptr p)
{
    CUcontext prev;
    uint32_t v = 0;

    cu(cuCtxPushCurrent(c1), "cuCtxPushCurrent");
    cu(cuMemcpyDtoH(&v, p, sizeof(v)), "cuMemcpyDtoH");
    cu(cuCtxPopCurrent(&prev), "cuCtxPopCurrent");
    return v;
}

/* Buffers on both devices, device 0 current with peer access to device 1. */
static void setup(struct peers *p, const char *module)
{
    CUcontext prev;
    CUmodule mod;

    cu(cuInit(0), "cuInit");
    cu(cuDevicePrimaryCtxRetain(&p->c0, 0), "retain 0");
    cu(cuDevicePrimaryCtxRetain(&p->c1, 1), "retain 1");
    cu(cuCtxPushCurrent(p->c1), "push 1");
    cu(cuMemAlloc(&p->d1, WORDS * 4), "cuMemAlloc on device 1");
    cu(cuMemsetD32(p->d1, 41, WORDS), "cuMemsetD32");
    cu(cuCtxPopCurrent(&prev), "pop");
    cu(cuCtxPushCurrent(p->c0), "push 0");
    cu(cuMemAlloc(&p->d0, WORDS * 4), "cuMemAlloc on device 0");
    cu(cuMemsetD32(p->d0, 7, WORDS), "cuMemsetD32");
    cu(cuModuleLoad(&mod, module), "cuModuleLoad");
    cu(cuModuleGetFunction(&p->add, mod, "add_one"), "add_one");
    cu(cuStreamCreate(&p->s, 0), "cuStreamCreate");
    cu(cuCtxEnablePeerAccess(p->c1, 0), "cuCtxEnablePeerAccess");
}

static CUresult add_one(struct peers *p, CUdeviceptr at, uint64_t n)
{
    void *args[] = { &at, &n };

    cu(cuLaunchKernel(p->add, 1, 1, 1, 1, 1, 1, 0, p->s, args, NULL), "launch");
    return cuStreamSynchronize(p->s);
}

/* The program's own suspend and resume (tcgpu's C API), then peer access
 * off. */
static int self_checks(struct peers *p)
{
    int (*suspend)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "tcgpu_suspend");
    int (*resume)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "tcgpu_resume");

    if (!suspend || !resume) {
        fprintf(stderr, "peer_user: without --steps, run it with libtcgpu.so preloaded\n");
        return 2;
    }
    cu(add_one(p, p->d1, 1), "a kernel of device 0 on device 1's memory, with peer access");
    CHECK(read_word(p->c1, p->d1) == 42);

    CHECK(suspend(NULL) == 0);
    CHECK(resume() == 0);
    cu(add_one(p, p->d1, 1), "the same after a suspend and resume");
    CHECK(read_word(p->c1, p->d1) == 43);

    /* Without peer access the kernel faults (last: the fault is sticky). */
    cu(cuCtxDisablePeerAccess(p->c1), "cuCtxDisablePeerAccess");
    CHECK(add_one(p, p->d1, 1) == CUDA_ERROR_ILLEGAL_ADDRESS);
    if (failures)
        return 1;
    printf("peer access: ok\n");
    return 0;
}

static uint64_t checksum(struct peers *p)
{
    uint32_t *h = malloc(WORDS * 4);
    unsigned long long sum = FNV_OFFSET;

    if (!h) {
        fprintf(stderr, "peer_user: out of memory\n");
        exit(1);
    }
    cu(cuMemcpyDtoH(h, p->d0, WORDS * 4), "cuMemcpyDtoH device 0");
    sum = fnv1a(sum, (const unsigned char *)h, WORDS * 4, 1);
    cu(cuMemcpyDtoH(h, p->d1, WORDS * 4), "cuMemcpyDtoH device 1");
    sum = fnv1a(sum, (const unsigned char *)h, WORDS * 4, 1);
    free(h);
    return sum;
}

static int steps(struct peers *p, long n, long sleep_ms)
{
    for (long i = 1; i <= n; i++) {
        size_t at = (size_t)(i * 7919 % (WORDS / WINDOW)) * WINDOW * 4;

        cu(add_one(p, p->d1, WORDS / 2 + (uint64_t)i), "peer kernel (device 0 on device 1's memory)");
        cu(cuMemcpyAsync(p->d0 + at, p->d1 + at, WINDOW * 4, p->s), "cuMemcpyAsync device 1 -> 0");
        cu(add_one(p, p->d0, WORDS), "kernel on device 0");
        if (i % 10 == 0) {
            printf("step %ld\n", i);
            fflush(stdout);
        }
        state_sleep_ms(sleep_ms);
    }
    printf("checksum: %016llx\n", (unsigned long long)checksum(p));
    return 0;
}

int main(int argc, char **argv)
{
    struct peers p;
    long n = 0, sleep_ms = 0;

    if (argc < 2 || (argc > 2 && (state_parse_args(argc - 1, argv + 1, &n, &sleep_ms) != 0 || n <= 0))) {
        fprintf(stderr, "usage: peer_user MODULE [--steps N [--sleep-ms T]]\n");
        return 2;
    }
    setup(&p, argv[1]);
    return argc == 2 ? self_checks(&p) : steps(&p, n, sleep_ms);
}
