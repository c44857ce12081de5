/*
 * ipc_pair - a producer and a consumer of device memory shared with legacy
 * CUDA IPC, as PyTorch multiprocessing shares CUDA tensors (ipc_memory.sh).
 * Each step waits for a file DIR/go/NAME that the test creates, and says
 * what it did on stdout.
 *
 *   ipc_pair produce DIR
 *       allocates a small block and then N bytes (768 KiB: the exported block is
 *       inside a shared 2 MiB segment, not at its start), fills them with a pattern, writes the
 *       64-byte handle of the N bytes to DIR/handle and prints "exported".
 *       go/check-writes: the first 4 KiB hold the consumer's 0x5c
 *       ("writes seen"); go/check-intact: the same, and the rest still the
 *       pattern ("intact"); go/quit: ends.
 *   ipc_pair consume DIR [--no-close]
 *       a handle whose token was changed is refused ("forged refused"),
 *       opens DIR/handle, reads the pattern ("read ok"), opens it again
 *       (same address: "double open ok"), closes once, writes 0x5c over
 *       the first 4 KiB ("wrote"). go/close: checks the bytes again (the
 *       pattern, 0x5c over the first 4 KiB) and closes it ("closed"), unless
 *       --no-close; then waits for go/quit-consumer.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cuda.h>

#include "check.h"

enum { N = 768 << 10, SMALL = 4096, WRITTEN = 4096 };

static const char *dir;

static void wait_go(const char *name)
{
    char path[4096];

    snprintf(path, sizeof(path), "%s/go/%s", dir, name);
    while (access(path, F_OK) != 0)
        usleep(10000);
}

static unsigned char pattern(size_t i)
{
    return (unsigned char)(i * 7 + (i >> 12));
}

static void say(const char *what)
{
    printf("%s\n", what);
    fflush(stdout);
}

/* The pattern, with 0x5c over the first WRITTEN bytes when `written` (> 0),
 * either there (< 0). */
static int check_bytes(CUdeviceptr p, int written, const char *what)
{
    static unsigned char host[N];
    int bad = 0;

    cu(cuMemcpyDtoH(host, p, N), "cuMemcpyDtoH");
    for (size_t i = 0; i < N && !bad; i++) {
        unsigned char want = written > 0 && i < WRITTEN ? 0x5c : pattern(i);
        if (host[i] != want && !(written < 0 && i < WRITTEN && host[i] == 0x5c)) {
            fprintf(stderr, "%s: byte %zu is 0x%02x, expected 0x%02x\n", what, i, host[i], want);
            bad = 1;
        }
    }
    return bad;
}

static int produce(void)
{
    static unsigned char host[N];
    char path[4096], tmp[4200];
    CUipcMemHandle h;
    CUdeviceptr small, p;
    bool capable = false;
    FILE *f;

    cu(cuMemAlloc(&small, SMALL), "cuMemAlloc small");
    cu(cuMemAlloc(&p, N), "cuMemAlloc");
    for (size_t i = 0; i < N; i++)
        host[i] = pattern(i);
    cu(cuMemcpyHtoD(p, host, N), "cuMemcpyHtoD");
    if (cuIpcGetMemHandle(&h, p + 256) == CUDA_SUCCESS) {
        fprintf(stderr, "cuIpcGetMemHandle inside an allocation succeeded\n");
        return 1;
    }
    cu(cuPointerGetAttribute(&capable, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, p),
       "cuPointerGetAttribute");
    if (!capable) {
        fprintf(stderr, "IS_LEGACY_CUDA_IPC_CAPABLE is false for cuMemAlloc memory\n");
        return 1;
    }
    cu(cuIpcGetMemHandle(&h, p), "cuIpcGetMemHandle");
    snprintf(path, sizeof(path), "%s/handle", dir);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    if (!(f = fopen(tmp, "wb")) || fwrite(&h, sizeof(h), 1, f) != 1 || fclose(f) != 0 ||
        rename(tmp, path) != 0) {
        perror(path);
        return 1;
    }
    say("exported");
    wait_go("check-writes");
    if (check_bytes(p, 1, "producer"))
        return 1;
    say("writes seen");
    wait_go("check-intact");
    if (check_bytes(p, 1, "producer after resume"))
        return 1;
    say("intact");
    wait_go("quit");
    cu(cuMemFree(p), "cuMemFree");
    cu(cuMemFree(small), "cuMemFree small");
    return 0;
}

static int consume(int no_close)
{
    char path[4096];
    CUipcMemHandle h, forged;
    CUdeviceptr p, p2, base = 0;
    size_t size = 0;
    CUresult rc;
    FILE *f;

    snprintf(path, sizeof(path), "%s/handle", dir);
    if (!(f = fopen(path, "rb")) || fread(&h, sizeof(h), 1, f) != 1) {
        perror(path);
        return 1;
    }
    fclose(f);
    forged = h;
    forged.reserved[40] ^= 1;       /* a byte of tcgpu's token */
    rc = cuIpcOpenMemHandle(&p, forged, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
    if (rc != CUDA_ERROR_INVALID_VALUE) {
        fprintf(stderr, "a forged handle: %d, expected CUDA_ERROR_INVALID_VALUE\n", (int)rc);
        return 1;
    }
    say("forged refused");
    cu(cuIpcOpenMemHandle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), "cuIpcOpenMemHandle");
    cu(cuMemGetAddressRange(&base, &size, p + 100), "cuMemGetAddressRange");
    if (base != p || size != N) {
        fprintf(stderr, "cuMemGetAddressRange: base 0x%llx size %zu, expected 0x%llx %d\n",
                (unsigned long long)base, size, (unsigned long long)p, N);
        return 1;
    }
    if (check_bytes(p, -1, "consumer"))     /* an earlier consumer may have written */
        return 1;
    say("read ok");
    cu(cuIpcOpenMemHandle(&p2, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS), "cuIpcOpenMemHandle again");
    if (p2 != p) {
        fprintf(stderr, "the second open gave 0x%llx, the first 0x%llx\n", (unsigned long long)p2,
                (unsigned long long)p);
        return 1;
    }
    cu(cuIpcCloseMemHandle(p2), "cuIpcCloseMemHandle (first of two)");
    say("double open ok");
    cu(cuMemsetD8(p, 0x5c, WRITTEN), "cuMemsetD8");
    cu(cuCtxSynchronize(), "cuCtxSynchronize");
    say("wrote");
    if (!no_close) {
        wait_go("close");
        if (check_bytes(p, 1, "consumer before the close"))   /* suspends between: the same bytes */
            return 1;
        cu(cuIpcCloseMemHandle(p), "cuIpcCloseMemHandle");
        if (cuIpcCloseMemHandle(p) == CUDA_SUCCESS) {
            fprintf(stderr, "a third close succeeded\n");
            return 1;
        }
        say("closed");
    }
    wait_go("quit-consumer");
    return 0;
}

int main(int argc, char **argv)
{
    CUcontext ctx;

    if (argc < 3 || (strcmp(argv[1], "produce") && strcmp(argv[1], "consume"))) {
        fprintf(stderr, "usage: ipc_pair produce|consume DIR [--no-close]\n");
        return 2;
    }
    dir = argv[2];
    cu(cuInit(0), "cuInit");
    cu(cuDevicePrimaryCtxRetain(&ctx, 0), "cuDevicePrimaryCtxRetain");
    cu(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    if (!strcmp(argv[1], "produce"))
        return produce();
    return consume(argc > 3 && !strcmp(argv[3], "--no-close"));
}
