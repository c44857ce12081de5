/*
 * tcgpud.c - gpuckpt ps, gpuckpt events, `run --project`, and
 * suspend/resume through tcgpud. See tcgpud.h and commands.h.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ctl/client.h"
#include "ctl/proto.h"
#include "ctl/daemon_io.h"
#include "commands.h"
#include "tcgpud.h"
#include "util.h"
#include "common/units.h"

/* ---------------------------------------------------------------------------
 * run --project ...
 * ------------------------------------------------------------------------- */

int gpuckpt_tcgpud_run_option(int opt, const char *arg)
{
    uint64_t v;
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
            return gpuckpt_usage_error("run", "--priority wants an integer");
        setenv("TCGPU_PRIORITY", arg, 1);
        return 0;
    case GPUCKPT_OPT_GPU_MEM:
        if (units_parse_size(arg, &v) < 0 || v == 0)
            return gpuckpt_usage_error("run", "--gpu-mem wants a size, e.g. 8G or 512M");
        setenv("TCGPU_GPU_MEM", arg, 1);
        return 0;
    case GPUCKPT_OPT_WAIT_TIMEOUT:
        if (units_parse_duration(arg, &v) < 0)
            return gpuckpt_usage_error("run", "--wait-timeout wants a duration, e.g. 60s");
        setenv("TCGPU_WAIT_TIMEOUT", arg, 1);
        return 0;
    case GPUCKPT_OPT_DAEMON_SOCKET:
        setenv("TCGPU_DAEMON_SOCKET", arg, 1);
        return 0;
    }
    return gpuckpt_usage_error("run", "unknown option");
}

/* ---------------------------------------------------------------------------
 * Talking to tcgpud
 * ------------------------------------------------------------------------- */

struct list {
    struct ctl_msg **v;
    size_t n;
};

static void collect(const struct ctl_msg *m, void *arg)
{
    struct list *l = arg;
    struct ctl_msg *copy = malloc(sizeof(*copy)), **v;

    if (!copy)
        return;
    /* The fields point into the message's own store: re-parse a copy. */
    struct ctl_buf *b = malloc(sizeof(*b));
    if (!b) {
        free(copy);
        return;
    }
    ctl_buf_request(b, m->word);
    for (int i = 0; i < m->nfields; i++)
        ctl_buf_put(b, m->fields[i].key, m->fields[i].value);
    long n = ctl_buf_finish(b);
    v = realloc(l->v, (l->n + 1) * sizeof(*v));
    if (n < 0 || !v || ctl_parse(b->data, (size_t)n, copy) < 0) {
        if (v)
            l->v = v;
        free(copy);
        free(b);
        return;
    }
    free(b);
    l->v = v;
    l->v[l->n++] = copy;
}

static void list_free(struct list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
}

/* Connect and call; prints transport errors. Returns an exit code. */
static int daemon_call(const char *cmd, struct ctl_buf *req, struct ctl_msg *rep, int timeout_ms,
                       tcgpud_msg_fn fn, void *arg, int quiet_noent)
{
    char err[512];
    int fd = tcgpud_connect(tcgpud_socket_path(), err, sizeof(err));
    int r;

    if (fd < 0) {
        if (!quiet_noent)
            gpuckpt_error("%s: %s", cmd, err);
        return CTL_EXIT_NOPROC;
    }
    r = tcgpud_call(fd, req, rep, timeout_ms, fn, arg);
    close(fd);
    if (r < 0) {
        gpuckpt_error("%s: tcgpud at %s: %s", cmd, tcgpud_socket_path(),
                      r == -ETIMEDOUT ? "no reply in time" : strerror(-r));
        return ctl_exit_code(r, 0);
    }
    return CTL_EXIT_OK;
}

int gpuckpt_tcgpud_op(const char *cmd, pid_t pid, const char *dir, int auto_resume, int quiet,
                      int timeout_ms)
{
    struct ctl_buf *req = malloc(sizeof(*req));
    struct ctl_msg *rep = malloc(sizeof(*rep));
    struct tcgpu_status st;
    int r = -1;

    if (!req || !rep || !tcgpud_socket_path()[0] || access(tcgpud_socket_path(), F_OK) < 0)
        goto out;
    ctl_buf_request(req, cmd);
    ctl_buf_put_u64(req, "pid", (uint64_t)pid);
    if (dir)
        ctl_buf_put(req, "dir", dir);
    if (auto_resume)
        ctl_buf_put_u64(req, "auto_resume", 1);
    r = daemon_call(cmd, req, rep, timeout_ms, NULL, NULL, 1);
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
        gpuckpt_error("%s %d (through tcgpud): %s: %s", cmd, (int)pid, rep->err_name, rep->err_text);
        r = ctl_exit_code(rep->err, 1);
        goto out;
    }
    if (!quiet) {
        if (ctl_get_status(rep, &st) == 0 && st.last_total_ns)
            printf("process %d %s through tcgpud in %.1f ms%s\n", (int)pid,
                   strcmp(cmd, "suspend") ? "resumed" : "suspended", (double)st.last_total_ns / 1e6,
                   !strcmp(cmd, "suspend") ? (auto_resume ? " (resumed automatically when memory "
                                                            "fits)" : " (until gpuckpt resume)") : "");
        else
            printf("process %d %s through tcgpud\n", (int)pid,
                   strcmp(cmd, "suspend") ? "resumed" : "suspended");
    }
    r = CTL_EXIT_OK;
