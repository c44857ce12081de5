/*
 * keep.c - device memory the simulated device keeps after a free.
 *
 * A GPU's memory never goes back to the host: what one process frees,
 * the next allocates warm, whatever process it is and however much later.
 * A simulated device's bytes are host pages, and these VMs hand freed
 * pages back to their hypervisor: a shareable allocation (a memfd, vmm.c)
 * then faults every 4 KiB page anew, 1.2-1.3 CPU-s per GiB here, which
 * is most of what a restore into fresh device memory costs (issue 39).
 *
 * With SIMCUDA_DEVICE_KEEP=SECONDS (off when unset or 0), a shareable
 * allocation is a file of /dev/shm made with O_TMPFILE instead of a
 * memfd, and when it is freed, if no other process can hold it (it was
 * never exported), it is linked back into /dev/shm as
 *
 *     <machine>.keep.<physical device>.<bytes>.<random>
 *
 * rather than dropped. The next allocation of that size on that device,
 * in any process of the machine, claims it by renaming it to a name of its
 * own (atomic: one claimant wins), maps it populated and zeroes it: the
 * driver never hands a process another's bytes. What is kept is bounded by
 * the device: kept + allocated bytes never exceed its capacity (the oldest
 * go first), and a file kept longer than SECONDS is removed by the next
 * process that frees or allocates on that machine. Nothing removes them
 * once no process uses the machine: whoever removes the machine
 * (/dev/shm<machine>) removes <machine>.keep.* with it. That is why it is
 * not the default: every test makes a machine of its own.
 *
 * Kept files are private to the user who freed them (0600); another
 * user's, a link, or a file of the wrong size found under such a name is
 * never claimed.
 */
#include "sim.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define KEEP_DIR "/dev/shm"

/* SIMCUDA_DEVICE_KEEP in seconds, 0 when off; read once. */
static long keep_seconds(void)
{
    static long secs = -1;
    long s = __atomic_load_n(&secs, __ATOMIC_RELAXED);

    if (s < 0) {
        const char *e = getenv("SIMCUDA_DEVICE_KEEP");
        char *end;

        s = e && *e ? strtol(e, &end, 10) : 0;
        if (!e || !*e || *end || s < 0)
            s = 0;
        __atomic_store_n(&secs, s, __ATOMIC_RELAXED);
    }
    return s;
}

bool sim_keep_enabled(void)
{
    return keep_seconds() > 0 && sim_shm_name();
}

/* "<machine>.keep." without the machine's leading '/'. */
static void keep_prefix(char *out, size_t len)
{
    const char *m = sim_shm_name();

    snprintf(out, len, "%s.keep.", m[0] == '/' ? m + 1 : m);
}

/* A kept file's name parsed: device and size; false when it is not one of
 * this machine's. */
static bool parse_kept(const char *name, const char *prefix, int *phys, uint64_t *bytes)
{
    size_t plen = strlen(prefix);
    char hex[17];
    int n = 0;

    if (strncmp(name, prefix, plen))
        return false;
    return sscanf(name + plen, "%d.%" SCNu64 ".%16[0-9a-f]%n", phys, bytes, hex, &n) == 3 &&
           name[plen + (size_t)n] == 0 && strlen(hex) == 16;
}

/* A file of ours that a process claimed (claim()) and that has died since
 * without giving it back. */
