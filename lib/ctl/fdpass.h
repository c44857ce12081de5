/*
 * fdpass.h - one message over a control socket with at most one file
 * descriptor riding along (SCM_RIGHTS): a request's directory, a reply's
 * shared device memory (CUDA IPC). The client (client.c) and libtcgpu.so's
 * control server (lib/core/control.c) both speak it.
 */
#ifndef TCGPU_CTL_FDPASS_H
#define TCGPU_CTL_FDPASS_H

#include <stddef.h>
#include <sys/types.h>

/* Sends len bytes of buf, with descriptor `pass` attached unless it is
 * negative; never raises SIGPIPE. The bytes sent, or -1 with errno. */
ssize_t ctl_send_with_fd(int sock, const void *buf, size_t len, int pass);

/*
 * Receives one message into buf (at most len bytes; with MSG_TRUNC the
 * return is its full size, so a longer one shows). The first descriptor
 * that comes with it is kept in *passed when *passed is -1, close-on-exec;
 * any other is closed at once, since a descriptor nobody asked for must
 * not leak. flags are added to recvmsg's (MSG_DONTWAIT). -1 with errno.
 */
ssize_t ctl_recv_with_fd(int sock, void *buf, size_t len, int flags, int *passed);

#endif
