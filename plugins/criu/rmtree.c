/*
 * rmtree.c - removing what a failed or repeated dump left of a GPU image,
 * under a directory descriptor, never following a symbolic link (an image
 * directory may have been written by the job, which we do not trust).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include "rmtree.h"

#define MAX_DEPTH 4             /* an image is flat; a stage holds one image */

static int rm_at(int parent, const char *name, int depth)
{
    struct dirent *e;
    DIR *d;
    int fd, r = 0;

    if (unlinkat(parent, name, 0) == 0 || errno == ENOENT)
        return 0;
    if ((errno != EISDIR && errno != EPERM) || depth >= MAX_DEPTH)
        return -errno;
    fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || !(d = fdopendir(fd))) {
        if (fd >= 0)
            close(fd);
        return -errno;
    }
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..") && r == 0)
            r = rm_at(dirfd(d), e->d_name, depth + 1);
    closedir(d);
    if (r == 0 && unlinkat(parent, name, AT_REMOVEDIR) < 0 && errno != ENOENT)
        r = -errno;
    return r;
}

int tp_rmtree_at(int parent, const char *name)
{
    return rm_at(parent, name, 0);
}
