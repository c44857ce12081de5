/*
 * proc.h - what /proc says about a process, and the walk of a process tree.
 *
 * The one place tcgpu reads /proc/PID: gpuckpt (the tree it saves, ps),
 * tcgpud (a job's start time, the tree of an abandoned restore), the CRIU
 * plugin (threads, tracers, the tree it dumps), tcgpu-slurm (the task's
 * tree), the control client (a process's uid, namespaces, run dir); and the
 * paths /proc/self/fd gives this process's descriptors. A pid is as the
 * caller's /proc numbers it. Every answer is read at the call: the process
 * may change or exit the next moment.
 *
 * A process's children are those of every one of its threads: the kernel
 * lists a child under the thread that forked it (/proc/PID/task/TID/children),
 * so a walk that reads only the main thread's list misses the children of
 * the others.
 *
 * Functions return 0 (or a count) or -errno: -ESRCH when the process does
 * not exist (or pid <= 0), -EPROTO when /proc's text is not what the kernel
 * writes, another -errno of the read (-EACCES: not the caller's to read).
 * Thread-safe (no shared state).
 */
#ifndef TCGPU_COMMON_PROC_H
#define TCGPU_COMMON_PROC_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* From /proc/PID/stat. */
struct tcgpu_proc_stat {
    char state;                 /* R, S, D, T, t, Z (exited, not reaped), X... */
    pid_t ppid;
    uint64_t start_ticks;       /* start time, clock ticks after boot: with the pid, names
                                 * the process for good (a reused pid starts later) */
};
int tcgpu_proc_stat(pid_t pid, struct tcgpu_proc_stat *st);

/* 1 while pid exists and has not exited (a zombie, exited but not yet reaped
 * by its parent, is not live), else 0. */
int tcgpu_proc_live(pid_t pid);

/* 1 when pid is not live or is exiting: its memory is gone already (a
 * process whose descriptors the kernel is closing as it dies), else 0. */
int tcgpu_proc_leaving(pid_t pid);

/* 1 once no process holds pid, not even a zombie its parent has not reaped
 * (CRIU can then restore a process with that pid), else 0. */
int tcgpu_proc_pid_free(pid_t pid);

/* From /proc/PID/status, or /proc/PID/task/TID/status when tid > 0 (pid 0:
 * the calling process). -EPROTO when it has no Uid line. */
struct tcgpu_proc_status {
    uid_t uid[4];               /* real, effective, saved, filesystem */
    pid_t tracer;               /* TracerPid: 0 when not traced */
    pid_t nspid;                /* the last of NSpid: its number in its own pid namespace;
                                 * 0 when the kernel has no NSpid line */
    uint64_t cap_eff;           /* CapEff, the effective capabilities (bit = CAP_*) */
};
int tcgpu_proc_status(pid_t pid, pid_t tid, struct tcgpu_proc_status *st);

/* The effective uid of process pid: 0, -ESRCH, -EACCES... */
int tcgpu_proc_uid(pid_t pid, uid_t *uid);

/* The name of pid (/proc/PID/comm, or of its thread tid when tid > 0)
 * without its newline into buf; 0 or -errno, buf untouched on failure. */
int tcgpu_proc_comm(pid_t pid, pid_t tid, char *buf, size_t len);

/* Reads pid's environment ("NAME=value\0" each) into buf, NUL-terminated;
 * the bytes read (at most cap - 1: a longer one is cut), 0 when it cannot
 * be read (the same user and root may). */
size_t tcgpu_proc_environ(pid_t pid, char *buf, size_t cap);

/* pid's command line ("arg\0" each; pid 0: the calling process) into buf,
 * NUL-terminated: the bytes read (at most cap - 1), 0 when it cannot be read. */
size_t tcgpu_proc_cmdline(pid_t pid, char *buf, size_t cap);

/* 1 when pid maps a file whose name starts with `name` ("libtcgpu.so"
 * matches libtcgpu.so.1), else 0 (also when its maps cannot be read). */
int tcgpu_proc_maps_file(pid_t pid, const char *name);

/* 1 when pid holds open a file whose path starts with `prefix`
 * ("/dev/nvidia"), else 0 (also when its descriptors cannot be read). */
int tcgpu_proc_holds_file(pid_t pid, const char *prefix);

/* The running program's executable (/proc/self/exe) into buf, NUL-terminated
 * (a longer path is cut, as readlink cuts it): its length, or -errno.
 * tcgpu_proc_self_dir: the directory that holds it ("/usr/bin"). */
int tcgpu_proc_self_exe(char *buf, size_t len);
int tcgpu_proc_self_dir(char *buf, size_t len);

/* The path through which this process reaches what its descriptor fd refers
 * to, /proc/self/fd/FD, or the entry `name` of that directory (NULL or ".":
 * the descriptor itself), into buf: 0, or -ENAMETOOLONG. */
int tcgpu_proc_fd_path(int fd, const char *name, char *buf, size_t len);

/* The path of what descriptor fd refers to (the link /proc/self/fd/FD) into
 * buf, NUL-terminated: its length, or -errno (buf then ""). */
int tcgpu_proc_fd_target(int fd, char *buf, size_t len);

/*
 * Calls fn(pid, arg) for every process in /proc (tcgpu_proc_each) or
 * fn(pid, tid, arg) for every thread of pid (tcgpu_proc_each_thread), in
 * /proc's order, until fn returns non-zero. Returns what fn returned last
 * (0 after all of them), or -ESRCH / -errno when the list cannot be read.
 */
int tcgpu_proc_each(int (*fn)(pid_t pid, void *arg), void *arg);
int tcgpu_proc_each_thread(pid_t pid, int (*fn)(pid_t pid, pid_t tid, void *arg), void *arg);

/*
 * root and every descendant (the children of each one's every thread) into
 * out, breadth first: parents before their children, each pid once. Returns
 * how many (>= 1), -ESRCH (no process root), or -E2BIG when there are more
 * than max (out then holds the first max, root's side of the tree).
 */
int tcgpu_proc_tree(pid_t root, pid_t *out, int max);

/*
 * Where process pid lives, for a client outside its namespaces
 * (docs/kubernetes.md, "tcgpu inside containers"): nspid is its pid in its
 * own pid namespace, the number in its socket's name; foreign_mounts says
 * its mount namespace is not the caller's (a container), and then the run
 * dirs tcgpu_rundir_candidates() (ctl/rundir.h) returns are paths inside its
 * root, to open with tcgpu_proc_open_in_root(). Returns 0, or -ESRCH /
 * -errno.
 */
struct tcgpu_proc_ns {
    pid_t nspid;
    int foreign_mounts;
};
int tcgpu_proc_ns(pid_t pid, struct tcgpu_proc_ns *ns);

/*
 * Opens `path` as process pid's root resolves it (openat2 RESOLVE_IN_ROOT:
 * absolute symlinks and ".." stay inside it, magic links are refused), with
 * O_PATH | O_NOFOLLOW | O_CLOEXEC | extra_flags (e.g. O_DIRECTORY). Returns
 * the descriptor or -errno.
 */
int tcgpu_proc_open_in_root(pid_t pid, const char *path, int extra_flags);

#endif
