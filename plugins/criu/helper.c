/*
 * helper.c - tcgpu-criu-helper: what the plugin must not do inside CRIU's
 * process (internal.h, "driver.c").
 *
 *     tcgpu-criu-helper driver state PID          state=N restore_tid=TID
 *     tcgpu-criu-helper driver release PID TIMEOUT_MS
 *     tcgpu-criu-helper driver reacquire PID [OLD=NEW,...]   (UUIDs in hex: a remapping)
 *     tcgpu-criu-helper driver devices            one "device ordinal=..." line each
 *     tcgpu-criu-helper watch IMAGES_FD GPU_IMAGES_FD TIMEOUT_MS
 *
 * driver: one call of the driver's checkpoint API (ckptapi/ckptapi.h), its
 * answer on stdout in the control protocol's syntax; on failure an
 * "error text=..." line and the errno as the exit status.
 *
 * watch: after a dump that CRIU may end either way, gives the dumped tcgpu
 * processes their GPU state back if CRIU lets them run on. Started by the
 * plugin at fini(DUMP) (dump.c) with the two directories as inherited
 * descriptors. It reads the plugin's index, then waits: a process CRIU kills
 * ends its watch; one that is alive and no longer traced once CRIU has let
 * go was left running (runc checkpoint --leave-running, the kubelet's
 * checkpoint API) and gets its context and memory back. Gives up after a day.
 */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "internal.h"
#include "ctl/proto.h"
#include "ctl/recfile.h"
#include "ckptapi/ckptapi.h"
#include "common/hex.h"
#include "common/proc.h"

#define WATCH_LIMIT_MS (24 * 3600 * 1000)
#define POLL_MS 100

static int traced(pid_t pid)
{
    struct tcgpu_proc_status st;

    if (tcgpu_proc_status(pid, 0, &st) < 0)
        return -1;
    return st.tracer > 0;
}

static int exited(int pidfd)
{
    struct pollfd p = { .fd = pidfd, .events = POLLIN };

    return poll(&p, 1, 0) > 0;
}

void tp_watch(struct tp_index *idx, int gpudir, int timeout_ms)
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
                    tp_job_give_back(&idx->proc[i], idx->proc[i].pid, gpudir, timeout_ms, &tp_driver_direct);
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

/* One message line on stdout. */
static void put(struct ctl_buf *b)
{
    long n = ctl_buf_finish(b);

    if (n > 0)
        printf("%.*s\n", (int)n, b->data);
}

static int fail(int r, const char *err)
{
    static struct ctl_buf b;

    ctl_buf_request(&b, "error");
    ctl_buf_put(&b, "text", err);
    put(&b);
    return r < 0 ? -r : 1;
}

static int driver_devices(void)
{
    static struct ctl_buf b;
    struct gdrv_device d[16];
    char err[512], hex[33];
    int n = tp_driver_direct.devices(d, 16, err, sizeof(err));

    if (n < 0)
        return fail(n, err);
    for (int i = 0; i < n && i < 16; i++) {
        ctl_buf_request(&b, "device");
        ctl_buf_put_u64(&b, "ordinal", (uint64_t)d[i].ordinal);
        ctl_buf_put(&b, "name", d[i].name);
        ctl_buf_put_u64(&b, "total_mem", d[i].total_mem);
        hex_put16(d[i].uuid, hex);
        ctl_buf_put(&b, "uuid", hex);
        put(&b);
    }
    return 0;
}

/* "OLD=NEW,OLD=NEW" (hex UUIDs) as the driver's remapping. 0 or -EINVAL. */
static int set_remap(const char *s)
{
    uint8_t olds[16][16], news[16][16];
    char o[33], n[33];
    int k = 0;

    while (*s && k < 16) {
        if (sscanf(s, "%32[0-9a-f]=%32[0-9a-f]", o, n) != 2 || hex_get16(o, olds[k]) ||
            hex_get16(n, news[k]))
            return -EINVAL;
        k++;
        s += 65;
        if (*s == ',')
            s++;
        else if (*s)
            return -EINVAL;
    }
    tp_driver_remap((const uint8_t(*)[16])olds, (const uint8_t(*)[16])news, k);
    return 0;
}

static int driver_main(int argc, char **argv)
{
    static struct ctl_buf b;
    char err[1024], why[512];
    pid_t pid, tid;
    int state, r;

    if (argc == 3 && !strcmp(argv[2], "devices"))
        return driver_devices();
    if (argc < 4 || (pid = (pid_t)atoi(argv[3])) <= 0)
        return fail(-EINVAL, "usage: driver state|release|reacquire PID");
    if (!gdrv_available(why, sizeof(why))) {
        snprintf(err, sizeof(err), "driver checkpoint API not available: %s", why);
        return fail(-ENODEV, err);
    }
    if (!strcmp(argv[2], "state")) {
        if ((r = tp_driver_direct.state(pid, &state, &tid, err, sizeof(err))) < 0)
            return fail(r, err);
        ctl_buf_request(&b, "ok");
        ctl_buf_put_i64(&b, "state", state);
        ctl_buf_put_i64(&b, "restore_tid", tid);
        put(&b);
        return 0;
    }
    if (!strcmp(argv[2], "release") && argc == 5)
        r = tp_driver_direct.release(pid, (unsigned)atoi(argv[4]), err, sizeof(err));
    else if (!strcmp(argv[2], "reacquire") && (argc == 4 || (argc == 5 && set_remap(argv[4]) == 0)))
        r = tp_driver_direct.reacquire(pid, err, sizeof(err));
    else
        return fail(-EINVAL, "usage: driver state|release|reacquire PID");
    return r < 0 ? fail(r, err) : 0;
}

static int watch_main(int argc, char **argv)
{
    static struct tp_index idx;
    int imgdir, gpudir;

    if (argc != 5)
        return fail(-EINVAL, "usage: watch IMAGES_FD GPU_IMAGES_FD TIMEOUT_MS");
    imgdir = atoi(argv[2]);
    gpudir = atoi(argv[3]);
    if (tp_index_read(imgdir, &idx) < 0)
        return 1;
    close(imgdir);
    tp_watch(&idx, gpudir, atoi(argv[4]));
    return 0;
}

int main(int argc, char **argv)
{
    tp_log_setup();
    gdrv_set_library(getenv("TCGPU_REAL_LIBCUDA"));
    if (argc >= 2 && !strcmp(argv[1], "driver"))
        return driver_main(argc, argv);
    if (argc >= 2 && !strcmp(argv[1], "watch"))
        return watch_main(argc, argv);
    fprintf(stderr, "%s: started by %s (plugins/criu/README.md), not by hand\n", TP_HELPER, TP_NAME);
    return 2;
}
