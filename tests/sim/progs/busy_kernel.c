/* A kernel that runs until the host lets it go (simcuda module), for the
 * bounded device wait of an operation. */
#include <stdint.h>
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
