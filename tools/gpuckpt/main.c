/*
 * gpuckpt - checkpoint, suspend and resume GPU programs running under tcgpu.
 *
 *   gpuckpt run [OPTIONS] [--] CMD [ARG...]
 *   gpuckpt status PID [--json]
 *   gpuckpt checkpoint PID -D DIR
 *   gpuckpt suspend PID [-D DIR]
 *   gpuckpt resume PID
 *   gpuckpt inspect DIR [--json]
 *   gpuckpt verify DIR
 *
 * Exit codes (docs/cli.md; scripts rely on them): see enum ctl_exit in
 * lib/ctl/client.h.
 */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "ctl/client.h"
#include "ctl/proto.h"
#include "gpuckpt.h"
#include "tcgpud.h"
#include "driver.h"
#include "util.h"
#include "common/signals.h"
#include "tcgpu.h"
#include "common/clock.h"
#include "common/names.h"
#include "common/units.h"

#ifndef TCGPU_INSTALL_LIBDIR
#define TCGPU_INSTALL_LIBDIR "/usr/local/lib"
#endif

/* ---------------------------------------------------------------------------
 * Help
 * ------------------------------------------------------------------------- */

struct command {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *usage;
    const char *help;
};

static const struct command *find_command(const char *name);

static void print_usage(FILE *f)
{
    fprintf(f,
        "usage: gpuckpt COMMAND [ARGS]\n"
        "\n"
        "Checkpoint, suspend and resume GPU programs running under tcgpu.\n"
        "\n"
        "commands:\n"
        "  run [OPTIONS] [--] CMD [ARG...]   run CMD with libtcgpu.so preloaded\n"
        "  status PID [--json]               state, memory and last operation of PID\n"
        "  checkpoint PID -D DIR [--parent P] write an image of PID's GPU state to DIR; PID goes on\n"
        "                                    (--parent P|auto: incremental against image P, or\n"
        "                                    against PID's previous checkpoint)\n"
        "  suspend PID [-D DIR]              take PID off the GPU (to host memory, or to DIR)\n"
        "  resume PID                        put PID back on the GPU\n"
        "  ps [--json]                       jobs tcgpud manages\n"
        "  events [--follow] [--json]        tcgpud's events\n"
        "  save PID -D DIR [--leave-running] save the process tree under PID with CRIU\n"
        "  restore -D DIR [-d]               restore a saved tree and put it back on the GPU\n"
        "  inspect DIR [--json]              show an image's manifest\n"
        "  verify DIR                        check every checksum of an image\n"
        "\n"
        "gpuckpt COMMAND --help shows a command's options; gpuckpt --version its version.\n"
        "Exit codes: 0 ok, 1 failed, 2 usage, 3 no such (tcgpu) process, 4 refused in this\n"
        "state, 5 timeout, 6 permission denied, 7 corrupt image, 8 not enough memory now.\n");
}

static void print_command_help(const struct command *c, FILE *f)
{
    fprintf(f, "usage: gpuckpt %s\n\n%s", c->usage, c->help);
}

/* ---------------------------------------------------------------------------
 * Talking to a process
 * ------------------------------------------------------------------------- */

struct client_opts {
    int timeout_ms;             /* -1: no limit */
    int wait_ms;                /* keep trying to connect this long (0: once) */
    int json;
    int quiet;
    int keep_context;           /* suspend: leave the CUDA context to the process */
    int auto_resume;            /* suspend through tcgpud: it may resume when memory fits */
    const char *dir;
    const char *parent;         /* checkpoint: parent image or "auto" */
};

struct progress_view {
    const char *what;
    int shown;
    uint64_t t0_ns;
};

static void show_progress(uint64_t done, uint64_t total, void *arg)
{
    struct progress_view *v = arg;
    char d[32], t[32];
    double secs = (double)(now_ns() - v->t0_ns) / 1e9;

    if (total)
        fprintf(stderr, "\r%s: %s / %s (%3.0f%%)  %.1f s ", v->what, units_format_bytes(done, d, sizeof(d)),
                units_format_bytes(total, t, sizeof(t)), 100.0 * (double)done / (double)total, secs);
    else
        fprintf(stderr, "\r%s: %s  %.1f s ", v->what, units_format_bytes(done, d, sizeof(d)), secs);
    fflush(stderr);
    v->shown = 1;
}

static int connect_retrying(pid_t pid, struct ctl_conn *c, int wait_ms, char *err, size_t errlen)
{
    uint64_t deadline = now_ns() + (uint64_t)wait_ms * 1000000u;
    int r;

    for (;;) {
        r = ctl_connect(pid, c, err, errlen);
        /* only "not there yet" is worth waiting for */
        if (r != -ENOENT || now_ns() >= deadline)
            return r;
        usleep(50000);
    }
}

/*
 * Connect, send `req`, wait for the final reply into *reply. Prints errors.
 * Returns an exit code; CTL_EXIT_OK means *reply is "ok".
 */
