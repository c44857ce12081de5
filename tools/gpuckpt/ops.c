/*
 * ops.c - the commands that talk to one process over its control socket:
 * gpuckpt status, checkpoint, suspend and resume (docs/cli.md), and
 * gpuckpt_call() for save and restore (ops.h).
 *
 * suspend and resume add the driver's step (driver.h): suspend hands the
 * process's context to the driver after tcgpu drained its memory, resume
 * takes it back first. A job tcgpud manages goes through tcgpud instead
 * (tcgpud.h), so that its view stays true.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "commands.h"
#include "ckptapi/ckptapi.h"
#include "interrupt.h"
#include "ops.h"
#include "tcgpud.h"
#include "util.h"
#include "ctl/client.h"
#include "ctl/proto.h"
#include "common/clock.h"
#include "common/names.h"
#include "common/proc.h"
#include "common/signals.h"
#include "common/units.h"
#include "json/schema.h"
#include "tcgpu.h"

/* ---------------------------------------------------------------------------
 * Talking to a process
 * ------------------------------------------------------------------------- */

struct client_opts {
    int timeout_ms;             /* -1: no limit */
    int wait_ms;                /* keep trying to connect this long (0: once) */
    int quiet;
    int keep_context;           /* suspend: leave the CUDA context to the process */
    int auto_resume;            /* suspend through tcgpud: it may resume when memory fits */
    int cut_on_signal;          /* a caught signal ends the wait for the reply (interrupt.h) */
    const char *dir;
    const char *parent;         /* checkpoint: parent image or "auto" */
};

/* The progress line of one operation, on stderr (a terminal). */
struct progress_view {
    const char *what;
    int shown;
    uint64_t t0_ns;             /* the request was sent */
    char phase[16];             /* the phase shown */
    uint64_t phase_t0_ns;       /* when it started */
};

/*
 * "  1.9 GiB/s  ETA 3.6 s" from the phase's pace so far; the ETA only once
 * the phase has run long enough for its pace to mean something.
 */
static void pace(const struct progress_view *v, uint64_t done, uint64_t total, char *out, size_t len)
{
    double secs = (double)(now_ns() - v->phase_t0_ns) / 1e9, rate;
    char r[32], eta[32];

    out[0] = '\0';
    if (!total || !done || secs < 1e-3)
        return;
    rate = (double)done / secs;
    units_format_bytes((uint64_t)rate, r, sizeof(r));
    if (done >= total || secs < 0.2) {
        snprintf(out, len, "  %s/s", r);
        return;
    }
    units_format_ns((uint64_t)((double)(total - done) / rate * 1e9), eta, sizeof(eta));
    snprintf(out, len, "  %s/s  ETA %s", r, eta);
}

/*
 * "suspend: drain 1.2 GiB / 8.0 GiB  15%  1.9 GiB/s  ETA 3.6 s  (0.6 s)":
 * the phase, its bytes, its pace, and the time since the request.
 */
static void show_progress(const char *phase, uint64_t done, uint64_t total, void *arg)
{
    struct progress_view *v = arg;
    char d[32], t[32], p[96];
    double secs = (double)(now_ns() - v->t0_ns) / 1e9;

    if (strcmp(phase, v->phase)) {
        snprintf(v->phase, sizeof(v->phase), "%s", phase);
        v->phase_t0_ns = now_ns();
    }
    pace(v, done, total, p, sizeof(p));
    if (total)
        fprintf(stderr, "\r%s: %s %s / %s %3.0f%%%s  (%.1f s)\033[K", v->what, phase,
                units_format_bytes(done, d, sizeof(d)), units_format_bytes(total, t, sizeof(t)),
                100.0 * (double)done / (double)total, p, secs);
    else
        fprintf(stderr, "\r%s: %s  (%.1f s)\033[K", v->what, phase[0] ? phase : "working", secs);
    fflush(stderr);
    v->shown = 1;
}

