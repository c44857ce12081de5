/*
 * pidns.c - who a process is, across pid namespaces.
 *
 * The real driver knows a process by its host pid (the kernel module sees
 * the task itself): nvidia-smi shows host pids, also inside a container,
 * and a tool on the host drives the checkpoint API of a containerised
 * process with the pid it sees. simcuda's process table lives in shared
 * memory and a process only knows itself from user space, so each slot
 * records an identity that every observer can check from its own /proc:
 * the pid in the process's own namespace, the namespace's inode, the start
 * time (which tells a reused or a CRIU-restored pid apart), and the host pid
 * once someone who can see the initial namespace has looked (docs/simcuda.md,
 * "pid namespaces").
 *
 * Pids given to the API are read the way the caller's /proc shows them,
 * which is the caller's own namespace in every ordinary setup.
 *
 * Start times are shifted by the reader's time namespace (a process CRIU
 * restores lives in a new one, so that its clocks do not jump), so each
 * reader takes its own boot-time offset out again: every observer then
 * computes the same value, give or take the one tick of rounding that
 * sim_ident_same allows.
 */
#include "sim.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The initial pid namespace's inode (PROC_PID_INIT_INO in the kernel). */
#define INIT_PID_NS_INO 0xEFFFFFFCu

static int read_small(const char *path, char *buf, size_t len)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ssize_t n;

    if (fd < 0)
        return -errno;
    n = read(fd, buf, len - 1);
    close(fd);
    if (n < 0)
        return -EIO;
    buf[n] = '\0';
    return 0;
}

/* This process's boot-time offset (its time namespace's), in clock ticks. Read
 * each time: a restored process is in another namespace than before. */
static int64_t boottime_offset_ticks(void)
{
    char buf[256], *p;
    long long sec = 0, nsec = 0;
    long hz = sysconf(_SC_CLK_TCK);

    if (read_small("/proc/self/timens_offsets", buf, sizeof(buf)) < 0 || hz <= 0)
        return 0;               /* no time namespaces: no offset */
    if (!(p = strstr(buf, "boottime")) || sscanf(p + 8, "%lld %lld", &sec, &nsec) != 2)
        return 0;
    return (int64_t)(sec * hz + nsec * hz / 1000000000);
}

/* /proc/<dir>/stat: the start time (field 22, in the initial time namespace)
 * and whether it is a zombie. */
static int stat_start(const char *dir, uint64_t *start, bool *zombie)
{
    char path[96], buf[1024];
    char *p;
    int r;

    snprintf(path, sizeof(path), "/proc/%.64s/stat", dir);
    if ((r = read_small(path, buf, sizeof(buf))) < 0)
        return r;
    /* the command may hold spaces and parentheses: fields start after the last ')' */
    if (!(p = strrchr(buf, ')')) || p[1] != ' ')
        return -EIO;
    p += 2;
    *zombie = *p == 'Z' || *p == 'X';
    for (int field = 3; field < 22; field++) {
        p = strchr(p, ' ');
        if (!p)
            return -EIO;
        p++;
    }
    *start = (uint64_t)((int64_t)strtoull(p, NULL, 10) - boottime_offset_ticks());
    return 0;
}

/* /proc/<dir>/status NSpid: the first pid (as /proc sees it) and the last (its own namespace). */
static int status_nspid(const char *dir, int32_t *first, int32_t *last, int *levels)
{
    char path[96], buf[4096];
    char *p;
    int r, n = 0;

    snprintf(path, sizeof(path), "/proc/%.64s/status", dir);
    if ((r = read_small(path, buf, sizeof(buf))) < 0)
        return r;
    if (!(p = strstr(buf, "\nNSpid:")))
        return -ENOTSUP;        /* kernels before 4.1 */
    p += 7;
    while (*p == ' ' || *p == '\t' || isdigit((unsigned char)*p)) {
        char *end;
        long v;

        while (*p == ' ' || *p == '\t')
            p++;
        if (!isdigit((unsigned char)*p))
            break;
        v = strtol(p, &end, 10);
        if (n == 0)
            *first = (int32_t)v;
        *last = (int32_t)v;
        n++;
        p = end;
    }
    *levels = n;
    return n ? 0 : -EIO;
}

static uint64_t ns_inode(const char *dir)
{
    char path[96];
    struct stat st;

    snprintf(path, sizeof(path), "/proc/%.64s/ns/pid", dir);
    return stat(path, &st) == 0 ? (uint64_t)st.st_ino : 0;
}

/*
 * Whether this process's /proc numbers processes as the initial namespace
 * does (then a pid read there is a host pid). Asked once: a process does not
 * change its /proc.
 */
static bool proc_is_host_view(void)
{
    static int cached = -1;

    if (cached < 0) {
        /* /proc/self resolves only where our pid is visible: in the initial
         * namespace, that makes /proc the initial namespace's */
        cached = ns_inode("self") == INIT_PID_NS_INO || ns_inode("1") == INIT_PID_NS_INO;
    }
    return cached;
}