static int call(const char *cmd, pid_t pid, struct ctl_buf *req, struct ctl_msg *reply,
                const struct client_opts *o)
{
    struct ctl_conn c;
    struct progress_view view = { .what = cmd, .t0_ns = now_ns() };
    char err[PATH_MAX + 512];
    long len = ctl_buf_finish(req);
    int r, show;

    if (len < 0) {
        gpuckpt_error("%s %d: request too long", cmd, (int)pid);
        return CTL_EXIT_USAGE;
    }
    r = connect_retrying(pid, &c, o->wait_ms, err, sizeof(err));
    if (r < 0) {
        gpuckpt_error("%s", err);
        return ctl_exit_code(r, 0);
    }
    show = !o->quiet && strcmp(cmd, "status") && isatty(STDERR_FILENO);
    r = ctl_call(&c, req->data, (size_t)len, reply, o->timeout_ms, show ? show_progress : NULL, &view);
    ctl_close(&c);
    if (view.shown)
        fprintf(stderr, "\r\033[K");
    if (r == -ETIMEDOUT) {
        gpuckpt_error("%s %d: no reply within the timeout; the operation goes on in the process "
                      "(check with gpuckpt status %d)", cmd, (int)pid, (int)pid);
        return CTL_EXIT_TIMEOUT;
    }
    if (r < 0) {
        gpuckpt_error("%s %d: %s", cmd, (int)pid,
                      r == -ECONNRESET ? "the process closed the connection without a reply "
                                         "(did it exit?)"
                      : r == -EPROTO ? "malformed reply" : strerror(-r));
        return ctl_exit_code(r, 0);
    }
    if (reply->err) {
        gpuckpt_error("%s %d: %s: %s", cmd, (int)pid, reply->err_name, reply->err_text);
        return ctl_exit_code(reply->err, 1);
    }
    return CTL_EXIT_OK;
}

static void print_status_json(pid_t pid, const struct ctl_msg *m, const char *drv, FILE *f)
{
    int first = 1;

    fprintf(f, "{");
    if (!ctl_get(m, "pid")) {
        fprintf(f, "\"pid\":%d", (int)pid);
        first = 0;
    }
    for (int i = 0; i < m->nfields; i++) {
        const struct ctl_field *fl = &m->fields[i];
        fprintf(f, "%s\"%s\":", first ? "" : ",", fl->key);
        if (gpuckpt_is_integer(fl->value))
            fputs(fl->value, f);
        else
            gpuckpt_json_string(f, fl->value);
        first = 0;
    }
    fprintf(f, ",\"driver_state\":");
    gpuckpt_json_string(f, drv);
    fprintf(f, "}\n");
}

static void print_status_human(pid_t pid, const struct ctl_msg *m, FILE *f)
{
    struct tcgpu_status st;
    char a[32], b[32], c[32], q[32], fr[32], t[32];
    const char *sig = ctl_get(m, "trigger_signal");
    const char *act = ctl_get(m, "trigger_action");
    const char *inst = ctl_get(m, "trigger_installed");

    if (ctl_get_status(m, &st) < 0) {
        fprintf(f, "process %d: (unreadable status)\n", (int)pid);
        return;
    }
    fprintf(f, "process %d: %s\n", (int)pid, tcgpu_state_name(st.state));
    fprintf(f, "  gpu memory   %s held, %s tracked, last image %s\n",
            units_format_bytes(st.gpu_bytes, a, sizeof(a)), units_format_bytes(st.tracked_bytes, b, sizeof(b)),
            units_format_bytes(st.image_bytes, c, sizeof(c)));
    fprintf(f, "  objects      %u allocations, %u contexts, %u streams, %u events, %u modules\n",
            st.allocations, st.contexts, st.streams, st.events, st.modules);
    if (st.last_op == TCGPU_OP_NONE)
        fprintf(f, "  last op      none\n");
    else {
        fprintf(f, "  last op      %s: %s%s%s\n", tcgpu_op_name(st.last_op),
                st.last_result ? errno_name(st.last_result) : "ok",
                st.last_error[0] ? ": " : "", st.last_error);
        fprintf(f, "  timings      quiesce %s, gpu free %s, total %s\n",
                units_format_ns(st.last_quiesce_ns, q, sizeof(q)), units_format_ns(st.last_free_ns, fr, sizeof(fr)),
                units_format_ns(st.last_total_ns, t, sizeof(t)));
    }
    if (sig) {
        if (!strcmp(sig, "off"))
            fprintf(f, "  signal       off\n");
        else
            fprintf(f, "  signal       %s -> %s%s\n", sig, act ? act : "?",
                    inst && !strcmp(inst, "0") ? " (NOT in place: the program replaced the handler)"
                                               : "");
    }
}

/* Options common to the commands that talk to a process. */
enum { OPT_TIMEOUT = 1000, OPT_WAIT, OPT_JSON, OPT_KEEP_CONTEXT, OPT_PARENT };

