/*
 * devices.c - the GPUs tcgpud manages and their capacities; see devices.h.
 *
 * tcgpud learns the devices itself, never from a job (docs/tcgpud.md,
 * "Threat model"): from [gpu N] capacity in its configuration, and from the
 * driver, which a child process asks once at start-up (through
 * lib/ckptapi, the driver from outside a process). The child, not
 * tcgpud, loads libcuda.so.1: a driver that hangs is killed after
 * PROBE_TIMEOUT_MS, one that crashes takes only the child with it, and
 * tcgpud itself holds no device open. The child sees every GPU (no
 * CUDA_VISIBLE_DEVICES), so its ordinals are the node's, and it reports
 * each GPU's UUID: a job names its device by UUID, since its own ordinals
 * are remapped by CUDA_VISIBLE_DEVICES.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ckptapi/ckptapi.h"
#include "common/clock.h"
#include "common/log.h"
#include "daemon.h"
#include "devices.h"

#define PROBE_TIMEOUT_MS 10000
#define PROBE_REPORT_MAX 8192     /* "gpu I TOTAL UUID\n" lines of TCGPUD_MAX_GPUS GPUs */

/* ---------------------------------------------------------------------------
 * The child: load the driver, list the GPUs on fd
 * ------------------------------------------------------------------------- */

/* Writes "gpu I TOTAL UUIDHEX" per GPU (a GPU the driver cannot describe is
 * left out), or "error TEXT"; returns the exit status. */
static int probe_child(int fd)
{
    char err[512];
    int n;

    unsetenv("CUDA_VISIBLE_DEVICES");     /* the node's ordinals, every GPU */
    gdrv_set_library(getenv("TCGPU_REAL_LIBCUDA"));
    if ((n = gdrv_device_count(err, sizeof(err))) < 0) {
        dprintf(fd, "error %s\n", err);
        return 1;
    }
    for (int i = 0; i < n && i < TCGPUD_MAX_GPUS; i++) {
        struct gdrv_device dev;
        if (gdrv_device(i, &dev, NULL, 0) < 0)
            continue;
        dprintf(fd, "gpu %d %" PRIu64 " ", i, dev.total_mem);
        for (int k = 0; k < 16; k++)
            dprintf(fd, "%02x", dev.uuid[k]);
        dprintf(fd, "\n");
    }
    return 0;
}

/* ---------------------------------------------------------------------------
 * The parent: run the child, bounded, and read its report
 * ------------------------------------------------------------------------- */

/* Read until EOF or the deadline. The report's length, or -ETIMEDOUT. */
static long read_report(int fd, char *buf, size_t cap, uint64_t deadline_ms)
{
    size_t n = 0;

    while (n < cap - 1) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        int64_t left = (int64_t)deadline_ms - (int64_t)now_ms();
        ssize_t r;

        if (left <= 0)
            return -ETIMEDOUT;
        if (poll(&p, 1, (int)left) <= 0)
            continue;           /* EINTR, or the deadline check above ends it */
        r = read(fd, buf + n, cap - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        n += (size_t)r;
    }
    buf[n] = '\0';
    return (long)n;
}

static int parse_uuid(const char *hex, uint8_t out[16])
{
    for (int k = 0; k < 16; k++) {
        unsigned v;
        if (sscanf(hex + 2 * k, "%2x", &v) != 1)
            return -1;
        out[k] = (uint8_t)v;
    }
    return hex[32] == '\0' ? 0 : -1;
}

