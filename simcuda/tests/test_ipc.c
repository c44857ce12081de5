/*
 * test_ipc.c - device memory and events shared between processes: POSIX
 * file-descriptor handles passed over a unix socket, legacy IPC memory and
 * event handles, peer access to another process's memory on another device,
 * and the memory's lifetime (it lives while any process holds it, a dead
 * holder's share is given back).
 *
 * The test re-executes itself with a role; parent and child talk over a
 * socketpair on fd 3 (struct msg, a descriptor riding along as SCM_RIGHTS).
 */
#include "procs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <sys/socket.h>

#define MiB (1ull << 20)

struct msg {
    char op;
    uint64_t a, b;
    unsigned char handle[64];
};

static void send_msg(int sock, char op, uint64_t a, uint64_t b, const void *handle, int fd)
{
    struct msg m = { .op = op, .a = a, .b = b };
    char ctl[CMSG_SPACE(sizeof(int))];
    struct iovec iov = { &m, sizeof(m) };
    struct msghdr h = { .msg_iov = &iov, .msg_iovlen = 1 };

    if (handle)
        memcpy(m.handle, handle, sizeof(m.handle));
    if (fd >= 0) {
        struct cmsghdr *c;

        memset(ctl, 0, sizeof(ctl));
        h.msg_control = ctl;
        h.msg_controllen = sizeof(ctl);
        c = CMSG_FIRSTHDR(&h);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    CHECK_EQ(sendmsg(sock, &h, 0), sizeof(m));
}

/* The next message; *fd (if not NULL) the descriptor it carried, or -1. */
static struct msg recv_msg(int sock, int *fd)
{
    struct msg m;
    char ctl[CMSG_SPACE(sizeof(int))];
    struct iovec iov = { &m, sizeof(m) };
    struct msghdr h = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl,
                        .msg_controllen = sizeof(ctl) };
    struct cmsghdr *c;

    if (recvmsg(sock, &h, MSG_CMSG_CLOEXEC) != sizeof(m))
        T_FAIL("peer closed the socket");
    if (fd) {
        *fd = -1;
        c = CMSG_FIRSTHDR(&h);
        if (c && c->cmsg_type == SCM_RIGHTS)
            memcpy(fd, CMSG_DATA(c), sizeof(int));
    }
    return m;
}

static char expect(int sock, char op)
{
    struct msg m = recv_msg(sock, NULL);

    if (m.op != op)
        T_FAIL("got '%c' from the peer, expected '%c'", m.op, op);
    return m.op;
}

/* Run "/proc/self/exe role arg" with its end of a socketpair on fd 3. */
static pid_t spawn_sock(const char *role, const char *arg, int *sock)
{
    int sv[2];
    pid_t pid;

    CHECK_TRUE(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) == 0);
    pid = fork();
    CHECK_TRUE(pid >= 0);
    if (pid == 0) {
        dup2(sv[1], 3);     /* dup2 clears close-on-exec */
        execl("/proc/self/exe", "simcuda-test-child", role, arg, (char *)NULL);
        _exit(127);
    }
    close(sv[1]);
    *sock = sv[0];
    return pid;
}

/* Capacity is charged by whole pages. */
static uint64_t sim_pages(uint64_t n)
{
    uint64_t pg = (uint64_t)sysconf(_SC_PAGESIZE);

    return (n + pg - 1) / pg * pg;
}

/* Device bytes in use on the current context's device, machine-wide. */
static uint64_t used_now(void)
{
    size_t free_, total;

    CHECK(cuMemGetInfo(&free_, &total));
    return total - free_;
}

static void check_u32(CUdeviceptr d, uint64_t n, uint32_t want)
{
    uint32_t *h = malloc(n * 4);

    CHECK(cuMemcpyDtoH(h, d, n * 4));
    for (uint64_t i = 0; i < n; i++)
        if (h[i] != want)
            T_FAIL("word %llu of 0x%llx is 0x%x, expected 0x%x", (unsigned long long)i,
                   (unsigned long long)d, h[i], want);
    free(h);
}

static CUfunction kernel(const char *name)
{
    static CUmodule mod;
    CUfunction f;

    if (!mod)
        CHECK(cuModuleLoad(&mod, t_module_path()));
    CHECK(cuModuleGetFunction(&f, mod, name));
    return f;
}

static void fill_kernel(CUdeviceptr d, uint64_t n, uint32_t v)
{
    void *args[] = { &d, &n, &v };

    CHECK(cuLaunchKernel(kernel("fill_u32"), 1, 1, 1, 1, 1, 1, 0, NULL, args, NULL));
    CHECK(cuCtxSynchronize());
}

