/*
 * tcgpud - the node's GPU policy daemon: priorities, reservations,
 * borrowing, preemption by transparent suspend, automatic resume.
 *
 *   tcgpud [--config FILE] [--socket PATH] [--state FILE]
 *
 * Foreground, logs to stderr. Decisions come from lib/policy/policy.c; tcgpud
 * carries them out by talking to each job's control socket (suspend,
 * resume, status), persists its jobs to a state file, and re-learns them
 * from it and from the jobs themselves when it starts again.
 * docs/tcgpud.md describes the protocol, the policy and the security model.
 *
 * This file: start-up, the tick and the event loop; daemon.h says what the
 * others (connections, jobs, commands, metrics) hold.
 */
#include <errno.h>
#include <getopt.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <time.h>
#include <unistd.h>

#include "ctl/client.h"
#include "common/clock.h"
#include "daemon.h"
#include "state.h"

#define TICK_MS          500

struct daemon d = { .listen_fd = -1, .sig_fd = -1 };

struct pol_actions acts;

/* ---------------------------------------------------------------------------
 * Log
 * ------------------------------------------------------------------------- */

void logmsg(const char *fmt, ...)
{
    va_list ap;
    char when[16];

    fprintf(stderr, "tcgpud %s: ", wall_hms(when));
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* ---------------------------------------------------------------------------
 * Tick
 * ------------------------------------------------------------------------- */

static void check_deaths(void)
{
    for (size_t i = 0; i < d.njobs;) {
        struct djob *j = &d.jobs[i];
        if (tcgpud_proc_start_ticks(j->pid) != j->start_ticks) {
            job_gone(j, "exited");
            continue;
        }
        i++;
    }
}

static void check_deadlines(void)
{
    uint64_t now = now_ns();

    for (int ci = 0; ci < MAX_CONNS; ci++) {
        struct conn *c = &d.conns[ci];
        if (c->kind == C_READ && now > c->deadline_ns) {
            conn_close(ci);
        } else if (c->kind == C_REQUEST && c->deadline_ns && now > c->deadline_ns) {
            struct djob *j = job_of(c->job);
            const struct pol_job *pj = j ? policy_job(d.pol, (uint64_t)j->pid) : NULL;
            /* only a request still waiting for room times out; one whose
             * victims are being suspended gets its answer from their acks */
            if (pj && pj->req == POL_REQ_PREEMPTING)
                continue;
            if (j && policy_request_cancel(d.pol, (uint64_t)j->pid, now, &acts) == 0)
                do_actions(&acts);
            else if (d.conns[ci].kind != C_FREE)
                reply_error(ci, -ENOMEM, "no room within the wait timeout");
        }
    }
}

static void tick(void)
{
    check_deaths();
    check_deadlines();
    if (policy_tick(d.pol, now_ns(), &acts) == 0)
        do_actions(&acts);
    else
        pol_actions_clear(&acts);
    kick_poll();
    write_metrics();
}

/* ---------------------------------------------------------------------------
 * Start-up: configuration, policy, re-learning jobs
 * ------------------------------------------------------------------------- */

static int build_policy(void)
{
    struct pol_config pc = { .min_runtime_ns = d.cfg.min_runtime_ns,
                             .resume_retry_ns = d.cfg.resume_retry_ns };

    d.pol = policy_new(&pc);
    if (!d.pol)
        return -ENOMEM;
    for (int i = 0; i < d.cfg.ngpus; i++)
        if (policy_set_device(d.pol, d.cfg.gpus[i].id, d.cfg.gpus[i].capacity) < 0)
            return -EINVAL;
    for (int i = 0; i < d.cfg.nprojects; i++)
        if (policy_add_project(d.pol, &d.cfg.projects[i].pol) < 0)
            return -EINVAL;
    return 0;
}

/* Ask the job itself how it is (synchronously: at start-up nothing else runs yet). */
static int job_status(pid_t pid, struct tcgpu_status *st, char *err, size_t errlen)
{
    struct ctl_conn c;
    struct ctl_buf *req = malloc(sizeof(*req));
    struct ctl_msg *rep = malloc(sizeof(*rep));
    long len;
    int r = -ENOMEM;

    if (!req || !rep)
        goto out;
    r = ctl_connect(pid, &c, err, errlen);
    if (r < 0)
        goto out;
    ctl_buf_request(req, "status");
    len = ctl_buf_finish(req);
    r = ctl_call(&c, req->data, (size_t)len, rep, 5000, NULL, NULL);
    ctl_close(&c);
    if (r == 0 && (rep->err || ctl_get_status(rep, st) < 0))
        r = rep->err ? rep->err : -EPROTO;
    if (r < 0)
        snprintf(err, errlen, "status of process %d: %s", (int)pid, strerror(-r));
out:
    free(req);
    free(rep);
    return r;
}

static void relearn_one(const struct tcgpud_saved_job *s)
{
    struct pol_job_spec spec = { .id = (uint64_t)s->pid, .priority = s->priority,
                                 .device = s->device, .limit = s->limit,
                                 .preemptions = s->preemptions, .run_ns = s->run_ns };
    struct tcgpu_status st;
    char err[512];
    int proj = policy_project_find(d.pol, s->project);

    if (tcgpud_proc_start_ticks(s->pid) != s->start_ticks) {
        logmsg("pid %d (project %s) ended while tcgpud was away", (int)s->pid, s->project);
        return;
    }
    if (proj < 0) {
        logmsg("pid %d: project %s is no longer configured; not managing it", (int)s->pid, s->project);
        return;
    }
    if (job_status(s->pid, &st, err, sizeof(err)) < 0) {
        logmsg("pid %d: %s; not managing it", (int)s->pid, err);
        return;
    }
    if (s->uuid[0] && gpu_relearn(s->device, s->uuid) < 0)
        logmsg("pid %d: GPU %d was %s, which tcgpud now numbers otherwise; accounting it to GPU %d",
               (int)s->pid, s->device, s->uuid, s->device);
    learn_device(s->device, s->dev_capacity);
    spec.project = proj;
    if (st.state == TCGPU_STATE_SUSPENDED) {
        spec.state = POL_SUSPENDED;
        spec.mem = s->mem ? s->mem : st.tracked_bytes;
        /* Saved as running but suspended now: someone did it by hand meanwhile. */
        spec.suspended_by = !strcmp(s->state, "suspended") ? (enum pol_by)pol_by_parse(s->suspended_by)
                                                           : POL_BY_MANUAL;
        if ((int)spec.suspended_by <= 0)
            spec.suspended_by = POL_BY_MANUAL;
        spec.auto_resume = s->auto_resume;
    } else {
        spec.state = POL_RUNNING;
        spec.mem = st.gpu_bytes;
    }
    if (policy_admit(d.pol, &spec, now_ns()) < 0 ||
        !add_job(s->pid, s->uid, s->user, proj, s->start_ticks)) {
        logmsg("pid %d: cannot re-admit it", (int)s->pid);
        return;
    }
    logmsg("pid %d re-learnt: project %s, %s%s", (int)s->pid, s->project, pol_state_name(spec.state),
           spec.state == POL_SUSPENDED ? (spec.suspended_by == POL_BY_MANUAL ? " (by hand)" : " (by policy)") : "");
    event("relearnt", s->pid, "state", pol_state_name(spec.state), NULL);
}

static void relearn(void)
{
    struct tcgpud_saved_job *v;
    size_t n;
    char err[512];

    if (tcgpud_state_load(d.cfg.state_file, &v, &n, err, sizeof(err)) < 0) {
        logmsg("%s: starting without the jobs it held", err);
        return;
    }
    for (size_t i = 0; i < n; i++)
        relearn_one(&v[i]);
    free(v);
    d.dirty = 1;
}

/* ---------------------------------------------------------------------------
 * Main
 * ------------------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f, "usage: tcgpud [--config FILE] [--socket PATH] [--state FILE]\n"
               "\n"
               "The GPU policy daemon: priorities, reservations, borrowing, preemption by\n"
               "transparent suspend, automatic resume. Runs in the foreground, logs to stderr.\n"
               "Must run as root (or as the jobs' own user on a single-user machine): it\n"
               "suspends and resumes jobs through their control sockets.\n"
               "\n"
               "  -c, --config FILE   configuration (default /etc/tcgpud.ini; docs/tcgpud.md)\n"
               "  -s, --socket PATH   override [daemon] socket\n"
               "  -S, --state FILE    override [daemon] state_file\n");
}

static int parse_args(int argc, char **argv, const char **config, const char **sock,
                      const char **state)
{
    static const struct option longopts[] = {
        { "config", required_argument, NULL, 'c' },
        { "socket", required_argument, NULL, 's' },
        { "state", required_argument, NULL, 'S' },
        { "help", no_argument, NULL, 'h' },
        { "version", no_argument, NULL, 'V' },
        { 0 },
    };
    int ch;

    while ((ch = getopt_long(argc, argv, "c:s:S:hV", longopts, NULL)) != -1) {
        switch (ch) {
        case 'c': *config = optarg; break;
        case 's': *sock = optarg; break;
        case 'S': *state = optarg; break;
        case 'h': usage(stdout); exit(0);
        case 'V': printf("tcgpud %s\n", TCGPU_VERSION_STRING); exit(0);
        default: usage(stderr); return -1;
        }
    }
    if (optind != argc) {
        usage(stderr);
        return -1;
    }
    return 0;
}

static int setup(int argc, char **argv)
{
    const char *config = "/etc/tcgpud.ini", *sock = NULL, *state = NULL;
    char err[1024];
    sigset_t mask;

    if (parse_args(argc, argv, &config, &sock, &state) < 0)
        return 2;
    if (tcgpud_config_load(&d.cfg, config, err, sizeof(err)) < 0) {
        fprintf(stderr, "tcgpud: %s\n", err);
        return 1;
    }
    if (sock)
        snprintf(d.cfg.socket, sizeof(d.cfg.socket), "%s", sock);
    if (state)
        snprintf(d.cfg.state_file, sizeof(d.cfg.state_file), "%s", state);
    if (build_policy() < 0) {
        fprintf(stderr, "tcgpud: cannot build the policy from %s\n", config);
        return 1;
    }
    if (geteuid() != 0)
        logmsg("not running as root: only jobs of uid %u can be suspended and resumed",
               (unsigned)geteuid());
    sigemptyset(&mask);
    sigaddset(&mask, SIGTERM);
    sigaddset(&mask, SIGINT);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    signal(SIGPIPE, SIG_IGN);
    d.sig_fd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    if (d.sig_fd < 0 || tcgpud_work_init() < 0) {
        fprintf(stderr, "tcgpud: signalfd/eventfd: %s\n", strerror(errno));
        return 1;
    }
    d.start_ns = now_ns();
    relearn();
    d.listen_fd = open_socket(d.cfg.socket);
    if (d.listen_fd < 0)
        return 1;
    logmsg("serving %s (config %s, state %s, %d projects, min runtime %.1f s)", d.cfg.socket,
           config, d.cfg.state_file, d.cfg.nprojects, (double)d.cfg.min_runtime_ns / 1e9);
    return 0;
}

static void loop(void)
{
    struct pollfd p[3 + MAX_CONNS];
    int idx[MAX_CONNS];
    uint64_t next_tick = now_ns();

    while (!d.stop) {
        int n = 3, wait;
        p[0] = (struct pollfd){ .fd = d.listen_fd, .events = POLLIN };
        p[1] = (struct pollfd){ .fd = tcgpud_work_fd(), .events = POLLIN };
        p[2] = (struct pollfd){ .fd = d.sig_fd, .events = POLLIN };
        for (int ci = 0; ci < MAX_CONNS; ci++) {
            if (d.conns[ci].kind == C_FREE)
                continue;
            idx[n - 3] = ci;
            p[n++] = (struct pollfd){ .fd = d.conns[ci].fd, .events = POLLIN };
        }
        uint64_t now = now_ns();
        wait = now >= next_tick ? 0 : (int)((next_tick - now) / 1000000u) + 1;
        if (poll(p, (nfds_t)n, wait) < 0 && errno != EINTR) {
            logmsg("poll: %s", strerror(errno));
            break;
        }
        if (p[2].revents) {
            struct signalfd_siginfo si;
            if (read(d.sig_fd, &si, sizeof(si)) > 0)
                logmsg("signal %u: stopping (jobs keep running)", si.ssi_signo);
            d.stop = 1;
        }
        if (p[1].revents)
            take_work();
        for (int k = 3; k < n; k++) {
            int ci = idx[k - 3];
            if (!p[k].revents || d.conns[ci].kind == C_FREE || d.conns[ci].fd != p[k].fd)
                continue;
            if (d.conns[ci].kind == C_READ)
                read_request(ci);
            else
                peer_gone(ci);    /* waiting clients send nothing more: readable means gone */
        }
        if (p[0].revents)
            accept_all();
        if (now_ns() >= next_tick) {
            tick();
            next_tick = now_ns() + TICK_MS * 1000000ull;
        }
        if (d.dirty)
            save_state();
    }
}

int main(int argc, char **argv)
{
    int r = setup(argc, argv);

    if (r)
        return r;
    loop();
    save_state();
    unlink(d.cfg.socket);
    for (int ci = 0; ci < MAX_CONNS; ci++)
        conn_close(ci);
    pol_actions_free(&acts);
    policy_free(d.pol);
    free(d.jobs);
    tcgpud_config_free(&d.cfg);
    return 0;
}