static int parse_client_args(const char *cmd, int argc, char **argv, const char *shortopts,
                             struct client_opts *o, pid_t *pid)
{
    static const struct option longopts[] = {
        { "dir", required_argument, NULL, 'D' },
        { "timeout", required_argument, NULL, OPT_TIMEOUT },
        { "wait", required_argument, NULL, OPT_WAIT },
        { "json", no_argument, NULL, OPT_JSON },
        { "keep-context", no_argument, NULL, OPT_KEEP_CONTEXT },
        { "auto-resume", no_argument, NULL, GPUCKPT_OPT_AUTO_RESUME },
        { "parent", required_argument, NULL, OPT_PARENT },
        { "quiet", no_argument, NULL, 'q' },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    int ch;

    memset(o, 0, sizeof(*o));
    o->timeout_ms = -1;
    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, shortopts, longopts, NULL)) != -1) {
        switch (ch) {
        case 'h':
            print_command_help(find_command(cmd), stdout);
            return -1;
        case 'D':
            if (!strchr(shortopts, 'D'))
                return gpuckpt_usage_error(cmd, "no -D/--dir for this command");
            o->dir = optarg;
            break;
        case 'q':
            o->quiet = 1;
            break;
        case OPT_TIMEOUT:
            if ((o->timeout_ms = gpuckpt_parse_seconds_ms(optarg)) < 0)
                return gpuckpt_usage_error(cmd, "--timeout wants seconds, not '%s'", optarg);
            break;
        case OPT_WAIT:
            if ((o->wait_ms = gpuckpt_parse_seconds_ms(optarg)) < 0)
                return gpuckpt_usage_error(cmd, "--wait wants seconds, not '%s'", optarg);
            break;
        case OPT_JSON:
            if (strcmp(cmd, "status"))
                return gpuckpt_usage_error(cmd, "--json is for status and inspect");
            o->json = 1;
            break;
        case OPT_KEEP_CONTEXT:
            if (strcmp(cmd, "suspend"))
                return gpuckpt_usage_error(cmd, "--keep-context is for suspend");
            o->keep_context = 1;
            break;
        case GPUCKPT_OPT_AUTO_RESUME:
            if (strcmp(cmd, "suspend"))
                return gpuckpt_usage_error(cmd, "--auto-resume is for suspend");
            o->auto_resume = 1;
            break;
        case OPT_PARENT:
            if (strcmp(cmd, "checkpoint"))
                return gpuckpt_usage_error(cmd, "--parent is for checkpoint");
            o->parent = optarg;
            break;
        default:
            return gpuckpt_usage_error(cmd, "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind != argc - 1)
        return gpuckpt_usage_error(cmd, optind >= argc ? "which PID?" : "one PID, please");
    if (gpuckpt_parse_pid(argv[optind], pid) < 0)
        return gpuckpt_usage_error(cmd, "'%s' is not a process id", argv[optind]);
    return 0;
}

/* The driver's checkpoint state of pid: "running", "locked", "checkpointed",
 * "failed", "none" (unknown to the driver) or "unavailable" (no API). */
static const char *driver_state_word(pid_t pid)
{
    int state;

    if (!gdrv_available(NULL, 0))
        return "unavailable";
    gdrv_get_state(pid, &state, NULL, 0);
    return gdrv_state_name(state);
}

static const char *driver_state_human(const char *w)
{
    if (!strcmp(w, "running"))
        return "held by the process (driver state running)";
    if (!strcmp(w, "checkpointed"))
        return "released to the driver (driver state checkpointed)";
    if (!strcmp(w, "locked"))
        return "held, CUDA calls locked by the driver (driver state locked)";
    if (!strcmp(w, "failed"))
        return "driver checkpoint FAILED";
    if (!strcmp(w, "unavailable"))
        return "held (the driver has no checkpoint API)";
    return "unknown to the driver";
}

static int cmd_status(int argc, char **argv)
{
    struct client_opts o;
    struct ctl_buf *req = malloc(sizeof(*req));
    struct ctl_msg *rep = malloc(sizeof(*rep));
    pid_t pid;
    int r;

    if (!req || !rep) {
        r = CTL_EXIT_FAILED;
        goto out;
    }
    r = parse_client_args("status", argc, argv, "hq", &o, &pid);
    if (r != 0) {
        r = r < 0 ? CTL_EXIT_OK : r;
        goto out;
    }
    ctl_buf_request(req, "status");
    r = call("status", pid, req, rep, &o);
    if (r == CTL_EXIT_OK) {
        const char *drv = driver_state_word(pid);
        if (o.json)
            print_status_json(pid, rep, drv, stdout);
        else {
            print_status_human(pid, rep, stdout);
            fprintf(stdout, "  context      %s\n", driver_state_human(drv));
        }
    }
out:
    free(req);
    free(rep);
    return r;
}

/* Lock bound for the driver's checkpoint: --timeout, else the gate's default. */
static unsigned lock_timeout_ms(const struct client_opts *o)
{
    return o->timeout_ms > 0 ? (unsigned)o->timeout_ms : 10000;
}

/*
 * Suspend's second half (design decision 5): with the driver checkpoint API,
 * hand the process's context to the driver, which releases it. On failure
 * the process stays tcgpu-suspended with its context (gdrv_release is all
 * or nothing). note receives what to add to the summary line.
 */
static int release_context(pid_t pid, const struct client_opts *o, char *note, size_t len)
{
    char why[512], err[512];
    int r;

    if (!gdrv_available(why, sizeof(why))) {
        snprintf(note, len, "; context kept (%s)", why);
        return CTL_EXIT_OK;
    }
    r = gdrv_release(pid, lock_timeout_ms(o), err, sizeof(err));
    if (r == 0) {
        snprintf(note, len, "; context released");
        return CTL_EXIT_OK;
    }
    gpuckpt_error("suspend %d: suspended (device memory released), but the CUDA context could "
                  "not be released: %s", (int)pid, err);
    return r == -ETIMEDOUT ? CTL_EXIT_TIMEOUT : CTL_EXIT_FAILED;
}

/*
 * Resume's first half: take the context back from the driver (Restore +
 * Unlock, as GetState says), so that tcgpu can re-create memory. *taken
 * says whether there was anything to take back.
 */
static int reacquire_context(pid_t pid, int *taken)
{
    char err[512];
    int state, r;

    *taken = 0;
    if (!gdrv_available(NULL, 0) || gdrv_get_state(pid, &state, err, sizeof(err)) < 0 ||
        state == GDRV_RUNNING)
        return CTL_EXIT_OK;     /* nothing of ours to take back */
    r = gdrv_reacquire(pid, err, sizeof(err));
    if (r == 0) {
        *taken = 1;
        return CTL_EXIT_OK;
    }
    gpuckpt_error("resume %d: cannot take the CUDA context back from the driver (the process "
                  "stays suspended): %s", (int)pid, err);
    return r == -ENOMEM ? CTL_EXIT_NOROOM : CTL_EXIT_FAILED;
}

/*
 * Serialises gpuckpt's suspend and resume of one process across gpuckpt
 * processes: the tcgpu operation and the driver step together must not
 * interleave with another gpuckpt's (two resumes would both see the context
 * checkpointed and race on Restore/Unlock). The process serialises its own
 * operations; this covers the driver step. A lock file <run dir>/<pid>.lock
 * next to the control socket (the run dir is private to the user, checked by
 * ctl_connect); the holder removes it, and a waiter that finds it replaced
 * after getting the lock tries again. Returns the descriptor, or -1 when no
 * lock could be had (the operation then goes on unserialised, as before).
 */
static int lock_process(pid_t pid)
{
    struct ctl_conn c;
    char err[PATH_MAX + 512], path[PATH_MAX];
    struct stat a, b;
    int fd;

    if (ctl_connect(pid, &c, err, sizeof(err)) < 0)
        return -1;              /* the operation reports the problem */
    ctl_close(&c);
    snprintf(path, sizeof(path), "%s", c.path);
    if (!strrchr(path, '/'))
        return -1;
    snprintf(strrchr(path, '/') + 1, sizeof(path) - (size_t)(strrchr(path, '/') + 1 - path),
             "%d.lock", (int)pid);
    for (int tries = 0; tries < 100; tries++) {
        fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
            return -1;
        if (flock(fd, LOCK_EX) == 0 && fstat(fd, &a) == 0 && stat(path, &b) == 0 &&
            a.st_ino == b.st_ino && a.st_dev == b.st_dev)
            return fd;
        close(fd);              /* removed by the previous holder: take the new one */
    }
    return -1;
}

static void unlock_process(int fd)
{
    char link[64], path[PATH_MAX];
    ssize_t n;

    if (fd < 0)
        return;
    snprintf(link, sizeof(link), "/proc/self/fd/%d", fd);
    n = readlink(link, path, sizeof(path) - 1);
    if (n > 0) {
        path[n] = '\0';
        unlink(path);           /* while holding it: waiters see a new file */
    }
    close(fd);
}

/* A resume that failed after the context came back: release it again, as it was. */
static void rerelease_context(pid_t pid, const struct client_opts *o)
{
    char err[512];

    if (gdrv_release(pid, lock_timeout_ms(o), err, sizeof(err)) < 0)
        gpuckpt_error("resume %d: the process keeps its CUDA context (suspended): %s", (int)pid, err);
}

static int run_op_command(const char *cmd, int argc, char **argv, const char *shortopts,
                          int dir_required)
{
    struct client_opts o;
    struct ctl_buf *req = malloc(sizeof(*req));
    struct ctl_msg *rep = malloc(sizeof(*rep));
    char dir[PATH_MAX], note[600] = "";
    pid_t pid;
    int r, taken = 0, lock = -1;
    int is_suspend = !strcmp(cmd, "suspend"), is_resume = !strcmp(cmd, "resume");

    if (!req || !rep) {
        r = CTL_EXIT_FAILED;
        goto out;
    }
    r = parse_client_args(cmd, argc, argv, shortopts, &o, &pid);
    if (r != 0) {
        r = r < 0 ? CTL_EXIT_OK : r;
        goto out;
    }
    if (dir_required && !o.dir) {
        r = gpuckpt_usage_error(cmd, "-D DIR is required");
        goto out;
    }
    ctl_buf_request(req, cmd);
    if (o.dir) {
        int e = gpuckpt_absolute_dir(o.dir, dir, sizeof(dir));
        if (e < 0) {
            r = gpuckpt_usage_error(cmd, "bad directory '%s': %s", o.dir, strerror(-e));
            goto out;
        }
        ctl_buf_put(req, "dir", dir);
    }
    if (o.parent) {
        char parent[PATH_MAX];
        int e = strcmp(o.parent, "auto") ? gpuckpt_absolute_dir(o.parent, parent, sizeof(parent)) : 0;
        if (e < 0) {
            r = gpuckpt_usage_error(cmd, "bad parent directory '%s': %s", o.parent, strerror(-e));
            goto out;
        }
        ctl_buf_put(req, "parent", strcmp(o.parent, "auto") ? parent : "auto");
    }
    /* A job tcgpud manages is suspended and resumed by tcgpud, so that its
     * view stays true (and a manual suspension is not undone automatically). */
    if ((is_suspend || is_resume) &&
        (r = gpuckpt_tcgpud_op(cmd, pid, o.dir ? dir : NULL, o.auto_resume, o.quiet,
                               o.timeout_ms)) >= 0)
        goto out;
    if (is_suspend || is_resume)
        lock = lock_process(pid);
    if (is_resume && (r = reacquire_context(pid, &taken)) != CTL_EXIT_OK)
        goto out;
    r = call(cmd, pid, req, rep, &o);
    if (is_resume && r != CTL_EXIT_OK && r != CTL_EXIT_REFUSED && taken)
        rerelease_context(pid, &o);
    if (is_suspend && r == CTL_EXIT_OK && !o.keep_context)
        r = release_context(pid, &o, note, sizeof(note));

    if (r == CTL_EXIT_OK && !o.quiet) {
        struct tcgpu_status st;
        char t[32], b[32];
        if (ctl_get_status(rep, &st) == 0) {
            if (!strcmp(cmd, "suspend"))
                printf("process %d suspended in %s (gpu memory released after %s)%s%s%s\n", (int)pid,
                       units_format_ns(st.last_total_ns, t, sizeof(t)), units_format_ns(st.last_free_ns, b, sizeof(b)),
                       o.dir ? ", image " : "", o.dir ? dir : "", note);
            else if (!strcmp(cmd, "resume"))
                printf("process %d resumed in %s\n", (int)pid, units_format_ns(st.last_total_ns, t, sizeof(t)));
            else
                printf("process %d checkpointed to %s in %s (%s)\n", (int)pid, dir,
                       units_format_ns(st.last_total_ns, t, sizeof(t)), units_format_bytes(st.image_bytes, b, sizeof(b)));
        } else {
            printf("process %d: %s done\n", (int)pid, cmd);
        }
    }
out:
    unlock_process(lock);
    free(req);
    free(rep);
    return r;
}

static int cmd_checkpoint(int argc, char **argv)
{
    return run_op_command("checkpoint", argc, argv, "hqD:", 1);
}

static int cmd_suspend(int argc, char **argv)
{
    return run_op_command("suspend", argc, argv, "hqD:", 0);
}

static int cmd_resume(int argc, char **argv)
{
    return run_op_command("resume", argc, argv, "hqD:", 0);
}

int gpuckpt_call(const char *cmd, pid_t pid, const char *dir, struct tcgpu_status *st)
{
    struct client_opts o = { .timeout_ms = -1, .quiet = 1 };
    struct ctl_buf *req = malloc(sizeof(*req));
    struct ctl_msg *rep = malloc(sizeof(*rep));
    int r = CTL_EXIT_FAILED;

    if (req && rep) {
        ctl_buf_request(req, cmd);
        if (dir)
            ctl_buf_put(req, "dir", dir);
        r = call(cmd, pid, req, rep, &o);
        if (st && (r == CTL_EXIT_OK || rep->err) && ctl_get_status(rep, st) < 0)
            memset(st, 0, sizeof(*st));
    }
    free(req);
    free(rep);
    return r;
}

/* ---------------------------------------------------------------------------
 * run
 * ------------------------------------------------------------------------- */

static int readable_file(const char *p)
{
    struct stat st;

    return stat(p, &st) == 0 && S_ISREG(st.st_mode) && access(p, R_OK) == 0;
}

/* Where libtcgpu.so is: $TCGPU_LIB, else next to gpuckpt (build tree or install). */
static int find_library(char *out, size_t len)
{
    const char *env = getenv("TCGPU_LIB");
    char exe[PATH_MAX], looked[4 * PATH_MAX] = "";
    static const char *const rel[] = {
        "/../../interpose/libtcgpu.so", /* build tree: tools/gpuckpt/gpuckpt */
        "/../lib/tcgpu/libtcgpu.so",    /* installed: bin/gpuckpt */
        "/../lib/libtcgpu.so",
        "/../lib64/libtcgpu.so",
    };
    char cand[PATH_MAX];
    ssize_t n;

    if (env && *env) {
        if (!realpath(env, out) || !readable_file(out)) {
            gpuckpt_error("TCGPU_LIB=%s: not a readable file", env);
            return -1;
        }
        return 0;
    }
    n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n > 0) {
        exe[n] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash)
            *slash = '\0';
        for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
            snprintf(cand, sizeof(cand), "%s%s", exe, rel[i]);
            size_t l = strlen(looked);
            snprintf(looked + l, sizeof(looked) - l, "\n  %s", cand);
            if (readable_file(cand) && realpath(cand, out))
                return 0;
        }
    }
    const char *fixed[] = { TCGPU_INSTALL_LIBDIR "/tcgpu/libtcgpu.so", TCGPU_INSTALL_LIBDIR "/libtcgpu.so" };
    for (size_t i = 0; i < 2; i++) {
        size_t l = strlen(looked);
        snprintf(looked + l, sizeof(looked) - l, "\n  %s", fixed[i]);
        if (readable_file(fixed[i]) && realpath(fixed[i], out))
            return 0;
    }
    (void)len;
    gpuckpt_error("cannot find libtcgpu.so; set TCGPU_LIB=/path/to/libtcgpu.so. Looked in:%s", looked);
    return -1;
}

