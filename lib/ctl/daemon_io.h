/*
 * daemon_io.h - talking to tcgpud: the transport, shared by gpuckpt, the
 * job's side in libtcgpu.so (core/daemon_client.h) and the tests. No
 * globals, no output: errors come back as -errno and a message.
 *
 * tcgpud's socket is AF_UNIX SOCK_SEQPACKET at $TCGPU_DAEMON_SOCKET (default
 * /run/tcgpud.sock; the programs read the variable, libtcgpu.so its
 * settings), mode 0666: anyone may connect; tcgpud decides what each
 * caller may do from its peer credentials. Messages are those of ctl/proto.h
 * (a command word and key=value pairs, percent-encoded). A client sends one
 * request and reads messages until the final "ok" or "error"; `ps` and
 * `events` send "job ..."/"device ..."/"event ..." messages before it, and
 * `events follow=1` goes on sending events until the client closes.
 * docs/tcgpud.md lists every request.
 */
#ifndef TCGPU_CTL_DAEMON_IO_H
#define TCGPU_CTL_DAEMON_IO_H

#include <stddef.h>

#include "proto.h"

#define TCGPUD_SOCKET_DEFAULT "/run/tcgpud.sock"

/* The socket TCGPU_DAEMON_SOCKET=setting names: setting itself, the default
 * when it is NULL or "", "" (no tcgpud) when it is "off". */
const char *tcgpud_socket_path(const char *setting);

/*
 * Connect to tcgpud at path. Returns the descriptor, or -errno: -ENOENT (no
 * socket: no daemon), -ECONNREFUSED (a socket file nobody serves), ... with
 * a one-line message in err.
 */
int tcgpud_connect(const char *path, char *err, size_t errlen);

/* Send a finished request. 0 or -errno (-EMSGSIZE when it did not fit). */
int tcgpud_send(int fd, const struct ctl_buf *b);

/*
 * Receive one message into *m, waiting at most timeout_ms (< 0: forever).
 * 0, or -ETIMEDOUT, -ECONNRESET (closed), -EPROTO (malformed), -errno.
 */
int tcgpud_recv(int fd, struct ctl_msg *m, int timeout_ms);

/*
 * Send b and wait for the final reply (ok/error) in *reply, passing every
 * other message to fn (may be NULL). 0 when *reply holds the final reply
 * (check reply->err; a connection tcgpud turned away, too many from this
 * user, answers -EAGAIN with the reason), or a transport -errno:
 * -ECONNRESET when tcgpud closed the connection without an answer.
 */
typedef void (*tcgpud_msg_fn)(const struct ctl_msg *m, void *arg);
int tcgpud_call(int fd, const struct ctl_buf *b, struct ctl_msg *reply, int timeout_ms,
                tcgpud_msg_fn fn, void *arg);

#endif