/* The namespace whose pids this process's /proc shows, when it knows it (0 otherwise). */
static uint64_t proc_view_ns(void)
{
    static uint64_t cached = 1;

    if (cached == 1) {
        int32_t first, last;
        int levels;

        cached = 0;
        if (proc_is_host_view())
            cached = INIT_PID_NS_INO;
        else if (status_nspid("self", &first, &last, &levels) == 0 && levels == 1)
            cached = ns_inode("self");
    }
    return cached;
}

static int ident_of_dir(const char *dir, struct sim_ident *id, bool *zombie)
{
    int32_t first = 0, last = 0;
    int levels = 0, r;

    memset(id, 0, sizeof(*id));
    if ((r = stat_start(dir, &id->start, zombie)) < 0)
        return r;
    if ((r = status_nspid(dir, &first, &last, &levels)) < 0)
        return r;
    id->nspid = last;
    id->ns = ns_inode(dir);     /* 0 when not ours to look at: the rest still identifies */
    if (proc_is_host_view())
        id->hostpid = first;
    return 0;
}

int sim_ident_self(struct sim_ident *id)
{
    bool zombie;
    int r = ident_of_dir("self", id, &zombie);

    if (r < 0) {
        /* no /proc at all: known only by the pid, as before namespaces */
        memset(id, 0, sizeof(*id));
        id->nspid = (int32_t)getpid();
        return r;
    }
    return 0;
}

int sim_ident_of(pid_t pid, struct sim_ident *id)
{
    char dir[16];
    bool zombie;
    int r;

    if (pid <= 0)
        return -ESRCH;
    snprintf(dir, sizeof(dir), "%d", (int)pid);
    r = ident_of_dir(dir, id, &zombie);
    if (r == -ENOENT)
        return -ESRCH;
    if (r == 0 && zombie)
        return -ESRCH;          /* a zombie holds no GPU either */
    return r;
}

bool sim_ident_same(const struct sim_ident *a, const struct sim_ident *b)
{
    uint64_t dt = a->start > b->start ? a->start - b->start : b->start - a->start;

    return a->nspid == b->nspid && dt <= 1 && (!a->ns || !b->ns || a->ns == b->ns) &&
           (!a->hostpid || !b->hostpid || a->hostpid == b->hostpid);
}

/* Look for the process among all of /proc by its namespace (host view only). */
static int scan_for(struct sim_ident *id)
{
    struct dirent *e;
    DIR *d = opendir("/proc");
    int found = 0;

    if (!d)
        return -1;
    while (!found && (e = readdir(d))) {
        struct sim_ident got;
        bool zombie;

        if (!isdigit((unsigned char)e->d_name[0]) || ns_inode(e->d_name) != id->ns)
            continue;
        if (ident_of_dir(e->d_name, &got, &zombie) == 0 && !zombie && sim_ident_same(&got, id)) {
            id->hostpid = got.hostpid;
            found = 1;
        }
    }
    closedir(d);
    return found;
}

int sim_ident_alive(struct sim_ident *id)
{
    struct sim_ident got;

    if (id->hostpid && proc_is_host_view())
        return sim_ident_of(id->hostpid, &got) == 0 && sim_ident_same(&got, id);
    if (id->ns && id->ns == proc_view_ns())
        return sim_ident_of(id->nspid, &got) == 0 && sim_ident_same(&got, id);
    if (id->ns && proc_is_host_view())
        return scan_for(id);
    return -1;                  /* in a namespace we cannot see: not ours to judge */
}

pid_t sim_ident_visible_pid(const struct sim_ident *id)
{
    if (proc_is_host_view())
        return id->hostpid;
    if (id->ns && id->ns == proc_view_ns())
        return id->nspid;
    return 0;
}

int sim_ident_visible_tid(pid_t pid, int32_t nstid)
{
    char path[64];
    struct dirent *e;
    DIR *d;
    int found = 0;

    snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
    if (!(d = opendir(path)))
        return 0;
    while (!found && (e = readdir(d))) {
        char dir[64];
        int32_t first, last;
        int levels;

        if (!isdigit((unsigned char)e->d_name[0]))
            continue;
        snprintf(dir, sizeof(dir), "%d/task/%.16s", (int)pid, e->d_name);
        if (status_nspid(dir, &first, &last, &levels) == 0 && last == nstid)
            found = first;
    }
    closedir(d);
    return found;
}

bool sim_pid_maps_device(pid_t pid, const char *shm)
{
    char path[64], line[512], want[300];
    bool found = false;
    FILE *f;

    if (!shm)
        return false;
    snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
    snprintf(want, sizeof(want), "/dev/shm%s", shm);
    if (!(f = fopen(path, "re")))
        return false;
    while (!found && fgets(line, sizeof(line), f)) {
        char *p = strstr(line, want);
        found = p && (p[strlen(want)] == '\n' || p[strlen(want)] == '\0');
    }
    fclose(f);
    return found;
}
