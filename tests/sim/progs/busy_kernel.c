/* A kernel that occupies the device for a given time (simcuda module), for
 * the compute-share tests: it sleeps inside the kernel, so it holds the
 * device's engine that long whatever else the CPUs are doing. */
#include <stdint.h>
#include <time.h>

#include "simcuda_kernel.h"

SIMCUDA_KERNEL_PARAMS(busy, sizeof(uint32_t));
SIMCUDA_KERNEL(busy)
{
    uint32_t us = SIMCUDA_ARG(uint32_t, 0);
    struct timespec ts = { us / 1000000, (long)(us % 1000000) * 1000L };

    (void)k;
    while (nanosleep(&ts, &ts))
        ;
}