/* LD_PRELOAD with lib first; the existing entries (space- or colon-separated) kept. */
static int preload_with(const char *lib)
{
    const char *old = getenv("LD_PRELOAD");
    char *v;
    int r;

    if (strpbrk(lib, " :")) {
        gpuckpt_error("%s: LD_PRELOAD cannot hold a path with a space or colon; "
                      "move the library or set TCGPU_LIB to a link without them", lib);
        return -1;
    }
    if (old && *old) {
        /* already there? then leave LD_PRELOAD alone */
        char *copy = strdup(old), *save = NULL;
        for (char *t = copy ? strtok_r(copy, " :", &save) : NULL; t; t = strtok_r(NULL, " :", &save)) {
            if (!strcmp(t, lib)) {
                free(copy);
                return 0;
            }
        }
        free(copy);
        if (asprintf(&v, "%s:%s", lib, old) < 0)
            return -1;
    } else if (!(v = strdup(lib))) {
        return -1;
    }
    r = setenv("LD_PRELOAD", v, 1);
    free(v);
    return r;
}

static int cmd_run(int argc, char **argv)
{
    static const struct option longopts[] = {
        { "signal", required_argument, NULL, 's' },
        { "signal-action", required_argument, NULL, 'a' },
        { "checkpoint-dir", required_argument, NULL, 'D' },
        { "run-dir", required_argument, NULL, 'R' },
        { "log", required_argument, NULL, 'l' },
        GPUCKPT_TCGPUD_RUN_LONGOPTS,
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    char lib[PATH_MAX], dir[PATH_MAX];
    int ch;

    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "+hs:a:D:R:l:", longopts, NULL)) != -1) {
        switch (ch) {
        case 'h':
            print_command_help(find_command("run"), stdout);
            return CTL_EXIT_OK;
        case 's':
            if (tcgpu_signal_parse(optarg) < 0)
                return gpuckpt_usage_error("run", "--signal %s: unknown or unusable signal "
                                   "(try RTMIN+4, USR2, 38 or off)", optarg);
            setenv("TCGPU_SIGNAL", optarg, 1);
            break;
        case 'a':
            if (tcgpu_sigaction_parse(optarg) < 0)
                return gpuckpt_usage_error("run", "--signal-action %s: one of toggle, suspend, resume, "
                                   "checkpoint", optarg);
            setenv("TCGPU_SIGNAL_ACTION", optarg, 1);
            break;
        case 'D':
            if (gpuckpt_absolute_dir(optarg, dir, sizeof(dir)) < 0)
                return gpuckpt_usage_error("run", "bad directory '%s'", optarg);
            setenv("TCGPU_CHECKPOINT_DIR", dir, 1);
            break;
        case 'R':
            if (gpuckpt_absolute_dir(optarg, dir, sizeof(dir)) < 0)
                return gpuckpt_usage_error("run", "bad directory '%s'", optarg);
            setenv("TCGPU_RUN_DIR", dir, 1);
            break;
        case 'l':
            if (strcmp(optarg, "quiet") && strcmp(optarg, "info") && strcmp(optarg, "debug"))
                return gpuckpt_usage_error("run", "--log is quiet, info or debug");
            setenv("TCGPU_LOG", optarg, 1);
            break;
        case GPUCKPT_OPT_PROJECT ... GPUCKPT_OPT_TCGPUD_LAST - 1: {
            int e = gpuckpt_tcgpud_run_option(ch, optarg);   /* tcgpud's: sets TCGPU_* */
            if (e)
                return e;
            break;
        }
        default:
            return gpuckpt_usage_error("run", "unknown option '%s'", argv[optind - 1]);
        }
    }
    if (optind >= argc)
        return gpuckpt_usage_error("run", "which command?");
    if (find_library(lib, sizeof(lib)) < 0)
        return CTL_EXIT_FAILED;
    if (preload_with(lib) < 0) {
        gpuckpt_error("cannot set LD_PRELOAD");
        return CTL_EXIT_FAILED;
    }
    execvp(argv[optind], argv + optind);
    gpuckpt_error("cannot run %s: %s", argv[optind], strerror(errno));
    return errno == ENOENT ? 127 : 126;
}

