/*
 * track_init.c - cuInit: where a process becomes a tcgpu process.
 *
 * The control channel (socket, signal trigger, service thread) starts at the
 * first successful cuInit, not when the library is loaded: `gpuckpt run`
 * preloads the library into every process of a job (shells, launchers,
 * compilers), and only those that use CUDA should appear as jobs. A forked
 * child that calls cuInit again gets a channel of its own. A job started
 * with a project (gpuckpt run --project) then registers with tcgpud.
 */
#include <cuda.h>

#include "core/control.h"
#include "core/daemon_client.h"
#include "driver/driver.h"
#include "driver/gate.h"

CUresult CUDAAPI cuInit(unsigned int Flags)
{
    TCGPU_GATE_ENTER("cuInit");
    CUresult rc = TCGPU_REAL(cuInit)(Flags);
    TCGPU_GATE_LEAVE();
    if (rc == CUDA_SUCCESS) {
        tcgpu_control_start();          /* idempotent; logs its own failures */
        tcgpu_daemon_register();        /* tcgpud, when the job has a project; never fatal */
    }
    return rc;
}
