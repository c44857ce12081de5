/*
 * pair_train.c - the two tasks of one job, each on its own GPU, training in
 * lockstep through shared memory (tests/slurm: a multi-task job saved and
 * restored as one).
 *
 *   pair_train [--rank R] [--peers 1|2] [--mb N] [--steps N] [--sleep-ms N] [--shm NAME]
 *
 * Each rank keeps N MiB of state on its device (ordinal 0: under Slurm,
 * CUDA_VISIBLE_DEVICES is its one GPU). Every step it reads a slice of its
 * state back, publishes a digest of it in the shared segment, waits for its
 * peer's digest of the same step, and folds it into its state on the
 * device: neither can run ahead of the other by more than a step, and the
 * result depends on every step of both. At the end each prints
 * "rank R checksum: HEX" (its whole device state). R defaults to
 * $SLURM_PROCID, the peers to $SLURM_NTASKS (1: a rank alone, no partner to
 * wait for), NAME to /tcgpu-pair-$SLURM_JOB_ID.
 */
#include <cuda.h>
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "../../common/progs.h"

#define SLICE 4096

struct pair {
    _Atomic uint64_t done[2];   /* steps published by each rank */
    uint64_t digest[2][2];      /* [rank][step % 2] */
};

#define CK(call) do { CUresult r_ = (call); if (r_ != CUDA_SUCCESS) progs_die("pair_train", #call, r_); } while (0)

static struct pair *attach(const char *name)
{
    int fd = shm_open(name, O_RDWR | O_CREAT, 0600);
    struct pair *p;

    if (fd < 0 || ftruncate(fd, sizeof(*p)) < 0) {
        perror("pair_train: shm");
        exit(1);
    }
    p = mmap(NULL, sizeof(*p), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        perror("pair_train: mmap");
        exit(1);
    }
    return p;
}

int main(int argc, char **argv)
{
    const char *proc = getenv("SLURM_PROCID"), *job = getenv("SLURM_JOB_ID");
    const char *ntasks = getenv("SLURM_NTASKS");
    unsigned rank = proc ? (unsigned)atoi(proc) : 0, mb = 8, steps = 100, sleep = 0;
    unsigned peers = ntasks && atoi(ntasks) == 1 ? 1 : 2;
    char shm[128];
    uint64_t bytes, *host;
    CUdevice dev;
    CUcontext ctx;
    CUdeviceptr d;
    struct pair *p;

    snprintf(shm, sizeof(shm), "/tcgpu-pair-%s", job ? job : "local");
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--rank")) rank = (unsigned)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--mb")) mb = (unsigned)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--peers")) peers = (unsigned)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--steps")) steps = (unsigned)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--sleep-ms")) sleep = (unsigned)atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--shm")) snprintf(shm, sizeof(shm), "%s", argv[i + 1]);
        else { fprintf(stderr, "pair_train: unknown option %s\n", argv[i]); return 2; }
    }
    if (rank >= peers || peers > 2 || !mb || !steps)
        return 2;
    bytes = (uint64_t)mb << 20;
    p = attach(shm);
    CK(cuInit(0));
    CK(cuDeviceGet(&dev, 0));
    CK(cuDevicePrimaryCtxRetain(&ctx, dev));
    CK(cuCtxSetCurrent(ctx));
    CK(cuMemAlloc(&d, bytes));
    if (!(host = malloc(bytes)))
        return 1;
    for (uint64_t i = 0; i < bytes / 8; i++)
        host[i] = (i + 1) * 0x9e3779b97f4a7c15ull ^ (rank + 1);
    CK(cuMemcpyHtoD(d, host, bytes));
    printf("rank %u: %u MiB on its GPU, %u steps, peers through %s\n", rank, mb, steps, shm);
    fflush(stdout);
    for (unsigned k = 0; k < steps; k++) {
        uint64_t slice[SLICE / 8], mine, theirs, off = ((uint64_t)k * SLICE * 7) % (bytes - SLICE);
        off -= off % 8;
        CK(cuMemcpyDtoH(slice, d + off, SLICE));
        mine = progs_fnv(slice, SLICE, PROGS_FNV_BASIS ^ k);
        p->digest[rank][k % 2] = mine;
        atomic_store_explicit(&p->done[rank], (uint64_t)k + 1, memory_order_release);
        while (peers == 2 &&
               atomic_load_explicit(&p->done[!rank], memory_order_acquire) < (uint64_t)k + 1)
            progs_sleep_ms(1);
        theirs = peers == 2 ? p->digest[!rank][k % 2] : 0;
        for (unsigned i = 0; i < SLICE / 8; i++)
            slice[i] = slice[i] * 6364136223846793005ull + (theirs ^ i);
        CK(cuMemcpyHtoD(d + off, slice, SLICE));
        if (k % 25 == 0) {
            printf("rank %u step %u\n", rank, k);
            fflush(stdout);
        }
        if (sleep)
            progs_sleep_ms(sleep);
    }
    CK(cuMemcpyDtoH(host, d, bytes));
    printf("rank %u checksum: %016llx\n", rank, (unsigned long long)progs_fnv(host, bytes, 14695981039346656037ull));
    fflush(stdout);
    /* whoever finishes second sees the other's mark and removes the segment */
    atomic_fetch_add(&p->done[rank], 1000000000ull);
    if (peers == 1 || atomic_load(&p->done[!rank]) >= 1000000000ull)
        shm_unlink(shm);
    return 0;
}
