/*
 * test_procaddr_resolve.c - lib/driver/driver.c's cuGetProcAddress rule, queried
 * line by line: reads "SYMBOL VERSION FLAGS" lines on stdin, prints the ABI
 * name, or "-version" / "-missing". test_procaddr_resolve.py compares every
 * answer with codegen/cuda_api.py resolve(), the rule simcuda is built from.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "driver/driver.h"

int main(void)
{
    char sym[256];
    int version;
    unsigned long long flags;
    while (scanf("%255s %d %llu", sym, &version, &flags) == 3) {
        int why;
        int fn = tcgpu_driver_resolve(strcmp(sym, "\"\"") == 0 ? "" : sym, version, flags, &why);
        if (fn >= 0)
            printf("%s\n", tcgpu_driver_name(fn));
        else
            printf("%s\n", why == 1 ? "-version" : "-missing");
    }
    /* Name lookups agree with the table. */
    for (int i = 0; i < TCGPU_FN_COUNT; i++)
        if (tcgpu_driver_index(tcgpu_fn_names[i]) != i) {
            fprintf(stderr, "tcgpu_driver_index(%s) != %d\n", tcgpu_fn_names[i], i);
            return 1;
        }
    if (tcgpu_driver_index("cuNoSuch") != -1 || tcgpu_driver_index("") != -1 ||
        TCGPU_FN(cuMemAlloc) != tcgpu_driver_index("cuMemAlloc_v2")) {
        fprintf(stderr, "tcgpu_driver_index of unknown names or TCGPU_FN\n");
        return 1;
    }
    return 0;
}
