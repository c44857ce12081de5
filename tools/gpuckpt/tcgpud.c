/*
 * tcgpud.c - gpuckpt's side of tcgpud: `run --project`, the call, and
 * suspend/resume through tcgpud. See tcgpud.h (ps.c and events.c list
 * tcgpud's jobs and events).
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "ctl/client.h"
#include "ctl/proto.h"
#include "ctl/daemon_io.h"
#include "tcgpud.h"
#include "util.h"
#include "common/units.h"

/* ---------------------------------------------------------------------------
 * run --project ...
 * ------------------------------------------------------------------------- */

int gpuckpt_tcgpud_run_option(int opt, const char *arg)
{
    uint64_t v;
    uint32_t ppm;
    char *end;

    switch (opt) {
    case GPUCKPT_OPT_PROJECT:
        if (!*arg)
            return gpuckpt_usage_error("run", "--project wants a project name");
        setenv("TCGPU_PROJECT", arg, 1);
        return 0;
    case GPUCKPT_OPT_PRIORITY:
        errno = 0;
        long p = strtol(arg, &end, 10);
        if (errno || end == arg || *end || p < -1000000 || p > 1000000)
            return gpuckpt_usage_error("run", "--priority %s: not an integer in -1000000..1000000",
                                       arg);
        setenv("TCGPU_PRIORITY", arg, 1);
        return 0;
    case GPUCKPT_OPT_GPU_MEM:
        if ((units_parse_size(arg, &v) < 0 || v == 0) && units_parse_percent(arg, &ppm) < 0)
            return gpuckpt_usage_error("run", "--gpu-mem %s: not a size (a decimal number with K, "
                                       "M, G or T: 8G, 512M, 1.5G) or a share of the GPU "
                                       "(25%%, 12.5%%)", arg);
        setenv("TCGPU_GPU_MEM", arg, 1);
        return 0;
    case GPUCKPT_OPT_WAIT_TIMEOUT:
        if (units_parse_duration(arg, &v) < 0)
            return gpuckpt_usage_error("run", "--wait-timeout %s: not a duration (60s, 500ms, "
                                       "10m)", arg);
        setenv("TCGPU_WAIT_TIMEOUT", arg, 1);
        return 0;
    case GPUCKPT_OPT_DAEMON_SOCKET:
        setenv("TCGPU_DAEMON_SOCKET", arg, 1);
        return 0;
    case GPUCKPT_OPT_GPU_COMPUTE:
        errno = 0;
        long pct = strtol(arg, &end, 10);
        if (errno || end == arg || (*end && strcmp(end, "%")) || pct < 1 || pct > 100)
            return gpuckpt_usage_error("run", "--gpu-compute wants a percentage, 1%%..100%% (e.g. 30%%)");
        setenv("TCGPU_GPU_COMPUTE", arg, 1);
        return 0;
    case GPUCKPT_OPT_JOB:
        if (!*arg || strlen(arg) > 63 || strspn(arg, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
                                                     "0123456789._:-") != strlen(arg))
            return gpuckpt_usage_error("run", "--job wants a name of 1..63 of [A-Za-z0-9._:-]");
        setenv("TCGPU_JOB", arg, 1);
        return 0;
    }
    return gpuckpt_usage_error("run", "unknown tcgpud option %d", opt);
}

/* ---------------------------------------------------------------------------
 * Talking to tcgpud
 * ------------------------------------------------------------------------- */

const char *gpuckpt_daemon_socket(void)
{
    return tcgpud_socket_path(getenv("TCGPU_DAEMON_SOCKET"));
}

int gpuckpt_daemon_call(const char *cmd, struct ctl_buf *req, struct ctl_msg *rep, int timeout_ms,
                        tcgpud_msg_fn fn, void *arg, int quiet_noent)
{
    char err[512];
    int fd = tcgpud_connect(gpuckpt_daemon_socket(), err, sizeof(err));
    int r;

    if (fd < 0) {
        if (!quiet_noent)
            gpuckpt_error("%s: %s", cmd, err);
        return CTL_EXIT_NOPROC;
    }
    r = tcgpud_call(fd, req, rep, timeout_ms, fn, arg);
    close(fd);
    if (r < 0) {
        gpuckpt_error("%s: tcgpud at %s: %s", cmd, gpuckpt_daemon_socket(),
                      r == -ETIMEDOUT ? "no reply in time"
                      : r == -ECONNRESET ? "it closed the connection without an answer (is it "
                                           "restarting? see its log)"
                      : strerror(-r));
        return ctl_exit_code(r, 0);
    }
    return CTL_EXIT_OK;
}

