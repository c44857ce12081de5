/*
 * driver.c - the driver's checkpoint API for the plugin: directly (in
 * tcgpu-criu-helper) or through the helper (in CRIU's process); internal.h
 * says why there are two.
 *
 * The helper's protocol: `tcgpu-criu-helper driver OP PID [ARG]`; it
 * prints one message in the control protocol's syntax (ctl/proto.h) per
 * line on stdout and exits with 0, or with the errno of the failure after
 * printing "error text=...".
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "internal.h"
#include "common/clock.h"
#include "common/hex.h"
#include "ctl/proto.h"
#include "ctl/recfile.h"
#include "ckptapi/ckptapi.h"

#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

#define HELPER_GRACE_MS 30000   /* beyond the operation's own timeout */
#define HELPER_OUT_MAX 65536

/* The remapping for reacquire, kept here for the helper's command line. */
static uint8_t remap_old[16][16], remap_new[16][16];
static int nremap;

void tp_driver_remap(const uint8_t (*old_uuid)[16], const uint8_t (*new_uuid)[16], int n)
{
    nremap = n < 16 ? n : 16;
    memcpy(remap_old, old_uuid, (size_t)nremap * 16);
    memcpy(remap_new, new_uuid, (size_t)nremap * 16);
    gdrv_set_remap((const uint8_t(*)[16])remap_old, (const uint8_t(*)[16])remap_new, nremap);
}

/* ---- directly --------------------------------------------------------------------------- */

static int direct_state(pid_t pid, int *state, pid_t *restore_tid, char *err, size_t len)
{
    int r = gdrv_get_state(pid, state, err, len);

    *restore_tid = 0;
    if (r == 0 && gdrv_restore_tid(pid, restore_tid, NULL, 0) < 0)
        *restore_tid = 0;
    return r;
}

static int direct_devices(struct gdrv_device *devs, int max, char *err, size_t len)
{
    char why[512];

    if (!gdrv_available(why, sizeof(why))) {
        snprintf(err, len, "driver checkpoint API not available: %s", why);
        return -ENODEV;
    }
    return gdrv_devices(devs, max, err, len);
}

const struct tp_driver tp_driver_direct = {
    .state = direct_state,
    .release = gdrv_release,
    .reacquire = gdrv_reacquire,
    .devices = direct_devices,
};

/* ---- through the helper -------------------------------------------------------------------- */

/* Reads the child's output into out until it closes it or the deadline passes. */
static int read_until(int fd, char *out, size_t len, uint64_t deadline_ms)
{
    size_t n = 0;

    for (;;) {
        struct pollfd p = { .fd = fd, .events = POLLIN };
        int64_t left = (int64_t)deadline_ms - (int64_t)now_ms();
        ssize_t got;

        if (left <= 0)
            return -ETIMEDOUT;
        if (poll(&p, 1, left > INT_MAX ? INT_MAX : (int)left) < 0 && errno != EINTR)
            return -errno;
        got = read(fd, out + n, n + 1 < len ? len - 1 - n : 0);
        if (got == 0 || (got < 0 && errno != EINTR && errno != EAGAIN)) {
            out[n] = '\0';
            return 0;
        }
        if (got > 0)
            n += (size_t)got;
        if (n + 1 >= len) {
            char sink[4096];    /* more than we keep: drain to let it finish */
            while (read(fd, sink, sizeof(sink)) > 0)
                ;
            out[n] = '\0';
            return 0;
        }
    }
}

