/* Kernels that keep the device busy (simcuda module): wait_flag runs until
 * the host lets it go, for the bounded device wait of an operation; busy
 * occupies the device for a given time, for the compute-share tests. */
#include <stdint.h>
#include <time.h>
#include <unistd.h>

#include "simcuda_kernel.h"

/* wait_flag(flag): spins until the 32-bit word at flag (pinned host memory,
 * which the device reads as a GPU reads mapped host memory) is not zero. */
SIMCUDA_KERNEL_PARAMS(wait_flag, sizeof(uint64_t));
SIMCUDA_KERNEL(wait_flag)
{
    volatile uint32_t *flag = k->dev(k, SIMCUDA_ARG(uint64_t, 0), 4);

    while (flag && !__atomic_load_n(flag, __ATOMIC_ACQUIRE))
        usleep(200);
}

/* busy(us): sleeps inside the kernel, so it holds the device's engine that
 * long whatever else the CPUs are doing. */
SIMCUDA_KERNEL_PARAMS(busy, sizeof(uint32_t));
SIMCUDA_KERNEL(busy)
{
    uint32_t us = SIMCUDA_ARG(uint32_t, 0);
    struct timespec ts = { us / 1000000, (long)(us % 1000000) * 1000L };

    (void)k;
    while (nanosleep(&ts, &ts))
        ;
}
