/*
 * track_ipc.c - legacy CUDA IPC of memory: tcgpu's handles for the memory it
 * serves (lib/core/ipcmem.h), the driver's for the rest.
 *
 * Compiled with both ABI names of cuIpcOpenMemHandle visible (cuda.h renames
 * it to _v2 otherwise), since the program may reach either.
 */
#ifndef __CUDA_API_VERSION_INTERNAL
#define __CUDA_API_VERSION_INTERNAL 1
#endif
#include <stdint.h>
#include <cuda.h>

#include "core/ipcmem.h"
#include "driver/driver.h"
#include "driver/gate.h"
#include "common/log.h"
#include "driver/unsupported.h"

/*
 * Legacy IPC of the memory tcgpu serves is carried by tcgpu itself
 * (lib/core/ipcmem.h): the handle is ours, and the opener's tcgpu gets the
 * memory from ours over the control socket. Its segments are exportable
 * unless TCGPU_IPC=0 (or the device has no POSIX descriptors): then the driver is asked, refuses VMM memory,
 * and the log says why, once. IPC handles of other memory (the driver's)
 * are noted as state a checkpoint cannot restore.
 */
CUresult CUDAAPI cuIpcGetMemHandle(CUipcMemHandle *pHandle, CUdeviceptr dptr)
{
    static int explained;
    CUresult rc;

    TCGPU_GATE_ENTER("cuIpcGetMemHandle");
    rc = ipcmem_get_handle(pHandle, dptr);
    if (rc == CUDA_ERROR_NOT_SUPPORTED && !__atomic_exchange_n(&explained, 1, __ATOMIC_RELAXED))
        log_err("cuIpcGetMemHandle: memory served by tcgpu is VMM memory, which CUDA IPC "
                "cannot export, and tcgpu carries IPC of it only without TCGPU_IPC=0 and on a "
                "device with POSIX file-descriptor handles");
    if (rc == CUDA_ERROR_NOT_SUPPORTED)
        rc = TCGPU_REAL(cuIpcGetMemHandle)(pHandle, dptr);      /* the driver's refusal */
    else if (rc == CUDA_ERROR_NOT_FOUND) {
        rc = TCGPU_REAL(cuIpcGetMemHandle)(pHandle, dptr);
        if (rc == CUDA_SUCCESS)
            tcgpu_note_unsupported("cuIpcGetMemHandle", "IPC memory handles cannot be checkpointed");
    }
    TCGPU_GATE_LEAVE();
    return rc;
}

static const char opened_note[] = "memory opened from another process's IPC handle cannot be checkpointed";

/* A handle of tcgpu's is opened by tcgpu; the driver's by the driver (noted). */
static CUresult ipc_open(const char *call, CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int flags,
                         int v2)
{
    CUresult rc = ipcmem_open(pdptr, &handle);

    if (rc != CUDA_ERROR_NOT_FOUND)
        return rc;
    rc = v2 ? TCGPU_REAL_ABI(cuIpcOpenMemHandle_v2)(pdptr, handle, flags)
            : TCGPU_REAL_ABI(cuIpcOpenMemHandle)(pdptr, handle, flags);
    if (rc == CUDA_SUCCESS)
        tcgpu_note_unsupported_held(call, opened_note, TCGPU_HELD_BY_IPC_MEMORY, (uint64_t)*pdptr);
    return rc;
}

CUresult CUDAAPI cuIpcOpenMemHandle(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    CUresult rc;

    TCGPU_GATE_ENTER("cuIpcOpenMemHandle");
    rc = ipc_open("cuIpcOpenMemHandle", pdptr, handle, Flags, 0);
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuIpcOpenMemHandle_v2(CUdeviceptr *pdptr, CUipcMemHandle handle, unsigned int Flags)
{
    CUresult rc;

    TCGPU_GATE_ENTER("cuIpcOpenMemHandle_v2");
    rc = ipc_open("cuIpcOpenMemHandle_v2", pdptr, handle, Flags, 1);
    TCGPU_GATE_LEAVE();
    return rc;
}

CUresult CUDAAPI cuIpcCloseMemHandle(CUdeviceptr dptr)
{
    CUresult rc;

    TCGPU_GATE_ENTER("cuIpcCloseMemHandle");
    rc = ipcmem_close(dptr);
    if (rc == CUDA_ERROR_NOT_FOUND) {
        rc = TCGPU_REAL(cuIpcCloseMemHandle)(dptr);
        if (rc == CUDA_SUCCESS)
            tcgpu_unsupported_release(TCGPU_HELD_BY_IPC_MEMORY, (uint64_t)dptr);
    }
    TCGPU_GATE_LEAVE();
    return rc;
}
