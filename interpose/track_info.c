/*
 * track_info.c - cuMemGetInfo as the job sees it.
 *
 * A job with a memory limit (tcgpud's per-job limit, or TCGPU_GPU_MEM) shares
 * the GPU with others; frameworks size their caches from cuMemGetInfo, so
 * it must answer with the job's share: total is at most the limit, free at
 * most what the limit leaves. Without a limit the driver's answer stands.
 */
#include <cuda.h>

#include "core/daemon_client.h"
#include "core/devmem.h"
#include "driver/driver.h"
#include "driver/gate.h"

CUresult CUDAAPI cuMemGetInfo(size_t *free, size_t *total)
{
    TCGPU_GATE_ENTER("cuMemGetInfo_v2");
    CUresult rc = TCGPU_REAL(cuMemGetInfo)(free, total);
    uint64_t limit = tcgpu_daemon_limit();

    if (rc == CUDA_SUCCESS && limit && free && total) {
        uint64_t used;
        uint32_t count;
        devmem_usage(&used, &count);
        uint64_t room = used >= limit ? 0 : limit - used;
        if (*total > limit)
            *total = (size_t)limit;
        if (*free > room)
            *free = (size_t)room;
    }
    TCGPU_GATE_LEAVE();
    return rc;
}
