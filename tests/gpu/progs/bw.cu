/*
 * bw.cu - the host link's pinned bandwidth, the limit a drain (device to
 * host) and a refill (host to device) cannot beat (tests/gpu/README.md).
 *
 * cudaMemcpyAsync between a cudaMallocHost buffer and a cudaMalloc buffer of
 * --mb MiB (default 1024), timed with events, best of --reps (default 5) after
 * one warm-up copy each way. The buffers are filled with non-zero data first.
 *
 * Output, one "name value" line each (GB/s = 1e9 bytes a second):
 *   bw_h2d_gbps 48.91
 *   bw_d2h_gbps 52.37
 *   bw_d2d_gbps 1998.1      (read + written bytes counted once: copy size / time)
 * A failing call prints "file:line: call: error" and exits 1.
 */
#include <cuda_runtime.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                 \
    do {                                                                            \
        cudaError_t err_ = (call);                                                  \
        if (err_ != cudaSuccess) {                                                  \
            fprintf(stderr, "%s:%d: %s: %s (%s)\n", __FILE__, __LINE__, #call,      \
                    cudaGetErrorName(err_), cudaGetErrorString(err_));              \
            exit(1);                                                                \
        }                                                                           \
    } while (0)

static float best_ms(void *dst, const void *src, size_t bytes, cudaMemcpyKind kind, int reps,
                     cudaStream_t s)
{
    cudaEvent_t a, b;
    float best = 1e30f;

    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s));       /* warm-up */
    CHECK(cudaStreamSynchronize(s));
    for (int i = 0; i < reps; i++) {
        float ms;
        CHECK(cudaEventRecord(a, s));
        CHECK(cudaMemcpyAsync(dst, src, bytes, kind, s));
        CHECK(cudaEventRecord(b, s));
        CHECK(cudaEventSynchronize(b));
        CHECK(cudaEventElapsedTime(&ms, a, b));
        if (ms < best)
            best = ms;
    }
    CHECK(cudaEventDestroy(a));
    CHECK(cudaEventDestroy(b));
    return best;
}

int main(int argc, char **argv)
{
    size_t mb = 1024;
    int reps = 5;
    unsigned char *host;
    void *dev, *dev2;
    cudaStream_t s;

    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--mb"))
            mb = strtoul(argv[i + 1], NULL, 10);
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "usage: bw [--mb M] [--reps N]\n");
            return 2;
        }
    }
    if (mb == 0 || reps < 1) {
        fprintf(stderr, "usage: bw [--mb M] [--reps N]\n");
        return 2;
    }
    size_t bytes = mb << 20;

    CHECK(cudaSetDevice(0));
    CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    CHECK(cudaMallocHost((void **)&host, bytes));
    CHECK(cudaMalloc(&dev, bytes));
    CHECK(cudaMalloc(&dev2, bytes));
    for (size_t i = 0; i < bytes; i += 4096)
        host[i] = (unsigned char)(i >> 12 | 1);     /* touch every page, non-zero */

    float h2d = best_ms(dev, host, bytes, cudaMemcpyHostToDevice, reps, s);
    float d2h = best_ms(host, dev, bytes, cudaMemcpyDeviceToHost, reps, s);
    float d2d = best_ms(dev2, dev, bytes, cudaMemcpyDeviceToDevice, reps, s);
    printf("bw_bytes %zu\n", bytes);
    printf("bw_h2d_gbps %.2f\n", bytes / (h2d * 1e-3) / 1e9);
    printf("bw_d2h_gbps %.2f\n", bytes / (d2h * 1e-3) / 1e9);
    printf("bw_d2d_gbps %.1f\n", bytes / (d2d * 1e-3) / 1e9);

    CHECK(cudaFree(dev2));
    CHECK(cudaFree(dev));
    CHECK(cudaFreeHost(host));
    CHECK(cudaStreamDestroy(s));
    return 0;
}
