/*
 * ps.c - gpuckpt ps: the jobs tcgpud manages, or, without tcgpud, the
 * tcgpu processes this user can see (docs/cli.md).
 *
 * Without tcgpud (or with --local) the processes are found as nvidia-smi
 * finds GPU processes: every process in /proc that has libtcgpu.so mapped
 * (/proc/PID/maps is readable for one's own processes, and for all as root),
 * then each is asked its status over its control socket, which checks who
 * serves it (ctl_connect).
 */
#include <errno.h>
#include <getopt.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "commands.h"
#include "tcgpud.h"
#include "util.h"
#include "ctl/client.h"
#include "ctl/proto.h"
#include "common/names.h"
#include "common/proc.h"
#include "common/units.h"
#include "json/schema.h"

#define STATUS_TIMEOUT_MS 2000    /* a process inside an operation answers after it */

enum ps_source { PS_AUTO, PS_LOCAL, PS_DAEMON };

/*
 * Parses `self`'s options into *src. Returns 0, -1 when --help was shown,
 * or a usage exit code.
 */
static int ps_args(const struct gpuckpt_command *self, int argc, char **argv, enum ps_source *src)
{
    static const struct option longopts[] = {
        GPUCKPT_OUTPUT_LONGOPTS,
        { "local", no_argument, NULL, 'l' },
        { "daemon", no_argument, NULL, 'd' },
        { 0 },
    };
    int ch, r;

    *src = PS_AUTO;
    optind = 1;
    opterr = 0;
    while ((ch = getopt_long(argc, argv, "hjo:ld", longopts, NULL)) != -1) {
        if ((r = gpuckpt_output_option(self, ch)) != GPUCKPT_NOT_OUTPUT_OPTION) {
            if (r)
                return r;
        } else if (ch == 'l' || ch == 'd') {
            *src = ch == 'l' ? PS_LOCAL : PS_DAEMON;
        } else {
            return gpuckpt_option_error(self->name, argc, argv, "hjo:ld", longopts);
        }
    }
    if (optind != argc)
        return gpuckpt_usage_error(self->name, "no arguments, please");
    return 0;
}

/* ---------------------------------------------------------------------------
 * tcgpud's jobs
 * ------------------------------------------------------------------------- */

/* The messages of a ps reply, each its own copy. */
struct list {
    struct ctl_msg **v;
    size_t n;
};

static void collect(const struct ctl_msg *m, void *arg)
{
    struct list *l = arg;
    struct ctl_msg *copy = malloc(sizeof(*copy)), **v;
    struct ctl_buf *b = malloc(sizeof(*b));
    long n;

    if (!copy || !b)
        goto drop;
    /* The fields point into the message's own store: re-parse a copy. */
    ctl_buf_request(b, m->word);
    for (int i = 0; i < m->nfields; i++)
        ctl_buf_put(b, m->fields[i].key, m->fields[i].value);
    n = ctl_buf_finish(b);
    if (n < 0 || ctl_parse(b->data, (size_t)n, copy) < 0)
        goto drop;
    if (!(v = realloc(l->v, (l->n + 1) * sizeof(*v))))
        goto drop;
    l->v = v;
    l->v[l->n++] = copy;
    free(b);
    return;
drop:
    free(copy);
    free(b);
}

