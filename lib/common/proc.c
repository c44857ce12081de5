/* proc.c - process facts from /proc and the walk of a process tree; see proc.h. */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/openat2.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "proc.h"

/* /proc/PID/NAME, or /proc/PID/task/TID/NAME when tid > 0; PID "self" when pid is 0. */
static void proc_path(char *out, size_t len, pid_t pid, pid_t tid, const char *name)
{
    char base[32];

    if (pid == 0)
        snprintf(base, sizeof(base), "/proc/self");
    else
        snprintf(base, sizeof(base), "/proc/%d", (int)pid);
    if (tid > 0)
        snprintf(out, len, "%s/task/%d/%s", base, (int)tid, name);
    else
        snprintf(out, len, "%s/%s", base, name);
}

/* An open of /proc that failed, as -errno: a process that is not there is -ESRCH. */
static int open_error(void)
{
    return errno == ENOENT ? -ESRCH : -errno;
}

/* Reads a small /proc file whole into buf, NUL-terminated: its length or -errno. */
static int read_small(const char *path, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n;

    if (fd < 0)
        return open_error();
    n = read(fd, buf, len - 1);
    close(fd);
    if (n < 0)
        return -EIO;
    buf[n] = '\0';
    return (int)n;
}

/* ---- one process ------------------------------------------------------------------------ */

/* The fields of /proc/PID/stat between ppid and starttime (5 to 21). */
#define SKIP_17 " %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s"

int tcgpu_proc_stat(pid_t pid, struct tcgpu_proc_stat *st)
{
    char path[64], buf[1024], *rp;
    unsigned long long start;
    int ppid, r;

    if (pid <= 0)
        return -ESRCH;
    proc_path(path, sizeof(path), pid, 0, "stat");
    if ((r = read_small(path, buf, sizeof(buf))) < 0)
        return r;
    /* "pid (comm) S ppid ...": comm may hold spaces and parentheses */
    rp = strrchr(buf, ')');
    if (!rp || sscanf(rp + 1, " %c %d" SKIP_17 " %llu", &st->state, &ppid, &start) != 3)
        return -EPROTO;
    st->ppid = (pid_t)ppid;
    st->start_ticks = start;
    return 0;
}

int tcgpu_proc_live(pid_t pid)
{
    struct tcgpu_proc_stat st;

    return tcgpu_proc_stat(pid, &st) == 0 && st.state != 'Z' && st.state != 'X';
}

int tcgpu_proc_leaving(pid_t pid)
{
    char path[64], buf[128];
    unsigned long long pages;

    if (!tcgpu_proc_live(pid))
        return 1;
    /* the kernel lets a dying process's memory go before its descriptors
     * (do_exit: exit_mm, then exit_files), and statm then reads all zero */
    proc_path(path, sizeof(path), pid, 0, "statm");
    if (read_small(path, buf, sizeof(buf)) < 0)
        return !tcgpu_proc_live(pid);
    return sscanf(buf, "%llu", &pages) == 1 && pages == 0;
}

int tcgpu_proc_pid_free(pid_t pid)
{
    /* a signal 0 finds zombies too; EPERM is someone else's live process */
    return pid > 0 && kill(pid, 0) < 0 && errno == ESRCH;
}

/* The last number of an NSpid line: the pid where the process lives. */
static pid_t last_pid(const char *p)
{
    pid_t last = 0;
    char *end;
    long v;

    while ((v = strtol(p, &end, 10)), end != p) {
        last = (pid_t)v;
        p = end;
    }
    return last;
}

static void status_line(const char *line, struct tcgpu_proc_status *st, int *has_uid)
{
    unsigned u[4];

    if (sscanf(line, "Uid: %u %u %u %u", &u[0], &u[1], &u[2], &u[3]) == 4) {
        for (int i = 0; i < 4; i++)
            st->uid[i] = (uid_t)u[i];
        *has_uid = 1;
    } else if (!strncmp(line, "TracerPid:", 10)) {
        st->tracer = (pid_t)strtol(line + 10, NULL, 10);
    } else if (!strncmp(line, "NSpid:", 6)) {
        st->nspid = last_pid(line + 6);
    } else if (!strncmp(line, "CapEff:", 7)) {
        st->cap_eff = strtoull(line + 7, NULL, 16);
    }
}

int tcgpu_proc_status(pid_t pid, pid_t tid, struct tcgpu_proc_status *st)
{
    char path[96], line[512];
    int has_uid = 0;
    FILE *f;

    memset(st, 0, sizeof(*st));
    if (pid < 0)
        return -ESRCH;
    proc_path(path, sizeof(path), pid, tid, "status");
    if (!(f = fopen(path, "re")))
        return open_error();
    while (fgets(line, sizeof(line), f))
        status_line(line, st, &has_uid);
    fclose(f);
    return has_uid ? 0 : -EPROTO;
}

