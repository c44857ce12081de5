/*
 * daemon_client.h - talking to tcgpud: the transport (for gpuckpt and the
 * tests, no globals) and the job's side (registration, memory requests),
 * which lives in libtcgpu.so.
 *
 * tcgpud's socket is AF_UNIX SOCK_SEQPACKET at $TCGPU_DAEMON_SOCKET (default
 * /run/tcgpud.sock), mode 0666: anyone may connect; tcgpud decides what each
 * caller may do from its peer credentials. Messages are those of ctl/proto.h
 * (a command word and key=value pairs, percent-encoded). A client sends one
 * request and reads messages until the final "ok" or "error"; `ps` and
 * `events` send "job ..."/"device ..."/"event ..." messages before it, and
 * `events follow=1` goes on sending events until the client closes.
 * docs/tcgpud.md lists every request.
 */
#ifndef TCGPU_DAEMON_CLIENT_H
#define TCGPU_DAEMON_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "ctl/proto.h"

#define TCGPUD_SOCKET_DEFAULT "/run/tcgpud.sock"

/* ---------------------------------------------------------------------------
 * Transport (no globals, no output)
 * ------------------------------------------------------------------------- */

/* $TCGPU_DAEMON_SOCKET, else the default; "" when the variable says "off". */
const char *tcgpud_socket_path(void);

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
 * (check reply->err), or a transport -errno.
 */
typedef void (*tcgpud_msg_fn)(const struct ctl_msg *m, void *arg);
int tcgpud_call(int fd, const struct ctl_buf *b, struct ctl_msg *reply, int timeout_ms,
                tcgpud_msg_fn fn, void *arg);

/* ---------------------------------------------------------------------------
 * The job's side (libtcgpu.so)
 *
 * Environment (set by `gpuckpt run --project P ...`):
 *   TCGPU_PROJECT         the project; without it the job does not register
 *   TCGPU_PRIORITY        its priority (default: the project's)
 *   TCGPU_GPU_MEM         its memory limit (e.g. 8G); enforced even without tcgpud
 *   TCGPU_DAEMON_SOCKET   tcgpud's socket (default /run/tcgpud.sock)
 *   TCGPU_WAIT_TIMEOUT    when no room can be made, wait this long (e.g. 60s) before
 *                         failing the allocation (default: fail at once)
 *   TCGPU_DAEMON_TIMEOUT  how long an allocation waits for tcgpud's answer (default 120s)
 * ------------------------------------------------------------------------- */

/*
 * Register with tcgpud (after the control socket is up, at cuInit). Reads
 * the environment; without TCGPU_PROJECT it only applies TCGPU_GPU_MEM.
 * Never fails the program: problems are logged once and the job runs on
 * without policy. Idempotent.
 */
void tcgpu_daemon_register(void);

/* The job's memory limit in bytes (0: none). Lock-free. */
uint64_t tcgpu_daemon_limit(void);

/*
 * An allocation of `bytes` on `device` does not fit: over the job's limit
 * (over_limit), or the driver said out of memory. `used` is what the job
 * holds. Asks tcgpud to make room (it may suspend other jobs) and waits for
 * the answer. The calling thread leaves the API gate while it waits (when
 * it is its outermost call), so that the job itself can be suspended
 * meanwhile. Returns 1: retry the allocation; 0: fail it.
 */
int tcgpu_daemon_make_room(int device, uint64_t bytes, uint64_t used, int over_limit);

#endif
