/*
 * p2p_cumem.c - the P2P transport's slots as VMM memory shared by
 * descriptor (NCCL_SHM_DISABLE=1 with NCCL_CUMEM_ENABLE=1), as NCCL's cuMem
 * path shares its buffers between the GPUs of a node: each rank creates its
 * slots with cuMemCreate asking for POSIX descriptors, maps them, exports
 * them (cuMemExportToShareableHandle) and hands the descriptor to each peer
 * that asks, over a Unix socket of its own (SCM_RIGHTS, the asker's uid
 * checked), as NCCL's proxy does; each peer imports it
 * (cuMemImportFromShareableHandle), maps it into a reservation of its own,
 * grants its device access and releases the handle (the mapping keeps the
 * memory).
 *
 * The socket is in the abstract namespace, named from the communicator's
 * token and the rank; a thread serves it from the slots' export until every
 * rank has opened its peers' (a barrier), then it is closed.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "simnccl.h"

#define SERVE_POLL_MS 50
#define ASK_TIMEOUT_MS 30000

/* Rank rank's socket of comm's: abstract, so nothing is left on disk. */
static socklen_t sock_name(const struct ncclComm *comm, int rank, struct sockaddr_un *a)
{
    int n;

    memset(a, 0, sizeof(*a));
    a->sun_family = AF_UNIX;
    n = snprintf(a->sun_path + 1, sizeof(a->sun_path) - 1, "simnccl-p2p-%016llx-%d",
                 (unsigned long long)comm->id.token, rank);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)n);
}

static int send_fd(int sock, int fd)
{
    char cbuf[CMSG_SPACE(sizeof(int))] = { 0 }, byte = 'f';
    struct iovec iov = { &byte, 1 };
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                          .msg_controllen = sizeof(cbuf) };
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);

    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &fd, sizeof(int));
    return sendmsg(sock, &msg, MSG_NOSIGNAL) == 1 ? 0 : -errno;
}

/* Whether the process at the other end of sock is of our uid. */
static bool same_uid(int sock)
{
    struct ucred cred;
    socklen_t len = sizeof(cred);

    return getsockopt(sock, SOL_SOCKET, SO_PEERCRED, &cred, &len) == 0 && cred.uid == getuid();
}

/* Serves the descriptor until snccl_cumem_slots_serve_end says stop. */
static void *serve(void *arg)
{
    struct ncclComm *comm = arg;

    while (__atomic_load_n(&comm->p2p_serving, __ATOMIC_ACQUIRE)) {
        struct pollfd p = { .fd = comm->p2p_listen, .events = POLLIN };
        int conn, r = poll(&p, 1, SERVE_POLL_MS);

        if (r < 0 && errno != EINTR)
            break;
        if (r <= 0 || !(p.revents & POLLIN))
            continue;
        if ((conn = accept4(comm->p2p_listen, NULL, NULL, SOCK_CLOEXEC)) < 0)
            continue;
        if (same_uid(conn))
            send_fd(conn, comm->p2p_fd);
        close(conn);
    }
    return NULL;
}

