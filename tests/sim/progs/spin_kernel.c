/* A kernel that never ends (simcuda module), for the gate-timeout test. */
#include <unistd.h>

#include "simcuda_kernel.h"

SIMCUDA_KERNEL(spin_forever)
{
    (void)k;
    (void)params;
    for (;;)
        pause();
}
