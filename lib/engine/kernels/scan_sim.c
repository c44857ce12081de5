/*
 * scan_sim.c - the simcuda twin of scan.cu: the same kernel names, arguments
 * and results, as host functions for the simulated GPU (simcuda_kernel.h).
 * Built into a shared object and embedded in the library (embed.py), loaded
 * with cuModuleLoadData when the driver is simcuda.
 */
#include <stdint.h>
#include <string.h>

#include "devhash.h"
#include "simcuda_kernel.h"

struct scan_desc {
    uint64_t va, len;
};

struct scan_result {
    uint64_t hash;
    uint32_t nonzero, pad;
};

/* Whether any of len bytes is non-zero, stopping at the first. */
static uint32_t any_nonzero(const uint8_t *p, size_t len)
{
    static const uint8_t zeros[256];

    while (len >= sizeof(zeros)) {
        if (memcmp(p, zeros, sizeof(zeros)))
            return 1;
        p += sizeof(zeros), len -= sizeof(zeros);
    }
    return len && memcmp(p, zeros, len) != 0;
}

/* tcgpu_scan(const scan_desc *desc, uint32_t n, scan_result *out, uint32_t
 * flags): for each of n chunks, whether any byte is non-zero and, with flags
 * bit 0 (SCAN_HASH), its device hash (else hash 0: zero detection stops at
 * the first non-zero byte). */
SIMCUDA_KERNEL(tcgpu_scan)
{
    uint64_t desc_ptr = SIMCUDA_ARG(uint64_t, 0);
    uint32_t n = SIMCUDA_ARG(uint32_t, 1);
    uint64_t out_ptr = SIMCUDA_ARG(uint64_t, 2);
    uint32_t flags = SIMCUDA_ARG(uint32_t, 3);
    const struct scan_desc *d = k->dev(k, desc_ptr, (size_t)n * sizeof(*d));
    struct scan_result *out = k->dev(k, out_ptr, (size_t)n * sizeof(*out));

    if (!d || !out)
        return;
    for (uint32_t i = 0; i < n; i++) {
        const void *p = k->dev(k, d[i].va, (size_t)d[i].len);
        uint32_t nz = 0;

        if (!p)
            return;
        if (flags & 1) {
            out[i].hash = devhash_host(p, (size_t)d[i].len, &nz);
        } else {
            out[i].hash = 0;
            nz = any_nonzero(p, (size_t)d[i].len);
        }
        out[i].nonzero = nz;
        out[i].pad = 0;
    }
}
SIMCUDA_KERNEL_PARAMS(tcgpu_scan, sizeof(uint64_t), sizeof(uint32_t), sizeof(uint64_t),
                      sizeof(uint32_t));
