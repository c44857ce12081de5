/*
 * test_interpose_nodriver.c - generated wrappers when the driver is missing
 * (TCGPU_REAL_LIBCUDA names no file; cuInit is a tracked wrapper, not here): every call returns
 * CUDA_ERROR_STUB_LIBRARY, as the toolkit's stand-in libcuda does, and the
 * reason is logged exactly once. Linked with the wrappers themselves (not
 * preloaded), so no driver is needed at all.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cuda.h>

#include "core/settings.h"
#include "driver/driver.h"
#include "../common/check.h"

static int test_missing_driver(void)
{
    char path[] = "/tmp/tcgpu-nodriver-XXXXXX";
    int fd = mkstemp(path);
    REQUIRE(fd >= 0, "mkstemp");
    unlink(path);
    int saved = dup(2);
    dup2(fd, 2);

    int n = -1, v = -1;
    CUdevice d;
    CUresult a = cuCtxSynchronize(), b = cuDeviceGetCount(&n), c = cuDriverGetVersion(&v),
             e = cuDeviceGet(&d, 0), f = TCGPU_REAL(cuMemAlloc)((CUdeviceptr *)&d, 16);

    dup2(saved, 2);
    close(saved);
    char buf[4096] = "";
    ssize_t len = pread(fd, buf, sizeof(buf) - 1, 0);
    close(fd);
    buf[len > 0 ? len : 0] = 0;
    fputs(buf, stderr);

    REQUIRE(a == CUDA_ERROR_STUB_LIBRARY && b == a && c == a && e == a && f == a,
          "results %d %d %d %d %d", a, b, c, e, f);
    REQUIRE(n == -1 && v == -1, "outputs written");
    REQUIRE(tcgpu_driver_load() == -ENOENT, "load result");
    REQUIRE(tcgpu_driver_handle() == NULL && !tcgpu_driver_has(TCGPU_FN(cuDeviceGet)), "handle");
    const char *first = strstr(buf, "cannot load the CUDA driver /nonexistent/libcuda.so.1");
    REQUIRE(first != NULL, "no message");
    REQUIRE(strstr(first + 1, "cannot load the CUDA driver") == NULL, "message logged twice");
    return 0;
}

int main(void)
{
    setenv("TCGPU_REAL_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
    settings_load();              /* as libtcgpu.so's constructor does */
    RUN(test_missing_driver);
    return T_EXIT_STATUS();
}
