/* The fuzz targets' scratch directory; see fuzz.h. */
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/fileio.h"
#include "fuzz.h"

static char scratch[64];

static void remove_scratch(void)
{
    char cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", scratch);
    if (system(cmd) != 0)
        fprintf(stderr, "fuzz: cannot remove %s\n", scratch);
}

const char *fuzz_scratch(const char *name)
{
    static char path[PATH_MAX];

    if (!scratch[0]) {
        /* tmpfs where there is one: fsync and small files cost nothing there */
        snprintf(scratch, sizeof(scratch), "%s/tcgpu-fuzz-XXXXXX",
                 access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
        if (!mkdtemp(scratch)) {
            perror("fuzz: mkdtemp");
            abort();
        }
        atexit(remove_scratch);
    }
    snprintf(path, sizeof(path), "%s/%s", scratch, name);
    return path;
}

void fuzz_write_file(const char *path, const void *data, size_t len)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

    if (fd < 0 || fileio_write_all(fd, data, len) != 0 || close(fd) != 0) {
        perror(path);
        abort();
    }
}