static void list_free(struct list *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
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

/* Who suspended a suspended job, or "borrowing"; its gang and compute share: the NOTE column. */
static void job_note(const struct ctl_msg *m, char *note, size_t len)
{
    const char *state = get(m, "state");

    note[0] = '\0';
    if (!strcmp(state, "suspended") || !strcmp(state, "suspending")) {
        if (!strcmp(get(m, "suspended_by"), "policy"))
            snprintf(note, len, "by policy for %s (%s)", get(m, "for"), get(m, "why"));
        else
            snprintf(note, len, "by hand%s", !strcmp(get(m, "auto_resume"), "1") ? ", auto-resume" : "");
    } else if (!strcmp(get(m, "borrowing"), "1")) {
        snprintf(note, len, "borrowing");
    }
    if (get(m, "job")[0]) {
        size_t n = strlen(note);
        snprintf(note + n, len - n, "%sjob %s", n ? "; " : "", get(m, "job"));
    }
    if (get_u64(m, "compute")) {
        size_t n = strlen(note);
        snprintf(note + n, len - n, "%scompute %llu%% (cap %llu%%)", n ? "; " : "",
                 (unsigned long long)get_u64(m, "compute") / 10,
                 (unsigned long long)get_u64(m, "compute_cap") / 10);
    }
}

static void jobs_text(const struct list *l)
{
    char a[32], b[32], note[128];
    int header = 0;

    for (size_t i = 0; i < l->n; i++) {
        const struct ctl_msg *m = l->v[i];
        if (!strcmp(m->word, "device"))
            printf("GPU %s%s%s%s: %s used of %s by managed jobs\n", get(m, "id"),
                   *get(m, "uuid") ? " (" : "", get(m, "uuid"), *get(m, "uuid") ? ")" : "",
                   gpuckpt_mib(get_u64(m, "used"), a, sizeof(a)),
                   gpuckpt_mib(get_u64(m, "capacity"), b, sizeof(b)));
    }
    for (size_t i = 0; i < l->n; i++) {
        const struct ctl_msg *m = l->v[i];
        if (strcmp(m->word, "job"))
            continue;
        if (!header++)
            printf("%-8s %-10s %-12s %5s %-10s %3s %10s %10s %9s %4s  %s\n", "PID", "USER", "PROJECT",
                   "PRIO", "STATE", "GPU", "MEMORY", "LIMIT", "RUNTIME", "PRE", "NOTE");
        job_note(m, note, sizeof(note));
        printf("%-8s %-10s %-12s %5s %-10s %3s %10s %10s %8.1fs %4s  %s\n", get(m, "pid"),
               get(m, "user"), get(m, "project"), get(m, "priority"), get(m, "state"),
               get(m, "device"), get_u64(m, "mem") ? gpuckpt_mib(get_u64(m, "mem"), a, sizeof(a)) : "-",
               get_u64(m, "limit") ? gpuckpt_mib(get_u64(m, "limit"), b, sizeof(b)) : "none",
               (double)get_u64(m, "runtime_ms") / 1000.0, get(m, "preemptions"), note);
    }
    if (!header)
        printf("no jobs\n");
}

/* The messages of l with this word, as an array of typed objects. */
static json_t *array_of(const struct list *l, const char *word, const struct tc_json_schema *s)
{
    json_t *a = json_array();

    for (size_t i = 0; a && i < l->n; i++)
        if (!strcmp(l->v[i]->word, word) && json_array_append_new(a, tc_json_from_msg(l->v[i], s)) < 0) {
            json_decref(a);
            a = NULL;
        }
    return a;
}

/* {"ok": true, "tcgpud": true, "devices": [...], "jobs": [...]} */
static int jobs_json(const struct list *l)
{
    json_t *o = json_object();

    if (o && (tc_json_set_bool(o, "ok", 1) < 0 || tc_json_set_bool(o, "tcgpud", 1) < 0 ||
              tc_json_set_new(o, "devices", array_of(l, "device", &tc_json_device_schema)) < 0 ||
              tc_json_set_new(o, "jobs", array_of(l, "job", &tc_json_job_schema)) < 0)) {
        json_decref(o);
        o = NULL;
    }
    return gpuckpt_print_json(o);
}

/* tcgpud's jobs. Returns an exit code: CTL_EXIT_NOPROC (said when !quiet) without tcgpud. */
static int daemon_jobs(int quiet)
{
    struct ctl_buf *req = malloc(sizeof(*req));
    struct ctl_msg *rep = malloc(sizeof(*rep));
    struct list l = { 0 };
    int r = CTL_EXIT_FAILED;

    if (!req || !rep)
        goto out;
    ctl_buf_request(req, "ps");
    r = gpuckpt_daemon_call("ps", req, rep, 30000, collect, &l, quiet);
    if (r == CTL_EXIT_OK && rep->err) {
        gpuckpt_note_errno(rep->err_name);
        gpuckpt_error("ps: %s: %s", rep->err_name, rep->err_text);
        r = ctl_exit_code(rep->err, 1);
    }
    if (r == CTL_EXIT_OK) {
        if (gpuckpt_json())
            r = jobs_json(&l);
        else
            jobs_text(&l);
    }
out:
    list_free(&l);
    free(req);
    free(rep);
    return r;
}

/* ---------------------------------------------------------------------------
 * The tcgpu processes this user can see
 * ------------------------------------------------------------------------- */

struct proc {
    pid_t pid;
    uid_t uid;
    char user[64];
    char comm[64];
    int reached;                /* its status is in st / rep */
    char error[512];            /* why not */
    struct ctl_msg *rep;
    struct tcgpu_status st;
};

static void proc_identity(struct proc *p)
{
    char buf[4096];
    struct passwd pw, *pwp = NULL;

    tcgpu_proc_comm(p->pid, 0, p->comm, sizeof(p->comm));
    if (tcgpu_proc_uid(p->pid, &p->uid) < 0)
        p->uid = (uid_t)-1;
    if (getpwuid_r(p->uid, &pw, buf, sizeof(buf), &pwp) == 0 && pwp)
        snprintf(p->user, sizeof(p->user), "%s", pw.pw_name);
    else
        snprintf(p->user, sizeof(p->user), "%u", (unsigned)p->uid);
}

/* Asks p for its status over its control socket. */
static void proc_status(struct proc *p)
{
    struct ctl_conn c;
    struct ctl_buf *req = malloc(sizeof(*req));
    long len;
    int r;

    p->rep = malloc(sizeof(*p->rep));
    if (!req || !p->rep) {
        snprintf(p->error, sizeof(p->error), "out of memory");
        goto out;
    }
    if ((r = ctl_connect(p->pid, getenv("TCGPU_RUN_DIR"), &c, p->error, sizeof(p->error))) < 0)
        goto out;
    ctl_buf_request(req, "status");
    len = ctl_buf_finish(req);
    r = ctl_call(&c, req->data, (size_t)len, p->rep, STATUS_TIMEOUT_MS, NULL, NULL);
    ctl_close(&c);
    if (r == -ETIMEDOUT)
        snprintf(p->error, sizeof(p->error), "busy: no answer within %d s (inside an operation?)",
                 STATUS_TIMEOUT_MS / 1000);
    else if (r < 0)
        snprintf(p->error, sizeof(p->error), "%s", strerror(-r));
    else if (p->rep->err)
        snprintf(p->error, sizeof(p->error), "%s: %s", p->rep->err_name, p->rep->err_text);
    else if (ctl_get_status(p->rep, &p->st) < 0)
        snprintf(p->error, sizeof(p->error), "malformed status");
    else
        p->reached = 1;
out:
    free(req);
}

static int by_pid(const void *a, const void *b)
{
    const struct proc *x = a, *y = b;
    return (x->pid > y->pid) - (x->pid < y->pid);
}

struct found {
    struct proc *v;
    size_t n, cap;
};

/* Adds pid to the list when it has libtcgpu.so mapped; -ENOMEM stops the walk. */
static int add_if_tcgpu(pid_t pid, void *arg)
{
    struct found *f = arg;
    struct proc *nv;

    if (pid == getpid() || !tcgpu_proc_maps_file(pid, "libtcgpu.so"))
        return 0;
    if (f->n == f->cap) {
        f->cap = f->cap ? 2 * f->cap : 16;
        if (!(nv = realloc(f->v, f->cap * sizeof(*nv))))
            return -ENOMEM;
        f->v = nv;
    }
    memset(&f->v[f->n], 0, sizeof(f->v[f->n]));
    f->v[f->n++].pid = pid;
    return 0;
}

/* Every process with libtcgpu.so mapped that this user may look at, by pid. */
static int find_processes(struct proc **out, size_t *n)
{
    struct found f = { 0 };
    int r = tcgpu_proc_each(add_if_tcgpu, &f);

    *n = 0;
    if (r < 0) {
        free(f.v);
        return r;
    }
    if (f.n)
        qsort(f.v, f.n, sizeof(*f.v), by_pid);
    *out = f.v;
    *n = f.n;
    return 0;
}

static void processes_text(const struct proc *v, size_t n)
{
    char a[32], b[32], t[32], last[96];

    if (!n) {
        printf("no tcgpu processes\n");
        return;
    }
    printf("%-8s %-10s %-12s %10s %10s  %-24s %s\n", "PID", "USER", "STATE", "GPU MEM", "TRACKED",
           "LAST OP", "COMMAND");
    for (size_t i = 0; i < n; i++) {
        const struct proc *p = &v[i];
        if (!p->reached) {
            printf("%-8d %-10s %-12s %10s %10s  %-24s %s  (%s)\n", (int)p->pid, p->user, "?", "-",
                   "-", "-", p->comm, p->error);
            continue;
        }
        if (p->st.last_op == TCGPU_OP_NONE)
            snprintf(last, sizeof(last), "-");
        else
            snprintf(last, sizeof(last), "%s %s %s", tcgpu_op_name(p->st.last_op),
                     p->st.last_result ? errno_name(p->st.last_result) : "ok",
                     units_format_ns(p->st.last_total_ns, t, sizeof(t)));
        printf("%-8d %-10s %-12s %10s %10s  %-24s %s\n", (int)p->pid, p->user,
               tcgpu_state_name(p->st.state), gpuckpt_mib(p->st.gpu_bytes, a, sizeof(a)),
               gpuckpt_mib(p->st.tracked_bytes, b, sizeof(b)), last, p->comm);
    }
}

/* {"pid", "uid", "user", "command", "status": {...} or null, "error": null or why} */
static json_t *process_object(const struct proc *p)
{
    json_t *o = json_object();
    json_t *st = p->reached ? tc_json_from_msg(p->rep, &tc_json_status_schema) : json_null();

    if (!o || !st || tc_json_set_int(o, "pid", p->pid) < 0 ||
        tc_json_set_int(o, "uid", p->uid == (uid_t)-1 ? -1 : (int64_t)p->uid) < 0 ||
        tc_json_set_string(o, "user", p->user) < 0 || tc_json_set_string(o, "command", p->comm) < 0 ||
        tc_json_set_new(o, "status", json_incref(st)) < 0 ||
        tc_json_set_string(o, "error", p->reached ? NULL : p->error) < 0) {
        json_decref(o);
        o = NULL;
    }
    json_decref(st);
    return o;
}

/* {"ok": true, "tcgpud": false, "processes": [...]} */
static int processes_json(const struct proc *v, size_t n)
{
    json_t *o = json_object(), *a = json_array();
    int bad = !o || !a;

    for (size_t i = 0; !bad && i < n; i++)
        bad = json_array_append_new(a, process_object(&v[i])) < 0;
    if (bad || tc_json_set_bool(o, "ok", 1) < 0 || tc_json_set_bool(o, "tcgpud", 0) < 0 ||
        tc_json_set_new(o, "processes", json_incref(a)) < 0) {
        json_decref(o);
        o = NULL;
    }
    json_decref(a);
    return gpuckpt_print_json(o);
}

static int local_processes(void)
{
    struct proc *v = NULL;
    size_t n;
    int r = find_processes(&v, &n);

    if (r < 0) {
        gpuckpt_error("ps: cannot list /proc: %s", strerror(-r));
        return CTL_EXIT_FAILED;
    }
    for (size_t i = 0; i < n; i++) {
        proc_identity(&v[i]);
        proc_status(&v[i]);
    }
    if (gpuckpt_json())
        r = processes_json(v, n);
    else
        processes_text(v, n);
    for (size_t i = 0; i < n; i++)
        free(v[i].rep);
    free(v);
    return r;
}

int gpuckpt_cmd_ps(const struct gpuckpt_command *self, int argc, char **argv)
{
    enum ps_source src;
    int r = ps_args(self, argc, argv, &src);

    if (r)
        return r < 0 ? CTL_EXIT_OK : r;
    if (src != PS_LOCAL) {
        r = daemon_jobs(src == PS_AUTO);
        if (r != CTL_EXIT_NOPROC || src == PS_DAEMON)
            return r;
        if (!gpuckpt_json())
            printf("tcgpud does not answer at %s: tcgpu processes %s\n",
                   gpuckpt_daemon_socket()[0] ? gpuckpt_daemon_socket() : "(TCGPU_DAEMON_SOCKET=off)",
                   geteuid() == 0 ? "of every user" : "of yours");
    }
    return local_processes();
}