static int connect_retrying(pid_t pid, struct ctl_conn *c, int wait_ms, char *err, size_t errlen)
{
    uint64_t deadline = now_ns() + (uint64_t)wait_ms * 1000000u;
    int r;

    for (;;) {
        r = ctl_connect(pid, getenv("TCGPU_RUN_DIR"), c, err, errlen);
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
    if (o->cut_on_signal)
        gpuckpt_interrupt_cut(c.fd);
    r = ctl_call(&c, req->data, (size_t)len, reply, o->timeout_ms, show ? show_progress : NULL, &view);
    gpuckpt_interrupt_cut(-1);
    ctl_close(&c);
    if (view.shown)
        fprintf(stderr, "\r\033[K");
    if (r < 0 && o->cut_on_signal && gpuckpt_interrupted())
        return CTL_EXIT_FAILED;     /* the caller says what became of the operation */
    if (r == -ETIMEDOUT && !strcmp(cmd, "suspend")) {
        /* the process sees us gone when it replies, and resumes (control.c) */
        gpuckpt_error("suspend %d: no reply within the timeout; the suspend is abandoned: the "
                      "process undoes it when it ends, and runs on (check with gpuckpt status %d)",
                      (int)pid, (int)pid);
        return CTL_EXIT_TIMEOUT;
    }
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
        gpuckpt_note_errno(reply->err_name);
        gpuckpt_error("%s %d: %s: %s", cmd, (int)pid, reply->err_name, reply->err_text);
        return ctl_exit_code(reply->err, 1);
    }
    return CTL_EXIT_OK;
}

/* Options common to the commands that talk to a process. */
enum { OPT_TIMEOUT = 1000, OPT_WAIT, OPT_JSON, OPT_KEEP_CONTEXT, OPT_PARENT };

/*
 * Parses the options and the PID of `self`'s command line (shortopts: the
 * short options it takes). Returns 0, -1 when --help was shown, or a usage
 * exit code (the error printed).
 */
static int parse_client_args(const struct gpuckpt_command *self, int argc, char **argv,
                             const char *shortopts, struct client_opts *o, pid_t *pid)
{
    const char *cmd = self->name;
    static const struct option longopts[] = {
        { "dir", required_argument, NULL, 'D' },
        { "timeout", required_argument, NULL, OPT_TIMEOUT },
        { "wait", required_argument, NULL, OPT_WAIT },
        { "json", no_argument, NULL, OPT_JSON },
        { "keep-context", no_argument, NULL, OPT_KEEP_CONTEXT },
        { "auto-resume", no_argument, NULL, GPUCKPT_OPT_AUTO_RESUME },
        { "parent", required_argument, NULL, OPT_PARENT },
        { "quiet", no_argument, NULL, 'q' },
        { "output", required_argument, NULL, 'o' },
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
            gpuckpt_command_help(self);
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
                return gpuckpt_usage_error(cmd, "--timeout wants a duration (30, 1.5s, 500ms), "
                                           "not '%s'", optarg);
            break;
        case OPT_WAIT:
            if ((o->wait_ms = gpuckpt_parse_seconds_ms(optarg)) < 0)
                return gpuckpt_usage_error(cmd, "--wait wants a duration (30, 1.5s, 500ms), "
                                           "not '%s'", optarg);
            break;
        case OPT_JSON:
            gpuckpt_set_json();
            break;
        case 'o':
            if ((ch = gpuckpt_set_format(cmd, optarg)) != 0)
                return ch;
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
            return gpuckpt_option_error(cmd, argc, argv, shortopts, longopts);
        }
    }
    if (optind != argc - 1)
        return gpuckpt_usage_error(cmd, optind >= argc ? "which PID?" : "one PID, please");
    if (gpuckpt_parse_pid(argv[optind], pid) < 0)
        return gpuckpt_usage_error(cmd, "'%s' is not a process id", argv[optind]);
    return 0;
}

