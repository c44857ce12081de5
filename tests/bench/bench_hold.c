/*
 * bench_hold.c - holds a file's bytes in device memory (cuMemAlloc: under
 * libtcgpu.so, tracked memory) or in host memory, and waits: the process
 * that gpuckpt checkpoints, and the one CRIU dumps, in tests/bench/run.sh.
 *
 *   bench_hold device|host FILE [bf16]   prints "ready" when the bytes are in place
 */
#include <cuda.h>
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    FILE *f;
    long n;
    char *h;

    if (argc < 3 || !(f = fopen(argv[2], "rb")))
        return 2;
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    fseek(f, 0, SEEK_SET);
    h = malloc((size_t)n);
    if (!h || fread(h, 1, (size_t)n, f) != (size_t)n)
        return 1;
    fclose(f);
    if (!strcmp(argv[1], "device")) {
        CUcontext ctx;
        CUdeviceptr d;

        if (cuInit(0) || cuDevicePrimaryCtxRetain(&ctx, 0) || cuCtxSetCurrent(ctx) ||
            cuMemAlloc(&d, (size_t)n) || cuMemcpyHtoD(d, h, (size_t)n)) {
            fprintf(stderr, "bench_hold: CUDA setup failed\n");
            return 1;
        }
        free(h);
        /* a framework's dtype hint, if the library is there */
        if (argc > 3) {
            int (*hint)(unsigned long long, size_t, int) =
                (int (*)(unsigned long long, size_t, int))dlsym(RTLD_DEFAULT, "tcgpu_hint_dtype");
            if (hint)
                hint(d, (size_t)n, 2 /* bf16 */);
        }
    }
    printf("ready\n");
    fflush(stdout);
    for (;;)
        pause();
}
