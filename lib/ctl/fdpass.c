/* A message with at most one descriptor; contract in fdpass.h. */
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fdpass.h"

/* Room for two: a second descriptor is received (and closed) rather than
 * left to the kernel's truncation, which would hide that one came. */
#define FDS_ROOM 2

ssize_t ctl_send_with_fd(int sock, const void *buf, size_t len, int pass)
{
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } u;
    struct iovec iov = { .iov_base = (void *)buf, .iov_len = len };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
    struct cmsghdr *cm;

    if (pass < 0)
        return send(sock, buf, len, MSG_NOSIGNAL);
    memset(&u, 0, sizeof(u));
    mh.msg_control = u.buf;
    mh.msg_controllen = sizeof(u.buf);
    cm = CMSG_FIRSTHDR(&mh);
    cm->cmsg_level = SOL_SOCKET;
    cm->cmsg_type = SCM_RIGHTS;
    cm->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(cm), &pass, sizeof(int));
    return sendmsg(sock, &mh, MSG_NOSIGNAL);
}

ssize_t ctl_recv_with_fd(int sock, void *buf, size_t len, int flags, int *passed)
{
    union {
        char buf[CMSG_SPACE(FDS_ROOM * sizeof(int))];
        struct cmsghdr align;
    } u;
    struct iovec iov = { .iov_base = buf, .iov_len = len };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf,
                         .msg_controllen = sizeof(u.buf) };
    ssize_t n = recvmsg(sock, &mh, MSG_TRUNC | MSG_CMSG_CLOEXEC | flags);

    if (n < 0)
        return n;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
        int fds[FDS_ROOM];
        size_t nfd;

        if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
            continue;
        nfd = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        if (nfd > FDS_ROOM)
            nfd = FDS_ROOM;
        memcpy(fds, CMSG_DATA(cm), nfd * sizeof(int));
        for (size_t i = 0; i < nfd; i++) {
            if (*passed < 0)
                *passed = fds[i];
            else
                close(fds[i]);
        }
    }
    return n;
}
