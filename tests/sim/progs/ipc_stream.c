/*
 * ipc_stream - a producer and a consumer that keep passing data through
 * device memory shared with legacy CUDA IPC, as a PyTorch multiprocessing
 * producer hands CUDA tensors to a worker and takes back its results
 * (ipc_group.sh, ipc_gang.sh). Both run STEPS steps, in turn:
 *
 *   step k  the producer writes the words of step k into the shared
 *           block and sets the flag to 2k+1; the consumer waits for it,
 *           checks every word (the bytes the producer wrote, at the
 *           address it opened), folds them into its checksum, writes
 *           w * 3 + 1 + k back and sets the flag to 2k+2; the producer
 *           waits for that, checks and folds the words into its own.
 *
 * Each waits for the other by polling the flag with cuMemcpyDtoH (sleeping
 * 1 ms between looks, in host code), for at most WAIT_S seconds: a lost
 * peer fails the run instead of hanging it. The checksums depend only on
 * the steps, so a run suspended any number of times ends with those of an
 * uninterrupted run.
 *
 *   ipc_stream produce DIR STEPS SLEEP_MS
 *       allocates 1 MiB of its own and the shared block, writes the
 *       64-byte handle to DIR/handle, prints "exported", then each step
 *       "step K" (sleeping SLEEP_MS before it), then "checksum: HEX"; waits
 *       for DIR/closed (the consumer let the memory go) and ends.
 *   ipc_stream consume DIR STEPS
 *       waits for DIR/handle, opens it ("opened at 0xADDR"), prints "step K
 *       addr 0xADDR" at each step (the address it reads at, checked against
 *       cuMemGetAddressRange), then "checksum: HEX", closes the handle,
 *       creates DIR/closed and ends.
 *
 * With --mutual (last, on both) each maps the other's memory: the consumer
 * allocates a block of its own and exports it (DIR/handle-back) before it
 * opens the producer's; it writes its answers there, and the producer
 * reads them through its mapping of it (opened after "exported": "opened
 * back at 0xADDR"), and closes it after its last step. The checksums are
 * those of the plain mode.
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <cuda.h>

#include "check.h"

enum {
    WORDS = 64 << 10,           /* 256 KiB of data a step */
    DATA_AT = 4096,             /* the flag is the block's first word */
    BLOCK = DATA_AT + WORDS * 4,
    OWN = 1 << 20,
    WAIT_S = 120,
};

static const char *dir;
static int mutual;
static uint32_t words[WORDS];

static uint32_t word_of(uint32_t k, uint32_t i)
{
    return (k * 2654435761u) ^ (i * 40503u) ^ (k + i);
}

static uint32_t answer_of(uint32_t w, uint32_t k)
{
    return w * 3u + 1u + k;
}

static uint64_t fold(uint64_t sum, const uint32_t *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        sum = (sum ^ v[i]) * 1099511628211ull;
    return sum;
}

static void path_of(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", dir, name);
}

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* The flag at p reaches want, for at most WAIT_S seconds. */
static int wait_flag(CUdeviceptr p, uint32_t want, const char *who)
{
    double end = now_s() + WAIT_S;
    uint32_t flag = 0;

    for (;;) {
        cu(cuMemcpyDtoH(&flag, p, sizeof(flag)), "cuMemcpyDtoH flag");
        if (flag == want)
            return 0;
        if (now_s() > end) {
            fprintf(stderr, "%s: the flag is %u after %d s, expected %u\n", who, flag, WAIT_S, want);
            return 1;
        }
        usleep(1000);
    }
}

static void set_flag(CUdeviceptr p, uint32_t v)
{
    cu(cuMemcpyHtoD(p, &v, sizeof(v)), "cuMemcpyHtoD flag");
}

/* The words at p are want(k, i) for every i: else 1, naming the first. */
static int check_words(uint32_t k, int answered, const char *who)
{
    for (uint32_t i = 0; i < WORDS; i++) {
        uint32_t want = answered ? answer_of(word_of(k, i), k) : word_of(k, i);
        if (words[i] != want) {
            fprintf(stderr, "%s: step %u: word %u is 0x%08x, expected 0x%08x\n", who, k, i, words[i], want);
            return 1;
        }
    }
    return 0;
}

static int wait_file(const char *name)
{
    char path[4096];
    double end = now_s() + WAIT_S;

    path_of(path, sizeof(path), name);
    while (access(path, F_OK) != 0) {
        if (now_s() > end) {
            fprintf(stderr, "%s did not appear in %d s\n", path, WAIT_S);
            return 1;
        }
        usleep(10000);
    }
    return 0;
}

static int write_handle(const CUipcMemHandle *h, const char *name)
{
    char path[4096], tmp[4200];
    FILE *f;

    path_of(path, sizeof(path), name);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    if (!(f = fopen(tmp, "wb")) || fwrite(h, sizeof(*h), 1, f) != 1 || fclose(f) != 0 ||
        rename(tmp, path) != 0) {
        perror(path);
        return 1;
    }
    return 0;
}

static int open_handle(CUdeviceptr *p, const char *name);

