/*
 * profiler.c - cuProfilerStart/Stop. There is no profiling tool to drive on
 * the simulator; what the driver checks is checked (a current context), and
 * the state is kept per context so that start/stop pairs nest as documented:
 * starting twice, or stopping when stopped, has no effect.
 */
#include "sim.h"

#include <cudaProfiler.h>

static pthread_mutex_t prof_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t profiling[SIM_MAX_DEVICES];    /* id of the context profiling, per device */

static CUresult set(bool on)
{
    struct sim_ctx *c;
    CUresult r;

    SIM_BEGIN();
    if ((r = sim_ctx_current(&c)) == CUDA_ERROR_INVALID_CONTEXT)
        return r;
    pthread_mutex_lock(&prof_lock);
    profiling[c->dev] = on ? c->id : 0;
    pthread_mutex_unlock(&prof_lock);
    return CUDA_SUCCESS;
}

CUresult cuProfilerStart(void)
{
    return set(true);
}
SIM_EXPORT(cuProfilerStart);
SIM_PARTIAL(cuProfilerStart,
    "no profiling tool is attached: only the state changes; cuGetProcAddress does not "
    "return it");

CUresult cuProfilerStop(void)
{
    return set(false);
}
SIM_EXPORT(cuProfilerStop);
SIM_PARTIAL(cuProfilerStop,
    "no profiling tool is attached: only the state changes; cuGetProcAddress does not "
    "return it");

/* Deprecated: the driver has answered CUDA_ERROR_NOT_SUPPORTED since CUDA 12.0. */
CUresult cuProfilerInitialize(const char *configFile, const char *outputFile, CUoutput_mode outputMode)
{
    SIM_GATE();
    (void)configFile;
    (void)outputFile;
    (void)outputMode;
    return CUDA_ERROR_NOT_SUPPORTED;
}
SIM_EXPORT(cuProfilerInitialize);
SIM_AS_DRIVER(cuProfilerInitialize, "CUDA_ERROR_NOT_SUPPORTED, as the driver since CUDA 12.0");