/* ---------------------------------------------------------------------------
 * Commands
 * ------------------------------------------------------------------------- */

static const struct command commands[] = {
    { "run", cmd_run, "run [OPTIONS] [--] CMD [ARG...]",
      "Run CMD with libtcgpu.so preloaded (prepended to LD_PRELOAD); gpuckpt is replaced by\n"
      "CMD, so its pid is CMD's pid and its exit status CMD's (127/126 if it cannot be run).\n"
      "The library is $TCGPU_LIB, else found next to gpuckpt.\n"
      "\n"
      "  -s, --signal SIG          trigger signal (TCGPU_SIGNAL): RTMIN+4 (default), USR2, 38, off\n"
      "  -a, --signal-action ACT   toggle (default), suspend, resume, checkpoint (TCGPU_SIGNAL_ACTION)\n"
      "  -D, --checkpoint-dir DIR  where the checkpoint action writes (TCGPU_CHECKPOINT_DIR)\n"
      "  -R, --run-dir DIR         where the control socket goes (TCGPU_RUN_DIR)\n"
      "  -l, --log LEVEL           quiet, info (default), debug (TCGPU_LOG)\n"
      GPUCKPT_TCGPUD_RUN_HELP },
    { "status", cmd_status, "status PID [--json] [--wait SEC] [--timeout SEC]",
      "Show PID's state, GPU memory, tracked objects, last operation and its timings.\n"
      "\n"
      "  --json          one JSON object on stdout (the protocol's fields, numbers as numbers)\n"
      "  --wait SEC      retry for up to SEC seconds while PID has no socket yet\n"
      "  --timeout SEC   give up waiting for the reply after SEC seconds (exit 5)\n" },
    { "checkpoint", cmd_checkpoint, "checkpoint PID -D DIR [--parent DIR|auto] [--timeout SEC] [--wait SEC] [-q]",
      "Write an image of PID's GPU state to DIR (which must not exist); PID carries on.\n"
      "\n"
      "  -D, --dir DIR   the image directory (relative paths are made absolute here)\n"
      "  --timeout SEC   stop waiting after SEC seconds (exit 5; the operation goes on)\n"
      "  --wait SEC      retry for up to SEC seconds while PID has no socket yet\n"
      "  -q, --quiet     no progress and no summary line\n" },
    { "suspend", cmd_suspend, "suspend PID [-D DIR] [--keep-context] [--timeout SEC] [--wait SEC] [-q]",
      "Take PID off the GPU: drain its device memory to host memory (or to the image DIR),\n"
      "release it, and park PID's CUDA calls until gpuckpt resume. Where the driver has the\n"
      "checkpoint API (CUDA 12.8+), PID's context is then handed to the driver and released\n"
      "too (Lock + Checkpoint): PID holds nothing on the GPU. If that step fails, PID stays\n"
      "suspended with its context and gpuckpt says so (exit 1, or 5 for a lock timeout).\n"
      "Resume such a process with gpuckpt resume (not the signal): it takes the context back.\n"
      "\n"
      "  -D, --dir DIR   drain to an image directory instead of host memory\n"
      "  --keep-context  leave the CUDA context with the process (device memory only)\n"
      "  --auto-resume   a job tcgpud manages: tcgpud may resume it when memory fits\n"
      "  --timeout SEC   stop waiting after SEC seconds (exit 5; the operation goes on)\n"
      "  --wait SEC      retry for up to SEC seconds while PID has no socket yet\n"
      "  -q, --quiet     no progress and no summary line\n" },
    { "resume", cmd_resume, "resume PID [-D DIR] [--timeout SEC] [--wait SEC] [-q]",
      "Put PID back on the GPU at the same device addresses and release its threads.\n"
      "A context released to the driver is taken back first (Restore + Unlock).\n"
      "Exit 8 when the device has no room now (PID stays suspended, safely).\n"
      "\n"
      "  -D, --dir DIR   the suspend's image now lives at DIR (moved, e.g. by gpuckpt save)\n"
      "  --timeout SEC   stop waiting after SEC seconds (exit 5; the operation goes on)\n"
      "  --wait SEC      retry for up to SEC seconds while PID has no socket yet\n"
      "  -q, --quiet     no progress and no summary line\n" },
    { "save", gpuckpt_cmd_save,
      "save PID -D DIR [--leave-running] [--tcp-established] [--shell-job]",
      "Save the whole process tree under PID to DIR (which must not exist) with CRIU: every\n"
      "process under tcgpu is suspended to an image in DIR/gpu/<pid> and its CUDA context\n"
      "released to the driver, then CRIU dumps the tree into DIR/criu. DIR is written as\n"
      "DIR.tmp-XXXXXX and renamed only when everything succeeded; on failure every process\n"
      "is resumed and nothing is left behind. Refused before anything is touched: a process\n"
      "in the tree that uses the GPU without tcgpu, a tcgpu process that is not running.\n"
      "CRIU is $TCGPU_CRIU, else criu on PATH or in /usr/local/sbin, /usr/sbin.\n"
      "\n"
      "  -D, --dir DIR       the save directory\n"
      "  --leave-running     resume the tree after the dump (default: CRIU ends it)\n"
      "  --tcp-established   dump established TCP connections (CRIU's option)\n"
      "  --shell-job         the tree is a shell job (CRIU's option; restore repeats it)\n" },
    { "restore", gpuckpt_cmd_restore, "restore -D DIR [-d]",
      "Restore a tree saved by gpuckpt save: verify the whole save first (every checksum, the\n"
      "GPU model, the pids free), then CRIU restores the tree, and every tcgpu process takes\n"
      "its context back and is resumed from DIR/gpu/<pid> at the same device addresses.\n"
      "Without -d, gpuckpt stays the tree's parent and exits with the root's exit status.\n"
      "\n"
      "  -D, --dir DIR   the save directory\n"
      "  -d, --detach    return once the tree runs\n" },
    { "ps", gpuckpt_cmd_ps, "ps [--json]",
      "The jobs tcgpud manages: pid, user, project, priority, state, GPU, memory, limit,\n"
      "run time, preemptions, and who suspended a suspended job and why.\n"
      "\n"
      "  --json   one JSON object: {\"devices\": [...], \"jobs\": [...]}\n" },
    { "events", gpuckpt_cmd_events, "events [--follow] [--json]",
      "tcgpud's recent events (registered, request, suspending, suspended, resumed,\n"
      "granted, denied, exited, refused...), with who, why and latencies.\n"
      "\n"
      "  -f, --follow   keep printing events as they happen\n"
      "  --json         one JSON object a line\n" },
    { "inspect", gpuckpt_cmd_inspect, "inspect DIR [--json]",
      "Show an image's manifest: process, devices, allocations, chunks and compression.\n"
      "For a save directory: every process, its GPU image's sizes and compression, CRIU's images.\n"
      "\n"
      "  --json   one JSON object on stdout\n" },
    { "verify", gpuckpt_cmd_verify, "verify DIR",
      "Read every chunk of the image at DIR and check its checksums (for a save directory:\n"
      "the tree manifest, every GPU image, and that CRIU's images are there).\n"
      "Exit 0 when the image is whole, 7 when it is corrupt or truncated.\n" },
};