static bool held_by_the_dead(int dirfd, const char *name, const char *prefix)
{
    const char *dot = strstr(name, ".claimed.");
    struct stat st;
    char *end;
    long pid;

    if (strncmp(name, prefix, strlen(prefix)) || !dot)
        return false;
    pid = strtol(dot + 9, &end, 10);
    return *end == 0 && pid > 0 && kill((pid_t)pid, 0) < 0 && errno == ESRCH &&
           fstatat(dirfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISREG(st.st_mode) &&
           st.st_uid == geteuid();
}

struct kept {
    char name[NAME_MAX + 1];
    uint64_t bytes;
    struct timespec mtime;
};

static int older_first(const void *a, const void *b)
{
    const struct timespec *x = &((const struct kept *)a)->mtime, *y = &((const struct kept *)b)->mtime;

    return x->tv_sec != y->tv_sec ? (x->tv_sec < y->tv_sec ? -1 : 1)
                                  : (x->tv_nsec < y->tv_nsec ? -1 : x->tv_nsec > y->tv_nsec);
}

/*
 * The files kept for physical device phys, oldest first, with those kept
 * past their time removed on the way. *out is malloc'ed (free it); the
 * count, or -1 when /dev/shm cannot be read.
 */
static int list_kept(int dirfd, int phys, struct kept **out)
{
    char prefix[128];
    struct kept *v = NULL;
    struct dirent *d;
    struct stat st;
    time_t now = time(NULL);
    int n = 0, cap = 0, again = dup(dirfd), p;
    uint64_t bytes;
    DIR *dir;

    if (again < 0 || !(dir = fdopendir(again))) {
        if (again >= 0)
            close(again);
        return -1;
    }
    keep_prefix(prefix, sizeof(prefix));
    while ((d = readdir(dir))) {
        if (held_by_the_dead(dirfd, d->d_name, prefix)) {
            unlinkat(dirfd, d->d_name, 0);      /* claimed by a process killed since */
            continue;
        }
        if (!parse_kept(d->d_name, prefix, &p, &bytes) || p != phys ||
            fstatat(dirfd, d->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode) ||
            st.st_uid != geteuid())
            continue;
        if (now - st.st_mtim.tv_sec > keep_seconds()) {
            unlinkat(dirfd, d->d_name, 0);      /* kept past its time */
            continue;
        }
        if (n == cap) {
            struct kept *nv = realloc(v, (size_t)(cap = cap ? 2 * cap : 16) * sizeof(*v));

            if (!nv)
                break;
            v = nv;
        }
        snprintf(v[n].name, sizeof(v[n].name), "%s", d->d_name);
        v[n].bytes = bytes;
        v[n].mtime = st.st_mtim;
        n++;
    }
    closedir(dir);
    if (n > 1)
        qsort(v, (size_t)n, sizeof(*v), older_first);
    *out = v;
    return n;
}

/* Remove the oldest kept files of phys until kept + allocated + extra bytes
 * fit the device. */
static void trim(int dirfd, int phys, uint64_t extra)
{
    struct kept *v = NULL;
    uint64_t kept = 0, used, cap;
    int n = list_kept(dirfd, phys, &v);

    for (int i = 0; i < n; i++)
        kept += v[i].bytes;
    sim_shm_lock(sim_shm);
    used = sim_shm->used[phys];
    cap = sim_shm->capacity[phys];
    sim_shm_unlock(sim_shm);
    for (int i = 0; i < n && kept + used + extra > cap; i++)
        if (unlinkat(dirfd, v[i].name, 0) == 0)
            kept -= v[i].bytes;
    free(v);
}

/* The name a process gives a kept file it claimed, while it holds it. */
static int claimed_name(char *out, size_t len, const char *kept, pid_t pid)
{
    return snprintf(out, len, "%s.claimed.%d", kept, (int)pid) < (int)len ? 0 : -1;
}

/* Claim the kept file `name` (dirfd): renamed to a name of our own first, so
 * that of several claimants one gets it. It keeps that name while it is
 * allocated: only a file that has a name can be kept again (an O_TMPFILE
 * file can be linked once). An open descriptor, or -1. */
static int claim(int dirfd, const char *name, uint64_t file_len)
{
    char mine[NAME_MAX + 1];
    struct stat st;
    int fd;

    if (claimed_name(mine, sizeof(mine), name, getpid()) < 0 || renameat(dirfd, name, dirfd, mine) < 0)
        return -1;
    fd = openat(dirfd, mine, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    /* what the name promised: ours, one link, a regular file at least as
     * long as asked */
    if (fd < 0 || fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid() ||
        st.st_nlink != 1 || (uint64_t)st.st_size < file_len || ftruncate(fd, (off_t)file_len) < 0) {
        unlinkat(dirfd, mine, 0);
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

int sim_keep_take(int phys, uint64_t bytes, uint64_t file_len)
{
    int dirfd, fd = -1, n, best = -1;
    struct kept *v = NULL;

    if (!sim_keep_enabled() || (dirfd = open(KEEP_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        return -1;
    n = list_kept(dirfd, phys, &v);
    /* the smallest file that holds the allocation: exact sizes are the rule
     * (a restore allocates what the save freed), a larger one is cut */
    for (int i = 0; i < n; i++)
        if (v[i].bytes >= bytes && (best < 0 || v[i].bytes < v[best].bytes))
            best = i;
    if (best >= 0)
        fd = claim(dirfd, v[best].name, file_len);
    free(v);
    if (fd < 0)
        trim(dirfd, phys, 0);   /* fresh bytes: what is kept makes room for them */
    close(dirfd);
    return fd;
}

int sim_keep_create(uint64_t file_len)
{
    int fd = open(KEEP_DIR, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);

    if (fd >= 0 && ftruncate(fd, (off_t)file_len) < 0) {
        close(fd);
        fd = -1;
    }
    return fd;
}

/*
 * The name fd has in dirfd if it is a file this process claimed (claim()):
 * into name, 0; else -1 (a fresh O_TMPFILE file, or a memfd).
 */
static int our_claimed_name(int dirfd, int fd, char *name, size_t len)
{
    char link[64], target[PATH_MAX], prefix[128];
    const char *base;
    struct stat a, b;
    ssize_t n;
    char *dot;

    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    if ((n = readlink(link, target, sizeof(target) - 1)) < 0)
        return -1;
    target[n] = 0;
    keep_prefix(prefix, sizeof(prefix));
    base = target + strlen(KEEP_DIR "/");
    if (strncmp(target, KEEP_DIR "/", strlen(KEEP_DIR "/")) || strncmp(base, prefix, strlen(prefix)) ||
        !(dot = strstr(base, ".claimed.")) || atoi(dot + 9) != (int)getpid() ||
        snprintf(name, len, "%s", base) >= (int)len)
        return -1;
    /* the name is still the descriptor's */
    if (fstat(fd, &a) < 0 || fstatat(dirfd, name, &b, AT_SYMLINK_NOFOLLOW) < 0 || a.st_ino != b.st_ino ||
        a.st_dev != b.st_dev)
        return -1;
    return 0;
}

void sim_keep_release(int fd, int phys, uint64_t bytes, bool keep)
{
    char path[64], name[NAME_MAX + 1], prefix[128], claimed[NAME_MAX + 1];
    bool has_name;
    uint64_t rnd;
    int dirfd;

    if (!sim_keep_enabled() || (dirfd = open(KEEP_DIR, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
        return;
    has_name = our_claimed_name(dirfd, fd, claimed, sizeof(claimed)) == 0;
    if (keep) {
        trim(dirfd, phys, bytes);
        keep_prefix(prefix, sizeof(prefix));
        if (getrandom(&rnd, sizeof(rnd), 0) == (ssize_t)sizeof(rnd) &&
            snprintf(name, sizeof(name), "%s%d.%" PRIu64 ".%016" PRIx64, prefix, phys, bytes, rnd) <
                (int)sizeof(name)) {
            futimens(fd, NULL);     /* mtime says since when it is kept */
            snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
            /* a claimed file is renamed; a fresh O_TMPFILE one linked through
             * /proc (linkat AT_EMPTY_PATH would need CAP_DAC_READ_SEARCH) */
            if (has_name ? renameat(dirfd, claimed, dirfd, name) == 0
                         : linkat(AT_FDCWD, path, dirfd, name, AT_SYMLINK_FOLLOW) == 0 || errno == EXDEV)
                has_name = false;
            else
                sim_log("device memory not kept: %s/%s: %s", KEEP_DIR, name, strerror(errno));
        }
    }
    if (has_name)
        unlinkat(dirfd, claimed, 0);    /* not kept: its name goes, its holders keep its bytes */
    close(dirfd);
}
