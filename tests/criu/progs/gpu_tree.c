/*
 * gpu_tree - a process tree with GPU workers, for gpuckpt save/restore.
 *
 *   gpu_tree [--steps N] [--mb M] [--sleep-ms T] [--ballast-mb B]
 *
 * The parent forks two workers and does not use CUDA itself. Each worker
 * initialises CUDA after the fork (a forked child cannot use its parent's
 * driver state), keeps M MiB of state on the device and, for N steps,
 * updates it (device -> host, a deterministic mix, host -> device), then
 * sends an FNV-1a hash of its final device memory over a pipe shared by
 * both workers. The parent prints one line per worker result and
 *
 *   checksum: <16 hex digits>
 *
 * combining both in worker order. --ballast-mb makes the parent hold B MiB of
 * incompressible host memory (so that CRIU's images are bigger than the GPU
 * images: the disk-full test). Exit 0, or 1 on any failure.
 */
#include <cuda.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../../common/progs.h"

struct result {
    uint32_t worker;
    uint64_t hash;
};

#define CK(call) do { CUresult rc_ = (call); if (rc_ != CUDA_SUCCESS) progs_die("gpu_tree", #call, rc_); } while (0)

static int worker(uint32_t id, int steps, size_t mb, int sleep, int fd)
{
    size_t n = mb << 20, words = n / 4;
    uint32_t *h = malloc(n);
    CUcontext ctx;
    CUdeviceptr d;
    struct result res = { id, 14695981039346656037ull };

    if (!h)
        return 1;
    CK(cuInit(0));
    CK(cuDevicePrimaryCtxRetain(&ctx, 0));
    CK(cuCtxSetCurrent(ctx));
    CK(cuMemAlloc(&d, n));
    CK(cuMemsetD32(d, 0x1234567u * (id + 1), words));
    for (int s = 0; s < steps; s++) {
        CK(cuMemcpyDtoH(h, d, n));
        for (size_t i = 0; i < words; i++)
            h[i] = h[i] * 2654435761u + (uint32_t)(s * 7 + i + id);
        CK(cuMemcpyHtoD(d, h, n));
        progs_sleep_ms((unsigned)sleep);
    }
    CK(cuMemcpyDtoH(h, d, n));
    res.hash = progs_fnv(h, n, res.hash);
    free(h);
    return write(fd, &res, sizeof(res)) == sizeof(res) ? 0 : 1;
}

static int parse(int argc, char **argv, int *steps, size_t *mb, int *sleep, size_t *ballast)
{
    for (int i = 1; i + 1 < argc; i += 2) {
        long v = strtol(argv[i + 1], NULL, 10);
        if (v < 0)
            return -1;
        if (!strcmp(argv[i], "--steps"))
            *steps = (int)v;
        else if (!strcmp(argv[i], "--mb"))
            *mb = (size_t)v;
        else if (!strcmp(argv[i], "--sleep-ms"))
            *sleep = (int)v;
        else if (!strcmp(argv[i], "--ballast-mb"))
            *ballast = (size_t)v;
        else
            return -1;
    }
    return argc % 2 == 1 ? 0 : -1;
}

int main(int argc, char **argv)
{
    int steps = 50, sleep = 0, p[2], status, bad = 0;
    size_t mb = 4, ballast = 0;
    uint64_t hashes[2] = { 0, 0 }, all = 14695981039346656037ull;
    unsigned char *ball = NULL;
    pid_t kids[2];

    if (parse(argc, argv, &steps, &mb, &sleep, &ballast) < 0 || !mb) {
        fprintf(stderr, "usage: gpu_tree [--steps N] [--mb M] [--sleep-ms T] [--ballast-mb B]\n");
        return 2;
    }
    if (ballast) {
        uint64_t x = 88172645463325252ull;
        ball = malloc(ballast << 20);
        for (size_t i = 0; ball && i < ballast << 20; i++) {
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;       /* xorshift: incompressible */
            ball[i] = (unsigned char)x;
        }
    }
    if (pipe(p) < 0)
        return 1;
    for (uint32_t w = 0; w < 2; w++) {
        kids[w] = fork();
        if (kids[w] < 0)
            return 1;
        if (kids[w] == 0) {
            close(p[0]);
            _exit(worker(w, steps, mb, sleep, p[1]));
        }
    }
    close(p[1]);
    printf("gpu_tree: parent %d, workers %d %d\n", (int)getpid(), (int)kids[0], (int)kids[1]);
    fflush(stdout);
    for (int i = 0; i < 2; i++) {
        struct result r;
        if (read(p[0], &r, sizeof(r)) != sizeof(r) || r.worker > 1) {
            fprintf(stderr, "gpu_tree: a worker sent no result\n");
            bad = 1;
            break;
        }
        hashes[r.worker] = r.hash;
        printf("worker %u: %016" PRIx64 "\n", r.worker, r.hash);
        fflush(stdout);
    }
    for (int w = 0; w < 2; w++)
        if (waitpid(kids[w], &status, 0) != kids[w] || !WIFEXITED(status) || WEXITSTATUS(status))
            bad = 1;
    all = progs_fnv(hashes, sizeof(hashes), all);
    if (ball)
        all = progs_fnv(ball, 64, all);
    printf("checksum: %016" PRIx64 "\n", all);
    free(ball);
    return bad;
}