static const struct command *find_command(const char *name)
{
    for (size_t i = 0; i < sizeof(commands) / sizeof(commands[0]); i++)
        if (!strcmp(commands[i].name, name))
            return &commands[i];
    return NULL;
}

int main(int argc, char **argv)
{
    const struct command *c;

    if (argc < 2) {
        print_usage(stderr);
        return CTL_EXIT_USAGE;
    }
    if (!strcmp(argv[1], "--version") || !strcmp(argv[1], "-V")) {
        printf("gpuckpt %s\n", TCGPU_VERSION_STRING);
        return CTL_EXIT_OK;
    }
    if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
        print_usage(stdout);
        return CTL_EXIT_OK;
    }
    if (!strcmp(argv[1], "help")) {
        if (argc > 2 && (c = find_command(argv[2]))) {
            print_command_help(c, stdout);
            return CTL_EXIT_OK;
        }
        print_usage(stdout);
        return argc > 2 ? CTL_EXIT_USAGE : CTL_EXIT_OK;
    }
    c = find_command(argv[1]);
    if (!c) {
        gpuckpt_error("unknown command '%s'", argv[1]);
        print_usage(stderr);
        return CTL_EXIT_USAGE;
    }
    return c->fn(argc - 1, argv + 1);
}

void gpuckpt_command_help(const char *cmd)
{
    print_command_help(find_command(cmd), stdout);
}
