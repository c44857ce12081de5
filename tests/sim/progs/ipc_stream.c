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
 *
 * With --vmm (after STEPS [SLEEP_MS], on both) the blocks are shared as
 * NCCL's cuMem path shares its buffers: cuMemCreate with POSIX descriptor
 * handles, mapped into a reservation of its own, the descriptor
 * (cuMemExportToShareableHandle) passed over a Unix socket (SCM_RIGHTS) by
 * a thread of the exporter that answers every connection to DIR/NAME.sock;
 * the opener imports it (cuMemImportFromShareableHandle), maps it into a
 * reservation of its own, grants access and releases the handle (the
 * mapping keeps the memory), and closes by unmapping.
 *
 * With --vmm --orphan on both, the producer lets its block go (unmaps it;
 * its handle went after the export) right after its last step and prints
 * "dropped"; the consumer, after its last step, prints "lingering", waits
 * for DIR/go, and checks that the block still holds its last answers
 * before it closes: the memory lives while the consumer maps it, as the
 * driver keeps it, across whatever happened meanwhile.
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
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
    VMM_BLOCK = 2 << 20,        /* BLOCK rounded up to the VMM granularity */
};

static const char *dir;
static int mutual, vmm, orphan;
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

/* --- --vmm: shareable handles over a Unix socket ------------------------- */

static int sock_path(struct sockaddr_un *a, const char *name)
{
    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    if ((size_t)snprintf(a->sun_path, sizeof(a->sun_path), "%s/%s.sock", dir, name) >= sizeof(a->sun_path)) {
        fprintf(stderr, "%s/%s.sock: path too long\n", dir, name);
        return 1;
    }
    return 0;
}

/* Gives the descriptor to every process that connects (a thread of ours). */
static void *serve_fd(void *arg)
{
    int *v = arg, lsock = v[0], fd = v[1];

    for (;;) {
        char cbuf[CMSG_SPACE(sizeof(int))] = { 0 }, byte = 'f';
        struct iovec iov = { &byte, 1 };
        struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                              .msg_controllen = sizeof(cbuf) };
        struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
        int conn = accept(lsock, NULL, NULL);

        if (conn < 0)
            continue;
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof(int));
        if (sendmsg(conn, &msg, 0) != 1)
            perror("sendmsg");
        close(conn);
    }
    return NULL;
}

static const CUmemAccessDesc *rw_access(void)
{
    static CUmemAccessDesc a = { .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 },
                                 .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    return &a;
}

/* A block of ours, exported: its descriptor served on DIR/name.sock. */
static int vmm_export(CUdeviceptr *p, const char *name)
{
    CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                 .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                 .location = { CU_MEM_LOCATION_TYPE_DEVICE, 0 } };
    CUmemGenericAllocationHandle h;
    struct sockaddr_un a;
    static int v[2][2];
    static int nv;
    pthread_t t;
    int fd = -1, lsock;

    cu(cuMemCreate(&h, VMM_BLOCK, &prop, 0), "cuMemCreate");
    cu(cuMemAddressReserve(p, VMM_BLOCK, 0, 0, 0), "cuMemAddressReserve");
    cu(cuMemMap(*p, VMM_BLOCK, 0, h, 0), "cuMemMap");
    cu(cuMemSetAccess(*p, VMM_BLOCK, rw_access(), 1), "cuMemSetAccess");
    cu(cuMemsetD8(*p, 0, BLOCK), "cuMemsetD8");
    cu(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
       "cuMemExportToShareableHandle");
    cu(cuMemRelease(h), "cuMemRelease");    /* the mapping keeps it */
    if (sock_path(&a, name) || (lsock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
        bind(lsock, (struct sockaddr *)&a, sizeof(a)) != 0 || listen(lsock, 8) != 0 || nv >= 2) {
        perror(a.sun_path);
        return 1;
    }
    v[nv][0] = lsock;
    v[nv][1] = fd;
    if (pthread_create(&t, NULL, serve_fd, v[nv++]) != 0) {
        fprintf(stderr, "no thread to serve %s\n", a.sun_path);
        return 1;
    }
    pthread_detach(t);
    return 0;
}

/* The block exported on DIR/name.sock, mapped here. */
static int vmm_open(CUdeviceptr *p, const char *name)
{
    char cbuf[CMSG_SPACE(sizeof(int))], byte;
    struct iovec iov = { &byte, 1 };
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                          .msg_controllen = sizeof(cbuf) };
    CUmemGenericAllocationHandle h;
    struct sockaddr_un a;
    struct cmsghdr *c;
    double end = now_s() + WAIT_S;
    int sock, fd;

    if (sock_path(&a, name))
        return 1;
    for (;;) {
        if ((sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0) {
            perror("socket");
            return 1;
        }
        if (connect(sock, (struct sockaddr *)&a, sizeof(a)) == 0)
            break;
        close(sock);
        if (now_s() > end) {
            fprintf(stderr, "%s did not answer in %d s\n", a.sun_path, WAIT_S);
            return 1;
        }
        usleep(10000);
    }
    if (recvmsg(sock, &msg, 0) != 1 || !(c = CMSG_FIRSTHDR(&msg)) || c->cmsg_type != SCM_RIGHTS) {
        fprintf(stderr, "%s sent no descriptor\n", a.sun_path);
        return 1;
    }
    memcpy(&fd, CMSG_DATA(c), sizeof(int));
    close(sock);
    cu(cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
       "cuMemImportFromShareableHandle");
    close(fd);
    cu(cuMemAddressReserve(p, VMM_BLOCK, 0, 0, 0), "cuMemAddressReserve");
    cu(cuMemMap(*p, VMM_BLOCK, 0, h, 0), "cuMemMap");
    cu(cuMemSetAccess(*p, VMM_BLOCK, rw_access(), 1), "cuMemSetAccess");
    cu(cuMemRelease(h), "cuMemRelease");    /* the mapping keeps it */
    return 0;
}