/* Runs the helper with args; its stdout into out. Its exit status as -errno, or 0. */
static int run_helper(const char *const args[], int timeout_ms, char *out, size_t len)
{
    char exe[PATH_MAX];
    const char *argv[8];
    int pfd[2], st, r, n = 0;

    /* args: at most 6 */
    pid_t child;

    out[0] = '\0';
    if (tp_helper_path(exe, sizeof(exe)) < 0) {
        snprintf(out, len, "error text=no%%20" TP_HELPER "%%20beside%%20the%%20plugin\n");
        return -ENOENT;
    }
    argv[n++] = exe;
    for (int i = 0; args[i] && n < 7; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    if (pipe2(pfd, O_CLOEXEC) < 0)
        return -errno;
    if ((child = fork()) < 0) {
        r = -errno;
        close(pfd[0]);
        close(pfd[1]);
        return r;
    }
    if (child == 0) {
        int null = open("/dev/null", O_RDONLY);

        dup2(null, 0);
        dup2(pfd[1], 1);
        dup2(pfd[1], 2);
        syscall(SYS_close_range, 3, ~0U, CLOSE_RANGE_CLOEXEC);   /* nothing of CRIU's */
        execv(exe, (char *const *)argv);
        _exit(127);
    }
    close(pfd[1]);
    r = read_until(pfd[0], out, len, now_ms() + (uint64_t)timeout_ms + HELPER_GRACE_MS);
    close(pfd[0]);
    if (r == -ETIMEDOUT)
        kill(child, SIGKILL);
    while (waitpid(child, &st, 0) < 0 && errno == EINTR)
        ;
    if (r < 0)
        return r;
    if (!WIFEXITED(st))
        return -EIO;
    return -WEXITSTATUS(st);
}

/* The helper's failure message (its "error text=" line, or what it said) into err. */
static void helper_error(const char *out, int r, char *err, size_t len)
{
    struct ctl_msg *m = malloc(sizeof(*m));
    const char *nl = strchr(out, '\n');

    if (m && nl && ctl_parse(out, (size_t)(nl - out), m) == 0 && !strcmp(m->word, "error") &&
        ctl_get(m, "text"))
        snprintf(err, len, "%s", ctl_get(m, "text"));
    else if (r == -127 || r == -ENOENT)
        snprintf(err, len, "%s cannot be run", TP_HELPER);
    else
        snprintf(err, len, "%s failed (%s): %.200s", TP_HELPER, strerror(-r), out);
    free(m);
}

static int helper_call(const char *const args[], int timeout_ms, char *out, size_t outlen,
                       char *err, size_t len)
{
    int r = run_helper(args, timeout_ms, out, outlen);

    if (r < 0 && err)
        helper_error(out, r, err, len);
    return r;
}

static int helper_state(pid_t pid, int *state, pid_t *restore_tid, char *err, size_t len)
{
    char spid[16], out[1024];
    const char *args[] = { "driver", "state", spid, NULL };
    struct ctl_msg *m;
    int64_t v;
    int r;

    snprintf(spid, sizeof(spid), "%d", (int)pid);
    *state = GDRV_NONE;
    *restore_tid = 0;
    if ((r = helper_call(args, 10000, out, sizeof(out), err, len)) < 0)
        return r;
    if (!(m = malloc(sizeof(*m))))
        return -ENOMEM;
    if (ctl_parse(out, strcspn(out, "\n"), m) < 0 || ctl_get_i64(m, "state", &v) < 0) {
        snprintf(err, len, "%s: unreadable answer: %.200s", TP_HELPER, out);
        r = -EPROTO;
    } else {
        *state = (int)v;
        if (ctl_get_i64(m, "restore_tid", &v) == 0)
            *restore_tid = (pid_t)v;
    }
    free(m);
    return r;
}

static int helper_release(pid_t pid, unsigned timeout_ms, char *err, size_t len)
{
    char spid[16], sto[16], out[1024];
    const char *args[] = { "driver", "release", spid, sto, NULL };

    snprintf(spid, sizeof(spid), "%d", (int)pid);
    snprintf(sto, sizeof(sto), "%u", timeout_ms);
    return helper_call(args, (int)timeout_ms, out, sizeof(out), err, len);
}

static int helper_reacquire(pid_t pid, char *err, size_t len)
{
    char spid[16], out[1024], pairs[16 * 66] = "", o[33], n[33];
    const char *args[] = { "driver", "reacquire", spid, pairs, NULL };
    size_t at = 0;

    snprintf(spid, sizeof(spid), "%d", (int)pid);
    /* OLD=NEW,OLD=NEW... (hex UUIDs), or nothing */
    for (int i = 0; i < nremap; i++) {
        hex_put16(remap_old[i], o);
        hex_put16(remap_new[i], n);
        at += (size_t)snprintf(pairs + at, sizeof(pairs) - at, "%s%s=%s", i ? "," : "", o, n);
    }
    if (!nremap)
        args[3] = NULL;
    return helper_call(args, 60000, out, sizeof(out), err, len);
}

static int parse_device(const char *line, size_t n, struct gdrv_device *d)
{
    struct ctl_msg *m = malloc(sizeof(*m));
    uint64_t ord;
    int r = -EPROTO;

    if (m && ctl_parse(line, n, m) == 0 && !strcmp(m->word, "device") &&
        ctl_get_u64(m, "ordinal", &ord) == 0 && ord < 64 &&
        ctl_get_u64(m, "total_mem", &d->total_mem) == 0 && ctl_get(m, "name") &&
        hex_get16(ctl_get(m, "uuid"), d->uuid) == 0) {
        d->ordinal = (int)ord;
        snprintf(d->name, sizeof(d->name), "%s", ctl_get(m, "name"));
        r = 0;
    }
    free(m);
    return r;
}

static int helper_devices(struct gdrv_device *devs, int max, char *err, size_t len)
{
    const char *args[] = { "driver", "devices", NULL };
    char *out = malloc(HELPER_OUT_MAX);
    int n = 0, r;

    if (!out)
        return -ENOMEM;
    if ((r = helper_call(args, 10000, out, HELPER_OUT_MAX, err, len)) < 0)
        goto done;
    for (char *s = out, *nl; (nl = strchr(s, '\n')) && n < max; s = nl + 1) {
        if ((r = parse_device(s, (size_t)(nl - s), &devs[n])) < 0) {
            snprintf(err, len, "%s: unreadable device line", TP_HELPER);
            goto done;
        }
        n++;
    }
    r = n;
done:
    free(out);
    return r;
}

const struct tp_driver tp_driver_helper = {
    .state = helper_state,
    .release = helper_release,
    .reacquire = helper_reacquire,
    .devices = helper_devices,
};