static int produce(uint32_t steps, unsigned sleep_ms)
{
    CUdeviceptr own, p, back = 0;
    CUipcMemHandle h;
    uint64_t sum = 14695981039346656037ull;

    cu(cuMemAlloc(&own, OWN), "cuMemAlloc own");
    cu(cuMemsetD8(own, 0x3c, OWN), "cuMemsetD8 own");
    cu(cuMemAlloc(&p, BLOCK), "cuMemAlloc");
    cu(cuMemsetD8(p, 0, BLOCK), "cuMemsetD8");
    cu(cuIpcGetMemHandle(&h, p), "cuIpcGetMemHandle");
    if (write_handle(&h, "handle"))
        return 1;
    printf("exported\n");
    fflush(stdout);
    if (mutual) {
        if (open_handle(&back, "handle-back"))
            return 1;
        printf("opened back at 0x%llx\n", (unsigned long long)back);
        fflush(stdout);
    }
    for (uint32_t k = 0; k < steps; k++) {
        usleep(sleep_ms * 1000u);
        for (uint32_t i = 0; i < WORDS; i++)
            words[i] = word_of(k, i);
        cu(cuMemcpyHtoD(p + DATA_AT, words, sizeof(words)), "cuMemcpyHtoD");
        set_flag(p, 2 * k + 1);
        if (wait_flag(p, 2 * k + 2, "producer"))
            return 1;
        cu(cuMemcpyDtoH(words, (mutual ? back : p) + DATA_AT, sizeof(words)), "cuMemcpyDtoH");
        if (check_words(k, 1, "producer"))
            return 1;
        sum = fold(sum, words, WORDS);
        printf("step %u\n", k);
        fflush(stdout);
    }
    printf("checksum: %016llx\n", (unsigned long long)sum);
    fflush(stdout);
    if (mutual)
        cu(cuIpcCloseMemHandle(back), "cuIpcCloseMemHandle back");
    if (wait_file("closed"))
        return 1;
    cu(cuMemFree(p), "cuMemFree");
    cu(cuMemFree(own), "cuMemFree own");
    return 0;
}

static int open_handle(CUdeviceptr *p, const char *name)
{
    char path[4096];
    CUipcMemHandle h;
    FILE *f;

    if (wait_file(name))
        return 1;
    path_of(path, sizeof(path), name);
    if (!(f = fopen(path, "rb")) || fread(&h, sizeof(h), 1, f) != 1) {
        perror(path);
        return 1;
    }
    fclose(f);
    cu(cuIpcOpenMemHandle(p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), "cuIpcOpenMemHandle");
    return 0;
}

/* The driver still knows p as the base of the block it opened. */
static int check_range(CUdeviceptr p)
{
    CUdeviceptr base = 0;
    size_t size = 0;

    cu(cuMemGetAddressRange(&base, &size, p + DATA_AT), "cuMemGetAddressRange");
    if (base != p || size < BLOCK) {
        fprintf(stderr, "consumer: the block is at 0x%llx (%zu bytes), opened at 0x%llx\n",
                (unsigned long long)base, size, (unsigned long long)p);
        return 1;
    }
    return 0;
}

/* --mutual: the consumer's own block, exported for the producer. */
static int export_back(CUdeviceptr *q)
{
    CUipcMemHandle h;

    cu(cuMemAlloc(q, BLOCK), "cuMemAlloc back");
    cu(cuMemsetD8(*q, 0, BLOCK), "cuMemsetD8 back");
    cu(cuIpcGetMemHandle(&h, *q), "cuIpcGetMemHandle back");
    return write_handle(&h, "handle-back");
}

static int consume(uint32_t steps)
{
    char path[4096];
    CUdeviceptr p, q = 0, own;
    uint64_t sum = 14695981039346656037ull;
    FILE *f;

    cu(cuMemAlloc(&own, OWN), "cuMemAlloc own");   /* memory of its own, released by its suspends */
    cu(cuMemsetD8(own, 0x3c, OWN), "cuMemsetD8 own");
    if (mutual && export_back(&q))
        return 1;
    if (open_handle(&p, "handle"))
        return 1;
    printf("opened at 0x%llx\n", (unsigned long long)p);
    fflush(stdout);
    for (uint32_t k = 0; k < steps; k++) {
        if (wait_flag(p, 2 * k + 1, "consumer") || check_range(p))
            return 1;
        cu(cuMemcpyDtoH(words, p + DATA_AT, sizeof(words)), "cuMemcpyDtoH");
        if (check_words(k, 0, "consumer"))
            return 1;
        sum = fold(sum, words, WORDS);
        for (uint32_t i = 0; i < WORDS; i++)
            words[i] = answer_of(words[i], k);
        cu(cuMemcpyHtoD((mutual ? q : p) + DATA_AT, words, sizeof(words)), "cuMemcpyHtoD");
        set_flag(p, 2 * k + 2);
        printf("step %u addr 0x%llx\n", k, (unsigned long long)p);
        fflush(stdout);
    }
    printf("checksum: %016llx\n", (unsigned long long)sum);
    cu(cuIpcCloseMemHandle(p), "cuIpcCloseMemHandle");
    path_of(path, sizeof(path), "closed");
    if (!(f = fopen(path, "w")) || fclose(f) != 0) {
        perror(path);
        return 1;
    }
    printf("closed\n");
    return 0;
}

int main(int argc, char **argv)
{
    CUcontext ctx;
    uint32_t steps;

    if (argc < 4 || (strcmp(argv[1], "produce") && strcmp(argv[1], "consume")) ||
        (!strcmp(argv[1], "produce") && argc < 5)) {
        fprintf(stderr, "usage: ipc_stream produce DIR STEPS SLEEP_MS [--mutual] | consume DIR STEPS [--mutual]\n");
        return 2;
    }
    dir = argv[2];
    steps = (uint32_t)strtoul(argv[3], NULL, 10);
    mutual = !strcmp(argv[argc - 1], "--mutual");
    cu(cuInit(0), "cuInit");
    cu(cuDevicePrimaryCtxRetain(&ctx, 0), "cuDevicePrimaryCtxRetain");
    cu(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    if (!strcmp(argv[1], "produce"))
        return produce(steps, (unsigned)strtoul(argv[4], NULL, 10));
    return consume(steps);
}