ncclResult_t snccl_cumem_slots_alloc(struct ncclComm *comm, size_t bytes)
{
    CUmemAllocationProp prop = { .type = CU_MEM_ALLOCATION_TYPE_PINNED,
                                 .requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                 .location = { CU_MEM_LOCATION_TYPE_DEVICE, comm->cudev } };
    CUmemAccessDesc access = { .location = prop.location, .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    struct sockaddr_un a;
    socklen_t alen;
    size_t gran = 0;
    CUresult r;

    if ((r = cuMemGetAllocationGranularity(&gran, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM)))
        return snccl_cu(r, "cuMemGetAllocationGranularity for the P2P slots");
    comm->p2p_bytes = (bytes + gran - 1) / gran * gran;
    if ((r = cuMemCreate(&comm->p2p_handle, comm->p2p_bytes, &prop, 0))) {
        comm->p2p_handle = 0;
        return snccl_cu(r, "cuMemCreate of the P2P slots");
    }
    if ((r = cuMemAddressReserve(&comm->p2p_mine, comm->p2p_bytes, 0, 0, 0))) {
        comm->p2p_mine = 0;
        return snccl_cu(r, "cuMemAddressReserve for the P2P slots");
    }
    if ((r = cuMemMap(comm->p2p_mine, comm->p2p_bytes, 0, comm->p2p_handle, 0)) ||
        (r = cuMemSetAccess(comm->p2p_mine, comm->p2p_bytes, &access, 1)))
        return snccl_cu(r, "mapping the P2P slots");
    if ((r = cuMemExportToShareableHandle(&comm->p2p_fd, comm->p2p_handle,
                                          CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0))) {
        comm->p2p_fd = -1;
        return snccl_cu(r, "cuMemExportToShareableHandle of the P2P slots");
    }
    alen = sock_name(comm, comm->rank, &a);
    if ((comm->p2p_listen = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0 ||
        bind(comm->p2p_listen, (struct sockaddr *)&a, alen) != 0 ||
        listen(comm->p2p_listen, SNCCL_MAX_RANKS) != 0)
        return snccl_fail(ncclSystemError, "the P2P slots' socket: %s", strerror(errno));
    comm->p2p_serving = true;
    if (pthread_create(&comm->p2p_server, NULL, serve, comm) != 0) {
        comm->p2p_serving = false;
        return snccl_fail(ncclSystemError, "no thread to serve the P2P slots");
    }
    return ncclSuccess;
}

/* Peer's descriptor, asked on its socket until ASK_TIMEOUT_MS: -1 on failure. */
static int ask_fd(struct ncclComm *comm, int peer)
{
    char cbuf[CMSG_SPACE(sizeof(int))], byte;
    struct iovec iov = { &byte, 1 };
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
                          .msg_controllen = sizeof(cbuf) };
    struct timespec pause = { 0, 5 * 1000000L };
    struct sockaddr_un a;
    struct cmsghdr *c;
    socklen_t alen = sock_name(comm, peer, &a);
    int sock = -1, fd = -1;

    for (int waited = 0; waited < ASK_TIMEOUT_MS; waited += 5) {
        if ((sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
            return -1;
        if (connect(sock, (struct sockaddr *)&a, alen) == 0)
            break;
        close(sock);
        sock = -1;
        nanosleep(&pause, NULL);
    }
    if (sock < 0)
        return -1;
    if (recvmsg(sock, &msg, MSG_CMSG_CLOEXEC) == 1 && (c = CMSG_FIRSTHDR(&msg)) &&
        c->cmsg_type == SCM_RIGHTS)
        memcpy(&fd, CMSG_DATA(c), sizeof(int));
    close(sock);
    return fd;
}

ncclResult_t snccl_cumem_slots_open(struct ncclComm *comm, int peer)
{
    CUmemAccessDesc access = { .location = { CU_MEM_LOCATION_TYPE_DEVICE, comm->cudev },
                               .flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE };
    CUmemGenericAllocationHandle h;
    CUdeviceptr va;
    int fd = ask_fd(comm, peer);
    CUresult r;

    if (fd < 0)
        return snccl_fail(ncclRemoteError, "rank %d did not hand over its P2P slots", peer);
    r = cuMemImportFromShareableHandle(&h, (void *)(intptr_t)fd, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    close(fd);
    if (r)
        return snccl_cu(r, "cuMemImportFromShareableHandle of a peer's P2P slots");
    if ((r = cuMemAddressReserve(&va, comm->p2p_bytes, 0, 0, 0))) {
        cuMemRelease(h);
        return snccl_cu(r, "cuMemAddressReserve for a peer's P2P slots");
    }
    if ((r = cuMemMap(va, comm->p2p_bytes, 0, h, 0))) {
        cuMemRelease(h);
        cuMemAddressFree(va, comm->p2p_bytes);
        return snccl_cu(r, "cuMemMap of a peer's P2P slots");
    }
    cuMemRelease(h);                        /* the mapping keeps the memory */
    comm->p2p_peer[peer] = va;
    if ((r = cuMemSetAccess(va, comm->p2p_bytes, &access, 1)))
        return snccl_cu(r, "cuMemSetAccess of a peer's P2P slots");
    return ncclSuccess;
}

void snccl_cumem_slots_serve_end(struct ncclComm *comm)
{
    if (comm->p2p_serving) {
        __atomic_store_n(&comm->p2p_serving, false, __ATOMIC_RELEASE);
        pthread_join(comm->p2p_server, NULL);
    }
    if (comm->p2p_listen >= 0) {
        close(comm->p2p_listen);
        comm->p2p_listen = -1;
    }
    if (comm->p2p_fd >= 0) {
        close(comm->p2p_fd);
        comm->p2p_fd = -1;
    }
}

void snccl_cumem_slots_free(struct ncclComm *comm)
{
    snccl_cumem_slots_serve_end(comm);
    for (int p = 0; p < comm->nranks; p++)
        if (comm->p2p_peer[p]) {
            cuMemUnmap(comm->p2p_peer[p], comm->p2p_bytes);
            cuMemAddressFree(comm->p2p_peer[p], comm->p2p_bytes);
            comm->p2p_peer[p] = 0;
        }
    if (comm->p2p_mine) {
        cuMemUnmap(comm->p2p_mine, comm->p2p_bytes);   /* nothing when it was not mapped */
        cuMemAddressFree(comm->p2p_mine, comm->p2p_bytes);
        comm->p2p_mine = 0;
    }
    if (comm->p2p_handle) {
        cuMemRelease(comm->p2p_handle);     /* a peer still mapping it keeps it alive */
        comm->p2p_handle = 0;
    }
}
