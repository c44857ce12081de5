/*
 * dev.c - loading and launching the device-side helpers; see
 * dev.h.
 */
#include "dev.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/driver.h"
#include "common/log.h"

#define SCAN_THREADS 256u

struct pdev {
    CUmodule mod;
    CUfunction scan;
    CUdeviceptr desc, out;        /* device buffers, max_batch entries */
    size_t max_batch;
    int kind;
};

/* Loads one image; 0 or -ENOENT. */
static int try_image(struct pdev *d, const unsigned char *img, size_t len, int kind)
{
    if (!len)
        return -ENOENT;
    if (TCGPU_REAL(cuModuleLoadData)(&d->mod, img) != CUDA_SUCCESS) {
        d->mod = NULL;
        return -ENOENT;
    }
    if (TCGPU_REAL(cuModuleGetFunction)(&d->scan, d->mod, "tcgpu_scan") != CUDA_SUCCESS) {
        TCGPU_REAL(cuModuleUnload)(d->mod);
        d->mod = NULL;
        return -ENOENT;
    }
    d->kind = kind;
    return 0;
}

int pdev_load(struct pdev **out, size_t max_batch, int allow_twin)
{
    struct pdev *d = calloc(1, sizeof(*d));

    if (!d)
        return -ENOMEM;
    d->max_batch = max_batch;
    /* The cubin first: a real driver takes it and refuses the twin (not a
     * CUDA image); simcuda refuses the cubin (not a host ELF it can load). */
    if (try_image(d, tcgpu_kernels_cubin, tcgpu_kernels_cubin_len, PDEV_CUBIN) &&
        (!allow_twin || try_image(d, tcgpu_kernels_sim, tcgpu_kernels_sim_len, PDEV_SIM_TWIN))) {
        free(d);
        return -ENOENT;
    }
    if (TCGPU_REAL(cuMemAlloc)(&d->desc, max_batch * sizeof(struct pdev_desc)) != CUDA_SUCCESS ||
        TCGPU_REAL(cuMemAlloc)(&d->out, max_batch * sizeof(struct pdev_result)) != CUDA_SUCCESS) {
        /* A full device: drain without the helpers. */
        pdev_unload(d);
        return -ENOMEM;
    }
    *out = d;
    return 0;
}

int pdev_kind(const struct pdev *d)
{
    return d ? d->kind : PDEV_NONE;
}

int pdev_scan(struct pdev *d, CUstream stream, const struct pdev_desc *desc, size_t n,
              unsigned flags, struct pdev_result *res, char *err, size_t errlen)
{
    uint32_t count = (uint32_t)n, fl = flags;
    void *params[] = { &d->desc, &count, &d->out, &fl };
    const char *what = "cuMemcpyHtoDAsync";
    CUresult rc;

    if (n == 0)
        return 0;
    if (n > d->max_batch)
        return -EINVAL;
    rc = TCGPU_REAL(cuMemcpyHtoDAsync)(d->desc, desc, n * sizeof(*desc), stream);
    if (rc == CUDA_SUCCESS) {
        what = "cuLaunchKernel(tcgpu_scan)";
        rc = TCGPU_REAL(cuLaunchKernel)(d->scan, count, 1, 1, SCAN_THREADS, 1, 1, 0, stream,
                                        params, NULL);
    }
    if (rc == CUDA_SUCCESS) {
        what = "cuMemcpyDtoHAsync";
        rc = TCGPU_REAL(cuMemcpyDtoHAsync)(res, d->out, n * sizeof(*res), stream);
    }
    if (rc == CUDA_SUCCESS) {
        what = "cuStreamSynchronize";
        rc = TCGPU_REAL(cuStreamSynchronize)(stream);
    }
    if (rc != CUDA_SUCCESS) {
        snprintf(err, errlen, "%s: %s", what, cu_error_name(rc));
        return -EIO;
    }
    return 0;
}

void pdev_unload(struct pdev *d)
{
    if (!d)
        return;
    if (d->desc)
        TCGPU_REAL(cuMemFree)(d->desc);
    if (d->out)
        TCGPU_REAL(cuMemFree)(d->out);
    if (d->mod)
        TCGPU_REAL(cuModuleUnload)(d->mod);
    free(d);
}