static void vmm_unmap(CUdeviceptr p)
{
    cu(cuMemUnmap(p, VMM_BLOCK), "cuMemUnmap");
    cu(cuMemAddressFree(p, VMM_BLOCK), "cuMemAddressFree");
}

/* A block shared with the other process, as the mode says. */
static int share_new(CUdeviceptr *p, const char *name)
{
    CUipcMemHandle h;

    if (vmm)
        return vmm_export(p, name);
    cu(cuMemAlloc(p, BLOCK), "cuMemAlloc");
    cu(cuMemsetD8(*p, 0, BLOCK), "cuMemsetD8");
    cu(cuIpcGetMemHandle(&h, *p), "cuIpcGetMemHandle");
    return write_handle(&h, name);
}

static void share_close(CUdeviceptr p)
{
    if (vmm)
        vmm_unmap(p);
    else
        cu(cuIpcCloseMemHandle(p), "cuIpcCloseMemHandle");
}

static void share_free(CUdeviceptr p)
{
    if (vmm)
        vmm_unmap(p);
    else
        cu(cuMemFree(p), "cuMemFree");
}

static int produce(uint32_t steps, unsigned sleep_ms)
{
    CUdeviceptr own, p, back = 0;
    uint64_t sum = 14695981039346656037ull;

    cu(cuMemAlloc(&own, OWN), "cuMemAlloc own");
    cu(cuMemsetD8(own, 0x3c, OWN), "cuMemsetD8 own");
    if (share_new(&p, "handle"))
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
        share_close(back);
    if (orphan) {
        share_free(p);
        printf("dropped\n");
        fflush(stdout);
    }
    if (wait_file("closed"))
        return 1;
    if (!orphan)
        share_free(p);
    cu(cuMemFree(own), "cuMemFree own");
    return 0;
}

static int open_handle(CUdeviceptr *p, const char *name)
{
    char path[4096];
    CUipcMemHandle h;
    FILE *f;

    if (vmm)
        return vmm_open(p, name);
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


/* --orphan: after the producer let its block go, the answers of the last
 * step are still in it (words holds them). */
static int linger(CUdeviceptr p, uint32_t steps)
{
    static uint32_t seen[WORDS];

    printf("lingering\n");
    fflush(stdout);
    if (wait_file("go"))
        return 1;
    cu(cuMemcpyDtoH(seen, p + DATA_AT, sizeof(seen)), "cuMemcpyDtoH lingering");
    if (memcmp(seen, words, sizeof(seen))) {
        fprintf(stderr, "consumer: after step %u the block no longer holds its answers\n", steps - 1);
        return 1;
    }
    printf("still there\n");
    fflush(stdout);
    return 0;
}

static int consume(uint32_t steps)
{
    char path[4096];
    CUdeviceptr p, q = 0, own;
    uint64_t sum = 14695981039346656037ull;
    FILE *f;

    cu(cuMemAlloc(&own, OWN), "cuMemAlloc own");   /* memory of its own, released by its suspends */
    cu(cuMemsetD8(own, 0x3c, OWN), "cuMemsetD8 own");
    if (mutual && share_new(&q, "handle-back"))
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
    if (orphan && linger(p, steps))
        return 1;
    share_close(p);
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
        fprintf(stderr, "usage: ipc_stream produce DIR STEPS SLEEP_MS [--vmm [--orphan]] [--mutual] | "
                        "consume DIR STEPS [--vmm [--orphan]] [--mutual]\n");
        return 2;
    }
    dir = argv[2];
    steps = (uint32_t)strtoul(argv[3], NULL, 10);
    for (int i = 4; i < argc; i++) {
        mutual |= !strcmp(argv[i], "--mutual");
        vmm |= !strcmp(argv[i], "--vmm");
        orphan |= !strcmp(argv[i], "--orphan");
    }
    if (orphan && (!vmm || mutual)) {
        fprintf(stderr, "--orphan goes with --vmm, without --mutual\n");
        return 2;
    }
    cu(cuInit(0), "cuInit");
    cu(cuDevicePrimaryCtxRetain(&ctx, 0), "cuDevicePrimaryCtxRetain");
    cu(cuCtxSetCurrent(ctx), "cuCtxSetCurrent");
    if (!strcmp(argv[1], "produce"))
        return produce(steps, (unsigned)strtoul(argv[4], NULL, 10));
    return consume(steps);
}