/* The quiet call for save and restore: see ops.h. */
int gpuckpt_call(const char *cmd, pid_t pid, const char *dir, struct tcgpu_status *st)
{
    struct client_opts o = { .timeout_ms = -1, .quiet = 1 };
    struct ctl_buf *req = malloc(sizeof(*req));
    struct ctl_msg *rep = malloc(sizeof(*rep));
    int r = CTL_EXIT_FAILED;

    if (req && rep) {
        memset(rep, 0, sizeof(*rep));   /* no reply (no connection) reads as no error */
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

/* Does the command take -D DIR? */
enum dir_arg { NO_DIR, DIR_OPTIONAL, DIR_REQUIRED };

/* One command's call on one process: its command line, request and reply. */
struct op {
    const char *cmd;            /* the command's name, which is also the request's */
    struct client_opts o;
    pid_t pid;
    char dir[PATH_MAX];         /* -D DIR made absolute; "" without -D */
    struct ctl_buf req;
    struct ctl_msg rep;
};

/* op's request: -D DIR and --parent made absolute. CTL_EXIT_OK or a usage exit code. */
static int build_request(struct op *op)
{
    const char *parent = op->o.parent;
    char abs_parent[PATH_MAX];
    int e;

    ctl_buf_request(&op->req, op->cmd);
    op->dir[0] = '\0';
    if (op->o.dir) {
        e = gpuckpt_absolute_dir(op->o.dir, op->dir, sizeof(op->dir));
        if (e < 0)
            return gpuckpt_usage_error(op->cmd, "bad directory '%s': %s", op->o.dir, strerror(-e));
        ctl_buf_put(&op->req, "dir", op->dir);
    }
    if (parent && strcmp(parent, "auto")) {
        e = gpuckpt_absolute_dir(parent, abs_parent, sizeof(abs_parent));
        if (e < 0)
            return gpuckpt_usage_error(op->cmd, "bad parent directory '%s': %s", parent,
                                       strerror(-e));
        parent = abs_parent;
    }
    if (parent)
        ctl_buf_put(&op->req, "parent", parent);
    return CTL_EXIT_OK;
}

/*
 * Parses `self`'s command line into a new op with its request ready to send.
 * Returns CTL_EXIT_OK and *out, which the caller frees. Otherwise *out is
 * NULL and the return value is the exit code: CTL_EXIT_OK after --help, a
 * usage exit code (said on stderr), CTL_EXIT_FAILED without memory.
 */
static int op_start(const struct gpuckpt_command *self, int argc, char **argv, enum dir_arg dir,
                    struct op **out)
{
    /* zeroed: a resume with nothing to resume reports an empty reply */
    struct op *op = calloc(1, sizeof(*op));
    int r;

    *out = NULL;
    if (!op)
        return CTL_EXIT_FAILED;
    op->cmd = self->name;
    r = parse_client_args(self, argc, argv, dir == NO_DIR ? "hqo:" : "hqo:D:", &op->o, &op->pid);
    if (r != 0) {
        r = r < 0 ? CTL_EXIT_OK : r;
        goto err;
    }
    if (dir == DIR_REQUIRED && !op->o.dir) {
        r = gpuckpt_usage_error(op->cmd, "-D DIR is required");
        goto err;
    }
    r = build_request(op);
    if (r != CTL_EXIT_OK)
        goto err;
    *out = op;
    return CTL_EXIT_OK;
err:
    free(op);
    return r;
}

/* Sends op's request and waits for the reply (call()). */
static int op_call(struct op *op)
{
    return call(op->cmd, op->pid, &op->req, &op->rep, &op->o);
}

/* ---------------------------------------------------------------------------
 * status
 * ------------------------------------------------------------------------- */

/* The reply's status fields, typed (lib/json/schema.h), as a new object; pid when absent. */
static json_t *status_object(pid_t pid, const struct ctl_msg *m)
{
    json_t *o = tc_json_from_msg(m, &tc_json_status_schema);

    if (o && !ctl_get(m, "pid"))
        tc_json_set_int(o, "pid", pid);
    return o;
}

/* gpuckpt status --json: {"ok": true, <the status fields>, "driver_state": ...}. */
static int print_status_json(pid_t pid, const struct ctl_msg *m, const char *drv)
{
    json_t *o = json_object(), *st = status_object(pid, m);

    if (!o || !st || tc_json_set_bool(o, "ok", 1) < 0 || json_object_update(o, st) < 0 ||
        tc_json_set_string(o, "driver_state", drv) < 0) {
        json_decref(o);
        o = NULL;
    }
    json_decref(st);
    return gpuckpt_print_json(o);
}

/* The operation the process is running now, as status reports it: name,
 * time so far, progress, what waits behind it. */
static void print_running_op(const struct ctl_msg *m, FILE *f)
{
    const char *op = ctl_get(m, "op_running"), *q = ctl_get(m, "ops_queued");
    uint64_t ms = 0, done = 0, total = 0;
    char d[32], t[32];

    if (!op)
        return;
    ctl_get_u64(m, "op_elapsed_ms", &ms);
    ctl_get_u64(m, "progress_done", &done);
    ctl_get_u64(m, "progress_total", &total);
    fprintf(f, "  running      %s for %.1f s", op, (double)ms / 1000.0);
    if (total)
        fprintf(f, ", %s of %s moved", units_format_bytes(done, d, sizeof(d)),
                units_format_bytes(total, t, sizeof(t)));
    if (q && strcmp(q, "0"))
        fprintf(f, ", %s more waiting", q);
    fputc('\n', f);
}

/* What stops a checkpoint now, as status reports it: the first blocker,
 * when and where it was made, how many more. */
static void print_blockers(const struct ctl_msg *m, FILE *f)
{
    const char *why = ctl_get(m, "blocker"), *since = ctl_get(m, "blocker_since");
    const char *site = ctl_get(m, "blocker_site");
    uint64_t n = 0;

    if (ctl_get_u64(m, "blockers", &n) < 0)
        return;                 /* a library older than the field */
    if (!n) {
        fprintf(f, "  checkpoint   possible: nothing blocks it\n");
        return;
    }
    fprintf(f, "  checkpoint   REFUSED while this holds: %s\n", why ? why : "?");
    if (since || site)
        fprintf(f, "               made%s%s%s%s\n", since ? " at " : "", since ? since : "",
                site ? " from " : "", site ? site : "");
    if (n > 1)
        fprintf(f, "               and %llu more\n", (unsigned long long)(n - 1));
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
    print_running_op(m, f);
    fprintf(f, "  gpu memory   %s held, %s tracked, last image %s\n",
            units_format_bytes(st.gpu_bytes, a, sizeof(a)), units_format_bytes(st.tracked_bytes, b, sizeof(b)),
            units_format_bytes(st.image_bytes, c, sizeof(c)));
    fprintf(f, "  objects      %u allocations, %u contexts, %u streams, %u events, %u modules\n",
            st.allocations, st.contexts, st.streams, st.events, st.modules);
    print_blockers(m, f);
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
    return "unknown to the driver";
}

int gpuckpt_cmd_status(const struct gpuckpt_command *self, int argc, char **argv)
{
    const char *drv;
    struct op *op;
    int r = op_start(self, argc, argv, NO_DIR, &op);

    if (!op)
        return r;
    r = op_call(op);
    if (r == CTL_EXIT_OK) {
        drv = driver_state_word(op->pid);
        if (gpuckpt_json()) {
            r = print_status_json(op->pid, &op->rep, drv);
        } else {
            char why[512] = "";
            print_status_human(op->pid, &op->rep, stdout);
            if (!gdrv_available(why, sizeof(why)))
                printf("  context      held (no driver checkpoint: %s)\n", why);
            else
                printf("  context      %s\n", driver_state_human(drv));
        }
    }
    free(op);
    return r;
}

/* ---------------------------------------------------------------------------
 * checkpoint, suspend, resume
 * ------------------------------------------------------------------------- */

/* What an operation did besides the process's own reply, for its report. */
struct op_result {
    const char *through;        /* "process" or "tcgpud" */
    const char *context;        /* suspend: "released", "kept"; resume: "taken-back", "held" */
    char why[512];              /* suspend, context kept: why (no checkpoint API) */
    int said;                   /* nothing was run, and the line saying why is printed */
};

/* The text summary line of a successful operation (docs/cli.md). */
static void report_text(const struct op *op, const struct op_result *res, const struct tcgpu_status *st)
{
    char t[32], b[32];
    int suspend = !strcmp(op->cmd, "suspend");

    if (!strcmp(res->through, "tcgpud")) {
        if (st->last_total_ns)
            printf("process %d %s through tcgpud in %.1f ms%s\n", (int)op->pid,
                   suspend ? "suspended" : "resumed", (double)st->last_total_ns / 1e6,
                   suspend ? (op->o.auto_resume ? " (resumed automatically when memory fits)"
                                                : " (until gpuckpt resume)") : "");
        else
            printf("process %d %s through tcgpud\n", (int)op->pid, suspend ? "suspended" : "resumed");
    } else if (!strcmp(op->cmd, "checkpoint")) {
        printf("process %d checkpointed to %s in %s (%s)\n", (int)op->pid, op->dir,
               units_format_ns(st->last_total_ns, t, sizeof(t)),
               units_format_bytes(st->image_bytes, b, sizeof(b)));
    } else if (suspend) {
        printf("process %d suspended in %s (gpu memory released after %s)%s%s", (int)op->pid,
               units_format_ns(st->last_total_ns, t, sizeof(t)),
               units_format_ns(st->last_free_ns, b, sizeof(b)), op->o.dir ? ", image " : "", op->dir);
        if (!strcmp(res->context, "released"))
            printf("; context released\n");
        else if (res->why[0])
            printf("; context kept (%s)\n", res->why);
        else
            printf("\n");
    } else {
        printf("process %d resumed in %s\n", (int)op->pid, units_format_ns(st->last_total_ns, t, sizeof(t)));
    }
}

/*
 * The JSON result of a successful operation (docs/cli.md, "JSON output"):
 * {"ok", "op", "pid", "through", "dir", "context", ["context_note"], "status"}.
 */
static int report_json(const struct op *op, const struct op_result *res)
{
    json_t *o = json_object();
    int bad = !o;

    bad = bad || tc_json_set_bool(o, "ok", 1) < 0 || tc_json_set_string(o, "op", op->cmd) < 0 ||
          tc_json_set_int(o, "pid", op->pid) < 0 ||
          tc_json_set_string(o, "through", res->through) < 0 ||
          tc_json_set_string(o, "dir", op->o.dir ? op->dir : NULL) < 0 ||
          tc_json_set_string(o, "context", res->context) < 0 ||
          (res->why[0] && tc_json_set_string(o, "context_note", res->why) < 0) ||
          tc_json_set_new(o, "status", status_object(op->pid, &op->rep)) < 0;
    if (bad) {
        json_decref(o);
        o = NULL;
    }
    return gpuckpt_print_json(o);
}

/* After a successful operation: its summary line, or its JSON. Returns the exit code. */
static int report(const struct op *op, const struct op_result *res)
{
    struct tcgpu_status st;

    if (gpuckpt_json())
        return report_json(op, res);
    if (op->o.quiet || res->said)
        return CTL_EXIT_OK;
    if (ctl_get_status(&op->rep, &st) < 0)
        printf("process %d: %s done\n", (int)op->pid, op->cmd);
    else
        report_text(op, res, &st);
    return CTL_EXIT_OK;
}

/* Lock bound for the driver's checkpoint: --timeout, else the gate's default. */
static unsigned lock_timeout_ms(const struct client_opts *o)
{
    return o->timeout_ms > 0 ? (unsigned)o->timeout_ms : 10000;
}

/*
 * Suspend's second half (docs/save-restore.md): with the driver checkpoint API,
 * hand the process's context to the driver, which releases it. On failure
 * the process stays tcgpu-suspended with its context (gdrv_release is all
 * or nothing). res->context says what became of it.
 */
static int release_context(pid_t pid, const struct client_opts *o, struct op_result *res)
{
    char err[512];
    int r;

    if (!gdrv_available(res->why, sizeof(res->why))) {
        res->context = "kept";
        return CTL_EXIT_OK;
    }
    r = gdrv_release(pid, lock_timeout_ms(o), err, sizeof(err));
    if (r == 0) {
        res->context = "released";
        return CTL_EXIT_OK;
    }
    gpuckpt_error("suspend %d: the CUDA context could not be released: %s", (int)pid, err);
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

    if (ctl_connect(pid, getenv("TCGPU_RUN_DIR"), &c, err, sizeof(err)) < 0)
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
    char path[PATH_MAX];

    if (fd < 0)
        return;
    if (tcgpu_proc_fd_target(fd, path, sizeof(path)) > 0)
        unlink(path);           /* while holding it: waiters see a new file */
    close(fd);
}

/* A resume that failed after the context came back: release it again, as it was. */
static void rerelease_context(pid_t pid, const struct client_opts *o)
{
    char err[512];

    if (gdrv_release(pid, lock_timeout_ms(o), err, sizeof(err)) < 0)
        gpuckpt_error("resume %d: the process keeps its CUDA context (suspended): %s", (int)pid, err);
}

/*
 * Undoes a suspend the command cannot finish: the context back from the
 * driver when it went there, then the process's own resume. Returns 0 when
 * the process runs again, -1 otherwise (said).
 */
static int undo_suspend(pid_t pid)
{
    int taken, r;

    if (reacquire_context(pid, &taken) != CTL_EXIT_OK)
        return -1;
    r = gpuckpt_call("resume", pid, NULL, NULL);
    return r == CTL_EXIT_OK ? 0 : -1;
}

/* A failed suspend that leaves the job suspended: says so, and how to resume it. */
static int left_suspended(pid_t pid)
{
    gpuckpt_error("the job is suspended; resume it with: gpuckpt resume %d", (int)pid);
    return CTL_EXIT_LEFT_SUSPENDED;
}

/*
 * A signal came while suspending (interrupt.h). When the process had
 * suspended (`suspended`), the suspend is undone here; when it had not
 * answered yet, the process undoes it itself once it sees the connection
 * gone (control.c). Returns 128 + the signal, as a shell reports it, or
 * CTL_EXIT_LEFT_SUSPENDED.
 */
static int interrupted_suspend(pid_t pid, int sig, int suspended)
{
    char name[32];

    tcgpu_signal_name(sig, name, sizeof(name));
    if (!suspended) {
        gpuckpt_error("suspend %d: interrupted by %s before the process answered: it undoes the "
                      "suspend itself when it ends, and runs on", (int)pid, name);
        return 128 + sig;
    }
    if (undo_suspend(pid) < 0)
        return left_suspended(pid);
    gpuckpt_error("suspend %d: interrupted by %s: suspend undone, the process runs", (int)pid, name);
    return 128 + sig;
}

/*
 * After the process's suspend (r_proc) and the driver's step (r): the job
 * as it was, or said to be suspended. A failure never leaves the job
 * stopped silently (docs/cli.md, "Exit codes").
 */
static int settle_suspend(const struct op *op, int r_proc, int r)
{
    struct tcgpu_status st;
    int sig = gpuckpt_interrupted();

    /* (a signal after the process refused or failed changes nothing: below) */
    if (sig && strcmp(op->rep.word, "error"))
        return interrupted_suspend(op->pid, sig, r_proc == CTL_EXIT_OK);
    if (r == CTL_EXIT_OK)
        return r;
    if (r_proc == CTL_EXIT_OK) {
        /* the driver's step failed: the process is suspended, with its context */
        if (undo_suspend(op->pid) < 0)
            return left_suspended(op->pid);
        gpuckpt_error("suspend %d: suspend undone, the process runs", (int)op->pid);
        return r;
    }
    /* the process's own suspend failed and could not put the memory back (a
     * refusal, of a process suspended already, changed nothing) */
    if (op->rep.err && r != CTL_EXIT_REFUSED && ctl_get_status(&op->rep, &st) == 0 &&
        st.state == TCGPU_STATE_SUSPENDED)
        return left_suspended(op->pid);
    return r;
}

/*
 * Suspend by the process itself, then the driver's step unless
 * --keep-context. SIGINT, SIGTERM and SIGHUP from here on undo it.
 */
static int suspend_directly(struct op *op, struct op_result *res)
{
    int lock = lock_process(op->pid);
    int r_proc, r = gpuckpt_interrupt_catch();

    if (r < 0) {
        gpuckpt_error("suspend %d: cannot catch signals: %s", (int)op->pid, strerror(-r));
        unlock_process(lock);
        return CTL_EXIT_FAILED;
    }
    op->o.cut_on_signal = 1;
    r = r_proc = op_call(op);
    res->context = "kept";
    if (r == CTL_EXIT_OK && !op->o.keep_context && !gpuckpt_interrupted())
        r = release_context(op->pid, &op->o, res);
    r = settle_suspend(op, r_proc, r);
    unlock_process(lock);
    return r;
}

/*
 * A process that runs because its last suspend failed (a signal's toggle
 * that timed out at the gate, say, which this resume waited for): there is
 * nothing to resume, and what the caller wanted holds: says so, returns
 * CTL_EXIT_OK. An exit code when the process cannot be asked (said), or -1:
 * send the resume (refused, exit 4, when the process simply runs). Status
 * answers while a suspend runs: its outcome is waited for (within
 * --timeout), as the resume would wait behind it in the process's queue.
 */
static int runs_after_failed_suspend(const struct op *op)
{
    uint64_t deadline = op->o.timeout_ms > 0 ? now_ns() + (uint64_t)op->o.timeout_ms * 1000000u : 0;
    struct tcgpu_status st;
    int r;

    while ((r = gpuckpt_call("status", op->pid, NULL, &st)) == CTL_EXIT_OK &&
           st.state == TCGPU_STATE_SUSPENDING && (!deadline || now_ns() < deadline))
        usleep(20000);
    if (r != CTL_EXIT_OK)
        return r;
    if (st.state != TCGPU_STATE_RUNNING || st.last_op != TCGPU_OP_SUSPEND || st.last_result == 0)
        return -1;
    if (!op->o.quiet)
        printf("process %d is running: its last suspend failed (%s: %s), so there was nothing to "
               "resume\n", (int)op->pid, errno_name(st.last_result), st.last_error);
    return CTL_EXIT_OK;
}

/* The driver's step first (the context back), then resume by the process itself. */
static int resume_directly(struct op *op, struct op_result *res)
{
    int taken, lock = lock_process(op->pid);
    int r = reacquire_context(op->pid, &taken);

    if (r == CTL_EXIT_OK && !taken) {
        int done = runs_after_failed_suspend(op);
        if (done >= 0) {
            /* no reply of a resume to report: the status the check read */
            memset(&op->rep, 0, sizeof(op->rep));
            res->said = 1;
            unlock_process(lock);
            return done;
        }
    }
    if (r == CTL_EXIT_OK) {
        r = op_call(op);
        if (r != CTL_EXIT_OK && r != CTL_EXIT_REFUSED && taken)
            rerelease_context(op->pid, &op->o);
    }
    res->context = taken ? "taken-back" : "held";
    unlock_process(lock);
    return r;
}

int gpuckpt_cmd_checkpoint(const struct gpuckpt_command *self, int argc, char **argv)
{
    struct op_result res = { .through = "process", .context = "held" };
    struct op *op;
    int r = op_start(self, argc, argv, DIR_REQUIRED, &op);

    if (!op)
        return r;
    r = op_call(op);
    if (r == CTL_EXIT_OK)
        r = report(op, &res);
    free(op);
    return r;
}

/*
 * suspend and resume: a job tcgpud manages goes through tcgpud, so that its
 * view stays true (and a manual suspension is not undone automatically);
 * any other process is asked directly.
 */
static int suspend_or_resume(const struct gpuckpt_command *self, int argc, char **argv,
                             int (*directly)(struct op *op, struct op_result *res))
{
    struct op_result res = { .through = "tcgpud", .context = "kept" };
    struct op *op;
    int r = op_start(self, argc, argv, DIR_OPTIONAL, &op);

    if (!op)
        return r;
    r = gpuckpt_tcgpud_op(op->cmd, op->pid, op->o.dir ? op->dir : NULL, op->o.auto_resume,
                          op->o.timeout_ms, &op->rep);
    if (r < 0) {
        res.through = "process";
        r = directly(op, &res);
    } else if (strcmp(op->cmd, "suspend")) {
        res.context = "held";
    }
    if (r == CTL_EXIT_OK)
        r = report(op, &res);
    free(op);
    return r;
}

int gpuckpt_cmd_suspend(const struct gpuckpt_command *self, int argc, char **argv)
{
    return suspend_or_resume(self, argc, argv, suspend_directly);
}

int gpuckpt_cmd_resume(const struct gpuckpt_command *self, int argc, char **argv)
{
    return suspend_or_resume(self, argc, argv, resume_directly);
}