int tcgpu_proc_uid(pid_t pid, uid_t *uid)
{
    struct tcgpu_proc_status st;
    int r;

    if (pid <= 0)
        return -ESRCH;
    if ((r = tcgpu_proc_status(pid, 0, &st)) < 0)
        return r;
    *uid = st.uid[1];
    return 0;
}

int tcgpu_proc_comm(pid_t pid, pid_t tid, char *buf, size_t len)
{
    char path[96], comm[64];
    int r;

    if (pid <= 0)
        return -ESRCH;
    proc_path(path, sizeof(path), pid, tid, "comm");
    if ((r = read_small(path, comm, sizeof(comm))) < 0)
        return r;
    comm[strcspn(comm, "\n")] = '\0';
    snprintf(buf, len, "%s", comm);
    return 0;
}

/* /proc/PID/NAME whole into buf, NUL-terminated: the bytes read, 0 when unreadable. */
static size_t read_whole(pid_t pid, const char *name, char *buf, size_t cap)
{
    char path[64];
    size_t n = 0;
    int fd;

    proc_path(path, sizeof(path), pid, 0, name);
    if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
        buf[0] = '\0';
        return 0;
    }
    while (n < cap - 1) {
        ssize_t r = read(fd, buf + n, cap - 1 - n);
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    close(fd);
    buf[n] = '\0';
    return n;
}

size_t tcgpu_proc_environ(pid_t pid, char *buf, size_t cap)
{
    if (pid <= 0) {
        buf[0] = '\0';
        return 0;
    }
    return read_whole(pid, "environ", buf, cap);
}

size_t tcgpu_proc_cmdline(pid_t pid, char *buf, size_t cap)
{
    if (pid < 0) {
        buf[0] = '\0';
        return 0;
    }
    return read_whole(pid, "cmdline", buf, cap);
}

int tcgpu_proc_maps_file(pid_t pid, const char *name)
{
    char path[64], line[4096];
    size_t nl = strlen(name);
    int found = 0;
    FILE *f;

    if (pid <= 0)
        return 0;
    proc_path(path, sizeof(path), pid, 0, "maps");
    if (!(f = fopen(path, "re")))
        return 0;
    while (!found && fgets(line, sizeof(line), f)) {
        const char *slash = strrchr(line, '/');
        found = slash && !strncmp(slash + 1, name, nl);
    }
    fclose(f);
    return found;
}

int tcgpu_proc_holds_file(pid_t pid, const char *prefix)
{
    char path[64], link[PATH_MAX], target[PATH_MAX];
    size_t pl = strlen(prefix);
    struct dirent *e;
    int found = 0;
    DIR *d;

    if (pid <= 0)
        return 0;
    proc_path(path, sizeof(path), pid, 0, "fd");
    if (!(d = opendir(path)))
        return 0;
    while (!found && (e = readdir(d))) {
        ssize_t n;
        snprintf(link, sizeof(link), "%s/%.16s", path, e->d_name);
        n = readlink(link, target, sizeof(target) - 1);
        if (n > 0) {
            target[n] = '\0';
            found = !strncmp(target, prefix, pl);
        }
    }
    closedir(d);
    return found;
}

int tcgpu_proc_self_exe(char *buf, size_t len)
{
    ssize_t n = readlink("/proc/self/exe", buf, len - 1);

    if (n < 0) {
        buf[0] = '\0';
        return -errno;
    }
    buf[n] = '\0';
    return (int)n;
}

int tcgpu_proc_self_dir(char *buf, size_t len)
{
    char *slash;
    int r;

    if ((r = tcgpu_proc_self_exe(buf, len)) < 0)
        return r;
    if (!(slash = strrchr(buf, '/')))
        return -ENOENT;
    *slash = '\0';
    return 0;
}

