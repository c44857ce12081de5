/*
 * watch.c - tcgpu-criu-watch: after a dump that CRIU may end either way,
 * gives the dumped tcgpu processes their GPU state back if CRIU lets them
 * run on.
 *
 *     tcgpu-criu-watch IMAGES_FD GPU_IMAGES_FD TIMEOUT_MS
 *
 * Started by the plugin at fini(DUMP) (dump.c) with the two directories as
 * inherited descriptors. It reads the plugin's index, then waits: a process
 * CRIU kills ends its watch; one that is alive and no longer traced once
 * CRIU has let go was left running (runc checkpoint --leave-running, the
 * kubelet's checkpoint API) and gets its context and memory back. Its driver
 * is its own, loaded fresh. Gives up after a day.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "plugin.h"

#define WATCH_LIMIT_MS (24 * 3600 * 1000)
#define POLL_MS 100

static int traced(pid_t pid)
{
    char path[64], line[256];
    long tracer = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    if (!(f = fopen(path, "re")))
        return -1;
    while (fgets(line, sizeof(line), f))
        if (!strncmp(line, "TracerPid:", 10))
            tracer = strtol(line + 10, NULL, 10);
    fclose(f);
    return tracer > 0;
}

static int exited(int pidfd)
{
    struct pollfd p = { .fd = pidfd, .events = POLLIN };

    return poll(&p, 1, 0) > 0;
}

static void watch(struct tp_index *idx, int gpudir, int timeout_ms)
{
    int fds[TP_MAX_PROCS];

    for (int i = 0; i < idx->n; i++)
        fds[i] = (int)syscall(SYS_pidfd_open, idx->proc[i].pid, 0);
    for (int waited = 0; waited < WATCH_LIMIT_MS; waited += POLL_MS) {
        int left = 0;

        for (int i = 0; i < idx->n; i++) {
            if (fds[i] < 0)
                continue;
            if (exited(fds[i])) {
                close(fds[i]);          /* CRIU ended it */
                fds[i] = -1;
                continue;
            }
            if (traced(idx->proc[i].pid) == 0) {
                /* let go alive; a kill sent just before letting go would land now */
                usleep(200000);
                if (!exited(fds[i]))
                    tp_job_give_back(&idx->proc[i], idx->proc[i].pid, gpudir, timeout_ms);
                close(fds[i]);
                fds[i] = -1;
                continue;
            }
            left++;
        }
        if (!left)
            return;
        usleep(POLL_MS * 1000);
    }
}

int main(int argc, char **argv)
{
    static struct tp_index idx;
    int imgdir, gpudir, timeout_ms;

    if (argc != 4) {
        fprintf(stderr, "usage: %s IMAGES_FD GPU_IMAGES_FD TIMEOUT_MS (started by %s)\n", argv[0],
                TP_NAME);
        return 2;
    }
    imgdir = atoi(argv[1]);
    gpudir = atoi(argv[2]);
    timeout_ms = atoi(argv[3]);
    if (tp_index_read(imgdir, &idx) < 0)
        return 1;
    close(imgdir);
    watch(&idx, gpudir, timeout_ms);
    return 0;
}
