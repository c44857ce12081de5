/*
 * managed_user - managed memory under tcgpu, next to ordinary device memory
 * (managed_user.desc).
 *
 *   managed_user [--steps N] [--sleep-ms T]
 *
 * With libtcgpu.so loaded it first checks through the C API that managed
 * memory is checkpointed (not refused) and survives suspend and resume, read
 * and written by the host directly, as managed memory is. Then, with or
 * without tcgpu, it makes state for N steps (0), sleeping T ms after each:
 * the host rewrites part of the managed memory, the device copies a part of
 * it into device memory and a part back, and it prints "step S". Last comes
 * "checksum: <16 hex digits>" over both, the same for the same N every time.
 * Exit 0 when every check passed.
 */
#include <dlfcn.h>
#include <ftw.h>
#include <unistd.h>

#include "check.h"
#include "state.h"
#include "tcgpu.h"

#define N (8u << 20)
#define CHUNK (N / 16)

struct api {
    int (*suspend)(const char *);
    int (*resume)(void);
    int (*checkpoint)(const char *);
    int (*status)(struct tcgpu_status *);
};

/* Present when libtcgpu.so is preloaded (tcgpu.h's pattern). */
static int load_api(struct api *a)
{
    a->suspend = (int (*)(const char *))dlsym(RTLD_DEFAULT, "tcgpu_suspend");
    a->resume = (int (*)(void))dlsym(RTLD_DEFAULT, "tcgpu_resume");
    a->checkpoint = (int (*)(const char *))dlsym(RTLD_DEFAULT, "tcgpu_checkpoint");
    a->status = (int (*)(struct tcgpu_status *))dlsym(RTLD_DEFAULT, "tcgpu_status");
    return a->suspend && a->resume && a->checkpoint && a->status;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static unsigned char pattern(size_t i)
{
    return (unsigned char)(i * 131 + 7);
}

/* Managed memory is checkpointed, suspended and resumed with the rest; what
 * the host writes into it while the process is suspended stays. */
static void check_api(const struct api *a, unsigned char *m, CUdeviceptr dev)
{
    char tmp[] = "/tmp/tcgpu-managed-XXXXXX", image[64];
    unsigned char *back = malloc(N);
    struct tcgpu_status st;

    if (!back || !mkdtemp(tmp)) {
        CHECK(!"no memory or no temporary directory");
        free(back);
        return;
    }
    snprintf(image, sizeof(image), "%s/image", tmp);
    CHECK(a->status(&st) == 0 && st.tracked_bytes >= 2 * (size_t)N);
    CHECK(a->checkpoint(image) == 0);               /* not refused any more */
    CHECK(access(image, F_OK) == 0);
    CHECK(a->suspend(NULL) == 0);
    /* Host threads may touch managed memory while the process is suspended
     * (it is not a CUDA call): resume must not write an old copy over it. */
    m[1] ^= 0xff;
    CHECK(a->resume() == 0);
    CHECK(m[1] == (unsigned char)(pattern(1) ^ 0xff));
    m[1] ^= 0xff;

    for (size_t i = 0; i < N; i++)
        if (m[i] != pattern(i)) {
            CHECK(!"managed memory changed across suspend/resume");
            break;
        }
    cu(cuMemcpyDtoH(back, dev, N), "cuMemcpyDtoH");
    CHECK(memcmp(back, m, N) == 0);
    nftw(tmp, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
    free(back);
}

/* Step s: the host rewrites one chunk of the managed memory, the device
 * copies one chunk of it into device memory and another one back. */
static void make_state(unsigned char *m, CUdeviceptr managed, CUdeviceptr dev, long s)
{
    size_t host_off = (size_t)(s % 16) * CHUNK, in = (size_t)(s * 5 % 16) * CHUNK;
    size_t out = (size_t)(s * 7 % 16) * CHUNK, from = (out + CHUNK) % N;

    for (size_t i = host_off; i < host_off + CHUNK; i += 64)
        m[i] = (unsigned char)(m[i] * 31 + s);
    cu(cuMemcpyDtoD(dev + in, managed + in, CHUNK), "cuMemcpyDtoD(in)");
    cu(cuMemcpyDtoD(managed + out, dev + from, CHUNK), "cuMemcpyDtoD(out)");
}

/* FNV-1a 64 over the managed memory, then the device memory. */
static unsigned long long checksum(const unsigned char *m, CUdeviceptr dev)
{
    unsigned char *back = malloc(N);
    unsigned long long h;

    if (!back) {
        fprintf(stderr, "managed_user: out of memory\n");
        exit(1);
    }
    cu(cuMemcpyDtoH(back, dev, N), "cuMemcpyDtoH");
    h = fnv1a(fnv1a(FNV_OFFSET, m, N, 1), back, N, 1);
    free(back);
    return h;
}

int main(int argc, char **argv)
{
    long steps = 0, sleep_ms = 0;
    struct tcgpu_status st;
    struct api a;
    CUdeviceptr managed, dev;
    CUcontext ctx;
    unsigned char *m;
    unsigned long long h;
    int loaded;

    if (state_parse_args(argc, argv, &steps, &sleep_ms) < 0) {
        fprintf(stderr, "usage: managed_user [--steps N] [--sleep-ms T]\n");
        return 2;
    }
    loaded = load_api(&a);
    cu(cuInit(0), "cuInit");
    cu(cuDevicePrimaryCtxRetain(&ctx, 0), "cuDevicePrimaryCtxRetain");
    cu(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    cu(cuMemAllocManaged(&managed, N, CU_MEM_ATTACH_GLOBAL), "cuMemAllocManaged");
    cu(cuMemAlloc(&dev, N), "cuMemAlloc");
    m = (unsigned char *)(uintptr_t)managed;      /* managed memory is host-addressable */
    for (size_t i = 0; i < N; i++)
        m[i] = pattern(i);
    cu(cuMemcpyDtoD(dev, managed, N), "cuMemcpyDtoD");
    if (loaded)
        check_api(&a, m, dev);

    for (long s = 0; s < steps; s++) {
        make_state(m, managed, dev, s);
        printf("step %ld\n", s);
        fflush(stdout);
        state_sleep_ms(sleep_ms);
    }
    h = checksum(m, dev);
    cu(cuMemFree(managed), "cuMemFree(managed)");
    if (loaded)
        CHECK(a.status(&st) == 0 && st.tracked_bytes < 2 * (size_t)N);
    cu(cuMemFree(dev), "cuMemFree");
    if (failures)
        return 1;
    printf("managed memory: ok%s\n", loaded ? "" : " (tcgpu not loaded: no C API checks)");
    printf("checksum: %016llx\n", h);
    return 0;
}
