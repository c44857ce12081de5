/* A kernel that never ends (simcuda module), for the gate-timeout test. */
#include <unistd.h>

#include "simcuda_kernel.h"

/* One argument, so that simcuda knows the launch's size and runs it
 * asynchronously, as a GPU would. */
SIMCUDA_KERNEL_PARAMS(spin_forever, sizeof(int));
SIMCUDA_KERNEL(spin_forever)
{
    (void)k;
    (void)params;
    for (;;)
        pause();
}