out:
    free(req);
    free(rep);
    return r;
}

/* ---------------------------------------------------------------------------
 * Output helpers
 * ------------------------------------------------------------------------- */

/*
 * A fraction tcgpud writes (latencies in milliseconds, "%.1f"), typed as a
 * JSON number in ps and events beside the integers (gpuckpt_is_integer).
 */
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

int gpuckpt_tcgpud_privileged(const char *word, pid_t pid, const char *dir, int detach)
{
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
    if (detach)
        ctl_buf_put(req, "detach", "1");
    /* no deadline: a save takes as long as the GPU images, a restore as the tree runs */
    r = daemon_call(word, req, rep, -1, print_line, NULL, 0);
    if (r != CTL_EXIT_OK) {
        if (r == CTL_EXIT_NOPROC)
            gpuckpt_error("%s: only root can run CRIU, and no tcgpud (at %s) does it for "
                          "this user", word, tcgpud_socket_path());
        goto out;
    }
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

static int is_decimal(const char *s)
{
    char *end;

    if (!*s || strchr(s, 'e') || strchr(s, 'n') || strchr(s, 'x'))
        return 0;
    strtod(s, &end);
    return *end == '\0' && s[0] != '.';
}

static void print_json_fields(FILE *f, const struct ctl_msg *m)
{
    fputc('{', f);
    for (int i = 0; i < m->nfields; i++) {
        fprintf(f, "%s\"%s\":", i ? "," : "", m->fields[i].key);
        if (gpuckpt_is_integer(m->fields[i].value) || is_decimal(m->fields[i].value))
            fputs(m->fields[i].value, f);
        else
            gpuckpt_json_string(f, m->fields[i].value);
    }
    fputc('}', f);
}

static const char *get(const struct ctl_msg *m, const char *k)
{
    const char *v = ctl_get(m, k);
    return v ? v : "";
}

static uint64_t get_u64(const struct ctl_msg *m, const char *k)
{
    uint64_t v = 0;
    ctl_get_u64(m, k, &v);
    return v;
}

static const char *mib(uint64_t b, char *buf, size_t len)
{
    if (b == 0)
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, "%.0f MiB", (double)b / 1048576.0);
    return buf;
}

/* ---------------------------------------------------------------------------
 * ps
 * ------------------------------------------------------------------------- */

/*
 * Parses `self`'s options: --json, and --follow where follow is not NULL.
 * Returns 0, -1 when --help was shown, or a usage exit code.
 */
static int simple_args(const struct gpuckpt_command *self, int argc, char **argv, int *json,
                       int *follow)
{
    const char *cmd = self->name;
    static const struct option longopts[] = {
        { "json", no_argument, NULL, 'j' },
        { "follow", no_argument, NULL, 'f' },
        { "help", no_argument, NULL, 'h' },
        { 0 },
    };
    int ch;

    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "hjf", longopts, NULL)) != -1) {
        switch (ch) {
        case 'h':
            gpuckpt_command_help(self);
            return -1;
        case 'j':
            *json = 1;
            break;
        case 'f':
            if (!follow)
                return gpuckpt_usage_error(cmd, "--follow is for events");
            *follow = 1;
            break;
        default:
            return gpuckpt_usage_error(cmd, "unknown option");
        }
    }
    if (optind != argc)
        return gpuckpt_usage_error(cmd, "no arguments, please");
    return 0;
}

static void ps_human(const struct list *l)
{
    char a[32], b[32], c[32];
    int header = 0;

    for (size_t i = 0; i < l->n; i++) {
        const struct ctl_msg *m = l->v[i];
        if (!strcmp(m->word, "device"))
            printf("GPU %s%s%s%s: %s used of %s by managed jobs\n", get(m, "id"),
                   *get(m, "uuid") ? " (" : "", get(m, "uuid"), *get(m, "uuid") ? ")" : "",
                   mib(get_u64(m, "used"), a, sizeof(a)), mib(get_u64(m, "capacity"), b, sizeof(b)));
    }
    for (size_t i = 0; i < l->n; i++) {
        const struct ctl_msg *m = l->v[i];
        if (strcmp(m->word, "job"))
            continue;
        if (!header++)
            printf("%-8s %-10s %-12s %5s %-10s %3s %10s %10s %9s %4s  %s\n", "PID", "USER", "PROJECT",
                   "PRIO", "STATE", "GPU", "MEMORY", "LIMIT", "RUNTIME", "PRE", "NOTE");
        char note[128] = "";
        if (!strcmp(get(m, "state"), "suspended") || !strcmp(get(m, "state"), "suspending")) {
            if (!strcmp(get(m, "suspended_by"), "policy"))
                snprintf(note, sizeof(note), "by policy for %s (%s)", get(m, "for"), get(m, "why"));
            else
                snprintf(note, sizeof(note), "by hand%s",
                         !strcmp(get(m, "auto_resume"), "1") ? ", auto-resume" : "");
        } else if (!strcmp(get(m, "borrowing"), "1")) {
            snprintf(note, sizeof(note), "borrowing");
        }
        printf("%-8s %-10s %-12s %5s %-10s %3s %10s %10s %8.1fs %4s  %s\n", get(m, "pid"),
               get(m, "user"), get(m, "project"), get(m, "priority"), get(m, "state"),
               get(m, "device"), mib(get_u64(m, "mem"), a, sizeof(a)),
               get_u64(m, "limit") ? mib(get_u64(m, "limit"), b, sizeof(b)) : "none",
               (double)get_u64(m, "runtime_ms") / 1000.0, get(m, "preemptions"), note);
        (void)c;
    }
    if (!header)
        printf("no jobs\n");
}

