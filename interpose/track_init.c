/*
 * track_init.c - where libtcgpu.so starts: its settings when it is loaded
 * (core/settings.h: the environment, parsed once, and again in a forked
 * child), and cuInit, where a process becomes a tcgpu process.
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
#include "core/settings.h"
#include "driver/driver.h"
#include "driver/gate.h"

/* Before the program's main (and so, as a rule, before its first CUDA call,
 * which needs the driver's path, the log's level and the gate's mode). */
__attribute__((constructor)) static void libtcgpu_start(void)
{
    settings_load();
}

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
