/*
 * managed_user - managed memory under tcgpu: it is checkpointed (not refused)
 * and survives suspend and resume, read and written by the host directly, as
 * managed memory is, next to ordinary device memory.
 *
 *   managed_user       run with libtcgpu.so preloaded; exit 0 when every
 *                      check passed
 */
#include <dlfcn.h>
#include <ftw.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "tcgpu.h"

#define N (4u << 20)

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

int main(void)
{
    int (*suspend)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "tcgpu_suspend");
    int (*resume)(void) = (int (*)(void))dlsym(RTLD_DEFAULT, "tcgpu_resume");
    int (*checkpoint)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "tcgpu_checkpoint");
    int (*status)(struct tcgpu_status *) = (int (*)(struct tcgpu_status *))dlsym(RTLD_DEFAULT, "tcgpu_status");
    char tmp[] = "/tmp/tcgpu-managed-XXXXXX", image[64];
    unsigned char *m, *back = malloc(N);
    struct tcgpu_status st;
    CUdeviceptr managed, dev;
    CUcontext ctx;

    if (!suspend || !resume || !checkpoint || !status || !back || !mkdtemp(tmp)) {
        fprintf(stderr, "managed_user: needs libtcgpu.so preloaded\n");
        return 2;
    }
    snprintf(image, sizeof(image), "%s/image", tmp);
    cu(cuInit(0), "cuInit");
    cu(cuDevicePrimaryCtxRetain(&ctx, 0), "cuDevicePrimaryCtxRetain");
    cu(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    cu(cuMemAllocManaged(&managed, N, CU_MEM_ATTACH_GLOBAL), "cuMemAllocManaged");
    cu(cuMemAlloc(&dev, N), "cuMemAlloc");
    m = (unsigned char *)(uintptr_t)managed;      /* managed memory is host-addressable */
    for (size_t i = 0; i < N; i++)
        m[i] = (unsigned char)(i * 131 + 7);
    cu(cuMemcpyDtoD(dev, managed, N), "cuMemcpyDtoD");

    CHECK(status(&st) == 0 && st.tracked_bytes >= 2 * (size_t)N);
    CHECK(checkpoint(image) == 0);                  /* not refused any more */
    CHECK(access(image, F_OK) == 0);
    CHECK(suspend(NULL) == 0);
    /* Host threads may touch managed memory while the process is suspended
     * (it is not a CUDA call): resume must not write an old copy over it. */
    m[1] ^= 0xff;
    CHECK(resume() == 0);
    CHECK(m[1] == (unsigned char)((1 * 131 + 7) ^ 0xff));
    m[1] ^= 0xff;

    for (size_t i = 0; i < N; i++)
        if (m[i] != (unsigned char)(i * 131 + 7)) {
            CHECK(!"managed memory changed across suspend/resume");
            break;
        }
    cu(cuMemcpyDtoH(back, dev, N), "cuMemcpyDtoH");
    CHECK(memcmp(back, m, N) == 0);
    cu(cuMemFree(managed), "cuMemFree(managed)");
    CHECK(status(&st) == 0 && st.tracked_bytes < 2 * (size_t)N);
    cu(cuMemFree(dev), "cuMemFree");
    nftw(tmp, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
    if (failures)
        return 1;
    printf("managed memory: ok\n");
    return 0;
}