static void ps_json(const struct list *l)
{
    int first;

    printf("{\"devices\":[");
    first = 1;
    for (size_t i = 0; i < l->n; i++)
        if (!strcmp(l->v[i]->word, "device")) {
            printf("%s", first ? "" : ",");
            print_json_fields(stdout, l->v[i]);
            first = 0;
        }
    printf("],\"jobs\":[");
    first = 1;
    for (size_t i = 0; i < l->n; i++)
        if (!strcmp(l->v[i]->word, "job")) {
            printf("%s", first ? "" : ",");
            print_json_fields(stdout, l->v[i]);
            first = 0;
        }
    printf("]}\n");
}

int gpuckpt_cmd_ps(const struct gpuckpt_command *self, int argc, char **argv)
{
    struct ctl_buf *req = malloc(sizeof(*req));
    struct ctl_msg *rep = malloc(sizeof(*rep));
    struct list l = { 0 };
    int json = 0, r;

    if (!req || !rep) {
        r = CTL_EXIT_FAILED;
        goto out;
    }
    r = simple_args(self, argc, argv, &json, NULL);
    if (r) {
        r = r < 0 ? CTL_EXIT_OK : r;
        goto out;
    }
    ctl_buf_request(req, "ps");
    r = daemon_call("ps", req, rep, 30000, collect, &l, 0);
    if (r == CTL_EXIT_OK && rep->err) {
        gpuckpt_error("ps: %s: %s", rep->err_name, rep->err_text);
        r = ctl_exit_code(rep->err, 1);
    }
    if (r == CTL_EXIT_OK) {
        if (json)
            ps_json(&l);
        else
            ps_human(&l);
    }
out:
    list_free(&l);
    free(req);
    free(rep);
    return r;
}

/* ---------------------------------------------------------------------------
 * events
 * ------------------------------------------------------------------------- */

struct events_view {
    int json;
};

static void print_event(const struct ctl_msg *m, void *arg)
{
    const struct events_view *v = arg;
    static const char *const shown[] = { "seq", "time_ms", "type", "pid", "user", "project",
                                         "priority", NULL };
    time_t t;
    struct tm tm;
    char when[32];

    if (strcmp(m->word, "event"))
        return;
    if (v->json) {
        print_json_fields(stdout, m);
        putchar('\n');
        fflush(stdout);
        return;
    }
    uint64_t ms = get_u64(m, "time_ms");
    t = (time_t)(ms / 1000);
    localtime_r(&t, &tm);
    strftime(when, sizeof(when), "%H:%M:%S", &tm);
    printf("%s.%03u  %-14s", when, (unsigned)(ms % 1000), get(m, "type"));
    if (ctl_get(m, "pid"))
        printf(" pid %s (%s, prio %s)", get(m, "pid"), get(m, "project"), get(m, "priority"));
    for (int i = 0; i < m->nfields; i++) {
        int skip = 0;
        for (int k = 0; shown[k]; k++)
            skip |= !strcmp(shown[k], m->fields[i].key);
        if (!skip && m->fields[i].value[0])
            printf(" %s=%s", m->fields[i].key, m->fields[i].value);
    }
    putchar('\n');
    fflush(stdout);
}

int gpuckpt_cmd_events(const struct gpuckpt_command *self, int argc, char **argv)
{
    struct ctl_buf *req = malloc(sizeof(*req));
    struct ctl_msg *rep = malloc(sizeof(*rep));
    struct events_view v = { 0 };
    int follow = 0, r;

    if (!req || !rep) {
        r = CTL_EXIT_FAILED;
        goto out;
    }
    r = simple_args(self, argc, argv, &v.json, &follow);
    if (r) {
        r = r < 0 ? CTL_EXIT_OK : r;
        goto out;
    }
    ctl_buf_request(req, "events");
    if (follow)
        ctl_buf_put_u64(req, "follow", 1);
    /* with --follow there is no final reply: events until tcgpud goes away or ^C */
    r = daemon_call("events", req, rep, follow ? -1 : 30000, print_event, &v, 0);
    if (r == CTL_EXIT_OK && rep->err) {
        gpuckpt_error("events: %s: %s", rep->err_name, rep->err_text);
        r = ctl_exit_code(rep->err, 1);
    }
out:
    free(req);
    free(rep);
    return r;
}