int gpuckpt_tcgpud_op(const char *cmd, pid_t pid, const char *dir, int auto_resume,
                      int timeout_ms, struct ctl_msg *rep)
{
    struct ctl_buf *req = malloc(sizeof(*req));
    int r = -1;

    if (!req || !gpuckpt_daemon_socket()[0] || access(gpuckpt_daemon_socket(), F_OK) < 0)
        goto out;
    ctl_buf_request(req, cmd);
    ctl_buf_put_u64(req, "pid", (uint64_t)pid);
    if (dir)
        ctl_buf_put(req, "dir", dir);
    if (auto_resume)
        ctl_buf_put_u64(req, "auto_resume", 1);
    r = gpuckpt_daemon_call(cmd, req, rep, timeout_ms, NULL, NULL, 1);
    if (r == CTL_EXIT_NOPROC) {
        r = -1;                   /* no daemon after all: go direct */
        goto out;
    }
    if (r != CTL_EXIT_OK)
        goto out;
    if (rep->err == -ENOENT) {
        r = -1;                   /* not one of tcgpud's jobs */
        goto out;
    }
    if (rep->err) {
        /* tcgpud relays the job's own answer, which may already start
         * with the errno's name: say it once */
        size_t n = strlen(rep->err_name);
        const char *text = rep->err_text;
        if (n && !strncmp(text, rep->err_name, n) && !strncmp(text + n, ": ", 2))
            text += n + 2;
        gpuckpt_note_errno(rep->err_name);
        gpuckpt_error("%s %d (through tcgpud): %s: %s", cmd, (int)pid, rep->err_name, text);
        r = ctl_exit_code(rep->err, 1);
        goto out;
    }
    r = CTL_EXIT_OK;
out:
    free(req);
    return r;
}

/* A "line" of gpuckpt's output on tcgpud's side, where it would have gone. */
static void print_line(const struct ctl_msg *m, void *arg)
{
    const char *text = ctl_get(m, "text"), *stream = ctl_get(m, "stream");

    (void)arg;
    if (strcmp(m->word, "line") || !text)
        return;
    fprintf(stream && !strcmp(stream, "out") ? stdout : stderr, "%s\n", text);
    fflush(NULL);
}

int gpuckpt_tcgpud_privileged(const char *word, pid_t pid, const char *dir,
                              const char *const *flags, const char *root_why)
{
    char why[512];
    struct ctl_buf *req = malloc(sizeof(*req));
    struct ctl_msg *rep = malloc(sizeof(*rep));
    uint64_t code = CTL_EXIT_FAILED;
    int r = CTL_EXIT_FAILED;

    if (!req || !rep)
        goto out;
    ctl_buf_request(req, word);
    if (pid)
        ctl_buf_put_u64(req, "pid", (uint64_t)pid);
    ctl_buf_put(req, "dir", dir);
    for (; flags && *flags; flags++)
        ctl_buf_put(req, *flags, "1");
    /* no deadline: a save takes as long as the GPU images, a restore as the tree runs */
    r = gpuckpt_daemon_call(word, req, rep, -1, print_line, NULL, 1);
    if (r == CTL_EXIT_NOPROC) {
        snprintf(why, sizeof(why), "%s, and no tcgpud (at %s) does it for this user", root_why,
                 gpuckpt_daemon_socket());
        r = gpuckpt_needs_root(word, why);
        goto out;
    }
    if (r != CTL_EXIT_OK)
        goto out;
    if (rep->err) {
        gpuckpt_error("%s: tcgpud: %s", word, rep->err_text);
        r = ctl_exit_code(rep->err, 1);
        goto out;
    }
    if (ctl_get_u64(rep, "exit", &code) < 0 || code > 255)
        code = CTL_EXIT_FAILED;
    r = (int)code;
out:
    free(req);
    free(rep);
    return r;
}
