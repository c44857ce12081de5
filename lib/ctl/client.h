/*
 * client.h - the client side of the control channel: find a process's
 * socket, check that it is safe and really the process's, send one request,
 * wait for the reply. Used by gpuckpt and (later) tcgpud; no globals, no
 * output of its own.
 */
#ifndef TCGPU_CTLCLIENT_H
#define TCGPU_CTLCLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "proto.h"

struct ctl_conn {
    int fd;
    pid_t pid;                  /* the target process */
    uid_t uid;                  /* its effective uid */
    char path[108];             /* the socket (as the target sees it: inside its root) */
    int pass_fd;                /* a descriptor ctl_call sends with the request (SCM_RIGHTS),
                                   -1 for none; ctl_connect sets -1, the caller keeps it */
    int recv_fd;                /* a descriptor a reply carried (SCM_RIGHTS: ipc_export's),
                                   -1 for none; ctl_close closes it unless the caller
                                   took it (set it to -1) */
};

/*
 * Connect to process pid's control socket (rundir.h says where it is looked
 * for; own_run_dir is the caller's $TCGPU_RUN_DIR, looked in first, NULL or
 * "" for none). pid is the caller's: a process in a container is found under its
 * own pid in its own root (docs/kubernetes.md). Checks, before trusting it:
 * the run dir belongs to the target's uid and is private, and the server end
 * (SO_PEERCRED) is the target's pid and uid. Returns 0 with *c open, or
 * -errno with a one-line message in err:
 *   -ESRCH        no such process
 *   -ENOENT       no control socket: not a tcgpu process, or it has not
 *                 initialised CUDA yet (err names a run dir passed over:
 *                 another user's, say)
 *   -ECONNREFUSED a socket file with nobody behind it (a process that died)
 *   -EACCES/-EPERM  not allowed (another user's process, an unsafe run
 *                 dir or socket, a server that is not the target process)
 */
int ctl_connect(pid_t pid, const char *own_run_dir, struct ctl_conn *c, char *err,
                size_t errlen);

/* ctl_connect with flags: CTL_CONNECT_NONBLOCK gives a non-blocking socket
 * and never waits to connect (-EAGAIN: the process's backlog is full). */
#define CTL_CONNECT_NONBLOCK 0x1
int ctl_connect_flags(pid_t pid, const char *own_run_dir, struct ctl_conn *c, int flags,
                      char *err, size_t errlen);

/*
 * The socket under both channels: a close-on-exec AF_UNIX SOCK_SEQPACKET
 * socket connected to path. Returns the descriptor, or -errno (-EINVAL: the
 * path is empty or does not fit in sun_path; connect's errno otherwise).
 * Checks nothing about who serves it: ctl_connect and tcgpud_connect do.
 */
int ctl_socket_connect(const char *path);

/*
 * Progress of a long operation, as the server reports it: the phase
 * ("drain", "write"...: docs/cli.md; "" from a server that names none),
 * and bytes done of total in that phase (total 0: no byte count).
 */
typedef void (*ctl_progress_fn)(const char *phase, uint64_t done, uint64_t total, void *arg);

/*
 * Send the request (len bytes) and wait for the final reply, passing progress
 * messages to `progress` (may be NULL). timeout_ms < 0 waits without limit.
 * Returns 0 when *reply holds the final reply ("ok" or "error": check
 * reply->err), or -errno: -ETIMEDOUT (no reply in time; the operation goes on
 * in the process), -ECONNRESET (closed without a reply), -EPROTO (garbage).
 */
int ctl_call(struct ctl_conn *c, const char *req, size_t len, struct ctl_msg *reply,
             int timeout_ms, ctl_progress_fn progress, void *arg);

void ctl_close(struct ctl_conn *c);

/* gpuckpt's exit codes (docs/cli.md). Scripts rely on them: never renumber. */
enum ctl_exit {
    CTL_EXIT_OK = 0,
    CTL_EXIT_FAILED = 1,        /* the operation failed */
    CTL_EXIT_USAGE = 2,         /* bad command line or request */
    CTL_EXIT_NOPROC = 3,        /* no such process, or not a tcgpu process */
    CTL_EXIT_REFUSED = 4,       /* refused in the process's state (suspended, unsupported state) */
    CTL_EXIT_TIMEOUT = 5,       /* the gate or the client's --timeout ran out */
    CTL_EXIT_PERM = 6,          /* permission denied */
    CTL_EXIT_CORRUPT = 7,       /* the image is corrupt or truncated */
    CTL_EXIT_NOROOM = 8,        /* resume: the device has no room now, or memory it opened
                                 * from another process (IPC) is suspended; try later */
    CTL_EXIT_LEFT_SUSPENDED = 9,    /* suspend failed and could not be undone: the job
                                     * stays suspended until gpuckpt resume */
};

/*
 * The exit code for an error: `err` is a negative errno; from_server says
 * whether the process replied with it (an operation's result) or it came
 * from reaching the process (ctl_connect, ctl_call).
 */
int ctl_exit_code(int err, int from_server);

#endif
