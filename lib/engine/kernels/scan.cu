/*
 * scan.cu - device-side helpers of the drain (engine/dev.h), compiled by
 * nvcc into a fatbin embedded in the library. The simcuda twin is
 * scan_sim.c; both compute what devhash.h defines.
 *
 * tcgpu_scan: one block per chunk; each thread sums the hash terms of the
 * 16-byte pairs it strides over and ORs their words, then the block reduces
 * (warp shuffles, then shared memory) and thread 0 writes the result.
 */
#include <stdint.h>

#define DEVHASH_QUAL static __device__ __forceinline__
#define DEVHASH_NO_HOST
#include "devhash.h"

struct scan_desc {
    uint64_t va, len;
};

struct scan_result {
    unsigned long long hash;
    uint32_t nonzero, pad;
};

/* flags bit 0: compute the hash; without it only zero detection, and the
 * block stops at the first non-zero word it sees (checked every 64 KiB). */
extern "C" __global__ void tcgpu_scan(const scan_desc *desc, uint32_t n, scan_result *out,
                                      uint32_t flags)
{
    __shared__ unsigned long long s_sum[32], s_any[32];
    uint32_t c = blockIdx.x;

    if (c >= n)
        return;
    const uint8_t *b = (const uint8_t *)desc[c].va;
    uint64_t len = desc[c].len;
    uint64_t pairs = len / 16, sum = 0, any = 0;
    bool aligned = (((uintptr_t)b) & 7) == 0;

    bool hash = flags & 1;

    uint64_t rounds = (pairs + blockDim.x - 1) / blockDim.x;

    /* Uniform trip count: every thread reaches each __syncthreads_or. */
    for (uint64_t r = 0; r < rounds; r++) {
        uint64_t j = r * blockDim.x + threadIdx.x;

        if (!hash && r && r % 16 == 0 && __syncthreads_or(any != 0))
            break;
        if (j >= pairs)
            continue;
        uint64_t a, d;
        if (aligned) {
            a = ((const uint64_t *)b)[2 * j];
            d = ((const uint64_t *)b)[2 * j + 1];
        } else {
            a = devhash_load(b + 16 * j, 8);
            d = devhash_load(b + 16 * j + 8, 8);
        }
        any |= a | d;
        if (hash)
            sum += devhash_term(j, a, d);
    }
    if (threadIdx.x == 0 && len % 16) {
        uint64_t at = 16 * pairs, rest = len - at;
        uint64_t a = devhash_load(b + at, rest);
        uint64_t d = rest > 8 ? devhash_load(b + at + 8, rest - 8) : 0;
        any |= a | d;
        sum += devhash_term(pairs, a, d);
    }
    for (int o = 16; o > 0; o >>= 1) {
        sum += __shfl_down_sync(0xffffffffu, sum, o);
        any |= __shfl_down_sync(0xffffffffu, any, o);
    }
    if ((threadIdx.x & 31) == 0) {
        s_sum[threadIdx.x >> 5] = sum;
        s_any[threadIdx.x >> 5] = any;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        uint64_t t = 0, z = 0;
        for (unsigned w = 0; w < (blockDim.x + 31) / 32; w++) {
            t += s_sum[w];
            z |= s_any[w];
        }
        out[c].hash = hash ? devhash_final(t, len) : 0;
        out[c].nonzero = z != 0;
        out[c].pad = 0;
    }
}
