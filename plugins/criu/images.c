/*
 * images.c - where the GPU images of a dump go: <images>/tcgpu/<vpid>,
 * inside CRIU's images directory so that they travel with it (podman's
 * --export tarball, a kubelet checkpoint archive), or under
 * $TCGPU_CRIU_GPU_DIR, which gpuckpt save uses for its save directory's
 * gpu/ (docs/save-restore.md).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

/* Ours alone: a real directory owned by us, no one else may write in it. */
static int check_private(int fd, const char *shown)
{
    struct stat st;

    if (fstat(fd, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() || (st.st_mode & 022)) {
        log_err("%s is not a directory of uid %u that only it may write: refusing it", shown,
                (unsigned)geteuid());
        return -EPERM;
    }
    return 0;
}

int tp_gpu_dir_open(int imgdir, int create)
{
    const char *env = getenv("TCGPU_CRIU_GPU_DIR");
    int fd, r;

    if (env && *env) {
        if (env[0] != '/') {
            log_err("TCGPU_CRIU_GPU_DIR=%s is not an absolute path", env);
            return -EINVAL;
        }
        fd = open(env, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
            r = -errno;
            log_err("GPU images directory %s: %s", env, strerror(errno));
            return r;
        }
    } else {
        if (create && mkdirat(imgdir, TP_GPU_SUBDIR, 0700) < 0 && errno != EEXIST) {
            r = -errno;
            log_err("cannot make %s in CRIU's images directory: %s", TP_GPU_SUBDIR, strerror(errno));
            return r;
        }
        fd = openat(imgdir, TP_GPU_SUBDIR, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
            r = -errno;
            log_err("%s in CRIU's images directory: %s", TP_GPU_SUBDIR,
                    errno == ELOOP || errno == ENOTDIR ? "not a directory" : strerror(errno));
            return r;
        }
    }
    if ((r = check_private(fd, env && *env ? env : TP_GPU_SUBDIR)) < 0) {
        close(fd);
        return r;
    }
    return fd;
}