int tcgpu_proc_fd_path(int fd, const char *name, char *buf, size_t len)
{
    int n;

    if (!name || !strcmp(name, "."))
        n = snprintf(buf, len, "/proc/self/fd/%d", fd);
    else
        n = snprintf(buf, len, "/proc/self/fd/%d/%s", fd, name);
    return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int tcgpu_proc_fd_target(int fd, char *buf, size_t len)
{
    char link[64];
    ssize_t n;

    tcgpu_proc_fd_path(fd, NULL, link, sizeof(link));
    if ((n = readlink(link, buf, len - 1)) < 0) {
        buf[0] = '\0';
        return -errno;
    }
    buf[n] = '\0';
    return (int)n;
}

/* ---- lists: processes, threads, a tree ------------------------------------------------- */

/* fn(number) for every entry of the directory that is a number, until fn returns non-zero. */
static int each_number(const char *dir, int (*fn)(pid_t n, void *arg), void *arg)
{
    struct dirent *e;
    int r = 0;
    DIR *d;

    if (!(d = opendir(dir)))
        return open_error();
    while (r == 0 && (e = readdir(d))) {
        char *end;
        long v;
        if (!isdigit((unsigned char)e->d_name[0]))
            continue;
        v = strtol(e->d_name, &end, 10);
        if (*end || v <= 0 || v > INT_MAX)
            continue;
        r = fn((pid_t)v, arg);
    }
    closedir(d);
    return r;
}

int tcgpu_proc_each(int (*fn)(pid_t pid, void *arg), void *arg)
{
    return each_number("/proc", fn, arg);
}

struct each_thread {
    pid_t pid;
    int (*fn)(pid_t pid, pid_t tid, void *arg);
    void *arg;
};

static int call_for_thread(pid_t tid, void *arg)
{
    struct each_thread *t = arg;

    return t->fn(t->pid, tid, t->arg);
}

int tcgpu_proc_each_thread(pid_t pid, int (*fn)(pid_t pid, pid_t tid, void *arg), void *arg)
{
    struct each_thread t = { .pid = pid, .fn = fn, .arg = arg };
    char path[64];

    if (pid <= 0)
        return -ESRCH;
    proc_path(path, sizeof(path), pid, 0, "task");
    return each_number(path, call_for_thread, &t);
}

struct tree_list {
    pid_t *out;
    int n, max;
};

/* Appends pid unless it is there already (a child reparented while we read). */
static int tree_add(struct tree_list *t, pid_t pid)
{
    for (int i = 0; i < t->n; i++)
        if (t->out[i] == pid)
            return 0;
    if (t->n == t->max)
        return -E2BIG;
    t->out[t->n++] = pid;
    return 0;
}

/* Appends the children of thread tid of pid. */
static int add_thread_children(pid_t pid, pid_t tid, void *arg)
{
    char path[96];
    int child, r = 0;
    FILE *f;

    proc_path(path, sizeof(path), pid, tid, "children");
    if (!(f = fopen(path, "re")))
        return 0;               /* the thread ended meanwhile: its children went to another */
    while (r == 0 && fscanf(f, "%d", &child) == 1)
        if (child > 0)
            r = tree_add(arg, (pid_t)child);
    fclose(f);
    return r;
}

int tcgpu_proc_tree(pid_t root, pid_t *out, int max)
{
    struct tree_list t = { .out = out, .n = 0, .max = max };
    int r;

    if (root <= 0)
        return -ESRCH;
    if ((r = tree_add(&t, root)) < 0)
        return r;
    for (int i = 0; i < t.n; i++) {
        r = tcgpu_proc_each_thread(out[i], add_thread_children, &t);
        if (r == -E2BIG || (r < 0 && i == 0))
            return r;           /* a descendant that exited meanwhile has no children to add */
    }
    return t.n;
}

/* ---- namespaces ------------------------------------------------------------------------ */

static int same_ns(pid_t pid, const char *kind)
{
    char a[64], b[64];
    struct stat sa, sb;

    snprintf(a, sizeof(a), "/proc/self/ns/%s", kind);
    snprintf(b, sizeof(b), "/proc/%d/ns/%s", (int)pid, kind);
    /* unreadable (not ours to look at): assume ours, as before namespaces */
    if (stat(a, &sa) < 0 || stat(b, &sb) < 0)
        return 1;
    return sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
}

int tcgpu_proc_ns(pid_t pid, struct tcgpu_proc_ns *ns)
{
    struct tcgpu_proc_status st;
    int r;

    ns->nspid = pid;
    ns->foreign_mounts = 0;
    if (pid <= 0)
        return -ESRCH;
    if ((r = tcgpu_proc_status(pid, 0, &st)) < 0)
        return r;
    if (st.nspid)               /* none: a kernel without NSpid, no namespaces either */
        ns->nspid = st.nspid;
    ns->foreign_mounts = !same_ns(pid, "mnt");
    return 0;
}

int tcgpu_proc_open_in_root(pid_t pid, const char *path, int extra_flags)
{
    struct open_how how = {
        .flags = (uint64_t)(O_PATH | O_NOFOLLOW | O_CLOEXEC | extra_flags),
        .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
    };
    char root[64];
    int rfd, fd;

    snprintf(root, sizeof(root), "/proc/%d/root", (int)pid);
    if ((rfd = open(root, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0)
        return open_error();
    fd = (int)syscall(SYS_openat2, rfd, path, &how, sizeof(how));
    if (fd < 0)
        fd = -errno;
    close(rfd);
    return fd;
}