static CUmemAllocationProp fd_prop(int dev)
{
    CUmemAllocationProp p;

    memset(&p, 0, sizeof(p));
    p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    p.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    p.location.id = dev;
    p.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    return p;
}

/* Map handle h (size bytes) at an address of our own, read-write for dev. */
static CUdeviceptr map_rw(CUmemGenericAllocationHandle h, size_t size, int dev)
{
    CUdeviceptr va;
    CUmemAccessDesc a = { { CU_MEM_LOCATION_TYPE_DEVICE, dev }, CU_MEM_ACCESS_FLAGS_PROT_READWRITE };

    CHECK(cuMemAddressReserve(&va, size, 0, 0, 0));
    CHECK(cuMemMap(va, size, 0, h, 0));
    CHECK(cuMemSetAccess(va, size, &a, 1));
    return va;
}

/* ---- POSIX file-descriptor handles ------------------------------------------------------ */

#define FD_SIZE (4 * MiB)
#define FD_WORDS (FD_SIZE / 4)

/* Child: import the descriptor, see the parent's bytes, write its own. */
static int role_vmm(int sock)
{
    CUmemGenericAllocationHandle h, again;
    CUmemAllocationProp prop;
    CUdeviceptr va, pad;
    struct msg m;
    int fd;

    t_init();
    /* something mapped first, so our mapping is not at the parent's address by chance */
    CHECK(cuMemAlloc(&pad, 2 * MiB));
    m = recv_msg(sock, &fd);
    CHECK_EQ(m.op, 'F');
    CHECK_TRUE(fd >= 0);
    CHECK(cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    close(fd);              /* the handle does not need the caller's descriptor */
    CHECK(cuMemGetAllocationPropertiesFromHandle(&prop, h));
    CHECK_EQ(prop.location.id, 0);
    CHECK_EQ(prop.requestedHandleTypes, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    va = map_rw(h, FD_SIZE, 0);
    CHECK_TRUE(va != m.a);
    check_u32(va, FD_WORDS, 0x11111111);
    /* retain works on an imported mapping */
    CHECK(cuMemRetainAllocationHandle(&again, (void *)(uintptr_t)(va + 4096)));
    CHECK_EQ(again, h);
    CHECK(cuMemRelease(again));
    /* a kernel into the first half, a memset into the second */
    fill_kernel(va, FD_WORDS / 2, 0x22222222);
    CHECK(cuMemsetD32(va + FD_SIZE / 2, 0x33333333, FD_WORDS / 2));
    CHECK(cuCtxSynchronize());
    send_msg(sock, 'w', 0, 0, NULL, -1);
    expect(sock, 'W');      /* the parent copied 0x44 in, then its kernel wrote 16 words */
    check_u32(va, 16, 0x55555555);
    check_u32(va + 64, FD_WORDS - 16, 0x44444444);
    CHECK(cuMemsetD32(va, 0x44444444, 16));
    /* the handle goes; the mapping keeps the memory */
    CHECK(cuMemRelease(h));
    check_u32(va, FD_WORDS, 0x44444444);
    send_msg(sock, 'r', 0, 0, NULL, -1);
    expect(sock, 'U');
    CHECK(cuMemUnmap(va, FD_SIZE));
    CHECK(cuMemAddressFree(va, FD_SIZE));
    send_msg(sock, 'u', 0, 0, NULL, -1);
    expect(sock, 'X');
    return 0;
}

/* Child: import and map the descriptor, say so, wait to be killed. */
static int role_vmm_hold(int sock)
{
    CUmemGenericAllocationHandle h;
    CUdeviceptr va;
    int fd;

    t_init();
    CHECK_EQ(recv_msg(sock, &fd).op, 'F');
    CHECK(cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    close(fd);
    va = map_rw(h, FD_SIZE, 0);
    check_u32(va, FD_WORDS, 0x66666666);
    send_msg(sock, 'm', 0, 0, NULL, -1);
    for (;;)
        pause();
}

/* An importer killed while it maps the memory gives it back. */
static void test_fd_importer_dies(void)
{
    CUmemAllocationProp prop = fd_prop(0);
    CUmemGenericAllocationHandle h;
    CUdeviceptr va;
    uint64_t base = used_now();
    int fd, sock;
    pid_t pid;

    CHECK(cuMemCreate(&h, FD_SIZE, &prop, 0));
    va = map_rw(h, FD_SIZE, 0);
    CHECK(cuMemsetD32(va, 0x66666666, FD_WORDS));
    CHECK(cuCtxSynchronize());
    CHECK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    pid = spawn_sock("vmm-hold", "-", &sock);
    send_msg(sock, 'F', 0, 0, NULL, fd);
    close(fd);
    expect(sock, 'm');
    CHECK(cuMemUnmap(va, FD_SIZE));
    CHECK(cuMemAddressFree(va, FD_SIZE));
    CHECK(cuMemRelease(h));
    CHECK_TRUE(used_now() >= base + FD_SIZE);   /* the child maps it */
    kill(pid, SIGKILL);
    CHECK_EQ(wait_child(pid), 128 + SIGKILL);
    /* reaped with the child; under libtcgpu.so the exporter's tcgpu frees
     * it when it sees the child's connection end, a moment later */
    for (int i = 0; i < 200 && used_now() != base; i++)
        t_sleep_ms(10);
    CHECK_EQ(used_now(), base);
    close(sock);
    printf("ipc: a killed importer's memory is given back\n");
}

/* A descriptor that outlives every holder still imports: the memory (kept
 * by the descriptor) is charged again. */
static void test_fd_in_flight(void)
{
    CUmemAllocationProp prop = fd_prop(0);
    CUmemGenericAllocationHandle h;
    CUdeviceptr va;
    uint64_t base = used_now();
    int fd;

    CHECK(cuMemCreate(&h, FD_SIZE, &prop, 0));
    va = map_rw(h, FD_SIZE, 0);
    CHECK(cuMemsetD32(va, 0x12345678, FD_WORDS));
    CHECK(cuCtxSynchronize());
    CHECK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    CHECK(cuMemUnmap(va, FD_SIZE));
    CHECK(cuMemAddressFree(va, FD_SIZE));
    CHECK(cuMemRelease(h));
    CHECK_EQ(used_now(), base);
    CHECK(cuMemImportFromShareableHandle(&h, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR));
    close(fd);
    CHECK_EQ(used_now(), base + FD_SIZE);
    va = map_rw(h, FD_SIZE, 0);
    check_u32(va, FD_WORDS, 0x12345678);
    CHECK(cuMemUnmap(va, FD_SIZE));
    CHECK(cuMemAddressFree(va, FD_SIZE));
    CHECK(cuMemRelease(h));
    CHECK_EQ(used_now(), base);
}

static void test_fd_handles(void)
{
    CUmemAllocationProp prop = fd_prop(0), plain = fd_prop(0);
    CUmemGenericAllocationHandle h, h2, bad;
    CUdeviceptr va;
    uint32_t *host = malloc(FD_SIZE);
    uint64_t base = used_now();
    int fd = -1, sock;
    pid_t pid;

    /* the device says what it supports */
    {
        int v = -1;

        CHECK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, 0));
        CHECK_EQ(v, 1);
        CHECK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED, 0));
        CHECK_EQ(v, 1);
        CHECK(cuDeviceGetAttribute(&v, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED, 0));
        CHECK_EQ(v, 0);
    }
    /* error codes first */
    plain.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
    CHECK(cuMemCreate(&h2, 2 * MiB, &plain, 0));
    CHECK_RES(cuMemExportToShareableHandle(&fd, h2, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
              CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuMemExportToShareableHandle(&fd, h2, CU_MEM_HANDLE_TYPE_FABRIC, 0), CUDA_ERROR_NOT_SUPPORTED);
    CHECK(cuMemRelease(h2));
    plain.requestedHandleTypes = CU_MEM_HANDLE_TYPE_FABRIC;
    CHECK_RES(cuMemCreate(&h2, 2 * MiB, &plain, 0), CUDA_ERROR_NOT_SUPPORTED);
    plain.requestedHandleTypes = CU_MEM_HANDLE_TYPE_WIN32;
    CHECK_RES(cuMemCreate(&h2, 2 * MiB, &plain, 0), CUDA_ERROR_NOT_SUPPORTED);

    CHECK(cuMemCreate(&h, FD_SIZE, &prop, 0));
    CHECK_EQ(used_now(), base + FD_SIZE);
    CHECK_RES(cuMemExportToShareableHandle(NULL, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0),
              CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 1),
              CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_WIN32, 0), CUDA_ERROR_NOT_SUPPORTED);
    CHECK(cuMemExportToShareableHandle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
    CHECK_TRUE(fd >= 0);
    /* wrong type, a closed descriptor, a descriptor that is not an allocation */
    CHECK_RES(cuMemImportFromShareableHandle(&bad, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_FABRIC),
              CUDA_ERROR_NOT_SUPPORTED);
    CHECK_RES(cuMemImportFromShareableHandle(&bad, (void *)(uintptr_t)fd, CU_MEM_HANDLE_TYPE_NONE),
              CUDA_ERROR_INVALID_VALUE);
    {
        int other = memfd_create("not-device-memory", MFD_CLOEXEC), gone = dup(fd);

        CHECK_TRUE(other >= 0 && ftruncate(other, 4 * MiB + 4096) == 0);
        CHECK_RES(cuMemImportFromShareableHandle(&bad, (void *)(uintptr_t)other,
                                                 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                  CUDA_ERROR_INVALID_VALUE);
        close(other);
        close(gone);
        CHECK_RES(cuMemImportFromShareableHandle(&bad, (void *)(uintptr_t)gone,
                                                 CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
                  CUDA_ERROR_INVALID_VALUE);
    }

    va = map_rw(h, FD_SIZE, 0);
    CHECK(cuMemsetD32(va, 0x11111111, FD_WORDS));
    CHECK(cuCtxSynchronize());
    {
        bool ipc = true;
        unsigned long long types = 0;

        CHECK(cuPointerGetAttribute(&types, CU_POINTER_ATTRIBUTE_ALLOWED_HANDLE_TYPES, va));
        CHECK_EQ(types, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
        CHECK(cuPointerGetAttribute(&ipc, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, va));
        CHECK_TRUE(!ipc);
    }

    pid = spawn_sock("vmm", "-", &sock);
    send_msg(sock, 'F', va, 0, NULL, fd);
    close(fd);
    expect(sock, 'w');
    check_u32(va, FD_WORDS / 2, 0x22222222);
    check_u32(va + FD_SIZE / 2, FD_WORDS / 2, 0x33333333);
    for (uint64_t i = 0; i < FD_WORDS; i++)
        host[i] = 0x44444444;
    CHECK(cuMemcpyHtoD(va, host, FD_SIZE));
    fill_kernel(va, 16, 0x55555555);
    send_msg(sock, 'W', 0, 0, NULL, -1);
    expect(sock, 'r');
    /* we let go of everything: the child's mapping keeps the memory */
    base = used_now();                  /* the child's own buffer counts too */
    CHECK(cuMemUnmap(va, FD_SIZE));
    CHECK(cuMemAddressFree(va, FD_SIZE));
    CHECK(cuMemRelease(h));
    CHECK_EQ(used_now(), base);
    send_msg(sock, 'U', 0, 0, NULL, -1);
    expect(sock, 'u');
    CHECK_EQ(used_now(), base - FD_SIZE);   /* the last mapping went */
    send_msg(sock, 'X', 0, 0, NULL, -1);
    CHECK_EQ(wait_child(pid), 0);
    close(sock);
    free(host);
    printf("ipc: POSIX file-descriptor handles ok\n");
}

/* ---- legacy IPC memory -------------------------------------------------------------------- */

#define LEG_SIZE (1 * MiB + 256)        /* not a whole number of pages */
#define LEG_WORDS (LEG_SIZE / 4)

static int role_legacy(int sock)
{
    CUipcMemHandle h, forged;
    CUdeviceptr d, d2, pad;
    struct msg m;
    bool ipc = true;
    uint32_t word;

    t_init();
    CHECK(cuMemAlloc(&pad, 3 * MiB));   /* so the opened memory is not at the parent's address by chance */
    m = recv_msg(sock, NULL);
    CHECK_EQ(m.op, 'H');
    memcpy(&h, m.handle, sizeof(h));
    CHECK_RES(cuIpcOpenMemHandle(NULL, h, 0), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuIpcOpenMemHandle(&d, h, 0x100), CUDA_ERROR_INVALID_VALUE);
    /* a forged handle */
    memset(&forged, 0x5a, sizeof(forged));
    CHECK_RES(cuIpcOpenMemHandle(&d, forged, 0), CUDA_ERROR_INVALID_VALUE);
    memcpy(&forged, &h, sizeof(h));
    forged.reserved[12] ^= 1;           /* a wrong token */
    CHECK_RES(cuIpcOpenMemHandle(&d, forged, 0), CUDA_ERROR_INVALID_VALUE);

    CHECK(cuIpcOpenMemHandle(&d, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    CHECK_TRUE(d != m.a);
    check_u32(d, LEG_WORDS, 0xabababab);
    CHECK(cuPointerGetAttribute(&ipc, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, d));
    CHECK_TRUE(!ipc);
    CHECK_RES(cuIpcGetMemHandle(&forged, d), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuMemFree(d), CUDA_ERROR_INVALID_VALUE);      /* opened memory is closed, not freed */
    /* opened again: the same address, counted */
    CHECK(cuIpcOpenMemHandle(&d2, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS));
    CHECK_EQ(d2, d);
    CHECK(cuIpcCloseMemHandle(d));
    check_u32(d, LEG_WORDS, 0xabababab);       /* still open once */
    /* we write: a kernel, a memset, a copy */
    fill_kernel(d, 16, 0x01020304);
    CHECK(cuMemsetD32(d + 64, 0x05060708, 16));
    word = 0x0a0b0c0d;
    CHECK(cuMemcpyHtoD(d + LEG_SIZE - 4, &word, 4));
    CHECK(cuCtxSynchronize());
    send_msg(sock, 'w', 0, 0, NULL, -1);
    expect(sock, 'F');                  /* the parent freed its buffer */
    CHECK(cuMemcpyDtoH(&word, d + 64, 4));
    CHECK_EQ(word, 0x05060708);         /* still ours to use */
    CHECK(cuIpcCloseMemHandle(d));
    CHECK_RES(cuMemcpyDtoH(&word, d, 4), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuIpcCloseMemHandle(d), CUDA_ERROR_INVALID_VALUE);
    /* the memory is gone with its last holder: the handle opens nothing */
    CHECK_RES(cuIpcOpenMemHandle(&d, h, 0), CUDA_ERROR_INVALID_VALUE);
    send_msg(sock, 'c', 0, 0, NULL, -1);
    expect(sock, 'X');
    return 0;
}

/* Child: open the handle, say so, and wait to be killed. */
static int role_open_and_die(int sock)
{
    CUipcMemHandle h;
    CUdeviceptr d;
    struct msg m;

    t_init();
    m = recv_msg(sock, NULL);
    memcpy(&h, m.handle, sizeof(h));
    CHECK(cuIpcOpenMemHandle(&d, h, 0));
    send_msg(sock, 'o', d, 0, NULL, -1);
    for (;;)
        pause();
}

/* Child: allocate, export, wait to be killed. */
static int role_export_and_die(int sock)
{
    CUipcMemHandle h;
    CUdeviceptr d;

    t_init();
    CHECK(cuMemAlloc(&d, LEG_SIZE));
    CHECK(cuMemsetD32(d, 0x77777777, LEG_WORDS));
    CHECK(cuCtxSynchronize());
    CHECK(cuIpcGetMemHandle(&h, d));
    send_msg(sock, 'H', d, 0, &h, -1);
    for (;;)
        pause();
}

/* Whether the legacy object of handle h still has its name in /dev/shm. */
static bool object_named(const CUipcMemHandle *h)
{
    char path[128], hex[33];
    const unsigned char *tok = (const unsigned char *)h->reserved + 8;

    for (int i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", tok[i]);
    snprintf(path, sizeof(path), "/dev/shm/simcuda-ipc-%s", hex);
    return access(path, F_OK) == 0;
}

static void test_legacy(void)
{
    CUipcMemHandle h, h2;
    CUdeviceptr d, vmm, opened;
    CUmemGenericAllocationHandle ph;
    CUmemAllocationProp prop = fd_prop(0);
    uint64_t base = used_now(), charge = sim_pages(LEG_SIZE), before;
    bool ipc = false;
    uint32_t word;
    int sock;
    pid_t pid;

    CHECK(cuMemAlloc(&d, LEG_SIZE));
    CHECK(cuMemsetD32(d, 0xabababab, LEG_WORDS));
    CHECK(cuPointerGetAttribute(&ipc, CU_POINTER_ATTRIBUTE_IS_LEGACY_CUDA_IPC_CAPABLE, d));
    CHECK_TRUE(ipc);
    CHECK_RES(cuIpcGetMemHandle(&h, d + 256), CUDA_ERROR_INVALID_VALUE);    /* not the base */
    prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_NONE;
    CHECK(cuMemCreate(&ph, 2 * MiB, &prop, 0));
    vmm = map_rw(ph, 2 * MiB, 0);
    CHECK_RES(cuIpcGetMemHandle(&h, vmm), CUDA_ERROR_INVALID_VALUE);       /* VMM memory */
    CHECK(cuIpcGetMemHandle(&h, d));
    CHECK(cuIpcGetMemHandle(&h2, d));
    CHECK_TRUE(!memcmp(&h, &h2, sizeof(h)));    /* one buffer, one handle */
    CHECK_EQ(used_now(), base + charge + 2 * MiB);
    check_u32(d, LEG_WORDS, 0xabababab);        /* the export kept the bytes */
    /* the exporter cannot open its own handle */
    CHECK_RES(cuIpcOpenMemHandle(&opened, h, 0), CUDA_ERROR_INVALID_CONTEXT);

    pid = spawn_sock("legacy", "-", &sock);
    send_msg(sock, 'H', d, 0, &h, -1);
    expect(sock, 'w');
    check_u32(d, 16, 0x01020304);
    check_u32(d + 64, 16, 0x05060708);
    CHECK(cuMemcpyDtoH(&word, d + LEG_SIZE - 4, 4));
    CHECK_EQ(word, 0x0a0b0c0d);
    /* our free unmaps our view; the memory stays while the child has it open */
    before = used_now();                /* the child's own buffer counts too */
    CHECK(cuMemFree(d));
    CHECK_EQ(used_now(), before);
    CHECK_TRUE(object_named(&h));
    send_msg(sock, 'F', 0, 0, NULL, -1);
    expect(sock, 'c');
    CHECK_EQ(used_now(), before - charge);
    CHECK_TRUE(!object_named(&h));
    send_msg(sock, 'X', 0, 0, NULL, -1);
    CHECK_EQ(wait_child(pid), 0);
    CHECK_EQ(used_now(), base + 2 * MiB);
    close(sock);
    CHECK(cuMemUnmap(vmm, 2 * MiB));
    CHECK(cuMemAddressFree(vmm, 2 * MiB));
    CHECK(cuMemRelease(ph));

    /* An opener that dies without closing gives the memory back. */
    CHECK(cuMemAlloc(&d, LEG_SIZE));
    CHECK(cuIpcGetMemHandle(&h, d));
    pid = spawn_sock("open-and-die", "-", &sock);
    send_msg(sock, 'H', d, 0, &h, -1);
    expect(sock, 'o');
    CHECK(cuMemFree(d));
    CHECK_EQ(used_now(), base + charge);
    kill(pid, SIGKILL);
    CHECK_EQ(wait_child(pid), 128 + SIGKILL);
    CHECK_EQ(used_now(), base);         /* cuMemGetInfo reaps the dead */
    CHECK_TRUE(!object_named(&h));
    close(sock);

    /* An exporter that dies leaves the memory to its opener until it closes. */
    pid = spawn_sock("export-and-die", "-", &sock);
    {
        struct msg m = recv_msg(sock, NULL);

        CHECK_EQ(m.op, 'H');
        memcpy(&h, m.handle, sizeof(h));
    }
    CHECK(cuIpcOpenMemHandle(&opened, h, 0));
    kill(pid, SIGKILL);
    CHECK_EQ(wait_child(pid), 128 + SIGKILL);
    CHECK_EQ(used_now(), base + charge);
    check_u32(opened, LEG_WORDS, 0x77777777);
    CHECK(cuIpcCloseMemHandle(opened));
    CHECK_EQ(used_now(), base);
    close(sock);
    printf("ipc: legacy memory handles ok\n");
}

/* ---- peer access to another process's memory --------------------------------------------- */

/* Child: open memory of device 1 from a context of device 0, and run a
 * kernel on it. mode "none": no peer access (the kernel faults), "lazy":
 * CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS, "peer": cuCtxEnablePeerAccess. */
static int role_peer(int sock, const char *mode)
{
    CUcontext c0, c1;
    CUipcMemHandle h;
    CUdeviceptr d;
    CUstream s;
    struct msg m;
    uint64_t n = 4;
    void *args[] = { &d, &n };
    CUresult r;

    c0 = t_init();
    m = recv_msg(sock, NULL);
    memcpy(&h, m.handle, sizeof(h));
    if (!strcmp(mode, "peer")) {
        CHECK(cuDevicePrimaryCtxRetain(&c1, 1));
        CHECK(cuCtxEnablePeerAccess(c1, 0));
    }
    CHECK(cuIpcOpenMemHandle(&d, h, !strcmp(mode, "lazy") ? CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS : 0));
    {
        int ord = -1;

        CHECK(cuPointerGetAttribute(&ord, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, d));
        CHECK_EQ(ord, 1);
    }
    CHECK(cuStreamCreate(&s, 0));
    CHECK(cuLaunchKernel(kernel("add_one"), 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
    r = cuStreamSynchronize(s);
    (void)c0;
    send_msg(sock, 'k', (uint64_t)r, 0, NULL, -1);
    expect(sock, 'X');
    return 0;
}

static void test_peer(CUcontext ctx0)
{
    CUcontext c1, prev;
    CUipcMemHandle h;
    CUdeviceptr d;
    uint32_t v[4] = { 0 };
    static const char *modes[] = { "none", "lazy", "peer" };
    static const CUresult want[] = { CUDA_ERROR_ILLEGAL_ADDRESS, CUDA_SUCCESS, CUDA_SUCCESS };

    CHECK(cuDevicePrimaryCtxRetain(&c1, 1));
    CHECK(cuCtxPushCurrent(c1));
    CHECK(cuMemAlloc(&d, 4096));
    CHECK(cuMemsetD32(d, 0, 4));
    CHECK(cuIpcGetMemHandle(&h, d));
    for (int i = 0; i < 3; i++) {
        int sock;
        pid_t pid = spawn_sock("peer", modes[i], &sock);
        struct msg m;

        send_msg(sock, 'H', d, 0, &h, -1);
        m = recv_msg(sock, NULL);
        CHECK_EQ(m.op, 'k');
        if ((CUresult)m.a != want[i])
            T_FAIL("peer mode %s: the kernel gave %s, expected %s", modes[i], t_err((CUresult)m.a),
                   t_err(want[i]));
        send_msg(sock, 'X', 0, 0, NULL, -1);
        CHECK_EQ(wait_child(pid), 0);
        close(sock);
    }
    CHECK(cuMemcpyDtoH(v, d, sizeof(v)));
    CHECK_EQ(v[0], 2);                  /* the two kernels that could ran */
    CHECK(cuMemFree(d));
    CHECK(cuCtxPopCurrent(&prev));
    CHECK_TRUE(prev == c1);
    CHECK(cuCtxSetCurrent(ctx0));
    printf("ipc: peer access across processes ok\n");
}

/* VMM memory of device 1 mapped with access for device 0 only, as NCCL maps
 * its peers' buffers: device 0's kernels and copies use it; device 1 has
 * no access through this mapping. */
static void test_vmm_other_device(CUcontext ctx0)
{
    CUmemAllocationProp prop = fd_prop(1);
    CUmemGenericAllocationHandle h;
    CUmemLocation d1 = { CU_MEM_LOCATION_TYPE_DEVICE, 1 };
    unsigned long long flags = 99;
    CUdeviceptr va;

    CHECK(cuCtxSetCurrent(ctx0));
    CHECK(cuMemCreate(&h, 2 * MiB, &prop, 0));
    va = map_rw(h, 2 * MiB, 0);                 /* granted to device 0 only */
    CHECK(cuMemGetAccess(&flags, &d1, va));
    CHECK_EQ(flags, CU_MEM_ACCESS_FLAGS_PROT_NONE);
    fill_kernel(va, 2 * MiB / 4, 0x0d0d0d0d);   /* a kernel of device 0 */
    check_u32(va, 2 * MiB / 4, 0x0d0d0d0d);     /* a copy */
    CHECK(cuMemUnmap(va, 2 * MiB));
    CHECK(cuMemAddressFree(va, 2 * MiB));
    CHECK(cuMemRelease(h));
    printf("ipc: another device's VMM memory granted to ours only ok\n");
}

/* ---- IPC events --------------------------------------------------------------------------- */

static int role_event(int sock)
{
    CUipcEventHandle eh, forged;
    CUipcMemHandle mh;
    CUevent e, bad;
    CUdeviceptr log;
    CUstream s;
    struct msg m;
    uint32_t v[2];

    t_init();
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    m = recv_msg(sock, NULL);
    CHECK_EQ(m.op, 'M');
    memcpy(&mh, m.handle, sizeof(mh));
    CHECK(cuIpcOpenMemHandle(&log, mh, 0));
    m = recv_msg(sock, NULL);
    CHECK_EQ(m.op, 'E');
    memcpy(&eh, m.handle, sizeof(eh));
    memset(&forged, 0x33, sizeof(forged));
    CHECK_RES(cuIpcOpenEventHandle(&bad, forged), CUDA_ERROR_INVALID_VALUE);
    CHECK_RES(cuIpcOpenEventHandle(NULL, eh), CUDA_ERROR_INVALID_VALUE);
    CHECK(cuIpcOpenEventHandle(&e, eh));
    CHECK_RES(cuEventElapsedTime(&(float){ 0 }, e, e), CUDA_ERROR_INVALID_HANDLE);
    /* the parent recorded after a slow kernel: not done yet */
    expect(sock, 'R');
    CHECK_RES(cuEventQuery(e), CUDA_ERROR_NOT_READY);
    /* our stream waits for it, then copies what the kernel wrote */
    CHECK(cuStreamWaitEvent(s, e, 0));
    CHECK(cuMemcpyDtoHAsync(v, log, sizeof(v), s));
    CHECK(cuStreamSynchronize(s));
    CHECK_EQ(v[0], 1);
    CHECK_EQ(v[1], 7);
    CHECK(cuEventQuery(e));
    /* the second record: cuEventSynchronize waits for it */
    send_msg(sock, 'q', 0, 0, NULL, -1);
    expect(sock, 'R');
    CHECK(cuEventSynchronize(e));
    CHECK(cuMemcpyDtoH(v, log, sizeof(v)));
    CHECK_EQ(v[0], 2);
    /* we record it too; the parent waits for our record */
    CHECK(cuMemsetD32Async(log + 128, 0x99, 1, s));
    CHECK(cuEventRecord(e, s));
    send_msg(sock, 'r', 0, 0, NULL, -1);
    expect(sock, 'X');
    CHECK(cuEventDestroy(e));
    CHECK(cuIpcCloseMemHandle(log));
    return 0;
}

static void test_events(void)
{
    CUevent e, plain;
    CUipcEventHandle eh;
    CUipcMemHandle mh;
    CUdeviceptr log;
    CUstream s;
    uint32_t id = 7, ms = 1500, v;
    void *args[] = { &log, &id, &ms };
    int sock;
    pid_t pid;

    CHECK(cuEventCreate(&plain, CU_EVENT_DISABLE_TIMING));
    CHECK_RES(cuIpcGetEventHandle(&eh, plain), CUDA_ERROR_INVALID_VALUE);  /* not interprocess */
    CHECK(cuEventDestroy(plain));
    CHECK_RES(cuEventCreate(&e, CU_EVENT_INTERPROCESS), CUDA_ERROR_INVALID_VALUE);   /* timing on */
    CHECK(cuEventCreate(&e, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING));
    CHECK(cuIpcGetEventHandle(&eh, e));
    CHECK(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
    CHECK(cuMemAlloc(&log, 64 * 4));
    CHECK(cuMemsetD32(log, 0, 64));
    CHECK(cuCtxSynchronize());
    CHECK(cuIpcGetMemHandle(&mh, log));

    pid = spawn_sock("event", "-", &sock);
    send_msg(sock, 'M', 0, 0, &mh, -1);
    send_msg(sock, 'E', 0, 0, &eh, -1);
    CHECK(cuLaunchKernel(kernel("mark"), 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
    CHECK(cuEventRecord(e, s));
    CHECK_RES(cuEventQuery(e), CUDA_ERROR_NOT_READY);
    send_msg(sock, 'R', 0, 0, NULL, -1);
    expect(sock, 'q');
    CHECK(cuLaunchKernel(kernel("mark"), 1, 1, 1, 1, 1, 1, 0, s, args, NULL));
    CHECK(cuEventRecord(e, s));
    send_msg(sock, 'R', 0, 0, NULL, -1);
    expect(sock, 'r');
    /* the child's record: our stream waits for it */
    CHECK(cuStreamWaitEvent(s, e, 0));
    CHECK(cuMemcpyDtoHAsync(&v, log + 128, 4, s));
    CHECK(cuStreamSynchronize(s));
    CHECK_EQ(v, 0x99);
    send_msg(sock, 'X', 0, 0, NULL, -1);
    CHECK_EQ(wait_child(pid), 0);
    close(sock);
    CHECK(cuEventDestroy(e));
    CHECK(cuStreamDestroy(s));
    CHECK(cuMemFree(log));
    printf("ipc: event handles ok\n");
}

int main(int argc, char **argv)
{
    CUcontext ctx;

    if (argc == 3) {
        int sock = 3;

        if (!strcmp(argv[1], "vmm"))
            return role_vmm(sock);
        if (!strcmp(argv[1], "vmm-hold"))
            return role_vmm_hold(sock);
        if (!strcmp(argv[1], "legacy"))
            return role_legacy(sock);
        if (!strcmp(argv[1], "open-and-die"))
            return role_open_and_die(sock);
        if (!strcmp(argv[1], "export-and-die"))
            return role_export_and_die(sock);
        if (!strcmp(argv[1], "peer"))
            return role_peer(sock, argv[2]);
        if (!strcmp(argv[1], "event"))
            return role_event(sock);
        return 2;
    }
    sim_test_setup("ipc");
    setenv("SIMCUDA_DEVICES", "2", 1);      /* read by whoever creates the machine: us */
    ctx = t_init();
    test_fd_handles();
    test_fd_importer_dies();
    if (argc == 2 && !strcmp(argv[1], "--fd-only")) {
        /* under libtcgpu.so (tests/sim), where two things differ, as
         * docs/interposition.md says: a descriptor is imported only while
         * its exporter holds the allocation (not in flight after every
         * holder let go), and the legacy part counts simcuda's own charges,
         * which tcgpu's 2 MiB segments change */
        printf("ipc: ok (POSIX file-descriptor handles, held by the exporter)\n");
        return 0;
    }
    test_fd_in_flight();
    test_vmm_other_device(ctx);
    test_legacy();
    test_peer(ctx);
    test_events();
    printf("ipc: ok\n");
    return 0;
}
