/* Kernels of the expandable-segments allocator probe (simcuda module). */
#include <stdint.h>

#include "simcuda_kernel.h"

/* VMM pages: a tensor may span several mappings, which a GPU reads as one
 * range; simcuda's views stop at a mapping, so take them a page at a time. */
#define PAGE (2ull << 20)

static uint64_t to_page_end(uint64_t va)
{
    return PAGE - va % PAGE;
}

/* mix(dst, src, n, seed): dst[i] = dst[i] * 31 + src[i] + seed over n
 * 32-bit words; order-sensitive, so a lost or repeated step shows. */
SIMCUDA_KERNEL_PARAMS(mix, sizeof(uint64_t), sizeof(uint64_t), sizeof(uint64_t),
                      sizeof(uint32_t));
SIMCUDA_KERNEL(mix)
{
    uint64_t dst = SIMCUDA_ARG(uint64_t, 0), src = SIMCUDA_ARG(uint64_t, 1);
    uint64_t n = SIMCUDA_ARG(uint64_t, 2) * 4;
    uint32_t seed = SIMCUDA_ARG(uint32_t, 3);

    for (uint64_t done = 0; done < n;) {
        uint64_t len = n - done, a = to_page_end(dst + done), b = to_page_end(src + done);
        len = len < a ? len : a;
        len = len < b ? len : b;
        uint32_t *d = k->dev(k, dst + done, len);
        const uint32_t *s = k->dev(k, src + done, len);
        if (!d || !s)
            return;
        for (uint64_t i = 0; i < len / 4; i++)
            d[i] = d[i] * 31u + s[i] + seed;
        done += len;
    }
}
