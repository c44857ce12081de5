/*
 * rundir.h - where control sockets live, and the checks that make them safe.
 *
 * A process's socket is <run dir>/<pid>.sock. The run dir is, in order:
 *   1. $TCGPU_RUN_DIR, when set and not empty;
 *   2. $XDG_RUNTIME_DIR/tcgpu, when XDG_RUNTIME_DIR is set and is a directory
 *      owned by the process's effective uid (systemd's /run/user/UID);
 *   3. /tmp/tcgpu-<euid>.
 * The caller says what the two variables are (struct tcgpu_rundir_env): a
 * program reads its environment, libtcgpu.so its settings.
 * It is created with mode 0700 (only its last component), and before every
 * use it must be a real directory (lstat: not a symlink) owned by the uid
 * with no group or other permission bits; anything else is refused, so no
 * other user can plant, replace or read a socket there.
 *
 * A refused run dir (another user made /tmp/tcgpu-<uid> first, or a symlink
 * there) does not leave the process without a socket: it falls back to a
 * private /tmp/tcgpu-<uid>.XXXXXX, whose name nobody can guess in advance
 * (mkdtemp), reusing one made earlier; clients look there too.
 */
#ifndef TCGPU_RUNDIR_H
#define TCGPU_RUNDIR_H

#include <limits.h>
#include <stddef.h>
#include <sys/types.h>

/* The most candidate directories tcgpu_rundir_candidates() returns. */
#define TCGPU_RUNDIR_MAX_CANDIDATES 12

/* A process's TCGPU_RUN_DIR and XDG_RUNTIME_DIR; NULL or "" when unset. */
struct tcgpu_rundir_env {
    const char *run_dir;
    const char *xdg_runtime_dir;
};

/*
 * The run dir a process of `uid` with environment `env` would use (rules
 * above), without creating or checking it (gpuckpt check). 0 or
 * -ENAMETOOLONG.
 */
int tcgpu_rundir_choose(const struct tcgpu_rundir_env *env, char *dir, size_t dirlen, uid_t uid);

/*
 * The run dir of the calling process, whose environment is `env` (rules
 * above), created if missing and checked. Writes the path to dir (dirlen
 * bytes). Returns 0; 1 when the preferred dir was refused and dir is the
 * private fallback, with what happened in err ("run dir /tmp/tcgpu-1000 is
 * owned by uid 1001, not 1000: refusing to use it; ... using the private
 * /tmp/tcgpu-1000.Xa3bQ9 instead"), for the caller to log; or -errno with a
 * one-line explanation in err (-ENOENT: it cannot be created, e.g. a
 * missing parent).
 */
int tcgpu_rundir_prepare(const struct tcgpu_rundir_env *env, char *dir, size_t dirlen, char *err,
                         size_t errlen);

/*
 * Check that dir is a directory (not a symlink) owned by uid whose mode has
 * no group/other bits. Returns 0, -ENOENT (missing), -ENOTDIR (not a
 * directory, or a symlink), -EPERM (wrong owner or mode); err says which.
 */
int tcgpu_rundir_check(const char *dir, uid_t uid, char *err, size_t errlen);

/*
 * "<dir>/<pid>.sock" into buf. Returns 0, or -ENAMETOOLONG when the path
 * does not fit an AF_UNIX address (107 bytes) or buf.
 */
int tcgpu_rundir_socket_path(const char *dir, pid_t pid, char *buf, size_t len);

/*
 * For a client: the directories in which process `pid` (running as `uid`)
 * may have put its socket, best first, without duplicates: own_run_dir (the
 * client's own $TCGPU_RUN_DIR; NULL or "": none), then the target's
 * TCGPU_RUN_DIR and XDG_RUNTIME_DIR/tcgpu from /proc/PID/environ (readable
 * by the same user and by root), then /run/user/<uid>/tcgpu, then
 * /tmp/tcgpu-<uid>, then the fallback dirs /tmp/tcgpu-<uid>.XXXXXX (whoever
 * owns them: check before trusting). Returns how many were written to dirs
 * (0..max).
 */
int tcgpu_rundir_candidates(const char *own_run_dir, pid_t pid, uid_t uid, char dirs[][PATH_MAX],
                            int max);

/* tcgpu_rundir_check for a directory opened with tcgpu_proc_open_in_root
 * (common/proc.h);
 * `shown` names it in the message. */
int tcgpu_rundir_check_fd(int fd, const char *shown, uid_t uid, char *err, size_t errlen);

#endif