/* The child's report into d.gpus. 0, or -EIO with why (the child's own error). */
static int parse_report(char *buf, char *why, size_t len)
{
    char *save = NULL;

    d.nprobed = 0;
    for (char *line = strtok_r(buf, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        struct tcgpud_gpu g = { 0 };
        unsigned long long total;
        char hex[40];
        int idx;

        if (!strncmp(line, "error ", 6)) {
            snprintf(why, len, "%s", line + 6);
            return -EIO;
        }
        if (sscanf(line, "gpu %d %llu %39s", &idx, &total, hex) != 3 || idx < 0 ||
            idx >= TCGPUD_MAX_GPUS || parse_uuid(hex, g.uuid) < 0 || d.nprobed == TCGPUD_MAX_GPUS)
            continue;
        g.index = idx;
        g.total = total;
        d.gpus[d.nprobed++] = g;
    }
    return 0;
}

/* Ask the driver in a child. 0 with d.gpus filled, or -errno with why. */
static int probe_gpus(char *why, size_t len)
{
    char *buf = malloc(PROBE_REPORT_MAX);
    int fds[2], status = 0, r;
    pid_t pid;
    long n;

    if (!buf || pipe2(fds, O_CLOEXEC) < 0) {
        r = buf ? -errno : -ENOMEM;
        free(buf);
        snprintf(why, len, "cannot start the probe: %s", strerror(-r));
        return r;
    }
    fflush(NULL);
    pid = fork();
    if (pid == 0) {
        close(fds[0]);
        /* exit(), not _exit(): the driver's destructors detach it from the device */
        exit(probe_child(fds[1]));
    }
    close(fds[1]);
    if (pid < 0) {
        r = -errno;
        snprintf(why, len, "cannot fork the probe: %s", strerror(-r));
        goto out;
    }
    n = read_report(fds[0], buf, PROBE_REPORT_MAX, now_ms() + PROBE_TIMEOUT_MS);
    if (n < 0)
        kill(pid, SIGKILL);
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
        ;
    if (n < 0) {
        r = -ETIMEDOUT;
        snprintf(why, len, "the CUDA driver did not answer within %d s", PROBE_TIMEOUT_MS / 1000);
        goto out;
    }
    r = parse_report(buf, why, len);
    if (r == 0 && (!WIFEXITED(status) || WEXITSTATUS(status))) {
        r = -EIO;
        snprintf(why, len, "the driver probe %s", WIFSIGNALED(status) ? "crashed" : "failed");
    }
out:
    close(fds[0]);
    free(buf);
    return r;
}

/* ---------------------------------------------------------------------------
 * What tcgpud manages: the configuration's word, else the driver's
 * ------------------------------------------------------------------------- */

static const struct tcgpud_gpu *probed(int idx)
{
    for (int i = 0; i < d.nprobed; i++)
        if (d.gpus[i].index == idx)
            return &d.gpus[i];
    return NULL;
}

/* The capacity tcgpud manages on GPU idx, 0 when it knows of no such GPU. */
static uint64_t capacity_of(int idx, int probe_ok)
{
    const struct tcgpud_gpu *g = probed(idx);

    for (int i = 0; i < d.cfg.ngpus; i++) {
        uint64_t c = d.cfg.gpus[i].capacity;
        if (d.cfg.gpus[i].id != idx)
            continue;
        if (g && c > g->total) {
            log_info("GPU %d: [gpu %d] capacity %llu MiB is more than the device's %llu MiB: "
                     "managing %llu MiB", idx, idx, (unsigned long long)(c / MiB),
                     (unsigned long long)(g->total / MiB), (unsigned long long)(g->total / MiB));
            return g->total;
        }
        if (!g && probe_ok)
            log_info("GPU %d is configured but the driver does not show it: managing %llu MiB "
                     "as configured", idx, (unsigned long long)(c / MiB));
        return c;
    }
    return g ? g->total : 0;
}

int learn_devices(void)
{
    char why[512];
    int probe_ok = probe_gpus(why, sizeof(why)) == 0;
    int n = 0;

    if (!probe_ok)
        log_info("cannot learn the GPUs from the driver (%s): managing only the configured ones "
                 "([gpu N] capacity)", why);
    for (int idx = 0; idx < TCGPUD_MAX_GPUS; idx++) {
        uint64_t cap = capacity_of(idx, probe_ok);
        if (!cap)
            continue;
        if (policy_set_device(d.pol, idx, cap) < 0)
            return -EINVAL;
        log_info("GPU %d: %llu MiB%s", idx, (unsigned long long)(cap / MiB),
                 probed(idx) && probed(idx)->total == cap ? " (from the driver)" : " (configured)");
        n++;
    }
    if (!n)
        log_info("no GPU known: jobs run without policy until [gpu N] capacity is configured or "
                 "the driver can be loaded");
    return n;
}

/* Hex of a 16-byte UUID as a job sends it (32 digits). */
static int uuid_index(const char *hex)
{
    uint8_t u[16];

    if (parse_uuid(hex, u) < 0)
        return -EINVAL;
    for (int i = 0; i < d.nprobed; i++)
        if (!memcmp(d.gpus[i].uuid, u, 16))
            return d.gpus[i].index;
    return -ENODEV;
}

int job_device(const struct ctl_msg *m, int *dev, char *why, size_t len)
{
    const char *uuid = ctl_get(m, "uuid");
    uint64_t ord = 0;
    int idx;

    if (ctl_get(m, "device") && (ctl_get_u64(m, "device", &ord) < 0 || ord >= TCGPUD_MAX_GPUS)) {
        snprintf(why, len, "device '%s' is not a GPU number", ctl_get(m, "device"));
        return -EINVAL;
    }
    idx = (int)ord;
    /* The UUID wins: the job's ordinal is its own (CUDA_VISIBLE_DEVICES). Without
     * the driver's list tcgpud cannot map it and takes the ordinal. */
    if (uuid && d.nprobed) {
        idx = uuid_index(uuid);
        if (idx == -EINVAL) {
            snprintf(why, len, "uuid '%s' is not 32 hex digits", uuid);
            return -EINVAL;
        }
        if (idx < 0) {
            snprintf(why, len, "GPU %s is not one the driver showed tcgpud", uuid);
            return -ENODEV;
        }
    }
    if (idx >= policy_device_count(d.pol) || policy_device_capacity(d.pol, idx) == 0) {
        snprintf(why, len, "tcgpud does not manage GPU %d (configure [gpu %d] capacity)", idx, idx);
        return -ENODEV;
    }
    *dev = idx;
    return 0;
}

static void uuid_text(const uint8_t u[16], char out[DEVICE_UUID_TEXT_LEN])
{
    static const char hex[] = "0123456789abcdef";
    char *o = out + 4;

    memcpy(out, "GPU-", 4);
    for (int i = 0; i < 16; i++) {
        if (i == 4 || i == 6 || i == 8 || i == 10)
            *o++ = '-';
        *o++ = hex[u[i] >> 4];
        *o++ = hex[u[i] & 15];
    }
    *o = '\0';
}

void device_uuid_text(int idx, char out[DEVICE_UUID_TEXT_LEN])
{
    const struct tcgpud_gpu *g = probed(idx);

    out[0] = '\0';
    if (g)
        uuid_text(g->uuid, out);
}

int device_of_uuid_text(const char *text)
{
    char u[DEVICE_UUID_TEXT_LEN];

    for (int i = 0; i < d.nprobed; i++) {
        uuid_text(d.gpus[i].uuid, u);
        if (!strcmp(u, text))
            return d.gpus[i].index;
    }
    return -ENODEV;
}
